//! Image pre-pulling decisions (OpenKruise's ImagePullJob / NodeImage / kruise-daemon puller), pure:
//! image references, which NodeImages an ImagePullJob asks next, the job's status from its nodes'
//! statuses, the NodeImage tag edits (add with an owner, prune by owner and TTL), the manager's time-outs
//! of unanswered pulls, the daemon's per-tag work, and the ImageListPullJob's status from its jobs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::broadcastjob::v1beta1::COMPLETION_NEVER;
use kruise_api::imagepulljob::v1beta1::{
    FailedImageStatus, ImageListPullJobSpec, ImageListPullJobStatus, ImagePullJobSpec,
    ImagePullJobStatus, ImageSpec, ImageTagPullPolicy, ImageTagSpec, ImageTagStatus, NodeImage,
    NodeImageStatus, PHASE_FAILED, PHASE_PULLING, PHASE_SUCCEEDED, PHASE_WAITING, ReferenceObject,
};
use kruise_api::imagepulljob::{DEFAULT_BACKOFF_LIMIT, DEFAULT_TIMEOUT_SECONDS};

/// How long the manager waits for a daemon to answer a new tag before failing it (upstream's).
pub const RESPONSE_TIMEOUT_SECONDS: i64 = 600;
/// TTL of a tag asked by a job that never completes (24h, ±10 min of jitter).
pub const TTL_SECONDS_FOR_NEVER: i32 = 24 * 3600;
/// Deadline of a tag asked by a job that never completes (unless its timeout is longer).
pub const ACTIVE_DEADLINE_SECONDS_FOR_NEVER: i64 = 1800;

/// An image reference split as OpenKruise keys NodeImages: the familiar name (Docker Hub's
/// `docker.io/` and `library/` left out) and the tag (`latest` when none; the digest for a digest
/// reference).
pub fn name_tag(image: &str) -> Option<(String, String)> {
    if image.is_empty() || !kruise_api::imagepulljob::image_reference_ok(image) {
        return None;
    }
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    let last = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last..].find(':') {
        Some(at) => (&rest[..last + at], &rest[last + at + 1..]),
        None => (rest, "latest"),
    };
    let mut familiar = name
        .strip_prefix("docker.io/")
        .or_else(|| name.strip_prefix("index.docker.io/"))
        .unwrap_or(name);
    if let Some(short) = familiar.strip_prefix("library/")
        && !short.contains('/')
    {
        familiar = short;
    }
    Some((
        familiar.to_owned(),
        digest.map_or_else(|| tag.to_owned(), str::to_owned),
    ))
}

/// The reference a runtime pulls for a NodeImage's `name` and `tag` (`name@sha256:…` for a digest).
pub fn pull_reference(name: &str, tag: &str) -> String {
    if tag.contains(':') {
        format!("{name}@{tag}")
    } else {
        format!("{name}:{tag}")
    }
}

/// Where one node stands for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodePull {
    /// The job's tag (with the job as owner) is not in the NodeImage's spec yet, or its secrets are not.
    NotSynced,
    Pulling,
    Succeeded,
    Failed,
}

/// Where the NodeImage of one node stands for the job `uid` pulling `name:tag` with `secrets`.
pub fn node_pull(
    node_image: &NodeImage,
    name: &str,
    tag: &str,
    uid: &str,
    secrets: &[ReferenceObject],
) -> NodePull {
    let Some(spec) = node_image.spec.images.get(name) else {
        return NodePull::NotSynced;
    };
    let owned = spec.tags.iter().find(|t| t.tag == tag).filter(|t| {
        t.owner_references
            .iter()
            .any(|o| o.uid.as_deref() == Some(uid))
    });
    let Some(tag_spec) = owned else {
        return NodePull::NotSynced;
    };
    if !secrets.iter().all(|s| has_secret(&spec.pull_secrets, s)) {
        return NodePull::NotSynced;
    }
    let status = node_image
        .status
        .as_ref()
        .and_then(|s| s.image_statuses.get(name))
        .and_then(|s| s.tags.iter().find(|t| t.tag == tag))
        .filter(|t| t.version == tag_spec.version);
    match status.map(|s| s.phase.as_str()) {
        Some(PHASE_SUCCEEDED) => NodePull::Succeeded,
        Some(PHASE_FAILED) => NodePull::Failed,
        _ => NodePull::Pulling,
    }
}

