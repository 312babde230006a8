//! `container-launch-priority-controller`: releases the containers of a Pod the Pod webhook held
//! back for their launch order, one priority at a time, by adding keys to the Pod's barrier
//! ConfigMap (`kruise_core::launchpriority` decides which and when).
//!
//! It reads the shared Pod cache (no watch of its own) and no ConfigMap cache: the barrier of a Pod
//! is read once, when the Pod is first seen waiting, and what this controller adds is remembered
//! until the Pod is complete, so a Pod's status changes cost no read. The barrier is created owned
//! by its Pod, so it goes with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_core::launchpriority::{
    ANNOTATION_COMPLETED, Step, barrier_name, in_progress, next_step, pending,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cache::PodCache;
use crate::driver::writes::{ApiWrites, LiveReads, Writer, Writes, get_live};

pub const CONTROLLER: &str = "container-launch-priority-controller";

/// How soon a write that failed is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// Whether the controller has anything to do for `pod`: it is starting and some container waits
/// on a barrier.
fn waiting(pod: &Pod) -> bool {
    in_progress(pod) && !pending(pod).is_empty()
}

/// The barrier keys known to be in each waiting Pod's ConfigMap, by Pod UID.
#[derive(Default)]
struct Released(BTreeMap<String, BTreeSet<String>>);

/// What became of one Pod's turn.
enum Outcome {
    Done,
    /// The Pod or its barrier changed or went away meanwhile: its next change decides again.
    Forget,
    Failed,
}

struct Controller {
    writes: Arc<dyn Writes>,
    /// The barrier ConfigMap, read once per waiting Pod (ConfigMaps are not cached).
    live: Arc<dyn LiveReads>,
    released: Released,
}

impl Controller {
    /// The keys of `pod`'s barrier, reading (or creating) the ConfigMap the first time.
    async fn keys(&mut self, pod: &Pod, uid: &str) -> Result<&BTreeSet<String>, kube::Error> {
        if !self.released.0.contains_key(uid) {
            let keys = self.read_or_create(pod, uid).await?;
            self.released.0.insert(uid.to_string(), keys);
        }
        Ok(self.released.0.entry(uid.to_string()).or_default())
    }

    async fn read_or_create(&self, pod: &Pod, uid: &str) -> Result<BTreeSet<String>, kube::Error> {
        let namespace = pod.namespace().unwrap_or_default();
        let api = Writer::<ConfigMap>::namespaced(self.writes.clone(), &namespace);
        let name = barrier_name(&pod.name_any());
        let read = || get_live::<ConfigMap>(self.live.as_ref(), Some(&namespace), &name);
        if let Some(found) = read().await? {
            return Ok(found.data.unwrap_or_default().into_keys().collect());
        }
        let barrier = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod.name_any(),
                    uid: uid.to_string(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        match api.create(&PostParams::default(), &barrier).await {
            Ok(_) => {
                tracing::debug!(namespace, barrier = name, "created the launch barrier");
                Ok(BTreeSet::new())
            }
            // Created meanwhile (by an earlier run of this controller, or OpenKruise's): read it.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(read()
                .await?
                .and_then(|c| c.data)
                .unwrap_or_default()
                .into_keys()
                .collect()),
            Err(error) => Err(error),
        }
    }

    async fn release(&self, pod: &Pod, key: &str) -> Result<(), kube::Error> {
        let api = Writer::<ConfigMap>::namespaced(
            self.writes.clone(),
            &pod.namespace().unwrap_or_default(),
        );
        let patch = json!({"data": {key: "true"}});
        api.patch(
            &barrier_name(&pod.name_any()),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        tracing::info!(
            namespace = pod.namespace(),
            pod = pod.name_any(),
            key,
            "released a container launch priority"
        );
        Ok(())
    }

    async fn complete(&self, pod: &Pod) -> Result<(), kube::Error> {
        let api =
            Writer::<Pod>::namespaced(self.writes.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"metadata": {"annotations": {ANNOTATION_COMPLETED: "true"}}});
        api.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        tracing::info!(
            namespace = pod.namespace(),
            pod = pod.name_any(),
            "container launch priority completed"
        );
        Ok(())
    }

