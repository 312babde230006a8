//! `rollout plan`: before anything is applied, which Pods of a CloneSet, Advanced StatefulSet,
//! Advanced DaemonSet, UnitedDeployment or SidecarSet the next rollout touches, in which order and
//! batches, in place or recreated and why, and which stay at their revision. The plan is
//! `kruise_core::rollout::preview`, which steps the controllers' own planners to a finished rollout;
//! this file only gathers the objects it needs from the cluster and renders the result.

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::daemonset::v1beta1::DaemonSet as AdvancedDaemonSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::statefulset::v1beta1::StatefulSet as AdvancedStatefulSet;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_core::revision::template_from_revision;
use kruise_core::rollout::Revision;
use kruise_core::rollout::cloneset::decide::Settings;
use kruise_core::rollout::preview;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

pub use kruise_core::rollout::preview::{Action, Preview as RolloutPlan};

use crate::cluster::{Ctx, controlled_by};
use crate::output::{Output, print_value};
use crate::target::{Kind, Target};

/// The controllers' settings the plan assumes: kruise-manager's defaults (in-place resize on,
/// feature gates off).
fn settings() -> Settings {
    Settings {
        resize: true,
        env_from_metadata: true,
        ..Settings::default()
    }
}

/// Each revision's Pod template, by revision name (revisions that hold none are skipped).
fn revision_templates(revisions: &[ControllerRevision]) -> Vec<(String, PodTemplateSpec)> {
    revisions
        .iter()
        .filter_map(|r| {
            let name = r.metadata.name.clone()?;
            template_from_revision(r).ok().map(|t| (name, t))
        })
        .collect()
}

fn views(templates: &[(String, PodTemplateSpec)]) -> Vec<Revision<'_>> {
    templates
        .iter()
        .map(|(name, template)| Revision { name, template })
        .collect()
}

/// The planners' revisions (`update` among them) from the owned `templates`, and the one named
/// `current` (else `update`: a workload with no current revision yet).
fn planner_revisions<'a>(
    templates: &'a [(String, PodTemplateSpec)],
    update: Revision<'a>,
    current: &str,
) -> (Vec<Revision<'a>>, Revision<'a>) {
    let revs = preview::with_revision(&views(templates), update);
    let current = preview::current_or(&revs, current, update);
    (revs, current)
}

