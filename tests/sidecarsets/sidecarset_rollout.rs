//! SidecarSet rollouts and injection variants, end to end, as a user drives and reads them: the scatter
//! strategy interleaving applications, `paused`, a change that cannot be made in place, shared volume
//! mounts, native sidecars (init containers with `restartPolicy: Always`) and a namespaceSelector on a
//! custom namespace label, as OpenKruise's SidecarSet e2e tests (`test/e2e/apps/sidecarset.go`).
//!
//! SidecarSets are cluster-scoped and the test bed is shared by the tests of this binary, so every
//! SidecarSet here has a unique name, is restricted to its test's namespace (or to a namespace label
//! only its test sets) and is deleted when the test ends.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, anyhow, ensure};
use k8s_openapi::api::core::v1::{Container, Pod};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::same_image;
use kruise_e2e::sidecarset_kit::{
    LOGTAIL, apply_logtail, container, counts, events_about, restarts, set_image, spec_image,
    status, test_pod, wait_ready, wait_status,
};
use kruise_e2e::{
    Cleanup, PodOrder, container_names, container_status, example_named, is_ready, node_name,
    pod_ip, wait_dry_run, wait_injected_on_dry_run,
};
use kruise_testkit::{Limits, TestNamespace, eventually, testbed};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

/// The logtail images: the one of `examples/sidecarset-logtail.yaml`, which the Pods are injected
/// with, and the upgrade.
const OLD: &str = "log-service/logtail:0.16.16";
const NEW: &str = "log-service/logtail:0.16.18";

/// A Pod with one app container `app` and `labels`.
fn app_pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
    })
}

/// `kubectl apply` of several objects at once (a v1 List).
async fn apply_all(ns: &TestNamespace, items: Vec<Value>) -> anyhow::Result<String> {
    ns.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
        .await
}

/// Creates `pods` (one `kubectl apply`) and waits until SidecarSet `name` counts them all matched,
/// updated and ready.
async fn create_injected(
    ns: &TestNamespace,
    name: &str,
    pods: Vec<Value>,
) -> anyhow::Result<Api<SidecarSet>> {
    let total = i32::try_from(pods.len())?;
    apply_all(ns, pods).await?;
    let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
    wait_status(
        &sidecarsets,
        name,
        &format!("{total} Pods injected and ready"),
        TIMEOUT,
        |s| counts(s) == (total, total, total, total),
    )
    .await?;
    Ok(sidecarsets)
}

/// `kubectl patch sidecarset <name> --type <kind> -p <patch>`.
async fn patch_sidecarset(
    ns: &TestNamespace,
    name: &str,
    kind: &str,
    patch: Value,
) -> anyhow::Result<String> {
    ns.kubectl(&[
        "patch",
        "sidecarset",
        name,
        "--type",
        kind,
        "-p",
        &patch.to_string(),
    ])
    .await
}

/// Pods of `selector`, by name.
async fn pods_by_name(api: &Api<Pod>, selector: &str) -> anyhow::Result<BTreeMap<String, Pod>> {
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect())
}

/// What must not change when a sidecar is upgraded in place: UID, node and IP.
fn identity(pod: &Pod) -> (Option<String>, Option<String>, Option<String>) {
    (pod.metadata.uid.clone(), node_name(pod), pod_ip(pod))
}

/// The image the kubelet reports for container `name`.
fn running_image(pod: &Pod, name: &str) -> String {
    container_status(pod, name).map_or_else(String::new, |s| s.image)
}

