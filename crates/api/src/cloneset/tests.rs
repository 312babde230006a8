use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::keys;
use crate::kinds::{Kind, V1ALPHA1, V1BETA1};
use crate::pub_types::{
    InPlaceUpdateStrategy, Lifecycle, LifecycleHook, UpdatePriorityOrderTerm,
    UpdatePriorityStrategy, UpdateScatterTerm,
};
use crate::testutil::merge;

fn base_spec() -> Value {
    json!({
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]},
        },
        "updateStrategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": "20%", "maxSurge": 0, "partition": 0},
        },
    })
}

fn cloneset(spec: Value) -> v1beta1::CloneSet {
    let object = json!({
        "apiVersion": V1BETA1,
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    });
    crate::kinds::decode(object).expect("test object decodes")
}

/// The base spec with `patch` merged in, defaulted as the webhook does before validating.
fn defaulted(patch: Value) -> v1beta1::CloneSet {
    let mut spec = base_spec();
    merge(&mut spec, &patch);
    let mut object = cloneset(spec);
    Api::default(&mut object);
    object
}

fn error_strings(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn defaults_as_upstream() {
    let mut object = cloneset(json!({
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
    }));
    Api::default(&mut object);
    let spec = &object.spec;
    assert_eq!(spec.replicas, Some(1), "replicas");
    assert_eq!(
        spec.revision_history_limit,
        Some(10),
        "revisionHistoryLimit"
    );
    assert_eq!(
        spec.update_strategy.type_, "RollingUpdate",
        "updateStrategy.type"
    );
    let rolling = spec
        .update_strategy
        .rolling_update
        .as_ref()
        .expect("rollingUpdate is created");
    assert_eq!(rolling.pod_update_policy, "ReCreate", "podUpdatePolicy");
    assert_eq!(rolling.partition, Some(IntOrString::Int(0)), "partition");
    assert_eq!(
        rolling.max_unavailable,
        Some(IntOrString::String("20%".into())),
        "maxUnavailable"
    );
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(0)), "maxSurge");
    assert_eq!(
        rolling.in_place_update_strategy, None,
        "no inPlaceUpdateStrategy for ReCreate"
    );
    assert!(
        !spec.scale_strategy.enable_pvc_reuse,
        "enablePVCReuse defaults to false"
    );
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("Always"),
        "template defaults"
    );
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    let pvc_phase = spec.volume_claim_templates[0]
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref());
    assert_eq!(pvc_phase, Some("Pending"), "PVC template defaults");

    // In-place policies get an (empty) inPlaceUpdateStrategy; explicit values are kept.
    for policy in ["InPlaceIfPossible", "InPlaceOnly"] {
        let mut object = cloneset(json!({
            "replicas": 0,
            "revisionHistoryLimit": 3,
            "template": {},
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": policy, "partition": "50%", "maxUnavailable": 1, "maxSurge": "10%"}},
        }));
        Api::default(&mut object);
        assert_eq!(object.spec.replicas, Some(0));
        assert_eq!(object.spec.revision_history_limit, Some(3));
        let rolling = object
            .spec
            .update_strategy
            .rolling_update
            .as_ref()
            .expect("rolling");
        assert_eq!(
            rolling.in_place_update_strategy,
            Some(InPlaceUpdateStrategy::default()),
            "{policy}"
        );
        assert_eq!(rolling.partition, Some(IntOrString::String("50%".into())));
        assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(rolling.max_surge, Some(IntOrString::String("10%".into())));
    }

    // OnDelete gets no rollingUpdate.
    let mut object = cloneset(json!({"template": {}, "updateStrategy": {"type": "OnDelete"}}));
    Api::default(&mut object);
    assert_eq!(object.spec.update_strategy.rolling_update, None);

    let mut once = defaulted(json!({}));
    let twice = {
        Api::default(&mut once);
        once.clone()
    };
    Api::default(&mut once);
    assert_eq!(once, twice, "defaulting is idempotent");
}

