use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, PodCondition, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::cloneset::v1beta1::{
    CloneSetSpec, CloneSetUpdateStrategy, POD_UPDATE_RECREATE, RollingUpdateCloneSetStrategy,
};
use kruise_api::pub_types::{Lifecycle, LifecycleHook};
use proptest::prelude::*;

use super::*;

const OLD: &str = "cs-old";
const NEW: &str = "cs-new";

fn template(image: &str, env: Option<&str>) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".into(), "cs".into())])),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                env: env.map(|v| {
                    vec![EnvVar {
                        name: "MODE".into(),
                        value: Some(v.into()),
                        ..EnvVar::default()
                    }]
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A Running Pod at `revision`; `available` sets Ready and InPlaceUpdateReady True.
fn pod(name: &str, revision: &str, available: bool) -> Pod {
    let status = if available { "True" } else { "False" };
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(
            now() - k8s_openapi::jiff::SignedDuration::from_secs(60),
        )),
        ..PodCondition::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: Some("1".into()),
            creation_timestamp: Some(Time(now())),
            labels: Some(BTreeMap::from([
                ("app".into(), "cs".into()),
                ("controller-revision-hash".into(), revision.into()),
                ("pod-template-hash".into(), short_hash(revision).into()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![Container {
                name: "main".into(),
                image: Some(if revision == NEW { "app:v2" } else { "app:v1" }.into()),
                ..Container::default()
            }],
            readiness_gates: Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: keys::CONDITION_IN_PLACE_UPDATE_READY.into(),
            }]),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                condition("Ready"),
                condition(keys::CONDITION_IN_PLACE_UPDATE_READY),
            ]),
            ..PodStatus::default()
        }),
    }
}

fn with_label(mut pod: Pod, k: &str, v: &str) -> Pod {
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    pod
}

struct Knobs {
    replicas: i32,
    policy: &'static str,
    partition: Option<IntOrString>,
    max_unavailable: IntOrString,
    max_surge: Option<IntOrString>,
    lifecycle: Option<Lifecycle>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            replicas: 4,
            policy: POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            partition: None,
            max_unavailable: IntOrString::Int(1),
            max_surge: None,
            lifecycle: None,
        }
    }
}

fn cloneset(k: Knobs) -> CloneSet {
    CloneSet::new(
        "cs",
        CloneSetSpec {
            replicas: Some(k.replicas),
            template: template("app:v2", None),
            update_strategy: CloneSetUpdateStrategy {
                type_: "RollingUpdate".into(),
                rolling_update: Some(RollingUpdateCloneSetStrategy {
                    pod_update_policy: k.policy.into(),
                    partition: k.partition,
                    max_unavailable: Some(k.max_unavailable),
                    max_surge: k.max_surge,
                    ..RollingUpdateCloneSetStrategy::default()
                }),
            },
            lifecycle: k.lifecycle,
            ..CloneSetSpec::default()
        },
    )
}

struct World {
    old: PodTemplateSpec,
    new: PodTemplateSpec,
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    vct_hashes: BTreeMap<String, String>,
    settings: Settings,
}

impl World {
    fn new(new_env: Option<&str>) -> Self {
        Self {
            old: template("app:v1", None),
            new: template("app:v2", new_env),
            nodes: BTreeMap::new(),
            vct_hashes: BTreeMap::new(),
            settings: Settings::default(),
        }
    }

