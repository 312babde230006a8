//! `migrate cloneset --from deployment/NAME`: a CloneSet made from the Deployment, then replicas moved
//! over `max-surge` at a time — the CloneSet grows and its new Pods become available before the
//! Deployment shrinks — so availability never drops below the Deployment's `replicas −
//! maxUnavailable` (it stays at `replicas`). The Deployment is left at 0 replicas, not deleted.

use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::intstr::{IntOrPercent, Round};
use kube::api::{Api, Patch, PostParams};
use serde_json::{Value, json};

use crate::cluster::{Ctx, params, wait};
use crate::output::{Output, print_value};
use crate::target::{Kind, Target};

/// The Deployment's (maxSurge, maxUnavailable) as Pod counts: 25% each by default, surge rounded
/// up, unavailability down, and 1 unavailable when both come to 0 (as Kubernetes resolves them).
pub fn deployment_limits(d: &Deployment) -> anyhow::Result<(i32, i32)> {
    let spec = d.spec.as_ref().context("the Deployment has no spec")?;
    let replicas = spec.replicas.unwrap_or(1);
    let rolling = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let quarter = IntOrString::String("25%".into());
    let value = |v: Option<&IntOrString>, round| -> anyhow::Result<i32> {
        Ok(IntOrPercent::parse(v.unwrap_or(&quarter))
            .map_err(anyhow::Error::msg)?
            .scaled(replicas, round))
    };
    let recreate = spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
    if recreate {
        return Ok((0, replicas));
    }
    let surge = value(rolling.and_then(|r| r.max_surge.as_ref()), Round::Up)?;
    let mut unavailable = value(
        rolling.and_then(|r| r.max_unavailable.as_ref()),
        Round::Down,
    )?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

/// The (CloneSet replicas, Deployment replicas) after each step of moving `total` replicas `step`
/// at a time: the CloneSet first, then the Deployment.
pub fn steps(total: i32, step: i32) -> Vec<(i32, i32)> {
    let step = step.max(1);
    let mut out = Vec::new();
    let mut moved = 0;
    while moved < total {
        moved = (moved + step).min(total);
        out.push((moved, total - moved));
    }
    out
}

/// The CloneSet made from the Deployment, starting at `replicas`.
pub fn cloneset_from(d: &Deployment, name: &str, replicas: i32) -> anyhow::Result<Value> {
    let spec = d.spec.as_ref().context("the Deployment has no spec")?;
    let rolling = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let mut rolling_update = json!({"podUpdatePolicy": "InPlaceIfPossible"});
    if let Some(v) = rolling.and_then(|r| r.max_unavailable.as_ref()) {
        rolling_update["maxUnavailable"] = serde_json::to_value(v)?;
    }
    if let Some(v) = rolling.and_then(|r| r.max_surge.as_ref()) {
        rolling_update["maxSurge"] = serde_json::to_value(v)?;
    }
    let mut template = serde_json::to_value(&spec.template)?;
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove("pod-template-hash");
    }
    let mut cs = json!({
        "apiVersion": kruise_api::kinds::V1BETA1,
        "kind": "CloneSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": serde_json::to_value(&spec.selector)?,
            "template": template,
            "updateStrategy": {"rollingUpdate": rolling_update},
        }
    });
    if let Some(ns) = &d.metadata.namespace {
        cs["metadata"]["namespace"] = json!(ns);
    }
    if let Some(labels) = &d.metadata.labels {
        cs["metadata"]["labels"] = serde_json::to_value(labels)?;
    }
    if let Some(v) = spec.min_ready_seconds {
        cs["spec"]["minReadySeconds"] = json!(v);
    }
    if let Some(v) = spec.revision_history_limit {
        cs["spec"]["revisionHistoryLimit"] = json!(v);
    }
    if let Some(v) = spec.progress_deadline_seconds {
        cs["spec"]["progressDeadlineSeconds"] = json!(v);
    }
    Ok(cs)
}

pub struct Options {
    pub from: String,
    pub dst_name: Option<String>,
    pub max_surge: Option<i32>,
    pub dry_run: bool,
    pub output: Option<Output>,
    pub timeout: Duration,
}

