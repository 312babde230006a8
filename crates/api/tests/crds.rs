//! The checked-in CRDs in `config/crd/` are exactly what the types generate, and have the shape OpenKruise's
//! CRDs have (both versions served, v1beta1 stored, conversion by webhook, schemaless Pod templates).

use std::path::PathBuf;

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
    assert!(stale.is_empty(), "stale CRDs (run `make crds`): {stale:?}");
}

#[test]
fn crds_serve_both_versions_store_v1beta1_and_convert_by_webhook() {
    for crd in crd::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let versions: Vec<(&str, bool, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
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
