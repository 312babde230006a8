//! The writes of the CloneSet controller: the shared [`PodControl`] plus what only a CloneSet does
//! (its PVCs go with the Pod of their instance id; a rolling recreation marks the Pod
//! specified-delete and lets the scale step replace it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::keys;
use kruise_core::expectations::Expectation;
use kruise_core::inplace::InPlacePlan;
use kube::Resource;
use kube::api::DeleteParams;
use kube::runtime::events::EventType;
use serde_json::json;

use super::newpod;
use super::{CONTROLLER, Context, Error};
use crate::podcontrol::{PodControl, Wording, name_of};

pub use crate::error::is_race;
pub use crate::podcontrol::Outcome;

pub(crate) struct Actor<'a> {
    pub ctx: &'a Context,
    pub cs: &'a CloneSet,
    pub pc: PodControl<'a>,
}

impl<'a> Actor<'a> {
    pub fn new(ctx: &'a Context, cs: &'a CloneSet, key: String, now: Timestamp) -> Self {
        Self {
            ctx,
            cs,
            pc: PodControl {
                writes: &ctx.base.writes,
                live: &ctx.base.live,
                namespace: cs.metadata.namespace.as_deref().unwrap_or_default(),
                owner: cs.object_ref(&()),
                key,
                expectations: &ctx.base.expectations,
                recorder: &ctx.base.recorder,
                metrics: &ctx.base.metrics,
                controller: CONTROLLER,
                now,
                wording: Wording::Kruise,
                budgets: ctx.base.budgets.as_ref(),
            },
        }
    }
}

impl<'a> std::ops::Deref for Actor<'a> {
    type Target = PodControl<'a>;

    fn deref(&self) -> &Self::Target {
        &self.pc
    }
}

impl Actor<'_> {
    /// PreparingUpdate again for a Pod updated before (the CloneSet's inPlaceUpdate hook).
    pub async fn readd_hook(&self, pod: &Pod, mark_not_ready: bool) -> Result<Outcome, Error> {
        let hook = self
            .cs
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.in_place_update.as_ref());
        self.pc.readd_hook(pod, hook, mark_not_ready).await
    }

    /// Deletes the Pod and the PVCs of its instance id, each PVC deletion expected: the next
    /// decision waits until the claim cache shows it, so the id is not handed to a new Pod
    /// meanwhile (upstream's scale expectations on PVC deletions).
    pub async fn delete_pod(&self, pod: &Pod, pvcs: &[PersistentVolumeClaim]) -> Result<(), Error> {
        self.pc.delete_pod(pod).await?;
        let id = kruise_core::pods::label(pod, kruise_api::cloneset::LABEL_INSTANCE_ID);
        for pvc in pvcs {
            let pvc_id = pvc
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(kruise_api::cloneset::LABEL_INSTANCE_ID));
            if id.is_none() || pvc_id.map(String::as_str) != id || !newpod::claim_counts(pvc) {
                continue;
            }
            let pvc_name = pvc.metadata.name.clone().unwrap_or_default();
            let expectation = Expectation::gone(
                newpod::CLAIM_KIND,
                pvc_name.clone(),
                pvc.metadata.uid.clone(),
            );
            self.expect(expectation.clone());
            match self
                .pvcs()
                .delete(&pvc_name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                // Gone already, or deleted by someone else: nothing of ours to wait for.
                Err(error) if is_race(&error) => self.withdraw(&expectation),
                Err(error) => {
                    self.withdraw(&expectation);
                    self.event(
                        EventType::Warning,
                        "FailedDelete",
                        format!("failed to delete pvc {pvc_name}: {error}"),
                    )
                    .await;
                }
            }
        }
        Ok(())
    }

    /// Marks a Pod for recreation at `revision` (label `apps.kruise.io/specified-delete: "true"`;
    /// the scale step replaces it); `not_in_place` says why the in-place update the policy asked
    /// for could not be done, said in a `RecreatePodNotInPlace` Event.
    pub async fn recreate(
        &self,
        pod: &Pod,
        revision: &str,
        not_in_place: Option<&str>,
    ) -> Result<Outcome, Error> {
        let name = name_of(pod).to_owned();
        if kruise_core::pods::is_specified_delete(pod) {
            return Ok(Outcome::default());
        }
        let patch = json!({"metadata": {"labels": {keys::LABEL_SPECIFIED_DELETE: "true"}}});
        match self.merge_patch(pod, patch).await {
            Ok(_) => {
                self.count("recreate", true);
                self.pod_event(
                    EventType::Normal,
                    "SuccessfulUpdatePodReCreate",
                    format!("successfully patch pod {name} specified-delete for update(revision {revision})"),
                    Some(&name),
                )
                .await;
                // OpenKruise's Event above keeps its exact text; why the update is not in place
                // is a kruise-rs Event of its own.
                if let Some(why) = not_in_place {
                    self.pod_event(
                        EventType::Normal,
                        "RecreatePodNotInPlace",
                        format!("pod {name} cannot be updated in place and is recreated: {why}"),
                        Some(&name),
                    )
                    .await;
                }
                Ok(Outcome::MODIFIED)
            }
            Err(error) => {
                self.count("recreate", false);
                self.pod_event(
                    EventType::Warning,
                    "FailedUpdatePodReCreate",
                    format!("failed to patch pod {name} specified-delete for update(revision {revision}): {error}"),
                    Some(&name),
                )
                .await;
                Err(Error::Kube {
                    context: format!("marking Pod {name} for recreation"),
                    source: error,
                })
            }
        }
    }

    /// Updates a Pod in place to `revision`, with the CloneSet's grace period; the Pod moves to
    /// lifecycle Updating.
    pub async fn update_in_place(
        &self,
        pod: &Pod,
        plan: &InPlacePlan,
        revision: &str,
    ) -> Result<Outcome, Error> {
        let grace = self
            .cs
            .spec
            .update_strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.in_place_update_strategy.as_ref())
            .map_or(0, |s| s.grace_period_seconds);
        let mut labels: BTreeMap<String, String> =
            newpod::revision_labels(revision, self.ctx.config.settings.gates.short_hash);
        labels.insert(
            keys::LABEL_LIFECYCLE_STATE.to_owned(),
            keys::LIFECYCLE_UPDATING.to_owned(),
        );
        self.pc
            .update_in_place(pod, plan, &labels, revision, grace)
            .await
    }

    /// Adds a missing `pod-template-hash` label.
    pub async fn add_template_hash(&self, pod: &Pod, hash: &str) -> Result<Outcome, Error> {
        let labels = BTreeMap::from([(
            kruise_core::revision::LABEL_POD_TEMPLATE_HASH.to_owned(),
            hash.to_owned(),
        )]);
        self.add_labels(pod, &labels).await
    }
}

