use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruise_api::uniteddeployment::template_as_v1alpha1;
use proptest::prelude::*;
use serde_json::json;

fn spec(value: Value) -> UnitedDeploymentSpec {
    serde_json::from_value(value).expect("a valid UnitedDeployment spec")
}

fn subsets(list: &[(&str, Value)]) -> Value {
    Value::Array(
        list.iter()
            .map(|(name, extra)| {
                let mut s = json!({"name": name});
                if let (Value::Object(s), Value::Object(extra)) = (&mut s, extra) {
                    s.extend(extra.clone());
                }
                s
            })
            .collect(),
    )
}

fn alloc(
    replicas: Option<i32>,
    list: &[(&str, Value)],
    current: &[(&str, i32)],
) -> Result<Vec<(String, i32)>, String> {
    let spec = spec(json!({"replicas": replicas, "topology": {"subsets": subsets(list)}}));
    let existing = current
        .iter()
        .map(|(n, r)| {
            (
                n.to_string(),
                Existing {
                    spec_replicas: *r,
                    ..Existing::default()
                },
            )
        })
        .collect();
    allocate(&spec, &existing).map(|m| m.into_iter().collect())
}

fn pairs(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = list.iter().map(|(n, r)| (n.to_string(), *r)).collect();
    v.sort();
    v
}

