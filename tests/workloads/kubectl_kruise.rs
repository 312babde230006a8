//! `kubectl kruise` end to end: the built `kubectl-kruise` binary run against the real control plane,
//! each test in its own namespace (concurrently).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_e2e::cloneset_kit::{
    CONTAINER, RevisionOrder, active_pods, apply, cloneset, describe, holds, identities,
    merge_patch, name, spec_image, status, uid, wait_converged,
};
use kruise_testkit::{TestNamespace, eventually, managed_namespace, testbed};
use kube::api::{Api, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// What one run of the plugin printed.
#[derive(Debug)]
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn plugin() -> anyhow::Result<PathBuf> {
    kruise_testkit::manager::workspace_binary(
        "kubectl-kruise",
        "KUBECTL_KRUISE_BIN",
        "kubectl-kruise",
    )
}

/// `kubectl-kruise <args> --kubeconfig <admin> -n <namespace>`.
async fn kruise(ns: &TestNamespace, args: &[&str]) -> anyhow::Result<Run> {
    let output = tokio::process::Command::new(plugin()?)
        .args(args)
        .arg("--kubeconfig")
        .arg(testbed().plane.kubeconfig_path())
        .args(["-n", &ns.name])
        .kill_on_drop(true)
        .output()
        .await
        .context("running kubectl-kruise")?;
    Ok(Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Runs the plugin and fails unless it exits 0; returns stdout.
async fn kruise_ok(ns: &TestNamespace, args: &[&str]) -> anyhow::Result<String> {
    let run = kruise(ns, args).await?;
    ensure!(run.ok, "kubectl-kruise {args:?} failed: {run:?}");
    Ok(run.stdout)
}

/// The identities of `before` with every container restarted `times` more.
fn restarted(before: &[Pod], times: i32) -> BTreeMap<String, (String, Vec<i32>)> {
    identities(before)
        .into_iter()
        .map(|(n, (u, r))| (n, (u, r.into_iter().map(|c| c + times).collect())))
        .collect()
}

/// `rollout plan … -o json`, as (the plan, the Pods in update order).
async fn plan_json(
    ns: &TestNamespace,
    args: &[&str],
) -> anyhow::Result<(serde_json::Value, Vec<String>)> {
    let mut all = vec!["rollout", "plan"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let plan: serde_json::Value = serde_json::from_str(&kruise_ok(ns, &all).await?)?;
    let pods = plan["steps"]
        .as_array()
        .context("the plan has no steps")?
        .iter()
        .map(|s| s["pod"].as_str().unwrap_or_default().to_owned())
        .collect();
    Ok((plan, pods))
}

async fn cloneset_status(ns: &TestNamespace, cs: &str) -> anyhow::Result<(i32, i32)> {
    let api: Api<CloneSet> = ns.api();
    let s = status(&api.get(cs).await?);
    Ok((s.updated_replicas, s.replicas))
}

/// Seed 000 driven by the plugin: set image, status, history, undo in place, pause midway, resume.
#[tokio::test]
async fn seed_walkthrough_driven_by_kubectl_kruise() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("kk-seed").await?;
    ns.run(async {
        let sample = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/cloneset-sample.yaml"),
        )?;
        ns.apply(&sample).await?;
        let (_, before) = wait_converged(&ns, "sample", 2, TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();

        let out = kruise_ok(
            &ns,
            &["set", "image", "cloneset/sample", "nginx=nginx:1.19.1"],
        )
        .await?;
        ensure!(out.contains("image updated"), "{out}");
        let out = kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/sample", "--timeout", "90s"],
        )
        .await?;
        ensure!(
            out.contains("cloneset \"sample\" successfully rolled out"),
            "{out}"
        );
        ensure!(
            cloneset_status(&ns, "sample").await? == (2, 2),
            "2/2 updated once status returns 0"
        );

        let out = kruise_ok(&ns, &["rollout", "history", "cloneset/sample"]).await?;
        let rows: Vec<&str> = out.lines().skip(2).collect();
        ensure!(
            rows.len() == 2 && rows[0].starts_with('1') && rows[1].starts_with('2'),
            "history shows 2 revisions: {out}"
        );
        let out = kruise_ok(
            &ns,
            &["rollout", "history", "cloneset/sample", "--revision", "1"],
        )
        .await?;
        ensure!(
            out.contains("image: nginx:alpine"),
            "revision 1's template: {out}"
        );

        let out = kruise_ok(&ns, &["rollout", "undo", "cloneset/sample"]).await?;
        ensure!(out.contains("rolled back to revision 1"), "{out}");
        kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/sample", "--timeout", "90s"],
        )
        .await?;
        let (_, after) = wait_converged(&ns, "sample", 2, TIMEOUT).await?;
        let uids = |p: &[Pod]| p.iter().map(uid).collect::<Vec<_>>();
        ensure!(
            uids(&before) == uids(&after),
            "undo kept the Pods: {}",
            describe(&after)
        );
        ensure!(
            after
                .iter()
                .all(|p| spec_image(p).as_deref() == Some("nginx:alpine")),
            "undo brought nginx:alpine back: {}",
            describe(&after)
        );

        // Pause midway: minReadySeconds holds the second Pod back while the first becomes available.
        merge_patch(
            &ns,
            "cloneset",
            "sample",
            &json!({"spec": {"minReadySeconds": 8}}),
        )
        .await?;
        kruise_ok(
            &ns,
            &["set", "image", "cloneset/sample", "nginx=nginx:1.19.2"],
        )
        .await?;
        eventually("one Pod updated to nginx:1.19.2", TIMEOUT, || async {
            let list = active_pods(&pods, "app=sample").await?;
            Ok(list
                .iter()
                .any(|p| spec_image(p).as_deref() == Some("nginx:1.19.2"))
                .then_some(()))
        })
        .await?;
        let out = kruise_ok(&ns, &["rollout", "pause", "cloneset/sample"]).await?;
        ensure!(out.contains("paused"), "{out}");
        // The status counts the updated Pod once the controller has written it (on a busy test bed,
        // a moment after the Pod changed); from then on the paused rollout must stay there.
        eventually("the status counting 1 of 2 updated", TIMEOUT, || async {
            Ok((cloneset_status(&ns, "sample").await? == (1, 2)).then_some(()))
        })
        .await?;
        holds(
            "the paused rollout stays at 1 of 2",
            Duration::from_secs(12),
            || async {
                let list = active_pods(&pods, "app=sample").await?;
                let new = list
                    .iter()
                    .filter(|p| spec_image(p).as_deref() == Some("nginx:1.19.2"))
                    .count();
                let status = cloneset_status(&ns, "sample").await?;
                ensure!(
                    new == 1 && status.0 == 1,
                    "updated/replicas {status:?}, Pods: {}",
                    describe(&list)
                );
                Ok(true)
            },
        )
        .await?;
        let out = kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/sample", "--watch=false"],
        )
        .await?;
        ensure!(
            out.contains("1 out of 2") && out.contains("paused"),
            "status while paused: {out}"
        );
        kruise_ok(&ns, &["rollout", "resume", "cloneset/sample"]).await?;
        kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/sample", "--timeout", "90s"],
        )
        .await?;
        let (_, done) = wait_converged(&ns, "sample", 2, TIMEOUT).await?;
        ensure!(
            uids(&before) == uids(&done),
            "the whole walkthrough kept the Pods"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn status_fails_on_progress_deadline() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("kk-deadline").await?;
    ns.run(async {
        let spec = json!({"progressDeadlineSeconds": 5,
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1}}});
        apply(&ns, &cloneset("stuck", 2, "nginx:alpine", spec)).await?;
        wait_converged(&ns, "stuck", 2, TIMEOUT).await?;
        kruise_ok(
            &ns,
            &[
                "set",
                "image",
                "cloneset/stuck",
                "nginx=invalid.registry.k8s.io/nginx:1",
            ],
        )
        .await?;
        let run = kruise(
            &ns,
            &["rollout", "status", "cloneset/stuck", "--timeout", "80s"],
        )
        .await?;
        ensure!(!run.ok, "status must fail: {run:?}");
        ensure!(
            run.stderr
                .contains("cloneset \"stuck\" exceeded its progress deadline"),
            "the ProgressDeadlineExceeded message: {run:?}"
        );
        ensure!(
            run.stdout.contains("Waiting for rollout to finish"),
            "progress was printed: {run:?}"
        );

        let run = kruise(
            &ns,
            &["rollout", "status", "cloneset/missing", "--timeout", "5s"],
        )
        .await?;
        ensure!(
            !run.ok
                && run
                    .stderr
                    .contains("clonesets.apps.kruise.io \"missing\" not found"),
            "{run:?}"
        );
        let run = kruise(&ns, &["rollout", "status", "pod/x"]).await?;
        ensure!(
            !run.ok && run.stderr.contains("unknown resource type"),
            "{run:?}"
        );

        // An identity without RBAC: a ServiceAccount of the namespace with no role bound.
        let accounts: Api<ServiceAccount> = ns.api();
        let mut account = ServiceAccount::default();
        account.metadata.name = Some("nobody".into());
        accounts.create(&PostParams::default(), &account).await?;
        let issued = accounts
            .create_token_request("nobody", &PostParams::default(), &TokenRequest::default())
            .await?;
        let token = issued.status.map(|s| s.token).context("no token")?;
        let config = std::env::temp_dir().join(format!("{}-nobody.kubeconfig", ns.name));
        std::fs::write(
            &config,
            kruise_testkit::control_plane::kubeconfig(
                &bed.plane.server_url(),
                bed.plane.ca_pem(),
                &token,
                "nobody",
            ),
        )?;
        let output = tokio::process::Command::new(plugin()?)
            .args(["rollout", "history", "cloneset/stuck", "-n", &ns.name, "--kubeconfig"])
            .arg(&config)
            .kill_on_drop(true)
            .output()
            .await;
        std::fs::remove_file(&config).ok();
        let output = output?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        ensure!(
            !output.status.success()
                && stderr.contains("forbidden")
                && stderr.contains(&format!("system:serviceaccount:{}:nobody", ns.name)),
            "an RBAC denial is reported with kubectl's wording: {output:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn restart_in_place_keeps_pods_and_restarts_each_container() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-restart").await?;
    ns.run(async {
        let spec = json!({
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1}},
            "template": {"spec": {"containers": [
                {"name": CONTAINER, "image": "nginx:alpine"},
                {"name": "sidecar", "image": "busybox:1.36"}]}}
        });
        apply(&ns, &cloneset("web", 3, "nginx:alpine", spec)).await?;
        let (_, before) = wait_converged(&ns, "web", 3, TIMEOUT).await?;
        let out = kruise_ok(&ns, &["rollout", "restart", "cloneset/web"]).await?;
        ensure!(out.contains("restarted (in place)"), "{out}");
        kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/web", "--timeout", "90s"],
        )
        .await?;
        let (_, after) = wait_converged(&ns, "web", 3, TIMEOUT).await?;
        let want = restarted(&before, 1);
        ensure!(
            identities(&after) == want,
            "same Pods, every container restarted once: before {:?}, after {:?}",
            identities(&before),
            identities(&after)
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scaledown_deletes_exactly_the_named_pod() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-scaledown").await?;
    ns.run(async {
        apply(&ns, &cloneset("web", 3, "nginx:alpine", json!({}))).await?;
        let (_, before) = wait_converged(&ns, "web", 3, TIMEOUT).await?;
        let victim = name(&before[1]);

        ns.apply(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranger"},
            "spec": {"containers": [{"name": "c", "image": "nginx:alpine"}]}})
            .to_string(),
        )
        .await?;
        let run = kruise(
            &ns,
            &[
                "scaledown",
                "cloneset/web",
                "--pods",
                &format!("{victim},stranger"),
            ],
        )
        .await?;
        ensure!(
            !run.ok
                && run
                    .stderr
                    .contains("pod \"stranger\" is not owned by cloneset \"web\""),
            "a foreign Pod is refused: {run:?}"
        );

        kruise_ok(&ns, &["scaledown", "cloneset/web", "--pods", &victim]).await?;
        let (_, after) = wait_converged(&ns, "web", 2, TIMEOUT).await?;
        let kept: Vec<(String, String)> = before
            .iter()
            .filter(|p| name(p) != victim)
            .map(|p| (name(p), uid(p)))
            .collect();
        let now: Vec<(String, String)> = after.iter().map(|p| (name(p), uid(p))).collect();
        ensure!(
            kept == now,
            "{victim} gone, the others kept: {}",
            describe(&after)
        );
        Ok(())
    })
    .await
}

