//! Revision data, hashes and names as OpenKruise v1.9 writes them: every ControllerRevision and
//! SidecarSet hash exported from a running OpenKruise (`tests/fixtures/openkruise-v1.9`) is computed
//! here from its parent's spec alone, byte for byte. A cluster taken over from OpenKruise therefore
//! finds its revisions under the names kruise-rs computes, and creates no new one.

use std::path::PathBuf;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::kinds::{Kind, V1BETA1};
use kruise_api::sidecarset::hash::{sidecarset_hash, sidecarset_hash_without_image};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::uniteddeployment::template_as_v1alpha1;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_core::revision::{
    Parent, build_revision, canonical_json, equal_revision, hash_revision_data, revision_data,
};
use kruise_core::rollout::uniteddeployment::revision_data as ud_revision_data;
use kruise_core::sidecarset::history::revision_data as sidecarset_revision_data;
use serde_json::Value;

fn fixture(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/openkruise-v1.9")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let list: Value = serde_json::from_str(&text).expect("fixture is JSON");
    list["items"].as_array().cloned().expect("a List")
}

fn named<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("fixture object {name}"))
}

fn revisions() -> Vec<Value> {
    let mut all = fixture("fx-controllerrevisions.json");
    all.extend(fixture("kruise-system-controllerrevisions.json"));
    all
}

/// Our revision for `data` under `parent` (collision count from the parent's status), checked
/// against the fixture revision `want`: same data, same name, same hash label.
fn assert_same_revision(kind: &str, parent: &Value, data: Value, want: &str) {
    let all = revisions();
    let upstream = named(&all, want);
    assert_eq!(
        data, upstream["data"],
        "{kind} {}: revision data differs from OpenKruise's",
        parent["metadata"]["name"]
    );
    let meta = ObjectMeta {
        name: parent["metadata"]["name"].as_str().map(str::to_owned),
        uid: Some("uid".into()),
        ..ObjectMeta::default()
    };
    let collision = parent["status"]["collisionCount"]
        .as_i64()
        .and_then(|c| i32::try_from(c).ok());
    let ours = build_revision(
        Parent { kind, meta: &meta },
        None,
        Default::default(),
        data,
        1,
        collision,
    )
    .expect("revision");
    assert_eq!(
        ours.metadata.name.as_deref(),
        Some(want),
        "{kind} revision name"
    );
    assert_eq!(
        ours.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("controller.kubernetes.io/hash")),
        upstream["metadata"]["labels"]["controller.kubernetes.io/hash"]
            .as_str()
            .map(str::to_owned)
            .as_ref(),
        "{kind} hash label"
    );
}

#[test]
fn cloneset_revisions_are_openkruises() {
    let sets = fixture("fx-clonesets.apps.kruise.io.json");
    for name in ["sample", "nginx", "ud-a-fbfr4", "ud-b-4t628"] {
        let cs = named(&sets, name);
        let template: PodTemplateSpec =
            serde_json::from_value(cs["spec"]["template"].clone()).expect("template");
        let want = cs["status"]["updateRevision"]
            .as_str()
            .expect("updateRevision");
        assert_same_revision(
            "CloneSet",
            cs,
            revision_data(&template).expect("data"),
            want,
        );
    }
}

#[test]
fn sample_cloneset_revision_is_the_one_openkruise_names() {
    let sets = fixture("fx-clonesets.apps.kruise.io.json");
    let template: PodTemplateSpec =
        serde_json::from_value(named(&sets, "sample")["spec"]["template"].clone())
            .expect("template");
    let data = revision_data(&template).expect("data");
    assert_eq!(
        hash_revision_data(&canonical_json(&data), Some(0)),
        "7b66b966b7"
    );
}

#[test]
fn advanced_statefulset_revision_is_openkruises() {
    let sets = fixture("fx-statefulsets.apps.kruise.io.json");
    let web = named(&sets, "web");
    let template: PodTemplateSpec =
        serde_json::from_value(web["spec"]["template"].clone()).expect("template");
    let want = web["status"]["updateRevision"]
        .as_str()
        .expect("updateRevision");
    assert_same_revision(
        "StatefulSet",
        web,
        revision_data(&template).expect("data"),
        want,
    );
}

