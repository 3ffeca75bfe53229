//! Differential allocation testing (docs/differential.md): seeded random DRA worlds
//! ([`generate`]) run through an oracle that schedules them ([`oracle`]: the emulator
//! today, any cluster's kube-scheduler through the same API calls), every allocation and
//! every unschedulable pod judged by a checker written from the API's rules ([`check`]),
//! and each disagreement shrunk ([`shrink`]) to a reproducer written as plain YAML.

pub mod check;
pub mod generate;
pub mod oracle;
pub mod rng;
pub mod shrink;
pub mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use check::{PodOutcome, Violation};
use world::World;

/// What one world came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The oracle and the checker agree (up to known upstream defects).
    Agree {
        scheduled: usize,
        unschedulable: usize,
        known: Vec<Violation>,
    },
    /// The API server refused the world: the generator's fault, not a disagreement.
    Invalid(String),
    /// The checker's violations of the oracle's outcome.
    Disagree(Vec<Violation>),
}

/// Runs `world` on every oracle and judges it: the checker on each outcome, and, with
/// two oracles, where they part on feasibility. The outcomes are the first oracle's.
pub async fn judge(
    oracles: &[oracle::Oracle],
    world: &World,
) -> Result<(Verdict, Vec<PodOutcome>), oracle::OracleError> {
    let mut all = Vec::new();
    for o in oracles {
        match o.run(world).await {
            Ok(outcomes) => all.push(outcomes),
            Err(oracle::OracleError::Refused { what, message }) => {
                return Ok((Verdict::Invalid(format!("{what}: {message}")), Vec::new()));
            }
            Err(e) => return Err(e),
        }
    }
    let mut violations = Vec::new();
    for (o, outcomes) in oracles.iter().zip(&all) {
        let found = check::check(world, outcomes);
        if oracles.len() == 1 {
            violations.extend(found);
        } else {
            violations.extend(found.into_iter().map(|v| Violation::Of {
                oracle: o.name().to_owned(),
                violation: Box::new(v),
            }));
        }
    }
    if let [first, second] = all.as_slice() {
        violations.extend(check::compare(world, first, second));
    }
    let outcomes = all.into_iter().next().unwrap_or_default();
    let (known, violations): (Vec<Violation>, Vec<Violation>) = violations
        .into_iter()
        .partition(Violation::is_known_upstream);
    let verdict = if violations.is_empty() {
        let scheduled = outcomes
            .iter()
            .filter(|o| matches!(o, PodOutcome::Scheduled { .. }))
            .count();
        Verdict::Agree {
            scheduled,
            unschedulable: outcomes.len() - scheduled,
            known,
        }
    } else {
        Verdict::Disagree(violations)
    };
    Ok((verdict, outcomes))
}

/// A shrunk disagreement.
#[derive(Debug, Clone)]
pub struct Finding {
    pub seed: u64,
    pub kind: &'static str,
    pub world: World,
    pub violations: Vec<Violation>,
    pub outcomes: Vec<PodOutcome>,
    pub path: Option<PathBuf>,
}

/// The result of a batch.
#[derive(Debug, Default)]
pub struct Report {
    /// The oracles' names, joined.
    pub against: String,
    pub worlds: usize,
    pub invalid: Vec<(u64, String)>,
    pub pods_scheduled: usize,
    pub pods_unschedulable: usize,
    pub findings: Vec<Finding>,
    /// Differences a known upstream defect explains, by seed.
    pub known: Vec<(u64, Violation)>,
    pub seconds: f64,
}

impl Report {
    /// Disagreements by kind.
    pub fn by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for f in &self.findings {
            *out.entry(f.kind).or_default() += 1;
        }
        out
    }

    pub fn text(&self) -> String {
        let rate = self.worlds as f64 / self.seconds.max(1e-9);
        let mut s = format!(
            "worlds: {} in {:.1} s ({rate:.2} worlds/s) against {}\npods: {} scheduled, {} unschedulable\ninvalid worlds (refused by the API server): {}\ndisagreements: {}\n",
            self.worlds,
            self.seconds,
            self.against,
            self.pods_scheduled,
            self.pods_unschedulable,
            self.invalid.len(),
            self.findings.len()
        );
        for (kind, n) in self.by_kind() {
            s.push_str(&format!("  {kind}: {n}\n"));
        }
        for f in &self.findings {
            let (pods, nodes, devices, requests, attributes) = shrink::size(&f.world);
            s.push_str(&format!(
                "  seed {}: {} — shrunk to {pods} pods, {nodes} nodes, {devices} devices, {requests} requests, {attributes} attributes{}\n",
                f.seed,
                f.kind,
                f.path.as_ref().map(|p| format!(": {}", p.display())).unwrap_or_default()
            ));
        }
        if !self.known.is_empty() {
            s.push_str(&format!(
                "known upstream defects (not counted): {}\n",
                self.known.len()
            ));
            for (seed, k) in &self.known {
                s.push_str(&format!("  seed {seed}: {k:?}\n"));
            }
        }
        for (seed, why) in &self.invalid {
            s.push_str(&format!("  invalid world, seed {seed}: {why}\n"));
        }
        s
    }
}

