use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodTemplateSpec};
use kruise_api::statefulset::v1beta1::StatefulSetSpec;
use proptest::prelude::*;

use super::*;
use crate::pods::testing::{ago, now, pod};
use crate::rollout::slow_start_batches;

const OLD: &str = "web-old";
const NEW: &str = "web-new";

fn template(image: &str, env: Option<&str>) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some(image.into()),
                env: env.map(|v| {
                    vec![EnvVar {
                        name: "E".into(),
                        value: Some(v.into()),
                        ..EnvVar::default()
                    }]
                }),
                ..Container::default()
            }],
            ..Default::default()
        }),
    }
}

fn spec(yaml: &str) -> StatefulSetSpec {
    let mut value: serde_json::Value = serde_yaml::from_str(yaml).expect("yaml");
    value["template"] = serde_json::json!({});
    serde_json::from_value(value).expect("spec")
}

/// A Pod of set `web` at `ordinal`, `revision`, Ready (for a long time) or not.
fn web(ordinal: i32, revision: &str, ready: bool) -> crate::pods::testing::PodBuilder {
    let mut b = pod(&format!("web-{ordinal}"))
        .revision(revision)
        .phase("Running")
        .node("n")
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

struct World {
    spec: StatefulSetSpec,
    old: PodTemplateSpec,
    new: PodTemplateSpec,
    current_replicas: i32,
}

impl World {
    fn new(spec: StatefulSetSpec) -> Self {
        Self {
            spec,
            old: template("app:v1", None),
            new: template("app:v2", None),
            current_replicas: 0,
        }
    }

    fn plan(&self, pods: &[Pod]) -> Plan {
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
        let s = Snapshot {
            name: "web",
            spec: &self.spec,
            status_current_replicas: self.current_replicas,
            pods,
            current: revisions[0],
            update: revisions[1],
            revisions: &revisions,
            now: now(),
            resize: false,
            env_from_metadata: true,
        };
        plan(&s).expect("plan")
    }
}

/// The actions, without refresh fixes, as short strings (`create web-0@new`, `delete web-3`, …).
fn summary(pods: &[Pod], p: &Plan) -> Vec<String> {
    let name = |i: usize| pods[i].metadata.name.clone().unwrap_or_default();
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { name, revision, .. } => Some(format!(
                "create {name}@{}",
                if revision == NEW { "new" } else { "old" }
            )),
            Action::Delete { pod, .. } => Some(format!("delete {}", name(*pod))),
            Action::PrepareDelete { pod, .. } => Some(format!("prepare-delete {}", name(*pod))),
            Action::PrepareUpdate { pod, .. } => Some(format!("prepare-update {}", name(*pod))),
            Action::InPlace { pod, .. } => Some(format!("in-place {}", name(*pod))),
            Action::Refuse { message, .. } => Some(format!("refuse: {message}")),
            Action::CreateClaims { .. } | Action::Fix(_) => None,
        })
        .collect()
}

#[test]
fn ordinals_and_reserved_ranges() {
    assert_eq!(ordinal_of("web", "web-12"), Some(12));
    assert_eq!(ordinal_of("web", "web-x"), None);
    assert_eq!(ordinal_of("web", "webby-1"), None);
    assert_eq!(ordinal_of("web", "web-"), None);
    let reserved = Reserved::parse(&[
        IntOrString::Int(1),
        IntOrString::String("3-4".into()),
        IntOrString::String("bad".into()),
        IntOrString::String("9-7".into()),
        IntOrString::Int(-2),
    ]);
    assert!(reserved.contains(1) && reserved.contains(4) && !reserved.contains(7));
    assert_eq!(slot_ordinals(0, 3, &reserved), [0, 2, 5]);
    assert_eq!(slot_ordinals(2, 3, &reserved), [2, 5, 6]);
    assert_eq!(slot_ordinals(0, 0, &reserved), Vec::<i32>::new());
    // A huge range is skipped in one step.
    let huge = Reserved::parse(&[IntOrString::String("1-2000000000".into())]);
    assert_eq!(slot_ordinals(0, 2, &huge), [0, 2_000_000_001]);
}

