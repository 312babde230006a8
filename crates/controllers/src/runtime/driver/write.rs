//! The writes every kind makes the same way: its status, and the pruning of its old revisions.

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_core::expectations::Expectation;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;

use super::writes::Writer;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::error::{Error, is_race};

/// What [`write_status`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusWrite {
    /// Nothing changed: nothing was sent.
    Unchanged,
    /// Written; the object is now at this resourceVersion (what the caches should come to show).
    Written { resource_version: Option<String> },
    /// The object changed or went away since it was read (409 on the resourceVersion precondition,
    /// or 404): the status was computed from a stale copy and is dropped; the next reconcile, on the
    /// newer copy, computes it again.
    Stale,
}

/// Writes `new` as the status of `object` (read from the cache), unless `changed` is false. The
/// patch replaces the whole status ([`crate::status_patch::whole_status`]) and carries the
/// resourceVersion of `object` as a precondition, so a status computed from an older copy never
/// overwrites one computed from a newer.
pub async fn write_status<K, S>(
    api: &Writer<K>,
    object: &K,
    old: Option<&S>,
    new: &S,
    changed: bool,
) -> Result<StatusWrite, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    S: Serialize,
{
    if !changed {
        return Ok(StatusWrite::Unchanged);
    }
    let name = object.name_any();
    let mut patch = crate::status_patch::whole_status(old, new);
    patch["metadata"] = json!({"resourceVersion": object.meta().resource_version});
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(StatusWrite::Written {
            resource_version: written.meta().resource_version.clone(),
        }),
        Err(error) if is_race(&error) => Ok(StatusWrite::Stale),
        Err(source) => Err(Error::Kube {
            context: format!(
                "writing the status of {} {}/{name}",
                K::kind(&()),
                object.namespace().unwrap_or_default()
            ),
            source,
        }),
    }
}

/// Deletes `doomed`, old revisions of one owner, each preconditioned on the uid it was decided on
/// (a revision deleted and re-created under the same name since is not touched). A revision
/// already gone or changed is skipped. Returns what the caches should come to show: each deleted
/// revision gone.
pub async fn prune_revisions<'a>(
    api: &Writer<ControllerRevision>,
    doomed: impl IntoIterator<Item = &'a ControllerRevision>,
) -> Result<Vec<Expectation>, Error> {
    let mut gone = Vec::new();
    for revision in doomed {
        let name = revision.name_any();
        let uid = revision.metadata.uid.clone();
        let params = DeleteParams {
            preconditions: uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => gone.push(Expectation::gone("ControllerRevision", name, uid)),
            Err(error) if is_race(&error) => {}
            Err(source) => {
                return Err(Error::Kube {
                    context: format!("deleting old revision {name}"),
                    source,
                });
            }
        }
    }
    Ok(gone)
}
