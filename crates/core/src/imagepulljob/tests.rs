use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::imagepulljob::v1beta1::{ImageStatus, NodeImageSpec, PullPolicy};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("time")
}

#[test]
fn name_tag_table() {
    let cases = [
        ("nginx", Some(("nginx", "latest"))),
        ("nginx:1.25", Some(("nginx", "1.25"))),
        ("docker.io/library/nginx:1.25", Some(("nginx", "1.25"))),
        ("docker.io/team/app:v1", Some(("team/app", "v1"))),
        ("library/busybox:1", Some(("busybox", "1"))),
        (
            "registry.k8s.io/pause:3.10",
            Some(("registry.k8s.io/pause", "3.10")),
        ),
        ("127.0.0.1:5000/app:v2", Some(("127.0.0.1:5000/app", "v2"))),
        ("127.0.0.1:5000/app", Some(("127.0.0.1:5000/app", "latest"))),
        (
            "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            Some((
                "busybox",
                "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            )),
        ),
        ("", None),
        ("Nginx", None),
        ("nginx:", None),
    ];
    for (image, want) in cases {
        let got = name_tag(image);
        assert_eq!(
            got,
            want.map(|(n, t)| (n.to_owned(), t.to_owned())),
            "{image}"
        );
    }
    assert_eq!(pull_reference("nginx", "1.25"), "nginx:1.25");
    assert_eq!(pull_reference("busybox", "sha256:ab"), "busybox@sha256:ab");
}

