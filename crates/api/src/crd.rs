//! CRD assembly: both versions of a kind merged into one CRD (v1beta1 stored), conversion by webhook, and
//! YAML output for `config/crd/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionVersion,
    ServiceReference, WebhookClientConfig, WebhookConversion,
};
use kube::core::crd::merge_crds;

use crate::kinds::Kind;

/// Declares a custom resource of this crate: kube's `CustomResource` derive on the spec struct, with the
/// traits every spec derives and `PartialEq` and `Default` derived on the root type too. Those are the
/// same for every kind, so they are written once here, and so is the group, apps.kruise.io, unless the
/// kube attribute starts with another (`group = "policy.kruise.io"`). The input is the rest of the kube
/// attribute (version, kind, names, subresources, printer columns) and the spec struct.
///
/// Most kinds also show OpenKruise's AGE column (`metadata.creationTimestamp`), after their own
/// columns: `age_column(long)` adds it with the description Kubernetes gives that field,
/// `age_column(short)` with that description's first sentence, as each upstream CRD has it; columns
/// listed after the description inside `age_column(..)` come after AGE.
///
/// Two column groups that several workloads show alike are written once here:
/// - `replica_columns` right after the kube attribute: DESIRED (`spec.replicas`), CURRENT, UPDATED and
///   READY (the status's `replicas`, `updatedReplicas` and `readyReplicas`), after the kube attribute's
///   own columns (Advanced StatefulSet, UnitedDeployment);
/// - `pod_template_columns("<containers description>", "<images description>")` first among the columns
///   after AGE: CONTAINERS and IMAGES (priority 1), the names and images of the Pod template's containers
///   (CloneSet, Advanced DaemonSet, Advanced StatefulSet; the descriptions name the kind).
macro_rules! resource {
    (#[kube($($kube:tt)*)] replica_columns $($rest:tt)*) => {
        crate::crd::resource! {
            #[kube(
                $($kube)*,
                printcolumn(
                    name = "DESIRED",
                    type_ = "integer",
                    json_path = ".spec.replicas",
                    description = "The desired number of pods."
                ),
                printcolumn(
                    name = "CURRENT",
                    type_ = "integer",
                    json_path = ".status.replicas",
                    description = "The number of currently all pods."
                ),
                printcolumn(
                    name = "UPDATED",
                    type_ = "integer",
                    json_path = ".status.updatedReplicas",
                    description = "The number of pods updated."
                ),
                printcolumn(
                    name = "READY",
                    type_ = "integer",
                    json_path = ".status.readyReplicas",
                    description = "The number of pods ready."
                )
            )]
            $($rest)*
        }
    };
    (#[kube($($kube:tt)*)] age_column(long $($after:tt)*) $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube($($kube)*)]
            age_column(
                "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
                $($after)*
            )
            $($spec)*
        }
    };
    (#[kube($($kube:tt)*)] age_column(short $($after:tt)*) $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube($($kube)*)]
            age_column(
                "CreationTimestamp is a timestamp representing the server time when this object was created."
                $($after)*
            )
            $($spec)*
        }
    };
    (
        #[kube($($kube:tt)*)]
        age_column(
            $description:literal,
            pod_template_columns($containers:literal, $images:literal)
            $($after:tt)*
        )
        $($spec:tt)*
    ) => {
        crate::crd::resource! {
            #[kube($($kube)*)]
            age_column(
                $description,
                printcolumn(
                    name = "CONTAINERS",
                    type_ = "string",
                    priority = 1,
                    json_path = ".spec.template.spec.containers[*].name",
                    description = $containers
                ),
                printcolumn(
                    name = "IMAGES",
                    type_ = "string",
                    priority = 1,
                    json_path = ".spec.template.spec.containers[*].image",
                    description = $images
                )
                $($after)*
            )
            $($spec)*
        }
    };
    (#[kube($($kube:tt)*)] age_column($description:tt $($after:tt)*) $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                $($kube)*,
                printcolumn(
                    name = "AGE",
                    type_ = "date",
                    json_path = ".metadata.creationTimestamp",
                    description = $description
                )
                $($after)*
            )]
            $($spec)*
        }
    };
    (#[kube(group = $group:tt, $($kube:tt)*)] $($spec:tt)*) => {
        #[derive(
            kube::CustomResource,
            Clone,
            Debug,
            Default,
            PartialEq,
            serde::Serialize,
            serde::Deserialize,
            schemars::JsonSchema,
        )]
        #[kube(group = $group, $($kube)*, derive = "PartialEq", derive = "Default")]
        $($spec)*
    };
    (#[kube($($kube:tt)*)] $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(group = "apps.kruise.io", $($kube)*)]
            $($spec)*
        }
    };
}
pub(crate) use resource;

