use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::kinds::{Kind, V1ALPHA1, V1BETA1};

fn sidecarset(name: &str, spec: Value) -> v1beta1::SidecarSet {
    let object = json!({
        "apiVersion": V1BETA1,
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": spec,
    });
    crate::kinds::decode(object).expect("test object decodes")
}

fn defaulted(spec: Value) -> v1beta1::SidecarSet {
    let mut object = sidecarset("sc", spec);
    Api::default(&mut object);
    object
}

fn basic_spec() -> Value {
    json!({
        "selector": {"matchLabels": {"app": "nginx"}},
        "containers": [{"name": "sidecar", "image": "busybox:1.36"}],
    })
}

fn with(mut base: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer");
    match base.pointer_mut(parent).expect("parent exists") {
        Value::Array(list) => match key.parse::<usize>() {
            Ok(index) if index < list.len() => list[index] = value,
            _ => list.push(value),
        },
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        other => panic!("cannot set {pointer} in {other}"),
    }
    base
}

// ---- defaults ------------------------------------------------------------------------------------------

#[test]
fn default_update_strategy() {
    let object = defaulted(basic_spec());
    let strategy = &object.spec.update_strategy;
    assert_eq!(strategy.type_, "RollingUpdate");
    assert_eq!(strategy.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(strategy.partition, Some(IntOrString::Int(0)));
    let kept = defaulted(with(
        basic_spec(),
        "/updateStrategy",
        json!({"type": "NotUpdate", "maxUnavailable": "20%"}),
    ));
    assert_eq!(kept.spec.update_strategy.type_, "NotUpdate");
    assert_eq!(
        kept.spec.update_strategy.max_unavailable,
        Some(IntOrString::String("20%".into()))
    );
}

#[test]
fn default_inject_policy_by_container_kind() {
    let object = defaulted(with(
        basic_spec(),
        "/initContainers",
        json!([{"name": "init", "image": "busybox"}]),
    ));
    assert_eq!(
        object.spec.containers[0].pod_inject_policy,
        "BeforeAppContainer"
    );
    assert_eq!(
        object.spec.init_containers[0].pod_inject_policy,
        "AfterAppContainer"
    );
    let kept = defaulted(with(
        basic_spec(),
        "/containers/0/podInjectPolicy",
        json!("AfterAppContainer"),
    ));
    assert_eq!(
        kept.spec.containers[0].pod_inject_policy,
        "AfterAppContainer"
    );
}

#[test]
fn default_upgrade_type_and_share_volume_policy() {
    let object = defaulted(basic_spec());
    let sidecar = &object.spec.containers[0];
    assert_eq!(sidecar.upgrade_strategy.upgrade_type, "ColdUpgrade");
    assert_eq!(sidecar.share_volume_policy.type_, "disabled");
    assert_eq!(
        sidecar.share_volume_device_policy, None,
        "the device policy stays unset (hash stability)"
    );
}

#[test]
fn default_revision_history_limit_and_patch_policy() {
    let object = defaulted(with(
        basic_spec(),
        "/patchPodMetadata",
        json!([{"annotations": {"a": "b"}}]),
    ));
    assert_eq!(object.spec.revision_history_limit, Some(10));
    assert_eq!(object.spec.patch_pod_metadata[0].patch_policy, "Retain");
}

#[test]
fn default_injection_revision_policy() {
    let object = defaulted(with(
        basic_spec(),
        "/injectionStrategy",
        json!({"revision": {"customVersion": "v1"}}),
    ));
    assert_eq!(
        object
            .spec
            .injection_strategy
            .revision
            .as_ref()
            .map(|r| r.policy.as_str()),
        Some("Always")
    );
    let none = defaulted(basic_spec());
    assert_eq!(none.spec.injection_strategy.revision, None);
}

#[test]
fn default_container_fields_as_core() {
    let spec = with(
        basic_spec(),
        "/containers/0",
        json!({
            "name": "sidecar",
            "image": "busybox:1.36",
            "ports": [{"containerPort": 80}],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "resources": {"limits": {"cpu": "0.5", "memory": "0.1m"}},
            "livenessProbe": {"httpGet": {"port": 80}},
            "startupProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"preStop": {"httpGet": {"port": 80}}},
            "transferEnv": [{"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}, "envName": "TZ"}],
            "resourcesPolicy": {"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "cpu"}}},
        }),
    );
    let object = defaulted(spec);
    let sidecar = &object.spec.containers[0];
    assert_eq!(
        sidecar.image_pull_policy.as_deref(),
        Some("IfNotPresent"),
        "core rule, not the app-container Always"
    );
    assert_eq!(
        sidecar.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );
    assert_eq!(sidecar.termination_message_policy.as_deref(), Some("File"));
    assert_eq!(
        sidecar
            .ports
            .as_ref()
            .and_then(|p| p[0].protocol.as_deref()),
        Some("TCP")
    );
    let env = &sidecar.env.as_ref().expect("env")[0];
    assert_eq!(
        env.value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .and_then(|f| f.api_version.as_deref()),
        Some("v1")
    );
    let limits = sidecar
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert_eq!(limits["cpu"].0, "500m", "quantities in Go's canonical form");
    assert_eq!(limits["memory"].0, "1m", "rounded up to 1m");
    let probe = sidecar.liveness_probe.as_ref().expect("liveness");
    assert_eq!(
        (
            probe.timeout_seconds,
            probe.period_seconds,
            probe.success_threshold,
            probe.failure_threshold
        ),
        (Some(1), Some(10), Some(1), Some(3))
    );
    assert_eq!(
        probe.http_get.as_ref().and_then(|h| h.path.as_deref()),
        Some("/")
    );
    assert_eq!(
        sidecar
            .startup_probe
            .as_ref()
            .and_then(|p| p.timeout_seconds),
        None,
        "startup probes are not defaulted upstream"
    );
    let pre_stop = sidecar
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.http_get.as_ref());
    assert_eq!(pre_stop.and_then(|h| h.scheme.as_deref()), Some("HTTP"));
    let field_ref = sidecar.transfer_env[0]
        .source_container_name_from
        .as_ref()
        .and_then(|s| s.field_ref.as_ref());
    assert_eq!(field_ref.and_then(|f| f.api_version.as_deref()), Some("v1"));
    assert_eq!(
        sidecar
            .resources_policy
            .as_ref()
            .map(|p| p.target_containers_name_regex.as_str()),
        Some(".*")
    );

    let latest = defaulted(with(basic_spec(), "/containers/0/image", json!("busybox")));
    assert_eq!(
        latest.spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
}

#[test]
fn default_volumes() {
    let object = defaulted(with(
        basic_spec(),
        "/volumes",
        json!([{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "c"}}]),
    ));
    assert!(object.spec.volumes[0].empty_dir.is_some());
    assert_eq!(
        object.spec.volumes[1]
            .config_map
            .as_ref()
            .and_then(|c| c.default_mode),
        Some(0o644)
    );
}

#[test]
fn default_writes_hash_annotations() {
    let object = defaulted(basic_spec());
    let annotations = object.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations.get(ANNOTATION_HASH),
        Some(&hash::sidecarset_hash(&object))
    );
    assert_eq!(
        annotations.get(ANNOTATION_HASH_WITHOUT_IMAGE),
        Some(&hash::sidecarset_hash_without_image(&object))
    );
    let mut again = object.clone();
    Api::default(&mut again);
    assert_eq!(again, object, "defaulting is idempotent");
    let new_image = defaulted(with(
        basic_spec(),
        "/containers/0/image",
        json!("busybox:1.37"),
    ));
    let other = new_image
        .metadata
        .annotations
        .as_ref()
        .expect("annotations");
    assert_ne!(other.get(ANNOTATION_HASH), annotations.get(ANNOTATION_HASH));
    assert_eq!(
        other.get(ANNOTATION_HASH_WITHOUT_IMAGE),
        annotations.get(ANNOTATION_HASH_WITHOUT_IMAGE)
    );
}

// ---- hash ----------------------------------------------------------------------------------------------

#[test]
fn hash_known_value_by_hand() {
    // Go writes the Container fields in declaration order, always writes `resources` and the two struct
    // fields of SidecarContainer (omitempty never drops a struct), and drops empty omitempty fields.
    let object = sidecarset(
        "sc",
        json!({"containers": [{"name": "nginx", "image": "nginx:1.19"}]}),
    );
    let text = hash::encode(&object.spec.containers, &object.spec.init_containers, false);
    assert_eq!(
        text,
        r#"{"containers":[{"name":"nginx","image":"nginx:1.19","resources":{},"upgradeStrategy":{},"shareVolumePolicy":{}}]}"#
    );
    // sha256 = 22f9f4d63b62c8555cf19545271de88a291bc02110153f2790d5fe74ab55e3a3; SafeEncodeString maps
    // each hex digit c to "bcdfghjklmnpqrstvwxz2456789"[c % 27]: '2' (50) → 50 % 27 = 23 → '6',
    // 'f' (102) → 102 % 27 = 21 → '4', '9' (57) → 3 → 'f', '4' (52) → 25 → '8', 'd' (100) → 19 → 'z', ...
    assert_eq!(
        hash::sidecarset_hash(&object),
        "664f48zb7wb6xd999x45f9896c5z2ddv6f5wx4655459746cf4z942c8vw9927v7"
    );
    assert_eq!(hash::safe_encode("2f94d"), "64f8z");
}

#[test]
fn hash_matches_go_reference_vectors() {
    // Generated with Go's encoding/json over k8s.io/api v0.34 types and the SidecarContainer shape.
    let vectors: Vec<Value> =
        serde_json::from_str(include_str!("testdata/hash_vectors.json")).expect("vectors parse");
    assert!(vectors.len() >= 9);
    for vector in vectors {
        let object = sidecarset("sc", vector["spec"].clone());
        let text = hash::encode(&object.spec.containers, &object.spec.init_containers, false);
        assert_eq!(
            text,
            vector["goJson"].as_str().expect("goJson"),
            "encoding of {}",
            vector["spec"]
        );
        assert_eq!(
            hash::sidecarset_hash(&object),
            vector["hash"].as_str().expect("hash")
        );
        assert_eq!(
            hash::sidecarset_hash_without_image(&object),
            vector["hashWithoutImage"].as_str().expect("hash")
        );
    }
}

#[test]
fn defaulted_logtail_example_hash_matches_go() {
    // The example's logtail sidecar after upstream's defaulting is vector 1 of the Go reference vectors.
    let docs = example_documents("sidecarset-logtail.yaml");
    let v1beta1 = Kind::SidecarSet
        .convert(docs[0].clone(), V1BETA1)
        .expect("convert");
    let defaulted_json = Kind::SidecarSet.default_object(v1beta1).expect("default");
    let object: v1beta1::SidecarSet = crate::kinds::decode(defaulted_json).expect("decode");
    let annotations = object.metadata.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations[ANNOTATION_HASH],
        "c2d6db65z5xxw54z8vx645fzcwxdc5b92948c442cv8zv4747xcd5w487d2c7z7d"
    );
    assert_eq!(
        annotations[ANNOTATION_HASH_WITHOUT_IMAGE],
        "4bzvdfw79fd89v9xdz8wdz6z4zcdx4v4dc462296d8wwz5422687726646wxb476"
    );
}

// ---- validation ----------------------------------------------------------------------------------------

fn first_error(object: &v1beta1::SidecarSet, old: Option<&v1beta1::SidecarSet>) -> String {
    Api::validate(object, old)
        .first()
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[test]
fn valid_sidecarset_passes() {
    let spec = json!({
        "selector": {"matchLabels": {"app": "nginx"}},
        "namespaceSelector": {"matchLabels": {"env": "prod"}},
        "initContainers": [{"name": "init", "image": "busybox:1.36", "command": ["true"]}],
        "containers": [{
            "name": "logtail",
            "image": "logtail:1.0",
            "volumeMounts": [{"name": "log", "mountPath": "/var/log"}],
            "transferEnv": [{"sourceContainerName": "nginx", "envName": "TZ"}],
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "logtail:empty"},
            "livenessProbe": {"exec": {"command": ["true"]}},
            "resources": {"requests": {"cpu": "10m"}, "limits": {"cpu": "100m"}},
        }],
        "volumes": [{"name": "log", "emptyDir": {}}],
        "updateStrategy": {"maxUnavailable": "10%", "scatterStrategy": [{"key": "app", "value": "*"}]},
        "injectionStrategy": {"revision": {"revisionName": "sc-abc", "policy": "Partial"}},
        "patchPodMetadata": [{"annotations": {"oom-score": "{\"log\": 1}"}, "patchPolicy": "MergePatchJson"}],
        "customVersion": "v1.0",
    });
    let object = defaulted(spec);
    assert_eq!(Api::validate(&object, None), Vec::new());
    assert_eq!(Api::validate(&object, Some(&object)), Vec::new());
}

#[test]
fn invalid_sidecarsets_name_the_field() {
    let b = basic_spec;
    // (spec after defaulting, expected start of the first error)
    let cases = [
        (
            json!({"containers": [{"name": "s", "image": "i"}]}),
            "spec.selector: Required value",
        ),
        (
            with(b(), "/selector", json!({})),
            "spec.selector: Invalid value: \"{}\": empty selector",
        ),
        (
            with(
                b(),
                "/namespaceSelector",
                json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
            ),
            "spec.namespaceSelector.matchExpressions[0].operator: Unsupported value: \"Near\"",
        ),
        (
            with(
                b(),
                "/updateStrategy",
                json!({"partition": 2, "selector": {"matchLabels": {"canary": "true"}}}),
            ),
            "spec.updateStrategy.partition: Forbidden: partition and selector",
        ),
        (
            with(b(), "/updateStrategy", json!({"maxUnavailable": 0})),
            "spec.updateStrategy.maxUnavailable: Invalid value: \"0\": must not be 0",
        ),
        (
            with(b(), "/updateStrategy", json!({"maxUnavailable": "0%"})),
            "spec.updateStrategy.maxUnavailable: Invalid value: \"0%\"",
        ),
        (
            with(b(), "/updateStrategy", json!({"partition": "120%"})),
            "spec.updateStrategy.partition: Invalid value: \"120%\"",
        ),
        (
            with(b(), "/updateStrategy", json!({"type": "OnDelete"})),
            "spec.updateStrategy.type: Unsupported value: \"OnDelete\"",
        ),
        (
            with(
                b(),
                "/initContainers",
                json!([{"name": "native", "image": "i", "restartPolicy": "Always"}]),
            ),
            "spec.updateStrategy.type: Forbidden: RollingUpdate is not supported with initContainer \"native\"",
        ),
        (
            with(
                b(),
                "/containers/0/upgradeStrategy",
                json!({"upgradeType": "HotUpgrade"}),
            ),
            "spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage: Required value",
        ),
        (
            with(
                b(),
                "/containers/0/upgradeStrategy",
                json!({"upgradeType": "WarmUpgrade"}),
            ),
            "spec.containers[0].upgradeStrategy.upgradeType: Unsupported value: \"WarmUpgrade\"",
        ),
        (
            with(b(), "/containers/0/podInjectPolicy", json!("Middle")),
            "spec.containers[0].podInjectPolicy: Unsupported value: \"Middle\"",
        ),
        (
            with(
                b(),
                "/containers/0/shareVolumePolicy",
                json!({"type": "yes"}),
            ),
            "spec.containers[0].shareVolumePolicy.type: Unsupported value: \"yes\"",
        ),
        (
            with(b(), "/containers/0/transferEnv", json!([{"envName": "TZ"}])),
            "spec.containers[0].transferEnv[0].sourceContainerName: Required value",
        ),
        (
            with(
                b(),
                "/containers/0/transferEnv",
                json!([{"sourceContainerName": "app"}]),
            ),
            "spec.containers[0].transferEnv[0].envName: Required value",
        ),
        (
            with(
                b(),
                "/containers/0/transferEnv",
                json!([{"sourceContainerNameFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}, "envName": "TZ"}]),
            ),
            "spec.containers[0].transferEnv[0].sourceContainerNameFrom.fieldRef.fieldPath: Unsupported value: \"spec.nodeName\"",
        ),
        (
            with(
                b(),
                "/containers/1",
                json!({"name": "sidecar", "image": "i"}),
            ),
            "spec.containers[1].name: Duplicate value: \"sidecar\"",
        ),
        (
            with(b(), "/containers/0/name", json!("Side_Car")),
            "spec.containers[0].name: Invalid value: \"Side_Car\"",
        ),
        (
            with(b(), "/containers/0/image", json!("")),
            "spec.containers[0].image: Required value",
        ),
        (
            with(b(), "/containers", json!([])),
            "spec.containers: Required value: no initContainer or container",
        ),
        (
            with(
                b(),
                "/containers/0/volumeMounts",
                json!([{"name": "missing", "mountPath": "/m"}]),
            ),
            "spec.containers[0].volumeMounts[0].name: Invalid value: \"missing\": no volume of this name",
        ),
        (
            with(
                b(),
                "/containers/0/resources",
                json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
            ),
            "spec.containers[0].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit",
        ),
        (
            with(
                b(),
                "/containers/0/resources",
                json!({"limits": {"cpu": "lots"}}),
            ),
            "spec.containers[0].resources.limits[cpu]: Invalid value: \"lots\"",
        ),
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "avg", "resourcesExpr": {"limits": {"cpu": "cpu"}}}),
            ),
            "spec.containers[0].resourcesPolicy.targetContainersMode: Unsupported value: \"avg\"",
        ),
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "memory * 2"}}}),
            ),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu: Invalid value: \"memory * 2\": invalid expression: undefined variable",
        ),
        // Issue 10, defect 1: a deep expression aborted the process; now it is refused, naming the field.
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": format!("{}cpu{}", "(".repeat(400), ")".repeat(400))}}}),
            ),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu: Invalid value: \"((((",
        ),
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "sum", "resourcesExpr": {"requests": {"memory": format!("{}memory", "-".repeat(1000))}}}),
            ),
            "spec.containers[0].resourcesPolicy.resourcesExpr.requests.memory: Invalid value: \"------",
        ),
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": format!("{}cpu{}", "(".repeat(1000), ")".repeat(1000))}}}),
            ),
            "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu: Too long: may not be more than 1024 bytes",
        ),
        (
            with(
                b(),
                "/containers/0/resourcesPolicy",
                json!({"targetContainersMode": "sum", "targetContainersNameRegex": "(", "resourcesExpr": {"requests": {"cpu": "cpu"}}}),
            ),
            "spec.containers[0].resourcesPolicy.targetContainersNameRegex: Invalid value: \"(\"",
        ),
        (
            with(
                b(),
                "/initContainers",
                json!([{"name": "init", "image": "i", "resourcesPolicy": {"targetContainersMode": "sum", "resourcesExpr": {"limits": {"cpu": "cpu"}}}}]),
            ),
            "spec.initContainers[0].resourcesPolicy: Forbidden: resourcesPolicy is only supported for containers with RestartPolicy Always",
        ),
        (
            with(
                b(),
                "/initContainers",
                json!([{"name": "init", "image": "i", "livenessProbe": {"exec": {"command": ["true"]}}}]),
            ),
            "spec.initContainers[0].livenessProbe: Forbidden",
        ),
        (
            with(b(), "/containers/0/restartPolicy", json!("Always")),
            "spec.containers[0].restartPolicy: Forbidden",
        ),
        (
            with(
                b(),
                "/injectionStrategy",
                json!({"revision": {"policy": "Always"}}),
            ),
            "spec.injectionStrategy.revision: Required value: revisionName and customVersion",
        ),
        (
            with(
                b(),
                "/injectionStrategy",
                json!({"revision": {"customVersion": "v1", "policy": "Sometimes"}}),
            ),
            "spec.injectionStrategy.revision.policy: Unsupported value: \"Sometimes\"",
        ),
        (
            with(b(), "/patchPodMetadata", json!([{"annotations": {}}])),
            "spec.patchPodMetadata[0].annotations: Required value",
        ),
        (
            with(
                b(),
                "/patchPodMetadata",
                json!([{"annotations": {"a": "1"}, "patchPolicy": "Replace"}]),
            ),
            "spec.patchPodMetadata[0].patchPolicy: Unsupported value: \"Replace\"",
        ),
        (
            with(
                b(),
                "/patchPodMetadata",
                json!([{"annotations": {"a": "1"}}, {"annotations": {"a": "2"}}]),
            ),
            "spec.patchPodMetadata[1].annotations[a]: Duplicate value: \"a\"",
        ),
        (
            with(
                b(),
                "/patchPodMetadata",
                json!([{"annotations": {"a": "{oops"}, "patchPolicy": "MergePatchJson"}]),
            ),
            "spec.patchPodMetadata[0].annotations[a]: Invalid value: \"{oops\": MergePatchJson",
        ),
        (
            with(
                b(),
                "/volumes",
                json!([{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]),
            ),
            "spec.volumes[0]: Forbidden: may not specify more than 1 volume type",
        ),
        (
            with(
                b(),
                "/volumes",
                json!([{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]),
            ),
            "spec.volumes[1].name: Duplicate value: \"v\"",
        ),
        (
            with(b(), "/customVersion", json!("not a label!")),
            "spec.customVersion: Invalid value: \"not a label!\"",
        ),
        (
            with(
                b(),
                "/containers/0/env",
                json!([{"name": "A=B", "value": "x"}]),
            ),
            "spec.containers[0].env[0].name: Invalid value: \"A=B\"",
        ),
        (
            with(b(), "/containers/0/ports", json!([{"containerPort": 0}])),
            "spec.containers[0].ports[0].containerPort: Invalid value: \"0\"",
        ),
    ];
    assert!(cases.len() >= 15);
    for (spec, want) in cases {
        let object = defaulted(spec.clone());
        let first = first_error(&object, None);
        assert!(
            first.starts_with(want),
            "spec {spec}:\n got  {first:?}\n want {want:?}"
        );
    }
}

