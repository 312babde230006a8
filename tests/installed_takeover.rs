//! OpenKruise v1.9.0 installed as its users install it, then taken over by kruise-rs's chart (issue 58,
//! item 5), on a bed of real nodes with the in-cluster network (`kruise_e2e::installed_kit`):
//!
//! 1. OpenKruise's own image (`make openkruise`'s unpatched binaries in the tag Dockerfile's layout,
//!    `kruise_testkit::realnode::openkruise_image`) pushed as `openkruise/kruise-manager:v1.9.0`, and
//!    OpenKruise's released chart (`tests/fixtures/openkruise-chart-v1.9.0` with the tag's 18 CRDs)
//!    installed with `helm install` and the gates a user of ResourceDistribution sets: both manager
//!    replicas and a kruise-daemon per node Ready from that image.
//! 2. One object of every kind a user writes (`tests/fixtures/openkruise-installed-objects.yaml`) and a
//!    SidecarSet with a Pod it injects, created through OpenKruise's webhooks and run to a steady state
//!    by its manager and daemons on the real nodes (Pods Ready, jobs done, images pulled, a container
//!    recreated, probes marked, a ConfigMap distributed); with the NodeImages and NodePodProbes
//!    OpenKruise writes itself, all 18 kinds hold objects.
//! 3. `kubectl kruise takeover --helm-release kruise`: the command's report and this test's own record
//!    (every CRD and object of OpenKruise's groups by UID, every Pod of the namespace by content, every
//!    ControllerRevision by UID and resourceVersion) agree that nothing was lost or written, and
//!    OpenKruise's Pods are gone.
//! 4. kruise-rs's chart installed next to the kept namespace with the same gates, from its own images:
//!    its Pods Ready, one of them holding the Lease OpenKruise's leader held, still nothing written
//!    after a while, `takeover --verify` clean; then the kruise-rs Pods serve: the CloneSet updated in
//!    place (same Pods, one more restart each) and a new Pod injected by the SidecarSet.
//!
//! A module of the installed lane's binary (`tests/installed.rs`), whose bed it uses. OpenKruise's build
//! takes about ten minutes on 2 cores, beyond `make test`'s budget: the test is ignored there and run
//! by `make test-takeover` (which builds it first: `--test installed -- --ignored`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kruise_e2e::chart_kit::seed_001_pod;
use kruise_e2e::cloneset_kit::{active_pods, name, restarts, set_image, spec_image, uid};
use kruise_e2e::installed_kit::{
    REAL_NODES, bed, lease_holder, only_real_nodes, system_diagnostics,
    wait_default_service_account,
};
use kruise_e2e::is_ready;
use kruise_e2e::real_node_kit::in_namespace_with_node_logs;
use kruise_e2e::takeover_kit::{Kept, clean_result, kubectl_kruise, last_json};
use kruise_testkit::installed::{self, DAEMON_SELECTOR, MANAGER_SELECTOR, system_pods};
use kruise_testkit::realnode::kruise_images::Source;
use kruise_testkit::realnode::openkruise_image;
use kruise_testkit::{TestBed, TestNamespace, eventually, helm};
use kube::api::Api;
use serde_json::{Value, json};