type Subsets = Vec<(&'static str, Value)>;
type Current = Vec<(&'static str, i32)>;
type Want = Result<Vec<(&'static str, i32)>, &'static str>;

#[test]
fn specific_allocator_table() {
    let none = json!({});
    // (replicas, subsets, current workload replicas, expected)
    let cases: Vec<(Option<i32>, Subsets, Current, Want)> = vec![
        // Seed 000: 2, 50% of 10 = 5, the rest 3.
        (
            Some(10),
            vec![
                ("subset-a", json!({"replicas": 2})),
                ("subset-b", json!({"replicas": "50%"})),
                ("subset-c", none.clone()),
            ],
            vec![],
            Ok(vec![("subset-a", 2), ("subset-b", 5), ("subset-c", 3)]),
        ),
        // examples/uniteddeployment.yaml: 50% of 6 = 3; 3 over two subsets: the remainder goes to the
        // last name of the (replicas, name) order — zone-c.
        (
            Some(6),
            vec![
                ("zone-a", json!({"replicas": "50%"})),
                ("zone-b", none.clone()),
                ("zone-c", none.clone()),
            ],
            vec![],
            Ok(vec![("zone-a", 3), ("zone-b", 1), ("zone-c", 2)]),
        ),
        // Once zone-b runs more, it keeps the extra replica.
        (
            Some(6),
            vec![
                ("zone-a", json!({"replicas": "50%"})),
                ("zone-b", none.clone()),
                ("zone-c", none.clone()),
            ],
            vec![("zone-a", 3), ("zone-b", 2), ("zone-c", 1)],
            Ok(vec![("zone-a", 3), ("zone-b", 2), ("zone-c", 1)]),
        ),
        // Scaling 6 → 8: 50% = 4; 4 over b (1) and c (2): c stays ahead.
        (
            Some(8),
            vec![
                ("zone-a", json!({"replicas": "50%"})),
                ("zone-b", none.clone()),
                ("zone-c", none.clone()),
            ],
            vec![("zone-a", 3), ("zone-b", 1), ("zone-c", 2)],
            Ok(vec![("zone-a", 4), ("zone-b", 2), ("zone-c", 2)]),
        ),
        // Rounding half up: 25% of 10 = 2.5 → 3; 15% of 10 = 1.5 → 2.
        (
            Some(10),
            vec![
                ("a", json!({"replicas": "25%"})),
                ("b", json!({"replicas": "15%"})),
                ("c", none.clone()),
            ],
            vec![],
            Ok(vec![("a", 3), ("b", 2), ("c", 5)]),
        ),
        // Nothing specified: 10 over 3, remainder to the last name.
        (
            Some(10),
            vec![
                ("a", none.clone()),
                ("b", none.clone()),
                ("c", none.clone()),
            ],
            vec![],
            Ok(vec![("a", 3), ("b", 3), ("c", 4)]),
        ),
        (
            Some(4),
            vec![("a", json!({"replicas": 3})), ("b", json!({"replicas": 2}))],
            vec![],
            Err("specified subsets' replica (5) is greater than UnitedDeployment replica (4)"),
        ),
        (
            Some(6),
            vec![("a", json!({"replicas": 3})), ("b", json!({"replicas": 2}))],
            vec![],
            Err("specified subsets' replica (5) is less than UnitedDeployment replica (6)"),
        ),
        (
            None,
            vec![("a", json!({"replicas": 3})), ("b", none.clone())],
            vec![],
            Err("all subsets must be specified when UnitedDeployment replica is unspecified"),
        ),
        (
            None,
            vec![("a", json!({"replicas": 3})), ("b", json!({"replicas": 1}))],
            vec![],
            Ok(vec![("a", 3), ("b", 1)]),
        ),
    ];
    for (replicas, list, current, want) in cases {
        let got = alloc(replicas, &list, &current);
        let want = want.map(|w| pairs(&w)).map_err(str::to_string);
        assert_eq!(
            got, want,
            "replicas {replicas:?}, subsets {list:?}, current {current:?}"
        );
    }
}

#[test]
fn min_max_allocator_table() {
    // (replicas, subsets, expected)
    let cases: Vec<(i32, Subsets, Want)> = vec![
        // Upstream's documented example.
        (
            5,
            vec![
                ("subset-a", json!({"minReplicas": 2, "maxReplicas": 4})),
                ("subset-b", json!({"minReplicas": 2})),
            ],
            Ok(vec![("subset-a", 3), ("subset-b", 2)]),
        ),
        (
            10,
            vec![
                ("a", json!({"minReplicas": 1, "maxReplicas": 3})),
                ("b", json!({"minReplicas": 1, "maxReplicas": "50%"})),
                ("c", json!({"minReplicas": 0})),
            ],
            Ok(vec![("a", 3), ("b", 5), ("c", 2)]),
        ),
        // Fewer replicas than the minimums: filled in order.
        (
            3,
            vec![
                ("a", json!({"minReplicas": 2})),
                ("b", json!({"minReplicas": 2})),
            ],
            Ok(vec![("a", 2), ("b", 1)]),
        ),
        (
            3,
            vec![
                ("a", json!({"minReplicas": 4, "maxReplicas": 2})),
                ("b", json!({})),
            ],
            Err("subset[0].maxReplicas(2) must be more than or equal to minReplicas(4)"),
        ),
    ];
    for (replicas, list, want) in cases {
        let got = alloc(Some(replicas), &list, &[]);
        assert_eq!(
            got,
            want.map(|w| pairs(&w)).map_err(str::to_string),
            "{list:?}"
        );
    }
}

#[test]
fn adaptive_allocator_moves_pending_replicas_and_keeps_running_ones() {
    let spec = spec(json!({
        "replicas": 6,
        "topology": {
            "scheduleStrategy": {"type": "Adaptive"},
            "subsets": [
                {"name": "a", "maxReplicas": 3},
                {"name": "b", "maxReplicas": 3},
                {"name": "c"}
            ]
        }
    }));
    let existing = |a: Existing, b: Existing| -> BTreeMap<String, Existing> {
        [("a".to_string(), a), ("b".to_string(), b)].into()
    };
    let e = |spec_replicas, ready_replicas, unschedulable| Existing {
        spec_replicas,
        ready_replicas,
        unschedulable,
        ..Existing::default()
    };
    // Healthy: a 3, b 3, c 0.
    let got = allocate(&spec, &existing(e(3, 3, false), e(3, 3, false))).unwrap_or_default();
    assert_eq!(
        got,
        [("a".into(), 3), ("b".into(), 3), ("c".into(), 0)].into()
    );
    // b unschedulable with 1 ready: held at 1, 2 move to c.
    let got = allocate(&spec, &existing(e(3, 3, false), e(3, 1, true))).unwrap_or_default();
    assert_eq!(
        got,
        [("a".into(), 3), ("b".into(), 1), ("c".into(), 2)].into()
    );
    // b recovered but c runs 2 ready Pods: they stay (c's min raised to its ready count).
    let mut both = existing(e(3, 3, false), e(1, 1, false));
    both.insert("c".into(), e(2, 2, false));
    let got = allocate(&spec, &both).unwrap_or_default();
    assert_eq!(
        got,
        [("a".into(), 3), ("b".into(), 1), ("c".into(), 2)].into()
    );
}

#[test]
fn partitions_are_capped_by_replicas() {
    let spec = spec(json!({
        "replicas": 10,
        "topology": {"subsets": [{"name": "a"}, {"name": "b"}, {"name": "c"}]},
        "updateStrategy": {"type": "Manual", "manualUpdate": {"partitions": {"a": 5, "b": 1}}}
    }));
    let next: BTreeMap<String, i32> = [("a".into(), 3), ("b".into(), 3), ("c".into(), 4)].into();
    let got = next_partitions(&spec, &next);
    assert_eq!(
        got,
        [("a".into(), 3), ("b".into(), 1), ("c".into(), 0)].into()
    );
}

pub(super) fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "UnitedDeployment".into(),
        name: "ud".into(),
        uid: "uid-1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn ud(template: Value, subset_extra: Value) -> UnitedDeployment {
    let mut subset = json!({
        "name": "a",
        "nodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["zone-a"]}]}
    });
    if let (Value::Object(s), Value::Object(extra)) = (&mut subset, subset_extra) {
        s.extend(extra);
    }
    ud_over(template, json!([subset]))
}

/// UnitedDeployment `ud` (4 replicas, selecting `app: ud`) of `template` over `subsets`.
pub(super) fn ud_over(template: Value, subsets: Value) -> UnitedDeployment {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "UnitedDeployment",
        "metadata": {"name": "ud", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "ud"}},
            "template": template,
            "topology": {"subsets": subsets}
        }
    }))
    .expect("a valid UnitedDeployment")
}

fn pod_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "ud"}},
        "spec": {
            "containers": [{"name": "c", "image": "nginx:1"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]}
                ]
            }}}
        }
    })
}

