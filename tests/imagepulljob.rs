//! Image pre-pulling end to end on real nodes: real kubelets with containerd, one kruise-daemon per
//! node (on that node's containerd socket), the manager's NodeImage / ImagePullJob / ImageListPullJob
//! controllers and webhooks with `ImagePullJobGate` on. A user creates a job as YAML and sees what
//! upstream shows: a NodeImage per node, the image pulled from the local registry onto exactly the
//! selected nodes (the node's containerd has it), the job's per-node counts and completion; a tag the
//! registry lacks fails on every selected node with the job's `failedNodes` listing them.

use kruise_e2e::real_node_kit::in_namespace_with_node_logs;
use std::time::Duration;

use anyhow::ensure;
use kruise_api::imagepulljob::v1beta1::{ImageListPullJob, ImagePullJob, NodeImage};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

const REAL_NODES: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(120);

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager_with(&kruise_testkit::manager::ManagerOptions {
        extra_args: vec!["--feature-gates=ImagePullJobGate=true".into()],
        ..Default::default()
    });
    bed.daemons();
    bed
}

/// The real nodes, by name, once each has its NodeImage.
async fn real_nodes(ns: &TestNamespace) -> anyhow::Result<Vec<String>> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ns.client.clone());
    let images: Api<NodeImage> = Api::all(ns.client.clone());
    eventually("a NodeImage for every real node", TIMEOUT, || async {
        let real = nodes
            .list(&ListParams::default().labels(&format!("{REAL_NODE_LABEL}=true")))
            .await?
            .items;
        let have = images.list(&ListParams::default()).await?.items;
        // Each real node has its NodeImage, named after it and carrying its labels.
        let all_there = real.iter().all(|node| {
            have.iter().any(|image| {
                image.metadata.name == node.metadata.name
                    && image.metadata.labels == node.metadata.labels
            })
        });
        let names: Vec<String> = real.into_iter().filter_map(|n| n.metadata.name).collect();
        Ok((names.len() == REAL_NODES && all_there).then_some(names))
    })
    .await
}

async fn finished_job(ns: &TestNamespace, name: &str) -> anyhow::Result<ImagePullJob> {
    let api: Api<ImagePullJob> = ns.api();
    eventually(
        &format!("ImagePullJob {name} completed"),
        TIMEOUT,
        || async {
            let job = api.get(name).await?;
            let done = job
                .status
                .as_ref()
                .is_some_and(|s| s.completion_time.is_some());
            Ok(done.then_some(job))
        },
    )
    .await
}

/// Whether the node's containerd has the image (`crictl`-free: the daemon's report in NodeImage status
/// carries the runtime's image ID, checked against the tag the runtime resolved).
async fn tag_status(
    ns: &TestNamespace,
    node: &str,
    image: &str,
    tag: &str,
) -> anyhow::Result<Option<(String, String, String)>> {
    let images: Api<NodeImage> = Api::all(ns.client.clone());
    let object = images.get(node).await?;
    Ok(object
        .status
        .and_then(|s| s.image_statuses.get(image).cloned())
        .and_then(|s| s.tags.into_iter().find(|t| t.tag == tag))
        .map(|t| (t.phase, t.image_id, t.message)))
}

