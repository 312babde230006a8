//! One reconcile of a CloneSet: wait for our own writes to show, gather the
//! snapshot, scale or else update, then write the status, prune `podsToDelete` and the revision
//! history.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::LABEL_INSTANCE_ID;
use kruise_api::cloneset::v1beta1::{
    CONDITION_FAILED_SCALE, CONDITION_FAILED_UPDATE, CloneSet, CloneSetStatus,
};
use kruise_core::inplace;
use kruise_core::lifecycle::releases_pod_ready;
use kruise_core::ownership::Claimant;
use kruise_core::pods::{self, LifecycleState};
use kruise_core::revision::{new_revision, next_revision_number};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use rand::Rng;
use serde_json::json;

use super::act::{Actor, Outcome, is_race};
use super::decide::{self, Fix, Revision, ScaleStep, Snapshot, UpdateAction};
use super::status::{self, Inputs};
use super::{CONTROLLER, Context, Error, newpod};
use crate::cache::{NOT_LISTED_RETRY, listed};
use crate::claim::{Recheck, claim_each, claim_pods, claim_revisions, selector_match};
use crate::driver::Owner;
use crate::podcontrol::Write;

/// The resync period when nothing else asks for a look sooner.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon a CloneSet whose replacement Pod waits for its predecessor to terminate looks again.
const TERMINATION_RETRY: Duration = Duration::from_secs(2);

pub(crate) async fn reconcile(cs: Arc<CloneSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    // Not a reconcile yet (nothing looked at, not counted): the caches it reads are still listing.
    if !(listed(&ctx.base.revisions) && listed(&ctx.pvcs)) {
        return Ok(Action::requeue(NOT_LISTED_RETRY));
    }
    let result = reconcile_inner(&cs, &ctx).await;
    ctx.base.metrics.cached_pods.set(ctx.base.pods.len() as i64);
    result
}

/// Checks the expectations of this CloneSet against the caches.
fn expectations_met(ctx: &Context, key: &str, namespace: &str) -> Result<(), Duration> {
    use kruise_core::expectations::CachedState;
    crate::podcontrol::expectations_met_with(
        &ctx.base.expectations,
        key,
        namespace,
        &ctx.base.pods,
        &ctx.base.revisions,
        &ctx.base.metrics,
        CONTROLLER,
        // The claims deleted with their Pod: until the claim cache shows them being deleted, a
        // new Pod could be given their instance id and mount a claim about to vanish.
        |e| {
            e.kind != newpod::CLAIM_KIND || {
                let claim = ctx.pvcs.get(&ObjectRef::new(&e.name).within(namespace));
                e.satisfied_by(claim.as_deref().map(|c| CachedState::of(&c.metadata)))
            }
        },
    )
}

