//! Figures from the apiserver's own `/metrics`: what every client (kruise-manager, kubelet-sim, the
//! scheduler, the garbage collector, the bench) asked of it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kruise_testkit::eventually;
use kube::Client;

use crate::prom;

/// The apiserver's `/metrics` text (retried for up to 30 s: the apiserver may be busy).
pub async fn metrics_text(client: &Client) -> anyhow::Result<String> {
    eventually(
        "the apiserver's /metrics",
        Duration::from_secs(30),
        || async {
            let request = http::Request::get("/metrics").body(Vec::new())?;
            Ok(Some(client.request_text(request).await?))
        },
    )
    .await
}

/// `VERB pods[/subresource]`, followed by ` refused` when the response `code` was 400 or more.
fn write_key(verb: &str, subresource: &str, code: u64) -> String {
    let refused = if code >= 400 { " refused" } else { "" };
    match subresource {
        "" => format!("{verb} pods{refused}"),
        subresource => format!("{verb} pods/{subresource}{refused}"),
    }
}

/// The samples of `apiserver_request_total` in `text` summed under the key `key_of` gives each
/// (those it gives none are left out).
fn count_requests(
    text: &str,
    key_of: impl Fn(&prom::Sample) -> Option<String>,
) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for sample in prom::samples(text, "apiserver_request_total") {
        if let Some(key) = key_of(&sample) {
            *counts.entry(key).or_insert(0.0) += sample.value;
        }
    }
    counts
}

/// The counts of `now` that grew since `before`, by how much.
fn counts_since(
    now: &BTreeMap<String, f64>,
    before: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    now.iter()
        .map(|(key, value)| {
            let delta = value - before.get(key).copied().unwrap_or(0.0);
            (key.clone(), delta)
        })
        .filter(|(_, delta)| *delta > 0.0)
        .collect()
}

/// Every request `apiserver_request_total` counts (reads, watches and writes of every resource, by
/// every client), by `VERB resource[/subresource]` with the API group before the resource when it
/// has one: what the apiserver served, beyond the Pod writes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Requests(pub BTreeMap<String, f64>);

impl Requests {
    pub fn parse(text: &str) -> Self {
        Self(count_requests(text, |sample| {
            let resource = match (sample.label("group"), sample.label("subresource")) {
                ("", "") => sample.label("resource").to_string(),
                ("", sub) => format!("{}/{sub}", sample.label("resource")),
                (group, "") => format!("{group}/{}", sample.label("resource")),
                (group, sub) => format!("{group}/{}/{sub}", sample.label("resource")),
            };
            Some(format!("{} {resource}", sample.label("verb")))
        }))
    }

    pub async fn read(client: &Client) -> anyhow::Result<Self> {
        Ok(Self::parse(&metrics_text(client).await?))
    }

    /// The requests made since `before`.
    pub fn since(&self, before: &Requests) -> Self {
        Self(counts_since(&self.0, &before.0))
    }

