use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodReadinessGate, PodTemplateSpec};
use kruise_api::daemonset::v1beta1::DaemonSetSpec;
use proptest::prelude::*;

use super::*;
use crate::pods::testing::{ago, now, pod};

const OLD: &str = "ds-old";
const NEW: &str = "ds-new";

fn template(image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some(image.into()),
                ..Container::default()
            }],
            ..Default::default()
        }),
    }
}

fn spec(yaml: &str) -> DaemonSetSpec {
    let mut value: serde_json::Value = serde_yaml::from_str(yaml).expect("yaml");
    value["template"] = serde_json::json!({});
    let mut spec: DaemonSetSpec = serde_json::from_value(value).expect("spec");
    // As the defaulting webhook leaves it.
    let strategy = &mut spec.update_strategy;
    if strategy.type_.is_empty() {
        strategy.type_ = "RollingUpdate".into();
    }
    if strategy.type_ == "RollingUpdate" {
        let rolling = strategy.rolling_update.get_or_insert_with(Default::default);
        if rolling.max_unavailable.is_none() && rolling.max_surge.is_none() {
            rolling.max_unavailable = Some(IntOrString::Int(1));
        }
    }
    spec
}

/// A daemon Pod on `node`, created `seq` seconds after the epoch of the test, at `revision`.
fn daemon(node: &str, seq: i64, revision: &str, ready: bool) -> crate::pods::testing::PodBuilder {
    let mut b = pod(&format!("ds-{node}-{seq}"))
        .revision(revision)
        .phase("Running")
        .node(node)
        .created(ago(100_000 - seq))
        .condition(
            "Ready",
            if ready { "True" } else { "False" },
            Some(ago(1000)),
        );
    let image = if revision == NEW { "app:v2" } else { "app:v1" };
    if let Some(spec) = b.0.spec.as_mut() {
        spec.containers = vec![Container {
            name: "app".into(),
            image: Some(image.into()),
            ..Container::default()
        }];
    }
    b
}

fn gated(b: crate::pods::testing::PodBuilder) -> crate::pods::testing::PodBuilder {
    let mut b = b.condition("InPlaceUpdateReady", "True", Some(ago(1000)));
    if let Some(spec) = b.0.spec.as_mut() {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "InPlaceUpdateReady".into(),
        }]);
    }
    b
}

#[derive(Clone)]
struct Node {
    name: String,
    labels: BTreeMap<String, String>,
    should_run: bool,
    should_continue_running: bool,
}

fn node(name: &str) -> Node {
    Node {
        name: name.into(),
        labels: BTreeMap::new(),
        should_run: true,
        should_continue_running: true,
    }
}

struct World {
    spec: DaemonSetSpec,
    old: PodTemplateSpec,
    new: PodTemplateSpec,
    nodes: Vec<Node>,
    prune: bool,
}

impl World {
    fn new(spec: DaemonSetSpec, nodes: Vec<Node>) -> Self {
        Self {
            spec,
            old: template("app:v1"),
            new: template("app:v2"),
            nodes,
            prune: false,
        }
    }

    fn with<T>(&self, pods: &[Pod], f: impl FnOnce(&Snapshot<'_>) -> T) -> T {
        let revisions = [
            Revision {
                name: OLD,
                template: &self.old,
            },
            Revision {
                name: NEW,
                template: &self.new,
            },
        ];
        let views: Vec<NodeView<'_>> = self
            .nodes
            .iter()
            .map(|n| NodeView {
                name: &n.name,
                labels: &n.labels,
                should_run: n.should_run,
                should_continue_running: n.should_continue_running,
            })
            .collect();
        let s = Snapshot {
            spec: &self.spec,
            pods,
            nodes: &views,
            update: revisions[1],
            revisions: &revisions,
            now: now(),
            resize: false,
            env_from_metadata: true,
            prune_ineligible_nodes: self.prune,
        };
        f(&s)
    }

    fn plan(&self, pods: &[Pod]) -> Plan {
        self.with(pods, |s| plan(s).expect("plan"))
    }

    fn counts(&self, pods: &[Pod]) -> Counts {
        self.with(pods, counts)
    }
}

fn nodes(n: usize) -> Vec<Node> {
    (0..n).map(|i| node(&format!("n{i}"))).collect()
}

/// The actions, without refresh fixes, as short strings.
fn summary(pods: &[Pod], p: &Plan) -> Vec<String> {
    let name = |i: usize| pods[i].metadata.name.clone().unwrap_or_default();
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { node } => Some(format!("create {node}")),
            Action::Delete { pod, reason } => Some(format!("delete {} {reason:?}", name(*pod))),
            Action::PrepareDelete { pod, reason, .. } => {
                Some(format!("prepare-delete {} {reason:?}", name(*pod)))
            }
            Action::InPlace { pod, .. } => Some(format!("in-place {}", name(*pod))),
            Action::Fix(_) => None,
        })
        .collect()
}

