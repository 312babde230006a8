//! Advanced DaemonSet end to end (issue 12): one Pod per eligible node, placed by the real scheduler,
//! on a fleet that changes while the cluster runs — seed 000's DaemonSet under the rollout monitor,
//! the example's in-place canary rollout in kube-system with its preDelete hook, nodes joining,
//! tainted, relabelled and leaving, surge, paused, OnDelete, Kubernetes' own DaemonSet side by side,
//! a manager killed mid-rollout, and bad input.
//!
//! The test bed's three nodes `sim-0..2` are shared by every test of this binary. Tests that count on
//! exactly that fleet take [`FLEET`] for reading; the test that adds untainted nodes takes it for
//! writing. Nodes a test adds for itself carry the taint `kruise-rs.io/test=<namespace>:NoSchedule`
//! and a label of its own, so no other DaemonSet runs there.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::DaemonSet as NativeDaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::daemonset::v1beta1::{DaemonSet, DaemonSetStatus};
use kruise_e2e::cloneset_kit::{describe_events, events_for, name, uid};
use kruise_e2e::{is_ready, node_name};
use kruise_testkit::{Limits, RolloutMonitor, TestNamespace, eventually, fleet, testbed};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kubelet_sim::NodeSpecSim;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Held for reading by tests that expect the daemon on exactly the shared nodes, for writing by a
/// test that adds nodes every DaemonSet may use.
static FLEET: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Seed 000's Advanced DaemonSet, exactly as the article writes it (v1alpha1).
const SEED_000: &str = r#"apiVersion: apps.kruise.io/v1alpha1
kind: DaemonSet
metadata:
  name: guestbook-ds
spec:
  selector:
    matchLabels:
      app: guestbook-daemon
  template:
    metadata:
      labels:
        app: guestbook-daemon
    spec:
      containers:
        - name: daemon
          image: openkruise/guestbook:v1
          resources:
            limits:
              cpu: "100m"
              memory: "200Mi"
  updateStrategy:
    rollingUpdate:
      maxUnavailable: 1
      partition: 0
      rollingUpdateType: Standard
    type: RollingUpdate
"#;

/// The set's Pods that are not being deleted.
async fn active(ns_api: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let mut list = ns_api
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    list.retain(|p| p.metadata.deletion_timestamp.is_none());
    list.sort_by_key(|p| (node_name(p), name(p)));
    Ok(list)
}

fn nodes_of(pods: &[Pod]) -> Vec<String> {
    pods.iter().filter_map(node_name).collect()
}

async fn get_ds(api: &Api<DaemonSet>, name: &str) -> anyhow::Result<DaemonSet> {
    api.get(name)
        .await
        .with_context(|| format!("reading DaemonSet {name}"))
}

fn status(ds: &DaemonSet) -> DaemonSetStatus {
    ds.status.clone().unwrap_or_default()
}

fn condition(ds: &DaemonSet, type_: &str) -> Option<(String, String, String)> {
    kruise_e2e::condition_of!(ds.status.as_ref()?.conditions, type_)
}

fn counters(s: &DaemonSetStatus) -> [i32; 7] {
    [
        s.desired_number_scheduled,
        s.current_number_scheduled,
        s.updated_number_scheduled,
        s.number_ready,
        s.number_available,
        s.number_unavailable,
        s.number_misscheduled,
    ]
}

/// Waits until the set has observed its generation and `check` holds for its status and active Pods.
async fn wait_for(
    ns: &TestNamespace,
    ds_name: &str,
    selector: &str,
    what: &str,
    check: impl Fn(&DaemonSetStatus, &[Pod]) -> bool,
) -> anyhow::Result<(DaemonSet, Vec<Pod>)> {
    let api: Api<DaemonSet> = ns.api();
    let pods: Api<Pod> = ns.api();
    let last = std::sync::Mutex::new(String::new());
    let result = eventually(format!("DaemonSet {ds_name}: {what}"), TIMEOUT, || {
        let api = api.clone();
        let pods = pods.clone();
        let last = &last;
        let check = &check;
        async move {
            let ds = get_ds(&api, ds_name).await?;
            let list = active(&pods, selector).await?;
            let st = status(&ds);
            if let Ok(mut last) = last.lock() {
                *last = format!("status {:?}; Pods {}", counters(&st), describe(&list));
            }
            let ok = ds.metadata.generation == Some(st.observed_generation) && check(&st, &list);
            Ok(ok.then_some((ds, list)))
        }
    })
    .await;
    let last = last.lock().map(|l| l.clone()).unwrap_or_default();
    result.map_err(|e| anyhow::anyhow!("{e:#}; last seen: {last}"))
}

