//! `rollout status`: one progress message per status, as `kubectl rollout status` words them, and
//! the wait loop that prints them until the rollout is done, fails or times out.

use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::intstr::{IntOrPercent, Round};
use kruise_core::rollout::cloneset::partition_replicas;
use serde_json::Value;

use crate::cluster::Ctx;
use crate::target::{Kind, Target};

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Done(String),
    Waiting(String),
    /// The rollout cannot finish (ProgressDeadlineExceeded); the command exits non-zero.
    Failed(String),
}

fn int(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn int_or_string(v: &Value, ptr: &str) -> Option<IntOrString> {
    match v.pointer(ptr)? {
        Value::Number(n) => n.as_i64().map(|n| IntOrString::Int(n as i32)),
        Value::String(s) => Some(IntOrString::String(s.clone())),
        _ => None,
    }
}

/// The condition `type_` as (status, reason, message).
fn condition<'a>(v: &'a Value, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .map(|c| {
            let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
            (s("status"), s("reason"), s("message"))
        })
}

fn deadline_exceeded(kind: Kind, name: &str, v: &Value) -> Option<Progress> {
    match condition(v, "Progressing") {
        Some(("False", "ProgressDeadlineExceeded", message)) => {
            let mut text = format!("{} {name:?} exceeded its progress deadline", kind.display());
            if !message.is_empty() {
                text.push_str(": ");
                text.push_str(message);
            }
            Some(Progress::Failed(text))
        }
        _ => None,
    }
}

/// The progress of `v`, a workload of `kind` as the API server returns it.
pub fn progress(kind: Kind, v: &Value) -> anyhow::Result<Progress> {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let what = kind.display();
    if int(v, "/status/observedGeneration") < int(v, "/metadata/generation") {
        return Ok(Progress::Waiting(format!(
            "Waiting for {what} spec update to be observed..."
        )));
    }
    if let Some(failed) = deadline_exceeded(kind, name, v) {
        return Ok(failed);
    }
    let paused = kind
        .paused_pointer()
        .and_then(|p| v.pointer(p))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match kind {
        Kind::CloneSet | Kind::AdvancedStatefulSet | Kind::Deployment | Kind::StatefulSet => {
            replicas_progress(kind, v, name, what, paused)
        }
        Kind::AdvancedDaemonSet | Kind::DaemonSet => daemon_progress(kind, v, name, paused),
        Kind::UnitedDeployment => united_progress(v, name, what, paused),
        Kind::SidecarSet => sidecarset_progress(v, name, paused),
    }
}

/// The rollout of a workload of replicas: CloneSet, Advanced StatefulSet, Deployment, StatefulSet.
fn replicas_progress(
    kind: Kind,
    v: &Value,
    name: &str,
    what: &str,
    paused: bool,
) -> anyhow::Result<Progress> {
    let replicas = v
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let partition = match kind {
        Kind::CloneSet => i64::from(
            partition_replicas(
                int_or_string(v, "/spec/updateStrategy/rollingUpdate/partition").as_ref(),
                replicas as i32,
            )
            .map_err(anyhow::Error::msg)?,
        ),
        Kind::AdvancedStatefulSet | Kind::StatefulSet => {
            int(v, "/spec/updateStrategy/rollingUpdate/partition").clamp(0, replicas)
        }
        _ => 0,
    };
    let expected = replicas - partition;
    let updated = int(v, "/status/updatedReplicas");
    let total = int(v, "/status/replicas");
    let updated_available = match kind {
        Kind::Deployment => int(v, "/status/availableReplicas"),
        Kind::StatefulSet => int(v, "/status/readyReplicas"),
        _ => int(v, "/status/updatedAvailableReplicas"),
    };
    if updated < expected {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {updated} out of {expected} new replicas have been updated..."
            ),
        );
    }
    if total > replicas {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {} old replicas are pending termination...",
                total - replicas
            ),
        );
    }
    let wanted_available = if kind == Kind::StatefulSet {
        replicas
    } else {
        expected
    };
    if updated_available < wanted_available {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {updated_available} of {wanted_available} updated replicas are available..."
            ),
        );
    }
    Ok(Progress::Done(if partition > 0 {
        format!(
            "partitioned roll out complete: {updated} new replicas have been updated, {partition} stay at the old revision (partition)"
        )
    } else {
        format!("{what} {name:?} successfully rolled out")
    }))
}

/// The rollout of a DaemonSet (Advanced or not).
fn daemon_progress(kind: Kind, v: &Value, name: &str, paused: bool) -> anyhow::Result<Progress> {
    let desired = int(v, "/status/desiredNumberScheduled");
    let partition = match kind {
        Kind::AdvancedDaemonSet => {
            match int_or_string(v, "/spec/updateStrategy/rollingUpdate/partition") {
                Some(p) => IntOrPercent::parse(&p)
                    .map_err(anyhow::Error::msg)?
                    .scaled(desired as i32, Round::Down)
                    .into(),
                None => 0,
            }
        }
        _ => 0,
    }
    .clamp(0, desired);
    let expected = desired - partition;
    let updated = int(v, "/status/updatedNumberScheduled");
    let available = int(v, "/status/numberAvailable");
    if updated < expected {
        return wait(
            paused,
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {updated} out of {expected} new pods have been updated..."
            ),
        );
    }
    if available < desired {
        return wait(
            paused,
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {available} of {desired} updated pods are available..."
            ),
        );
    }
    Ok(Progress::Done(format!(
        "daemon set {name:?} successfully rolled out"
    )))
}

