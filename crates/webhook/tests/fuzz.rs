//! Fuzzing of every admission handler, of `/convert` and of the expression and quantity parsers
//! (issue 10): arbitrary bytes, arbitrary JSON trees, and AdmissionReview / ConversionReview envelopes
//! carrying valid-ish objects of every kind (the examples, mutated at random places) or garbage. The
//! handlers are driven through the real axum router in-process, so the body limit and the JSON
//! extraction are exercised too. Nothing may panic; a stack overflow aborts the whole test process,
//! so a passing run also proves there was no abort.
//!
//! Case counts: `KRUISE_FUZZ_CASES` (per property; small by default so that `make test` stays quick,
//! `make fuzz` sets a large one). Each property prints its cases and handler executions.

use std::cell::Cell;
use std::sync::LazyLock;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use kruise_api::keys::{
    ANNOTATION_CONVERSION_V1ALPHA1_FIELDS, ANNOTATION_CONVERSION_V1BETA1_FIELDS,
};
use kruise_api::kinds::Kind;
use kruise_api::quantity::Quantity;
use kruise_api::sidecarset::resources_expr::{self, Resource};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_webhook::configuration::FailurePolicy;
use kruise_webhook::configuration::{CONVERT_PATH, MUTATE_POD_PATH, mutate_path, validate_path};
use kruise_webhook::metrics::Metrics;
use kruise_webhook::pod::{PodInjector, PodSettings};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

// ---- harness ---------------------------------------------------------------------------------------------

/// Cases per property: `KRUISE_FUZZ_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("KRUISE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

thread_local! {
    static EXECUTIONS: Cell<u64> = const { Cell::new(0) };
}

/// Runs `property` over `strategy` for [`cases`] cases and prints what ran.
fn fuzz<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let cases = cases(default_cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let began = Instant::now();
    EXECUTIONS.with(|e| e.set(0));
    let ran = Cell::new(0u64);
    let result = runner.run(&strategy, |input| {
        ran.set(ran.get() + 1);
        property(input)
    });
    let executions = EXECUTIONS.with(Cell::get);
    eprintln!(
        "fuzz {name}: {cases} cases, {} runs, {executions} handler executions, {:.1}s",
        ran.get(),
        began.elapsed().as_secs_f64()
    );
    if let Err(error) = result {
        panic!("fuzz {name}: {error}");
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Every POST endpoint of the server.
static PATHS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut paths = vec![MUTATE_POD_PATH.to_string(), CONVERT_PATH.to_string()];
    for &kind in Kind::ALL {
        paths.push(mutate_path(kind));
        paths.push(validate_path(kind));
    }
    paths
});

/// The router as the manager builds it, with a loaded Pod injector whose cache holds `sidecarsets`.
fn app(sidecarsets: Vec<SidecarSet>) -> Router {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for set in sidecarsets {
        writer.apply_watcher_event(&Event::InitApply(set));
    }
    writer.apply_watcher_event(&Event::InitDone);
    let (namespaces, mut ns_writer) = reflector::store();
    ns_writer.apply_watcher_event(&Event::Init);
    ns_writer.apply_watcher_event(&Event::InitDone);
    // The stores stay "ready" only while their writers live.
    std::mem::forget(writer);
    std::mem::forget(ns_writer);
    let pods = PodInjector::from_stores(
        store,
        namespaces,
        None,
        PodSettings {
            namespace: "kruise-system".into(),
            failure_policy: FailurePolicy::Fail,
            sort_sidecars_by_name: false,
            kruise_pod_readiness_gate: false,
            enhanced_liveness_probe: false,
        },
    );
    let mut registry = prometheus_client::registry::Registry::default();
    kruise_webhook::server::router(Metrics::register(&mut registry), None, Some(pods))
}

/// POSTs `body` to `path`: the status and the answer's body. A panic in a handler propagates.
fn post(rt: &tokio::runtime::Runtime, app: &Router, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    EXECUTIONS.with(|e| e.set(e.get() + 1));
    rt.block_on(async {
        let request = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("infallible");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, body.to_vec())
    })
}

/// A garbage body may be refused (4xx) but never fail the server (5xx).
fn check_garbage_answer(path: &str, status: u16) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(status, 200 | 400 | 413 | 415 | 422),
        "{path}: status {status}"
    );
    Ok(())
}

