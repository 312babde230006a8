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

use futures::future::BoxFuture;
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::testbed::crd_dir;

/// Starts a control plane with the apps.kruise.io CRDs, runs `bench` on it, prints the tail of every
/// component's log if the bench fails, and stops the control plane.
pub async fn on_control_plane(
    bench: impl for<'p> FnOnce(&'p ControlPlane) -> BoxFuture<'p, anyhow::Result<()>>,
) -> anyhow::Result<()> {
    on_control_plane_with(Options::default(), bench).await
}

/// [`on_control_plane`] with the control plane's `options` (kruise-rs's CRDs unless `options`
/// name others: OpenKruise's, for a side-by-side run, which cannot replace kruise-rs's once these
/// stored objects at v1beta1).
pub async fn on_control_plane_with(
    options: Options,
    bench: impl for<'p> FnOnce(&'p ControlPlane) -> BoxFuture<'p, anyhow::Result<()>>,
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