fn env_value(container: &Container, name: &str) -> Option<String> {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

/// The three applications of the scatter example (`examples/sidecarset-rollout-variants.yaml`), in the
/// order its scatterStrategy lists them.
const APPS: [&str; 3] = ["nginx", "web-server", "api-gateway"];
const PODS_PER_APP: usize = 3;

/// Seed 001's scatter example: Pods of three applications (label `app_name`), the sidecar upgraded one
/// Pod at a time with the applications interleaved.
///
/// The exact order (`ordering::scatter` over the waiting Pods, recomputed after every upgrade, as
/// upstream's `GetNextUpgradePods`): each scatter term puts a Pod of its value first and the last Pod of
/// its value last; terms matching equally many waiting Pods are applied in the listed order, so the
/// last listed goes first. The first round is therefore api-gateway, web-server, nginx. Later rounds
/// depend on the Pods' ActivePods order (how long each has been Ready), and the scatter may repeat an
/// application across a round boundary (…, nginx, nginx, …); what holds for every order is that the
/// upgrades go in rounds: no application gets its (k+1)-th Pod upgraded before every application got
/// its k-th, i.e. each run of three consecutive upgrades covers the three applications.
#[tokio::test]
async fn scatter_interleaves_the_applications() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-scatter").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("scatter-{}", ns.name);
        cleanup.sidecarset(&name);
        let mut set = example_named(
            "sidecarset-rollout-variants.yaml",
            Some("sidecarset-scatter"),
        )?;
        let listed: Vec<&str> = set["spec"]["updateStrategy"]["scatterStrategy"]
            .as_array()
            .context("the example's scatterStrategy")?
            .iter()
            .filter_map(|t| t["value"].as_str())
            .collect();
        ensure!(listed == APPS, "the example's scatter values: {listed:?}");
        set["metadata"]["name"] = json!(name);
        set["spec"]["namespace"] = json!(ns.name);
        set["spec"]["containers"][0]["image"] = json!(OLD);
        set["spec"]["updateStrategy"]["maxUnavailable"] = json!(1);
        ns.apply(&set.to_string()).await?;
        let labels = |app: &str| json!({"app": "web-scatter", "app_name": app});
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &app_pod("dry-run", labels(APPS[0])),
            TIMEOUT,
            &[LOGTAIL, "app"],
        )
        .await?;
        let mut items = Vec::new();
        for app in APPS {
            for i in 0..PODS_PER_APP {
                items.push(app_pod(&format!("{app}-{i}"), labels(app)));
            }
        }
        let total = (APPS.len() * PODS_PER_APP) as i32;
        let sidecarsets = create_injected(&ns, &name, items).await?;
        let pods: Api<Pod> = ns.api();
        let before = pods_by_name(&pods, "app=web-scatter").await?;

        let order = PodOrder::start(pods.clone(), "app=web-scatter", |pod| {
            spec_image(pod, LOGTAIL) == NEW
        })
        .await?;
        let limits = Limits::replicas(total).max_unavailable(1);
        let monitor = ns.rollout_monitor("app=web-scatter", limits).await?;
        patch_sidecarset(
            &ns,
            &name,
            "json",
            json!([{"op": "replace", "path": "/spec/containers/0/image", "value": NEW}]),
        )
        .await?;
        let began = std::time::Instant::now();
        monitor
            .eventually("every sidecar upgraded and ready", TIMEOUT, || async {
                let ss = sidecarsets.get(&name).await?;
                let s = status(&ss);
                let all = pods_by_name(&pods, "app=web-scatter").await?;
                let done = ss.metadata.generation == Some(s.observed_generation)
                    && counts(&s) == (total, total, total, total)
                    && all
                        .values()
                        .all(|p| same_image(&running_image(p, LOGTAIL), NEW) && is_ready(p));
                Ok(done.then_some(()))
            })
            .await?;
        let stats = monitor.finish().await?;
        eprintln!(
            "scatter rollout of {total} Pods in {:?}: {stats:?}",
            began.elapsed()
        );

        let after = pods_by_name(&pods, "app=web-scatter").await?;
        let app_of = |pod: &str| -> anyhow::Result<String> {
            after
                .get(pod)
                .and_then(|p| p.metadata.labels.as_ref()?.get("app_name").cloned())
                .with_context(|| format!("app_name of {pod}"))
        };
        let upgraded = order.order();
        let apps = upgraded
            .iter()
            .map(|p| app_of(p))
            .collect::<anyhow::Result<Vec<String>>>()?;
        eprintln!("upgrade order: {upgraded:?}");
        ensure!(upgraded.len() == total as usize, "upgraded: {upgraded:?}");
        let first_round: Vec<&str> = APPS.iter().rev().copied().collect();
        ensure!(
            apps[..APPS.len()] == first_round,
            "first round {:?}, expected {first_round:?} (order {upgraded:?})",
            &apps[..APPS.len()]
        );
        for (round, batch) in apps.chunks(APPS.len()).enumerate() {
            let distinct: BTreeSet<&String> = batch.iter().collect();
            ensure!(
                distinct.len() == APPS.len(),
                "round {round} upgraded {batch:?}: not every application once (order {upgraded:?})"
            );
        }
        // In place: same Pods, only the sidecar restarted.
        for (pod_name, old) in &before {
            let new = after
                .get(pod_name)
                .with_context(|| format!("{pod_name} gone"))?;
            ensure!(
                identity(new) == identity(old),
                "{pod_name} was recreated or moved"
            );
            ensure!(
                restarts(new, LOGTAIL) == 1 && restarts(new, "app") == 0,
                "{pod_name}: logtail restarts {}, app restarts {}",
                restarts(new, LOGTAIL),
                restarts(new, "app")
            );
        }
        Ok(())
    })
    .await
}

