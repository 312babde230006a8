//! ControllerRevisions of a CloneSet: the recorded data, its hash and name, revision numbering, the
//! choice between re-using and creating a revision, and history truncation.
//!
//! The hash follows Kubernetes' `controller/history` helpers exactly: 32-bit **FNV-1** (Go's
//! `fnv.New32()`, not FNV-1a) over the revision's raw data followed by the decimal collision count,
//! then the decimal rendering of the 32-bit sum mapped character by character onto the "safe"
//! alphabet of `rand.SafeEncodeString`. Because only digits are encoded, a hash only ever uses the ten
//! letters `4 5 6 7 8 9 b c d f`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kruise_api::cloneset::v1beta1::CloneSet;
use serde_json::{Map, Value};

pub mod go_fields;

/// Label carrying the revision hash on every ControllerRevision (`history.ControllerRevisionHashLabel`).
pub const LABEL_REVISION_HASH: &str = "controller.kubernetes.io/hash";
/// Label on Pods holding the short hash (`apps.DefaultDeploymentUniqueLabelKey`).
pub const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// `revisionHistoryLimit` when the CloneSet leaves it unset.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// Longest parent-name prefix kept in a revision name, so the name stays within 253 bytes.
const MAX_NAME_PREFIX: usize = 223;

/// `rand.SafeEncodeString`'s alphabet: no vowels, no easily confused characters, so no words.

#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    #[error("cannot encode the Pod template: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("the CloneSet has no name")]
    NoName,
    #[error("the CloneSet has no uid")]
    NoUid,
    #[error("revision {0} holds no data")]
    NoData(String),
    #[error("revision {revision} does not hold a Pod template at spec.template: {source}")]
    NoTemplate {
        revision: String,
        source: serde_json::Error,
    },
}

/// 32-bit FNV-1: multiply, then xor (the order FNV-1a reverses).
pub fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        hash.wrapping_mul(0x0100_0193) ^ u32::from(b)
    })
}

pub use kruise_api::gojson::safe_encode;

/// The revision hash of raw revision data with an optional collision count.
pub fn hash_revision_data(data: &[u8], collision_count: Option<i32>) -> String {
    let mut input = data.to_vec();
    if let Some(count) = collision_count {
        input.extend_from_slice(count.to_string().as_bytes());
    }
    safe_encode(&fnv1_32(&input).to_string())
}

/// `<parent>-<hash>`, the parent truncated to 223 bytes (on a character boundary).
pub fn revision_name(parent: &str, hash: &str) -> String {
    let mut end = parent.len().min(MAX_NAME_PREFIX);
    while !parent.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &parent[..end])
}

/// The hash part of a revision name (or of a Pod's revision label): the text after the last `-`.
pub fn short_hash(name: &str) -> &str {
    name.rsplit('-').next().unwrap_or(name)
}

/// Whether a Pod whose `controller-revision-hash` label is `pod_label` belongs to `revision`. Either
/// side may be the full name or only the hash (the `CloneSetShortHash` form), so the hashes decide.
pub fn pod_label_matches_revision(pod_label: &str, revision: &str) -> bool {
    pod_label == revision || short_hash(pod_label) == short_hash(revision)
}

/// The revision data for a Pod template: a strategic-merge patch that replaces the whole template,
/// `{"spec":{"template":{...,"$patch":"replace"}}}`, as a JSON value, with the empty fields Go writes
/// ([`go_fields`]) so that it hashes as OpenKruise's does.
pub fn revision_data(template: &PodTemplateSpec) -> Result<Value, RevisionError> {
    let mut template = serde_json::to_value(template)?;
    go_fields::pod_template(&mut template);
    let mut template = match template {
        Value::Object(map) => map,
        // A struct always serializes to an object; anything else would be a serde bug.
        _ => Map::new(),
    };
    template.insert("$patch".into(), Value::String("replace".into()));
    let mut spec = Map::new();
    spec.insert("template".into(), Value::Object(template));
    let mut data = Map::new();
    data.insert("spec".into(), Value::Object(spec));
    Ok(Value::Object(data))
}

/// The bytes that are hashed: compact JSON with object keys in byte order and Go's escaping, which is
/// what Go's `json.Marshal` of the same `map[string]interface{}` produces.
pub fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = String::new();
    write_go_json(value, &mut out);
    out.into_bytes()
}

