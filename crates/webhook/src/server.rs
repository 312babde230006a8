//! The HTTPS server: admission endpoints per kind, `/convert` and `/healthz`, over rustls with a
//! certificate that can be swapped while serving.
//!
//! Hostile or broken clients are bounded (see [`Limits`]): a body may be as large as the apiserver can
//! send (an UPDATE review carries the object and its old version, each up to the apiserver's 3 MiB
//! request limit), no larger; the TLS handshake, the request headers and the whole request each have a
//! deadline, so a slow or half-sent request cannot hold a connection open. JSON nesting is bounded by
//! serde_json's recursion limit (128) in the `Json` extractor, which every endpoint uses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use axum_server::Handle;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioTimer;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::storage::v1::StorageClass;
use kruise_api::kinds::Kind;
use kruise_api::sidecarset::patch_metadata::{self, Whitelist};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::statefulset::volume_expansion::{self, ClassLookup};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::core::conversion::ConversionReview;

use crate::admission::{Gates, PatchMetadataRules};
use crate::configuration::{CONVERT_PATH, MUTATE_POD_PATH, mutate_path, validate_path};
use crate::metrics::Metrics;
use crate::pod::PodInjector;
use crate::policy::{DELETION_PATHS, Policy, VALIDATE_POD_PATH};

/// The bounds the server puts on every connection and request.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The largest request body accepted (413 beyond). The apiserver accepts objects up to 3 MiB; an
    /// UPDATE review carries two of them (`object`, `oldObject`) plus the envelope: 8 MiB fits that.
    pub max_body_bytes: usize,
    /// From a request's headers to its answer, body read included (408 beyond). The apiserver gives up
    /// on a webhook after its `timeoutSeconds`, at most 30 s, so a longer request helps nobody.
    pub request_timeout: Duration,
    /// From a connection's (or a kept-alive connection's next) request start to its complete headers
    /// (HTTP/1; the connection is closed beyond).
    pub header_read_timeout: Duration,
    /// From TCP accept to a completed TLS handshake (the connection is closed beyond).
    pub tls_handshake_timeout: Duration,
    /// Requests one HTTP/2 connection carries at once. The apiserver opens another connection
    /// when a connection is full, and a Service (or any L4 balancer) spreads connections, not
    /// requests, over the replicas: a lower limit spreads a burst over more of them.
    pub max_concurrent_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
        }
    }
}

/// Go's HTTP/2 server default (what OpenKruise's webhook server advertises).
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 250;

/// Builds the router with the default [`Limits`]. Handlers are pure functions of the request (see
/// `admission` and `convert`). `pods` serves `/mutate-pod` (SidecarSet injection); without it every Pod
/// is admitted unchanged, with a warning. Its SidecarSet watch cache also serves the SidecarSet
/// conflict check; `client`, when given, lists SidecarSets for that check until the cache is loaded.
pub fn router(metrics: Metrics, client: Option<kube::Client>, pods: Option<PodInjector>) -> Router {
    router_with_limits(metrics, client, pods, &Limits::default())
}

/// [`router`] with given limits (tests use short ones).
pub fn router_with_limits(
    metrics: Metrics,
    client: Option<kube::Client>,
    pods: Option<PodInjector>,
    limits: &Limits,
) -> Router {
    router_with(
        metrics,
        client,
        pods,
        limits,
        Gates::default(),
        Policy::default(),
    )
}

/// [`router`] with given limits, the feature gates the workload webhooks read, and the
/// policy.kruise.io webhooks (PodUnavailableBudget and deletion protection) answering as `policy`
/// decides ([`router`] serves their paths too, allowing everything).
pub fn router_with(
    metrics: Metrics,
    client: Option<kube::Client>,
    pods: Option<PodInjector>,
    limits: &Limits,
    gates: Gates,
    policy: Policy,
) -> Router {
    let pods =
        pods.unwrap_or_else(|| PodInjector::without_caches(crate::pod::PodSettings::gates_off("")));
    let router = Router::new().route("/healthz", get(|| async { "ok" }));
    let router = pod_routes(router, &pods, &policy);
    let router = workload_routes(router, client.as_ref(), &pods, gates);
    let router = policy_routes(router, &policy);
    let router = v1alpha1_routes(router, client.as_ref(), &pods, gates);
    let request_timeout = limits.request_timeout;
    router
        .route(
            CONVERT_PATH,
            post(
                |State(metrics): State<Metrics>, Json(review): Json<ConversionReview>| async move {
                    let began = Instant::now();
                    let (answer, ok) = crate::convert::review(review);
                    metrics.observe(
                        CONVERT_PATH,
                        if ok { "converted" } else { "failed" },
                        began.elapsed().as_secs_f64(),
                    );
                    Json(answer)
                },
            ),
        )
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn(move |request, next| {
            within(request_timeout, request, next)
        }))
        .with_state(metrics)
}

