//! PersistentPodStates generated from workload annotations (upstream's `generate#...` requests):
//! a StatefulSet (Kubernetes' or kruise's) annotated `kruise.io/auto-generate-persistent-pod-state:
//! "true"` with a required or preferred topology gets a PersistentPodState of its name, controlled
//! by it, whose spec follows the annotations; removing the annotation deletes it.
//!
//! The shared caches of both StatefulSet kinds drive it; each change of a StatefulSet also wakes the
//! PersistentPodState targeting it (replicas or deletion changed what it keeps).

use std::collections::BTreeMap;
use std::sync::Arc;

use kruise_api::persistentpodstate::{PersistentPodState, TargetReference};
use kruise_core::persistentpodstate::{self as decide, Generation, Workload};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::driver::caches::{Caches, Shared};
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

/// What the generation of one workload kind shares.
pub struct Context {
    writes: Arc<dyn Writes>,
    states: Store<PersistentPodState>,
    wake: mpsc::UnboundedSender<ObjectRef<PersistentPodState>>,
    metrics: Arc<Metrics>,
    /// The apiVersion written in the generated targetRef and owner reference.
    api_version: &'static str,
}

crate::driver::driven!(Context, super::CONTROLLER);

/// Runs the generation for both StatefulSet kinds, from the shared caches (the metadata of
/// Kubernetes' StatefulSets, kruise's Advanced StatefulSets), until the future is dropped.
pub async fn run(
    client: Client,
    caches: &Caches,
    wake: mpsc::UnboundedSender<ObjectRef<PersistentPodState>>,
    metrics: Arc<Metrics>,
    workers: u16,
) {
    let states = caches.persistentpodstates.store().clone();
    let writes: Arc<dyn Writes> = ApiWrites::new(client);
    let native = run_kind(
        &caches.statefulsets,
        Context {
            writes: writes.clone(),
            states: states.clone(),
            wake: wake.clone(),
            metrics: metrics.clone(),
            api_version: "apps/v1",
        },
        workers,
    );
    let kruise = run_kind(
        &caches.advanced_statefulsets,
        Context {
            writes,
            states,
            wake,
            metrics,
            api_version: kruise_api::kinds::V1BETA1,
        },
        workers,
    );
    tokio::join!(native, kruise);
}

async fn run_kind<K>(workloads: &Shared<K>, ctx: Context, workers: u16)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let controller = Controller::for_stream(workloads.replayed_stream(), workloads.store().clone());
    ctx.states.wait_until_ready().await.ok();
    crate::driver::run(controller, workers, reconcile::<K>, Arc::new(ctx)).await;
}