/// An Always job selecting one real node by name pulls the image there: the job completes with one
/// success, the node's NodeImage reports the tag Succeeded with the runtime's image ID, and the other
/// node is not asked.
#[tokio::test]
async fn pulls_an_image_onto_the_selected_node() -> anyhow::Result<()> {
    let bed = bed();
    in_namespace_with_node_logs(bed, "ipj-pull", async |ns| {
        let nodes = real_nodes(ns).await?;
        let (chosen, other) = (&nodes[0], &nodes[1]);
        ns.apply(&format!(
            r#"
apiVersion: apps.kruise.io/v1beta1
kind: ImagePullJob
metadata:
  name: pull-httpd
spec:
  image: registry.k8s.io/e2e-test-images/httpd:2.4.39-4
  parallelism: 1
  selector:
    names: [{chosen}]
  pullPolicy:
    timeoutSeconds: 60
    backoffLimit: 1
  completionPolicy:
    type: Always
    ttlSecondsAfterFinished: 600
"#
        ))
        .await?;
        let job = finished_job(ns, "pull-httpd").await?;
        let status = job.status.unwrap_or_default();
        ensure!(
            (
                status.desired,
                status.succeeded,
                status.failed,
                status.active
            ) == (1, 1, 0, 0),
            "status: {status:?}"
        );
        ensure!(
            status.message == "job has completed",
            "message: {}",
            status.message
        );
        // The defaults the webhook wrote.
        ensure!(
            job.spec.image_pull_policy == "IfNotPresent"
                && job.spec.pull_policy.as_ref().and_then(|p| p.backoff_limit) == Some(1),
            "spec: {:?}",
            job.spec
        );
        let (phase, image_id, _) = tag_status(
            ns,
            chosen,
            "registry.k8s.io/e2e-test-images/httpd",
            "2.4.39-4",
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("no status for the tag on {chosen}"))?;
        ensure!(phase == "Succeeded", "phase {phase}");
        ensure!(
            image_id.starts_with("registry.k8s.io/e2e-test-images/httpd@sha256:"),
            "imageID {image_id}"
        );
        let images: Api<NodeImage> = Api::all(ns.client.clone());
        let untouched = images.get(other).await?;
        ensure!(
            !untouched
                .spec
                .images
                .contains_key("registry.k8s.io/e2e-test-images/httpd"),
            "the other node was asked too: {:?}",
            untouched.spec
        );
        // The chosen node's daemon counts the pull.
        let daemon = bed
            .daemons()
            .iter()
            .find(|d| &d.node == chosen)
            .ok_or_else(|| anyhow::anyhow!("no daemon for {chosen}"))?;
        let (code, metrics) = kruise_testkit::daemon::http_get(daemon, "/metrics").await?;
        ensure!(
            code == 200
                && metrics.contains("kruise_daemon_image_pulls_total{result=\"succeeded\"}"),
            "daemon metrics: {metrics}"
        );
        // The tag carries the job as owner.
        let asked = images.get(chosen).await?;
        let tag = asked
            .spec
            .images
            .get("registry.k8s.io/e2e-test-images/httpd")
            .and_then(|i| i.tags.first())
            .cloned()
            .unwrap_or_default();
        ensure!(
            tag.owner_references
                .iter()
                .any(|o| o.uid == job.metadata.uid),
            "owners {:?}",
            tag.owner_references
        );
        Ok(())
    })
    .await
}

/// A tag the registry does not have fails on every selected node after its back-off: the job completes
/// with both real nodes failed and listed in `failedNodes`, and each tag status says why.
#[tokio::test]
async fn a_missing_tag_fails_on_every_node() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ipj-missing", async |ns| {
        let mut nodes = real_nodes(ns).await?;
        nodes.sort();
        ns.apply(&format!(
            r#"
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: pull-missing
spec:
  image: nginx:no-such-tag
  parallelism: 2
  selector:
    matchLabels:
      {REAL_NODE_LABEL}: "true"
  pullPolicy:
    timeoutSeconds: 20
    backoffLimit: 1
  completionPolicy:
    type: Always
"#
        ))
        .await?;
        let job = finished_job(ns, "pull-missing").await?;
        let status = job.status.unwrap_or_default();
        ensure!(
            (status.desired, status.succeeded, status.failed) == (2, 0, 2),
            "status: {status:?}"
        );
        ensure!(
            status.failed_nodes == nodes,
            "failedNodes {:?}",
            status.failed_nodes
        );
        for node in &nodes {
            let (phase, _, message) = tag_status(ns, node, "nginx", "no-such-tag")
                .await?
                .ok_or_else(|| anyhow::anyhow!("no status on {node}"))?;
            ensure!(phase == "Failed", "{node}: {phase}");
            ensure!(
                message.contains("not found") || message.contains("pulling image"),
                "{node}: {message}"
            );
        }
        // As upstream's puller, each node's daemon tells the job of its failure: a PullImageFailed
        // Warning about the ImagePullJob from kruise-daemon-imagepuller, naming the image.
        let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
        let reporters = eventually("PullImageFailed Events on the job", TIMEOUT, || async {
            let mut reporters: Vec<String> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("ImagePullJob")
                            && r.name.as_deref() == Some("pull-missing")
                    }) && e.reason.as_deref() == Some("PullImageFailed")
                        && e.type_.as_deref() == Some("Warning")
                        && e.reporting_controller.as_deref() == Some("kruise-daemon-imagepuller")
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.starts_with("Image nginx:no-such-tag "))
                })
                .filter_map(|e| e.reporting_instance)
                .collect();
            reporters.sort();
            reporters.dedup();
            Ok((reporters.len() == nodes.len()).then_some(reporters))
        })
        .await?;
        ensure!(reporters == nodes, "reported by {reporters:?}");
        Ok(())
    })
    .await
}