/// Namespace and Service of the webhook in a cluster install; `kruise-local` rewrites the client config to
/// a URL on 127.0.0.1.
pub const WEBHOOK_NAMESPACE: &str = "kruise-system";
pub const WEBHOOK_SERVICE: &str = "kruise-webhook-service";
pub const CONVERSION_PATH: &str = "/convert";

/// Merges the two versions of a kind and points conversion at the webhook.
pub fn assemble(
    v1alpha1: CustomResourceDefinition,
    v1beta1: CustomResourceDefinition,
) -> CustomResourceDefinition {
    let mut crd = match merge_crds(vec![v1alpha1, v1beta1], "v1beta1") {
        Ok(crd) => crd,
        // Both inputs come from derives of the same kind in this crate; a mismatch is a programming error
        // caught by the CRD tests.
        Err(error) => panic!("cannot merge the two versions of a CRD: {error}"),
    };
    // v1alpha1 first, as OpenKruise lists them.
    crd.spec.versions.sort_by(|a, b| a.name.cmp(&b.name));
    crd.spec
        .versions
        .iter_mut()
        .for_each(strip_version_defaults);
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: WEBHOOK_NAMESPACE.into(),
                    name: WEBHOOK_SERVICE.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    crd
}

/// [`strip_defaults`] on the schema of one version.
fn strip_version_defaults(version: &mut CustomResourceDefinitionVersion) {
    if let Some(schema) = version
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        && let Ok(mut json) = serde_json::to_value(&*schema)
    {
        strip_defaults(&mut json);
        if let Ok(stripped) = serde_json::from_value(json) {
            *schema = stripped;
        }
    }
}

/// Removes `default` from every schema node. Defaults are the mutating webhook's job (as in OpenKruise);
/// structural defaults would make the apiserver write fields such as `paused: false` into every object.
fn strip_defaults(schema: &mut serde_json::Value) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    node.remove("default");
    for (key, child) in node.iter_mut() {
        match key.as_str() {
            // Maps from property name to schema: recurse into the schemas, never treat names as keywords.
            "properties" | "patternProperties" | "definitions" => {
                if let Some(map) = child.as_object_mut() {
                    map.values_mut().for_each(strip_defaults);
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(strip_defaults);
                }
            }
            "items" | "additionalProperties" | "not" => strip_defaults(child),
            _ => {}
        }
    }
}

/// How kruise-rs's webhook admits a kind's objects on create and update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A validating webhook of its own (and, for the two-version kinds, a defaulting one).
    Validated,
    /// One mutating webhook that validates too (upstream's ContainerRecreateRequest).
    MutatedAndValidated,
    /// None: its objects are written by kruise-rs itself (NodePodProbe).
    None,
}

/// One kind kruise-rs serves, registered once: its CRD, the manager's controller that owns it
/// (its row's name in `kruise_manager::controllers::CONTROLLERS`) and the feature gate that row
/// runs behind (by name: kruise-core's `Gate` parses it), and how the webhook admits it. The CRD
/// generator, the takeover (which kinds it carries over) and the tests of the manager, the webhook
/// configuration and the chart's RBAC all read [`SERVED`]: a kind missing from one of them fails
/// a test that names it.
#[derive(Clone, Copy, Debug)]
pub struct Served {
    pub group: &'static str,
    pub kind: &'static str,
    pub crd: fn() -> CustomResourceDefinition,
    pub controller: &'static str,
    pub gate: Option<&'static str>,
    pub admission: Admission,
}

const fn apps(
    kind: &'static str,
    crd: fn() -> CustomResourceDefinition,
    controller: &'static str,
    gate: Option<&'static str>,
    admission: Admission,
) -> Served {
    Served {
        group: crate::kinds::GROUP,
        kind,
        crd,
        controller,
        gate,
        admission,
    }
}

