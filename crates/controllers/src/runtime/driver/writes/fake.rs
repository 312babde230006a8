//! An in-memory cluster for unit tests of act steps: [`FakeCluster`] implements [`Writes`] and
//! [`LiveReads`] over a map of JSON objects and answers as the apiserver does where a controller's
//! correctness depends on it:
//! - every change bumps the object's resourceVersion (a no-op patch does not); a change outside
//!   `metadata` and `status` bumps its generation;
//! - a merge or strategic patch carrying `metadata.resourceVersion` (or `metadata.uid`) is refused
//!   with 409 when the object moved (or is another object of the name); a JSON patch whose `test` fails (or whose path is gone) with 422 and no cause;
//! - a patch of the object leaves its status alone, a patch of the status only changes the status;
//! - a delete with a uid or resourceVersion precondition that does not hold is refused with 409;
//!   an object with finalizers is marked deleted (`deletionTimestamp`) and goes when its last
//!   finalizer is removed;
//! - a missing object answers 404, a create over an existing name 409 `AlreadyExists`;
//! - any verb can be made to fail once with a chosen code ([`FakeCluster::fail_next`]), e.g. a 422
//!   validation error naming a field.
//!
//! Strategic merge patches are applied as JSON merge patches except that lists of objects keyed
//! by `name` (containers, their statuses) or `type` (conditions) are merged by that key, which is
//! what the controllers' strategic patches rely on; `$patch` directives are not modelled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use super::api_error;
use super::{Answer, At, LiveReads, Part, Writes, already_exists, not_found};

/// A write the fake answered (or refused), in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub verb: Verb,
    /// The resource's kind (`Pod`, `ContainerRecreateRequest`).
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// What was sent: the object created, the patch, the delete's preconditions.
    pub body: Value,
    /// The code of the refusal, `None` when the write was done.
    pub refused: Option<u16>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Patch,
    PatchStatus,
    PatchEphemeralContainers,
    PatchResize,
    Delete,
    Evict,
}

type Key = (String, String, String);

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    version: u64,
    faults: Vec<(Verb, String, u16)>,
    records: Vec<Record>,
}

/// The in-memory cluster. See the module's documentation for what it models.
#[derive(Default)]
pub struct FakeCluster {
    state: Mutex<State>,
}

fn key(at: &At, name: &str) -> Key {
    (
        format!("{}/{}", at.resource.group, at.resource.plural),
        at.namespace.clone().unwrap_or_default(),
        name.to_owned(),
    )
}

/// A cache (reflector store) holding `objects`, listed: what a kind's context reads in a unit
/// test beside the [`FakeCluster`] it writes to.
pub fn listed<K>(objects: Vec<K>) -> kube::runtime::reflector::Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use kube::runtime::watcher::Event;
    let (store, mut writer) = kube::runtime::reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    store
}

fn conflict(at: &At, name: &str) -> kube::Error {
    api_error(
        409,
        &format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
             please apply your changes to the latest version and try again",
            at.resource.plural
        ),
        None,
    )
}

/// The apiserver's answer to a JSON patch that does not apply: 422, no cause.
fn unapplied() -> kube::Error {
    api_error(
        422,
        "the server rejected our request due to an error in our request",
        None,
    )
}

fn resource_version(object: &Value) -> Option<&str> {
    object.pointer("/metadata/resourceVersion")?.as_str()
}

/// `object` without `metadata` and `status`: what a generation counts changes of.
fn spec_part(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    object
}

/// The key lists of objects are merged by in a strategic merge patch.
fn merge_key(items: &[Value]) -> Option<&'static str> {
    ["name", "type"]
        .into_iter()
        .find(|k| !items.is_empty() && items.iter().all(|i| i.get(k).is_some()))
}

