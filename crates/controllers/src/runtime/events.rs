//! Publishing Kubernetes Events with a bounded memory of the recent ones.
//!
//! kube-runtime's `Recorder` remembers every Event it published for 6 minutes, so that a repeat
//! (same type, reason, action, object and related object) is counted as a series on the first
//! instead of creating another Event. It keeps the whole Event, and it forgets old ones only when it
//! publishes the next one. The workload controllers publish an Event per Pod they create or update
//! (the Pod is the related object), so one recorder per controller held an Event per Pod of the
//! last rollout, and kept them once the manager went quiet: 10,000 after rolling 10,000 Pods in
//! place (20,000 if they were created within the 6 minutes before), each of them looked at again
//! on every publish.
//!
//! [`EventRecorder`] starts a new `Recorder` after [`REMEMBERED`] Events: a repeat among the last
//! few hundred Events still becomes a series (client-go's correlator also remembers a bounded
//! number, 4,096), and what the recorders hold stays a few hundred KiB.
//!
//! It also publishes at most [`BURST`] Events of one reason about one object, then one more every
//! [`REFILL`] ([`SpamFilter`]). OpenKruise's recorder (client-go's) does the same per object,
//! whatever the reason, so a rollout of 1,000 Pods shows 25 `SuccessfulUpdatePodInPlace` Events on
//! the CloneSet, not 1,000: publishing one per Pod was a write per Pod to the apiserver and etcd
//! (10,000 in a 10,000-Pod rollout), awaited beside the Pod's own writes. Counting per reason
//! keeps a Warning from being dropped because Normal Events of another reason used the burst up.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kruise_core::ratelimit::Bucket;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

/// Events one `Recorder` publishes before the next one takes over.
pub const REMEMBERED: usize = 512;

/// A value that is replaced by a fresh one after it has been handed out `uses` times.
struct Rotating<T> {
    uses: usize,
    current: Mutex<(T, usize)>,
}

impl<T: Clone> Rotating<T> {
    fn new(uses: usize, first: T) -> Self {
        Self {
            uses: uses.max(1),
            current: Mutex::new((first, 0)),
        }
    }

    /// The current value, made anew by `make` once it has been handed out `uses` times.
    fn next(&self, make: impl FnOnce() -> T) -> T {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.1 >= self.uses {
            *current = (make(), 0);
        }
        current.1 += 1;
        current.0.clone()
    }
}

/// Events of one reason about one object published at once before the rate applies (client-go's
/// `defaultSpamBurst`).
pub const BURST: u32 = 25;

/// How often one more Event of a reason about an object may be published once the burst is used
/// (client-go's `defaultSpamQPS`, 1/300).
pub const REFILL: Duration = Duration::from_secs(300);

/// Objects (with a reason) whose Event budget is remembered (client-go's LRU holds 4,096).
pub const TRACKED: usize = 4096;

/// Which Events share a budget: the object they are about and their reason.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SpamKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    reason: String,
}

impl SpamKey {
    fn of(event: &Event, regarding: &ObjectReference) -> Self {
        Self {
            api_version: regarding.api_version.clone(),
            kind: regarding.kind.clone(),
            namespace: regarding.namespace.clone(),
            name: regarding.name.clone(),
            uid: regarding.uid.clone(),
            reason: event.reason.clone(),
        }
    }
}

/// Per object and reason, whether one more Event may be published now: [`BURST`] at once, then
/// one per [`REFILL`]. An object whose bucket is full again is forgotten (it is as good as new), so
/// at most [`TRACKED`] buckets are held.
#[derive(Debug, Default)]
struct SpamFilter {
    budgets: HashMap<SpamKey, Bucket>,
}

impl SpamFilter {
    /// Takes a token for `key` at `now`; false when none is left (the Event is dropped).
    fn allow(&mut self, key: SpamKey, now: Instant) -> bool {
        if !self.budgets.contains_key(&key) && self.budgets.len() >= TRACKED {
            self.forget_full(now);
        }
        self.budgets
            .entry(key)
            .or_insert_with(|| Bucket::new(1.0 / REFILL.as_secs_f64(), BURST, now))
            .try_take(now)
    }

    /// Drops the buckets that are full again; if all of them are still in use, the one least
    /// recently drawn on.
    fn forget_full(&mut self, now: Instant) {
        self.budgets.retain(|_, b| !b.is_full(now));
        if self.budgets.len() >= TRACKED
            && let Some(oldest) = self
                .budgets
                .iter()
                .min_by_key(|(_, b)| b.last())
                .map(|(k, _)| k.clone())
        {
            self.budgets.remove(&oldest);
        }
    }
}

