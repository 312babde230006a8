//! kruise-rs installed as users install it (issue 58), on a bed of real nodes only with what a cluster
//! gives Pods that talk to the apiserver: the ServiceAccount admission plugin, the apiserver routing to
//! Service endpoints (`--enable-aggregator-routing=true`), and the real nodes' in-cluster network (a
//! kube-proxy per node, Pod ranges routed from the host, each node's containerd socket at the standard
//! path; see `kruise_testkit::realnode::kube_proxy` and `mountns`).
//!
//! The network, first:
//! - a Pod and a host-network Pod on each node reach the `kubernetes` Service at 10.0.0.1:443 (what
//!   in-cluster configuration dials) and have their ServiceAccount token mounted;
//! - the apiserver reads a Pod on each node through its Service (the service proxy dials the Pod's IP):
//!   the host reaches Pod IPs, which is what webhook calls through a Service need.
//!
//! Then the chart: kruise-manager's and kruise-daemon's images pushed under the chart's default names
//! (`kruise_testkit::realnode::kruise_images`: the debug build by default, `make image`'s archives with
//! `KRUISE_RS_IMAGE_DIR`, as `make test-install` does), `helm install` with the default values, and what a
//! user then sees: both manager replicas Ready from the image with one leader, the webhooks answered by
//! the Pods through their Service, kruise-daemon Ready on every node, seed 000 and seed 001 through it, a
//! ContainerRecreateRequest and an ImagePullJob served by the daemon Pods, the leader deleted mid-rollout
//! (the other replica finishes it, no Pod recreated; the takeover time is printed), `helm upgrade` with
//! no webhook outage a client can see, no request of the chart's ServiceAccounts refused (the apiserver's
//! audit log), and `helm uninstall` leaving CRDs and workloads.
//!
//! No simulated nodes: their Pods have made-up IPs, which the host would send off the machine.

use std::time::Duration;

/// The takeover lane: OpenKruise from its own chart and image, then `kubectl kruise takeover`; ignored
/// here (it needs `make openkruise`), run by `make test-takeover` on this binary's bed.
mod installed_takeover;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::installed_kit::{
    REAL_NODES, bed, lease_holder, only_real_nodes, system_diagnostics,
    wait_default_service_account,
};
use kruise_e2e::real_node_kit::{create_ready_pod, in_namespace_with_node_logs};
use kruise_testkit::control_plane::{CHART_DAEMON_SERVICE_ACCOUNT, CHART_SERVICE_ACCOUNT};
use kruise_testkit::installed::{
    self, CHART, DAEMON_SELECTOR, MANAGER_REPLICAS, MANAGER_SELECTOR, RELEASE, SYSTEM,
};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{TestBed, TestNamespace, eventually};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// Real containers start in about a second; generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Where the kubelet mounts a Pod's ServiceAccount token (the projected `kube-api-access-*` volume).
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// What a Go TLS server (the apiserver) answers to plain HTTP: proof that 10.0.0.1:443 is the apiserver.
const APISERVER_PLAIN_HTTP_ANSWER: &str = "Client sent an HTTP request to an HTTPS server";

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

/// From `helm install` to both manager replicas Ready: image pulls, certificate, leader election, on a
/// loaded machine.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
const WEBHOOK_SERVICE: &str = "kruise-webhook-service";

