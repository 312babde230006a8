use super::*;
use proptest::prelude::*;
use serde_json::json;

use crate::kinds::Kind;

fn job(spec: serde_json::Value) -> v1beta1::BroadcastJob {
    let object = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "BroadcastJob",
        "metadata": {"name": "bcj", "namespace": "default"},
        "spec": spec,
    });
    crate::kinds::decode(object).expect("test object decodes")
}

fn template(restart: &str) -> serde_json::Value {
    json!({"spec": {"restartPolicy": restart, "containers": [{"name": "pi", "image": "perl"}]}})
}

#[test]
fn defaults_as_upstream() {
    let mut object = job(json!({"template": template("Never")}));
    Api::default(&mut object);
    assert_eq!(object.spec.completion_policy.type_, "Always");
    assert_eq!(object.spec.failure_policy.type_, "FailFast");
    assert_eq!(object.spec.parallelism, Some(IntOrString::Int(i32::MAX)));
    let pod = object.spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    assert_eq!(
        pod.restart_policy.as_deref(),
        Some("Never"),
        "an explicit restartPolicy is kept"
    );
}

#[test]
fn valid_job_passes() {
    let mut object = job(json!({"template": template("OnFailure"), "parallelism": "50%"}));
    Api::default(&mut object);
    assert_eq!(Api::validate(&object, None), Vec::new());
}

#[test]
fn invalid_jobs_name_the_field() {
    // (spec, expected start of the first error)
    let cases = [
        (
            json!({"template": template("Always")}),
            "spec.template.spec.restartPolicy: Unsupported value: \"Always\"",
        ),
        (
            json!({"template": template("Never"), "completionPolicy": {"type": "Never", "ttlSecondsAfterFinished": 5}}),
            "spec.completionPolicy.ttlSecondsAfterFinished: Invalid value: \"5\"",
        ),
        (
            json!({"template": template("Never"), "completionPolicy": {"type": "Sometimes"}}),
            "spec.completionPolicy.type: Unsupported value: \"Sometimes\"",
        ),
        (
            json!({"template": template("Never"), "parallelism": "5"}),
            "spec.parallelism: Invalid value: \"5\"",
        ),
        (
            json!({"template": template("Never"), "failurePolicy": {"type": "Retry"}}),
            "spec.failurePolicy.type: Unsupported value: \"Retry\"",
        ),
        (
            json!({"template": template("Never"), "failurePolicy": {"restartLimit": -1}}),
            "spec.failurePolicy.restartLimit: Invalid value: \"-1\"",
        ),
        (
            json!({"template": {"metadata": {"labels": {"broadcastjob-name": "x"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "b"}]}}}),
            "spec.template.metadata.labels[broadcastjob-name]: Forbidden",
        ),
    ];
    for (spec, want) in cases {
        let errors = Api::validate(&job(spec.clone()), None);
        let first = errors.first().map(ToString::to_string).unwrap_or_default();
        assert!(
            first.starts_with(want),
            "spec {spec}: got {first:?}, want {want:?}"
        );
    }
}

#[test]
fn json_dispatch_converts_both_ways() {
    let v1alpha1 = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "BroadcastJob",
        "metadata": {"name": "bcj"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "a", "image": "b", "futureField": 1}]}},
            "completionPolicy": {},
            "paused": true,
        },
    });
    let v1beta1 = crate::kinds::convert(v1alpha1.clone(), crate::kinds::V1BETA1).expect("up");
    assert_eq!(v1beta1["apiVersion"], "apps.kruise.io/v1beta1");
    assert_eq!(v1beta1["spec"]["paused"], true);
    assert_eq!(
        v1beta1["spec"]["template"]["spec"]["containers"][0]["futureField"], 1,
        "template kept verbatim"
    );
    let back = Kind::BroadcastJob
        .convert(v1beta1, crate::kinds::V1ALPHA1)
        .expect("down");
    assert_eq!(back, v1alpha1);
}

fn arb_job() -> impl Strategy<Value = v1beta1::BroadcastJob> {
    (
        proptest::option::of(prop_oneof![
            any::<i32>().prop_map(IntOrString::Int),
            (0..200i32).prop_map(|p| IntOrString::String(format!("{p}%")))
        ]),
        prop_oneof![
            Just(String::new()),
            Just("Always".to_string()),
            Just("Never".to_string())
        ],
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<i32>()),
        any::<bool>(),
        prop_oneof![
            Just(String::new()),
            Just("Continue".to_string()),
            Just("Pause".to_string())
        ],
        any::<i32>(),
        (any::<i32>(), any::<i32>(), "[a-z]{0,8}"),
    )
        .prop_map(
            |(
                parallelism,
                completion,
                deadline,
                ttl,
                paused,
                failure,
                restart_limit,
                (active, desired, phase),
            )| {
                let mut object = v1beta1::BroadcastJob::default();
                object.metadata.name = Some("bcj".into());
                object.spec.parallelism = parallelism;
                object.spec.completion_policy = v1beta1::CompletionPolicy {
                    type_: completion,
                    active_deadline_seconds: deadline,
                    ttl_seconds_after_finished: ttl,
                };
                object.spec.paused = paused;
                object.spec.failure_policy = v1beta1::FailurePolicy {
                    type_: failure,
                    restart_limit,
                };
                object.status = Some(v1beta1::BroadcastJobStatus {
                    active,
                    desired,
                    phase,
                    ..Default::default()
                });
                object
            },
        )
}

proptest! {
    #[test]
    fn conversion_round_trips(object in arb_job()) {
        let down = Api::to_v1alpha1(object.clone());
        prop_assert_eq!(Api::to_v1beta1(down), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::BroadcastJob.convert(json.clone(), crate::kinds::V1ALPHA1).expect("down");
        let back = Kind::BroadcastJob.convert(through, crate::kinds::V1BETA1).expect("up");
        prop_assert_eq!(back, json);
    }
}
