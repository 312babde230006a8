//! The one Pod watch every controller shares: the manager opens a single watch of Pods.
//!
//! It keeps every Pod of the cluster as a projection ([`project`]): only the fields some controller
//! or planner reads, the rest (managed fields, volumes, probes, commands, most of the environment,
//! container states, IPs) dropped, and keeps that projection encoded (JSON compressed against a
//! dictionary of typical Pods, [`codec`]), decoding it when a controller reads it: a Pod with 2
//! containers then takes 1.0 KiB of heap instead of 18.7 KiB (`planner-scale`), for a decode of a
//! few microseconds per Pod read (a reconcile reads only its own workload's Pods). Labels, the
//! bound node and SidecarSet's records (annotations the compression cannot shrink, the same on
//! every Pod a SidecarSet revision injected) are kept decoded beside it, their strings interned, so
//! label selectors and node checks over many Pods decode only the Pods they return. Pods are
//! indexed by the uid of their controlling owner, and subscribers are told which owner a changed
//! Pod belongs to so each controller can reconcile just that workload.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};

mod codec;
mod packed;
mod wire;

pub use wire::WirePod;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerStatus, EnvVar, EphemeralContainer, NodeAffinity, Pod, PodSpec,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use tokio::sync::{broadcast, mpsc, watch};

/// Whether `store` has been filled by its first list, checked without waiting. Reconciles must not
/// wait on `Store::wait_until_ready`: kube-runtime 5 keeps one waker for it, so of several
/// reconciles (each on a task of its own) waiting at once only the last was woken, and the others
/// slept until their timeout although the store was ready: a 10 s start-up stall (`fleet-scale`'s
/// restarts, one run in two). Every reader checks here instead (a real waiter beside it could lose
/// its wake-up to this check), and a reconcile that finds a store not listed yet is requeued
/// ([`NOT_LISTED_RETRY`]).
pub fn listed<K>(store: &reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    use futures::FutureExt;
    // A dropped writer never fills the store: go on with what it holds, as a wait would have.
    store.wait_until_ready().now_or_never().is_some()
}

/// How soon a reconcile that found a cache not listed yet looks again.
pub const NOT_LISTED_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// A stream of what arrives on an unbounded channel (to hand triggers to a `Controller`).
pub fn receiver_stream<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Namespace and name.
pub type PodKey = (String, String);

/// The controlling owner of a Pod that changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerChange {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// A Pod that was added, changed or deleted, without the Pod: which one, and its labels. A
/// subscriber that needs the Pod reads it from the cache, at its latest version, and only if its
/// labels concern it (most Pods concern no SidecarSet). Events carried the decoded Pod before: a
/// few KiB held in the channel's ring for every change a subscriber had not read yet, and decoded
/// for every change of every Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodChange {
    pub key: Arc<PodKey>,
    pub uid: Option<Arc<str>>,
    /// As the cache holds them (interned), or held them last for a deleted Pod.
    pub labels: PodLabels,
    /// The Pod is gone.
    pub deleted: bool,
}

/// What subscribers receive.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheEvent {
    /// A Pod with this controlling owner was added, changed or deleted. Shared, so that an event
    /// is two words: the channel's ring holds [`EVENTS_BUFFERED`] of them from the start, written
    /// when it is made.
    Owner(Arc<OwnerChange>),
    /// A Pod was added, changed or deleted (for controllers that find their Pods by labels, not
    /// owners, such as SidecarSet).
    Pod(Arc<PodChange>),
    /// The cache was relisted (watch restart): every owner may have changed.
    Resync,
}

/// One cached Pod: its projection encoded ([`codec`]: compressed JSON, decoded when read), and
/// beside it what the indexes and filters need without decoding. With 2 containers an entry costs
/// the cache about 1 KiB in all, the whole Pod 18.7 (`planner-scale`).
struct Entry {
    /// Namespace and name, shared with the map's key, the owner index and every selection.
    key: Arc<PodKey>,
    /// Shared, so that readers take it out of the lock and decode it there: a reconcile decoding
    /// its 1,000 Pods does not hold up the watch writing the next change.
    encoded: Encoded,
    group: Group,
    /// The Pod's labels, for label selectors over many Pods (SidecarSets, Deployment subsets).
    labels: PodLabels,
    /// The node the Pod is bound to (`nodeName`, or a required affinity naming one node).
    node: Option<Arc<str>>,
    /// Which Pod, at which version: enough for a reader that remembers what it decided about a
    /// Pod to know, without decoding it, that it has not changed.
    version: Version,
}

/// A Pod of a watch event, projected, and encoded for the cache (`None`: it cannot be, and is left
/// out with a warning; a deleted Pod is not encoded), its [`SHARED_ANNOTATIONS`] taken out to be
/// interned.
struct Projected {
    pod: Pod,
    encoded: Option<Vec<u8>>,
    shared: SharedAnnotations<String>,
}

/// Annotations that the Pods of a workload carry byte for byte and that the compression cannot
/// shrink: SidecarSet's record of the revisions it injected, 64 random characters of hash per
/// SidecarSet, twice. With four SidecarSets they were 1.6 KB of a Pod's 6 KB of JSON and most of
/// what the Pod cost the cache. They are kept beside the compressed JSON instead, interned, so the
/// Pods injected by the same SidecarSet revisions hold one copy.
const SHARED_ANNOTATIONS: [&str; 2] = [
    kruise_api::sidecarset::hash::ANNOTATION_HASH,
    kruise_api::sidecarset::hash::ANNOTATION_HASH_WITHOUT_IMAGE,
];

/// The values of a Pod's [`SHARED_ANNOTATIONS`], in that order.
type SharedAnnotations<S> = [Option<S>; SHARED_ANNOTATIONS.len()];

/// Takes `pod`'s [`SHARED_ANNOTATIONS`] out of it.
fn take_shared_annotations(pod: &mut Pod) -> SharedAnnotations<String> {
    let annotations = pod.metadata.annotations.as_mut();
    match annotations {
        Some(annotations) => SHARED_ANNOTATIONS.map(|key| annotations.remove(key)),
        None => Default::default(),
    }
}

impl Projected {
    fn of(pod: Pod) -> Self {
        let mut pod = project(pod);
        let shared = take_shared_annotations(&mut pod);
        let encoded = match codec::encode(&pod) {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                tracing::warn!(
                    pod = pod.metadata.name.as_deref().unwrap_or_default(),
                    namespace = pod.metadata.namespace.as_deref().unwrap_or_default(),
                    %error,
                    "cannot encode a Pod for the cache; leaving it out"
                );
                None
            }
        };
        Self {
            pod,
            encoded,
            shared,
        }
    }

    fn deleted(pod: Pod) -> Self {
        Self {
            pod: project(pod),
            encoded: None,
            shared: Default::default(),
        }
    }
}

/// A cached Pod's labels, sorted by key. Keys and values are interned: the Pods of one workload
/// share theirs, so a label costs a Pod two pointers. Shared: a new version of a Pod with the same
/// labels and the events about it hold the same list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodLabels(Arc<[(Arc<str>, Arc<str>)]>);

