//! `pod-readiness-controller`: with the `KruisePodReadinessGate` gate the Pod webhook gives every new
//! Pod the `KruisePodReady` readiness gate, so that a lifecycle hook (`markPodNotReady`) can take
//! any Pod out of Service endpoints. A readiness gate without its condition keeps a Pod unready
//! forever, so this controller sets `KruisePodReady=True` on every Pod that has the gate and no such
//! condition yet, as OpenKruise's `pkg/controller/podreadiness` does. It never changes a condition
//! that exists: whoever set it (a hook marking the Pod not ready) owns it.
//!
//! It reads the shared Pod cache (no watch of its own) and writes each condition with the Pod's
//! resourceVersion as a precondition, so that a condition set meanwhile by someone else is never
//! overwritten: on a conflict the Pod's next change brings it back here.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kube::api::{Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cache::PodCache;
use crate::driver::writes::{ApiWrites, Writer, Writes};

pub const CONTROLLER: &str = "pod-readiness-controller";

/// How soon a write that failed for another reason than a conflict is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// Whether `pod` waits on a `KruisePodReady` condition nobody has set: it has the readiness gate,
/// no such condition, and is not being deleted.
pub fn needs_condition(pod: &Pod) -> bool {
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|gates| {
            gates
                .iter()
                .any(|g| g.condition_type == keys::CONDITION_KRUISE_POD_READY)
        });
    let has_condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == keys::CONDITION_KRUISE_POD_READY)
        });
    gated && !has_condition && pod.metadata.deletion_timestamp.is_none()
}

/// The status patch setting `KruisePodReady=True`, valid only over `resource_version`.
fn condition_patch(resource_version: &str, now: Timestamp) -> serde_json::Value {
    json!({
        "metadata": {"resourceVersion": resource_version},
        "status": {"conditions": [{
            "type": keys::CONDITION_KRUISE_POD_READY,
            "status": "True",
            "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }]},
    })
}

/// What became of one write.
enum Written {
    Done,
    /// The Pod changed or went away meanwhile: its next change (if any) decides again.
    Stale,
    Failed,
}

async fn set_condition(writes: &Arc<dyn Writes>, pod: &Pod) -> Written {
    let (Some(namespace), Some(version)) = (pod.namespace(), pod.resource_version()) else {
        return Written::Stale;
    };
    let api = Writer::<Pod>::namespaced(writes.clone(), &namespace);
    let patch = condition_patch(&version, Timestamp::now());
    match api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => {
            tracing::debug!(namespace, pod = pod.name_any(), "set KruisePodReady=True");
            Written::Done
        }
        Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Written::Stale,
        Err(error) => {
            tracing::warn!(namespace, pod = pod.name_any(), %error, "cannot set KruisePodReady=True; retrying");
            Written::Failed
        }
    }
}

struct Readiness {
    writes: Arc<dyn Writes>,
}

impl crate::podworker::PodWorker for Readiness {
    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn wanted(&self, pod: &Pod) -> bool {
        needs_condition(pod)
    }

    async fn turn(&mut self, pod: &Pod) -> bool {
        !matches!(set_condition(&self.writes, pod).await, Written::Failed)
    }
}

/// Runs until the Pod cache is gone.
pub async fn run(client: Client, pods: Arc<PodCache>) {
    let writes = ApiWrites::new(client);
    crate::podworker::drive(pods, RETRY, Readiness { writes }).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(gates: &[&str], conditions: &[&str], deleting: bool) -> Pod {
        let gates: Vec<_> = gates.iter().map(|g| json!({"conditionType": g})).collect();
        let conditions: Vec<_> = conditions
            .iter()
            .map(|c| json!({"type": c, "status": "False"}))
            .collect();
        let mut meta = json!({"name": "p", "namespace": "ns"});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "metadata": meta,
            "spec": {"containers": [{"name": "c"}], "readinessGates": gates},
            "status": {"conditions": conditions},
        }))
        .expect("pod")
    }

    #[test]
    fn which_pods_get_the_condition() {
        let ready = keys::CONDITION_KRUISE_POD_READY;
        let other = keys::CONDITION_IN_PLACE_UPDATE_READY;
        // (readiness gates, conditions, being deleted, needs the condition)
        let cases: &[(&[&str], &[&str], bool, bool)] = &[
            (&[ready], &[], false, true),
            (&[other, ready], &[other], false, true),
            // A condition someone set (False by a hook) is theirs.
            (&[ready], &[ready], false, false),
            (&[other], &[], false, false),
            (&[], &[], false, false),
            (&[ready], &[], true, false),
        ];
        for (i, (gates, conditions, deleting, want)) in cases.iter().enumerate() {
            assert_eq!(
                needs_condition(&pod(gates, conditions, *deleting)),
                *want,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_write_is_guarded_by_the_resource_version() {
        let now: Timestamp = "2026-01-02T03:04:05Z".parse().expect("time");
        assert_eq!(
            condition_patch("42", now),
            json!({"metadata": {"resourceVersion": "42"},
                   "status": {"conditions": [{"type": "KruisePodReady", "status": "True",
                                              "lastTransitionTime": "2026-01-02T03:04:05Z"}]}})
        );
    }

    #[tokio::test]
    async fn the_condition_is_set_over_the_version_read_and_refusals_by_code() {
        use crate::driver::writes::fake::{FakeCluster, Verb};
        let cluster = FakeCluster::new();
        let seen = cluster.insert(&pod(&[keys::CONDITION_KRUISE_POD_READY], &[], false));
        let writes: Arc<dyn Writes> = cluster.clone();
        assert!(matches!(set_condition(&writes, &seen).await, Written::Done));
        let written: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        assert!(!needs_condition(&written), "KruisePodReady is set");

        // A copy older than the Pod: not written over.
        let cluster = FakeCluster::new();
        let seen = cluster.insert(&pod(&[keys::CONDITION_KRUISE_POD_READY], &[], false));
        cluster.touch::<Pod>(Some("ns"), "p");
        let writes: Arc<dyn Writes> = cluster.clone();
        assert!(matches!(
            set_condition(&writes, &seen).await,
            Written::Stale
        ));
        let kept: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        assert!(needs_condition(&kept));

        // (code, what the turn comes to)
        for (code, failed) in [(404, false), (409, false), (422, true), (500, true)] {
            let cluster = FakeCluster::new();
            let seen = cluster.insert(&pod(&[keys::CONDITION_KRUISE_POD_READY], &[], false));
            cluster.fail_next(Verb::PatchStatus, "p", code);
            let writes: Arc<dyn Writes> = cluster.clone();
            let written = set_condition(&writes, &seen).await;
            assert_eq!(matches!(written, Written::Failed), failed, "{code}");
        }
    }
}
