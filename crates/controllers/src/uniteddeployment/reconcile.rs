//! One reconcile of a UnitedDeployment: wait for our own writes to show, choose the revisions,
//! claim the subset workloads, allocate replicas and partitions, create / update / delete subsets,
//! then write the status and prune the history.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::uniteddeployment::template_as_v1alpha1;
use kruise_api::uniteddeployment::v1beta1::{
    SUBSET_CONDITION_SCHEDULABLE, UnitedDeployment, UnitedDeploymentStatus,
};
use kruise_api::validation::selector_matches;
use kruise_core::expectations::{CachedState, Expectation};
use kruise_core::ownership::{Claim, Claimant, adopt_patch, claim, release_patch};
use kruise_core::revision::{Parent, build_revision, next_revision_number, revisions_to_delete};
use kruise_core::rollout::uniteddeployment::{
    self as planner, Existing, SubsetReservation, TemplateKind,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::observe::{Observed, observe};
use super::reservation;
use super::status::{self, Outcome};
use super::{CONTROLLER, CREATED_SUBSET, Context, Error, expectation_kind};
use crate::cache::{NOT_LISTED_RETRY, listed};
use crate::claim::Recheck;
use crate::driver::Owner;
use crate::driver::write::StatusWrite;
use crate::driver::writes::Writer;
use crate::error::is_race;

/// The resync period when nothing else asks for a look sooner.
const RESYNC: Duration = Duration::from_secs(300);

/// The owner reference every subset workload and revision carries: OpenKruise v1.9 writes the
/// v1alpha1 apiVersion (see the fixtures), so we do too — a switch between the two changes nothing.
pub(crate) const OWNER_API_VERSION: &str = "apps.kruise.io/v1alpha1";

pub(crate) async fn reconcile(
    ud: Arc<UnitedDeployment>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    // Boxed, as every large step below: debug builds poll deep futures on 2 MiB worker stacks.
    Box::pin(reconcile_inner(&ud, &ctx)).await
}

fn owner_reference(ud: &UnitedDeployment) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: OWNER_API_VERSION.into(),
        kind: "UnitedDeployment".into(),
        name: ud.metadata.name.clone()?,
        uid: ud.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

pub(crate) async fn publish(
    ctx: &Context,
    ud: &UnitedDeployment,
    type_: EventType,
    reason: &str,
    note: String,
) {
    ctx.recorder
        .record(&ud.object_ref(&()), type_, reason, note)
        .await;
}

/// `Some(wait)` while a write of ours has not shown in the caches yet (and has not expired).
fn pending_unmet(ctx: &Context, key: &str, ud: &UnitedDeployment) -> Option<Duration> {
    let namespace = ud.metadata.namespace.as_deref().unwrap_or_default();
    let owner_uid = ud.metadata.uid.as_deref().unwrap_or_default();
    let check = {
        let mut expectations = ctx.expectations.lock().ok()?;
        expectations.check(key, Instant::now(), |e| {
            if e.kind == "UnitedDeployment" {
                return e.satisfied_by(Some(CachedState::of(&ud.metadata)));
            }
            if e.kind == CREATED_SUBSET {
                // Any workload of the subset owned by this UnitedDeployment, of any kind.
                return ctx.workloads.iter().any(|(_, _, store)| {
                    store.in_namespace(namespace).iter().any(|o| {
                        o.labels().get(keys::LABEL_SUBSET_NAME) == Some(&e.name)
                            && o.owner_references().iter().any(|r| r.uid == owner_uid)
                    })
                });
            }
            let Some(kind) = TemplateKind::ALL
                .into_iter()
                .find(|k| expectation_kind(*k) == e.kind)
            else {
                return true;
            };
            ctx.workloads_of(kind).is_none_or(|(_, _, store)| {
                let cached = store
                    .in_namespace(namespace)
                    .into_iter()
                    .find(|o| o.metadata.name.as_deref() == Some(&e.name));
                e.satisfied_by(cached.as_deref().map(|o| CachedState::of(&o.metadata)))
            })
        })
    };
    if !check.expired.is_empty() {
        ctx.metrics.expired(CONTROLLER, check.expired.len());
        tracing::info!(uniteddeployment = key, expired = ?check.expired, "expectations expired unobserved; carrying on");
    }
    (!check.satisfied()).then_some(Duration::from_millis(300))
}

/// Remembers a write until the caches show it.
fn expect(ctx: &Context, key: &str, expectation: Expectation) {
    if let Ok(mut expectations) = ctx.expectations.lock() {
        expectations.expect(key, expectation, Instant::now());
    }
}

async fn reconcile_inner(ud: &UnitedDeployment, ctx: &Context) -> Result<Action, Error> {
    let Owner {
        namespace,
        key,
        uid,
        ..
    } = match crate::driver::begin(ud, &ctx.expectations, |key, _| pending_unmet(ctx, key, ud)) {
        Ok(owner) => owner,
        Err(action) => return Ok(action),
    };
    if !(listed(&ctx.revisions) && ctx.workloads.iter().all(|(_, _, subsets)| subsets.listed())) {
        return Ok(Action::requeue(NOT_LISTED_RETRY));
    }
    let Some(kind) = TemplateKind::of(&ud.spec.template) else {
        // Validation requires a template; an object written around the webhook is left alone.
        return Ok(Action::await_change());
    };
    let Some(owner) = owner_reference(ud) else {
        return Ok(Action::await_change());
    };
    let now = Timestamp::now();
    let old_status = ud.status.clone().unwrap_or_default();
    let mut new_status = old_status.clone();
    status::init(&mut new_status, ud);

    // Revisions.
    let Some(Revisions {
        owned: revisions,
        current: current_name,
        update: update_name,
    }) = Box::pin(revisions_of(ctx, ud, &namespace, &uid, &old_status)).await?
    else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    status::set_updated_condition(&mut new_status, &current_name, &update_name, now);

    // Subsets.
    let (observed, others) =
        Box::pin(find_subsets(ctx, ud, &key, kind, &owner, &update_name)).await?;

    // Adaptive scheduling: which subsets count as unschedulable.
    let strategy = &ud.spec.topology.schedule_strategy;
    let Schedulability {
        mut requeue,
        unschedulable,
        reservations,
    } = Box::pin(schedulability(
        ctx,
        ud,
        &key,
        &observed,
        &mut new_status,
        &update_name,
        now,
    ))
    .await?;

    let Some(next_replicas) =
        allocate_replicas(ctx, ud, &key, &observed, &unschedulable, &reservations).await
    else {
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    reservation::mark_recovered(
        &mut new_status,
        &reservations,
        &observed,
        &next_replicas,
        now,
    );
    let next_partitions = planner::next_partitions(&ud.spec, &next_replicas);

    // Provision: create what is missing, delete what left the topology or is of another kind.
    let outcome = Box::pin(manage(
        ctx,
        ud,
        &key,
        kind,
        &owner,
        &observed,
        &others,
        &next_replicas,
        &next_partitions,
        &update_name,
        &reservations,
    ))
    .await;
    if outcome.created > 0 && strategy.is_adaptive() {
        requeue = requeue.min(Duration::from_secs(
            u64::try_from(strategy.reschedule_critical_seconds())
                .unwrap_or(1)
                .max(1),
        ));
    }

    let computed = status::compute(status::Inputs {
        ud,
        status: new_status,
        observed: &observed,
        next_replicas: &next_replicas,
        next_partitions: &next_partitions,
        current_revision: &current_name,
        update_revision: &update_name,
        outcome: &outcome,
        reservations: &reservations,
        now,
    });
    Box::pin(write_status(ctx, ud, &key, &old_status, computed)).await?;

    let pod_labels: Vec<String> = observed
        .values()
        .flat_map(|o| o.pods.iter())
        .filter_map(|p| {
            p.labels()
                .get(keys::LABEL_CONTROLLER_REVISION_HASH)
                .cloned()
        })
        .collect();
    truncate_history(
        ctx,
        ud,
        &namespace,
        &revisions,
        &current_name,
        &update_name,
        &pod_labels,
    )
    .await?;

    if outcome.raced {
        requeue = requeue.min(crate::driver::RACE_RETRY);
    }
    if outcome.errors.is_empty() {
        Ok(Action::requeue(requeue.max(Duration::from_millis(100))))
    } else {
        Err(Error::Invalid(outcome.errors.join("; ")))
    }
}

/// The replicas of each subset ([`planner::allocate`]); `None` (and a Warning) when the specified
/// subset replicas cannot be met.
async fn allocate_replicas(
    ctx: &Context,
    ud: &UnitedDeployment,
    key: &str,
    observed: &BTreeMap<String, Observed>,
    unschedulable: &BTreeSet<String>,
    reservations: &BTreeMap<String, SubsetReservation>,
) -> Option<BTreeMap<String, i32>> {
    let allocation_input: BTreeMap<String, Existing> = observed
        .iter()
        .map(|(subset, seen)| {
            (
                subset.clone(),
                Existing {
                    spec_replicas: seen.spec_replicas,
                    ready_replicas: seen.ready_replicas,
                    unschedulable: unschedulable.contains(subset),
                    marked_unschedulable: reservations
                        .get(subset)
                        .is_some_and(|r| r.marked_unschedulable),
                    reserved_pods: reservations.get(subset).map_or(0, |r| r.reserved_pods),
                },
            )
        })
        .collect();
    match planner::allocate(&ud.spec, &allocation_input) {
        Ok(next) => Some(next),
        Err(message) => {
            tracing::warn!(uniteddeployment = %key, %message, "specified subset replicas are ineffective");
            publish(
                ctx,
                ud,
                EventType::Warning,
                "Failed SpecifySubsetReplicas",
                format!("Specified subset replicas is ineffective: {message}"),
            )
            .await;
            None
        }
    }
}

/// The UnitedDeployment's revisions: those it owns, its current one and its update one (created
/// when missing; `None` until the cache shows it).
struct Revisions {
    owned: Vec<ControllerRevision>,
    current: String,
    update: String,
}

async fn revisions_of(
    ctx: &Context,
    ud: &UnitedDeployment,
    namespace: &str,
    uid: &str,
    old_status: &UnitedDeploymentStatus,
) -> Result<Option<Revisions>, Error> {
    let revisions = owned_revisions(ctx, namespace, uid);
    let update = match Box::pin(update_revision(ctx, ud, namespace, &revisions)).await {
        Ok(Some(update)) => update,
        Ok(None) => return Ok(None),
        Err(error) => {
            publish(
                ctx,
                ud,
                EventType::Warning,
                "FailedRevisionProvision",
                error.to_string(),
            )
            .await;
            return Err(error);
        }
    };
    let update_name = update.name_any();
    let current_name = if !old_status.current_revision.is_empty()
        && revisions
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(old_status.current_revision.as_str()))
    {
        old_status.current_revision.clone()
    } else {
        update_name.clone()
    };
    Ok(Some(Revisions {
        owned: revisions,
        current: current_name,
        update: update_name,
    }))
}

/// The subset workloads of the template's kind, claimed and one per subset (duplicates deleted),
/// as observed, and the owned workloads of other kinds (to delete).
async fn find_subsets(
    ctx: &Context,
    ud: &UnitedDeployment,
    key: &str,
    kind: TemplateKind,
    owner: &OwnerReference,
    update_name: &str,
) -> Result<
    (
        BTreeMap<String, Observed>,
        Vec<(TemplateKind, Arc<DynamicObject>)>,
    ),
    Error,
> {
    let namespace = ud.namespace().unwrap_or_default();
    let mut recheck = Recheck::new(
        ctx.live.clone(),
        Some(&namespace),
        ud.name_any(),
        owner.uid.clone(),
    );
    let (groups, others) = match Box::pin(claim_subsets(ctx, ud, kind, owner, &mut recheck)).await {
        Ok(found) => found,
        Err(error) => {
            publish(
                ctx,
                ud,
                EventType::Warning,
                "Failed FindSubsets",
                error.to_string(),
            )
            .await;
            return Err(error);
        }
    };
    let existing = match Box::pin(delete_duplicates(ctx, key, kind, groups)).await {
        Ok(existing) => existing,
        Err(error) => {
            publish(
                ctx,
                ud,
                EventType::Warning,
                "FailedDeleteDuplicatedSubsets",
                error.to_string(),
            )
            .await;
            return Err(error);
        }
    };
    let observed: BTreeMap<String, Observed> = existing
        .into_iter()
        .map(|(subset, object)| (subset, observe(ctx, kind, object, update_name)))
        .collect();

    Ok((observed, others))
}

/// Which subsets count as unschedulable, and when to look again.
struct Schedulability {
    requeue: Duration,
    unschedulable: BTreeSet<String>,
    /// Per subset, the Pods reserved as unschedulable (`reserveUnschedulablePods`).
    reservations: BTreeMap<String, SubsetReservation>,
}

/// The adaptive schedule strategy's view of the subsets: with `reserveUnschedulablePods`, the
/// reserved Pods (labelled); otherwise each subset's `Schedulable` condition in `new_status`.
async fn schedulability(
    ctx: &Context,
    ud: &UnitedDeployment,
    key: &str,
    observed: &BTreeMap<String, Observed>,
    new_status: &mut UnitedDeploymentStatus,
    update_name: &str,
    now: Timestamp,
) -> Result<Schedulability, Error> {
    let mut requeue = RESYNC;
    let mut unschedulable: BTreeSet<String> = BTreeSet::new();
    let strategy = &ud.spec.topology.schedule_strategy;
    let mut reservations = BTreeMap::new();
    if strategy.should_reserve_unschedulable_pods() {
        let (found, after) = reservation::reserve(&ud.spec, observed, new_status, update_name, now);
        Box::pin(reservation::label_reserved(ctx, key, observed, &found)).await?;
        if let Some(after) = after {
            requeue = requeue.min(after);
        }
        unschedulable.extend(
            found
                .iter()
                .filter(|(_, r)| r.unschedulable)
                .map(|(s, _)| s.clone()),
        );
        reservations = found;
    } else if strategy.is_adaptive() {
        let critical =
            Duration::from_secs(u64::try_from(strategy.reschedule_critical_seconds()).unwrap_or(0));
        let window = Duration::from_secs(
            u64::try_from(strategy.unschedulable_duration_seconds()).unwrap_or(0),
        );
        for (subset, seen) in observed {
            let Some(subset_status) = new_status
                .subset_statuses
                .iter_mut()
                .find(|s| &s.name == subset)
            else {
                continue;
            };
            let condition = subset_status
                .conditions
                .iter()
                .find(|c| c.type_ == SUBSET_CONDITION_SCHEDULABLE)
                .cloned();
            let pods: Vec<&Pod> = seen.pods.iter().map(|p| p.as_ref()).collect();
            let verdict = planner::adaptive_schedulable(
                condition.as_ref(),
                &pods,
                seen.status_replicas,
                seen.ready_replicas,
                critical,
                window,
                now,
            );
            if let Some(condition) = verdict.condition {
                planner::set_subset_condition(
                    &mut subset_status.conditions,
                    SUBSET_CONDITION_SCHEDULABLE,
                    condition,
                    now,
                );
            }
            if verdict.unschedulable {
                unschedulable.insert(subset.clone());
            }
            if let Some(after) = verdict.requeue_after {
                requeue = requeue.min(after);
            }
        }
    }

    Ok(Schedulability {
        requeue,
        unschedulable,
        reservations,
    })
}

fn owned_revisions(ctx: &Context, namespace: &str, uid: &str) -> Vec<ControllerRevision> {
    ctx.revisions
        .state()
        .iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(namespace))
        .filter(|r| {
            r.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .map(|r| r.as_ref().clone())
        .collect()
}

/// Registers the revision of the current template (re-using or renumbering an equal one); `None`
/// after a hash collision was recorded (the next reconcile names the revision differently).
async fn update_revision(
    ctx: &Context,
    ud: &UnitedDeployment,
    namespace: &str,
    revisions: &[ControllerRevision],
) -> Result<Option<ControllerRevision>, Error> {
    let collision_count = ud.status.as_ref().and_then(|s| s.collision_count);
    let data = planner::revision_data(&template_as_v1alpha1(&ud.metadata, &ud.spec.template))
        .map_err(|e| Error::Invalid(format!("building the revision: {e}")))?;
    // Kubernetes' NewControllerRevision copies no annotations of the parent.
    let mut meta = ud.metadata.clone();
    meta.annotations = None;
    let mut candidate = build_revision(
        Parent {
            kind: "UnitedDeployment",
            meta: &meta,
        },
        Some(namespace.to_string()),
        planner::revision_labels(&ud.spec.template),
        data,
        next_revision_number(revisions),
        collision_count,
    )
    .map_err(|e| Error::Invalid(format!("building the revision: {e}")))?;
    for owner in candidate.metadata.owner_references.iter_mut().flatten() {
        owner.api_version = OWNER_API_VERSION.into();
    }
    let registered = crate::history::update_revision(
        &ctx.writes,
        ctx.live.as_ref(),
        ud,
        revisions,
        candidate,
        collision_count,
        |count| json!({"status": {"collisionCount": count}}),
    )
    .await?;
    Ok(registered.map(|(revision, _)| revision))
}

/// The subset workloads of the UD: those of the template's kind grouped by subset name (adopting
/// orphans whose labels match the selector, releasing owned ones that no longer match), and the
/// owned workloads of the other kinds (a changed template kind), to delete.
async fn claim_subsets(
    ctx: &Context,
    ud: &UnitedDeployment,
    kind: TemplateKind,
    owner: &OwnerReference,
    recheck: &mut Recheck<UnitedDeployment>,
) -> Result<
    (
        BTreeMap<String, Vec<Arc<DynamicObject>>>,
        Vec<(TemplateKind, Arc<DynamicObject>)>,
    ),
    Error,
> {
    let namespace = ud.namespace().unwrap_or_default();
    let claimant = Claimant {
        uid: &owner.uid,
        deleting: false,
    };
    let selector = ud.spec.selector.clone().unwrap_or_default();
    let mut groups: BTreeMap<String, Vec<Arc<DynamicObject>>> = BTreeMap::new();
    let mut others = Vec::new();
    for (each, resource, store) in &ctx.workloads {
        let mut objects: Vec<Arc<DynamicObject>> = store.in_namespace(&namespace);
        objects.sort_by(|a, b| {
            (
                a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                a.name_any(),
            )
                .cmp(&(
                    b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    b.name_any(),
                ))
        });
        for object in objects {
            let matches = selector_matches(
                &selector,
                object.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
            );
            let decision = claim(claimant, &object.metadata, Some(matches));
            if *each != kind {
                if decision == Claim::Keep || decision == Claim::Release {
                    others.push((*each, object));
                }
                continue;
            }
            let object = match decision {
                Claim::Keep => object,
                Claim::Adopt => {
                    if !recheck.may_adopt().await? {
                        continue;
                    }
                    let patch = adopt_patch(&object.metadata, owner).map_err(|e| {
                        Error::Invalid(format!("adopting {}: {e}", object.name_any()))
                    })?;
                    match write_json_patch(ctx, resource, &namespace, &object.name_any(), patch)
                        .await?
                    {
                        Some(written) => Arc::new(written),
                        None => continue,
                    }
                }
                Claim::Release => {
                    if let Some(patch) = release_patch(&object.metadata, &owner.uid) {
                        write_json_patch(ctx, resource, &namespace, &object.name_any(), patch)
                            .await?;
                    }
                    continue;
                }
                Claim::Ignore => continue,
            };
            // A workload without a subset name cannot be placed (upstream skips it too).
            let Some(subset) = object
                .labels()
                .get(keys::LABEL_SUBSET_NAME)
                .filter(|s| !s.is_empty())
                .cloned()
            else {
                continue;
            };
            groups.entry(subset).or_default().push(object);
        }
    }
    Ok((groups, others))
}

async fn write_json_patch(
    ctx: &Context,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
    patch: json_patch::Patch,
) -> Result<Option<DynamicObject>, Error> {
    let api = Writer::<DynamicObject>::namespaced_with(ctx.writes.clone(), namespace, resource);
    match api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(error) if is_race(&error) => Ok(None),
        Err(source) => Err(Error::Kube {
            context: format!("claiming {} {name}", resource.kind),
            source,
        }),
    }
}

/// Keeps the first workload of every subset name and deletes the others.
async fn delete_duplicates(
    ctx: &Context,
    key: &str,
    kind: TemplateKind,
    groups: BTreeMap<String, Vec<Arc<DynamicObject>>>,
) -> Result<BTreeMap<String, Arc<DynamicObject>>, Error> {
    let mut existing = BTreeMap::new();
    for (subset, mut objects) in groups {
        if objects.is_empty() {
            continue;
        }
        let first = objects.remove(0);
        for duplicate in objects {
            tracing::info!(uniteddeployment = key, subset = %subset, workload = %duplicate.name_any(), "deleting a duplicated subset");
            delete_workload(ctx, key, kind, &duplicate).await?;
        }
        existing.insert(subset, first);
    }
    Ok(existing)
}

async fn delete_workload(
    ctx: &Context,
    key: &str,
    kind: TemplateKind,
    object: &DynamicObject,
) -> Result<(), Error> {
    let Some((_, resource, _)) = ctx.workloads_of(kind) else {
        return Ok(());
    };
    let namespace = object.namespace().unwrap_or_default();
    let api = Writer::<DynamicObject>::namespaced_with(ctx.writes.clone(), &namespace, resource);
    let params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(&object.name_any(), &params).await {
        Ok(_) => {}
        Err(error) if is_race(&error) => {}
        Err(source) => {
            return Err(Error::Kube {
                context: format!("deleting {} {}", resource.kind, object.name_any()),
                source,
            });
        }
    }
    expect(
        ctx,
        key,
        Expectation::gone(
            expectation_kind(kind),
            object.name_any(),
            object.metadata.uid.clone(),
        ),
    );
    Ok(())
}

/// Creates the planned subset workloads in slow-start batches (1, 2, 4, …), stopping after a
/// batch with a failure; how many were created, and the failures.
async fn create_subsets(
    ctx: &Context,
    key: &str,
    api: &Writer<DynamicObject>,
    subset_type: &str,
    creates: &[(String, Result<serde_json::Value, String>)],
) -> (usize, Vec<String>) {
    let mut created = 0;
    let mut provision_errors = Vec::new();
    let mut index = 0;
    let mut batch = 1;
    let mut failed = false;
    while index < creates.len() && !failed {
        let end = (index + batch).min(creates.len());
        let results =
            futures::future::join_all(creates[index..end].iter().map(|(subset, body)| {
                let api = api.clone();
                async move {
                    let failure = |e: &dyn std::fmt::Display| {
                        format!("fail to create Subset ({subset_type}) {subset}: {e}")
                    };
                    let body = body.clone().map_err(|e| failure(&e))?;
                    let object: DynamicObject =
                        serde_json::from_value(body).map_err(|e| failure(&e))?;
                    api.create(&PostParams::default(), &object)
                        .await
                        .map(|_| ())
                        .map_err(|e| failure(&e))
                }
            }))
            .await;
        for ((subset, _), result) in creates[index..end].iter().zip(results) {
            match result {
                Ok(()) => {
                    created += 1;
                    expect(
                        ctx,
                        key,
                        Expectation::exists(CREATED_SUBSET, subset.clone()),
                    );
                }
                Err(message) => {
                    failed = true;
                    provision_errors.push(message);
                }
            }
        }
        index = end;
        batch *= 2;
    }
    (created, provision_errors)
}

/// Carries out [`planner::plan_subsets`]: creates the missing subset workloads (slow start:
/// batches of 1, 2, 4, … stopping at the first batch with a failure), deletes those that left the
/// topology and those of another kind; then, only when all of that went through, updates the
/// others one at a time (slow start with batches of one: the first failure stops the updates).
#[allow(clippy::too_many_arguments)]
async fn manage(
    ctx: &Context,
    ud: &UnitedDeployment,
    key: &str,
    kind: TemplateKind,
    owner: &OwnerReference,
    observed: &BTreeMap<String, Observed>,
    others: &[(TemplateKind, Arc<DynamicObject>)],
    next_replicas: &BTreeMap<String, i32>,
    next_partitions: &BTreeMap<String, i32>,
    revision: &str,
    reservations: &BTreeMap<String, SubsetReservation>,
) -> Outcome {
    let seen: BTreeMap<String, planner::SeenSubset<'_>> = observed
        .iter()
        .map(|(subset, o)| {
            let seen = planner::SeenSubset {
                metadata: &o.object.metadata,
                data: &o.object.data,
                spec_replicas: o.spec_replicas,
                partition: o.partition,
                status_replicas: o.status_replicas,
                updated_replicas: o.updated_replicas,
                pods: o.pods.iter().map(|p| p.as_ref()).collect(),
                max_unavailable: reservation::max_unavailable_override(
                    kind,
                    reservations.get(subset),
                    o,
                ),
            };
            (subset.clone(), seen)
        })
        .collect();
    let plan = planner::plan_subsets(&planner::ManageInputs {
        ud,
        kind,
        owner,
        seen: &seen,
        next_replicas,
        next_partitions,
        revision,
    });
    let mut outcome = Outcome::default();
    let namespace = ud.namespace().unwrap_or_default();
    let subset_type = kind.subset_type();
    let Some((_, resource, _)) = ctx.workloads_of(kind) else {
        return outcome;
    };
    let api = Writer::<DynamicObject>::namespaced_with(ctx.writes.clone(), &namespace, resource);

    let mut provision_errors = Vec::new();
    if !plan.creates.is_empty() {
        let (created, errors) = create_subsets(ctx, key, &api, subset_type, &plan.creates).await;
        outcome.created += created;
        if errors.is_empty() {
            publish(
                ctx,
                ud,
                EventType::Normal,
                "SuccessfulUpdateSubset",
                format!("Create {} Subset ({subset_type})", outcome.created),
            )
            .await;
        }
        provision_errors.extend(errors);
    }
    if !plan.deletes.is_empty() {
        let mut failed = false;
        for subset in &plan.deletes {
            if let Some(seen) = observed.get(subset)
                && let Err(error) = delete_workload(ctx, key, kind, &seen.object).await
            {
                failed = true;
                provision_errors.push(format!(
                    "fail to delete Subset ({subset_type}) {namespace}/{} for {subset}: {error}",
                    seen.object.name_any()
                ));
            }
        }
        if !failed {
            publish(
                ctx,
                ud,
                EventType::Normal,
                "SuccessfulUpdateSubset",
                format!("Delete {} Subset ({subset_type})", plan.deletes.len()),
            )
            .await;
        }
    }
    for (other, object) in others {
        if let Err(error) = delete_workload(ctx, key, *other, object).await {
            provision_errors.push(format!(
                "fail to delete Subset {} of other type {} for UnitedDeployment {key}: {error}",
                object.name_any(),
                other.subset_type()
            ));
        }
    }
    outcome.provisioned =
        !plan.creates.is_empty() || !plan.deletes.is_empty() || !others.is_empty();
    if !provision_errors.is_empty() {
        outcome.provision_error = Some(provision_errors.join("; "));
        outcome.errors.extend(provision_errors);
        publish(
            ctx,
            ud,
            EventType::Warning,
            "FailedUpdateSubset",
            format!(
                "fail to manage Subset provision: {}",
                outcome.provision_error.clone().unwrap_or_default()
            ),
        )
        .await;
        return outcome;
    }

    let mut update_errors = Vec::new();
    for update in &plan.updates {
        let Some(seen) = observed.get(&update.subset) else {
            continue;
        };
        if let Err(error) = Box::pin(update_subset(
            ctx, key, kind, resource, seen, update, revision,
        ))
        .await
        {
            // Upstream re-reads and updates again; here the next reconcile, on caches that show
            // the workload as it is now, decides the update again. The other subsets go on.
            if error.is_race() {
                tracing::debug!(uniteddeployment = key, subset = %update.subset, %error, "subset moved under its update: deciding again");
                outcome.raced = true;
                continue;
            }
            let message = format!(
                "Error updating PodSet ({subset_type}) {} when updating: {error}",
                seen.object.name_any()
            );
            publish(ctx, ud, EventType::Warning, "FailedUpdateSubset", message).await;
            update_errors.push(error.to_string());
            break;
        }
    }
    if !update_errors.is_empty() {
        outcome.update_error = Some(update_errors.join("; "));
        outcome.errors.extend(update_errors);
    }
    outcome
}

/// Sends one planned update of a subset workload (preconditioned on the resourceVersion it was
/// planned from), then deletes the Pods it found stuck.
async fn update_subset(
    ctx: &Context,
    key: &str,
    kind: TemplateKind,
    resource: &ApiResource,
    seen: &Observed,
    update: &planner::SubsetUpdate,
    revision: &str,
) -> Result<(), Error> {
    let patch = update.patch.clone().map_err(Error::Invalid)?;
    let object = &seen.object;
    let name = object.name_any();
    let namespace = object.namespace().unwrap_or_default();
    if let Some(patch) = patch {
        let api =
            Writer::<DynamicObject>::namespaced_with(ctx.writes.clone(), &namespace, resource);
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                let (subset, replicas, partition) =
                    (&update.subset, update.replicas, update.partition);
                tracing::info!(uniteddeployment = key, subset, workload = %name, revision, replicas, partition, "updated subset");
                if let Some(rv) = written.metadata.resource_version.clone() {
                    expect(
                        ctx,
                        key,
                        Expectation::observed(expectation_kind(kind), name.clone(), rv),
                    );
                }
            }
            Err(source) => {
                return Err(Error::Kube {
                    context: format!("updating {} {name}", resource.kind),
                    source,
                });
            }
        }
    }
    delete_stuck_pods(ctx, key, &namespace, &update.stuck_pods).await
}

