//! How a test steers the simulated containers of one Pod.
//!
//! Three sources, most specific first:
//! 1. container env `SIM_EXIT_CODE` / `SIM_RUN_MS` (handy in Job templates);
//! 2. Pod annotations `sim.kruise-rs.io/<key>`, whose value is either one value for every container
//!    (`"2000"`, or `"*"` for a list key) or per container (`"app=2000,sidecar=0"` / `"app,sidecar"`);
//! 3. the image tag: a tag containing `never-ready` never becomes ready, one containing `crash` exits 1 right
//!    after every start. This lets a rollout test point a workload at a "bad" new image.
//!
//! Unparseable values are ignored with a warning rather than failing the Pod: the simulator must keep
//! running whatever a test writes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::image;

/// Annotation prefix for every steering key.
pub const PREFIX: &str = "sim.kruise-rs.io/";
/// Containers that never become ready: `"*"` or `"app,sidecar"`.
pub const NEVER_READY: &str = "sim.kruise-rs.io/never-ready";
/// Containers that exit with code 1 right after every start (CrashLoopBackOff): `"*"` or a list.
pub const CRASH: &str = "sim.kruise-rs.io/crash";
/// Exit code when a container's run time ends: `"1"` or `"app=1,side=0"`.
pub const EXIT_CODE: &str = "sim.kruise-rs.io/exit-code";
/// How long a container runs before it exits, in milliseconds.
pub const RUN_MS: &str = "sim.kruise-rs.io/run-ms";
/// Slow start: the container waits in `ContainerCreating` this long before it runs, in milliseconds.
pub const START_DELAY_MS: &str = "sim.kruise-rs.io/start-delay-ms";
/// Slow pull: an image not yet on the node takes this long to pull, in milliseconds.
pub const PULL_DELAY_MS: &str = "sim.kruise-rs.io/pull-delay-ms";
/// Time from a container start to its readiness, in milliseconds (overrides the simulator default).
pub const READY_DELAY_MS: &str = "sim.kruise-rs.io/ready-delay-ms";
/// Busy status: while set, the Pod's status is written every this many milliseconds (a counter in
/// the simulator's own condition [`CHURN_CONDITION`]), as a kubelet busy with probes and restarts
/// keeps a Pod's resourceVersion moving. Lets a test check that writers of the Pod's status are not
/// starved by such updates.
pub const STATUS_CHURN_MS: &str = "sim.kruise-rs.io/status-churn-ms";
/// The Pod condition [`STATUS_CHURN_MS`] rewrites.
pub const CHURN_CONDITION: &str = "sim.kruise-rs.io/StatusChurn";
/// What the registry says images are: `"nginx:1.19=sha256:ab…,nginx:stable=sha256:ab…"` makes both tags
/// report the imageID `nginx@sha256:ab…` (by default every image has an imageID of its own).
pub const IMAGE_DIGESTS: &str = "sim.kruise-rs.io/image-digests";
/// Containers whose readiness probe fails while the annotation names them: not ready until it no
/// longer does (`"*"` or a list).
pub const READINESS_FAIL: &str = "sim.kruise-rs.io/readiness-fail";
/// Containers whose liveness probe fails while the annotation names them: after the probe's
/// `failureThreshold` × `periodSeconds` (defaults 3 × 10 s) of failures the kubelet kills the
/// container (exit 137) and starts it again, and again while it keeps failing.
pub const LIVENESS_FAIL: &str = "sim.kruise-rs.io/liveness-fail";
/// Containers with a startupProbe whose probe fails while the annotation names them: not started nor
/// ready, and restarted like [`LIVENESS_FAIL`] after `failureThreshold` × `periodSeconds`.
pub const STARTUP_FAIL: &str = "sim.kruise-rs.io/startup-fail";
/// CrashLoopBackOff timing of the Pod's containers: `"kubelet"` for the kubelet's (the first restart at
/// once, then 10 s doubling to 300 s, reset once a container ran 10 min), or `"BASE_MS,CAP_MS"`
/// (doubling from the first restart). Default: the simulator's `--crash-backoff` timing.
pub const CRASH_BACKOFF: &str = "sim.kruise-rs.io/crash-backoff";