#[cfg(test)]
mod tests {
    //! The deletion of a Pod with its claims, against a scripted transport.

    use http::Method;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kruise_api::cloneset::LABEL_INSTANCE_ID;

    use serde_json::Value;

    use super::*;
    use crate::driver::scripted::{self, Step};

    const PODS: &str = "/api/v1/namespaces/ns/pods";
    const CLAIMS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";

    fn context(client: kube::Client) -> Context {
        let api = crate::driver::writes::ApiWrites::new(client.clone());
        Context {
            base: crate::driver::head::PodOwnerBase::for_tests(
                CONTROLLER,
                api.clone(),
                api,
                client,
            ),
            pvcs: kube::runtime::reflector::store().0,
            nodes: kube::runtime::reflector::store().0,
            config: super::super::Config::default(),
            predownload: crate::predownload::Tracker::default(),
        }
    }

    fn cloneset() -> CloneSet {
        CloneSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("cs-uid".into()),
                ..ObjectMeta::default()
            },
            ..CloneSet::default()
        }
    }

    fn labelled(name: &str, id: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("{name}-uid")),
            labels: Some([(LABEL_INSTANCE_ID.to_string(), id.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    fn claim(name: &str, id: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: labelled(name, id),
            ..PersistentVolumeClaim::default()
        }
    }

    fn ok() -> Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})
    }

    fn reasons(log: &scripted::Log) -> Vec<String> {
        log.events()
            .iter()
            .filter_map(|e| e["reason"].as_str().map(str::to_owned))
            .collect()
    }

    async fn delete(script: Vec<Step>) -> (Result<(), Error>, scripted::Log, Vec<String>) {
        let (client, log) = scripted::client(script);
        let ctx = context(client);
        let cs = cloneset();
        let actor = Actor::new(&ctx, &cs, "ns/web".into(), Timestamp::now());
        let pod = Pod {
            metadata: labelled("web-a", "a"),
            ..Pod::default()
        };
        let claims = [claim("data-web-a", "a"), claim("data-web-b", "b")];
        let result = actor.delete_pod(&pod, &claims).await;
        let expected: Vec<String> = ctx
            .base
            .expectations
            .lock()
            .map(|ex| {
                if ex.is_empty() {
                    vec![]
                } else {
                    vec!["pending".into()]
                }
            })
            .unwrap_or_default();
        (result, log, expected)
    }

    #[tokio::test]
    async fn deleting_a_pod_deletes_the_claims_of_its_instance_only() {
        let (result, log, expected) = delete(vec![
            Step::new(Method::DELETE, &format!("{PODS}/web-a"), 200, ok()),
            Step::new(Method::DELETE, &format!("{CLAIMS}/data-web-a"), 200, ok()),
        ])
        .await;
        assert!(result.is_ok());
        // The Pod delete is preconditioned on the uid seen, and expected until the cache shows it.
        assert_eq!(log.sent()[0].body["preconditions"]["uid"], "web-a-uid");
        assert_eq!(expected, ["pending"]);
        assert_eq!(reasons(&log), ["SuccessfulDelete"]);
        log.assert_done();
    }

    #[tokio::test]
    async fn a_pod_or_claim_already_gone_is_not_an_error() {
        let (result, log, expected) = delete(vec![
            Step::failing(Method::DELETE, &format!("{PODS}/web-a"), 404),
            Step::failing(Method::DELETE, &format!("{CLAIMS}/data-web-a"), 404),
        ])
        .await;
        assert!(result.is_ok());
        // Nothing was deleted by us: nothing is waited for, nothing reported.
        assert!(expected.is_empty());
        assert!(reasons(&log).is_empty());
        log.assert_done();
    }

    #[tokio::test]
    async fn a_claim_that_cannot_be_deleted_is_reported_not_failed() {
        let (result, log, _) = delete(vec![
            Step::new(Method::DELETE, &format!("{PODS}/web-a"), 200, ok()),
            Step::failing(Method::DELETE, &format!("{CLAIMS}/data-web-a"), 500),
        ])
        .await;
        assert!(result.is_ok());
        assert_eq!(reasons(&log), ["SuccessfulDelete", "FailedDelete"]);
        log.assert_done();
    }

    #[tokio::test]
    async fn a_pod_that_cannot_be_deleted_fails_the_reconcile_and_keeps_its_claims() {
        let (result, log, expected) = delete(vec![Step::failing(
            Method::DELETE,
            &format!("{PODS}/web-a"),
            500,
        )])
        .await;
        assert!(matches!(result, Err(Error::Kube { .. })));
        assert!(expected.is_empty());
        assert_eq!(reasons(&log), ["FailedDelete"]);
        log.assert_done();
    }
}