/// The reproducer of a finding: a header (seed, kind, expected, observed), the world as
/// the shrinker left it (what the regression test replays), and its Kubernetes objects.
pub fn reproducer(f: &Finding) -> Result<String, serde_yaml_ng::Error> {
    let world = serde_yaml_ng::to_string(&f.world)?;
    let observed = serde_yaml_ng::to_string(&f.outcomes)?;
    let violations: Vec<String> = f.violations.iter().map(|v| format!("#   {v:?}")).collect();
    let observed: String = observed.lines().map(|l| format!("#   {l}\n")).collect();
    Ok(format!(
        "# fake-dra-differential reproducer: seed {}, {}.\n# Expected (the checker): no violation. Observed (the first oracle), per pod:\n{observed}# Violations:\n{}\n# The world (replayed by differential/tests/reproducers.rs):\n{world}",
        f.seed,
        f.kind,
        violations.join("\n"),
    ))
}

/// Runs worlds `seed..seed + count`, shrinking each disagreement (within `shrink_budget`
/// tries) and writing its reproducer into `out` when given.
pub async fn run_batch(
    oracles: &[oracle::Oracle],
    seed: u64,
    count: usize,
    shrink_budget: usize,
    out: Option<&Path>,
) -> Result<Report, oracle::OracleError> {
    let started = Instant::now();
    let mut report = Report {
        against: oracles
            .iter()
            .map(oracle::Oracle::name)
            .collect::<Vec<_>>()
            .join(" and "),
        ..Report::default()
    };
    for s in seed..seed + count as u64 {
        let world = generate::world(s);
        report.worlds += 1;
        match judge(oracles, &world).await? {
            (
                Verdict::Agree {
                    scheduled,
                    unschedulable,
                    known,
                },
                _,
            ) => {
                report.pods_scheduled += scheduled;
                report.pods_unschedulable += unschedulable;
                report.known.extend(known.into_iter().map(|k| (s, k)));
            }
            (Verdict::Invalid(why), _) => report.invalid.push((s, why)),
            (Verdict::Disagree(violations), outcomes) => {
                let kind = violations.first().map_or("unknown", Violation::kind);
                let (world, _) = shrink::shrink(world, shrink_budget, async |candidate: &World| {
                    matches!(
                        judge(oracles, candidate).await,
                        Ok((Verdict::Disagree(v), _)) if v.iter().any(|x| x.kind() == kind)
                    )
                })
                .await;
                let (violations, outcomes) = match judge(oracles, &world).await? {
                    (Verdict::Disagree(v), o) => (v, o),
                    _ => (violations, outcomes),
                };
                let mut finding = Finding {
                    seed: s,
                    kind,
                    world,
                    violations,
                    outcomes,
                    path: None,
                };
                if let Some(dir) = out {
                    let slug: String = kind.replace(' ', "-");
                    let path = dir.join(format!("{slug}-seed-{s}.yaml"));
                    let written =
                        reproducer(&finding)
                            .map_err(|e| e.to_string())
                            .and_then(|text| {
                                std::fs::create_dir_all(dir)
                                    .and_then(|()| std::fs::write(&path, text))
                                    .map_err(|e| e.to_string())
                            });
                    match written {
                        Ok(()) => finding.path = Some(path),
                        Err(e) => {
                            tracing::warn!(path = %path.display(), "writing the reproducer failed: {e}")
                        }
                    }
                }
                report.findings.push(finding);
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A reproducer's world (the YAML after the header comments).
pub fn read_reproducer(text: &str) -> Result<World, serde_yaml_ng::Error> {
    serde_yaml_ng::from_str(text)
}
