//! Rules of the code's layout, checked on the sources: no part of the manager opens a watch of its
//! own or lists from the apiserver outside the driver, except where the allow-list below says why
//! (every watch goes through the [`Registry`], one stream per type, and a controller reads its
//! caches); and no production function of any crate is longer than [`MOST_LINES`].
//!
//! [`Registry`]: super::registry::Registry

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What may not appear in production code: a watch opened by hand, a controller that opens its
/// own watch, a cache filled outside the registry, and a list from the apiserver.
const FORBIDDEN: &[&str] = &[
    "watcher(",
    "Controller::new(",
    "::watch(Api",
    ".list(",
    ".list_metadata(",
];

/// The exceptions: (file under `crates/`, how many forbidden calls it holds, why).
const ALLOWED: &[(&str, usize, &str)] = &[
    (
        "controllers/src/runtime/driver/caches.rs",
        1,
        "the shared watch itself (`Shared::watch`)",
    ),
    (
        "controllers/src/runtime/driver/registry.rs",
        1,
        "the registry opens each type's one watch",
    ),
    (
        "controllers/src/runtime/cache.rs",
        1,
        "the packed Pod cache's own watch (one per term; Pods are not a `Shared`)",
    ),
    (
        "controllers/src/workloadspread/workload.rs",
        1,
        "a Deployment's ReplicaSets, read live: a placement is never costed on a stale rollout",
    ),
    (
        "controllers/src/podunavailablebudget/workloads.rs",
        1,
        "a Deployment's ReplicaSets, read live: a budget's expected count is never from a stale cache",
    ),
    (
        "controllers/src/runtime/driver/writes.rs",
        1,
        "`LiveReads` by the apiserver: the live list a kind declares by holding a `LiveReads`",
    ),
    (
        "webhook/src/certctl.rs",
        1,
        "the certificate's Secret by name in the manager's namespace, when no gate that reads \
         Secrets cluster-wide is on (the chart grants no more then)",
    ),
    (
        "webhook/src/freshness.rs",
        1,
        "read-your-writes: the apiserver's resourceVersion the caches must reach",
    ),
    (
        "webhook/src/pod.rs",
        1,
        "a SidecarSet's ControllerRevision of a custom version (revisions are not cached on every replica)",
    ),
    (
        "webhook/src/podunavailablebudget.rs",
        1,
        "budgets when the cache cannot vouch for them",
    ),
    (
        "webhook/src/workloadspread.rs",
        1,
        "spreads when the cache cannot vouch for them",
    ),
    (
        "webhook/src/server.rs",
        2,
        "SidecarSets when the webhook has no cache, and StorageClasses for a PVC resize check",
    ),
    (
        "webhook/src/policy.rs",
        3,
        "deletion protection: a namespace's live Pods and claims, a CRD's objects, before a cascading delete",
    ),
];

/// The kinds whose context holds a [`LiveReads`](super::writes::LiveReads): they read from the
/// apiserver, not the caches, and say why here.
const LIVE_READERS: &[(&str, &str)] = &[
    (
        "controllers/src/runtime/claim.rs",
        "the owner re-read before an adoption (Kubernetes' RecheckDeletionTimestamp): an owner \
         gone or being deleted must not adopt, and a cache may not have seen that yet",
    ),
    (
        "controllers/src/runtime/history.rs",
        "a ControllerRevision whose name is taken, read to tell ours from a hash collision",
    ),
    (
        "controllers/src/launchpriority.rs",
        "a waiting Pod's barrier ConfigMap, once per Pod (ConfigMaps are not cached)",
    ),
    // The Pod-owning kinds (CloneSet, Advanced StatefulSet and DaemonSet, BroadcastJob) hold
    // theirs in `driver::head::PodOwnerBase`: the owner re-read before adopting, a taken revision
    // name.
    (
        "controllers/src/runtime/podcontrol.rs",
        "carries its owner's live reads to the claim and the revision registry, and lists a \
         workload's pre-download ImagePullJobs before deleting them",
    ),
    (
        "controllers/src/sidecarset/mod.rs",
        "the SidecarSet re-read before it adopts a revision, a taken revision name",
    ),
    (
        "controllers/src/uniteddeployment/mod.rs",
        "the owner re-read before adopting its subset workloads, a taken revision name",
    ),
    (
        "controllers/src/containerrecreaterequest.rs",
        "its Pod's container IDs and start times, which the packed Pod cache does not keep",
    ),
    (
        "controllers/src/resourcedistribution.rs",
        "the copies' content (Secrets and ConfigMaps are cached as metadata only)",
    ),
    (
        "controllers/src/imagepulljob/job.rs",
        "the Pods a job selects by its own selector, and the pull Secrets with their data and \
         their copies (Secrets are cached as metadata only)",
    ),
    (
        "controllers/src/podprobemarker/mod.rs",
        "a matched Pod's IP and container ports, which the Pod cache does not keep",
    ),
    (
        "controllers/src/sidecarterminator.rs",
        "a candidate Pod's container env and states (not in the Pod cache), its Node's labels, \
         and whether its request exists before creating it",
    ),
    (
        "controllers/src/workloadspread/mod.rs",
        "its gated Pods whole (the Pod cache's projection has no scheduling gates)",
    ),
];

