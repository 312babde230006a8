//! The ResourceDistribution controller (upstream `pkg/controller/resourcedistribution`), on the
//! shared driver: a Secret or ConfigMap copied into every namespace a distribution's targets
//! select, kept in sync, and deleted where they no longer select.
//!
//! Observe: the distribution, the shared Namespace cache, and the existing objects of the
//! resource's kind and name (one list across namespaces, by field selector). Decide: the targeting,
//! the step per namespace and the status (`kruise_core::resourcedistribution`). Act: create,
//! merge-patch (resourceVersion precondition) or delete (uid precondition) each copy; write the
//! status when it changed. The distribution is the copies' controller, so the garbage collector
//! deletes them with it.
//!
//! Woken by: a change of the distribution's spec; a Namespace that appears, goes or changes while
//! it is (or was, at the last pass) selected; a change of a copy (metadata watch of Secrets and
//! ConfigMaps, kept only while the controller runs, that is while `ResourceDistributionGate` is on).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::resourcedistribution::{self as rd, ResourceDistribution};
use kruise_core::resourcedistribution::{
    self as decide, Existing, Failure, Source, Step, Targeting,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams,
    PostParams, Preconditions,
};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::driver::caches::{Caches, Shared};
use crate::driver::write::write_status;
use crate::error::{Error, KubeContext};
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "resourcedistribution-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles.
    pub workers: u16,
}

impl Default for Config {
    fn default() -> Self {
        Self { workers: 3 }
    }
}

/// What every reconcile shares.
pub struct Context {
    client: Client,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The namespaces each distribution matched at its last pass: a namespace event wakes the
    /// distributions that select it now or did then.
    matched: Mutex<HashMap<String, BTreeSet<String>>>,
    metrics: Arc<Metrics>,
}

impl crate::driver::Driven for Context {
    fn controller(&self) -> &'static str {
        CONTROLLER
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Runs the controller on the shared Namespace cache until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        namespaces: caches.namespaces.store().clone(),
        matched: Mutex::default(),
        metrics,
    });
    let watched = caches.shared::<ResourceDistribution>();
    let controller = watched.controller();
    let distributions = controller.store();
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    wake_on_namespaces(
        &caches.namespaces,
        distributions,
        ctx.clone(),
        wake_tx.clone(),
    );
    let secrets = caches.shared::<PartialObjectMeta<Secret>>();
    let configmaps = caches.shared::<PartialObjectMeta<ConfigMap>>();
    wake_on_copies(secrets.subscribe(), wake_tx.clone());
    wake_on_copies(configmaps.subscribe(), wake_tx);
    let controller = controller.reconcile_on(crate::cache::receiver_stream(wake_rx));
    caches.namespaces.store().wait_until_ready().await.ok();
    crate::driver::run(controller, config.workers, reconcile, ctx).await;
}

/// Wakes the distributions a namespace event concerns: those selecting the namespace as it is now
/// (created, relabelled) and those that matched it at their last pass (relabelled away, deleted).
fn wake_on_namespaces(
    namespaces: &Shared<PartialObjectMeta<Namespace>>,
    distributions: Store<ResourceDistribution>,
    ctx: Arc<Context>,
    wake: mpsc::UnboundedSender<ObjectRef<ResourceDistribution>>,
) {
    let mut events = namespaces.subscribe();
    let reader = namespaces.store().clone();
    tokio::spawn(async move {
        while let Some(namespace) = events.recv().await {
            let name = namespace.name_any();
            let live = reader
                .get(&ObjectRef::new(&name))
                .filter(|ns| ns.metadata.deletion_timestamp.is_none());
            let labels = live
                .as_ref()
                .and_then(|ns| ns.metadata.labels.clone())
                .unwrap_or_default();
            let previously: BTreeSet<String> = ctx
                .matched
                .lock()
                .map(|m| {
                    m.iter()
                        .filter(|(_, set)| set.contains(&name))
                        .map(|(rd, _)| rd.clone())
                        .collect()
                })
                .unwrap_or_default();
            for distribution in distributions.state() {
                let rd_name = distribution.name_any();
                let now =
                    live.is_some() && decide::selects(&distribution.spec.targets, &name, &labels);
                if (now || previously.contains(&rd_name))
                    && wake.send(ObjectRef::new(&rd_name)).is_err()
                {
                    return;
                }
            }
        }
    });
}