/// `updateStrategy.paused`: a new image upgrades no Pod (new Pods still get it); unpausing upgrades
/// them all in place.
#[tokio::test]
async fn paused_upgrades_nothing_until_resumed() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-paused").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("paused-{}", ns.name);
        cleanup.sidecarset(&name);
        let labels = json!({"app": "paused"});
        apply_logtail(
            &ns,
            &name,
            &labels,
            json!({"updateStrategy": {"paused": true, "maxUnavailable": "100%"}}),
        )
        .await?;
        let pods = ["a", "b", "c"].iter().map(|p| test_pod(p, labels.clone()));
        let sidecarsets = create_injected(&ns, &name, pods.collect()).await?;
        let pods: Api<Pod> = ns.api();
        let before = pods_by_name(&pods, "app=paused").await?;

        set_image(&sidecarsets, &name, NEW).await?;
        // Once the controller has seen the change: no Pod is at the new hash, and none was touched.
        wait_status(
            &sidecarsets,
            &name,
            "the new image observed, nothing updated",
            TIMEOUT,
            |s| counts(s) == (3, 0, 3, 0),
        )
        .await?;
        for (pod_name, old) in pods_by_name(&pods, "app=paused").await? {
            ensure!(
                spec_image(&old, LOGTAIL) == OLD && same_image(&running_image(&old, LOGTAIL), OLD),
                "{pod_name} upgraded while paused: spec {}, running {}",
                spec_image(&old, LOGTAIL),
                running_image(&old, LOGTAIL)
            );
            ensure!(restarts(&old, LOGTAIL) == 0, "{pod_name} logtail restarted");
        }
        // Paused stops upgrades, not injection: a new Pod gets the new image.
        ns.apply(&test_pod("d", labels.clone()).to_string()).await?;
        let d = wait_ready(&pods, "d", TIMEOUT).await?;
        ensure!(
            spec_image(&d, LOGTAIL) == NEW,
            "d got {}",
            spec_image(&d, LOGTAIL)
        );
        wait_status(&sidecarsets, &name, "d counted as updated", TIMEOUT, |s| {
            counts(s) == (4, 1, 4, 1)
        })
        .await?;

        patch_sidecarset(
            &ns,
            &name,
            "merge",
            json!({"spec": {"updateStrategy": {"paused": false}}}),
        )
        .await?;
        wait_status(
            &sidecarsets,
            &name,
            "all 4 updated and ready",
            TIMEOUT,
            |s| counts(s) == (4, 4, 4, 4),
        )
        .await?;
        let after = eventually("every logtail running the new image", TIMEOUT, || async {
            let all = pods_by_name(&pods, "app=paused").await?;
            let done = all
                .values()
                .all(|p| same_image(&running_image(p, LOGTAIL), NEW) && is_ready(p));
            Ok(done.then_some(all))
        })
        .await?;
        for (pod_name, old) in &before {
            let new = after
                .get(pod_name)
                .with_context(|| format!("{pod_name} gone"))?;
            ensure!(
                identity(new) == identity(old),
                "{pod_name} was recreated or moved"
            );
            ensure!(
                restarts(new, LOGTAIL) == 1 && restarts(new, "nginx") == 0,
                "{pod_name}: logtail restarts {}, nginx restarts {}",
                restarts(new, LOGTAIL),
                restarts(new, "nginx")
            );
        }
        let d = after.get("d").context("d")?;
        ensure!(restarts(d, LOGTAIL) == 0, "d's logtail restarted");
        Ok(())
    })
    .await
}

/// The env var a test adds to the logtail sidecar: a change that cannot be made in place.
const LOG_LEVEL: &str = "LOG_LEVEL";

