//! What a scenario saw, written down the same way on the real cluster and on the
//! emulator, so the two can be compared line by line: pod phases, event reasons and
//! messages, device counts, env names, what the API server accepted. Ids that differ from
//! run to run (uids, device ids) are replaced by `<UID>`.
//!
//! Each release's real-cluster protocol is kept in `observed/1.<minor>.txt` next to this
//! file (rewritten by a real run with `FAKE_DRA_RECORD_REAL_CLUSTER=1`, one file per
//! release of hack/real-matrix.sh); the emulator's run at that release is compared with
//! it, and every difference must be one of [`KNOWN_DIFFERENCES`], each documented in
//! docs/emulator.md ("Differences from the real cluster").
//!
//! A scenario whose feature a default cluster of the release has off records why it does
//! not apply ([`Protocol::requires`]); one that fails is recorded as failed and the run
//! goes on ([`Protocol::results`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::PathBuf;

pub use fake_dra_emulator::apiserver::gates::Gate;

/// Rewrites the release's observed file from a real run instead of comparing with it.
pub const RECORD_ENV: &str = "FAKE_DRA_RECORD_REAL_CLUSTER";

/// More feature gates on the real cluster (`NAME=true,...`, as hack/local-cluster.sh takes
/// them). A run with any is not a default cluster: it is not recorded, and is compared
/// with the emulator started with the same `--feature-gates` instead of with a record.
pub const FEATURE_GATES_ENV: &str = "KUBE_FEATURE_GATES";

/// The Kubernetes release a backend serves and the DRA gates it has on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// (major, minor).
    pub version: (u32, u32),
    /// Gates set by hand (`KUBE_FEATURE_GATES`), over the release's defaults.
    pub overrides: BTreeMap<Gate, bool>,
}

impl Release {
    /// A default cluster of Kubernetes `major.minor`.
    pub fn default_cluster(version: (u32, u32)) -> Self {
        Self {
            version,
            overrides: BTreeMap::new(),
        }
    }

    /// Kubernetes `v1.37.2` (or `1.37`) with the gates of `gates` (`NAME=true,...`; gates
    /// other than the DRA ones of [`Gate`] are ignored here).
    pub fn parse(version: &str, gates: &str) -> Option<Self> {
        let mut parts = version.trim_start_matches('v').split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let mut overrides = BTreeMap::new();
        for (name, value) in gates.split(',').filter_map(|g| g.trim().split_once('=')) {
            if let Some(gate) = Gate::ALL.into_iter().find(|g| g.name() == name) {
                overrides.insert(gate, value == "true");
            }
        }
        Some(Self {
            version: (major, minor),
            overrides,
        })
    }

    pub fn enabled(&self, gate: Gate) -> bool {
        self.overrides
            .get(&gate)
            .copied()
            .unwrap_or_else(|| gate.enabled(self.version))
    }

    /// Whether the cluster is what a user gets from the release (no gate set by hand).
    pub fn is_default(&self) -> bool {
        self.overrides.is_empty()
    }

    /// `resource.k8s.io/v1` from 1.34; `v1beta1` on 1.32/1.33.
    pub fn serves_v1(&self) -> bool {
        self.version >= (1, 34)
    }

    pub fn minor(&self) -> u32 {
        self.version.1
    }
}

/// What became of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The panic message.
    Failed(String),
    /// Why it does not apply to the release.
    NotApplicable(String),
}

/// Scenarios the emulator cannot run: it stores admission policies but evaluates none
/// (docs/emulator.md); RBAC it evaluates for `auth can-i` only.
pub const REAL_ONLY: &[&str] = &[
    "slices-of-another-node-are-denied",
    // The emulator runs no Deployment of the driver's image (docs/emulator.md).
    "fleet-mode",
    // The emulated plugin restart waits for a registration the fault refuses.
    "getinfo-fault",
];

