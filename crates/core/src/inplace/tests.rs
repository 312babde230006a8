use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerResizePolicy, ContainerStatus, EnvVar, EnvVarSource, ObjectFieldSelector,
    Pod, PodCondition, PodReadinessGate, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::pods::{LifecycleState, condition as status_of};

fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        ..Container::default()
    }
}

fn template(containers: Vec<Container>, labels: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers,
            ..PodSpec::default()
        }),
    }
}

fn res(cpu: &str, mem: &str) -> ResourceRequirements {
    let m: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(mem.into())),
    ]
    .into();
    ResourceRequirements {
        limits: Some(m.clone()),
        requests: Some(m),
        ..ResourceRequirements::default()
    }
}

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("valid time")
}

fn cond(type_: &str, status: &str, since: i64) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(ts(since))),
        ..PodCondition::default()
    }
}

/// A running Pod made from `t`, with the readiness gate, Ready, and one status per container.
fn pod_from(t: &PodTemplateSpec) -> Pod {
    let spec = t.spec.clone().map(|mut s| {
        s.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: keys::CONDITION_IN_PLACE_UPDATE_READY.into(),
        }]);
        s
    });
    let statuses = spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("id-of-{}", c.image.clone().unwrap_or_default()),
            ready: true,
            ..ContainerStatus::default()
        })
        .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            resource_version: Some("100".into()),
            labels: t.metadata.as_ref().and_then(|m| m.labels.clone()),
            ..ObjectMeta::default()
        },
        spec,
        status: Some(PodStatus {
            conditions: Some(vec![
                cond(keys::CONDITION_IN_PLACE_UPDATE_READY, "True", 0),
                cond("Ready", "True", 0),
            ]),
            container_statuses: Some(statuses),
            ..PodStatus::default()
        }),
    }
}

fn in_place(p: Plan) -> InPlacePlan {
    match p {
        Plan::InPlace(p) => p,
        Plan::NotInPlace(r) => panic!("expected in place, got {r}"),
    }
}

fn apply(pod: &Pod, patch: &json_patch::Patch) -> Result<Pod, String> {
    let mut doc = serde_json::to_value(pod).map_err(|e| e.to_string())?;
    json_patch::patch(&mut doc, patch).map_err(|e| e.to_string())?;
    serde_json::from_value(doc).map_err(|e| e.to_string())
}

const ON: PlanOptions = PlanOptions {
    resize: true,
    env_from_metadata: false,
};
const OFF: PlanOptions = PlanOptions {
    resize: false,
    env_from_metadata: false,
};

// ---------------------------------------------------------------- plan

/// Expected container name → image pairs.
type Images = &'static [(&'static str, &'static str)];

#[test]
fn plan_table() {
    let base = template(vec![container("main", "app:v1")], &[("app", "web")]);
    let pod = pod_from(&base);
    let with = |f: &dyn Fn(&mut PodTemplateSpec)| {
        let mut t = base.clone();
        f(&mut t);
        t
    };
    fn spec(t: &mut PodTemplateSpec) -> &mut PodSpec {
        t.spec.as_mut().expect("spec")
    }

    struct Case {
        name: &'static str,
        new: PodTemplateSpec,
        opts: PlanOptions,
        want: Result<(Images, bool), NotInPlace>,
    }
    let cases = [
        Case {
            name: "unchanged",
            new: base.clone(),
            opts: OFF,
            want: Ok((&[], false)),
        },
        Case {
            name: "image",
            new: with(&|t| spec(t).containers[0].image = Some("app:v2".into())),
            opts: OFF,
            want: Ok((&[("main", "app:v2")], true)),
        },
        Case {
            name: "label only restarts nothing",
            new: with(&|t| {
                t.metadata.as_mut().expect("meta").labels =
                    Some([("app".to_string(), "web2".to_string())].into())
            }),
            opts: OFF,
            want: Ok((&[], false)),
        },
        Case {
            name: "env literal",
            new: with(&|t| {
                spec(t).containers[0].env = Some(vec![EnvVar {
                    name: "A".into(),
                    value: Some("1".into()),
                    ..EnvVar::default()
                }])
            }),
            opts: ON,
            want: Err(NotInPlace::Field("/spec/containers/0/env".into())),
        },
        Case {
            name: "command",
            new: with(&|t| spec(t).containers[0].command = Some(vec!["sh".into()])),
            opts: ON,
            want: Err(NotInPlace::Field("/spec/containers/0/command".into())),
        },
        Case {
            name: "container added",
            new: with(&|t| spec(t).containers.push(container("extra", "x"))),
            opts: ON,
            want: Err(NotInPlace::Field("/spec/containers/1/image".into())),
        },
        Case {
            name: "container renamed",
            new: with(&|t| spec(t).containers[0].name = "other".into()),
            opts: ON,
            want: Err(NotInPlace::Field("/spec/containers/0/name".into())),
        },
        Case {
            name: "other metadata",
            new: with(&|t| t.metadata.as_mut().expect("meta").finalizers = Some(vec!["f".into()])),
            opts: ON,
            want: Err(NotInPlace::Field("/metadata/finalizers".into())),
        },
        Case {
            name: "resources without resize",
            new: with(&|t| spec(t).containers[0].resources = Some(res("1", "1Gi"))),
            opts: OFF,
            want: Err(NotInPlace::Resource(
                "/spec/containers/0/resources/limits/cpu".into(),
            )),
        },
        Case {
            name: "resource key added even with resize",
            new: with(&|t| spec(t).containers[0].resources = Some(res("1", "1Gi"))),
            opts: ON,
            want: Err(NotInPlace::Resource(
                "/spec/containers/0/resources/limits/cpu".into(),
            )),
        },
    ];
    for case in cases {
        let got = match plan(&base, &case.new, &pod, &case.opts) {
            Plan::InPlace(p) => Ok(p),
            Plan::NotInPlace(r) => Err(r),
        };
        match (got, case.want) {
            (Ok(p), Ok((images, restarts))) => {
                let want: BTreeMap<String, String> = images
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                assert_eq!(p.images, want, "{}", case.name);
                assert_eq!(p.restarts_containers, restarts, "{}", case.name);
            }
            (Err(got), Err(want)) => assert_eq!(got, want, "{}", case.name),
            (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
        }
    }
}

#[test]
fn plan_records_label_and_annotation_changes() {
    let mut old = template(
        vec![container("main", "a")],
        &[("app", "web"), ("gone", "x")],
    );
    old.metadata.as_mut().expect("meta").annotations =
        Some([("a/b~c".to_string(), "1".to_string())].into());
    let mut new = template(
        vec![container("main", "a")],
        &[("app", "web2"), ("new", "y")],
    );
    new.metadata.as_mut().expect("meta").annotations =
        Some([("a/b~c".to_string(), "2".to_string())].into());
    let p = in_place(plan(&old, &new, &pod_from(&old), &OFF));
    let labels: BTreeMap<String, Option<String>> = [
        ("app".to_string(), Some("web2".to_string())),
        ("gone".to_string(), None),
        ("new".to_string(), Some("y".to_string())),
    ]
    .into();
    assert_eq!(p.labels, labels);
    assert_eq!(
        p.annotations,
        [("a/b~c".to_string(), Some("2".to_string()))].into()
    );
    assert!(!p.restarts_containers);
}

#[test]
fn plan_ignores_go_encoding_noise() {
    // Go writes `resources: {}`; k8s-openapi leaves it out. Not a change.
    let old = template(vec![container("main", "a")], &[]);
    let mut new = old.clone();
    new.spec.as_mut().expect("spec").containers[0].resources =
        Some(ResourceRequirements::default());
    let p = in_place(plan(&old, &new, &pod_from(&old), &OFF));
    assert!(p.is_empty());
}

#[test]
fn plan_resize() {
    let mut old = template(vec![container("main", "a")], &[]);
    old.spec.as_mut().expect("spec").containers[0].resources = Some(res("1", "1Gi"));
    let mut new = old.clone();
    new.spec.as_mut().expect("spec").containers[0].resources = Some(res("2", "1Gi"));
    let mut pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &ON));
    let change = &p.resources["main"];
    assert_eq!(change.limits["cpu"], Quantity("2".into()));
    assert_eq!(change.requests["cpu"], Quantity("2".into()));
    assert!(!change.limits.contains_key("memory"));
    assert!(
        !p.restarts_containers,
        "no resizePolicy: resized without restart"
    );

    // A RestartContainer policy on memory does not matter for a cpu change, but does for memory.
    let policy = |r: &str| ContainerResizePolicy {
        resource_name: r.into(),
        restart_policy: "RestartContainer".into(),
    };
    pod.spec.as_mut().expect("spec").containers[0].resize_policy = Some(vec![policy("memory")]);
    assert!(!in_place(plan(&old, &new, &pod, &ON)).restarts_containers);
    let mut new_mem = old.clone();
    new_mem.spec.as_mut().expect("spec").containers[0].resources = Some(res("1", "2Gi"));
    assert!(in_place(plan(&old, &new_mem, &pod, &ON)).restarts_containers);

    // Guaranteed → Burstable is rejected.
    let mut burst = old.clone();
    let r = burst.spec.as_mut().expect("spec").containers[0]
        .resources
        .as_mut()
        .expect("resources");
    r.requests
        .as_mut()
        .expect("requests")
        .insert("cpu".into(), Quantity("500m".into()));
    assert_eq!(
        plan(&old, &burst, &pod, &ON),
        Plan::NotInPlace(NotInPlace::QosClassChanged {
            from: QosClass::Guaranteed,
            to: QosClass::Burstable
        })
    );
    // Not a quantity.
    let mut bad = old.clone();
    bad.spec.as_mut().expect("spec").containers[0].resources = Some(res("lots", "1Gi"));
    assert!(matches!(
        plan(&old, &bad, &pod, &ON),
        Plan::NotInPlace(NotInPlace::Resource(_))
    ));
}