/// Adds `LOG_LEVEL=debug` to the SidecarSet's logtail container (`kubectl patch --type json`).
async fn add_log_level(ns: &TestNamespace, name: &str) -> anyhow::Result<String> {
    patch_sidecarset(
        ns,
        name,
        "json",
        json!([{"op": "add", "path": "/spec/containers/0/env",
                "value": [{"name": LOG_LEVEL, "value": "debug"}]}]),
    )
    .await
}

/// Waits for the SidecarSet's `NotUpgradablePods` Event (OpenKruise's reason).
async fn wait_not_upgradable_event(ns: &TestNamespace, name: &str) -> anyhow::Result<()> {
    eventually(
        "a NotUpgradablePods Event on the SidecarSet",
        TIMEOUT,
        || async {
            let events = events_about(&ns.client, "SidecarSet", name).await?;
            let found = events
                .iter()
                .any(|e| e.reason.as_deref() == Some("NotUpgradablePods"));
            if found {
                Ok(Some(()))
            } else {
                let seen: Vec<_> = events.iter().map(|e| e.reason.clone()).collect();
                Err(anyhow!("Events so far: {seen:?}"))
            }
        },
    )
    .await
}

/// A change to a sidecar other than its image (an env var) cannot be made in place: the running Pods
/// keep their spec, the SidecarSet reports them with `NotUpgradablePods`, and a new Pod is injected
/// with the new env.
#[tokio::test]
async fn a_non_image_change_upgrades_nothing_in_place_but_new_pods_get_it() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-env").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("env-{}", ns.name);
        cleanup.sidecarset(&name);
        let labels = json!({"app": "env"});
        apply_logtail(
            &ns,
            &name,
            &labels,
            json!({"updateStrategy": {"maxUnavailable": "100%"}}),
        )
        .await?;
        let pods = ["a", "b"].iter().map(|p| test_pod(p, labels.clone()));
        let sidecarsets = create_injected(&ns, &name, pods.collect()).await?;
        let pods: Api<Pod> = ns.api();
        let before = pods_by_name(&pods, "app=env").await?;

        add_log_level(&ns, &name).await?;
        wait_status(
            &sidecarsets,
            &name,
            "the change observed, nothing updated",
            TIMEOUT,
            |s| counts(s) == (2, 0, 2, 0),
        )
        .await?;
        wait_not_upgradable_event(&ns, &name).await?;
        let after = pods_by_name(&pods, "app=env").await?;
        for (pod_name, old) in &before {
            let new = after
                .get(pod_name)
                .with_context(|| format!("{pod_name} gone"))?;
            ensure!(
                identity(new) == identity(old),
                "{pod_name} was recreated or moved"
            );
            let spec = |p: &Pod| serde_json::to_value(&p.spec.as_ref()?.containers).ok();
            ensure!(
                spec(new) == spec(old),
                "{pod_name}'s containers changed: {:?}",
                spec(new)
            );
            ensure!(
                restarts(new, LOGTAIL) == 0 && restarts(new, "nginx") == 0,
                "{pod_name} restarted a container"
            );
        }

        // A Pod created now is injected with the new env (and what it had before).
        ns.apply(&test_pod("c", labels.clone()).to_string()).await?;
        let c = wait_ready(&pods, "c", TIMEOUT).await?;
        let sidecar = container(&c, LOGTAIL).context("logtail injected into c")?;
        ensure!(
            env_value(sidecar, LOG_LEVEL).as_deref() == Some("debug")
                && env_value(sidecar, "TZ").as_deref() == Some("Asia/Shanghai")
                && env_value(sidecar, "IS_INJECTED").as_deref() == Some("true"),
            "c's logtail env: {:?}",
            sidecar.env
        );
        wait_status(
            &sidecarsets,
            &name,
            "c counted as the only updated Pod",
            TIMEOUT,
            |s| counts(s) == (3, 1, 3, 1),
        )
        .await?;
        for pod_name in before.keys() {
            let pod = pods.get(pod_name).await?;
            let sidecar = container(&pod, LOGTAIL).context("logtail")?;
            ensure!(
                env_value(sidecar, LOG_LEVEL).is_none(),
                "{pod_name} got {LOG_LEVEL} in place"
            );
        }
        Ok(())
    })
    .await
}

