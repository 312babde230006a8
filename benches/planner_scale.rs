//! The pure planning step of each workload (and of a SidecarSet upgrade) on snapshots of 10,000 and 100,000 Pods, with no apiserver
//! (issue "Scale", item 6): the time of one decision and the heap allocations it makes, and the
//! 100k/10k time ratio. Linear work gives 10, n log n about 12.5; more means a planner would
//! hold a worker for long at scale. Prints figures; asserts nothing about time.
//!
//! Each snapshot is a rollout half done: half the Pods at the update revision, half at the current
//! one, all Running and Ready, spread over 50 nodes (the DaemonSet: one Pod per node; the
//! BroadcastJob: n nodes, half of them with their Pod; the UnitedDeployment: 4 subsets).
//!
//! Also the heap the shared Pod cache holds per Pod (issue "Scale", item 1), for Pods as the
//! apiserver serves them with 2 and 5 containers: kept whole (managed fields stripped, as the cache
//! did before its projection) and as the cache keeps them (the projection, encoded), and the time
//! to read every Pod of one owner back (what a reconcile of that workload does first).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::daemonset::v1beta1::DaemonSetSpec;
use kruise_api::statefulset::v1beta1::StatefulSetSpec;
use kruise_api::uniteddeployment::v1beta1::UnitedDeploymentSpec;
use kruise_core::rollout::Revision;
use kruise_core::rollout::broadcastjob;
use kruise_core::rollout::cloneset::decide::{self, Settings};
use kruise_core::rollout::daemonset::{self, NodeView};
use kruise_core::rollout::statefulset;
use kruise_core::rollout::uniteddeployment::{self, Existing};
use serde_json::json;

/// Counts every allocation of the process, so a decision's allocations can be read around it.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);
static FREED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates to the system allocator unchanged; only counts. (The workspace denies unsafe
// code; a counting allocator cannot be written without it.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Parser, Debug)]
struct Cli {
    /// Snapshot sizes (Pods).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 100_000])]
    sizes: Vec<usize>,
    /// Repetitions of each decision (the fastest is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Pods in the cache-size measurement.
    #[arg(long, default_value_t = 10_000)]
    cached: usize,
}

const NODES: usize = 50;
const CURRENT: &str = "set-current";
const UPDATE: &str = "set-update";

fn template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "set"}},
        "spec": {"containers": [
            {"name": "main", "image": image, "resources": {"requests": {"cpu": "100m"}}},
            {"name": "sidecar", "image": "log:v1"}
        ]}
    }))
    .unwrap_or_default()
}

/// The two revisions every rollout row plans between: [`CURRENT`] at `templates[0]` and
/// [`UPDATE`] at `templates[1]` (the current one first). The CloneSet, Advanced StatefulSet and
/// Advanced DaemonSet rows build the same pair; written once so they stay the same.
fn revisions(templates: &[PodTemplateSpec; 2]) -> [Revision<'_>; 2] {
    [
        Revision {
            name: CURRENT,
            template: &templates[0],
        },
        Revision {
            name: UPDATE,
            template: &templates[1],
        },
    ]
}

/// Pod `i` of `n`: the first half at the update revision, Running and Ready for an hour.
fn pod(name: &str, i: usize, n: usize, node: &str, now: Timestamp) -> Pod {
    let (revision, image) = if i < n / 2 {
        (UPDATE, "app:v2")
    } else {
        (CURRENT, "app:v1")
    };
    let ready_since = now - SignedDuration::from_secs(3600);
    let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ready_since);
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": format!("uid-{i}"),
            "creationTimestamp": time,
            "labels": {
                "app": "set",
                "controller-revision-hash": revision,
                "apps.kruise.io/controller-revision-hash": revision,
                "apps.kruise.io/cloneset-instance-id": format!("{i:x}"),
                "statefulset.kubernetes.io/pod-name": name,
            },
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
                "name": "set", "uid": "set-uid", "controller": true}]
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "main", "image": image, "resources": {"requests": {"cpu": "100m"}}},
                {"name": "sidecar", "image": "log:v1"}
            ],
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.{}.{}.{}", 1 + i / 65_000, (i / 250) % 256, 1 + i % 250),
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": time},
                {"type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": time}
            ],
            "containerStatuses": [
                {"name": "main", "image": image, "imageID": format!("docker.io/{image}@sha256:1"),
                 "ready": true, "restartCount": 0, "started": true,
                 "state": {"running": {"startedAt": time}}},
                {"name": "sidecar", "image": "log:v1", "imageID": "docker.io/log@sha256:2",
                 "ready": true, "restartCount": 0, "started": true,
                 "state": {"running": {"startedAt": time}}}
            ]
        }
    }))
    .unwrap_or_default()
}

