//! Unit tests of the act layer's shared writes (claiming, status, history) against a scripted
//! transport ([`super::scripted`]): what is sent, and what a conflict or a not-found comes to.

use std::sync::Arc;

use http::Method;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kruise_api::cloneset::v1beta1::{CloneSet, CloneSetStatus};
use kruise_core::ownership::Claimant;
use serde_json::{Value, json};

use super::scripted::{self, Step};
use super::write::{StatusWrite, prune_revisions, write_status};
use super::writes::{ApiWrites, Writer};
use crate::claim::{Recheck, claim_each, selector_match};
use crate::error::Error;

const OWNER_UID: &str = "owner-uid";
const CLONESETS: &str = "/apis/apps.kruise.io/v1beta1/namespaces/ns/clonesets/web";

fn cloneset(resource_version: &str, status: Option<CloneSetStatus>) -> CloneSet {
    let mut cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": OWNER_UID,
                     "resourceVersion": resource_version},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap_or_else(|e| panic!("cloneset fixture: {e}"));
    cs.status = status;
    cs
}

fn status(replicas: i32, updated_available: i32) -> CloneSetStatus {
    CloneSetStatus {
        replicas,
        updated_available_replicas: updated_available,
        ..CloneSetStatus::default()
    }
}

/// The status writer of the real [`ApiWrites`] over `client` (scripted: the requests it sends are
/// checked).
fn api(client: kube::Client) -> Writer<CloneSet> {
    Writer::namespaced(ApiWrites::new(client), "ns")
}

#[tokio::test]
async fn status_write_sends_nothing_when_nothing_changed() {
    let (client, log) = scripted::client(vec![]);
    let cs = cloneset("7", Some(status(2, 2)));
    let wrote = write_status(&api(client), &cs, cs.status.as_ref(), &status(2, 2), false).await;
    assert_eq!(wrote.ok(), Some(StatusWrite::Unchanged));
    log.assert_done();
}

#[tokio::test]
async fn status_write_is_guarded_by_the_resource_version_and_clears_omitted_fields() {
    let (client, log) = scripted::client(vec![Step::new(
        Method::PATCH,
        &format!("{CLONESETS}/status"),
        200,
        serde_json::to_value(cloneset("8", Some(status(2, 0)))).unwrap_or_default(),
    )]);
    let cs = cloneset("7", Some(status(2, 2)));
    let wrote = write_status(&api(client), &cs, cs.status.as_ref(), &status(2, 0), true).await;
    assert_eq!(
        wrote.ok(),
        Some(StatusWrite::Written {
            resource_version: Some("8".into())
        })
    );
    let sent = log.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["metadata"]["resourceVersion"], json!("7"));
    assert_eq!(sent[0].body["status"]["replicas"], json!(2));
    // Omitted (zero) in the new status: sent as null so that the merge patch removes it.
    assert_eq!(
        sent[0].body["status"]["updatedAvailableReplicas"],
        Value::Null
    );
    assert!(
        sent[0].body["status"]
            .as_object()
            .is_some_and(|s| s.contains_key("updatedAvailableReplicas"))
    );
    log.assert_done();
}

#[tokio::test]
async fn status_write_on_a_stale_or_deleted_copy_is_dropped_and_other_errors_fail() {
    // (answer, outcome: Some(write) or None for an error)
    let cases = [
        (409, Some(StatusWrite::Stale)),
        (404, Some(StatusWrite::Stale)),
        (500, None),
    ];
    for (code, want) in cases {
        let (client, log) = scripted::client(vec![Step::failing(
            Method::PATCH,
            &format!("{CLONESETS}/status"),
            code,
        )]);
        let cs = cloneset("7", Some(status(2, 2)));
        let wrote = write_status(&api(client), &cs, cs.status.as_ref(), &status(3, 2), true).await;
        match (&wrote, &want) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "answer {code}"),
            (Err(Error::Kube { .. }), None) => {}
            _ => panic!("answer {code}: got {wrote:?}, want {want:?}"),
        }
        log.assert_done();
    }
}

fn revision(name: &str, uid: &str) -> ControllerRevision {
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..ObjectMeta::default()
        },
        revision: 1,
        ..ControllerRevision::default()
    }
}

const REVISIONS: &str = "/apis/apps/v1/namespaces/ns/controllerrevisions";

