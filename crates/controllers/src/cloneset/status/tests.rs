use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::cloneset::v1beta1::{CloneSetSpec, RollingUpdateCloneSetStrategy};

use super::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn pod(revision: &str, ready: bool, lifecycle: Option<&str>) -> Pod {
    let mut labels =
        BTreeMap::from([("controller-revision-hash".to_string(), revision.to_string())]);
    if let Some(state) = lifecycle {
        labels.insert("lifecycle.apps.kruise.io/state".into(), state.into());
    }
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(now() - SignedDuration::from_secs(3))),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn cloneset(replicas: i32, partition: Option<i32>, deadline: Option<i32>) -> CloneSet {
    let mut cs = CloneSet::new(
        "cs",
        CloneSetSpec {
            replicas: Some(replicas),
            progress_deadline_seconds: deadline,
            ..CloneSetSpec::default()
        },
    );
    cs.spec.update_strategy.rolling_update = Some(RollingUpdateCloneSetStrategy {
        partition: partition.map(IntOrString::Int),
        ..RollingUpdateCloneSetStrategy::default()
    });
    cs.metadata.generation = Some(7);
    cs
}

fn compute_for(cs: &CloneSet, pods: &[Pod], current: &str) -> Computed {
    compute(&Inputs {
        cs,
        pods,
        current_revision: current,
        update_revision: "cs-new",
        collision_count: None,
        label_selector: "app=cs".into(),
        now: now(),
    })
}

#[test]
fn counters() {
    let cs = cloneset(4, Some(1), None);
    let pods = vec![
        pod("cs-new", true, None),
        pod("cs-new", false, None),
        pod("cs-new", true, Some("PreparingUpdate")),
        pod("cs-old", true, Some("Normal")),
    ];
    let s = compute_for(&cs, &pods, "cs-old").status;
    assert_eq!(
        (
            s.replicas,
            s.ready_replicas,
            s.available_replicas,
            s.updated_replicas,
            s.updated_ready_replicas,
            s.updated_available_replicas,
            s.expected_updated_replicas,
        ),
        (4, 3, 2, 3, 2, 1, 3)
    );
    assert_eq!(s.current_revision, "cs-old");
    assert_eq!(s.observed_generation, 7);
    assert_eq!(s.label_selector, "app=cs");
    assert!(s.conditions.is_empty(), "no deadline, no Progressing");
}

#[test]
fn current_revision_follows_once_every_pod_is_updated() {
    let cs = cloneset(2, None, None);
    let pods = vec![pod("cs-new", false, None), pod("cs-new", true, None)];
    assert_eq!(
        compute_for(&cs, &pods, "cs-old").status.current_revision,
        "cs-new"
    );
    let short = vec![pod("cs-new", true, None)];
    assert_eq!(
        compute_for(&cs, &short, "cs-old").status.current_revision,
        "cs-old"
    );
}

#[test]
#[allow(clippy::type_complexity)]
fn progressing_table() {
    let updated = |n: usize| vec![pod("cs-new", true, None); n];
    let mixed = vec![pod("cs-new", true, None), pod("cs-old", true, None)];
    let stale_since = now() - SignedDuration::from_secs(100);
    let progressing_since = |t: Timestamp| CloneSetCondition {
        type_: CONDITION_PROGRESSING.into(),
        status: "True".into(),
        reason: REASON_UPDATED.into(),
        last_update_time: Some(Time(t)),
        last_transition_time: Some(Time(t)),
        message: String::new(),
    };
    // (name, cloneset, pods, current revision, old Progressing, expected status and reason)
    let mut paused = cloneset(2, None, Some(30));
    if let Some(r) = paused.spec.update_strategy.rolling_update.as_mut() {
        r.paused = true;
    }
    let cases: Vec<(
        &str,
        CloneSet,
        Vec<Pod>,
        &str,
        Option<CloneSetCondition>,
        (&str, &str),
    )> = vec![
        (
            "available",
            cloneset(2, None, Some(30)),
            updated(2),
            "cs-new",
            None,
            ("True", REASON_AVAILABLE),
        ),
        (
            "paused",
            paused,
            mixed.clone(),
            "cs-old",
            None,
            ("True", REASON_PAUSED),
        ),
        (
            "partition available",
            cloneset(2, Some(1), Some(30)),
            mixed.clone(),
            "cs-old",
            None,
            ("True", REASON_PARTITION_AVAILABLE),
        ),
        (
            "progressing",
            cloneset(2, None, Some(30)),
            mixed.clone(),
            "cs-old",
            None,
            ("True", REASON_UPDATED),
        ),
        (
            "deadline exceeded",
            cloneset(2, None, Some(30)),
            mixed.clone(),
            "cs-old",
            Some(progressing_since(stale_since)),
            ("False", REASON_PROGRESS_DEADLINE_EXCEEDED),
        ),
        (
            "within the deadline",
            cloneset(2, None, Some(300)),
            mixed,
            "cs-old",
            Some(progressing_since(stale_since)),
            ("True", REASON_UPDATED),
        ),
    ];
    for (name, mut cs, pods, current, old, (want_status, want_reason)) in cases {
        cs.status = Some(CloneSetStatus {
            conditions: old.into_iter().collect(),
            ..CloneSetStatus::default()
        });
        let computed = compute_for(&cs, &pods, current);
        let c = find(&computed.status, CONDITION_PROGRESSING);
        assert_eq!(
            c.map(|c| (c.status.as_str(), c.reason.as_str())),
            Some((want_status, want_reason)),
            "{name}"
        );
        if want_reason == REASON_UPDATED {
            assert!(
                computed.requeue.is_some(),
                "{name}: requeue at the deadline"
            );
        }
    }
}

#[test]
fn set_condition_keeps_transition_time_when_status_holds() {
    let t0 = now() - SignedDuration::from_secs(50);
    let mut status = CloneSetStatus::default();
    set_condition(
        &mut status,
        condition("Progressing", "True", "A", String::new(), t0),
    );
    set_condition(
        &mut status,
        condition("Progressing", "True", "B", String::new(), now()),
    );
    let c = &status.conditions[0];
    assert_eq!(c.reason, "B");
    assert_eq!(c.last_transition_time, Some(Time(t0)));
    assert_eq!(c.last_update_time, Some(Time(now())));
    assert!(changed(None, &status));
    assert!(!changed(Some(&status.clone()), &status));
}
