//! An AdvancedCronJob's reconcile against the in-memory cluster: the run created once even while
//! the cache lags, refusals by code, and history pruned only of the jobs seen.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::advancedcronjob::ANNOTATION_SCHEDULED_AT;
use kruise_api::advancedcronjob::v1beta1::AdvancedCronJob;
use kube::ResourceExt;
use serde_json::{Value, json};

use super::reconcile_inner;
use crate::advancedcronjob::{Config, Context};
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Verb, listed};
use crate::metrics::Metrics;

/// The context over `cluster`, its Job cache holding `jobs`; Events go to a scripted client.
fn context(cluster: &Arc<FakeCluster>, jobs: Vec<Job>) -> (Context, scripted::Log) {
    let (client, log) = scripted::client(Vec::new());
    let mut registry = prometheus_client::registry::Registry::default();
    let ctx = Context {
        writes: cluster.clone(),
        jobs: listed(jobs),
        broadcastjobs: listed(Vec::new()),
        imagelistpulljobs: listed(Vec::new()),
        recorder: crate::driver::recorder(client, super::super::CONTROLLER),
        metrics: Metrics::register(&mut registry),
        config: Config::default(),
    };
    (ctx, log)
}

/// Every minute, in UTC, created two and a half minutes ago: a run is due now.
fn cron_job(extra: Value) -> AdvancedCronJob {
    let created = Timestamp::now() - SignedDuration::from_secs(150);
    let mut acj = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "AdvancedCronJob",
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "acj-uid",
                     "creationTimestamp": created.to_string()},
        "spec": {"schedule": "* * * * *", "timeZone": "Etc/UTC",
                 "template": {"jobTemplate": {"spec": {"template": {"spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}}}}},
    });
    json_patch::merge(&mut acj, &extra);
    serde_json::from_value(acj).expect("an AdvancedCronJob")
}

fn jobs_of(cluster: &FakeCluster) -> Vec<Job> {
    cluster.all::<Job>(Some("ns"))
}

#[tokio::test]
async fn a_due_run_creates_its_job_once_even_while_the_cache_lags() {
    let cluster = FakeCluster::new();
    let acj = cluster.insert(&cron_job(json!({})));
    let (ctx, log) = context(&cluster, Vec::new());

    reconcile_inner(&acj, &ctx).await.expect("reconciled");

    let jobs = jobs_of(&cluster);
    assert_eq!(jobs.len(), 1, "one run");
    let job = &jobs[0];
    let scheduled = job
        .annotations()
        .get(ANNOTATION_SCHEDULED_AT)
        .cloned()
        .expect("the scheduled time is recorded");
    let scheduled: Timestamp = scheduled.parse().expect("RFC 3339");
    assert_eq!(
        job.name_any(),
        kruise_core::advancedcronjob::job_name("nightly", scheduled)
    );
    let owner = &job.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("AdvancedCronJob", "acj-uid")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(log.reasons(), vec!["SuccessfulCreate".to_owned()]);

    // A stale copy of the cron job decides nothing: its status write is refused first.
    let writes = cluster.records().len();
    reconcile_inner(&acj, &ctx).await.expect("a stale copy");
    let refused: Vec<(Verb, Option<u16>)> = cluster.records()[writes..]
        .iter()
        .map(|r| (r.verb, r.refused))
        .collect();
    assert_eq!(refused, vec![(Verb::PatchStatus, Some(409))]);

    // Again, on the cron job as it is and a cache that does not show the job yet: the create is
    // refused as a duplicate, and nothing is told.
    let acj: AdvancedCronJob = cluster.get(Some("ns"), "nightly").expect("the cron job");
    let writes = cluster.records().len();
    reconcile_inner(&acj, &ctx).await.expect("reconciled again");
    assert_eq!(jobs_of(&cluster).len(), 1);
    let after: Vec<(Verb, Option<u16>)> = cluster.records()[writes..]
        .iter()
        .map(|r| (r.verb, r.refused))
        .filter(|(verb, _)| *verb == Verb::Create)
        .collect();
    assert_eq!(after, vec![(Verb::Create, Some(409))]);
    assert_eq!(log.reasons(), vec!["SuccessfulCreate".to_owned()]);

    // Once the cache shows the job, the status records the run (from its jobs, as upstream) and
    // nothing is created.
    let acj: AdvancedCronJob = cluster.get(Some("ns"), "nightly").expect("the cron job");
    let (ctx, _log) = context(&cluster, jobs_of(&cluster));
    let writes = cluster.records().len();
    reconcile_inner(&acj, &ctx)
        .await
        .expect("reconciled on the job");
    // (A minute boundary passed meanwhile would make the next run due: only this run counts.)
    let verbs: Vec<Verb> = cluster.records()[writes..]
        .iter()
        .filter(|r| r.name == "nightly" || r.name == job.name_any())
        .map(|r| r.verb)
        .collect();
    assert_eq!(verbs, vec![Verb::PatchStatus]);
    let stored: AdvancedCronJob = cluster.get(Some("ns"), "nightly").expect("the cron job");
    let status = stored.status.expect("a status");
    assert_eq!(status.last_schedule_time.map(|t| t.0), Some(scheduled));
    assert_eq!(status.active.len(), 1, "the job runs");
}

#[tokio::test]
async fn a_refused_run_is_told_and_fails_the_reconcile() {
    for code in [422, 500] {
        let cluster = FakeCluster::new();
        let acj = cluster.insert(&cron_job(json!({})));
        cluster.fail_next(Verb::Create, "", code);
        let (ctx, log) = context(&cluster, Vec::new());

        let result = reconcile_inner(&acj, &ctx).await;

        assert!(result.is_err(), "{code}");
        assert!(jobs_of(&cluster).is_empty(), "{code}");
        assert_eq!(log.reasons(), vec!["FailedCreate".to_owned()], "{code}");
    }
}

/// A finished job of the cron job, run `minutes_ago`.
fn finished_job(cluster: &FakeCluster, minutes_ago: i64, uid: &str) -> Job {
    let scheduled = Timestamp::from_second(
        (Timestamp::now() - SignedDuration::from_mins(minutes_ago)).as_second() / 60 * 60,
    )
    .expect("a time");
    let name = kruise_core::advancedcronjob::job_name("nightly", scheduled);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
                     "annotations": {ANNOTATION_SCHEDULED_AT: scheduled.to_string()},
                     "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1",
                                          "kind": "AdvancedCronJob", "name": "nightly",
                                          "uid": "acj-uid", "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}],
                   "startTime": scheduled.to_string()},
    }))
    .expect("a Job");
    cluster.insert(&job)
}

#[tokio::test]
async fn history_is_pruned_only_of_the_jobs_seen() {
    let cluster = FakeCluster::new();
    let acj = cluster.insert(&cron_job(
        json!({"spec": {"successfulJobsHistoryLimit": 1}}),
    ));
    let oldest = finished_job(&cluster, 2, "oldest");
    let newer = finished_job(&cluster, 1, "newer");
    // The oldest was replaced under its name since the cache saw it: it is not deleted.
    let mut seen_oldest = oldest.clone();
    seen_oldest.metadata.uid = Some("gone".into());
    let (ctx, _log) = context(&cluster, vec![seen_oldest, newer.clone()]);

    reconcile_inner(&acj, &ctx).await.expect("reconciled");

    let deletes: Vec<(String, Option<u16>)> = cluster
        .records()
        .iter()
        .filter(|r| r.verb == Verb::Delete)
        .map(|r| (r.name.clone(), r.refused))
        .collect();
    assert_eq!(deletes, vec![(oldest.name_any(), Some(409))]);
    let names: Vec<String> = jobs_of(&cluster).iter().map(|j| j.name_any()).collect();
    assert!(names.contains(&oldest.name_any()), "{names:?}");
    assert!(names.contains(&newer.name_any()), "{names:?}");
}
