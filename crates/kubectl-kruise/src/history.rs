//! `rollout history` and `rollout undo`: the workload's revisions (ControllerRevisions it controls;
//! ReplicaSets for a Deployment), the choice of the revision to go back to, and the patch that
//! restores it.

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use kube::api::{Api, ListParams, Patch};
use serde_json::{Value, json};

use crate::cluster::{Ctx, api_error, params};
use crate::output::{Output, print_value};
use crate::target::{Kind, Target};

pub const ANNOTATION_CHANGE_CAUSE: &str = "kubernetes.io/change-cause";
const ANNOTATION_DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";
const LABEL_SIDECARSET_NAME: &str = "kruise.io/sidecarset-name";

/// One entry of a workload's history.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision {
    pub number: i64,
    pub name: String,
    pub change_cause: Option<String>,
    /// What the revision restores: for template kinds the Pod (or subset) template, for a SidecarSet
    /// the recorded spec fields.
    pub restores: Value,
    /// The object as stored, for `-o json|yaml`.
    pub raw: Value,
}

fn without_patch_directive(mut v: Value) -> Value {
    if let Value::Object(map) = &mut v {
        map.remove("$patch");
    }
    v
}

/// A ControllerRevision as a [`Revision`] of `kind`.
pub fn from_controller_revision(kind: Kind, rev: &ControllerRevision) -> anyhow::Result<Revision> {
    let name = rev.metadata.name.clone().unwrap_or_default();
    let data = rev
        .data
        .as_ref()
        .map(|d| d.0.clone())
        .with_context(|| format!("revision {name} has no data"))?;
    let restores = if kind == Kind::SidecarSet {
        data.pointer("/spec").cloned()
    } else {
        data.pointer("/spec/template").cloned()
    }
    .map(without_patch_directive)
    .with_context(|| format!("revision {name} records no template"))?;
    Ok(Revision {
        number: rev.revision,
        change_cause: rev
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_CHANGE_CAUSE).cloned()),
        name,
        restores,
        raw: serde_json::to_value(rev)?,
    })
}

/// A Deployment's ReplicaSet as a [`Revision`] (its template without `pod-template-hash`).
pub fn from_replica_set(rs: &ReplicaSet) -> Option<Revision> {
    let annotations = rs.metadata.annotations.as_ref()?;
    let number = annotations
        .get(ANNOTATION_DEPLOYMENT_REVISION)?
        .parse()
        .ok()?;
    let mut template = serde_json::to_value(rs.spec.as_ref()?.template.as_ref()?).ok()?;
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove("pod-template-hash");
    }
    Some(Revision {
        number,
        name: rs.metadata.name.clone().unwrap_or_default(),
        change_cause: annotations.get(ANNOTATION_CHANGE_CAUSE).cloned(),
        restores: template,
        raw: serde_json::to_value(rs).ok()?,
    })
}

/// The revision `undo` goes to: `to_revision` when given (non-zero), else the newest one older than
/// the newest (kubectl's "previous revision").
pub fn undo_target(revisions: &[Revision], to_revision: i64) -> anyhow::Result<&Revision> {
    if revisions.is_empty() {
        bail!("no rollout history found");
    }
    if to_revision > 0 {
        return revisions
            .iter()
            .find(|r| r.number == to_revision)
            .with_context(|| {
                format!("unable to find specified revision {to_revision} in history")
            });
    }
    let mut numbers: Vec<i64> = revisions.iter().map(|r| r.number).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let previous = numbers
        .iter()
        .rev()
        .nth(1)
        .context("no previous revision to roll back to")?;
    revisions
        .iter()
        .find(|r| r.number == *previous)
        .context("no previous revision to roll back to")
}

/// The `REVISION  CHANGE-CAUSE` table.
pub fn render_table(revisions: &[Revision]) -> String {
    let mut out = String::from("REVISION  CHANGE-CAUSE\n");
    for r in revisions {
        out.push_str(&format!(
            "{:<9} {}\n",
            r.number,
            r.change_cause.as_deref().unwrap_or("<none>")
        ));
    }
    out
}

/// How a revision is put back.
#[derive(Debug)]
pub enum RestorePatch {
    /// The template replaced whole, so keys added since go.
    Json(json_patch::Patch),
    /// A SidecarSet's recorded fields (a `null` clears one; arrays are replaced whole).
    Merge(Value),
}

