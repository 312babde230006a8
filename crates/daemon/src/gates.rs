//! The OpenKruise feature gates kruise-daemon reads from `--feature-gates` (the manager's flag, passed by
//! the chart to both): OpenKruise v1.9.0's defaults and its coupling rule that `KruiseDaemon=false`
//! turns the daemon's gates off. Unknown names are left to the manager to report.

/// A daemon gate: its name and v1.9.0 default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    pub name: &'static str,
    pub default: bool,
    /// Beta (follows `AllBeta`) or Alpha (follows `AllAlpha`).
    pub beta: bool,
}

pub const DAEMON_WATCHING_POD: Gate = Gate {
    name: "DaemonWatchingPod",
    default: true,
    beta: true,
};
pub const IN_PLACE_UPDATE_ENV_FROM_METADATA: Gate = Gate {
    name: "InPlaceUpdateEnvFromMetadata",
    default: true,
    beta: true,
};
const KRUISE_DAEMON: Gate = Gate {
    name: "KruiseDaemon",
    default: true,
    beta: true,
};

/// Whether `gate` is on under the `--feature-gates` value `flag` (`A=true,B=false`). A value that is
/// not a boolean is an error naming the gate.
pub fn enabled(flag: &str, gate: Gate) -> Result<bool, String> {
    let mut explicit = std::collections::BTreeMap::new();
    for pair in flag.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--feature-gates: {pair:?} is not NAME=true|false"))?;
        let value: bool = value.trim().parse().map_err(|_| {
            format!(
                "--feature-gates: invalid value of {}: {:?}",
                name.trim(),
                value.trim()
            )
        })?;
        explicit.insert(name.trim().to_owned(), value);
    }
    let value = |g: Gate| {
        let stage = if g.beta { "AllBeta" } else { "AllAlpha" };
        explicit
            .get(g.name)
            .or_else(|| explicit.get(stage))
            .copied()
            .unwrap_or(g.default)
    };
    Ok(value(KRUISE_DAEMON) && value(gate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_flags_and_coupling() {
        let cases = [
            ("", DAEMON_WATCHING_POD, true),
            ("", IN_PLACE_UPDATE_ENV_FROM_METADATA, true),
            ("DaemonWatchingPod=false", DAEMON_WATCHING_POD, false),
            ("AllBeta=false", IN_PLACE_UPDATE_ENV_FROM_METADATA, false),
            // AllBeta=false turns KruiseDaemon (Beta) off, and with it every daemon gate.
            (
                "AllBeta=false,InPlaceUpdateEnvFromMetadata=true",
                IN_PLACE_UPDATE_ENV_FROM_METADATA,
                false,
            ),
            (
                "AllBeta=false,KruiseDaemon=true,InPlaceUpdateEnvFromMetadata=true",
                IN_PLACE_UPDATE_ENV_FROM_METADATA,
                true,
            ),
            ("KruiseDaemon=false", DAEMON_WATCHING_POD, false),
            (
                "ImagePullJobGate=true, Other=false",
                DAEMON_WATCHING_POD,
                true,
            ),
        ];
        for (flag, gate, want) in cases {
            assert_eq!(enabled(flag, gate), Ok(want), "{flag} {}", gate.name);
        }
        assert!(enabled("DaemonWatchingPod=yes", DAEMON_WATCHING_POD).is_err());
    }
}