/// The fastest of `runs` executions of `decide`, and the allocations (count, bytes) of one.
fn measure<T>(runs: usize, mut decide: impl FnMut() -> T) -> (Duration, u64, u64) {
    let mut best = Duration::MAX;
    let mut allocations = (0, 0);
    for _ in 0..runs.max(1) {
        let (count, bytes) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            ALLOCATED_BYTES.load(Ordering::Relaxed),
        );
        let began = Instant::now();
        black_box(decide());
        let took = began.elapsed();
        allocations = (
            ALLOCATIONS.load(Ordering::Relaxed) - count,
            ALLOCATED_BYTES.load(Ordering::Relaxed) - bytes,
        );
        best = best.min(took);
    }
    (best, allocations.0, allocations.1)
}

struct Row {
    workload: &'static str,
    /// What the step decided (so a step that decides nothing cannot pass for a fast one).
    decided: String,
    pods: usize,
    took: Duration,
    allocations: u64,
    bytes: u64,
}

impl Row {
    /// The row of `workload` over `pods` Pods from what [`measure`] gave (fastest time,
    /// allocations, bytes): every planner row is made from these the same way.
    fn new(
        workload: &'static str,
        decided: String,
        pods: usize,
        (took, allocations, bytes): (Duration, u64, u64),
    ) -> Self {
        Self {
            workload,
            decided,
            pods,
            took,
            allocations,
            bytes,
        }
    }
}

fn cloneset(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    let cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "CloneSet",
        "metadata": {"name": "set", "namespace": "bench", "uid": "set-uid", "generation": 2},
        "spec": {
            "replicas": n,
            "selector": {"matchLabels": {"app": "set"}},
            "template": template("app:v2"),
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": "10%",
                "priorityStrategy": {"weightPriority": [
                    {"weight": 50, "matchSelector": {"matchLabels": {"app": "set"}}}]}}}
        }
    }))?;
    let pods: Vec<Pod> = (0..n)
        .map(|i| {
            pod(
                &format!("set-{i:x}"),
                i,
                n,
                &format!("node-{}", i % NODES),
                now,
            )
        })
        .collect();
    let templates = [template("app:v1"), template("app:v2")];
    let revisions = revisions(&templates);
    let node_labels = BTreeMap::new();
    let snapshot = decide::Snapshot {
        cs: &cs,
        pods: &pods,
        current: revisions[0],
        update: revisions[1],
        revisions: &revisions,
        vct_hashes: &BTreeMap::new(),
        node_labels: &node_labels,
        now,
        settings: Settings::default(),
    };
    let measured = measure(runs, || {
        let scale = decide::scale_step(&snapshot);
        let update = decide::update_step(&snapshot);
        (scale.is_ok(), update.is_ok())
    });
    let update = decide::update_step(&snapshot)
        .map_err(|e| anyhow::anyhow!("CloneSet update step: {e:?}"))?;
    let in_place = update
        .actions
        .iter()
        .filter(|a| matches!(a, decide::UpdateAction::InPlace { .. }))
        .count();
    Ok(Row::new(
        "CloneSet (scale + update step)",
        format!("{in_place} in place"),
        n,
        measured,
    ))
}

