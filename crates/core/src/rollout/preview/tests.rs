//! The preview against the planners the controllers run: for each kind a partitioned rollout with
//! priority weights (where the kind has them), checked batch by batch, and its first batch checked
//! against what the controller's planner decides on the same snapshot in its first sync.

use k8s_openapi::api::core::v1::Container;
use serde_json::json;

use super::*;
use crate::sidecarset::{InjectContext, inject};

const OLD: &str = "web-old";
const NEW: &str = "web-new";

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("now")
}

fn template(image: &str) -> PodTemplateSpec {
    serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))
    .expect("template")
}

/// A Running, Ready Pod at `revision`, created `created` seconds after a fixed instant, on `node`.
fn pod(name: &str, revision: &str, labels: &[(&str, &str)], created: i64, node: &str) -> Pod {
    let mut l: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.insert("app".into(), "web".into());
    l.insert(
        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.into(),
        revision.into(),
    );
    let at = |s: i64| {
        Timestamp::from_second(1_700_000_000 + s)
            .expect("time")
            .to_string()
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": l, "creationTimestamp": at(created)},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:v1"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": at(0)}],
            "containerStatuses": [{"name": "app", "image": "app:v1", "imageID": "id-v1",
                "ready": true, "restartCount": 0, "started": true,
                "state": {"running": {}}}]}
    }))
    .expect("pod")
}

fn names(steps: &[PodStep]) -> Vec<(&str, usize)> {
    steps.iter().map(|s| (s.pod.as_str(), s.batch)).collect()
}

/// The preview updates the Pods of `want` (Pod, batch) in place, each for `why`, and keeps `stay`.
fn assert_in_place(preview: &Preview, want: &[(&str, usize)], why: &str, stay: &[&str]) {
    assert_eq!(names(&preview.steps), want, "{preview:?}");
    assert!(
        preview
            .steps
            .iter()
            .all(|s| s.action == Action::InPlace && s.why == why),
        "{preview:?}"
    );
    assert_eq!(preview.stay, stay, "{preview:?}");
}

const WEIGHTS: &str = r#"{"weightPriority": [
    {"weight": 100, "matchSelector": {"matchLabels": {"prio": "high"}}},
    {"weight": 50, "matchSelector": {"matchLabels": {"prio": "mid"}}}]}"#;

fn weights() -> Value {
    serde_json::from_str(WEIGHTS).expect("weights")
}

fn cloneset_of(rolling: Value, lifecycle: Option<Value>) -> CloneSet {
    let mut spec = json!({
        "replicas": 4, "selector": {"matchLabels": {"app": "web"}},
        "template": template("app:v2"),
        "updateStrategy": {"rollingUpdate": rolling}
    });
    if let Some(l) = lifecycle {
        spec["lifecycle"] = l;
    }
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
        "spec": spec
    }))
    .expect("cloneset")
}

fn web_pods(extra: &[(&str, &str)]) -> Vec<Pod> {
    let with = |prio: Option<(&'static str, &'static str)>| {
        let mut l: Vec<(&str, &str)> = extra.to_vec();
        l.extend(prio);
        l
    };
    vec![
        pod("web-a", OLD, &with(None), 1, "n"),
        pod("web-b", OLD, &with(Some(("prio", "high"))), 2, "n"),
        pod("web-c", OLD, &with(None), 3, "n"),
        pod("web-d", OLD, &with(Some(("prio", "mid"))), 4, "n"),
    ]
}

/// The preview of `cs` rolling `pods` from `old` (revision OLD) to its template (revision NEW).
fn cloneset_preview(cs: &CloneSet, old: &PodTemplateSpec, pods: &[Pod]) -> Preview {
    let current = Revision {
        name: OLD,
        template: old,
    };
    let update = Revision {
        name: NEW,
        template: &cs.spec.template,
    };
    let settings = Settings::default();
    cloneset(
        cs,
        pods,
        current,
        update,
        &[current, update],
        settings,
        now(),
    )
    .expect("preview")
}

