//! The WorkloadSpread controller (upstream `pkg/controller/workloadspread`): for each
//! WorkloadSpread, find its workload's Pods in the shared Pod cache, adopt the Pods that run in a
//! subset without saying so (the `matched-workloadspread` annotation, and the subset patch's
//! metadata), write `controller.kubernetes.io/pod-deletion-cost` per subset and version, write the
//! status (`kruise_core::workloadspread::compute_status`) over the resourceVersion it was computed
//! from, and, with the Adaptive strategy, delete the Pods that stayed unschedulable in a subset so
//! that their replacements go to the next one.
//!
//! The Pod webhook (`kruise_webhook::workloadspread`) places new Pods and records them in the
//! status; the controller is what keeps the records honest (expiring them) and the counts right.

pub mod slots;
pub mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::validation::selector_matches;
use kruise_api::workloadspread::{
    ANNOTATION_DELETION_COST, ANNOTATION_IGNORE_PATCH_EXISTING, ANNOTATION_MATCHED,
    MatchedWorkloadSpread, WorkloadSpread, WorkloadSpreadStatus,
};
use kruise_core::workloadspread::{self as core, Finding};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::cache::PodCache;
use crate::driver::caches::{Caches, Shared};
use crate::driver::write::{StatusWrite, write_status};
use crate::driver::writes::{ApiWrites, LiveReads, Writer, Writes, get_live};
use crate::error::{Error, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "workloadspread-controller";

/// Computed again at least this often: the workload's scale can change without a Pod changing.
const RESYNC: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Config {
    pub workers: u16,
    /// The manager's namespace, where kruise-configuration lists custom workload kinds.
    pub configuration_namespace: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            configuration_namespace: "kruise-system".into(),
        }
    }
}

///
/// Its gated Pods are read live ([`LiveReads`]): the cache's projection has no scheduling gates.
pub struct Context {
    /// The target workload's live reads (`workload`: a Deployment's ReplicaSets, the custom
    /// workloads' replicas path).
    client: Client,
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    /// The slots taken for gated Pods, committed as the webhook's are.
    slots: Arc<slots::Slots>,
    pods: Arc<PodCache>,
    nodes: Shared<Node>,
    recorder: EventRecorder,
    metrics: Arc<Metrics>,
    configuration_namespace: String,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    // The process's WorkloadSpread cache (the Pod webhook places Pods by it): every spread once it
    // is listed, then every change, status included (the webhook records its placements there).
    let spreads = caches.workloadspreads.store().clone();
    let controller =
        Controller::for_stream(caches.workloadspreads.replayed_stream(), spreads.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    // As v1.9.0's Pod handler: a spread is woken by the changes of the Pods it placed (their
    // `matched-workloadspread` names it), and by Pods going away; a Pod of its workload that fits
    // no subset does not wake it (its deletion cost waits for the next reconcile, as upstream's
    // does: its e2e `only one subset, zone-a=2` asserts it). Besides, kruise-rs's Pods waiting
    // behind the placement gate wake every spread of their namespace.
    let cached = caches.pods.clone();
    crate::driver::wake::wake_on_pod_changes(
        caches.pods.subscribe("workloadspread"),
        spreads,
        tx,
        Some(all_tx),
        move |ws: &WorkloadSpread, change: &crate::cache::PodChange| {
            change.deleted
                || change
                    .labels
                    .get(kruise_api::workloadspread::LABEL_PLACEMENT_PENDING)
                    .is_some()
                || cached
                    .metadata(&change.key.0, &change.key.1)
                    .and_then(|m| m.annotations)
                    .and_then(|a| {
                        a.get(ANNOTATION_MATCHED)
                            .and_then(|v| MatchedWorkloadSpread::parse(v))
                    })
                    .is_some_and(|m| Some(m.name.as_str()) == ws.metadata.name.as_deref())
        },
    );
    caches.pods.wait_synced().await;
    caches.nodes.wait_listed().await;
    let cluster = ApiWrites::new(client.clone());
    tokio::spawn(release_forgotten_gates(
        cluster.clone(),
        caches.pods.clone(),
    ));
    let ctx = Arc::new(Context {
        writes: cluster.clone(),
        live: cluster,
        // The process's, shared with the webhook (a process without one, in tests, makes its own:
        // the resourceVersion guard keeps the two apart).
        slots: caches.workloadspread_slots.clone().unwrap_or_else(|| {
            slots::on_apiserver(
                &client,
                &config.configuration_namespace,
                Some(caches.workloadspreads.store().clone()),
                crate::ledger::commit::CommitMetrics::default(),
            )
        }),
        client: client.clone(),
        pods: caches.pods,
        nodes: caches.nodes,
        recorder: crate::driver::recorder(client, CONTROLLER),
        metrics,
        configuration_namespace: config.configuration_namespace.clone(),
    });
    let controller = controller
        .reconcile_on(crate::cache::receiver_stream(rx))
        .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile, ctx).await;
}

