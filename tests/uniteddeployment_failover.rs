//! A UnitedDeployment rollout over CloneSet subsets survives its manager being killed (SIGKILL)
//! mid-update: a new manager takes the lease and finishes it, every Pod updated in place exactly once.
//! (Own test binary: it runs and kills its own managers, which own the webhook configurations of this
//! cluster.)

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_e2e::cloneset_kit::{active_pods, name, set_uniteddeployment_image, uid};
use kruise_e2e::same_image;
use kruise_e2e::{container_status, is_ready};
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::{eventually, testbed};
use kube::api::Api;

const LEASE_SECONDS: u64 = 4;
const TIMEOUT: Duration = Duration::from_secs(150);

fn options(name: &str) -> ManagerOptions {
    ManagerOptions {
        name: name.into(),
        leader_election_id: "kruise-manager-ud-failover".into(),
        lease_seconds: LEASE_SECONDS,
        extra_args: Vec::new(),
        ..Default::default()
    }
}

const UD: &str = r#"apiVersion: apps.kruise.io/v1beta1
kind: UnitedDeployment
metadata:
  name: fo
spec:
  replicas: 9
  selector:
    matchLabels: {app: fo}
  template:
    cloneSetTemplate:
      metadata:
        labels: {app: fo}
      spec:
        selector:
          matchLabels: {app: fo}
        template:
          metadata:
            labels: {app: fo}
          spec:
            readinessGates:
              - conditionType: InPlaceUpdateReady
            containers:
              - name: c
                image: nginx:1.25
        updateStrategy:
          type: RollingUpdate
          rollingUpdate:
            podUpdatePolicy: InPlaceIfPossible
            maxUnavailable: 1
            inPlaceUpdateStrategy:
              gracePeriodSeconds: 2
  topology:
    subsets:
      - name: a
        nodeSelectorTerm:
          matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
      - name: b
        nodeSelectorTerm:
          matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}
      - name: c
        nodeSelectorTerm:
          matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-c]}
"#;

async fn pods(api: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    active_pods(api, "app=fo").await
}

fn running(pod: &Pod, image: &str) -> bool {
    is_ready(pod) && container_status(pod, "c").is_some_and(|c| same_image(&c.image, image))
}

#[tokio::test]
async fn uniteddeployment_rollout_survives_a_killed_manager() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("ud-failover").await?;
    ns.run(Box::pin(async {
        manager::ensure_namespace(&bed.plane).await?;
        let first = manager::spawn(&bed.plane, &options("manager-a"))?;
        manager::wait_serving(&bed.plane, &first, Duration::from_secs(90)).await?;
        ns.apply(UD).await?;
        let pod_api: Api<Pod> = ns.api();
        let uds: Api<UnitedDeployment> = ns.api();
        let settled = |image: &'static str| {
            let pod_api = pod_api.clone();
            let uds = uds.clone();
            move || {
                let pod_api = pod_api.clone();
                let uds = uds.clone();
                async move {
                    let list = pods(&pod_api).await?;
                    let u = uds.get("fo").await?;
                    let st = u.status.unwrap_or_default();
                    let done = list.len() == 9
                        && list.iter().all(|p| running(p, image))
                        && st.updated_ready_replicas == 9
                        && st.current_revision == st.updated_revision;
                    Ok(done.then_some(list))
                }
            }
        };
        let before = eventually("9 Pods on nginx:1.25", TIMEOUT, settled("nginx:1.25")).await?;
        set_uniteddeployment_image(&ns, "fo", "nginx:1.26").await?;
        eventually("the rollout under way", TIMEOUT, || async {
            let list = pods(&pod_api).await?;
            let updated = list.iter().filter(|p| running(p, "nginx:1.26")).count();
            Ok((1..9).contains(&updated).then_some(()))
        })
        .await?;
        let snapshot = pods(&pod_api).await?;
        eprintln!(
            "killing manager-a with {} of 9 Pods updated",
            snapshot.iter().filter(|p| running(p, "nginx:1.26")).count()
        );
        bed.plane.stop_process("manager-a", true);

        let second = manager::spawn(&bed.plane, &options("manager-b"))?;
        manager::wait_serving(&bed.plane, &second, Duration::from_secs(90)).await?;
        let after = eventually("9 Pods on nginx:1.26", TIMEOUT, settled("nginx:1.26")).await?;
        let ids = |ps: &[Pod]| ps.iter().map(|p| (name(p), uid(p))).collect::<Vec<_>>();
        anyhow::ensure!(
            ids(&before) == ids(&after),
            "the same Pods, updated in place"
        );
        for pod in &after {
            let restarts = container_status(pod, "c").map(|c| c.restart_count);
            anyhow::ensure!(
                restarts == Some(1),
                "{} restarted {restarts:?} times",
                name(pod)
            );
        }
        bed.plane.stop_process("manager-b", false);
        Ok(())
    }))
    .await
}
