//! One reconcile of an Advanced StatefulSet: wait for our own writes to show,
//! claim Pods and revisions, choose the update revision, plan, keep the claims' owners as the
//! retention policy says, carry out the plan, then write the status and prune the history.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::statefulset::v1beta1::{
    StatefulSet, StatefulSetStatus, VOLUME_CLAIM_UPDATE_ON_POD_ROLLING_UPDATE,
};
use kruise_core::lifecycle::releases_pod_ready;
use kruise_core::pods::{self, LifecycleState};
use kruise_core::rollout::slow_start_batches;
use kruise_core::rollout::statefulset::{
    self as planner, Action as Step, Fix, Reserved, Snapshot, ordinal_of, partition_pods,
};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;

use super::status::{self, Inputs};
use super::{Context, Error, newpod};
use crate::cache::listed;
use crate::driver::Owner;
use crate::podcontrol::{Outcome, PodControl, Wording, Write};

/// The resync period when nothing else asks for a look sooner.
const RESYNC: Duration = Duration::from_secs(300);

pub(crate) async fn reconcile(set: Arc<StatefulSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    reconcile_inner(&set, &ctx).await
}

async fn reconcile_inner(set: &StatefulSet, ctx: &Context) -> Result<Action, Error> {
    let owner = match crate::driver::head::begin_owner(set, ctx, listed(&ctx.pvcs)) {
        Ok(owner) => owner,
        Err(action) => return Ok(action),
    };
    let now = Timestamp::now();
    let pc = crate::driver::head::pod_control(ctx, set, &owner, now, Wording::StatefulSet);
    let Owner {
        namespace, name, ..
    } = &owner;
    let reference = newpod::owner_reference(set).map_err(|e| Error::Invalid(e.to_string()))?;
    let selector = set.spec.selector.as_ref();
    // Only orphans named like the set's Pods (`<set>-<ordinal>`).
    let orphan = |p: &Pod| {
        p.metadata
            .name
            .as_deref()
            .and_then(|n| ordinal_of(name, n))
            .is_some()
    };
    let (mut owned, mut revisions) =
        match crate::driver::head::claim(ctx, &pc, set, &owner, &reference, selector, orphan)
            .await?
        {
            Ok(claimed) => claimed,
            Err(action) => return Ok(action),
        };
    owned.sort_by_key(|p| p.metadata.name.as_deref().and_then(|n| ordinal_of(name, n)));
    let Some(update_rev) = update_revision(&pc, set, &revisions).await? else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let update_name = crate::history::register_update(&mut revisions, update_rev);
    let old_status = set.status.clone().unwrap_or_default();
    let current_name =
        crate::history::current_revision(&old_status.current_revision, &revisions, &update_name);
    let templates = crate::history::templates(&revisions);
    let views = crate::history::revision_views(&templates);
    let update_view = crate::history::find_view(&views, &update_name)?;
    let current_view = crate::history::find_view(&views, &current_name).unwrap_or(update_view);
    let snapshot = Snapshot {
        name,
        spec: &set.spec,
        status_current_replicas: old_status.current_replicas,
        pods: &owned,
        current: current_view,
        update: update_view,
        revisions: &views,
        now,
        resize: ctx.config.resize,
        env_from_metadata: ctx.config.env_from_metadata,
    };

    // The set's claims, by name.
    let claims: Vec<Arc<PersistentVolumeClaim>> = ctx
        .pvcs
        .state()
        .into_iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(|c| is_claim_of(set, c.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let claims_by_name: BTreeMap<String, &PersistentVolumeClaim> =
        claims.iter().map(|c| (c.name_any(), c.as_ref())).collect();

    let mut failed_create: Option<String> = None;
    let mut failed_update: Option<String> = None;
    let mut outcome = Outcome::default();
    let plan = match planner::plan(&snapshot) {
        Ok(plan) => plan,
        Err(invalid) => {
            failed_update = Some(invalid.to_string());
            planner::Plan::default()
        }
    };
    keep_claim_owners(&pc, set, &owned, &claims_by_name).await;
    if set.spec.volume_claim_update_strategy.type_ == VOLUME_CLAIM_UPDATE_ON_POD_ROLLING_UPDATE {
        grow_claims(&pc, set, &owned, &update_name, &plan, &claims_by_name).await;
    }
    match carry_out(&pc, set, &snapshot, &plan, &claims_by_name).await {
        Ok((o, create_error, update_error)) => {
            outcome.merge(o);
            failed_create = failed_create.or(create_error);
            failed_update = failed_update.or(update_error);
        }
        Err(error) => failed_update = Some(error.to_string()),
    }

    let computed = status::compute(&Inputs {
        set,
        pods: &owned,
        claims: &claims_by_name,
        current_revision: &current_name,
        update_revision: &update_name,
        collision_count: old_status.collision_count,
        label_selector: label_selector_string(set),
        blocked: plan.blocked.as_ref(),
        failed_create: failed_create.clone(),
        failed_update: failed_update.clone(),
        now,
    });
    write_status(ctx, set, namespace, &computed.status).await?;
    ctx.base
        .truncate_history(
            namespace,
            &revisions,
            (&computed.status.current_revision, &update_name),
            &owned,
            set.spec.revision_history_limit,
        )
        .await?;

    let mut after = RESYNC;
    for wait in [plan.requeue_after, computed.requeue, outcome.after]
        .into_iter()
        .flatten()
    {
        after = after.min(wait);
    }
    if failed_create.is_some() || failed_update.is_some() {
        after = after.min(Duration::from_secs(5));
    }
    Ok(Action::requeue(after.max(Duration::from_millis(100))))
}

fn label_selector_string(set: &StatefulSet) -> String {
    set.spec
        .selector
        .clone()
        .and_then(|s| kube::core::Selector::try_from(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Whether a claim name is `<template>-<set>-<ordinal>` for one of the set's claim templates.
fn is_claim_of(set: &StatefulSet, claim: &str) -> bool {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    set.spec.volume_claim_templates.iter().any(|vct| {
        vct.metadata
            .name
            .as_deref()
            .and_then(|t| claim.strip_prefix(t)?.strip_prefix('-'))
            .and_then(|rest| ordinal_of(name, rest))
            .is_some()
    })
}

/// The update revision ([`crate::driver::head::template_revision`]); `None` after recording a hash
/// collision.
async fn update_revision(
    pc: &PodControl<'_>,
    set: &StatefulSet,
    revisions: &[ControllerRevision],
) -> Result<Option<ControllerRevision>, Error> {
    let collision_count = set.status.as_ref().and_then(|s| s.collision_count);
    crate::driver::head::template_revision(
        pc,
        set,
        &set.spec.template,
        revisions,
        collision_count,
        false,
        |count| {
            json!({"status": StatefulSetStatus {
                collision_count: Some(count),
                ..set.status.clone().unwrap_or_default()
            }})
        },
    )
    .await
}

/// Keeps the owner references of each Pod's claims as the retention policy says (the set's when
/// `whenDeleted: Delete`; the Pod's when `whenScaled: Delete` and a scale-down condemned it), before
/// any condemned Pod is deleted, so the garbage collector removes exactly the claims it should.
async fn keep_claim_owners(
    pc: &PodControl<'_>,
    set: &StatefulSet,
    owned: &[Pod],
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) {
    if set.spec.volume_claim_templates.is_empty() {
        return;
    }
    let name = set.name_any();
    let start = set.spec.ordinals.as_ref().map_or(0, |o| o.start.max(0));
    let replicas = set.spec.replicas.unwrap_or(1).max(0);
    let reserved = Reserved::parse(&set.spec.reserve_ordinals);
    let slots = partition_pods(&name, owned, start, replicas, &reserved);
    let condemned: BTreeSet<usize> = slots.condemned.iter().copied().collect();
    for (i, pod) in owned.iter().enumerate() {
        let (Some(pod_name), Some(pod_uid)) = (&pod.metadata.name, &pod.metadata.uid) else {
            continue;
        };
        let Some(ordinal) = ordinal_of(&name, pod_name) else {
            continue;
        };
        for (_, claim_name, claim) in existing_claims(set, &name, ordinal, claims) {
            let existing = claim.metadata.owner_references.clone().unwrap_or_default();
            let wanted = match newpod::claim_owners(
                set,
                &existing,
                Some((pod_name, pod_uid)),
                condemned.contains(&i),
            ) {
                Ok(Some(wanted)) => wanted,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(claim = %claim_name, %error, "claim owners");
                    continue;
                }
            };
            let patch = json!({"metadata": {
                "resourceVersion": claim.metadata.resource_version,
                "ownerReferences": wanted,
            }});
            update_claim(pc, &name, &claim_name, &patch, false).await;
        }
    }
}

/// `volumeClaimUpdateStrategy: OnPodRollingUpdate`: the claims of Pods at the update revision, or
/// being updated now, grow to the templates' storage (never shrink).
async fn grow_claims(
    pc: &PodControl<'_>,
    set: &StatefulSet,
    owned: &[Pod],
    update_revision: &str,
    plan: &planner::Plan,
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) {
    let name = set.name_any();
    let acted: BTreeSet<usize> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Step::InPlace { pod, .. } | Step::PrepareUpdate { pod, .. } => Some(*pod),
            Step::Delete { pod, reason } if *reason == planner::DeleteReason::Recreate => {
                Some(*pod)
            }
            _ => None,
        })
        .collect();
    for (i, pod) in owned.iter().enumerate() {
        if !acted.contains(&i) && !pods::is_at_revision(pod, update_revision) {
            continue;
        }
        let Some(ordinal) = pod
            .metadata
            .name
            .as_deref()
            .and_then(|n| ordinal_of(&name, n))
        else {
            continue;
        };
        for (vct, claim_name, claim) in existing_claims(set, &name, ordinal, claims) {
            let Some(size) = newpod::claim_growth(vct, claim) else {
                continue;
            };
            let patch = json!({"spec": {"resources": {"requests": {"storage": size}}}});
            update_claim(pc, &name, &claim_name, &patch, true).await;
        }
    }
}

/// The claims of set `name`'s Pod at `ordinal` that exist (of `claims`), each with its template
/// and its name: what keeping claim owners and growing claims both walk.
fn existing_claims<'a>(
    set: &'a StatefulSet,
    name: &'a str,
    ordinal: i32,
    claims: &'a BTreeMap<String, &'a PersistentVolumeClaim>,
) -> impl Iterator<Item = (&'a PersistentVolumeClaim, String, &'a PersistentVolumeClaim)> {
    set.spec
        .volume_claim_templates
        .iter()
        .filter_map(move |vct| {
            let claim_name = newpod::claim_name(vct.metadata.name.as_deref()?, name, ordinal);
            let claim = claims.get(&claim_name)?;
            Some((vct, claim_name, *claim))
        })
}

/// Merge-patches claim `claim_name` of set `name`, as upstream tells a claim update: a refusal
/// is a `FailedUpdate` Warning, never a failure of the reconcile (the claim is looked at again on
/// the next one), a lost race is said nothing of (the next reconcile decides on the fresh claim),
/// and a success is a `SuccessfulUpdate` Event when `tell_success`.
async fn update_claim(
    pc: &PodControl<'_>,
    name: &str,
    claim_name: &str,
    patch: &serde_json::Value,
    tell_success: bool,
) {
    let (type_, reason, note) = match pc.pvcs().merge_patch_unless_raced(claim_name, patch).await {
        Ok(false) => return,
        Ok(true) if !tell_success => return,
        Ok(true) => (
            EventType::Normal,
            "SuccessfulUpdate",
            format!("update Claim {claim_name} in StatefulSet {name} successful"),
        ),
        Err(error) => (
            EventType::Warning,
            "FailedUpdate",
            format!("update Claim {claim_name} in StatefulSet {name} failed error: {error}"),
        ),
    };
    pc.event(type_, reason, note).await;
}

/// The claims of the Pod at `ordinal` that do not exist yet.
fn missing_claims(
    set: &StatefulSet,
    ordinal: i32,
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) -> Result<Vec<PersistentVolumeClaim>, Error> {
    Ok(newpod::build_claims(set, ordinal)
        .map_err(|e| Error::Invalid(e.to_string()))?
        .into_iter()
        .filter(|c| !claims.contains_key(&c.name_any()))
        .collect())
}

/// Creates the planned Pods (with their missing claims) in slow-start batches, stopping at the
/// first failure: whether any was created, and the failure.
async fn create_pods(
    pc: &PodControl<'_>,
    set: &StatefulSet,
    s: &Snapshot<'_>,
    plan: &planner::Plan,
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) -> Result<(bool, Option<String>), Error> {
    let mut modified = false;
    let mut failed_create = None;
    let mut creations = Vec::new();
    for action in &plan.actions {
        let Step::Create {
            ordinal,
            revision,
            lifecycle: state,
            ..
        } = action
        else {
            continue;
        };
        let template = s
            .revisions
            .iter()
            .find(|r| r.name == revision.as_str())
            .map_or(s.update.template, |r| r.template);
        let pod = newpod::build_pod(set, template, revision, *ordinal, *state, pc.now)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        creations.push((pod, missing_claims(set, *ordinal, claims)?));
    }
    let mut queue = creations.into_iter();
    for batch in slow_start_batches(queue.len()) {
        let chunk: Vec<_> = queue.by_ref().take(batch).collect();
        let names: Vec<String> = chunk.iter().map(|(p, _)| p.name_any()).collect();
        let results = futures::future::join_all(
            chunk
                .into_iter()
                .map(|(pod, claims)| pc.create_pod(pod, claims)),
        )
        .await;
        modified |= results.iter().any(|&ok| ok);
        if let Some(i) = results.iter().position(|&ok| !ok) {
            failed_create = Some(format!("failed to create Pod {}", names[i]));
            break;
        }
    }
    Ok((modified, failed_create))
}

/// Carries out the plan. Creations go in slow-start batches (stopping at the first failed batch);
/// the other writes touch independent Pods and go together. Returns what was done, and why a
/// creation or an update failed (for the `FailedCreatePod` / `FailedUpdatePod` conditions).
async fn carry_out(
    pc: &PodControl<'_>,
    set: &StatefulSet,
    s: &Snapshot<'_>,
    plan: &planner::Plan,
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) -> Result<(Outcome, Option<String>, Option<String>), Error> {
    let mut outcome = Outcome::default();
    let mut failed_update = None;
    let lifecycle = set.spec.lifecycle.as_ref();
    let grace = set
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.in_place_update_strategy.as_ref())
        .map_or(0, |s| s.grace_period_seconds);

    // Creations, in ordinal order.
    let (created, failed_create) = create_pods(pc, set, s, plan, claims).await?;
    outcome.modified |= created;

    let mut pending: Vec<Write<'_>> = Vec::new();
    for action in &plan.actions {
        let write: Write<'_> = match action {
            Step::Create { .. } => continue,
            Step::Refuse { pod, message } => {
                failed_update = Some(message.clone());
                let pod_name = pods_name(s, *pod);
                Box::pin(async move {
                    pc.pod_event(
                        EventType::Warning,
                        "FailedUpdatePodInPlace",
                        message.clone(),
                        Some(&pod_name),
                    )
                    .await;
                    Ok(Outcome::default())
                })
            }
            Step::CreateClaims { pod } => {
                let Some(ordinal) = ordinal_of(s.name, &pods_name(s, *pod)) else {
                    continue;
                };
                let missing = missing_claims(set, ordinal, claims)?;
                if missing.is_empty() {
                    continue;
                }
                Box::pin(async move {
                    pc.create_claims(missing).await;
                    Ok(Outcome::MODIFIED)
                })
            }
            Step::Fix(Fix::InPlaceReady(i, state)) => {
                let finish = kruise_core::inplace::Finish {
                    lifecycle: *state,
                    kruise_pod_ready: state.is_some_and(|s| releases_pod_ready(s, lifecycle)),
                };
                let pod = &s.pods[*i];
                Box::pin(pc.finish_in_place(pod, finish))
            }
            Step::Fix(Fix::InPlaceNextBatch(i)) => Box::pin(pc.update_next_batch(&s.pods[*i])),
            Step::Fix(Fix::Lifecycle(i, state)) => {
                let mark = releases_pod_ready(*state, lifecycle);
                Box::pin(pc.set_lifecycle(&s.pods[*i], *state, mark))
            }
            Step::Delete { pod, .. } => {
                let pod = &s.pods[*pod];
                Box::pin(async move { pc.delete_pod(pod).await.map(|()| Outcome::MODIFIED) })
            }
            Step::PrepareDelete {
                pod,
                mark_not_ready,
                ..
            } => Box::pin(pc.set_lifecycle(
                &s.pods[*pod],
                LifecycleState::PreparingDelete,
                *mark_not_ready,
            )),
            Step::PrepareUpdate {
                pod,
                mark_not_ready,
                readd_hook,
            } => {
                let pod = &s.pods[*pod];
                if *readd_hook {
                    let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
                    Box::pin(pc.readd_hook(pod, hook, *mark_not_ready))
                } else {
                    Box::pin(pc.set_lifecycle(
                        pod,
                        LifecycleState::PreparingUpdate,
                        *mark_not_ready,
                    ))
                }
            }
            Step::InPlace {
                pod,
                plan,
                set_updating,
            } => {
                let mut labels = BTreeMap::from([(
                    keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(),
                    s.update.name.to_owned(),
                )]);
                if *set_updating {
                    labels.insert(
                        keys::LABEL_LIFECYCLE_STATE.to_owned(),
                        keys::LIFECYCLE_UPDATING.to_owned(),
                    );
                }
                let pod = &s.pods[*pod];
                Box::pin(async move {
                    pc.update_in_place(pod, plan, &labels, s.update.name, grace)
                        .await
                })
            }
        };
        pending.push(write);
    }
    // A large step is done in rounds (the status is written between them).
    let more = crate::parallel::this_round(&mut pending);
    if let Some(error) = outcome.run_round(pending, more).await {
        failed_update.get_or_insert(error.to_string());
    }
    Ok((outcome, failed_create, failed_update))
}