    /// The `n` most made, "PATCH pods/status 50000, POST events 10000, …".
    pub fn describe_top(&self, n: usize) -> String {
        let mut counts: Vec<(&String, &f64)> = self.0.iter().collect();
        counts.sort_by(|a, b| b.1.total_cmp(a.1));
        counts
            .iter()
            .take(n)
            .map(|(key, count)| format!("{key} {count:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The requests `apiserver_request_total` counts for some resources (of any group), by
/// `VERB resource[/subresource] CODE`: how a policy's status was read and written, conflicts (409)
/// apart from the writes that landed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceRequests(pub BTreeMap<String, f64>);

impl ResourceRequests {
    /// The counts in `text` (the apiserver's `/metrics`) for `resources` (plural names).
    pub fn parse(text: &str, resources: &[&str]) -> Self {
        Self(count_requests(text, |sample| {
            let resource = sample.label("resource");
            if !resources.contains(&resource) || sample.label("verb") == "WATCH" {
                return None;
            }
            let path = match sample.label("subresource") {
                "" => resource.to_string(),
                sub => format!("{resource}/{sub}"),
            };
            Some(format!(
                "{} {path} {}",
                sample.label("verb"),
                sample.label("code")
            ))
        }))
    }

    pub async fn read(client: &Client, resources: &[&str]) -> anyhow::Result<Self> {
        Ok(Self::parse(&metrics_text(client).await?, resources))
    }

    /// The requests made since `before`.
    pub fn since(&self, before: &ResourceRequests) -> Self {
        Self(counts_since(&self.0, &before.0))
    }

    /// One line: "PATCH workloadspreads/status 200: 120, PATCH workloadspreads/status 409: 3".
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(|(key, count)| format!("{key}: {count:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Writes to Pods counted by `apiserver_request_total`, by `VERB pods[/subresource]`, refused ones
/// (a response code of 400 or more) apart under the same key followed by ` refused`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodWrites(pub BTreeMap<String, f64>);

impl PodWrites {
    /// The counts in `text` (the apiserver's `/metrics`).
    pub fn parse(text: &str) -> Self {
        Self(count_requests(text, |sample| {
            if !sample.label("group").is_empty() || sample.label("resource") != "pods" {
                return None;
            }
            let verb = sample.label("verb");
            // The apiserver labels a create POST and an update PUT.
            if !matches!(verb, "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE") {
                return None;
            }
            let code = sample.label("code").parse().unwrap_or(0);
            Some(write_key(verb, sample.label("subresource"), code))
        }))
    }

    /// The current counts.
    pub async fn read(client: &Client) -> anyhow::Result<Self> {
        Ok(Self::parse(&metrics_text(client).await?))
    }

    /// The writes made since `before` (kinds without new writes left out).
    pub fn since(&self, before: &PodWrites) -> Self {
        Self(counts_since(&self.0, &before.0))
    }

    /// The writes to Pods by kruise-manager (the `manager-N` identities) in the apiserver's audit
    /// log `text` (one JSON event per line), by `VERB pods[/subresource]` as [`Self::parse`] names
    /// them; refused writes (a lost race: conflict, failed `test`) count too, as they do in
    /// `apiserver_request_total`, under their own key ending in ` refused`.
    pub fn parse_audit(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for event in text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            let field = |path: &str| event.pointer(path).and_then(|v| v.as_str()).unwrap_or("");
            if field("/stage") != "ResponseComplete"
                || !field("/user/username").starts_with("manager-")
                || field("/objectRef/resource") != "pods"
                || !field("/objectRef/apiGroup").is_empty()
            {
                continue;
            }
            let verb = match field("/verb") {
                "create" => "POST",
                "update" => "PUT",
                "patch" => "PATCH",
                "delete" => "DELETE",
                _ => continue,
            };
            let code = event
                .pointer("/responseStatus/code")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            let key = write_key(verb, field("/objectRef/subresource"), code);
            *counts.entry(key).or_insert(0.0) += 1.0;
        }
        Self(counts)
    }

    /// kruise-manager's writes to Pods so far, from the control plane's audit log.
    pub fn read_manager(plane: &kruise_testkit::control_plane::ControlPlane) -> Self {
        Self::parse_audit(&std::fs::read_to_string(plane.audit_log_path()).unwrap_or_default())
    }

    pub fn total(&self) -> f64 {
        // (An empty f64 sum is -0.0.)
        self.0.values().sum::<f64>() + 0.0
    }

    /// Prints the total and each kind of write, also per Pod (`pods` Pods).
    pub fn print(&self, pods: f64) {
        self.print_as("apiserver Pod writes", pods);
    }

    /// [`Self::print`] under another heading.
    pub fn print_as(&self, heading: &str, pods: f64) {
        let total = self.total();
        println!("  {heading}: {total:.0} ({:.2} per Pod)", total / pods);
        for (key, count) in &self.0 {
            println!("    {key}: {count:.0} ({:.2} per Pod)", count / pods);
        }
    }
}

/// A phase timed from its start, with the apiserver's Pod writes counted from then. The workload
/// benches each read the writes, started the clock, acted, waited and printed the time and the
/// writes since; this does the reading and the clock the same way for all of them.
pub struct TimedWrites {
    before: PodWrites,
    began: Instant,
}

impl TimedWrites {
    /// Reads the Pod writes so far, then starts the clock (so the read is not timed).
    pub async fn start(client: &Client) -> anyhow::Result<Self> {
        let before = PodWrites::read(client).await?;
        Ok(Self {
            before,
            began: Instant::now(),
        })
    }

    /// The time since [`Self::start`].
    pub fn took(&self) -> Duration {
        self.began.elapsed()
    }

    /// Prints the Pod writes made since [`Self::start`] ([`PodWrites::print`], `pods` Pods).
    pub async fn print_writes(&self, client: &Client, pods: f64) -> anyhow::Result<()> {
        PodWrites::read(client)
            .await?
            .since(&self.before)
            .print(pods);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_pod_writes_from_the_audit_log() {
        let line = |user: &str, verb: &str, subresource: &str, stage: &str| {
            serde_json::json!({"stage": stage, "verb": verb, "user": {"username": user},
                "objectRef": {"resource": "pods", "subresource": subresource, "apiVersion": "v1"},
                "responseStatus": {"code": 200}})
            .to_string()
        };
        let refused = serde_json::json!({"stage": "ResponseComplete", "verb": "patch",
            "user": {"username": "manager-1"}, "responseStatus": {"code": 422},
            "objectRef": {"resource": "pods", "subresource": "status", "apiVersion": "v1"}})
        .to_string();
        let text = [
            refused,
            line("manager-0", "patch", "status", "ResponseComplete"),
            line("manager-0", "patch", "", "ResponseComplete"),
            line("manager-0", "patch", "", "ResponseComplete"),
            line("manager-0", "create", "", "ResponseComplete"),
            line("manager-0", "patch", "", "ResponseStarted"),
            line(
                "system:serviceaccount:kruise-system:kruise-manager",
                "patch",
                "",
                "ResponseComplete",
            ),
            "not json".to_owned(),
        ]
        .join("\n");
        let writes = PodWrites::parse_audit(&text);
        assert_eq!(
            writes.0,
            BTreeMap::from([
                ("PATCH pods".to_owned(), 2.0),
                ("PATCH pods/status".to_owned(), 1.0),
                ("PATCH pods/status refused".to_owned(), 1.0),
                ("POST pods".to_owned(), 1.0),
            ])
        );
    }

    #[test]
    fn requests_by_verb_group_and_resource() {
        let text = r#"
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps.kruise.io",resource="clonesets",scope="resource",subresource="status",verb="PATCH",version="v1beta1"} 2
"#;
        let before = Requests::parse(text);
        assert_eq!(before.0.get("PATCH pods/status"), Some(&8.0));
        assert_eq!(before.0.get("POST events.k8s.io/events"), Some(&3.0));
        assert_eq!(
            before.0.get("PATCH apps.kruise.io/clonesets/status"),
            Some(&2.0)
        );
        let mut now = before.clone();
        now.0.insert("PATCH pods/status".into(), 20.0);
        now.0.insert("POST events.k8s.io/events".into(), 4.0);
        let since = now.since(&before);
        assert_eq!(since.0.len(), 2);
        assert_eq!(since.describe_top(1), "PATCH pods/status 12");
        assert_eq!(
            since.describe_top(5),
            "PATCH pods/status 12, POST events.k8s.io/events 1"
        );
    }

    #[test]
    fn pod_writes_by_verb_and_subresource() {
        let text = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 99
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 3
"#;
        let writes = PodWrites::parse(text);
        let want: BTreeMap<String, f64> = [
            ("POST pods", 10.0),
            ("PATCH pods/status", 4.0),
            ("PATCH pods/status refused", 1.0),
            ("POST pods/binding", 3.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(writes.0, want);
        assert_eq!(writes.total(), 18.0);
        let before = PodWrites(
            [
                ("POST pods".to_string(), 4.0),
                ("POST pods/binding".to_string(), 3.0),
            ]
            .into_iter()
            .collect(),
        );
        let delta = writes.since(&before);
        assert_eq!(delta.0.get("POST pods"), Some(&6.0));
        assert_eq!(delta.0.get("POST pods/binding"), None);
        assert_eq!(delta.total(), 11.0);
    }
}