/// A CrashLoopBackOff schedule ([`CRASH_BACKOFF`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    /// The kubelet's: the first restart goes at once, and a container that ran for twice the cap
    /// starts the schedule again.
    pub kubelet: bool,
}

impl Backoff {
    pub const KUBELET: Backoff = Backoff {
        base: Duration::from_secs(10),
        cap: Duration::from_secs(300),
        kubelet: true,
    };

    /// The wait before restarting a container that failed with `restarts` restarts so far, after
    /// running for `ran`.
    pub fn delay(&self, restarts: i32, ran: Duration) -> Duration {
        let restarts = u32::try_from(restarts.max(0)).unwrap_or(0);
        let step = if self.kubelet {
            if restarts == 0 || ran >= self.cap * 2 {
                return Duration::ZERO;
            }
            restarts - 1
        } else {
            restarts
        };
        self.base.saturating_mul(1u32 << step.min(16)).min(self.cap)
    }
}

/// Node annotation: `"stopped"` stops that node's heartbeats (Lease and status) until removed.
pub const HEARTBEAT: &str = "sim.kruise-rs.io/heartbeat";

/// Container env overriding the exit code.
pub const ENV_EXIT_CODE: &str = "SIM_EXIT_CODE";
/// Container env overriding the run time in milliseconds.
pub const ENV_RUN_MS: &str = "SIM_RUN_MS";

/// What one container should do, resolved from every source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSteer {
    pub never_ready: bool,
    /// Exit code when the run time ends (default 0).
    pub exit_code: i32,
    /// Run time before exit; `None` runs until stopped.
    pub run: Option<Duration>,
    pub start_delay: Duration,
    pub pull_delay: Duration,
    pub ready_delay: Option<Duration>,
    /// The container's `lifecycle.postStart` hook time ([`hook_duration`]): it is not ready before
    /// the hook ends, and the containers after it start only then.
    pub post_start: Duration,
    /// The digest [`IMAGE_DIGESTS`] gives the container's image.
    pub image_digest: Option<String>,
    /// [`READINESS_FAIL`] names the container.
    pub readiness_fails: bool,
    /// How long after its liveness probe (or, before the container started, its startup probe)
    /// began failing the kubelet restarts the container ([`LIVENESS_FAIL`], [`STARTUP_FAIL`]).
    pub liveness_restart_after: Option<Duration>,
    /// [`STARTUP_FAIL`] names the container and it has a startupProbe.
    pub startup_fails: bool,
    /// [`CRASH_BACKOFF`], when the Pod sets it.
    pub crash_backoff: Option<Backoff>,
}

/// `failureThreshold` × `periodSeconds` of a probe (Kubernetes' defaults 3 and 10 s).
fn failing_for(probe: Option<&k8s_openapi::api::core::v1::Probe>) -> Duration {
    let threshold = probe.and_then(|p| p.failure_threshold).unwrap_or(3).max(1);
    let period = probe.and_then(|p| p.period_seconds).unwrap_or(10).max(1);
    Duration::from_secs(u64::from(threshold.unsigned_abs()) * u64::from(period.unsigned_abs()))
}

/// Per-Pod steering values as written in the annotations.
#[derive(Clone, Debug, Default)]
pub struct PodSteer {
    annotations: BTreeMap<String, String>,
}

