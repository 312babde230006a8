//! `kubectl-kruise`: the kubectl plugin for kruise-rs workloads (put it on PATH, run `kubectl kruise`).

mod cluster;
mod control;
mod history;
mod migrate;
mod output;
mod plan;
mod scaledown;
mod set;
mod status;
mod takeover;
mod target;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::{ArgAction, CommandFactory, Parser, Subcommand};

use crate::cluster::{Ctx, Flags};
use crate::output::Output;
use crate::target::Target;

const TYPES: &str = "Workloads: cloneset, statefulset.apps.kruise.io (asts), daemonset.apps.kruise.io (ads), \
uniteddeployment (ud), sidecarset, and the native deployment, statefulset, daemonset.";

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-kruise",
    bin_name = "kubectl-kruise",
    version,
    about = "Drive kruise-rs (OpenKruise) workloads from kubectl: rollout status, history, undo, pause, resume, in-place restart, a rollout plan preview, scaledown of named Pods, set image/resources/env.",
    after_help = "Examples:\n  kubectl kruise rollout status cloneset/web --timeout 5m\n  kubectl kruise set image cloneset/web nginx=nginx:1.25\n  kubectl kruise rollout history cloneset/web\n  kubectl kruise rollout undo cloneset/web --to-revision 1\n  kubectl kruise rollout restart cloneset/web\n  kubectl kruise scaledown cloneset/web --pods web-abcde,web-fghij\n  kubectl kruise rollout plan cloneset/web --image nginx=nginx:1.26"
)]
struct Cli {
    #[command(flatten)]
    flags: Flags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Manage the rollout of a workload.
    #[command(after_help = TYPES)]
    Rollout {
        #[command(subcommand)]
        command: Rollout,
    },
    /// Delete exactly the named Pods of a CloneSet and lower its replicas by their number.
    #[command(
        after_help = "Example:\n  kubectl kruise scaledown cloneset/web --pods web-abcde,web-fghij"
    )]
    Scaledown {
        /// cloneset/NAME (or `cloneset NAME`).
        resource: String,
        name: Option<String>,
        /// The Pods to delete, comma separated.
        #[arg(long, value_delimiter = ',', required = true)]
        pods: Vec<String>,
        /// Print the patch without applying it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Update a workload's Pod template (CloneSet, Advanced StatefulSet, Advanced DaemonSet, native kinds).
    Set {
        #[command(subcommand)]
        command: SetCommand,
    },
    /// Create a CloneSet from a Deployment and move its replicas over without losing availability.
    #[command(
        after_help = "Examples:\n  kubectl kruise migrate cloneset --from deployment/web --dry-run\n  kubectl kruise migrate cloneset --from deployment/web --dst-name web-cs --max-surge 2"
    )]
    Migrate {
        /// What to create: cloneset.
        kind: String,
        /// The Deployment to migrate: deployment/NAME.
        #[arg(long)]
        from: String,
        /// The CloneSet's name (default: the Deployment's).
        #[arg(long)]
        dst_name: Option<String>,
        /// Replicas moved per step (default: the Deployment's maxSurge, at least 1).
        #[arg(long)]
        max_surge: Option<i32>,
        /// Print the CloneSet without creating anything.
        #[arg(long)]
        dry_run: bool,
        #[arg(short = 'o', long)]
        output: Option<Output>,
        /// Give up when one step takes longer than this.
        #[arg(long, default_value = "5m", value_parser = status::parse_duration)]
        timeout: Duration,
    },
    /// Switch this cluster from OpenKruise v1.9 to kruise-rs keeping every CRD, object and Pod: checks
    /// first, refuses while objects of kinds kruise-rs does not serve exist (see --allow-unserved),
    /// takes the CRDs out of OpenKruise's Helm release before removing it (or deletes a plain install's
    /// manager), replaces the CRDs kruise-rs serves, and verifies that nothing moved.
    #[command(
        after_help = "Examples:\n  kubectl kruise takeover --helm-release kruise --helm-namespace default --dry-run\n  kubectl kruise takeover --helm-release kruise --helm-namespace default --record before.json\n  kubectl kruise takeover --allow-unserved PodProbeMarker,NodeImage   # plain-manifest install\n  kubectl kruise takeover --verify before.json   # again, once kruise-rs's manager runs"
    )]
    Takeover(takeover::Options),
    /// Print a shell completion script.
    #[command(after_help = "Example:\n  source <(kubectl-kruise completion bash)")]
    Completion { shell: clap_complete::Shell },
}

