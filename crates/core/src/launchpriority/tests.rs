use super::*;
use serde_json::json;

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).expect("test Pod")
}

fn containers(envs: &[Option<&str>]) -> serde_json::Value {
    json!(
        envs.iter()
            .enumerate()
            .map(|(i, v)| match v {
                Some(v) => json!({"name": format!("c{i}"), "image": "x",
                    "env": [{"name": "A", "value": "1"}, {"name": ENV_CONTAINER_PRIORITY, "value": v}]}),
                None => json!({"name": format!("c{i}"), "image": "x"}),
            })
            .collect::<Vec<_>>()
    )
}

/// (name, annotations, containers, wanted priorities)
type CreationCase = (
    &'static str,
    serde_json::Value,
    serde_json::Value,
    Result<Option<Vec<i64>>, InvalidPriority>,
);

#[test]
fn creation_priorities_table() {
    let ordered = json!({ANNOTATION_CONTAINER_LAUNCH_PRIORITY: ORDERED});
    let cases: Vec<CreationCase> = vec![
        (
            "one container, even Ordered",
            ordered.clone(),
            containers(&[Some("5")]),
            Ok(None),
        ),
        (
            "Ordered: listed order",
            ordered.clone(),
            containers(&[None, Some("9"), None]),
            Ok(Some(vec![0, -1, -2])),
        ),
        (
            "other annotation value",
            json!({ANNOTATION_CONTAINER_LAUNCH_PRIORITY: "ordered"}),
            containers(&[None, None]),
            Ok(None),
        ),
        (
            "no priorities",
            json!({}),
            containers(&[None, None]),
            Ok(None),
        ),
        (
            "equal priorities",
            json!({}),
            containers(&[Some("3"), Some("3")]),
            Ok(None),
        ),
        (
            "differ: missing is 0",
            json!({}),
            containers(&[Some("3"), None, Some("-2")]),
            Ok(Some(vec![3, 0, -2])),
        ),
        (
            "all zero written out",
            json!({}),
            containers(&[Some("0"), None]),
            Ok(None),
        ),
        (
            "spaces trimmed",
            json!({}),
            containers(&[Some(" 1 "), None]),
            Ok(Some(vec![1, 0])),
        ),
        (
            "not an integer names the container",
            json!({}),
            containers(&[None, Some("high")]),
            Err(InvalidPriority {
                index: 1,
                value: "high".into(),
            }),
        ),
    ];
    for (name, annotations, containers, want) in cases {
        let pod = pod(
            json!({"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": containers}}),
        );
        assert_eq!(creation_priorities(&pod), want, "{name}");
    }
}

#[test]
fn invalid_priority_message_names_the_field() {
    let error = InvalidPriority {
        index: 2,
        value: "x".into(),
    };
    assert_eq!(
        error.to_string(),
        "spec.containers[2].env[KRUISE_CONTAINER_PRIORITY]: Invalid value: \"x\": must be an integer"
    );
}

#[test]
fn barriers_are_added_once_and_read_back() {
    let mut p = pod(
        json!({"metadata": {"name": "web-abcde"}, "spec": {"containers": containers(&[Some("1"), None])}}),
    );
    add_barriers(&mut p, "web-abcde", &[1, 0]);
    add_barriers(&mut p, "web-abcde", &[1, 0]);
    let spec = p.spec.as_ref().expect("spec");
    let env = spec.containers[0].env.as_ref().expect("env");
    assert_eq!(env.len(), 3, "A, the priority and one barrier");
    let barrier = env
        .last()
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.config_map_key_ref.as_ref());
    assert_eq!(
        barrier.map(|r| (r.name.as_str(), r.key.as_str())),
        Some(("web-abcde-barrier", "p_1"))
    );
    assert_eq!(barrier_priority(&spec.containers[0]), Some(1));
    assert_eq!(barrier_priority(&spec.containers[1]), Some(0));
    // The in-place batches read the same order.
    let priorities = crate::inplace::container_priorities(&p);
    assert_eq!(priorities.get("c0"), Some(&1));
    assert_eq!(priorities.get("c1"), Some(&0));
}

#[test]
fn generated_names_follow_kubernetes() {
    assert_eq!(generated_name("web-", "x2b4c"), "web-x2b4c");
    let long = "a".repeat(70);
    assert_eq!(generated_name(&long, "bcdfg").len(), 63);
}

/// A Pod with barrier priorities by container, the Ready ones, and extra metadata.
fn waiting(priorities: &[Option<i64>], ready: &[usize], extra: serde_json::Value) -> Pod {
    let mut p = pod(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": priorities.iter().enumerate().map(|(i, _)| json!({"name": format!("c{i}"), "image": "x"})).collect::<Vec<_>>()},
        "status": {"containerStatuses": priorities.iter().enumerate().map(|(i, _)| json!({
            "name": format!("c{i}"), "image": "x", "imageID": "", "restartCount": 0, "ready": ready.contains(&i)
        })).collect::<Vec<_>>()},
    }));
    if let Some(spec) = p.spec.as_mut() {
        for (container, priority) in spec.containers.iter_mut().zip(priorities) {
            if let Some(priority) = priority {
                container.env = Some(vec![barrier_env(*priority, "p")]);
            }
        }
    }
    let mut value = serde_json::to_value(&p).expect("to json");
    json_patch::merge(&mut value, &extra);
    serde_json::from_value(value).expect("patched Pod")
}

#[test]
fn next_step_table() {
    let none = json!({});
    let completed = json!({"metadata": {"annotations": {ANNOTATION_COMPLETED: "true"}}});
    let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
    let all_ready =
        json!({"status": {"conditions": [{"type": "ContainersReady", "status": "True"}]}});
    let three = [Some(0), Some(-1), Some(-2)];
    let cases: Vec<(&str, Pod, &[&str], Step)> = vec![
        (
            "fresh Pod: highest first",
            waiting(&three, &[], none.clone()),
            &[],
            Step::Release("p_0".into()),
        ),
        (
            "highest released, its container not Ready",
            waiting(&three, &[], none.clone()),
            &["p_0"],
            Step::Wait,
        ),
        (
            "first Ready: next",
            waiting(&three, &[0], none.clone()),
            &["p_0"],
            Step::Release("p_-1".into()),
        ),
        (
            "last one",
            waiting(&three, &[0, 1], none.clone()),
            &["p_0", "p_-1"],
            Step::ReleaseLast("p_-2".into()),
        ),
        (
            "lowest already released",
            waiting(&three, &[0, 1], none.clone()),
            &["p_0", "p_-1", "p_-2"],
            Step::Complete,
        ),
        (
            "equal priorities release together",
            waiting(&[Some(1), Some(1)], &[], none.clone()),
            &[],
            Step::ReleaseLast("p_1".into()),
        ),
        (
            "containers without a barrier do not wait",
            waiting(&[None, Some(2), Some(1)], &[], none.clone()),
            &[],
            Step::Release("p_2".into()),
        ),
        (
            "no barrier at all: not ours",
            waiting(&[None, None], &[], none.clone()),
            &[],
            Step::Wait,
        ),
        (
            "completed",
            waiting(&three, &[], completed),
            &[],
            Step::Wait,
        ),
        (
            "being deleted",
            waiting(&three, &[], deleting),
            &[],
            Step::Wait,
        ),
        (
            "all containers Ready",
            waiting(&three, &[], all_ready),
            &[],
            Step::Wait,
        ),
    ];
    for (name, pod, released, want) in cases {
        assert_eq!(next_step(&pod, |k| released.contains(&k)), want, "{name}");
    }
}
