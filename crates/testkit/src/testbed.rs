//! One control plane and one simulated kubelet per test binary, shared by every test in it.
//!
//! The control plane is started on first use from a dedicated thread whose runtime also runs kubelet-sim
//! for the life of the process. Each test builds its own client (a kube client belongs to the runtime that
//! made it) and works in its own namespace. The components are stopped and their files removed when the
//! test binary exits.

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kubelet_sim::NodeSpecSim;

use crate::control_plane::{ControlPlane, Options};
use crate::wait::until;

/// Nodes of the shared test bed: three, one per zone.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The shared control plane and its simulated nodes.
pub struct TestBed {
    pub plane: ControlPlane,
    pub nodes: Vec<NodeSpecSim>,
    /// Names of the real nodes (empty unless started by [`testbed_with_real_nodes`]).
    pub real_nodes: Vec<String>,
    real: std::sync::Mutex<Option<crate::realnode::RealNodes>>,
    manager: OnceLock<Result<crate::manager::Manager, String>>,
    daemons: OnceLock<Result<Vec<crate::daemon::Daemon>, String>>,
}

/// The apps.kruise.io CRDs checked in at `config/crd`.
pub fn crd_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd")
}

static BED: OnceLock<Result<TestBed, String>> = OnceLock::new();

/// The test bed of this test binary, started on first call. Panics (failing the calling test) with the
/// components' logs if it cannot start.
pub fn testbed() -> &'static TestBed {
    testbed_with(|_| {})
}

/// Like [`testbed`], with `configure` applied to the control plane's [`Options`] (CRDs installed, the
/// rest default) when this call starts it; once the test bed runs, `configure` is ignored, so a test
/// binary that needs other options calls this, the same way, from every test.
pub fn testbed_with(configure: fn(&mut Options)) -> &'static TestBed {
    testbed_of(configure, 0)
}

/// The test bed with `count` real nodes beside the simulated ones (see [`crate::realnode`]): real
/// kubelets with containerd, labelled `kruise-rs.io/real-node=true`, zones round-robin. Call it the same
/// way from every test of a binary.
pub fn testbed_with_real_nodes(count: usize) -> &'static TestBed {
    testbed_of(|_| {}, count)
}

/// What nodes a test binary's bed has, beyond its control plane's [`Options`].
#[derive(Clone, Copy, Debug)]
pub struct BedShape {
    /// kubelet-sim nodes, one zone each round-robin (`sim-<i>`); 0 runs no kubelet-sim.
    pub simulated_nodes: u16,
    /// Real nodes (see [`crate::realnode`]).
    pub real_nodes: usize,
    /// The real nodes' in-cluster networking (kube-proxy per node, routed Pod ranges, the `kubernetes`
    /// Service served on every node; see [`crate::realnode::RealNodeOptions::kube_proxy`]), and each
    /// node's containerd socket at the standard path for its Pods
    /// ([`crate::realnode::RealNodeOptions::standard_runtime_socket`]): what an installed chart needs.
    pub in_cluster_network: bool,
}

impl Default for BedShape {
    /// The shared bed: three simulated nodes, no real ones.
    fn default() -> Self {
        Self {
            simulated_nodes: 3,
            real_nodes: 0,
            in_cluster_network: false,
        }
    }
}

/// The test bed shaped by `shape`, with `configure` applied to the control plane's [`Options`] (CRDs
/// installed, the rest default) when this call starts it. Call it the same way from every test of a
/// binary: once the bed runs, the arguments are ignored.
pub fn testbed_shaped(configure: fn(&mut Options), shape: BedShape) -> &'static TestBed {
    let bed = BED.get_or_init(|| {
        start_in_background(configure, shape).map_err(|error| format!("{error:#}"))
    });
    match bed {
        Ok(bed) => bed,
        Err(error) => panic!("the local control plane could not start: {error}"),
    }
}

fn testbed_of(configure: fn(&mut Options), real_nodes: usize) -> &'static TestBed {
    testbed_shaped(
        configure,
        BedShape {
            real_nodes,
            ..BedShape::default()
        },
    )
}

extern "C" fn stop_at_exit() {
    if let Some(Ok(bed)) = BED.get() {
        if let Ok(mut real) = bed.real.lock()
            && let Some(real) = real.as_mut()
        {
            real.stop();
        }
        bed.plane.stop();
    }
}

