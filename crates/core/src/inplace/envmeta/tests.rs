use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodCondition,
    PodReadinessGate, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;

use super::*;
use crate::inplace::{
    Completion, Plan, PlanOptions, Step, Target, WaitReason, check_completed, next_batch_patch,
    next_step, plan, read_state,
};

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn value_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn container(name: &str, image: &str, env: Vec<EnvVar>) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        env: (!env.is_empty()).then_some(env),
        ..Container::default()
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Hashes computed by upstream's `hashEnvs` (Go, go-spew d8f796af33cc) for the same envs.
#[test]
fn hash_matches_upstream() {
    let c = |env| container("c", "i", env);
    let cases: Vec<(&str, Container, BTreeMap<String, String>, u64)> = vec![
        (
            "no env from metadata",
            c(vec![value_env("A", "x")]),
            map(&[]),
            86_995_377,
        ),
        (
            "one label",
            c(vec![field_env("e2", "metadata.labels['l1']")]),
            map(&[("l1", "foo")]),
            2_053_173_458,
        ),
        (
            "sorted by name, empty value left out",
            c(vec![
                field_env("B", "metadata.labels['missing']"),
                field_env("A", "metadata.labels['l1']"),
            ]),
            map(&[("l1", "x")]),
            297_544_401,
        ),
        (
            "Go's HTML escaping",
            c(vec![field_env("TEST_ENV", "metadata.labels['v']")]),
            map(&[("v", "a<b&c\u{e9}")]),
            1_453_288_826,
        ),
    ];
    for (name, c, labels, want) in cases {
        assert_eq!(expected_hash(&c, Some(&labels), None), want, "{name}");
    }
}

/// Upstream's `TestEnvFromMetadataHasher`: the hash of the spec with the Pod's metadata against the
/// hash of what a running container has.
#[test]
fn expected_and_current_hashes() {
    let labels = map(&[("l1", "foo"), ("l2", "bar")]);
    let base = vec![
        value_env("e1", "a"),
        field_env("e2", "metadata.labels['l1']"),
    ];
    let cases = [
        (
            "running with another value",
            base.clone(),
            map(&[("e2", "bar")]),
            false,
        ),
        (
            "same value, other order and literal envs",
            vec![
                field_env("e2", "metadata.labels['l1']"),
                value_env("e1", "a"),
                value_env("e3", "c"),
            ],
            map(&[("e2", "foo"), ("e1", "zzz")]),
            true,
        ),
        (
            "SIDECARSET_VERSION does not count",
            vec![
                field_env("e2", "metadata.labels['l1']"),
                field_env("SIDECARSET_VERSION", "metadata.annotations['v']"),
            ],
            map(&[("e2", "foo"), ("SIDECARSET_VERSION", "9")]),
            true,
        ),
    ];
    for (name, env, running, equal) in cases {
        let expected = expected_hash(&container("c", "i", base.clone()), Some(&labels), None);
        let current = current_hash(&container("c", "i", env), &running);
        assert_eq!(expected == current, equal, "{name}");
    }
}

#[test]
fn paths_and_readers() {
    assert_eq!(
        split_subscripted("metadata.labels['a.b/c']"),
        Some(("metadata.labels", "a.b/c"))
    );
    for bad in [
        "metadata.name",
        "metadata.labels",
        "['x']",
        "metadata.labels[\"x\"]",
    ] {
        assert_eq!(split_subscripted(bad), None, "{bad}");
    }
    let c = container(
        "c",
        "i",
        vec![
            field_env("A", "metadata.labels['app']"),
            field_env("B", "metadata.annotations['note']"),
            field_env("N", "metadata.name"),
            EnvVar {
                value: Some("literal wins".into()),
                ..field_env("L", "metadata.labels['lit']")
            },
        ],
    );
    let cases = [
        (FIELD_LABELS, "app", true),
        (FIELD_ANNOTATIONS, "note", true),
        (FIELD_ANNOTATIONS, "app", false),
        (FIELD_LABELS, "lit", false),
        (FIELD_LABELS, "other", false),
    ];
    for (field, key, want) in cases {
        assert_eq!(reads_metadata(&c, field, key), want, "{field} {key}");
    }
    assert!(has_metadata_env(&c));
    assert!(!has_metadata_env(&container(
        "x",
        "i",
        vec![value_env("A", "a")]
    )));
    assert_eq!(
        parse_env("PATH=/bin\nTEST_ENV=a=b\n\nHOME=/root\n"),
        map(&[("PATH", "/bin"), ("TEST_ENV", "a=b"), ("HOME", "/root")])
    );
}