fn advanced_statefulset(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    let spec: StatefulSetSpec = serde_json::from_value(json!({
        "replicas": n,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": {"app": "set"}},
        "serviceName": "set",
        "template": template("app:v2"),
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": "10%"}}
    }))?;
    // Ordinals from the highest down are updated first: the high half is at the update revision.
    let pods: Vec<Pod> = (0..n)
        .map(|ordinal| {
            pod(
                &statefulset::pod_name("set", i32::try_from(ordinal).unwrap_or(i32::MAX)),
                n - 1 - ordinal,
                n,
                &format!("node-{}", ordinal % NODES),
                now,
            )
        })
        .collect();
    let templates = [template("app:v1"), template("app:v2")];
    let revisions = revisions(&templates);
    let snapshot = statefulset::Snapshot {
        name: "set",
        spec: &spec,
        status_current_replicas: i32::try_from(n / 2).unwrap_or(i32::MAX),
        pods: &pods,
        current: revisions[0],
        update: revisions[1],
        revisions: &revisions,
        now,
        resize: false,
        env_from_metadata: true,
    };
    let measured = measure(runs, || statefulset::plan(&snapshot).is_ok());
    let plan = statefulset::plan(&snapshot)
        .map_err(|e| anyhow::anyhow!("Advanced StatefulSet plan: {e:?}"))?;
    Ok(Row::new(
        "Advanced StatefulSet (plan)",
        format!("{} actions", plan.actions.len()),
        n,
        measured,
    ))
}

fn advanced_daemonset(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    let spec: DaemonSetSpec = serde_json::from_value(json!({
        "selector": {"matchLabels": {"app": "set"}},
        "template": template("app:v2"),
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
            "rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": "10%"}}
    }))?;
    let names: Vec<String> = (0..n).map(|i| format!("node-{i}")).collect();
    let labels = BTreeMap::new();
    let nodes: Vec<NodeView<'_>> = names
        .iter()
        .map(|name| NodeView {
            name,
            labels: &labels,
            should_run: true,
            should_continue_running: true,
        })
        .collect();
    let pods: Vec<Pod> = (0..n)
        .map(|i| pod(&format!("set-{i:x}"), i, n, &names[i], now))
        .collect();
    let templates = [template("app:v1"), template("app:v2")];
    let revisions = revisions(&templates);
    let snapshot = daemonset::Snapshot {
        spec: &spec,
        pods: &pods,
        nodes: &nodes,
        update: revisions[1],
        revisions: &revisions,
        now,
        resize: false,
        env_from_metadata: true,
        prune_ineligible_nodes: false,
    };
    let measured = measure(runs, || daemonset::plan(&snapshot).is_ok());
    let plan = daemonset::plan(&snapshot)
        .map_err(|e| anyhow::anyhow!("Advanced DaemonSet plan: {e:?}"))?;
    Ok(Row::new(
        "Advanced DaemonSet (plan, 1 Pod per node)",
        format!("{} actions", plan.actions.len()),
        n,
        measured,
    ))
}

/// A BroadcastJob over `n` nodes, half of which already ran its Pod: where the Pods go (every node
/// checked against the template or its Pod's spec, as the controller does) and the reconcile's plan.
fn broadcastjob(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    let job: BroadcastJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "BroadcastJob",
        "metadata": {"name": "job", "namespace": "bench", "uid": "job-uid"},
        "spec": {
            "template": template("app:v2"),
            "completionPolicy": {"type": "Always"}
        }
    }))?;
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("node-{i}"),
                    "labels": {"kubernetes.io/hostname": format!("node-{i}")}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
            }))
        })
        .collect::<Result<_, _>>()?;
    let pods: Vec<Pod> = (0..n / 2)
        .map(|i| pod(&format!("job-{i:x}"), i, n, &format!("node-{i}"), now))
        .collect();
    let job_pods: Vec<&Pod> = pods.iter().collect();
    let spec = job.spec.template.spec.clone().unwrap_or_default();
    let decide = || {
        let placement = broadcastjob::place(
            &spec,
            &nodes,
            &job_pods,
            broadcastjob::pod_node,
            broadcastjob::node_fits,
        );
        let plan = broadcastjob::plan(&job, &job_pods, &placement, now);
        plan.create_on.len()
    };
    let measured = measure(runs, decide);
    Ok(Row::new(
        "BroadcastJob (place + plan, n nodes)",
        format!("{} to create", decide()),
        n,
        measured,
    ))
}