/// OpenKruise marks a Pod it cannot upgrade in place with the condition `SidecarSetUpgradable=False`
/// (reason `UpdateImmutableField`), which its own e2e tests check (`test/e2e/apps/sidecarset.go`).
#[tokio::test]
async fn a_not_upgradable_pod_gets_the_sidecarset_upgradable_condition() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-cond").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("cond-{}", ns.name);
        cleanup.sidecarset(&name);
        let labels = json!({"app": "cond"});
        apply_logtail(&ns, &name, &labels, json!({})).await?;
        ns.apply(&test_pod("a", labels.clone()).to_string()).await?;
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        wait_status(
            &sidecarsets,
            &name,
            "the Pod injected and ready",
            TIMEOUT,
            |s| counts(s) == (1, 1, 1, 1),
        )
        .await?;
        add_log_level(&ns, &name).await?;
        wait_not_upgradable_event(&ns, &name).await?;
        let pods: Api<Pod> = ns.api();
        eventually(
            "condition SidecarSetUpgradable=False (UpdateImmutableField) on Pod a",
            Duration::from_secs(30),
            || async {
                let pod = pods.get("a").await?;
                let condition = kruise_e2e::pod_condition(&pod, "SidecarSetUpgradable").cloned();
                match condition {
                    Some(c)
                        if c.status == "False"
                            && c.reason.as_deref() == Some("UpdateImmutableField") =>
                    {
                        Ok(Some(()))
                    }
                    other => Err(anyhow!("condition: {other:?}")),
                }
            },
        )
        .await
    })
    .await
}

/// `shareVolumePolicy: enabled`: the sidecar mounts every volume mount of the app containers at the
/// same path (one per path; a path the sidecar mounts itself stays its own), with the env vars their
/// subPathExprs use; a sidecar without the policy gets none of them.
#[tokio::test]
async fn share_volume_policy_mounts_the_app_volumes_in_the_sidecar() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-share").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("share-{}", ns.name);
        cleanup.sidecarset(&name);
        let set = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": "share"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                "containers": [
                    {"name": "log-agent", "image": "busybox:1.36",
                     "shareVolumePolicy": {"type": "enabled"},
                     "volumeMounts": [{"name": "agent-cache", "mountPath": "/cache"}]},
                    {"name": "probe", "image": "busybox:1.36",
                     "podInjectPolicy": "AfterAppContainer",
                     "shareVolumePolicy": {"type": "disabled"}},
                ],
                "volumes": [{"name": "agent-cache", "emptyDir": {}}],
            },
        });
        ns.apply(&set.to_string()).await?;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "share"}},
            "spec": {
                "containers": [
                    {"name": "web", "image": "nginx:alpine",
                     "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                     "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "logs", "mountPath": "/var/log/web", "subPathExpr": "$(POD_NAME)"},
                        {"name": "cache", "mountPath": "/cache"},
                     ]},
                    {"name": "worker", "image": "busybox:1.36",
                     "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "config", "mountPath": "/etc/worker", "readOnly": true},
                     ]},
                ],
                "volumes": [
                    {"name": "data", "emptyDir": {}},
                    {"name": "logs", "emptyDir": {}},
                    {"name": "cache", "emptyDir": {}},
                    {"name": "config", "emptyDir": {}},
                ],
            },
        });
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod,
            TIMEOUT,
            &["log-agent", "web", "worker", "probe"],
        )
        .await?;
        ns.apply(&pod.to_string()).await?;
        let pods: Api<Pod> = ns.api();
        let web = wait_ready(&pods, "web", TIMEOUT).await?;
        ensure!(
            container_names(&web) == ["log-agent", "web", "worker", "probe"],
            "containers: {:?}",
            container_names(&web)
        );
        let mounts = |c: &str| -> anyhow::Result<BTreeMap<String, Value>> {
            let mut by_path = BTreeMap::new();
            for m in container(&web, c)
                .with_context(|| format!("container {c}"))?
                .volume_mounts
                .iter()
                .flatten()
            {
                by_path
                    .entry(m.mount_path.clone())
                    .or_insert(serde_json::to_value(m)?);
            }
            Ok(by_path)
        };
        // What the sidecar must mount: its own /cache, then the apps' mounts by path, first wins.
        let mut want = BTreeMap::from([(
            "/cache".to_string(),
            json!({"name": "agent-cache", "mountPath": "/cache"}),
        )]);
        for app in ["web", "worker"] {
            for (path, mount) in mounts(app)? {
                want.entry(path).or_insert(mount);
            }
        }
        let got = mounts("log-agent")?;
        ensure!(got == want, "log-agent mounts {got:#?}\nwant {want:#?}");
        for path in ["/data", "/var/log/web", "/etc/worker"] {
            ensure!(want.contains_key(path), "{path} not shared: {want:?}");
        }
        ensure!(
            got["/var/log/web"]["subPathExpr"] == "$(POD_NAME)"
                && got["/etc/worker"]["readOnly"] == true,
            "mount details: {got:?}"
        );
        let agent = container(&web, "log-agent").context("log-agent")?;
        let pod_name_env = agent
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "POD_NAME")
            .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
            .map(|f| f.field_path.clone());
        ensure!(
            pod_name_env.as_deref() == Some("metadata.name"),
            "log-agent's POD_NAME (for the subPathExpr): {:?}",
            agent.env
        );
        let probe = mounts("probe")?;
        for path in ["/data", "/var/log/web", "/etc/worker", "/cache"] {
            ensure!(
                !probe.contains_key(path),
                "probe (shareVolumePolicy disabled) mounts {path}"
            );
        }
        let volumes: Vec<String> = web
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten().map(|v| v.name.clone()))
            .collect();
        for volume in ["data", "logs", "cache", "config", "agent-cache"] {
            ensure!(
                volumes.iter().filter(|v| *v == volume).count() == 1,
                "volumes: {volumes:?}"
            );
        }
        Ok(())
    })
    .await
}