/// A review envelope is answered (200, with its uid) unless its object does not even decode (422).
fn check_review_answer(
    path: &str,
    uid: &str,
    status: u16,
    body: &[u8],
) -> Result<(), TestCaseError> {
    prop_assert!(matches!(status, 200 | 422), "{path}: status {status}");
    if status == 200 {
        let answer: Value = serde_json::from_slice(body)
            .map_err(|e| TestCaseError::fail(format!("{path}: answer is not JSON: {e}")))?;
        prop_assert_eq!(
            answer["response"]["uid"].as_str(),
            Some(uid),
            "{}: {}",
            path,
            answer
        );
    }
    Ok(())
}

// ---- inputs ----------------------------------------------------------------------------------------------

/// Strings that mean something to some parser.
const INTERESTING: &[&str] = &[
    "",
    "0",
    "-1",
    "1",
    "50%",
    "150%",
    "-5%",
    "%",
    "2147483648",
    "-2147483649",
    "1e9999",
    "10e2147483647",
    "1e-9999",
    "100m",
    "1Gi",
    "1.5",
    "0.0001n",
    "9999999999999999999999999999999999999999Ei",
    "+1",
    "007",
    "NaN",
    "apps.kruise.io/v1alpha1",
    "apps.kruise.io/v1beta1",
    "apps.kruise.io/v2",
    "v1",
    "CloneSet",
    "SidecarSet",
    "StatefulSet",
    "DaemonSet",
    "BroadcastJob",
    "UnitedDeployment",
    "Pod",
    "InPlaceIfPossible",
    "ReCreate",
    "Always",
    "Never",
    "OnFailure",
    "cpu",
    "memory",
    "max(cpu, 1)",
    "((((cpu))))",
    "- - - cpu",
    "cpu / 0",
    "{}",
    "[]",
    "{\"a\":",
    "null",
    "a=b,c!=d",
    "app in (a, b)",
    "!app",
    "*",
    "..",
    "/",
    "~1",
    "~0",
    "app",
    "nginx",
    "sum",
    "max",
];

/// Object keys: field names the types know, and anything.
fn key() -> impl Strategy<Value = String> {
    const KEYS: &[&str] = &[
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "annotations",
        "spec",
        "status",
        "replicas",
        "selector",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "template",
        "containers",
        "initContainers",
        "image",
        "env",
        "value",
        "resources",
        "limits",
        "requests",
        "cpu",
        "memory",
        "updateStrategy",
        "partition",
        "maxUnavailable",
        "maxSurge",
        "type",
        "rollingUpdate",
        "scaleStrategy",
        "podsToDelete",
        "lifecycle",
        "resourcesPolicy",
        "resourcesExpr",
        "targetContainersMode",
        "targetContainersNameRegex",
        "injectionStrategy",
        "revision",
        "patchPodMetadata",
        "namespaceSelector",
        "volumes",
        "topology",
        "subsets",
        "nodeSelectorTerm",
        "completionPolicy",
        "parallelism",
        "volumeClaimTemplates",
        "reserveOrdinals",
        "ownerReferences",
        "finalizers",
        ANNOTATION_CONVERSION_V1BETA1_FIELDS,
        ANNOTATION_CONVERSION_V1ALPHA1_FIELDS,
    ];
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => ".{0,8}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        ".{0,16}".prop_map(Value::from),
        prop::sample::select(INTERESTING).prop_map(Value::from),
    ]
}

/// An arbitrary JSON tree.
fn tree() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Every document of `examples/`, plus a Pod.
static EXAMPLES: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example readable");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("example YAML");
            if value.is_object() {
                docs.push(value);
            }
        }
    }
    assert!(docs.len() >= 12, "{} examples", docs.len());
    docs
});

/// Every JSON pointer into `value`.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let escaped = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Replace the node at a random place.
    Replace(Index, Value),
    /// Drop the node at a random place (null it when it is an array item).
    Remove(Index),
    /// Add a field to a random object.
    Insert(Index, String, Value),
    /// A conversion annotation with arbitrary (maybe JSON) text.
    Stash(bool, String),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), tree()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        1 => any::<Index>().prop_map(Mutation::Remove),
        2 => (any::<Index>(), key(), tree()).prop_map(|(i, k, v)| Mutation::Insert(i, k, v)),
        1 => (any::<bool>(), prop_oneof![tree().prop_map(|v| v.to_string()), ".{0,32}"])
            .prop_map(|(alpha, text)| Mutation::Stash(alpha, text)),
    ]
}