#[test]
fn uniteddeployment_revision_is_openkruises() {
    let uds = fixture("fx-uniteddeployments.apps.kruise.io.json");
    let ud = named(&uds, "ud");
    // The controller reads the UnitedDeployment in v1beta1, its storage version: its CloneSet template
    // holds the v1beta1 CloneSet spec there, and the revision is hashed over the v1alpha1 form again.
    let stored = Kind::UnitedDeployment
        .convert(ud.clone(), V1BETA1)
        .expect("converts to v1beta1");
    let stored: UnitedDeployment = serde_json::from_value(stored).expect("v1beta1 object");
    assert_eq!(
        stored.spec.template.clone_set_template.as_ref().map(|t| t
            .spec
            .update_strategy
            .type_
            .as_str()),
        Some("RollingUpdate")
    );
    let template = template_as_v1alpha1(&stored.metadata, &stored.spec.template);
    let want = ud["status"]["currentRevision"]
        .as_str()
        .expect("currentRevision");
    assert_same_revision(
        "UnitedDeployment",
        ud,
        ud_revision_data(&template).expect("data"),
        want,
    );
}

#[test]
fn sidecarset_revision_and_pod_hashes_are_openkruises() {
    let sets = fixture("sidecarsets.json");
    let raw = named(&sets, "log-sidecar");
    let ss: SidecarSet = serde_json::from_value(raw.clone()).expect("SidecarSet");
    let newest = revisions()
        .into_iter()
        .filter(|r| r["metadata"]["labels"]["kruise.io/sidecarset-name"] == "log-sidecar")
        .max_by_key(|r| r["revision"].as_i64())
        .expect("a revision");
    let want = newest["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    assert_same_revision(
        "SidecarSet",
        raw,
        sidecarset_revision_data(&ss).expect("data"),
        &want,
    );

    // The hashes injected Pods record are the SidecarSet's, as computed here.
    for pod in fixture("fx-pods.json").iter().filter(|p| {
        p["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"] == "log-sidecar"
    }) {
        let recorded = |annotation: &str| -> Value {
            let text = pod["metadata"]["annotations"][annotation]
                .as_str()
                .expect("annotation");
            serde_json::from_str::<Value>(text).expect("JSON")["log-sidecar"]["hash"].clone()
        };
        assert_eq!(recorded("kruise.io/sidecarset-hash"), sidecarset_hash(&ss));
        assert_eq!(
            recorded("kruise.io/sidecarset-hash-without-image"),
            sidecarset_hash_without_image(&ss)
        );
    }
}

/// OpenKruise names an Advanced DaemonSet's revisions with Kubernetes' DaemonSet hash (a hash of the Go
/// value's printed form, not of JSON), which kruise-rs does not reproduce; the revision is found by its
/// data instead, as Kubernetes' DaemonSet controller matches history, so a takeover re-uses it.
#[test]
fn advanced_daemonset_revision_is_found_by_its_data() {
    let sets = fixture("fx-daemonsets.apps.kruise.io.json");
    let agent = named(&sets, "agent");
    let template: PodTemplateSpec =
        serde_json::from_value(agent["spec"]["template"].clone()).expect("template");
    let data = revision_data(&template).expect("data");
    let all = revisions();
    let current = named(&all, "agent-65d9995888");
    assert_eq!(data, current["data"]);
    let upstream: ControllerRevision = serde_json::from_value(current.clone()).expect("revision");
    let meta = ObjectMeta {
        name: Some("agent".into()),
        uid: Some("uid".into()),
        ..ObjectMeta::default()
    };
    let ours = build_revision(
        Parent {
            kind: "DaemonSet",
            meta: &meta,
        },
        None,
        Default::default(),
        data,
        3,
        None,
    )
    .expect("revision");
    assert!(equal_revision(&ours, &upstream));
    assert!(!equal_revision(
        &ours,
        &serde_json::from_value(named(&all, "agent-74dccfdb85").clone()).expect("revision")
    ));
}

/// A revision written before revision data carried Go's empty fields is still the same revision.
#[test]
fn revisions_without_go_empty_fields_still_match() {
    let all = revisions();
    let upstream: ControllerRevision =
        serde_json::from_value(named(&all, "sample-7b66b966b7").clone()).expect("revision");
    let mut older = upstream.clone();
    if let Some(data) = older.data.as_mut() {
        let template = &mut data.0["spec"]["template"];
        template["metadata"]
            .as_object_mut()
            .map(|m| m.remove("creationTimestamp"));
        for c in template["spec"]["containers"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            c.as_object_mut().map(|m| m.remove("resources"));
        }
    }
    assert_ne!(older.data, upstream.data);
    assert!(equal_revision(&older, &upstream));
    let mut other = older.clone();
    if let Some(data) = other.data.as_mut() {
        data.0["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:other".into();
    }
    assert!(!equal_revision(&other, &upstream));
}