/// The Pod webhooks: `/mutate-pod` (injection, placement) and `/validate-pod` (budgets, then
/// WorkloadSpread slots).
fn pod_routes(router: Router<Metrics>, pods: &PodInjector, policy: &Policy) -> Router<Metrics> {
    let injector = pods.clone();
    let router = router.route(
        MUTATE_POD_PATH,
        post(
            move |State(metrics): State<Metrics>,
                  Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                let began = Instant::now();
                let (answer, outcome) = injector.review(review).await;
                metrics.observe(
                    MUTATE_POD_PATH,
                    outcome.label(),
                    began.elapsed().as_secs_f64(),
                );
                Json(answer.review)
            },
        ),
    );
    let pod_policy = policy.clone();
    let spreads = pods.workloadspreads().cloned();
    router.route(
        VALIDATE_POD_PATH,
        admission_route(VALIDATE_POD_PATH, move |review| {
            let (pod_policy, spreads) = (pod_policy.clone(), spreads.clone());
            async move {
                let arrived = tokio::time::Instant::now();
                // PodUnavailableBudget first: a WorkloadSpread slot is freed only for a deletion
                // that is allowed.
                let copy = spreads.as_ref().map(|_| review.clone());
                // An eviction's Pod is read once, for both, while the budgets are listed.
                let evicted = match (&spreads, pod_policy.client()) {
                    (Some(_), Some(client)) if is_eviction(&review) => {
                        pod_policy.prefetch(arrived);
                        evicted_pod(client, &review).await
                    }
                    _ => None,
                };
                let answer = pod_policy
                    .review_pod_with(review, evicted.clone(), arrived)
                    .await;
                if answer.allowed
                    && let (Some(spreads), Some(copy)) = (&spreads, copy)
                {
                    spreads.review_pod_deletion(&copy, evicted.as_ref()).await;
                }
                answer
            }
        }),
    )
}

/// The defaulting and validating webhooks of the workload kinds ([`Kind::ALL`]).
fn workload_routes(
    mut router: Router<Metrics>,
    client: Option<&kube::Client>,
    pods: &PodInjector,
    gates: Gates,
) -> Router<Metrics> {
    for &kind in Kind::ALL {
        let path = mutate_path(kind);
        let label = path.clone();
        router = router.route(
            &path,
            post(
                move |State(metrics): State<Metrics>,
                      Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    let began = Instant::now();
                    let answer = crate::admission::mutate_with(kind, review, &gates);
                    metrics.observe(
                        &label,
                        if answer.allowed { "allowed" } else { "denied" },
                        began.elapsed().as_secs_f64(),
                    );
                    Json(answer.review)
                },
            ),
        );
        let path = validate_path(kind);
        let label = path.clone();
        let client = client.cloned();
        let pods = pods.clone();
        router = router.route(
            &path,
            post(
                move |State(metrics): State<Metrics>,
                      Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    let began = Instant::now();
                    let answer =
                        validate_workload(kind, review, client.as_ref(), &pods, gates, began).await;
                    metrics.observe(
                        &label,
                        if answer.allowed { "allowed" } else { "denied" },
                        began.elapsed().as_secs_f64(),
                    );
                    Json(answer.review)
                },
            ),
        );
    }
    router
}

