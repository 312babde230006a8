//! kruise-rs installed with its Helm chart on the local control plane: `helm install`, the manager running
//! with the chart's ServiceAccount identity (a TokenRequest token), the chart's arguments and environment
//! (out of cluster: no container runs here, so the process stands in for the Deployment's Pod and serves
//! the chart's webhook configurations at https://127.0.0.1), seed 000's CloneSet walkthrough and seed 001's
//! SidecarSet injection through it, `helm upgrade` with changed values rolling the manager, and `helm
//! uninstall` leaving every CloneSet, Pod and CRD in place. Then the chart's RBAC is checked against the
//! apiserver's audit log of every request that identity made: no request was refused (nothing missing),
//! and every granted (group, resource, verb) was used or is listed in `NOT_EXERCISED` with the code path
//! that needs it (nothing extra).

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_e2e::chart_kit::{CHART, Triple, audited, helm_cli, seed_000, seed_001_pod};
use kruise_e2e::cloneset_kit::{active_pods, describe, uid};
use kruise_e2e::sidecarset_kit::{logtail, test_pod};
use kruise_e2e::{is_ready, wait_injected_on_dry_run, yaml_documents};
use kruise_testkit::control_plane::{CHART_SERVICE_ACCOUNT, kubeconfig, plain_http_get};
use kruise_testkit::process::{Process, free_port};
use kruise_testkit::{TestBed, testbed, until};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const RELEASE: &str = "kruise-rs";
const NAMESPACE: &str = "kruise-system";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Granted by the chart, needed by code paths this scenario does not reach (each names the path).
const NOT_EXERCISED: &[(&str, &str, &str, &str)] = &[
    (
        "apps.kruise.io",
        "imagelistpulljobs",
        "create",
        "an AdvancedCronJob with an imageListPullJobTemplate starting a run (tests/imagepulljob.rs)",
    ),
    (
        "apps.kruise.io",
        "imagelistpulljobs",
        "delete",
        "an AdvancedCronJob pruning its ImageListPullJob runs past the history limits",
    ),
    (
        "",
        "configmaps",
        "create",
        "container-launch-priority-controller creating an ordered Pod's barrier ConfigMap (no such Pod here; tests/real_node.rs)",
    ),
    (
        "",
        "configmaps",
        "patch",
        "container-launch-priority-controller releasing a priority in a barrier ConfigMap",
    ),
    (
        "apps.kruise.io",
        "nodeimages",
        "get",
        "kruise-daemon's image puller reading its node's NodeImage (no daemon runs here)",
    ),
    (
        "apps.kruise.io",
        "nodeimages",
        "list",
        "kruise-daemon's image puller watching its node's NodeImage",
    ),
    (
        "apps.kruise.io",
        "nodeimages",
        "watch",
        "kruise-daemon's image puller watching its node's NodeImage",
    ),
    (
        "apps.kruise.io",
        "nodeimages/status",
        "patch",
        "kruise-daemon's image puller reporting its pulls",
    ),
    (
        "apps.kruise.io",
        "nodepodprobes/status",
        "patch",
        "kruise-daemon's prober reporting probe results",
    ),
    (
        "apps.kruise.io",
        "nodepodprobes",
        "patch",
        "the NodePodProbe controller writing a PodProbeMarker's probes into a node's NodePodProbe",
    ),
    (
        "apps.kruise.io",
        "nodepodprobes",
        "delete",
        "the NodePodProbe controller deleting the NodePodProbe of a Node that is gone",
    ),
    (
        "apps.kruise.io",
        "podprobemarkers",
        "patch",
        "PodProbeMarker: its finalizer",
    ),
    (
        "apps.kruise.io",
        "podprobemarkers/status",
        "patch",
        "PodProbeMarker status (matchedPods)",
    ),
    (
        "",
        "configmaps",
        "get",
        "the SidecarSet webhook reading the kruise-configuration patchPodMetadata whitelist",
    ),
    (
        "policy.kruise.io",
        "podunavailablebudgets",
        "get",
        "the Pod webhook reading a PodUnavailableBudget before a guarded disruption",
    ),
    (
        "policy.kruise.io",
        "podunavailablebudgets/status",
        "patch",
        "PodUnavailableBudget status (controller) and admitted disruptions (webhook)",
    ),
    (
        "apps",
        "deployments",
        "get",
        "a PodUnavailableBudget counting a Deployment's replicas",
    ),
    (
        "apps",
        "replicasets",
        "get",
        "a PodUnavailableBudget counting a ReplicaSet's replicas",
    ),
    (
        "apps",
        "statefulsets",
        "get",
        "a PodUnavailableBudget counting a StatefulSet's replicas",
    ),
    (
        "apps.kruise.io",
        "workloadspreads",
        "get",
        "the Pod webhook reading a WorkloadSpread afresh after a conflict",
    ),
    (
        "apps.kruise.io",
        "workloadspreads/status",
        "patch",
        "WorkloadSpread status (controller) and admitted Pods (webhook)",
    ),
    (
        "batch",
        "jobs",
        "get",
        "a WorkloadSpread over a Job reading its parallelism",
    ),
    (
        "apps.kruise.io",
        "ephemeraljobs",
        "patch",
        "EphemeralJob: adding and removing its finalizer",
    ),
    (
        "apps.kruise.io",
        "ephemeraljobs",
        "delete",
        "EphemeralJob ttlSecondsAfterFinished",
    ),
    (
        "apps.kruise.io",
        "ephemeraljobs/status",
        "patch",
        "EphemeralJob status",
    ),
    (
        "apps.kruise.io",
        "persistentpodstates",
        "create",
        "PersistentPodState generated for an annotated StatefulSet",
    ),
    (
        "apps.kruise.io",
        "persistentpodstates",
        "patch",
        "PersistentPodState generated: spec following the StatefulSet's annotations",
    ),
    (
        "apps.kruise.io",
        "persistentpodstates",
        "delete",
        "PersistentPodState generated: auto-generation annotation removed",
    ),
    (
        "apps.kruise.io",
        "persistentpodstates/status",
        "patch",
        "PersistentPodState status (records of ready Pods)",
    ),
    (
        "",
        "pods/ephemeralcontainers",
        "patch",
        "EphemeralJob injecting its ephemeral containers",
    ),
    (
        "apps.kruise.io",
        "containerrecreaterequests",
        "patch",
        "ContainerRecreateRequest: its active label, statuses annotation and unready-acquired finalizer",
    ),
    (
        "apps.kruise.io",
        "containerrecreaterequests",
        "delete",
        "ContainerRecreateRequest ttlSecondsAfterFinished",
    ),
    (
        "apps.kruise.io",
        "containerrecreaterequests/status",
        "patch",
        "ContainerRecreateRequest completed by the manager",
    ),
    (
        "apps.kruise.io",
        "clonesets",
        "get",
        "claim::Recheck: re-reading a CloneSet before adopting orphans",
    ),
    (
        "apps.kruise.io",
        "clonesets",
        "create",
        "UnitedDeployment creating a CloneSet subset",
    ),
    (
        "apps.kruise.io",
        "clonesets",
        "patch",
        "CloneSet trimming scaleStrategy.podsToDelete; UnitedDeployment updating a subset",
    ),
    (
        "apps.kruise.io",
        "clonesets",
        "delete",
        "UnitedDeployment deleting a CloneSet subset",
    ),
    (
        "apps.kruise.io",
        "statefulsets",
        "get",
        "claim::Recheck before an Advanced StatefulSet adopts orphans",
    ),
    (
        "apps.kruise.io",
        "statefulsets",
        "create",
        "UnitedDeployment creating an Advanced StatefulSet subset",
    ),
    (
        "apps.kruise.io",
        "statefulsets",
        "patch",
        "UnitedDeployment updating an Advanced StatefulSet subset",
    ),
    (
        "apps.kruise.io",
        "statefulsets",
        "delete",
        "UnitedDeployment deleting an Advanced StatefulSet subset",
    ),
    (
        "apps.kruise.io",
        "daemonsets",
        "get",
        "claim::Recheck before an Advanced DaemonSet adopts orphans",
    ),
    (
        "apps.kruise.io",
        "sidecarsets",
        "get",
        "claim::Recheck before a SidecarSet adopts revisions",
    ),
    (
        "apps.kruise.io",
        "uniteddeployments",
        "get",
        "claim::Recheck before a UnitedDeployment adopts subsets",
    ),
    (
        "apps.kruise.io",
        "broadcastjobs",
        "delete",
        "BroadcastJob ttlSecondsAfterFinished",
    ),
    (
        "storage.k8s.io",
        "storageclasses",
        "get",
        "Advanced StatefulSet webhook: an update resizing a claim template that names its StorageClass",
    ),
    (
        "storage.k8s.io",
        "storageclasses",
        "list",
        "Advanced StatefulSet webhook: an update resizing a claim template of the default StorageClass",
    ),
    (
        "apps.kruise.io",
        "statefulsets/status",
        "patch",
        "Advanced StatefulSet status",
    ),
    (
        "apps.kruise.io",
        "daemonsets/status",
        "patch",
        "Advanced DaemonSet status",
    ),
    (
        "apps.kruise.io",
        "uniteddeployments/status",
        "patch",
        "UnitedDeployment status",
    ),
    (
        "apps.kruise.io",
        "broadcastjobs/status",
        "patch",
        "BroadcastJob status",
    ),
    (
        "apps.kruise.io",
        "advancedcronjobs/status",
        "patch",
        "AdvancedCronJob status",
    ),
    (
        "apps.kruise.io",
        "broadcastjobs",
        "create",
        "AdvancedCronJob runs from a broadcastJobTemplate",
    ),
    (
        "batch",
        "jobs",
        "create",
        "AdvancedCronJob runs from a jobTemplate",
    ),
    (
        "batch",
        "jobs",
        "delete",
        "AdvancedCronJob history limits and the Replace concurrency policy",
    ),
    (
        "",
        "pods",
        "get",
        "SidecarSet re-reading a Pod after a write conflict",
    ),
    (
        "",
        "pods",
        "list",
        "cache::InitialList::Paged: the Pod cache lists in pages where the apiserver refuses a streaming list (WatchList off)",
    ),
    (
        "",
        "pods",
        "delete",
        "scale-in, ReCreate updates, failed DaemonSet/BroadcastJob Pods",
    ),
    ("", "pods/resize", "patch", "in-place cpu/memory changes"),
    (
        "",
        "persistentvolumeclaims",
        "create",
        "volumeClaimTemplates of CloneSet and Advanced StatefulSet",
    ),
    (
        "",
        "persistentvolumeclaims",
        "patch",
        "claim retention owner references, claim resize",
    ),
    (
        "",
        "persistentvolumeclaims",
        "delete",
        "CloneSet claims of deleted Pods",
    ),
    (
        "",
        "namespaces",
        "get",
        "the Pod webhook reading a Namespace its cache has not seen yet",
    ),
    ("", "nodes", "get", "CloneSet reading a Pod's Node"),
    (
        "apps",
        "controllerrevisions",
        "get",
        "a revision name taken (409); a SidecarSet Pod pinning a revision",
    ),
    (
        "apps",
        "controllerrevisions",
        "patch",
        "a revision renumbered on rollback",
    ),
    (
        "apps",
        "controllerrevisions",
        "delete",
        "revision history pruning",
    ),
    (
        "apps",
        "statefulsets",
        "create",
        "UnitedDeployment creating a StatefulSet subset",
    ),
    (
        "apps",
        "statefulsets",
        "patch",
        "UnitedDeployment updating a StatefulSet subset",
    ),
    (
        "apps",
        "statefulsets",
        "delete",
        "UnitedDeployment deleting a StatefulSet subset",
    ),
    (
        "apps",
        "deployments",
        "create",
        "UnitedDeployment creating a Deployment subset",
    ),
    (
        "apps",
        "deployments",
        "patch",
        "UnitedDeployment updating a Deployment subset",
    ),
    (
        "apps",
        "deployments",
        "delete",
        "UnitedDeployment deleting a Deployment subset",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "a repeated Event (series)",
    ),
    (
        "",
        "secrets",
        "create",
        "the first manager of a cluster creating the certificate Secret",
    ),
    (
        "",
        "secrets",
        "patch",
        "renewing the certificate in the Secret",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "create",
        "the first manager of a cluster creating the Lease",
    ), // Image pre-pulling, on by default as in OpenKruise's chart (ImagePullJobGate=true): no ImagePullJob
    // runs here (no kruise-daemon); tests/installed.rs and tests/imagepulljob.rs run them.
    (
        "apps.kruise.io",
        "nodeimages",
        "patch",
        "an ImagePullJob's image written into the NodeImages of its nodes",
    ),
    (
        "apps.kruise.io",
        "nodeimages",
        "delete",
        "the NodeImage of a Node that is gone",
    ),
    (
        "apps.kruise.io",
        "imagepulljobs",
        "create",
        "an ImageListPullJob's ImagePullJobs; a rollout's image predownload",
    ),
    (
        "apps.kruise.io",
        "imagepulljobs",
        "patch",
        "the ImagePullJob finalizer",
    ),
    (
        "apps.kruise.io",
        "imagepulljobs",
        "delete",
        "ImagePullJob ttlSecondsAfterFinished; a rollout's predownload jobs once it is over",
    ),
    (
        "apps.kruise.io",
        "imagepulljobs/status",
        "patch",
        "ImagePullJob status",
    ),
    (
        "apps.kruise.io",
        "imagelistpulljobs/status",
        "patch",
        "ImageListPullJob status",
    ),
    (
        "",
        "secrets",
        "delete",
        "an ImagePullJob's pull secrets copied into kruise-daemon-config, deleted with the job",
    ),
    (
        "",
        "namespaces",
        "create",
        "kruise-daemon-config created for copied pull secrets when the chart's is missing",
    ),
];

