//! ResourceDistribution and EphemeralJob end to end (issue 46), on a real control plane with this
//! binary's kruise-manager started with `--feature-gates=ResourceDistributionGate=true`. Own test
//! binary: its manager owns the cluster's webhook configurations. Every test names what it creates
//! after its namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kruise_api::resourcedistribution::{self as rd, ResourceDistribution};
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{TestNamespace, eventually, testbed};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn namespace(prefix: &str) -> anyhow::Result<TestNamespace> {
    let bed = testbed();
    bed.manager_with(&ManagerOptions {
        extra_args: vec!["--feature-gates=ResourceDistributionGate=true".into()],
        ..ManagerOptions::default()
    });
    bed.namespace(prefix).await
}

/// Creates (or relabels) the namespace `name` with `labels`, as `kubectl apply` would.
async fn put_namespace(
    ns: &TestNamespace,
    name: &str,
    labels: &BTreeMap<&str, &str>,
) -> anyhow::Result<()> {
    let doc = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
    ns.apply(&doc.to_string()).await.map(|_| ())
}

/// The copy of the distributed Secret `secret` in `namespace`, if any.
async fn copy_in(
    ns: &TestNamespace,
    namespace: &str,
    secret: &str,
) -> anyhow::Result<Option<Secret>> {
    let api: Api<Secret> = Api::namespaced(ns.client.clone(), namespace);
    Ok(api.get_opt(secret).await?)
}

fn data(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

fn condition<'a>(
    distribution: &'a ResourceDistribution,
    type_: &str,
) -> Option<&'a rd::ResourceDistributionCondition> {
    distribution
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// A user distributes a Secret with `kubectl apply` to a label-selected set of namespaces plus a
/// list (one of which does not exist), next to a namespace holding a Secret of the same name of its
/// own; then adds a namespace, changes the source, relabels a namespace away, deletes a copy by
/// hand, and deletes the distribution. Copies follow each step; the foreign Secret is never touched.
#[tokio::test]
async fn resource_distribution_follows_namespaces_and_source() -> anyhow::Result<()> {
    let ns = namespace("rd-follow").await?;
    ns.run(async {
        let id = ns.name.clone();
        let secret = "shared-credentials";
        let team: BTreeMap<&str, &str> = [("rd-team", id.as_str())].into();
        let (a, b, listed, foreign, late, ghost) = (
            format!("{id}-a"),
            format!("{id}-b"),
            format!("{id}-listed"),
            format!("{id}-foreign"),
            format!("{id}-late"),
            format!("{id}-ghost"),
        );
        for name in [&a, &b, &foreign] {
            put_namespace(&ns, name, &team).await?;
        }
        put_namespace(&ns, &listed, &BTreeMap::new()).await?;
        // A Secret of the same name that is not the distribution's.
        let mine: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret}, "stringData": {"user": "theirs"}}))?;
        Api::<Secret>::namespaced(ns.client.clone(), &foreign)
            .create(&Default::default(), &mine)
            .await?;

        let yaml = format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: ResourceDistribution
metadata:
  name: {id}
spec:
  resource:
    apiVersion: v1
    kind: Secret
    metadata:
      name: {secret}
      labels:
        app: demo
    type: Opaque
    stringData:
      user: admin
  targets:
    includedNamespaces:
      list:
      - name: {listed}
      - name: {ghost}
    namespaceLabelSelector:
      matchLabels:
        rd-team: {id}
