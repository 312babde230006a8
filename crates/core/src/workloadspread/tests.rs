use super::*;
use crate::pods::testing::{ago, now, pod};
use proptest::prelude::*;
use serde_json::json;

fn zone_term(zone: &str) -> serde_json::Value {
    json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]})
}

/// A WorkloadSpread over CloneSet `app` with subsets `(name, maxReplicas)` on zones of the same name.
fn spread(kind: &str, subsets: &[(&str, Option<serde_json::Value>)]) -> WorkloadSpread {
    let subsets: Vec<serde_json::Value> = subsets
        .iter()
        .map(|(name, max)| {
            let mut s = json!({"name": name, "requiredNodeSelectorTerm": zone_term(name)});
            if let Some(max) = max {
                s["maxReplicas"] = max.clone();
            }
            s
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
        "metadata": {"name": "ws", "namespace": "ns", "generation": 3},
        "spec": {
            "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": kind, "name": "app"},
            "subsets": subsets,
        }
    }))
    .expect("a WorkloadSpread")
}

fn three() -> WorkloadSpread {
    spread(
        "CloneSet",
        &[
            ("zone-a", Some(json!(2))),
            ("zone-b", Some(json!(3))),
            ("zone-c", None),
        ],
    )
}

fn with_status(mut ws: WorkloadSpread, status: WorkloadSpreadStatus) -> WorkloadSpread {
    ws.status = Some(status);
    ws
}

fn missing(status: &WorkloadSpreadStatus, version: &str) -> Vec<i32> {
    status.versioned_subset_statuses[version]
        .iter()
        .map(|s| s.missing_replicas)
        .collect()
}

#[test]
fn create_fills_subsets_in_order_and_records_the_pod() {
    let mut ws = three();
    let mut placed = Vec::new();
    for i in 0..7 {
        let name = format!("app-{i}");
        let d = admit_create(&ws, Some(&name), "v1", 7, now(), "uid");
        placed.push(d.subset.clone().unwrap_or_default());
        if let Some(status) = d.status {
            ws.status = Some(status);
        }
    }
    assert_eq!(
        placed,
        [
            "zone-a", "zone-a", "zone-b", "zone-b", "zone-b", "zone-c", "zone-c"
        ]
    );
    let status = ws.status.clone().unwrap_or_default();
    assert_eq!(missing(&status, "v1"), [0, 0, -1]);
    let creating: Vec<usize> = status.versioned_subset_statuses["v1"]
        .iter()
        .map(|s| s.creating_pods.len())
        .collect();
    assert_eq!(creating, [2, 3, 0], "an unlimited subset records nothing");
    // A Pod already recorded keeps its subset and changes nothing.
    let again = admit_create(&ws, Some("app-3"), "v1", 7, now(), "uid");
    assert_eq!(again.subset.as_deref(), Some("zone-b"));
    assert_eq!(again.status, None);
}

