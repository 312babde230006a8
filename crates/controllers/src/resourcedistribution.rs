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
use kube::api::{ApiResource, DeleteParams, ListParams, PartialObjectMeta, Patch, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::driver::caches::{Caches, Shared};
use crate::driver::write::write_status;
use crate::driver::writes::{ApiWrites, At, LiveReads, Part, Writer, Writes};
use crate::error::{Error, KubeContext};
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "resourcedistribution-controller";

/// How the controller runs: its number of concurrent reconciles only.
pub type Config = crate::driver::WorkersOnly;

/// What every reconcile shares.
///
/// The copies are read live ([`LiveReads`]): Secrets and ConfigMaps are cached as metadata only,
/// and a copy's content decides whether it is current.
pub struct Context {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The namespaces each distribution matched at its last pass: a namespace event wakes the
    /// distributions that select it now or did then.
    matched: Mutex<HashMap<String, BTreeSet<String>>>,
    metrics: Arc<Metrics>,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller on the shared Namespace cache until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let cluster = ApiWrites::new(client);
    let ctx = Arc::new(Context {
        writes: cluster.clone(),
        live: cluster,
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
    writes: &'a dyn Writes,
    api_resource: &'a ApiResource,
    distribution: &'a str,
    resource: &'a Value,
    source: &'a Source<'a>,
    /// The objects of the resource's kind and name, by namespace.
    existing: &'a BTreeMap<String, Value>,
}

impl Copies<'_> {
    fn at(&self, namespace: &str) -> At {
        At {
            resource: self.api_resource.clone(),
            namespace: Some(namespace.to_owned()),
        }
    }

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
            let at = self.at(namespace);
            let outcome = match step {
                Step::Create => {
                    let copy = decide::new_copy(self.resource, namespace, self.source);
                    self.writes
                        .create(&at, copy)
                        .await
                        .map(drop)
                        .map_err(|e| (rd::CONDITION_CREATE_FAILED, e.to_string()))
                }
                Step::Update => {
                    let copy = self.existing.get(namespace).cloned().unwrap_or_default();
                    let patch = decide::update_patch(&copy, self.resource, self.source);
                    self.writes
                        .patch(&at, resource_name, Part::Object, Patch::Merge(patch))
                        .await
                        .map(drop)
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
            match self
                .writes
                .delete(&self.at(namespace), resource_name, params)
                .await
            {
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

/// The objects of `resource`'s kind named `name`, by namespace, read live.
async fn copies_of(
    live: &dyn LiveReads,
    resource: &ApiResource,
    name: &str,
) -> Result<BTreeMap<String, Value>, Error> {
    let every = At {
        resource: resource.clone(),
        namespace: None,
    };
    let named = ListParams::default().fields(&format!("metadata.name={name}"));
    let found = live
        .select(&every, &named)
        .await
        .context(|| format!("listing {}s named {name}", resource.kind))?;
    Ok(found
        .into_iter()
        .filter_map(|object| {
            let namespace = object.pointer("/metadata/namespace")?.as_str()?.to_owned();
            Some((namespace, object))
        })
        .collect())
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
    let existing = copies_of(ctx.live.as_ref(), &api_resource, resource_name).await?;
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
        writes: ctx.writes.as_ref(),
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
    let api = Writer::<ResourceDistribution>::all(ctx.writes.clone());
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

#[cfg(test)]
mod tests {
    use kube::runtime::watcher;
    use serde_json::json;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    fn namespace(name: &str) -> PartialObjectMeta<Namespace> {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": format!("{name}-uid")},
        }))
        .expect("a Namespace")
    }

    fn context(cluster: &Arc<FakeCluster>, namespaces: &[&str]) -> Arc<Context> {
        let (store, mut writer) = kube::runtime::reflector::store();
        for name in namespaces {
            writer.apply_watcher_event(&watcher::Event::Apply(namespace(name)));
        }
        let mut registry = prometheus_client::registry::Registry::default();
        Arc::new(Context {
            writes: cluster.clone(),
            live: cluster.clone(),
            namespaces: store,
            matched: Mutex::default(),
            metrics: Metrics::register(&mut registry),
        })
    }

    /// Distribution `rd` of Secret `s` (`key: v`) into `targets`.
    fn distribution(targets: &[&str]) -> ResourceDistribution {
        let list: Vec<Value> = targets.iter().map(|n| json!({"name": n})).collect();
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": "rd", "uid": "rd-uid", "generation": 1},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": "Secret",
                             "metadata": {"name": "s"}, "data": {"key": "dg=="}},
                "targets": {"includedNamespaces": {"list": list}},
            },
        }))
        .expect("a ResourceDistribution")
    }

    fn copy_in(cluster: &FakeCluster, namespace: &str) -> Option<Secret> {
        cluster.get(Some(namespace), "s")
    }

    fn status(cluster: &FakeCluster) -> rd::ResourceDistributionStatus {
        cluster
            .get::<ResourceDistribution>(None, "rd")
            .and_then(|d| d.status)
            .expect("a status")
    }

    #[tokio::test]
    async fn copies_go_where_targeted_and_leave_where_no_longer() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster, &["a", "b"]);
        let cached = cluster.insert(&distribution(&["a", "b"]));
        reconcile(Arc::new(cached), ctx.clone())
            .await
            .expect("reconciled");
        for ns in ["a", "b"] {
            let copy = copy_in(&cluster, ns).expect("a copy");
            let owner = copy.owner_references().first().cloned().expect("an owner");
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                (rd::KIND, "rd-uid")
            );
        }
        let written = status(&cluster);
        assert_eq!(
            (written.desired, written.succeeded, written.failed),
            (2, 2, 0)
        );
        // `b` leaves the targets: its copy is deleted over its uid, `a`'s is left alone.
        let uid_b = copy_in(&cluster, "b").and_then(|c| c.metadata.uid);
        let narrowed = cluster.insert(&distribution(&["a"]));
        reconcile(Arc::new(narrowed), ctx)
            .await
            .expect("reconciled");
        assert!(copy_in(&cluster, "a").is_some());
        assert!(copy_in(&cluster, "b").is_none());
        let deletes: Vec<_> = cluster
            .records()
            .into_iter()
            .filter(|r| r.verb == Verb::Delete)
            .collect();
        assert_eq!(deletes.len(), 1);
        assert_eq!(deletes[0].body["uid"], json!(uid_b));
    }

    #[tokio::test]
    async fn a_foreign_object_is_never_overwritten_and_a_refused_copy_is_reported() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster, &["a", "b"]);
        let foreign: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "a", "uid": "mine"},
            "data": {"key": "b3RoZXI="},
        }))
        .expect("a Secret");
        cluster.insert(&foreign);
        cluster.fail_next(Verb::Create, "s", 422);
        let cached = cluster.insert(&distribution(&["a", "b"]));
        let outcome = reconcile(Arc::new(cached), ctx).await;
        // The refused create is an API failure: retried.
        assert!(outcome.is_err());
        let kept = copy_in(&cluster, "a").expect("the user's Secret");
        assert_eq!(kept.metadata.uid.as_deref(), Some("mine"));
        assert!(kept.owner_references().is_empty());
        assert!(copy_in(&cluster, "b").is_none());
        let written = status(&cluster);
        assert_eq!((written.succeeded, written.failed), (0, 2));
        let failed: BTreeSet<(String, Vec<String>)> = written
            .conditions
            .iter()
            .filter(|c| !c.failed_namespaces.is_empty())
            .map(|c| (c.type_.clone(), c.failed_namespaces.clone()))
            .collect();
        assert_eq!(
            failed,
            BTreeSet::from([
                (rd::CONDITION_CONFLICT.to_owned(), vec!["a".to_owned()]),
                (rd::CONDITION_CREATE_FAILED.to_owned(), vec!["b".to_owned()]),
            ])
        );
    }

    #[tokio::test]
    async fn a_status_computed_from_a_stale_distribution_is_dropped() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster, &["a"]);
        let cached = cluster.insert(&distribution(&["a"]));
        cluster.touch::<ResourceDistribution>(None, "rd");
        reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        assert!(copy_in(&cluster, "a").is_some());
        let refused: Vec<_> = cluster
            .records()
            .into_iter()
            .filter(|r| r.verb == Verb::PatchStatus)
            .map(|r| r.refused)
            .collect();
        assert_eq!(refused, [Some(409)]);
        assert!(
            cluster
                .get::<ResourceDistribution>(None, "rd")
                .is_some_and(|d| d.status.is_none())
        );
    }
}
