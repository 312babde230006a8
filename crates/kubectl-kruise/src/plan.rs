//! `rollout plan`: before anything is applied, which Pods of a CloneSet the next rollout touches, in
//! which order and batches, in place or recreated and why, and which stay at their revision — from
//! kruise-rs's own pure planner (kruise-core), the code the controller runs.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::{
    CloneSet, POD_UPDATE_IN_PLACE_ONLY, POD_UPDATE_RECREATE, UPDATE_ON_DELETE,
};
use kruise_api::daemonset::v1beta1::DaemonSet as AdvancedDaemonSet;
use kruise_api::statefulset::v1beta1::StatefulSet as AdvancedStatefulSet;
use kruise_core::inplace::{self, InPlacePlan, PlanOptions};
use kruise_core::pods;
use kruise_core::revision::{
    Parent, build_revision, new_revision, revision_data, template_from_revision,
};
use kruise_core::rollout::cloneset::{
    DiffOptions, FactsContext, Limits, Purpose, RolloutKnobs, calculate_diffs, limit_updates,
    pod_facts, update_candidates,
};
use kruise_core::rollout::daemonset as ads_core;
use kruise_core::rollout::ordering::sort_update_indexes;
use kruise_core::rollout::statefulset as sts_core;
use kube::api::{Api, ListParams};
use serde::Serialize;
use serde_json::Value;

use crate::cluster::{Ctx, controlled_by};
use crate::output::{Output, print_value};
use crate::target::{Kind, Target};

