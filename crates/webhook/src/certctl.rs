//! The certificate controller: keeps the serving certificate in its Secret valid for the webhook host,
//! serves with it (reloading without restart), and keeps the caBundle and client config of the webhook
//! configurations and of the CRDs' conversion settings pointing at this webhook.
//!
//! Triggers: any change of the Secret (including its deletion) and a periodic resync.

use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::kinds::Kind;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
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
pub async fn patch_configurations(
    client: &Client,
    target: &Target,
    ca: &[u8],
    pod_webhook: &configuration::PodWebhook,
    resource_timeout_seconds: i32,
) -> Result<(), Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let mut mutating =
        configuration::mutating(target, Some(ca), pod_webhook, resource_timeout_seconds);
    mutating.meta_mut().managed_fields = None;
    let value = with_type(&mutating, "MutatingWebhookConfiguration");
    mutating_api
        .patch(
            configuration::MUTATING_CONFIGURATION,
            &params,
            &Patch::Apply(value),
        )
        .await
        .map_err(|source| Error::Patch {
            what: configuration::MUTATING_CONFIGURATION.into(),
            source,
        })?;
    let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let validating =
        configuration::validating(target, Some(ca), resource_timeout_seconds, pod_webhook);
    let value = with_type(&validating, "ValidatingWebhookConfiguration");
    validating_api
        .patch(
            configuration::VALIDATING_CONFIGURATION,
            &params,
            &Patch::Apply(value),
        )
        .await
        .map_err(|source| Error::Patch {
            what: configuration::VALIDATING_CONFIGURATION.into(),
            source,
        })?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let patch = configuration::crd_conversion_patch(target, ca);
    for kind in Kind::ALL {
        let name = format!("{}.{}", kind.plural(), kruise_api::kinds::GROUP);
        match crds
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch.clone()))
            .await
        {
            Ok(_) => {}
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
    Ok(())
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

/// Runs the controller: a first sync (retried until it succeeds), then one per Secret change and per
/// resync period. `ready` turns true after the first successful sync.
pub async fn run(
    client: Client,
    settings: Settings,
    tls: RustlsConfig,
    ready: watch::Sender<bool>,
    metrics: Metrics,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", settings.secret_name));
    let mut changes = watcher(secrets, config).boxed();
    let mut current = None;
    let mut resync = tokio::time::interval(settings.resync);
    loop {
        match sync(&client, &settings, &tls, &mut current, &metrics).await {
            Ok(()) => {
                ready.send_replace(true);
            }
            Err(error) => {
                tracing::error!(%error, "webhook certificate sync failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        }
        tokio::select! {
            _ = resync.tick() => {}
            event = changes.next() => match event {
                Some(Ok(watcher::Event::Delete(_) | watcher::Event::Apply(_))) => {
                    tracing::info!(secret = %settings.secret_name, "webhook certificate Secret changed");
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => tracing::warn!(%error, "watching the webhook certificate Secret"),
                None => return,
            },
        }
    }
}
