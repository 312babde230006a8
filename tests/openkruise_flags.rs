//! kruise-manager started with OpenKruise v1.9's own chart command line (`--enable-leader-election
//! --metrics-addr --health-probe-addr --v=4 --feature-gates=… --sync-period=0 --logging-format=json`) runs
//! the seed 000 CloneSet walkthrough, and reports at start-up the feature gates it does not know.
//!
//! The only change to the chart's arguments: the addresses name 127.0.0.1 (the chart's `:8080` means
//! every interface, which this test bed does not listen on). Own test binary: its manager owns the
//! cluster's webhook configurations.

use std::time::Duration;

use anyhow::{Context, ensure};
use kruise_e2e::cloneset_kit::{restarts, set_image, spec_image, uid, wait_converged};
use kruise_testkit::manager::{self, ManagerPorts};
use kruise_testkit::process::{Process, free_port};
use kruise_testkit::{eventually, testbed};

#[tokio::test]
async fn openkruise_chart_command_line_runs_the_seed_walkthrough() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("ok-flags").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let ports = ManagerPorts {
            webhook: free_port()?,
            metrics: free_port()?,
            health: free_port()?,
        };
        let args: Vec<String> = vec![
            // The chart's arguments (templates/manager.yaml of OpenKruise v1.9).
            "--enable-leader-election".into(),
            format!("--metrics-addr=127.0.0.1:{}", ports.metrics),
            format!("--health-probe-addr=127.0.0.1:{}", ports.health),
            "--v=4".into(),
            "--feature-gates=ImagePullJobGate=true,PreparingUpdateAsUpdate=true,PreDownloadImageForInPlaceUpdate=true,EnablePodProbeMarkerOnServerless=true".into(),
            "--sync-period=0".into(),
            "--logging-format=json".into(),
            // What the chart passes through the environment and the in-cluster config.
            format!("--kubeconfig={}", bed.plane.kubeconfig_path().display()),
            "--leader-election-namespace=kruise-system".into(),
            "--leader-election-lease-duration=15s".into(),
            // In a cluster the webhook listens on every interface; this test bed listens on loopback.
            "--webhook-bind-address=127.0.0.1".into(),
        ];
        let log = bed.plane.dir().join("kruise-manager-chart.log");
        let port = ports.webhook.to_string();
        let process = Process::spawn_with_env(
            "kruise-manager-chart",
            &manager::binary()?,
            &args,
            &[
                ("POD_NAMESPACE", std::path::Path::new(manager::NAMESPACE)),
                ("WEBHOOK_HOST", std::path::Path::new("127.0.0.1")),
                ("WEBHOOK_PORT", std::path::Path::new(&port)),
                (
                    "WEBHOOK_CONFIGURATION_FAILURE_POLICY_PODS",
                    std::path::Path::new("Ignore"),
                ),
            ],
            &log,
        )?;
        bed.plane.adopt(process);
        manager::wait_serving(&bed.plane, &ports, Duration::from_secs(120)).await?;

        // The start-up report, in JSON lines.
        let text = std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
        let warnings: Vec<&str> = text.lines().filter(|l| l.contains("\"WARN\"")).collect();
        // Every gate of v1.9.0 is implemented: none of those named is reported. (An unknown gate
        // keeps the manager from starting, as upstream's: crates/manager/tests/flags.rs.)
        ensure!(
            !warnings.iter().any(|l| l.contains("feature gate")),
            "a gate reported: {warnings:#?}"
        );
        ensure!(
            text.lines().filter(|l| !l.trim().is_empty()).all(|l| l.starts_with('{')),
            "--logging-format=json: every log line is JSON"
        );

        // Seed 000: two Pods, then an in-place image update.
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/cloneset-sample.yaml");
        let yaml = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        ns.apply(&yaml).await?;
        let (_, before) = wait_converged(&ns, "sample", 2, Duration::from_secs(120)).await?;
        set_image(&ns, "sample", "nginx:1.19.1").await?;
        let after = eventually("both Pods updated in place", Duration::from_secs(120), || async {
            let (_, pods) = wait_converged(&ns, "sample", 2, Duration::from_secs(5)).await?;
            Ok(pods
                .iter()
                .all(|p| spec_image(p).as_deref() == Some("nginx:1.19.1") && restarts(p) == 1)
                .then_some(pods))
        })
        .await?;
        let mut uids_before: Vec<String> = before.iter().map(uid).collect();
        let mut uids_after: Vec<String> = after.iter().map(uid).collect();
        uids_before.sort();
        uids_after.sort();
        ensure!(uids_before == uids_after, "Pods were recreated: {uids_before:?} → {uids_after:?}");
        bed.plane.stop_process("kruise-manager-chart", false);
        Ok(())
    })
    .await
}
