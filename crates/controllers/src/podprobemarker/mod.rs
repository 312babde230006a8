//! The PodProbeMarker controller (upstream `pkg/controller/podprobemarker`, `PodProbeMarkerGate`) and,
//! in [`nodepodprobe`], the NodePodProbe controller.
//!
//! Observe: the marker, the Pods its selector matches (shared Pod cache; a Pod is read from the
//! apiserver only when its IP or its container ports are needed), their Nodes, the NodePodProbes.
//! Decide: `kruise_core::podprobemarker`. Act: put the `kruise.io/node-pod-probe-cleanup` finalizer on the
//! marker; write the marker's probes (named ports resolved) into the NodePodProbe of each matched
//! Pod's node (Pods on virtual-kubelet nodes run no daemon and are left out; a node without a
//! NodePodProbe yet is skipped until the NodePodProbe controller creates it); report `matchedPods` and
//! `observedGeneration`. When the marker is deleted, its probes leave every NodePodProbe and the
//! finalizer goes.

pub mod nodepodprobe;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::podprobemarker::{self as ppm, NodePodProbe, NodePodProbeSpec, PodProbeMarker};
use kruise_core::podprobemarker::{self as decide, PodProbes};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, PodCache};
use crate::driver::caches::{Caches, Shared};
use crate::driver::write::write_status;
use crate::driver::writes::{ApiWrites, At, LiveReads, Part, Writer, Writes, get_live};
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "podprobemarker-controller";

const RACE_RETRY: Duration = Duration::from_millis(500);

///
/// A matched Pod is read live ([`LiveReads`]) when its IP or container ports are needed: the Pod
/// cache keeps neither.
pub struct Context {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    metrics: Arc<Metrics>,
    pods: Arc<PodCache>,
    nodes: Shared<Node>,
    probes: Shared<NodePodProbe>,
    /// `EnablePodProbeMarkerOnServerless`: Pods on virtual-kubelet nodes report the probes'
    /// conditions themselves; the controller puts the marker policies' labels and annotations on them.
    serverless: bool,
}

crate::driver::driven!(Context, CONTROLLER);

/// Concurrent reconciles of the two controllers (`--podprobemarker-workers`,
/// `--nodepodprobe-workers`; 3 each, as OpenKruise's).
#[derive(Clone, Copy, Debug)]
pub struct Workers {
    pub markers: u16,
    pub node_probes: u16,
}

impl Default for Workers {
    fn default() -> Self {
        Self {
            markers: 3,
            node_probes: 3,
        }
    }
}

/// Runs the PodProbeMarker controller and, with `node_probes` (`KruiseDaemon`), the NodePodProbe
/// controller, on one NodePodProbe watch, until the future is dropped.
pub async fn run_all(
    client: Client,
    caches: Caches,
    metrics: Arc<Metrics>,
    node_probes: bool,
    serverless: bool,
    workers: Workers,
) {
    let probes = caches.shared::<NodePodProbe>();
    let markers = run(
        client.clone(),
        caches.clone(),
        probes.clone(),
        metrics.clone(),
        serverless,
        workers.markers,
    );
    let nodes = async {
        if node_probes {
            nodepodprobe::run(client, caches, probes, metrics, workers.node_probes).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = markers => {}
        () = nodes => {}
    }
}

/// Runs the controller until the future is dropped. `probes` is the NodePodProbe watch (shared with
/// the NodePodProbe controller); the markers are the process's cache (the Pod webhook reads it too).
pub async fn run(
    client: Client,
    caches: Caches,
    probes: Shared<NodePodProbe>,
    metrics: Arc<Metrics>,
    serverless: bool,
    workers: u16,
) {
    let markers = caches.podprobemarkers.store().clone();
    let controller =
        Controller::for_stream(caches.podprobemarkers.replayed_stream(), markers.clone());
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    wake_on_pods(caches.pods.clone(), markers, wake_tx);
    let cluster = ApiWrites::new(client);
    let ctx = Arc::new(Context {
        writes: cluster.clone(),
        live: cluster,
        metrics,
        pods: caches.pods.clone(),
        nodes: caches.nodes.clone(),
        probes,
        serverless,
    });
    let controller = controller.reconcile_on(crate::cache::receiver_stream(wake_rx));
    crate::driver::run(controller, workers.max(1), reconcile, ctx).await;
}

/// Wakes the markers whose selector matches a changed (not deleted) Pod.
fn wake_on_pods(
    pods: Arc<PodCache>,
    markers: Store<PodProbeMarker>,
    wake: mpsc::UnboundedSender<ObjectRef<PodProbeMarker>>,
) {
    let mut events = pods.subscribe("podprobemarker");
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let all = match event {
                CacheEvent::Pod(change) if !change.deleted => markers
                    .state()
                    .into_iter()
                    .filter(|m| {
                        m.namespace().as_deref() == Some(change.key.0.as_str())
                            && !kruise_api::validation::selector_is_empty(&m.spec.selector)
                            && change.labels.matches(&m.spec.selector)
                    })
                    .collect::<Vec<_>>(),
                CacheEvent::Resync => markers.state(),
                _ => continue,
            };
            if !all
                .iter()
                .all(|m| wake.send(ObjectRef::from_obj(m.as_ref())).is_ok())
            {
                return;
            }
        }
    });
}

