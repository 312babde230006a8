//! SidecarTerminator decisions, pure: in a Pod that runs to completion (restartPolicy Never or
//! OnFailure), the containers marked as sidecars (env `KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true`)
//! are stopped, through a ContainerRecreateRequest executed by kruise-daemon, once every main container
//! has completed (Never) or succeeded (OnFailure). Sidecars that also set
//! `KRUISE_TERMINATE_SIDECAR_IGNORE_EXIT_CODE=true` are stopped after the Pod has been given its
//! final phase (Succeeded when every main container exited 0, else Failed) and the `SidecarTerminated`
//! condition, so their exit code does not decide it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};

pub const ENV_TERMINATE: &str = "KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT";
pub const ENV_IGNORE_EXIT_CODE: &str = "KRUISE_TERMINATE_SIDECAR_IGNORE_EXIT_CODE";
pub const ENV_WITH_IMAGE: &str = "KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT_WITH_IMAGE";
/// The Pod condition set when the Pod's phase was decided for it.
pub const CONDITION_SIDECAR_TERMINATED: &str = "SidecarTerminated";

fn env_is(container: &Container, name: &str, want_true: bool) -> bool {
    container.env.iter().flatten().any(|e| {
        e.name == name
            && if want_true {
                e.value
                    .as_deref()
                    .is_some_and(|v| v.eq_ignore_ascii_case("true"))
            } else {
                e.value.as_deref().is_some_and(|v| !v.is_empty())
            }
    })
}

fn is_normal_sidecar(c: &Container) -> bool {
    env_is(c, ENV_TERMINATE, true)
}

fn is_sidecar(c: &Container) -> bool {
    is_normal_sidecar(c) || env_is(c, ENV_WITH_IMAGE, false)
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
}

/// (main, sidecar) container names.
pub fn groups(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let (sidecars, main): (Vec<&Container>, Vec<&Container>) =
        containers(pod).iter().partition(|c| is_sidecar(c));
    (
        main.into_iter().map(|c| c.name.clone()).collect(),
        sidecars.into_iter().map(|c| c.name.clone()).collect(),
    )
}

/// Exit codes of the terminated containers (None while running or unknown).
fn exit_code(pod: &Pod, name: &str) -> Option<Option<i32>> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)?;
    Some(
        status
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code),
    )
}

fn all_statuses_reported(pod: &Pod) -> bool {
    let reported = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, Vec::len);
    reported == containers(pod).len()
}

/// Every container of `names` has terminated.
pub fn completed(pod: &Pod, names: &BTreeSet<String>) -> bool {
    all_statuses_reported(pod)
        && names
            .iter()
            .all(|n| matches!(exit_code(pod, n), Some(Some(_))))
}

/// Every container of `names` has terminated with exit code 0.
pub fn succeeded(pod: &Pod, names: &BTreeSet<String>) -> bool {
    all_statuses_reported(pod)
        && names
            .iter()
            .all(|n| matches!(exit_code(pod, n), Some(Some(0))))
}

/// A Pod SidecarTerminator acts on: not being deleted, started, run to completion, with sidecars not
/// all stopped, and its main containers done (completed for Never, succeeded for OnFailure).
pub fn is_interesting(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if pod.metadata.deletion_timestamp.is_some() || phase == "Pending" || policy == "Always" {
        return false;
    }
    let (main, sidecars) = groups(pod);
    if sidecars.is_empty() || completed(pod, &sidecars) {
        return false;
    }
    match policy {
        "Never" => completed(pod, &main),
        "OnFailure" => succeeded(pod, &main),
        _ => false,
    }
}

/// What to do for an interesting Pod (on a node with a kruise-daemon, not a virtual kubelet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Sidecars to stop now (not yet terminated), through one ContainerRecreateRequest.
    pub stop: BTreeSet<String>,
    /// The Pod's final phase to write with the SidecarTerminated condition, before stopping
    /// `then_stop` (the sidecars whose exit code is ignored).
    pub mark: Option<&'static str>,
    pub then_stop: BTreeSet<String>,
}