/// Where the emulator knowingly differs from the real cluster: (scenario, key, what the
/// emulator shows; `<absent>` for a key it does not produce). Keys are exact, so a line
/// the emulator stops recording shows as a difference; in the value, `*` stands for any
/// text. Each entry is explained, with the upstream behaviour, in docs/emulator.md.
pub const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    // Features the emulated scheduler refuses by name instead of allocating by guesswork:
    // the pod's outcome is the refusal, and what the real run recorded after it is absent.
    (
        "extended-resource",
        "pod0 outcome",
        "refused: *(DRAExtendedResource), which the emulated scheduler does not implement*",
    ),
    ("extended-resource", "pod0 phase", "<absent>"),
    ("extended-resource", "pod0 devices", "<absent>"),
    ("extended-resource", "pod0 env", "<absent>"),
    (
        "extended-resource",
        "claim made by the scheduler",
        "<absent>",
    ),
    (
        "binding-conditions",
        "pod0 outcome",
        "refused: *uses bindingConditions (binding conditions), which the emulated scheduler does not implement*",
    ),
    ("binding-conditions", "pod0 phase", "<absent>"),
    ("binding-conditions", "pod0 devices", "<absent>"),
    ("binding-conditions", "pod0 env", "<absent>"),
    (
        "binding-conditions",
        "devices reported attached",
        "<absent>",
    ),
    (
        "binding-conditions",
        "waited for the binding conditions",
        "<absent>",
    ),
    // The device taint eviction controller (kube-controller-manager) is not emulated.
    (
        "device-taints",
        "pod0 after a NoExecute taint on its device",
        "not evicted (DeviceTaintNotEvicted)",
    ),
    (
        "device-taint-rules",
        "pod1 after a NoExecute rule on its device",
        "not evicted (DeviceTaintNotEvicted)",
    ),
    (
        "device-taint-rules",
        "pod0 after a NoExecute fault via rule on its device",
        "not evicted (DeviceTaintNotEvicted)",
    ),
    // The emulated kubelet opens no health stream (DRAResourceHealth).
    ("device-health", "claim health", "not emulated"),
];

/// Scenarios written after some releases' protocols were recorded: (scenario, those
/// releases' minors). Until `hack/real-matrix.sh --record 1.<minor>` records them, the
/// emulator's lines of the scenario are not compared at those releases, and the test
/// says so ([`not_yet_recorded`]). Each release leaves the list once its file has them.
pub const NOT_YET_RECORDED: &[(&str, &[u32])] = &[
    ("node-filters", &[32, 33, 34, 35, 36]),
    ("match-attribute", &[32, 33, 34, 35, 36]),
    ("device-taint-rules", &[32, 33, 34, 35, 36]),
    ("taint-rule-api", &[32, 33, 34, 35, 36]),
    ("gpu-shares-in-one-pod", &[32, 33, 34, 35, 36]),
];

/// The scenarios of [`NOT_YET_RECORDED`] for release 1.`minor`. Panics when the release's
/// file records one of them after all, so the list cannot outlive its reason.
pub fn not_yet_recorded(minor: u32, real: &[String]) -> Vec<&'static str> {
    let listed: Vec<&'static str> = NOT_YET_RECORDED
        .iter()
        .filter(|(_, minors)| minors.contains(&minor))
        .map(|(scenario, _)| *scenario)
        .collect();
    for scenario in &listed {
        let recorded = real.iter().any(|l| l.split(" | ").next() == Some(scenario));
        assert!(
            !recorded,
            "{} records scenario {scenario}: take 1.{minor} out of its NOT_YET_RECORDED entry \
             in e2e/tests/it/real/protocol.rs",
            observed_file(minor).display()
        );
    }
    listed
}

/// `lines` without those of `scenarios`.
pub fn without_scenarios(lines: Vec<String>, scenarios: &[&str]) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| !scenarios.contains(&l.split(" | ").next().unwrap_or_default()))
        .collect()
}

#[derive(Debug)]
pub struct Protocol {
    release: Release,
    scenario: String,
    lines: Vec<(String, String, String)>,
    results: Vec<(String, Outcome)>,
}

impl Protocol {
    pub fn new(release: Release) -> Self {
        Self {
            release,
            scenario: String::new(),
            lines: Vec::new(),
            results: Vec::new(),
        }
    }

    /// Starts the record of a scenario (it passes unless it fails or does not apply).
    pub fn scenario(&mut self, name: &str) {
        eprintln!("=== scenario {name}");
        self.scenario = name.to_string();
        self.results.push((name.to_string(), Outcome::Passed));
    }

    /// Why the release cannot run what needs `gates`: those off, or `None`.
    fn off(&self, gates: &[Gate]) -> Option<String> {
        let off: Vec<&str> = gates
            .iter()
            .filter(|g| !self.release.enabled(**g))
            .map(|g| g.name())
            .collect();
        let (major, minor) = self.release.version;
        let how = if self.release.is_default() {
            "by default"
        } else {
            "by the gates set"
        };
        (!off.is_empty())
            .then(|| format!("{} off {how} in Kubernetes {major}.{minor}", off.join(", ")))
    }

    /// Whether the release has the gates on; if not, the scenario records why it does not
    /// apply (the caller returns).
    pub fn requires(&mut self, gates: &[Gate]) -> bool {
        let Some(why) = self.off(gates) else {
            return true;
        };
        self.record("not applicable", &why);
        self.set_outcome(Outcome::NotApplicable(why));
        false
    }