fn apply(mut doc: Value, mutations: &[Mutation]) -> Value {
    for mutation in mutations {
        let mut all = Vec::new();
        pointers(&doc, String::new(), &mut all);
        match mutation {
            Mutation::Replace(at, value) => {
                let pointer = at.get(&all);
                if let Some(slot) = doc.pointer_mut(pointer) {
                    *slot = value.clone();
                }
            }
            Mutation::Remove(at) => {
                let pointer = at.get(&all).clone();
                if let Some((parent, last)) = pointer.rsplit_once('/') {
                    match doc.pointer_mut(parent) {
                        Some(Value::Object(map)) => {
                            map.remove(&last.replace("~1", "/").replace("~0", "~"));
                        }
                        Some(Value::Array(items)) => {
                            if let Ok(i) = last.parse::<usize>()
                                && i < items.len()
                            {
                                items.remove(i);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Mutation::Insert(at, key, value) => {
                if let Some(Value::Object(map)) = doc.pointer_mut(at.get(&all).as_str()) {
                    map.insert(key.clone(), value.clone());
                }
            }
            Mutation::Stash(alpha, text) => {
                let key = if *alpha {
                    ANNOTATION_CONVERSION_V1ALPHA1_FIELDS
                } else {
                    ANNOTATION_CONVERSION_V1BETA1_FIELDS
                };
                if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
                    if let Some(map) = annotations.as_object_mut() {
                        map.insert(key.into(), Value::String(text.clone()));
                    }
                }
            }
        }
    }
    doc
}

/// A valid-ish object: an example with a few random mutations, at times switched to the other version.
fn object() -> impl Strategy<Value = Value> {
    (
        any::<Index>(),
        prop::collection::vec(mutation(), 0..4),
        prop::sample::select(&["keep", "apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1"][..]),
    )
        .prop_map(|(which, mutations, version)| {
            let mut doc = apply(which.get(&EXAMPLES).clone(), &mutations);
            if version != "keep"
                && let Some(map) = doc.as_object_mut()
            {
                map.insert("apiVersion".into(), Value::from(version));
            }
            doc
        })
}

/// An object of any kind: valid-ish most of the time, garbage otherwise.
fn any_object() -> impl Strategy<Value = Value> {
    prop_oneof![4 => object(), 1 => tree()]
}

/// The AdmissionReview the apiserver would send for `object` (and `old`) to `path`.
fn admission_review(operation: &str, object: Option<&Value>, old: Option<&Value>) -> Value {
    let source = object.or(old);
    let kind = source
        .and_then(|o| o.get("kind"))
        .cloned()
        .unwrap_or(Value::from("Pod"));
    let kind_name = kind.as_str().unwrap_or("Pod").to_string();
    let (group, version) = match source
        .and_then(|o| o.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .split_once('/')
    {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), "v1".to_string()),
    };
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz-uid",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": format!("{}s", kind_name.to_lowercase())},
            "operation": operation,
            "userInfo": {"username": "fuzz"},
            "name": source.and_then(|o| o.pointer("/metadata/name")).cloned().unwrap_or(Value::from("x")),
            "namespace": "fuzz",
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    })
}

fn conversion_review(desired: &str, objects: Vec<Value>) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "fuzz-uid", "desiredAPIVersion": desired, "objects": objects}
    })
}

fn operation() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["CREATE", "UPDATE", "UPDATE", "DELETE", "CONNECT"][..])
}

fn example_of_kind(kind: &str) -> Value {
    EXAMPLES
        .iter()
        .find(|d| d["kind"] == kind)
        .cloned()
        .unwrap_or_else(|| panic!("an example {kind}"))
}

/// A SidecarSet as the Pod injector's cache would hold one that bypassed validation: a
/// `resourcesExpr` of `expression` on its first container, injecting into every `app=nginx` Pod.
fn stored_sidecarset(name: &str, expression: &str) -> SidecarSet {
    let mut doc = example_of_kind("SidecarSet");
    doc["metadata"]["name"] = json!(name);
    doc["spec"]["selector"] = json!({"matchLabels": {"app": "nginx"}});
    if let Some(container) = doc["spec"]["containers"][0].as_object_mut() {
        container.remove("resources");
    }
    doc["spec"]["containers"][0]["resourcesPolicy"] = json!({
        "targetContainersMode": "sum",
        "targetContainersNameRegex": ".*",
        "resourcesExpr": {"limits": {"cpu": expression}, "requests": {"memory": expression}}
    });
    let v1beta1 = Kind::SidecarSet
        .convert(doc, "apps.kruise.io/v1beta1")
        .expect("converts");
    let defaulted = Kind::SidecarSet.default_object(v1beta1).expect("defaults");
    serde_json::from_value(defaulted).expect("typed SidecarSet")
}

