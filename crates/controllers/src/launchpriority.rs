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
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cache::PodCache;

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
    client: Client,
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
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let name = barrier_name(&pod.name_any());
        if let Some(found) = api.get_opt(&name).await? {
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
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(api
                .get_opt(&name)
                .await?
                .and_then(|c| c.data)
                .unwrap_or_default()
                .into_keys()
                .collect()),
            Err(error) => Err(error),
        }
    }

    async fn release(&self, pod: &Pod, key: &str) -> Result<(), kube::Error> {
        let api: Api<ConfigMap> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
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
        let api: Api<Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
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
        client,
        released: Released::default(),
    };
    crate::podworker::drive(pods, RETRY, controller).await;
}
