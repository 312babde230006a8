//! Upgrading injected sidecars in place (upstream `pkg/controller/sidecarset/sidecarset_processor.go`
//! and `sidecarset_strategy.go`), as pure functions of a SidecarSet
//! and its Pods: which Pods it manages, which are up to date and ready, which to flip or upgrade
//! next, and the patch that upgrades one.
//!
//! Only images change in place (a Pod's container spec is otherwise immutable): a Pod whose sidecars
//! differ in anything else keeps them until it is recreated, and is reported as not upgradable (see
//! [`super::upgradable`] for the Pod condition that says so).
//!
//! Hot-upgrade sidecars (the -1/-2 pair, [`super::hot_upgrade`]) are planned like cold ones; the
//! upgrade writes the new image into one twin and names it working, and a later round flips the other
//! twin back to the empty image ([`flip_patch`]) before anything else is upgraded.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::hash::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::sidecarset::{
    ANNOTATION_INPLACE_UPDATE_STATE, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER, is_native_sidecar,
};
use kruise_api::validation::selector_matches;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use super::annotations::hashes;
use super::annotations::{encode_upgrade_specs, injected_list, record_hashes};
use super::hot_upgrade::{self, is_hot, twin_to_upgrade};
use super::{
    ANNOTATION_VERSION_ALT_PREFIX, ANNOTATION_VERSION_PREFIX, UpgradeSpec, parse_upgrade_specs,
};
use crate::inplace::with_default_tag;
use crate::pods;
use crate::rollout::InvalidSetting;
use crate::rollout::cloneset::partition_replicas;
use crate::rollout::ordering;

pub use super::hot_upgrade::{flip_patch, working_and_idle, working_containers};

/// `updateStrategy.type` that never upgrades.
pub const UPDATE_NOT_UPDATE: &str = "NotUpdate";
/// `upgradeStrategy.upgradeType` of the -1/-2 container pair.
pub const UPGRADE_HOT: &str = kruise_api::sidecarset::v1beta1::HOT_UPGRADE;

/// One SidecarSet's entry in `kruise.io/sidecarset-inplace-update-state`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SidecarUpdateState {
    #[serde(default)]
    pub revision: String,
    #[serde(rename = "updateTimestamp", default)]
    pub update_timestamp: Option<Time>,
    #[serde(rename = "lastContainerStatuses", default)]
    pub last_container_statuses: BTreeMap<String, LastContainerStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LastContainerStatus {
    #[serde(rename = "imageID", default)]
    pub image_id: String,
}

fn ss_name(ss: &SidecarSet) -> &str {
    ss.metadata.name.as_deref().unwrap_or_default()
}

/// The Pod's annotations, borrowed: facts are computed for every managed Pod on every reconcile.
fn annotations(pod: &Pod) -> &BTreeMap<String, String> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    pod.metadata.annotations.as_ref().unwrap_or(&NONE)
}

/// The Pod containers that carry the SidecarSet's upgradable sidecars: each cold sidecar under its
/// own name, both twins of a hot one (native-sidecar init containers are not upgraded in place).
pub fn sidecar_container_names(ss: &SidecarSet) -> Vec<String> {
    let mut names = Vec::new();
    for sidecar in &ss.spec.containers {
        if is_hot(sidecar) {
            let (one, two) = super::hot_upgrade_names(&sidecar.container.name);
            names.extend([one, two]);
        } else {
            names.push(sidecar.container.name.clone());
        }
    }
    names
}

/// Whether the SidecarSet uses hot upgrade for any container.
pub fn uses_hot_upgrade(ss: &SidecarSet) -> bool {
    hot_upgrade::hot_sidecars(ss).next().is_some()
}

/// The Pod is one the SidecarSet manages: active, selected, listed in
/// `kruise.io/sidecarset-injected-list`, and carrying all of its sidecar containers.
pub fn is_managed(ss: &SidecarSet, pod: &Pod) -> bool {
    let selected = ss.spec.selector.as_ref().is_some_and(|s| {
        selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
    });
    if !selected || !pods::is_active(pod) || !injected_list(annotations(pod)).contains(ss_name(ss))
    {
        return false;
    }
    let names = super::pod_container_names(pod);
    sidecar_container_names(ss)
        .iter()
        .all(|name| names.contains(name.as_str()))
        && ss
            .spec
            .init_containers
            .iter()
            .filter(|c| is_native_sidecar(&c.container))
            .all(|c| names.contains(c.container.name.as_str()))
}

/// What the upgrade decisions need to know about one managed Pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// The Pod records the SidecarSet's current hash.
    pub updated: bool,
    /// Only images differ from what the Pod was injected with, so it can be upgraded in place.
    pub upgradable: bool,
    /// The sidecars (both twins of a hot one) run what their spec says (no restart pending).
    pub consistent: bool,
    /// Running and Ready, and every hot sidecar's idle twin holds the empty image.
    pub ready: bool,
    /// A sidecar container that reports ready has not restarted onto its spec image yet: an earlier
    /// upgrade is still being applied, so the Pod waits before it is upgraded again. (A sidecar that
    /// is not ready does not hold the Pod back: upgrading it again may be what fixes it.)
    pub restart_pending: bool,
    /// A hot sidecar's idle twin still holds a real image while the working containers run their
    /// spec images and are ready: the Pod is due for [`flip_patch`].
    pub flip_due: bool,
    /// The SidecarSet's entry in the Pod's `SidecarSetUpgradable` condition, if any.
    pub entry: Option<bool>,
    /// The SidecarSet has upgraded the Pod in place (its `kruise.io/sidecarset-inplace-update-state`
    /// has an entry for it).
    pub upgraded_in_place: bool,
}

/// Whether every sidecar a SidecarSet changed in place runs its new image (upstream's
/// `IsSidecarContainerUpdateCompleted`, read by the budget): a container whose imageID is still
/// the one recorded in `kruise.io/sidecarset-inplace-update-state` before the change, while its
/// status image differs from its spec, has not restarted yet. A Pod never changed in place (no
/// annotation) is complete; an unreadable annotation is not.
pub fn sidecar_updates_completed(pod: &Pod) -> bool {
    let Some(value) = annotations(pod).get(ANNOTATION_INPLACE_UPDATE_STATE) else {
        return true;
    };
    let Ok(states) = serde_json::from_str::<BTreeMap<String, SidecarUpdateState>>(value) else {
        return false;
    };
    let recorded: BTreeMap<&str, &str> = states
        .values()
        .flat_map(|state| state.last_container_statuses.iter())
        .map(|(name, last)| (name.as_str(), last.image_id.as_str()))
        .collect();
    let spec_image = |name: &str| {
        pod.spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .find(|c| c.name == name)
            .and_then(|c| c.image.as_deref())
    };
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .all(|status| match recorded.get(status.name.as_str()) {
            Some(before) => {
                !(*before == status.image_id
                    && spec_image(&status.name) != Some(status.image.as_str()))
            }
            None => true,
        })
}

