//! The certificate controller: keeps the serving certificate in its Secret valid for the webhook host,
//! serves with it (reloading without restart), and keeps the caBundle and client config of the webhook
//! configurations and of the CRDs' conversion settings pointing at this webhook.
//!
//! Triggers: any change of the Secret (including its deletion), a change of the set of namespaces
//! holding a PodUnavailableBudget, and a periodic resync.

use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::kinds::Kind;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_controllers::driver::caches::Shared;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::watch;

use crate::certs::{self, CertBundle};
use crate::configuration::{self, Target, with_type};
use crate::metrics::Metrics;

const FIELD_MANAGER: &str = "kruise-manager";

#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace of the Secret (the manager's namespace).
    pub namespace: String,
    pub secret_name: String,
    pub target: Target,
    /// Regenerate when the certificate expires sooner than this.
    pub renew_before: Duration,
    pub resync: Duration,
    /// Failure policy and namespace scope of the Pod webhook (`mpod.kb.io`).
    pub pod_webhook: configuration::PodWebhook,
    /// Deadline of the apps.kruise.io defaulting and validation webhooks.
    pub resource_timeout_seconds: i32,
    /// The Secret is written by someone else (cert-manager, OpenKruise's `EnableExternalCerts`): read
    /// it as `tls.crt`/`tls.key`/`ca.crt`, never create, renew or overwrite it.
    pub external: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} Secret {namespace}/{name}: {source}")]
    Secret {
        action: &'static str,
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("patching {what}: {source}")]
    Patch { what: String, source: kube::Error },
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    #[error("loading the serving certificate into TLS: {0}")]
    Tls(std::io::Error),
    #[error(
        "externally managed Secret {namespace}/{name} is missing or lacks tls.crt, tls.key or ca.crt (is cert-manager's Certificate ready?)"
    )]
    External { namespace: String, name: String },
}

/// Reads the bundle from the Secret, creating or replacing it when missing or unusable.
pub async fn ensure_secret(
    client: &Client,
    settings: &Settings,
    metrics: &Metrics,
) -> Result<CertBundle, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let wrap = |action| {
        let (namespace, name) = (settings.namespace.clone(), settings.secret_name.clone());
        move |source| Error::Secret {
            action,
            namespace,
            name,
            source,
        }
    };
    let host = settings.target.cert_host();
    let existing = secrets
        .get_opt(&settings.secret_name)
        .await
        .map_err(wrap("reading"))?;
    if settings.external {
        let bundle = existing
            .as_ref()
            .and_then(|secret| secret.data.as_ref())
            .and_then(CertBundle::from_external_secret_data)
            .ok_or_else(|| Error::External {
                namespace: settings.namespace.clone(),
                name: settings.secret_name.clone(),
            })?;
        if let Some(problem) = bundle.problem(&host, Duration::ZERO) {
            tracing::warn!(%problem, "the externally managed webhook certificate is served as it is");
        }
        return Ok(bundle);
    }
    if let Some(secret) = &existing
        && let Some(bundle) = secret.data.as_ref().and_then(CertBundle::from_secret_data)
    {
        match bundle.problem(&host, settings.renew_before) {
            None => return Ok(bundle),
            Some(problem) => tracing::info!(%problem, "regenerating the webhook certificate"),
        }
    }
    let bundle = certs::generate(&host)?;
    metrics.cert_rotations.inc();
    let data = bundle.to_secret_data();
    match existing {
        None => {
            let mut secret = Secret {
                data: Some(data),
                ..Default::default()
            };
            secret.metadata.name = Some(settings.secret_name.clone());
            secret.metadata.namespace = Some(settings.namespace.clone());
            match secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => Ok(bundle),
                // Another replica created it first: use theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let theirs = secrets
                        .get(&settings.secret_name)
                        .await
                        .map_err(wrap("re-reading"))?;
                    theirs
                        .data
                        .as_ref()
                        .and_then(CertBundle::from_secret_data)
                        .ok_or_else(|| {
                            Error::Tls(std::io::Error::other(
                                "the Secret another replica wrote is incomplete",
                            ))
                        })
                }
                Err(source) => Err(wrap("creating")(source)),
            }
        }
        Some(current) => {
            // Replace the data only if nobody changed the Secret since we read it.
            let patch = json!({
                "metadata": { "resourceVersion": current.metadata.resource_version },
                "data": serde_json::to_value(&data).unwrap_or_default(),
            });
            secrets
                .patch(
                    &settings.secret_name,
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .map_err(wrap("updating"))?;
            Ok(bundle)
        }
    }
}

