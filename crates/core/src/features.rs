//! OpenKruise's feature gates (`--feature-gates`, read by kruise-manager and kruise-daemon alike), with OpenKruise v1.9's names, defaults, stages and
//! coupling rules, so that an OpenKruise deployment's command line means the same here. Each gate says
//! what kruise-rs does with it (every v1.9.0 gate is implemented); a gate kruise-rs always honours is
//! reported at start-up when it is turned off, and an unknown one when named, never silently ignored. Pure: parsing and resolution are tested without a process.

use std::collections::{BTreeMap, BTreeSet};

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

/// A gate's row: its default, stage and what kruise-rs does with it.
pub struct GateSpec {
    pub gate: Gate,
    pub default: bool,
    pub stage: Stage,
    pub support: Support,
}

use Stage::{AfterV1_9, Alpha, Beta};
use Support::{AlwaysOn, Gated};

/// Declares [`Gate`] (one variant per gate, named as OpenKruise names it) and [`GATES`] from one
/// list, so that a gate the code asks about is a variant the compiler checks, and every variant
/// has its row.
macro_rules! gates {
    ($($name:ident: $default:expr, $stage:expr, $support:expr;)*) => {
        /// A feature gate of OpenKruise v1.9.0 (and the two added after it).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Gate {
            $($name),*
        }

        impl Gate {
            /// The gate's name on the command line (`--feature-gates`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Gate::$name => stringify!($name)),*
                }
            }
        }

        /// Every gate of OpenKruise v1.9.0 (`pkg/features/kruise_features.go` at tag v1.9.0: 34 gates), and the
        /// two its main branch added since (stage [`AfterV1_9`]).
        ///
        /// PersistentPodState has no gate of its own in v1.9.0: its controller runs whenever the manager
        /// does, and its Pod injection is part of the Pod webhook (`PodWebhook`, always on here).
        pub const GATES: &[GateSpec] = &[
            $(GateSpec { gate: Gate::$name, default: $default, stage: $stage, support: $support }),*
        ];
    };
}

gates! {
    PodWebhook: true, Beta, AlwaysOn;
    // kruise-daemon (crates/daemon) executes ContainerRecreateRequests; the gate switches the
    // ContainerRecreateRequest controller and webhook. Its other node work has gates of its own below.
    KruiseDaemon: true, Beta, Gated;
    // Read by kruise-daemon (its --feature-gates): it watches the Pods of its node and reports their
    // containers' meta (`apps.kruise.io/runtime-containers-meta`).
    DaemonWatchingPod: true, Beta, Gated;
    WorkloadSpread: true, Beta, Gated;
    PodUnavailableBudgetDeleteGate: true, Beta, Gated;
    PodUnavailableBudgetUpdateGate: false, Alpha, Gated;
    // The in-place engine restarts, through kruise-daemon, the containers whose env reads a changed
    // label/annotation; off, such a change recreates the Pod.
    InPlaceUpdateEnvFromMetadata: true, Beta, Gated;
    StatefulSetAutoDeletePVC: true, Beta, AlwaysOn;
    // PodProbeMarker controller and webhook; the NodePodProbe controller also needs KruiseDaemon.
    PodProbeMarkerGate: true, Beta, Gated;
    PodIndexLabel: true, Beta, AlwaysOn;
    ResourcesDeletionProtection: false, Beta, Gated;
    ResourceDistributionGate: false, Alpha, Gated;
    CloneSetShortHash: false, Alpha, Gated;
    CloneSetPartitionRollback: false, Alpha, Gated;
    CloneSetEventHandlerOptimization: false, Alpha, AlwaysOn;
    PreparingUpdateAsUpdate: false, Alpha, Gated;
    RecreatePodWhenChangeVCTInCloneSetGate: false, Alpha, Gated;
    ForceDeleteTimeoutExpectationGate: false, Alpha, AlwaysOn;
    // The CloneSet and Advanced DaemonSet controllers create a rollout's ImagePullJobs
    // (crates/controllers/src/runtime/predownload.rs); either gate turns ImagePullJobGate on (`resolve`).
    PreDownloadImageForInPlaceUpdate: false, Alpha, Gated;
    PreDownloadImageForDaemonSetUpdate: false, Alpha, Gated;
    // NodeImage, ImagePullJob and ImageListPullJob controllers (crates/controllers/src/imagepulljob),
    // kruise-daemon's puller (crates/daemon/src/imagepuller.rs).
    ImagePullJobGate: false, Alpha, Gated;
    KruisePodReadinessGate: false, Alpha, Gated;
    TemplateNoDefaults: false, Alpha, Gated;
    // The Pod webhook moves the liveness probes of a Pod that asks for it into
    // `apps.kruise.io/container-probe-context`, as v1.9.0's does (what runs them is not part of
    // OpenKruise v1.9.0).
    EnhancedLivenessProbe: false, Alpha, Gated;
    // The Pod webhook writes the matching markers' probes into new Pods (`kruise.io/podprobe`) for
    // their virtual kubelet to run; the PodProbeMarker controller marks such Pods from the
    // conditions their kubelet reports.
    EnablePodProbeMarkerOnServerless: false, Alpha, Gated;
    SidecarSetPatchPodMetadataDefaultsAllowed: false, Alpha, Gated;
    // Pods on virtual kubelets (sidecars stopped by an image change) are not handled.
    SidecarTerminator: false, Alpha, Gated;
    EnableSortSidecarContainerByName: false, Alpha, Gated;
    StatefulSetStartOrdinal: false, Alpha, AlwaysOn;
    StatefulSetAutoResizePVCGate: false, Alpha, AlwaysOn;
    DefaultHostNetworkHostPortsInPodTemplates: false, AfterV1_9, Gated;
    DaemonSetPruneIneligibleNodes: false, AfterV1_9, Gated;
    DeletionProtectionForCRDCascadingGate: false, Alpha, Gated;
    // kruise-rs reads the externally managed certificates from the Secret --webhook-secret (as
    // cert-manager writes it: tls.crt, tls.key, ca.crt), not from a mounted WEBHOOK_CERT_DIR.
    EnableExternalCerts: false, Alpha, Gated;
    InPlaceWorkloadVerticalScaling: false, Alpha, AlwaysOn;
    InPlacePodVerticalScaling: false, Alpha, AlwaysOn;

}

