//! Watch faults on a real apiserver: the manager loses its apiserver (a black-holed connection, as
//! across a partition) longer than its watches live, workloads are created and scaled meanwhile,
//! and etcd is compacted, so that every watch that resumes from where it was meets 410 Gone and
//! relists. Every workload changed in the gap must be reconciled within seconds of the heal, round
//! after round.
//!
//! This is the sequence of the CloneSet stall (issue 54): a relist used to hand its objects to the
//! controllers before their store showed them, and a CloneSet created in the gap was dropped by its
//! controller and never reconciled.
//!
//! Own test binary: its apiserver runs without a watch cache (`--watch-cache=false`), so that watches
//! are served by etcd itself and a compaction expires their resourceVersions at once, as a busy
//! cluster's watch cache window does.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use kruise_e2e::cloneset_kit::{apply, cloneset, wait_converged};
use kruise_testkit::blackhole::BlackHoleProxy;
use kruise_testkit::manager::{ManagerOptions, http_get};
use kruise_testkit::{TestBed, testbed_with};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

const ROUNDS: usize = 3;
/// The manager's `--watch-timeout-seconds`: every watch ends this often and resumes from its last
/// resourceVersion.
const WATCH_TIMEOUT_SECONDS: u64 = 3;
/// Longer than a watch lives and its idle deadline (5 s more), so that every watch has to resume.
const PARTITION: Duration = Duration::from_secs(12);
const TIMEOUT: Duration = Duration::from_secs(60);

fn bed() -> &'static TestBed {
    testbed_with(|options| options.apiserver_args.push("--watch-cache=false".into()))
}

/// Posts `body` to etcd's JSON gateway at `path`; returns the answer's body.
async fn etcd(
    bed: &TestBed,
    path: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", bed.plane.ports().etcd)).await?;
    stream
        .write_all(
            format!(
                "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, answer) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("etcd {path}: no body in {response:?}"))?;
    ensure!(head.contains(" 200 "), "etcd {path}: {head}\n{answer}");
    serde_json::from_str(answer).with_context(|| format!("etcd {path}: {answer}"))
}

/// Compacts etcd at its current revision (physically): every older resourceVersion is gone.
async fn compact(bed: &TestBed) -> anyhow::Result<i64> {
    // A range read of any key answers with the current revision in its header.
    let range = etcd(bed, "/v3/kv/range", &json!({"key": "L3JlZ2lzdHJ5"})).await?;
    let revision: i64 = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("no revision in {range}"))?;
    etcd(
        bed,
        "/v3/kv/compaction",
        &json!({"revision": revision, "physical": true}),
    )
    .await?;
    Ok(revision)
}

/// Heals the partition however the round ends, so that a failed round leaves the manager able to
/// answer the next test's webhooks.
struct Healing<'a>(&'a BlackHoleProxy);

impl Drop for Healing<'_> {
    fn drop(&mut self) {
        self.0.heal();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_changed_while_the_watches_were_cut_and_etcd_compacted_are_reconciled()
-> anyhow::Result<()> {
    let bed = bed();
    let proxy =
        BlackHoleProxy::start(format!("127.0.0.1:{}", bed.plane.ports().apiserver).parse()?)
            .await?;
    let kubeconfig = bed.plane.dir().join("watch-faults.kubeconfig");
    std::fs::write(
        &kubeconfig,
        bed.plane.kubeconfig_as(0, &proxy.server_url())?,
    )?;
    // The proxy forwards on this runtime's tasks while the manager starts (a blocking wait).
    let manager = tokio::task::block_in_place(|| {
        bed.manager_with(&ManagerOptions {
            name: "kruise-manager".into(),
            leader_election_id: "kruise-manager-watch-faults".into(),
            // The partition must not cost the lease: the point is the watches, not a failover.
            lease_seconds: 60,
            extra_args: vec![
                format!("--watch-timeout-seconds={WATCH_TIMEOUT_SECONDS}"),
                "--watch-stale-seconds=120".into(),
            ],
            kubeconfig: Some(kubeconfig),
        })
    });
    let ns = bed.namespace("watch-faults").await?;
    ns.run(async {
        apply(&ns, &cloneset("steady", 1, "nginx:alpine", json!({}))).await?;
        wait_converged(&ns, "steady", 1, TIMEOUT).await?;
        let clonesets: Api<kruise_api::cloneset::v1beta1::CloneSet> = ns.api();
        for round in 0..ROUNDS {
            let created = format!("gap-{round}");
            let steady = i32::try_from(round).unwrap_or(0) + 2;
            let healed = {
                let _healing = Healing(&proxy);
                proxy.black_hole();
                // Meanwhile, a user creates one CloneSet and scales another; the manager's webhooks
                // answer (the apiserver calls them directly), its watches see nothing.
                apply(&ns, &cloneset(&created, 2, "nginx:alpine", json!({}))).await?;
                clonesets
                    .patch(
                        "steady",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"replicas": steady}})),
                    )
                    .await?;
                // The fault's length, not a wait for an outcome: every watch outlives its timeout.
                tokio::time::sleep(PARTITION).await;
                let revision = compact(bed).await?;
                println!("round {round}: etcd compacted at revision {revision}");
                Instant::now()
            };
            wait_converged(&ns, &created, 2, TIMEOUT)
                .await
                .with_context(|| format!("round {round}: {created}, created in the gap"))?;
            wait_converged(&ns, "steady", steady, TIMEOUT)
                .await
                .with_context(|| format!("round {round}: steady, scaled in the gap"))?;
            println!(
                "round {round}: both reconciled {:.1} s after the partition healed",
                healed.elapsed().as_secs_f64()
            );
        }
        let log =
            std::fs::read_to_string(bed.plane.dir().join("kruise-manager.log")).unwrap_or_default();
        // The watches that resumed past the compaction met 410 Gone and relisted: the fault the
        // rounds were made of (each line names the kind).
        let gone: Vec<&str> = log.lines().filter(|l| l.contains("is too old")).collect();
        let mut kinds: Vec<&str> = gone
            .iter()
            .filter(|l| l.contains("kind"))
            .filter_map(|l| l.rsplit("\u{1b}[0m").next())
            .map(str::trim)
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        println!(
            "410 Gone met {} times, by the watches of {kinds:?}",
            gone.len()
        );
        ensure!(
            !gone.is_empty(),
            "no watch met 410 Gone: the test did not exercise a relist"
        );
        // The stall watchdog saw every change reconciled: none waited long enough to be queued
        // again, and nothing waits now.
        let (_, metrics) = http_get(manager.ports.metrics, "/metrics").await?;
        let series = |name: &str| -> Vec<&str> {
            metrics
                .lines()
                .filter(|l| l.starts_with(name) && l.contains("cloneset-controller"))
                .collect()
        };
        let oldest = series("kruise_controller_oldest_unreconciled_change_seconds");
        let requeues = series("kruise_controller_stall_requeues_total");
        println!("watchdog: {oldest:?} {requeues:?}");
        ensure!(
            !oldest.is_empty(),
            "no watchdog gauge for the CloneSet controller"
        );
        ensure!(
            requeues.iter().all(|l| l.ends_with(" 0")),
            "the watchdog had to queue CloneSets again: {requeues:?}"
        );
        Ok(())
    })
    .await
}
