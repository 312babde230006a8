use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::policy::v1alpha1::{
    PodUnavailableBudgetSpec, PodUnavailableBudgetStatus, PubOperation,
};
use proptest::prelude::*;

use super::*;

fn now() -> Timestamp {
    Timestamp::from_second(1_700_000_000).expect("timestamp")
}

fn pod(name: &str, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                image: Some("nginx:1.19".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn status(allowed: i32, desired: i32) -> PodUnavailableBudgetStatus {
    PodUnavailableBudgetStatus {
        unavailable_allowed: allowed,
        desired_available: desired,
        ..Default::default()
    }
}

fn request<'a>(
    pod: &'a Pod,
    operation: PubOperation,
    annotations: Option<&'a BTreeMap<String, String>>,
) -> Request<'a> {
    Request {
        pod,
        operation,
        pub_name: "web",
        pub_annotations: annotations,
        vertical_scaling: false,
        now: now(),
    }
}

#[test]
fn protected_operations_follow_the_annotation() {
    use PubOperation::*;
    let cases: [(Option<&str>, bool, &[PubOperation]); 6] = [
        (None, false, &[Update, Delete, Evict, Resize]),
        (None, true, &[Update, Delete, Evict]),
        (Some(""), true, &[Update, Delete, Evict]),
        (Some("DELETE"), false, &[Delete]),
        (Some("EVICT,UPDATE"), false, &[Update, Evict, Resize]),
        (Some("RESIZE,bogus"), true, &[Resize]),
    ];
    for (annotation, scaling, want) in cases {
        let got: Vec<PubOperation> = protected_operations(annotation, scaling)
            .into_iter()
            .collect();
        assert_eq!(got, want, "{annotation:?} scaling={scaling}");
    }
}

#[test]
fn a_pod_is_labelled_guarded_when_its_budget_guards_its_removal() {
    let annotated = |value: &str| {
        Some(BTreeMap::from([(
            PUB_PROTECT_OPERATIONS_ANNOTATION.to_string(),
            value.to_string(),
        )]))
    };
    let mut no_protect = pod("p", true);
    no_protect.metadata.annotations = Some(BTreeMap::from([(
        POD_NO_PROTECT_ANNOTATION.to_string(),
        "true".to_string(),
    )]));
    let plain = pod("p", true);
    let cases = [
        (None, &plain, true),
        (annotated(""), &plain, true),
        (annotated("DELETE"), &plain, true),
        (annotated("EVICT"), &plain, true),
        (annotated("UPDATE"), &plain, false),
        (annotated("UPDATE,RESIZE"), &plain, false),
        (None, &no_protect, false),
    ];
    for (annotations, pod, want) in cases {
        assert_eq!(
            guards_removal(annotations.as_ref(), pod),
            want,
            "{annotations:?}"
        );
    }
}

#[test]
fn desired_available_from_max_unavailable_or_min_available() {
    let spec = |max: Option<IntOrString>, min: Option<IntOrString>| PodUnavailableBudgetSpec {
        max_unavailable: max,
        min_available: min,
        ..Default::default()
    };
    let int = IntOrString::Int;
    let pct = |s: &str| IntOrString::String(s.into());
    let cases = [
        (spec(Some(int(1)), None), 5, Ok(4)),
        (spec(Some(pct("25%")), None), 10, Ok(7)), // 2.5 rounds up to 3
        (spec(Some(int(8)), None), 5, Ok(0)),
        (spec(None, Some(int(3))), 5, Ok(3)),
        (spec(None, Some(pct("50%"))), 5, Ok(3)),
        (spec(Some(int(1)), Some(int(4))), 5, Ok(4)), // maxUnavailable wins
        (spec(None, None), 5, Ok(0)),
    ];
    for (spec, total, want) in cases {
        assert_eq!(desired_available(&spec, total), want, "{spec:?}");
    }
    let bad = spec(Some(pct("x")), None);
    assert!(
        desired_available(&bad, 3)
            .expect_err("bad percent")
            .starts_with("spec.maxUnavailable")
    );
}