#[test]
fn cloneset_partitioned_priority_rollout_agrees_with_the_controller_planner() {
    let old = template("app:v1");
    let cs = cloneset_of(
        json!({"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 1, "partition": 1,
            "priorityStrategy": weights()}),
        None,
    );
    let current = Revision {
        name: OLD,
        template: &old,
    };
    let update = Revision {
        name: NEW,
        template: &cs.spec.template,
    };
    let revisions = [current, update];
    let pods = web_pods(&[]);
    let preview = cloneset(
        &cs,
        &pods,
        current,
        update,
        &revisions,
        Settings::default(),
        now(),
    )
    .expect("preview");
    let want = [("web-b", 1), ("web-d", 2), ("web-c", 3)];
    assert_in_place(&preview, &want, "image app → app:v2", &["web-a"]);
    assert_eq!((preview.partition, preview.max_unavailable), (1, 1));

    // The controller's first sync on the same snapshot updates exactly batch 1.
    let node_labels = BTreeMap::new();
    let snapshot = decide::Snapshot {
        cs: &cs,
        pods: &pods,
        current,
        update,
        revisions: &revisions,
        vct_hashes: &BTreeMap::new(),
        node_labels: &node_labels,
        now: now(),
        settings: Settings::default(),
    };
    assert_eq!(decide::scale_step(&snapshot), Ok(ScaleStep::None));
    let step = decide::update_step(&snapshot).expect("update step");
    let first: Vec<&str> = step
        .actions
        .iter()
        .filter_map(|a| match a {
            UpdateAction::InPlace { pod, .. } => pods[*pod].metadata.name.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(first, preview.batches()[0]);
}

#[test]
fn cloneset_lifecycle_hook_holds_each_pod_before_its_update() {
    let old = template("app:v1");
    let cs = cloneset_of(
        json!({"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 2, "partition": 1,
            "priorityStrategy": weights()}),
        Some(json!({"inPlaceUpdate": {"labelsHandler": {"hold": "true"}}})),
    );
    let pods = web_pods(&[("hold", "true"), (keys::LABEL_LIFECYCLE_STATE, "Normal")]);
    let preview = cloneset_preview(&cs, &old, &pods);
    assert_eq!(
        names(&preview.steps),
        [("web-b", 1), ("web-d", 1), ("web-c", 2)],
        "{preview:?}"
    );
    assert!(
        preview
            .steps
            .iter()
            .all(|s| s.why.starts_with("after the inPlaceUpdate hook: ")),
        "{preview:?}"
    );
}

#[test]
fn cloneset_policies_say_how_and_why() {
    let old = template("app:v1");
    let mut env_change = template("app:v1");
    if let Some(spec) = env_change.spec.as_mut() {
        spec.containers[0].env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "A".into(),
            value: Some("1".into()),
            ..Default::default()
        }]);
    }
    struct Case {
        name: &'static str,
        rolling: Value,
        new: PodTemplateSpec,
        want: Vec<(&'static str, usize, Action)>,
        why: &'static str,
    }
    let cases = [
        Case {
            name: "ReCreate: the replacement of each Pod is created before the next goes",
            rolling: json!({"maxUnavailable": 1}),
            new: template("app:v2"),
            want: vec![
                ("web-d", 1, Action::Recreate),
                ("web-c", 2, Action::Recreate),
                ("web-b", 3, Action::Recreate),
                ("web-a", 4, Action::Recreate),
            ],
            why: "podUpdatePolicy ReCreate",
        },
        Case {
            name: "InPlaceOnly refuses what it cannot do in place",
            rolling: json!({"podUpdatePolicy": "InPlaceOnly", "maxUnavailable": 2}),
            new: env_change.clone(),
            want: vec![
                ("web-d", 1, Action::Refused),
                ("web-c", 1, Action::Refused),
                ("web-b", 2, Action::Refused),
                ("web-a", 2, Action::Refused),
            ],
            why: "update strategy is InPlaceOnly but can not update in-place",
        },
        Case {
            name: "InPlaceIfPossible recreates an env change and says why",
            rolling: json!({"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 4}),
            new: env_change,
            want: vec![
                ("web-d", 1, Action::Recreate),
                ("web-c", 1, Action::Recreate),
                ("web-b", 1, Action::Recreate),
                ("web-a", 1, Action::Recreate),
            ],
            why: "/spec/containers/0/env changed and cannot be updated in place",
        },
    ];
    for case in cases {
        let mut cs = cloneset_of(case.rolling, None);
        cs.spec.template = case.new.clone();
        let preview = cloneset_preview(&cs, &old, &web_pods(&[]));
        let got: Vec<(&str, usize, Action)> = preview
            .steps
            .iter()
            .map(|s| (s.pod.as_str(), s.batch, s.action.clone()))
            .collect();
        assert_eq!(got, case.want, "{}", case.name);
        assert!(
            preview.steps.iter().all(|s| s.why.contains(case.why)),
            "{}: {preview:?}",
            case.name
        );
        assert!(preview.stay.is_empty(), "{}", case.name);
    }
}

#[test]
fn a_paused_cloneset_is_previewed_as_resumed_with_a_note() {
    let old = template("app:v1");
    let cs = cloneset_of(json!({"paused": true, "partition": 4}), None);
    let preview = cloneset_preview(&cs, &old, &web_pods(&[]));
    assert!(preview.steps.is_empty());
    assert_eq!(preview.stay.len(), 4);
    assert_eq!(preview.note.as_deref(), Some(PAUSED));
}

fn sts_of(spec: Value) -> StatefulSet {
    let mut doc = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ns", "uid": "u1"},
        "spec": {"replicas": 4, "serviceName": "db", "selector": {"matchLabels": {"app": "web"}},
            "template": template("app:v2")}
    });
    json_patch::merge(&mut doc["spec"], &spec);
    serde_json::from_value(doc).expect("statefulset")
}

