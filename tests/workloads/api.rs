//! The apps.kruise.io API through the real apiserver and kruise-manager's webhooks: examples are accepted
//! and defaulted, v1alpha1 and v1beta1 convert both ways without loss, and invalid objects are rejected
//! with a message that names the field.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use kruise_api::kinds::{Kind, V1ALPHA1, V1BETA1};
use kruise_e2e::example_documents;
use kruise_testkit::{TestNamespace, managed_namespace, testbed};
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
/// The apps.kruise.io examples for a test in namespace `ns`: renamed with `suffix`, namespaced objects
/// moved into `ns`, and cluster-scoped SidecarSets restricted to `ns` so that tests running at the same
/// time never overlap (overlapping SidecarSets with one container name are rejected).
/// The kinds this binary's manager (default gates: `ImagePullJobGate` off) does not serve, and that have no
/// user example here: image pre-pulling's examples, conversion and invalid objects are checked in
/// tests/imagepulljob.rs, with the gate on.
const ELSEWHERE: &[Kind] = &[Kind::ImagePullJob, Kind::ImageListPullJob, Kind::NodeImage];

fn kruise_examples(ns: &str, suffix: &str) -> Vec<(String, Kind, Value)> {
    example_documents()
        .into_iter()
        .filter(|(_, doc)| {
            doc["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("apps.kruise.io/"))
        })
        .filter_map(|(file, mut doc)| {
            let kind = Kind::from_kind(doc["kind"].as_str()?).ok()?;
            if ELSEWHERE.contains(&kind) {
                return None;
            }
            let name = format!("{}-{suffix}", doc["metadata"]["name"].as_str()?);
            doc["metadata"]["name"] = json!(name);
            // Each test works in its own namespace.
            if let Some(meta) = doc["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            if !kind.namespaced()
                && let Some(spec) = doc["spec"].as_object_mut()
            {
                spec.remove("namespace");
                spec.insert(
                    "namespaceSelector".into(),
                    json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}),
                );
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
    let ns = managed_namespace("examples").await?;
    ns.run(async {
        let examples = kruise_examples(&ns.name, "ex");
        ensure!(!examples.is_empty(), "no apps.kruise.io examples");
        // The other documents (e.g. the seed's Pod) are accepted as they are.
        for (file, mut doc) in example_documents() {
            if doc["apiVersion"].as_str().is_some_and(|v| v.starts_with("apps.kruise.io/")) {
                continue;
            }
            if let Some(meta) = doc["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            ns.apply(&doc.to_string()).await.with_context(|| format!("creating {file}"))?;
        }
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
    let ns = managed_namespace("convert").await?;
    ns.run(async {
        let examples = kruise_examples(&ns.name, "rt");
        let covered: BTreeSet<(String, String)> = examples
            .iter()
            .map(|(_, kind, doc)| {
                (
                    kind.name().to_string(),
                    doc["apiVersion"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        for kind in Kind::ALL.iter().filter(|k| !ELSEWHERE.contains(k)) {
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

/// A valid object of each kind; the invalid cases are merge patches on it.
fn base(kind: &str, api_version: &str) -> Value {
    let template = |restart: &str| {
        json!({"metadata": {"labels": {"app": "x"}},
               "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "nginx:alpine"}]}})
    };
    let spec = match kind {
        "BroadcastJob" => json!({"template": template("Never")}),
        "AdvancedCronJob" => json!({"schedule": "@hourly",
                                    "template": {"jobTemplate": {"spec": {"template": template("Never")}}}}),
        "SidecarSet" => json!({"selector": {"matchLabels": {"app": "x"}},
                               "containers": [{"name": "sidecar", "image": "busybox:1.36"}]}),
        "DaemonSet" => {
            json!({"selector": {"matchLabels": {"app": "x"}}, "template": template("Always")})
        }
        "UnitedDeployment" => json!({
            "replicas": 2,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"cloneSetTemplate": {"metadata": {"labels": {"app": "x"}},
                                              "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template("Always")}}},
            "topology": {"subsets": [
                {"name": "a", "nodeSelectorTerm": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}},
                {"name": "b", "nodeSelectorTerm": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}}
            ]}
        }),
        _ => {
            json!({"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": template("Always")})
        }
    };
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "invalid"}, "spec": spec})
}

/// (what is wrong, kind, apiVersion, merge patch on the valid base, text the rejection must contain).
const INVALID: &[(&str, &str, &str, &str, &str)] = &[
    // AdvancedCronJob
    (
        "AdvancedCronJob schedule out of range",
        "AdvancedCronJob",
        V1BETA1,
        r#"{"spec":{"schedule":"0 25 * * *"}}"#,
        "spec.schedule: Invalid value: \"0 25 * * *\"",
    ),
    (
        "AdvancedCronJob unknown time zone",
        "AdvancedCronJob",
        V1ALPHA1,
        r#"{"spec":{"timeZone":"Mars/Olympus"}}"#,
        "spec.timeZone",
    ),
    (
        "AdvancedCronJob negative startingDeadlineSeconds",
        "AdvancedCronJob",
        V1BETA1,
        r#"{"spec":{"startingDeadlineSeconds":-5}}"#,
        "spec.startingDeadlineSeconds",
    ),
    (
        "AdvancedCronJob unknown concurrencyPolicy (schema)",
        "AdvancedCronJob",
        V1BETA1,
        r#"{"spec":{"concurrencyPolicy":"Sometimes"}}"#,
        "spec.concurrencyPolicy",
    ),
    // BroadcastJob
    (
        "BroadcastJob restartPolicy Always",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"template":{"spec":{"restartPolicy":"Always"}}}}"#,
        "spec.template.spec.restartPolicy",
    ),
    (
        "BroadcastJob TTL with completionPolicy Never",
        "BroadcastJob",
        V1ALPHA1,
        r#"{"spec":{"completionPolicy":{"type":"Never","ttlSecondsAfterFinished":10}}}"#,
        "spec.completionPolicy.ttlSecondsAfterFinished",
    ),
    (
        "BroadcastJob unknown completionPolicy type",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"completionPolicy":{"type":"Sometimes"}}}"#,
        "spec.completionPolicy.type",
    ),
    (
        "BroadcastJob parallelism as a bare numeric string",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"parallelism":"5"}}"#,
        "spec.parallelism",
    ),
    (
        "BroadcastJob negative restartLimit",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"failurePolicy":{"type":"Continue","restartLimit":-1}}}"#,
        "spec.failurePolicy.restartLimit",
    ),
    (
        "BroadcastJob preset controller label",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"template":{"metadata":{"labels":{"broadcastjob-name":"x"}}}}}"#,
        "spec.template.metadata.labels[broadcastjob-name]",
    ),
    (
        "BroadcastJob duplicate container names",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"a","image":"b"},{"name":"a","image":"c"}]}}}}"#,
        "spec.template.spec.containers[1].name",
    ),
    (
        "BroadcastJob paused as a string (schema)",
        "BroadcastJob",
        V1BETA1,
        r#"{"spec":{"paused":"yes"}}"#,
        "spec.paused",
    ),
    // CloneSet
    (
        "CloneSet negative replicas",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"replicas":-1}}"#,
        "spec.replicas",
    ),
    (
        "CloneSet partition 150%",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":"150%"}}}}"#,
        "spec.updateStrategy.rollingUpdate.partition",
    ),
    (
        "CloneSet v1alpha1 partition 150%",
        "CloneSet",
        V1ALPHA1,
        r#"{"spec":{"updateStrategy":{"type":"InPlaceIfPossible","partition":"150%"}}}"#,
        "spec.updateStrategy.rollingUpdate.partition",
    ),
    (
        "CloneSet maxUnavailable as a bare numeric string",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"5"}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    (
        "CloneSet maxUnavailable and maxSurge both 0",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":0,"maxSurge":0}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    (
        "CloneSet InPlaceOnly with maxSurge",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"podUpdatePolicy":"InPlaceOnly","maxSurge":1}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxSurge",
    ),
    (
        "CloneSet unknown update type",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"type":"Canary"}}}"#,
        "spec.updateStrategy.type",
    ),
    (
        "CloneSet unknown podUpdatePolicy",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"podUpdatePolicy":"Hot"}}}}"#,
        "spec.updateStrategy.rollingUpdate.podUpdatePolicy",
    ),
    (
        "CloneSet duplicate podsToDelete",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"scaleStrategy":{"podsToDelete":["p","p"]}}}"#,
        "spec.scaleStrategy.podsToDelete[1]",
    ),
    (
        "CloneSet selector not matching the template",
        "CloneSet",
        V1ALPHA1,
        r#"{"spec":{"selector":{"matchLabels":{"app":"db"}}}}"#,
        "spec.template.metadata.labels",
    ),
    (
        "CloneSet both priority forms",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"priorityStrategy":{"orderPriority":[{"orderedKey":"k"}],"weightPriority":[{"weight":1,"matchSelector":{"matchLabels":{"a":"b"}}}]}}}}}"#,
        "spec.updateStrategy.rollingUpdate.priorityStrategy",
    ),
    (
        "CloneSet repeated scatter term",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"scatterStrategy":[{"key":"zone","value":"a"},{"key":"zone","value":"a"}]}}}}"#,
        "spec.updateStrategy.rollingUpdate.scatterStrategy[1]",
    ),
    (
        "CloneSet restartPolicy Never",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"template":{"spec":{"restartPolicy":"Never"}}}}"#,
        "spec.template.spec.restartPolicy",
    ),
    (
        "CloneSet invalid lifecycle label key",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"lifecycle":{"preDelete":{"labelsHandler":{"bad key":"x"}}}}}"#,
        "spec.lifecycle.preDelete.labelsHandler[bad key]",
    ),
    (
        "CloneSet replicas as a string (schema)",
        "CloneSet",
        V1BETA1,
        r#"{"spec":{"replicas":"two"}}"#,
        "spec.replicas",
    ),
    // SidecarSet
    (
        "SidecarSet without a selector",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"selector":null}}"#,
        "spec.selector",
    ),
    (
        "SidecarSet partition together with a canary selector",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"partition":1,"selector":{"matchLabels":{"canary":"true"}}}}}"#,
        "spec.updateStrategy.partition",
    ),
    (
        "SidecarSet maxUnavailable 0",
        "SidecarSet",
        V1ALPHA1,
        r#"{"spec":{"updateStrategy":{"maxUnavailable":0}}}"#,
        "spec.updateStrategy.maxUnavailable",
    ),
    (
        "SidecarSet RollingUpdate with a native sidecar",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"initContainers":[{"name":"native","image":"busybox:1.36","restartPolicy":"Always"}]}}"#,
        "spec.updateStrategy.type",
    ),
    (
        "SidecarSet HotUpgrade without an empty image",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.36","upgradeStrategy":{"upgradeType":"HotUpgrade"}}]}}"#,
        "spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage",
    ),
    (
        "SidecarSet injection revision without a name or version",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"injectionStrategy":{"revision":{"policy":"Always"}}}}"#,
        "spec.injectionStrategy.revision",
    ),
    (
        "SidecarSet mount of an undeclared volume",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"containers":[{"name":"sidecar","image":"busybox:1.36","volumeMounts":[{"name":"missing","mountPath":"/m"}]}]}}"#,
        "spec.containers[0].volumeMounts[0].name",
    ),
    (
        "SidecarSet container name clash with an existing SidecarSet",
        "SidecarSet",
        V1BETA1,
        r#"{"spec":{"selector":{"matchLabels":{"clash":"yes"}}}}"#,
        "spec.containers[0].name",
    ),
    // UnitedDeployment
    (
        "UnitedDeployment subset replicas over 100%",
        "UnitedDeployment",
        V1BETA1,
        r#"{"spec":{"topology":{"subsets":[{"name":"a","replicas":"150%"},{"name":"b"}]}}}"#,
        "spec.topology.subsets[0].replicas",
    ),
    (
        "UnitedDeployment duplicate subset names",
        "UnitedDeployment",
        V1BETA1,
        r#"{"spec":{"topology":{"subsets":[{"name":"a"},{"name":"a"}]}}}"#,
        "spec.topology.subsets[1].name",
    ),
    (
        "UnitedDeployment partition of an unknown subset",
        "UnitedDeployment",
        V1ALPHA1,
        r#"{"spec":{"updateStrategy":{"type":"Manual","manualUpdate":{"partitions":{"nope":1}}}}}"#,
        "spec.updateStrategy.manualUpdate.partitions",
    ),
    (
        "UnitedDeployment selector not matching the template",
        "UnitedDeployment",
        V1BETA1,
        r#"{"spec":{"selector":{"matchLabels":{"app":"other"}}}}"#,
        "spec.template.cloneSetTemplate.spec.template.metadata.labels",
    ),
    // Advanced StatefulSet
    (
        "StatefulSet maxUnavailable 2 with OrderedReady",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":2}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    (
        "StatefulSet in-place update without the readiness gate",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"podUpdatePolicy":"InPlaceIfPossible"}}}}"#,
        "spec.template.spec.readinessGates",
    ),
    (
        "StatefulSet reversed reserveOrdinals range",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"reserveOrdinals":["5-3"]}}"#,
        "spec.reserveOrdinals[0]",
    ),
    (
        "StatefulSet minReadySeconds above 300",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"minReadySeconds":301}}}}"#,
        "spec.updateStrategy.rollingUpdate.minReadySeconds",
    ),
    (
        "StatefulSet negative replicas",
        "StatefulSet",
        V1ALPHA1,
        r#"{"spec":{"replicas":-1}}"#,
        "spec.replicas",
    ),
    (
        "StatefulSet unknown podManagementPolicy",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"podManagementPolicy":"Random"}}"#,
        "spec.podManagementPolicy",
    ),
    (
        "StatefulSet selector not matching the template",
        "StatefulSet",
        V1BETA1,
        r#"{"spec":{"selector":{"matchLabels":{"app":"y"}}}}"#,
        "spec.template.metadata.labels",
    ),
    // Advanced DaemonSet
    (
        "DaemonSet maxSurge with InPlaceIfPossible",
        "DaemonSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"rollingUpdateType":"InPlaceIfPossible","maxUnavailable":0,"maxSurge":1}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxSurge",
    ),
    (
        "DaemonSet maxUnavailable 150%",
        "DaemonSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"150%"}}}}"#,
        "spec.updateStrategy.rollingUpdate.maxUnavailable",
    ),
    (
        "DaemonSet partition 120%",
        "DaemonSet",
        V1BETA1,
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":"120%"}}}}"#,
        "spec.updateStrategy.rollingUpdate.partition",
    ),
    (
        "DaemonSet inPlaceUpdate lifecycle hook",
        "DaemonSet",
        V1BETA1,
        r#"{"spec":{"lifecycle":{"inPlaceUpdate":{"labelsHandler":{"a":"b"}}}}}"#,
        "spec.lifecycle.inPlaceUpdate",
    ),
    (
        "DaemonSet unknown update type",
        "DaemonSet",
        V1ALPHA1,
        r#"{"spec":{"updateStrategy":{"type":"Recreate"}}}"#,
        "spec.updateStrategy.type",
    ),
    (
        "DaemonSet restartPolicy OnFailure",
        "DaemonSet",
        V1BETA1,
        r#"{"spec":{"template":{"spec":{"restartPolicy":"OnFailure"}}}}"#,
        "spec.template.spec.restartPolicy",
    ),
];

