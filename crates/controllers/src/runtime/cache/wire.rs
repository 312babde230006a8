//! A Pod as the apiserver sends it, read without its managed fields.
//!
//! Every Pod the manager reads from the apiserver (each watch event, each write's answer) carries
//! `metadata.managedFields`: one entry per field manager (kubelet, scheduler, webhook, the
//! manager itself), each a tree of every field it set. No controller reads them, and the cache's
//! projection drops them, but decoding them into `ManagedFieldsEntry` (a `serde_json::Value` per
//! tree) and freeing them again was about 5% of the manager's CPU in a rollout (perf, `fleet-scale`).
//! [`WirePod`] decodes the metadata through a struct that names every other field and lets serde
//! skip that one without building it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// A Pod whose `metadata.managedFields` were skipped when it was decoded (always `None`).
#[derive(Clone, Debug, Default)]
pub struct WirePod(pub Pod);

impl WirePod {
    pub fn into_pod(self) -> Pod {
        self.0
    }
}

/// The metadata of a Pod, every field but `managedFields` (left out, so serde skips it).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Metadata {
    name: Option<String>,
    generate_name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    finalizers: Option<Vec<String>>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    self_link: Option<String>,
}

impl From<Metadata> for ObjectMeta {
    fn from(m: Metadata) -> Self {
        ObjectMeta {
            name: m.name,
            generate_name: m.generate_name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            labels: m.labels,
            annotations: m.annotations,
            finalizers: m.finalizers,
            owner_references: m.owner_references,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            self_link: m.self_link,
            managed_fields: None,
        }
    }
}

/// The Pod object; `apiVersion` and `kind` are skipped like any unknown field.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: Metadata,
    #[serde(default)]
    spec: Option<PodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

impl<'de> Deserialize<'de> for WirePod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        Ok(WirePod(Pod {
            metadata: wire.metadata.into(),
            spec: wire.spec,
            status: wire.status,
        }))
    }
}

impl kube::Resource for WirePod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn served() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-abcde",
                "generateName": "web-",
                "namespace": "default",
                "uid": "0badc0de-0000-4000-8000-000000000001",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "deletionTimestamp": "2026-01-01T00:05:00Z",
                "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web", "apps.kruise.io/cloneset-instance-id": "abcde"},
                "annotations": {"apps.kruise.io/inplace-update-state": "{\"revision\":\"web-1\"}"},
                "finalizers": ["example.com/hold"],
                "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
                    "name": "web", "uid": "0badc0de-0000-4000-8000-000000000000",
                    "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-01-01T00:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}}}]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "nginx:1.19.1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:02Z"}]}
        })
    }

    #[test]
    fn reads_the_pod_but_its_managed_fields() {
        let full: Pod = serde_json::from_value(served()).expect("a served Pod");
        let wire: WirePod = serde_json::from_value(served()).expect("a served Pod");
        assert!(full.metadata.managed_fields.is_some());
        let mut expected = full;
        expected.metadata.managed_fields = None;
        assert_eq!(wire.into_pod(), expected);
    }

    #[test]
    fn a_pod_with_no_metadata_or_spec_reads_as_empty() {
        let wire: WirePod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod"}))
            .expect("an empty Pod");
        assert_eq!(wire.into_pod(), Pod::default());
    }

    #[test]
    fn it_is_the_pods_resource() {
        use kube::Resource;
        assert_eq!(WirePod::kind(&()), Pod::kind(&()));
        assert_eq!(WirePod::api_version(&()), Pod::api_version(&()));
        assert_eq!(WirePod::plural(&()), Pod::plural(&()));
        assert_eq!(
            WirePod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
    }
}