fn running(pod: &Pod, names: impl Iterator<Item = String>) -> BTreeSet<String> {
    names
        .filter(|n| !matches!(exit_code(pod, n), Some(Some(_))))
        .collect()
}

pub fn plan(pod: &Pod) -> Plan {
    let mut normal = BTreeSet::new();
    let mut ignore = BTreeSet::new();
    for c in containers(pod) {
        if is_normal_sidecar(c) {
            if env_is(c, ENV_IGNORE_EXIT_CODE, true) {
                ignore.insert(c.name.clone());
            } else {
                normal.insert(c.name.clone());
            }
        }
    }
    let stop = running(pod, normal.iter().cloned());
    let mut mark = None;
    let mut then_stop = BTreeSet::new();
    if !ignore.is_empty() && completed(pod, &normal) {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if !matches!(phase, Some("Succeeded" | "Failed")) {
            let (main, _) = groups(pod);
            mark = Some(if succeeded(pod, &main) {
                "Succeeded"
            } else {
                "Failed"
            });
        }
        then_stop = running(pod, ignore.into_iter());
    }
    Plan {
        stop,
        mark,
        then_stop,
    }
}

/// The name of the request SidecarTerminator creates for a Pod (one per Pod).
pub fn request_name(pod_uid: &str) -> String {
    format!("sidecar-termination-{pod_uid}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, EnvVar,
        PodSpec, PodStatus,
    };

    fn container(name: &str, env: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            env: Some(
                env.iter()
                    .map(|(k, v)| EnvVar {
                        name: (*k).into(),
                        value: Some((*v).into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn pod(
        policy: &str,
        main_exit: Option<i32>,
        sidecar_env: &[(&str, &str)],
        sidecar_exit: Option<i32>,
    ) -> Pod {
        let status = |name: &str, exit: Option<i32>| ContainerStatus {
            name: name.into(),
            state: Some(match exit {
                Some(code) => ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                None => ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
            }),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                containers: vec![container("main", &[]), container("sidecar", sidecar_env)],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![
                    status("main", main_exit),
                    status("sidecar", sidecar_exit),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const SIDECAR: &[(&str, &str)] = &[(ENV_TERMINATE, "true")];
    const IGNORING: &[(&str, &str)] = &[(ENV_TERMINATE, "true"), (ENV_IGNORE_EXIT_CODE, "true")];

    #[test]
    fn which_pods_are_acted_on() {
        let cases = [
            (
                "Never, main done",
                pod("Never", Some(1), SIDECAR, None),
                true,
            ),
            (
                "Never, main running",
                pod("Never", None, SIDECAR, None),
                false,
            ),
            (
                "OnFailure, main failed",
                pod("OnFailure", Some(1), SIDECAR, None),
                false,
            ),
            (
                "OnFailure, main succeeded",
                pod("OnFailure", Some(0), SIDECAR, None),
                true,
            ),
            ("Always", pod("Always", Some(0), SIDECAR, None), false),
            ("no sidecar", pod("Never", Some(0), &[], None), false),
            (
                "sidecar env false",
                pod("Never", Some(0), &[(ENV_TERMINATE, "false")], None),
                false,
            ),
            (
                "sidecar already stopped",
                pod("Never", Some(0), SIDECAR, Some(137)),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(is_interesting(&pod), want, "{name}");
        }
    }

    #[test]
    fn plans() {
        let p = plan(&pod("Never", Some(0), SIDECAR, None));
        assert_eq!(p.stop, BTreeSet::from(["sidecar".to_owned()]));
        assert_eq!(p.mark, None);
        let p = plan(&pod("Never", Some(0), IGNORING, None));
        assert!(p.stop.is_empty());
        assert_eq!(p.mark, Some("Succeeded"));
        assert_eq!(p.then_stop, BTreeSet::from(["sidecar".to_owned()]));
        let p = plan(&pod("Never", Some(2), IGNORING, None));
        assert_eq!(p.mark, Some("Failed"));
        assert_eq!(request_name("u"), "sidecar-termination-u");
    }
}
