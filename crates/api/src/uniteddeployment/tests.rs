use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::keys;
use crate::kinds::{Kind, V1ALPHA1, V1BETA1};
use crate::testutil::{first_error, merge};

fn pod_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "sample"}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]},
    })
}

fn zone(name: &str, replicas: Option<Value>) -> Value {
    let mut subset = json!({
        "name": name,
        "nodeSelectorTerm": {"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [name]}
        ]},
    });
    if let Some(replicas) = replicas {
        subset["replicas"] = replicas;
    }
    subset
}

fn clone_set_template() -> Value {
    json!({"cloneSetTemplate": {
        "metadata": {"labels": {"app": "sample"}},
        "spec": {"selector": {"matchLabels": {"app": "sample"}}, "template": pod_template()},
    }})
}

/// The other three templates, replacing the CloneSet one.
fn statefulset_template(spec: Value) -> Value {
    let mut full =
        json!({"selector": {"matchLabels": {"app": "sample"}}, "template": pod_template()});
    merge(&mut full, &spec);
    json!({"spec": {"template": {"cloneSetTemplate": null, "statefulSetTemplate": {
        "metadata": {"labels": {"app": "sample"}}, "spec": full,
    }}}})
}

fn advanced_statefulset_template(spec: Value) -> Value {
    let mut full =
        json!({"selector": {"matchLabels": {"app": "sample"}}, "template": pod_template()});
    merge(&mut full, &spec);
    json!({"spec": {"template": {"cloneSetTemplate": null, "advancedStatefulSetTemplate": {
        "metadata": {"labels": {"app": "sample"}}, "spec": full,
    }}}})
}

fn deployment_template(spec: Value) -> Value {
    let mut full =
        json!({"selector": {"matchLabels": {"app": "sample"}}, "template": pod_template()});
    merge(&mut full, &spec);
    json!({"spec": {"template": {"cloneSetTemplate": null, "deploymentTemplate": {
        "metadata": {"labels": {"app": "sample"}}, "spec": full,
    }}}})
}

/// A valid v1beta1 UnitedDeployment: 6 replicas over three zones, zone-a holding half.
fn base() -> Value {
    json!({
        "apiVersion": V1BETA1,
        "kind": "UnitedDeployment",
        "metadata": {"name": "sample", "namespace": "default"},
        "spec": {
            "replicas": 6,
            "selector": {"matchLabels": {"app": "sample"}},
            "template": clone_set_template(),
            "topology": {"subsets": [zone("zone-a", Some(json!("50%"))), zone("zone-b", None), zone("zone-c", None)]},
            "revisionHistoryLimit": 10,
            "updateStrategy": {"type": "Manual", "manualUpdate": {"partitions": {"zone-a": 1}}},
        },
    })
}

/// The base with `patch` merged in (not defaulted: the base sets what the defaults would).
fn object(patch: Value) -> v1beta1::UnitedDeployment {
    let mut value = base();
    merge(&mut value, &patch);
    crate::kinds::decode(value).expect("test object decodes")
}

fn subsets(list: Vec<Value>) -> Value {
    json!({"spec": {"topology": {"subsets": list}}})
}

#[test]
fn defaults_as_upstream() {
    let mut ud = object(json!({"spec": {
        "replicas": null, "revisionHistoryLimit": null, "updateStrategy": null,
    }}));
    Api::default(&mut ud);
    assert_eq!(ud.spec.replicas, Some(1));
    assert_eq!(ud.spec.revision_history_limit, Some(10));
    assert_eq!(ud.spec.update_strategy.type_, "Manual");
    assert_eq!(
        ud.spec.update_strategy.manual_update,
        Some(v1beta1::ManualUpdate::default())
    );
    // Upstream writes no schedule strategy defaults; they are read with defaults.
    assert_eq!(
        ud.spec.topology.schedule_strategy,
        v1beta1::UnitedDeploymentScheduleStrategy::default()
    );
    assert_eq!(
        ud.spec
            .topology
            .schedule_strategy
            .reschedule_critical_seconds(),
        30
    );
    assert_eq!(
        ud.spec
            .topology
            .schedule_strategy
            .unschedulable_duration_seconds(),
        300
    );
    // The CloneSet template is left to the CloneSet webhook, as upstream.
    let clone = ud.spec.template.clone_set_template.as_ref().expect("clone");
    assert_eq!(clone.spec.replicas, None);
    let pod = clone.spec.template.spec.as_ref().expect("pod");
    assert_eq!(pod.restart_policy, None);
    // Only minReplicas defaults are absent without capacities.
    assert!(
        ud.spec
            .topology
            .subsets
            .iter()
            .all(|s| s.min_replicas.is_none())
    );
}