/// `rollout plan` on a partitioned CloneSet with priority weights names exactly the Pods the controller
/// then updates, in that order, and the ones the partition keeps.
#[tokio::test]
async fn rollout_plan_predicts_the_controllers_order() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-plan").await?;
    ns.run(async {
        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1, "partition": 2,
            "priorityStrategy": {"weightPriority": [
                {"weight": 100, "matchSelector": {"matchLabels": {"prio": "high"}}},
                {"weight": 50, "matchSelector": {"matchLabels": {"prio": "mid"}}}]}}}});
        apply(&ns, &cloneset("web", 5, "nginx:alpine", spec)).await?;
        let (cs, before) = wait_converged(&ns, "web", 5, TIMEOUT).await?;
        let (high, mid) = (name(&before[3]), name(&before[0]));
        ns.kubectl(&["label", "pod", &high, "prio=high"]).await?;
        ns.kubectl(&["label", "pod", &mid, "prio=mid"]).await?;

        let text = kruise_ok(
            &ns,
            &[
                "rollout",
                "plan",
                "cloneset/web",
                "--image",
                "nginx=nginx:1.19.1",
            ],
        )
        .await?;
        ensure!(
            text.contains("in place") && text.contains("Stay at their revision (partition 2)"),
            "{text}"
        );
        let (plan, planned) =
            plan_json(&ns, &["cloneset/web", "--image", "nginx=nginx:1.19.1"]).await?;
        let stay: Vec<String> = serde_json::from_value(plan["stay"].clone())?;
        ensure!(
            planned.len() == 3 && planned[0] == high && planned[1] == mid && stay.len() == 2,
            "weights first, 3 updated, 2 kept: {plan}"
        );
        ensure!(
            plan["steps"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s["action"] == "InPlace")),
            "an image change is in place: {plan}"
        );

        let old = status(&cs).update_revision;
        let order = RevisionOrder::start(&ns, "app=web", &old).await?;
        kruise_ok(&ns, &["set", "image", "cloneset/web", "nginx=nginx:1.19.1"]).await?;
        kruise_ok(
            &ns,
            &["rollout", "status", "cloneset/web", "--timeout", "90s"],
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let after = active_pods(&pods, "app=web").await?;
        let kept: Vec<String> = after
            .iter()
            .filter(|p| spec_image(p).as_deref() == Some("nginx:alpine"))
            .map(name)
            .collect();
        let mut stay_sorted = stay.clone();
        stay_sorted.sort();
        ensure!(
            order.order() == planned,
            "planned {planned:?}, controller {:?}",
            order.order()
        );
        ensure!(
            kept == stay_sorted,
            "planned to stay {stay:?}, kept {kept:?}"
        );
        Ok(())
    })
    .await
}

