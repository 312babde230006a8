use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::KindApi;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::sidecarset::{
    self, ANNOTATION_INJECTED_LIST, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

// ---- fixtures --------------------------------------------------------------------------------------------

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid timestamp")
}

const NOW: &str = "2027-01-15T08:00:00Z";

/// A SidecarSet as the API hands it out: defaulted, with both hash annotations.
fn set(value: Value) -> SidecarSet {
    let mut object: SidecarSet = serde_json::from_value(value).expect("sidecarset");
    <sidecarset::Api as KindApi>::default(&mut object);
    object
}

/// A SidecarSet `name` selecting `app=web`, with `spec` merged in.
fn set_with(name: &str, spec: Value) -> SidecarSet {
    let mut value = json!({
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
    });
    if let (Some(target), Value::Object(extra)) = (value["spec"].as_object_mut(), spec) {
        target.extend(extra);
    }
    set(value)
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).expect("pod")
}

/// A Pod labelled `app=web` in namespace `ns` with one app container `main` (env TZ, mount /data).
fn web_pod() -> Pod {
    pod(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {
            "containers": [{
                "name": "main", "image": "main:1",
                "env": [{"name": "TZ", "value": "Asia/Shanghai"}, {"name": "LANG", "value": "C"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }))
}

struct Run {
    revisions: BTreeMap<String, RevisionTemplate>,
    draw: f64,
    sort: bool,
}

impl Default for Run {
    fn default() -> Self {
        Self {
            revisions: BTreeMap::new(),
            draw: 0.5,
            sort: false,
        }
    }
}

impl Run {
    fn inject(&self, pod: &Pod, sets: &[SidecarSet]) -> Result<Injection, InjectError> {
        let draw = self.draw;
        let random = move || draw;
        let ctx = InjectContext {
            now: now(),
            revisions: &self.revisions,
            random: &random,
            sort_sidecars_by_name: self.sort,
        };
        let refs: Vec<&SidecarSet> = sets.iter().collect();
        inject(pod, &refs, &ctx)
    }
}

fn run(pod: &Pod, sets: &[SidecarSet]) -> Injection {
    Run::default().inject(pod, sets).expect("injection")
}

fn spec(pod: &Pod) -> &k8s_openapi::api::core::v1::PodSpec {
    pod.spec.as_ref().expect("spec")
}

fn names(containers: &[Container]) -> Vec<&str> {
    containers.iter().map(|c| c.name.as_str()).collect()
}

fn container_names(pod: &Pod) -> Vec<&str> {
    names(&spec(pod).containers)
}

fn init_names(pod: &Pod) -> Vec<&str> {
    names(spec(pod).init_containers.as_deref().unwrap_or_default())
}

fn container<'a>(pod: &'a Pod, name: &str) -> &'a Container {
    spec(pod)
        .containers
        .iter()
        .chain(spec(pod).init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn env<'a>(c: &'a Container, name: &str) -> Option<&'a EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

fn env_value<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
    env(c, name).and_then(|e| e.value.as_deref())
}

fn env_names(c: &Container) -> Vec<&str> {
    c.env.iter().flatten().map(|e| e.name.as_str()).collect()
}

fn mount_paths(c: &Container) -> Vec<&str> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect()
}

fn volume_names(pod: &Pod) -> Vec<&str> {
    spec(pod)
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn hash_map(pod: &Pod, key: &str) -> Value {
    serde_json::from_str(annotation(pod, key).expect("hash annotation")).expect("json")
}

// ---- matching --------------------------------------------------------------------------------------------

/// (case, SidecarSet, Pod, Namespace labels, excluded namespaces, matches)
type MatchCase = (
    &'static str,
    SidecarSet,
    Pod,
    BTreeMap<String, String>,
    Vec<String>,
    bool,
);

#[test]
fn matching_table() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let web = || web_pod();
    let in_ns = |ns: &str| {
        let mut p = web_pod();
        p.metadata.namespace = Some(ns.into());
        p
    };
    let plain = set_with("s", json!({}));
    let cases: Vec<MatchCase> = vec![
        (
            "selector matches",
            plain.clone(),
            web(),
            labels(&[]),
            vec![],
            true,
        ),
        (
            "selector does not match",
            set_with("s", json!({"selector": {"matchLabels": {"app": "db"}}})),
            web(),
            labels(&[]),
            vec![],
            false,
        ),
        (
            "match expressions",
            set_with(
                "s",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}}),
            ),
            web(),
            labels(&[]),
            vec![],
            true,
        ),
        (
            "empty selector matches nothing",
            set_with("s", json!({"selector": {}})),
            web(),
            labels(&[]),
            vec![],
            false,
        ),
        (
            "no selector matches nothing",
            set(json!({"metadata": {"name": "s"}, "spec": {}})),
            web(),
            labels(&[]),
            vec![],
            false,
        ),
        (
            "namespaceSelector matches the namespace labels",
            set_with(
                "s",
                json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
            ),
            web(),
            labels(&[("team", "a")]),
            vec![],
            true,
        ),
        (
            "namespaceSelector does not match",
            set_with(
                "s",
                json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
            ),
            web(),
            labels(&[("team", "b")]),
            vec![],
            false,
        ),
        (
            "v1alpha1 namespace (name label) matches without the caller passing it",
            set_with(
                "s",
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns"}}}),
            ),
            web(),
            labels(&[]),
            vec![],
            true,
        ),
        (
            "v1alpha1 namespace of another namespace",
            set_with(
                "s",
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}}),
            ),
            web(),
            labels(&[]),
            vec![],
            false,
        ),
        (
            "a Pod without namespace is in default",
            set_with(
                "s",
                json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}),
            ),
            {
                let mut p = web_pod();
                p.metadata.namespace = None;
                p
            },
            labels(&[]),
            vec![],
            true,
        ),
        (
            "kube-system is never injected",
            plain.clone(),
            in_ns("kube-system"),
            labels(&[]),
            vec![],
            false,
        ),
        (
            "configured excluded namespace",
            plain.clone(),
            in_ns("kruise-system"),
            labels(&[]),
            vec!["kruise-system".into()],
            false,
        ),
        (
            "a finished Pod is not injected",
            plain.clone(),
            {
                let mut p = web_pod();
                p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                    phase: Some("Succeeded".into()),
                    ..Default::default()
                });
                p
            },
            labels(&[]),
            vec![],
            false,
        ),
        (
            "a paused SidecarSet still matches (inject skips it)",
            set_with("s", json!({"injectionStrategy": {"paused": true}})),
            web(),
            labels(&[]),
            vec![],
            true,
        ),
    ];
    for (name, sidecarset, pod, ns_labels, excluded, want) in cases {
        assert_eq!(
            matches(&sidecarset, &pod, &ns_labels, &excluded),
            want,
            "{name}"
        );
    }
}

// ---- the SidecarSet examples (examples/sidecarset-*.yaml) ------------------------------------------------

fn example(file: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).expect("yaml");
    serde_json::to_value(yaml).expect("json")
}