#[test]
fn native_statefulset_subset() {
    let ud = ud(
        json!({"statefulSetTemplate": {
            "metadata": {"labels": {"app": "ud", "team": "x"}, "annotations": {"note": "n"}},
            "spec": {"selector": {"matchLabels": {"app": "ud"}}, "template": pod_template()}
        }}),
        json!({"tolerations": [{"key": "t", "operator": "Exists"}],
               "patch": {"metadata": {"labels": {"patched": "yes"}}}}),
    );
    let got = subset_workload(&ud, "a", "ud-rev1", 2, 1, &owner()).expect("generated");
    let want = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "generateName": "ud-a-",
            "namespace": "ns",
            "labels": {"app": "ud", "team": "x",
                       "apps.kruise.io/controller-revision-hash": "ud-rev1",
                       "apps.kruise.io/subset-name": "a"},
            "annotations": {"note": "n",
                            "apps.kruise.io/subset-patch": r#"{"metadata":{"labels":{"patched":"yes"}}}"#},
            "ownerReferences": [serde_json::to_value(owner()).unwrap_or_default()]
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "ud", "apps.kruise.io/subset-name": "a"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
            "template": {
                "metadata": {"labels": {"app": "ud", "patched": "yes",
                                        "apps.kruise.io/controller-revision-hash": "ud-rev1",
                                        "apps.kruise.io/subset-name": "a"}},
                "spec": {
                    "containers": [{"name": "c", "image": "nginx:1"}],
                    "tolerations": [{"key": "t", "operator": "Exists"}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]},
                                                  {"key": "zone", "operator": "In", "values": ["zone-a"]}]},
                            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]},
                                                  {"key": "zone", "operator": "In", "values": ["zone-a"]}]}
                        ]
                    }}}
                }
            }
        }
    });
    assert_eq!(got, want);
    assert_eq!(workload_partition(TemplateKind::StatefulSet, &got), Some(1));
}

#[test]
fn cloneset_deployment_and_advanced_statefulset_subsets() {
    let plain = json!({"metadata": {"labels": {"app": "ud"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}});
    let cases = [
        (
            json!({"cloneSetTemplate": {"metadata": {"labels": {"app": "ud"}},
                "spec": {"selector": {"matchLabels": {"app": "ud"}}, "template": plain.clone(),
                         "updateStrategy": {"type": "RollingUpdate"}}}}),
            "apps.kruise.io/v1beta1",
            "CloneSet",
            Some(json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}})),
        ),
        (
            json!({"advancedStatefulSetTemplate": {"metadata": {"labels": {"app": "ud"}},
                "spec": {"selector": {"matchLabels": {"app": "ud"}}, "template": plain.clone()}}}),
            "apps.kruise.io/v1beta1",
            "StatefulSet",
            None,
        ),
        (
            json!({"deploymentTemplate": {"metadata": {"labels": {"app": "ud"}},
                "spec": {"selector": {"matchLabels": {"app": "ud"}}, "template": plain.clone()}}}),
            "apps/v1",
            "Deployment",
            None,
        ),
    ];
    for (template, api_version, kind, strategy) in cases {
        let ud = ud(template, json!({}));
        let got = subset_workload(&ud, "a", "ud-rev1", 3, 1, &owner()).expect("generated");
        assert_eq!(got["apiVersion"], json!(api_version));
        assert_eq!(got["kind"], json!(kind));
        assert_eq!(
            got["metadata"]["annotations"]["apps.kruise.io/subset-patch"],
            json!("")
        );
        assert_eq!(got["spec"]["replicas"], json!(3));
        assert_eq!(
            got["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["zone-a"]}]}])
        );
        if let Some(strategy) = strategy {
            assert_eq!(got["spec"]["updateStrategy"], strategy);
        }
        if kind == "Deployment" {
            assert_eq!(got["spec"].get("updateStrategy"), None);
        }
    }
    // The Advanced StatefulSet keeps its (unset) type and gets the partition.
    let ud = ud(
        json!({"advancedStatefulSetTemplate": {"metadata": {},
            "spec": {"selector": {"matchLabels": {"app": "ud"}}, "template": plain}}}),
        json!({}),
    );
    let got = subset_workload(&ud, "a", "r", 3, 2, &owner()).expect("generated");
    assert_eq!(
        got["spec"]["updateStrategy"],
        json!({"rollingUpdate": {"partition": 2}})
    );
    assert_eq!(
        subset_workload(&ud, "zz", "r", 3, 2, &owner()),
        Err("fail to find subset config zz".into())
    );
}

#[test]
fn subset_prefixes() {
    assert_eq!(subset_prefix("ud", "subset-a"), "ud-subset-a-");
    assert_eq!(subset_prefix("ud", "Bad_Name"), "ud-");
    let long = "x".repeat(250);
    assert_eq!(subset_prefix("ud", &long), "ud-");
}

#[test]
fn revision_data_replaces_the_whole_template() {
    let template: SubsetTemplate = serde_json::from_value(json!({
        "cloneSetTemplate": {"metadata": {"labels": {"app": "ud"}}, "spec": {"template": {}}}
    }))
    .expect("template");
    let data = revision_data(&template_as_v1alpha1(&Default::default(), &template)).expect("data");
    assert_eq!(data["spec"]["template"]["$patch"], json!("replace"));
    assert_eq!(
        data["spec"]["template"]["cloneSetTemplate"]["metadata"]["labels"]["app"],
        json!("ud")
    );
    assert!(revision_labels(&template).is_empty());
}

