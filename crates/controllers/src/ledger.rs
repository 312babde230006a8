//! What a webhook knows of the objects it writes on an admission's path (a PodUnavailableBudget's
//! disruptions, a WorkloadSpread's placements): its own last write of each, which the process's
//! watch cache may not show yet, and one turn per object, so that the admissions of one object in
//! this process are decided one after the other instead of racing each other into conflicts. The
//! writes stay guarded by the resourceVersion they were decided on: the ledger saves reads, it does
//! not replace the guard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Resource;

/// `(namespace, name)`.
pub type Key = (String, String);

pub struct Ledger<K> {
    written: Mutex<HashMap<Key, Arc<K>>>,
    turns: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K> Default for Ledger<K> {
    fn default() -> Self {
        Self {
            written: Mutex::default(),
            turns: Mutex::default(),
        }
    }
}

/// The resourceVersion as a number, when it is one (etcd's are): of two copies of an object, the
/// newer has the larger. Anything else is not compared.
fn version<K: Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

/// The newer of the cache's copy and this process's last write: the write only when it is of the
/// same object (UID) and its resourceVersion is larger; the cache's when they cannot be compared
/// (a stale choice costs a conflict and a fresh read, never a wrong write).
pub fn newer<K: Resource>(cached: Option<Arc<K>>, written: Option<Arc<K>>) -> Option<Arc<K>> {
    match (cached, written) {
        (Some(cached), Some(written)) => {
            let same = cached.meta().uid.is_none()
                || written.meta().uid.is_none()
                || cached.meta().uid == written.meta().uid;
            match (version(cached.as_ref()), version(written.as_ref())) {
                (Some(c), Some(w)) if same && w > c => Some(written),
                _ => Some(cached),
            }
        }
        (cached, written) => cached.or(written),
    }
}

impl<K: Resource> Ledger<K> {
    /// The newest copy known of `key`, given the cache's.
    pub fn newest(&self, key: &Key, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let written = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        newer(cached, written)
    }

    /// Records what the apiserver answered to this process's write.
    pub fn remember(&self, key: Key, written: K) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::new(written));
    }

    /// Forgets the last write of `key` (it conflicted, or the object is gone).
    pub fn forget(&self, key: &Key) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Waits for `key`'s turn, at most `wait` (then `None`: go ahead on the resourceVersion guard
    /// alone); the turn lasts as long as the guard.
    pub async fn turn(
        &self,
        key: &Key,
        wait: Duration,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let turn = self
            .turns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        tokio::time::timeout(wait, turn.lock_owned()).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn at(uid: &str, version: &str) -> Option<Arc<ConfigMap>> {
        let mut object = ConfigMap::default();
        object.metadata.uid = Some(uid.to_owned()).filter(|u| !u.is_empty());
        object.metadata.resource_version = Some(version.to_owned());
        Some(Arc::new(object))
    }

    fn version_of(object: Option<Arc<ConfigMap>>) -> Option<String> {
        object.and_then(|o| o.metadata.resource_version.clone())
    }

    #[test]
    fn the_newer_copy_is_taken() {
        // (cached, written, taken)
        let cases = [
            (None, None, None),
            (at("a", "5"), None, Some("5")),
            (None, at("a", "5"), Some("5")),
            (at("a", "9"), at("a", "10"), Some("10")),
            (at("a", "11"), at("a", "10"), Some("11")),
            (at("a", "10"), at("a", "10"), Some("10")),
            // Another object of the same name (deleted and created again): the cache's.
            (at("a", "9"), at("b", "10"), Some("9")),
            // UIDs unknown: by version.
            (at("", "9"), at("a", "10"), Some("10")),
            // Not comparable: the cache's.
            (at("a", "x"), at("a", "10"), Some("x")),
        ];
        for (i, (cached, written, taken)) in cases.into_iter().enumerate() {
            assert_eq!(
                version_of(newer(cached, written)).as_deref(),
                taken,
                "case {i}"
            );
        }
    }

    #[tokio::test]
    async fn turns_are_taken_one_at_a_time() {
        let ledger: Ledger<ConfigMap> = Ledger::default();
        let key: Key = ("ns".into(), "b".into());
        let first = ledger.turn(&key, Duration::from_secs(1)).await;
        assert!(first.is_some());
        // Held: a second waits, then goes ahead without a turn.
        assert!(ledger.turn(&key, Duration::from_millis(20)).await.is_none());
        // Another object has its own turn.
        assert!(
            ledger
                .turn(&("ns".into(), "c".into()), Duration::from_millis(20))
                .await
                .is_some()
        );
        drop(first);
        assert!(ledger.turn(&key, Duration::from_millis(20)).await.is_some());
    }
}
