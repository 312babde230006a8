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

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
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

/// Publishes Events as `reporter`, remembering at most about [`REMEMBERED`] of the last ones.
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    recorder: Rotating<Recorder>,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        let first = Recorder::new(client.clone(), reporter.clone());
        Self {
            client,
            reporter,
            recorder: Rotating::new(REMEMBERED, first),
        }
    }

    /// Publishes `event` about `regarding` (a series on an earlier one, when it repeats one).
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let recorder = self
            .recorder
            .next(|| Recorder::new(self.client.clone(), self.reporter.clone()));
        recorder.publish(event, regarding).await
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

    #[test]
    fn zero_uses_is_one() {
        let rotating = Rotating::new(0, 7);
        assert_eq!(rotating.next(|| 8), 7);
        assert_eq!(rotating.next(|| 9), 9);
    }
}
