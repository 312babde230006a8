//! A simulated volume provisioner: the default StorageClass `sim` and PersistentVolumes for its
//! claims, so StatefulSets with `volumeClaimTemplates` work on the test bed.
//!
//! It plays the external provisioner and resizer a CSI driver would run, and leaves the rest to the
//! real kube-controller-manager, as on a real cluster:
//! - a claim of a class whose provisioner is [`PROVISIONER`] gets a PersistentVolume `pvc-<claim uid>`
//!   created *pre-bound* to it (`claimRef` with the claim's UID); KCM's PV binder then completes the
//!   binding (claim `spec.volumeName`, both phases `Bound`, the claim's `status.capacity`);
//! - a bound claim whose requested storage grew past its volume's capacity (the API server admits that
//!   only when the class allows expansion) gets the volume's capacity raised, then the claim's
//!   `status.capacity` and `status.allocatedResources` reported;
//! - a volume whose claim is gone is marked `Released` by KCM; with reclaim policy `Delete` it is then
//!   deleted here (KCM leaves volumes of external provisioners to them).
//!
//! Decisions are pure ([`plan_claim`], [`plan_volume`]); [`run`] only watches and writes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::quantity::Quantity as ParsedQuantity;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// The default StorageClass the simulator installs.
pub const STORAGE_CLASS: &str = "sim";
/// The provisioner name of [`STORAGE_CLASS`]; any class naming it is served.
pub const PROVISIONER: &str = "sim.kruise-rs.io/volume";
/// Marks the default StorageClass.
pub const ANNOTATION_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// Who provisioned a volume; KCM leaves the deletion of such volumes to that provisioner.
pub const ANNOTATION_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Capacity of a volume whose claim requests no storage.
pub const DEFAULT_CAPACITY: &str = "1Gi";
/// Directory (never created: nothing mounts) under which volumes pretend to live.
const HOST_PATH_ROOT: &str = "/var/lib/kubelet-sim/volumes";
const STORAGE: &str = "storage";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("installing StorageClass {STORAGE_CLASS}: {0}")]
    StorageClass(#[source] kube::Error),
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
}

/// The default StorageClass `sim`: provisioner [`PROVISIONER`], reclaim policy Delete, expansion
/// allowed, binding Immediate.
pub fn storage_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(STORAGE_CLASS.into()),
            annotations: Some([(ANNOTATION_DEFAULT_CLASS.into(), "true".into())].into()),
            ..ObjectMeta::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        allow_volume_expansion: Some(true),
        volume_binding_mode: Some("Immediate".into()),
        ..StorageClass::default()
    }
}

/// The name of the volume provisioned for a claim (as external provisioners name them).
pub fn volume_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

fn storage_of(map: Option<&std::collections::BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    map.and_then(|m| m.get(STORAGE))
}