#[test]
fn example_logtail_is_injected_with_the_nginx_log_volume_and_tz() {
    let alpha: sidecarset::v1alpha1::SidecarSet =
        serde_json::from_value(example("sidecarset-logtail.yaml")).expect("v1alpha1");
    let mut logtail = <sidecarset::Api as KindApi>::to_v1beta1(alpha);
    <sidecarset::Api as KindApi>::default(&mut logtail);
    let mut test_pod = pod(example("sidecarset-test-pod.yaml"));
    test_pod.metadata.namespace = Some("default".into());

    assert!(matches(&logtail, &test_pod, &BTreeMap::new(), &[]));
    let out = run(&test_pod, &[logtail.clone()]);
    assert!(out.changed);
    let p = &out.pod;
    // BeforeAppContainer is the default for containers.
    assert_eq!(container_names(p), ["logtail", "nginx"]);
    let sidecar = container(p, "logtail");
    assert_eq!(
        sidecar.image.as_deref(),
        Some("log-service/logtail:0.16.16")
    );
    assert_eq!(mount_paths(sidecar), ["/var/log/nginx"]);
    assert_eq!(env_value(sidecar, "TZ"), Some("Asia/Shanghai"));
    assert_eq!(env_value(sidecar, "IS_INJECTED"), Some("true"));
    // The Pod's own nginx-log volume is kept; the SidecarSet's same-named one is not added twice.
    assert_eq!(volume_names(p), ["nginx-log"]);
    // The app container is untouched.
    assert_eq!(
        container(p, "nginx"),
        &spec(&test_pod).containers[0],
        "nginx container changed"
    );
    assert_eq!(
        annotation(p, ANNOTATION_INJECTED_LIST),
        Some("logtail-sidecarset")
    );
    let hashes = hash_map(p, sidecarset::ANNOTATION_HASH);
    assert_eq!(
        hashes["logtail-sidecarset"]["hash"],
        json!(sidecarset::hash::sidecarset_hash(&logtail))
    );
    assert_eq!(
        hashes["logtail-sidecarset"]["sidecarList"],
        json!(["logtail"])
    );
}

// ---- placement -------------------------------------------------------------------------------------------

#[test]
fn containers_go_before_or_after_the_app_containers() {
    let s = set_with(
        "s",
        json!({"containers": [
            {"name": "b1", "image": "x"},
            {"name": "a1", "image": "x", "podInjectPolicy": "AfterAppContainer"},
            {"name": "b2", "image": "x", "podInjectPolicy": "BeforeAppContainer"},
            {"name": "a2", "image": "x", "podInjectPolicy": "AfterAppContainer"},
        ]}),
    );
    let out = run(&web_pod(), &[s]);
    assert_eq!(container_names(&out.pod), ["b1", "b2", "main", "a1", "a2"]);
}

#[test]
fn sidecarsets_inject_in_the_given_order_and_the_gate_sorts_by_name() {
    let s1 = set_with("s1", json!({"containers": [{"name": "zz", "image": "x"}]}));
    let s2 = set_with("s2", json!({"containers": [{"name": "aa", "image": "x"}]}));
    let out = run(&web_pod(), &[s1.clone(), s2.clone()]);
    assert_eq!(container_names(&out.pod), ["zz", "aa", "main"]);
    let sorted = Run {
        sort: true,
        ..Run::default()
    }
    .inject(&web_pod(), &[s1, s2])
    .expect("inject");
    assert_eq!(container_names(&sorted.pod), ["aa", "zz", "main"]);
}

#[test]
fn a_pod_container_of_the_same_name_is_replaced_in_place() {
    let mut p = web_pod();
    spec_mut(&mut p).containers.push(Container {
        name: "logger".into(),
        image: Some("user-logger:0".into()),
        ..Default::default()
    });
    let s = set_with(
        "s",
        json!({"containers": [{"name": "logger", "image": "logger:2"}]}),
    );
    let out = run(&p, &[s]);
    assert_eq!(container_names(&out.pod), ["main", "logger"]);
    assert_eq!(
        container(&out.pod, "logger").image.as_deref(),
        Some("logger:2")
    );
    assert_eq!(
        env_value(container(&out.pod, "logger"), "IS_INJECTED"),
        Some("true")
    );
}

fn spec_mut(pod: &mut Pod) -> &mut k8s_openapi::api::core::v1::PodSpec {
    pod.spec.as_mut().expect("spec")
}

#[test]
fn init_containers_are_sorted_by_name_after_the_pod_ones_and_native_sidecars_are_listed() {
    let mut p = web_pod();
    spec_mut(&mut p).init_containers = Some(vec![Container {
        name: "setup".into(),
        image: Some("setup".into()),
        ..Default::default()
    }]);
    let s = set_with(
        "s",
        json!({"initContainers": [
            {"name": "z-init", "image": "x"},
            {"name": "a-proxy", "image": "x", "restartPolicy": "Always"},
            {"name": "m-first", "image": "x", "podInjectPolicy": "BeforeAppContainer"},
        ]}),
    );
    let out = run(&p, &[s]);
    // Sorted by name; m-first asked to go before the Pod's own init containers.
    assert_eq!(
        init_names(&out.pod),
        ["m-first", "setup", "a-proxy", "z-init"]
    );
    assert_eq!(
        container(&out.pod, "a-proxy").restart_policy.as_deref(),
        Some("Always")
    );
    assert_eq!(
        env_value(container(&out.pod, "z-init"), "IS_INJECTED"),
        Some("true")
    );
    // Only the native sidecar is a sidecar the upgrade controller tracks.
    let hashes = hash_map(&out.pod, sidecarset::ANNOTATION_HASH);
    assert_eq!(hashes["s"]["sidecarList"], json!(["a-proxy"]));
    assert_eq!(container_names(&out.pod), ["main"]);
}

// ---- volumes ---------------------------------------------------------------------------------------------

#[test]
fn volumes_referenced_by_sidecars_are_added_and_pod_volumes_win() {
    let s = set_with(
        "s",
        json!({
            "containers": [{
                "name": "sc", "image": "x",
                "volumeMounts": [{"name": "data", "mountPath": "/sc-data"}, {"name": "conf", "mountPath": "/conf"}],
                "volumeDevices": [{"name": "blk", "devicePath": "/dev/blk"}],
            }],
            "volumes": [
                {"name": "data", "hostPath": {"path": "/should-not-win"}},
                {"name": "conf", "configMap": {"name": "sc-conf"}},
                {"name": "blk", "persistentVolumeClaim": {"claimName": "blk"}},
                {"name": "unused", "emptyDir": {}},
            ],
        }),
    );
    let out = run(&web_pod(), &[s]);
    assert_eq!(volume_names(&out.pod), ["data", "conf", "blk"]);
    let data = &spec(&out.pod).volumes.as_ref().expect("volumes")[0];
    assert!(
        data.empty_dir.is_some(),
        "the Pod's own data volume was replaced"
    );
}

#[test]
fn a_sidecar_mount_of_an_undefined_volume_is_an_error_naming_the_field() {
    let s = set_with(
        "s",
        json!({"containers": [{"name": "sc", "image": "x", "volumeMounts": [
            {"name": "data", "mountPath": "/d"},
            {"name": "ghost", "mountPath": "/g"},
        ]}]}),
    );
    let err = Run::default()
        .inject(&web_pod(), &[s])
        .expect_err("must fail");
    assert_eq!(
        err,
        InjectError::UnknownVolume {
            sidecarset: "s".into(),
            field: "spec.containers[0].volumeMounts[1].name".into(),
            volume: "ghost".into(),
        }
    );
    assert!(
        err.to_string()
            .contains("spec.containers[0].volumeMounts[1].name")
    );
}