#[test]
fn valid_cloneset_passes() {
    let object = defaulted(json!({
        "scaleStrategy": {"podsToDelete": ["web-a", "web-b"], "maxUnavailable": "10%"},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
        "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:alpine", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
        "updateStrategy": {"rollingUpdate": {
            "partition": "100%",
            "priorityStrategy": {"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"k": "v"}}}]},
            "scatterStrategy": [{"key": "zone", "value": "a"}],
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5, "imagePreDownloadParallelism": "3", "imagePreDownloadTimeoutSeconds": 600},
        }},
        "lifecycle": {"preDelete": {"finalizersHandler": ["example.com/hook"], "labelsHandler": {"example.com/hook": "true"}}},
        "minReadySeconds": 5,
        "progressDeadlineSeconds": 600,
    }));
    assert_eq!(
        error_strings(&Api::validate(&object, None)),
        Vec::<String>::new()
    );
    let on_delete =
        defaulted(json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}));
    assert_eq!(
        error_strings(&Api::validate(&on_delete, None)),
        Vec::<String>::new()
    );
    let zero = defaulted(
        json!({"replicas": 0, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}),
    );
    assert_eq!(
        error_strings(&Api::validate(&zero, None)),
        Vec::<String>::new(),
        "no unavailability needed at 0 replicas"
    );
}

#[test]
fn invalid_clonesets_name_the_field() {
    let rolling = "spec.updateStrategy.rollingUpdate";
    // (patch on the base spec, expected start of the first error)
    let cases: Vec<(Value, String)> = vec![
        (json!({"replicas": -1}), "spec.replicas: Invalid value: \"-1\"".into()),
        (json!({"selector": null}), "spec.selector: Required value".into()),
        (json!({"selector": {"matchLabels": null}}), "spec.selector: Invalid value".into()),
        (json!({"selector": {"matchLabels": {"app": "db"}}}), "spec.template.metadata.labels: Invalid value".into()),
        (
            json!({"template": {"spec": {"restartPolicy": "Never"}}}),
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\"".into(),
        ),
        (
            json!({"template": {"spec": {"activeDeadlineSeconds": 10}}}),
            "spec.template.spec.activeDeadlineSeconds: Forbidden".into(),
        ),
        (
            json!({"scaleStrategy": {"podsToDelete": ["p", "p"]}}),
            "spec.scaleStrategy.podsToDelete[1]: Duplicate value: \"p\"".into(),
        ),
        (
            json!({"scaleStrategy": {"maxUnavailable": "x"}}),
            "spec.scaleStrategy.maxUnavailable: Invalid value: \"x\"".into(),
        ),
        (
            json!({"updateStrategy": {"type": "Canary"}}),
            "spec.updateStrategy.type: Unsupported value: \"Canary\"".into(),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "Hot"}}}),
            format!("{rolling}.podUpdatePolicy: Unsupported value: \"Hot\""),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"partition": "150%"}}}),
            format!("{rolling}.partition: Invalid value: \"150%\": must not be greater than 100%"),
        ),
        (json!({"updateStrategy": {"rollingUpdate": {"partition": -1}}}), format!("{rolling}.partition: Invalid value: \"-1\"")),
        (
            json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}}),
            format!("{rolling}.maxUnavailable: Invalid value: \"0\": maxUnavailable and maxSurge should not both be less than 1"),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%", "maxSurge": "0%"}}}),
            format!("{rolling}.maxUnavailable: Invalid value: \"0%\": maxUnavailable and maxSurge should not both be less than 1"),
        ),
        (json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": "5"}}}), format!("{rolling}.maxUnavailable: Invalid value: \"5\"")),
        (
            json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly", "maxSurge": 1}}}),
            format!("{rolling}.maxSurge: Invalid value: \"1\": can not use maxSurge with podUpdatePolicy InPlaceOnly"),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"priorityStrategy": {
                "orderPriority": [{"orderedKey": "k"}],
                "weightPriority": [{"weight": 1, "matchSelector": {"matchLabels": {"a": "b"}}}],
            }}}}),
            format!("{rolling}.priorityStrategy: Invalid value"),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"priorityStrategy": {
                "weightPriority": [{"weight": 101, "matchSelector": {"matchLabels": {"a": "b"}}}],
            }}}}),
            format!("{rolling}.priorityStrategy.weightPriority[0].weight: Invalid value: \"101\""),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"scatterStrategy": [{"key": "zone", "value": "a"}, {"key": "zone", "value": "a"}]}}}),
            format!("{rolling}.scatterStrategy[1]: Duplicate value: \"zone:a\""),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"scatterStrategy": [{"key": "", "value": "a"}]}}}),
            format!("{rolling}.scatterStrategy[0].key: Required value"),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"inPlaceUpdateStrategy": {"imagePreDownloadParallelism": "50%"}}}}),
            format!("{rolling}.inPlaceUpdateStrategy.imagePreDownloadParallelism: Invalid value: \"50%\""),
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"inPlaceUpdateStrategy": {"imagePreDownloadTimeoutSeconds": -1}}}}),
            format!("{rolling}.inPlaceUpdateStrategy.imagePreDownloadTimeoutSeconds: Invalid value: \"-1\""),
        ),
        (
            json!({"lifecycle": {"preDelete": {"labelsHandler": {"bad key": "x"}}}}),
            "spec.lifecycle.preDelete.labelsHandler[bad key]: Invalid value".into(),
        ),
        (
            json!({"minReadySeconds": 10, "progressDeadlineSeconds": 5}),
            "spec.progressDeadlineSeconds: Invalid value: \"5\": must be greater than minReadySeconds".into(),
        ),
        (
            json!({"volumeClaimTemplates": [{"metadata": {"name": "cache"}}], "template": {"spec": {"volumes": [{"name": "cache", "emptyDir": {}}]}}}),
            "spec.volumeClaimTemplates[0].metadata.name: Duplicate value: \"cache\"".into(),
        ),
        (
            json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}}}),
            "spec.template.spec.containers[0].volumeMounts[0].name: Invalid value: \"data\"".into(),
        ),
    ];
    assert!(cases.len() >= 15);
    for (patch, want) in cases {
        let object = defaulted(patch.clone());
        let errors = error_strings(&Api::validate(&object, None));
        let first = errors.first().cloned().unwrap_or_default();
        assert!(
            first.starts_with(&want),
            "patch {patch}: got {errors:?}, want {want:?}"
        );
    }

    let mut badly_named = defaulted(json!({}));
    badly_named.metadata.name = Some("Bad_Name".into());
    let errors = error_strings(&Api::validate(&badly_named, None));
    assert!(
        errors[0].starts_with("metadata.name: Invalid value: \"Bad_Name\""),
        "{errors:?}"
    );
}