/// How one Pod is updated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    InPlace,
    Recreate,
    /// InPlaceOnly and the change cannot be made in place: the controller refuses the Pod.
    Refused,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStep {
    pub order: usize,
    pub batch: usize,
    pub pod: String,
    pub from_revision: String,
    pub action: Action,
    pub why: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    pub update_revision: String,
    pub pod_update_policy: String,
    pub partition: i64,
    pub max_unavailable: i64,
    pub steps: Vec<PodStep>,
    /// Pods left at their old revision by the partition.
    pub stay: Vec<String>,
    /// Pods already at the update revision.
    pub updated: Vec<String>,
    /// Why nothing moves now (paused, OnDelete), if so.
    pub note: Option<String>,
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// What an in-place update changes, for the WHY column.
fn describe_in_place(plan: &InPlacePlan) -> String {
    let mut parts: Vec<String> = plan
        .images
        .iter()
        .map(|(c, image)| format!("image {c} → {image}"))
        .collect();
    if !plan.resources.is_empty() {
        let names: Vec<&str> = plan.resources.keys().map(String::as_str).collect();
        parts.push(format!("resize {}", names.join(",")));
    }
    if !plan.labels.is_empty() || !plan.annotations.is_empty() {
        parts.push("metadata".into());
    }
    if parts.is_empty() {
        "revision label only".into()
    } else {
        parts.join(", ")
    }
}

/// The plan of rolling `cs`'s Pods (`pods`, all of them) to `cs.spec` (already holding the new
/// template and strategy) at `update_revision`; `revisions` give each Pod's old template.
pub fn plan_cloneset(
    cs: &CloneSet,
    update_revision: &str,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let mut spec = cs.spec.clone();
    let rolling = spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let mut note = None;
    if rolling.paused {
        note = Some("the rollout is paused: nothing is updated until `rollout resume`".to_owned());
        if let Some(r) = spec.update_strategy.rolling_update.as_mut() {
            r.paused = false;
        }
    }
    if spec.update_strategy.type_ == UPDATE_ON_DELETE {
        note = Some("updateStrategy OnDelete: Pods are updated only when deleted".to_owned());
        spec.update_strategy.type_.clear();
    }
    let policy = if rolling.pod_update_policy.is_empty() {
        POD_UPDATE_RECREATE.to_owned()
    } else {
        rolling.pod_update_policy.clone()
    };
    let limits = Limits::resolve(&RolloutKnobs::from_spec(&spec)).map_err(anyhow::Error::msg)?;
    let active: Vec<Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .cloned()
        .collect();
    let ctx = FactsContext {
        update_revision,
        pods_to_delete: &spec.scale_strategy.pods_to_delete,
        min_ready_seconds: spec.min_ready_seconds,
        now,
        purpose: Purpose::Update,
        preparing_update_as_update: false,
    };
    let facts: Vec<_> = active.iter().map(|p| pod_facts(p, &ctx)).collect();
    let diffs = calculate_diffs(
        &limits,
        &facts,
        DiffOptions {
            exclude_preparing_delete: spec.scale_strategy.exclude_preparing_delete,
            allow_rollback: false,
        },
    );
    let updated: Vec<String> = active
        .iter()
        .filter(|p| pods::is_at_revision(p, update_revision))
        .map(name)
        .collect();
    let mut plan = RolloutPlan {
        update_revision: update_revision.to_owned(),
        pod_update_policy: policy.clone(),
        partition: limits.partition,
        max_unavailable: diffs.update_max_unavailable.max(limits.max_unavailable),
        updated,
        note,
        ..RolloutPlan::default()
    };
    let candidates = update_candidates(&active, update_revision, diffs.update_num.max(0));
    let ordered = sort_update_indexes(
        &active,
        candidates,
        rolling.priority_strategy.as_ref(),
        &rolling.scatter_strategy,
    );
    let wanted = usize::try_from(diffs.update_num.max(0)).unwrap_or(0);
    let moving = &ordered[..wanted.min(ordered.len())];
    // Everything else not at the update revision stays where it is (the partition).
    plan.stay = ordered[moving.len()..]
        .iter()
        .copied()
        .chain((0..active.len()).filter(|i| !ordered.contains(i)))
        .filter(|&i| !pods::is_at_revision(&active[i], update_revision))
        .map(|i| name(&active[i]))
        .collect();

    // The first batch is exactly the controller's first pass; later ones are maxUnavailable wide.
    let available: Vec<bool> = facts.iter().map(|f| f.available).collect();
    let at_target: Vec<bool> = active
        .iter()
        .map(|p| pods::is_at_revision(p, update_revision))
        .collect();
    let first = limit_updates(moving, &available, &at_target, &diffs)
        .len()
        .max(1);
    let width = usize::try_from(diffs.update_max_unavailable.max(1)).unwrap_or(1);

    let templates = revision_templates(revisions);
    for (n, &i) in moving.iter().enumerate() {
        let pod = &active[i];
        let (from, action, why) = decide(&policy, &templates, &spec.template, pod);
        let batch = if n < first {
            1
        } else {
            2 + (n - first) / width
        };
        plan.steps.push(PodStep {
            order: n + 1,
            batch,
            pod: name(pod),
            from_revision: from,
            action,
            why,
        });
    }
    Ok(plan)
}

/// Each revision's Pod template, by revision name.
fn revision_templates(revisions: &[ControllerRevision]) -> BTreeMap<&str, PodTemplateSpec> {
    revisions
        .iter()
        .filter_map(|r| {
            let name = r.metadata.name.as_deref()?;
            template_from_revision(r).ok().map(|t| (name, t))
        })
        .collect()
}

/// The revisions as the StatefulSet and DaemonSet planners take them.
fn core_revisions<'a>(
    templates: &'a BTreeMap<&str, PodTemplateSpec>,
) -> Vec<sts_core::Revision<'a>> {
    templates
        .iter()
        .map(|(name, template)| sts_core::Revision { name, template })
        .collect()
}

/// How the controller updates `pod` to `new` under `policy` (the in-place engine's decision), as
/// (the Pod's revision, action, why).
fn decide(
    policy: &str,
    templates: &BTreeMap<&str, PodTemplateSpec>,
    new: &PodTemplateSpec,
    pod: &Pod,
) -> (String, Action, String) {
    let from = pods::revision_of(pod).unwrap_or_default().to_owned();
    let old = templates
        .iter()
        .find(|(rev, _)| kruise_core::revision::pod_label_matches_revision(&from, rev))
        .map(|(_, t)| t);
    let in_place_only = policy == POD_UPDATE_IN_PLACE_ONLY;
    let (action, why) = match (policy, old) {
        (POD_UPDATE_RECREATE | "", _) => (Action::Recreate, "podUpdatePolicy ReCreate".to_owned()),
        (_, None) => (
            if in_place_only {
                Action::Refused
            } else {
                Action::Recreate
            },
            format!("its revision {from} is gone"),
        ),
        (_, Some(old)) => match inplace::plan(old, new, pod, &PlanOptions { resize: true }) {
            inplace::Plan::InPlace(p) => (Action::InPlace, describe_in_place(&p)),
            inplace::Plan::NotInPlace(reason) if in_place_only => {
                (Action::Refused, format!("InPlaceOnly: {reason}"))
            }
            inplace::Plan::NotInPlace(reason) => (Action::Recreate, reason.to_string()),
        },
    };
    (from, action, why)
}