/// A Pod the example SidecarSets match, with limits so that the expressions are evaluated.
fn nginx_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "fuzz", "labels": {"app": "nginx"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "512Mi"}}}]}
    })
}

// ---- properties ------------------------------------------------------------------------------------------

#[test]
fn arbitrary_bytes_on_every_endpoint() {
    let rt = runtime();
    let app = app(Vec::new());
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        // Truncated or spliced JSON envelopes.
        (any_object(), any::<Index>(), any::<Index>()).prop_map(|(object, cut, splice)| {
            let text = admission_review("CREATE", Some(&object), None)
                .to_string()
                .into_bytes();
            let at = cut.index(text.len() + 1);
            let mut bytes = text[..at].to_vec();
            bytes.extend_from_slice(&text[splice.index(text.len() + 1)..]);
            bytes
        }),
    ];
    fuzz(
        "arbitrary bytes",
        1000,
        (any::<Index>(), body),
        |(path, body)| {
            let path = path.get(&PATHS);
            let (status, _) = post(&rt, &app, path, body);
            check_garbage_answer(path, status)
        },
    );
}

#[test]
fn arbitrary_json_on_every_endpoint() {
    let rt = runtime();
    let app = app(Vec::new());
    fuzz(
        "arbitrary JSON trees",
        1000,
        (any::<Index>(), tree()),
        |(path, tree)| {
            let path = path.get(&PATHS);
            let (status, _) = post(&rt, &app, path, tree.to_string().into_bytes());
            check_garbage_answer(path, status)
        },
    );
}

#[test]
fn admission_reviews_of_every_kind_on_every_handler() {
    let rt = runtime();
    let app = app(vec![stored_sidecarset("sized", "max(cpu * 50%, 50m)")]);
    let strategy = (
        operation(),
        prop::option::weighted(0.9, any_object()),
        prop::option::of(any_object()),
    );
    fuzz(
        "admission reviews",
        400,
        strategy,
        |(operation, object, old)| {
            let review = admission_review(operation, object.as_ref(), old.as_ref());
            let body = review.to_string().into_bytes();
            // Each of the kind's own handlers, and the Pod webhook.
            let kind = object
                .as_ref()
                .or(old.as_ref())
                .and_then(|o| o["kind"].as_str());
            let mut paths = vec![MUTATE_POD_PATH.to_string()];
            match kind.and_then(|k| Kind::from_kind(k).ok()) {
                Some(kind) => {
                    paths.push(mutate_path(kind));
                    paths.push(validate_path(kind));
                }
                None => {
                    paths.push(mutate_path(Kind::CloneSet));
                    paths.push(validate_path(Kind::SidecarSet));
                }
            }
            for path in &paths {
                let (status, answer) = post(&rt, &app, path, body.clone());
                check_review_answer(path, "fuzz-uid", status, &answer)?;
            }
            Ok(())
        },
    );
}

#[test]
fn pods_against_stored_sidecarsets() {
    let rt = runtime();
    // SidecarSets with random expressions that may never have been validated.
    let expression = prop_oneof![
        "[-+*/(), 0-9.eE%mkMGTPi]{0,40}",
        "(cpu|memory|max|min|[-+*/(), 0-9.%]|[0-9]+(m|Mi|Gi|k|e3)){0,24}",
        ".{0,24}",
    ];
    let pod = (prop::collection::vec(mutation(), 0..3)).prop_map(|m| apply(nginx_pod(), &m));
    fuzz(
        "Pods against stored SidecarSets",
        150,
        (expression, pod),
        |(expression, pod)| {
            let app = app(vec![stored_sidecarset("fuzzed", &expression)]);
            let review = admission_review("CREATE", Some(&pod), None);
            let (status, answer) =
                post(&rt, &app, MUTATE_POD_PATH, review.to_string().into_bytes());
            check_review_answer(MUTATE_POD_PATH, "fuzz-uid", status, &answer)
        },
    );
}

