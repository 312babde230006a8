//! Rollout logic shared by every workload, as pure functions of a snapshot: revisions, the in-place
//! update engine, update and scale-down ordering, Pod availability. (Int-or-percent arithmetic is
//! `kruise_api::intstr`.) Nothing here talks to the API server or awaits: every function takes a snapshot
//! (Pods, spec, `now`) and returns a decision; the controllers are thin loops around them.

pub mod advancedcronjob;
pub mod containerrecreaterequest;
pub mod ephemeraljob;
pub mod expectations;
pub mod features;
pub mod flags;
pub mod imagepulljob;
pub mod inplace;
pub mod launchpriority;
pub mod lifecycle;
pub mod nodefit;
pub mod ownership;
pub mod persistentpodstate;
pub mod podprobemarker;
pub mod pods;
pub mod podunavailablebudget;
pub mod predownload;
pub mod ratelimit;
pub mod resourcedistribution;
pub mod revision;
pub mod rollout;
pub mod sidecarset;
pub mod sidecarterminator;
pub mod workloadspread;

/// A JSON pointer (RFC 6901) to `path`: each token escaped (`~` → `~0`, `/` → `~1`), so that a label
/// or annotation key such as `policy.kruise.io/guarded` is one token.
pub fn json_pointer<T: AsRef<str>>(path: &[T]) -> String {
    path.iter()
        .map(|t| format!("/{}", t.as_ref().replace('~', "~0").replace('/', "~1")))
        .collect()
}