#[test]
fn condemned_pods_are_out_of_range_or_reserved_highest_first() {
    let pods: Vec<Pod> = [0, 1, 2, 5, 7]
        .iter()
        .map(|&o| web(o, OLD, true).build())
        .chain([pod("other-1").build()])
        .collect();
    let reserved = Reserved::parse(&[IntOrString::Int(1)]);
    let slots = partition_pods("web", &pods, 0, 3, &reserved);
    let ords: Vec<(i32, Option<usize>)> = slots.slots.iter().map(|s| (s.ordinal, s.pod)).collect();
    assert_eq!(ords, [(0, Some(0)), (2, Some(2)), (3, None)]);
    assert_eq!(slots.condemned, [4, 3, 1]);
}

#[test]
fn ordered_ready_creates_one_at_a_time_and_names_the_pod_it_waits_for() {
    let w = World::new(spec("{replicas: 3}"));
    let p = w.plan(&[]);
    assert_eq!(summary(&[], &p), ["create web-0@new"]);
    assert_eq!(p.blocked.as_ref().map(|b| b.pod.as_str()), Some("web-0"));

    let pods = vec![web(0, NEW, true).build(), web(1, NEW, false).build()];
    let p = w.plan(&pods);
    assert!(summary(&pods, &p).is_empty(), "{:?}", summary(&pods, &p));
    let blocked = p.blocked.expect("blocked");
    assert_eq!(blocked.reason, BlockReason::RunningAndReady);
    assert_eq!(
        blocked.to_string(),
        "waiting for web-1 to be Running and Ready (phase Running, Ready=False)"
    );

    let pods = vec![web(0, NEW, true).build(), web(1, NEW, true).build()];
    assert_eq!(summary(&pods, &w.plan(&pods)), ["create web-2@new"]);
}

#[test]
fn ordered_ready_scales_down_from_the_highest_ordinal() {
    let w = World::new(spec("{replicas: 1}"));
    let pods: Vec<Pod> = (0..3).map(|o| web(o, NEW, true).build()).collect();
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete web-2"]);
    // A terminating condemned Pod blocks the next deletion.
    let pods = vec![
        web(0, NEW, true).build(),
        web(1, NEW, true).build(),
        web(2, NEW, true).deleting().build(),
    ];
    let p = w.plan(&pods);
    assert!(summary(&pods, &p).is_empty());
    assert_eq!(p.blocked.map(|b| b.reason), Some(BlockReason::Terminating));
}

#[test]
fn min_ready_seconds_blocks_ordered_ready_and_asks_for_a_requeue() {
    let w = World::new(spec(
        "{replicas: 2, updateStrategy: {rollingUpdate: {minReadySeconds: 30}}}",
    ));
    let fresh = web(0, NEW, true).condition("Ready", "True", Some(ago(10)));
    let pods = vec![fresh.build()];
    let p = w.plan(&pods);
    assert!(summary(&pods, &p).is_empty());
    assert_eq!(p.blocked.map(|b| b.reason), Some(BlockReason::Available));
    assert_eq!(p.requeue_after, Some(Duration::from_secs(21)));
    assert_eq!(
        min_ready_seconds(&spec(
            "{updateStrategy: {rollingUpdate: {minReadySeconds: 900}}}"
        )),
        300
    );
}