/// The patch that puts `revision` back.
pub fn restore_patch(kind: Kind, revision: &Revision) -> Result<RestorePatch, serde_json::Error> {
    if kind == Kind::SidecarSet {
        return Ok(RestorePatch::Merge(json!({"spec": revision.restores})));
    }
    serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/template", "value": revision.restores}
    ]))
    .map(RestorePatch::Json)
}

/// The workload's revisions, oldest first.
pub async fn list(ctx: &Ctx, target: &Target, object: &Value) -> anyhow::Result<Vec<Revision>> {
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut revisions = match target.kind {
        Kind::Deployment => {
            let api: Api<ReplicaSet> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
            let selector = crate::cluster::selector_string(object)?;
            api.list(&ListParams::default().labels(&selector))
                .await
                .context("listing ReplicaSets")?
                .items
                .iter()
                .filter(|rs| owned_by(&rs.metadata, uid))
                .filter_map(from_replica_set)
                .collect::<Vec<_>>()
        }
        kind => {
            let (api, params): (Api<ControllerRevision>, ListParams) = if kind == Kind::SidecarSet {
                (
                    Api::all(ctx.client.clone()),
                    ListParams::default()
                        .labels(&format!("{LABEL_SIDECARSET_NAME}={}", target.name)),
                )
            } else {
                (
                    Api::namespaced(ctx.client.clone(), &ctx.namespace),
                    ListParams::default(),
                )
            };
            api.list(&params)
                .await
                .context("listing ControllerRevisions")?
                .items
                .iter()
                .filter(|rev| owned_by(&rev.metadata, uid))
                .map(|rev| from_controller_revision(kind, rev))
                .collect::<anyhow::Result<Vec<_>>>()?
        }
    };
    revisions.sort_by_key(|r| r.number);
    Ok(revisions)
}

fn owned_by(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}

fn resource_label(target: &Target) -> String {
    let ar = target.kind.api_resource();
    if ar.group == "apps" {
        format!("{}.apps/{}", ar.kind.to_ascii_lowercase(), target.name)
    } else {
        format!(
            "{}.{}/{}",
            ar.kind.to_ascii_lowercase(),
            ar.group,
            target.name
        )
    }
}

pub async fn history(
    ctx: &Ctx,
    target: &Target,
    revision: Option<i64>,
    output: Option<Output>,
) -> anyhow::Result<()> {
    let object = ctx.get(target).await?;
    let revisions = list(ctx, target, &object).await?;
    match (revision, output) {
        (Some(n), output) => {
            let rev = revisions
                .iter()
                .find(|r| r.number == n)
                .with_context(|| format!("unable to find the specified revision {n}"))?;
            match output {
                Some(o) => print_value(&rev.raw, o)?,
                None => {
                    println!("{} with revision #{n}", resource_label(target));
                    if let Some(cause) = &rev.change_cause {
                        println!("Change-Cause: {cause}");
                    }
                    println!(
                        "{}:",
                        if target.kind == Kind::SidecarSet {
                            "Sidecars"
                        } else {
                            "Template"
                        }
                    );
                    print!("{}", serde_yaml::to_string(&rev.restores)?);
                }
            }
        }
        (None, Some(o)) => {
            let raws: Vec<Value> = revisions.iter().map(|r| r.raw.clone()).collect();
            print_value(
                &json!({"apiVersion": "v1", "kind": "List", "items": raws}),
                o,
            )?;
        }
        (None, None) => {
            println!("{}", resource_label(target));
            print!("{}", render_table(&revisions));
        }
    }
    Ok(())
}

