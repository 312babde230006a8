//! What the installed lanes share (`tests/installed.rs`, kruise-rs's chart; `tests/installed_takeover.rs`,
//! OpenKruise's chart then the takeover): a bed of real nodes only, with what a cluster gives Pods that
//! talk to the apiserver, and the checks and diagnostics around a chart's Pods.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kruise_testkit::installed::{DAEMON_SELECTOR, MANAGER_SELECTOR, SYSTEM};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{BedShape, Options, TestBed, TestNamespace, eventually, testbed_shaped};
use kube::api::{Api, ListParams};

/// Two real nodes: a Pod's route to the apiserver and the host's route to Pods are per node.
pub const REAL_NODES: usize = 2;
/// Real containers start in about a second; generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The managers' leader election Lease (the `--leader-election-id` default of both kruise-rs and
/// OpenKruise).
pub const LEASE: &str = "kruise-manager";

pub fn configure(options: &mut Options) {
    // No kruise CRDs from the test bed: the chart installs them, as it does for users.
    options.crd_dir = None;
    options.service_account_admission = true;
    options
        .apiserver_args
        .push("--enable-aggregator-routing=true".into());
}

pub fn bed() -> &'static TestBed {
    testbed_shaped(
        configure,
        BedShape {
            simulated_nodes: 0,
            real_nodes: REAL_NODES,
            in_cluster_network: true,
        },
    )
}

/// Every Node is a real one (a simulated node's Pod IP would be routed off the machine).
pub async fn only_real_nodes(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let list = nodes.list(&ListParams::default()).await?.items;
    let mut names = Vec::new();
    for node in &list {
        let name = node.metadata.name.clone().unwrap_or_default();
        let real = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REAL_NODE_LABEL))
            .is_some_and(|v| v == "true");
        ensure!(real, "Node {name} is not a real node");
        names.push(name);
    }
    ensure!(
        names.len() == REAL_NODES,
        "{REAL_NODES} real nodes expected, found {names:?}"
    );
    names.sort();
    Ok(names)
}

/// Waits for the namespace's `default` ServiceAccount: with the admission plugin on, a Pod is refused
/// until kube-controller-manager has made it.
pub async fn wait_default_service_account(ns: &TestNamespace) -> anyhow::Result<()> {
    let api: Api<ServiceAccount> = ns.api();
    eventually("the default ServiceAccount", TIMEOUT, || async {
        Ok(api.get_opt("default").await?.map(|_| ()))
    })
    .await
}

/// The chart's Pods, their logs and events: why an installed lane failed.
pub async fn system_diagnostics(bed: &TestBed) -> String {
    let mut out = String::new();
    for args in [
        vec![
            "get",
            "pods,daemonsets,deployments,leases,endpointslices",
            "-o",
            "wide",
        ],
        vec!["describe", "pods"],
        vec!["get", "events", "--sort-by=.lastTimestamp"],
        vec!["logs", "--prefix", "--tail=40", "-l", MANAGER_SELECTOR],
        vec!["logs", "--prefix", "--tail=40", "-l", DAEMON_SELECTOR],
    ] {
        let mut all = vec!["-n", SYSTEM];
        all.extend(args.iter().copied());
        let text = bed
            .plane
            .kubectl(&all)
            .await
            .unwrap_or_else(|error| format!("{error:#}"));
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        out.push_str(&format!("----- kubectl {} -----\n{tail}\n", all.join(" ")));
    }
    out
}

/// The Pod holding the managers' Lease: kruise-rs's identity is the Pod's name, OpenKruise's
/// `<pod>_<uuid>` (a Pod's hostname being its name).
pub async fn lease_holder(ns: &TestNamespace) -> anyhow::Result<Option<String>> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(ns.client.clone(), SYSTEM);
    let Some(lease) = leases.get_opt(LEASE).await? else {
        return Ok(None);
    };
    Ok(lease
        .spec
        .and_then(|s| s.holder_identity)
        .and_then(|holder| holder.split('_').next().map(String::from)))
}
