//! One reconcile of a BroadcastJob: dereference (the job, its Pods, the Nodes) → decide
//! (`kruise_core::rollout::broadcastjob::plan`) → act (delete, create in slow-start batches, Events,
//! status, TTL deletion).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_core::rollout::broadcastjob as planner;
use kruise_core::rollout::slow_start_batches;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::{CONTROLLER, Context, newpod};
use crate::cache::{NOT_LISTED_RETRY, listed};
use crate::driver::write::{StatusWrite, write_status};
use crate::error::{Error, is_race};
use crate::parallel::in_parallel;
use crate::podcontrol::{PodControl, Wording, expectations_met, pod_on_node};

pub(crate) async fn reconcile(job: Arc<BroadcastJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    reconcile_inner(&job, &ctx).await
}

/// The job's Pods: controlled by it and carrying both job labels (upstream lists by the labels and
/// keeps those whose controller is the job).
fn job_pods(ctx: &Context, job: &BroadcastJob, uid: &str) -> Result<Vec<Arc<Pod>>, Error> {
    let labels = newpod::job_labels(job).map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(ctx
        .base
        .pods
        .owned_by(uid)
        .into_iter()
        .filter(|pod| {
            let have = pod.metadata.labels.as_ref();
            labels
                .iter()
                .all(|(k, v)| have.and_then(|l| l.get(k)) == Some(v))
        })
        .collect())
}

/// Deletes a finished job whose `ttlSecondsAfterFinished` has passed (preconditioned on its uid).
async fn delete_after_ttl(
    ctx: &Context,
    api: &crate::driver::writes::Writer<BroadcastJob>,
    name: &str,
    key: &str,
    uid: String,
) -> Result<Action, Error> {
    tracing::info!(broadcastjob = %key, "deleting the job: ttlSecondsAfterFinished has passed");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            if let Ok(mut ex) = ctx.base.expectations.lock() {
                ex.forget(key);
            }
            Ok(Action::await_change())
        }
        Err(error) if is_race(&error) => Ok(Action::await_change()),
        Err(error) => Err(Error::Kube {
            context: format!("deleting BroadcastJob {key} after its TTL"),
            source: error,
        }),
    }
}

async fn reconcile_inner(job: &BroadcastJob, ctx: &Context) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{namespace}/{name}");
    let Some(uid) = job.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    // Creates are expected per node (the Pods' names are generated), deletes per Pod.
    if let Err(wait) = expectations_met(
        &ctx.base.expectations,
        &key,
        &namespace,
        &ctx.base.pods,
        &ctx.base.revisions,
        &ctx.base.metrics,
        CONTROLLER,
    ) {
        return Ok(Action::requeue(wait));
    }
    let pods = job_pods(ctx, job, &uid)?;
    if !listed(&ctx.nodes) {
        return Ok(Action::requeue(NOT_LISTED_RETRY));
    }
    let mut nodes: Vec<Arc<Node>> = ctx.nodes.state();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let now = Timestamp::now();
    let pod_refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let template = job.spec.template.spec.clone().unwrap_or_default();
    let placement = planner::place(
        &template,
        nodes.iter().map(|n| n.as_ref()),
        &pod_refs,
        planner::pod_node,
        planner::node_fits,
    );
    let plan = planner::plan(job, &pod_refs, &placement, now);
    let api = crate::driver::writes::Writer::<BroadcastJob>::namespaced(
        ctx.base.writes.clone(),
        &namespace,
    );

    if plan.delete_job {
        return delete_after_ttl(ctx, &api, &name, &key, uid).await;
    }

    let pc = PodControl {
        writes: &ctx.base.writes,
        live: &ctx.base.live,
        namespace: &namespace,
        owner: job.object_ref(&()),
        key: key.clone(),
        expectations: &ctx.base.expectations,
        recorder: &ctx.base.recorder,
        metrics: &ctx.base.metrics,
        controller: CONTROLLER,
        now,
        wording: Wording::Job,
        budgets: None,
    };

    let mut status = plan.status.clone();
    let mut first_error: Option<Error> = None;
    let deletes = plan.delete.iter().map(|pod| {
        let pc = &pc;
        Box::pin(async move { pc.delete_pod(pod).await })
    });
    for result in in_parallel(deletes.collect()).await {
        if let Err(error) = result {
            first_error.get_or_insert(error);
        }
    }

    if !plan.create_on.is_empty() {
        let mut queue = plan.create_on.iter();
        let mut failed = 0usize;
        let mut skipped = 0usize;
        let batches = slow_start_batches(plan.create_on.len());
        for (i, size) in batches.iter().enumerate() {
            let batch: Vec<&String> = queue.by_ref().take(*size).collect();
            let creates = batch.iter().map(|node| {
                let pc = &pc;
                let uid = uid.as_str();
                let by_scheduler = ctx.config.assign_by_scheduler;
                Box::pin(async move {
                    let pod = match newpod::build_pod(job, node, by_scheduler) {
                        Ok(pod) => pod,
                        Err(error) => return Err(Error::Invalid(error.to_string())),
                    };
                    Ok(pc
                        .create_generated(pod, pod_on_node(uid, node))
                        .await
                        .is_some())
                })
            });
            let results = in_parallel(creates.collect()).await;
            let batch_failures = results.iter().filter(|r| !matches!(r, Ok(true))).count();
            failed += batch_failures;
            if let Some(Err(error)) = results.into_iter().find(|r| r.is_err()) {
                first_error.get_or_insert(error);
            }
            // Slow start: a failed batch stops the rest, which the next reconcile retries.
            if batch_failures > 0 {
                skipped = batches[i + 1..].iter().sum();
                break;
            }
        }
        if let Some(status) = status.as_mut() {
            status.active -= i32::try_from(failed + skipped).unwrap_or(i32::MAX);
        }
    }

    if let Some(new) = status.as_ref() {
        let old = job.status.as_ref();
        let wrote = write_status(&api, job, old, new, old != Some(new)).await?;
        if wrote == StatusWrite::Stale {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
    }
    // After the status: a reconcile of a stale copy of the job fails its status write (the
    // resourceVersion precondition) and so does not repeat the Events of the one before it.
    for event in &plan.events {
        let type_ = if event.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        pc.event(type_, &event.reason, event.message.clone()).await;
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    Ok(plan
        .requeue_after
        .map_or_else(Action::await_change, Action::requeue))
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