impl Gate {
    /// The gate named `name`, if OpenKruise has one.
    pub fn from_name(name: &str) -> Option<Self> {
        GATES.iter().map(|g| g.gate).find(|g| g.name() == name)
    }
}

/// The resolved gates: every known gate's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    values: BTreeMap<Gate, bool>,
    /// The gates the flag named.
    explicit: BTreeSet<Gate>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        resolve(&Named::default())
    }
}

/// What `--feature-gates` named: `AllAlpha`, `AllBeta`, and gates by name.
#[derive(Default)]
struct Named {
    all_alpha: Option<bool>,
    all_beta: Option<bool>,
    gates: BTreeMap<Gate, bool>,
}

impl FeatureGates {
    /// Parses `--feature-gates` (`A=true,B=false`, `AllAlpha=true`, `AllBeta=true`) and applies
    /// OpenKruise's coupling rules. A value that is not a boolean, and a gate OpenKruise v1.9.0
    /// does not have, is an error naming the gate, as upstream's flag parser refuses it: the
    /// manager does not start.
    pub fn parse(flag: &str) -> Result<Self, String> {
        let mut named = Named::default();
        for pair in flag.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--feature-gates: {pair:?} is not NAME=true|false"))?;
            let (name, value) = (name.trim(), value.trim());
            let value: bool = value.parse().map_err(|_| {
                format!("--feature-gates: invalid value of {name}: {value:?} (true or false)")
            })?;
            match (name, Gate::from_name(name)) {
                ("AllAlpha", _) => named.all_alpha = Some(value),
                ("AllBeta", _) => named.all_beta = Some(value),
                (_, Some(gate)) => {
                    named.gates.insert(gate, value);
                }
                (_, None) => {
                    return Err(format!(
                        "--feature-gates: unrecognized feature gate: {name} (OpenKruise v1.9.0 has no such gate)"
                    ));
                }
            }
        }
        Ok(resolve(&named))
    }

    pub fn enabled(&self, gate: Gate) -> bool {
        self.values.get(&gate).copied().unwrap_or(false)
    }

    /// The names of the gates that are on, in the order OpenKruise declares them.
    pub fn enabled_names(&self) -> Vec<&'static str> {
        GATES
            .iter()
            .filter(|g| self.enabled(g.gate))
            .map(|g| g.gate.name())
            .collect()
    }

    /// One line per gate whose value kruise-rs cannot honour (off, but always on here).
    pub fn unsupported(&self) -> Vec<String> {
        GATES
            .iter()
            .filter_map(|g| match (g.support, self.enabled(g.gate)) {
                (AlwaysOn, false) if g.default || self.explicit.contains(&g.gate) => Some(format!(
                    "feature gate {}=false has no effect: kruise-rs always behaves as {}=true",
                    g.gate.name(),
                    g.gate.name()
                )),
                _ => None,
            })
            .collect()
    }
}

