//! How many writes one reconcile has in flight: enough that a rollout of 1,000 Pods is not sent one
//! request after another, few enough not to pile up behind the client's rate limiter.

use std::sync::Arc;

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;

use crate::error::Error;

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

/// Runs every call of `reconcile` on a task of its own. A controller polls its reconciles from its
/// one task, so without this the reconciles of different objects take turns on one thread however
/// many workers it has; spawned, they run on every thread of the runtime (decoding and planning a
/// 1,000-Pod workload is CPU work). A reconcile that panics fails like an error and is retried.
/// Each call takes a value to hold until the reconcile itself ends (the term's in-flight count).
pub fn on_own_task<K, C, Fut, H>(
    reconcile: fn(Arc<K>, Arc<C>) -> Fut,
) -> impl FnMut(Arc<K>, Arc<C>, H) -> BoxFuture<'static, Result<Action, Error>>
where
    K: Send + Sync + 'static,
    C: Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
    H: Send + 'static,
{
    // `held` lives on the reconcile's task, so it is dropped when the reconcile ends: a caller that
    // stops awaiting the answer (the task goes on, detached) does not end what `held` counts.
    move |object, ctx, held| {
        let task = tokio::spawn(async move {
            let answer = reconcile(object, ctx).await;
            drop(held);
            answer
        });
        Box::pin(async move {
            task.await
                .unwrap_or_else(|failed| Err(Error::Task(failed.to_string())))
        })
    }
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reconcile_on_its_own_task_answers_and_a_panic_is_an_error() {
        async fn answer(n: Arc<u32>, _: Arc<()>) -> Result<Action, Error> {
            if *n == 0 {
                panic!("a reconcile that panics");
            }
            Ok(Action::requeue(std::time::Duration::from_secs(u64::from(
                *n,
            ))))
        }
        let mut run = on_own_task(answer);
        let ok = run(Arc::new(3), Arc::new(()), ()).await;
        assert_eq!(
            ok.ok(),
            Some(Action::requeue(std::time::Duration::from_secs(3)))
        );
        let failed = run(Arc::new(0), Arc::new(()), ()).await;
        assert!(matches!(failed, Err(Error::Task(_))), "{failed:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconciles_on_their_own_tasks_run_at_the_same_time() {
        // Two reconciles that each block their thread until the other has started: polled in
        // turn from one task, the first would never see the second start.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        async fn meet(_: Arc<()>, _: Arc<()>) -> Result<Action, Error> {
            STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while STARTED.load(std::sync::atomic::Ordering::SeqCst) < 2 {
                if std::time::Instant::now() > deadline {
                    return Err(Error::Invalid("the other reconcile never started".into()));
                }
                std::thread::yield_now();
            }
            Ok(Action::await_change())
        }
        let mut run = on_own_task(meet);
        let (a, b) = futures::join!(
            run(Arc::new(()), Arc::new(()), ()),
            run(Arc::new(()), Arc::new(()), ())
        );
        assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    }
}