/// How long a Pod may wait behind the placement gate before it is let go unplaced, whoever should
/// have placed it (its WorkloadSpread deleted, or never reconciled).
const GATE_PATIENCE: Duration = Duration::from_secs(60);
/// How often the gated Pods are looked over for that.
const GATE_SWEEP_EVERY: Duration = Duration::from_secs(15);

/// Lets go, unplaced, every Pod that waited behind the placement gate longer than
/// [`GATE_PATIENCE`]: a gate nobody lifts would keep the Pod Pending for ever.
async fn release_forgotten_gates(cluster: Arc<ApiWrites>, pods: Arc<PodCache>) {
    let mut every = tokio::time::interval(GATE_SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let gated = pods.select(None, |labels| {
            labels
                .get(kruise_api::workloadspread::LABEL_PLACEMENT_PENDING)
                .is_some()
        });
        let now = Timestamp::now();
        for pod in &gated {
            let waited = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| now.duration_since(t.0));
            if waited.is_none_or(|w| w < GATE_PATIENCE.try_into().unwrap_or_default()) {
                continue;
            }
            let namespace = pod.namespace().unwrap_or_default();
            let api = Writer::<Pod>::namespaced(cluster.clone(), &namespace);
            // Read whole: the cache's projection has no scheduling gates.
            let name = pod.name_any();
            let read = get_live::<Pod>(cluster.as_ref(), Some(&namespace), &name);
            let live = match read.await {
                Ok(Some(live)) => live,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, pod = %pod.name_any(), "cannot read a Pod waiting for placement");
                    continue;
                }
            };
            let patch = core::gate::release_patch(&live);
            match api
                .patch(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    tracing::warn!(pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), "let a Pod go unplaced: it waited behind the WorkloadSpread placement gate too long")
                }
                Err(error) if is_race(&error) => {}
                Err(error) => {
                    tracing::warn!(%error, pod = %pod.name_any(), "cannot lift the WorkloadSpread placement gate")
                }
            }
        }
    }
}

/// Places the Pods of `ws` that the webhook admitted behind the placement gate: a slot taken for
/// each (committed together), its subset's scheduling directives and metadata written and the gate
/// lifted in one patch over the version read; a Pod no subset has room for, or that a subset
/// cannot be applied to after creation, is let go unplaced. A Pod changed meanwhile is left to
/// the next reconcile.
async fn place_gated(
    ctx: &Context,
    ws: &Arc<WorkloadSpread>,
    api: &Writer<Pod>,
    gated: &[Arc<Pod>],
) -> Result<(), Error> {
    let namespace = ws.namespace().unwrap_or_default();
    let name = ws.name_any();
    let key = (namespace.clone(), name.clone());
    let now = Timestamp::now();
    let decided = futures::future::join_all(gated.iter().map(|pod| {
        let key = key.clone();
        async move {
            // Gate lifted by someone else (only its label is left), or a subset that cannot be
            // applied now: let go unplaced.
            if !core::gate::is_gated(pod) || !core::gate::placeable_after_creation(ws, pod) {
                return None;
            }
            // The slot the webhook asked for it before it had a name, when that write landed
            // after all, is its own.
            let request = slots::SlotRequest::Take {
                pod_name: Some(pod.name_any()),
                version: core::pod_version(pod),
                uid: core::gate::pending_slot(pod).unwrap_or_default().to_owned(),
                now,
            };
            Some(ctx.slots.submit(key, request).await)
        }
    }))
    .await;
    for (pod, decision) in gated.iter().zip(decided) {
        let pod_name = pod.name_any();
        let placed = match decision {
            // The subset as decided (a copy read now may have another spec).
            Some(Ok(slots::Slot {
                spec: Some(subset),
                uid,
                ..
            })) => core::inject(&name, &subset, pod, &uid).ok(),
            Some(Ok(_)) | None => None,
            Some(Err(error)) => {
                tracing::warn!(%error, workloadspread = %format!("{namespace}/{name}"), pod = %pod_name, "cannot take a slot for a gated Pod yet");
                continue;
            }
        };
        let patch = match &placed {
            Some(placed) => core::gate::placement_patch(pod, placed),
            None => core::gate::release_patch(pod),
        };
        let lifted = api
            .merge_patch_unless_raced(&pod_name, &patch)
            .await
            .map_err(kube_error(format!(
                "lifting the placement gate of Pod {namespace}/{pod_name}"
            )))?;
        if lifted {
            tracing::info!(workloadspread = %format!("{namespace}/{name}"), pod = %pod_name, placed = placed.is_some(), "lifted the placement gate of a Pod");
        }
    }
    Ok(())
}