impl PodSteer {
    pub fn from_pod(pod: &Pod) -> Self {
        let annotations = pod
            .metadata
            .annotations
            .as_ref()
            .map(|all| {
                all.iter()
                    .filter(|(key, _)| key.starts_with(PREFIX))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Self { annotations }
    }

    /// Resolves the steering of one container. `default_run` is what the Pod's restartPolicy implies
    /// when nothing says otherwise (a Job-like Pod exits after a short while, a service runs forever).
    pub fn container(
        &self,
        container: &Container,
        default_run: Option<Duration>,
    ) -> ContainerSteer {
        let name = container.name.as_str();
        let tag = container
            .image
            .as_deref()
            .and_then(image::tag)
            .unwrap_or("");
        let crash = self.listed(CRASH, name) || tag.contains("crash");
        let env = |key: &str| {
            container
                .env
                .iter()
                .flatten()
                .find(|var| var.name == key)
                .and_then(|var| var.value.clone())
        };
        let exit_code = env(ENV_EXIT_CODE)
            .and_then(|value| parse_or_warn(ENV_EXIT_CODE, &value))
            .or_else(|| self.value(EXIT_CODE, name))
            .unwrap_or(if crash { 1 } else { 0 });
        let run = env(ENV_RUN_MS)
            .and_then(|value| parse_or_warn::<u64>(ENV_RUN_MS, &value))
            .or_else(|| self.value(RUN_MS, name))
            .map(Duration::from_millis)
            .or(if crash {
                Some(Duration::ZERO)
            } else {
                default_run
            });
        let startup_fails = container.startup_probe.is_some() && self.listed(STARTUP_FAIL, name);
        ContainerSteer {
            never_ready: self.listed(NEVER_READY, name) || tag.contains("never-ready"),
            exit_code,
            run,
            start_delay: self.millis(START_DELAY_MS, name).unwrap_or_default(),
            pull_delay: self.millis(PULL_DELAY_MS, name).unwrap_or_default(),
            ready_delay: self.millis(READY_DELAY_MS, name),
            post_start: lifecycle_hooks(container).0,
            image_digest: self.image_digest(container.image.as_deref().unwrap_or_default()),
            readiness_fails: self.listed(READINESS_FAIL, name),
            liveness_restart_after: if self.listed(LIVENESS_FAIL, name) {
                Some(failing_for(container.liveness_probe.as_ref()))
            } else if startup_fails {
                Some(failing_for(container.startup_probe.as_ref()))
            } else {
                None
            },
            startup_fails,
            crash_backoff: self.crash_backoff(),
        }
    }

    /// The digest [`IMAGE_DIGESTS`] maps `image` to (tags compared with `:latest` added when missing).
    fn image_digest(&self, image: &str) -> Option<String> {
        let want = image::normalize(image);
        self.annotations
            .get(IMAGE_DIGESTS)?
            .split(',')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| image::normalize(name.trim()) == want)
            .map(|(_, digest)| digest.trim().to_owned())
            .filter(|digest| digest.contains(':'))
    }

    fn crash_backoff(&self) -> Option<Backoff> {
        let raw = self.annotations.get(CRASH_BACKOFF)?.trim();
        if raw == "kubelet" {
            return Some(Backoff::KUBELET);
        }
        let parsed = raw.split_once(',').and_then(|(base, cap)| {
            Some(Backoff {
                base: Duration::from_millis(base.trim().parse().ok()?),
                cap: Duration::from_millis(cap.trim().parse().ok()?),
                kubelet: false,
            })
        });
        if parsed.is_none() {
            tracing::warn!(
                key = CRASH_BACKOFF,
                value = raw,
                "ignoring unparseable steering value"
            );
        }
        parsed
    }

    /// The period of [`STATUS_CHURN_MS`], if the Pod asks for it (at least 10 ms).
    pub fn status_churn(&self) -> Option<Duration> {
        self.value::<u64>(STATUS_CHURN_MS, "")
            .map(|ms| Duration::from_millis(ms.max(10)))
    }

    /// Whether `container` is named by a list key (`"*"` names every container).
    fn listed(&self, key: &str, container: &str) -> bool {
        self.annotations.get(key).is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|item| item == "*" || item == container)
        })
    }

    /// A value key: `"v"` for every container, or `"a=v1,b=v2"` per container.
    fn value<T: std::str::FromStr>(&self, key: &str, container: &str) -> Option<T> {
        let raw = self.annotations.get(key)?;
        let mut for_all = None;
        for item in raw
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            match item.split_once('=') {
                Some((name, value)) if name.trim() == container => {
                    return parse_or_warn(key, value.trim());
                }
                Some(_) => {}
                None => for_all = Some(item),
            }
        }
        for_all.and_then(|value| parse_or_warn(key, value))
    }

    fn millis(&self, key: &str, container: &str) -> Option<Duration> {
        self.value::<u64>(key, container).map(Duration::from_millis)
    }
}

