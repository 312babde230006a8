//! A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, built from their Go modules by `make control-plane` (see `tools/`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::certs::{ClusterCa, signing_key_pem};
use crate::process::{Process, tail};

/// The processes a control plane runs itself, in start order.
pub const COMPONENTS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The Kubernetes version the binaries are built at.
pub const K8S_VERSION: &str = "v1.34.10";

/// The cache of tools built from Go modules (control plane, helm): `$KRUISE_RS_CACHE`, else
/// `~/.cache/kruise-rs`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("KRUISE_RS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/tmp".into());
            home.join(".cache/kruise-rs")
        })
}

/// Where `make control-plane` puts the binaries: `$KRUISE_RS_BIN_DIR`, else
/// `$KRUISE_RS_CACHE/k8s-<version>/bin`, else `~/.cache/kruise-rs/k8s-<version>/bin`.
pub fn default_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KRUISE_RS_BIN_DIR") {
        return dir.into();
    }
    cache_dir().join(format!("k8s-{K8S_VERSION}")).join("bin")
}

/// How many `manager-N` identities the apiserver knows (see [`ControlPlane::kubeconfig_as`]).
pub const MANAGER_IDENTITIES: usize = 4;

/// Audit the writes of the `manager-N` identities (request metadata, once the response is sent), and
/// every request of the Helm chart's ServiceAccounts [`CHART_SERVICE_ACCOUNT`] and
/// [`CHART_DAEMON_SERVICE_ACCOUNT`] (the install tests prove the chart's RBAC from it); nothing else, so
/// that the log costs the apiserver next to nothing.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [manager-0, manager-1, manager-2, manager-3]
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: [\"system:serviceaccount:kruise-system:kruise-manager\", \"system:serviceaccount:kruise-system:kruise-daemon\"]
- level: None
";

/// The user name of the chart's ServiceAccount, whose every request the audit log records.
pub const CHART_SERVICE_ACCOUNT: &str = "system:serviceaccount:kruise-system:kruise-manager";
/// The user name of the chart's kruise-daemon ServiceAccount, whose every request the audit log records.
pub const CHART_DAEMON_SERVICE_ACCOUNT: &str = "system:serviceaccount:kruise-system:kruise-daemon";

/// What turns the ServiceAccount admission plugin off (see [`Options::service_account_admission`]).
const DISABLE_SERVICE_ACCOUNT_ADMISSION: &str = "--disable-admission-plugins=ServiceAccount";

/// How to start a control plane.
#[derive(Clone, Debug)]
pub struct Options {
    pub bin_dir: PathBuf,
    /// CRD manifests to install before kube-controller-manager starts (its garbage collector only
    /// re-discovers new kinds every 30 s).
    pub crd_dir: Option<PathBuf>,
    /// kube-controller-manager `--node-monitor-grace-period`: how long a node may miss heartbeats before
    /// it is marked NotReady.
    pub node_monitor_grace: Duration,
    /// Parent of the run directory (certificates, kubeconfigs, etcd data, logs). tmpfs when available.
    pub work_root: PathBuf,
    /// How long each component may take to become ready.
    pub ready_timeout: Duration,
    /// kube-controller-manager `--feature-gates` (e.g. `MaxUnavailableStatefulSet=true`, alpha and off
    /// in v1.34, for a benchmark that compares Kubernetes' StatefulSet with maxUnavailable); empty:
    /// the release's defaults.
    pub controller_manager_feature_gates: Vec<String>,
    /// kube-controller-manager `--controllers` beyond `*`, e.g. `-replicaset-controller` for a
    /// benchmark whose Pods name a ReplicaSet as their owner without that ReplicaSet's controller
    /// deleting or adding Pods; empty: every controller.
    pub controller_manager_controllers: Vec<String>,
    /// More kube-apiserver arguments, e.g. `--watch-cache=false` for a test whose watches must
    /// reach etcd (and meet its compactions) directly.
    pub apiserver_args: Vec<String>,
    /// Keep kube-apiserver's ServiceAccount admission plugin on, as in a real cluster: Pods get the
    /// projected `kube-api-access-*` token volume (in-cluster config), and a Pod in a new namespace is
    /// refused until kube-controller-manager has made its `default` ServiceAccount. Off by default (as
    /// envtest); `apiserver_args` cannot turn it on, since the plugin would then be listed as both
    /// enabled and disabled.
    pub service_account_admission: bool,
}

impl Default for Options {
    fn default() -> Self {
        let shm = Path::new("/dev/shm");
        Self {
            bin_dir: default_bin_dir(),
            crd_dir: None,
            node_monitor_grace: Duration::from_secs(20),
            work_root: if shm.is_dir() {
                shm.into()
            } else {
                std::env::temp_dir()
            },
            ready_timeout: Duration::from_secs(90),
            controller_manager_feature_gates: Vec::new(),
            controller_manager_controllers: Vec::new(),
            apiserver_args: Vec::new(),
            service_account_admission: false,
        }
    }
}

/// Ports of the components, all on 127.0.0.1.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub etcd: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

/// A running control plane. Dropping it stops every component it started and removes its files.
pub struct ControlPlane {
    dir: PathBuf,
    bin_dir: PathBuf,
    ports: Ports,
    ca_pem: String,
    admin_token: String,
    processes: Mutex<Vec<Process>>,
    started_in: Duration,
}

impl ControlPlane {
    /// Starts etcd → kube-apiserver → (CRDs) → kube-controller-manager + kube-scheduler and waits until each
    /// is ready.
    pub async fn start(options: Options) -> anyhow::Result<Self> {
        let began = Instant::now();
        for binary in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
        ] {
            let path = options.bin_dir.join(binary);
            if !path.is_file() {
                bail!(
                    "{} is missing: run `make control-plane` (it builds Kubernetes {K8S_VERSION} and etcd from \
                     their Go modules into {})",
                    path.display(),
                    options.bin_dir.display()
                );
            }
        }
        let dir = make_run_dir(&options.work_root)?;
        let ca = ClusterCa::generate("kruise-rs-local-ca")?;
        let mut plane = Self {
            dir: dir.clone(),
            bin_dir: options.bin_dir.clone(),
            ports: pick_ports()?,
            ca_pem: ca.pem.clone(),
            admin_token: random_token(),
            processes: Mutex::new(Vec::new()),
            started_in: Duration::ZERO,
        };
        plane.write_credentials(&ca)?;

        plane.start_etcd()?;
        plane.wait_etcd(options.ready_timeout).await?;
        plane.start_apiserver(&options)?;
        let client = plane.client().await?;
        plane
            .wait_healthy(
                "kube-apiserver",
                &client,
                plane.ports.apiserver,
                "/readyz",
                options.ready_timeout,
            )
            .await?;
        if let Some(crds) = &options.crd_dir {
            plane.install_crds(crds).await?;
        }
        plane.start_controller_manager(&options)?;
        plane.start_scheduler()?;
        let kcm = insecure_client(plane.ports.controller_manager)?;
        plane
            .wait_healthy(
                "kube-controller-manager",
                &kcm,
                plane.ports.controller_manager,
                "/healthz",
                options.ready_timeout,
            )
            .await?;
        let scheduler = insecure_client(plane.ports.scheduler)?;
        plane
            .wait_healthy(
                "kube-scheduler",
                &scheduler,
                plane.ports.scheduler,
                "/healthz",
                options.ready_timeout,
            )
            .await?;
        plane.started_in = began.elapsed();
        tracing::info!(dir = %dir.display(), seconds = plane.started_in.as_secs_f64(), "control plane ready");
        Ok(plane)
    }

    /// Time from `start` to every component being ready.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    pub fn ports(&self) -> Ports {
        self.ports
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// PEM of the cluster CA (it signed the apiserver's certificate).
    /// The admin's bearer token (what kubelets of real nodes present).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// Path of the admin kubeconfig (user `test-admin`, group `system:masters`).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A self-contained admin kubeconfig (CA and token inline).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig(
            &self.server_url(),
            &self.ca_pem,
            &self.admin_token,
            "kruise-local",
        )
    }

    /// A kubeconfig for the identity `manager-<index>` (index < [`MANAGER_IDENTITIES`], group
    /// system:masters) at `server` (the apiserver's URL, or a proxy's in front of it). The apiserver's
    /// audit log ([`Self::audit_log_path`]) records every write these identities make.
    pub fn kubeconfig_as(&self, index: usize, server: &str) -> anyhow::Result<String> {
        anyhow::ensure!(
            index < MANAGER_IDENTITIES,
            "only {MANAGER_IDENTITIES} manager identities exist"
        );
        Ok(kubeconfig(
            server,
            &self.ca_pem,
            &self.manager_token(index),
            &format!("manager-{index}"),
        ))
    }

    /// The apiserver's audit log: one JSON event per line, for writes of the `manager-N` identities.
    pub fn audit_log_path(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    fn manager_token(&self, index: usize) -> String {
        format!("{}m{index}", self.admin_token)
    }

    fn manager_token_lines(&self) -> String {
        (0..MANAGER_IDENTITIES)
            .map(|i| {
                format!(
                    "{},manager-{i},uid-manager-{i},\"system:masters\"\n",
                    self.manager_token(i)
                )
            })
            .collect()
    }

    /// A new admin client. Each test makes its own: a kube client belongs to the runtime that built it.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig =
            Kubeconfig::from_yaml(&self.kubeconfig_yaml()).context("parsing kubeconfig")?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("loading kubeconfig")?;
        Client::try_from(config).context("building a client")
    }

    /// `kubectl --kubeconfig <admin>` with the given arguments; the output (stdout) on success.
    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.kubectl_stdin(args, None).await
    }

    /// `kubectl apply -f -` of a YAML document.
    pub async fn kubectl_apply(&self, namespace: &str, yaml: &str) -> anyhow::Result<String> {
        self.kubectl_stdin(&["apply", "-n", namespace, "-f", "-"], Some(yaml))
            .await
    }

    async fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let mut command = tokio::process::Command::new(self.bin_dir.join("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .args(args)
            .stdin(if stdin.is_some() {
                std::process::Stdio::piped()
            } else {
                std::process::Stdio::null()
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("starting kubectl")?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .await
                .context("writing kubectl stdin")?;
        }
        let output = child.wait_with_output().await.context("running kubectl")?;
        if !output.status.success() {
            bail!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The last lines of every component's log, for a failing test.
    pub fn log_tails(&self, lines: usize) -> String {
        let processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        for process in processes.iter() {
            out.push_str(&format!(
                "----- {} ({}), last {lines} lines -----\n{}\n",
                process.name,
                process.log.display(),
                tail(&process.log, lines)
            ));
        }
        out
    }

    /// Hands a process to the control plane, which then stops it first (before its own components).
    pub fn adopt(&self, process: Process) {
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(process);
    }

    /// Stops (SIGKILL when `kill`, else SIGTERM) and forgets the adopted process named `name`.
    pub fn stop_process(&self, name: &str, kill: bool) {
        let mut processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(index) = processes.iter().position(|p| p.name == name) {
            let mut process = processes.remove(index);
            if kill {
                crate::process::signal(process.pid(), libc::SIGKILL);
            }
            process.stop(Duration::from_secs(10));
        }
    }

    fn with_process<T>(&self, name: &str, f: impl FnOnce(&mut Process) -> T) -> anyhow::Result<T> {
        let mut processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let process = processes
            .iter_mut()
            .find(|p| p.name == name)
            .with_context(|| format!("no process named {name} in this control plane"))?;
        Ok(f(process))
    }

    /// SIGKILLs the process `name` (a component or an adopted process) and waits for it to exit. It stays
    /// registered: [`ControlPlane::respawn_process`] starts it again with the same command line.
    pub fn kill_process(&self, name: &str) -> anyhow::Result<()> {
        self.with_process(name, Process::kill)
    }

    /// Starts process `name` again with the same program, arguments (hence the same ports) and
    /// environment, SIGKILLing it first if it still runs; returns the new PID. Does not wait for it.
    pub fn respawn_process(&self, name: &str) -> anyhow::Result<u32> {
        self.with_process(name, |process| {
            process.respawn()?;
            Ok(process.pid())
        })?
    }

    /// The exit status of process `name` if it has exited, `None` while it runs.
    pub fn process_exited(&self, name: &str) -> anyhow::Result<Option<std::process::ExitStatus>> {
        self.with_process(name, Process::exited)
    }

    /// The command-line arguments of process `name`.
    pub fn process_args(&self, name: &str) -> anyhow::Result<Vec<String>> {
        self.with_process(name, |process| process.args().to_vec())
    }

    /// Starts the component `name` (one of [`COMPONENTS`]) again with its original command line after
    /// [`ControlPlane::kill_process`], and waits until it is healthy (for etcd, until kube-apiserver is
    /// ready again too).
    pub async fn start_component(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        if !COMPONENTS.contains(&name) {
            bail!("{name} is not a control-plane component ({COMPONENTS:?})");
        }
        self.respawn_process(name)?;
        self.wait_component(name, timeout).await
    }

    /// SIGKILLs the component `name` and starts it again at once with the same arguments and ports;
    /// returns once it is healthy again, with the time that took.
    pub async fn restart_component(
        &self,
        name: &str,
        timeout: Duration,
    ) -> anyhow::Result<Duration> {
        let began = Instant::now();
        self.kill_process(name)?;
        self.start_component(name, timeout).await?;
        Ok(began.elapsed())
    }

    /// Waits until component `name` answers its health check.
    async fn wait_component(&self, name: &str, timeout: Duration) -> anyhow::Result<()> {
        let apiserver = || async {
            let client = self.client().await?;
            self.wait_healthy(
                "kube-apiserver",
                &client,
                self.ports.apiserver,
                "/readyz",
                timeout,
            )
            .await
        };
        match name {
            "etcd" => {
                self.wait_etcd(timeout).await?;
                apiserver().await
            }
            "kube-apiserver" => apiserver().await,
            "kube-controller-manager" | "kube-scheduler" => {
                let port = if name == "kube-scheduler" {
                    self.ports.scheduler
                } else {
                    self.ports.controller_manager
                };
                let client = insecure_client(port)?;
                self.wait_healthy(name, &client, port, "/healthz", timeout)
                    .await
            }
            other => bail!("{other} is not a control-plane component"),
        }
    }

    /// PIDs of the components by name.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        processes
            .iter()
            .map(|p| (p.name.clone(), p.pid()))
            .collect()
    }

    /// Stops every component (reverse start order) and removes the run directory. Idempotent.
    pub fn stop(&self) {
        let mut processes = self
            .processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The cluster and its files go away: nothing needs a graceful shutdown. kube-apiserver in
        // particular holds on to its open watches after SIGTERM and would use a long grace in full
        // (about 10 s per test binary).
        while let Some(mut process) = processes.pop() {
            process.stop(Duration::from_secs(2));
        }
        if self.dir.exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn write_credentials(&self, ca: &ClusterCa) -> anyhow::Result<()> {
        let serving = ca.issue_apiserver()?;
        let write = |name: &str, text: &str| {
            let path = self.dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
        };
        write("ca.crt", &ca.pem)?;
        write("apiserver.crt", &serving.cert_pem)?;
        write("apiserver.key", &serving.key_pem)?;
        let service_account = signing_key_pem()?;
        write("sa.key", &service_account.key_pem)?;
        write("sa.pub", &service_account.cert_pem)?;
        let kcm_token = random_token();
        let scheduler_token = random_token();
        // Every component is in system:masters so controller-manager needs no per-controller credentials.
        write(
            "tokens.csv",
            &format!(
                "{},test-admin,uid-admin,\"system:masters\"\n\
                 {kcm_token},system:kube-controller-manager,uid-kcm,\"system:masters\"\n\
                 {scheduler_token},system:kube-scheduler,uid-scheduler,\"system:masters\"\n{}",
                self.admin_token,
                self.manager_token_lines(),
            ),
        )?;
        write("audit-policy.yaml", AUDIT_POLICY)?;
        let server = self.server_url();
        write("admin.kubeconfig", &self.kubeconfig_yaml())?;
        write(
            "kcm.kubeconfig",
            &kubeconfig(&server, &ca.pem, &kcm_token, "kcm"),
        )?;
        write(
            "scheduler.kubeconfig",
            &kubeconfig(&server, &ca.pem, &scheduler_token, "scheduler"),
        )?;
        write(
            "scheduler.yaml",
            &format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  kubeconfig: {}\n  qps: 200\n  burst: 400\nleaderElection:\n  leaderElect: false\n",
                self.dir.join("scheduler.kubeconfig").display()
            ),
        )?;
        Ok(())
    }

    fn spawn(&self, name: &str, args: Vec<String>) -> anyhow::Result<()> {
        let program = self.bin_dir.join(name);
        let log = self.dir.join(format!("{name}.log"));
        let process = Process::spawn(name, &program, &args, &log)?;
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(process);
        Ok(())
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn start_etcd(&self) -> anyhow::Result<()> {
        let client_url = format!("http://127.0.0.1:{}", self.ports.etcd);
        let peer_url = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        self.spawn(
            "etcd",
            vec![
                "--name=kruise-rs".into(),
                format!("--data-dir={}", self.path("etcd")),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=kruise-rs={peer_url}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
                "--quota-backend-bytes=4294967296".into(),
            ],
        )
    }

    async fn wait_etcd(&self, timeout: Duration) -> anyhow::Result<()> {
        let port = self.ports.etcd;
        self.wait_until("etcd", timeout, || async move {
            let body = plain_http_get(port, "/health").await?;
            Ok(body.contains("\"health\":\"true\""))
        })
        .await
    }

    fn start_apiserver(&self, options: &Options) -> anyhow::Result<()> {
        let mut args: Vec<String> = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.ports.etcd),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.ports.apiserver),
            // Mandatory here: without a default route the apiserver cannot pick an address itself.
            "--advertise-address=127.0.0.1".into(),
            // Endpoints may not hold loopback addresses; nothing needs default/kubernetes Endpoints.
            "--endpoint-reconciler-type=none".into(),
            format!("--tls-cert-file={}", self.path("apiserver.crt")),
            format!("--tls-private-key-file={}", self.path("apiserver.key")),
            format!("--cert-dir={}", self.path("apiserver-certs")),
            format!("--token-auth-file={}", self.path("tokens.csv")),
            format!("--client-ca-file={}", self.path("ca.crt")),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", self.path("sa.pub")),
            format!("--service-account-signing-key-file={}", self.path("sa.key")),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            // Real nodes' kubelets are reached at their InternalIP (exec, logs, port-forward);
            // their hostnames resolve nowhere.
            "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
            // As envtest: a Pod created right after its namespace must not wait for the default
            // ServiceAccount.
            DISABLE_SERVICE_ACCOUNT_ADMISSION.into(),
            "--profiling=false".into(),
            "--max-requests-inflight=800".into(),
            "--max-mutating-requests-inflight=400".into(),
            // Writes by the `manager-N` identities only (see `kubeconfig_as`), for tests that
            // tell which replica wrote what.
            format!("--audit-policy-file={}", self.path("audit-policy.yaml")),
            format!("--audit-log-path={}", self.audit_log_path().display()),
            "--audit-log-format=json".into(),
            "--v=1".into(),
        ];
        if options.service_account_admission {
            args.retain(|arg| arg != DISABLE_SERVICE_ACCOUNT_ADMISSION);
        }
        args.extend(options.apiserver_args.iter().cloned());
        self.spawn("kube-apiserver", args)
    }

    fn start_controller_manager(&self, options: &Options) -> anyhow::Result<()> {
        let (node_monitor_grace, feature_gates) = (
            options.node_monitor_grace,
            &options.controller_manager_feature_gates,
        );
        let controllers = std::iter::once("*".to_owned())
            .chain(options.controller_manager_controllers.iter().cloned())
            .collect::<Vec<_>>()
            .join(",");
        let kubeconfig = self.path("kcm.kubeconfig");
        let mut args = vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.ports.controller_manager),
            format!("--cert-dir={}", self.path("kcm-certs")),
            "--leader-elect=false".into(),
            format!("--controllers={controllers}"),
            format!("--service-account-private-key-file={}", self.path("sa.key")),
            format!("--root-ca-file={}", self.path("ca.crt")),
            format!(
                "--node-monitor-grace-period={}s",
                node_monitor_grace.as_secs().max(1)
            ),
            "--node-monitor-period=2s".into(),
            "--kube-api-qps=200".into(),
            "--kube-api-burst=400".into(),
            "--concurrent-deployment-syncs=10".into(),
            "--concurrent-replicaset-syncs=10".into(),
            "--concurrent-gc-syncs=20".into(),
            "--v=1".into(),
        ];
        if !feature_gates.is_empty() {
            args.push(format!("--feature-gates={}", feature_gates.join(",")));
        }
        self.spawn("kube-controller-manager", args)
    }

    fn start_scheduler(&self) -> anyhow::Result<()> {
        let kubeconfig = self.path("scheduler.kubeconfig");
        self.spawn(
            "kube-scheduler",
            vec![
                format!("--config={}", self.path("scheduler.yaml")),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", self.ports.scheduler),
                format!("--cert-dir={}", self.path("scheduler-certs")),
                "--v=1".into(),
            ],
        )
    }

    /// Applies the CRD manifests in `dir` (server-side) and waits until every CRD is Established.
    pub async fn install_crds(&self, dir: &Path) -> anyhow::Result<()> {
        let has_files = std::fs::read_dir(dir)
            .with_context(|| format!("reading CRD folder {}", dir.display()))?
            .filter_map(Result::ok)
            .any(|e| {
                e.path()
                    .extension()
                    .is_some_and(|x| x == "yaml" || x == "yml")
            });
        if !has_files {
            return Ok(());
        }
        let dir = dir.display().to_string();
        self.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &dir])
            .await?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ])
        .await?;
        Ok(())
    }

    async fn wait_healthy(
        &self,
        component: &str,
        client: &Client,
        port: u16,
        path: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        self.wait_until(component, timeout, || async move {
            // Connect first: the client logs every refused connection as an error.
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                return Ok(false);
            }
            let request = http::Request::get(path).body(Vec::new())?;
            Ok(client
                .request_text(request)
                .await
                .is_ok_and(|body| body.trim() == "ok"))
        })
        .await
    }

    /// Polls `ready` until true; fails early, with the component's log, if a component exited.
    async fn wait_until<F, Fut>(
        &self,
        component: &str,
        timeout: Duration,
        mut ready: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if matches!(ready().await, Ok(true)) {
                return Ok(());
            }
            let exited: Vec<String> = {
                let mut processes = self
                    .processes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // Only the control plane's own components: an adopted process (a manager a test
                // killed, or one that exited) is the caller's business.
                processes
                    .iter_mut()
                    .filter(|p| COMPONENTS.contains(&p.name.as_str()))
                    .filter_map(|p| {
                        p.exited()
                            .map(|status| format!("{} exited ({status})", p.name))
                    })
                    .collect()
            };
            if !exited.is_empty() {
                bail!(
                    "{} while waiting for {component}\n{}",
                    exited.join(", "),
                    self.log_tails(40)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{component} not ready after {timeout:?}\n{}",
                    self.log_tails(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes run directories left by control planes whose process is gone (a test binary killed before its
/// exit hook ran): `kruise-rs-<pid>-<suffix>` with no live `<pid>`.
fn remove_stale_run_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("kruise-rs-")
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive && pid.parse::<u32>().is_ok() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn make_run_dir(root: &Path) -> anyhow::Result<PathBuf> {
    remove_stale_run_dirs(root);
    let dir = root.join(format!(
        "kruise-rs-{}-{}",
        std::process::id(),
        &random_token()[..8]
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn pick_ports() -> anyhow::Result<Ports> {
    let ports = crate::process::free_ports(5)?;
    Ok(Ports {
        etcd: ports[0],
        etcd_peer: ports[1],
        apiserver: ports[2],
        controller_manager: ports[3],
        scheduler: ports[4],
    })
}

fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A kubeconfig with the CA inline and a bearer token.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str, name: &str) -> String {
    use base64::Engine;
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca_b64}\nusers:\n- name: {name}\n  user:\n    token: {token}\n\
         contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\n\
         current-context: {name}\n"
    )
}

/// A client for a component's secure port (self-signed certificate) to read `/healthz`.
fn insecure_client(port: u16) -> anyhow::Result<Client> {
    let url: http::Uri = format!("https://127.0.0.1:{port}").parse()?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    Client::try_from(config).context("building a health-check client")
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (etcd's client port speaks plain HTTP); the whole response,
/// status line included.
pub async fn plain_http_get(port: u16, path: &str) -> anyhow::Result<String> {
    plain_http_get_at("127.0.0.1", port, path).await
}

/// [`plain_http_get`] on `host` (a health or metrics server of a process the test bed runs, such as a
/// node's kube-proxy or kruise-daemon on its node address).
pub async fn plain_http_get_at(host: &str, port: u16, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((host, port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// A whole HTTP response (as [`plain_http_get`] returns it) split into its status code and body.
pub fn status_and_body(response: &str) -> anyhow::Result<(u16, String)> {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status in {head:?}"))?;
    Ok((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_body_splits_a_response() -> anyhow::Result<()> {
        let (code, body) = status_and_body("HTTP/1.1 200 OK\r\nA: b\r\n\r\nok\r\n\r\nmore")?;
        assert_eq!((code, body.as_str()), (200, "ok\r\n\r\nmore"));
        assert_eq!(status_and_body("HTTP/1.0 503 x")?, (503, String::new()));
        assert!(status_and_body("garbage").is_err());
        Ok(())
    }

    #[test]
    fn kubeconfig_parses_and_encodes_ca() -> anyhow::Result<()> {
        let yaml = kubeconfig("https://127.0.0.1:6443", "hello", "tok", "x");
        let parsed = Kubeconfig::from_yaml(&yaml)?;
        let cluster = parsed.clusters[0].cluster.as_ref().context("cluster")?;
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some("aGVsbG8=")
        );
        Ok(())
    }
}
