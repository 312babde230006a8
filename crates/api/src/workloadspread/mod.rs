//! WorkloadSpread, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves and stores):
//! spreads the Pods of one workload (CloneSet, Deployment, ReplicaSet, Job, StatefulSet, Advanced
//! StatefulSet) over ordered subsets of nodes, each with a required node selector term, preferred
//! terms, tolerations, a `maxReplicas` (int or percent of the workload's replicas) and a patch.
//! Namespaced, short name `ws`. Validation is upstream's validating webhook
//! (`pkg/webhook/workloadspread/validating`), as a pure function of the object, the other
//! WorkloadSpreads of its namespace and the target workload's Pod template when known.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm, Toleration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, Path};
use crate::intstr::IntOrPercent;
use crate::schema::{is_default, preserve_unknown_fields_untyped};
use crate::validation::validate_label_selector;

pub const KIND: &str = "WorkloadSpread";
pub const PLURAL: &str = "workloadspreads";
pub const API_VERSION: &str = "apps.kruise.io/v1alpha1";

/// Annotation the Pod webhook writes on every Pod it places: `{"name":…,"subset":…,"uid":…}`.
pub const ANNOTATION_MATCHED: &str = "apps.kruise.io/matched-workloadspread";
/// The Pod deletion cost the controller writes per subset (read by ReplicaSets and CloneSets).
pub const ANNOTATION_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// On a WorkloadSpread: do not patch the metadata of a subset's `patch` into existing Pods.
pub const ANNOTATION_IGNORE_PATCH_EXISTING: &str =
    "workloadspread.kruise.io/ignore-patch-existing-pods-metadata";