/// An ImageListPullJob creates one ImagePullJob per image and completes when they do, counting them.
#[tokio::test]
async fn an_image_list_pulls_every_image() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ilpj", async |ns| {
        real_nodes(ns).await?;
        ns.apply(&format!(
            r#"
apiVersion: apps.kruise.io/v1beta1
kind: ImageListPullJob
metadata:
  name: two-images
spec:
  images: ["busybox:1.35", "nginx:1.23.1"]
  parallelism: 2
  selector:
    matchLabels:
      {REAL_NODE_LABEL}: "true"
  completionPolicy:
    type: Always
"#
        ))
        .await?;
        let api: Api<ImageListPullJob> = ns.api();
        let list = eventually("ImageListPullJob completed", TIMEOUT, || async {
            let list = api.get("two-images").await?;
            Ok(list
                .status
                .clone()
                .filter(|s| s.completion_time.is_some())
                .map(|_| list))
        })
        .await?;
        let status = list.status.unwrap_or_default();
        ensure!(
            (
                status.desired,
                status.completed,
                status.succeeded,
                status.active
            ) == (2, 2, 2, 0),
            "status: {status:?}"
        );
        let jobs: Api<ImagePullJob> = ns.api();
        let children = jobs.list(&ListParams::default()).await?.items;
        let mut images: Vec<String> = children.iter().map(|j| j.spec.image.clone()).collect();
        images.sort();
        ensure!(
            images == ["busybox:1.35", "nginx:1.23.1"],
            "children {images:?}"
        );
        ensure!(
            children.iter().all(|j| j
                .metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("two-images-"))),
            "child names"
        );
        Ok(())
    })
    .await
}