#[test]
fn create_table() {
    let full = |ws: WorkloadSpread, version: &str, missing: [i32; 3]| {
        let mut statuses = initial_subset_statuses(&ws, 10);
        for (s, m) in statuses.iter_mut().zip(missing) {
            s.missing_replicas = m;
        }
        let mut status = WorkloadSpreadStatus::default();
        status
            .versioned_subset_statuses
            .insert(version.into(), statuses);
        with_status(ws, status)
    };
    let unschedulable_a = {
        let mut ws = full(three(), "v1", [2, 3, -1]);
        if let Some(s) = ws.status.as_mut() {
            for list in s.versioned_subset_statuses.values_mut() {
                list[0].conditions.push(WorkloadSpreadSubsetCondition {
                    type_: CONDITION_SCHEDULABLE.into(),
                    status: "False".into(),
                    ..Default::default()
                });
            }
        }
        ws
    };
    let bounded = spread(
        "CloneSet",
        &[("zone-a", Some(json!(1))), ("zone-b", Some(json!(1)))],
    );
    let cases: Vec<(&str, WorkloadSpread, &str, Option<&str>)> = vec![
        ("fresh status", three(), "v1", Some("zone-a")),
        (
            "first full",
            full(three(), "v1", [0, 3, -1]),
            "v1",
            Some("zone-b"),
        ),
        (
            "all bounded full",
            full(three(), "v1", [0, 0, -1]),
            "v1",
            Some("zone-c"),
        ),
        (
            "a new version starts from scratch",
            full(three(), "v1", [0, 0, -1]),
            "v2",
            Some("zone-a"),
        ),
        (
            "unschedulable subset skipped",
            unschedulable_a,
            "v1",
            Some("zone-b"),
        ),
        (
            "no room anywhere",
            {
                let mut ws = bounded.clone();
                let mut status = WorkloadSpreadStatus::default();
                status.versioned_subset_statuses.insert(
                    "v1".into(),
                    vec![
                        WorkloadSpreadSubsetStatus {
                            name: "zone-a".into(),
                            ..Default::default()
                        },
                        WorkloadSpreadSubsetStatus {
                            name: "zone-b".into(),
                            ..Default::default()
                        },
                    ],
                );
                ws.status = Some(status);
                ws
            },
            "v1",
            None,
        ),
        (
            "one unlimited subset: no status",
            spread("CloneSet", &[("zone-a", None)]),
            "v1",
            Some("zone-a"),
        ),
    ];
    for (name, ws, version, want) in cases {
        let d = admit_create(&ws, Some("p"), version, 10, now(), "uid");
        assert_eq!(d.subset.as_deref(), want, "{name}");
    }
}

#[test]
fn percentages_round_up_and_need_the_replicas() {
    let ws = spread(
        "Deployment",
        &[
            ("zone-a", Some(json!("25%"))),
            ("zone-b", Some(json!("50%"))),
            ("zone-c", None),
        ],
    );
    assert!(needs_replicas(&ws, "v1"));
    let statuses = initial_subset_statuses(&ws, 6);
    let got: Vec<i32> = statuses.iter().map(|s| s.missing_replicas).collect();
    assert_eq!(got, [2, 3, -1]);
    let d = admit_create(&ws, None, "v1", 6, now(), "gen-1");
    assert_eq!(d.uid, "gen-1");
    let status = d.status.expect("recorded");
    assert!(
        status.versioned_subset_statuses["v1"][0]
            .creating_pods
            .contains_key("gen-1")
    );
    assert!(!needs_replicas(&with_status(ws, status), "v1"));
}

/// A Pod without a name asks a slot under an id; when that write lands after the webhook gave up
/// (the Pod gated, named by then), the controller placing it under its name and that id finds the
/// slot and keeps it: one slot for the Pod, not two. A fresh id takes a slot as usual.
#[test]
fn a_slot_asked_before_the_pod_had_a_name_is_kept_not_taken_twice() {
    let ws = spread(
        "Deployment",
        &[("zone-a", Some(json!(1))), ("zone-b", Some(json!(1)))],
    );
    let asked = admit_create(&ws, None, "v1", 2, now(), "gen-1");
    assert_eq!(asked.subset.as_deref(), Some("zone-a"));
    let ws = with_status(ws, asked.status.expect("recorded under the id"));
    let placed = admit_create(&ws, Some("web-x7k2p"), "v1", 2, now(), "gen-1");
    assert_eq!(
        placed.subset.as_deref(),
        Some("zone-a"),
        "the slot it asked for"
    );
    assert_eq!(placed.uid, "gen-1", "matched to the slot by the id");
    assert!(placed.status.is_none(), "nothing taken again");
    let other = admit_create(&ws, Some("web-q9m4z"), "v1", 2, now(), "gen-2");
    assert_eq!(
        other.subset.as_deref(),
        Some("zone-b"),
        "another id: a slot of its own"
    );
    assert_eq!(other.uid, "", "a named Pod is recorded under its name");
}