/// The plan of a workload rolling its Pods from its `status.currentRevision` (`current`) to
/// `update_revision` (its spec's `template`): `revisions` give each Pod's old template; `plan` is the
/// kind's planner, handed the current and update revisions and every revision it may meet.
fn plan_from_current(
    template: &PodTemplateSpec,
    update_revision: &str,
    current: &str,
    revisions: &[ControllerRevision],
    plan: impl FnOnce(Revision<'_>, Revision<'_>, &[Revision<'_>]) -> anyhow::Result<RolloutPlan>,
) -> anyhow::Result<RolloutPlan> {
    let templates = revision_templates(revisions);
    let update = Revision {
        name: update_revision,
        template,
    };
    let (revs, current) = planner_revisions(&templates, update, current);
    plan(current, update, &revs)
}

/// The plan of rolling CloneSet `cs` (its spec the one to roll to) at `update_revision` over its
/// `pods`; `revisions` give each Pod's old template, `status.currentRevision` the current one.
pub fn plan_cloneset(
    cs: &CloneSet,
    update_revision: &str,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let current = cs
        .status
        .as_ref()
        .map_or("", |s| s.current_revision.as_str());
    plan_from_current(
        &cs.spec.template,
        update_revision,
        current,
        revisions,
        |current, update, revs| {
            Ok(preview::cloneset(
                cs,
                pods,
                current,
                update,
                revs,
                settings(),
                now,
            )?)
        },
    )
}

/// The plan of rolling Advanced StatefulSet `sts` at `update_revision` over its `pods`.
pub fn plan_statefulset(
    sts: &AdvancedStatefulSet,
    update_revision: &str,
    pods: &[Pod],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let current = sts
        .status
        .as_ref()
        .map_or("", |s| s.current_revision.as_str());
    plan_from_current(
        &sts.spec.template,
        update_revision,
        current,
        revisions,
        |current, update, revs| {
            let resize = settings().resize;
            Ok(preview::statefulset(
                sts, pods, current, update, revs, resize, now,
            )?)
        },
    )
}

/// The plan of rolling Advanced DaemonSet `ads` at `update_revision` over its `pods` on `nodes`.
pub fn plan_daemonset(
    ads: &AdvancedDaemonSet,
    update_revision: &str,
    pods: &[Pod],
    nodes: &[Node],
    revisions: &[ControllerRevision],
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let templates = revision_templates(revisions);
    let update = Revision {
        name: update_revision,
        template: &ads.spec.template,
    };
    let revs = preview::with_revision(&views(&templates), update);
    Ok(preview::daemonset(
        ads,
        pods,
        nodes,
        update,
        &revs,
        settings().resize,
        now,
    )?)
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
        let subsets = plan.steps.iter().any(|s| s.subset.is_some());
        let subset_width = plan
            .steps
            .iter()
            .filter_map(|s| s.subset.as_ref().map(String::len))
            .max()
            .unwrap_or(0)
            .max(6);
        let subset_column = |value: &str| {
            if subsets {
                format!("{value:<subset_width$}  ")
            } else {
                String::new()
            }
        };
        out.push_str(&format!(
            "ORDER  BATCH  {}{:<width$}  ACTION    WHY\n",
            subset_column("SUBSET"),
            "POD"
        ));
        for s in &plan.steps {
            let action = match s.action {
                Action::InPlace => "in place",
                Action::Recreate => "recreate",
                Action::Refused => "REFUSED",
            };
            out.push_str(&format!(
                "{:<5}  {:<5}  {}{:<width$}  {:<8}  {}\n",
                s.order,
                s.batch,
                subset_column(s.subset.as_deref().unwrap_or_default()),
                s.pod,
                action,
                s.why
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

/// The workload the change would produce: `-f` a manifest (its spec, either version), or the live
/// one with `--image` edits (at `containers`, the pointer to the containers to edit); neither
/// previews the rollout in progress.
fn desired(
    live: &Value,
    file: Option<&str>,
    images: &[(String, String)],
    containers: &str,
) -> anyhow::Result<Value> {
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
            .pointer_mut(containers)
            .and_then(Value::as_array_mut)
            .context("the template has no containers")?;
        crate::set::apply(containers, &crate::set::Edit::Image(images.to_vec()))?;
    }
    Ok(desired)
}

/// The objects of `api` controlled by `uid`.
async fn owned<K>(api: &Api<K>, uid: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default())
        .await
        .context("listing the workload's objects")?
        .items
        .into_iter()
        .filter(|o| {
            o.meta()
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid)
        })
        .collect())
}

fn uid_of(object: &Value) -> String {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The Pods `workload` controls, found through its selector.
async fn pods_of(ctx: &Ctx, workload: &Value) -> anyhow::Result<Vec<Pod>> {
    let uid = uid_of(workload);
    let selector = crate::cluster::selector_string(workload)?;
    Ok(ctx
        .pods()
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the workload's Pods")?
        .items
        .into_iter()
        .filter(|p| controlled_by(p, &uid))
        .collect())
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
        Kind::CloneSet
            | Kind::AdvancedStatefulSet
            | Kind::AdvancedDaemonSet
            | Kind::UnitedDeployment
            | Kind::SidecarSet
    ) {
        bail!(
            "rollout plan supports cloneset, statefulset.apps.kruise.io, daemonset.apps.kruise.io, uniteddeployment and sidecarset (got {})",
            target.kind.display()
        );
    }
    let live = ctx.get(target).await?;
    let changed = file.is_some() || !images.is_empty();
    let containers = match target.kind {
        Kind::SidecarSet => "/spec/containers",
        Kind::UnitedDeployment => "/spec/template/cloneSetTemplate/spec/template/spec/containers",
        _ => "/spec/template/spec/containers",
    };
    let mut desired = desired(&live, file, images, containers)?;
    let now = Timestamp::now();
    let live_revision = live
        .pointer("/status/updateRevision")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let namespaced_revisions =
        || -> Api<ControllerRevision> { Api::namespaced(ctx.client.clone(), &ctx.namespace) };
    let plan = match target.kind {
        Kind::SidecarSet => {
            if changed && let Some(a) = desired.pointer_mut("/metadata/annotations") {
                // The recorded hashes are of the live sidecars: the new ones are computed.
                if let Some(a) = a.as_object_mut() {
                    a.remove(kruise_api::sidecarset::ANNOTATION_HASH);
                    a.remove(kruise_api::sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE);
                }
            }
            let ss: SidecarSet =
                serde_json::from_value(desired).context("decoding the SidecarSet")?;
            let selector = crate::cluster::selector_string(&live)?;
            let pods = Api::<Pod>::all(ctx.client.clone())
                .list(&ListParams::default().labels(&selector))
                .await
                .context("listing the Pods the SidecarSet selects")?
                .items;
            preview::sidecarset(&ss, &pods)?
        }
        Kind::UnitedDeployment => {
            let ud: UnitedDeployment =
                serde_json::from_value(desired).context("decoding the UnitedDeployment")?;
            plan_uniteddeployment(ctx, &ud, now).await?
        }
        Kind::AdvancedDaemonSet => {
            let ads: AdvancedDaemonSet =
                serde_json::from_value(desired).context("decoding the DaemonSet")?;
            let update_revision = if changed {
                let collision = ads.status.as_ref().and_then(|s| s.collision_count);
                preview::daemonset_revision_name(&ads, collision)?
            } else {
                live_revision
            };
            let nodes = Api::<Node>::all(ctx.client.clone())
                .list(&ListParams::default())
                .await
                .context("listing Nodes")?
                .items;
            let revisions = owned(&namespaced_revisions(), &uid_of(&live)).await?;
            let pods = pods_of(ctx, &live).await?;
            plan_daemonset(&ads, &update_revision, &pods, &nodes, &revisions, now)?
        }
        Kind::AdvancedStatefulSet => {
            let sts: AdvancedStatefulSet =
                serde_json::from_value(desired).context("decoding the StatefulSet")?;
            let update_revision = if changed {
                let collision = sts.status.as_ref().and_then(|s| s.collision_count);
                preview::statefulset_revision_name(&sts, collision)?
            } else {
                live_revision
            };
            let revisions = owned(&namespaced_revisions(), &uid_of(&live)).await?;
            let pods = pods_of(ctx, &live).await?;
            plan_statefulset(&sts, &update_revision, &pods, &revisions, now)?
        }
        _ => {
            let cs: CloneSet = serde_json::from_value(desired).context("decoding the CloneSet")?;
            let update_revision = if changed {
                let collision = cs.status.as_ref().and_then(|s| s.collision_count);
                kruise_core::revision::new_revision(&cs, 0, collision)
                    .context("hashing the new template")?
                    .metadata
                    .name
                    .unwrap_or_default()
            } else {
                live_revision
            };
            let revisions = owned(&namespaced_revisions(), &uid_of(&live)).await?;
            let pods = pods_of(ctx, &live).await?;
            plan_cloneset(&cs, &update_revision, &pods, &revisions, now)?
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

/// The plan of rolling UnitedDeployment `ud` (its spec the one to roll to): its subset workloads
/// (CloneSets or Advanced StatefulSets it controls, each named by its subset label), their Pods and
/// revisions, previewed together.
async fn plan_uniteddeployment(
    ctx: &Ctx,
    ud: &UnitedDeployment,
    now: Timestamp,
) -> anyhow::Result<RolloutPlan> {
    let uid = ud.metadata.uid.clone().unwrap_or_default();
    let kind = match kruise_core::rollout::uniteddeployment::TemplateKind::of(&ud.spec.template) {
        Some(kruise_core::rollout::uniteddeployment::TemplateKind::CloneSet) => Kind::CloneSet,
        Some(kruise_core::rollout::uniteddeployment::TemplateKind::AdvancedStatefulSet) => {
            Kind::AdvancedStatefulSet
        }
        _ => bail!(
            "rollout plan previews UnitedDeployments of CloneSets and Advanced StatefulSets; the other subset kinds are rolled by kube-controller-manager"
        ),
    };
    let workloads: Vec<Value> = owned::<DynamicObject>(&ctx.api(kind), &uid)
        .await?
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .context("encoding the subset workloads")?;
    let revisions_api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let mut gathered = Vec::new();
    for workload in &workloads {
        let Some(subset) = workload
            .pointer("/metadata/labels")
            .and_then(|l| l.get(kruise_api::keys::LABEL_SUBSET_NAME))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let pods = pods_of(ctx, workload).await?;
        let revisions = owned(&revisions_api, &uid_of(workload)).await?;
        gathered.push((
            subset.to_owned(),
            workload,
            pods,
            revision_templates(&revisions),
        ));
    }
    let views: Vec<Vec<Revision<'_>>> = gathered.iter().map(|g| views(&g.3)).collect();
    let subsets: Vec<preview::Subset<'_>> = gathered
        .iter()
        .zip(&views)
        .map(|((name, workload, pods, _), revisions)| preview::Subset {
            name,
            workload,
            pods,
            revisions,
        })
        .collect();
    let collision = ud.status.as_ref().and_then(|s| s.collision_count);
    let revision = preview::uniteddeployment_revision_name(ud, collision)?;
    Ok(preview::uniteddeployment(
        ud,
        &revision,
        &subsets,
        settings(),
        now,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn desired_from_image_flags() {
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a"}]}}}});
        let d = desired(
            &live,
            None,
            &[("app".into(), "b".into())],
            "/spec/template/spec/containers",
        )
        .expect("desired");
        assert_eq!(
            d.pointer("/spec/template/spec/containers/0/image"),
            Some(&json!("b"))
        );
        assert!(
            desired(
                &live,
                None,
                &[("x".into(), "b".into())],
                "/spec/template/spec/containers"
            )
            .is_err()
        );
    }

    #[test]
    fn render_names_batches_subsets_and_what_stays() {
        let step = |order, batch, pod: &str, subset: Option<&str>| {
            kruise_core::rollout::preview::PodStep {
                order,
                batch,
                pod: pod.into(),
                subset: subset.map(str::to_owned),
                from_revision: "ud-a-old".into(),
                action: Action::InPlace,
                why: "image app → app:v2".into(),
            }
        };
        let plan = RolloutPlan {
            update_revision: "ud-new".into(),
            pod_update_policy: "by each subset's CloneSet".into(),
            partition: 1,
            max_unavailable: 1,
            steps: vec![
                step(1, 1, "a-2", Some("a")),
                step(2, 1, "b-1", Some("b")),
                step(3, 2, "b-2", Some("b")),
            ],
            stay: vec!["a-1".into()],
            ..RolloutPlan::default()
        };
        let text = render(
            &Target::parse("uniteddeployment/ud", None).expect("target"),
            &plan,
        );
        assert!(
            text.contains("ORDER  BATCH  SUBSET  POD  ACTION    WHY"),
            "{text}"
        );
        assert!(
            text.contains("2      1      b       b-1  in place  image app → app:v2"),
            "{text}"
        );
        assert!(
            text.contains("Stay at their revision (partition 1): a-1"),
            "{text}"
        );

        let paused = RolloutPlan {
            note: Some("the rollout is paused".into()),
            stay: vec!["web-a".into()],
            partition: 4,
            ..RolloutPlan::default()
        };
        let text = render(
            &Target::parse("cloneset/web", None).expect("target"),
            &paused,
        );
        assert!(text.contains("NOTE: the rollout is paused"), "{text}");
        assert!(text.contains("No Pod will be updated."), "{text}");
    }
}
