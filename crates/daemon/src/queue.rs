//! A keyed work queue: a key is processed by one task at a time, a key added while it is being processed
//! is processed once more afterwards, a failed key comes back after an exponential backoff, and a key
//! can be added after a delay.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

enum Message {
    Add(String),
    Done { key: String, result: Outcome },
}

/// What processing a key asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    After(Duration),
    Failed,
}

#[derive(Clone)]
pub struct Queue {
    tx: mpsc::UnboundedSender<Message>,
}

const BASE_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(50);

pub fn backoff(failures: u32) -> Duration {
    BASE_BACKOFF
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_BACKOFF)
}

impl Queue {
    pub fn add(&self, key: String) {
        let _ = self.tx.send(Message::Add(key));
    }

    pub fn add_after(&self, key: String, delay: Duration) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(Message::Add(key));
        });
    }

    /// Starts the queue: `process` runs for each key; the returned future drives the queue forever.
    pub fn start<F, Fut>(process: F) -> (Self, impl Future<Output = ()> + Send)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let queue = Queue { tx: tx.clone() };
        let process = Arc::new(process);
        let handle = queue.clone();
        let driver = async move {
            // key -> whether it was added again while running.
            let mut running: HashMap<String, bool> = HashMap::new();
            let mut failures: HashMap<String, u32> = HashMap::new();
            while let Some(message) = rx.recv().await {
                let key = match message {
                    Message::Add(key) => {
                        if let Some(dirty) = running.get_mut(&key) {
                            *dirty = true;
                            continue;
                        }
                        key
                    }
                    Message::Done { key, result } => {
                        let dirty = running.remove(&key).unwrap_or(false);
                        match result {
                            Outcome::Done => {
                                failures.remove(&key);
                            }
                            Outcome::After(delay) => {
                                failures.remove(&key);
                                handle.add_after(key.clone(), delay);
                            }
                            Outcome::Failed => {
                                let n = failures.entry(key.clone()).or_insert(0);
                                handle.add_after(key.clone(), backoff(*n));
                                *n += 1;
                            }
                        }
                        if !dirty {
                            continue;
                        }
                        key
                    }
                };
                running.insert(key.clone(), false);
                let process = process.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let result = process(key.clone()).await;
                    let _ = tx.send(Message::Done { key, result });
                });
            }
        };
        (queue, driver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn a_key_added_while_running_runs_once_more() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (release_tx, release_rx) = tokio::sync::watch::channel(false);
        let counted = runs.clone();
        let (queue, driver) = Queue::start(move |_key| {
            let counted = counted.clone();
            let mut release = release_rx.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = release.wait_for(|r| *r).await;
                Outcome::Done
            }
        });
        tokio::spawn(driver);
        queue.add("k".into());
        queue.add("k".into());
        queue.add("k".into());
        tokio::time::timeout(Duration::from_secs(5), async {
            while runs.load(Ordering::SeqCst) < 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("first run");
        let _ = release_tx.send(true);
        tokio::time::timeout(Duration::from_secs(5), async {
            while runs.load(Ordering::SeqCst) < 2 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("second run");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
