use super::*;
use proptest::prelude::*;
use serde_json::json;

use crate::kinds::Kind;
use crate::pub_types::{Lifecycle, LifecycleHook};
use crate::testutil::{self, first_error};

fn sts(spec: serde_json::Value) -> v1beta1::StatefulSet {
    testutil::decode_v1beta1("StatefulSet", "web", spec)
}

fn template() -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "containers": [{"name": "nginx", "image": "nginx:1.25"}],
        },
    })
}

/// A valid spec (before defaulting) with `extra` merged in at the top level.
fn spec_with(extra: serde_json::Value) -> serde_json::Value {
    let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "template": template()});
    testutil::with_top_level(spec, &extra)
}

fn defaulted(extra: serde_json::Value) -> v1beta1::StatefulSet {
    let mut object = sts(spec_with(extra));
    Api::default(&mut object);
    object
}

#[test]
fn defaults_as_upstream() {
    let object = defaulted(json!({
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
    }));
    let spec = &object.spec;
    assert_eq!(spec.pod_management_policy, "OrderedReady");
    assert_eq!(spec.update_strategy.type_, "RollingUpdate");
    let rolling = spec
        .update_strategy
        .rolling_update
        .as_ref()
        .expect("rollingUpdate defaulted");
    assert_eq!(rolling.partition, Some(0));
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(rolling.pod_update_policy, "ReCreate");
    assert_eq!(rolling.min_ready_seconds, Some(0));
    assert!(!rolling.paused);
    let retention = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .expect("retention defaulted");
    assert_eq!(
        (
            retention.when_deleted.as_str(),
            retention.when_scaled.as_str()
        ),
        ("Retain", "Retain")
    );
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(
        spec.volume_claim_update_strategy.type_, "",
        "only with gate StatefulSetAutoResizePVCGate"
    );
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    let claim_status = spec.volume_claim_templates[0]
        .status
        .as_ref()
        .expect("claim status");
    assert_eq!(claim_status.phase.as_deref(), Some("Pending"));
}

#[test]
fn defaults_keep_explicit_values() {
    let object = defaulted(json!({
        "replicas": 0,
        "podManagementPolicy": "Parallel",
        "revisionHistoryLimit": 3,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"},
        "updateStrategy": {"rollingUpdate": {"partition": 2, "maxUnavailable": "50%", "podUpdatePolicy": "InPlaceOnly"}},
    }));
    let spec = &object.spec;
    assert_eq!(
        (spec.replicas, spec.revision_history_limit),
        (Some(0), Some(3))
    );
    assert_eq!(spec.pod_management_policy, "Parallel");
    let rolling = spec
        .update_strategy
        .rolling_update
        .as_ref()
        .expect("rollingUpdate");
    assert_eq!(rolling.partition, Some(2));
    assert_eq!(
        rolling.max_unavailable,
        Some(IntOrString::String("50%".into()))
    );
    assert_eq!(rolling.pod_update_policy, "InPlaceOnly");
    let retention = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .expect("retention");
    assert_eq!(
        (
            retention.when_deleted.as_str(),
            retention.when_scaled.as_str()
        ),
        ("Delete", "Retain")
    );
}

#[test]
fn on_delete_gets_no_rolling_update() {
    let object = defaulted(json!({"updateStrategy": {"type": "OnDelete"}}));
    assert_eq!(object.spec.update_strategy.rolling_update, None);
    assert_eq!(Api::validate(&object, None), Vec::new());
}

#[test]
fn valid_set_passes() {
    let object = defaulted(json!({
        "podManagementPolicy": "Parallel",
        "reserveOrdinals": [1, "3-5"],
        "scaleStrategy": {"maxUnavailable": "10%"},
        "updateStrategy": {"rollingUpdate": {
            "maxUnavailable": 2,
            "podUpdatePolicy": "InPlaceIfPossible",
            "unorderedUpdate": {"priorityStrategy": {"orderPriority": [{"orderedKey": "rank"}]}},
            "minReadySeconds": 300,
        }},
    }));
    assert_eq!(Api::validate(&object, None), Vec::new());
}

