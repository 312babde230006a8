//! A CloneSet or Advanced StatefulSet rollout survives its manager being killed (SIGKILL) mid-update:
//! a new manager takes the lease, picks the rollout up where it stood and finishes it without breaking
//! an invariant or updating a Pod twice. (Own test binary: it runs and kills its own managers, which own
//! the webhook configurations of this cluster; the two scenarios take turns, since each kills the
//! leader.) A third scenario restarts the manager over a settled CloneSet, which must write nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::*;
use kruise_e2e::{is_ready, manager_counts};
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::{Limits, testbed};
use kube::api::Api;
use serde_json::json;

const LEASE_SECONDS: u64 = 4;

/// One scenario at a time: each kills the manager that leads.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn options(name: &str) -> ManagerOptions {
    ManagerOptions {
        name: name.into(),
        leader_election_id: "kruise-manager-failover".into(),
        lease_seconds: LEASE_SECONDS,
        extra_args: Vec::new(),
        ..Default::default()
    }
}

#[tokio::test]
async fn manager_killed_mid_rollout() -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let bed = testbed();
    let ns = bed.namespace("cs-failover").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let first = manager::spawn(&bed.plane, &options("manager-a"))?;
        manager::wait_serving(&bed.plane, &first, Duration::from_secs(90)).await?;

        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible",
            "maxUnavailable": 1,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 2}
        }}});
        apply(&ns, &cloneset("failover", 6, "nginx:alpine", spec)).await?;
        let (_, before) = wait_converged(&ns, "failover", 6, Duration::from_secs(60)).await?;
        let limits = Limits::replicas(6).max_unavailable(1);
        let monitor = ns.rollout_monitor("app=failover", limits).await?;
        set_image(&ns, "failover", "nginx:1.19.1").await?;

        // Mid-update: one Pod done and the next one taken out of service.
        let pod_api: Api<Pod> = ns.api();
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        monitor
            .until(
                "one Pod updated and another being updated",
                Duration::from_secs(60),
                || async {
                    let pods = active_pods(&pod_api, "app=failover").await?;
                    let updated = pods
                        .iter()
                        .filter(|p| {
                            revision(p).is_some_and(|r| !same_revision(r, &rev1)) && is_ready(p)
                        })
                        .count();
                    let in_flight = pods.iter().filter(|p| !is_ready(p)).count();
                    Ok(updated >= 1 && in_flight == 1)
                },
            )
            .await?;
        let snapshot = active_pods(&pod_api, "app=failover").await?;
        eprintln!("killing manager-a at: {}", describe(&snapshot));
        bed.plane.stop_process("manager-a", true);

        let second = manager::spawn(&bed.plane, &options("manager-b"))?;
        manager::wait_serving(&bed.plane, &second, Duration::from_secs(90)).await?;
        let (_, after) =
            monitor_converged(&monitor, &ns, "failover", 6, Duration::from_secs(90)).await?;
        let stats = monitor.finish().await?;
        eprintln!("failover rollout: {stats:?}");
        updated_once_in_place(&before, &after, "nginx:1.19.1")?;
        bed.plane.stop_process("manager-b", false);
        Ok(())
    })
    .await
}

#[tokio::test]
async fn manager_killed_mid_advanced_statefulset_rollout() -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let bed = testbed();
    let ns = bed.namespace("asts-failover").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let first = manager::spawn(&bed.plane, &options("manager-c"))?;
        manager::wait_serving(&bed.plane, &first, Duration::from_secs(90)).await?;

        // Parallel, in place with a grace period, one Pod at a time.
        let doc = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "StatefulSet",
            "metadata": {"name": "sts"},
            "spec": {
                "replicas": 6,
                "serviceName": "sts",
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "sts"}},
                "template": {
                    "metadata": {"labels": {"app": "sts"}},
                    "spec": {
                        "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
                        "containers": [{"name": CONTAINER, "image": "nginx:alpine"}]
                    }
                },
                "updateStrategy": {"rollingUpdate": {
                    "podUpdatePolicy": "InPlaceIfPossible",
                    "maxUnavailable": 1,
                    "inPlaceUpdateStrategy": {"gracePeriodSeconds": 2}
                }}
            }
        });
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let pod_api: Api<Pod> = ns.api();
        let all_on = |image: &'static str| {
            let pod_api = &pod_api;
            move || async move {
                let pods = active_pods(pod_api, "app=sts").await?;
                let done =
                    pods.len() == 6 && pods.iter().all(|p| is_ready(p) && runs_image(p, image));
                Ok(done.then_some(pods))
            }
        };
        let before = kruise_testkit::eventually(
            "6 Ready Pods",
            Duration::from_secs(90),
            all_on("nginx:alpine"),
        )
        .await?;
        let limits = Limits::replicas(6).max_unavailable(1);
        let monitor = ns.rollout_monitor("app=sts", limits).await?;
        set_template_image(&ns, "statefulsets.apps.kruise.io", "sts", "nginx:1.19.1").await?;
        // Mid-update: one Pod done and the next one taken out of service.
        monitor
            .until(
                "one Pod updated and another being updated",
                Duration::from_secs(60),
                || async {
                    let pods = active_pods(&pod_api, "app=sts").await?;
                    let updated = pods
                        .iter()
                        .filter(|p| runs_image(p, "nginx:1.19.1") && is_ready(p))
                        .count();
                    let in_flight = pods.iter().filter(|p| !is_ready(p)).count();
                    Ok(updated >= 1 && in_flight == 1)
                },
            )
            .await?;
        let snapshot = active_pods(&pod_api, "app=sts").await?;
        eprintln!("killing manager-c at: {}", describe(&snapshot));
        bed.plane.stop_process("manager-c", true);

        let second = manager::spawn(&bed.plane, &options("manager-d"))?;
        manager::wait_serving(&bed.plane, &second, Duration::from_secs(90)).await?;
        let after = monitor
            .eventually(
                "6 Pods updated",
                Duration::from_secs(90),
                all_on("nginx:1.19.1"),
            )
            .await?;
        let stats = monitor.finish().await?;
        eprintln!("ASTS failover rollout: {stats:?}");
        let by_name = |pods: &[Pod]| {
            let mut v = pods.to_vec();
            v.sort_by_key(name);
            v
        };
        updated_once_in_place(&by_name(&before), &by_name(&after), "nginx:1.19.1")?;
        bed.plane.stop_process("manager-d", false);
        Ok(())
    })
    .await
}