#[test]
fn defaults_a_native_statefulset_template() {
    let mut patch = statefulset_template(json!({"volumeClaimTemplates": [
        {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    ]}));
    merge(
        &mut patch,
        &json!({"spec": {"updateStrategy": {"type": null}}}),
    );
    let mut ud = object(patch);
    Api::default(&mut ud);
    let sts = ud
        .spec
        .template
        .stateful_set_template
        .as_ref()
        .expect("sts");
    let pod = sts.spec.template.spec.as_ref().expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    let claims = sts.spec.volume_claim_templates.as_ref().expect("claims");
    assert_eq!(
        claims[0].status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(ud.spec.update_strategy.type_, "Manual");
    // The embedded StatefulSet's own fields are the StatefulSet webhook's business.
    assert_eq!(sts.spec.pod_management_policy, None);
}

#[test]
fn defaults_min_replicas_only_for_capacity_subsets() {
    let mut ud = object(subsets(vec![
        json!({"name": "a", "maxReplicas": 2}),
        json!({"name": "b"}),
    ]));
    Api::default(&mut ud);
    let mins: Vec<_> = ud
        .spec
        .topology
        .subsets
        .iter()
        .map(|s| s.min_replicas.clone())
        .collect();
    assert_eq!(mins, [Some(IntOrString::Int(0)), Some(IntOrString::Int(0))]);

    let mut explicit = object(subsets(vec![
        json!({"name": "a", "minReplicas": 1, "maxReplicas": 2}),
        json!({"name": "b", "minReplicas": "10%"}),
    ]));
    Api::default(&mut explicit);
    assert_eq!(
        explicit.spec.topology.subsets[1].min_replicas,
        Some(IntOrString::String("10%".into()))
    );
    let mut specific = object(subsets(vec![
        json!({"name": "a", "replicas": 1}),
        json!({"name": "b"}),
    ]));
    Api::default(&mut specific);
    assert!(
        specific
            .spec
            .topology
            .subsets
            .iter()
            .all(|s| s.min_replicas.is_none())
    );
}

#[test]
fn defaults_keep_explicit_values_and_are_idempotent() {
    let mut ud = object(json!({"spec": {"replicas": 0, "revisionHistoryLimit": 3}}));
    Api::default(&mut ud);
    assert_eq!(ud.spec.replicas, Some(0));
    assert_eq!(ud.spec.revision_history_limit, Some(3));
    assert_eq!(
        ud.spec
            .update_strategy
            .manual_update
            .as_ref()
            .map(|m| m.partitions.clone()),
        Some(BTreeMap::from([("zone-a".to_string(), 1)]))
    );
    let once = ud.clone();
    Api::default(&mut ud);
    assert_eq!(ud, once);
}

#[test]
fn subset_replicas_parse_as_upstream() {
    let s = |v: &str| IntOrString::String(v.into());
    // (ud replicas, value, want)
    let cases: [(Option<i32>, IntOrString, Result<i32, &str>); 11] = [
        (Some(6), IntOrString::Int(2), Ok(2)),
        (None, IntOrString::Int(2), Ok(2)),
        (Some(6), s("50%"), Ok(3)),
        (Some(5), s("50%"), Ok(3)),
        (Some(5), s("10%"), Ok(1)),
        (Some(3), s("10%"), Ok(0)),
        (Some(7), s("100%"), Ok(7)),
        (
            Some(6),
            IntOrString::Int(-1),
            Err("should not be less than 0"),
        ),
        (None, s("50%"), Err("should not be string when")),
        (Some(6), s("150%"), Err("should be in range [0, 100]")),
        (
            Some(6),
            s("5"),
            Err("only support integer value or percentage"),
        ),
    ];
    for (total, value, want) in cases {
        let got = parse_subset_replicas(total, &value);
        match want {
            Ok(n) => assert_eq!(got, Ok(n), "{total:?} {value:?}"),
            Err(part) => assert!(
                got.as_ref().is_err_and(|e| e.contains(part)),
                "{total:?} {value:?}: {got:?}"
            ),
        }
    }
}

#[test]
fn valid_objects_pass() {
    let patches = [
        json!({}),
        statefulset_template(
            json!({"podManagementPolicy": "Parallel", "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}}}),
        ),
        advanced_statefulset_template(json!({"podManagementPolicy": "Parallel"})),
        deployment_template(json!({})),
        subsets(vec![
            json!({"name": "zone-a", "minReplicas": 1, "maxReplicas": 3, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ud", "effect": "NoSchedule"}]}),
            json!({"name": "zone-b", "nodeSelectorTerm": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}}),
        ]),
        json!({"spec": {
            "topology": {
                "subsets": [{"name": "zone-a", "maxReplicas": 2}, {"name": "zone-b"}],
                "scheduleStrategy": {"type": "Adaptive", "adaptive": {"reserveUnschedulablePods": true, "rescheduleCriticalSeconds": 10}},
            },
            "updateStrategy": {"manualUpdate": {"partitions": {"zone-b": 2}}},
        }}),
    ];
    for patch in patches {
        let mut ud = object(patch.clone());
        Api::default(&mut ud);
        assert_eq!(Api::validate(&ud, None), Vec::new(), "{patch}");
    }
}

#[test]
fn invalid_objects_name_the_field() {
    let reserve = json!({"spec": {"topology": {
        "subsets": [{"name": "zone-a"}, {"name": "zone-b"}],
        "scheduleStrategy": {"type": "Adaptive", "adaptive": {"reserveUnschedulablePods": true}},
    }, "updateStrategy": {"manualUpdate": null}}});
    let mut reserve_asts = advanced_statefulset_template(json!({}));
    merge(&mut reserve_asts, &reserve);
    let mut two_templates = deployment_template(json!({}));
    merge(
        &mut two_templates,
        &json!({"spec": {"template": clone_set_template()}}),
    );
    // (patch, expected start of the first error)
    let cases = [
        (
            json!({"metadata": {"name": "Sample_UD"}}),
            "metadata.name: Invalid value: \"Sample_UD\"",
        ),
        (
            json!({"spec": {"replicas": -1}}),
            "spec.replicas: Invalid value: \"-1\"",
        ),
        (
            json!({"spec": {"selector": null}}),
            "spec.selector: Required value",
        ),
        (
            json!({"spec": {"selector": {"matchLabels": null}}}),
            "spec.selector: Invalid value: \"{}\": empty selector",
        ),
        (
            json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}}),
            "spec.template.cloneSetTemplate.spec.template.metadata.labels: Invalid value",
        ),
        (
            json!({"spec": {"template": null}}),
            "spec.template: Required value: should provide one of statefulSetTemplate",
        ),
        (
            two_templates,
            "spec.template: Invalid value: \"cloneSetTemplate, deploymentTemplate\": should provide only one",
        ),
        (
            subsets(vec![zone("Zone_A", None), zone("zone-b", None)]),
            "spec.topology.subsets[0].name: Invalid value: \"Zone_A\": invalid subset name",
        ),
        (
            subsets(vec![zone("zone-a", None), zone("zone-a", None)]),
            "spec.topology.subsets[1].name: Invalid value: \"zone-a\": duplicated subset name zone-a",
        ),
        (
            subsets(vec![json!({"name": ""}), zone("zone-b", None)]),
            "spec.topology.subsets[0].name: Required value",
        ),
        (
            subsets(vec![
                zone("zone-a", Some(json!("150%"))),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].replicas: Invalid value: \"150%\": subset replicas (150%) should be in range [0, 100]",
        ),
        (
            subsets(vec![zone("zone-a", Some(json!(-1))), zone("zone-b", None)]),
            "spec.topology.subsets[0].replicas: Invalid value: \"-1\": subset replicas (-1) should not be less than 0",
        ),
        (
            subsets(vec![zone("zone-a", Some(json!("5"))), zone("zone-b", None)]),
            "spec.topology.subsets[0].replicas: Invalid value: \"5\": subset replicas (5) only support",
        ),
        (
            json!({"spec": {"replicas": null}}),
            "spec.topology.subsets[0].replicas: Invalid value: \"50%\": subsetReplicas (50%) should not be string when unitedDeployment replicas is empty",
        ),
        (
            subsets(vec![
                zone("zone-a", Some(json!(4))),
                zone("zone-b", Some(json!(3))),
                zone("zone-c", None),
            ]),
            "spec.topology.subsets: Invalid value: \"7\": sum of indicated subset replicas 7 should not be greater than UnitedDeployment replicas 6",
        ),
        (
            subsets(vec![
                zone("zone-a", Some(json!(1))),
                zone("zone-b", Some(json!("50%"))),
            ]),
            "spec.topology.subsets: Invalid value: \"4\": if replicas of all subsets are provided, the sum of indicated subset replicas 4 should equal UnitedDeployment replicas 6",
        ),
        (
            json!({"spec": {"replicas": null, "topology": {"subsets": [zone("zone-a", Some(json!(1))), zone("zone-b", None)]}}}),
            "spec.topology.subsets: Invalid value: \"1\": if UnitedDeployment replicas is not provided, replicas of all subsets should be provided",
        ),
        (
            subsets(vec![
                zone("zone-a", Some(json!(1))),
                json!({"name": "zone-b", "maxReplicas": 3}),
            ]),
            "spec.topology.subsets: Invalid value: \"{...}\": subset.Replicas and subset.MinReplicas/subset.MaxReplicas are mutually exclusive",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "minReplicas": 3, "maxReplicas": "10%"}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].minReplicas: Invalid value: \"3\": subset[0].minReplicas must be less than or equal to maxReplicas",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "maxReplicas": 3}),
                json!({"name": "zone-b", "maxReplicas": 3}),
            ]),
            "spec.topology.subsets: Invalid value: \"2\": at least one subset.maxReplicas must be empty",
        ),
        (
            json!({"spec": {"topology": {"scheduleStrategy": {"type": "Adaptive"}}}}),
            "spec.topology.subsets[0].replicas: Forbidden: specify replicas use minReplicas/maxReplicas to enable adaptive strategy",
        ),
        (
            reserve_asts,
            "spec.topology.scheduleStrategy: Invalid value: \"{\\\"type\\\":\\\"Adaptive\\\",\\\"adaptive\\\":{\\\"reserveUnschedulablePods\\\":true}}\": only stateless workloads (Deployment and CloneSet) are supported by reserved rescheduling",
        ),
        (
            json!({"spec": {"topology": {"scheduleStrategy": {"type": "Random"}}}}),
            "spec.topology.scheduleStrategy.type: Unsupported value: \"Random\"",
        ),
        (
            json!({"spec": {"updateStrategy": {"type": "Auto"}}}),
            "spec.updateStrategy.type: Unsupported value: \"Auto\": supported values: \"Manual\", \"\"",
        ),
        (
            json!({"spec": {"updateStrategy": {"manualUpdate": {"partitions": {"zone-x": 1}}}}}),
            "spec.updateStrategy.manualUpdate.partitions: Invalid value: \"{\\\"zone-a\\\":1,\\\"zone-x\\\":1}\": subset zone-x does not exist",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "nodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "Exists", "values": ["a"]}]}}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].nodeSelectorTerm.matchExpressions[0].values: Forbidden",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "nodeSelectorTerm": {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]}}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].nodeSelectorTerm.matchFields[0].key: Invalid value: \"metadata.labels\"",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "tolerations": [{"operator": "Equal", "value": "x"}]}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "tolerations": [{"key": "k", "operator": "Exists", "effect": "Evict"}]}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].tolerations[0].effect: Unsupported value: \"Evict\"",
        ),
        (
            statefulset_template(json!({"replicas": 3})),
            "spec.template.statefulSetTemplate.spec.replicas: Invalid value: \"3\": replicas in statefulSetTemplate will not be used",
        ),
        (
            statefulset_template(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}),
            ),
            "spec.template.statefulSetTemplate.spec.updateStrategy.rollingUpdate.partition: Invalid value: \"1\": partition in statefulSetTemplate will not be used",
        ),
        (
            statefulset_template(
                json!({"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}),
            ),
            "spec.template.statefulSetTemplate.spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"0\": cannot be 0",
        ),
        (
            statefulset_template(json!({"podManagementPolicy": "Random"})),
            "spec.template.statefulSetTemplate.spec.podManagementPolicy: Invalid value: \"Random\"",
        ),
        (
            statefulset_template(
                json!({"persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete"}}),
            ),
            "spec.template.statefulSetTemplate.spec.persistentVolumeClaimRetentionPolicy.whenScaled: Unsupported value: \"\"",
        ),
        (
            advanced_statefulset_template(json!({"replicas": 2})),
            "spec.template.advancedStatefulSetTemplate.spec.replicas: Invalid value: \"2\": replicas in advancedStatefulSetTemplate will not be used",
        ),
        (
            advanced_statefulset_template(
                json!({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}}),
            ),
            "spec.template.advancedStatefulSetTemplate.spec.updateStrategy.rollingUpdate.partition: Invalid value: \"2\": partition in advancedStatefulSetTemplate will not be used",
        ),
        (
            deployment_template(json!({"replicas": 2})),
            "spec.template.deploymentTemplate.spec.replicas: Invalid value: \"2\": replicas in deploymentTemplate will not be used",
        ),
        (
            json!({"spec": {"template": {"cloneSetTemplate": null, "deploymentTemplate": {"spec": {"selector": {"matchLabels": {"app": "sample"}}, "template": pod_template()}}}}}),
            "spec.template.deploymentTemplate.metadata.labels: Invalid value",
        ),
        (
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never"}}}}}}}),
            "spec.template.cloneSetTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Never\"",
        ),
    ];
    assert!(cases.len() >= 15);
    for (patch, want) in cases {
        let errors = Api::validate(&object(patch.clone()), None);
        let first = first_error(&errors);
        assert!(
            first.starts_with(want),
            "patch {patch}: got {first:?}, want {want:?}"
        );
    }
}

