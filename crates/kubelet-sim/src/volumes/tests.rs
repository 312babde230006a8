use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EphemeralVolumeSource, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    PersistentVolumeClaimVolumeSource, PersistentVolumeStatus, PodSpec, Volume,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;

fn storage(q: &str) -> BTreeMap<String, Quantity> {
    [(STORAGE.to_string(), Quantity(q.into()))].into()
}

fn claim(request: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data-web-0".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: Some(STORAGE_CLASS.into()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(storage(request)),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

fn bound(mut c: PersistentVolumeClaim, capacity: &str) -> PersistentVolumeClaim {
    if let Some(spec) = c.spec.as_mut() {
        spec.volume_name = Some(volume_name("u1"));
    }
    c.status = Some(PersistentVolumeClaimStatus {
        phase: Some("Bound".into()),
        capacity: Some(storage(capacity)),
        ..PersistentVolumeClaimStatus::default()
    });
    c
}

fn provisioned(c: &PersistentVolumeClaim) -> PersistentVolume {
    match plan_claim(c, Some(&storage_class()), None) {
        ClaimStep::Provision(v) => *v,
        other => panic!("expected a volume, got {other:?}"),
    }
}

#[test]
fn the_class_is_the_default_expandable_immediate_one() {
    let class = storage_class();
    assert_eq!(class.metadata.name.as_deref(), Some("sim"));
    assert_eq!(
        class
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_DEFAULT_CLASS))
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(class.allow_volume_expansion, Some(true));
    assert_eq!(class.volume_binding_mode.as_deref(), Some("Immediate"));
    assert_eq!(class.reclaim_policy.as_deref(), Some("Delete"));
}

#[test]
fn a_new_claim_gets_a_volume_pre_bound_to_it() {
    let c = claim("2Gi");
    let v = provisioned(&c);
    assert_eq!(v.metadata.name.as_deref(), Some("pvc-u1"));
    let spec = v.spec.expect("spec");
    let claim_ref = spec.claim_ref.expect("claimRef");
    assert_eq!(
        (
            claim_ref.namespace.as_deref(),
            claim_ref.name.as_deref(),
            claim_ref.uid.as_deref()
        ),
        (Some("ns"), Some("data-web-0"), Some("u1"))
    );
    assert_eq!(spec.capacity, Some(storage("2Gi")));
    assert_eq!(spec.storage_class_name.as_deref(), Some("sim"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert!(plan_volume(&PersistentVolume {
        status: Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..PersistentVolumeStatus::default()
        }),
        metadata: v.metadata.clone(),
        spec: Some(PersistentVolumeSpec {
            persistent_volume_reclaim_policy: Some("Delete".into()),
            ..PersistentVolumeSpec::default()
        }),
    }));
}

#[test]
#[allow(clippy::type_complexity)]
fn claim_steps() {
    let class = storage_class();
    let other_class = StorageClass {
        provisioner: "example.com/other".into(),
        ..storage_class()
    };
    let volume_of = |capacity: &str| {
        let mut v = provisioned(&claim(capacity));
        if let Some(spec) = v.spec.as_mut() {
            spec.capacity = Some(storage(capacity));
        }
        v
    };
    let mut deleting = claim("1Gi");
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    let mut foreign = bound(claim("1Gi"), "1Gi");
    if let Some(spec) = foreign.spec.as_mut() {
        spec.volume_name = Some("someone-elses".into());
    }
    let grown = volume_of("1Gi");
    let cases: Vec<(
        &str,
        PersistentVolumeClaim,
        Option<&StorageClass>,
        Option<PersistentVolume>,
        &str,
    )> = vec![
        ("no class", claim("1Gi"), None, None, "nothing"),
        (
            "another provisioner",
            claim("1Gi"),
            Some(&other_class),
            None,
            "nothing",
        ),
        ("being deleted", deleting, Some(&class), None, "nothing"),
        ("foreign volume", foreign, Some(&class), None, "nothing"),
        (
            "unbound, no volume",
            claim("1Gi"),
            Some(&class),
            None,
            "provision",
        ),
        (
            "volume made, KCM not done",
            claim("1Gi"),
            Some(&class),
            Some(grown.clone()),
            "await",
        ),
        (
            "bound, same size",
            bound(claim("1Gi"), "1Gi"),
            Some(&class),
            Some(grown.clone()),
            "nothing",
        ),
        (
            "request grew",
            bound(claim("2Gi"), "1Gi"),
            Some(&class),
            Some(grown),
            "grow",
        ),
        (
            "volume grew, status not yet",
            bound(claim("2Gi"), "1Gi"),
            Some(&class),
            Some(volume_of("2048Mi")),
            "report",
        ),
        (
            "shrink request is ignored",
            bound(claim("1Gi"), "2Gi"),
            Some(&class),
            Some(volume_of("2Gi")),
            "nothing",
        ),
    ];
    for (name, c, class, volume, want) in cases {
        let step = plan_claim(&c, class, volume.as_ref());
        let got = match &step {
            ClaimStep::Nothing => "nothing",
            ClaimStep::Provision(_) => "provision",
            ClaimStep::AwaitBinding => "await",
            ClaimStep::GrowVolume(patch) => {
                assert_eq!(patch["spec"]["capacity"]["storage"], "2Gi", "{name}");
                "grow"
            }
            ClaimStep::ReportCapacity(patch) => {
                assert_eq!(patch["status"]["capacity"]["storage"], "2048Mi", "{name}");
                "report"
            }
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn only_our_released_delete_volumes_are_deleted() {
    let base = provisioned(&claim("1Gi"));
    let with = |phase: &str, policy: &str, ours: bool| {
        let mut v = base.clone();
        v.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..PersistentVolumeStatus::default()
        });
        if let Some(spec) = v.spec.as_mut() {
            spec.persistent_volume_reclaim_policy = Some(policy.into());
        }
        if !ours {
            v.metadata.annotations = None;
        }
        v
    };
    assert!(plan_volume(&with("Released", "Delete", true)));
    assert!(!plan_volume(&with("Bound", "Delete", true)));
    assert!(!plan_volume(&with("Released", "Retain", true)));
    assert!(!plan_volume(&with("Released", "Delete", false)));
}

#[test]
fn pod_claims_include_ephemeral_volumes() {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("web-0".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![
                Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: "data-web-0".into(),
                        read_only: None,
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "scratch".into(),
                    ephemeral: Some(EphemeralVolumeSource::default()),
                    ..Volume::default()
                },
                Volume {
                    name: "config".into(),
                    ..Volume::default()
                },
            ]),
            ..PodSpec::default()
        }),
        status: None,
    };
    assert_eq!(pod_claims(&pod), ["data-web-0", "web-0-scratch"]);
    assert!(!claim_is_bound(&claim("1Gi")));
    assert!(claim_is_bound(&bound(claim("1Gi"), "1Gi")));
}
