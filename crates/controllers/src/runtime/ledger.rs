//! What a webhook knows of the objects it writes on an admission's path (a PodUnavailableBudget's
//! disruptions, a WorkloadSpread's placements): its own last write of each, which the process's
//! watch cache may not show yet, so that the next decision starts from it without a read. The
//! decisions themselves are batched and written by [`commit`]. The writes stay guarded by the
//! resourceVersion they were decided on: the ledger saves reads, it does not replace the guard. A write counts only while the cache holds the same object (UID): once the
//! object is deleted (or created again) its write is forgotten, so a deleted object decides nothing.

pub mod commit;
#[cfg(test)]
pub mod fake;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Resource;

/// `(namespace, name)`.
pub type Key = (String, String);

pub struct Ledger<K> {
    written: Mutex<HashMap<Key, Arc<K>>>,
}

impl<K> Default for Ledger<K> {
    fn default() -> Self {
        Self {
            written: Mutex::default(),
        }
    }
}

/// The resourceVersion as a number, when it is one (etcd's are): of two copies of an object, the
/// newer has the larger. Anything else is not compared.
fn version<K: Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref()?.parse().ok()
}

/// Whether two copies are of the same object: their UIDs match, or one of them has none.
fn same_object<K: Resource>(a: &K, b: &K) -> bool {
    a.meta().uid.is_none() || b.meta().uid.is_none() || a.meta().uid == b.meta().uid
}

/// The newer of the cache's copy and this process's last write. The cache is the judge of which
/// objects exist: when it holds nothing of the name, or another object of the name (deleted and
/// created again), the write is of an object that is gone (or one the cache has not seen yet) and
/// decides nothing. Of two copies of the same object (UID), the write when its resourceVersion is
/// larger; the cache's when they cannot be compared (a stale choice costs a conflict and a fresh
/// read, never a wrong write).
pub fn newer<K: Resource>(cached: Option<Arc<K>>, written: Option<Arc<K>>) -> Option<Arc<K>> {
    let cached = cached?;
    match written {
        Some(written) if same_object(cached.as_ref(), written.as_ref()) => {
            match (version(cached.as_ref()), version(written.as_ref())) {
                (Some(c), Some(w)) if w > c => Some(written),
                _ => Some(cached),
            }
        }
        _ => Some(cached),
    }
}

impl<K: Resource> Ledger<K> {
    /// The newest copy known of `key`, given the cache's (`None`: the cache holds nothing of that
    /// name). A write the cache does not vouch for (the object is gone, or was created again) is
    /// forgotten here: a deleted object decides nothing, and the ledger does not outgrow the
    /// objects that exist.
    pub fn newest(&self, key: &Key, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let stale = match (&cached, written.get(key)) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(cached), Some(mine)) => !same_object(cached.as_ref(), mine.as_ref()),
        };
        if stale {
            written.remove(key);
            return cached;
        }
        let mine = written.get(key).cloned();
        drop(written);
        newer(cached, mine)
    }

    /// Records what the apiserver answered to one of this process's writes (a batch's, or another
    /// writer's of the same status: a controller's), unless a newer copy of the same object is
    /// recorded already (two writers' answers may arrive out of order).
    pub fn remember(&self, key: Key, written: K) {
        let mut recorded = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let newer_known = recorded.get(&key).is_some_and(|mine| {
            same_object(mine.as_ref(), &written)
                && matches!((version(mine.as_ref()), version(&written)), (Some(m), Some(w)) if m > w)
        });
        if !newer_known {
            recorded.insert(key, Arc::new(written));
        }
    }

    /// Forgets the last write of `key` (it conflicted, or the object is gone).
    pub fn forget(&self, key: &Key) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Forgets `key` altogether (the object is gone).
    pub fn gone(&self, key: &Key) {
        self.forget(key);
    }

    /// How many objects the ledger holds a write of (for tests and metrics).
    pub fn len(&self) -> usize {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
            // The cache holds nothing of the name: the object is gone, the write decides nothing.
            (None, at("a", "5"), None),
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

    #[test]
    fn a_write_lives_only_as_long_as_the_cache_holds_its_object() {
        let key: Key = ("ns".into(), "b".into());
        // (cache before, write, cache after, taken, ledger entries left)
        let cases = [
            // The cache is behind the write: the write.
            (at("a", "9"), at("a", "10"), at("a", "9"), Some("10"), 1),
            // The cache caught up: the cache's; the write is kept until the object goes.
            (at("a", "9"), at("a", "10"), at("a", "12"), Some("12"), 1),
            // Deleted: nothing, and the write is forgotten.
            (at("a", "9"), at("a", "10"), None, None, 0),
            // Deleted and created again (another UID): the new object, the write forgotten.
            (at("a", "9"), at("a", "10"), at("b", "3"), Some("3"), 0),
            // Created since the cache last saw the name: read afresh, nothing remembered.
            (None, at("a", "10"), None, None, 0),
        ];
        for (i, (before, write, after, taken, left)) in cases.into_iter().enumerate() {
            let ledger: Ledger<ConfigMap> = Ledger::default();
            let _ = ledger.newest(&key, before);
            if let Some(write) = write {
                ledger.remember(key.clone(), (*write).clone());
            }
            assert_eq!(
                version_of(ledger.newest(&key, after)).as_deref(),
                taken,
                "case {i}"
            );
            assert_eq!(ledger.len(), left, "case {i}");
        }
    }
}