fn start_in_background(configure: fn(&mut Options), shape: BedShape) -> anyhow::Result<TestBed> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("testbed".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("testbed-rt")
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    let _ = tx.send(Err(
                        anyhow::Error::from(error).context("building the test bed runtime")
                    ));
                    return;
                }
            };
            runtime.block_on(async move {
                match start(configure, shape).await {
                    Ok(bed) => {
                        let _ = tx.send(Ok(bed));
                        // Keep the runtime, and with it kubelet-sim, alive for the whole test binary.
                        std::future::pending::<()>().await;
                    }
                    Err(error) => {
                        let _ = tx.send(Err(error));
                    }
                }
            });
        })
        .context("starting the test bed thread")?;
    let bed = rx.recv().context("the test bed thread died")??;
    crate::process::at_exit(stop_at_exit);
    Ok(bed)
}

async fn start(configure: fn(&mut Options), shape: BedShape) -> anyhow::Result<TestBed> {
    let mut options = Options {
        crd_dir: Some(crd_dir()),
        ..Options::default()
    };
    configure(&mut options);
    let plane = ControlPlane::start(options).await?;
    let log = plane.dir().join("kubelet-sim.log");
    if let Ok(file) = std::fs::File::create(&log) {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"))
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .try_init();
    }
    let zones: Vec<String> = ZONES.iter().map(|z| z.to_string()).collect();
    let nodes = NodeSpecSim::fleet("sim", shape.simulated_nodes, &zones);
    if !nodes.is_empty() {
        let client = plane.client().await?;
        start_kubelet_sim(client, nodes.clone(), Duration::from_secs(2));
        wait_nodes_ready(&plane.client().await?, &nodes)
            .await
            .map_err(|e| e.context(plane.log_tails(30)))?;
    }
    let real = if shape.real_nodes > 0 {
        let mut options =
            crate::realnode::RealNodeOptions::new(shape.real_nodes, &ZONES, plane.bin_dir());
        if shape.in_cluster_network {
            options.kube_proxy = Some(plane.bin_dir().join("kube-proxy"));
            // An installed chart's kruise-daemon finds its node's runtime under the host's /var/run.
            options.standard_runtime_socket = true;
        }
        match crate::realnode::RealNodes::start(&plane, &options).await {
            Ok(real) => Some(real),
            Err(error) => {
                plane.stop();
                return Err(error.context("starting the real nodes"));
            }
        }
    } else {
        None
    };
    Ok(TestBed {
        plane,
        nodes,
        real_nodes: real.as_ref().map(|r| r.names()).unwrap_or_default(),
        real: std::sync::Mutex::new(real),
        manager: OnceLock::new(),
        daemons: OnceLock::new(),
    })
}

/// Starts kubelet-sim for `nodes` on the current runtime.
pub fn start_kubelet_sim(client: Client, nodes: Vec<NodeSpecSim>, heartbeat: Duration) {
    let mut config = kubelet_sim::Config::new(nodes);
    config.heartbeat_every = heartbeat;
    kubelet_sim::volumes::spawn(client.clone(), std::future::pending());
    tokio::spawn(async move {
        if let Err(error) = kubelet_sim::run(client, config, std::future::pending()).await {
            tracing::error!(%error, "kubelet-sim stopped");
        }
    });
}

/// Waits until every node is Ready and the controller manager has lifted the not-ready taint, so Pods
/// can be scheduled at once.
pub async fn wait_nodes_ready(client: &Client, nodes: &[NodeSpecSim]) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    // The node lifecycle controller lifts the not-ready taints one node at a time: allow a second
    // per node beyond the base, so a 300-node fleet on a loaded machine is not cut short.
    let timeout = Duration::from_secs(90 + u64::try_from(nodes.len()).unwrap_or(0));
    until("simulated nodes Ready and untainted", timeout, || {
        let api = api.clone();
        let names = names.clone();
        async move {
            let list = api.list(&ListParams::default()).await?;
            let ready = |node: &Node| {
                let status_ready = crate::fleet::reports_ready(node);
                let tainted = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
                status_ready && !tainted
            };
            Ok(names.iter().all(|name| {
                list.items
                    .iter()
                    .any(|n| n.metadata.name.as_deref() == Some(name.as_str()) && ready(n))
            }))
        }
    })
    .await
}

impl TestBed {
    /// The last `lines` of every real node's kubelet and containerd logs (for a failing test).
    pub fn real_node_logs(&self, lines: usize) -> String {
        self.real
            .lock()
            .ok()
            .and_then(|real| real.as_ref().map(|r| r.log_tails(lines)))
            .unwrap_or_default()
    }

    /// Pushes kruise-rs's manager and daemon images to the real nodes' registry under the chart's
    /// default names (see [`crate::realnode::kruise_images::push`]); blocking (a registry upload).
    pub fn push_kruise_images(
        &self,
        source: &crate::realnode::kruise_images::Source,
    ) -> anyhow::Result<[crate::realnode::kruise_images::Pushed; 2]> {
        let real = self
            .real
            .lock()
            .map_err(|_| anyhow::anyhow!("the real nodes' lock is poisoned"))?;
        let real = real.as_ref().context("the test bed has no real nodes")?;
        crate::realnode::kruise_images::push(
            &real.registry,
            source,
            &real.dir().join("kruise-images"),
        )
    }

