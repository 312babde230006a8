//! Adopting and releasing the objects a workload claims (Pods, ControllerRevisions, PVCs): the
//! decision is `kruise_core::ownership::claim`, the patches `kruise_core::ownership::{adopt_patch,
//! release_patch}`; this sends them.

use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_core::ownership::{Claim, Claimant, adopt_patch, claim, release_patch};
use kube::api::{Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::driver::writes::{LiveReads, Writer, get_live};
use crate::error::{Error, KubeContext, is_race};

/// The controller reference a workload puts on what it creates (Pods, revisions): its API version
/// and kind, name and uid, `controller` and `blockOwnerDeletion` true, as Kubernetes'
/// `metav1.NewControllerRef`. `Err` names the field the object lacks (`metadata.name` or
/// `metadata.uid`; an object read from the apiserver has both). Written once for every kind that
/// owns Pods: only the kind differs.
pub fn controller_reference<K: Resource<DynamicType = ()>>(
    object: &K,
) -> Result<OwnerReference, &'static str> {
    let meta = object.meta();
    Ok(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone().ok_or("metadata.name")?,
        uid: meta.uid.clone().ok_or("metadata.uid")?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// What claiming a set of objects came to.
pub struct Claimed<K> {
    /// The objects owned after claiming: those kept, and those adopted (as written).
    pub owned: Vec<K>,
    /// The objects written (adopted or released), for the caller's expectations.
    pub written: Vec<K>,
    /// Whether any adoption was tried (written or lost to a race).
    pub adopting: bool,
}

/// Claims each of `objects` for `claimant` (`kruise_core::ownership::claim`, with `matches` telling
/// whether an object's labels match its selector): keeps, adopts or releases it, controller
/// reference `owner`. `None` when something was to be adopted but the owner turned out to be gone or
/// being deleted ([`Recheck`]).
pub async fn claim_each<K, O>(
    api: &Writer<K>,
    objects: impl IntoIterator<Item = Arc<K>>,
    claimant: Claimant<'_>,
    owner: &OwnerReference,
    recheck: &mut Recheck<O>,
    matches: impl Fn(&ObjectMeta) -> Option<bool>,
) -> Result<Option<Claimed<K>>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let mut claimed = Claimed {
        owned: Vec::new(),
        written: Vec::new(),
        adopting: false,
    };
    for object in objects {
        let decision = claim(claimant, object.meta(), matches(object.meta()));
        if decision == Claim::Adopt {
            if !recheck.may_adopt().await? {
                return Ok(None);
            }
            claimed.adopting = true;
        }
        let written = apply(api, &object, decision, owner).await?;
        match (decision, &written) {
            // Objects fresh from the cache's decode are not shared: moved, not deep-copied.
            (Claim::Keep, _) => claimed.owned.push(Arc::unwrap_or_clone(object)),
            (Claim::Adopt, Some(adopted)) => claimed.owned.push(adopted.clone()),
            _ => {}
        }
        claimed.written.extend(written);
    }
    Ok(Some(claimed))
}

/// Sends the adoption or release `decision` asks for on `object` (anything else writes nothing).
/// Returns the object as written, or `None` when nothing was written — including when the object
/// changed or went away since it was seen (a failed `test`, a conflict, not found): the next
/// reconcile decides again on a fresh view.
pub async fn apply<K>(
    api: &Writer<K>,
    object: &K,
    decision: Claim,
    owner: &OwnerReference,
) -> Result<Option<K>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let kind = K::kind(&());
    let name = object.name_any();
    let (patch, doing) = match decision {
        Claim::Adopt => (
            adopt_patch(object.meta(), owner)
                .map_err(|e| Error::Invalid(format!("adopting {kind} {name}: {e}")))?,
            "adopting",
        ),
        Claim::Release => match release_patch(object.meta(), &owner.uid) {
            Some(patch) => (patch, "releasing"),
            None => return Ok(None),
        },
        Claim::Keep | Claim::Ignore => return Ok(None),
    };
    match api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(written) => {
            tracing::info!(
                kind = %kind,
                object = %name,
                owner_kind = %owner.kind,
                owner = %owner.name,
                "{}",
                if decision == Claim::Adopt {
                    "adopted an orphan whose labels match the selector"
                } else {
                    "released an object whose labels no longer match the selector"
                }
            );
            Ok(Some(written))
        }
        Err(error) if is_race(&error) => Ok(None),
        Err(source) => Err(Error::Kube {
            context: format!("{doing} {kind} {name} ({} {})", owner.kind, owner.name),
            source,
        }),
    }
}