#[test]
fn parallel_creates_and_deletes_everything_within_scale_max_unavailable() {
    let w = World::new(spec("{replicas: 3, podManagementPolicy: Parallel}"));
    assert_eq!(
        summary(&[], &w.plan(&[])),
        ["create web-0@new", "create web-1@new", "create web-2@new"]
    );
    let limited = World::new(spec(
        "{replicas: 4, podManagementPolicy: Parallel, scaleStrategy: {maxUnavailable: 2}}",
    ));
    assert_eq!(
        summary(&[], &limited.plan(&[])),
        ["create web-0@new", "create web-1@new"]
    );
    // One unavailable Pod already uses one of the two.
    let pods = vec![web(0, NEW, false).build()];
    assert_eq!(summary(&pods, &limited.plan(&pods)), ["create web-1@new"]);

    let w = World::new(spec(
        "{replicas: 1, podManagementPolicy: Parallel, reserveOrdinals: [0]}",
    ));
    let pods: Vec<Pod> = (0..4).map(|o| web(o, NEW, true).build()).collect();
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["delete web-3", "delete web-2", "delete web-0"]
    );
    assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
    assert_eq!(slow_start_batches(0), Vec::<usize>::new());
    assert_eq!(
        slow_start_batches(2000)[..10],
        [1, 2, 4, 8, 16, 32, 64, 128, 256, 500]
    );
}

#[test]
fn failed_pods_are_deleted_to_be_recreated() {
    let w = World::new(spec("{replicas: 2, podManagementPolicy: Parallel}"));
    let pods = vec![
        web(0, NEW, true).phase("Failed").build(),
        web(1, NEW, true).build(),
    ];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["delete web-0"]);
    assert!(matches!(
        p.actions[0],
        Action::Delete {
            reason: DeleteReason::Finished,
            ..
        }
    ));
}

#[test]
fn revision_of_an_empty_slot() {
    // (spec, current replicas, expected creates)
    let cases = [
        (
            "{replicas: 4, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: {partition: 2}}}",
            0,
            vec![
                "create web-0@old",
                "create web-1@old",
                "create web-2@new",
                "create web-3@new",
            ],
        ),
        (
            "{replicas: 4, podManagementPolicy: Parallel, reserveOrdinals: [1], updateStrategy: {rollingUpdate: {partition: 2}}}",
            0,
            vec![
                "create web-0@old",
                "create web-2@old",
                "create web-3@new",
                "create web-4@new",
            ],
        ),
        (
            "{replicas: 3, podManagementPolicy: Parallel, updateStrategy: {type: OnDelete}}",
            3,
            vec!["create web-0@new", "create web-1@new", "create web-2@new"],
        ),
        (
            "{replicas: 3, podManagementPolicy: Parallel, updateStrategy: {type: RollingUpdate}}",
            2,
            vec!["create web-0@old", "create web-1@old", "create web-2@new"],
        ),
        (
            "{replicas: 3, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: {partition: 1, unorderedUpdate: {}}}}",
            0,
            vec!["create web-0@old", "create web-1@new", "create web-2@new"],
        ),
    ];
    for (yaml, current, want) in cases {
        let mut w = World::new(spec(yaml));
        w.current_replicas = current;
        assert_eq!(summary(&[], &w.plan(&[])), want, "{yaml}");
    }
}

#[test]
fn ordered_partition_updates_from_the_top_down_to_it() {
    let w = World::new(spec(
        "{replicas: 5, updateStrategy: {rollingUpdate: {partition: 3}}}",
    ));
    let mut pods: Vec<Pod> = (0..5).map(|o| web(o, OLD, true).build()).collect();
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete web-4"]);
    pods[4] = web(4, NEW, true).build();
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete web-3"]);
    pods[3] = web(3, NEW, true).build();
    assert!(summary(&pods, &w.plan(&pods)).is_empty());
    // Lowering the partition continues.
    let lower = World::new(spec(
        "{replicas: 5, updateStrategy: {rollingUpdate: {partition: 1}}}",
    ));
    assert_eq!(summary(&pods, &lower.plan(&pods)), ["delete web-2"]);
    // Paused: nothing.
    let paused = World::new(spec(
        "{replicas: 5, updateStrategy: {rollingUpdate: {paused: true}}}",
    ));
    assert!(summary(&pods, &paused.plan(&pods)).is_empty());
    // OnDelete: nothing.
    let on_delete = World::new(spec("{replicas: 5, updateStrategy: {type: OnDelete}}"));
    assert!(summary(&pods, &on_delete.plan(&pods)).is_empty());
}