#[tokio::test]
async fn pruning_deletes_each_revision_on_its_uid_and_skips_those_gone_or_replaced() {
    let doomed = [
        revision("web-1", "u1"),
        revision("web-2", "u2"),
        revision("web-3", "u3"),
    ];
    let deleted = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
    let (client, log) = scripted::client(vec![
        Step::new(Method::DELETE, &format!("{REVISIONS}/web-1"), 200, deleted),
        // Already deleted by someone else.
        Step::failing(Method::DELETE, &format!("{REVISIONS}/web-2"), 404),
        // Deleted and re-created under the same name: the uid precondition fails.
        Step::failing(Method::DELETE, &format!("{REVISIONS}/web-3"), 409),
    ]);
    let gone = prune_revisions(&Writer::namespaced(ApiWrites::new(client), "ns"), &doomed)
        .await
        .unwrap_or_else(|e| panic!("pruning: {e}"));
    let names: Vec<&str> = gone.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["web-1"]);
    let sent = log.sent();
    let uids: Vec<&Value> = sent
        .iter()
        .map(|s| &s.body["preconditions"]["uid"])
        .collect();
    assert_eq!(uids, [&json!("u1"), &json!("u2"), &json!("u3")]);
    log.assert_done();
}

#[tokio::test]
async fn pruning_fails_on_a_server_error() {
    let (client, log) = scripted::client(vec![Step::failing(
        Method::DELETE,
        &format!("{REVISIONS}/web-1"),
        500,
    )]);
    let doomed = [revision("web-1", "u1")];
    let result = prune_revisions(&Writer::namespaced(ApiWrites::new(client), "ns"), &doomed).await;
    assert!(matches!(result, Err(Error::Kube { .. })));
    log.assert_done();
}

fn owner_ref() -> OwnerReference {
    OwnerReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "CloneSet".into(),
        name: "web".into(),
        uid: OWNER_UID.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn pod(name: &str, app: &str, owned: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            resource_version: Some("5".into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            owner_references: owned.then(|| vec![owner_ref()]),
            ..ObjectMeta::default()
        },
        ..Pod::default()
    }
}

const PODS: &str = "/api/v1/namespaces/ns/pods";

fn selector() -> LabelSelector {
    LabelSelector {
        match_labels: Some([("app".to_string(), "web".to_string())].into()),
        ..LabelSelector::default()
    }
}

async fn claim(
    client: kube::Client,
    pods: Vec<Pod>,
) -> Result<Option<crate::claim::Claimed<Pod>>, Error> {
    let api = crate::driver::writes::ApiWrites::new(client);
    let mut recheck =
        Recheck::<CloneSet>::new(api.clone(), Some("ns"), "web".into(), OWNER_UID.into());
    let selector = selector();
    claim_each(
        &crate::driver::writes::Writer::<Pod>::namespaced(api, "ns"),
        pods.into_iter().map(Arc::new),
        Claimant {
            uid: OWNER_UID,
            deleting: false,
        },
        &owner_ref(),
        &mut recheck,
        selector_match(Some(&selector)),
    )
    .await
}

fn names(pods: &[Pod]) -> Vec<&str> {
    pods.iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect()
}

/// The steps of adopting the orphans `names`: the owner read afresh once before the first
/// adoption, then one patch per Pod, answered with the Pod owned.
fn adoption(names: &[&str]) -> Vec<Step> {
    let owner = Step::new(
        Method::GET,
        CLONESETS,
        200,
        serde_json::to_value(cloneset("7", None)).unwrap_or_default(),
    );
    let patches = names.iter().map(|name| {
        let mut adopted = pod(name, "web", true);
        adopted.metadata.resource_version = Some("6".into());
        Step::new(
            Method::PATCH,
            &format!("{PODS}/{name}"),
            200,
            serde_json::to_value(&adopted).unwrap_or_default(),
        )
    });
    std::iter::once(owner).chain(patches).collect()
}

#[tokio::test]
async fn claiming_adopts_matching_orphans_after_rechecking_the_owner_once() {
    let (client, log) = scripted::client(adoption(&["a", "b"]));
    let claimed = claim(
        client,
        vec![
            pod("a", "web", false),
            pod("b", "web", false),
            pod("kept", "web", true),
            // An orphan the selector does not match: left alone.
            pod("other", "db", false),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("claiming: {e}"))
    .unwrap_or_else(|| panic!("the owner is live"));
    assert!(claimed.adopting);
    assert_eq!(names(&claimed.owned), ["a", "b", "kept"]);
    assert_eq!(names(&claimed.written), ["a", "b"]);
    // A JSON patch testing the uid and resourceVersion seen, then adding the owner reference.
    let patch = &log.sent()[1].body;
    assert_eq!(
        patch[0],
        json!({"op": "test", "path": "/metadata/uid", "value": "a-uid"})
    );
    assert_eq!(
        patch[1],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "5"})
    );
    assert_eq!(patch[2]["op"], json!("add"));
    assert_eq!(patch[2]["value"][0]["uid"], json!(OWNER_UID));
    log.assert_done();
}