/// One Pod's sidecar containers as the consistency checks read them: the spec, the status, and the
/// imageIDs recorded before this SidecarSet's in-place changes (parsed once per Pod).
pub(super) struct Observed<'p> {
    pod: &'p Pod,
    statuses: &'p [ContainerStatus],
    /// Every container has a status (the kubelet has reported on all of them).
    complete: bool,
    last: BTreeMap<String, LastContainerStatus>,
}

impl<'p> Observed<'p> {
    pub(super) fn new(ss: &SidecarSet, pod: &'p Pod) -> Self {
        let statuses = crate::pods::container_statuses(pod);
        let complete = pod
            .spec
            .as_ref()
            .is_some_and(|s| s.containers.len() == statuses.len())
            && pod.status.is_some();
        let last = update_states(pod)
            .remove(ss_name(ss))
            .unwrap_or_default()
            .last_container_statuses;
        Self {
            pod,
            statuses,
            complete,
            last,
        }
    }

    fn status(&self, name: &str) -> Option<&'p ContainerStatus> {
        self.statuses.iter().find(|s| s.name == name)
    }

    /// Container `name` reports ready.
    pub(super) fn ready(&self, name: &str) -> bool {
        self.status(name).is_some_and(|s| s.ready)
    }

    /// Every container in `names` runs its spec image: it has a status, and if it was changed in
    /// place it has either restarted (a new imageID) or reports the spec image. A name the Pod does
    /// not have is no obstacle.
    pub(super) fn consistent<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) -> bool {
        let Some(spec) = self.pod.spec.as_ref().filter(|_| self.complete) else {
            return false;
        };
        let names: Vec<S> = names.into_iter().collect();
        let present: Vec<&Container> = names
            .iter()
            .filter_map(|n| spec.containers.iter().find(|c| c.name == n.as_ref()))
            .collect();
        // Images pinned by digest say exactly what must run: the reported imageID must carry the
        // digest (upstream's shortcut when every sidecar image is a digest).
        let digests: Option<Vec<(&str, &str)>> = present
            .iter()
            .map(|c| Some((c.name.as_str(), image_digest(c.image.as_deref()?)?)))
            .collect();
        if let Some(digests) = digests.filter(|d| !d.is_empty()) {
            return digests.iter().all(|(name, digest)| {
                self.status(name)
                    .and_then(|s| image_digest(&s.image_id))
                    .is_some_and(|running| running == *digest)
            });
        }
        names.into_iter().all(|name| {
            let name = name.as_ref();
            let Some(container) = spec.containers.iter().find(|c| c.name == name) else {
                return true;
            };
            let Some(status) = self.status(name) else {
                return false;
            };
            let spec_image = with_default_tag(container.image.as_deref().unwrap_or_default());
            let same_image = with_default_tag(&status.image) == spec_image;
            match self.last.get(name) {
                Some(last) => last.image_id != status.image_id || same_image,
                None => true,
            }
        })
    }

    /// Ready and consistent: what [`twin_to_upgrade`] calls settled.
    fn settled(&self, name: &str) -> bool {
        self.ready(name) && self.consistent([name])
    }
}

/// The digest of an image reference or imageID (`repo@sha256:…`, `docker-pullable://repo@sha256:…`).
fn image_digest(reference: &str) -> Option<&str> {
    reference
        .rsplit_once('@')
        .map(|(_, digest)| digest)
        .filter(|d| d.contains(':'))
}

fn recorded(pod: &Pod, key: &str, name: &str) -> Option<UpgradeSpec> {
    parse_upgrade_specs(annotations(pod), key)
        .ok()
        .and_then(|mut m| m.remove(name))
}

fn update_states(pod: &Pod) -> BTreeMap<String, SidecarUpdateState> {
    annotations(pod)
        .get(ANNOTATION_INPLACE_UPDATE_STATE)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// Whether the Pod's sidecars run their spec images: every container has a status, and a sidecar
/// container changed in place (a cold sidecar, or either twin of a hot one) has either restarted with
/// a new imageID or reports the spec image.
pub fn is_consistent(ss: &SidecarSet, pod: &Pod) -> bool {
    Observed::new(ss, pod).consistent(sidecar_container_names(ss))
}

/// The facts of a managed Pod.
pub fn pod_facts(ss: &SidecarSet, pod: &Pod) -> PodFacts {
    let (hash, hash_without_image) = hashes(ss);
    let name = ss_name(ss);
    let observed = Observed::new(ss, pod);
    let sidecars = sidecar_container_names(ss);
    PodFacts {
        updated: recorded(pod, ANNOTATION_HASH, name).is_some_and(|s| s.hash == hash),
        upgradable: recorded(pod, ANNOTATION_HASH_WITHOUT_IMAGE, name)
            .is_some_and(|s| s.hash == hash_without_image),
        consistent: observed.consistent(&sidecars),
        ready: pods::is_running_and_ready(pod) && hot_upgrade::idle_twins_empty(ss, pod),
        restart_pending: sidecars
            .iter()
            .any(|c| observed.ready(c) && !observed.consistent([c])),
        flip_due: hot_upgrade::flip_due(ss, pod, &observed),
        entry: super::upgradable::upgradable_entry(pod, name),
        upgraded_in_place: update_states(pod).contains_key(name),
    }
}

/// The status counters: matched, updated, ready (consistent and ready), updated and ready.
pub fn counts(facts: &[PodFacts]) -> (i32, i32, i32, i32) {
    let mut c = (0, 0, 0, 0);
    for f in facts {
        let ready = f.consistent && f.ready;
        c.0 += 1;
        c.1 += i32::from(f.updated);
        c.2 += i32::from(ready);
        c.3 += i32::from(f.updated && ready);
    }
    c
}

/// What to do with the Pods this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradePlan {
    /// Pods to patch with [`flip_patch`]. When there are any, nothing is upgraded this round (the
    /// upgrade waits for the flips to be seen).
    pub flip: Vec<usize>,
    /// Pods to patch with [`upgrade_patch`].
    pub upgrade: Vec<usize>,
    /// Pods that can never be upgraded in place (mark them with [`super::upgradable`]).
    pub not_upgradable: Vec<usize>,
}

const FIELD_MAX_UNAVAILABLE: &str = "spec.updateStrategy.maxUnavailable";

fn stopped(ss: &SidecarSet) -> bool {
    let strategy = &ss.spec.update_strategy;
    strategy.type_ == UPDATE_NOT_UPDATE || strategy.paused
}