/// Points the webhook configurations and the CRDs' conversion at `target` with `ca`. Missing webhook
/// configurations are created; CRDs that are not installed are skipped with a warning.
///
/// Each object is read first and written only when it does not hold what this would write
/// ([`covers`]): a resync, a Secret relist or a resumed leader writes nothing when nothing changed
/// (every CRD write makes the apiserver rebuild that CRD's handlers). With `always`, the webhook
/// configurations are applied regardless, once per process, so that fields an earlier version of
/// the manager applied and this one no longer wants are dropped.
pub async fn patch_configurations(
    client: &Client,
    target: &Target,
    ca: &[u8],
    pod_webhook: &configuration::PodWebhook,
    resource_timeout_seconds: i32,
    always: bool,
) -> Result<Written, Error> {
    let mut written = Written::default();
    let mut mutating =
        configuration::mutating(target, Some(ca), pod_webhook, resource_timeout_seconds);
    mutating.meta_mut().managed_fields = None;
    let value = with_type(&mutating, "MutatingWebhookConfiguration");
    written.configurations += apply_unless_held::<MutatingWebhookConfiguration>(
        client,
        configuration::MUTATING_CONFIGURATION,
        value,
        always,
    )
    .await? as usize;
    let validating =
        configuration::validating(target, Some(ca), resource_timeout_seconds, pod_webhook);
    let value = with_type(&validating, "ValidatingWebhookConfiguration");
    written.configurations += apply_unless_held::<ValidatingWebhookConfiguration>(
        client,
        configuration::VALIDATING_CONFIGURATION,
        value,
        always,
    )
    .await? as usize;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let patch = configuration::crd_conversion_patch(target, ca);
    for kind in Kind::ALL {
        let name = format!("{}.{}", kind.plural(), kruise_api::kinds::GROUP);
        let current = match crds.get_opt(&name).await {
            Ok(Some(crd)) => crd,
            Ok(None) => {
                tracing::warn!(crd = %name, "CRD not installed; its conversion webhook is not configured");
                continue;
            }
            Err(source) => {
                return Err(Error::Patch {
                    what: format!("CRD {name}"),
                    source,
                });
            }
        };
        if covers(&serde_json::to_value(&current).unwrap_or_default(), &patch) {
            continue;
        }
        match crds
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch.clone()))
            .await
        {
            Ok(_) => written.crds += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::warn!(crd = %name, "CRD not installed; its conversion webhook is not configured");
            }
            Err(source) => {
                return Err(Error::Patch {
                    what: format!("CRD {name}"),
                    source,
                });
            }
        }
    }
    if written != Written::default() {
        tracing::info!(
            configurations = written.configurations,
            crds = written.crds,
            "webhook configurations and CRD conversion pointed at this webhook"
        );
    }
    Ok(written)
}

/// What [`patch_configurations`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub configurations: usize,
    pub crds: usize,
}

/// Server-side applies `value` to the cluster-scoped object `name` unless it already holds it (or
/// `always`); returns whether it wrote.
async fn apply_unless_held<K>(
    client: &Client,
    name: &str,
    value: serde_json::Value,
    always: bool,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let wrap = |source| Error::Patch {
        what: name.into(),
        source,
    };
    if !always {
        let current = api.get_opt(name).await.map_err(wrap)?;
        if let Some(current) = current
            && covers(&serde_json::to_value(&current).unwrap_or_default(), &value)
        {
            return Ok(false);
        }
    }
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(value),
    )
    .await
    .map_err(wrap)?;
    Ok(true)
}

/// Whether `current` already holds everything `wanted` says, read as a merge patch: each field of
/// an object `wanted` names has the value `wanted` gives it (a `null` one is absent), arrays are the
/// same length and hold the same items in order; fields `wanted` does not name (the apiserver's
/// defaults, other managers' fields) do not matter.
pub fn covers(current: &serde_json::Value, wanted: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (current, wanted) {
        (_, Value::Object(wanted)) => wanted.iter().all(|(key, wanted)| {
            let current = current.get(key).unwrap_or(&Value::Null);
            match wanted {
                Value::Null => current.is_null(),
                wanted => covers(current, wanted),
            }
        }),
        (Value::Array(current), Value::Array(wanted)) => {
            current.len() == wanted.len() && current.iter().zip(wanted).all(|(c, w)| covers(c, w))
        }
        (current, wanted) => current == wanted,
    }
}