/// The plan of rolling an Advanced StatefulSet's Pods to `sts.spec.template` at `update_revision`:
/// the controller's update order (highest ordinal down to the partition, or the unordered priority
/// order), one Pod at a time for OrderedReady, `maxUnavailable` at a time for Parallel.
pub fn plan_statefulset(
    sts: &AdvancedStatefulSet,
    update_revision: &str,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let spec = &sts.spec;
    let set = sts.metadata.name.as_deref().unwrap_or_default();
    let rolling = spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let policy = if rolling.pod_update_policy.is_empty() {
        POD_UPDATE_RECREATE.to_owned()
    } else {
        rolling.pod_update_policy.clone()
    };
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec.ordinals.as_ref().map_or(0, |o| o.start.max(0));
    let slots = sts_core::partition_pods(
        set,
        pods,
        start,
        replicas,
        &sts_core::Reserved::parse(&spec.reserve_ordinals),
    );
    let templates = revision_templates(revisions);
    let revs = core_revisions(&templates);
    let update = sts_core::Revision {
        name: update_revision,
        template: &spec.template,
    };
    let snapshot = sts_core::Snapshot {
        name: set,
        spec,
        status_current_replicas: sts.status.as_ref().map_or(0, |s| s.current_replicas),
        pods,
        current: update,
        update,
        revisions: &revs,
        now,
        resize: true,
    };
    let planned = vec![None; slots.slots.len()];
    let order = sts_core::update_order(&snapshot, &slots.slots, &planned);
    let needs_update = |i: usize| {
        !pods::is_terminating(&pods[i]) && !pods::is_at_revision(&pods[i], update_revision)
    };
    let moving: Vec<usize> = order
        .iter()
        .filter_map(|&k| slots.slots[k].pod)
        .filter(|&i| needs_update(i))
        .collect();
    let width = if spec.pod_management_policy == "Parallel" {
        usize::try_from(sts_core::max_unavailable(spec).map_err(anyhow::Error::msg)?).unwrap_or(1)
    } else {
        1
    }
    .max(1);
    let mut plan = RolloutPlan {
        update_revision: update_revision.to_owned(),
        pod_update_policy: policy.clone(),
        partition: i64::from(rolling.partition.unwrap_or(0)),
        max_unavailable: width as i64,
        note: rolling
            .paused
            .then(|| "the rollout is paused: nothing is updated until `rollout resume`".to_owned()),
        ..RolloutPlan::default()
    };
    for (n, &i) in moving.iter().enumerate() {
        let (from, action, why) = decide(&policy, &templates, &spec.template, &pods[i]);
        plan.steps.push(PodStep {
            order: n + 1,
            batch: 1 + n / width,
            pod: name(&pods[i]),
            from_revision: from,
            action,
            why,
        });
    }
    for slot in &slots.slots {
        let Some(i) = slot.pod else { continue };
        if pods::is_at_revision(&pods[i], update_revision) {
            plan.updated.push(name(&pods[i]));
        } else if needs_update(i) && !moving.contains(&i) {
            plan.stay.push(name(&pods[i]));
        }
    }
    Ok(plan)
}