#[test]
fn statefulset_pods_go_by_ordinal() {
    let ws = spread(
        "StatefulSet",
        &[
            ("zone-a", Some(json!(2))),
            ("zone-b", Some(json!(1))),
            ("zone-c", None),
        ],
    );
    let got: Vec<Option<String>> = (0..5)
        .map(|i| admit_create(&ws, Some(&format!("db-{i}")), "v", 0, now(), "").subset)
        .collect();
    assert_eq!(
        got,
        [
            Some("zone-a".into()),
            Some("zone-a".into()),
            Some("zone-b".into()),
            Some("zone-c".into()),
            Some("zone-c".into())
        ]
    );
    assert_eq!(
        admit_create(&ws, Some("db-0"), "v", 0, now(), "").status,
        None
    );
}

#[test]
fn deletion_frees_the_slot_once() {
    let mut ws = three();
    for i in 0..2 {
        if let Some(s) = admit_create(&ws, Some(&format!("p{i}")), "v1", 7, now(), "").status {
            ws.status = Some(s);
        }
    }
    // The controller has seen both Pods: no creating records left.
    if let Some(s) = ws.status.as_mut() {
        for list in s.versioned_subset_statuses.values_mut() {
            list[0].creating_pods.clear();
        }
    }
    let matched = MatchedWorkloadSpread {
        name: "ws".into(),
        subset: "zone-a".into(),
        uid: String::new(),
    };
    let status = admit_delete(&ws, "p0", &matched, "v1", 7, now()).expect("recorded");
    assert_eq!(missing(&status, "v1")[0], 1);
    assert!(
        status.versioned_subset_statuses["v1"][0]
            .deleting_pods
            .contains_key("p0")
    );
    let ws = with_status(ws, status);
    assert_eq!(
        admit_delete(&ws, "p0", &matched, "v1", 7, now()),
        None,
        "recorded once"
    );
    // Its replacement takes the freed slot in zone-a.
    assert_eq!(
        admit_create(&ws, Some("p9"), "v1", 7, now(), "")
            .subset
            .as_deref(),
        Some("zone-a")
    );
    let unlimited = MatchedWorkloadSpread {
        subset: "zone-c".into(),
        ..matched
    };
    assert_eq!(admit_delete(&ws, "q", &unlimited, "v1", 7, now()), None);
}

#[test]
fn inject_writes_affinity_tolerations_patch_and_annotation() {
    let subset: WorkloadSpreadSubset = serde_json::from_value(json!({
        "name": "zone-a",
        "requiredNodeSelectorTerm": zone_term("zone-a"),
        "preferredNodeSelectorTerms": [{"weight": 10, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}],
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "patch": {"metadata": {"labels": {"subset": "a"}}, "spec": {"priorityClassName": "high"}},
    }))
    .expect("subset");
    let mut p = pod("p").build();
    p.spec = Some(serde_json::from_value(json!({
        "containers": [{"name": "c", "image": "i"}],
        "priority": 0,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]},
            {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["arm64"]}]}
        ]}}}
    })).expect("spec"));
    let out = inject("ws", &subset, &p, "").expect("injected");
    let v = serde_json::to_value(&out).expect("json");
    let terms = &v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(terms.as_array().map(Vec::len), Some(2));
    for term in terms.as_array().into_iter().flatten() {
        assert_eq!(
            term["matchExpressions"][1]["key"],
            "topology.kubernetes.io/zone"
        );
    }
    assert_eq!(
        v["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            ["weight"],
        10
    );
    assert_eq!(v["spec"]["tolerations"][0]["key"], "spot");
    assert_eq!(v["metadata"]["labels"]["subset"], "a");
    assert!(
        v["spec"].get("priority").is_none(),
        "priority cleared with a new class"
    );
    assert_eq!(
        v["metadata"]["annotations"][ANNOTATION_MATCHED],
        r#"{"name":"ws","subset":"zone-a"}"#
    );
    // A Pod without required terms gets the subset's as its only term.
    let plain = inject("ws", &subset, &pod("q").build(), "u1").expect("injected");
    let v = serde_json::to_value(&plain).expect("json");
    assert_eq!(
        v["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([zone_term("zone-a")])
    );
    assert_eq!(
        v["metadata"]["annotations"][ANNOTATION_MATCHED],
        r#"{"name":"ws","subset":"zone-a","uid":"u1"}"#
    );
}

fn node(name: &str, zone: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}
    }))
    .expect("node")
}

