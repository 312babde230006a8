use serde_json::{Value, json};

use crate::kinds::{Kind, V1ALPHA1, V1BETA1};

fn job(spec: Value) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "ImagePullJob",
        "metadata": {"name": "j", "namespace": "ns"}, "spec": spec})
}

fn errors(kind: Kind, object: Value, old: Option<Value>) -> Vec<String> {
    kind.validate(object, old)
        .expect("decodes")
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn image_pull_job_defaults_as_upstream() {
    let out = Kind::ImagePullJob
        .default_object(job(json!({"image": "nginx:1.25"})))
        .expect("defaults");
    assert_eq!(
        out["spec"],
        json!({"image": "nginx:1.25", "completionPolicy": {"type": "Always"},
            "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3},
            "imagePullPolicy": "IfNotPresent"})
    );
    let list = json!({"apiVersion": V1BETA1, "kind": "ImageListPullJob",
        "metadata": {"name": "l", "namespace": "ns"}, "spec": {"images": ["a:1"]}});
    let out = Kind::ImageListPullJob
        .default_object(list)
        .expect("defaults");
    assert_eq!(
        out["spec"],
        json!({"images": ["a:1"], "completionPolicy": {"type": "Always"},
            "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3}})
    );
}

/// (case, spec, the error's substring or "" when valid)
#[test]
fn image_pull_job_validation_table() {
    let cases: &[(&str, Value, &str)] = &[
        (
            "minimal",
            json!({"image": "nginx:1.25", "completionPolicy": {"type": "Always"}}),
            "",
        ),
        (
            "no image",
            json!({"image": "", "completionPolicy": {"type": "Always"}}),
            "image can not be empty",
        ),
        (
            "bad image",
            json!({"image": "Nginx:1", "completionPolicy": {"type": "Always"}}),
            "invalid image",
        ),
        (
            "names and labels",
            json!({"image": "a:1", "completionPolicy": {"type": "Always"},
            "selector": {"names": ["n"], "matchLabels": {"a": "b"}}}),
            "can not set both names and labelSelector",
        ),
        (
            "duplicate names",
            json!({"image": "a:1", "completionPolicy": {"type": "Always"},
            "selector": {"names": ["n", "n"]}}),
            "duplicated name in selector names",
        ),
        (
            "both selectors",
            json!({"image": "a:1", "completionPolicy": {"type": "Always"},
            "selector": {"names": ["n"]}, "podSelector": {"matchLabels": {"a": "b"}}}),
            "can not set both selector and podSelector",
        ),
        (
            "percent parallelism",
            json!({"image": "a:1", "completionPolicy": {"type": "Always"},
            "parallelism": "50%"}),
            "does not support percentage",
        ),
        (
            "negative parallelism",
            json!({"image": "a:1", "completionPolicy": {"type": "Always"},
            "parallelism": -1}),
            "must be non-negative",
        ),
        (
            "deadline below timeout",
            json!({"image": "a:1",
            "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 100}}),
            "must be greater than pullPolicy.timeoutSeconds",
        ),
        (
            "deadline above timeout",
            json!({"image": "a:1", "pullPolicy": {"timeoutSeconds": 50},
            "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 100}}),
            "",
        ),
        (
            "never with ttl",
            json!({"image": "a:1",
            "completionPolicy": {"type": "Never", "ttlSecondsAfterFinished": 10}}),
            "can only work with Always",
        ),
        (
            "unknown completion",
            json!({"image": "a:1", "completionPolicy": {"type": "Sometimes"}}),
            "unknown type of completionPolicy",
        ),
    ];
    for (case, spec, want) in cases {
        let got = errors(Kind::ImagePullJob, job(spec.clone()), None);
        if want.is_empty() {
            assert!(got.is_empty(), "{case}: {got:?}");
        } else {
            assert_eq!(got.len(), 1, "{case}: {got:?}");
            assert!(got[0].contains(want), "{case}: {got:?}");
        }
    }
    let old =
        job(json!({"image": "a:1", "completionPolicy": {"type": "Always"}, "pullSecrets": ["s"]}));
    let new =
        job(json!({"image": "a:1", "completionPolicy": {"type": "Always"}, "pullSecrets": ["t"]}));
    let got = errors(Kind::ImagePullJob, new, Some(old));
    assert!(got[0].contains("spec.pullSecrets is immutable"), "{got:?}");
}

#[test]
fn image_list_pull_job_and_node_image_validation() {
    let list = |spec: Value| {
        json!({"apiVersion": V1BETA1, "kind": "ImageListPullJob",
            "metadata": {"name": "l", "namespace": "ns"}, "spec": spec})
    };
    let cases: &[(Value, &str)] = &[
        (
            json!({"images": ["a:1", "b:2"], "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 1}}),
            "",
        ),
        (
            json!({"images": [], "completionPolicy": {"type": "Always"}}),
            "image can not be empty",
        ),
        (
            json!({"images": ["a:1", "a:1"], "completionPolicy": {"type": "Always"}}),
            "duplicate values",
        ),
        (
            json!({"images": ["a:1"], "completionPolicy": {"type": "Never", "activeDeadlineSeconds": 5}}),
            "can only work with Always",
        ),
    ];
    for (spec, want) in cases {
        let got = errors(Kind::ImageListPullJob, list(spec.clone()), None);
        if want.is_empty() {
            assert!(got.is_empty(), "{spec}: {got:?}");
        } else {
            assert!(
                got.first().is_some_and(|e| e.contains(want)),
                "{spec}: {got:?}"
            );
        }
    }
    let node_image = |tags: Value| {
        json!({"apiVersion": V1BETA1, "kind": "NodeImage", "metadata": {"name": "n"},
            "spec": {"images": {"nginx": {"tags": tags}}}})
    };
    let ok = json!([{"tag": "1", "createdAt": "2026-01-01T00:00:00Z",
        "pullPolicy": {"ttlSecondsAfterFinished": 300}}]);
    assert!(errors(Kind::NodeImage, node_image(ok), None).is_empty());
    let no_ttl = json!([{"tag": "1", "createdAt": "2026-01-01T00:00:00Z", "pullPolicy": {}}]);
    let got = errors(Kind::NodeImage, node_image(no_ttl), None);
    assert!(
        got[0].contains("ttlSecondsAfterFinished for nginx/1 must set"),
        "{got:?}"
    );
    let twice = json!([{"tag": "1", "createdAt": "2026-01-01T00:00:00Z", "pullPolicy": {"ttlSecondsAfterFinished": 1}},
        {"tag": "1", "createdAt": "2026-01-01T00:00:00Z", "pullPolicy": {"ttlSecondsAfterFinished": 1}}]);
    let got = errors(Kind::NodeImage, node_image(twice), None);
    assert!(
        got[0].contains("duplicated tag 1 for image nginx"),
        "{got:?}"
    );
}

#[test]
fn node_image_defaults_sort_tags_and_fill_policies() {
    let object = json!({"apiVersion": V1BETA1, "kind": "NodeImage", "metadata": {"name": "n"},
        "spec": {"images": {"nginx": {"tags": [{"tag": "b"}, {"tag": "a", "createdAt": "2026-01-01T00:00:00Z"}]}}}});
    let out = Kind::NodeImage.default_object(object).expect("defaults");
    let tags = &out["spec"]["images"]["nginx"]["tags"];
    assert_eq!(tags[0]["tag"], "a");
    assert_eq!(tags[0]["createdAt"], "2026-01-01T00:00:00Z");
    assert_eq!(tags[1]["tag"], "b");
    assert!(tags[1]["createdAt"].is_string());
    assert_eq!(
        tags[1]["pullPolicy"],
        json!({"timeoutSeconds": 600, "backoffLimit": 3})
    );
}

#[test]
fn conversion_round_trips_every_field() {
    let objects = [
        json!({"apiVersion": V1BETA1, "kind": "ImagePullJob", "metadata": {"name": "j", "namespace": "ns"},
            "spec": {"image": "nginx:1", "pullSecrets": ["s"], "selector": {"names": ["n1"]},
                "parallelism": 2, "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 1},
                "completionPolicy": {"type": "Always", "ttlSecondsAfterFinished": 5},
                "sandboxConfig": {"labels": {"a": "b"}}, "imagePullPolicy": "Always"},
            "status": {"desired": 1, "active": 0, "succeeded": 1, "failed": 0, "failedNodes": ["x"],
                "message": "job has completed"}}),
        json!({"apiVersion": V1BETA1, "kind": "ImageListPullJob", "metadata": {"name": "l", "namespace": "ns"},
            "spec": {"images": ["a:1", "b:2"], "podSelector": {"matchLabels": {"app": "x"}},
                "completionPolicy": {"type": "Never"}},
            "status": {"desired": 2, "active": 1, "completed": 1, "succeeded": 1,
                "failedImageStatuses": [{"imagePullJob": "l-abc", "name": "b:2", "message": "m"}]}}),
        json!({"apiVersion": V1BETA1, "kind": "NodeImage", "metadata": {"name": "n"},
            "spec": {"images": {"nginx": {"pullSecrets": [{"namespace": "kruise-daemon-config", "name": "s", "mode": "batch"}],
                "tags": [{"tag": "1", "version": 2, "createdAt": "2026-01-01T00:00:00Z",
                    "pullPolicy": {"timeoutSeconds": 1, "backoffLimit": 1, "ttlSecondsAfterFinished": 3, "activeDeadlineSeconds": 4},
                    "ownerReferences": [{"kind": "ImagePullJob", "name": "j", "uid": "u"}], "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"desired": 1, "succeeded": 1, "failed": 0, "pulling": 0, "waiting": 0,
                "imageStatuses": {"nginx": {"tags": [{"tag": "1", "phase": "Succeeded", "version": 2, "imageID": "sha256:x", "progress": 100}]}},
                "firstSyncStatus": {"syncAt": "2026-01-01T00:00:00Z", "status": "Succeeded"}}}),
    ];
    for object in objects {
        let kind = Kind::from_kind(object["kind"].as_str().unwrap_or_default()).expect("kind");
        let down = kind.convert(object.clone(), V1ALPHA1).expect("down");
        assert_eq!(down["apiVersion"], V1ALPHA1);
        let mut same = down.clone();
        same["apiVersion"] = object["apiVersion"].clone();
        assert_eq!(
            same, object,
            "v1alpha1 carries every field of {}",
            object["kind"]
        );
        let back = kind.convert(down, V1BETA1).expect("up");
        assert_eq!(back, object);
    }
}