#[test]
fn qos_classes() {
    let spec = |r: Option<ResourceRequirements>| PodSpec {
        containers: vec![Container {
            name: "c".into(),
            resources: r,
            ..Container::default()
        }],
        ..PodSpec::default()
    };
    assert_eq!(qos_class(Some(&spec(None))), QosClass::BestEffort);
    assert_eq!(
        qos_class(Some(&spec(Some(res("1", "1Gi"))))),
        QosClass::Guaranteed
    );
    // Limits only: requests default to limits, as the API server does.
    let limits_only = ResourceRequirements {
        limits: res("1", "1Gi").limits,
        ..ResourceRequirements::default()
    };
    assert_eq!(
        qos_class(Some(&spec(Some(limits_only)))),
        QosClass::Guaranteed
    );
    let requests_only = ResourceRequirements {
        requests: res("1", "1Gi").requests,
        ..ResourceRequirements::default()
    };
    assert_eq!(
        qos_class(Some(&spec(Some(requests_only)))),
        QosClass::Burstable
    );
    // 1000m and 1 are the same quantity.
    let mut mixed = res("1", "1Gi");
    mixed
        .requests
        .as_mut()
        .expect("requests")
        .insert("cpu".into(), Quantity("1000m".into()));
    assert_eq!(qos_class(Some(&spec(Some(mixed)))), QosClass::Guaranteed);
}

