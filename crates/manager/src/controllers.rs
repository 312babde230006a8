//! The leader's controllers: one line of [`CONTROLLERS`] each — its name, the gate it runs behind
//! and how it starts from the command line — and [`run`], which starts those whose gate is on, each
//! on a task of its own, over one set of shared caches, and stops them with the term.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kruise_controllers::driver::caches::{Caches, ProcessCaches};
use kruise_controllers::driver::registry::Registry;
use kruise_controllers::driver::stop::Stop;
use kruise_controllers::metrics::Metrics;
use kube::Client;

use crate::Args;
use crate::features::{FeatureGates, Gate};

/// What a controller is started from, for one leadership term.
pub struct Term<'a> {
    pub args: &'a Args,
    pub gates: &'a FeatureGates,
    pub client: Client,
    pub caches: Caches,
    pub metrics: Arc<Metrics>,
}

impl Term<'_> {
    fn expectation_timeout(&self) -> Duration {
        Duration::from_secs(self.args.expectation_timeout_seconds.max(1))
    }
}

/// One controller of the leader.
pub struct Controller {
    /// Its task's name in logs.
    pub name: &'static str,
    /// The feature gate it runs behind (`None`: always, as in OpenKruise v1.9.0).
    pub gate: Option<Gate>,
    /// Its future, built from the command line and the term's caches.
    pub start: fn(&Term<'_>) -> BoxFuture<'static, ()>,
}

/// Every controller of the leader, each registered once.
pub const CONTROLLERS: &[Controller] = &[
    Controller {
        name: "cloneset",
        gate: None,
        start: |t| {
            let gates = t.gates;
            Box::pin(kruise_controllers::cloneset::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::cloneset::Config {
                    workers: t.args.cloneset_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                    settings: kruise_controllers::cloneset::Settings {
                        exclude_preparing_delete: t.args.cloneset_scaling_exclude_preparing_delete,
                        // Pods/resize is GA-track on our v1.34 control plane: offered without a gate.
                        resize: true,
                        env_from_metadata: gates.enabled(Gate::InPlaceUpdateEnvFromMetadata),
                        gates: kruise_core::rollout::cloneset::Gates {
                            preparing_update_as_update: gates
                                .enabled(Gate::PreparingUpdateAsUpdate),
                            partition_rollback: gates.enabled(Gate::CloneSetPartitionRollback),
                            short_hash: gates.enabled(Gate::CloneSetShortHash),
                            recreate_on_vct_change: gates
                                .enabled(Gate::RecreatePodWhenChangeVCTInCloneSetGate),
                        },
                    },
                    pre_download: gates.enabled(Gate::PreDownloadImageForInPlaceUpdate),
                },
            ))
        },
    },
    Controller {
        name: "statefulset",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::statefulset::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::statefulset::Config {
                    workers: t.args.statefulset_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                    resize: true,
                    env_from_metadata: t.gates.enabled(Gate::InPlaceUpdateEnvFromMetadata),
                },
            ))
        },
    },
    Controller {
        name: "sidecarset",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::sidecarset::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::sidecarset::Config {
                    workers: t.args.sidecarset_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                    excluded_namespaces: vec![t.args.namespace.clone()],
                    namespace: t.args.namespace.clone(),
                },
            ))
        },
    },
    Controller {
        name: "daemonset",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::daemonset::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::daemonset::Config {
                    workers: t.args.daemonset_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                    resize: true,
                    env_from_metadata: t.gates.enabled(Gate::InPlaceUpdateEnvFromMetadata),
                    prune_ineligible_nodes: t.gates.enabled(Gate::DaemonSetPruneIneligibleNodes),
                    pre_download: t.gates.enabled(Gate::PreDownloadImageForDaemonSetUpdate),
                },
            ))
        },
    },
    Controller {
        name: "broadcastjob",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::broadcastjob::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::broadcastjob::Config {
                    workers: t.args.broadcastjob_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                    assign_by_scheduler: t.args.assign_bcj_pods_by_scheduler,
                },
            ))
        },
    },
    Controller {
        name: "uniteddeployment",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::uniteddeployment::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::uniteddeployment::Config {
                    workers: t.args.uniteddeployment_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                },
            ))
        },
    },
    Controller {
        name: "advancedcronjob",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::advancedcronjob::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::advancedcronjob::Config {
                    workers: t.args.advancedcronjob_workers.max(1),
                    ..Default::default()
                },
            ))
        },
    },
    // Container launch priority has no gate in OpenKruise: the Pod webhook holds the containers of
    // a Pod that asks for an order; this controller releases them.
    Controller {
        name: "container launch priority",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::launchpriority::run(
                t.client.clone(),
                t.caches.pods.clone(),
            ))
        },
    },
    // With KruisePodReadinessGate every new Pod waits on KruisePodReady: this controller sets it.
    Controller {
        name: "pod readiness",
        gate: Some(Gate::KruisePodReadinessGate),
        start: |t| {
            Box::pin(kruise_controllers::podreadiness::run(
                t.client.clone(),
                t.caches.pods.clone(),
            ))
        },
    },
    Controller {
        name: "podunavailablebudget",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::podunavailablebudget::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::podunavailablebudget::Config {
                    workers: t.args.podunavailablebudget_workers.max(1),
                },
            ))
        },
    },
    Controller {
        name: "resourcedistribution",
        gate: Some(Gate::ResourceDistributionGate),
        start: |t| {
            Box::pin(kruise_controllers::resourcedistribution::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::resourcedistribution::Config {
                    workers: t.args.resourcedistribution_workers.max(1),
                },
            ))
        },
    },
    // PersistentPodState has no feature gate in v1.9.0: it runs whenever the manager does.
    Controller {
        name: "persistentpodstate",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::persistentpodstate::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::persistentpodstate::Config {
                    workers: t.args.persistentpodstate_workers.max(1),
                },
            ))
        },
    },
    Controller {
        name: "sidecarterminator",
        gate: Some(Gate::SidecarTerminator),
        start: |t| {
            Box::pin(kruise_controllers::sidecarterminator::run(
                t.client.clone(),
                t.caches.pods.clone(),
                t.args.sidecarterminator_workers,
            ))
        },
    },
    Controller {
        name: "containerrecreaterequest",
        gate: Some(Gate::KruiseDaemon),
        start: |t| {
            Box::pin(kruise_controllers::containerrecreaterequest::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                t.args.crr_workers,
            ))
        },
    },
    Controller {
        name: "imagepulljob",
        gate: Some(Gate::ImagePullJobGate),
        start: |t| {
            Box::pin(kruise_controllers::imagepulljob::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::imagepulljob::Config {
                    default_ttl_always: t.args.default_ttl_for_always_nodeimage().unwrap_or(
                        kruise_controllers::imagepulljob::Config::default().default_ttl_always,
                    ),
                    workers: t.args.imagepulljob_workers,
                    nodeimage_workers: t.args.nodeimage_workers,
                    ..Default::default()
                },
            ))
        },
    },
    Controller {
        name: "workloadspread",
        gate: Some(Gate::WorkloadSpread),
        start: |t| {
            Box::pin(kruise_controllers::workloadspread::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::workloadspread::Config {
                    configuration_namespace: t.args.namespace.clone(),
                    workers: t.args.workloadspread_workers.max(1),
                },
            ))
        },
    },
    Controller {
        name: "podprobemarker",
        gate: Some(Gate::PodProbeMarkerGate),
        start: |t| {
            Box::pin(kruise_controllers::podprobemarker::run_all(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                t.gates.enabled(Gate::KruiseDaemon),
                t.gates.enabled(Gate::EnablePodProbeMarkerOnServerless),
                kruise_controllers::podprobemarker::Workers {
                    markers: t.args.podprobemarker_workers,
                    node_probes: t.args.nodepodprobe_workers,
                },
            ))
        },
    },
    Controller {
        name: "ephemeraljob",
        gate: None,
        start: |t| {
            Box::pin(kruise_controllers::ephemeraljob::run(
                t.client.clone(),
                t.caches.clone(),
                t.metrics.clone(),
                kruise_controllers::ephemeraljob::Config {
                    workers: t.args.ephemeraljob_workers.max(1),
                    expectation_timeout: t.expectation_timeout(),
                },
            ))
        },
    },
];

