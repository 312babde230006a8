//! Pods that should carry a SidecarSet's sidecars but do not: created while the Pod webhook was down
//! (or not yet synced) under failure policy `Ignore`, so the apiserver admitted them unchanged.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::canary_base;
use kruise_api::sidecarset::hash::ANNOTATION_HASH;
use kruise_api::sidecarset::v1beta1::{HOT_UPGRADE, SidecarSet};

use super::{hot_upgrade_names, matches, parse_upgrade_specs};

/// Names (sorted) of the SidecarSets that should have been injected into `pod` at its creation but
/// were not.
///
/// A SidecarSet is reported when all of these hold:
/// - it [`matches`] the Pod (`namespace_labels` and `excluded_namespaces` as for [`matches`]), is not
///   `injectionStrategy.paused`, and injects at least one container or init container;
/// - it is not shadowed by a canary SidecarSet that also applies (the canary is injected instead);
/// - the Pod was created after the SidecarSet (Pods that predate it were never meant to get it; an
///   unknown timestamp on either side counts as "after", to err on the side of reporting);
/// - the Pod has no entry for it in `kruise.io/sidecarset-hash` **and** none of its containers (for a
///   hot-upgrade container, neither `<name>-1` nor `<name>-2`).
///
/// An unreadable hash annotation counts as no entry.
pub fn missing_injections(
    pod: &Pod,
    sidecarsets: &[&SidecarSet],
    namespace_labels: &BTreeMap<String, String>,
    excluded_namespaces: &[String],
) -> Vec<String> {
    // The webhook is never asked about Pods of an opted-out namespace: nothing was missed there.
    if namespace_labels.contains_key(super::OPT_OUT_NAMESPACE_LABEL) {
        return Vec::new();
    }
    let applying: Vec<&SidecarSet> = sidecarsets
        .iter()
        .copied()
        .filter(|s| !s.spec.injection_strategy.paused)
        .filter(|s| !s.spec.containers.is_empty() || !s.spec.init_containers.is_empty())
        .filter(|s| matches(s, pod, namespace_labels, excluded_namespaces))
        .collect();
    let shadowed: HashSet<&str> = applying
        .iter()
        .filter_map(|s| canary_base(&s.metadata))
        .collect();
    let recorded = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| parse_upgrade_specs(a, ANNOTATION_HASH).ok())
        .unwrap_or_default();
    let present = super::pod_container_names(pod);
    let mut missing = BTreeSet::new();
    for sidecarset in applying {
        let name = sidecarset.metadata.name.as_deref().unwrap_or_default();
        if shadowed.contains(name) || recorded.contains_key(name) || predates(pod, sidecarset) {
            continue;
        }
        let any_present = sidecarset
            .spec
            .containers
            .iter()
            .chain(&sidecarset.spec.init_containers)
            .any(|c| {
                if present.contains(c.name.as_str()) {
                    return true;
                }
                if c.upgrade_strategy.upgrade_type != HOT_UPGRADE {
                    return false;
                }
                let (first, second) = hot_upgrade_names(&c.name);
                present.contains(first.as_str()) || present.contains(second.as_str())
            });
        if !any_present {
            missing.insert(name.to_string());
        }
    }
    missing.into_iter().collect()
}