#[test]
fn invalid_metadata_and_canary() {
    let mut object = defaulted(basic_spec());
    object.metadata.name = Some("bad_name".into());
    assert!(first_error(&object, None).starts_with("metadata.name: Invalid value: \"bad_name\""));

    let mut object = defaulted(basic_spec());
    object.metadata.namespace = Some("default".into());
    assert!(first_error(&object, None).starts_with("metadata.namespace: Forbidden"));

    let canary = |base: &str, update: &str| {
        let mut object = defaulted(with(
            basic_spec(),
            "/updateStrategy",
            json!({"type": update}),
        ));
        let annotations = object
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(ANNOTATION_CANARY.into(), "true".into());
        annotations.insert(ANNOTATION_BASE.into(), base.into());
        object
    };
    assert_eq!(
        Api::validate(&canary("base", "NotUpdate"), None),
        Vec::new()
    );
    assert!(first_error(&canary("sc", "NotUpdate"), None).starts_with(
        "metadata.annotations[apps.kruise.io/sidecarset-base]: Invalid value: \"sc\": base sidecarSet cannot be itself"
    ));
    assert!(
        first_error(&canary("base", "RollingUpdate"), None).starts_with(
            "spec.updateStrategy.type: Forbidden: RollingUpdate is not supported for canary"
        )
    );
    assert!(first_error(&canary("other", "NotUpdate"), Some(&canary("base", "NotUpdate")))
        .starts_with("metadata.annotations[apps.kruise.io/sidecarset-base]: Invalid value: \"other\": annotations[apps.kruise.io/sidecarset-base] is immutable"));
}

