//! Helpers shared by the scale benches (`testbed-scale`, `cloneset-scale`, `sidecarset-scale`): the
//! kubelet-sim child process, kruise-manager, Prometheus text from the apiserver and the manager,
//! quantiles, CPU and memory figures. The benches print figures; nothing here asserts about time.

pub mod admission;
pub mod apiserver;
pub mod daemon;
pub mod floor;
pub mod manager;
pub mod process;
pub mod prom;
pub mod sim;
pub mod stats;

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::testbed::crd_dir;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// The namespace the workload benches (CloneSet, Advanced StatefulSet and DaemonSet, BroadcastJob,
/// UnitedDeployment) create their workload in: one name, so their figures and logs read alike.
pub const NAMESPACE: &str = "bench";

/// How long a workload bench waits for a create or a rollout to finish before it gives up: one
/// bound for every bench, generous enough for 10,000 Pods on 2 cores.
pub const TIMEOUT: Duration = Duration::from_secs(1800);

/// Starts a control plane with the apps.kruise.io CRDs, runs `bench` on it, prints the tail of every
/// component's log if the bench fails, and stops the control plane.
pub async fn on_control_plane(
    bench: impl AsyncFnOnce(&ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    on_control_plane_with(Options::default(), bench).await
}

/// [`on_control_plane`] with the control plane's `options` (kruise-rs's CRDs unless `options`
/// name others: OpenKruise's, for a side-by-side run, which cannot replace kruise-rs's once these
/// stored objects at v1beta1).
pub async fn on_control_plane_with(
    options: Options,
    bench: impl AsyncFnOnce(&ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let plane = ControlPlane::start(Options {
        crd_dir: options.crd_dir.clone().or_else(|| Some(crd_dir())),
        ..options
    })
    .await?;
    let result = bench(&plane).await;
    if result.is_err() {
        eprintln!("{}", plane.log_tails(30));
    }
    plane.stop();
    result
}

/// Whether a CloneSet's status reports `replicas` Pods, all updated and Ready, at its current
/// generation: a rollout (or a create) is over.
pub fn cloneset_rolled_out(cs: &kruise_api::cloneset::v1beta1::CloneSet, replicas: i32) -> bool {
    let Some(s) = cs.status.as_ref() else {
        return false;
    };
    cs.metadata.generation == Some(s.observed_generation)
        && s.replicas == replicas
        && s.updated_replicas == replicas
        && s.updated_ready_replicas == replicas
}

/// Creates the namespace `name` with `labels` (`Value::Null` for none). Every bench makes its own
/// namespace before its workload; one helper, so each does it with the same error context.
pub async fn create_namespace(client: &Client, name: &str, labels: Value) -> anyhow::Result<()> {
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Prints how many Pods of `namespace` matching `selector` were restarted once, i.e. updated in
/// place (a recreated Pod starts again at 0). The in-place benches (CloneSet, Advanced
/// StatefulSet, UnitedDeployment) print this line after their in-place rollout, worded the same.
pub async fn print_updated_in_place(
    client: &Client,
    namespace: &str,
    selector: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let restarted = pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.restart_count == 1))
        })
        .count();
    println!("  Pods updated in place (restartCount 1): {restarted}");
    Ok(())
}