#[test]
fn update_rules() {
    let in_place_only =
        json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}});
    let old = defaulted(in_place_only.clone());
    let with = |patch: Value| {
        let mut spec = in_place_only.clone();
        merge(&mut spec, &patch);
        defaulted(spec)
    };
    // (patch on the old object's spec, expected start of the first error or "" for none)
    let cases = [
        (
            json!({"replicas": 5, "minReadySeconds": 3, "scaleStrategy": {"podsToDelete": ["a"]}}),
            "",
        ),
        (
            json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}),
            "",
        ),
        (
            json!({"selector": {"matchLabels": {"app": "web", "tier": "front"}}, "template": {"metadata": {"labels": {"tier": "front"}}}}),
            "spec: Forbidden: updates to cloneset spec for fields other than 'replicas', 'template'",
        ),
        (
            json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:alpine", "env": [{"name": "A", "value": "1"}]}]}}}),
            "spec.template.spec: Forbidden: only allowed to update images in spec for InPlaceOnly, but found add /containers/0/env",
        ),
        (
            json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}, {"name": "side", "image": "busybox"}]}}}),
            "spec.template.spec: Forbidden: only allowed to update images in spec for InPlaceOnly, but found add /containers/1",
        ),
        (
            json!({"template": {"spec": {"terminationGracePeriodSeconds": 5}}}),
            "spec.template.spec: Forbidden: only allowed to update images in spec for InPlaceOnly, but found replace /terminationGracePeriodSeconds",
        ),
    ];
    for (patch, want) in cases {
        let errors = error_strings(&Api::validate(&with(patch.clone()), Some(&old)));
        if want.is_empty() {
            assert_eq!(errors, Vec::<String>::new(), "patch {patch}");
        } else {
            assert!(
                errors.first().is_some_and(|e| e.starts_with(want)),
                "patch {patch}: got {errors:?}, want {want:?}"
            );
        }
    }
    // Any template change is fine under the other policies.
    let old = defaulted(json!({}));
    let new = defaulted(
        json!({"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:alpine", "args": ["-g"]}]}}}),
    );
    assert_eq!(
        error_strings(&Api::validate(&new, Some(&old))),
        Vec::<String>::new()
    );
}