/// Defaults, then AllAlpha/AllBeta, then explicit values, then the coupling rules of OpenKruise's
/// `SetDefaultFeatureGates`.
fn resolve(named: &Named) -> FeatureGates {
    use Gate::*;
    let mut values: BTreeMap<Gate, bool> = GATES
        .iter()
        .map(|g| {
            let by_stage = match g.stage {
                Alpha => named.all_alpha,
                Beta => named.all_beta,
                AfterV1_9 => None,
            };
            let value = named
                .gates
                .get(&g.gate)
                .copied()
                .or(by_stage)
                .unwrap_or(g.default);
            (g.gate, value)
        })
        .collect();
    let on =
        |values: &BTreeMap<Gate, bool>, gate: Gate| values.get(&gate).copied().unwrap_or(false);
    let off = |values: &mut BTreeMap<Gate, bool>, gates: &[Gate]| {
        for gate in gates {
            values.insert(*gate, false);
        }
    };
    if !on(&values, PodWebhook) {
        off(
            &mut values,
            &[
                KruisePodReadinessGate,
                PodUnavailableBudgetDeleteGate,
                PodUnavailableBudgetUpdateGate,
                WorkloadSpread,
                SidecarSetPatchPodMetadataDefaultsAllowed,
                EnhancedLivenessProbe,
                EnablePodProbeMarkerOnServerless,
            ],
        );
    }
    if !on(&values, KruiseDaemon) {
        off(
            &mut values,
            &[
                PreDownloadImageForInPlaceUpdate,
                PreDownloadImageForDaemonSetUpdate,
                DaemonWatchingPod,
                InPlaceUpdateEnvFromMetadata,
                PodProbeMarkerGate,
                SidecarTerminator,
                ImagePullJobGate,
                EnhancedLivenessProbe,
            ],
        );
    }
    if on(&values, PreDownloadImageForInPlaceUpdate)
        || on(&values, PreDownloadImageForDaemonSetUpdate)
    {
        values.insert(ImagePullJobGate, true);
    }
    if !on(&values, ResourcesDeletionProtection) {
        values.insert(DeletionProtectionForCRDCascadingGate, false);
    }
    FeatureGates {
        values,
        explicit: named.gates.keys().copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gates.enabled(name)` for the tables below.
    fn on(gates: &FeatureGates, name: &str) -> bool {
        gates.enabled(Gate::from_name(name).expect(name))
    }

    /// Every variant is its own row of [`GATES`] (the row `spec` reads), under its own name.
    #[test]
    fn every_gate_has_its_row_and_its_name() {
        for (at, row) in GATES.iter().enumerate() {
            assert_eq!(row.gate as usize, at, "{:?}", row.gate);
            assert_eq!(Gate::from_name(row.gate.name()), Some(row.gate));
        }
        assert_eq!(Gate::from_name("NoSuchGate"), None);
        assert_eq!(Gate::from_name("AllAlpha"), None);
    }

    #[test]
    fn defaults_are_openkruise_v1_9() {
        let gates = FeatureGates::default();
        assert_eq!(
            gates.enabled_names(),
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
            // kruise-daemon's gates: AllBeta=false turns KruiseDaemon (Beta) off and with it
            // every daemon gate, unless KruiseDaemon is named.
            (
                "AllBeta=false,InPlaceUpdateEnvFromMetadata=true",
                &[("InPlaceUpdateEnvFromMetadata", false)],
            ),
            (
                "AllBeta=false,KruiseDaemon=true,InPlaceUpdateEnvFromMetadata=true",
                &[
                    ("InPlaceUpdateEnvFromMetadata", true),
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
                assert_eq!(on(&gates, name), *value, "{flag}: {name}");
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