#[test]
fn update_rules() {
    let old = defaulted(basic_spec());
    let hot = defaulted(with(
        basic_spec(),
        "/containers/0/upgradeStrategy",
        json!({"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}),
    ));
    assert!(first_error(&hot, Some(&old)).starts_with(
        "spec.containers[0].upgradeStrategy.upgradeType: Invalid value: \"HotUpgrade\": field is immutable"
    ));
    let added = defaulted(with(
        basic_spec(),
        "/containers/1",
        json!({"name": "another", "image": "i"}),
    ));
    assert!(first_error(&added, Some(&old)).starts_with("spec.containers[1].name: Forbidden"));
    let new_image = defaulted(with(
        basic_spec(),
        "/containers/0/image",
        json!("busybox:1.37"),
    ));
    assert_eq!(
        Api::validate(&new_image, Some(&old)),
        Vec::new(),
        "images may change"
    );
}

// ---- conflicts -----------------------------------------------------------------------------------------

#[test]
fn conflicts_table() {
    let set = |name: &str, spec: Value| defaulted(spec).tap_name(name);
    let containers = |names: &[&str]| {
        Value::Array(
            names
                .iter()
                .map(|n| json!({"name": n, "image": "i"}))
                .collect(),
        )
    };
    let spec = |selector: Value, names: &[&str]| json!({"selector": selector, "containers": containers(names)});
    let app = |v: &str| json!({"matchLabels": {"app": v}});
    let others = vec![
        set("logging", spec(app("web"), &["logtail"])),
        set(
            "mesh",
            json!({
                "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "containers": containers(&["envoy"]),
                "initContainers": [{"name": "mesh-init", "image": "i"}],
                "volumes": [{"name": "certs", "secret": {"secretName": "mesh"}}],
                "patchPodMetadata": [{"annotations": {"oom": "{}"}, "patchPolicy": "Overwrite"}],
            }),
        ),
        set(
            "prod-only",
            json!({
                "selector": {"matchLabels": {"app": "web"}},
                "namespaceSelector": {"matchLabels": {"env": "prod"}},
                "containers": containers(&["auditor"]),
            }),
        ),
    ];
    // (new SidecarSet, expected error starts; empty = no conflict)
    let cases: Vec<(v1beta1::SidecarSet, Vec<&str>)> = vec![
        (
            set("a", spec(app("web"), &["logtail"])),
            vec![
                "spec.containers[0].name: Invalid value: \"logtail\": container logtail already exist in logging",
            ],
        ),
        (set("a", spec(app("db"), &["logtail"])), vec![]),
        (set("logging", spec(app("web"), &["logtail"])), vec![]),
        (
            set(
                "a",
                spec(
                    json!({"matchLabels": {"app": "db"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                    &["envoy"],
                ),
            ),
            vec![
                "spec.containers[0].name: Invalid value: \"envoy\": container envoy already exist in mesh",
            ],
        ),
        (
            set(
                "a",
                spec(
                    json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}),
                    &["envoy"],
                ),
            ),
            vec![],
        ),
        (
            set(
                "a",
                spec(
                    json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
                    &["logtail"],
                ),
            ),
            vec![],
        ),
        (
            set(
                "a",
                spec(
                    json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}),
                    &["logtail"],
                ),
            ),
            vec!["spec.containers[0].name: Invalid value: \"logtail\""],
        ),
        (
            set(
                "a",
                json!({"selector": app("x"), "initContainers": [{"name": "mesh-init", "image": "i"}]}),
            ),
            vec![
                "spec.initContainers[0].name: Invalid value: \"mesh-init\": container mesh-init already exist in mesh",
            ],
        ),
        (
            set(
                "a",
                json!({"selector": app("x"), "containers": containers(&["c"]), "volumes": [{"name": "certs", "secret": {"secretName": "other"}}]}),
            ),
            vec![
                "spec.volumes[0].name: Invalid value: \"certs\": volume certs is in conflict with sidecarset mesh",
            ],
        ),
        (
            set(
                "a",
                json!({"selector": app("x"), "containers": containers(&["c"]), "volumes": [{"name": "certs", "secret": {"secretName": "mesh"}}]}),
            ),
            vec![],
        ),
        (
            set(
                "a",
                json!({"selector": app("x"), "containers": containers(&["c"]), "patchPodMetadata": [{"annotations": {"oom": "{}"}, "patchPolicy": "MergePatchJson"}]}),
            ),
            vec!["spec.patchPodMetadata[0].annotations[oom]: Invalid value: \"oom\""],
        ),
        (
            set(
                "a",
                json!({"selector": app("x"), "containers": containers(&["c"]), "patchPodMetadata": [{"annotations": {"oom": "{}"}}]}),
            ),
            vec![],
        ),
        (
            set(
                "a",
                json!({"selector": app("web"), "namespaceSelector": {"matchLabels": {"env": "dev"}}, "containers": containers(&["auditor"])}),
            ),
            vec![],
        ),
        (
            set(
                "a",
                json!({"selector": app("web"), "namespaceSelector": {"matchLabels": {"team": "x"}}, "containers": containers(&["auditor"])}),
            ),
            vec![
                "spec.containers[0].name: Invalid value: \"auditor\": container auditor already exist in prod-only",
            ],
        ),
    ];
    for (new, want) in cases {
        let got: Vec<String> = conflicts(&new, &others)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got.len(), want.len(), "{:?}: {got:?}", new.spec);
        for (g, w) in got.iter().zip(&want) {
            assert!(g.starts_with(w), "got {g:?}, want {w:?}");
        }
    }
    // A canary may repeat its base's containers.
    let mut canary = set("logging-canary", spec(app("web"), &["logtail"]));
    let annotations = canary
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(ANNOTATION_CANARY.into(), "true".into());
    annotations.insert(ANNOTATION_BASE.into(), "logging".into());
    assert_eq!(conflicts(&canary, &others), Vec::new());
}