/// How long a lifecycle hook keeps the kubelet busy: a `sleep` action's seconds, or the `N` of an
/// `exec` hook whose command runs `sleep N` (`["sleep", "5"]`, `["sh", "-c", "sleep 5; …"]`).
/// Other hooks (httpGet, other commands) take no time here.
pub fn hook_duration(handler: Option<&LifecycleHandler>) -> Duration {
    let Some(handler) = handler else {
        return Duration::ZERO;
    };
    if let Some(sleep) = &handler.sleep {
        return Duration::from_secs(sleep.seconds.max(0).unsigned_abs());
    }
    let words: Vec<&str> = handler
        .exec
        .iter()
        .flat_map(|e| e.command.iter().flatten())
        .flat_map(|arg| arg.split(|c: char| c.is_whitespace() || c == ';' || c == '&'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| w[0] == "sleep" || w[0].ends_with("/sleep"))
        .filter_map(|w| w[1].parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .sum()
}

/// The postStart and preStop hook durations of `container` ([`hook_duration`]).
pub fn lifecycle_hooks(container: &Container) -> (Duration, Duration) {
    let lifecycle = container.lifecycle.as_ref();
    (
        hook_duration(lifecycle.and_then(|l| l.post_start.as_ref())),
        hook_duration(lifecycle.and_then(|l| l.pre_stop.as_ref())),
    )
}

fn parse_or_warn<T: std::str::FromStr>(key: &str, value: &str) -> Option<T> {
    let parsed = value.parse().ok();
    if parsed.is_none() {
        tracing::warn!(key, value, "ignoring unparseable steering value");
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EnvVar;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        pod
    }

    fn container(name: &str, image: &str) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_without_annotations() {
        let steer = PodSteer::from_pod(&pod(&[])).container(&container("app", "nginx"), None);
        assert_eq!(steer, ContainerSteer::default());
    }

    #[test]
    fn table_of_annotations() {
        let app = container("app", "nginx:1");
        let side = container("side", "busybox");
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a Container, ContainerSteer);
        let cases: Vec<Case> = vec![
            (
                &[(NEVER_READY, "*")],
                &app,
                ContainerSteer {
                    never_ready: true,
                    ..Default::default()
                },
            ),
            (&[(NEVER_READY, "side")], &app, ContainerSteer::default()),
            (
                &[(NEVER_READY, "app, side")],
                &side,
                ContainerSteer {
                    never_ready: true,
                    ..Default::default()
                },
            ),
            (
                &[(EXIT_CODE, "3"), (RUN_MS, "app=1500,side=10")],
                &app,
                ContainerSteer {
                    exit_code: 3,
                    run: Some(Duration::from_millis(1500)),
                    ..Default::default()
                },
            ),
            (
                &[(CRASH, "app")],
                &app,
                ContainerSteer {
                    exit_code: 1,
                    run: Some(Duration::ZERO),
                    ..Default::default()
                },
            ),
            (
                &[
                    (START_DELAY_MS, "200"),
                    (PULL_DELAY_MS, "side=50"),
                    (READY_DELAY_MS, "7"),
                ],
                &side,
                ContainerSteer {
                    start_delay: Duration::from_millis(200),
                    pull_delay: Duration::from_millis(50),
                    ready_delay: Some(Duration::from_millis(7)),
                    ..Default::default()
                },
            ),
            (
                &[(EXIT_CODE, "not-a-number")],
                &app,
                ContainerSteer::default(),
            ),
        ];
        for (annotations, container, want) in cases {
            let got = PodSteer::from_pod(&pod(annotations)).container(container, None);
            assert_eq!(
                got, want,
                "annotations {annotations:?} container {}",
                container.name
            );
        }
    }

    #[test]
    fn hook_durations() {
        use k8s_openapi::api::core::v1::{ExecAction, SleepAction};
        let exec = |cmd: &[&str]| LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(cmd.iter().map(|s| s.to_string()).collect()),
            }),
            ..Default::default()
        };
        let cases = [
            (None, 0.0),
            (Some(exec(&["sleep", "5"])), 5.0),
            (
                Some(exec(&["/bin/sh", "-c", "echo hi; sleep 2.5 && true"])),
                2.5,
            ),
            (Some(exec(&["/bin/sleep", "3"])), 3.0),
            (Some(exec(&["sh", "-c", "sleep forever"])), 0.0),
            (Some(exec(&["nginx", "-s", "quit"])), 0.0),
            (
                Some(LifecycleHandler {
                    sleep: Some(SleepAction { seconds: 4 }),
                    ..Default::default()
                }),
                4.0,
            ),
        ];
        for (handler, want) in cases {
            assert_eq!(
                hook_duration(handler.as_ref()),
                Duration::from_secs_f64(want),
                "{handler:?}"
            );
        }
    }

    #[test]
    fn image_digests_map_tags_to_one_digest() {
        let p = pod(&[(
            IMAGE_DIGESTS,
            "nginx:1.19=sha256:abc, nginx:stable=sha256:abc,nginx=sha256:def,bad=nodigest",
        )]);
        let digest = |image| {
            PodSteer::from_pod(&p)
                .container(&container("app", image), None)
                .image_digest
        };
        assert_eq!(digest("nginx:1.19").as_deref(), Some("sha256:abc"));
        assert_eq!(digest("nginx:stable").as_deref(), Some("sha256:abc"));
        assert_eq!(digest("nginx:latest").as_deref(), Some("sha256:def"));
        assert_eq!(digest("nginx:1.20"), None);
        assert_eq!(digest("bad"), None);
        let id = |image| image::image_id_at(image, digest(image).as_deref());
        assert_eq!(id("nginx:1.19"), "docker.io/library/nginx@sha256:abc");
        assert_eq!(id("nginx:1.19"), id("nginx:stable"));
        assert_ne!(id("nginx:1.19"), id("nginx:1.20"));
    }

    #[test]
    fn crash_backoff_schedules() {
        let s = Duration::from_secs;
        let kubelet: Vec<Duration> = (0..8).map(|n| Backoff::KUBELET.delay(n, s(1))).collect();
        assert_eq!(
            kubelet,
            [s(0), s(10), s(20), s(40), s(80), s(160), s(300), s(300)]
        );
        assert_eq!(
            Backoff::KUBELET.delay(5, s(600)),
            s(0),
            "reset after 10 min running"
        );
        let steer = |v| PodSteer::from_pod(&pod(&[(CRASH_BACKOFF, v)])).crash_backoff();
        assert_eq!(steer("kubelet"), Some(Backoff::KUBELET));
        let custom = steer("100, 800").expect("parsed");
        let waits: Vec<u128> = (0..5).map(|n| custom.delay(n, s(1)).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 800]);
        assert_eq!(steer("soon"), None);
    }

    #[test]
    fn status_churn_period() {
        assert_eq!(PodSteer::from_pod(&pod(&[])).status_churn(), None);
        let churn = |v| PodSteer::from_pod(&pod(&[(STATUS_CHURN_MS, v)])).status_churn();
        assert_eq!(churn("100"), Some(Duration::from_millis(100)));
        assert_eq!(churn("1"), Some(Duration::from_millis(10)));
        assert_eq!(churn("soon"), None);
    }

    #[test]
    fn image_tag_steers() {
        let steer = PodSteer::from_pod(&pod(&[]));
        assert!(
            steer
                .container(&container("app", "nginx:1.19-never-ready"), None)
                .never_ready
        );
        let crash = steer.container(&container("app", "nginx:crash"), None);
        assert_eq!((crash.exit_code, crash.run), (1, Some(Duration::ZERO)));
    }

    #[test]
    fn env_beats_annotation_and_default_run_applies() {
        let mut app = container("app", "busybox");
        app.env = Some(vec![EnvVar {
            name: ENV_EXIT_CODE.into(),
            value: Some("2".into()),
            ..Default::default()
        }]);
        let steer = PodSteer::from_pod(&pod(&[(EXIT_CODE, "5")]))
            .container(&app, Some(Duration::from_millis(500)));
        assert_eq!(steer.exit_code, 2);
        assert_eq!(steer.run, Some(Duration::from_millis(500)));
    }
}
