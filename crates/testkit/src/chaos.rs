//! Fault injection over time: a [`ManagerKiller`] SIGKILLs a manager at random intervals and starts it
//! again at once with the same arguments, for as long as some test asks for it.
//!
//! Several tests of one binary share the binary's manager, so they share one killer: each test holds a
//! [`KillGuard`] while it wants kills, and a [`CalmGuard`] while it needs a steady manager (creating
//! objects through the webhooks, measuring a baseline). The killer kills only while somebody wants kills
//! and nobody wants calm, and goes idle (with the manager running) once every guard is dropped.

use std::ops::RangeInclusive;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};

use crate::control_plane::ControlPlane;
use crate::manager::Manager;

/// The seed of a [`ManagerKiller`]: `$KRUISE_CHAOS_SEED` when set (to replay a run), else random.
pub fn seed_from_env() -> anyhow::Result<u64> {
    match std::env::var("KRUISE_CHAOS_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .with_context(|| format!("KRUISE_CHAOS_SEED={text:?} is not a u64")),
        Err(_) => Ok(rand::rng().random()),
    }
}

#[derive(Debug, Default)]
struct State {
    wanting_kills: u32,
    wanting_calm: u32,
    kills: u64,
    last_error: Option<String>,
}

impl State {
    fn active(&self) -> bool {
        self.wanting_kills > 0 && self.wanting_calm == 0
    }
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared
        .0
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kills and restarts a manager at random intervals from a thread of its own; see the module docs.
pub struct ManagerKiller {
    shared: Shared,
    seed: u64,
    interval: RangeInclusive<Duration>,
}

impl ManagerKiller {
    /// Starts the (idle) killer of `manager`: while active, it waits a random time in `interval`
    /// (drawn from a generator seeded with `seed`), SIGKILLs the manager and starts it again at once.
    pub fn start(
        plane: &'static ControlPlane,
        manager: Manager,
        interval: RangeInclusive<Duration>,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let shared: Shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let thread_shared = shared.clone();
        let range = interval.clone();
        std::thread::Builder::new()
            .name("manager-killer".into())
            .spawn(move || kill_loop(plane, &manager, &range, seed, &thread_shared))
            .context("starting the manager-killer thread")?;
        Ok(Self {
            shared,
            seed,
            interval,
        })
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn interval(&self) -> RangeInclusive<Duration> {
        self.interval.clone()
    }

    /// Asks for kills until the guard is dropped.
    pub fn kills(&self) -> KillGuard {
        lock(&self.shared).wanting_kills += 1;
        self.shared.1.notify_all();
        KillGuard {
            shared: self.shared.clone(),
        }
    }

    /// Asks for a steady manager (no kills) until the guard is dropped.
    pub fn calm(&self) -> CalmGuard {
        lock(&self.shared).wanting_calm += 1;
        self.shared.1.notify_all();
        CalmGuard {
            shared: self.shared.clone(),
        }
    }

    /// Kills so far.
    pub fn kill_count(&self) -> u64 {
        lock(&self.shared).kills
    }

    /// Whether the killer is killing now (somebody wants kills, nobody wants calm).
    pub fn active(&self) -> bool {
        lock(&self.shared).active()
    }

    /// The last failure to kill or restart the manager, if any.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.shared).last_error.clone()
    }

    /// Waits until the killer is active (every test holding a [`CalmGuard`] has dropped it).
    pub async fn wait_active(&self, timeout: Duration) -> anyhow::Result<()> {
        crate::until("the manager killer active", timeout, || async {
            Ok(self.active())
        })
        .await
    }
}

/// While held, the killer kills (unless somebody holds a [`CalmGuard`]).
pub struct KillGuard {
    shared: Shared,
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        lock(&self.shared).wanting_kills -= 1;
        self.shared.1.notify_all();
    }
}

/// While held, the killer does not kill.
pub struct CalmGuard {
    shared: Shared,
}

impl Drop for CalmGuard {
    fn drop(&mut self) {
        lock(&self.shared).wanting_calm -= 1;
        self.shared.1.notify_all();
    }
}

fn kill_loop(
    plane: &ControlPlane,
    manager: &Manager,
    interval: &RangeInclusive<Duration>,
    seed: u64,
    shared: &Shared,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    loop {
        let delay = rng.random_range(interval.clone());
        // Sleep `delay` while active; going idle restarts the wait from scratch once active again.
        let mut state = lock(shared);
        let mut waited_from = Instant::now();
        loop {
            if !state.active() {
                state = shared
                    .1
                    .wait_while(state, |s| !s.active())
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                waited_from = Instant::now();
                continue;
            }
            let left = delay.saturating_sub(waited_from.elapsed());
            if left.is_zero() {
                break;
            }
            state = shared
                .1
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        // Kill and restart under the lock: no guard changes hands half-way, and a test that takes a
        // CalmGuard gets a manager that is at least started.
        match manager.kill(plane).and_then(|()| manager.restart(plane)) {
            Ok(pid) => {
                state.kills += 1;
                tracing::info!(
                    kill = state.kills,
                    after_ms = delay.as_millis() as u64,
                    pid,
                    "killed and restarted the manager"
                );
            }
            Err(error) => {
                tracing::error!(error = %format!("{error:#}"), "cannot kill and restart the manager");
                state.last_error = Some(format!("{error:#}"));
            }
        }
        drop(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_only_while_wanted_and_nobody_wants_calm() {
        // (wanting kills, wanting calm, active)
        let cases = [
            (0, 0, false),
            (1, 0, true),
            (2, 0, true),
            (1, 1, false),
            (0, 1, false),
            (3, 2, false),
        ];
        for (kills, calm, active) in cases {
            let state = State {
                wanting_kills: kills,
                wanting_calm: calm,
                ..State::default()
            };
            assert_eq!(state.active(), active, "kills {kills}, calm {calm}");
        }
    }
}