pub async fn undo(
    ctx: &Ctx,
    target: &Target,
    to_revision: i64,
    dry_run: bool,
) -> anyhow::Result<()> {
    // Read and written in the version the revisions hold the template in.
    let api = ctx.revision_api(target.kind);
    let object = api
        .get(&target.name)
        .await
        .map_err(|e| api_error(e, target))?;
    let object = serde_json::to_value(object).context("encoding the object")?;
    let revisions = list(ctx, target, &object).await?;
    let rev = undo_target(&revisions, to_revision)?;
    let current = if target.kind == Kind::SidecarSet {
        None
    } else {
        object.pointer("/spec/template")
    };
    if current.is_some_and(|t| same_template(t, &rev.restores)) {
        println!(
            "{} skipped rollback (current template already matches revision {})",
            target.label(),
            rev.number
        );
        return Ok(());
    }
    if dry_run {
        println!(
            "{} rolled back (dry run) to revision {}",
            target.label(),
            rev.number
        );
        return Ok(());
    }
    let written = match restore_patch(target.kind, rev)? {
        RestorePatch::Json(patch) => {
            api.patch(&target.name, &params(), &Patch::<()>::Json(patch))
                .await
        }
        RestorePatch::Merge(patch) => {
            api.patch(&target.name, &params(), &Patch::Merge(&patch))
                .await
        }
    };
    written.map_err(|e| api_error(e, target))?;
    println!("{} rolled back to revision {}", target.label(), rev.number);
    Ok(())
}

/// Templates compared without nulls and empty objects (what the API server drops or defaults).
fn same_template(a: &Value, b: &Value) -> bool {
    fn prune(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), prune(v)))
                    .filter(|(_, v)| !v.is_null() && !v.as_object().is_some_and(|o| o.is_empty()))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(prune).collect()),
            other => other.clone(),
        }
    }
    prune(a) == prune(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn rev(n: i64, image: &str, cause: Option<&str>) -> Revision {
        let cr = ControllerRevision {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!("web-{n}")),
                annotations: cause
                    .map(|c| [(ANNOTATION_CHANGE_CAUSE.to_string(), c.to_string())].into()),
                ..Default::default()
            },
            data: Some(RawExtension(
                json!({"spec": {"template": {"$patch": "replace",
                "spec": {"containers": [{"name": "app", "image": image}]}}}}),
            )),
            revision: n,
        };
        from_controller_revision(Kind::CloneSet, &cr).expect("revision")
    }

    #[test]
    fn revisions_drop_the_patch_directive() {
        let r = rev(1, "nginx:1", None);
        assert_eq!(
            r.restores,
            json!({"spec": {"containers": [{"name": "app", "image": "nginx:1"}]}})
        );
    }

    #[test]
    fn undo_target_table() {
        let history = vec![rev(1, "a", None), rev(2, "b", None), rev(4, "c", None)];
        let cases: &[(&[Revision], i64, Result<i64, &str>)] = &[
            (&history, 0, Ok(2)),
            (&history, 1, Ok(1)),
            (&history, 4, Ok(4)),
            (&history, 3, Err("unable to find specified revision 3")),
            (&history[..1], 0, Err("no previous revision")),
            (&[], 0, Err("no rollout history")),
        ];
        for (revisions, to, want) in cases {
            let got = undo_target(revisions, *to).map(|r| r.number);
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, *w, "to {to}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, want) => panic!("to {to}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn table_shows_change_causes() {
        let table = render_table(&[rev(1, "a", None), rev(2, "b", Some("set image app=b"))]);
        assert_eq!(
            table,
            "REVISION  CHANGE-CAUSE\n1         <none>\n2         set image app=b\n"
        );
    }

    #[test]
    fn restore_patches() {
        let r = rev(1, "a", None);
        let Ok(RestorePatch::Json(patch)) = restore_patch(Kind::CloneSet, &r) else {
            panic!("a template kind is restored by a JSON patch");
        };
        assert_eq!(
            serde_json::to_value(patch).expect("json"),
            json!([{"op": "replace", "path": "/spec/template", "value": r.restores}])
        );
        let ss = Revision {
            restores: json!({"containers": [{"name": "log"}], "volumes": null}),
            ..r
        };
        let Ok(RestorePatch::Merge(patch)) = restore_patch(Kind::SidecarSet, &ss) else {
            panic!("a SidecarSet is restored by a merge patch");
        };
        assert_eq!(
            patch,
            json!({"spec": {"containers": [{"name": "log"}], "volumes": null}})
        );
    }

    #[test]
    fn templates_compare_without_empty_fields() {
        assert!(same_template(
            &json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": [{"name": "a", "resources": {}}]}}),
            &json!({"spec": {"containers": [{"name": "a"}]}})
        ));
        assert!(!same_template(
            &json!({"spec": {"x": 1}}),
            &json!({"spec": {"x": 2}})
        ));
    }
}
