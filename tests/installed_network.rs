//! In-cluster networking on real nodes, as an installed chart needs it (issue 58, without the chart
//! yet): a bed of real nodes only, with the ServiceAccount admission plugin on, the apiserver routing
//! to Service endpoints (`--enable-aggregator-routing=true`) and the real nodes' opt-in in-cluster
//! network (a kube-proxy per node, Pod ranges routed from the host; see
//! `kruise_testkit::realnode::kube_proxy`).
//!
//! - A Pod and a host-network Pod on each node reach the `kubernetes` Service at 10.0.0.1:443 (what
//!   in-cluster configuration dials) and have their ServiceAccount token mounted.
//! - The apiserver reads a Pod on each node through its Service (the service proxy dials the Pod's IP):
//!   the host reaches Pod IPs, which is what webhook calls through a Service need.
//!
//! No simulated nodes: their Pods have made-up IPs, which the host would send off the machine.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kruise_e2e::real_node_kit::{create_ready_pod, in_namespace_with_node_logs};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{BedShape, Options, TestBed, TestNamespace, eventually, testbed_shaped};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// Two real nodes: a Pod's route to the apiserver and the host's route to Pods are per node.
const REAL_NODES: usize = 2;
/// Real containers start in about a second; generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Where the kubelet mounts a Pod's ServiceAccount token (the projected `kube-api-access-*` volume).
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// What a Go TLS server (the apiserver) answers to plain HTTP: proof that 10.0.0.1:443 is the apiserver.
const APISERVER_PLAIN_HTTP_ANSWER: &str = "Client sent an HTTP request to an HTTPS server";

fn configure(options: &mut Options) {
    // No kruise CRDs: nothing here uses them.
    options.crd_dir = None;
    options.service_account_admission = true;
    options
        .apiserver_args
        .push("--enable-aggregator-routing=true".into());
}

fn bed() -> &'static TestBed {
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
async fn only_real_nodes(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
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
async fn wait_default_service_account(ns: &TestNamespace) -> anyhow::Result<()> {
    let api: Api<ServiceAccount> = ns.api();
    eventually("the default ServiceAccount", TIMEOUT, || async {
        Ok(api.get_opt("default").await?.map(|_| ()))
    })
    .await
}

/// A busybox Pod named `name` that sleeps on `node`, on the host network when `host_network`.
fn sleeper(name: &str, node: &str, host_network: bool) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "hostNetwork": host_network,
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
            }],
        },
    })
}

/// `kubectl exec <pod> -- <command…>`; stdout.
async fn exec(ns: &TestNamespace, pod: &str, command: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(command);
    ns.kubectl(&args)
        .await
        .with_context(|| format!("exec {command:?} in {pod}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_host_network_pods_reach_the_apiserver_service_with_their_token()
-> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "net-apiserver", async |ns| {
        let nodes = only_real_nodes(ns).await?;
        wait_default_service_account(ns).await?;
        let mut pods = Vec::new();
        for (index, node) in nodes.iter().enumerate() {
            for (host_network, kind) in [(false, "pod"), (true, "host")] {
                let name = format!("{kind}-{index}");
                create_ready_pod(ns, &sleeper(&name, node, host_network), TIMEOUT).await?;
                pods.push(name);
            }
        }
        for pod in &pods {
            let env = exec(ns, pod, &["sh", "-c", "echo $KUBERNETES_SERVICE_HOST"]).await?;
            ensure!(
                env.trim() == "10.0.0.1",
                "{pod}: KUBERNETES_SERVICE_HOST is {env:?}"
            );
            // Plain HTTP to the TLS port: only a Go TLS server answers this, so it is the apiserver.
            let answer = exec(
                ns,
                pod,
                &[
                    "sh",
                    "-c",
                    "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 10.0.0.1 443",
                ],
            )
            .await?;
            ensure!(
                answer.contains(APISERVER_PLAIN_HTTP_ANSWER),
                "{pod}: 10.0.0.1:443 answered {answer:?}"
            );
            let namespace = exec(
                ns,
                pod,
                &["cat", &format!("{SERVICE_ACCOUNT_DIR}/namespace")],
            )
            .await?;
            ensure!(
                namespace.trim() == ns.name,
                "{pod}: the mounted namespace is {namespace:?}, not {}",
                ns.name
            );
            let token = exec(ns, pod, &["cat", &format!("{SERVICE_ACCOUNT_DIR}/token")]).await?;
            ensure!(
                token.split('.').count() == 3,
                "{pod}: the mounted token is not a JWT: {token:?}"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_reads_a_pod_on_each_node_through_its_service() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "net-proxy", async |ns| {
        let nodes = only_real_nodes(ns).await?;
        wait_default_service_account(ns).await?;
        let services: Api<k8s_openapi::api::core::v1::Service> = ns.api();
        for (index, node) in nodes.iter().enumerate() {
            let name = format!("web-{index}");
            let pod = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "nginx:alpine",
                                    "ports": [{"containerPort": 80}]}],
                },
            });
            create_ready_pod(ns, &pod, TIMEOUT).await?;
            // A page only this Pod serves.
            exec(
                ns,
                &name,
                &["sh", "-c", "hostname > /usr/share/nginx/html/who"],
            )
            .await?;
            let service = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": {"app": name},
                         "ports": [{"name": "http", "port": 80, "targetPort": 80}]},
            });
            services
                .create(&PostParams::default(), &serde_json::from_value(service)?)
                .await
                .with_context(|| format!("creating Service {name}"))?;
        }
        let pods: Api<Pod> = ns.api();
        for index in 0..nodes.len() {
            let name = format!("web-{index}");
            let pod_ip = pods
                .get(&name)
                .await?
                .status
                .and_then(|s| s.pod_ip)
                .with_context(|| format!("{name} has no IP"))?;
            let path = format!(
                "/api/v1/namespaces/{}/services/http:{name}:80/proxy/who",
                ns.name
            );
            // Until the endpoints controller has published the Pod as the Service's endpoint.
            let body = eventually(
                format!("{name} ({pod_ip}) read through its Service"),
                TIMEOUT,
                || async {
                    let body = ns.kubectl(&["get", "--raw", &path]).await?;
                    Ok(Some(body))
                },
            )
            .await?;
            ensure!(
                body.trim() == name,
                "the Service {name} served {body:?}, not its Pod's page"
            );
        }
        Ok(())
    })
    .await
}