#[test]
fn plan_rejects_env_from_changed_metadata() {
    let mut c = container("main", "a");
    c.env = Some(vec![EnvVar {
        name: "VERSION".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.labels['version']".into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }]);
    let old = template(vec![c.clone()], &[("version", "1"), ("app", "x")]);
    let new = template(vec![c.clone()], &[("version", "2"), ("app", "x")]);
    assert_eq!(
        plan(&old, &new, &pod_from(&old), &OFF),
        Plan::NotInPlace(NotInPlace::EnvFromMetadata {
            container: "main".into(),
            key: "metadata.labels['version']".into()
        })
    );
    // Another label is fine.
    let other = template(vec![c], &[("version", "1"), ("app", "y")]);
    assert!(matches!(
        plan(&old, &other, &pod_from(&old), &OFF),
        Plan::InPlace(_)
    ));
}

/// A restart request restarts every template container in place by switching its image reference
/// between the template's and the running digest; a change of anything else still decides.
#[test]
fn plan_restart_switches_between_reference_and_running_digest() {
    let restarted = |t: &PodTemplateSpec, at: &str| {
        let mut t = t.clone();
        t.metadata
            .get_or_insert_with(ObjectMeta::default)
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOTATION_RESTARTED_AT.into(), at.into());
        t
    };
    let base = template(
        vec![container("main", "app:v1"), container("log", "log:v1")],
        &[],
    );
    let mut pod = pod_from(&base);
    for s in pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .expect("statuses")
    {
        s.image_id = format!("docker-pullable://{}@sha256:{}", s.name, s.name.len());
    }
    let mut on_digest = pod.clone();
    for c in &mut on_digest.spec.as_mut().expect("spec").containers {
        c.image = Some(format!("{}@sha256:{}", c.name, c.name.len()));
    }
    let mut not_started = pod.clone();
    if let Some(s) = not_started.status.as_mut() {
        s.container_statuses = None;
    }
    let t1 = restarted(&base, "t1");
    let mut t2_image = restarted(&t1, "t2");
    t2_image.spec.as_mut().expect("spec").containers[0].image = Some("app:v2".into());

    struct Case {
        name: &'static str,
        old: &'static str,
        new: PodTemplateSpec,
        pod: Pod,
        want: Result<Images, NotInPlace>,
    }
    let cases = [
        Case {
            name: "first restart: tag → running digest",
            old: "base",
            new: t1.clone(),
            pod: pod.clone(),
            want: Ok(&[("log", "log@sha256:3"), ("main", "main@sha256:4")]),
        },
        Case {
            name: "next restart: digest → template reference",
            old: "t1",
            new: restarted(&base, "t2"),
            pod: on_digest.clone(),
            want: Ok(&[("log", "log:v1"), ("main", "app:v1")]),
        },
        Case {
            name: "image change wins for its container, the other restarts",
            old: "t1",
            new: t2_image,
            pod: pod.clone(),
            want: Ok(&[("log", "log@sha256:3"), ("main", "app:v2")]),
        },
        Case {
            name: "annotation removed (undo) restarts nothing",
            old: "t1",
            new: base.clone(),
            pod: pod.clone(),
            want: Ok(&[]),
        },
        Case {
            name: "container never started",
            old: "base",
            new: t1.clone(),
            pod: not_started,
            want: Err(NotInPlace::RestartNeedsRecreate("main".into())),
        },
    ];
    for case in cases {
        let old = if case.old == "base" { &base } else { &t1 };
        let got = match plan(old, &case.new, &case.pod, &OFF) {
            Plan::InPlace(p) => {
                assert_eq!(p.restarts_containers, !p.images.is_empty(), "{}", case.name);
                Ok(p.images)
            }
            Plan::NotInPlace(r) => Err(r),
        };
        let want = case.want.map(|images| {
            images
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        });
        assert_eq!(got, want, "{}", case.name);
    }
}

#[test]
fn plan_maps_containers_by_name_and_checks_the_pod() {
    let old = template(vec![container("main", "a:1")], &[]);
    let new = template(vec![container("main", "a:2")], &[]);
    // A sidecar injected in front: template index 0 is Pod index 1.
    let mut pod = pod_from(&old);
    pod.spec
        .as_mut()
        .expect("spec")
        .containers
        .insert(0, container("sidecar", "s:1"));
    let p = in_place(plan(&old, &new, &pod, &OFF));
    let labels = BTreeMap::new();
    let target = Target {
        revision: "web-2",
        revision_labels: &labels,
    };
    // Pod Ready with the gate True: drain first.
    assert!(matches!(
        next_step(&pod, &p, &target, 0, ts(0)),
        Ok(Step::MarkUnready(_))
    ));
    let mut drained = pod.clone();
    drained.status.as_mut().expect("status").conditions = Some(vec![
        cond(keys::CONDITION_IN_PLACE_UPDATE_READY, "False", 0),
        cond("Ready", "False", 0),
    ]);
    let Ok(Step::Apply(patch)) = next_step(&drained, &p, &target, 0, ts(0)) else {
        panic!("expected apply");
    };
    let after = apply(&drained, &patch).expect("applies");
    let images: Vec<_> = after
        .spec
        .expect("spec")
        .containers
        .into_iter()
        .map(|c| c.image)
        .collect();
    assert_eq!(images, [Some("s:1".to_string()), Some("a:2".to_string())]);

    // A Pod without the container: not in place.
    let mut lonely = pod_from(&old);
    lonely.spec.as_mut().expect("spec").containers[0].name = "renamed".into();
    assert_eq!(
        plan(&old, &new, &lonely, &OFF),
        Plan::NotInPlace(NotInPlace::ContainerNotInPod("main".into()))
    );
}

// ---------------------------------------------------------------- flow

fn image_update() -> (PodTemplateSpec, PodTemplateSpec, Pod, InPlacePlan) {
    let old = template(vec![container("main", "app:v1")], &[("app", "web")]);
    let new = template(vec![container("main", "app:v2")], &[("app", "web")]);
    let pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &OFF));
    (old, new, pod, p)
}

fn revision_labels() -> BTreeMap<String, String> {
    [
        (
            "controller-revision-hash".to_string(),
            "web-5d4f".to_string(),
        ),
        ("pod-template-hash".to_string(), "5d4f".to_string()),
    ]
    .into()
}

#[test]
fn drain_then_grace_then_apply() {
    let (_, _, pod, p) = image_update();
    let labels = revision_labels();
    let target = Target {
        revision: "web-5d4f",
        revision_labels: &labels,
    };

    // 1. Ready Pod: mark unready (gate False, Ready False), nothing else.
    let Ok(Step::MarkUnready(patch)) = next_step(&pod, &p, &target, 30, ts(100)) else {
        panic!("expected MarkUnready");
    };
    assert_eq!(
        serde_json::to_value(&patch.0[0]).expect("op"),
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "100"})
    );
    let mut marked = apply(&pod, &patch).expect("applies");
    let gate = status_of(&marked, keys::CONDITION_IN_PLACE_UPDATE_READY).expect("gate");
    assert_eq!(
        (gate.status.as_str(), gate.reason.as_deref()),
        ("False", Some(REASON_START_IN_PLACE_UPDATE))
    );
    assert_eq!(gate.last_transition_time, Some(Time(ts(100))));
    // Ready as the kubelet would write it for this gate, so that it has nothing to rewrite.
    let ready = status_of(&marked, "Ready").expect("ready");
    assert_eq!(
        (
            ready.status.as_str(),
            ready.reason.as_deref(),
            ready.message.as_deref()
        ),
        (
            "False",
            Some(REASON_READINESS_GATES_NOT_READY),
            Some(
                "the status of pod readiness gate \"InPlaceUpdateReady\" is not \"True\", but False"
            )
        )
    );
    marked.metadata.resource_version = Some("101".into());

    // 2. Within the grace period: wait the rest, rounded up to whole seconds.
    assert_eq!(
        next_step(&marked, &p, &target, 30, ts(110)),
        Ok(Step::Wait(Duration::from_secs(20)))
    );
    let half = ts(110)
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(500))
        .expect("time");
    assert_eq!(
        next_step(&marked, &p, &target, 30, half),
        Ok(Step::Wait(Duration::from_secs(20)))
    );

    // 3. Grace over: the guarded patch.
    let Ok(Step::Apply(patch)) = next_step(&marked, &p, &target, 30, ts(130)) else {
        panic!("expected Apply");
    };
    let updated = apply(&marked, &patch).expect("applies");
    let spec = updated.spec.as_ref().expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some("app:v2"));
    let labels = updated.metadata.labels.as_ref().expect("labels");
    assert_eq!(labels["controller-revision-hash"], "web-5d4f");
    assert_eq!(labels["pod-template-hash"], "5d4f");
    let state = read_state(&updated).expect("state").expect("parses");
    assert_eq!(state.revision, "web-5d4f");
    assert!(state.update_images);
    assert_eq!(
        state.last_container_statuses["main"].image_id,
        "id-of-app:v1"
    );
    assert_eq!(state.update_timestamp, Time(ts(130)));

    // The same patch against a Pod that changed meanwhile (e.g. became Ready again) is rejected.
    let mut moved_on = marked.clone();
    moved_on.metadata.resource_version = Some("102".into());
    assert!(apply(&moved_on, &patch).is_err());
}