fn raced(result: Result<(), Error>) -> Result<Action, Error> {
    match result {
        Ok(()) => Ok(Action::await_change()),
        Err(Error::Kube { source, .. }) if is_race(&source) => Ok(Action::requeue(RACE_RETRY)),
        Err(error) => Err(error),
    }
}

async fn reconcile(marker: Arc<PodProbeMarker>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !crate::cache::listed(ctx.probes.store()) || !crate::cache::listed(ctx.nodes.store()) {
        return Ok(Action::requeue(crate::cache::NOT_LISTED_RETRY));
    }
    raced(sync(&marker, &ctx).await)
}

async fn sync(marker: &PodProbeMarker, ctx: &Context) -> Result<(), Error> {
    let namespace = marker.namespace().unwrap_or_default();
    let name = marker.name_any();
    let api = Writer::<PodProbeMarker>::namespaced(ctx.writes.clone(), &namespace);
    let has_finalizer = marker.finalizers().iter().any(|f| f == ppm::FINALIZER);
    if marker.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(());
        }
        for npp in ctx.probes.store().state() {
            let spec = decide::remove_marker(&npp.spec, &namespace, &name);
            write_spec(ctx.writes.as_ref(), &npp, &spec).await?;
        }
        let kept: Vec<&String> = marker
            .finalizers()
            .iter()
            .filter(|f| *f != ppm::FINALIZER)
            .collect();
        let patch =
            json!({"metadata": {"finalizers": kept, "resourceVersion": marker.resource_version()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context(|| format!("removing the finalizer of PodProbeMarker {namespace}/{name}"))?;
        tracing::info!(marker = %format!("{namespace}/{name}"), "removed the PodProbeMarker's probes from the NodePodProbes");
        return Ok(());
    }
    if !has_finalizer {
        let mut all = marker.finalizers().to_vec();
        all.push(ppm::FINALIZER.to_owned());
        let patch =
            json!({"metadata": {"finalizers": all, "resourceVersion": marker.resource_version()}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context(|| format!("adding the finalizer of PodProbeMarker {namespace}/{name}"))?;
        // The patch wakes the marker again.
        return Ok(());
    }

    // The matched Pods, by node; Pods on virtual-kubelet nodes (and on unknown nodes) are counted
    // but get no probes.
    let matched: Vec<Arc<Pod>> = if kruise_api::validation::selector_is_empty(&marker.spec.selector)
    {
        Vec::new()
    } else {
        ctx.pods
            .select(Some(&namespace), |labels| {
                labels.matches(&marker.spec.selector)
            })
            .into_iter()
            .filter(|p| decide::is_probe_candidate(p))
            .collect()
    };
    let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    let mut counted = 0_i64;
    for pod in matched {
        let Some(node_name) = kruise_core::pods::node_name(&pod).map(str::to_owned) else {
            continue;
        };
        let Some(node) = ctx.nodes.store().get(&ObjectRef::new(&node_name)) else {
            continue;
        };
        counted += 1;
        if decide::is_virtual_kubelet(node.metadata.labels.as_ref()) {
            if ctx.serverless {
                mark_serverless(ctx, marker, &pod).await?;
            }
            continue;
        }
        by_node.entry(node_name).or_default().push(pod);
    }
    let needs_ports = marker.spec.probes.iter().any(|p| {
        let named = |port: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| {
            matches!(
                port,
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(_)
            )
        };
        p.probe.tcp_socket.as_ref().is_some_and(|t| named(&t.port))
            || p.probe.http_get.as_ref().is_some_and(|h| named(&h.port))
    });
    for (node_name, pods) in by_node {
        let Some(npp) = ctx.probes.store().get(&ObjectRef::new(&node_name)) else {
            tracing::info!(marker = %format!("{namespace}/{name}"), node = node_name, "no NodePodProbe for the node yet");
            continue;
        };
        let mut wanted = Vec::with_capacity(pods.len());
        for cached in pods {
            let uid = cached.metadata.uid.clone().unwrap_or_default();
            let pod_name = cached.name_any();
            let entry_ip = npp
                .spec
                .pod_probes
                .iter()
                .find(|p| p.namespace == namespace && p.name == pod_name && p.uid == uid)
                .map(|p| p.ip.clone())
                .filter(|ip| !ip.is_empty());
            // The cache keeps neither the Pod's IP nor its container ports: read the Pod when
            // either is needed.
            let (pod, ip) = match entry_ip {
                Some(ip) if !needs_ports => (cached, ip),
                _ => {
                    let Some(full) =
                        get_live::<Pod>(ctx.live.as_ref(), Some(&namespace), &pod_name)
                            .await
                            .context(|| format!("reading Pod {namespace}/{pod_name}"))?
                    else {
                        continue;
                    };
                    if full.metadata.uid.as_deref() != Some(uid.as_str()) {
                        continue;
                    }
                    let ip = full
                        .status
                        .as_ref()
                        .and_then(|s| s.pod_ip.clone())
                        .unwrap_or_default();
                    (Arc::new(full), ip)
                }
            };
            let (probes, errors) = decide::node_probes_for(marker, &pod);
            for error in errors {
                tracing::warn!(marker = %format!("{namespace}/{name}"), pod = pod_name, error, "probe left out");
            }
            wanted.push(PodProbes {
                name: pod_name,
                namespace: namespace.clone(),
                uid,
                ip,
                probes,
            });
        }
        let spec = decide::apply_marker(&npp.spec, &name, &wanted);
        write_spec(ctx.writes.as_ref(), &npp, &spec).await?;
    }

    let new = ppm::PodProbeMarkerStatus {
        observed_generation: marker.metadata.generation.unwrap_or_default(),
        matched_pods: counted,
    };
    // Guarded by the resourceVersion it was computed on: a stale copy's count is dropped, and the
    // reconcile of the newer copy (its watch event) counts again.
    let old = marker.status.as_ref();
    write_status(&api, marker, old, &new, old != Some(&new)).await?;
    Ok(())
}

/// Puts on a Pod of a virtual-kubelet node the labels and annotations `marker`'s policies give the
/// conditions its kubelet reported (`EnablePodProbeMarkerOnServerless`).
async fn mark_serverless(ctx: &Context, marker: &PodProbeMarker, pod: &Pod) -> Result<(), Error> {
    let update = decide::serverless_marks(marker, pod);
    if update.labels.is_empty() && update.annotations.is_empty() {
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
    let patch = json!({"metadata": {"labels": update.labels, "annotations": update.annotations}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(marker = marker.name_any(), pod = %format!("{namespace}/{name}"), "marked a serverless Pod from its probe conditions");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error).context(|| format!("marking Pod {namespace}/{name}")),
    }
}

/// Writes a NodePodProbe's spec when it changed, over its resourceVersion.
pub(crate) async fn write_spec(
    writes: &dyn Writes,
    npp: &NodePodProbe,
    spec: &NodePodProbeSpec,
) -> Result<(), Error> {
    if &npp.spec == spec {
        return Ok(());
    }
    let name = npp.name_any();
    let patch = json!({
        "metadata": {"resourceVersion": npp.resource_version()},
        "spec": {"podProbes": spec.pod_probes},
    });
    let at = At::of::<NodePodProbe>(None);
    writes
        .patch(&at, &name, Part::Object, Patch::Merge(patch))
        .await
        .context(|| format!("writing the spec of NodePodProbe {name}"))?;
    tracing::debug!(
        node = name,
        pods = spec.pod_probes.len(),
        "NodePodProbe spec written"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher;
    use serde_json::Value;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb, listed};

    /// Pod `p` (app=a) on node `n1` at 10.0.0.5 in the cluster, and in the cache without its IP.
    fn context(cluster: &Arc<FakeCluster>, probes: Vec<NodePodProbe>) -> Context {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid", "labels": {"app": "a"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "conditions": [{"type": "Initialized", "status": "True"}]},
        }))
        .expect("a Pod");
        cluster.insert(&pod);
        let pods = PodCache::new();
        pods.apply(watcher::Event::Apply(pod));
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("a Node");
        let mut registry = prometheus_client::registry::Registry::default();
        Context {
            writes: cluster.clone(),
            live: cluster.clone(),
            metrics: Metrics::register(&mut registry),
            pods,
            nodes: Shared::from_store(listed(vec![node])),
            probes: Shared::from_store(listed(probes)),
            serverless: false,
        }
    }

    fn marker(extra: Value) -> PodProbeMarker {
        let mut marker = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "PodProbeMarker",
            "metadata": {"name": "m", "namespace": "ns", "uid": "m-uid", "generation": 2,
                         "finalizers": [ppm::FINALIZER]},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "probes": [{
                "name": "healthy", "containerName": "c",
                "probe": {"exec": {"command": ["true"]}},
            }]},
        });
        json_patch::merge(&mut marker, &extra);
        serde_json::from_value(marker).expect("a PodProbeMarker")
    }

    fn node_probe(cluster: &FakeCluster) -> NodePodProbe {
        cluster.insert(&NodePodProbe::new("n1", NodePodProbeSpec::default()))
    }

    #[tokio::test]
    async fn a_matched_pod_gets_its_probes_on_its_node_with_its_live_ip() {
        let cluster = FakeCluster::new();
        let npp = node_probe(&cluster);
        let ctx = context(&cluster, vec![npp]);
        let cached = cluster.insert(&marker(json!({})));
        sync(&cached, &ctx).await.expect("synced");
        let npp: NodePodProbe = cluster.get(None, "n1").expect("the NodePodProbe");
        let entries: Vec<_> = npp
            .spec
            .pod_probes
            .iter()
            .map(|p| (p.name.as_str(), p.ip.as_str(), p.probes.len()))
            .collect();
        assert_eq!(entries, [("p", "10.0.0.5", 1)]);
        let status = cluster
            .get::<PodProbeMarker>(Some("ns"), "m")
            .and_then(|m| m.status)
            .expect("a status");
        assert_eq!((status.matched_pods, status.observed_generation), (1, 2));
    }

    /// A NodePodProbe or marker that moved is decided again (no failure); any other refusal fails.
    #[tokio::test]
    async fn refusals_of_the_node_probe_write_by_code() {
        for (code, race) in [(409, true), (404, true), (422, false)] {
            let cluster = FakeCluster::new();
            let npp = node_probe(&cluster);
            let ctx = context(&cluster, vec![npp]);
            let cached = cluster.insert(&marker(json!({})));
            cluster.fail_next(Verb::Patch, "n1", code);
            let outcome = raced(sync(&cached, &ctx).await);
            match race {
                true => assert_eq!(outcome.ok(), Some(Action::requeue(RACE_RETRY)), "{code}"),
                false => assert!(outcome.is_err(), "{code}"),
            }
            let npp: NodePodProbe = cluster.get(None, "n1").expect("the NodePodProbe");
            assert!(npp.spec.pod_probes.is_empty(), "{code}");
        }
    }

    #[tokio::test]
    async fn a_deleted_marker_takes_its_probes_away_then_its_finalizer() {
        let cluster = FakeCluster::new();
        let npp = node_probe(&cluster);
        let ctx = context(&cluster, vec![npp]);
        let cached = cluster.insert(&marker(json!({})));
        sync(&cached, &ctx).await.expect("synced");
        let filled: NodePodProbe = cluster.get(None, "n1").expect("the NodePodProbe");
        assert_eq!(filled.spec.pod_probes.len(), 1);
        let ctx = context(&cluster, vec![filled]);
        let deleting = marker(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        let deleting = cluster.insert(&deleting);
        sync(&deleting, &ctx).await.expect("synced");
        let emptied: NodePodProbe = cluster.get(None, "n1").expect("the NodePodProbe");
        assert!(emptied.spec.pod_probes.is_empty());
        // Its last finalizer gone, the marker is gone.
        assert!(cluster.get::<PodProbeMarker>(Some("ns"), "m").is_none());
    }
}
