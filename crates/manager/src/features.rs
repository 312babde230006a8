//! OpenKruise's feature gates (`--feature-gates`), with OpenKruise v1.9's names, defaults, stages and
//! coupling rules, so that an OpenKruise deployment's command line means the same here. Each gate says
//! what kruise-rs does with it (every v1.9.0 gate is implemented); a gate kruise-rs always honours is
//! reported at start-up when it is turned off, and an unknown one when named, never silently ignored. Pure: parsing and resolution are tested without a process.

use std::collections::BTreeMap;

/// Maturity, as OpenKruise declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    /// A gate OpenKruise added after v1.9.0 (Alpha there). v1.9.0 does not know it, so `AllAlpha` and
    /// `AllBeta` leave it alone: only naming it turns it on, and a v1.9 command line means the same here.
    AfterV1_9,
}

/// What kruise-rs does with a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// The gate switches the behaviour it names.
    Gated,
    /// kruise-rs always behaves as the gate's `true` (the behaviour is GA in Kubernetes v1.34 or costs
    /// nothing); setting it false is reported.
    AlwaysOn,
}

pub struct Gate {
    pub name: &'static str,
    pub default: bool,
    pub stage: Stage,
    pub support: Support,
}

use Stage::{AfterV1_9, Alpha, Beta};
use Support::{AlwaysOn, Gated};

/// Every gate of OpenKruise v1.9.0 (`pkg/features/kruise_features.go` at tag v1.9.0: 34 gates), and the
/// two its main branch added since (stage [`AfterV1_9`]).
///
/// PersistentPodState has no gate of its own in v1.9.0: its controller runs whenever the manager
/// does, and its Pod injection is part of the Pod webhook (`PodWebhook`, always on here).
pub const GATES: &[Gate] = &[
    gate("PodWebhook", true, Beta, AlwaysOn),
    // kruise-daemon (crates/daemon) executes ContainerRecreateRequests; the gate switches the
    // ContainerRecreateRequest controller and webhook. Its other node work has gates of its own below.
    gate("KruiseDaemon", true, Beta, Gated),
    // Read by kruise-daemon (its --feature-gates): it watches the Pods of its node and reports their
    // containers' meta (`apps.kruise.io/runtime-containers-meta`).
    gate("DaemonWatchingPod", true, Beta, Gated),
    gate("WorkloadSpread", true, Beta, Gated),
    gate("PodUnavailableBudgetDeleteGate", true, Beta, Gated),
    gate("PodUnavailableBudgetUpdateGate", false, Alpha, Gated),
    // The in-place engine restarts, through kruise-daemon, the containers whose env reads a changed
    // label/annotation; off, such a change recreates the Pod.
    gate("InPlaceUpdateEnvFromMetadata", true, Beta, Gated),
    gate("StatefulSetAutoDeletePVC", true, Beta, AlwaysOn),
    // PodProbeMarker controller and webhook; the NodePodProbe controller also needs KruiseDaemon.
    gate("PodProbeMarkerGate", true, Beta, Gated),
    gate("PodIndexLabel", true, Beta, AlwaysOn),
    gate("ResourcesDeletionProtection", false, Beta, Gated),
    gate("ResourceDistributionGate", false, Alpha, Gated),
    gate("CloneSetShortHash", false, Alpha, Gated),
    gate("CloneSetPartitionRollback", false, Alpha, Gated),
    gate("CloneSetEventHandlerOptimization", false, Alpha, AlwaysOn),
    gate("PreparingUpdateAsUpdate", false, Alpha, Gated),
    gate(
        "RecreatePodWhenChangeVCTInCloneSetGate",
        false,
        Alpha,
        Gated,
    ),
    gate("ForceDeleteTimeoutExpectationGate", false, Alpha, AlwaysOn),
    // The CloneSet and Advanced DaemonSet controllers create a rollout's ImagePullJobs
    // (crates/controllers/src/predownload.rs); either gate turns ImagePullJobGate on (`resolve`).
    gate("PreDownloadImageForInPlaceUpdate", false, Alpha, Gated),
    gate("PreDownloadImageForDaemonSetUpdate", false, Alpha, Gated),
    // NodeImage, ImagePullJob and ImageListPullJob controllers (crates/controllers/src/imagepulljob),
    // kruise-daemon's puller (crates/daemon/src/imagepuller.rs).
    gate("ImagePullJobGate", false, Alpha, Gated),
    gate("KruisePodReadinessGate", false, Alpha, Gated),
    gate("TemplateNoDefaults", false, Alpha, Gated),
    // The Pod webhook moves the liveness probes of a Pod that asks for it into
    // `apps.kruise.io/container-probe-context`, as v1.9.0's does (what runs them is not part of
    // OpenKruise v1.9.0).
    gate("EnhancedLivenessProbe", false, Alpha, Gated),
    // The Pod webhook writes the matching markers' probes into new Pods (`kruise.io/podprobe`) for
    // their virtual kubelet to run; the PodProbeMarker controller marks such Pods from the
    // conditions their kubelet reports.
    gate("EnablePodProbeMarkerOnServerless", false, Alpha, Gated),
    gate(
        "SidecarSetPatchPodMetadataDefaultsAllowed",
        false,
        Alpha,
        Gated,
    ),
    // Pods on virtual kubelets (sidecars stopped by an image change) are not handled.
    gate("SidecarTerminator", false, Alpha, Gated),
    gate("EnableSortSidecarContainerByName", false, Alpha, Gated),
    gate("StatefulSetStartOrdinal", false, Alpha, AlwaysOn),
    gate("StatefulSetAutoResizePVCGate", false, Alpha, AlwaysOn),
    gate(
        "DefaultHostNetworkHostPortsInPodTemplates",
        false,
        AfterV1_9,
        Gated,
    ),
    gate("DaemonSetPruneIneligibleNodes", false, AfterV1_9, Gated),
    gate("DeletionProtectionForCRDCascadingGate", false, Alpha, Gated),
    // kruise-rs reads the externally managed certificates from the Secret --webhook-secret (as
    // cert-manager writes it: tls.crt, tls.key, ca.crt), not from a mounted WEBHOOK_CERT_DIR.
    gate("EnableExternalCerts", false, Alpha, Gated),
    gate("InPlaceWorkloadVerticalScaling", false, Alpha, AlwaysOn),
    gate("InPlacePodVerticalScaling", false, Alpha, AlwaysOn),
];

