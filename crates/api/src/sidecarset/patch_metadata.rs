//! The whitelist of Pod annotations a SidecarSet may patch (`spec.patchPodMetadata`). OpenKruise
//! refuses a SidecarSet whose patchPodMetadata writes an annotation no rule allows. The rules live in
//! the ConfigMap `kruise-configuration` of the manager's namespace, key
//! `SidecarSet_PatchPodMetadata_WhiteList`, as JSON:
//! `{"rules":[{"selector":{...},"allowedAnnotationKeyExprs":["^example\\.io/.*"]}]}`. A rule applies
//! to the SidecarSets its selector matches (every SidecarSet without one); an expression is a
//! regular expression matched anywhere in the key (Go's `MatchString`, not anchored).
//!
//! Without a whitelist (no ConfigMap, no key) or without a rule for the SidecarSet, every such
//! SidecarSet is refused unless the `SidecarSetPatchPodMetadataDefaultsAllowed` gate is on, which
//! then allows any annotation (upstream `pkg/control/sidecarcontrol/util.go`,
//! `ValidateSidecarSetPatchMetadataWhitelist`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use regex::Regex;
use serde::Deserialize;

use super::v1beta1::SidecarSet;
use crate::field::{FieldError, Path};
use crate::validation::selector_matches;

/// The ConfigMap holding OpenKruise's runtime configuration, in the manager's namespace.
pub const CONFIGMAP: &str = "kruise-configuration";
/// Its key holding the whitelist.
pub const WHITELIST_KEY: &str = "SidecarSet_PatchPodMetadata_WhiteList";

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Whitelist {
    #[serde(default)]
    pub rules: Vec<Rule>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// The SidecarSets (by their labels) the rule applies to; none: every SidecarSet.
    pub selector: Option<LabelSelector>,
    #[serde(default)]
    pub allowed_annotation_key_exprs: Vec<String>,
}

/// The whitelist as the ConfigMap's data holds it: `None` when the key is absent; an error naming the
/// ConfigMap key when its JSON does not parse.
pub fn parse_whitelist(
    data: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<Option<Whitelist>, String> {
    let Some(text) = data.and_then(|d| d.get(WHITELIST_KEY)) else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| format!("ConfigMap {CONFIGMAP} key {WHITELIST_KEY}: {e}"))
}

