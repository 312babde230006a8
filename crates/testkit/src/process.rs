//! Child processes of the control plane: started with their output in a log file, stopped by PID.
//!
//! Every child is spawned from one long-lived thread with `PR_SET_PDEATHSIG`, so that even if the test
//! process dies without running its cleanup (a crash, SIGKILL), the kernel sends SIGTERM to every
//! component. (The death signal is tied to the spawning *thread*, hence the dedicated thread: a test
//! thread or a tokio blocking thread may exit long before the process.)
#![allow(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // The channel never closes (the sender is static): this thread lives as long as the
                // process, which is what PR_SET_PDEATHSIG needs.
            })
            .map(|_| ())
            .unwrap_or_else(|error| panic!("cannot start the process spawner thread: {error}"));
        tx
    })
}

/// A running component. It remembers its command line, so it can be started again the same way
/// ([`Process::respawn`]) after a crash or a deliberate kill.
pub struct Process {
    pub name: String,
    pub log: PathBuf,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, PathBuf)>,
    child: Child,
}

impl Process {
    /// Starts `program args` with stdout and stderr appended to `log`, without proxy settings (every
    /// component talks to 127.0.0.1 only).
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> anyhow::Result<Self> {
        Self::spawn_with_env(name, program, args, &[], log)
    }

