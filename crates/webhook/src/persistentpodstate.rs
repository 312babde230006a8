//! PersistentPodState in the webhooks:
//! - the Pod webhook's hook ([`PodHook`]): a Pod created by a workload that a PersistentPodState
//!   keeps, and recorded there under its name, gets the recorded topology back as a
//!   `nodeSelector` (required) and preferred node affinity (upstream
//!   `pkg/webhook/pod/mutating/persistent_pod_state.go`); decided on the process-wide
//!   PersistentPodState cache, so it costs no apiserver round trip (but for a custom workload kind,
//!   whose whitelist is read from kruise-configuration, with a deadline);
//! - the validating webhook of the object (`vpersistentpodstate.kb.io`, upstream
//!   `pkg/webhook/persistentpodstate/validating`).

use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::field;
use kruise_api::persistentpodstate::{self as api, PersistentPodState, Whitelist};
use kruise_core::persistentpodstate as decide;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::admission::{Answer, Change, allow, decode_change, deny, kinds_decode};
use crate::configuration::FailurePolicy;

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-persistentpodstate";
pub const WEBHOOK_NAME: &str = "vpersistentpodstate.kb.io";
/// The ConfigMap (in the manager's namespace) holding [`api::WHITELIST_KEY`].
pub use kruise_controllers::kruise_configuration::CONFIGMAP;
/// How long the Pod hook waits for kruise-configuration (custom workload kinds only): well within
/// the Pod webhook's own deadline.
const CONFIGURATION_DEADLINE: Duration = Duration::from_secs(2);

/// Reads the custom workload whitelist of kruise-configuration in `namespace` (none: empty).
pub async fn read_whitelist(client: &Client, namespace: &str) -> Result<Whitelist, String> {
    match kruise_controllers::kruise_configuration::read(client, namespace, api::WHITELIST_KEY)
        .await?
    {
        Some(value) => Whitelist::parse(&value),
        None => Ok(Whitelist::default()),
    }
}

/// The Pod webhook's PersistentPodState step.
#[derive(Clone)]
pub struct PodHook {
    states: Store<PersistentPodState>,
    client: Option<Client>,
    /// The manager's namespace (kruise-configuration).
    namespace: String,
}

impl PodHook {
    pub fn new(
        states: Store<PersistentPodState>,
        client: Option<Client>,
        namespace: String,
    ) -> Self {
        Self {
            states,
            client,
            namespace,
        }
    }

    /// The PersistentPodStates the hook injects from (the process's cache).
    pub fn states(&self) -> &Store<PersistentPodState> {
        &self.states
    }