/// The release name OpenKruise's docs install with.
const OPENKRUISE_RELEASE: &str = "kruise";
const OPENKRUISE_CHART: &str = "tests/fixtures/openkruise-chart-v1.9.0";
const OBJECTS: &str = "tests/fixtures/openkruise-installed-objects.yaml";
/// The chart's default gates and ResourceDistribution's, off by default in v1.9.0 (its webhook refuses
/// the kind without it); the same `--set` for both charts (helm splits `--set` on unescaped commas).
const FEATURE_GATES: &str = r"featureGates=ImagePullJobGate=true\,ResourceDistributionGate=true";
/// From `helm install` to every Pod Ready: OpenKruise's manager starts under the chart's 200m CPU
/// limit.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
const TIMEOUT: Duration = Duration::from_secs(180);
/// After every Pod is Ready: long enough for a controller that was going to write to have written.
const HOLD: Duration = Duration::from_secs(15);
/// The 18 resources of OpenKruise v1.9.0's CRDs.
const RESOURCES: [&str; 18] = [
    "advancedcronjobs.apps.kruise.io",
    "broadcastjobs.apps.kruise.io",
    "clonesets.apps.kruise.io",
    "containerrecreaterequests.apps.kruise.io",
    "daemonsets.apps.kruise.io",
    "ephemeraljobs.apps.kruise.io",
    "imagelistpulljobs.apps.kruise.io",
    "imagepulljobs.apps.kruise.io",
    "nodeimages.apps.kruise.io",
    "nodepodprobes.apps.kruise.io",
    "persistentpodstates.apps.kruise.io",
    "podprobemarkers.apps.kruise.io",
    "resourcedistributions.apps.kruise.io",
    "sidecarsets.apps.kruise.io",
    "statefulsets.apps.kruise.io",
    "uniteddeployments.apps.kruise.io",
    "workloadspreads.apps.kruise.io",
    "podunavailablebudgets.policy.kruise.io",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs OpenKruise v1.9.0 built from its tag (make openkruise); run by make test-takeover"]
async fn openkruise_installed_from_its_chart_is_taken_over_and_kruise_rs_pods_serve()
-> anyhow::Result<()> {
    let bed = bed();
    in_namespace_with_node_logs(bed, "okx", async |ns| match walkthrough(bed, ns).await {
        Ok(()) => Ok(()),
        Err(error) => Err(error.context(system_diagnostics(bed).await)),
    })
    .await
}

async fn walkthrough(bed: &'static TestBed, ns: &TestNamespace) -> anyhow::Result<()> {
    let started = Instant::now();
    let nodes = only_real_nodes(ns).await?;
    wait_default_service_account(ns).await?;

    // 1. OpenKruise from its chart and its own image.
    let build = openkruise_image::build_dir();
    let image = tokio::task::block_in_place(|| bed.push_openkruise_image(&build))?;
    let chart = openkruise_chart(bed, &build)?;
    let openkruise = installed::install_chart(
        &bed.plane,
        OPENKRUISE_RELEASE,
        &chart.display().to_string(),
        &[FEATURE_GATES],
        [image.clone(), image.clone()],
        REAL_NODES,
        INSTALL_TIMEOUT,
    )
    .await?;
    eprintln!(
        "takeover: OpenKruise {} ({:.1} MiB) running, 2 managers and {} daemons Ready {:.1?} after helm install",
        image.reference,
        image.compressed_bytes as f64 / 1048576.0,
        openkruise.daemons.len(),
        openkruise.ready_in
    );
    let openkruise_managers: Vec<String> = openkruise.managers.iter().map(name).collect();
    lease_held_by_one_of(ns, &openkruise_managers).await?;

    // 2. Objects of every kind, run by OpenKruise to a steady state. An ImagePullJob pulls on the nodes
    // that have a NodeImage when it starts (none: it completes at once with nothing pulled), so the
    // objects wait for OpenKruise's NodeImage of every node.
    eventually("OpenKruise's NodeImage of every node", TIMEOUT, || async {
        let names = ns
            .kubectl(&["get", "nodeimages.apps.kruise.io", "-o", "name"])
            .await?;
        Ok((names.lines().count() == REAL_NODES).then_some(()))
    })
    .await?;
    create_objects(ns, &nodes).await?;
    steady(ns).await?;
    every_kind_holds_objects(ns).await?;
    eprintln!(
        "takeover: objects of all 18 kinds steady under OpenKruise at {:.1?}",
        started.elapsed()
    );
    tokio::time::sleep(HOLD).await;
    let client = bed.plane.client().await?;
    let mut kept = Kept::record(&client, &ns.name).await?;
    let mut versions = std::collections::BTreeMap::new();
    let objects_before = kruise_objects(ns, &mut versions).await?;

    // 3. The takeover.
    let record = bed.plane.dir().join("installed-takeover.json");
    let record = record.display().to_string();
    let helm_binary = helm::binary()?.display().to_string();
    let taking = Instant::now();
    let run = kubectl_kruise(
        &bed.plane.kubeconfig_path(),
        &[
            "takeover",
            "--helm",
            &helm_binary,
            "--helm-release",
            OPENKRUISE_RELEASE,
            "--helm-namespace",
            "default",
            "--record",
            &record,
            "-o",
            "json",
        ],
    )
    .await?;
    ensure!(run.ok, "takeover failed: {run:?}");
    let (crds, objects, pods, revisions) = clean_result(&last_json(&run.stdout)?)?;
    ensure!(crds == 18, "{crds} CRDs kept: {run:?}");
    eprintln!(
        "takeover: done in {:.1?}; the command kept {crds} CRDs, {objects} objects, {pods} Pods, {revisions} ControllerRevisions",
        taking.elapsed()
    );
    for selector in [MANAGER_SELECTOR, DAEMON_SELECTOR] {
        eventually(
            format!("OpenKruise's Pods {selector} gone"),
            TIMEOUT,
            || async {
                Ok(system_pods(&client, selector)
                    .await?
                    .is_empty()
                    .then_some(()))
            },
        )
        .await?;
    }
    kept.ensure_unchanged(&client, "the takeover").await?;

    // 4. kruise-rs's chart, from its own images.
    let images = tokio::task::block_in_place(|| bed.push_kruise_images(&Source::from_env()))?;
    let kruise_rs = installed::install_chart(
        &bed.plane,
        installed::RELEASE,
        installed::CHART,
        &["installation.createNamespace=false", FEATURE_GATES],
        images,
        REAL_NODES,
        INSTALL_TIMEOUT,
    )
    .await?;
    let managers: Vec<String> = kruise_rs.managers.iter().map(name).collect();
    let leader = lease_held_by_one_of(ns, &managers).await?;
    eprintln!(
        "takeover: kruise-rs Ready {:.1?} after helm install; {leader} holds the Lease",
        kruise_rs.ready_in
    );
    tokio::time::sleep(HOLD).await;
    kept.ensure_unchanged(&client, "kruise-rs running").await?;
    let verify = kubectl_kruise(
        &bed.plane.kubeconfig_path(),
        &["takeover", "--verify", &record, "-o", "json"],
    )
    .await?;
    if let Err(error) = last_json(&verify.stdout).and_then(|report| clean_result(&report)) {
        let changes = changed_objects(&objects_before, &kruise_objects(ns, &mut versions).await?);
        anyhow::bail!("takeover --verify: {error:#}\nwhat changed:\n{changes}\n{verify:?}");
    }
    ensure!(verify.ok, "takeover --verify: {verify:?}");

    kruise_rs_serves(ns).await?;
    eprintln!(
        "takeover: kruise-rs serves (in-place update, sidecar injection); {:.1?} in all",
        started.elapsed()
    );
    Ok(())
}

/// OpenKruise's chart as released: the fixture's files and the tag's CRDs (`make openkruise` copies
/// them to `build/crd`), each a template of the release while `crds.managed` is true, as the released
/// chart writes them.
fn openkruise_chart(bed: &TestBed, build: &Path) -> anyhow::Result<PathBuf> {
    let out = bed.plane.dir().join("openkruise-chart");
    let fixture = helm::repo_root().join(OPENKRUISE_CHART);
    copy_dir(&fixture, &out)?;
    let crds = build.join("crd");
    let mut count = 0;
    for entry in std::fs::read_dir(&crds).with_context(|| format!("reading {}", crds.display()))? {
        let path = entry?.path();
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        if !file.ends_with(".yaml") {
            continue;
        }
        let crd = std::fs::read_to_string(&path)?;
        let template = format!("{{{{- if .Values.crds.managed }}}}\n \n{crd}{{{{- end }}}}\n");
        std::fs::write(out.join("templates").join(file), template)?;
        count += 1;
    }
    ensure!(
        count == 18,
        "{count} CRDs in {}, 18 expected",
        crds.display()
    );
    Ok(out)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The holder of the managers' Lease, once it is one of `pods`.
async fn lease_held_by_one_of(ns: &TestNamespace, pods: &[String]) -> anyhow::Result<String> {
    eventually(
        format!("the Lease held by one of {pods:?}"),
        TIMEOUT,
        || async { Ok(lease_holder(ns).await?.filter(|pod| pods.contains(pod))) },
    )
    .await
}

/// The fixture's objects for this namespace and these nodes, applied once OpenKruise's webhooks answer
/// (they may be Ready a moment before the apiserver's first call goes through), then the SidecarSet,
/// a Pod it injects, and a ContainerRecreateRequest on one of the CloneSet's Pods.
async fn create_objects(ns: &TestNamespace, nodes: &[String]) -> anyhow::Result<()> {
    let yaml = std::fs::read_to_string(helm::repo_root().join(OBJECTS))?
        .replace("${NS}", &ns.name)
        .replace("${NODE0}", &nodes[0])
        .replace("${NODE1}", &nodes[1]);
    // Retried while OpenKruise's webhooks may not answer yet; the last refusal is the error's.
    let last_error = std::sync::Mutex::new(String::new());
    eventually(
        "the objects created through OpenKruise's webhooks",
        TIMEOUT,
        || async {
            match ns.apply(&yaml).await {
                Ok(_) => Ok(Some(())),
                Err(error) => {
                    if let Ok(mut last) = last_error.lock() {
                        *last = format!("{error:#}");
                    }
                    Ok(None)
                }
            }
        },
    )
    .await
    .with_context(|| {
        let last = last_error.lock().map(|l| l.clone()).unwrap_or_default();
        format!("applying {OBJECTS}; kubectl's last error: {last}")
    })?;
    let sidecarset =
        kruise_e2e::sidecarset_kit::logtail(&format!("logtail-{}", ns.name), &ns.name, json!({}))?;
    ns.apply(&serde_yaml::to_string(&sidecarset)?).await?;
    seed_001_pod(ns, "injected", TIMEOUT).await?;

    let api: Api<Pod> = ns.api();
    let pods = eventually("cs: 2 Pods Ready", TIMEOUT, || async {
        let pods = active_pods(&api, "app=cs").await?;
        Ok((pods.len() == 2 && pods.iter().all(is_ready)).then_some(pods))
    })
    .await?;
    let crr = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "crr"},
        "spec": {
            "podName": name(&pods[0]),
            "containers": [{"name": "nginx"}],
            "strategy": {"failurePolicy": "Fail"},
        },
    });
    ns.apply(&serde_yaml::to_string(&crr)?).await?;
    Ok(())
}

