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
use kruise_core::inplace::{self, InPlacePlan, PlanOptions};
use kruise_core::pods;
use kruise_core::revision::{new_revision, template_from_revision};
use kruise_core::rollout::cloneset::{
    DiffOptions, FactsContext, Limits, Purpose, RolloutKnobs, calculate_diffs, limit_updates,
    pod_facts, update_candidates,
};
use kruise_core::rollout::ordering::sort_update_indexes;
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

    let templates: BTreeMap<&str, PodTemplateSpec> = revisions
        .iter()
        .filter_map(|r| {
            let name = r.metadata.name.as_deref()?;
            template_from_revision(r).ok().map(|t| (name, t))
        })
        .collect();
    let opts = PlanOptions { resize: true };
    for (n, &i) in moving.iter().enumerate() {
        let pod = &active[i];
        let from = pods::revision_of(pod).unwrap_or_default().to_owned();
        let old = templates
            .iter()
            .find(|(rev, _)| kruise_core::revision::pod_label_matches_revision(&from, rev))
            .map(|(_, t)| t);
        let (action, why) = match (policy.as_str(), old) {
            (POD_UPDATE_RECREATE, _) => (Action::Recreate, "podUpdatePolicy ReCreate".to_owned()),
            (_, None) => (
                if policy == POD_UPDATE_IN_PLACE_ONLY {
                    Action::Refused
                } else {
                    Action::Recreate
                },
                format!("its revision {from} is gone"),
            ),
            (_, Some(old)) => match inplace::plan(old, &spec.template, pod, &opts) {
                inplace::Plan::InPlace(p) => (Action::InPlace, describe_in_place(&p)),
                inplace::Plan::NotInPlace(reason) if policy == POD_UPDATE_IN_PLACE_ONLY => {
                    (Action::Refused, format!("InPlaceOnly: {reason}"))
                }
                inplace::Plan::NotInPlace(reason) => (Action::Recreate, reason.to_string()),
            },
        };
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
    if target.kind != Kind::CloneSet {
        bail!(
            "rollout plan supports cloneset (got {}); Advanced StatefulSet and DaemonSet are not previewed yet",
            target.kind.display()
        );
    }
    let live = ctx.get(target).await?;
    let changed = file.is_some() || !images.is_empty();
    let desired: CloneSet =
        serde_json::from_value(desired(&live, file, images)?).context("decoding the CloneSet")?;
    let uid = desired.metadata.uid.clone().unwrap_or_default();
    let status = desired.status.clone().unwrap_or_default();
    let update_revision = if changed {
        new_revision(&desired, 0, status.collision_count)
            .context("hashing the new template")?
            .metadata
            .name
            .unwrap_or_default()
    } else {
        status.update_revision.clone()
    };
    let selector = crate::cluster::selector_string(&live)?;
    let pods: Vec<Pod> = ctx
        .pods()
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the CloneSet's Pods")?
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
    let plan = plan_cloneset(
        &desired,
        &update_revision,
        &pods,
        &revisions,
        Timestamp::now(),
    )?;
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
}