fn pod(name: &str, pending_for: i64, unschedulable: bool, now: Timestamp) -> Pod {
    let created = now
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(pending_for))
        .unwrap_or(now);
    serde_json::from_value(json!({
        "metadata": {"name": name, "creationTimestamp": Time(created)},
        "spec": {"containers": []},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": if unschedulable {"False"} else {"True"},
             "reason": if unschedulable {"Unschedulable"} else {""}}
        ]}
    }))
    .expect("pod")
}

#[test]
fn adaptive_schedulable_windows() {
    let now = Timestamp::now();
    let critical = Duration::from_secs(30);
    let window = Duration::from_secs(300);
    // A Pod pending 40 s (unschedulable) marks the subset unschedulable for the window.
    let late = pod("p-0", 40, true, now);
    let got = adaptive_schedulable(None, &[&late], 2, 1, critical, window, now);
    assert!(got.unschedulable);
    assert_eq!(got.pending_pods, 1);
    assert_eq!(
        got.condition,
        Some((
            "False".into(),
            "reschedule".into(),
            "timeout pending pods found".into()
        ))
    );
    assert_eq!(got.requeue_after, Some(window));
    // Pending only 10 s: look again in 20 s.
    let early = pod("p-1", 10, true, now);
    let got = adaptive_schedulable(None, &[&early], 2, 1, critical, window, now);
    assert!(!got.unschedulable);
    assert!(
        got.requeue_after
            .is_some_and(|d| d <= Duration::from_secs(20) && d >= Duration::from_secs(19))
    );
    // A Pod the scheduler has not rejected does not count.
    let waiting = pod("p-2", 100, false, now);
    assert!(!adaptive_schedulable(None, &[&waiting], 2, 1, critical, window, now).unschedulable);
    // Within the window the subset stays unschedulable; after it, it recovers.
    let condition = |ago: i64| UnitedDeploymentSubsetCondition {
        type_: "Schedulable".into(),
        status: "False".into(),
        last_transition_time: Some(Time(
            now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(ago))
                .unwrap_or(now),
        )),
        reason: "reschedule".into(),
        message: String::new(),
    };
    let got = adaptive_schedulable(Some(&condition(100)), &[], 2, 2, critical, window, now);
    assert!(got.unschedulable);
    assert_eq!(got.condition, None);
    let got = adaptive_schedulable(Some(&condition(301)), &[], 2, 2, critical, window, now);
    assert!(!got.unschedulable);
    assert_eq!(
        got.condition,
        Some((
            "True".into(),
            "recover".into(),
            "unschedulable subset recovered after 300.000000 seconds".into()
        ))
    );
}

#[test]
fn subset_condition_keeps_its_time_while_status_and_reason_hold() {
    let t0 = Timestamp::now();
    let t1 = t0
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(10))
        .unwrap_or(t0);
    let mut conditions = Vec::new();
    let c = |s: &str, r: &str| (s.to_string(), r.to_string(), String::new());
    set_subset_condition(&mut conditions, "Schedulable", c("False", "reschedule"), t0);
    set_subset_condition(&mut conditions, "Schedulable", c("False", "reschedule"), t1);
    assert_eq!(conditions[0].last_transition_time, Some(Time(t0)));
    set_subset_condition(&mut conditions, "Schedulable", c("True", "recover"), t1);
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].last_transition_time, Some(Time(t1)));
}

