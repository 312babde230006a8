//! The NodeImage controller: one NodeImage per Node, named after it and carrying its labels, created
//! once the Node is Ready and deleted with it. It removes tags whose ImagePullJobs are gone or whose TTL
//! after completion passed, and fails the pulls kruise-daemon did not answer in time
//! (`kruise_core::imagepulljob::{prune_spec, status_timeouts}`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kruise_api::imagepulljob::v1beta1::{ImagePullJob, NodeImage, NodeImageSpec};
use kruise_core::imagepulljob as imagepull;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::driver::caches::Caches;
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "nodeimage-controller";
const RACE_RETRY: Duration = Duration::from_millis(500);
/// How often a NodeImage is looked at when nothing else wakes it.
const RESYNC: Duration = Duration::from_secs(300);
/// A NodeImage with this label has no Node and is kept (upstream's e2e suite makes one).
pub const FAKE_LABEL: &str = "apps.kruise.io/fake-nodeimage";

pub struct Context {
    writes: Arc<dyn Writes>,
    metrics: Arc<Metrics>,
    nodes: Store<Node>,
    jobs: Store<ImagePullJob>,
    recorder: EventRecorder,
}

crate::driver::driven!(Context, CONTROLLER);

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, caches: &Caches, metrics: Arc<Metrics>, workers: u16) {
    let nodes = caches.nodes.store().clone();
    let node_events = crate::cache::receiver_stream(caches.nodes.subscribe())
        .map(|n| ObjectRef::<NodeImage>::new(&n.name_any()));
    let jobs = caches.shared::<ImagePullJob>().store().clone();
    let controller = caches.shared::<NodeImage>().controller();
    let images = controller.store();
    // Nodes without a NodeImage (new ones) and NodeImages without a Node (deleted ones) are handled by
    // this loop, which the controller's own queue cannot carry (their key is not in its store).
    let writes: Arc<dyn Writes> = ApiWrites::new(client.clone());
    let creator = sync_nodes(writes.clone(), nodes.clone(), images);
    let ctx = Arc::new(Context {
        recorder: crate::driver::recorder(client, CONTROLLER),
        writes,
        metrics,
        nodes,
        jobs,
    });
    let controller = controller.reconcile_on(node_events);
    tokio::join!(
        crate::driver::run(controller, workers.max(1), reconcile, ctx),
        creator
    );
}

