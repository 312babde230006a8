//! kruise-manager as the benches run it: `$KRUISE_MANAGER_BIN` (`make bench` builds the `dist` profile,
//! the binary that ships, and points there), else the binary next to the bench (`cargo build
//! --release -p kruise-manager`), owned by the control plane. Or, for a side-by-side run, OpenKruise's
//! own kruise-manager ([`Manager::start_openkruise`]).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::manager::{self, ManagerOptions, ManagerPorts};
use kruise_testkit::process::{Process, free_port, rss_kib};
use kruise_testkit::until;

use crate::process::{cpu_seconds, pid_of};
use crate::stats::mib;

/// The window over which the manager's CPU tells whether it is at rest.
const REST_WINDOW: Duration = Duration::from_secs(2);
/// How long [`Manager::rss_at_rest_kib`] waits for rest at most.
const REST_TIMEOUT: Duration = Duration::from_secs(120);

/// One running manager.
#[derive(Clone, Debug)]
pub struct Manager {
    pub ports: ManagerPorts,
    pub pid: u32,
    /// The process's name in the control plane.
    name: String,
}

impl Manager {
    /// Starts the manager with `extra_args` and waits until it serves and the apiserver calls it. It
    /// runs as the identity `manager-0`, whose writes the apiserver's audit log records
    /// ([`crate::apiserver::PodWrites::read_manager`]).
    pub async fn start(plane: &ControlPlane, extra_args: &[String]) -> anyhow::Result<Self> {
        manager::ensure_namespace(plane).await?;
        let kubeconfig = audited_kubeconfig(plane)?;
        let options = ManagerOptions {
            extra_args: extra_args.to_vec(),
            kubeconfig: Some(kubeconfig),
            ..ManagerOptions::default()
        };
        let ports = manager::spawn(plane, &options)?;
        manager::wait_serving(plane, &ports, Duration::from_secs(120)).await?;
        let pid = pid_of(plane, &options.name).context("the manager process")?;
        Ok(Self {
            ports,
            pid,
            name: options.name,
        })
    }

    /// Starts OpenKruise's kruise-manager from `dir` (`make openkruise`: `bin/kruise-manager`, its
    /// CRDs in `crd/`, its webhook configurations in `webhook.yaml`) with `extra_args`, as its chart
    /// would but out of cluster: the manager points its webhook configurations at
    /// `https://127.0.0.1:<port>` (`WEBHOOK_HOST`) and keeps its certificates in a folder. Same
    /// identity (`manager-0`) and client rate limits as kruise-rs's by default (500 QPS, burst 1000;
    /// OpenKruise's own default is 30/50), no leader election (a restart would otherwise wait out
    /// the old Lease), no pprof listener. Waits until it serves and its Pod webhook is wired in.
    pub async fn start_openkruise(
        plane: &ControlPlane,
        dir: &Path,
        extra_args: &[String],
    ) -> anyhow::Result<Self> {
        let binary = dir.join("bin/kruise-manager");
        ensure!(
            binary.is_file(),
            "no OpenKruise manager at {} (run `make openkruise`)",
            binary.display()
        );
        manager::ensure_namespace(plane).await?;
        plane
            .install_crds(&dir.join("crd"))
            .await
            .context("installing OpenKruise's CRDs")?;
        let webhooks = dir.join("webhook.yaml").display().to_string();
        plane
            .kubectl(&["apply", "-f", &webhooks])
            .await
            .context("creating OpenKruise's webhook configurations")?;

        let kubeconfig = audited_kubeconfig(plane)?;
        let ports = ManagerPorts {
            webhook: free_port()?,
            metrics: free_port()?,
            health: free_port()?,
        };
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--metrics-addr=127.0.0.1:{}", ports.metrics),
            format!("--health-probe-addr=127.0.0.1:{}", ports.health),
            "--enable-leader-election=false".into(),
            "--enable-pprof=false".into(),
            "--rest-config-qps=500".into(),
            "--rest-config-burst=1000".into(),
        ];
        args.extend(extra_args.iter().cloned());
        let certs = plane.dir().join("openkruise-certs");
        let port = ports.webhook.to_string();
        let env = [
            ("WEBHOOK_HOST", Path::new("127.0.0.1")),
            ("WEBHOOK_PORT", Path::new(&port)),
            ("WEBHOOK_CERT_DIR", certs.as_path()),
            ("POD_NAMESPACE", Path::new(manager::NAMESPACE)),
        ];
        let name = "openkruise-manager".to_owned();
        let log = plane.dir().join(format!("{name}.log"));
        plane.adopt(Process::spawn_with_env(&name, &binary, &args, &env, &log)?);