/// `kubectl get <resource> <name> -o json` in the test namespace (cluster-scoped ones ignore it).
async fn get(ns: &TestNamespace, resource: &str, name: &str) -> anyhow::Result<Value> {
    let text = ns.kubectl(&["get", resource, name, "-o", "json"]).await?;
    serde_json::from_str(&text).with_context(|| format!("{resource} {name}"))
}

/// Waits until every object is where OpenKruise leaves it once done: workloads Ready, jobs finished,
/// images pulled, the container recreated, the budget, spread and persistent state computed, the probe
/// marked on the Pods, the ConfigMap distributed.
async fn steady(ns: &TestNamespace) -> anyhow::Result<()> {
    type Check = fn(&Value) -> bool;
    let checks: [(&str, String, Check); 12] = [
        ("clonesets.apps.kruise.io", "cs".into(), |o| {
            o["status"]["updatedReadyReplicas"] == 2 && o["status"]["readyReplicas"] == 2
        }),
        ("statefulsets.apps.kruise.io", "sts".into(), |o| {
            o["status"]["readyReplicas"] == 2
        }),
        ("daemonsets.apps.kruise.io", "ds".into(), |o| {
            o["status"]["numberReady"] == o["status"]["desiredNumberScheduled"]
                && o["status"]["numberReady"] == REAL_NODES as i64
        }),
        ("uniteddeployments.apps.kruise.io", "ud".into(), |o| {
            o["status"]["readyReplicas"] == 2
        }),
        ("broadcastjobs.apps.kruise.io", "bj".into(), |o| {
            o["status"]["succeeded"] == REAL_NODES as i64
                && o["status"]["active"].as_i64().unwrap_or(0) == 0
        }),
        ("imagepulljobs.apps.kruise.io", "ipj".into(), |o| {
            o["status"]["succeeded"] == REAL_NODES as i64
                && o["status"]["completionTime"].is_string()
        }),
        ("imagelistpulljobs.apps.kruise.io", "iplj".into(), |o| {
            o["status"]["succeeded"] == 2 && o["status"]["completed"] == 2
        }),
        (
            "containerrecreaterequests.apps.kruise.io",
            "crr".into(),
            |o| o["status"]["phase"] == "Completed",
        ),
        (
            "podunavailablebudgets.policy.kruise.io",
            "pub".into(),
            |o| o["status"]["totalReplicas"] == 2 && o["status"]["unavailableAllowed"] == 1,
        ),
        ("workloadspreads.apps.kruise.io", "ws".into(), |o| {
            o["status"]["subsetStatuses"].as_array().map(Vec::len) == Some(2)
        }),
        ("persistentpodstates.apps.kruise.io", "pps".into(), |o| {
            o["status"]["podStates"].as_object().map(|m| m.len()) == Some(2)
        }),
        (
            "resourcedistributions.apps.kruise.io",
            format!("rd-{}", ns.name),
            |o| o["status"]["succeeded"] == 1,
        ),
    ];
    for (resource, object, check) in &checks {
        eventually(format!("{resource} {object} steady"), TIMEOUT, || async {
            let value = get(ns, resource, object).await?;
            Ok(check(&value).then_some(()))
        })
        .await
        .with_context(|| {
            format!("{resource} {object} never reached its steady state under OpenKruise")
        })?;
    }
    let configmaps: Api<ConfigMap> = ns.api();
    eventually("the distributed ConfigMap", TIMEOUT, || async {
        Ok(configmaps.get_opt("distributed").await?.map(|_| ()))
    })
    .await?;
    // The PodProbeMarker's probe, run by OpenKruise's daemons, marked on both CloneSet Pods.
    let api: Api<Pod> = ns.api();
    eventually("cs's Pods marked healthy by the probe", TIMEOUT, || async {
        let pods = active_pods(&api, "app=cs").await?;
        let marked = pods.len() == 2
            && pods.iter().all(|pod| {
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("healthy"))
                    .map(String::as_str)
                    == Some("true")
                    && pod
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter()
                                .any(|c| c.type_ == "game.kruise.io/healthy" && c.status == "True")
                        })
            });
        Ok(marked.then_some(()))
    })
    .await?;
    Ok(())
}