#[test]
fn stale_false_condition_while_ready_is_drained_again() {
    let (_, _, mut pod, p) = image_update();
    let labels = revision_labels();
    let target = Target {
        revision: "r",
        revision_labels: &labels,
    };
    // The gate has been False for long, but the Pod is Ready: re-assert, keep the gate's time.
    pod.status.as_mut().expect("status").conditions = Some(vec![
        cond(keys::CONDITION_IN_PLACE_UPDATE_READY, "False", 0),
        cond("Ready", "True", 0),
    ]);
    let Ok(Step::MarkUnready(patch)) = next_step(&pod, &p, &target, 0, ts(500)) else {
        panic!("expected MarkUnready");
    };
    let after = apply(&pod, &patch).expect("applies");
    let gate = status_of(&after, keys::CONDITION_IN_PLACE_UPDATE_READY).expect("gate");
    assert_eq!(gate.last_transition_time, Some(Time(ts(0))));
    assert_eq!(status_of(&after, "Ready").expect("ready").status, "False");
}

#[test]
fn no_drain_without_restart_or_gate() {
    let labels = revision_labels();
    let target = Target {
        revision: "r",
        revision_labels: &labels,
    };
    // Label-only change on a Ready Pod: applied at once, even with a grace period.
    let old = template(vec![container("main", "a")], &[("app", "web")]);
    let new = template(
        vec![container("main", "a")],
        &[("app", "web"), ("tier", "1")],
    );
    let pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &OFF));
    let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 30, ts(0)) else {
        panic!("expected Apply");
    };
    let after = apply(&pod, &patch).expect("applies");
    assert_eq!(after.metadata.labels.expect("labels")["tier"], "1");

    // Image change on a Pod without the readiness gate: nothing to drain with.
    let (_, _, mut pod, p) = image_update();
    pod.spec.as_mut().expect("spec").readiness_gates = None;
    assert!(matches!(
        next_step(&pod, &p, &target, 30, ts(0)),
        Ok(Step::Apply(_))
    ));

    // No resourceVersion: no unguarded patch.
    pod.metadata.resource_version = None;
    assert_eq!(
        next_step(&pod, &p, &target, 30, ts(0)),
        Err(FlowError::NoResourceVersion)
    );
}

#[test]
fn apply_cleans_up_openkruise_annotations() {
    let (_, _, mut pod, p) = image_update();
    pod.spec.as_mut().expect("spec").readiness_gates = None;
    pod.metadata.labels = None;
    pod.metadata.annotations = Some(
        [
            (
                keys::ANNOTATION_IN_PLACE_UPDATE_GRACE.to_string(),
                "{}".to_string(),
            ),
            (
                keys::ANNOTATION_IN_PLACE_UPDATE_STATE_OLD.to_string(),
                "{}".to_string(),
            ),
        ]
        .into(),
    );
    let labels = revision_labels();
    let target = Target {
        revision: "r",
        revision_labels: &labels,
    };
    let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 0, ts(0)) else {
        panic!("expected Apply");
    };
    let after = apply(&pod, &patch).expect("applies");
    let annotations = after.metadata.annotations.as_ref().expect("annotations");
    assert!(!annotations.contains_key(keys::ANNOTATION_IN_PLACE_UPDATE_GRACE));
    assert!(!annotations.contains_key(keys::ANNOTATION_IN_PLACE_UPDATE_STATE_OLD));
    assert!(annotations.contains_key(keys::ANNOTATION_IN_PLACE_UPDATE_STATE));
    assert_eq!(after.metadata.labels.expect("labels").len(), 2);
}

#[test]
fn resize_goes_to_its_own_patch_first() {
    let mut old = template(vec![container("main", "a")], &[]);
    old.spec.as_mut().expect("spec").containers[0].resources = Some(res("1", "1Gi"));
    let mut new = old.clone();
    new.spec.as_mut().expect("spec").containers[0].resources = Some(res("2", "1Gi"));
    let pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &ON));
    let labels = revision_labels();
    let target = Target {
        revision: "r",
        revision_labels: &labels,
    };
    let Ok(Step::Resize(patch)) = next_step(&pod, &p, &target, 30, ts(0)) else {
        panic!("expected Resize");
    };
    assert_eq!(
        serde_json::to_value(&patch).expect("patch"),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "100"},
            {"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "2"},
            {"op": "add", "path": "/spec/containers/0/resources/requests/cpu", "value": "2"},
        ])
    );
    let mut resized = apply(&pod, &patch).expect("applies");
    resized.metadata.resource_version = Some("101".into());
    let Ok(Step::Apply(patch)) = next_step(&resized, &p, &target, 30, ts(0)) else {
        panic!("expected Apply after the resize");
    };
    let after = apply(&resized, &patch).expect("applies");
    let state = read_state(&after).expect("state").expect("parses");
    assert!(state.update_resources && !state.update_images);
    // 2000m already there counts as done: no second resize.
    let mut same = resized.clone();
    same.spec.as_mut().expect("spec").containers[0].resources = Some(res("2000m", "1Gi"));
    assert!(matches!(
        next_step(&same, &p, &target, 30, ts(0)),
        Ok(Step::Apply(_))
    ));
}