fn pods_name(s: &Snapshot<'_>, i: usize) -> String {
    s.pods[i].metadata.name.clone().unwrap_or_default()
}

async fn write_status(
    ctx: &Context,
    set: &StatefulSet,
    namespace: &str,
    new: &StatefulSetStatus,
) -> Result<(), Error> {
    let old = set.status.as_ref();
    let api = crate::driver::writes::Writer::<StatefulSet>::namespaced(
        ctx.base.writes.clone(),
        namespace,
    );
    crate::driver::write::write_status(&api, set, old, new, status::changed(old, new)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {

    use http::Method;

    use serde_json::Value;

    use super::*;
    use crate::driver::Owner;
    use crate::driver::scripted::{self, Step};

    const CLAIMS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";

    fn context(client: kube::Client) -> Context {
        let api = crate::driver::writes::ApiWrites::new(client.clone());
        Context {
            base: crate::driver::head::PodOwnerBase::for_tests(
                super::super::CONTROLLER,
                api.clone(),
                api,
                client,
            ),
            pvcs: kube::runtime::reflector::store().0,
            config: super::super::Config::default(),
        }
    }

    /// Set `web` at one replica with a `data` claim template, its claims deleted with the set and
    /// when scaled down.
    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}],
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"}
            }
        }))
        .unwrap_or_else(|e| panic!("set fixture: {e}"))
    }

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                         "labels": {"app": "web"}}
        }))
        .unwrap_or_else(|e| panic!("pod fixture: {e}"))
    }

    fn claim(name: &str, resource_version: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": resource_version}
        }))
        .unwrap_or_else(|e| panic!("claim fixture: {e}"))
    }

    /// Runs `keep_claim_owners` for Pods web-0 (kept) and web-1 (condemned by the scale-down to
    /// one) and their claims; what was sent and the Events' reasons.
    async fn keep(script: Vec<Step>) -> (Vec<Value>, Vec<String>) {
        let (client, log) = scripted::client(script);
        let ctx = context(client);
        let set = set();
        let owner = Owner {
            namespace: "ns".into(),
            name: "web".into(),
            key: "ns/web".into(),
            uid: "set-uid".into(),
        };
        let pc = crate::driver::head::pod_control(
            &ctx,
            &set,
            &owner,
            Timestamp::now(),
            Wording::StatefulSet,
        );
        let claims = [claim("data-web-0", "3"), claim("data-web-1", "4")];
        let by_name: BTreeMap<String, &PersistentVolumeClaim> = claims
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
            .collect();
        keep_claim_owners(&pc, &set, &[pod("web-0"), pod("web-1")], &by_name).await;
        let reasons = log
            .events()
            .iter()
            .filter_map(|e| e["reason"].as_str().map(String::from))
            .collect();
        let sent = log.sent().into_iter().map(|s| s.body).collect();
        log.assert_done();
        (sent, reasons)
    }

    /// The patch of claim `data-web-<ordinal>`, answered with `code` (200 with an empty body).
    fn claim_patch(ordinal: i32, code: u16) -> Step {
        let path = format!("{CLAIMS}/data-web-{ordinal}");
        match code {
            200 => Step::new(Method::PATCH, &path, 200, json!({})),
            _ => Step::failing(Method::PATCH, &path, code),
        }
    }

    fn owner_uids(patch: &Value) -> Vec<&str> {
        patch["metadata"]["ownerReferences"]
            .as_array()
            .map(|refs| refs.iter().filter_map(|r| r["uid"].as_str()).collect())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn claims_get_their_retention_owners_over_the_version_they_were_read_at() {
        let (sent, reasons) = keep(vec![claim_patch(0, 200), claim_patch(1, 200)]).await;
        // The kept Pod's claim goes with the set; the condemned Pod's with the set and the Pod.
        assert_eq!(owner_uids(&sent[0]), ["set-uid"]);
        assert_eq!(sent[0]["metadata"]["resourceVersion"], json!("3"));
        assert_eq!(owner_uids(&sent[1]), ["set-uid", "web-1-uid"]);
        assert_eq!(sent[1]["metadata"]["resourceVersion"], json!("4"));
        assert!(reasons.is_empty());
    }

    #[tokio::test]
    async fn a_claim_changed_or_gone_is_skipped_and_a_failure_reported_not_fatal() {
        let (sent, reasons) = keep(vec![claim_patch(0, 409), claim_patch(1, 404)]).await;
        assert_eq!(sent.len(), 2);
        assert!(reasons.is_empty());
        let (_, reasons) = keep(vec![claim_patch(0, 500), claim_patch(1, 200)]).await;
        assert_eq!(reasons, ["FailedUpdate"]);
    }
}