fn annotated(name: &str, subset: &str) -> Pod {
    pod(name)
        .annotation(
            ANNOTATION_MATCHED,
            &format!(r#"{{"name":"ws","subset":"{subset}"}}"#),
        )
        .running_ready(60)
        .node("n")
        .build()
}

#[test]
fn grouping_adopts_pods_by_their_node() {
    let ws = three();
    let nodes = [
        node("na", "zone-a"),
        node("nb", "zone-b"),
        node("nx", "zone-x"),
    ];
    let lookup = |name: &str| {
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    };
    let pods = [
        annotated("a1", "zone-a"),
        annotated("a2", "zone-a"),
        pod("new-a").running_ready(5).node("na").build(),
        pod("new-b").running_ready(5).node("nb").build(),
        pod("elsewhere").running_ready(5).node("nx").build(),
        pod("pending").build(),
        annotated("gone-subset", "zone-q"),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let g = group_pods(&ws, &refs, 7, lookup);
    let groups = &g.by_version[VERSION_IGNORED];
    assert_eq!(
        groups[0],
        [0, 1, 2],
        "zone-a is full but still matches (no room: lower score only)"
    );
    assert_eq!(groups[1], [3]);
    assert_eq!(groups[3], [4, 5, 6], "no subset");
    assert_eq!(g.adopted, [(2, 0), (3, 1)]);
}

#[test]
fn status_counts_pods_and_keeps_fresh_records() {
    let ws = three();
    let mut old = WorkloadSpreadStatus::default();
    let mut statuses = initial_subset_statuses(&ws, 7);
    statuses[0].creating_pods.insert("a1".into(), Time(now()));
    statuses[0]
        .creating_pods
        .insert("late".into(), Time(ago(10)));
    statuses[0]
        .creating_pods
        .insert("lost".into(), Time(ago(31)));
    statuses[1].deleting_pods.insert("b1".into(), Time(ago(5)));
    statuses[1]
        .deleting_pods
        .insert("stuck".into(), Time(ago(16)));
    old.subset_statuses = statuses.clone();
    old.versioned_subset_statuses
        .insert(VERSION_IGNORED.into(), statuses);
    let ws = with_status(ws, old);
    let pods = [
        annotated("a1", "zone-a"),
        annotated("b1", "zone-b"),
        annotated("stuck", "zone-b"),
        annotated("c1", "zone-c"),
    ];
    let refs: Vec<&Pod> = pods.iter().collect();
    let g = group_pods(&ws, &refs, 7, |_| None);
    let plan = compute_status(&ws, &refs, &g, 7, now()).expect("status");
    let s = &plan.status.subset_statuses;
    assert_eq!(plan.status.observed_generation, 3);
    assert_eq!(
        (s[0].replicas, s[0].missing_replicas),
        (1, 0),
        "a1 counted, late still creating"
    );
    assert_eq!(s[0].creating_pods.keys().collect::<Vec<_>>(), ["late"]);
    assert_eq!(
        (s[1].replicas, s[1].missing_replicas),
        (2, 2),
        "b1 deleting gives its slot back"
    );
    assert_eq!(s[1].deleting_pods.keys().collect::<Vec<_>>(), ["b1"]);
    assert_eq!((s[2].replicas, s[2].missing_replicas), (1, -1));
    assert!(
        plan.findings
            .contains(&Finding::CreateExpired("lost".into()))
    );
    assert!(
        plan.findings
            .contains(&Finding::DeleteExpired("stuck".into()))
    );
    assert_eq!(
        plan.status.versioned_subset_statuses[VERSION_IGNORED],
        plan.status.subset_statuses
    );
    let wait = plan.requeue_after.expect("requeue");
    assert!(
        wait <= Duration::from_secs(20) && wait >= Duration::from_secs(9),
        "{wait:?}"
    );
}

#[test]
fn adaptive_reschedules_pods_that_stay_pending() {
    let mut ws = spread("CloneSet", &[("zone-a", Some(json!(2))), ("zone-b", None)]);
    ws.spec.schedule_strategy = serde_json::from_value(
        json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 10}}),
    )
    .expect("strategy");
    let stuck = |name: &str, age: i64| {
        pod(name)
            .annotation(ANNOTATION_MATCHED, r#"{"name":"ws","subset":"zone-a"}"#)
            .phase("Pending")
            .condition("PodScheduled", "False", None)
            .created(ago(age))
            .build()
    };
    let mut pods = vec![stuck("old", 20), stuck("young", 4)];
    for p in &mut pods {
        if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].reason = Some("Unschedulable".into());
        }
    }
    let refs: Vec<&Pod> = pods.iter().collect();
    let g = group_pods(&ws, &refs, 2, |_| None);
    let plan = compute_status(&ws, &refs, &g, 2, now()).expect("status");
    assert_eq!(plan.reschedule, [0]);
    let cond = |i: usize| plan.status.subset_statuses[i].conditions[0].status.clone();
    assert_eq!((cond(0), cond(1)), ("False".into(), "True".into()));
    assert!(
        plan.requeue_after
            .is_some_and(|w| w <= Duration::from_secs(6))
    );
    // Once nothing is stuck, the subset stays unschedulable for 300 s, then recovers.
    let mut later = with_status(ws, plan.status.clone());
    let plan = compute_status(&later, &[], &group_pods(&later, &[], 2, |_| None), 2, now())
        .expect("status");
    assert_eq!(plan.status.subset_statuses[0].conditions[0].status, "False");
    if let Some(s) = later.status.as_mut() {
        s.subset_statuses[0].conditions[0].last_transition_time = Some(Time(ago(301)));
    }
    let plan = compute_status(&later, &[], &group_pods(&later, &[], 2, |_| None), 2, now())
        .expect("status");
    assert_eq!(plan.status.subset_statuses[0].conditions[0].status, "True");
    assert!(plan.findings.contains(&Finding::Recovered("zone-a".into())));
}