/// Kubernetes' `RecheckDeletionTimestamp`: before adopting anything, the owner is read afresh from
/// the API server (not a cache), once per reconcile, to check that it is still the object of its uid
/// and is not being deleted. An owner reference added to an owner that is already gone makes the
/// garbage collector delete the adopted object, so a stale view must not adopt.
pub struct Recheck<K> {
    live: Arc<dyn LiveReads>,
    namespace: Option<String>,
    name: String,
    uid: String,
    verdict: Option<bool>,
    kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Recheck<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    /// The owner `name` of `uid` (in `namespace`, `None` when cluster-scoped), read through `live`
    /// when an adoption asks.
    pub fn new(
        live: Arc<dyn LiveReads>,
        namespace: Option<&str>,
        name: String,
        uid: String,
    ) -> Self {
        Self {
            live,
            namespace: namespace.map(str::to_owned),
            name,
            uid,
            verdict: None,
            kind: std::marker::PhantomData,
        }
    }

    /// Whether the owner may adopt (read on the first call only).
    pub async fn may_adopt(&mut self) -> Result<bool, Error> {
        if let Some(verdict) = self.verdict {
            return Ok(verdict);
        }
        let fresh = get_live::<K>(self.live.as_ref(), self.namespace.as_deref(), &self.name)
            .await
            .context(|| format!("re-reading {} {} before adopting", K::kind(&()), self.name))?;
        let verdict = fresh.is_some_and(|o| {
            o.meta().uid.as_deref() == Some(self.uid.as_str())
                && o.meta().deletion_timestamp.is_none()
        });
        if !verdict {
            tracing::info!(kind = %K::kind(&()), name = %self.name, "not adopting: the owner is gone or being deleted");
        }
        self.verdict = Some(verdict);
        Ok(verdict)
    }
}

/// What an owner's `selector` says of an object's labels: `None` when the selector is missing or
/// unusable (empty), so that nothing is adopted or released on its account.
pub fn selector_match(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> impl Fn(&ObjectMeta) -> Option<bool> + '_ {
    let selector = selector.filter(|s| kruise_core::ownership::usable_selector(s));
    move |meta: &ObjectMeta| {
        selector.map(|s| match &meta.labels {
            Some(labels) => kruise_api::validation::selector_matches(s, labels),
            None => kruise_api::validation::selector_matches(s, &Default::default()),
        })
    }
}

/// The owner's ControllerRevisions in its namespace after claiming (Kubernetes'
/// `ClaimControllerRevisions`); the revisions written are expected in `revisions`, the cache they are
/// read from.
pub async fn claim_revisions<O>(
    pc: &crate::podcontrol::PodControl<'_>,
    revisions: &kube::runtime::reflector::Store<k8s_openapi::api::apps::v1::ControllerRevision>,
    claimant: Claimant<'_>,
    owner: &OwnerReference,
    recheck: &mut Recheck<O>,
    matches: impl Fn(&ObjectMeta) -> Option<bool>,
) -> Result<Option<Vec<k8s_openapi::api::apps::v1::ControllerRevision>>, Error>
where
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api = pc.writer();
    let in_namespace = revisions
        .state()
        .into_iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(pc.namespace));
    let Some(claimed) = claim_each(&api, in_namespace, claimant, owner, recheck, matches).await?
    else {
        return Ok(None);
    };
    for revision in claimed.written {
        if let (Some(name), Some(rv)) = (revision.metadata.name, revision.metadata.resource_version)
        {
            pc.expect(kruise_core::expectations::Expectation::observed(
                "ControllerRevision",
                name,
                rv,
            ));
        }
    }
    Ok(Some(claimed.owned))
}

/// The owner's Pods after claiming (Kubernetes' `ClaimPods`): those it controls, plus the active
/// orphans of its namespace that `orphan` accepts, adopted when `selector` matches them; owned
/// Pods the selector no longer matches are released. Returns the Pods owned and whether an adoption
/// was tried (counting without an adopted Pod would create one too many: the caller looks again
/// once the cache shows it), or `None` when the owner is gone or being deleted ([`Recheck`]). The
/// Pods written are expected in the Pod cache.
pub async fn claim_pods<O>(
    pc: &crate::podcontrol::PodControl<'_>,
    pods: &crate::cache::PodCache,
    claimant: Claimant<'_>,
    owner: &OwnerReference,
    recheck: &mut Recheck<O>,
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    orphan: impl Fn(&k8s_openapi::api::core::v1::Pod) -> bool,
) -> Result<Option<(Vec<k8s_openapi::api::core::v1::Pod>, bool)>, Error>
where
    O: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let candidates = pods.owned_by(claimant.uid).into_iter().chain(
        pods.orphans_in(pc.namespace)
            .into_iter()
            .filter(|p| kruise_core::pods::is_active(p) && orphan(p)),
    );
    let matches = selector_match(selector);
    let Some(claimed) =
        claim_each(&pc.writer(), candidates, claimant, owner, recheck, matches).await?
    else {
        return Ok(None);
    };
    for pod in &claimed.written {
        pc.observe(pod);
    }
    Ok(Some((claimed.owned, claimed.adopting)))
}