fn app() -> Container {
    container(
        "app",
        "app:v1",
        vec![field_env("TEST_ENV", "metadata.labels['test-env']")],
    )
}

fn sidecar() -> Container {
    container("sidecar", "side:v1", vec![])
}

fn template(containers: Vec<Container>, labels: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(map(labels)),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers,
            ..PodSpec::default()
        }),
    }
}

fn condition(type_: &str, status: &str) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: status.into(),
        ..PodCondition::default()
    }
}

/// A running CloneSet Pod of `t` on containerd, container IDs `containerd://<name>-1`.
fn pod_of(t: &PodTemplateSpec) -> Pod {
    let mut spec = t.spec.clone().unwrap_or_default();
    spec.readiness_gates = Some(vec![PodReadinessGate {
        condition_type: keys::CONDITION_IN_PLACE_UPDATE_READY.into(),
    }]);
    let statuses = spec
        .containers
        .iter()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: format!("id-of-{}", c.image.clone().unwrap_or_default()),
            container_id: Some(format!("containerd://{}-1", c.name)),
            ready: true,
            ..ContainerStatus::default()
        })
        .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            resource_version: Some("100".into()),
            labels: t.metadata.as_ref().and_then(|m| m.labels.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps.kruise.io/v1alpha1".into(),
                kind: "CloneSet".into(),
                name: "web".into(),
                uid: "u".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: Some(PodStatus {
            conditions: Some(vec![
                condition(keys::CONDITION_IN_PLACE_UPDATE_READY, "True"),
                condition("Ready", "True"),
            ]),
            container_statuses: Some(statuses),
            ..PodStatus::default()
        }),
    }
}

const GATE_ON: PlanOptions = PlanOptions {
    resize: true,
    env_from_metadata: true,
};
const GATE_OFF: PlanOptions = PlanOptions {
    resize: true,
    env_from_metadata: false,
};

#[test]
fn plan_moves_read_keys_to_their_containers() {
    let old = template(
        vec![app(), sidecar()],
        &[("app", "web"), ("test-env", "foo")],
    );
    let changed = template(
        vec![app(), sidecar()],
        &[("app", "web"), ("test-env", "bar")],
    );
    let removed = template(vec![app(), sidecar()], &[("app", "web")]);
    let unread = template(
        vec![app(), sidecar()],
        &[("app", "web"), ("test-env", "foo"), ("other", "x")],
    );
    let pod = pod_of(&old);

    let Plan::InPlace(p) = plan(&old, &changed, &pod, &GATE_ON) else {
        panic!("in place with the gate");
    };
    assert_eq!(p.env_from_metadata.keys().collect::<Vec<_>>(), ["app"]);
    assert_eq!(
        p.env_from_metadata["app"].labels,
        Some(map(&[("test-env", "bar")]))
    );
    assert!(p.labels.is_empty(), "the key goes with its container");
    assert!(p.restarts_containers);

    let Plan::InPlace(p) = plan(&old, &unread, &pod, &GATE_ON) else {
        panic!("an unread label is plain metadata");
    };
    assert!(p.env_from_metadata.is_empty());
    assert!(!p.restarts_containers);

    // A removed key is removed from the Pod in place; nothing restarts (as upstream).
    let Plan::InPlace(p) = plan(&old, &removed, &pod, &GATE_ON) else {
        panic!("a removed key stays in place with the gate");
    };
    assert!(p.env_from_metadata.is_empty());
    assert_eq!(p.labels, [("test-env".to_string(), None)].into());
    assert!(!p.restarts_containers);

    for (name, new) in [("gate off", &changed), ("gate off, removed key", &removed)] {
        assert_eq!(
            plan(&old, new, &pod, &GATE_OFF),
            Plan::NotInPlace(crate::inplace::NotInPlace::EnvFromMetadata {
                container: "app".into(),
                key: "metadata.labels['test-env']".into(),
            }),
            "{name}"
        );
    }
}

fn revision_labels() -> BTreeMap<String, String> {
    map(&[("controller-revision-hash", "web-2")])
}

fn apply(pod: &Pod, patch: &json_patch::Patch) -> Pod {
    let mut doc = serde_json::to_value(pod).expect("encode");
    json_patch::patch(&mut doc, patch).expect("patch applies");
    serde_json::from_value(doc).expect("decode")
}

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).expect("time")
}