fn v1alpha1_object(spec: Value, metadata: Value) -> Value {
    json!({"apiVersion": V1ALPHA1, "kind": "CloneSet", "metadata": metadata, "spec": spec})
}

#[test]
fn conversion_follows_upstream_mapping() {
    let alpha = v1alpha1_object(
        json!({
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:alpine"}]}},
            "scaleStrategy": {"podsToDelete": ["web-x"]},
            "updateStrategy": {
                "type": "InPlaceIfPossible",
                "partition": 1,
                "maxUnavailable": "20%",
                "maxSurge": 0,
                "paused": true,
                "scatterStrategy": [{"key": "zone", "value": "a"}],
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5},
            },
        }),
        json!({
            "name": "web",
            "labels": {"app": "web", LABEL_SCALING_EXCLUDE_PREPARING_DELETE: "true"},
            "annotations": {
                keys::ANNOTATION_IMAGE_PREDOWNLOAD_PARALLELISM: "3",
                keys::ANNOTATION_IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS: "300",
                keys::ANNOTATION_IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS: "1",
                "note": "kept",
            },
        }),
    );
    let beta = crate::kinds::convert(alpha.clone(), V1BETA1).expect("up");
    assert_eq!(
        beta["metadata"]["labels"],
        json!({"app": "web"}),
        "the label became the spec field"
    );
    assert_eq!(
        beta["metadata"]["annotations"],
        json!({"note": "kept"}),
        "the annotations became spec fields"
    );
    assert_eq!(
        beta["spec"]["scaleStrategy"],
        json!({"podsToDelete": ["web-x"], "enablePVCReuse": true, "excludePreparingDelete": true}),
        "disablePVCReuse false is enablePVCReuse true"
    );
    assert_eq!(
        beta["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {
            "partition": 1,
            "maxUnavailable": "20%",
            "maxSurge": 0,
            "podUpdatePolicy": "InPlaceIfPossible",
            "paused": true,
            "scatterStrategy": [{"key": "zone", "value": "a"}],
            "inPlaceUpdateStrategy": {
                "gracePeriodSeconds": 5,
                "imagePreDownloadParallelism": 3,
                "imagePreDownloadTimeoutSeconds": 300,
                "imagePreDownloadMinUpdatedReadyPods": 1,
            },
        }})
    );
    let back = Kind::CloneSet.convert(beta, V1ALPHA1).expect("down");
    assert_eq!(back["metadata"], alpha["metadata"]);
    assert_eq!(
        back["spec"]["updateStrategy"],
        alpha["spec"]["updateStrategy"]
    );

    // OnDelete has no rollingUpdate; ReCreate is a RollingUpdate.
    for (alpha_type, beta_type, policy) in [
        ("OnDelete", "OnDelete", None),
        ("ReCreate", "RollingUpdate", Some("ReCreate")),
    ] {
        let object = v1alpha1_object(
            json!({"template": {}, "updateStrategy": {"type": alpha_type}}),
            json!({"name": "a"}),
        );
        let beta = Kind::CloneSet.convert(object, V1BETA1).expect("up");
        assert_eq!(beta["spec"]["updateStrategy"]["type"], beta_type);
        assert_eq!(
            beta["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"].as_str(),
            policy
        );
        assert_eq!(
            beta["metadata"].get("annotations"),
            None,
            "nothing to stash"
        );
    }

    // A defaulted v1beta1 object converts down with nothing stashed.
    let mut object = defaulted(json!({"scaleStrategy": {"excludePreparingDelete": true}}));
    object.metadata.annotations = None;
    let down = Api::to_v1alpha1(object.clone());
    assert_eq!(
        down.metadata.annotations, None,
        "no stash for a defaulted object"
    );
    assert_eq!(down.spec.update_strategy.type_, "InPlaceIfPossible");
    assert_eq!(
        down.spec.update_strategy.in_place_update_strategy,
        Some(InPlaceUpdateStrategy::default())
    );
    assert!(down.spec.scale_strategy.disable_pvc_reuse);
    assert_eq!(
        down.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SCALING_EXCLUDE_PREPARING_DELETE))
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(Api::to_v1beta1(down), object);
}

