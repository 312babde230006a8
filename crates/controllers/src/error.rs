//! The error of a reconcile, shared by every controller.

/// Errors of one reconcile; the controller retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Kube {
        context: String,
        #[source]
        source: kube::Error,
    },
    /// Something the controller cannot act on (a bad setting, an object it cannot read); the
    /// message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The reconcile's task ended without an answer (it panicked); the controller retries.
    #[error("the reconcile's task failed: {0}")]
    Task(String),
}

/// Adds what was being done to an API error.
pub trait KubeContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> KubeContext<T> for Result<T, kube::Error> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Kube {
            context: context(),
            source,
        })
    }
}

/// Whether an API error means "the object changed or is gone under us" (not found, conflict, or a
/// failed JSON-patch test): decide again on a fresh snapshot instead of failing the reconcile.
pub fn is_race(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 404 | 409 | 422))
}