#[derive(Subcommand, Debug)]
enum Rollout {
    /// Follow a rollout until it finishes; exit non-zero on ProgressDeadlineExceeded or --timeout.
    #[command(after_help = "Example:\n  kubectl kruise rollout status cloneset/web --timeout 5m")]
    Status {
        resource: String,
        name: Option<String>,
        /// Keep watching until the rollout finishes (`--watch=false` prints once).
        #[arg(short = 'w', long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        watch: bool,
        /// Give up after this long (e.g. 90s, 5m); 0 waits forever.
        #[arg(long, default_value = "0", value_parser = status::parse_duration)]
        timeout: Duration,
    },
    /// List the revisions (ControllerRevisions) with their change-cause; --revision N shows one.
    #[command(after_help = "Example:\n  kubectl kruise rollout history cloneset/web --revision 2")]
    History {
        resource: String,
        name: Option<String>,
        #[arg(long)]
        revision: Option<i64>,
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
    /// Roll back to the previous revision (or --to-revision N); in place where the workload updates in place.
    #[command(after_help = "Example:\n  kubectl kruise rollout undo cloneset/web --to-revision 1")]
    Undo {
        resource: String,
        name: Option<String>,
        #[arg(long, default_value_t = 0)]
        to_revision: i64,
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop updating Pods (spec.updateStrategy.paused); scaling goes on.
    Pause {
        resource: String,
        name: Option<String>,
    },
    /// Continue a paused rollout.
    Resume {
        resource: String,
        name: Option<String>,
    },
    /// Restart every Pod: in place (containers restarted, same Pods) for InPlaceIfPossible/InPlaceOnly
    /// workloads, by recreation otherwise.
    Restart {
        resource: String,
        name: Option<String>,
    },
    /// Preview the next rollout of a CloneSet, Advanced StatefulSet or DaemonSet, UnitedDeployment or
    /// SidecarSet: which Pods, in which order and batches, in place or recreated and why, which stay
    /// old — from the controllers' own planners, before anything is applied.
    #[command(
        after_help = "Examples:\n  kubectl kruise rollout plan cloneset/web --image nginx=nginx:1.26\n  kubectl kruise rollout plan cloneset/web -f web-v2.yaml\n  kubectl kruise rollout plan cloneset/web          # the rollout in progress"
    )]
    Plan {
        resource: String,
        name: Option<String>,
        /// The manifest about to be applied (`-` for stdin).
        #[arg(short = 'f', long)]
        filename: Option<String>,
        /// CONTAINER=IMAGE changes to preview (repeatable).
        #[arg(long)]
        image: Vec<String>,
        #[arg(short = 'o', long)]
        output: Option<Output>,
    },
}

#[derive(Subcommand, Debug)]
enum SetCommand {
    /// Set container images: `set image cloneset/web nginx=nginx:1.25 [sidecar=...]` (`*=IMAGE` for all).
    Image {
        /// RESOURCE/NAME (or RESOURCE NAME) followed by CONTAINER=IMAGE pairs.
        #[arg(required = true, num_args = 2..)]
        args: Vec<String>,
        /// Record the command in the kubernetes.io/change-cause annotation (shown by rollout history).
        #[arg(long)]
        record: bool,
    },
    /// Set resource limits and requests: `set resources cloneset/web -c app --limits cpu=200m,memory=512Mi`.
    Resources {
        resource: String,
        name: Option<String>,
        /// Containers to change (default: all).
        #[arg(short = 'c', long, value_delimiter = ',')]
        containers: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        limits: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        requests: Vec<String>,
        #[arg(long)]
        record: bool,
    },
    /// Set or remove environment variables: `set env cloneset/web -c app A=1 B-`.
    Env {
        /// RESOURCE/NAME (or RESOURCE NAME) followed by NAME=VALUE to set and NAME- to remove.
        #[arg(required = true, num_args = 2..)]
        args: Vec<String>,
        #[arg(short = 'c', long, value_delimiter = ',')]
        containers: Vec<String>,
        #[arg(long)]
        record: bool,
    },
}

