//! Waking a controller's objects from the shared Pod cache's changes.
//!
//! Kinds that are not a Pod's owner (budgets, spreads, ephemeral jobs, recreate requests) learn of
//! Pod changes from the [`PodCache`](crate::cache::PodCache) subscription rather than from a Pod
//! watch of their own. What differs between them is only which of their objects a changed Pod
//! concerns; the loop is this one.

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc::UnboundedSender;

use crate::cache::{CacheEvent, CacheEvents, PodChange};

/// Spawns the loop that sends `wake` every object of `store` in the changed Pod's namespace that
/// `concerned` says the change concerns, and `all` (when given) a signal when the Pod cache
/// resynced (the controller then reconciles everything). The loop ends when the controller has
/// gone (a send fails) or the cache has.
pub fn wake_on_pod_changes<K>(
    mut events: CacheEvents,
    store: Store<K>,
    wake: UnboundedSender<ObjectRef<K>>,
    all: Option<UnboundedSender<()>>,
    concerned: impl Fn(&K, &PodChange) -> bool + Send + 'static,
) where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let sent = match event {
                CacheEvent::Pod(change) => store
                    .state()
                    .iter()
                    .filter(|object| {
                        object.meta().namespace.as_deref() == Some(change.key.0.as_str())
                            && concerned(object, &change)
                    })
                    .all(|object| wake.send(ObjectRef::from_obj(object.as_ref())).is_ok()),
                CacheEvent::Resync => all.as_ref().is_none_or(|all| all.send(()).is_ok()),
                CacheEvent::Owner(_) => true,
            };
            if !sent {
                return;
            }
        }
    });
}