fn image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The restart count of the Pod's first container (-1 when not reported).
fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(-1, |c| c.restart_count)
}

/// One line per Pod for failure messages: node, readiness, revision, image, restarts.
fn describe(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} [{} {} rev {} image {} restarts {}{}]",
                name(p),
                node_name(p).unwrap_or_default(),
                if is_ready(p) { "ready" } else { "not ready" },
                hash(p),
                image(p),
                restarts(p),
                if p.metadata.deletion_timestamp.is_some() {
                    " terminating"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn hash(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("controller-revision-hash").cloned())
        .unwrap_or_default()
}

fn shared_nodes() -> Vec<String> {
    testbed().nodes.iter().map(|n| n.name.clone()).collect()
}

#[tokio::test]
async fn seed_000_daemonset_runs_on_every_node_and_rolls_one_node_at_a_time() -> anyhow::Result<()>
{
    let bed = testbed();
    bed.manager();
    let _fleet = FLEET.read().await;
    let ns = bed.namespace("ads-seed").await?;
    ns.run(async {
        ns.apply(SEED_000).await?;
        let selector = "app=guestbook-daemon";
        let (ds, pods) = wait_for(&ns, "guestbook-ds", selector, "one Ready Pod per node", |s, pods| {
            counters(s) == [3, 3, 3, 3, 3, 0, 0] && pods.len() == 3 && pods.iter().all(is_ready)
        })
        .await?;
        ensure!(nodes_of(&pods) == shared_nodes(), "nodes {:?}", nodes_of(&pods));
        let first_hash = status(&ds).update_revision;
        ensure!(pods.iter().all(|p| hash(p) == first_hash), "{}", describe(&pods));
        // The v1alpha1 view names the hash daemonSetHash.
        let alpha: Value = serde_json::from_str(
            &ns.kubectl(&["get", "daemonsets.v1alpha1.apps.kruise.io", "guestbook-ds", "-o", "json"])
                .await?,
        )?;
        ensure!(alpha["status"]["daemonSetHash"] == json!(first_hash), "{}", alpha["status"]);
        // Placed by the scheduler through node affinity, with the DaemonSet tolerations.
        let spec = pods[0].spec.clone().unwrap_or_default();
        let term = serde_json::to_value(&spec.affinity)?;
        ensure!(
            term["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                ["matchFields"][0]["key"]
                == "metadata.name",
            "{term}"
        );
        let tolerations: Vec<String> = spec
            .tolerations
            .unwrap_or_default()
            .iter()
            .map(|t| format!("{}:{}", t.key.clone().unwrap_or_default(), t.effect.clone().unwrap_or_default()))
            .collect();
        ensure!(tolerations.contains(&"node.kubernetes.io/unreachable:NoExecute".to_owned()), "{tolerations:?}");
        ns.kubectl(&["wait", "--for=condition=Available", "daemonsets.apps.kruise.io/guestbook-ds", "--timeout=60s"])
            .await?;

        let limits = Limits {
            replicas: 3,
            max_unavailable: 1,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, selector, limits).await?;
        ns.kubectl(&[
            "patch",
            "daemonsets.apps.kruise.io",
            "guestbook-ds",
            "--type",
            "json",
            "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"openkruise/guestbook:v2"}]"#,
        ])
        .await?;
        let pods_api: Api<Pod> = ns.api();
        let api: Api<DaemonSet> = ns.api();
        let (ds, after) = monitor
            .eventually("every node runs a Ready v2 Pod", TIMEOUT, || async {
                let ds = get_ds(&api, "guestbook-ds").await?;
                let list = active(&pods_api, selector).await?;
                let st = status(&ds);
                let done = ds.metadata.generation == Some(st.observed_generation)
                    && st.update_revision != first_hash
                    && counters(&st) == [3, 3, 3, 3, 3, 0, 0]
                    && list.len() == 3
                    && list.iter().all(|p| is_ready(p) && image(p) == "openkruise/guestbook:v2");
                Ok(done.then_some((ds, list)))
            })
            .await?;
        let stats = monitor.finish().await?;
        ensure!(stats.max_unavailable_seen <= 1, "{stats:?}");
        ensure!(nodes_of(&after) == shared_nodes());
        // Standard: every Pod was recreated.
        ensure!(after.iter().all(|p| !pods.iter().any(|old| uid(old) == uid(p))));
        ensure!(after.iter().all(|p| hash(p) == status(&ds).update_revision));
        let events = events_for(&ns, "DaemonSet", "guestbook-ds").await?;
        let reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
        ensure!(
            reasons.contains(&"SuccessfulCreate") && reasons.contains(&"SuccessfulDelete"),
            "{}",
            describe_events(&events)
        );
        ensure!(
            events.iter().any(|e| e.message.as_deref().is_some_and(|m| m.starts_with("Created pod: guestbook-ds-"))),
            "{}",
            describe_events(&events)
        );
        Ok(())
    })
    .await
}

/// A node of a test's own: tainted so only that test's DaemonSets (which tolerate it) go there,
/// and labelled with the test's namespace.
fn own_node(ns: &TestNamespace, suffix: &str) -> NodeSpecSim {
    let mut spec = NodeSpecSim::named(&format!("{}-{suffix}", ns.name), 0);
    spec.labels.insert("ads-test".into(), ns.name.clone());
    spec.taints = vec![k8s_openapi::api::core::v1::Taint {
        key: "kruise-rs.io/test".into(),
        value: Some(ns.name.clone()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }];
    spec
}

/// A DaemonSet of the test's own nodes (nodeSelector on the test label, tolerating the test taint).
fn own_daemonset(ns: &TestNamespace, name: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"ads-test": ns.name},
                    "tolerations": [{"key": "kruise-rs.io/test", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "agent", "image": "agent:v1"}],
                },
            },
            "updateStrategy": strategy,
        },
    })
}