impl PodLabels {
    /// `pod`'s labels, their strings interned in `strings`.
    fn of(pod: &Pod, strings: &mut Interner) -> Self {
        PodLabels(
            pod.metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (strings.intern(k), strings.intern(v)))
                .collect(),
        )
    }

    /// Whether these are `labels`, compared without building a list of them.
    fn are(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        let labels = labels.into_iter().flatten();
        self.0
            .iter()
            .map(|(k, v)| (&**k, &**v))
            .eq(labels.map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Whether the labels satisfy `selector` (an empty selector matches everything).
    pub fn matches(
        &self,
        selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> bool {
        kruise_api::validation::selector_matches_by(selector, |key| self.get(key))
    }
}

/// Labels not interned (a Pod built by hand, a test).
impl From<&std::collections::BTreeMap<String, String>> for PodLabels {
    fn from(labels: &std::collections::BTreeMap<String, String>) -> Self {
        PodLabels(
            labels
                .iter()
                .map(|(k, v)| (Arc::from(k.as_str()), Arc::from(v.as_str())))
                .collect(),
        )
    }
}

/// The strings cached Pods share (label keys and values, owner uids, node names), each held once.
#[derive(Default)]
struct Interner {
    strings: HashSet<Arc<str>>,
    /// Interned since strings no Pod holds any more were last dropped.
    since_sweep: usize,
}

impl Interner {
    /// Interned strings between two sweeps for strings no Pod holds any more.
    const SWEEP_EVERY: usize = 16_384;

    fn intern(&mut self, value: &str) -> Arc<str> {
        self.since_sweep += 1;
        if self.since_sweep >= Self::SWEEP_EVERY {
            self.since_sweep = 0;
            self.strings.retain(|s| Arc::strong_count(s) > 1);
        }
        if let Some(shared) = self.strings.get(value) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(value);
        self.strings.insert(shared.clone());
        shared
    }
}

/// A Pod's uid and resourceVersion, held in the cache entry and copied into every selection. The
/// uid is shared by every version of the Pod, and the resourceVersion is held inline: a new version
/// of a Pod allocates nothing for either. (A small allocation made on every Pod write and kept until
/// the next one pins the allocator's page it lands on, among the short-lived allocations of the same
/// size that a rollout frees: after rollouts they kept the RSS far above the live heap.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    uid: Option<Arc<str>>,
    resource_version: Option<ResourceVersion>,
}

impl Version {
    /// `metadata`'s, sharing the uid of `previous` (the version before) when it is the same Pod.
    fn of(metadata: &ObjectMeta, previous: Option<&Version>) -> Self {
        let uid = metadata.uid.as_deref().map(|uid| {
            previous
                .and_then(|p| p.uid.as_ref())
                .filter(|known| known.as_ref() == uid)
                .map_or_else(|| Arc::from(uid), Arc::clone)
        });
        Self {
            uid,
            resource_version: metadata
                .resource_version
                .as_deref()
                .map(ResourceVersion::new),
        }
    }

    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_ref().map(ResourceVersion::as_str)
    }
}

/// A resourceVersion, inline when it fits (etcd's are decimal numbers of up to 20 digits) and
/// shared otherwise (the value is opaque to clients, so any length is kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceVersion {
    Inline {
        len: u8,
        bytes: [u8; ResourceVersion::INLINE],
    },
    Long(Arc<str>),
}

impl ResourceVersion {
    /// The longest value held inline: the enum stays three words.
    const INLINE: usize = 22;

    pub fn new(value: &str) -> Self {
        match u8::try_from(value.len()) {
            Ok(len) if value.len() <= Self::INLINE => {
                let mut bytes = [0; Self::INLINE];
                bytes[..value.len()].copy_from_slice(value.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Long(Arc::from(value)),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // Whole `str`s were copied in: always UTF-8.
            Self::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Self::Long(value) => value,
        }
    }
}

impl Entry {
    /// The entry of `pod` (projected), encoded by [`Projected::of`] before the cache's lock was
    /// taken; here only its strings are interned. What did not change since `previous`, the entry
    /// of the Pod's version before, is shared with it rather than allocated again (see [`Version`]).
    fn of(
        key: PodKey,
        pod: &Pod,
        bytes: Vec<u8>,
        shared: SharedAnnotations<String>,
        previous: Option<&Entry>,
        strings: &mut Interner,
    ) -> Self {
        let (key, labels) = match previous {
            Some(previous) if previous.labels.are(pod.metadata.labels.as_ref()) => {
                (previous.key.clone(), previous.labels.clone())
            }
            Some(previous) => (previous.key.clone(), PodLabels::of(pod, strings)),
            None => (Arc::new(key), PodLabels::of(pod, strings)),
        };
        Self {
            encoded: Encoded {
                bytes: packed::Bytes::alone(bytes),
                shared: shared.map(|value| value.map(|value| strings.intern(&value))),
            },
            group: group_of(&key, pod, strings),
            labels,
            node: pod
                .spec
                .as_ref()
                .and_then(kruise_core::nodefit::bound_node)
                .map(|node| strings.intern(node)),
            version: Version::of(&pod.metadata, previous.map(|p| &p.version)),
            key,
        }
    }

    fn decode(&self) -> Option<Arc<Pod>> {
        self.encoded.decode()
    }
}

/// A Pod a selection returned: which Pod and at which version at hand, the Pod itself decoded when
/// first read. A SidecarSet reads its thousands of Pods on every reconcile but decides anew only
/// for those whose resourceVersion moved; the others need not be decoded at all. Clones share the
/// decoded Pod.
#[derive(Clone)]
pub struct Selected(Arc<SelectedPod>);

struct SelectedPod {
    key: Arc<PodKey>,
    version: Version,
    encoded: Encoded,
    decoded: std::sync::OnceLock<Arc<Pod>>,
}

impl Selected {
    /// One allocation: the rest is shared with the cache entry.
    fn new(entry: &Entry) -> Self {
        Self(Arc::new(SelectedPod {
            key: entry.key.clone(),
            version: entry.version.clone(),
            encoded: entry.encoded.clone(),
            decoded: std::sync::OnceLock::new(),
        }))
    }

    /// Namespace and name.
    pub fn key(&self) -> &PodKey {
        &self.0.key
    }

    pub fn version(&self) -> &Version {
        &self.0.version
    }

    /// Whether the Pod has been decoded yet.
    #[cfg(test)]
    pub(crate) fn is_decoded(&self) -> bool {
        self.0.decoded.get().is_some()
    }

    /// The Pod (its projection), decoded on the first call and kept for the next ones.
    pub fn pod(&self) -> &Arc<Pod> {
        self.0.decoded.get_or_init(|| self.decode())
    }

    /// The Pod, decoded for this one read unless it already was: for what reads every selected Pod
    /// once (a SidecarSet's verdicts). Keeping each decoded Pod until the selection is dropped held
    /// every changed Pod of every SidecarSet reconcile at once, for as long as its writes took:
    /// most of the manager's heap in a rollout.
    pub fn read_once(&self) -> Arc<Pod> {
        match self.0.decoded.get() {
            Some(pod) => pod.clone(),
            None => self.decode(),
        }
    }

    fn decode(&self) -> Arc<Pod> {
        // What the cache encoded decodes; should it not, an empty Pod with the same identity
        // matches no selector and is planned for nothing.
        self.0.encoded.decode().unwrap_or_else(|| {
            let mut pod = Pod::default();
            pod.metadata.namespace = Some(self.0.key.0.clone());
            pod.metadata.name = Some(self.0.key.1.clone());
            Arc::new(pod)
        })
    }
}

impl std::borrow::Borrow<Pod> for Selected {
    fn borrow(&self) -> &Pod {
        self.pod()
    }
}

impl std::fmt::Debug for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selected")
            .field("key", &self.0.key)
            .field("version", &self.0.version)
            .finish_non_exhaustive()
    }
}

/// Decodes what was taken out of the lock.
fn decode_all(encoded: Vec<Encoded>) -> Vec<Arc<Pod>> {
    encoded.iter().filter_map(Encoded::decode).collect()
}

/// A cached Pod's projection, encoded ([`codec`]) but for its [`SHARED_ANNOTATIONS`].
#[derive(Clone)]
struct Encoded {
    bytes: packed::Bytes,
    /// Interned.
    shared: SharedAnnotations<Arc<str>>,
}