/// Runs the controllers of [`CONTROLLERS`] whose gate is on, for one term, on the term's caches
/// (`registry`, over the process's): until the term is stopped, or until one of them returns,
/// which ends the term.
pub async fn run(
    args: &Args,
    client: Client,
    metrics: Arc<Metrics>,
    registry: Registry,
    process_caches: ProcessCaches,
    stop: Stop,
) {
    let gates = args.gates();
    let (caches, pod_cache) = Caches::start(client.clone(), registry, process_caches);
    let term = Term {
        args,
        gates,
        client,
        caches,
        metrics,
    };
    // Each on a task of its own: the watch decoding Pods and the reconciles of different
    // controllers then run on every thread of the leader's runtime instead of taking turns on one
    // (a single joined future is polled by one thread at a time).
    let mut work = Tasks::new(stop);
    work.spawn("shared caches", pod_cache);
    let mut started = Vec::new();
    for controller in CONTROLLERS {
        if controller.gate.is_none_or(|gate| gates.enabled(gate)) {
            work.spawn(controller.name, (controller.start)(&term));
            started.push(controller.name);
        }
    }
    tracing::info!(
        ?started,
        cloneset_workers = args.cloneset_workers,
        statefulset_workers = args.statefulset_workers,
        sidecarset_workers = args.sidecarset_workers,
        daemonset_workers = args.daemonset_workers,
        broadcastjob_workers = args.broadcastjob_workers,
        uniteddeployment_workers = args.uniteddeployment_workers,
        advancedcronjob_workers = args.advancedcronjob_workers,
        persistentpodstate_workers = args.persistentpodstate_workers,
        podunavailablebudget_workers = args.podunavailablebudget_workers,
        resourcedistribution_workers = args.resourcedistribution_workers,
        ephemeraljob_workers = args.ephemeraljob_workers,
        "controllers started"
    );
    work.run().await;
}