fn write_go_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_go_number(n, out),
        Value::String(s) => kruise_api::gojson::write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sort explicitly: serde_json's map order depends on a crate feature some other
            // workspace member may switch on.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                kruise_api::gojson::write_string(key, out);
                out.push(':');
                write_go_json(item, out);
            }
            out.push('}');
        }
    }
}

/// Go decodes numbers into float64 and prints them with `strconv.FormatFloat(f, 'f' or 'e', -1, 64)`:
/// integral values below 1e21 without a fraction, tiny or huge ones with a two-digit signed exponent.
fn write_go_number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
        return;
    }
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
        return;
    }
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exponent),
        };
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
    } else if f.fract() == 0.0 {
        let _ = write!(out, "{f:.0}");
    } else {
        let _ = write!(out, "{f}");
    }
}

/// What a revision belongs to: its kind (for the owner reference) and metadata (name, uid and the
/// annotations the revision carries).
pub struct Parent<'a> {
    pub kind: &'a str,
    pub meta: &'a ObjectMeta,
}

/// A ControllerRevision of `data`, numbered `number`, in `namespace`: named `<parent>-<hash>`,
/// labelled with `labels` plus the hash label, annotated with the parent's annotations and
/// controlled by the parent (so the garbage collector removes it with the parent), as Kubernetes'
/// `history.NewControllerRevision` builds one.
pub fn build_revision(
    parent: Parent<'_>,
    namespace: Option<String>,
    mut labels: BTreeMap<String, String>,
    data: Value,
    number: i64,
    collision_count: Option<i32>,
) -> Result<ControllerRevision, RevisionError> {
    let name = parent.meta.name.as_deref().ok_or(RevisionError::NoName)?;
    let uid = parent.meta.uid.clone().ok_or(RevisionError::NoUid)?;
    // Upstream's controllers probe with a collision count that defaults to 0 (`new(int32)` when the
    // status holds none), so "no count yet" hashes as 0 does.
    let hash = hash_revision_data(&canonical_json(&data), Some(collision_count.unwrap_or(0)));
    labels.insert(LABEL_REVISION_HASH.into(), hash.clone());
    Ok(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(name, &hash)),
            namespace,
            labels: Some(labels),
            annotations: parent.meta.annotations.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps.kruise.io/v1beta1".into(),
                kind: parent.kind.into(),
                name: name.into(),
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    })
}

/// A new ControllerRevision for the CloneSet's current template, numbered `number`.
///
/// Like upstream it carries the template's labels plus the hash label, the CloneSet's annotations
/// and a controller owner reference; the namespace is the CloneSet's.
pub fn new_revision(
    cs: &CloneSet,
    number: i64,
    collision_count: Option<i32>,
) -> Result<ControllerRevision, RevisionError> {
    let labels = cs
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut revision = build_revision(
        Parent {
            kind: "CloneSet",
            meta: &cs.metadata,
        },
        cs.metadata.namespace.clone(),
        labels,
        revision_data(&cs.spec.template)?,
        number,
        collision_count,
    )?;
    revision
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            ANNOTATION_VCT_HASH.to_owned(),
            vct_hash(&cs.spec.volume_claim_templates),
        );
    Ok(revision)
}

/// The annotation on CloneSet revisions recording the CloneSet's volumeClaimTemplates when the
/// revision was last made the update revision (OpenKruise writes it on every CloneSet revision).
pub const ANNOTATION_VCT_HASH: &str = "kruise.io/cloneset-volumeclaimtemplate-hash";

/// The prefix of the [`ANNOTATION_VCT_HASH`] values kruise-rs writes. OpenKruise writes a bare
/// decimal hash of a Go debug print of the templates, which cannot be reproduced here; the prefix
/// tells the two apart, so that a revision OpenKruise wrote is never taken to record other templates
/// than one kruise-rs wrote (see [`vct_hashes_allow_in_place`]).
const VCT_HASH_PREFIX: &str = "fnv1-";

/// The [`ANNOTATION_VCT_HASH`] value for `templates`: empty without templates, as OpenKruise's;
/// else a hash of their names and specs in name order (their other fields do not make a claim).
pub fn vct_hash(templates: &[k8s_openapi::api::core::v1::PersistentVolumeClaim]) -> String {
    if templates.is_empty() {
        return String::new();
    }
    let mut claims: Vec<Value> = templates
        .iter()
        .map(|t| {
            serde_json::json!({
                "metadata": {"name": t.metadata.name},
                "spec": t.spec,
            })
        })
        .collect();
    claims.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let bytes = canonical_json(&Value::Array(claims));
    format!("{VCT_HASH_PREFIX}{}", fnv1_32(&bytes))
}

