//! The workload a command names: `cloneset/web`, `cloneset web`, `asts/db`, `deploy/api`, …

use anyhow::{Context, bail};
use kube::api::{ApiResource, GroupVersionKind};

/// Every kind the plugin drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    CloneSet,
    /// Advanced StatefulSet (`statefulsets.apps.kruise.io`).
    AdvancedStatefulSet,
    /// Advanced DaemonSet (`daemonsets.apps.kruise.io`).
    AdvancedDaemonSet,
    UnitedDeployment,
    SidecarSet,
    Deployment,
    StatefulSet,
    DaemonSet,
}

/// `(kind, accepted names)`; the first name is the one messages use.
const NAMES: &[(Kind, &[&str])] = &[
    (
        Kind::CloneSet,
        &[
            "cloneset",
            "clonesets",
            "clone",
            "cloneset.apps.kruise.io",
            "clonesets.apps.kruise.io",
        ],
    ),
    (
        Kind::AdvancedStatefulSet,
        &[
            "statefulset.apps.kruise.io",
            "statefulsets.apps.kruise.io",
            "asts",
            "advancedstatefulset",
            "advancedstatefulsets",
        ],
    ),
    (
        Kind::AdvancedDaemonSet,
        &[
            "daemonset.apps.kruise.io",
            "daemonsets.apps.kruise.io",
            "ads",
            "advanceddaemonset",
            "advanceddaemonsets",
        ],
    ),
    (
        Kind::UnitedDeployment,
        &[
            "uniteddeployment",
            "uniteddeployments",
            "ud",
            "uniteddeployment.apps.kruise.io",
            "uniteddeployments.apps.kruise.io",
        ],
    ),
    (
        Kind::SidecarSet,
        &[
            "sidecarset",
            "sidecarsets",
            "sidecarset.apps.kruise.io",
            "sidecarsets.apps.kruise.io",
        ],
    ),
    (
        Kind::Deployment,
        &[
            "deployment",
            "deployments",
            "deploy",
            "deployment.apps",
            "deployments.apps",
        ],
    ),
    (
        Kind::StatefulSet,
        &[
            "statefulset",
            "statefulsets",
            "sts",
            "statefulset.apps",
            "statefulsets.apps",
        ],
    ),
    (
        Kind::DaemonSet,
        &[
            "daemonset",
            "daemonsets",
            "ds",
            "daemonset.apps",
            "daemonsets.apps",
        ],
    ),
];

impl Kind {
    pub fn parse(name: &str) -> anyhow::Result<Self> {
        let lower = name.to_ascii_lowercase();
        NAMES
            .iter()
            .find(|(_, names)| names.contains(&lower.as_str()))
            .map(|(kind, _)| *kind)
            .with_context(|| {
                let known: Vec<&str> = NAMES.iter().map(|(_, n)| n[0]).collect();
                format!(
                    "unknown resource type {name:?}; valid types: {}",
                    known.join(", ")
                )
            })
    }

    /// The name messages use, as kubectl does (`cloneset "web" successfully rolled out`).
    pub fn display(self) -> &'static str {
        NAMES
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("workload", |(_, names)| names[0])
    }

    pub fn api_kind(self) -> &'static str {
        match self {
            Kind::CloneSet => "CloneSet",
            Kind::AdvancedStatefulSet | Kind::StatefulSet => "StatefulSet",
            Kind::AdvancedDaemonSet | Kind::DaemonSet => "DaemonSet",
            Kind::UnitedDeployment => "UnitedDeployment",
            Kind::SidecarSet => "SidecarSet",
            Kind::Deployment => "Deployment",
        }
    }

    pub fn is_kruise(self) -> bool {
        !matches!(self, Kind::Deployment | Kind::StatefulSet | Kind::DaemonSet)
    }

    pub fn namespaced(self) -> bool {
        self != Kind::SidecarSet
    }

    pub fn api_resource(self) -> ApiResource {
        let (group, version) = if self.is_kruise() {
            ("apps.kruise.io", "v1beta1")
        } else {
            ("apps", "v1")
        };
        let plural = match self {
            Kind::CloneSet => "clonesets",
            Kind::AdvancedStatefulSet | Kind::StatefulSet => "statefulsets",
            Kind::AdvancedDaemonSet | Kind::DaemonSet => "daemonsets",
            Kind::UnitedDeployment => "uniteddeployments",
            Kind::SidecarSet => "sidecarsets",
            Kind::Deployment => "deployments",
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, self.api_kind()),
            plural,
        )
    }

    /// The workload's resource in the version its revisions hold the template in: v1alpha1 for a
    /// UnitedDeployment (its revisions hold the v1alpha1 template, the only one OpenKruise v1.9.0 has, whose
    /// CloneSet template is the v1alpha1 CloneSet spec), else [`Kind::api_resource`].
    pub fn revision_api_resource(self) -> ApiResource {
        if self == Kind::UnitedDeployment {
            return ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", self.api_kind()),
                "uniteddeployments",
            );
        }
        self.api_resource()
    }

    /// JSON pointer of the Pod template(s) a restart annotates; UnitedDeployment's is inside the one
    /// subset workload template it has, found in the object.
    pub fn pod_template_pointer(self) -> Option<&'static str> {
        match self {
            Kind::SidecarSet | Kind::UnitedDeployment => None,
            _ => Some("/spec/template"),
        }
    }

    /// JSON pointer of the field pause/resume set, when the kind can be paused.
    pub fn paused_pointer(self) -> Option<&'static str> {
        match self {
            Kind::SidecarSet => Some("/spec/updateStrategy/paused"),
            Kind::CloneSet | Kind::AdvancedStatefulSet | Kind::AdvancedDaemonSet => {
                Some("/spec/updateStrategy/rollingUpdate/paused")
            }
            Kind::Deployment => Some("/spec/paused"),
            Kind::UnitedDeployment | Kind::StatefulSet | Kind::DaemonSet => None,
        }
    }
}