/// The Deployment's manager container as the installed release renders it.
fn chart_container(bed: &TestBed) -> anyhow::Result<Value> {
    let manifest = helm_cli(bed, &["get", "manifest", RELEASE])?;
    let objects = yaml_documents(&manifest)?;
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("the release has no Deployment")?;
    Ok(deployment["spec"]["template"]["spec"]["containers"][0].clone())
}

/// A token of the chart's ServiceAccount, as the kubelet would mount it.
async fn service_account_token(bed: &TestBed) -> anyhow::Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(bed.plane.client().await?, NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let issued = api
        .create_token_request("kruise-manager", &PostParams::default(), &request)
        .await
        .context("TokenRequest for the chart's ServiceAccount")?;
    issued
        .status
        .map(|s| s.token)
        .context("TokenRequest answered without a token")
}

struct Running {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Starts kruise-manager as the chart's Pod would run it: the container's arguments and environment
/// (fieldRefs resolved as the kubelet does), the ServiceAccount's token; only the listen addresses move
/// to loopback and the shutdown delay is 0 (no endpoint to drain).
async fn start_chart_manager(bed: &TestBed, name: &str) -> anyhow::Result<Running> {
    let container = chart_container(bed)?;
    let health = free_port()?;
    let mut args: Vec<String> = Vec::new();
    for arg in container["args"].as_array().context("container args")? {
        let arg = arg.as_str().context("an argument that is not a string")?;
        if arg.starts_with("--metrics-addr=") {
            args.push(format!("--metrics-addr=127.0.0.1:{}", free_port()?));
        } else if arg.starts_with("--health-probe-addr=") {
            args.push(format!("--health-probe-addr=127.0.0.1:{health}"));
        } else if arg.starts_with("--webhook-shutdown-delay=") {
            // No Service routes to this process (the webhooks name its URL): nothing to drain.
            args.push("--webhook-shutdown-delay=0s".into());
        } else {
            args.push(arg.to_string());
        }
    }
    let token = service_account_token(bed).await?;
    let kubeconfig_path = bed.plane.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kubeconfig_path,
        kubeconfig(&bed.plane.server_url(), bed.plane.ca_pem(), &token, name),
    )?;
    args.extend([
        format!("--kubeconfig={}", kubeconfig_path.display()),
        "--webhook-bind-address=127.0.0.1".into(),
    ]);
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().context("container env")? {
        let key = var["name"].as_str().context("env name")?.to_string();
        let value = match (
            var["value"].as_str(),
            var["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Some(value), _) => value.to_string(),
            (None, Some("metadata.namespace")) => NAMESPACE.to_string(),
            (None, Some("metadata.name")) => name.to_string(),
            other => anyhow::bail!("env {key}: cannot resolve {other:?}"),
        };
        env.push((key, value));
    }
    let env_refs: Vec<(&str, &Path)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), Path::new(v.as_str())))
        .collect();
    let log = bed.plane.dir().join(format!("{name}.log"));
    let process = Process::spawn_with_env(
        name,
        &kruise_testkit::manager::binary()?,
        &args,
        &env_refs,
        &log,
    )?;
    bed.plane.adopt(process);
    until(format!("{name} ready"), TIMEOUT, || async move {
        Ok(plain_http_get(health, "/readyz").await.is_ok())
    })
    .await
    .with_context(|| kruise_testkit::process::tail(&log, 40))?;
    Ok(Running {
        name: name.to_string(),
        args,
        env,
    })
}