"#
        );
        ns.apply(&yaml).await?;
        let distributions: Api<ResourceDistribution> = Api::all(ns.client.clone());

        // Copies in a, b and the listed namespace, owned, annotated, with the source's content.
        for namespace in [&a, &b, &listed] {
            let copy = eventually(format!("the copy in {namespace}"), TIMEOUT, || async {
                copy_in(&ns, namespace, secret).await
            })
            .await?;
            ensure!(
                data(&copy, "user").as_deref() == Some("admin"),
                "{namespace}: {copy:?}"
            );
            let annotations = copy.metadata.annotations.clone().unwrap_or_default();
            ensure!(
                annotations.get(rd::ANNOTATION_FROM) == Some(&id),
                "{annotations:?}"
            );
            ensure!(
                annotations.contains_key(rd::ANNOTATION_HASH),
                "{annotations:?}"
            );
            let owner = copy.metadata.owner_references.clone().unwrap_or_default();
            ensure!(
                owner.iter().any(|o| o.kind == "ResourceDistribution"
                    && o.name == id
                    && o.controller == Some(true)),
                "{owner:?}"
            );
            ensure!(
                copy.metadata
                    .labels
                    .clone()
                    .unwrap_or_default()
                    .get("app")
                    .map(String::as_str)
                    == Some("demo")
            );
        }
        // The foreign Secret is reported, not taken; the missing namespace is reported.
        let status = eventually(
            "status with the conflict and the missing namespace",
            TIMEOUT,
            || async {
                let d = distributions.get(&id).await?;
                let s = d.status.clone().unwrap_or_default();
                let conflict = condition(&d, rd::CONDITION_CONFLICT)
                    .map(|c| (c.status.clone(), c.failed_namespaces.clone()));
                let missing = condition(&d, rd::CONDITION_NAMESPACE_NOT_EXISTS)
                    .map(|c| (c.status.clone(), c.failed_namespaces.clone()));
                Ok((s.desired == 5
                    && s.succeeded == 3
                    && s.failed == 2
                    && s.observed_generation == d.metadata.generation.unwrap_or_default()
                    && conflict == Some(("True".into(), vec![foreign.clone()]))
                    && missing == Some(("True".into(), vec![ghost.clone()])))
                .then_some(d))
            },
        )
        .await?;
        let types: Vec<&str> = status
            .status
            .as_ref()
            .map(|s| s.conditions.iter().map(|c| c.type_.as_str()).collect())
            .unwrap_or_default();
        ensure!(types == rd::CONDITION_TYPES, "{types:?}");
        let foreign_copy = copy_in(&ns, &foreign, secret)
            .await?
            .context("foreign Secret")?;
        ensure!(data(&foreign_copy, "user").as_deref() == Some("theirs"));
        ensure!(foreign_copy.metadata.owner_references.is_none());

        // A namespace that comes later gets its copy.
        put_namespace(&ns, &late, &team).await?;
        eventually("the copy in the late namespace", TIMEOUT, || async {
            copy_in(&ns, &late, secret).await
        })
        .await?;

        // The source changes: every copy follows.
        ns.kubectl(&[
            "patch",
            "resourcedistribution",
            &id,
            "--type=merge",
            "-p",
            &json!({"spec": {"resource": {"stringData": {"user": "root"}}}}).to_string(),
        ])
        .await?;
        for namespace in [&a, &b, &listed, &late] {
            eventually(
                format!("the copy in {namespace} updated"),
                TIMEOUT,
                || async {
                    Ok(copy_in(&ns, namespace, secret)
                        .await?
                        .filter(|c| data(c, "user").as_deref() == Some("root")))
                },
            )
            .await?;
        }

        // Relabelled away: the copy goes. Deleted by hand: it comes back.
        put_namespace(&ns, &a, &[("rd-team", "someone-else")].into()).await?;
        let secrets_b: Api<Secret> = Api::namespaced(ns.client.clone(), &b);
        let before = secrets_b.get(secret).await?.metadata.uid;
        secrets_b.delete(secret, &DeleteParams::default()).await?;
        eventually("the copy in a deleted", TIMEOUT, || async {
            Ok(copy_in(&ns, &a, secret).await?.is_none().then_some(()))
        })
        .await?;
        eventually("the copy in b recreated", TIMEOUT, || async {
            Ok(copy_in(&ns, &b, secret)
                .await?
                .filter(|c| c.metadata.uid != before))
        })
        .await?;
        eventually("status after the changes", TIMEOUT, || async {
            let d = distributions.get(&id).await?;
            let s = d.status.clone().unwrap_or_default();
            Ok((s.desired == 5 && s.succeeded == 3).then_some(()))
        })
        .await?;

        // The distribution deleted: its copies go with it (garbage collector), the foreign one stays.
        distributions
            .delete(&id, &DeleteParams::foreground())
            .await?;
        for namespace in [&b, &listed, &late] {
            eventually(format!("the copy in {namespace} gone"), TIMEOUT, || async {
                Ok(copy_in(&ns, namespace, secret)
                    .await?
                    .is_none()
                    .then_some(()))
            })
            .await?;
        }
        ensure!(
            copy_in(&ns, &foreign, secret).await?.is_some(),
            "the foreign Secret was deleted"
        );
        let namespaces: Api<Namespace> = Api::all(ns.client.clone());
        for name in [&a, &b, &listed, &foreign, &late] {
            namespaces.delete(name, &DeleteParams::default()).await.ok();
        }
        Ok(())
    })
    .await
}

