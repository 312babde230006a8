//! Leader election between two kruise-manager replicas: only one leads (holds the Lease, reports
//! `kruise_manager_leader 1` and runs controllers); when it is killed, the other takes over within the
//! lease duration. A leader whose existing apiserver connections go silent (new ones still pass) acts
//! again within a minute, and a restarted replica is ready only once its Pod webhook can inject.
//! (Own test binary: the managers here own the webhook configurations of this cluster, so its tests
//! run one at a time.)

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kruise_testkit::manager::{self, ManagerOptions, ManagerPorts, http_get};
use kruise_testkit::{eventually, testbed};
use kube::api::Api;

const LEASE_SECONDS: u64 = 6;

/// The tests of this binary each run managers that point the webhooks at themselves: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn leads(ports: &ManagerPorts) -> anyhow::Result<bool> {
    let (_, body) = http_get(ports.metrics, "/metrics").await?;
    Ok(body.lines().any(|l| l == "kruise_manager_leader 1"))
}

#[tokio::test]
async fn only_the_leader_leads_and_a_standby_takes_over() -> anyhow::Result<()> {
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("leader").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let options = |name: &str| ManagerOptions {
            name: name.into(),
            leader_election_id: "kruise-manager-e2e".into(),
            lease_seconds: LEASE_SECONDS,
            extra_args: Vec::new(),
            ..Default::default()
        };
        let a = manager::spawn(&bed.plane, &options("manager-a"))?;
        manager::wait_serving(&bed.plane, &a, Duration::from_secs(90)).await?;
        let b = manager::spawn(&bed.plane, &options("manager-b"))?;
        eventually("manager-b ready", Duration::from_secs(60), || async {
            Ok((http_get(b.health, "/readyz")
                .await
                .ok()
                .map(|(code, _)| code)
                == Some(200))
            .then_some(()))
        })
        .await?;

        let leases: Api<Lease> = Api::namespaced(ns.client.clone(), manager::NAMESPACE);
        let holder = || async {
            let lease = leases.get("kruise-manager-e2e").await?;
            Ok::<_, anyhow::Error>(
                lease
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default(),
            )
        };
        ensure!(
            holder().await? == "manager-a",
            "the first manager holds the lease"
        );
        ensure!(leads(&a).await?, "manager-a reports leadership");
        ensure!(
            !leads(&b).await?,
            "manager-b must not lead while manager-a does"
        );

        // Kill the leader without a chance to release its lease.
        let killed = Instant::now();
        bed.plane.stop_process("manager-a", true);
        eventually(
            "manager-b takes over",
            Duration::from_secs(LEASE_SECONDS * 4),
            || async { Ok((holder().await? == "manager-b" && leads(&b).await?).then_some(())) },
        )
        .await
        .context("failover")?;
        let takeover = killed.elapsed();
        println!(
            "leader failover after SIGKILL: {:.1} s (lease duration {LEASE_SECONDS} s)",
            takeover.as_secs_f64()
        );
        ensure!(
            takeover < Duration::from_secs(LEASE_SECONDS * 2 + 2),
            "takeover took {takeover:?}, more than the lease duration plus a retry"
        );
        // The new leader points the webhooks at itself: admission works through it.
        manager::wait_serving(&bed.plane, &b, Duration::from_secs(60)).await?;
        Ok(())
    })
    .await
}