/// Whether the volumeClaimTemplates hashes of a Pod's revision (`old`) and of the update revision
/// (`new`) let the Pod be updated in place under `RecreatePodWhenChangeVCTInCloneSetGate`: only
/// hashes that are both known and comparable (both empty, or both written by kruise-rs) and differ
/// force a recreation. A missing hash allows it, as upstream's `CanVCTemplateInplaceUpdate` (the
/// revision predates the annotation); so does a hash OpenKruise wrote compared with one of
/// kruise-rs, whose values cannot be compared.
pub fn vct_hashes_allow_in_place(old: Option<&str>, new: Option<&str>) -> bool {
    let comparable = |h: &str| h.is_empty() || h.starts_with(VCT_HASH_PREFIX);
    match (old, new) {
        (Some(old), Some(new)) if comparable(old) && comparable(new) => old == new,
        _ => true,
    }
}

/// The Pod template a revision records.
pub fn template_from_revision(rev: &ControllerRevision) -> Result<PodTemplateSpec, RevisionError> {
    let name = rev.metadata.name.clone().unwrap_or_default();
    let data = rev
        .data
        .as_ref()
        .ok_or_else(|| RevisionError::NoData(name.clone()))?;
    let mut template = data
        .0
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).map_err(|source| RevisionError::NoTemplate {
        revision: name,
        source,
    })
}

/// The number for the next revision: one more than the highest in use, 1 for an empty history.
pub fn next_revision_number(revisions: &[ControllerRevision]) -> i64 {
    revisions.iter().map(|r| r.revision).max().unwrap_or(0) + 1
}

/// Whether two revisions record the same state. Data is compared as JSON values, not bytes: a
/// revision read back from the API server may be re-encoded, and the same template must still be
/// recognised (upstream compares raw bytes). Data that differs only in fields holding `null` or `{}`
/// records the same state too: revisions written before revision data carried Go's empty fields
/// ([`go_fields`]) must still be found, or every workload would get a new revision on upgrade.
pub fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    match (a.data.as_ref(), b.data.as_ref()) {
        (Some(a), Some(b)) => {
            a.0 == b.0
                || go_fields::without_empty_fields(a.0.clone())
                    == go_fields::without_empty_fields(b.0.clone())
        }
        (a, b) => a.is_none() && b.is_none(),
    }
}

/// Whether a revision found under `candidate`'s name is a hash collision (different data), in which
/// case the caller bumps `collisionCount` and computes a new name.
pub fn is_collision(existing: &ControllerRevision, candidate: &ControllerRevision) -> bool {
    !equal_revision(existing, candidate)
}

/// What to do with the update revision computed from the current template.
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateRevision<'a> {
    /// The newest revision already records this template: nothing to write.
    Latest(&'a ControllerRevision),
    /// An older revision records it (a rollback): patch its `revision` to `number`, create nothing.
    Renumber {
        revision: &'a ControllerRevision,
        number: i64,
    },
    /// No revision records it: create the candidate.
    Create(Box<ControllerRevision>),
}

/// Chooses between the newest revision, an equal older one, and the candidate built by
/// [`new_revision`] with [`next_revision_number`]. `revisions` may be in any order.
pub fn choose_update_revision(
    revisions: &[ControllerRevision],
    candidate: ControllerRevision,
) -> UpdateRevision<'_> {
    let mut sorted: Vec<&ControllerRevision> = revisions.iter().collect();
    sort_revisions(&mut sorted);
    let Some(last_equal) = sorted
        .iter()
        .rev()
        .find(|r| equal_revision(r, &candidate))
        .copied()
    else {
        return UpdateRevision::Create(Box::new(candidate));
    };
    match sorted.last() {
        Some(newest) if equal_revision(newest, last_equal) => UpdateRevision::Latest(newest),
        _ => UpdateRevision::Renumber {
            revision: last_equal,
            number: candidate.revision,
        },
    }
}