/// Everything but the excluded namespaces, and a ConfigMap: the copy appears in a new namespace and
/// not in the excluded one; the webhook refuses what upstream's refuses.
#[tokio::test]
async fn resource_distribution_all_namespaces_and_validation() -> anyhow::Result<()> {
    let ns = namespace("rd-all").await?;
    ns.run(async {
        let id = ns.name.clone();
        let excluded = format!("{id}-excluded");
        put_namespace(&ns, &excluded, &BTreeMap::new()).await?;
        let doc = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": id},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{id}-cm")}, "data": {"k": "v"}},
                "targets": {"allNamespaces": true, "excludedNamespaces": {"list": [{"name": excluded}, {"name": "kube-system"}]}}
            }
        });
        ns.apply(&doc.to_string()).await?;
        let configmaps = |namespace: &str| -> Api<k8s_openapi::api::core::v1::ConfigMap> {
            Api::namespaced(ns.client.clone(), namespace)
        };
        let cm = format!("{id}-cm");
        eventually("the copy in the test namespace and default", TIMEOUT, || async {
            let here = configmaps(&ns.name).get_opt(&cm).await?;
            let default = configmaps("default").get_opt(&cm).await?;
            Ok((here.is_some() && default.is_some()).then_some(()))
        })
        .await?;
        let distributions: Api<ResourceDistribution> = Api::all(ns.client.clone());
        let all: Api<Namespace> = Api::all(ns.client.clone());
        eventually("desired = every namespace but the two excluded", TIMEOUT, || async {
            let count = all.list(&ListParams::default()).await?.items.len();
            let d = distributions.get(&id).await?;
            let s = d.status.unwrap_or_default();
            Ok((s.desired as usize + 2 == count && s.succeeded == s.desired).then_some(()))
        })
        .await?;
        ensure!(configmaps(&excluded).get_opt(&cm).await?.is_none(), "copied into the excluded namespace");
        ensure!(configmaps("kube-system").get_opt(&cm).await?.is_none(), "copied into kube-system");

        // The webhook: the resource's name is immutable, only Secrets and ConfigMaps, no ambiguity.
        let rename = ns.kubectl(&["patch", "resourcedistribution", &id, "--type=merge", "-p",
            &json!({"spec": {"resource": {"metadata": {"name": "other"}}}}).to_string()]).await;
        let message = format!("{:#}", rename.err().context("a renamed resource was accepted")?);
        ensure!(message.contains("immutable"), "{message}");
        let mut pod = doc.clone();
        pod["metadata"]["name"] = json!(format!("{id}-pod"));
        pod["spec"]["resource"] = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let message = format!("{:#}", ns.apply(&pod.to_string()).await.err().context("a Pod was accepted")?);
        ensure!(message.contains("only support"), "{message}");
        let mut ambiguous = doc.clone();
        ambiguous["metadata"]["name"] = json!(format!("{id}-ambiguous"));
        ambiguous["spec"]["targets"] = json!({"includedNamespaces": {"list": [{"name": "x"}]}, "excludedNamespaces": {"list": [{"name": "x"}]}});
        let message = format!("{:#}", ns.apply(&ambiguous.to_string()).await.err().context("ambiguous targets were accepted")?);
        ensure!(message.contains("ambiguous targets"), "{message}");
        // A resource the apiserver can never store (a ConfigMap over 1 MiB) is refused by the
        // webhook's dry-run create, as upstream's, instead of failing in every namespace later.
        let mut oversized = doc.clone();
        oversized["metadata"]["name"] = json!(format!("{id}-oversized"));
        oversized["spec"]["resource"] = json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{id}-big")},
            "data": {"big": "x".repeat(1_100_000)},
        });
        let oversized: ResourceDistribution = serde_json::from_value(oversized)?;
        let refusal = distributions
            .create(&Default::default(), &oversized)
            .await
            .err()
            .context("a ConfigMap over 1 MiB was accepted")?
            .to_string();
        ensure!(
            refusal.contains("spec.resource") && refusal.contains("dry-run"),
            "{refusal}"
        );

        distributions.delete(&id, &DeleteParams::default()).await?;
        eventually("the copies gone", TIMEOUT, || async {
            Ok(configmaps("default").get_opt(&cm).await?.is_none().then_some(()))
        })
        .await?;
        all.delete(&excluded, &DeleteParams::default()).await.ok();
        Ok(())
    })
    .await
}

