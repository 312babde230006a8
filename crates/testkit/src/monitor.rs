//! A rollout invariant monitor: watches the Pods of a workload while a test rolls it out and records the
//! first moment an invariant breaks (too many unavailable Pods, too many Pods, too few Pods left on the
//! old revision), so a test fails on the violation itself instead of on a later, vaguer symptom.
//!
//! Start it once the workload is fully Ready, then make the change and wait through
//! [`RolloutMonitor::until`] / [`RolloutMonitor::eventually`], which fail as soon as a violation is seen.
//! The counting is the pure function [`check`]. The apiserver being unreachable is no violation: the
//! watch fails ([`Stats::watch_errors`]) and is retried every [`RETRY`]; once the apiserver is back it
//! resumes from where it was, or lists the Pods again ([`Stats::lists`]) and checks that state.

use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::POLL;

/// What a rollout may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Desired replicas.
    pub replicas: i32,
    /// At most this many of `replicas` may be missing or not available (Running, Ready, not terminating).
    pub max_unavailable: i32,
    /// At most `replicas + max_surge` Pods may exist, not counting Pods being deleted: as Kubernetes
    /// counts surge (Deployment `podReplacementPolicy: TerminationStarted`, the default) and as
    /// OpenKruise does, a Pod with a deletionTimestamp is on its way out and already replaced.
    pub max_surge: i32,
    /// `(revision label key, old revision value, partition)`: at least `partition` Pods must keep the old
    /// revision.
    pub min_old_revision_pods: Option<(String, String, i32)>,
}

impl Limits {
    /// `replicas` Pods, every one available, none more: loosen it with [`Limits::max_unavailable`] and
    /// [`Limits::max_surge`].
    pub fn replicas(replicas: i32) -> Self {
        Limits {
            replicas,
            ..Limits::default()
        }
    }

    /// At most `max_unavailable` of the replicas may be missing or not available.
    pub fn max_unavailable(self, max_unavailable: i32) -> Self {
        Limits {
            max_unavailable,
            ..self
        }
    }

    /// At most `replicas + max_surge` Pods may exist.
    pub fn max_surge(self, max_surge: i32) -> Self {
        Limits { max_surge, ..self }
    }
}

/// What [`check`] needs to know about one Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    /// Phase Running and condition Ready True.
    pub ready: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// Value of the revision label of [`Limits::min_old_revision_pods`], if any.
    pub revision: Option<String>,
}

impl PodView {
    /// Counts towards availability: ready and not terminating.
    pub fn available(&self) -> bool {
        self.ready && !self.terminating
    }

    /// The view of a Pod; `revision_key` is the label read into [`PodView::revision`].
    pub fn of(pod: &Pod, revision_key: Option<&str>) -> Self {
        let status = pod.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
        let ready_condition = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let revision = revision_key.and_then(|key| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(key).cloned())
        });
        PodView {
            name: pod.metadata.name.clone().unwrap_or_default(),
            ready: running && ready_condition,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            revision,
        }
    }
}

/// Counts of one snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods that are not terminating.
    pub total: usize,
    pub available: usize,
    /// `replicas - available`, never below 0.
    pub unavailable: i32,
    /// Pods on the old revision, when [`Limits::min_old_revision_pods`] is set.
    pub old_revision: Option<usize>,
}

/// Counts a snapshot of Pods against `limits`.
pub fn count(limits: &Limits, pods: &[PodView]) -> Counts {
    let available = pods.iter().filter(|p| p.available()).count();
    let unavailable = (i64::from(limits.replicas) - available as i64).max(0);
    let old_revision = limits.min_old_revision_pods.as_ref().map(|(_, old, _)| {
        pods.iter()
            .filter(|p| p.revision.as_deref() == Some(old.as_str()))
            .count()
    });
    Counts {
        total: pods.iter().filter(|p| !p.terminating).count(),
        available,
        unavailable: i32::try_from(unavailable).unwrap_or(i32::MAX),
        old_revision,
    }
}

/// The invariants broken by this snapshot, described with the counts and every Pod's state, or `None`.
pub fn check(limits: &Limits, pods: &[PodView]) -> Option<String> {
    let counts = count(limits, pods);
    let mut broken = Vec::new();
    if counts.unavailable > limits.max_unavailable {
        broken.push(format!(
            "unavailable {} > maxUnavailable {} (replicas {}, available {})",
            counts.unavailable, limits.max_unavailable, limits.replicas, counts.available
        ));
    }
    let max_pods = i64::from(limits.replicas) + i64::from(limits.max_surge);
    if counts.total as i64 > max_pods {
        broken.push(format!(
            "{} Pods (not terminating) > replicas {} + maxSurge {}",
            counts.total, limits.replicas, limits.max_surge
        ));
    }
    if let (Some((key, old, partition)), Some(old_count)) =
        (&limits.min_old_revision_pods, counts.old_revision)
        && (old_count as i64) < i64::from(*partition)
    {
        broken.push(format!(
            "{old_count} Pods with {key}={old} < partition {partition}"
        ));
    }
    if broken.is_empty() {
        return None;
    }
    Some(format!("{}; Pods: {}", broken.join("; "), describe(pods)))
}