    fn decide<T>(&self, cs: &CloneSet, pods: &[Pod], f: impl FnOnce(&Snapshot<'_>) -> T) -> T {
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
        let snapshot = Snapshot {
            cs,
            pods,
            current: revisions[0],
            update: revisions[1],
            revisions: &revisions,
            vct_hashes: &self.vct_hashes,
            node_labels: &self.nodes,
            now: now(),
            settings: self.settings,
        };
        f(&snapshot)
    }
}

fn old_pods(n: usize) -> Vec<Pod> {
    (0..n).map(|i| pod(&format!("p{i}"), OLD, true)).collect()
}

#[test]
fn scale_table() {
    let world = World::new(None);
    let hook = LifecycleHook {
        labels_handler: BTreeMap::from([("block".into(), "true".into())]),
        ..LifecycleHook::default()
    };
    let pre_delete = Lifecycle {
        pre_delete: Some(hook),
        ..Lifecycle::default()
    };
    let preparing = |p: Pod| with_label(p, keys::LABEL_LIFECYCLE_STATE, "PreparingDelete");
    let cases: Vec<(&str, Knobs, Vec<Pod>, ScaleStep)> = vec![
        (
            "empty set creates all at the update revision",
            Knobs::default(),
            vec![],
            ScaleStep::Create {
                from_current: 0,
                from_update: 4,
                limited: None,
            },
        ),
        (
            "a partition creates its share at the current revision",
            Knobs {
                partition: Some(IntOrString::Int(3)),
                ..Knobs::default()
            },
            old_pods(1),
            ScaleStep::Create {
                from_current: 2,
                from_update: 1,
                limited: None,
            },
        ),
        (
            "a full set does nothing",
            Knobs::default(),
            old_pods(4),
            ScaleStep::None,
        ),
        (
            "scale in deletes the surplus",
            Knobs {
                replicas: 2,
                max_unavailable: IntOrString::Int(2),
                ..Knobs::default()
            },
            old_pods(4),
            ScaleStep::Delete {
                delete: vec![0, 1],
                prepare: vec![],
            },
        ),
        (
            "a preDelete hook holds the Pod in PreparingDelete",
            Knobs {
                replicas: 3,
                lifecycle: Some(pre_delete.clone()),
                ..Knobs::default()
            },
            vec![
                pod("a", OLD, true),
                pod("b", OLD, true),
                pod("c", OLD, true),
                with_label(pod("d", OLD, false), "block", "true"),
            ],
            ScaleStep::Delete {
                delete: vec![],
                prepare: vec![3],
            },
        ),
        (
            "once the hook is gone the PreparingDelete Pod is deleted",
            Knobs {
                replicas: 3,
                lifecycle: Some(pre_delete.clone()),
                ..Knobs::default()
            },
            vec![
                pod("a", OLD, true),
                pod("b", OLD, true),
                pod("c", OLD, true),
                preparing(pod("d", OLD, false)),
            ],
            ScaleStep::Delete {
                delete: vec![3],
                prepare: vec![],
            },
        ),
        (
            "a short set takes back a PreparingDelete Pod",
            Knobs {
                replicas: 4,
                lifecycle: Some(pre_delete),
                ..Knobs::default()
            },
            vec![
                pod("a", OLD, true),
                pod("b", OLD, true),
                pod("c", OLD, true),
                preparing(pod("d", OLD, true)),
            ],
            ScaleStep::Regret(vec![3]),
        ),
        (
            "specified Pods: only one ready Pod within maxUnavailable 1",
            Knobs::default(),
            vec![
                with_label(pod("a", OLD, true), keys::LABEL_SPECIFIED_DELETE, "true"),
                with_label(pod("b", OLD, true), keys::LABEL_SPECIFIED_DELETE, "true"),
                pod("c", OLD, true),
                pod("d", OLD, true),
            ],
            ScaleStep::Delete {
                delete: vec![0],
                prepare: vec![],
            },
        ),
        (
            // upstream's `recreate, update failed image and block`, second update: the ready old
            // Pod (whose deletion a budget refuses) and the unready one on the failing image
            "specified Pods: the unready one first",
            Knobs {
                replicas: 2,
                policy: POD_UPDATE_RECREATE,
                max_unavailable: IntOrString::String("100%".into()),
                ..Knobs::default()
            },
            vec![
                with_label(pod("a", OLD, true), keys::LABEL_SPECIFIED_DELETE, "true"),
                with_label(pod("b", OLD, false), keys::LABEL_SPECIFIED_DELETE, "true"),
            ],
            ScaleStep::Delete {
                delete: vec![1, 0],
                prepare: vec![],
            },
        ),
    ];
    for (name, knobs, pods, want) in cases {
        let cs = cloneset(knobs);
        let got = world.decide(&cs, &pods, scale_step);
        assert_eq!(got, Ok(want), "{name}");
    }
}

/// kruise#2369: a labels/annotations-only change under InPlaceIfPossible with maxSurge updates in
/// place without surge Pods; an image change still surges.
#[test]
fn metadata_only_change_does_not_surge() {
    let mut world = World::new(None);
    world.old = template("app:v2", None);
    if let Some(meta) = world.new.metadata.as_mut() {
        meta.annotations = Some(BTreeMap::from([("note".into(), "v2".into())]));
    }
    let knobs = || Knobs {
        max_surge: Some(IntOrString::Int(1)),
        ..Knobs::default()
    };
    let cs = cloneset(knobs());
    let pods: Vec<Pod> = (0..4)
        .map(|i| {
            let mut p = pod(&format!("p{i}"), OLD, true);
            if let Some(c) = p.spec.as_mut().map(|s| &mut s.containers[0]) {
                c.image = Some("app:v2".into());
            }
            p
        })
        .collect();
    assert_eq!(world.decide(&cs, &pods, scale_step), Ok(ScaleStep::None));
    let step = world.decide(&cs, &pods, update_step).unwrap_or_default();
    assert_eq!(step.actions.len(), 1);
    assert!(matches!(step.actions[0], UpdateAction::InPlace { .. }));

    let image_change = World::new(None);
    assert_eq!(
        image_change.decide(&cs, &old_pods(4), scale_step),
        Ok(ScaleStep::Create {
            from_current: 0,
            from_update: 1,
            limited: None
        })
    );
}

#[test]
fn scale_in_prefers_unready_pods() {
    let world = World::new(None);
    let cs = cloneset(Knobs {
        replicas: 3,
        ..Knobs::default()
    });
    let pods = vec![
        pod("a", OLD, true),
        pod("b", OLD, false),
        pod("c", OLD, true),
        pod("d", OLD, true),
    ];
    let got = world.decide(&cs, &pods, scale_step);
    assert_eq!(
        got,
        Ok(ScaleStep::Delete {
            delete: vec![1],
            prepare: vec![]
        })
    );
}

#[test]
fn scale_up_is_limited_by_scale_strategy_max_unavailable() {
    let world = World::new(None);
    let mut cs = cloneset(Knobs {
        replicas: 6,
        ..Knobs::default()
    });
    cs.spec.scale_strategy.max_unavailable = Some(IntOrString::Int(2));
    let pods = vec![pod("a", NEW, false), pod("b", NEW, true)];
    let got = world.decide(&cs, &pods, scale_step);
    assert_eq!(
        got,
        Ok(ScaleStep::Create {
            from_current: 0,
            from_update: 1,
            limited: Some(1)
        })
    );
}

fn actions(step: &UpdateStep) -> Vec<String> {
    step.actions
        .iter()
        .map(|a| match a {
            UpdateAction::PrepareUpdate {
                pod, readd_hook, ..
            } => {
                format!("prepare {pod}{}", if *readd_hook { " readd" } else { "" })
            }
            UpdateAction::InPlace { pod, plan } => {
                format!("inplace {pod} {:?}", plan.images.get("main"))
            }
            UpdateAction::Recreate { pod, .. } => format!("recreate {pod}"),
            UpdateAction::Refuse { pod, .. } => format!("refuse {pod}"),
        })
        .collect()
}

#[test]
#[allow(clippy::type_complexity)]
fn update_table() {
    let hook = Lifecycle {
        in_place_update: Some(LifecycleHook {
            labels_handler: BTreeMap::from([("upd".into(), "true".into())]),
            ..LifecycleHook::default()
        }),
        ..Lifecycle::default()
    };
    let inplace_v2 = |i: usize| format!("inplace {i} Some(\"app:v2\")");
    // (name, new env, knobs, pods, expected actions)
    let cases: Vec<(&str, Option<&str>, Knobs, Vec<Pod>, Vec<String>)> = vec![
        (
            "image change under InPlaceIfPossible: in place, one at a time",
            None,
            Knobs::default(),
            old_pods(4),
            vec![inplace_v2(0)],
        ),
        (
            "an unready old Pod goes first",
            None,
            Knobs {
                replicas: 3,
                ..Knobs::default()
            },
            vec![
                pod("a", OLD, true),
                pod("b", OLD, false),
                pod("c", OLD, true),
            ],
            vec![inplace_v2(1)],
        ),
        (
            "ReCreate under maxUnavailable 100%: the unready Pod first",
            None,
            Knobs {
                replicas: 2,
                policy: POD_UPDATE_RECREATE,
                max_unavailable: IntOrString::String("100%".into()),
                ..Knobs::default()
            },
            vec![
                with_label(pod("a", OLD, true), keys::LABEL_SPECIFIED_DELETE, "true"),
                pod("b", OLD, false),
            ],
            vec!["recreate 1".into(), "recreate 0".into()],
        ),
        (
            "env change under InPlaceIfPossible: recreate",
            Some("fast"),
            Knobs::default(),
            old_pods(4),
            vec!["recreate 0".into()],
        ),
        (
            "env change under InPlaceOnly: refused",
            Some("fast"),
            Knobs {
                policy: POD_UPDATE_IN_PLACE_ONLY,
                ..Knobs::default()
            },
            old_pods(4),
            vec!["refuse 0".into()],
        ),
        (
            "ReCreate always recreates",
            None,
            Knobs {
                policy: POD_UPDATE_RECREATE,
                max_unavailable: IntOrString::Int(2),
                ..Knobs::default()
            },
            old_pods(4),
            vec!["recreate 0".into(), "recreate 1".into()],
        ),
        (
            "partition 99% of 4 updates exactly one",
            None,
            Knobs {
                partition: Some(IntOrString::String("99%".into())),
                max_unavailable: IntOrString::Int(4),
                ..Knobs::default()
            },
            old_pods(4),
            vec![inplace_v2(0)],
        ),
        (
            "an int partition holds",
            None,
            Knobs {
                partition: Some(IntOrString::Int(2)),
                max_unavailable: IntOrString::Int(4),
                ..Knobs::default()
            },
            vec![
                pod("a", NEW, true),
                pod("b", NEW, true),
                pod("c", OLD, true),
                pod("d", OLD, true),
            ],
            vec![],
        ),
        (
            "a hooked Pod goes to PreparingUpdate first",
            None,
            Knobs {
                replicas: 1,
                lifecycle: Some(hook.clone()),
                ..Knobs::default()
            },
            vec![with_label(pod("a", OLD, true), "upd", "true")],
            vec!["prepare 0".into()],
        ),
        (
            "PreparingUpdate with the hook still on waits",
            None,
            Knobs {
                replicas: 1,
                lifecycle: Some(hook.clone()),
                ..Knobs::default()
            },
            vec![with_label(
                with_label(pod("a", OLD, true), "upd", "true"),
                keys::LABEL_LIFECYCLE_STATE,
                "PreparingUpdate",
            )],
            vec![],
        ),
        (
            "PreparingUpdate with the hook removed updates",
            None,
            Knobs {
                replicas: 1,
                lifecycle: Some(hook.clone()),
                ..Knobs::default()
            },
            vec![with_label(
                pod("a", OLD, true),
                keys::LABEL_LIFECYCLE_STATE,
                "PreparingUpdate",
            )],
            vec![inplace_v2(0)],
        ),
        (
            "an Updated Pod gets its hook back before the next update",
            None,
            Knobs {
                replicas: 1,
                lifecycle: Some(hook),
                ..Knobs::default()
            },
            vec![with_label(
                pod("a", OLD, true),
                keys::LABEL_LIFECYCLE_STATE,
                "Updated",
            )],
            vec!["prepare 0 readd".into()],
        ),
    ];
    for (name, env, knobs, pods, want) in cases {
        let world = World::new(env);
        let cs = cloneset(knobs);
        let step = world.decide(&cs, &pods, update_step);
        let step = match step {
            Ok(step) => step,
            Err(e) => panic!("{name}: {e}"),
        };
        assert_eq!(actions(&step), want, "{name}");
    }
}

#[test]
fn refresh_marks_new_pods_ready_but_not_draining_ones() {
    let world = World::new(None);
    let cs = cloneset(Knobs::default());
    let mut fresh = pod("fresh", NEW, true);
    // A new Pod: the gate is there, the condition not yet.
    if let Some(c) = fresh.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c.retain(|c| c.type_ != keys::CONDITION_IN_PLACE_UPDATE_READY);
    }
    // Draining for its in-place update: InPlaceUpdateReady False on purpose.
    let draining = pod("draining", OLD, false);
    let no_hash = {
        let mut p = pod("nohash", NEW, true);
        if let Some(l) = p.metadata.labels.as_mut() {
            l.remove("pod-template-hash");
        }
        p
    };
    let pods = vec![fresh, draining, no_hash, pod("d", NEW, true)];
    let step = world.decide(&cs, &pods, update_step);
    let step = step.unwrap_or_default();
    assert_eq!(actions(&step), vec![format!("inplace 1 Some(\"app:v2\")")]);
    assert_eq!(
        step.fixes,
        vec![
            Fix::InPlaceReady(0, None),
            Fix::TemplateHash(2, "new".into())
        ]
    );
}