/// The uid of every Pod `pods` lists, by name.
async fn pod_uids(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p.metadata.uid))
        .collect())
}

/// The ephemeral containers of `pod` (names) and the state of each (`running`, `exit <code>`,
/// `waiting`), as `kubectl get pod -o yaml` shows them.
fn ephemeral(pod: &k8s_openapi::api::core::v1::Pod) -> (Vec<String>, BTreeMap<String, String>) {
    let names = pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let states = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|s| {
            let state = s.state.clone().unwrap_or_default();
            let text = match (&state.running, &state.terminated) {
                (Some(_), _) => "running".to_string(),
                (_, Some(t)) => format!("exit {}", t.exit_code),
                _ => "waiting".to_string(),
            };
            (s.name.clone(), text)
        })
        .collect();
    (names, states)
}

/// A user applies an EphemeralJob selecting three of four Pods (`replicas: 2`, `parallelism: 1`):
/// the two oldest matching Pods get the container, one at a time, through
/// `pods/ephemeralcontainers`; each runs and exits 0 (kubelet-sim reports
/// `ephemeralContainerStatuses`); the job's status counts them and reaches Succeeded with a
/// completion time; no Pod is restarted or deleted; after `ttlSecondsAfterFinished` the job is gone
/// and the Pods stay.
#[tokio::test]
async fn ephemeral_job_injects_into_matching_pods_and_completes() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kruise_api::ephemeraljob::{self as ej, EphemeralJob};
    let ns = namespace("ejob").await?;
    ns.run(async {
        let pods: Api<Pod> = ns.api();
        for (name, app) in [("p0", "web"), ("p1", "web"), ("p2", "web"), ("other", "db")] {
            let doc = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}});
            ns.apply(&doc.to_string()).await?;
            // Created one after the other, so "oldest first" is p0, p1, p2.
            eventually(format!("{name} running"), TIMEOUT, || async {
                Ok(pods
                    .get(name)
                    .await?
                    .status
                    .and_then(|s| s.phase)
                    .filter(|p| p == "Running"))
            })
            .await?;
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        let before = pod_uids(&pods).await?;
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: EphemeralJob
metadata:
  name: debug
spec:
  selector:
    matchLabels:
      app: web
  replicas: 2
  parallelism: 1
  ttlSecondsAfterFinished: 5
  template:
    ephemeralContainers:
    - name: debugger
      image: busybox:1.34
      imagePullPolicy: IfNotPresent
      terminationMessagePolicy: File
      command: ["sh", "-c", "echo hello"]
      targetContainerName: main
      env:
      - name: SIM_RUN_MS
        value: "1500"
