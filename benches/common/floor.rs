//! The apiserver's floor for an in-place rollout: how long the control plane (apiserver, etcd,
//! scheduler, kubelet-sim) takes to roll N Pods to a new image when nothing but the writes an
//! in-place update cannot do without is made, by a minimal controller that knows its Pods and plans
//! nothing. A workload controller's rollout time over this floor is what the controller costs.
//!
//! The minimal controller is this bench process itself, writing without a client rate limit, 64 Pod
//! writes in flight, on bare Pods (no owner) in a namespace of their own, before kruise-manager runs.
//!
//! The floor Pods have the shape of the workload's Pods ([`Shape`]): the containers the rollout
//! updates, and the sidecars (injected by SidecarSets in the workload) it leaves alone, with the
//! labels and annotations a CloneSet Pod and its SidecarSets' injection give it. A Pod's size sets
//! what each write costs the apiserver (decoding, merging, managed fields, etcd, watch events): a
//! floor of smaller Pods than the workload's is a floor no controller can reach.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_testkit::until;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::apiserver::Requests;
use crate::process::{CpuMeter, CpuUse};

/// The gate kruise-rs (and OpenKruise) keeps a Pod out of its Services with during an update.
const GATE: &str = "InPlaceUpdateReady";
const FIRST_IMAGE: &str = "nginx:alpine";
const NEXT_IMAGE: &str = "nginx:1.19.1";
/// The names of the containers the rollout leaves alone begin with this.
const SIDECAR_PREFIX: &str = "side-";
const IN_FLIGHT: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(1800);

/// Which writes the minimal controller makes per Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Writes {
    /// The image patch alone: no drain, no gate (the absolute floor).
    ImageOnly,
    /// The gate False (`pods/status`), the image patch, the gate True once the Pod runs the new
    /// image and is ready: an in-place update that takes the Pod out of its Services first.
    DrainImageFinish,
}

impl Writes {
    pub fn describe(self) -> &'static str {
        match self {
            Writes::ImageOnly => "image patch only (1 write per Pod)",
            Writes::DrainImageFinish => "drain, image, finish (3 writes per Pod)",
        }
    }
}

/// The containers of one floor Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Containers the rollout gives a new image (at least one is: see [`Shape::updated`]).
    pub updated: usize,
    /// Containers the rollout leaves alone (a workload's injected sidecars).
    pub sidecars: usize,
}

impl Shape {
    /// `pods` Pods of `updated` containers each and no sidecar.
    pub fn uniform(pods: usize, updated: usize) -> Vec<Shape> {
        vec![
            Shape {
                updated,
                sidecars: 0
            };
            pods
        ]
    }

    /// The containers the rollout updates: a floor Pod has at least one.
    fn updated(self) -> usize {
        self.updated.max(1)
    }

    /// "N Pods (u updated container(s), s sidecar(s) on average)".
    pub fn describe(shapes: &[Shape]) -> String {
        let n = shapes.len().max(1) as f64;
        let updated = shapes.iter().map(|s| s.updated()).sum::<usize>() as f64 / n;
        let sidecars = shapes.iter().map(|s| s.sidecars).sum::<usize>() as f64 / n;
        format!(
            "{} bare Pods ({updated:.2} updated container(s) and {sidecars:.2} sidecar(s) on average)",
            shapes.len()
        )
    }
}

/// [`measure`] with each set of `writes` in turn (each in a namespace of its own), printing each
/// floor and the CPU of `processes` in it as it is measured.
pub async fn measure_each(
    client: &Client,
    shapes: &[Shape],
    writes: &[Writes],
    processes: &[(String, u32)],
) -> anyhow::Result<Vec<(Writes, Duration)>> {
    let mut floors = Vec::new();
    for (i, &writes) in writes.iter().enumerate() {
        let requests = Requests::read(client).await?;
        let (took, cpu) = measure(client, &format!("floor-{i}"), shapes, writes, processes).await?;
        let requests = Requests::read(client).await?.since(&requests);
        println!(
            "apiserver floor of an in-place rollout of {}, {}: {:.1} s",
            Shape::describe(shapes),
            writes.describe(),
            took.as_secs_f64()
        );
        println!("  CPU in it: {}", cpu.describe());
        println!(
            "  apiserver requests in it and its set-up, the most made: {}",
            requests.describe_top(12)
        );
        floors.push((writes, took));
    }
    Ok(floors)
}

