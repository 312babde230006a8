//! The Helm charts, without a cluster: `helm lint`, `helm template` against golden files (default values
//! and the production profile `ci/production-values.yaml`), the values schema, and the charts' copies
//! of generated manifests (CRDs, webhook configurations) against `config/`. Set KRUISE_UPDATE_GOLDEN=1
//! to rewrite the golden files after an intended change (and review the diff).

use anyhow::Context;
use kruise_e2e::yaml_documents;
use kruise_testkit::helm;
use serde_json::Value;

const CHART: &str = "charts/kruise-rs";
const CRDS_CHART: &str = "charts/kruise-rs-crds";
/// `helm template` renders for this Kubernetes version (the test bed's).
const KUBE_VERSION: &str = "v1.34.10";

fn template(extra: &[&str]) -> anyhow::Result<String> {
    let mut args = vec![
        "template",
        "kruise-rs",
        CHART,
        "--namespace",
        "kruise-system",
        "--kube-version",
        KUBE_VERSION,
    ];
    args.extend_from_slice(extra);
    helm::run(&args)
}

fn golden(name: &str, rendered: &str) -> anyhow::Result<()> {
    let path = helm::repo_root().join("tests/golden").join(name);
    if std::env::var_os("KRUISE_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, rendered).with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (KRUISE_UPDATE_GOLDEN=1 writes it)",
            path.display()
        )
    })?;
    if want != rendered {
        let first = want
            .lines()
            .zip(rendered.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(rendered.lines().count()));
        panic!(
            "helm template differs from {} from line {}:\n  golden:   {:?}\n  rendered: {:?}\n\
             (KRUISE_UPDATE_GOLDEN=1 rewrites it; review the diff)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            rendered.lines().nth(first)
        );
    }
    Ok(())
}

/// A container's arguments.
fn args(container: &Value) -> anyhow::Result<Vec<&str>> {
    Ok(container["args"]
        .as_array()
        .context("container without args")?
        .iter()
        .filter_map(Value::as_str)
        .collect())
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

#[test]
fn charts_lint() -> anyhow::Result<()> {
    helm::run(&["lint", "--strict", CHART])?;
    helm::run(&[
        "lint",
        "--strict",
        CHART,
        "-f",
        "charts/kruise-rs/ci/production-values.yaml",
    ])?;
    helm::run(&["lint", "--strict", CRDS_CHART])?;
    Ok(())
}

#[test]
fn default_values_render_the_golden_manifests() -> anyhow::Result<()> {
    let rendered = template(&[])?;
    golden("chart-default.yaml", &rendered)?;
    let objects = yaml_documents(&rendered)?;
    let deployment = find(&objects, "Deployment", "kruise-controller-manager");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let container = &spec["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let args = args(container)?;
    assert!(args.contains(&"--enable-leader-election"), "{args:?}");
    assert!(args.contains(&"--metrics-addr=:8080"), "{args:?}");
    assert!(args.contains(&"--health-probe-addr=:8000"), "{args:?}");
    // OpenKruise v1.9.0's chart's default gates.
    assert!(
        args.contains(&"--feature-gates=ImagePullJobGate=true"),
        "{args:?}"
    );
    // The manager accepts exactly this command line (flags it does not know stop it).
    kruise_manager_accepts(&args)?;
    // And kruise-daemon its DaemonSet's (Go's `:PORT` listen address included).
    let daemon = find(&objects, "DaemonSet", "kruise-daemon");
    let daemon_args = self::args(&daemon["spec"]["template"]["spec"]["containers"][0])?;
    assert!(daemon_args.contains(&"--addr=:10221"), "{daemon_args:?}");
    binary_accepts(&kruise_testkit::daemon::binary()?, &daemon_args)?;
    let mutating = find(
        &objects,
        "MutatingWebhookConfiguration",
        "kruise-mutating-webhook-configuration",
    );
    assert_eq!(mutating["webhooks"][0]["name"], "mpod.kb.io");
    assert_eq!(mutating["webhooks"][0]["failurePolicy"], "Ignore");
    find(&objects, "PodDisruptionBudget", "kruise-controller-manager");
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "ServiceMonitor" || o["kind"] == "Certificate")
    );
    Ok(())
}