fn db_pods() -> Vec<Pod> {
    (0..4)
        .map(|i| {
            let prio: &[(&str, &str)] = match i {
                1 => &[("prio", "high")],
                2 => &[("prio", "mid")],
                _ => &[],
            };
            pod(&format!("db-{i}"), OLD, prio, i, "n")
        })
        .collect()
}

#[test]
fn statefulset_partitioned_priority_rollout_agrees_with_the_controller_planner() {
    let old = template("app:v1");
    type Case = (
        &'static str,
        Value,
        Vec<(&'static str, usize)>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "OrderedReady: highest ordinal first, one at a time, partition keeps db-0",
            json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
                "partition": 1}}}),
            vec![("db-3", 1), ("db-2", 2), ("db-1", 3)],
            vec!["db-0"],
        ),
        (
            "Parallel, unordered by priority, maxUnavailable 2, partition 1",
            json!({"podManagementPolicy": "Parallel",
                "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
                "partition": 1, "maxUnavailable": 2,
                "unorderedUpdate": {"priorityStrategy": weights()}}}}),
            vec![("db-1", 1), ("db-2", 1), ("db-3", 2)],
            vec!["db-0"],
        ),
    ];
    for (name, spec, want, stay) in cases {
        let sts = sts_of(spec);
        let current = Revision {
            name: OLD,
            template: &old,
        };
        let update = Revision {
            name: NEW,
            template: &sts.spec.template,
        };
        let revisions = [current, update];
        let pods = db_pods();
        let preview =
            statefulset(&sts, &pods, current, update, &revisions, false, now()).expect(name);
        assert_in_place(&preview, &want, "image app → app:v2", &stay);

        let snapshot = statefulset::Snapshot {
            name: "db",
            spec: &sts.spec,
            status_current_replicas: 0,
            pods: &pods,
            current,
            update,
            revisions: &revisions,
            now: now(),
            resize: false,
            env_from_metadata: true,
        };
        let plan = statefulset::plan(&snapshot).expect("plan");
        let first: Vec<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                statefulset::Action::InPlace { pod, .. } => pods[*pod].metadata.name.as_deref(),
                _ => None,
            })
            .collect();
        assert_eq!(first, preview.batches()[0], "{name}");
    }
}