/// The only files of the controllers that build a `kube::Api` of their own, and why; every other
/// file (every kind, whole) acts through [`Writes`](super::writes::Writes), and its act step has
/// unit tests on the in-memory cluster. The driver's own files (the writer itself, the registry's
/// watches) are not scanned.
const BUILDS_ITS_OWN_API: &[(&str, &str)] = &[
    (
        "controllers/src/runtime/cache.rs",
        "the packed Pod cache's own watch",
    ),
    (
        "controllers/src/runtime/kruise_configuration.rs",
        "the kruise-configuration ConfigMap, read where a custom workload kind is met (not cached)",
    ),
    (
        "controllers/src/runtime/ledger/commit.rs",
        "the group commit's source: a budget's or spread's status read and written by the ledger, \
         which has its own fake (`ledger::fake`) for its tests",
    ),
    (
        "controllers/src/runtime/disruptions.rs",
        "the budget read from the apiserver before a refusal (a refusal is never made on a cache)",
    ),
    (
        "controllers/src/podunavailablebudget/workloads.rs",
        "a target's scale through discovery and the scale subresource (any kind), read live",
    ),
    (
        "controllers/src/persistentpodstate/workload.rs",
        "a target's scale through discovery and the scale subresource (any kind), read live",
    ),
    (
        "controllers/src/workloadspread/workload.rs",
        "a target's scale through discovery and the scale subresource (any kind), read live",
    ),
];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The production part of a source file: test files and `#[cfg(test)]` modules left out, and
/// comment lines.
fn production_lines(path: &Path, text: &str) -> Vec<String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name.ends_with("tests.rs") || name == "scripted.rs" || name == "fake.rs" {
        return Vec::new();
    }
    let mut production = Vec::new();
    let mut lines = text.lines().map(str::trim).peekable();
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]" {
            // Past the item's other attributes (`#[path = ...]`) to the item itself.
            while lines.peek().is_some_and(|l| l.starts_with("#[")) {
                lines.next();
            }
            match lines.peek() {
                // A test module written inline: the rest of the file is tests.
                Some(l) if l.starts_with("mod ") && l.ends_with('{') => break,
                // A test module in a file of its own: only its declaration is skipped.
                Some(l) if l.starts_with("mod ") => {
                    lines.next();
                }
                _ => {}
            }
            continue;
        }
        if !line.starts_with("//") {
            production.push(line.to_owned());
        }
    }
    production
}

