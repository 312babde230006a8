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

impl Error {
    /// Whether the reconcile failed only because the state it decided on moved under it (see
    /// [`is_race`]): it is decided again on a fresh view, soon, and it is no failure.
    pub fn is_race(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if is_race(source))
    }

    /// Whether a write of the reconcile was refused by the leader fence ([`Fenced`]): this replica
    /// is not sure to lead at the moment (a frozen process resumed, a renewal late). No failure of
    /// the reconcile: it is tried again once the lease is renewed, or its term ends.
    pub fn is_fenced(&self) -> bool {
        let Error::Kube { source, .. } = self else {
            return false;
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
        while let Some(error) = cause {
            if error.is::<Fenced>() {
                return true;
            }
            cause = error.source();
        }
        false
    }
}

/// The error of a write the leader's client refused because its lease is not certainly its own
/// (the manager's leader fence sends it; the driver tells it apart from a failure).
#[derive(Debug, thiserror::Error)]
#[error("not the leader (or no longer sure to be): {method} {path} refused by the leader fence")]
pub struct Fenced {
    pub method: http::Method,
    pub path: String,
}

/// Whether an API error means "the object changed or is gone under us": not found, a conflict on
/// a resourceVersion precondition, or a JSON patch that no longer applies (a failed `test`, a path
/// that is gone). Decide again on a fresh snapshot instead of failing the reconcile. A 422 that is
/// a validation error of the object written is no race: it fails the reconcile.
pub fn is_race(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => match status.code {
            404 | 409 => true,
            422 => is_unapplied_patch(status),
            _ => false,
        },
        _ => false,
    }
}

/// Whether a create was refused because an object of its name exists (409 `AlreadyExists`): a
/// cache that has not shown it yet, most often.
pub fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}

/// The apiserver answers a JSON patch that does not apply to the object as it now is with a 422
/// "the server rejected our request due to an error in our request" that names no field (v1.34
/// sends no cause; older apiservers one `UnexpectedServerResponse` cause with the patch library's
/// message, `testing value /metadata/resourceVersion failed: test failed`). A validation error of
/// the object written names the fields it refuses (`FieldValueInvalid`, `FieldValueForbidden`, …).
fn is_unapplied_patch(status: &kube::core::Status) -> bool {
    status
        .details
        .as_ref()
        .is_none_or(|details| details.causes.iter().all(|cause| cause.field.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API error as the apiserver sends it.
    /// `causes` are (reason, field).
    fn api(code: u16, reason: &str, message: &str, causes: &[(&str, &str)]) -> kube::Error {
        let causes: Vec<_> = causes
            .iter()
            .map(|(reason, field)| serde_json::json!({"reason": reason, "field": field}))
            .collect();
        let status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
            "details": {"causes": causes},
        }))
        .expect("a Status");
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn a_moved_state_is_a_race_and_a_bad_write_is_not() {
        let unapplied = "the server rejected our request due to an error in our request";
        // (error, race), as the apiserver answers.
        let cases = [
            (api(404, "NotFound", r#"pods "a" not found"#, &[]), true),
            (
                api(409, "Conflict", "the object has been modified", &[]),
                true,
            ),
            // A failed `test` or a path gone, as v1.34 answers (no cause) and as older
            // apiservers did.
            (api(422, "Invalid", unapplied, &[]), true),
            (
                api(
                    422,
                    "Invalid",
                    unapplied,
                    &[("UnexpectedServerResponse", "")],
                ),
                true,
            ),
            (
                api(
                    422,
                    "Invalid",
                    r#"Pod "a" is invalid: spec: Forbidden: pod updates may not change fields"#,
                    &[("FieldValueForbidden", "spec")],
                ),
                false,
            ),
            (api(500, "InternalError", "etcd", &[]), false),
            (kube::Error::LinesCodecMaxLineLengthExceeded, false),
        ];
        for (error, race) in cases {
            assert_eq!(is_race(&error), race, "{error}");
            let error = Error::Kube {
                context: "patching".into(),
                source: error,
            };
            assert_eq!(error.is_race(), race, "{error}");
        }
        assert!(!Error::Invalid("bad".into()).is_race());
    }

    /// A write the leader fence refused is told apart from a failure and from a race, however deep
    /// in the client's error it sits.
    #[test]
    fn a_write_the_fence_refused_is_no_failure() {
        let fenced = || Fenced {
            method: http::Method::PATCH,
            path: "/api/v1/namespaces/ns/pods/p".into(),
        };
        let refused = Error::Kube {
            context: "patching Pod ns/p".into(),
            source: kube::Error::Service(Box::new(fenced())),
        };
        assert!(refused.is_fenced());
        assert!(!refused.is_race());
        let failed = Error::Kube {
            context: "patching Pod ns/p".into(),
            source: api(500, "InternalError", "etcd is down", &[]),
        };
        assert!(!failed.is_fenced());
        assert!(!Error::Invalid("spec.replicas: must be positive".into()).is_fenced());
    }
}