/// Publishes Events as `reporter`, remembering at most about [`REMEMBERED`] of the last ones, and at
/// most [`BURST`] of one reason about one object at once ([`SpamFilter`]).
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    recorder: Rotating<Recorder>,
    spam: Mutex<SpamFilter>,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let first = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            recorder: Rotating::new(REMEMBERED, first),
            spam: Mutex::new(SpamFilter::default()),
        }
    }

    /// Publishes `event` about `regarding` (a series on an earlier one, when it repeats one), unless
    /// its object has used up its budget for this reason: then it is dropped, as client-go drops it.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let allowed = self
            .spam
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(SpamKey::of(event, regarding), Instant::now());
        if !allowed {
            tracing::debug!(
                reason = %event.reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                "dropping an Event: {BURST} of this reason about this object were published in the last minutes"
            );
            return Ok(());
        }
        let recorder = self
            .recorder
            .next(|| Recorder::new(self.client.clone(), self.reporter.clone()));
        recorder.publish(event, regarding).await
    }

    /// Publishes an Event of `reason` (also its action) about `regarding`, as `kubectl describe`
    /// shows it; a failure is logged, never returned: an Event is never worth failing a reconcile.
    pub async fn record(
        &self,
        regarding: &ObjectReference,
        type_: kube::runtime::events::EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        if let Err(error) = self.publish(&event, regarding).await {
            tracing::warn!(%error, reason, object = regarding.name.as_deref().unwrap_or_default(), "publishing an event");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_value_is_handed_out_so_many_times_then_replaced() {
        // (uses, calls, how many values were made besides the first)
        let cases = [
            (1, 1, 0),
            (1, 3, 2),
            (3, 3, 0),
            (3, 4, 1),
            (3, 9, 2),
            (3, 10, 3),
        ];
        for (uses, calls, made) in cases {
            let rotating = Rotating::new(uses, Arc::new(0usize));
            let mut count = 0;
            let mut handed = Vec::new();
            for _ in 0..calls {
                handed.push(rotating.next(|| {
                    count += 1;
                    Arc::new(count)
                }));
            }
            assert_eq!(count, made, "{uses} uses, {calls} calls");
            // Each value went to `uses` callers in a row (the last one to the rest).
            for (i, value) in handed.iter().enumerate() {
                assert_eq!(**value, i / uses, "{uses} uses, call {i}");
            }
        }
    }

    fn event(reason: &str) -> Event {
        Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: reason.into(),
            note: None,
            action: reason.into(),
            secondary: None,
        }
    }

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps.kruise.io/v1beta1".into()),
            kind: Some("CloneSet".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    fn key(reason: &str, name: &str) -> SpamKey {
        SpamKey::of(&event(reason), &object(name))
    }

    #[test]
    fn an_object_gets_a_burst_of_each_reason_then_one_per_refill() {
        // (seconds after the start, events tried then, how many of them are published)
        let cases: [(u64, u32, u32); 6] = [
            (0, BURST + 10, BURST),
            (1, 5, 0),
            (REFILL.as_secs() - 1, 1, 0),
            (REFILL.as_secs() + 1, 3, 1),
            (REFILL.as_secs() * 3 + 1, 3, 2),
            (REFILL.as_secs() * 200, BURST + 1, BURST),
        ];
        let start = Instant::now();
        let mut filter = SpamFilter::default();
        for (after, tried, published) in cases {
            let now = start + Duration::from_secs(after);
            let allowed = (0..tried)
                .filter(|_| filter.allow(key("SuccessfulUpdatePodInPlace", "web"), now))
                .count();
            assert_eq!(
                allowed as u32, published,
                "{tried} tried {after} s after the start"
            );
        }
    }

    #[test]
    fn budgets_are_per_object_and_per_reason() {
        let now = Instant::now();
        let mut filter = SpamFilter::default();
        for _ in 0..BURST {
            assert!(filter.allow(key("SuccessfulUpdatePodInPlace", "web"), now));
        }
        assert!(!filter.allow(key("SuccessfulUpdatePodInPlace", "web"), now));
        // Another reason about the same object, and the same reason about another object.
        assert!(filter.allow(key("FailedUpdatePodInPlace", "web"), now));
        assert!(filter.allow(key("SuccessfulUpdatePodInPlace", "api"), now));
    }

    #[test]
    fn at_most_so_many_budgets_are_held() {
        let now = Instant::now();
        let mut filter = SpamFilter::default();
        for i in 0..TRACKED + 10 {
            assert!(filter.allow(key("SuccessfulCreate", &format!("set-{i}")), now));
        }
        assert!(filter.budgets.len() <= TRACKED, "{}", filter.budgets.len());
        // Full again once refilled: forgotten when room is needed.
        let later = now + REFILL * BURST;
        assert!(filter.allow(key("SuccessfulCreate", "new"), later));
        assert_eq!(filter.budgets.len(), 1);
    }

    #[test]
    fn zero_uses_is_one() {
        let rotating = Rotating::new(0, 7);
        assert_eq!(rotating.next(|| 8), 7);
        assert_eq!(rotating.next(|| 9), 9);
    }
}