/// The manager replicas among `pods` whose `/metrics` (read through the apiserver's Pod proxy, on the
/// chart's metrics port) say they lead.
async fn leading_replicas(bed: &TestBed, pods: &[String]) -> anyhow::Result<Vec<String>> {
    let mut leading = Vec::new();
    for pod in pods {
        let path = format!("/api/v1/namespaces/{SYSTEM}/pods/{pod}:8080/proxy/metrics");
        let metrics = bed.plane.kubectl(&["get", "--raw", &path]).await?;
        let value = metrics
            .lines()
            .find_map(|line| line.strip_prefix("kruise_manager_leader "))
            .with_context(|| format!("{pod} reports no kruise_manager_leader"))?;
        if value.trim() == "1" {
            leading.push(pod.clone());
        }
    }
    Ok(leading)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installs_from_its_images_serves_fails_over_and_upgrades() -> anyhow::Result<()> {
    let bed = bed();
    in_namespace_with_node_logs(bed, "installed", async |ns| {
        match installed_walkthrough(bed, ns).await {
            Ok(()) => Ok(()),
            Err(error) => Err(error.context(system_diagnostics(bed).await)),
        }
    })
    .await
}

async fn installed_walkthrough(bed: &'static TestBed, ns: &TestNamespace) -> anyhow::Result<()> {
    use kruise_e2e::chart_kit::{helm_cli, seed_000, seed_001_pod};
    use kruise_testkit::realnode::kruise_images::Source;

    let nodes = only_real_nodes(ns).await?;
    wait_default_service_account(ns).await?;

    // 1. The images, under the chart's default names.
    let source = Source::from_env();
    let started = std::time::Instant::now();
    let images = tokio::task::block_in_place(|| bed.push_kruise_images(&source))?;
    for image in &images {
        eprintln!(
            "installed: pushed {} ({source:?}, {:.1} MiB compressed) in {:.1?}",
            image.reference,
            image.compressed_bytes as f64 / 1048576.0,
            started.elapsed()
        );
    }

    // 2. helm install with the default values; both manager replicas and a daemon per node Ready.
    let chart = installed::install(&bed.plane, images, REAL_NODES, INSTALL_TIMEOUT).await?;
    let (managers, daemons) = (&chart.managers, &chart.daemons);
    eprintln!(
        "installed: {} manager replicas and {} daemons Ready {:.1?} after helm install",
        managers.len(),
        daemons.len(),
        chart.ready_in
    );
    let mut daemon_nodes: Vec<String> = daemons
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    daemon_nodes.sort();
    ensure!(
        daemon_nodes == nodes,
        "kruise-daemon runs on {daemon_nodes:?}, not on every node {nodes:?}"
    );
    let manager_names: Vec<String> = managers
        .iter()
        .map(kruise_e2e::cloneset_kit::name)
        .collect();
    let holder = eventually(
        "the manager's Lease held by a manager Pod",
        TIMEOUT,
        || async {
            Ok(lease_holder(ns)
                .await?
                .filter(|holder| manager_names.contains(holder)))
        },
    )
    .await?;
    // Exactly one leader: the Lease's holder, and the only replica whose `kruise_manager_leader` is 1.
    eventually("exactly one manager replica leading", TIMEOUT, || async {
        let leading = leading_replicas(bed, &manager_names).await?;
        Ok((leading == [holder.clone()]).then_some(()))
    })
    .await?;

    // 3. The webhooks go through the Service to the Pods' IPs.
    webhooks_served_through_the_service(ns, managers).await?;

    // 4. Seed 000 and seed 001 through it. The SidecarSet and the Pod are created back to back, as the
    //    seed's steps are: the webhook decides on the SidecarSet it was just told about.
    let sample_uids = seed_000(ns, TIMEOUT).await?;
    let sidecarset = format!("logtail-{}", ns.name);
    ns.apply(&serde_yaml::to_string(
        &kruise_e2e::sidecarset_kit::logtail(&sidecarset, &ns.name, json!({}))?,
    )?)
    .await?;
    seed_001_pod(ns, "test-pod", TIMEOUT).await?;

    // 5. kruise-daemon's work: a container recreated in place, an image pulled on every node.
    tokio::try_join!(daemon_recreates_a_container(ns), daemon_pulls_an_image(ns))?;

    // The controllers started only once the webhooks could be called (as OpenKruise's, after its
    // `webhook.WaitReady`): none of their writes met a webhook whose CA the apiserver did not have yet.
    for pod in &manager_names {
        let log = bed.plane.kubectl(&["-n", SYSTEM, "logs", pod]).await?;
        let refused: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("certificate signed by unknown authority"))
            .collect();
        ensure!(
            refused.is_empty(),
            "{pod} wrote before its webhooks could be called: {refused:#?}"
        );
    }

    // 6. Failover: the leader's Pod deleted mid-rollout.
    failover_mid_rollout(ns, &holder, &sample_uids).await?;

    // 7. helm upgrade with changed values: the Deployment rolls; Pods created meanwhile are all injected.
    upgrade_without_webhook_outage(bed, ns, &chart.manager_image).await?;

    // 8. The chart's RBAC as its Pods used it, from the apiserver's audit log: nothing the manager or a
    //    daemon asked was refused.
    for user in [CHART_SERVICE_ACCOUNT, CHART_DAEMON_SERVICE_ACCOUNT] {
        let requests = kruise_e2e::chart_kit::audited(bed, user)?;
        let refused: Vec<_> = requests
            .iter()
            .filter(|(_, code, _)| *code == 403)
            .collect();
        eprintln!(
            "installed: {} requests of {user}, {} refused",
            requests.len(),
            refused.len()
        );
        ensure!(
            !requests.is_empty(),
            "the audit log has no request of {user}"
        );
        ensure!(
            refused.is_empty(),
            "the chart's RBAC refused {user}: {refused:#?}"
        );
    }

    // 9. helm uninstall: the manager and daemon go; CRDs, workloads and their Pods stay.
    helm_cli(bed, &["uninstall", RELEASE])?;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(ns.client.clone());
    for crd in [
        "clonesets",
        "sidecarsets",
        "containerrecreaterequests",
        "imagepulljobs",
    ] {
        crds.get(&format!("{crd}.apps.kruise.io"))
            .await
            .with_context(|| format!("CRD {crd} after helm uninstall"))?;
    }
    eventually("the manager's and daemon's Pods gone", TIMEOUT, || async {
        let left = installed::system_pods(&ns.client, MANAGER_SELECTOR)
            .await?
            .len()
            + installed::system_pods(&ns.client, DAEMON_SELECTOR)
                .await?
                .len();
        Ok((left == 0).then_some(()))
    })
    .await?;
    let api: Api<Pod> = ns.api();
    let sample = kruise_e2e::cloneset_kit::active_pods(&api, "app=sample").await?;
    ensure!(
        sample.len() == 4 && sample.iter().all(kruise_e2e::is_ready),
        "after uninstall: {}",
        kruise_e2e::cloneset_kit::describe(&sample)
    );
    ns.kubectl(&["get", "cloneset", "sample"]).await?;
    ensure!(
        kruise_e2e::is_ready(&api.get("test-pod").await?),
        "test-pod not Ready after uninstall"
    );
    Ok(())
}

