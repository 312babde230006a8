//! AdvancedCronJob end to end (issue 46): Jobs and BroadcastJobs created on a schedule, with
//! upstream's names (`<name>-<Unix seconds of the scheduled time>`), labels, annotations
//! (`apps.kruise.io/scheduled-at`) and controller owner; history limits; Forbid and Replace; paused;
//! both API versions; and the webhook refusing bad schedules and time zones by field.
//!
//! Time: the schedules are `@every Ns` (upstream's cron library takes it too), so runs come seconds
//! apart and no test waits for a wall-clock minute. A check that something does NOT happen (Forbid,
//! paused) watches for a few schedule intervals, measured from the status the controller wrote.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::advancedcronjob::ANNOTATION_SCHEDULED_AT;
use kruise_api::advancedcronjob::v1beta1::AdvancedCronJob;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_testkit::{TestNamespace, eventually, managed_namespace};
use kube::api::{Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

async fn acj(ns: &TestNamespace, name: &str) -> anyhow::Result<AdvancedCronJob> {
    Ok(ns.api::<AdvancedCronJob>().get(name).await?)
}

fn owned_by<K: Resource>(object: &K, owner: &AdvancedCronJob) -> bool {
    object.meta().owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == "AdvancedCronJob"
            && r.api_version == "apps.kruise.io/v1beta1"
            && Some(&r.uid) == owner.metadata.uid.as_ref()
            && r.block_owner_deletion == Some(true)
    })
}

/// The Jobs of `owner`, oldest scheduled first.
async fn jobs_of(ns: &TestNamespace, owner: &AdvancedCronJob) -> anyhow::Result<Vec<Job>> {
    let mut jobs: Vec<Job> = ns
        .api::<Job>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|j| owned_by(j, owner))
        .collect();
    jobs.sort_by_key(|j| scheduled(j).ok());
    Ok(jobs)
}

async fn broadcastjobs_of(
    ns: &TestNamespace,
    owner: &AdvancedCronJob,
) -> anyhow::Result<Vec<BroadcastJob>> {
    let mut jobs: Vec<BroadcastJob> = ns
        .api::<BroadcastJob>()
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|j| owned_by(j, owner))
        .collect();
    jobs.sort_by_key(|j| scheduled(j).ok());
    Ok(jobs)
}

fn scheduled<K: Resource>(object: &K) -> anyhow::Result<Timestamp> {
    let value = object
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SCHEDULED_AT))
        .context("scheduled-at annotation")?;
    Ok(value.parse()?)
}

fn job_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

fn last_schedule_time(acj: &AdvancedCronJob) -> Option<Timestamp> {
    acj.status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0)
}

/// A run's name and annotation agree, as upstream writes them.
fn check_name<K: Resource>(object: &K, owner: &str) -> anyhow::Result<()> {
    let at = scheduled(object)?;
    let name = object.meta().name.clone().unwrap_or_default();
    ensure!(
        name == format!("{owner}-{}", at.as_second()),
        "{name} for a run scheduled at {at}"
    );
    ensure!(at.subsec_nanosecond() == 0, "{at}");
    Ok(())
}