/// One pass: ensure the certificate, serve it, patch the configurations. Returns the bundle in use.
pub async fn sync(
    client: &Client,
    settings: &Settings,
    tls: &RustlsConfig,
    current: &mut Option<CertBundle>,
    metrics: &Metrics,
) -> Result<(), Error> {
    let bundle = ensure_secret(client, settings, metrics).await?;
    // During a rotation the apiserver is told to trust both CAs before the server switches certificates,
    // so no admission call in flight meets an unknown CA. The next resync trims the old CA.
    let previous_ca = current
        .as_ref()
        .map(|c| c.ca_cert.as_str())
        .filter(|ca| *ca != bundle.ca_cert);
    let ca_bundle = match previous_ca {
        Some(old) => format!("{}{old}", bundle.ca_cert),
        None => bundle.ca_cert.clone(),
    };
    patch_configurations(
        client,
        &settings.target,
        ca_bundle.as_bytes(),
        &settings.pod_webhook,
        settings.resource_timeout_seconds,
        current.is_none(),
    )
    .await?;
    if current.as_ref() != Some(&bundle) {
        tls.reload_from_pem(
            bundle.cert.clone().into_bytes(),
            bundle.key.clone().into_bytes(),
        )
        .await
        .map_err(Error::Tls)?;
        tracing::info!(host = %settings.target.cert_host(), "webhook serving certificate loaded");
    }
    *current = Some(bundle);
    Ok(())
}