/// Validates a workload of `kind` against what the cluster holds that it must agree with: the
/// other SidecarSets and the metadata whitelist for a SidecarSet, the storage classes of claim
/// templates otherwise.
async fn validate_workload(
    kind: Kind,
    review: AdmissionReview<DynamicObject>,
    client: Option<&kube::Client>,
    pods: &PodInjector,
    gates: Gates,
    began: Instant,
) -> crate::admission::Answer {
    let cluster = if kind == Kind::SidecarSet {
        let read = async {
            // Read-your-writes: the SidecarSets written (or deleted) before this one are in the
            // cache the conflict check reads.
            let late = pods
                .catch_up_sidecarsets(tokio::time::Instant::from_std(began))
                .await;
            if !late.is_empty() {
                tracing::warn!(%late, "SidecarSet conflict check decides on a cache not known to show every earlier write");
            }
            let sidecarsets = other_sidecarsets(pods, client)
                .await
                .map_err(|e| format!("listing SidecarSets: {e}"))?;
            let whitelist = if patches_pod_metadata(&review) {
                read_patch_metadata_whitelist(client, pods.namespace()).await?
            } else {
                None
            };
            Ok::<_, String>((sidecarsets, whitelist))
        };
        match read.await {
            Ok((sidecarsets, whitelist)) => crate::admission::Cluster {
                sidecarsets,
                patch_metadata: PatchMetadataRules {
                    whitelist,
                    defaults_allowed: gates.patch_pod_metadata_defaults_allowed,
                },
                ..Default::default()
            },
            Err(error) => {
                tracing::warn!(%error, "cannot read what a SidecarSet is validated against");
                return crate::admission::unavailable(review, &error);
            }
        }
    } else {
        let classes = crate::admission::storage_classes_to_check(kind, &review);
        crate::admission::Cluster {
            storage_classes: read_storage_classes(client, classes).await,
            ..Default::default()
        }
    };
    match crate::admission::gate_refusal(kind, &gates) {
        Some(gate) => crate::admission::refuse_gate(review, gate),
        None => crate::admission::validate(kind, review, &cluster),
    }
}

/// The deletion-protection webhooks and the PodUnavailableBudget validation.
fn policy_routes(mut router: Router<Metrics>, policy: &Policy) -> Router<Metrics> {
    for &path in DELETION_PATHS {
        let policy = policy.clone();
        router = router.route(
            path,
            admission_route(path, move |review| {
                let policy = policy.clone();
                async move { policy.review_deletion(review).await }
            }),
        );
    }
    let budget_policy = policy.clone();
    router.route(
        crate::podunavailablebudget::VALIDATE_PATH,
        admission_route(crate::podunavailablebudget::VALIDATE_PATH, move |review| {
            let policy = budget_policy.clone();
            async move {
                crate::podunavailablebudget::validate(review, policy.gates(), policy.client()).await
            }
        }),
    )
}

/// The webhooks of the kinds served in v1alpha1 only (PodProbeMarker, EphemeralJob,
/// ResourceDistribution, PersistentPodState, WorkloadSpread) and the ContainerRecreateRequest
/// defaulting.
fn v1alpha1_routes(
    router: Router<Metrics>,
    client: Option<&kube::Client>,
    pods: &PodInjector,
    gates: Gates,
) -> Router<Metrics> {
    let router = router
        .route(
            crate::podprobemarker::VALIDATE_PATH,
            admission_route(crate::podprobemarker::VALIDATE_PATH, move |review| {
                std::future::ready(crate::podprobemarker::validate(
                    review,
                    gates.pod_probe_marker,
                    gates.kruise_daemon,
                ))
            }),
        )
        .route(
            crate::ephemeraljob::VALIDATE_PATH,
            admission_route(crate::ephemeraljob::VALIDATE_PATH, |review| {
                std::future::ready(crate::ephemeraljob::validate(review))
            }),
        );
    let (rd_client, rd_namespace) = (client.cloned(), pods.namespace().to_owned());
    let router = router.route(
        crate::resourcedistribution::VALIDATE_PATH,
        admission_route(crate::resourcedistribution::VALIDATE_PATH, move |review| {
            let (client, namespace) = (rd_client.clone(), rd_namespace.clone());
            async move {
                crate::resourcedistribution::validate_with(
                    review,
                    gates.resource_distribution,
                    client.as_ref(),
                    &namespace,
                )
                .await
            }
        }),
    );
    let pps_client = client.cloned();
    let pps_namespace = pods.namespace().to_owned();
    let pps_states = pods
        .persistent_pod_states()
        .map(|hook| hook.states().clone());
    let router = router.route(
        crate::persistentpodstate::VALIDATE_PATH,
        admission_route(crate::persistentpodstate::VALIDATE_PATH, move |review| {
            let (states, client, namespace) = (
                pps_states.clone(),
                pps_client.clone(),
                pps_namespace.clone(),
            );
            async move {
                crate::persistentpodstate::validate(
                    review,
                    states.as_ref(),
                    client.as_ref(),
                    &namespace,
                )
                .await
            }
        }),
    );
    let crr_client = client.cloned();
    let router = router.route(
        crate::containerrecreaterequest::MUTATE_PATH,
        admission_route(
            crate::containerrecreaterequest::MUTATE_PATH,
            move |review| {
                let client = crr_client.clone();
                async move {
                    crate::containerrecreaterequest::review(
                        review,
                        gates.kruise_daemon,
                        client.as_ref(),
                    )
                    .await
                }
            },
        ),
    );
    let spreads = pods.workloadspreads().cloned().unwrap_or_else(|| {
        crate::workloadspread::WorkloadSpreads::new(client.cloned(), None, Duration::from_secs(5))
    });
    router.route(
        crate::workloadspread::VALIDATE_PATH,
        admission_route(crate::workloadspread::VALIDATE_PATH, move |review| {
            let spreads = spreads.clone();
            async move { spreads.validate(review, gates.workload_spread).await }
        }),
    )
}