#[tokio::test]
async fn claiming_releases_owned_objects_the_selector_no_longer_matches() {
    let released = pod("moved", "db", false);
    let (client, log) = scripted::client(vec![Step::new(
        Method::PATCH,
        &format!("{PODS}/moved"),
        200,
        serde_json::to_value(&released).unwrap_or_default(),
    )]);
    let claimed = claim(
        client,
        vec![pod("moved", "db", true), pod("kept", "web", true)],
    )
    .await
    .unwrap_or_else(|e| panic!("claiming: {e}"))
    .unwrap_or_else(|| panic!("the owner is live"));
    assert!(!claimed.adopting);
    assert_eq!(names(&claimed.owned), ["kept"]);
    assert_eq!(names(&claimed.written), ["moved"]);
    let patch = &log.sent()[0].body;
    assert_eq!(
        patch
            .as_array()
            .and_then(|ops| ops.last())
            .map(|op| &op["op"]),
        Some(&json!("remove"))
    );
    log.assert_done();
}

#[tokio::test]
async fn claiming_adopts_nothing_for_an_owner_gone_replaced_or_being_deleted() {
    let mut deleting = cloneset("7", None);
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let mut replaced = cloneset("7", None);
    replaced.metadata.uid = Some("another-uid".into());
    let answers = [
        Step::failing(Method::GET, CLONESETS, 404),
        Step::new(
            Method::GET,
            CLONESETS,
            200,
            serde_json::to_value(&deleting).unwrap_or_default(),
        ),
        Step::new(
            Method::GET,
            CLONESETS,
            200,
            serde_json::to_value(&replaced).unwrap_or_default(),
        ),
    ];
    for answer in answers {
        let (client, log) = scripted::client(vec![answer]);
        let claimed = claim(client, vec![pod("a", "web", false)])
            .await
            .unwrap_or_else(|e| panic!("claiming: {e}"));
        assert!(claimed.is_none());
        // No adoption patch was sent.
        log.assert_done();
    }
}

#[tokio::test]
async fn an_adoption_or_release_lost_to_a_race_is_not_an_error() {
    // The Pod changed since it was seen (failed test: 422), was deleted (404), or conflicted (409).
    for code in [422, 404, 409] {
        let (client, log) = scripted::client(vec![
            Step::new(
                Method::GET,
                CLONESETS,
                200,
                serde_json::to_value(cloneset("7", None)).unwrap_or_default(),
            ),
            Step::failing(Method::PATCH, &format!("{PODS}/a"), code),
            Step::failing(Method::PATCH, &format!("{PODS}/moved"), code),
        ]);
        let claimed = claim(
            client,
            vec![pod("a", "web", false), pod("moved", "db", true)],
        )
        .await
        .unwrap_or_else(|e| panic!("answer {code}: {e}"))
        .unwrap_or_else(|| panic!("the owner is live"));
        assert!(claimed.adopting, "answer {code}");
        assert!(claimed.owned.is_empty(), "answer {code}");
        assert!(claimed.written.is_empty(), "answer {code}");
        log.assert_done();
    }
}

#[tokio::test]
async fn a_failed_adoption_fails_the_reconcile() {
    let (client, log) = scripted::client(vec![
        Step::new(
            Method::GET,
            CLONESETS,
            200,
            serde_json::to_value(cloneset("7", None)).unwrap_or_default(),
        ),
        Step::failing(Method::PATCH, &format!("{PODS}/a"), 500),
    ]);
    let result = claim(client, vec![pod("a", "web", false)]).await;
    assert!(matches!(result, Err(Error::Kube { .. })));
    log.assert_done();
}

// ---------------------------------------------------------------------------------------------
// The shared reconcile head (`driver::head`) and the Pod writes (`PodControl`).

mod head_and_pods {

    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::jiff::Timestamp;
    use kruise_core::expectations::Expectation;
    use kube::runtime::controller::Action;
    use kube::runtime::reflector::{self};
    use kube::runtime::watcher;

    use super::*;
    use crate::cache::{NOT_LISTED_RETRY, PodCache};
    use crate::driver::Owner;
    use crate::driver::head::{self, ADOPTED_RETRY};