#[test]
fn paused_and_on_delete_update_nothing() {
    let world = World::new(None);
    let mut paused = cloneset(Knobs::default());
    if let Some(r) = paused.spec.update_strategy.rolling_update.as_mut() {
        r.paused = true;
    }
    let mut on_delete = cloneset(Knobs::default());
    on_delete.spec.update_strategy.type_ = "OnDelete".into();
    for cs in [paused, on_delete] {
        let step = world
            .decide(&cs, &old_pods(3), update_step)
            .unwrap_or_default();
        assert!(step.actions.is_empty());
    }
}

/// A simulated rollout: the controller's decisions applied to a set of Pods, with a kubelet that
/// makes Pods ready at arbitrary moments. Whatever the interleaving, the invariants hold at every
/// step and the rollout converges.
mod rollout {
    use super::*;

    #[derive(Debug, Clone)]
    struct Case {
        replicas: i32,
        max_unavailable: i32,
        max_surge: i32,
        partition: i32,
        recreate: bool,
        ready_ticks: Vec<bool>,
    }

    fn arb_case() -> impl Strategy<Value = Case> {
        (
            1..8i32,
            1..4i32,
            0..3i32,
            0..8i32,
            any::<bool>(),
            proptest::collection::vec(any::<bool>(), 60),
        )
            .prop_map(|(replicas, mu, ms, p, recreate, ready_ticks)| Case {
                replicas,
                max_unavailable: mu,
                max_surge: ms,
                partition: p.min(replicas),
                recreate,
                ready_ticks,
            })
    }