#[test]
fn creates_a_pod_on_every_node_that_should_run_one() {
    let mut fleet = nodes(4);
    fleet[1].should_run = false;
    fleet[1].should_continue_running = false;
    let w = World::new(spec("{}"), fleet);
    let pods = [daemon("n2", 1, NEW, true).build()];
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["create n0", "create n3"],
        "n1 is not eligible, n2 has its Pod"
    );
}

#[test]
fn duplicates_keep_the_oldest_and_failed_pods_go() {
    let w = World::new(spec("{}"), nodes(2));
    let pods = [
        daemon("n0", 5, NEW, true).build(),
        daemon("n0", 2, NEW, true).build(),
        daemon("n0", 9, NEW, false).build(),
        daemon("n1", 1, NEW, false).phase("Failed").build(),
    ];
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        [
            "delete ds-n0-5 Duplicate",
            "delete ds-n0-9 Duplicate",
            "delete ds-n1-1 Failed"
        ]
    );
}

#[test]
fn pods_leave_nodes_that_no_longer_fit_or_exist() {
    let mut fleet = nodes(3);
    // n0: relabelled out of the nodeSelector (should neither run nor continue).
    fleet[0].should_run = false;
    fleet[0].should_continue_running = false;
    // n1: NoSchedule-tainted after the Pod came: no new Pod, but the old one stays.
    fleet[1].should_run = false;
    let w = World::new(spec("{}"), fleet);
    let pods = [
        daemon("n0", 1, NEW, true).build(),
        daemon("n1", 2, NEW, true).build(),
        daemon("n2", 3, NEW, true).build(),
        daemon("gone", 4, NEW, true).build(),
    ];
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["delete ds-n0-1 Misscheduled", "delete ds-gone-4 NodeGone"]
    );
    let c = w.counts(&pods);
    assert_eq!((c.desired, c.current, c.misscheduled), (1, 1, 2));
}

#[test]
fn pre_delete_hook_holds_pods_in_preparing_delete() {
    let w = World::new(
        spec(
            "{lifecycle: {preDelete: {finalizersHandler: [example.com/flush], markPodNotReady: true}}}",
        ),
        nodes(1),
    );
    let hooked = daemon("gone", 1, NEW, true).finalizer("example.com/flush");
    let pods = [hooked.clone().build()];
    let p = w.plan(&pods);
    assert_eq!(
        summary(&pods, &p),
        ["create n0", "prepare-delete ds-gone-1 NodeGone"]
    );
    assert!(p.actions.contains(&Action::PrepareDelete {
        pod: 0,
        reason: DeleteReason::NodeGone,
        mark_not_ready: true
    }));
    // Already waiting: nothing more, until the hook lets go.
    let waiting = [hooked.clone().lifecycle("PreparingDelete").build()];
    assert_eq!(summary(&waiting, &w.plan(&waiting)), ["create n0"]);
    let released = [daemon("gone", 1, NEW, true)
        .lifecycle("PreparingDelete")
        .build()];
    assert_eq!(
        summary(&released, &w.plan(&released)),
        ["create n0", "delete ds-gone-1 NodeGone"]
    );
}

