//! Image pre-download before an in-place rollout (OpenKruise gates `PreDownloadImageForInPlaceUpdate`
//! and `PreDownloadImageForDaemonSetUpdate`), end to end on real nodes: real kubelets with containerd,
//! one kruise-daemon per node, this binary's manager started with both gates on. A user changes the
//! image of a CloneSet (or an Advanced DaemonSet) whose partition still holds every Pod back, and sees
//! an ImagePullJob per new image, owned by the workload, pulling on the nodes of its Pods; the nodes'
//! NodeImages report the image pulled; when the partition is lifted the containers restart in place
//! (same Pod UIDs) onto the new image, after the daemon's pull ended; once every Pod runs the
//! new revision the job is gone. The gate-off side is `predownload_off.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, ensure};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::imagepulljob::v1beta1::{ImagePullJob, ImageTagStatus, NodeImage};
use kruise_e2e::cloneset_kit::{self, merge_patch};
use kruise_e2e::real_node_kit::{
    in_namespace_with_node_logs, in_place_agent_daemonset, on_real_nodes, pods_of, started_at,
    status_of, wait_all_ready,
};
use kruise_e2e::{container_status, node_name};
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::api::{Api, ListParams};
use serde_json::json;

const REAL_NODES: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(150);
const CONTAINER: &str = "nginx";

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager_with(&kruise_testkit::manager::ManagerOptions {
        extra_args: vec![
            "--feature-gates=PreDownloadImageForInPlaceUpdate=true,PreDownloadImageForDaemonSetUpdate=true"
                .into(),
        ],
        ..Default::default()
    });
    bed.daemons();
    bed
}

/// The ImagePullJobs whose controller is the `kind` named `owner` (what upstream's e2e lists).
async fn jobs_of(ns: &TestNamespace, kind: &str, owner: &str) -> anyhow::Result<Vec<ImagePullJob>> {
    let api: Api<ImagePullJob> = ns.api();
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.kind == kind && o.name == owner)
        })
        .collect())
}

/// Waits for the one ImagePullJob of the owner to complete on every node in `nodes`.
async fn completed_job(
    ns: &TestNamespace,
    kind: &str,
    owner: &str,
    nodes: usize,
) -> anyhow::Result<ImagePullJob> {
    eventually(
        format!("the ImagePullJob of {kind} {owner} completed on {nodes} nodes"),
        TIMEOUT,
        || async {
            let jobs = jobs_of(ns, kind, owner).await?;
            ensure!(jobs.len() <= 1, "one job per changed image: {jobs:#?}");
            let Some(job) = jobs.into_iter().next() else {
                return Ok(None);
            };
            let status = job.status.clone().unwrap_or_default();
            let done = status.completion_time.is_some();
            ensure!(
                !done
                    || (status.desired, status.succeeded, status.failed)
                        == (nodes as i32, nodes as i32, 0),
                "job finished with {status:?}"
            );
            Ok(done.then_some(job))
        },
    )
    .await
}

/// What the node's NodeImage reports for `image` (`repo:tag`; the key may be fully qualified):
/// phase, completion time, the runtime's image ID.
async fn node_image_tag(
    ns: &TestNamespace,
    node: &str,
    image: &str,
) -> anyhow::Result<Option<ImageTagStatus>> {
    let (repo, tag) = image.rsplit_once(':').context("image without a tag")?;
    let images: Api<NodeImage> = Api::all(ns.client.clone());
    let object = images.get(node).await?;
    Ok(object.status.and_then(|s| {
        s.image_statuses
            .iter()
            .filter(|(name, _)| name.as_str() == repo || name.ends_with(&format!("/{repo}")))
            .flat_map(|(_, status)| status.tags.clone())
            .find(|t| t.tag == tag)
    }))
}

