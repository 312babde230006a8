//! The controller of a new Pod's ReplicaSet (its Deployment), which the Pod webhook needs to tell
//! which WorkloadSpread spreads the Pod and which PodUnavailableBudget guards it.
//!
//! A Deployment's rollout creates its Pods in a burst, all owned by the same ReplicaSet: reading
//! the ReplicaSet for each of them costs the apiserver one GET per Pod created (200 a second in a
//! deploy burst, for an answer that does not change). Here one read serves the Pods of a
//! ReplicaSet that arrive together: concurrent lookups wait for the read in flight, and its answer
//! is kept for [`KEPT_FOR`], keyed by the ReplicaSet's UID (as the Pod's owner reference names it,
//! so a ReplicaSet deleted and created again under the same name is read again). What is kept is
//! short-lived because a ReplicaSet's controller can change (orphaned, then adopted), and a
//! ReplicaSet not found or read with another UID is never kept. Errors are not kept either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Api, Client};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How long a ReplicaSet's controller, once read, answers for the Pods that follow.
pub const KEPT_FOR: Duration = Duration::from_secs(5);
/// Past this many ReplicaSets kept, the expired ones are dropped on the next lookup.
const TIDY_ABOVE: usize = 1024;

/// Reads a ReplicaSet's metadata: `(namespace, name)` → `None` when there is no such ReplicaSet.
pub type ReadMetadata = Arc<
    dyn Fn(String, String) -> BoxFuture<'static, Result<Option<ObjectMeta>, String>> + Send + Sync,
>;

/// The controllers of the ReplicaSets read lately, one read per ReplicaSet at a time.
pub struct ReplicaSetOwners {
    read: ReadMetadata,
    kept: Mutex<HashMap<String, Kept>>,
}

struct Kept {
    since: Instant,
    controller: Arc<OnceCell<Option<OwnerReference>>>,
}

/// Why a read's answer is not kept.
enum NotKept {
    /// No ReplicaSet of that UID (none of that name, or another one).
    Missing,
    Failed(String),
}

impl ReplicaSetOwners {
    /// Reads the apiserver's ReplicaSets through `client`; without one, no ReplicaSet is found.
    pub fn new(client: Option<Client>) -> Self {
        let read: ReadMetadata = Arc::new(move |namespace: String, name: String| {
            let client = client.clone();
            Box::pin(async move {
                let Some(client) = client else {
                    return Ok(None);
                };
                let sets: Api<ReplicaSet> = Api::namespaced(client, &namespace);
                sets.get_metadata_opt(&name)
                    .await
                    .map(|found| found.map(|set| set.metadata))
                    .map_err(|e| format!("reading ReplicaSet {namespace}/{name}: {e}"))
            })
        });
        Self::reading(read)
    }

