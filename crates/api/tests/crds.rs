//! The checked-in CRDs in `config/crd/` are exactly what the types generate, and have the shape OpenKruise's
//! CRDs have (both versions served, v1beta1 stored, conversion by webhook, schemaless Pod templates).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::crd;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd")
}

#[test]
fn checked_in_crds_are_up_to_date() {
    let mut stale = Vec::new();
    for crd in crd::all() {
        let path = crd_dir().join(crd::file_name(&crd));
        let want = crd::to_yaml(&crd).expect("CRD serializes");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale CRDs (run `make manifests`): {stale:?}"
    );
}

#[test]
fn crds_serve_both_versions_store_v1beta1_and_convert_by_webhook() {
    let single: Vec<Option<String>> = crd::v1alpha1_only()
        .into_iter()
        .map(|crd| crd.metadata.name)
        .collect();
    for crd in crd::all()
        .into_iter()
        .filter(|crd| crd.spec.group == "apps.kruise.io")
        .filter(|crd| !single.contains(&crd.metadata.name))
    {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let versions = served_and_stored(&crd);
        assert_eq!(
            versions,
            [("v1alpha1", true, false), ("v1beta1", true, true)],
            "{name}"
        );
        let conversion = crd.spec.conversion.as_ref().expect("conversion");
        assert_eq!(conversion.strategy, "Webhook", "{name}");
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(&version.schema).expect("schema");
            let template = schema.pointer("/openAPIV3Schema/properties/spec/properties/template");
            // UnitedDeployment's template is a choice of workload templates: the Pod templates inside them
            // (or their whole spec, when upstream leaves it schemaless) are the schemaless parts.
            let workload_templates = template
                .and_then(|t| t.get("properties"))
                .and_then(|p| p.as_object());
            if let Some(workloads) = workload_templates {
                for (workload, schema) in workloads {
                    // AdvancedCronJob: its Job template is schemaless as a whole, and its
                    // ImageListPullJob template holds no Pod.
                    if schema["x-kubernetes-preserve-unknown-fields"] == true
                        || workload == "imageListPullJobTemplate"
                    {
                        continue;
                    }
                    let spec = &schema["properties"]["spec"];
                    let pod = spec.pointer("/properties/template").unwrap_or(spec);
                    assert_eq!(
                        pod["x-kubernetes-preserve-unknown-fields"], true,
                        "{name} {} {workload}",
                        version.name
                    );
                }
            } else if let Some(template) = template {
                assert_eq!(
                    template["x-kubernetes-preserve-unknown-fields"], true,
                    "{name} {}",
                    version.name
                );
            }
            assert!(
                version
                    .subresources
                    .as_ref()
                    .is_some_and(|s| s.status.is_some()),
                "{name} status"
            );
        }
    }
}

/// policy.kruise.io's PodUnavailableBudget is served and stored in v1alpha1 only, as in v1.9.0: no
/// conversion, a status subresource, upstream's short name and printer columns.
#[test]
fn pod_unavailable_budget_crd_is_v1alpha1_only() {
    let all = crd::all();
    let pub_crd = all
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("podunavailablebudgets.policy.kruise.io"))
        .expect("the PodUnavailableBudget CRD");
    let versions = served_and_stored(pub_crd);
    assert_eq!(versions, [("v1alpha1", true, true)]);
    assert!(pub_crd.spec.conversion.is_none());
    assert_eq!(
        pub_crd.spec.names.short_names,
        Some(vec!["pub".to_string()])
    );
    let version = &pub_crd.spec.versions[0];
    assert!(
        version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some())
    );
    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Allowed", "Current", "Desired", "Total"]);
    assert_eq!(
        crd::file_name(pub_crd),
        "policy.kruise.io_podunavailablebudgets.yaml"
    );
}

/// The v1alpha1-only kinds (ResourceDistribution, EphemeralJob) are served and stored in v1alpha1,
/// without conversion, as in v1.9.0.
#[test]
fn v1alpha1_only_crds_serve_and_store_v1alpha1() {
    for crd in crd::v1alpha1_only() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let versions = served_and_stored(&crd);
        assert_eq!(versions, [("v1alpha1", true, true)], "{name}");
        assert!(crd.spec.conversion.is_none(), "{name}");
        assert!(
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some()),
            "{name} status"
        );
    }
}