#[test]
fn stashed_fields_survive_and_edits_win() {
    // v1beta1 OnDelete with rolling-update settings: v1alpha1 cannot say both.
    let mut object = defaulted(json!({}));
    object.spec.update_strategy.type_ = "OnDelete".into();
    let down = Api::to_v1alpha1(object.clone());
    assert_eq!(down.spec.update_strategy.type_, "OnDelete");
    assert!(
        down.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS)),
        "stashed"
    );
    assert_eq!(Api::to_v1beta1(down.clone()), object, "restored");

    // A v1alpha1 client edits the update strategy: its edit wins, the stash is dropped.
    let mut edited = down;
    edited.spec.update_strategy.type_ = "InPlaceOnly".into();
    let up = Api::to_v1beta1(edited);
    assert_eq!(up.metadata.annotations, None);
    let rolling = up
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .expect("rolling");
    assert_eq!(
        (
            up.spec.update_strategy.type_.as_str(),
            rolling.pod_update_policy.as_str()
        ),
        ("RollingUpdate", "InPlaceOnly")
    );

    // v1alpha1 OnDelete with flat fields, and a non-canonical annotation, are stashed in v1beta1.
    let alpha: v1alpha1::CloneSet = crate::kinds::decode(v1alpha1_object(
        json!({"template": {}, "updateStrategy": {"type": "OnDelete", "partition": 3}}),
        json!({"name": "a", "annotations": {keys::ANNOTATION_IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS: "0600"}}),
    ))
    .expect("decodes");
    let up = Api::to_v1beta1(alpha.clone());
    assert_eq!(
        up.spec.update_strategy.rolling_update, None,
        "OnDelete has no rollingUpdate in v1beta1"
    );
    assert!(
        up.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS))
    );
    assert_eq!(Api::to_v1alpha1(up), alpha);
}

#[test]
fn json_dispatch_converts_both_ways() {
    let v1alpha1 = v1alpha1_object(
        json!({
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "b", "futureField": 1}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"futurePVCField": true}}],
            "scaleStrategy": {"disablePVCReuse": true},
            "updateStrategy": {"type": "InPlaceOnly", "maxUnavailable": 1},
        }),
        json!({"name": "web"}),
    );
    let v1beta1 = crate::kinds::convert(v1alpha1.clone(), V1BETA1).expect("up");
    assert_eq!(v1beta1["apiVersion"], V1BETA1);
    assert_eq!(
        v1beta1["spec"]["template"]["spec"]["containers"][0]["futureField"], 1,
        "template kept verbatim"
    );
    assert_eq!(
        v1beta1["spec"]["volumeClaimTemplates"][0]["spec"]["futurePVCField"], true,
        "PVC templates kept verbatim"
    );
    assert_eq!(
        v1beta1["spec"]["scaleStrategy"],
        json!({}),
        "disablePVCReuse true is enablePVCReuse false"
    );
    assert_eq!(
        v1beta1["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"],
        "InPlaceOnly"
    );
    let back = Kind::CloneSet.convert(v1beta1, V1ALPHA1).expect("down");
    assert_eq!(back, v1alpha1);
}

#[test]
fn crd_matches_upstream_markers() {
    let crd = Api::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["clone".to_string()]));
    assert_eq!(crd.spec.scope, "Namespaced");
    for version in &crd.spec.versions {
        let scale = version
            .subresources
            .as_ref()
            .and_then(|s| s.scale.as_ref())
            .expect("scale subresource");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.labelSelector")
        );
        let columns: Vec<(&str, Option<i32>)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.priority))
            .collect();
        assert_eq!(
            columns,
            [
                ("DESIRED", None),
                ("UPDATED", None),
                ("UPDATED_READY", None),
                ("UPDATED_AVAILABLE", None),
                ("READY", None),
                ("TOTAL", None),
                ("AGE", None),
                ("CONTAINERS", Some(1)),
                ("IMAGES", Some(1)),
                ("SELECTOR", Some(1)),
            ]
        );
        let schema = serde_json::to_value(&version.schema).expect("schema");
        let spec = schema
            .pointer("/openAPIV3Schema/properties/spec")
            .expect("spec schema");
        assert_eq!(
            spec["required"],
            json!(["selector", "template"]),
            "{}",
            version.name
        );
        assert_eq!(
            spec.pointer("/properties/volumeClaimTemplates/x-kubernetes-preserve-unknown-fields"),
            Some(&json!(true))
        );
    }
}