/// The rollout of a UnitedDeployment.
fn united_progress(v: &Value, name: &str, what: &str, paused: bool) -> anyhow::Result<Progress> {
    let replicas = v
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let partition: i64 = v
        .pointer("/spec/updateStrategy/manualUpdate/partitions")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(_, p)| p.as_i64())
        .sum();
    let expected = (replicas - partition).max(0);
    let updated = int(v, "/status/updatedReplicas");
    let updated_ready = int(v, "/status/updatedReadyReplicas");
    let total = int(v, "/status/replicas");
    if updated < expected {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {updated} out of {expected} new replicas have been updated..."
            ),
        );
    }
    if total > replicas {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {} old replicas are pending termination...",
                total - replicas
            ),
        );
    }
    if updated_ready < expected {
        return wait(
            paused,
            format!(
                "Waiting for rollout to finish: {updated_ready} of {expected} updated replicas are ready..."
            ),
        );
    }
    Ok(Progress::Done(format!(
        "{what} {name:?} successfully rolled out"
    )))
}

/// The rollout of a SidecarSet over its matched Pods.
fn sidecarset_progress(v: &Value, name: &str, paused: bool) -> anyhow::Result<Progress> {
    let matched = int(v, "/status/matchedPods");
    let partition = match int_or_string(v, "/spec/updateStrategy/partition") {
        Some(p) => IntOrPercent::parse(&p)
            .map_err(anyhow::Error::msg)?
            .scaled(matched as i32, Round::Up)
            .into(),
        None => 0,
    }
    .clamp(0, matched);
    let expected = matched - partition;
    let updated = int(v, "/status/updatedPods");
    let updated_ready = int(v, "/status/updatedReadyPods");
    if updated < expected {
        return wait(
            paused,
            format!(
                "Waiting for sidecarset {name:?} rollout to finish: {updated} out of {expected} matched Pods have been updated..."
            ),
        );
    }
    if updated_ready < expected {
        return wait(
            paused,
            format!(
                "Waiting for sidecarset {name:?} rollout to finish: {updated_ready} of {expected} updated Pods are ready..."
            ),
        );
    }
    Ok(Progress::Done(format!(
        "sidecarset {name:?} successfully rolled out ({updated} of {matched} matched Pods updated)"
    )))
}

/// A rollout still going, with `(rollout paused)` when it is paused.
fn wait(paused: bool, msg: String) -> anyhow::Result<Progress> {
    Ok(Progress::Waiting(if paused {
        format!("{msg} (rollout paused)")
    } else {
        msg
    }))
}