fn nodes(names: &[&str]) -> Vec<Node> {
    names
        .iter()
        .map(|n| {
            serde_json::from_value(json!({"metadata": {"name": n, "labels": {"zone": "z"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("node")
        })
        .collect()
}

#[test]
fn daemonset_partitioned_rollout_agrees_with_the_controller_planner() {
    // Advanced DaemonSet has no priority strategy: it rolls by node name, highest first.
    let old = template("app:v1");
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "ns", "uid": "u1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible",
                "maxUnavailable": 1, "partition": 1}},
            "template": template("app:v2")}
    }))
    .expect("daemonset");
    let update = Revision {
        name: NEW,
        template: &ds.spec.template,
    };
    let revisions = [
        Revision {
            name: OLD,
            template: &old,
        },
        update,
    ];
    let pods: Vec<Pod> = ["n-b", "n-a", "n-c"]
        .iter()
        .enumerate()
        .map(|(k, node)| {
            let mut p = pod(&format!("agent-{node}"), OLD, &[], k as i64, node);
            // Created by the controller of an InPlaceIfPossible set, with its readiness gate.
            if let Some(spec) = p.spec.as_mut() {
                spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                    condition_type: keys::CONDITION_IN_PLACE_UPDATE_READY.into(),
                }]);
            }
            p
        })
        .collect();
    let cluster = nodes(&["n-a", "n-b", "n-c"]);
    let preview =
        daemonset(&ds, &pods, &cluster, update, &revisions, false, now()).expect("preview");
    let want = [("agent-n-c", 1), ("agent-n-b", 2)];
    assert_in_place(&preview, &want, "image app → app:v2", &["agent-n-a"]);

    let labels: Vec<BTreeMap<String, String>> = cluster
        .iter()
        .map(|n| n.metadata.labels.clone().unwrap_or_default())
        .collect();
    let template_spec = ds.spec.template.spec.clone().unwrap_or_default();
    let views: Vec<daemonset::NodeView<'_>> = cluster
        .iter()
        .zip(&labels)
        .map(|(node, labels)| daemonset::node_view(&template_spec, node, labels))
        .collect();
    let plan = daemonset::plan(&daemonset::Snapshot {
        spec: &ds.spec,
        pods: &pods,
        nodes: &views,
        update,
        revisions: &revisions,
        now: now(),
        resize: false,
        env_from_metadata: true,
        prune_ineligible_nodes: false,
    })
    .expect("plan");
    let first: Vec<&str> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            daemonset::Action::InPlace { pod, .. } => pods[*pod].metadata.name.as_deref(),
            _ => None,
        })
        .collect();
    assert_eq!(first, preview.batches()[0]);
}

fn sidecarset_of(image: &str, strategy: Value) -> SidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": {"name": "log"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "containers": [{"name": "log", "image": image}],
            "updateStrategy": strategy}
    }))
    .expect("sidecarset")
}

/// `pods` with the sidecar of `ss` injected, running its image.
fn injected(ss: &SidecarSet, pods: &[Pod]) -> Vec<Pod> {
    let revisions = BTreeMap::new();
    let ctx = InjectContext {
        now: now(),
        revisions: &revisions,
        random: &|| 0.0,
        sort_sidecars_by_name: false,
    };
    pods.iter()
        .map(|p| {
            let mut pod = inject(p, &[ss], &ctx).expect("inject").pod;
            let status = pod.status.get_or_insert_with(PodStatus::default);
            let statuses = status.container_statuses.get_or_insert_with(Vec::new);
            let spec: Vec<Container> = pod
                .spec
                .as_ref()
                .map(|s| s.containers.clone())
                .unwrap_or_default();
            statuses.retain(|s| s.name == "app");
            for c in spec.iter().filter(|c| c.name != "app") {
                let mut s = statuses[0].clone();
                s.name = c.name.clone();
                s.image = c.image.clone().unwrap_or_default();
                s.image_id = format!("id-{}", s.image);
                statuses.push(s);
            }
            pod
        })
        .collect()
}

