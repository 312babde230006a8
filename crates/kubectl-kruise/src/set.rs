//! `set image|resources|env` on a workload's Pod template (CloneSet, Advanced StatefulSet, Advanced
//! DaemonSet, and the native kinds), as kubectl's own `set` edits a Deployment: one JSON patch
//! guarded by the resourceVersion read.

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use crate::cluster::Ctx;
use crate::history::ANNOTATION_CHANGE_CAUSE;
use crate::target::{Kind, Target};

/// One edit of the containers.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// Container name (`*` for all) → image.
    Image(Vec<(String, String)>),
    /// Containers (empty or `*` for all), limits and requests to set.
    Resources {
        containers: Vec<String>,
        limits: Vec<(String, String)>,
        requests: Vec<(String, String)>,
    },
    /// Containers (empty or `*` for all), variables to set and names to remove.
    Env {
        containers: Vec<String>,
        set: Vec<(String, String)>,
        remove: Vec<String>,
    },
}

/// `a=1,b=2` or repeated `a=1` arguments as pairs.
pub fn pairs(items: &[String], what: &str) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("invalid {what} {s:?}: expected NAME=VALUE"))
        })
        .collect()
}

fn selected(containers: &[String], name: &str) -> bool {
    containers.is_empty() || containers.iter().any(|c| c == "*" || c == name)
}