"#,
        )
        .await?;
        let jobs: Api<EphemeralJob> = ns.api();
        // One at a time: while p0's container runs, p1 has none.
        let running = eventually("p0's container running", TIMEOUT, || async {
            let p0 = ephemeral(&pods.get("p0").await?);
            Ok((p0.1.get("debugger").map(String::as_str) == Some("running")).then_some(()))
        })
        .await;
        running?;
        let (p1_names, _) = ephemeral(&pods.get("p1").await?);
        ensure!(
            p1_names.is_empty(),
            "p1 injected while p0 ran (parallelism 1): {p1_names:?}"
        );
        let job = eventually("the job Running with one running", TIMEOUT, || async {
            let job = jobs.get("debug").await?;
            let s = job.status.clone().unwrap_or_default();
            Ok((s.phase == ej::PHASE_RUNNING && s.running == 1 && s.matches == 2).then_some(job))
        })
        .await?;
        ensure!(
            job.metadata
                .finalizers
                .clone()
                .unwrap_or_default()
                .contains(&ej::FINALIZER.to_string()),
            "{:?}",
            job.metadata.finalizers
        );

        let done = eventually("the job Succeeded", TIMEOUT, || async {
            let job = jobs.get("debug").await?;
            let s = job.status.clone().unwrap_or_default();
            Ok((s.phase == ej::PHASE_SUCCEEDED).then_some(s))
        })
        .await?;
        ensure!(
            (
                done.matches,
                done.succeeded,
                done.failed,
                done.running,
                done.waiting
            ) == (2, 2, 0, 0, 0),
            "{done:?}"
        );
        ensure!(
            done.completion_time.is_some() && done.start_time.is_some(),
            "{done:?}"
        );
        let types: Vec<&str> = done.conditions.iter().map(|c| c.type_.as_str()).collect();
        ensure!(
            types.contains(&ej::CONDITION_INITIALIZED) && types.contains(&ej::CONDITION_SUCCEEDED),
            "{types:?}"
        );
        for name in ["p0", "p1"] {
            let pod = pods.get(name).await?;
            let (names, states) = ephemeral(&pod);
            ensure!(names == ["debugger"], "{name}: {names:?}");
            ensure!(
                states.get("debugger").map(String::as_str) == Some("exit 0"),
                "{name}: {states:?}"
            );
            let env = pod
                .spec
                .as_ref()
                .and_then(|s| s.ephemeral_containers.as_ref())
                .and_then(|c| c[0].env.clone())
                .unwrap_or_default();
            ensure!(
                env.iter()
                    .any(|e| e.name == ej::ENV_JOB_ID && e.value == job.metadata.uid),
                "{env:?}"
            );
        }
        for name in ["p2", "other"] {
            let (names, _) = ephemeral(&pods.get(name).await?);
            ensure!(names.is_empty(), "{name} injected: {names:?}");
        }

        // TTL: the job goes, every Pod stays (same UIDs, still running).
        eventually("the job deleted after its TTL", TIMEOUT, || async {
            Ok(jobs.get_opt("debug").await?.is_none().then_some(()))
        })
        .await?;
        let after = pod_uids(&pods).await?;
        ensure!(after == before, "Pods changed: {before:?} -> {after:?}");
        Ok(())
    })
    .await
}