    /// Like [`Self::requires`] for a part of the scenario (`what`): records why that part
    /// does not apply, and the scenario goes on.
    pub fn requires_for(&mut self, what: &str, gates: &[Gate]) -> bool {
        let Some(why) = self.off(gates) else {
            return true;
        };
        self.record(format!("{what}: not applicable"), why);
        false
    }

    /// The scenario under way failed with `message` (the run goes on with the next).
    pub fn failed(&mut self, message: &str) {
        eprintln!("    FAILED: {message}");
        self.set_outcome(Outcome::Failed(message.to_string()));
    }

    fn set_outcome(&mut self, outcome: Outcome) {
        if let Some((name, o)) = self.results.last_mut()
            && *name == self.scenario
        {
            *o = outcome;
        }
    }

    /// Each scenario run, in order, with what became of it.
    pub fn results(&self) -> &[(String, Outcome)] {
        &self.results
    }

    pub fn record(&mut self, key: impl Display, value: impl Display) {
        let (key, value) = (normalize(&key.to_string()), normalize(&value.to_string()));
        eprintln!("    {key} | {value}");
        self.lines.push((self.scenario.clone(), key, value));
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines
            .iter()
            .map(|(s, k, v)| format!("{s} | {k} | {v}"))
            .collect()
    }
}

/// One line, run-independent: uids and device ids become `<UID>` (also the
/// `FAKE_CLAIM_<UID>_` form of env names), whitespace runs one space.
pub fn normalize(text: &str) -> String {
    let uid = regex::Regex::new(
        "[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}",
    )
    .unwrap_or_else(|e| panic!("uid regex: {e}"));
    let text = uid.replace_all(text, "<UID>");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The names of our variables in a container's env (`FAKE_*`, `DRA_*`), with runs of
/// numbered names folded: `FAKE_DEVICE_{0..7}`.
pub fn env_names(env: &BTreeMap<String, String>) -> String {
    let names: BTreeSet<String> = env
        .keys()
        .filter(|k| k.starts_with("FAKE_") || k.starts_with("DRA_"))
        .map(|k| normalize(k))
        .collect();
    let mut numbered: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut plain = BTreeSet::new();
    for name in names {
        match name.rsplit_once('_') {
            Some((stem, n)) if n.parse::<u32>().is_ok() => {
                numbered
                    .entry(stem.to_string())
                    .or_default()
                    .insert(n.parse().unwrap_or_default());
            }
            _ => {
                plain.insert(name);
            }
        }
    }
    for (stem, ns) in numbered {
        let (lo, hi) = (
            ns.first().copied().unwrap_or_default(),
            ns.last().copied().unwrap_or_default(),
        );
        if ns.len() as u32 == hi - lo + 1 {
            plain.insert(format!("{stem}_{{{lo}..{hi}}}"));
        } else {
            plain.insert(format!("{stem}_{ns:?}"));
        }
    }
    plain.into_iter().collect::<Vec<_>>().join(" ")
}

/// The directory of the observed files, one per release: `1.<minor>.txt`.
pub fn observed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/real/observed")
}

pub fn observed_file(minor: u32) -> PathBuf {
    observed_dir().join(format!("1.{minor}.txt"))
}

/// The minor releases with an observed file, oldest first.
pub fn recorded_releases() -> Vec<u32> {
    let mut minors: Vec<u32> = std::fs::read_dir(observed_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("1.")?.strip_suffix(".txt")?.parse().ok()
        })
        .collect();
    minors.sort_unstable();
    minors
}

const HEADER: &str = "\
# What e2e/tests/it/real_cluster.rs saw on the real cluster (hack/local-cluster.sh, Kubernetes
# built from the Go module proxy, default feature gates): scenario | key | value, uids
# replaced by <UID>. The emulator is compared with this at the same release
# (the_emulator_behaves_as_the_real_cluster_did_on_1_<minor>).
# Rewritten by a real run with FAKE_DRA_RECORD_REAL_CLUSTER=1 (hack/real-matrix.sh --record);
# review the diff.
";

/// The recorded real-cluster protocol of release 1.`minor`: (Kubernetes version line,
/// lines).
pub fn recorded(minor: u32) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(observed_file(minor)).unwrap_or_default();
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("# kubernetes: "))
        .unwrap_or_default()
        .to_string();
    let lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    (version, lines)
}