/// Creates one bare Pod of each of `shapes` in `namespace`, waits until all are Ready, rolls every
/// updated container to a new image with `writes`, and returns the time from the first write until
/// a watch saw every Pod Ready at the new image, with the CPU `processes` used in that time. The
/// namespace is deleted (and its Pods gone) before it returns.
pub async fn measure(
    client: &Client,
    namespace: &str,
    shapes: &[Shape],
    writes: Writes,
    processes: &[(String, u32)],
) -> anyhow::Result<(Duration, CpuUse)> {
    let pods = shapes.len();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {namespace}"))?;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let gated = writes == Writes::DrainImageFinish;

    // Set-up, not timed: the Pods, their gate True, all Ready.
    let finisher = spawn_finisher(api.clone(), FIRST_IMAGE, gated);
    let created = futures::stream::iter(shapes.iter().copied().enumerate())
        .map(|(i, shape)| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &pod(i, shape, gated))
                    .await
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    for outcome in created {
        outcome.context("creating a floor Pod")?;
    }
    all_ready_at(&api, pods, FIRST_IMAGE).await?;
    finisher.abort();

    // Timed: the rollout.
    let began = Instant::now();
    let cpu = CpuMeter::start(processes.to_vec());
    let seen = spawn_ready_watch(api.clone(), watcher::Config::default(), pods, NEXT_IMAGE);
    let finisher = spawn_finisher(api.clone(), NEXT_IMAGE, gated);
    let updated = futures::stream::iter(shapes.iter().copied().enumerate())
        .map(|(i, shape)| {
            let api = api.clone();
            async move { update(&api, &name(i), shape.updated(), gated).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    for outcome in updated {
        outcome?;
    }
    let done = tokio::time::timeout(TIMEOUT, seen)
        .await
        .context("the floor rollout did not finish")?
        .context("the floor's Pod watch")?
        .context("the floor's Pod watch ended")?;
    let cpu = cpu.read();
    finisher.abort();
    let took = done.saturating_duration_since(began);

    namespaces
        .delete(namespace, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting namespace {namespace}"))?;
    until(
        format!("namespace {namespace} gone"),
        Duration::from_secs(600),
        || async { Ok(namespaces.get_opt(namespace).await?.is_none()) },
    )
    .await?;
    Ok((took, cpu))
}

fn name(i: usize) -> String {
    format!("floor-{i}")
}

/// The updated containers of a floor Pod, each running `image`.
fn containers_at(containers: usize, image: &str) -> serde_json::Value {
    (0..containers)
        .map(|c| json!({"name": format!("c{c}"), "image": image}))
        .collect()
}

/// A floor Pod's containers at creation: the updated ones, then the sidecars.
fn all_containers(shape: Shape) -> serde_json::Value {
    let mut containers = containers_at(shape.updated(), FIRST_IMAGE);
    if let Some(list) = containers.as_array_mut() {
        list.extend((0..shape.sidecars).map(
            |s| json!({"name": format!("{SIDECAR_PREFIX}{s}"), "image": format!("sidecar:{s}")}),
        ));
    }
    containers
}

/// The labels every CloneSet Pod carries (its revision, instance id and lifecycle state), with
/// values of the lengths kruise-rs and OpenKruise give them.
fn labels(i: usize) -> serde_json::Value {
    json!({
        "app": "floor",
        "apps.kruise.io/cloneset-instance-id": format!("{i:05}"),
        "controller-revision-hash": "floor-56f55495d5",
        "lifecycle.apps.kruise.io/state": "Normal",
        "pod-template-hash": "56f55495d5",
    })
}

/// The annotations the SidecarSet webhook gives a Pod it injects `sidecars` sidecars into (one
/// hash entry per sidecar, with and without the image, and the list), as kruise-rs and OpenKruise
/// write them; none without sidecars.
fn annotations(sidecars: usize) -> serde_json::Value {
    if sidecars == 0 {
        return json!({});
    }
    let hash = "24b62v82v6ww2vzdcffv8d64bfxv2f2x4x9d5vc48vbc5847fw9cv74xxb9ccb88";
    let entry = |s: usize, revision: bool| {
        let name = format!("{SIDECAR_PREFIX}{s}");
        let mut entry = json!({"updateTimestamp": "2026-01-01T00:00:00Z", "hash": hash,
            "sidecarSetName": name, "sidecarList": [name]});
        if revision {
            entry["controllerRevision"] = json!(format!("{name}-5f849ff4cc"));
        }
        (name, entry)
    };
    let hashes = |revision: bool| {
        let map: serde_json::Map<String, serde_json::Value> =
            (0..sidecars).map(|s| entry(s, revision)).collect();
        serde_json::Value::Object(map).to_string()
    };
    let names: Vec<String> = (0..sidecars)
        .map(|s| format!("{SIDECAR_PREFIX}{s}"))
        .collect();
    json!({
        "kruise.io/sidecarset-hash": hashes(true),
        "kruise.io/sidecarset-hash-without-image": hashes(false),
        "kruise.io/sidecarset-injected-list": names.join(","),
    })
}

/// A floor Pod: the workload Pod's containers, labels and annotations (what a write and a watch
/// event of it cost grows with them), without an owner (the garbage collector would delete a Pod
/// whose owner does not exist).
fn pod(i: usize, shape: Shape, gated: bool) -> Pod {
    let gates = if gated {
        json!([{"conditionType": GATE}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name(i), "labels": labels(i), "annotations": annotations(shape.sidecars)},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "readinessGates": gates,
            "containers": all_containers(shape)
        }
    }))
    .unwrap_or_default()
}

/// The writes that start one Pod's update: the gate False (when gated), then the images.
async fn update(api: &Api<Pod>, name: &str, containers: usize, gated: bool) -> anyhow::Result<()> {
    if gated {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(gate(false)),
        )
        .await
        .with_context(|| format!("draining {name}"))?;
    }
    let image = json!({"spec": {"containers": containers_at(containers, NEXT_IMAGE)}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(image))
        .await
        .with_context(|| format!("patching the image of {name}"))?;
    Ok(())
}

fn gate(ready: bool) -> serde_json::Value {
    json!({"status": {"conditions": [{
        "type": GATE,
        "status": if ready { "True" } else { "False" },
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}})
}

/// Sets the gate True once on every Pod that runs `image` with every container ready and a gate
/// that is not True yet (nothing, when the Pods are not gated).
fn spawn_finisher(api: Api<Pod>, image: &str, gated: bool) -> tokio::task::JoinHandle<()> {
    let image = image.to_owned();
    tokio::spawn(async move {
        if !gated {
            return;
        }
        let stream = watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .touched_objects();
        let mut stream = std::pin::pin!(stream);
        let mut finished: BTreeSet<String> = BTreeSet::new();
        while let Some(event) = stream.next().await {
            let Ok(pod) = event else { continue };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if finished.contains(&name) || !containers_ready_at(&pod, &image) || gate_true(&pod) {
                continue;
            }
            finished.insert(name.clone());
            let api = api.clone();
            tokio::spawn(async move {
                let _ = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Strategic(gate(true)),
                    )
                    .await;
            });
        }
    })
}

/// When a watch on `api` (with `config`) first sees `wanted` Pods Ready, not being deleted, with every
/// container running `image` and ready: what the Pods show, as opposed to what a workload's status says.
pub fn spawn_ready_watch(
    api: Api<Pod>,
    config: watcher::Config,
    wanted: usize,
    image: &str,
) -> tokio::task::JoinHandle<Option<Instant>> {
    let image = image.to_owned();
    tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().touched_objects();
        let mut stream = std::pin::pin!(stream);
        let mut ready: BTreeSet<String> = BTreeSet::new();
        while let Some(event) = stream.next().await {
            let Ok(pod) = event else { continue };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if pod.metadata.deletion_timestamp.is_none()
                && pod_ready(&pod)
                && containers_ready_at(&pod, &image)
            {
                ready.insert(name);
            } else {
                ready.remove(&name);
            }
            if ready.len() >= wanted {
                return Some(Instant::now());
            }
        }
        None
    })
}

async fn all_ready_at(api: &Api<Pod>, wanted: usize, image: &str) -> anyhow::Result<()> {
    let seen = spawn_ready_watch(api.clone(), watcher::Config::default(), wanted, image);
    tokio::time::timeout(TIMEOUT, seen)
        .await
        .context("the floor Pods did not become Ready")??
        .context("the floor's Pod watch ended")?;
    Ok(())
}

fn condition_true(pod: &Pod, type_: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn pod_ready(pod: &Pod) -> bool {
    condition_true(pod, "Ready")
}

fn gate_true(pod: &Pod) -> bool {
    condition_true(pod, GATE)
}

/// Every container is ready, and every one but the sidecars runs `image`.
fn containers_ready_at(pod: &Pod, image: &str) -> bool {
    let containers = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    !containers.is_empty()
        && containers
            .iter()
            .all(|c| c.ready && (c.name.starts_with(SIDECAR_PREFIX) || c.image == image))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_pod_carries_its_sidecars_annotations() {
        assert_eq!(annotations(0), json!({}));
        let two = annotations(2);
        assert_eq!(two["kruise.io/sidecarset-injected-list"], "side-0,side-1");
        for (key, with_revision) in [
            ("kruise.io/sidecarset-hash", true),
            ("kruise.io/sidecarset-hash-without-image", false),
        ] {
            let hashes: serde_json::Value =
                serde_json::from_str(two[key].as_str().unwrap_or_default()).unwrap_or_default();
            let entries = hashes.as_object().map(|m| m.len());
            assert_eq!(entries, Some(2), "{key}: {hashes}");
            assert_eq!(
                hashes["side-1"].get("controllerRevision").is_some(),
                with_revision,
                "{key}"
            );
        }
        let pod = pod(
            7,
            Shape {
                updated: 2,
                sidecars: 2,
            },
            true,
        );
        let labels = pod.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels
                .get("apps.kruise.io/cloneset-instance-id")
                .map(String::as_str),
            Some("00007")
        );
        assert_eq!(pod.spec.map(|s| s.containers.len()), Some(4));
    }
}