// ---- property tests: conversion is lossless both ways ----

fn arb_int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (-3..200i32).prop_map(IntOrString::Int),
        prop_oneof![Just("20%"), Just("150%"), Just("5"), Just("x"), Just("")]
            .prop_map(|s| IntOrString::String(s.into())),
    ]
}

fn arb_opt_int_or_string() -> impl Strategy<Value = Option<IntOrString>> {
    proptest::option::of(arb_int_or_string())
}

/// Values a pre-download annotation may hold, canonical or not.
fn arb_annotation_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("2"),
        Just("05"),
        Just(""),
        Just("abc"),
        Just("-1"),
        Just("+3"),
        Just("99999999999"),
        Just("7%"),
        Just("600"),
    ]
    .prop_map(String::from)
}

/// A label or annotation map (absent or non-empty), drawn from `keys` and `values`.
fn arb_meta_map(
    keys: Vec<&'static str>,
    values: BoxedStrategy<String>,
) -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    proptest::collection::btree_map(
        proptest::sample::select(keys).prop_map(String::from),
        values,
        0..4,
    )
    .prop_map(|map| if map.is_empty() { None } else { Some(map) })
}

fn arb_labels() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    let values = prop_oneof![Just("true"), Just("false"), Just("web"), Just("")]
        .prop_map(String::from)
        .boxed();
    arb_meta_map(
        vec![LABEL_SCALING_EXCLUDE_PREPARING_DELETE, "app", "tier"],
        values,
    )
}

fn arb_annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    arb_meta_map(
        vec![
            keys::ANNOTATION_IMAGE_PREDOWNLOAD_PARALLELISM,
            keys::ANNOTATION_IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS,
            keys::ANNOTATION_IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS,
            "note",
        ],
        arb_annotation_value().boxed(),
    )
}

fn arb_in_place() -> impl Strategy<Value = Option<InPlaceUpdateStrategy>> {
    proptest::option::of(
        (
            prop_oneof![Just(0), Just(5), any::<i32>()],
            proptest::option::of(prop_oneof![
                (-2..5i32).prop_map(IntOrString::Int),
                prop_oneof![Just("3"), Just("03"), Just("50%"), Just("abc")]
                    .prop_map(|s| IntOrString::String(s.into())),
            ]),
            proptest::option::of(-1..700i32),
            proptest::option::of(-1..5i32),
        )
            .prop_map(
                |(grace, parallelism, timeout, min_ready)| InPlaceUpdateStrategy {
                    grace_period_seconds: grace,
                    image_pre_download_parallelism: parallelism,
                    image_pre_download_timeout_seconds: timeout,
                    image_pre_download_min_updated_ready_pods: min_ready,
                },
            ),
    )
}

fn arb_priority() -> impl Strategy<Value = Option<UpdatePriorityStrategy>> {
    prop_oneof![
        Just(None),
        Just(Some(UpdatePriorityStrategy::default())),
        Just(Some(UpdatePriorityStrategy {
            order_priority: vec![UpdatePriorityOrderTerm {
                ordered_key: "rank".into()
            }],
            ..Default::default()
        })),
    ]
}

fn arb_scatter() -> impl Strategy<Value = Vec<UpdateScatterTerm>> {
    proptest::collection::vec(
        prop_oneof![Just("a"), Just("b")].prop_map(|v| UpdateScatterTerm {
            key: "zone".into(),
            value: v.into(),
        }),
        0..3,
    )
}

fn arb_type(values: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(values).prop_map(String::from)
}

/// Spec fields outside the strategies, metadata and status.
#[allow(clippy::type_complexity)]
fn arb_common() -> impl Strategy<
    Value = (
        Option<BTreeMap<String, String>>,
        Option<BTreeMap<String, String>>,
        Option<i32>,
        Option<LabelSelector>,
        (i32, Option<i32>, Option<i32>, Option<Lifecycle>),
        Option<v1beta1::CloneSetStatus>,
    ),
