//! kubelet-sim: a simulated kubelet for kruise-rs tests and the local cluster.
//!
//! It registers fake Nodes with heartbeats and drives every Pod bound to them the way a kubelet does:
//! phase, IPs, container statuses with stable image IDs, the readiness-gate rule, a restart of exactly the
//! changed container on an in-place image update, resize reflected in status, completion by restartPolicy
//! and graceful deletion. Decisions are pure ([`pod_status::plan`], [`node`]); this module only watches
//! and writes. See the crate README for the steering annotations.

pub mod image;
pub mod node;
pub mod pod_status;
pub mod steer;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use rand::RngCore;

pub use node::NodeSpecSim;
pub use pod_status::Timing;

/// Field manager name of every write.
const MANAGER: &str = "kubelet-sim";

/// How the simulator runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub nodes: Vec<NodeSpecSim>,
    pub timing: Timing,
    /// Lease renewal period (a kubelet renews every 10 s).
    pub heartbeat_every: Duration,
    /// Node status refresh period when nothing changes (a kubelet: 5 minutes).
    pub node_status_every: Duration,
    /// Pods handled at once.
    pub concurrency: u16,
    /// Also serve Nodes labelled `node.kruise-rs.io/simulated=true` that someone else registers while the
    /// simulator runs (a test or `kruise-local node add` growing the fleet), and stop serving a Node once
    /// it is deleted.
    pub adopt_nodes: bool,
}

impl Config {
    pub fn new(nodes: Vec<NodeSpecSim>) -> Self {
        Self {
            nodes,
            timing: Timing::default(),
            heartbeat_every: Duration::from_secs(10),
            node_status_every: Duration::from_secs(60),
            concurrency: 32,
            adopt_nodes: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("registering node {node}: {source}")]
    RegisterNode { node: String, source: kube::Error },
    #[error("writing status of pod {pod}: {source}")]
    PatchStatus { pod: String, source: kube::Error },
    #[error("reading the claims of pod {pod}: {source}")]
    ReadClaims { pod: String, source: kube::Error },
    #[error("deleting pod {pod}: {source}")]
    DeletePod { pod: String, source: kube::Error },
}

struct NodeState {
    spec: NodeSpecSim,
    ip: String,
    next_ip: AtomicU32,
    images: Mutex<HashSet<String>>,
    /// Pods asking for host ports that this node admitted (their status may not show it yet).
    admitted_with_ports: Mutex<HashSet<String>>,
}

impl NodeState {
    fn new(spec: NodeSpecSim) -> Self {
        Self {
            ip: spec.node_ip().to_string(),
            spec,
            next_ip: AtomicU32::new(0),
            images: Mutex::new(HashSet::new()),
            admitted_with_ports: Mutex::new(HashSet::new()),
        }
    }
}

#[derive(Default)]
struct PodEntry {
    memory: pod_status::PodMemory,
    /// resourceVersion of our last status write; an older cached Pod is not planned from (it would
    /// undo that write with new container IDs).
    written_rv: Option<u64>,
    /// When [`steer::STATUS_CHURN_MS`] last wrote the Pod's status, and how many times it did.
    churned: Option<(std::time::Instant, u64)>,
}

struct Ctx {
    client: Client,
    /// The nodes served, by name: those registered at start plus adopted ones.
    nodes: RwLock<HashMap<String, Arc<NodeState>>>,
    pods: Mutex<HashMap<String, PodEntry>>,
    timing: Timing,
    store: Mutex<Option<Store<Pod>>>,
}

/// Runs the simulator until `shutdown` resolves: registers the nodes, keeps their heartbeats and drives
/// their Pods.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    register_nodes(&client, &config.nodes).await?;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        nodes: RwLock::new(
            config
                .nodes
                .iter()
                .map(|spec| (spec.name.clone(), Arc::new(NodeState::new(spec.clone()))))
                .collect(),
        ),
        pods: Mutex::new(HashMap::new()),
        timing: config.timing.clone(),
        store: Mutex::new(None),
    });

    let heartbeats = tokio::spawn(heartbeat_loop(ctx.clone(), config.clone()));
    // A Pod bound to a node adopted after its Pod event was seen waits for this: every adoption
    // reconciles the cached Pods again.
    let (adopted_tx, adopted_rx) = futures::channel::mpsc::unbounded::<()>();
    let adoption = config
        .adopt_nodes
        .then(|| tokio::spawn(adopt_nodes(ctx.clone(), adopted_tx)));
    let pods: Api<Pod> = Api::all(client);
    // Only Pods bound to a node; those of other nodes are skipped in `reconcile`.
    let watch = watcher::Config::default().fields("spec.nodeName!=");
    let controller = Controller::new(pods, watch)
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .reconcile_all_on(adopted_rx);
    *lock(&ctx.store) = Some(controller.store());
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "pod reconcile");
            }
        })
        .await;
    heartbeats.abort();
    if let Some(adoption) = adoption {
        adoption.abort();
    }
    Ok(())
}