fn owner(uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1beta1".into()),
        kind: Some("ImagePullJob".into()),
        name: Some(format!("job-{uid}")),
        namespace: Some("ns".into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn node_image(tags: Vec<ImageTagSpec>, statuses: Vec<ImageTagStatus>) -> NodeImage {
    let mut object = NodeImage::new("node", NodeImageSpec::default());
    object.spec.images.insert(
        "nginx".into(),
        ImageSpec {
            tags,
            ..Default::default()
        },
    );
    if !statuses.is_empty() {
        object.status = Some(NodeImageStatus {
            image_statuses: [("nginx".to_owned(), ImageStatus { tags: statuses })].into(),
            ..Default::default()
        });
    }
    object
}

fn tag_spec(tag: &str, version: i64, owners: &[&str]) -> ImageTagSpec {
    ImageTagSpec {
        tag: tag.into(),
        version,
        created_at: Some(Time(at(0))),
        owner_references: owners.iter().map(|u| owner(u)).collect(),
        pull_policy: Some(ImageTagPullPolicy {
            ttl_seconds_after_finished: Some(100),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tag_status(tag: &str, version: i64, phase: &str, done: Option<i64>) -> ImageTagStatus {
    ImageTagStatus {
        tag: tag.into(),
        version,
        phase: phase.into(),
        completion_time: done.map(|s| Time(at(s))),
        ..Default::default()
    }
}

#[test]
fn node_pull_table() {
    let cases = [
        (
            "tag absent",
            node_image(vec![], vec![]),
            NodePull::NotSynced,
        ),
        (
            "other owner only",
            node_image(vec![tag_spec("1", 0, &["other"])], vec![]),
            NodePull::NotSynced,
        ),
        (
            "owned, no status",
            node_image(vec![tag_spec("1", 0, &["u"])], vec![]),
            NodePull::Pulling,
        ),
        (
            "status of an older version",
            node_image(
                vec![tag_spec("1", 2, &["u"])],
                vec![tag_status("1", 1, PHASE_SUCCEEDED, Some(1))],
            ),
            NodePull::Pulling,
        ),
        (
            "succeeded",
            node_image(
                vec![tag_spec("1", 2, &["u"])],
                vec![tag_status("1", 2, PHASE_SUCCEEDED, Some(1))],
            ),
            NodePull::Succeeded,
        ),
        (
            "failed",
            node_image(
                vec![tag_spec("1", 0, &["other", "u"])],
                vec![tag_status("1", 0, PHASE_FAILED, Some(1))],
            ),
            NodePull::Failed,
        ),
    ];
    for (case, object, want) in cases {
        assert_eq!(node_pull(&object, "nginx", "1", "u", &[]), want, "{case}");
    }
    let secret = ReferenceObject {
        namespace: "kruise-daemon-config".into(),
        name: "s".into(),
        mode: String::new(),
    };
    let owned = node_image(vec![tag_spec("1", 0, &["u"])], vec![]);
    assert_eq!(
        node_pull(&owned, "nginx", "1", "u", std::slice::from_ref(&secret)),
        NodePull::NotSynced,
        "a secret not yet in the spec"
    );
}

fn spec(completion: &str, deadline: Option<i64>) -> ImagePullJobSpec {
    let mut spec = ImagePullJobSpec {
        image: "nginx:1".into(),
        ..Default::default()
    };
    spec.completion_policy.type_ = completion.into();
    spec.completion_policy.active_deadline_seconds = deadline;
    spec
}

#[test]
fn job_status_table() {
    use NodePull::*;
    let nodes = |list: &[(&str, NodePull)]| -> Vec<(String, NodePull)> {
        list.iter().map(|(n, p)| ((*n).to_owned(), *p)).collect()
    };
    // (case, spec, nodes, now) → (active, succeeded, failed, failed nodes, completed, message, not synced)
    type Want<'a> = (i32, i32, i32, &'a [&'a str], bool, &'a str, &'a [&'a str]);
    type Case<'a> = (
        &'a str,
        ImagePullJobSpec,
        Vec<(String, NodePull)>,
        i64,
        Want<'a>,
    );
    let cases: Vec<Case> = vec![
        (
            "no nodes: Always completes at once",
            spec("Always", None),
            vec![],
            0,
            (0, 0, 0, &[], true, "job has completed", &[]),
        ),
        (
            "no nodes: Never keeps running",
            spec("Never", None),
            vec![],
            0,
            (0, 0, 0, &[], false, "job is running, no progress", &[]),
        ),
        (
            "progress",
            spec("Always", None),
            nodes(&[
                ("a", Succeeded),
                ("b", Pulling),
                ("c", NotSynced),
                ("d", Failed),
            ]),
            5,
            (
                1,
                1,
                1,
                &["d"],
                false,
                "job is running, progress 50.0%",
                &["c"],
            ),
        ),
        (
            "all finished",
            spec("Always", None),
            nodes(&[("b", Failed), ("a", Succeeded), ("c", Failed)]),
            5,
            (0, 1, 2, &["b", "c"], true, "job has completed", &[]),
        ),
        (
            "Never never completes",
            spec("Never", None),
            nodes(&[("a", Succeeded)]),
            5,
            (0, 1, 0, &[], false, "job is running, progress 100.0%", &[]),
        ),
        (
            "deadline passed: the unfinished fail",
            spec("Always", Some(10)),
            nodes(&[("a", Succeeded), ("b", Pulling), ("c", NotSynced)]),
            10,
            (
                0,
                1,
                2,
                &["b", "c"],
                true,
                "job exceeds activeDeadlineSeconds",
                &[],
            ),
        ),
        (
            "deadline not yet",
            spec("Always", Some(10)),
            nodes(&[("a", Succeeded), ("b", Pulling)]),
            9,
            (1, 1, 0, &[], false, "job is running, progress 50.0%", &[]),
        ),
    ];
    for (case, spec, nodes, now, want) in cases {
        let old = ImagePullJobStatus {
            start_time: Some(Time(at(0))),
            ..Default::default()
        };
        let (status, not_synced) = job_status(&spec, Some(&old), &nodes, at(now));
        let failed: Vec<&str> = status.failed_nodes.iter().map(String::as_str).collect();
        let not_synced: Vec<&str> = not_synced.iter().map(String::as_str).collect();
        assert_eq!(
            (
                status.active,
                status.succeeded,
                status.failed,
                failed.as_slice(),
                status.completion_time.is_some(),
                status.message.as_str(),
                not_synced.as_slice(),
            ),
            want,
            "{case}"
        );
        assert_eq!(status.desired, i32::try_from(nodes.len()).unwrap_or(0));
        assert_eq!(status.start_time, Some(Time(at(0))), "{case}: start kept");
    }
}

#[test]
fn nodes_to_sync_honours_parallelism() {
    let nodes: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(nodes_to_sync(&nodes, 0, 1), &nodes[..1]);
    assert_eq!(nodes_to_sync(&nodes, 1, 1), &nodes[..0]);
    assert_eq!(nodes_to_sync(&nodes, 1, 3), &nodes[..2]);
    assert_eq!(nodes_to_sync(&nodes, 0, 10), &nodes[..]);
    assert_eq!(nodes_to_sync(&nodes, 5, 2), &nodes[..0]);
}

#[test]
fn tag_pull_policy_table() {
    let with = |completion: &str, ttl: Option<i32>, deadline: Option<i64>, timeout: Option<i32>| {
        let mut spec = spec(completion, deadline);
        spec.completion_policy.ttl_seconds_after_finished = ttl;
        spec.pull_policy = Some(PullPolicy {
            timeout_seconds: timeout,
            backoff_limit: Some(2),
        });
        spec
    };
    // (case, spec, jitter) → (ttl, deadline)
    let cases = [
        (
            "Always with ttl",
            with("Always", Some(30), None, None),
            7,
            (Some(37), None),
        ),
        (
            "Always with deadline",
            with("Always", None, Some(900), None),
            0,
            (Some(900), Some(900)),
        ),
        (
            "Always: timeout × backoff",
            with("Always", None, None, Some(100)),
            0,
            (Some(200), None),
        ),
        (
            "Always: default timeout",
            with("Always", None, None, None),
            400,
            (Some(1500), None),
        ),
        (
            "Never",
            with("Never", None, None, Some(60)),
            -50,
            (Some(86350), Some(1800)),
        ),
        (
            "Never, long timeout",
            with("Never", None, None, Some(4000)),
            0,
            (Some(86400), Some(4000)),
        ),
    ];
    for (case, spec, jitter, want) in cases {
        let policy = tag_pull_policy(&spec, 0, jitter);
        assert_eq!(
            (
                policy.ttl_seconds_after_finished,
                policy.active_deadline_seconds
            ),
            want,
            "{case}"
        );
        assert_eq!(policy.backoff_limit, Some(2), "{case}");
    }
}

#[test]
fn add_tag_table() {
    let policy = ImageTagPullPolicy::default();
    let me = owner("u");
    let request = TagRequest {
        name: "nginx",
        tag: "1",
        owner: &me,
        policy: &policy,
        image_pull_policy: "IfNotPresent",
        sandbox: None,
        secrets: &[],
        now: at(50),
    };
    // A new tag starts after the version the status last reported.
    let mut object = node_image(vec![], vec![tag_status("1", 4, PHASE_SUCCEEDED, Some(1))]);
    object.spec.images.clear();
    assert!(add_tag(&mut object, &request));
    let tag = &object.spec.images["nginx"].tags[0];
    assert_eq!((tag.version, tag.owner_references.len()), (5, 1));
    assert_eq!(tag.created_at, Some(Time(at(50))));
    // Added again: nothing changes.
    assert!(!add_tag(&mut object, &request));
    // A tag another job asked for: one more owner, a new round.
    let mut object = node_image(
        vec![tag_spec("0", 0, &["x"]), tag_spec("1", 1, &["x"])],
        vec![],
    );
    assert!(add_tag(&mut object, &request));
    let tag = &object.spec.images["nginx"].tags[1];
    assert_eq!(tag.version, 2);
    assert_eq!(tag.owner_references.len(), 2);
    // Secrets are added once.
    let secret = ReferenceObject {
        namespace: "kruise-daemon-config".into(),
        name: "s".into(),
        mode: "batch".into(),
    };
    let with_secret = TagRequest {
        secrets: std::slice::from_ref(&secret),
        ..request
    };
    assert!(add_tag(&mut object, &with_secret));
    assert!(!add_tag(&mut object, &with_secret));
    assert_eq!(object.spec.images["nginx"].pull_secrets, vec![secret]);
}

#[test]
fn prune_spec_table() {
    // A tag whose owners are all gone goes; a tag with one live owner keeps only it.
    let mut object = node_image(
        vec![
            tag_spec("1", 0, &["dead"]),
            tag_spec("2", 0, &["dead", "live"]),
        ],
        vec![],
    );
    let (changed, next) = prune_spec(&mut object, |o| o.uid.as_deref() == Some("live"), at(10));
    assert!(changed);
    assert_eq!(next, None);
    let tags = &object.spec.images["nginx"].tags;
    assert_eq!(tags.len(), 1);
    assert_eq!(tags[0].owner_references, vec![owner("live")]);
    // TTL after completion: kept until it passes, then removed with the image.
    let mut object = node_image(
        vec![tag_spec("1", 3, &["live"])],
        vec![tag_status("1", 3, PHASE_SUCCEEDED, Some(100))],
    );
    let (changed, next) = prune_spec(&mut object, |_| true, at(150));
    assert!(!changed);
    assert_eq!(next, Some(SignedDuration::from_secs(50)));
    let (changed, _) = prune_spec(&mut object, |_| true, at(200));
    assert!(changed);
    assert!(object.spec.images.is_empty());
    // A completion of an older version does not start the TTL.
    let mut object = node_image(
        vec![tag_spec("1", 4, &["live"])],
        vec![tag_status("1", 3, PHASE_SUCCEEDED, Some(0))],
    );
    assert_eq!(prune_spec(&mut object, |_| true, at(1000)), (false, None));
}

#[test]
fn status_timeouts_table() {
    // Unanswered for less than the response timeout: wait.
    let object = node_image(vec![tag_spec("1", 0, &["u"])], vec![]);
    let (status, failed, next) = status_timeouts(&object, at(100));
    assert!(failed.is_empty());
    assert_eq!(next, Some(SignedDuration::from_secs(500)));
    assert_eq!((status.desired, status.failed), (1, 0));
    // Unanswered for longer: failed.
    let (status, failed, _) = status_timeouts(&object, at(RESPONSE_TIMEOUT_SECONDS));
    assert_eq!(failed[0].message, "node has not responded for a long time");
    assert_eq!(
        failed[0].owners,
        object.spec.images["nginx"].tags[0].owner_references
    );
    assert!(!failed[0].owners.is_empty());
    assert_eq!(status.failed, 1);
    assert_eq!(status.image_statuses["nginx"].tags[0].phase, PHASE_FAILED);
    // Answered, unfinished past its deadline (+ the response timeout): failed.
    let mut tag = tag_spec("1", 0, &["u"]);
    if let Some(p) = tag.pull_policy.as_mut() {
        p.active_deadline_seconds = Some(60);
    }
    let object = node_image(vec![tag], vec![tag_status("1", 0, PHASE_PULLING, None)]);
    let (status, failed, next) = status_timeouts(&object, at(600));
    assert!(failed.is_empty());
    assert_eq!(next, Some(SignedDuration::from_secs(60)));
    assert_eq!(status.pulling, 1);
    let (status, failed, _) = status_timeouts(&object, at(660));
    assert_eq!(
        failed[0].message,
        "pulling exceeds the activeDeadlineSeconds"
    );
    assert_eq!((status.pulling, status.failed), (0, 1));
    // Statuses of tags gone from the spec are dropped.
    let object = node_image(
        vec![tag_spec("2", 0, &["u"])],
        vec![
            tag_status("1", 0, PHASE_SUCCEEDED, Some(0)),
            tag_status("2", 0, PHASE_SUCCEEDED, Some(0)),
        ],
    );
    let (status, _, _) = status_timeouts(&object, at(1));
    assert_eq!(status.image_statuses["nginx"].tags.len(), 1);
    assert_eq!((status.desired, status.succeeded), (1, 1));
}

#[test]
fn daemon_work_and_attempts() {
    let spec = tag_spec("1", 2, &["u"]);
    assert_eq!(daemon_work(&spec, None), DaemonWork::Pull { version: 2 });
    let old = tag_status("1", 1, PHASE_SUCCEEDED, Some(0));
    assert_eq!(
        daemon_work(&spec, Some(&old)),
        DaemonWork::Pull { version: 2 }
    );
    let pulling = tag_status("1", 2, PHASE_PULLING, None);
    assert_eq!(
        daemon_work(&spec, Some(&pulling)),
        DaemonWork::Pull { version: 2 }
    );
    let done = tag_status("1", 2, PHASE_FAILED, Some(0));
    assert_eq!(daemon_work(&spec, Some(&done)), DaemonWork::Done);
    assert_eq!(attempts(None), (600, 3));
    let policy = ImageTagPullPolicy {
        timeout_seconds: Some(5),
        backoff_limit: Some(-1),
        ..Default::default()
    };
    assert_eq!(attempts(Some(&policy)), (5, 3));
    let delays: Vec<u64> = (0..7).map(|n| retry_delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
}

#[test]
fn list_status_table() {
    let images: Vec<String> = ["a:1", "b:1", "c:1"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let child = |image: &str, desired: i32, active: i32, succeeded: i32, failed: i32| ChildJob {
        name: format!("list-{}", &image[..1]),
        image: image.into(),
        started: true,
        desired,
        active,
        succeeded,
        failed,
    };
    let status = list_status(
        &images,
        &[child("a:1", 2, 0, 2, 0), child("b:1", 2, 1, 1, 0)],
        false,
        None,
        at(0),
    );
    assert_eq!(
        (
            status.desired,
            status.active,
            status.completed,
            status.succeeded
        ),
        (3, 1, 1, 1)
    );
    assert!(status.completion_time.is_none());
    let all = [
        child("a:1", 2, 0, 2, 0),
        child("b:1", 2, 0, 1, 1),
        child("c:1", 0, 0, 0, 0),
    ];
    let status = list_status(&images, &all, false, None, at(5));
    assert_eq!(
        (status.completed, status.succeeded),
        (3, 2),
        "no node: completed and succeeded"
    );
    assert_eq!(status.completion_time, Some(Time(at(5))));
    assert_eq!(status.failed_image_statuses.len(), 1);
    assert_eq!(status.failed_image_statuses[0].name, "b:1");
    assert_eq!(status.failed_image_statuses[0].image_pull_job, "list-b");
    // Never: a job whose every node finished counts as completed, the list itself never completes.
    let status = list_status(&images, &all, true, None, at(5));
    assert_eq!(status.completed, 3);
    assert!(status.completion_time.is_none(), "Never never completes");
    // A job not started yet is not counted.
    let unstarted = ChildJob {
        started: false,
        ..child("a:1", 0, 0, 0, 0)
    };
    let status = list_status(&images, &[unstarted], false, None, at(5));
    assert_eq!(status.completed, 0);
}

#[test]
fn ttl_left_table() {
    let done = Time(at(0));
    assert_eq!(ttl_left(None, Some(5), at(1)), None);
    assert_eq!(ttl_left(Some(&done), None, at(1)), None);
    assert_eq!(
        ttl_left(Some(&done), Some(5), at(1)),
        Some(SignedDuration::from_secs(4))
    );
    assert!(ttl_left(Some(&done), Some(5), at(6)).is_some_and(|d| d.is_negative()));
}

#[test]
fn default_ttl_for_always_table() {
    let cases: [(i64, Result<i32, &str>); 5] = [
        (300, Ok(300)),
        (0, Ok(0)),
        (2_678_400, Ok(2_678_400)),
        (
            -1,
            Err(
                "default-ttlseconds-for-always-nodeimage must be positive and less than 2678400, current value is -1",
            ),
        ),
        (
            2_678_401,
            Err(
                "default-ttlseconds-for-always-nodeimage must be positive and less than 2678400, current value is 2678401",
            ),
        ),
    ];
    for (input, want) in cases {
        assert_eq!(
            default_ttl_for_always(input),
            want.map_err(str::to_owned),
            "{input}"
        );
    }
}

fn list_spec(images: &[&str]) -> ImageListPullJobSpec {
    ImageListPullJobSpec {
        images: images.iter().map(|i| (*i).to_owned()).collect(),
        completion_policy: kruise_api::imagepulljob::v1beta1::CompletionPolicy {
            type_: "Always".into(),
            ..Default::default()
        },
        pull_policy: Some(PullPolicy {
            timeout_seconds: Some(600),
            backoff_limit: Some(3),
        }),
        ..Default::default()
    }
}

#[test]
fn template_hash_ignores_images_only() {
    let base = list_spec(&["a:1"]);
    let hash = list_template_hash(&base);
    assert_eq!(hash, list_template_hash(&list_spec(&["a:1", "b:2"])));
    let mut parallel = base.clone();
    parallel.parallelism = Some(IntOrString::Int(3));
    let mut secrets = base.clone();
    secrets.pull_secrets = vec!["reg".into()];
    let mut policy = base.clone();
    policy.image_pull_policy = "Always".into();
    for changed in [parallel, secrets, policy] {
        assert_ne!(list_template_hash(&changed), hash, "{changed:?}");
    }
    // The webhook's imagePullPolicy default does not change it.
    let mut defaulted = base.clone();
    defaulted.image_pull_policy = "IfNotPresent".into();
    assert_eq!(list_template_hash(&defaulted), hash);
    assert!(!hash.is_empty() && hash.chars().all(|c| c.is_ascii_alphanumeric()));
}

/// (jobs as (name, hash label, spec), images to create, jobs to delete)
type ListCase<'a> = (
    Vec<(&'a str, Option<&'a str>, &'a ImagePullJobSpec)>,
    Vec<&'a str>,
    Vec<&'a str>,
);

#[test]
fn list_actions_table() {
    let list = list_spec(&["a:1", "b:1", "c:1"]);
    let hash = list_template_hash(&list);
    let same = |image: &str| {
        let mut spec = job_spec_for(&list, image);
        spec.image_pull_policy = "IfNotPresent".into();
        spec
    };
    let older = |image: &str| {
        let mut spec = same(image);
        spec.parallelism = Some(IntOrString::Int(9));
        spec
    };
    let (a, b, c, b_old, c_old, d) = (
        same("a:1"),
        same("b:1"),
        same("c:1"),
        older("b:1"),
        older("c:1"),
        same("d:1"),
    );
    let cases: Vec<ListCase<'_>> = vec![
        // Nothing yet: a job per image.
        (vec![], vec!["a:1", "b:1", "c:1"], vec![]),
        // All current by label.
        (
            vec![
                ("l-1", Some(&hash), &a),
                ("l-2", Some(&hash), &b),
                ("l-3", Some(&hash), &c),
            ],
            vec![],
            vec![],
        ),
        // Older label, spec changed: replaced. Missing c created.
        (
            vec![("l-1", Some(&hash), &a), ("l-2", Some("old"), &b_old)],
            vec!["b:1", "c:1"],
            vec!["l-2"],
        ),
        // No label but the same spec (created before the label): kept; with an older spec: replaced.
        (
            vec![("l-1", None, &a), ("l-2", None, &b), ("l-3", None, &c_old)],
            vec!["c:1"],
            vec!["l-3"],
        ),
        // Another hash but the same spec (another implementation's label): kept.
        (
            vec![
                ("l-1", Some("upstream"), &a),
                ("l-2", Some(&hash), &b),
                ("l-3", Some(&hash), &c),
            ],
            vec![],
            vec![],
        ),
        // An image no longer listed: its job goes.
        (
            vec![
                ("l-1", Some(&hash), &a),
                ("l-2", Some(&hash), &b),
                ("l-3", Some(&hash), &c),
                ("l-4", Some(&hash), &d),
            ],
            vec![],
            vec!["l-4"],
        ),
        // Two jobs of one image: the first by name counts.
        (
            vec![
                ("l-9", Some("old"), &b_old),
                ("l-1", Some(&hash), &a),
                ("l-2", Some(&hash), &b),
                ("l-3", Some(&hash), &c),
            ],
            vec![],
            vec![],
        ),
    ];
    for (i, (jobs, create, delete)) in cases.into_iter().enumerate() {
        let jobs: Vec<ListJob<'_>> = jobs
            .into_iter()
            .map(|(name, hash, spec)| ListJob { name, hash, spec })
            .collect();
        let got = list_actions(&list, &hash, &jobs);
        assert_eq!(got.create, create, "case {i}");
        assert_eq!(got.delete, delete, "case {i}");
    }
}