/// Pods decoded whole from the cache (every [`Encoded::decode`]), for the
/// `kruise_controller_pod_cache_decodes` metric: what reading the compact cache costs in CPU and in
/// short-lived heap, which a reconcile's count alone does not say (a reconcile decodes each Pod it
/// reads, however few of them changed).
pub static POD_DECODES: std::sync::LazyLock<prometheus_client::metrics::counter::Counter> =
    std::sync::LazyLock::new(Default::default);

impl Encoded {
    fn decode(&self) -> Option<Arc<Pod>> {
        POD_DECODES.inc();
        let mut pod = self.decode_as::<Pod>()?;
        self.restore_shared(&mut pod.metadata);
        Some(Arc::new(pod))
    }

    /// Puts the [`SHARED_ANNOTATIONS`] back where they were taken from.
    fn restore_shared(&self, metadata: &mut ObjectMeta) {
        for (key, value) in SHARED_ANNOTATIONS.iter().zip(&self.shared) {
            if let Some(value) = value {
                metadata
                    .annotations
                    .get_or_insert_default()
                    .insert((*key).to_owned(), value.to_string());
            }
        }
    }

    /// Only the metadata: what expectations and deletion checks read, without building the spec and
    /// status of the Pod (they are skipped over, not allocated).
    fn decode_metadata(&self) -> Option<ObjectMeta> {
        #[derive(serde::Deserialize)]
        struct MetadataOnly {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        let mut metadata = self.decode_as::<MetadataOnly>()?.metadata;
        self.restore_shared(&mut metadata);
        Some(metadata)
    }

    fn decode_as<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        match codec::decode(self.bytes.as_slice()) {
            Ok(value) => Some(value),
            Err(error) => {
                // Cannot happen for what `of` encoded; said rather than hidden if it does.
                tracing::error!(%error, "cannot decode a cached Pod");
                None
            }
        }
    }
}

#[derive(Default)]
struct State {
    pods: HashMap<Arc<PodKey>, Entry>,
    groups: HashMap<Group, BTreeSet<Arc<PodKey>>>,
    /// Pods of a relist in progress; swapped in when it completes.
    relist: Option<HashMap<Arc<PodKey>, Entry>>,
    strings: Interner,
    /// Entries written since the cache was last packed ([`PodCache::pack`]).
    unpacked: usize,
}

/// The shared Pod cache. Cheap to clone through `Arc`.
pub struct PodCache {
    state: RwLock<State>,
    synced: watch::Sender<bool>,
    events: broadcast::Sender<CacheEvent>,
}

/// The controlling owner reference of a Pod, if any.
pub fn controller_of(pod: &Pod) -> Option<&OwnerReference> {
    kruise_core::ownership::controller_of(&pod.metadata)
}

fn key_of(pod: &Pod) -> Option<PodKey> {
    Some((
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone()?,
    ))
}

fn owner_change(pod: &Pod) -> Option<OwnerChange> {
    let owner = controller_of(pod)?;
    Some(OwnerChange {
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: owner.name.clone(),
    })
}

/// The environment variables a planner reads from a Pod's containers (container launch priority,
/// `kruise_core::inplace::batches`); besides these, the entries that read a Pod label or annotation
/// (the env-from-metadata completion check, `kruise_core::inplace::envmeta`) are kept; every other
/// entry is dropped.
const ENV_READ: [&str; 2] = [
    kruise_core::inplace::ENV_CONTAINER_PRIORITY,
    kruise_core::inplace::ENV_CONTAINER_BARRIER,
];

/// The Pod as the cache keeps it: the fields some controller or planner reads, in full, and nothing
/// else. What is kept whole is kept whole on purpose: labels, annotations, finalizers, owner
/// references, the containers and their statuses, the conditions and the resource maps are written
/// back by patches that address them by index or replace them when absent, so a partial copy would
/// lose data on the server. Fields read only for BroadcastJob Pods (node selector, tolerations,
/// overhead, required node affinity) are kept for every Pod. The property test
/// `projection_decides_as_the_full_pod` (tests/projection.rs) checks that planning on the projection
/// decides exactly what planning on the full Pod does.
pub fn project(pod: Pod) -> Pod {
    let Pod {
        metadata,
        spec,
        status,
    } = pod;
    let reported = metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(kruise_api::keys::ANNOTATION_RUNTIME_CONTAINERS_META));
    let metadata = ObjectMeta {
        name: metadata.name,
        namespace: metadata.namespace,
        uid: metadata.uid,
        resource_version: metadata.resource_version,
        labels: metadata.labels,
        annotations: metadata.annotations,
        finalizers: metadata.finalizers,
        owner_references: metadata.owner_references,
        creation_timestamp: metadata.creation_timestamp,
        deletion_timestamp: metadata.deletion_timestamp,
        ..ObjectMeta::default()
    };
    let spec = spec.map(|spec| PodSpec {
        node_name: spec.node_name,
        affinity: spec
            .affinity
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .map(|required| Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(required),
                    ..NodeAffinity::default()
                }),
                ..Affinity::default()
            }),
        node_selector: spec.node_selector,
        tolerations: spec.tolerations,
        overhead: spec.overhead,
        restart_policy: spec.restart_policy,
        readiness_gates: spec.readiness_gates,
        containers: spec.containers.into_iter().map(project_container).collect(),
        init_containers: spec
            .init_containers
            .map(|c| c.into_iter().map(project_container).collect()),
        ephemeral_containers: spec
            .ephemeral_containers
            .map(|c| c.into_iter().map(project_ephemeral_container).collect()),
        ..PodSpec::default()
    });
    let status = status.map(|status| PodStatus {
        phase: status.phase,
        conditions: status.conditions,
        container_statuses: status.container_statuses.map(|c| {
            c.into_iter()
                .map(|c| project_container_status(c, reported))
                .collect()
        }),
        init_container_statuses: status.init_container_statuses.map(|c| {
            c.into_iter()
                .map(|c| project_container_status(c, reported))
                .collect()
        }),
        // EphemeralJob reads each ephemeral container's state.
        ephemeral_container_statuses: status.ephemeral_container_statuses.map(|c| {
            c.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    state: c.state,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
    Pod {
        metadata,
        spec,
        status,
    }
}

fn project_container(c: Container) -> Container {
    let env: Vec<EnvVar> = c
        .env
        .into_iter()
        .flatten()
        .filter(|e| {
            ENV_READ.contains(&e.name.as_str()) || kruise_core::inplace::envmeta::is_metadata_env(e)
        })
        .collect();
    Container {
        name: c.name,
        image: c.image,
        resources: c.resources,
        resize_policy: c.resize_policy,
        restart_policy: c.restart_policy,
        env: (!env.is_empty()).then_some(env),
        ..Container::default()
    }
}

/// An ephemeral container as EphemeralJob reads it: its name and the env entry naming the job that
/// added it.
fn project_ephemeral_container(c: EphemeralContainer) -> EphemeralContainer {
    let env: Vec<EnvVar> = c
        .env
        .into_iter()
        .flatten()
        .filter(|e| e.name == kruise_api::ephemeraljob::ENV_JOB_ID)
        .collect();
    EphemeralContainer {
        name: c.name,
        env: (!env.is_empty()).then_some(env),
        ..EphemeralContainer::default()
    }
}

/// A container status as the planners read it; the container ID only for a Pod whose containers are
/// reported by kruise-daemon (`apps.kruise.io/runtime-containers-meta`): the env-from-metadata
/// completion check compares the two.
fn project_container_status(c: ContainerStatus, reported: bool) -> ContainerStatus {
    ContainerStatus {
        name: c.name,
        container_id: c.container_id.filter(|_| reported),
        image: c.image,
        image_id: c.image_id,
        ready: c.ready,
        restart_count: c.restart_count,
        started: c.started,
        resources: c.resources,
        ..ContainerStatus::default()
    }
}

/// Where a Pod is indexed: under its controlling owner, or with the orphans of its namespace (the
/// Pods a controller may adopt).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Group {
    Owner(Arc<str>),
    Orphans(Arc<str>),
}

fn group_of(key: &PodKey, pod: &Pod, strings: &mut Interner) -> Group {
    match controller_of(pod) {
        Some(owner) => Group::Owner(strings.intern(&owner.uid)),
        None => Group::Orphans(strings.intern(&key.0)),
    }
}

impl State {
    fn insert(&mut self, entry: Entry) {
        self.unpacked += 1;
        let (key, group) = (entry.key.clone(), entry.group.clone());
        let old_group = self.pods.insert(key.clone(), entry).map(|old| old.group);
        // Same owner as before: the index already holds this key.
        if old_group.as_ref() != Some(&group) {
            if let Some(old_group) = &old_group {
                self.unindex(old_group, &key);
            }
            self.groups.entry(group).or_default().insert(key);
        }
    }

    /// Takes the Pod out of the cache, and returns what it held.
    fn remove(&mut self, key: &PodKey) -> Option<Entry> {
        let old = self.pods.remove(key)?;
        self.unindex(&old.group, key);
        Some(old)
    }

    fn unindex(&mut self, group: &Group, key: &PodKey) {
        if let Some(set) = self.groups.get_mut(group) {
            set.remove(key);
            if set.is_empty() {
                self.groups.remove(group);
            }
        }
    }

    /// The Pods (of `namespace`, or of all) whose labels `keep` accepts.
    fn matching(
        &self,
        namespace: Option<&str>,
        keep: impl Fn(&PodLabels) -> bool,
    ) -> impl Iterator<Item = &Entry> {
        self.pods
            .values()
            .filter(move |e| namespace.is_none_or(|n| n == e.key.0) && keep(&e.labels))
    }

    fn in_group(&self, group: &Group) -> impl Iterator<Item = &Entry> {
        self.groups
            .get(group)
            .into_iter()
            .flatten()
            .filter_map(|key| self.pods.get(key))
    }
}

/// Pods per page of the Pod cache's (re)list, where the apiserver cannot stream it.
const POD_LIST_PAGE: u32 = 250;

/// How the Pod cache gets the Pods of the cluster when it starts (and whenever it relists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InitialList {
    /// A streaming list (`sendInitialEvents`, the WatchList feature, on by default in v1.34 and
    /// v1.32): one watch that sends every Pod from the apiserver's watch cache as an event, then
    /// the bookmark that ends the list. Pods are projected while the next ones are on their way,
    /// and nothing waits on a round trip per page.
    Streaming,
    /// Pages at the most recent resourceVersion, for an apiserver that refuses the streaming list
    /// (WatchList off, as in v1.33 by default). A list at resourceVersion 0 (the watcher's "any"
    /// semantic) would be answered whole whatever its limit says (v1.34, 3,000 Pods: 20.7 MB of
    /// JSON in one response, held as JSON and decoded before the first Pod was projected); pages
    /// of 250 keep that to a few MiB at any cluster size.
    Paged,
}

fn pod_watch_config(initial: InitialList) -> watcher::Config {
    match initial {
        InitialList::Streaming => watcher::Config::default().streaming_lists(),
        InitialList::Paged => watcher::Config::default().page_size(POD_LIST_PAGE),
    }
}

/// Whether the apiserver refused to start a streaming list (it answers 422 Invalid, or 400 from
/// a proxy, when WatchList is off): then the cache lists in pages.
fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) if matches!(status.code, 400 | 422)
    )
}