    /// Reads ReplicaSets with `read`.
    pub fn reading(read: ReadMetadata) -> Self {
        Self {
            read,
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// The controller of ReplicaSet `owner` (a Pod's owner reference) in `namespace`: `None` when
    /// the ReplicaSet has none, or is not there (with the UID the Pod names).
    pub async fn controller_of(
        &self,
        namespace: &str,
        owner: &OwnerReference,
    ) -> Result<Option<OwnerReference>, String> {
        let read = if owner.uid.is_empty() {
            self.read_controller(namespace, owner).await
        } else {
            let cell = self.cell(&owner.uid);
            cell.get_or_try_init(|| self.read_controller(namespace, owner))
                .await
                .cloned()
        };
        match read {
            Ok(controller) => Ok(controller),
            Err(NotKept::Missing) => Ok(None),
            Err(NotKept::Failed(error)) => Err(error),
        }
    }

    /// The cell of ReplicaSet `uid`: the one kept while it is fresh, else a new one.
    fn cell(&self, uid: &str) -> Arc<OnceCell<Option<OwnerReference>>> {
        let now = Instant::now();
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() > TIDY_ABOVE {
            kept.retain(|_, k| now.duration_since(k.since) < KEPT_FOR);
        }
        if let Some(k) = kept.get(uid)
            && now.duration_since(k.since) < KEPT_FOR
        {
            return k.controller.clone();
        }
        let controller = Arc::new(OnceCell::new());
        kept.insert(
            uid.to_owned(),
            Kept {
                since: now,
                controller: controller.clone(),
            },
        );
        controller
    }

    async fn read_controller(
        &self,
        namespace: &str,
        owner: &OwnerReference,
    ) -> Result<Option<OwnerReference>, NotKept> {
        let metadata = (self.read)(namespace.to_owned(), owner.name.clone())
            .await
            .map_err(NotKept::Failed)?
            .ok_or(NotKept::Missing)?;
        if !owner.uid.is_empty() && metadata.uid.as_deref() != Some(owner.uid.as_str()) {
            return Err(NotKept::Missing);
        }
        Ok(kruise_core::ownership::controller_of(&metadata).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn reference(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    /// A ReplicaSet `web-1` (UID `rs-1`) of Deployment `web` that takes 100 ms to read, or fails
    /// to be read while `failing`; counts the reads.
    fn owners(
        reads: Arc<AtomicUsize>,
        failing: Arc<std::sync::atomic::AtomicBool>,
    ) -> ReplicaSetOwners {
        ReplicaSetOwners::reading(Arc::new(move |_namespace, name| {
            let reads = reads.clone();
            let failing = failing.load(Ordering::SeqCst);
            Box::pin(async move {
                reads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                if failing {
                    return Err("apiserver unavailable".to_string());
                }
                Ok((name == "web-1").then(|| ObjectMeta {
                    name: Some(name),
                    uid: Some("rs-1".into()),
                    owner_references: Some(vec![reference("Deployment", "web", "d-1")]),
                    ..Default::default()
                }))
            })
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_pods_of_one_replicaset_reads_it_once() {
        let reads = Arc::new(AtomicUsize::new(0));
        let owners = owners(reads.clone(), Default::default());
        let pod_owner = reference("ReplicaSet", "web-1", "rs-1");
        let answers =
            futures::future::join_all((0..50).map(|_| owners.controller_of("ns", &pod_owner)))
                .await;
        for answer in answers {
            assert_eq!(answer.expect("read").map(|o| o.name), Some("web".into()));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for the burst");
        tokio::time::advance(KEPT_FOR / 2).await;
        owners.controller_of("ns", &pod_owner).await.expect("kept");
        assert_eq!(reads.load(Ordering::SeqCst), 1, "kept a while");
        tokio::time::advance(KEPT_FOR).await;
        owners
            .controller_of("ns", &pod_owner)
            .await
            .expect("read again");
        assert_eq!(reads.load(Ordering::SeqCst), 2, "read again once expired");
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_missing_another_uid_or_a_failure_is_never_kept() {
        let reads = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let owners = owners(reads.clone(), failing.clone());
        // (the Pod's owner reference, the controller found)
        let cases = [
            (reference("ReplicaSet", "web-2", "rs-2"), None),
            (reference("ReplicaSet", "web-1", "rs-old"), None),
        ];
        for (pod_owner, expected) in &cases {
            for _ in 0..2 {
                let found = owners.controller_of("ns", pod_owner).await.expect("read");
                assert_eq!(found.map(|o| o.name), *expected);
            }
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            4,
            "each asked twice, read twice"
        );
        failing.store(true, Ordering::SeqCst);
        let pod_owner = reference("ReplicaSet", "web-1", "rs-1");
        assert!(owners.controller_of("ns", &pod_owner).await.is_err());
        failing.store(false, Ordering::SeqCst);
        let found = owners.controller_of("ns", &pod_owner).await.expect("read");
        assert_eq!(
            found.map(|o| o.name),
            Some("web".into()),
            "a failure is not kept"
        );
        assert_eq!(reads.load(Ordering::SeqCst), 6);
    }
}