/// A manager restarted over a settled 200-Pod CloneSet writes nothing (issue 17): once the new manager
/// has reconciled it, and for a hold after, no Pod and not the CloneSet have a new resourceVersion, and
/// the manager counted no Pod operation. (What a manager restart, a leader change or an upgrade of
/// kruise-rs costs a large cluster: a resync must be free.)
#[tokio::test]
async fn restarted_manager_writes_nothing_over_a_settled_cloneset() -> anyhow::Result<()> {
    const REPLICAS: i32 = 200;
    const HOLD: Duration = Duration::from_secs(5);
    let _turn = TURN.lock().await;
    let bed = testbed();
    let ns = bed.namespace("cs-restart").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let first = manager::spawn(&bed.plane, &options("manager-c"))?;
        manager::wait_serving(&bed.plane, &first, Duration::from_secs(90)).await?;
        apply(
            &ns,
            &cloneset("settled", REPLICAS, "nginx:alpine", json!({})),
        )
        .await?;
        let started = std::time::Instant::now();
        wait_converged(&ns, "settled", REPLICAS, Duration::from_secs(240)).await?;
        eprintln!("converged after {:?}", started.elapsed());

        // Settled: nothing written for a whole hold (status counters and conditions final).
        let pod_api: Api<Pod> = ns.api();
        let sets: Api<kruise_api::cloneset::v1beta1::CloneSet> = ns.api();
        let versions = || async {
            let pods: BTreeMap<String, String> = active_pods(&pod_api, "app=settled")
                .await?
                .iter()
                .map(|p| {
                    (
                        name(p),
                        p.metadata.resource_version.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let set = sets.get("settled").await?.metadata.resource_version;
            anyhow::Ok((pods, set))
        };
        let before = kruise_testkit::settled(
            "the CloneSet and its Pods",
            Duration::from_secs(60),
            HOLD,
            versions,
        )
        .await?;
        anyhow::ensure!(before.0.len() == REPLICAS as usize);
        eprintln!("settled after {:?}", started.elapsed());

        bed.plane.stop_process("manager-c", false);
        let second = manager::spawn(&bed.plane, &options("manager-d"))?;
        manager::wait_serving(&bed.plane, &second, Duration::from_secs(90)).await?;
        eprintln!("restarted manager serving after {:?}", started.elapsed());
        kruise_testkit::eventually(
            "the restarted manager reconciled the CloneSet",
            Duration::from_secs(60),
            || async {
                let counts = manager_counts(second.metrics).await?;
                Ok((counts
                    .reconciles
                    .get("cloneset-controller")
                    .copied()
                    .unwrap_or(0)
                    > 0)
                .then_some(()))
            },
        )
        .await?;
        eprintln!("restarted manager reconciled after {:?}", started.elapsed());
        tokio::time::sleep(HOLD).await;

        let after = versions().await?;
        let changed: Vec<&String> = before
            .0
            .iter()
            .filter(|(pod, version)| after.0.get(*pod) != Some(*version))
            .map(|(pod, _)| pod)
            .collect();
        anyhow::ensure!(
            changed.is_empty(),
            "Pods written after the restart: {changed:?}"
        );
        anyhow::ensure!(
            after.1 == before.1,
            "the CloneSet was written after the restart ({:?} → {:?})",
            before.1,
            after.1
        );
        let operations = manager_counts(second.metrics).await?.pod_operations;
        anyhow::ensure!(
            operations == 0,
            "the restarted manager made {operations} Pod operations"
        );
        bed.plane.stop_process("manager-d", false);
        Ok(())
    })
    .await
}

/// An in-place update costs each Pod three manager writes (issue 17), with and without a grace
/// period: the drain (`pods/status`: InPlaceUpdateReady and Ready False), the new image (`pods`) and
/// the finish (`pods/status`: InPlaceUpdateReady True with the lifecycle state back to Normal in the
/// same write). Counted per Pod from the apiserver's audit log, where this manager writes as its own
/// identity.
#[tokio::test]
async fn an_in_place_update_writes_each_pod_three_times() -> anyhow::Result<()> {
    const REPLICAS: i32 = 4;
    const USER: &str = "manager-0";
    let _turn = TURN.lock().await;
    let bed = testbed();
    let ns = bed.namespace("cs-writes").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let kubeconfig = bed.plane.dir().join("manager-e.kubeconfig");
        std::fs::write(
            &kubeconfig,
            bed.plane.kubeconfig_as(0, &bed.plane.server_url())?,
        )?;
        let ports = manager::spawn(
            &bed.plane,
            &ManagerOptions {
                kubeconfig: Some(kubeconfig),
                ..options("manager-e")
            },
        )?;
        manager::wait_serving(&bed.plane, &ports, Duration::from_secs(90)).await?;
        let sets = [("zero", 0), ("grace", 1)];
        for (set, grace) in sets {
            let spec = json!({"updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "maxUnavailable": "100%",
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": grace}
            }}});
            apply(&ns, &cloneset(set, REPLICAS, "nginx:alpine", spec)).await?;
        }
        for (set, _) in sets {
            wait_converged(&ns, set, REPLICAS, Duration::from_secs(90)).await?;
        }

        let since = jiff::Timestamp::now();
        for (set, _) in sets {
            set_image(&ns, set, "nginx:1.19.1").await?;
        }
        let pod_api: Api<Pod> = ns.api();
        let mut updated = BTreeMap::new();
        for (set, _) in sets {
            wait_converged(&ns, set, REPLICAS, Duration::from_secs(90)).await?;
            let pods = kruise_testkit::eventually(
                format!("{set}: every Pod runs nginx:1.19.1, Ready, InPlaceUpdateReady and Normal"),
                Duration::from_secs(60),
                || async {
                    let pods = active_pods(&pod_api, &format!("app={set}")).await?;
                    let done = pods.iter().all(|p| {
                        runs_image(p, "nginx:1.19.1")
                            && is_ready(p)
                            && lifecycle_state(p) == Some("Normal")
                            && kruise_e2e::pod_condition(p, IN_PLACE_UPDATE_READY)
                                .is_some_and(|c| c.status == "True")
                    });
                    Ok((done && pods.len() == REPLICAS as usize).then_some(pods))
                },
            )
            .await?;
            for pod in pods {
                updated.insert(name(&pod), set);
            }
        }
        // Settled: no Pod changes for a while, so no write is still to come.
        kruise_testkit::settled(
            "the updated Pods",
            Duration::from_secs(60),
            Duration::from_secs(3),
            || async {
                let pods = active_pods(&pod_api, "app in (zero,grace)").await?;
                anyhow::Ok(
                    pods.iter()
                        .map(|p| (name(p), p.metadata.resource_version.clone()))
                        .collect::<BTreeMap<_, _>>(),
                )
            },
        )
        .await?;

        let writes: Vec<kruise_e2e::AuditedWrite> = kruise_e2e::audited_writes(USER, since)?
            .into_iter()
            .filter(|w| w.resource == "pods" && w.namespace == ns.name)
            .collect();
        let refused: Vec<&str> = writes
            .iter()
            .filter(|w| !w.took_effect())
            .map(|w| w.line.as_str())
            .collect();
        eprintln!(
            "{} Pod writes took effect, {} were refused: {refused:#?}",
            writes.len() - refused.len(),
            refused.len()
        );
        for (pod, set) in &updated {
            let effective: Vec<&str> = writes
                .iter()
                .filter(|w| &w.name == pod && w.took_effect())
                .map(|w| w.subresource.as_str())
                .collect();
            anyhow::ensure!(
                effective == ["status", "", "status"],
                "{set}/{pod}: the manager's effective writes were {effective:?} (subresources), \
                 not the drain, the image and the finish:\n{:#?}",
                writes
                    .iter()
                    .filter(|w| &w.name == pod)
                    .map(|w| &w.line)
                    .collect::<Vec<_>>()
            );
        }
        bed.plane.stop_process("manager-e", false);
        Ok(())
    })
    .await
}
