//! SidecarSet injection through kruise-manager's Pod webhook (`mpod.kb.io`) on a real control plane:
//! seed 001's walkthrough part 1 (logtail into the nginx test Pod), several SidecarSets on one Pod,
//! namespace scoping, the namespaces that are never injected, and resourcesPolicy.
//!
//! SidecarSets are cluster-scoped and the test bed is shared by the tests of this binary, so every
//! SidecarSet here has a unique name, is restricted to its test's namespace (or selects a label only
//! its test uses) and is deleted when the test ends.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::sidecarset_kit::{logtail, wait_ready};
use kruise_e2e::{Cleanup, container_names, example, wait_injected_on_dry_run};
use kruise_testkit::{TestNamespace, testbed};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A second SidecarSet (v1beta1) for the same Pods: a metrics exporter appended after the app
/// container, restricted to `ns` by namespaceSelector.
fn metrics(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "nginx"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "containers": [{
                "name": "metrics",
                "image": "prom/nginx-exporter:1.1",
                "podInjectPolicy": "AfterAppContainer",
            }],
        },
    })
}

fn yaml(value: &Value) -> anyhow::Result<String> {
    Ok(serde_yaml::to_string(value)?)
}

/// `kubectl get pod <name> -o jsonpath=<path>`.
async fn jsonpath(ns: &TestNamespace, name: &str, path: &str) -> anyhow::Result<String> {
    ns.kubectl(&["get", "pod", name, "-o", &format!("jsonpath={path}")])
        .await
}