#[test]
fn mark_ready_after_completion() {
    let (_, _, mut pod, _) = image_update();
    let gate_only = Finish::default();
    assert_eq!(finish_patch(&pod, &gate_only, ts(0)), Ok(None));
    pod.status.as_mut().expect("status").conditions = Some(vec![cond(
        keys::CONDITION_IN_PLACE_UPDATE_READY,
        "False",
        0,
    )]);
    let patch = finish_patch(&pod, &gate_only, ts(9))
        .expect("rv")
        .expect("patch");
    let after = apply(&pod, &patch).expect("applies");
    let gate = status_of(&after, keys::CONDITION_IN_PLACE_UPDATE_READY).expect("gate");
    assert_eq!(
        (gate.status.as_str(), gate.last_transition_time.clone()),
        ("True", Some(Time(ts(9))))
    );
    // No conditions at all: the list is created.
    pod.status.as_mut().expect("status").conditions = None;
    let patch = finish_patch(&pod, &gate_only, ts(9))
        .expect("rv")
        .expect("patch");
    assert!(apply(&pod, &patch).is_ok());
}

/// A Pod whose update was applied and has completed: state annotation, lifecycle Updating, the gate
/// False after the drain, KruisePodReady False from a markPodNotReady hook.
fn completed_update() -> Pod {
    let (_, _, pod, p) = image_update();
    let labels = revision_labels();
    let target = Target {
        revision: "web-5d4f",
        revision_labels: &labels,
    };
    let mut drained = pod.clone();
    drained.status.as_mut().expect("status").conditions = Some(vec![
        cond("Ready", "False", 0),
        cond(keys::CONDITION_KRUISE_POD_READY, "False", 0),
        cond(keys::CONDITION_IN_PLACE_UPDATE_READY, "False", 0),
    ]);
    drained
        .metadata
        .labels
        .get_or_insert_default()
        .insert(keys::LABEL_LIFECYCLE_STATE.into(), "Updating".into());
    let Ok(Step::Apply(patch)) = next_step(&drained, &p, &target, 0, ts(1)) else {
        panic!("the drained Pod is updated");
    };
    let mut updated = apply(&drained, &patch).expect("applies");
    updated.metadata.resource_version = Some("2".into());
    updated
}

/// The finish back to Normal, with or without `KruisePodReady`, and its patch for `pod` at ts(9).
fn finish_to_normal(pod: &Pod, kruise_pod_ready: bool) -> (Finish, json_patch::Patch) {
    let finish = Finish {
        lifecycle: Some(LifecycleState::Normal),
        kruise_pod_ready,
    };
    let patch = finish_patch(pod, &finish, ts(9))
        .expect("rv")
        .expect("patch");
    (finish, patch)
}

#[test]
fn one_write_finishes_the_update() {
    let pod = completed_update();
    let (finish, patch) = finish_to_normal(&pod, true);
    let after = apply(&pod, &patch).expect("applies");
    let status = |t| status_of(&after, t).map(|c| c.status.as_str());
    assert_eq!(status(keys::CONDITION_IN_PLACE_UPDATE_READY), Some("True"));
    assert_eq!(status(keys::CONDITION_KRUISE_POD_READY), Some("True"));
    // Ready is the kubelet's to set.
    assert_eq!(status("Ready"), Some("False"));
    assert_eq!(
        crate::pods::label(&after, keys::LABEL_LIFECYCLE_STATE),
        Some("Normal")
    );
    assert_eq!(
        crate::pods::annotation(&after, keys::ANNOTATION_LIFECYCLE_TIMESTAMP),
        Some("2023-11-14T22:13:29Z")
    );
    // Only that changed.
    let mut back = after.clone();
    back.metadata.labels = pod.metadata.labels.clone();
    back.metadata.annotations = pod.metadata.annotations.clone();
    back.status = pod.status.clone();
    assert_eq!(back, pod);

    // Without a lifecycle move or a hook mark, the gate alone.
    let patch = finish_patch(&pod, &Finish::default(), ts(9))
        .expect("rv")
        .expect("patch");
    let after = apply(&pod, &patch).expect("applies");
    assert_eq!(
        crate::pods::label(&after, keys::LABEL_LIFECYCLE_STATE),
        Some("Updating")
    );
    assert_eq!(
        status_of(&after, keys::CONDITION_KRUISE_POD_READY).map(|c| c.status.as_str()),
        Some("False")
    );
    // Already True: nothing to write.
    assert_eq!(finish_patch(&after, &finish, ts(10)), Ok(None));
}

#[test]
fn the_finish_survives_the_kubelet_but_not_a_new_update() {
    let pod = completed_update();
    let (_, patch) = finish_to_normal(&pod, false);

    // The kubelet reports the restarted container ready meanwhile: a new resourceVersion, and
    // Ready turns True. The finish still applies.
    let mut kubelet = pod.clone();
    kubelet.metadata.resource_version = Some("3".into());
    if let Some(c) = kubelet
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.iter_mut().find(|c| c.type_ == "Ready"))
    {
        c.status = "True".into();
    }
    let after = apply(&kubelet, &patch).expect("the kubelet's write does not void it");
    assert_eq!(
        crate::pods::label(&after, keys::LABEL_LIFECYCLE_STATE),
        Some("Normal")
    );

    // A new update began meanwhile (its state annotation is rewritten): refused.
    let mut newer = kubelet.clone();
    newer
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(keys::ANNOTATION_IN_PLACE_UPDATE_STATE.into(), "{}".into());
    assert!(apply(&newer, &patch).is_err());

    // The lifecycle moved meanwhile (a hook's owner): refused.
    let mut moved = kubelet.clone();
    moved
        .metadata
        .labels
        .get_or_insert_default()
        .insert(keys::LABEL_LIFECYCLE_STATE.into(), "PreparingDelete".into());
    assert!(apply(&moved, &patch).is_err());

    // The conditions moved (the gate is no longer at the index read): refused, not misplaced.
    let mut reordered = kubelet.clone();
    if let Some(c) = reordered
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
    {
        c.reverse();
    }
    assert!(apply(&reordered, &patch).is_err());

    // The gate went True meanwhile (another worker finished it): refused, not rewritten.
    let mut done = kubelet.clone();
    if let Some(c) = done
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| {
            c.iter_mut()
                .find(|c| c.type_ == keys::CONDITION_IN_PLACE_UPDATE_READY)
        })
    {
        c.status = "True".into();
    }
    assert!(apply(&done, &patch).is_err());
}