fn has_secret(list: &[ReferenceObject], secret: &ReferenceObject) -> bool {
    list.iter()
        .any(|s| s.namespace == secret.namespace && s.name == secret.name)
}

/// The job's new status and the nodes (in the order given) whose NodeImage does not carry its tag yet.
pub fn job_status(
    spec: &ImagePullJobSpec,
    old: Option<&ImagePullJobStatus>,
    nodes: &[(String, NodePull)],
    now: Timestamp,
) -> (ImagePullJobStatus, Vec<String>) {
    let start = old.and_then(|s| s.start_time.clone()).unwrap_or(Time(now));
    let mut status = ImagePullJobStatus {
        start_time: Some(start.clone()),
        desired: i32::try_from(nodes.len()).unwrap_or(i32::MAX),
        ..Default::default()
    };
    let of = |want: NodePull| -> Vec<String> {
        nodes
            .iter()
            .filter(|(_, p)| *p == want)
            .map(|(n, _)| n.clone())
            .collect()
    };
    let (not_synced, pulling, succeeded, mut failed) = (
        of(NodePull::NotSynced),
        of(NodePull::Pulling),
        of(NodePull::Succeeded),
        of(NodePull::Failed),
    );
    let count = |v: &Vec<String>| i32::try_from(v.len()).unwrap_or(i32::MAX);
    let always = spec.completion_policy.type_ != COMPLETION_NEVER;
    if always
        && let Some(deadline) = spec.completion_policy.active_deadline_seconds
        && nodes.len() != succeeded.len() + failed.len()
        && now.duration_since(start.0) >= SignedDuration::from_secs(deadline)
    {
        failed.extend(pulling);
        failed.extend(not_synced);
        status.completion_time = Some(Time(now));
        status.succeeded = count(&succeeded);
        status.failed = count(&failed);
        status.failed_nodes = failed;
        status.message = "job exceeds activeDeadlineSeconds".into();
        return (status, Vec::new());
    }
    status.active = count(&pulling);
    status.succeeded = count(&succeeded);
    status.failed = count(&failed);
    failed.sort();
    status.failed_nodes = failed;
    if always && status.desired == status.succeeded + status.failed {
        status.completion_time = Some(Time(now));
    }
    status.message = if status.completion_time.is_some() {
        "job has completed".into()
    } else if status.desired == 0 {
        "job is running, no progress".into()
    } else {
        format!(
            "job is running, progress {:.1}%",
            100.0 * f64::from(status.succeeded + status.failed) / f64::from(status.desired)
        )
    };
    (status, not_synced)
}

/// The nodes to add the job's tag to now: at most `parallelism` pull at once.
pub fn nodes_to_sync(not_synced: &[String], active: i32, parallelism: usize) -> &[String] {
    let room = parallelism.saturating_sub(usize::try_from(active).unwrap_or(0));
    &not_synced[..room.min(not_synced.len())]
}