/// The subset condition type the Adaptive strategy maintains.
pub const CONDITION_SCHEDULABLE: &str = "Schedulable";
/// kruise-rs: the scheduling gate the Pod webhook puts on a Pod whose placement did not finish
/// within its deadline; the WorkloadSpread controller places the Pod and lifts it.
pub const SCHEDULING_GATE: &str = "apps.kruise.io/workloadspread-placement";
/// kruise-rs: the label beside [`SCHEDULING_GATE`] (value `pending`, or the id a Pod without a name
/// yet asked its slot under), so that gated Pods are found by label; lifted with the gate.
pub const LABEL_PLACEMENT_PENDING: &str = "apps.kruise.io/workloadspread-placement";
pub const STRATEGY_ADAPTIVE: &str = "Adaptive";
pub const STRATEGY_FIXED: &str = "Fixed";
/// How long a subset marked unschedulable stays so (upstream's `MaxScheduledFailedDuration`).
pub const MAX_SCHEDULED_FAILED_SECONDS: i64 = 300;
/// The version of Pods and workloads whose kind has no versioned status.
pub const VERSION_IGNORED: &str = "versionIgnored";

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "WorkloadSpread",
        namespaced,
        status = "WorkloadSpreadStatus",
        shortname = "ws",
        doc = "WorkloadSpread is the Schema for the WorkloadSpread API",
        printcolumn(
            name = "WorkloadName",
            type_ = "string",
            json_path = ".spec.targetRef.name"
        ),
        printcolumn(
            name = "WorkloadKind",
            type_ = "string",
            json_path = ".spec.targetRef.kind"
        ),
        printcolumn(
            name = "Adaptive",
            type_ = "boolean",
            json_path = ".spec.scheduleStrategy.type[?(@ == \"Adaptive\")]",
            description = "Whether use the adaptive reschedule strategy"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct WorkloadSpreadSpec {
        /// The workload whose Pods are spread.
        #[serde(rename = "targetRef")]
        pub target_reference: Option<TargetReference>,
        /// Only the Pods this selects (and the replicas at these paths) are spread.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub target_filter: Option<TargetFilter>,
        /// The subsets, in order of preference.
        #[serde(default)]
        pub subsets: Vec<WorkloadSpreadSubset>,
        #[serde(default, skip_serializing_if = "is_default")]
        pub schedule_strategy: WorkloadSpreadScheduleStrategy,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl TargetReference {
    /// The API group of `apiVersion` (empty for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }
}

pub use crate::validation::group_of;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Paths (`spec.tfReplicaSpecs.Worker.replicas`) whose sum is the replicas spread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas_path_list: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpreadScheduleStrategy {
    /// `Fixed` (default) or `Adaptive`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(schema_with = "strategy_type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveWorkloadSpreadStrategy>,
}

fn strategy_type(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Type indicates the type of the WorkloadSpreadScheduleStrategy. Default is Fixed",
        "enum": ["Adaptive", "Fixed", ""],
        "type": "string"
    })
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdaptiveWorkloadSpreadStrategy {
    #[serde(default, skip_serializing_if = "is_default")]
    pub disable_simulation_schedule: bool,
    /// A Pod still Pending this long after its creation is deleted and its subset marked
    /// unschedulable for a while, so that its replacement goes to the next subset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_critical_seconds: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpreadSubset {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_node_selector_term: Option<NodeSelectorTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred_node_selector_terms: Vec<PreferredSchedulingTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// At most this many Pods (or this percentage of the workload's replicas, rounded up); unset:
    /// no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<IntOrString>,
    /// A strategic-merge patch applied to the Pods placed in this subset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub patch: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpreadStatus {
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    /// One per subset, in the spec's order, for all Pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subset_statuses: Vec<WorkloadSpreadSubsetStatus>,
    /// The same per workload version (Deployments and ReplicaSets; others use `versionIgnored`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versioned_subset_statuses: BTreeMap<String, Vec<WorkloadSpreadSubsetStatus>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpreadSubsetStatus {
    pub name: String,
    /// Active Pods in the subset.
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<WorkloadSpreadSubsetCondition>,
    /// Pods the subset can still take; -1 for no limit.
    #[serde(default)]
    pub missing_replicas: i32,
    /// Pods admitted into the subset but not seen yet (name or generated id → when).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub creating_pods: BTreeMap<String, Time>,
    /// Pods whose deletion was admitted but which are still there (name → when).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deleting_pods: BTreeMap<String, Time>,
}

/// Upstream's `WorkloadSpreadSubsetCondition`: the same fields as [`crate::pub_types::SubsetCondition`].
pub type WorkloadSpreadSubsetCondition = crate::pub_types::SubsetCondition;

/// The value of [`ANNOTATION_MATCHED`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchedWorkloadSpread {
    pub name: String,
    pub subset: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl MatchedWorkloadSpread {
    /// Parses the annotation; `None` when absent or unreadable.
    pub fn parse(value: &str) -> Option<Self> {
        serde_json::from_str(value).ok()
    }

    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The CRD, served and stored in v1alpha1 only, as upstream's.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(WorkloadSpread::crd())
}

/// The workload kinds a WorkloadSpread may target: `(kind, groups)`.
pub const TARGET_KINDS: &[(&str, &[&str])] = &[
    ("CloneSet", &["apps.kruise.io"]),
    ("Deployment", &["apps"]),
    ("ReplicaSet", &["apps"]),
    ("Job", &["batch"]),
    ("StatefulSet", &["apps", "apps.kruise.io"]),
];

/// Whether an owner or target `(apiVersion, kind)` is one of [`TARGET_KINDS`].
pub fn is_target_kind(api_version: &str, kind: &str) -> bool {
    let group = group_of(api_version);
    TARGET_KINDS
        .iter()
        .any(|(k, groups)| *k == kind && groups.contains(&group))
}

/// The key of kruise-configuration listing the custom workload kinds a WorkloadSpread may target.
pub const WHITELIST_KEY: &str = "WorkloadSpread_Watch_Custom_Workload_WhiteList";

/// A group/version/kind as the whitelist writes it (Go's field names; Go's JSON decoding ignores
/// the case of keys, so the lower-case forms are read too).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhitelistedKind {
    #[serde(rename = "Group", alias = "group", default)]
    pub group: String,
    #[serde(rename = "Version", alias = "version", default)]
    pub version: String,
    #[serde(rename = "Kind", alias = "kind", default)]
    pub kind: String,
}