#[test]
fn a_new_pod_is_finished_only_as_read() {
    // No state, no gate condition, no lifecycle label: nothing narrower to test than the
    // resourceVersion, so a change of any kind refuses the write.
    let (_, _, mut pod, _) = image_update();
    pod.status.as_mut().expect("status").conditions = None;
    let patch = finish_patch(&pod, &Finish::default(), ts(1))
        .expect("rv")
        .expect("patch");
    let mut changed = pod.clone();
    changed.metadata.resource_version = Some("9".into());
    assert!(apply(&changed, &patch).is_err());
    assert!(apply(&pod, &patch).is_ok());
}

// ---------------------------------------------------------------- state

#[test]
fn state_json_matches_upstream_names() {
    let text = r#"{"revision":"web-5d4f","updateTimestamp":"2024-01-02T03:04:05Z","lastContainerStatuses":{"main":{"imageID":"docker-pullable://app@sha256:1"}},"updateImages":true,"containerBatchesRecord":[{"timestamp":"2024-01-02T03:04:05Z","containers":["main"]}]}"#;
    let state: InPlaceUpdateState = serde_json::from_str(text).expect("parses");
    assert_eq!(state.to_annotation().expect("encodes"), text);

    // Go's nil maps and slices.
    let go_nil = r#"{"revision":"r","updateTimestamp":"2024-01-02T03:04:05Z","lastContainerStatuses":null,"nextContainerImages":null,"preCheckBeforeNext":{"containersRequiredReady":["a"]},"nextContainerResources":{"b":{"limits":{"cpu":"1"}}}}"#;
    let state: InPlaceUpdateState = serde_json::from_str(go_nil).expect("parses");
    assert!(state.last_container_statuses.is_empty());
    assert!(state.has_next_batches());
    let written: Value =
        serde_json::from_str(&state.to_annotation().expect("encodes")).expect("json");
    assert_eq!(written["lastContainerStatuses"], json!({}));
}

#[test]
fn state_records_only_changed_containers() {
    let old = template(vec![container("a", "x:1"), container("b", "y:1")], &[]);
    let new = template(vec![container("a", "x:2"), container("b", "y:1")], &[]);
    let pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &OFF));
    let now = ts(0)
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(700))
        .expect("time");
    let state = InPlaceUpdateState::new("rev", &p, &pod, now);
    assert_eq!(
        state.last_container_statuses.keys().collect::<Vec<_>>(),
        ["a"]
    );
    // Second precision, like metav1.Time.
    assert_eq!(state.update_timestamp, Time(ts(0)));
    assert_eq!(state.container_batches_record[0].containers, ["a"]);
    assert!(state.update_images && !state.update_resources && !state.update_env_from_metadata);
}

// ---------------------------------------------------------------- completion

fn updating_pod(status_image: &str, status_id: &str) -> Pod {
    let (_, new, pod, p) = image_update();
    let mut pod = pod;
    let state = InPlaceUpdateState::new("r", &p, &pod, ts(0));
    pod.spec = new.spec.clone();
    pod.metadata.annotations = Some(
        [(
            keys::ANNOTATION_IN_PLACE_UPDATE_STATE.to_string(),
            state.to_annotation().expect("encodes"),
        )]
        .into(),
    );
    let s = &mut pod
        .status
        .as_mut()
        .expect("status")
        .container_statuses
        .as_mut()
        .expect("cs")[0];
    s.image = status_image.into();
    s.image_id = status_id.into();
    pod
}

