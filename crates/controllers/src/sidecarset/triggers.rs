//! Which SidecarSets a Pod change concerns, and how often each is reconciled.
//!
//! A SidecarSet reconcile looks at every Pod it selects, so reconciling it on every event of every
//! Pod costs O(Pods) per event: creating thousands of Pods would keep the manager busy (and starve
//! the Pod webhook that shares its runtime). Three filters keep that in check:
//! - scope: only SidecarSets whose selector and namespaceSelector both match the Pod;
//! - relevance: only changes to what the controller reads (labels, annotations, images, container
//!   statuses, readiness, the `SidecarSetUpgradable` condition, phase, deletion), compared through a
//!   fingerprint per Pod;
//! - a throttle: at most one reconcile per SidecarSet per interval while events keep coming (the
//!   first goes at once, the rest are folded into one at the end of the interval).

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::sidecarset::CONDITION_SIDECARSET_UPGRADABLE;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_core::sidecarset::{namespace_or_default, selects_by};
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, CacheEvents, PodCache, PodKey, PodLabels};

/// Minimum time between two reconciles of one SidecarSet caused by Pod events.
pub(super) const THROTTLE: Duration = Duration::from_millis(250);

/// Whether a change of the Pod with `labels` in `namespace` concerns `ss`: its selector and
/// namespaceSelector take the Pod in, whether the Pod is active or not, so that deletions are seen
/// too.
pub(super) fn concerns(
    ss: &SidecarSet,
    namespace: &str,
    labels: &PodLabels,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let none = BTreeMap::new();
    selects_by(
        ss,
        namespace,
        |key| labels.get(key),
        namespace_labels.unwrap_or(&none),
    )
}

/// A digest of what the SidecarSet controller reads from a Pod. Two versions of a Pod with the same
/// fingerprint look the same to it (a heartbeat-like status rewrite, a new resourceVersion alone).
pub(super) fn fingerprint(pod: &Pod) -> u64 {
    let mut h = DefaultHasher::new();
    let meta = &pod.metadata;
    meta.uid.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    if let Some(spec) = &pod.spec {
        spec.node_name.hash(&mut h);
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            (&c.name, &c.image).hash(&mut h);
        }
    }
    if let Some(status) = &pod.status {
        status.phase.hash(&mut h);
        kruise_core::pods::condition(pod, "Ready")
            .map(|c| c.status.as_str())
            .hash(&mut h);
        // The SidecarSets' own condition: a change by someone else is put right (level-triggered).
        kruise_core::pods::condition(pod, CONDITION_SIDECARSET_UPGRADABLE)
            .map(|c| (c.status.as_str(), c.message.as_deref()))
            .hash(&mut h);
        for s in status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
        {
            (
                &s.name,
                &s.image,
                &s.image_id,
                s.ready,
                s.restart_count,
                s.started,
            )
                .hash(&mut h);
        }
    }
    h.finish()
}

/// Leading-edge throttle per key: the first offer after a quiet interval goes at once; offers
/// within the interval are folded into one that [`Throttle::due`] releases when it ends.
#[derive(Debug)]
pub(super) struct Throttle {
    interval: Duration,
    last: HashMap<String, Instant>,
    pending: BTreeSet<String>,
}

impl Throttle {
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: HashMap::new(),
            pending: BTreeSet::new(),
        }
    }

    /// Whether `key` may go now; if not, it is kept for [`Throttle::due`].
    pub(super) fn offer(&mut self, key: &str, now: Instant) -> bool {
        if self.pending.contains(key) {
            return false;
        }
        match self.last.get(key) {
            Some(&at) if now.saturating_duration_since(at) < self.interval => {
                self.pending.insert(key.to_owned());
                false
            }
            _ => {
                self.last.insert(key.to_owned(), now);
                true
            }
        }
    }

    /// The kept keys whose interval has ended, now released.
    pub(super) fn due(&mut self, now: Instant) -> Vec<String> {
        let interval = self.interval;
        let last = &mut self.last;
        let mut released = Vec::new();
        self.pending.retain(|key| {
            let ready = last
                .get(key)
                .is_none_or(|&at| now.saturating_duration_since(at) >= interval);
            if ready {
                last.insert(key.clone(), now);
                released.push(key.clone());
            }
            !ready
        });
        // Forget quiet keys, so that deleted SidecarSets do not accumulate.
        last.retain(|_, at| now.saturating_duration_since(*at) < interval * 4);
        released
    }
}

