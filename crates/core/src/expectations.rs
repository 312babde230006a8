//! Expectations: the writes a controller has made that its cache has not shown yet.
//!
//! A controller that creates a Pod and reconciles again before its watch delivers the Pod would see
//! one Pod too few and create another. So each write is remembered until the cache reflects it, and
//! the controller does not act on a snapshot that misses one of its own writes.
//!
//! Unlike upstream's counters, an expectation here is a statement about one object ("Pod x exists",
//! "Pod x with uid u is gone", "the cache holds Pod x at resourceVersion ≥ r"), checked against the
//! cache itself on every reconcile, so a missed or duplicated watch event cannot leave it unbalanced.
//! And every expectation expires: a write whose effect never shows up (a create that failed after the
//! server accepted it, an object deleted by someone else before the watch saw it) stalls its controller
//! for at most the timeout instead of forever (kruise#1765).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the cache must show.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Want {
    /// The object exists.
    Exists,
    /// The object is gone or is being deleted; when `uid` is set, an object of the same name with
    /// another uid (a replacement) also satisfies it.
    Gone { uid: Option<String> },
    /// The object is cached at this resourceVersion or a later one.
    Observed { resource_version: String },
}

/// One expected effect of a write.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Expectation {
    /// The object kind, e.g. "Pod".
    pub kind: &'static str,
    pub name: String,
    pub want: Want,
}

impl Expectation {
    pub fn exists(kind: &'static str, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            want: Want::Exists,
        }
    }

    pub fn gone(kind: &'static str, name: impl Into<String>, uid: Option<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            want: Want::Gone { uid },
        }
    }

    pub fn observed(
        kind: &'static str,
        name: impl Into<String>,
        resource_version: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            name: name.into(),
            want: Want::Observed {
                resource_version: resource_version.into(),
            },
        }
    }

    /// Whether a cached object (its uid, resourceVersion and whether it is being deleted), or its
    /// absence, satisfies the expectation.
    pub fn satisfied_by(&self, cached: Option<CachedState<'_>>) -> bool {
        match (&self.want, cached) {
            (Want::Exists, cached) => cached.is_some(),
            (Want::Gone { .. }, None) => true,
            (Want::Gone { uid }, Some(c)) => {
                c.deleting || uid.as_deref().is_some_and(|u| Some(u) != c.uid)
            }
            (Want::Observed { .. }, None) => true,
            (Want::Observed { resource_version }, Some(c)) => {
                resource_version_at_least(c.resource_version, resource_version)
            }
        }
    }
}

/// What [`Expectation::satisfied_by`] needs of a cached object.
#[derive(Clone, Copy, Debug)]
pub struct CachedState<'a> {
    pub uid: Option<&'a str>,
    pub resource_version: Option<&'a str>,
    pub deleting: bool,
}

impl<'a> CachedState<'a> {
    /// The state of a cached object, from its metadata.
    pub fn of(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        Self {
            uid: meta.uid.as_deref(),
            resource_version: meta.resource_version.as_deref(),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }
}

/// Whether `cached` is `expected` or newer. resourceVersions are opaque to clients, but every
/// Kubernetes release encodes them as increasing integers (etcd revisions); if either side is not an
/// integer only equality counts.
pub fn resource_version_at_least(cached: Option<&str>, expected: &str) -> bool {
    let Some(cached) = cached else {
        return false;
    };
    match (cached.parse::<u64>(), expected.parse::<u64>()) {
        (Ok(c), Ok(e)) => c >= e,
        _ => cached == expected,
    }
}

/// The result of [`Expectations::check`] for one owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// Still waiting for these.
    pub pending: Vec<Expectation>,
    /// Dropped now because their deadline passed unsatisfied (a leak worth a metric and a log).
    pub expired: Vec<Expectation>,
    /// When the earliest pending expectation expires.
    pub next_deadline: Option<Instant>,
}

impl Check {
    pub fn satisfied(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Pending expectations per owner key (e.g. `namespace/name`).
#[derive(Debug)]
pub struct Expectations {
    timeout: Duration,
    by_owner: HashMap<String, Vec<(Expectation, Instant)>>,
}

impl Expectations {
    /// Expectations that expire `timeout` after they are raised.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            by_owner: HashMap::new(),
        }
    }

    /// Remembers a write made at `now`. Raising the same expectation again renews its deadline.
    pub fn expect(&mut self, owner: &str, expectation: Expectation, now: Instant) {
        let deadline = now + self.timeout;
        let list = self.by_owner.entry(owner.to_owned()).or_default();
        match list.iter_mut().find(|(e, _)| *e == expectation) {
            Some(entry) => entry.1 = deadline,
            None => list.push((expectation, deadline)),
        }
    }

