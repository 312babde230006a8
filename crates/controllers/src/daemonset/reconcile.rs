//! One reconcile of an Advanced DaemonSet: wait for our own writes to show, claim
//! Pods and revisions, register the update revision, judge every node, plan, carry out the plan,
//! then write the status and prune the history.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::daemonset::v1beta1::{DaemonSet, DaemonSetStatus};
use kruise_api::keys;
use kruise_core::inplace;
use kruise_core::nodefit;
use kruise_core::pods::LifecycleState;
use kruise_core::revision::short_hash;
use kruise_core::rollout::daemonset::{
    self as planner, Action as Step, DeleteReason, Fix, NodeView, Snapshot,
};
use kruise_core::rollout::slow_start_batches;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

use super::status::{self, Inputs};
use super::{Context, Error, newpod, node_labels};
use crate::cache::listed;
use crate::driver::Owner;
use crate::podcontrol::{Outcome, PodControl, Wording, Write, pod_on_node};

/// The resync period when nothing else asks for a look sooner.
const RESYNC: Duration = Duration::from_secs(300);

pub(crate) async fn reconcile(ds: Arc<DaemonSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    reconcile_inner(&ds, &ctx).await
}

async fn reconcile_inner(ds: &DaemonSet, ctx: &Context) -> Result<Action, Error> {
    let owner = match crate::driver::head::begin_owner(ds, ctx, listed(&ctx.nodes)) {
        Ok(owner) => owner,
        Err(action) => return Ok(action),
    };
    let now = Timestamp::now();
    let pc = crate::driver::head::pod_control(ctx, ds, &owner, now, Wording::PodControl);
    let Owner { namespace, key, .. } = &owner;
    let reference = newpod::owner_reference(ds).map_err(|e| Error::Invalid(e.to_string()))?;
    let selector = ds.spec.selector.as_ref();
    let (owned, mut revisions) =
        match crate::driver::head::claim(ctx, &pc, ds, &owner, &reference, selector, |_| true)
            .await?
        {
            Ok(claimed) => claimed,
            Err(action) => return Ok(action),
        };
    let Some(update_rev) = update_revision(&pc, ds, &revisions).await? else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let update_name = crate::history::register_update(&mut revisions, update_rev);
    let hash = short_hash(&update_name).to_owned();
    let templates = crate::history::templates(&revisions);
    let views = crate::history::revision_views(&templates);
    let update_view = crate::history::find_view(&views, &update_name)?;

    if ctx.config.pre_download {
        super::predownload::sync(&pc, ctx, ds, &revisions, &templates, &update_name, &hash).await;
    }

    // Every node's verdict for the current template.
    let nodes = ctx.nodes.state();
    let template_spec = ds.spec.template.spec.clone().unwrap_or_default();
    let labels: Vec<BTreeMap<String, String>> = nodes.iter().map(|n| node_labels(n)).collect();
    let node_views: Vec<NodeView<'_>> = nodes
        .iter()
        .zip(&labels)
        .map(|(node, labels)| {
            let fit = nodefit::daemon_fit(&template_spec, node);
            NodeView {
                name: nodefit::node_name(node),
                labels,
                should_run: fit.should_run,
                should_continue_running: fit.should_continue_running,
            }
        })
        .collect();
    let snapshot = Snapshot {
        spec: &ds.spec,
        pods: &owned,
        nodes: &node_views,
        update: update_view,
        revisions: &views,
        now,
        resize: ctx.config.resize,
        env_from_metadata: ctx.config.env_from_metadata,
        prune_ineligible_nodes: ctx.config.prune_ineligible_nodes,
    };

    let mut outcome = Outcome::default();
    let (plan, failure) = match planner::plan(&snapshot) {
        Ok(plan) => (plan, None),
        Err(invalid) => {
            pc.event(EventType::Warning, "InvalidSetting", invalid.to_string())
                .await;
            (planner::Plan::default(), Some(invalid.to_string()))
        }
    };
    let failure = match carry_out(&pc, ds, &snapshot, &plan, &hash).await {
        Ok(o) => {
            outcome.merge(o);
            failure
        }
        Err(error) => Some(error.to_string()),
    };

    let old_status = ds.status.clone().unwrap_or_default();
    let computed = status::compute(&Inputs {
        ds,
        counts: planner::counts(&snapshot),
        hash: &hash,
        collision_count: Some(old_status.collision_count.unwrap_or(0)),
        deferred: plan.deferred_creates,
        now,
    });
    write_status(ctx, ds, namespace, &computed.status).await?;
    // A DaemonSet's current revision is its update revision: both are kept.
    ctx.base
        .truncate_history(
            namespace,
            &revisions,
            (&update_name, &update_name),
            &owned,
            ds.spec.revision_history_limit,
        )
        .await?;

    let mut after = RESYNC;
    for wait in [plan.requeue_after, computed.requeue, outcome.after]
        .into_iter()
        .flatten()
    {
        after = after.min(wait);
    }
    if failure.is_some() {
        tracing::warn!(daemonset = %key, failure = failure.as_deref().unwrap_or_default(), "sync incomplete");
        after = after.min(Duration::from_secs(5));
    }
    if plan.deferred_creates > 0 {
        after = after.min(Duration::from_secs(1));
    }
    Ok(Action::requeue(after.max(Duration::from_millis(100))))
}

