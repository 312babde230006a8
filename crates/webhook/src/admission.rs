//! Admission for the apps.kruise.io workloads: defaulting (mutating) and validation, each a pure function
//! from an AdmissionReview to its answer. The apiserver sends v1beta1 objects (the webhooks are registered
//! for v1beta1 with `matchPolicy: Equivalent`); a v1alpha1 object is converted first, to be safe.

use std::collections::{BTreeMap, BTreeSet};

use kruise_api::field;
use kruise_api::kinds::{Defaults, Kind, V1ALPHA1, V1BETA1};
use kruise_api::sidecarset::patch_metadata::{self, Whitelist};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;
use serde_json::Value;

use crate::patch::additive_diff;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::statefulset::v1beta1::StatefulSet;
use kruise_api::statefulset::volume_expansion::{self, ClassLookup};

/// What validation needs to know about the rest of the cluster: the other SidecarSets, whose containers
/// and volumes a new SidecarSet must not clash with; the StorageClasses of the Advanced StatefulSet
/// claim templates an update resizes (by class name, `None` for the default class); the Pod
/// annotations a SidecarSet's patchPodMetadata may write.
#[derive(Default)]
pub struct Cluster {
    pub sidecarsets: Vec<SidecarSet>,
    pub storage_classes: BTreeMap<Option<String>, ClassLookup>,
    pub patch_metadata: PatchMetadataRules,
}

/// The patchPodMetadata whitelist of `kruise-configuration` (`None`: no whitelist), and whether
/// the `SidecarSetPatchPodMetadataDefaultsAllowed` gate lets a SidecarSet no rule covers through.
#[derive(Clone, Debug, Default)]
pub struct PatchMetadataRules {
    pub whitelist: Option<Whitelist>,
    pub defaults_allowed: bool,
}

/// The feature gates the admission webhooks read (each off by default, as in OpenKruise v1.9.0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gates {
    /// `TemplateNoDefaults`: Pod templates never get Kubernetes' Pod defaults.
    pub template_no_defaults: bool,
    /// `DefaultHostNetworkHostPortsInPodTemplates`.
    pub host_network_host_ports: bool,
    /// `SidecarSetPatchPodMetadataDefaultsAllowed`.
    pub patch_pod_metadata_defaults_allowed: bool,
    /// `ResourceDistributionGate`: while off, ResourceDistributions are refused.
    pub resource_distribution: bool,
    /// `KruiseDaemon`: while off, ContainerRecreateRequests are refused.
    pub kruise_daemon: bool,
    /// `WorkloadSpread`: while off, WorkloadSpreads are refused.
    pub workload_spread: bool,
    /// `PodProbeMarkerGate`: while off (or `KruiseDaemon` off), PodProbeMarkers are refused.
    pub pod_probe_marker: bool,
    /// `ImagePullJobGate`: while off (or `KruiseDaemon` is), ImagePullJobs and ImageListPullJobs are
    /// refused.
    pub image_pull_job: bool,
}

/// The gate a kind's validation needs and that is off, if any (upstream refuses such a request).
pub fn gate_refusal(kind: Kind, gates: &Gates) -> Option<&'static str> {
    match kind {
        Kind::ImagePullJob | Kind::ImageListPullJob | Kind::NodeImage if !gates.kruise_daemon => {
            Some("KruiseDaemon")
        }
        Kind::ImagePullJob | Kind::ImageListPullJob if !gates.image_pull_job => {
            Some("ImagePullJobGate")
        }
        _ => None,
    }
}

/// Refuses a request of a kind whose feature gate is off, as upstream: `feature-gate X is not enabled`.
pub fn refuse_gate(review: AdmissionReview<DynamicObject>, gate: &str) -> Answer {
    match request_of(review) {
        Ok(request) if matches!(request.operation, Operation::Create | Operation::Update) => {
            deny(&request, format!("feature-gate {gate} is not enabled"))
        }
        Ok(request) => allow(&request),
        Err(answer) => *answer,
    }
}

/// The Advanced StatefulSet update of `review` as v1beta1 (new, old); `None` for anything else or
/// what does not decode (validation reports that).
fn statefulset_update(
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
) -> Option<(StatefulSet, StatefulSet)> {
    if kind != Kind::StatefulSet || request.operation != Operation::Update {
        return None;
    }
    let typed = |object: &DynamicObject| -> Option<StatefulSet> {
        let (value, _) = as_v1beta1(kind, to_json(object).ok()?).ok()?;
        kruise_api::kinds::decode(value).ok()
    };
    Some((
        typed(request.object.as_ref()?)?,
        typed(request.old_object.as_ref()?)?,
    ))
}

