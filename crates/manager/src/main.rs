//! `kruise-manager`: see the library documentation and `kruise-manager --help`.

use std::time::Duration;

use clap::Parser;

/// mimalloc rather than the libc's allocator. A manager's heap is mostly short-lived Pods decoded
/// from JSON, allocated and freed by several worker threads at once: glibc's allocator kept about
/// half of it resident after it was freed and spent 40% of the manager's CPU in a 3,000-Pod
/// in-place rollout (`fleet-scale`, measured with perf); musl's, in the static image, is slower.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often freed memory is given back to the OS.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// Gives the memory mimalloc holds freed back to the OS every [`PURGE_EVERY`]. mimalloc returns
/// freed memory only some time after it was freed, and only when some thread allocates or frees
/// again, so a manager that goes quiet after a burst (a relist of every Pod, a rollout) kept it: at
/// rest over 3,000 Pods its RSS was 141 MiB, and 95 MiB once collected (`fleet-scale`).
fn purge_freed_memory() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("heap-purge".into())
        .spawn(|| {
            loop {
                std::thread::sleep(PURGE_EVERY);
                // SAFETY: `mi_collect` takes no pointer and frees only memory no one holds; any
                // thread may call it at any time.
                #[allow(unsafe_code)]
                unsafe {
                    libmimalloc_sys::mi_collect(false)
                };
            }
        })
        .map(drop)
}

/// How long mimalloc keeps freed memory before it gives it back to the OS, unless the operator
/// set `MIMALLOC_PURGE_DELAY`. mimalloc's own default is 1 s: through a
/// rollout, which frees and allocates decoded Pods without pause, that kept 30 MiB of freed pages
/// resident at rest after it over 3,000 Pods (live heap 16 MiB, RSS 84–97 MiB; `fleet-scale`).
/// After 100 ms the RSS at rest after the rollout was 75–77 MiB at the same manager CPU; at 0 (free
/// at once) it was the same but the manager's CPU in the rollout rose by a third. docs/sizing.md.
const PURGE_DELAY_MS: std::ffi::c_long = 100;

/// mimalloc's index of its `purge_delay` option (`mi_option_purge_delay` in mimalloc v3's
/// `mimalloc.h`, which libmimalloc-sys builds by default but does not name).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets [`PURGE_DELAY_MS`] unless the environment chose a delay. mimalloc read its options from the
/// environment when the process loaded; it must be called before any other thread starts, since
/// mimalloc's options are not synchronised.
fn set_purge_delay() {
    let chosen = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if !chosen {
        // SAFETY: sets an integer option; no other thread runs yet (see above).
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS)
        };
    }
}

/// Turns transparent huge pages off for this process. mimalloc asks the kernel to back its arenas
/// with 2 MiB pages (`MADV_HUGEPAGE`), so where THP is `madvise` or `always` (the default of most
/// distributions) a 2 MiB region of the heap became resident as soon as one object in it was and
/// stayed resident while one object in it lived, and freed memory could be given back only once
/// the kernel split the page: over 10,000 cached Pods, 40 MiB of the manager's RSS were such pages
/// (`AnonHugePages` in `/proc/PID/smaps_rollup`, `fleet-scale`). The heap is small and mostly
/// short-lived objects: 4 KiB pages cost it nothing measurable.
#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() -> std::io::Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integers only and sets a flag of the calling process.
    #[allow(unsafe_code)]
    let answer = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    match answer {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Transparent huge pages are a Linux feature; elsewhere there is nothing to turn off.
#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() -> std::io::Result<()> {
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // Before the runtime and its threads allocate anything.
    set_purge_delay();
    let huge_pages = disable_transparent_huge_pages();
    let args = kruise_manager::Args::parse();
    kruise_manager::init_logs(&args.log_format, args.verbosity);
    if let Err(error) = huge_pages {
        tracing::warn!(%error, "cannot turn transparent huge pages off; the RSS may be larger than the heap");
    }
    if let Err(error) = purge_freed_memory() {
        tracing::warn!(%error, "cannot start the heap purge thread; freed memory is returned later");
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(kruise_manager::run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index is mimalloc's `purge_delay`: the option there holds v3's default of 1,000 ms
    /// (the test binary uses the same allocator and reads no `MIMALLOC_*` variable in CI).
    #[test]
    fn the_purge_delay_index_names_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads an integer option.
        #[allow(unsafe_code)]
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