    /// Drops what the cache now shows (`satisfied`) and what has expired, and reports the rest.
    pub fn check(
        &mut self,
        owner: &str,
        now: Instant,
        satisfied: impl Fn(&Expectation) -> bool,
    ) -> Check {
        let mut check = Check::default();
        let Some(list) = self.by_owner.get_mut(owner) else {
            return check;
        };
        list.retain(|(expectation, deadline)| {
            if satisfied(expectation) {
                false
            } else if *deadline <= now {
                check.expired.push(expectation.clone());
                false
            } else {
                check.pending.push(expectation.clone());
                check.next_deadline =
                    Some(check.next_deadline.map_or(*deadline, |d| d.min(*deadline)));
                true
            }
        });
        if list.is_empty() {
            self.by_owner.remove(owner);
        }
        check
    }

    /// Drops one expectation: the write it stood for failed, so its effect will never show.
    pub fn withdraw(&mut self, owner: &str, expectation: &Expectation) {
        if let Some(list) = self.by_owner.get_mut(owner) {
            list.retain(|(e, _)| e != expectation);
            if list.is_empty() {
                self.by_owner.remove(owner);
            }
        }
    }

    /// Forgets an owner (it was deleted).
    pub fn forget(&mut self, owner: &str) {
        self.by_owner.remove(owner);
    }

    /// The number of pending expectations over all owners (a gauge).
    pub fn len(&self) -> usize {
        self.by_owner.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_owner.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state<'a>(uid: &'a str, rv: &'a str, deleting: bool) -> Option<CachedState<'a>> {
        Some(CachedState {
            uid: Some(uid),
            resource_version: Some(rv),
            deleting,
        })
    }

    #[test]
    fn satisfied_by_table() {
        let exists = Expectation::exists("Pod", "a");
        let gone = Expectation::gone("Pod", "a", Some("u1".into()));
        let gone_any = Expectation::gone("Pod", "a", None);
        let seen = Expectation::observed("Pod", "a", "100");
        let cases: Vec<(&Expectation, Option<CachedState<'_>>, bool)> = vec![
            (&exists, None, false),
            (&exists, state("u1", "5", false), true),
            (&gone, None, true),
            (&gone, state("u1", "5", false), false),
            (&gone, state("u1", "5", true), true),
            (&gone, state("u2", "5", false), true),
            (&gone_any, state("u2", "5", false), false),
            (&seen, state("u1", "99", false), false),
            (&seen, state("u1", "100", false), true),
            (&seen, state("u1", "101", false), true),
            (&seen, None, true),
        ];
        for (i, (e, cached, want)) in cases.into_iter().enumerate() {
            assert_eq!(e.satisfied_by(cached), want, "case {i}: {e:?}");
        }
        assert!(resource_version_at_least(Some("abc"), "abc"));
        assert!(!resource_version_at_least(Some("abd"), "abc"));
        assert!(!resource_version_at_least(None, "1"));
    }

    #[test]
    fn pending_until_satisfied() {
        let t0 = Instant::now();
        let mut ex = Expectations::new(Duration::from_secs(60));
        ex.expect("ns/cs", Expectation::exists("Pod", "a"), t0);
        ex.expect("ns/cs", Expectation::exists("Pod", "b"), t0);
        let check = ex.check("ns/cs", t0 + Duration::from_secs(1), |e| e.name == "a");
        assert_eq!(check.pending, vec![Expectation::exists("Pod", "b")]);
        assert_eq!(check.next_deadline, Some(t0 + Duration::from_secs(60)));
        assert!(!check.satisfied());
        let check = ex.check("ns/cs", t0 + Duration::from_secs(2), |_| true);
        assert!(check.satisfied() && check.expired.is_empty());
        assert!(ex.is_empty());
        // Other owners are independent.
        assert!(ex.check("ns/other", t0, |_| false).satisfied());
    }

    /// kruise#1765: an expectation the cache never satisfies must not stall the controller.
    #[test]
    fn a_leaked_expectation_expires() {
        let t0 = Instant::now();
        let mut ex = Expectations::new(Duration::from_secs(30));
        ex.expect("ns/cs", Expectation::exists("Pod", "lost"), t0);
        let before = ex.check("ns/cs", t0 + Duration::from_secs(29), |_| false);
        assert_eq!(before.pending.len(), 1);
        let after = ex.check("ns/cs", t0 + Duration::from_secs(30), |_| false);
        assert!(after.satisfied());
        assert_eq!(after.expired, vec![Expectation::exists("Pod", "lost")]);
        assert_eq!(ex.len(), 0);
    }

    #[test]
    fn raising_again_renews_the_deadline() {
        let t0 = Instant::now();
        let mut ex = Expectations::new(Duration::from_secs(10));
        let e = Expectation::observed("Pod", "a", "7");
        ex.expect("k", e.clone(), t0);
        ex.expect("k", e.clone(), t0 + Duration::from_secs(8));
        assert_eq!(ex.len(), 1);
        let check = ex.check("k", t0 + Duration::from_secs(12), |_| false);
        assert_eq!(check.pending, vec![e.clone()]);
        ex.withdraw("k", &e);
        assert!(ex.is_empty());
        ex.expect("k", e.clone(), t0);
        ex.forget("k");
        assert!(ex.is_empty());
    }
}
