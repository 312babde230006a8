//! Running `kruise-manager` against a local control plane, the way `kruise-local` and the end-to-end tests
//! do: webhook reached at `https://127.0.0.1:<port>`, everything on loopback.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use crate::control_plane::{ControlPlane, plain_http_get, status_and_body};
use crate::process::{Process, free_port};
use crate::wait::until;

/// The manager's namespace in local clusters and tests.
pub const NAMESPACE: &str = "kruise-system";

/// Where the `kruise-manager` binary is: `$KRUISE_MANAGER_BIN`, else next to the running executable or
/// one level up (test binaries live in `target/<profile>/deps`).
pub fn binary() -> anyhow::Result<PathBuf> {
    workspace_binary("kruise-manager", "KRUISE_MANAGER_BIN", "kruise-manager")
}

/// Where a binary of this workspace is: `$<env_var>`, else next to the running executable or one level
/// up (test binaries live in `target/<profile>/deps`); `package` names what to build when it is missing.
pub fn workspace_binary(name: &str, env_var: &str, package: &str) -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os(env_var) {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    let candidates: Vec<PathBuf> = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(name))
        .collect();
    candidates.iter().find(|p| p.is_file()).cloned().with_context(|| {
        format!(
            "{name} binary not found (looked at {candidates:?}); build it with `cargo build -p {package}` \
             (make test does) or set {env_var}"
        )
    })
}

/// Addresses of one running manager.
#[derive(Clone, Debug)]
pub struct ManagerPorts {
    pub webhook: u16,
    pub metrics: u16,
    pub health: u16,
}

/// Options of one manager process.
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// Process name in logs and for [`ControlPlane::stop_process`].
    pub name: String,
    pub leader_election_id: String,
    pub lease_seconds: u64,
    pub extra_args: Vec<String>,
    /// The manager's kubeconfig (default: the admin kubeconfig), e.g. one from
    /// [`ControlPlane::kubeconfig_as`] through a [`crate::blackhole::BlackHoleProxy`].
    pub kubeconfig: Option<PathBuf>,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        Self {
            name: "kruise-manager".into(),
            leader_election_id: "kruise-manager".into(),
            lease_seconds: 15,
            extra_args: Vec::new(),
            kubeconfig: None,
        }
    }
}

/// Ensures the manager's namespace exists.
pub async fn ensure_namespace(plane: &ControlPlane) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(plane.client().await?);
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(NAMESPACE.into());
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error).context("creating the kruise-system namespace"),
    }
}

/// Starts a manager process owned by `plane` (stopped with it) and returns its ports. Does not wait.
pub fn spawn(plane: &ControlPlane, options: &ManagerOptions) -> anyhow::Result<ManagerPorts> {
    Ok(Manager::spawn(plane, options)?.ports)
}

/// A manager process owned by a control plane. The control plane keeps its command line, so it can be
/// killed and started again with the same arguments, ports and identity (a manager restarted under
/// its old identity renews its own Lease at once instead of waiting for it to expire).
#[derive(Clone, Debug)]
pub struct Manager {
    /// Process name in the control plane, and leader-election identity.
    pub name: String,
    pub ports: ManagerPorts,
}

impl Manager {
    /// Starts a manager process owned by `plane` (stopped with it). Does not wait.
    pub fn spawn(plane: &ControlPlane, options: &ManagerOptions) -> anyhow::Result<Self> {
        let ports = ManagerPorts {
            webhook: free_port()?,
            metrics: free_port()?,
            health: free_port()?,
        };
        let mut args = vec![
            format!(
                "--kubeconfig={}",
                options
                    .kubeconfig
                    .clone()
                    .unwrap_or_else(|| plane.kubeconfig_path())
                    .display()
            ),
            format!("--namespace={NAMESPACE}"),
            "--webhook-bind-address=127.0.0.1".into(),
            format!("--webhook-port={}", ports.webhook),
            format!("--metrics-addr=127.0.0.1:{}", ports.metrics),
            format!("--health-addr=127.0.0.1:{}", ports.health),
            format!("--leader-election-id={}", options.leader_election_id),
            format!("--leader-election-lease-seconds={}", options.lease_seconds),
            format!("--identity={}", options.name),
        ];
        // The apiserver calls this manager itself, unless the options name a host (a balancer).
        if !options
            .extra_args
            .iter()
            .any(|a| a.starts_with("--webhook-host="))
        {
            args.push("--webhook-host=127.0.0.1".into());
        }
        args.extend(options.extra_args.iter().cloned());
        let log = plane.dir().join(format!("{}.log", options.name));
        let process = Process::spawn(&options.name, &binary()?, &args, &log)?;
        plane.adopt(process);
        Ok(Self {
            name: options.name.clone(),
            ports,
        })
    }

    /// SIGKILLs the manager (no chance to release its Lease) and waits for it to exit.
    pub fn kill(&self, plane: &ControlPlane) -> anyhow::Result<()> {
        plane.kill_process(&self.name)
    }

    /// Starts the manager again with the same arguments and ports (SIGKILLing it first if it still
    /// runs); returns the new PID. Does not wait for it to serve.
    pub fn restart(&self, plane: &ControlPlane) -> anyhow::Result<u32> {
        plane.respawn_process(&self.name)
    }

    /// The exit status if the process has exited, `None` while it runs.
    pub fn exited(&self, plane: &ControlPlane) -> anyhow::Result<Option<std::process::ExitStatus>> {
        plane.process_exited(&self.name)
    }

    /// The PID of the current (or last) run.
    pub fn pid(&self, plane: &ControlPlane) -> Option<u32> {
        plane
            .pids()
            .into_iter()
            .find_map(|(name, pid)| (name == self.name).then_some(pid))
    }