    use crate::driver::head::PodOwnerBase;
    use crate::podcontrol::{PodControl, Wording};

    const CLAIMS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";

    struct Ctx {
        base: PodOwnerBase,
        /// Kept: a store whose writer is dropped counts as listed.
        _revisions_writer: reflector::store::Writer<ControllerRevision>,
    }

    impl crate::driver::head::OwnsPods for Ctx {
        fn base(&self) -> &PodOwnerBase {
            &self.base
        }
    }

    /// A context whose caches hold `pods` and `revisions`, listed unless `listed` is false.
    fn context(
        client: kube::Client,
        pods: Vec<Pod>,
        revisions: Vec<ControllerRevision>,
        listed: bool,
    ) -> Ctx {
        let cache = PodCache::new();
        cache.apply(watcher::Event::Init);
        for pod in pods {
            cache.apply(watcher::Event::InitApply(pod));
        }
        cache.apply(watcher::Event::InitDone);
        let (store, mut writer) = reflector::store();
        if listed {
            writer.apply_watcher_event(&watcher::Event::Init);
            for revision in revisions {
                writer.apply_watcher_event(&watcher::Event::InitApply(revision));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
        }
        let api = crate::driver::writes::ApiWrites::new(client.clone());
        let mut base = PodOwnerBase::for_tests("test-controller", api.clone(), api, client);
        base.pods = cache;
        base.revisions = store;
        Ctx {
            base,
            _revisions_writer: writer,
        }
    }

    fn owned_revision(name: &str) -> ControllerRevision {
        let mut revision = revision(name, &format!("{name}-uid"));
        revision.metadata.namespace = Some("ns".into());
        revision.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        revision.metadata.owner_references = Some(vec![owner_ref()]);
        revision
    }

    fn pending(ctx: &Ctx) -> bool {
        ctx.base
            .expectations
            .lock()
            .map(|ex| !ex.is_empty())
            .unwrap_or(true)
    }

    #[tokio::test]
    async fn the_head_waits_for_unlisted_caches_and_unmet_expectations() {
        let (client, log) = scripted::client(vec![]);
        let cs = cloneset("7", None);
        // The revision cache not listed yet, or another cache of the kind.
        let unlisted = context(client.clone(), vec![], vec![], false);
        assert_eq!(
            head::begin_owner(&cs, &unlisted, true).err(),
            Some(Action::requeue(NOT_LISTED_RETRY))
        );
        let ctx = context(client, vec![], vec![], true);
        assert_eq!(
            head::begin_owner(&cs, &ctx, false).err(),
            Some(Action::requeue(NOT_LISTED_RETRY))
        );
        let owner = head::begin_owner(&cs, &ctx, true).unwrap_or_else(|a| panic!("{a:?}"));
        assert_eq!(
            (owner.key.as_str(), owner.uid.as_str()),
            ("ns/web", OWNER_UID)
        );
        // A Pod we created that the cache does not show yet: wait (at most until it expires).
        if let Ok(mut ex) = ctx.base.expectations.lock() {
            ex.expect(
                "ns/web",
                Expectation::exists("Pod", "web-new"),
                std::time::Instant::now(),
            );
        }
        assert!(
            matches!(head::begin_owner(&cs, &ctx, true), Err(a) if a != Action::await_change())
        );
        // Being deleted: nothing to do, and what was expected is forgotten.
        let mut deleting = cs.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        assert_eq!(
            head::begin_owner(&deleting, &ctx, true).err(),
            Some(Action::await_change())
        );
        assert!(!pending(&ctx));
        log.assert_done();
    }

    async fn run_claim(ctx: &Ctx) -> Result<(Vec<Pod>, Vec<ControllerRevision>), Action> {
        let cs = cloneset("7", None);
        let owner = head::begin_owner(&cs, ctx, true).unwrap_or_else(|a| panic!("{a:?}"));
        let pc = head::pod_control(ctx, &cs, &owner, Timestamp::now(), Wording::PodControl);
        let selector = selector();
        head::claim(
            ctx,
            &pc,
            &cs,
            &owner,
            &owner_ref(),
            Some(&selector),
            |p: &Pod| p.metadata.name.as_deref() != Some("refused"),
        )
        .await
        .unwrap_or_else(|e| panic!("claiming: {e}"))
    }

    #[tokio::test]
    async fn the_head_claims_pods_and_revisions_and_requeues_after_adopting() {
        // Settled: everything owned, nothing sent.
        let (client, log) = scripted::client(vec![]);
        let ctx = context(
            client,
            vec![pod("web-0", "web", true), pod("refused", "web", false)],
            vec![owned_revision("web-1")],
            true,
        );
        let (pods, revisions) = run_claim(&ctx).await.unwrap_or_else(|a| panic!("{a:?}"));
        assert_eq!(names(&pods), ["web-0"]);
        assert_eq!(revisions.len(), 1);
        log.assert_done();

        // An orphan the selector matches: adopted (after reading the owner afresh), and the
        // reconcile ends there, to go on with the Pod as the cache comes to show it.
        let (client, log) = scripted::client(adoption(&["orphan"]));
        let ctx = context(client, vec![pod("orphan", "web", false)], vec![], true);
        assert_eq!(
            run_claim(&ctx).await.err(),
            Some(Action::requeue(ADOPTED_RETRY))
        );
        log.assert_done();
    }

    #[tokio::test]
    async fn the_head_adopts_nothing_for_an_owner_replaced_since() {
        let mut replaced = cloneset("9", None);
        replaced.metadata.uid = Some("another-uid".into());
        let (client, log) = scripted::client(vec![Step::new(
            Method::GET,
            CLONESETS,
            200,
            serde_json::to_value(&replaced).unwrap_or_default(),
        )]);
        let ctx = context(client, vec![pod("orphan", "web", false)], vec![], true);
        assert_eq!(run_claim(&ctx).await.err(), Some(Action::await_change()));
        log.assert_done();
    }

    async fn with_pod_control<T>(ctx: &Ctx, f: impl AsyncFnOnce(&PodControl<'_>) -> T) -> T {
        let owner = Owner {
            namespace: "ns".into(),
            name: "web".into(),
            key: "ns/web".into(),
            uid: OWNER_UID.into(),
        };
        let cs = cloneset("7", None);
        let pc = head::pod_control(ctx, &cs, &owner, Timestamp::now(), Wording::PodControl);
        f(&pc).await
    }

    fn claim_named(name: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..PersistentVolumeClaim::default()
        }
    }

    fn reasons(log: &scripted::Log) -> Vec<String> {
        log.events()
            .iter()
            .filter_map(|e| e["reason"].as_str().map(String::from))
            .collect()
    }

    #[tokio::test]
    async fn a_pod_is_created_after_its_claims_and_a_claim_that_exists_is_no_failure() {
        let (client, log) = scripted::client(vec![
            Step::failing(Method::POST, CLAIMS, 409),
            Step::new(Method::POST, CLAIMS, 201, json!({})),
            Step::new(
                Method::POST,
                PODS,
                201,
                serde_json::to_value(pod("web-0", "web", true)).unwrap_or_default(),
            ),
        ]);
        let ctx = context(client, vec![], vec![], true);
        let claims = vec![claim_named("data-web-0"), claim_named("logs-web-0")];
        let created = with_pod_control(&ctx, async |pc| {
            pc.create_pod(pod("web-0", "web", true), claims).await
        })
        .await;
        assert!(created);
        // Expected until the cache shows it.
        assert!(pending(&ctx));
        assert_eq!(reasons(&log), ["SuccessfulCreate"]);
        log.assert_done();
    }

    #[tokio::test]
    async fn a_claim_that_cannot_be_created_holds_its_pod_back() {
        let (client, log) = scripted::client(vec![Step::failing(Method::POST, CLAIMS, 500)]);
        let ctx = context(client, vec![], vec![], true);
        let created = with_pod_control(&ctx, async |pc| {
            pc.create_pod(pod("web-0", "web", true), vec![claim_named("data-web-0")])
                .await
        })
        .await;
        assert!(!created);
        assert!(!pending(&ctx));
        assert_eq!(reasons(&log), ["FailedCreate"]);
        log.assert_done();
    }

    #[tokio::test]
    async fn a_pod_that_cannot_be_created_is_not_waited_for() {
        for code in [409, 422, 500] {
            let (client, log) = scripted::client(vec![Step::failing(Method::POST, PODS, code)]);
            let ctx = context(client, vec![], vec![], true);
            let created = with_pod_control(&ctx, async |pc| {
                pc.create_pod(pod("web-0", "web", true), vec![]).await
            })
            .await;
            assert!(!created, "{code}");
            // The expectation is withdrawn: the next reconcile does not wait for it.
            assert!(!pending(&ctx), "{code}");
            assert_eq!(reasons(&log), ["FailedCreate"], "{code}");
            log.assert_done();
        }
    }

    #[tokio::test]
    async fn a_pod_is_deleted_on_its_uid_and_one_gone_or_replaced_is_no_error() {
        let (client, log) = scripted::client(vec![Step::new(
            Method::DELETE,
            &format!("{PODS}/web-0"),
            200,
            serde_json::to_value(pod("web-0", "web", true)).unwrap_or_default(),
        )]);
        let ctx = context(client, vec![], vec![], true);
        let deleted = with_pod_control(&ctx, async |pc| {
            pc.delete_pod(&pod("web-0", "web", true)).await
        })
        .await;
        assert!(deleted.is_ok());
        assert_eq!(
            log.sent()[0].body["preconditions"]["uid"],
            json!("web-0-uid")
        );
        assert!(pending(&ctx));
        assert_eq!(reasons(&log), ["SuccessfulDelete"]);
        log.assert_done();

        // 404: already gone; 409: the name is another Pod's now. Neither is an error, and nothing
        // is waited for.
        for code in [404, 409] {
            let (client, log) = scripted::client(vec![Step::failing(
                Method::DELETE,
                &format!("{PODS}/web-0"),
                code,
            )]);
            let ctx = context(client, vec![], vec![], true);
            let deleted = with_pod_control(&ctx, async |pc| {
                pc.delete_pod(&pod("web-0", "web", true)).await
            })
            .await;
            assert!(deleted.is_ok(), "{code}");
            assert!(!pending(&ctx), "{code}");
            assert!(reasons(&log).is_empty(), "{code}");
            log.assert_done();
        }

        let (client, log) = scripted::client(vec![Step::failing(
            Method::DELETE,
            &format!("{PODS}/web-0"),
            500,
        )]);
        let ctx = context(client, vec![], vec![], true);
        let deleted = with_pod_control(&ctx, async |pc| {
            pc.delete_pod(&pod("web-0", "web", true)).await
        })
        .await;
        assert!(matches!(deleted, Err(Error::Kube { .. })));
        assert!(!pending(&ctx));
        assert_eq!(reasons(&log), ["FailedDelete"]);
        log.assert_done();
    }
}

mod error_policy {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::controller::Action;