fn strategic_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (k, v) in patch {
                if v.is_null() {
                    target.remove(k);
                } else if let Some(existing) = target.get_mut(k) {
                    strategic_merge(existing, v);
                } else {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        (Value::Array(target), Value::Array(patch)) => match merge_key(patch) {
            Some(by) => {
                for item in patch {
                    match target.iter_mut().find(|t| t.get(by) == item.get(by)) {
                        Some(existing) => strategic_merge(existing, item),
                        None => target.push(item.clone()),
                    }
                }
            }
            None => *target = patch.clone(),
        },
        (target, patch) => *target = patch.clone(),
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl State {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn fault(&mut self, verb: Verb, name: &str) -> Option<u16> {
        let at = self
            .faults
            .iter()
            .position(|(v, n, _)| *v == verb && (n.is_empty() || n == name))?;
        Some(self.faults.remove(at).2)
    }

    fn record(&mut self, verb: Verb, at: &At, name: &str, body: Value, refused: Option<u16>) {
        self.records.push(Record {
            verb,
            kind: at.resource.kind.clone(),
            namespace: at.namespace.clone().unwrap_or_default(),
            name: name.to_owned(),
            body,
            refused,
        });
    }

    /// Runs one verb: an injected fault first, then `apply`; records what happened.
    fn run<T>(
        &mut self,
        verb: Verb,
        at: &At,
        name: &str,
        body: Value,
        apply: impl FnOnce(&mut Self) -> Result<T, kube::Error>,
    ) -> Result<T, kube::Error> {
        let result = match self.fault(verb, name) {
            Some(code) => Err(match code {
                404 => not_found(at, name),
                409 => conflict(at, name),
                422 => api_error(422, "injected: the object is invalid", Some("spec")),
                code => api_error(code, "injected failure", None),
            }),
            None => apply(self),
        };
        let refused = match &result {
            Err(kube::Error::Api(status)) => Some(status.code),
            Err(_) => Some(0),
            Ok(_) => None,
        };
        self.record(verb, at, name, body, refused);
        result
    }

    fn create(&mut self, at: &At, mut object: Value) -> Result<Value, kube::Error> {
        let name = match object.pointer("/metadata/name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => {
                let prefix = object
                    .pointer("/metadata/generateName")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                format!("{prefix}{:05}", self.version + 1)
            }
        };
        let key = key(at, &name);
        if self.objects.contains_key(&key) {
            return Err(already_exists(at, &name));
        }
        let version = self.next_version();
        let metadata = &mut object["metadata"];
        metadata["name"] = json!(name);
        if let Some(namespace) = &at.namespace {
            metadata["namespace"] = json!(namespace);
        }
        metadata["uid"] = json!(format!("uid-{version}"));
        metadata["resourceVersion"] = json!(version);
        metadata["creationTimestamp"] = json!(now());
        if metadata.get("generation").is_none() {
            metadata["generation"] = json!(1);
        }
        self.objects.insert(key, object.clone());
        Ok(object)
    }

    fn patch(
        &mut self,
        at: &At,
        name: &str,
        part: Part,
        patch: &Patch<Value>,
    ) -> Result<Value, kube::Error> {
        let key = key(at, name);
        let stored = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(at, name))?;
        let mut patched = stored.clone();
        match patch {
            Patch::Merge(p) | Patch::Strategic(p) => {
                if let Some(wanted) = resource_version(p)
                    && Some(wanted) != resource_version(&stored)
                {
                    return Err(conflict(at, name));
                }
                // A uid in a patch is a precondition too (an object re-created under the name).
                let uid = |o: &Value| {
                    o.pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                if let Some(wanted) = uid(p)
                    && Some(wanted) != uid(&stored)
                {
                    return Err(conflict(at, name));
                }
                match patch {
                    Patch::Merge(_) => json_patch::merge(&mut patched, p),
                    _ => strategic_merge(&mut patched, p),
                }
            }
            Patch::Json(p) => json_patch::patch(&mut patched, p).map_err(|_| unapplied())?,
            _ => {
                return Err(api_error(
                    415,
                    "the fake cluster models merge, strategic and JSON patches only",
                    None,
                ));
            }
        }
        let mut result = stored.clone();
        match part {
            Part::Object => {
                let status = stored.get("status").cloned();
                result = patched;
                match status {
                    Some(status) => result["status"] = status,
                    None => {
                        if let Some(map) = result.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            // A Pod's status subresource also takes labels, annotations and finalizers (the
            // apiserver resets only its spec, owner references and deletion timestamp there).
            Part::Status if is_pod(at) => {
                result = patched;
                result["spec"] = stored.get("spec").cloned().unwrap_or(Value::Null);
                for field in ["ownerReferences", "deletionTimestamp"] {
                    match stored["metadata"].get(field) {
                        Some(value) => result["metadata"][field] = value.clone(),
                        None => {
                            if let Some(map) = result["metadata"].as_object_mut() {
                                map.remove(field);
                            }
                        }
                    }
                }
            }
            Part::Status => match patched.get("status") {
                Some(status) => result["status"] = status.clone(),
                None => {
                    if let Some(map) = result.as_object_mut() {
                        map.remove("status");
                    }
                }
            },
            Part::EphemeralContainers => {
                let added = patched.pointer("/spec/ephemeralContainers").cloned();
                result["spec"]["ephemeralContainers"] = added.unwrap_or(Value::Null);
            }
            Part::Resize => {
                let count = |o: &Value| {
                    o.pointer("/spec/containers")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len)
                };
                if count(&patched) != count(&stored) {
                    return Err(api_error(
                        422,
                        "a resize changes only the containers' resources",
                        Some("spec.containers"),
                    ));
                }
                for i in 0..count(&stored) {
                    let resources = patched["spec"]["containers"][i].get("resources").cloned();
                    result["spec"]["containers"][i]["resources"] = resources.unwrap_or(Value::Null);
                }
            }
        }
        if part == Part::Object && is_pod(at) {
            pod_update_allowed(&stored, &result)?;
        }
        // Identity and version are the server's.
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            match stored["metadata"].get(field) {
                Some(value) => result["metadata"][field] = value.clone(),
                None => {
                    if let Some(map) = result["metadata"].as_object_mut() {
                        map.remove(field);
                    }
                }
            }
        }
        result["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
        if result == stored {
            return Ok(stored);
        }
        if spec_part(&result) != spec_part(&stored) {
            let generation = stored
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            result["metadata"]["generation"] = json!(generation + 1);
        }
        result["metadata"]["resourceVersion"] = json!(self.next_version());
        let finalized = result
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if finalized && result.pointer("/metadata/deletionTimestamp").is_some() {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key, result.clone());
        }
        Ok(result)
    }

    fn delete(&mut self, at: &At, name: &str, params: &DeleteParams) -> Result<(), kube::Error> {
        let key = key(at, name);
        let stored = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(at, name))?;
        if let Some(preconditions) = &params.preconditions {
            let uid = stored.pointer("/metadata/uid").and_then(Value::as_str);
            let uid_holds = preconditions.uid.as_deref().is_none_or(|u| Some(u) == uid);
            let version_holds = preconditions
                .resource_version
                .as_deref()
                .is_none_or(|v| Some(v) == resource_version(&stored));
            if !uid_holds || !version_holds {
                return Err(conflict(at, name));
            }
        }
        self.remove(key, stored);
        Ok(())
    }

    /// Deletes the object at `key`: gone at once, or marked deleted while it has finalizers.
    fn remove(&mut self, key: Key, mut stored: Value) {
        let finalizers = stored
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !finalizers {
            self.objects.remove(&key);
            return;
        }
        if stored.pointer("/metadata/deletionTimestamp").is_none() {
            stored["metadata"]["deletionTimestamp"] = json!(now());
            stored["metadata"]["resourceVersion"] = json!(self.next_version());
        }
        self.objects.insert(key, stored);
    }
}

/// A Ready Node `name` with room for Pods (4 cpu, 8Gi, 110 Pods), labelled with its hostname
/// and `labels`: a node every Pod of a per-node kind fits on.
pub fn ready_node(name: &str, labels: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let labels = [("kubernetes.io/hostname", name)]
        .iter()
        .chain(labels)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let allocatable = [("cpu", "4"), ("memory", "8Gi"), ("pods", "110")]
        .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
        .into();
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..Default::default()
            }]),
            allocatable: Some(allocatable),
            ..Default::default()
        }),
    }
}

