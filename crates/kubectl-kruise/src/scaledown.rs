//! `scaledown cloneset/NAME --pods a,b`: replicas − N and exactly those Pods deleted, through the
//! CloneSet's `scaleStrategy.podsToDelete` (the controller deletes them and does not replace them).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::cluster::{Ctx, controlled_by};
use crate::target::{Kind, Target};

/// Checks the named Pods against the CloneSet and builds the patch: a `test` of the replicas and
/// podsToDelete read (so a concurrent scale is not overwritten), then the new values.
pub fn plan(
    cloneset: &Value,
    names: &[String],
    pods: &[Option<Pod>],
) -> anyhow::Result<json_patch::Patch> {
    let uid = cloneset
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .context("the CloneSet has no uid")?;
    let cs_name = cloneset
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let replicas = cloneset
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let existing: Vec<String> = cloneset
        .pointer("/spec/scaleStrategy/podsToDelete")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if names.is_empty() {
        bail!("--pods names no Pod");
    }
    let mut unique: Vec<&String> = Vec::new();
    for (name, pod) in names.iter().zip(pods) {
        if unique.contains(&name) {
            continue;
        }
        match pod {
            None => bail!("pod {name:?} not found"),
            Some(pod) if !controlled_by(pod, uid) => {
                bail!("pod {name:?} is not owned by cloneset {cs_name:?}; refusing to scale down")
            }
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                bail!("pod {name:?} is already being deleted")
            }
            Some(_) if existing.contains(name) => {
                bail!("pod {name:?} is already in spec.scaleStrategy.podsToDelete")
            }
            Some(_) => unique.push(name),
        }
    }
    let n = unique.len() as i64;
    if n > replicas {
        bail!("cannot delete {n} Pods from a CloneSet of {replicas} replicas");
    }
    let mut to_delete = existing.clone();
    to_delete.extend(unique.into_iter().cloned());
    let strategy_exists = cloneset.pointer("/spec/scaleStrategy").is_some();
    let mut ops = vec![json!({"op": "test", "path": "/spec/replicas", "value": replicas})];
    if strategy_exists {
        ops.push(
            json!({"op": "add", "path": "/spec/scaleStrategy/podsToDelete", "value": to_delete}),
        );
    } else {
        ops.push(json!({"op": "add", "path": "/spec/scaleStrategy", "value": {"podsToDelete": to_delete}}));
    }
    ops.push(json!({"op": "replace", "path": "/spec/replicas", "value": replicas - n}));
    Ok(serde_json::from_value(json!(ops))?)
}

pub async fn run(
    ctx: &Ctx,
    target: &Target,
    names: &[String],
    dry_run: bool,
) -> anyhow::Result<()> {
    if target.kind != Kind::CloneSet {
        bail!(
            "scaledown supports cloneset only (got {})",
            target.kind.display()
        );
    }
    let cloneset = ctx.get(target).await?;
    let api = ctx.pods();
    let mut pods = Vec::new();
    for name in names {
        pods.push(
            api.get_opt(name)
                .await
                .with_context(|| format!("reading pod {name}"))?,
        );
    }
    let patch = plan(&cloneset, names, &pods)?;
    if dry_run {
        println!(
            "{} scaled down (dry run): {}",
            target.label(),
            serde_json::to_string(&patch)?
        );
        return Ok(());
    }
    ctx.json_patch(target, patch).await?;
    println!(
        "{} scaled down, deleting {}",
        target.label(),
        names.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    fn pod(name: &str, owner: &str) -> Option<Pod> {
        Some(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// (name, CloneSet, --pods, the Pods read, the patch or an error fragment).
    type Case<'a> = (
        &'a str,
        &'a Value,
        Vec<String>,
        Vec<Option<Pod>>,
        Result<Value, &'a str>,
    );

    #[test]
    fn plan_table() {
        let cs = json!({"metadata": {"name": "web", "uid": "u1"}, "spec": {"replicas": 3}});
        let cs_with = json!({"metadata": {"name": "web", "uid": "u1"},
            "spec": {"replicas": 3, "scaleStrategy": {"podsToDelete": ["web-old"]}}});
        let mut deleting = pod("web-b", "u1");
        if let Some(p) = deleting.as_mut() {
            p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases: Vec<Case> = vec![
            (
                "one Pod, no scaleStrategy yet",
                &cs,
                names(&["web-a"]),
                vec![pod("web-a", "u1")],
                Ok(json!([
                    {"op": "test", "path": "/spec/replicas", "value": 3},
                    {"op": "add", "path": "/spec/scaleStrategy", "value": {"podsToDelete": ["web-a"]}},
                    {"op": "replace", "path": "/spec/replicas", "value": 2}])),
            ),
            (
                "two Pods, appended, duplicates once",
                &cs_with,
                names(&["web-a", "web-b", "web-a"]),
                vec![pod("web-a", "u1"), pod("web-b", "u1"), pod("web-a", "u1")],
                Ok(json!([
                    {"op": "test", "path": "/spec/replicas", "value": 3},
                    {"op": "add", "path": "/spec/scaleStrategy/podsToDelete", "value": ["web-old", "web-a", "web-b"]},
                    {"op": "replace", "path": "/spec/replicas", "value": 1}])),
            ),
            (
                "foreign Pod",
                &cs,
                names(&["x"]),
                vec![pod("x", "other")],
                Err("is not owned by cloneset \"web\""),
            ),
            (
                "missing Pod",
                &cs,
                names(&["x"]),
                vec![None],
                Err("not found"),
            ),
            (
                "terminating Pod",
                &cs,
                names(&["web-b"]),
                vec![deleting],
                Err("already being deleted"),
            ),
            (
                "already listed",
                &cs_with,
                names(&["web-old"]),
                vec![pod("web-old", "u1")],
                Err("already in"),
            ),
            ("no names", &cs, vec![], vec![], Err("names no Pod")),
        ];
        for (name, cs, names, pods, want) in cases {
            let got = plan(cs, &names, &pods).map(|p| serde_json::to_value(p).expect("json"));
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }
}
