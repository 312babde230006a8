//! CPU starvation of a process from outside: a [`Starver`] stops it (SIGSTOP) and resumes it
//! (SIGCONT) in bursts, from a thread of its own, for as long as some test holds a
//! [`StarveGuard`] — a manager that gets only a share of the wall clock, as on an overcommitted
//! node or under a tight CPU quota.
//!
//! Several tests of one binary share the binary's manager, so they share one starver: bursts run
//! while anybody holds a guard, and the process is left running (SIGCONT) once every guard is
//! dropped.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;

#[derive(Debug, Default)]
struct State {
    wanting: u32,
    bursts: u64,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Stops and resumes a process in bursts while wanted; see the module docs.
pub struct Starver {
    shared: Shared,
    paused: Duration,
    running: Duration,
}

impl Starver {
    /// The (idle) starver of process `pid`: while wanted, it stops the process for `paused`,
    /// lets it run for `running`, and again.
    pub fn start(pid: u32, paused: Duration, running: Duration) -> anyhow::Result<Self> {
        let shared: Shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("starver".into())
            .spawn(move || starve_loop(pid, paused, running, &thread_shared))
            .context("starting the starver thread")?;
        Ok(Self {
            shared,
            paused,
            running,
        })
    }

    /// Bursts until the guard is dropped.
    pub fn starve(&self) -> StarveGuard {
        lock(&self.shared).wanting += 1;
        self.shared.1.notify_all();
        StarveGuard {
            shared: self.shared.clone(),
        }
    }

    /// Bursts (stops) so far.
    pub fn bursts(&self) -> u64 {
        lock(&self.shared).bursts
    }

    /// The share of the wall clock the process gets while starved.
    pub fn share(&self) -> f64 {
        self.running.as_secs_f64() / (self.paused + self.running).as_secs_f64()
    }
}

/// While held, the starver stops and resumes its process.
pub struct StarveGuard {
    shared: Shared,
}

impl Drop for StarveGuard {
    fn drop(&mut self) {
        lock(&self.shared).wanting -= 1;
        self.shared.1.notify_all();
    }
}

fn starve_loop(pid: u32, paused: Duration, running: Duration, shared: &Shared) {
    loop {
        {
            let state = lock(shared);
            let mut state = shared
                .1
                .wait_while(state, |s| s.wanting == 0)
                .unwrap_or_else(PoisonError::into_inner);
            state.bursts += 1;
        }
        crate::process::signal(pid, libc::SIGSTOP);
        std::thread::sleep(paused);
        crate::process::signal(pid, libc::SIGCONT);
        std::thread::sleep(running);
    }
}