const SUBSETS: [&str; 4] = ["zone-a", "zone-b", "zone-c", "zone-d"];

/// An Adaptive UnitedDeployment of `n` Pods over 4 subsets, each one Pod short of ready so that
/// every Pod is looked at for a pending timeout: per subset the schedulability verdict and the
/// updated replicas, then the replicas and partitions of every subset.
fn uniteddeployment(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    let per_subset = n / SUBSETS.len();
    let spec: UnitedDeploymentSpec = serde_json::from_value(json!({
        "replicas": n,
        "selector": {"matchLabels": {"app": "set"}},
        "template": {"cloneSetTemplate": {"metadata": {"labels": {"app": "set"}},
            "spec": {"selector": {"matchLabels": {"app": "set"}}, "template": template("app:v2")}}},
        "topology": {
            "scheduleStrategy": {"type": "Adaptive"},
            "subsets": SUBSETS.iter().map(|name| json!({"name": name, "nodeSelectorTerm": {
                "matchExpressions": [{"key": "zone", "operator": "In", "values": [name]}]}}))
                .collect::<Vec<_>>()
        },
        "updateStrategy": {"type": "Manual", "manualUpdate": {"partitions": {"zone-a": per_subset / 2}}}
    }))?;
    let pods: Vec<Vec<Pod>> = SUBSETS
        .iter()
        .enumerate()
        .map(|(s, name)| {
            (0..per_subset)
                .map(|i| {
                    pod(
                        &format!("{name}-{i:x}"),
                        i,
                        per_subset,
                        &format!("node-{}", (s * per_subset + i) % NODES),
                        now,
                    )
                })
                .collect()
        })
        .collect();
    let subset_pods: Vec<Vec<&Pod>> = pods.iter().map(|p| p.iter().collect()).collect();
    let replicas = i32::try_from(per_subset).unwrap_or(i32::MAX);
    let decide = || {
        let mut existing = BTreeMap::new();
        let mut updated = 0;
        for (name, pods) in SUBSETS.iter().zip(&subset_pods) {
            let verdict = uniteddeployment::adaptive_schedulable(
                None,
                pods,
                replicas,
                replicas - 1,
                Duration::from_secs(30),
                Duration::from_secs(300),
                now,
            );
            updated += uniteddeployment::updated_replicas(pods.iter().copied(), UPDATE).0;
            existing.insert(
                name.to_string(),
                Existing {
                    spec_replicas: replicas,
                    ready_replicas: replicas - 1,
                    unschedulable: verdict.unschedulable,
                    ..Existing::default()
                },
            );
        }
        let partitions = uniteddeployment::allocate(&spec, &existing)
            .map(|next| uniteddeployment::next_partitions(&spec, &next).len());
        (updated, partitions.is_ok())
    };
    let measured = measure(runs, decide);
    let (updated, allocated) = decide();
    if !allocated {
        anyhow::bail!("UnitedDeployment allocation failed");
    }
    Ok(Row::new(
        "UnitedDeployment (4 subsets, Adaptive)",
        format!("{updated} updated"),
        n,
        measured,
    ))
}

/// Heap bytes allocated and not yet freed.
fn live_bytes() -> u64 {
    ALLOCATED_BYTES
        .load(Ordering::Relaxed)
        .saturating_sub(FREED_BYTES.load(Ordering::Relaxed))
}

