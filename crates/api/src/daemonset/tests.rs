use super::*;
use proptest::prelude::*;

use crate::kinds::Kind;
use crate::pub_types::{Lifecycle, LifecycleHook};
use crate::testutil::{self, first_error};

fn ds(spec: Value) -> v1beta1::DaemonSet {
    testutil::decode_v1beta1("DaemonSet", "agent", spec)
}

fn spec_with(extra: Value) -> Value {
    let spec = json!({
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {
            "metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
        },
    });
    testutil::with_top_level(spec, &extra)
}

fn defaulted(extra: Value) -> v1beta1::DaemonSet {
    let mut object = ds(spec_with(extra));
    Api::default(&mut object);
    object
}

fn rolling(object: &v1beta1::DaemonSet) -> &v1beta1::RollingUpdateDaemonSet {
    object
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .expect("rollingUpdate")
}

#[test]
fn defaults_as_upstream() {
    let object = defaulted(json!({}));
    assert_eq!(object.spec.burst_replicas, Some(IntOrString::Int(250)));
    assert_eq!(object.spec.update_strategy.type_, "RollingUpdate");
    let rolling = rolling(&object);
    assert_eq!(rolling.type_, "Standard");
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(0)));
    assert_eq!((rolling.partition.as_ref(), rolling.paused), (None, None));
    assert_eq!(object.spec.revision_history_limit, Some(10));
    let pod = object.spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(
        pod.restart_policy, None,
        "upstream does not default the DaemonSet Pod template"
    );
    assert_eq!(pod.containers[0].image_pull_policy, None);
}

#[test]
fn defaults_leave_one_of_max_unavailable_and_max_surge_alone() {
    let object = defaulted(json!({"updateStrategy": {"rollingUpdate": {"maxSurge": "10%"}}}));
    assert_eq!(rolling(&object).max_unavailable, None);
    assert_eq!(
        rolling(&object).max_surge,
        Some(IntOrString::String("10%".into()))
    );
    assert_eq!(Api::validate(&object, None), Vec::new());

    let on_delete = defaulted(json!({"updateStrategy": {"type": "OnDelete"}}));
    assert_eq!(on_delete.spec.update_strategy.rolling_update, None);
}

#[test]
fn surging_defaults_to_standard_with_surge() {
    let v1alpha1 = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": spec_with(json!({"updateStrategy": {"rollingUpdate": {"rollingUpdateType": "Surging"}}})),
    });
    let up = Kind::DaemonSet
        .convert(v1alpha1, crate::kinds::V1BETA1)
        .expect("up");
    assert_eq!(
        up["spec"]["updateStrategy"]["rollingUpdate"]["rollingUpdateType"],
        "Standard"
    );
    let defaulted = Kind::DaemonSet.default_object(up).expect("defaults");
    let rolling = &defaulted["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(
        (
            rolling["maxSurge"].clone(),
            rolling["maxUnavailable"].clone()
        ),
        (json!(1), json!(0))
    );
    assert_eq!(
        defaulted["metadata"].get("annotations"),
        None,
        "the Surging marker is consumed"
    );
    assert_eq!(
        Kind::DaemonSet
            .validate(defaulted.clone(), None)
            .expect("decodes"),
        Vec::new()
    );
    let down = Kind::DaemonSet
        .convert(defaulted, crate::kinds::V1ALPHA1)
        .expect("down");
    assert_eq!(
        down["spec"]["updateStrategy"]["rollingUpdate"]["rollingUpdateType"],
        "Standard"
    );
}

#[test]
fn valid_daemonset_passes() {
    let object = defaulted(json!({
        "updateStrategy": {"rollingUpdate": {
            "rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": "100%", "partition": "30%",
            "selector": {"matchLabels": {"pool": "canary"}}, "paused": true,
        }},
        "lifecycle": {"preDelete": {"labelsHandler": {"example.com/hold": "true"}}},
        "scaleStrategy": {"partitionedScaling": true},
    }));
    assert_eq!(Api::validate(&object, None), Vec::new());
}

