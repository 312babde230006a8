//! `kubectl kruise takeover` from the three ways OpenKruise v1.9 is installed, and the way back, on one
//! control plane (OpenKruise's CRDs are cluster-wide, so the scenarios follow one another):
//!
//! 1. A Helm release of a chart shaped like OpenKruise's (`tests/fixtures/openkruise-chart`: v1.9.0's 18
//!    CRDs rendered as templates while `crds.managed` is true, the kruise-system Namespace in the
//!    release, a pre-delete hook that fails, a manager Pod whose container does nothing) holds the
//!    objects an OpenKruise v1.9 manager wrote (`tests/fixtures/openkruise-v1.9`: CloneSets, an Advanced
//!    StatefulSet, an Advanced DaemonSet, a UnitedDeployment, a SidecarSet, a BroadcastJob, their
//!    ControllerRevisions and Pods) plus a PodUnavailableBudget. `takeover`
//!    refuses nothing (kruise-rs serves all 18 kinds; `--allow-unserved` naming served kinds changes
//!    nothing) and completes: the release is gone, every
//!    CRD and object is kept, no Pod written, no ControllerRevision added, OpenKruise's manager Pod gone.
//!    kruise-rs's chart installs next to the kept Namespace, kruise-manager runs, and `takeover --verify`
//!    still finds nothing changed.
//! 2. The way back: the storage of CloneSet and UnitedDeployment returned to v1alpha1 through kruise-rs's
//!    conversion, kruise-rs uninstalled, OpenKruise's CRDs put back, OpenKruise's chart installed with
//!    `crds.managed: false`: everything as it was before the takeover.
//! 3. From that `crds.managed: false` release: `takeover` again (kruise-rs's CRDs from its chart's
//!    `crds/` this time).
//! 4. From plain manifests (the chart rendered and applied with kubectl): `takeover` again, with a v1.9
//!    UnitedDeployment added just before (v1alpha1, its CloneSet template with `partition`,
//!    `maxUnavailable`, `paused`, `disablePVCReuse`): it reads back as written after the switch, and
//!    kruise-manager creates its subsets with those settings.
//!
//! Each takeover is checked twice: by the command's own report, and by a snapshot of this test (every
//! CRD and object of OpenKruise's groups by UID, every Pod and ControllerRevision of Kruise workloads by
//! UID and resourceVersion).

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_e2e::V1_9_UNITEDDEPLOYMENT;
use kruise_e2e::takeover_kit::{
    FIXTURE_NS, Kept, Run, clean_result, fixture_controllers, kubectl_kruise, last_json,
    load_openkruise_objects, migrate_storage, preflight_report, wait_reconciled,
};
use kruise_testkit::manager::NAMESPACE as KRUISE_NS;
use kruise_testkit::manager::{Manager, ManagerOptions};
use kruise_testkit::{TestBed, eventually, helm, testbed_with, until};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

const CHART: &str = "tests/fixtures/openkruise-chart";
const CRDS: &str = "tests/fixtures/openkruise-chart/files/crds";
const RELEASE: &str = "kruise";
const HELM_NS: &str = "default";
const NS: &str = FIXTURE_NS;
const TIMEOUT: Duration = Duration::from_secs(120);
/// After every controller reconciled once: long enough for a controller that was going to write to
/// have written.
const HOLD: Duration = Duration::from_secs(10);
const ALLOW: &str = "ImageListPullJob,PodUnavailableBudget";

/// helm against the test bed.
fn helm_cli(bed: &TestBed, args: &[&str]) -> anyhow::Result<String> {
    let kubeconfig = bed.plane.kubeconfig_path().display().to_string();
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", &kubeconfig]);
    helm::run(&all)
}

/// `helm install` of OpenKruise's (test) chart as release `kruise` with one `--set`.
fn install_openkruise(bed: &TestBed, chart: &str, set: &str) -> anyhow::Result<String> {
    helm_cli(
        bed,
        &[
            "install",
            RELEASE,
            chart,
            "--namespace",
            HELM_NS,
            "--set",
            set,
        ],
    )
}

/// `kubectl-kruise takeover <args>` with the test's helm.
async fn takeover(bed: &TestBed, args: &[&str]) -> anyhow::Result<Run> {
    let helm = helm::binary()?.display().to_string();
    let mut all = vec!["takeover", "--helm", &helm];
    all.extend_from_slice(args);
    kubectl_kruise(&bed.plane.kubeconfig_path(), &all).await
}

