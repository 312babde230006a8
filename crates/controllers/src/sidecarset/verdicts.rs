//! What one SidecarSet makes of each Pod it selects — managed (with its upgrade facts), missing its
//! sidecars, or neither — remembered between reconciles.
//!
//! Working this out parses several annotations per Pod; a SidecarSet selecting thousands of Pods
//! would redo it for all of them on every reconcile although only a few changed. A verdict stays
//! valid while the Pod's resourceVersion and the SidecarSet's generation are the ones it was
//! computed for (a SidecarSet's hashes change only with its spec).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_core::sidecarset::upgrade::PodFacts;

use crate::cache::{ResourceVersion, Selected};

/// One Pod as seen by one SidecarSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Injected and carrying every sidecar: counted in the status and upgraded.
    Managed(PodFacts),
    /// Should have been injected at creation but was not.
    Missed,
    /// Selected by labels only (another namespace, inactive, older than the SidecarSet, …).
    Neither,
}

/// A Pod that tells which one it is and at which version without being decoded.
pub(super) trait Versioned {
    fn uid(&self) -> Option<&str>;
    fn resource_version(&self) -> Option<&str>;
    /// The Pod, for one read: the verdict is remembered, the Pod need not be.
    fn read(&self) -> Arc<Pod>;
}

impl Versioned for Selected {
    fn uid(&self) -> Option<&str> {
        self.version().uid()
    }
    fn resource_version(&self) -> Option<&str> {
        self.version().resource_version()
    }
    fn read(&self) -> Arc<Pod> {
        self.read_once()
    }
}

/// Pods built by hand (tests) say their version in their metadata.
#[cfg(test)]
impl Versioned for std::sync::Arc<Pod> {
    fn uid(&self) -> Option<&str> {
        self.metadata.uid.as_deref()
    }
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn read(&self) -> Arc<Pod> {
        self.clone()
    }
}

/// The remembered verdicts of one SidecarSet.
#[derive(Debug, Default)]
pub(super) struct Memo {
    /// The SidecarSet (uid, generation) the verdicts were computed for.
    owner: (Option<String>, Option<i64>),
    /// Pod uid → what was decided, at which Pod resourceVersion, last confirmed in which round.
    pods: HashMap<Box<str>, Remembered>,
    round: u64,
}

#[derive(Debug)]
struct Remembered {
    /// Inline: a Pod's new version allocates nothing here (see `cache::Version`).
    resource_version: ResourceVersion,
    verdict: Verdict,
    round: u64,
}

impl Memo {
    /// The verdict of every Pod in `pods`, from memory where the Pod has not changed (without
    /// reading it), else from `judge` (and remembered). Pods not in `pods` are forgotten.
    pub(super) fn verdicts<'p, P: Versioned + 'p>(
        &mut self,
        ss: &SidecarSet,
        pods: impl IntoIterator<Item = &'p P>,
        judge: impl Fn(&Pod) -> Verdict,
    ) -> Vec<Verdict> {
        let owner = (ss.metadata.uid.clone(), ss.metadata.generation);
        if self.owner != owner {
            self.owner = owner;
            self.pods.clear();
        }
        self.round += 1;
        let round = self.round;
        let verdicts = pods
            .into_iter()
            .map(|pod| {
                let (Some(uid), Some(rv)) = (pod.uid(), pod.resource_version()) else {
                    return judge(&pod.read());
                };
                match self.pods.get_mut(uid) {
                    Some(known) if known.resource_version.as_str() == rv => {
                        known.round = round;
                        known.verdict
                    }
                    known => {
                        let verdict = judge(&pod.read());
                        let remembered = Remembered {
                            resource_version: ResourceVersion::new(rv),
                            verdict,
                            round,
                        };
                        // The uid is allocated once, when the Pod is first seen.
                        match known {
                            Some(known) => *known = remembered,
                            None => {
                                self.pods.insert(uid.into(), remembered);
                            }
                        }
                        verdict
                    }
                }
            })
            .collect();
        self.pods.retain(|_, known| known.round == round);
        verdicts
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::Arc;

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str, rv: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        })
    }

    fn sidecarset(generation: i64) -> SidecarSet {
        let mut ss = SidecarSet::new("s", Default::default());
        ss.metadata.uid = Some("ss".into());
        ss.metadata.generation = Some(generation);
        ss
    }

    #[test]
    fn judges_only_what_changed() {
        let judged = Cell::new(0);
        let judge = |_: &Pod| {
            judged.set(judged.get() + 1);
            Verdict::Missed
        };
        let mut memo = Memo::default();
        let v1 = sidecarset(1);
        // (Pods, SidecarSet, Pods judged anew)
        let rounds = [
            (vec![pod("a", "1"), pod("b", "1")], &v1, 2),
            (vec![pod("a", "1"), pod("b", "1")], &v1, 0),
            (vec![pod("a", "2"), pod("b", "1")], &v1, 1),
            // b left and came back: judged again.
            (vec![pod("a", "2")], &v1, 0),
            (vec![pod("a", "2"), pod("b", "1")], &v1, 1),
        ];
        for (i, (pods, ss, want)) in rounds.into_iter().enumerate() {
            judged.set(0);
            let verdicts = memo.verdicts(ss, &pods, judge);
            assert_eq!(verdicts.len(), pods.len());
            assert_eq!(judged.get(), want, "round {i}");
        }
        // A new generation of the SidecarSet judges everything again.
        judged.set(0);
        memo.verdicts(&sidecarset(2), &[pod("a", "2"), pod("b", "1")], judge);
        assert_eq!(judged.get(), 2);
    }

    #[test]
    fn remembered_pods_are_not_decoded_and_judged_ones_not_kept() {
        use crate::cache::PodCache;
        use kube::runtime::watcher;

        let cache = PodCache::new();
        let cached = |name: &str, rv: &str| {
            let mut pod = (*pod(name, rv)).clone();
            pod.metadata.name = Some(name.into());
            pod.metadata.namespace = Some("ns".into());
            pod
        };
        cache.apply(watcher::Event::Init);
        for name in ["a", "b", "c"] {
            cache.apply(watcher::Event::InitApply(cached(name, "1")));
        }
        cache.apply(watcher::Event::InitDone);
        let mut memo = Memo::default();
        let ss = sidecarset(1);
        let judged = std::cell::RefCell::new(Vec::<String>::new());
        let judge = |pod: &Pod| {
            judged
                .borrow_mut()
                .push(pod.metadata.name.clone().unwrap_or_default());
            Verdict::Neither
        };
        // (Pod changed before the round, Pods decoded in the round)
        let rounds = [
            (None, vec!["a", "b", "c"]),
            (None, vec![]),
            (Some("b"), vec!["b"]),
            (None, vec![]),
        ];
        for (i, (changed, want)) in rounds.into_iter().enumerate() {
            if let Some(name) = changed {
                cache.apply(watcher::Event::Apply(cached(name, "2")));
            }
            judged.borrow_mut().clear();
            let selected = cache.select_lazily(None, |_| true);
            let verdicts = memo.verdicts(&ss, &selected, judge);
            assert_eq!(verdicts.len(), 3, "round {i}");
            let mut names = judged.borrow().clone();
            names.sort();
            assert_eq!(names, want, "round {i}");
            // A Pod read for its verdict is not kept decoded for the rest of the reconcile.
            assert!(selected.iter().all(|s| !s.is_decoded()), "round {i}");
        }
    }
}