#[test]
fn burst_replicas_caps_creates_and_percent_rounds_down() {
    let w = World::new(spec("{burstReplicas: 50%}"), nodes(5));
    let p = w.plan(&[]);
    // 50% of 5 desired nodes = 2.5, rounded down.
    assert_eq!(summary(&[], &p), ["create n0", "create n1"]);
    assert_eq!(p.deferred_creates, 3);
    let w = World::new(spec("{burstReplicas: 3}"), nodes(5));
    assert_eq!(w.plan(&[]).creates().len(), 3);
    let w = World::new(spec("{burstReplicas: 1%}"), nodes(5));
    assert_eq!(w.plan(&[]).creates().len(), 1, "never zero");
}

#[test]
fn partitioned_scaling_creates_only_outside_the_partition() {
    let w = World::new(
        spec(
            "{scaleStrategy: {partitionedScaling: true}, updateStrategy: {rollingUpdate: {partition: 20%}}}",
        ),
        nodes(10),
    );
    // 20% of 10 = 2 nodes kept out; names sorted.
    let p = w.plan(&[]);
    assert_eq!(
        p.creates(),
        ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"]
    );
    let w = World::new(
        spec("{updateStrategy: {rollingUpdate: {partition: 20%}}}"),
        nodes(10),
    );
    assert_eq!(
        w.plan(&[]).creates().len(),
        10,
        "without partitionedScaling"
    );
}

#[test]
fn int_or_percent_rounding() {
    let s = spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 10%}}}");
    assert_eq!(
        surge_and_unavailable(s.update_strategy.rolling_update.as_ref(), 5),
        Ok((0, 1))
    );
    let s = spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 30%}}}");
    assert_eq!(
        surge_and_unavailable(s.update_strategy.rolling_update.as_ref(), 5),
        Ok((0, 2)),
        "rounds up"
    );
    let s = spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 25%}}}");
    assert_eq!(
        surge_and_unavailable(s.update_strategy.rolling_update.as_ref(), 5),
        Ok((2, 0))
    );
    let s = spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 0}}}");
    assert_eq!(
        surge_and_unavailable(s.update_strategy.rolling_update.as_ref(), 5),
        Ok((0, 1)),
        "both zero: one unavailable"
    );
    let s = spec(
        "{updateStrategy: {rollingUpdate: {rollingUpdateType: InPlaceIfPossible, maxUnavailable: 1, maxSurge: 1}}}",
    );
    assert_eq!(
        surge_and_unavailable(s.update_strategy.rolling_update.as_ref(), 5),
        Ok((0, 1)),
        "no surge in place"
    );
    let s = spec("{updateStrategy: {rollingUpdate: {partition: 20%}}}");
    assert_eq!(partition(&s, 9), Ok(1), "rounds down");
    assert_eq!(partition(&s, 10), Ok(2));
    let s = spec("{updateStrategy: {rollingUpdate: {partition: x%}}}");
    assert_eq!(
        partition(&s, 10).map_err(|e| e.field),
        Err("spec.updateStrategy.rollingUpdate.partition")
    );
}

#[test]
fn standard_update_one_node_at_a_time_from_the_highest_name() {
    let w = World::new(spec("{}"), nodes(3));
    let all_old = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n2", 3, OLD, true).build(),
    ];
    assert_eq!(
        summary(&all_old, &w.plan(&all_old)),
        ["delete ds-n2-3 Update"]
    );
    // n2's new Pod is not ready yet: wait.
    let midway = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n2", 4, NEW, false).build(),
    ];
    assert!(summary(&midway, &w.plan(&midway)).is_empty());
    // An unavailable old Pod is always replaced.
    let broken = [
        daemon("n0", 1, OLD, false).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n2", 4, NEW, false).build(),
    ];
    assert_eq!(
        summary(&broken, &w.plan(&broken)),
        ["delete ds-n0-1 Update"]
    );
}

