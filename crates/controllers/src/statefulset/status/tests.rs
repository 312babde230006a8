use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kruise_api::statefulset::v1beta1::{
    RollingUpdateStatefulSetStrategy, StatefulSetSpec, StatefulSetUpdateStrategy,
};
use kruise_core::rollout::statefulset::BlockReason;

use super::*;

fn set(replicas: i32, partition: i32) -> StatefulSet {
    let mut set = StatefulSet::new(
        "web",
        StatefulSetSpec {
            replicas: Some(replicas),
            update_strategy: StatefulSetUpdateStrategy {
                type_: "RollingUpdate".into(),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(partition),
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
    );
    set.metadata = ObjectMeta {
        name: Some("web".into()),
        generation: Some(3),
        ..ObjectMeta::default()
    };
    set
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid timestamp")
}

fn ago(secs: i64) -> Timestamp {
    now() - SignedDuration::from_secs(secs)
}

/// A Running Pod of the set at `revision`, Ready for a minute or not Ready.
fn pod(ordinal: usize, revision: &str, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("web-{ordinal}")),
            labels: Some(BTreeMap::from([
                ("controller-revision-hash".to_owned(), revision.to_owned()),
                (
                    "lifecycle.apps.kruise.io/state".to_owned(),
                    "Normal".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(ago(60))),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn pods(updated: usize, old: usize, unready: usize) -> Vec<Pod> {
    (0..updated + old + unready)
        .map(|i| {
            let revision = if i < updated { "web-new" } else { "web-old" };
            pod(i, revision, i < updated + old)
        })
        .collect()
}

fn run(set: &StatefulSet, pods: &[Pod], blocked: Option<&Blocked>, at: Timestamp) -> Computed {
    let claims = BTreeMap::new();
    compute(&Inputs {
        set,
        pods,
        claims: &claims,
        current_revision: "web-old",
        update_revision: "web-new",
        collision_count: None,
        label_selector: "app=web".into(),
        blocked,
        failed_create: None,
        failed_update: None,
        now: at,
    })
}

fn cond<'a>(status: &'a StatefulSetStatus, type_: &str) -> &'a StatefulSetCondition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .expect("condition present")
}

#[test]
fn counts_revisions_and_conditions() {
    // (updated, old, unready, partition) → (currentRevision, Progressing reason, Available status)
    let cases = [
        ((3, 0, 0, 0), ("web-new", REASON_AVAILABLE, "True")),
        ((1, 2, 0, 0), ("web-old", REASON_UPDATED, "True")),
        (
            (1, 2, 0, 2),
            ("web-old", REASON_PARTITION_AVAILABLE, "True"),
        ),
        ((1, 0, 2, 0), ("web-old", REASON_UPDATED, "False")),
    ];
    for ((updated, old, unready, partition), (current, progressing, available)) in cases {
        let set = set(3, partition);
        let computed = run(&set, &pods(updated, old, unready), None, now());
        let s = &computed.status;
        assert_eq!(s.current_revision, current, "{updated}/{old}/{unready}");
        assert_eq!(s.replicas, 3);
        assert_eq!(s.updated_replicas as usize, updated);
        assert_eq!(s.observed_generation, 3);
        assert_eq!(s.collision_count, Some(0));
        assert_eq!(
            cond(s, CONDITION_PROGRESSING).reason.as_deref(),
            Some(progressing),
            "{updated}/{old}/{unready}/{partition}"
        );
        assert_eq!(cond(s, CONDITION_AVAILABLE).status, available);
    }
}

#[test]
fn a_stalled_rollout_exceeds_its_deadline_and_names_the_pod_it_waits_for() {
    let mut set = set(3, 0);
    set.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_PROGRESS_DEADLINE.to_owned(),
        "60".to_owned(),
    )]));
    let pods = pods(1, 1, 1);
    let blocked = Blocked {
        pod: "web-2".into(),
        reason: BlockReason::RunningAndReady,
        detail: "phase Running, Ready=False".into(),
    };
    let first = run(&set, &pods, Some(&blocked), ago(120));
    assert!(first.requeue.is_some(), "the deadline is watched");
    set.status = Some(first.status);
    let later = run(&set, &pods, Some(&blocked), now());
    let c = cond(&later.status, CONDITION_PROGRESSING);
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some(REASON_PROGRESS_DEADLINE_EXCEEDED));
    let message = c.message.clone().unwrap_or_default();
    assert!(
        message.contains("waiting for web-2 to be Running and Ready"),
        "{message}"
    );

    // Progress (one more Pod updated and available) restarts the clock.
    set.status = Some(later.status);
    let progressed = run(&set, &pods_all_updated_but_one(), None, now());
    let c = cond(&progressed.status, CONDITION_PROGRESSING);
    assert_eq!(c.reason.as_deref(), Some(REASON_UPDATED));
}

fn pods_all_updated_but_one() -> Vec<Pod> {
    pods(2, 1, 0)
}

#[test]
fn no_deadline_means_no_progressing_condition() {
    let mut set = set(3, 0);
    set.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_PROGRESS_DEADLINE.to_owned(),
        "0".to_owned(),
    )]));
    let computed = run(&set, &pods(1, 2, 0), None, now());
    assert!(
        computed
            .status
            .conditions
            .iter()
            .all(|c| c.type_ != CONDITION_PROGRESSING)
    );
}
