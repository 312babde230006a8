//! An in-memory apiserver for one kind's status writes, for the group commit's tests: objects
//! with resourceVersions that a write must match (else 409), a 404 once deleted, and per replica a
//! watch cache that lags behind until it is told to catch up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Resource;
use kube::core::Status;

use super::Key;
use super::commit::Source;

/// The stored objects, shared by every replica's [`FakeSource`].
pub struct FakeStore<K> {
    objects: Mutex<HashMap<Key, K>>,
    version: Mutex<u64>,
    /// Writes made and refused with 409, for assertions.
    pub writes: Mutex<(usize, usize)>,
    /// How long a read or a write takes.
    latency: Duration,
}

impl<K: Resource + Clone> FakeStore<K> {
    pub fn new(latency: Duration) -> Arc<Self> {
        Arc::new(Self {
            objects: Mutex::default(),
            version: Mutex::new(1),
            writes: Mutex::default(),
            latency,
        })
    }

    fn next_version(&self) -> String {
        let mut v = self.version.lock().unwrap_or_else(|e| e.into_inner());
        *v += 1;
        v.to_string()
    }

    /// Creates (or replaces) `object` under `key` with a new resourceVersion and UID `uid`.
    pub fn put(&self, key: &Key, mut object: K, uid: &str) {
        object.meta_mut().resource_version = Some(self.next_version());
        object.meta_mut().uid = Some(uid.to_owned());
        object.meta_mut().namespace = Some(key.0.clone());
        object.meta_mut().name = Some(key.1.clone());
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), object);
    }

    /// Changes the stored object as another writer would (a controller's status write).
    pub fn update(&self, key: &Key, change: impl FnOnce(&mut K)) {
        let version = self.next_version();
        if let Some(object) = self
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(key)
        {
            change(object);
            object.meta_mut().resource_version = Some(version);
        }
    }

    pub fn delete(&self, key: &Key) {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub fn get(&self, key: &Key) -> Option<K> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }
}

/// One replica's view: the shared store, and its own cache, which shows what the store held when
/// it last caught up.
pub struct FakeSource<K> {
    pub store: Arc<FakeStore<K>>,
    cache: Mutex<HashMap<Key, Arc<K>>>,
}

impl<K: Resource + Clone> FakeSource<K> {
    pub fn new(store: Arc<FakeStore<K>>) -> Self {
        let source = Self {
            store,
            cache: Mutex::default(),
        };
        source.catch_up();
        source
    }

    /// The cache catches up with the store (a watch event arrives).
    pub fn catch_up(&self) {
        let objects = self
            .store
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), Arc::new(v.clone())))
            .collect();
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = objects;
    }
}

impl<K> Source<K> for FakeSource<K>
where
    K: Resource + Clone + Send + Sync + 'static,
{
    fn cached(&self, key: &Key) -> Option<Arc<K>> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    async fn read(&self, key: &Key) -> Result<Option<K>, Status> {
        tokio::time::sleep(self.store.latency).await;
        Ok(self.store.get(key))
    }

    async fn write_status(&self, key: &Key, base: &K, next: &K) -> Result<K, Status> {
        tokio::time::sleep(self.store.latency).await;
        let version = self.store.next_version();
        let mut objects = self.store.objects.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stored) = objects.get_mut(key) else {
            return Err(Status::failure("not found", "NotFound").with_code(404));
        };
        let mut writes = self.store.writes.lock().unwrap_or_else(|e| e.into_inner());
        if stored.meta().resource_version != base.meta().resource_version {
            writes.1 += 1;
            return Err(Status::failure("the object has been modified", "Conflict").with_code(409));
        }
        writes.0 += 1;
        let mut written = next.clone();
        *written.meta_mut() = stored.meta().clone();
        written.meta_mut().resource_version = Some(version);
        *stored = written.clone();
        Ok(written)
    }
}
