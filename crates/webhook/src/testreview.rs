//! Test-only AdmissionReviews as the apiserver sends them, for the handlers' unit tests: one builder
//! instead of a JSON template per handler.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use crate::admission::Answer;

/// An AdmissionReview for one resource: `Review::of("apps.kruise.io", "v1beta1", "BroadcastJob",
/// "broadcastjobs").operation("CREATE").object(job).build()`.
pub struct Review {
    request: Value,
}

impl Review {
    pub fn of(group: &str, version: &str, kind: &str, resource: &str) -> Self {
        Self {
            request: json!({
                "uid": "uid-1",
                "kind": {"group": group, "version": version, "kind": kind},
                "resource": {"group": group, "version": version, "resource": resource},
                "operation": "CREATE",
                "userInfo": {"username": "test"},
                "name": "",
                "dryRun": false
            }),
        }
    }

    /// A Pod review (core/v1 pods).
    pub fn pod() -> Self {
        Self::of("", "v1", "Pod", "pods")
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.request[key] = value;
        self
    }

    pub fn uid(self, uid: &str) -> Self {
        self.set("uid", json!(uid))
    }

    pub fn operation(self, operation: &str) -> Self {
        self.set("operation", json!(operation))
    }

    pub fn name(self, name: &str) -> Self {
        self.set("name", json!(name))
    }

    pub fn namespace(self, namespace: &str) -> Self {
        self.set("namespace", json!(namespace))
    }

    /// A subresource of a resource of another group (`pods/eviction` for a policy/v1 Eviction).
    pub fn sub_resource(self, group: &str, version: &str, resource: &str, sub: &str) -> Self {
        self.set(
            "resource",
            json!({"group": group, "version": version, "resource": resource}),
        )
        .set("subResource", json!(sub))
    }

    /// The request's object; its `metadata.name` becomes the request's name when it has one.
    pub fn object(self, object: Value) -> Self {
        let named = match object.pointer("/metadata/name") {
            Some(name) => self.set("name", name.clone()),
            None => self,
        };
        named.set("object", object)
    }

    pub fn old(self, old: Option<Value>) -> Self {
        match old {
            Some(old) => self.set("oldObject", old),
            None => self,
        }
    }

    /// The review as the apiserver posts it (JSON).
    pub fn json(self) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": self.request,
        })
    }

    pub fn build(self) -> AdmissionReview<DynamicObject> {
        serde_json::from_value(self.json()).expect("the test review decodes")
    }
}

/// The answer's response (every handler answers a request it decoded with one).
pub fn response(answer: &Answer) -> &AdmissionResponse {
    answer
        .review
        .response
        .as_ref()
        .expect("the answer has a response")
}

/// Whether the answer allows, and its message and code: what a test of a refusal asserts.
pub fn outcome(answer: &Answer) -> (bool, String, u16) {
    let response = response(answer);
    (
        answer.allowed,
        response.result.message.clone(),
        response.result.code,
    )
}

/// An empty store whose first list is done (ready), and its writer.
pub fn listed_store<K>() -> (Store<K>, Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitDone);
    (store, writer)
}
