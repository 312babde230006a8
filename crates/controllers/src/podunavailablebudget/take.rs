//! Taking one unit of a PodUnavailableBudget for a disruption (upstream
//! `PodUnavailableBudgetValidatePod`): shared by the Pod webhook (deletion, eviction, update) and
//! the in-place update engine (`PodUnavailableBudgetUpdateGate`). The decision is
//! `kruise_core::budget::admit`; an admitted disruption is recorded in the budget's status by a
//! patch carrying the resourceVersion the decision was made on. When another admission landed in
//! between, the patch fails with 409, the budget is read again and the decision made again (4 tries,
//! as upstream), so concurrent disruptions never take more than the budget allows.
//!
//! The hot path costs one write and no read: the budget is taken from the process's watch cache or
//! from this process's own last write of it, whichever is newer ([`Ledger`]), and the disruptions
//! of one budget are decided one after the other within the process, so that they do not race each
//! other into conflicts. Only after a conflict (another replica, or a cache behind), or before a
//! refusal, is the budget read from the apiserver: a refusal is always made on the apiserver's copy,
//! so that a budget deleted (or raised) a moment ago never refuses. A budget the cache no longer
//! holds is not taken from the ledger either: a deleted budget decides nothing, and a budget that
//! does not exist (NotFound, on the read or on the patch) admits, as upstream.
//!
//! A refusal leaves upstream's `PubPreventPodDeletion` Warning on the Pod, whoever asked (the
//! webhook or an in-place update), once [`record_refusals`] has been called.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::policy::POD_RELATED_PUB_ANNOTATION;
use kruise_api::policy::v1alpha1::{PodUnavailableBudget, PubOperation};
use kruise_core::budget::{self, Admission};
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};
use serde_json::json;

use crate::ledger::{Key, Ledger};

const TRIES: usize = 4;
const RETRY_WAIT: Duration = Duration::from_millis(100);
/// How long a disruption waits for the ones before it on the same budget; past it, it goes ahead
/// and relies on the resourceVersion guard alone.
const TURN_WAIT: Duration = Duration::from_secs(3);

/// The process's budget cache and its own last writes ([`crate::ledger`]).
#[derive(Default)]
struct Budgets {
    cache: OnceLock<Store<PodUnavailableBudget>>,
    ledger: Ledger<PodUnavailableBudget>,
}

static BUDGETS: OnceLock<Budgets> = OnceLock::new();

fn process_budgets() -> &'static Budgets {
    BUDGETS.get_or_init(Budgets::default)
}

/// Lets [`take`] read budgets from the process's watch cache (the manager's `ProcessCaches`).
pub fn use_cache(store: Store<PodUnavailableBudget>) {
    let _ = process_budgets().cache.set(store);
}

impl Budgets {
    /// What the process knows of the budget: nothing without a cache (then the apiserver is
    /// read), else the newer of the cache's copy and the ledger's, and nothing when the cache holds
    /// no such budget (deleted, or not seen yet: the apiserver says which).
    fn known(&self, key: &Key) -> Option<Arc<PodUnavailableBudget>> {
        let store = self.cache.get()?;
        let cached = store.get(&ObjectRef::new(&key.1).within(&key.0));
        self.ledger.newest(key, cached)
    }
}

/// The reporter of the Events a refusal publishes (upstream's one recorder for the webhook and the
/// workload controllers' budget checks).
pub const EVENT_REPORTER: &str = "pub-controller";
/// The Warning a refused disruption leaves on its Pod (upstream's reason; its note is
/// [`PREVENTED_NOTE`] whatever the operation).
pub const REASON_PREVENTED: &str = "PubPreventPodDeletion";
pub const PREVENTED_NOTE: &str = "openkruise pub prevents pod deletion";
/// Refusal Events published at once; past it one is dropped (the refusal itself is still
/// answered and logged), so a storm of refused evictions (a node drain against a budget) or a
/// slow apiserver never piles up tasks.
const PREVENTED_IN_FLIGHT: usize = 64;
/// How long publishing one refusal Event may take.
const PREVENTED_TIMEOUT: Duration = Duration::from_secs(10);

/// Where refusals are reported ([`record_refusals`]).
struct Refusals {
    recorder: crate::events::EventRecorder,
    seats: Arc<tokio::sync::Semaphore>,
}

static REFUSALS: OnceLock<Refusals> = OnceLock::new();

/// Lets [`take`] leave [`REASON_PREVENTED`] on each Pod whose disruption a budget refuses (once per
/// process; the manager calls it for the webhook and the in-place update engine alike).
pub fn record_refusals(client: Client) {
    let _ = REFUSALS.set(Refusals {
        recorder: crate::driver::recorder(client, EVENT_REPORTER),
        seats: Arc::new(tokio::sync::Semaphore::new(PREVENTED_IN_FLIGHT)),
    });
}