async fn reconcile_inner(cs: &CloneSet, ctx: &Context) -> Result<Action, Error> {
    let unmet = |key: &str, namespace: &str| expectations_met(ctx, key, namespace).err();
    let Owner {
        namespace,
        name,
        key,
        uid,
    } = match crate::driver::begin(cs, &ctx.base.expectations, unmet) {
        Ok(owner) => owner,
        Err(action) => return Ok(action),
    };
    let now = Timestamp::now();
    let actor = Actor::new(ctx, cs, key.clone(), now);

    // Pods: owned ones whose labels still match, plus orphans the selector claims; an owned Pod
    // relabelled out of the selector is released (and replaced by the scale step).
    let owner = newpod::owner_reference(cs).map_err(|e| Error::Invalid(e.to_string()))?;
    let claimant = Claimant {
        uid: &uid,
        deleting: false,
    };
    let mut recheck = Recheck::new(
        ctx.base.live.clone(),
        Some(&namespace),
        name.clone(),
        uid.clone(),
    );
    let Some((mut owned, adopted)) = claim_pods(
        &actor,
        &ctx.base.pods,
        claimant,
        &owner,
        &mut recheck,
        cs.spec.selector.as_ref(),
        |_| true,
    )
    .await?
    else {
        return Ok(Action::await_change());
    };
    if adopted {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    owned.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let (active, inactive): (Vec<Pod>, Vec<Pod>) = owned.into_iter().partition(pods::is_active);

    let Some(mut pvcs) = claim_pvcs(&actor, claimant, &owner, &mut recheck).await? else {
        return Ok(Action::await_change());
    };
    if !cs.spec.scale_strategy.enable_pvc_reuse {
        pvcs = clean_pvcs(&actor, &active, &inactive, pvcs).await?;
    }

    // Revisions: owned ones, plus orphans the selector claims (those a CloneSet deleted with
    // `--cascade=orphan` left behind), before the update revision is chosen, so that an unchanged
    // template finds its old revision.
    let Some(mut revisions) = claim_revisions(
        &actor,
        &ctx.base.revisions,
        claimant,
        &owner,
        &mut recheck,
        selector_match(cs.spec.selector.as_ref()),
    )
    .await?
    else {
        return Ok(Action::await_change());
    };
    let update_rev = match update_revision(&actor, &revisions).await? {
        Some(rev) => rev,
        None => return Ok(Action::requeue(Duration::from_secs(1))),
    };
    let update_name = crate::history::register_update(&mut revisions, update_rev);
    let old_status = cs.status.clone().unwrap_or_default();
    let current_name =
        crate::history::current_revision(&old_status.current_revision, &revisions, &update_name);
    let templates = crate::history::templates(&revisions);
    let revision_views = crate::history::revision_views(&templates);
    let update_view = crate::history::find_view(&revision_views, &update_name)?;
    let current_view =
        crate::history::find_view(&revision_views, &current_name).unwrap_or(update_view);
    if ctx.config.pre_download {
        pre_download(&actor, &revisions, current_view, update_view).await;
    }

    let node_labels = node_labels(ctx, cs, &active);
    let vct_hashes = vct_hashes(&revisions);
    let snapshot = Snapshot {
        cs,
        pods: &active,
        current: current_view,
        update: update_view,
        revisions: &revision_views,
        vct_hashes: &vct_hashes,
        node_labels: &node_labels,
        now,
        settings: ctx.config.settings,
    };

    // Scale first; update only when scaling changed nothing.
    let (outcome, failed_scale, failed_update) =
        scale_or_update(&actor, &snapshot, &pvcs, &inactive).await;

    // Status.
    let status_requeue = record_status(
        &actor,
        &active,
        (&current_name, &update_name),
        old_status.collision_count,
        (&failed_scale, &failed_update),
        now,
    )
    .await?;
    truncate_pods_to_delete(ctx, cs, &namespace, &name, &active).await?;
    ctx.base
        .truncate_history(
            &namespace,
            &revisions,
            (&current_name, &update_name),
            &active,
            cs.spec.revision_history_limit,
        )
        .await?;

    if let Some(error) = failed_scale.or(failed_update) {
        return Err(Error::Invalid(error));
    }
    let mut after = status_requeue.unwrap_or(RESYNC).min(RESYNC);
    if let Some(a) = outcome.after {
        after = after.min(a);
    }
    Ok(Action::requeue(after.max(Duration::from_millis(100))))
}

/// The volumeClaimTemplates hash of each revision that records one, by revision name.
fn vct_hashes(revisions: &[ControllerRevision]) -> BTreeMap<String, String> {
    revisions
        .iter()
        .filter_map(|r| {
            let hash = r
                .annotations()
                .get(kruise_core::revision::ANNOTATION_VCT_HASH)?;
            Some((r.name_any(), hash.clone()))
        })
        .collect()
}

/// Pulls the update revision's images ahead of the rollout (`PreDownloadImageForInPlaceUpdate`).
async fn pre_download(
    actor: &Actor<'_>,
    revisions: &[ControllerRevision],
    current: Revision<'_>,
    update: Revision<'_>,
) {
    super::predownload::sync(
        actor,
        &super::predownload::Rollout {
            revisions,
            current: current.name,
            update: update.name,
            current_template: current.template,
            update_template: update.template,
        },
    )
    .await;
}

/// Scales, and updates only when scaling changed nothing (failed or not, as upstream: a deletion
/// a PodUnavailableBudget refuses must not keep unready Pods from being updated). What was done,
/// and why scaling or updating failed.
async fn scale_or_update(
    actor: &Actor<'_>,
    snapshot: &Snapshot<'_>,
    pvcs: &[PersistentVolumeClaim],
    inactive: &[Pod],
) -> (Outcome, Option<String>, Option<String>) {
    // Scale first; update only when scaling changed nothing (failed or not, as upstream: a
    // deletion a PodUnavailableBudget refuses must not keep unready Pods from being updated).
    let mut outcome = Outcome::default();
    let mut failed_update: Option<String> = None;
    let (failed_scale, scale_decided) = match decide::scale_step(snapshot) {
        Ok(step) => {
            let (done, failure) = scale(actor, snapshot, step, pvcs, inactive).await;
            outcome.merge(done);
            (failure.map(|error| error.to_string()), true)
        }
        Err(invalid) => (Some(invalid.to_string()), false),
    };
    if !outcome.modified && scale_decided {
        match decide::update_step(snapshot) {
            Ok(step) => match update(actor, snapshot, step).await {
                Ok(o) => outcome.merge(o),
                Err(error) => failed_update = Some(error.to_string()),
            },
            Err(invalid) => failed_update = Some(invalid.to_string()),
        }
    }

    (outcome, failed_scale, failed_update)
}

/// Computes and writes the CloneSet's status (with the FailedScale / FailedUpdate conditions and
/// Warnings of this reconcile); when the status wants a look again.
async fn record_status(
    actor: &Actor<'_>,
    active: &[Pod],
    (current_name, update_name): (&str, &str),
    collision_count: Option<i32>,
    (failed_scale, failed_update): (&Option<String>, &Option<String>),
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let (ctx, cs) = (actor.ctx, actor.cs);
    let namespace = cs.namespace().unwrap_or_default();
    let selector = label_selector_string(cs);
    let computed = status::compute(&Inputs {
        cs,
        pods: active,
        current_revision: current_name,
        update_revision: update_name,
        collision_count,
        label_selector: selector,
        now,
    });
    let mut new_status = computed.status;
    for (type_, failure) in [
        (CONDITION_FAILED_SCALE, failed_scale),
        (CONDITION_FAILED_UPDATE, failed_update),
    ] {
        match failure {
            Some(message) => status::set_condition(
                &mut new_status,
                status::condition(type_, "True", "", message.clone(), now),
            ),
            None => status::remove_condition(&mut new_status, type_),
        }
    }
    for (reason, failure) in [
        ("FailedScale", failed_scale),
        ("FailedUpdate", failed_update),
    ] {
        if let Some(message) = failure {
            actor
                .event(EventType::Warning, reason, message.clone())
                .await;
        }
    }
    write_status(ctx, cs, &namespace, cs.status.as_ref(), &new_status).await?;
    Ok(computed.requeue)
}

fn label_selector_string(cs: &CloneSet) -> String {
    cs.spec
        .selector
        .clone()
        .and_then(|s| kube::core::Selector::try_from(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// The CloneSet's PVCs, from the claim cache: those with an owner reference to it, plus orphans
/// its selector matches when it has volumeClaimTemplates (a CloneSet deleted with
/// `--cascade=orphan` left them behind), adopted. Only a PVC with no owner reference at all is an
/// orphan here: the claim of a finished Pod is handed to that Pod and must stay with it. `None`
/// when the CloneSet is gone or being deleted.
async fn claim_pvcs(
    actor: &Actor<'_>,
    claimant: Claimant<'_>,
    owner: &OwnerReference,
    recheck: &mut Recheck<CloneSet>,
) -> Result<Option<Vec<PersistentVolumeClaim>>, Error> {
    let cs = actor.cs;
    let namespace = cs.namespace().unwrap_or_default();
    let api = actor.pc.pvcs();
    let (ours, orphans): (Vec<_>, Vec<_>) = actor
        .ctx
        .pvcs
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        // The shared cache holds every claim: only those of CloneSet instances concern a CloneSet.
        .filter(|p| p.labels().contains_key(LABEL_INSTANCE_ID))
        .filter(|p| {
            // An orphan being deleted is not adopted; an owned claim being deleted is kept in
            // view: its name and instance id are still taken ([`newpod::claim_ids`]).
            let refs = p.metadata.owner_references.as_deref().unwrap_or_default();
            (refs.is_empty() && newpod::claim_counts(p))
                || refs.iter().any(|o| o.uid == claimant.uid)
        })
        .partition(|p| {
            p.metadata
                .owner_references
                .as_ref()
                .is_some_and(|r| !r.is_empty())
        });
    let mut owned: Vec<PersistentVolumeClaim> = ours.iter().map(|p| (**p).clone()).collect();
    if cs.spec.volume_claim_templates.is_empty() {
        return Ok(Some(owned));
    }
    let matches = selector_match(cs.spec.selector.as_ref());
    let Some(claimed) = claim_each(&api, orphans, claimant, owner, recheck, matches).await? else {
        return Ok(None);
    };
    owned.extend(claimed.owned);
    Ok(Some(owned))
}

/// Without PVC reuse: a PVC whose instance has no Pod is deleted, and the PVC of a terminating or
/// finished Pod is handed to that Pod so it goes with it ([`newpod::claim_fate`]). Returns the PVCs
/// the CloneSet keeps: those of live Pods, none a new Pod could reuse.
async fn clean_pvcs(
    actor: &Actor<'_>,
    active: &[Pod],
    inactive: &[Pod],
    pvcs: Vec<PersistentVolumeClaim>,
) -> Result<Vec<PersistentVolumeClaim>, Error> {
    if pvcs.is_empty() {
        return Ok(pvcs);
    }
    let id_of = |p: &Pod| pods::label(p, LABEL_INSTANCE_ID).map(str::to_owned);
    let active_ids: BTreeSet<String> = active.iter().filter_map(id_of).collect();
    let inactive_by_id: BTreeMap<String, &Pod> = inactive
        .iter()
        .filter_map(|p| Some((id_of(p)?, p)))
        .collect();
    let inactive_ids: BTreeSet<String> = inactive_by_id.keys().cloned().collect();
    let api = actor.pc.pvcs();
    let mut kept = Vec::new();
    for pvc in pvcs {
        // Already going: nothing to decide, but its id stays taken until it is gone.
        if !newpod::claim_counts(&pvc) {
            kept.push(pvc);
            continue;
        }
        let id = pvc.labels().get(LABEL_INSTANCE_ID).cloned();
        let name = pvc.name_any();
        let fate = newpod::claim_fate(id.as_deref(), &active_ids, &inactive_ids);
        let result = match (fate, id.as_ref().and_then(|id| inactive_by_id.get(id))) {
            (newpod::ClaimFate::Keep, _) => {
                kept.push(pvc);
                continue;
            }
            (newpod::ClaimFate::HandToPod, Some(pod)) => {
                let owner = json!([{
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod.name_any(),
                    "uid": pod.metadata.uid,
                    "controller": false,
                }]);
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"ownerReferences": owner}})),
                )
                .await
                .map(|_| ())
            }
            _ => api
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ()),
        };
        if let Err(error) = result
            && !is_race(&error)
        {
            actor
                .event(
                    EventType::Warning,
                    "FailedDelete",
                    format!("failed to clean up PVC {name}: {error}"),
                )
                .await;
        }
    }
    Ok(kept)
}