#[test]
fn updates_keep_subset_placement_and_template_identity() {
    let old = object(json!({}));
    // (patch of the new object, expected start of the first error, or "" when allowed)
    let cases = [
        (json!({"spec": {"replicas": 8}}), ""),
        (
            json!({"spec": {"updateStrategy": {"manualUpdate": {"partitions": {"zone-b": 3}}}}}),
            "",
        ),
        (
            subsets(vec![
                zone("zone-a", None),
                zone("zone-b", None),
                zone("zone-c", None),
                zone("zone-d", None),
            ]),
            "",
        ),
        (
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}}}}}}}),
            "",
        ),
        (
            subsets(vec![
                json!({"name": "zone-a", "replicas": "50%", "nodeSelectorTerm": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-x"]}]}}),
                zone("zone-b", None),
            ]),
            "spec.topology.subsets[0].nodeSelectorTerm: Forbidden: may not be changed in an update",
        ),
        (
            subsets(vec![zone("zone-a", Some(json!("50%"))), {
                let mut b = zone("zone-b", None);
                b["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
                b
            }]),
            "spec.topology.subsets[1].tolerations: Forbidden: may not be changed in an update",
        ),
    ];
    for (patch, want) in cases {
        let errors = Api::validate(&object(patch.clone()), Some(&old));
        let first = first_error(&errors);
        if want.is_empty() {
            assert_eq!(errors, Vec::new(), "patch {patch}");
        } else {
            assert!(
                first.starts_with(want),
                "patch {patch}: got {first:?}, want {want:?}"
            );
        }
    }
}

#[test]
fn statefulset_template_updates_are_limited() {
    let old = object(statefulset_template(json!({"serviceName": "web"})));
    let allowed = [
        json!({"serviceName": "web", "podManagementPolicy": "OrderedReady"}),
        json!({"serviceName": "web", "minReadySeconds": 5, "ordinals": {"start": 1}}),
        json!({"serviceName": "web", "updateStrategy": {"type": "OnDelete"}}),
        json!({"serviceName": "web", "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}}),
        json!({"serviceName": "web", "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}}}),
    ];
    for spec in allowed {
        let new = object(statefulset_template(spec.clone()));
        assert_eq!(Api::validate(&new, Some(&old)), Vec::new(), "{spec}");
    }
    for spec in [
        json!({"serviceName": "other"}),
        json!({"serviceName": "web", "podManagementPolicy": "Parallel"}),
        json!({"serviceName": "web", "revisionHistoryLimit": 3}),
    ] {
        let new = object(statefulset_template(spec.clone()));
        let first = first_error(&Api::validate(&new, Some(&old)));
        assert!(
            first.starts_with("spec.template.statefulSetTemplate.spec: Forbidden: updates to statefulsetTemplate spec"),
            "{spec}: {first}"
        );
    }

    let old = object(advanced_statefulset_template(json!({"serviceName": "web"})));
    let new = object(advanced_statefulset_template(json!({
        "serviceName": "web",
        "updateStrategy": {"type": "OnDelete"},
        "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}},
    })));
    assert_eq!(Api::validate(&new, Some(&old)), Vec::new());
    let new = object(advanced_statefulset_template(
        json!({"serviceName": "web", "podManagementPolicy": "Parallel"}),
    ));
    assert!(
        first_error(&Api::validate(&new, Some(&old))).starts_with(
            "spec.template.advancedStatefulSetTemplate.spec: Forbidden: updates to advancedStatefulsetTemplate spec"
        )
    );
}

#[test]
fn status_maps_as_upstream() {
    let alpha: v1alpha1::UnitedDeployment = crate::kinds::decode(json!({
        "apiVersion": V1ALPHA1,
        "kind": "UnitedDeployment",
        "metadata": {"name": "sample"},
        "spec": {"selector": {"matchLabels": {"app": "sample"}}},
        "status": {
            "replicas": 5, "updatedReplicas": 2, "currentRevision": "r1",
            "subsetReplicas": {"a": 3, "b": 2},
            "subsetStatuses": [{"name": "a", "replicas": 3, "readyReplicas": 3, "partition": 1}],
            "updateStatus": {"updatedRevision": "r2", "currentPartitions": {"a": 1, "b": 2}},
        },
    }))
    .expect("decodes");
    let beta = Api::to_v1beta1(alpha.clone());
    let status = beta.status.as_ref().expect("status");
    assert_eq!(status.updated_revision, "r2");
    let subsets: Vec<_> = status
        .subset_statuses
        .iter()
        .map(|s| (s.name.as_str(), s.replicas, s.ready_replicas, s.partition))
        .collect();
    assert_eq!(subsets, [("a", 3, 3, 1), ("b", 2, 0, 2)]);
    // subsetReplicas and currentPartitions added a status for "b", which the upstream mapping would keep in
    // the v1alpha1 subsetStatuses on the way down: the original v1alpha1 part is stashed and restored.
    assert!(
        beta.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS)),
        "the v1alpha1 subset part did not survive the mapping and is stashed"
    );
    assert_eq!(Api::to_v1alpha1(beta.clone()), alpha);

    // A v1beta1 status converts down as upstream and back without any stash.
    let mut plain = beta.clone();
    plain.metadata.annotations = None;
    let down = Api::to_v1alpha1(plain.clone());
    let down_status = down.status.as_ref().expect("status");
    assert_eq!(
        down_status.subset_replicas,
        BTreeMap::from([("a".to_string(), 3), ("b".to_string(), 2)])
    );
    assert_eq!(
        down_status.update_status,
        Some(v1alpha1::UpdateStatus {
            updated_revision: "r2".into(),
            current_partitions: BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 2)]),
        })
    );
    assert_eq!(down.metadata.annotations, None);
    assert_eq!(Api::to_v1beta1(down), plain);
}