/// Turns Pod cache events into reconcile requests for the SidecarSets they concern, until the cache
/// or the controller goes away.
pub(super) async fn run(
    mut events: CacheEvents,
    pods: Arc<PodCache>,
    sidecarsets: Store<SidecarSet>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    tx: mpsc::UnboundedSender<ObjectRef<SidecarSet>>,
) {
    // Keyed by the cache's own key, shared: no strings of its own per Pod.
    let mut seen: HashMap<Arc<PodKey>, u64> = HashMap::new();
    let mut throttle = Throttle::new(THROTTLE);
    let mut tick = tokio::time::interval(THROTTLE / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let send = |name: &str| tx.send(ObjectRef::new(name)).is_ok();
    loop {
        let change = tokio::select! {
            event = events.recv() => match event {
                Some(CacheEvent::Pod(change)) => change,
                Some(CacheEvent::Resync) => {
                    // Changes may have been missed: every SidecarSet looks again.
                    seen.clear();
                    for ss in sidecarsets.state() {
                        if throttle.offer(&ss_name(&ss), Instant::now())
                            && !send(&ss_name(&ss))
                        {
                            return;
                        }
                    }
                    continue;
                }
                Some(CacheEvent::Owner(_)) => continue,
                None => return,
            },
            _ = tick.tick() => {
                for name in throttle.due(Instant::now()) {
                    if !send(&name) {
                        return;
                    }
                }
                continue;
            }
        };
        let key = &*change.key;
        let namespace = namespace_or_default(Some(&key.0));
        let ns_labels = namespaces
            .get(&ObjectRef::new(namespace))
            .and_then(|n| n.metadata.labels.clone());
        // By labels alone, before the Pod is read: most Pods concern no SidecarSet.
        let concerned: Vec<String> = sidecarsets
            .state()
            .iter()
            .filter(|ss| concerns(ss, namespace, &change.labels, ns_labels.as_ref()))
            .map(|ss| ss_name(ss))
            .collect();
        if concerned.is_empty() {
            seen.remove(key);
            continue;
        }
        // The Pod as cached now (a later version than the event's if this task fell behind: the
        // later event then finds nothing new). Gone from the cache, or another Pod of the same name
        // by now, means deleted.
        let current = match change.deleted {
            true => None,
            false => pods
                .get(&key.0, &key.1)
                .filter(|cached| cached.metadata.uid.as_deref() == change.uid.as_deref()),
        };
        match current {
            None => {
                seen.remove(key);
            }
            Some(pod) => {
                let print = fingerprint(&pod);
                if seen.insert(change.key.clone(), print) == Some(print) {
                    continue;
                }
            }
        }
        let now = Instant::now();
        for name in concerned {
            if throttle.offer(&name, now) && !send(&name) {
                return;
            }
        }
    }
}

fn ss_name(ss: &SidecarSet) -> String {
    ss.metadata.name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut value = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "web"},
                "resourceVersion": "1"},
            "spec": {"containers": [{"name": "main", "image": "m:1"}, {"name": "log", "image": "l:1"}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "m:1", "imageID": "m@1", "ready": true, "restartCount": 0},
                                      {"name": "log", "image": "l:1", "imageID": "l@1", "ready": true, "restartCount": 0}]},
        });
        json_patch::merge(&mut value, &extra);
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn fingerprint_sees_what_the_controller_reads() {
        let base = fingerprint(&pod(json!({})));
        // (change, seen by the controller)
        let cases = [
            (json!({"metadata": {"resourceVersion": "2"}}), false),
            (json!({"status": {"podIP": "10.0.0.9"}}), false),
            (json!({"metadata": {"labels": {"canary": "true"}}}), true),
            (
                json!({"metadata": {"annotations": {"kruise.io/sidecarset-hash": "{}"}}}),
                true,
            ),
            (
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
                true,
            ),
            (json!({"spec": {"nodeName": "n1"}}), true),
            (json!({"status": {"phase": "Failed"}}), true),
            (
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                true,
            ),
            (
                json!({"status": {"containerStatuses": [{"name": "main", "image": "m:1", "imageID": "m@1", "ready": true, "restartCount": 0},
                                                         {"name": "log", "image": "l:2", "imageID": "l@2", "ready": true, "restartCount": 1}]}}),
                true,
            ),
        ];
        for (change, seen) in cases {
            assert_eq!(fingerprint(&pod(change.clone())) != base, seen, "{change}");
        }
    }

    fn sidecarset(extra: serde_json::Value) -> SidecarSet {
        let mut value = json!({
            "metadata": {"name": "s"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
        });
        json_patch::merge(&mut value, &extra);
        serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn concerns_needs_both_selectors() {
        let team = BTreeMap::from([("team".to_string(), "a".to_string())]);
        // (SidecarSet, namespace labels, concerned)
        let cases = [
            (sidecarset(json!({})), None, true),
            (
                sidecarset(json!({"spec": {"selector": {"matchLabels": {"app": "db"}}}})),
                None,
                false,
            ),
            (
                sidecarset(json!({"spec": {"namespaceSelector": {"matchLabels": {"team": "a"}}}})),
                Some(&team),
                true,
            ),
            (
                sidecarset(json!({"spec": {"namespaceSelector": {"matchLabels": {"team": "a"}}}})),
                None,
                false,
            ),
            // The name label is implied, as the apiserver always sets it.
            (
                sidecarset(
                    json!({"spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ns"}}}}),
                ),
                None,
                true,
            ),
        ];
        let web = PodLabels::from(&BTreeMap::from([("app".to_string(), "web".to_string())]));
        for (ss, labels, want) in cases {
            assert_eq!(concerns(&ss, "ns", &web, labels), want, "{:?}", ss.spec);
        }
    }

    #[test]
    fn throttle_releases_one_per_interval() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut t = Throttle::new(Duration::from_millis(100));
        assert!(t.offer("a", at(0)), "the first goes at once");
        assert!(!t.offer("a", at(10)));
        assert!(!t.offer("a", at(20)), "folded");
        assert!(t.offer("b", at(20)), "keys are independent");
        assert_eq!(t.due(at(50)), Vec::<String>::new());
        assert_eq!(t.due(at(100)), vec!["a".to_string()]);
        assert_eq!(t.due(at(150)), Vec::<String>::new(), "released once");
        assert!(
            !t.offer("a", at(150)),
            "still within the interval of the release"
        );
        assert_eq!(t.due(at(200)), vec!["a".to_string()]);
        assert!(t.offer("a", at(500)), "quiet again: at once");
    }
}