#[test]
fn conversion_reviews() {
    let rt = runtime();
    let app = app(Vec::new());
    let desired = prop::sample::select(
        &[
            "apps.kruise.io/v1alpha1",
            "apps.kruise.io/v1beta1",
            "apps.kruise.io/v2",
            "",
        ][..],
    );
    let strategy = (desired, prop::collection::vec(any_object(), 0..4));
    fuzz("conversion reviews", 400, strategy, |(desired, objects)| {
        let review = conversion_review(desired, objects);
        let (status, answer) = post(&rt, &app, CONVERT_PATH, review.to_string().into_bytes());
        prop_assert!(matches!(status, 200 | 422), "status {status}");
        if status == 200 {
            let answer: Value = serde_json::from_slice(&answer).expect("JSON answer");
            prop_assert_eq!(answer["response"]["uid"].as_str(), Some("fuzz-uid"));
        }
        Ok(())
    });
}

/// The expression and quantity parsers directly, on strings near their grammar and on anything.
#[test]
fn expression_and_quantity_parsers() {
    let expression = prop_oneof![
        "[-+*/(), 0-9.eE%mkMGTPi]{0,64}",
        "(cpu|memory|max|min|MAX|[-+*/(), 0-9.%]|[0-9]+(m|Mi|Gi|k|e3|e-3|%)){0,32}",
        ".{0,32}",
    ];
    let quantity = prop_oneof![
        "[-+]?[0-9.]{0,24}([eEinumkKMGTP]{0,2}[-+]?[0-9]{0,12})?",
        "[-+0-9.eEinumkKMGTP]{0,24}",
        "[-+]?[0-9]{1,3}[eE][-+]?[0-9]{8,10}",
        ".{0,12}",
        prop::sample::select(INTERESTING).prop_map(str::to_string),
    ];
    let strategy = (expression, quantity.clone(), quantity, any::<bool>());
    fuzz(
        "expression and quantity parsers",
        2000,
        strategy,
        |(expression, a, b, cpu)| {
            EXECUTIONS.with(|e| e.set(e.get() + 1));
            let parsed: Vec<Quantity> = [&a, &b]
                .iter()
                .filter_map(|t| Quantity::parse(t).ok())
                .collect();
            for q in &parsed {
                let _ = (q.canonical(), q.go_string(), q.as_f64(), q.is_negative());
                let mut rounded = q.clone();
                rounded.round_up_to_milli();
                let _ = rounded.canonical();
                // Canonical form parses back to the same value.
                let back = Quantity::parse(&q.canonical());
                prop_assert!(back.is_ok(), "{} -> {:?}", q.canonical(), back);
                let resource = if cpu { Resource::Cpu } else { Resource::Memory };
                let _ = resources_expr::evaluate(&expression, resource, q).map(|v| v.canonical());
            }
            if let [x, y] = &parsed[..] {
                let _ = (x.cmp_value(y), x.checked_add(y).map(|s| s.canonical()));
            }
            Ok(())
        },
    );
}

// ---- fixed hostile cases ---------------------------------------------------------------------------------

/// `depth` nested arrays, or objects, around `inner`.
fn nested(depth: usize, objects: bool, inner: &str) -> String {
    let (open, close) = if objects {
        ("{\"a\":", "}")
    } else {
        ("[", "]")
    };
    format!("{}{inner}{}", open.repeat(depth), close.repeat(depth))
}