#[test]
fn sidecarset_partitioned_priority_rollout_agrees_with_the_controller_planner() {
    let strategy = json!({"partition": 1, "maxUnavailable": 1, "priorityStrategy": weights()});
    let pods = injected(&sidecarset_of("log:v1", strategy.clone()), &web_pods(&[]));
    let ss = sidecarset_of("log:v2", strategy);
    let preview = sidecarset(&ss, &pods).expect("preview");
    let want = [("web-b", 1), ("web-d", 2), ("web-c", 3)];
    assert_in_place(&preview, &want, "image log → log:v2", &["web-a"]);

    let managed: Vec<&Pod> = pods.iter().collect();
    let facts: Vec<upgrade::PodFacts> =
        managed.iter().map(|p| upgrade::pod_facts(&ss, p)).collect();
    let plan = upgrade::plan_upgrade(&ss, &managed, &facts).expect("plan");
    let first: Vec<&str> = plan
        .upgrade
        .iter()
        .filter_map(|&i| managed[i].metadata.name.as_deref())
        .collect();
    assert_eq!(first, preview.batches()[0]);
}

fn ud_of(image: &str, partitions: Value) -> UnitedDeployment {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "UnitedDeployment",
        "metadata": {"name": "ud", "namespace": "ns", "uid": "ud-uid"},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
            "template": {"cloneSetTemplate": {"metadata": {"labels": {"app": "web"}},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "app", "image": image}]}},
                    "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
                        "maxUnavailable": 1, "priorityStrategy": weights()}}}}},
            "topology": {"subsets": [{"name": "a"}, {"name": "b"}]},
            "updateStrategy": {"manualUpdate": {"partitions": partitions}}}
    }))
    .expect("uniteddeployment")
}

#[test]
fn uniteddeployment_partitioned_priority_rollout_agrees_with_the_subset_planners() {
    let old_ud = ud_of("app:v1", json!({}));
    let ud = ud_of("app:v2", json!({"a": 1}));
    let owner = OwnerReference::default();
    // The subsets as the old UnitedDeployment made them, two Pods each.
    let mut workloads = Vec::new();
    let mut subset_pods = Vec::new();
    let mut old_templates = Vec::new();
    for (subset, names) in [("a", ["a-1", "a-2"]), ("b", ["b-1", "b-2"])] {
        let mut w =
            ud_core::subset_workload(&old_ud, subset, "ud-old", 2, 0, &owner).expect("workload");
        w["metadata"] = json!({"name": format!("ud-{subset}"), "namespace": "ns",
            "uid": format!("{subset}-uid")});
        let cs: CloneSet = serde_json::from_value(w.clone()).expect("subset cloneset");
        let rev = revision::new_revision(&cs, 1, None)
            .expect("revision")
            .metadata
            .name
            .unwrap_or_default();
        let pods: Vec<Pod> = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let prio: &[(&str, &str)] = if *n == "a-2" || *n == "b-1" {
                    &[("prio", "high")]
                } else {
                    &[]
                };
                pod(n, &rev, prio, k as i64, "n")
            })
            .collect();
        workloads.push(w);
        subset_pods.push(pods);
        old_templates.push((rev, cs.spec.template.clone()));
    }
    let revisions: Vec<[Revision<'_>; 1]> = old_templates
        .iter()
        .map(|(name, template)| [Revision { name, template }])
        .collect();
    let subsets: Vec<Subset<'_>> = ["a", "b"]
        .iter()
        .enumerate()
        .map(|(k, name)| Subset {
            name,
            workload: &workloads[k],
            pods: &subset_pods[k],
            revisions: &revisions[k],
        })
        .collect();
    let preview =
        uniteddeployment(&ud, "ud-new", &subsets, Settings::default(), now()).expect("preview");
    let got: Vec<(&str, usize, Option<&str>)> = preview
        .steps
        .iter()
        .map(|s| (s.pod.as_str(), s.batch, s.subset.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("a-2", 1, Some("a")),
            ("b-1", 1, Some("b")),
            ("b-2", 2, Some("b"))
        ],
        "{preview:?}"
    );
    assert_eq!(preview.stay, ["a-1"]);
    assert_eq!(preview.partition, 1);
}