    fn is_available(p: &Pod) -> bool {
        pods::is_available(p, 0, now())
    }

    fn set_ready(pod: &mut Pod) {
        if let Some(conds) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            for c in conds.iter_mut() {
                c.status = "True".into();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn rollout_invariants(case in arb_case()) {
            let world = World::new(None);
            let cs = cloneset(Knobs {
                replicas: case.replicas,
                policy: if case.recreate { POD_UPDATE_RECREATE } else { POD_UPDATE_IN_PLACE_IF_POSSIBLE },
                partition: Some(IntOrString::Int(case.partition)),
                max_unavailable: IntOrString::Int(case.max_unavailable),
                max_surge: Some(IntOrString::Int(case.max_surge)),
                lifecycle: None,
            });
            let mut pods = old_pods(case.replicas as usize);
            let mut next_id = 100;
            let floor = i64::from(case.replicas - case.max_unavailable);
            let mut step_no = 0;
            loop {
                step_no += 1;
                prop_assert!(step_no < 200, "no convergence: {:?}", pods.len());
                let tick = case.ready_ticks.get(step_no % case.ready_ticks.len()).copied().unwrap_or(true)
                    || step_no > 120;
                let scale = world.decide(&cs, &pods, scale_step);
                let mut acted = false;
                match scale {
                    Ok(ScaleStep::Create { from_current, from_update, .. }) if from_current + from_update > 0 => {
                        for n in 0..from_current + from_update {
                            let rev = if n < from_current { OLD } else { NEW };
                            next_id += 1;
                            pods.push(pod(&format!("p{next_id}"), rev, false));
                        }
                        acted = true;
                    }
                    Ok(ScaleStep::Delete { delete, .. }) => {
                        let mut delete = delete;
                        delete.sort_unstable();
                        for i in delete.into_iter().rev() {
                            pods.remove(i);
                        }
                        acted = true;
                    }
                    Ok(_) => {}
                    Err(e) => prop_assert!(false, "{e}"),
                }
                if !acted {
                    let step = world.decide(&cs, &pods, update_step);
                    let step = match step { Ok(s) => s, Err(e) => { prop_assert!(false, "{e}"); unreachable!() } };
                    for fix in &step.fixes {
                        if let Fix::InPlaceReady(i, _) = fix { set_ready(&mut pods[*i]); acted = true; }
                    }
                    if !acted {
                        for action in &step.actions {
                            match action {
                                UpdateAction::InPlace { pod: i, .. } => {
                                    let name = pods[*i].metadata.name.clone().unwrap_or_default();
                                    pods[*i] = pod(&name, &step.target, false);
                                }
                                UpdateAction::Recreate { pod: i, .. } => {
                                    pods[*i] = with_label(pods[*i].clone(), keys::LABEL_SPECIFIED_DELETE, "true");
                                }
                                other => prop_assert!(false, "unexpected {other:?}"),
                            }
                            acted = true;
                        }
                    }
                }
                // Invariants after every controller action.
                let total = pods.len() as i64;
                let available = pods.iter().filter(|p| is_available(p)).count() as i64;
                let old = pods.iter().filter(|p| pods::is_at_revision(p, OLD)).count() as i64;
                prop_assert!(total <= i64::from(case.replicas + case.max_surge), "{total} Pods");
                prop_assert!(available >= floor.min(i64::from(case.replicas)) || step_no == 1 && available >= floor,
                    "only {available} available of {} (maxUnavailable {})", case.replicas, case.max_unavailable);
                let _ = old;
                if tick {
                    for p in pods.iter_mut() { set_ready(p); }
                }
                if !acted && tick {
                    let updated = pods.iter().filter(|p| pods::is_at_revision(p, NEW)).count() as i32;
                    let old = pods.iter().filter(|p| pods::is_at_revision(p, OLD)).count() as i32;
                    prop_assert_eq!(pods.len() as i32, case.replicas);
                    prop_assert_eq!(updated, case.replicas - case.partition);
                    prop_assert_eq!(old, case.partition);
                    break;
                }
            }
        }
    }
}

/// A finished in-place update is one write: the gate and the lifecycle move go together, never as a
/// gate fix beside a lifecycle fix of the same Pod.
#[test]
fn a_finished_update_moves_gate_and_lifecycle_together() {
    let world = World::new(None);
    let finished = |lifecycle: &str| {
        let mut p = with_label(pod("a", NEW, true), keys::LABEL_LIFECYCLE_STATE, lifecycle);
        if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            for c in c.iter_mut() {
                if c.type_ == keys::CONDITION_IN_PLACE_UPDATE_READY {
                    c.status = "False".into();
                }
            }
        }
        p
    };
    let hook = Lifecycle {
        in_place_update: Some(LifecycleHook {
            labels_handler: BTreeMap::from([("hook".to_string(), "true".to_string())]),
            ..LifecycleHook::default()
        }),
        ..Lifecycle::default()
    };
    let cases = [
        (
            "no hook: back to Normal",
            None,
            "Updating",
            Some(LifecycleState::Normal),
        ),
        (
            "a hook not back on: Updated",
            Some(hook),
            "Updating",
            Some(LifecycleState::Updated),
        ),
        ("already Normal: the gate alone", None, "Normal", None),
    ];
    for (name, lifecycle, label, want) in cases {
        let cs = cloneset(Knobs {
            replicas: 1,
            lifecycle,
            ..Knobs::default()
        });
        let step = world
            .decide(&cs, &[finished(label)], update_step)
            .unwrap_or_default();
        assert_eq!(step.fixes, vec![Fix::InPlaceReady(0, want)], "{name}");
    }
}