#[test]
fn max_unavailable_rounds_down_with_a_minimum_of_one() {
    let cases = [
        ("1", 5, 1),
        ("'50%'", 5, 2),
        ("'10%'", 5, 1),
        ("'100%'", 4, 4),
        ("3", 20, 3),
    ];
    for (v, replicas, want) in cases {
        let s = spec(&format!(
            "{{replicas: {replicas}, updateStrategy: {{rollingUpdate: {{maxUnavailable: {v}}}}}}}"
        ));
        assert_eq!(max_unavailable(&s), Ok(want), "{v} of {replicas}");
    }
    assert_eq!(max_unavailable(&spec("{replicas: 5}")), Ok(1));
    let bad = spec("{updateStrategy: {rollingUpdate: {maxUnavailable: 'x'}}}");
    assert_eq!(
        max_unavailable(&bad).map_err(|e| e.field),
        Err("spec.updateStrategy.rollingUpdate.maxUnavailable")
    );
    // Parallel with 50% of 4: two at a time, the highest ordinals first.
    let w = World::new(spec(
        "{replicas: 4, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: {maxUnavailable: '50%'}}}",
    ));
    let pods: Vec<Pod> = (0..4).map(|o| web(o, OLD, true).build()).collect();
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["delete web-3", "delete web-2"]
    );
    // An unavailable updated Pod uses one of the two.
    let mut pods = pods;
    pods[3] = web(3, NEW, false).build();
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete web-2"]);
}

#[test]
fn unordered_update_follows_priority_weights() {
    let w = World::new(spec(
        r#"{replicas: 4, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: {
            maxUnavailable: 4, partition: 1,
            unorderedUpdate: {priorityStrategy: {weightPriority: [
              {weight: 50, matchSelector: {matchLabels: {tier: gold}}},
              {weight: 10, matchSelector: {matchLabels: {tier: silver}}}]}}}}}"#,
    ));
    let pods = vec![
        web(0, OLD, true).label("tier", "gold").build(),
        web(1, OLD, true).build(),
        web(2, OLD, true).label("tier", "silver").build(),
        web(3, OLD, true).build(),
    ];
    // Partition 1 keeps one old Pod: the lowest-priority one with the lowest ordinal.
    assert_eq!(
        summary(&pods, &w.plan(&pods)),
        ["delete web-0", "delete web-2", "delete web-3"]
    );
}

#[test]
fn specified_delete_goes_first_ignoring_the_partition() {
    let w = World::new(spec(
        "{replicas: 3, updateStrategy: {rollingUpdate: {partition: 3}}}",
    ));
    let pods = vec![
        web(0, OLD, true)
            .label(kruise_api::keys::LABEL_SPECIFIED_DELETE, "true")
            .build(),
        web(1, OLD, true).build(),
        web(2, OLD, true).build(),
    ];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["delete web-0"]);
    assert!(matches!(
        p.actions[0],
        Action::Delete {
            reason: DeleteReason::Specified,
            ..
        }
    ));
}

#[test]
fn in_place_update_and_in_place_only_refusal() {
    let s = "{replicas: 2, updateStrategy: {rollingUpdate: {podUpdatePolicy: InPlaceIfPossible}}}";
    let w = World::new(spec(s));
    let pods = vec![web(0, NEW, true).build(), web(1, OLD, true).build()];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["in-place web-1"]);
    let Some(Action::InPlace { plan, .. }) = p
        .actions
        .iter()
        .find(|a| matches!(a, Action::InPlace { .. }))
    else {
        panic!("no in-place action");
    };
    assert_eq!(plan.images.get("app").map(String::as_str), Some("app:v2"));

    // An env change cannot be made in place: recreated, or refused under InPlaceOnly.
    let mut w = World::new(spec(s));
    w.new = template("app:v2", Some("x"));
    assert_eq!(summary(&pods, &w.plan(&pods)), ["delete web-1"]);
    let mut only = World::new(spec(
        "{replicas: 2, updateStrategy: {rollingUpdate: {podUpdatePolicy: InPlaceOnly}}}",
    ));
    only.new = template("app:v2", Some("x"));
    assert_eq!(
        summary(&pods, &only.plan(&pods)),
        ["refuse: find strategy is InPlaceOnly but Pod web-1 can not update in-place"]
    );
}

