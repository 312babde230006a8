//! The `apps.kruise.io/inplace-update-state` annotation, with OpenKruise's JSON names so that either
//! implementation can finish an update the other started.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use serde::{Deserialize, Deserializer, Serialize};

use super::plan::InPlacePlan;

/// State of the latest in-place update of a Pod (`pub.InPlaceUpdateState`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateState {
    /// The revision the Pod is updated to.
    pub revision: String,
    /// When the update was applied.
    pub update_timestamp: Time,
    /// Container name → status before the update, for containers whose image changes.
    /// Always written (Go has no omitempty here) and read back from `null` as empty.
    #[serde(default, deserialize_with = "null_as_default")]
    pub last_container_statuses: BTreeMap<String, InPlaceUpdateContainerStatus>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub update_env_from_metadata: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub update_resources: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub update_images: bool,
    /// Lower-priority containers waiting for a later batch (container launch priority,
    /// `super::batches`).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub next_container_images: BTreeMap<String, String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub next_container_ref_metadata: BTreeMap<String, ObjectMeta>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub next_container_resources: BTreeMap<String, ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_check_before_next: Option<InPlaceUpdatePreCheckBeforeNext>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub container_batches_record: Vec<InPlaceUpdateContainerBatch>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateContainerStatus {
    #[serde(default, rename = "imageID", skip_serializing_if = "String::is_empty")]
    pub image_id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdatePreCheckBeforeNext {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub containers_required_ready: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateContainerBatch {
    pub timestamp: Time,
    #[serde(default, deserialize_with = "null_as_default")]
    pub containers: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Go writes nil maps and slices as `null`.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Go's `metav1.Time` has second precision; keeping it so makes a written state round-trip exactly.
fn whole_seconds(t: Timestamp) -> Time {
    Time(Timestamp::from_second(t.as_second()).unwrap_or(t))
}

impl InPlaceUpdateState {
    /// The state written when `plan` is applied to `pod` for `revision` at `now`: the image IDs the
    /// changed containers run now (the completion check waits for them to change), and one batch
    /// holding every changed container.
    pub fn new(revision: &str, plan: &InPlacePlan, pod: &Pod, now: Timestamp) -> Self {
        let now = whole_seconds(now);
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref());
        let last_container_statuses = statuses
            .into_iter()
            .flatten()
            .filter(|s| plan.images.contains_key(&s.name))
            .map(|s| {
                let status = InPlaceUpdateContainerStatus {
                    image_id: s.image_id.clone(),
                };
                (s.name.clone(), status)
            })
            .collect();
        let mut containers: Vec<String> = plan
            .images
            .keys()
            .chain(plan.resources.keys())
            .chain(plan.env_from_metadata.keys())
            .cloned()
            .collect();
        containers.sort();
        containers.dedup();
        Self {
            revision: revision.to_owned(),
            update_timestamp: now.clone(),
            last_container_statuses,
            update_env_from_metadata: !plan.env_from_metadata.is_empty(),
            update_resources: !plan.resources.is_empty(),
            update_images: !plan.images.is_empty(),
            next_container_images: BTreeMap::new(),
            next_container_ref_metadata: BTreeMap::new(),
            next_container_resources: BTreeMap::new(),
            pre_check_before_next: None,
            container_batches_record: vec![InPlaceUpdateContainerBatch {
                timestamp: now,
                containers,
            }],
        }
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Leaves the images of `later` for a later batch (container launch priority): they are not
    /// part of this batch's record or image-ID check, and the next batch waits until the containers
    /// updated now are Ready.
    pub fn defer_images(&mut self, later: &BTreeMap<String, String>) {
        if later.is_empty() {
            return;
        }
        for name in later.keys() {
            self.last_container_statuses.remove(name);
        }
        self.next_container_images = later.clone();
        self.defer_containers(later);
    }

    /// Leaves the env-from-metadata changes of `later` (container → the labels/annotations it reads)
    /// for a later batch, as [`Self::defer_images`] does for images.
    pub fn defer_ref_metadata(&mut self, later: &BTreeMap<String, ObjectMeta>) {
        if later.is_empty() {
            return;
        }
        self.next_container_ref_metadata = later.clone();
        self.defer_containers(later);
    }

    /// Takes the containers of `later` out of this batch's record and has the next batch wait until
    /// the containers updated now are Ready: what deferring images and deferring env-from-metadata
    /// changes both do, written once.
    fn defer_containers<V>(&mut self, later: &BTreeMap<String, V>) {
        let mut now_batch = Vec::new();
        if let Some(batch) = self.container_batches_record.last_mut() {
            batch.containers.retain(|c| !later.contains_key(c));
            now_batch = batch.containers.clone();
        }
        self.pre_check_before_next = Some(InPlaceUpdatePreCheckBeforeNext {
            containers_required_ready: now_batch,
        });
    }

    /// Moves the containers of `batch` (taken from `nextContainerImages` and
    /// `nextContainerRefMetadata`) into the update at `now`:
    /// their current image IDs join the check, the batch is recorded, and what is left waits for
    /// `batch` to be Ready.
    pub fn start_next_batch(&mut self, batch: &BTreeSet<String>, pod: &Pod, now: Timestamp) {
        let statuses = crate::pods::container_statuses(pod);
        let images = &self.next_container_images;
        let changing: Vec<&k8s_openapi::api::core::v1::ContainerStatus> = statuses
            .iter()
            .filter(|s| batch.contains(&s.name) && images.contains_key(&s.name))
            .collect();
        for status in changing {
            self.last_container_statuses.insert(
                status.name.clone(),
                InPlaceUpdateContainerStatus {
                    image_id: status.image_id.clone(),
                },
            );
        }
        if batch
            .iter()
            .any(|n| self.next_container_images.contains_key(n))
        {
            self.update_images = true;
        }
        self.next_container_images
            .retain(|name, _| !batch.contains(name));
        self.next_container_ref_metadata
            .retain(|name, _| !batch.contains(name));
        let containers: Vec<String> = batch.iter().cloned().collect();
        self.pre_check_before_next =
            self.has_next_batches()
                .then(|| InPlaceUpdatePreCheckBeforeNext {
                    containers_required_ready: containers.clone(),
                });
        self.container_batches_record
            .push(InPlaceUpdateContainerBatch {
                timestamp: whole_seconds(now),
                containers,
            });
    }

    /// Whether later batches are still pending.
    pub fn has_next_batches(&self) -> bool {
        !self.next_container_images.is_empty()
            || !self.next_container_ref_metadata.is_empty()
            || !self.next_container_resources.is_empty()
    }
}

/// The raw state annotation of a Pod: the current key, else the legacy one.
pub fn state_annotation(pod: &Pod) -> Option<&str> {
    annotation(pod, keys::ANNOTATION_IN_PLACE_UPDATE_STATE)
        .or_else(|| annotation(pod, keys::ANNOTATION_IN_PLACE_UPDATE_STATE_OLD))
}

/// The parsed state of a Pod; `None` when it has none.
pub fn read_state(pod: &Pod) -> Option<Result<InPlaceUpdateState, serde_json::Error>> {
    state_annotation(pod).map(serde_json::from_str)
}

/// Whether the Pod carries a grace-period spec (current or legacy key), i.e. an update started by
/// OpenKruise that has not been applied yet.
pub fn has_grace_annotation(pod: &Pod) -> bool {
    annotation(pod, keys::ANNOTATION_IN_PLACE_UPDATE_GRACE).is_some()
        || annotation(pod, keys::ANNOTATION_IN_PLACE_UPDATE_GRACE_OLD).is_some()
}

pub(crate) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}