#[tokio::test]
async fn seed_001_logtail_is_injected_into_the_test_pod() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("sidecar-seed").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("logtail-{}", ns.name);
        cleanup.sidecarset(&name);
        let out = ns.apply(&yaml(&logtail(&name, &ns.name, json!({}))?)?).await?;
        ensure!(out.contains("created"), "{out}");
        let pod = example("sidecarset-test-pod.yaml")?;
        wait_injected_on_dry_run(&ns.client, &ns.name, &pod, TIMEOUT, &["logtail", "nginx"]).await?;

        let began = std::time::Instant::now();
        ns.apply(&yaml(&pod)?).await?;
        wait_ready(&ns.api(), "test-pod", TIMEOUT).await?;
        eprintln!("test-pod Running 2/2 in {:?}", began.elapsed());

        // What the article shows: `kubectl get pod test-pod` → READY 2/2, Running.
        let table = ns.kubectl(&["get", "pod", "test-pod", "--no-headers"]).await?;
        let columns: Vec<&str> = table.split_whitespace().collect();
        ensure!(
            columns.get(1) == Some(&"2/2") && columns.get(2) == Some(&"Running"),
            "kubectl get pod test-pod: {table}"
        );
        let names = jsonpath(&ns, "test-pod", "{.spec.containers[*].name}").await?;
        ensure!(names == "logtail nginx", "containers: {names}");
        // The shared volume is the Pod's own, mounted by both containers.
        let volumes = jsonpath(&ns, "test-pod", "{.spec.volumes[*].name}").await?;
        ensure!(
            volumes.split_whitespace().filter(|v| *v == "nginx-log").count() == 1,
            "volumes: {volumes}"
        );
        for container in ["logtail", "nginx"] {
            let mounts = jsonpath(
                &ns,
                "test-pod",
                &format!(
                    "{{.spec.containers[?(@.name==\"{container}\")].volumeMounts[?(@.name==\"nginx-log\")].mountPath}}"
                ),
            )
            .await?;
            ensure!(mounts == "/var/log/nginx", "{container} mounts: {mounts}");
        }
        // transferEnv: TZ copied from the nginx container.
        let tz = jsonpath(
            &ns,
            "test-pod",
            "{.spec.containers[?(@.name==\"logtail\")].env[?(@.name==\"TZ\")].value}",
        )
        .await?;
        ensure!(tz == "Asia/Shanghai", "logtail TZ: {tz:?}");
        let injected = jsonpath(
            &ns,
            "test-pod",
            "{.metadata.annotations.kruise\\.io/sidecarset-injected-list}",
        )
        .await?;
        ensure!(injected == name, "injected list: {injected}");
        let hash = jsonpath(
            &ns,
            "test-pod",
            "{.metadata.annotations.kruise\\.io/sidecarset-hash}",
        )
        .await?;
        let hash: Value = serde_json::from_str(&hash).context("hash annotation")?;
        ensure!(
            hash[&name]["sidecarList"] == json!(["logtail"]),
            "hash annotation: {hash}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn two_sidecarsets_on_one_pod_and_the_namespace_restricts_injection() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("sidecar-two").await?;
    let other = bed.namespace("sidecar-other").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let log_name = format!("logtail-{}", ns.name);
        let metrics_name = format!("metrics-{}", ns.name);
        cleanup.sidecarset(&log_name);
        cleanup.sidecarset(&metrics_name);
        ns.apply(&yaml(&logtail(&log_name, &ns.name, json!({}))?)?)
            .await?;
        ns.apply(&yaml(&metrics(&metrics_name, &ns.name))?).await?;
        let pod = example("sidecarset-test-pod.yaml")?;
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod,
            TIMEOUT,
            &["logtail", "nginx", "metrics"],
        )
        .await?;

        ns.apply(&yaml(&pod)?).await?;
        let running = wait_ready(&ns.api(), "test-pod", TIMEOUT).await?;
        ensure!(
            container_names(&running) == ["logtail", "nginx", "metrics"],
            "containers: {:?}",
            container_names(&running)
        );
        let table = ns
            .kubectl(&["get", "pod", "test-pod", "--no-headers"])
            .await?;
        ensure!(table.split_whitespace().nth(1) == Some("3/3"), "{table}");
        let injected = jsonpath(
            &ns,
            "test-pod",
            "{.metadata.annotations.kruise\\.io/sidecarset-injected-list}",
        )
        .await?;
        let mut want = [log_name.clone(), metrics_name.clone()];
        want.sort();
        ensure!(injected == want.join(","), "injected list: {injected}");

        // The same Pod in another namespace matches the selectors but neither namespace scope.
        other.apply(&yaml(&pod)?).await?;
        let plain = wait_ready(&other.api(), "test-pod", TIMEOUT).await?;
        ensure!(
            container_names(&plain) == ["nginx"],
            "outside the SidecarSets' namespace: {:?}",
            container_names(&plain)
        );
        let annotations = plain.metadata.annotations.unwrap_or_default();
        ensure!(
            !annotations.contains_key("kruise.io/sidecarset-injected-list"),
            "{annotations:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn kube_system_and_the_manager_namespace_are_never_injected() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("sidecar-system").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        // The registration cannot block the cluster: Ignore on failure, a short timeout, and the
        // system namespaces out of scope.
        let hook = |field: &str| {
            let path = format!("jsonpath={{.webhooks[?(@.name==\"mpod.kb.io\")].{field}}}");
            async move {
                bed.plane
                    .kubectl(&[
                        "get",
                        "mutatingwebhookconfiguration",
                        "kruise-mutating-webhook-configuration",
                        "-o",
                        &path,
                    ])
                    .await
            }
        };
        ensure!(hook("failurePolicy").await? == "Ignore");
        ensure!(hook("timeoutSeconds").await? == "5");
        ensure!(hook("clientConfig.url").await?.ends_with("/mutate-pod"));
        let opt_out = hook("namespaceSelector.matchExpressions[1]").await?;
        ensure!(
            opt_out.contains("control-plane") && opt_out.contains("DoesNotExist"),
            "{opt_out}"
        );
        let excluded = hook("namespaceSelector.matchExpressions[0].values").await?;
        ensure!(
            excluded.contains("kube-system") && excluded.contains("kruise-system"),
            "{excluded}"
        );

        // Not namespace-scoped: selects a label only this test uses, in every namespace.
        let label = format!("probe-{}", ns.name);
        let name = format!("everywhere-{}", ns.name);
        cleanup.sidecarset(&name);
        let set = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"e2e-probe": label}},
                "containers": [{"name": "probe-agent", "image": "busybox:1.36"}],
            },
        });
        ns.apply(&yaml(&set)?).await?;
        let pod = |pod_name: &str| {
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod_name, "labels": {"e2e-probe": label}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            })
        };
        // In an ordinary namespace the SidecarSet applies…
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod("x"),
            TIMEOUT,
            &["probe-agent", "app"],
        )
        .await?;
        // …but not in kube-system nor in the manager's namespace (not even sent to the webhook).
        for namespace in ["kube-system", kruise_testkit::manager::NAMESPACE] {
            let pod_name = format!("probe-{}", ns.name);
            cleanup.pod(namespace, &pod_name);
            let api: Api<Pod> = Api::namespaced(ns.client.clone(), namespace);
            let created = api
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(pod(&pod_name))?,
                )
                .await
                .with_context(|| format!("creating a Pod in {namespace}"))?;
            ensure!(
                container_names(&created) == ["app"],
                "{namespace}: {:?}",
                container_names(&created)
            );
            let annotations = created.metadata.annotations.unwrap_or_default();
            ensure!(
                !annotations.contains_key("kruise.io/sidecarset-hash"),
                "{namespace}: {annotations:?}"
            );
            api.delete(&pod_name, &DeleteParams::default()).await?;
        }
        Ok(())
    })
    .await
}