fn int(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

pub async fn run(ctx: &Ctx, kind: &str, opts: Options) -> anyhow::Result<()> {
    if Kind::parse(kind)? != Kind::CloneSet {
        bail!("migrate creates a cloneset (got {kind:?})");
    }
    let source = Target::parse(&opts.from, None)?;
    if source.kind != Kind::Deployment {
        bail!("migrate --from takes deployment/NAME (got {})", opts.from);
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let deployment = deployments
        .get(&source.name)
        .await
        .map_err(|e| crate::cluster::api_error(e, &source))?;
    let name = opts.dst_name.clone().unwrap_or_else(|| source.name.clone());
    let total = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let (surge, unavailable) = deployment_limits(&deployment)?;
    let step = opts.max_surge.unwrap_or(surge).max(1);
    let cloneset = cloneset_from(&deployment, &name, 0)?;
    if opts.dry_run {
        let mut shown = cloneset.clone();
        shown["spec"]["replicas"] = json!(total);
        return print_value(&shown, opts.output.unwrap_or(Output::Yaml));
    }
    let target = Target {
        kind: Kind::CloneSet,
        name: name.clone(),
    };
    let api = ctx.api(Kind::CloneSet);
    let object: kube::api::DynamicObject = serde_json::from_value(cloneset)?;
    api.create(
        &PostParams {
            field_manager: Some(crate::cluster::FIELD_MANAGER.into()),
            ..Default::default()
        },
        &object,
    )
    .await
    .map_err(|e| crate::cluster::api_error(e, &target))
    .with_context(|| format!("creating cloneset {name}"))?;
    println!(
        "cloneset/{name} created; moving {total} replicas from deployment/{} {step} at a time (availability kept at or above {})",
        source.name,
        total - unavailable
    );
    for (cs_replicas, deploy_replicas) in steps(total, step) {
        ctx.merge_patch(&target, &json!({"spec": {"replicas": cs_replicas}}))
            .await?;
        wait(
            &format!("cloneset/{name} to have {cs_replicas} available replicas"),
            opts.timeout,
            async || {
                let cs = ctx.get(&target).await?;
                Ok(
                    int(&cs, "/status/observedGeneration") >= int(&cs, "/metadata/generation")
                        && int(&cs, "/status/availableReplicas") >= i64::from(cs_replicas),
                )
            },
        )
        .await?;
        deployments
            .patch(
                &source.name,
                &params(),
                &Patch::Merge(json!({"spec": {"replicas": deploy_replicas}})),
            )
            .await
            .map_err(|e| crate::cluster::api_error(e, &source))?;
        wait(
            &format!("deployment/{} to scale to {deploy_replicas}", source.name),
            opts.timeout,
            async || {
                let d = deployments
                    .get(&source.name)
                    .await
                    .map_err(|e| crate::cluster::api_error(e, &source))?;
                let status = d.status.unwrap_or_default();
                Ok(status.observed_generation >= d.metadata.generation
                    && status.replicas.unwrap_or(0) <= deploy_replicas)
            },
        )
        .await?;
        println!(
            "cloneset/{name}: {cs_replicas} available; deployment/{}: {deploy_replicas}",
            source.name
        );
    }
    println!(
        "migrated: cloneset/{name} runs {total} replicas; deployment/{} is at 0 (delete it when satisfied)",
        source.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i32, strategy: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "strategy": strategy, "minReadySeconds": 3,
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "x"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]}}}
        }))
        .expect("deployment")
    }

    #[test]
    fn limits_table() {
        let cases = [
            (6, json!({}), (2, 1)),
            (
                6,
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
                (1, 0),
            ),
            (
                6,
                json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}),
                (0, 1),
            ),
            (
                10,
                json!({"rollingUpdate": {"maxSurge": "10%", "maxUnavailable": "15%"}}),
                (1, 1),
            ),
            (4, json!({"type": "Recreate"}), (0, 4)),
        ];
        for (replicas, strategy, want) in cases {
            let d = deployment(replicas, strategy.clone());
            assert_eq!(deployment_limits(&d).expect("limits"), want, "{strategy}");
        }
    }

    #[test]
    fn steps_table() {
        assert_eq!(steps(6, 2), vec![(2, 4), (4, 2), (6, 0)]);
        assert_eq!(steps(5, 2), vec![(2, 3), (4, 1), (5, 0)]);
        assert_eq!(steps(3, 0), vec![(1, 2), (2, 1), (3, 0)]);
        assert_eq!(steps(0, 1), Vec::<(i32, i32)>::new());
    }

    #[test]
    fn cloneset_keeps_the_template_and_strategy() {
        let d = deployment(
            6,
            json!({"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "10%"}}),
        );
        let cs = cloneset_from(&d, "web-cs", 0).expect("cloneset");
        assert_eq!(
            cs,
            json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
                "metadata": {"name": "web-cs", "namespace": "ns", "labels": {"app": "web"}},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                    "minReadySeconds": 3,
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": "nginx"}]}},
                    "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
                        "maxUnavailable": "10%", "maxSurge": 1}}}
            })
        );
    }
}
