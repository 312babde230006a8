//! Image pre-download is off by default (OpenKruise gates `PreDownloadImageForInPlaceUpdate` and
//! `PreDownloadImageForDaemonSetUpdate` are Alpha): with this binary's manager on default gates, an
//! in-place CloneSet rollout that would pre-download with the gate on creates no ImagePullJob and
//! leaves its revision unmarked. The gate-on side is `predownload.rs`.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::imagepulljob::v1beta1::ImagePullJob;
use kruise_e2e::cloneset_kit::{self, apply, set_image};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn no_image_pull_job_without_the_gate() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("pd-off").await?;
    ns.run(async {
        // Everything the gate needs: in place, more than 3 replicas, updated in batches.
        let doc = cloneset_kit::cloneset(
            "web",
            4,
            "nginx:1.14.2",
            json!({"updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "partition": 2,
                "maxUnavailable": 1,
            }}}),
        );
        apply(&ns, &doc).await?;
        cloneset_kit::wait_converged(&ns, "web", 4, TIMEOUT).await?;
        set_image(&ns, "web", "nginx:1.15.1").await?;
        let api: Api<CloneSet> = ns.api();
        let update_revision = eventually("two Pods updated in place", TIMEOUT, || async {
            let status = api.get("web").await?.status.unwrap_or_default();
            Ok((status.updated_ready_replicas == 2
                && status.current_revision != status.update_revision)
                .then_some(status.update_revision))
        })
        .await?;
        let jobs: Api<ImagePullJob> = ns.api();
        let listed = jobs.list(&ListParams::default()).await?.items;
        ensure!(
            listed.is_empty(),
            "ImagePullJobs without the gate: {listed:#?}"
        );
        let revisions: Api<ControllerRevision> = ns.api();
        let labels = revisions
            .get(&update_revision)
            .await?
            .metadata
            .labels
            .unwrap_or_default();
        ensure!(
            !labels.keys().any(|k| k.contains("predownload")),
            "the revision was decided for pre-download: {labels:?}"
        );
        Ok(())
    })
    .await
}