    /// Pushes OpenKruise v1.9.0's image, built from `make openkruise`'s output in `dir`, to the real
    /// nodes' registry under its chart's default name (see [`crate::realnode::openkruise_image`]);
    /// blocking.
    pub fn push_openkruise_image(
        &self,
        dir: &std::path::Path,
    ) -> anyhow::Result<crate::realnode::kruise_images::Pushed> {
        let real = self
            .real
            .lock()
            .map_err(|_| anyhow::anyhow!("the real nodes' lock is poisoned"))?;
        let real = real.as_ref().context("the test bed has no real nodes")?;
        crate::realnode::openkruise_image::push(&real.registry, dir)
    }

    /// One kruise-daemon per real node (started on first call, each on its node's containerd socket),
    /// ready when this returns. Panics with their logs if they cannot start.
    pub fn daemons(&'static self) -> &'static [crate::daemon::Daemon] {
        let started = self.daemons.get_or_init(|| {
            let run = || -> anyhow::Result<Vec<crate::daemon::Daemon>> {
                let hosts = self
                    .real
                    .lock()
                    .map_err(|_| anyhow::anyhow!("the real nodes' lock is poisoned"))?
                    .as_ref()
                    .map(|r| r.daemon_hosts())
                    .unwrap_or_default();
                let daemons = hosts
                    .iter()
                    .map(|host| crate::daemon::spawn_on(&self.plane, host))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(crate::daemon::wait_ready(&daemons, Duration::from_secs(90)))?;
                Ok(daemons)
            };
            std::thread::scope(|scope| scope.spawn(run).join())
                .map_err(|_| "the daemons' start-up thread panicked".to_string())
                .and_then(|result| result.map_err(|error| format!("{error:#}")))
        });
        match started {
            Ok(daemons) => daemons,
            Err(error) => panic!("kruise-daemon could not start: {error}"),
        }
    }

    /// The kruise-daemons started so far by [`TestBed::daemons`] (none before, or if they failed).
    pub fn running_daemons(&self) -> &[crate::daemon::Daemon] {
        match self.daemons.get() {
            Some(Ok(daemons)) => daemons,
            _ => &[],
        }
    }

    /// The test binary's kruise-manager (started on first call, webhook wired into the apiserver). Panics
    /// with its log if it cannot start.
    pub fn manager(&'static self) -> &'static crate::manager::ManagerPorts {
        &self.manager_with(&Default::default()).ports
    }

    /// The test binary's kruise-manager, started on first call with `options` (the options of later
    /// calls are ignored: call it the same way from every test of a binary), its webhook wired into the
    /// apiserver. The handle kills and restarts it. Panics with its log if it cannot start.
    pub fn manager_with(
        &'static self,
        options: &crate::manager::ManagerOptions,
    ) -> &'static crate::manager::Manager {
        let started = self.manager.get_or_init(|| {
            let run = || -> anyhow::Result<crate::manager::Manager> {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async {
                    crate::manager::ensure_namespace(&self.plane).await?;
                    let manager = crate::manager::Manager::spawn(&self.plane, options)?;
                    crate::manager::wait_serving(
                        &self.plane,
                        &manager.ports,
                        Duration::from_secs(90),
                    )
                    .await?;
                    Ok(manager)
                })
            };
            // A separate thread: the caller may be inside a runtime, where block_on is not allowed.
            std::thread::scope(|scope| scope.spawn(run).join())
                .map_err(|_| "the manager start-up thread panicked".to_string())
                .and_then(|result| result.map_err(|error| format!("{error:#}")))
        });
        match started {
            Ok(manager) => manager,
            Err(error) => panic!("kruise-manager could not start: {error}"),
        }
    }

