use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;

use proptest::prelude::*;

use super::*;

fn key(namespace: Option<&str>, name: &str) -> Key {
    (namespace.map(str::to_string), name.to_string())
}

/// A version known by its resourceVersion alone.
fn rv(resource_version: impl ToString) -> Version {
    Version {
        resource_version: resource_version.to_string(),
        ..Version::default()
    }
}

fn cache(objects: &[(Option<&str>, &str, &str)]) -> HashMap<Key, Version> {
    objects
        .iter()
        .map(|(ns, name, version)| (key(*ns, name), rv(version)))
        .collect()
}

fn listing(resource_version: &str, items: &[(Option<&str>, &str, &str)]) -> Listing {
    Listing {
        resource_version: resource_version.into(),
        items: items
            .iter()
            .map(|(ns, name, version)| (key(*ns, name), rv(version)))
            .collect(),
    }
}

#[test]
fn covers_table() {
    let v = |rv: &str, generation: Option<i64>, uid: Option<&str>| Version {
        resource_version: rv.into(),
        generation,
        uid: uid.map(str::to_string),
    };
    let cases = [
        (
            "the same resourceVersion",
            v("5", None, None),
            v("5", None, None),
            true,
        ),
        (
            "a newer resourceVersion",
            v("6", Some(1), Some("a")),
            v("5", Some(2), Some("a")),
            true,
        ),
        (
            "an older resourceVersion, nothing else known",
            v("4", None, None),
            v("5", None, None),
            false,
        ),
        (
            "only the status changed since",
            v("4", Some(2), Some("a")),
            v("5", Some(2), Some("a")),
            true,
        ),
        (
            "the spec changed since",
            v("4", Some(1), Some("a")),
            v("5", Some(2), Some("a")),
            false,
        ),
        (
            "deleted and created again under the name",
            v("4", Some(3), Some("a")),
            v("5", Some(1), Some("b")),
            false,
        ),
        (
            "generation without uid proves nothing",
            v("4", Some(2), None),
            v("5", Some(2), None),
            false,
        ),
        (
            "uid without generation proves nothing",
            v("4", None, Some("a")),
            v("5", None, Some("a")),
            false,
        ),
    ];
    for (name, cached, listed, want) in cases {
        assert_eq!(cached.covers(&listed), want, "{name}");
    }
}

