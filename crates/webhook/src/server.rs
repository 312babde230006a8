//! The HTTPS server: admission endpoints per kind, `/convert` and `/healthz`, over rustls with a
//! certificate that can be swapped while serving.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use kruise_api::kinds::Kind;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::core::conversion::ConversionReview;

use crate::configuration::{CONVERT_PATH, MUTATE_POD_PATH, mutate_path, validate_path};
use crate::metrics::Metrics;

/// Builds the router. Handlers are pure functions of the request (see `admission` and `convert`); the
/// client, when given, reads the other SidecarSets for the SidecarSet conflict check. `pods` serves
/// `/mutate-pod` (SidecarSet injection); without it every Pod is admitted unchanged, with a warning.
pub fn router(
    metrics: Metrics,
    client: Option<kube::Client>,
    pods: Option<crate::pod::PodInjector>,
) -> Router {
    let pods = pods.unwrap_or_else(|| {
        crate::pod::PodInjector::without_caches(crate::pod::PodSettings {
            namespace: String::new(),
            failure_policy: crate::configuration::FailurePolicy::Ignore,
            sort_sidecars_by_name: false,
        })
    });
    let mut router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            MUTATE_POD_PATH,
            post(
                move |State(metrics): State<Metrics>,
                      Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    let began = Instant::now();
                    let (answer, outcome) = pods.review(review).await;
                    metrics.observe(
                        MUTATE_POD_PATH,
                        outcome.label(),
                        began.elapsed().as_secs_f64(),
                    );
                    Json(answer.review)
                },
            ),
        );
    for &kind in Kind::ALL {
        let path = mutate_path(kind);
        let label = path.clone();
        router = router.route(
            &path,
            post(
                move |State(metrics): State<Metrics>,
                      Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    let began = Instant::now();
                    let answer = crate::admission::mutate(kind, review);
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
        let client = client.clone();
        router = router.route(
            &path,
            post(
                move |State(metrics): State<Metrics>,
                      Json(review): Json<AdmissionReview<DynamicObject>>| async move {
                    let began = Instant::now();
                    let cluster = match (kind, &client) {
                        (Kind::SidecarSet, Some(client)) => match list_sidecarsets(client).await {
                            Ok(sidecarsets) => crate::admission::Cluster { sidecarsets },
                            Err(error) => {
                                tracing::warn!(%error, "cannot list SidecarSets for the conflict check");
                                let answer = crate::admission::unavailable(review, &error);
                                metrics.observe(&label, "denied", began.elapsed().as_secs_f64());
                                return Json(answer.review);
                            }
                        },
                        _ => crate::admission::Cluster::default(),
                    };
                    let answer = crate::admission::validate(kind, review, &cluster);
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
        .with_state(metrics)
}

async fn list_sidecarsets(
    client: &kube::Client,
) -> Result<Vec<kruise_api::sidecarset::v1beta1::SidecarSet>, kube::Error> {
    let api: kube::Api<kruise_api::sidecarset::v1beta1::SidecarSet> =
        kube::Api::all(client.clone());
    Ok(api.list(&Default::default()).await?.items)
}

/// Installs the process-wide rustls crypto provider (ring). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Serves `router` with TLS on `addr` until `handle` is shut down.
pub async fn serve(
    addr: SocketAddr,
    tls: RustlsConfig,
    router: Router,
    handle: Handle<SocketAddr>,
) -> std::io::Result<()> {
    tracing::info!(%addr, "webhook server listening");
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router.into_make_service())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::BodyExt;
    use prometheus_client::registry::Registry;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    /// POSTs an AdmissionReview to `path` and returns the decoded answer (status 200 asserted).
    async fn post_review(app: axum::Router, path: &str, review: &Value) -> Value {
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(review.to_string()))
            .expect("request");
        let response = app.oneshot(request).await.expect("response");
        assert_eq!(response.status(), 200);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        serde_json::from_slice(&body).expect("json")
    }

    #[tokio::test]
    async fn validate_endpoint_answers_a_review() {
        let mut registry = Registry::default();
        let app = router(Metrics::register(&mut registry), None, None);
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "apps.kruise.io", "version": "v1beta1", "kind": "BroadcastJob"},
                "resource": {"group": "apps.kruise.io", "version": "v1beta1", "resource": "broadcastjobs"},
                "operation": "CREATE", "userInfo": {}, "name": "j", "namespace": "d",
                "object": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "BroadcastJob", "metadata": {"name": "j"},
                    "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "b"}]}}}},
                "dryRun": false
            }
        });
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
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u2",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE", "userInfo": {}, "name": "p", "namespace": "d",
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "nginx"}},
                    "spec": {"containers": [{"name": "a", "image": "b"}]}},
                "dryRun": false
            }
        });
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
