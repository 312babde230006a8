//! Advanced StatefulSet, apps.kruise.io/v1alpha1: the native fields plus the Kruise update strategy; no
//! reserveOrdinals, lifecycle, scaleStrategy, PVC retention, ordinals or volumeClaimUpdateStrategy, and no
//! updated-ready/available counts or volume claim status.

use k8s_openapi::api::apps::v1::StatefulSetCondition;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{
    RollingUpdateStatefulSetStrategy, StatefulSetUpdateStrategy, UnorderedUpdateStrategy,
};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

stateful_set_resource!("v1alpha1", {}, {});

stateful_set_status!({}, {});
