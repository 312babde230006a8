//! kruise-manager's self-managed webhook certificates: deleting the Secret while the manager runs gets it
//! regenerated, the caBundle re-patched into the webhook configurations and CRDs, and admission keeps
//! working. (Own test binary, so the rotation cannot disturb other tests' admissions.)

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_testkit::{eventually, testbed, until};
use kube::api::{Api, DeleteParams};

const SECRET: &str = "kruise-webhook-certs";

fn ca_of(secret: &Secret) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()?
        .get("ca-cert.pem")
        .map(|b| b.0.clone())
}

#[tokio::test]
async fn deleted_certificate_secret_is_regenerated_and_admission_keeps_working()
-> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("certs").await?;
    ns.run(async {
        let secrets: Api<Secret> = Api::namespaced(ns.client.clone(), kruise_testkit::manager::NAMESPACE);
        let old = secrets.get(SECRET).await.context("the manager created its certificate Secret")?;
        let old_ca = ca_of(&old).context("ca-cert.pem")?;
        for key in ["ca-key.pem", "ca-cert.pem", "key.pem", "cert.pem", "tls.key", "tls.crt"] {
            ensure!(old.data.as_ref().is_some_and(|d| d.contains_key(key)), "Secret lacks {key}");
        }

        secrets.delete(SECRET, &DeleteParams::default()).await?;
        let new_ca = eventually("a regenerated certificate Secret", Duration::from_secs(60), || async {
            let secret = secrets.get_opt(SECRET).await?;
            Ok(secret.as_ref().and_then(ca_of).filter(|ca| *ca != old_ca))
        })
        .await?;

        let client = ns.client.clone();
        until("the new CA in every webhook configuration and CRD", Duration::from_secs(60), || {
            let client = client.clone();
            let new_ca = new_ca.clone();
            async move {
                let has_new = |bundle: Option<&k8s_openapi::ByteString>| {
                    bundle.is_some_and(|b| b.0.windows(new_ca.len()).any(|w| w == new_ca.as_slice()))
                };
                let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
                let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
                let crds: Api<CustomResourceDefinition> = Api::all(client);
                let m = mutating.get("kruise-mutating-webhook-configuration").await?;
                let v = validating.get("kruise-validating-webhook-configuration").await?;
                let m_ok = m.webhooks.iter().flatten().all(|w| has_new(w.client_config.ca_bundle.as_ref()));
                let v_ok = v.webhooks.iter().flatten().all(|w| has_new(w.client_config.ca_bundle.as_ref()));
                let crd = crds.get("broadcastjobs.apps.kruise.io").await?;
                let c_ok = has_new(
                    crd.spec
                        .conversion
                        .as_ref()
                        .and_then(|c| c.webhook.as_ref())
                        .and_then(|w| w.client_config.as_ref())
                        .and_then(|c| c.ca_bundle.as_ref()),
                );
                Ok(m_ok && v_ok && c_ok)
            }
        })
        .await?;

        // Admission and conversion work with the new certificate: a v1alpha1 object is converted, defaulted
        // and validated; an invalid one is rejected by our webhook.
        let valid = r#"{"apiVersion":"apps.kruise.io/v1alpha1","kind":"BroadcastJob","metadata":{"name":"after-rotation"},
            "spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#;
        eventually("a create through the rotated webhook", Duration::from_secs(30), || async {
            Ok(ns.apply(valid).await.ok())
        })
        .await?;
        let failure = ns
            .kubectl(&["get", "broadcastjobs.v1beta1.apps.kruise.io", "after-rotation", "-o", "jsonpath={.spec.failurePolicy.type}"])
            .await?;
        ensure!(failure.trim() == "FailFast", "defaults applied after rotation: {failure}");
        let invalid = valid.replace("after-rotation", "invalid-after-rotation").replace("\"Never\"", "\"Always\"");
        let error = ns.apply(&invalid).await.err().context("the invalid object was accepted")?;
        ensure!(format!("{error:#}").contains("denied the request"), "{error:#}");
        Ok(())
    })
    .await
}