/// Follows the rollout, printing each new message. `timeout` zero waits forever; `watch` false prints
/// the current state once.
pub async fn run(ctx: &Ctx, target: &Target, watch: bool, timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let object = ctx.get(target).await?;
        match progress(target.kind, &object)? {
            Progress::Done(msg) => {
                println!("{msg}");
                return Ok(());
            }
            Progress::Failed(msg) => bail!("{msg}"),
            Progress::Waiting(msg) => {
                if msg != last {
                    println!("{msg}");
                    last = msg;
                }
                if !watch {
                    return Ok(());
                }
            }
        }
        if !timeout.is_zero() && started.elapsed() >= timeout {
            bail!("timed out waiting for the condition");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `30s`, `5m`, `1h30m`, `0` (kubectl's duration flags; a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = 0.0_f64;
    let mut number = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                'h' => 3600.0,
                'm' => 60.0,
                's' => 1.0,
                _ => return Err(format!("invalid duration {text:?}")),
            }
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("invalid duration {text:?}"))?;
        total += value * unit;
        number.clear();
    }
    if !number.is_empty() {
        return Err(format!("invalid duration {text:?}: missing unit"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "web", "generation": 2}, "spec": spec, "status": status})
    }

    #[test]
    fn progress_table() {
        use Progress::{Done, Failed, Waiting};
        let cs = |spec: Value, status: Value| (Kind::CloneSet, obj(spec, status));
        let cases: Vec<(&str, (Kind, Value), Progress)> = vec![
            (
                "generation not observed",
                cs(json!({"replicas": 2}), json!({"observedGeneration": 1})),
                Waiting("Waiting for cloneset spec update to be observed...".into()),
            ),
            (
                "deadline exceeded",
                cs(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "conditions": [{"type": "Progressing",
                        "status": "False", "reason": "ProgressDeadlineExceeded", "message": "stuck"}]}),
                ),
                Failed("cloneset \"web\" exceeded its progress deadline: stuck".into()),
            ),
            (
                "updating",
                cs(
                    json!({"replicas": 10}),
                    json!({"observedGeneration": 2, "replicas": 10, "updatedReplicas": 3}),
                ),
                Waiting("Waiting for rollout to finish: 3 out of 10 new replicas have been updated...".into()),
            ),
            (
                "updated, not available",
                cs(
                    json!({"replicas": 10}),
                    json!({"observedGeneration": 2, "replicas": 10, "updatedReplicas": 10,
                           "updatedReadyReplicas": 3, "updatedAvailableReplicas": 3}),
                ),
                Waiting("Waiting for rollout to finish: 3 of 10 updated replicas are available...".into()),
            ),
            (
                "paused midway",
                cs(
                    json!({"replicas": 4, "updateStrategy": {"rollingUpdate": {"paused": true}}}),
                    json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1}),
                ),
                Waiting("Waiting for rollout to finish: 1 out of 4 new replicas have been updated... (rollout paused)".into()),
            ),
            (
                "surge Pods leaving",
                cs(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2,
                           "updatedAvailableReplicas": 2}),
                ),
                Waiting("Waiting for rollout to finish: 1 old replicas are pending termination...".into()),
            ),
            (
                "done",
                cs(
                    json!({"replicas": 2}),
                    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                           "updatedReadyReplicas": 2, "updatedAvailableReplicas": 2}),
                ),
                Done("cloneset \"web\" successfully rolled out".into()),
            ),
            (
                "partition 40% of 5 keeps 2",
                cs(
                    json!({"replicas": 5, "updateStrategy": {"rollingUpdate": {"partition": "40%"}}}),
                    json!({"observedGeneration": 2, "replicas": 5, "updatedReplicas": 3,
                           "updatedAvailableReplicas": 3}),
                ),
                Done("partitioned roll out complete: 3 new replicas have been updated, 2 stay at the old revision (partition)".into()),
            ),
            (
                "asts partition",
                (
                    Kind::AdvancedStatefulSet,
                    obj(
                        json!({"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 1}}}),
                        json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
                               "updatedAvailableReplicas": 1}),
                    ),
                ),
                Waiting("Waiting for rollout to finish: 1 out of 2 new replicas have been updated...".into()),
            ),
            (
                "ads available",
                (
                    Kind::AdvancedDaemonSet,
                    obj(
                        json!({}),
                        json!({"observedGeneration": 2, "desiredNumberScheduled": 3,
                               "updatedNumberScheduled": 3, "numberAvailable": 2}),
                    ),
                ),
                Waiting("Waiting for daemon set \"web\" rollout to finish: 2 of 3 updated pods are available...".into()),
            ),
            (
                "deployment done",
                (
                    Kind::Deployment,
                    obj(
                        json!({"replicas": 2}),
                        json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                               "availableReplicas": 2}),
                    ),
                ),
                Done("deployment \"web\" successfully rolled out".into()),
            ),
            (
                "ud updated, not ready",
                (
                    Kind::UnitedDeployment,
                    obj(
                        json!({"replicas": 4}),
                        json!({"observedGeneration": 2, "replicas": 4, "updatedReplicas": 4,
                               "updatedReadyReplicas": 1}),
                    ),
                ),
                Waiting("Waiting for rollout to finish: 1 of 4 updated replicas are ready...".into()),
            ),
            (
                "sidecarset upgrading",
                (
                    Kind::SidecarSet,
                    obj(
                        json!({}),
                        json!({"observedGeneration": 2, "matchedPods": 3, "updatedPods": 1,
                               "updatedReadyPods": 1}),
                    ),
                ),
                Waiting("Waiting for sidecarset \"web\" rollout to finish: 1 out of 3 matched Pods have been updated...".into()),
            ),
            (
                "sidecarset done",
                (
                    Kind::SidecarSet,
                    obj(
                        json!({}),
                        json!({"observedGeneration": 2, "matchedPods": 3, "updatedPods": 3,
                               "updatedReadyPods": 3}),
                    ),
                ),
                Done("sidecarset \"web\" successfully rolled out (3 of 3 matched Pods updated)".into()),
            ),
        ];
        for (name, (kind, v), want) in cases {
            assert_eq!(progress(kind, &v).expect(name), want, "{name}");
        }
    }

    #[test]
    fn durations() {
        let cases = [
            ("0", Ok(0.0)),
            ("90", Ok(90.0)),
            ("30s", Ok(30.0)),
            ("5m", Ok(300.0)),
            ("1h30m", Ok(5400.0)),
            ("500ms", Ok(0.5)),
            ("5x", Err(())),
            ("5m3", Err(())),
        ];
        for (text, want) in cases {
            let got = parse_duration(text)
                .map(|d| d.as_secs_f64())
                .map_err(|_| ());
            assert_eq!(got, want, "{text}");
        }
    }
}