/// The update revision ([`crate::driver::head::template_revision`]); `None` after recording a hash
/// collision.
async fn update_revision(
    pc: &PodControl<'_>,
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
) -> Result<Option<ControllerRevision>, Error> {
    let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
    crate::driver::head::template_revision(
        pc,
        ds,
        &ds.spec.template,
        revisions,
        collision_count,
        true,
        |count| {
            json!({"status": DaemonSetStatus {
                collision_count: Some(count),
                ..ds.status.clone().unwrap_or_default()
            }})
        },
    )
    .await
}

/// Carries out the plan: readiness fixes, then creations in slow-start batches (stopping at the
/// first failed batch), then deletions and in-place updates together.
async fn carry_out(
    pc: &PodControl<'_>,
    ds: &DaemonSet,
    s: &Snapshot<'_>,
    plan: &planner::Plan,
    hash: &str,
) -> Result<Outcome, Error> {
    let mut outcome = Outcome::default();
    let mut creations = Vec::new();
    let uid = ds.metadata.uid.as_deref().unwrap_or_default();
    for node in plan.creates() {
        let pod = newpod::build_pod(ds, s.update.template, hash, node)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        creations.push((pod, pod_on_node(uid, node)));
    }
    let mut queue = creations.into_iter();
    for batch in slow_start_batches(queue.len()) {
        let chunk: Vec<_> = queue.by_ref().take(batch).collect();
        let results = futures::future::join_all(
            chunk
                .into_iter()
                .map(|(pod, expectation)| pc.create_generated(pod, expectation)),
        )
        .await;
        outcome.modified |= results.iter().any(Option::is_some);
        if results.iter().any(Option::is_none) {
            outcome.after = Some(Duration::from_secs(2));
            break;
        }
    }

    let revision_labels = BTreeMap::from([(
        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(),
        hash.to_owned(),
    )]);
    let mut pending: Vec<Write<'_>> = Vec::new();
    for action in &plan.actions {
        let write: Write<'_> = match action {
            Step::Create { .. } => continue,
            Step::Fix(Fix::InPlaceReady(i)) => {
                Box::pin(pc.finish_in_place(&s.pods[*i], inplace::Finish::default()))
            }
            Step::Fix(Fix::InPlaceNextBatch(i)) => Box::pin(pc.update_next_batch(&s.pods[*i])),
            Step::Delete { pod, reason } => {
                let pod = &s.pods[*pod];
                let reason = *reason;
                Box::pin(async move {
                    if reason == DeleteReason::Failed {
                        report_failed(pc, pod).await;
                    }
                    pc.delete_pod(pod).await.map(|()| Outcome::MODIFIED)
                })
            }
            Step::PrepareDelete {
                pod,
                mark_not_ready,
                ..
            } => Box::pin(pc.set_lifecycle(
                &s.pods[*pod],
                LifecycleState::PreparingDelete,
                *mark_not_ready,
            )),
            Step::InPlace { pod, plan } => {
                let pod = &s.pods[*pod];
                let labels = &revision_labels;
                Box::pin(async move { pc.update_in_place(pod, plan, labels, hash, 0).await })
            }
        };
        pending.push(write);
    }
    // A large step is done in rounds (the status is written between them).
    let more = crate::parallel::this_round(&mut pending);
    match outcome.run_round(pending, more).await {
        Some(error) => Err(error),
        None => Ok(outcome),
    }
}

/// Upstream's `FailedDaemonPod` Warning before a failed daemon Pod is replaced.
async fn report_failed(pc: &PodControl<'_>, pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let node = planner::target_node(pod).unwrap_or_default();
    pc.pod_event(
        EventType::Warning,
        "FailedDaemonPod",
        format!(
            "Found failed daemon pod {}/{name} on node {node}, will try to kill it",
            pc.namespace
        ),
        Some(name),
    )
    .await;
}

async fn write_status(
    ctx: &Context,
    ds: &DaemonSet,
    namespace: &str,
    new: &DaemonSetStatus,
) -> Result<(), Error> {
    let old = ds.status.as_ref();
    let api =
        crate::driver::writes::Writer::<DaemonSet>::namespaced(ctx.base.writes.clone(), namespace);
    crate::driver::write::write_status(&api, ds, old, new, status::changed(old, new)).await?;
    Ok(())
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
