//! The PodUnavailableBudget controller (upstream `pkg/controller/podunavailablebudget`): for each
//! budget, find its Pods (a label selector, or the Pods of `targetRef`'s workload) in the shared Pod
//! cache, the replicas they should number (the workloads' scale), mark the Pods with
//! `kruise.io/related-pub` (what the Pod webhook looks for), and write the status
//! (`kruise_core::podunavailablebudget::compute_status`) over the resourceVersion it was computed from.

mod workloads;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_api::policy::{
    POD_GUARDED_LABEL, POD_GUARDED_VALUE, POD_RELATED_PUB_ANNOTATION,
    PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION,
};
use kruise_api::validation::selector_is_empty;
use kruise_core::podunavailablebudget as budget;
use kube::api::PartialObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::{PodCache, PodChange};
use crate::driver::caches::Caches;
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::{Error, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "podunavailablebudget-controller";

/// Computed again at least this often: a workload's scale changes without any Pod changing.
const RESYNC: Duration = Duration::from_secs(30);

/// How the controller runs: its number of concurrent reconciles only.
pub type Config = crate::driver::WorkersOnly;

pub struct Context {
    /// For the budget's target workload and its scale (`workloads`): discovery and the scale
    /// subresource, read live.
    client: Client,
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    writes: Arc<dyn Writes>,
    pods: Arc<PodCache>,
    recorder: EventRecorder,
    metrics: Arc<Metrics>,
    /// The process's budget decisions (the Pod webhook's): the newest copy of a budget they know,
    /// and told of this controller's status writes.
    disruptions: Option<crate::disruptions::Disruptions>,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    // The process's budget cache (the Pod webhook reads it too): every budget once it is listed,
    // then every change.
    let budgets = caches.budgets.store().clone();
    let controller = Controller::for_stream(caches.budgets.replayed_stream(), budgets.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    crate::driver::wake::wake_on_pod_changes(
        caches.pods.subscribe("podunavailablebudget"),
        budgets.clone(),
        tx.clone(),
        Some(all_tx),
        concerns,
    );
    forward_workload_changes(&caches, budgets.clone(), tx);
    caches.pods.wait_synced().await;
    tokio::spawn(drop_stale_guards(
        ApiWrites::new(client.clone()),
        caches.pods.clone(),
        caches.budgets.clone(),
    ));
    let ctx = Arc::new(Context {
        client: client.clone(),
        writes: ApiWrites::new(client.clone()),
        pods: caches.pods,
        recorder: crate::driver::recorder(client, CONTROLLER),
        metrics,
        disruptions: caches.disruptions.clone(),
    });
    let controller = controller
        .reconcile_on(crate::cache::receiver_stream(rx))
        .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile, ctx).await;
}

/// Whether a Pod change concerns a budget of its namespace: one whose selector matches its labels,
/// or one with a targetRef (whose Pods are found by owner).
fn concerns(budget: &PodUnavailableBudget, change: &PodChange) -> bool {
    budget.spec.target_reference.is_some()
        || budget
            .spec
            .selector
            .as_ref()
            .is_some_and(|s| !selector_is_empty(s) && change.labels.matches(s))
}

/// Wakes the budgets of the namespace a workload changed in (created, scaled, deleted): the
/// expected replicas come from the workloads, and a deleted workload's Pods must become deletable
/// before the garbage collector gives up on them. Every workload kind comes from the manager's one
/// cache of it (ReplicaSets' metadata only: a scale change bumps the generation), as upstream's
/// controller watches the workloads.
fn forward_workload_changes(
    caches: &Caches,
    budgets: Store<PodUnavailableBudget>,
    tx: mpsc::UnboundedSender<ObjectRef<PodUnavailableBudget>>,
) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    let namespaces = |tx: mpsc::UnboundedSender<ObjectRef<PodUnavailableBudget>>| {
        let budgets = budgets.clone();
        move |namespace: Option<String>| {
            for budget in budgets.state() {
                if budget.namespace() == namespace
                    && tx.send(ObjectRef::from_obj(&*budget)).is_err()
                {
                    return false;
                }
            }
            true
        }
    };
    spawn_wake_on(
        caches.shared::<Deployment>().subscribe(),
        namespaces(tx.clone()),
    );
    spawn_wake_on(
        caches.shared::<PartialObjectMeta<ReplicaSet>>().subscribe(),
        namespaces(tx.clone()),
    );
    spawn_wake_on(caches.statefulsets.subscribe(), namespaces(tx.clone()));
    spawn_wake_on(caches.clonesets.subscribe(), namespaces(tx.clone()));
    spawn_wake_on(caches.advanced_statefulsets.subscribe(), namespaces(tx));
}