/// The Pods due for a hot-upgrade flip (every Pod whose facts say so, with no budget: a flip stops an
/// old version that has already handed over). None while the update strategy is `NotUpdate` or
/// paused. [`plan_upgrade`] calls this first.
pub fn plan_hot_flips(ss: &SidecarSet, facts: &[PodFacts]) -> Vec<usize> {
    if stopped(ss) {
        return Vec::new();
    }
    facts
        .iter()
        .enumerate()
        .filter(|(_, f)| f.flip_due)
        .map(|(i, _)| i)
        .collect()
}

/// What to do this round with the managed `pods` and their `facts`: the hot-upgrade flips if any
/// are due ([`plan_hot_flips`]); otherwise the next Pods to upgrade (`GetNextUpgradePods`): not
/// updated, selected by `updateStrategy.selector`, upgradable and not mid-restart; in the ActivePods
/// order, then priority, then scatter; the last `partition` of them kept back; then cut so that
/// updated-but-unready Pods plus ready Pods taken stay within maxUnavailable (a Pod that is not ready
/// is always taken: upgrading it costs no availability).
pub fn plan_upgrade<P: Borrow<Pod>>(
    ss: &SidecarSet,
    pods: &[P],
    facts: &[PodFacts],
) -> Result<UpgradePlan, InvalidSetting> {
    let strategy = &ss.spec.update_strategy;
    let mut plan = UpgradePlan::default();
    if stopped(ss) {
        return Ok(plan);
    }
    plan.flip = plan_hot_flips(ss, facts);
    if !plan.flip.is_empty() {
        return Ok(plan);
    }
    let selected = |pod: &Pod| match &strategy.selector {
        None => true,
        Some(s) => selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())),
    };
    let mut waiting = Vec::new();
    for (i, (pod, f)) in pods.iter().zip(facts).enumerate() {
        if f.updated || !selected(pod.borrow()) {
            continue;
        }
        if !f.upgradable {
            plan.not_upgradable.push(i);
        } else if !f.restart_pending {
            waiting.push(i);
        }
    }
    waiting.sort_by(|&a, &b| ordering::active_pods_cmp(pods[a].borrow(), pods[b].borrow()));
    if let Some(priority) = &strategy.priority_strategy {
        ordering::sort_by_priority(pods, &mut waiting, priority);
    }
    let terms = expand_scatter(pods, &strategy.scatter_strategy);
    let mut waiting = ordering::scatter(pods, waiting, &terms);

    let total = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    let partition = usize::try_from(
        partition_replicas(strategy.partition.as_ref(), total).map_err(|e| InvalidSetting {
            field: "spec.updateStrategy.partition",
            message: e.message,
        })?,
    )
    .unwrap_or(0);
    waiting.truncate(waiting.len().saturating_sub(partition));

    let max_unavailable = match &strategy.max_unavailable {
        None => 1,
        Some(v) => kruise_api::intstr::IntOrPercent::parse(v)
            .map_err(|message| InvalidSetting {
                field: FIELD_MAX_UNAVAILABLE,
                message,
            })?
            .scaled(total, kruise_api::intstr::Round::Up),
    };
    let mut unavailable = facts
        .iter()
        .filter(|f| f.updated && (!f.consistent || !f.ready))
        .count() as i64;
    for i in waiting {
        if !facts[i].ready {
            plan.upgrade.push(i);
            continue;
        }
        if unavailable >= i64::from(max_unavailable) {
            break;
        }
        unavailable += 1;
        plan.upgrade.push(i);
    }
    Ok(plan)
}

/// Scatter terms with `"*"` expanded to every value of that label on the Pods.
fn expand_scatter<P: Borrow<Pod>>(
    pods: &[P],
    terms: &[kruise_api::pub_types::UpdateScatterTerm],
) -> Vec<kruise_api::pub_types::UpdateScatterTerm> {
    let mut out = Vec::new();
    for term in terms {
        if term.value != "*" {
            out.push(term.clone());
            continue;
        }
        let mut values: Vec<String> = pods
            .iter()
            .filter_map(|p| pods::label(p.borrow(), &term.key).map(str::to_owned))
            .collect();
        values.sort();
        values.dedup();
        out.extend(
            values
                .into_iter()
                .map(|value| kruise_api::pub_types::UpdateScatterTerm {
                    key: term.key.clone(),
                    value,
                }),
        );
    }
    out
}

pub(super) fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

/// Why a Pod cannot be patched.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpgradeError {
    #[error("the Pod has no resourceVersion to guard the patch with")]
    NoResourceVersion,
    #[error("the Pod has no spec")]
    NoSpec,
    #[error("pod {field}: invalid value: {message}")]
    InvalidField { field: String, message: String },
    #[error("spec.patchPodMetadata[{index}].annotations[{key}]: invalid value: {message}")]
    PatchPodMetadata {
        index: usize,
        key: String,
        message: String,
    },
}

/// The op every Pod patch starts with: test the resourceVersion, so that the patch applies only to
/// the Pod the decision was made on.
pub(super) fn guard(pod: &Pod) -> Result<PatchOperation, UpgradeError> {
    let rv = pod
        .metadata
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or(UpgradeError::NoResourceVersion)?;
    Ok(PatchOperation::Test(TestOperation {
        path: ptr(["metadata", "resourceVersion"]),
        value: Value::String(rv.to_owned()),
    }))
}

/// Ops that set the Pod annotations `values` (creating the map if the Pod has none).
pub(super) fn annotation_ops(pod: &Pod, values: BTreeMap<String, String>) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if pod.metadata.annotations.is_none() {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["metadata", "annotations"]),
            value: json!({}),
        }));
    }
    for (key, value) in values {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["metadata", "annotations", &key]),
            value: Value::String(value),
        }));
    }
    ops
}

/// The `kruise.io/sidecarset-inplace-update-state` value once `changed` containers are changed in
/// place: this SidecarSet's entry keeps what it recorded of other containers and records the
/// imageIDs the changed ones run now (empty when unknown), to tell when the kubelet has restarted
/// them. An upgrade (`new_revision`) also stamps the entry with the SidecarSet's hash and `now`; a
/// flip stamps only an entry it creates.
pub(super) fn record_restarts(
    ss: &SidecarSet,
    pod: &Pod,
    changed: &[String],
    now: Timestamp,
    new_revision: bool,
) -> String {
    let mut states = update_states(pod);
    let entry = states
        .entry(ss_name(ss).to_owned())
        .or_insert_with(|| SidecarUpdateState {
            revision: hashes(ss).0,
            update_timestamp: Some(Time(now)),
            last_container_statuses: BTreeMap::new(),
        });
    if new_revision {
        entry.revision = hashes(ss).0;
        entry.update_timestamp = Some(Time(now));
    }
    let statuses = crate::pods::container_statuses(pod);
    for name in changed {
        let image_id = statuses
            .iter()
            .find(|s| &s.name == name)
            .map(|s| s.image_id.clone())
            .unwrap_or_default();
        entry
            .last_container_statuses
            .insert(name.clone(), LastContainerStatus { image_id });
    }
    // Serialising strings, options and sorted maps cannot fail.
    serde_json::to_string(&states).unwrap_or_default()
}