trait TapName {
    fn tap_name(self, name: &str) -> Self;
}

impl TapName for v1beta1::SidecarSet {
    fn tap_name(mut self, name: &str) -> Self {
        self.metadata.name = Some(name.into());
        self
    }
}

// ---- conversion ----------------------------------------------------------------------------------------

#[test]
fn json_dispatch_converts_both_ways() {
    let v1alpha1 = json!({
        "apiVersion": V1ALPHA1,
        "kind": "SidecarSet",
        "metadata": {"name": "sc", "labels": {LABEL_CUSTOM_VERSION: "v2", "team": "a"}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "namespace": "ns-1",
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
            "containers": [{"name": "a", "image": "b", "futureField": 1, "podInjectPolicy": "AfterAppContainer", "upgradeStrategy": {}, "shareVolumePolicy": {}}],
            "updateStrategy": {"partition": "10%"},
            "injectionStrategy": {},
        },
    });
    let up = crate::kinds::convert(v1alpha1.clone(), V1BETA1).expect("up");
    assert_eq!(up["apiVersion"], V1BETA1);
    assert_eq!(
        up["spec"]["namespaceSelector"],
        json!({"matchLabels": {LABEL_NAMESPACE_NAME: "ns-1"}}),
        "namespace wins"
    );
    assert_eq!(up["spec"]["customVersion"], "v2");
    assert_eq!(up["metadata"]["labels"], json!({"team": "a"}));
    assert!(up["spec"].get("namespace").is_none());
    assert_eq!(
        up["spec"]["containers"][0]["futureField"], 1,
        "containers kept verbatim"
    );
    let back = Kind::SidecarSet.convert(up, V1ALPHA1).expect("down");
    assert_eq!(back, v1alpha1);

    let v1beta1 = json!({
        "apiVersion": V1BETA1,
        "kind": "SidecarSet",
        "metadata": {"name": "sc"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "customVersion": "v3", "updateStrategy": {}, "injectionStrategy": {}},
        "status": {"matchedPods": 3, "updatedPods": 2, "readyPods": 1, "latestRevision": "sc-123", "collisionCount": 1},
    });
    let down = Kind::SidecarSet
        .convert(v1beta1.clone(), V1ALPHA1)
        .expect("down");
    assert_eq!(down["metadata"]["labels"][LABEL_CUSTOM_VERSION], "v3");
    assert_eq!(down["status"]["latestRevision"], "sc-123");
    assert_eq!(
        Kind::SidecarSet.convert(down, V1BETA1).expect("up"),
        v1beta1
    );
}