/// `RecreatePodWhenChangeVCTInCloneSetGate`: an old Pod whose revision recorded other
/// volumeClaimTemplates than the update revision is recreated instead of updated in place, only
/// with the gate on, never under InPlaceOnly, and only when both hashes are known and comparable.
#[test]
#[allow(clippy::type_complexity)]
fn changed_volume_claim_templates_recreate_with_the_gate() {
    let ours = |n: u32| {
        crate::revision::vct_hash(&[serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data"},
        "spec": {"resources": {"requests": {"storage": format!("{n}Gi")}}}}))
        .expect("claim")])
    };
    let inplace = vec![format!("inplace 0 {:?}", Some("app:v2"))];
    let recreate = vec!["recreate 0".to_string()];
    // (case, gate, policy, old hash, new hash, actions)
    let cases: Vec<(
        &str,
        bool,
        &str,
        Option<String>,
        Option<String>,
        Vec<String>,
    )> = vec![
        (
            "gate off",
            false,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            Some(ours(1)),
            Some(ours(2)),
            inplace.clone(),
        ),
        (
            "claims changed",
            true,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            Some(ours(1)),
            Some(ours(2)),
            recreate.clone(),
        ),
        (
            "claims unchanged",
            true,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            Some(ours(1)),
            Some(ours(1)),
            inplace.clone(),
        ),
        (
            "claims added",
            true,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            Some(String::new()),
            Some(ours(1)),
            recreate.clone(),
        ),
        (
            "InPlaceOnly ignores them",
            true,
            POD_UPDATE_IN_PLACE_ONLY,
            Some(ours(1)),
            Some(ours(2)),
            inplace.clone(),
        ),
        (
            "old revision without a hash",
            true,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            None,
            Some(ours(2)),
            inplace.clone(),
        ),
        (
            "a hash OpenKruise wrote",
            true,
            POD_UPDATE_IN_PLACE_IF_POSSIBLE,
            Some("2893401921".into()),
            Some(ours(2)),
            inplace.clone(),
        ),
    ];
    for (case, gate, policy, old, new, want) in cases {
        let mut world = World::new(None);
        world.settings.gates.recreate_on_vct_change = gate;
        world.vct_hashes = [(OLD, old), (NEW, new)]
            .into_iter()
            .filter_map(|(name, hash)| Some((name.to_string(), hash?)))
            .collect();
        let cs = cloneset(Knobs {
            replicas: 1,
            policy,
            ..Knobs::default()
        });
        let pods = old_pods(1);
        let step = world
            .decide(&cs, &pods, update_step)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(actions(&step), want, "{case}");
    }
}