/// Pod `i` as the apiserver serves it once a kubelet runs it: what the defaults and admission add
/// (service-account volume and mounts, tolerations, policies), managed fields, and the kubelet's
/// status (conditions, IPs, container states). The last `sidecars` containers were injected by as
/// many SidecarSets, with the records they annotate the Pod with.
fn served_pod(i: usize, containers: usize, sidecars: usize) -> Pod {
    let time = "2026-11-20T10:00:00Z";
    let name = format!("web-{i:05x}");
    let mount = json!([{"name": "kube-api-access-x7k2p", "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]);
    let spec_containers: Vec<serde_json::Value> = (0..containers)
        .map(|c| json!({"name": format!("c{c}"), "image": format!("registry.example.com/team/app{c}:v1.2.3"),
            "imagePullPolicy": "IfNotPresent", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
            "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}], "volumeMounts": mount}))
        .collect();
    let statuses: Vec<serde_json::Value> = (0..containers)
        .map(|c| json!({"name": format!("c{c}"), "image": format!("registry.example.com/team/app{c}:v1.2.3"),
            "imageID": format!("registry.example.com/team/app{c}@sha256:{:064x}", c + 1),
            "containerID": format!("containerd://{:064x}", i * 8 + c), "ready": true, "restartCount": 0,
            "started": true, "lastState": {}, "state": {"running": {"startedAt": time}},
            "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": true, "recursiveReadOnly": "Disabled"}]}))
        .collect();
    let ip = format!("10.{}.{}.{}", 1 + i / 65_000, (i / 250) % 256, 1 + i % 250);
    let injected: Vec<String> = (containers.saturating_sub(sidecars)..containers)
        .map(|c| format!("side-{c}"))
        .collect();
    // SidecarSet's records, as it writes them: a 64-character hash of each SidecarSet's containers.
    let record = |salt: usize| {
        let sets: serde_json::Map<String, serde_json::Value> = injected
            .iter()
            .enumerate()
            .map(|(s, set)| {
                // As random as a real one (the alphabet of `rand.SafeEncodeString`), the same on
                // every Pod: a linear congruential sequence seeded by the SidecarSet.
                let mut state = (s * 31 + salt) as u64;
                let hash: String = (0..64)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        b"bcdfghjklmnpqrstvwxz2456789"[(state >> 33) as usize % 27] as char
                    })
                    .collect();
                (
                    set.clone(),
                    json!({"updateTimestamp": time, "hash": hash, "sidecarSetName": set,
                    "sidecarList": [set], "controllerRevision": format!("{set}-5f849ff4cc")}),
                )
            })
            .collect();
        serde_json::Value::Object(sets).to_string()
    };
    let annotations = match sidecars {
        0 => json!({}),
        _ => {
            json!({"kruise.io/sidecarset-hash": record(1), "kruise.io/sidecarset-hash-without-image": record(2),
            "kruise.io/sidecarset-injected-list": injected.join(",")})
        }
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "generateName": "web-", "namespace": "bench", "uid": format!("{i:08x}-0000-4000-8000-000000000000"),
            "resourceVersion": format!("{}", 100_000 + i), "creationTimestamp": time,
            "labels": {"app": "web", "controller-revision-hash": "web-7b66b966b7",
                "apps.kruise.io/cloneset-instance-id": format!("{i:05x}"), "pod-template-hash": "7b66b966b7",
                "lifecycle.apps.kruise.io/state": "Normal"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet", "name": "web",
                "uid": "0badc0de-0000-4000-8000-000000000000", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kruise-manager", "operation": "Update", "apiVersion": "v1", "time": time, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:controller-revision-hash": {}}}, "f:spec": {"f:containers": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": time, "fieldsType": "FieldsV1",
                 "subresource": "status", "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}}}}
            ]
        },
        "spec": {
            "nodeName": format!("node-{}", i % NODES), "containers": spec_containers,
            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}, {"conditionType": "KruisePodReady"}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]}}]
        },
        "status": {
            "phase": "Running", "hostIP": "192.168.10.3", "hostIPs": [{"ip": "192.168.10.3"}],
            "podIP": ip, "podIPs": [{"ip": ip}], "qosClass": "Burstable", "startTime": time,
            "conditions": [
                {"type": "KruisePodReady", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "InPlaceUpdateReady", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "Initialized", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "Ready", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": time, "lastProbeTime": null},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": time, "lastProbeTime": null}
            ],
            "containerStatuses": statuses
        }
    }))
    .unwrap_or_default()
}