/// The plan of rolling an Advanced DaemonSet's Pods to `ads.spec.template` at `update_revision`: the
/// controller's node order (by name descending, the rollout selector, cut by the partition),
/// `maxUnavailable` (or `maxSurge`) nodes at a time. `nodes` are (name, labels) of the cluster's nodes.
pub fn plan_daemonset(
    ads: &AdvancedDaemonSet,
    update_revision: &str,
    pods: &[Pod],
    nodes: &[(String, BTreeMap<String, String>)],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let spec = &ads.spec;
    let rolling = spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let policy = if rolling.type_ == "InPlaceIfPossible" {
        rolling.type_.clone()
    } else {
        POD_UPDATE_RECREATE.to_owned()
    };
    let templates = revision_templates(revisions);
    let revs = core_revisions(&templates);
    let views: Vec<ads_core::NodeView<'_>> = nodes
        .iter()
        .map(|(name, labels)| ads_core::NodeView {
            name,
            labels,
            should_run: true,
            should_continue_running: true,
        })
        .collect();
    let mut spec_for_plan = spec.clone();
    let mut note = None;
    if rolling.paused == Some(true) {
        note = Some("the rollout is paused: nothing is updated until `rollout resume`".to_owned());
        if let Some(r) = spec_for_plan.update_strategy.rolling_update.as_mut() {
            r.paused = None;
        }
    }
    let snapshot = ads_core::Snapshot {
        spec: &spec_for_plan,
        pods,
        nodes: &views,
        update: sts_core::Revision {
            name: update_revision,
            template: &spec.template,
        },
        revisions: &revs,
        now,
        resize: true,
    };
    let by_node = ads_core::pods_by_node(pods);
    let candidates =
        ads_core::update_candidates(&snapshot, &by_node).map_err(anyhow::Error::msg)?;
    let desired = i32::try_from(by_node.len()).unwrap_or(i32::MAX);
    let (surge, unavailable) =
        ads_core::surge_and_unavailable(Some(&rolling), desired).map_err(anyhow::Error::msg)?;
    let width = surge.max(unavailable).max(1);
    let partition = ads_core::partition(spec, desired).map_err(anyhow::Error::msg)?;
    let mut plan = RolloutPlan {
        update_revision: update_revision.to_owned(),
        pod_update_policy: policy.clone(),
        partition: partition as i64,
        max_unavailable: width as i64,
        note,
        ..RolloutPlan::default()
    };
    let node_pod = |node: &str| {
        by_node.get(node).and_then(|list| {
            list.iter()
                .copied()
                .filter(|&i| !pods::is_terminating(&pods[i]))
                .min_by_key(|&i| pods[i].metadata.creation_timestamp.clone())
        })
    };
    let mut moving = Vec::new();
    for node in &candidates {
        if let Some(i) =
            node_pod(node).filter(|&i| !pods::is_at_revision(&pods[i], update_revision))
        {
            moving.push(i);
        }
    }
    for (n, &i) in moving.iter().enumerate() {
        let (from, action, why) = decide(&policy, &templates, &spec.template, &pods[i]);
        plan.steps.push(PodStep {
            order: n + 1,
            batch: 1 + n / width,
            pod: name(&pods[i]),
            from_revision: from,
            action,
            why,
        });
    }
    for node in by_node.keys() {
        let Some(i) = node_pod(node) else { continue };
        if pods::is_at_revision(&pods[i], update_revision) {
            plan.updated.push(name(&pods[i]));
        } else if !moving.contains(&i) {
            plan.stay.push(name(&pods[i]));
        }
    }
    Ok(plan)
}

pub fn render(target: &Target, plan: &RolloutPlan) -> String {
    let mut out = format!(
        "Rollout plan for {} to revision {} (podUpdatePolicy {}, maxUnavailable {}, partition {}):\n",
        target.label(),
        plan.update_revision,
        plan.pod_update_policy,
        plan.max_unavailable,
        plan.partition
    );
    if let Some(note) = &plan.note {
        out.push_str(&format!("NOTE: {note}\n"));
    }
    if plan.steps.is_empty() {
        out.push_str("No Pod will be updated.\n");
    } else {
        let width = plan
            .steps
            .iter()
            .map(|s| s.pod.len())
            .max()
            .unwrap_or(3)
            .max(3);
        out.push_str(&format!("ORDER  BATCH  {:<width$}  ACTION    WHY\n", "POD"));
        for s in &plan.steps {
            let action = match s.action {
                Action::InPlace => "in place",
                Action::Recreate => "recreate",
                Action::Refused => "REFUSED",
            };
            out.push_str(&format!(
                "{:<5}  {:<5}  {:<width$}  {:<8}  {}\n",
                s.order, s.batch, s.pod, action, s.why
            ));
        }
    }
    if !plan.stay.is_empty() {
        out.push_str(&format!(
            "Stay at their revision (partition {}): {}\n",
            plan.partition,
            plan.stay.join(", ")
        ));
    }
    if !plan.updated.is_empty() {
        out.push_str(&format!("Already updated: {}\n", plan.updated.join(", ")));
    }
    out
}