/// Runs a request (body read included: the extractors read it in the handler) for at most `timeout`.
async fn within(timeout: Duration, request: Request, next: Next) -> Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!("the request was not complete within {timeout:?}"),
        )
            .into_response(),
    }
}

/// The SidecarSets the conflict check compares a SidecarSet with. Read from the Pod injector's watch
/// cache — the one SidecarSet watch of the webhook, no apiserver call — once it has loaded. Until then
/// (the first moments after start) they are listed through `client`, so a SidecarSet is never
/// admitted unchecked and never refused only because the cache is warming up; without a client (tests)
/// there are none. With read-your-writes admission the caller first waits (bounded) for the cache to
/// show every SidecarSet written or deleted before the request (upstream's cached client can miss
/// one created an instant earlier, or refuse over one deleted an instant earlier); two conflicting
/// SidecarSets created at the same moment are not caught by either.
async fn other_sidecarsets(
    pods: &PodInjector,
    client: Option<&kube::Client>,
) -> Result<Vec<SidecarSet>, kube::Error> {
    if let Some(cached) = pods.cached_sidecarsets() {
        return Ok(cached);
    }
    let Some(client) = client else {
        return Ok(Vec::new());
    };
    let api: kube::Api<SidecarSet> = kube::Api::all(client.clone());
    Ok(api.list(&Default::default()).await?.items)
}

/// Whether the reviewed SidecarSet has a `spec.patchPodMetadata` (only then is the whitelist read).
fn patches_pod_metadata(review: &AdmissionReview<DynamicObject>) -> bool {
    review
        .request
        .as_ref()
        .and_then(|r| r.object.as_ref())
        .and_then(|o| o.data.pointer("/spec/patchPodMetadata"))
        .and_then(serde_json::Value::as_array)
        .is_some_and(|patches| !patches.is_empty())
}

/// The patchPodMetadata whitelist from the ConfigMap `kruise-configuration` in the manager's
/// namespace, read at each SidecarSet admission as upstream's webhook does (no ConfigMap or no key:
/// `None`). Without a client (tests) there is none.
async fn read_patch_metadata_whitelist(
    client: Option<&kube::Client>,
    namespace: &str,
) -> Result<Option<Whitelist>, String> {
    let Some(client) = client else {
        return Ok(None);
    };
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
    let config = api.get_opt(patch_metadata::CONFIGMAP).await.map_err(|e| {
        format!(
            "reading ConfigMap {namespace}/{}: {e}",
            patch_metadata::CONFIGMAP
        )
    })?;
    patch_metadata::parse_whitelist(config.as_ref().and_then(|c| c.data.as_ref()))
}

/// Reads the StorageClasses an Advanced StatefulSet update resizes claims of (`None`: the default
/// class), from the apiserver (a get per named class, one list for the default), as OpenKruise's
/// webhook reads them. A class that cannot be read is recorded as such (the update is refused).
async fn read_storage_classes(
    client: Option<&kube::Client>,
    classes: BTreeSet<Option<String>>,
) -> BTreeMap<Option<String>, ClassLookup> {
    let mut found = BTreeMap::new();
    for class in classes {
        let lookup = match client {
            None => ClassLookup::Unreadable("no client to read StorageClasses".into()),
            Some(client) => {
                let api: kube::Api<StorageClass> = kube::Api::all(client.clone());
                match &class {
                    Some(name) => match api.get(name).await {
                        Ok(sc) => ClassLookup::of(&sc),
                        Err(error) => ClassLookup::Unreadable(error.to_string()),
                    },
                    None => match api.list(&Default::default()).await {
                        Ok(list) => volume_expansion::default_class(&list.items)
                            .map_or(ClassLookup::NoDefault, ClassLookup::of),
                        Err(error) => ClassLookup::Unreadable(error.to_string()),
                    },
                }
            }
        };
        if let ClassLookup::Unreadable(why) = &lookup {
            tracing::warn!(class = ?class, %why, "cannot read a StorageClass for a volumeClaimTemplates update");
        }
        found.insert(class, lookup);
    }
    found
}