/// `RESOURCE/NAME rest…` or `RESOURCE NAME rest…` (a second word with `=` or a trailing `-` is not a name).
fn split_target(args: &[String]) -> anyhow::Result<(Target, &[String])> {
    let Some(first) = args.first() else {
        bail!("a resource is required (e.g. cloneset/web)");
    };
    if first.contains('/') {
        return Ok((Target::parse(first, None)?, &args[1..]));
    }
    match args.get(1) {
        Some(name) if !name.contains('=') && !name.ends_with('-') => {
            Ok((Target::parse(first, Some(name))?, &args[2..]))
        }
        _ => Ok((Target::parse(first, None)?, &args[1..])),
    }
}

fn command_line() -> String {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(first) = args.first_mut() {
        *first = "kubectl kruise".into();
    }
    args.join(" ")
}

fn target(resource: &str, name: &Option<String>) -> anyhow::Result<Target> {
    Target::parse(resource, name.as_deref())
}

/// `kubectl kruise rollout …`.
async fn rollout(flags: &Flags, command: Rollout) -> anyhow::Result<()> {
    let ctx_for = || Ctx::connect(flags);
    match command {
        Rollout::Status {
            resource,
            name,
            watch,
            timeout,
        } => {
            let t = target(&resource, &name)?;
            status::run(&ctx_for().await?, &t, watch, timeout).await
        }
        Rollout::History {
            resource,
            name,
            revision,
            output,
        } => {
            let t = target(&resource, &name)?;
            history::history(&ctx_for().await?, &t, revision, output).await
        }
        Rollout::Undo {
            resource,
            name,
            to_revision,
            dry_run,
        } => {
            let t = target(&resource, &name)?;
            history::undo(&ctx_for().await?, &t, to_revision, dry_run).await
        }
        Rollout::Pause { resource, name } => {
            let t = target(&resource, &name)?;
            control::paused_patch(t.kind, true)?;
            control::pause(&ctx_for().await?, &t, true).await
        }
        Rollout::Resume { resource, name } => {
            let t = target(&resource, &name)?;
            control::paused_patch(t.kind, false)?;
            control::pause(&ctx_for().await?, &t, false).await
        }
        Rollout::Plan {
            resource,
            name,
            filename,
            image,
            output,
        } => {
            let t = target(&resource, &name)?;
            let images = set::pairs(&image, "image")?;
            plan::run(&ctx_for().await?, &t, filename.as_deref(), &images, output).await
        }
        Rollout::Restart { resource, name } => {
            let t = target(&resource, &name)?;
            control::restart(&Ctx::connect(flags).await?, &t).await
        }
    }
}

