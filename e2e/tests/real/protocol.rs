//! What a scenario saw, written down the same way on the real cluster and on the
//! emulator, so the two can be compared line by line: pod phases, event reasons and
//! messages, device counts, env names, what the API server accepted. Ids that differ from
//! run to run (uids, device ids) are replaced by `<UID>`.
//!
//! The real cluster's protocol is kept in `observed.txt` next to this file (rewritten by a
//! real run with `FAKE_DRA_RECORD_REAL_CLUSTER=1`); the emulator's is compared with it,
//! and every difference must be one of [`KNOWN_DIFFERENCES`], each documented in
//! docs/emulator.md ("Differences from the real cluster").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::PathBuf;

/// Rewrites `observed.txt` from a real run instead of comparing with it.
pub const RECORD_ENV: &str = "FAKE_DRA_RECORD_REAL_CLUSTER";

/// The Kubernetes release the protocol was recorded on (hack/kube/kubernetes/go.mod); the
/// emulator reports the same minor version when it is compared.
pub const RECORDED_ON: (u32, u32) = (1, 37);

/// Scenarios the emulator cannot run: it stores RBAC objects and admission policies but
/// enforces neither (docs/emulator.md).
pub const REAL_ONLY: &[&str] = &[
    "rbac-equals-the-api-access-table",
    "slices-of-another-node-are-denied",
    // The emulator runs no Deployment of the driver's image (docs/emulator.md).
    "fleet-mode",
    // The emulated plugin restart waits for a registration the fault refuses.
    "getinfo-fault",
];

/// Where the emulator knowingly differs from the real cluster: (scenario, key, what the
/// emulator shows; `<absent>` for a key it does not produce). Key and value are patterns
/// in which `*` stands for any text. Each entry is explained, with the upstream
/// behaviour, in docs/emulator.md.
pub const KNOWN_DIFFERENCES: &[(&str, &str, &str)] = &[
    // Features the emulated scheduler refuses by name instead of allocating by guesswork:
    // the pod's outcome is the refusal, and what the real run recorded after it is absent.
    (
        "prioritized-list",
        "pod0 outcome",
        "refused: *firstAvailable is not implemented by the emulated scheduler",
    ),
    ("prioritized-list", "*", "<absent>"),
    (
        "admin-access",
        "monitor outcome",
        "refused: *adminAccess and capacity requests are not implemented by the emulated scheduler",
    ),
    ("admin-access", "monitor *", "<absent>"),
    (
        "extended-resource",
        "pod0 outcome",
        "refused: *(DRAExtendedResource), which the emulated scheduler does not implement*",
    ),
    ("extended-resource", "*", "<absent>"),
    (
        "gpu-profile",
        "part outcome",
        "refused: *uses consumesCounters (partitionable devices), which the emulated scheduler does not implement*",
    ),
    (
        "gpu-profile",
        "share* outcome",
        "refused: *adminAccess and capacity requests are not implemented by the emulated scheduler",
    ),
    ("gpu-profile", "*", "<absent>"),
    (
        "binding-conditions",
        "pod0 outcome",
        "refused: *uses bindingConditions (binding conditions), which the emulated scheduler does not implement*",
    ),
    ("binding-conditions", "*", "<absent>"),
    // The device taint eviction controller (kube-controller-manager) is not emulated.
    (
        "device-taints",
        "pod0 after a NoExecute taint on its device",
        "not evicted (DeviceTaintNotEvicted)",
    ),
    // The emulated kubelet opens no health stream (DRAResourceHealth).
    ("device-health", "claim health", "not emulated"),
    // kube-apiserver validates opaque parameters (validateRawExtension): required, at most
    // 10 KiB on create, a JSON object; the emulator stores any JSON value.
    (
        "bad-opaque-parameters",
        "parameters as a string: apply",
        "accepted",
    ),
];

#[derive(Debug, Default)]
pub struct Protocol {
    scenario: String,
    lines: Vec<(String, String, String)>,
}

impl Protocol {
    /// Starts the record of a scenario.
    pub fn scenario(&mut self, name: &str) {
        eprintln!("=== scenario {name}");
        self.scenario = name.to_string();
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

pub fn observed_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/real/observed.txt")
}

const HEADER: &str = "\
# What e2e/tests/real_cluster.rs saw on the real cluster (hack/local-cluster.sh, Kubernetes
# built from the Go module proxy): scenario | key | value, uids replaced by <UID>.
# The emulator is compared with this (the_emulator_behaves_as_the_real_cluster_did).
# Rewritten by a real run with FAKE_DRA_RECORD_REAL_CLUSTER=1; review the diff.
";

/// The recorded real-cluster protocol: (Kubernetes version line, lines).
pub fn recorded() -> (String, Vec<String>) {
    let text = std::fs::read_to_string(observed_file()).unwrap_or_default();
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

pub fn write_recorded(version: &str, lines: &[String]) {
    let mut text = format!("{HEADER}# kubernetes: {version}\n");
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(observed_file(), text)
        .unwrap_or_else(|e| panic!("writing {}: {e}", observed_file().display()));
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
            .any(|(s, k, v)| *s == key.0 && glob(k, &key.1) && glob(v, shown));
        if known {
            documented.push(line);
        } else {
            unexpected.push(line);
        }
    }
    (unexpected, documented)
}

/// Whether `text` matches `pattern`, in which `*` stands for any text (no other
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
    fn glob_patterns_match_whole_values() {
        assert!(glob("*", "<absent>"));
        assert!(glob("<absent>", "<absent>"));
        assert!(!glob("<absent>", "8"));
        assert!(glob("share* outcome", "share1 outcome"));
        assert!(!glob("share* outcome", "share1 phase"));
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
        assert!(glob("monitor *", "monitor phase"));
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
