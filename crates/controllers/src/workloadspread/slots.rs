//! The WorkloadSpreads' slots on the apiserver: the group commit of [`crate::placements`] with
//! the workload's replicas read as this kind reads them.

use std::sync::Arc;

use kruise_api::workloadspread::WorkloadSpread;

use crate::ledger::commit::{ApiSource, CommitMetrics};
pub use crate::placements::{Replicas, Slot, SlotDecisions, SlotRequest, Slots};

/// The slots on the apiserver, as the webhook and the controller keep them: decided on `store`
/// (once it is loaded; the apiserver's copy until then) and this process's own writes; the
/// workload's replicas read when a percentage needs them (a custom kind's path from the
/// kruise-configuration of `configuration_namespace`); what the commit does counted in `metrics`.
/// One per process: the webhook's placements and the controller's share its queue and its
/// record of the last write.
pub fn on_apiserver(
    client: &kube::Client,
    configuration_namespace: &str,
    store: Option<kube::runtime::reflector::Store<WorkloadSpread>>,
    metrics: CommitMetrics,
) -> Arc<Slots> {
    let cache = Arc::new(std::sync::OnceLock::new());
    if let Some(store) = store {
        let _ = cache.set(store);
    }
    let replicas: Replicas = {
        let client = client.clone();
        let namespace = configuration_namespace.to_owned();
        Arc::new(move |ws: Arc<WorkloadSpread>| {
            let client = client.clone();
            let namespace = namespace.clone();
            Box::pin(async move {
                super::workload::replicas_of(&client, &namespace, &ws)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
    };
    Slots::counted(
        SlotDecisions::new(replicas),
        ApiSource::new(client.clone(), cache),
        metrics,
    )
}
