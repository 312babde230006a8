//! Lease-based leader election (`coordination.k8s.io/v1` Lease), as client-go's leaderelection does:
//! acquire a free or expired lease, renew it every retry period, give up if renewal fails for the renew
//! deadline, and release it on graceful shutdown so a standby takes over at once.
//!
//! Every write carries the resourceVersion read just before, so two candidates can never both win.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::fence::LeaderFence;

/// What a candidate should do with the lease as it is now. Pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// The lease does not exist: create it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free (no holder) or expired: take it over.
    TakeOver,
    /// Someone else holds a live lease.
    Wait,
}

pub fn decide(lease: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> Decision {
    let Some(spec) = lease else {
        return Decision::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == identity {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    match renewed {
        Some(at) if at.as_second() + duration > now.as_second() => Decision::Wait,
        _ => Decision::TakeOver,
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

pub struct Elector {
    api: Api<Lease>,
    config: Config,
}

impl Elector {
    pub fn new(client: kube::Client, config: Config) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
        }
    }

    /// One attempt; true when we hold the lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.config.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let duration = self.config.lease_duration.as_secs() as i32;
        match decide(spec, &self.config.identity, now) {
            Decision::Wait => Ok(false),
            Decision::Create => {
                let mut lease = Lease {
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.config.identity.clone()),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                lease.metadata.name = Some(self.config.name.clone());
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(error) => Err(error),
                }
            }
            decision @ (Decision::Renew | Decision::TakeOver) => {
                let resource_version = current
                    .as_ref()
                    .and_then(|l| l.metadata.resource_version.clone());
                let mut spec = json!({
                    "holderIdentity": self.config.identity,
                    "leaseDurationSeconds": duration,
                    "renewTime": MicroTime(now),
                });
                if decision == Decision::TakeOver {
                    let transitions = current
                        .as_ref()
                        .and_then(|l| l.spec.as_ref())
                        .and_then(|s| s.lease_transitions)
                        .unwrap_or(0);
                    spec["acquireTime"] = json!(MicroTime(now));
                    spec["leaseTransitions"] = json!(transitions + 1);
                }
                match self.patch_lease(resource_version, spec).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// One attempt, bounded in time, that opens `fence` on success until the attempt's start plus the
    /// renew deadline (the lease was written with that start time, so no other candidate can take it
    /// over before `start + lease duration`, which is later).
    async fn attempt(&self, fence: &LeaderFence) -> Result<bool, String> {
        let started = std::time::Instant::now();
        let outcome =
            tokio::time::timeout(self.attempt_timeout(), self.try_acquire_or_renew()).await;
        match outcome {
            Ok(Ok(true)) => {
                fence.grant_until(Some(started + self.config.renew_deadline));
                Ok(true)
            }
            Ok(Ok(false)) => Ok(false),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!(
                "no answer from the apiserver within {:?}",
                self.attempt_timeout()
            )),
        }
    }

    /// How long one acquire/renew attempt may take: a share of the renew deadline, so that several
    /// attempts fit in it.
    fn attempt_timeout(&self) -> Duration {
        (self.config.renew_deadline / 3).max(Duration::from_millis(500))
    }

    /// Blocks until this candidate holds the lease; then `fence` is open.
    pub async fn acquire(&self, fence: &LeaderFence) {
        loop {
            match self.attempt(fence).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, lease = %self.config.name, "leader election attempt failed")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews every retry period while leading and returns as soon as this replica can no longer be
    /// sure it leads: another holder was seen, or the fence (last successful renewal + renew deadline)
    /// closed, whichever comes first. An attempt that hangs does not delay the return: the fence's
    /// deadline is awaited alongside it. On return the fence is closed.
    pub async fn hold(&self, fence: &LeaderFence) {
        loop {
            let Some(deadline) = fence.deadline() else {
                tracing::error!(lease = %self.config.name, "could not renew the lease within the renew deadline; stepping down");
                break;
            };
            let deadline = tokio::time::Instant::from_std(deadline);
            let renewal = async {
                tokio::time::sleep(self.config.retry_period).await;
                self.attempt(fence).await
            };
            tokio::select! {
                outcome = renewal => match outcome {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!(lease = %self.config.name, "the lease has another holder; stepping down");
                        break;
                    }
                    Err(error) => tracing::warn!(%error, lease = %self.config.name, "renewing the lease failed"),
                },
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
        fence.revoke();
    }

    /// Gives the lease up (empty holder) so a standby can take it at once.
    pub async fn release(&self) {
        if tokio::time::timeout(self.attempt_timeout(), self.release_now())
            .await
            .is_err()
        {
            tracing::warn!(lease = %self.config.name, "releasing the lease timed out");
        }
    }

    /// Merges `spec` into the lease, only if it is still at `resource_version` (the copy the
    /// decision was made on): a lease another candidate wrote since is a 409, never overwritten.
    async fn patch_lease(
        &self,
        resource_version: Option<String>,
        spec: serde_json::Value,
    ) -> Result<Lease, kube::Error> {
        let patch = json!({ "metadata": { "resourceVersion": resource_version }, "spec": spec });
        self.api
            .patch(
                &self.config.name,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
    }

    async fn release_now(&self) {
        let Ok(Some(current)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let ours = current
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            == Some(&self.config.identity);
        if !ours {
            return;
        }
        let spec = json!({
            "holderIdentity": null, "leaseDurationSeconds": 1, "renewTime": MicroTime(Timestamp::now())
        });
        match self
            .patch_lease(current.metadata.resource_version, spec)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.config.name, "released leadership"),
            Err(error) => tracing::warn!(%error, "releasing the lease failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, renewed_secs_ago: i64, duration: i32) -> LeaseSpec {
        let now = Timestamp::from_second(1_000_000).expect("valid");
        LeaseSpec {
            holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(MicroTime(
                Timestamp::from_second(now.as_second() - renewed_secs_ago).expect("valid"),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn decisions() {
        let now = Timestamp::from_second(1_000_000).expect("valid");
        let cases = [
            (None, Decision::Create),
            (Some(spec("me", 100, 15)), Decision::Renew),
            (Some(spec("other", 5, 15)), Decision::Wait),
            (Some(spec("other", 16, 15)), Decision::TakeOver),
            (Some(spec("", 0, 15)), Decision::TakeOver),
        ];
        for (lease, want) in cases {
            assert_eq!(decide(lease.as_ref(), "me", now), want, "{lease:?}");
        }
    }
}