#[test]
fn invalid_sets_name_the_field() {
    let no_gate = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
    });
    // (extra spec fields, expected start of the first error)
    let cases = [
        (
            json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"2\": can only work with Parallel",
        ),
        (
            json!({"podManagementPolicy": "Parallel", "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"0\": should not be less than 1",
        ),
        (
            json!({"podManagementPolicy": "Parallel", "updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": should not be less than 1",
        ),
        (
            json!({"template": no_gate.clone(), "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}}}),
            "spec.template.spec.readinessGates: Invalid value: \"\": must contains InPlaceUpdateReady",
        ),
        (
            json!({"template": no_gate, "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}}),
            "spec.template.spec.readinessGates: Invalid value",
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "Rolling"}}}),
            "spec.updateStrategy.rollingUpdate.podUpdatePolicy: Unsupported value: \"Rolling\"",
        ),
        (
            json!({"reserveOrdinals": ["5-3"]}),
            "spec.reserveOrdinals[0]: Invalid value: \"5-3\"",
        ),
        (
            json!({"reserveOrdinals": [0, "a-b"]}),
            "spec.reserveOrdinals[1]: Invalid value: \"a-b\"",
        ),
        (
            json!({"reserveOrdinals": ["-1-2"]}),
            "spec.reserveOrdinals[0]: Invalid value: \"-1-2\"",
        ),
        (
            json!({"reserveOrdinals": [-1]}),
            "spec.reserveOrdinals[0]: Invalid value: \"-1\"",
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"minReadySeconds": 301}}}),
            "spec.updateStrategy.rollingUpdate.minReadySeconds: Invalid value: \"301\": must be no more than 300 seconds",
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"minReadySeconds": -1}}}),
            "spec.updateStrategy.rollingUpdate.minReadySeconds: Invalid value: \"-1\"",
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"partition": -1}}}),
            "spec.updateStrategy.rollingUpdate.partition: Invalid value: \"-1\"",
        ),
        (
            json!({"updateStrategy": {"rollingUpdate": {"unorderedUpdate": {}}}}),
            "spec.updateStrategy.rollingUpdate.unorderedUpdate: Required value: unorderedUpdate can only work with Parallel",
        ),
        (
            json!({"podManagementPolicy": "Parallel", "updateStrategy": {"rollingUpdate": {"unorderedUpdate": {"priorityStrategy": {"orderPriority": [{"orderedKey": ""}]}}}}}),
            "spec.updateStrategy.rollingUpdate.unorderedUpdate.priorityStrategy.orderPriority[0].orderedKey: Required value",
        ),
        (
            json!({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {}}}),
            "spec.updateStrategy.rollingUpdate: Invalid value",
        ),
        (
            json!({"updateStrategy": {"type": "Recreate"}}),
            "spec.updateStrategy.type: Unsupported value: \"Recreate\"",
        ),
        (
            json!({"podManagementPolicy": "Random"}),
            "spec.podManagementPolicy: Unsupported value: \"Random\"",
        ),
        (
            json!({"scaleStrategy": {"maxUnavailable": 3}}),
            "spec.scaleStrategy.maxUnavailable: Invalid value: \"3\": can only work with Parallel",
        ),
        (
            json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Keep"}}),
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted: Unsupported value: \"Keep\"",
        ),
        (
            json!({"replicas": -1}),
            "spec.replicas: Invalid value: \"-1\"",
        ),
        (
            json!({"selector": {"matchLabels": {"app": "db"}}}),
            "spec.template.metadata.labels: Invalid value",
        ),
        (json!({"selector": {}}), "spec.selector: Invalid value"),
        (
            json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "b"}]}}}),
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\"",
        ),
        (
            json!({"template": {"metadata": {"labels": {"app": "web"}}, "spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "a", "image": "b"}]}}}),
            "spec.template.spec.activeDeadlineSeconds: Forbidden",
        ),
    ];
    testutil::assert_first_errors(&cases, |extra| {
        first_error(&Api::validate(&defaulted(extra), None))
    });

    let mut missing_selector = sts(json!({"template": template()}));
    Api::default(&mut missing_selector);
    assert_eq!(
        first_error(&Api::validate(&missing_selector, None)),
        "spec.selector: Required value"
    );

    let mut dotted = defaulted(json!({}));
    dotted.metadata.name = Some("web.v2".into());
    assert!(
        first_error(&Api::validate(&dotted, None))
            .starts_with("metadata.name: Invalid value: \"web.v2\"")
    );
}

#[test]
fn update_allows_only_listed_fields() {
    let old = defaulted(json!({}));
    let mut allowed = old.clone();
    allowed.spec.replicas = Some(7);
    allowed.spec.reserve_ordinals = vec![IntOrString::Int(0)];
    allowed.spec.lifecycle = Some(Lifecycle::default());
    allowed.spec.revision_history_limit = Some(2);
    allowed.spec.scale_strategy = Some(Default::default());
    allowed.spec.ordinals = Some(v1beta1::StatefulSetOrdinals { start: 3 });
    if let Some(pod) = allowed.spec.template.spec.as_mut() {
        pod.containers[0].image = Some("nginx:1.26".into());
        pod.containers[0].args = Some(vec!["-g".into()]);
    }
    assert_eq!(Api::validate(&allowed, Some(&old)), Vec::new());

    for change in [
        |s: &mut v1beta1::StatefulSetSpec| s.service_name = "other".into(),
        |s: &mut v1beta1::StatefulSetSpec| s.pod_management_policy = "Parallel".into(),
        |s: &mut v1beta1::StatefulSetSpec| {
            s.selector = Some(
                serde_json::from_value(json!({"matchLabels": {"app": "web", "x": "y"}}))
                    .expect("selector"),
            )
        },
    ] {
        let mut new = old.clone();
        change(&mut new.spec);
        let errors = Api::validate(&new, Some(&old));
        assert!(
            errors.iter().any(|e| e
                .to_string()
                .starts_with("spec: Forbidden: updates to statefulset spec")),
            "{errors:?}"
        );
    }
}

#[test]
fn in_place_only_allows_image_changes_only() {
    let old =
        defaulted(json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}}));
    let mut image = old.clone();
    if let Some(pod) = image.spec.template.spec.as_mut() {
        pod.containers[0].image = Some("nginx:1.26".into());
    }
    assert_eq!(Api::validate(&image, Some(&old)), Vec::new());

    let mut env = old.clone();
    if let Some(pod) = env.spec.template.spec.as_mut() {
        pod.containers[0].args = Some(vec!["-g".into()]);
    }
    let first = first_error(&Api::validate(&env, Some(&old)));
    assert_eq!(
        first,
        "spec.template: Forbidden: invalid template modified with InPlaceOnly strategy: add /containers/0/args, \
         currently only image update is allowed for InPlaceOnly"
    );

    assert!(is_container_image_path("/containers/12/image"));
    assert!(
        is_container_image_path("/containers/0/imagePullPolicy"),
        "upstream's pattern is unanchored"
    );
    assert!(!is_container_image_path("/initContainers/0/image"));
    assert!(!is_container_image_path("/containers/x/image"));
}