/// Installs the process-wide rustls crypto provider (ring). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Serves `router` with TLS on `addr` until `handle` is shut down, with the default [`Limits`] on
/// connections.
pub async fn serve(
    addr: SocketAddr,
    tls: RustlsConfig,
    router: Router,
    handle: Handle<SocketAddr>,
) -> std::io::Result<()> {
    serve_with_limits(addr, tls, router, handle, Limits::default()).await
}

/// [`serve`] with given limits on the TLS handshake and the HTTP/1 header read (the request-level
/// limits are the router's).
pub async fn serve_with_limits(
    addr: SocketAddr,
    tls: RustlsConfig,
    router: Router,
    handle: Handle<SocketAddr>,
    limits: Limits,
) -> std::io::Result<()> {
    tracing::info!(%addr, "webhook server listening");
    let acceptor = RustlsAcceptor::new(tls).handshake_timeout(limits.tls_handshake_timeout);
    let mut server = axum_server::bind(addr).acceptor(acceptor).handle(handle);
    // hyper enforces the header read timeout only with a timer; without one it is silently off.
    server
        .http_builder()
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    // HTTP/2 (what the apiserver negotiates): pings find dead peers; requests are bounded by the router.
    server
        .http_builder()
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout)
        .max_concurrent_streams(limits.max_concurrent_streams);
    server.serve(router.into_make_service()).await
}

/// The Pod of a `pods/eviction` review, read from the apiserver (`None` for any other review, or
/// when it cannot be read: each hook then reads it, or answers, itself).
fn is_eviction(review: &AdmissionReview<DynamicObject>) -> bool {
    review.request.as_ref().is_some_and(|request| {
        request.operation == kube::core::admission::Operation::Create
            && request.sub_resource.as_deref() == Some("eviction")
    })
}

async fn evicted_pod(
    client: &kube::Client,
    review: &AdmissionReview<DynamicObject>,
) -> Option<k8s_openapi::api::core::v1::Pod> {
    let request = review.request.as_ref()?;
    if !is_eviction(review) {
        return None;
    }
    let namespace = request.namespace.as_deref()?;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), namespace);
    pods.get_opt(&request.name).await.ok().flatten()
}