impl FakeCluster {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked holding the lock has failed already; its state is still readable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores `object` as the cluster's copy (a resourceVersion is given when it has none) and
    /// answers it as stored: what the caches of the code under test should hold.
    pub fn insert<K>(&self, object: &K) -> K
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone,
    {
        let at = At::of::<K>(object.namespace().as_deref());
        let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
        let mut state = self.state();
        if resource_version(&value).is_none() {
            value["metadata"]["resourceVersion"] = json!(state.next_version());
        }
        state
            .objects
            .insert(key(&at, &object.name_any()), value.clone());
        serde_json::from_value(value).unwrap_or_else(|_| object.clone())
    }

    /// The cluster's copy of `K` `namespace/name`.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let at = At::of::<K>(namespace);
        let value = self.state().objects.get(&key(&at, name)).cloned()?;
        serde_json::from_value(value).ok()
    }

    /// Every object of `K` in `namespace` (every namespace when `None`), by name.
    pub fn all<K>(&self, namespace: Option<&str>) -> Vec<K>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (resource, _, _) = key(&At::of::<K>(None), "");
        self.state()
            .objects
            .iter()
            .filter(|((r, ns, _), _)| *r == resource && namespace.is_none_or(|n| n == ns))
            .filter_map(|(_, object)| serde_json::from_value(object.clone()).ok())
            .collect()
    }

    /// Another writer changes `K` `namespace/name` (its resourceVersion moves on), as a client
    /// racing the code under test would.
    pub fn touch<K: Resource<DynamicType = ()>>(&self, namespace: Option<&str>, name: &str) {
        let at = At::of::<K>(namespace);
        let mut state = self.state();
        let version = state.next_version();
        if let Some(object) = state.objects.get_mut(&key(&at, name)) {
            object["metadata"]["resourceVersion"] = json!(version);
        }
    }

    /// Removes `K` `namespace/name` from the cluster, as another client's delete would.
    pub fn forget<K: Resource<DynamicType = ()>>(&self, namespace: Option<&str>, name: &str) {
        let at = At::of::<K>(namespace);
        self.state().objects.remove(&key(&at, name));
    }

    /// The next `verb` on `name` (any name when empty) is refused with `code`: 404, 409, 422 (a
    /// validation error naming `spec`), or any other.
    pub fn fail_next(&self, verb: Verb, name: &str, code: u16) {
        self.state().faults.push((verb, name.to_owned(), code));
    }

    /// Every write sent so far, refused ones included, in order.
    pub fn records(&self) -> Vec<Record> {
        self.state().records.clone()
    }

    /// The nodes the Pods in `namespace` are bound to (`spec.nodeName`, or the node their
    /// required affinity names: [`kruise_core::nodefit::bound_node`]), sorted: what a test of a
    /// kind that places a Pod per node reads back.
    pub fn pod_nodes(&self, namespace: &str) -> Vec<String> {
        let mut nodes: Vec<String> = self
            .all::<k8s_openapi::api::core::v1::Pod>(Some(namespace))
            .iter()
            .filter_map(|pod| pod.spec.as_ref())
            .filter_map(kruise_core::nodefit::bound_node)
            .map(str::to_owned)
            .collect();
        nodes.sort();
        nodes
    }

    /// The writes done (not refused), as `(verb, name)`.
    pub fn done(&self) -> Vec<(Verb, String)> {
        self.records()
            .into_iter()
            .filter(|r| r.refused.is_none())
            .map(|r| (r.verb, r.name))
            .collect()
    }
}