#[test]
fn json_dispatch_converts_both_ways() {
    let v1beta1 = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "annotations": {"team": "a"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "b", "futureField": 1}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"futureClaimField": true}}],
            "volumeClaimUpdateStrategy": {"type": "OnPodRollingUpdate"},
            "updateStrategy": {"rollingUpdate": {"paused": true, "maxUnavailable": "20%"}},
            "reserveOrdinals": [1, "4-6"],
            "lifecycle": {"preDelete": {"markPodNotReady": true}},
            "ordinals": {"start": 0},
        },
        "status": {
            "replicas": 3, "readyReplicas": 3, "availableReplicas": 2, "currentReplicas": 1, "updatedReplicas": 2,
            "updatedReadyReplicas": 2, "volumeClaims": [{"volumeClaimName": "data", "compatibleReplicas": 3, "compatibleReadyReplicas": 1}],
        },
    });
    let down = Kind::StatefulSet
        .convert(v1beta1.clone(), crate::kinds::V1ALPHA1)
        .expect("down");
    assert_eq!(down["apiVersion"], "apps.kruise.io/v1alpha1");
    assert_eq!(down["spec"].get("reserveOrdinals"), None);
    assert_eq!(down["spec"].get("volumeClaimUpdateStrategy"), None);
    assert_eq!(down["status"].get("volumeClaims"), None);
    assert_eq!(
        down["spec"]["updateStrategy"]["rollingUpdate"]["paused"],
        true
    );
    assert_eq!(
        down["spec"]["template"]["spec"]["containers"][0]["futureField"], 1,
        "template kept verbatim"
    );
    assert_eq!(
        down["spec"]["volumeClaimTemplates"][0]["spec"]["futureClaimField"], true,
        "claims kept verbatim"
    );
    assert!(
        down["metadata"]["annotations"][keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS].is_string()
    );
    let back = crate::kinds::convert(down, crate::kinds::V1BETA1).expect("up");
    assert_eq!(back, v1beta1);
}

