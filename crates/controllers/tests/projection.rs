//! The Pod cache keeps a projection of each Pod (`kruise_controllers::cache::project`). Planning on
//! the projection must decide exactly what planning on the full Pod decides: the same scale and
//! update steps, the same status, the same in-place plans and patches, the same SidecarSet facts
//! and patches. Pods here carry what the apiserver and a kubelet add (volumes, mounts, probes,
//! environment, ports, container states, IPs, managed fields) on top of what the planners read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::statefulset::v1beta1::StatefulSetSpec;
use kruise_controllers::cache::{PodCache, project};
use kruise_controllers::cloneset::status::{self, Inputs};
use kruise_core::inplace::{Plan, PlanOptions, Target, next_step, plan};
use kruise_core::rollout::cloneset::decide::{self, Settings, Snapshot};
use kruise_core::rollout::statefulset;
use kruise_core::sidecarset::upgrade;
use kube::runtime::watcher;
use proptest::prelude::*;
use serde_json::{Value, json};

const CURRENT: &str = "web-current";
const UPDATE: &str = "web-update";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// What one generated Pod is like.
#[derive(Clone, Debug)]
struct Shape {
    containers: usize,
    at_update: bool,
    phase: &'static str,
    ready: bool,
    gate: Option<bool>,
    restarts: i32,
    lifecycle: Option<&'static str>,
    priority_env: bool,
    deleting: bool,
    extras: bool,
}

prop_compose! {
    /// A Pod with `containers` containers, in any state a planner tells apart.
    fn shape(containers: usize)(
        at_update in any::<bool>(),
        phase in prop::sample::select(vec!["Running", "Pending", "Succeeded"]),
        ready in any::<bool>(),
        gate in prop::option::of(any::<bool>()),
        restarts in 0i32..3,
        lifecycle in prop::option::of(prop::sample::select(vec![
            "Normal",
            "PreparingUpdate",
            "Updated",
        ])),
        priority_env in any::<bool>(),
        deleting in prop::bool::weighted(0.1),
        extras in any::<bool>(),
    ) -> Shape {
        Shape {
            containers,
            at_update,
            phase,
            ready,
            gate,
            restarts,
            lifecycle,
            priority_env,
            deleting,
            extras,
        }
    }
}

fn image(container: usize, update: bool) -> String {
    match (container, update) {
        (0, true) => "app:v2".into(),
        (0, false) => "app:v1".into(),
        (n, _) => format!("side{n}:v1"),
    }
}

fn template(containers: usize, update: bool) -> PodTemplateSpec {
    let containers: Vec<Value> = (0..containers)
        .map(|c| json!({"name": format!("c{c}"), "image": image(c, update)}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": containers, "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]}
    }))
    .unwrap_or_default()
}

