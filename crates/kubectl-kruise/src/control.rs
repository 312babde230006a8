//! `rollout pause`, `rollout resume` and `rollout restart`.

use anyhow::{Context, bail};
use kruise_core::inplace::ANNOTATION_RESTARTED_AT;
use serde_json::{Map, Value, json};

use crate::cluster::Ctx;
use crate::target::{Kind, Target};

/// A merge patch that sets the value at `pointer` (creating the objects on the way).
pub fn patch_at(pointer: &str, value: Value) -> Value {
    pointer
        .split('/')
        .filter(|s| !s.is_empty())
        .rev()
        .fold(value, |inner, key| {
            let mut map = Map::new();
            map.insert(key.replace("~1", "/").replace("~0", "~"), inner);
            Value::Object(map)
        })
}

/// The patch of `pause` (`paused` true) or `resume`.
pub fn paused_patch(kind: Kind, paused: bool) -> anyhow::Result<Value> {
    let pointer = kind.paused_pointer().with_context(|| {
        format!(
            "{} cannot be paused{}",
            kind.display(),
            match kind {
                Kind::UnitedDeployment =>
                    " (pause its subset workloads, or hold it with manualUpdate partitions)",
                _ => " (use a partition)",
            }
        )
    })?;
    Ok(patch_at(pointer, json!(paused)))
}

/// The subset template key a UnitedDeployment uses (`cloneSetTemplate`, …).
fn united_template_key(object: &Value) -> anyhow::Result<&'static str> {
    [
        "cloneSetTemplate",
        "advancedStatefulSetTemplate",
        "statefulSetTemplate",
        "deploymentTemplate",
    ]
    .into_iter()
    .find(|k| object.pointer(&format!("/spec/template/{k}")).is_some())
    .context("the UnitedDeployment has no subset template")
}

/// The patch of `restart`: a new `kubectl.kubernetes.io/restartedAt` on the Pod template, which
/// kruise-rs's in-place engine turns into an in-place restart of every container, and a
/// recreating update turns into new Pods.
pub fn restart_patch(kind: Kind, object: &Value, now: &str) -> anyhow::Result<Value> {
    let annotation = patch_at(
        &format!(
            "/metadata/annotations/{}",
            ANNOTATION_RESTARTED_AT.replace('/', "~1")
        ),
        json!(now),
    );
    let pointer = match kind {
        Kind::SidecarSet => bail!(
            "sidecarset cannot be restarted: its sidecars restart when they are upgraded (rollout undo, or a new image)"
        ),
        Kind::UnitedDeployment => {
            format!(
                "/spec/template/{}/spec/template",
                united_template_key(object)?
            )
        }
        _ => kind
            .pod_template_pointer()
            .context("no Pod template")?
            .to_owned(),
    };
    Ok(patch_at(&pointer, annotation))
}

/// How the workload's controller applies a template change: "in place" when its policy updates
/// Pods in place where possible.
pub fn update_mode(kind: Kind, object: &Value) -> &'static str {
    let policy = |ptr: &str| {
        object
            .pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let in_place = match kind {
        Kind::CloneSet => policy("/spec/updateStrategy/rollingUpdate/podUpdatePolicy"),
        Kind::AdvancedStatefulSet => policy("/spec/updateStrategy/rollingUpdate/podUpdatePolicy"),
        Kind::AdvancedDaemonSet => policy("/spec/updateStrategy/rollingUpdate/rollingUpdateType"),
        Kind::UnitedDeployment => [
            "/spec/template/cloneSetTemplate/spec/updateStrategy/rollingUpdate/podUpdatePolicy",
            "/spec/template/cloneSetTemplate/spec/updateStrategy/type",
            "/spec/template/advancedStatefulSetTemplate/spec/updateStrategy/rollingUpdate/podUpdatePolicy",
        ]
        .into_iter()
        .map(policy)
        .find(|p| !p.is_empty())
        .unwrap_or_default(),
        _ => "",
    };
    if matches!(in_place, "InPlaceIfPossible" | "InPlaceOnly") {
        "in place"
    } else {
        "by recreating Pods"
    }
}

