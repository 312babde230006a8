//! The apps.kruise.io API through the real apiserver and kruise-manager's webhooks: examples are accepted
//! and defaulted, v1alpha1 and v1beta1 convert both ways without loss, and invalid objects are rejected
//! with a message that names the field.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use kruise_api::kinds::{Kind, V1ALPHA1, V1BETA1};
use kruise_e2e::example_documents;
use kruise_testkit::{TestNamespace, testbed};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

fn api_for(ns: &TestNamespace, kind: Kind, api_version: &str) -> Api<DynamicObject> {
    let version = api_version.rsplit('/').next().unwrap_or("v1beta1");
    let gvk = GroupVersionKind::gvk("apps.kruise.io", version, kind.name());
    let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
    if !kind.namespaced() {
        Api::all_with(ns.client.clone(), &resource)
    } else {
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource)
    }
}

/// The apps.kruise.io examples, renamed with `suffix` so that tests do not collide.
fn kruise_examples(suffix: &str) -> Vec<(String, Kind, Value)> {
    example_documents()
        .into_iter()
        .filter(|(_, doc)| {
            doc["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("apps.kruise.io/"))
        })
        .filter_map(|(file, mut doc)| {
            let kind = Kind::from_kind(doc["kind"].as_str()?).ok()?;
            let name = format!("{}-{suffix}", doc["metadata"]["name"].as_str()?);
            doc["metadata"]["name"] = json!(name);
            // Each test works in its own namespace.
            if let Some(meta) = doc["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            Some((file, kind, doc))
        })
        .collect()
}

async fn read(
    ns: &TestNamespace,
    kind: Kind,
    api_version: &str,
    name: &str,
) -> anyhow::Result<Value> {
    let object = api_for(ns, kind, api_version)
        .get(name)
        .await
        .with_context(|| format!("reading {name} as {api_version}"))?;
    Ok(serde_json::to_value(object)?)
}

#[tokio::test]
async fn examples_are_accepted_and_read_back_with_defaults() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("examples").await?;
    ns.run(async {
        let examples = kruise_examples("ex");
        ensure!(!examples.is_empty(), "no apps.kruise.io examples");
        for (file, kind, doc) in &examples {
            ns.apply(&doc.to_string()).await.with_context(|| format!("creating {file}"))?;
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let stored = read(&ns, *kind, V1BETA1, name).await?;
            // What the webhook should have made of it: the example, converted and defaulted.
            let expected = kind.default_object(kind.convert(doc.clone(), V1BETA1)?)?;
            ensure!(
                stored["spec"] == expected["spec"],
                "{file}: stored spec differs from the defaulted example\nstored:   {}\nexpected: {}",
                stored["spec"],
                expected["spec"]
            );
        }
        for (_, kind, doc) in &examples {
            if !kind.namespaced() {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default();
                api_for(&ns, *kind, V1BETA1).delete(name, &Default::default()).await?;
            }
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn conversion_through_the_apiserver_loses_nothing() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("convert").await?;
    ns.run(async {
        let examples = kruise_examples("rt");
        let covered: BTreeSet<(String, String)> = examples
            .iter()
            .map(|(_, kind, doc)| {
                (
                    kind.name().to_string(),
                    doc["apiVersion"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        for kind in Kind::ALL {
            for version in [V1ALPHA1, V1BETA1] {
                ensure!(
                    covered.contains(&(kind.name().to_string(), version.to_string())),
                    "no {version} example of {} in examples/",
                    kind.name()
                );
            }
        }
        for (file, kind, doc) in &examples {
            let written = doc["apiVersion"].as_str().unwrap_or_default().to_string();
            let other = if written == V1ALPHA1 {
                V1BETA1
            } else {
                V1ALPHA1
            };
            ns.apply(&doc.to_string())
                .await
                .with_context(|| format!("creating {file}"))?;
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let as_written = read(&ns, *kind, &written, name).await?;
            let as_other = read(&ns, *kind, other, name).await?;
            ensure!(
                as_other["apiVersion"] == other,
                "{file}: served as {}",
                as_other["apiVersion"]
            );
            // The apiserver's answer in the other version is our conversion of what it stores, and converting
            // it back gives the object as written: nothing lost either way.
            let back = kind.convert(as_other.clone(), &written)?;
            ensure!(
                back["spec"] == as_written["spec"],
                "{file}: {other} → {written} changed the spec\nback:    {}\nwritten: {}",
                back["spec"],
                as_written["spec"]
            );
            ensure!(
                back["metadata"]["annotations"] == as_written["metadata"]["annotations"]
                    && back["metadata"]["labels"] == as_written["metadata"]["labels"],
                "{file}: labels or annotations changed through {other}"
            );
            let forth = kind.convert(as_written.clone(), other)?;
            ensure!(
                forth["spec"] == as_other["spec"],
                "{file}: the apiserver's {other} form differs from ours"
            );
            if !kind.namespaced() {
                api_for(&ns, *kind, V1BETA1)
                    .delete(name, &Default::default())
                    .await?;
            }
        }
        Ok(())
    })
    .await
}

/// (what is wrong, manifest, text the rejection must contain — the field path).
const INVALID: &[(&str, &str, &str)] = &[
    (
        "BroadcastJob restartPolicy Always",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-restart"},
            "spec":{"template":{"spec":{"restartPolicy":"Always","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.template.spec.restartPolicy",
    ),
    (
        "BroadcastJob TTL with completionPolicy Never",
        r#"{"apiVersion":"apps.kruise.io/v1alpha1","kind":"BroadcastJob","metadata":{"name":"bad-ttl"},
            "spec":{"completionPolicy":{"type":"Never","ttlSecondsAfterFinished":10},
            "template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.completionPolicy.ttlSecondsAfterFinished",
    ),
    (
        "BroadcastJob unknown completionPolicy type",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-policy"},
            "spec":{"completionPolicy":{"type":"Sometimes"},
            "template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.completionPolicy.type",
    ),
    (
        "BroadcastJob parallelism as a bare numeric string",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-parallelism"},
            "spec":{"parallelism":"5","template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.parallelism",
    ),
    (
        "BroadcastJob negative restartLimit",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-limit"},
            "spec":{"failurePolicy":{"type":"Continue","restartLimit":-1},
            "template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.failurePolicy.restartLimit",
    ),
    (
        "BroadcastJob preset controller label",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-label"},
            "spec":{"template":{"metadata":{"labels":{"broadcastjob-name":"x"}},
            "spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.template.metadata.labels[broadcastjob-name]",
    ),
    (
        "BroadcastJob duplicate container names",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-dup"},
            "spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"},{"name":"a","image":"c"}]}}}}"#,
        "spec.template.spec.containers[1].name",
    ),
    (
        "BroadcastJob paused as a string (schema)",
        r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"BroadcastJob","metadata":{"name":"bad-paused"},
            "spec":{"paused":"yes","template":{"spec":{"restartPolicy":"Never","containers":[{"name":"a","image":"b"}]}}}}"#,
        "spec.paused",
    ),
];

#[tokio::test]
async fn invalid_objects_are_rejected_naming_the_field() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("invalid").await?;
    ns.run(async {
        let mut failures = Vec::new();
        for (what, manifest, field) in INVALID {
            let doc: Value = serde_json::from_str(manifest)
                .with_context(|| format!("case {what} is not JSON"))?;
            match ns.apply(&doc.to_string()).await {
                Ok(out) => failures.push(format!("{what}: accepted ({})", out.trim())),
                Err(error) => {
                    let message = format!("{error:#}");
                    if !message.contains(field) {
                        failures.push(format!("{what}: message does not name {field}: {message}"));
                    }
                }
            }
            let kind = Kind::from_kind(doc["kind"].as_str().unwrap_or_default())?;
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            if api_for(&ns, kind, V1BETA1).get_opt(name).await?.is_some() {
                failures.push(format!("{what}: the object exists after the rejection"));
            }
        }
        ensure!(
            failures.is_empty(),
            "{} of {} cases failed:\n{}",
            failures.len(),
            INVALID.len(),
            failures.join("\n")
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn manager_serves_metrics_health_and_readiness() -> anyhow::Result<()> {
    let bed = testbed();
    let ports = bed.manager();
    let ns = bed.namespace("endpoints").await?;
    ns.run(async {
        let (code, body) = kruise_testkit::manager::http_get(ports.health, "/healthz").await?;
        ensure!(
            code == 200 && body.trim() == "ok",
            "/healthz: {code} {body}"
        );
        let (code, body) = kruise_testkit::manager::http_get(ports.health, "/readyz").await?;
        ensure!(code == 200 && body.trim() == "ok", "/readyz: {code} {body}");
        // Make sure at least one admission request was counted.
        let _ = ns.apply(INVALID[0].1).await;
        let metrics =
            kruise_testkit::eventually("webhook metrics", Duration::from_secs(30), || async {
                let (code, body) =
                    kruise_testkit::manager::http_get(ports.metrics, "/metrics").await?;
                Ok(
                    (code == 200 && body.contains("kruise_webhook_requests_total{"))
                        .then_some(body),
                )
            })
            .await?;
        ensure!(
            metrics.contains("kruise_manager_leader 1"),
            "the only manager leads:\n{metrics}"
        );
        ensure!(
            metrics.contains("kruise_webhook_request_duration_seconds_bucket"),
            "{metrics}"
        );
        Ok(())
    })
    .await
}