/// The pull policy a job writes into a NodeImage tag (`jitter_seconds` spreads the TTLs, as upstream's
/// random part: up to 300 s for Always, ±600 s for Never). `default_ttl_always` is the manager's
/// `--default-ttlseconds-for-always-nodeimage` (300 by default, [`DEFAULT_TTL_SECONDS_FOR_ALWAYS`]).
pub fn tag_pull_policy(
    spec: &ImagePullJobSpec,
    default_ttl_always: i32,
    jitter_seconds: i32,
) -> ImageTagPullPolicy {
    let pull = spec.pull_policy.clone().unwrap_or_default();
    let mut policy = ImageTagPullPolicy {
        timeout_seconds: pull.timeout_seconds,
        backoff_limit: pull.backoff_limit,
        ..Default::default()
    };
    let completion = &spec.completion_policy;
    if completion.type_ == COMPLETION_NEVER {
        policy.ttl_seconds_after_finished =
            Some(TTL_SECONDS_FOR_NEVER + jitter_seconds.clamp(-600, 600));
        policy.active_deadline_seconds = Some(
            pull.timeout_seconds
                .map(i64::from)
                .filter(|t| *t > ACTIVE_DEADLINE_SECONDS_FOR_NEVER)
                .unwrap_or(ACTIVE_DEADLINE_SECONDS_FOR_NEVER),
        );
    } else {
        let base = completion
            .ttl_seconds_after_finished
            .or_else(|| {
                completion
                    .active_deadline_seconds
                    .map(|d| i32::try_from(d).unwrap_or(i32::MAX))
            })
            .unwrap_or_else(|| {
                pull.timeout_seconds
                    .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
                    .saturating_mul(pull.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT))
            });
        policy.ttl_seconds_after_finished = Some(
            base.saturating_add(default_ttl_always)
                .saturating_add(jitter_seconds.clamp(0, 300)),
        );
        policy.active_deadline_seconds = completion.active_deadline_seconds;
    }
    policy
}

/// What a job adds to one NodeImage's spec.
pub struct TagRequest<'a> {
    pub name: &'a str,
    pub tag: &'a str,
    pub owner: &'a ObjectReference,
    pub policy: &'a ImageTagPullPolicy,
    pub image_pull_policy: &'a str,
    pub sandbox: Option<&'a kruise_api::imagepulljob::v1beta1::SandboxConfig>,
    pub secrets: &'a [ReferenceObject],
    pub now: Timestamp,
}

/// Adds the job's tag (and secrets) to a NodeImage: a tag other owners asked for gets the job as one
/// more owner and a new version (a new pull round); a new tag starts at the version after the one the
/// status last reported. Returns whether the spec changed.
pub fn add_tag(node_image: &mut NodeImage, request: &TagRequest<'_>) -> bool {
    let status_version = node_image
        .status
        .as_ref()
        .and_then(|s| s.image_statuses.get(request.name))
        .and_then(|s| s.tags.iter().find(|t| t.tag == request.tag))
        .map(|t| t.version);
    let image: &mut ImageSpec = node_image
        .spec
        .images
        .entry(request.name.to_owned())
        .or_default();
    let before = image.clone();
    image.sandbox_config = request.sandbox.cloned();
    for secret in request.secrets {
        if !has_secret(&image.pull_secrets, secret) {
            image.pull_secrets.push(secret.clone());
        }
    }
    let uid = request.owner.uid.as_deref();
    match image.tags.iter_mut().find(|t| t.tag == request.tag) {
        Some(tag) if tag.owner_references.iter().any(|o| o.uid.as_deref() == uid) => {}
        Some(tag) => {
            tag.version += 1;
            tag.owner_references.push(request.owner.clone());
            tag.created_at = Some(Time(request.now));
            tag.image_pull_policy = request.image_pull_policy.to_owned();
        }
        None => image.tags.push(ImageTagSpec {
            tag: request.tag.to_owned(),
            created_at: Some(Time(request.now)),
            pull_policy: Some(request.policy.clone()),
            owner_references: vec![request.owner.clone()],
            version: status_version.map_or(0, |v| v + 1),
            image_pull_policy: request.image_pull_policy.to_owned(),
        }),
    }
    image.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
    *image != before
}

