//! Who holds which device, from what the containers printed (their env), never from the
//! soak's own bookkeeping. Pure: the observer feeds it each container's env once and
//! tells it when a pod is gone; it answers with the conflicts and problems it sees.
//!
//! A device is a parent device of the node: a container of a claim with `split: 1`
//! sees the parent's id, with `split: n` the ids of its children — different ids for the
//! same device, so every id is mapped back to its parent first ([`DeviceTable`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The largest split the workload asks for; children ids past it are not in the table.
pub const MAX_SPLIT: u32 = 3;

/// Every id a container may see on this node, mapped to its parent device.
#[derive(Debug, Default)]
pub struct DeviceTable {
    parent_of: HashMap<String, String>,
}

impl DeviceTable {
    /// The node's parent ids (the `uuid` attributes of its published devices) and the ids
    /// of their children up to [`MAX_SPLIT`].
    pub fn new(parents: &[String]) -> Self {
        let mut parent_of: HashMap<String, String> =
            parents.iter().map(|p| (p.clone(), p.clone())).collect();
        for child in fake_dra_kubelet_plugin::fake::devices::children(parents, MAX_SPLIT) {
            parent_of.insert(child.id, child.parent);
        }
        Self { parent_of }
    }

    pub fn parent(&self, id: &str) -> Option<&str> {
        self.parent_of.get(id).map(String::as_str)
    }

    pub fn parents(&self) -> usize {
        self.parent_of
            .iter()
            .filter(|(id, parent)| id == parent)
            .count()
    }
}

/// The key of a claim in the env (`FAKE_CLAIM_<KEY>_DEVICE_<i>`): its uid upper-cased,
/// every character outside `[A-Z0-9]` turned into `_` (docs/kubelet-plugin.md).
pub fn claim_key(uid: &str) -> String {
    uid.chars()
        .map(|c| {
            let c = c.to_ascii_uppercase();
            if c.is_ascii_uppercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One claim as a container saw it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SeenClaim {
    /// `FAKE_CLAIM_<KEY>_DEVICE_<i>` by `i`.
    pub ids: BTreeMap<usize, String>,
    /// `FAKE_CLAIM_<KEY>_DEVICE_COUNT`.
    pub count: Option<String>,
}

/// What a container's env says about its claims and the node.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub claims: BTreeMap<String, SeenClaim>,
    pub node: Option<String>,
    pub driver: Option<String>,
}

/// Reads the claim variables out of an env (names as `export` printed them).
pub fn parse_env(env: &BTreeMap<String, String>) -> Seen {
    let mut seen = Seen {
        node: env.get("FAKE_NODE_NAME").cloned(),
        driver: env.get("DRA_RESOURCE_DRIVER_NAME").cloned(),
        ..Seen::default()
    };
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("FAKE_CLAIM_") else {
            continue;
        };
        let Some((key, what)) = rest.rsplit_once("_DEVICE_") else {
            continue;
        };
        let claim = seen.claims.entry(key.to_string()).or_default();
        if what == "COUNT" {
            claim.count = Some(value.clone());
        } else if let Ok(i) = what.parse::<usize>() {
            claim.ids.insert(i, value.clone());
        }
    }
    seen
}

/// What the API says a pod's claims are: claim key → devices expected in the env
/// (count × split of the shape the workload asked for).
pub type Expected = BTreeMap<String, usize>;

/// The env against the API: the same claims, each with as many distinct ids as asked,
/// numbered 0.. without gaps, all known devices of this node, no parent in two claims;
/// the common variables there.
pub fn check_env(seen: &Seen, expected: &Expected, node: &str, table: &DeviceTable) -> Vec<String> {
    let mut problems = Vec::new();
    if seen.node.as_deref() != Some(node) {
        problems.push(format!(
            "FAKE_NODE_NAME is {:?}, not {node:?} (the common CDI spec not applied?)",
            seen.node
        ));
    }
    if seen.driver.as_deref() != Some(crate::common::DRIVER) {
        problems.push(format!(
            "DRA_RESOURCE_DRIVER_NAME is {:?}, not {:?}",
            seen.driver,
            crate::common::DRIVER
        ));
    }
    let env_keys: BTreeSet<&String> = seen.claims.keys().collect();
    let api_keys: BTreeSet<&String> = expected.keys().collect();
    if env_keys != api_keys {
        problems.push(format!(
            "the env shows the claims {env_keys:?}, the API says the pod has {api_keys:?}"
        ));
    }
    let mut parent_claim: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, claim) in &seen.claims {
        if let Some(&want) = expected.get(key)
            && (claim.ids.len() != want || claim.count.as_deref() != Some(&want.to_string()))
        {
            problems.push(format!(
                "claim {key}: {} ids and DEVICE_COUNT {:?}, the claim asked for {want}",
                claim.ids.len(),
                claim.count
            ));
        }
        if claim.ids.keys().copied().ne(0..claim.ids.len()) {
            problems.push(format!(
                "claim {key}: indexes {:?} have a gap",
                claim.ids.keys().collect::<Vec<_>>()
            ));
        }
        let distinct: BTreeSet<&String> = claim.ids.values().collect();
        if distinct.len() != claim.ids.len() {
            problems.push(format!("claim {key}: an id twice in {:?}", claim.ids));
        }
        for id in claim.ids.values() {
            match table.parent(id) {
                None => problems.push(format!(
                    "claim {key}: {id} is none of the node's devices or their children"
                )),
                Some(parent) => {
                    if let Some(other) = parent_claim.insert(parent, key)
                        && other != key
                    {
                        problems.push(format!(
                            "device {parent} in two claims of one pod: {other} and {key}"
                        ));
                    }
                }
            }
        }
    }
    problems
}