/// Every object of the 18 kinds, by `"<Kind> <namespace>/<name>"`.
async fn kruise_objects(
    ns: &TestNamespace,
    versions: &mut std::collections::BTreeMap<String, String>,
) -> anyhow::Result<std::collections::BTreeMap<String, Value>> {
    let mut objects = std::collections::BTreeMap::new();
    for resource in RESOURCES {
        // Read in the version first read (OpenKruise's), not the one kruise-rs's CRDs prefer.
        let versioned = match versions.get(resource) {
            Some(version) => {
                let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
                format!("{plural}.{version}.{group}")
            }
            None => resource.to_string(),
        };
        let list: Value =
            serde_json::from_str(&ns.kubectl(&["get", &versioned, "-A", "-o", "json"]).await?)?;
        for item in list["items"].as_array().into_iter().flatten() {
            if let Some((_, version)) = item["apiVersion"].as_str().and_then(|v| v.split_once('/'))
            {
                versions
                    .entry(resource.to_string())
                    .or_insert_with(|| version.to_string());
            }
            let key = format!(
                "{} {}/{}",
                item["kind"].as_str().unwrap_or_default(),
                item["metadata"]["namespace"].as_str().unwrap_or_default(),
                item["metadata"]["name"].as_str().unwrap_or_default()
            );
            objects.insert(key, item.clone());
        }
    }
    Ok(objects)
}