/// The Pod after the in-place update of the label to `bar`: drained, then patched.
fn updated_pod() -> Pod {
    let old = template(
        vec![app(), sidecar()],
        &[("app", "web"), ("test-env", "foo")],
    );
    let new = template(
        vec![app(), sidecar()],
        &[("app", "web"), ("test-env", "bar")],
    );
    let mut pod = pod_of(&old);
    let Plan::InPlace(p) = plan(&old, &new, &pod, &GATE_ON) else {
        panic!("in place");
    };
    let labels = revision_labels();
    let target = Target {
        revision: "web-2",
        revision_labels: &labels,
    };
    let Ok(Step::MarkUnready(drain)) = next_step(&pod, &p, &target, 0, ts(0)) else {
        panic!("a restart drains first");
    };
    pod = apply(&pod, &drain);
    if let Some(s) = pod.status.as_mut() {
        for c in s.conditions.iter_mut().flatten() {
            if c.type_ == "Ready" {
                c.status = "False".into();
            }
        }
    }
    let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 0, ts(1)) else {
        panic!("then applies");
    };
    apply(&pod, &patch)
}

fn report(pod: &Pod, hashes: &[(&str, &str, u64)]) -> Pod {
    let set = RuntimeContainerMetaSet {
        containers: hashes
            .iter()
            .map(|(name, id, hash)| RuntimeContainerMeta {
                name: (*name).into(),
                container_id: (*id).into(),
                restart_count: 0,
                hashes: RuntimeContainerHashes {
                    plain_hash: 7,
                    extracted_env_from_metadata_hash: *hash,
                },
            })
            .collect(),
    };
    let mut pod = pod.clone();
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            keys::ANNOTATION_RUNTIME_CONTAINERS_META.into(),
            set.to_annotation().expect("encode"),
        );
    pod
}

fn set_container_id(pod: &mut Pod, name: &str, id: &str) {
    for s in pod
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .into_iter()
        .flatten()
    {
        if s.name == name {
            s.container_id = Some(id.into());
        }
    }
}

#[test]
fn the_update_records_what_the_daemon_must_show() {
    let pod = updated_pod();
    assert_eq!(
        pod.metadata.labels.as_ref().and_then(|l| l.get("test-env")),
        Some(&"bar".to_owned())
    );
    let state = read_state(&pod).expect("state").expect("valid");
    assert!(state.update_env_from_metadata);
    assert!(state.last_container_statuses.is_empty());
    assert_eq!(state.container_batches_record[0].containers, ["app"]);

    let foo = expected_hash(&app(), Some(&map(&[("test-env", "foo")])), None);
    let bar = expected_hash(&app(), Some(&map(&[("test-env", "bar")])), None);
    let plain = expected_hash(&sidecar(), None, None);
    let mut restarted = report(
        &pod,
        &[
            ("app", "containerd://app-2", bar),
            ("sidecar", "containerd://sidecar-1", plain),
        ],
    );
    set_container_id(&mut restarted, "app", "containerd://app-2");
    let waiting = |why: &str| Completion::Waiting(WaitReason::EnvFromMetadata(why.into()));
    let cases = [
        (
            "no report",
            pod.clone(),
            waiting("runtime-containers-meta not reported yet"),
        ),
        (
            "old process",
            report(
                &pod,
                &[
                    ("app", "containerd://app-1", foo),
                    ("sidecar", "containerd://sidecar-1", plain),
                ],
            ),
            waiting("container app runs with old env from metadata"),
        ),
        (
            "new process, status not yet",
            report(
                &pod,
                &[
                    ("app", "containerd://app-2", bar),
                    ("sidecar", "containerd://sidecar-1", plain),
                ],
            ),
            waiting("container app reported for another container ID"),
        ),
        (
            "sidecar not reported",
            report(&pod, &[("app", "containerd://app-1", bar)]),
            waiting("container sidecar not reported"),
        ),
        ("restarted with the new value", restarted, Completion::Done),
    ];
    for (name, pod, want) in cases {
        assert_eq!(check_completed(&pod), want, "{name}");
    }
}