/// `rollout plan uniteddeployment/NAME` previews every CloneSet subset with the partition the
/// UnitedDeployment gives it: it names the Pods the controllers then update and the one subset `a`'s
/// manual partition keeps.
#[tokio::test]
async fn rollout_plan_previews_a_uniteddeployment_by_subset() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-ud-plan").await?;
    ns.run(async {
        let labels = json!({"app": "kk-ud"});
        let ud = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "UnitedDeployment",
            "metadata": {"name": "ud"},
            "spec": {"replicas": 4, "selector": {"matchLabels": labels},
                "template": {"cloneSetTemplate": {"metadata": {"labels": labels},
                    "spec": {"selector": {"matchLabels": labels},
                        "template": {"metadata": {"labels": labels},
                            "spec": {"containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}},
                        "updateStrategy": {"rollingUpdate": {
                            "podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1}}}}},
                "topology": {"subsets": [{"name": "a"}, {"name": "b"}]},
                "updateStrategy": {"manualUpdate": {"partitions": {"a": 1}}}}
        });
        ns.apply(&ud.to_string()).await?;
        let pods: Api<Pod> = ns.api();
        eventually("4 Pods Ready", TIMEOUT, || async {
            let list = active_pods(&pods, "app=kk-ud").await?;
            Ok((list.len() == 4 && list.iter().all(kruise_e2e::is_ready)).then_some(()))
        })
        .await?;
        let new_image = format!("{CONTAINER}=nginx:1.19.1");
        let (plan, planned) =
            plan_json(&ns, &["uniteddeployment/ud", "--image", &new_image]).await?;
        let stay: Vec<String> = serde_json::from_value(plan["stay"].clone())?;
        let subsets: BTreeSet<&str> = plan["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["subset"].as_str())
            .collect();
        ensure!(
            planned.len() == 3 && stay.len() == 1 && subsets == BTreeSet::from(["a", "b"]),
            "3 Pods of both subsets updated, 1 kept: {plan}"
        );
        let subset_of = |list: &[Pod], pod: &str| {
            list.iter().find(|p| name(p) == pod).and_then(|p| {
                p.metadata
                    .labels
                    .as_ref()?
                    .get("apps.kruise.io/subset-name")
                    .cloned()
            })
        };
        let before = active_pods(&pods, "app=kk-ud").await?;
        ensure!(
            subset_of(&before, &stay[0]).as_deref() == Some("a"),
            "subset a's partition keeps {stay:?}"
        );

        kruise_e2e::cloneset_kit::set_uniteddeployment_image(&ns, "ud", "nginx:1.19.1").await?;
        let updated = eventually("3 Pods updated and Ready", TIMEOUT, || async {
            let list = active_pods(&pods, "app=kk-ud").await?;
            let updated: BTreeSet<String> = list
                .iter()
                .filter(|p| {
                    spec_image(p).as_deref() == Some("nginx:1.19.1") && kruise_e2e::is_ready(p)
                })
                .map(name)
                .collect();
            Ok((updated.len() == 3).then_some(updated))
        })
        .await?;
        let planned: BTreeSet<String> = planned.into_iter().collect();
        ensure!(
            updated == planned,
            "planned {planned:?}, the controllers updated {updated:?}"
        );
        Ok(())
    })
    .await
}

/// `rollout status sidecarset/NAME` follows an in-place sidecar upgrade until every matched Pod runs
/// the new sidecar.
#[tokio::test]
async fn rollout_status_follows_a_sidecar_upgrade() -> anyhow::Result<()> {
    use kruise_api::sidecarset::v1beta1::SidecarSet;
    use kruise_e2e::sidecarset_kit::{self, LOGTAIL};

    let ns = managed_namespace("kk-sidecar").await?;
    let name = format!("logtail-{}", ns.name);
    ns.run(async {
        sidecarset_kit::logtail_over_ready_pods(&ns, &name, "kk-sidecar", 3).await?;
        let pods: Api<Pod> = ns.api();
        let target = format!("sidecarset/{name}");
        kruise_ok(&ns, &["rollout", "status", &target, "--timeout", "60s"]).await?;
        let before = active_pods(&pods, "app=kk-sidecar").await?;

        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let image = "log-service/logtail:v2";
        // The plan names every matched Pod, one per batch (maxUnavailable 1), upgraded in place.
        let (plan, planned) =
            plan_json(&ns, &[&target, "--image", &format!("{LOGTAIL}={image}")]).await?;
        let mut names: Vec<String> = before.iter().map(kruise_e2e::cloneset_kit::name).collect();
        names.sort();
        let mut sorted = planned.clone();
        sorted.sort();
        ensure!(sorted == names, "every matched Pod is planned: {plan}");
        ensure!(
            plan["steps"].as_array().is_some_and(|s| s
                .iter()
                .enumerate()
                .all(|(k, s)| s["action"] == "InPlace" && s["batch"] == k + 1)),
            "in place, one per batch: {plan}"
        );
        sidecarset_kit::set_image(&sidecarsets, &name, image).await?;
        let out = kruise_ok(&ns, &["rollout", "status", &target, "--timeout", "90s"]).await?;
        ensure!(
            out.contains(&format!(
                "sidecarset \"{name}\" successfully rolled out (3 of 3 matched Pods updated)"
            )),
            "{out}"
        );
        let after = active_pods(&pods, "app=kk-sidecar").await?;
        let uids = |p: &[Pod]| p.iter().map(uid).collect::<Vec<_>>();
        ensure!(
            uids(&before) == uids(&after),
            "upgraded in place: {}",
            describe(&after)
        );
        ensure!(
            after
                .iter()
                .all(|p| sidecarset_kit::spec_image(p, LOGTAIL) == image
                    && kruise_e2e::is_ready(p)
                    && sidecarset_kit::restarts(p, LOGTAIL) == 1),
            "every Pod runs the new sidecar, restarted once, Ready once status returned 0: {}",
            describe(&after)
        );

        let out = kruise_ok(&ns, &["rollout", "history", &target]).await?;
        ensure!(out.lines().skip(2).count() == 2, "2 revisions: {out}");
        let old_image = sidecarset_kit::spec_image(&before[0], LOGTAIL);
        kruise_ok(&ns, &["rollout", "undo", &target]).await?;
        kruise_ok(&ns, &["rollout", "status", &target, "--timeout", "90s"]).await?;
        let undone = active_pods(&pods, "app=kk-sidecar").await?;
        ensure!(
            uids(&before) == uids(&undone)
                && undone
                    .iter()
                    .all(|p| sidecarset_kit::spec_image(p, LOGTAIL) == old_image
                        && kruise_e2e::is_ready(p)),
            "undo brought {old_image} back in place: {}",
            describe(&undone)
        );
        Ok(())
    })
    .await
}

/// `migrate` moves a 6-replica Deployment to a CloneSet; a monitor sees at least 5 available Pods
/// (the Deployment's replicas − maxUnavailable) throughout.
#[tokio::test]
async fn migrate_keeps_availability() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use kruise_testkit::{Limits, RolloutMonitor};

    let ns = managed_namespace("kk-migrate").await?;
    ns.run(async {
        ns.apply(
            &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "mig", "labels": {"app": "mig"}},
                "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "mig"}},
                    "strategy": {"rollingUpdate": {"maxSurge": 2, "maxUnavailable": 1}},
                    "template": {"metadata": {"labels": {"app": "mig"}},
                        "spec": {"containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}}}})
            .to_string(),
        )
        .await?;
        let deployments: Api<Deployment> = ns.api();
        eventually("deployment/mig available", TIMEOUT, || async {
            let d = deployments.get("mig").await?;
            Ok((d.status.and_then(|s| s.available_replicas) == Some(6)).then_some(()))
        })
        .await?;

        // The migration, first as a dry run.
        const MIGRATE: [&str; 4] = ["migrate", "cloneset", "--from", "deployment/mig"];
        let out = kruise_ok(&ns, &[&MIGRATE[..], &["--dry-run"]].concat()).await?;
        ensure!(
            out.contains("kind: CloneSet") && out.contains("replicas: 6"),
            "{out}"
        );

        let limits = Limits {
            replicas: 6,
            max_unavailable: 1,
            max_surge: 2,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, "app=mig", limits).await?;
        let out = kruise_ok(&ns, &[&MIGRATE[..], &["--timeout", "90s"]].concat()).await?;
        ensure!(
            out.contains("migrated: cloneset/mig runs 6 replicas"),
            "{out}"
        );
        let (_, pods) = wait_converged(&ns, "mig", 6, TIMEOUT).await?;
        monitor.finish().await?;
        let d = deployments.get("mig").await?;
        ensure!(
            d.spec.and_then(|s| s.replicas) == Some(0),
            "the Deployment is left at 0"
        );
        ensure!(
            pods.iter().all(|p| p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "CloneSet")),
            "every Pod is the CloneSet's: {}",
            describe(&pods)
        );
        Ok(())
    })
    .await
}

/// The same commands on an Advanced StatefulSet: set image, status, history, in-place restart, undo to
/// revision 1 in place — the same Pods throughout.
#[tokio::test]
async fn advanced_statefulset_set_restart_undo_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-asts").await?;
    ns.run(async {
        ns.apply(
            &json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
                "metadata": {"name": "db"},
                "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                        "spec": {"readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
                            "containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}}}})
            .to_string(),
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let ready3 = || async {
            let list = active_pods(&pods, "app=db").await?;
            Ok((list.len() == 3 && list.iter().all(kruise_e2e::is_ready)).then_some(list))
        };
        eventually("3 Ready Pods", TIMEOUT, ready3).await?;
        kruise_ok(&ns, &["rollout", "status", "asts/db", "--timeout", "90s"]).await?;
        let before = active_pods(&pods, "app=db").await?;

        let (plan, planned) = plan_json(&ns, &["asts/db", "--image", "nginx=nginx:1.19.1"]).await?;
        let steps: Vec<(&str, i64)> = plan["steps"]
            .as_array()
            .context("steps")?
            .iter()
            .filter(|s| s["action"] == "InPlace")
            .map(|s| (s["pod"].as_str().unwrap_or_default(), s["batch"].as_i64().unwrap_or_default()))
            .collect();
        let want = vec![("db-2", 1), ("db-1", 2), ("db-0", 3)];
        ensure!(planned.len() == 3, "3 Pods: {plan}");
        ensure!(steps == want, "highest ordinal first, one at a time, in place: {plan}");
        kruise_ok(&ns, &["set", "image", "asts/db", "nginx=nginx:1.19.1"]).await?;
        let out = kruise_ok(&ns, &["rollout", "status", "asts/db", "--timeout", "90s"]).await?;
        ensure!(out.contains("statefulset.apps.kruise.io \"db\" successfully rolled out"), "{out}");
        let out = kruise_ok(&ns, &["rollout", "restart", "asts/db"]).await?;
        ensure!(out.contains("restarted (in place)"), "{out}");
        kruise_ok(&ns, &["rollout", "status", "asts/db", "--timeout", "90s"]).await?;
        let out = kruise_ok(&ns, &["rollout", "history", "statefulsets.apps.kruise.io/db"]).await?;
        ensure!(out.lines().skip(2).count() == 3, "3 revisions: {out}");
        kruise_ok(&ns, &["rollout", "undo", "asts/db", "--to-revision", "1"]).await?;
        kruise_ok(&ns, &["rollout", "status", "asts/db", "--timeout", "90s"]).await?;
        let after = eventually("3 Ready Pods on nginx:alpine", TIMEOUT, || async {
            let list = active_pods(&pods, "app=db").await?;
            Ok((list.len() == 3
                && list.iter().all(|p| {
                    kruise_e2e::is_ready(p) && spec_image(p).as_deref() == Some("nginx:alpine")
                }))
            .then_some(list))
        })
        .await?;
        let want = restarted(&before, 3);
        ensure!(
            identities(&after) == want,
            "same Pods, restarted by the image change, the restart and the undo: before {:?}, after {:?}",
            identities(&before),
            identities(&after)
        );
        Ok(())
    })
    .await
}

/// A native Deployment: set image, status, history from its ReplicaSets, undo, pause and resume.
#[tokio::test]
async fn deployment_status_history_undo_pause() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;

    let bed = testbed();
    let ns = bed.namespace("kk-deploy").await?;
    ns.run(async {
        ns.apply(
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}}}})
            .to_string(),
        )
        .await?;
        kruise_ok(
            &ns,
            &["rollout", "status", "deploy/web", "--timeout", "90s"],
        )
        .await?;
        kruise_ok(
            &ns,
            &[
                "set",
                "image",
                "deploy/web",
                "nginx=nginx:1.19.1",
                "--record",
            ],
        )
        .await?;
        let out = kruise_ok(
            &ns,
            &["rollout", "status", "deploy/web", "--timeout", "90s"],
        )
        .await?;
        ensure!(
            out.contains("deployment \"web\" successfully rolled out"),
            "{out}"
        );
        let out = kruise_ok(&ns, &["rollout", "history", "deployment/web"]).await?;
        let rows: Vec<&str> = out.lines().skip(2).collect();
        ensure!(
            rows.len() == 2 && rows[1].contains("set image deploy/web nginx=nginx:1.19.1"),
            "2 revisions, the second recorded: {out}"
        );
        kruise_ok(&ns, &["rollout", "undo", "deploy/web"]).await?;
        kruise_ok(
            &ns,
            &["rollout", "status", "deploy/web", "--timeout", "90s"],
        )
        .await?;
        let deployments: Api<Deployment> = ns.api();
        let d = deployments.get("web").await?;
        let image = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone());
        ensure!(
            image.as_deref() == Some("nginx:alpine"),
            "undo restored the template: {image:?}"
        );
        kruise_ok(&ns, &["rollout", "pause", "deploy/web"]).await?;
        let paused = deployments.get("web").await?.spec.and_then(|s| s.paused);
        ensure!(paused == Some(true), "paused: {paused:?}");
        kruise_ok(&ns, &["rollout", "resume", "deploy/web"]).await?;
        let run = kruise(&ns, &["rollout", "pause", "statefulset/web"]).await?;
        ensure!(
            !run.ok && run.stderr.contains("statefulset cannot be paused"),
            "{run:?}"
        );
        Ok(())
    })
    .await
}