#[test]
fn admission_table() {
    let ready = pod("p", true);
    let not_ready = pod("p", false);
    let mut no_protect = pod("p", true);
    no_protect.metadata.annotations = Some(BTreeMap::from([(
        "pub.kruise.io/no-protect".to_string(),
        "true".to_string(),
    )]));
    let mut labelled = pod("p", true);
    labelled.metadata.labels = Some(BTreeMap::from([(
        "unavailable-pod.kruise.io/x".to_string(),
        "true".to_string(),
    )]));
    let delete_only = BTreeMap::from([(
        "kruise.io/pub-protect-operations".to_string(),
        "DELETE".to_string(),
    )]);
    let mut recorded = status(0, 2);
    recorded.disrupted_pods = Some(BTreeMap::from([("p".to_string(), Time(now()))]));

    let pass = |a: &Admission| matches!(a, Admission::Pass(_));
    assert!(pass(&admit(
        &request(&no_protect, PubOperation::Delete, None),
        &status(0, 2)
    )));
    assert!(pass(&admit(
        &request(&not_ready, PubOperation::Delete, None),
        &status(0, 2)
    )));
    assert!(pass(&admit(
        &request(&labelled, PubOperation::Evict, None),
        &status(0, 2)
    )));
    assert!(pass(&admit(
        &request(&ready, PubOperation::Delete, None),
        &status(0, 0)
    )));
    assert!(pass(&admit(
        &request(&ready, PubOperation::Evict, Some(&delete_only)),
        &status(0, 2)
    )));
    assert!(pass(&admit(
        &request(&ready, PubOperation::Delete, None),
        &recorded
    )));

    assert_eq!(
        admit(&request(&ready, PubOperation::Evict, None), &status(0, 2)),
        Admission::Refuse(
            "podunavailablebudgets.policy.kruise.io \"web\" is forbidden: pub unavailable allowed is negative"
                .into()
        )
    );
    let Admission::Take(next) = admit(&request(&ready, PubOperation::Delete, None), &status(2, 2))
    else {
        panic!("a unit of the budget is taken");
    };
    assert_eq!(next.unavailable_allowed, 1);
    assert_eq!(next.disrupted_pods.as_ref().map(|m| m.len()), Some(1));
    assert_eq!(next.unavailable_pods.as_ref().map(|m| m.len()), Some(0));
    let Admission::Take(next) = admit(&request(&ready, PubOperation::Update, None), &status(1, 2))
    else {
        panic!("an update takes a unit");
    };
    assert!(
        next.unavailable_pods
            .as_ref()
            .is_some_and(|m| m.contains_key("p"))
    );
}

#[test]
fn update_may_disrupt_on_spec_or_unavailable_label() {
    let old = pod("p", true);
    let mut label_only = old.clone();
    label_only.metadata.labels = Some(BTreeMap::from([("a".to_string(), "b".to_string())]));
    assert!(!update_may_disrupt(&old, &label_only));
    let mut unavailable = old.clone();
    unavailable.metadata.labels = Some(BTreeMap::from([(
        "unavailable-pod.kruise.io/drain".to_string(),
        "true".to_string(),
    )]));
    assert!(update_may_disrupt(&old, &unavailable));
    let mut image = old.clone();
    if let Some(spec) = image.spec.as_mut() {
        spec.containers[0].image = Some("nginx:1.20".into());
    }
    assert!(update_may_disrupt(&old, &image));
}

#[test]
fn digest_pinned_images_must_run_their_digest() {
    let mut p = pod("p", true);
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].image = Some("nginx@sha256:aaa".into());
    }
    assert!(!is_state_consistent(&p));
    if let Some(status) = p.status.as_mut() {
        status.container_statuses = Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
            name: "main".into(),
            image_id: "docker.io/library/nginx@sha256:aaa".into(),
            ..Default::default()
        }]);
    }
    assert!(is_state_consistent(&p));
}

