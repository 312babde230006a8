//! The connection: kubeconfig, context and namespace as kubectl picks them, and the reads and patches
//! every command uses, with kubectl's error wording.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::target::{Kind, Target};

/// The field manager of every write, as kubectl plugins name theirs.
pub const FIELD_MANAGER: &str = "kubectl-kruise";

/// Connection flags shared by every command (kubectl's names).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Flags {
    /// Namespace of the workload (default: the context's namespace, else "default").
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
}

/// A client and the namespace commands act in.
#[derive(Clone)]
pub struct Ctx {
    pub client: Client,
    pub namespace: String,
}

impl Ctx {
    pub async fn connect(flags: &Flags) -> anyhow::Result<Self> {
        let options = KubeConfigOptions {
            context: flags.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match &flags.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("loading kubeconfig {}", path.display()))?
            }
            None if flags.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .context("loading kubeconfig")?,
            None => Config::infer()
                .await
                .context("no kubeconfig found (set --kubeconfig or KUBECONFIG)")?,
        };
        let namespace = flags
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("building the API client")?;
        Ok(Self { client, namespace })
    }

    pub fn api(&self, kind: Kind) -> Api<DynamicObject> {
        self.api_of(kind, &kind.api_resource())
    }

    /// The workload's API in the version its revisions hold the template in
    /// ([`Kind::revision_api_resource`]).
    pub fn revision_api(&self, kind: Kind) -> Api<DynamicObject> {
        self.api_of(kind, &kind.revision_api_resource())
    }

    fn api_of(&self, kind: Kind, ar: &ApiResource) -> Api<DynamicObject> {
        if kind.namespaced() {
            Api::namespaced_with(self.client.clone(), &self.namespace, ar)
        } else {
            Api::all_with(self.client.clone(), ar)
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The workload as JSON.
    pub async fn get(&self, target: &Target) -> anyhow::Result<Value> {
        let object = self
            .api(target.kind)
            .get(&target.name)
            .await
            .map_err(|e| api_error(e, target))?;
        serde_json::to_value(object).context("encoding the object")
    }

    /// A JSON merge patch of the workload.
    pub async fn merge_patch(&self, target: &Target, patch: &Value) -> anyhow::Result<Value> {
        let object = self
            .api(target.kind)
            .patch(&target.name, &params(), &Patch::Merge(patch))
            .await
            .map_err(|e| api_error(e, target))?;
        serde_json::to_value(object).context("encoding the object")
    }

    /// A JSON patch of the workload (for `test` preconditions and array edits).
    pub async fn json_patch(
        &self,
        target: &Target,
        patch: json_patch::Patch,
    ) -> anyhow::Result<()> {
        self.api(target.kind)
            .patch(&target.name, &params(), &Patch::<()>::Json(patch))
            .await
            .map_err(|e| api_error(e, target))?;
        Ok(())
    }
}

/// The parameters of every write.
pub fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// The plain error kubectl prints: `clonesets.apps.kruise.io "web" not found`, or the server's
/// message for a denied request.
pub fn api_error(error: kube::Error, target: &Target) -> anyhow::Error {
    match &error {
        kube::Error::Api(status) if status.code == 404 => {
            let ar = target.kind.api_resource();
            let resource = if ar.group.is_empty() {
                ar.plural
            } else {
                format!("{}.{}", ar.plural, ar.group)
            };
            anyhow!("{resource} {:?} not found", target.name)
        }
        kube::Error::Api(status) => anyhow!("{} ({})", status.message, status.reason),
        _ => anyhow!(error).context(format!(
            "talking to the API server about {}",
            target.label()
        )),
    }
}

/// `matchLabels` of `spec.selector` as a label selector string (`matchExpressions` too, for `In`,
/// `NotIn`, `Exists` and `DoesNotExist`).
pub fn selector_string(object: &Value) -> anyhow::Result<String> {
    let selector = object
        .pointer("/spec/selector")
        .context("the workload has no spec.selector")?;
    let mut terms: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    for expr in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match expr.get("operator").and_then(Value::as_str) {
            Some("In") => terms.push(format!("{key} in ({})", values.join(","))),
            Some("NotIn") => terms.push(format!("{key} notin ({})", values.join(","))),
            Some("Exists") => terms.push(key.to_owned()),
            Some("DoesNotExist") => terms.push(format!("!{key}")),
            other => anyhow::bail!("unsupported selector operator {other:?}"),
        }
    }
    if terms.is_empty() {
        anyhow::bail!("the workload's selector is empty");
    }
    Ok(terms.join(","))
}

/// Whether the Pod's controlling owner is the object with `uid`.
pub fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Polls `done` every 500 ms until it says yes; an error from it ends the wait at once.
pub async fn wait(
    what: &str,
    timeout: std::time::Duration,
    mut done: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    loop {
        if done().await? {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_errors_read_like_kubectl() {
        use kube::core::Status;
        let target = Target::parse("cloneset/web", None).expect("target");
        let cases = [
            (
                Status::failure("not found", "NotFound").with_code(404),
                Kind::CloneSet,
                "clonesets.apps.kruise.io \"web\" not found",
            ),
            (
                Status::failure("not found", "NotFound").with_code(404),
                Kind::Deployment,
                "deployments.apps \"web\" not found",
            ),
            (
                Status::failure(
                    "clonesets.apps.kruise.io \"web\" is forbidden: User \"dev\" cannot get resource",
                    "Forbidden",
                )
                .with_code(403),
                Kind::CloneSet,
                "clonesets.apps.kruise.io \"web\" is forbidden: User \"dev\" cannot get resource (Forbidden)",
            ),
        ];
        for (status, kind, want) in cases {
            let t = Target {
                kind,
                ..target.clone()
            };
            assert_eq!(
                api_error(kube::Error::Api(status.boxed()), &t).to_string(),
                want
            );
        }
    }

    #[test]
    fn selector_strings() {
        let cases = [
            (json!({"matchLabels": {"app": "web"}}), Ok("app=web")),
            (
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "canary", "operator": "DoesNotExist"}]}),
                Ok("app=web,tier in (a,b),!canary"),
            ),
            (json!({}), Err("empty")),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "Gt"}]}),
                Err("unsupported"),
            ),
        ];
        for (selector, want) in cases {
            let got = selector_string(&json!({"spec": {"selector": selector}}));
            match (got, want) {
                (Ok(s), Ok(w)) => assert_eq!(s, w),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{e}"),
                (got, want) => panic!("got {got:?}, want {want:?}"),
            }
        }
    }
}