/// Every webhook of the chart names the Service (no URL) with a CA bundle, and the Service's endpoints are
/// the manager Pods' IPs: the apiserver's calls can reach nothing else.
async fn webhooks_served_through_the_service(
    ns: &TestNamespace,
    managers: &[Pod],
) -> anyhow::Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
    eventually("the webhooks' CA bundles", TIMEOUT, || async {
        // The chart's two configurations (their webhooks `*.kb.io`, as OpenKruise's).
        let mutating_hooks = mutating
            .get("kruise-mutating-webhook-configuration")
            .await?
            .webhooks
            .into_iter()
            .flatten()
            .map(|w| (w.name, w.client_config));
        let validating_hooks = validating
            .get("kruise-validating-webhook-configuration")
            .await?
            .webhooks
            .into_iter()
            .flatten()
            .map(|w| (w.name, w.client_config));
        let ours: Vec<_> = mutating_hooks.chain(validating_hooks).collect();
        for (name, client) in &ours {
            let service = client.service.as_ref();
            ensure!(
                client.url.is_none()
                    && service.is_some_and(|s| s.name == WEBHOOK_SERVICE && s.namespace == SYSTEM),
                "webhook {name} is not served through {SYSTEM}/{WEBHOOK_SERVICE}: {client:?}"
            );
        }
        let bundled = ours
            .iter()
            .all(|(_, c)| c.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()));
        Ok((!ours.is_empty() && bundled).then_some(()))
    })
    .await?;
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(ns.client.clone(), SYSTEM);
    let mut want: Vec<String> = managers
        .iter()
        .filter_map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .collect();
    want.sort();
    eventually(
        "the webhook Service's endpoints are the manager Pods",
        TIMEOUT,
        || async {
            let list = slices
                .list(
                    &ListParams::default()
                        .labels(&format!("kubernetes.io/service-name={WEBHOOK_SERVICE}")),
                )
                .await?;
            let mut ready: Vec<String> = list
                .items
                .iter()
                .flat_map(|slice| slice.endpoints.iter())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| e.addresses.iter().cloned())
                .collect();
            ready.sort();
            Ok((ready == want).then_some(()))
        },
    )
    .await
}