/// One custom workload kind: the kinds between it and its Pods (`subResources`, e.g. a job's
/// replica groups owning the Pods) and where its replicas are (`replicasPath`, dotted).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomWorkload {
    #[serde(flatten)]
    pub kind: WhitelistedKind,
    #[serde(rename = "subResources", alias = "SubResources", default)]
    pub sub_resources: Vec<WhitelistedKind>,
    #[serde(rename = "replicasPath", alias = "ReplicasPath", default)]
    pub replicas_path: String,
}

/// The custom workload kinds of kruise-configuration ([`WHITELIST_KEY`]), beside [`TARGET_KINDS`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomWorkloadWhitelist {
    #[serde(default, alias = "Workloads")]
    pub workloads: Vec<CustomWorkload>,
}

impl CustomWorkloadWhitelist {
    /// Parses the whitelist value of kruise-configuration.
    pub fn parse(value: &str) -> Result<Self, String> {
        serde_json::from_str(value).map_err(|e| format!("{WHITELIST_KEY}: {e}"))
    }

    /// Whether a WorkloadSpread may target a workload of `api_version`/`kind` (by group and kind).
    pub fn allows_target(&self, api_version: &str, kind: &str) -> bool {
        let group = group_of(api_version);
        self.workloads
            .iter()
            .any(|w| w.kind.group == group && w.kind.kind == kind)
    }

    /// Whether a Pod's owner of `api_version`/`kind` may belong to a whitelisted workload: the
    /// workload kind itself or one of its sub-resources.
    pub fn allows_owner(&self, api_version: &str, kind: &str) -> bool {
        let group = group_of(api_version);
        self.workloads.iter().any(|w| {
            std::iter::once(&w.kind)
                .chain(&w.sub_resources)
                .any(|k| k.group == group && k.kind == kind)
        })
    }

    /// The replicas path of a whitelisted workload of exactly `api_version` and `kind`.
    pub fn replicas_path(&self, api_version: &str, kind: &str) -> Option<&str> {
        let group = group_of(api_version);
        let version = api_version.rsplit('/').next().unwrap_or_default();
        self.workloads
            .iter()
            .find(|w| w.kind.group == group && w.kind.version == version && w.kind.kind == kind)
            .map(|w| w.replicas_path.as_str())
            .filter(|p| !p.is_empty())
    }
}

/// Whether two references name the same workload (group, kind and name; the version may differ).
pub fn same_workload(a: &TargetReference, b_api_version: &str, b_kind: &str, b_name: &str) -> bool {
    a.group() == group_of(b_api_version) && a.kind == b_kind && a.name == b_name
}

