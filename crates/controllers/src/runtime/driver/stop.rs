//! How a leader term stops the controllers it runs.
//!
//! kube's `Controller` spawns every reconcile on a task of its own and awaits it through a handle
//! that unwraps the task's outcome: if the runtime under it shuts down while a reconcile is in
//! flight, the controller's stream is polled with a cancelled reconcile and panics. A term therefore
//! never just drops its runtime: it asks its controllers to stop ([`Stop::request`]), each stops
//! starting reconciles and finishes those in flight (`Controller::graceful_shutdown_on`), and only
//! once they are done ([`Stop::drained`], bounded by the caller) is the runtime shut down.
//!
//! The term's [`Stop`] reaches [`super::run`] as a task-local ([`Stop::scope`]): every controller
//! future the manager spawns is scoped with it, so no kind's `run` needs a parameter for it. A
//! controller run outside any scope (a unit test) has no graceful stop.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

tokio::task_local! {
    static TERM: Stop;
}

/// One term's stop signal and the controllers of the driver that run in it.
#[derive(Clone, Debug)]
pub struct Stop {
    requested: Arc<watch::Sender<bool>>,
    running: Arc<watch::Sender<BTreeMap<&'static str, Running>>>,
}

/// One controller's instances running now (a kind may run several: one per generated kind) and
/// their reconciles in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Running {
    instances: usize,
    in_flight: usize,
}

impl Default for Stop {
    fn default() -> Self {
        Self {
            requested: Arc::new(watch::Sender::new(false)),
            running: Arc::new(watch::Sender::new(BTreeMap::new())),
        }
    }
}

impl Stop {
    /// Runs `work` with this stop as its task's term: the controllers [`super::run`] starts in it
    /// stop when it is requested.
    pub fn scope<F: Future>(&self, work: F) -> impl Future<Output = F::Output> + use<F> {
        TERM.scope(self.clone(), work)
    }

    /// The stop of the term the calling task runs in, if any.
    pub(crate) fn current() -> Option<Self> {
        TERM.try_with(Clone::clone).ok()
    }

    /// Asks every controller of the term to stop: no new reconciles, those in flight finish.
    pub fn request(&self) {
        self.requested.send_replace(true);
    }

    pub fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Resolves once a stop is requested. `Send + Sync + 'static`, as kube's graceful shutdown
    /// trigger must be.
    pub fn requested(&self) -> impl Future<Output = ()> + Send + Sync + use<> {
        let mut requested = self.requested.subscribe();
        async move {
            // An error means the sender is gone, which a live `Stop` prevents: stop then too.
            let _ = requested.wait_for(|stop| *stop).await;
        }
    }

    /// Resolves once no controller of the driver runs in this term.
    pub async fn drained(&self) {
        let mut running = self.running.subscribe();
        let _ = running.wait_for(BTreeMap::is_empty).await;
    }

    /// The controllers running now with reconciles in flight, and how many each.
    pub fn in_flight(&self) -> Vec<(&'static str, usize)> {
        self.running
            .borrow()
            .iter()
            .filter(|(_, running)| running.in_flight > 0)
            .map(|(name, running)| (*name, running.in_flight))
            .collect()
    }

    /// The controllers running now.
    pub fn running(&self) -> Vec<&'static str> {
        self.running.borrow().keys().copied().collect()
    }

    /// Counts one instance of `controller` as running until the guard is dropped.
    pub(crate) fn enter(&self, controller: &'static str) -> Guard {
        self.running.send_modify(|running| {
            running.entry(controller).or_default().instances += 1;
        });
        Guard {
            stop: self.clone(),
            controller,
            reconcile: false,
        }
    }

    /// Counts one reconcile of `controller` in flight until the guard is dropped.
    pub(crate) fn reconciling(&self, controller: &'static str) -> Guard {
        self.running.send_modify(|running| {
            running.entry(controller).or_default().in_flight += 1;
        });
        Guard {
            stop: self.clone(),
            controller,
            reconcile: true,
        }
    }
}