proptest! {
    /// Whatever the subsets say (within what validation admits), the specific allocator hands out
    /// exactly spec.replicas and gives every specified subset its value.
    #[test]
    fn specific_sums_to_replicas(
        replicas in 0i32..200,
        shares in prop::collection::vec(prop::option::of(0u32..100), 1..6),
        current in prop::collection::vec(0i32..50, 6),
    ) {
        // Scale the specified shares so they never exceed replicas; keep one subset unspecified
        // unless the specified ones add up exactly.
        let total_share: u32 = shares.iter().flatten().sum::<u32>().max(1);
        let mut list = Vec::new();
        let mut given = 0i64;
        for (i, share) in shares.iter().enumerate() {
            let name = format!("s{i}");
            match share {
                Some(s) if i + 1 < shares.len() => {
                    let value = (i64::from(*s) * i64::from(replicas) / i64::from(total_share) / 2) as i32;
                    given += i64::from(value);
                    list.push((name, json!({"replicas": value})));
                }
                _ => list.push((name, json!({}))),
            }
        }
        prop_assume!(given <= i64::from(replicas));
        let refs: Vec<(&str, Value)> = list.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
        let cur: Vec<(&str, i32)> = list.iter().zip(&current).map(|((n, _), c)| (n.as_str(), *c)).collect();
        let got = alloc(Some(replicas), &refs, &cur).map_err(TestCaseError::fail)?;
        let sum: i64 = got.iter().map(|(_, r)| i64::from(*r)).sum();
        prop_assert_eq!(sum, i64::from(replicas));
        for (name, extra) in &list {
            if let Some(v) = extra.get("replicas").and_then(Value::as_i64) {
                let got_v = got.iter().find(|(n, _)| n == name).map(|(_, r)| i64::from(*r));
                prop_assert_eq!(got_v, Some(v));
            }
            let got_v = got.iter().find(|(n, _)| n == name).map(|(_, r)| *r).unwrap_or(-1);
            prop_assert!(got_v >= 0);
        }
    }

    /// The min/max allocator hands out exactly spec.replicas and keeps every subset within its bounds,
    /// whenever the minimums fit into spec.replicas (at least one subset is unbounded, as validation
    /// demands).
    #[test]
    fn min_max_sums_to_replicas_within_bounds(
        replicas in 0i32..300,
        bounds in prop::collection::vec((0i32..40, prop::option::of(0i32..60)), 1..6),
    ) {
        let mut list = Vec::new();
        for (i, (min, max)) in bounds.iter().enumerate() {
            let max = if i + 1 == bounds.len() { None } else { max.map(|m| m.max(*min)) };
            let mut v = json!({"minReplicas": min});
            if let Some(max) = max {
                v["maxReplicas"] = json!(max);
            }
            list.push((format!("s{i}"), v, *min, max));
        }
        let min_sum: i32 = list.iter().map(|(_, _, min, _)| *min).sum();
        prop_assume!(min_sum <= replicas);
        let refs: Vec<(&str, Value)> = list.iter().map(|(n, v, _, _)| (n.as_str(), v.clone())).collect();
        let got = alloc(Some(replicas), &refs, &[]).map_err(TestCaseError::fail)?;
        let sum: i32 = got.iter().map(|(_, r)| *r).sum();
        prop_assert_eq!(sum, replicas);
        for (name, _, min, max) in &list {
            let r = got.iter().find(|(n, _)| n == name).map(|(_, r)| *r).unwrap_or(-1);
            prop_assert!(r >= *min, "{} got {} below min {}", name, r, min);
            if let Some(max) = max {
                prop_assert!(r <= *max, "{} got {} above max {}", name, r, max);
            }
        }
    }

    /// The adaptive allocator keeps the sum and the bounds too, whatever the subsets' health.
    #[test]
    fn adaptive_sums_to_replicas_within_bounds(
        replicas in 0i32..100,
        health in prop::collection::vec((0i32..30, any::<bool>(), prop::option::of(0i32..40)), 1..5),
    ) {
        let mut subsets_json = Vec::new();
        let mut existing = BTreeMap::new();
        let mut maxes = Vec::new();
        for (i, (ready, unschedulable, max)) in health.iter().enumerate() {
            let max = if i + 1 == health.len() { None } else { *max };
            let mut s = json!({"name": format!("s{i}")});
            if let Some(max) = max {
                s["maxReplicas"] = json!(max);
            }
            subsets_json.push(s);
            maxes.push(max);
            existing.insert(format!("s{i}"), Existing { spec_replicas: *ready, ready_replicas: *ready, unschedulable: *unschedulable, ..Existing::default() });
        }
        let spec = spec(json!({"replicas": replicas, "topology": {
            "scheduleStrategy": {"type": "Adaptive"}, "subsets": subsets_json}}));
        let got = allocate(&spec, &existing).map_err(TestCaseError::fail)?;
        let sum: i32 = got.values().sum();
        // The last subset is unbounded and schedulable-or-not it only ever takes what is left, so the
        // sum can fall short only when the last subset is unschedulable.
        let last_unschedulable = health.last().is_some_and(|h| h.1);
        if !last_unschedulable {
            prop_assert_eq!(sum, replicas);
        } else {
            prop_assert!(sum <= replicas);
        }
        for (i, max) in maxes.iter().enumerate() {
            if let Some(max) = max {
                let key = format!("s{i}");
                prop_assert!(got[&key] <= *max, "{} above {}", key, max);
            }
        }
    }

    /// Reservation mode: the replicas each subset can be expected to run (its allocation, less what
    /// is expected to stay reserved) add up to `spec.replicas` when the last subset is schedulable
    /// and unbounded, so every reserved Pod has exactly one substitute; schedulable subsets stay
    /// within their max.
    #[test]
    fn reservation_substitutes_every_reserved_pod(
        replicas in 0i32..60,
        states in prop::collection::vec((0i32..20, 0i32..20, prop::option::of(0i32..30)), 1..5),
    ) {
        let mut subsets_json = Vec::new();
        let mut existing = BTreeMap::new();
        let mut rooms = Vec::new();
        for (i, (spec_replicas, reserved, max)) in states.iter().enumerate() {
            let last = i + 1 == states.len();
            let max = if last { None } else { *max };
            let reserved = if last { 0 } else { (*reserved).min(*spec_replicas) };
            let mut s = json!({"name": format!("s{i}")});
            if let Some(max) = max {
                s["maxReplicas"] = json!(max);
            }
            subsets_json.push(s);
            let unschedulable = reserved > 0;
            rooms.push((unschedulable.then_some(*spec_replicas - reserved), max, unschedulable));
            existing.insert(format!("s{i}"), Existing {
                spec_replicas: *spec_replicas,
                ready_replicas: *spec_replicas - reserved,
                unschedulable,
                marked_unschedulable: unschedulable,
                reserved_pods: reserved,
            });
        }
        let spec = spec(json!({"replicas": replicas, "topology": {
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"reserveUnschedulablePods": true}},
            "subsets": subsets_json}}));
        let got = allocate(&spec, &existing).map_err(TestCaseError::fail)?;
        let mut running = 0;
        for (i, (room, max, unschedulable)) in rooms.iter().enumerate() {
            let r = got[&format!("s{i}")];
            running += room.map_or(r, |room| r.min(room.max(0)));
            if !unschedulable && let Some(max) = max {
                prop_assert!(r <= *max, "s{} got {} above {}", i, r, max);
            }
        }
        prop_assert_eq!(running, replicas);
    }
}