const fn gate(name: &'static str, default: bool, stage: Stage, support: Support) -> Gate {
    Gate {
        name,
        default,
        stage,
        support,
    }
}

/// The resolved gates: every known gate's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    values: BTreeMap<&'static str, bool>,
    /// The gates the flag named.
    explicit: std::collections::BTreeSet<&'static str>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        resolve(&BTreeMap::new())
    }
}

impl FeatureGates {
    /// Parses `--feature-gates` (`A=true,B=false`, `AllAlpha=true`, `AllBeta=true`) and applies
    /// OpenKruise's coupling rules. A value that is not a boolean, and a gate OpenKruise v1.9.0
    /// does not have, is an error naming the gate, as upstream's flag parser refuses it: the
    /// manager does not start.
    pub fn parse(flag: &str) -> Result<Self, String> {
        let mut explicit = BTreeMap::new();
        for pair in flag.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--feature-gates: {pair:?} is not NAME=true|false"))?;
            let (name, value) = (name.trim(), value.trim());
            let value: bool = value.parse().map_err(|_| {
                format!("--feature-gates: invalid value of {name}: {value:?} (true or false)")
            })?;
            let known = ["AllAlpha", "AllBeta"]
                .iter()
                .copied()
                .chain(GATES.iter().map(|g| g.name))
                .find(|known| *known == name);
            match known {
                Some(known) => {
                    explicit.insert(known, value);
                }
                None => {
                    return Err(format!(
                        "--feature-gates: unrecognized feature gate: {name} (OpenKruise v1.9.0 has no such gate)"
                    ));
                }
            }
        }
        Ok(resolve(&explicit))
    }

    pub fn enabled(&self, name: &str) -> bool {
        self.values.get(name).copied().unwrap_or(false)
    }

    /// One line per gate whose value kruise-rs cannot honour (off, but always on here).
    pub fn unsupported(&self) -> Vec<String> {
        GATES
            .iter()
            .filter_map(|g| match (g.support, self.enabled(g.name)) {
                (AlwaysOn, false) if g.default || self.explicit.contains(g.name) => Some(format!(
                    "feature gate {}=false has no effect: kruise-rs always behaves as {}=true",
                    g.name, g.name
                )),
                _ => None,
            })
            .collect()
    }
}