/// The k8s#67250 workaround (native StatefulSet subsets with RollingUpdate): deletes the Pods
/// the plan found stuck in the rolling update, each preconditioned on its uid.
async fn delete_stuck_pods(
    ctx: &Context,
    key: &str,
    namespace: &str,
    stuck: &[(String, Option<String>)],
) -> Result<(), Error> {
    let api = Writer::<Pod>::namespaced(ctx.writes.clone(), namespace);
    for (name, uid) in stuck {
        tracing::info!(uniteddeployment = key, pod = %name, "deleting a Pod stuck in a StatefulSet rolling update");
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: uid.clone().map(|uid| kube::api::Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(error) if is_race(&error) => {}
            Err(source) => {
                return Err(Error::Kube {
                    context: format!("deleting stuck Pod {name}"),
                    source,
                });
            }
        }
    }
    Ok(())
}

async fn write_status(
    ctx: &Context,
    ud: &UnitedDeployment,
    key: &str,
    old: &UnitedDeploymentStatus,
    new: UnitedDeploymentStatus,
) -> Result<(), Error> {
    let changed = ud.status.is_none() || *old != new;
    let api = crate::driver::writes::Writer::<UnitedDeployment>::namespaced(
        ctx.writes.clone(),
        &ud.namespace().unwrap_or_default(),
    );
    let wrote =
        crate::driver::write::write_status(&api, ud, ud.status.as_ref(), &new, changed).await?;
    if let StatusWrite::Written {
        resource_version: Some(rv),
    } = wrote
        && ud.metadata.resource_version.as_deref() != Some(rv.as_str())
    {
        expect(
            ctx,
            key,
            Expectation::observed("UnitedDeployment", ud.name_any(), rv),
        );
    }
    Ok(())
}

async fn truncate_history(
    ctx: &Context,
    ud: &UnitedDeployment,
    namespace: &str,
    revisions: &[ControllerRevision],
    current: &str,
    update: &str,
    pod_labels: &[String],
) -> Result<(), Error> {
    let doomed = revisions_to_delete(
        revisions,
        current,
        update,
        pod_labels.iter().map(String::as_str),
        ud.spec.revision_history_limit,
    );
    let api = crate::driver::writes::Writer::<ControllerRevision>::namespaced(
        ctx.writes.clone(),
        namespace,
    );
    crate::driver::write::prune_revisions(&api, doomed).await?;
    Ok(())
}