impl Writes for FakeCluster {
    fn create<'a>(
        &'a self,
        at: &'a At,
        object: Value,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>> {
        // The name asked for: a `generateName` prefix when the server is to name it (what a
        // record shows, and what `fail_next` matches).
        let asked = |field: &str| {
            object
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
        };
        let name = asked("name")
            .or_else(|| asked("generateName"))
            .unwrap_or_default();
        let result = self
            .state()
            .run(Verb::Create, at, &name, object.clone(), |s| {
                s.create(at, object)
            })
            .map(|created| created.to_string());
        Box::pin(async move { result })
    }

    fn patch<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        part: Part,
        patch: Patch<Value>,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>> {
        let verb = match part {
            Part::Object => Verb::Patch,
            Part::Status => Verb::PatchStatus,
            Part::EphemeralContainers => Verb::PatchEphemeralContainers,
            Part::Resize => Verb::PatchResize,
        };
        let body = match &patch {
            Patch::Merge(p) | Patch::Strategic(p) | Patch::Apply(p) => p.clone(),
            Patch::Json(p) => serde_json::to_value(p).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        let result = self
            .state()
            .run(verb, at, name, body, |s| s.patch(at, name, part, &patch))
            .map(|patched| patched.to_string());
        Box::pin(async move { result })
    }

    fn delete<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        params: DeleteParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        let body = serde_json::to_value(&params.preconditions).unwrap_or(Value::Null);
        let result = self.state().run(Verb::Delete, at, name, body, |s| {
            s.delete(at, name, &params)
        });
        Box::pin(async move { result })
    }