#[test]
fn a_pod_draining_for_its_grace_period_stays_drained() {
    // Updated in place with a 3 s grace period: drained a second ago, not yet patched. The plan
    // goes on with the update and does not restore the gate (which would restart the grace period
    // on every reconcile and never update the Pod).
    let w = World::new(spec(
        "{replicas: 1, updateStrategy: {rollingUpdate: {podUpdatePolicy: InPlaceIfPossible, \
         inPlaceUpdateStrategy: {gracePeriodSeconds: 3}}}}",
    ));
    let mut draining = web(0, OLD, false)
        .condition("InPlaceUpdateReady", "False", Some(ago(1)))
        .build();
    if let Some(spec) = draining.spec.as_mut() {
        spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: "InPlaceUpdateReady".into(),
        }]);
    }
    let gate = draining
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "InPlaceUpdateReady"));
    if let Some(gate) = gate {
        gate.reason = Some("StartInPlaceUpdate".into());
    }
    let mut pods = vec![draining];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["in-place web-0"]);
    // In Parallel mode too, once: the rolling update does not act on it a second time.
    let parallel = World::new(spec(
        "{replicas: 1, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: \
         {podUpdatePolicy: InPlaceIfPossible, inPlaceUpdateStrategy: {gracePeriodSeconds: 3}}}}",
    ));
    assert_eq!(summary(&pods, &parallel.plan(&pods)), ["in-place web-0"]);
    // Drained for another reason (a lifecycle hook's markPodNotReady, say): restored as before.
    if let Some(gate) = pods[0]
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|cs| cs.iter_mut().find(|c| c.type_ == "InPlaceUpdateReady"))
    {
        gate.reason = None;
    }
    assert!(
        w.plan(&pods)
            .actions
            .iter()
            .any(|a| matches!(a, Action::Fix(Fix::InPlaceReady(0, _))))
    );
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::Fix(Fix::InPlaceReady(..)))),
        "{:?}",
        p.actions
    );
}

#[test]
fn lifecycle_hooks_hold_pods() {
    // preDelete: the condemned Pod goes to PreparingDelete instead.
    let w = World::new(spec(
        "{replicas: 1, lifecycle: {preDelete: {labelsHandler: {hold: 'true'}, markPodNotReady: true}}}",
    ));
    let pods = vec![
        web(0, NEW, true).build(),
        web(1, NEW, true).label("hold", "true").build(),
    ];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["prepare-delete web-1"]);
    assert!(matches!(
        p.actions[0],
        Action::PrepareDelete {
            mark_not_ready: true,
            ..
        }
    ));
    // Already PreparingDelete and still held: nothing more.
    let pods = vec![
        web(0, NEW, true).build(),
        web(1, NEW, true)
            .label("hold", "true")
            .lifecycle("PreparingDelete")
            .build(),
    ];
    assert!(summary(&pods, &w.plan(&pods)).is_empty());

    // inPlaceUpdate: a hooked Pod is prepared first.
    let w = World::new(spec(
        "{replicas: 1, podManagementPolicy: Parallel, updateStrategy: {rollingUpdate: {podUpdatePolicy: InPlaceIfPossible}}, lifecycle: {inPlaceUpdate: {labelsHandler: {upd: 'true'}}}}",
    ));
    let pods = vec![
        web(0, OLD, true)
            .label("upd", "true")
            .lifecycle("Normal")
            .build(),
    ];
    assert_eq!(summary(&pods, &w.plan(&pods)), ["prepare-update web-0"]);
    let pods = vec![web(0, OLD, true).lifecycle("PreparingUpdate").build()];
    let p = w.plan(&pods);
    assert_eq!(summary(&pods, &p), ["in-place web-0"]);
    assert!(p.actions.iter().any(|a| matches!(
        a,
        Action::InPlace {
            set_updating: true,
            ..
        }
    )));

    // preNormal: a new Pod starts in PreparingNormal unless the template carries the hook, and
    // moves to Normal once the hook is on it (no wait for scheduling).
    let w = World::new(spec(
        "{replicas: 1, lifecycle: {preNormal: {labelsHandler: {warm: 'true'}}}}",
    ));
    assert!(matches!(
        w.plan(&[]).actions[0],
        Action::Create {
            lifecycle: LifecycleState::PreparingNormal,
            ..
        }
    ));
    let pods = vec![
        pod("web-0")
            .revision(NEW)
            .phase("Pending")
            .label("warm", "true")
            .lifecycle("PreparingNormal")
            .build(),
    ];
    let p = w.plan(&pods);
    assert!(
        p.actions
            .contains(&Action::Fix(Fix::Lifecycle(0, LifecycleState::Normal)))
    );
    assert!(p.actions.contains(&Action::CreateClaims { pod: 0 }));
}

