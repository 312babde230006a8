//! Pod template defaulting, as OpenKruise applies it to every workload template on create (and on update
//! when the template changed): the core Kubernetes Pod and container defaults, with one difference that
//! matters for in-place updates — app containers default to `imagePullPolicy: Always`.

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, PodSpec, Probe, Volume};

const DEFAULT_FILE_MODE: i32 = 0o644;

/// Applies the defaults to a Pod spec in place.
/// The Pod defaults of a workload's Pod template: [`set_defaults_pod_spec`], and with
/// `host_network_host_ports` each port of a hostNetwork template's containers and init containers
/// without a `hostPort` gets its `containerPort` (Kubernetes did so in templates before v1.28).
pub fn set_defaults_pod_template_spec(spec: &mut PodSpec, defaults: &crate::kinds::Defaults) {
    if defaults.host_network_host_ports && spec.host_network == Some(true) {
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for port in containers.flat_map(|c| c.ports.iter_mut().flatten()) {
            if port.host_port.is_none_or(|p| p == 0) {
                port.host_port = Some(port.container_port);
            }
        }
    }
    set_defaults_pod_spec(spec);
}

pub fn set_defaults_pod_spec(spec: &mut PodSpec) {
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.security_context.get_or_insert_with(Default::default);
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    // No `enableServiceLinks`: Kubernetes defaults it in `SetDefaults_Pod`, not in `SetDefaults_PodSpec`,
    // so it is set on Pods but never in OpenKruise's templates; setting it would change revision hashes.
    for volume in spec.volumes.iter_mut().flatten() {
        set_defaults_volume(volume);
    }
    for container in spec.init_containers.iter_mut().flatten() {
        set_defaults_container(container, false);
    }
    for container in &mut spec.containers {
        set_defaults_container(container, true);
    }
}

/// `app_container`: OpenKruise defaults the pull policy of app containers to Always (an in-place image
/// update must pull); init containers follow the core rule.
fn set_defaults_container(container: &mut Container, app_container: bool) {
    if container.image_pull_policy.is_none() {
        let image = container.image.as_deref().unwrap_or_default();
        let policy = if app_container || is_latest(image) {
            "Always"
        } else {
            "IfNotPresent"
        };
        container.image_pull_policy = Some(policy.into());
    }
    container
        .termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    container
        .termination_message_policy
        .get_or_insert_with(|| "File".into());
    for port in container.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
    }
    for env in container.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            field_ref.api_version.get_or_insert_with(|| "v1".into());
        }
    }
    default_probes_and_handlers(container, true, set_defaults_probe, set_defaults_http_get);
}

/// Applies `probe` to a container's probes (liveness, readiness, and startup when `startup`) and
/// `http_get` to the HTTP-get actions of its lifecycle handlers (postStart, preStop). Pod templates and
/// SidecarSet containers walk a container the same way; their rules for a probe and an HTTP-get differ.
pub(crate) fn default_probes_and_handlers(
    container: &mut Container,
    startup: bool,
    probe: fn(&mut Probe),
    http_get: fn(&mut HTTPGetAction),
) {
    let startup_probe = if startup {
        container.startup_probe.as_mut()
    } else {
        None
    };
    [
        container.liveness_probe.as_mut(),
        container.readiness_probe.as_mut(),
        startup_probe,
    ]
    .into_iter()
    .flatten()
    .for_each(probe);
    if let Some(lifecycle) = container.lifecycle.as_mut() {
        [lifecycle.post_start.as_mut(), lifecycle.pre_stop.as_mut()]
            .into_iter()
            .flatten()
            .filter_map(|handler| handler.http_get.as_mut())
            .for_each(http_get);
    }
}

fn is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

fn set_defaults_probe(probe: &mut Probe) {
    probe.timeout_seconds.get_or_insert(1);
    probe.period_seconds.get_or_insert(10);
    probe.success_threshold.get_or_insert(1);
    probe.failure_threshold.get_or_insert(3);
    if let Some(http) = probe.http_get.as_mut() {
        set_defaults_http_get(http);
    }
}

fn set_defaults_http_get(http: &mut HTTPGetAction) {
    http.path.get_or_insert_with(|| "/".into());
    http.scheme.get_or_insert_with(|| "HTTP".into());
}