    /// The manager's log file (every run appends to it).
    pub fn log(&self, plane: &ControlPlane) -> PathBuf {
        plane.dir().join(format!("{}.log", self.name))
    }
}

/// When to start a manager that exited unexpectedly again: after 1 s, doubling on each quick exit up to
/// 30 s, and back to 1 s once a run lasted 60 s (as a kubelet restarts a crashing container, faster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartBackoff {
    next: Duration,
}

impl RestartBackoff {
    pub const INITIAL: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(30);
    /// A run at least this long resets the delay to [`RestartBackoff::INITIAL`].
    pub const RESET_AFTER: Duration = Duration::from_secs(60);

    pub fn new() -> Self {
        Self {
            next: Self::INITIAL,
        }
    }

    /// The delay before the next start, given how long the run that just ended lasted.
    pub fn delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= Self::RESET_AFTER {
            self.next = Self::INITIAL;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }
}

impl Default for RestartBackoff {
    fn default() -> Self {
        Self::new()
    }
}

/// Keeps `manager` running, as `kruise-local` does: whenever its process exits, logs it and starts it
/// again with the same arguments after a [`RestartBackoff`] delay, counting the restarts in `restarts`.
/// A run is timed from the start of supervision or from the last restart. Never returns; drop (cancel)
/// the future to stop supervising.
pub async fn supervise(plane: &ControlPlane, manager: &Manager, restarts: &AtomicU32) {
    let mut backoff = RestartBackoff::new();
    let mut started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let status = match manager.exited(plane) {
            Ok(Some(status)) => status,
            Ok(None) => continue,
            Err(error) => {
                tracing::error!(manager = %manager.name, error = %format!("{error:#}"), "cannot supervise the manager");
                continue;
            }
        };
        let ran_for = started.elapsed();
        let delay = backoff.delay(ran_for);
        tracing::warn!(
            manager = %manager.name,
            %status,
            ran_seconds = ran_for.as_secs_f64(),
            restart_in_seconds = delay.as_secs_f64(),
            log = %manager.log(plane).display(),
            "the manager exited unexpectedly; starting it again"
        );
        tokio::time::sleep(delay).await;
        started = Instant::now();
        match manager.restart(plane) {
            Ok(pid) => {
                restarts.fetch_add(1, Ordering::SeqCst);
                tracing::info!(manager = %manager.name, pid, "manager started again");
            }
            // The next poll sees it still exited and tries again after a longer delay.
            Err(error) => {
                tracing::error!(manager = %manager.name, error = %format!("{error:#}"), "cannot start the manager again")
            }
        }
    }
}

/// `GET http://127.0.0.1:<port><path>`: (status code, body).
pub async fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    status_and_body(&plain_http_get(port, path).await?)
}

/// Waits until the manager is ready and the apiserver is pointed at its webhook: `/readyz` is 200, the
/// mutating configuration calls port `ports.webhook`, and every installed apps.kruise.io CRD converts
/// through it.
pub async fn wait_serving(
    plane: &ControlPlane,
    ports: &ManagerPorts,
    timeout: Duration,
) -> anyhow::Result<()> {
    let client = plane.client().await?;
    let url_part = format!("127.0.0.1:{}", ports.webhook);
    let result = until(
        "kruise-manager ready and wired into the apiserver",
        timeout,
        || {
            let client = client.clone();
            let url_part = url_part.clone();
            async move {
                let (code, _) = http_get(ports.health, "/readyz").await?;
                if code != 200 {
                    return Ok(false);
                }
                let configs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
                let Some(config) = configs.get_opt(kruise_webhook_config_name()).await? else {
                    return Ok(false);
                };
                let wired = config.webhooks.iter().flatten().all(|w| {
                    w.client_config
                        .url
                        .as_deref()
                        .is_some_and(|u| u.contains(&url_part))
                });
                let crds: Api<CustomResourceDefinition> = Api::all(client);
                let converting = crds
                    .list(&Default::default())
                    .await?
                    .items
                    .iter()
                    // Kinds served in one version only (ResourceDistribution, EphemeralJob) convert
                    // nothing.
                    .filter(|crd| crd.spec.group == "apps.kruise.io" && crd.spec.versions.len() > 1)
                    .all(|crd| {
                        crd.spec
                            .conversion
                            .as_ref()
                            .and_then(|c| c.webhook.as_ref())
                            .and_then(|w| w.client_config.as_ref())
                            .and_then(|c| c.url.as_deref())
                            .is_some_and(|u| u.contains(&url_part))
                    });
                Ok(wired && converting)
            }
        },
    )
    .await;
    if let Err(error) = result {
        bail!("{error:#}\n{}", plane.log_tails(40));
    }
    Ok(())
}

fn kruise_webhook_config_name() -> &'static str {
    "kruise-mutating-webhook-configuration"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_backoff_doubles_to_the_cap_and_resets_after_a_long_run() {
        let secs = Duration::from_secs;
        // (how long the run lasted, expected delay before the next start)
        let cases = [
            (secs(0), secs(1)),
            (secs(2), secs(2)),
            (secs(5), secs(4)),
            (secs(59), secs(8)),
            (secs(1), secs(16)),
            (secs(1), secs(30)),
            (secs(1), secs(30)),
            (secs(60), secs(1)),
            (secs(3), secs(2)),
            (secs(600), secs(1)),
        ];
        let mut backoff = RestartBackoff::new();
        for (i, (ran_for, want)) in cases.into_iter().enumerate() {
            assert_eq!(backoff.delay(ran_for), want, "case {i}: ran {ran_for:?}");
        }
    }
}