    /// Takes `pod` one step further.
    async fn advance(&mut self, pod: &Pod) -> Outcome {
        let Some(uid) = pod.uid() else {
            return Outcome::Forget;
        };
        if !waiting(pod) {
            self.released.0.remove(&uid);
            return Outcome::Done;
        }
        let step = match self.keys(pod, &uid).await {
            Ok(keys) => next_step(pod, |key| keys.contains(key)),
            Err(error) => return self.failed(pod, &uid, "reading the barrier", error),
        };
        let (key, last) = match step {
            Step::Wait => return Outcome::Done,
            Step::Release(key) => (Some(key), false),
            Step::ReleaseLast(key) => (Some(key), true),
            Step::Complete => (None, true),
        };
        if let Some(key) = key {
            if let Err(error) = self.release(pod, &key).await {
                return self.failed(pod, &uid, "releasing a priority", error);
            }
            self.released.0.entry(uid.clone()).or_default().insert(key);
        }
        if last {
            if let Err(error) = self.complete(pod).await {
                return self.failed(pod, &uid, "marking the Pod completed", error);
            }
            self.released.0.remove(&uid);
        }
        Outcome::Done
    }

    fn failed(&mut self, pod: &Pod, uid: &str, doing: &str, error: kube::Error) -> Outcome {
        // What is remembered may be wrong now (a barrier deleted by hand): read it again next time.
        self.released.0.remove(uid);
        if let kube::Error::Api(status) = &error
            && status.code == 404
            && doing != "releasing a priority"
        {
            return Outcome::Forget;
        }
        tracing::warn!(namespace = pod.namespace(), pod = pod.name_any(), %error, "container launch priority: {doing} failed; retrying");
        Outcome::Failed
    }
}

impl crate::podworker::PodWorker for Controller {
    fn name(&self) -> &'static str {
        CONTROLLER
    }

    fn wanted(&self, pod: &Pod) -> bool {
        waiting(pod)
    }

    async fn turn(&mut self, pod: &Pod) -> bool {
        !matches!(self.advance(pod).await, Outcome::Failed)
    }

    fn gone(&mut self, change: &crate::cache::PodChange) {
        if let Some(uid) = &change.uid {
            self.released.0.remove(uid.as_ref());
        }
    }
}

/// Runs until the Pod cache is gone.
pub async fn run(client: Client, pods: Arc<PodCache>) {
    let controller = Controller {
        writes: ApiWrites::new(client.clone()),
        live: ApiWrites::new(client),
        released: Released::default(),
    };
    crate::podworker::drive(pods, RETRY, controller).await;
}