fn progress<'a>(
    ready: i32,
    updated: i32,
    updated_ready: i32,
    partition: i32,
    pods: &'a [&'a Pod],
    failure: Option<&str>,
) -> SubsetProgress<'a> {
    SubsetProgress {
        target: 3,
        partition,
        ready,
        updated,
        updated_ready,
        pods,
        workload_failure: failure.map(str::to_string),
    }
}

#[test]
fn subset_updated_condition_explains_the_shortfall() {
    let now = Timestamp::now();
    let mut pending = pod("p-0", 40, true, now);
    if let Some(c) = pending
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.first_mut())
    {
        c.message = Some("0/3 nodes are available".into());
    }
    let reason = |p: &SubsetProgress<'_>| subset_updated_condition(p).1;
    assert_eq!(reason(&progress(3, 3, 3, 0, &[], None)), "Updated");
    assert_eq!(reason(&progress(3, 1, 1, 2, &[], None)), "Partitioned");
    assert_eq!(reason(&progress(2, 2, 2, 0, &[], None)), "Progressing");
    assert_eq!(
        reason(&progress(2, 2, 2, 0, &[], Some("ReplicaFailure: quota"))),
        "WorkloadFailure"
    );
    let pods = [&pending];
    let (status, reason, message) = subset_updated_condition(&progress(2, 2, 2, 0, &pods, None));
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "Unschedulable")
    );
    assert!(
        message.ends_with("1 Pods cannot be scheduled: 0/3 nodes are available"),
        "{message}"
    );
    let workload = json!({"status": {"conditions": [
        {"type": "FailedScale", "status": "False"},
        {"type": "ReplicaFailure", "status": "True", "message": "exceeded quota"}
    ]}});
    assert_eq!(
        workload_failure(&workload),
        Some("ReplicaFailure: exceeded quota".into())
    );
}

fn reserving_spec(replicas: i32) -> UnitedDeploymentSpec {
    spec(json!({
        "replicas": replicas,
        "topology": {
            "scheduleStrategy": {"type": "Adaptive", "adaptive": {"reserveUnschedulablePods": true}},
            "subsets": [
                {"name": "a", "maxReplicas": 3},
                {"name": "b", "maxReplicas": 3},
                {"name": "c"}
            ]
        }
    }))
}

/// (spec replicas, reserved pods, unschedulable, marked unschedulable)
type SubsetState = (i32, i32, bool, bool);

#[test]
fn reservation_allocator_table() {
    let healthy: SubsetState = (3, 0, false, false);
    // (replicas, existing a/b/c, expected a/b/c)
    let cases: Vec<(i32, [Option<SubsetState>; 3], [i32; 3])> = vec![
        // Nothing exists yet: min/max order.
        (5, [None, None, None], [3, 2, 0]),
        // All healthy.
        (6, [Some(healthy), Some(healthy), None], [3, 3, 0]),
        // b runs 0 of its 3 (3 reserved): b keeps 3, and all 3 are substituted in c.
        (
            6,
            [Some(healthy), Some((3, 3, true, true)), None],
            [3, 3, 3],
        ),
        // b runs 1 of 3 (2 reserved): 2 substitutes in c.
        (
            6,
            [Some(healthy), Some((3, 2, true, true)), None],
            [3, 3, 2],
        ),
        // b recovered (no reserved Pod, still marked): what it runs counts, c shrinks back.
        (
            6,
            [
                Some(healthy),
                Some((3, 0, false, true)),
                Some((3, 0, false, false)),
            ],
            [3, 3, 0],
        ),
        // a first subset with reserved Pods: its substitutes fill b then c.
        (4, [Some((3, 3, true, true)), None, None], [3, 3, 1]),
    ];
    for (replicas, states, want) in cases {
        let existing: BTreeMap<String, Existing> = ["a", "b", "c"]
            .iter()
            .zip(states)
            .filter_map(|(name, state)| {
                let (spec_replicas, reserved_pods, unschedulable, marked_unschedulable) = state?;
                Some((
                    name.to_string(),
                    Existing {
                        spec_replicas,
                        ready_replicas: spec_replicas - reserved_pods,
                        unschedulable,
                        marked_unschedulable,
                        reserved_pods,
                    },
                ))
            })
            .collect();
        let got = allocate(&reserving_spec(replicas), &existing).expect("allocates");
        let got: Vec<i32> = ["a", "b", "c"].iter().map(|n| got[*n]).collect();
        assert_eq!(got, want, "replicas {replicas}, existing {states:?}");
    }
}

fn reserved_pod(name: &str, revision: &str, reserved: Option<bool>) -> pods::testing::PodBuilder {
    let mut p = pods::testing::pod(name).label(keys::LABEL_CONTROLLER_REVISION_HASH, revision);
    if let Some(value) = reserved {
        p = p.label(
            keys::LABEL_UNITED_DEPLOYMENT_RESERVED_POD,
            if value { "true" } else { "false" },
        );
    }
    p
}