/// The NodeImage controller's spec clean-up: tags without a creation time, tags whose every owner is
/// gone (`alive` says whether an owner still exists), tags finished longer than their TTL ago, and
/// images left without tags are removed. Returns whether anything changed and when the next TTL ends.
pub fn prune_spec(
    node_image: &mut NodeImage,
    alive: impl Fn(&ObjectReference) -> bool,
    now: Timestamp,
) -> (bool, Option<SignedDuration>) {
    let statuses = node_image
        .status
        .as_ref()
        .map(|s| s.image_statuses.clone())
        .unwrap_or_default();
    let mut changed = false;
    let mut next: Option<SignedDuration> = None;
    let mut images = BTreeMap::new();
    for (name, mut image) in std::mem::take(&mut node_image.spec.images) {
        let mut tags = Vec::new();
        for mut tag in image.tags {
            if tag.created_at.is_none() {
                changed = true;
                continue;
            }
            let owners: Vec<ObjectReference> = tag
                .owner_references
                .iter()
                .filter(|o| alive(o))
                .cloned()
                .collect();
            if owners.len() != tag.owner_references.len() {
                changed = true;
                if owners.is_empty() {
                    continue;
                }
                tag.owner_references = owners;
            }
            let completed = statuses
                .get(&name)
                .and_then(|s| {
                    s.tags
                        .iter()
                        .find(|t| t.tag == tag.tag && t.version == tag.version)
                })
                .and_then(|t| t.completion_time.clone());
            if let (Some(ttl), Some(done)) = (
                tag.pull_policy
                    .as_ref()
                    .and_then(|p| p.ttl_seconds_after_finished),
                completed,
            ) {
                let left = SignedDuration::from_secs(i64::from(ttl)) - now.duration_since(done.0);
                if left <= SignedDuration::ZERO {
                    changed = true;
                    continue;
                }
                next = Some(next.map_or(left, |n| n.min(left)));
            }
            tags.push(tag);
        }
        if tags.is_empty() {
            changed = true;
            continue;
        }
        image.tags = tags;
        images.insert(name, image);
    }
    node_image.spec.images = images;
    (changed, next)
}

/// A tag the manager failed for want of an answer (for its owners' Events).
#[derive(Clone, Debug, PartialEq)]
pub struct TimedOut {
    pub image: String,
    pub tag: String,
    pub message: String,
    /// The tag's owners (its ImagePullJobs), which upstream tells of the failure too.
    pub owners: Vec<ObjectReference>,
}

/// The NodeImage controller's status pass: a tag the daemon has not answered within
/// [`RESPONSE_TIMEOUT_SECONDS`] of its creation, or still unfinished `activeDeadlineSeconds` after it,
/// is failed; statuses of tags no longer in the spec are dropped and the counts recomputed. Returns the
/// new status, the tags failed now, and when to look again.
pub fn status_timeouts(
    node_image: &NodeImage,
    now: Timestamp,
) -> (NodeImageStatus, Vec<TimedOut>, Option<SignedDuration>) {
    let mut status = node_image.status.clone().unwrap_or_default();
    let response = SignedDuration::from_secs(RESPONSE_TIMEOUT_SECONDS);
    let mut failed_now = Vec::new();
    let mut next: Option<SignedDuration> = None;
    let mut wait = |d: SignedDuration| next = Some(next.map_or(d, |n: SignedDuration| n.min(d)));
    let mut in_spec = BTreeSet::new();
    for (name, image) in &node_image.spec.images {
        let tags = &mut status.image_statuses.entry(name.clone()).or_default().tags;
        for spec in &image.tags {
            in_spec.insert((name.clone(), spec.tag.clone()));
            let Some(created) = spec.created_at.as_ref().map(|t| t.0) else {
                continue;
            };
            let age = now.duration_since(created);
            let position = tags.iter().position(|t| t.tag == spec.tag);
            let answered = position.is_some_and(|i| tags[i].version == spec.version);
            // Marks the tag Failed with `message` and records it as failed now (both timeouts).
            let fail =
                |tags: &mut Vec<ImageTagStatus>, failed_now: &mut Vec<TimedOut>, message: &str| {
                    let failed = ImageTagStatus {
                        tag: spec.tag.clone(),
                        phase: PHASE_FAILED.into(),
                        completion_time: Some(Time(now)),
                        version: spec.version,
                        message: message.into(),
                        ..Default::default()
                    };
                    match tags.iter_mut().find(|t| t.tag == spec.tag) {
                        Some(slot) => {
                            slot.phase = failed.phase;
                            slot.completion_time = failed.completion_time;
                            slot.version = failed.version;
                            slot.message = failed.message;
                        }
                        None => tags.push(failed),
                    }
                    failed_now.push(TimedOut {
                        image: name.clone(),
                        tag: spec.tag.clone(),
                        message: message.into(),
                        owners: spec.owner_references.clone(),
                    });
                };
            if !answered {
                if age < response {
                    wait(response - age);
                    continue;
                }
                fail(
                    tags,
                    &mut failed_now,
                    "node has not responded for a long time",
                );
                continue;
            }
            let unfinished = position.is_some_and(|i| tags[i].completion_time.is_none());
            if let (true, Some(deadline)) = (
                unfinished,
                spec.pull_policy
                    .as_ref()
                    .and_then(|p| p.active_deadline_seconds),
            ) {
                let limit = SignedDuration::from_secs(deadline) + response;
                if age < limit {
                    wait(limit - age);
                    continue;
                }
                fail(
                    tags,
                    &mut failed_now,
                    "pulling exceeds the activeDeadlineSeconds",
                );
            }
        }
    }
    for (name, image) in &mut status.image_statuses {
        image
            .tags
            .retain(|t| in_spec.contains(&(name.clone(), t.tag.clone())));
        image.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
    }
    status.image_statuses.retain(|_, s| !s.tags.is_empty());
    count_phases(&mut status, node_image);
    (status, failed_now, next)
}