/// The kubelet's Events about Pod `pod`: (reason, message).
async fn kubelet_events(ns: &TestNamespace, pod: &str) -> anyhow::Result<Vec<(String, String)>> {
    let api: Api<Event> = ns.api();
    Ok(api
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet")
                || e.reporting_component.as_deref() == Some("kubelet")
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

/// Every Pod of `after` is the Pod of `before` (same UID and node) whose container restarted once
/// onto `image`, after its node's kruise-daemon had pulled it (`pulled`: node → the pull's completion
/// time in the NodeImage status, read before the partition was lifted).
///
/// The v1.34 kubelet may still send the runtime a pull for an image it did not pull itself (it
/// re-checks such images): that pull finds the image's content on the node, so it is not asserted
/// away; what is asserted is that the image was on the node before the container restarted.
async fn restarted_in_place_after_the_pull(
    ns: &TestNamespace,
    before: &[Pod],
    after: &[Pod],
    image: &str,
    pulled: &BTreeMap<String, Timestamp>,
) -> anyhow::Result<()> {
    let identity = |pods: &[Pod]| -> Vec<(String, String, Option<String>)> {
        pods.iter()
            .map(|p| (cloneset_kit::name(p), cloneset_kit::uid(p), node_name(p)))
            .collect()
    };
    ensure!(
        identity(before) == identity(after),
        "the Pods were replaced: {:?} → {:?}",
        identity(before),
        identity(after)
    );
    for (old, new) in before.iter().zip(after) {
        let name = cloneset_kit::name(new);
        let (was, now) = (status_of(old, CONTAINER)?, status_of(new, CONTAINER)?);
        ensure!(
            now.restart_count == was.restart_count + 1 && now.image_id != was.image_id,
            "{name}: restartCount {} → {}, imageID {} → {}",
            was.restart_count,
            now.restart_count,
            was.image_id,
            now.image_id
        );
        let node = node_name(new).context("no node")?;
        let done = pulled
            .get(&node)
            .with_context(|| format!("{name}: its node {node} was not pre-pulled: {pulled:?}"))?;
        let started = started_at(&now).with_context(|| format!("{name}: not running"))?;
        // Both times are whole seconds, and the pull was seen complete before the partition was
        // lifted, so a restart in the pull's own second is after it: only an earlier second is not.
        ensure!(
            *done <= started,
            "{name}: restarted at {started}, before the daemon's pull ended at {done}"
        );
        let events = kubelet_events(ns, &name).await?;
        let quoted = format!("\"{image}\"");
        ensure!(
            events
                .iter()
                .any(|(reason, message)| reason == "Pulled" && message.contains(&quoted)),
            "{name}: no kubelet Pulled event for {image}: {events:#?}"
        );
    }
    Ok(())
}

/// The labels of ControllerRevision `name`.
async fn revision_labels(
    ns: &TestNamespace,
    name: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let api: Api<ControllerRevision> = ns.api();
    Ok(api.get(name).await?.metadata.labels.unwrap_or_default())
}

/// Checks the job as upstream builds it and that every Pod's node has the image.
async fn check_job_and_nodes(
    ns: &TestNamespace,
    job: &ImagePullJob,
    update_revision: &str,
    image: &str,
    parallelism: i32,
    nodes: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, Timestamp>> {
    ensure!(
        job.metadata.name.as_deref() == Some(format!("{update_revision}-{CONTAINER}").as_str()),
        "job name {:?}",
        job.metadata.name
    );
    ensure!(job.spec.image == image, "job image {}", job.spec.image);
    ensure!(
        job.spec.parallelism == Some(IntOrString::Int(parallelism)),
        "parallelism {:?}",
        job.spec.parallelism
    );
    let expressions = job
        .spec
        .pod_selector
        .as_ref()
        .and_then(|s| s.label_selector.match_expressions.clone())
        .unwrap_or_default();
    ensure!(
        expressions
            .iter()
            .any(|e| e.key == "controller-revision-hash"
                && e.operator == "NotIn"
                && e.values.iter().flatten().any(|v| v == update_revision)),
        "podSelector {:?}",
        job.spec.pod_selector
    );
    let mut pulled = BTreeMap::new();
    for node in nodes {
        let tag = node_image_tag(ns, node, image).await?;
        let phase = tag.as_ref().map(|t| t.phase.clone());
        ensure!(
            phase.as_deref() == Some("Succeeded"),
            "NodeImage {node}: {image} is {phase:?}"
        );
        let done = tag
            .and_then(|t| t.completion_time)
            .with_context(|| format!("NodeImage {node}: no completionTime for {image}"))?;
        pulled.insert(node.clone(), done.0);
    }
    ensure!(
        revision_labels(ns, update_revision)
            .await?
            .get("apps.kruise.io/pre-predownload-created")
            .map(String::as_str)
            == Some("true"),
        "the update revision is not marked as pre-downloaded"
    );
    Ok(pulled)
}

async fn wait_no_jobs(ns: &TestNamespace, kind: &str, owner: &str) -> anyhow::Result<()> {
    eventually(
        format!("the ImagePullJobs of {kind} {owner} deleted after the rollout"),
        TIMEOUT,
        || async { Ok(jobs_of(ns, kind, owner).await?.is_empty().then_some(())) },
    )
    .await
}

const CS_OLD: &str = "nginx:1.14.2";
const CS_NEW: &str = "nginx:1.15.1";

/// A CloneSet rolling in place to a new image: its partition first holds every Pod back while the
/// ImagePullJob pulls the image onto the Pods' nodes; then the in-place update needs no pull.
#[tokio::test]
async fn cloneset_in_place_rollout_pulls_the_new_image_first() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "pd-cs", async |ns| {
        let doc = {
            let mut doc = cloneset_kit::cloneset(
                "web",
                4,
                CS_OLD,
                json!({
                    "updateStrategy": {"rollingUpdate": {
                        "podUpdatePolicy": "InPlaceIfPossible",
                        "partition": 4,
                        "maxUnavailable": 1,
                    }},
                    "template": {"spec": on_real_nodes()},
                }),
            );
            doc["metadata"]["annotations"] =
                json!({"apps.kruise.io/image-predownload-parallelism": "2"});
            doc
        };
        ns.apply(&doc.to_string()).await?;
        let before = wait_all_ready(ns, "app=web", 4, CS_OLD, TIMEOUT).await?;
        let nodes: BTreeSet<String> = before.iter().filter_map(node_name).collect();

        cloneset_kit::set_image(ns, "web", CS_NEW).await?;
        let job = completed_job(ns, "CloneSet", "web", nodes.len()).await?;
        let cs: kruise_api::cloneset::v1beta1::CloneSet = ns.api().get("web").await?;
        let update_revision = cs.status.unwrap_or_default().update_revision;
        let pulled = check_job_and_nodes(ns, &job, &update_revision, CS_NEW, 2, &nodes).await?;
        let events: Api<Event> = ns.api();
        let created = events
            .list(&ListParams::default().fields("involvedObject.name=web"))
            .await?
            .items;
        ensure!(
            created
                .iter()
                .any(|e| e.reason.as_deref() == Some("CreatedImagePullJob")
                    && e.message.as_deref().is_some_and(|m| m.contains(CS_NEW))),
            "no CreatedImagePullJob Event on the CloneSet"
        );
        // The partition still holds every Pod on the old image.
        let held = pods_of(ns, "app=web").await?;
        ensure!(
            held.iter()
                .all(|p| container_status(p, CONTAINER).is_some_and(|s| s.image.ends_with(CS_OLD))),
            "{}",
            cloneset_kit::describe(&held)
        );

        merge_patch(
            ns,
            "cloneset",
            "web",
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .await?;
        let after = wait_all_ready(ns, "app=web", 4, CS_NEW, TIMEOUT).await?;
        restarted_in_place_after_the_pull(ns, &before, &after, CS_NEW, &pulled).await?;
        wait_no_jobs(ns, "CloneSet", "web").await
    })
    .await
}

const DS_OLD: &str = "nginx:1.19.1";
const DS_NEW: &str = "nginx:1.19.2";

/// The same for an Advanced DaemonSet: one Pod per real node, held back by its partition while the
/// job pulls on both nodes.
#[tokio::test]
async fn advanced_daemonset_rollout_pulls_the_new_image_first() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "pd-ads", async |ns| {
        let mut spec = on_real_nodes();
        json_patch::merge(
            &mut spec,
            &json!({"containers": [{"name": CONTAINER, "image": DS_OLD}]}),
        );
        let doc = in_place_agent_daemonset(spec, json!({"partition": REAL_NODES}));
        ns.apply(&doc.to_string()).await?;
        let before = wait_all_ready(ns, "app=agent", REAL_NODES, DS_OLD, TIMEOUT).await?;
        let nodes: BTreeSet<String> = before.iter().filter_map(node_name).collect();
        ensure!(nodes.len() == REAL_NODES, "one Pod per node: {nodes:?}");

        let patch = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": DS_NEW}]);
        ns.kubectl(&[
            "patch",
            "daemonsets.apps.kruise.io",
            "agent",
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .await?;
        let job = completed_job(ns, "DaemonSet", "agent", REAL_NODES).await?;
        let ds: kruise_api::daemonset::v1beta1::DaemonSet = ns.api().get("agent").await?;
        let revision = job
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_suffix(&format!("-{CONTAINER}")))
            .context("job name")?
            .to_owned();
        ensure!(
            revision.ends_with(&ds.status.unwrap_or_default().update_revision),
            "job {revision} is not of the update revision"
        );
        let pulled = check_job_and_nodes(ns, &job, &revision, DS_NEW, 1, &nodes).await?;

        merge_patch(
            ns,
            "daemonsets.apps.kruise.io",
            "agent",
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .await?;
        let after = wait_all_ready(ns, "app=agent", REAL_NODES, DS_NEW, TIMEOUT).await?;
        restarted_in_place_after_the_pull(ns, &before, &after, DS_NEW, &pulled).await?;
        wait_no_jobs(ns, "DaemonSet", "agent").await
    })
    .await
}
