//! The chart's walkthroughs, shared by the lane that runs the manager as a process beside the control
//! plane (`tests/install.rs`) and the lane that runs the chart's own Pods from their images on real
//! nodes (`tests/installed.rs`): helm against the test bed, seed 000's CloneSet walkthrough and seed 001's
//! SidecarSet injection.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_testkit::{TestBed, TestNamespace, eventually, helm};
use kube::api::Api;
use serde_json::{Value, json};

use crate::cloneset_kit::{active_pods, restarts, set_image, spec_image, uid};
use crate::sidecarset_kit::wait_ready;
use crate::{container_names, example, is_ready};

pub use kruise_testkit::installed::CHART;

/// helm against the test bed's apiserver (release records in `default`).
pub fn helm_cli(bed: &TestBed, args: &[&str]) -> anyhow::Result<String> {
    kruise_testkit::installed::helm(&bed.plane, args)
}

/// Seed 000: the `sample` CloneSet, two Pods, updated in place to nginx:1.19.1 (same UIDs, one
/// restart). Returns the Pods' UIDs.
pub async fn seed_000(ns: &TestNamespace, timeout: Duration) -> anyhow::Result<Vec<String>> {
    let path = helm::repo_root().join("examples/cloneset-sample.yaml");
    ns.apply(&std::fs::read_to_string(&path)?).await?;
    let api: Api<Pod> = ns.api();
    let before = eventually("sample: 2 Pods Ready", timeout, || {
        let api = api.clone();
        async move {
            let pods = active_pods(&api, "app=sample").await?;
            Ok((pods.len() == 2 && pods.iter().all(is_ready)).then_some(pods))
        }
    })
    .await?;
    let uids: Vec<String> = before.iter().map(uid).collect();
    set_image(ns, "sample", "nginx:1.19.1").await?;
    let want = uids.clone();
    eventually("sample updated in place", timeout, || {
        let (api, want) = (api.clone(), want.clone());
        async move {
            let pods = active_pods(&api, "app=sample").await?;
            let done = pods.len() == 2
                && pods.iter().all(|p| {
                    is_ready(p)
                        && spec_image(p).as_deref() == Some("nginx:1.19.1")
                        && restarts(p) == 1
                        && want.contains(&uid(p))
                });
            Ok(done.then_some(()))
        }
    })
    .await?;
    Ok(uids)
}

/// Seed 001: the logtail SidecarSet injected into a new Pod `pod`.
pub async fn seed_001_pod(ns: &TestNamespace, pod: &str, timeout: Duration) -> anyhow::Result<()> {
    let mut doc = example("sidecarset-test-pod.yaml")?;
    doc["metadata"]["name"] = json!(pod);
    ns.apply(&serde_yaml::to_string(&doc)?).await?;
    let pod = wait_ready(&ns.api(), pod, timeout).await?;
    let names = container_names(&pod);
    ensure!(names == ["logtail", "nginx"], "containers {names:?}");
    Ok(())
}

/// (API group, resource[/subresource], verb).
pub type Triple = (String, String, String);

/// Every request of `user` (one of the chart's ServiceAccounts the test bed audits) in the audit log:
/// (group, resource[/sub], verb), status code, request URI.
pub fn audited(bed: &TestBed, user: &str) -> anyhow::Result<Vec<(Triple, i64, String)>> {
    let path = bed.plane.audit_log_path();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let event: Value = serde_json::from_str(line).context("an audit event")?;
        if event["user"]["username"] != user || event["stage"] != "ResponseComplete" {
            continue;
        }
        let object = &event["objectRef"];
        let Some(resource) = object["resource"].as_str() else {
            continue; // discovery and other non-resource URLs
        };
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        let triple = (
            object["apiGroup"].as_str().unwrap_or_default().to_string(),
            resource,
            event["verb"].as_str().unwrap_or_default().to_string(),
        );
        let code = event["responseStatus"]["code"].as_i64().unwrap_or_default();
        out.push((
            triple,
            code,
            event["requestURI"].as_str().unwrap_or_default().to_string(),
        ));
    }
    Ok(out)
}