/// `K` is the workload or its metadata: only its metadata is read.
async fn reconcile<K>(workload: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
{
    let namespace = workload.namespace().unwrap_or_default();
    let name = workload.name_any();
    let kind = K::kind(&());
    let Some(uid) = workload.uid() else {
        return Ok(Action::await_change());
    };
    // The PersistentPodState keeping this workload's Pods recomputes (scale, deletion).
    let owner = TargetReference {
        api_version: ctx.api_version.into(),
        kind: kind.to_string(),
        name: name.clone(),
    };
    for pps in super::targeting(&ctx.states, &namespace, &owner) {
        let _ = ctx.wake.send(pps);
    }
    if workload.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let annotations: BTreeMap<String, String> = workload.annotations().clone();
    let generation = decide::generation(&Workload {
        api_version: ctx.api_version,
        kind: &kind,
        namespace: &namespace,
        name: &name,
        uid: &uid,
        annotations: &annotations,
    });
    let existing = ctx
        .states
        .get(&ObjectRef::<PersistentPodState>::new(&name).within(&namespace));
    let api = Writer::<PersistentPodState>::namespaced(ctx.writes.clone(), &namespace);
    let key = format!("{namespace}/{name}");
    match (generation, existing) {
        (Generation::Incomplete, _) => {
            tracing::info!(workload = %key, kind = %kind, "auto-generate-persistent-pod-state without a required or preferred topology: nothing generated");
        }
        (Generation::Keep(wanted), None) => {
            match api.create(&PostParams::default(), &wanted).await {
                Ok(_) => {
                    tracing::info!(workload = %key, kind = %kind, "generated its PersistentPodState")
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(source) => {
                    return Err(Error::Kube {
                        context: format!("creating the PersistentPodState of {kind} {key}"),
                        source,
                    });
                }
            }
        }
        (Generation::Keep(wanted), Some(existing)) => {
            if let Some(spec) = decide::spec_update(&existing, &wanted) {
                let before = serde_json::to_value(&existing.spec).unwrap_or_default();
                let after = serde_json::to_value(&spec).unwrap_or_default();
                let patch = json!({
                    "metadata": {"resourceVersion": existing.resource_version()},
                    "spec": decide::merge_diff(&before, &after).unwrap_or_default(),
                });
                match api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(workload = %key, kind = %kind, "updated its generated PersistentPodState")
                    }
                    // Changed since read: the watch brings the newer copy; decide again.
                    Err(error) if is_race(&error) => {
                        return Ok(Action::requeue(crate::driver::ERROR_REQUEUE));
                    }
                    Err(source) => {
                        return Err(Error::Kube {
                            context: format!("updating the PersistentPodState of {kind} {key}"),
                            source,
                        });
                    }
                }
            }
        }
        (Generation::Remove, Some(existing)) if decide::controlled_by(&existing, &uid) => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: existing.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {
                    tracing::info!(workload = %key, kind = %kind, "deleted its generated PersistentPodState")
                }
                Err(error) if is_race(&error) => {}
                Err(source) => {
                    return Err(source).context(|| {
                        format!("deleting the generated PersistentPodState of {kind} {key}")
                    });
                }
            }
        }
        (Generation::Remove, _) => {}
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kruise_api::persistentpodstate as api;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb, listed};

    fn statefulset(annotations: serde_json::Value) -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "web-uid",
                         "annotations": annotations},
            "spec": {"selector": {}, "template": {}, "serviceName": "web"},
        }))
        .expect("a StatefulSet")
    }

    fn context(cluster: &Arc<FakeCluster>) -> Arc<Context> {
        let (wake, _) = mpsc::unbounded_channel();
        let mut registry = prometheus_client::registry::Registry::default();
        Arc::new(Context {
            writes: cluster.clone(),
            states: listed(cluster.all::<PersistentPodState>(Some("ns"))),
            wake,
            metrics: Metrics::register(&mut registry),
            api_version: "apps/v1",
        })
    }

    /// The annotations ask for a PersistentPodState: it is created once, controlled by the
    /// workload; without the annotation it is deleted (only the one of this uid).
    #[tokio::test]
    async fn a_generated_state_follows_the_annotations() {
        let cluster = FakeCluster::new();
        let asked = statefulset(json!({
            api::ANNOTATION_AUTO_GENERATE: "true",
            api::ANNOTATION_REQUIRED_TOPOLOGY: "topology.kubernetes.io/zone",
        }));
        reconcile(Arc::new(asked.clone()), context(&cluster))
            .await
            .expect("reconciled");
        let state: PersistentPodState = cluster.get(Some("ns"), "web").expect("generated");
        let owner = state
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .expect("controlled");
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("StatefulSet", "web-uid")
        );
        assert_eq!(state.spec.target_reference.name, "web");

        // Seen in the cache: nothing written again.
        let before = cluster.records().len();
        reconcile(Arc::new(asked), context(&cluster))
            .await
            .expect("reconciled");
        assert_eq!(cluster.records().len(), before);

        // The annotation removed: deleted, preconditioned on its uid.
        reconcile(Arc::new(statefulset(json!({}))), context(&cluster))
            .await
            .expect("reconciled");
        assert!(
            cluster
                .get::<PersistentPodState>(Some("ns"), "web")
                .is_none()
        );
        assert_eq!(
            cluster.done().last().cloned(),
            Some((Verb::Delete, "web".to_owned()))
        );
    }

    /// A state changed since the cache showed it is decided again; another refusal fails.
    #[tokio::test]
    async fn a_refused_update_is_a_race_or_a_failure_by_its_code() {
        for (code, race) in [(409, true), (422, false), (500, false)] {
            let cluster = FakeCluster::new();
            let zone = statefulset(json!({
                api::ANNOTATION_AUTO_GENERATE: "true",
                api::ANNOTATION_REQUIRED_TOPOLOGY: "topology.kubernetes.io/zone",
            }));
            reconcile(Arc::new(zone), context(&cluster))
                .await
                .expect("generated");
            let host = statefulset(json!({
                api::ANNOTATION_AUTO_GENERATE: "true",
                api::ANNOTATION_REQUIRED_TOPOLOGY: "kubernetes.io/hostname",
            }));
            cluster.fail_next(Verb::Patch, "web", code);
            let result = reconcile(Arc::new(host), context(&cluster)).await;
            if race {
                assert_eq!(
                    result.ok(),
                    Some(Action::requeue(crate::driver::ERROR_REQUEUE)),
                    "{code}"
                );
            } else {
                assert!(result.is_err(), "{code}");
            }
        }
    }
}
