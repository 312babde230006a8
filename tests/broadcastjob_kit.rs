//! Helpers for the BroadcastJob end-to-end tests: a job and its Pods, its status and conditions,
//! waiting for its status or an Event, and annotating a Pod (kubelet-sim reads a container's run time
//! and exit code from annotations).

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Event, Pod};
use kruise_api::broadcastjob::v1beta1::{BroadcastJob, BroadcastJobStatus, JobCondition};
use kruise_testkit::{TestNamespace, eventually};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// How long [`wait_job`] and [`wait_event`] wait.
pub const WAIT: Duration = Duration::from_secs(120);

/// The BroadcastJob `job` of the namespace, if it exists.
pub async fn get_job(ns: &TestNamespace, job: &str) -> anyhow::Result<Option<BroadcastJob>> {
    let api: Api<BroadcastJob> = ns.api();
    Ok(api.get_opt(job).await?)
}

/// The Pods of the job (label `broadcastjob-name`).
pub async fn job_pods(ns: &TestNamespace, job: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = ns.api();
    Ok(pods
        .list(&ListParams::default().labels(&format!("broadcastjob-name={job}")))
        .await?
        .items)
}

/// The job's status (the default when it has none yet).
pub fn job_status(job: &BroadcastJob) -> BroadcastJobStatus {
    job.status.clone().unwrap_or_default()
}

/// Whether the job's condition `type_` is True.
pub fn condition_true(job: &BroadcastJob, type_: &str) -> bool {
    job_status(job)
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The condition `type_` of a job's status, or an error naming it.
pub fn condition<'a>(
    status: &'a BroadcastJobStatus,
    type_: &str,
) -> anyhow::Result<&'a JobCondition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .with_context(|| format!("{type_} condition"))
}

/// Waits until the job's status satisfies `done`.
pub async fn wait_job(
    ns: &TestNamespace,
    job: &str,
    what: &str,
    done: impl Fn(&BroadcastJob) -> bool,
) -> anyhow::Result<BroadcastJob> {
    let result = eventually(format!("BroadcastJob {job}: {what}"), WAIT, || async {
        Ok(get_job(ns, job).await?.filter(|j| done(j)))
    })
    .await;
    if result.is_err()
        && let Ok(Some(j)) = get_job(ns, job).await
    {
        eprintln!("last status of {job}: {:?}", j.status);
    }
    result
}

/// The Events about the object named `job` in the namespace.
pub async fn events(ns: &TestNamespace, job: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = ns.api();
    Ok(api
        .list(&ListParams::default().fields(&format!("involvedObject.name={job}")))
        .await?
        .items)
}

/// Waits for an Event with `reason` about the job.
pub async fn wait_event(ns: &TestNamespace, job: &str, reason: &str) -> anyhow::Result<Event> {
    eventually(format!("Event {reason} on {job}"), WAIT, || async {
        Ok(events(ns, job)
            .await?
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason)))
    })
    .await
}

/// Merges `annotations` into the Pod's annotations.
pub async fn annotate(ns: &TestNamespace, pod: &str, annotations: Value) -> anyhow::Result<()> {
    let pods: Api<Pod> = ns.api();
    pods.patch(
        pod,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": annotations}})),
    )
    .await
    .with_context(|| format!("annotating Pod {pod}"))?;
    Ok(())
}
