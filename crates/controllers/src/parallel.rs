//! How many writes one reconcile has in flight: enough that a rollout of 1,000 Pods is not sent one
//! request after another, few enough not to pile up behind the client's rate limiter.

use futures::StreamExt;

/// Writes in flight at once within one reconcile.
pub const PARALLEL_WRITES: usize = 16;

/// Pods one reconcile writes to; a larger step is done in rounds, each writing the status before
/// the next begins (the next round is queued at once). This keeps a reconcile of a 1,000-Pod
/// workload from holding a worker, and the status from lagging behind the Pods, for as long as
/// hundreds of writes take behind the client's rate limit.
pub const PODS_PER_ROUND: usize = 100;

/// Keeps the first [`PODS_PER_ROUND`] of `items` (the decided order is kept); whether any were
/// left for the next round.
pub fn this_round<T>(items: &mut Vec<T>) -> bool {
    let more = items.len() > PODS_PER_ROUND;
    items.truncate(PODS_PER_ROUND);
    more
}

/// Runs `writes` [`PARALLEL_WRITES`] at a time; the results come in completion order.
pub async fn in_parallel<F: Future>(writes: Vec<F>) -> Vec<F::Output> {
    futures::stream::iter(writes)
        .buffer_unordered(PARALLEL_WRITES)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_keeps_the_first_pods_in_order() {
        // (items, kept, more for the next round)
        let cases = [
            (0, 0, false),
            (1, 1, false),
            (PODS_PER_ROUND, PODS_PER_ROUND, false),
            (PODS_PER_ROUND + 1, PODS_PER_ROUND, true),
            (10 * PODS_PER_ROUND, PODS_PER_ROUND, true),
        ];
        for (n, kept, more) in cases {
            let mut items: Vec<usize> = (0..n).collect();
            assert_eq!(this_round(&mut items), more, "{n} items");
            assert_eq!(items, (0..kept).collect::<Vec<_>>(), "{n} items");
        }
    }
}
