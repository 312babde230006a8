//! The shared caches under watch faults: what a [`Shared`] tells its subscribers when its watch
//! relists (after a 410 Gone, a failed start, a disconnect), and a real kube `Controller` on it.
//!
//! The stall these tests pin down (issue 54): a relist used to hand each listed object to the
//! subscribers before the store showed it. kube's `Controller` looks an object up when its reconcile
//! is due; it found nothing (or the version before the gap), dropped the request, and nothing woke it
//! again: a CloneSet created during its watch's relist was never reconciled.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use proptest::prelude::*;

use super::caches::{FanOut, Shared, relisted};

fn object(name: &str, uid: &str, resource_version: u64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            resource_version: Some(resource_version.to_string()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

fn names(objects: &[Arc<ConfigMap>]) -> Vec<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}@{}/{}",
                o.metadata.name.as_deref().unwrap_or_default(),
                o.metadata.uid.as_deref().unwrap_or_default(),
                o.metadata.resource_version.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn a_relist_tells_what_the_gap_changed_and_nothing_else() {
    struct Case {
        name: &'static str,
        before: Vec<ConfigMap>,
        after: Vec<ConfigMap>,
        told: Vec<&'static str>,
    }
    let cases = [
        Case {
            name: "a quiet gap tells nothing",
            before: vec![object("a", "1", 5), object("b", "2", 6)],
            after: vec![object("a", "1", 5), object("b", "2", 6)],
            told: vec![],
        },
        Case {
            name: "created in the gap",
            before: vec![object("a", "1", 5)],
            after: vec![object("a", "1", 5), object("b", "2", 9)],
            told: vec!["b@2/9"],
        },
        Case {
            name: "changed in the gap",
            before: vec![object("a", "1", 5)],
            after: vec![object("a", "1", 8)],
            told: vec!["a@1/8"],
        },
        Case {
            name: "deleted in the gap: its last copy",
            before: vec![object("a", "1", 5), object("b", "2", 6)],
            after: vec![object("a", "1", 5)],
            told: vec!["b@2/6"],
        },
        Case {
            name: "deleted and created again under the same name: both",
            before: vec![object("a", "1", 5)],
            after: vec![object("a", "7", 9)],
            told: vec!["a@1/5", "a@7/9"],
        },
        Case {
            name: "the first list tells every object",
            before: vec![],
            after: vec![object("a", "1", 5), object("b", "2", 6)],
            told: vec!["a@1/5", "b@2/6"],
        },
    ];
    for case in cases {
        let before: Vec<_> = case.before.into_iter().map(Arc::new).collect();
        let after: Vec<_> = case.after.into_iter().map(Arc::new).collect();
        let mut told = names(&relisted(&before, &after));
        told.sort();
        assert_eq!(told, case.told, "{}", case.name);
    }
}

/// What happens at the apiserver, and whether the watch sees it.
#[derive(Clone, Debug)]
enum Step {
    /// Create the object of this index, or update it when it exists.
    Write(u8),
    Delete(u8),
    /// The watch loses its place (a disconnect, a 410): nothing reaches it until it relists.
    Break,
    /// The watch relists: the list it gets is the apiserver's state now.
    Relist,
    /// The last event comes again (a watch resumed from an older resourceVersion).
    Duplicate,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..5).prop_map(Step::Write),
        2 => (0u8..5).prop_map(Step::Delete),
        1 => Just(Step::Break),
        1 => Just(Step::Relist),
        1 => Just(Step::Duplicate),
    ]
}

/// The watch events a scripted apiserver sends for `steps`, ending with a relist when the watch is
/// broken at the end; and the apiserver's final state (name → resourceVersion).
fn script(steps: &[Step]) -> (Vec<watcher::Event<ConfigMap>>, BTreeMap<String, String>) {
    let mut state: BTreeMap<String, ConfigMap> = BTreeMap::new();
    let mut revision = 1u64;
    let mut uid = 0u64;
    let mut connected;
    let mut events = Vec::new();
    let mut last: Option<watcher::Event<ConfigMap>> = None;
    let relist = |state: &BTreeMap<String, ConfigMap>, events: &mut Vec<_>| {
        events.push(watcher::Event::Init);
        events.extend(state.values().cloned().map(watcher::Event::InitApply));
        events.push(watcher::Event::InitDone);
    };
    // The watch starts with its first list, and a broken one relists in the end.
    relist(&state, &mut events);
    connected = true;
    for step in steps {
        let event = match *step {
            Step::Write(i) => {
                revision += 1;
                let name = format!("o{i}");
                let id = match state.get(&name) {
                    Some(existing) => existing.metadata.uid.clone().unwrap_or_default(),
                    None => {
                        uid += 1;
                        uid.to_string()
                    }
                };
                let written = object(&name, &id, revision);
                state.insert(name, written.clone());
                Some(watcher::Event::Apply(written))
            }
            Step::Delete(i) => state.remove(&format!("o{i}")).map(|mut gone| {
                revision += 1;
                gone.metadata.resource_version = Some(revision.to_string());
                watcher::Event::Delete(gone)
            }),
            Step::Break => {
                connected = false;
                None
            }
            Step::Relist => {
                relist(&state, &mut events);
                connected = true;
                last = None;
                None
            }
            Step::Duplicate => last.clone(),
        };
        if connected && let Some(event) = event {
            last = Some(event.clone());
            events.push(event);
        }
    }
    if !connected {
        relist(&state, &mut events);
    }
    let truth = state
        .into_iter()
        .map(|(name, o)| (name, o.metadata.resource_version.unwrap_or_default()))
        .collect();
    (events, truth)
}