/// A Pod as the apiserver serves it: what the planners read and, with `extras`, much they do not.
fn pod(i: usize, s: &Shape) -> Pod {
    let revision = if s.at_update { UPDATE } else { CURRENT };
    let time = "2026-11-20T10:00:00Z";
    let containers: Vec<Value> = (0..s.containers)
        .map(|c| {
            let mut container = json!({
                "name": format!("c{c}"),
                "image": image(c, s.at_update),
                "resources": {"requests": {"cpu": "100m"}},
            });
            if s.priority_env {
                container["env"] = json!([
                    {"name": "KRUISE_CONTAINER_PRIORITY", "value": format!("{}", 10 - c)},
                    {"name": "OTHER", "value": "x"}
                ]);
            }
            if s.extras {
                container["command"] = json!(["/bin/app", "--serve"]);
                container["ports"] = json!([{"containerPort": 8080, "protocol": "TCP"}]);
                container["readinessProbe"] = json!({"httpGet": {"path": "/", "port": 8080}});
                container["volumeMounts"] = json!([{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]);
                container["terminationMessagePath"] = json!("/dev/termination-log");
                container["imagePullPolicy"] = json!("IfNotPresent");
                if !s.priority_env {
                    container["env"] = json!([{"name": "OTHER", "value": "x"}]);
                }
            }
            container
        })
        .collect();
    let statuses: Vec<Value> = (0..s.containers)
        .map(|c| {
            let mut status = json!({
                "name": format!("c{c}"),
                "image": image(c, s.at_update),
                "imageID": format!("{}@sha256:{c}{}", image(c, s.at_update), u8::from(s.at_update)),
                "ready": s.ready,
                "restartCount": s.restarts,
                "started": s.ready,
            });
            if s.extras {
                status["containerID"] = json!(format!("containerd://{i}{c}"));
                status["state"] = json!({"running": {"startedAt": time}});
                status["lastState"] = json!({});
            }
            status
        })
        .collect();
    let ready = if s.ready { "True" } else { "False" };
    let mut conditions = vec![
        json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": time}),
        json!({"type": "Ready", "status": ready, "lastTransitionTime": time}),
    ];
    if let Some(gate) = s.gate {
        let gate = if gate { "True" } else { "False" };
        conditions.push(
            json!({"type": "InPlaceUpdateReady", "status": gate, "lastTransitionTime": time}),
        );
    }
    let mut labels = json!({
        "app": "web",
        "controller-revision-hash": revision,
        "apps.kruise.io/cloneset-instance-id": format!("{i:x}"),
    });
    if let Some(state) = s.lifecycle {
        labels["lifecycle.apps.kruise.io/state"] = json!(state);
    }
    let mut value = json!({
        "metadata": {
            "name": format!("web-{i}"),
            "namespace": "ns",
            "uid": format!("uid-{i}"),
            "resourceVersion": format!("{}", 100 + i),
            "creationTimestamp": time,
            "labels": labels,
            "annotations": {"kruise.io/sidecarset-hash": "{}"},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
                "name": "web", "uid": "cs-uid", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": format!("node-{}", i % 3),
            "containers": containers,
            "restartPolicy": "Always",
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": s.phase,
            "conditions": conditions,
            "containerStatuses": statuses
        }
    });
    if s.deleting {
        value["metadata"]["deletionTimestamp"] = json!(time);
    }
    if s.extras {
        value["metadata"]["generateName"] = json!("web-");
        value["metadata"]["managedFields"] = json!([{"manager": "kubelet", "operation": "Update",
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]);
        value["spec"]["volumes"] = json!([{"name": "kube-api-access", "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
        ]}}]);
        value["spec"]["dnsPolicy"] = json!("ClusterFirst");
        value["spec"]["schedulerName"] = json!("default-scheduler");
        value["spec"]["serviceAccountName"] = json!("default");
        value["spec"]["securityContext"] = json!({});
        value["status"]["podIP"] = json!(format!("10.0.0.{}", i % 250));
        value["status"]["hostIP"] = json!("192.168.0.1");
        value["status"]["qosClass"] = json!("Burstable");
        value["status"]["startTime"] = json!(time);
    }
    serde_json::from_value(value).unwrap_or_default()
}

fn cloneset(replicas: usize, max_unavailable: usize, partition: usize) -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "cs-uid", "generation": 2},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": template(2, true),
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "maxUnavailable": max_unavailable,
                "partition": partition}},
            "lifecycle": {"inPlaceUpdate": {"labelsHandler": {"hold": "true"}}}
        }
    }))
    .unwrap_or_else(|_| CloneSet::new("web", Default::default()))
}

fn sidecarset() -> SidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "SidecarSet",
        "metadata": {"name": "side", "uid": "ss-uid", "resourceVersion": "7", "generation": 2},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "containers": [{"name": "c1", "image": "side1:v2"}],
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 2}
        }
    }))
    .unwrap_or_else(|_| SidecarSet::new("side", Default::default()))
}