#[test]
fn pod_reservation_table() {
    use pods::testing::{ago, now};
    let pending = Duration::from_secs(30);
    let window = Duration::from_secs(60);
    let unschedulable = |p: pods::testing::PodBuilder, created_ago: i64| {
        p.phase("Pending").created(ago(created_ago)).0
    };
    let rejected = |mut p: Pod| {
        p.status.get_or_insert_with(Default::default).conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                ..Default::default()
            }]);
        p
    };
    let cases: Vec<(&str, Pod, Option<Timestamp>, bool, bool)> = vec![
        // (case, pod, updating since, reserved, update timed out)
        (
            "new pod rejected 40 s > 30 s",
            rejected(unschedulable(reserved_pod("p", "v2", None), 40)),
            None,
            true,
            false,
        ),
        (
            "new pod rejected 10 s",
            rejected(unschedulable(reserved_pod("p", "v2", None), 10)),
            None,
            false,
            false,
        ),
        (
            "pending, not rejected by the scheduler",
            unschedulable(reserved_pod("p", "v2", None), 100),
            None,
            false,
            false,
        ),
        (
            "reserved, Ready 100 s > 60 s: released",
            reserved_pod("p", "v2", Some(true)).running_ready(100).0,
            None,
            false,
            false,
        ),
        (
            "reserved, Ready 10 s: still reserved",
            reserved_pod("p", "v2", Some(true)).running_ready(10).0,
            None,
            true,
            false,
        ),
        (
            "reserved, Ready but old revision",
            reserved_pod("p", "v1", Some(true)).running_ready(100).0,
            None,
            true,
            false,
        ),
        (
            "old revision, update 40 s old, not Ready",
            unschedulable(reserved_pod("p", "v1", Some(false)), 100),
            Some(ago(40)),
            true,
            true,
        ),
        (
            "old revision, update 10 s old",
            unschedulable(reserved_pod("p", "v1", Some(false)), 100),
            Some(ago(10)),
            false,
            false,
        ),
        (
            "old revision held Ready by a partition",
            reserved_pod("p", "v1", Some(false)).running_ready(100).0,
            Some(ago(400)),
            false,
            false,
        ),
        (
            "old revision, not updating",
            unschedulable(reserved_pod("p", "v1", None), 100),
            None,
            false,
            false,
        ),
    ];
    for (case, pod, since, reserved, timed_out) in cases {
        let got = pod_reservation(&pod, "v2", since, pending, window, now());
        assert_eq!(
            (got.reserved, got.update_timed_out),
            (reserved, timed_out),
            "{case}"
        );
    }
}

#[test]
fn subset_reservation_marks_labels_and_condition() {
    use pods::testing::now;
    let pending = Duration::from_secs(30);
    let window = Duration::from_secs(60);
    let marked = UnitedDeploymentSubsetCondition {
        type_: "Schedulable".into(),
        status: "False".into(),
        reason: "reschedule".into(),
        ..Default::default()
    };
    // Marked unschedulable: a Pod without the label starts reserved, whatever its state.
    let fresh = reserved_pod("fresh", "v2", None).running_ready(100).0;
    let got = subset_reservation(Some(&marked), &[&fresh], "v2", None, pending, window, now());
    assert_eq!(got.reserved_pods, 1);
    assert!(got.unschedulable && got.marked_unschedulable);
    assert_eq!(got.labels, vec![("fresh".to_string(), true)]);
    assert_eq!(got.condition.2, "reserved pods found");
    // Next reconcile, labelled and Ready long enough: released, condition True; the label flips.
    let released = reserved_pod("fresh", "v2", Some(true)).running_ready(100).0;
    let got = subset_reservation(
        Some(&marked),
        &[&released],
        "v2",
        None,
        pending,
        window,
        now(),
    );
    assert_eq!(got.reserved_pods, 0);
    assert!(!got.unschedulable && got.marked_unschedulable);
    assert_eq!(got.labels, vec![("fresh".to_string(), false)]);
    assert_eq!(
        got.condition,
        (
            "True".into(),
            "reschedule".into(),
            "no reserved pods".into()
        )
    );
    // Just recovered and given more replicas: stays marked so new Pods start reserved.
    assert_eq!(
        recovered_and_scaled_up(&got, 2, 3).map(|c| c.2),
        Some("subset just recovered scaled up".to_string())
    );
    assert_eq!(recovered_and_scaled_up(&got, 3, 3), None);
    // Healthy subset: labels written once (false), then nothing to write.
    let plain = reserved_pod("plain", "v2", None).running_ready(100).0;
    let got = subset_reservation(None, &[&plain], "v2", None, pending, window, now());
    assert_eq!(got.labels, vec![("plain".to_string(), false)]);
    let labelled = reserved_pod("plain", "v2", Some(false))
        .running_ready(100)
        .0;
    let got = subset_reservation(None, &[&labelled], "v2", None, pending, window, now());
    assert!(got.labels.is_empty() && !got.unschedulable);
}