/// Applies `edit` to the template's `spec.containers`; returns whether anything changed.
pub fn apply(containers: &mut [Value], edit: &Edit) -> anyhow::Result<bool> {
    let before = containers.to_vec();
    let name_of = |c: &Value| {
        c.get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let names: Vec<String> = containers.iter().map(name_of).collect();
    let check = |wanted: &[String]| -> anyhow::Result<()> {
        for w in wanted {
            if w != "*" && !names.contains(w) {
                bail!("unable to find container named {w:?}");
            }
        }
        Ok(())
    };
    match edit {
        Edit::Image(images) => {
            check(&images.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>())?;
            for c in containers.iter_mut() {
                let name = name_of(c);
                if let Some((_, image)) = images.iter().rev().find(|(n, _)| n == "*" || *n == name)
                {
                    c["image"] = json!(image);
                }
            }
        }
        Edit::Resources {
            containers: wanted,
            limits,
            requests,
        } => {
            check(wanted)?;
            if limits.is_empty() && requests.is_empty() {
                bail!("you must specify --limits or --requests");
            }
            for c in containers.iter_mut() {
                if !selected(wanted, &name_of(c)) {
                    continue;
                }
                for (field, values) in [("limits", limits), ("requests", requests)] {
                    for (k, v) in values {
                        let resources = c
                            .as_object_mut()
                            .context("container is not an object")?
                            .entry("resources")
                            .or_insert_with(|| json!({}));
                        let map = resources
                            .as_object_mut()
                            .context("resources is not an object")?
                            .entry(field)
                            .or_insert_with(|| json!({}));
                        if let Some(map) = map.as_object_mut() {
                            map.insert(k.clone(), json!(v));
                        }
                    }
                }
            }
        }
        Edit::Env {
            containers: wanted,
            set,
            remove,
        } => {
            check(wanted)?;
            for c in containers.iter_mut() {
                if !selected(wanted, &name_of(c)) {
                    continue;
                }
                let obj = c.as_object_mut().context("container is not an object")?;
                let env = obj.entry("env").or_insert_with(|| json!([]));
                let list = env.as_array_mut().context("env is not a list")?;
                list.retain(|e| {
                    let n = e.get("name").and_then(Value::as_str).unwrap_or_default();
                    !remove.iter().any(|r| r == n)
                });
                for (k, v) in set {
                    match list
                        .iter_mut()
                        .find(|e| e.get("name").and_then(Value::as_str) == Some(k))
                    {
                        Some(e) => *e = json!({"name": k, "value": v}),
                        None => list.push(json!({"name": k, "value": v})),
                    }
                }
                if list.is_empty() {
                    obj.remove("env");
                }
            }
        }
    }
    Ok(before != containers)
}

/// The patch: a `test` of the containers read (so a concurrent edit is not overwritten; the
/// resourceVersion would also move with every status write), the new containers, and the
/// change-cause when recorded.
pub fn patch(
    object: &Value,
    containers: Vec<Value>,
    cause: Option<&str>,
) -> anyhow::Result<json_patch::Patch> {
    let read = object
        .pointer("/spec/template/spec/containers")
        .cloned()
        .context("the object has no containers")?;
    let mut ops = vec![
        json!({"op": "test", "path": "/spec/template/spec/containers", "value": read}),
        json!({"op": "replace", "path": "/spec/template/spec/containers", "value": containers}),
    ];
    if let Some(cause) = cause {
        if object.pointer("/metadata/annotations").is_some() {
            ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", ANNOTATION_CHANGE_CAUSE.replace('/', "~1")), "value": cause}));
        } else {
            let mut map = Map::new();
            map.insert(ANNOTATION_CHANGE_CAUSE.into(), json!(cause));
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": map}));
        }
    }
    Ok(serde_json::from_value(json!(ops))?)
}

pub async fn run(
    ctx: &Ctx,
    target: &Target,
    edit: &Edit,
    what: &str,
    cause: Option<String>,
) -> anyhow::Result<()> {
    if matches!(target.kind, Kind::SidecarSet | Kind::UnitedDeployment) {
        bail!(
            "set {what} supports cloneset, statefulset.apps.kruise.io, daemonset.apps.kruise.io and the native kinds (got {})",
            target.kind.display()
        );
    }
    let object = ctx.get(target).await?;
    let mut containers: Vec<Value> = object
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .context("the workload's template has no containers")?;
    if !apply(&mut containers, edit)? {
        println!("{} {what} unchanged", target.label());
        return Ok(());
    }
    ctx.json_patch(target, patch(&object, containers, cause.as_deref())?)
        .await?;
    println!("{} {what} updated", target.label());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn containers() -> Vec<Value> {
        vec![
            json!({"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]}),
            json!({"name": "log", "image": "log:1"}),
        ]
    }
    fn s(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// (name, edit, (changed, containers after) or an error fragment).
    type Case = (&'static str, Edit, Result<(bool, Value), &'static str>);

    #[test]
    fn edits() {
        let cases: Vec<Case> = vec![
            (
                "image of one",
                Edit::Image(s(&[("app", "nginx:2")])),
                Ok((
                    true,
                    json!([
                {"name": "app", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]},
                {"name": "log", "image": "log:1"}]),
                )),
            ),
            (
                "image unchanged",
                Edit::Image(s(&[("app", "nginx:1")])),
                Ok((false, Value::Null)),
            ),
            (
                "image of all",
                Edit::Image(s(&[("*", "busybox")])),
                Ok((
                    true,
                    json!([
                {"name": "app", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                {"name": "log", "image": "busybox"}]),
                )),
            ),
            (
                "unknown container",
                Edit::Image(s(&[("nope", "x")])),
                Err("unable to find container named \"nope\""),
            ),
            (
                "resources of one",
                Edit::Resources {
                    containers: vec!["log".into()],
                    limits: s(&[("cpu", "200m")]),
                    requests: s(&[("memory", "64Mi")]),
                },
                Ok((
                    true,
                    json!([
                {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "log", "image": "log:1", "resources": {"limits": {"cpu": "200m"}, "requests": {"memory": "64Mi"}}}]),
                )),
            ),
            (
                "resources without values",
                Edit::Resources {
                    containers: vec![],
                    limits: vec![],
                    requests: vec![],
                },
                Err("--limits or --requests"),
            ),
            (
                "env set, replace and remove",
                Edit::Env {
                    containers: vec!["app".into()],
                    set: s(&[("A", "2"), ("B", "3")]),
                    remove: vec![],
                },
                Ok((
                    true,
                    json!([
                {"name": "app", "image": "nginx:1", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]},
                {"name": "log", "image": "log:1"}]),
                )),
            ),
            (
                "env remove last",
                Edit::Env {
                    containers: vec![],
                    set: vec![],
                    remove: vec!["A".into()],
                },
                Ok((
                    true,
                    json!([{"name": "app", "image": "nginx:1"}, {"name": "log", "image": "log:1"}]),
                )),
            ),
        ];
        for (name, edit, want) in cases {
            let mut c = containers();
            match (apply(&mut c, &edit), want) {
                (Ok(changed), Ok((want_changed, want))) => {
                    assert_eq!(changed, want_changed, "{name}");
                    if changed {
                        assert_eq!(Value::Array(c), want, "{name}");
                    }
                }
                (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{name}: {e}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn pairs_parse() {
        assert_eq!(
            pairs(&["cpu=1,memory=1Gi".into(), "x=".into()], "limit").expect("pairs"),
            s(&[("cpu", "1"), ("memory", "1Gi"), ("x", "")])
        );
        assert!(pairs(&["=1".into()], "limit").is_err());
        assert!(pairs(&["cpu".into()], "limit").is_err());
    }

    #[test]
    fn patch_guards_the_containers_read_and_records_the_cause() {
        let object = json!({"spec": {"template": {"spec": {"containers": [{"name": "b"}]}}}});
        let p = patch(&object, vec![json!({"name": "a"})], Some("set image")).expect("patch");
        assert_eq!(
            serde_json::to_value(p).expect("json"),
            json!([
                {"op": "test", "path": "/spec/template/spec/containers", "value": [{"name": "b"}]},
                {"op": "replace", "path": "/spec/template/spec/containers", "value": [{"name": "a"}]},
                {"op": "add", "path": "/metadata/annotations", "value": {"kubernetes.io/change-cause": "set image"}}
            ])
        );
    }
}