/// Writes one replica's kubeconfig (identity `manager-<index>` in the audit log, apiserver at
/// `server`) and returns its path.
fn replica_kubeconfig(index: usize, server: &str) -> anyhow::Result<std::path::PathBuf> {
    let bed = testbed();
    let path = bed.plane.dir().join(format!("liveness-{index}.kubeconfig"));
    std::fs::write(&path, bed.plane.kubeconfig_as(index, server)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

async fn ready(ports: &ManagerPorts) -> bool {
    http_get(ports.health, "/readyz")
        .await
        .is_ok_and(|(code, _)| code == 200)
}

/// The value of the first sample of `metric` on a manager's `/metrics` (0 when absent).
async fn sample(ports: &ManagerPorts, metric: &str) -> f64 {
    let Ok((_, body)) = http_get(ports.metrics, "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .find_map(|line| {
            let value = line.strip_prefix(metric)?.strip_prefix(' ')?;
            value.parse().ok()
        })
        .unwrap_or(0.0)
}

/// The leader's existing connections stop carrying bytes (no reset) while new connections pass: an
/// apiserver replica gone behind a load balancer, an expired NAT entry. A CloneSet scaled right
/// then is acted on within a minute (by the same leader on new connections, or by the standby), and
/// each missing Pod is created exactly once.
#[tokio::test]
async fn a_leader_whose_connections_freeze_acts_again_within_a_minute() -> anyhow::Result<()> {
    use kruise_e2e::audited_writes;
    use kruise_e2e::cloneset_kit::{INSTANCE_ID, active_pods, apply, cloneset, label, merge_patch};
    use kruise_testkit::blackhole::BlackHoleProxy;
    use serde_json::json;

    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("frozen").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let proxy =
            BlackHoleProxy::start(format!("127.0.0.1:{}", bed.plane.ports().apiserver).parse()?)
                .await?;
        let options = |index: usize, server: &str| -> anyhow::Result<ManagerOptions> {
            Ok(ManagerOptions {
                name: format!("manager-{index}"),
                leader_election_id: "kruise-manager-liveness".into(),
                lease_seconds: 15,
                kubeconfig: Some(replica_kubeconfig(index, server)?),
                ..Default::default()
            })
        };
        let leader = manager::spawn(&bed.plane, &options(0, &proxy.server_url())?)?;
        manager::wait_serving(&bed.plane, &leader, Duration::from_secs(90)).await?;
        let standby = manager::spawn(&bed.plane, &options(1, &bed.plane.server_url())?)?;
        eventually("the standby ready", Duration::from_secs(60), || async {
            Ok(ready(&standby).await.then_some(()))
        })
        .await?;
        ensure!(leads(&leader).await?, "manager-0 leads");

        apply(&ns, &cloneset("frozen", 2, "nginx:alpine", json!({}))).await?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
        eventually("2 Pods", Duration::from_secs(60), || async {
            Ok((active_pods(&pods, "app=frozen").await?.len() == 2).then_some(()))
        })
        .await?;
        // At rest: the leader has seen both Pods ready.
        let clonesets: Api<kruise_api::cloneset::v1beta1::CloneSet> = ns.api();
        eventually("the CloneSet at rest", Duration::from_secs(60), || async {
            let status = clonesets.get("frozen").await?.status.unwrap_or_default();
            Ok((status.ready_replicas == 2).then_some(()))
        })
        .await?;

        let since = jiff::Timestamp::now();
        let frozen = Instant::now();
        proxy.freeze_existing();
        merge_patch(&ns, "cloneset", "frozen", &json!({"spec": {"replicas": 6}})).await?;
        let mut first_reaction = None;
        let deadline = Duration::from_secs(90);
        loop {
            let count = active_pods(&pods, "app=frozen").await?.len();
            if count > 2 && first_reaction.is_none() {
                first_reaction = Some(frozen.elapsed());
            }
            if count >= 6 {
                break;
            }
            ensure!(
                frozen.elapsed() < deadline,
                "the scale to 6 was not acted on within {deadline:?} ({count} Pods)\n{}",
                bed.plane.log_tails(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let first_reaction = first_reaction.unwrap_or_else(|| frozen.elapsed());
        let all_created = frozen.elapsed();
        // No Pod is created twice: once everything has settled, 6 Pods with 6 instance ids, and
        // exactly 4 Pod creations took effect since the freeze (whoever made them).
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = active_pods(&pods, "app=frozen").await?;
        let ids: std::collections::BTreeSet<_> =
            now.iter().filter_map(|p| label(p, INSTANCE_ID)).collect();
        ensure!(
            now.len() == 6 && ids.len() == 6,
            "6 Pods with distinct instance ids expected, found {} ({ids:?})",
            now.len()
        );
        let mut creates = Vec::new();
        for user in ["manager-0", "manager-1"] {
            creates.extend(audited_writes(user, since)?.into_iter().filter(|w| {
                w.took_effect()
                    && w.resource == "pods"
                    && w.subresource.is_empty()
                    && w.namespace == ns.name
                    && w.line.contains(" create ")
            }));
        }
        let lines: Vec<&str> = creates.iter().map(|w| w.line.as_str()).collect();
        ensure!(
            creates.len() == 4,
            "4 Pod creations expected since the freeze, found {}:\n{}",
            creates.len(),
            lines.join("\n")
        );
        let acted = if leads(&leader).await? {
            "the same leader, on new connections"
        } else {
            "the standby"
        };
        println!(
            "frozen connections: first new Pod after {:.1} s, all 6 after {:.1} s, acted on by {acted}; \
             stale-watch step-downs of the frozen leader: {}; Pod creations {lines:?}",
            first_reaction.as_secs_f64(),
            all_created.as_secs_f64(),
            sample(&leader, "kruise_manager_stale_watch_stepdowns_total").await,
        );
        ensure!(
            first_reaction <= Duration::from_secs(60),
            "the first reaction came {first_reaction:?} after the freeze (at most 60 s)"
        );
        bed.plane.stop_process("manager-0", true);
        bed.plane.stop_process("manager-1", true);
        Ok(())
    })
    .await
}

/// `/readyz` is 200 only once the Pod webhook can decide: a manager restarted 50 times, and a Pod
/// that a SidecarSet selects created the moment `/readyz` answers 200, gets its sidecar every time.
#[tokio::test]
async fn a_ready_replica_injects_every_pod_created_right_after_it_starts() -> anyhow::Result<()> {
    use kruise_e2e::container_names;
    use kruise_e2e::sidecarset_kit::{LOGTAIL, logtail, test_pod};
    use kube::api::{DeleteParams, PostParams};
    use serde_json::json;

    const STARTS: usize = 50;
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("ready").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let options = ManagerOptions {
            name: "manager-ready".into(),
            leader_election_id: "kruise-manager-readiness".into(),
            lease_seconds: LEASE_SECONDS,
            ..Default::default()
        };
        let replica = manager::Manager::spawn(&bed.plane, &options)?;
        manager::wait_serving(&bed.plane, &replica.ports, Duration::from_secs(90)).await?;
        let sidecarset = format!("{}-logtail", ns.name);
        ns.apply(&logtail(&sidecarset, &ns.name, json!({}))?.to_string())
            .await?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
        let labels = json!({"app": "nginx"});
        // Wired: the running replica injects.
        eventually("the sidecar injected", Duration::from_secs(60), || async {
            let pod: k8s_openapi::api::core::v1::Pod =
                serde_json::from_value(test_pod("wired", labels.clone()))?;
            let created = pods.create(&PostParams::default(), &pod).await?;
            pods.delete("wired", &DeleteParams::default().grace_period(0))
                .await?;
            Ok(container_names(&created)
                .iter()
                .any(|c| c == LOGTAIL)
                .then_some(()))
        })
        .await?;

        let mut missed = Vec::new();
        let mut to_ready = Vec::new();
        for start in 0..STARTS {
            replica.restart(&bed.plane)?;
            let started = Instant::now();
            while !ready(&replica.ports).await {
                ensure!(
                    started.elapsed() < Duration::from_secs(60),
                    "start {start}: not ready within 60 s\n{}",
                    bed.plane.log_tails(30)
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            to_ready.push(started.elapsed());
            let name = format!("ready-{start}");
            let pod: k8s_openapi::api::core::v1::Pod =
                serde_json::from_value(test_pod(&name, labels.clone()))?;
            let created = pods.create(&PostParams::default(), &pod).await?;
            if !container_names(&created).iter().any(|c| c == LOGTAIL) {
                missed.push(name.clone());
            }
            pods.delete(&name, &DeleteParams::default().grace_period(0))
                .await?;
        }
        let slowest = to_ready.iter().max().copied().unwrap_or_default();
        println!(
            "readiness: {STARTS} starts, {} Pods created at the first 200 of /readyz injected, \
             slowest start to ready {:.2} s",
            STARTS - missed.len(),
            slowest.as_secs_f64()
        );
        ensure!(
            missed.is_empty(),
            "Pods created as soon as /readyz was 200 went without their sidecar: {missed:?}"
        );
        bed.plane.stop_process("manager-ready", true);
        Ok(())
    })
    .await
}

/// A leader that cannot keep a watch current steps down, and a replica whose Pod webhook watch is
/// stale is not ready: the manager's identity loses `watch` on SidecarSets (an RBAC mistake) while
/// everything else still works, its lease renewals included. Both come back once the permission does.
#[tokio::test]
async fn a_leader_that_cannot_watch_steps_down_and_is_not_ready() -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use serde_json::json;

    const USER: &str = "liveness-limited";
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("stale").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let sidecarset_verbs = |watch: bool| {
            let mut verbs = vec!["get", "list", "update", "patch"];
            if watch {
                verbs.push("watch");
            }
            json!({"apiGroups": ["apps.kruise.io"], "resources": ["sidecarsets"], "verbs": verbs})
        };
        let role = |watch: bool| {
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": USER},
                "rules": [
                    {"apiGroups": ["", "apps", "batch", "policy", "coordination.k8s.io",
                        "admissionregistration.k8s.io", "apiextensions.k8s.io", "events.k8s.io",
                        "storage.k8s.io", "authorization.k8s.io"],
                     "resources": ["*"], "verbs": ["*"]},
                    {"apiGroups": ["apps.kruise.io"],
                     "resources": ["clonesets", "clonesets/status", "clonesets/scale",
                        "statefulsets", "statefulsets/status", "statefulsets/scale", "daemonsets",
                        "daemonsets/status", "broadcastjobs", "broadcastjobs/status",
                        "uniteddeployments", "uniteddeployments/status", "uniteddeployments/scale",
                        "sidecarsets/status", "advancedcronjobs", "advancedcronjobs/status",
                        "ephemeraljobs", "ephemeraljobs/status", "resourcedistributions",
                        "resourcedistributions/status", "workloadspreads", "workloadspreads/status",
                        "persistentpodstates", "persistentpodstates/status",
                        "containerrecreaterequests", "containerrecreaterequests/status",
                        "podprobemarkers", "podprobemarkers/status", "nodepodprobes",
                        "nodepodprobes/status"],
                     "verbs": ["*"]},
                    {"apiGroups": ["policy.kruise.io"], "resources": ["*"], "verbs": ["*"]},
                    sidecarset_verbs(watch),
                ]
            })
        };
        ns.apply(&role(true).to_string()).await?;
        ns.apply(
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": USER},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
            })
            .to_string(),
        )
        .await?;
        // The admin's token, impersonating the limited user.
        let kubeconfig = bed.plane.dir().join(format!("{USER}.kubeconfig"));
        let yaml = bed
            .plane
            .kubeconfig_yaml()
            .replace("\n    token: ", &format!("\n    as: {USER}\n    token: "));
        std::fs::write(&kubeconfig, yaml)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        let replica = manager::spawn(
            &bed.plane,
            &ManagerOptions {
                name: "manager-stale".into(),
                leader_election_id: "kruise-manager-stale".into(),
                lease_seconds: LEASE_SECONDS,
                kubeconfig: Some(kubeconfig),
                extra_args: vec![
                    "--watch-timeout-seconds=8".into(),
                    "--watch-stale-seconds=15".into(),
                ],
            },
        )?;
        manager::wait_serving(&bed.plane, &replica, Duration::from_secs(90)).await?;
        ensure!(leads(&replica).await?, "the replica leads");

        let roles: Api<ClusterRole> = Api::all(ns.client.clone());
        let revoked = Instant::now();
        roles
            .patch(USER, &PatchParams::default(), &Patch::Merge(&json!({"rules": role(false)["rules"]})))
            .await?;
        let stepped_down = eventually(
            "a stale-watch step-down",
            Duration::from_secs(90),
            || async {
                Ok((sample(&replica, "kruise_manager_stale_watch_stepdowns_total").await >= 1.0)
                    .then(|| revoked.elapsed()))
            },
        )
        .await?;
        let (code, why) = eventually("/readyz 503", Duration::from_secs(60), || async {
            let (code, body) = http_get(replica.health, "/readyz").await?;
            Ok((code == 503).then_some((code, body)))
        })
        .await?;
        ensure!(
            why.contains("sidecarsets"),
            "/readyz {code} should name the stale SidecarSet watch: {why:?}"
        );
        let unready = revoked.elapsed();
        let log = std::fs::read_to_string(bed.plane.dir().join("manager-stale.log"))?;
        ensure!(
            log.contains("stepping down") && log.contains("sidecarsets"),
            "the manager's log names the stale watch"
        );

        roles
            .patch(USER, &PatchParams::default(), &Patch::Merge(&json!({"rules": role(true)["rules"]})))
            .await?;
        let restored = Instant::now();
        eventually("ready and leading again", Duration::from_secs(90), || async {
            Ok((ready(&replica).await && leads(&replica).await?).then_some(()))
        })
        .await?;
        println!(
            "stale watches (watch timeout 8 s, stale after 15 s): step-down {:.1} s and /readyz 503 \
             {:.1} s after `watch` was revoked ({why}); ready and leading {:.1} s after it was restored",
            stepped_down.as_secs_f64(),
            unready.as_secs_f64(),
            restored.elapsed().as_secs_f64()
        );
        bed.plane.stop_process("manager-stale", true);
        roles.delete(USER, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}