/// A running controller instance or a reconcile in flight, counted until dropped (a reconcile
/// future dropped unfinished is no longer in flight either).
#[derive(Debug)]
pub(crate) struct Guard {
    stop: Stop,
    controller: &'static str,
    reconcile: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.running.send_modify(|running| {
            let Some(entry) = running.get_mut(self.controller) else {
                return;
            };
            if self.reconcile {
                entry.in_flight = entry.in_flight.saturating_sub(1);
            } else {
                entry.instances = entry.instances.saturating_sub(1);
            }
            if entry.instances == 0 && entry.in_flight == 0 {
                running.remove(self.controller);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn controllers_and_reconciles_are_counted_until_their_guards_drop() {
        let stop = Stop::default();
        assert!(Stop::current().is_none(), "no term outside a scope");
        let seen = stop
            .scope(async { Stop::current().map(|s| s.is_requested()) })
            .await;
        assert_eq!(seen, Some(false), "the scope's term is visible inside it");

        let a = stop.enter("a");
        let a2 = stop.enter("a");
        let b = stop.enter("b");
        let r1 = stop.reconciling("a");
        let r2 = stop.reconciling("a");
        assert_eq!(stop.in_flight(), vec![("a", 2)]);
        assert_eq!(stop.running(), vec!["a", "b"]);
        drop((b, r1));
        assert_eq!(stop.in_flight(), vec![("a", 1)]);
        assert_eq!(stop.running(), vec!["a"]);
        drop((a, a2));
        // A reconcile still in flight keeps its controller listed.
        assert_eq!(stop.running(), vec!["a"]);
        let drained = tokio::spawn({
            let stop = stop.clone();
            async move { stop.drained().await }
        });
        tokio::task::yield_now().await;
        assert!(!drained.is_finished());
        drop(r2);
        tokio::time::timeout(std::time::Duration::from_secs(5), drained)
            .await
            .expect("drained once nothing runs")
            .expect("the waiting task");
        assert!(stop.running().is_empty());
    }

    #[tokio::test]
    async fn a_request_is_seen_by_waiters_before_and_after_it() {
        let stop = Stop::default();
        let early = tokio::spawn(stop.requested());
        assert!(!stop.is_requested());
        stop.request();
        assert!(stop.is_requested());
        let late = stop.requested();
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            early.await.expect("the waiting task");
            late.await;
        })
        .await
        .expect("both see the request");
    }

    mod controller {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        use futures::StreamExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        use kube::runtime::controller::{Action, Controller};
        use kube::runtime::{reflector, watcher};

        use super::Stop;
        use crate::driver::Driven;
        use crate::error::Error;
        use crate::metrics::Metrics;

        struct Ctx {
            metrics: Arc<Metrics>,
            started: tokio::sync::mpsc::UnboundedSender<()>,
            finished: AtomicUsize,
        }

        impl Driven for Ctx {
            fn controller(&self) -> &'static str {
                "slow"
            }

            fn metrics(&self) -> &Metrics {
                &self.metrics
            }
        }

        /// A reconcile still running well after the stop is requested.
        async fn slow(_: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, Error> {
            let _ = ctx.started.send(());
            tokio::time::sleep(Duration::from_millis(300)).await;
            ctx.finished.fetch_add(1, Ordering::SeqCst);
            Ok(Action::await_change())
        }

        /// The step-down that used to panic: a term's runtime shut down with a reconcile in flight
        /// (kube unwraps the cancelled reconcile's outcome). Stopped first, the controller finishes
        /// the reconcile, returns, and the runtime then shuts down with nothing of kube's in flight.
        #[test]
        fn a_stopped_controller_finishes_its_reconcile_in_flight_and_returns() {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some("a".into()),
                    namespace: Some("ns".into()),
                    uid: Some("uid-a".into()),
                    resource_version: Some("1".into()),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            let (reader, mut writer) = reflector::store::<ConfigMap>();
            writer.apply_watcher_event(&watcher::Event::Init);
            writer.apply_watcher_event(&watcher::Event::InitApply(map.clone()));
            writer.apply_watcher_event(&watcher::Event::InitDone);
            // The trigger never ends by itself, as a watch does not.
            let trigger = futures::stream::iter([Ok(map)]).chain(futures::stream::pending());
            let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
            let mut registry = prometheus_client::registry::Registry::default();
            let ctx = Arc::new(Ctx {
                metrics: Metrics::register(&mut registry),
                started,
                finished: AtomicUsize::new(0),
            });
            let stop = Stop::default();
            let controller = runtime.spawn(stop.scope({
                let ctx = ctx.clone();
                async move {
                    let controller = Controller::for_stream(trigger, reader);
                    crate::driver::run(controller, 2, slow, ctx).await;
                }
            }));
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
                    .await
                    .expect("the reconcile starts");
            });
            assert_eq!(stop.in_flight(), vec![("slow", 1)]);
            stop.request();
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(10), stop.drained())
                    .await
                    .expect("the controller stops once its reconcile is done");
                tokio::time::timeout(Duration::from_secs(10), controller)
                    .await
                    .expect("the controller's task ends")
                    .expect("and does not panic");
            });
            assert_eq!(
                ctx.finished.load(Ordering::SeqCst),
                1,
                "the reconcile in flight ran to its end"
            );
            runtime.shutdown_background();
        }
    }
}