#[test]
fn invalid_daemonsets_name_the_field() {
    let rolling = |r: Value| json!({"updateStrategy": {"rollingUpdate": r}});
    // (extra spec fields, expected start of the first error)
    let cases = [
        (
            rolling(json!({"maxUnavailable": 1, "maxSurge": 1})),
            "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"1\": may not be set when maxUnavailable is non-zero",
        ),
        (
            rolling(json!({"maxUnavailable": 0, "maxSurge": "0%"})),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0",
        ),
        (
            rolling(
                json!({"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 0, "maxSurge": 1}),
            ),
            "spec.updateStrategy.rollingUpdate.maxSurge: Required value: must be 0 for InPlaceIfPossible type",
        ),
        (
            rolling(json!({"maxUnavailable": "150%"})),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%",
        ),
        (
            rolling(json!({"maxUnavailable": 0, "maxSurge": "101%"})),
            "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: \"101%\"",
        ),
        (
            rolling(json!({"maxUnavailable": -1})),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"-1\"",
        ),
        (
            rolling(json!({"maxUnavailable": "5"})),
            "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"5\"",
        ),
        (
            rolling(json!({"rollingUpdateType": "Surging"})),
            "spec.updateStrategy.rollingUpdate.rollingUpdateType: Unsupported value: \"Surging\"",
        ),
        (
            rolling(json!({"partition": -2})),
            "spec.updateStrategy.rollingUpdate.partition: Invalid value: \"-2\"",
        ),
        (
            rolling(json!({"partition": "120%"})),
            "spec.updateStrategy.rollingUpdate.partition: Invalid value: \"120%\"",
        ),
        (
            json!({"updateStrategy": {"type": "Recreate"}}),
            "spec.updateStrategy.type: Unsupported value: \"Recreate\"",
        ),
        (
            json!({"lifecycle": {"inPlaceUpdate": {"markPodNotReady": true}}}),
            "spec.lifecycle.inPlaceUpdate: Forbidden: inPlaceUpdate hook has not supported yet",
        ),
        (
            json!({"minReadySeconds": -1}),
            "spec.minReadySeconds: Invalid value: \"-1\"",
        ),
        (
            json!({"revisionHistoryLimit": -1}),
            "spec.revisionHistoryLimit: Invalid value: \"-1\"",
        ),
        (
            json!({"selector": {"matchLabels": {"app": "other"}}}),
            "spec.template.metadata.labels: Invalid value",
        ),
        (json!({"selector": {}}), "spec.selector: Invalid value"),
        (
            json!({"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "a", "image": "b"}]}}}),
            "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\"",
        ),
        (
            json!({"template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"activeDeadlineSeconds": 3, "containers": [{"name": "a", "image": "b"}]}}}),
            "spec.template.spec.activeDeadlineSeconds: Forbidden",
        ),
    ];
    testutil::assert_first_errors(&cases, |extra| {
        first_error(&Api::validate(&defaulted(extra), None))
    });

    let mut no_rolling = defaulted(json!({}));
    no_rolling.spec.update_strategy.rolling_update = None;
    assert_eq!(
        first_error(&Api::validate(&no_rolling, None)),
        "spec.updateStrategy.rollingUpdate: Required value"
    );

    let mut no_selector = defaulted(json!({}));
    no_selector.spec.selector = None;
    assert_eq!(
        first_error(&Api::validate(&no_selector, None)),
        "spec.selector: Required value"
    );

    let mut bad_name = defaulted(json!({}));
    bad_name.metadata.name = Some("Agent".into());
    assert!(
        first_error(&Api::validate(&bad_name, None))
            .starts_with("metadata.name: Invalid value: \"Agent\"")
    );
    bad_name.metadata.name = Some("agent.v2".into());
    assert_eq!(
        Api::validate(&bad_name, None),
        Vec::new(),
        "a DaemonSet name is a DNS subdomain"
    );
}

#[test]
fn update_allows_only_listed_fields() {
    let old = defaulted(json!({}));
    let mut allowed = defaulted(json!({
        "burstReplicas": "10%",
        "minReadySeconds": 9,
        "revisionHistoryLimit": 1,
        "lifecycle": {"preDelete": {"finalizersHandler": ["example.com/x"]}},
        "scaleStrategy": {"partitionedScaling": true},
        "updateStrategy": {"type": "OnDelete"},
    }));
    if let Some(pod) = allowed.spec.template.spec.as_mut() {
        pod.containers[0].image = Some("agent:2".into());
    }
    assert_eq!(Api::validate(&allowed, Some(&old)), Vec::new());

    let selector = defaulted(json!({
        "selector": {"matchLabels": {"app": "agent", "tier": "x"}},
        "template": {"metadata": {"labels": {"app": "agent", "tier": "x"}}, "spec": {"containers": [{"name": "a", "image": "b"}]}},
    }));
    assert!(
        first_error(&Api::validate(&selector, Some(&old)))
            .starts_with("spec: Forbidden: updates to daemonset spec")
    );
}

#[test]
fn json_dispatch_maps_annotation_hash_and_surging() {
    let v1alpha1 = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "annotations": {"daemonset.kruise.io/progressive-create-pod": "true"}},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {"containers": [{"name": "a", "image": "b", "futureField": 1}]}},
            "updateStrategy": {"rollingUpdate": {"rollingUpdateType": "Surging", "partition": 2}},
        },
        "status": {"currentNumberScheduled": 1, "numberMisscheduled": 0, "desiredNumberScheduled": 2, "numberReady": 1,
                   "updatedNumberScheduled": 1, "daemonSetHash": "abc"},
    });
    let up = crate::kinds::convert(v1alpha1.clone(), crate::kinds::V1BETA1).expect("up");
    assert_eq!(
        up["spec"]["scaleStrategy"],
        json!({"partitionedScaling": true})
    );
    assert_eq!(
        up["metadata"]["annotations"][ANNOTATION_PROGRESSIVE_CREATE_POD], "true",
        "kept, as upstream"
    );
    assert_eq!(up["status"]["updateRevision"], "abc");
    assert_eq!(
        up["spec"]["updateStrategy"]["rollingUpdate"]["rollingUpdateType"],
        "Standard"
    );
    assert_eq!(
        up["spec"]["template"]["spec"]["containers"][0]["futureField"], 1,
        "template kept verbatim"
    );
    let back = Kind::DaemonSet
        .convert(up, crate::kinds::V1ALPHA1)
        .expect("down");
    assert_eq!(back, v1alpha1);

    // partitionedScaling on a v1beta1 object without the annotation: written as the annotation, and the
    // annotation removed again on the way back.
    let v1beta1 = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"spec": {"containers": [{"name": "a", "image": "b"}]}},
            "updateStrategy": {},
            "scaleStrategy": {"partitionedScaling": true},
        },
    });
    let down = Kind::DaemonSet
        .convert(v1beta1.clone(), crate::kinds::V1ALPHA1)
        .expect("down");
    assert_eq!(
        down["metadata"]["annotations"][ANNOTATION_PROGRESSIVE_CREATE_POD],
        "true"
    );
    assert_eq!(
        Kind::DaemonSet
            .convert(down, crate::kinds::V1BETA1)
            .expect("up"),
        v1beta1
    );
}