/// A ContainerRecreateRequest on a seed 000 Pod completes (only a kruise-daemon executes one, and only
/// the chart's run here): the same Pod, its container restarted once more.
async fn daemon_recreates_a_container(ns: &TestNamespace) -> anyhow::Result<()> {
    use kruise_api::containerrecreaterequest::{self as crr, ContainerRecreateRequest};
    use kruise_e2e::cloneset_kit::{active_pods, restarts, uid};
    let pods: Api<Pod> = ns.api();
    let before = active_pods(&pods, "app=sample").await?;
    let target = before.first().context("no sample Pod")?;
    let doc = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "recreate-nginx"},
        "spec": {"podName": kruise_e2e::cloneset_kit::name(target), "containers": [{"name": "nginx"}],
                 "strategy": {"minStartedSeconds": 1}},
    });
    let api: Api<ContainerRecreateRequest> = ns.api();
    api.create(&PostParams::default(), &serde_json::from_value(doc)?)
        .await
        .context("creating the ContainerRecreateRequest")?;
    eventually(
        "ContainerRecreateRequest recreate-nginx Completed by kruise-daemon",
        TIMEOUT,
        || async {
            let request = api.get("recreate-nginx").await?;
            Ok((request.phase() == crr::PHASE_COMPLETED).then_some(()))
        },
    )
    .await?;
    let after = pods.get(&kruise_e2e::cloneset_kit::name(target)).await?;
    ensure!(uid(&after) == uid(target), "the Pod was recreated");
    ensure!(
        restarts(&after) == restarts(target) + 1,
        "nginx restarted {} times, {} before",
        restarts(&after),
        restarts(target)
    );
    Ok(())
}

/// An ImagePullJob for every real node succeeds: each node's kruise-daemon pulled the image through its
/// NodeImage (ImagePullJobGate is on by default in the chart, as in OpenKruise's).
async fn daemon_pulls_an_image(ns: &TestNamespace) -> anyhow::Result<()> {
    use kruise_api::imagepulljob::v1beta1::ImagePullJob;
    ns.apply(&format!(
        r#"
apiVersion: apps.kruise.io/v1beta1
kind: ImagePullJob
metadata:
  name: pull-nginx
spec:
  image: nginx:1.25
  parallelism: {REAL_NODES}
  selector:
    matchLabels:
      {REAL_NODE_LABEL}: "true"
  pullPolicy:
    timeoutSeconds: 60
    backoffLimit: 1
  completionPolicy:
    type: Always
"#
    ))
    .await?;
    let api: Api<ImagePullJob> = ns.api();
    let status = eventually("ImagePullJob pull-nginx completed", TIMEOUT, || async {
        let status = api.get("pull-nginx").await?.status;
        Ok(status.filter(|s| s.completion_time.is_some()))
    })
    .await?;
    ensure!(
        (status.desired, status.succeeded, status.failed)
            == (REAL_NODES as i32, REAL_NODES as i32, 0),
        "pull-nginx: desired {} succeeded {} failed {}",
        status.desired,
        status.succeeded,
        status.failed
    );
    Ok(())
}

/// The sample CloneSet at 4 replicas rolls to a new image one Pod at a time; once the first Pod is
/// updated the leader's Pod is deleted. The other replica takes the Lease and finishes: every Pod
/// updated in place (same UIDs). Prints the time from the deletion to the takeover and to the end.
async fn failover_mid_rollout(
    ns: &TestNamespace,
    leader_pod: &str,
    sample_uids: &[String],
) -> anyhow::Result<()> {
    use kruise_e2e::cloneset_kit::{active_pods, describe, set_image, spec_image, uid};
    let pods: Api<Pod> = ns.api();
    ns.kubectl(&[
        "patch",
        "cloneset",
        "sample",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":4,"minReadySeconds":2,"updateStrategy":{"maxUnavailable":1}}}"#,
    ])
    .await?;
    let before = eventually("sample: 4 Pods Ready", TIMEOUT, || async {
        let list = active_pods(&pods, "app=sample").await?;
        Ok((list.len() == 4 && list.iter().all(kruise_e2e::is_ready)).then_some(list))
    })
    .await?;
    let uids: Vec<String> = before.iter().map(uid).collect();
    ensure!(
        sample_uids.iter().all(|u| uids.contains(u)),
        "the seed's Pods were replaced: {}",
        describe(&before)
    );
    const NEXT: &str = "nginx:1.23.1";
    set_image(ns, "sample", NEXT).await?;
    eventually("the rollout under way", TIMEOUT, || async {
        let list = active_pods(&pods, "app=sample").await?;
        let updated = list
            .iter()
            .filter(|p| spec_image(p).as_deref() == Some(NEXT))
            .count();
        Ok((updated >= 1).then_some(()))
    })
    .await?;
    let system_pods_api: Api<Pod> = Api::namespaced(ns.client.clone(), SYSTEM);
    let deleted = std::time::Instant::now();
    system_pods_api
        .delete(leader_pod, &Default::default())
        .await
        .with_context(|| format!("deleting the leader's Pod {leader_pod}"))?;
    let new_leader = eventually("another manager Pod takes the Lease", TIMEOUT, || async {
        Ok(lease_holder(ns)
            .await?
            .filter(|holder| holder != leader_pod))
    })
    .await?;
    let takeover = deleted.elapsed();
    let done = eventually(
        "sample rolled to the new image in place",
        TIMEOUT,
        || async {
            let list = active_pods(&pods, "app=sample").await?;
            let finished = list.len() == 4
                && list.iter().all(|p| {
                    kruise_e2e::is_ready(p)
                        && spec_image(p).as_deref() == Some(NEXT)
                        && uids.contains(&uid(p))
                });
            Ok(finished.then_some(list))
        },
    )
    .await?;
    eprintln!(
        "installed: failover: leader Pod {leader_pod} deleted mid-rollout; {new_leader} held the Lease {:.1?} later; \
         the rollout finished {:.1?} after the deletion, no Pod recreated ({})",
        takeover,
        deleted.elapsed(),
        describe(&done)
    );
    Ok(())
}