/// Parses `args` with kruise-manager's own command line.
fn kruise_manager_accepts(args: &[&str]) -> anyhow::Result<()> {
    binary_accepts(&kruise_testkit::manager::binary()?, args)
}

/// Parses `args` with `binary`'s own command line (`--help` after them: clap checks every argument
/// first, then prints help and exits 0).
fn binary_accepts(binary: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let output = std::process::Command::new(binary)
        .args(args)
        .arg("--help")
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} refuses the chart's arguments {args:?}: {}",
        binary.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[test]
fn production_profile_renders_the_golden_manifests() -> anyhow::Result<()> {
    let rendered = template(&["-f", "charts/kruise-rs/ci/production-values.yaml"])?;
    golden("chart-production.yaml", &rendered)?;
    let objects = yaml_documents(&rendered)?;
    let deployment = find(&objects, "Deployment", "kruise-controller-manager");
    let spec = &deployment["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let args = args(container)?;
    assert!(
        args.contains(&"--feature-gates=ImagePullJobGate=true,EnableExternalCerts=true"),
        "{args:?}"
    );
    assert!(args.contains(&"--cloneset-workers=10"), "{args:?}");
    assert!(args.contains(&"--rest-config-qps=800"), "{args:?}");
    assert!(args.contains(&"--kube-api-max-in-flight=64"), "{args:?}");
    kruise_manager_accepts(&args)?;
    assert_eq!(container["resources"]["limits"]["memory"], "1536Mi");
    assert!(
        spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );
    let certificate = find(&objects, "Certificate", "kruise-webhook-certs");
    assert_eq!(certificate["spec"]["secretName"], "kruise-webhook-certs");
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        "kruise-webhook-service.kruise-system.svc"
    );
    find(&objects, "ServiceMonitor", "kruise-manager");
    Ok(())
}

/// `helm template` with one `--set`, whatever its outcome.
fn template_with(set: &str) -> anyhow::Result<std::process::Output> {
    helm::try_run(&[
        "template",
        "kruise-rs",
        CHART,
        "--kube-version",
        KUBE_VERSION,
        "--set",
        set,
    ])
}

#[test]
fn schema_rejects_wrong_values_with_a_clear_message() -> anyhow::Result<()> {
    for (set, words) in [
        ("manager.replicas=two", ["replicas", "integer"]),
        (
            "webhookConfiguration.pod.failurePolicy=Never",
            ["failurePolicy", "Ignore"],
        ),
        ("manager.profile=huge", ["profile", "small"]),
        ("manager.webhook.port=99999", ["port", "maximum"]),
    ] {
        let output = template_with(set)?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "--set {set} was accepted");
        for word in words {
            assert!(stderr.contains(word), "--set {set}: {stderr}");
        }
    }
    let output = template_with("manager.replica=2")?;
    assert!(!output.status.success(), "a misspelled value was accepted");
    Ok(())
}

/// The chart's webhook configurations are the ones the manager applies (config/webhook, generated from
/// crates/webhook), so a `helm upgrade` and the manager never fight over a field.
#[test]
fn chart_webhooks_equal_the_generated_configurations() -> anyhow::Result<()> {
    let objects = yaml_documents(&template(&[])?)?;
    let generated =
        std::fs::read_to_string(helm::repo_root().join("config/webhook/manifests.yaml"))?;
    for want in yaml_documents(&generated)? {
        let kind = want["kind"].as_str().context("kind")?;
        let name = want["metadata"]["name"].as_str().context("name")?;
        let got = find(&objects, kind, name);
        assert_eq!(got["webhooks"], want["webhooks"], "{kind} {name}");
    }
    Ok(())
}