/// The update revision: the newest revision if it records the template; an older equal one
/// renumbered (a rollback); or a new one. `None` when a hash collision was recorded and the
/// reconcile should run again.
async fn update_revision(
    actor: &Actor<'_>,
    revisions: &[ControllerRevision],
) -> Result<Option<ControllerRevision>, Error> {
    let cs = actor.cs;
    let collision_count = cs.status.as_ref().and_then(|s| s.collision_count);
    let candidate = new_revision(cs, next_revision_number(revisions), collision_count)
        .map_err(|e| Error::Invalid(format!("building the revision: {e}")))?;
    // The whole status on a collision: a first status must carry its required fields.
    let registered = crate::history::update_revision(
        &actor.ctx.base.writes,
        actor.ctx.base.live.as_ref(),
        cs,
        revisions,
        candidate,
        collision_count,
        |count| {
            json!({"status": CloneSetStatus {
                collision_count: Some(count),
                ..cs.status.clone().unwrap_or_default()
            }})
        },
    )
    .await?;
    Ok(registered.map(|(revision, expectation)| {
        if let Some(expectation) = expectation {
            actor.expect(expectation);
        }
        revision
    }))
}

/// Node labels for the spread ranker, read from the shared Node cache only when the template has topology spread
/// constraints and Pods may be scaled in.
fn node_labels(
    ctx: &Context,
    cs: &CloneSet,
    active: &[Pod],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let spread = cs
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty());
    let replicas = cs.spec.replicas.unwrap_or(1) as usize;
    if !spread || active.len() <= replicas {
        return BTreeMap::new();
    }
    let nodes: BTreeSet<&str> = active.iter().filter_map(pods::node_name).collect();
    nodes
        .into_iter()
        .filter_map(|node| {
            let cached = ctx.nodes.get(&ObjectRef::new(node))?;
            Some((node.to_owned(), cached.labels().clone()))
        })
        .collect()
}

