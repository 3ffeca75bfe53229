//! Which DRA generation a `fake-dra-sim` run emulates when the user did not say: the
//! manifests' `resource.k8s.io` version tells (issue 35: a structured example on the
//! default, classic, sim was refused as a kind the emulator "does not implement"), and a
//! `--kubernetes-version` implies its generation. Pure: the binary prints the reason.

use crate::manifests::Manifest;

/// A DRA generation, by the overlay of deploy/ that installs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Kubernetes 1.27–1.30, `resource.k8s.io/v1alpha2`.
    Classic,
    /// Kubernetes 1.32+, `resource.k8s.io/v1` (v1beta1/v1beta2 before 1.34).
    Structured,
}

impl Generation {
    pub fn overlay(self) -> &'static str {
        match self {
            Generation::Classic => "classic",
            Generation::Structured => "structured",
        }
    }

    /// The generation a release runs, `None` for 1.31 (neither: classic DRA was removed,
    /// structured not yet served by default).
    pub fn of_release(version: (u32, u32)) -> Option<Self> {
        match version {
            (1, minor) if (27..=30).contains(&minor) => Some(Generation::Classic),
            (1, minor) if minor >= 32 => Some(Generation::Structured),
            _ => None,
        }
    }
}

/// The generation picked, and why (for a line to the user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    pub generation: Generation,
    pub reason: String,
}

/// The generation of the first manifest of each generation: (classic, structured), each
/// as `kind name (origin)`.
fn generations_in(manifests: &[Manifest]) -> (Option<String>, Option<String>) {
    let named = |m: &Manifest| format!("{} {} ({})", m.kind(), m.name(), m.origin);
    let dra = |m: &&Manifest| m.api_version().starts_with("resource.k8s.io/");
    let classic = manifests
        .iter()
        .filter(dra)
        .find(|m| m.api_version() == "resource.k8s.io/v1alpha2")
        .map(named);
    let structured = manifests
        .iter()
        .filter(dra)
        .find(|m| m.api_version() != "resource.k8s.io/v1alpha2")
        .map(named);
    (classic, structured)
}

/// The flag wins, then the version, then the manifests; classic when nothing says (the
/// demo's default). A flag or version the manifests contradict is refused, naming the
/// flag to change, as are manifests of both generations.
pub fn pick(
    flag: Option<Generation>,
    version: Option<(u32, u32)>,
    manifests: &[Manifest],
) -> Result<Picked, String> {
    let (classic, structured) = generations_in(manifests);
    if let (Some(c), Some(s)) = (&classic, &structured) {
        return Err(format!(
            "the manifests mix classic DRA (resource.k8s.io/v1alpha2: {c}) and structured DRA ({s}): one cluster runs one generation, so run them separately"
        ));
    }
    let from_manifests = match (&classic, &structured) {
        (Some(c), _) => Some((Generation::Classic, c.clone())),
        (_, Some(s)) => Some((Generation::Structured, s.clone())),
        _ => None,
    };
    let from_version = match version {
        Some(v) => match Generation::of_release(v) {
            Some(g) => Some((v, g)),
            None => {
                return Err(format!(
                    "--kubernetes-version {}.{}: the emulator runs classic DRA on 1.27–1.30 and structured DRA on 1.32–1.37",
                    v.0, v.1
                ));
            }
        },
        None => None,
    };
    let (generation, reason, source) = match (flag, from_version, &from_manifests) {
        (Some(g), _, _) => (g, "--mode".to_string(), "--mode"),
        (None, Some((v, g)), _) => (
            g,
            format!("--kubernetes-version {}.{}", v.0, v.1),
            "--kubernetes-version",
        ),
        (None, None, Some((g, first))) => (*g, format!("the manifests: {first}"), ""),
        (None, None, None) => (Generation::Classic, "the default".to_string(), ""),
    };
    if let Some(((major, minor), g)) = from_version
        && g != generation
    {
        return Err(format!(
            "Kubernetes {major}.{minor} does not run {} DRA: classic is 1.27–1.30, structured 1.32–1.37",
            generation.overlay()
        ));
    }
    if let Some((wanted, first)) = &from_manifests
        && *wanted != generation
        && !source.is_empty()
    {
        let instead = match wanted {
            Generation::Classic => "1.27–1.30",
            Generation::Structured => "1.32–1.37",
        };
        let fix = if source == "--mode" {
            format!("use --mode {} (or leave out --mode)", wanted.overlay())
        } else {
            format!("use a release of {instead} (or leave out --kubernetes-version)")
        };
        return Err(format!(
            "{first} is {} DRA, but {source} makes a {} cluster: {fix}",
            wanted.overlay(),
            generation.overlay(),
        ));
    }
    Ok(Picked { generation, reason })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn manifests(yaml: &str) -> Vec<Manifest> {
        crate::manifests::parse(yaml, "test.yaml").unwrap()
    }

    const STRUCTURED: &str = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t, namespace: n}\nspec: {spec: {}}\n";
    const CLASSIC: &str = "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaimTemplate\nmetadata: {name: c, namespace: n}\nspec: {spec: {resourceClassName: fake}}\n";
    const PLAIN: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n";

    #[test]
    fn the_manifests_pick_the_generation_when_nothing_else_does() {
        let picked = pick(None, None, &manifests(STRUCTURED)).unwrap();
        assert_eq!(picked.generation, Generation::Structured);
        assert!(
            picked.reason.contains("ResourceClaimTemplate t"),
            "{picked:?}"
        );
        let picked = pick(None, None, &manifests(CLASSIC)).unwrap();
        assert_eq!(picked.generation, Generation::Classic);
        let picked = pick(None, None, &manifests(PLAIN)).unwrap();
        assert_eq!(
            (picked.generation, picked.reason.as_str()),
            (Generation::Classic, "the default")
        );
    }

    #[test]
    fn a_version_implies_its_generation() {
        let picked = pick(None, Some((1, 34)), &[]).unwrap();
        assert_eq!(picked.generation, Generation::Structured);
        assert_eq!(picked.reason, "--kubernetes-version 1.34");
        assert_eq!(
            pick(None, Some((1, 29)), &[]).unwrap().generation,
            Generation::Classic
        );
        let error = pick(None, Some((1, 31)), &[]).unwrap_err();
        assert!(
            error.contains("1.27–1.30") && error.contains("1.32–1.37"),
            "{error}"
        );
        let error = pick(Some(Generation::Classic), Some((1, 34)), &[]).unwrap_err();
        assert!(error.contains("does not run classic DRA"), "{error}");
    }

    #[test]
    fn a_contradiction_names_the_flag_to_change() {
        let error = pick(Some(Generation::Classic), None, &manifests(STRUCTURED)).unwrap_err();
        assert!(
            error.contains(
                "is structured DRA, but --mode makes a classic cluster: use --mode structured"
            ),
            "{error}"
        );
        let error = pick(None, Some((1, 30)), &manifests(STRUCTURED)).unwrap_err();
        assert!(
            error.contains("use a release of 1.32–1.37 (or leave out --kubernetes-version)"),
            "{error}"
        );
        let mixed = format!("{STRUCTURED}---\n{CLASSIC}");
        let error = pick(None, None, &manifests(&mixed)).unwrap_err();
        assert!(error.contains("mix classic DRA"), "{error}");
    }
}