/// A POST route answering AdmissionReviews with `answer`, each timed and counted in the webhook's
/// metrics under `path` by its outcome.
fn admission_route<F, Fut>(path: &'static str, answer: F) -> MethodRouter<Metrics>
where
    F: Fn(AdmissionReview<DynamicObject>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = crate::admission::Answer> + Send + 'static,
{
    post(
        move |State(metrics): State<Metrics>,
              Json(review): Json<AdmissionReview<DynamicObject>>| {
            let answer = answer.clone();
            async move {
                let began = Instant::now();
                let answer = answer(review).await;
                metrics.observe(
                    path,
                    if answer.allowed { "allowed" } else { "denied" },
                    began.elapsed().as_secs_f64(),
                );
                Json(answer.review)
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::Review;
    use axum::body::Body;
    use futures::StreamExt;
    use http_body_util::BodyExt;
    use prometheus_client::registry::Registry;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    /// POSTs an AdmissionReview to `path` and returns the decoded answer (status 200 asserted).
    async fn post_review(app: axum::Router, path: &str, review: &Value) -> Value {
        let (status, body) = post(app, path, Body::from(review.to_string())).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).expect("json")
    }

    /// POSTs `body` as JSON to `path`: the status and the body of the answer.
    async fn post(app: axum::Router, path: &str, body: Body) -> (u16, Vec<u8>) {
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(body)
            .expect("request");
        let response = app.oneshot(request).await.expect("response");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, body.to_vec())
    }

    fn app() -> axum::Router {
        router(Metrics::register(&mut Registry::default()), None, None)
    }

    fn admission_review(operation: &str, kind: &str, object: &Value, old: Option<&Value>) -> Value {
        let resource = format!("{}s", kind.to_lowercase());
        Review::of("apps.kruise.io", "v1beta1", kind, &resource)
            .uid("u-big")
            .operation(operation)
            .namespace("d")
            .object(object.clone())
            .old(old.cloned())
            .json()
    }

    /// A CloneSet of about `pad` bytes (an environment variable's value fills it).
    fn big_cloneset(pad: usize, image: &str) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
            "metadata": {"name": "big", "namespace": "d"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "big"}},
                "template": {
                    "metadata": {"labels": {"app": "big"}},
                    "spec": {"containers": [{"name": "c", "image": image,
                        "env": [{"name": "PAD", "value": "x".repeat(pad)}]}]}
                }
            }
        })
    }

    /// Regression (issue 10, defect 4): a CloneSet over 1 MiB could be created but never updated, as an
    /// UPDATE carries it twice and the default 2 MiB body limit answered 413. The apiserver's own limit
    /// is 3 MiB per object: an UPDATE of two 3 MiB objects is answered.
    #[tokio::test]
    async fn an_update_of_two_largest_objects_is_answered() {
        let old = big_cloneset(3 * 1024 * 1024 - 1024, "nginx:1");
        let new = big_cloneset(3 * 1024 * 1024 - 1024, "nginx:2");
        let review = admission_review("UPDATE", "CloneSet", &new, Some(&old));
        let size = review.to_string().len();
        assert!(size > 6_000_000, "{size}");
        for path in [
            "/validate-apps-kruise-io-cloneset",
            "/mutate-apps-kruise-io-cloneset",
        ] {
            let answer = post_review(app(), path, &review).await;
            assert_eq!(answer["response"]["uid"], "u-big", "{path}");
            assert_eq!(
                answer["response"]["allowed"], true,
                "{path}: {}",
                answer["response"]["status"]
            );
        }
    }

    #[tokio::test]
    async fn a_body_above_the_limit_is_refused_with_413() {
        let limit = Limits::default().max_body_bytes;
        let (status, _) = post(
            app(),
            "/validate-apps-kruise-io-cloneset",
            Body::from(vec![b' '; limit + 1]),
        )
        .await;
        assert_eq!(status, 413);
    }

    /// A client that sends its headers and then dribbles (or never finishes) its body is cut off.
    #[tokio::test]
    async fn a_half_sent_body_times_out() {
        let limits = Limits {
            request_timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let app = router_with_limits(
            Metrics::register(&mut Registry::default()),
            None,
            None,
            &limits,
        );
        let never_ending = futures::stream::once(async {
            Ok::<_, std::io::Error>(axum::body::Bytes::from_static(b"{\"apiVersion\": "))
        })
        .chain(futures::stream::pending());
        let began = Instant::now();
        let (status, _) = post(app, MUTATE_POD_PATH, Body::from_stream(never_ending)).await;
        assert_eq!(status, 408);
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{:?}",
            began.elapsed()
        );
    }

    /// Regression (issue 10, defect 4, second half): a client that connects and never completes the
    /// TLS handshake, or completes it and never finishes its headers, had its connection held open
    /// for as long as it liked (hyper's header timeout needs a timer, which was not set).
    #[tokio::test]
    async fn slow_connections_are_closed() {
        use rustls::pki_types::pem::PemObject;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        install_crypto_provider();
        let bundle = crate::certs::generate("127.0.0.1").expect("certificates");
        let tls = RustlsConfig::from_pem(
            bundle.cert.clone().into_bytes(),
            bundle.key.clone().into_bytes(),
        )
        .await
        .expect("tls config");
        let limits = Limits {
            header_read_timeout: Duration::from_millis(500),
            tls_handshake_timeout: Duration::from_millis(500),
            ..Limits::default()
        };
        let handle = Handle::new();
        let addr: SocketAddr = "127.0.0.1:0".parse().expect("address");
        let server = tokio::spawn({
            let handle = handle.clone();
            async move { serve_with_limits(addr, tls, app(), handle, limits).await }
        });
        let addr = handle.listening().await.expect("listening");
        /// Reads until the server closes the connection; how long that took (None: still open at 5 s).
        async fn closed_after<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<Duration> {
            let began = Instant::now();
            let mut sink = Vec::new();
            match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await
            {
                Ok(_) => Some(began.elapsed()),
                Err(_) => None,
            }
        }

        // No TLS handshake at all.
        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let waited = closed_after(&mut silent).await;
        assert!(
            waited.is_some(),
            "a connection without a TLS handshake was kept open"
        );

        // TLS done, headers never finished.
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                rustls::pki_types::CertificateDer::from_pem_slice(bundle.ca_cert.as_bytes())
                    .expect("ca pem"),
            )
            .expect("ca");
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut stream = connector.connect(name, tcp).await.expect("handshake");
        stream
            .write_all(
                b"POST /convert HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n",
            )
            .await
            .expect("half the headers");
        stream.flush().await.expect("flush");
        let waited = closed_after(&mut stream).await;
        assert!(
            waited.is_some(),
            "a request with unfinished headers was kept open"
        );

        // The server still answers a complete request.
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut stream = connector.connect(name, tcp).await.expect("handshake");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok();
        assert!(
            String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        handle.shutdown();
        server.await.expect("server task").expect("server");
    }

    /// Regression (issue 10, defect 7): the SidecarSet conflict check listed every SidecarSet through
    /// the rate-limited client on each request. It reads the Pod injector's watch cache: here there is
    /// no client at all, and the conflict with the cached SidecarSet is still found.
    #[tokio::test]
    async fn sidecarset_validation_reads_the_watch_cache() {
        use kube::runtime::reflector;
        use kube::runtime::watcher::Event;
        let sidecarset = |name: &str| {
            json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "containers": [{"name": "logtail", "image": "logtail:1"}]
                }
            })
        };
        let cached: SidecarSet = serde_json::from_value(
            Kind::SidecarSet
                .default_object(sidecarset("existing"))
                .expect("defaults"),
        )
        .expect("typed");
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(cached));
        writer.apply_watcher_event(&Event::InitDone);
        let (namespaces, _) = reflector::store();
        let pods = PodInjector::from_stores(
            store,
            namespaces,
            None,
            crate::pod::PodSettings::gates_off("kruise-system"),
        );
        let app = router(
            Metrics::register(&mut Registry::default()),
            None,
            Some(pods),
        );
        let new = Kind::SidecarSet
            .default_object(sidecarset("new"))
            .expect("defaults");
        let review = admission_review("CREATE", "SidecarSet", &new, None);
        let answer = post_review(app, "/validate-apps-kruise-io-sidecarset", &review).await;
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let message = answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains("spec.containers[0].name") && message.contains("existing"),
            "{message}"
        );
        drop(writer);
    }

    #[tokio::test]
    async fn validate_endpoint_answers_a_review() {
        let mut registry = Registry::default();
        let app = router(Metrics::register(&mut registry), None, None);
        let review = Review::of("apps.kruise.io", "v1beta1", "BroadcastJob", "broadcastjobs")
            .uid("u1")
            .namespace("d")
            .object(json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "BroadcastJob", "metadata": {"name": "j"},
                "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "b"}]}}}}))
            .json();
        let answer = post_review(app, "/validate-apps-kruise-io-broadcastjob", &review).await;
        assert_eq!(answer["response"]["uid"], "u1");
        assert_eq!(
            answer["response"]["allowed"], false,
            "restartPolicy defaults to Always: rejected"
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("kruise_webhook_requests_total{path=\"/validate-apps-kruise-io-broadcastjob\",result=\"denied\"} 1"), "{text}");
    }

    #[tokio::test]
    async fn pod_endpoint_without_caches_admits_unchanged_with_a_warning() {
        let mut registry = Registry::default();
        let app = router(Metrics::register(&mut registry), None, None);
        let review = Review::pod()
            .uid("u2")
            .namespace("d")
            .object(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "a", "image": "b"}]}}))
            .json();
        let answer = post_review(app, MUTATE_POD_PATH, &review).await;
        assert_eq!(answer["response"]["uid"], "u2");
        assert_eq!(answer["response"]["allowed"], true);
        assert!(answer["response"].get("patch").is_none(), "{answer}");
        assert!(answer["response"]["warnings"][0].is_string(), "{answer}");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(
                "kruise_webhook_requests_total{path=\"/mutate-pod\",result=\"skipped\"} 1"
            ),
            "{text}"
        );
    }
}