/// The CRDs in charts/kruise-rs/crds and charts/kruise-rs-crds/files are `make manifests`' copies of
/// config/crd; the CRD chart keeps them on uninstall.
#[test]
fn chart_crds_are_the_generated_crds() -> anyhow::Result<()> {
    let root = helm::repo_root();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root.join("config/crd"))? {
        let path = entry?.path();
        let name = path.file_name().context("file name")?.to_os_string();
        let want = std::fs::read(&path)?;
        for copy in ["charts/kruise-rs/crds", "charts/kruise-rs-crds/files"] {
            let copy = root.join(copy).join(&name);
            assert_eq!(
                std::fs::read(&copy).ok().as_deref(),
                Some(want.as_slice()),
                "{} is stale: run `make manifests`",
                copy.display()
            );
        }
        names.push(name);
    }
    for dir in ["charts/kruise-rs/crds", "charts/kruise-rs-crds/files"] {
        assert_eq!(
            std::fs::read_dir(root.join(dir))?.count(),
            names.len(),
            "{dir}"
        );
    }
    let rendered = yaml_documents(&helm::run(&[
        "template",
        "crds",
        CRDS_CHART,
        "--kube-version",
        KUBE_VERSION,
    ])?)?;
    assert_eq!(rendered.len(), names.len());
    for crd in &rendered {
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
    Ok(())
}

/// No wildcard anywhere in the chart's RBAC.
#[test]
fn rbac_has_no_wildcards() -> anyhow::Result<()> {
    for values in [None, Some("charts/kruise-rs/ci/production-values.yaml")] {
        let extra: Vec<&str> = values.map(|v| vec!["-f", v]).unwrap_or_default();
        for object in yaml_documents(&template(&extra)?)? {
            if object["kind"] == "ClusterRole" || object["kind"] == "Role" {
                for rule in object["rules"].as_array().context("rules")? {
                    for field in ["apiGroups", "resources", "verbs"] {
                        let items = rule[field].as_array().context("rule field")?;
                        assert!(!items.iter().any(|i| i == "*"), "wildcard in {rule}");
                    }
                }
            }
        }
    }
    Ok(())
}

/// ResourceDistribution's cluster-wide Secret and ConfigMap rights are granted only with its gate
/// on (directly or through AllAlpha: the gate is Alpha in v1.9.0), as the controller runs only then.
#[test]
fn resource_distribution_rbac_follows_its_gate() -> anyhow::Result<()> {
    let has_rules = |rendered: &str| rendered.contains("resources: [resourcedistributions/status]");
    ensure_eq(has_rules(&template(&[])?), false, "default values")?;
    for gates in ["ResourceDistributionGate=true", "AllAlpha=true"] {
        let rendered = template(&["--set", &format!("featureGates={gates}")])?;
        ensure_eq(has_rules(&rendered), true, gates)?;
        ensure_eq(
            rendered.contains("resources: [secrets, configmaps]"),
            true,
            gates,
        )?;
    }
    Ok(())
}

fn ensure_eq(have: bool, want: bool, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(have == want, "{what}: expected {want}, got {have}");
    Ok(())
}

/// Every kind the CRDs serve can be listed and watched by the manager with every gate on: a kind
/// added to `kruise_api::crd::all` without its rights in the chart fails here, not in a cluster.
#[test]
fn rbac_covers_every_served_kind() -> anyhow::Result<()> {
    let rendered = template(&["--set", "featureGates=AllAlpha=true\\,AllBeta=true"])?;
    let objects = yaml_documents(&rendered)?;
    let mut granted: std::collections::BTreeSet<(String, String, String)> = Default::default();
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        for rule in role["rules"].as_array().context("rules")? {
            let strings = |field: &str| -> Vec<String> {
                rule[field]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|i| i.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        granted.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    let mut missing = Vec::new();
    for crd in kruise_api::crd::all() {
        let (group, plural) = (crd.spec.group.clone(), crd.spec.names.plural.clone());
        for verb in ["list", "watch"] {
            if !granted.contains(&(group.clone(), plural.clone(), verb.to_owned())) {
                missing.push(format!("{verb} {plural}.{group}"));
            }
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "the chart's RBAC lacks, with every gate on: {missing:?}"
    );
    Ok(())
}