#[test]
fn share_volume_policy_mounts_every_app_mount_except_the_sidecars_own_paths() {
    let p = pod(json!({
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "m",
                 "env": [{"name": "POD_NAME", "value": "p"}, {"name": "ZONE", "value": "z1"}],
                 "volumeMounts": [
                    {"name": "logs", "mountPath": "/var/log", "subPathExpr": "$(POD_NAME)/$(ZONE)/$(MISSING)"},
                    {"name": "conf", "mountPath": "/etc/app", "subPath": "app", "readOnly": true},
                    {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                    {"name": "own", "mountPath": "/sc"},
                 ]},
                {"name": "second", "image": "s", "volumeMounts": [
                    {"name": "other-logs", "mountPath": "/var/log"},
                    {"name": "cache", "mountPath": "/cache"},
                ]},
                {"name": "earlier-sidecar", "image": "e",
                 "env": [{"name": "IS_INJECTED", "value": "true"}],
                 "volumeMounts": [{"name": "private", "mountPath": "/private"}]},
            ],
            "volumes": [
                {"name": "logs", "emptyDir": {}}, {"name": "conf", "emptyDir": {}},
                {"name": "kube-api-access-x", "emptyDir": {}}, {"name": "own", "emptyDir": {}},
                {"name": "other-logs", "emptyDir": {}}, {"name": "cache", "emptyDir": {}},
                {"name": "private", "emptyDir": {}}, {"name": "dev", "emptyDir": {}},
            ],
        },
    }));
    let s = set_with(
        "s",
        json!({"containers": [{
            "name": "sc", "image": "x",
            "shareVolumePolicy": {"type": "enabled"},
            "env": [{"name": "ZONE", "value": "sidecar-zone"}],
            "volumeMounts": [{"name": "own", "mountPath": "/sc"}],
            "volumeDevices": [{"name": "dev", "devicePath": "/cache"}],
        }]}),
    );
    let out = run(&p, &[s]);
    let sc = container(&out.pod, "sc");
    // Own mount first; /cache is the sidecar's device path; /var/log goes to the first app container
    // that mounts it; the injected container's mounts are not shared.
    assert_eq!(
        mount_paths(sc),
        [
            "/sc",
            "/var/log",
            "/etc/app",
            "/var/run/secrets/kubernetes.io/serviceaccount"
        ]
    );
    let mounts = sc.volume_mounts.as_ref().expect("mounts");
    assert_eq!(mounts[1].name, "logs");
    assert_eq!(
        mounts[1].sub_path_expr.as_deref(),
        Some("$(POD_NAME)/$(ZONE)/$(MISSING)")
    );
    assert_eq!(mounts[2].sub_path.as_deref(), Some("app"));
    assert_eq!(mounts[2].read_only, Some(true));
    // The vars the subPathExpr needs come along; the sidecar's own ZONE wins.
    assert_eq!(env_value(sc, "POD_NAME"), Some("p"));
    assert_eq!(env_value(sc, "ZONE"), Some("sidecar-zone"));
    assert_eq!(env(sc, "MISSING"), None);
}

#[test]
fn share_volume_policy_disabled_shares_nothing() {
    let s = set_with(
        "s",
        json!({"containers": [{"name": "sc", "image": "x", "shareVolumePolicy": {"type": "disabled"}}]}),
    );
    let out = run(&web_pod(), &[s]);
    assert!(mount_paths(container(&out.pod, "sc")).is_empty());
}

#[test]
fn share_volume_device_policy_adds_app_devices_on_free_paths() {
    let p = pod(json!({
        "metadata": {"name": "p", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "main", "image": "m", "volumeDevices": [
                {"name": "d1", "devicePath": "/dev/d1"},
                {"name": "d2", "devicePath": "/mnt"},
            ]}],
            "volumes": [{"name": "d1", "emptyDir": {}}, {"name": "d2", "emptyDir": {}}, {"name": "m", "emptyDir": {}}],
        },
    }));
    let s = set_with(
        "s",
        json!({"containers": [{
            "name": "sc", "image": "x",
            "shareVolumeDevicePolicy": {"type": "enabled"},
            "volumeMounts": [{"name": "m", "mountPath": "/mnt"}],
        }]}),
    );
    let out = run(&p, &[s]);
    let devices: Vec<&str> = container(&out.pod, "sc")
        .volume_devices
        .iter()
        .flatten()
        .map(|d| d.device_path.as_str())
        .collect();
    assert_eq!(devices, ["/dev/d1"]);
}

// ---- env -------------------------------------------------------------------------------------------------

#[test]
fn transfer_env_table() {
    let p = pod(json!({
        "metadata": {
            "name": "p",
            "labels": {"app": "web", "log-source": "main"},
            "annotations": {"example.com/source": "other"},
        },
        "spec": {"containers": [
            {"name": "main", "image": "m", "env": [
                {"name": "TZ", "value": "Asia/Shanghai"},
                {"name": "B", "value": "b"},
                {"name": "A", "value": "a"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
                {"name": "OWN", "value": "from-app"},
            ]},
            {"name": "other", "image": "o", "env": [{"name": "TZ", "value": "UTC"}]},
        ]},
    }));
    type Case = (
        &'static str,
        Value,
        Vec<(&'static str, Option<&'static str>)>,
    );
    let cases: Vec<Case> = vec![
        (
            "envName",
            json!([{"sourceContainerName": "main", "envName": "TZ"}]),
            vec![("TZ", Some("Asia/Shanghai"))],
        ),
        (
            "envNames are copied in name order, with envName",
            json!([{"sourceContainerName": "main", "envName": "TZ", "envNames": ["B", "A"]}]),
            vec![
                ("A", Some("a")),
                ("B", Some("b")),
                ("TZ", Some("Asia/Shanghai")),
            ],
        ),
        (
            "a missing var or container is skipped",
            json!([
                {"sourceContainerName": "main", "envName": "NOPE"},
                {"sourceContainerName": "ghost", "envName": "TZ"},
            ]),
            vec![],
        ),
        (
            "downward-API vars are copied as references",
            json!([{"sourceContainerName": "main", "envName": "NODE"}]),
            vec![("NODE", None)],
        ),
        (
            "the source container named by a Pod label",
            json!([{"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.labels['log-source']"}}, "envName": "TZ"}]),
            vec![("TZ", Some("Asia/Shanghai"))],
        ),
        (
            "the source container named by a Pod annotation wins over sourceContainerName",
            json!([{
                "sourceContainerName": "main",
                "sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.annotations['example.com/source']"}},
                "envName": "TZ",
            }]),
            vec![("TZ", Some("UTC"))],
        ),
        (
            "an unsupported field path is skipped",
            json!([{"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.name"}}, "envName": "TZ"}]),
            vec![],
        ),
        (
            "the first transfer of a name wins",
            json!([
                {"sourceContainerName": "other", "envName": "TZ"},
                {"sourceContainerName": "main", "envName": "TZ"},
            ]),
            vec![("TZ", Some("UTC"))],
        ),
        (
            "the sidecar's own env wins",
            json!([{"sourceContainerName": "main", "envName": "OWN"}]),
            vec![],
        ),
    ];
    for (name, transfer, want) in cases {
        let s = set_with(
            "s",
            json!({"containers": [{
                "name": "sc", "image": "x",
                "env": [{"name": "OWN", "value": "sidecar"}],
                "transferEnv": transfer,
            }]}),
        );
        let out = run(&p, &[s]);
        let sc = container(&out.pod, "sc");
        let mut expected = vec!["OWN", "IS_INJECTED"];
        expected.extend(want.iter().map(|(n, _)| *n));
        assert_eq!(env_names(sc), expected, "{name}");
        assert_eq!(env_value(sc, "OWN"), Some("sidecar"), "{name}");
        for (var, value) in want {
            let got = env(sc, var).unwrap_or_else(|| panic!("{name}: no {var}"));
            assert_eq!(got.value.as_deref(), value, "{name}: {var}");
            if value.is_none() {
                assert!(got.value_from.is_some(), "{name}: {var} lost its valueFrom");
            }
        }
    }
}

