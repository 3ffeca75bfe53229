//! Which DRA generation the plugin speaks: classic (controller allocation, the
//! NodeAllocationState, `v1alpha2`/`v1alpha3.Node`) or structured (ResourceSlices, the
//! `DRAPlugin` services). Pure: the choice is made from the `resource.k8s.io` versions the
//! API server's discovery lists, which `Plugin::run` fetches.

use std::fmt;
use std::str::FromStr;

/// Which DRA generation a plugin is told to speak (a driver's `--mode` flag, parsed with
/// `FromStr` from `auto`, `classic` or `structured`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ModeFlag {
    /// Pick from the API server's discovery.
    #[default]
    Auto,
    /// Classic DRA, whatever the API server serves.
    Classic,
    /// Structured DRA; the API server must serve `resource.k8s.io` `v1` or `v1beta1`.
    Structured,
}

impl FromStr for ModeFlag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "classic" => Ok(Self::Classic),
            "structured" => Ok(Self::Structured),
            other => Err(format!(
                "unknown mode {other:?}; one of auto, classic, structured"
            )),
        }
    }
}

impl fmt::Display for ModeFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Classic => "classic",
            Self::Structured => "structured",
        })
    }
}

/// The `resource.k8s.io` version structured mode reads claims and writes slices through.
///
/// Not `#[non_exhaustive]`: code that picks a typed API by version (as the plugin does)
/// must handle every version, so a new one is a breaking release anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceApi {
    /// `resource.k8s.io/v1` (Kubernetes 1.34+).
    V1,
    /// `resource.k8s.io/v1beta1` (Kubernetes 1.32–1.33; still served by 1.34+).
    V1beta1,
}

impl ResourceApi {
    /// The version string, e.g. `v1beta1`.
    pub fn version(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1beta1 => "v1beta1",
        }
    }
}

/// What the plugin runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Classic DRA.
    Classic,
    /// Structured DRA through this API version.
    Structured(ResourceApi),
}

/// Why no mode could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModeError {
    /// Nothing DRA is served.
    #[error(
        "the API server serves no resource.k8s.io version this driver speaks (served: {served:?}); classic DRA needs v1alpha2 (Kubernetes 1.27-1.30 with the DynamicResourceAllocation gate and runtime-config), structured DRA needs v1beta1 (1.32+) or v1"
    )]
    NoDra {
        /// What discovery listed.
        served: Vec<String>,
    },
    /// Structured DRA asked for, against a server without v1/v1beta1.
    #[error(
        "structured DRA (mode structured) needs resource.k8s.io v1 or v1beta1, the API server serves {served:?}"
    )]
    NoStructured {
        /// What discovery listed.
        served: Vec<String>,
    },
}

/// The newest structured version among `served`, if any.
fn structured_api(served: &[String]) -> Option<ResourceApi> {
    if served.iter().any(|v| v == "v1") {
        Some(ResourceApi::V1)
    } else if served.iter().any(|v| v == "v1beta1") {
        Some(ResourceApi::V1beta1)
    } else {
        None
    }
}

/// Chooses the mode from the flag and the `resource.k8s.io` versions the API server
/// serves. `served` is only consulted when the flag needs it (classic ignores it), so a
/// caller may pass an empty list for `--mode classic` without asking the server.
/// Returns the mode and why, for the log.
///
/// ```
/// use dra_kubelet_plugin::mode::{Mode, ModeFlag, ResourceApi, choose};
///
/// let served = ["v1".to_owned(), "v1beta1".to_owned()];
/// let (mode, _why) = choose(ModeFlag::Auto, &served).unwrap();
/// assert_eq!(mode, Mode::Structured(ResourceApi::V1));
/// assert!(choose(ModeFlag::Structured, &["v1alpha2".to_owned()]).is_err());
/// ```
pub fn choose(flag: ModeFlag, served: &[String]) -> Result<(Mode, String), ModeError> {
    match flag {
        ModeFlag::Classic => Ok((Mode::Classic, "mode classic: classic DRA".to_owned())),
        ModeFlag::Structured => match structured_api(served) {
            Some(api) => Ok((
                Mode::Structured(api),
                format!(
                    "mode structured: the API server serves resource.k8s.io {served:?}, using {}",
                    api.version()
                ),
            )),
            None => Err(ModeError::NoStructured {
                served: served.to_vec(),
            }),
        },
        ModeFlag::Auto => {
            if let Some(api) = structured_api(served) {
                Ok((
                    Mode::Structured(api),
                    format!(
                        "auto mode: the API server serves resource.k8s.io {served:?}; using structured DRA through {}",
                        api.version()
                    ),
                ))
            } else if served.iter().any(|v| v == "v1alpha2") {
                Ok((
                    Mode::Classic,
                    format!(
                        "auto mode: the API server serves resource.k8s.io {served:?}; using classic DRA"
                    ),
                ))
            } else {
                Err(ModeError::NoDra {
                    served: served.to_vec(),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn auto_follows_the_kubernetes_release() {
        // 1.27-1.30, 1.32-1.33, 1.34+ as the API server lists them.
        let cases = [
            (v(&["v1alpha2"]), Mode::Classic),
            (v(&["v1beta1"]), Mode::Structured(ResourceApi::V1beta1)),
            (
                v(&["v1beta1", "v1beta2"]),
                Mode::Structured(ResourceApi::V1beta1),
            ),
            (
                v(&["v1", "v1beta1", "v1beta2"]),
                Mode::Structured(ResourceApi::V1),
            ),
        ];
        for (served, want) in cases {
            let (mode, why) = choose(ModeFlag::Auto, &served).unwrap();
            assert_eq!(mode, want, "{served:?}");
            assert!(why.starts_with("auto mode: the API server serves resource.k8s.io"));
        }
        let (_, why) = choose(ModeFlag::Auto, &v(&["v1alpha2"])).unwrap();
        assert_eq!(
            why,
            "auto mode: the API server serves resource.k8s.io [\"v1alpha2\"]; using classic DRA"
        );
    }

    #[test]
    fn nothing_served_is_a_clear_error() {
        let err = choose(ModeFlag::Auto, &[]).unwrap_err().to_string();
        assert!(err.contains("serves no resource.k8s.io version"), "{err}");
        // 1.31's v1alpha3 is not something we speak.
        assert!(choose(ModeFlag::Auto, &v(&["v1alpha3"])).is_err());
        let err = choose(ModeFlag::Structured, &v(&["v1alpha2"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("structured DRA (mode structured) needs"),
            "{err}"
        );
    }

    #[test]
    fn explicit_modes() {
        assert_eq!(
            choose(ModeFlag::Classic, &v(&["v1"])).unwrap().0,
            Mode::Classic
        );
        assert_eq!(
            choose(ModeFlag::Structured, &v(&["v1beta1", "v1"]))
                .unwrap()
                .0,
            Mode::Structured(ResourceApi::V1)
        );
        for s in ["auto", "classic", "structured"] {
            assert_eq!(s.parse::<ModeFlag>().unwrap().to_string(), s);
        }
        assert!("Classic".parse::<ModeFlag>().is_err());
    }
}