fn arb_int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        any::<i32>().prop_map(IntOrString::Int),
        "[0-9]{1,3}%".prop_map(IntOrString::String)
    ]
}

fn arb_annotation_value() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just(String::new())
    ])
}

/// Annotations: none, or some of `a`, `b` and the progressive-create-pod key.
fn arb_annotations() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    (
        arb_annotation_value(),
        proptest::option::of("[a-z]{0,3}"),
        any::<bool>(),
    )
        .prop_map(|(progressive, other, none)| {
            let mut map = BTreeMap::new();
            if let Some(value) = progressive {
                map.insert(ANNOTATION_PROGRESSIVE_CREATE_POD.to_string(), value);
            }
            if let Some(value) = other {
                map.insert("a".to_string(), value);
            }
            (!none && !map.is_empty()).then_some(map)
        })
}

fn arb_rolling() -> impl Strategy<Value = Option<v1beta1::RollingUpdateDaemonSet>> {
    proptest::option::of(
        (
            prop_oneof![
                Just(String::new()),
                Just("Standard".to_string()),
                Just("InPlaceIfPossible".to_string())
            ],
            proptest::option::of(arb_int_or_string()),
            proptest::option::of(arb_int_or_string()),
            any::<bool>(),
            proptest::option::of(arb_int_or_string()),
            proptest::option::of(any::<bool>()),
        )
            .prop_map(
                |(type_, max_unavailable, max_surge, selector, partition, paused)| {
                    v1beta1::RollingUpdateDaemonSet {
                        type_,
                        max_unavailable,
                        max_surge,
                        selector: selector.then(|| {
                            serde_json::from_value(json!({"matchLabels": {"pool": "a"}}))
                                .unwrap_or_default()
                        }),
                        partition,
                        paused,
                    }
                },
            ),
    )
}