/// [`takeover`] of the Helm release `RELEASE` in `HELM_NS`, named on the command line.
async fn takeover_release(bed: &TestBed, args: &[&str]) -> anyhow::Result<Run> {
    let mut all = vec!["--helm-release", RELEASE, "--helm-namespace", HELM_NS];
    all.extend_from_slice(args);
    takeover(bed, &all).await
}

/// A PodUnavailableBudget as OpenKruise left it.
const UNSERVED: &str = r#"
apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: pub
spec:
  selector:
    matchLabels:
      app: sample
  maxUnavailable: 1
"#;

/// Waits until `manager` is ready and converts the kinds it serves (the test kit's wait also expects
/// the conversion of every apps.kruise.io CRD, and OpenKruise's other kinds stay unconverted here).
async fn manager_serving(bed: &TestBed, manager: &Manager) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(bed.plane.client().await?);
    let url_part = format!("127.0.0.1:{}", manager.ports.webhook);
    let served = until("kruise-manager ready and converting", TIMEOUT, || async {
        let (code, _) = kruise_testkit::manager::http_get(manager.ports.health, "/readyz").await?;
        if code != 200 {
            return Ok(false);
        }
        for kind in kruise_api::kinds::Kind::ALL {
            let crd = crds
                .get(&format!("{}.apps.kruise.io", kind.plural()))
                .await?;
            let url = crd
                .spec
                .conversion
                .and_then(|c| c.webhook)
                .and_then(|w| w.client_config)
                .and_then(|c| c.url)
                .unwrap_or_default();
            if !url.contains(&url_part) {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await;
    if let Err(error) = served {
        let log = std::fs::read_to_string(manager.log(&bed.plane)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        anyhow::bail!(
            "{error:#}\nkruise-manager log (last lines, newest first):\n{}",
            tail.join("\n")
        );
    }
    Ok(())
}

/// `kubectl kruise takeover --verify record`: nothing changed since the state was recorded.
async fn verify(bed: &TestBed, record: &str, stage: &str) -> anyhow::Result<()> {
    let run = kubectl_kruise(
        &bed.plane.kubeconfig_path(),
        &["takeover", "--verify", record, "-o", "json"],
    )
    .await?;
    ensure!(run.ok, "takeover --verify {stage}: {run:?}");
    clean_result(&last_json(&run.stdout)?)?;
    Ok(())
}

/// The `resource` objects of `selector` in the test namespace, read in v1alpha1.
async fn v1alpha1_items(
    bed: &TestBed,
    resource: &str,
    selector: &str,
) -> anyhow::Result<Vec<Value>> {
    let resource = format!("{resource}.v1alpha1.apps.kruise.io");
    let text = bed
        .plane
        .kubectl(&["get", &resource, "-n", NS, "-l", selector, "-o", "json"])
        .await?;
    let list: Value = serde_json::from_str(&text)?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// The UnitedDeployment `name` read in v1alpha1.
async fn v1alpha1_ud(bed: &TestBed, name: &str) -> anyhow::Result<Value> {
    let text = bed
        .plane
        .kubectl(&[
            "get",
            "uniteddeployments.v1alpha1.apps.kruise.io",
            name,
            "-n",
            NS,
            "-o",
            "json",
        ])
        .await?;
    Ok(serde_json::from_str(&text)?)
}

/// OpenKruise's CRDs put back whole (`kubectl replace`: kruise-rs's extra version and its conversion
/// settings go with it).
async fn replace_openkruise_crds(bed: &TestBed) -> anyhow::Result<()> {
    let dir = helm::repo_root().join(CRDS).display().to_string();
    bed.plane.kubectl(&["replace", "-f", &dir]).await?;
    crds_established(bed).await
}

/// Every CRD of the cluster Established (OpenKruise's 18 at least).
async fn crds_established(bed: &TestBed) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(bed.plane.client().await?);
    eventually("OpenKruise's CRDs Established", TIMEOUT, || async {
        let list = crds.list(&ListParams::default()).await?;
        let waiting: Vec<String> = list
            .iter()
            .filter(|crd| {
                !crd.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
            .map(|crd| crd.name_any())
            .collect();
        ensure!(
            list.items.len() >= 18 && waiting.is_empty(),
            "{} CRDs, not Established: {waiting:?}",
            list.items.len()
        );
        Ok(Some(()))
    })
    .await
}

/// The result of a successful takeover run with `-o json`, checked clean and with OpenKruise's 18 CRDs
/// kept.
fn completed(run: &Run, stage: &str) -> anyhow::Result<(u64, u64, u64, u64)> {
    ensure!(run.ok, "{stage}: takeover failed: {run:?}");
    let kept = clean_result(&last_json(&run.stdout)?)?;
    ensure!(kept.0 == 18, "{stage}: {} CRDs kept: {run:?}", kept.0);
    eprintln!(
        "{stage}: the command reports kept {} CRDs, {} objects, {} Pods, {} ControllerRevisions; nothing written, deleted or added",
        kept.0, kept.1, kept.2, kept.3
    );
    Ok(kept)
}

async fn released(bed: &TestBed, name: &str) -> anyhow::Result<bool> {
    let list: Value = serde_json::from_str(&helm_cli(bed, &["list", "-A", "-o", "json"])?)?;
    Ok(list
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["name"] == name))
}

#[tokio::test]
async fn takeover_from_helm_and_plain_installs_and_back() -> anyhow::Result<()> {
    // No CRDs at the start: OpenKruise's release installs them.
    let started = std::time::Instant::now();
    let bed = testbed_with(|options| options.crd_dir = None);
    let client = bed.plane.client().await?;
    let chart = helm::repo_root().join(CHART).display().to_string();

    // 1. OpenKruise's chart, CRDs as templates (crds.managed: true), and its objects.
    // One manager Pod (its container simulated), for the takeover to stop.
    install_openkruise(bed, &chart, "manager.replicas=1")?;
    crds_established(bed).await?;
    load_openkruise_objects(&client, NS, KRUISE_NS, true, TIMEOUT).await?;
    bed.plane.kubectl_apply(NS, UNSERVED).await?;
    // As OpenKruise's PodUnavailableBudget controller leaves them: the budget's status computed and
    // the Pods it guards annotated (kruise-rs's controller then has nothing to write).
    bed.plane
        .kubectl(&[
            "-n",
            NS,
            "patch",
            "podunavailablebudget",
            "pub",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"observedGeneration":1,"totalReplicas":2,"desiredAvailable":1,"currentAvailable":2,"unavailableAllowed":1}}"#,
        ])
        .await?;
    bed.plane
        .kubectl(&[
            "-n",
            NS,
            "annotate",
            "pods",
            "-l",
            "app=sample",
            "kruise.io/related-pub=pub",
        ])
        .await?;

    let dry = takeover_release(bed, &["--dry-run", "-o", "json"]).await?;
    // Every kind of OpenKruise v1.9.0 is served by kruise-rs: nothing is refused (the refusal of a
    // kind it does not serve, for an OpenKruise newer than v1.9, is the `refusals` unit test's).
    ensure!(
        dry.ok,
        "takeover refused although every kind is served: {dry:?}"
    );
    let report = last_json(&dry.stdout)?;
    ensure!(
        report["refused"].as_array().map(Vec::len) == Some(0)
            && report["openKruise"]["version"] == "1.9.0"
            && report["kinds"].as_array().map(Vec::len) == Some(18)
            && report["kinds"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().all(|k| k["servedByKruiseRs"] == true))
            && report["openKruise"]["installedWith"]
                .as_str()
                .is_some_and(|s| s.contains("18 CRDs rendered as templates of the release")),
        "preflight report: {report}"
    );
    // Allowed, the dry run goes through: the kinds and the steps, nothing changed.
    let dry = takeover_release(bed, &["--allow-unserved", ALLOW, "--dry-run"]).await?;
    ensure!(
        dry.ok
            && dry
                .stdout
                .contains("OpenKruise 1.9.0 installed with Helm release default/kruise")
            && dry.stdout.contains("workloadspreads.apps.kruise.io")
            && !dry.stdout.contains("NOT served by kruise-rs")
            && dry.stdout.contains("helm uninstall kruise"),
        "dry run: {dry:?}"
    );
    ensure!(
        released(bed, RELEASE).await?,
        "the dry run removed the release"
    );
    let unnamed = takeover(bed, &["--allow-unserved", ALLOW]).await?;
    ensure!(
        !unnamed.ok
            && unnamed
                .stderr
                .contains("--helm-release kruise --helm-namespace default"),
        "a takeover without --helm-release went on: {unnamed:?}"
    );

    let manager_pods: Api<Pod> = Api::namespaced(client.clone(), KRUISE_NS);
    let running_managers = || async {
        let pods = manager_pods
            .list(&ListParams::default().labels("control-plane=controller-manager"))
            .await?;
        anyhow::Ok(pods.items.len())
    };
    eventually("OpenKruise's manager Pod running", TIMEOUT, || async {
        Ok((running_managers().await? == 1).then_some(()))
    })
    .await?;
    let mut before = Kept::record(&client, NS).await?;
    eprintln!("{:?}: objects loaded", started.elapsed());
    let record = bed
        .plane
        .dir()
        .join("takeover-helm.json")
        .display()
        .to_string();
    let run = takeover_release(
        bed,
        &["--allow-unserved", ALLOW, "--record", &record, "-o", "json"],
    )
    .await?;
    completed(&run, "takeover from Helm, crds.managed=true")?;
    ensure!(
        running_managers().await? == 0,
        "OpenKruise's manager Pod still runs"
    );
    ensure!(
        !released(bed, RELEASE).await?,
        "the OpenKruise release is still installed"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    ensure!(
        namespaces.get_opt(KRUISE_NS).await?.is_some(),
        "{KRUISE_NS} was deleted"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), KRUISE_NS);
    ensure!(
        pods.get_opt("kruise-pre-delete-hook").await?.is_none(),
        "the release's pre-delete hook ran"
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cloneset_versions: Vec<String> = crds
        .get("clonesets.apps.kruise.io")
        .await?
        .spec
        .versions
        .iter()
        .map(|v| v.name.clone())
        .collect();
    ensure!(
        cloneset_versions == ["v1alpha1", "v1beta1"],
        "CloneSet CRD {cloneset_versions:?}"
    );
    before
        .ensure_unchanged(&client, "takeover from Helm, crds.managed=true")
        .await?;

    eprintln!("{:?}: taken over from Helm", started.elapsed());
    // kruise-rs's chart next to the kept Namespace, and its manager (the test bed's process).
    helm_cli(
        bed,
        &[
            "install",
            "kruise-rs",
            "charts/kruise-rs",
            "--namespace",
            HELM_NS,
            "--set",
            "installation.createNamespace=false",
            // The manager runs as a process on this host: the webhooks' URL form, as tests/install.rs.
            "--set",
            "webhookConfiguration.host=127.0.0.1",
        ],
    )?;
    let manager = Manager::spawn(&bed.plane, &ManagerOptions::default())?;
    manager_serving(bed, &manager).await?;
    wait_reconciled(manager.ports.metrics, &fixture_controllers(true), TIMEOUT).await?;
    tokio::time::sleep(HOLD).await;
    verify(bed, &record, "with kruise-manager running").await?;
    before
        .ensure_unchanged(&client, "kruise-manager running")
        .await?;

    eprintln!("{:?}: kruise-manager ran", started.elapsed());
    // 2. The way back. While kruise-rs still converts: CloneSets and UnitedDeployments stored in
    // v1alpha1 again (OpenKruise v1.9.0 knows no other version of them).
    migrate_storage(&bed.plane, "v1alpha1", true, true, TIMEOUT).await?;
    manager.kill(&bed.plane)?;
    helm_cli(bed, &["uninstall", "kruise-rs", "--namespace", HELM_NS])?;
    replace_openkruise_crds(bed).await?;
    install_openkruise(bed, &chart, "crds.managed=false")?;
    verify(bed, &record, "after the way back").await?;
    before.ensure_unchanged(&client, "the way back").await?;

    eprintln!("{:?}: back to OpenKruise", started.elapsed());
    // 3. From the crds.managed=false release, kruise-rs's CRDs read from its chart this time.
    let chart_crds = helm::repo_root()
        .join("charts/kruise-rs/crds")
        .display()
        .to_string();
    let run = takeover_release(
        bed,
        &[
            "--crds",
            &chart_crds,
            "--allow-unserved",
            ALLOW,
            "-o",
            "json",
        ],
    )
    .await?;
    let report = preflight_report(&run.stdout)?;
    ensure!(
        report["openKruise"]["installedWith"]
            .as_str()
            .is_some_and(|s| s.contains("the CRDs outside the release")),
        "{report}"
    );
    completed(&run, "takeover from Helm, crds.managed=false")?;
    ensure!(
        !released(bed, RELEASE).await?,
        "the OpenKruise release is still installed"
    );
    before
        .ensure_unchanged(&client, "takeover from Helm, crds.managed=false")
        .await?;

    eprintln!(
        "{:?}: taken over from crds.managed=false",
        started.elapsed()
    );
    // 4. From plain manifests: OpenKruise's CRDs and its rendered manifests applied with kubectl. No
    // kruise-rs manager ran since the last takeover, so no object was written in v1beta1: recording
    // v1alpha1 as the only stored version is enough.
    migrate_storage(&bed.plane, "v1alpha1", true, false, TIMEOUT).await?;
    replace_openkruise_crds(bed).await?;
    let manifests = helm_cli(
        bed,
        &[
            "template",
            RELEASE,
            &chart,
            "--namespace",
            HELM_NS,
            "--no-hooks",
            "--set",
            "crds.managed=false",
            "--set",
            "installation.createNamespace=false",
            "--set",
            "manager.replicas=1",
        ],
    )?;
    let path = bed.plane.dir().join("openkruise-plain.yaml");
    std::fs::write(&path, manifests)?;
    bed.plane
        .kubectl(&["apply", "-f", &path.display().to_string()])
        .await?;
    // A v1.9 UnitedDeployment written under OpenKruise's CRDs (no OpenKruise manager acts on it), kept
    // from here on like the rest.
    bed.plane.kubectl_apply(NS, V1_9_UNITEDDEPLOYMENT).await?;
    let written = v1alpha1_ud(bed, "v19-ud").await?;
    before.keep(
        format!("UnitedDeployment {NS}/v19-ud"),
        written["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    );
    let run = takeover(bed, &["--allow-unserved", ALLOW, "-o", "json"]).await?;
    completed(&run, "takeover from plain manifests")?;
    let report = preflight_report(&run.stdout)?;
    ensure!(
        report["openKruise"]["installedWith"] == "plain manifests"
            && report["openKruise"]["version"] == "v1.9.0",
        "{report}"
    );
    for (kind, namespace, name) in [
        ("DaemonSet", Some(KRUISE_NS), "kruise-daemon"),
        ("Service", Some(KRUISE_NS), "kruise-webhook-service"),
        (
            "MutatingWebhookConfiguration",
            None,
            "kruise-mutating-webhook-configuration",
        ),
        (
            "ValidatingWebhookConfiguration",
            None,
            "kruise-validating-webhook-configuration",
        ),
    ] {
        let args: Vec<&str> = match namespace {
            Some(ns) => vec![
                "get",
                kind,
                name,
                "-n",
                ns,
                "--ignore-not-found",
                "-o",
                "name",
            ],
            None => vec!["get", kind, name, "--ignore-not-found", "-o", "name"],
        };
        let found = bed.plane.kubectl(&args).await?;
        ensure!(
            found.trim().is_empty(),
            "OpenKruise's {kind} {name} is still there"
        );
    }
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        KRUISE_NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    ensure!(
        deployments
            .get_opt("kruise-controller-manager")
            .await?
            .is_none(),
        "OpenKruise's manager Deployment is still there"
    );
    before
        .ensure_unchanged(&client, "takeover from plain manifests")
        .await?;

    // The v1.9 UnitedDeployment survived the switch: its CloneSet template reads back through v1alpha1
    // as written. Then kruise-manager creates its subsets with the template's settings, the partition
    // being the subset's manual one (zone-a 1, zone-b 0), as OpenKruise v1.9.0 writes them.
    let clone_spec = |ud: &Value| ud["spec"]["template"]["cloneSetTemplate"]["spec"].clone();
    let read = &v1alpha1_ud(bed, "v19-ud").await?;
    ensure!(
        clone_spec(read)["updateStrategy"] == clone_spec(&written)["updateStrategy"]
            && clone_spec(read)["scaleStrategy"] == clone_spec(&written)["scaleStrategy"],
        "after the takeover: {} (written {})",
        clone_spec(read),
        clone_spec(&written)
    );
    let manager = Manager::spawn(
        &bed.plane,
        &ManagerOptions {
            name: "kruise-manager-2".into(),
            ..ManagerOptions::default()
        },
    )?;
    manager_serving(bed, &manager).await?;
    eventually("the v1.9 UnitedDeployment's subsets", TIMEOUT, || async {
        let subsets = v1alpha1_items(bed, "clonesets", "app=v19-ud").await?;
        ensure!(subsets.len() == 2, "{} subset CloneSets", subsets.len());
        for subset in &subsets {
            let name = subset["metadata"]["labels"]["apps.kruise.io/subset-name"]
                .as_str()
                .unwrap_or_default();
            let mut want = clone_spec(&written)["updateStrategy"].clone();
            want["partition"] = serde_json::json!(if name == "zone-a" { 1 } else { 0 });
            // An empty `inPlaceUpdateStrategy: {}` the defaults add says nothing more.
            let mut have = subset["spec"]["updateStrategy"].clone();
            if let Some(map) = have.as_object_mut() {
                map.retain(|_, v| v.as_object().is_none_or(|o| !o.is_empty()));
            }
            ensure!(
                have == want
                    && subset["spec"]["scaleStrategy"] == clone_spec(&written)["scaleStrategy"],
                "{name}: {} {} (want {want})",
                subset["spec"]["updateStrategy"],
                subset["spec"]["scaleStrategy"]
            );
        }
        Ok(Some(()))
    })
    .await?;
    eprintln!("{:?}: taken over from plain manifests", started.elapsed());
    Ok(())
}
