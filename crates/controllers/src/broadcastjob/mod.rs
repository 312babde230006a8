//! The BroadcastJob controller (inventory §5): one Pod to completion on every node the job fits.
//! Observe the job, its Pods (shared cache) and the Nodes; decide with
//! `kruise_core::rollout::broadcastjob`; act through the shared [`crate::podcontrol`].

pub mod newpod;
mod reconcile;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_core::expectations::Expectations;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::{broadcast, mpsc};

use crate::cache::{CacheEvent, PodCache};
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "broadcastjob-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles (`--broadcastjob-workers`).
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
    /// Bind Pods to their node through required node affinity and let the scheduler place them
    /// (`--assign-bcj-pods-by-scheduler`, default true); otherwise set `spec.nodeName`.
    pub assign_by_scheduler: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            assign_by_scheduler: true,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) pods: Arc<PodCache>,
    pub(crate) nodes: Store<Node>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: Recorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Config,
}

/// Forwards Pod cache changes of BroadcastJob Pods to the controller: the owner to reconcile, or
/// a resync of every job when the cache relisted or this subscriber fell behind.
fn pod_triggers(
    mut events: broadcast::Receiver<CacheEvent>,
    all_tx: mpsc::UnboundedSender<()>,
) -> mpsc::UnboundedReceiver<ObjectRef<BroadcastJob>> {
    let (owner_tx, owner_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(CacheEvent::Owner(owner)) => {
                    if owner.kind == "BroadcastJob"
                        && owner.api_version.starts_with("apps.kruise.io/")
                    {
                        let target = ObjectRef::new(&owner.name).within(&owner.namespace);
                        if owner_tx.send(target).is_err() {
                            return;
                        }
                    }
                }
                Ok(CacheEvent::Pod(_)) => {}
                Ok(CacheEvent::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    if all_tx.send(()).is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    owner_rx
}

/// What of a Node can change whether a job's Pod fits it (upstream `shouldIgnoreNodeUpdate`
/// ignores heartbeats: an update matters unless only the resourceVersion and the conditions changed
/// with the same set of True conditions).
#[derive(Clone, Debug, PartialEq)]
struct NodeFacts {
    labels: BTreeMap<String, String>,
    spec: Option<serde_json::Value>,
    allocatable: Option<serde_json::Value>,
    true_conditions: BTreeSet<String>,
}

fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        spec: node
            .spec
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
        allocatable: node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| serde_json::to_value(a).ok()),
        true_conditions: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.status == "True")
            .map(|c| c.type_.clone())
            .collect(),
    }
}

/// Drives the Node reflector and asks for a resync of every job when a node appears or changes in
/// a way that can flip its fitness (heartbeats do not).
fn node_triggers(
    stream: impl futures::Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
    all_tx: mpsc::UnboundedSender<()>,
) {
    tokio::spawn(async move {
        let mut seen: HashMap<String, NodeFacts> = HashMap::new();
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let node = match event {
                Ok(node) => node,
                Err(error) => {
                    tracing::warn!(%error, "node watch failed; retrying");
                    continue;
                }
            };
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            let facts = node_facts(&node);
            if seen.get(&name) != Some(&facts) {
                seen.insert(name, facts);
                if all_tx.send(()).is_err() {
                    return;
                }
            }
        }
    });
}

/// Runs the BroadcastJob controller until the future is dropped.
pub async fn run(client: Client, pods: Arc<PodCache>, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = pod_triggers(pods.subscribe(), all_tx.clone());
    let (nodes, node_events) = crate::cache::reflected(Api::<Node>::all(client.clone()), None);
    node_triggers(node_events, all_tx);
    pods.wait_synced().await;

    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        nodes,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER.into(),
                instance: None,
            },
        ),
        metrics,
        config: config.clone(),
    });
    tracing::info!(workers = config.workers, "broadcastjob controller started");
    Controller::new(
        Api::<BroadcastJob>::all(client),
        watcher::Config::default().any_semantic(),
    )
    .reconcile_on(crate::cache::receiver_stream(owner_rx))
    .reconcile_all_on(crate::cache::receiver_stream(all_rx))
    .with_config(kube::runtime::controller::Config::default().concurrency(config.workers))
    .run(reconcile::reconcile, error_policy, ctx)
    .for_each(|_| futures::future::ready(()))
    .await;
}

fn error_policy(job: Arc<BroadcastJob>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        broadcastjob = %format!("{}/{}", job.metadata.namespace.as_deref().unwrap_or_default(), job.metadata.name.as_deref().unwrap_or_default()),
        %error,
        "reconcile failed"
    );
    ctx.metrics.reconciled(CONTROLLER, false, 0.0);
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn node(heartbeat: i64, ready: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n".into());
        node.metadata.resource_version = Some(heartbeat.to_string());
        node.metadata.labels = Some([("zone".to_string(), "a".to_string())].into());
        node.spec = Some(NodeSpec::default());
        node.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                last_heartbeat_time: Timestamp::from_second(heartbeat).ok().map(Time),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    #[test]
    fn heartbeats_do_not_trigger_but_fitness_inputs_do() {
        let base = node_facts(&node(1, "True"));
        assert_eq!(node_facts(&node(2, "True")), base);
        assert_ne!(node_facts(&node(2, "False")), base);
        let mut labelled = node(2, "True");
        labelled.metadata.labels = Some([("zone".to_string(), "b".to_string())].into());
        assert_ne!(node_facts(&labelled), base);
        let mut tainted = node(2, "True");
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "k".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(node_facts(&tainted), base);
        let mut cordoned = node(2, "True");
        cordoned.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        assert_ne!(node_facts(&cordoned), base);
    }
}