/// Defaults, then AllAlpha/AllBeta, then explicit values, then the coupling rules of OpenKruise's
/// `SetDefaultFeatureGates`.
fn resolve(explicit: &BTreeMap<&'static str, bool>) -> FeatureGates {
    let all_alpha = explicit.get("AllAlpha").copied();
    let all_beta = explicit.get("AllBeta").copied();
    let mut values: BTreeMap<&'static str, bool> = GATES
        .iter()
        .map(|g| {
            let by_stage = match g.stage {
                Alpha => all_alpha,
                Beta => all_beta,
                AfterV1_9 => None,
            };
            let value = explicit
                .get(g.name)
                .copied()
                .or(by_stage)
                .unwrap_or(g.default);
            (g.name, value)
        })
        .collect();
    let off = |values: &mut BTreeMap<&'static str, bool>, names: &[&'static str]| {
        for name in names {
            values.insert(name, false);
        }
    };
    if !values.get("PodWebhook").copied().unwrap_or(true) {
        off(
            &mut values,
            &[
                "KruisePodReadinessGate",
                "PodUnavailableBudgetDeleteGate",
                "PodUnavailableBudgetUpdateGate",
                "WorkloadSpread",
                "SidecarSetPatchPodMetadataDefaultsAllowed",
                "EnhancedLivenessProbe",
                "EnablePodProbeMarkerOnServerless",
            ],
        );
    }
    let daemon = values.get("KruiseDaemon").copied().unwrap_or(true);
    if !daemon {
        off(
            &mut values,
            &[
                "PreDownloadImageForInPlaceUpdate",
                "PreDownloadImageForDaemonSetUpdate",
                "DaemonWatchingPod",
                "InPlaceUpdateEnvFromMetadata",
                "PodProbeMarkerGate",
                "SidecarTerminator",
                "ImagePullJobGate",
                "EnhancedLivenessProbe",
            ],
        );
    }
    let predownload = [
        "PreDownloadImageForInPlaceUpdate",
        "PreDownloadImageForDaemonSetUpdate",
    ]
    .iter()
    .any(|g| values.get(g).copied().unwrap_or(false));
    if predownload {
        values.insert("ImagePullJobGate", true);
    }
    if !values
        .get("ResourcesDeletionProtection")
        .copied()
        .unwrap_or(false)
    {
        values.insert("DeletionProtectionForCRDCascadingGate", false);
    }
    FeatureGates {
        values,
        explicit: explicit.keys().copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every gate the manager's code asks about (`.enabled("Name")`, a controller's
    /// `gate: Some("Name")`) is one of [`GATES`]: a
    /// misspelt name would read as off, silently.
    #[test]
    fn every_gate_the_code_asks_about_exists() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut asked = Vec::new();
        let mut folders = vec![src];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).expect("source folder") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    folders.push(path);
                    continue;
                }
                // This file defines the gates (and this test's own text would match).
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("features.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("source file");
                // `.enabled(` (or a controller's `gate: Some(`) then optional whitespace, then a
                // string literal.
                let calls = text
                    .match_indices(".enabled(")
                    .chain(text.match_indices("gate: Some("));
                for (at, call) in calls {
                    let rest = text[at + call.len()..].trim_start();
                    if let Some(literal) = rest.strip_prefix('"')
                        && let Some(end) = literal.find('"')
                    {
                        asked.push((path.display().to_string(), literal[..end].to_owned()));
                    }
                }
            }
        }
        assert!(asked.len() > 30, "found only {} gate checks", asked.len());
        let unknown: Vec<_> = asked
            .iter()
            .filter(|(_, name)| !GATES.iter().any(|g| g.name == name))
            .collect();
        assert!(
            unknown.is_empty(),
            "gates asked about but not defined: {unknown:?}"
        );
    }

    #[test]
    fn defaults_are_openkruise_v1_9() {
        let gates = FeatureGates::default();
        let on: Vec<&str> = GATES
            .iter()
            .filter(|g| gates.enabled(g.name))
            .map(|g| g.name)
            .collect();
        assert_eq!(
            on,
            [
                "PodWebhook",
                "KruiseDaemon",
                "DaemonWatchingPod",
                "WorkloadSpread",
                "PodUnavailableBudgetDeleteGate",
                "InPlaceUpdateEnvFromMetadata",
                "StatefulSetAutoDeletePVC",
                "PodProbeMarkerGate",
                "PodIndexLabel",
            ]
        );
        assert_eq!(GATES.len(), 36);
    }

    #[test]
    fn parsing_and_coupling() {
        let cases: &[(&str, &[(&str, bool)])] = &[
            (
                "",
                &[("PreparingUpdateAsUpdate", false), ("PodWebhook", true)],
            ),
            (
                "PreparingUpdateAsUpdate=true, CloneSetPartitionRollback=true",
                &[
                    ("PreparingUpdateAsUpdate", true),
                    ("CloneSetPartitionRollback", true),
                ],
            ),
            (
                "AllAlpha=true",
                &[
                    ("PreparingUpdateAsUpdate", true),
                    ("EnableExternalCerts", true),
                    ("ResourcesDeletionProtection", false),
                ],
            ),
            // Gates v1.9.0 does not have are not part of its AllAlpha; naming one still works.
            (
                "AllAlpha=true",
                &[
                    ("DaemonSetPruneIneligibleNodes", false),
                    ("DefaultHostNetworkHostPortsInPodTemplates", false),
                    ("ResourceDistributionGate", true),
                ],
            ),
            (
                "AllAlpha=true,DaemonSetPruneIneligibleNodes=true",
                &[("DaemonSetPruneIneligibleNodes", true)],
            ),
            // ResourceDistributionGate is Alpha in v1.9.0 (Beta only on upstream's main branch).
            ("AllBeta=true", &[("ResourceDistributionGate", false)]),
            (
                "AllAlpha=true,EnableExternalCerts=false",
                &[("EnableExternalCerts", false), ("TemplateNoDefaults", true)],
            ),
            (
                "AllBeta=false",
                &[
                    ("PodWebhook", false),
                    ("WorkloadSpread", false),
                    ("PreparingUpdateAsUpdate", false),
                ],
            ),
            (
                "PodWebhook=false,KruisePodReadinessGate=true",
                &[("KruisePodReadinessGate", false)],
            ),
            (
                "KruiseDaemon=false",
                &[
                    ("InPlaceUpdateEnvFromMetadata", false),
                    ("DaemonWatchingPod", false),
                ],
            ),
            (
                "PreDownloadImageForInPlaceUpdate=true",
                &[("ImagePullJobGate", true)],
            ),
            (
                "KruiseDaemon=false,PreDownloadImageForInPlaceUpdate=true",
                &[
                    ("ImagePullJobGate", false),
                    ("PreDownloadImageForInPlaceUpdate", false),
                ],
            ),
            (
                "PreDownloadImageForDaemonSetUpdate=true,ImagePullJobGate=false",
                &[
                    ("ImagePullJobGate", true),
                    ("PreDownloadImageForDaemonSetUpdate", true),
                    ("PreDownloadImageForInPlaceUpdate", false),
                ],
            ),
            (
                "KruiseDaemon=false,PreDownloadImageForDaemonSetUpdate=true",
                &[
                    ("ImagePullJobGate", false),
                    ("PreDownloadImageForDaemonSetUpdate", false),
                ],
            ),
            (
                "AllAlpha=true",
                &[
                    ("PreDownloadImageForInPlaceUpdate", true),
                    ("PreDownloadImageForDaemonSetUpdate", true),
                    ("ImagePullJobGate", true),
                ],
            ),
            (
                "DeletionProtectionForCRDCascadingGate=true",
                &[("DeletionProtectionForCRDCascadingGate", false)],
            ),
            (
                "ResourcesDeletionProtection=true,DeletionProtectionForCRDCascadingGate=true",
                &[("DeletionProtectionForCRDCascadingGate", true)],
            ),
        ];
        for (flag, want) in cases {
            let gates = FeatureGates::parse(flag).expect(flag);
            for (name, value) in *want {
                assert_eq!(gates.enabled(name), *value, "{flag}: {name}");
            }
        }
    }

    #[test]
    fn bad_flags_name_the_gate() {
        let cases = [
            ("PodWebhook=yes", "invalid value of PodWebhook: \"yes\""),
            ("PodWebhook", "\"PodWebhook\" is not NAME=true|false"),
            ("NoSuchGate=true", "unrecognized feature gate: NoSuchGate"),
        ];
        for (flag, want) in cases {
            let error = FeatureGates::parse(flag).expect_err(flag);
            assert!(error.contains(want), "{flag}: {error}");
        }
    }

    #[test]
    fn unsupported_gates_are_reported() {
        let defaults = FeatureGates::default().unsupported();
        // kruise-daemon's gates are implemented.
        for gate in [
            "KruiseDaemon",
            "DaemonWatchingPod",
            "InPlaceUpdateEnvFromMetadata",
        ] {
            assert!(!defaults.iter().any(|l| l.contains(gate)), "{gate}");
        }
        assert!(
            !defaults
                .iter()
                .any(|l| l.contains("PreparingUpdateAsUpdate"))
        );
        let chart = FeatureGates::parse("ImagePullJobGate=true").expect("valid");
        assert!(
            !chart
                .unsupported()
                .iter()
                .any(|l| l.contains("ImagePullJobGate")),
            "ImagePullJobGate is implemented"
        );
        let predownload = FeatureGates::parse(
            "PreDownloadImageForInPlaceUpdate=true,PreDownloadImageForDaemonSetUpdate=true",
        )
        .expect("valid");
        assert!(
            !predownload
                .unsupported()
                .iter()
                .any(|l| l.contains("PreDownloadImage")),
            "the pre-download gates are implemented"
        );
        // Every v1.9.0 gate is implemented: all of them on, nothing is reported.
        let every = FeatureGates::parse("AllAlpha=true,AllBeta=true").expect("valid");
        assert_eq!(every.unsupported(), Vec::<String>::new());
        // An unknown gate is refused, as upstream's flag parser refuses it, naming the gate.
        let unknown = FeatureGates::parse("PodWebhook=true,NoSuchGate=true");
        assert!(
            unknown
                .as_ref()
                .is_err_and(|e| e.contains("unrecognized feature gate: NoSuchGate")),
            "{unknown:?}"
        );
        let off = FeatureGates::parse("PodIndexLabel=false").expect("valid");
        assert!(
            off.unsupported()
                .iter()
                .any(|l| l.contains("PodIndexLabel=false has no effect"))
        );
        let gated = FeatureGates::parse("PreparingUpdateAsUpdate=true").expect("valid");
        assert!(
            !gated
                .unsupported()
                .iter()
                .any(|l| l.contains("PreparingUpdateAsUpdate"))
        );
    }
}