/// A sidecar a SidecarSet just changed in place is not available until it runs the new image,
/// although the kubelet still reports the Pod ready (upstream's IsSidecarContainerUpdateCompleted).
#[test]
fn a_sidecar_changed_in_place_counts_only_once_it_restarted() {
    let state = |image_id: &str| {
        serde_json::json!({"sidecars": {"revision": "r2",
            "lastContainerStatuses": {"sidecar": {"imageID": image_id}}}})
        .to_string()
    };
    let with =
        |annotation: Option<String>, spec_image: &str, status_image: &str, status_id: &str| {
            let mut p = pod("p", true);
            if let Some(spec) = p.spec.as_mut() {
                spec.containers.push(k8s_openapi::api::core::v1::Container {
                    name: "sidecar".into(),
                    image: Some(spec_image.into()),
                    ..Default::default()
                });
            }
            if let Some(status) = p.status.as_mut() {
                status.container_statuses =
                    Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                        name: "sidecar".into(),
                        image: status_image.into(),
                        image_id: status_id.into(),
                        ready: true,
                        ..Default::default()
                    }]);
            }
            if let Some(annotation) = annotation {
                p.metadata.annotations = Some(BTreeMap::from([(
                    "kruise.io/sidecarset-inplace-update-state".to_string(),
                    annotation,
                )]));
            }
            p
        };
    // (annotation, spec image, status image, status imageID, consistent)
    let cases = [
        (None, "nginx:2", "nginx:1", "id-1", true),
        (Some(state("id-1")), "nginx:2", "nginx:1", "id-1", false),
        (Some(state("id-1")), "nginx:2", "nginx:2", "id-2", true),
        // The new image has the old one's imageID: the status image tells it restarted.
        (Some(state("id-1")), "nginx:2", "nginx:2", "id-1", true),
        (Some("{".to_string()), "nginx:2", "nginx:2", "id-2", false),
    ];
    for (annotation, spec_image, status_image, status_id, consistent) in cases {
        let p = with(annotation.clone(), spec_image, status_image, status_id);
        assert_eq!(
            is_state_consistent(&p),
            consistent,
            "{annotation:?} {spec_image} {status_image} {status_id}"
        );
        assert_eq!(is_available(&p), consistent);
    }
}

#[test]
fn status_counts_available_pods_and_expires_records() {
    let a = pod("a", true);
    let b = pod("b", true);
    let c = pod("c", false);
    let mut gone = pod("d", true);
    gone.metadata.deletion_timestamp = Some(Time(now()));
    let previous = PodUnavailableBudgetStatus {
        disrupted_pods: Some(BTreeMap::from([
            ("a".to_string(), Time(now() - SignedDuration::from_secs(5))),
            ("b".to_string(), Time(now() - SignedDuration::from_secs(30))),
            ("d".to_string(), Time(now())),
        ])),
        unavailable_pods: Some(BTreeMap::from([(
            "c".to_string(),
            Time(now() - SignedDuration::from_secs(2)),
        )])),
        ..Default::default()
    };
    let (got, recheck) = compute_status(&[&a, &b, &c, &gone], &previous, 3, 4, 2, now());
    // a is recorded (15 s left), b's record expired (counted again), c recorded 8 s more, d gone.
    assert_eq!(
        got.disrupted_pods
            .as_ref()
            .map(|m| m.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["a".to_string()])
    );
    assert_eq!(
        got.unavailable_pods
            .as_ref()
            .map(|m| m.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["c".to_string()])
    );
    assert_eq!(got.current_available, 1);
    assert_eq!(got.unavailable_allowed, 0);
    assert_eq!(
        (
            got.desired_available,
            got.total_replicas,
            got.observed_generation
        ),
        (2, 4, 3)
    );
    assert_eq!(recheck, Some(SignedDuration::from_secs(8)));
    assert!(same_status(&got, &got.clone()));
    let (again, _) = compute_status(
        &[&a, &b],
        &PodUnavailableBudgetStatus::default(),
        3,
        4,
        0,
        now(),
    );
    assert_eq!((again.current_available, again.unavailable_allowed), (2, 2));
}

