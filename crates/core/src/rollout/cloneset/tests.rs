use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::cloneset::v1beta1::{
    CloneSetSpec, CloneSetUpdateStrategy, RollingUpdateCloneSetStrategy,
};
use proptest::prelude::*;

use super::*;
use crate::pods::testing::{now, pod};

fn int(n: i32) -> IntOrString {
    IntOrString::Int(n)
}

fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.into())
}

/// `o`/`n` = old/new revision, available; suffix `-` unavailable, `!` specified delete, `x`
/// PreparingDelete.
fn facts(spec: &str) -> Vec<PodFacts> {
    spec.split_whitespace()
        .map(|token| {
            let mut chars = token.chars();
            let updated = chars.next() == Some('n');
            let rest: String = chars.collect();
            PodFacts {
                updated,
                preparing_delete: rest.contains('x'),
                specified_delete: rest.contains('!'),
                available: !rest.contains('-') && !rest.contains('x'),
            }
        })
        .collect()
}

fn limits(
    replicas: i32,
    partition: IntOrString,
    max_unavailable: IntOrString,
    max_surge: IntOrString,
) -> Limits {
    let knobs = RolloutKnobs {
        replicas,
        rolling_update: true,
        partition: Some(&partition),
        max_unavailable: Some(&max_unavailable),
        max_surge: Some(&max_surge),
        ..Default::default()
    };
    Limits::resolve(&knobs).expect("valid knobs")
}

#[test]
fn partition_table() {
    let cases: [(Option<IntOrString>, i32, Result<i32, ()>); 13] = [
        (None, 5, Ok(0)),
        (Some(int(3)), 5, Ok(3)),
        (Some(int(10)), 5, Ok(5)),
        (Some(int(-2)), 5, Ok(0)),
        (Some(pct("0%")), 5, Ok(0)),
        (Some(pct("10%")), 3, Ok(1)),
        (Some(pct("99%")), 5, Ok(4)),
        (Some(pct("90%")), 2, Ok(1)),
        (Some(pct("100%")), 5, Ok(5)),
        (Some(pct("50%")), 1, Ok(1)),
        (Some(pct("100%")), 0, Ok(0)),
        (Some(int(5)), 5, Ok(5)),
        (Some(pct("5")), 5, Err(())),
    ];
    for (partition, replicas, want) in cases {
        let got = partition_replicas(partition.as_ref(), replicas).map_err(|_| ());
        assert_eq!(got, want, "{partition:?} of {replicas}");
    }
    let err = partition_replicas(Some(&pct("x")), 3).expect_err("invalid");
    assert!(
        err.to_string()
            .starts_with("spec.updateStrategy.rollingUpdate.partition: "),
        "{err}"
    );
}

#[test]
fn limits_rounding_table() {
    struct Case {
        name: &'static str,
        replicas: i32,
        rolling_update: bool,
        max_unavailable: Option<IntOrString>,
        max_surge: Option<IntOrString>,
        paused: bool,
        scale: Option<IntOrString>,
        want: (i64, i64, i64),
    }
    let case = |name, replicas, max_unavailable, max_surge| Case {
        name,
        replicas,
        rolling_update: true,
        max_unavailable,
        max_surge,
        paused: false,
        scale: None,
        want: (0, 0, 0),
    };
    let cases = [
        Case {
            want: (0, 2, i64::from(i32::MAX)),
            ..case(
                "unavailable rounds up without surge",
                5,
                Some(pct("30%")),
                None,
            )
        },
        Case {
            want: (1, 1, i64::from(i32::MAX)),
            ..case(
                "unavailable rounds down with surge; surge rounds up",
                5,
                Some(pct("30%")),
                Some(pct("10%")),
            )
        },
        Case {
            paused: true,
            want: (0, 2, i64::from(i32::MAX)),
            ..case(
                "paused: no surge, unavailable rounds up",
                5,
                Some(pct("30%")),
                Some(pct("10%")),
            )
        },
        Case {
            want: (0, 2, i64::from(i32::MAX)),
            ..case("default 20% rounds up", 7, None, None)
        },
        Case {
            rolling_update: false,
            want: (0, 1, i64::from(i32::MAX)),
            ..case("no rollingUpdate: default 20% rounds down", 7, None, None)
        },
        Case {
            scale: Some(pct("10%")),
            want: (0, 1, 1),
            ..case("scale maxUnavailable rounds up", 5, Some(int(1)), None)
        },
        Case {
            want: (0, 0, i64::from(i32::MAX)),
            ..case("zero surge int", 5, Some(int(0)), Some(int(0)))
        },
    ];
    for c in cases {
        let knobs = RolloutKnobs {
            replicas: c.replicas,
            rolling_update: c.rolling_update,
            partition: None,
            max_unavailable: c.max_unavailable.as_ref(),
            max_surge: c.max_surge.as_ref(),
            paused: c.paused,
            scale_max_unavailable: c.scale.as_ref(),
        };
        let l = Limits::resolve(&knobs).expect("valid");
        assert_eq!(
            (l.max_surge, l.max_unavailable, l.scale_max_unavailable),
            c.want,
            "{}",
            c.name
        );
    }
    let bad = pct("7");
    let knobs = RolloutKnobs {
        replicas: 3,
        rolling_update: true,
        max_surge: Some(&bad),
        ..Default::default()
    };
    assert_eq!(
        Limits::resolve(&knobs).map_err(|e| e.field),
        Err("spec.updateStrategy.rollingUpdate.maxSurge")
    );
}