    fn evict<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        _params: EvictParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        let at = At::of::<k8s_openapi::api::core::v1::Pod>(Some(namespace));
        let result = self.state().run(Verb::Evict, &at, name, Value::Null, |s| {
            let key = key(&at, name);
            let stored = s
                .objects
                .get(&key)
                .cloned()
                .ok_or_else(|| not_found(&at, name))?;
            s.remove(key, stored);
            Ok(())
        });
        Box::pin(async move { result })
    }
}

fn is_pod(at: &At) -> bool {
    at.resource.kind == "Pod" && at.resource.group.is_empty()
}

/// The apiserver's rule for an update of a Pod: its spec may change only in its containers' images,
/// `activeDeadlineSeconds`, added tolerations and removed scheduling gates (422 otherwise).
fn pod_update_allowed(stored: &Value, updated: &Value) -> Result<(), kube::Error> {
    let mutable_removed = |pod: &Value| {
        let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(containers)) = spec.get_mut(list) {
                for container in containers {
                    if let Some(map) = container.as_object_mut() {
                        map.remove("image");
                    }
                }
            }
        }
        if let Some(map) = spec.as_object_mut() {
            for field in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
                map.remove(field);
            }
        }
        spec
    };
    if mutable_removed(stored) == mutable_removed(updated) {
        return Ok(());
    }
    Err(api_error(
        422,
        "Pod updates may not change fields other than `spec.containers[*].image`, \
         `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` \
         (only additions to existing tolerations) or `spec.schedulingGates`",
        Some("spec"),
    ))
}

/// What a list's selectors ask for, as (JSON pointer, value) pairs: the fake models equality
/// only (`metadata.name=x` fields, `k=v` labels); anything else is refused so a test notices.
fn selection(params: &ListParams) -> Result<Vec<(String, Value)>, kube::Error> {
    let mut wanted = Vec::new();
    let terms = |selector: &Option<String>| -> Vec<String> {
        selector
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    };
    for term in terms(&params.field_selector) {
        match term.split_once('=') {
            Some(("metadata.name", name)) => wanted.push(("/metadata/name".into(), json!(name))),
            Some(("metadata.namespace", ns)) => {
                wanted.push(("/metadata/namespace".into(), json!(ns)));
            }
            _ => {
                return Err(api_error(
                    400,
                    &format!("field selector {term:?} not modelled"),
                    None,
                ));
            }
        }
    }
    for term in terms(&params.label_selector) {
        match term.split_once('=') {
            Some((k, v)) if !k.ends_with('!') && !v.starts_with('=') => {
                let path = format!(
                    "/metadata/labels/{}",
                    k.replace('~', "~0").replace('/', "~1")
                );
                wanted.push((path, json!(v)));
            }
            _ => {
                return Err(api_error(
                    400,
                    &format!("label selector {term:?} not modelled"),
                    None,
                ));
            }
        }
    }
    Ok(wanted)
}