#[test]
fn deletion_costs_per_subset_and_reversed_for_old_versions() {
    let ws = spread(
        "CloneSet",
        &[("zone-a", Some(json!(2))), ("zone-b", Some(json!(3)))],
    );
    let pods: Vec<Pod> = (0..7i64)
        .map(|i| pod(&format!("p{i}")).running_ready(100 - i).build())
        .collect();
    let refs: Vec<&Pod> = pods.iter().collect();
    // zone-a holds 3 (one too many), zone-b 2, and 2 are in no subset.
    let groups = vec![vec![0, 1, 2], vec![3, 4], vec![5, 6]];
    let costs = deletion_costs(&ws, &groups, &refs, 5, false);
    assert_eq!(
        costs[&2], -100,
        "the newest surplus Pod of zone-a goes first"
    );
    assert_eq!((costs[&0], costs[&1]), (200, 200));
    assert_eq!((costs[&3], costs[&4]), (100, 100));
    assert_eq!((costs[&5], costs[&6]), (-300, -300));
    let reversed = deletion_costs(&ws, &groups, &refs, 5, true);
    assert_eq!((reversed[&0], reversed[&2], reversed[&3]), (100, -200, 200));
}

#[test]
fn pod_versions() {
    let owned = |kind: &str| {
        let mut p = pod("p")
            .label(LABEL_POD_TEMPLATE_HASH, "abc")
            .label(LABEL_CONTROLLER_REVISION_HASH, "app-7d9f")
            .build();
        p.metadata.owner_references =
            Some(vec![serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": kind, "name": "x", "uid": "u", "controller": true
        })).expect("owner")]);
        p
    };
    assert_eq!(pod_version(&owned("ReplicaSet")), "abc");
    assert_eq!(pod_version(&owned("StatefulSet")), VERSION_IGNORED);
    let mut cs = owned("CloneSet");
    if let Some(l) = cs.metadata.labels.as_mut() {
        l.remove(LABEL_POD_TEMPLATE_HASH);
    }
    // Counted as one version, as OpenKruise v1.9.0 counts a CloneSet's Pods.
    assert_eq!(pod_version(&cs), VERSION_IGNORED);
    assert_eq!(short_hash("plain"), "plain");
}