/// The field paths of a schema node, in the notation of `tests/fixtures/openkruise-v1.9/README.md`:
/// properties joined with `.`, `[]` for array items, `{}` for map values, `/*` where unknown fields are
/// kept.
fn field_paths(node: &serde_json::Value, path: &str, out: &mut BTreeSet<String>) {
    if node["x-kubernetes-preserve-unknown-fields"] == true {
        out.insert(format!("{path}/*"));
    }
    if let Some(properties) = node["properties"].as_object() {
        for (name, child) in properties {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            out.insert(child_path.clone());
            field_paths(child, &child_path, out);
        }
    }
    if node["items"].is_object() {
        field_paths(&node["items"], &format!("{path}[]"), out);
    }
    if node["additionalProperties"].is_object() {
        field_paths(&node["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// Whether kruise-rs's schema (`ours`, all its paths) serves `path` of OpenKruise's.
fn serves(ours: &BTreeSet<String>, path: &str) -> bool {
    // The apiserver serves these in every CRD version whatever its schema says (and validates metadata
    // itself); controller-gen writes them into the schema, kube's derive does not.
    if matches!(path, "apiVersion" | "kind" | "metadata") || ours.contains(path) {
        return true;
    }
    // Below a node that keeps unknown fields, everything is kept.
    let kept_below = path
        .char_indices()
        .filter(|(_, c)| matches!(c, '.' | '[' | '{' | '/'))
        .any(|(at, _)| ours.contains(&format!("{}/*", &path[..at])));
    // A schemaless list upstream (`spec.volumes/*`) that kruise-rs describes as a list of objects keeping
    // unknown fields: every value its Go type (`[]Volume`) accepts is kept.
    let kept_list = path
        .strip_suffix("/*")
        .is_some_and(|list| ours.contains(&format!("{list}[]/*")));
    kept_below || kept_list
}

/// The kinds of OpenKruise v1.9.0 that kruise-rs does not serve yet: their paths are not checked (the test
/// prints them so that nobody takes them for covered).
const NOT_SERVED: &[&str] = &[];

/// Every field path of OpenKruise v1.9.0's CRDs (`tests/fixtures/openkruise-v1.9/crd-field-paths.tsv`,
/// from its `config/crd/bases`) is in kruise-rs's generated CRD of the same kind and version, for every
/// kind and version both serve: a v1.9 manifest decodes strictly and nothing of it is pruned. kruise-rs may
/// serve more (fields, and versions v1.9.0 does not serve, such as CloneSet and UnitedDeployment v1beta1).
#[test]
fn every_openkruise_v1_9_field_path_is_served() {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/openkruise-v1.9/crd-field-paths.tsv");
    let text = std::fs::read_to_string(&fixture).expect("the fixture of v1.9.0's field paths");
    let mut upstream: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (kind_version, path) = line.split_once('\t').expect("kind/version<TAB>path");
        upstream
            .entry(kind_version.to_string())
            .or_default()
            .push(path.to_string());
    }

    let mut ours: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for crd in crd::all() {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(&version.schema).expect("schema");
            let mut paths = BTreeSet::new();
            field_paths(&schema["openAPIV3Schema"], "", &mut paths);
            let key = format!(
                "{}/{}/{}",
                crd.spec.group, crd.spec.names.kind, version.name
            );
            ours.insert(key, paths);
        }
    }
    let served_kinds: BTreeSet<String> = ours
        .keys()
        .filter_map(|k| k.rsplit_once('/').map(|(kind, _)| kind.to_string()))
        .collect();

    let mut missing = Vec::new();
    let mut checked = Vec::new();
    let mut not_served = BTreeSet::new();
    for (kind_version, paths) in &upstream {
        let kind = kind_version
            .rsplit_once('/')
            .map_or(kind_version.as_str(), |(kind, _)| kind);
        if !served_kinds.contains(kind) {
            not_served.insert(kind.to_string());
            continue;
        }
        let empty = BTreeSet::new();
        let our_paths = ours.get(kind_version).unwrap_or(&empty);
        let absent: Vec<&String> = paths.iter().filter(|p| !serves(our_paths, p)).collect();
        checked.push(format!("{kind_version} ({} paths)", paths.len()));
        for path in absent {
            missing.push(format!("{kind_version}\t{path}"));
        }
    }
    println!("checked against OpenKruise v1.9.0: {}", checked.join(", "));
    let extra: Vec<&String> = ours.keys().filter(|k| !upstream.contains_key(*k)).collect();
    println!("served by kruise-rs only (not in v1.9.0, not checked): {extra:?}");
    println!("NOT checked, kinds of v1.9.0 kruise-rs does not serve: {not_served:?}");
    println!("missing: {}", missing.len());
    for line in &missing {
        println!("  {line}");
    }
    assert!(
        missing.is_empty(),
        "{} field paths of OpenKruise v1.9.0 are not in kruise-rs's CRDs:\n{}",
        missing.len(),
        missing.join("\n")
    );
    let expected: BTreeSet<String> = NOT_SERVED.iter().map(|k| k.to_string()).collect();
    assert_eq!(
        not_served, expected,
        "the kinds of v1.9.0 kruise-rs does not serve changed: update NOT_SERVED"
    );
}

/// Each version's name and whether it is served and stored.
fn served_and_stored(crd: &CustomResourceDefinition) -> Vec<(&str, bool, bool)> {
    crd.spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect()
}

/// The table of served kinds names each kind as its CRD does, once, and holds OpenKruise v1.9.0's
/// 18 kinds.
#[test]
fn each_served_kind_is_one_line_that_names_it_as_its_crd() {
    let mut seen = BTreeSet::new();
    for served in crd::SERVED {
        let crd = (served.crd)();
        assert_eq!(
            (crd.spec.group.as_str(), crd.spec.names.kind.as_str()),
            (served.group, served.kind),
            "the line of {}",
            served.kind
        );
        assert!(crd::served(served.group, served.kind));
        assert!(
            seen.insert((served.group, served.kind)),
            "{} twice",
            served.kind
        );
    }
    assert_eq!(seen.len(), 18);
    assert!(!crd::served("apps.kruise.io", "Rollout"));
}