impl LiveReads for FakeCluster {
    fn get<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        let found = self.state().objects.get(&key(at, name)).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn select<'a>(
        &'a self,
        at: &'a At,
        params: &'a ListParams,
    ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>> {
        let result = selection(params).map(|wanted| {
            let (resource, namespace, _) = key(at, "");
            self.state()
                .objects
                .iter()
                .filter(|((r, ns, _), _)| {
                    *r == resource && (at.namespace.is_none() || *ns == namespace)
                })
                .filter(|(_, object)| {
                    wanted
                        .iter()
                        .all(|(path, value)| object.pointer(path) == Some(value))
                })
                .map(|(_, object)| object.clone())
                .collect()
        });
        Box::pin(async move { result })
    }
}

/// The scheduler's and the kubelet's part, for the reconcile tests of the kinds that own Pods:
/// every Pod of `namespace` not yet bound is bound to `node-0` (as `pods/binding` does), then runs
/// its spec's images, Running and, with `ready`, Ready. A container whose image changed is
/// restarted (a new imageID, one more restart). Conditions others own (a controller's) are kept.
/// Whether anything changed.
pub async fn run_pods(cluster: &Arc<FakeCluster>, namespace: &str, ready: bool) -> bool {
    use k8s_openapi::api::core::v1::Pod;
    let pods = super::Writer::<Pod>::namespaced(cluster.clone(), namespace);
    let mut changed = false;
    for mut pod in cluster.all::<Pod>(Some(namespace)) {
        if let Some(spec) = pod.spec.as_mut().filter(|s| s.node_name.is_none()) {
            spec.node_name = Some("node-0".into());
            let name = pod.name_any();
            cluster.forget::<Pod>(Some(namespace), &name);
            cluster.insert(&pod);
            cluster.touch::<Pod>(Some(namespace), &name);
            changed = true;
        }
    }
    let flag = if ready { "True" } else { "False" };
    let since = "2026-11-30T00:00:00Z";
    for pod in cluster.all::<Pod>(Some(namespace)) {
        let name = pod.name_any();
        let running: BTreeMap<String, (String, i32)> = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, (c.image, c.restart_count)))
            .collect();
        let statuses: Vec<Value> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                let image = c.image.clone().unwrap_or_default();
                let restarts = match running.get(&c.name) {
                    Some((was, count)) if *was != image => count + 1,
                    Some((_, count)) => *count,
                    None => 0,
                };
                json!({"name": c.name, "image": image, "imageID": image_id(&image),
                       "ready": ready, "started": true, "restartCount": restarts,
                       "state": {"running": {"startedAt": since}}})
            })
            .collect();
        let mut conditions = vec![
            json!({"type": "Ready", "status": flag, "lastTransitionTime": since}),
            json!({"type": "ContainersReady", "status": flag, "lastTransitionTime": since}),
        ];
        for c in pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| !matches!(c.type_.as_str(), "Ready" | "ContainersReady"))
        {
            conditions.push(serde_json::to_value(c).unwrap_or_default());
        }
        let status = json!({"status": {"phase": "Running", "podIP": "10.0.0.1",
                                       "containerStatuses": statuses, "conditions": conditions}});
        if let Ok(written) = pods
            .patch_part(&name, Part::Status, &Patch::Merge(&status))
            .await
        {
            changed |= written.metadata.resource_version != pod.metadata.resource_version;
        }
    }
    changed
}