/// `kubectl kruise set …`.
async fn set_command(flags: &Flags, command: &SetCommand) -> anyhow::Result<()> {
    let cause = command_line();
    let (t, edit, what, record) = match command {
        SetCommand::Image { args, record } => {
            let (t, rest) = split_target(args)?;
            (
                t,
                set::Edit::Image(set::pairs(rest, "image")?),
                "image",
                *record,
            )
        }
        SetCommand::Resources {
            resource,
            name,
            containers,
            limits,
            requests,
            record,
        } => (
            target(resource, name)?,
            set::Edit::Resources {
                containers: containers.clone(),
                limits: set::pairs(limits, "limit")?,
                requests: set::pairs(requests, "request")?,
            },
            "resource requirements",
            *record,
        ),
        SetCommand::Env {
            args,
            containers,
            record,
        } => {
            let (t, rest) = split_target(args)?;
            let (remove, set): (Vec<&String>, Vec<&String>) = rest
                .iter()
                .partition(|a| a.ends_with('-') && !a.contains('='));
            let set: Vec<String> = set.into_iter().cloned().collect();
            (
                t,
                set::Edit::Env {
                    containers: containers.clone(),
                    set: set::pairs(&set, "variable")?,
                    remove: remove
                        .iter()
                        .map(|r| r.trim_end_matches('-').to_owned())
                        .collect(),
                },
                "env",
                *record,
            )
        }
    };
    set::run(
        &Ctx::connect(flags).await?,
        &t,
        &edit,
        what,
        record.then_some(cause),
    )
    .await
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kubectl-kruise", &mut script);
            match std::io::Write::write_all(&mut std::io::stdout(), &script) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(anyhow::Error::new(e).context("writing the completion script"))
                }
                _ => Ok(()),
            }
        }
        Command::Rollout { command } => rollout(&cli.flags, command).await,
        Command::Migrate {
            kind,
            from,
            dst_name,
            max_surge,
            dry_run,
            output,
            timeout,
        } => {
            let opts = migrate::Options {
                from,
                dst_name,
                max_surge,
                dry_run,
                output,
                timeout,
            };
            migrate::run(&Ctx::connect(&cli.flags).await?, &kind, opts).await
        }
        Command::Takeover(opts) => {
            let ctx = Ctx::connect(&cli.flags).await?;
            takeover::run(&ctx.client, &cli.flags, opts).await
        }
        Command::Scaledown {
            resource,
            name,
            pods,
            dry_run,
        } => {
            let t = target(&resource, &name)?;
            scaledown::run(&Ctx::connect(&cli.flags).await?, &t, &pods, dry_run).await
        }
        Command::Set { command } => set_command(&cli.flags, &command).await,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn split_targets() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let cases: &[(&[&str], &str, usize)] = &[
            (&["cloneset/web", "app=x"], "cloneset/web", 1),
            (&["cloneset", "web", "app=x"], "cloneset/web", 1),
            (&["cloneset/web", "A-"], "cloneset/web", 1),
        ];
        for (args, want, rest) in cases {
            let args = v(args);
            let (t, r) = split_target(&args).expect("target");
            assert_eq!((t.label(), r.len()), (want.to_string(), *rest));
        }
        assert!(split_target(&v(&["cloneset", "A=1"])).is_err());
    }

    #[test]
    fn takeover_flags() {
        let cli = Cli::try_parse_from([
            "kubectl-kruise",
            "takeover",
            "--helm-release",
            "kruise",
            "--allow-unserved",
            "WorkloadSpread,PodUnavailableBudget",
            "--dry-run",
            "-o",
            "yaml",
        ])
        .expect("parse");
        match cli.command {
            Command::Takeover(opts) => {
                assert_eq!(opts.helm_release.as_deref(), Some("kruise"));
                assert_eq!(opts.helm_namespace, "default");
                assert_eq!(opts.kruise_namespace, "kruise-system");
                assert_eq!(
                    opts.allow_unserved,
                    ["WorkloadSpread", "PodUnavailableBudget"]
                );
                assert!(opts.dry_run);
                assert_eq!(opts.output, Some(Output::Yaml));
                assert_eq!(opts.timeout, Duration::from_secs(300));
            }
            other => panic!("{other:?}"),
        }
        // --verify only compares: it takes no switch flags.
        for conflicting in ["--dry-run", "--helm-release=kruise", "--record=x.json"] {
            assert!(
                Cli::try_parse_from([
                    "kubectl-kruise",
                    "takeover",
                    "--verify",
                    "s.json",
                    conflicting
                ])
                .is_err(),
                "{conflicting}"
            );
        }
    }

    #[test]
    fn flags_parse_like_kubectl() {
        let cli = Cli::try_parse_from([
            "kubectl-kruise",
            "rollout",
            "status",
            "cloneset/web",
            "-n",
            "prod",
            "--context",
            "c",
            "--timeout",
            "5m",
            "--watch=false",
        ])
        .expect("parse");
        assert_eq!(cli.flags.namespace.as_deref(), Some("prod"));
        assert_eq!(cli.flags.context.as_deref(), Some("c"));
        match cli.command {
            Command::Rollout {
                command: Rollout::Status { watch, timeout, .. },
            } => {
                assert!(!watch);
                assert_eq!(timeout, Duration::from_secs(300));
            }
            other => panic!("{other:?}"),
        }
    }
}