fn read_nodes(ctx: &Ctx) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<NodeState>>> {
    ctx.nodes
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_nodes(ctx: &Ctx) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<NodeState>>> {
    ctx.nodes
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Follows the simulated Nodes: one registered while we run is served from then on (heartbeats and
/// Pods), one deleted is forgotten (its Pods are left to the control plane, as when a machine is gone).
async fn adopt_nodes(ctx: Arc<Ctx>, adopted: futures::channel::mpsc::UnboundedSender<()>) {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let selector = format!("{}=true", node::SIMULATED_LABEL);
    let events = watcher::watcher(api, watcher::Config::default().labels(&selector));
    let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(events));
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                let Some(spec) = NodeSpecSim::from_node(&node) else {
                    continue;
                };
                let name = spec.name.clone();
                let added = {
                    let mut nodes = write_nodes(&ctx);
                    if nodes.contains_key(&name) {
                        false
                    } else {
                        nodes.insert(name.clone(), Arc::new(NodeState::new(spec)));
                        true
                    }
                };
                if added {
                    tracing::info!(node = %name, "adopted node");
                    let _ = adopted.unbounded_send(());
                }
            }
            Ok(watcher::Event::Delete(node)) => {
                let name = node.name_any();
                if write_nodes(&ctx).remove(&name).is_some() {
                    tracing::info!(node = %name, "node deleted; no longer served");
                }
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(error) => tracing::debug!(%error, "node watch"),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn register_nodes(client: &Client, nodes: &[NodeSpecSim]) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    for spec in nodes {
        let wrap = |source| Error::RegisterNode {
            node: spec.name.clone(),
            source,
        };
        let node = spec.build(Timestamp::now());
        match api.create(&PostParams::default(), &node).await {
            Ok(_) => tracing::info!(node = %spec.name, "registered node"),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                // The node exists (a previous simulator run): report it healthy again.
                let current = api.get(&spec.name).await.map_err(wrap)?;
                let patch = node::heartbeat_status_patch(&current, Timestamp::now());
                api.patch_status(
                    &spec.name,
                    &PatchParams::apply(MANAGER),
                    &Patch::Strategic(patch),
                )
                .await
                .map_err(wrap)?;
                tracing::info!(node = %spec.name, "node already registered; status refreshed");
            }
            Err(error) => return Err(wrap(error)),
        }
    }
    Ok(())
}

async fn heartbeat_loop(ctx: Arc<Ctx>, config: Config) {
    let mut tick = tokio::time::interval(config.heartbeat_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let names: Vec<String> = read_nodes(&ctx).keys().cloned().collect();
        for name in names {
            match heartbeat(&ctx.client, &name, config.node_status_every).await {
                Ok(()) => {}
                // Deleted (the node watch may not have told us yet): a kubelet whose Node is gone
                // would register it again; a simulated machine that was removed stays gone.
                Err(kube::Error::Api(status)) if status.code == 404 && config.adopt_nodes => {
                    write_nodes(&ctx).remove(&name);
                }
                Err(error) => tracing::warn!(node = %name, %error, "heartbeat failed"),
            }
        }
        forget_gone_pods(&ctx);
    }
}

async fn heartbeat(client: &Client, name: &str, status_every: Duration) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    if node::heartbeats_stopped(&node) {
        tracing::debug!(node = name, "heartbeats stopped by annotation");
        return Ok(());
    }
    let now = Timestamp::now();
    let leases: Api<Lease> = Api::namespaced(client.clone(), node::LEASE_NAMESPACE);
    let lease = node::lease(&node, now);
    let renew = serde_json::json!({ "spec": lease.spec });
    match leases
        .patch(name, &PatchParams::default(), &Patch::Merge(renew))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {
            leases.create(&PostParams::default(), &lease).await?;
        }
        Err(error) => return Err(error),
    }
    if node::status_is_stale(&node, now, status_every) {
        let patch = node::heartbeat_status_patch(&node, now);
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
    }
    Ok(())
}