/// Create and update validation, as upstream's webhook. `others` are the other WorkloadSpreads of
/// the namespace (a workload may be the target of one only); `old`, the stored object on update
/// (the target may not change). The patches against the workload's template:
/// [`validate_patched_template`].
pub fn validate(
    ws: &WorkloadSpread,
    others: &[WorkloadSpread],
    old: Option<&WorkloadSpread>,
    whitelist: &CustomWorkloadWhitelist,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = Path::new("spec");
    let target_path = spec.child("targetRef");
    match &ws.spec.target_reference {
        None => errors.push(FieldError::required(
            &target_path,
            "no targetRef defined in WorkloadSpread",
        )),
        Some(target)
            if target.api_version.is_empty()
                || target.kind.is_empty()
                || target.name.is_empty() =>
        {
            errors.push(FieldError::invalid(
                &target_path,
                display_ref(target),
                "empty TargetReference is not valid for WorkloadSpread.",
            ));
        }
        Some(target) => {
            if let Some((_, groups)) = TARGET_KINDS.iter().find(|(k, _)| *k == target.kind) {
                if !groups.contains(&target.group()) {
                    errors.push(FieldError::invalid(
                        &target_path,
                        display_ref(target),
                        format!("TargetReference is not valid for {}.", target.kind),
                    ));
                }
            } else if !whitelist.allows_target(&target.api_version, &target.kind) {
                errors.push(FieldError::invalid(
                    &target_path,
                    display_ref(target),
                    "TargetReference's GroupKind is not permitted.",
                ));
            }
        }
    }
    validate_subsets(ws, &spec.child("subsets"), &mut errors);
    let strategy = &ws.spec.schedule_strategy;
    let strategy_path = spec.child("scheduleStrategy");
    if !matches!(
        strategy.type_.as_str(),
        "" | STRATEGY_FIXED | STRATEGY_ADAPTIVE
    ) {
        errors.push(FieldError::invalid(
            &strategy_path.child("type"),
            &strategy.type_,
            "ScheduleStrategy's type is not valid",
        ));
    }
    if let Some(adaptive) = &strategy.adaptive {
        let seconds = adaptive
            .reschedule_critical_seconds
            .map_or_else(|| "null".to_string(), |s| s.to_string());
        if strategy.type_ != STRATEGY_ADAPTIVE {
            errors.push(FieldError::invalid(
                &strategy_path.child("type"),
                &seconds,
                "the scheduleStrategy's type must be adaptive when using adaptive scheduleStrategy",
            ));
        }
        let subsets = &ws.spec.subsets;
        if subsets.len() > 1 && subsets.last().is_some_and(|s| s.max_replicas.is_some()) {
            errors.push(FieldError::invalid(
                &strategy_path.child("adaptive"),
                &seconds,
                "the last subset's maxReplicas must be not specified when using adaptive scheduleStrategy",
            ));
        }
        let allowed = if subsets.len() > 1 {
            let n = i64::try_from(subsets.len() - 1).unwrap_or(i64::MAX);
            (MAX_SCHEDULED_FAILED_SECONDS - 5) / n
        } else {
            i64::from(i32::MAX)
        };
        if let Some(s) = adaptive.reschedule_critical_seconds
            && (s < 0 || i64::from(s) > allowed)
        {
            errors.push(FieldError::invalid(
                &strategy_path.child("adaptive").child("rescheduleCriticalSeconds"),
                s,
                format!(
                    "rescheduleCriticalSeconds < 0 or rescheduleCriticalSeconds > {allowed} is not permitted"
                ),
            ));
        }
    }
    if let Some(filter) = &ws.spec.target_filter
        && let Some(selector) = &filter.selector
    {
        validate_label_selector(
            selector,
            &spec.child("targetFilter").child("selector"),
            &mut errors,
        );
    }
    if let Some(target) = &ws.spec.target_reference {
        let name = ws.metadata.name.as_deref().unwrap_or_default();
        if let Some(other) = others.iter().find(|o| {
            o.metadata.name.as_deref().unwrap_or_default() != name
                && o.spec
                    .target_reference
                    .as_ref()
                    .is_some_and(|t| same_workload(target, &t.api_version, &t.kind, &t.name))
        }) {
            errors.push(FieldError::invalid(
                &target_path,
                display_ref(target),
                format!(
                    "ws.spec.targetRef is in conflict with other WorkloadSpread {}",
                    other.metadata.name.as_deref().unwrap_or_default()
                ),
            ));
        }
    }
    if let Some(old) = old
        && let (Some(new_ref), Some(old_ref)) =
            (&ws.spec.target_reference, &old.spec.target_reference)
        && !same_workload(new_ref, &old_ref.api_version, &old_ref.kind, &old_ref.name)
    {
        errors.push(FieldError::invalid(
            &target_path,
            display_ref(new_ref),
            "change TargetReference is not permitted for WorkloadSpread",
        ));
    }
    errors
}

fn display_ref(target: &TargetReference) -> String {
    format!("{}/{} {}", target.api_version, target.kind, target.name)
}