#[test]
fn compare_table() {
    type Objects<'a> = &'a [(Option<&'a str>, &'a str, &'a str)];
    struct Case<'a> {
        name: &'a str,
        cached: Objects<'a>,
        progress: Option<u64>,
        list_version: &'a str,
        listed: Objects<'a>,
        namespace: Option<&'a str>,
        want: Verdict,
    }
    let ss = |name: &str| key(None, name);
    let cases = [
        Case {
            name: "nothing anywhere",
            cached: &[],
            progress: None,
            list_version: "10",
            listed: &[],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "the same objects at the same versions",
            cached: &[(None, "a", "5"), (None, "b", "7")],
            progress: Some(7),
            list_version: "10",
            listed: &[(None, "a", "5"), (None, "b", "7")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "a created object the cache has not seen",
            cached: &[(None, "a", "5")],
            progress: Some(5),
            list_version: "10",
            listed: &[(None, "a", "5"), (None, "new", "9")],
            namespace: None,
            want: Verdict::Behind(ss("new")),
        },
        Case {
            name: "an updated object cached at its old version",
            cached: &[(None, "a", "5")],
            progress: Some(5),
            list_version: "10",
            listed: &[(None, "a", "8")],
            namespace: None,
            want: Verdict::Behind(ss("a")),
        },
        Case {
            name: "versions compare as numbers, not strings",
            cached: &[(None, "a", "10")],
            progress: Some(10),
            list_version: "10",
            listed: &[(None, "a", "9")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "the cache newer than the list",
            cached: &[(None, "a", "12"), (None, "later", "13")],
            progress: Some(13),
            list_version: "10",
            listed: &[(None, "a", "5")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "a deleted object still cached",
            cached: &[(None, "a", "5"), (None, "gone", "6")],
            progress: Some(6),
            list_version: "10",
            listed: &[(None, "a", "5")],
            namespace: None,
            want: Verdict::DeletedPending(ss("gone")),
        },
        Case {
            name: "an object deleted after the list, the deletion seen",
            cached: &[(None, "a", "5")],
            progress: Some(11),
            list_version: "10",
            listed: &[(None, "a", "5"), (None, "gone", "9")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "a listed object missing, the watch short of its version",
            cached: &[(None, "a", "5")],
            progress: Some(8),
            list_version: "10",
            listed: &[(None, "a", "5"), (None, "b", "9")],
            namespace: None,
            want: Verdict::Behind(ss("b")),
        },
        Case {
            name: "opaque versions: equal is caught up",
            cached: &[(None, "a", "x1")],
            progress: None,
            list_version: "x9",
            listed: &[(None, "a", "x1")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "opaque versions: different is behind",
            cached: &[(None, "a", "x1")],
            progress: None,
            list_version: "x9",
            listed: &[(None, "a", "x2")],
            namespace: None,
            want: Verdict::Behind(ss("a")),
        },
        Case {
            name: "opaque versions: an unlisted object cannot be proved deleted",
            cached: &[(None, "a", "x1"), (None, "b", "x0")],
            progress: None,
            list_version: "x9",
            listed: &[(None, "a", "x1")],
            namespace: None,
            want: Verdict::CaughtUp,
        },
        Case {
            name: "another namespace behind does not count",
            cached: &[(Some("ns"), "a", "5"), (Some("other"), "gone", "3")],
            progress: Some(5),
            list_version: "10",
            listed: &[(Some("ns"), "a", "5"), (Some("other"), "new", "9")],
            namespace: Some("ns"),
            want: Verdict::CaughtUp,
        },
        Case {
            name: "the namespace's own lag counts",
            cached: &[(Some("ns"), "a", "5")],
            progress: Some(5),
            list_version: "10",
            listed: &[(Some("ns"), "a", "5"), (Some("ns"), "new", "9")],
            namespace: Some("ns"),
            want: Verdict::Behind(key(Some("ns"), "new")),
        },
        Case {
            name: "the namespace's own deletion counts",
            cached: &[(Some("ns"), "a", "5"), (Some("ns"), "gone", "4")],
            progress: Some(5),
            list_version: "10",
            listed: &[(Some("ns"), "a", "5")],
            namespace: Some("ns"),
            want: Verdict::DeletedPending(key(Some("ns"), "gone")),
        },
    ];
    for case in cases {
        let got = compare(
            &cache(case.cached),
            case.progress,
            &listing(case.list_version, case.listed),
            case.namespace,
        );
        assert_eq!(got, case.want, "{}", case.name);
    }
}

/// What one write of the cluster does to the policy kind.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Creates the object (a new uid, generation 1) or changes its spec (generation + 1).
    Spec,
    /// Changes its status (or labels): a new resourceVersion, the same generation.
    Status,
    Delete,
    /// Another kind's write: the revision moves on, this kind does not change.
    Elsewhere,
}

/// One write: `(namespace, name)` changed; its resourceVersion is its position in the history
/// (etcd's revision, shared with other kinds, so gaps are the norm).
#[derive(Clone, Debug)]
struct Write {
    namespace: u8,
    name: u8,
    change: Change,
}

fn writes() -> impl Strategy<Value = Vec<Write>> {
    let change = prop_oneof![
        3 => Just(Change::Spec),
        3 => Just(Change::Status),
        2 => Just(Change::Delete),
        1 => Just(Change::Elsewhere),
    ];
    prop::collection::vec(
        (0u8..2, 0u8..4, change).prop_map(|(namespace, name, change)| Write {
            namespace,
            name,
            change,
        }),
        0..40,
    )
}

/// The kind's objects once the writes up to revision `at` applied.
fn state_at(history: &[Write], at: usize) -> BTreeMap<Key, Version> {
    let mut state: BTreeMap<Key, Version> = BTreeMap::new();
    for (i, write) in history.iter().enumerate().take(at) {
        let key = (
            Some(format!("ns-{}", write.namespace)),
            format!("p-{}", write.name),
        );
        let revision = (i + 1).to_string();
        match (write.change, state.get_mut(&key)) {
            (Change::Elsewhere, _) | (Change::Status, None) => {}
            (Change::Delete, _) => {
                state.remove(&key);
            }
            (Change::Spec, None) => {
                let created = Version {
                    resource_version: revision.clone(),
                    generation: Some(1),
                    uid: Some(format!("uid-{revision}")),
                };
                state.insert(key, created);
            }
            (Change::Spec, Some(object)) => {
                object.resource_version = revision;
                object.generation = object.generation.map(|g| g + 1);
            }
            (Change::Status, Some(object)) => object.resource_version = revision,
        }
    }
    state
}

/// What of a state an admission reads (each object's identity and spec), in `namespace`.
fn spec_view(
    state: &BTreeMap<Key, Version>,
    namespace: Option<&str>,
) -> BTreeMap<Key, (Option<i64>, Option<String>)> {
    state
        .iter()
        .filter(|(k, _)| namespace.is_none_or(|ns| k.0.as_deref() == Some(ns)))
        .map(|(k, v)| (k.clone(), (v.generation, v.uid.clone())))
        .collect()
}

proptest! {
    /// A cache that has seen the writes up to revision `seen`, against a list at revision
    /// `listed`, is caught up exactly when it is not older than the list or shows the same
    /// objects at the same specs; knowing less of its watch's progress (down to its objects'
    /// newest version) it may wait more, never less.
    #[test]
    fn compare_is_caught_up_exactly_when_nothing_listed_is_missed(
        history in writes(),
        seen in 0usize..45,
        listed in 0usize..45,
        scope in prop::option::of(0u8..2),
        known in 0.0f64..=1.0,
    ) {
        let (seen, listed) = (seen.min(history.len()), listed.min(history.len()));
        let namespace = scope.map(|n| format!("ns-{n}"));
        let namespace = namespace.as_deref();
        let cached_state = state_at(&history, seen);
        let listed_state = state_at(&history, listed);
        let list = Listing {
            resource_version: listed.to_string(),
            items: listed_state.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        };
        let cached: HashMap<Key, Version> = cached_state.clone().into_iter().collect();
        let truth = seen >= listed
            || spec_view(&cached_state, namespace) == spec_view(&listed_state, namespace);
        let exact = compare(&cached, Some(seen as u64), &list, namespace);
        prop_assert_eq!(exact == Verdict::CaughtUp, truth, "{:?}", exact);
        // What the store alone shows of the progress, up to the exact figure.
        let floor = cached_state
            .values()
            .filter_map(|v| v.resource_version.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let partial = floor + ((seen as u64).saturating_sub(floor) as f64 * known) as u64;
        let progress = (partial > 0).then_some(partial);
        if compare(&cached, progress, &list, namespace) == Verdict::CaughtUp {
            prop_assert!(truth);
        }
    }

    #[test]
    fn at_least_is_numeric_order_or_equality(a in any::<u64>(), b in any::<u64>(), s in "[a-z]{1,3}") {
        prop_assert_eq!(at_least(&a.to_string(), &b.to_string()), a >= b);
        prop_assert!(at_least(&s, &s));
        prop_assert!(!at_least(&s, &a.to_string()));
    }
}

/// A cache the tests fill by hand.
#[derive(Default)]
struct FakeCache {
    objects: Mutex<HashMap<Key, Version>>,
    progress: AtomicU64,
    changed: Mutex<Option<watch::Sender<u64>>>,
}

impl FakeCache {
    fn new() -> Arc<Self> {
        let this = Self::default();
        *this.changed.lock().expect("lock") = Some(watch::Sender::new(0));
        Arc::new(this)
    }

    fn notify(&self) {
        if let Some(tx) = self.changed.lock().expect("lock").as_ref() {
            tx.send_modify(|n| *n += 1);
        }
    }

    fn set(&self, key: Key, version: u64) {
        self.objects.lock().expect("lock").insert(key, rv(version));
        self.progress.fetch_max(version, Ordering::SeqCst);
        self.notify();
    }

    fn delete(&self, key: &Key, version: u64) {
        self.objects.lock().expect("lock").remove(key);
        self.progress.fetch_max(version, Ordering::SeqCst);
        self.notify();
    }
}

impl CacheView for FakeCache {
    fn versions(&self, namespace: Option<&str>) -> HashMap<Key, Version> {
        self.objects
            .lock()
            .expect("lock")
            .iter()
            .filter(|(k, _)| namespace.is_none_or(|ns| k.0.as_deref() == Some(ns)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn progress(&self) -> Option<u64> {
        Some(self.progress.load(Ordering::SeqCst)).filter(|p| *p > 0)
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        let rx = self
            .changed
            .lock()
            .expect("lock")
            .as_ref()
            .map(watch::Sender::subscribe);
        match rx {
            Some(rx) => futures::stream::unfold(rx, |mut rx| async move {
                rx.changed().await.ok().map(|()| ((), rx))
            })
            .boxed(),
            None => futures::stream::empty().boxed(),
        }
    }
}

/// An apiserver of one kind: its objects, the lists it answered, and how long a list takes. A
/// list shows the objects as they were when it started.
struct FakeApi {
    objects: Mutex<Listing>,
    lists: AtomicUsize,
    /// When each list started.
    starts: Mutex<Vec<Instant>>,
    latency: Duration,
    fail: bool,
}

impl FakeApi {
    fn new(latency: Duration) -> Arc<Self> {
        Arc::new(Self {
            objects: Mutex::new(Listing {
                resource_version: "1".into(),
                items: Vec::new(),
            }),
            lists: AtomicUsize::new(0),
            starts: Mutex::default(),
            latency,
            fail: false,
        })
    }

    /// Creates `key` at the next revision; returns it.
    fn create(&self, key: Key) -> u64 {
        let mut objects = self.objects.lock().expect("lock");
        let version = objects.resource_version.parse::<u64>().unwrap_or(0) + 1;
        objects.resource_version = version.to_string();
        objects.items.push((key, rv(version)));
        version
    }

    fn lister(self: &Arc<Self>) -> Lister {
        let api = self.clone();
        Arc::new(move || {
            let api = api.clone();
            async move {
                api.lists.fetch_add(1, Ordering::SeqCst);
                api.starts.lock().expect("lock").push(Instant::now());
                let snapshot = api.objects.lock().expect("lock").clone();
                tokio::time::sleep(api.latency).await;
                if api.fail {
                    return Err("the apiserver said no".to_string());
                }
                Ok(snapshot)
            }
            .boxed()
        })
    }
}

fn freshness(wait: Duration, cache: &Arc<FakeCache>, api: &Arc<FakeApi>) -> Freshness {
    Freshness::new(wait, FreshnessMetrics::default()).track(
        PolicyKind::SidecarSet,
        cache.clone(),
        api.lister(),
    )
}

const SS: &[(PolicyKind, Option<&str>)] = &[(PolicyKind::SidecarSet, None)];

#[tokio::test]
async fn a_cache_caught_up_answers_after_one_list() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(5)));
    let version = api.create(key(None, "a"));
    cache.set(key(None, "a"), version);
    let check = freshness(Duration::from_secs(2), &cache, &api);
    let late = check.catch_up(SS, Instant::now()).await;
    assert!(late.is_empty(), "{late}");
    assert_eq!(api.lists.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn concurrent_admissions_share_lists() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(50)));
    let check = freshness(Duration::from_secs(2), &cache, &api);
    // The first starts a list; the others arrive while it runs and share the next one.
    let first = {
        let check = check.clone();
        tokio::spawn(async move { check.catch_up(SS, Instant::now()).await })
    };
    tokio::task::yield_now().await;
    let rest: Vec<_> = (0..30)
        .map(|_| {
            let check = check.clone();
            tokio::spawn(async move { check.catch_up(SS, Instant::now()).await })
        })
        .collect();
    assert!(first.await.expect("join").is_empty());
    for late in futures::future::join_all(rest).await {
        assert!(late.expect("join").is_empty());
    }
    assert_eq!(api.lists.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_admission_never_relies_on_a_list_that_started_before_it() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(100)));
    let check = freshness(Duration::from_secs(2), &cache, &api);
    // A list starts (for an earlier admission) while the cluster has no SidecarSet.
    let earlier = {
        let check = check.clone();
        tokio::spawn(async move { check.catch_up(SS, Instant::now()).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    // A SidecarSet's create returns; then a Pod arrives, while the first list is still out.
    let version = api.create(key(None, "logtail"));
    let arrived = Instant::now();
    let pod = {
        let check = check.clone();
        tokio::spawn(async move { check.catch_up(SS, arrived).await })
    };
    // The cache sees the SidecarSet only later.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pod.is_finished(),
        "the Pod was decided before its cache saw the SidecarSet"
    );
    cache.set(key(None, "logtail"), version);
    let late = pod.await.expect("join");
    assert!(late.is_empty(), "{late}");
    assert!(earlier.await.expect("join").is_empty());
    assert_eq!(api.lists.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_for_one_list_not_for_the_one_in_flight_too() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(100)));
    let check = freshness(Duration::from_secs(2), &cache, &api);
    let first = {
        let check = check.clone();
        tokio::spawn(async move { check.catch_up(SS, Instant::now()).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Arrives while the first list is out: its own starts now instead of after it.
    let arrived = Instant::now();
    assert!(check.catch_up(SS, arrived).await.is_empty());
    assert_eq!(arrived.elapsed(), Duration::from_millis(100));
    assert!(first.await.expect("join").is_empty());
    let starts = api.starts.lock().expect("lock").clone();
    assert_eq!(starts.len(), 2);
    assert!(
        starts[1] >= arrived,
        "served by a list that started before the request"
    );
}

#[tokio::test(start_paused = true)]
async fn rounds_are_spaced_and_bounded_under_a_steady_stream() {
    let latency = Duration::from_millis(300);
    let (cache, api) = (FakeCache::new(), FakeApi::new(latency));
    let check = freshness(Duration::from_secs(5), &cache, &api);
    let mut requests = Vec::new();
    for _ in 0..400 {
        let check = check.clone();
        let arrived = Instant::now();
        requests.push(tokio::spawn(async move {
            let late = check.catch_up(SS, arrived).await;
            (arrived.elapsed(), late)
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for request in requests {
        let (took, late) = request.await.expect("join");
        assert!(late.is_empty(), "{late}");
        // At most 4 lists in flight, one every 25 ms: a request waits for the next start (at most
        // 25 ms, or until one of the 4 ends) and that list.
        assert!(took <= latency * 2, "{took:?}");
    }
    let starts = api.starts.lock().expect("lock").clone();
    for pair in starts.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(25), "{pair:?}");
    }
    for (i, start) in starts.iter().enumerate() {
        let in_flight = starts[..=i]
            .iter()
            .filter(|s| *start - **s < latency)
            .count();
        assert!(in_flight <= 4, "{in_flight} lists in flight at {i}");
    }
    // 2 s of requests, 400 of them: 4 lists per 300 ms at most (4 in flight), plus the last round.
    assert!(
        starts.len() <= 4 * (2_000 / 300 + 2),
        "{} lists",
        starts.len()
    );
}

#[tokio::test]
async fn a_deletion_the_cache_has_not_seen_is_waited_for() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(1)));
    cache.set(key(None, "old"), 1);
    api.objects.lock().expect("lock").resource_version = "5".into();
    let check = freshness(Duration::from_secs(2), &cache, &api);
    let pod = {
        let check = check.clone();
        tokio::spawn(async move { check.catch_up(SS, Instant::now()).await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!pod.is_finished());
    cache.delete(&key(None, "old"), 5);
    assert!(pod.await.expect("join").is_empty());
}

#[tokio::test]
async fn a_cache_that_never_catches_up_is_reported_late_at_the_deadline() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(1)));
    api.create(key(None, "never"));
    let wait = Duration::from_millis(300);
    let check = freshness(wait, &cache, &api);
    let arrived = Instant::now();
    let late = check.catch_up(SS, arrived).await;
    let took = arrived.elapsed();
    assert!(
        took >= wait && took < wait + Duration::from_millis(200),
        "{took:?}"
    );
    assert_eq!(
        late.kinds,
        vec![(
            PolicyKind::SidecarSet,
            Lag::Timeout(Some(Verdict::Behind(key(None, "never"))))
        )]
    );
    assert!(late.includes(PolicyKind::SidecarSet));
    assert!(late.to_string().contains("SidecarSet: never"), "{late}");
}

#[tokio::test]
async fn a_list_that_fails_or_hangs_never_holds_an_admission_past_its_deadline() {
    let cache = FakeCache::new();
    let failing = Arc::new(FakeApi {
        fail: true,
        ..Arc::into_inner(FakeApi::new(Duration::from_millis(1))).expect("sole owner")
    });
    let late = freshness(Duration::from_secs(2), &cache, &failing)
        .catch_up(SS, Instant::now())
        .await;
    assert!(
        matches!(late.kinds.as_slice(), [(PolicyKind::SidecarSet, Lag::Error(e))] if e.contains("said no")),
        "{late:?}"
    );

    let hanging = FakeApi::new(Duration::from_secs(3600));
    let wait = Duration::from_millis(200);
    let check = freshness(wait, &cache, &hanging);
    let arrived = Instant::now();
    let late = check.catch_up(SS, arrived).await;
    assert!(arrived.elapsed() < wait + Duration::from_millis(200));
    // The list's own timeout is the wait too: whichever ends first.
    assert!(
        matches!(
            late.kinds.as_slice(),
            [(PolicyKind::SidecarSet, Lag::Timeout(None))]
        ) || matches!(
            late.kinds.as_slice(),
            [(PolicyKind::SidecarSet, Lag::Error(e))] if e.contains("took more than")
        ),
        "{late:?}"
    );
    // The hung list times out after the wait too: a later admission gets a list of its own.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = check.catch_up(SS, Instant::now()).await;
    assert_eq!(hanging.lists.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_round_outlives_the_admission_that_started_it() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(100)));
    let check = freshness(Duration::from_secs(2), &cache, &api);
    // The first admission is abandoned (the apiserver gave up on it) while its list runs.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(20),
        check.catch_up(SS, Instant::now()),
    )
    .await;
    assert!(abandoned.is_err());
    let late = check.catch_up(SS, Instant::now()).await;
    assert!(late.is_empty(), "{late}");
    assert_eq!(api.lists.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn kinds_not_tracked_are_not_checked_and_namespaces_are_scoped() {
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(1)));
    api.create(key(Some("other"), "behind"));
    let check = Freshness::new(Duration::from_millis(300), FreshnessMetrics::default()).track(
        PolicyKind::PodUnavailableBudget,
        cache.clone(),
        api.lister(),
    );
    let started = Instant::now();
    let late = check
        .catch_up(
            &[
                (PolicyKind::PodUnavailableBudget, Some("mine")),
                (PolicyKind::SidecarSet, None),
            ],
            started,
        )
        .await;
    assert!(late.is_empty(), "{late}");
    assert!(started.elapsed() < Duration::from_millis(250));
    let late = check
        .catch_up(
            &[(PolicyKind::PodUnavailableBudget, Some("other"))],
            Instant::now(),
        )
        .await;
    assert!(late.includes(PolicyKind::PodUnavailableBudget), "{late:?}");
}

#[tokio::test]
async fn until_wakes_on_changes_and_gives_up_at_the_deadline() {
    let cache = FakeCache::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    let waiting = {
        let cache = cache.clone();
        tokio::spawn(async move {
            let changes = cache.changes();
            until(changes, deadline, || {
                if cache.versions(None).is_empty() {
                    Err("empty")
                } else {
                    Ok(())
                }
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    cache.set(key(None, "x"), 3);
    let began = Instant::now();
    assert_eq!(waiting.await.expect("join"), Ok(()));
    assert!(
        began.elapsed() < Duration::from_millis(90),
        "woken by the change, not the poll"
    );
    let gave_up = until(
        futures::stream::empty().boxed(),
        Instant::now() + Duration::from_millis(50),
        || Err::<(), _>("never"),
    )
    .await;
    assert_eq!(gave_up, Err("never"));
}

#[tokio::test]
async fn checks_are_counted_by_kind_and_result() {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = crate::metrics::Metrics::register(&mut registry);
    let (cache, api) = (FakeCache::new(), FakeApi::new(Duration::from_millis(1)));
    api.create(key(None, "never"));
    let check = Freshness::new(Duration::from_millis(100), metrics.freshness.clone()).track(
        PolicyKind::SidecarSet,
        cache.clone(),
        api.lister(),
    );
    let _ = check.catch_up(SS, Instant::now()).await;
    cache.set(key(None, "never"), 2);
    let _ = check.catch_up(SS, Instant::now()).await;
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for line in [
        "kruise_webhook_freshness_probes_total{kind=\"SidecarSet\"} 2",
        "kruise_webhook_freshness_checks_total{kind=\"SidecarSet\",result=\"timeout\"} 1",
        "kruise_webhook_freshness_checks_total{kind=\"SidecarSet\",result=\"fresh\"} 1",
        "kruise_webhook_freshness_wait_seconds_count{kind=\"SidecarSet\"} 2",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}