/// Heap bytes per Pod held by a cache of `n` Pods with `containers` containers each: kept whole
/// but for managed fields (the cache before its projection), and as the shared Pod cache keeps them;
/// the time to read all `n` back as their owner's Pods; and the time to select all `n` by a label
/// without decoding them (what a SidecarSet reconcile does first).
fn cache_bytes_per_pod(
    n: usize,
    containers: usize,
    sidecars: usize,
) -> (f64, f64, Duration, Duration) {
    let before = live_bytes();
    let whole: Vec<std::sync::Arc<Pod>> = (0..n)
        .map(|i| {
            let mut pod = served_pod(i, containers, sidecars);
            pod.metadata.managed_fields = None;
            std::sync::Arc::new(pod)
        })
        .collect();
    let whole_bytes = live_bytes().saturating_sub(before) as f64 / n as f64;
    drop(whole);

    let before = live_bytes();
    let cache = kruise_controllers::cache::PodCache::new();
    let baseline = live_bytes().saturating_sub(before);
    cache.apply(kube::runtime::watcher::Event::Init);
    for i in 0..n {
        cache.apply(kube::runtime::watcher::Event::InitApply(served_pod(
            i, containers, sidecars,
        )));
    }
    cache.apply(kube::runtime::watcher::Event::InitDone);
    let cached_bytes =
        live_bytes().saturating_sub(before).saturating_sub(baseline) as f64 / n as f64;
    let (read, _, _) = measure(3, || {
        cache.owned_by("0badc0de-0000-4000-8000-000000000000").len()
    });
    let (select, _, _) = measure(3, || {
        cache
            .select_lazily(None, |labels| labels.get("app") == Some("web"))
            .len()
    });
    (whole_bytes, cached_bytes, read, select)
}