/// The tasks of one term's controllers, each on a task of its own: the watch decoding Pods and
/// the reconciles of different controllers then run on every thread of the leader's runtime
/// instead of taking turns on one (a single joined future is polled by one thread at a time).
struct Tasks {
    work: tokio::task::JoinSet<&'static str>,
    names: Vec<&'static str>,
    stop: kruise_controllers::driver::stop::Stop,
}

impl Tasks {
    fn new(stop: kruise_controllers::driver::stop::Stop) -> Self {
        Self {
            work: tokio::task::JoinSet::new(),
            names: Vec::new(),
            stop,
        }
    }

    /// Spawns `work` in the term's scope, so that the controllers in it stop with the term.
    fn spawn(&mut self, name: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        self.names.push(name);
        self.work.spawn(self.stop.scope(async move {
            work.await;
            name
        }));
    }

    /// Runs until the term is stopped or a task ends by itself, then stops the rest.
    async fn run(mut self) {
        // None of them returns while the term lasts: one that does (or panics) ends the term, so
        // the leader steps down and runs again instead of leading with a controller missing.
        let mut ended = Vec::new();
        tokio::select! {
            biased;
            () = self.stop.requested() => {}
            joined = self.work.join_next() => match joined {
                // Its controller saw the stop before this task did: a step-down, not a failure.
                Some(Ok(name)) if self.stop.is_requested() => ended.push(name),
                Some(Ok(name)) => {
                    tracing::error!(task = name, "a controller's task returned");
                    ended.push(name);
                }
                Some(Err(error)) => tracing::error!(%error, "a controller's task failed"),
                None => return,
            },
        }
        self.stop(ended).await;
    }

    /// Stops every task of the term: the controllers finish the reconciles they have in flight
    /// (at most [`STOP_GRACE`](crate::STOP_GRACE)), then everything left — the caches, the Pod workers, a reconcile
    /// past the grace — is cancelled, before the term's runtime is shut down. Logs at info the
    /// reconciles that were in flight, the tasks that ended and those cancelled. `ended`: the
    /// tasks that already have.
    async fn stop(mut self, mut ended: Vec<&'static str>) {
        self.stop.request();
        let in_flight: Vec<String> = self
            .stop
            .in_flight()
            .into_iter()
            .map(|(controller, n)| format!("{controller}: {n}"))
            .collect();
        let started = std::time::Instant::now();
        let drained = tokio::time::timeout(crate::STOP_GRACE, self.stop.drained())
            .await
            .is_ok();
        let unfinished = self.stop.running();
        while let Some(joined) = self.work.try_join_next() {
            match joined {
                Ok(name) => ended.push(name),
                Err(error) if error.is_panic() => {
                    tracing::error!(%error, "a controller's task failed while stopping");
                }
                Err(_) => {}
            }
        }
        let cancelled: Vec<&str> = self
            .names
            .iter()
            .copied()
            .filter(|name| !ended.contains(name))
            .collect();
        self.work.abort_all();
        while let Some(joined) = self.work.join_next().await {
            if let Err(error) = joined
                && error.is_panic()
            {
                tracing::error!(%error, "a controller's task failed while stopping");
            }
        }
        tracing::info!(
            ?in_flight,
            ?ended,
            ?cancelled,
            waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "leader term ended: controllers stopped after their reconciles in flight"
        );
        if !drained {
            tracing::warn!(
                ?unfinished,
                grace_seconds = crate::STOP_GRACE.as_secs(),
                "reconciles still running after the grace period were cancelled"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CONTROLLERS;
    use kruise_core::features::GATES;

    /// Every kind of `kruise_api::crd::SERVED` is run by the controller row its line names, behind
    /// the gate its line names (a gate that does not exist fails here too), and every row name is
    /// unique.
    #[test]
    fn every_served_kind_has_its_controller_row_behind_its_gate() {
        for served in kruise_api::crd::SERVED {
            let row = CONTROLLERS
                .iter()
                .find(|c| c.name == served.controller)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: no controller row named {:?} in CONTROLLERS",
                        served.kind, served.controller
                    )
                });
            let gate = served.gate.map(|name| {
                GATES
                    .iter()
                    .map(|g| g.gate)
                    .find(|g| g.name() == name)
                    .unwrap_or_else(|| panic!("{}: no gate named {name}", served.kind))
            });
            assert_eq!(
                row.gate, gate,
                "{}: the gate of its controller",
                served.kind
            );
        }
        let mut names: Vec<&str> = CONTROLLERS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "a controller row name twice");
    }
}