async fn apply_json(ns: &TestNamespace, doc: &Value) -> anyhow::Result<String> {
    ns.apply(&serde_yaml::to_string(doc)?).await
}

#[tokio::test]
async fn nodes_joining_tainted_relabelled_and_leaving() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ads-fleet").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        let a = fleet::add_node(&client, own_node(&ns, "a")).await?.name;
        let b = fleet::add_node(&client, own_node(&ns, "b")).await?.name;
        apply_json(
            &ns,
            &own_daemonset(&ns, "agent", json!({"type": "RollingUpdate"})),
        )
        .await?;
        let selector = "app=agent";
        wait_for(
            &ns,
            "agent",
            selector,
            "a Pod on each of the two nodes",
            |s, pods| counters(s) == [2, 2, 2, 2, 2, 0, 0] && pods.len() == 2,
        )
        .await?;

        // A node joins: it gets its Pod.
        let c = fleet::add_node(&client, own_node(&ns, "c")).await?.name;
        wait_for(
            &ns,
            "agent",
            selector,
            "a Pod on the joined node",
            |s, pods| counters(s) == [3, 3, 3, 3, 3, 0, 0] && nodes_of(pods).contains(&c),
        )
        .await?;

        // A node tainted NoSchedule (not tolerated) from the start gets none.
        let mut tainted = own_node(&ns, "d");
        tainted
            .taints
            .push(fleet::parse_taint("dedicated=gpu:NoSchedule")?);
        let d = fleet::add_node(&client, tainted).await?.name;
        // NoSchedule added to a node that runs the Pod: the Pod stays, counted misscheduled.
        fleet::taint_node(&client, &b, fleet::parse_taint("dedicated=gpu:NoSchedule")?).await?;
        let (_, pods) = wait_for(
            &ns,
            "agent",
            selector,
            "b misscheduled, d without a Pod",
            |s, pods| {
                s.desired_number_scheduled == 2 && s.number_misscheduled == 1 && pods.len() == 3
            },
        )
        .await?;
        ensure!(!nodes_of(&pods).contains(&d), "{}", describe(&pods));

        // NoExecute evicts: the controller deletes the Pod it may no longer keep.
        fleet::taint_node(&client, &c, fleet::parse_taint("dedicated=gpu:NoExecute")?).await?;
        wait_for(
            &ns,
            "agent",
            selector,
            "the NoExecute node emptied",
            |s, pods| !nodes_of(pods).contains(&c) && s.desired_number_scheduled == 1,
        )
        .await?;

        // Relabelled out of the nodeSelector: the Pod goes, it is not misscheduled any more.
        fleet::label_node(&client, &b, &[("ads-test", None)]).await?;
        wait_for(
            &ns,
            "agent",
            selector,
            "the relabelled node emptied",
            |s, pods| nodes_of(pods) == [a.clone()] && counters(s) == [1, 1, 1, 1, 1, 0, 0],
        )
        .await?;

        // Untainting brings Pods back where they fit again.
        fleet::untaint_node(&client, &c, "dedicated").await?;
        fleet::untaint_node(&client, &d, "dedicated").await?;
        wait_for(&ns, "agent", selector, "Pods back on c and d", |s, pods| {
            counters(s) == [3, 3, 3, 3, 3, 0, 0] && pods.len() == 3
        })
        .await?;

        // A node leaves: its Pod goes and the counts follow.
        fleet::remove_node(&client, &d).await?;
        wait_for(
            &ns,
            "agent",
            selector,
            "the removed node forgotten",
            |s, pods| counters(s) == [2, 2, 2, 2, 2, 0, 0] && !nodes_of(pods).contains(&d),
        )
        .await?;
        for node in [a, b, c] {
            fleet::remove_node(&client, &node).await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn example_canary_in_place_rollout_in_kube_system_with_a_pre_delete_hook()
-> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    // Adds untainted nodes every DaemonSet may use.
    let _fleet = FLEET.write().await;
    let ns = bed.namespace("ads-example").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        // 10 nodes: the 3 shared ones and 7 more; 4 labelled node-pool=canary.
        let mut added = Vec::new();
        for i in 0..7 {
            let mut spec = NodeSpecSim::named(&format!("ex-{i}"), 0);
            if i % 2 == 0 {
                spec.labels.insert("node-pool".into(), "canary".into());
            }
            added.push(fleet::add_node(&client, spec).await?.name);
        }
        let canary: Vec<String> = ["ex-0", "ex-2", "ex-4", "ex-6"].map(String::from).to_vec();
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/advanced-daemonset.yaml"))?;
        bed.plane.kubectl_apply("kube-system", &doc).await?;
        let api: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
        let selector = "app=log-agent";
        let result = async {
            // partitionedScaling with partition 20%: 10 − 2 nodes get a Pod at first (names sorted).
            let created = eventually("8 Ready log-agent Pods", TIMEOUT, || async {
                let ds = get_ds(&api, "log-agent").await?;
                let list = active(&pods_api, selector).await?;
                let st = status(&ds);
                let ok = st.desired_number_scheduled == 10
                    && st.current_number_scheduled == 8
                    && st.number_available == 8
                    && list.len() == 8
                    && list.iter().all(is_ready);
                if !ok {
                    anyhow::bail!("status {:?}; Pods {}", counters(&st), describe(&list));
                }
                Ok(Some(list))
            })
            .await?;
            let mut expected: Vec<String> = added.iter().cloned().chain(shared_nodes()).collect();
            expected.sort();
            expected.truncate(8);
            ensure!(nodes_of(&created) == expected, "{}", describe(&created));
            ensure!(
                created.iter().all(|p| p
                    .spec
                    .as_ref()
                    .and_then(|s| s.readiness_gates.as_ref())
                    .is_some_and(|g| g.iter().any(|g| g.condition_type == "InPlaceUpdateReady"))),
                "InPlaceIfPossible Pods carry the gate"
            );

            bed.plane
                .kubectl(&[
                    "-n",
                    "kube-system",
                    "patch",
                    "daemonsets.apps.kruise.io",
                    "log-agent",
                    "--type",
                    "json",
                    "-p",
                    r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"fluent/fluent-bit:3.1"}]"#,
                ])
                .await?;
            let updated = eventually("canary nodes updated in place", TIMEOUT, || async {
                let ds = get_ds(&api, "log-agent").await?;
                let list = active(&pods_api, selector).await?;
                let st = status(&ds);
                let canary_done = list
                    .iter()
                    .filter(|p| node_name(p).is_some_and(|n| canary.contains(&n)))
                    .all(|p| image(p) == "fluent/fluent-bit:3.1" && is_ready(p) && restarts(p) == 1);
                let ok = canary_done
                    && st.updated_number_scheduled == 4
                    && st.number_available == st.current_number_scheduled
                    && ds.metadata.generation == Some(st.observed_generation);
                if !ok {
                    anyhow::bail!("status {:?} {:?}; Pods {}", counters(&st), st.conditions, describe(&list));
                }
                Ok(Some((ds, list)))
            })
            .await?;
            let (ds, after) = updated;
            // The Pods created before the rollout are the same Pods (in place); only canary ones changed.
            for before in &created {
                let pod = after
                    .iter()
                    .find(|p| uid(p) == uid(before))
                    .with_context(|| format!("{} replaced: {}", name(before), describe(&after)))?;
                let on_canary = node_name(pod).is_some_and(|n| canary.contains(&n));
                if !on_canary {
                    ensure!(image(pod) == "fluent/fluent-bit:3.0" && restarts(pod) == 0, "{}", describe(&after));
                }
            }
            let progressing = condition(&ds, "Progressing").unwrap_or_default();
            ensure!(progressing.2.contains("4 of 4 selected nodes updated"), "{progressing:?}");

            // preDelete: a Pod with the hook's finalizer on a node that leaves waits in PreparingDelete.
            let victim = after
                .iter()
                .find(|p| node_name(p).as_deref() == Some("ex-1"))
                .cloned()
                .context("a Pod on ex-1")?;
            pods_api
                .patch(
                    &name(&victim),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/flush-logs"]}})),
                )
                .await?;
            fleet::remove_node(&client, "ex-1").await?;
            eventually("the Pod of the removed node in PreparingDelete", TIMEOUT, || async {
                let pod = pods_api.get(&name(&victim)).await?;
                let state = pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("lifecycle.apps.kruise.io/state").cloned());
                Ok((state.as_deref() == Some("PreparingDelete")).then_some(()))
            })
            .await?;
            // The hook lets go: the Pod goes.
            pods_api
                .patch(&name(&victim), &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
                .await?;
            eventually("the released Pod deleted", TIMEOUT, || async {
                Ok(pods_api.get_opt(&name(&victim)).await?.is_none().then_some(()))
            })
            .await?;
            Ok(())
        }
        .await;
        // Clean up what lives outside the test's namespace.
        let _ = api.delete("log-agent", &DeleteParams::default()).await;
        // Pods of removed nodes have no kubelet to finish their deletion: skip the grace period.
        let _ = pods_api
            .delete_collection(&DeleteParams::default().grace_period(0), &ListParams::default().labels(selector))
            .await;
        for node in &added {
            let _ = fleet::remove_node(&client, node).await;
        }
        let _ = eventually("log-agent Pods gone", TIMEOUT, || async {
            Ok(pods_api.list(&ListParams::default().labels(selector)).await?.items.is_empty().then_some(()))
        })
        .await;
        result
    })
    .await
}