#[test]
fn partition_and_selector_restrict_the_candidates() {
    let mut fleet = nodes(5);
    for i in [0, 1, 3] {
        fleet[i].labels.insert("node-pool".into(), "canary".into());
    }
    let w = World::new(
        spec(
            "{updateStrategy: {rollingUpdate: {maxUnavailable: 5, partition: 2, selector: {matchLabels: {node-pool: canary}}}}}",
        ),
        fleet.clone(),
    );
    let pods: Vec<Pod> = (0..5)
        .map(|i| daemon(&format!("n{i}"), i, OLD, true).build())
        .collect();
    // Candidates: canary nodes n3, n1, n0 by name descending, cut to 5 − 2 = 3.
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        [
            "delete ds-n3-3 Update",
            "delete ds-n1-1 Update",
            "delete ds-n0-0 Update"
        ]
    );
    let w = World::new(
        spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 5, partition: 4}}}"),
        fleet,
    );
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete ds-n4-4 Update"]);
}

#[test]
fn in_place_if_possible_updates_gated_pods_in_place() {
    let w = World::new(
        spec(
            "{updateStrategy: {rollingUpdate: {rollingUpdateType: InPlaceIfPossible, maxUnavailable: 2}}}",
        ),
        nodes(3),
    );
    let pods = [
        gated(daemon("n0", 1, OLD, true)).build(),
        daemon("n1", 2, OLD, true).build(),
        gated(daemon("n2", 3, OLD, true)).build(),
    ];
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["in-place ds-n2-3", "delete ds-n1-2 Update"],
        "a Pod without the readiness gate is recreated"
    );
    let Some(Action::InPlace { plan: p, .. }) = w.plan(&pods).actions.into_iter().next() else {
        panic!("in place first");
    };
    assert_eq!(p.images.get("app").map(String::as_str), Some("app:v2"));
}

#[test]
fn a_new_gated_pod_is_marked_in_place_ready() {
    let w = World::new(spec("{}"), nodes(1));
    let mut b = daemon("n0", 1, NEW, true);
    if let Some(spec) = b.0.spec.as_mut() {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: "InPlaceUpdateReady".into(),
        }]);
    }
    let pods = [b.build()];
    assert_eq!(w.plan(&pods).actions, [Action::Fix(Fix::InPlaceReady(0))]);
}

#[test]
fn a_drained_old_pod_is_not_marked_ready_again_but_updated() {
    let w = World::new(
        spec(
            "{updateStrategy: {rollingUpdate: {rollingUpdateType: InPlaceIfPossible, maxUnavailable: 1}}}",
        ),
        nodes(1),
    );
    let drained = [gated(daemon("n0", 1, OLD, false))
        .condition("InPlaceUpdateReady", "False", Some(ago(1)))
        .build()];
    assert_eq!(
        summary(&drained, &w.plan(&drained)),
        ["in-place ds-n0-1"],
        "the drain stays; the update goes on"
    );
    assert!(
        !w.plan(&drained)
            .actions
            .contains(&Action::Fix(Fix::InPlaceReady(0)))
    );
}

#[test]
fn paused_and_on_delete_do_not_roll() {
    let pods = [daemon("n0", 1, OLD, true).build()];
    for yaml in [
        "{updateStrategy: {rollingUpdate: {paused: true}}}",
        "{updateStrategy: {type: OnDelete}}",
    ] {
        let w = World::new(spec(yaml), nodes(2));
        assert_eq!(summary(&pods, &w.plan(&pods)), ["create n1"], "{yaml}");
        let after = [
            daemon("n0", 1, OLD, true).build(),
            daemon("n1", 2, NEW, true).build(),
        ];
        assert!(summary(&after, &w.plan(&after)).is_empty(), "{yaml}");
    }
}