fn validate_subsets(ws: &WorkloadSpread, path: &Path, errors: &mut Vec<FieldError>) {
    let subsets = &ws.spec.subsets;
    if subsets.is_empty() {
        errors.push(FieldError::required(
            path,
            "subsets number must >= 1 in WorkloadSpread",
        ));
        return;
    }
    let mut names = BTreeSet::new();
    let mut percent_sum = 0i64;
    let mut first_is_percent: Option<bool> = None;
    let is_statefulset = ws
        .spec
        .target_reference
        .as_ref()
        .is_some_and(|t| t.kind == "StatefulSet");
    for (i, subset) in subsets.iter().enumerate() {
        let at = path.index(i);
        if subset.name.is_empty() {
            errors.push(FieldError::invalid(
                &at.child("name"),
                "",
                "subset name must not be empty",
            ));
        } else if !names.insert(subset.name.as_str()) {
            errors.push(FieldError::invalid(
                &at.child("name"),
                &subset.name,
                format!("duplicated subset name {}", subset.name),
            ));
        }
        if let Some(term) = &subset.required_node_selector_term {
            validate_term(term, &at.child("requiredNodeSelectorTerm"), errors);
        }
        for (j, term) in subset.preferred_node_selector_terms.iter().enumerate() {
            let term_path = at.child("preferredNodeSelectorTerms").index(j);
            if !(1..=100).contains(&term.weight) {
                errors.push(FieldError::invalid(
                    &term_path.child("weight"),
                    term.weight,
                    "must be in the range 1-100",
                ));
            }
            validate_term(&term.preference, &term_path.child("preference"), errors);
        }
        for (j, toleration) in subset.tolerations.iter().enumerate() {
            validate_toleration(toleration, &at.child("tolerations").index(j), errors);
        }
        if let Some(patch) = &subset.patch {
            validate_patch(patch, &at.child("patch"), errors);
        }
        if let Some(max) = &subset.max_replicas {
            let max_path = at.child("maxReplicas");
            let shown = crate::intstr::display(max);
            let percent = matches!(max, IntOrString::String(_));
            match first_is_percent {
                None => first_is_percent = Some(percent),
                Some(first) if first != percent => {
                    errors.push(FieldError::invalid(
                        &max_path,
                        &shown,
                        "the maxReplicas type of all subsets must be the same",
                    ));
                    return;
                }
                Some(_) => {}
            }
            if is_statefulset && percent {
                errors.push(FieldError::invalid(
                    &max_path,
                    &shown,
                    "the maxReplicas type must be Int for StatefulSet",
                ));
                return;
            }
            let value = match IntOrPercent::parse(max) {
                Ok(IntOrPercent::Int(n)) => i64::from(n),
                Ok(IntOrPercent::Percent(p)) => i64::from(p),
                Err(_) => -1,
            };
            if value < 0 {
                errors.push(FieldError::invalid(
                    &max_path,
                    &shown,
                    "maxReplicas is not valid for subset",
                ));
                return;
            }
            if percent {
                percent_sum += value;
                if percent_sum > 100 {
                    errors.push(FieldError::invalid(
                        &max_path,
                        &shown,
                        "the sum of all subset's maxReplicas exceeds 100% is no permitted",
                    ));
                    return;
                }
            }
        }
    }
    if first_is_percent == Some(true)
        && percent_sum < 100
        && subsets.last().is_some_and(|s| s.max_replicas.is_some())
    {
        let shown = subsets[0]
            .max_replicas
            .as_ref()
            .map(crate::intstr::display)
            .unwrap_or_default();
        errors.push(FieldError::invalid(
            &path.index(0).child("maxReplicas"),
            shown,
            "maxReplicas sum of all subsets must equal 100% when type is specified as percent",
        ));
    }
}

const NODE_SELECTOR_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];

