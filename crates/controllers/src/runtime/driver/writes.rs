//! The writer interface of the act step: every write a kind makes goes through [`Writes`] (create,
//! patch, patch of the status, delete with preconditions, evict), so that a kind's act step runs the
//! same against the apiserver ([`ApiWrites`]) and against the in-memory [`fake::FakeCluster`] of its
//! unit tests, which answers 409 to a stale resourceVersion, 404 to a missing object and 422 to a
//! JSON patch whose `test` fails, as the apiserver does.
//!
//! A kind that must read an object live (not from the caches) says so in its context's type: it
//! holds a [`LiveReads`] besides its [`Writes`]; few do (see `driver::layout_tests` for who).
//!
//! [`Writer`] is the typed face a kind uses: the same calls as `kube::Api` (`patch`,
//! `patch_status`, `create`, `delete`), over one [`Writes`].

pub mod fake;

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::api::{DeleteParams, EvictParams, GetParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, Request};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Where a write goes: a resource (group, version, plural) and, when it is namespaced, the
/// namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub resource: ApiResource,
    pub namespace: Option<String>,
}

impl At {
    /// The resource of `K` in `namespace` (`None` for a cluster-scoped kind).
    pub fn of<K: Resource<DynamicType = ()>>(namespace: Option<&str>) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            namespace: namespace.map(str::to_owned),
        }
    }

    fn url_path(&self) -> String {
        DynamicObject::url_path(&self.resource, self.namespace.as_deref())
    }

    /// `kind namespace/name`, for error contexts and the fake's records.
    pub fn describe(&self, name: &str) -> String {
        match &self.namespace {
            Some(namespace) => format!("{} {namespace}/{name}", self.resource.kind),
            None => format!("{} {name}", self.resource.kind),
        }
    }
}

/// The part of an object a patch goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The object (its status is left as it is, as the apiserver does for kinds with a status
    /// subresource).
    Object,
    /// The `status` subresource (only the status changes).
    Status,
    /// A Pod's `ephemeralcontainers` subresource (only `spec.ephemeralContainers` changes).
    EphemeralContainers,
    /// A Pod's `resize` subresource (only its containers' `resources` change).
    Resize,
}

impl Part {
    /// The subresource the part is written through (`None`: the object itself).
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Part::Object => None,
            Part::Status => Some("status"),
            Part::EphemeralContainers => Some("ephemeralcontainers"),
            Part::Resize => Some("resize"),
        }
    }
}

/// The JSON text of an object the apiserver answered with, left undecoded so that the caller
/// decodes it into the type it needs (a Pod without its managed fields, for one).
pub type Answer = String;

/// The writes of the act step. Bodies are JSON; [`Writer`] gives them types.
pub trait Writes: Send + Sync + 'static {
    /// Creates `object` (a `generateName` is resolved by the server); answers the object created.
    fn create<'a>(
        &'a self,
        at: &'a At,
        object: Value,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>>;
    /// Patches `name`; a `metadata.resourceVersion` in a merge or strategic patch is a precondition
    /// (409 when the object moved), as is a JSON patch's `test` (422 when it fails).
    fn patch<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        part: Part,
        patch: Patch<Value>,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>>;
    /// Deletes `name`, with the uid and resourceVersion preconditions of `params`.
    fn delete<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        params: DeleteParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
    /// Evicts Pod `namespace/name` (the eviction subresource: PodDisruptionBudgets and the Pod
    /// webhooks decide).
    fn evict<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        params: EvictParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// A read from the apiserver, not the caches, for the few kinds that need what the caches do not
/// keep (declared in the kind's context by holding one).
pub trait LiveReads: Send + Sync + 'static {
    /// The object `name`, or `None` when there is none.
    fn get<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>>;
    /// The objects at `at` (every namespace when it names none) that `params` select (its label
    /// and field selectors).
    fn select<'a>(
        &'a self,
        at: &'a At,
        params: &'a ListParams,
    ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>>;
}

/// [`Writes`] and [`LiveReads`] by the apiserver.
#[derive(Clone)]
pub struct ApiWrites {
    client: Client,
}

impl ApiWrites {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self { client })
    }

    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<Answer, kube::Error> {
        self.client.request_text(request).await
    }

    async fn send_json(&self, request: http::Request<Vec<u8>>) -> Result<Value, kube::Error> {
        self.client.request::<Value>(request).await
    }
}