#[cfg(test)]
mod tests {
    use kruise_core::launchpriority::barrier_env;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    /// A starting Pod whose `app` container waits on priority 1 and `sidecar` on 0; `ready` names
    /// the containers already Ready.
    fn pod(cluster: &FakeCluster, ready: &[&str]) -> Pod {
        let container = |name: &str, priority: i64| {
            json!({"name": name, "image": "i",
                   "env": [serde_json::to_value(barrier_env(priority, "web-0")).expect("env")]})
        };
        let statuses: Vec<_> = ["app", "sidecar"]
            .iter()
            .map(|name| {
                json!({"name": name, "ready": ready.contains(name), "image": "i",
                               "imageID": "", "restartCount": 0})
            })
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "web-0-uid"},
            "spec": {"containers": [container("app", 1), container("sidecar", 0)]},
            "status": {"phase": "Pending", "containerStatuses": statuses,
                       "conditions": [{"type": "ContainersReady", "status": "False"}]},
        }))
        .expect("a Pod");
        match cluster.get::<Pod>(Some("ns"), "web-0") {
            Some(_) => pod,
            None => cluster.insert(&pod),
        }
    }

    fn controller(cluster: &Arc<FakeCluster>) -> Controller {
        Controller {
            writes: cluster.clone(),
            live: cluster.clone(),
            released: Released::default(),
        }
    }

    fn barrier_keys(cluster: &FakeCluster) -> Vec<String> {
        cluster
            .get::<ConfigMap>(Some("ns"), "web-0-barrier")
            .and_then(|c| c.data)
            .unwrap_or_default()
            .into_keys()
            .collect()
    }

    fn completed(cluster: &FakeCluster) -> bool {
        cluster
            .get::<Pod>(Some("ns"), "web-0")
            .and_then(|p| p.metadata.annotations)
            .is_some_and(|a| a.get(ANNOTATION_COMPLETED).is_some_and(|v| v == "true"))
    }

    #[tokio::test]
    async fn priorities_are_released_highest_first_then_the_pod_is_marked() {
        let cluster = FakeCluster::new();
        let mut controller = controller(&cluster);

        // No barrier yet: created, owned by its Pod, and the highest priority released.
        assert!(matches!(
            controller.advance(&pod(&cluster, &[])).await,
            Outcome::Done
        ));
        let barrier: ConfigMap = cluster
            .get(Some("ns"), "web-0-barrier")
            .expect("the barrier");
        let owner = &barrier.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Pod", "web-0-uid")
        );
        assert_eq!(barrier_keys(&cluster), vec!["p_1".to_owned()]);
        assert!(!completed(&cluster));

        // Nothing more while `app` is not Ready.
        let writes = cluster.records().len();
        controller.advance(&pod(&cluster, &[])).await;
        assert_eq!(cluster.records().len(), writes, "nothing written");

        // `app` Ready: the last priority, and the Pod marked completed.
        controller.advance(&pod(&cluster, &["app"])).await;
        assert_eq!(
            barrier_keys(&cluster),
            vec!["p_0".to_owned(), "p_1".to_owned()]
        );
        assert!(completed(&cluster));
        let verbs: Vec<Verb> = cluster.done().into_iter().map(|(verb, _)| verb).collect();
        assert_eq!(
            verbs,
            vec![Verb::Create, Verb::Patch, Verb::Patch, Verb::Patch],
            "barrier created, p_1, p_0, the Pod's annotation"
        );
    }

    #[tokio::test]
    async fn a_barrier_that_exists_is_read_not_overwritten() {
        // Created by OpenKruise (or an earlier term) with the highest priority released already.
        let cluster = FakeCluster::new();
        let pod = pod(&cluster, &[]);
        let barrier: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "web-0-barrier", "namespace": "ns"},
            "data": {"p_1": "true"},
        }))
        .expect("a ConfigMap");
        cluster.insert(&barrier);
        let mut controller = controller(&cluster);
        assert!(matches!(controller.advance(&pod).await, Outcome::Done));
        assert!(
            cluster.records().is_empty(),
            "nothing to write: {:?}",
            cluster.records()
        );
    }

    #[tokio::test]
    async fn refusals_are_retried_or_forgotten_by_code() {
        // (verb refused, code, what becomes of the Pod's turn)
        let cases = [
            (Verb::Create, 500, "failed"),
            (Verb::Patch, 404, "failed"),
            (Verb::Patch, 500, "failed"),
        ];
        for (verb, code, expected) in cases {
            let cluster = FakeCluster::new();
            let pod = pod(&cluster, &[]);
            cluster.fail_next(verb, "web-0-barrier", code);
            let mut controller = controller(&cluster);
            let outcome = match controller.advance(&pod).await {
                Outcome::Done => "done",
                Outcome::Forget => "forget",
                Outcome::Failed => "failed",
            };
            assert_eq!(outcome, expected, "{verb:?} {code}");
            if outcome == "failed" {
                assert!(
                    controller.released.0.is_empty(),
                    "{verb:?} {code}: the barrier is read again next time"
                );
            }
        }

        // The Pod gone when it is to be marked completed: forgotten, not retried.
        let cluster = FakeCluster::new();
        let mut controller = controller(&cluster);
        controller.advance(&pod(&cluster, &[])).await;
        cluster.fail_next(Verb::Patch, "web-0", 404);
        assert!(matches!(
            controller.advance(&pod(&cluster, &["app"])).await,
            Outcome::Forget
        ));
    }
}
