use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, LocalObjectReference, PodSpec, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::cloneset::v1beta1::{
    CloneSet, CloneSetSpec, CloneSetStatus, RollingUpdateCloneSetStrategy,
};
use kruise_api::daemonset::v1beta1::{
    DaemonSet, DaemonSetSpec, DaemonSetStatus, RollingUpdateDaemonSet,
};

use super::*;

/// Containers as (name, image).
type Containers<'a> = &'a [(&'a str, &'a str)];

fn template(containers: &[(&str, &str)]) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            annotations: Some(BTreeMap::from([("note".into(), "x".into())])),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: containers
                .iter()
                .map(|(name, image)| Container {
                    name: (*name).into(),
                    image: Some((*image).into()),
                    ..Container::default()
                })
                .collect(),
            ..PodSpec::default()
        }),
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn changed_images_by_container_name() {
    let cases: &[(&str, &[Containers], Containers, Containers)] = &[
        (
            "nothing changed",
            &[&[("a", "nginx:1")]],
            &[("a", "nginx:1")],
            &[],
        ),
        (
            "image replaced",
            &[&[("a", "nginx:1")]],
            &[("a", "nginx:2")],
            &[("a", "nginx:2")],
        ),
        (
            "one of two replaced",
            &[&[("a", "nginx:1"), ("b", "redis:1")]],
            &[("a", "nginx:1"), ("b", "redis:2")],
            &[("b", "redis:2")],
        ),
        (
            "new container",
            &[&[("a", "nginx:1")]],
            &[("a", "nginx:1"), ("c", "busybox")],
            &[("c", "busybox")],
        ),
        (
            "removed container is not pulled",
            &[&[("a", "nginx:1"), ("b", "r")]],
            &[("a", "nginx:1")],
            &[],
        ),
        (
            "any old revision that differs counts",
            &[&[("a", "nginx:2")], &[("a", "nginx:1")]],
            &[("a", "nginx:2")],
            &[("a", "nginx:2")],
        ),
        (
            "no old revision: everything",
            &[],
            &[("a", "nginx:2")],
            &[("a", "nginx:2")],
        ),
    ];
    for (what, olds, new, want) in cases {
        let olds: Vec<PodTemplateSpec> = olds.iter().map(|c| template(c)).collect();
        let refs: Vec<&PodTemplateSpec> = olds.iter().collect();
        assert_eq!(changed_images(&refs, &template(new)), map(want), "{what}");
    }
}

#[test]
fn min_updated_ready_pods_annotation() {
    let cases: &[(Option<&str>, i32, i32)] = &[
        (None, 10, 0),
        (Some("3"), 10, 3),
        (Some("50%"), 5, 3),
        (Some("10%"), 10, 1),
        (Some("nonsense"), 10, 0),
    ];
    for (value, total, want) in cases {
        let annotations = value
            .map(|v| map(&[(ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS, v)]))
            .unwrap_or_default();
        assert_eq!(
            min_updated_ready(&annotations, *total),
            *want,
            "{value:?} of {total}"
        );
    }
}

fn cloneset(
    replicas: i32,
    policy: &str,
    partition: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
) -> CloneSet {
    let mut cs = CloneSet::new(
        "web",
        CloneSetSpec {
            replicas: Some(replicas),
            ..CloneSetSpec::default()
        },
    );
    cs.spec.update_strategy.rolling_update = Some(RollingUpdateCloneSetStrategy {
        partition,
        max_unavailable,
        pod_update_policy: policy.into(),
        ..RollingUpdateCloneSetStrategy::default()
    });
    cs
}