pub async fn pause(ctx: &Ctx, target: &Target, paused: bool) -> anyhow::Result<()> {
    let patch = paused_patch(target.kind, paused)?;
    let object = ctx.get(target).await?;
    let pointer = target.kind.paused_pointer().unwrap_or_default();
    let now = object
        .pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let verb = if paused { "paused" } else { "resumed" };
    if now == paused {
        println!("{} already {verb}", target.label());
        return Ok(());
    }
    ctx.merge_patch(target, &patch).await?;
    println!("{} {verb}", target.label());
    Ok(())
}

pub async fn restart(ctx: &Ctx, target: &Target) -> anyhow::Result<()> {
    let object = ctx.get(target).await?;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = restart_patch(target.kind, &object, &now)?;
    ctx.merge_patch(target, &patch).await?;
    println!(
        "{} restarted ({})",
        target.label(),
        update_mode(target.kind, &object)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_patches() {
        let cases = [
            (
                Kind::CloneSet,
                true,
                Ok(json!({"spec": {"updateStrategy": {"rollingUpdate": {"paused": true}}}})),
            ),
            (
                Kind::AdvancedStatefulSet,
                false,
                Ok(json!({"spec": {"updateStrategy": {"rollingUpdate": {"paused": false}}}})),
            ),
            (
                Kind::AdvancedDaemonSet,
                true,
                Ok(json!({"spec": {"updateStrategy": {"rollingUpdate": {"paused": true}}}})),
            ),
            (
                Kind::SidecarSet,
                true,
                Ok(json!({"spec": {"updateStrategy": {"paused": true}}})),
            ),
            (
                Kind::Deployment,
                true,
                Ok(json!({"spec": {"paused": true}})),
            ),
            (Kind::StatefulSet, true, Err("statefulset cannot be paused")),
            (
                Kind::UnitedDeployment,
                true,
                Err("uniteddeployment cannot be paused"),
            ),
        ];
        for (kind, paused, want) in cases {
            match (paused_patch(kind, paused), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{kind:?}"),
                (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{e}"),
                (got, want) => panic!("{kind:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn restart_patches() {
        let annotated =
            json!({"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "T"}}});
        let ud = json!({"spec": {"template": {"advancedStatefulSetTemplate": {"spec": {}}}}});
        let cases = [
            (
                Kind::CloneSet,
                json!({}),
                Ok(json!({"spec": {"template": annotated.clone()}})),
            ),
            (
                Kind::Deployment,
                json!({}),
                Ok(json!({"spec": {"template": annotated.clone()}})),
            ),
            (
                Kind::UnitedDeployment,
                ud,
                Ok(
                    json!({"spec": {"template": {"advancedStatefulSetTemplate": {"spec": {"template": annotated.clone()}}}}}),
                ),
            ),
            (
                Kind::UnitedDeployment,
                json!({"spec": {}}),
                Err("no subset template"),
            ),
            (
                Kind::SidecarSet,
                json!({}),
                Err("sidecarset cannot be restarted"),
            ),
        ];
        for (kind, object, want) in cases {
            match (restart_patch(kind, &object, "T"), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{kind:?}"),
                (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{e}"),
                (got, want) => panic!("{kind:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn update_modes() {
        let cases = [
            (
                Kind::CloneSet,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}}}}),
                "in place",
            ),
            (
                Kind::CloneSet,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "ReCreate"}}}}),
                "by recreating Pods",
            ),
            (
                Kind::AdvancedStatefulSet,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}}}),
                "in place",
            ),
            (
                Kind::AdvancedDaemonSet,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"rollingUpdateType": "Standard"}}}}),
                "by recreating Pods",
            ),
            (
                Kind::AdvancedDaemonSet,
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible"}}}}),
                "in place",
            ),
            (Kind::Deployment, json!({}), "by recreating Pods"),
        ];
        for (kind, object, want) in cases {
            assert_eq!(update_mode(kind, &object), want, "{kind:?}");
        }
    }
}
