//! One reconcile of an AdvancedCronJob: dereference (the object, its jobs from the shared caches) →
//! decide (`kruise_core::advancedcronjob::plan`) → act (status, pruning, replacing, creating) → requeue at the
//! next scheduled time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::advancedcronjob::ANNOTATION_SCHEDULED_AT;
use kruise_api::advancedcronjob::v1beta1::{
    AdvancedCronJob, AdvancedCronJobStatus, TEMPLATE_BROADCAST_JOB, TEMPLATE_JOB,
};
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_api::imagepulljob::v1beta1::{ImageListPullJob, ImageListPullJobObjectSpec};
use kruise_core::advancedcronjob::{self as cron, Child, Finished, Policy, Problem};
use kube::api::{DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use super::Context;
use crate::cache::{NOT_LISTED_RETRY, listed};
use crate::driver::write::{StatusWrite, write_status};
use crate::driver::writes::Writer;
use crate::error::{Error, is_race};

pub(crate) async fn reconcile(
    acj: Arc<AdvancedCronJob>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    reconcile_inner(&acj, &ctx).await
}

/// A job of any kind, as the reconcile handles it.
struct Owned {
    name: String,
    uid: Option<String>,
    reference: ObjectReference,
    child: Child,
}

fn finished(conditions: impl Iterator<Item = (String, String)>) -> Option<Finished> {
    conditions
        .filter(|(_, status)| status == "True")
        .find_map(|(type_, _)| match type_.as_str() {
            "Complete" => Some(Finished::Succeeded),
            "Failed" => Some(Finished::Failed),
            _ => None,
        })
}

fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.kind == "AdvancedCronJob" && r.uid == uid)
}

fn reference<K: Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    let meta = object.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

fn scheduled_of(meta: &ObjectMeta) -> Option<Timestamp> {
    meta.annotations
        .as_ref()?
        .get(ANNOTATION_SCHEDULED_AT)
        .and_then(|value| cron::parse_scheduled_at(value))
}

fn owned<K, F>(store: &Store<K>, namespace: &str, uid: &str, describe: F) -> Vec<Owned>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    F: Fn(&K) -> (Option<Finished>, Option<Timestamp>),
{
    let mut jobs: Vec<Owned> = store
        .state()
        .iter()
        .filter(|job| job.meta().namespace.as_deref() == Some(namespace))
        .filter(|job| controlled_by(job.meta(), uid))
        .map(|job| {
            let (finished, start_time) = describe(job);
            Owned {
                name: job.name_any(),
                uid: job.meta().uid.clone(),
                reference: reference(job.as_ref()),
                child: Child {
                    name: job.name_any(),
                    finished,
                    scheduled_at: scheduled_of(job.meta()),
                    start_time,
                },
            }
        })
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    jobs
}

async fn event(ctx: &Context, acj: &AdvancedCronJob, type_: EventType, reason: &str, note: String) {
    ctx.recorder
        .record(&acj.object_ref(&()), type_, reason, note)
        .await;
}

/// The jobs of the template's `kind` the cron job owns, as its plan reads them; `None` until
/// their cache is listed.
fn owned_jobs(ctx: &Context, kind: &str, namespace: &str, uid: &str) -> Option<Vec<Owned>> {
    let jobs = match kind {
        TEMPLATE_JOB => {
            if !listed(&ctx.jobs) {
                return None;
            }
            owned(&ctx.jobs, namespace, uid, |job: &Job| {
                let status = job.status.as_ref();
                let conditions = status
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c.type_, c.status));
                (
                    finished(conditions),
                    status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
                )
            })
        }
        TEMPLATE_BROADCAST_JOB => {
            if !listed(&ctx.broadcastjobs) {
                return None;
            }
            owned(&ctx.broadcastjobs, namespace, uid, |job: &BroadcastJob| {
                let status = job.status.as_ref();
                let conditions = status
                    .map(|s| s.conditions.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| (c.type_, c.status));
                (
                    finished(conditions),
                    status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
                )
            })
        }
        _ => {
            if !listed(&ctx.imagelistpulljobs) {
                return None;
            }
            owned(
                &ctx.imagelistpulljobs,
                namespace,
                uid,
                |list: &ImageListPullJob| {
                    let status = list.status.clone().unwrap_or_default();
                    (
                        cron::image_list_finished(
                            status.completion_time.is_some(),
                            status.desired,
                            status.succeeded,
                        ),
                        status.start_time.map(|t| t.0),
                    )
                },
            )
        }
    };
    Some(jobs)
}