#[test]
fn surge_creates_beside_and_deletes_the_old_once_the_new_is_available() {
    let w = World::new(
        spec(
            "{minReadySeconds: 5, updateStrategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}}",
        ),
        nodes(2),
    );
    let all_old = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
    ];
    assert_eq!(summary(&all_old, &w.plan(&all_old)), ["create n1"]);
    let surged = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n1", 3, NEW, false).build(),
    ];
    assert!(
        summary(&surged, &w.plan(&surged)).is_empty(),
        "no duplicate deleted"
    );
    let ready_briefly = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n1", 3, NEW, true)
            .condition("Ready", "True", Some(ago(2)))
            .build(),
    ];
    let p = w.plan(&ready_briefly);
    assert!(summary(&ready_briefly, &p).is_empty(), "minReadySeconds");
    assert!(p.requeue_after.is_some_and(|d| d <= Duration::from_secs(4)));
    let available = [
        daemon("n0", 1, OLD, true).build(),
        daemon("n1", 2, OLD, true).build(),
        daemon("n1", 3, NEW, true).build(),
    ];
    assert_eq!(
        summary(&available, &w.plan(&available)),
        ["delete ds-n1-2 Update"],
        "n1 surges until its old Pod is gone, so n0 waits"
    );
}

#[test]
fn status_counts_the_oldest_pod_of_each_node() {
    let mut fleet = nodes(4);
    fleet[3].should_run = false;
    fleet[0].labels.insert("node-pool".into(), "canary".into());
    fleet[1].labels.insert("node-pool".into(), "canary".into());
    let w = World::new(
        spec(
            "{minReadySeconds: 5, updateStrategy: {rollingUpdate: {selector: {matchLabels: {node-pool: canary}}}}}",
        ),
        fleet,
    );
    let pods = [
        daemon("n0", 1, NEW, true).build(),
        daemon("n1", 2, OLD, true)
            .condition("Ready", "True", Some(ago(1)))
            .build(),
        daemon("n2", 3, NEW, false).build(),
        daemon("n3", 4, OLD, true).build(),
    ];
    let c = w.counts(&pods);
    assert_eq!(
        c,
        Counts {
            desired: 3,
            current: 3,
            misscheduled: 1,
            ready: 2,
            available: 1,
            unavailable: 2,
            updated: 1,
            selected: 2,
        },
        "n2 is updated but not selected"
    );
}

// ---- simulation ----------------------------------------------------------------------------------

/// A node's Pods: (seq, at update revision, ready, terminating).
type SimPod = (i64, bool, bool, bool);

#[derive(Clone, Debug, Default)]
struct Sim {
    pods: BTreeMap<String, Vec<SimPod>>,
    seq: i64,
}

impl Sim {
    fn old_everywhere(w: &World) -> Self {
        let mut sim = Sim::default();
        for n in &w.nodes {
            sim.seq += 1;
            sim.pods
                .insert(n.name.clone(), vec![(sim.seq, false, true, false)]);
        }
        sim
    }

    fn to_pods(&self) -> Vec<Pod> {
        self.pods
            .iter()
            .flat_map(|(node, list)| {
                list.iter().map(|&(seq, new, ready, terminating)| {
                    let b = daemon(node, seq, if new { NEW } else { OLD }, ready);
                    if terminating {
                        b.deleting().build()
                    } else {
                        b.build()
                    }
                })
            })
            .collect()
    }

    fn apply(&mut self, pods: &[Pod], plan: &Plan) {
        let find = |i: usize| {
            let node = target_node(&pods[i]).unwrap_or_default().to_owned();
            let name = pods[i].metadata.name.clone().unwrap_or_default();
            let seq: i64 = name
                .rsplit('-')
                .next()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            (node, seq)
        };
        for a in &plan.actions {
            match a {
                Action::Create { node } => {
                    self.seq += 1;
                    self.pods
                        .entry(node.clone())
                        .or_default()
                        .push((self.seq, true, false, false));
                }
                Action::Delete { pod, .. } => {
                    let (node, seq) = find(*pod);
                    for p in self.pods.entry(node).or_default() {
                        if p.0 == seq {
                            p.2 = false;
                            p.3 = true;
                        }
                    }
                }
                Action::InPlace { pod, .. } => {
                    let (node, seq) = find(*pod);
                    for p in self.pods.entry(node).or_default() {
                        if p.0 == seq {
                            p.1 = true;
                            p.2 = false;
                        }
                    }
                }
                Action::PrepareDelete { .. } => panic!("unexpected {a:?}"),
                Action::Fix(_) => {}
            }
        }
    }