/// A pod holding a device through a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pod: String,
    pub pod_uid: String,
    pub claim: String,
}

/// The same device in two pods that do not share the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub parent: String,
    pub mine: Holder,
    pub theirs: Holder,
}

/// The devices of the pods that exist, as their containers printed them.
#[derive(Debug, Default)]
pub struct Ledger {
    holders: BTreeMap<String, Vec<Holder>>,
    pods: HashMap<String, Vec<String>>,
    /// The ids each claim was seen with first: every pod of a claim sees the same.
    claim_ids: HashMap<String, Vec<String>>,
}

/// What registering one container's env found.
#[derive(Debug, Default)]
pub struct Registration {
    pub conflicts: Vec<Conflict>,
    /// Pods sharing a claim that saw different ids for it.
    pub inconsistent: Vec<String>,
}

impl Ledger {
    pub fn register(
        &mut self,
        pod: &str,
        pod_uid: &str,
        seen: &Seen,
        table: &DeviceTable,
    ) -> Registration {
        let mut r = Registration::default();
        let mut parents = Vec::new();
        for (key, claim) in &seen.claims {
            let ids: Vec<String> = claim.ids.values().cloned().collect();
            match self.claim_ids.get(key) {
                Some(first) if *first != ids => r.inconsistent.push(format!(
                    "claim {key}: pod {pod} sees {ids:?}, an earlier pod of the claim saw {first:?}"
                )),
                Some(_) => {}
                None => {
                    self.claim_ids.insert(key.clone(), ids.clone());
                }
            }
            let mine = Holder {
                pod: pod.to_string(),
                pod_uid: pod_uid.to_string(),
                claim: key.clone(),
            };
            let claim_parents: BTreeSet<&str> =
                ids.iter().filter_map(|id| table.parent(id)).collect();
            for parent in claim_parents {
                let holders = self.holders.entry(parent.to_string()).or_default();
                for theirs in holders.iter() {
                    if theirs.pod_uid != pod_uid && theirs.claim != *key {
                        r.conflicts.push(Conflict {
                            parent: parent.to_string(),
                            mine: mine.clone(),
                            theirs: theirs.clone(),
                        });
                    }
                }
                holders.push(mine.clone());
                parents.push(parent.to_string());
            }
        }
        self.pods
            .entry(pod_uid.to_string())
            .or_default()
            .extend(parents);
        r
    }

    /// The pod is gone: its devices are free.
    pub fn unregister(&mut self, pod_uid: &str) {
        for parent in self.pods.remove(pod_uid).unwrap_or_default() {
            if let Some(holders) = self.holders.get_mut(&parent) {
                holders.retain(|h| h.pod_uid != pod_uid);
                if holders.is_empty() {
                    self.holders.remove(&parent);
                }
            }
        }
    }

