//! A kube client over a scripted transport, for unit tests of the act layer: each request the code
//! under test sends is checked against the next step of a script (method and path) and answered
//! with that step's status and body, as Kubernetes tests its controllers' writes against fake
//! clients. Event writes (`events.k8s.io`) are answered and recorded apart, off the script.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One expected request and its answer.
#[derive(Clone, Debug)]
pub struct Step {
    pub method: Method,
    /// The request's path (without the query) must end with this.
    pub path: String,
    pub status: u16,
    pub body: Value,
}

impl Step {
    pub fn new(method: Method, path: &str, status: u16, body: Value) -> Self {
        Self {
            method,
            path: path.to_owned(),
            status,
            body,
        }
    }

    /// An API error answer (`Status` object) with `code`; a 422 is a JSON patch that did not apply.
    pub fn failing(method: Method, path: &str, code: u16) -> Self {
        let reason = match code {
            404 => "NotFound",
            409 => "Conflict",
            422 => "Invalid",
            _ => "InternalError",
        };
        let mut status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("scripted {code}"), "reason": reason, "code": code});
        if code == 422 {
            // What the apiserver answers a JSON patch whose `test` fails (the controllers' 422s):
            // this message, no cause.
            status["message"] =
                json!("the server rejected our request due to an error in our request");
        }
        Self::new(method, path, code, status)
    }
}

/// A request the code under test sent (its method and path matched the script's step).
#[derive(Clone, Debug)]
pub struct Sent {
    pub body: Value,
}

/// What the transport saw.
#[derive(Clone, Default)]
pub struct Log {
    inner: Arc<Mutex<LogInner>>,
}

#[derive(Default)]
struct LogInner {
    script: VecDeque<Step>,
    sent: Vec<Sent>,
    events: Vec<Value>,
    unexpected: Vec<String>,
}

impl Log {
    /// The requests sent on the script, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.inner
            .lock()
            .map(|l| l.sent.clone())
            .unwrap_or_default()
    }

    /// The Events written.
    pub fn events(&self) -> Vec<Value> {
        self.inner
            .lock()
            .map(|l| l.events.clone())
            .unwrap_or_default()
    }

    /// The reason and note of each Event written, in order (`""` for a field it lacks): what the
    /// reconcile tests assert on, read from the Event bodies the one way.
    pub fn reasons_and_notes(&self) -> Vec<(String, String)> {
        self.events()
            .iter()
            .map(|e| (text(e, "reason"), text(e, "note")))
            .collect()
    }

    /// The reason of each Event written, in order (`""` for one without).
    pub fn reasons(&self) -> Vec<String> {
        self.events().iter().map(|e| text(e, "reason")).collect()
    }

    /// Panics unless every step was used and no request went off the script.
    pub fn assert_done(&self) {
        let Ok(inner) = self.inner.lock() else {
            panic!("the script's log is poisoned");
        };
        assert!(
            inner.unexpected.is_empty(),
            "requests off the script: {:?}",
            inner.unexpected
        );
        assert!(
            inner.script.is_empty(),
            "steps never requested: {:?}",
            inner.script
        );
    }
}

/// A client whose requests follow `script`, and the log of what it sent.
pub fn client(script: Vec<Step>) -> (Client, Log) {
    let log = Log {
        inner: Arc::new(Mutex::new(LogInner {
            script: script.into(),
            ..LogInner::default()
        })),
    };
    let seen = log.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let seen = seen.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path().to_owned();
            let (status, answer) = answer(&seen, parts.method, path, body);
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(Bytes::from(answer.to_string().into_bytes())));
            response.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        }
    });
    (Client::new(service, "default"), log)
}

/// A string field of an Event body, `""` when it has none.
fn text(event: &Value, field: &str) -> String {
    event[field].as_str().unwrap_or_default().to_owned()
}

fn answer(log: &Log, method: Method, path: String, body: Value) -> (u16, Value) {
    let Ok(mut inner) = log.inner.lock() else {
        return (500, Value::Null);
    };
    if path.contains("/apis/events.k8s.io/") || path.ends_with("/events") {
        inner.events.push(body.clone());
        return (201, body);
    }
    let next = inner.script.front().cloned();
    match next {
        Some(step) if step.method == method && path.ends_with(&step.path) => {
            inner.script.pop_front();
            inner.sent.push(Sent { body });
            (step.status, step.body)
        }
        other => {
            inner.unexpected.push(format!(
                "{method} {path} (the script expected {:?})",
                other.map(|s| (s.method, s.path))
            ));
            (
                500,
                json!({"kind": "Status", "code": 500, "message": "off the script"}),
            )
        }
    }
}
