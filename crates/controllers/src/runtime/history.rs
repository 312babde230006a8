//! Registering a workload's update revision with the API server, shared by the controllers that
//! keep ControllerRevisions; the decision itself is `kruise_core::revision::choose_update_revision`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_core::expectations::Expectation;
use kruise_core::revision::{
    ANNOTATION_VCT_HASH, UpdateRevision, choose_update_revision, equal_revision,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::driver::writes::{LiveReads, Writer, Writes, get_live, not_found};
use crate::error::{Error, KubeContext};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kruise_core::rollout::Revision;

/// The outcome of [`register`].
#[derive(Debug)]
pub enum Registered {
    /// The revision that records the current state, and what the cache should come to show of it
    /// (`None` when nothing was written).
    Revision(Box<ControllerRevision>, Option<Expectation>),
    /// The candidate's name is taken by a revision with other data (or another owner): the caller
    /// bumps its `status.collisionCount` so that the next candidate is named differently.
    Collision,
}

/// Makes `candidate` (built with the next revision number and the current collision count) the
/// update revision among `revisions`, the owner's existing ones: the newest as it is when it records
/// the same state; an older equal one renumbered (a roll back); else the candidate, created.
pub async fn register(
    api: &Writer<ControllerRevision>,
    live: &dyn LiveReads,
    revisions: &[ControllerRevision],
    candidate: ControllerRevision,
    owner_uid: Option<&str>,
) -> Result<Registered, Error> {
    let vct_hash = candidate.annotations().get(ANNOTATION_VCT_HASH).cloned();
    match choose_update_revision(revisions, candidate) {
        UpdateRevision::Latest(revision) => {
            Ok(Registered::Revision(Box::new(revision.clone()), None))
        }
        UpdateRevision::Renumber { revision, number } => {
            let name = revision.name_any();
            // A CloneSet rolled back to an older template records the volumeClaimTemplates it has
            // now, as upstream does, so that Pods are compared with what their claims came from.
            let mut patch = json!({"revision": number});
            if let Some(hash) = vct_hash
                .filter(|hash| revision.annotations().get(ANNOTATION_VCT_HASH) != Some(hash))
            {
                patch["metadata"] = json!({"annotations": {ANNOTATION_VCT_HASH: hash}});
            }
            let patched = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .context(|| format!("renumbering ControllerRevision {name}"))?;
            let expectation = patched
                .metadata
                .resource_version
                .clone()
                .map(|rv| Expectation::observed("ControllerRevision", name, rv));
            Ok(Registered::Revision(Box::new(patched), expectation))
        }
        UpdateRevision::Create(candidate) => {
            let name = candidate.name_any();
            match api.create(&PostParams::default(), &candidate).await {
                Ok(created) => Ok(Registered::Revision(
                    Box::new(created),
                    Some(Expectation::exists("ControllerRevision", name)),
                )),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let existing =
                        get_live::<ControllerRevision>(live, api.at().namespace.as_deref(), &name)
                            .await
                            .context(|| format!("reading ControllerRevision {name}"))?;
                    // Deleted since the create was refused: a race, decided again.
                    let Some(existing) = existing else {
                        return Err(not_found(api.at(), &name))
                            .context(|| format!("reading ControllerRevision {name}"));
                    };
                    let ours = existing
                        .owner_references()
                        .iter()
                        .any(|o| Some(o.uid.as_str()) == owner_uid);
                    if ours && equal_revision(&existing, &candidate) {
                        Ok(Registered::Revision(Box::new(existing), None))
                    } else {
                        Ok(Registered::Collision)
                    }
                }
                Err(source) => Err(Error::Kube {
                    context: format!("creating ControllerRevision {name}"),
                    source,
                }),
            }
        }
    }
}

/// The update revision of `owner` among `revisions` (its own), from `candidate` (built with the next
/// revision number and the owner's current collision count) as [`register`] decides, with what the
/// revision cache should come to show of it. On a hash collision, the owner's status is patched
/// with `collided(collision_count + 1)` (a merge patch body) so that the next candidate is named
/// differently, and `None` is returned: the caller looks again once the cache shows that status.
pub async fn update_revision<K>(
    writes: &Arc<dyn Writes>,
    live: &dyn LiveReads,
    owner: &K,
    revisions: &[ControllerRevision],
    candidate: ControllerRevision,
    collision_count: Option<i32>,
    collided: impl FnOnce(i32) -> serde_json::Value,
) -> Result<Option<(ControllerRevision, Option<Expectation>)>, Error>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = owner.namespace().unwrap_or_default();
    let api = Writer::<ControllerRevision>::namespaced(writes.clone(), &namespace);
    match register(
        &api,
        live,
        revisions,
        candidate,
        owner.meta().uid.as_deref(),
    )
    .await?
    {
        Registered::Revision(revision, expectation) => Ok(Some((*revision, expectation))),
        Registered::Collision => {
            let owners = Writer::<K>::namespaced(writes.clone(), &namespace);
            owners
                .patch_status(
                    &owner.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&collided(collision_count.unwrap_or(0) + 1)),
                )
                .await
                .context(|| "recording a revision hash collision".to_owned())?;
            Ok(None)
        }
    }
}

/// Puts the registered update revision among `revisions`, in place of one of its name, and
/// returns its name. With [`revision_views`] and [`find_view`], how CloneSet, Advanced StatefulSet
/// and Advanced DaemonSet turn their revisions into the views their rollout plans read: the
/// same steps in the three, so written once.
pub fn register_update(
    revisions: &mut Vec<ControllerRevision>,
    update: ControllerRevision,
) -> String {
    let name = update.metadata.name.clone().unwrap_or_default();
    revisions.retain(|r| r.metadata.name != update.metadata.name);
    revisions.push(update);
    name
}

/// Each of [`templates`] as a rollout's view of a revision.
pub fn revision_views(templates: &[(String, PodTemplateSpec)]) -> Vec<Revision<'_>> {
    templates
        .iter()
        .map(|(name, template)| Revision { name, template })
        .collect()
}

/// The view of the revision `name`; `Err` when it has none (its template could not be read), which
/// for the update revision leaves nothing to roll out to.
pub fn find_view<'a>(views: &[Revision<'a>], name: &str) -> Result<Revision<'a>, Error> {
    views
        .iter()
        .find(|r| r.name == name)
        .copied()
        .ok_or_else(|| Error::Invalid(format!("update revision {name} has no readable template")))
}

/// The current revision's name: the status's `currentRevision` while that revision still exists,
/// else the update revision's.
pub fn current_revision(recorded: &str, revisions: &[ControllerRevision], update: &str) -> String {
    let exists = revisions
        .iter()
        .any(|r| r.metadata.name.as_deref() == Some(recorded));
    if !recorded.is_empty() && exists {
        recorded.to_owned()
    } else {
        update.to_owned()
    }
}

/// Each revision's name and Pod template; a revision whose template cannot be read is logged and
/// left out.
pub fn templates(
    revisions: &[ControllerRevision],
) -> Vec<(String, k8s_openapi::api::core::v1::PodTemplateSpec)> {
    revisions
        .iter()
        .filter_map(|r| {
            let name = r.metadata.name.clone()?;
            match kruise_core::revision::template_from_revision(r) {
                Ok(t) => Some((name, t)),
                Err(error) => {
                    tracing::warn!(revision = %name, %error, "unreadable revision");
                    None
                }
            }
        })
        .collect()
}