/// Calls `wake` with the namespace of every object a shared cache reports changed, until `wake`
/// says the controller is gone.
fn spawn_wake_on<K: Resource + Send + Sync + 'static>(
    mut changes: mpsc::UnboundedReceiver<Arc<K>>,
    mut wake: impl FnMut(Option<String>) -> bool + Send + 'static,
) {
    tokio::spawn(async move {
        while let Some(object) = changes.recv().await {
            if !wake(object.namespace()) {
                return;
            }
        }
    });
}

async fn reconcile(budget: Arc<PodUnavailableBudget>, ctx: Arc<Context>) -> Result<Action, Error> {
    if budget.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = budget.namespace().unwrap_or_default();
    let name = budget.name_any();
    // The disruptions the Pod webhook recorded since the cache's copy: computed over them, the
    // write does not conflict with them.
    let budget = ctx
        .disruptions
        .as_ref()
        .and_then(|d| d.known(&namespace, &name))
        .filter(|known| known.metadata.uid == budget.metadata.uid)
        .unwrap_or(budget);
    let found = match &budget.spec.target_reference {
        Some(target) => {
            workloads::pods_of_target(&ctx.client, &ctx.pods, &namespace, target).await?
        }
        None => match budget
            .spec
            .selector
            .as_ref()
            .filter(|s| !selector_is_empty(s))
        {
            None => workloads::Found::default(),
            Some(selector) => {
                let pods: Vec<Arc<Pod>> = ctx
                    .pods
                    .select(Some(&namespace), |labels| labels.matches(selector))
                    .into_iter()
                    .filter(|p| kruise_core::pods::is_active(p))
                    .collect();
                let expected = workloads::expected_scale(&ctx.client, &namespace, &pods).await?;
                workloads::Found { pods, expected }
            }
        },
    };
    let expected = budget
        .annotations()
        .get(PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION)
        .and_then(|v| v.parse::<i32>().ok())
        .unwrap_or(found.expected);
    if found.pods.is_empty() {
        publish(
            &ctx,
            &budget,
            EventType::Normal,
            "NoPods",
            "No matching pods found".into(),
        )
        .await;
    }
    mark_related(&ctx.writes, &budget, &found.pods).await?;
    let desired = match budget::desired_available(&budget.spec, expected) {
        Ok(desired) => desired,
        Err(message) => {
            publish(
                &ctx,
                &budget,
                EventType::Warning,
                "CalculateExpectedPodCountFailed",
                format!("Failed to calculate the number of expected pods: {message}"),
            )
            .await;
            return Err(Error::Invalid(message));
        }
    };
    let previous = budget.status.clone().unwrap_or_default();
    let pods: Vec<&Pod> = found.pods.iter().map(|p| &**p).collect();
    let (status, recheck) = budget::compute_status(
        &pods,
        &previous,
        budget.meta().generation.unwrap_or_default(),
        expected,
        desired,
        Timestamp::now(),
    );
    let changed = budget.status.is_none() || !budget::same_status(&previous, &status);
    let api = Writer::<PodUnavailableBudget>::namespaced(ctx.writes.clone(), &namespace);
    if changed {
        let mut patch = crate::status_patch::whole_status(budget.status.as_ref(), &status);
        clear_dropped_records(&mut patch, &previous, &status);
        patch["metadata"] = json!({"resourceVersion": budget.meta().resource_version});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                if let Some(disruptions) = &ctx.disruptions {
                    disruptions.observe(written);
                }
            }
            // Written over since it was read (an admitted disruption, most often): compute again.
            Err(error) if is_race(&error) => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(source) => {
                return Err(Error::Kube {
                    context: format!(
                        "writing the status of PodUnavailableBudget {namespace}/{name}"
                    ),
                    source,
                });
            }
        }
    }
    let wait = recheck
        .and_then(|d| Duration::try_from(d).ok())
        .map_or(RESYNC, |d| d.min(RESYNC) + Duration::from_millis(100));
    Ok(Action::requeue(wait))
}