/// An imageID for `image`, distinct per image (what the runtime reports once it runs it).
fn image_id(image: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    image.hash(&mut hasher);
    let repo = image.split(':').next().unwrap_or(image);
    format!("docker.io/library/{repo}@sha256:{:064x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{PatchParams, PostParams, Preconditions};

    use super::*;
    use crate::driver::writes::{Writer, get_live};
    use crate::error::is_race;

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                         "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a Pod")
    }

    fn code(result: Result<impl std::fmt::Debug, kube::Error>) -> u16 {
        match result {
            Err(kube::Error::Api(status)) => status.code,
            other => panic!("expected an API error, got {other:?}"),
        }
    }

    /// Every answer the controllers' correctness leans on, as a table: (what, the write, the code
    /// the fake answers, whether `is_race` calls it a race).
    #[tokio::test]
    async fn the_fake_answers_as_the_apiserver_does() {
        let cluster = FakeCluster::new();
        let stored = cluster.insert(&pod("a"));
        let pods = Writer::<Pod>::namespaced(cluster.clone(), "ns");
        let stale = json!({"metadata": {"resourceVersion": "0", "labels": {"x": "y"}}});
        let failing_test: Patch<Value> = Patch::Json(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "0"},
                {"op": "add", "path": "/metadata/labels/x", "value": "y"},
            ]))
            .expect("a JSON patch"),
        );
        let at_uid = |uid: &str| DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pp = PatchParams::default();
        let cases: Vec<(&str, Result<(), kube::Error>, u16, bool)> = vec![
            (
                "a merge patch over an older resourceVersion",
                pods.patch("a", &pp, &Patch::Merge(&stale)).await.map(drop),
                409,
                true,
            ),
            (
                "a JSON patch whose test fails",
                pods.patch("a", &pp, &failing_test).await.map(drop),
                422,
                true,
            ),
            (
                "a patch of a missing object",
                pods.patch("gone", &pp, &Patch::Merge(json!({})))
                    .await
                    .map(drop),
                404,
                true,
            ),
            (
                "a delete preconditioned on another uid",
                pods.delete("a", &at_uid("other")).await,
                409,
                true,
            ),
            (
                "a create over an existing name",
                pods.create(&PostParams::default(), &pod("a"))
                    .await
                    .map(drop),
                409,
                true,
            ),
        ];
        for (what, result, expected, race) in cases {
            let error = result.expect_err(what);
            assert!(
                matches!(&error, kube::Error::Api(s) if s.code == expected),
                "{what}: {error}"
            );
            assert_eq!(is_race(&error), race, "{what}");
        }
        // An injected validation error names its field: no race.
        cluster.fail_next(Verb::Patch, "a", 422);
        let error = pods
            .patch("a", &pp, &Patch::Merge(json!({})))
            .await
            .expect_err("injected");
        assert!(!is_race(&error));
        // Nothing refused changed the Pod.
        let now: Pod = cluster.get(Some("ns"), "a").expect("the Pod");
        assert_eq!(now.resource_version(), stored.resource_version());
        assert_eq!(cluster.done(), vec![]);
    }

    #[tokio::test]
    async fn versions_move_on_changes_only_and_parts_stay_apart() {
        let cluster = FakeCluster::new();
        let stored = cluster.insert(&pod("a"));
        let pods = Writer::<Pod>::namespaced(cluster.clone(), "ns");
        let pp = PatchParams::default();
        let same = json!({"metadata": {"labels": {"app": "a"}}});
        let unchanged = pods
            .patch("a", &pp, &Patch::Merge(&same))
            .await
            .expect("a no-op");
        assert_eq!(unchanged.resource_version(), stored.resource_version());
        // The object's patch leaves the status; the status patch leaves the rest.
        let both = json!({"metadata": {"resourceVersion": stored.resource_version(),
                                       "labels": {"x": "1"}},
                          "status": {"phase": "Failed"}});
        let patched = pods
            .patch("a", &pp, &Patch::Merge(&both))
            .await
            .expect("a patch");
        assert_ne!(patched.resource_version(), stored.resource_version());
        assert_eq!(patched.labels().get("x").map(String::as_str), Some("1"));
        assert_eq!(
            patched.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        // The object moved: the same precondition now fails. A Pod's status subresource takes
        // the status and the labels, never the spec.
        assert_eq!(
            code(pods.patch_status("a", &pp, &Patch::Merge(&both)).await),
            409
        );
        let failed = json!({"metadata": {"resourceVersion": patched.resource_version(),
                                         "labels": {"x": "2"}},
                            "spec": {"activeDeadlineSeconds": 5},
                            "status": {"phase": "Failed"}});
        let status = pods
            .patch_status("a", &pp, &Patch::Merge(&failed))
            .await
            .expect("a status patch");
        assert_eq!(status.labels().get("x").map(String::as_str), Some("2"));
        assert_eq!(
            status.spec.as_ref().and_then(|s| s.active_deadline_seconds),
            None
        );
        assert_eq!(
            status.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Failed")
        );
        // A strategic patch merges conditions by type.
        let ready =
            json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "False"}]}});
        let merged = pods
            .patch_status("a", &pp, &Patch::Strategic(&ready))
            .await
            .expect("a strategic patch");
        let types: Vec<_> = merged
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert_eq!(types, ["Ready", "KruisePodReady"]);
        // A finalizer holds a delete until it is removed.
        let held = json!({"metadata": {"finalizers": ["f"]}});
        pods.patch("a", &pp, &Patch::Merge(&held))
            .await
            .expect("a finalizer");
        pods.delete("a", &DeleteParams::default())
            .await
            .expect("deleted");
        let marked: Option<Pod> = get_live(cluster.as_ref(), Some("ns"), "a")
            .await
            .expect("a read");
        assert!(marked.is_some_and(|p| p.metadata.deletion_timestamp.is_some()));
        let released = json!({"metadata": {"finalizers": null}});
        pods.patch("a", &pp, &Patch::Merge(&released))
            .await
            .expect("released");
        assert!(cluster.get::<Pod>(Some("ns"), "a").is_none());
        assert_eq!(code(pods.delete("a", &DeleteParams::default()).await), 404);
    }

    /// A Pod's spec changes in place only where the apiserver allows it: images through the
    /// object, resources through `resize`.
    #[tokio::test]
    async fn a_pod_spec_changes_only_where_the_apiserver_allows() {
        let cluster = FakeCluster::new();
        cluster.insert(&pod("a"));
        let pods = Writer::<Pod>::namespaced(cluster.clone(), "ns");
        let image = json!({"spec": {"containers": [{"name": "c", "image": "i:2"}]}});
        let patched = pods
            .patch_part("a", Part::Object, &Patch::Strategic(&image))
            .await
            .expect("an image changes in place");
        assert_eq!(
            patched.spec.as_ref().map(|s| s.containers[0].image.clone()),
            Some(Some("i:2".into()))
        );
        let env =
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "E", "value": "1"}]}]}});
        assert_eq!(
            code(
                pods.patch_part("a", Part::Object, &Patch::Strategic(&env))
                    .await
            ),
            422
        );
        let resources = json!({"spec": {"containers": [{"name": "c", "image": "i:9",
                                                          "resources": {"limits": {"cpu": "1"}}}]}});
        assert_eq!(
            code(
                pods.patch_part("a", Part::Object, &Patch::Strategic(&resources))
                    .await
            ),
            422,
            "resources change through resize only"
        );
        let resized = pods
            .patch_part("a", Part::Resize, &Patch::Strategic(&resources))
            .await
            .expect("a resize");
        let container = resized
            .spec
            .map(|s| s.containers[0].clone())
            .expect("a container");
        assert_eq!(
            container.image.as_deref(),
            Some("i:2"),
            "a resize leaves the image"
        );
        assert!(container.resources.is_some_and(|r| r.limits.is_some()));
    }
}