fn kube_error(context: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { context, source }
}

async fn reconcile(ws: Arc<WorkloadSpread>, ctx: Arc<Context>) -> Result<Action, Error> {
    if ws.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(target) = ws.spec.target_reference.clone() else {
        return Ok(Action::await_change());
    };
    let namespace = ws.namespace().unwrap_or_default();
    let name = ws.name_any();
    // The placements the Pod webhook recorded since the cache's copy: computed over them, the
    // status write does not conflict with them.
    let key = (namespace.clone(), name.clone());
    let ws = ctx
        .slots
        .known(&key)
        .filter(|known| known.metadata.uid == ws.metadata.uid)
        .unwrap_or(ws);
    let object = workload::get(&ctx.client, &ws).await?;
    let (pods, replicas) = match &object {
        None => (Vec::new(), 0),
        Some(object) => {
            let owners = workload::pod_owners(&ctx.client, &namespace, &target, object).await?;
            let selector = ws
                .spec
                .target_filter
                .as_ref()
                .and_then(|f| f.selector.as_ref());
            let pods: Vec<Arc<Pod>> = owners
                .iter()
                .flat_map(|uid| ctx.pods.owned_by(uid))
                .filter(|p| {
                    selector.is_none_or(|s| {
                        selector_matches(s, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                    })
                })
                .collect();
            let custom_path =
                workload::custom_replicas_path(&ctx.client, &ctx.configuration_namespace, &ws)
                    .await?;
            (
                pods,
                workload::replicas(&ws, object, custom_path.as_deref()),
            )
        }
    };
    let pod_api = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
    // The cache's projection of a Pod has no scheduling gates: gated Pods are found by their
    // label and read whole.
    let pending: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && core::gate::is_pending(p))
        .collect();
    if !pending.is_empty() {
        let mut gated = Vec::with_capacity(pending.len());
        for pod in pending {
            if let Some(live) =
                get_live::<Pod>(ctx.live.as_ref(), Some(&namespace), &pod.name_any())
                    .await
                    .map_err(kube_error(format!(
                        "reading gated Pod {namespace}/{}",
                        pod.name_any()
                    )))?
            {
                gated.push(Arc::new(live));
            }
        }
        // The Pods placed now change, and their changes wake this WorkloadSpread again.
        place_gated(&ctx, &ws, &pod_api, &gated).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let refs: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
    let node_store = ctx.nodes.store().clone();
    let nodes: Vec<Arc<Node>> = refs
        .iter()
        .filter_map(|p| kruise_core::pods::node_name(p))
        .filter_map(|n| node_store.get(&ObjectRef::new(n)))
        .collect();
    let grouping = core::group_pods(&ws, &refs, replicas, |name| {
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .map(|n| &**n)
    });
    adopt(&pod_api, &ws, &refs, &grouping.adopted).await?;
    if core::deletion_cost_kind(&target.kind)
        && let Some(object) = &object
    {
        match workload::latest_version(&ctx.client, &namespace, &target, object).await? {
            Some(latest) => {
                for (version, groups) in &grouping.by_version {
                    let costs =
                        core::deletion_costs(&ws, groups, &refs, replicas, *version != latest);
                    write_costs(&pod_api, &refs, &costs).await?;
                }
            }
            // The workload's controller has not caught up with its spec yet: costs wait.
            None => {
                tracing::debug!(workloadspread = %format!("{namespace}/{name}"), "latest version of the workload not known yet")
            }
        }
    }
    let now = Timestamp::now();
    let plan =
        core::compute_status(&ws, &refs, &grouping, replicas, now).map_err(Error::Invalid)?;
    publish_findings(&ctx, &ws, &plan.findings).await;
    let api = Writer::<WorkloadSpread>::namespaced(ctx.writes.clone(), &namespace);
    let changed = core::status_changed(ws.status.as_ref(), &plan.status);
    match write(&api, &ws, &plan.status, changed).await? {
        StatusWrite::Stale => return Ok(Action::requeue(Duration::from_millis(200))),
        StatusWrite::Written { resource_version } => {
            // What the apiserver stored (the write was over `ws`'s resourceVersion): the next
            // placements are decided over it.
            let mut written = WorkloadSpread::clone(&ws);
            written.status = Some(plan.status.clone());
            written.metadata.resource_version = resource_version;
            ctx.slots.observe(key, written);
        }
        StatusWrite::Unchanged => {}
    }
    reschedule(&ctx, &ws, &pod_api, &refs, &plan.reschedule).await?;
    let wait = plan
        .requeue_after
        .map_or(RESYNC, |d| d.min(RESYNC) + Duration::from_millis(100));
    Ok(Action::requeue(wait))
}

/// The Events of what the status computation found: Pods expected and not seen, subsets
/// schedulable again.
async fn publish_findings(ctx: &Context, ws: &WorkloadSpread, findings: &[Finding]) {
    let namespace = ws.namespace().unwrap_or_default();
    let name = ws.name_any();
    for finding in findings {
        let (type_, reason, note) = match finding {
            Finding::CreateExpired(pod) => (
                EventType::Warning,
                "CreatePodFailed",
                format!("Pod {namespace}/{pod} was expected to be created but it wasn't"),
            ),
            Finding::DeleteExpired(pod) => (
                EventType::Warning,
                "DeletePodFailed",
                format!("Pod {namespace}/{pod} was expected to be deleted but it wasn't"),
            ),
            Finding::Recovered(subset) => (
                EventType::Normal,
                "RecoverSchedulable",
                format!(
                    "Subset {subset} of WorkloadSpread {namespace}/{name} is recovered from unschedulable to schedulable"
                ),
            ),
        };
        publish(ctx, ws, type_, reason, note).await;
    }
}

/// Deletes the Pods (`indexes` into `refs`) that stayed unschedulable in their subset, so that
/// their workload creates them again elsewhere.
async fn reschedule(
    ctx: &Context,
    ws: &WorkloadSpread,
    pod_api: &Writer<Pod>,
    refs: &[&Pod],
    indexes: &[usize],
) -> Result<(), Error> {
    let namespace = ws.namespace().unwrap_or_default();
    let name = ws.name_any();
    for &index in indexes {
        let pod = refs[index];
        let pod_name = pod.name_any();
        let params = DeleteParams {
            preconditions: pod.metadata.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match pod_api.delete(&pod_name, &params).await {
            Ok(_) => {
                tracing::info!(workloadspread = %format!("{namespace}/{name}"), pod = %pod_name, "deleted a Pod that stayed unschedulable in its subset")
            }
            Err(error) if is_race(&error) => {}
            Err(source) => {
                publish(
                    ctx,
                    ws,
                    EventType::Warning,
                    "DeletePodFailed",
                    format!("Failed to delete unschedulabe Pod {namespace}/{pod_name} of WorkloadSpread {namespace}/{name}"),
                )
                .await;
                return Err(Error::Kube {
                    context: format!("deleting unschedulable Pod {namespace}/{pod_name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Writes the status over the resourceVersion it was computed from; versions the new status drops
/// are removed from the map (a merge patch keeps the keys it does not mention).
async fn write(
    api: &Writer<WorkloadSpread>,
    ws: &WorkloadSpread,
    status: &WorkloadSpreadStatus,
    changed: bool,
) -> Result<StatusWrite, Error> {
    if !changed {
        return Ok(StatusWrite::Unchanged);
    }
    let old = ws.status.as_ref();
    let dropped: Vec<&String> = old
        .map(|o| {
            o.versioned_subset_statuses
                .keys()
                .filter(|k| !status.versioned_subset_statuses.contains_key(*k))
                .collect()
        })
        .unwrap_or_default();
    if dropped.is_empty() {
        return write_status(api, ws, old, status, true).await;
    }
    let mut patch = crate::status_patch::whole_status(old, status);
    if let Some(map) = patch["status"]["versionedSubsetStatuses"].as_object_mut() {
        for key in dropped {
            map.insert(key.clone(), Value::Null);
        }
    }
    patch["metadata"] = json!({"resourceVersion": ws.meta().resource_version});
    match api
        .patch_status(
            &ws.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => Ok(StatusWrite::Written {
            resource_version: written.meta().resource_version.clone(),
        }),
        Err(error) if is_race(&error) => Ok(StatusWrite::Stale),
        Err(source) => Err(Error::Kube {
            context: format!("writing the status of WorkloadSpread {}", ws.name_any()),
            source,
        }),
    }
}

/// Writes the annotation (and, unless the WorkloadSpread says not to, the metadata of the subset's
/// patch) on the Pods the controller placed by their node.
async fn adopt(
    api: &Writer<Pod>,
    ws: &WorkloadSpread,
    pods: &[&Pod],
    adopted: &[(usize, usize)],
) -> Result<(), Error> {
    let ignore_patch = ws
        .annotations()
        .get(ANNOTATION_IGNORE_PATCH_EXISTING)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    for &(index, subset) in adopted {
        let Some(subset) = ws.spec.subsets.get(subset) else {
            continue;
        };
        let pod = pods[index];
        let mut metadata = if ignore_patch {
            json!({})
        } else {
            subset
                .patch
                .as_ref()
                .and_then(|p| p.get("metadata"))
                .filter(|m| m.is_object())
                .cloned()
                .unwrap_or_else(|| json!({}))
        };
        let matched = MatchedWorkloadSpread {
            name: ws.name_any(),
            subset: subset.name.clone(),
            uid: String::new(),
        };
        if !metadata["annotations"].is_object() {
            metadata["annotations"] = json!({});
        }
        metadata["annotations"][ANNOTATION_MATCHED] = json!(matched.to_annotation());
        let patch = json!({"metadata": metadata});
        let pod_name = pod.name_any();
        api.merge_patch_unless_raced(&pod_name, &patch)
            .await
            .map_err(kube_error(format!(
                "annotating Pod {pod_name} with its subset"
            )))?;
    }
    Ok(())
}

/// Patches the deletion cost of the Pods whose annotation differs.
async fn write_costs(
    api: &Writer<Pod>,
    pods: &[&Pod],
    costs: &BTreeMap<usize, i32>,
) -> Result<(), Error> {
    for (&index, cost) in costs {
        let pod = pods[index];
        let value = cost.to_string();
        let current = kruise_core::pods::annotation(pod, ANNOTATION_DELETION_COST);
        if current == Some(value.as_str()) || (current.is_none() && *cost == 0) {
            continue;
        }
        let pod_name = pod.name_any();
        let patch = json!({"metadata": {"annotations": {ANNOTATION_DELETION_COST: value}}});
        api.merge_patch_unless_raced(&pod_name, &patch)
            .await
            .map_err(kube_error(format!(
                "writing the deletion cost of Pod {pod_name}"
            )))?;
    }
    Ok(())
}

async fn publish(ctx: &Context, ws: &WorkloadSpread, type_: EventType, reason: &str, note: String) {
    ctx.recorder
        .record(&ws.object_ref(&()), type_, reason, note)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    fn spread(cluster: &FakeCluster, extra: Value) -> WorkloadSpread {
        let mut ws = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns", "uid": "ws-uid"},
            "spec": {
                "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                              "name": "web"},
                "subsets": [{"name": "zone-a", "maxReplicas": 2,
                             "patch": {"metadata": {"labels": {"zone": "a"}}}}],
            },
        });
        json_patch::merge(&mut ws, &extra);
        let ws: WorkloadSpread = serde_json::from_value(ws).expect("a WorkloadSpread");
        cluster.insert(&ws)
    }

    fn pod(cluster: &FakeCluster, name: &str, annotations: Value) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                         "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .expect("a Pod");
        cluster.insert(&pod)
    }

    fn pods(cluster: &Arc<FakeCluster>) -> Writer<Pod> {
        Writer::namespaced(cluster.clone(), "ns")
    }

    fn subset(name: &str, replicas: i32) -> Value {
        json!({"name": name, "replicas": replicas, "missingReplicas": -1})
    }

    #[tokio::test]
    async fn a_status_drops_the_versions_it_no_longer_has_over_the_version_read() {
        let cluster = FakeCluster::new();
        let ws = spread(
            &cluster,
            json!({"status": {"versionedSubsetStatuses": {
                "v1": [subset("zone-a", 1)], "v2": [subset("zone-a", 1)],
            }}}),
        );
        let api = Writer::<WorkloadSpread>::namespaced(cluster.clone(), "ns");
        let mut status = ws.status.clone().unwrap_or_default();
        status.versioned_subset_statuses.remove("v1");
        // A copy older than the cluster's is dropped.
        cluster.touch::<WorkloadSpread>(Some("ns"), "ws");
        let stale = write(&api, &ws, &status, true).await.expect("written");
        assert_eq!(stale, StatusWrite::Stale);
        let ws: WorkloadSpread = cluster.get(Some("ns"), "ws").expect("the spread");
        let wrote = write(&api, &ws, &status, true).await.expect("written");
        assert!(matches!(wrote, StatusWrite::Written { .. }), "{wrote:?}");
        let ws: WorkloadSpread = cluster.get(Some("ns"), "ws").expect("the spread");
        let versions: Vec<_> = ws
            .status
            .map(|s| s.versioned_subset_statuses.into_keys().collect())
            .unwrap_or_default();
        assert_eq!(versions, ["v2"]);
    }

    #[tokio::test]
    async fn an_adopted_pod_gets_its_subset_unless_the_spread_says_to_ignore_it() {
        for (ignore, labelled) in [(false, true), (true, false)] {
            let cluster = FakeCluster::new();
            let extra = match ignore {
                true => {
                    json!({"metadata": {"annotations": {ANNOTATION_IGNORE_PATCH_EXISTING: "true"}}})
                }
                false => json!({}),
            };
            let ws = spread(&cluster, extra);
            let p = pod(&cluster, "p", json!({}));
            adopt(&pods(&cluster), &ws, &[&p], &[(0, 0)])
                .await
                .expect("adopted");
            let p: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
            let matched = p
                .annotations()
                .get(ANNOTATION_MATCHED)
                .cloned()
                .unwrap_or_default();
            assert!(matched.contains("zone-a"), "{matched}");
            assert_eq!(
                p.labels().get("zone").is_some(),
                labelled,
                "ignore: {ignore}"
            );
        }
        // A Pod gone meanwhile is no failure.
        let cluster = FakeCluster::new();
        let ws = spread(&cluster, json!({}));
        let p = pod(&cluster, "p", json!({}));
        cluster.forget::<Pod>(Some("ns"), "p");
        adopt(&pods(&cluster), &ws, &[&p], &[(0, 0)])
            .await
            .expect("a race");
    }

    #[tokio::test]
    async fn deletion_costs_are_written_only_where_they_differ() {
        let cluster = FakeCluster::new();
        let same = pod(&cluster, "same", json!({ANNOTATION_DELETION_COST: "100"}));
        let other = pod(&cluster, "other", json!({}));
        let zero = pod(&cluster, "zero", json!({}));
        let costs = BTreeMap::from([(0, 100), (1, 200), (2, 0)]);
        write_costs(&pods(&cluster), &[&same, &other, &zero], &costs)
            .await
            .expect("written");
        assert_eq!(cluster.done(), [(Verb::Patch, "other".to_owned())]);
        let other: Pod = cluster.get(Some("ns"), "other").expect("the Pod");
        assert_eq!(
            other
                .annotations()
                .get(ANNOTATION_DELETION_COST)
                .map(String::as_str),
            Some("200")
        );
        // A refused write fails the pass.
        cluster.fail_next(Verb::Patch, "zero", 422);
        let costs = BTreeMap::from([(2, 300)]);
        assert!(
            write_costs(&pods(&cluster), &[&same, &other, &zero], &costs)
                .await
                .is_err()
        );
    }
}