/// Changing an unfinished ImageListPullJob's template replaces its ImagePullJobs: the list and its jobs
/// carry the template's hash in `controller-revision-hash`; after a change of `parallelism`, the old job
/// is deleted and a new one with the new template and hash pulls the image; the list tells it in
/// upstream's Events.
#[tokio::test]
async fn an_image_list_replaces_its_jobs_when_its_template_changes() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ilpj-tpl", async |ns| {
        real_nodes(ns).await?;
        ns.apply(&format!(
            r#"
apiVersion: apps.kruise.io/v1beta1
kind: ImageListPullJob
metadata:
  name: tpl
spec:
  images: ["busybox:1.35"]
  parallelism: 1
  selector:
    matchLabels:
      {REAL_NODE_LABEL}: "true"
  completionPolicy:
    type: Never
"#
        ))
        .await?;
        let lists: Api<ImageListPullJob> = ns.api();
        let jobs: Api<ImagePullJob> = ns.api();
        const HASH: &str = "controller-revision-hash";
        // The list's hash, and its one job carrying it.
        let (first_hash, first) = eventually("the first job, labelled", TIMEOUT, || async {
            let list = lists.get("tpl").await?;
            let Some(hash) = list.labels().get(HASH).cloned() else {
                return Ok(None);
            };
            let children = jobs.list(&ListParams::default()).await?.items;
            Ok(match children.as_slice() {
                [job] if job.labels().get(HASH) == Some(&hash) => Some((hash, job.clone())),
                _ => None,
            })
        })
        .await?;
        ensure!(
            first.spec.parallelism
                == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
            "{:?}",
            first.spec
        );
        ns.kubectl(&[
            "patch",
            "imagelistpulljob",
            "tpl",
            "--type=merge",
            "-p",
            r#"{"spec":{"parallelism":2}}"#,
        ])
        .await?;
        let second = eventually("the job replaced", TIMEOUT, || async {
            let list = lists.get("tpl").await?;
            let hash = list.labels().get(HASH).cloned().unwrap_or_default();
            let children = jobs.list(&ListParams::default()).await?.items;
            let live: Vec<&ImagePullJob> = children
                .iter()
                .filter(|j| j.metadata.deletion_timestamp.is_none())
                .collect();
            Ok(match live.as_slice() {
                [job]
                    if hash != first_hash
                        && job.labels().get(HASH) == Some(&hash)
                        && job.metadata.uid != first.metadata.uid =>
                {
                    Some((*job).clone())
                }
                _ => None,
            })
        })
        .await?;
        ensure!(
            second.spec.parallelism
                == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
                && second.spec.image == "busybox:1.35",
            "{:?}",
            second.spec
        );
        eventually("the old job gone", TIMEOUT, || async {
            Ok(jobs
                .get_opt(&first.name_any())
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        // The list told of both.
        let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
        eventually("the list's create and delete Events", TIMEOUT, || async {
            let reasons: Vec<String> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding
                        .as_ref()
                        .is_some_and(|r| r.name.as_deref() == Some("tpl"))
                })
                .filter_map(|e| e.reason)
                .collect();
            Ok((reasons
                .iter()
                .any(|r| r == "Successful create ImagePullJob")
                && reasons
                    .iter()
                    .any(|r| r == "Successful delete ImagePullJob"))
            .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

/// An AdvancedCronJob with an ImageListPullJob template creates a list on its schedule (upstream's
/// name, the template's labels, the scheduled-at annotation, controlled by it); Forbid waits for the
/// running list; finished lists beyond `successfulJobsHistoryLimit` are deleted; the status says
/// ImageListPullJob and when it last ran.
#[tokio::test]
async fn an_advanced_cron_job_pulls_image_lists_on_schedule() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "acj-ilpj", async |ns| {
        real_nodes(ns).await?;
        ns.apply(&format!(
            r#"
apiVersion: apps.kruise.io/v1beta1
kind: AdvancedCronJob
metadata:
  name: prepull
spec:
  schedule: "@every 5s"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 1
  template:
    imageListPullJobTemplate:
      metadata:
        labels: {{app: prepull}}
      spec:
        images: ["busybox:1.35"]
        parallelism: 2
        selector:
          matchLabels:
            {REAL_NODE_LABEL}: "true"
        completionPolicy:
          type: Always
"#
        ))
        .await?;
        let owner: kruise_api::advancedcronjob::v1beta1::AdvancedCronJob =
            ns.api().get("prepull").await?;
        let lists: Api<ImageListPullJob> = ns.api();
        let owned = || async {
            let items = lists.list(&ListParams::default()).await?.items;
            anyhow::Ok(
                items
                    .into_iter()
                    .filter(|l| {
                        l.owner_references().iter().any(|r| {
                            r.controller == Some(true)
                                && r.kind == "AdvancedCronJob"
                                && Some(&r.uid) == owner.metadata.uid.as_ref()
                        })
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let first = eventually("a first ImageListPullJob", TIMEOUT, || async {
            Ok(owned().await?.into_iter().next())
        })
        .await?;
        let scheduled = first
            .annotations()
            .get(kruise_api::advancedcronjob::ANNOTATION_SCHEDULED_AT)
            .cloned()
            .unwrap_or_default();
        let at: k8s_openapi::jiff::Timestamp = scheduled.parse()?;
        ensure!(
            first.name_any() == format!("prepull-{}", at.as_second()),
            "{} scheduled at {scheduled}",
            first.name_any()
        );
        ensure!(
            first.labels().get("app").map(String::as_str) == Some("prepull"),
            "{:?}",
            first.labels()
        );
        // Runs go on once each list completes; with a history of 1 the first completed one goes.
        eventually("later runs, the first list pruned", TIMEOUT, || async {
            let current = owned().await?;
            let later = current.iter().any(|l| l.name_any() > first.name_any());
            let gone = lists.get_opt(&first.name_any()).await?.is_none();
            Ok((later && gone).then_some(()))
        })
        .await?;
        // Forbid: never two lists running at once; finished ones kept to the limit.
        let current = owned().await?;
        let running = current
            .iter()
            .filter(|l| {
                l.status
                    .as_ref()
                    .is_none_or(|s| s.completion_time.is_none())
            })
            .count();
        let finished = current.len() - running;
        ensure!(
            running <= 1 && finished <= 1,
            "{running} running, {finished} finished"
        );
        let acj: kruise_api::advancedcronjob::v1beta1::AdvancedCronJob =
            ns.api().get("prepull").await?;
        let status = acj.status.unwrap_or_default();
        ensure!(
            status.type_ == "ImageListPullJob" && status.last_schedule_time.is_some(),
            "{status:?}"
        );
        ensure!(
            status
                .active
                .iter()
                .all(|a| a.kind.as_deref() == Some("ImageListPullJob")),
            "{:?}",
            status.active
        );
        Ok(())
    })
    .await
}

/// The examples (examples/imagepulljob.yaml, imagelistpulljob.yaml) are accepted, defaulted by the
/// webhook as upstream, and read back the same in v1alpha1 and v1beta1 (conversion loses nothing);
/// invalid jobs are refused with upstream's message.
#[tokio::test]
async fn examples_convert_and_invalid_jobs_are_refused() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ipj-api", async |ns| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        for (file, kind, name) in [
            ("imagepulljob.yaml", "imagepulljobs", "pull-nginx"),
            ("imagelistpulljob.yaml", "imagelistpulljobs", "release-images"),
        ] {
            let yaml = std::fs::read_to_string(root.join(file))?;
            ns.apply(&yaml).await?;
            let beta = ns
                .kubectl(&["get", &format!("{kind}.v1beta1.apps.kruise.io"), name, "-o", "json"])
                .await?;
            let alpha = ns
                .kubectl(&["get", &format!("{kind}.v1alpha1.apps.kruise.io"), name, "-o", "json"])
                .await?;
            let beta: serde_json::Value = serde_json::from_str(&beta)?;
            let alpha: serde_json::Value = serde_json::from_str(&alpha)?;
            ensure!(alpha["apiVersion"] == "apps.kruise.io/v1alpha1", "{alpha}");
            ensure!(alpha["spec"] == beta["spec"], "{file}: {} vs {}", alpha["spec"], beta["spec"]);
            ensure!(
                beta["spec"]["pullPolicy"]["timeoutSeconds"].is_number()
                    && beta["spec"]["completionPolicy"]["type"] == "Always",
                "{file}: defaults {}",
                beta["spec"]
            );
        }
        for (doc, message) in [
            (
                "apiVersion: apps.kruise.io/v1alpha1\nkind: ImagePullJob\nmetadata: {name: bad-1}\nspec: {image: nginx:1, parallelism: 50%}\n",
                "parallelism does not support percentage value",
            ),
            (
                "apiVersion: apps.kruise.io/v1beta1\nkind: ImagePullJob\nmetadata: {name: bad-2}\nspec: {image: nginx:1, completionPolicy: {type: Never, ttlSecondsAfterFinished: 5}}\n",
                "can only work with Always CompletionPolicyType",
            ),
            (
                "apiVersion: apps.kruise.io/v1beta1\nkind: ImageListPullJob\nmetadata: {name: bad-3}\nspec: {images: [a:1, a:1]}\n",
                "images cannot have duplicate values",
            ),
        ] {
            match ns.apply(doc).await {
                Ok(out) => anyhow::bail!("accepted: {out}"),
                Err(error) => ensure!(format!("{error:#}").contains(message), "{error:#}"),
            }
        }
        Ok(())
    })
    .await
}