/// Whether the Pod was created strictly before the SidecarSet.
fn predates(pod: &Pod, sidecarset: &SidecarSet) -> bool {
    match (
        &pod.metadata.creation_timestamp,
        &sidecarset.metadata.creation_timestamp,
    ) {
        (Some(pod_created), Some(set_created)) => pod_created.0 < set_created.0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kruise_api::KindApi;
    use kruise_api::sidecarset;
    use serde_json::{Value, json};

    fn set(name: &str, extra: Value) -> SidecarSet {
        let mut value = json!({
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "containers": [{"name": format!("{name}-c"), "image": "s:1"}],
            },
        });
        merge(&mut value, extra);
        let mut object: SidecarSet = serde_json::from_value(value).expect("sidecarset");
        <sidecarset::Api as KindApi>::default(&mut object);
        object
    }

    fn merge(target: &mut Value, extra: Value) {
        match (target, extra) {
            (Value::Object(t), Value::Object(e)) => {
                for (k, v) in e {
                    merge(t.entry(k).or_insert(Value::Null), v);
                }
            }
            (t, e) => *t = e,
        }
    }

    fn pod(extra: Value) -> Pod {
        let mut value = json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                "creationTimestamp": "2026-02-01T00:00:00Z"},
            "spec": {"containers": [{"name": "main", "image": "m:1"}]},
        });
        merge(&mut value, extra);
        serde_json::from_value(value).expect("pod")
    }

    fn hash_entry(name: &str) -> String {
        json!({name: {"hash": "h", "sidecarSetName": name, "sidecarList": [format!("{name}-c")]}})
            .to_string()
    }

    #[test]
    fn table() {
        let labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let cases: Vec<(&str, Pod, Vec<SidecarSet>, Vec<&str>)> = vec![
            (
                "matched, never injected",
                pod(json!({})),
                vec![set("log", json!({}))],
                vec!["log"],
            ),
            (
                "selector does not match",
                pod(json!({"metadata": {"labels": {"app": "db"}}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "injected: container and hash entry",
                pod(json!({
                    "metadata": {"annotations": {ANNOTATION_HASH: hash_entry("log")}},
                    "spec": {"containers": [{"name": "log-c", "image": "s:1"}, {"name": "main", "image": "m:1"}]},
                })),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "hash entry only (container renamed since): not missing",
                pod(json!({"metadata": {"annotations": {ANNOTATION_HASH: hash_entry("log")}}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "container only (same-named app container replaced): not missing",
                pod(json!({"spec": {"containers": [{"name": "log-c", "image": "x"}]}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "hot-upgrade twin present",
                pod(json!({"spec": {"containers": [{"name": "hot-c-1", "image": "s:1"}]}})),
                vec![set(
                    "hot",
                    json!({"spec": {"containers": [{"name": "hot-c", "image": "s:1",
                        "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}}]}}),
                )],
                vec![],
            ),
            (
                "init container counts",
                pod(json!({"spec": {"initContainers": [{"name": "init-c", "image": "i"}]}})),
                vec![set(
                    "init",
                    json!({"spec": {"containers": [], "initContainers": [{"name": "init-c", "image": "i"}]}}),
                )],
                vec![],
            ),
            (
                "paused injection is not expected",
                pod(json!({})),
                vec![set(
                    "log",
                    json!({"spec": {"injectionStrategy": {"paused": true}}}),
                )],
                vec![],
            ),
            (
                "nothing to inject",
                pod(json!({})),
                vec![set("meta", json!({"spec": {"containers": []}}))],
                vec![],
            ),
            (
                "kube-system is never injected",
                pod(json!({"metadata": {"namespace": "kube-system"}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "excluded namespace (the manager's)",
                pod(json!({"metadata": {"namespace": "kruise-system"}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "namespaceSelector against the Namespace labels",
                pod(json!({})),
                vec![
                    set(
                        "team-a",
                        json!({"spec": {"namespaceSelector": {"matchLabels": {"team": "a"}}}}),
                    ),
                    set(
                        "team-b",
                        json!({"spec": {"namespaceSelector": {"matchLabels": {"team": "b"}}}}),
                    ),
                ],
                vec!["team-a"],
            ),
            (
                "Pod older than the SidecarSet",
                pod(json!({"metadata": {"creationTimestamp": "2025-12-01T00:00:00Z"}})),
                vec![set("log", json!({}))],
                vec![],
            ),
            (
                "no timestamps: reported",
                pod(json!({"metadata": {"creationTimestamp": null}})),
                vec![set("log", json!({}))],
                vec!["log"],
            ),
            (
                "a canary shadows its base",
                pod(json!({})),
                vec![
                    set("base", json!({})),
                    set(
                        "canary",
                        json!({"metadata": {"annotations": {
                        "apps.kruise.io/sidecarset-canary": "true",
                        "apps.kruise.io/sidecarset-base": "base"}}}),
                    ),
                ],
                vec!["canary"],
            ),
            (
                "several, sorted, one of them injected",
                pod(json!({"metadata": {"annotations": {ANNOTATION_HASH: hash_entry("b")}}})),
                vec![
                    set("c", json!({})),
                    set("b", json!({})),
                    set("a", json!({})),
                ],
                vec!["a", "c"],
            ),
            (
                "unreadable hash annotation counts as no entry",
                pod(json!({"metadata": {"annotations": {ANNOTATION_HASH: "{"}}})),
                vec![set("log", json!({}))],
                vec!["log"],
            ),
        ];
        let excluded = vec!["kruise-system".to_string()];
        // A namespace opted out of the Pod webhook (`control-plane` label): its Pods were never
        // sent to it, so none of them missed anything.
        let opted_out = BTreeMap::from([("control-plane".to_string(), "x".to_string())]);
        let log = set("log", json!({}));
        assert!(missing_injections(&pod(json!({})), &[&log], &opted_out, &excluded).is_empty());
        for (name, pod, sets, want) in cases {
            let refs: Vec<&SidecarSet> = sets.iter().collect();
            assert_eq!(
                missing_injections(&pod, &refs, &labels, &excluded),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn an_injected_pod_is_never_missing_its_sidecarsets() {
        let sets = [set("a", json!({})), set("b", json!({}))];
        let refs: Vec<&SidecarSet> = sets.iter().collect();
        let original = pod(json!({}));
        let revisions = BTreeMap::new();
        let ctx = super::super::InjectContext {
            now: k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time"),
            revisions: &revisions,
            random: &|| 0.5,
            sort_sidecars_by_name: false,
        };
        let injected = super::super::inject(&original, &refs, &ctx).expect("inject");
        let labels = BTreeMap::new();
        assert_eq!(
            missing_injections(&original, &refs, &labels, &[]),
            vec!["a", "b"]
        );
        assert!(missing_injections(&injected.pod, &refs, &labels, &[]).is_empty());
    }
}