/// Oldest first; equal numbers (possible after a failed renumbering) ordered by name for stability.
pub(crate) fn sort_revisions(revisions: &mut [&ControllerRevision]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

/// The revisions to delete so that at most `limit` (default 10) non-live revisions remain, oldest
/// first. Live revisions — the current one, the update one, and any a Pod's
/// `controller-revision-hash` label points at — are never returned.
pub fn revisions_to_delete<'a, 'p>(
    revisions: &'a [ControllerRevision],
    current: &str,
    update: &str,
    pod_revision_labels: impl IntoIterator<Item = &'p str>,
    limit: Option<i32>,
) -> Vec<&'a ControllerRevision> {
    let pod_labels: Vec<&str> = pod_revision_labels.into_iter().collect();
    let mut history: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| {
            let name = r.metadata.name.as_deref().unwrap_or_default();
            name != current
                && name != update
                && !pod_labels
                    .iter()
                    .any(|label| pod_label_matches_revision(label, name))
        })
        .collect();
    sort_revisions(&mut history);
    let limit = usize::try_from(limit.unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)).unwrap_or(0);
    let excess = history.len().saturating_sub(limit);
    history.truncate(excess);
    history
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use proptest::prelude::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some(image.into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        }
    }

    fn cloneset(image: &str) -> CloneSet {
        let mut cs = CloneSet::new("web", Default::default());
        cs.metadata.namespace = Some("ns".into());
        cs.metadata.uid = Some("uid-1".into());
        cs.spec.template = template(image);
        cs
    }

    fn rev(name: &str, number: i64, image: &str) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(
                revision_data(&template(image)).expect("template encodes"),
            )),
            revision: number,
        }
    }

    // FNV-1 vectors: the empty input is the offset basis 0x811c9dc5; "a" and "foobar" are the
    // published FNV-1 (not FNV-1a) test vectors 0x050c5d7e and 0x31f0b262.
    #[test]
    fn fnv1_vectors() {
        assert_eq!(fnv1_32(b""), 0x811c_9dc5);
        assert_eq!(fnv1_32(b"a"), 0x050c_5d7e);
        assert_eq!(fnv1_32(b"foobar"), 0x31f0_b262);
    }

    // Digits map through `alphabet[byte % 27]`: '0' (48) → index 21 = '4', ..., '5' (53) → 26 = '9',
    // '6' (54) → 0 = 'b', '7' → 'c', '8' → 'd', '9' → 'f'.
    #[test]
    fn hash_table() {
        let cases: &[(&[u8], Option<i32>, &str)] = &[
            // 2166136261 → "65bb57b6b5"
            (b"", None, "65bb57b6b5"),
            // 0x050c5d7e = 84696446 → "d8bfb88b"
            (b"a", None, "d8bfb88b"),
            // empty data + collision count 0 hashes the byte "0": (basis * prime) ^ 0x30
            // = 0x050c5d1f ^ 0x30 = 0x050c5d2f = 84696367 → "d8bfb7bc"
            (b"", Some(0), "d8bfb7bc"),
            // 0x31f0b262 = 837857890 → "d7cd9cdf4"
            (b"foobar", None, "d7cd9cdf4"),
        ];
        for (data, count, want) in cases {
            assert_eq!(
                hash_revision_data(data, *count),
                *want,
                "{data:?} {count:?}"
            );
        }
    }

    #[test]
    fn names_and_short_hashes() {
        assert_eq!(revision_name("web", "5d4f"), "web-5d4f");
        let long = "x".repeat(300);
        assert_eq!(revision_name(&long, "h").len(), 223 + 2);
        assert_eq!(short_hash("web-v2-5d4f"), "5d4f");
        assert_eq!(short_hash("5d4f"), "5d4f");
        assert!(pod_label_matches_revision("web-5d4f", "web-5d4f"));
        assert!(pod_label_matches_revision("5d4f", "web-5d4f"));
        assert!(!pod_label_matches_revision("web-5d4c", "web-5d4f"));
    }

    #[test]
    fn data_is_a_replace_patch_of_the_template_only() {
        let data = revision_data(&template("nginx:1")).expect("encodes");
        assert_eq!(
            data,
            json!({"spec": {"template": {
                "$patch": "replace",
                "metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                "spec": {"containers": [{"name": "main", "image": "nginx:1", "resources": {}}]}
            }}})
        );
        let bytes = String::from_utf8(canonical_json(&data)).expect("utf8");
        assert_eq!(
            bytes,
            r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx:1","name":"main","resources":{}}]}}}}"#
        );
    }

    #[test]
    fn canonical_json_matches_go_encoding() {
        let cases = [
            (
                json!({"b": 1, "a": [true, null]}),
                r#"{"a":[true,null],"b":1}"#,
            ),
            (json!("<a&b>"), r#""\u003ca\u0026b\u003e""#),
            (json!("l\u{2028}s\u{1}\n"), r#""l\u2028s\u0001\n""#),
            (json!(2.0), "2"),
            (json!(1.5), "1.5"),
            (json!(1e21), "1e+21"),
            (json!(1e-7), "1e-07"),
            (json!(-3), "-3"),
        ];
        for (value, want) in cases {
            assert_eq!(
                String::from_utf8(canonical_json(&value)).expect("utf8"),
                want
            );
        }
    }

    /// The hash follows the claims' names and specs, not their order or other fields.
    #[test]
    fn vct_hash_table() {
        let claim = |name: &str,
                     size: &str,
                     label: Option<&str>|
         -> k8s_openapi::api::core::v1::PersistentVolumeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": label.map(|l| serde_json::json!({"l": l}))},
                "spec": {"resources": {"requests": {"storage": size}}}}))
            .expect("claim")
        };
        assert_eq!(vct_hash(&[]), "");
        let base = vct_hash(&[claim("a", "1Gi", None), claim("b", "1Gi", None)]);
        assert!(base.starts_with(VCT_HASH_PREFIX), "{base}");
        assert_eq!(
            base,
            vct_hash(&[claim("b", "1Gi", None), claim("a", "1Gi", None)])
        );
        assert_eq!(
            base,
            vct_hash(&[claim("a", "1Gi", Some("x")), claim("b", "1Gi", None)])
        );
        assert_ne!(
            base,
            vct_hash(&[claim("a", "2Gi", None), claim("b", "1Gi", None)])
        );
        assert_ne!(base, vct_hash(&[claim("a", "1Gi", None)]));
    }

    #[test]
    fn new_revision_fields() {
        let mut cs = cloneset("nginx:1");
        cs.metadata.annotations = Some([("note".to_string(), "x".to_string())].into());
        let r = new_revision(&cs, 3, Some(0)).expect("builds");
        let data = r.data.as_ref().expect("data");
        let hash = hash_revision_data(&canonical_json(&data.0), Some(0));
        assert_eq!(
            r.metadata.name.as_deref(),
            Some(format!("web-{hash}").as_str())
        );
        assert_eq!(r.metadata.namespace.as_deref(), Some("ns"));
        let labels = r.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels.get(LABEL_REVISION_HASH), Some(&hash));
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        // The CloneSet's annotations, and the volumeClaimTemplates hash (empty: it has none).
        assert_eq!(
            r.metadata.annotations,
            Some(
                [
                    ("note".to_string(), "x".to_string()),
                    (ANNOTATION_VCT_HASH.to_string(), String::new()),
                ]
                .into()
            )
        );
        let owner = &r.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("CloneSet", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(r.revision, 3);
        // The template comes back with Go's empty fields (`resources: {}`), which record nothing.
        assert_eq!(
            revision_data(&template_from_revision(&r).expect("template")).expect("data"),
            revision_data(&cs.spec.template).expect("data")
        );

        // A collision count changes the name, not the data.
        let other = new_revision(&cs, 3, Some(1)).expect("builds");
        assert_ne!(other.metadata.name, r.metadata.name);
        assert!(equal_revision(&other, &r));
        assert!(!is_collision(&other, &r));
    }

    #[test]
    fn new_revision_needs_name_and_uid() {
        let mut cs = cloneset("a");
        cs.metadata.uid = None;
        assert!(matches!(
            new_revision(&cs, 1, None),
            Err(RevisionError::NoUid)
        ));
        cs.metadata.name = None;
        assert!(matches!(
            new_revision(&cs, 1, None),
            Err(RevisionError::NoName)
        ));
    }

    #[test]
    fn next_number_is_max_plus_one() {
        assert_eq!(next_revision_number(&[]), 1);
        let revs = [rev("a", 4, "x"), rev("b", 9, "y"), rev("c", 2, "z")];
        assert_eq!(next_revision_number(&revs), 10);
    }

    #[test]
    fn choose_update_revision_table() {
        let revs = [rev("web-1", 1, "v1"), rev("web-2", 2, "v2")];
        // Unchanged template: the newest revision is re-used as is.
        let candidate = rev("web-x", 3, "v2");
        assert_eq!(
            choose_update_revision(&revs, candidate),
            UpdateRevision::Latest(&revs[1])
        );
        // Rollback to v1: the old revision is renumbered, nothing new is created.
        let candidate = rev("web-x", 3, "v1");
        assert_eq!(
            choose_update_revision(&revs, candidate),
            UpdateRevision::Renumber {
                revision: &revs[0],
                number: 3
            }
        );
        // A new template: create.
        let candidate = rev("web-3", 3, "v3");
        assert_eq!(
            choose_update_revision(&revs, candidate.clone()),
            UpdateRevision::Create(Box::new(candidate))
        );
        // Empty history: create.
        let candidate = rev("web-1", 1, "v1");
        assert_eq!(
            choose_update_revision(&[], candidate.clone()),
            UpdateRevision::Create(Box::new(candidate))
        );
    }

    #[test]
    fn truncation_keeps_live_revisions() {
        let revs: Vec<ControllerRevision> = (1..=6)
            .map(|i| rev(&format!("web-h{i}"), i, &format!("v{i}")))
            .collect();
        let names = |v: Vec<&ControllerRevision>| -> Vec<String> {
            v.into_iter()
                .map(|r| r.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        // current h1, update h6, a Pod on h2 (short label form): history h3..h5, limit 1 deletes h3, h4.
        assert_eq!(
            names(revisions_to_delete(
                &revs,
                "web-h1",
                "web-h6",
                ["h2"],
                Some(1)
            )),
            ["web-h3", "web-h4"]
        );
        // Limit 0 deletes every non-live revision.
        assert_eq!(
            names(revisions_to_delete(&revs, "web-h1", "web-h6", [], Some(0))),
            ["web-h2", "web-h3", "web-h4", "web-h5"]
        );
        // Default limit 10: nothing to delete.
        assert!(revisions_to_delete(&revs, "web-h1", "web-h6", [], None).is_empty());
        // A negative limit is treated as 0, never as "delete live ones".
        assert_eq!(
            revisions_to_delete(&revs, "web-h1", "web-h6", ["web-h5"], Some(-3)).len(),
            3
        );
    }

    proptest! {
        #[test]
        fn collision_count_is_appended_to_the_data(data in proptest::collection::vec(any::<u8>(), 0..64), count in any::<i32>()) {
            let mut joined = data.clone();
            joined.extend_from_slice(count.to_string().as_bytes());
            prop_assert_eq!(hash_revision_data(&data, Some(count)), hash_revision_data(&joined, None));
        }

        #[test]
        fn hashes_use_only_encoded_digits(data in proptest::collection::vec(any::<u8>(), 0..64), count in proptest::option::of(any::<i32>())) {
            let hash = hash_revision_data(&data, count);
            prop_assert!((1..=10).contains(&hash.len()));
            prop_assert!(hash.chars().all(|c| "456789bcdf".contains(c)));
        }

        #[test]
        fn canonical_json_round_trips(keys in proptest::collection::btree_map("[a-z<>&\"\\\\\u{2028}]{0,6}", any::<i64>(), 0..6)) {
            let value = serde_json::to_value(&keys).expect("map encodes");
            let bytes = canonical_json(&value);
            let back: Value = serde_json::from_slice(&bytes).expect("valid JSON");
            prop_assert_eq!(back, value);
        }

        #[test]
        fn truncation_never_deletes_live_and_respects_the_limit(
            count in 0usize..15,
            limit in -2i32..12,
            current in 0usize..15,
            update in 0usize..15,
            pods in proptest::collection::vec(0usize..15, 0..5),
        ) {
            let revs: Vec<ControllerRevision> = (0..count)
                .map(|i| rev(&format!("web-h{i}"), i as i64, &format!("v{i}")))
                .collect();
            let current = format!("web-h{current}");
            let update = format!("web-h{update}");
            let pod_labels: Vec<String> = pods.iter().map(|p| format!("web-h{p}")).collect();
            let deleted = revisions_to_delete(&revs, &current, &update, pod_labels.iter().map(String::as_str), Some(limit));
            let live = |name: &str| name == current || name == update || pod_labels.iter().any(|l| l == name);
            for r in &deleted {
                prop_assert!(!live(r.metadata.name.as_deref().unwrap_or_default()));
            }
            let non_live = revs.iter().filter(|r| !live(r.metadata.name.as_deref().unwrap_or_default())).count();
            prop_assert_eq!(non_live - deleted.len(), non_live.min(limit.max(0) as usize));
            // The oldest go first: every kept non-live revision is newer than every deleted one.
            let newest_deleted = deleted.iter().map(|r| r.revision).max();
            for r in revs.iter().filter(|r| !live(r.metadata.name.as_deref().unwrap_or_default())) {
                if !deleted.iter().any(|d| d.metadata.name == r.metadata.name) {
                    prop_assert!(newest_deleted.is_none_or(|n| r.revision > n));
                }
            }
        }
    }
}