/// Wakes the distribution controlling a Secret or ConfigMap that changed or went away.
fn wake_on_copies<K>(
    mut events: mpsc::UnboundedReceiver<Arc<K>>,
    wake: mpsc::UnboundedSender<ObjectRef<ResourceDistribution>>,
) where
    K: kube::Resource + Send + Sync + 'static,
{
    tokio::spawn(async move {
        while let Some(object) = events.recv().await {
            let owners = object
                .meta()
                .owner_references
                .as_deref()
                .unwrap_or_default();
            let Some(owner) = owners.iter().find(|o| {
                o.controller == Some(true) && o.kind == rd::KIND && o.api_version == rd::API_VERSION
            }) else {
                continue;
            };
            if wake.send(ObjectRef::new(&owner.name)).is_err() {
                return;
            }
        }
    });
}

fn api_resource(kind: &str) -> Option<ApiResource> {
    match kind {
        "Secret" => Some(ApiResource::erase::<Secret>(&())),
        "ConfigMap" => Some(ApiResource::erase::<ConfigMap>(&())),
        _ => None,
    }
}

/// The copies of one distribution's resource: what is written where.
struct Copies<'a> {
    client: &'a Client,
    api_resource: &'a ApiResource,
    distribution: &'a str,
    resource: &'a Value,
    source: &'a Source<'a>,
    /// The objects of the resource's kind and name, by namespace.
    existing: &'a BTreeMap<String, Value>,
}