/// The core volume defaults (an unset source becomes emptyDir, file modes, fieldRef API versions).
pub fn set_defaults_volume(volume: &mut Volume) {
    let has_source = volume.host_path.is_some()
        || volume.empty_dir.is_some()
        || volume.secret.is_some()
        || volume.config_map.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
        || volume.persistent_volume_claim.is_some()
        || volume.nfs.is_some()
        || volume.csi.is_some()
        || volume.ephemeral.is_some()
        || volume.image.is_some()
        || volume.iscsi.is_some()
        || volume.rbd.is_some()
        || volume.fc.is_some()
        || volume.cephfs.is_some()
        || volume.glusterfs.is_some()
        || volume.azure_disk.is_some()
        || volume.azure_file.is_some()
        || volume.aws_elastic_block_store.is_some()
        || volume.gce_persistent_disk.is_some()
        || volume.git_repo.is_some()
        || volume.flex_volume.is_some()
        || volume.cinder.is_some()
        || volume.flocker.is_some()
        || volume.portworx_volume.is_some()
        || volume.quobyte.is_some()
        || volume.scale_io.is_some()
        || volume.storageos.is_some()
        || volume.vsphere_volume.is_some()
        || volume.photon_persistent_disk.is_some();
    if !has_source {
        volume.empty_dir = Some(Default::default());
    }
    if let Some(secret) = volume.secret.as_mut() {
        secret.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(config_map) = volume.config_map.as_mut() {
        config_map.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(downward) = volume.downward_api.as_mut() {
        downward.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for item in downward.items.iter_mut().flatten() {
            if let Some(field_ref) = item.field_ref.as_mut() {
                field_ref.api_version.get_or_insert_with(|| "v1".into());
            }
        }
    }
    if let Some(projected) = volume.projected.as_mut() {
        projected.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(host_path) = volume.host_path.as_mut() {
        host_path.type_.get_or_insert_with(String::new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector};

    /// `value` without object fields holding `null` or `{}` (Go writes `resources: {}`, serde leaves it out).
    fn pruned(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.into_iter()
                    .map(|(k, v)| (k, pruned(v)))
                    .filter(|(_, v)| !v.is_null() && v.as_object().is_none_or(|m| !m.is_empty()))
                    .collect(),
            ),
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(pruned).collect())
            }
            other => other,
        }
    }

    /// The templates of OpenKruise v1.9's fixture CloneSets are exactly what this defaulting makes of
    /// what the user applied (their `last-applied-configuration`): same template, same revision hash.
    #[test]
    fn defaults_are_openkruises() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/openkruise-v1.9/fx-clonesets.apps.kruise.io.json");
        let list: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
        let mut checked = 0;
        for cs in list["items"].as_array().expect("items") {
            let Some(applied) =
                cs["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                    .as_str()
            else {
                continue;
            };
            let applied: serde_json::Value = serde_json::from_str(applied).expect("JSON");
            let mut spec: PodSpec =
                serde_json::from_value(applied["spec"]["template"]["spec"].clone()).expect("spec");
            set_defaults_pod_spec(&mut spec);
            let stored = &cs["spec"]["template"]["spec"];
            let mut ours = serde_json::to_value(&spec).expect("encodes");
            // The fixture's `sample` had its image changed after the apply.
            ours["containers"][0]["image"] = stored["containers"][0]["image"].clone();
            assert_eq!(
                pruned(ours),
                pruned(stored.clone()),
                "{}",
                cs["metadata"]["name"]
            );
            checked += 1;
        }
        assert_eq!(checked, 2);
    }

    #[test]
    fn pod_and_container_defaults() {
        let mut spec = PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx:1.19".into()),
                ports: Some(vec![ContainerPort {
                    container_port: 80,
                    ..Default::default()
                }]),
                env: Some(vec![EnvVar {
                    name: "NODE".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "spec.nodeName".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                readiness_probe: Some(Probe {
                    http_get: Some(HTTPGetAction {
                        port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            init_containers: Some(vec![
                Container {
                    name: "init".into(),
                    image: Some("busybox:1.36".into()),
                    ..Default::default()
                },
                Container {
                    name: "init2".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                },
            ]),
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        set_defaults_pod_spec(&mut spec);
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        let app = &spec.containers[0];
        assert_eq!(
            app.image_pull_policy.as_deref(),
            Some("Always"),
            "app containers pull Always"
        );
        assert_eq!(
            app.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(
            app.ports.as_ref().and_then(|p| p[0].protocol.as_deref()),
            Some("TCP")
        );
        let probe = app.readiness_probe.as_ref().expect("probe");
        assert_eq!(
            (
                probe.timeout_seconds,
                probe.period_seconds,
                probe.failure_threshold
            ),
            (Some(1), Some(10), Some(3))
        );
        assert_eq!(
            probe.http_get.as_ref().and_then(|h| h.scheme.as_deref()),
            Some("HTTP")
        );
        let inits = spec.init_containers.as_ref().expect("inits");
        assert_eq!(inits[0].image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(inits[1].image_pull_policy.as_deref(), Some("Always"));
        assert!(
            spec.volumes.as_ref().expect("volumes")[0]
                .empty_dir
                .is_some()
        );
        let env = &spec.containers[0].env.as_ref().expect("env")[0];
        assert_eq!(
            env.value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .and_then(|f| f.api_version.as_deref()),
            Some("v1")
        );
    }

    #[test]
    fn defaulting_is_idempotent() {
        let mut spec = PodSpec {
            containers: vec![Container {
                name: "a".into(),
                image: Some("x".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        set_defaults_pod_spec(&mut spec);
        let once = spec.clone();
        set_defaults_pod_spec(&mut spec);
        assert_eq!(spec, once);
    }
}