/// The CloneSet the change would produce: `-f` a manifest (its spec, either version), or the live
/// one with `--image` edits; neither previews the rollout in progress.
fn desired(live: &Value, file: Option<&str>, images: &[(String, String)]) -> anyhow::Result<Value> {
    let mut desired = live.clone();
    if let Some(path) = file {
        let text = if path == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?
        } else {
            std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?
        };
        let mut doc: Value =
            serde_yaml::from_str(&text).with_context(|| format!("parsing {path}"))?;
        if doc.get("apiVersion").and_then(Value::as_str) != Some(kruise_api::kinds::V1BETA1) {
            doc = kruise_api::kinds::convert(doc, kruise_api::kinds::V1BETA1)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("converting {path} to v1beta1"))?;
        }
        desired["spec"] = doc
            .get("spec")
            .cloned()
            .context("the manifest has no spec")?;
    }
    if !images.is_empty() {
        let containers = desired
            .pointer_mut("/spec/template/spec/containers")
            .and_then(Value::as_array_mut)
            .context("the template has no containers")?;
        crate::set::apply(containers, &crate::set::Edit::Image(images.to_vec()))?;
    }
    Ok(desired)
}

pub async fn run(
    ctx: &Ctx,
    target: &Target,
    file: Option<&str>,
    images: &[(String, String)],
    output: Option<Output>,
) -> anyhow::Result<()> {
    if !matches!(
        target.kind,
        Kind::CloneSet | Kind::AdvancedStatefulSet | Kind::AdvancedDaemonSet
    ) {
        bail!(
            "rollout plan supports cloneset, statefulset.apps.kruise.io and daemonset.apps.kruise.io (got {})",
            target.kind.display()
        );
    }
    let live = ctx.get(target).await?;
    let changed = file.is_some() || !images.is_empty();
    let desired = desired(&live, file, images)?;
    let uid = live
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let selector = crate::cluster::selector_string(&live)?;
    let pods: Vec<Pod> = ctx
        .pods()
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the workload's Pods")?
        .items
        .into_iter()
        .filter(|p| controlled_by(p, &uid))
        .collect();
    let revisions: Vec<ControllerRevision> =
        Api::<ControllerRevision>::namespaced(ctx.client.clone(), &ctx.namespace)
            .list(&ListParams::default())
            .await
            .context("listing ControllerRevisions")?
            .items
            .into_iter()
            .filter(|r| {
                r.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid == uid)
            })
            .collect();
    let live_revision = live
        .pointer("/status/updateRevision")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let new_name = |kind: &str,
                    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
                    template: &PodTemplateSpec,
                    collision: Option<i32>|
     -> anyhow::Result<String> {
        let data = revision_data(template).context("hashing the new template")?;
        Ok(build_revision(
            Parent { kind, meta },
            None,
            BTreeMap::new(),
            data,
            0,
            collision,
        )
        .context("hashing the new template")?
        .metadata
        .name
        .unwrap_or_default())
    };
    let plan = match target.kind {
        Kind::AdvancedDaemonSet => {
            let ads: AdvancedDaemonSet =
                serde_json::from_value(desired).context("decoding the DaemonSet")?;
            let update_revision = if changed {
                let collision = ads.status.as_ref().and_then(|s| s.collision_count);
                new_name("DaemonSet", &ads.metadata, &ads.spec.template, collision)?
            } else {
                live_revision
            };
            let nodes: Vec<(String, BTreeMap<String, String>)> =
                Api::<k8s_openapi::api::core::v1::Node>::all(ctx.client.clone())
                    .list(&ListParams::default())
                    .await
                    .context("listing Nodes")?
                    .items
                    .into_iter()
                    .map(|n| {
                        (
                            n.metadata.name.unwrap_or_default(),
                            n.metadata.labels.unwrap_or_default(),
                        )
                    })
                    .collect();
            plan_daemonset(
                &ads,
                &update_revision,
                &pods,
                &nodes,
                &revisions,
                Timestamp::now(),
            )?
        }
        Kind::AdvancedStatefulSet => {
            let sts: AdvancedStatefulSet =
                serde_json::from_value(desired).context("decoding the StatefulSet")?;
            let update_revision = if changed {
                let collision = sts.status.as_ref().and_then(|s| s.collision_count);
                let data = revision_data(&sts.spec.template).context("hashing the new template")?;
                let parent = Parent {
                    kind: "StatefulSet",
                    meta: &sts.metadata,
                };
                build_revision(parent, None, BTreeMap::new(), data, 0, collision)
                    .context("hashing the new template")?
                    .metadata
                    .name
                    .unwrap_or_default()
            } else {
                live_revision
            };
            plan_statefulset(&sts, &update_revision, &pods, &revisions, Timestamp::now())?
        }
        _ => {
            let cs: CloneSet = serde_json::from_value(desired).context("decoding the CloneSet")?;
            let update_revision = if changed {
                let collision = cs.status.as_ref().and_then(|s| s.collision_count);
                new_revision(&cs, 0, collision)
                    .context("hashing the new template")?
                    .metadata
                    .name
                    .unwrap_or_default()
            } else {
                live_revision
            };
            plan_cloneset(&cs, &update_revision, &pods, &revisions, Timestamp::now())?
        }
    };
    match output {
        Some(o) => print_value(&serde_json::to_value(&plan)?, o),
        None => {
            print!("{}", render(target, &plan));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use serde_json::json;

    const OLD: &str = "web-old";

    fn cs(spec: Value) -> CloneSet {
        let mut doc = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "app:v1"}]}}}
        });
        json_patch::merge(&mut doc["spec"], &spec);
        serde_json::from_value(doc).expect("cloneset")
    }

    fn pod(n: &str, labels: &[(&str, &str)], created: i64) -> Pod {
        let mut l: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.insert("controller-revision-hash".into(), OLD.into());
        l.insert("app".into(), "web".into());
        let t = Time(Timestamp::from_second(1_700_000_000 + created).expect("time"));
        Pod {
            metadata: ObjectMeta {
                name: Some(n.into()),
                labels: Some(l),
                creation_timestamp: Some(t.clone()),
                owner_references: Some(vec![OwnerReference {
                    uid: "u1".into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    image: Some("app:v1".into()),
                    ..Default::default()
                }],
                node_name: Some("n".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(t),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn revision_of(cs: &CloneSet) -> ControllerRevision {
        let mut r = new_revision(cs, 1, None).expect("revision");
        r.metadata.name = Some(OLD.into());
        r
    }

    fn plan_of(spec: Value, change: &dyn Fn(&mut CloneSet), pods: &[Pod]) -> RolloutPlan {
        let live = cs(spec);
        let mut desired = live.clone();
        change(&mut desired);
        let now = Timestamp::from_second(1_800_000_000).expect("now");
        plan_cloneset(&desired, "web-new", pods, &[revision_of(&live)], now).expect("plan")
    }

    fn image(c: &mut CloneSet) {
        c.spec.template.spec.as_mut().expect("spec").containers[0].image = Some("app:v2".into());
    }

    fn env(c: &mut CloneSet) {
        c.spec.template.spec.as_mut().expect("spec").containers[0].env =
            Some(vec![k8s_openapi::api::core::v1::EnvVar {
                name: "A".into(),
                value: Some("1".into()),
                ..Default::default()
            }]);
    }

    fn pods4() -> Vec<Pod> {
        vec![
            pod("web-a", &[], 1),
            pod("web-b", &[("prio", "high")], 2),
            pod("web-c", &[], 3),
            pod("web-d", &[("prio", "mid")], 4),
        ]
    }

    #[test]
    fn plan_table() {
        let in_place = json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1}}});
        let weighted = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1, "partition": 1,
            "priorityStrategy": {"weightPriority": [
                {"weight": 100, "matchSelector": {"matchLabels": {"prio": "high"}}},
                {"weight": 50, "matchSelector": {"matchLabels": {"prio": "mid"}}}]}}}});
        let inplace_only = json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly", "maxUnavailable": 2}}});
        struct Case {
            name: &'static str,
            spec: Value,
            change: fn(&mut CloneSet),
            want: Vec<(&'static str, usize, Action, &'static str)>,
            stay: Vec<&'static str>,
        }
        let cases = [
            Case {
                name: "image in place, newest first (ActivePods order), one per batch",
                spec: in_place.clone(),
                change: image,
                want: vec![
                    ("web-d", 1, Action::InPlace, "image app → app:v2"),
                    ("web-c", 2, Action::InPlace, "image app → app:v2"),
                    ("web-b", 3, Action::InPlace, "image app → app:v2"),
                    ("web-a", 4, Action::InPlace, "image app → app:v2"),
                ],
                stay: vec![],
            },
            Case {
                name: "env recreates, and says why",
                spec: in_place,
                change: env,
                want: vec![
                    (
                        "web-d",
                        1,
                        Action::Recreate,
                        "/spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-c",
                        2,
                        Action::Recreate,
                        "/spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-b",
                        3,
                        Action::Recreate,
                        "/spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-a",
                        4,
                        Action::Recreate,
                        "/spec/containers/0/env changed and cannot be updated in place",
                    ),
                ],
                stay: vec![],
            },
            Case {
                name: "priority weights first, partition keeps the last",
                spec: weighted,
                change: image,
                want: vec![
                    ("web-b", 1, Action::InPlace, "image app → app:v2"),
                    ("web-d", 2, Action::InPlace, "image app → app:v2"),
                    ("web-c", 3, Action::InPlace, "image app → app:v2"),
                ],
                stay: vec!["web-a"],
            },
            Case {
                name: "InPlaceOnly refuses, two per batch",
                spec: inplace_only,
                change: env,
                want: vec![
                    (
                        "web-d",
                        1,
                        Action::Refused,
                        "InPlaceOnly: /spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-c",
                        1,
                        Action::Refused,
                        "InPlaceOnly: /spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-b",
                        2,
                        Action::Refused,
                        "InPlaceOnly: /spec/containers/0/env changed and cannot be updated in place",
                    ),
                    (
                        "web-a",
                        2,
                        Action::Refused,
                        "InPlaceOnly: /spec/containers/0/env changed and cannot be updated in place",
                    ),
                ],
                stay: vec![],
            },
            Case {
                name: "ReCreate policy",
                spec: json!({}),
                change: image,
                want: vec![
                    ("web-d", 1, Action::Recreate, "podUpdatePolicy ReCreate"),
                    ("web-c", 2, Action::Recreate, "podUpdatePolicy ReCreate"),
                    ("web-b", 3, Action::Recreate, "podUpdatePolicy ReCreate"),
                    ("web-a", 4, Action::Recreate, "podUpdatePolicy ReCreate"),
                ],
                stay: vec![],
            },
        ];
        for case in cases {
            let plan = plan_of(case.spec, &case.change, &pods4());
            let got: Vec<(&str, usize, Action, &str)> = plan
                .steps
                .iter()
                .map(|s| (s.pod.as_str(), s.batch, s.action.clone(), s.why.as_str()))
                .collect();
            assert_eq!(got, case.want, "{}", case.name);
            assert_eq!(plan.stay, case.stay, "{}", case.name);
        }
    }

    #[test]
    fn paused_rollouts_are_planned_with_a_note() {
        let spec = json!({"updateStrategy": {"rollingUpdate": {"paused": true, "partition": 4}}});
        let plan = plan_of(spec, &image, &pods4());
        assert!(plan.steps.is_empty());
        assert_eq!(plan.stay.len(), 4);
        assert!(plan.note.as_deref().is_some_and(|n| n.contains("paused")));
        let text = render(&Target::parse("cloneset/web", None).expect("target"), &plan);
        assert!(text.contains("No Pod will be updated."), "{text}");
        assert!(
            text.contains("Stay at their revision (partition 4): "),
            "{text}"
        );
    }

    #[test]
    fn desired_from_image_flags() {
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}}});
        let d = desired(&live, None, &[("app".into(), "b".into())]).expect("desired");
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("b"))
        );
        assert!(desired(&live, None, &[("x".into(), "b".into())]).is_err());
    }

    fn sts(spec: Value) -> AdvancedStatefulSet {
        let mut doc = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": 4, "serviceName": "db", "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "app:v1"}]}}}
        });
        json_patch::merge(&mut doc["spec"], &spec);
        serde_json::from_value(doc).expect("statefulset")
    }

    /// (name, spec, (Pod, batch) in order, Pods the partition keeps).
    type StsCase = (
        &'static str,
        Value,
        Vec<(&'static str, usize)>,
        Vec<&'static str>,
    );

    #[test]
    fn statefulset_plan_table() {
        let db_pods: Vec<Pod> = (0..4)
            .map(|i| {
                let prio = if i == 1 {
                    vec![("prio", "high")]
                } else {
                    vec![]
                };
                pod(&format!("db-{i}"), &prio, i)
            })
            .collect();
        let in_place = |extra: Value| {
            let mut rolling = json!({"podUpdatePolicy": "InPlaceIfPossible"});
            json_patch::merge(&mut rolling, &extra);
            json!({"updateStrategy": {"rollingUpdate": rolling}})
        };
        let cases: Vec<StsCase> = vec![
            (
                "OrderedReady: highest ordinal first, one at a time, partition keeps db-0",
                in_place(json!({"partition": 1})),
                vec![("db-3", 1), ("db-2", 2), ("db-1", 3)],
                vec!["db-0"],
            ),
            (
                "Parallel with maxUnavailable 2",
                {
                    let mut s = in_place(json!({"maxUnavailable": 2}));
                    s["podManagementPolicy"] = json!("Parallel");
                    s
                },
                vec![("db-3", 1), ("db-2", 1), ("db-1", 2), ("db-0", 2)],
                vec![],
            ),
            (
                "unordered update by priority",
                in_place(
                    json!({"unorderedUpdate": {"priorityStrategy": {"weightPriority": [
                    {"weight": 100, "matchSelector": {"matchLabels": {"prio": "high"}}}]}}}),
                ),
                vec![("db-1", 1), ("db-3", 2), ("db-2", 3), ("db-0", 4)],
                vec![],
            ),
        ];
        for (name, spec, want, stay) in cases {
            let live = sts(spec);
            let mut desired = live.clone();
            desired
                .spec
                .template
                .spec
                .as_mut()
                .expect("spec")
                .containers[0]
                .image = Some("app:v2".into());
            let mut rev = kruise_core::revision::build_revision(
                Parent {
                    kind: "StatefulSet",
                    meta: &live.metadata,
                },
                None,
                BTreeMap::new(),
                revision_data(&live.spec.template).expect("data"),
                1,
                None,
            )
            .expect("revision");
            rev.metadata.name = Some(OLD.into());
            let now = Timestamp::from_second(1_800_000_000).expect("now");
            let plan = plan_statefulset(&desired, "db-new", &db_pods, &[rev], now).expect(name);
            let got: Vec<(&str, usize)> = plan
                .steps
                .iter()
                .map(|s| (s.pod.as_str(), s.batch))
                .collect();
            assert_eq!(got, want, "{name}");
            assert!(
                plan.steps.iter().all(|s| s.action == Action::InPlace),
                "{name}: {plan:?}"
            );
            assert_eq!(plan.stay, stay, "{name}");
        }
    }

    #[test]
    fn daemonset_plan_by_node_name_descending() {
        let ads: AdvancedDaemonSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "ns", "uid": "u1"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "updateStrategy": {"rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible",
                    "maxUnavailable": 2, "partition": 1}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "app:v1"}]}}}
        }))
        .expect("daemonset");
        let mut rev = kruise_core::revision::build_revision(
            Parent {
                kind: "DaemonSet",
                meta: &ads.metadata,
            },
            None,
            BTreeMap::new(),
            revision_data(&ads.spec.template).expect("data"),
            1,
            None,
        )
        .expect("revision");
        rev.metadata.name = Some(OLD.into());
        let mut desired = ads.clone();
        desired
            .spec
            .template
            .spec
            .as_mut()
            .expect("spec")
            .containers[0]
            .image = Some("app:v2".into());
        let nodes: Vec<(String, BTreeMap<String, String>)> = ["n-a", "n-b", "n-c"]
            .iter()
            .map(|n| (n.to_string(), BTreeMap::new()))
            .collect();
        let pods: Vec<Pod> = ["n-b", "n-a", "n-c"]
            .iter()
            .enumerate()
            .map(|(k, node)| {
                let mut p = pod(&format!("agent-{node}"), &[], k as i64);
                if let Some(spec) = p.spec.as_mut() {
                    spec.node_name = Some(node.to_string());
                }
                p
            })
            .collect();
        let now = Timestamp::from_second(1_800_000_000).expect("now");
        let plan = plan_daemonset(&desired, "agent-new", &pods, &nodes, &[rev], now).expect("plan");
        let got: Vec<(&str, usize, Action)> = plan
            .steps
            .iter()
            .map(|s| (s.pod.as_str(), s.batch, s.action.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("agent-n-c", 1, Action::InPlace),
                ("agent-n-b", 1, Action::InPlace)
            ]
        );
        assert_eq!(plan.stay, vec!["agent-n-a"]);
    }
}