#[test]
fn the_daemon_restarts_only_mismatched_containers_while_updating() {
    let pod = updated_pod();
    let foo = expected_hash(&app(), Some(&map(&[("test-env", "foo")])), None);
    let plain = expected_hash(&sidecar(), None, None);
    let reported = report(
        &pod,
        &[
            ("app", "containerd://app-1", foo),
            ("sidecar", "containerd://sidecar-1", plain),
        ],
    );
    let set = read_meta_set(&reported).expect("set").expect("valid");
    assert_eq!(
        containers_to_restart(&reported, &set),
        ["containerd://app-1"]
    );

    let mut done = reported.clone();
    for c in done
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .into_iter()
        .flatten()
    {
        c.status = "True".into();
    }
    assert!(
        containers_to_restart(&done, &set).is_empty(),
        "not updating"
    );

    let unhashed = report(
        &pod,
        &[
            ("app", "containerd://app-1", 0),
            ("sidecar", "containerd://sidecar-1", plain),
        ],
    );
    let set = read_meta_set(&unhashed).expect("set").expect("valid");
    assert!(
        containers_to_restart(&unhashed, &set).is_empty(),
        "hash not taken yet"
    );
}

#[test]
fn the_report_keeps_hashes_of_the_same_process() {
    let pod = pod_of(&template(vec![app(), sidecar()], &[("test-env", "foo")]));
    let runtime = |id: &str, running| RuntimeContainer {
        name: "app".into(),
        id: id.into(),
        restart_count: 1,
        plain_hash: 0xabc,
        running,
    };
    let side = RuntimeContainer {
        name: "sidecar".into(),
        id: "containerd://sidecar-1".into(),
        restart_count: 0,
        plain_hash: 0xdef,
        running: true,
    };
    let old = RuntimeContainerMetaSet {
        containers: vec![RuntimeContainerMeta {
            name: "app".into(),
            container_id: "containerd://app-1".into(),
            restart_count: 0,
            hashes: RuntimeContainerHashes {
                plain_hash: 0xabc,
                extracted_env_from_metadata_hash: 42,
            },
        }],
    };
    // Same process: its hash is kept; the sidecar is new and gets hashed.
    let (set, to_hash) = next_meta_set(
        &pod,
        &[runtime("containerd://app-1", true), side.clone()],
        Some(&old),
        true,
    );
    assert_eq!(set.containers[0], old.containers[0]);
    assert_eq!(set.containers[1].container_id, "containerd://sidecar-1");
    assert_eq!(set.containers[1].hashes.plain_hash, 0xdef);
    assert_eq!(to_hash, ["sidecar"]);
    // A new process: a new entry to hash; an exited one is not exec'd into; without the gate, nothing.
    let (set, to_hash) = next_meta_set(
        &pod,
        &[runtime("containerd://app-2", true)],
        Some(&old),
        true,
    );
    assert_eq!(set.containers.len(), 1);
    assert_eq!(set.containers[0].restart_count, 1);
    assert_eq!(to_hash, ["app"]);
    let (_, to_hash) = next_meta_set(
        &pod,
        &[runtime("containerd://app-2", false)],
        Some(&old),
        true,
    );
    assert!(to_hash.is_empty());
    let (_, to_hash) = next_meta_set(&pod, &[runtime("containerd://app-2", true)], None, false);
    assert!(to_hash.is_empty());
    // The annotation has upstream's JSON shape.
    assert_eq!(
        old.to_annotation().expect("encode"),
        r#"{"containers":[{"name":"app","containerID":"containerd://app-1","restartCount":0,"hashes":{"plainHash":2748,"extractedEnvFromMetadataHash":42}}]}"#
    );
}

#[test]
fn which_pod_events_the_daemon_reports() {
    let t = template(vec![app(), sidecar()], &[("test-env", "foo")]);
    let pod = pod_of(&t);
    let foo = expected_hash(&app(), Some(&map(&[("test-env", "foo")])), None);
    let plain = expected_hash(&sidecar(), None, None);
    let reported = report(
        &pod,
        &[
            ("app", "containerd://app-1", foo),
            ("sidecar", "containerd://sidecar-1", plain),
        ],
    );
    let mut relabeled = reported.clone();
    relabeled
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("test-env".into(), "bar".into());
    let mut restarted = reported.clone();
    set_container_id(&mut restarted, "app", "containerd://app-2");
    let mut foreign = pod.clone();
    foreign.metadata.owner_references = None;
    let mut starting = pod.clone();
    for s in starting
        .status
        .as_mut()
        .and_then(|s| s.container_statuses.as_mut())
        .into_iter()
        .flatten()
    {
        s.container_id = None;
    }
    let cases: [(&str, Option<&Pod>, &Pod, bool); 6] = [
        ("not reported yet", None, &pod, true),
        ("reported and unchanged", Some(&reported), &reported, false),
        (
            "label read by env changed",
            Some(&reported),
            &relabeled,
            true,
        ),
        ("container restarted", Some(&reported), &restarted, true),
        ("not a Kruise Pod", None, &foreign, false),
        ("no container started", None, &starting, false),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(needs_report(old, new, true), want, "{name}");
    }
    assert!(
        !needs_report(Some(&reported), &relabeled, false),
        "gate off"
    );
}