/// The StorageClasses validating `review` needs read: those of the Advanced StatefulSet claim
/// templates whose storage the update changes (`None`: the cluster's default class).
pub fn storage_classes_to_check(
    kind: Kind,
    review: &AdmissionReview<DynamicObject>,
) -> BTreeSet<Option<String>> {
    let Some(request) = review.request.as_ref() else {
        return BTreeSet::new();
    };
    let Some((new, old)) = statefulset_update(kind, request) else {
        return BTreeSet::new();
    };
    volume_expansion::resized_templates(&new.spec, &old.spec)
        .map(|resizes| resizes.into_iter().map(|r| r.storage_class).collect())
        .unwrap_or_default()
}

/// Whether the answer allowed the request (for metrics).
pub struct Answer {
    pub review: AdmissionReview<DynamicObject>,
    pub allowed: bool,
}

pub(crate) fn request_of(
    review: AdmissionReview<DynamicObject>,
) -> Result<AdmissionRequest<DynamicObject>, Box<Answer>> {
    review.try_into().map_err(
        |error: kube::core::admission::ConvertAdmissionReviewError| {
            let message = format!("malformed AdmissionReview: {error}");
            Box::new(Answer {
                review: AdmissionResponse::invalid(message).into_review(),
                allowed: false,
            })
        },
    )
}

fn to_json(object: &DynamicObject) -> Result<Value, String> {
    serde_json::to_value(object).map_err(|e| format!("cannot read the object: {e}"))
}

/// The object as v1beta1 JSON, and the version it arrived in.
fn as_v1beta1(kind: Kind, object: Value) -> Result<(Value, String), String> {
    let version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(V1BETA1)
        .to_string();
    if version == V1BETA1 {
        return Ok((object, version));
    }
    let converted = kind.convert(object, V1BETA1).map_err(|e| e.to_string())?;
    Ok((converted, version))
}

pub(crate) fn deny(request: &AdmissionRequest<DynamicObject>, message: String) -> Answer {
    Answer {
        review: AdmissionResponse::from(request).deny(message).into_review(),
        allowed: false,
    }
}

/// [`deny`] with an HTTP status code (upstream answers 400, 403 or 422 by handler).
pub(crate) fn deny_with_code(
    request: &AdmissionRequest<DynamicObject>,
    code: u16,
    message: String,
) -> Answer {
    let mut answer = deny(request, message);
    if let Some(response) = answer.review.response.as_mut() {
        response.result.code = code;
    }
    answer
}

/// A CREATE or UPDATE of an object of type `T`, decoded (`old` on UPDATE).
pub(crate) struct Change<T> {
    pub request: AdmissionRequest<DynamicObject>,
    pub new: T,
    pub old: Option<T>,
}

/// The CREATE or UPDATE in `review`, decoded; `Err` answers the review at once: any other
/// operation (or a request without an object) is allowed, an object that does not decode is
/// refused with 400, the field named.
pub(crate) fn change_of<T: serde::de::DeserializeOwned>(
    review: AdmissionReview<DynamicObject>,
) -> Result<Change<T>, Box<Answer>> {
    decode_change(review, None, kinds_decode, |request, message| {
        deny_with_code(request, 400, message)
    })
}

/// `kruise_api::kinds::decode` with its error as the message of a refusal.
pub(crate) fn kinds_decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    kruise_api::kinds::decode(value).map_err(|e| e.to_string())
}

/// The start every validator of a kind's objects shares, written once: the CREATE or UPDATE in
/// `review`, its object (and on UPDATE its old object) decoded with `decode`; `Err` answers the
/// review at once: any other operation, or a request without an object, is allowed; while
/// `disabled_gate` names a feature gate (checked before the object is read) the request is
/// refused as [`gate_disabled`]; an object that does not decode is refused by `refuse`.
pub(crate) fn decode_change<T>(
    review: AdmissionReview<DynamicObject>,
    disabled_gate: Option<&str>,
    decode: impl Fn(Value) -> Result<T, String>,
    refuse: impl Fn(&AdmissionRequest<DynamicObject>, String) -> Answer,
) -> Result<Change<T>, Box<Answer>> {
    let request = request_of(review)?;
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return Err(Box::new(allow(&request)));
    }
    if let Some(gate) = disabled_gate {
        return Err(Box::new(gate_disabled(&request, gate)));
    }
    let decode = |object: &DynamicObject| decode(to_json(object)?);
    let Some(object) = &request.object else {
        return Err(Box::new(allow(&request)));
    };
    let new = match decode(object) {
        Ok(new) => new,
        Err(message) => return Err(Box::new(refuse(&request, message))),
    };
    let old = match (&request.operation, &request.old_object) {
        (Operation::Update, Some(old)) => match decode(old) {
            Ok(old) => Some(old),
            Err(message) => return Err(Box::new(refuse(&request, message))),
        },
        _ => None,
    };
    Ok(Change { request, new, old })
}

