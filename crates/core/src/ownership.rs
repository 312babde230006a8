//! Which objects a workload owns, as Kubernetes' `ControllerRefManager` decides it (`ClaimObject`):
//! an object the workload controls stays its own while its labels match the selector and is
//! released when they stop matching; an orphan (no controlling owner) whose labels match is adopted;
//! an object another controller controls is never touched. The patches that adopt and release are
//! JSON patches guarded by `test` operations, so that a race with another owner, or with a change
//! the cache has not shown yet, fails instead of stealing or dropping the wrong reference.
//!
//! This is what lets `kubectl delete --cascade=orphan` followed by re-applying the same workload keep
//! every Pod: the new workload adopts the orphaned Pods *and* the orphaned ControllerRevisions, so an
//! unchanged template finds its old revision and no Pod looks outdated.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use serde_json::Value;

/// What the workload does with one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// It controls the object and the labels match: the object is its own.
    Keep,
    /// An orphan whose labels match: add a controller reference to the workload.
    Adopt,
    /// It controls the object but the labels no longer match: remove its controller reference.
    Release,
    /// Not its own and not to be taken: another controller's object, a non-matching orphan, an
    /// object being deleted, or anything while the workload itself is being deleted.
    Ignore,
}

impl Claim {
    /// Whether the object counts as the workload's after the claim (kept or adopted).
    pub fn owned(self) -> bool {
        matches!(self, Claim::Keep | Claim::Adopt)
    }
}

/// The claiming workload: its uid and whether it is being deleted.
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub uid: &'a str,
    pub deleting: bool,
}

impl<'a> Claimant<'a> {
    /// The claimant described by a workload's metadata (`None` without a uid).
    pub fn of(meta: &'a ObjectMeta) -> Option<Self> {
        Some(Self {
            uid: meta.uid.as_deref()?,
            deleting: meta.deletion_timestamp.is_some(),
        })
    }
}

/// The controlling owner reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// Whether a selector can be used to claim objects: not empty (an empty selector would match every
/// object in the namespace) and every expression well formed (an unknown operator matches nothing,
/// which would release every object). A selector that cannot be used claims nothing and releases
/// nothing.
pub fn usable_selector(selector: &LabelSelector) -> bool {
    let labels = selector
        .match_labels
        .as_ref()
        .is_some_and(|m| !m.is_empty());
    let expressions = selector.match_expressions.as_deref().unwrap_or_default();
    let well_formed = expressions.iter().all(|req| {
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => !values.is_empty(),
            "Exists" | "DoesNotExist" => values.is_empty(),
            _ => false,
        }
    });
    (labels || !expressions.is_empty()) && well_formed
}

/// Decides what `claimant` does with the object of `object` metadata. `matches` is whether the
/// object's labels match the claimant's selector, `None` when the claimant has no usable selector
/// (see [`usable_selector`]): then it keeps what it controls and takes nothing.
pub fn claim(claimant: Claimant<'_>, object: &ObjectMeta, matches: Option<bool>) -> Claim {
    match controller_of(object) {
        Some(owner) if owner.uid != claimant.uid => Claim::Ignore,
        Some(_) => match matches {
            Some(true) | None => Claim::Keep,
            // A workload being deleted releases nothing: the garbage collector is at work.
            Some(false) if claimant.deleting => Claim::Ignore,
            Some(false) => Claim::Release,
        },
        None => {
            if claimant.deleting || object.deletion_timestamp.is_some() || matches != Some(true) {
                Claim::Ignore
            } else {
                Claim::Adopt
            }
        }
    }
}

fn ptr<'a>(tokens: impl IntoIterator<Item = &'a str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

fn test(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path, value })
}