// ---- pull secrets, paused, empty injections -------------------------------------------------------------

#[test]
fn image_pull_secrets_are_merged_without_duplicates_pod_first() {
    let mut p = web_pod();
    spec_mut(&mut p).image_pull_secrets = Some(vec![
        k8s_openapi::api::core::v1::LocalObjectReference { name: "pod".into() },
        k8s_openapi::api::core::v1::LocalObjectReference {
            name: "shared".into(),
        },
    ]);
    let s1 = set_with(
        "s1",
        json!({"containers": [{"name": "a", "image": "x"}], "imagePullSecrets": [{"name": "shared"}, {"name": "s1"}]}),
    );
    let s2 = set_with(
        "s2",
        json!({"containers": [{"name": "b", "image": "x"}], "imagePullSecrets": [{"name": "s1"}, {"name": "s2"}]}),
    );
    let out = run(&p, &[s1, s2]);
    let secrets: Vec<&str> = spec(&out.pod)
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(secrets, ["pod", "shared", "s1", "s2"]);
}

#[test]
fn a_paused_injection_strategy_skips_the_sidecarset() {
    let paused = set_with(
        "paused",
        json!({"containers": [{"name": "a", "image": "x"}], "injectionStrategy": {"paused": true}}),
    );
    let active = set_with(
        "active",
        json!({"containers": [{"name": "b", "image": "x"}]}),
    );
    let out = run(&web_pod(), &[paused.clone(), active]);
    assert_eq!(container_names(&out.pod), ["b", "main"]);
    assert_eq!(out.applied, ["active"]);
    assert_eq!(
        annotation(&out.pod, ANNOTATION_INJECTED_LIST),
        Some("active")
    );

    let alone = run(&web_pod(), &[paused]);
    assert!(!alone.changed);
    assert_eq!(alone.pod, web_pod());
}

#[test]
fn a_sidecarset_without_containers_changes_nothing() {
    let s = set_with("s", json!({"volumes": [{"name": "v", "emptyDir": {}}]}));
    let out = run(&web_pod(), &[s]);
    assert!(!out.changed);
    assert_eq!(out.pod, web_pod());
}

// ---- resourcesPolicy ---------------------------------------------------------------------------------

/// A Pod labelled `app=web` with `containers` (name, resources) and `init` containers.
fn sized_pod(containers: Value, init: Value) -> Pod {
    pod(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"containers": containers, "initContainers": init},
    }))
}

/// A SidecarSet `name` with one container `sidecar` (or init container, `init`) carrying `policy`.
fn policy_set(name: &str, sidecar: &str, init: bool, policy: Value) -> SidecarSet {
    let mut container = json!({"name": sidecar, "image": "proxy:1", "resourcesPolicy": policy});
    if init {
        container["restartPolicy"] = json!("Always");
        set_with(name, json!({"initContainers": [container]}))
    } else {
        set_with(name, json!({"containers": [container]}))
    }
}

/// The resources of container `name` as the Pod's JSON carries them (`null` when unset).
fn resources_json(pod: &Pod, name: &str) -> Value {
    serde_json::to_value(&container(pod, name).resources).expect("json")
}

fn two_app_containers() -> Pod {
    sized_pod(
        json!([
            {"name": "main", "image": "main:1", "resources": {
                "limits": {"cpu": "1", "memory": "512Mi"},
                "requests": {"cpu": "500m", "memory": "256Mi"},
            }},
            {"name": "worker", "image": "worker:1", "resources": {
                "limits": {"cpu": "500m", "memory": "512Mi"},
                "requests": {"cpu": "250m"},
            }},
        ]),
        json!([]),
    )
}

#[test]
fn resources_policy_sizes_the_sidecar_from_the_app_containers() {
    let sized = policy_set(
        "sized",
        "proxy",
        false,
        json!({
            "targetContainersMode": "sum",
            "resourcesExpr": {
                "limits": {"cpu": "cpu*50%", "memory": "max(memory*25%, 64Mi)"},
                "requests": {"cpu": "max(cpu*10%, 50m)", "memory": "memory"},
            },
        }),
    );
    // Another SidecarSet's sidecar is never a target, however large.
    let other = set_with(
        "other",
        json!({"containers": [{"name": "logger", "image": "log:1",
            "resources": {"limits": {"cpu": "8", "memory": "8Gi"}}}]}),
    );
    let p = two_app_containers();
    let out = run(&p, &[other, sized]);
    assert_eq!(
        container_names(&out.pod),
        ["logger", "proxy", "main", "worker"]
    );
    // Sums: limits cpu 1500m, memory 1Gi; requests cpu 750m, memory 256Mi (worker sets none).
    assert_eq!(
        resources_json(&out.pod, "proxy"),
        json!({
            "limits": {"cpu": "750m", "memory": "256Mi"},
            "requests": {"cpu": "75m", "memory": "256Mi"},
        })
    );
    // Nothing else moves: the app containers keep their own resources.
    for name in ["main", "worker"] {
        assert_eq!(container(&out.pod, name), container(&p, name));
    }
}

