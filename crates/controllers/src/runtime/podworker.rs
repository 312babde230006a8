//! The loop of a controller that acts on single Pods of the shared Pod cache, with no object of its
//! own (pod-readiness, container launch priority): every Pod it wants once the cache is listed and
//! after each relist, then each changed Pod, and, on a timer, the Pods whose turn failed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cache::{CacheEvent, PodCache, PodChange};

/// What a Pod worker does.
pub trait PodWorker {
    /// The subscriber name (the controller's).
    fn name(&self) -> &'static str;

    /// Whether `pod` needs a turn now (cheap: called on every Pod at a relist).
    fn wanted(&self, pod: &Pod) -> bool;

    /// One Pod's turn; `false` when it failed and is to be tried again.
    fn turn(&mut self, pod: &Pod) -> impl Future<Output = bool> + Send;

    /// A Pod is gone: forget what is kept of it.
    fn gone(&mut self, _change: &PodChange) {}
}

/// Runs `worker` until the Pod cache is gone; failed turns are tried again every `retry`.
pub async fn drive(pods: Arc<PodCache>, retry: Duration, mut worker: impl PodWorker) {
    let mut events = pods.subscribe(worker.name());
    pods.wait_synced().await;
    tracing::info!(controller = worker.name(), "controller started");
    // Pods whose turn failed, by (namespace, name).
    let mut failed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut retry = tokio::time::interval(retry);
    let mut every_pod = true;
    loop {
        let candidates: Vec<Arc<Pod>> = if every_pod {
            every_pod = false;
            // Each Pod decoded for its check alone and dropped unless wanted: a relist of a large
            // cache never holds every Pod decoded at once.
            pods.select_lazily(None, |_| true)
                .iter()
                .map(|selected| selected.read_once())
                .filter(|pod| worker.wanted(pod))
                .collect()
        } else {
            tokio::select! {
                event = events.recv() => match event {
                    None => return,
                    Some(CacheEvent::Resync) => {
                        every_pod = true;
                        continue;
                    }
                    Some(CacheEvent::Pod(change)) if change.deleted => {
                        worker.gone(&change);
                        continue;
                    }
                    Some(CacheEvent::Pod(change)) => {
                        let (namespace, name) = change.key.as_ref();
                        pods.get(namespace, name).into_iter().collect()
                    }
                    Some(_) => continue,
                },
                _ = retry.tick(), if !failed.is_empty() => std::mem::take(&mut failed)
                    .into_iter()
                    .filter_map(|(namespace, name)| pods.get(&namespace, &name))
                    .collect(),
            }
        };
        for pod in candidates {
            if worker.wanted(&pod) && !worker.turn(&pod).await {
                failed.insert((pod.namespace().unwrap_or_default(), pod.name_any()));
            }
        }
    }
}