impl Copies<'_> {
    /// Creates or updates the copy in each targeted namespace (given with what it holds); the
    /// failures, and how many namespaces hold a current copy.
    async fn distribute<'n>(
        &self,
        namespaces: impl Iterator<Item = (&'n str, Existing)>,
    ) -> (Vec<Failure>, usize) {
        let (_, kind, resource_name) = rd::identity(self.resource);
        let mut failures = Vec::new();
        let mut succeeded = 0usize;
        for (namespace, existing) in namespaces {
            let step = decide::distribute(existing);
            if let Some((condition, reason)) = decide::reported(step) {
                failures.push(Failure {
                    condition,
                    namespace: namespace.to_owned(),
                    reason: reason.into(),
                });
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, self.api_resource);
            let outcome = match step {
                Step::Create => {
                    let copy = decide::new_copy(self.resource, namespace, self.source);
                    match serde_json::from_value::<DynamicObject>(copy) {
                        Ok(object) => api
                            .create(&PostParams::default(), &object)
                            .await
                            .map(|_| ())
                            .map_err(|e| (rd::CONDITION_CREATE_FAILED, e.to_string())),
                        Err(error) => Err((rd::CONDITION_CREATE_FAILED, error.to_string())),
                    }
                }
                Step::Update => {
                    let copy = self.existing.get(namespace).cloned().unwrap_or_default();
                    let patch = decide::update_patch(&copy, self.resource, self.source);
                    api.patch(
                        resource_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| (rd::CONDITION_UPDATE_FAILED, e.to_string()))
                }
                _ => Ok(()),
            };
            match outcome {
                Ok(()) => {
                    if matches!(step, Step::Create | Step::Update) {
                        tracing::info!(distribution = %self.distribution, namespace = %namespace, kind, resource = resource_name, ?step, "distributed");
                    }
                    succeeded += 1;
                }
                Err((condition, reason)) => failures.push(Failure {
                    condition,
                    namespace: namespace.to_owned(),
                    reason,
                }),
            }
        }
        (failures, succeeded)
    }

    /// Deletes the distribution's copies from the namespaces no longer targeted.
    async fn clean<'n>(
        &self,
        namespaces: impl Iterator<Item = (&'n str, Existing)>,
    ) -> Vec<Failure> {
        let (_, kind, resource_name) = rd::identity(self.resource);
        let mut failures = Vec::new();
        for (namespace, existing) in namespaces {
            if decide::clean(existing) != Step::Delete {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, self.api_resource);
            let uid = self
                .existing
                .get(namespace)
                .and_then(|c| c.pointer("/metadata/uid"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(resource_name, &params).await {
                Ok(_) => {
                    tracing::info!(distribution = %self.distribution, namespace = %namespace, kind, resource = resource_name, "deleted a copy no longer targeted");
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => failures.push(Failure {
                    condition: rd::CONDITION_DELETE_FAILED,
                    namespace: namespace.to_owned(),
                    reason: error.to_string(),
                }),
            }
        }
        failures
    }
}

async fn reconcile(
    distribution: Arc<ResourceDistribution>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let distribution = distribution.as_ref();
    let name = distribution.name_any();
    let Some(uid) = distribution.metadata.uid.clone() else {
        return Ok(Action::await_change());
    };
    if distribution.metadata.deletion_timestamp.is_some() {
        if let Ok(mut matched) = ctx.matched.lock() {
            matched.remove(&name);
        }
        return Ok(Action::await_change());
    }
    let resource = &distribution.spec.resource;
    let (_, kind, resource_name) = rd::identity(resource);
    // The webhook refuses these; one created while it was off is left alone, as upstream does.
    let Some(api_resource) =
        api_resource(kind).filter(|_| rd::supported(resource) && !resource_name.is_empty())
    else {
        tracing::warn!(distribution = %name, kind, "spec.resource is not a named Secret or ConfigMap; nothing distributed");
        return Ok(Action::await_change());
    };
    let hash = rd::resource_hash(resource);
    let source = Source {
        name: &name,
        uid: &uid,
        hash: &hash,
    };

    // Observe.
    let live: BTreeMap<String, BTreeMap<String, String>> = ctx
        .namespaces
        .state()
        .iter()
        .filter(|ns| ns.metadata.deletion_timestamp.is_none())
        .map(|ns| {
            (
                ns.name_any(),
                ns.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    let all_namespaces: Vec<(String, BTreeMap<String, String>)> = ctx
        .namespaces
        .state()
        .iter()
        .map(|ns| {
            (
                ns.name_any(),
                ns.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    let Targeting { matched, unmatched } = decide::target(
        &distribution.spec.targets,
        all_namespaces.iter().map(|(n, l)| (n.as_str(), l)),
    );
    let every: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &api_resource);
    let existing: BTreeMap<String, Value> = every
        .list(&ListParams::default().fields(&format!("metadata.name={resource_name}")))
        .await
        .context(|| format!("listing {kind}s named {resource_name}"))?
        .items
        .into_iter()
        .filter_map(|object| {
            let namespace = object.namespace()?;
            Some((namespace, serde_json::to_value(&object).ok()?))
        })
        .collect();
    let state = |namespace: &str| -> Existing {
        if !live.contains_key(namespace) {
            return Existing::NoNamespace;
        }
        match existing.get(namespace) {
            None => Existing::Absent,
            Some(copy) => {
                let owners: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> =
                    copy.pointer("/metadata/ownerReferences")
                        .cloned()
                        .and_then(|o| serde_json::from_value(o).ok())
                        .unwrap_or_default();
                if decide::controlled_by(&owners, &name) {
                    Existing::Owned {
                        current: decide::current(copy, resource, &hash),
                    }
                } else {
                    Existing::Foreign
                }
            }
        }
    };

    // Act.
    let copies = Copies {
        client: &ctx.client,
        api_resource: &api_resource,
        distribution: &name,
        resource,
        source: &source,
        existing: &existing,
    };
    let (mut failures, succeeded) = copies
        .distribute(matched.iter().map(|ns| (ns.as_str(), state(ns))))
        .await;
    failures.extend(
        copies
            .clean(unmatched.iter().map(|ns| (ns.as_str(), state(ns))))
            .await,
    );
    if let Ok(mut remembered) = ctx.matched.lock() {
        remembered.insert(name.clone(), matched.clone());
    }

    // Status.
    let old = distribution.status.clone().unwrap_or_default();
    let now = Time(Timestamp::now());
    let status = decide::status(
        distribution.metadata.generation.unwrap_or_default(),
        matched.len(),
        succeeded,
        &failures,
        &old.conditions,
        &now,
    );
    let api: Api<ResourceDistribution> = Api::all(ctx.client.clone());
    write_status(
        &api,
        distribution,
        distribution.status.as_ref(),
        &status,
        status != old,
    )
    .await?;
    // Failures of the API (not conflicts or missing namespaces, which wait for a change) are
    // retried, as upstream returns them as errors.
    let retry: Vec<String> = failures
        .iter()
        .filter(|f| {
            f.condition != rd::CONDITION_CONFLICT
                && f.condition != rd::CONDITION_NAMESPACE_NOT_EXISTS
        })
        .map(|f| format!("{} in {}: {}", f.condition, f.namespace, f.reason))
        .collect();
    if !retry.is_empty() {
        return Err(Error::Invalid(retry.join("; ")));
    }
    Ok(Action::await_change())
}