/// Waits until the leader has pointed the chart's Pod webhook at `port` with a CA bundle.
async fn wait_webhook_routed(bed: &TestBed, port: u16) -> anyhow::Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(bed.plane.client().await?);
    let want = format!("https://127.0.0.1:{port}/mutate-pod");
    until(format!("mpod.kb.io routed to {want}"), TIMEOUT, || {
        let (api, want) = (api.clone(), want.clone());
        async move {
            let config = api.get("kruise-mutating-webhook-configuration").await?;
            Ok(config.webhooks.unwrap_or_default().iter().any(|w| {
                w.name == "mpod.kb.io"
                    && w.client_config.url.as_deref() == Some(want.as_str())
                    && w.client_config.ca_bundle.is_some()
            }))
        }
    })
    .await
}

/// Every (group, resource[/subresource], verb) the chart grants (resourceNames aside).
fn granted(manifest: &[Value]) -> anyhow::Result<BTreeSet<Triple>> {
    let mut out = BTreeSet::new();
    for role in manifest
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        for rule in role["rules"].as_array().context("rules")? {
            let list = |field: &str| -> anyhow::Result<Vec<String>> {
                Ok(rule[field]
                    .as_array()
                    .with_context(|| format!("rule without {field}: {rule}"))?
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect())
            };
            for group in list("apiGroups")? {
                for resource in list("resources")? {
                    for verb in list("verbs")? {
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The chart's FlowSchema takes the manager's requests: the apiserver names the FlowSchema that
/// classified a request in the `X-Kubernetes-PF-FlowSchema-UID` response header.
async fn flow_schema_classifies_the_manager(bed: &TestBed) -> anyhow::Result<()> {
    let schemas: Api<FlowSchema> = Api::all(bed.plane.client().await?);
    let schema = schemas
        .get("kruise-manager")
        .await
        .context("the chart's FlowSchema")?;
    ensure!(
        schema
            .spec
            .as_ref()
            .map(|s| s.priority_level_configuration.name.as_str())
            == Some("kruise-manager"),
        "{schema:?}"
    );
    let token = service_account_token(bed).await?;
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig(
        &bed.plane.server_url(),
        bed.plane.ca_pem(),
        &token,
        "flow-check",
    ))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;
    let request = http::Request::get("/apis/apps.kruise.io/v1beta1/clonesets?limit=1")
        .body(kube::client::Body::empty())?;
    let response = client.send(request).await?;
    let classified = response
        .headers()
        .get("X-Kubernetes-PF-FlowSchema-UID")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    ensure!(
        response.status().is_success() && classified == schema.metadata.uid,
        "a request of the chart's ServiceAccount answered {} classified by {classified:?}, \
         not by the chart's FlowSchema {:?}",
        response.status(),
        schema.metadata.uid
    );
    Ok(())
}

#[tokio::test]
async fn helm_install_upgrade_uninstall_with_the_charts_identity() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("install").await?;
    ns.run(async {
        // 1. helm install: the chart's objects, the CRDs already present are kept.
        // The apiserver reaches the manager (a process on this host, no Service here) at
        // https://127.0.0.1:PORT: the chart's URL form, so the chart and the manager agree on every field.
        let webhook_port = free_port()?;
        let port = format!("manager.webhook.port={webhook_port}");
        let out = helm_cli(
            bed,
            &["install", RELEASE, CHART, "--set", "webhookConfiguration.host=127.0.0.1", "--set", &port],
        )?;
        ensure!(out.contains("STATUS: deployed"), "{out}");
        let installed = yaml_documents(&helm_cli(bed, &["get", "manifest", RELEASE])?)?;
        let grants = granted(&installed)?;

        // 2. The manager as the chart runs it, the chart's webhooks routed to it.
        let first = start_chart_manager(bed, "chart-manager-0").await?;
        ensure!(first.args.contains(&"--enable-leader-election".to_string()), "{:?}", first.args);
        ensure!(
            first.env.contains(&("WEBHOOK_HOST".into(), "127.0.0.1".into()))
                && first.env.contains(&("WEBHOOK_PORT".into(), webhook_port.to_string())),
            "{:?}",
            first.env
        );
        wait_webhook_routed(bed, webhook_port).await?;
        flow_schema_classifies_the_manager(bed).await?;

        // 3. Seed 000 and seed 001 through it.
        let cloneset_uids = seed_000(&ns, TIMEOUT).await?;
        let sidecarset = format!("logtail-{}", ns.name);
        ns.apply(&serde_yaml::to_string(&logtail(&sidecarset, &ns.name, json!({}))?)?)
            .await?;
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &test_pod("dry-run", json!({"app": "nginx"})),
            TIMEOUT,
            &["logtail", "nginx"],
        )
        .await?;
        seed_001_pod(&ns, "test-pod", TIMEOUT).await?;

        // 4. helm upgrade with changed values: the Deployment's template changes (it rolls); the
        // replacement manager runs the new arguments and injects the next Pod.
        let hash = |objects: &[Value]| -> Option<String> {
            objects.iter().find(|o| o["kind"] == "Deployment").and_then(|d| {
                d["spec"]["template"]["metadata"]["annotations"]["kruise-rs.io/settings-hash"]
                    .as_str()
                    .map(String::from)
            })
        };
        helm_cli(
            bed,
            &["upgrade", RELEASE, CHART, "--reuse-values", "--set", "manager.log.level=4"],
        )?;
        let upgraded = yaml_documents(&helm_cli(bed, &["get", "manifest", RELEASE])?)?;
        ensure!(hash(&installed) != hash(&upgraded), "the upgrade does not roll the Deployment");
        bed.plane.stop_process(&first.name, false);
        let second = start_chart_manager(bed, "chart-manager-1").await?;
        ensure!(second.args.contains(&"--v=4".to_string()), "{:?}", second.args);
        wait_webhook_routed(bed, webhook_port).await?;
        seed_001_pod(&ns, "test-pod-2", TIMEOUT).await?;
        let missed = ns
            .kubectl(&["get", "sidecarset", &sidecarset, "-o", "jsonpath={.status.missedInjectionPods}"])
            .await?;
        ensure!(missed.is_empty() || missed == "0", "missedInjectionPods {missed}");

        // 5. helm uninstall: the manager goes; CRDs, the CloneSet, the SidecarSet and every Pod stay.
        // The manager stops first (its Pods' termination): a manager still running once its RBAC is
        // gone would only show refusals the test cannot tell from missing rules.
        bed.plane.stop_process(&second.name, false);
        helm_cli(bed, &["uninstall", RELEASE])?;
        let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
        for crd in ["clonesets", "statefulsets", "daemonsets", "sidecarsets", "uniteddeployments", "broadcastjobs"] {
            crds.get(&format!("{crd}.apps.kruise.io")).await.with_context(|| format!("CRD {crd} after uninstall"))?;
        }
        ns.kubectl(&["get", "cloneset", "sample"]).await?;
        let api: Api<Pod> = ns.api();
        let after = active_pods(&api, "app=sample").await?;
        let mut after_uids: Vec<String> = after.iter().map(uid).collect();
        let mut before_uids = cloneset_uids.clone();
        after_uids.sort();
        before_uids.sort();
        ensure!(after_uids == before_uids && after.iter().all(is_ready), "after uninstall: {}", describe(&after));
        for pod in ["test-pod", "test-pod-2"] {
            let pod = api.get(pod).await?;
            ensure!(is_ready(&pod), "{pod:?} not ready after uninstall");
        }

        // 6. RBAC: nothing refused, nothing granted that went unused and unaccounted for.
        let requests = audited(bed, CHART_SERVICE_ACCOUNT)?;
        ensure!(!requests.is_empty(), "the audit log has no request of {CHART_SERVICE_ACCOUNT}");
        let refused: Vec<_> = requests.iter().filter(|(_, code, _)| *code == 403).collect();
        ensure!(refused.is_empty(), "the chart's RBAC refused: {refused:#?}");
        let used: BTreeSet<Triple> = requests.iter().map(|(t, _, _)| t.clone()).collect();
        let missing: Vec<_> = used.difference(&grants).collect();
        ensure!(missing.is_empty(), "used but not granted: {missing:?}");
        let excused: BTreeSet<Triple> = NOT_EXERCISED
            .iter()
            .map(|(g, r, v, _)| (g.to_string(), r.to_string(), v.to_string()))
            .collect();
        let stale: Vec<_> = excused.difference(&grants).collect();
        ensure!(stale.is_empty(), "NOT_EXERCISED lists what the chart does not grant: {stale:?}");
        let unused: Vec<_> = grants.difference(&used).filter(|t| !excused.contains(*t)).collect();
        ensure!(unused.is_empty(), "granted but never used, nor listed in NOT_EXERCISED: {unused:?}");
        eprintln!(
            "RBAC: {} requests of {CHART_SERVICE_ACCOUNT}, {} (group, resource, verb) used of {} granted; not exercised here: {}",
            requests.len(),
            used.len(),
            grants.len(),
            grants.difference(&used).count()
        );
        Ok(())
    })
    .await
}