/// Kubernetes' `ValidateNodeSelectorTerm`: every requirement has a valid key and an operator whose
/// values fit it; fields may only be `metadata.name` with `In`/`NotIn` and one value.
fn validate_term(term: &NodeSelectorTerm, path: &Path, errors: &mut Vec<FieldError>) {
    for (i, req) in term.match_expressions.iter().flatten().enumerate() {
        let at = path.child("matchExpressions").index(i);
        if let Err(message) = crate::validation::check_qualified_name(&req.key) {
            errors.push(FieldError::invalid(&at.child("key"), &req.key, message));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errors.push(FieldError::required(
                &at.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(FieldError::forbidden(
                &at.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                errors.push(FieldError::required(
                    &at.child("values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ))
            }
            op if !NODE_SELECTOR_OPERATORS.contains(&op) => errors.push(FieldError::not_supported(
                &at.child("operator"),
                op,
                NODE_SELECTOR_OPERATORS,
            )),
            _ => {}
        }
    }
    for (i, req) in term.match_fields.iter().flatten().enumerate() {
        let at = path.child("matchFields").index(i);
        if req.key != "metadata.name" {
            errors.push(FieldError::invalid(
                &at.child("key"),
                &req.key,
                "not a valid field selector key",
            ));
        }
        let values = req.values.as_deref().unwrap_or_default();
        if !matches!(req.operator.as_str(), "In" | "NotIn") {
            errors.push(FieldError::not_supported(
                &at.child("operator"),
                &req.operator,
                &["In", "NotIn"],
            ));
        } else if values.len() != 1 {
            errors.push(FieldError::required(
                &at.child("values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            ));
        }
    }
}

/// Kubernetes' `ValidateTolerations`, in short: a valid key (or an empty key with `Exists`), an
/// operator `Exists` (no value) or `Equal`, a known effect, tolerationSeconds only with NoExecute.
fn validate_toleration(t: &Toleration, path: &Path, errors: &mut Vec<FieldError>) {
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty()
        && let Err(message) = crate::validation::check_qualified_name(key)
    {
        errors.push(FieldError::invalid(&path.child("key"), key, message));
    }
    let operator = t.operator.as_deref().unwrap_or_default();
    let value = t.value.as_deref().unwrap_or_default();
    if key.is_empty() && operator != "Exists" {
        errors.push(FieldError::invalid(
            &path.child("operator"),
            operator,
            "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    match operator {
        "" | "Equal" => {
            if !value.is_empty()
                && let Err(message) = crate::validation::check_label_value(value)
            {
                errors.push(FieldError::invalid(&path.child("value"), value, message));
            }
        }
        "Exists" => {
            if !value.is_empty() {
                errors.push(FieldError::invalid(
                    &path.child("operator"),
                    value,
                    "value must be empty when `operator` is 'Exists'",
                ));
            }
        }
        other => errors.push(FieldError::not_supported(
            &path.child("operator"),
            other,
            &["Equal", "Exists"],
        )),
    }
    let effect = t.effect.as_deref().unwrap_or_default();
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        errors.push(FieldError::invalid(
            &path.child("effect"),
            effect,
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ));
    }
    if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        errors.push(FieldError::not_supported(
            &path.child("effect"),
            effect,
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        ));
    }
}

/// A subset's patch must be an object (whether it applies to the workload's Pod template is
/// [`validate_patched_template`], called with the merge by whoever has the template).
fn validate_patch(patch: &serde_json::Value, path: &Path, errors: &mut Vec<FieldError>) {
    if !patch.is_object() {
        errors.push(FieldError::invalid(
            path,
            patch,
            "failed to merge patch: the patch must be a JSON object",
        ));
    }
}

/// The workload's Pod template with subset `index`'s patch merged in must still be a Pod whose
/// containers have a name and an image (upstream validates the patched Pod spec).
pub fn validate_patched_template(
    index: usize,
    merged: Result<serde_json::Value, String>,
) -> Vec<FieldError> {
    let path = Path::new("spec")
        .child("subsets")
        .index(index)
        .child("patch");
    let mut errors = Vec::new();
    let merged = match merged {
        Ok(merged) => merged,
        Err(error) => {
            errors.push(FieldError::invalid(
                &path,
                "patch",
                format!("failed to merge patch: {error}"),
            ));
            return errors;
        }
    };
    if let Err(error) = serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(merged.clone()) {
        errors.push(FieldError::invalid(
            &path,
            "patch",
            format!("failed to unmarshal: {error}"),
        ));
        return errors;
    }
    for (i, container) in merged
        .pointer("/spec/containers")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = path.child("spec").child("containers").index(i);
        if container
            .get("name")
            .and_then(serde_json::Value::as_str)
            .is_none_or(str::is_empty)
        {
            errors.push(FieldError::required(
                &at.child("name"),
                "a container needs a name",
            ));
        }
        if container
            .get("image")
            .and_then(serde_json::Value::as_str)
            .is_none_or(str::is_empty)
        {
            errors.push(FieldError::required(
                &at.child("image"),
                "a container needs an image",
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests;