    /// Pods whose devices are registered.
    pub fn live_pods(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parents() -> Vec<String> {
        (0..4)
            .map(|i| fake_dra_kubelet_plugin::fake::devices::parent_id("n", i))
            .collect()
    }

    fn seen(claims: &[(&str, &[&str])]) -> Seen {
        let mut env = BTreeMap::new();
        env.insert("FAKE_NODE_NAME".to_string(), "n".to_string());
        env.insert(
            "DRA_RESOURCE_DRIVER_NAME".to_string(),
            crate::common::DRIVER.to_string(),
        );
        for (key, ids) in claims {
            for (i, id) in ids.iter().enumerate() {
                env.insert(format!("FAKE_CLAIM_{key}_DEVICE_{i}"), id.to_string());
            }
            env.insert(
                format!("FAKE_CLAIM_{key}_DEVICE_COUNT"),
                ids.len().to_string(),
            );
            env.insert(format!("FAKE_CLAIM_{key}_DEVICE_MODEL"), "M".to_string());
        }
        parse_env(&env)
    }

    #[test]
    fn a_child_and_its_parent_in_two_pods_conflict() {
        let p = parents();
        let table = DeviceTable::new(&p);
        assert_eq!(table.parents(), 4);
        let child = fake_dra_kubelet_plugin::fake::devices::child_id(&p[1], 2);
        let mut ledger = Ledger::default();
        let a = ledger.register("a", "ua", &seen(&[("A", &[&p[1]])]), &table);
        assert!(a.conflicts.is_empty());
        let b = ledger.register("b", "ub", &seen(&[("B", &[&child])]), &table);
        assert_eq!(b.conflicts.len(), 1, "{b:?}");
        assert_eq!(b.conflicts[0].parent, p[1]);
        assert_eq!(b.conflicts[0].theirs.pod, "a");
        // A pod sharing the claim is no conflict; once a is gone, B's claim is free.
        let c = ledger.register("c", "uc", &seen(&[("A", &[&p[1]])]), &table);
        assert_eq!(c.conflicts.len(), 1, "c conflicts with b only: {c:?}");
        ledger.unregister("ua");
        ledger.unregister("ub");
        ledger.unregister("uc");
        assert_eq!(ledger.live_pods(), 0);
        let d = ledger.register("d", "ud", &seen(&[("D", &[&child])]), &table);
        assert!(d.conflicts.is_empty());
    }

    #[test]
    fn a_shared_claim_seen_with_other_ids_is_reported() {
        let p = parents();
        let table = DeviceTable::new(&p);
        let mut ledger = Ledger::default();
        ledger.register("a", "ua", &seen(&[("S", &[&p[0]])]), &table);
        let b = ledger.register("b", "ub", &seen(&[("S", &[&p[2]])]), &table);
        assert_eq!(b.inconsistent.len(), 1, "{b:?}");
    }

    #[test]
    fn the_env_is_checked_against_the_api() {
        let p = parents();
        let table = DeviceTable::new(&p);
        let uid = "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab";
        let key = claim_key(uid);
        assert_eq!(key, "0B1C2D3E_AAAA_BBBB_CCCC_0123456789AB");
        let good = seen(&[(&key, &[&p[0], &p[1]])]);
        let expected: Expected = [(key.clone(), 2)].into();
        assert_eq!(
            check_env(&good, &expected, "n", &table),
            Vec::<String>::new()
        );
        // Asked for 3; another claim the API does not know; an unknown id; a node name off.
        let wrong: Expected = [(key.clone(), 3)].into();
        assert_eq!(check_env(&good, &wrong, "n", &table).len(), 1);
        assert_eq!(check_env(&good, &expected, "other", &table).len(), 1);
        let stranger = seen(&[(&key, &[&p[0], "FAKE-nope"])]);
        assert_eq!(check_env(&stranger, &expected, "n", &table).len(), 1);
        let twice = seen(&[(&key, &[&p[0], &p[1]]), ("OTHER", &[&p[1]])]);
        let problems = check_env(&twice, &expected, "n", &table);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