#[test]
fn status_counts_and_the_current_revision_rule() {
    let pods = vec![
        web(0, OLD, true).build(),
        web(1, NEW, true).build(),
        web(2, NEW, false).build(),
        web(3, NEW, true).lifecycle("PreparingDelete").build(),
        web(4, NEW, true).deleting().build(),
        pod("web-5").revision(NEW).build(),
        pod("stranger").revision(NEW).phase("Running").build(),
    ];
    let st = replica_status("web", &pods, 0, OLD, NEW, now());
    assert_eq!(
        st,
        ReplicaStatus {
            replicas: 5,
            ready_replicas: 4,
            available_replicas: 3,
            current_replicas: 1,
            updated_replicas: 3,
            updated_ready_replicas: 3,
            updated_available_replicas: 2,
        }
    );
    let s = spec("{replicas: 3}");
    let mut not_done = st;
    assert_eq!(complete_rolling_update(&s, &mut not_done, OLD, NEW), OLD);
    let mut done = ReplicaStatus {
        replicas: 3,
        ready_replicas: 3,
        updated_replicas: 3,
        current_replicas: 0,
        ..ReplicaStatus::default()
    };
    assert_eq!(complete_rolling_update(&s, &mut done, OLD, NEW), NEW);
    assert_eq!(done.current_replicas, 3);
    let on_delete = spec("{updateStrategy: {type: OnDelete}}");
    let mut d = done;
    assert_eq!(complete_rolling_update(&on_delete, &mut d, OLD, NEW), OLD);
}

// ---- simulation ----------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Sim {
    /// ordinal → (at update revision, ready, terminating)
    pods: BTreeMap<i32, (bool, bool, bool)>,
}

impl Sim {
    fn to_pods(&self) -> Vec<Pod> {
        self.pods
            .iter()
            .map(|(&o, &(new, ready, terminating))| {
                let b = web(o, if new { NEW } else { OLD }, ready);
                if terminating {
                    b.deleting().build()
                } else {
                    b.build()
                }
            })
            .collect()
    }

    /// Applies the plan; returns the ordinals of existing Pods it touched.
    fn apply(&mut self, pods: &[Pod], plan: &Plan) -> Vec<i32> {
        let ord = |i: usize| {
            ordinal_of("web", pods[i].metadata.name.as_deref().unwrap_or_default()).unwrap_or(-1)
        };
        let mut touched = Vec::new();
        for a in &plan.actions {
            match a {
                Action::Create {
                    ordinal, revision, ..
                } => {
                    self.pods.insert(*ordinal, (revision == NEW, false, false));
                }
                Action::Delete { pod, .. } => {
                    touched.push(ord(*pod));
                    if let Some(p) = self.pods.get_mut(&ord(*pod)) {
                        p.2 = true;
                        p.1 = false;
                    }
                }
                Action::InPlace { pod, .. } => {
                    touched.push(ord(*pod));
                    if let Some(p) = self.pods.get_mut(&ord(*pod)) {
                        *p = (true, false, false);
                    }
                }
                Action::Refuse { .. }
                | Action::PrepareDelete { .. }
                | Action::PrepareUpdate { .. } => {
                    panic!("unexpected {a:?}")
                }
                Action::CreateClaims { .. } | Action::Fix(_) => {}
            }
        }
        touched
    }