fn describe(pods: &[PodView]) -> String {
    if pods.is_empty() {
        return "none".into();
    }
    let mut out = String::new();
    for (i, pod) in pods.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(
            out,
            "{} ({}{}",
            pod.name,
            if pod.ready { "ready" } else { "not ready" },
            if pod.terminating { ", terminating" } else { "" }
        );
        if let Some(revision) = &pod.revision {
            let _ = write!(out, ", revision {revision}");
        }
        out.push(')');
    }
    out
}

/// What the monitor saw in a rollout without violations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Watch events checked (each Pod change, deletion and (re)list).
    pub events_seen: u64,
    pub max_unavailable_seen: i32,
    /// Most Pods at once, not counting terminating ones.
    pub max_pods_seen: usize,
    /// Complete (re)lists: 1 after the first, one more each time the watch could not resume where it
    /// was after an error (an expired resourceVersion after an apiserver restart, for example).
    pub lists: u64,
    /// Watch errors seen (and retried): the apiserver unreachable, for example. Not violations.
    pub watch_errors: u64,
}

#[derive(Default)]
struct Shared {
    stats: Stats,
    last_watch_error: Option<String>,
}

/// A running monitor; see the module docs. Dropping it stops the watch.
pub struct RolloutMonitor {
    task: JoinHandle<()>,
    shared: Arc<Mutex<Shared>>,
    violation: watch::Receiver<Option<String>>,
}

/// How long [`RolloutMonitor::start`] waits for the initial list of Pods.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