/// Upstream's "in-place update two container image and env from metadata with priorities": the
/// higher-priority container that reads the annotation goes first, the image of the other after it.
#[test]
fn env_from_metadata_follows_container_priorities() {
    let redis = container(
        "redis",
        "redis:v1",
        vec![
            value_env("KRUISE_CONTAINER_PRIORITY", "10"),
            field_env("CONFIG", "metadata.annotations['config']"),
        ],
    );
    // The Pod webhook gives every container a priority once one has one (0 by default).
    let nginx = |image: &str| {
        container(
            "nginx",
            image,
            vec![value_env("KRUISE_CONTAINER_PRIORITY", "0")],
        )
    };
    let annotated = |value: &str, image: &str| {
        let mut t = template(vec![nginx(image), redis.clone()], &[]);
        if let Some(m) = t.metadata.as_mut() {
            m.annotations = Some(map(&[("config", value)]));
        }
        t
    };
    let old = annotated("foo", "nginx:v1");
    let new = annotated("bar", "nginx:v2");
    let mut pod = pod_of(&old);
    pod.metadata.annotations = Some(map(&[("config", "foo")]));
    let Plan::InPlace(p) = plan(&old, &new, &pod, &GATE_ON) else {
        panic!("in place");
    };
    let labels = revision_labels();
    let target = Target {
        revision: "web-2",
        revision_labels: &labels,
    };
    // No readiness-gate drain wait: condition already False and not Ready.
    if let Some(s) = pod.status.as_mut() {
        s.conditions = Some(vec![
            condition(keys::CONDITION_IN_PLACE_UPDATE_READY, "False"),
            condition("Ready", "False"),
        ]);
        for c in s.conditions.iter_mut().flatten() {
            c.last_transition_time =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(0)));
        }
    }
    let Ok(Step::Apply(patch)) = next_step(&pod, &p, &target, 0, ts(10)) else {
        panic!("applies");
    };
    let pod = apply(&pod, &patch);
    let annotation = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("config"))
            .cloned()
    };
    assert_eq!(annotation(&pod), Some("bar".into()), "redis goes first");
    let image = |p: &Pod| p.spec.as_ref().map(|s| s.containers[0].image.clone());
    assert_eq!(image(&pod), Some(Some("nginx:v1".into())), "nginx waits");
    let state = read_state(&pod).expect("state").expect("valid");
    assert_eq!(state.container_batches_record[0].containers, ["redis"]);
    assert_eq!(state.next_container_images, map(&[("nginx", "nginx:v2")]));
    assert!(state.update_env_from_metadata);

    // The daemon restarts redis with the new value; then the next batch updates nginx.
    assert_eq!(
        next_batch_patch(&pod, ts(20)),
        Ok(None),
        "redis not restarted yet"
    );
    let bar = expected_hash_in(&redis, &pod);
    let plain = expected_hash(&nginx("nginx:v1"), None, None);
    let mut restarted = report(
        &pod,
        &[
            ("nginx", "containerd://nginx-1", plain),
            ("redis", "containerd://redis-2", bar),
        ],
    );
    set_container_id(&mut restarted, "redis", "containerd://redis-2");
    let Ok(Some(next)) = next_batch_patch(&restarted, ts(20)) else {
        panic!("the next batch goes");
    };
    let pod = apply(&restarted, &next);
    assert_eq!(image(&pod), Some(Some("nginx:v2".into())));
    let state = read_state(&pod).expect("state").expect("valid");
    let batches: Vec<&Vec<String>> = state
        .container_batches_record
        .iter()
        .map(|b| &b.containers)
        .collect();
    assert_eq!(
        batches,
        [&vec!["redis".to_owned()], &vec!["nginx".to_owned()]]
    );
    assert!(!state.has_next_batches());
}
