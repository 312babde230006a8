//! Image pre-pulling in the manager (upstream `pkg/controller/{nodeimage,imagepulljob,imagelistpulljob}`):
//! one NodeImage per Node kept by [`nodeimage`]; ImagePullJobs asking NodeImages for their image
//! ([`job`]); ImageListPullJobs creating one ImagePullJob per image ([`list`]). kruise-daemon pulls what
//! its NodeImage lists and reports per tag.

pub mod job;
pub mod list;
pub mod nodeimage;

use std::sync::Arc;

use kube::Client;

use crate::driver::caches::Caches;
use crate::metrics::Metrics;

/// The namespace kruise-daemon reads pull secrets from (upstream's `kruise-daemon-config`).
pub const DAEMON_CONFIG_NAMESPACE: &str = "kruise-daemon-config";

/// Settings of the image controllers.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where pull secrets are copied for the daemons.
    pub daemon_config_namespace: String,
    /// `--default-ttlseconds-for-always-nodeimage`: added to the TTL of tags of Always jobs (300 s
    /// by default, as OpenKruise's manager).
    pub default_ttl_always: i32,
    /// Concurrent reconciles of ImagePullJobs (`--imagepulljob-workers`, 3 as OpenKruise's).
    pub workers: u16,
    /// Concurrent reconciles of NodeImages (`--nodeimage-workers`, 3 as OpenKruise's).
    pub nodeimage_workers: u16,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            daemon_config_namespace: DAEMON_CONFIG_NAMESPACE.into(),
            default_ttl_always: 300,
            workers: 3,
            nodeimage_workers: 3,
        }
    }
}

/// Runs the three controllers until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    tokio::join!(
        nodeimage::run(
            client.clone(),
            &caches,
            metrics.clone(),
            config.nodeimage_workers
        ),
        job::run(client.clone(), &caches, metrics.clone(), config),
        list::run(client, &caches, metrics),
    );
}