fn built(
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<http::Request<Vec<u8>>, kube::Error> {
    request.map_err(kube::Error::BuildRequest)
}

impl Writes for ApiWrites {
    fn create<'a>(
        &'a self,
        at: &'a At,
        object: Value,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>> {
        Box::pin(async move {
            let data = serde_json::to_vec(&object).map_err(kube::Error::SerdeError)?;
            let request = built(Request::new(at.url_path()).create(&PostParams::default(), data))?;
            self.send(request).await
        })
    }

    fn patch<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        part: Part,
        patch: Patch<Value>,
    ) -> BoxFuture<'a, Result<Answer, kube::Error>> {
        Box::pin(async move {
            let request = Request::new(at.url_path());
            let params = PatchParams::default();
            let request = built(match part.subresource() {
                None => request.patch(name, &params, &patch),
                Some(subresource) => request.patch_subresource(subresource, name, &params, &patch),
            })?;
            self.send(request).await
        })
    }

    fn delete<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
        params: DeleteParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let request = built(Request::new(at.url_path()).delete(name, &params))?;
            self.send(request).await.map(drop)
        })
    }

    fn evict<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        params: EvictParams,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let at = At::of::<k8s_openapi::api::core::v1::Pod>(Some(namespace));
            let request = built(Request::new(at.url_path()).evict(name, &params))?;
            self.send(request).await.map(drop)
        })
    }
}

impl LiveReads for ApiWrites {
    fn get<'a>(
        &'a self,
        at: &'a At,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, kube::Error>> {
        Box::pin(async move {
            let request = built(Request::new(at.url_path()).get(name, &GetParams::default()))?;
            match self.send_json(request).await {
                Ok(object) => Ok(Some(object)),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
                Err(error) => Err(error),
            }
        })
    }

    fn select<'a>(
        &'a self,
        at: &'a At,
        params: &'a ListParams,
    ) -> BoxFuture<'a, Result<Vec<Value>, kube::Error>> {
        Box::pin(async move {
            let request = built(Request::new(at.url_path()).list(params))?;
            let list = self.send_json(request).await?;
            Ok(match list {
                Value::Object(mut list) => match list.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            })
        })
    }
}

/// An API error as the apiserver sends it; `field`, when given, is the cause's field.
pub fn api_error(code: u16, message: &str, field: Option<&str>) -> kube::Error {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    api_error_for(code, reason, message, field)
}

/// The apiserver's 409 to a create whose name is taken (reason `AlreadyExists`, which some callers
/// tell apart from a resourceVersion conflict).
pub fn already_exists(at: &At, name: &str) -> kube::Error {
    api_error_for(
        409,
        "AlreadyExists",
        &format!("{} \"{name}\" already exists", at.resource.plural),
        None,
    )
}

fn api_error_for(code: u16, reason: &str, message: &str, field: Option<&str>) -> kube::Error {
    let causes: Vec<Value> = field
        .map(|field| json!({"reason": "FieldValueInvalid", "field": field, "message": message}))
        .into_iter()
        .collect();
    let status = json!({"status": "Failure", "code": code, "reason": reason,
                        "message": message, "details": {"causes": causes}});
    match serde_json::from_value(status) {
        Ok(status) => kube::Error::Api(Box::new(status)),
        Err(error) => kube::Error::SerdeError(error),
    }
}

/// The apiserver's 404 for object `name` at `at`.
pub fn not_found(at: &At, name: &str) -> kube::Error {
    api_error(
        404,
        &format!("{} \"{name}\" not found", at.resource.plural),
        None,
    )
}

/// Lists `K` live from a [`LiveReads`] (in `namespace`, or every namespace when `None`).
pub async fn list_live<K>(
    reads: &dyn LiveReads,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let at = At::of::<K>(namespace);
    reads
        .select(&at, params)
        .await?
        .into_iter()
        .map(typed)
        .collect()
}