        let client = plane.client().await?;
        let wired_to = format!("127.0.0.1:{}", ports.webhook);
        let serving = until(
            "OpenKruise's manager ready and its Pod webhook wired into the apiserver",
            Duration::from_secs(180),
            || {
                let client = client.clone();
                let wired_to = wired_to.clone();
                async move {
                    let ready = manager::http_get(ports.health, "/readyz")
                        .await
                        .is_ok_and(|(code, _)| code == 200);
                    let configs: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(client);
                    let wired = configs
                        .get_opt("kruise-mutating-webhook-configuration")
                        .await?
                        .is_some_and(|config| {
                            config.webhooks.iter().flatten().any(|w| {
                                w.client_config
                                    .url
                                    .as_deref()
                                    .is_some_and(|url| url.contains(&wired_to))
                            })
                        });
                    Ok(ready && wired)
                }
            },
        )
        .await;
        if let Err(error) = serving {
            anyhow::bail!("{error:#}\n{}", plane.log_tails(40));
        }
        let pid = pid_of(plane, &name).context("the OpenKruise manager process")?;
        Ok(Self { ports, pid, name })
    }

    /// SIGKILLs the manager and starts it again with the same arguments; returns once the new
    /// process runs (not once it serves: the caller times what comes next).
    pub fn restart(&mut self, plane: &ControlPlane) -> anyhow::Result<()> {
        self.pid = plane.respawn_process(&self.name)?;
        Ok(())
    }

    /// The manager's `/metrics` text.
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let (code, body) = manager::http_get(self.ports.metrics, "/metrics").await?;
        ensure!(
            code == 200,
            "kruise-manager /metrics answered {code}: {body}"
        );
        Ok(body)
    }

    /// The manager's RSS in KiB once it is at rest: once it used under 2% of a core over
    /// [`REST_WINDOW`] (at most [`REST_TIMEOUT`], then whatever it is), and one window more, so that
    /// what it freed at the end of a burst had time to be given back. Comparable with a Go
    /// manager's "steady RSS after a rollout", unlike an RSS read the moment a rollout is seen done.
    pub async fn rss_at_rest_kib(&self) -> Option<u64> {
        let began = std::time::Instant::now();
        let mut cpu = cpu_seconds(self.pid)?;
        while began.elapsed() < REST_TIMEOUT {
            tokio::time::sleep(REST_WINDOW).await;
            let now = cpu_seconds(self.pid)?;
            let busy = (now - cpu) / REST_WINDOW.as_secs_f64();
            cpu = now;
            if busy < 0.02 {
                break;
            }
        }
        tokio::time::sleep(REST_WINDOW).await;
        rss_kib(self.pid).map(|(rss, _)| rss)
    }

    /// Prints `  kruise-manager RSS <now> (peak <peak>)`; the peak is the process's high-water mark
    /// since it started, not since the last print.
    pub fn print_rss(&self) {
        if let Some((rss, hwm)) = rss_kib(self.pid) {
            println!("  kruise-manager RSS {} (peak {})", mib(rss), mib(hwm));
        }
    }
}

/// Prints the RSS of every process `plane` owns.
pub fn print_all_rss(plane: &ControlPlane) {
    for (name, pid) in plane.pids() {
        if let Some((rss, hwm)) = rss_kib(pid) {
            println!("{name} RSS: {} (peak {})", mib(rss), mib(hwm));
        }
    }
}

/// Writes a kubeconfig for the identity `manager-0`, whose writes the apiserver's audit log records
/// ([`crate::apiserver::PodWrites::read_manager`]), and returns its path.
fn audited_kubeconfig(plane: &ControlPlane) -> anyhow::Result<std::path::PathBuf> {
    let kubeconfig = plane.dir().join("manager-0.kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_as(0, &plane.server_url())?)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    Ok(kubeconfig)
}
