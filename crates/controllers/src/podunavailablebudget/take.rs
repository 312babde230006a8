//! Taking one unit of a PodUnavailableBudget for a disruption (upstream
//! `PodUnavailableBudgetValidatePod`): shared by the Pod webhook (deletion, eviction, update) and
//! the in-place update engine (`PodUnavailableBudgetUpdateGate`). The decision is
//! `kruise_core::budget::admit`; an admitted disruption is recorded in the budget's status by a
//! patch carrying the resourceVersion the decision was made on. When another admission landed in
//! between, the patch fails with 409, the budget is read again and the decision made again (4 tries,
//! as upstream), so concurrent disruptions never take more than the budget allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::policy::POD_RELATED_PUB_ANNOTATION;
use kruise_api::policy::v1alpha1::{PodUnavailableBudget, PubOperation};
use kruise_core::budget::{self, Admission};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

const TRIES: usize = 4;
const RETRY_WAIT: Duration = Duration::from_millis(100);

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
    for attempt in 0..TRIES {
        if attempt > 0 {
            tokio::time::sleep(RETRY_WAIT).await;
        }
        let Some(budget) = budgets.get_opt(name).await? else {
            return Ok(None);
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
            Admission::Refuse(message) => return Ok(Some(message)),
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
            Ok(_) => return Ok(None),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(format!(
        "Timeout: couldn't update PodUnavailableBudget {name} due to conflicts"
    )))
}