/// The typed face of [`Writes`] for objects of `K` in one namespace (or cluster-wide): the calls
/// of `kube::Api` a kind's act step makes.
pub struct Writer<K> {
    writes: Arc<dyn Writes>,
    at: At,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Writer<K> {
    fn clone(&self) -> Self {
        Self {
            writes: self.writes.clone(),
            at: self.at.clone(),
            kind: PhantomData,
        }
    }
}

fn typed<K: DeserializeOwned>(value: Value) -> Result<K, kube::Error> {
    serde_json::from_value(value).map_err(kube::Error::SerdeError)
}

fn decoded<A: DeserializeOwned>(answer: &str) -> Result<A, kube::Error> {
    serde_json::from_str(answer).map_err(kube::Error::SerdeError)
}

fn json<P: Serialize>(patch: &Patch<P>) -> Result<Patch<Value>, kube::Error> {
    let value = |p: &P| serde_json::to_value(p).map_err(kube::Error::SerdeError);
    Ok(match patch {
        Patch::Apply(p) => Patch::Apply(value(p)?),
        Patch::Json(p) => Patch::Json(p.clone()),
        Patch::Merge(p) => Patch::Merge(value(p)?),
        Patch::Strategic(p) => Patch::Strategic(value(p)?),
        _ => {
            return Err(api_error(
                415,
                "a patch type the writer does not know",
                None,
            ));
        }
    })
}

impl<K: Resource<DynamicType = ()>> Writer<K> {
    /// Objects of `K` in `namespace`.
    pub fn namespaced(writes: Arc<dyn Writes>, namespace: &str) -> Self {
        Self {
            writes,
            at: At::of::<K>(Some(namespace)),
            kind: PhantomData,
        }
    }

    /// Objects of a cluster-scoped `K`.
    pub fn all(writes: Arc<dyn Writes>) -> Self {
        Self {
            writes,
            at: At::of::<K>(None),
            kind: PhantomData,
        }
    }
}

impl Writer<DynamicObject> {
    /// Objects of a kind known only at run time (`resource`) in `namespace`.
    pub fn namespaced_with(
        writes: Arc<dyn Writes>,
        namespace: &str,
        resource: &ApiResource,
    ) -> Self {
        Self {
            writes,
            at: At {
                resource: resource.clone(),
                namespace: Some(namespace.to_owned()),
            },
            kind: PhantomData,
        }
    }
}

impl<K> Writer<K> {
    pub fn at(&self) -> &At {
        &self.at
    }

    /// Creates `object`, reading the answer as `A` (a Pod without its managed fields, for one).
    pub async fn create_as<A: DeserializeOwned>(&self, object: &K) -> Result<A, kube::Error>
    where
        K: Serialize,
    {
        let object = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        decoded(&self.writes.create(&self.at, object).await?)
    }

    /// A patch of `part` of object `name`, reading the answer as `A`.
    pub async fn patch_part_as<A: DeserializeOwned, P: Serialize>(
        &self,
        name: &str,
        part: Part,
        patch: &Patch<P>,
    ) -> Result<A, kube::Error> {
        let patch = json(patch)?;
        decoded(&self.writes.patch(&self.at, name, part, patch).await?)
    }

    pub async fn delete(&self, name: &str, params: &DeleteParams) -> Result<(), kube::Error> {
        self.writes.delete(&self.at, name, params.clone()).await
    }
}

/// The calls of `kube::Api`, answering `K`.
impl<K: DeserializeOwned> Writer<K> {
    pub async fn create(&self, _params: &PostParams, object: &K) -> Result<K, kube::Error>
    where
        K: Serialize,
    {
        self.create_as(object).await
    }

    /// A patch of `part` of object `name`.
    pub async fn patch_part<P: Serialize>(
        &self,
        name: &str,
        part: Part,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.patch_part_as(name, part, patch).await
    }

    /// A patch of the object (`kube::Api::patch`; the params are the defaults).
    pub async fn patch<P: Serialize>(
        &self,
        name: &str,
        _params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.patch_part(name, Part::Object, patch).await
    }

    /// A JSON merge patch of object `name` that may lose a race: `Ok(true)` when written,
    /// `Ok(false)` when the object moved or is gone ([`crate::error::is_race`]). Losing is no
    /// failure: the patch was decided on a view the next reconcile refreshes, and decides again.
    pub async fn merge_patch_unless_raced(
        &self,
        name: &str,
        patch: &Value,
    ) -> Result<bool, kube::Error> {
        match self
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if crate::error::is_race(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// A patch of the status (`kube::Api::patch_status`).
    pub async fn patch_status<P: Serialize>(
        &self,
        name: &str,
        _params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, kube::Error> {
        self.patch_part(name, Part::Status, patch).await
    }
}

/// Reads `K` live from a [`LiveReads`].
pub async fn get_live<K>(
    reads: &dyn LiveReads,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let at = At::of::<K>(namespace);
    reads.get(&at, name).await?.map(typed).transpose()
}

impl<K> Debug for Writer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("at", &self.at).finish()
    }
}