/// Every decision this test compares, as text (each decision type prints all it decided).
fn decisions(
    pods: &[Pod],
    containers: usize,
    max_unavailable: usize,
    partition: usize,
) -> Vec<String> {
    let cs = cloneset(pods.len() + 1, max_unavailable, partition);
    let (current, update) = (template(containers, false), template(containers, true));
    let revisions = [
        decide::Revision {
            name: CURRENT,
            template: &current,
        },
        decide::Revision {
            name: UPDATE,
            template: &update,
        },
    ];
    let node_labels = BTreeMap::new();
    let active: Vec<Pod> = pods
        .iter()
        .filter(|p| kruise_core::pods::is_active(p))
        .cloned()
        .collect();
    let snapshot = Snapshot {
        cs: &cs,
        pods: &active,
        current: revisions[0],
        update: revisions[1],
        revisions: &revisions,
        vct_hashes: &BTreeMap::new(),
        node_labels: &node_labels,
        now: now(),
        settings: Settings::default(),
    };
    let mut out = vec![
        format!("{:?}", decide::scale_step(&snapshot)),
        format!("{:?}", decide::update_step(&snapshot)),
    ];
    let computed = status::compute(&Inputs {
        cs: &cs,
        pods: &active,
        current_revision: CURRENT,
        update_revision: UPDATE,
        collision_count: None,
        label_selector: "app=web".into(),
        now: now(),
    });
    out.push(format!("{:?} {:?}", computed.status, computed.requeue));

    // The same Pods as an Advanced StatefulSet's.
    let spec: Result<StatefulSetSpec, _> = serde_json::from_value(json!({
        "replicas": pods.len(),
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {"app": "web"}},
        "serviceName": "web",
        "template": update,
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": max_unavailable.max(1)}}
    }));
    if let Ok(spec) = spec {
        let revisions = [
            kruise_core::rollout::Revision {
                name: CURRENT,
                template: &current,
            },
            kruise_core::rollout::Revision {
                name: UPDATE,
                template: &update,
            },
        ];
        let snapshot = statefulset::Snapshot {
            name: "web",
            spec: &spec,
            status_current_replicas: 0,
            pods,
            current: revisions[0],
            update: revisions[1],
            revisions: &revisions,
            now: now(),
            resize: false,
            env_from_metadata: true,
        };
        out.push(format!("{:?}", statefulset::plan(&snapshot)));
    }

    // The in-place engine on each Pod: the plan, then the next step and its patch.
    let labels = BTreeMap::from([("controller-revision-hash".to_owned(), UPDATE.to_owned())]);
    let target = Target {
        revision: UPDATE,
        revision_labels: &labels,
    };
    for pod in pods {
        let planned = plan(&current, &update, pod, &PlanOptions::default());
        out.push(format!("{planned:?}"));
        if let Plan::InPlace(in_place) = &planned {
            out.push(format!("{:?}", next_step(pod, in_place, &target, 0, now())));
            out.push(format!("{:?}", next_step(pod, in_place, &target, 5, now())));
        }
        out.push(format!(
            "{:?}",
            kruise_core::inplace::finish_patch(pod, &Default::default(), now())
        ));
    }

    // A SidecarSet over the same Pods.
    let ss = sidecarset();
    let facts: Vec<upgrade::PodFacts> = pods.iter().map(|p| upgrade::pod_facts(&ss, p)).collect();
    out.push(format!("{facts:?}"));
    out.push(format!("{:?}", upgrade::plan_upgrade(&ss, pods, &facts)));
    for pod in pods {
        out.push(format!("{}", upgrade::is_managed(&ss, pod)));
        out.push(format!(
            "{:?}",
            upgrade::upgrade_patch(&ss, pod, "side-rev", now())
        ));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn projection_decides_as_the_full_pod(
        (containers, shapes) in (1usize..=3)
            .prop_flat_map(|c| (Just(c), prop::collection::vec(shape(c), 1..8))),
        max_unavailable in 0usize..4,
        partition in 0usize..4,
    ) {
        let full: Vec<Pod> = shapes.iter().enumerate().map(|(i, s)| pod(i, s)).collect();
        let projected: Vec<Pod> = full.iter().cloned().map(project).collect();
        prop_assert_eq!(
            decisions(&full, containers, max_unavailable, partition),
            decisions(&projected, containers, max_unavailable, partition)
        );
        // The cache keeps the projection encoded: it reads back exactly.
        let cache = PodCache::new();
        for p in &full {
            cache.apply(watcher::Event::Apply(p.clone()));
        }
        for p in &projected {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let cached = cache.get("ns", name);
            prop_assert_eq!(cached.as_deref(), Some(p));
        }
        // Projecting twice changes nothing more.
        let twice: Vec<Pod> = projected.iter().cloned().map(project).collect();
        prop_assert_eq!(&twice, &projected);
    }
}

#[test]
fn projection_drops_what_no_planner_reads() {
    let full = pod(
        1,
        &Shape {
            containers: 2,
            at_update: false,
            phase: "Running",
            ready: true,
            gate: Some(true),
            restarts: 0,
            lifecycle: None,
            priority_env: true,
            deleting: false,
            extras: true,
        },
    );
    let p = project(full.clone());
    let spec = p.spec.clone().unwrap_or_default();
    let status = p.status.clone().unwrap_or_default();
    assert!(p.metadata.managed_fields.is_none());
    assert!(p.metadata.generate_name.is_none());
    assert!(spec.volumes.is_none());
    assert!(spec.service_account_name.is_none());
    assert!(spec.containers.iter().all(|c| c.command.is_none()
        && c.ports.is_none()
        && c.readiness_probe.is_none()
        && c.volume_mounts.is_none()));
    // Only the environment the launch priority reads is kept.
    let env: Vec<&str> = spec.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(env, vec!["KRUISE_CONTAINER_PRIORITY"]);
    assert!(status.pod_ip.is_none() && status.host_ip.is_none());
    assert!(
        status
            .container_statuses
            .iter()
            .flatten()
            .all(|c| c.state.is_none() && c.container_id.is_none())
    );
    // What is kept is kept whole.
    assert_eq!(p.metadata.labels, full.metadata.labels);
    assert_eq!(p.metadata.owner_references, full.metadata.owner_references);
    assert_eq!(
        status.conditions,
        full.status.as_ref().and_then(|s| s.conditions.clone())
    );
    assert_eq!(
        spec.tolerations,
        full.spec.as_ref().and_then(|s| s.tolerations.clone())
    );
    // And it is much smaller.
    let size = |p: &Pod| serde_json::to_string(p).map_or(0, |s| s.len());
    assert!(
        size(&p) * 2 < size(&full),
        "{} vs {}",
        size(&p),
        size(&full)
    );
}