/// Watches for `intervals` schedule intervals after `since` that `check` holds throughout.
async fn holds_for(
    since: Timestamp,
    interval: Duration,
    intervals: u32,
    mut check: impl AsyncFnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let until = since
        .checked_add(SignedDuration::try_from(interval * intervals)?)?
        .checked_add(SignedDuration::from_millis(500))?;
    while Timestamp::now() < until {
        check().await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check().await
}

#[tokio::test]
async fn job_template_runs_on_schedule_with_upstream_names_and_history_limits() -> anyhow::Result<()>
{
    let ns = managed_namespace("acj-job").await?;
    ns.run(async {
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: tick
spec:
  schedule: "@every 3s"
  successfulJobsHistoryLimit: 2
  template:
    jobTemplate:
      metadata:
        labels: {app: tick}
        annotations: {note: from-template}
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
              env: [{name: SIM_RUN_MS, value: "300"}]
"#,
        )
        .await?;
        let owner = acj(&ns, "tick").await?;
        // Defaults as upstream.
        ensure!(
            owner.spec.concurrency_policy == "Allow"
                && owner.spec.paused == Some(false)
                && owner.spec.failed_jobs_history_limit == Some(1),
            "{:?}",
            owner.spec
        );
        let first = eventually("a first Job", WAIT, || async {
            Ok(jobs_of(&ns, &owner).await?.into_iter().next())
        })
        .await?;
        check_name(&first, "tick")?;
        let labels = first.metadata.labels.clone().unwrap_or_default();
        ensure!(
            labels.get("app").map(String::as_str) == Some("tick"),
            "{labels:?}"
        );
        let annotations = first.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations.get("note").map(String::as_str) == Some("from-template"),
            "{annotations:?}"
        );
        let first_at = scheduled(&first)?;
        // The status names the run and its time; kubectl's columns show them.
        eventually("status type Job and lastScheduleTime", WAIT, || async {
            let current = acj(&ns, "tick").await?;
            let status = current.status.clone().unwrap_or_default();
            Ok(
                (status.type_ == "Job" && last_schedule_time(&current) >= Some(first_at))
                    .then_some(()),
            )
        })
        .await?;
        let columns = ns
            .kubectl(&[
                "get",
                "acj",
                "tick",
                "--no-headers",
                "-o",
                "custom-columns=S:.spec.schedule,T:.status.type",
            ])
            .await?;
        ensure!(
            columns.split_whitespace().collect::<Vec<_>>() == ["@every", "3s", "Job"],
            "{columns}"
        );
        // The Job runs to completion (kube-controller-manager's Job controller, kubelet-sim's Pod).
        eventually("the first Job completes", WAIT, || async {
            let job = ns.api::<Job>().get(&first.name_any()).await?;
            Ok(job_finished(&job).then_some(()))
        })
        .await?;
        // Runs keep coming every 3 s; finished ones beyond the limit of 2 are deleted, oldest first.
        eventually(
            "four more runs, at most 2 finished Jobs kept",
            WAIT,
            || async {
                let current = acj(&ns, "tick").await?;
                let jobs = jobs_of(&ns, &owner).await?;
                let finished = jobs.iter().filter(|j| job_finished(j)).count();
                let later = last_schedule_time(&current)
                    .is_some_and(|t| t >= first_at + SignedDuration::from_secs(12));
                let first_gone = jobs.iter().all(|j| j.name_any() != first.name_any());
                Ok((later && finished <= 2 && first_gone).then_some(jobs))
            },
        )
        .await?
        .iter()
        .try_for_each(|job| check_name(job, "tick"))?;
        // Events as Kubernetes' CronJob controller names them.
        eventually(
            "SuccessfulCreate and SuccessfulDelete events",
            WAIT,
            || async {
                let events = ns
                    .kubectl(&[
                        "get",
                        "events",
                        "--field-selector",
                        "involvedObject.name=tick",
                        "-o",
                        "jsonpath={.items[*].reason}",
                    ])
                    .await?;
                Ok(
                    (events.contains("SuccessfulCreate") && events.contains("SuccessfulDelete"))
                        .then_some(()),
                )
            },
        )
        .await?;
        // Deleting the AdvancedCronJob takes its Jobs with it (garbage collection by owner).
        ns.kubectl(&["delete", "acj", "tick", "--wait=false"])
            .await?;
        eventually("the Jobs are collected", WAIT, || async {
            let left = ns
                .api::<Job>()
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|j| owned_by(j, &owner))
                .count();
            Ok((left == 0).then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn broadcastjob_template_in_v1alpha1() -> anyhow::Result<()> {
    let ns = managed_namespace("acj-bcj").await?;
    ns.run(async {
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: AdvancedCronJob
metadata:
  name: bcast
spec:
  schedule: "@every 4s"
  concurrencyPolicy: Forbid
  template:
    broadcastJobTemplate:
      metadata:
        labels: {app: bcast}
      spec:
        completionPolicy:
          type: Always
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
              env: [{name: SIM_RUN_MS, value: "200"}]
"#,
        )
        .await?;
        let owner = acj(&ns, "bcast").await?;
        let first = eventually("a first BroadcastJob", WAIT, || async {
            Ok(broadcastjobs_of(&ns, &owner).await?.into_iter().next())
        })
        .await?;
        check_name(&first, "bcast")?;
        ensure!(
            first.labels().get("app").map(String::as_str) == Some("bcast"),
            "{:?}",
            first.labels()
        );
        eventually(
            "the BroadcastJob completes on the untainted nodes",
            WAIT,
            || async {
                let job = ns.api::<BroadcastJob>().get(&first.name_any()).await?;
                Ok(job
                    .status
                    .as_ref()
                    .is_some_and(|s| s.phase == "completed" && s.succeeded >= 3)
                    .then_some(()))
            },
        )
        .await?;
        // Both versions read the same object; status.type says what it creates.
        eventually("status type BroadcastJob in v1alpha1", WAIT, || async {
            let alpha = ns
                .kubectl(&[
                    "get",
                    "advancedcronjobs.v1alpha1.apps.kruise.io",
                    "bcast",
                    "-o",
                    "json",
                ])
                .await?;
            let alpha: serde_json::Value = serde_json::from_str(&alpha)?;
            ensure!(alpha["apiVersion"] == "apps.kruise.io/v1alpha1", "{alpha}");
            ensure!(
                alpha["spec"]["template"]["broadcastJobTemplate"]["metadata"]["labels"]["app"]
                    == "bcast",
                "{alpha}"
            );
            Ok((alpha["status"]["type"] == "BroadcastJob"
                && alpha["status"]["lastScheduleTime"].is_string())
            .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn forbid_skips_while_a_run_is_active_then_replace_replaces_it() -> anyhow::Result<()> {
    let ns = managed_namespace("acj-concurrency").await?;
    ns.run(async {
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: long
spec:
  schedule: "@every 2s"
  concurrencyPolicy: Forbid
  template:
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
              env: [{name: SIM_RUN_MS, value: "600000"}]
"#,
        )
        .await?;
        let owner = acj(&ns, "long").await?;
        let first = eventually("a first Job", WAIT, || async {
            Ok(jobs_of(&ns, &owner).await?.into_iter().next())
        })
        .await?;
        // Forbid: while it runs, three more scheduled times pass without a second Job.
        holds_for(scheduled(&first)?, Duration::from_secs(2), 3, async || {
            let jobs = jobs_of(&ns, &owner).await?;
            ensure!(
                jobs.len() == 1,
                "Forbid let a second run start: {:?}",
                jobs.iter().map(|j| j.name_any()).collect::<Vec<_>>()
            );
            Ok(())
        })
        .await?;
        let active = acj(&ns, "long").await?.status.unwrap_or_default().active;
        ensure!(
            active.len() == 1
                && active[0].name.as_deref() == Some(first.name_any().as_str())
                && active[0].kind.as_deref() == Some("Job"),
            "{active:?}"
        );
        // Replace (an update the webhook allows): the next run deletes the running Job and starts anew.
        ns.api::<AdvancedCronJob>()
            .patch(
                "long",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"concurrencyPolicy": "Replace"}})),
            )
            .await?;
        let replacement = eventually("the running Job replaced", WAIT, || async {
            let jobs = jobs_of(&ns, &owner).await?;
            let first_gone = jobs.iter().all(|j| {
                j.name_any() != first.name_any() || j.metadata.deletion_timestamp.is_some()
            });
            let newer = jobs
                .into_iter()
                .find(|j| scheduled(j).is_ok_and(|at| at > scheduled(&first).unwrap_or(at)));
            Ok(newer.filter(|_| first_gone))
        })
        .await?;
        check_name(&replacement, "long")?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn paused_stops_runs_and_resuming_starts_them_again() -> anyhow::Result<()> {
    let ns = managed_namespace("acj-paused").await?;
    ns.run(async {
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: pausable
spec:
  schedule: "@every 2s"
  timeZone: Asia/Shanghai
  template:
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
              env: [{name: SIM_RUN_MS, value: "100"}]
"#,
        )
        .await?;
        let owner = acj(&ns, "pausable").await?;
        eventually("a first Job", WAIT, || async {
            Ok(jobs_of(&ns, &owner).await?.into_iter().next())
        })
        .await?;
        // The annotation carries the schedule's zone (+08:00), as upstream's library returns it.
        let first = jobs_of(&ns, &owner)
            .await?
            .into_iter()
            .next()
            .context("a Job")?;
        let written = first
            .annotations()
            .get(ANNOTATION_SCHEDULED_AT)
            .cloned()
            .unwrap_or_default();
        ensure!(written.ends_with("+08:00"), "{written}");
        ns.kubectl(&[
            "patch",
            "acj",
            "pausable",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ])
        .await?;
        // Paused: no run scheduled after the patch (plus a second for the watch to deliver it)
        // starts, for three intervals.
        let paused_at = Timestamp::now() + SignedDuration::from_secs(1);
        holds_for(paused_at, Duration::from_secs(2), 3, async || {
            let jobs = jobs_of(&ns, &owner).await?;
            let late: Vec<String> = jobs
                .iter()
                .filter(|j| scheduled(*j).is_ok_and(|at| at > paused_at))
                .map(|j| j.name_any())
                .collect();
            ensure!(late.is_empty(), "runs started while paused: {late:?}");
            Ok(())
        })
        .await?;
        ns.kubectl(&[
            "patch",
            "acj",
            "pausable",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"paused":false}}"#,
        ])
        .await?;
        let resumed_at = Timestamp::now();
        eventually("a run after resuming", WAIT, || async {
            let jobs = jobs_of(&ns, &owner).await?;
            Ok(jobs
                .iter()
                .any(|j| {
                    scheduled(j).is_ok_and(|at| at >= resumed_at - SignedDuration::from_secs(1))
                })
                .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_schedules_time_zones_and_template_updates_are_refused_by_field() -> anyhow::Result<()>
{
    let ns = managed_namespace("acj-invalid").await?;
    ns.run(async {
        let manifest = |name: &str, schedule: &str, extra: &str| {
            format!(
                r#"apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: {name}
spec:
  schedule: "{schedule}"
{extra}  template:
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
"#
            )
        };
        let cases = [
            (manifest("bad-minute", "61 * * * *", ""), "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59)"),
            (manifest("bad-fields", "* * * *", ""), "spec.schedule: Invalid value: \"* * * *\": expected exactly 5 fields, found 4"),
            (manifest("bad-zone", "0 9 * * *", "  timeZone: Mars/Olympus\n"), "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus"),
            (manifest("both-zones", "TZ=UTC 0 9 * * *", "  timeZone: UTC\n"), "cannot use both timeZone field and TZ or CRON_TZ in schedule"),
            (manifest("bad-prefix", "TZ=Mars/Olympus 0 9 * * *", ""), "provided bad location Mars/Olympus"),
        ];
        for (yaml, want) in &cases {
            let refused = ns.apply(yaml).await.err().context("a bad AdvancedCronJob was accepted")?;
            ensure!(format!("{refused:#}").contains(want), "{refused:#}\nlacks {want}");
        }
        // Schedule, zone and policies may change; the template may not.
        ns.apply(&manifest("good", "@hourly", "  timeZone: Europe/Berlin\n")).await?;
        ns.kubectl(&["patch", "acj", "good", "--type", "merge", "-p", r#"{"spec":{"schedule":"*/5 * * * *","timeZone":"Asia/Tokyo","concurrencyPolicy":"Forbid"}}"#])
            .await?;
        let refused = ns
            .kubectl(&["patch", "acj", "good", "--type", "json", "-p", r#"[{"op":"replace","path":"/spec/template/jobTemplate/spec/template/spec/containers/0/image","value":"busybox:1.35"}]"#])
            .await
            .err()
            .context("a template change was accepted")?;
        ensure!(format!("{refused:#}").contains("spec: Forbidden: updates to advancedcronjob spec for fields other than"), "{refused:#}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_missed_run_within_the_starting_deadline_starts_at_once() -> anyhow::Result<()> {
    let ns = managed_namespace("acj-missed").await?;
    ns.run(async {
        // Hourly, created paused: nothing is due yet (the object is newer than the last full hour).
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: hourly
spec:
  schedule: "0 * * * *"
  timeZone: UTC
  startingDeadlineSeconds: 3600
  paused: true
  template:
    jobTemplate:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.34
"#,
        )
        .await?;
        let owner = acj(&ns, "hourly").await?;
        eventually("status type Job", WAIT, || async {
            let current = acj(&ns, "hourly").await?;
            Ok((current.status.unwrap_or_default().type_ == "Job").then_some(()))
        })
        .await?;
        // The last run was three hours ago (as after a manager outage): the run of the current hour
        // was missed, and it is within the hour-long starting deadline.
        let now = Timestamp::now();
        let this_hour = now.as_second() - now.as_second().rem_euclid(3600);
        let long_ago = Timestamp::from_second(this_hour - 3 * 3600)?;
        ns.api::<AdvancedCronJob>()
            .patch_status(
                "hourly",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"lastScheduleTime": long_ago.to_string()}})),
            )
            .await?;
        ns.kubectl(&[
            "patch",
            "acj",
            "hourly",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"paused":false}}"#,
        ])
        .await?;
        let job = eventually("the missed run's Job", WAIT, || async {
            Ok(jobs_of(&ns, &owner).await?.into_iter().next())
        })
        .await?;
        // (An hour may turn while the test runs: then that hour's run is the one missed.)
        let runs = [this_hour, this_hour + 3600].map(|h| format!("hourly-{h}"));
        ensure!(
            runs.contains(&job.name_any()),
            "{} is not one of {runs:?}",
            job.name_any()
        );
        check_name(&job, "hourly")?;
        Ok(())
    })
    .await
}