/// The JSON patch that upgrades the Pod's sidecars of `ss` in place. Each sidecar whose image differs
/// gets the new image (nothing else of the container changes):
/// - a cold sidecar in its own container;
/// - a hot sidecar in the twin [`twin_to_upgrade`] picks, unless the other twin already runs the new
///   image; that twin becomes the working one in `kruise.io/sidecarset-working-hotupgrade-container`,
///   its version annotation becomes the SidecarSet's resourceVersion and its alt version the other
///   twin's version, whose alt version becomes the SidecarSet's resourceVersion.
///
/// The Pod's records are refreshed too: the `kruise.io/sidecarset-hash` (with `latest_revision`) and
/// `-without-image` entries, and the in-place state with the imageIDs before the upgrade (to tell when
/// the restart happened). The first op tests the resourceVersion, so the patch applies only to the
/// Pod the decision was made on.
pub fn upgrade_patch(
    ss: &SidecarSet,
    pod: &Pod,
    latest_revision: &str,
    now: Timestamp,
) -> Result<Patch, UpgradeError> {
    let mut ops = vec![guard(pod)?];
    let spec = pod.spec.as_ref().ok_or(UpgradeError::NoSpec)?;
    let name = ss_name(ss);
    let existing = annotations(pod);
    let observed = Observed::new(ss, pod);
    let ss_version = ss.metadata.resource_version.clone().unwrap_or_default();
    let mut notes = BTreeMap::new();
    let mut working = working_containers(pod);
    let mut changed = Vec::new();
    for sidecar in &ss.spec.containers {
        let hot = is_hot(sidecar);
        let (target, other) = if hot {
            twin_to_upgrade(pod, sidecar, |c| observed.settled(c))
        } else {
            (
                sidecar.container.name.clone(),
                sidecar.container.name.clone(),
            )
        };
        let Some(index) = spec.containers.iter().position(|c| c.name == target) else {
            continue;
        };
        let want = sidecar.container.image.clone().unwrap_or_default();
        let current = spec
            .containers
            .iter()
            .find(|c| c.name == other)
            .and_then(|c| c.image.as_deref());
        if current == Some(want.as_str()) {
            continue;
        }
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(["spec", "containers", &index.to_string(), "image"]),
            value: json!(want),
        }));
        if hot {
            let other_version = existing
                .get(&format!("{ANNOTATION_VERSION_PREFIX}{other}"))
                .cloned()
                .unwrap_or_default();
            notes.insert(
                format!("{ANNOTATION_VERSION_PREFIX}{target}"),
                ss_version.clone(),
            );
            notes.insert(
                format!("{ANNOTATION_VERSION_ALT_PREFIX}{target}"),
                other_version,
            );
            notes.insert(
                format!("{ANNOTATION_VERSION_ALT_PREFIX}{other}"),
                ss_version.clone(),
            );
            working.insert(sidecar.container.name.clone(), target.clone());
        }
        changed.push(target);
    }
    if uses_hot_upgrade(ss) && working != working_containers(pod) {
        notes.insert(
            ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER.to_owned(),
            serde_json::to_string(&working).unwrap_or_default(),
        );
    }

    let mut with_image = parse_upgrade_specs(existing, ANNOTATION_HASH).unwrap_or_default();
    let mut without_image =
        parse_upgrade_specs(existing, ANNOTATION_HASH_WITHOUT_IMAGE).unwrap_or_default();
    let sidecar_list = with_image.get(name).and_then(|s| s.sidecar_list.clone());
    record_hashes(
        &mut with_image,
        &mut without_image,
        name,
        hashes(ss),
        sidecar_list,
        latest_revision,
        now,
    );
    notes.insert(
        ANNOTATION_HASH.to_owned(),
        encode_upgrade_specs(&with_image),
    );
    notes.insert(
        ANNOTATION_HASH_WITHOUT_IMAGE.to_owned(),
        encode_upgrade_specs(&without_image),
    );
    notes.insert(
        ANNOTATION_INPLACE_UPDATE_STATE.to_owned(),
        record_restarts(ss, pod, &changed, now, true),
    );
    // `patchPodMetadata` is applied again, as upstream does on every upgrade, so annotations the
    // SidecarSet gained since the Pod was injected reach it with the new sidecars.
    let mut metadata = existing.clone();
    super::metadata::patch_annotations(&mut metadata, &ss.spec.patch_pod_metadata).map_err(
        |(index, key, message)| UpgradeError::PatchPodMetadata {
            index,
            key,
            message,
        },
    )?;
    for (key, value) in metadata {
        if existing.get(&key) != Some(&value) {
            notes.entry(key).or_insert(value);
        }
    }
    ops.extend(annotation_ops(pod, notes));
    Ok(Patch(ops))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kruise_api::sidecarset::v1beta1::{SidecarContainer, SidecarSetSpec};

    use super::*;

    fn sidecarset(image: &str) -> SidecarSet {
        let mut ss = SidecarSet::new(
            "logtail",
            SidecarSetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..LabelSelector::default()
                }),
                containers: vec![SidecarContainer {
                    container: Container {
                        name: "logtail".into(),
                        image: Some(image.into()),
                        ..Container::default()
                    },
                    ..SidecarContainer::default()
                }],
                ..SidecarSetSpec::default()
            },
        );
        kruise_api::sidecarset::hash::set_hash_annotations(&mut ss);
        ss
    }

    /// A Pod injected with `injected_with`, running `running` for its sidecar.
    fn pod(name: &str, injected_with: &SidecarSet, ready: bool) -> Pod {
        let (hash, without) = hashes(injected_with);
        let image = injected_with.spec.containers[0]
            .container
            .image
            .clone()
            .unwrap_or_default();
        let spec = |h: &str, rev: bool| {
            let mut v = json!({"logtail": {"updateTimestamp": null, "hash": h, "sidecarSetName": "logtail", "sidecarList": ["logtail"]}});
            if rev {
                v["logtail"]["controllerRevision"] = json!("");
            }
            v.to_string()
        };
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("5".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                annotations: Some(BTreeMap::from([
                    (
                        "kruise.io/sidecarset-injected-list".into(),
                        "logtail".into(),
                    ),
                    (ANNOTATION_HASH.into(), spec(&hash, false)),
                    (ANNOTATION_HASH_WITHOUT_IMAGE.into(), spec(&without, false)),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n".into()),
                containers: vec![
                    Container {
                        name: "logtail".into(),
                        image: Some(image.clone()),
                        ..Container::default()
                    },
                    Container {
                        name: "nginx".into(),
                        image: Some("nginx".into()),
                        ..Container::default()
                    },
                ],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![
                    ContainerStatus {
                        name: "logtail".into(),
                        image: image.clone(),
                        image_id: format!("{image}@sha256:1"),
                        ..ContainerStatus::default()
                    },
                    ContainerStatus {
                        name: "nginx".into(),
                        image: "nginx".into(),
                        ..ContainerStatus::default()
                    },
                ]),
                ..PodStatus::default()
            }),
        }
    }

    fn plan_for(ss: &SidecarSet, pods: &[Pod]) -> UpgradePlan {
        let facts: Vec<PodFacts> = pods.iter().map(|p| pod_facts(ss, p)).collect();
        plan_upgrade(ss, pods, &facts).unwrap_or_default()
    }

    #[test]
    fn managed_updated_and_counts() {
        let v1 = sidecarset("logtail:0.16.16");
        let v2 = sidecarset("logtail:0.16.18");
        let p = pod("a", &v1, true);
        assert!(is_managed(&v2, &p));
        let f = pod_facts(&v2, &p);
        assert_eq!(
            f,
            PodFacts {
                updated: false,
                upgradable: true,
                consistent: true,
                ready: true,
                restart_pending: false,
                flip_due: false,
                entry: None,
                upgraded_in_place: false,
            }
        );
        assert!(pod_facts(&v1, &p).updated);
        assert_eq!(counts(&[f, pod_facts(&v1, &p)]), (2, 1, 2, 1));
        let mut other = p.clone();
        other.metadata.annotations = None;
        assert!(!is_managed(&v2, &other));
    }

    #[test]
    fn plan_table() {
        let v1 = sidecarset("logtail:1");
        let pods: Vec<Pod> = (0..50)
            .map(|i| pod(&format!("p{i:02}"), &v1, true))
            .collect();
        let with = |f: &dyn Fn(&mut SidecarSet)| {
            let mut ss = sidecarset("logtail:2");
            f(&mut ss);
            ss
        };
        let cases: Vec<(&str, SidecarSet, usize)> = vec![
            ("default maxUnavailable 1", with(&|_| {}), 1),
            (
                "partition 40, maxUnavailable 100%",
                with(&|s| {
                    s.spec.update_strategy.partition = Some(IntOrString::Int(40));
                    s.spec.update_strategy.max_unavailable =
                        Some(IntOrString::String("100%".into()));
                }),
                10,
            ),
            (
                "maxUnavailable 10% of 50",
                with(&|s| {
                    s.spec.update_strategy.max_unavailable = Some(IntOrString::String("10%".into()))
                }),
                5,
            ),
            ("paused", with(&|s| s.spec.update_strategy.paused = true), 0),
            (
                "NotUpdate",
                with(&|s| s.spec.update_strategy.type_ = UPDATE_NOT_UPDATE.into()),
                0,
            ),
            (
                "canary selector matches nothing",
                with(&|s| {
                    s.spec.update_strategy.selector = Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "canary.release".into(),
                            "true".into(),
                        )])),
                        ..LabelSelector::default()
                    });
                    s.spec.update_strategy.max_unavailable =
                        Some(IntOrString::String("100%".into()));
                }),
                0,
            ),
        ];
        for (name, ss, want) in cases {
            assert_eq!(plan_for(&ss, &pods).upgrade.len(), want, "{name}");
        }
    }

    #[test]
    fn unready_pods_first_and_free() {
        let v1 = sidecarset("logtail:1");
        let v2 = sidecarset("logtail:2");
        let pods = vec![
            pod("a", &v1, true),
            pod("b", &v1, false),
            pod("c", &v1, true),
        ];
        assert_eq!(plan_for(&v2, &pods).upgrade, vec![1, 0]);
    }

    #[test]
    fn only_a_ready_sidecar_mid_restart_holds_a_pod_back() {
        let v1 = sidecarset("logtail:1");
        let v2 = sidecarset("logtail:2");
        let v3 = sidecarset("logtail:3");
        let p = pod("a", &v1, false);
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH).unwrap_or_default();
        let mut stuck = p.clone();
        let mut doc = serde_json::to_value(&p).unwrap_or_default();
        if json_patch::patch(&mut doc, &patch).is_ok() {
            stuck = serde_json::from_value(doc).unwrap_or_default();
        }
        // The kubelet cannot pull logtail:2: the old imageID stays, the sidecar is not ready.
        let mut waiting = stuck.clone();
        if let Some(s) = waiting
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            s[0].ready = false;
        }
        let f = pod_facts(&v3, &waiting);
        assert!(!f.consistent && !f.restart_pending);
        assert_eq!(plan_for(&v3, &[waiting]).upgrade, vec![0]);
        // Still ready on the old process: wait for the restart.
        if let Some(s) = stuck
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            s[0].ready = true;
        }
        assert!(pod_facts(&v3, &stuck).restart_pending);
        assert_eq!(plan_for(&v3, &[stuck]).upgrade, Vec::<usize>::new());
    }

    #[test]
    fn a_non_image_change_is_not_upgradable() {
        let v1 = sidecarset("logtail:1");
        let mut v2 = sidecarset("logtail:1");
        v2.spec.containers[0].container.command = Some(vec!["run".into()]);
        kruise_api::sidecarset::hash::set_hash_annotations(&mut v2);
        let plan = plan_for(&v2, &[pod("a", &v1, true)]);
        assert_eq!(plan.upgrade, Vec::<usize>::new());
        assert_eq!(plan.not_upgradable, vec![0]);
    }

    #[test]
    fn patch_changes_only_the_image_and_records() -> Result<(), UpgradeError> {
        let v1 = sidecarset("logtail:1");
        let v2 = sidecarset("logtail:2");
        let p = pod("a", &v1, true);
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH)?;
        let mut doc = serde_json::to_value(&p).unwrap_or_default();
        json_patch::patch(&mut doc, &patch).map_err(|_| UpgradeError::NoSpec)?;
        let upgraded: Pod = serde_json::from_value(doc).map_err(|_| UpgradeError::NoSpec)?;
        let spec = upgraded.spec.clone().unwrap_or_default();
        assert_eq!(spec.containers[0].image.as_deref(), Some("logtail:2"));
        assert_eq!(spec.containers[1].image.as_deref(), Some("nginx"));
        let f = pod_facts(&v2, &upgraded);
        assert!(f.updated && f.upgradable);
        // The kubelet has not restarted the sidecar yet: old imageID and image in status.
        assert!(!f.consistent);
        let mut restarted = upgraded.clone();
        if let Some(s) = restarted
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            s[0].image = "logtail:2".into();
            s[0].image_id = "logtail:2@sha256:2".into();
        }
        assert!(pod_facts(&v2, &restarted).consistent);
        Ok(())
    }

    #[test]
    fn digest_images_are_consistent_when_the_digest_runs() {
        let pinned = "logtail@sha256:aaa";
        let ss = sidecarset(pinned);
        // (spec image, reported imageID, consistent)
        let cases = [
            (pinned, "docker-pullable://logtail@sha256:aaa", true),
            (pinned, "logtail@sha256:aaa", true),
            (pinned, "docker-pullable://logtail@sha256:bbb", false),
            (pinned, "", false),
            // A tag: the recorded-imageID rule applies (nothing recorded yet: consistent).
            ("logtail:1", "logtail@sha256:bbb", true),
        ];
        for (image, image_id, want) in cases {
            let mut p = pod("a", &sidecarset(image), true);
            if let Some(statuses) = p
                .status
                .as_mut()
                .and_then(|s| s.container_statuses.as_mut())
            {
                statuses[0].image_id = image_id.into();
            }
            let ss = if image == pinned {
                ss.clone()
            } else {
                sidecarset(image)
            };
            assert_eq!(is_consistent(&ss, &p), want, "{image} running {image_id:?}");
        }
    }

    #[test]
    fn patch_pod_metadata_is_applied_again_on_upgrade() -> Result<(), UpgradeError> {
        use kruise_api::sidecarset::v1beta1::{
            PATCH_POLICY_MERGE_PATCH_JSON, PATCH_POLICY_OVERWRITE, SidecarSetPatchPodMetadata,
        };
        let v1 = sidecarset("logtail:1");
        let mut p = pod("a", &v1, true);
        let notes = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
        notes.insert("kept".into(), "pod".into());
        notes.insert("over".into(), "pod".into());
        notes.insert("merged".into(), r#"{"a":1}"#.into());
        let patch_with = |policy: &str, key: &str, value: &str| SidecarSetPatchPodMetadata {
            annotations: BTreeMap::from([(key.to_string(), value.to_string())]),
            patch_policy: policy.into(),
        };
        let mut v2 = sidecarset("logtail:2");
        v2.spec.patch_pod_metadata = vec![
            patch_with("", "kept", "sidecarset"),
            patch_with("", "added", "sidecarset"),
            patch_with(PATCH_POLICY_OVERWRITE, "over", "sidecarset"),
            patch_with(PATCH_POLICY_MERGE_PATCH_JSON, "merged", r#"{"b":2}"#),
        ];
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH)?;
        let mut doc = serde_json::to_value(&p).unwrap_or_default();
        json_patch::patch(&mut doc, &patch).map_err(|_| UpgradeError::NoSpec)?;
        let upgraded: Pod = serde_json::from_value(doc).map_err(|_| UpgradeError::NoSpec)?;
        let got = upgraded.metadata.annotations.unwrap_or_default();
        // (key, value after the upgrade)
        for (key, want) in [
            ("kept", "pod"),
            ("added", "sidecarset"),
            ("over", "sidecarset"),
            ("merged", r#"{"a":1,"b":2}"#),
        ] {
            assert_eq!(got.get(key).map(String::as_str), Some(want), "{key}");
        }
        // A Pod value a JSON merge cannot read names the field and changes nothing.
        let notes = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
        notes.insert("merged".into(), "not json".into());
        assert!(matches!(
            upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH),
            Err(UpgradeError::PatchPodMetadata { index: 3, ref key, .. }) if key == "merged"
        ));
        Ok(())
    }

    // ---- hot upgrade ---------------------------------------------------------------------------------

    use kruise_api::sidecarset::v1beta1::SidecarContainerUpgradeStrategy;

    const EMPTY: &str = "empty:1";

    /// SidecarSet "mesh" at resourceVersion `rv`: hot sidecar `mesh` on `image` (empty image
    /// [`EMPTY`]), and a cold `logtail` on `logtail` when given.
    fn hot_set(image: &str, logtail: Option<&str>, rv: &str) -> SidecarSet {
        let mut containers = vec![SidecarContainer {
            container: Container {
                name: "mesh".into(),
                image: Some(image.into()),
                ..Container::default()
            },
            upgrade_strategy: SidecarContainerUpgradeStrategy {
                upgrade_type: UPGRADE_HOT.into(),
                hot_upgrade_empty_image: EMPTY.into(),
            },
            ..SidecarContainer::default()
        }];
        if let Some(image) = logtail {
            containers.push(SidecarContainer {
                container: Container {
                    name: "logtail".into(),
                    image: Some(image.into()),
                    ..Container::default()
                },
                ..SidecarContainer::default()
            });
        }
        let mut ss = SidecarSet::new(
            "mesh",
            SidecarSetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..LabelSelector::default()
                }),
                containers,
                ..SidecarSetSpec::default()
            },
        );
        ss.metadata.resource_version = Some(rv.into());
        kruise_api::sidecarset::hash::set_hash_annotations(&mut ss);
        ss
    }

    /// The kubelet has (re)started every container on its spec image: statuses follow the spec,
    /// with one imageID per image.
    fn kubelet_sync(pod: &mut Pod) {
        let containers = pod.spec.clone().unwrap_or_default().containers;
        let status = pod.status.get_or_insert_with(PodStatus::default);
        status.phase = Some("Running".into());
        status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        status.container_statuses = Some(
            containers
                .iter()
                .map(|c| {
                    let image = c.image.clone().unwrap_or_default();
                    ContainerStatus {
                        name: c.name.clone(),
                        image_id: format!("{image}@sha256:id"),
                        image,
                        ready: true,
                        ..ContainerStatus::default()
                    }
                })
                .collect(),
        );
    }

    /// A Pod created with `ss` injected (through the webhook's own function) and running.
    fn hot_pod(name: &str, ss: &SidecarSet) -> Pod {
        let created = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n".into()),
                containers: vec![Container {
                    name: "nginx".into(),
                    image: Some("nginx".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: None,
        };
        let revisions = BTreeMap::new();
        let ctx = super::super::InjectContext {
            now: Timestamp::UNIX_EPOCH,
            revisions: &revisions,
            random: &|| 0.0,
            sort_sidecars_by_name: false,
        };
        let mut pod = super::super::inject(&created, &[ss], &ctx)
            .map(|i| i.pod)
            .unwrap_or_default();
        pod.metadata.resource_version = Some("5".into());
        kubelet_sync(&mut pod);
        pod
    }

    fn apply(pod: &Pod, patch: &Patch) -> Pod {
        let mut doc = serde_json::to_value(pod).unwrap_or_default();
        assert!(json_patch::patch(&mut doc, patch).is_ok(), "{patch:?}");
        let mut out: Pod = serde_json::from_value(doc).unwrap_or_default();
        out.metadata.resource_version = Some("6".into());
        out
    }

    fn image(pod: &Pod, name: &str) -> String {
        pod.spec
            .iter()
            .flat_map(|s| &s.containers)
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    }

    fn note<'p>(pod: &'p Pod, key: &str) -> Option<&'p str> {
        pods::annotation(pod, key)
    }

    fn set_status(pod: &mut Pod, name: &str, f: impl Fn(&mut ContainerStatus)) {
        if let Some(s) = pod
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|all| all.iter_mut().find(|s| s.name == name))
        {
            f(s);
        }
    }

    fn set_image(pod: &mut Pod, name: &str, image: &str) {
        if let Some(c) = pod
            .spec
            .as_mut()
            .and_then(|s| s.containers.iter_mut().find(|c| c.name == name))
        {
            c.image = Some(image.into());
        }
    }

    /// A Pod upgraded from mesh:1 to mesh:2 (into `mesh-2`), the kubelet having restarted `mesh-2`
    /// when `restarted`.
    fn upgraded_hot_pod(restarted: bool) -> Pod {
        let v2 = hot_set("mesh:2", None, "200");
        let p = hot_pod("a", &hot_set("mesh:1", None, "100"));
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH).unwrap_or_default();
        let mut up = apply(&p, &patch);
        if restarted {
            kubelet_sync(&mut up);
        }
        up
    }

    #[test]
    fn hot_pods_are_managed_with_both_twins() {
        let ss = hot_set("mesh:1", Some("logtail:1"), "100");
        let p = hot_pod("a", &ss);
        assert_eq!(
            sidecar_container_names(&ss),
            ["mesh-1", "mesh-2", "logtail"]
        );
        assert!(is_managed(&ss, &p));
        let mut lost_twin = p.clone();
        if let Some(spec) = lost_twin.spec.as_mut() {
            spec.containers.retain(|c| c.name != "mesh-2");
        }
        assert!(!is_managed(&ss, &lost_twin));
    }

    #[test]
    fn hot_pod_facts() {
        let v2 = hot_set("mesh:2", None, "200");
        let fresh = hot_pod("a", &hot_set("mesh:1", None, "100"));
        let not_ready = |mut p: Pod| {
            if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                c[0].status = "False".into();
            }
            p
        };
        let flipped_not_restarted = {
            let up = upgraded_hot_pod(true);
            apply(
                &up,
                &flip_patch(&v2, &up, Timestamp::UNIX_EPOCH).unwrap_or_default(),
            )
        };
        let mut old_idle_not_ready = not_ready(upgraded_hot_pod(true));
        set_status(&mut old_idle_not_ready, "mesh-1", |s| s.ready = false);
        let mut working_not_ready = not_ready(upgraded_hot_pod(true));
        set_status(&mut working_not_ready, "mesh-2", |s| s.ready = false);
        let mut pulling = upgraded_hot_pod(false);
        set_status(&mut pulling, "mesh-2", |s| s.ready = false);
        let mut idle_spec_changed_by_hand = fresh.clone();
        set_image(&mut idle_spec_changed_by_hand, "mesh-2", "mesh:1");

        // (case, pod, updated, consistent, ready, restart_pending, flip_due)
        let cases: Vec<(&str, Pod, bool, bool, bool, bool, bool)> = vec![
            (
                "as injected",
                fresh.clone(),
                false,
                true,
                true,
                false,
                false,
            ),
            (
                "as injected, Pod not Ready",
                not_ready(fresh.clone()),
                false,
                true,
                false,
                false,
                false,
            ),
            (
                "upgraded, new twin not restarted yet",
                upgraded_hot_pod(false),
                true,
                false,
                false,
                true,
                false,
            ),
            (
                "upgraded, new twin not restarted and not ready (pulling)",
                pulling,
                true,
                false,
                false,
                false,
                false,
            ),
            (
                "upgraded and restarted: old twin still holds mesh:1",
                upgraded_hot_pod(true),
                true,
                true,
                false,
                false,
                true,
            ),
            (
                "restarted, Pod not Ready because the old twin is not",
                old_idle_not_ready,
                true,
                true,
                false,
                false,
                true,
            ),
            (
                "restarted, but the new working twin is not ready",
                working_not_ready,
                true,
                true,
                false,
                false,
                false,
            ),
            (
                "flipped, old twin not restarted onto the empty image",
                flipped_not_restarted.clone(),
                true,
                false,
                true,
                true,
                false,
            ),
            (
                "flipped and restarted",
                {
                    let mut p = flipped_not_restarted;
                    kubelet_sync(&mut p);
                    p
                },
                true,
                true,
                true,
                false,
                false,
            ),
            (
                "idle twin given a real image by hand",
                idle_spec_changed_by_hand,
                false,
                true,
                false,
                false,
                true,
            ),
        ];
        for (name, p, updated, consistent, ready, restart_pending, flip_due) in cases {
            let f = pod_facts(&v2, &p);
            assert_eq!(
                (
                    f.updated,
                    f.upgradable,
                    f.consistent,
                    f.ready,
                    f.restart_pending,
                    f.flip_due
                ),
                (updated, true, consistent, ready, restart_pending, flip_due),
                "{name}"
            );
            assert_eq!(is_consistent(&v2, &p), consistent, "{name}");
        }
    }

    #[test]
    fn hot_sidecarsets_are_planned_like_cold_ones() {
        let v1 = hot_set("mesh:1", None, "100");
        let pods: Vec<Pod> = (0..10).map(|i| hot_pod(&format!("p{i}"), &v1)).collect();
        let mut v2 = hot_set("mesh:2", None, "200");
        v2.spec.update_strategy.max_unavailable = Some(IntOrString::Int(3));
        v2.spec.update_strategy.partition = Some(IntOrString::Int(8));
        let plan = plan_for(&v2, &pods);
        assert_eq!(plan.upgrade.len(), 2);
        assert!(plan.flip.is_empty());
        v2.spec.update_strategy.partition = None;
        assert_eq!(plan_for(&v2, &pods).upgrade.len(), 3);
    }

    #[test]
    fn flips_come_first_and_respect_pause() {
        let v1 = hot_set("mesh:1", None, "100");
        let mut v2 = hot_set("mesh:2", None, "200");
        let pods = vec![
            hot_pod("a", &v1),
            upgraded_hot_pod(true),
            hot_pod("c", &v1),
            upgraded_hot_pod(false),
        ];
        let facts: Vec<PodFacts> = pods.iter().map(|p| pod_facts(&v2, p)).collect();
        assert_eq!(plan_hot_flips(&v2, &facts), vec![1]);
        let plan = plan_upgrade(&v2, &pods, &facts).unwrap_or_default();
        assert_eq!(
            plan,
            UpgradePlan {
                flip: vec![1],
                ..UpgradePlan::default()
            }
        );
        v2.spec.update_strategy.paused = true;
        assert!(plan_hot_flips(&v2, &facts).is_empty());
        assert_eq!(
            plan_upgrade(&v2, &pods, &facts).unwrap_or_default(),
            UpgradePlan::default()
        );
        // Without the flip due, the upgrade budget is already spent by the Pod mid-upgrade.
        v2.spec.update_strategy.paused = false;
        let plan = plan_for(&v2, &[hot_pod("a", &v1), upgraded_hot_pod(false)]);
        assert_eq!(plan, UpgradePlan::default());
    }

    #[test]
    fn hot_upgrade_writes_the_idle_twin_and_names_it_working() {
        let v2 = hot_set("mesh:2", Some("logtail:2"), "200");
        let p = hot_pod("a", &hot_set("mesh:1", Some("logtail:1"), "100"));
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH).unwrap_or_default();
        let ops = serde_json::to_value(&patch).unwrap_or_default();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "5"})
        );
        let up = apply(&p, &patch);
        assert_eq!(
            [
                image(&up, "mesh-1"),
                image(&up, "mesh-2"),
                image(&up, "logtail"),
                image(&up, "nginx")
            ],
            ["mesh:1", "mesh:2", "logtail:2", "nginx"]
        );
        for (key, want) in [
            (
                ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER,
                r#"{"mesh":"mesh-2"}"#,
            ),
            ("version.sidecarset.kruise.io/mesh-2", "200"),
            ("versionalt.sidecarset.kruise.io/mesh-2", "1"),
            ("version.sidecarset.kruise.io/mesh-1", "1"),
            ("versionalt.sidecarset.kruise.io/mesh-1", "200"),
        ] {
            assert_eq!(note(&up, key), Some(want), "{key}");
        }
        let state = update_states(&up).remove("mesh").unwrap_or_default();
        assert_eq!(state.revision, hashes(&v2).0);
        let last: BTreeMap<&str, &str> = state
            .last_container_statuses
            .iter()
            .map(|(k, v)| (k.as_str(), v.image_id.as_str()))
            .collect();
        assert_eq!(
            last,
            BTreeMap::from([
                ("logtail", "logtail:1@sha256:id"),
                ("mesh-2", "empty:1@sha256:id")
            ])
        );
        let f = pod_facts(&v2, &up);
        assert!(f.updated && !f.consistent);
    }

    #[test]
    fn hot_upgrade_skips_a_sidecar_whose_other_twin_runs_the_image() {
        // Upgraded to mesh:2 in mesh-2, which is not ready: a rollback to mesh:1 finds mesh-1 (the
        // twin it would keep) on mesh:1 already, and changes no container.
        let mut p = upgraded_hot_pod(true);
        set_status(&mut p, "mesh-2", |s| s.ready = false);
        let back = hot_set("mesh:1", None, "300");
        let patch = upgrade_patch(&back, &p, "rev-3", Timestamp::UNIX_EPOCH).unwrap_or_default();
        let up = apply(&p, &patch);
        assert_eq!(image(&up, "mesh-1"), "mesh:1");
        assert_eq!(image(&up, "mesh-2"), "mesh:2");
        assert_eq!(
            note(&up, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER),
            Some(r#"{"mesh":"mesh-2"}"#)
        );
        assert_eq!(note(&up, "version.sidecarset.kruise.io/mesh-1"), Some("1"));
        assert!(pod_facts(&back, &up).updated);
    }

    /// The whole round trip of two hot upgrades, the kubelet played by [`kubelet_sync`].
    #[test]
    fn hot_upgrade_round_trip() {
        let v1 = hot_set("mesh:1", None, "100");
        let v2 = hot_set("mesh:2", None, "200");
        let v3 = hot_set("mesh:3", None, "300");
        let mut p = hot_pod("a", &v1);
        let step = |ss: &SidecarSet, p: &Pod| {
            let facts = [pod_facts(ss, p)];
            (
                plan_upgrade(ss, std::slice::from_ref(p), &facts).unwrap_or_default(),
                counts(&facts),
            )
        };
        assert_eq!(step(&v1, &p).1, (1, 1, 1, 1));

        // v2: upgrade into mesh-2, restart, flip mesh-1, restart.
        let (plan, _) = step(&v2, &p);
        assert_eq!(plan.upgrade, vec![0]);
        p = apply(
            &p,
            &upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH).unwrap_or_default(),
        );
        assert_eq!(step(&v2, &p), (UpgradePlan::default(), (1, 1, 0, 0)));
        kubelet_sync(&mut p);
        let (plan, counted) = step(&v2, &p);
        assert_eq!((plan.flip, counted), (vec![0], (1, 1, 0, 0)));
        p = apply(
            &p,
            &flip_patch(&v2, &p, Timestamp::UNIX_EPOCH).unwrap_or_default(),
        );
        assert_eq!(image(&p, "mesh-1"), EMPTY);
        assert_eq!(note(&p, "version.sidecarset.kruise.io/mesh-1"), Some("0"));
        assert_eq!(
            note(&p, "versionalt.sidecarset.kruise.io/mesh-2"),
            Some("0")
        );
        assert_eq!(note(&p, "version.sidecarset.kruise.io/mesh-2"), Some("200"));
        assert_eq!(step(&v2, &p), (UpgradePlan::default(), (1, 1, 0, 0)));
        kubelet_sync(&mut p);
        assert_eq!(step(&v2, &p), (UpgradePlan::default(), (1, 1, 1, 1)));
        // Nothing left to flip: the flip patch only tests.
        assert_eq!(
            flip_patch(&v2, &p, Timestamp::UNIX_EPOCH).map(|patch| patch.0.len()),
            Ok(1)
        );

        // v3 goes into mesh-1, which holds the empty image.
        assert_eq!(step(&v3, &p).0.upgrade, vec![0]);
        p = apply(
            &p,
            &upgrade_patch(&v3, &p, "rev-3", Timestamp::UNIX_EPOCH).unwrap_or_default(),
        );
        assert_eq!(
            (image(&p, "mesh-1"), image(&p, "mesh-2")),
            ("mesh:3".into(), "mesh:2".into())
        );
        for (key, want) in [
            (
                ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER,
                r#"{"mesh":"mesh-1"}"#,
            ),
            ("version.sidecarset.kruise.io/mesh-1", "300"),
            ("versionalt.sidecarset.kruise.io/mesh-1", "200"),
            ("versionalt.sidecarset.kruise.io/mesh-2", "300"),
        ] {
            assert_eq!(note(&p, key), Some(want), "{key}");
        }
        kubelet_sync(&mut p);
        p = apply(
            &p,
            &flip_patch(&v3, &p, Timestamp::UNIX_EPOCH).unwrap_or_default(),
        );
        kubelet_sync(&mut p);
        assert_eq!(image(&p, "mesh-2"), EMPTY);
        assert_eq!(step(&v3, &p), (UpgradePlan::default(), (1, 1, 1, 1)));
    }
}