    fn kubelet(&mut self, coin: &mut impl Iterator<Item = bool>, step: usize) {
        for list in self.pods.values_mut() {
            list.retain(|p| !(p.3 && (coin.next().unwrap_or(true) || step % 4 == 3)));
            for p in list.iter_mut() {
                if !p.2 && !p.3 && (coin.next().unwrap_or(true) || step % 4 == 3) {
                    p.2 = true;
                }
            }
        }
    }

    /// Nodes without a Ready, non-terminating Pod.
    fn unavailable(&self, w: &World) -> usize {
        w.nodes
            .iter()
            .filter(|n| {
                !self
                    .pods
                    .get(&n.name)
                    .is_some_and(|l| l.iter().any(|p| p.2 && !p.3))
            })
            .count()
    }

    /// Nodes running two Pods that are not terminating.
    fn doubled(&self) -> usize {
        self.pods
            .values()
            .filter(|l| l.iter().filter(|p| !p.3).count() > 1)
            .count()
    }

    fn updated(&self, node: &str) -> bool {
        self.pods.get(node).is_some_and(|l| l.iter().any(|p| p.1))
    }

    fn steady(&self, w: &World, plan_empty: bool) -> bool {
        plan_empty
            && self.pods.values().all(|l| l.iter().all(|p| p.2 && !p.3))
            && w.nodes
                .iter()
                .all(|n| self.pods.get(&n.name).is_some_and(|l| !l.is_empty()))
    }
}

