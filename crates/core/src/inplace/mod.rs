//! The in-place update engine's pure parts (upstream `pkg/util/inplaceupdate`): what can change in place ([`plan`]), the
//! state annotation ([`InPlaceUpdateState`]), the drain → grace → patch steps ([`next_step`]) and
//! the completion check ([`check_completed`]). The caller sends the patches and re-reads the Pod.

mod batches;
mod completion;
pub mod envmeta;
pub(crate) mod flow;
mod plan;
mod state;

pub use batches::{
    ANNOTATION_CONTAINER_LAUNCH_PRIORITY, ENV_CONTAINER_BARRIER, ENV_CONTAINER_PRIORITY,
    container_priorities, first_batch,
};
pub use completion::{Completion, WaitReason, check_completed, next_batch_due, with_default_tag};
pub use flow::{
    Finish, FlowError, REASON_READINESS_GATES_NOT_READY, REASON_START_IN_PLACE_UPDATE, Step,
    Target, condition_patch, drained_for_update, finish_patch, has_readiness_gate,
    next_batch_patch, next_step,
};
pub use plan::{
    ANNOTATION_RESTARTED_AT, InPlacePlan, NotInPlace, Plan, PlanOptions, QosClass, ResourceChange,
    plan, qos_class,
};
pub use state::{
    InPlaceUpdateContainerBatch, InPlaceUpdateContainerStatus, InPlaceUpdatePreCheckBeforeNext,
    InPlaceUpdateState, has_grace_annotation, read_state, state_annotation,
};

#[cfg(test)]
mod tests;