/// Publishes [`REASON_PREVENTED`] on `pod` off the caller's path, as upstream does whenever a
/// budget refuses (dry runs included): the admission answer never waits for it.
fn record_refusal(pod: &Pod) {
    let Some(refusals) = REFUSALS.get() else {
        return;
    };
    let regarding = kube::Resource::object_ref(pod, &());
    let pod_name = regarding.name.clone().unwrap_or_default();
    let Ok(seat) = refusals.seats.clone().try_acquire_owned() else {
        tracing::debug!(pod = %pod_name, "{PREVENTED_IN_FLIGHT} {REASON_PREVENTED} Events in flight; this one is dropped");
        return;
    };
    tokio::spawn(async move {
        let _seat = seat;
        let record = refusals.recorder.record(
            &regarding,
            kube::runtime::events::EventType::Warning,
            REASON_PREVENTED,
            PREVENTED_NOTE.into(),
        );
        if tokio::time::timeout(PREVENTED_TIMEOUT, record)
            .await
            .is_err()
        {
            tracing::debug!(pod = %pod_name, "publishing {REASON_PREVENTED} timed out");
        }
    });
}

static UPDATE_GATE: AtomicBool = AtomicBool::new(false);

/// Turns on (`PodUnavailableBudgetUpdateGate`) the budget check of the in-place update engine.
pub fn set_update_gate(on: bool) {
    UPDATE_GATE.store(on, Ordering::SeqCst);
}

/// Whether in-place updates consult the budget.
pub fn update_gate() -> bool {
    UPDATE_GATE.load(Ordering::SeqCst)
}

/// The budget named by the Pod's `kruise.io/related-pub` annotation.
pub fn related_pub(pod: &Pod) -> Option<&str> {
    kruise_core::pods::annotation(pod, POD_RELATED_PUB_ANNOTATION).filter(|v| !v.is_empty())
}

/// Decides `operation` of `pod` against the budget it names, recording it unless `dry_run`:
/// `Ok(None)` admits, `Ok(Some(message))` refuses with upstream's message.
pub async fn take(
    client: &Client,
    pod: &Pod,
    operation: PubOperation,
    dry_run: bool,
    vertical_scaling: bool,
) -> Result<Option<String>, kube::Error> {
    let Some(name) = related_pub(pod) else {
        return Ok(None);
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let budgets: Api<PodUnavailableBudget> = Api::namespaced(client.clone(), namespace);
    let process = process_budgets();
    let ledger = &process.ledger;
    let key: Key = (namespace.to_owned(), name.to_owned());
    let _turn = if dry_run {
        None
    } else {
        ledger.turn(&key, TURN_WAIT).await
    };
    // The first try on what the process knows; a refusal on it, or a conflict, is decided again
    // on the apiserver's copy (a cache behind, or a budget deleted since, must not refuse).
    let mut fresh = false;
    let mut conflicted = false;
    for _ in 0..TRIES {
        if std::mem::take(&mut conflicted) {
            tokio::time::sleep(RETRY_WAIT).await;
        }
        let known = if fresh { None } else { process.known(&key) };
        let (budget, read) = match known {
            Some(budget) => (budget, false),
            None => match budgets.get_opt(name).await? {
                Some(budget) => (Arc::new(budget), true),
                None => {
                    ledger.gone(&key);
                    return Ok(None);
                }
            },
        };
        let status = budget.status.clone().unwrap_or_default();
        let request = budget::Request {
            pod,
            operation,
            pub_name: name,
            pub_annotations: budget.metadata.annotations.as_ref(),
            vertical_scaling,
            now: Timestamp::now(),
        };
        let next = match budget::admit(&request, &status) {
            Admission::Pass(_) => return Ok(None),
            Admission::Refuse(_) if !read => {
                fresh = true;
                continue;
            }
            Admission::Refuse(message) => {
                record_refusal(pod);
                return Ok(Some(message));
            }
            Admission::Take(next) => next,
        };
        if dry_run {
            return Ok(None);
        }
        // Only keys are added to the maps: a merge patch of the whole status records them.
        let patch = json!({
            "metadata": {"resourceVersion": budget.metadata.resource_version},
            "status": next,
        });
        match budgets
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                ledger.remember(key, written);
                return Ok(None);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                ledger.forget(&key);
                fresh = true;
                conflicted = true;
                continue;
            }
            // Deleted since it was read: a budget that does not exist admits.
            Err(kube::Error::Api(status)) if status.code == 404 => {
                ledger.gone(&key);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(format!(
        "Timeout: couldn't update PodUnavailableBudget {name} due to conflicts"
    )))
}