> {
    (
        arb_labels(),
        arb_annotations(),
        proptest::option::of(0..10i32),
        proptest::option::of(Just(LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        })),
        (
            0..100i32,
            proptest::option::of(0..20i32),
            proptest::option::of(any::<i32>()),
            prop_oneof![
                Just(None),
                Just(Some(Lifecycle {
                    pre_delete: Some(LifecycleHook {
                        mark_pod_not_ready: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                })),
            ],
        ),
        proptest::option::of(
            (
                0..5i32,
                0..5i32,
                "[a-z]{0,6}",
                proptest::option::of(0..3i32),
                any::<i64>(),
            )
                .prop_map(|(replicas, updated, revision, collisions, generation)| {
                    v1beta1::CloneSetStatus {
                        observed_generation: generation,
                        replicas,
                        ready_replicas: replicas,
                        updated_replicas: updated,
                        update_revision: revision.clone(),
                        current_revision: revision,
                        collision_count: collisions,
                        conditions: vec![v1beta1::CloneSetCondition {
                            type_: "Progressing".into(),
                            status: "True".into(),
                            reason: "CloneSetAvailable".into(),
                            ..Default::default()
                        }],
                        label_selector: "app=web".into(),
                        ..Default::default()
                    }
                }),
        ),
    )
}

pub(crate) fn arb_v1beta1() -> impl Strategy<Value = v1beta1::CloneSet> {
    let rolling = proptest::option::of(
        (
            arb_opt_int_or_string(),
            arb_opt_int_or_string(),
            arb_opt_int_or_string(),
            arb_type(&[
                "",
                "ReCreate",
                "InPlaceIfPossible",
                "InPlaceOnly",
                "OnDelete",
                "Bogus",
            ]),
            any::<bool>(),
            arb_priority(),
            arb_scatter(),
            arb_in_place(),
        )
            .prop_map(
                |(
                    partition,
                    max_unavailable,
                    max_surge,
                    policy,
                    paused,
                    priority,
                    scatter,
                    in_place,
                )| {
                    v1beta1::RollingUpdateCloneSetStrategy {
                        partition,
                        max_unavailable,
                        max_surge,
                        pod_update_policy: policy,
                        paused,
                        priority_strategy: priority,
                        scatter_strategy: scatter,
                        in_place_update_strategy: in_place,
                    }
                },
            ),
    );
    let scale = (
        proptest::collection::vec(
            prop_oneof![Just("p1"), Just("p2")].prop_map(String::from),
            0..3,
        ),
        arb_opt_int_or_string(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(pods, max_unavailable, reuse, exclude)| v1beta1::CloneSetScaleStrategy {
                pods_to_delete: pods,
                max_unavailable,
                enable_pvc_reuse: reuse,
                exclude_preparing_delete: exclude,
            },
        );
    (
        arb_common(),
        arb_type(&["", "RollingUpdate", "OnDelete", "Bogus"]),
        rolling,
        scale,
    )
        .prop_map(
            |(
                (
                    labels,
                    annotations,
                    replicas,
                    selector,
                    (min_ready, history, deadline, lifecycle),
                    status,
                ),
                type_,
                rolling,
                scale,
            )| {
                let mut object = v1beta1::CloneSet::default();
                object.metadata.name = Some("web".into());
                object.metadata.labels = labels;
                object.metadata.annotations = annotations;
                object.spec = v1beta1::CloneSetSpec {
                    replicas,
                    selector,
                    min_ready_seconds: min_ready,
                    revision_history_limit: history,
                    progress_deadline_seconds: deadline,
                    lifecycle,
                    scale_strategy: scale,
                    update_strategy: v1beta1::CloneSetUpdateStrategy {
                        type_,
                        rolling_update: rolling,
                    },
                    ..Default::default()
                };
                object.status = status;
                object
            },
        )
}

pub(crate) fn arb_v1alpha1() -> impl Strategy<Value = v1alpha1::CloneSet> {
    let update = (
        arb_type(&[
            "",
            "ReCreate",
            "InPlaceIfPossible",
            "InPlaceOnly",
            "OnDelete",
            "Bogus",
        ]),
        arb_opt_int_or_string(),
        arb_opt_int_or_string(),
        arb_opt_int_or_string(),
        any::<bool>(),
        arb_priority(),
        arb_scatter(),
        arb_in_place(),
    )
        .prop_map(
            |(
                type_,
                partition,
                max_unavailable,
                max_surge,
                paused,
                priority,
                scatter,
                in_place,
            )| {
                v1alpha1::CloneSetUpdateStrategy {
                    type_,
                    partition,
                    max_unavailable,
                    max_surge,
                    paused,
                    priority_strategy: priority,
                    scatter_strategy: scatter,
                    in_place_update_strategy: in_place,
                }
            },
        );
    let scale = (
        proptest::collection::vec(
            prop_oneof![Just("p1"), Just("p2")].prop_map(String::from),
            0..3,
        ),
        arb_opt_int_or_string(),
        any::<bool>(),
    )
        .prop_map(
            |(pods, max_unavailable, disable)| v1alpha1::CloneSetScaleStrategy {
                pods_to_delete: pods,
                max_unavailable,
                disable_pvc_reuse: disable,
            },
        );
    (arb_common(), update, scale).prop_map(
        |(
            (
                labels,
                annotations,
                replicas,
                selector,
                (min_ready, history, deadline, lifecycle),
                status,
            ),
            update,
            scale,
        )| {
            let mut object = v1alpha1::CloneSet::default();
            object.metadata.name = Some("web".into());
            object.metadata.labels = labels;
            object.metadata.annotations = annotations;
            object.spec = v1alpha1::CloneSetSpec {
                replicas,
                selector,
                min_ready_seconds: min_ready,
                revision_history_limit: history,
                progress_deadline_seconds: deadline,
                lifecycle,
                scale_strategy: scale,
                update_strategy: update,
                ..Default::default()
            };
            object.status = status;
            object
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn v1beta1_round_trips(object in arb_v1beta1()) {
        let down = Api::to_v1alpha1(object.clone());
        prop_assert_eq!(Api::to_v1beta1(down), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::CloneSet.convert(json.clone(), V1ALPHA1).expect("down");
        let back = Kind::CloneSet.convert(through, V1BETA1).expect("up");
        prop_assert_eq!(back, json);
    }

    #[test]
    fn v1alpha1_round_trips(object in arb_v1alpha1()) {
        let up = Api::to_v1beta1(object.clone());
        prop_assert_eq!(Api::to_v1alpha1(up), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::CloneSet.convert(json.clone(), V1BETA1).expect("up");
        let back = Kind::CloneSet.convert(through, V1ALPHA1).expect("down");
        prop_assert_eq!(back, json);
    }

    /// A stored (defaulted) v1beta1 object needs no stash to be read in v1alpha1.
    #[test]
    fn defaulted_objects_need_no_stash(object in arb_v1beta1()) {
        let mut object = object;
        object.metadata.annotations = None;
        object.metadata.labels = None;
        if let Some(rolling) = object.spec.update_strategy.rolling_update.as_mut()
            && let Some(in_place) = rolling.in_place_update_strategy.as_mut()
        {
            // Pre-download settings become annotations; their canonical spellings fold back.
            in_place.image_pre_download_parallelism = in_place.image_pre_download_parallelism.take().map(|p| match p {
                IntOrString::String(s) => IntOrString::String(format!("{s}x")),
                int => int,
            });
        }
        object.spec.update_strategy.type_ = if object.spec.update_strategy.type_ == "OnDelete" { "OnDelete".into() } else { String::new() };
        if object.spec.update_strategy.type_ == "OnDelete" {
            object.spec.update_strategy.rolling_update = None;
        }
        if let Some(rolling) = object.spec.update_strategy.rolling_update.as_mut()
            && !matches!(rolling.pod_update_policy.as_str(), "ReCreate" | "InPlaceIfPossible" | "InPlaceOnly")
        {
            rolling.pod_update_policy = String::new();
        }
        Api::default(&mut object);
        let down = Api::to_v1alpha1(object.clone());
        let stashed = down.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS));
        prop_assert!(!stashed, "{:?}", down.metadata.annotations);
        prop_assert_eq!(Api::to_v1beta1(down), object);
    }
}