#[test]
fn every_watch_goes_through_the_registry_and_reads_come_from_caches() {
    let root = crates_dir();
    let mut files = Vec::new();
    for part in ["controllers/src", "webhook/src", "manager/src"] {
        sources(&root.join(part), &mut files);
    }
    assert!(files.len() > 50, "found only {} sources", files.len());
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        for line in production_lines(file, &text) {
            let hits = FORBIDDEN.iter().filter(|f| line.contains(*f)).count();
            if hits > 0 {
                *found.entry(relative.clone()).or_default() += hits;
                lines_of.entry(relative.clone()).or_default().push(line);
            }
        }
    }
    let allowed: BTreeMap<String, usize> = ALLOWED
        .iter()
        .map(|(file, count, _)| ((*file).to_owned(), *count))
        .collect();
    let mut wrong = Vec::new();
    for (file, count) in &found {
        if allowed.get(file) != Some(count) {
            wrong.push(format!(
                "{file}: {count} watch or list call(s), {} allowed: {:?}",
                allowed.get(file).copied().unwrap_or(0),
                lines_of.get(file)
            ));
        }
    }
    for (file, count) in &allowed {
        if !found.contains_key(file) {
            wrong.push(format!(
                "{file}: allowed {count} but has none: drop it from ALLOWED"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "open watches through `Caches::shared` (driver::registry) and read the caches; a live \
         read that must stay goes into ALLOWED with its reason:\n{}",
        wrong.join("\n")
    );
}

/// The production lines of a file under `crates/`.
fn production_of(relative: &str) -> Vec<String> {
    let path = crates_dir().join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(!text.is_empty(), "{relative} is gone: update the lists");
    production_lines(&path, &text)
}

#[test]
fn live_reads_are_declared_and_writes_go_through_the_writer_interface() {
    let root = crates_dir();
    let mut files = Vec::new();
    sources(&root.join("controllers/src"), &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.starts_with("controllers/src/runtime/driver/") {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let reads_live = production_lines(file, &text)
            .iter()
            .any(|l| l.contains("LiveReads"));
        let declared = LIVE_READERS.iter().any(|(f, _)| *f == relative);
        if reads_live != declared {
            wrong.push(format!(
                "{relative}: holds a LiveReads: {reads_live}, in LIVE_READERS: {declared}"
            ));
        }
    }
    for file in &files {
        let relative = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.starts_with("controllers/src/runtime/driver/") {
            continue;
        }
        let builds = production_of(&relative)
            .into_iter()
            .find(|l| l.contains("Api<") || l.contains("Api::"));
        let excepted = BUILDS_ITS_OWN_API.iter().any(|(f, _)| *f == relative);
        match (builds, excepted) {
            (Some(line), false) => wrong.push(format!(
                "{relative}: builds a kube::Api (act through Writes, or say why in \
                 BUILDS_ITS_OWN_API): {line}"
            )),
            (None, true) => wrong.push(format!(
                "{relative}: in BUILDS_ITS_OWN_API but builds no kube::Api: drop it from the list"
            )),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Production functions of every crate stay short enough to read: none over this many lines.
const MOST_LINES: usize = 150;

/// Each function of `text` (its name and first line) and how many lines it spans, the
/// `#[cfg(test)]` module at the end of a file left out. Braces are counted as they come (the
/// sources keep them balanced inside strings).
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim_start().starts_with("mod ")
                && w[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    let mut found = Vec::new();
    let mut i = 0;
    while i < end {
        let line = lines[i].trim_start();
        let line = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line);
        let line = line.strip_prefix("async ").unwrap_or(line);
        let line = line.strip_prefix("const ").unwrap_or(line);
        if let Some(rest) = line.strip_prefix("fn ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let (mut depth, mut started) = (0i64, false);
            let mut j = i;
            while j < end {
                for c in lines[j].chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            started = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if started && depth == 0 {
                    break;
                }
                if !started && lines[j].trim_end().ends_with(';') {
                    break;
                }
                j += 1;
            }
            if started {
                found.push((name, i + 1, j - i + 1));
            }
        }
        i += 1;
    }
    found
}

#[test]
fn no_production_function_is_over_150_lines() {
    let root = crates_dir();
    let mut files = Vec::new();
    sources(&root, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter(|f| {
            let path = f.to_string_lossy();
            !path.contains("/target/") && !path.contains("/tests/") && !path.contains("/benches/")
        })
        .filter(|f| {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            !name.ends_with("tests.rs")
        })
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let shown = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            function_lengths(&text)
                .into_iter()
                .filter(|(_, _, n)| *n > MOST_LINES)
                .map(move |(name, at, n)| format!("{shown}:{at} {name}: {n} lines"))
        })
        .collect();
    assert!(files.len() > 100, "found only {} sources", files.len());
    assert!(
        long.is_empty(),
        "split these into functions of at most {MOST_LINES} lines:\n{}",
        long.join("\n")
    );
}

#[test]
fn function_lengths_are_counted_from_signature_to_closing_brace() {
    let text = "fn a() {\n    x();\n}\n\npub async fn b(\n    y: u8,\n) -> u8 {\n    if y > 0 { 1 } else { 2 }\n}\nfn c();\n";
    let found = function_lengths(text);
    assert_eq!(found, vec![("a".to_owned(), 1, 3), ("b".to_owned(), 5, 5)]);
}

/// The runtime serves every kind and depends on none: no production line under `runtime/` names a
/// kind's module (what two kinds share moves into the runtime).
#[test]
fn the_runtime_names_no_kind() {
    let src = crates_dir().join("controllers/src");
    let kinds: Vec<String> = std::fs::read_dir(&src)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .map(|name| name.trim_end_matches(".rs").to_owned())
                .filter(|name| name != "lib" && name != "runtime")
                .collect()
        })
        .unwrap_or_default();
    assert!(kinds.len() >= 18, "the kinds' modules: {kinds:?}");
    let mut files = Vec::new();
    sources(&src.join("runtime"), &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in production_lines(file, &text) {
            if let Some(kind) = kinds
                .iter()
                .find(|kind| line.contains(&format!("crate::{kind}::")))
            {
                wrong.push(format!("{}: names {kind}: {line}", file.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