/// For each object whose resourceVersion changed: its labels, annotations, spec and status before and
/// after, where they differ (what a failed `takeover --verify` names only).
fn changed_objects(
    before: &std::collections::BTreeMap<String, Value>,
    after: &std::collections::BTreeMap<String, Value>,
) -> String {
    let mut out = String::new();
    for (key, old) in before {
        let Some(new) = after.get(key) else {
            out.push_str(&format!("{key}: deleted\n"));
            continue;
        };
        if old["metadata"]["resourceVersion"] == new["metadata"]["resourceVersion"] {
            continue;
        }
        for part in ["labels", "annotations"] {
            if old["metadata"][part] != new["metadata"][part] {
                out.push_str(&format!(
                    "{key} metadata.{part}:\n  before {}\n  after  {}\n",
                    old["metadata"][part], new["metadata"][part]
                ));
            }
        }
        for part in ["spec", "status"] {
            if old[part] != new[part] {
                out.push_str(&format!(
                    "{key} {part}:\n  before {}\n  after  {}\n",
                    old[part], new[part]
                ));
            }
        }
    }
    out
}

/// Each of the 18 kinds holds at least one object.
async fn every_kind_holds_objects(ns: &TestNamespace) -> anyhow::Result<()> {
    let mut empty = Vec::new();
    for resource in RESOURCES {
        let names = ns.kubectl(&["get", resource, "-A", "-o", "name"]).await?;
        if names.trim().is_empty() {
            empty.push(resource);
        }
    }
    ensure!(empty.is_empty(), "no objects of {empty:?}");
    Ok(())
}

/// The kruise-rs Pods at work: the CloneSet updated in place to a new image (the same Pods, one more
/// restart each) and a new Pod injected by the SidecarSet.
async fn kruise_rs_serves(ns: &TestNamespace) -> anyhow::Result<()> {
    let api: Api<Pod> = ns.api();
    let before = active_pods(&api, "app=cs").await?;
    let want: Vec<(String, i32)> = before.iter().map(|p| (uid(p), restarts(p) + 1)).collect();
    set_image(ns, "cs", "nginx:1.25").await?;
    eventually("cs updated in place by kruise-rs", TIMEOUT, || async {
        let pods = active_pods(&api, "app=cs").await?;
        let done = pods.len() == 2
            && pods.iter().all(|p| {
                is_ready(p)
                    && spec_image(p).as_deref() == Some("nginx:1.25")
                    && want.contains(&(uid(p), restarts(p)))
            });
        Ok(done.then_some(()))
    })
    .await?;
    seed_001_pod(ns, "injected-after", TIMEOUT).await
}