/// `resourcesPolicy`: the sidecar's resources are computed from the app containers' (sum mode), and
/// an expression that can never be computed is refused when the SidecarSet is applied, naming the
/// field.
#[tokio::test]
async fn resources_policy_sizes_the_sidecar_after_the_app_containers() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-res").await?;
    let mut cleanup = Cleanup::new();
    let name = format!("sized-{}", ns.name);
    cleanup.sidecarset(&name);
    ns.run(async {
        let policy = json!({
            "targetContainersMode": "sum",
            "targetContainersNameRegex": "^app-",
            "resourcesExpr": {
                "limits": {"cpu": "cpu*50%", "memory": "memory"},
                "requests": {"cpu": "max(cpu*10%, 50m)", "memory": "memory/2"},
            },
        });
        let set = |policy: &Value| {
            json!({
                "apiVersion": "apps.kruise.io/v1beta1",
                "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": "sized"}},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                    "containers": [{"name": "proxy", "image": "envoy:1.30", "resourcesPolicy": policy}],
                },
            })
        };
        let mut impossible = policy.clone();
        impossible["resourcesExpr"]["limits"]["cpu"] = json!("cpu * 100m");
        let refused = ns.apply(&yaml(&set(&impossible))?).await;
        let message = format!("{refused:?}");
        ensure!(
            refused.is_err()
                && message.contains("spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu"),
            "{message}"
        );
        ns.apply(&yaml(&set(&policy))?).await?;

        let container = |name: &str, limits: Value, requests: Value| {
            json!({"name": name, "image": "nginx:1.25", "resources": {"limits": limits, "requests": requests}})
        };
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "sized", "labels": {"app": "sized"}},
            "spec": {"containers": [
                container("app-web", json!({"cpu": "1", "memory": "512Mi"}), json!({"cpu": "200m", "memory": "256Mi"})),
                container("app-worker", json!({"cpu": "500m", "memory": "256Mi"}), json!({"cpu": "100m", "memory": "128Mi"})),
                // Not a target: its name does not match the regex.
                container("debug", json!({"cpu": "4", "memory": "4Gi"}), json!({"cpu": "4", "memory": "4Gi"})),
            ]},
        });
        wait_injected_on_dry_run(&ns.client, &ns.name, &pod, TIMEOUT, &["proxy", "app-web", "app-worker", "debug"]).await?;
        ns.apply(&yaml(&pod)?).await?;
        let pods: Api<Pod> = ns.api();
        wait_ready(&pods, "sized", TIMEOUT).await?;
        let resources = ns
            .kubectl(&["get", "pod", "sized", "-o", "jsonpath={.spec.containers[0].resources}"])
            .await?;
        let got: Value = serde_json::from_str(&resources).with_context(|| resources.clone())?;
        ensure!(
            got == json!({
                "limits": {"cpu": "750m", "memory": "768Mi"},
                "requests": {"cpu": "50m", "memory": "192Mi"},
            }),
            "{got}"
        );
        Ok(())
    })
    .await
}

/// patchPodMetadata is refused unless the `kruise-configuration` whitelist allows the annotation
/// (the gate `SidecarSetPatchPodMetadataDefaultsAllowed` is off here), with OpenKruise's messages;
/// a rule selecting the SidecarSet by label admits the annotations it allows and no other.
#[tokio::test]
async fn patch_pod_metadata_needs_the_whitelist() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("sidecar-whitelist").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("patchmeta-{}", ns.name);
        cleanup.sidecarset(&name);
        let sidecarset = |annotation: &str| {
            json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name, "labels": {"whitelisted-by": ns.name}},
                "spec": {
                    "selector": {"matchLabels": {"app": "patched"}},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                    "containers": [{"name": "sidecar", "image": "busybox:1.36"}],
                    "patchPodMetadata": [{"annotations": {annotation: "patched-v1"}}]}})
        };
        let refused = ns
            .apply(&yaml(&sidecarset("example.io/patched"))?)
            .await
            .expect_err("no whitelist: refused");
        ensure!(
            refused.to_string().contains(
                "spec.patchPodMetadata: Required value: SidecarSet patch metadata whitelist not found"
            ),
            "{refused:#}"
        );

        // A rule for SidecarSets labelled whitelisted-by=<this namespace> only.
        let rules = json!({"rules": [{
            "selector": {"matchLabels": {"whitelisted-by": ns.name}},
            "allowedAnnotationKeyExprs": ["^example\\.io/"]}]});
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kruise-configuration", "namespace": kruise_testkit::manager::NAMESPACE},
            "data": {"SidecarSet_PatchPodMetadata_WhiteList": rules.to_string()}});
        bed.plane
            .kubectl_apply(kruise_testkit::manager::NAMESPACE, &yaml(&config)?)
            .await?;
        let result = async {
            let other = ns
                .apply(&yaml(&sidecarset("other.io/patched"))?)
                .await
                .expect_err("an annotation no rule allows: refused");
            ensure!(
                other
                    .to_string()
                    .contains("sidecarSet patch metadata annotation(other.io/patched) is not allowed"),
                "{other:#}"
            );
            let out = ns.apply(&yaml(&sidecarset("example.io/patched"))?).await?;
            ensure!(out.contains("created"), "{out}");
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "patched", "labels": {"app": "patched"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
            // Once the webhook's cache holds the new SidecarSet.
            wait_injected_on_dry_run(&ns.client, &ns.name, &pod, TIMEOUT, &["sidecar", "c"]).await?;
            ns.apply(&yaml(&pod)?).await?;
            let annotation = jsonpath(&ns, "patched", "{.metadata.annotations.example\\.io/patched}").await?;
            ensure!(annotation == "patched-v1", "annotation example.io/patched: {annotation:?}");
            Ok(())
        }
        .await;
        bed.plane
            .kubectl(&["-n", kruise_testkit::manager::NAMESPACE, "delete", "configmap", "kruise-configuration"])
            .await?;
        result
    })
    .await
}