/// A SidecarSet init container with `restartPolicy: Always` is a native sidecar: injected into
/// `spec.initContainers` after the Pod's own, started and kept running while the app runs. Such a
/// SidecarSet must be `NotUpdate` (native sidecars are not upgraded in place).
#[tokio::test]
async fn native_sidecar_is_injected_as_a_restartable_init_container() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-native").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("native-{}", ns.name);
        cleanup.sidecarset(&name);
        let mut set = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": "mesh"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                "initContainers": [{"name": "mesh-proxy", "image": "envoyproxy/envoy:v1.30.1",
                                    "restartPolicy": "Always"}],
            },
        });
        let rejected = ns
            .apply(&set.to_string())
            .await
            .err()
            .context("a native sidecar with RollingUpdate was accepted")?;
        ensure!(
            format!("{rejected:#}").contains("spec.updateStrategy.type"),
            "{rejected:#}"
        );
        set["spec"]["updateStrategy"] = json!({"type": "NotUpdate"});
        ns.apply(&set.to_string()).await?;
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "app", "labels": {"app": "mesh"}},
            "spec": {
                "initContainers": [{"name": "setup", "image": "busybox:1.36", "command": ["true"]}],
                "containers": [{"name": "app", "image": "nginx:alpine"}],
            },
        });
        let init_names = |p: &Pod| -> Vec<String> {
            p.spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten().map(|c| c.name.clone()))
                .collect()
        };
        wait_dry_run(
            &ns.client,
            &ns.name,
            &pod,
            TIMEOUT,
            "the webhook injecting mesh-proxy on a dry run".into(),
            |p| init_names(p) == ["setup", "mesh-proxy"],
        )
        .await?;
        ns.apply(&pod.to_string()).await?;
        let pods: Api<Pod> = ns.api();
        let running = wait_ready(&pods, "app", TIMEOUT).await?;
        ensure!(init_names(&running) == ["setup", "mesh-proxy"]);
        ensure!(container_names(&running) == ["app"]);
        let proxy = running
            .spec
            .as_ref()
            .and_then(|s| {
                s.init_containers
                    .as_ref()?
                    .iter()
                    .find(|c| c.name == "mesh-proxy")
            })
            .context("mesh-proxy")?;
        ensure!(
            proxy.restart_policy.as_deref() == Some("Always"),
            "{proxy:?}"
        );

        // What the kubelet reports: setup completed, mesh-proxy started and running alongside app.
        let statuses = running
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.clone())
            .unwrap_or_default();
        let init_status = |n: &str| statuses.iter().find(|s| s.name == n).cloned();
        let setup = init_status("setup").context("setup status")?;
        let terminated = setup.state.as_ref().and_then(|s| s.terminated.as_ref());
        ensure!(
            terminated.is_some_and(|t| t.exit_code == 0),
            "setup: {setup:?}"
        );
        let proxy = init_status("mesh-proxy").context("mesh-proxy status")?;
        ensure!(
            proxy.started == Some(true)
                && proxy.ready
                && proxy.state.as_ref().is_some_and(|s| s.running.is_some()),
            "mesh-proxy: {proxy:?}"
        );
        // kubectl counts a native sidecar in READY.
        let table = ns.kubectl(&["get", "pod", "app", "--no-headers"]).await?;
        let columns: Vec<&str> = table.split_whitespace().collect();
        ensure!(
            columns.get(1) == Some(&"2/2") && columns.get(2) == Some(&"Running"),
            "kubectl get pod app: {table}"
        );
        let annotations = running.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations.get("kruise.io/sidecarset-injected-list") == Some(&name),
            "{annotations:?}"
        );
        let hash: Value = serde_json::from_str(
            annotations
                .get("kruise.io/sidecarset-hash")
                .context("hash annotation")?,
        )?;
        ensure!(
            hash[&name]["sidecarList"] == json!(["mesh-proxy"]),
            "hash annotation: {hash}"
        );
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        wait_status(
            &sidecarsets,
            &name,
            "the Pod matched and ready",
            TIMEOUT,
            |s| counts(s) == (1, 1, 1, 1),
        )
        .await?;
        Ok(())
    })
    .await
}