/// Starts the run that is due: the jobs it replaces deleted first, then the new job.
async fn run_scheduled(
    ctx: &Context,
    acj: &AdvancedCronJob,
    kind: &str,
    jobs: &[Owned],
    run: &cron::Run,
) -> Result<(), Error> {
    let namespace = acj.namespace().unwrap_or_default();
    let name = acj.name_any();
    let uid = acj.metadata.uid.clone().unwrap_or_default();
    let schedule = cron::for_cron_job(
        &acj.spec.schedule,
        acj.spec.time_zone.as_deref(),
        &ctx.config.local_time_zone,
    );
    for &i in &run.replace {
        if !delete(ctx, kind, &namespace, &jobs[i]).await {
            return Err(Error::Invalid(format!(
                "cannot delete the running job {} to replace it",
                jobs[i].name
            )));
        }
        event(
            ctx,
            acj,
            EventType::Normal,
            "SuccessfulDelete",
            format!("Deleted job {}", jobs[i].name),
        )
        .await;
    }
    let tz = schedule
        .as_ref()
        .map(|s| s.time_zone().clone())
        .unwrap_or_else(|_| ctx.config.local_time_zone.clone());
    let job_name = cron::job_name(&name, run.scheduled);
    let scheduled_at = cron::scheduled_at(run.scheduled, &tz);
    match create(ctx, acj, &uid, &job_name, &scheduled_at).await {
        Ok(true) => {
            event(
                ctx,
                acj,
                EventType::Normal,
                "SuccessfulCreate",
                format!("Created job {job_name}"),
            )
            .await;
        }
        // Created before (a reconcile on a cache that did not show it yet): nothing to do.
        Ok(false) => {}
        Err(error) => {
            event(
                ctx,
                acj,
                EventType::Warning,
                "FailedCreate",
                format!("Error creating job {job_name}: {error}"),
            )
            .await;
            return Err(error);
        }
    }
    Ok(())
}

async fn reconcile_inner(acj: &AdvancedCronJob, ctx: &Context) -> Result<Action, Error> {
    let namespace = acj.namespace().unwrap_or_default();
    let Some(uid) = acj.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    if acj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let kind = acj.spec.template.kind();
    let Some(jobs) = owned_jobs(ctx, kind, &namespace, &uid) else {
        return Ok(Action::requeue(NOT_LISTED_RETRY));
    };
    let spec = &acj.spec;
    let policy = Policy {
        paused: spec.paused == Some(true),
        concurrency: spec.concurrency_policy.clone(),
        starting_deadline_seconds: spec.starting_deadline_seconds,
        successful_jobs_history_limit: spec.successful_jobs_history_limit,
        failed_jobs_history_limit: spec.failed_jobs_history_limit,
    };
    let schedule = cron::for_cron_job(
        &spec.schedule,
        spec.time_zone.as_deref(),
        &ctx.config.local_time_zone,
    );
    let children: Vec<Child> = jobs.iter().map(|j| j.child.clone()).collect();
    let recorded = acj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    let created = acj
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let now = Timestamp::now();
    let plan = cron::plan(
        &policy,
        schedule.as_ref(),
        &children,
        recorded,
        created,
        now,
    );

    // Status first, as upstream.
    let status = AdvancedCronJobStatus {
        type_: kind.into(),
        active: plan
            .active
            .iter()
            .map(|&i| jobs[i].reference.clone())
            .collect(),
        last_schedule_time: plan.last_schedule_time.map(Time),
    };
    let api = crate::driver::writes::Writer::<AdvancedCronJob>::namespaced(
        ctx.writes.clone(),
        &namespace,
    );
    let old = acj.status.as_ref();
    if write_status(&api, acj, old, &status, old != Some(&status)).await? == StatusWrite::Stale {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }

    // Best effort, as upstream: a failed delete is logged and tried again on a later reconcile.
    for &i in &plan.prune {
        if delete(ctx, kind, &namespace, &jobs[i]).await {
            event(
                ctx,
                acj,
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted job {}", jobs[i].name),
            )
            .await;
        }
    }
    if let Some(problem) = &plan.problem {
        let (reason, note) = match problem {
            Problem::InvalidSchedule(message) => (
                "InvalidSchedule",
                format!("unparsable schedule {:?}: {message}", spec.schedule),
            ),
            Problem::TooManyMissed => ("TooManyMissedTimes", cron::TooManyMissed.to_string()),
        };
        event(ctx, acj, EventType::Warning, reason, note).await;
        return Ok(Action::await_change());
    }
    let requeue = plan
        .requeue_after
        .and_then(|d| Duration::try_from(d).ok())
        .map_or_else(Action::await_change, |d| {
            // The schedule's time, not a moment before it.
            Action::requeue(d + Duration::from_millis(10))
        });
    let Some(run) = &plan.run else {
        return Ok(requeue);
    };
    run_scheduled(ctx, acj, kind, &jobs, run).await?;
    Ok(requeue)
}

