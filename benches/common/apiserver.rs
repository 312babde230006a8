//! Figures from the apiserver's own `/metrics`: what every client (kruise-manager, kubelet-sim, the
//! scheduler, the garbage collector, the bench) asked of it.

use std::collections::BTreeMap;
use std::time::Duration;

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

/// Writes to Pods counted by `apiserver_request_total`, by `VERB pods[/subresource]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodWrites(pub BTreeMap<String, f64>);

impl PodWrites {
    /// The counts in `text` (the apiserver's `/metrics`).
    pub fn parse(text: &str) -> Self {
        let mut counts = BTreeMap::new();
        for sample in prom::samples(text, "apiserver_request_total") {
            if !sample.label("group").is_empty() || sample.label("resource") != "pods" {
                continue;
            }
            let verb = sample.label("verb");
            // The apiserver labels a create POST and an update PUT.
            if !matches!(verb, "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE") {
                continue;
            }
            let key = match sample.label("subresource") {
                "" => format!("{verb} pods"),
                subresource => format!("{verb} pods/{subresource}"),
            };
            *counts.entry(key).or_insert(0.0) += sample.value;
        }
        Self(counts)
    }

    /// The current counts.
    pub async fn read(client: &Client) -> anyhow::Result<Self> {
        Ok(Self::parse(&metrics_text(client).await?))
    }

    /// The writes made since `before` (kinds without new writes left out).
    pub fn since(&self, before: &PodWrites) -> Self {
        Self(
            self.0
                .iter()
                .map(|(key, value)| {
                    let delta = value - before.0.get(key).copied().unwrap_or(0.0);
                    (key.clone(), delta)
                })
                .filter(|(_, delta)| *delta > 0.0)
                .collect(),
        )
    }

    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }

    /// Prints the total and each kind of write, also per Pod (`pods` Pods).
    pub fn print(&self, pods: f64) {
        let total = self.total();
        println!(
            "  apiserver Pod writes: {total:.0} ({:.2} per Pod)",
            total / pods
        );
        for (key, count) in &self.0 {
            println!("    {key}: {count:.0} ({:.2} per Pod)", count / pods);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("PATCH pods/status", 5.0),
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