#[test]
fn depth_10000_json_on_every_endpoint() {
    let rt = runtime();
    let app = app(Vec::new());
    for objects in [false, true] {
        let deep = nested(10_000, objects, "1");
        // Bare, and as the object of an otherwise well-formed review.
        let in_review = admission_review("CREATE", Some(&json!({"kind": "CloneSet"})), None)
            .to_string()
            .replace(r#"{"kind":"CloneSet"}"#, &deep);
        let in_conversion = conversion_review("apps.kruise.io/v1beta1", vec![json!("X")])
            .to_string()
            .replace(r#""X""#, &deep);
        for path in PATHS.iter() {
            for body in [&deep, &in_review, &in_conversion] {
                let (status, _) = post(&rt, &app, path, body.clone().into_bytes());
                assert!(matches!(status, 400 | 422), "{path}: {status}");
            }
        }
    }
}

/// Depth just under serde_json's limit, in the object and again inside a conversion annotation that
/// conversion parses and splices into the object: answered, within the handlers' stack.
#[test]
fn near_limit_depth_objects_and_stashes_are_answered() {
    let rt = runtime();
    let app = app(Vec::new());
    for kind in [
        "CloneSet",
        "SidecarSet",
        "StatefulSet",
        "DaemonSet",
        "BroadcastJob",
        "UnitedDeployment",
    ] {
        let mut object = example_of_kind(kind);
        let deep: Value = serde_json::from_str(&nested(110, true, "1")).expect("deep");
        object["spec"]["template"]["metadata"]["x-deep"] = deep.clone();
        let stash = nested(120, true, "1");
        object["metadata"]["annotations"] = json!({
            ANNOTATION_CONVERSION_V1BETA1_FIELDS: format!("{{\"updateStrategy\":{stash},\"x\":{stash}}}"),
            ANNOTATION_CONVERSION_V1ALPHA1_FIELDS: format!("{{\"scaleStrategy\":{stash},\"x\":{stash}}}"),
        });
        let kind = Kind::from_kind(kind).expect("kind");
        for version in ["apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1"] {
            object["apiVersion"] = json!(version);
            let review = admission_review("CREATE", Some(&object), Some(&object)).to_string();
            for path in [mutate_path(kind), validate_path(kind)] {
                let (status, answer) = post(&rt, &app, &path, review.clone().into_bytes());
                assert!(matches!(status, 200 | 422), "{path}: {status}");
                if status == 200 {
                    let answer: Value = serde_json::from_slice(&answer).expect("JSON");
                    assert_eq!(answer["response"]["uid"], "fuzz-uid");
                }
            }
            for desired in ["apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1"] {
                let review = conversion_review(desired, vec![object.clone()]).to_string();
                let (status, _) = post(&rt, &app, CONVERT_PATH, review.into_bytes());
                assert!(
                    matches!(status, 200 | 422),
                    "{kind:?} to {desired}: {status}"
                );
            }
        }
    }
}

#[test]
fn three_mib_bodies_on_every_endpoint() {
    let rt = runtime();
    let app = app(Vec::new());
    let pad = "x".repeat(3 * 1024 * 1024);
    let garbage = vec![b'['; 3 * 1024 * 1024];
    for path in PATHS.iter() {
        let (status, _) = post(&rt, &app, path, garbage.clone());
        assert!(matches!(status, 400 | 422), "{path}: {status}");
    }
    for doc in EXAMPLES.iter() {
        let mut object = doc.clone();
        let annotations = object["metadata"]
            .as_object_mut()
            .expect("metadata")
            .entry("annotations")
            .or_insert_with(|| json!({}));
        annotations["pad"] = json!(pad);
        let review = admission_review("UPDATE", Some(&object), Some(doc)).to_string();
        assert!(review.len() > 3 * 1024 * 1024);
        let kind = doc["kind"].as_str().unwrap_or_default();
        let paths = match Kind::from_kind(kind) {
            Ok(kind) => vec![mutate_path(kind), validate_path(kind)],
            Err(_) => vec![MUTATE_POD_PATH.to_string()],
        };
        for path in paths {
            let (status, answer) = post(&rt, &app, &path, review.clone().into_bytes());
            assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&answer));
            let answer: Value = serde_json::from_slice(&answer).expect("JSON");
            assert_eq!(answer["response"]["uid"], "fuzz-uid", "{path}");
        }
        if Kind::from_kind(kind).is_ok() {
            let review = conversion_review("apps.kruise.io/v1alpha1", vec![object]).to_string();
            let (status, _) = post(&rt, &app, CONVERT_PATH, review.into_bytes());
            assert_eq!(status, 200, "{kind}");
        }
    }
}

/// Regression (issue 10, defect 1): a SidecarSet stored before validation bounded its expressions
/// (100,000 nested parentheses, ~200 KB) crashed the process on every matching Pod creation.
/// Injection now refuses the Pod, naming the SidecarSet's field, and the process lives on.
#[test]
fn a_stored_deep_expression_does_not_crash_injection() {
    let rt = runtime();
    for deep in [
        format!("{}cpu{}", "(".repeat(100_000), ")".repeat(100_000)),
        format!("{}cpu", "-".repeat(100_000)),
        format!("{}cpu{}", "(".repeat(500), ")".repeat(500)),
    ] {
        let app = app(vec![stored_sidecarset("deep", &deep)]);
        let review = admission_review("CREATE", Some(&nginx_pod()), None);
        let (status, answer) = post(&rt, &app, MUTATE_POD_PATH, review.to_string().into_bytes());
        assert_eq!(status, 200);
        let answer: Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let message = answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            message.contains("deep") && message.contains("resourcesExpr"),
            "{message}"
        );
    }
}
