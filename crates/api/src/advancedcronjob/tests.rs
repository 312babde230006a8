use super::*;
use serde_json::json;

use crate::kinds::{Kind, V1ALPHA1, V1BETA1};

fn pod(restart: &str) -> serde_json::Value {
    json!({"spec": {"restartPolicy": restart, "containers": [{"name": "pi", "image": "perl"}]}})
}

fn acj(spec: serde_json::Value) -> v1beta1::AdvancedCronJob {
    let object = json!({
        "apiVersion": V1BETA1,
        "kind": "AdvancedCronJob",
        "metadata": {"name": "acj", "namespace": "default"},
        "spec": spec,
    });
    crate::kinds::decode(object).expect("test object decodes")
}

fn job_spec(schedule: &str) -> serde_json::Value {
    json!({"schedule": schedule, "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}})
}

fn first_error(
    object: &v1beta1::AdvancedCronJob,
    old: Option<&v1beta1::AdvancedCronJob>,
) -> String {
    Api::validate(object, old)
        .first()
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[test]
fn defaults_as_upstream() {
    let mut object = acj(job_spec("*/1 * * * *"));
    Api::default(&mut object);
    assert_eq!(object.spec.concurrency_policy, "Allow");
    assert_eq!(object.spec.paused, Some(false));
    assert_eq!(object.spec.successful_jobs_history_limit, Some(3));
    assert_eq!(object.spec.failed_jobs_history_limit, Some(1));
    let pod = object
        .spec
        .template
        .job_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));

    let mut pull = acj(
        json!({"schedule": "@daily", "template": {"imageListPullJobTemplate": {"spec": {"images": ["nginx:1.25"]}}}}),
    );
    Api::default(&mut pull);
    assert_eq!(pull.spec.concurrency_policy, "Replace");
    let spec = &pull
        .spec
        .template
        .image_list_pull_job_template
        .as_ref()
        .expect("template")
        .spec;
    assert_eq!(spec.completion_policy.type_, "Always");
    assert_eq!(spec.image_pull_policy, "IfNotPresent");
    let policy = spec.pull_policy.as_ref().expect("pull policy");
    assert_eq!(
        (policy.timeout_seconds, policy.backoff_limit),
        (Some(600), Some(3))
    );
}

#[test]
fn valid_objects_pass() {
    let specs = [
        job_spec("*/1 * * * *"),
        job_spec("@every 10s"),
        job_spec("TZ=Asia/Shanghai 0 9 * * *"),
        json!({"schedule": "0 9 * * *", "timeZone": "Europe/Berlin", "startingDeadlineSeconds": 30,
               "template": {"broadcastJobTemplate": {"metadata": {"labels": {"a": "b"}},
                                                     "spec": {"template": pod("OnFailure")}}}}),
        json!({"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": {"imageListPullJobTemplate":
               {"spec": {"images": ["nginx:1.25", "registry.k8s.io/pause:3.9"], "completionPolicy": {"type": "Always"}}}}}),
    ];
    for spec in specs {
        let mut object = acj(spec.clone());
        Api::default(&mut object);
        assert_eq!(Api::validate(&object, None), Vec::new(), "{spec}");
    }
}

#[test]
fn invalid_objects_name_the_field() {
    let cases = [
        (
            job_spec(""),
            "spec.schedule: Invalid value: \"\": schedule cannot be empty",
        ),
        (
            job_spec("61 * * * *"),
            "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59)",
        ),
        (
            job_spec("* * * *"),
            "spec.schedule: Invalid value: \"* * * *\": expected exactly 5 fields",
        ),
        (
            job_spec("@sometimes"),
            "spec.schedule: Invalid value: \"@sometimes\": unrecognized descriptor",
        ),
        (
            job_spec("TZ=Mars/Base * * * * *"),
            "spec.schedule: Invalid value: \"TZ=Mars/Base * * * * *\": provided bad location Mars/Base",
        ),
        (
            json!({"schedule": "TZ=UTC * * * * *", "timeZone": "UTC", "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.schedule: Invalid value: \"TZ=UTC * * * * *\": cannot use both timeZone field and TZ or CRON_TZ in schedule",
        ),
        (
            json!({"schedule": "* * * * *", "timeZone": "Mars/Base", "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.timeZone: Invalid value: \"Mars/Base\": unknown time zone Mars/Base",
        ),
        (
            json!({"schedule": "* * * * *", "timeZone": "Local", "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone",
        ),
        (
            json!({"schedule": "* * * * *", "timeZone": "", "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.timeZone: Invalid value: \"\": timeZone must be nil or non-empty string",
        ),
        (
            json!({"schedule": "* * * * *", "template": {}}),
            "spec.template: Forbidden: spec must have one template",
        ),
        (
            json!({"schedule": "* * * * *", "template": {"jobTemplate": {"spec": {"template": pod("Never")}},
                   "broadcastJobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.template: Forbidden: spec can have only one template",
        ),
        (
            json!({"schedule": "* * * * *", "template": {"jobTemplate": {"spec": {"template": pod("Always")}}}}),
            "spec.template.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Always\"",
        ),
        (
            json!({"schedule": "* * * * *", "startingDeadlineSeconds": -1, "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.startingDeadlineSeconds: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
        (
            json!({"schedule": "* * * * *", "successfulJobsHistoryLimit": -1, "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.successfulJobsHistoryLimit: Invalid value: \"-1\"",
        ),
        (
            json!({"schedule": "* * * * *", "failedJobsHistoryLimit": -2, "template": {"jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "spec.failedJobsHistoryLimit: Invalid value: \"-2\"",
        ),
        (
            json!({"schedule": "@daily", "concurrencyPolicy": "Allow", "template": {"imageListPullJobTemplate": {"spec": {"images": ["nginx"], "completionPolicy": {"type": "Always"}}}}}),
            "spec.concurrencyPolicy: Invalid value: \"Allow\": concurrencyPolicy should be Replace or Forbid",
        ),
        (
            json!({"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": {"imageListPullJobTemplate": {"spec": {"images": ["nginx", "nginx"], "completionPolicy": {"type": "Always"}}}}}),
            "spec.template.imageListPullJobTemplate.spec.images: Invalid value: \"nginx,nginx\": images cannot have duplicate values",
        ),
        (
            json!({"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": {"imageListPullJobTemplate": {"spec": {"images": ["Nginx"], "completionPolicy": {"type": "Always"}}}}}),
            "spec.template.imageListPullJobTemplate.spec.images: Invalid value: \"Nginx\": invalid image Nginx",
        ),
        (
            json!({"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": {"imageListPullJobTemplate": {"spec": {"images": ["nginx"], "completionPolicy": {"type": "Never"}}}}}),
            "spec.template.imageListPullJobTemplate.spec.completionPolicy.type: Invalid value: \"Never\"",
        ),
        (
            json!({"schedule": "@daily", "concurrencyPolicy": "Forbid", "template": {"imageListPullJobTemplate": {"spec": {"images": ["nginx"], "completionPolicy": {"type": "Always", "ttlSecondsAfterFinished": 5}}}}}),
            "spec.template.imageListPullJobTemplate.spec.completionPolicy.ttlSecondsAfterFinished: Invalid value: \"5\"",
        ),
    ];
    for (spec, want) in cases {
        let object = acj(spec.clone());
        let got = first_error(&object, None);
        assert!(got.starts_with(want), "{spec}:\n got {got}\nwant {want}");
    }
    let mut bad_name = acj(job_spec("* * * * *"));
    bad_name.metadata.name = Some("acj_1".into());
    assert!(first_error(&bad_name, None).starts_with("metadata.name: Invalid value: \"acj_1\""));
}

#[test]
fn updates_change_only_the_schedule_fields() {
    let mut old = acj(job_spec("* * * * *"));
    Api::default(&mut old);
    let mut new = old.clone();
    new.spec.schedule = "@every 10s".into();
    new.spec.paused = Some(true);
    new.spec.concurrency_policy = "Forbid".into();
    new.spec.successful_jobs_history_limit = Some(0);
    new.spec.failed_jobs_history_limit = Some(0);
    new.spec.starting_deadline_seconds = Some(10);
    new.spec.time_zone = Some("Asia/Tokyo".into());
    assert_eq!(Api::validate(&new, Some(&old)), Vec::new());
    let mut changed = old.clone();
    changed.spec.template = acj(json!({"schedule": "x", "template": {"broadcastJobTemplate": {"spec": {"template": pod("Never")}}}}))
        .spec
        .template;
    assert!(
        first_error(&changed, Some(&old))
            .starts_with("spec: Forbidden: updates to advancedcronjob spec for fields other than")
    );
}

#[test]
fn conversion_round_trips_and_carries_the_image_list_pull_job_template() {
    let beta = json!({
        "apiVersion": V1BETA1,
        "kind": "AdvancedCronJob",
        "metadata": {"name": "acj", "namespace": "default", "annotations": {"keep": "me"}},
        "spec": {"schedule": "@daily", "timeZone": "Asia/Tokyo", "startingDeadlineSeconds": 5,
                 "concurrencyPolicy": "Replace", "paused": false, "successfulJobsHistoryLimit": 2,
                 "failedJobsHistoryLimit": 1,
                 "template": {"imageListPullJobTemplate": {"metadata": {"labels": {"x": "y"}},
                     "spec": {"images": ["nginx"], "completionPolicy": {"type": "Always"}, "pullPolicy": {"timeoutSeconds": 60}}}}},
        "status": {"type": "ImageListPullJob", "lastScheduleTime": "2024-05-01T00:00:00Z",
                   "active": [{"kind": "ImageListPullJob", "name": "acj-1714521600", "namespace": "default"}]},
    });
    let alpha = Kind::AdvancedCronJob
        .convert(beta.clone(), V1ALPHA1)
        .expect("down");
    assert_eq!(alpha["apiVersion"], V1ALPHA1);
    assert!(
        alpha["spec"]["template"]
            .get("imageListPullJobTemplate")
            .is_none()
    );
    assert!(
        alpha["metadata"]["annotations"][keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS].is_string()
    );
    assert_eq!(alpha["status"], beta["status"]);
    let back = Kind::AdvancedCronJob.convert(alpha, V1BETA1).expect("up");
    assert_eq!(back, beta);

    // A v1alpha1 object with a Job template (fields newer than this build included) round-trips.
    let alpha = json!({
        "apiVersion": V1ALPHA1,
        "kind": "AdvancedCronJob",
        "metadata": {"name": "acj", "namespace": "default"},
        "spec": {"schedule": "*/1 * * * *", "template": {"jobTemplate": {"metadata": {"labels": {"a": "b"}},
            "spec": {"futureField": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "futureContainerField": true}]}}}}}},
    });
    let beta = Kind::AdvancedCronJob
        .convert(alpha.clone(), V1BETA1)
        .expect("up");
    assert_eq!(
        beta["spec"]["template"]["jobTemplate"],
        alpha["spec"]["template"]["jobTemplate"]
    );
    assert_eq!(
        Kind::AdvancedCronJob.convert(beta, V1ALPHA1).expect("down"),
        alpha
    );
}