pub fn write_recorded(minor: u32, version: &str, lines: &[String]) {
    let mut text = format!("{HEADER}# kubernetes: {version}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let file = observed_file(minor);
    let _ = std::fs::create_dir_all(observed_dir());
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
}

/// The scenarios whose lines differ between `a` and `b`.
pub fn differing_scenarios(a: &[String], b: &[String]) -> BTreeSet<String> {
    diff(a, b)
        .iter()
        .filter_map(|l| split(&l[2..]).map(|(s, _, _)| s))
        .collect()
}

/// Lines only in `a` (`-`) and only in `b` (`+`), in order.
pub fn diff(a: &[String], b: &[String]) -> Vec<String> {
    let (sa, sb): (BTreeSet<&String>, BTreeSet<&String>) = (a.iter().collect(), b.iter().collect());
    let mut out: Vec<String> = a
        .iter()
        .filter(|l| !sb.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        b.iter()
            .filter(|l| !sa.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

fn split(line: &str) -> Option<(String, String, String)> {
    let mut parts = line.splitn(3, " | ");
    Some((
        parts.next()?.to_string(),
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

/// The emulator's protocol against the real one: the differences that are not documented
/// (empty when the emulator behaves as the real cluster did), and the documented ones
/// that showed.
pub fn compare_with_real(real: &[String], emulated: &[String]) -> (Vec<String>, Vec<String>) {
    let index = |lines: &[String]| -> BTreeMap<(String, String), String> {
        lines
            .iter()
            .filter_map(|l| split(l))
            .filter(|(s, _, _)| !REAL_ONLY.contains(&s.as_str()))
            .map(|(s, k, v)| ((s, k), v))
            .collect()
    };
    let (real, emulated) = (index(real), index(emulated));
    let keys: BTreeSet<&(String, String)> = real.keys().chain(emulated.keys()).collect();
    let (mut unexpected, mut documented) = (Vec::new(), Vec::new());
    for key in keys {
        let (r, e) = (real.get(key), emulated.get(key));
        if r == e {
            continue;
        }
        let shown = e.map(String::as_str).unwrap_or("<absent>");
        let line = format!(
            "{} | {}: real {:?}, emulator {:?}",
            key.0,
            key.1,
            r.map(String::as_str).unwrap_or("<absent>"),
            shown
        );
        let known = KNOWN_DIFFERENCES
            .iter()
            .any(|(s, k, v)| *s == key.0 && *k == key.1 && glob(v, shown));
        if known {
            documented.push(line);
        } else {
            unexpected.push(line);
        }
    }
    (unexpected, documented)
}

/// Whether a value matches `pattern`, in which `*` stands for any text (no other
/// metacharacters: the recorded values are full of brackets and dots).
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_not_yet_recorded_is_left_out_only_where_listed() {
        let lines = vec![
            "node-filters | a | 1".to_string(),
            "count-4 | b | 2".to_string(),
        ];
        assert_eq!(
            not_yet_recorded(32, &[]),
            vec![
                "node-filters",
                "match-attribute",
                "device-taint-rules",
                "taint-rule-api",
                "gpu-shares-in-one-pod"
            ]
        );
        assert!(not_yet_recorded(37, &[]).is_empty());
        assert_eq!(
            without_scenarios(lines.clone(), &["node-filters"]),
            vec!["count-4 | b | 2".to_string()]
        );
        let recorded = std::panic::catch_unwind(|| not_yet_recorded(32, &lines));
        assert!(
            recorded.is_err(),
            "a listed scenario the file records panics"
        );
    }

    #[test]
    fn glob_patterns_match_whole_values() {
        assert!(glob("*", "<absent>"));
        assert!(glob("<absent>", "<absent>"));
        assert!(!glob("<absent>", "8"));
        assert!(glob(
            "refused: *not implemented*",
            "refused: claim a/b: not implemented here"
        ));
        assert!(!glob(
            "refused: *not implemented",
            "refused: not implemented, but"
        ));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "acb"));
    }

    #[test]
    fn env_names_fold_numbered_runs_and_uids() {
        let env: BTreeMap<String, String> = [
            "FAKE_DEVICE_0",
            "FAKE_DEVICE_1",
            "FAKE_DEVICE_2",
            "FAKE_CLAIM_08457126_50EB_4B2E_908E_573945B0A5FB_DEVICE_0",
            "FAKE_NODE_NAME",
            "HOME",
        ]
        .iter()
        .map(|k| (k.to_string(), String::new()))
        .collect();
        assert_eq!(
            env_names(&env),
            "FAKE_CLAIM_<UID>_DEVICE_{0..0} FAKE_DEVICE_{0..2} FAKE_NODE_NAME"
        );
    }
}