fn arb_int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        any::<i32>().prop_map(IntOrString::Int),
        "[0-9]{1,2}(%|-[0-9])".prop_map(IntOrString::String)
    ]
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[A-Za-z]{1,8}"]
}

fn arb_lifecycle() -> impl Strategy<Value = Option<Lifecycle>> {
    proptest::option::of(
        (any::<bool>(), proptest::option::of("[a-z]{1,5}")).prop_map(|(mark, finalizer)| {
            Lifecycle {
                pre_delete: Some(LifecycleHook {
                    mark_pod_not_ready: mark,
                    finalizers_handler: finalizer.into_iter().collect(),
                    ..Default::default()
                }),
                ..Default::default()
            }
        }),
    )
}

fn arb_rolling() -> impl Strategy<Value = Option<v1beta1::RollingUpdateStatefulSetStrategy>> {
    proptest::option::of(
        (
            proptest::option::of(any::<i32>()),
            proptest::option::of(arb_int_or_string()),
            arb_text(),
            any::<bool>(),
            proptest::option::of(any::<bool>()),
            proptest::option::of(any::<i32>()),
            proptest::option::of(any::<i32>()),
        )
            .prop_map(
                |(partition, max_unavailable, policy, paused, unordered, grace, min_ready)| {
                    v1beta1::RollingUpdateStatefulSetStrategy {
                        partition,
                        max_unavailable,
                        pod_update_policy: policy,
                        paused,
                        unordered_update: unordered.map(|weighted| {
                            v1beta1::UnorderedUpdateStrategy {
                                priority_strategy: weighted.then(Default::default),
                            }
                        }),
                        in_place_update_strategy: grace.map(|g| {
                            crate::pub_types::InPlaceUpdateStrategy {
                                grace_period_seconds: g,
                                ..Default::default()
                            }
                        }),
                        min_ready_seconds: min_ready,
                    }
                },
            ),
    )
}

fn arb_status() -> impl Strategy<Value = Option<v1beta1::StatefulSetStatus>> {
    proptest::option::of(
        (
            any::<[i32; 7]>(),
            any::<i64>(),
            arb_text(),
            proptest::option::of(any::<i32>()),
            any::<bool>(),
        )
            .prop_map(|(counts, generation, revision, collision, claims)| {
                v1beta1::StatefulSetStatus {
                    observed_generation: generation,
                    replicas: counts[0],
                    ready_replicas: counts[1],
                    available_replicas: counts[2],
                    current_replicas: counts[3],
                    updated_replicas: counts[4],
                    updated_ready_replicas: counts[5],
                    updated_available_replicas: counts[6],
                    current_revision: revision.clone(),
                    update_revision: revision.clone(),
                    collision_count: collision,
                    conditions: Vec::new(),
                    label_selector: revision,
                    volume_claims: if claims {
                        vec![v1beta1::VolumeClaimStatus {
                            volume_claim_name: "data".into(),
                            compatible_replicas: counts[0],
                            compatible_ready_replicas: counts[1],
                        }]
                    } else {
                        Vec::new()
                    },
                }
            }),
    )
}