#[test]
fn deletion_protection_messages_are_upstreams() {
    let labels = |v: &str| {
        Some(BTreeMap::from([(
            "policy.kruise.io/delete-protection".to_string(),
            v.to_string(),
        )]))
    };
    assert_eq!(
        workload_deletion(labels("Always").as_ref(), false, Some(0)).as_deref(),
        Some(
            "forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Always"
        )
    );
    assert_eq!(
        workload_deletion(labels("Cascading").as_ref(), false, Some(3)).as_deref(),
        Some(
            "forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Cascading and replicas 3>0"
        )
    );
    assert_eq!(
        workload_deletion(labels("Cascading").as_ref(), false, Some(0)),
        None
    );
    assert_eq!(
        workload_deletion(labels("Always").as_ref(), true, Some(1)),
        None
    );
    assert_eq!(
        workload_deletion(labels("Never").as_ref(), false, Some(1)),
        None
    );
    assert_eq!(workload_deletion(None, false, Some(1)), None);
    assert_eq!(
        namespace_cascading(2, 1).as_deref(),
        Some(
            "forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Cascading and active pods 2>0"
        )
    );
    assert_eq!(
        namespace_cascading(0, 1).as_deref(),
        Some(
            "forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Cascading and \"Bound\" status pvc 1>0"
        )
    );
    assert_eq!(namespace_cascading(0, 0), None);
    assert!(crd_cascading(1).is_some_and(|m| m.ends_with("active CRs 1>0")));
    assert_eq!(crd_cascading(0), None);
}

/// A budget status stored with a resourceVersion: a write lands only over the version it was
/// computed from, as the apiserver's precondition does.
struct Store {
    version: u64,
    status: PodUnavailableBudgetStatus,
}

proptest! {
    /// Concurrent evictions, each reading some (possibly stale) copy of the status, writing its
    /// decision with a resourceVersion precondition and retrying on conflict: never more Pods
    /// admitted than the budget allowed, and every refusal happens only once it is exhausted.
    #[test]
    fn concurrent_evictions_never_exceed_the_budget(
        allowed in 0i32..6,
        evictions in 1usize..12,
        schedule in proptest::collection::vec(0usize..12, 1..200),
    ) {
        let pods: Vec<Pod> = (0..evictions).map(|i| pod(&format!("p{i}"), true)).collect();
        let mut store = Store { version: 1, status: status(allowed, 3) };
        // Each eviction: the copy it read (version, status), or done.
        let mut copies: Vec<Option<(u64, PodUnavailableBudgetStatus)>> =
            (0..evictions).map(|_| Some((store.version, store.status.clone()))).collect();
        let mut admitted = 0;
        let mut refused = 0;
        let mut steps = schedule.into_iter().cycle().take(10_000);
        while copies.iter().any(Option::is_some) {
            let Some(pick) = steps.next() else { break };
            let i = pick % evictions;
            // The first pending eviction at or after i acts.
            let Some(i) = (0..evictions).map(|k| (i + k) % evictions).find(|k| copies[*k].is_some())
            else { break };
            let Some((version, copy)) = copies[i].take() else { continue };
            match admit(&request(&pods[i], PubOperation::Evict, None), &copy) {
                Admission::Refuse(_) => {
                    prop_assert!(store.status.unavailable_allowed <= 0 || version != store.version);
                    if version == store.version { refused += 1; } else {
                        copies[i] = Some((store.version, store.status.clone()));
                    }
                }
                Admission::Pass(_) => prop_assert!(false, "an available Pod is always counted"),
                Admission::Take(next) => {
                    if version == store.version {
                        store.version += 1;
                        store.status = next;
                        admitted += 1;
                    } else {
                        // 409 Conflict: read again and retry.
                        copies[i] = Some((store.version, store.status.clone()));
                    }
                }
            }
        }
        prop_assert!(admitted <= allowed.max(0) as usize);
        prop_assert_eq!(admitted + refused, evictions);
        prop_assert_eq!(admitted, (allowed.max(0) as usize).min(evictions));
    }
}

