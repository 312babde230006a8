//! The writes of the CloneSet controller: every Pod change is a patch, guarded by the Pod's
//! resourceVersion or uid where a race would be unsafe, and every write raises an expectation that
//! the next reconcile waits for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::keys;
use kruise_core::expectations::Expectation;
use kruise_core::inplace::{self, InPlacePlan, Step, Target};
use kruise_core::lifecycle;
use kruise_core::pods::LifecycleState;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource};
use serde_json::json;

use super::newpod;
use super::{CONTROLLER, Context, Error, KubeContext};

/// What a write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Something was written.
    pub modified: bool,
    /// Look again after this long (a grace period is running).
    pub after: Option<Duration>,
}

impl Outcome {
    pub fn merge(&mut self, other: Outcome) {
        self.modified |= other.modified;
        self.after = match (self.after, other.after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

pub use crate::error::is_race;

pub(crate) struct Actor<'a> {
    pub ctx: &'a Context,
    pub cs: &'a CloneSet,
    pub key: String,
    pub now: Timestamp,
}

fn name_of(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

impl Actor<'_> {
    fn namespace(&self) -> &str {
        self.cs.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.ctx.client.clone(), self.namespace())
    }

    fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.ctx.client.clone(), self.namespace())
    }

    /// Remembers a write until the cache shows it.
    pub fn expect(&self, expectation: Expectation) {
        if let Ok(mut ex) = self.ctx.expectations.lock() {
            ex.expect(&self.key, expectation, Instant::now());
        }
    }

    fn withdraw(&self, expectation: &Expectation) {
        if let Ok(mut ex) = self.ctx.expectations.lock() {
            ex.withdraw(&self.key, expectation);
        }
    }

    fn observe(&self, pod: &Pod) {
        if let (Some(name), Some(rv)) = (&pod.metadata.name, &pod.metadata.resource_version) {
            self.expect(Expectation::observed("Pod", name.clone(), rv.clone()));
        }
    }

    /// Publishes an Event on the CloneSet; failures are logged, never fatal.
    pub async fn event(&self, type_: EventType, reason: &str, note: String) {
        self.pod_event(type_, reason, note, None).await;
    }

    /// An Event on the CloneSet about one of its Pods. The Pod is the event's related object, which
    /// also keeps the recorder from folding events about different Pods into one series.
    pub async fn pod_event(&self, type_: EventType, reason: &str, note: String, pod: Option<&str>) {
        let secondary = pod.map(|name| k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.to_owned()),
            namespace: self.cs.metadata.namespace.clone(),
            ..Default::default()
        });
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary,
        };
        if let Err(error) = self
            .ctx
            .recorder
            .publish(&event, &self.cs.object_ref(&()))
            .await
        {
            tracing::warn!(%error, reason, "publishing an event");
        }
    }

    fn count(&self, operation: &str, ok: bool) {
        self.ctx.metrics.pod_operation(CONTROLLER, operation, ok);
    }

    /// A JSON merge patch of the Pod.
    async fn merge_patch(&self, pod: &Pod, patch: serde_json::Value) -> Result<Pod, kube::Error> {
        let patched = self
            .pods()
            .patch(name_of(pod), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.observe(&patched);
        Ok(patched)
    }

    /// A JSON patch of the Pod's status (its ops carry their own resourceVersion test).
    async fn status_patch(&self, pod: &Pod, patch: json_patch::Patch) -> Result<Pod, kube::Error> {
        let patched = self
            .pods()
            .patch_status(
                name_of(pod),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await?;
        self.observe(&patched);
        Ok(patched)
    }

    /// Moves a Pod to a lifecycle state; with `mark_not_ready` also sets `KruisePodReady` False
    /// (or True when leaving the hooked states), so the Pod leaves Service endpoints while a hook
    /// works on it.
    pub async fn set_lifecycle(
        &self,
        pod: &Pod,
        state: LifecycleState,
        mark_not_ready: bool,
    ) -> Result<Outcome, Error> {
        let mut pod = pod.clone();
        let mut outcome = Outcome::default();
        if mark_not_ready {
            let (status, reason) = match state {
                LifecycleState::PreparingDelete | LifecycleState::PreparingUpdate => {
                    ("False", "LifecycleHook")
                }
                _ => ("True", ""),
            };
            let patch = inplace::condition_patch(
                &pod,
                keys::CONDITION_KRUISE_POD_READY,
                status,
                reason,
                self.now,
            )
            .map_err(|e| Error::Invalid(e.to_string()))?;
            if let Some(patch) = patch {
                pod = self
                    .status_patch(&pod, patch)
                    .await
                    .context(|| format!("marking Pod {} not ready", name_of(&pod)))?;
                outcome.modified = true;
            }
        }
        if kruise_core::pods::lifecycle_state(&pod) == state {
            return Ok(outcome);
        }
        let Some(patch) = lifecycle::state_patch(state, self.now) else {
            return Ok(outcome);
        };
        self.merge_patch(&pod, patch)
            .await
            .context(|| format!("moving Pod {} to {state:?}", name_of(&pod)))?;
        outcome.modified = true;
        Ok(outcome)
    }

    /// PreparingUpdate again for a Pod updated before: the inPlaceUpdate hook's labels and
    /// finalizers go back on, guarded by the resourceVersion.
    pub async fn readd_hook(&self, pod: &Pod, mark_not_ready: bool) -> Result<Outcome, Error> {
        let hook = self
            .cs
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.in_place_update.as_ref());
        if let Some(hook) = hook {
            let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
            for f in &hook.finalizers_handler {
                if !finalizers.contains(f) {
                    finalizers.push(f.clone());
                }
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": pod.metadata.resource_version,
                    "labels": hook.labels_handler,
                    "finalizers": finalizers,
                }
            });
            let patched = self
                .merge_patch(pod, patch)
                .await
                .context(|| format!("re-adding the inPlaceUpdate hook to Pod {}", name_of(pod)))?;
            let mut outcome = self
                .set_lifecycle(&patched, LifecycleState::PreparingUpdate, mark_not_ready)
                .await?;
            outcome.modified = true;
            return Ok(outcome);
        }
        self.set_lifecycle(pod, LifecycleState::PreparingUpdate, mark_not_ready)
            .await
    }

    /// Creates the Pod (its PVCs first). Returns whether it was created.
    pub async fn create_pod(&self, pod: Pod, pvcs: Vec<PersistentVolumeClaim>) -> bool {
        for pvc in pvcs {
            let name = pvc.metadata.name.clone().unwrap_or_default();
            match self.pvcs().create(&PostParams::default(), &pvc).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => {
                    self.event(
                        EventType::Warning,
                        "FailedCreate",
                        format!("failed to create pvc {name}: {error}"),
                    )
                    .await;
                    return false;
                }
            }
        }
        let name = name_of(&pod).to_owned();
        let expectation = Expectation::exists("Pod", name.clone());
        self.expect(expectation.clone());
        match self.pods().create(&PostParams::default(), &pod).await {
            Ok(_) => {
                self.count("create", true);
                self.pod_event(
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("succeed to create pod {name}"),
                    Some(&name),
                )
                .await;
                true
            }
            Err(error) => {
                self.withdraw(&expectation);
                self.count("create", false);
                self.pod_event(
                    EventType::Warning,
                    "FailedCreate",
                    format!("failed to create pod {name}: {error}"),
                    Some(&name),
                )
                .await;
                false
            }
        }
    }

    /// Deletes the Pod (only the exact Pod seen: a uid precondition) and its PVCs.
    pub async fn delete_pod(&self, pod: &Pod, pvcs: &[PersistentVolumeClaim]) -> Result<(), Error> {
        let name = name_of(pod).to_owned();
        let expectation = Expectation::gone("Pod", name.clone(), pod.metadata.uid.clone());
        self.expect(expectation.clone());
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(error) = self.pods().delete(&name, &params).await {
            self.withdraw(&expectation);
            if is_race(&error) {
                return Ok(());
            }
            self.count("delete", false);
            self.pod_event(
                EventType::Warning,
                "FailedDelete",
                format!("failed to delete pod {name}: {error}"),
                Some(&name),
            )
            .await;
            return Err(Error::Kube {
                context: format!("deleting Pod {name}"),
                source: error,
            });
        }
        self.count("delete", true);
        self.pod_event(
            EventType::Normal,
            "SuccessfulDelete",
            format!("succeed to delete pod {name}"),
            Some(&name),
        )
        .await;
        let id = kruise_core::pods::label(pod, kruise_api::cloneset::LABEL_INSTANCE_ID);
        for pvc in pvcs {
            let pvc_id = pvc
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(kruise_api::cloneset::LABEL_INSTANCE_ID));
            if id.is_none() || pvc_id.map(String::as_str) != id {
                continue;
            }
            let pvc_name = pvc.metadata.name.clone().unwrap_or_default();
            match self
                .pvcs()
                .delete(&pvc_name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(error) if is_race(&error) => {}
                Err(error) => {
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

    /// Labels the Pod `apps.kruise.io/specified-delete: "true"`; the scale step replaces it.
    /// Marks a Pod for recreation at `revision`; `not_in_place` says why the in-place update the
    /// policy asked for could not be done, said in a `RecreatePodNotInPlace` Event.
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
                Ok(Outcome {
                    modified: true,
                    after: None,
                })
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

    /// Advances the in-place update of one Pod by as many steps as can be taken now: drain
    /// (`InPlaceUpdateReady=False`), wait out the grace period, resize, then patch images and
    /// metadata. Each patch is guarded by the resourceVersion it was decided on; a conflict ends
    /// this attempt without error and the next reconcile decides again on the fresh Pod.
    pub async fn update_in_place(
        &self,
        pod: &Pod,
        plan: &InPlacePlan,
        revision: &str,
    ) -> Result<Outcome, Error> {
        let name = name_of(pod).to_owned();
        let grace = self
            .cs
            .spec
            .update_strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.in_place_update_strategy.as_ref())
            .map_or(0, |s| s.grace_period_seconds);
        let mut labels: BTreeMap<String, String> = newpod::revision_labels(revision);
        labels.insert(
            keys::LABEL_LIFECYCLE_STATE.to_owned(),
            keys::LIFECYCLE_UPDATING.to_owned(),
        );
        let target = Target {
            revision,
            revision_labels: &labels,
        };
        let mut pod = pod.clone();
        let mut outcome = Outcome::default();
        // At most: drain, resize, apply.
        for _ in 0..4 {
            let step = inplace::next_step(&pod, plan, &target, grace, self.now)
                .map_err(|e| Error::Invalid(format!("Pod {name}: {e}")))?;
            let result = match step {
                Step::Wait(after) => {
                    outcome.after = Some(after);
                    return Ok(outcome);
                }
                Step::MarkUnready(patch) => {
                    let result = self.status_patch(&pod, patch).await;
                    if result.is_ok() {
                        outcome.modified = true;
                        // The grace period runs from now; with none, go straight on.
                        if grace > 0 {
                            outcome.after = Some(Duration::from_secs(grace.max(0) as u64));
                            return Ok(outcome);
                        }
                    }
                    result
                }
                Step::Resize(patch) => {
                    let result = self
                        .pods()
                        .patch_subresource(
                            "resize",
                            &name,
                            &PatchParams::default(),
                            &Patch::<()>::Json(patch),
                        )
                        .await;
                    self.count("resize", result.is_ok());
                    if let Ok(p) = &result {
                        self.observe(p);
                        outcome.modified = true;
                    }
                    result
                }
                Step::Apply(patch) => {
                    let result = self
                        .pods()
                        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                        .await;
                    self.count("update_in_place", result.is_ok());
                    match &result {
                        Ok(p) => {
                            self.observe(p);
                            self.pod_event(
                                EventType::Normal,
                                "SuccessfulUpdatePodInPlace",
                                format!(
                                    "successfully update pod {name} in-place(revision {revision})"
                                ),
                                Some(&name),
                            )
                            .await;
                            outcome.modified = true;
                            return Ok(outcome);
                        }
                        Err(error) if !is_race(error) => {
                            self.pod_event(
                                EventType::Warning,
                                "FailedUpdatePodInPlace",
                                format!("failed to update pod {name} in-place(revision {revision}): {error}"),
                            Some(&name),
                            )
                            .await;
                        }
                        Err(_) => {}
                    }
                    result
                }
            };
            match result {
                Ok(p) => pod = p,
                Err(error) if is_race(&error) => {
                    tracing::debug!(pod = %name, %error, "pod changed under an in-place update; deciding again");
                    outcome.after = Some(Duration::from_secs(1));
                    return Ok(outcome);
                }
                Err(error) => {
                    return Err(Error::Kube {
                        context: format!("updating Pod {name} in place"),
                        source: error,
                    });
                }
            }
        }
        Ok(outcome)
    }

    /// Sets `InPlaceUpdateReady=True` on a Pod whose update has completed.
    pub async fn mark_in_place_ready(&self, pod: &Pod) -> Result<Outcome, Error> {
        let Some(patch) = inplace::mark_ready_patch(pod, self.now)
            .map_err(|e| Error::Invalid(format!("Pod {}: {e}", name_of(pod))))?
        else {
            return Ok(Outcome::default());
        };
        match self.status_patch(pod, patch).await {
            Ok(_) => Ok(Outcome {
                modified: true,
                after: None,
            }),
            Err(error) if is_race(&error) => Ok(Outcome::default()),
            Err(error) => Err(Error::Kube {
                context: format!("marking Pod {} InPlaceUpdateReady", name_of(pod)),
                source: error,
            }),
        }
    }

    /// Adds a missing `pod-template-hash` label.
    pub async fn add_template_hash(&self, pod: &Pod, hash: &str) -> Result<Outcome, Error> {
        let patch =
            json!({"metadata": {"labels": {kruise_core::revision::LABEL_POD_TEMPLATE_HASH: hash}}});
        match self.merge_patch(pod, patch).await {
            Ok(_) => Ok(Outcome {
                modified: true,
                after: None,
            }),
            Err(error) if is_race(&error) => Ok(Outcome::default()),
            Err(error) => Err(Error::Kube {
                context: format!("labelling Pod {}", name_of(pod)),
                source: error,
            }),
        }
    }
}