    /// A fresh namespace `<prefix>-<random>` for one test, deleted when the guard drops. Run the test body
    /// through [`TestNamespace::run`] so that a failure prints diagnostics and keeps the namespace.
    pub async fn namespace(&'static self, prefix: &str) -> anyhow::Result<TestNamespace> {
        let client = self.plane.client().await?;
        let name = format!("{prefix}-{}", &uuid_like()[..6]);
        let api: Api<Namespace> = Api::all(client.clone());
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(name.clone());
        namespace.metadata.labels =
            Some([("kruise-rs.io/e2e".to_string(), "true".to_string())].into());
        api.create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace {
            name,
            client,
            bed: self,
            failed: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// How many lines of Pods and of Events a failed test prints: a 200-Pod listing would push the
/// failure out of the window of output CI shows.
const DIAGNOSTIC_LINES: usize = 40;

/// The first `n` lines of `text`, and how many were left out.
fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[..lines.len().min(n)].join("\n");
    if lines.len() > n {
        out.push_str(&format!("\n... and {} more", lines.len() - n));
    }
    out
}

/// The last `n` lines of `text`, and how many were left out.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let skipped = lines.len().saturating_sub(n);
    let mut out = if skipped > 0 {
        format!("... {skipped} earlier\n")
    } else {
        String::new()
    };
    out.push_str(&lines[skipped..].join("\n"));
    out
}

fn uuid_like() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// A fresh namespace (see [`TestBed::namespace`]) on the shared [`testbed`] with its kruise-manager
/// running ([`TestBed::manager`]).
pub async fn managed_namespace(prefix: &str) -> anyhow::Result<TestNamespace> {
    let bed = testbed();
    bed.manager();
    bed.namespace(prefix).await
}

/// A test's namespace and an admin client made on the test's runtime.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    bed: &'static TestBed,
    failed: std::sync::atomic::AtomicBool,
}

impl TestNamespace {
    /// Runs a test body. If it fails (returns an error), the namespace's Pods and Events and the tail of
    /// every component's log are printed and the namespace is kept for inspection; a panic does the same.
    pub async fn run<T>(&self, body: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
        let result = body.await;
        if let Err(error) = &result {
            self.failed.store(true, std::sync::atomic::Ordering::SeqCst);
            self.print_diagnostics(&format!("{error:#}"));
        }
        result
    }

    /// What a failed test leaves for whoever reads CI's output, which may show only a window of it:
    /// the failure itself first and again last, the namespace's Events and at most
    /// [`DIAGNOSTIC_LINES`] lines of its Pods, then the tail of every component's log.
    fn print_diagnostics(&self, failure: &str) {
        let kubectl = |args: &[&str]| {
            std::process::Command::new(self.bed.plane.bin_dir().join("kubectl"))
                .arg("--kubeconfig")
                .arg(self.bed.plane.kubeconfig_path())
                .args(["get", "-o", "wide", "-n", &self.name])
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let sim_log = self.bed.plane.dir().join("kubelet-sim.log");
        eprintln!(
            "===== test failed in namespace {}: {failure}\n----- events -----\n{}\n----- pods -----\n{}\n{}----- kubelet-sim -----\n{}\n===== test failed in namespace {}: {failure}",
            self.name,
            last_lines(
                &kubectl(&["events", "--sort-by=.lastTimestamp"]),
                DIAGNOSTIC_LINES
            ),
            first_lines(&kubectl(&["pods"]), DIAGNOSTIC_LINES),
            self.bed.plane.log_tails(40),
            crate::process::tail(&sim_log, 40),
            self.name,
        );
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// `kubectl <args> -n <namespace>`.
    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        // The namespace goes first: after a `--` (kubectl exec) it would be the command's.
        let mut all: Vec<&str> = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        self.bed.plane.kubectl(&all).await
    }

    /// `kubectl apply -f -` in this namespace.
    pub async fn apply(&self, yaml: &str) -> anyhow::Result<String> {
        self.bed.plane.kubectl_apply(&self.name, yaml).await
    }

    /// A [`RolloutMonitor`](crate::RolloutMonitor) on this namespace's Pods matching `label_selector`,
    /// started once it has listed them.
    pub async fn rollout_monitor(
        &self,
        label_selector: &str,
        limits: crate::Limits,
    ) -> anyhow::Result<crate::RolloutMonitor> {
        crate::RolloutMonitor::start(self.client.clone(), &self.name, label_selector, limits).await
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let kubectl = self.bed.plane.bin_dir().join("kubectl");
        let kubeconfig = self.bed.plane.kubeconfig_path();
        if std::thread::panicking() {
            self.print_diagnostics("panicked (the message is above)");
            return;
        }
        let _ = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["delete", "namespace", &self.name, "--wait=false"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

#[cfg(test)]
mod tests {
    use super::{first_lines, last_lines};

    #[test]
    fn a_long_listing_is_cut_and_says_how_much_was_left_out() {
        let text = "a\nb\nc\nd";
        assert_eq!(first_lines(text, 2), "a\nb\n... and 2 more");
        assert_eq!(last_lines(text, 2), "... 2 earlier\nc\nd");
        assert_eq!(first_lines(text, 4), text);
        assert_eq!(last_lines(text, 9), text);
        assert_eq!(first_lines("", 3), "");
    }
}