#[test]
fn stale_carried_fields_are_not_applied() {
    // A v1alpha1 namespace carried in v1beta1, then a v1beta1 client changes namespaceSelector: the
    // down-conversion shows the new selector, not the old namespace, and keeps the carried annotation.
    let mut alpha = v1alpha1::SidecarSet::default();
    alpha.metadata.name = Some("sc".into());
    alpha.spec.namespace = "ns-1".into();
    let mut beta = Api::to_v1beta1(alpha);
    beta.spec.namespace_selector = Some(namespace_selector("ns-2"));
    let down = Api::to_v1alpha1(beta.clone());
    assert_eq!(down.spec.namespace, "");
    assert_eq!(
        down.spec.namespace_selector,
        Some(namespace_selector("ns-2"))
    );
    assert_eq!(Api::to_v1beta1(down), beta);
}

fn arb_selector() -> impl Strategy<Value = Option<LabelSelector>> {
    proptest::option::of(
        ("[a-z]{1,3}", "[a-z]{0,3}").prop_map(|(k, v)| LabelSelector {
            match_labels: Some(BTreeMap::from([(k, v)])),
            match_expressions: None,
        }),
    )
}

fn arb_labels() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    proptest::option::of(proptest::collection::btree_map(
        prop_oneof![Just(LABEL_CUSTOM_VERSION.to_string()), "[a-z]{1,4}"],
        "[a-z0-9]{0,3}",
        1..3,
    ))
}