#[test]
fn cloneset_skips_as_upstream() {
    let old = template(&[("a", "nginx:1")]);
    let new = template(&[("a", "nginx:2")]);
    let mut env_changed = template(&[("a", "nginx:2")]);
    if let Some(spec) = env_changed.spec.as_mut() {
        spec.containers[0].env = Some(vec![EnvVar {
            name: "X".into(),
            value: Some("1".into()),
            ..EnvVar::default()
        }]);
    }
    let ip = POD_UPDATE_IN_PLACE_IF_POSSIBLE;
    let int = |n| Some(IntOrString::Int(n));
    let pct = |s: &str| Some(IntOrString::String(s.into()));
    let cases: Vec<(&str, CloneSet, &PodTemplateSpec, Option<&str>)> = vec![
        (
            "in place, 5 replicas, default 20%",
            cloneset(5, ip, None, None),
            &new,
            None,
        ),
        (
            "InPlaceOnly",
            cloneset(5, POD_UPDATE_IN_PLACE_ONLY, None, None),
            &new,
            None,
        ),
        (
            "ReCreate",
            cloneset(5, "ReCreate", None, None),
            &new,
            Some("recreates"),
        ),
        (
            "default policy recreates",
            cloneset(5, "", None, None),
            &new,
            Some("recreates"),
        ),
        (
            "3 replicas",
            cloneset(3, ip, None, None),
            &new,
            Some("3 replicas"),
        ),
        ("4 replicas", cloneset(4, ip, None, None), &new, None),
        (
            "one batch",
            cloneset(5, ip, None, int(5)),
            &new,
            Some("one batch"),
        ),
        (
            "one batch by percent",
            cloneset(5, ip, None, pct("100%")),
            &new,
            Some("one batch"),
        ),
        (
            "partition keeps it in batches",
            cloneset(5, ip, int(1), int(5)),
            &new,
            None,
        ),
        (
            "env change needs new Pods",
            cloneset(5, ip, None, None),
            &env_changed,
            Some("in place"),
        ),
    ];
    for (what, cs, update, want) in cases {
        let got = cloneset_skip(&cs, &old, update, &PlanOptions::default()).expect(what);
        match (got, want) {
            (None, None) => {}
            (Some(skip), Some(text)) => {
                assert!(skip.to_string().contains(text), "{what}: {skip}")
            }
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
    let bad = cloneset(5, ip, pct("half"), None);
    assert!(cloneset_skip(&bad, &old, &new, &PlanOptions::default()).is_err());
}

#[test]
fn cloneset_waits_for_min_updated_ready_pods() {
    let with = |annotation: Option<&str>, status_revision: &str, ready: i32| {
        let mut cs = cloneset(10, POD_UPDATE_IN_PLACE_IF_POSSIBLE, None, None);
        cs.metadata.annotations =
            annotation.map(|v| map(&[(ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS, v)]));
        cs.status = Some(CloneSetStatus {
            update_revision: status_revision.into(),
            updated_ready_replicas: ready,
            ..CloneSetStatus::default()
        });
        cs
    };
    let cases = [
        ("no annotation", with(None, "web-1", 0), true),
        ("reached", with(Some("2"), "web-2", 2), true),
        ("not reached", with(Some("2"), "web-2", 1), false),
        (
            "status of another revision counts 0",
            with(Some("2"), "web-1", 5),
            false,
        ),
        ("percent of replicas", with(Some("20%"), "web-2", 2), true),
    ];
    for (what, cs, want) in cases {
        assert_eq!(cloneset_ready_to_start(&cs, "web-2"), want, "{what}");
    }
}

fn daemonset(
    desired: i32,
    partition: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
) -> DaemonSet {
    let mut ds = DaemonSet::new("agent", DaemonSetSpec::default());
    ds.spec.update_strategy.rolling_update = Some(RollingUpdateDaemonSet {
        partition,
        max_unavailable,
        ..RollingUpdateDaemonSet::default()
    });
    ds.status = Some(DaemonSetStatus {
        desired_number_scheduled: desired,
        ..DaemonSetStatus::default()
    });
    ds
}

#[test]
fn daemonset_skips_only_one_batch() {
    let int = |n| Some(IntOrString::Int(n));
    let pct = |s: &str| Some(IntOrString::String(s.into()));
    let cases = [
        (
            "default maxUnavailable 1 of 3",
            daemonset(3, None, None),
            false,
        ),
        ("one node", daemonset(1, None, None), true),
        (
            "maxUnavailable covers all",
            daemonset(3, None, int(3)),
            true,
        ),
        ("percent rounds up", daemonset(3, None, pct("67%")), true),
        ("partition", daemonset(3, int(1), int(3)), false),
        (
            "partition percent rounds down",
            daemonset(3, pct("20%"), int(3)),
            true,
        ),
    ];
    for (what, ds, skip) in cases {
        assert_eq!(daemonset_skip(&ds).expect(what).is_some(), skip, "{what}");
    }
}

#[test]
fn daemonset_rolling_until_every_node_updated() {
    let mut ds = daemonset(3, None, None);
    let set = |ds: &mut DaemonSet, updated: i32, revision: &str| {
        if let Some(s) = ds.status.as_mut() {
            s.updated_number_scheduled = updated;
            s.update_revision = revision.into();
        }
    };
    set(&mut ds, 3, "abc");
    assert!(!daemonset_rolling(&ds, "abc"));
    assert!(daemonset_rolling(&ds, "def"));
    set(&mut ds, 2, "abc");
    assert!(daemonset_rolling(&ds, "abc"));
}

#[test]
fn jobs_as_upstream_builds_them() {
    let mut new = template(&[("a", "nginx:2"), ("b", "redis:2")]);
    if let Some(spec) = new.spec.as_mut() {
        spec.image_pull_secrets = Some(vec![LocalObjectReference {
            name: "regcred".into(),
        }]);
    }
    let owner = OwnerReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "CloneSet".into(),
        name: "web".into(),
        uid: "u1".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let selector = LabelSelector {
        match_labels: Some(map(&[("app", "web")])),
        match_expressions: None,
    };
    let images = map(&[("b", "redis:2")]);
    let revision_labels = map(&[(LABEL_REVISION_HASH, "7f9c")]);
    let cases: &[(Containers, i32, i32)] = &[
        (&[], DEFAULT_PARALLELISM, DEFAULT_TIMEOUT_SECONDS),
        (
            &[
                (ANNOTATION_PREDOWNLOAD_PARALLELISM, "4"),
                (ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS, "60"),
            ],
            4,
            60,
        ),
        (
            &[(ANNOTATION_PREDOWNLOAD_PARALLELISM, "many")],
            DEFAULT_PARALLELISM,
            DEFAULT_TIMEOUT_SECONDS,
        ),
    ];
    for (annotations, parallelism, timeout) in cases {
        let owner_annotations = map(annotations);
        let built = jobs(&JobSource {
            namespace: "ns",
            owner: owner.clone(),
            owner_annotations: &owner_annotations,
            selector: &selector,
            revision_name: "web-7f9c",
            revision_labels: &revision_labels,
            template: &new,
            images: &images,
        });
        assert_eq!(built.len(), 1);
        let job = &built[0];
        assert_eq!(job.metadata.name.as_deref(), Some("web-7f9c-b"));
        assert_eq!(job.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(job.metadata.owner_references, Some(vec![owner.clone()]));
        let labels = map(&[("app", "web"), (LABEL_REVISION_HASH, "7f9c")]);
        assert_eq!(job.metadata.labels.as_ref(), Some(&labels));
        assert_eq!(job.spec.image, "redis:2");
        assert_eq!(job.spec.pull_secrets, vec!["regcred".to_owned()]);
        assert_eq!(job.spec.parallelism, Some(IntOrString::Int(*parallelism)));
        let policy = job.spec.pull_policy.clone().unwrap_or_default();
        assert_eq!(policy.timeout_seconds, Some(*timeout));
        assert_eq!(policy.backoff_limit, Some(BACKOFF_LIMIT));
        assert_eq!(job.spec.completion_policy.type_, "Always");
        assert_eq!(
            job.spec.completion_policy.ttl_seconds_after_finished,
            Some(600)
        );
        let sandbox = job.spec.sandbox_config.clone().unwrap_or_default();
        assert_eq!(sandbox.labels, labels);
        assert_eq!(sandbox.annotations, map(&[("note", "x")]));
        let pods = job
            .spec
            .pod_selector
            .clone()
            .unwrap_or_default()
            .label_selector;
        assert_eq!(pods.match_labels, Some(map(&[("app", "web")])));
        let expressions = pods.match_expressions.unwrap_or_default();
        assert_eq!(expressions.len(), 1);
        assert_eq!(expressions[0].key, "controller-revision-hash");
        assert_eq!(expressions[0].operator, "NotIn");
        assert_eq!(
            expressions[0].values,
            Some(vec!["web-7f9c".to_owned(), "7f9c".to_owned()])
        );
    }
}

#[test]
fn decided_revisions_are_left_alone() {
    assert!(!decided(&map(&[("app", "web")])));
    assert!(decided(&map(&[(LABEL_IMAGE_PREDOWNLOAD_CREATED, "true")])));
    assert!(decided(&map(&[(LABEL_IMAGE_PREDOWNLOAD_IGNORED, "true")])));
}

#[test]
fn cloneset_settings_read_the_v1beta1_fields_over_the_annotations() {
    let mut cs = cloneset(10, POD_UPDATE_IN_PLACE_IF_POSSIBLE, None, None);
    cs.metadata.annotations = Some(map(&[
        (ANNOTATION_PREDOWNLOAD_PARALLELISM, "5"),
        (ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS, "20%"),
    ]));
    assert_eq!(
        cloneset_settings(&cs)
            .get(ANNOTATION_PREDOWNLOAD_PARALLELISM)
            .map(String::as_str),
        Some("5")
    );
    if let Some(rolling) = cs.spec.update_strategy.rolling_update.as_mut() {
        rolling.in_place_update_strategy = Some(kruise_api::pub_types::InPlaceUpdateStrategy {
            image_pre_download_parallelism: Some(IntOrString::Int(2)),
            image_pre_download_timeout_seconds: Some(60),
            ..Default::default()
        });
    }
    let settings = cloneset_settings(&cs);
    let get = |key: &str| settings.get(key).map(String::as_str);
    assert_eq!(get(ANNOTATION_PREDOWNLOAD_PARALLELISM), Some("2"));
    assert_eq!(get(ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS), Some("60"));
    assert_eq!(
        get(ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS),
        Some("20%")
    );
    // The folded min-updated-ready-pods gates the start like the annotation.
    if let Some(in_place) = cs
        .spec
        .update_strategy
        .rolling_update
        .as_mut()
        .and_then(|r| r.in_place_update_strategy.as_mut())
    {
        in_place.image_pre_download_min_updated_ready_pods = Some(3);
    }
    cs.status = Some(CloneSetStatus {
        update_revision: "web-2".into(),
        updated_ready_replicas: 2,
        ..CloneSetStatus::default()
    });
    assert!(!cloneset_ready_to_start(&cs, "web-2"));
}