/// `helm upgrade` with a changed value rolls the manager Deployment (new Pods serve before old ones
/// stop); Pods created all the while (server-side dry runs, which go through every admission webhook) all
/// get the SidecarSet's container: no webhook outage a client can see.
async fn upgrade_without_webhook_outage(
    bed: &'static TestBed,
    ns: &TestNamespace,
    manager_image: &kruise_testkit::realnode::kruise_images::Pushed,
) -> anyhow::Result<()> {
    use kruise_e2e::chart_kit::helm_cli;
    let old: Vec<String> = installed::system_pods(&ns.client, MANAGER_SELECTOR)
        .await?
        .iter()
        .map(kruise_e2e::cloneset_kit::name)
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (api, stop) = (ns.api::<Pod>(), stop.clone());
        tokio::spawn(async move {
            let mut outcomes: Vec<Result<Vec<String>, String>> = Vec::new();
            let params = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let mut index = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let pod = kruise_e2e::sidecarset_kit::test_pod(
                    &format!("during-upgrade-{index}"),
                    json!({"app": "nginx"}),
                );
                let outcome = match serde_json::from_value::<Pod>(pod) {
                    Ok(pod) => api
                        .create(&params, &pod)
                        .await
                        .map(|created| kruise_e2e::container_names(&created))
                        .map_err(|error| format!("{error}")),
                    Err(error) => Err(format!("{error}")),
                };
                outcomes.push(outcome);
                index += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            outcomes
        })
    };
    let started = std::time::Instant::now();
    let upgraded = helm_cli(
        bed,
        &[
            "upgrade",
            RELEASE,
            CHART,
            "--reuse-values",
            "--set",
            "manager.log.level=3",
        ],
    );
    let rolled = match upgraded {
        Ok(_) => {
            eventually("the manager Deployment rolled", INSTALL_TIMEOUT, || async {
                let api: Api<Pod> = Api::namespaced(ns.client.clone(), SYSTEM);
                let all = api
                    .list(&ListParams::default().labels(MANAGER_SELECTOR))
                    .await?
                    .items;
                let replaced = all
                    .iter()
                    .all(|p| !old.contains(&kruise_e2e::cloneset_kit::name(p)));
                Ok(replaced.then_some(()))
            })
            .await
        }
        Err(error) => Err(error),
    };
    let ready = match rolled {
        Ok(()) => installed::wait_ready(
            &ns.client,
            MANAGER_SELECTOR,
            MANAGER_REPLICAS,
            manager_image,
            TIMEOUT,
        )
        .await
        .map(|_| ()),
        Err(error) => Err(error),
    };
    // A few more creates against the new replicas only.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let outcomes = creator.await.context("the creating task")?;
    ready?;
    let failed: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    let uninjected = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok())
        .filter(|names| !names.iter().any(|n| n == "logtail"))
        .count();
    eprintln!(
        "installed: helm upgrade rolled both manager replicas in {:.1?}; {} Pod creates meanwhile, {} refused, {} without the sidecar",
        started.elapsed(),
        outcomes.len(),
        failed.len(),
        uninjected
    );
    ensure!(
        outcomes.len() >= 10,
        "only {} creates during the upgrade",
        outcomes.len()
    );
    ensure!(
        failed.is_empty(),
        "creates refused during the upgrade: {failed:?}"
    );
    ensure!(
        uninjected == 0,
        "{uninjected} of {} Pods created during the upgrade were not injected",
        outcomes.len()
    );
    Ok(())
}