/// The same watch event, of the [`Pod`] inside.
fn into_pod_event(event: watcher::Event<WirePod>) -> watcher::Event<Pod> {
    match event {
        watcher::Event::Apply(pod) => watcher::Event::Apply(pod.into_pod()),
        watcher::Event::Delete(pod) => watcher::Event::Delete(pod.into_pod()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(pod) => watcher::Event::InitApply(pod.into_pod()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// One subscriber's events. One that falls more than [`EVENTS_BUFFERED`] events behind has missed
/// some: it gets [`CacheEvent::Resync`] in their place, and a warning says so.
pub struct CacheEvents {
    events: broadcast::Receiver<CacheEvent>,
    subscriber: &'static str,
}

impl CacheEvents {
    /// The next event; `None` once the cache is gone.
    pub async fn recv(&mut self) -> Option<CacheEvent> {
        match self.events.recv().await {
            Ok(event) => Some(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => Some(self.lagged(missed)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The next event if one is there (tests).
    pub fn try_recv(&mut self) -> Option<CacheEvent> {
        match self.events.try_recv() {
            Ok(event) => Some(event),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(self.lagged(missed)),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                None
            }
        }
    }

    /// What a subscriber that missed `missed` events gets in their place.
    fn lagged(&self, missed: u64) -> CacheEvent {
        tracing::warn!(
            subscriber = self.subscriber,
            missed,
            "fell behind the Pod cache's events; every workload it serves is reconciled again"
        );
        CacheEvent::Resync
    }

    /// Hands the events on to the controller of `K`, an apps.kruise.io workload, on a task of its
    /// own until either side is gone: the owner of a changed Pod when it is a `K`, to reconcile, and
    /// `()` on `all` when every `K` must be reconciled (the cache relisted, or this subscriber fell
    /// behind).
    pub fn forward_owners<K>(
        mut self,
        all: mpsc::UnboundedSender<()>,
    ) -> mpsc::UnboundedReceiver<reflector::ObjectRef<K>>
    where
        K: kube::Resource<DynamicType = ()> + 'static,
    {
        let (owners, owners_rx) = mpsc::unbounded_channel();
        let (kind, group) = (K::kind(&()), K::group(&()));
        tokio::spawn(async move {
            while let Some(event) = self.recv().await {
                let sent = match event {
                    CacheEvent::Owner(owner) => {
                        let is_k = owner.kind == kind
                            && owner.api_version.split('/').next() == Some(&*group);
                        !is_k
                            || owners
                                .send(
                                    reflector::ObjectRef::new(&owner.name).within(&owner.namespace),
                                )
                                .is_ok()
                    }
                    CacheEvent::Pod(_) => true,
                    CacheEvent::Resync => all.send(()).is_ok(),
                };
                if !sent {
                    return;
                }
            }
        });
        owners_rx
    }
}

/// Events the channel holds for a subscriber that has not read them yet. The ring is allocated and
/// written whole when the cache is made, 40 bytes a slot (a mutex, a count, a position and the
/// event): 65,536 took 2.5 MiB of every manager's RSS, this 0.6. A subscriber only hands each event
/// on to its controller's queue, and a rollout of 10,000 Pods sends about 600 a second (a Pod event
/// and an owner event per Pod write the apiserver serves), so it would have to go unpolled for 25 s
/// to lag; one that lags is told to resync, which reconciles every workload of its kind once.
const EVENTS_BUFFERED: usize = 16_384;

/// Whether the cache is worth packing ([`PodCache::pack`]), with `unpacked` Pods written since it
/// was last packed, `unpacked_before` of them a look before, and `pods` cached: once an eighth of its
/// Pods (and at least [`PACK_AFTER_WRITES`]) were written, so that a long burst of writes does not
/// scatter them all; and once a burst of at least [`PACK_AFTER_BURST`] writes stopped (none since
/// the look before), so that what its end wrote does not stay scattered while the cache is at rest.
/// A Pod changing now and then in a quiet cluster does not make the cache copy all of its Pods.
fn pack_due(unpacked: usize, unpacked_before: usize, pods: usize) -> bool {
    unpacked >= PACK_AFTER_WRITES.max(pods / 8)
        || (unpacked >= PACK_AFTER_BURST && unpacked == unpacked_before)
}

/// Pod writes that, once they stopped, the cache packs ([`pack_due`]).
const PACK_AFTER_BURST: usize = 64;

/// How often the cache looks whether it is worth packing ([`PodCache::pack`]).
const PACK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Pod writes since the last packing below which the cache is not packed, however few its Pods.
const PACK_AFTER_WRITES: usize = 256;

impl PodCache {
    pub fn new() -> Arc<Self> {
        let (synced, _) = watch::channel(false);
        let (events, _) = broadcast::channel(EVENTS_BUFFERED);
        Arc::new(Self {
            state: RwLock::new(State::default()),
            synced,
            events,
        })
    }

    /// Copies every cached Pod's encoded bytes into one allocation ([`packed`]), so that the
    /// scattered ones are freed; returns how many it packed. The copy is made outside the lock;
    /// a Pod written meanwhile keeps its new bytes.
    pub fn pack(&self) -> usize {
        let before = self.bytes_to_pack();
        let after = packed::pack(before.iter().map(|(_, bytes)| bytes));
        self.put_packed(&before, after)
    }

    /// Every cached Pod's bytes, as they are now.
    fn bytes_to_pack(&self) -> Vec<(Arc<PodKey>, packed::Bytes)> {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        state.unpacked = 0;
        state
            .pods
            .values()
            .map(|e| (e.key.clone(), e.encoded.bytes.clone()))
            .collect()
    }

    /// Puts the packed copy of `before` in place of the bytes that have not changed since.
    fn put_packed(
        &self,
        before: &[(Arc<PodKey>, packed::Bytes)],
        after: Vec<packed::Bytes>,
    ) -> usize {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut packed = 0;
        for ((key, old), new) in before.iter().zip(after) {
            if let Some(entry) = state.pods.get_mut(&**key)
                && entry.encoded.bytes.same(old)
            {
                entry.encoded.bytes = new;
                packed += 1;
            }
        }
        packed
    }

    /// Packs the cache ([`Self::pack`]) when [`pack_due`] says so, looking every [`PACK_EVERY`],
    /// until the cache is dropped. A rollout of 10,000 Pods is packed every few seconds (about 10 MB
    /// copied, a few milliseconds) and once more when it is over; a cluster at rest never.
    async fn pack_when_written(cache: std::sync::Weak<Self>) {
        let mut tick = tokio::time::interval(PACK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut unpacked_before = 0;
        loop {
            tick.tick().await;
            let Some(cache) = cache.upgrade() else {
                return;
            };
            let (unpacked, pods) = {
                let state = cache.state.read().unwrap_or_else(|e| e.into_inner());
                (state.unpacked, state.pods.len())
            };
            let due = pack_due(unpacked, unpacked_before, pods);
            unpacked_before = if due { 0 } else { unpacked };
            if due {
                let started = std::time::Instant::now();
                let packed = cache.pack();
                tracing::debug!(packed, took = ?started.elapsed(), "packed the Pod cache");
            }
        }
    }

    /// Watches Pods in every namespace until dropped, restarting the watch with backoff on errors.
    pub async fn run(self: Arc<Self>, client: Client) {
        tokio::spawn(Self::pack_when_written(Arc::downgrade(&self)));
        // Decoded without managed fields, which the projection drops anyway.
        let api: Api<WirePod> = Api::all(client);
        let mut initial = InitialList::Streaming;
        loop {
            let stream = watcher(api.clone(), pod_watch_config(initial)).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut refused = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => self.apply(into_pod_event(event)),
                    Err(error)
                        if initial == InitialList::Streaming && refuses_streaming(&error) =>
                    {
                        tracing::warn!(%error, "the apiserver does not serve streaming lists (WatchList); listing Pods in pages instead");
                        refused = true;
                        break;
                    }
                    Err(error) => tracing::warn!(%error, "pod watch failed; retrying"),
                }
            }
            if !refused {
                return;
            }
            initial = InitialList::Paged;
        }
    }

    /// Applies one watch event (public so tests can drive the cache without a server).
    pub fn apply(&self, event: watcher::Event<Pod>) {
        let mut changed: Vec<CacheEvent> = Vec::new();
        {
            // The costly part, projecting and encoding the Pod, before the lock: readers (a
            // reconcile taking its Pods) do not wait for it.
            let event = match event {
                watcher::Event::Apply(pod) => watcher::Event::Apply(Projected::of(pod)),
                watcher::Event::InitApply(pod) => watcher::Event::InitApply(Projected::of(pod)),
                watcher::Event::Delete(pod) => watcher::Event::Delete(Projected::deleted(pod)),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitDone => watcher::Event::InitDone,
            };
            let mut guard = self.state.write().unwrap_or_else(|e| e.into_inner());
            let state = &mut *guard;
            match event {
                watcher::Event::Apply(Projected {
                    pod,
                    encoded,
                    shared,
                }) => {
                    if let Some(key) = key_of(&pod)
                        && let Some(bytes) = encoded
                    {
                        let previous = state.pods.get(&key);
                        let entry =
                            Entry::of(key, &pod, bytes, shared, previous, &mut state.strings);
                        let change = PodChange {
                            key: entry.key.clone(),
                            uid: entry.version.uid.clone(),
                            labels: entry.labels.clone(),
                            deleted: false,
                        };
                        let old_owner = match previous {
                            // Moved to another owner (adopted or released): that owner hears of it too.
                            Some(old) if old.group != entry.group => {
                                old.decode().as_deref().and_then(owner_change)
                            }
                            _ => None,
                        };
                        state.insert(entry);
                        changed.extend(owner_change(&pod).map(|o| CacheEvent::Owner(Arc::new(o))));
                        if let Some(old) = old_owner.map(Arc::new)
                            && !changed.contains(&CacheEvent::Owner(old.clone()))
                        {
                            changed.push(CacheEvent::Owner(old));
                        }
                        changed.insert(0, CacheEvent::Pod(Arc::new(change)));
                    }
                }
                watcher::Event::Delete(Projected { pod, .. }) => {
                    if let Some(key) = key_of(&pod) {
                        let old = state.remove(&key);
                        changed.extend(owner_change(&pod).map(|o| CacheEvent::Owner(Arc::new(o))));
                        let change = match old {
                            Some(old) => PodChange {
                                key: old.key,
                                uid: old.version.uid,
                                labels: old.labels,
                                deleted: true,
                            },
                            None => PodChange {
                                labels: PodLabels::of(&pod, &mut state.strings),
                                uid: pod.metadata.uid.as_deref().map(Arc::from),
                                key: Arc::new(key),
                                deleted: true,
                            },
                        };
                        changed.push(CacheEvent::Pod(Arc::new(change)));
                    }
                }
                watcher::Event::Init => state.relist = Some(HashMap::new()),
                watcher::Event::InitApply(Projected {
                    pod,
                    encoded,
                    shared,
                }) => {
                    if let Some(key) = key_of(&pod)
                        && let Some(bytes) = encoded
                    {
                        let previous = state.pods.get(&key);
                        let entry =
                            Entry::of(key, &pod, bytes, shared, previous, &mut state.strings);
                        state
                            .relist
                            .get_or_insert_with(HashMap::new)
                            .insert(entry.key.clone(), entry);
                    }
                }
                watcher::Event::InitDone => {
                    let relisted = state.relist.take().unwrap_or_default();
                    state.pods.clear();
                    state.groups.clear();
                    for entry in relisted.into_values() {
                        state.insert(entry);
                    }
                    changed.push(CacheEvent::Resync);
                }
            }
        }
        if changed.contains(&CacheEvent::Resync) {
            self.synced.send_replace(true);
        }
        for event in changed {
            // No subscriber yet is fine: controllers resync when they start.
            let _ = self.events.send(event);
        }
    }

    /// Waits until the first list has been loaded.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Change notifications from now on, for `subscriber` (named in the warning should it fall
    /// behind).
    pub fn subscribe(&self, subscriber: &'static str) -> CacheEvents {
        CacheEvents {
            events: self.events.subscribe(),
            subscriber,
        }
    }

    /// A cached Pod.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.encoded(namespace, name)?.decode()
    }

    /// A cached Pod's metadata (cheaper than [`Self::get`] when that is all that is read).
    pub fn metadata(&self, namespace: &str, name: &str) -> Option<ObjectMeta> {
        self.encoded(namespace, name)?.decode_metadata()
    }

    fn encoded(&self, namespace: &str, name: &str) -> Option<Encoded> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|e| e.encoded.clone())
    }

    /// The Pods whose controlling owner has this uid.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<Pod>> {
        self.decode_group(&Group::Owner(Arc::from(uid)))
    }

    fn decode_group(&self, group: &Group) -> Vec<Arc<Pod>> {
        let encoded: Vec<Encoded> = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            state.in_group(group).map(|e| e.encoded.clone()).collect()
        };
        decode_all(encoded)
    }

    /// Whether a Pod whose controlling owner has this uid is bound to `node` (without decoding any).
    pub fn owns_pod_on(&self, uid: &str, node: &str) -> bool {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .in_group(&Group::Owner(Arc::from(uid)))
            .any(|e| e.node.as_deref() == Some(node))
    }

    /// The Pods of a namespace without a controlling owner (candidates for adoption).
    pub fn orphans_in(&self, namespace: &str) -> Vec<Arc<Pod>> {
        self.decode_group(&Group::Orphans(Arc::from(namespace)))
    }

    /// The cached Pods (of `namespace`, or of all) whose labels `keep` accepts.
    pub fn select(
        &self,
        namespace: Option<&str>,
        keep: impl Fn(&PodLabels) -> bool,
    ) -> Vec<Arc<Pod>> {
        let encoded: Vec<Encoded> = {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            state
                .matching(namespace, keep)
                .map(|e| e.encoded.clone())
                .collect()
        };
        decode_all(encoded)
    }

    /// Like [`Self::select`], but each Pod is decoded only when read.
    pub fn select_lazily(
        &self,
        namespace: Option<&str>,
        keep: impl Fn(&PodLabels) -> bool,
    ) -> Vec<Selected> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.matching(namespace, keep).map(Selected::new).collect()
    }

    /// The number of cached Pods.
    pub fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .pods
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_is_listed_once_its_first_list_is_in_for_every_reader() {
        let (store, mut writer) = reflector::store::<Pod>();
        assert!(!listed(&store));
        // Readers on tasks of their own, as reconciles are: none may miss the moment.
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    while !listed(&store) {
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for reader in readers {
            tokio::time::timeout(std::time::Duration::from_secs(5), reader)
                .await
                .expect("every reader sees the store listed")
                .expect("reader task");
        }
        assert!(listed(&store));
    }

    #[test]
    fn the_pod_list_is_streamed_or_else_paged() {
        let streamed = pod_watch_config(InitialList::Streaming);
        assert_eq!(
            streamed.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
        // A list at resourceVersion 0 ("any") is answered whole whatever its limit says.
        let paged = pod_watch_config(InitialList::Paged);
        assert_eq!(paged.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(paged.page_size, Some(POD_LIST_PAGE));
        assert_eq!(
            paged.initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
    }

    #[test]
    fn only_a_refused_streaming_list_falls_back_to_pages() {
        let api_error = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("refused", "Invalid")
                    .with_code(code)
                    .boxed(),
            )
        };
        // (error, falls back)
        let cases = [
            (watcher::Error::WatchStartFailed(api_error(422)), true),
            (watcher::Error::WatchStartFailed(api_error(400)), true),
            // Overload, no permission yet, a server error: retried as a streaming list.
            (watcher::Error::WatchStartFailed(api_error(429)), false),
            (watcher::Error::WatchStartFailed(api_error(403)), false),
            (watcher::Error::WatchStartFailed(api_error(500)), false),
            (watcher::Error::InitialListFailed(api_error(422)), false),
        ];
        for (error, falls_back) in cases {
            assert_eq!(refuses_streaming(&error), falls_back, "{error:?}");
        }
    }

    fn pod(name: &str, owner_uid: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: owner_uid.map(|uid| {
                    vec![OwnerReference {
                        api_version: "apps.kruise.io/v1beta1".into(),
                        kind: "CloneSet".into(),
                        name: format!("cs-{uid}"),
                        uid: uid.into(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    }]
                }),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        let mut names: Vec<String> = pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn indexes_by_owner_and_notifies() {
        let cache = PodCache::new();
        let mut rx = cache.subscribe("test");
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(pod("a", Some("u1"))));
        cache.apply(watcher::Event::InitApply(pod("b", None)));
        cache.apply(watcher::Event::InitDone);
        assert_eq!(rx.try_recv(), Some(CacheEvent::Resync));
        assert_eq!(names(cache.owned_by("u1")), vec!["a"]);
        assert_eq!(names(cache.orphans_in("ns")), vec!["b"]);

        // b is adopted by u1, then a moves to u2: both owners hear about a.
        cache.apply(watcher::Event::Apply(pod("b", Some("u1"))));
        cache.apply(watcher::Event::Apply(pod("a", Some("u2"))));
        assert_eq!(names(cache.owned_by("u1")), vec!["b"]);
        assert_eq!(names(cache.owned_by("u2")), vec!["a"]);
        let owners: Vec<String> = std::iter::from_fn(|| rx.try_recv())
            .filter_map(|e| match e {
                CacheEvent::Owner(o) => Some(o.name.clone()),
                CacheEvent::Pod(_) | CacheEvent::Resync => None,
            })
            .collect();
        assert_eq!(owners, vec!["cs-u1", "cs-u2", "cs-u1"]);

        cache.apply(watcher::Event::Delete(pod("a", Some("u2"))));
        assert!(cache.owned_by("u2").is_empty());
        assert_eq!(cache.len(), 1);
        assert!(cache.get("ns", "b").is_some());
    }

    #[tokio::test]
    async fn owners_of_the_workloads_kind_are_forwarded_and_a_relist_to_all() {
        use kruise_api::cloneset::v1beta1::CloneSet;
        let cache = PodCache::new();
        let (all_tx, mut all) = mpsc::unbounded_channel();
        let mut owners = cache.subscribe("test").forward_owners::<CloneSet>(all_tx);
        let owned_by = |name: &str, api_version: &str, kind: &str| {
            let mut p = pod(name, Some("u1"));
            if let Some(owner) = p
                .metadata
                .owner_references
                .as_mut()
                .and_then(|o| o.first_mut())
            {
                owner.api_version = api_version.into();
                owner.kind = kind.into();
            }
            p
        };
        cache.apply(watcher::Event::Apply(owned_by(
            "a",
            "apps/v1",
            "ReplicaSet",
        )));
        cache.apply(watcher::Event::Apply(owned_by(
            "b",
            "example.com/v1",
            "CloneSet",
        )));
        cache.apply(watcher::Event::Apply(pod("c", None)));
        cache.apply(watcher::Event::Apply(owned_by(
            "d",
            "apps.kruise.io/v1alpha1",
            "CloneSet",
        )));
        let wait = std::time::Duration::from_secs(5);
        let forwarded = tokio::time::timeout(wait, owners.recv()).await;
        assert_eq!(
            forwarded.ok().flatten(),
            Some(reflector::ObjectRef::new("cs-u1").within("ns"))
        );
        assert!(owners.try_recv().is_err(), "only the CloneSet owner");
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitDone);
        assert_eq!(
            tokio::time::timeout(wait, all.recv()).await.ok().flatten(),
            Some(())
        );
    }

    #[test]
    fn every_pod_decoded_whole_is_counted_on_metrics() {
        let cache = PodCache::new();
        cache.apply(watcher::Event::Apply(pod("a", Some("u1"))));
        cache.apply(watcher::Event::Apply(pod("b", Some("u1"))));
        let before = POD_DECODES.get();
        assert_eq!(cache.owned_by("u1").len(), 2);
        assert!(cache.get("ns", "a").is_some());
        // Other tests decode at the same time: at least these three.
        assert!(POD_DECODES.get() >= before + 3);
        let mut registry = prometheus_client::registry::Registry::default();
        crate::metrics::Metrics::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode metrics");
        let line = text
            .lines()
            .find(|l| l.starts_with("kruise_controller_pod_cache_decodes_total "))
            .expect("the counter is exposed");
        let shown: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number");
        assert!(shown >= (before + 3) as f64, "{line}");
    }

    #[test]
    fn a_subscriber_that_fell_behind_is_told_to_resync() {
        let cache = PodCache::new();
        let mut behind = cache.subscribe("test");
        // A Pod without an owner is one event; one more than the ring holds.
        for i in 0..=EVENTS_BUFFERED {
            cache.apply(watcher::Event::Apply(pod(&format!("p{i}"), None)));
        }
        assert_eq!(behind.try_recv(), Some(CacheEvent::Resync));
        // Then it reads on from the oldest event still held.
        assert!(matches!(behind.try_recv(), Some(CacheEvent::Pod(_))));
        drop(cache);
    }

    fn bytes_of(cache: &PodCache, name: &str) -> Option<packed::Bytes> {
        let state = cache.state.read().unwrap_or_else(|e| e.into_inner());
        state
            .pods
            .get(&("ns".to_owned(), name.to_owned()))
            .map(|e| e.encoded.bytes.clone())
    }

    #[test]
    fn packing_puts_every_pod_in_one_block_and_reads_them_back() {
        let cache = PodCache::new();
        let names: Vec<String> = (0..5).map(|i| format!("p{i}")).collect();
        for name in &names {
            cache.apply(watcher::Event::Apply(pod(name, Some("u1"))));
        }
        let Some(first) = bytes_of(&cache, "p0") else {
            panic!("p0 cached");
        };
        assert!(!bytes_of(&cache, "p1").is_some_and(|b| b.shares_block(&first)));

        assert_eq!(cache.pack(), 5);
        let Some(first) = bytes_of(&cache, "p0") else {
            panic!("p0 cached");
        };
        for name in &names {
            assert!(bytes_of(&cache, name).is_some_and(|b| b.shares_block(&first)));
            assert_eq!(
                cache.get("ns", name).as_deref(),
                Some(&project(pod(name, Some("u1"))))
            );
        }
        assert_eq!(cache.owned_by("u1").len(), 5);
        // A Pod written since is on its own until the next packing, which makes a new block.
        let mut changed = pod("p3", Some("u1"));
        changed.metadata.labels = Some(BTreeMap::from([("v".into(), "2".into())]));
        cache.apply(watcher::Event::Apply(changed.clone()));
        assert!(!bytes_of(&cache, "p3").is_some_and(|b| b.shares_block(&first)));
        assert_eq!(cache.get("ns", "p3").as_deref(), Some(&project(changed)));
        assert_eq!(cache.pack(), 5);
        assert!(!bytes_of(&cache, "p0").is_some_and(|b| b.shares_block(&first)));
    }

    #[test]
    fn the_cache_is_packed_after_many_writes_or_once_they_stop() {
        // (written since the last packing, of them a look before, cached Pods) → due
        let cases = [
            ((0, 0, 10_000), false),      // at rest, nothing written
            ((900, 0, 10_000), false),    // writing, under an eighth
            ((900, 400, 10_000), false),  // still writing
            ((1_250, 900, 10_000), true), // an eighth of the Pods written
            ((900, 900, 10_000), true),   // the writes stopped
            ((1, 1, 10_000), false),      // a Pod changed at rest, then nothing
            ((64, 64, 10_000), true),     // a small burst, over
            ((255, 10, 100), false),      // few Pods: at least PACK_AFTER_WRITES
            ((PACK_AFTER_WRITES, 10, 100), true),
        ];
        for ((unpacked, before, pods), due) in cases {
            assert_eq!(
                pack_due(unpacked, before, pods),
                due,
                "{unpacked} {before} {pods}"
            );
        }
    }

    #[test]
    fn a_pod_written_while_the_cache_is_packed_keeps_its_new_bytes() {
        let cache = PodCache::new();
        for name in ["a", "b"] {
            cache.apply(watcher::Event::Apply(pod(name, None)));
        }
        let before = cache.bytes_to_pack();
        let after = packed::pack(before.iter().map(|(_, bytes)| bytes));
        let mut changed = pod("b", None);
        changed.metadata.labels = Some(BTreeMap::from([("v".into(), "2".into())]));
        cache.apply(watcher::Event::Apply(changed.clone()));
        cache.apply(watcher::Event::Delete(pod("a", None)));
        assert_eq!(cache.put_packed(&before, after), 0);
        assert_eq!(cache.get("ns", "b").as_deref(), Some(&project(changed)));
        assert!(cache.get("ns", "a").is_none());
    }

    #[test]
    fn a_cache_event_is_two_words() {
        // The event channel's ring holds EVENTS_BUFFERED events from the start: an event that
        // grows (an owner's strings inline) adds megabytes to every manager's RSS.
        assert!(std::mem::size_of::<CacheEvent>() <= 2 * std::mem::size_of::<usize>());
    }

    #[test]
    fn relist_replaces_everything() {
        let cache = PodCache::new();
        cache.apply(watcher::Event::Apply(pod("gone", Some("u1"))));
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(pod("new", Some("u1"))));
        // Until the relist completes, the old view stays.
        assert_eq!(names(cache.owned_by("u1")), vec!["gone"]);
        cache.apply(watcher::Event::InitDone);
        assert_eq!(names(cache.owned_by("u1")), vec!["new"]);
    }

    #[test]
    fn a_cached_pod_reads_back_as_its_projection() {
        let mut full = pod("a", Some("u1"));
        full.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        full.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            containers: vec![Container {
                name: "c".into(),
                image: Some("app:v1".into()),
                command: Some(vec!["run".into()]),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        let cache = PodCache::new();
        cache.apply(watcher::Event::Apply(full.clone()));
        let cached = cache.get("ns", "a");
        assert_eq!(cached.as_deref(), Some(&project(full.clone())));
        assert_eq!(
            cache.owned_by("u1").first().map(|p| p.as_ref()),
            Some(&project(full.clone()))
        );
        assert_eq!(
            cache.metadata("ns", "a"),
            Some(project(full.clone()).metadata)
        );
        assert!(cache.owns_pod_on("u1", "n1"));
        assert!(!cache.owns_pod_on("u1", "n2"));
        assert!(!cache.owns_pod_on("u2", "n1"));
    }

    #[test]
    fn select_filters_on_namespace_and_labels() {
        let cache = PodCache::new();
        for (name, ns, app) in [("a", "ns", "web"), ("b", "ns", "db"), ("c", "other", "web")] {
            let mut p = pod(name, None);
            p.metadata.namespace = Some(ns.into());
            p.metadata.labels = Some(BTreeMap::from([("app".into(), app.into())]));
            cache.apply(watcher::Event::Apply(p));
        }
        let web = |l: &PodLabels| l.get("app").is_some_and(|a| a == "web");
        assert_eq!(names(cache.select(None, web)), vec!["a", "c"]);
        assert_eq!(names(cache.select(Some("ns"), web)), vec!["a"]);
        assert!(cache.select(Some("none"), |_| true).is_empty());
    }

    #[test]
    fn managed_fields_are_not_cached() {
        let cache = PodCache::new();
        cache.apply(watcher::Event::Apply(pod("a", None)));
        let cached = cache.get("ns", "a");
        assert!(cached.is_some_and(|p| p.metadata.managed_fields.is_none()));
    }

    #[test]
    fn labels_are_shared_between_pods_and_read_by_selectors() {
        let cache = PodCache::new();
        for (name, app) in [("a", "web"), ("b", "web"), ("c", "db")] {
            let mut p = pod(name, Some("u1"));
            p.metadata.labels = Some(BTreeMap::from([
                ("app".into(), app.into()),
                ("tier".into(), "front".into()),
            ]));
            cache.apply(watcher::Event::Apply(p));
        }
        let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(serde_json::json!({
                "matchLabels": {"tier": "front"},
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]
            }))
            .unwrap_or_default();
        assert_eq!(
            names(cache.select(None, |l| l.matches(&selector))),
            ["a", "b"]
        );
        let state = cache.state.read().unwrap_or_else(|e| e.into_inner());
        let value = |name: &str, key: &str| {
            state
                .pods
                .get(&("ns".to_owned(), name.to_owned()))
                .and_then(|e| e.labels.0.iter().find(|(k, _)| &**k == key))
                .map(|(_, v)| v.clone())
        };
        let (Some(a), Some(b)) = (value("a", "tier"), value("b", "tier")) else {
            panic!("labels cached");
        };
        assert!(Arc::ptr_eq(&a, &b), "one copy of a value two Pods share");
    }

    #[test]
    fn a_new_version_of_a_pod_shares_what_did_not_change() {
        let cache = PodCache::new();
        let version = |rv: &str, app: &str| {
            let mut p = pod("a", Some("u1"));
            p.metadata.uid = Some("pod-uid".into());
            p.metadata.resource_version = Some(rv.into());
            p.metadata.labels = Some(BTreeMap::from([
                ("app".to_owned(), app.to_owned()),
                ("tier".to_owned(), "web".to_owned()),
            ]));
            p
        };
        // What the entry holds that could be shared: key, labels, uid.
        let held = || {
            let state = cache.state.read().unwrap_or_else(|e| e.into_inner());
            let entry = state.pods.get(&("ns".to_owned(), "a".to_owned()));
            entry.map(|e| (e.key.clone(), e.labels.clone(), e.version.clone()))
        };
        cache.apply(watcher::Event::Apply(version("1", "x")));
        let (key, labels, first) = held().expect("cached");
        cache.apply(watcher::Event::Apply(version("2", "x")));
        let (key2, labels2, second) = held().expect("cached");
        assert!(Arc::ptr_eq(&key, &key2));
        assert!(Arc::ptr_eq(&labels.0, &labels2.0));
        let uid = |v: &Version| v.uid.clone().expect("uid");
        assert!(Arc::ptr_eq(&uid(&first), &uid(&second)));
        assert_eq!(second.resource_version(), Some("2"));
        assert_eq!(
            cache
                .get("ns", "a")
                .and_then(|p| p.metadata.resource_version.clone())
                .as_deref(),
            Some("2")
        );

        // Labels that changed are the new ones.
        cache.apply(watcher::Event::Apply(version("3", "y")));
        let (key3, labels3, _) = held().expect("cached");
        assert!(Arc::ptr_eq(&key, &key3));
        assert_eq!(labels3.get("app"), Some("y"));
        assert_eq!(labels3.get("tier"), Some("web"));
        assert_eq!(cache.select(None, |l| l.get("app") == Some("y")).len(), 1);
        assert_eq!(cache.owned_by("u1").len(), 1);

        // A deleted Pod's event names what the cache held.
        let mut rx = cache.subscribe("test");
        cache.apply(watcher::Event::Delete(version("4", "y")));
        let deleted = std::iter::from_fn(|| rx.try_recv()).find_map(|event| match event {
            CacheEvent::Pod(change) => Some(change),
            _ => None,
        });
        let deleted = deleted.expect("a Pod event");
        assert!(deleted.deleted && Arc::ptr_eq(&deleted.key, &key));
        assert_eq!(deleted.uid.as_deref(), Some("pod-uid"));
        assert_eq!(deleted.labels.get("app"), Some("y"));
        assert!(cache.owned_by("u1").is_empty());
    }

    #[test]
    fn a_resource_version_is_held_inline_unless_long() {
        for value in ["", "1", "123456789012", "1234567890123456789012"] {
            let rv = ResourceVersion::new(value);
            assert!(matches!(rv, ResourceVersion::Inline { .. }), "{value}");
            assert_eq!(rv.as_str(), value);
        }
        let long = "12345678901234567890123-é";
        assert!(matches!(
            ResourceVersion::new(long),
            ResourceVersion::Long(_)
        ));
        assert_eq!(ResourceVersion::new(long).as_str(), long);
        assert_eq!(std::mem::size_of::<ResourceVersion>(), 24);
    }

    #[test]
    fn sidecarset_records_are_held_once_and_read_back_in_place() {
        use kruise_api::sidecarset::hash::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE};
        let record =
            r#"{"log":{"hash":"24b62v82v6ww2vzdcffv8d64bfxv2f2x","sidecarSetName":"log"}}"#;
        let cache = PodCache::new();
        let mut pods = Vec::new();
        for (name, hash) in [("a", record), ("b", record), ("c", "{}")] {
            let mut p = pod(name, Some("u1"));
            p.metadata.annotations = Some(BTreeMap::from([
                (ANNOTATION_HASH.into(), hash.into()),
                (ANNOTATION_HASH_WITHOUT_IMAGE.into(), record.into()),
                ("other".into(), "kept in the JSON".into()),
            ]));
            cache.apply(watcher::Event::Apply(p.clone()));
            pods.push(p);
        }
        // One without any annotation, one with only the records.
        let mut bare = pod("d", Some("u1"));
        cache.apply(watcher::Event::Apply(bare.clone()));
        bare.metadata.annotations = Some(BTreeMap::from([(ANNOTATION_HASH.into(), record.into())]));
        bare.metadata.name = Some("e".into());
        cache.apply(watcher::Event::Apply(bare.clone()));
        pods.extend([pod("d", Some("u1")), bare]);

        for p in &pods {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let projected = project(p.clone());
            assert_eq!(cache.get("ns", name).as_deref(), Some(&projected), "{name}");
            assert_eq!(
                cache.metadata("ns", name),
                Some(projected.metadata),
                "{name}"
            );
        }
        assert_eq!(cache.owned_by("u1").len(), 5);

        let state = cache.state.read().unwrap_or_else(|e| e.into_inner());
        let shared = |name: &str, i: usize| {
            state
                .pods
                .get(&("ns".to_owned(), name.to_owned()))
                .and_then(|e| e.encoded.shared[i].clone())
        };
        let (Some(a), Some(b), Some(c)) = (shared("a", 0), shared("b", 0), shared("c", 1)) else {
            panic!("the records are held beside the JSON");
        };
        assert!(Arc::ptr_eq(&a, &b), "one copy of a record two Pods share");
        assert!(Arc::ptr_eq(&a, &c), "the same value under either key");
        assert_eq!(shared("c", 0).as_deref(), Some("{}"));
        assert!(shared("d", 0).is_none() && shared("d", 1).is_none());
    }

    #[test]
    fn strings_no_pod_holds_are_dropped() {
        let mut strings = Interner::default();
        let kept = strings.intern("kept");
        for i in 0..Interner::SWEEP_EVERY {
            drop(strings.intern(&format!("gone-{i}")));
        }
        assert!(
            strings.strings.len() <= 3,
            "{} strings left",
            strings.strings.len()
        );
        assert!(Arc::ptr_eq(&kept, &strings.intern("kept")));
    }
}