    /// The kubelet: some terminating Pods go, some unready Pods become Ready (every Pod makes
    /// progress at least every fourth step).
    fn kubelet(&mut self, coin: &mut impl Iterator<Item = bool>, step: usize) {
        let keys: Vec<i32> = self.pods.keys().copied().collect();
        let mut coin = coin.map(|c| c || step % 4 == 3);
        for o in keys {
            let Some(&(_, ready, terminating)) = self.pods.get(&o) else {
                continue;
            };
            if terminating {
                if coin.next().unwrap_or(true) {
                    self.pods.remove(&o);
                }
            } else if !ready
                && coin.next().unwrap_or(true)
                && let Some(p) = self.pods.get_mut(&o)
            {
                p.1 = true;
            }
        }
    }

    /// Slots without a Ready, non-terminating Pod.
    fn unavailable(&self, slots: &[i32]) -> usize {
        slots
            .iter()
            .filter(|o| !matches!(self.pods.get(o), Some(&(_, true, false))))
            .count()
    }
}

fn run_to_steady(
    w: &World,
    sim: &mut Sim,
    coins: &[bool],
    mut check: impl FnMut(&Sim, &[i32]),
) -> bool {
    let mut coin = coins.iter().copied().cycle();
    for step in 0..400 {
        let pods = sim.to_pods();
        let p = w.plan(&pods);
        let touched = sim.apply(&pods, &p);
        check(sim, &touched);
        let steady = summary(&pods, &p).is_empty()
            && sim
                .pods
                .values()
                .all(|&(new, ready, term)| new && ready && !term);
        if steady {
            return true;
        }
        sim.kubelet(&mut coin, step);
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Parallel rolling update: never more than maxUnavailable slots unavailable.
    #[test]
    fn never_more_than_max_unavailable(replicas in 1i32..9, max in 1i32..5, coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let w = World::new(spec(&format!(
            "{{replicas: {replicas}, podManagementPolicy: Parallel, updateStrategy: {{rollingUpdate: {{maxUnavailable: {max}}}}}}}"
        )));
        let mut sim = Sim { pods: (0..replicas).map(|o| (o, (false, true, false))).collect() };
        let slots: Vec<i32> = (0..replicas).collect();
        let done = run_to_steady(&w, &mut sim, &coins, |sim, _| {
            assert!(sim.unavailable(&slots) <= usize::try_from(max).unwrap_or(0), "{:?}", sim.pods);
        });
        prop_assert!(done, "the rollout did not finish");
    }

    /// Ordered partition p: no Pod below p is ever touched, and exactly the others end updated.
    #[test]
    fn partition_is_never_crossed(replicas in 1i32..8, partition in 0i32..8, parallel in any::<bool>(), coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let policy = if parallel { "Parallel" } else { "OrderedReady" };
        let w = World::new(spec(&format!(
            "{{replicas: {replicas}, podManagementPolicy: {policy}, updateStrategy: {{rollingUpdate: {{partition: {partition}}}}}}}"
        )));
        let mut sim = Sim { pods: (0..replicas).map(|o| (o, (false, true, false))).collect() };
        let mut coin = coins.iter().copied().cycle();
        for step in 0..200 {
            let pods = sim.to_pods();
            let p = w.plan(&pods);
            let touched = sim.apply(&pods, &p);
            prop_assert!(touched.iter().all(|&o| o >= partition), "touched {touched:?} below {partition}");
            sim.kubelet(&mut coin, step);
        }
        let updated: Vec<i32> = sim.pods.iter().filter(|(_, p)| p.0).map(|(&o, _)| o).collect();
        let want: Vec<i32> = (partition.min(replicas)..replicas).collect();
        prop_assert_eq!(updated, want);
    }

    /// OrderedReady: from scratch, through a rollout and a scale change, at most one Pod is ever
    /// not Ready (or missing) at a time.
    #[test]
    fn ordered_ready_one_unready_at_a_time(replicas in 1i32..7, then in 0i32..7, coins in proptest::collection::vec(any::<bool>(), 1..32)) {
        let mut sim = Sim { pods: BTreeMap::new() };
        let mut w = World::new(spec(&format!("{{replicas: {replicas}}}")));
        w.old = w.new.clone();
        let mut check = |sim: &Sim, _: &[i32]| {
            let unready = sim.pods.values().filter(|p| !p.1).count();
            assert!(unready <= 1, "{:?}", sim.pods);
        };
        // Create everything (old == new revision here), then roll to a new template, then scale.
        prop_assert!(run_to_steady(&w, &mut sim, &coins, &mut check));
        for p in sim.pods.values_mut() { p.0 = false; }
        let mut w = World::new(spec(&format!("{{replicas: {replicas}}}")));
        prop_assert!(run_to_steady(&w, &mut sim, &coins, &mut check));
        w.spec.replicas = Some(then);
        prop_assert!(run_to_steady(&w, &mut sim, &coins, &mut check));
        prop_assert_eq!(sim.pods.len(), usize::try_from(then).unwrap_or(0));
    }

    /// Reserved ordinals never hold a Pod at steady state, and the Pods are exactly the slots.
    #[test]
    fn reserved_ordinals_are_empty_at_steady_state(
        replicas in 0i32..6,
        reserved in proptest::collection::vec(0i32..10, 0..4),
        existing in proptest::collection::btree_set(0i32..12, 0..8),
        start in 0i32..3,
        parallel in any::<bool>(),
        coins in proptest::collection::vec(any::<bool>(), 1..32),
    ) {
        let policy = if parallel { "Parallel" } else { "OrderedReady" };
        let mut w = World::new(spec(&format!(
            "{{replicas: {replicas}, podManagementPolicy: {policy}, reserveOrdinals: {reserved:?}, ordinals: {{start: {start}}}}}"
        )));
        w.old = w.new.clone();
        let mut sim = Sim { pods: existing.iter().map(|&o| (o, (true, true, false))).collect() };
        prop_assert!(run_to_steady(&w, &mut sim, &coins, |_, _| ()));
        let set = Reserved::parse(&w.spec.reserve_ordinals);
        prop_assert!(sim.pods.keys().all(|&o| !set.contains(i64::from(o))));
        let ords: Vec<i32> = sim.pods.keys().copied().collect();
        prop_assert_eq!(ords, slot_ordinals(start, replicas, &set));
    }
}

#[test]
fn a_finished_update_moves_gate_and_lifecycle_in_one_fix() {
    // Updated in place and complete (no update state left to wait for): the gate and the
    // lifecycle state go back in one write, and that counts as the refresh having acted.
    let w = World::new(spec(
        "{replicas: 1, updateStrategy: {rollingUpdate: {podUpdatePolicy: InPlaceIfPossible}}}",
    ));
    let mut finished = web(0, NEW, false)
        .condition("InPlaceUpdateReady", "False", Some(ago(1)))
        .lifecycle("Updating")
        .build();
    if let Some(spec) = finished.spec.as_mut() {
        spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: "InPlaceUpdateReady".into(),
        }]);
    }
    let mut fixes = w.plan(&[finished]).actions;
    fixes.retain(|a| matches!(a, Action::Fix(_)));
    assert_eq!(
        fixes,
        [Action::Fix(Fix::InPlaceReady(
            0,
            Some(LifecycleState::Normal)
        ))]
    );
}