#[tokio::test]
async fn surge_paused_and_on_delete() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ads-surge").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(fleet::add_node(&client, own_node(&ns, &format!("s{i}"))).await?.name);
        }
        let selector = "app=surge";
        apply_json(
            &ns,
            &own_daemonset(&ns, "surge", json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})),
        )
        .await?;
        let (_, before) = wait_for(&ns, "surge", selector, "3 Ready Pods", |s, pods| {
            counters(s) == [3, 3, 3, 3, 3, 0, 0] && pods.len() == 3
        })
        .await?;
        let limits = Limits {
            replicas: 3,
            max_unavailable: 0,
            max_surge: 1,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, selector, limits).await?;
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "surge", "--type", "json", "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"agent:v2"}]"#]).await?;
        let api: Api<DaemonSet> = ns.api();
        let pods_api: Api<Pod> = ns.api();
        monitor
            .eventually("surged to v2 on every node", TIMEOUT, || async {
                let ds = get_ds(&api, "surge").await?;
                let list = active(&pods_api, selector).await?;
                let ok = counters(&status(&ds)) == [3, 3, 3, 3, 3, 0, 0]
                    && list.len() == 3
                    && list.iter().all(|p| image(p) == "agent:v2" && is_ready(p));
                Ok(ok.then_some(()))
            })
            .await?;
        let stats = monitor.finish().await?;
        ensure!(stats.max_unavailable_seen == 0, "{stats:?}");
        ensure!(stats.max_pods_seen >= 4, "a new Pod ran beside an old one: {stats:?}");
        let _ = before;

        // Paused: a template change rolls nowhere; resuming rolls it.
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "surge", "--type", "merge", "-p",
            r#"{"spec":{"updateStrategy":{"rollingUpdate":{"paused":true}},"template":{"spec":{"containers":[{"name":"agent","image":"agent:v3"}]}}}}"#]).await?;
        let (ds, paused) = wait_for(&ns, "surge", selector, "paused at v2", |s, _| s.updated_number_scheduled == 0).await?;
        ensure!(paused.iter().all(|p| image(p) == "agent:v2"), "{}", describe(&paused));
        ensure!(condition(&ds, "Progressing").is_some_and(|c| c.1 == "DaemonSetPaused"), "{:?}", ds.status);
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "surge", "--type", "merge", "-p",
            r#"{"spec":{"updateStrategy":{"rollingUpdate":{"paused":false}}}}"#]).await?;
        wait_for(&ns, "surge", selector, "resumed to v3", |s, pods| {
            counters(s) == [3, 3, 3, 3, 3, 0, 0] && pods.len() == 3 && pods.iter().all(|p| image(p) == "agent:v3")
        })
        .await?;

        // OnDelete: only deleted Pods come back new.
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "surge", "--type", "merge", "-p",
            r#"{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"containers":[{"name":"agent","image":"agent:v4"}]}}}}"#]).await?;
        let (_, still) = wait_for(&ns, "surge", selector, "OnDelete observed", |s, _| s.updated_number_scheduled == 0).await?;
        ensure!(still.iter().all(|p| image(p) == "agent:v3"), "{}", describe(&still));
        let victim = still[0].clone();
        pods_api.delete(&name(&victim), &DeleteParams::default()).await?;
        let (_, after) = wait_for(&ns, "surge", selector, "the deleted Pod replaced at v4", |s, pods| {
            s.updated_number_scheduled == 1 && s.number_available == 3 && pods.len() == 3
        })
        .await?;
        let v4: Vec<_> = after.iter().filter(|p| image(p) == "agent:v4").collect();
        ensure!(v4.len() == 1 && node_name(v4[0]) == node_name(&victim), "{}", describe(&after));
        for node in nodes {
            fleet::remove_node(&client, &node).await?;
        }
        Ok(())
    })
    .await
}