fn arb_status() -> impl Strategy<Value = Option<v1beta1::DaemonSetStatus>> {
    proptest::option::of(
        (
            any::<[i32; 7]>(),
            any::<i64>(),
            proptest::option::of(any::<i32>()),
            "[a-z0-9]{0,6}",
        )
            .prop_map(|(counts, generation, collision, revision)| {
                v1beta1::DaemonSetStatus {
                    current_number_scheduled: counts[0],
                    number_misscheduled: counts[1],
                    desired_number_scheduled: counts[2],
                    number_ready: counts[3],
                    observed_generation: generation,
                    updated_number_scheduled: counts[4],
                    number_available: counts[5],
                    number_unavailable: counts[6],
                    collision_count: collision,
                    conditions: Vec::new(),
                    update_revision: revision,
                }
            }),
    )
}

fn arb_ds() -> impl Strategy<Value = v1beta1::DaemonSet> {
    (
        arb_annotations(),
        prop_oneof![
            Just(String::new()),
            Just("RollingUpdate".to_string()),
            Just("OnDelete".to_string())
        ],
        arb_rolling(),
        any::<i32>(),
        proptest::option::of(arb_int_or_string()),
        proptest::option::of(any::<i32>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        arb_status(),
    )
        .prop_map(
            |(
                annotations,
                update_type,
                rolling,
                min_ready,
                burst,
                history,
                hook,
                partitioned,
                status,
            )| {
                let mut object = v1beta1::DaemonSet::default();
                object.metadata.name = Some("agent".into());
                object.metadata.annotations = annotations;
                let spec = &mut object.spec;
                spec.update_strategy = v1beta1::DaemonSetUpdateStrategy {
                    type_: update_type,
                    rolling_update: rolling,
                };
                spec.min_ready_seconds = min_ready;
                spec.burst_replicas = burst;
                spec.revision_history_limit = history;
                spec.lifecycle = hook.map(|mark| Lifecycle {
                    pre_delete: Some(LifecycleHook {
                        mark_pod_not_ready: mark,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
                spec.scale_strategy =
                    partitioned.map(|partitioned_scaling| v1beta1::DaemonSetScaleStrategy {
                        partitioned_scaling,
                    });
                object.status = status;
                object
            },
        )
}

/// A v1alpha1 object: a generated v1beta1 object projected onto v1alpha1 (no stash), optionally Surging.
fn arb_alpha() -> impl Strategy<Value = v1alpha1::DaemonSet> {
    (arb_ds(), any::<bool>()).prop_map(|(object, surging)| {
        let mut alpha = Api::to_v1alpha1(object);
        let _ = Stash::take(
            &mut alpha.metadata,
            keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS,
        );
        if let (true, Some(rolling)) = (surging, alpha.spec.update_strategy.rolling_update.as_mut())
        {
            rolling.type_ = ROLLING_UPDATE_SURGING.into();
        }
        alpha
    })
}

proptest! {
    #[test]
    fn v1beta1_round_trips(object in arb_ds()) {
        let down = Api::to_v1alpha1(object.clone());
        prop_assert_eq!(Api::to_v1beta1(down), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::DaemonSet.convert(json.clone(), crate::kinds::V1ALPHA1).expect("down");
        let back = Kind::DaemonSet.convert(through, crate::kinds::V1BETA1).expect("up");
        prop_assert_eq!(back, json);
    }

    #[test]
    fn v1alpha1_round_trips(alpha in arb_alpha()) {
        let up = Api::to_v1beta1(alpha.clone());
        prop_assert_eq!(Api::to_v1alpha1(up), alpha.clone());
        let json = serde_json::to_value(&alpha).expect("encode");
        let through = Kind::DaemonSet.convert(json.clone(), crate::kinds::V1BETA1).expect("up");
        let back = Kind::DaemonSet.convert(through, crate::kinds::V1ALPHA1).expect("down");
        prop_assert_eq!(back, json);
    }
}