/// A subscriber that looks each object it is told of up in the store at once, as a controller's
/// reconcile does: what it saw last of each name (`None`: not in the store).
fn drive(events: Vec<watcher::Event<ConfigMap>>) -> HashMap<String, Option<String>> {
    let mut writer = reflector::store::Writer::<ConfigMap>::default();
    let store = writer.as_reader();
    let mut fan_out = FanOut::default();
    let mut seen = HashMap::new();
    for event in events {
        writer.apply_watcher_event(&event);
        for told in fan_out.changed(&event, &store) {
            let name = told.metadata.name.clone().unwrap_or_default();
            let now = store.get(&ObjectRef::new(&name).within("ns"));
            seen.insert(name, now.and_then(|o| o.metadata.resource_version.clone()));
        }
    }
    seen
}

proptest! {
    /// Whatever the faults, a subscriber that reconciles each object it is told of ends having
    /// seen every object at its final version, and every deleted one gone.
    #[test]
    fn every_subscriber_ends_on_the_final_state(steps in prop::collection::vec(step(), 0..40)) {
        let (events, truth) = script(&steps);
        let seen = drive(events);
        for (name, version) in &truth {
            prop_assert_eq!(seen.get(name), Some(&Some(version.clone())), "{} not seen at its final version", name);
        }
        for (name, last) in &seen {
            if !truth.contains_key(name) {
                prop_assert_eq!(last, &None, "{} deleted, but last seen present", name);
            }
        }
    }
}

#[test]
fn an_object_created_during_a_relist_is_seen_in_the_store_when_told() {
    let events = vec![
        watcher::Event::Init,
        watcher::Event::InitApply(object("a", "1", 2)),
        watcher::Event::InitDone,
        // The watch lost its place; the relist finds `b`, created in the gap.
        watcher::Event::Init,
        watcher::Event::InitApply(object("a", "1", 2)),
        watcher::Event::InitApply(object("b", "2", 5)),
        watcher::Event::InitDone,
    ];
    let seen = drive(events);
    assert_eq!(seen.get("b"), Some(&Some("5".to_string())));
}

/// A real kube `Controller` on a [`Shared`] whose watch relists while an object is created: the
/// object is reconciled. Before the fix the `Controller` was told of it while the relist was under
/// way, found it missing from its store, and dropped it for good.
#[tokio::test]
async fn a_controller_reconciles_an_object_created_while_its_watch_relisted() {
    let (tx, rx) =
        futures::channel::mpsc::unbounded::<Result<watcher::Event<ConfigMap>, watcher::Error>>();
    let (shared, run) = Shared::<ConfigMap>::from_events(rx);
    let watch = tokio::spawn(run);
    let reconciled: Arc<Mutex<Vec<String>>> = Arc::default();
    let controller = Controller::for_stream(shared.replayed_stream(), shared.store().clone());
    let seen = reconciled.clone();
    let running = tokio::spawn(
        controller
            .run(
                |object: Arc<ConfigMap>, seen: Arc<Mutex<Vec<String>>>| async move {
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(object.metadata.name.clone().unwrap_or_default());
                    }
                    Ok::<_, std::convert::Infallible>(Action::await_change())
                },
                |_, _, _| Action::await_change(),
                seen,
            )
            .for_each(|_| futures::future::ready(())),
    );
    let send = |event| {
        tx.unbounded_send(Ok(event))
            .unwrap_or_else(|e| panic!("scripted watch closed: {e}"))
    };
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(object("a", "1", 2)));
    send(watcher::Event::InitDone);
    wait_for(&reconciled, "a").await;
    // The relist: `b` is listed, and the store shows it only at InitDone. The controller is given
    // time to act on anything it was told before InitDone.
    send(watcher::Event::Init);
    send(watcher::Event::InitApply(object("a", "1", 2)));
    send(watcher::Event::InitApply(object("b", "2", 5)));
    settle().await;
    send(watcher::Event::InitDone);
    wait_for(&reconciled, "b").await;
    running.abort();
    watch.abort();
}

/// Lets the controller act on whatever it was told so far (the fault needs it to look before the
/// relist ends); the test then waits for the outcome on a condition, with a deadline.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

async fn wait_for(reconciled: &Mutex<Vec<String>>, name: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let done = reconciled
            .lock()
            .map(|seen| seen.iter().any(|n| n == name))
            .unwrap_or(false);
        if done {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} was never reconciled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