/// The refusal of a request while the feature gate `gate` is off, as upstream's webhooks answer
/// it: 403 Forbidden, status Failure.
pub(crate) fn gate_disabled(request: &AdmissionRequest<DynamicObject>, gate: &str) -> Answer {
    let mut response =
        AdmissionResponse::from(request).deny(format!("feature-gate {gate} is not enabled"));
    response.result.code = 403;
    response.result.reason = "Forbidden".into();
    response.result.status = Some(StatusSummary::Failure);
    Answer {
        review: response.into_review(),
        allowed: false,
    }
}

pub(crate) fn allow(request: &AdmissionRequest<DynamicObject>) -> Answer {
    Answer {
        review: AdmissionResponse::from(request).into_review(),
        allowed: true,
    }
}

/// Answers the CREATE or UPDATE in `review` with `decide(request, its object)`: what defaulting
/// and validation look at. Any other operation, or a request without an object, is allowed as it
/// is; a review that does not decode is refused ([`request_of`]).
pub(crate) fn on_written(
    review: AdmissionReview<DynamicObject>,
    decide: impl FnOnce(&AdmissionRequest<DynamicObject>, &DynamicObject) -> Answer,
) -> Answer {
    let request = match request_of(review) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return allow(&request);
    }
    let Some(object) = &request.object else {
        return allow(&request);
    };
    decide(&request, object)
}

/// Defaulting with the default gates (see [`mutate_with`]).
pub fn mutate(kind: Kind, review: AdmissionReview<DynamicObject>) -> Answer {
    mutate_with(kind, review, &Gates::default())
}

/// How `request` defaults Pod templates: as OpenKruise's workload webhooks, on create and on an
/// update that changes the template, never with `TemplateNoDefaults`; `new` is the object as v1beta1.
fn template_defaults(
    kind: Kind,
    request: &AdmissionRequest<DynamicObject>,
    new: &Value,
    gates: &Gates,
) -> Defaults {
    let changed = || {
        let Some(pointer) = kind.defaulted_template() else {
            return true;
        };
        let old = request
            .old_object
            .as_ref()
            .and_then(|old| as_v1beta1(kind, to_json(old).ok()?).ok());
        old.is_none_or(|(old, _)| old.pointer(pointer) != new.pointer(pointer))
    };
    Defaults {
        pod_templates: !gates.template_no_defaults
            && (request.operation != Operation::Update || changed()),
        host_network_host_ports: gates.host_network_host_ports,
    }
}

/// Defaulting: answers with the JSON patch from the received object to its defaulted form.
pub fn mutate_with(kind: Kind, review: AdmissionReview<DynamicObject>, gates: &Gates) -> Answer {
    on_written(review, |request, object| {
        let result = to_json(object).and_then(|original| {
            let (v1beta1, version) = as_v1beta1(kind, original.clone())?;
            let defaults = template_defaults(kind, request, &v1beta1, gates);
            let defaulted = kind
                .default_object_with(v1beta1, &defaults)
                .map_err(|e| e.to_string())?;
            let defaulted = if version == V1ALPHA1 {
                kind.convert(defaulted, V1ALPHA1)
                    .map_err(|e| e.to_string())?
            } else {
                defaulted
            };
            Ok(additive_diff(&original, &defaulted))
        });
        match result {
            Err(message) => deny(request, message),
            Ok(patch) if patch.0.is_empty() => allow(request),
            Ok(patch) => match AdmissionResponse::from(request).with_patch(patch) {
                Ok(response) => Answer {
                    review: response.into_review(),
                    allowed: true,
                },
                Err(error) => deny(
                    request,
                    format!("cannot encode the defaulting patch: {error}"),
                ),
            },
        }
    })
}

/// Denies a request that cannot be decided now (the cluster state it needs is unreadable).
pub fn unavailable(
    review: AdmissionReview<DynamicObject>,
    error: &dyn std::fmt::Display,
) -> Answer {
    match request_of(review) {
        Ok(request) => deny(
            &request,
            format!("cannot check the request against the cluster: {error}"),
        ),
        Err(answer) => *answer,
    }
}