type SpecParts = (
    Option<LabelSelector>,
    Option<LabelSelector>,
    Vec<v1beta1::SidecarContainer>,
    v1beta1::SidecarSetUpdateStrategy,
    v1beta1::SidecarSetInjectionStrategy,
    Option<i32>,
    Vec<v1beta1::SidecarSetPatchPodMetadata>,
);

fn arb_spec_parts() -> impl Strategy<Value = SpecParts> {
    let container = (
        "[a-z]{1,5}",
        proptest::option::of("[a-z:0-9]{1,6}"),
        prop_oneof![
            Just(""),
            Just("BeforeAppContainer"),
            Just("AfterAppContainer")
        ],
        any::<bool>(),
    )
        .prop_map(|(name, image, policy, hot)| v1beta1::SidecarContainer {
            container: Container {
                name,
                image,
                ..Default::default()
            },
            pod_inject_policy: policy.into(),
            upgrade_strategy: v1beta1::SidecarContainerUpgradeStrategy {
                upgrade_type: if hot {
                    "HotUpgrade".into()
                } else {
                    String::new()
                },
                hot_upgrade_empty_image: if hot { "empty".into() } else { String::new() },
            },
            share_volume_device_policy: hot.then(|| v1beta1::ShareVolumePolicy {
                type_: "enabled".into(),
            }),
            ..Default::default()
        });
    let int_or_percent = proptest::option::of(prop_oneof![
        any::<i32>().prop_map(IntOrString::Int),
        (0..200i32).prop_map(|p| IntOrString::String(format!("{p}%")))
    ]);
    (
        arb_selector(),
        arb_selector(),
        proptest::collection::vec(container, 0..3),
        (
            prop_oneof![Just(""), Just("RollingUpdate"), Just("NotUpdate")],
            any::<bool>(),
            arb_selector(),
            int_or_percent.clone(),
            int_or_percent,
        ),
        (
            any::<bool>(),
            proptest::option::of((
                proptest::option::of("[a-z0-9]{0,3}"),
                proptest::option::of("[a-z0-9]{0,3}"),
                prop_oneof![Just(""), Just("Always"), Just("Partial")],
            )),
        ),
        proptest::option::of(any::<i32>()),
        proptest::collection::vec(
            (
                "[a-z]{1,3}",
                "[a-z{}]{0,3}",
                prop_oneof![Just(""), Just("Overwrite")],
            ),
            0..2,
        ),
    )
        .prop_map(
            |(
                selector,
                ns_selector,
                containers,
                (type_, paused, canary, partition, max_unavailable),
                (inject_paused, revision),
                limit,
                patches,
            )| {
                (
                    selector,
                    ns_selector,
                    containers,
                    v1beta1::SidecarSetUpdateStrategy {
                        type_: type_.into(),
                        paused,
                        selector: canary,
                        partition,
                        max_unavailable,
                        ..Default::default()
                    },
                    v1beta1::SidecarSetInjectionStrategy {
                        paused: inject_paused,
                        revision: revision.map(|(custom_version, revision_name, policy)| {
                            v1beta1::SidecarSetInjectRevision {
                                custom_version,
                                revision_name,
                                policy: policy.into(),
                            }
                        }),
                    },
                    limit,
                    patches
                        .into_iter()
                        .map(|(k, v, policy)| v1beta1::SidecarSetPatchPodMetadata {
                            annotations: BTreeMap::from([(k, v)]),
                            patch_policy: policy.into(),
                        })
                        .collect(),
                )
            },
        )
}