#[test]
fn completion_table() {
    use Completion::{Done, Waiting};
    let cases: Vec<(&str, Pod, Completion)> = vec![
        ("no state", pod_from(&image_update().0), Done),
        (
            "kubelet not there yet",
            updating_pod("app:v1", "id-of-app:v1"),
            Waiting(WaitReason::ImageNotUpdated("main".into())),
        ),
        ("new imageID", updating_pod("app:v2", "id-of-app:v2"), Done),
        (
            "same imageID, new tag reported",
            updating_pod("app:v2", "id-of-app:v1"),
            Done,
        ),
        (
            "grace annotation",
            {
                let mut p = updating_pod("app:v2", "id-of-app:v2");
                p.metadata
                    .annotations
                    .as_mut()
                    .expect("a")
                    .insert(keys::ANNOTATION_IN_PLACE_UPDATE_GRACE.into(), "{}".into());
                p
            },
            Waiting(WaitReason::GracePeriod),
        ),
        (
            "status missing",
            {
                let mut p = updating_pod("app:v2", "id-of-app:v2");
                p.status.as_mut().expect("s").container_statuses = None;
                p
            },
            Waiting(WaitReason::StatusMissing("main".into())),
        ),
        (
            "broken state",
            {
                let mut p = updating_pod("app:v2", "id-of-app:v2");
                p.metadata
                    .annotations
                    .as_mut()
                    .expect("a")
                    .insert(keys::ANNOTATION_IN_PLACE_UPDATE_STATE.into(), "{".into());
                p
            },
            Waiting(WaitReason::UnreadableState(
                "EOF while parsing an object at line 1 column 1".into(),
            )),
        ),
        (
            "env from metadata",
            {
                let mut p = updating_pod("app:v2", "id-of-app:v2");
                p.metadata.annotations.as_mut().expect("a").insert(keys::ANNOTATION_IN_PLACE_UPDATE_STATE.into(),
                r#"{"revision":"r","updateTimestamp":"2024-01-02T03:04:05Z","lastContainerStatuses":{},"updateEnvFromMetadata":true}"#.into());
                p
            },
            Waiting(WaitReason::EnvFromMetadata(
                "runtime-containers-meta not reported yet".into(),
            )),
        ),
    ];
    for (name, pod, want) in cases {
        assert_eq!(check_completed(&pod), want, "{name}");
    }
}

#[test]
fn completion_of_a_resize() {
    let mut old = template(vec![container("main", "a")], &[]);
    old.spec.as_mut().expect("spec").containers[0].resources = Some(res("1", "1Gi"));
    let mut new = old.clone();
    new.spec.as_mut().expect("spec").containers[0].resources = Some(res("2", "1Gi"));
    let mut pod = pod_from(&old);
    let p = in_place(plan(&old, &new, &pod, &ON));
    let state = InPlaceUpdateState::new("r", &p, &pod, ts(0));
    pod.spec = new.spec.clone();
    pod.metadata.annotations = Some(
        [(
            keys::ANNOTATION_IN_PLACE_UPDATE_STATE.to_string(),
            state.to_annotation().expect("encodes"),
        )]
        .into(),
    );
    let set_status = |pod: &mut Pod, r: Option<ResourceRequirements>| {
        pod.status
            .as_mut()
            .expect("s")
            .container_statuses
            .as_mut()
            .expect("cs")[0]
            .resources = r;
    };
    set_status(&mut pod, None);
    assert_eq!(
        check_completed(&pod),
        Completion::Waiting(WaitReason::ResourcesNotApplied("main".into()))
    );
    set_status(&mut pod, Some(res("1", "1Gi")));
    assert_eq!(
        check_completed(&pod),
        Completion::Waiting(WaitReason::ResourcesNotApplied("main".into()))
    );
    set_status(&mut pod, Some(res("2000m", "1024Mi")));
    assert_eq!(check_completed(&pod), Completion::Done);
}

#[test]
fn default_tags() {
    for (image, want) in [
        ("nginx", "nginx:latest"),
        ("nginx:1.25", "nginx:1.25"),
        ("host:5000/app", "host:5000/app:latest"),
        ("host:5000/app:v1", "host:5000/app:v1"),
        ("app@sha256:abc", "app@sha256:abc"),
    ] {
        assert_eq!(with_default_tag(image), want, "{image}");
    }
}

// ---------------------------------------------------------------- properties

fn image_strategy() -> impl Strategy<Value = String> {
    "[a-z]{1,5}(:[a-z0-9]{1,3})?"
}

proptest! {
    #[test]
    fn same_template_plans_nothing(images in proptest::collection::vec(image_strategy(), 1..4), label in "[a-z]{0,4}") {
        let containers = images.iter().enumerate().map(|(i, im)| container(&format!("c{i}"), im)).collect();
        let t = template(containers, &[("l", label.as_str())]);
        let p = in_place(plan(&t, &t, &pod_from(&t), &ON));
        prop_assert!(p.is_empty());
        prop_assert!(!p.restarts_containers);
    }

    #[test]
    fn image_changes_plan_exactly_the_changed_containers(
        pairs in proptest::collection::vec((image_strategy(), image_strategy()), 1..4),
    ) {
        let old = template(pairs.iter().enumerate().map(|(i, (a, _))| container(&format!("c{i}"), a)).collect(), &[]);
        let new = template(pairs.iter().enumerate().map(|(i, (_, b))| container(&format!("c{i}"), b)).collect(), &[]);
        let p = in_place(plan(&old, &new, &pod_from(&old), &OFF));
        let want: BTreeMap<String, String> = pairs.iter().enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (_, b))| (format!("c{i}"), b.clone()))
            .collect();
        prop_assert_eq!(p.restarts_containers, !want.is_empty());
        prop_assert_eq!(p.images, want);
    }

    /// Whatever the plan, the Apply patch brings the Pod to the new template's images and labels,
    /// and is rejected by a Pod at any other resourceVersion.
    #[test]
    fn apply_reaches_the_new_template_and_is_guarded(
        pairs in proptest::collection::vec((image_strategy(), image_strategy()), 1..4),
        old_labels in proptest::collection::btree_map("[a-z/~]{1,4}", "[a-z]{0,3}", 0..4),
        new_labels in proptest::collection::btree_map("[a-z/~]{1,4}", "[a-z]{0,3}", 0..4),
        other_rv in "[0-9]{1,3}",
    ) {
        fn labels(m: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
            m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
        }
        let old = template(pairs.iter().enumerate().map(|(i, (a, _))| container(&format!("c{i}"), a)).collect(), &labels(&old_labels));
        let new = template(pairs.iter().enumerate().map(|(i, (_, b))| container(&format!("c{i}"), b)).collect(), &labels(&new_labels));
        let mut pod = pod_from(&old);
        pod.spec.as_mut().expect("spec").readiness_gates = None;
        let p = in_place(plan(&old, &new, &pod, &OFF));
        let no_labels = BTreeMap::new();
        let target = Target { revision: "r", revision_labels: &no_labels };
        let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 0, ts(0)) else {
            return Err(TestCaseError::fail("expected Apply"));
        };
        let after = apply(&pod, &patch).map_err(TestCaseError::fail)?;
        let images: Vec<Option<String>> = after.spec.expect("spec").containers.into_iter().map(|c| c.image).collect();
        let want: Vec<Option<String>> = pairs.iter().map(|(_, b)| Some(b.clone())).collect();
        prop_assert_eq!(images, want);
        prop_assert_eq!(after.metadata.labels.unwrap_or_default(), new_labels);
        if other_rv != "100" {
            let mut stale = pod.clone();
            stale.metadata.resource_version = Some(other_rv);
            prop_assert!(apply(&stale, &patch).is_err());
        }
    }

    /// A state the engine writes reads back unchanged.
    #[test]
    fn state_round_trips(pairs in proptest::collection::vec((image_strategy(), image_strategy()), 1..4), secs in 0i64..1_000_000) {
        let old = template(pairs.iter().enumerate().map(|(i, (a, _))| container(&format!("c{i}"), a)).collect(), &[]);
        let new = template(pairs.iter().enumerate().map(|(i, (_, b))| container(&format!("c{i}"), b)).collect(), &[]);
        let pod = pod_from(&old);
        let p = in_place(plan(&old, &new, &pod, &OFF));
        let state = InPlaceUpdateState::new("r", &p, &pod, ts(secs));
        let back: InPlaceUpdateState = serde_json::from_str(&state.to_annotation().expect("encodes")).expect("parses");
        prop_assert_eq!(back, state);
    }

    /// The drain is never skipped: for a restarting update on a Pod with the gate, every step before
    /// the gate has been False for the grace period (and the Pod is not Ready) is MarkUnready or Wait.
    #[test]
    fn no_restart_before_drain_and_grace(
        gate in proptest::option::of((prop_oneof!["True", "False", "Unknown"], 0i64..100)),
        ready in prop_oneof!["True", "False"],
        grace in 0i32..60,
        now in 0i64..200,
    ) {
        let (_, _, mut pod, p) = image_update();
        let mut conditions = vec![cond("Ready", &ready, 0)];
        if let Some((status, since)) = &gate {
            conditions.push(cond(keys::CONDITION_IN_PLACE_UPDATE_READY, status, *since));
        }
        pod.status.as_mut().expect("status").conditions = Some(conditions);
        let labels = BTreeMap::new();
        let target = Target { revision: "r", revision_labels: &labels };
        let step = next_step(&pod, &p, &target, grace, ts(now)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let drained = matches!(&gate, Some((s, since)) if s == "False" && now - since >= i64::from(grace)) && ready == "False";
        prop_assert_eq!(matches!(step, Step::Apply(_) | Step::Resize(_)), drained);
    }
}