/// Carries out one scale step: what it changed, and the first failure. What was done before a
/// failure counts: upstream goes on to update Pods when scaling changed nothing, even when it
/// failed (a deletion a PodUnavailableBudget refuses must not keep the set from replacing its
/// unready Pods), and only then.
async fn scale(
    actor: &Actor<'_>,
    s: &Snapshot<'_>,
    step: ScaleStep,
    pvcs: &[PersistentVolumeClaim],
    inactive: &[Pod],
) -> (Outcome, Option<Error>) {
    let mut outcome = Outcome::default();
    let failure = scale_into(actor, s, step, pvcs, inactive, &mut outcome)
        .await
        .err();
    (outcome, failure)
}

/// Creates `from_current` Pods of the current revision and `from_update` of the update one, with
/// free instance ids (reusing the ids of claims kept for reuse), in slow-start batches.
async fn scale_out(
    actor: &Actor<'_>,
    s: &Snapshot<'_>,
    pvcs: &[PersistentVolumeClaim],
    inactive: &[Pod],
    (from_current, from_update): (usize, usize),
    outcome: &mut Outcome,
) -> Result<(), Error> {
    let total = from_current + from_update;
    if total == 0 {
        return Ok(());
    }
    let id_of = |p: &Pod| pods::label(p, LABEL_INSTANCE_ID).map(str::to_owned);
    let (terminating, finished): (Vec<&Pod>, Vec<&Pod>) =
        inactive.iter().partition(|p| pods::is_terminating(p));
    let mut taken: BTreeSet<String> = s.pods.iter().chain(finished).filter_map(id_of).collect();
    let mut terminating: BTreeSet<String> = terminating.into_iter().filter_map(id_of).collect();
    let newpod::ClaimIds {
        reusable: pvc_ids,
        deleting,
    } = newpod::claim_ids(pvcs);
    taken.extend(deleting);
    // A Pod the CloneSet no longer owns may still hold a PVC id's name (one relabelled out
    // of the selector and released): that id is not free.
    let namespace = s.cs.namespace().unwrap_or_default();
    let cs_name = s.cs.name_any();
    for id in &pvc_ids {
        if taken.contains(id) || terminating.contains(id) {
            continue;
        }
        if let Some(holder) = actor
            .ctx
            .base
            .pods
            .get(&namespace, &newpod::pod_name(&cs_name, id))
        {
            if pods::is_terminating(&holder) {
                terminating.insert(id.clone());
            } else {
                taken.insert(id.clone());
            }
        }
    }
    let ids = {
        let mut rng = rand::rng();
        newpod::instance_ids(total, &taken, &terminating, &pvc_ids, || {
            newpod::random_id(|n| rng.random_range(0..n))
        })
    };
    // A replacement waiting for its predecessor's name: the Pod's deletion brings the
    // CloneSet back; this is the backstop.
    if ids.iter().any(|id| id.now().is_none()) {
        outcome.after = Some(TERMINATION_RETRY);
    }
    let existing_pvcs: BTreeSet<String> = pvcs.iter().map(|p| p.name_any()).collect();
    let mut to_create = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let Some(id) = id.now() else {
            continue;
        };
        let revision = if n < from_current {
            s.current
        } else {
            s.update
        };
        let pod = newpod::build_pod(
            s.cs,
            revision.template,
            revision.name,
            id,
            s.now,
            s.settings.gates.short_hash,
        )
        .map_err(|e| Error::Invalid(e.to_string()))?;
        let claims: Vec<PersistentVolumeClaim> = newpod::build_pvcs(s.cs, id)
            .map_err(|e| Error::Invalid(e.to_string()))?
            .into_iter()
            .filter(|c| !existing_pvcs.contains(&c.name_any()))
            .collect();
        to_create.push((pod, claims));
    }
    if crate::parallel::this_round(&mut to_create) {
        outcome.after = Some(Duration::ZERO);
    }
    // Slow start: batches of 1, 2, 4, ... stop at the first batch with a failure, so a
    // quota or webhook rejection costs one request, not hundreds.
    let mut batch = 1;
    let mut queue = to_create.into_iter();
    loop {
        let chunk: Vec<_> = queue.by_ref().take(batch).collect();
        if chunk.is_empty() {
            break;
        }
        let results = futures::future::join_all(
            chunk
                .into_iter()
                .map(|(pod, claims)| actor.create_pod(pod, claims)),
        )
        .await;
        if results.iter().any(|&ok| ok) {
            outcome.modified = true;
        }
        if results.iter().any(|&ok| !ok) {
            return Err(Error::Invalid("failed to create pods".into()));
        }
        batch *= 2;
    }
    Ok(())
}