/// A merge patch keeps the keys of a map it does not mention: a record the new status drops from
/// `disruptedPods` / `unavailablePods` (while the map stays) is sent as `null`.
fn clear_dropped_records(
    patch: &mut serde_json::Value,
    old: &kruise_api::policy::v1alpha1::PodUnavailableBudgetStatus,
    new: &kruise_api::policy::v1alpha1::PodUnavailableBudgetStatus,
) {
    for (field, old, new) in [
        ("disruptedPods", &old.disrupted_pods, &new.disrupted_pods),
        (
            "unavailablePods",
            &old.unavailable_pods,
            &new.unavailable_pods,
        ),
    ] {
        let (Some(old), Some(new)) = (old, new) else {
            continue;
        };
        if let Some(map) = patch["status"][field].as_object_mut() {
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                map.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
}

async fn publish(
    ctx: &Context,
    budget: &PodUnavailableBudget,
    type_: EventType,
    reason: &str,
    note: String,
) {
    ctx.recorder
        .record(&budget.object_ref(&()), type_, reason, note)
        .await;
}

/// Names the budget in the `kruise.io/related-pub` of each of its Pods, and labels
/// `policy.kruise.io/guarded` those whose removal it guards (and only those): what the Pod webhook
/// does at creation, for the Pods it did not see (created before the budget, or while the webhook
/// was down).
async fn mark_related(
    writes: &Arc<dyn Writes>,
    budget: &PodUnavailableBudget,
    pods: &[Arc<Pod>],
) -> Result<(), Error> {
    let namespace = budget.namespace().unwrap_or_default();
    let name = budget.name_any();
    let api = Writer::<Pod>::namespaced(writes.clone(), &namespace);
    for pod in pods {
        let guarded = budget::guards_removal(budget.metadata.annotations.as_ref(), pod);
        let named = kruise_core::pods::annotation(pod, POD_RELATED_PUB_ANNOTATION) == Some(&name);
        let labelled = budget::is_labelled_guarded(pod);
        if named && labelled == guarded {
            continue;
        }
        let pod_name = pod.name_any();
        let label = guarded.then_some(POD_GUARDED_VALUE);
        let patch = json!({"metadata": {
            "annotations": {POD_RELATED_PUB_ANNOTATION: name},
            "labels": {POD_GUARDED_LABEL: label},
        }});
        api.merge_patch_unless_raced(&pod_name, &patch)
            .await
            .map_err(|source| Error::Kube {
                context: format!(
                    "marking Pod {namespace}/{pod_name} with {POD_RELATED_PUB_ANNOTATION} and {POD_GUARDED_LABEL}"
                ),
                source,
            })?;
    }
    Ok(())
}

/// Why a Pod labelled `policy.kruise.io/guarded` is no longer guarded, if it is not: the budget its
/// `kruise.io/related-pub` names is gone (from `budgets`, those of its namespace), or no longer
/// selects it by labels, or no longer guards its removal. A budget with a targetRef that still
/// exists keeps its Pods (its reconcile relabels them).
pub fn stale_guard(pod: &Pod, budgets: &[Arc<PodUnavailableBudget>]) -> Option<&'static str> {
    if !budget::is_labelled_guarded(pod) {
        return None;
    }
    let named = kruise_core::pods::annotation(pod, POD_RELATED_PUB_ANNOTATION).unwrap_or_default();
    let Some(budget) = budgets.iter().find(|b| {
        b.metadata.name.as_deref() == Some(named) && b.metadata.deletion_timestamp.is_none()
    }) else {
        return Some("no budget of its namespace names it");
    };
    if budget.spec.target_reference.is_none() {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let selects = budget.spec.selector.as_ref().is_some_and(|s| {
            !selector_is_empty(s) && kruise_api::validation::selector_matches(s, &labels)
        });
        if !selects {
            return Some("its budget no longer selects it");
        }
    }
    if !budget::guards_removal(budget.metadata.annotations.as_ref(), pod) {
        return Some("its budget does not guard its removal");
    }
    None
}

/// Drops `policy.kruise.io/guarded` from the Pods no budget guards any more: on every change of a
/// budget (a deletion above all, which no reconcile sees) and every [`RESYNC`]. The label sends a
/// Pod's deletion to the webhook that fails closed; a Pod that keeps it without a budget could not
/// be deleted while the manager is down. The removal is conditional on the Pod still naming the same
/// budget (a JSON-patch `test`), so a budget that took the Pod meanwhile keeps it labelled.
async fn drop_stale_guards(
    writes: Arc<dyn Writes>,
    pods: Arc<PodCache>,
    shared: crate::driver::caches::Shared<PodUnavailableBudget>,
) {
    let mut changes = shared.subscribe();
    // Judged only on a listed cache: an empty one would find every guarded Pod stale.
    shared.wait_listed().await;
    let budgets = shared.store().clone();
    let mut resync = tokio::time::interval(RESYNC);
    loop {
        tokio::select! {
            _ = resync.tick() => {}
            change = changes.recv() => {
                if change.is_none() {
                    return;
                }
                // One sweep for a burst of changes.
                while changes.try_recv().is_ok() {}
            }
        }
        sweep_stale_guards(&writes, &pods, &budgets.state()).await;
    }
}

/// One sweep of [`drop_stale_guards`]: every Pod labelled guarded that no budget of `budgets` guards
/// loses the label; returns the Pods it was dropped from.
async fn sweep_stale_guards(
    writes: &Arc<dyn Writes>,
    pods: &PodCache,
    all: &[Arc<PodUnavailableBudget>],
) -> Vec<String> {
    let mut dropped = Vec::new();
    let stale: Vec<Arc<Pod>> = pods
        .select(None, |labels| {
            labels.get(POD_GUARDED_LABEL) == Some(POD_GUARDED_VALUE)
        })
        .into_iter()
        .filter(|pod| {
            let namespace = pod.metadata.namespace.as_deref();
            let here: Vec<Arc<PodUnavailableBudget>> = all
                .iter()
                .filter(|b| b.metadata.namespace.as_deref() == namespace)
                .cloned()
                .collect();
            stale_guard(pod, &here).is_some()
        })
        .collect();
    for pod in stale {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let named = kruise_core::pods::annotation(&pod, POD_RELATED_PUB_ANNOTATION);
        let label = kruise_core::json_pointer(&["metadata", "labels", POD_GUARDED_LABEL]);
        // Still naming the budget that was judged gone (or still naming none).
        let precondition = match named {
            Some(named) => json!({"op": "test", "value": named, "path":
                kruise_core::json_pointer(&["metadata", "annotations", POD_RELATED_PUB_ANNOTATION])}),
            None => json!({"op": "test", "path": label, "value": POD_GUARDED_VALUE}),
        };
        let operations = vec![precondition, json!({"op": "remove", "path": label})];
        let patch: json_patch::Patch =
            match serde_json::from_value(serde_json::Value::Array(operations)) {
                Ok(patch) => patch,
                Err(error) => {
                    tracing::warn!(%error, "building the patch that drops a stale guard label");
                    continue;
                }
            };
        let api = Writer::<Pod>::namespaced(writes.clone(), &namespace);
        match api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %name, %namespace, "dropped {POD_GUARDED_LABEL}: no budget guards the Pod");
                dropped.push(format!("{namespace}/{name}"));
            }
            // Gone, or taken by a budget meanwhile (the test failed): nothing to drop.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409 | 422) => {}
            Err(error) => {
                tracing::warn!(%error, pod = %name, %namespace, "dropping {POD_GUARDED_LABEL}");
            }
        }
    }
    dropped
}