#[test]
fn a_stale_stash_loses_to_a_newer_status() {
    let alpha: v1alpha1::UnitedDeployment = crate::kinds::decode(json!({
        "apiVersion": V1ALPHA1,
        "kind": "UnitedDeployment",
        "metadata": {"name": "sample"},
        "spec": {"selector": {"matchLabels": {"app": "sample"}}},
        "status": {"replicas": 1, "updatedReplicas": 1, "currentRevision": "r1", "subsetReplicas": {"a": 1}},
    }))
    .expect("decodes");
    let mut beta = Api::to_v1beta1(alpha);
    // The controller (in v1beta1) moves on; the stash no longer converts to this status.
    if let Some(status) = beta.status.as_mut() {
        status.subset_statuses[0].replicas = 4;
        status.updated_revision = "r2".into();
    }
    let down = Api::to_v1alpha1(beta);
    let status = down.status.expect("status");
    assert_eq!(
        status.subset_replicas,
        BTreeMap::from([("a".to_string(), 4)])
    );
    assert_eq!(
        status.update_status.map(|u| u.updated_revision),
        Some("r2".to_string())
    );
    assert_eq!(down.metadata.annotations, None);
}

#[test]
fn json_dispatch_converts_both_ways() {
    let mut v1alpha1 = base();
    v1alpha1["apiVersion"] = json!(V1ALPHA1);
    v1alpha1["spec"]["topology"]["subsets"][0]["patch"] =
        json!({"spec": {"containers": [{"name": "nginx", "futureField": 1}]}});
    v1alpha1["spec"]["template"]["cloneSetTemplate"]["spec"]["template"]["spec"]["futureField"] =
        json!(true);
    v1alpha1["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"] = json!({"type": "InPlaceIfPossible", "partition": 2, "maxUnavailable": "25%", "maxSurge": 1,
               "paused": true, "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}});
    v1alpha1["spec"]["template"]["cloneSetTemplate"]["spec"]["scaleStrategy"] =
        json!({"disablePVCReuse": true});
    let v1beta1 = Kind::UnitedDeployment
        .convert(v1alpha1.clone(), V1BETA1)
        .expect("up");
    assert_eq!(v1beta1["apiVersion"], V1BETA1);
    // Everything but the CloneSet spec's strategies is carried verbatim; those are the v1beta1 CloneSet's.
    let mut same = v1beta1["spec"].clone();
    let clone_spec = &mut same["template"]["cloneSetTemplate"]["spec"];
    assert_eq!(
        clone_spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible", "partition": 2, "maxUnavailable": "25%",
            "maxSurge": 1, "paused": true, "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5}}})
    );
    assert_eq!(
        clone_spec["scaleStrategy"],
        json!({}),
        "enablePVCReuse false"
    );
    clone_spec["updateStrategy"] =
        v1alpha1["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"].clone();
    clone_spec["scaleStrategy"] =
        v1alpha1["spec"]["template"]["cloneSetTemplate"]["spec"]["scaleStrategy"].clone();
    assert_eq!(same, v1alpha1["spec"]);
    assert_eq!(
        v1beta1["metadata"].get("annotations"),
        None,
        "nothing to stash"
    );
    let back = crate::kinds::convert(v1beta1, V1ALPHA1).expect("down");
    assert_eq!(back, v1alpha1);
}

/// What the CloneSet conversion stashes for a CloneSet template (an OnDelete type with rolling-update
/// fields, say) is carried in the UnitedDeployment's stash, never in the template's metadata (which is
/// copied onto the subset CloneSets).
#[test]
fn cloneset_template_stash_stays_on_the_uniteddeployment() {
    let mut alpha = base();
    alpha["apiVersion"] = json!(V1ALPHA1);
    alpha["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"] =
        json!({"type": "OnDelete", "partition": 1, "maxUnavailable": 3});
    // (The conversion writes the empty strategies, as Go does.)
    alpha["spec"]["template"]["cloneSetTemplate"]["spec"]["scaleStrategy"] = json!({});
    let beta = Kind::UnitedDeployment
        .convert(alpha.clone(), V1BETA1)
        .expect("up");
    let template = &beta["spec"]["template"]["cloneSetTemplate"];
    assert_eq!(
        template["spec"]["updateStrategy"],
        json!({"type": "OnDelete"})
    );
    assert_eq!(template["metadata"], json!({"labels": {"app": "sample"}}));
    let stash = beta
        .pointer(&format!(
            "/metadata/annotations/{}",
            keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .expect("stashed");
    assert!(stash.contains("template.cloneSetTemplate"), "{stash}");
    let typed: v1beta1::UnitedDeployment = crate::kinds::decode(beta.clone()).expect("decodes");
    let seen = template_as_v1alpha1(&typed.metadata, &typed.spec.template);
    assert_eq!(
        serde_json::to_value(&seen).expect("encodes")["cloneSetTemplate"]["spec"]["updateStrategy"],
        alpha["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"]
    );
    let back = crate::kinds::convert(beta, V1ALPHA1).expect("down");
    assert_eq!(back, alpha);
}

/// A UnitedDeployment as OpenKruise v1.9.0 wrote it (`tests/fixtures/openkruise-v1.9`) converts to v1beta1
/// and back unchanged.
#[test]
fn openkruise_v1_9_object_round_trips() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/openkruise-v1.9/fx-uniteddeployments.apps.kruise.io.json");
    let list: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    let ud = list["items"][0].clone();
    let _: v1alpha1::UnitedDeployment = crate::kinds::decode(ud.clone()).expect("decodes");
    let beta = Kind::UnitedDeployment
        .convert(ud.clone(), V1BETA1)
        .expect("up");
    assert_eq!(
        beta["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}})
    );
    let back = crate::kinds::convert(beta, V1ALPHA1).expect("down");
    assert_eq!(back, ud);
}

#[test]
fn crd_has_upstream_shape() {
    let crd = Api::crd();
    assert_eq!(crd.spec.names.short_names, Some(vec!["ud".to_string()]));
    for version in &crd.spec.versions {
        let scale = version
            .subresources
            .as_ref()
            .and_then(|s| s.scale.as_ref())
            .expect("scale");
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.labelSelector")
        );
        let schema = serde_json::to_value(&version.schema).expect("schema");
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        let templates = &spec["template"]["properties"];
        for name in [
            "statefulSetTemplate",
            "advancedStatefulSetTemplate",
            "cloneSetTemplate",
            "deploymentTemplate",
        ] {
            assert_eq!(
                templates[name]["properties"]["metadata"]["x-kubernetes-preserve-unknown-fields"],
                true,
                "{name}"
            );
        }
        for name in ["statefulSetTemplate", "deploymentTemplate"] {
            assert_eq!(
                templates[name]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"],
                true
            );
        }
        for name in ["advancedStatefulSetTemplate", "cloneSetTemplate"] {
            let pod = &templates[name]["properties"]["spec"]["properties"]["template"];
            assert_eq!(pod["x-kubernetes-preserve-unknown-fields"], true, "{name}");
        }
        let topology = &spec["topology"]["properties"];
        assert_eq!(
            topology["subsets"]["items"]["properties"]["patch"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            topology["scheduleStrategy"]["properties"]["type"]["enum"],
            json!(["Adaptive", "Fixed", ""])
        );
        assert_eq!(
            spec["updateStrategy"]["properties"]["type"]["enum"],
            json!(["Manual", ""])
        );
    }
}

fn arb_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("a".to_string()),
        Just("b".to_string()),
        Just("c".to_string())
    ]
}

fn arb_subset_status() -> impl Strategy<Value = v1beta1::UnitedDeploymentSubsetStatus> {
    (
        arb_name(),
        0..4i32,
        0..4i32,
        0..3i32,
        0..2i32,
        any::<bool>(),
    )
        .prop_map(
            |(name, replicas, ready_replicas, partition, reserved_pods, schedulable)| {
                v1beta1::UnitedDeploymentSubsetStatus {
                    name,
                    replicas,
                    ready_replicas,
                    partition,
                    reserved_pods,
                    conditions: if schedulable {
                        vec![v1beta1::UnitedDeploymentSubsetCondition {
                            type_: v1beta1::SUBSET_CONDITION_SCHEDULABLE.into(),
                            status: "False".into(),
                            reason: "reschedule".into(),
                            ..Default::default()
                        }]
                    } else {
                        Vec::new()
                    },
                }
            },
        )
}

fn arb_int_map() -> impl Strategy<Value = BTreeMap<String, i32>> {
    proptest::collection::btree_map(arb_name(), 0..4i32, 0..3)
}

fn arb_spec() -> impl Strategy<Value = v1beta1::UnitedDeploymentSpec> {
    (
        proptest::option::of(0..10i32),
        proptest::collection::vec(
            (
                arb_name(),
                proptest::option::of(prop_oneof![
                    (0..5i32).prop_map(IntOrString::Int),
                    (0..101i32).prop_map(|p| IntOrString::String(format!("{p}%")))
                ]),
                proptest::option::of(Just(json!({"metadata": {"labels": {"zone": "x"}}}))),
            ),
            0..3,
        ),
        prop_oneof![Just(""), Just("Fixed"), Just("Adaptive")],
        arb_int_map(),
    )
        .prop_map(|(replicas, subsets, schedule, partitions)| {
            let mut spec: v1beta1::UnitedDeploymentSpec =
                serde_json::from_value(base()["spec"].clone()).expect("base spec");
            spec.replicas = replicas;
            spec.topology.subsets = subsets
                .into_iter()
                .map(|(name, replicas, patch)| v1beta1::Subset {
                    name,
                    replicas,
                    patch,
                    ..Default::default()
                })
                .collect();
            spec.topology.schedule_strategy.type_ = schedule.into();
            spec.update_strategy.manual_update = Some(v1beta1::ManualUpdate { partitions });
            spec
        })
}

fn arb_common() -> impl Strategy<Value = (i64, i32, i32, i32, Option<i32>, String, String)> {
    (
        0..5i64,
        0..9i32,
        0..9i32,
        0..9i32,
        proptest::option::of(0..3i32),
        prop_oneof![Just(String::new()), Just("r1".to_string())],
        prop_oneof![Just(String::new()), Just("app=sample".to_string())],
    )
}

/// A CloneSet template: the metadata and spec of a random CloneSet of either version.
fn arb_v1beta1_cloneset_template() -> impl Strategy<Value = Option<v1beta1::CloneSetTemplateSpec>> {
    proptest::option::of(crate::cloneset::tests::arb_v1beta1().prop_map(|cloneset| {
        let mut metadata = cloneset.metadata;
        metadata.name = None;
        v1beta1::CloneSetTemplateSpec {
            metadata,
            spec: cloneset.spec,
        }
    }))
}

fn arb_v1alpha1_cloneset_template() -> impl Strategy<Value = Option<v1alpha1::CloneSetTemplateSpec>>
{
    proptest::option::of(crate::cloneset::tests::arb_v1alpha1().prop_map(|cloneset| {
        let mut metadata = cloneset.metadata;
        metadata.name = None;
        v1alpha1::CloneSetTemplateSpec {
            metadata,
            spec: cloneset.spec,
        }
    }))
}

/// The v1alpha1 spec with the fields of `spec` and `clone_set_template` (the template of `spec`
/// otherwise).
fn v1alpha1_spec(
    spec: v1beta1::UnitedDeploymentSpec,
    clone_set_template: Option<v1alpha1::CloneSetTemplateSpec>,
) -> v1alpha1::UnitedDeploymentSpec {
    let mut template: v1alpha1::SubsetTemplate =
        spec.template.map_clone_set_template(|_| Default::default());
    template.clone_set_template = clone_set_template;
    v1alpha1::UnitedDeploymentSpec {
        replicas: spec.replicas,
        selector: spec.selector,
        template,
        topology: spec.topology,
        update_strategy: spec.update_strategy,
        revision_history_limit: spec.revision_history_limit,
    }
}

fn arb_v1beta1() -> impl Strategy<Value = v1beta1::UnitedDeployment> {
    (
        (arb_spec(), arb_v1beta1_cloneset_template()).prop_map(|(mut spec, template)| {
            spec.template.clone_set_template = template;
            spec
        }),
        proptest::option::of((
            arb_common(),
            proptest::collection::vec(arb_subset_status(), 0..4),
            prop_oneof![Just(String::new()), Just("r2".to_string())],
        )),
    )
        .prop_map(|(spec, status)| {
            let mut object = v1beta1::UnitedDeployment::new("sample", spec);
            object.status = status.map(
                |(
                    (generation, replicas, ready, updated, collision, current, selector),
                    subsets,
                    updated_revision,
                )| {
                    v1beta1::UnitedDeploymentStatus {
                        observed_generation: generation,
                        replicas,
                        ready_replicas: ready,
                        updated_replicas: updated,
                        updated_ready_replicas: ready.min(updated),
                        collision_count: collision,
                        current_revision: current,
                        updated_revision,
                        subset_statuses: subsets,
                        conditions: vec![v1beta1::UnitedDeploymentCondition {
                            type_: v1beta1::CONDITION_SUBSET_PROVISIONED.into(),
                            status: "True".into(),
                            ..Default::default()
                        }],
                        label_selector: selector,
                        ..Default::default()
                    }
                },
            );
            object
        })
}

fn arb_v1alpha1() -> impl Strategy<Value = v1alpha1::UnitedDeployment> {
    (
        (arb_spec(), arb_v1alpha1_cloneset_template())
            .prop_map(|(spec, template)| v1alpha1_spec(spec, template)),
        proptest::option::of((
            arb_common(),
            proptest::collection::vec(arb_subset_status(), 0..4),
            arb_int_map(),
            proptest::option::of((
                prop_oneof![Just(String::new()), Just("r2".to_string())],
                arb_int_map(),
            )),
        )),
    )
        .prop_map(|(spec, status)| {
            let mut object = v1alpha1::UnitedDeployment::new("sample", spec);
            object.status = status.map(
                |(
                    (generation, replicas, ready, updated, collision, current, selector),
                    subsets,
                    subset_replicas,
                    update,
                )| {
                    v1alpha1::UnitedDeploymentStatus {
                        observed_generation: generation,
                        replicas,
                        ready_replicas: ready,
                        updated_replicas: updated,
                        reserved_pods: collision.unwrap_or_default(),
                        collision_count: collision,
                        current_revision: current,
                        subset_replicas,
                        subset_statuses: subsets,
                        update_status: update.map(|(updated_revision, current_partitions)| {
                            v1alpha1::UpdateStatus {
                                updated_revision,
                                current_partitions,
                            }
                        }),
                        label_selector: selector,
                        ..Default::default()
                    }
                },
            );
            object
        })
}

/// Runs `test` on a thread with a larger stack: a UnitedDeployment holds whole workload specs, which the
/// strategies move around by value, more than a test thread's default stack holds in a debug build.
fn on_big_stack(test: impl FnOnce() + Send + 'static) {
    let handle = std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(test)
        .expect("spawns the test thread");
    if let Err(panic) = handle.join() {
        std::panic::resume_unwind(panic);
    }
}

fn run_cases<T: std::fmt::Debug>(
    strategy: impl Strategy<Value = T>,
    test: impl Fn(T) -> Result<(), TestCaseError>,
) {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(512));
    if let Err(error) = runner.run(&strategy, test) {
        panic!("{error}");
    }
}

/// v1beta1 → v1alpha1 → v1beta1 is the identity, for a CloneSet template holding any v1beta1 CloneSet
/// spec (and metadata), and any status.
#[test]
fn v1beta1_round_trips() {
    on_big_stack(|| {
        run_cases(arb_v1beta1(), |object| {
            let down = Api::to_v1alpha1(object.clone());
            prop_assert_eq!(Api::to_v1beta1(down), object.clone());
            let json = serde_json::to_value(&object).expect("encode");
            let through = Kind::UnitedDeployment
                .convert(json.clone(), V1ALPHA1)
                .expect("down");
            let back = Kind::UnitedDeployment
                .convert(through, V1BETA1)
                .expect("up");
            prop_assert_eq!(back, json);
            Ok(())
        })
    });
}

/// v1alpha1 → v1beta1 → v1alpha1 is the identity, for a CloneSet template holding any v1alpha1 CloneSet
/// spec (every strategy field, the pre-download annotations and the exclude-preparing-delete label on its
/// metadata), and any status.
#[test]
fn v1alpha1_round_trips() {
    on_big_stack(|| {
        run_cases(arb_v1alpha1(), |object| {
            let up = Api::to_v1beta1(object.clone());
            prop_assert_eq!(Api::to_v1alpha1(up), object.clone());
            let json = serde_json::to_value(&object).expect("encode");
            let through = Kind::UnitedDeployment
                .convert(json.clone(), V1BETA1)
                .expect("up");
            let back = Kind::UnitedDeployment
                .convert(through, V1ALPHA1)
                .expect("down");
            prop_assert_eq!(back, json);
            Ok(())
        })
    });
}
