//! Helpers for the Advanced StatefulSet end-to-end tests: a set's Pods in ordinal order, its status
//! and conditions, waiting for a complete rollout, a StatefulSet document with a claim template, the
//! order Pods appear and go under OrderedReady, and the identity (names, hostnames, claims) a user
//! compares with Kubernetes' own StatefulSet.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::statefulset::v1beta1::StatefulSet;
use kruise_testkit::{TestNamespace, eventually};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cloneset_kit::{describe, label, name};
use crate::is_ready;

/// The Pods of `selector`, in ordinal order.
pub async fn set_pods(ns: &TestNamespace, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = ns.api();
    let mut list = pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    list.sort_by_key(|p| {
        let n = name(p);
        let ordinal = n.rsplit('-').next().and_then(|o| o.parse::<i64>().ok());
        (ordinal, n)
    });
    Ok(list)
}

/// The StatefulSet `set` of the namespace.
pub async fn get_set(ns: &TestNamespace, set: &str) -> anyhow::Result<StatefulSet> {
    let sets: Api<StatefulSet> = ns.api();
    Ok(sets.get(set).await?)
}

/// Waits until the set's status has observed its generation, counts `replicas` Ready Pods at the
/// update revision, and the rollout is complete.
pub async fn wait_complete(
    ns: &TestNamespace,
    set: &str,
    selector: &str,
    replicas: i32,
    timeout: Duration,
) -> anyhow::Result<(StatefulSet, Vec<Pod>)> {
    eventually(
        format!("StatefulSet {set} complete with {replicas} Ready updated Pods"),
        timeout,
        || async {
            let s = get_set(ns, set).await?;
            let Some(st) = s.status.clone() else {
                return Ok(None);
            };
            let pods = set_pods(ns, selector).await?;
            let done = s.metadata.generation == Some(st.observed_generation)
                && st.replicas == replicas
                && st.updated_replicas == replicas
                && st.ready_replicas == replicas
                && st.current_revision == st.update_revision
                && pods.len() == replicas as usize
                && pods.iter().all(is_ready);
            Ok(done.then_some((s, pods)))
        },
    )
    .await
    .map_err(|e| {
        let seen = futures_status(ns, set);
        anyhow::anyhow!("{e:#}; last status: {seen}")
    })
}

/// The set's status as last seen, for a failure message.
pub fn futures_status(ns: &TestNamespace, set: &str) -> String {
    let sets: Api<StatefulSet> = ns.api();
    let set = set.to_owned();
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .ok()
            .and_then(|rt| rt.block_on(sets.get(&set)).ok())
            .map(|s| format!("{:?}", s.status))
            .unwrap_or_default()
    })
    .join()
    .unwrap_or_default()
}

/// The `(status, reason, message)` of the set's condition `type_`, if present.
pub fn condition(set: &StatefulSet, type_: &str) -> Option<(String, String, String)> {
    crate::condition_of!(set.status.as_ref()?.conditions, type_)
}

/// The uid of each claim of the namespace not being deleted, by claim name.
pub async fn claim_uids(ns: &TestNamespace) -> anyhow::Result<BTreeMap<String, String>> {
    let claims: Api<PersistentVolumeClaim> = ns.api();
    Ok(claims
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| {
            (
                c.metadata.name.unwrap_or_default(),
                c.metadata.uid.unwrap_or_default(),
            )
        })
        .collect())
}

/// Sets the set's `spec.replicas` (a merge patch, as `kubectl scale` does).
pub async fn scale(ns: &TestNamespace, set: &str, replicas: i32) -> anyhow::Result<()> {
    let sets: Api<StatefulSet> = ns.api();
    sets.patch(
        set,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    Ok(())
}

/// An Advanced StatefulSet of `api_version` running `image` in container `nginx`, selecting
/// `app=<set>`, with a `data` claim template; `extra` is merged over it (JSON merge patch).
pub fn stateful_set(
    api_version: &str,
    set: &str,
    replicas: i32,
    image: &str,
    extra: Value,
) -> Value {
    let mut doc = json!({
        "apiVersion": api_version,
        "kind": "StatefulSet",
        "metadata": {"name": set},
        "spec": {
            "replicas": replicas,
            "serviceName": set,
            "selector": {"matchLabels": {"app": set}},
            "template": {
                "metadata": {"labels": {"app": set}},
                "spec": {"containers": [{"name": "nginx", "image": image}]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    });
    json_patch::merge(&mut doc, &extra);
    doc
}

/// What makes an Advanced StatefulSet update in place (`extra` for [`stateful_set`]): Parallel, the
/// InPlaceUpdateReady readiness gate and `podUpdatePolicy: InPlaceIfPossible`, with `rolling_update`
/// merged into its `rollingUpdate`.
pub fn in_place(rolling_update: Value) -> Value {
    let mut extra = json!({"spec": {
        "podManagementPolicy": "Parallel",
        "template": {"spec": {"readinessGates": [{"conditionType": "InPlaceUpdateReady"}]}},
        "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}},
    }});
    json_patch::merge(
        &mut extra["spec"]["updateStrategy"]["rollingUpdate"],
        &rolling_update,
    );
    extra
}

/// Watches the Pods of `selector` until `done`, recording the order in which Pods appear and are
/// deleted, and failing if two Pods are ever not Ready at once (OrderedReady).
pub async fn ordered_history(
    ns: &TestNamespace,
    selector: &str,
    timeout: Duration,
    done: impl Fn(&[Pod]) -> bool,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut seen: Vec<String> = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    let mut last: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pods = set_pods(ns, selector).await?;
        let current: Vec<String> = pods.iter().map(name).collect();
        for n in &current {
            if !seen.contains(n) {
                seen.push(n.clone());
            }
        }
        for n in &last {
            if !current.contains(n) && !gone.contains(n) {
                gone.push(n.clone());
            }
        }
        let not_ready = pods
            .iter()
            .filter(|p| !is_ready(p) || p.metadata.deletion_timestamp.is_some())
            .count();
        ensure!(
            not_ready <= 1,
            "OrderedReady had {not_ready} Pods not Ready at once:\n{}",
            describe(&pods)
        );
        if done(&pods) {
            return Ok((seen, gone));
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "timed out; Pods:\n{}",
            describe(&pods)
        );
        last = current;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The identity a user compares between the two controllers: Pod names, hostnames, subdomains,
/// identity labels and claim names.
/// Name, hostname, subdomain, and the claims and identity labels of one Pod.
pub type Identity = (String, Option<String>, Option<String>, Vec<String>);

pub fn identity(pods: &[Pod]) -> Vec<Identity> {
    pods.iter()
        .map(|p| {
            let spec = p.spec.clone().unwrap_or_default();
            let mut claims: Vec<String> = spec
                .volumes
                .unwrap_or_default()
                .into_iter()
                .filter_map(|v| v.persistent_volume_claim.map(|c| c.claim_name))
                .collect();
            claims.push(format!(
                "pod-name={:?} pod-index={:?}",
                label(p, "statefulset.kubernetes.io/pod-name"),
                label(p, "apps.kubernetes.io/pod-index"),
            ));
            (name(p), spec.hostname, spec.subdomain, claims)
        })
        .collect()
}

/// The storage capacity a claim's volume has (`status.capacity.storage`).
pub fn storage_capacity(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
}

/// The Pod's `controller-revision-hash` label (empty when absent).
pub fn revision_label(pod: &Pod) -> String {
    label(pod, "controller-revision-hash")
        .unwrap_or_default()
        .to_owned()
}

/// A merge patch setting the template's `nginx` container to `image`.
pub fn set_image_patch(image: &str) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}})
}
