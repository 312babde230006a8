//! The AdvancedCronJob controller (upstream `pkg/controller/advancedcronjob`), on the shared driver:
//! Jobs, BroadcastJobs or ImageListPullJobs created on a cron schedule. Observe the AdvancedCronJob and
//! its jobs (the shared Job and BroadcastJob caches, this controller's ImageListPullJob watch); decide with `kruise_core::advancedcronjob::plan`; act (delete jobs past
//! the history limits or replaced, create the due run's job), write the status, and look again at
//! the next scheduled time.

mod reconcile;

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::tz::TimeZone;
use kruise_api::advancedcronjob::v1beta1::AdvancedCronJob;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_api::imagepulljob::v1beta1::ImageListPullJob;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use crate::driver::caches::{Caches, Shared};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "advancedcronjob-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles (`--advancedcronjob-workers`).
    pub workers: u16,
    /// The zone of schedules that name none (upstream: the manager process's local zone).
    pub local_time_zone: TimeZone,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            local_time_zone: TimeZone::system(),
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    pub(crate) writes: Arc<dyn crate::driver::writes::Writes>,
    pub(crate) jobs: Store<Job>,
    pub(crate) broadcastjobs: Store<BroadcastJob>,
    pub(crate) imagelistpulljobs: Store<ImageListPullJob>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Config,
}

/// The AdvancedCronJob controlling `object`, if any (either served version).
fn cron_owner<K: Resource>(object: &K) -> Option<ObjectRef<AdvancedCronJob>> {
    let meta = object.meta();
    let owner = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    let ours = owner.kind == "AdvancedCronJob"
        && owner
            .api_version
            .starts_with(&format!("{}/", kruise_api::kinds::GROUP));
    ours.then(|| ObjectRef::new(&owner.name).within(meta.namespace.as_deref().unwrap_or_default()))
}

/// Every change of a job, as a reconcile of the AdvancedCronJob controlling it.
fn owners_of<K>(
    cache: &Shared<K>,
) -> impl futures::Stream<Item = ObjectRef<AdvancedCronJob>> + Send + 'static
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    crate::cache::receiver_stream(cache.subscribe())
        .filter_map(|job| futures::future::ready(cron_owner(job.as_ref())))
}

/// Runs the AdvancedCronJob controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let job_owners = owners_of(&caches.jobs);
    let broadcastjob_owners = owners_of(&caches.broadcastjobs);
    let lists = caches.shared::<ImageListPullJob>();
    let imagelistpulljob_owners = owners_of(&lists);
    let imagelistpulljobs = lists.store().clone();
    let ctx = Arc::new(Context {
        writes: crate::driver::writes::ApiWrites::new(client.clone()),
        jobs: caches.jobs.store().clone(),
        broadcastjobs: caches.broadcastjobs.store().clone(),
        imagelistpulljobs,
        recorder: crate::driver::recorder(client.clone(), CONTROLLER),
        metrics,
        config: config.clone(),
    });
    let controller = caches
        .shared::<AdvancedCronJob>()
        .controller()
        .reconcile_on(job_owners)
        .reconcile_on(broadcastjob_owners)
        .reconcile_on(imagelistpulljob_owners);
    crate::driver::run(controller, config.workers, reconcile::reconcile, ctx).await;
}

crate::driver::driven!(Context, CONTROLLER);

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn job(owner: Option<(&str, &str, bool)>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("j".into()),
                namespace: Some("ns".into()),
                owner_references: owner.map(|(api_version, kind, controller)| {
                    vec![OwnerReference {
                        api_version: api_version.into(),
                        kind: kind.into(),
                        name: "acj".into(),
                        uid: "u".into(),
                        controller: Some(controller),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn jobs_map_to_their_controlling_advanced_cron_job() {
        let want = Some(ObjectRef::<AdvancedCronJob>::new("acj").within("ns"));
        assert_eq!(
            cron_owner(&job(Some((
                "apps.kruise.io/v1beta1",
                "AdvancedCronJob",
                true
            )))),
            want
        );
        assert_eq!(
            cron_owner(&job(Some((
                "apps.kruise.io/v1alpha1",
                "AdvancedCronJob",
                true
            )))),
            want
        );
        assert_eq!(
            cron_owner(&job(Some((
                "apps.kruise.io/v1beta1",
                "AdvancedCronJob",
                false
            )))),
            None
        );
        assert_eq!(cron_owner(&job(Some(("batch/v1", "CronJob", true)))), None);
        assert_eq!(cron_owner(&job(None)), None);
    }
}