fn run(w: &World, sim: &mut Sim, coins: &[bool], mut check: impl FnMut(&Sim)) -> bool {
    let mut coin = coins.iter().copied().cycle();
    for step in 0..400 {
        let pods = sim.to_pods();
        let p = w.plan(&pods);
        let empty = summary(&pods, &p).is_empty();
        sim.apply(&pods, &p);
        check(sim);
        if sim.steady(w, empty) {
            return true;
        }
        sim.kubelet(&mut coin, step);
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Standard / InPlaceIfPossible with maxUnavailable: never more nodes without an available Pod.
    #[test]
    fn unavailable_nodes_stay_within_max_unavailable(n in 1usize..9, max in 1usize..5, in_place in any::<bool>(), coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let kind = if in_place { "InPlaceIfPossible" } else { "Standard" };
        let w = World::new(spec(&format!("{{updateStrategy: {{rollingUpdate: {{rollingUpdateType: {kind}, maxUnavailable: {max}}}}}}}")), nodes(n));
        let mut sim = Sim::old_everywhere(&w);
        let done = run(&w, &mut sim, &coins, |sim| {
            assert!(sim.unavailable(&w) <= max, "{sim:?}");
        });
        prop_assert!(done);
        prop_assert!(w.nodes.iter().all(|node| sim.updated(&node.name)));
    }

    /// maxSurge: at most maxSurge nodes run two Pods, and every node keeps an available Pod.
    #[test]
    fn surge_doubles_at_most_max_surge_nodes(n in 1usize..9, surge in 1usize..5, coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let w = World::new(spec(&format!("{{updateStrategy: {{rollingUpdate: {{maxUnavailable: 0, maxSurge: {surge}}}}}}}")), nodes(n));
        let mut sim = Sim::old_everywhere(&w);
        let done = run(&w, &mut sim, &coins, |sim| {
            assert!(sim.doubled() <= surge, "{sim:?}");
            assert_eq!(sim.unavailable(&w), 0, "{sim:?}");
        });
        prop_assert!(done);
    }

    /// Nodes outside the rollout selector, and the partitioned nodes, keep the old revision.
    #[test]
    fn unselected_and_partitioned_nodes_stay_old(n in 1usize..9, canary in proptest::collection::vec(any::<bool>(), 9), part in 0usize..9, max in 1usize..4, coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let mut fleet = nodes(n);
        for (i, node) in fleet.iter_mut().enumerate() {
            if canary[i] {
                node.labels.insert("node-pool".into(), "canary".into());
            }
        }
        let w = World::new(spec(&format!(
            "{{updateStrategy: {{rollingUpdate: {{maxUnavailable: {max}, partition: {part}, selector: {{matchLabels: {{node-pool: canary}}}}}}}}}}"
        )), fleet);
        let mut sim = Sim::old_everywhere(&w);
        let mut coin = coins.iter().copied().cycle();
        for step in 0..200 {
            let pods = sim.to_pods();
            let p = w.plan(&pods);
            sim.apply(&pods, &p);
            for (i, node) in w.nodes.iter().enumerate() {
                if !canary[i] {
                    prop_assert!(!sim.updated(&node.name), "{} is not selected: {sim:?}", node.name);
                }
            }
            let updated = w.nodes.iter().filter(|node| sim.updated(&node.name)).count();
            prop_assert!(updated <= n.saturating_sub(part), "{updated} updated, partition {part}: {sim:?}");
            sim.kubelet(&mut coin, step);
        }
        // At the end every selected node within the budget is updated.
        let selected = (0..n).filter(|&i| canary[i]).count();
        let updated = w.nodes.iter().filter(|node| sim.updated(&node.name)).count();
        prop_assert_eq!(updated, selected.min(n.saturating_sub(part)));
    }

    /// From nothing, every eligible node gets exactly one Pod, in slow bursts.
    #[test]
    fn creation_fills_every_eligible_node_once(n in 1usize..12, burst in 1i32..5, eligible in proptest::collection::vec(any::<bool>(), 12)) {
        let mut fleet = nodes(n);
        for (i, node) in fleet.iter_mut().enumerate() {
            node.should_run = eligible[i];
            node.should_continue_running = eligible[i];
        }
        let w = World::new(spec(&format!("{{burstReplicas: {burst}}}")), fleet);
        let mut sim = Sim::default();
        for _ in 0..40 {
            let pods = sim.to_pods();
            let p = w.plan(&pods);
            prop_assert!(p.creates().len() <= usize::try_from(burst).unwrap_or(0));
            sim.apply(&pods, &p);
        }
        for (i, node) in w.nodes.iter().enumerate() {
            let count = sim.pods.get(&node.name).map_or(0, Vec::len);
            prop_assert_eq!(count, usize::from(eligible[i]), "{}", node.name);
        }
    }
}

/// A node the set no longer selects, whose old Pod is still terminating, uses the rolling update's
/// maxUnavailable unless `DaemonSetPruneIneligibleNodes` leaves such nodes out. A Pod there already
/// held in PreparingDelete by its hook needs no write from manage, so it does not hold the rolling
/// update back either.
#[test]
fn ineligible_nodes_use_no_budget_when_pruned() {
    let mut fleet = nodes(2);
    fleet[1].should_run = false;
    fleet[1].should_continue_running = false;
    let hooked = "lifecycle: {preDelete: {labelsHandler: {example.io/hold: 'true'}}}";
    let terminating = daemon("n1", 2, OLD, true).deleting().build();
    let held = daemon("n1", 2, OLD, true)
        .label("example.io/hold", "true")
        .label("lifecycle.apps.kruise.io/state", "PreparingDelete")
        .build();
    let update_n0 = vec!["delete ds-n0-1 Update"];
    let cases = [
        (&terminating, false, vec![]),
        (&terminating, true, update_n0.clone()),
        (&held, false, update_n0.clone()),
        (&held, true, update_n0.clone()),
    ];
    for (on_n1, prune, want) in cases {
        let pods = [daemon("n0", 1, OLD, true).build(), on_n1.clone()];
        let mut w = World::new(spec(hooked), fleet.clone());
        w.prune = prune;
        let got = summary(&pods, &w.plan(&pods));
        assert_eq!(got, want, "prune={prune}, n1: {:?}", on_n1.metadata.labels);
    }
}