fn arb_status() -> impl Strategy<Value = Option<v1beta1::SidecarSetStatus>> {
    proptest::option::of(
        (
            any::<i64>(),
            any::<i32>(),
            any::<i32>(),
            "[a-z0-9-]{0,6}",
            proptest::option::of(any::<i32>()),
        )
            .prop_map(|(generation, matched, ready, latest, collision)| {
                v1beta1::SidecarSetStatus {
                    observed_generation: generation,
                    matched_pods: matched,
                    updated_pods: matched / 2,
                    ready_pods: ready,
                    updated_ready_pods: ready / 2,
                    latest_revision: latest,
                    collision_count: collision,
                    missed_injection_pods: ready / 3,
                }
            }),
    )
}

fn arb_v1alpha1() -> impl Strategy<Value = v1alpha1::SidecarSet> {
    (
        arb_spec_parts(),
        prop_oneof![Just(String::new()), "[a-z]{1,5}"],
        arb_labels(),
        arb_status(),
    )
        .prop_map(
            |(
                (selector, ns_selector, containers, update, injection, limit, patches),
                namespace,
                labels,
                status,
            )| {
                let mut object = v1alpha1::SidecarSet::default();
                object.metadata.name = Some("sc".into());
                object.metadata.labels = labels;
                object.spec = v1alpha1::SidecarSetSpec {
                    selector,
                    namespace,
                    namespace_selector: ns_selector,
                    containers,
                    update_strategy: update,
                    injection_strategy: injection,
                    revision_history_limit: limit,
                    patch_pod_metadata: patches,
                    ..Default::default()
                };
                object.status = status;
                object
            },
        )
}