/// Recomputes a NodeImage status's counters from its tag statuses and spec.
pub fn count_phases(status: &mut NodeImageStatus, node_image: &NodeImage) {
    status.desired = node_image
        .spec
        .images
        .values()
        .map(|i| i32::try_from(i.tags.len()).unwrap_or(i32::MAX))
        .sum();
    let phases = status.image_statuses.values().flat_map(|s| &s.tags);
    let (mut succeeded, mut failed, mut pulling, mut waiting) = (0, 0, 0, 0);
    for tag in phases {
        match tag.phase.as_str() {
            PHASE_SUCCEEDED => succeeded += 1,
            PHASE_FAILED => failed += 1,
            PHASE_PULLING => pulling += 1,
            PHASE_WAITING => waiting += 1,
            _ => {}
        }
    }
    (
        status.succeeded,
        status.failed,
        status.pulling,
        status.waiting,
    ) = (succeeded, failed, pulling, waiting);
}

/// What the daemon does for one tag of its NodeImage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonWork {
    /// Finished for this version: keep the reported status.
    Done,
    /// Start (or keep) a pull of this version.
    Pull { version: i64 },
}

/// The daemon's decision for a tag: pull unless the status already reports this version finished.
pub fn daemon_work(spec: &ImageTagSpec, reported: Option<&ImageTagStatus>) -> DaemonWork {
    match reported {
        Some(status) if status.version == spec.version && status.completion_time.is_some() => {
            DaemonWork::Done
        }
        _ => DaemonWork::Pull {
            version: spec.version,
        },
    }
}

/// The daemon's pull attempts for a tag: (seconds per attempt, retries after the first; upstream's
/// defaults when unset or negative).
pub fn attempts(policy: Option<&ImageTagPullPolicy>) -> (u64, u32) {
    let timeout = policy
        .and_then(|p| p.timeout_seconds)
        .filter(|t| *t > 0)
        .unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let backoff = policy
        .and_then(|p| p.backoff_limit)
        .filter(|b| *b >= 0)
        .unwrap_or(DEFAULT_BACKOFF_LIMIT);
    (
        u64::try_from(timeout).unwrap_or(600),
        u32::try_from(backoff).unwrap_or(3),
    )
}

/// The back-off before retry `n` (0-based): 1 s doubling, at most 30 s (upstream's).
pub fn retry_delay(n: u32) -> std::time::Duration {
    std::time::Duration::from_secs(1u64.checked_shl(n).unwrap_or(u64::MAX).min(30))
}

/// One child ImagePullJob as its ImageListPullJob sees it (its status counts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildJob {
    pub name: String,
    pub image: String,
    /// Whether the job has a start time (a job not started yet is not counted).
    pub started: bool,
    pub desired: i32,
    pub active: i32,
    pub succeeded: i32,
    pub failed: i32,
}