impl RolloutMonitor {
    /// Starts watching the Pods of `namespace` matching `label_selector` and returns once the initial
    /// list is in (so no change made after this returns is missed). The initial snapshot is checked
    /// too: start the monitor once the workload is fully Ready.
    pub async fn start(
        client: Client,
        namespace: &str,
        label_selector: &str,
        limits: Limits,
    ) -> anyhow::Result<RolloutMonitor> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(label_selector);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (violation_tx, violation) = watch::channel(None);
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let state = Watching {
            limits,
            pods: BTreeMap::new(),
            relist: None,
            shared: shared.clone(),
            violation: violation_tx,
            synced: Some(synced_tx),
        };
        let task = tokio::spawn(state.run(api, config));
        let monitor = RolloutMonitor {
            task,
            shared,
            violation,
        };
        match tokio::time::timeout(SYNC_TIMEOUT, synced).await {
            Ok(Ok(())) => Ok(monitor),
            Ok(Err(_)) => bail!("the rollout monitor stopped before its first list"),
            Err(_) => {
                let last = monitor.lock().last_watch_error.clone();
                bail!(
                    "the rollout monitor did not list Pods ({label_selector}) within {SYNC_TIMEOUT:?}; last watch error: {}",
                    last.as_deref().unwrap_or("none")
                )
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The first violation seen, if any.
    pub fn violation(&self) -> Option<String> {
        self.violation.borrow().clone()
    }

    /// `Err` with the first violation, if any. Cheap; call it in wait loops.
    pub fn check(&self) -> anyhow::Result<()> {
        match self.violation() {
            Some(violation) => Err(anyhow!("rollout invariant violated: {violation}")),
            None => Ok(()),
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    /// The last watch error, if the watch has failed at all (it is retried every [`RETRY`]).
    pub fn last_watch_error(&self) -> Option<String> {
        self.lock().last_watch_error.clone()
    }

    /// Stops watching; `Err` with the first violation, else what was seen.
    pub async fn finish(mut self) -> anyhow::Result<Stats> {
        self.task.abort();
        let _ = (&mut self.task).await;
        self.check()?;
        Ok(self.stats())
    }

    /// Like [`crate::eventually`], but fails the moment the monitor records a violation (also while
    /// `condition` is running).
    pub async fn eventually<T, F, Fut>(
        &self,
        what: impl Display,
        timeout: Duration,
        mut condition: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        let deadline = Instant::now() + timeout;
        let mut violation = self.violation.clone();
        let mut last_error = None;
        loop {
            self.check()
                .with_context(|| format!("while waiting for {what}"))?;
            tokio::select! {
                result = condition() => match result {
                    Ok(Some(value)) => {
                        self.check().with_context(|| format!("while waiting for {what}"))?;
                        return Ok(value);
                    }
                    Ok(None) => {}
                    Err(error) => last_error = Some(error),
                },
                changed = violation.changed() => {
                    changed.map_err(|_| anyhow!("the rollout monitor stopped while waiting for {what}"))?;
                    continue;
                }
            }
            if Instant::now() >= deadline {
                match last_error {
                    Some(error) => {
                        bail!(
                            "timed out after {timeout:?} waiting for {what}; last error: {error:#}"
                        )
                    }
                    None => bail!("timed out after {timeout:?} waiting for {what}"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                changed = violation.changed() => {
                    changed.map_err(|_| anyhow!("the rollout monitor stopped while waiting for {what}"))?;
                }
            }
        }
    }

    /// Like [`crate::until`], but fails the moment the monitor records a violation.
    pub async fn until<F, Fut>(
        &self,
        what: impl Display,
        timeout: Duration,
        mut condition: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        self.eventually(what, timeout, || {
            let fut = condition();
            async move { Ok(fut.await?.then_some(())) }
        })
        .await
    }
}

impl Drop for RolloutMonitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long the monitor's watch waits before retrying after an error.
pub const RETRY: Duration = Duration::from_millis(500);

/// A constant [`RETRY`] between watch retries.
struct Retry;

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(RETRY)
    }
}

impl kube::runtime::utils::Backoff for Retry {
    fn reset(&mut self) {}
}

/// The watch task's state.
struct Watching {
    limits: Limits,
    /// Pods by UID.
    pods: BTreeMap<String, Pod>,
    /// Pods of a relist in progress; swapped in at `InitDone` so a partial list is never checked.
    relist: Option<BTreeMap<String, Pod>>,
    shared: Arc<Mutex<Shared>>,
    violation: watch::Sender<Option<String>>,
    synced: Option<tokio::sync::oneshot::Sender<()>>,
}

fn uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}

fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("?")
}

impl Watching {
    async fn run(mut self, api: Api<Pod>, config: watcher::Config) {
        // Retry every RETRY, not with the default exponential back-off (up to 30 s): when the apiserver
        // comes back after an outage, the monitor must be watching again within a second or two.
        let mut stream = watcher::watcher(api, config).backoff(Retry).boxed();
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => self.on_event(event),
                Err(error) => {
                    let mut shared = self.lock();
                    shared.stats.watch_errors += 1;
                    shared.last_watch_error = Some(error.to_string());
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn on_event(&mut self, event: Event<Pod>) {
        let what = match event {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                return;
            }
            Event::InitApply(pod) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(uid(&pod), pod);
                return;
            }
            Event::InitDone => {
                self.pods = self.relist.take().unwrap_or_default();
                self.lock().stats.lists += 1;
                if let Some(synced) = self.synced.take() {
                    let _ = synced.send(());
                }
                "(re)list".to_string()
            }
            Event::Apply(pod) => {
                let what = format!("apply {}", name(&pod));
                self.pods.insert(uid(&pod), pod);
                what
            }
            Event::Delete(pod) => {
                let what = format!("delete {}", name(&pod));
                self.pods.remove(&uid(&pod));
                what
            }
        };
        self.check(&what);
    }

    fn check(&mut self, what: &str) {
        let key = self
            .limits
            .min_old_revision_pods
            .as_ref()
            .map(|(key, _, _)| key.as_str());
        let views: Vec<PodView> = self.pods.values().map(|p| PodView::of(p, key)).collect();
        let counts = count(&self.limits, &views);
        let events_seen = {
            let mut shared = self.lock();
            let stats = &mut shared.stats;
            stats.events_seen += 1;
            stats.max_unavailable_seen = stats.max_unavailable_seen.max(counts.unavailable);
            stats.max_pods_seen = stats.max_pods_seen.max(counts.total);
            stats.events_seen
        };
        if self.violation.borrow().is_some() {
            return;
        }
        if let Some(broken) = check(&self.limits, &views) {
            let message = format!("at event #{events_seen} ({what}): {broken}");
            tracing::warn!(%message, "rollout invariant violated");
            self.violation.send_replace(Some(message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ready: bool, terminating: bool, revision: &str) -> PodView {
        PodView {
            name: name.into(),
            ready,
            terminating,
            revision: Some(revision.into()),
        }
    }

    fn limits(replicas: i32, max_unavailable: i32, max_surge: i32) -> Limits {
        Limits {
            replicas,
            max_unavailable,
            max_surge,
            min_old_revision_pods: None,
        }
    }

    fn with_partition(mut limits: Limits, partition: i32) -> Limits {
        limits.min_old_revision_pods = Some(("rev".into(), "old".into(), partition));
        limits
    }

    #[test]
    fn table() {
        let ready = |n: &str| pod(n, true, false, "old");
        let new_ready = |n: &str| pod(n, true, false, "new");
        let unready = |n: &str| pod(n, false, false, "new");
        let terminating = |n: &str| pod(n, true, true, "old");
        // (case, limits, pods, expected substrings of the violation; empty = no violation)
        let cases: Vec<(&str, Limits, Vec<PodView>, Vec<&str>)> = vec![
            (
                "all ready",
                limits(3, 0, 0),
                vec![ready("a"), ready("b"), ready("c")],
                vec![],
            ),
            (
                "one unready within maxUnavailable 1",
                limits(3, 1, 0),
                vec![ready("a"), ready("b"), unready("c")],
                vec![],
            ),
            (
                "one unready beyond maxUnavailable 0",
                limits(3, 0, 0),
                vec![ready("a"), ready("b"), unready("c")],
                vec!["unavailable 1 > maxUnavailable 0", "c (not ready"],
            ),
            (
                "a missing Pod is unavailable",
                limits(3, 0, 1),
                vec![ready("a"), ready("b")],
                vec!["unavailable 1 > maxUnavailable 0", "available 2"],
            ),
            (
                "a terminating ready Pod is unavailable",
                limits(3, 0, 1),
                vec![ready("a"), ready("b"), terminating("c")],
                vec!["unavailable 1", "c (ready, terminating"],
            ),
            (
                "surge within maxSurge",
                limits(3, 1, 1),
                vec![ready("a"), ready("b"), terminating("c"), unready("d")],
                vec![],
            ),
            (
                "terminating Pods do not count towards the surge",
                limits(3, 1, 1),
                vec![
                    ready("a"),
                    ready("b"),
                    terminating("c"),
                    terminating("d"),
                    new_ready("e"),
                ],
                vec![],
            ),
            (
                "more live Pods than replicas + maxSurge",
                limits(3, 1, 1),
                vec![
                    ready("a"),
                    ready("b"),
                    terminating("c"),
                    new_ready("d"),
                    new_ready("e"),
                    new_ready("f"),
                ],
                vec!["5 Pods (not terminating) > replicas 3 + maxSurge 1"],
            ),
            (
                "surplus available Pods do not make unavailable negative",
                limits(2, 0, 2),
                vec![ready("a"), ready("b"), ready("c")],
                vec![],
            ),
            (
                "no Pods at all",
                limits(2, 1, 0),
                vec![],
                vec!["unavailable 2 > maxUnavailable 1", "Pods: none"],
            ),
            (
                "partition kept",
                with_partition(limits(3, 1, 0), 2),
                vec![ready("a"), ready("b"), new_ready("c")],
                vec![],
            ),
            (
                "partition broken",
                with_partition(limits(3, 1, 0), 2),
                vec![ready("a"), new_ready("b"), new_ready("c")],
                vec![
                    "1 Pods with rev=old < partition 2",
                    "b (ready, revision new)",
                ],
            ),
            (
                "several invariants at once",
                with_partition(limits(2, 0, 0), 2),
                vec![new_ready("a"), unready("b"), unready("c")],
                vec!["unavailable 1", "3 Pods", "0 Pods with rev=old"],
            ),
        ];
        for (case, limits, pods, expected) in cases {
            let got = check(&limits, &pods);
            match (expected.is_empty(), &got) {
                (true, None) => {}
                (true, Some(violation)) => panic!("{case}: unexpected violation {violation}"),
                (false, None) => panic!("{case}: no violation, expected {expected:?}"),
                (false, Some(violation)) => {
                    for part in expected {
                        assert!(
                            violation.contains(part),
                            "{case}: {violation:?} lacks {part:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn counts() {
        let limits = with_partition(limits(4, 1, 1), 1);
        let pods = vec![
            pod("a", true, false, "old"),
            pod("b", true, true, "old"),
            pod("c", false, false, "new"),
        ];
        assert_eq!(
            count(&limits, &pods),
            Counts {
                total: 2,
                available: 1,
                unavailable: 3,
                old_revision: Some(2),
            }
        );
    }

    #[test]
    fn pod_view_reads_phase_readiness_deletion_and_revision() -> anyhow::Result<()> {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "p", "uid": "u",
                "labels": {"rev": "old"},
                "deletionTimestamp": "2026-01-01T00:00:00Z"
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))?;
        let view = PodView::of(&pod, Some("rev"));
        assert_eq!(view, pod_view_expected());
        assert!(!view.available());
        let pending: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q"},
            "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}
        }))?;
        assert!(!PodView::of(&pending, None).ready);
        Ok(())
    }

    fn pod_view_expected() -> PodView {
        PodView {
            name: "p".into(),
            ready: true,
            terminating: true,
            revision: Some("old".into()),
        }
    }
}
