//! Types and helpers every kind's planner shares.

use std::fmt;

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// A revision (a ControllerRevision's name) and the Pod template it records.
#[derive(Clone, Copy, Debug)]
pub struct Revision<'a> {
    pub name: &'a str,
    pub template: &'a PodTemplateSpec,
}

/// A rollout setting that cannot be turned into a number. Upstream logs it and carries on with 0,
/// which for a partition means "update everything"; we refuse to plan instead, so a bad value can
/// never roll a whole set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSetting {
    /// The field path, e.g. `spec.updateStrategy.rollingUpdate.partition`.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for InvalidSetting {}

/// Kubernetes' cap on one slow-start batch.
pub const MAX_BATCH_SIZE: usize = 500;

/// Kubernetes' slow-start batch sizes for `n` independent calls: 1, 2, 4, … capped at
/// [`MAX_BATCH_SIZE`]; the caller stops at the first batch with a failure.
pub fn slow_start_batches(n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut remaining, mut size) = (n, 1usize);
    while remaining > 0 {
        let batch = size.min(remaining);
        out.push(batch);
        remaining -= batch;
        size = (size * 2).min(MAX_BATCH_SIZE);
    }
    out
}