/// An ImageListPullJob's status from its ImagePullJobs, as upstream counts: a job with an active node
/// is active, one whose every node succeeded or failed is completed, one whose every node succeeded
/// succeeded, one with a failed node is listed in `failedImageStatuses`; the list completes (Always)
/// when every image's job completed.
pub fn list_status(
    images: &[String],
    children: &[ChildJob],
    never: bool,
    old: Option<&ImageListPullJobStatus>,
    now: Timestamp,
) -> ImageListPullJobStatus {
    let mut status = ImageListPullJobStatus {
        start_time: old.and_then(|s| s.start_time.clone()).or(Some(Time(now))),
        desired: i32::try_from(images.len()).unwrap_or(i32::MAX),
        ..Default::default()
    };
    for child in children
        .iter()
        .filter(|c| c.started && images.contains(&c.image))
    {
        if child.active > 0 {
            status.active += 1;
        }
        if child.failed > 0 {
            status.failed_image_statuses.push(FailedImageStatus {
                image_pull_job: child.name.clone(),
                name: child.image.clone(),
                message: format!(
                    "Please check for details which nodes failed by 'kubectl get ImagePullJob {}'.",
                    child.name
                ),
            });
        }
        if child.desired == child.failed + child.succeeded {
            status.completed += 1;
        }
        if child.desired == child.succeeded {
            status.succeeded += 1;
        }
    }
    status
        .failed_image_statuses
        .sort_by(|a, b| a.name.cmp(&b.name));
    if !never && status.completed == status.desired {
        status.completion_time = old
            .and_then(|s| s.completion_time.clone())
            .or(Some(Time(now)));
    }
    status
}

/// `--default-ttlseconds-for-always-nodeimage`'s default (upstream's main.go).
pub const DEFAULT_TTL_SECONDS_FOR_ALWAYS: i64 = 300;
/// The largest `--default-ttlseconds-for-always-nodeimage` accepted: 31 days.
pub const MAX_DEFAULT_TTL_SECONDS_FOR_ALWAYS: i64 = 3600 * 24 * 31;

/// Checks `--default-ttlseconds-for-always-nodeimage` as upstream's manager does before it starts:
/// 0 to 31 days, else refused with upstream's message.
pub fn default_ttl_for_always(seconds: i64) -> Result<i32, String> {
    if !(0..=MAX_DEFAULT_TTL_SECONDS_FOR_ALWAYS).contains(&seconds) {
        return Err(format!(
            "default-ttlseconds-for-always-nodeimage must be positive and less than {MAX_DEFAULT_TTL_SECONDS_FOR_ALWAYS}, current value is {seconds}"
        ));
    }
    i32::try_from(seconds).map_err(|e| e.to_string())
}

/// The label an ImageListPullJob and the ImagePullJobs it creates carry: the hash of the list's
/// template (its spec without `images`).
pub const LABEL_TEMPLATE_HASH: &str = "controller-revision-hash";

/// The ImagePullJob an ImageListPullJob creates for `image`: the list's template with that image.
pub fn job_spec_for(list: &ImageListPullJobSpec, image: &str) -> ImagePullJobSpec {
    ImagePullJobSpec {
        image: image.to_owned(),
        pull_secrets: list.pull_secrets.clone(),
        selector: list.selector.clone(),
        pod_selector: list.pod_selector.clone(),
        parallelism: list.parallelism.clone(),
        pull_policy: list.pull_policy.clone(),
        completion_policy: list.completion_policy.clone(),
        sandbox_config: list.sandbox_config.clone(),
        image_pull_policy: list.image_pull_policy.clone(),
    }
}

/// The template part of a spec (no images), with the webhook's `imagePullPolicy` default written out
/// so that a job's defaulted copy compares equal to the list's.
fn template_of(list: &ImageListPullJobSpec) -> ImageListPullJobSpec {
    let mut template = ImageListPullJobSpec {
        images: Vec::new(),
        ..list.clone()
    };
    if template.image_pull_policy.is_empty() {
        template.image_pull_policy = kruise_api::imagepulljob::v1beta1::PULL_IF_NOT_PRESENT.into();
    }
    template
}

