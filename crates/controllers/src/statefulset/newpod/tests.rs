use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PodSpec, Volume,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kruise_api::statefulset::v1beta1::{
    StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
};

use super::*;

fn storage(q: &str) -> Option<VolumeResourceRequirements> {
    Some(VolumeResourceRequirements {
        requests: Some(BTreeMap::from([("storage".into(), K8sQuantity(q.into()))])),
        ..Default::default()
    })
}

fn claim(name: &str, request: &str, capacity: Option<&str>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("tier".into(), "db".into())])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            resources: storage(request),
            ..Default::default()
        }),
        status: capacity.map(|c| PersistentVolumeClaimStatus {
            capacity: Some(BTreeMap::from([("storage".into(), K8sQuantity(c.into()))])),
            ..Default::default()
        }),
    }
}

fn set(when_deleted: &str, when_scaled: &str) -> StatefulSet {
    let mut set = StatefulSet::new(
        "web",
        StatefulSetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            }),
            service_name: "web-svc".into(),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    annotations: Some(BTreeMap::from([("note".into(), "x".into())])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "main".into(),
                        image: Some("nginx:1.25".into()),
                        ..Container::default()
                    }],
                    volumes: Some(vec![Volume {
                        name: "data".into(),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: vec![claim("data", "1Gi", None)],
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: when_deleted.into(),
                    when_scaled: when_scaled.into(),
                },
            ),
            ..Default::default()
        },
    );
    set.metadata.namespace = Some("ns".into());
    set.metadata.uid = Some("set-uid".into());
    set
}

#[test]
fn pods_have_the_native_identity() {
    let set = set("Retain", "Retain");
    let pod = build_pod(
        &set,
        &set.spec.template,
        "web-abc",
        4,
        LifecycleState::Normal,
        Timestamp::UNIX_EPOCH,
    )
    .expect("builds");
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(pod.metadata.name.as_deref(), Some("web-4"));
    assert_eq!(pod.metadata.generate_name.as_deref(), Some("web-"));
    for (k, v) in [
        ("app", "web"),
        (LABEL_POD_NAME, "web-4"),
        (LABEL_POD_INDEX, "4"),
        ("controller-revision-hash", "web-abc"),
        (keys::LABEL_LIFECYCLE_STATE, "Normal"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    assert!(!labels.contains_key("pod-template-hash"));
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.hostname.as_deref(), Some("web-4"));
    assert_eq!(spec.subdomain.as_deref(), Some("web-svc"));
    let volumes = spec.volumes.expect("volumes");
    assert_eq!(volumes.len(), 1, "the claim replaces the template volume");
    assert_eq!(
        volumes[0]
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("data-web-4")
    );
    let owner = &pod.metadata.owner_references.expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("StatefulSet", Some(true))
    );
}

#[test]
fn claims_carry_selector_labels_and_the_set_owner_only_when_deleted_with_it() {
    let cases = [
        ("Retain", "Retain", false),
        ("Delete", "Retain", true),
        ("Retain", "Delete", false),
    ];
    for (when_deleted, when_scaled, owned) in cases {
        let claims = build_claims(&set(when_deleted, when_scaled), 2).expect("builds");
        assert_eq!(claims.len(), 1);
        let c = &claims[0];
        assert_eq!(c.metadata.name.as_deref(), Some("data-web-2"));
        let labels = c.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(labels.get("tier").map(String::as_str), Some("db"));
        assert_eq!(
            c.metadata.owner_references.is_some(),
            owned,
            "{when_deleted}/{when_scaled}"
        );
    }
}

#[test]
fn retention_policy_table() {
    let pod = Some(("web-3", "pod-uid"));
    let set_ref = |set: &StatefulSet| {
        let mut o = owner_reference(set).expect("ref");
        o.controller = None;
        o
    };
    let pod_ref = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "web-3".into(),
        uid: "pod-uid".into(),
        ..Default::default()
    };
    // (whenDeleted, whenScaled, condemned, existing refs, wanted kinds or None when unchanged)
    type Case = (
        &'static str,
        &'static str,
        bool,
        Vec<&'static str>,
        Option<Vec<&'static str>>,
    );
    let cases: Vec<Case> = vec![
        ("Retain", "Retain", false, vec![], None),
        ("Retain", "Retain", true, vec!["set", "pod"], Some(vec![])),
        ("Delete", "Retain", false, vec![], Some(vec!["StatefulSet"])),
        ("Delete", "Retain", false, vec!["set"], None),
        ("Retain", "Delete", false, vec![], None),
        ("Retain", "Delete", true, vec![], Some(vec!["Pod"])),
        ("Retain", "Delete", false, vec!["pod"], Some(vec![])),
        (
            "Delete",
            "Delete",
            true,
            vec!["set"],
            Some(vec!["StatefulSet", "Pod"]),
        ),
        ("Delete", "Delete", true, vec!["set", "pod"], None),
    ];
    for (when_deleted, when_scaled, condemned, existing, wanted) in cases {
        let set = set(when_deleted, when_scaled);
        let existing: Vec<OwnerReference> = existing
            .iter()
            .map(|k| {
                if *k == "set" {
                    set_ref(&set)
                } else {
                    pod_ref.clone()
                }
            })
            .collect();
        let got = claim_owners(&set, &existing, pod, condemned).expect("decides");
        let kinds = got.map(|refs| refs.iter().map(|o| o.kind.clone()).collect::<Vec<_>>());
        let wanted = wanted.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            kinds, wanted,
            "{when_deleted}/{when_scaled} condemned={condemned} existing={existing:?}"
        );
    }
}

#[test]
fn foreign_owner_references_are_kept() {
    let set = set("Delete", "Retain");
    let foreign = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "keep".into(),
        uid: "other".into(),
        ..Default::default()
    };
    let got = claim_owners(&set, std::slice::from_ref(&foreign), None, false)
        .expect("decides")
        .expect("changed");
    assert!(got.contains(&foreign));
    assert_eq!(got.len(), 2);
}

#[test]
fn volume_claim_status_counts_compatible_and_ready_claims() {
    let mut set = set("Retain", "Retain");
    set.spec.volume_claim_templates = vec![claim("data", "2Gi", None)];
    let claims = [
        claim("data-web-0", "2Gi", Some("2Gi")),
        claim("data-web-1", "2Gi", Some("1Gi")),
        claim("data-web-2", "1Gi", Some("1Gi")),
        claim("data-web-9", "5Gi", Some("5Gi")),
    ];
    let by_name: BTreeMap<String, &PersistentVolumeClaim> = claims
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
    let status = volume_claim_status(&set, &[0, 1, 2, 3], &by_name);
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].volume_claim_name, "data");
    assert_eq!(
        status[0].compatible_replicas, 2,
        "2Gi and 2Gi; 1Gi is short"
    );
    assert_eq!(
        status[0].compatible_ready_replicas, 1,
        "only web-0's capacity caught up"
    );
}

#[test]
fn claims_only_grow() {
    let template = claim("data", "2Gi", None);
    let cases = [
        ("1Gi", Some("2Gi")),
        ("2Gi", None),
        ("2048Mi", None),
        ("3Gi", None),
        ("1500Mi", Some("2Gi")),
    ];
    for (have, want) in cases {
        let got = claim_growth(&template, &claim("data-web-0", have, None));
        assert_eq!(got.map(|q| q.0), want.map(str::to_owned), "{have}");
    }
}