/// A leader that loses its lease, or is stopped with SIGTERM, while its controllers have
/// reconciles in flight stops them quietly: they finish what is in flight, the manager logs at info
/// what it stopped, and nothing panics (kube's controller used to unwrap the reconcile its term's
/// runtime had cancelled under it) and no controller's end is logged as an error.
#[tokio::test]
async fn a_step_down_with_reconciles_in_flight_stops_the_controllers_quietly() -> anyhow::Result<()>
{
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use kruise_e2e::cloneset_kit::{active_pods, apply, cloneset, merge_patch};
    use kube::api::{Patch, PatchParams};
    use serde_json::json;

    const STOPPED: &str = "leader term ended: controllers stopped";
    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("quiet-stop").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let replica = manager::spawn(
            &bed.plane,
            &ManagerOptions {
                name: "manager-quiet".into(),
                leader_election_id: "kruise-manager-quiet".into(),
                lease_seconds: LEASE_SECONDS,
                ..Default::default()
            },
        )?;
        manager::wait_serving(&bed.plane, &replica, Duration::from_secs(90)).await?;
        ensure!(leads(&replica).await?, "the replica leads");
        let log_path = bed.plane.dir().join("manager-quiet.log");
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();

        // Work in flight: three CloneSets scaling up at once, the lease taken from under them as
        // soon as their first Pods show.
        for name in ["quiet-a", "quiet-b", "quiet-c"] {
            apply(&ns, &cloneset(name, 10, "nginx:alpine", json!({}))).await?;
        }
        eventually("the first Pods", Duration::from_secs(60), || async {
            Ok((!active_pods(&pods, "app in (quiet-a,quiet-b,quiet-c)")
                .await?
                .is_empty())
            .then_some(()))
        })
        .await?;
        let leases: Api<Lease> = Api::namespaced(ns.client.clone(), manager::NAMESPACE);
        leases
            .patch(
                "kruise-manager-quiet",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {
                    "holderIdentity": "someone-else",
                    "renewTime": MicroTime(jiff::Timestamp::now()),
                }})),
            )
            .await?;
        eventually("the step-down", Duration::from_secs(30), || async {
            Ok(log().contains(STOPPED).then_some(()))
        })
        .await
        .with_context(|| bed.plane.log_tails(30))?;

        // The other holder never renews: the replica leads again once the lease expires. Then
        // more work, and SIGTERM in the middle of it.
        eventually(
            "leading again",
            Duration::from_secs(LEASE_SECONDS * 4),
            || async { Ok(leads(&replica).await?.then_some(())) },
        )
        .await?;
        for name in ["quiet-a", "quiet-b", "quiet-c"] {
            merge_patch(&ns, "cloneset", name, &json!({"spec": {"replicas": 20}})).await?;
        }
        let before = active_pods(&pods, "app in (quiet-a,quiet-b,quiet-c)")
            .await?
            .len();
        eventually("more Pods", Duration::from_secs(60), || async {
            Ok((active_pods(&pods, "app in (quiet-a,quiet-b,quiet-c)")
                .await?
                .len()
                > before)
                .then_some(()))
        })
        .await?;
        bed.plane.stop_process("manager-quiet", false);

        let log = log();
        let stops: Vec<&str> = log.lines().filter(|l| l.contains(STOPPED)).collect();
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("panicked") || l.contains("controller's task"))
            .collect();
        println!(
            "controllers stopped quietly twice (lease lost, then SIGTERM):\n{}",
            stops.join("\n")
        );
        ensure!(
            errors.is_empty(),
            "no panic and no controller's task failure expected in the manager's log:\n{}",
            errors.join("\n")
        );
        ensure!(
            stops.len() == 2,
            "one '{STOPPED}' line per term expected (lease lost, SIGTERM), found {}:\n{}",
            stops.len(),
            stops.join("\n")
        );
        ensure!(
            log.lines().any(|l| l.contains("shutting down")),
            "the SIGTERM is logged"
        );
        Ok(())
    })
    .await
}

