//! Every apps.kruise.io manifest in `examples/` is valid once defaulted, in whichever version it is
//! written (the end-to-end tests also create them through the apiserver).

use std::path::PathBuf;

use kruise_api::kinds::{Kind, V1BETA1};
use serde::Deserialize;

fn examples() -> Vec<(String, serde_json::Value)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut documents = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable example");
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_json::Value::deserialize(document).expect("example is YAML");
            if value.is_null() {
                continue;
            }
            documents.push((file.display().to_string(), value));
        }
    }
    documents
}

#[test]
fn every_kruise_example_validates_after_defaulting() {
    let mut checked = 0;
    for (file, document) in examples() {
        let api_version = document["apiVersion"].as_str().unwrap_or_default();
        if !api_version.starts_with("apps.kruise.io/") {
            continue;
        }
        let kind =
            Kind::from_kind(document["kind"].as_str().unwrap_or_default()).expect("known kind");
        let v1beta1 = kind.convert(document, V1BETA1).expect("converts");
        let defaulted = kind.default_object(v1beta1).expect("defaults");
        let errors = kind.validate(defaulted, None).expect("decodes");
        assert!(
            errors.is_empty(),
            "{file}: {}",
            kruise_api::field::join(&errors)
        );
        checked += 1;
    }
    assert!(checked > 0, "no examples found");
}