async fn scale_into(
    actor: &Actor<'_>,
    s: &Snapshot<'_>,
    step: ScaleStep,
    pvcs: &[PersistentVolumeClaim],
    inactive: &[Pod],
    outcome: &mut Outcome,
) -> Result<(), Error> {
    let mark_not_ready = |hook: Option<&kruise_api::pub_types::LifecycleHook>| {
        hook.is_some_and(|h| h.mark_pod_not_ready)
    };
    let lifecycle = s.cs.spec.lifecycle.as_ref();
    match step {
        ScaleStep::None => {}
        ScaleStep::Regret(indexes) => {
            for i in indexes {
                outcome.merge(
                    actor
                        .set_lifecycle(&s.pods[i], LifecycleState::PreparingNormal, false)
                        .await?,
                );
            }
        }
        ScaleStep::Create {
            from_current,
            from_update,
            limited,
        } => {
            if let Some(limit) = limited {
                actor
                    .event(
                        EventType::Warning,
                        "ScaleUpLimited",
                        format!("scaleUp is limited because of scaleStrategy.maxUnavailable, limit: {limit}"),
                    )
                    .await;
            }
            scale_out(
                actor,
                s,
                pvcs,
                inactive,
                (from_current, from_update),
                outcome,
            )
            .await?;
        }
        ScaleStep::Delete {
            mut delete,
            mut prepare,
        } => {
            if crate::parallel::this_round(&mut delete) | crate::parallel::this_round(&mut prepare)
            {
                outcome.after = Some(Duration::ZERO);
            }
            let pre_delete = lifecycle.and_then(|l| l.pre_delete.as_ref());
            for i in prepare {
                outcome.merge(
                    actor
                        .set_lifecycle(
                            &s.pods[i],
                            LifecycleState::PreparingDelete,
                            mark_not_ready(pre_delete),
                        )
                        .await?,
                );
            }
            let mut pending: Vec<Write<'_>> = Vec::new();
            for i in delete {
                pending.push(Box::pin(async move {
                    actor.delete_pod(&s.pods[i], pvcs).await.map(|()| Outcome {
                        modified: true,
                        after: None,
                    })
                }));
            }
            let mut first_error = None;
            for result in crate::parallel::in_parallel(pending).await {
                match result {
                    Ok(done) => outcome.merge(done),
                    Err(error) => {
                        first_error.get_or_insert(error);
                    }
                }
            }
            if let Some(error) = first_error {
                return Err(error);
            }
        }
    }
    Ok(())
}