/// Cases and expected numbers from upstream's `TestCalculateDiffsWithExpectation`, in the
/// notation of [`facts`]: (name, limits, pods, rollback allowed, expected).
#[test]
fn diffs_table() {
    let d = Diffs::default;
    let cases = [
        (
            "scale up one",
            limits(5, int(0), int(1), int(0)),
            "n n n n",
            false,
            Diffs {
                scale_up_num: 1,
                scale_up_limit: 1,
                ..d()
            },
        ),
        (
            "steady",
            limits(5, int(0), int(1), int(0)),
            "n n n n n",
            false,
            d(),
        ),
        (
            "two specified, all ready",
            limits(5, int(0), int(1), int(0)),
            "n! n! n n n",
            false,
            Diffs {
                delete_ready_limit: 1,
                ..d()
            },
        ),
        (
            "two specified unready and replicas to 4",
            limits(4, int(0), int(1), int(0)),
            "n-! n-! n n n",
            false,
            Diffs {
                delete_ready_limit: 2,
                ..d()
            },
        ),
        (
            "partition 3: update two",
            limits(5, int(3), int(1), int(0)),
            "o o o o o",
            false,
            Diffs {
                update_num: 2,
                update_max_unavailable: 1,
                ..d()
            },
        ),
        (
            "partition 3: one left",
            limits(5, int(3), int(1), int(0)),
            "n o o o o",
            false,
            Diffs {
                update_num: 1,
                update_max_unavailable: 1,
                ..d()
            },
        ),
        (
            "partition 3: done",
            limits(5, int(3), int(1), int(0)),
            "n n o o o",
            false,
            d(),
        ),
        (
            "rollback to partition 4",
            limits(5, int(4), int(2), int(0)),
            "n n n n o",
            true,
            Diffs {
                update_num: -3,
                update_max_unavailable: 2,
                ..d()
            },
        ),
        (
            "raised partition without the rollback gate: nothing",
            limits(5, int(4), int(2), int(0)),
            "n n n n o",
            false,
            d(),
        ),
        (
            "specified delete with surge 1/3",
            limits(5, int(0), int(0), int(1)),
            "n! n n n n",
            false,
            Diffs {
                scale_up_num: 1,
                use_surge: 1,
                scale_up_limit: 1,
                ..d()
            },
        ),
        (
            "specified delete with surge 2/3",
            limits(5, int(0), int(0), int(1)),
            "n! n n n n n-",
            false,
            Diffs {
                use_surge: 1,
                ..d()
            },
        ),
        (
            "specified delete with surge 3/3",
            limits(5, int(0), int(0), int(1)),
            "n! n n n n n",
            false,
            Diffs {
                delete_ready_limit: 1,
                use_surge: 1,
                ..d()
            },
        ),
        (
            "in-place partition 3 with surge 1/3",
            limits(5, int(3), int(1), int(1)),
            "o o o o o",
            false,
            Diffs {
                scale_up_num: 1,
                use_surge: 1,
                update_num: 2,
                update_max_unavailable: 1,
                scale_up_limit: 1,
                ..d()
            },
        ),
        (
            "in-place partition 3 with surge 2/3",
            limits(5, int(3), int(1), int(1)),
            "o o o o o n-",
            false,
            Diffs {
                use_surge: 1,
                update_num: 1,
                update_max_unavailable: 2,
                ..d()
            },
        ),
        (
            "in-place partition 3 with surge 3/3",
            limits(5, int(3), int(1), int(1)),
            "o o o o n- n-",
            false,
            Diffs {
                scale_down_num: 1,
                scale_down_num_old_revision: 1,
                ..d()
            },
        ),
        (
            "recreate partition 3 with surge: old Pod specified",
            limits(5, int(3), int(1), int(1)),
            "o o o o o! n-",
            false,
            Diffs {
                use_surge: 1,
                use_surge_old_revision: 1,
                delete_ready_limit: 1,
                update_num: 1,
                update_max_unavailable: 2,
                ..d()
            },
        ),
        (
            "partition 99% keeps 4 of 5, surge 2",
            limits(5, pct("99%"), int(3), int(2)),
            "o o o o o",
            false,
            Diffs {
                scale_up_num: 1,
                use_surge: 1,
                update_num: 1,
                update_max_unavailable: 3,
                scale_up_limit: 1,
                ..d()
            },
        ),
        (
            "partition 99%, 40%/30%",
            limits(5, pct("99%"), pct("40%"), pct("30%")),
            "o o o o o n-",
            false,
            Diffs {
                scale_down_num: 1,
                scale_down_num_old_revision: 1,
                delete_ready_limit: 2,
                ..d()
            },
        ),
        (
            "partition 99%, 30%/30%",
            limits(5, pct("99%"), pct("30%"), pct("30%")),
            "o o o o o",
            false,
            Diffs {
                scale_up_num: 1,
                use_surge: 1,
                update_num: 1,
                update_max_unavailable: 1,
                scale_up_limit: 1,
                ..d()
            },
        ),
        (
            "preparing-delete Pods count as unavailable and as present",
            limits(3, int(0), int(1), int(0)),
            "n n nx",
            false,
            d(),
        ),
    ];
    for (name, limits, pods, rollback, want) in cases {
        let got = calculate_diffs(
            &limits,
            &facts(pods),
            DiffOptions {
                allow_rollback: rollback,
                ..Default::default()
            },
        );
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn scale_strategy_max_unavailable_limits_creation() {
    let mut l = limits(5, int(0), int(1), int(0));
    l.scale_max_unavailable = 2;
    let got = calculate_diffs(&l, &facts("n n-"), DiffOptions::default());
    assert_eq!((got.scale_up_num, got.scale_up_limit), (3, 1));
    let got = calculate_diffs(&l, &facts("n- n-"), DiffOptions::default());
    assert_eq!((got.scale_up_num, got.scale_up_limit), (3, 0));
}

#[test]
fn exclude_preparing_delete_scales_up() {
    let l = limits(3, int(0), int(1), int(0));
    let options = DiffOptions {
        exclude_preparing_delete: true,
        ..Default::default()
    };
    let got = calculate_diffs(&l, &facts("n n nx"), options);
    assert_eq!((got.scale_up_num, got.scale_up_limit), (1, 1));
}

#[test]
fn limit_updates_table() {
    let diffs = |update_num, update_max_unavailable| Diffs {
        update_num,
        update_max_unavailable,
        ..Default::default()
    };
    // (name, available, at_target, ordered, diffs, want)
    type Case = (
        &'static str,
        Vec<bool>,
        Vec<bool>,
        Vec<usize>,
        Diffs,
        Vec<usize>,
    );
    let cases: [Case; 6] = [
        (
            "one at a time",
            vec![true; 4],
            vec![false; 4],
            vec![0, 1, 2, 3],
            diffs(4, 1),
            vec![0],
        ),
        (
            "cut to updateNum",
            vec![true; 4],
            vec![false; 4],
            vec![3, 2, 1, 0],
            diffs(2, 4),
            vec![3, 2],
        ),
        (
            "unavailable old Pods are free to update",
            vec![false, false, true, true],
            vec![false; 4],
            vec![0, 1, 2, 3],
            diffs(4, 2),
            vec![0, 1],
        ),
        (
            "an unavailable updated Pod uses the budget",
            vec![true, true, true, false],
            vec![false, false, false, true],
            vec![0, 1, 2],
            diffs(3, 2),
            vec![0],
        ),
        (
            "budget already used: nothing",
            vec![false, false, true],
            vec![false, false, false],
            vec![2],
            diffs(1, 2),
            vec![],
        ),
        (
            "rollback counts like an update",
            vec![true; 3],
            vec![false; 3],
            vec![0, 1, 2],
            diffs(-2, 5),
            vec![0, 1],
        ),
    ];
    for (name, available, at_target, ordered, diffs, want) in cases {
        assert_eq!(
            limit_updates(&ordered, &available, &at_target, &diffs),
            want,
            "{name}"
        );
    }
}

fn spec(
    replicas: i32,
    partition: IntOrString,
    max_unavailable: IntOrString,
    max_surge: IntOrString,
) -> CloneSetSpec {
    CloneSetSpec {
        replicas: Some(replicas),
        update_strategy: CloneSetUpdateStrategy {
            rolling_update: Some(RollingUpdateCloneSetStrategy {
                partition: Some(partition),
                max_unavailable: Some(max_unavailable),
                max_surge: Some(max_surge),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

const OLD: &str = "web-old111";
const NEW: &str = "web-new222";

fn test_pod(name: &str, new: bool, available: bool) -> Pod {
    let b = pod(name).revision(if new { NEW } else { OLD });
    if available {
        b.running_ready(100).build()
    } else {
        b.phase("Pending").node("n").build()
    }
}

#[test]
fn plan_update_picks_unready_first_and_respects_partition() {
    let pods = vec![
        test_pod("a", false, true),
        test_pod("b", false, false),
        test_pod("c", false, true),
        test_pod("d", true, true),
    ];
    let s = spec(4, int(1), int(2), int(0));
    let plan = plan_update(&s, &pods, OLD, NEW, Gates::default(), now()).expect("valid");
    // Three old Pods, partition 1: two to update; the unready one first, then one ready one
    // (budget 2 with one already unavailable).
    assert_eq!(plan.target_revision, NEW);
    assert_eq!(plan.pods, [1, 0]);

    let mut paused = s.clone();
    if let Some(r) = paused.update_strategy.rolling_update.as_mut() {
        r.paused = true;
    }
    let plan = plan_update(&paused, &pods, OLD, NEW, Gates::default(), now()).expect("valid");
    assert!(plan.pods.is_empty());

    let mut on_delete = s;
    on_delete.update_strategy.type_ = "OnDelete".into();
    let plan = plan_update(&on_delete, &pods, OLD, NEW, Gates::default(), now()).expect("valid");
    assert!(plan.pods.is_empty());
}

#[test]
fn update_candidates_skip_preparing_delete_and_grace() {
    let pods = vec![
        pod("old").revision(OLD).build(),
        pod("new").revision(NEW).build(),
        pod("leaving")
            .revision(OLD)
            .lifecycle("PreparingDelete")
            .build(),
        pod("grace")
            .revision(OLD)
            .annotation("apps.kruise.io/inplace-update-grace", "{}")
            .build(),
        pod("updated-old")
            .revision(OLD)
            .lifecycle("Updated")
            .annotation("apps.kruise.io/inplace-update-grace", "{}")
            .build(),
        pod("short").revision("new222").build(),
    ];
    assert_eq!(update_candidates(&pods, NEW, 3), [0, 4]);
    assert_eq!(update_candidates(&pods, NEW, -1), [1, 5]);
    assert!(update_candidates(&pods, NEW, 0).is_empty());
}

#[test]
fn pod_facts_follow_purpose_and_gate() {
    let preparing = pod("p")
        .revision(OLD)
        .lifecycle("PreparingUpdate")
        .running_ready(100)
        .build();
    let names = vec!["p".to_string()];
    let mut ctx = FactsContext {
        update_revision: NEW,
        pods_to_delete: &names,
        min_ready_seconds: 0,
        now: now(),
        purpose: Purpose::Scale,
        preparing_update_as_update: true,
    };
    let f = pod_facts(&preparing, &ctx);
    assert_eq!(
        f,
        PodFacts {
            updated: true,
            preparing_delete: false,
            specified_delete: true,
            available: false,
        }
    );
    ctx.purpose = Purpose::Update;
    assert!(!pod_facts(&preparing, &ctx).updated);
    ctx.purpose = Purpose::Scale;
    ctx.preparing_update_as_update = false;
    assert!(!pod_facts(&preparing, &ctx).updated);
}

#[test]
fn choose_scale_in_takes_old_first_within_ready_limit() {
    let pods = vec![
        test_pod("old-ready", false, true),
        test_pod("old-unready", false, false),
        test_pod("new-ready", true, true),
        test_pod("new-unready", true, false),
    ];
    let updated = [false, false, true, true];
    let diffs = Diffs {
        scale_down_num: 3,
        scale_down_num_old_revision: 1,
        delete_ready_limit: 1,
        ..Default::default()
    };
    let chosen = choose_scale_in(&pods, &updated, &diffs, 0, now(), &Ranker::SameNode);
    // One old Pod (the unready one) and both new ones (all of a group go unsorted); only one ready
    // Pod may go, and there is only one.
    assert_eq!(chosen, [1, 2, 3]);
    let diffs = Diffs {
        delete_ready_limit: 0,
        ..diffs
    };
    assert_eq!(
        choose_scale_in(&pods, &updated, &diffs, 0, now(), &Ranker::None),
        [1, 3]
    );
}

fn arb_facts() -> impl Strategy<Value = Vec<PodFacts>> {
    proptest::collection::vec(
        (any::<bool>(), 0u8..10, 0u8..10, any::<bool>()).prop_map(
            |(updated, pd, sd, available)| PodFacts {
                updated,
                preparing_delete: pd == 0,
                specified_delete: sd == 0,
                available,
            },
        ),
        0..25,
    )
}

fn arb_int_or_percent(max: i32) -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (0..=max).prop_map(IntOrString::Int),
        (0..=100i32).prop_map(|p| IntOrString::String(format!("{p}%"))),
    ]
}

proptest! {
    #[test]
    fn diffs_invariants(
        replicas in 0i32..20,
        partition in arb_int_or_percent(25),
        max_unavailable in arb_int_or_percent(10),
        max_surge in arb_int_or_percent(10),
        scale_max in proptest::option::of(arb_int_or_percent(10)),
        paused in any::<bool>(),
        facts in arb_facts(),
        exclude in any::<bool>(),
        rollback in any::<bool>(),
    ) {
        let knobs = RolloutKnobs {
            replicas,
            rolling_update: true,
            partition: Some(&partition),
            max_unavailable: Some(&max_unavailable),
            max_surge: Some(&max_surge),
            paused,
            scale_max_unavailable: scale_max.as_ref(),
        };
        let l = Limits::resolve(&knobs).expect("valid");
        prop_assert!((0..=l.replicas).contains(&l.partition));
        let options = DiffOptions { exclude_preparing_delete: exclude, allow_rollback: rollback };
        let d = calculate_diffs(&l, &facts, options);
        let c = count(&facts);
        let (current_total, current_old) = if exclude {
            (c.total - c.pre_deleting_old - c.pre_deleting_new, c.old - c.pre_deleting_old)
        } else {
            (c.total, c.old)
        };
        let total_unavailable = c.unavailable + c.pre_deleting_old + c.pre_deleting_new;

        // Surge stays within maxSurge, and none at all while paused.
        prop_assert!((0..=l.max_surge).contains(&d.use_surge));
        prop_assert!((0..=d.use_surge).contains(&d.use_surge_old_revision));
        if paused { prop_assert_eq!(d.use_surge, 0); }
        // Pods never exceed replicas + maxSurge through scaling up.
        if d.scale_up_num > 0 {
            prop_assert!(current_total + d.scale_up_num <= l.replicas + l.max_surge);
            prop_assert_eq!(d.scale_down_num, 0);
        }
        // Creation respects scaleStrategy.maxUnavailable.
        prop_assert!((0..=d.scale_up_num).contains(&d.scale_up_limit));
        prop_assert!(total_unavailable + d.scale_up_limit <= l.scale_max_unavailable.max(total_unavailable));
        // Scale-in lands exactly on replicas + surge and keeps the partition's old Pods.
        if d.scale_down_num > 0 {
            prop_assert_eq!(current_total - c.to_delete_old - c.to_delete_new - d.scale_down_num, l.replicas + d.use_surge);
        }
        if d.scale_down_num_old_revision > 0 {
            prop_assert!(current_old - c.to_delete_old - d.scale_down_num_old_revision >= l.partition);
        }
        prop_assert!(d.delete_ready_limit >= 0);
        // Updating keeps at least `partition` active Pods at old revisions. (With the rollback gate,
        // a snapshot still waiting for a scale step can ask for updates either way; the controller
        // never updates in such a pass because scaling goes first.)
        if d.update_num > 0 && !rollback {
            prop_assert!(c.old_active - d.update_num >= l.partition);
        }
        if !rollback {
            prop_assert!(d.update_num >= 0);
        }
        if d.update_num == 0 {
            prop_assert_eq!(d.update_max_unavailable, 0);
        }
    }

    #[test]
    fn limit_updates_never_exceeds_the_budget(
        available in proptest::collection::vec(any::<bool>(), 0..20),
        at_target_seed in proptest::collection::vec(any::<bool>(), 20),
        update_num in -20i64..20,
        budget in -2i64..10,
        order_seed in any::<u64>(),
    ) {
        let n = available.len();
        let at_target = &at_target_seed[..n];
        // Candidates: Pods not at the target, in a seeded order.
        let mut ordered: Vec<usize> = (0..n).filter(|&i| !at_target[i]).collect();
        ordered.sort_by_key(|&i| (i as u64).wrapping_mul(order_seed | 1).rotate_left(17));
        let diffs = Diffs { update_num, update_max_unavailable: budget, ..Default::default() };
        let accepted = limit_updates(&ordered, &available, at_target, &diffs);

        prop_assert!(accepted.len() as u64 <= update_num.unsigned_abs());
        prop_assert_eq!(&accepted[..], &ordered[..accepted.len()]);
        let before = available.iter().filter(|a| !**a).count() as i64;
        let after = before + accepted.iter().filter(|&&i| available[i]).count() as i64;
        prop_assert!(after <= before.max(budget), "unavailable {before} -> {after}, budget {budget}");
        let target_before = (0..n).filter(|&i| !available[i] && at_target[i]).count() as i64;
        prop_assert!(target_before + accepted.len() as i64 <= target_before.max(budget));
    }

    /// End to end on real Pods: the planned update never takes the set beyond maxUnavailable (counted
    /// against replicas) unless it already was, and never updates into the partition.
    #[test]
    fn planned_update_respects_max_unavailable_and_partition(
        shape in proptest::collection::vec((any::<bool>(), 0u8..4, 0u8..12), 0..15),
        replicas in 0i32..15,
        partition in arb_int_or_percent(15),
        max_unavailable in arb_int_or_percent(6),
        max_surge in arb_int_or_percent(4),
    ) {
        let pods: Vec<Pod> = shape
            .iter()
            .enumerate()
            .map(|(i, &(new, avail, extra))| {
                let p = test_pod(&format!("p{i}"), new, avail != 0);
                let mut b = crate::pods::testing::PodBuilder(p);
                if extra == 0 { b = b.lifecycle("PreparingDelete"); }
                if extra == 1 { b = b.label("apps.kruise.io/specified-delete", "true"); }
                b.build()
            })
            .collect();
        let s = spec(replicas, partition.clone(), max_unavailable.clone(), max_surge.clone());
        let plan = plan_update(&s, &pods, OLD, NEW, Gates::default(), now()).expect("valid");
        let l = Limits::resolve(&RolloutKnobs::from_spec(&s)).expect("valid");

        let available: Vec<bool> = pods.iter().map(|p| pods::is_available(p, 0, now())).collect();
        let before = available.iter().filter(|a| !**a).count() as i64;
        let after = before + plan.pods.iter().filter(|&&i| available[i]).count() as i64;
        let surplus = pods.len() as i64 - l.replicas;
        prop_assert!(after - surplus <= (before - surplus).max(l.max_unavailable));

        let old_active = pods
            .iter()
            .filter(|p| !pods::is_at_revision(p, NEW) && pods::lifecycle_state(p) != LifecycleState::PreparingDelete)
            .count() as i64;
        prop_assert!(plan.pods.iter().all(|&i| !pods::is_at_revision(&pods[i], NEW)));
        prop_assert!(old_active - plan.pods.len() as i64 >= l.partition.min(old_active));
    }
}