fn template_of_job(job: &ImagePullJobSpec) -> ImageListPullJobSpec {
    template_of(&ImageListPullJobSpec {
        images: Vec::new(),
        pull_secrets: job.pull_secrets.clone(),
        selector: job.selector.clone(),
        pod_selector: job.pod_selector.clone(),
        parallelism: job.parallelism.clone(),
        pull_policy: job.pull_policy.clone(),
        completion_policy: job.completion_policy.clone(),
        sandbox_config: job.sandbox_config.clone(),
        image_pull_policy: job.image_pull_policy.clone(),
    })
}

/// The hash of an ImageListPullJob's template ([`LABEL_TEMPLATE_HASH`]): FNV-1 of its canonical JSON,
/// encoded as revision hashes are. Any change of a field besides `images` changes it.
pub fn list_template_hash(list: &ImageListPullJobSpec) -> String {
    let value = serde_json::to_value(template_of(list)).unwrap_or_default();
    crate::revision::safe_encode(
        &crate::revision::fnv1_32(&crate::revision::canonical_json(&value)).to_string(),
    )
}

/// One ImagePullJob an ImageListPullJob controls (not being deleted), as [`list_actions`] sees it.
#[derive(Clone, Debug)]
pub struct ListJob<'a> {
    pub name: &'a str,
    /// Its [`LABEL_TEMPLATE_HASH`] label.
    pub hash: Option<&'a str>,
    pub spec: &'a ImagePullJobSpec,
}

/// What an ImageListPullJob does with its ImagePullJobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListActions {
    /// Images to create a job for, in the list's order.
    pub create: Vec<String>,
    /// Jobs to delete, by name: of images no longer listed, or made from an older template.
    pub delete: Vec<String>,
}

/// Whether a job was made from the list's current template: its hash label is the template's, or
/// its spec is the template (a job created before the label, or by another implementation's hash).
pub fn job_matches_template(job: &ListJob<'_>, list: &ImageListPullJobSpec, hash: &str) -> bool {
    job.hash == Some(hash) || template_of_job(job.spec) == template_of(list)
}

/// Upstream's ImageListPullJob rule: a listed image without a job gets one; a listed image whose job
/// was made from an older template gets a new job and the old one is deleted (the new job pulls with
/// the new template from the start); jobs of images no longer listed are deleted. One job per image
/// counts (the first by name); `jobs` holds no job being deleted.
pub fn list_actions(list: &ImageListPullJobSpec, hash: &str, jobs: &[ListJob<'_>]) -> ListActions {
    let mut by_image: BTreeMap<&str, &ListJob<'_>> = BTreeMap::new();
    let mut sorted: Vec<&ListJob<'_>> = jobs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(b.name));
    for job in sorted {
        by_image.entry(job.spec.image.as_str()).or_insert(job);
    }
    let mut actions = ListActions::default();
    for image in &list.images {
        match by_image.get(image.as_str()) {
            None => actions.create.push(image.clone()),
            Some(job) if !job_matches_template(job, list, hash) => {
                actions.create.push(image.clone());
                actions.delete.push(job.name.to_owned());
            }
            Some(_) => {}
        }
    }
    for (image, job) in &by_image {
        if !list.images.iter().any(|i| i == image) {
            actions.delete.push(job.name.to_owned());
        }
    }
    actions
}

/// Time left before a finished object's TTL deletes it (`None`: no TTL or not finished).
pub fn ttl_left(
    completion: Option<&Time>,
    ttl_seconds: Option<i32>,
    now: Timestamp,
) -> Option<SignedDuration> {
    let done = completion?;
    let ttl = ttl_seconds?;
    Some(SignedDuration::from_secs(i64::from(ttl)) - now.duration_since(done.0))
}

#[cfg(test)]
mod tests;