/// A leader paused (SIGSTOP) in the middle of a SidecarSet upgrade while its Pods change, then
/// resumed (once within its lease, once past it), finishes the upgrade, and a Pod write of its
/// whose precondition failed (a JSON patch `test`: 422, a resourceVersion: 409) is decided again
/// quietly: none is logged as a warning or a failed reconcile. The refused writes the audit log
/// shows are printed.
#[tokio::test]
async fn a_resumed_leader_does_not_fail_its_pod_writes() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kruise_api::sidecarset::v1beta1::SidecarSet;
    use kruise_e2e::audited_writes;
    use kruise_e2e::sidecarset_kit::{apply_logtail, counts, set_image, test_pod, wait_status};
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    let _alone = ONE_AT_A_TIME.lock().await;
    let bed = testbed();
    let ns = bed.namespace("resumed").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let replica = manager::spawn(
            &bed.plane,
            &ManagerOptions {
                name: "manager-resumed".into(),
                leader_election_id: "kruise-manager-resumed".into(),
                lease_seconds: LEASE_SECONDS,
                kubeconfig: Some(replica_kubeconfig(2, &bed.plane.server_url())?),
                ..Default::default()
            },
        )?;
        manager::wait_serving(&bed.plane, &replica, Duration::from_secs(90)).await?;
        let labels = json!({"app": "resumed"});
        let name = format!("{}-resumed", ns.name);
        apply_logtail(&ns, &name, &labels, json!({})).await?;
        let pods: Api<Pod> = ns.api();
        const PODS: usize = 4;
        for i in 0..PODS {
            let pod: Pod =
                serde_json::from_value(test_pod(&format!("resumed-{i}"), labels.clone()))?;
            pods.create(&PostParams::default(), &pod).await?;
        }
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let n = PODS as i32;
        wait_status(
            &sidecarsets,
            &name,
            "all Pods ready",
            Duration::from_secs(90),
            |s| counts(s) == (n, n, n, n),
        )
        .await?;

        let since = jiff::Timestamp::now();
        set_image(&sidecarsets, &name, "log-service/logtail:v2").await?;
        for (pause, round) in [(Duration::from_secs(3), 0), (Duration::from_secs(10), 1)] {
            let pid = bed
                .plane
                .pids()
                .into_iter()
                .find_map(|(process, pid)| (process == "manager-resumed").then_some(pid))
                .context("the manager's pid")?;
            kruise_testkit::process::signal(pid, libc::SIGSTOP);
            // Pods change while the leader cannot see it: labels (every Pod's resourceVersion)
            // and, through kubelet-sim, their status.
            for i in 0..PODS {
                pods.patch(
                    &format!("resumed-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"labels": {"round": round.to_string()}}})),
                )
                .await?;
            }
            tokio::time::sleep(pause).await;
            kruise_testkit::process::signal(pid, libc::SIGCONT);
            if round == 0 {
                // The second pause comes while the rollout is still going on.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        wait_status(
            &sidecarsets,
            &name,
            "all Pods upgraded",
            Duration::from_secs(120),
            |s| counts(s) == (n, n, n, n),
        )
        .await?;

        let failed: Vec<String> = audited_writes("manager-2", since)?
            .into_iter()
            .filter(|w| w.resource == "pods" && matches!(w.code, 409 | 422))
            .map(|w| w.line)
            .collect();
        let log = std::fs::read_to_string(bed.plane.dir().join("manager-resumed.log"))?;
        let logged: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .filter(|l| {
                l.contains("reconcile failed") || l.contains("code: 422") || l.contains("code: 409")
            })
            // This test's objects only (their names carry the namespace): the namespaces of the
            // tests before it may still be terminating, and writes there are refused.
            .filter(|l| l.contains(ns.name.as_str()))
            .collect();
        println!(
            "resumed leader: {} Pod writes refused on a precondition:\n{}\nlogged:\n{}",
            failed.len(),
            failed.join("\n"),
            logged.join("\n")
        );
        bed.plane.stop_process("manager-resumed", false);
        ensure!(
            logged.is_empty(),
            "no failed reconcile or refused write expected in the manager's log:\n{}",
            logged.join("\n")
        );
        Ok(())
    })
    .await
}