    /// Whether the PersistentPodState cache has been filled once (checked, never awaited).
    pub fn loaded(&self) -> bool {
        matches!(self.states.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// Injects the recorded topology into `pod` (being created); whether it changed. `Err` when
    /// it cannot be decided now (cache not loaded, kruise-configuration unreadable).
    pub async fn mutate(&self, pod: &mut Pod) -> Result<bool, String> {
        let Some(owner) = decide::controller_ref(pod) else {
            return Ok(false);
        };
        if !self.loaded() {
            return Err("the PersistentPodStates are not loaded yet".into());
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let candidates: Vec<_> = self
            .states
            .state()
            .into_iter()
            .filter(|pps| pps.namespace().as_deref() == Some(namespace.as_str()))
            .collect();
        let Some(pps) = decide::select(candidates.iter().map(|p| p.as_ref()), &owner) else {
            return Ok(false);
        };
        let default_kind = Whitelist::default().allows(&owner.api_version, &owner.kind);
        if !default_kind {
            let Some(client) = &self.client else {
                return Ok(false);
            };
            let whitelist = tokio::time::timeout(
                CONFIGURATION_DEADLINE,
                read_whitelist(client, &self.namespace),
            )
            .await
            .map_err(|_| {
                format!(
                    "reading ConfigMap {}/{CONFIGMAP}: timed out",
                    self.namespace
                )
            })??;
            if !whitelist.allows(&owner.api_version, &owner.kind) {
                return Ok(false);
            }
        }
        let changed = decide::inject(pod, pps);
        if changed {
            tracing::debug!(
                pod = %format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap_or_default()),
                persistentpodstate = %pps.name_any(),
                "injected the recorded topology"
            );
        }
        Ok(changed)
    }
}

/// The Pod webhook's PersistentPodState step on `pod` (being created), `hook` its cache: whether
/// the Pod changed. When it cannot decide it does what the webhook being down would: under
/// `Ignore` the Pod goes on without its recorded topology (what other steps decided stays), under
/// `Fail` it is refused (`Err`, the message).
pub async fn apply(
    hook: Option<&PodHook>,
    pod: &mut Pod,
    failure_policy: FailurePolicy,
) -> Result<bool, String> {
    let Some(hook) = hook else {
        return Ok(false);
    };
    match hook.mutate(pod).await {
        Ok(changed) => Ok(changed),
        Err(reason) => match failure_policy {
            FailurePolicy::Ignore => {
                tracing::warn!(
                    %reason,
                    pod = %format!(
                        "{}/{}",
                        pod.metadata.namespace.as_deref().unwrap_or_default(),
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                    "PersistentPodState topology not injected"
                );
                Ok(false)
            }
            FailurePolicy::Fail => Err(format!(
                "PersistentPodState cannot be decided now: {reason}"
            )),
        },
    }
}

/// Answers a PersistentPodState review (CREATE, UPDATE): the object as upstream validates it,
/// against the other PersistentPodStates of its namespace (from `states`, the process's cache;
/// without it, no conflicts) and the custom workload whitelist read from the apiserver (`client`;
/// without one, default kinds only).
pub async fn validate(
    review: AdmissionReview<DynamicObject>,
    states: Option<&Store<PersistentPodState>>,
    client: Option<&Client>,
    manager_namespace: &str,
) -> Answer {
    let Change {
        request,
        mut new,
        old,
    } = match decode_change::<PersistentPodState>(review, None, kinds_decode, deny) {
        Ok(change) => change,
        Err(answer) => return *answer,
    };
    if new
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        new.metadata.namespace = request.namespace.clone();
    }
    let whitelist = match client {
        None => Whitelist::default(),
        Some(client) => match read_whitelist(client, manager_namespace).await {
            Ok(whitelist) => whitelist,
            Err(message) => {
                return deny(
                    &request,
                    format!(
                        "failed to get persistent pod state config white list, error: {message}"
                    ),
                );
            }
        },
    };
    let namespace = new.metadata.namespace.as_deref();
    let others: Vec<PersistentPodState> = states
        .map(|states| {
            states
                .state()
                .iter()
                .filter(|other| other.metadata.namespace.as_deref() == namespace)
                .map(|other| PersistentPodState::clone(other))
                .collect()
        })
        .unwrap_or_default();
    let errors = api::validate(&new, old.as_ref(), &others, &whitelist);
    if errors.is_empty() {
        allow(&request)
    } else {
        deny(&request, field::join(&errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::Review;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    fn review(
        operation: &str,
        object: Value,
        old: Option<Value>,
    ) -> AdmissionReview<DynamicObject> {
        Review::of(
            "apps.kruise.io",
            "v1alpha1",
            "PersistentPodState",
            "persistentpodstates",
        )
        .operation(operation)
        .namespace("ns")
        .object(object)
        .old(old)
        .name("web")
        .build()
    }

    fn object(kind: &str, name: &str) -> Value {
        json!({
            "apiVersion": api::API_VERSION, "kind": api::KIND,
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                "preferredPersistentTopology": [{"weight": 100, "preference": {"nodeTopologyKeys": ["kubernetes.io/hostname"]}}],
            }
        })
    }

    fn message(answer: &Answer) -> String {
        answer
            .review
            .response
            .as_ref()
            .map(|r| r.result.message.clone())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn validation_refuses_what_upstream_refuses() {
        // (case, operation, object, old object, what the refusal says; None: allowed)
        let cases = [
            (
                "a StatefulSet target",
                "CREATE",
                object("StatefulSet", "web"),
                None,
                None,
            ),
            (
                "a Deployment target",
                "CREATE",
                object("Deployment", "web"),
                None,
                Some("spec.targetRef"),
            ),
            (
                "a moved target",
                "UPDATE",
                object("StatefulSet", "other"),
                Some(object("StatefulSet", "web")),
                Some("targetRef cannot be modified"),
            ),
            (
                "a delete",
                "DELETE",
                object("Deployment", "web"),
                None,
                None,
            ),
        ];
        for (case, operation, new, old, refusal) in cases {
            let answer = validate(review(operation, new, old), None, None, "kruise-system").await;
            match refusal {
                None => assert!(answer.allowed, "{case}: {}", message(&answer)),
                Some(text) => assert_refused(&answer, text, case),
            }
        }
    }

    /// The answer refuses, saying `text` (`case` names the assertion).
    fn assert_refused(answer: &Answer, text: &str, case: &str) {
        assert!(!answer.allowed, "{case}");
        assert!(
            message(answer).contains(text),
            "{case}: {}",
            message(answer)
        );
    }

    #[tokio::test]
    async fn a_second_state_on_the_same_workload_is_refused_from_the_cache() {
        let mut other = recorded("apps/v1", "StatefulSet");
        other.metadata.name = Some("first".into());
        let mut elsewhere = other.clone();
        elsewhere.metadata.namespace = Some("other-ns".into());
        let answer = create_against(vec![other]).await;
        assert_refused(
            &answer,
            "in conflict with other PersistentPodState first",
            "the same workload",
        );
        // The same workload name in another namespace is another workload.
        let answer = create_against(vec![elsewhere]).await;
        assert!(answer.allowed, "{}", message(&answer));
    }

    /// The answer to creating a state for StatefulSet `ns/web` while the cache holds `states`.
    async fn create_against(states: Vec<PersistentPodState>) -> Answer {
        let hook = hook(states);
        validate(
            review("CREATE", object("StatefulSet", "web"), None),
            Some(hook.states()),
            None,
            "kruise-system",
        )
        .await
    }

    fn hook(states: Vec<PersistentPodState>) -> PodHook {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for pps in states {
            writer.apply_watcher_event(&Event::InitApply(pps));
        }
        writer.apply_watcher_event(&Event::InitDone);
        std::mem::forget(writer);
        PodHook::new(store, None, "kruise-system".into())
    }

    fn recorded(kind_api: &str, kind: &str) -> PersistentPodState {
        serde_json::from_value(json!({
            "apiVersion": api::API_VERSION, "kind": api::KIND,
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "targetRef": {"apiVersion": kind_api, "kind": kind, "name": "web"},
                "requiredPersistentTopology": {"nodeTopologyKeys": ["topology.kubernetes.io/zone"]},
            },
            "status": {"observedGeneration": 1, "podStates": {"web-0": {"nodeName": "n1", "nodeTopologyLabels": {"topology.kubernetes.io/zone": "a"}}}}
        }))
        .expect("pps")
    }

    fn pod(namespace: &str, owner_api: &str, owner_kind: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": namespace, "ownerReferences": [
                {"apiVersion": owner_api, "kind": owner_kind, "name": "web", "uid": "u", "controller": true}
            ]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod")
    }

    #[tokio::test]
    async fn the_hook_injects_only_a_recorded_pod_of_the_target() {
        let target = hook(vec![recorded("apps.kruise.io/v1beta1", "StatefulSet")]);
        // (case, pod, injected)
        let cases = [
            (
                "the target's Pod",
                pod("ns", "apps.kruise.io/v1alpha1", "StatefulSet"),
                true,
            ),
            (
                "another namespace",
                pod("other", "apps.kruise.io/v1beta1", "StatefulSet"),
                false,
            ),
            (
                "a Kubernetes StatefulSet of the same name",
                pod("ns", "apps/v1", "StatefulSet"),
                false,
            ),
        ];
        for (case, mut pod, want) in cases {
            assert_eq!(target.mutate(&mut pod).await, Ok(want), "{case}");
            let selector = pod.spec.and_then(|s| s.node_selector).unwrap_or_default();
            assert_eq!(
                selector.contains_key("topology.kubernetes.io/zone"),
                want,
                "{case}"
            );
        }
        // A custom kind is never injected without the whitelist (no client to read it here).
        let custom = hook(vec![recorded("example.com/v1", "Thing")]);
        assert_eq!(
            custom
                .mutate(&mut pod("ns", "example.com/v1", "Thing"))
                .await,
            Ok(false)
        );
    }

    /// Through the Pod webhook: the one admission answer carries the recorded topology (and the
    /// SidecarSet step, with no SidecarSet, changes nothing).
    #[tokio::test]
    async fn the_pod_webhook_answers_with_the_recorded_topology() {
        let (sidecarsets, writer) = crate::testreview::listed_store();
        let (namespaces, ns_writer) = crate::testreview::listed_store();
        std::mem::forget(writer);
        std::mem::forget(ns_writer);
        let injector = crate::pod::PodInjector::from_stores(
            sidecarsets,
            namespaces,
            None,
            crate::pod::PodSettings::gates_off("kruise-system"),
        )
        .with_persistent_pod_states(hook(vec![recorded("apps/v1", "StatefulSet")]));
        assert!(injector.caches_loaded());
        let pod = serde_json::to_value(pod("ns", "apps/v1", "StatefulSet")).expect("pod");
        let review = Review::pod().namespace("ns").object(pod).build();
        let (answer, outcome) = injector.review(review).await;
        assert!(answer.allowed);
        assert_eq!(outcome, crate::pod::Outcome::Injected);
        let response = answer.review.response.expect("response");
        let patch: Value = serde_json::from_slice(&response.patch.expect("a patch")).expect("JSON");
        let text = patch.to_string();
        assert!(
            text.contains("topology.kubernetes.io/zone") && text.contains(api::ANNOTATION_INJECTED),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_hook_cannot_decide_before_its_cache_is_loaded() {
        let (store, _writer) = reflector::store::<PersistentPodState>();
        let hook = PodHook::new(store, None, "kruise-system".into());
        assert!(
            hook.mutate(&mut pod("ns", "apps/v1", "StatefulSet"))
                .await
                .is_err()
        );
        // Through the failure policy: Ignore goes on unchanged, Fail refuses.
        let mut waiting = pod("ns", "apps/v1", "StatefulSet");
        assert_eq!(
            apply(Some(&hook), &mut waiting, FailurePolicy::Ignore).await,
            Ok(false)
        );
        assert!(
            apply(Some(&hook), &mut waiting, FailurePolicy::Fail)
                .await
                .is_err()
        );
        assert_eq!(
            apply(None, &mut waiting, FailurePolicy::Fail).await,
            Ok(false)
        );
        // A Pod without a controller needs no cache.
        let mut orphan = pod("ns", "apps/v1", "StatefulSet");
        orphan.metadata.owner_references = None;
        assert_eq!(hook.mutate(&mut orphan).await, Ok(false));
    }
}