// ---------------------------------------------------------------- container launch priority

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

#[test]
fn container_priorities_from_annotation_env_and_barrier() {
    let mut with_env = container("proxy", "p:1");
    with_env.env = Some(vec![env(ENV_CONTAINER_PRIORITY, "10")]);
    let mut with_barrier = container("app", "a:1");
    with_barrier.env = Some(vec![EnvVar {
        name: ENV_CONTAINER_BARRIER.into(),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(k8s_openapi::api::core::v1::ConfigMapKeySelector {
                name: "web-0-barrier".into(),
                key: "p_-5".into(),
                ..Default::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }]);
    let t = template(vec![with_env, with_barrier, container("log", "l:1")], &[]);
    let mut pod = pod_from(&t);
    let got = container_priorities(&pod);
    // `log` declares none: 0, as OpenKruise's webhook gives it once the declared values differ.
    assert_eq!(
        got,
        BTreeMap::from([("proxy".into(), 10), ("app".into(), -5), ("log".into(), 0)])
    );
    // One container, or equal values: no priorities (the webhook injects nothing).
    let t = template(vec![container("a", "a:1"), container("b", "b:1")], &[]);
    assert!(container_priorities(&pod_from(&t)).is_empty());
    // Ordered: earlier containers first; an env priority still wins.
    pod.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_CONTAINER_LAUNCH_PRIORITY.to_string(),
        "Ordered".to_string(),
    )]));
    let got = container_priorities(&pod);
    assert_eq!(
        got,
        BTreeMap::from([("proxy".into(), 10), ("app".into(), -5), ("log".into(), -2)])
    );
}

#[test]
fn first_batch_table() {
    let set = |names: &[&str]| {
        names
            .iter()
            .map(|n| n.to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let priorities = BTreeMap::from([
        ("a".to_string(), 10),
        ("b".to_string(), 5),
        ("c".to_string(), 10),
    ]);
    // (changing, now, later)
    let cases: [(&[&str], &[&str], &[&str]); 5] = [
        (&["a", "b"], &["a"], &["b"]),
        (&["a", "b", "c"], &["a", "c"], &["b"]),
        // Containers without a priority go in the first batch.
        (&["b", "x"], &["b", "x"], &[]),
        (&["x", "y"], &["x", "y"], &[]),
        (&["b"], &["b"], &[]),
    ];
    for (changing, now, later) in cases {
        assert_eq!(
            first_batch(&set(changing), &priorities),
            (set(now), set(later)),
            "{changing:?}"
        );
    }
}

/// Two containers updated in place with priorities: the higher one first; the lower one only once
/// the first runs its new image and is Ready; the update completes after both.
#[test]
fn update_in_batches_by_priority() {
    let with_priority = |name: &str, image: &str, p: &str| {
        let mut c = container(name, image);
        c.env = Some(vec![env(ENV_CONTAINER_PRIORITY, p)]);
        c
    };
    let old = template(
        vec![
            with_priority("proxy", "p:1", "10"),
            with_priority("app", "a:1", "1"),
        ],
        &[],
    );
    let new = template(
        vec![
            with_priority("proxy", "p:2", "10"),
            with_priority("app", "a:2", "1"),
        ],
        &[],
    );
    let mut pod = pod_from(&old);
    pod.spec.as_mut().expect("spec").readiness_gates = None;
    let p = in_place(plan(&old, &new, &pod, &OFF));
    let labels = BTreeMap::new();
    let target = Target {
        revision: "web-2",
        revision_labels: &labels,
    };
    let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 0, ts(0)) else {
        panic!("expected apply");
    };
    let mut after = apply(&pod, &patch).expect("applies");
    let image_of = |pod: &Pod, name: &str| {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name))
            .and_then(|c| c.image.clone())
    };
    assert_eq!(image_of(&after, "proxy").as_deref(), Some("p:2"));
    assert_eq!(image_of(&after, "app").as_deref(), Some("a:1"));
    let state = read_state(&after).expect("state").expect("parses");
    assert_eq!(
        state.next_container_images.get("app").map(String::as_str),
        Some("a:2")
    );
    assert_eq!(
        state
            .pre_check_before_next
            .map(|p| p.containers_required_ready),
        Some(vec!["proxy".to_string()])
    );
    assert!(!state.last_container_statuses.contains_key("app"));
    assert_eq!(
        check_completed(&after),
        Completion::Waiting(WaitReason::NextBatches)
    );
    // The proxy has not restarted yet: the next batch waits.
    assert!(!next_batch_due(&after));
    assert_eq!(next_batch_patch(&after, ts(5)), Ok(None));
    // The kubelet restarts the proxy on p:2, not Ready yet: still waiting.
    let set_status = |pod: &mut Pod, name: &str, image: &str, ready: bool| {
        for s in pod
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .expect("statuses")
            .iter_mut()
            .filter(|s| s.name == name)
        {
            s.image = image.into();
            s.image_id = format!("id-of-{image}");
            s.ready = ready;
        }
    };
    set_status(&mut after, "proxy", "p:2", false);
    assert!(!next_batch_due(&after));
    set_status(&mut after, "proxy", "p:2", true);
    assert!(next_batch_due(&after));
    let patch = next_batch_patch(&after, ts(10))
        .expect("encodes")
        .expect("the next batch is due");
    let mut last = apply(&after, &patch).expect("applies");
    assert_eq!(image_of(&last, "app").as_deref(), Some("a:2"));
    let state = read_state(&last).expect("state").expect("parses");
    assert!(state.next_container_images.is_empty() && state.pre_check_before_next.is_none());
    assert_eq!(state.container_batches_record.len(), 2);
    assert_eq!(state.container_batches_record[1].containers, ["app"]);
    assert_eq!(
        state
            .last_container_statuses
            .get("app")
            .map(|s| s.image_id.as_str()),
        Some("id-of-a:1")
    );
    // Not complete until the app runs a:2.
    assert_eq!(
        check_completed(&last),
        Completion::Waiting(WaitReason::ImageNotUpdated("app".into()))
    );
    set_status(&mut last, "app", "a:2", true);
    assert_eq!(check_completed(&last), Completion::Done);
}