#[test]
fn resources_policy_targets_by_regex_and_mode() {
    let p = sized_pod(
        json!([
            {"name": "app-web", "image": "w", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
            {"name": "app-job", "image": "j", "resources": {"limits": {"cpu": "1500m", "memory": "3Gi"}}},
            {"name": "metrics", "image": "m", "resources": {"limits": {"cpu": "4", "memory": "4Gi"}}},
        ]),
        json!([]),
    );
    // (mode, regex, limits the sidecar gets with cpu "cpu / 4" and memory "memory / 4")
    let cases = [
        ("sum", "^app-", json!({"cpu": "875m", "memory": "1Gi"})),
        ("max", "^app-", json!({"cpu": "500m", "memory": "768Mi"})),
        ("sum", ".*", json!({"cpu": "1875m", "memory": "2Gi"})),
        ("max", ".*", json!({"cpu": "1", "memory": "1Gi"})),
        ("max", "web", json!({"cpu": "500m", "memory": "256Mi"})),
    ];
    for (mode, regex, want) in cases {
        let s = policy_set(
            "s",
            "proxy",
            false,
            json!({
                "targetContainersMode": mode,
                "targetContainersNameRegex": regex,
                "resourcesExpr": {"limits": {"cpu": "cpu / 4", "memory": "memory / 4"}},
            }),
        );
        let out = run(&p, &[s]);
        assert_eq!(
            resources_json(&out.pod, "proxy"),
            json!({"limits": want}),
            "{mode} {regex}"
        );
    }
}

#[test]
fn an_unlimited_target_leaves_the_sidecar_unlimited() {
    let p = sized_pod(
        json!([
            {"name": "main", "image": "m", "resources": {
                "limits": {"memory": "1Gi"}, "requests": {"cpu": "200m", "memory": "512Mi"}}},
            {"name": "side", "image": "s", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
        ]),
        json!([]),
    );
    // main has no cpu limit: the sum is unlimited, so the sidecar gets no cpu limit; memory is limited.
    let s = policy_set(
        "s",
        "proxy",
        false,
        json!({
            "targetContainersMode": "sum",
            "resourcesExpr": {
                "limits": {"cpu": "cpu", "memory": "memory * 10%"},
                "requests": {"cpu": "cpu / 2"},
            },
        }),
    );
    let out = run(&p, &[s]);
    assert_eq!(
        resources_json(&out.pod, "proxy"),
        // 10% of 2Gi is 214748364.8 bytes, rounded up to the byte; requests: main's 200m, side's 0.
        json!({"limits": {"memory": "214748365"}, "requests": {"cpu": "100m"}})
    );

    // Only a cpu limit expression, and it is unlimited: the sidecar gets no resources at all.
    let s = policy_set(
        "s",
        "proxy",
        false,
        json!({"targetContainersMode": "max", "resourcesExpr": {"limits": {"cpu": "cpu"}}}),
    );
    let out = run(&p, &[s]);
    assert_eq!(resources_json(&out.pod, "proxy"), Value::Null);
}

#[test]
fn a_native_sidecar_init_container_is_sized_after_native_sidecars_and_containers() {
    let p = sized_pod(
        json!([{"name": "main", "image": "m", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]),
        json!([
            // A plain init container does not run beside the sidecar: never a target.
            {"name": "migrate", "image": "db", "resources": {"requests": {"cpu": "16", "memory": "64Gi"}}},
            {"name": "log-agent", "image": "l", "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
        ]),
    );
    let s = policy_set(
        "s",
        "init-proxy",
        true,
        json!({
            "targetContainersMode": "sum",
            "resourcesExpr": {"requests": {"cpu": "cpu * 20%", "memory": "min(memory / 2, 512Mi)"}},
        }),
    );
    let out = run(&p, &[s]);
    assert_eq!(init_names(&out.pod), ["migrate", "log-agent", "init-proxy"]);
    assert_eq!(
        resources_json(&out.pod, "init-proxy"),
        json!({"requests": {"cpu": "300m", "memory": "512Mi"}})
    );
}

#[test]
fn both_hot_upgrade_twins_get_the_computed_resources() {
    let mut s = policy_set(
        "s",
        "proxy",
        false,
        json!({"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "cpu"}}}),
    );
    let upgrade = &mut s.spec.containers[0].upgrade_strategy;
    upgrade.upgrade_type = "HotUpgrade".into();
    upgrade.hot_upgrade_empty_image = "proxy:empty".into();
    let out = run(&two_app_containers(), &[s]);
    for twin in ["proxy-1", "proxy-2"] {
        assert_eq!(
            resources_json(&out.pod, twin),
            json!({"limits": {"cpu": "1500m"}}),
            "{twin}"
        );
    }
}

#[test]
fn a_bad_resources_policy_fails_the_injection_naming_the_field() {
    let sum = |expr: Value| json!({"targetContainersMode": "sum", "resourcesExpr": expr});
    // (policy, init container?, the error's message)
    let cases = [
        (
            json!({"targetContainersMode": "sum", "targetContainersNameRegex": "^db$",
                "resourcesExpr": {"limits": {"cpu": "cpu"}}}),
            false,
            "sidecarset s: spec.containers[0].resourcesPolicy.targetContainersNameRegex: no container of the Pod matches \"^db$\" (only its own containers and native sidecars count, not those of SidecarSets)",
        ),
        (
            sum(json!({"limits": {"cpu": "cpu - 2"}})),
            false,
            "sidecarset s: spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu: \"cpu - 2\" with cpu=1500m: calculation result is negative",
        ),
        (
            sum(json!({"requests": {"memory": "memory * 1Mi"}})),
            false,
            "sidecarset s: spec.containers[0].resourcesPolicy.resourcesExpr.requests.memory: \"memory * 1Mi\" with memory=256Mi: multiplication of two quantities",
        ),
        (
            sum(json!({"limits": {"cpu": "cpu / 2"}, "requests": {"cpu": "cpu * 2"}})),
            false,
            "sidecarset s: spec.containers[0].resourcesPolicy.resourcesExpr.requests.cpu: the computed request 1500m is above the computed limit 750m",
        ),
        (
            json!({"targetContainersMode": "avg", "resourcesExpr": {"limits": {"cpu": "cpu"}}}),
            false,
            "sidecarset s: spec.containers[0].resourcesPolicy.targetContainersMode: invalid value: \"avg\": must be \"sum\" or \"max\"",
        ),
    ];
    for (policy, init, want) in cases {
        let s = policy_set("s", "proxy", init, policy);
        let err = Run::default()
            .inject(&two_app_containers(), &[s])
            .expect_err(want);
        assert_eq!(err.to_string(), want);
    }

    // A plain init container may not carry a policy (validation says so; a SidecarSet that bypassed
    // it still fails here).
    let mut plain_init = policy_set("s", "init", true, sum(json!({"limits": {"cpu": "cpu"}})));
    plain_init.spec.init_containers[0].restart_policy = None;
    let err = Run::default()
        .inject(&two_app_containers(), &[plain_init])
        .expect_err("plain init container");
    assert_eq!(
        err.to_string(),
        "sidecarset s: spec.initContainers[0].resourcesPolicy: invalid value: resourcesPolicy is only supported for containers with restartPolicy Always"
    );

    // A target's unreadable quantity names the Pod field.
    let mut p = two_app_containers();
    if let Some(spec) = p.spec.as_mut()
        && let Some(limits) = spec.containers[1]
            .resources
            .as_mut()
            .and_then(|r| r.limits.as_mut())
    {
        limits.insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
        );
    }
    let s = policy_set("s", "proxy", false, sum(json!({"limits": {"cpu": "cpu"}})));
    let err = Run::default().inject(&p, &[s]).expect_err("bad quantity");
    assert!(
        err.to_string()
            .starts_with("pod spec.containers[1].resources.limits.cpu: invalid value: "),
        "{err}"
    );
}

#[test]
fn the_same_container_from_two_sidecarsets_is_an_error() {
    let s1 = set_with("s1", json!({"containers": [{"name": "dup", "image": "x"}]}));
    let s2 = set_with("s2", json!({"containers": [{"name": "dup", "image": "y"}]}));
    let err = Run::default()
        .inject(&web_pod(), &[s1, s2])
        .expect_err("must fail");
    assert_eq!(
        err,
        InjectError::DuplicateContainer {
            sidecarset: "s2".into(),
            field: "spec.containers[0]".into(),
            container: "dup".into(),
            other: "s1".into(),
        }
    );
}

#[test]
fn a_pod_without_spec_is_an_error() {
    let p = pod(json!({"metadata": {"name": "p"}}));
    let err = Run::default().inject(&p, &[]).expect_err("must fail");
    assert_eq!(err, InjectError::NoPodSpec);
}

// ---- annotations -----------------------------------------------------------------------------------------

#[test]
fn hash_annotations_are_written_exactly_as_upstream() {
    let mut s = set_with(
        "s",
        json!({"containers": [{"name": "b", "image": "x"}, {"name": "a", "image": "x"}]}),
    );
    s.status = Some(sidecarset::v1beta1::SidecarSetStatus {
        latest_revision: "s-7c9f5b".into(),
        ..Default::default()
    });
    let hash = sidecarset::hash::sidecarset_hash(&s);
    let without = sidecarset::hash::sidecarset_hash_without_image(&s);
    let out = run(&web_pod(), &[s]);
    assert_eq!(
        annotation(&out.pod, sidecarset::ANNOTATION_HASH),
        Some(
            format!(
                r#"{{"s":{{"updateTimestamp":"{NOW}","hash":"{hash}","sidecarSetName":"s","sidecarList":["a","b"],"controllerRevision":"s-7c9f5b"}}}}"#
            )
            .as_str()
        )
    );
    assert_eq!(
        annotation(&out.pod, sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE),
        Some(
            format!(
                r#"{{"s":{{"updateTimestamp":"{NOW}","hash":"{without}","sidecarSetName":"s","sidecarList":["a","b"]}}}}"#
            )
            .as_str()
        )
    );
    assert_eq!(annotation(&out.pod, ANNOTATION_INJECTED_LIST), Some("s"));
    assert_eq!(
        annotation(&out.pod, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER),
        None
    );
}

#[test]
fn several_sidecarsets_and_existing_entries_share_the_annotations() {
    // An older kruise wrote the map[string]string format; its entries are kept in the new format.
    let p = {
        let mut p = web_pod();
        p.metadata.annotations = Some(BTreeMap::from([
            (
                sidecarset::ANNOTATION_HASH.into(),
                r#"{"old":"h-old"}"#.into(),
            ),
            (ANNOTATION_INJECTED_LIST.into(), "old".into()),
        ]));
        p
    };
    let b = set_with(
        "b-set",
        json!({"containers": [{"name": "b", "image": "x"}]}),
    );
    let a = set_with(
        "a-set",
        json!({"containers": [{"name": "a", "image": "x"}]}),
    );
    let out = run(&p, &[b, a]);
    assert_eq!(
        annotation(&out.pod, ANNOTATION_INJECTED_LIST),
        Some("a-set,b-set,old")
    );
    let hashes = hash_map(&out.pod, sidecarset::ANNOTATION_HASH);
    let keys: Vec<&String> = hashes.as_object().expect("map").keys().collect();
    assert_eq!(keys, ["a-set", "b-set", "old"]);
    assert_eq!(
        hashes["old"],
        json!({"updateTimestamp": null, "hash": "h-old", "sidecarSetName": "old", "sidecarList": null})
    );
    let without = hash_map(&out.pod, sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE);
    assert_eq!(without["a-set"]["sidecarList"], json!(["a"]));
    assert_eq!(out.applied, ["b-set", "a-set"]);
}

#[test]
fn a_missing_sidecarset_hash_annotation_is_computed() {
    let mut s = set_with("s", json!({"containers": [{"name": "a", "image": "x"}]}));
    s.metadata.annotations = None;
    let out = run(&web_pod(), &[s.clone()]);
    let hashes = hash_map(&out.pod, sidecarset::ANNOTATION_HASH);
    assert_eq!(
        hashes["s"]["hash"],
        json!(sidecarset::hash::sidecarset_hash(&s))
    );
}

#[test]
fn an_unreadable_hash_annotation_is_an_error_naming_it() {
    let mut p = web_pod();
    p.metadata.annotations = Some(BTreeMap::from([(
        sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE.to_string(),
        "not json".to_string(),
    )]));
    let s = set_with("s", json!({"containers": [{"name": "a", "image": "x"}]}));
    let err = Run::default().inject(&p, &[s]).expect_err("must fail");
    assert!(matches!(
        &err,
        InjectError::InvalidPodAnnotation { key, .. } if key == sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE
    ));
}

#[test]
fn upgrade_specs_parse_both_formats() {
    let current = BTreeMap::from([(
        "k".to_string(),
        r#"{"s":{"updateTimestamp":"2027-01-15T08:00:00Z","hash":"h","sidecarSetName":"s","sidecarList":["c"],"controllerRevision":"r"}}"#
            .to_string(),
    )]);
    let specs = parse_upgrade_specs(&current, "k").expect("parse");
    assert_eq!(specs["s"].hash, "h");
    assert_eq!(specs["s"].controller_revision, "r");
    assert_eq!(
        specs["s"].sidecar_list.as_deref(),
        Some(&["c".to_string()][..])
    );
    let legacy = BTreeMap::from([("k".to_string(), r#"{"s":"h"}"#.to_string())]);
    let specs = parse_upgrade_specs(&legacy, "k").expect("parse");
    assert_eq!(specs["s"].hash, "h");
    assert_eq!(specs["s"].sidecar_set_name, "s");
    assert!(
        parse_upgrade_specs(&BTreeMap::new(), "k")
            .expect("absent")
            .is_empty()
    );
}

// ---- hot upgrade -----------------------------------------------------------------------------------------

#[test]
fn hot_upgrade_injects_a_working_and_an_idle_twin() {
    let s = set_with(
        "s",
        json!({"containers": [{
            "name": "mesh", "image": "mesh:1",
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"},
        }]}),
    );
    let out = run(&web_pod(), &[s]);
    let p = &out.pod;
    assert_eq!(container_names(p), ["mesh-1", "mesh-2", "main"]);
    assert_eq!(container(p, "mesh-1").image.as_deref(), Some("mesh:1"));
    assert_eq!(container(p, "mesh-2").image.as_deref(), Some("empty:1"));
    for name in ["mesh-1", "mesh-2"] {
        let c = container(p, name);
        assert_eq!(
            env_names(c),
            [
                "IS_INJECTED",
                ENV_SIDECARSET_VERSION,
                ENV_SIDECARSET_VERSION_ALT
            ]
        );
        let path = |var: &str| {
            env(c, var)
                .and_then(|e| e.value_from.as_ref())
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.clone())
        };
        assert_eq!(
            path(ENV_SIDECARSET_VERSION),
            Some(format!(
                "metadata.annotations['version.sidecarset.kruise.io/{name}']"
            ))
        );
        assert_eq!(
            path(ENV_SIDECARSET_VERSION_ALT),
            Some(format!(
                "metadata.annotations['versionalt.sidecarset.kruise.io/{name}']"
            ))
        );
    }
    for (key, value) in [
        ("version.sidecarset.kruise.io/mesh-1", "1"),
        ("versionalt.sidecarset.kruise.io/mesh-1", "0"),
        ("version.sidecarset.kruise.io/mesh-2", "0"),
        ("versionalt.sidecarset.kruise.io/mesh-2", "1"),
        (
            ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER,
            r#"{"mesh":"mesh-1"}"#,
        ),
    ] {
        assert_eq!(annotation(p, key), Some(value), "{key}");
    }
    // The SidecarSet's container name is what the upgrade controller tracks.
    let hashes = hash_map(p, sidecarset::ANNOTATION_HASH);
    assert_eq!(hashes["s"]["sidecarList"], json!(["mesh"]));
}

#[test]
fn hot_upgrade_of_init_containers_applies_to_native_sidecars_only() {
    let hot = json!({"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"});
    let s = set_with(
        "s",
        json!({"initContainers": [
            {"name": "native", "image": "n:1", "restartPolicy": "Always", "upgradeStrategy": hot},
            {"name": "plain", "image": "p:1", "upgradeStrategy": hot},
        ]}),
    );
    let out = run(&web_pod(), &[s]);
    assert_eq!(init_names(&out.pod), ["native-1", "native-2", "plain"]);
    assert_eq!(
        container(&out.pod, "native-2").image.as_deref(),
        Some("empty:1")
    );
    assert_eq!(
        annotation(&out.pod, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER),
        Some(r#"{"native":"native-1"}"#)
    );
}

#[test]
fn hot_upgrade_keeps_other_working_entries() {
    let mut p = web_pod();
    p.metadata.annotations = Some(BTreeMap::from([(
        ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER.to_string(),
        r#"{"envoy":"envoy-2"}"#.to_string(),
    )]));
    let s = set_with(
        "s",
        json!({"containers": [{
            "name": "mesh", "image": "mesh:1",
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"},
        }]}),
    );
    let out = run(&p, &[s]);
    assert_eq!(
        annotation(&out.pod, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER),
        Some(r#"{"envoy":"envoy-2","mesh":"mesh-1"}"#)
    );
}

// ---- canary ----------------------------------------------------------------------------------------------

#[test]
fn a_canary_shadows_its_base() {
    let base = set_with(
        "base",
        json!({"containers": [{"name": "agent", "image": "agent:1"}]}),
    );
    let mut canary = set_with(
        "canary",
        json!({"containers": [{"name": "agent", "image": "agent:2"}]}),
    );
    canary
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend([
            (
                sidecarset::ANNOTATION_CANARY.to_string(),
                "true".to_string(),
            ),
            (sidecarset::ANNOTATION_BASE.to_string(), "base".to_string()),
        ]);
    let out = run(&web_pod(), &[base, canary]);
    assert_eq!(out.applied, ["canary"]);
    assert_eq!(
        container(&out.pod, "agent").image.as_deref(),
        Some("agent:2")
    );
    assert_eq!(
        annotation(&out.pod, ANNOTATION_INJECTED_LIST),
        Some("canary")
    );
}

// ---- patchPodMetadata ------------------------------------------------------------------------------------

#[test]
fn patch_pod_metadata_policies() {
    let mut p = web_pod();
    p.metadata.annotations = Some(BTreeMap::from([
        ("retain".to_string(), "pod".to_string()),
        ("overwrite".to_string(), "pod".to_string()),
        (
            "merge".to_string(),
            r#"{"b":1,"a":{"x":1,"y":2}}"#.to_string(),
        ),
    ]));
    let s = set_with(
        "s",
        json!({"patchPodMetadata": [
            {"annotations": {"retain": "set", "new": "set"}},
            {"annotations": {"overwrite": "set"}, "patchPolicy": "Overwrite"},
            {"annotations": {"merge": r#"{"a":{"y":null,"z":3},"c":"<&>"}"#, "fresh": r#"{"k":1}"#}, "patchPolicy": "MergePatchJson"},
        ]}),
    );
    // No containers: only the metadata changes, and they count as a change.
    let out = run(&p, &[s]);
    assert!(out.changed);
    let got = out.pod.metadata.annotations.clone().expect("annotations");
    let want: BTreeMap<String, String> = [
        ("retain", "pod"),
        ("new", "set"),
        ("overwrite", "set"),
        (
            "merge",
            r#"{"a":{"x":1,"z":3},"b":1,"c":"\u003c\u0026\u003e"}"#,
        ),
        ("fresh", r#"{"k":1}"#),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn patch_pod_metadata_merge_of_invalid_json_is_an_error_naming_the_key() {
    let mut p = web_pod();
    p.metadata.annotations = Some(BTreeMap::from([(
        "merge".to_string(),
        "not json".to_string(),
    )]));
    let s = set_with(
        "s",
        json!({"patchPodMetadata": [{"annotations": {"merge": "{}"}, "patchPolicy": "MergePatchJson"}]}),
    );
    let err = Run::default().inject(&p, &[s]).expect_err("must fail");
    assert!(
        matches!(&err, InjectError::InvalidField { field, .. } if field == "spec.patchPodMetadata[0].annotations[merge]"),
        "{err}"
    );
}

#[test]
fn transfer_env_reads_a_source_name_written_by_patch_pod_metadata() {
    let s = set_with(
        "s",
        json!({
            "patchPodMetadata": [{"annotations": {"example.com/src": "main"}}],
            "containers": [{"name": "sc", "image": "x", "transferEnv": [{
                "sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.annotations['example.com/src']"}},
                "envName": "TZ",
            }]}],
        }),
    );
    let out = run(&web_pod(), &[s]);
    assert_eq!(
        env_value(container(&out.pod, "sc"), "TZ"),
        Some("Asia/Shanghai")
    );
}

// ---- injectionStrategy.revision --------------------------------------------------------------------------

fn pinned(policy: &str, extra: Value) -> SidecarSet {
    let mut spec = json!({
        "containers": [{"name": "agent", "image": "agent:latest-version"}],
        "injectionStrategy": {"revision": {"revisionName": "pinned-rev", "policy": policy}},
    });
    if let (Some(target), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        target.extend(extra);
    }
    set_with("s", spec)
}

fn old_revision(with_hash: bool) -> RevisionTemplate {
    let containers: Vec<sidecarset::v1beta1::SidecarContainer> = serde_json::from_value(
        json!([{"name": "agent", "image": "agent:old", "podInjectPolicy": "BeforeAppContainer"}]),
    )
    .expect("containers");
    RevisionTemplate {
        name: "pinned-rev".into(),
        hash: with_hash.then(|| "old-hash".to_string()),
        hash_without_image: with_hash.then(|| "old-hash-without-image".to_string()),
        containers,
        ..Default::default()
    }
}

fn with_revision(draw: f64) -> Run {
    Run {
        revisions: BTreeMap::from([("s".to_string(), old_revision(true))]),
        draw,
        ..Run::default()
    }
}

fn injected_image(out: &Injection) -> &str {
    container(&out.pod, "agent")
        .image
        .as_deref()
        .unwrap_or_default()
}

#[test]
fn revision_policy_table() {
    let canary = json!({"updateStrategy": {"selector": {"matchLabels": {"canary": "true"}}, "partition": "30%"}});
    let canary_pod = {
        let mut p = web_pod();
        p.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("canary".into(), "true".into());
        p
    };
    let cases: Vec<(&str, SidecarSet, Pod, f64, &str)> = vec![
        (
            "Always injects the revision",
            pinned("Always", json!({})),
            web_pod(),
            0.99,
            "agent:old",
        ),
        (
            "defaulted policy is Always",
            pinned("", json!({})),
            web_pod(),
            0.99,
            "agent:old",
        ),
        (
            "a paused upgrade injects the revision",
            pinned(
                "Partial",
                json!({"updateStrategy": {"paused": true, "partition": "0%"}}),
            ),
            web_pod(),
            0.99,
            "agent:old",
        ),
        (
            "Partial: outside the canary selector gets the revision",
            pinned("Partial", canary.clone()),
            web_pod(),
            0.99,
            "agent:old",
        ),
        (
            "Partial: inside the selector, a draw below the partition gets the revision",
            pinned("Partial", canary.clone()),
            canary_pod.clone(),
            0.29,
            "agent:old",
        ),
        (
            "Partial: inside the selector, a draw above the partition gets the latest",
            pinned("Partial", canary),
            canary_pod,
            0.31,
            "agent:latest-version",
        ),
        (
            "Partial: an integer partition means the latest",
            pinned("Partial", json!({"updateStrategy": {"partition": 5}})),
            web_pod(),
            0.0,
            "agent:latest-version",
        ),
    ];
    for (name, s, p, draw, want) in cases {
        let out = with_revision(draw).inject(&p, &[s]).expect(name);
        assert_eq!(injected_image(&out), want, "{name}");
    }
}

#[test]
fn a_pinned_revision_is_recorded_with_its_hash_and_name() {
    let out = with_revision(0.5)
        .inject(&web_pod(), &[pinned("Always", json!({}))])
        .expect("inject");
    let hashes = hash_map(&out.pod, sidecarset::ANNOTATION_HASH);
    assert_eq!(hashes["s"]["hash"], json!("old-hash"));
    assert_eq!(hashes["s"]["controllerRevision"], json!("pinned-rev"));
    let without = hash_map(&out.pod, sidecarset::ANNOTATION_HASH_WITHOUT_IMAGE);
    assert_eq!(without["s"]["hash"], json!("old-hash-without-image"));

    // A revision stored without hash annotations gets the hash of its own containers.
    let run = Run {
        revisions: BTreeMap::from([("s".to_string(), old_revision(false))]),
        ..Run::default()
    };
    let out = run
        .inject(&web_pod(), &[pinned("Always", json!({}))])
        .expect("inject");
    let mut restored = pinned("Always", json!({}));
    restored.spec.containers = old_revision(false).containers;
    let hashes = hash_map(&out.pod, sidecarset::ANNOTATION_HASH);
    assert_eq!(
        hashes["s"]["hash"],
        json!(sidecarset::hash::sidecarset_hash(&restored))
    );
}

#[test]
fn a_pinned_revision_that_was_not_provided_is_an_error() {
    let err = Run::default()
        .inject(&web_pod(), &[pinned("Always", json!({}))])
        .expect_err("must fail");
    assert_eq!(
        err,
        InjectError::RevisionNotFound {
            sidecarset: "s".into()
        }
    );
    assert!(err.to_string().contains("spec.injectionStrategy.revision"));
}

#[test]
fn revision_templates_are_read_from_controller_revisions() {
    let revision: ControllerRevision = serde_json::from_value(json!({
        "metadata": {
            "name": "s-abc",
            "namespace": "kruise-system",
            "labels": {"kruise.io/sidecarset-name": "s"},
            "annotations": {"kruise.io/sidecarset-hash": "h1", "kruise.io/sidecarset-hash-without-image": "h2"},
        },
        "revision": 3,
        "data": {"spec": {
            "$patch": "replace",
            "containers": [{"name": "agent", "image": "agent:old"}],
            "initContainers": null,
            "volumes": [{"name": "v", "emptyDir": {}}],
            "imagePullSecrets": null,
            "patchPodMetadata": null,
        }},
    }))
    .expect("revision");
    let template = RevisionTemplate::from_controller_revision(&revision).expect("template");
    assert_eq!(template.name, "s-abc");
    assert_eq!(template.hash.as_deref(), Some("h1"));
    assert_eq!(template.hash_without_image.as_deref(), Some("h2"));
    assert_eq!(template.containers[0].name, "agent");
    assert!(template.init_containers.is_empty());
    assert_eq!(template.volumes[0].name, "v");

    let mut broken = revision;
    broken.data = Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
        json!({"spec": {"containers": "nope"}}),
    ));
    let err = RevisionTemplate::from_controller_revision(&broken).expect_err("must fail");
    assert!(
        err.to_string()
            .contains("controllerrevision s-abc: data.spec"),
        "{err}"
    );
}

// ---- properties ------------------------------------------------------------------------------------------

/// A SidecarSet exercising most rules at once.
fn busy_set() -> SidecarSet {
    set_with(
        "busy",
        json!({
            "initContainers": [{"name": "sc-init", "image": "i"}, {"name": "sc-native", "image": "n", "restartPolicy": "Always"}],
            "containers": [
                {"name": "sc-log", "image": "l", "shareVolumePolicy": {"type": "enabled"},
                 "transferEnv": [{"sourceContainerName": "app-0", "envNames": ["E0", "E1"]}],
                 "volumeMounts": [{"name": "sc-vol", "mountPath": "/sc"}]},
                {"name": "sc-after", "image": "a", "podInjectPolicy": "AfterAppContainer"},
                {"name": "sc-hot", "image": "h", "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty"}},
            ],
            "volumes": [{"name": "sc-vol", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "sc-secret"}],
            "patchPodMetadata": [{"annotations": {"sc/meta": "{\"a\":1}"}, "patchPolicy": "MergePatchJson"}],
        }),
    )
}

prop_compose! {
    fn app_pod()(
        apps in proptest::collection::vec(
            (
                proptest::collection::vec(("E[0-3]", "[a-z]{0,3}"), 0..4),
                proptest::collection::vec(("v[0-3]", "/(data|logs|sc|etc)/?[a-z]{0,2}"), 0..3),
            ),
            1..4,
        )
    ) -> Pod {
        let mut containers = Vec::new();
        let mut volumes = std::collections::BTreeSet::new();
        for (i, (envs, mounts)) in apps.into_iter().enumerate() {
            let env: Vec<Value> = envs.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
            let mounts: Vec<Value> = mounts
                .iter()
                .map(|(n, path)| {
                    volumes.insert(n.clone());
                    json!({"name": n, "mountPath": path})
                })
                .collect();
            containers.push(json!({"name": format!("app-{i}"), "image": "app", "env": env, "volumeMounts": mounts}));
        }
        let volumes: Vec<Value> = volumes.iter().map(|n| json!({"name": n, "emptyDir": {}})).collect();
        pod(json!({
            "metadata": {"name": "p", "labels": {"app": "web"}},
            "spec": {"containers": containers, "volumes": volumes},
        }))
    }
}

proptest! {
    #[test]
    fn injection_never_changes_or_reorders_app_containers(p in app_pod()) {
        let out = run(&p, &[busy_set()]);
        let apps: Vec<&Container> = spec(&out.pod)
            .containers
            .iter()
            .filter(|c| c.name.starts_with("app-"))
            .collect();
        let before: Vec<&Container> = spec(&p).containers.iter().collect();
        prop_assert_eq!(apps, before);
        prop_assert_eq!(spec(&out.pod).volumes.iter().flatten().take(volume_names(&p).len()).collect::<Vec<_>>(),
            spec(&p).volumes.iter().flatten().collect::<Vec<_>>());
    }

    #[test]
    fn injecting_twice_is_injecting_once(p in app_pod()) {
        let once = run(&p, &[busy_set()]);
        let twice = run(&once.pod, &[busy_set()]);
        prop_assert_eq!(&twice.pod, &once.pod);
    }
}