fn sidecarset(n: usize, runs: usize, now: Timestamp) -> anyhow::Result<Row> {
    use kruise_api::sidecarset::hash::{
        ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, sidecarset_hash,
        sidecarset_hash_without_image,
    };
    use kruise_api::sidecarset::v1beta1::SidecarSet;
    use kruise_core::sidecarset::upgrade;
    let sidecarset = |image: &str| -> anyhow::Result<SidecarSet> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "SidecarSet",
            "metadata": {"name": "log", "uid": "ss-uid", "generation": 2},
            "spec": {
                "selector": {"matchLabels": {"app": "set"}},
                "containers": [{"name": "sidecar", "image": image}],
                "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "10%"}
            }
        }))?)
    };
    let (old, new) = (sidecarset("log:v1")?, sidecarset("log:v2")?);
    let recorded = |hash: String| {
        json!({"log": {"updateTimestamp": "2026-11-20T10:00:00Z", "hash": hash,
            "sidecarSetName": "log", "sidecarList": ["sidecar"]}})
        .to_string()
    };
    // The first half already runs the new sidecar image; the SidecarSet changed only its image, so
    // the other half can be upgraded in place.
    let pods: Vec<Pod> = (0..n)
        .map(|i| {
            let mut p = pod(
                &format!("set-{i:x}"),
                i,
                n,
                &format!("node-{}", i % NODES),
                now,
            );
            let updated = i < n / 2;
            let ss = if updated { &new } else { &old };
            let image = if updated { "log:v2" } else { "log:v1" };
            if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.get_mut(1)) {
                c.image = Some(image.into());
            }
            if let Some(c) = p
                .status
                .as_mut()
                .and_then(|s| s.container_statuses.as_mut())
                .and_then(|c| c.get_mut(1))
            {
                c.image = image.into();
                c.image_id = format!("docker.io/{image}@sha256:2");
            }
            p.metadata.annotations = Some(BTreeMap::from([
                (ANNOTATION_HASH.to_owned(), recorded(sidecarset_hash(ss))),
                (
                    ANNOTATION_HASH_WITHOUT_IMAGE.to_owned(),
                    recorded(sidecarset_hash_without_image(ss)),
                ),
            ]));
            p
        })
        .collect();
    let decide = || {
        let facts: Vec<upgrade::PodFacts> =
            pods.iter().map(|p| upgrade::pod_facts(&new, p)).collect();
        upgrade::plan_upgrade(&new, &pods, &facts)
    };
    let measured = measure(runs, || decide().is_ok());
    let plan = decide().map_err(|e| anyhow::anyhow!("SidecarSet upgrade plan: {e:?}"))?;
    Ok(Row::new(
        "SidecarSet (facts + upgrade plan)",
        format!("{} to upgrade", plan.upgrade.len()),
        n,
        measured,
    ))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    println!(
        "{:<44} {:>8} {:>16} {:>16} {:>18} {:>20}",
        "Pod cache, heap per Pod",
        "Pods",
        "whole Pod",
        "as cached",
        "read all (owner)",
        "select all (label)"
    );
    for (containers, sidecars) in [(2, 0), (5, 0), (6, 4)] {
        let (whole, cached, read, select) = cache_bytes_per_pod(cli.cached, containers, sidecars);
        let shape = match sidecars {
            0 => format!("{containers} containers"),
            _ => format!("{containers} containers, {sidecars} from SidecarSets"),
        };
        println!(
            "{:<44} {:>8} {:>12.1} KiB {:>12.1} KiB {:>15.1} ms {:>17.2} ms",
            shape,
            cli.cached,
            whole / 1024.0,
            cached / 1024.0,
            read.as_secs_f64() * 1e3,
            select.as_secs_f64() * 1e3
        );
    }
    let now = Timestamp::now();
    let mut rows = Vec::new();
    for &n in &cli.sizes {
        rows.push(cloneset(n, cli.runs, now)?);
        rows.push(advanced_statefulset(n, cli.runs, now)?);
        rows.push(advanced_daemonset(n, cli.runs, now)?);
        rows.push(sidecarset(n, cli.runs, now)?);
        rows.push(broadcastjob(n, cli.runs, now)?);
        rows.push(uniteddeployment(n, cli.runs, now)?);
    }
    println!(
        "{:<44} {:>8} {:>16} {:>12} {:>13} {:>12}",
        "planning step", "Pods", "decided", "time", "allocations", "bytes"
    );
    for r in &rows {
        println!(
            "{:<44} {:>8} {:>16} {:>9.1} ms {:>13} {:>9.1} MiB",
            r.workload,
            r.pods,
            r.decided,
            r.took.as_secs_f64() * 1e3,
            r.allocations,
            r.bytes as f64 / (1024.0 * 1024.0)
        );
    }
    if let (Some(&small), Some(&large)) = (cli.sizes.first(), cli.sizes.last())
        && large > small
    {
        println!(
            "growth {small} → {large} Pods (time ratio; ×{} Pods):",
            large / small
        );
        for r in rows.iter().filter(|r| r.pods == small) {
            if let Some(big) = rows
                .iter()
                .find(|b| b.pods == large && b.workload == r.workload)
            {
                println!(
                    "  {:<44} ×{:.1} time, ×{:.1} allocations",
                    r.workload,
                    big.took.as_secs_f64() / r.took.as_secs_f64().max(1e-9),
                    big.allocations as f64 / (r.allocations.max(1)) as f64
                );
            }
        }
    }
    Ok(())
}
