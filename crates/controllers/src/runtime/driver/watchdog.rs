//! The stall watchdog: every controller's objects are looked at every [`SCAN_EVERY`], and a version
//! of an object that no reconcile has started on is a change not reconciled yet.
//!
//! A controller that silently stops reconciling (an event that never came, a request dropped)
//! shows nothing in its logs or its reconcile metrics: nothing happens. The watchdog makes the
//! silence visible — the age of the oldest unreconciled change is a gauge, how long changes waited
//! a histogram — and heals it: an object left unreconciled for [`STALL_AFTER`] is queued again
//! (a warning names it and a counter counts it; queueing an object already queued is free, so a
//! busy controller loses nothing by it).
//!
//! "Reconciled" means a reconcile started with that version of the object (it may fail and be
//! retried by the error policy, or wait on expectations: that is progress, not a stall). A
//! controller's own status write makes a new version, which its watch brings back to it at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the watchdog looks at a controller's objects.
pub const SCAN_EVERY: Duration = Duration::from_secs(2);

/// How long a change may wait for its reconcile before it is queued again. Far beyond the delay
/// of a healthy queue (milliseconds; seconds for thousands of objects at once).
pub const STALL_AFTER: Duration = Duration::from_secs(30);

/// Namespace (empty for a cluster-scoped object) and name.
pub type Key = (String, String);

/// The version of an object: its uid and resourceVersion.
pub type Version = (Option<String>, Option<String>);

/// What the watchdog knows of one controller's objects.
#[derive(Default)]
pub struct Watchdog {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The version each object's last reconcile started with.
    started: HashMap<Key, Version>,
    /// Versions seen unreconciled by a scan: since when, and when last queued again.
    pending: HashMap<Key, Pending>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    version: Version,
    since: Instant,
    requeued: Option<Instant>,
}

/// What one scan found.
#[derive(Debug, Default, PartialEq)]
pub struct Scan {
    /// How long the oldest unreconciled change has waited (zero when there is none).
    pub oldest: Duration,
    /// Objects to queue again: unreconciled for [`STALL_AFTER`] (and not queued again within it).
    pub stalled: Vec<(Key, Duration)>,
}