/// Runs the controller: a first sync (retried until it succeeds), then one per Secret change, per
/// resync period and, with `budgets`, per change of the set of namespaces holding a
/// PodUnavailableBudget (their evictions fail closed: [`configuration::PodWebhook::budget_namespaces`]).
/// `ready` turns true after the first successful sync.
pub async fn run(
    client: Client,
    mut settings: Settings,
    tls: RustlsConfig,
    ready: watch::Sender<bool>,
    metrics: Metrics,
    budgets: Option<Shared<PodUnavailableBudget>>,
    secrets: Option<Shared<kube::core::PartialObjectMeta<Secret>>>,
) {
    let mut changes = secret_changes(&client, &settings, secrets);
    let mut budget_changes = match &budgets {
        Some(budgets) => {
            let changes = budgets.subscribe();
            // The first write names the namespaces of the budgets that exist; a cache that cannot
            // list for long does not hold the certificate back (its list triggers a write later).
            if tokio::time::timeout(BUDGETS_LISTED_WITHIN, budgets.wait_listed())
                .await
                .is_err()
            {
                tracing::warn!(
                    "PodUnavailableBudgets not listed yet; their namespaces' evictions are configured once they are"
                );
            }
            Some(changes)
        }
        None => None,
    };
    let mut current = None;
    let mut resync = tokio::time::interval(settings.resync);
    // A sync is due at start, on a change of the Secret (or a relist, which may hide one), of the
    // namespaces holding budgets, and on the resync; watch errors and the relist's own markers are
    // no reason to write.
    let mut due = true;
    loop {
        if due {
            if let Some(budgets) = &budgets {
                settings.pod_webhook.budget_namespaces = budget_namespaces(budgets.store());
            }
            if let Err(error) = sync(&client, &settings, &tls, &mut current, &metrics).await {
                tracing::error!(%error, "webhook certificate sync failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            due = false;
            ready.send_replace(true);
        }
        let budget_change = async {
            match budget_changes.as_mut() {
                Some(changes) => changes.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = resync.tick() => due = true,
            changed = changes.next() => match changed {
                Some(()) => {
                    tracing::info!(secret = %settings.secret_name, "webhook certificate Secret changed");
                    due = true;
                }
                None => return,
            },
            change = budget_change => match (change, &budgets) {
                (Some(_), Some(budgets)) => {
                    let namespaces = budget_namespaces(budgets.store());
                    if namespaces != settings.pod_webhook.budget_namespaces {
                        tracing::info!(?namespaces, "namespaces holding a PodUnavailableBudget changed");
                        due = true;
                    }
                }
                // The cache is gone (the process is ending): budgets no longer move the webhooks.
                _ => budget_changes = None,
            },
        }
    }
}

/// A change of the certificate's Secret (or a relist, which may hide one): each is due a sync,
/// which reads the Secret itself. From the leader's one cache of Secrets' metadata when it has one
/// (`secrets`: the gates that read Secrets cluster-wide are on, and the chart grants that); else
/// from a watch of this one Secret, by name in the manager's namespace, the only Secret the chart
/// lets the manager read otherwise.
fn secret_changes(
    client: &Client,
    settings: &Settings,
    secrets: Option<Shared<kube::core::PartialObjectMeta<Secret>>>,
) -> futures::stream::BoxStream<'static, ()> {
    use kube::runtime::{WatchStreamExt, watcher};
    let (namespace, name) = (settings.namespace.clone(), settings.secret_name.clone());
    match secrets {
        Some(cache) => kruise_controllers::cache::receiver_stream(cache.subscribe())
            .filter_map(move |secret| {
                let ours = secret.metadata.namespace.as_deref() == Some(namespace.as_str())
                    && secret.metadata.name.as_deref() == Some(name.as_str());
                futures::future::ready(ours.then_some(()))
            })
            .boxed(),
        None => {
            let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            // With backoff: a watch failing over and over (a paused or partitioned replica
            // resuming) must not turn into a sync per failure.
            watcher(api, config)
                .default_backoff()
                .filter_map(|event| {
                    futures::future::ready(match event {
                        Ok(
                            watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitDone,
                        ) => Some(()),
                        Ok(_) => None,
                        Err(error) => {
                            tracing::warn!(%error, "watching the webhook certificate Secret");
                            None
                        }
                    })
                })
                .boxed()
        }
    }
}

/// How long the first write waits for the budget cache's first list.
const BUDGETS_LISTED_WITHIN: Duration = Duration::from_secs(10);

/// The namespaces holding a PodUnavailableBudget that is not being deleted, sorted.
pub fn budget_namespaces(budgets: &Store<PodUnavailableBudget>) -> Vec<String> {
    let namespaces: std::collections::BTreeSet<String> = budgets
        .state()
        .iter()
        .filter(|budget| budget.metadata.deletion_timestamp.is_none())
        .filter_map(|budget| budget.metadata.namespace.clone())
        .collect();
    namespaces.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::covers;

    #[test]
    fn covers_table() {
        let crd = json!({
            "metadata": {"name": "clonesets.apps.kruise.io", "resourceVersion": "9"},
            "spec": {"conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": "https://127.0.0.1:1/convert", "caBundle": "Y2E="}}}}
        });
        let hooks = json!({"webhooks": [
            {"name": "a", "sideEffects": "None", "timeoutSeconds": 10,
             "clientConfig": {"url": "https://x/a", "caBundle": "Y2E="}},
            {"name": "b", "clientConfig": {"url": "https://x/b"}}
        ]});
        let cases = [
            (
                "the same conversion",
                &crd,
                json!({"spec": {"conversion": {"webhook": {"clientConfig": {"url": "https://127.0.0.1:1/convert", "caBundle": "Y2E=", "service": null}}}}}),
                true,
            ),
            (
                "another CA",
                &crd,
                json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": "bmV3"}}}}}),
                false,
            ),
            (
                "a field the patch removes is still there",
                &crd,
                json!({"spec": {"conversion": {"webhook": {"clientConfig": {"url": null}}}}}),
                false,
            ),
            (
                "the apiserver's defaults do not matter",
                &hooks,
                json!({"webhooks": [
                {"name": "a", "clientConfig": {"url": "https://x/a", "caBundle": "Y2E="}},
                {"name": "b", "clientConfig": {"url": "https://x/b"}}]}),
                true,
            ),
            (
                "a webhook fewer",
                &hooks,
                json!({"webhooks": [
                {"name": "a", "clientConfig": {"url": "https://x/a", "caBundle": "Y2E="}}]}),
                false,
            ),
            (
                "a value changed",
                &hooks,
                json!({"webhooks": [
                {"name": "a", "timeoutSeconds": 3},
                {"name": "b"}]}),
                false,
            ),
            (
                "another order",
                &hooks,
                json!({"webhooks": [{"name": "b"}, {"name": "a"}]}),
                false,
            ),
        ];
        for (name, current, wanted, want) in cases {
            assert_eq!(covers(current, &wanted), want, "{name}");
        }
    }
}