/// One observed version of a Pod: name, resourceVersion, spec image, `InPlaceUpdateReady` status.
type PodVersion = (String, String, String, String);

/// The #2276 drain on an Advanced DaemonSet: an in-place update takes each Pod out of service
/// (`InPlaceUpdateReady` False, so `Ready` False and endpoints drop it) before its container is
/// restarted. A watch records every version of every Pod while kubelet-sim keeps writing their status:
/// no version may carry the new image in its spec while the Pod is still in service.
#[tokio::test]
async fn in_place_update_never_restarts_a_pod_that_is_in_service() -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ads-drain").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(fleet::add_node(&client, own_node(&ns, &format!("d{i}"))).await?.name);
        }
        let selector = "app=drain";
        apply_json(
            &ns,
            &own_daemonset(
                &ns,
                "drain",
                json!({"type": "RollingUpdate", "rollingUpdate": {
                    "rollingUpdateType": "InPlaceIfPossible",
                    "maxUnavailable": "100%"
                }}),
            ),
        )
        .await?;
        let (_, before) = wait_for(&ns, "drain", selector, "3 Ready Pods", |s, pods| {
            s.number_available == 3 && pods.len() == 3 && pods.iter().all(is_ready)
        })
        .await?;
        let uids_before: BTreeMap<String, String> =
            before.iter().map(|p| (name(p), uid(p))).collect();
        // Every version of every Pod from now on: (name, resourceVersion, spec image, gate status).
        let pods_api: Api<Pod> = ns.api();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<PodVersion>>> = std::sync::Arc::default();
        let recorder = {
            let seen = seen.clone();
            let stream = watcher(pods_api.clone(), watcher::Config::default().labels(selector))
                .applied_objects();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(pod)) = stream.next().await {
                    let gate = kruise_e2e::pod_condition(&pod, "InPlaceUpdateReady")
                        .map(|c| c.status.clone())
                        .unwrap_or_default();
                    let row = (
                        name(&pod),
                        pod.metadata.resource_version.clone().unwrap_or_default(),
                        image(&pod),
                        gate,
                    );
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(row);
                    }
                }
            })
        };
        // The watch has listed the 3 Pods before anything changes.
        eventually("the watch has listed the Pods", TIMEOUT, || {
            let seen = seen.clone();
            async move { Ok(seen.lock().is_ok_and(|s| s.len() >= 3).then_some(())) }
        })
        .await?;
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "drain", "--type", "json", "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"agent:v2"}]"#]).await?;
        let (_, after) = wait_for(&ns, "drain", selector, "3 Pods updated in place", |s, pods| {
            s.updated_number_scheduled == 3
                && s.number_available == 3
                && pods.len() == 3
                && pods.iter().all(|p| {
                    is_ready(p)
                        && kruise_e2e::container_status(p, "agent").is_some_and(|c| kruise_e2e::same_image(&c.image, "agent:v2"))
                })
        })
        .await?;
        recorder.abort();
        for pod in &after {
            let pod_name = name(pod);
            ensure!(
                uids_before.get(&pod_name) == Some(&uid(pod)),
                "{pod_name} was recreated, not updated in place"
            );
            ensure!(restarts(pod) == 1, "{pod_name} restarts {}", restarts(pod));
        }
        let seen = seen
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clone();
        for pod_name in uids_before.keys() {
            let versions: Vec<_> = seen.iter().filter(|(n, ..)| n == pod_name).collect();
            // The first version with the new image in its spec: the Pod must already be drained.
            let first_new = versions
                .iter()
                .find(|(_, _, image, _)| image == "agent:v2")
                .with_context(|| format!("{pod_name}: no version with the new image: {versions:?}"))?;
            ensure!(
                first_new.3 == "False",
                "{pod_name} got the new image while in service (kruise#2276): {versions:?}"
            );
            ensure!(
                versions.iter().any(|(_, _, image, gate)| image == "agent:v1" && gate == "False"),
                "{pod_name} never drained before its update: {versions:?}"
            );
        }
        for node in nodes {
            fleet::remove_node(&client, &node).await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn the_same_spec_as_a_native_daemonset_runs_on_the_same_nodes() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let _fleet = FLEET.read().await;
    let ns = bed.namespace("ads-native").await?;
    ns.run(async {
        let spec = |api: &str| {
            json!({
                "apiVersion": api,
                "kind": "DaemonSet",
                "metadata": {"name": "twin"},
                "spec": {
                    "selector": {"matchLabels": {"app": "twin"}},
                    "template": {
                        "metadata": {"labels": {"app": "twin"}},
                        "spec": {
                            "tolerations": [{"key": "example.com/x", "operator": "Exists", "effect": "NoExecute"}],
                            "containers": [{"name": "c", "image": "twin:v1"}],
                        },
                    },
                },
            })
        };
        let mut kruise = spec("apps.kruise.io/v1beta1");
        kruise["metadata"]["name"] = json!("twin-kruise");
        kruise["spec"]["selector"]["matchLabels"]["impl"] = json!("kruise");
        kruise["spec"]["template"]["metadata"]["labels"]["impl"] = json!("kruise");
        let mut native = spec("apps/v1");
        native["metadata"]["name"] = json!("twin-native");
        native["spec"]["selector"]["matchLabels"]["impl"] = json!("native");
        native["spec"]["template"]["metadata"]["labels"]["impl"] = json!("native");
        apply_json(&ns, &kruise).await?;
        apply_json(&ns, &native).await?;
        let (ds, kruise_pods) = wait_for(&ns, "twin-kruise", "app=twin,impl=kruise", "Ready everywhere", |s, pods| {
            s.number_available == 3 && pods.len() == 3 && pods.iter().all(is_ready)
        })
        .await?;
        let natives: Api<NativeDaemonSet> = ns.api();
        let pods_api: Api<Pod> = ns.api();
        let (native_ds, native_pods) = eventually("the native DaemonSet Ready everywhere", TIMEOUT, || async {
            let ds = natives.get("twin-native").await?;
            let list = active(&pods_api, "app=twin,impl=native").await?;
            let ok = ds.status.as_ref().is_some_and(|s| s.number_available == Some(3))
                && list.len() == 3
                && list.iter().all(is_ready);
            Ok(ok.then_some((ds, list)))
        })
        .await?;
        ensure!(nodes_of(&kruise_pods) == nodes_of(&native_pods));
        let tolerations = |p: &Pod| {
            let mut t: Vec<String> = p
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.clone())
                .unwrap_or_default()
                .iter()
                .map(|t| serde_json::to_string(t).unwrap_or_default())
                .collect();
            t.sort();
            t
        };
        ensure!(tolerations(&kruise_pods[0]) == tolerations(&native_pods[0]), "{:?} vs {:?}", tolerations(&kruise_pods[0]), tolerations(&native_pods[0]));
        let affinity = |p: &Pod| serde_json::to_value(p.spec.as_ref().and_then(|s| s.affinity.clone())).unwrap_or_default();
        ensure!(affinity(&kruise_pods[0]).is_object());
        let ns_status = native_ds.status.unwrap_or_default();
        let ks = status(&ds);
        ensure!(
            (ks.desired_number_scheduled, ks.current_number_scheduled, ks.number_ready, ks.number_available, ks.updated_number_scheduled, ks.number_misscheduled)
                == (
                    ns_status.desired_number_scheduled,
                    ns_status.current_number_scheduled,
                    ns_status.number_ready,
                    ns_status.number_available.unwrap_or(0),
                    ns_status.updated_number_scheduled.unwrap_or(0),
                    ns_status.number_misscheduled
                ),
            "kruise {ks:?} native {ns_status:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field_and_creates_nothing() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ads-bad").await?;
    ns.run(async {
        let base = |rolling: Value, lifecycle: Option<Value>| {
            let mut doc = own_daemonset(&ns, "bad", json!({"type": "RollingUpdate", "rollingUpdate": rolling}));
            if let Some(l) = lifecycle {
                doc["spec"]["lifecycle"] = l;
            }
            doc
        };
        let cases = [
            (base(json!({"maxUnavailable": 0, "maxSurge": 0}), None), "spec.updateStrategy.rollingUpdate.maxUnavailable"),
            (base(json!({"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 0, "maxSurge": 1}), None), "spec.updateStrategy.rollingUpdate.maxSurge"),
            (base(json!({"maxUnavailable": 1, "partition": "150%"}), None), "spec.updateStrategy.rollingUpdate.partition"),
            (
                base(json!({"maxUnavailable": 1}), Some(json!({"inPlaceUpdate": {"labelsHandler": {"hook": "true"}}}))),
                "spec.lifecycle.inPlaceUpdate",
            ),
        ];
        for (doc, field) in cases {
            let refused = apply_json(&ns, &doc).await;
            let message = format!("{:#}", refused.err().context("accepted")?);
            ensure!(message.contains(field), "{field}: {message}");
        }
        let api: Api<DaemonSet> = ns.api();
        ensure!(api.get_opt("bad").await?.is_none());
        let pods: Api<Pod> = ns.api();
        ensure!(pods.list(&ListParams::default()).await?.items.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_new_manager_finishes_a_rollout_the_killed_one_began() -> anyhow::Result<()> {
    let bed = testbed();
    let manager = bed.manager_with(&Default::default());
    let ns = bed.namespace("ads-failover").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        let mut nodes = Vec::new();
        for i in 0..4 {
            nodes.push(fleet::add_node(&client, own_node(&ns, &format!("f{i}"))).await?.name);
        }
        let selector = "app=failover";
        let mut doc = own_daemonset(&ns, "failover", json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}));
        doc["spec"]["minReadySeconds"] = json!(2);
        apply_json(&ns, &doc).await?;
        wait_for(&ns, "failover", selector, "4 Ready Pods", |s, pods| {
            counters(s) == [4, 4, 4, 4, 4, 0, 0] && pods.len() == 4
        })
        .await?;
        let limits = Limits {
            replicas: 4,
            max_unavailable: 1,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, selector, limits).await?;
        ns.kubectl(&["patch", "daemonsets.apps.kruise.io", "failover", "--type", "json", "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"agent:v2"}]"#]).await?;
        let pods_api: Api<Pod> = ns.api();
        monitor
            .eventually("the rollout under way", TIMEOUT, || async {
                let list = active(&pods_api, selector).await?;
                Ok(list.iter().any(|p| image(p) == "agent:v2").then_some(()))
            })
            .await?;
        manager.kill(&bed.plane)?;
        manager.restart(&bed.plane)?;
        let api: Api<DaemonSet> = ns.api();
        monitor
            .eventually("the new manager finished the rollout", TIMEOUT, || async {
                let ds = get_ds(&api, "failover").await?;
                let list = active(&pods_api, selector).await?;
                let ok = counters(&status(&ds)) == [4, 4, 4, 4, 4, 0, 0]
                    && list.len() == 4
                    && list.iter().all(|p| image(p) == "agent:v2" && is_ready(p));
                Ok(ok.then_some(()))
            })
            .await?;
        monitor.finish().await?;
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for pod in active(&pods_api, selector).await? {
            *per_node.entry(node_name(&pod).unwrap_or_default()).or_default() += 1;
        }
        ensure!(per_node.values().all(|&n| n == 1), "{per_node:?}");
        for node in nodes {
            fleet::remove_node(&client, &node).await?;
        }
        Ok(())
    })
    .await
}