async fn update(
    actor: &Actor<'_>,
    s: &Snapshot<'_>,
    mut step: decide::UpdateStep,
) -> Result<Outcome, Error> {
    let mut outcome = Outcome::default();
    // A large step is done in rounds (the status is written between them).
    let more_fixes = crate::parallel::this_round(&mut step.fixes);
    let lifecycle = s.cs.spec.lifecycle.as_ref();
    // Pods are independent of each other here: write to several at once.
    let mut pending: Vec<Write<'_>> = Vec::new();
    for fix in &step.fixes {
        pending.push(Box::pin(async move {
            match fix {
                Fix::InPlaceReady(i, state) => {
                    let finish = inplace::Finish {
                        lifecycle: *state,
                        kruise_pod_ready: state.is_some_and(|s| releases_pod_ready(s, lifecycle)),
                    };
                    actor.finish_in_place(&s.pods[*i], finish).await
                }
                Fix::InPlaceNextBatch(i) => actor.update_next_batch(&s.pods[*i]).await,
                Fix::Lifecycle(i, state) => {
                    let mark = releases_pod_ready(*state, lifecycle);
                    actor.set_lifecycle(&s.pods[*i], *state, mark).await
                }
                Fix::TemplateHash(i, hash) => actor.add_template_hash(&s.pods[*i], hash).await,
            }
        }));
    }
    for result in crate::parallel::in_parallel(pending).await {
        match result {
            Ok(o) => outcome.merge(o),
            Err(Error::Kube { source, .. }) if is_race(&source) => {}
            Err(error) => return Err(error),
        }
    }
    if more_fixes {
        outcome.after = Some(Duration::ZERO);
    }
    if outcome.modified || more_fixes {
        return Ok(outcome);
    }
    let refusals: Vec<(usize, &String)> = step
        .actions
        .iter()
        .filter_map(|a| match a {
            UpdateAction::Refuse { pod, message } => Some((*pod, message)),
            _ => None,
        })
        .collect();
    if let Some((_, first)) = refusals.first() {
        // InPlaceOnly and a change that cannot be made in place: touch no Pod at all, and say why
        // for each Pod (the first reason also becomes the FailedUpdate condition's message).
        for (pod, message) in &refusals {
            actor
                .pod_event(
                    EventType::Warning,
                    "RefusePodNotInPlace",
                    format!("{message}; InPlaceOnly does not recreate it"),
                    s.pods[*pod].metadata.name.as_deref(),
                )
                .await;
        }
        return Err(Error::Invalid(format!(
            "{first}; InPlaceOnly does not recreate it"
        )));
    }
    let more_actions = crate::parallel::this_round(&mut step.actions);
    let target = step.target.as_str();
    let mut pending: Vec<Write<'_>> = Vec::new();
    for action in &step.actions {
        pending.push(Box::pin(async move {
            match action {
                UpdateAction::PrepareUpdate {
                    pod,
                    mark_not_ready,
                    readd_hook,
                } => {
                    if *readd_hook {
                        actor.readd_hook(&s.pods[*pod], *mark_not_ready).await
                    } else {
                        actor
                            .set_lifecycle(
                                &s.pods[*pod],
                                LifecycleState::PreparingUpdate,
                                *mark_not_ready,
                            )
                            .await
                    }
                }
                UpdateAction::InPlace { pod, plan } => {
                    actor.update_in_place(&s.pods[*pod], plan, target).await
                }
                UpdateAction::Recreate { pod, not_in_place } => {
                    actor
                        .recreate(&s.pods[*pod], target, not_in_place.as_deref())
                        .await
                }
                UpdateAction::Refuse { .. } => Ok(Outcome::default()),
            }
        }));
    }
    match outcome.run_round(pending, more_actions).await {
        Some(error) => Err(error),
        None => Ok(outcome),
    }
}