/// Upstream's `TestCanResizeInplace` cases (pkg/control/pubcontrol/pub_control_test.go at v1.9.0)
/// and a few more: which Pod updates a budget decides as RESIZE rather than UPDATE.
#[test]
fn resize_in_place_table() {
    use k8s_openapi::api::core::v1::{ContainerResizePolicy, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    type List<'a> = &'a [(&'a str, &'a str)];
    let with = |requests: List<'_>, limits: List<'_>, policy: List<'_>| {
        let mut p = pod("p", true);
        let list = |l: List<'_>| {
            (!l.is_empty()).then(|| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        if let Some(spec) = p.spec.as_mut() {
            let c = &mut spec.containers[0];
            c.resources = Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..Default::default()
            });
            c.resize_policy = (!policy.is_empty()).then(|| {
                policy
                    .iter()
                    .map(|(r, p)| ContainerResizePolicy {
                        resource_name: r.to_string(),
                        restart_policy: p.to_string(),
                    })
                    .collect()
            });
        }
        p
    };
    let base_req: List<'_> = &[("cpu", "1"), ("memory", "2Gi")];
    let base_lim: List<'_> = &[("cpu", "2"), ("memory", "4Gi")];
    let base = with(base_req, base_lim, &[]);
    let labelled = |mut p: Pod, k: &str| {
        p.metadata
            .labels
            .get_or_insert_default()
            .insert(k.into(), "true".into());
        p
    };
    let annotated = |mut p: Pod, k: &str, v: &str| {
        p.metadata
            .annotations
            .get_or_insert_default()
            .insert(k.into(), v.into());
        p
    };
    let mixed: List<'_> = &[("cpu", "RestartContainer"), ("memory", "NotRequired")];
    let image = {
        let mut p = with(base_req, &[("cpu", "3"), ("memory", "4Gi")], &[]);
        if let Some(spec) = p.spec.as_mut() {
            spec.containers[0].image = Some("nginx:1.20".into());
        }
        p
    };
    let cases: Vec<(&str, Pod, Pod, bool)> = vec![
        (
            "qos changed (BestEffort to Guaranteed)",
            pod("p", true),
            with(
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1Gi")],
                &[],
            ),
            false,
        ),
        (
            "resources changed",
            base.clone(),
            with(&[("cpu", "3"), ("memory", "3Gi")], base_lim, &[]),
            true,
        ),
        (
            "the same quantity written differently is no change",
            base.clone(),
            with(&[("cpu", "1000m"), ("memory", "2Gi")], base_lim, &[]),
            true,
        ),
        (
            "storage limit added",
            base.clone(),
            with(
                base_req,
                &[
                    ("cpu", "2"),
                    ("memory", "4Gi"),
                    ("ephemeral-storage", "1Gi"),
                ],
                &[],
            ),
            false,
        ),
        (
            "storage request removed",
            with(
                &[
                    ("cpu", "1"),
                    ("memory", "2Gi"),
                    ("ephemeral-storage", "1Gi"),
                ],
                base_lim,
                &[],
            ),
            base.clone(),
            false,
        ),
        (
            "resources changed but static pod",
            annotated(base.clone(), "kubernetes.io/config.source", "file"),
            annotated(
                with(&[("cpu", "3"), ("memory", "3Gi")], base_lim, &[]),
                "kubernetes.io/config.source",
                "file",
            ),
            false,
        ),
        (
            "config.source api is not static",
            annotated(base.clone(), "kubernetes.io/config.source", "api"),
            annotated(
                with(&[("cpu", "3"), ("memory", "3Gi")], base_lim, &[]),
                "kubernetes.io/config.source",
                "api",
            ),
            true,
        ),
        (
            "cpu changed with resizePolicy RestartContainer",
            with(base_req, base_lim, mixed),
            with(&[("cpu", "3"), ("memory", "2Gi")], base_lim, mixed),
            false,
        ),
        (
            "memory changed, its resizePolicy NotRequired (cpu's RestartContainer unused)",
            with(base_req, base_lim, mixed),
            with(
                &[("cpu", "1"), ("memory", "3Gi")],
                &[("cpu", "2"), ("memory", "5Gi")],
                mixed,
            ),
            true,
        ),
        (
            "resources changed and an unavailable label added",
            base.clone(),
            labelled(
                with(&[("cpu", "3"), ("memory", "3Gi")], base_lim, &[]),
                "unavailable-pod.kruise.io/resize",
            ),
            false,
        ),
        ("an image changed too", base.clone(), image, false),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(resize_in_place(&old, &new), want, "{name}");
    }
}