/// A v1.9-style (v1alpha1) UnitedDeployment whose CloneSet template holds `strategies` (v1alpha1
/// `updateStrategy` and `scaleStrategy`), read in v1beta1 as the controller reads it.
fn v1alpha1_cloneset_ud(strategies: Value, partitions: Value) -> UnitedDeployment {
    let mut spec = json!({"selector": {"matchLabels": {"app": "ud"}},
                          "template": {"metadata": {"labels": {"app": "ud"}},
                                       "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}});
    if let (Value::Object(spec), Value::Object(extra)) = (&mut spec, strategies) {
        spec.extend(extra);
    }
    let object = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "UnitedDeployment",
        "metadata": {"name": "ud", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "ud"}},
            "template": {"cloneSetTemplate": {"metadata": {"labels": {"app": "ud"}}, "spec": spec}},
            "topology": {"subsets": [{"name": "a"}]},
            "updateStrategy": {"type": "Manual", "manualUpdate": {"partitions": partitions}},
        }
    });
    let stored = kruise_api::Kind::UnitedDeployment
        .convert(object, kruise_api::kinds::V1BETA1)
        .expect("converts to v1beta1");
    serde_json::from_value(stored).expect("a v1beta1 UnitedDeployment")
}

/// Every field of the v1alpha1 CloneSet spec a UnitedDeployment embeds reaches its subset CloneSets: a
/// subset CloneSet read in v1alpha1 has the template's strategies, except the partition, which is the
/// subset's (`manualUpdate.partitions`, 0 when unset) as OpenKruise v1.9.0's `ApplySubsetTemplate`
/// writes it, whatever the template says.
#[test]
fn subset_clonesets_carry_every_v1alpha1_cloneset_field() {
    let full_update = json!({
        "type": "InPlaceIfPossible", "partition": 3, "maxUnavailable": 1, "maxSurge": "50%",
        "paused": true,
        "priorityStrategy": {"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"tier": "a"}}}]},
        "scatterStrategy": [{"key": "zone", "value": "a"}],
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 10},
    });
    let cases = [
        // (template strategies, manualUpdate.partitions, the subset's partition)
        (
            json!({"updateStrategy": full_update, "scaleStrategy": {"disablePVCReuse": true, "maxUnavailable": 2, "podsToDelete": ["p"]}}),
            json!({"a": 1}),
            1,
        ),
        (
            json!({"updateStrategy": {"type": "ReCreate", "maxUnavailable": "30%", "partition": "50%"}}),
            json!({}),
            0,
        ),
        (
            json!({"updateStrategy": {"type": "InPlaceOnly", "maxSurge": 1, "maxUnavailable": 0}}),
            json!({"a": 9}),
            4,
        ),
        (json!({"updateStrategy": {}}), json!({}), 0),
        (
            json!({"updateStrategy": {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {}}, "minReadySeconds": 5,
                   "lifecycle": {"preDelete": {"markPodNotReady": true}}, "progressDeadlineSeconds": 60,
                   "revisionHistoryLimit": 3}),
            json!({"a": 2}),
            2,
        ),
    ];
    for (strategies, partitions, partition) in cases {
        let ud = v1alpha1_cloneset_ud(strategies.clone(), partitions);
        let next = next_partitions(&ud.spec, &BTreeMap::from([("a".to_string(), 4)]));
        assert_eq!(next.get("a"), Some(&partition), "{strategies}");
        let subset =
            subset_workload(&ud, "a", "ud-rev1", 4, partition, &owner()).expect("generated");
        assert_eq!(subset["apiVersion"], json!("apps.kruise.io/v1beta1"));
        assert_eq!(
            workload_partition(TemplateKind::CloneSet, &subset),
            Some(partition),
            "{strategies}"
        );
        // The subset CloneSet as a v1alpha1 client (or OpenKruise v1.9.0) reads it.
        let read = kruise_api::Kind::CloneSet
            .convert(subset, kruise_api::kinds::V1ALPHA1)
            .expect("converts to v1alpha1");
        let mut want_update = strategies["updateStrategy"].clone();
        want_update["partition"] = json!(partition);
        assert_eq!(read["spec"]["updateStrategy"], want_update, "{strategies}");
        for (field, value) in strategies.as_object().into_iter().flatten() {
            if field != "updateStrategy" {
                assert_eq!(&read["spec"][field], value, "{field} of {strategies}");
            }
        }
        assert_eq!(read["spec"]["replicas"], json!(4));
    }
}

/// The maxUnavailable a reserving subset rolls with is written where the subset workload's own type keeps
/// it (a v1beta1 CloneSet under `rollingUpdate`), so that the apiserver does not prune it.
#[test]
fn max_unavailable_pointer_is_in_the_workload_schema() {
    let ud = v1alpha1_cloneset_ud(
        json!({"updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": 1}}),
        json!({}),
    );
    let mut subset = subset_workload(&ud, "a", "r", 4, 0, &owner()).expect("generated");
    let pointer = TemplateKind::CloneSet.max_unavailable_pointer();
    assert_eq!(subset.pointer(pointer), Some(&json!(1)));
    if let Some(slot) = subset.pointer_mut(pointer) {
        *slot = json!(3);
    }
    let typed: kruise_api::cloneset::v1beta1::CloneSet =
        serde_json::from_value(subset).expect("a v1beta1 CloneSet");
    assert_eq!(
        typed
            .spec
            .update_strategy
            .rolling_update
            .and_then(|r| r.max_unavailable),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
    );
}