/// A UnitedDeployment of CloneSets over two zones: `rollout status ud/NAME` waits for every subset,
/// `rollout restart` restarts its Pods in place through the subset CloneSets, `history` lists the
/// UnitedDeployment's revisions.
#[tokio::test]
async fn united_deployment_status_and_in_place_restart() -> anyhow::Result<()> {
    let ns = managed_namespace("kk-ud").await?;
    ns.run(async {
        let subset = |name: &str, zone: &str| {
            json!({"name": name, "nodeSelectorTerm": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}})
        };
        ns.apply(
            &json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "UnitedDeployment",
                "metadata": {"name": "app"},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "ud"}},
                    "template": {"cloneSetTemplate": {"metadata": {"labels": {"app": "ud"}},
                        "spec": {"selector": {"matchLabels": {"app": "ud"}},
                            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}},
                            "template": {"metadata": {"labels": {"app": "ud"}},
                                "spec": {"containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}}}}},
                    "topology": {"subsets": [subset("a", "zone-a"), subset("b", "zone-b")]}}})
            .to_string(),
        )
        .await?;
        let out = kruise_ok(&ns, &["rollout", "status", "ud/app", "--timeout", "90s"]).await?;
        ensure!(out.contains("uniteddeployment \"app\" successfully rolled out"), "{out}");
        let pods: Api<Pod> = ns.api();
        let before = eventually("4 Ready Pods", TIMEOUT, || async {
            let list = active_pods(&pods, "app=ud").await?;
            Ok((list.len() == 4 && list.iter().all(kruise_e2e::is_ready)).then_some(list))
        })
        .await?;

        let out = kruise_ok(&ns, &["rollout", "restart", "uniteddeployment/app"]).await?;
        ensure!(out.contains("restarted (in place)"), "{out}");
        kruise_ok(&ns, &["rollout", "status", "ud/app", "--timeout", "90s"]).await?;
        let want = restarted(&before, 1);
        eventually("the same 4 Pods, each restarted once, Ready", TIMEOUT, || async {
            let list = active_pods(&pods, "app=ud").await?;
            Ok((identities(&list) == want && list.iter().all(kruise_e2e::is_ready)).then_some(()))
        })
        .await?;
        let out = kruise_ok(&ns, &["rollout", "history", "ud/app"]).await?;
        ensure!(out.lines().skip(2).count() == 2, "2 revisions: {out}");

        // Undo restores the first template (its revisions hold the v1alpha1 form, which undo writes
        // through v1alpha1): the restart annotation goes, the v1beta1 update strategy stays, and the
        // Pods stay.
        let out = kruise_ok(&ns, &["rollout", "undo", "ud/app"]).await?;
        ensure!(out.contains("rolled back to revision 1"), "{out}");
        let ud: serde_json::Value = serde_json::from_str(
            &ns.kubectl(&["get", "uniteddeployments.v1beta1.apps.kruise.io", "app", "-o", "json"])
                .await?,
        )?;
        let template = &ud["spec"]["template"]["cloneSetTemplate"];
        ensure!(
            template["spec"]["updateStrategy"]["rollingUpdate"]["podUpdatePolicy"] == "InPlaceIfPossible"
                && template["spec"]["template"]["metadata"]["annotations"]
                    .get("kubectl.kubernetes.io/restartedAt")
                    .is_none(),
            "{template}"
        );
        kruise_ok(&ns, &["rollout", "status", "ud/app", "--timeout", "90s"]).await?;
        let uids: BTreeSet<String> = before.iter().map(uid).collect();
        eventually("the same 4 Pods, Ready", TIMEOUT, || async {
            let list = active_pods(&pods, "app=ud").await?;
            let now: BTreeSet<String> = list.iter().map(uid).collect();
            Ok((now == uids && list.iter().all(kruise_e2e::is_ready)).then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

/// An Advanced DaemonSet: a paused rollout updates nothing, resume finishes it in place, restart
/// restarts every Pod in place.
#[tokio::test]
async fn advanced_daemonset_pause_resume_restart() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("kk-ads").await?;
    ns.run(async {
        let nodes = bed.nodes.len();
        ns.apply(
            &json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "DaemonSet",
                "metadata": {"name": "agent"},
                "spec": {"selector": {"matchLabels": {"app": "agent"}},
                    "updateStrategy": {"rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 1}},
                    "template": {"metadata": {"labels": {"app": "agent"}},
                        "spec": {"containers": [{"name": CONTAINER, "image": "nginx:alpine"}]}}}})
            .to_string(),
        )
        .await?;
        let out = kruise_ok(&ns, &["rollout", "status", "ads/agent", "--timeout", "90s"]).await?;
        ensure!(out.contains("daemon set \"agent\" successfully rolled out"), "{out}");
        let pods: Api<Pod> = ns.api();
        let before = active_pods(&pods, "app=agent").await?;
        ensure!(before.len() == nodes, "one Pod per node: {}", describe(&before));

        let (plan, planned) =
            plan_json(&ns, &["ads/agent", "--image", "nginx=nginx:1.19.1"]).await?;
        let node_of = |pod: &str| {
            before
                .iter()
                .find(|p| name(p) == pod)
                .and_then(kruise_e2e::node_name)
                .unwrap_or_default()
        };
        let planned: Vec<String> = planned.iter().map(|p| node_of(p)).collect();
        let mut by_name: Vec<String> = before.iter().filter_map(kruise_e2e::node_name).collect();
        by_name.sort_by(|a, b| b.cmp(a));
        ensure!(planned == by_name, "nodes by name descending: {plan}");
        kruise_ok(&ns, &["rollout", "pause", "daemonset.apps.kruise.io/agent"]).await?;
        kruise_ok(&ns, &["set", "image", "ads/agent", "nginx=nginx:1.19.1"]).await?;
        holds("a paused rollout updates nothing", Duration::from_secs(5), || async {
            let list = active_pods(&pods, "app=agent").await?;
            Ok(list.iter().all(|p| spec_image(p).as_deref() == Some("nginx:alpine")))
        })
        .await?;
        let out = kruise_ok(&ns, &["rollout", "status", "ads/agent", "--watch=false"]).await?;
        ensure!(out.contains("(rollout paused)"), "{out}");
        kruise_ok(&ns, &["rollout", "resume", "ads/agent"]).await?;
        kruise_ok(&ns, &["rollout", "status", "ads/agent", "--timeout", "90s"]).await?;
        let out = kruise_ok(&ns, &["rollout", "restart", "ads/agent"]).await?;
        ensure!(out.contains("restarted (in place)"), "{out}");
        kruise_ok(&ns, &["rollout", "status", "ads/agent", "--timeout", "90s"]).await?;
        let want = restarted(&before, 2);
        eventually("the same Pods, updated and restarted in place, Ready", TIMEOUT, || async {
            let list = active_pods(&pods, "app=agent").await?;
            Ok((identities(&list) == want
                && list.iter().all(|p| {
                    kruise_e2e::is_ready(p) && spec_image(p).is_some_and(|i| i.contains("sha256:"))
                }))
            .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}