fn arb_sts() -> impl Strategy<Value = v1beta1::StatefulSet> {
    (
        (
            proptest::option::of(any::<i32>()),
            arb_text(),
            arb_text(),
            prop_oneof![
                Just(String::new()),
                Just("RollingUpdate".to_string()),
                Just("OnDelete".to_string())
            ],
            arb_rolling(),
            proptest::option::of(any::<i32>()),
        ),
        (
            proptest::collection::vec(arb_int_or_string(), 0..3),
            arb_lifecycle(),
            proptest::option::of(proptest::option::of(arb_int_or_string())),
            proptest::option::of((arb_text(), arb_text())),
            proptest::option::of(any::<i32>()),
            arb_text(),
        ),
        arb_status(),
        proptest::option::of(proptest::collection::btree_map("[a-c]", "[a-z]{0,3}", 1..3)),
    )
        .prop_map(|(common, extra, status, annotations)| {
            let (replicas, service, policy, update_type, rolling, history) = common;
            let (reserve, lifecycle, scale, retention, ordinals, claim_update) = extra;
            let mut object = v1beta1::StatefulSet::default();
            object.metadata.name = Some("web".into());
            object.metadata.annotations = annotations;
            let spec = &mut object.spec;
            spec.replicas = replicas;
            spec.service_name = service;
            spec.pod_management_policy = policy;
            spec.update_strategy = v1beta1::StatefulSetUpdateStrategy {
                type_: update_type,
                rolling_update: rolling,
            };
            spec.revision_history_limit = history;
            spec.reserve_ordinals = reserve;
            spec.lifecycle = lifecycle;
            spec.scale_strategy =
                scale.map(|max_unavailable| v1beta1::StatefulSetScaleStrategy { max_unavailable });
            spec.persistent_volume_claim_retention_policy =
                retention.map(|(when_deleted, when_scaled)| {
                    v1beta1::StatefulSetPersistentVolumeClaimRetentionPolicy {
                        when_deleted,
                        when_scaled,
                    }
                });
            spec.ordinals = ordinals.map(|start| v1beta1::StatefulSetOrdinals { start });
            spec.volume_claim_update_strategy = v1beta1::VolumeClaimUpdateStrategy {
                type_: claim_update,
            };
            object.status = status;
            object
        })
}

proptest! {
    #[test]
    fn v1beta1_round_trips(object in arb_sts()) {
        let down = Api::to_v1alpha1(object.clone());
        prop_assert_eq!(Api::to_v1beta1(down), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::StatefulSet.convert(json.clone(), crate::kinds::V1ALPHA1).expect("down");
        let back = Kind::StatefulSet.convert(through, crate::kinds::V1BETA1).expect("up");
        prop_assert_eq!(back, json);
    }

    #[test]
    fn v1alpha1_round_trips(object in arb_sts()) {
        // Project a generated v1beta1 object onto what v1alpha1 can express, without the stash.
        let mut alpha = Api::to_v1alpha1(object);
        let _ = Stash::take(&mut alpha.metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        let up = Api::to_v1beta1(alpha.clone());
        prop_assert_eq!(Api::to_v1alpha1(up), alpha.clone());
        let json = serde_json::to_value(&alpha).expect("encode");
        let through = Kind::StatefulSet.convert(json.clone(), crate::kinds::V1BETA1).expect("up");
        let back = Kind::StatefulSet.convert(through, crate::kinds::V1ALPHA1).expect("down");
        prop_assert_eq!(back, json);
    }
}