fn requested(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    storage_of(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

fn volume_capacity(volume: &PersistentVolume) -> Option<&Quantity> {
    storage_of(volume.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

fn claim_capacity(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    storage_of(claim.status.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// `a < b` for storage quantities; an unparsable value compares as not smaller (nothing is done).
fn less(a: Option<&Quantity>, b: Option<&Quantity>) -> bool {
    let parse = |q: Option<&Quantity>| q.and_then(|q| ParsedQuantity::parse(&q.0).ok());
    match (parse(a), parse(b)) {
        (None, Some(_)) => true,
        (Some(a), Some(b)) => a.cmp_value(&b).is_lt(),
        _ => false,
    }
}

/// What to do for one claim.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimStep {
    /// Not ours, being deleted, or nothing to change.
    Nothing,
    /// Create this volume, pre-bound to the claim.
    Provision(Box<PersistentVolume>),
    /// The volume exists and KCM has yet to complete the binding: look again later.
    AwaitBinding,
    /// Merge patch for the volume: its capacity grows to the claim's request.
    GrowVolume(Value),
    /// Merge patch for the claim's status: the grown capacity is available.
    ReportCapacity(Value),
}

/// Decides the next step for `claim` of `class` (`None` when the claim names no class or a class that
/// does not exist), given the volume provisioned for it, if any.
pub fn plan_claim(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    volume: Option<&PersistentVolume>,
) -> ClaimStep {
    let Some(class) = class.filter(|c| c.provisioner == PROVISIONER) else {
        return ClaimStep::Nothing;
    };
    let Some(uid) = claim.metadata.uid.as_deref() else {
        return ClaimStep::Nothing;
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return ClaimStep::Nothing;
    }
    let spec = claim.spec.clone().unwrap_or_default();
    let bound_to = spec.volume_name.as_deref().filter(|v| !v.is_empty());
    let ours = volume_name(uid);
    match (bound_to, volume) {
        // Bound to a volume someone else made, or a label selector we cannot honour (external
        // provisioners refuse those too).
        (Some(name), _) if name != ours => ClaimStep::Nothing,
        (None, None) if spec.selector.is_some() => ClaimStep::Nothing,
        (None, None) => ClaimStep::Provision(Box::new(new_volume(claim, class, &ours))),
        (_, None) => ClaimStep::Nothing,
        (_, Some(volume)) => {
            let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            if bound_to.is_none() || !bound {
                return ClaimStep::AwaitBinding;
            }
            let want = requested(claim);
            let have = volume_capacity(volume);
            if let Some(want) = want.filter(|_| less(have, want)) {
                return ClaimStep::GrowVolume(json!({ "spec": { "capacity": { STORAGE: want } } }));
            }
            if let Some(have) = have.filter(|_| less(claim_capacity(claim), have)) {
                return ClaimStep::ReportCapacity(json!({ "status": {
                    "capacity": { STORAGE: have },
                    "allocatedResources": { STORAGE: have },
                }}));
            }
            ClaimStep::Nothing
        }
    }
}

fn new_volume(claim: &PersistentVolumeClaim, class: &StorageClass, name: &str) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let capacity = requested(claim)
        .cloned()
        .unwrap_or_else(|| Quantity(DEFAULT_CAPACITY.into()));
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: Some([(ANNOTATION_PROVISIONED_BY.into(), PROVISIONER.into())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some([(STORAGE.into(), capacity)].into()),
            access_modes: Some(
                spec.access_modes
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            ),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: class.metadata.name.clone(),
            volume_mode: spec.volume_mode.or_else(|| Some("Filesystem".into())),
            mount_options: class.mount_options.clone(),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: claim.metadata.namespace.clone(),
                name: claim.metadata.name.clone(),
                uid: claim.metadata.uid.clone(),
                ..ObjectReference::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: format!("{HOST_PATH_ROOT}/{name}"),
                type_: None,
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    }
}

/// Whether `volume` is to be deleted: provisioned here, reclaim policy Delete, and released by KCM
/// (its claim is gone) or failed.
pub fn plan_volume(volume: &PersistentVolume) -> bool {
    let ours = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROVISIONED_BY))
        .is_some_and(|p| p == PROVISIONER);
    let delete_policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    let released = matches!(
        volume.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Released" | "Failed")
    );
    ours && delete_policy && released && volume.metadata.deletion_timestamp.is_none()
}

/// The claims a Pod mounts: `persistentVolumeClaim` volumes and the `<pod>-<volume>` claims of generic
/// ephemeral volumes.
pub fn pod_claims(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(claim) = &v.persistent_volume_claim {
                Some(claim.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .collect()
}

/// The claim is bound to a volume (phase `Bound`), so a kubelet can mount it.
pub fn claim_is_bound(claim: &PersistentVolumeClaim) -> bool {
    claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        && claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty())
}

/// Names the first claim of `pod` that is missing or unbound, asking the API server; `None` when the
/// Pod can mount all of its claims.
pub async fn unbound_claim(client: &Client, pod: &Pod) -> Result<Option<String>, kube::Error> {
    let claims = pod_claims(pod);
    if claims.is_empty() {
        return Ok(None);
    }
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    for name in claims {
        match api.get_opt(&name).await? {
            Some(claim) if claim_is_bound(&claim) => {}
            _ => return Ok(Some(name)),
        }
    }
    Ok(None)
}

struct Ctx {
    client: Client,
}

fn api_error(action: &'static str, object: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api {
        action,
        object,
        source,
    }
}

async fn reconcile_claim(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Ctx>,
) -> Result<Action, Error> {
    let key = format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    );
    let class_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .filter(|c| !c.is_empty());
    let Some(class_name) = class_name else {
        return Ok(Action::await_change());
    };
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    let class = classes
        .get_opt(class_name)
        .await
        .map_err(api_error("reading StorageClass", class_name.to_string()))?;
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let pv_name = volume_name(claim.metadata.uid.as_deref().unwrap_or_default());
    let volume = if class.as_ref().is_some_and(|c| c.provisioner == PROVISIONER) {
        volumes
            .get_opt(&pv_name)
            .await
            .map_err(api_error("reading PersistentVolume", pv_name.clone()))?
    } else {
        None
    };
    match plan_claim(&claim, class.as_ref(), volume.as_ref()) {
        ClaimStep::Nothing => Ok(Action::await_change()),
        ClaimStep::AwaitBinding => Ok(Action::requeue(Duration::from_secs(2))),
        ClaimStep::Provision(volume) => {
            match volumes.create(&PostParams::default(), &volume).await {
                Ok(_) => tracing::info!(claim = %key, volume = %pv_name, "provisioned volume"),
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(source) => {
                    return Err(api_error("creating PersistentVolume", pv_name)(source));
                }
            }
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        ClaimStep::GrowVolume(patch) => {
            volumes
                .patch(&pv_name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(api_error("resizing PersistentVolume", pv_name.clone()))?;
            tracing::info!(claim = %key, volume = %pv_name, "resized volume");
            Ok(Action::requeue(Duration::from_millis(200)))
        }
        ClaimStep::ReportCapacity(patch) => {
            let api: Api<PersistentVolumeClaim> =
                Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
            api.patch_status(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .map_err(api_error("reporting capacity of", key.clone()))?;
            tracing::info!(claim = %key, "claim capacity updated");
            Ok(Action::await_change())
        }
    }
}

async fn reconcile_volume(volume: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !plan_volume(&volume) {
        return Ok(Action::await_change());
    }
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let name = volume.name_any();
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: volume.metadata.uid.clone(),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => tracing::info!(volume = %name, "deleted released volume"),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(source) => return Err(api_error("deleting PersistentVolume", name)(source)),
    }
    Ok(Action::await_change())
}

fn retry<K>(_: Arc<K>, error: &Error, _: Arc<Ctx>) -> Action {
    tracing::warn!(%error, "volume provisioner retrying");
    Action::requeue(Duration::from_secs(1))
}

/// Installs the StorageClass `sim` (kept as it is when it exists) and provisions, resizes and deletes
/// volumes until `shutdown` resolves.
pub async fn run(
    client: Client,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), Error> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    match classes
        .create(&PostParams::default(), &storage_class())
        .await
    {
        Ok(_) => tracing::info!(class = STORAGE_CLASS, "installed default StorageClass"),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => return Err(Error::StorageClass(error)),
    }
    let ctx = Arc::new(Ctx {
        client: client.clone(),
    });
    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown));
    let claims = Controller::new(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        watcher::Config::default(),
    )
    // A volume changing (bound by KCM, resized) is a reason to look at its claim again.
    .watches(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
        |pv: PersistentVolume| {
            let claim = pv.spec.and_then(|s| s.claim_ref)?;
            Some(ObjectRef::new(claim.name.as_deref()?).within(claim.namespace.as_deref()?))
        },
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(reconcile_claim, retry, ctx.clone())
    .for_each(|r| async move {
        if let Err(error) = r {
            tracing::debug!(%error, "claim reconcile");
        }
    });
    let volumes = Controller::new(
        Api::<PersistentVolume>::all(client),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(shutdown)
    .run(reconcile_volume, retry, ctx)
    .for_each(|r| async move {
        if let Err(error) = r {
            tracing::debug!(%error, "volume reconcile");
        }
    });
    futures::join!(claims, volumes);
    Ok(())
}

/// Spawns [`run`] on the current runtime, logging its failure; what the test bed and `kruise-local`
/// call next to the node simulation.
pub fn spawn(
    client: Client,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(error) = run(client, shutdown).await {
            tracing::error!(%error, "volume provisioner stopped");
        }
    })
}

#[cfg(test)]
mod tests;
