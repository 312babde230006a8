use super::*;
use crate::testreview::Review;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerStatus, ExecAction, HTTPGetAction, Lifecycle,
    LifecycleHandler, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::containerrecreaterequest::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStrategy,
};

fn request(containers: &[&str]) -> ContainerRecreateRequest {
    let mut r = ContainerRecreateRequest::new(
        "r",
        ContainerRecreateRequestSpec {
            pod_name: "p".into(),
            containers: containers
                .iter()
                .map(|n| ContainerRecreateRequestContainer {
                    name: (*n).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
    );
    r.metadata.namespace = Some("ns".into());
    r
}

fn pod() -> Pod {
    let hook = |handler: LifecycleHandler| Lifecycle {
        pre_stop: Some(handler),
        ..Default::default()
    };
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("n1".into()),
            termination_grace_period_seconds: Some(20),
            containers: vec![
                Container {
                    name: "app".into(),
                    lifecycle: Some(hook(LifecycleHandler {
                        exec: Some(ExecAction {
                            command: Some(vec!["sleep".into(), "1".into()]),
                        }),
                        ..Default::default()
                    })),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                Container {
                    name: "web".into(),
                    lifecycle: Some(hook(LifecycleHandler {
                        http_get: Some(HTTPGetAction {
                            port: IntOrString::Int(8080),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })),
                    ports: Some(vec![ContainerPort {
                        container_port: 8080,
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                Container {
                    name: "init-pending".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![
                ContainerStatus {
                    name: "app".into(),
                    container_id: Some("containerd://a".into()),
                    restart_count: 2,
                    ..Default::default()
                },
                ContainerStatus {
                    name: "web".into(),
                    container_id: Some("containerd://w".into()),
                    ..Default::default()
                },
                ContainerStatus {
                    name: "init-pending".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
    }
}

#[test]
fn new_requests_are_defaulted_and_checked() {
    let mut r = request(&["app"]);
    assert_eq!(default_new(&mut r), Ok(()));
    assert_eq!(r.strategy().failure_policy, "Fail");
    assert_eq!(
        r.labels().get(crr::LABEL_ACTIVE).map(String::as_str),
        Some("true")
    );
    type Change = Box<dyn Fn(&mut ContainerRecreateRequest)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "no pod",
            Box::new(|r| r.spec.pod_name.clear()),
            "podName can not be empty",
        ),
        (
            "no containers",
            Box::new(|r| r.spec.containers.clear()),
            "containers list can not be null",
        ),
        (
            "short deadline",
            Box::new(|r| r.spec.active_deadline_seconds = Some(2)),
            "activeDeadlineSeconds can not be less than 3s",
        ),
        (
            "negative grace",
            Box::new(|r| {
                r.spec.strategy = Some(ContainerRecreateRequestStrategy {
                    termination_grace_period_seconds: Some(-1),
                    ..Default::default()
                })
            }),
            "terminationGracePeriodSeconds must be non-negative integer",
        ),
        (
            "negative unready grace",
            Box::new(|r| {
                r.spec.strategy = Some(ContainerRecreateRequestStrategy {
                    unready_grace_period_seconds: Some(-1),
                    ..Default::default()
                })
            }),
            "unreadyGracePeriodSeconds must be non-negative integer",
        ),
        (
            "bad policy",
            Box::new(|r| {
                r.spec.strategy = Some(ContainerRecreateRequestStrategy {
                    failure_policy: "Retry".into(),
                    ..Default::default()
                })
            }),
            "unknown failurePolicy Retry",
        ),
    ];
    for (name, change, want) in cases {
        let mut r = request(&["app"]);
        change(&mut r);
        assert_eq!(
            default_new(&mut r).map_err(|e| e.message),
            Err(want.to_owned()),
            "{name}"
        );
    }
}

#[test]
fn the_pod_is_copied_into_the_request() {
    let mut r = request(&["app", "web"]);
    assert_eq!(default_new(&mut r), Ok(()));
    assert_eq!(inject(&mut r, &pod(), None), Ok(()));
    assert_eq!(
        r.labels().get(crr::LABEL_POD_UID).map(String::as_str),
        Some("uid-1")
    );
    assert_eq!(
        r.labels().get(crr::LABEL_NODE_NAME).map(String::as_str),
        Some("n1")
    );
    assert_eq!(r.strategy().termination_grace_period_seconds, Some(20));
    let app = &r.spec.containers[0];
    assert!(app.pre_stop.as_ref().is_some_and(|p| p.exec.is_some()));
    assert_eq!(app.ports, None, "ports are copied only for an httpGet hook");
    assert_eq!(
        app.status_context
            .as_ref()
            .map(|s| (s.container_id.as_str(), s.restart_count)),
        Some(("containerd://a", 2))
    );
    assert!(r.spec.containers[1].ports.is_some());

    let refused = |names: &[&str]| {
        let mut r = request(names);
        let _ = default_new(&mut r);
        inject(&mut r, &pod(), None).map_err(|e| e.message)
    };
    assert_eq!(
        refused(&["app", "app"]),
        Err("can not recreate app multi times".into())
    );
    assert_eq!(
        refused(&["nope"]),
        Err("container nope not found in Pod".into())
    );
    assert_eq!(
        refused(&["init-pending"]),
        Err("no containerID in init-pending containerStatus, maybe the container has not been initialized".into())
    );
    let mut preset = request(&["app"]);
    preset.spec.containers[0].ports = Some(vec![]);
    assert_eq!(
        inject(&mut preset, &pod(), None).map_err(|e| e.message),
        Err("preStop, ports, statusContext in container are ready-only fields".into())
    );
}

#[test]
fn inactive_or_pending_pods_are_refused() {
    let mut done = pod();
    if let Some(s) = done.status.as_mut() {
        s.phase = Some("Succeeded".into());
    }
    assert_eq!(
        check_pod(&done).map_err(|e| e.message),
        Err("not allowed to recreate containers in an inactive Pod".into())
    );
    let mut pending = pod();
    if let Some(s) = pending.spec.as_mut() {
        s.node_name = None;
    }
    assert_eq!(
        check_pod(&pending).map_err(|e| e.message),
        Err("not allowed to recreate containers in a pending Pod".into())
    );
    assert_eq!(check_pod(&pod()).ok(), Some("n1"));
}

#[test]
fn updates_keep_what_is_immutable() {
    let mut old = request(&["app"]);
    let _ = default_new(&mut old);
    let _ = inject(&mut old, &pod(), None);
    let mut new = old.clone();
    new.metadata.annotations = Some(
        [(
            crr::ANNOTATION_SYNC_CONTAINER_STATUSES.to_owned(),
            "[]".to_owned(),
        )]
        .into(),
    );
    assert_eq!(check_update(&new, &old), Ok(()));
    let mut spec = old.clone();
    spec.spec.active_deadline_seconds = Some(10);
    assert_eq!(check_update(&spec, &old).map_err(|e| e.code), Err(403));
    let mut uid = old.clone();
    uid.metadata
        .labels
        .get_or_insert_default()
        .insert(crr::LABEL_POD_UID.into(), "x".into());
    assert!(check_update(&uid, &old).is_err());
    let mut stamped = old.clone();
    stamped.metadata.annotations =
        Some([(crr::UNREADY_ACQUIRED.to_owned(), "t1".to_owned())].into());
    let mut restamped = stamped.clone();
    restamped.metadata.annotations =
        Some([(crr::UNREADY_ACQUIRED.to_owned(), "t2".to_owned())].into());
    assert_eq!(check_update(&stamped, &old), Ok(()));
    assert!(check_update(&restamped, &stamped).is_err());
}

#[tokio::test]
async fn the_gate_off_refuses_with_403() {
    let review = Review::of(
        "apps.kruise.io",
        "v1alpha1",
        "ContainerRecreateRequest",
        "containerrecreaterequests",
    )
    .namespace("ns")
    .object(serde_json::to_value(request(&["app"])).expect("json"))
    .build();
    let answer = review_request(review, false).await;
    assert!(!answer.allowed);
    let response = answer.review.response.expect("response");
    assert_eq!(response.result.code, 403);
    assert_eq!(
        response.result.message,
        "feature-gate KruiseDaemon is not enabled"
    );
}

async fn review_request(review: AdmissionReview<DynamicObject>, enabled: bool) -> Answer {
    super::review(review, enabled, None).await
}
