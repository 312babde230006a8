//! kruise-rs installed on real nodes as users install it: its images pushed under the chart's default
//! names, `helm install` of the chart with its default values, and the wait for what the chart runs
//! (both manager replicas and a kruise-daemon per node Ready, from those images). `tests/installed.rs`
//! and `kruise-local up --chart` share it. The bed needs the real nodes' in-cluster network
//! ([`crate::BedShape::in_cluster_network`]).

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::control_plane::ControlPlane;
use crate::realnode::kruise_images::Pushed;

/// The release name (OpenKruise's docs install `kruise`; any name works, the objects' names are fixed).
pub const RELEASE: &str = "kruise-rs";
/// The chart, relative to the repository root (where helm runs).
pub const CHART: &str = "charts/kruise-rs";
/// The chart's default `installation.namespace`.
pub const SYSTEM: &str = "kruise-system";
/// The chart's default `manager.replicas`.
pub const MANAGER_REPLICAS: usize = 2;
/// The manager Pods' labels (OpenKruise's).
pub const MANAGER_SELECTOR: &str = "control-plane=controller-manager";
/// The kruise-daemon Pods' labels (OpenKruise's).
pub const DAEMON_SELECTOR: &str = "control-plane=daemon";

/// helm against `plane` (release records in `default`), in the repository root.
pub fn helm(plane: &ControlPlane, args: &[&str]) -> anyhow::Result<String> {
    let kubeconfig = plane.kubeconfig_path().to_string_lossy().into_owned();
    let mut all = args.to_vec();
    all.extend(["--namespace", "default", "--kubeconfig", &kubeconfig]);
    crate::helm::run(&all)
}

/// What [`install`] brought up.
pub struct Installed {
    pub manager_image: Pushed,
    pub daemon_image: Pushed,
    pub managers: Vec<Pod>,
    pub daemons: Vec<Pod>,
    /// From `helm install` to every Pod Ready.
    pub ready_in: Duration,
}

/// Installs the chart with its default values and waits until both manager replicas and one
/// kruise-daemon per node (`nodes`) are Ready from the `images` [`kruise_images::push`] pushed.
pub async fn install(
    plane: &ControlPlane,
    images: [Pushed; 2],
    nodes: usize,
    timeout: Duration,
) -> anyhow::Result<Installed> {
    install_chart(plane, RELEASE, CHART, &[], images, nodes, timeout).await
}

/// `helm install <release> <chart>` with `set` (`--set` values, none for the defaults), then the same
/// wait as [`install`] for the manager's and the daemon's Pods of a chart laid out as OpenKruise's (its
/// labels, namespace and two manager replicas: kruise-rs's chart and OpenKruise's own).
pub async fn install_chart(
    plane: &ControlPlane,
    release: &str,
    chart: &str,
    set: &[&str],
    images: [Pushed; 2],
    nodes: usize,
    timeout: Duration,
) -> anyhow::Result<Installed> {
    let [manager_image, daemon_image] = images;
    let started = Instant::now();
    let mut args = vec!["install", release, chart];
    for value in set {
        args.extend(["--set", value]);
    }
    tokio::task::block_in_place(|| helm(plane, &args))
        .with_context(|| format!("helm install {release} {chart} {set:?}"))?;
    let client = plane.client().await?;
    let managers = wait_ready(
        &client,
        MANAGER_SELECTOR,
        MANAGER_REPLICAS,
        &manager_image,
        timeout,
    )
    .await?;
    let daemons = wait_ready(&client, DAEMON_SELECTOR, nodes, &daemon_image, timeout).await?;
    Ok(Installed {
        manager_image,
        daemon_image,
        managers,
        daemons,
        ready_in: started.elapsed(),
    })
}

/// The Pods of `selector` in the chart's namespace that are not terminating, by name.
pub async fn system_pods(client: &kube::Client, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), SYSTEM);
    let mut pods = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(pods)
}

/// Waits until exactly `count` Pods of `selector` run Ready from `image` (its digest: the image pushed,
/// not another one of that name).
pub async fn wait_ready(
    client: &kube::Client,
    selector: &str,
    count: usize,
    image: &Pushed,
    timeout: Duration,
) -> anyhow::Result<Vec<Pod>> {
    crate::wait::eventually(
        format!("{count} Pods {selector} Ready from {}", image.reference),
        timeout,
        || async {
            let pods = system_pods(client, selector).await?;
            let ready = pods.len() == count
                && pods.iter().all(|pod| {
                    kruise_core::pods::is_ready(pod) && runs_image(pod, &image.manifest_digest)
                });
            Ok(ready.then_some(pods))
        },
    )
    .await
}

/// Whether every container of `pod` runs the image of `digest` (the runtime's `imageID` ends with it).
fn runs_image(pod: &Pod, digest: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|statuses| {
            !statuses.is_empty() && statuses.iter().all(|c| c.image_id.ends_with(digest))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

    fn pod_with(image_ids: &[&str]) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(
                    image_ids
                        .iter()
                        .map(|id| ContainerStatus {
                            image_id: id.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_runs_the_image_when_every_container_reports_its_digest() {
        let digest = "sha256:abc";
        let cases = [
            (vec!["docker.io/kruise-rs/kruise-manager@sha256:abc"], true),
            (vec!["docker.io/kruise-rs/kruise-manager@sha256:def"], false),
            (vec!["x@sha256:abc", ""], false),
            (vec![], false),
        ];
        for (ids, want) in cases {
            assert_eq!(runs_image(&pod_with(&ids), digest), want, "{ids:?}");
        }
    }
}