/// Why no adoption patch could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("the object has no {0}")]
    Missing(&'static str),
    #[error("cannot encode the owner reference: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The JSON patch that adopts an orphan: it tests the object's uid (the same object, not one
/// re-created under the name) and resourceVersion (no one, such as another controller adopting it,
/// changed it since it was seen without a controller), then appends `owner` to its owner references.
pub fn adopt_patch(object: &ObjectMeta, owner: &OwnerReference) -> Result<Patch, ClaimError> {
    let uid = object.uid.as_deref().ok_or(ClaimError::Missing("uid"))?;
    let rv = object
        .resource_version
        .as_deref()
        .ok_or(ClaimError::Missing("resourceVersion"))?;
    let owner = serde_json::to_value(owner)?;
    let add = match &object.owner_references {
        Some(refs) if !refs.is_empty() => AddOperation {
            path: ptr(["metadata", "ownerReferences", "-"]),
            value: owner,
        },
        _ => AddOperation {
            path: ptr(["metadata", "ownerReferences"]),
            value: Value::Array(vec![owner]),
        },
    };
    Ok(Patch(vec![
        test(ptr(["metadata", "uid"]), Value::String(uid.to_owned())),
        test(
            ptr(["metadata", "resourceVersion"]),
            Value::String(rv.to_owned()),
        ),
        PatchOperation::Add(add),
    ]))
}

/// The JSON patch that releases an object: it tests the object's uid and that the owner reference at
/// the position seen still names `owner_uid`, then removes that reference (other references stay).
/// `None` when the object has no reference to `owner_uid`, or no uid.
pub fn release_patch(object: &ObjectMeta, owner_uid: &str) -> Option<Patch> {
    let uid = object.uid.as_deref()?;
    let index = object
        .owner_references
        .as_ref()?
        .iter()
        .position(|o| o.uid == owner_uid)?
        .to_string();
    Some(Patch(vec![
        test(ptr(["metadata", "uid"]), Value::String(uid.to_owned())),
        test(
            ptr(["metadata", "ownerReferences", &index, "uid"]),
            Value::String(owner_uid.to_owned()),
        ),
        PatchOperation::Remove(RemoveOperation {
            path: ptr(["metadata", "ownerReferences", &index]),
        }),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn owner(uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "apps.kruise.io/v1beta1".into(),
            kind: "CloneSet".into(),
            name: format!("cs-{uid}"),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: Some(true),
        }
    }

    fn object(refs: &[OwnerReference], deleting: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some("obj".into()),
            uid: Some("obj-uid".into()),
            resource_version: Some("7".into()),
            owner_references: (!refs.is_empty()).then(|| refs.to_vec()),
            deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn claim_table() {
        let ours = owner("me", true);
        let theirs = owner("other", true);
        let ours_not_controller = owner("me", false);
        let alive = Claimant {
            uid: "me",
            deleting: false,
        };
        let dying = Claimant {
            uid: "me",
            deleting: true,
        };
        // (what, claimant, owner references, object terminating, labels match, decision)
        type Case<'a> = (
            &'a str,
            Claimant<'a>,
            Vec<OwnerReference>,
            bool,
            Option<bool>,
            Claim,
        );
        #[rustfmt::skip]
        let cases: Vec<Case<'_>> = vec![
            ("ours, matching", alive, vec![ours.clone()], false, Some(true), Claim::Keep),
            ("ours, relabelled out", alive, vec![ours.clone()], false, Some(false), Claim::Release),
            ("ours, relabelled out, object terminating", alive, vec![ours.clone()], true, Some(false), Claim::Release),
            ("ours, relabelled out, we are being deleted", dying, vec![ours.clone()], false, Some(false), Claim::Ignore),
            ("ours, we are being deleted, matching", dying, vec![ours.clone()], false, Some(true), Claim::Keep),
            ("ours, no usable selector", alive, vec![ours.clone()], false, None, Claim::Keep),
            ("orphan, matching", alive, vec![], false, Some(true), Claim::Adopt),
            ("orphan with a non-controller ref, matching", alive, vec![ours_not_controller.clone()], false, Some(true), Claim::Adopt),
            ("orphan, not matching", alive, vec![], false, Some(false), Claim::Ignore),
            ("orphan, no usable selector", alive, vec![], false, None, Claim::Ignore),
            ("orphan, terminating", alive, vec![], true, Some(true), Claim::Ignore),
            ("orphan, we are being deleted", dying, vec![], false, Some(true), Claim::Ignore),
            ("another controller's, matching", alive, vec![theirs.clone()], false, Some(true), Claim::Ignore),
            ("another controller's, not matching", alive, vec![theirs.clone()], false, Some(false), Claim::Ignore),
            ("another controller's plus our non-controller ref", alive, vec![ours_not_controller, theirs], false, Some(true), Claim::Ignore),
        ];
        for (what, claimant, refs, deleting, matches, want) in cases {
            let got = claim(claimant, &object(&refs, deleting), matches);
            assert_eq!(got, want, "{what}");
            assert_eq!(got.owned(), matches!(want, Claim::Keep | Claim::Adopt));
        }
    }

    #[test]
    fn claimant_of_metadata() {
        let mut meta = ObjectMeta {
            uid: Some("u".into()),
            ..ObjectMeta::default()
        };
        let c = Claimant::of(&meta).map(|c| (c.uid.to_owned(), c.deleting));
        assert_eq!(c, Some(("u".to_owned(), false)));
        meta.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(Claimant::of(&meta).map(|c| c.deleting), Some(true));
        meta.uid = None;
        assert!(Claimant::of(&meta).is_none());
    }

    #[test]
    fn usable_selector_table() {
        let req = |op: &str, values: &[&str]| LabelSelectorRequirement {
            key: "k".into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        };
        let sel = |labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        };
        let cases = [
            ("empty", sel(&[], vec![]), false),
            ("labels", sel(&[("app", "web")], vec![]), true),
            ("In with values", sel(&[], vec![req("In", &["a"])]), true),
            ("In without values", sel(&[], vec![req("In", &[])]), false),
            ("Exists", sel(&[], vec![req("Exists", &[])]), true),
            (
                "Exists with values",
                sel(&[], vec![req("Exists", &["a"])]),
                false,
            ),
            (
                "unknown operator",
                sel(&[("app", "web")], vec![req("Matches", &["a"])]),
                false,
            ),
        ];
        for (what, selector, want) in cases {
            assert_eq!(usable_selector(&selector), want, "{what}");
        }
    }

    fn apply(doc: &Value, patch: &Patch) -> Result<Value, String> {
        let mut doc = doc.clone();
        json_patch::patch(&mut doc, patch).map_err(|e| e.to_string())?;
        Ok(doc)
    }

    fn doc(meta: &ObjectMeta) -> Value {
        json!({"metadata": serde_json::to_value(meta).unwrap_or_default()})
    }

    #[test]
    fn adopt_patch_appends_a_controller_reference() {
        let new_owner = owner("me", true);
        // No references yet: the list is created.
        let orphan = object(&[], false);
        let patch = adopt_patch(&orphan, &new_owner).expect("builds");
        let out = apply(&doc(&orphan), &patch).expect("applies");
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([serde_json::to_value(&new_owner).unwrap_or_default()])
        );
        // A non-controller reference stays; ours is appended.
        let other = owner("gc-helper", false);
        let with_ref = object(std::slice::from_ref(&other), false);
        let patch = adopt_patch(&with_ref, &new_owner).expect("builds");
        let out = apply(&doc(&with_ref), &patch).expect("applies");
        let refs: Vec<OwnerReference> =
            serde_json::from_value(out["metadata"]["ownerReferences"].clone()).unwrap_or_default();
        assert_eq!(refs, vec![other, new_owner.clone()]);
        // The object changed since it was seen (say another controller adopted it): the test fails.
        let mut changed = orphan.clone();
        changed.resource_version = Some("8".into());
        changed.owner_references = Some(vec![owner("other", true)]);
        let patch = adopt_patch(&orphan, &new_owner).expect("builds");
        assert!(apply(&doc(&changed), &patch).is_err());
        // Re-created under the same name: the uid test fails.
        let mut recreated = orphan.clone();
        recreated.uid = Some("another".into());
        assert!(apply(&doc(&recreated), &patch).is_err());
        // Nothing to test against: no patch.
        let mut bare = orphan;
        bare.resource_version = None;
        assert!(matches!(
            adopt_patch(&bare, &new_owner),
            Err(ClaimError::Missing("resourceVersion"))
        ));
    }

    #[test]
    fn release_patch_removes_only_our_reference() {
        let ours = owner("me", true);
        let other = owner("gc-helper", false);
        let meta = object(&[other.clone(), ours.clone()], false);
        let patch = release_patch(&meta, "me").expect("we hold a reference");
        let out = apply(&doc(&meta), &patch).expect("applies");
        let refs: Vec<OwnerReference> =
            serde_json::from_value(out["metadata"]["ownerReferences"].clone()).unwrap_or_default();
        assert_eq!(refs, vec![other.clone()]);
        // Unrelated changes (status, labels, resourceVersion) do not stop the release.
        let mut busy = doc(&meta);
        busy["metadata"]["resourceVersion"] = json!("99");
        busy["metadata"]["labels"] = json!({"app": "elsewhere"});
        assert!(apply(&busy, &patch).is_ok());
        // Our reference already gone (or moved): the test fails rather than removing another one.
        let released = doc(&object(std::slice::from_ref(&other), false));
        assert!(apply(&released, &patch).is_err());
        let reordered = doc(&object(&[ours, other], false));
        assert!(apply(&reordered, &patch).is_err());
        // No reference to us: nothing to release.
        assert!(release_patch(&object(&[owner("x", true)], false), "me").is_none());
        assert!(release_patch(&object(&[], false), "me").is_none());
    }
}