/// Every kind kruise-rs serves (OpenKruise v1.9.0's 18), one line each.
pub const SERVED: &[Served] = &[
    apps(
        "CloneSet",
        || Kind::CloneSet.crd(),
        "cloneset",
        None,
        Admission::Validated,
    ),
    apps(
        "StatefulSet",
        || Kind::StatefulSet.crd(),
        "statefulset",
        None,
        Admission::Validated,
    ),
    apps(
        "SidecarSet",
        || Kind::SidecarSet.crd(),
        "sidecarset",
        None,
        Admission::Validated,
    ),
    apps(
        "UnitedDeployment",
        || Kind::UnitedDeployment.crd(),
        "uniteddeployment",
        None,
        Admission::Validated,
    ),
    apps(
        "BroadcastJob",
        || Kind::BroadcastJob.crd(),
        "broadcastjob",
        None,
        Admission::Validated,
    ),
    apps(
        "DaemonSet",
        || Kind::DaemonSet.crd(),
        "daemonset",
        None,
        Admission::Validated,
    ),
    apps(
        "AdvancedCronJob",
        || Kind::AdvancedCronJob.crd(),
        "advancedcronjob",
        None,
        Admission::Validated,
    ),
    apps(
        "ImagePullJob",
        || Kind::ImagePullJob.crd(),
        "imagepulljob",
        Some("ImagePullJobGate"),
        Admission::Validated,
    ),
    apps(
        "ImageListPullJob",
        || Kind::ImageListPullJob.crd(),
        "imagepulljob",
        Some("ImagePullJobGate"),
        Admission::Validated,
    ),
    apps(
        "NodeImage",
        || Kind::NodeImage.crd(),
        "imagepulljob",
        Some("ImagePullJobGate"),
        Admission::Validated,
    ),
    Served {
        group: crate::policy::GROUP,
        kind: "PodUnavailableBudget",
        crd: crate::policy::crd,
        controller: "podunavailablebudget",
        gate: None,
        admission: Admission::Validated,
    },
    apps(
        crate::resourcedistribution::KIND,
        crate::resourcedistribution::crd,
        "resourcedistribution",
        Some("ResourceDistributionGate"),
        Admission::Validated,
    ),
    apps(
        crate::ephemeraljob::KIND,
        crate::ephemeraljob::crd,
        "ephemeraljob",
        None,
        Admission::Validated,
    ),
    apps(
        crate::persistentpodstate::KIND,
        crate::persistentpodstate::crd,
        "persistentpodstate",
        None,
        Admission::Validated,
    ),
    apps(
        crate::containerrecreaterequest::KIND,
        crate::containerrecreaterequest::crd,
        "containerrecreaterequest",
        Some("KruiseDaemon"),
        Admission::MutatedAndValidated,
    ),
    apps(
        crate::workloadspread::KIND,
        crate::workloadspread::crd,
        "workloadspread",
        Some("WorkloadSpread"),
        Admission::Validated,
    ),
    apps(
        crate::podprobemarker::KIND,
        crate::podprobemarker::crd,
        "podprobemarker",
        Some("PodProbeMarkerGate"),
        Admission::Validated,
    ),
    apps(
        crate::podprobemarker::NODE_KIND,
        crate::podprobemarker::node_crd,
        "podprobemarker",
        Some("PodProbeMarkerGate"),
        Admission::None,
    ),
];

/// Whether kruise-rs serves objects of `group`/`kind`.
pub fn served(group: &str, kind: &str) -> bool {
    SERVED.iter().any(|s| s.group == group && s.kind == kind)
}

/// All CRDs, one per line of [`SERVED`], in its order.
pub fn all() -> Vec<CustomResourceDefinition> {
    SERVED.iter().map(|served| (served.crd)()).collect()
}

/// File name of a CRD in `config/crd/` (as upstream: `<group>_<plural>.yaml`).
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The YAML of a CRD as checked in.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    Ok(format!(
        "# Generated by `make manifests` from crates/api; do not edit.\n{}",
        serde_yaml::to_string(crd)?
    ))
}

/// A CRD generated for one version only (served and stored, no conversion), as OpenKruise's
/// v1alpha1-only kinds: defaults stripped like [`assemble`]'s.
pub fn single_version(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        version.served = true;
        version.storage = true;
        strip_version_defaults(version);
    }
    crd
}

/// The apps.kruise.io kinds served in v1alpha1 only (as in OpenKruise v1.9.0), outside [`Kind`]:
/// no conversion, no defaulting webhook.
pub fn v1alpha1_only() -> Vec<CustomResourceDefinition> {
    SERVED
        .iter()
        .filter(|s| s.group == crate::kinds::GROUP && Kind::from_kind(s.kind).is_err())
        .map(|s| (s.crd)())
        .collect()
}