impl Watchdog {
    /// A reconcile starts on `version` of `key`; returns how long that version had been seen
    /// waiting, when a scan saw it waiting.
    pub fn started(&self, key: Key, version: Version, now: Instant) -> Option<Duration> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let waited = match state.pending.get(&key) {
            Some(pending) if pending.version == version => {
                Some(now.saturating_duration_since(pending.since))
            }
            _ => None,
        };
        if waited.is_some() {
            state.pending.remove(&key);
        }
        state.started.insert(key, version);
        waited
    }

    /// Looks at the objects the controller's store holds now.
    pub fn scan(&self, objects: impl IntoIterator<Item = (Key, Version)>, now: Instant) -> Scan {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let State { started, pending } = &mut *state;
        let mut present: HashMap<Key, Version> = HashMap::new();
        for (key, version) in objects {
            present.insert(key, version);
        }
        // Deleted objects decide nothing and wait for nothing.
        started.retain(|key, _| present.contains_key(key));
        pending.retain(|key, p| present.get(key) == Some(&p.version));
        let mut scan = Scan::default();
        for (key, version) in present {
            if started.get(&key) == Some(&version) {
                pending.remove(&key);
                continue;
            }
            let entry = pending.entry(key.clone()).or_insert(Pending {
                version,
                since: now,
                requeued: None,
            });
            let waited = now.saturating_duration_since(entry.since);
            scan.oldest = scan.oldest.max(waited);
            let due = entry
                .requeued
                .is_none_or(|at| now.saturating_duration_since(at) >= STALL_AFTER);
            if waited >= STALL_AFTER && due {
                entry.requeued = Some(now);
                scan.stalled.push((key, waited));
            }
        }
        scan.stalled.sort();
        scan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    fn version(rv: &str) -> Version {
        (Some("uid".into()), Some(rv.into()))
    }

    #[test]
    fn the_watchdog_table() {
        struct Case {
            name: &'static str,
            /// (seconds after the start, what happens)
            steps: Vec<(u64, Action)>,
            /// The last scan's oldest wait (seconds) and the names it queues again.
            oldest: u64,
            stalled: Vec<&'static str>,
        }
        enum Action {
            Started(&'static str, &'static str),
            Scan(Vec<(&'static str, &'static str)>),
        }
        use Action::{Scan as S, Started};
        let cases = vec![
            Case {
                name: "a reconciled object waits for nothing",
                steps: vec![(0, Started("a", "1")), (40, S(vec![("a", "1")]))],
                oldest: 0,
                stalled: vec![],
            },
            Case {
                name: "a change never reconciled is queued again after STALL_AFTER",
                steps: vec![
                    (0, Started("a", "1")),
                    (1, S(vec![("a", "2")])),
                    (31, S(vec![("a", "2")])),
                ],
                oldest: 30,
                stalled: vec!["a"],
            },
            Case {
                name: "not before",
                steps: vec![(1, S(vec![("a", "2")])), (20, S(vec![("a", "2")]))],
                oldest: 19,
                stalled: vec![],
            },
            Case {
                name: "queued again once per STALL_AFTER, not at every scan",
                steps: vec![
                    (0, S(vec![("a", "2")])),
                    (30, S(vec![("a", "2")])),
                    (32, S(vec![("a", "2")])),
                ],
                oldest: 32,
                stalled: vec![],
            },
            Case {
                name: "and again after another STALL_AFTER",
                steps: vec![
                    (0, S(vec![("a", "2")])),
                    (30, S(vec![("a", "2")])),
                    (60, S(vec![("a", "2")])),
                ],
                oldest: 60,
                stalled: vec!["a"],
            },
            Case {
                name: "a reconcile of the waiting version ends the wait",
                steps: vec![
                    (0, S(vec![("a", "2")])),
                    (10, Started("a", "2")),
                    (40, S(vec![("a", "2")])),
                ],
                oldest: 0,
                stalled: vec![],
            },
            Case {
                name: "a deleted object waits for nothing",
                steps: vec![(0, S(vec![("a", "2")])), (40, S(vec![("b", "3")]))],
                oldest: 0,
                stalled: vec![],
            },
            Case {
                name: "a newer version restarts the wait",
                steps: vec![
                    (0, S(vec![("a", "2")])),
                    (20, S(vec![("a", "3")])),
                    (40, S(vec![("a", "3")])),
                ],
                oldest: 20,
                stalled: vec![],
            },
        ];
        for case in cases {
            let dog = Watchdog::default();
            let start = Instant::now();
            let mut last = Scan::default();
            for (at, action) in case.steps {
                let now = start + Duration::from_secs(at);
                match action {
                    Started(name, rv) => {
                        dog.started(key(name), version(rv), now);
                    }
                    S(objects) => {
                        last = dog.scan(
                            objects.into_iter().map(|(n, rv)| (key(n), version(rv))),
                            now,
                        );
                    }
                }
            }
            assert_eq!(
                last.oldest,
                Duration::from_secs(case.oldest),
                "{}",
                case.name
            );
            let stalled: Vec<&str> = last.stalled.iter().map(|(k, _)| k.1.as_str()).collect();
            assert_eq!(stalled, case.stalled, "{}", case.name);
        }
    }

    #[test]
    fn started_tells_how_long_a_seen_change_waited() {
        let dog = Watchdog::default();
        let start = Instant::now();
        dog.scan([(key("a"), version("2"))], start);
        let waited = dog.started(key("a"), version("2"), start + Duration::from_secs(3));
        assert_eq!(waited, Some(Duration::from_secs(3)));
        assert_eq!(dog.started(key("b"), version("1"), start), None);
    }
}
