//! `kruise-configuration`, the ConfigMap in the manager's namespace where OpenKruise's users list
//! the custom workload kinds that PersistentPodStates and WorkloadSpreads may target (one JSON value
//! per key). Read where a custom kind is met, not cached: an edit takes effect on the next read.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

/// The ConfigMap's name, upstream's.
pub const CONFIGMAP: &str = "kruise-configuration";

/// The value of `key` in `namespace`'s kruise-configuration; `None` when the ConfigMap or the key
/// is absent.
pub async fn read(client: &Client, namespace: &str, key: &str) -> Result<Option<String>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config = api
        .get_opt(CONFIGMAP)
        .await
        .map_err(|e| format!("reading ConfigMap {namespace}/{CONFIGMAP}: {e}"))?;
    Ok(config
        .and_then(|c| c.data)
        .and_then(|mut data| data.remove(key)))
}

/// The WorkloadSpread custom workload whitelist of `namespace`'s kruise-configuration (empty when
/// absent).
pub async fn workloadspread_whitelist(
    client: &Client,
    namespace: &str,
) -> Result<kruise_api::workloadspread::CustomWorkloadWhitelist, String> {
    use kruise_api::workloadspread::{CustomWorkloadWhitelist, WHITELIST_KEY};
    match read(client, namespace, WHITELIST_KEY).await? {
        Some(value) => CustomWorkloadWhitelist::parse(&value),
        None => Ok(CustomWorkloadWhitelist::default()),
    }
}