    /// Like [`Process::spawn`], with extra environment variables.
    pub fn spawn_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let env: Vec<(String, PathBuf)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_path_buf()))
            .collect();
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = start(name, program, args, &env, out)?;
        Ok(Self {
            name: name.into(),
            log: log.into(),
            program: program.into(),
            args: args.to_vec(),
            env,
            child,
        })
    }

    /// The command-line arguments it was started with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Starts the process again with the same program, arguments and environment, appending to the
    /// same log (after a marker line). SIGKILLs it first if it is still running.
    pub fn respawn(&mut self) -> anyhow::Result<()> {
        self.kill();
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        {
            use std::io::Write as _;
            let _ = writeln!(out, "----- testkit: {} started again -----", self.name);
        }
        self.child = start(&self.name, &self.program, &self.args, &self.env, out)?;
        Ok(())
    }

    /// SIGKILL (no chance to clean up or release anything) and reap. Does nothing if it already exited.
    pub fn kill(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process already ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        signal(self.pid(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// Starts `program args` (environment `env` added, proxy settings removed) with stdout and stderr to
/// `out`, from the spawner thread so that it gets SIGTERM if this process dies.
fn start(
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(String, PathBuf)],
    out: File,
) -> anyhow::Result<Child> {
    let err = out.try_clone()?;
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    for var in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "https_proxy",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(var);
    }
    command.env("NO_PROXY", "127.0.0.1,localhost");
    command.envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (tx, rx) = mpsc::channel();
    spawner()
        .send((command, tx))
        .context("process spawner is gone")?;
    rx.recv()
        .context("process spawner did not answer")?
        .with_context(|| format!("starting {name} ({})", program.display()))
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions; a stale PID only yields ESRCH.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Registers `hook` to run when the process exits normally (after the test harness returns from main).
pub fn at_exit(hook: extern "C" fn()) {
    // SAFETY: registering a plain function pointer; the hook itself must not unwind.
    unsafe {
        libc::atexit(hook);
    }
}

/// Runs `program args` to completion; its stdout, or an error naming the command with its stderr.
pub fn checked_output<S: AsRef<std::ffi::OsStr>>(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[S],
) -> anyhow::Result<String> {
    let program = program.as_ref();
    let line = || {
        std::iter::once(program)
            .chain(args.iter().map(AsRef::as_ref))
            .map(|part| part.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", line()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({}): {}",
        line(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last `lines` lines of a log file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Resident memory of a process in KiB: current (VmRSS) and peak (VmHWM).
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let [rss, hwm] = status_kib(pid, ["VmRSS:", "VmHWM:"])?;
    Some((rss, hwm))
}

/// What a process's resident memory is made of, in KiB: anonymous (RssAnon: its heap, stacks and
/// the allocator's pages) and file-backed (RssFile: mostly the pages of its own binary it has run,
/// clean and shared with the page cache). Which code pages are mapped varies by a few MiB between
/// runs of the same build, so where a few MiB matter the anonymous part is the one to compare.
pub fn rss_split_kib(pid: u32) -> Option<(u64, u64)> {
    let [anon, file] = status_kib(pid, ["RssAnon:", "RssFile:"])?;
    Some((anon, file))
}

/// The values of `fields` (names with their colon) in `/proc/PID/status`, in KiB.
fn status_kib<const N: usize>(pid: u32, fields: [&str; N]) -> Option<[u64; N]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    let mut values = [0; N];
    for (slot, name) in values.iter_mut().zip(fields) {
        *slot = value(name)?;
    }
    Some(values)
}

/// A free TCP port on 127.0.0.1 for a server the test bed starts ([`free_ports`]).
pub fn free_port() -> anyhow::Result<u16> {
    free_ports(1)?.pop().context("no free port on 127.0.0.1")
}

/// `n` distinct free TCP ports on 127.0.0.1 for servers the test bed starts. They are taken below
/// the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), where it never puts the local end
/// of an outgoing connection. A port picked by binding port 0 and releasing it, as envtest does,
/// comes from that range: one of the bed's own connections could take it before the server bound
/// it, and the server would fail to start. Successive calls in one process move on through the
/// range from a random start, so a port is not handed out twice while its server is starting.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    static NEXT: std::sync::OnceLock<std::sync::atomic::AtomicUsize> = std::sync::OnceLock::new();
    let ephemeral_from = ephemeral_ports_from();
    let span = ephemeral_from.saturating_sub(FIRST_SERVER_PORT);
    if span < 1_000 {
        // No room below the ephemeral range: pick as envtest does.
        return (0..n).map(|_| any_port()).collect();
    }
    let next = NEXT.get_or_init(|| {
        use rand::Rng;
        std::sync::atomic::AtomicUsize::new(rand::rng().random_range(0..span))
    });
    // Held until all are found, so the same call cannot return one port twice.
    let mut held = Vec::with_capacity(n);
    for _ in 0..span {
        if held.len() == n {
            break;
        }
        let offset = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % span;
        let Ok(port) = u16::try_from(FIRST_SERVER_PORT + offset) else {
            continue;
        };
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    anyhow::ensure!(
        held.len() == n,
        "only {} of {n} free ports on 127.0.0.1 between {FIRST_SERVER_PORT} and {ephemeral_from}",
        held.len()
    );
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_ports_from() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The lowest port [`free_ports`] hands out: above the well-known and most registered services'.
const FIRST_SERVER_PORT: usize = 10_000;

/// A port the kernel picked (port 0), released at once.
fn any_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> anyhow::Result<()> {
        let ephemeral_from = ephemeral_ports_from();
        let mut ports = free_ports(5)?;
        ports.extend(
            (0..5)
                .map(|_| free_port())
                .collect::<anyhow::Result<Vec<_>>>()?,
        );
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        for port in ports {
            assert!(
                usize::from(port) < ephemeral_from,
                "{port} is in the ephemeral range"
            );
            std::net::TcpListener::bind(("127.0.0.1", port))?;
        }
        Ok(())
    }

    #[test]
    fn killed_process_respawns_with_the_same_command_line_and_log() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("testkit-respawn-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let log = dir.join("sh.log");
        let args = vec!["-c".to_string(), "echo up; exec sleep 30".to_string()];
        let mut process = Process::spawn("sh", Path::new("/bin/sh"), &args, &log)?;
        let first = process.pid();
        let log_says = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.matches("up").count() >= count || Instant::now() > deadline {
                    return text;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        assert_eq!(log_says(1), "up\n");
        process.kill();
        let status = process
            .exited()
            .context("killed process has an exit status")?;
        assert!(!status.success(), "{status}");
        process.respawn()?;
        assert_ne!(process.pid(), first);
        assert!(process.exited().is_none(), "the respawned process runs");
        assert_eq!(process.args(), args.as_slice());
        assert_eq!(
            log_says(2),
            "up\n----- testkit: sh started again -----\nup\n",
            "both runs in one log"
        );
        process.stop(Duration::from_secs(1));
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