/// Validation: denies with every field error, each naming its field.
pub fn validate(kind: Kind, review: AdmissionReview<DynamicObject>, cluster: &Cluster) -> Answer {
    on_written(review, |request, object| {
        let old = match request.operation {
            Operation::Update => request.old_object.as_ref(),
            _ => None,
        };
        let result = to_json(object).and_then(|new| {
            let (new, _) = as_v1beta1(kind, new)?;
            let old = match old {
                Some(old) => Some(as_v1beta1(kind, to_json(old)?)?.0),
                None => None,
            };
            let mut errors = kind.validate(new.clone(), old).map_err(|e| e.to_string())?;
            if kind == Kind::SidecarSet && errors.is_empty() {
                let typed: SidecarSet =
                    kruise_api::kinds::decode(new).map_err(|e| e.to_string())?;
                errors.extend(kruise_api::sidecarset::conflicts(
                    &typed,
                    &cluster.sidecarsets,
                ));
                errors.extend(patch_metadata::check(
                    &typed,
                    cluster.patch_metadata.whitelist.as_ref(),
                    cluster.patch_metadata.defaults_allowed,
                ));
            }
            // As OpenKruise, claim templates are checked against their StorageClasses once the update
            // is otherwise valid.
            if errors.is_empty()
                && let Some((new, old)) = statefulset_update(kind, request)
            {
                errors.extend(volume_expansion::check(&new.spec, &old.spec, |class| {
                    cluster
                        .storage_classes
                        .get(&class.map(str::to_owned))
                        .cloned()
                        .unwrap_or_else(|| ClassLookup::Unreadable("not looked up".into()))
                }));
            }
            Ok(errors)
        });
        match result {
            Err(message) => deny(request, message),
            Ok(errors) if errors.is_empty() => allow(request),
            Ok(errors) => deny(request, field::join(&errors)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, response};
    use serde_json::json;

    fn review(
        operation: &str,
        object: Value,
        old: Option<Value>,
    ) -> AdmissionReview<DynamicObject> {
        Review::of("apps.kruise.io", "v1beta1", "BroadcastJob", "broadcastjobs")
            .operation(operation)
            .name("job")
            .namespace("default")
            .object(object)
            .old(old)
            .build()
    }

    fn job(restart: &str) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "BroadcastJob",
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {"template": {"spec": {"restartPolicy": restart, "containers": [{"name": "a", "image": "b"}]}}}
        })
    }

    /// Whether the defaulting patch gives the template a `dnsPolicy` (a Pod default).
    fn template_defaulted(answer: &Answer) -> bool {
        let Some(patch) = response(answer).patch.as_ref() else {
            return false;
        };
        String::from_utf8_lossy(patch).contains("dnsPolicy")
    }

    /// OpenKruise's rule for Pod template defaults: on create and on an update that changes the
    /// template, never with TemplateNoDefaults; an update of anything else leaves the template alone.
    #[test]
    fn template_defaults_on_create_and_template_changes_only() {
        let no_defaults = Gates {
            template_no_defaults: true,
            ..Gates::default()
        };
        let mut scaled = job("Never");
        scaled["spec"]["parallelism"] = json!(3);
        let cases = [
            (
                "create",
                review("CREATE", job("Never"), None),
                Gates::default(),
                true,
            ),
            (
                "create, gate on",
                review("CREATE", job("Never"), None),
                no_defaults,
                false,
            ),
            (
                "template changed",
                review("UPDATE", job("OnFailure"), Some(job("Never"))),
                Gates::default(),
                true,
            ),
            (
                "template changed, gate on",
                review("UPDATE", job("OnFailure"), Some(job("Never"))),
                no_defaults,
                false,
            ),
            (
                "template unchanged",
                review("UPDATE", scaled, Some(job("Never"))),
                Gates::default(),
                false,
            ),
        ];
        for (case, review, gates, want) in cases {
            let answer = mutate_with(Kind::BroadcastJob, review, &gates);
            assert!(answer.allowed, "{case}");
            assert_eq!(template_defaulted(&answer), want, "{case}");
        }
    }

    #[test]
    fn mutate_returns_the_defaults_as_a_patch() {
        let answer = mutate(Kind::BroadcastJob, review("CREATE", job("Never"), None));
        assert!(answer.allowed);
        let patch: Value =
            serde_json::from_slice(response(&answer).patch.as_deref().expect("patch"))
                .expect("json");
        let paths: Vec<&str> = patch
            .as_array()
            .expect("ops")
            .iter()
            .filter_map(|op| op["path"].as_str())
            .collect();
        assert!(
            paths.contains(&"/spec/completionPolicy/type")
                || paths.contains(&"/spec/completionPolicy"),
            "{paths:?}"
        );
        assert!(paths.contains(&"/spec/parallelism"), "{paths:?}");
        assert!(
            patch
                .as_array()
                .expect("ops")
                .iter()
                .all(|op| op["op"] != "remove")
        );
    }

    #[test]
    fn validate_denies_with_field_paths() {
        let answer = validate(
            Kind::BroadcastJob,
            review("CREATE", job("Always"), None),
            &Cluster::default(),
        );
        assert!(!answer.allowed);
        let message = &response(&answer).result.message;
        assert!(
            message.contains("spec.template.spec.restartPolicy"),
            "{message}"
        );
        let ok = validate(
            Kind::BroadcastJob,
            review("UPDATE", job("Never"), Some(job("Never"))),
            &Cluster::default(),
        );
        assert!(ok.allowed);
    }

    #[test]
    fn undecodable_object_is_denied_naming_the_field() {
        let mut bad = job("Never");
        bad["spec"]["paused"] = json!("yes");
        let answer = validate(
            Kind::BroadcastJob,
            review("CREATE", bad, None),
            &Cluster::default(),
        );
        assert!(!answer.allowed);
        let message = &response(&answer).result.message;
        assert!(message.contains("spec.paused"), "{message}");
    }

    #[test]
    fn delete_is_allowed() {
        let answer = validate(
            Kind::BroadcastJob,
            review("DELETE", Value::Null, Some(job("Never"))),
            &Cluster::default(),
        );
        assert!(answer.allowed);
    }

    fn asts(class: Option<&str>, storage: &str) -> Value {
        let mut claim = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}});
        if let Some(class) = class {
            claim["storageClassName"] = json!(class);
        }
        let object = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "a", "image": "b"}]}},
                "volumeClaimUpdateStrategy": {"type": "OnPodRollingUpdate"},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim}]
            }
        });
        // As the apiserver sends it: defaulted.
        Kind::StatefulSet
            .default_object(object)
            .expect("the StatefulSet defaults")
    }

    #[test]
    fn a_statefulset_update_is_checked_against_the_storage_classes_read() {
        let update =
            |class: Option<&str>| review("UPDATE", asts(class, "2Gi"), Some(asts(class, "1Gi")));
        assert_eq!(
            storage_classes_to_check(Kind::StatefulSet, &update(Some("slow"))),
            BTreeSet::from([Some("slow".to_owned())])
        );
        assert_eq!(
            storage_classes_to_check(Kind::StatefulSet, &update(None)),
            BTreeSet::from([None])
        );
        // Not a resize, not an update, not a StatefulSet: nothing to read.
        let same = review(
            "UPDATE",
            asts(Some("slow"), "1Gi"),
            Some(asts(Some("slow"), "1Gi")),
        );
        assert!(storage_classes_to_check(Kind::StatefulSet, &same).is_empty());
        let create = review("CREATE", asts(Some("slow"), "2Gi"), None);
        assert!(storage_classes_to_check(Kind::StatefulSet, &create).is_empty());
        assert!(storage_classes_to_check(Kind::CloneSet, &update(Some("slow"))).is_empty());

        let cluster = |allow: Option<bool>| Cluster {
            storage_classes: BTreeMap::from([(
                Some("slow".to_owned()),
                ClassLookup::Found {
                    name: "slow".into(),
                    allow_volume_expansion: allow,
                },
            )]),
            ..Cluster::default()
        };
        let refused = validate(
            Kind::StatefulSet,
            update(Some("slow")),
            &cluster(Some(false)),
        );
        assert!(!refused.allowed);
        assert_eq!(
            response(&refused).result.message,
            "spec.volumeClaimTemplates[data].spec.resources.requests.storage: Forbidden: storage class \
             slow does not support volume expansion"
        );
        for allow in [Some(true), None] {
            let admitted = validate(Kind::StatefulSet, update(Some("slow")), &cluster(allow));
            assert!(admitted.allowed, "{:?}", response(&admitted).result.message);
        }
        // A class that was not read refuses, as one that cannot be read.
        let unread = validate(Kind::StatefulSet, update(Some("slow")), &Cluster::default());
        assert!(!unread.allowed);
    }
}