/// The error refusing `sidecarset`'s patchPodMetadata, if any. `defaults_allowed`: the
/// `SidecarSetPatchPodMetadataDefaultsAllowed` gate.
pub fn check(
    sidecarset: &SidecarSet,
    whitelist: Option<&Whitelist>,
    defaults_allowed: bool,
) -> Option<FieldError> {
    let patches = &sidecarset.spec.patch_pod_metadata;
    if patches.is_empty() {
        return None;
    }
    let path = Path::new("spec").child("patchPodMetadata");
    let refuse = |detail: String| Some(FieldError::required(&path, detail));
    let Some(whitelist) = whitelist else {
        return if defaults_allowed {
            None
        } else {
            refuse("SidecarSet patch metadata whitelist not found".into())
        };
    };
    let labels = sidecarset.metadata.labels.clone().unwrap_or_default();
    let mut allowed = Vec::new();
    for rule in &whitelist.rules {
        if rule
            .selector
            .as_ref()
            .is_some_and(|s| !selector_matches(s, &labels))
        {
            continue;
        }
        for expr in &rule.allowed_annotation_key_exprs {
            match Regex::new(expr) {
                Ok(regex) => allowed.push(regex),
                Err(error) => {
                    return refuse(format!(
                        "invalid allowedAnnotationKeyExprs {expr:?} in {CONFIGMAP}: {error}"
                    ));
                }
            }
        }
    }
    if allowed.is_empty() {
        return if defaults_allowed {
            None
        } else {
            refuse("sidecarSet patch metadata annotation is not allowed".into())
        };
    }
    let mut keys = patches.iter().flat_map(|p| p.annotations.keys());
    keys.find(|key| !allowed.iter().any(|r| r.is_match(key)))
        .and_then(|key| {
            refuse(format!(
                "sidecarSet patch metadata annotation({key}) is not allowed"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sidecarset(labels: serde_json::Value, annotations: &[&str]) -> SidecarSet {
        let patch: Vec<serde_json::Value> = if annotations.is_empty() {
            Vec::new()
        } else {
            let map: serde_json::Map<String, serde_json::Value> = annotations
                .iter()
                .map(|k| (k.to_string(), json!("v")))
                .collect();
            vec![json!({"annotations": map})]
        };
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "s", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "patchPodMetadata": patch},
        }))
        .expect("sidecarset")
    }

    fn whitelist(value: serde_json::Value) -> Whitelist {
        serde_json::from_value(value).expect("whitelist")
    }

    /// (SidecarSet labels, annotations patched, whitelist, gate, what the refusal says)
    type Case<'a> = (
        serde_json::Value,
        &'a [&'a str],
        Option<&'a Whitelist>,
        bool,
        Option<&'a str>,
    );

    #[test]
    fn decisions() {
        let any_rule =
            whitelist(json!({"rules": [{"allowedAnnotationKeyExprs": ["^example\\.io/"]}]}));
        let team_rule = whitelist(json!({"rules": [{
            "selector": {"matchLabels": {"team": "a"}},
            "allowedAnnotationKeyExprs": ["gray"]}]}));
        let empty = Whitelist::default();
        let cases: &[Case] = &[
            (json!({}), &[], None, false, None),
            (json!({}), &["a"], None, false, Some("whitelist not found")),
            (json!({}), &["a"], None, true, None),
            (json!({}), &["example.io/x"], Some(&any_rule), false, None),
            (
                json!({}),
                &["example.io/x", "other/y"],
                Some(&any_rule),
                false,
                Some("annotation(other/y) is not allowed"),
            ),
            // The gate does not override a whitelist that has a rule for the SidecarSet.
            (
                json!({}),
                &["other/y"],
                Some(&any_rule),
                true,
                Some("other/y"),
            ),
            // Unanchored, as Go's MatchString.
            (
                json!({"team": "a"}),
                &["x/gray-level"],
                Some(&team_rule),
                false,
                None,
            ),
            (
                json!({"team": "b"}),
                &["x/gray-level"],
                Some(&team_rule),
                false,
                Some("annotation is not allowed"),
            ),
            (
                json!({"team": "b"}),
                &["x/gray-level"],
                Some(&team_rule),
                true,
                None,
            ),
            (
                json!({}),
                &["a"],
                Some(&empty),
                false,
                Some("annotation is not allowed"),
            ),
        ];
        for (i, (labels, keys, list, gate, want)) in cases.iter().enumerate() {
            let got = check(&sidecarset(labels.clone(), keys), *list, *gate);
            match (want, &got) {
                (None, None) => {}
                (Some(want), Some(error)) => {
                    let text = error.to_string();
                    assert!(text.contains(want), "case {i}: {text}");
                    assert!(
                        text.starts_with("spec.patchPodMetadata"),
                        "case {i}: {text}"
                    );
                }
                _ => panic!("case {i}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn parsing_names_the_key() {
        let mut data = std::collections::BTreeMap::new();
        assert_eq!(parse_whitelist(Some(&data)), Ok(None));
        data.insert(WHITELIST_KEY.to_string(), "{not json".to_string());
        let error = parse_whitelist(Some(&data)).expect_err("bad JSON");
        assert!(error.contains(WHITELIST_KEY), "{error}");
        data.insert(
            WHITELIST_KEY.to_string(),
            r#"{"rules":[{"allowedAnnotationKeyExprs":["a"]}]}"#.to_string(),
        );
        let parsed = parse_whitelist(Some(&data))
            .expect("valid")
            .expect("present");
        assert_eq!(parsed.rules[0].allowed_annotation_key_exprs, ["a"]);
    }
}