fn arb_v1beta1() -> impl Strategy<Value = v1beta1::SidecarSet> {
    let direct = (
        arb_spec_parts(),
        prop_oneof![Just(String::new()), "[a-z0-9.]{1,5}"],
        arb_labels(),
        arb_status(),
    )
        .prop_map(
            |(
                (selector, ns_selector, containers, update, injection, limit, patches),
                custom_version,
                labels,
                status,
            )| {
                let mut object = v1beta1::SidecarSet::default();
                object.metadata.name = Some("sc".into());
                object.metadata.labels = labels;
                object.spec = v1beta1::SidecarSetSpec {
                    selector,
                    namespace_selector: ns_selector,
                    containers,
                    update_strategy: update,
                    injection_strategy: injection,
                    revision_history_limit: limit,
                    patch_pod_metadata: patches,
                    custom_version,
                    ..Default::default()
                };
                object.status = status;
                object
            },
        );
    // Stored objects written through v1alpha1 carry the v1alpha1-only fields.
    prop_oneof![direct, arb_v1alpha1().prop_map(Api::to_v1beta1)]
}

proptest! {
    #[test]
    fn v1beta1_round_trips(object in arb_v1beta1()) {
        prop_assert_eq!(Api::to_v1beta1(Api::to_v1alpha1(object.clone())), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::SidecarSet.convert(json.clone(), V1ALPHA1).expect("down");
        let back = Kind::SidecarSet.convert(through, V1BETA1).expect("up");
        prop_assert_eq!(back, json);
    }

    #[test]
    fn v1alpha1_round_trips(object in arb_v1alpha1()) {
        prop_assert_eq!(Api::to_v1alpha1(Api::to_v1beta1(object.clone())), object.clone());
        let json = serde_json::to_value(&object).expect("encode");
        let through = Kind::SidecarSet.convert(json.clone(), V1BETA1).expect("up");
        let back = Kind::SidecarSet.convert(through, V1ALPHA1).expect("down");
        prop_assert_eq!(back, json);
    }
}

// ---- CRD -----------------------------------------------------------------------------------------------

#[test]
fn crd_as_upstream() {
    let crd = Api::crd();
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.short_names, None);
    for version in &crd.spec.versions {
        let columns: Vec<(&str, &str, &str)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("MATCHED", "integer", ".status.matchedPods"),
                ("UPDATED", "integer", ".status.updatedPods"),
                ("READY", "integer", ".status.readyPods"),
                ("AGE", "date", ".metadata.creationTimestamp"),
            ]
        );
        let schema = serde_json::to_value(&version.schema).expect("schema");
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for list in ["containers", "initContainers"] {
            assert_eq!(
                spec[list]["items"]["x-kubernetes-preserve-unknown-fields"], true,
                "{list}"
            );
            assert!(
                spec[list]["items"]["properties"]
                    .get("podInjectPolicy")
                    .is_some()
            );
            assert!(
                spec[list]["items"]["properties"].get("image").is_none(),
                "the Container part is schemaless"
            );
        }
        assert_eq!(
            spec["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(spec.get("namespace").is_some(), version.name == "v1alpha1");
        assert_eq!(
            spec.get("customVersion").is_some(),
            version.name == "v1beta1"
        );
        let status = &schema["openAPIV3Schema"]["properties"]["status"];
        assert_eq!(
            status["required"],
            json!(["matchedPods", "readyPods", "updatedPods"])
        );
    }
}

// ---- examples ------------------------------------------------------------------------------------------

fn examples_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example_documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(examples_dir().join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let yaml = serde_yaml::Value::deserialize(doc).expect("yaml");
            serde_json::to_value(yaml).expect("json")
        })
        .filter(|doc| !doc.is_null())
        .collect()
}

use serde::Deserialize;

#[test]
fn examples_are_valid() {
    let files = [
        ("sidecarset-logtail.yaml", 1),
        ("sidecarset-v1beta1.yaml", 1),
        ("sidecarset-rollout-variants.yaml", 4),
    ];
    let mut names = std::collections::HashSet::new();
    let mut all = Vec::new();
    for (file, count) in files {
        let docs = example_documents(file);
        assert_eq!(docs.len(), count, "{file}");
        for doc in docs {
            assert_eq!(doc["kind"], "SidecarSet", "{file}");
            let v1beta1 = Kind::SidecarSet
                .convert(doc.clone(), V1BETA1)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let defaulted = Kind::SidecarSet
                .default_object(v1beta1)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let errors = Kind::SidecarSet
                .validate(defaulted.clone(), None)
                .expect("validate");
            assert!(errors.is_empty(), "{file}: {}", crate::field::join(&errors));
            let object: v1beta1::SidecarSet = crate::kinds::decode(defaulted).expect("decode");
            assert!(
                names.insert(object.metadata.name.clone()),
                "{file}: duplicate name {:?}",
                object.metadata.name
            );
            all.push(object);
        }
    }
    // All of them can live in one cluster.
    for (i, object) in all.iter().enumerate() {
        let others: Vec<_> = all
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| o.clone())
            .collect();
        assert_eq!(
            conflicts(object, &others),
            Vec::new(),
            "{:?}",
            object.metadata.name
        );
    }
}

#[test]
fn example_test_pod_is_well_formed() {
    let docs = example_documents("sidecarset-test-pod.yaml");
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(docs[0].clone()).expect("pod");
    assert_eq!(pod.metadata.name.as_deref(), Some("test-pod"));
    let app = &pod.spec.as_ref().expect("spec").containers[0];
    let env = app.env.as_ref().expect("`env:`, not `envs:`");
    assert_eq!(
        (env[0].name.as_str(), env[0].value.as_deref()),
        ("TZ", Some("Asia/Shanghai"))
    );
    assert_eq!(
        app.volume_mounts.as_ref().expect("mounts")[0].mount_path,
        "/var/log/nginx"
    );
    let volume = &pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .expect("volumes")[0];
    assert!(volume.empty_dir.is_some());
}
