//! How many writes one reconcile has in flight: enough that a rollout of 1,000 Pods is not sent one
//! request after another, few enough not to pile up behind the client's rate limiter.

use futures::StreamExt;

/// Writes in flight at once within one reconcile.
pub const PARALLEL_WRITES: usize = 16;

/// Runs `writes` [`PARALLEL_WRITES`] at a time; the results come in completion order.
pub async fn in_parallel<F: Future>(writes: Vec<F>) -> Vec<F::Output> {
    futures::stream::iter(writes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect()
        .await
}