#[cfg(test)]
#[path = "writes_tests.rs"]
mod writes_tests;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kruise_api::policy::v1alpha1::PodUnavailableBudgetStatus;
    use serde_json::json;

    use super::{clear_dropped_records, stale_guard};

    #[test]
    fn a_guard_label_is_stale_once_no_budget_guards_the_pod() {
        use std::sync::Arc;
        let pod =
            |labels: serde_json::Value, related: Option<&str>| -> k8s_openapi::api::core::v1::Pod {
                let mut metadata = json!({"name": "p", "namespace": "ns", "labels": labels});
                if let Some(related) = related {
                    metadata["annotations"] = json!({"kruise.io/related-pub": related});
                }
                serde_json::from_value(json!({"metadata": metadata})).expect("pod")
            };
        let budget = |name: &str,
                      spec: serde_json::Value,
                      annotations: serde_json::Value|
         -> Arc<kruise_api::policy::v1alpha1::PodUnavailableBudget> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
                    "spec": spec,
                }))
                .expect("budget"),
            )
        };
        let by_selector = budget(
            "web",
            json!({"selector": {"matchLabels": {"app": "web"}}}),
            json!({}),
        );
        let by_target = budget(
            "target",
            json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}),
            json!({}),
        );
        let updates_only = budget(
            "updates",
            json!({"selector": {"matchLabels": {"app": "web"}}}),
            json!({"kruise.io/pub-protect-operations": "UPDATE"}),
        );
        let guarded = json!({"app": "web", "policy.kruise.io/guarded": "true"});
        let none: Option<&str> = None;
        let cases = [
            (pod(json!({"app": "web"}), Some("web")), vec![], none),
            (
                pod(guarded.clone(), Some("web")),
                vec![by_selector.clone()],
                None,
            ),
            (
                pod(guarded.clone(), Some("web")),
                vec![],
                Some("no budget of its namespace names it"),
            ),
            (
                pod(guarded.clone(), None),
                vec![by_selector.clone()],
                Some("no budget of its namespace names it"),
            ),
            (
                pod(
                    json!({"app": "api", "policy.kruise.io/guarded": "true"}),
                    Some("web"),
                ),
                vec![by_selector.clone()],
                Some("its budget no longer selects it"),
            ),
            (pod(guarded.clone(), Some("target")), vec![by_target], None),
            (
                pod(guarded.clone(), Some("updates")),
                vec![updates_only],
                Some("its budget does not guard its removal"),
            ),
        ];
        for (pod, budgets, want) in cases {
            assert_eq!(stale_guard(&pod, &budgets), want, "{:?}", pod.metadata);
        }
    }

    #[test]
    fn dropped_records_are_nulled_and_kept_ones_stay() {
        let at = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let status = |names: &[&str]| PodUnavailableBudgetStatus {
            disrupted_pods: (!names.is_empty()).then(|| {
                names
                    .iter()
                    .map(|n| (n.to_string(), at.clone()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        };
        let (old, new) = (status(&["a", "b"]), status(&["b"]));
        let mut patch = crate::status_patch::whole_status(Some(&old), &new);
        clear_dropped_records(&mut patch, &old, &new);
        assert_eq!(patch["status"]["disruptedPods"]["a"], json!(null));
        assert!(patch["status"]["disruptedPods"]["b"].is_string());
        // A map emptied altogether goes as a whole.
        let (old, new) = (status(&["a"]), status(&[]));
        let mut patch = crate::status_patch::whole_status(Some(&old), &new);
        clear_dropped_records(&mut patch, &old, &new);
        assert_eq!(patch["status"]["disruptedPods"], json!(null));
    }
}