/// A `namespaceSelector` on a custom namespace label: a Pod in a namespace with the label is injected,
/// the same Pod in a namespace without it is not; labelling that namespace makes its new Pods injected.
#[tokio::test]
async fn namespace_selector_on_a_custom_label_restricts_injection() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-nssel").await?;
    let other = bed.namespace("ss-nssel-off").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let name = format!("nssel-{}", ns.name);
        cleanup.sidecarset(&name);
        // A label only this test sets: its value is unique to the test.
        const KEY: &str = "e2e.kruise-rs.io/sidecar-mesh";
        let label = format!("{KEY}={}", ns.name);
        bed.plane
            .kubectl(&["label", "namespace", &ns.name, &label])
            .await?;
        let set = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": "nssel"}},
                "namespaceSelector": {"matchLabels": {KEY: ns.name}},
                "containers": [{"name": "mesh-agent", "image": "busybox:1.36"}],
            },
        });
        ns.apply(&set.to_string()).await?;
        let pod = |n: &str| app_pod(n, json!({"app": "nssel"}));
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod("dry-run"),
            TIMEOUT,
            &["mesh-agent", "app"],
        )
        .await?;
        ns.apply(&pod("web").to_string()).await?;
        other.apply(&pod("web").to_string()).await?;
        let injected = wait_ready(&ns.api(), "web", TIMEOUT).await?;
        let plain = wait_ready(&other.api(), "web", TIMEOUT).await?;
        ensure!(
            container_names(&injected) == ["mesh-agent", "app"],
            "labelled namespace: {:?}",
            container_names(&injected)
        );
        ensure!(
            container_names(&plain) == ["app"],
            "unlabelled namespace: {:?}",
            container_names(&plain)
        );
        let annotations = plain.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            !annotations.contains_key("kruise.io/sidecarset-injected-list"),
            "{annotations:?}"
        );
        // The controller scopes the same way: one matched Pod, and the other one is not a missed
        // injection.
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        wait_status(
            &sidecarsets,
            &name,
            "1 matched, none missed",
            TIMEOUT,
            |s| counts(s) == (1, 1, 1, 1) && s.missed_injection_pods == 0,
        )
        .await?;

        // Label the other namespace: its new Pods are injected too.
        other
            .kubectl(&["delete", "pod", "web", "--timeout=60s"])
            .await?;
        bed.plane
            .kubectl(&["label", "namespace", &other.name, &label])
            .await?;
        wait_injected_on_dry_run(
            &other.client,
            &other.name,
            &pod("dry-run"),
            TIMEOUT,
            &["mesh-agent", "app"],
        )
        .await?;
        other.apply(&pod("web-2").to_string()).await?;
        let now_injected = wait_ready(&other.api(), "web-2", TIMEOUT).await?;
        ensure!(
            container_names(&now_injected) == ["mesh-agent", "app"],
            "after labelling: {:?}",
            container_names(&now_injected)
        );
        wait_status(
            &sidecarsets,
            &name,
            "2 matched, none missed",
            TIMEOUT,
            |s| counts(s) == (2, 2, 2, 2) && s.missed_injection_pods == 0,
        )
        .await?;
        Ok(())
    })
    .await
}