#[tokio::test]
async fn invalid_objects_are_rejected_naming_the_field() -> anyhow::Result<()> {
    let ns = managed_namespace("invalid").await?;
    ns.run(async {
        // An existing SidecarSet injecting a container named "sidecar" into Pods labelled clash=yes.
        let mut existing = base("SidecarSet", V1BETA1);
        existing["metadata"]["name"] = json!("existing-sidecarset");
        existing["spec"]["selector"] = json!({"matchLabels": {"clash": "yes"}});
        let only_here = json!({"matchLabels": {"kubernetes.io/metadata.name": ns.name}});
        existing["spec"]["namespaceSelector"] = only_here.clone();
        ns.apply(&existing.to_string())
            .await
            .context("creating the existing SidecarSet")?;
        let mut failures = Vec::new();
        let kinds: BTreeSet<&str> = INVALID.iter().map(|case| case.1).collect();
        for kind in Kind::ALL.iter().filter(|k| !ELSEWHERE.contains(k)) {
            ensure!(
                kinds.contains(kind.name()),
                "no invalid {} in the table",
                kind.name()
            );
        }
        for (i, (what, kind, api_version, patch, field)) in INVALID.iter().enumerate() {
            let patch: Value =
                serde_json::from_str(patch).with_context(|| format!("case {what} is not JSON"))?;
            let mut doc = base(kind, api_version);
            json_patch::merge(&mut doc, &patch);
            if *kind == "SidecarSet" {
                // Cluster-scoped: keep it to this test's namespace, away from other tests' SidecarSets.
                doc["spec"]["namespaceSelector"] = only_here.clone();
            }
            let name = format!("invalid-{i}");
            doc["metadata"]["name"] = json!(name);
            match ns.apply(&doc.to_string()).await {
                Ok(out) => failures.push(format!("{what}: accepted ({})", out.trim())),
                Err(error) => {
                    let message = format!("{error:#}");
                    if !message.contains(field) {
                        failures.push(format!("{what}: message does not name {field}: {message}"));
                    }
                }
            }
            let kind = Kind::from_kind(kind)?;
            if api_for(&ns, kind, V1BETA1).get_opt(&name).await?.is_some() {
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
        println!(
            "{} invalid objects rejected, each naming its field",
            INVALID.len()
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
        let mut invalid = base("BroadcastJob", V1BETA1);
        json_patch::merge(&mut invalid, &json!({"spec": {"paused": "no"}}));
        let _ = ns.apply(&invalid.to_string()).await;
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

/// Every file in examples/ applies as it is on `make run`: an object there names no namespace (the
/// reader's current one) or one every cluster has, never one the reader would have to create first.
#[test]
fn examples_name_only_namespaces_every_cluster_has() {
    let every_cluster_has = ["default", "kube-system"];
    let elsewhere: Vec<String> = example_documents()
        .into_iter()
        .filter_map(|(file, doc)| {
            let namespace = doc["metadata"]["namespace"].as_str()?.to_owned();
            (!every_cluster_has.contains(&namespace.as_str()))
                .then(|| format!("{file}: {namespace}"))
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "examples in a namespace to create first: {elsewhere:?}"
    );
}