/// A model of the webhook and the controller together: Pods created and deleted in any order.
#[derive(Clone, Debug)]
enum Step {
    Create,
    Delete(usize),
    Settle,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Create),
        2 => (0usize..50).prop_map(Step::Delete),
        1 => Just(Step::Settle),
    ]
}

proptest! {
    /// Whatever the order of creations, deletions and controller passes: no bounded subset ever
    /// holds more live Pods than its maxReplicas, a Pod is placed whenever some subset has room,
    /// and subsets fill in order (a Pod goes to subset i only when every earlier subset is full).
    #[test]
    fn subsets_never_overflow_and_fill_in_order(
        maxes in proptest::collection::vec(0i32..4, 1..4),
        unlimited_last in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let mut subsets: Vec<(String, Option<serde_json::Value>)> = maxes
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("s{i}"), Some(json!(m))))
            .collect();
        if unlimited_last {
            subsets.push(("rest".into(), None));
        }
        let named: Vec<(&str, Option<serde_json::Value>)> =
            subsets.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
        let mut ws = spread("CloneSet", &named);
        let mut live: Vec<Pod> = Vec::new();
        let mut counter = 0;
        // The status agrees with the live Pods unless a Pod the controller has not seen yet was
        // deleted (its slot comes back at the next controller pass, as upstream's).
        let mut unseen: std::collections::BTreeSet<String> = Default::default();
        let mut consistent = true;
        let check = |ws: &WorkloadSpread, live: &[Pod]| -> Result<(), TestCaseError> {
            for (i, subset) in ws.spec.subsets.iter().enumerate() {
                let count = live.iter().filter(|p| matched(p, "ws").is_some_and(|m| m.subset == subset.name)).count();
                if let Some(max) = max_replicas(subset, 0).ok().flatten() {
                    prop_assert!(count <= usize::try_from(max).unwrap_or(0), "subset {i}: {count} > {max}");
                }
            }
            Ok(())
        };
        for step in steps {
            match step {
                Step::Create => {
                    counter += 1;
                    let name = format!("p{counter}");
                    let counts: Vec<usize> = ws.spec.subsets.iter()
                        .map(|s| live.iter().filter(|p| matched(p, "ws").is_some_and(|m| m.subset == s.name)).count())
                        .collect();
                    let d = admit_create(&ws, Some(&name), VERSION_IGNORED, 0, now(), "");
                    if let Some(status) = d.status.clone() {
                        ws.status = Some(status);
                    }
                    let room = |i: usize| match max_replicas(&ws.spec.subsets[i], 0).ok().flatten() {
                        None => true,
                        Some(m) => counts[i] < usize::try_from(m).unwrap_or(0),
                    };
                    unseen.insert(name.clone());
                    match d.subset {
                        Some(chosen) if consistent => {
                            let at = ws.spec.subsets.iter().position(|s| s.name == chosen).unwrap_or(usize::MAX);
                            prop_assert!(at < ws.spec.subsets.len());
                            for earlier in 0..at {
                                prop_assert!(!room(earlier), "subset {earlier} had room but {at} was chosen");
                            }
                            let subset = ws.spec.subsets[at].clone();
                            let mut p = inject("ws", &subset, &pod(&name).running_ready(1).build(), "").map_err(TestCaseError::fail)?;
                            p.metadata.creation_timestamp = Some(Time(now()));
                            live.push(p);
                        }
                        Some(chosen) => {
                            let subset = ws.spec.subsets.iter().find(|s| s.name == chosen).cloned().ok_or_else(|| TestCaseError::fail("unknown subset"))?;
                            live.push(inject("ws", &subset, &pod(&name).running_ready(1).build(), "").map_err(TestCaseError::fail)?);
                        }
                        None if consistent => {
                            for i in 0..ws.spec.subsets.len() {
                                prop_assert!(!room(i), "subset {i} had room but the Pod was left out");
                            }
                        }
                        None => {}
                    }
                }
                Step::Delete(i) if !live.is_empty() => {
                    let p = live.remove(i % live.len());
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if unseen.contains(&name) {
                        consistent = false;
                    }
                    if let Some(m) = matched(&p, "ws")
                        && let Some(status) = admit_delete(&ws, &name, &m, VERSION_IGNORED, 0, now())
                    {
                        ws.status = Some(status);
                    }
                }
                Step::Delete(_) => {}
                Step::Settle => {
                    let refs: Vec<&Pod> = live.iter().collect();
                    let g = group_pods(&ws, &refs, 0, |_| None);
                    // Later than every record's expiry: the records of Pods deleted before the
                    // controller saw them are gone too.
                    let later = now() + k8s_openapi::jiff::SignedDuration::from_secs(31);
                    let plan = compute_status(&ws, &refs, &g, 0, later).map_err(TestCaseError::fail)?;
                    ws.status = Some(plan.status);
                    unseen.clear();
                    consistent = true;
                }
            }
            check(&ws, &live)?;
        }
    }

    /// Deletion costs rank every Pod within its subset's limit above every surplus Pod and every
    /// Pod in no subset, and earlier subsets above later ones (reversed for old versions).
    #[test]
    fn deletion_costs_order_subsets(
        counts in proptest::collection::vec(0usize..6, 1..4),
        maxes in proptest::collection::vec(0i32..4, 3),
        reverse in any::<bool>(),
    ) {
        let named: Vec<(String, Option<serde_json::Value>)> = counts.iter().enumerate()
            .map(|(i, _)| (format!("s{i}"), Some(json!(maxes[i % maxes.len()])))).collect();
        let named: Vec<(&str, Option<serde_json::Value>)> = named.iter().map(|(n, m)| (n.as_str(), m.clone())).collect();
        let ws = spread("CloneSet", &named);
        let mut pods = Vec::new();
        let mut groups = vec![Vec::new(); counts.len() + 1];
        for (s, &count) in counts.iter().enumerate() {
            for _ in 0..count {
                groups[s].push(pods.len());
                pods.push(pod(&format!("p{}", pods.len())).running_ready(10).build());
            }
        }
        groups[counts.len()].push(pods.len());
        pods.push(pod("stray").running_ready(10).build());
        let refs: Vec<&Pod> = pods.iter().collect();
        let costs = deletion_costs(&ws, &groups, &refs, 0, reverse);
        prop_assert_eq!(costs.len(), pods.len());
        let n = counts.len();
        for (s, group) in groups.iter().enumerate().take(n) {
            let limit = usize::try_from(maxes[s % maxes.len()]).unwrap_or(0);
            let positive = group.iter().filter(|p| costs[p] > 0).count();
            prop_assert_eq!(positive, group.len().min(limit));
            let rank = if reverse { n - s - 1 } else { s };
            for p in group {
                let want = if costs[p] > 0 { 100 * i32::try_from(n - rank).unwrap_or(0) } else { -100 * i32::try_from(rank + 1).unwrap_or(0) };
                prop_assert_eq!(costs[p], want);
            }
        }
        prop_assert_eq!(costs[&(pods.len() - 1)], -100 * i32::try_from(n + 1).unwrap_or(0));
    }
}
