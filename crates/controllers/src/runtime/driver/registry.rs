//! The one way a controller gets a cache: [`Registry::shared`] opens the watch of a type the first
//! time any controller asks for it and hands every later asker the same [`Shared`] cache.
//!
//! Controllers used to open watches of their own beside the manager's caches: ImagePullJobs were
//! watched three times, NodeImages, Nodes and Secrets twice, UnitedDeployment opened label-selected
//! watches of workloads the manager already cached. Here a type is watched once per registry, and
//! only once something asks for it, so a controller whose gate is off opens nothing. A need for a
//! subset of a type (a label, an owner) is served from the one cache by filtering or an index, never
//! by a second, selected watch.
//!
//! There are two layers. The process's registry holds what the webhooks read on every replica; the
//! leader's (one per leadership term) asks the process's first and holds the rest, so its watches
//! end with the term.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::AbortHandle;

use super::caches::Shared;

/// Types a [`Registry`] can cache: every object of the type in the cluster, watched whole (or, for a
/// `PartialObjectMeta<K>`, decoded to its metadata).
pub trait Cacheable:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// The typed caches of one layer (the process, or one leadership term). Cheap to clone; the watches
/// it opened end when the last clone is dropped (or with the runtime they run on).
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// Where the watches run: the runtime the registry was made on, whatever task asks later.
    runtime: tokio::runtime::Handle,
    /// Asked first: the process's caches, for the leader's registry.
    parent: Option<Registry>,
    entries: Mutex<HashMap<TypeId, Entry>>,
}

struct Entry {
    /// The `Shared<K>` of the entry's type.
    cache: Box<dyn Any + Send + Sync>,
    /// `group/version/plural`: one resource is cached as one type.
    resource: String,
    type_name: &'static str,
    watch: Option<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(entries) = self.entries.get_mut() {
            for entry in entries.values() {
                if let Some(watch) = &entry.watch {
                    watch.abort();
                }
            }
        }
    }
}

/// The resource a cache of `K` watches, as `group/version/plural` (`PartialObjectMeta<K>` and `K`
/// name the same one).
pub fn resource_of<K: Resource<DynamicType = ()>>() -> String {
    format!("{}/{}", K::api_version(&()), K::plural(&()))
}

impl Registry {
    /// A registry whose watches run on the current runtime (it must be called inside one).
    pub fn new(client: Client) -> Self {
        Self::layered(client, None)
    }

    /// The leader's registry for one term: types the process already caches come from `process`.
    pub fn term(client: Client, process: &Registry) -> Self {
        Self::layered(client, Some(process.clone()))
    }

    fn layered(client: Client, parent: Option<Registry>) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                runtime: tokio::runtime::Handle::current(),
                parent,
                entries: Mutex::default(),
            }),
        }
    }

    /// The cache of every `K` in the cluster: the one this registry (or its parent) already has,
    /// or a new one whose watch starts now. A `PartialObjectMeta<K>` is listed and watched as metadata
    /// only (kube asks the apiserver for metadata alone).
    pub fn shared<K: Cacheable>(&self) -> Shared<K> {
        self.get_or_open(|client| Shared::<K>::watch(Api::all(client)))
    }

    fn get_or_open<K, F>(&self, open: impl FnOnce(Client) -> (Shared<K>, F)) -> Shared<K>
    where
        K: Cacheable,
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(cache) = self.existing::<K>() {
            return cache;
        }
        let mut entries = match self.inner.entries.lock() {
            Ok(entries) => entries,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(cache) = entries
            .get(&TypeId::of::<K>())
            .and_then(|e| e.cache.downcast_ref::<Shared<K>>())
        {
            return cache.clone();
        }
        let resource = resource_of::<K>();
        if let Some(other) = entries.values().find(|e| e.resource == resource) {
            // Two Rust types for one resource would be two watch streams of it.
            tracing::error!(
                resource,
                cached_as = other.type_name,
                asked_as = std::any::type_name::<K>(),
                "one resource cached as two types: a second watch of it is opened"
            );
        }
        let (cache, run) = open(self.inner.client.clone());
        let watch = self.inner.runtime.spawn(run).abort_handle();
        tracing::debug!(resource, "cache opened");
        entries.insert(
            TypeId::of::<K>(),
            Entry {
                cache: Box::new(cache.clone()),
                resource,
                type_name: std::any::type_name::<K>(),
                watch: Some(watch),
            },
        );
        cache
    }

    /// A cache this registry or its parent already holds, without opening anything.
    pub fn existing<K: Cacheable>(&self) -> Option<Shared<K>> {
        if let Some(cache) = self
            .inner
            .parent
            .as_ref()
            .and_then(|parent| parent.existing::<K>())
        {
            return Some(cache);
        }
        let entries = match self.inner.entries.lock() {
            Ok(entries) => entries,
            Err(poisoned) => poisoned.into_inner(),
        };
        entries
            .get(&TypeId::of::<K>())
            .and_then(|e| e.cache.downcast_ref::<Shared<K>>())
            .cloned()
    }

    /// Serves `cache` as this registry's `K` (a test's store, filled by hand): no watch is opened.
    pub fn insert<K: Cacheable>(&self, cache: Shared<K>) {
        let mut entries = match self.inner.entries.lock() {
            Ok(entries) => entries,
            Err(poisoned) => poisoned.into_inner(),
        };
        entries.insert(
            TypeId::of::<K>(),
            Entry {
                cache: Box::new(cache),
                resource: resource_of::<K>(),
                type_name: std::any::type_name::<K>(),
                watch: None,
            },
        );
    }

    /// The resources this registry itself watches (not its parent's), sorted.
    pub fn watched(&self) -> Vec<String> {
        let entries = match self.inner.entries.lock() {
            Ok(entries) => entries,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut watched: Vec<String> = entries
            .values()
            .filter(|e| e.watch.is_some())
            .map(|e| e.resource.clone())
            .collect();
        watched.sort();
        watched
    }
}