    use crate::driver::{Driven, ERROR_REQUEUE, RACE_REQUEUE, error_policy};
    use crate::error::Error;
    use crate::metrics::Metrics;

    struct Ctx {
        metrics: Arc<Metrics>,
        registry: prometheus_client::registry::Registry,
    }

    impl Driven for Ctx {
        fn controller(&self) -> &'static str {
            "test-controller"
        }

        fn metrics(&self) -> &Metrics {
            &self.metrics
        }
    }

    fn refused(code: u16, causes: serde_json::Value) -> Error {
        let status = serde_json::from_value(serde_json::json!({
            "code": code, "reason": "Invalid", "message": "refused", "details": {"causes": causes}
        }))
        .expect("a Status");
        Error::Kube {
            context: "patching Pod ns/a".into(),
            source: kube::Error::Api(Box::new(status)),
        }
    }

    /// A write whose `test` failed (422) or whose resourceVersion conflicted (409) is decided
    /// again soon and counted as a race; a write the apiserver found invalid fails the reconcile.
    #[test]
    fn a_lost_race_is_retried_promptly_and_quietly_and_a_bad_write_is_a_failure() {
        let mut registry = prometheus_client::registry::Registry::default();
        let ctx = Arc::new(Ctx {
            metrics: Metrics::register(&mut registry),
            registry,
        });
        let pod = Arc::new(Pod::default());
        // As v1.34 answers a failed `test`: no cause.
        let failed_test = serde_json::json!([]);
        let invalid = serde_json::json!([{"reason": "FieldValueForbidden", "field": "spec"}]);
        let cases = [
            (refused(422, failed_test), Action::requeue(RACE_REQUEUE)),
            (
                refused(409, serde_json::json!([])),
                Action::requeue(RACE_REQUEUE),
            ),
            (refused(422, invalid), Action::requeue(ERROR_REQUEUE)),
            (Error::Invalid("bad".into()), Action::requeue(ERROR_REQUEUE)),
        ];
        for (error, action) in cases {
            assert_eq!(
                error_policy(pod.clone(), &error, ctx.clone()),
                action,
                "{error}"
            );
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &ctx.registry).expect("metrics");
        assert!(
            text.contains(r#"kruise_controller_reconciles_total{controller="test-controller",result="race"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kruise_controller_reconciles_total{controller="test-controller",result="error"} 2"#),
            "{text}"
        );
    }
}