/// A container that fails makes the Pod count as failed and the job Failed when every target
/// failed; `activeDeadlineSeconds` fails a job that cannot finish (paused: nothing is injected).
#[tokio::test]
async fn ephemeral_job_failures_and_deadline() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kruise_api::ephemeraljob::{self as ej, EphemeralJob};
    let ns = namespace("ejob-fail").await?;
    ns.run(async {
        let pods: Api<Pod> = ns.api();
        let doc = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "target", "labels": {"app": "fail"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:alpine"}]}});
        ns.apply(&doc.to_string()).await?;
        eventually("the Pod running", TIMEOUT, || async {
            Ok(pods
                .get("target")
                .await?
                .status
                .and_then(|s| s.phase)
                .filter(|p| p == "Running"))
        })
        .await?;
        let job = |name: &str, extra: &str, exit: &str| {
            format!(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: EphemeralJob
metadata:
  name: {name}
spec:
  selector:
    matchLabels:
      app: fail
{extra}
  template:
    ephemeralContainers:
    - name: {name}
      image: busybox:1.34
      imagePullPolicy: IfNotPresent
      terminationMessagePolicy: File
      env:
      - name: SIM_EXIT_CODE
        value: "{exit}"
"#
            )
        };
        ns.apply(&job("broken", "", "3")).await?;
        let jobs: Api<EphemeralJob> = ns.api();
        let failed = eventually("the failing job Failed", TIMEOUT, || async {
            let s = jobs.get("broken").await?.status.unwrap_or_default();
            Ok((s.phase == ej::PHASE_FAILED).then_some(s))
        })
        .await?;
        ensure!(
            failed.failed == 1 && failed.completion_time.is_some(),
            "{failed:?}"
        );
        ensure!(
            failed
                .conditions
                .iter()
                .any(|c| c.type_ == ej::CONDITION_FAILED),
            "{:?}",
            failed.conditions
        );

        ns.apply(&job(
            "held",
            "  paused: true\n  activeDeadlineSeconds: 3",
            "0",
        ))
        .await?;
        let paused = eventually("the paused job Paused", TIMEOUT, || async {
            let s = jobs.get("held").await?.status.unwrap_or_default();
            Ok((s.phase == ej::PHASE_PAUSED).then_some(s))
        })
        .await?;
        ensure!(paused.matches == 1, "{paused:?}");
        ns.kubectl(&[
            "patch",
            "ephemeraljob",
            "held",
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":false,"parallelism":0}}"#,
        ])
        .await?;
        let expired = eventually("the job Failed past its deadline", TIMEOUT, || async {
            let s = jobs.get("held").await?.status.unwrap_or_default();
            Ok((s.phase == ej::PHASE_FAILED).then_some(s))
        })
        .await?;
        ensure!(
            expired
                .conditions
                .iter()
                .any(|c| c.reason == "DeadlineExceeded"),
            "{:?}",
            expired.conditions
        );
        let (names, _) = ephemeral(&pods.get("target").await?);
        ensure!(
            !names.contains(&"held".to_string()),
            "the paused job injected: {names:?}"
        );

        // An ephemeral container named as one of the Pod's own: the apiserver refuses it, and the
        // job says so as upstream does (`kubectl describe ephemeraljob main`).
        ns.apply(&job("main", "", "0")).await?;
        let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
        let selector =
            "involvedObject.kind=EphemeralJob,involvedObject.name=main,reason=CreateFailed";
        let want = format!(
            "failed to create ephemeral container in pod {}/target: ",
            ns.name
        );
        let refused = eventually("the CreateFailed Warning", TIMEOUT, || async {
            let list = events.list(&ListParams::default().fields(selector)).await?;
            Ok(list.items.into_iter().find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref().is_some_and(|m| m.starts_with(&want))
            }))
        })
        .await?;
        ensure!(
            refused.reporting_component.as_deref() == Some("ephemeraljob-controller"),
            "{refused:?}"
        );
        Ok(())
    })
    .await
}

/// EphemeralJobs OpenKruise's `vephemeraljobs.kb.io` refuses are refused, the field named; and
/// an invalid selector (which upstream leaves to fail in the controller).
#[tokio::test]
async fn ephemeral_job_validation() -> anyhow::Result<()> {
    let ns = namespace("ejob-invalid").await?;
    ns.run(async {
        let jobs: Api<kruise_api::ephemeraljob::EphemeralJob> = ns.api();
        let container = json!({
            "name": "debugger", "image": "busybox:1.34", "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File",
        });
        // (name, selector, containers, the field the refusal names)
        let cases = [
            (
                "bogus",
                json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
                json!([container]),
                "spec.selector.matchExpressions[0].operator",
            ),
            (
                "space",
                json!({"matchLabels": {"app": "has space!"}}),
                json!([container]),
                "spec.selector.matchLabels[app]",
            ),
            (
                "policy",
                json!({"matchLabels": {"app": "web"}}),
                json!([{"name": "debugger", "image": "busybox:1.34"}]),
                "spec.template.ephemeralContainers[0].imagePullPolicy",
            ),
            (
                "ports",
                json!({"matchLabels": {"app": "web"}}),
                json!([{"name": "debugger", "image": "busybox:1.34", "imagePullPolicy": "IfNotPresent",
                        "terminationMessagePolicy": "File", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]),
                "spec.template.ephemeralContainers[0].ports",
            ),
        ];
        for (name, selector, containers, field) in cases {
            let job: kruise_api::ephemeraljob::EphemeralJob = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "EphemeralJob",
                "metadata": {"name": name},
                "spec": {"selector": selector, "template": {"ephemeralContainers": containers}},
            }))?;
            let refusal = jobs
                .create(&Default::default(), &job)
                .await
                .err()
                .with_context(|| format!("EphemeralJob {name} was stored"))?
                .to_string();
            ensure!(
                refusal.contains("vephemeraljobs.kb.io") && refusal.contains(field),
                "EphemeralJob {name}: {refusal}"
            );
        }
        Ok(())
    })
    .await
}