/// Deletes one job (background propagation, preconditioned on its uid); true when it is gone.
async fn delete(ctx: &Context, kind: &str, namespace: &str, job: &Owned) -> bool {
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: job.uid.clone().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let result = match kind {
        TEMPLATE_JOB => Writer::<Job>::namespaced(ctx.writes.clone(), namespace)
            .delete(&job.name, &params)
            .await
            .map(|_| ()),
        TEMPLATE_BROADCAST_JOB => Writer::<BroadcastJob>::namespaced(ctx.writes.clone(), namespace)
            .delete(&job.name, &params)
            .await
            .map(|_| ()),
        _ => Writer::<ImageListPullJob>::namespaced(ctx.writes.clone(), namespace)
            .delete(&job.name, &params)
            .await
            .map(|_| ()),
    };
    match result {
        Ok(()) => true,
        Err(error) if is_race(&error) => true,
        Err(error) => {
            tracing::warn!(%error, job = job.name, "deleting a job of an AdvancedCronJob");
            false
        }
    }
}

/// The job's metadata: the template's labels and annotations, the scheduled time, the owner.
fn job_meta(
    acj: &AdvancedCronJob,
    uid: &str,
    name: &str,
    template: Option<&ObjectMeta>,
    scheduled_at: &str,
) -> ObjectMeta {
    let labels: BTreeMap<String, String> =
        template.and_then(|m| m.labels.clone()).unwrap_or_default();
    let mut annotations: BTreeMap<String, String> = template
        .and_then(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(ANNOTATION_SCHEDULED_AT.into(), scheduled_at.into());
    ObjectMeta {
        name: Some(name.into()),
        namespace: acj.metadata.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: AdvancedCronJob::api_version(&()).into_owned(),
            kind: AdvancedCronJob::kind(&()).into_owned(),
            name: acj.name_any(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    }
}

/// Creates the run's job; false when it exists already.
async fn create(
    ctx: &Context,
    acj: &AdvancedCronJob,
    uid: &str,
    name: &str,
    scheduled_at: &str,
) -> Result<bool, Error> {
    let namespace = acj.namespace().unwrap_or_default();
    let template = &acj.spec.template;
    let result = if let Some(job) = &template.job_template {
        let object = Job {
            metadata: job_meta(acj, uid, name, job.metadata.as_ref(), scheduled_at),
            spec: Some(job.spec.clone().unwrap_or_else(JobSpec::default)),
            status: None,
        };
        Writer::<Job>::namespaced(ctx.writes.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
    } else if let Some(broadcast) = &template.broadcast_job_template {
        let object = BroadcastJob {
            metadata: job_meta(acj, uid, name, Some(&broadcast.metadata), scheduled_at),
            spec: broadcast.spec.clone(),
            status: None,
        };
        Writer::<BroadcastJob>::namespaced(ctx.writes.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
    } else if let Some(list) = &template.image_list_pull_job_template {
        let object = ImageListPullJob {
            metadata: job_meta(acj, uid, name, Some(&list.metadata), scheduled_at),
            spec: ImageListPullJobObjectSpec {
                fields: list.spec.clone(),
            },
            status: None,
        };
        Writer::<ImageListPullJob>::namespaced(ctx.writes.clone(), &namespace)
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
    } else {
        return Ok(false);
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(source) => Err(Error::Kube {
            context: format!("creating job {namespace}/{name}"),
            source,
        }),
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