/// Drops the memory of Pods that no longer exist.
fn forget_gone_pods(ctx: &Ctx) {
    let Some(store) = lock(&ctx.store).clone() else {
        return;
    };
    let live: HashSet<String> = store
        .state()
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    lock(&ctx.pods).retain(|uid, _| live.contains(uid));
    for node in read_nodes(ctx).values() {
        lock(&node.admitted_with_ports).retain(|uid| live.contains(uid));
    }
}

fn resource_version(pod: &Pod) -> Option<u64> {
    // resourceVersions are opaque in general; on an etcd-backed apiserver they are increasing integers, and
    // this test tool relies on that to recognise a cache that is older than its own last write.
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
}

async fn reconcile(pod: Arc<Pod>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .and_then(|n| read_nodes(&ctx).get(n).cloned())
    else {
        return Ok(Action::await_change());
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();

    // Like a kubelet's volume manager, start no container before every claim the Pod mounts is bound
    // (the scheduler normally holds such Pods back already; this covers Pods bound by `nodeName`).
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|c| !c.is_empty());
    if !started && pod.metadata.deletion_timestamp.is_none() {
        match volumes::unbound_claim(&ctx.client, &pod).await {
            Ok(None) => {}
            Ok(Some(claim)) => {
                tracing::debug!(pod = %format!("{namespace}/{name}"), %claim, "waiting for claim to be bound");
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            Err(source) => {
                return Err(Error::ReadClaims {
                    pod: format!("{namespace}/{name}"),
                    source,
                });
            }
        }
    }

    let plan = {
        let mut pods = lock(&ctx.pods);
        let entry = pods.entry(uid.clone()).or_default();
        if let (Some(written), Some(seen)) = (entry.written_rv, resource_version(&pod))
            && seen < written
        {
            // Our own last write has not reached the cache yet.
            return Ok(Action::requeue(Duration::from_millis(50)));
        }
        let in_use = || pod_ips_on(&ctx, &node.spec.name);
        let new_ip = || next_free_ip(&node, &in_use());
        let mut images = lock(&node.images);
        let mut new_id = new_container_id;
        let ports_in_use = || host_ports_on(&ctx, &node, &uid);
        let mut input = pod_status::PlanInput {
            now: Timestamp::now(),
            timing: &ctx.timing,
            node_ip: &node.ip,
            new_pod_ip: &new_ip,
            node_images: &mut images,
            new_container_id: &mut new_id,
            host_ports_in_use: &ports_in_use,
        };
        let plan = pod_status::plan(&pod, &mut entry.memory, &mut input);
        // Admissions are decided one at a time (under the Pods lock): a Pod admitted with host
        // ports holds them from now on, even before its status says so.
        let rejected = plan.status_patch.as_ref().is_some_and(|p| {
            p["status"]["reason"] == serde_json::json!(pod_status::REASON_NODE_PORTS)
        });
        if !rejected && !pod_status::host_ports(&pod).is_empty() {
            lock(&node.admitted_with_ports).insert(uid.clone());
        }
        plan
    };

    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(patch) = plan.status_patch {
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(written) => {
                if let Some(entry) = lock(&ctx.pods).get_mut(&uid) {
                    entry.written_rv = resource_version(&written);
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Ok(Action::await_change());
            }
            Err(source) => {
                return Err(Error::PatchStatus {
                    pod: format!("{namespace}/{name}"),
                    source,
                });
            }
        }
    }
    if plan.delete {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => {
                return Err(Error::DeletePod {
                    pod: format!("{namespace}/{name}"),
                    source,
                });
            }
        }
        return Ok(Action::await_change());
    }
    let churn_in = match steer::PodSteer::from_pod(&pod).status_churn() {
        Some(period) if pod.metadata.deletion_timestamp.is_none() => {
            Some(churn_status(&ctx, &api, &uid, &name, period).await?)
        }
        _ => None,
    };
    let requeue = match (plan.requeue, churn_in) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// [`steer::STATUS_CHURN_MS`]: writes the Pod's churn condition when the period has passed since the
/// last write; how long until the next one is due.
async fn churn_status(
    ctx: &Ctx,
    api: &Api<Pod>,
    uid: &str,
    name: &str,
    period: Duration,
) -> Result<Duration, Error> {
    let now = std::time::Instant::now();
    let count = {
        let pods = lock(&ctx.pods);
        match pods.get(uid).and_then(|e| e.churned) {
            Some((at, _)) if now.duration_since(at) < period => {
                return Ok(period - now.duration_since(at));
            }
            Some((_, count)) => count + 1,
            None => 1,
        }
    };
    let patch = serde_json::json!({
        "metadata": { "uid": uid },
        "status": { "conditions": [{
            "type": steer::CHURN_CONDITION,
            "status": "True",
            "message": format!("status write {count}"),
        }]},
    });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(written) => {
            if let Some(entry) = lock(&ctx.pods).get_mut(uid) {
                entry.written_rv = resource_version(&written);
                entry.churned = Some((now, count));
            }
            Ok(period)
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(period),
        Err(source) => Err(Error::PatchStatus {
            pod: format!("{}/{name}", api.namespace().unwrap_or_default()),
            source,
        }),
    }
}

fn error_policy(pod: Arc<Pod>, error: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(pod = %ObjectRef::from(pod.as_ref()), %error, "retrying");
    Action::requeue(Duration::from_millis(500))
}

/// The host ports held on `node` by the Pods it admitted other than `uid`: not terminal, and started
/// or admitted by this simulator.
fn host_ports_on(ctx: &Ctx, node: &NodeState, uid: &str) -> HashSet<(String, i32)> {
    let Some(store) = lock(&ctx.store).clone() else {
        return HashSet::new();
    };
    let admitted = lock(&node.admitted_with_ports).clone();
    store
        .state()
        .iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.spec.name.as_str())
        })
        .filter(|p| p.metadata.uid.as_deref().is_some_and(|u| u != uid))
        .filter(|p| {
            let status = p.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref());
            let terminal = matches!(
                phase,
                Some(pod_status::PHASE_SUCCEEDED | pod_status::PHASE_FAILED)
            );
            let started = status.is_some_and(|s| s.start_time.is_some());
            !terminal
                && (started
                    || p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|u| admitted.contains(u)))
        })
        .flat_map(|p| pod_status::host_ports(p))
        .collect()
}

fn pod_ips_on(ctx: &Ctx, node: &str) -> HashSet<String> {
    let Some(store) = lock(&ctx.store).clone() else {
        return HashSet::new();
    };
    store
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .collect()
}

fn next_free_ip(node: &NodeState, in_use: &HashSet<String>) -> String {
    let mut ip = node
        .spec
        .pod_ip(node.next_ip.fetch_add(1, Ordering::Relaxed))
        .to_string();
    // Bounded: a node's range holds 64,516 addresses, far more than the Pods it can run.
    for _ in 0..(256 * 254) {
        if !in_use.contains(&ip) {
            break;
        }
        ip = node
            .spec
            .pod_ip(node.next_ip.fetch_add(1, Ordering::Relaxed))
            .to_string();
    }
    ip
}

fn new_container_id() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("containerd://{}", hex::encode(bytes))
}