/// A named workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub kind: Kind,
    pub name: String,
}

impl Target {
    /// `kind/name`, or `kind` followed by `name`, as kubectl accepts.
    pub fn parse(resource: &str, name: Option<&str>) -> anyhow::Result<Self> {
        let (kind, name) = match (resource.split_once('/'), name) {
            (Some((kind, name)), None) => (kind, name),
            (Some(_), Some(extra)) => {
                bail!(
                    "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (got extra {extra:?})"
                )
            }
            (None, Some(name)) => (resource, name),
            (None, None) => bail!("{resource:?}: a name is required (e.g. cloneset/web)"),
        };
        if name.is_empty() {
            bail!("{resource:?}: the name is empty");
        }
        Ok(Self {
            kind: Kind::parse(kind)?,
            name: name.to_owned(),
        })
    }

    /// `cloneset/web`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.kind.display(), self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (resource, name, (kind, name) or an error fragment).
    type Case = (
        &'static str,
        Option<&'static str>,
        Result<(Kind, &'static str), &'static str>,
    );

    #[test]
    fn parse_table() {
        let cases: &[Case] = &[
            ("cloneset/web", None, Ok((Kind::CloneSet, "web"))),
            ("CloneSet", Some("web"), Ok((Kind::CloneSet, "web"))),
            ("asts/db", None, Ok((Kind::AdvancedStatefulSet, "db"))),
            (
                "statefulsets.apps.kruise.io/db",
                None,
                Ok((Kind::AdvancedStatefulSet, "db")),
            ),
            ("statefulset/db", None, Ok((Kind::StatefulSet, "db"))),
            ("ads/agent", None, Ok((Kind::AdvancedDaemonSet, "agent"))),
            ("ds/agent", None, Ok((Kind::DaemonSet, "agent"))),
            ("ud/app", None, Ok((Kind::UnitedDeployment, "app"))),
            ("sidecarset/log", None, Ok((Kind::SidecarSet, "log"))),
            ("deploy/api", None, Ok((Kind::Deployment, "api"))),
            ("pod/x", None, Err("unknown resource type")),
            ("cloneset", None, Err("a name is required")),
            ("cloneset/", None, Err("the name is empty")),
            ("cloneset/a", Some("b"), Err("no need to specify")),
        ];
        for (resource, name, want) in cases {
            let got = Target::parse(resource, *name);
            match (got, want) {
                (Ok(t), Ok((kind, n))) => {
                    assert_eq!((t.kind, t.name.as_str()), (*kind, *n), "{resource}")
                }
                (Err(e), Err(msg)) => assert!(e.to_string().contains(msg), "{resource}: {e}"),
                (got, want) => panic!("{resource}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn api_resources() {
        let ar = Kind::AdvancedStatefulSet.api_resource();
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("apps.kruise.io/v1beta1", "statefulsets")
        );
        let ar = Kind::DaemonSet.api_resource();
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("apps/v1", "daemonsets")
        );
        let ar = Kind::UnitedDeployment.revision_api_resource();
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("apps.kruise.io/v1alpha1", "uniteddeployments")
        );
        let ar = Kind::CloneSet.revision_api_resource();
        assert_eq!(ar.api_version, "apps.kruise.io/v1beta1");
    }
}