async fn write_status(
    ctx: &Context,
    cs: &CloneSet,
    namespace: &str,
    old: Option<&CloneSetStatus>,
    new: &CloneSetStatus,
) -> Result<(), Error> {
    let api =
        crate::driver::writes::Writer::<CloneSet>::namespaced(ctx.base.writes.clone(), namespace);
    crate::driver::write::write_status(&api, cs, old, new, status::changed(old, new)).await?;
    Ok(())
}

/// Removes names from `scaleStrategy.podsToDelete` that no longer name a Pod of the set.
async fn truncate_pods_to_delete(
    ctx: &Context,
    cs: &CloneSet,
    namespace: &str,
    name: &str,
    active: &[Pod],
) -> Result<(), Error> {
    let listed = &cs.spec.scale_strategy.pods_to_delete;
    if listed.is_empty() {
        return Ok(());
    }
    let names: BTreeSet<&str> = active
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let kept: Vec<&String> = listed
        .iter()
        .filter(|n| names.contains(n.as_str()))
        .collect();
    if kept.len() == listed.len() {
        return Ok(());
    }
    let api =
        crate::driver::writes::Writer::<CloneSet>::namespaced(ctx.base.writes.clone(), namespace);
    let patch = json!({
        "metadata": {"resourceVersion": cs.metadata.resource_version},
        "spec": {"scaleStrategy": {"podsToDelete": kept}},
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_race(&error) => Ok(()),
        Err(error) => Err(Error::Kube {
            context: format!("pruning podsToDelete of CloneSet {namespace}/{name}"),
            source: error,
        }),
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