/// Creates the NodeImage of every Ready Node that has none, and deletes NodeImages whose Node is gone,
/// every few seconds from the two caches.
async fn sync_nodes(writes: Arc<dyn Writes>, nodes: Store<Node>, images: Store<NodeImage>) {
    let api = Writer::<NodeImage>::all(writes);
    if nodes.wait_until_ready().await.is_err() || images.wait_until_ready().await.is_err() {
        return;
    }
    loop {
        let have: BTreeSet<String> = images.state().iter().map(|i| i.name_any()).collect();
        let want: BTreeSet<String> = nodes
            .state()
            .iter()
            .filter(|n| n.metadata.deletion_timestamp.is_none() && node_ready(n))
            .map(|n| n.name_any())
            .collect();
        let all_nodes: BTreeSet<String> = nodes.state().iter().map(|n| n.name_any()).collect();
        for name in want.difference(&have) {
            let Some(node) = nodes.get(&ObjectRef::new(name)) else {
                continue;
            };
            let mut image = NodeImage::new(name, NodeImageSpec::default());
            image.metadata.labels = node.metadata.labels.clone();
            match api.create(&PostParams::default(), &image).await {
                Ok(_) => tracing::info!(node = name, "created NodeImage"),
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => tracing::warn!(node = name, %error, "creating NodeImage"),
            }
        }
        for image in images.state() {
            let name = image.name_any();
            if all_nodes.contains(&name)
                || image.metadata.deletion_timestamp.is_some()
                || image.labels().contains_key(FAKE_LABEL)
            {
                continue;
            }
            let params = DeleteParams {
                preconditions: image.metadata.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => tracing::info!(node = name, "deleted the NodeImage of a deleted Node"),
                Err(error) if matches!(&error, kube::Error::Api(s) if s.code == 404 || s.code == 409) =>
                    {}
                Err(error) => tracing::warn!(node = name, %error, "deleting NodeImage"),
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn reconcile(image: Arc<NodeImage>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = image.name_any();
    if image.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let api = Writer::<NodeImage>::all(ctx.writes.clone());
    let now = Timestamp::now();
    let node = ctx.nodes.get(&ObjectRef::new(&name));
    // Spec: the Node's labels, live owners, TTLs.
    let mut pruned = image.as_ref().clone();
    let jobs_ready = ctx.jobs.wait_until_ready().await.is_ok();
    let (mut changed, ttl_wait) = imagepull::prune_spec(
        &mut pruned,
        |owner| {
            // Until the job cache is listed, every owner counts as alive.
            if !jobs_ready || owner.kind.as_deref() != Some("ImagePullJob") {
                return true;
            }
            let key = ObjectRef::<ImagePullJob>::new(owner.name.as_deref().unwrap_or_default())
                .within(owner.namespace.as_deref().unwrap_or_default());
            ctx.jobs
                .get(&key)
                .is_some_and(|job| job.metadata.uid == owner.uid)
        },
        now,
    );
    let labels = node.as_ref().and_then(|n| n.metadata.labels.clone());
    if node.is_some() && labels != image.metadata.labels {
        changed = true;
    }
    if changed {
        let mut metadata = json!({"resourceVersion": image.resource_version()});
        if node.is_some() {
            // A merge patch of labels: the Node's, and null for the ones it dropped.
            let mut patch_labels = serde_json::Map::new();
            for key in image.labels().keys() {
                patch_labels.insert(key.clone(), serde_json::Value::Null);
            }
            for (key, value) in labels.unwrap_or_default() {
                patch_labels.insert(key, value.into());
            }
            metadata["labels"] = patch_labels.into();
        }
        let mut images = serde_json::Map::new();
        for old in image.spec.images.keys() {
            images.insert(old.clone(), serde_json::Value::Null);
        }
        for (key, spec) in &pruned.spec.images {
            images.insert(key.clone(), serde_json::to_value(spec).unwrap_or_default());
        }
        let patch = json!({"metadata": metadata, "spec": {"images": images}});
        return match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(Action::requeue(RACE_RETRY)),
            Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
            Err(source) => Err(source).context(|| format!("updating the spec of NodeImage {name}")),
        };
    }
    // Status: time-outs of unanswered or overdue pulls, counters.
    let (status, failed, status_wait) = imagepull::status_timeouts(&image, now);
    for timed_out in &failed {
        tracing::warn!(
            node = name,
            image = timed_out.image,
            tag = timed_out.tag,
            message = timed_out.message,
            "failed a pull"
        );
    }
    if image.status.as_ref() != Some(&status) {
        let patch = json!({
            "metadata": {"resourceVersion": image.resource_version()},
            "status": status,
        });
        // Replace the image statuses map entirely (a merge would keep dropped tags).
        let mut patch = patch;
        if let Some(old) = image.status.as_ref() {
            for key in old.image_statuses.keys() {
                if !status.image_statuses.contains_key(key) {
                    patch["status"]["imageStatuses"][key] = serde_json::Value::Null;
                }
            }
        }
        return match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                // Upstream tells the tag's ImagePullJobs and the NodeImage of each failure.
                for timed_out in &failed {
                    pull_failed(&ctx, &image, &name, timed_out).await;
                }
                Ok(Action::requeue(RACE_RETRY))
            }
            Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
            Err(source) => {
                Err(source).context(|| format!("updating the status of NodeImage {name}"))
            }
        };
    }
    let next = [ttl_wait, status_wait]
        .into_iter()
        .flatten()
        .filter_map(|d| Duration::try_from(d).ok())
        .min()
        .map_or(RESYNC, |d| d.max(Duration::from_secs(1)).min(RESYNC));
    Ok(Action::requeue(next))
}

/// Upstream's `PullImageFailed` Warning about a pull the manager failed, on each of the tag's owners and
/// on the NodeImage.
async fn pull_failed(
    ctx: &Context,
    image: &NodeImage,
    node: &str,
    timed_out: &imagepull::TimedOut,
) {
    let event = Event {
        type_: EventType::Warning,
        reason: "PullImageFailed".into(),
        note: Some(format!(
            "Failed to pull image {}:{} on node {node} for {}",
            timed_out.image, timed_out.tag, timed_out.message
        )),
        action: "PullImage".into(),
        secondary: None,
    };
    let regarding = timed_out
        .owners
        .iter()
        .cloned()
        .chain(std::iter::once(image.object_ref(&())));
    for object in regarding {
        if let Err(error) = ctx.recorder.publish(&event, &object).await {
            tracing::warn!(%error, node, "publishing a PullImageFailed Event");
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::driver::scripted;
    use crate::driver::writes::fake::{FakeCluster, Verb, listed};

    /// Node `n1` labelled `zone=b`.
    fn context(cluster: &Arc<FakeCluster>) -> Arc<Context> {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"zone": "b"}},
        }))
        .expect("a Node");
        let mut registry = prometheus_client::registry::Registry::default();
        Arc::new(Context {
            writes: cluster.clone(),
            metrics: Metrics::register(&mut registry),
            nodes: listed(vec![node]),
            jobs: listed(Vec::new()),
            recorder: crate::driver::recorder(scripted::client(Vec::new()).0, CONTROLLER),
        })
    }

    /// NodeImage `n1`, labelled `zone=a` and `old=x` (its Node has moved to `zone=b`).
    fn image(cluster: &FakeCluster) -> NodeImage {
        let mut image = NodeImage::new("n1", NodeImageSpec::default());
        image.metadata.labels = Some(
            [("zone", "a"), ("old", "x")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        );
        cluster.insert(&image)
    }

    #[tokio::test]
    async fn a_node_image_follows_its_nodes_labels() {
        let cluster = FakeCluster::new();
        let cached = image(&cluster);
        reconcile(Arc::new(cached), context(&cluster))
            .await
            .expect("reconciled");
        let written: NodeImage = cluster.get(None, "n1").expect("the NodeImage");
        let labels: Vec<(&String, &String)> = written.labels().iter().collect();
        assert_eq!(labels, [(&"zone".to_owned(), &"b".to_owned())]);
    }

    /// A NodeImage that moved or went is looked at again soon; a refused write fails.
    #[tokio::test]
    async fn refusals_by_code() {
        for (code, fails) in [(409, false), (404, false), (422, true), (500, true)] {
            let cluster = FakeCluster::new();
            let cached = image(&cluster);
            cluster.fail_next(Verb::Patch, "n1", code);
            let outcome = reconcile(Arc::new(cached), context(&cluster)).await;
            match fails {
                true => assert!(outcome.is_err(), "{code}"),
                false => assert_eq!(outcome.ok(), Some(Action::requeue(RACE_RETRY)), "{code}"),
            }
            let kept: NodeImage = cluster.get(None, "n1").expect("the NodeImage");
            assert_eq!(kept.labels().get("zone").map(String::as_str), Some("a"));
        }
        // A copy older than the cluster's: the resourceVersion refuses it.
        let cluster = FakeCluster::new();
        let cached = image(&cluster);
        cluster.touch::<NodeImage>(None, "n1");
        let outcome = reconcile(Arc::new(cached), context(&cluster)).await;
        assert_eq!(outcome.ok(), Some(Action::requeue(RACE_RETRY)));
        assert_eq!(cluster.records()[0].refused, Some(409));
    }
}
