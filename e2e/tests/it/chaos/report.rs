//! What the soak counted, checked and found, and its printed form.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The invariants, by the names the report uses (docs/soak.md describes each).
pub mod invariant {
    /// No device in two pods that do not share a claim, while both exist.
    pub const EXCLUSIVE: &str = "device exclusivity (env)";
    /// A container's env shows the claims the API gives its pod, with the devices asked.
    pub const ENV_MATCHES_API: &str = "env matches the pod's claims";
    /// Pods of one claim see the same ids.
    pub const SHARED_SAME: &str = "shared claim, same ids";
    /// Running, or a documented state with an Event naming why.
    pub const POD_OUTCOME: &str = "pod Running or documented";
    /// Pods leave ContainerCreating within the kubelet's retry period once faults stop.
    pub const CREATING: &str = "ContainerCreating bounded after the faults";
    /// Pods go when deleted.
    pub const POD_GONE: &str = "pod gone after deletion";
    /// The cluster serves pods with claims again after each fault.
    pub const RECOVERY: &str = "recovery after each fault";
    /// The plugin's RSS and open fds stay under their bounds.
    pub const PLUGIN_BOUNDED: &str = "plugin RSS and fds bounded";
    /// Nothing of a claim left once the pods are gone: CDI specs, checkpoint entries,
    /// ResourceClaims.
    pub const NOTHING_LEFT: &str = "nothing left at the end";
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub at: Duration,
    pub invariant: &'static str,
    pub detail: String,
}

#[derive(Debug, Default, Clone)]
pub struct Lifecycles {
    /// Pods that existed and are gone.
    pub gone: u64,
    /// Of those, pods that ran and printed their env.
    pub ran: u64,
    /// Pods deleted before they ran by a Deployment scale-down (documented).
    pub deleted_before_running: u64,
}

#[derive(Debug, Default, Clone)]
pub struct FaultStats {
    pub injected: u64,
    pub recovered: u64,
    pub slowest: Duration,
    pub total: Duration,
    pub slowest_plugin_back: Duration,
}

#[derive(Debug, Default, Clone)]
pub struct ProcessStats {
    pub container: String,
    pub samples: u64,
    pub first_rss_kib: u64,
    pub max_rss_kib: u64,
    pub last_rss_kib: u64,
    pub first_fds: u64,
    pub max_fds: u64,
    pub last_fds: u64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub devices: u32,
    pub size: u64,
    pub lifecycles: BTreeMap<&'static str, Lifecycles>,
    /// Pods not Running at their deadline, by the reason of the Event naming why.
    pub documented: BTreeMap<String, u64>,
    pub checks: BTreeMap<&'static str, u64>,
    pub violations: Vec<Violation>,
    pub faults: BTreeMap<&'static str, FaultStats>,
    /// One line per fault, in the order injected.
    pub fault_log: Vec<String>,
    pub processes: Vec<ProcessStats>,
    pub baseline: Option<(u64, u64)>,
    /// Plugin starts that removed specs of claims not in the checkpoint (a crash between
    /// the CDI write and the checkpoint write) and that wrote specs back (a wiped CDI dir).
    pub orphans_swept: u64,
    pub specs_restored: u64,
    pub plugin_starts_scanned: u64,
    /// The longest a pod spent in ContainerCreating while faults ran and after.
    pub creating_during_faults: Duration,
    pub creating_after_faults: Duration,
    /// Pods past the ContainerCreating limit after the faults for which the kubelet never
    /// reported a failure: slow (the machine's load), not stuck.
    pub slow_starts: u64,
    pub max_live_pods: usize,
    /// Device conflicts not counted: the other pod was already gone when asked.
    pub dismissed_conflicts: u64,
    /// Observer rounds that could not list the pods (the API server down).
    pub blind_rounds: u64,
    pub churn: Duration,
    pub quiet: Duration,
    pub total: Duration,
}

impl Report {
    pub fn violation(&mut self, at: Duration, invariant: &'static str, detail: String) {
        eprintln!(
            "[soak {:>6.1}s] VIOLATION of {invariant}: {detail}",
            at.as_secs_f64()
        );
        self.violations.push(Violation {
            at,
            invariant,
            detail,
        });
    }

    pub fn checked(&mut self, invariant: &'static str, n: u64) {
        *self.checks.entry(invariant).or_default() += n;
    }

    pub fn lifecycles(&mut self, kind: &'static str) -> &mut Lifecycles {
        self.lifecycles.entry(kind).or_default()
    }

    pub fn ran(&self) -> u64 {
        self.lifecycles.values().map(|l| l.ran).sum()
    }

    pub fn gone(&self) -> u64 {
        self.lifecycles.values().map(|l| l.gone).sum()
    }

    pub fn fault(&mut self, kind: &'static str) -> &mut FaultStats {
        self.faults.entry(kind).or_default()
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
        let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
        let _ = writeln!(o, "===== fake-dra chaos soak report =====");
        let _ = writeln!(
            o,
            "seed {} | {} devices on the node | size {} lifecycles | churn {} (of which {} without faults) | total {}",
            self.seed,
            self.devices,
            self.size,
            secs(self.churn),
            secs(self.quiet),
            secs(self.total)
        );
        let _ = writeln!(
            o,
            "pod lifecycles: {} (pods that ran and printed their env, then went); {} pods gone in all; at most {} pods with devices at once",
            self.ran(),
            self.gone(),
            self.max_live_pods
        );
        for (kind, l) in &self.lifecycles {
            let _ = writeln!(
                o,
                "  {kind:<12} ran {:>5}  gone {:>5}  deleted before running (scale-down) {:>4}",
                l.ran, l.gone, l.deleted_before_running
            );
        }
        if !self.documented.is_empty() {
            let _ = writeln!(
                o,
                "pods not Running by their deadline, in a documented state:"
            );
            for (reason, n) in &self.documented {
                let _ = writeln!(o, "  {n:>5}  {reason}");
            }
        }
        let _ = writeln!(
            o,
            "faults injected (plugin back: fault end -> plugin Ready and every device published; recovered: then a new pod with a claim Running with its env):"
        );
        for (kind, f) in &self.faults {
            let avg = if f.recovered > 0 {
                f.total / f.recovered as u32
            } else {
                Duration::ZERO
            };
            let _ = writeln!(
                o,
                "  {kind:<32} {:>3} injected {:>3} recovered  slowest: plugin back {:>7}, recovered {:>7}  (mean {:>7})",
                f.injected,
                f.recovered,
                secs(f.slowest_plugin_back),
                secs(f.slowest),
                secs(avg)
            );
        }
        let _ = writeln!(
            o,
            "plugin starts scanned: {}; starts that swept specs of unrecorded claims (a crash between the CDI write and the checkpoint write): {}; that wrote specs back: {}",
            self.plugin_starts_scanned, self.orphans_swept, self.specs_restored
        );
        let _ = writeln!(
            o,
            "longest in ContainerCreating: {} while faults ran, {} after the last fault; pods past the limit after the faults without any kubelet failure (slow, not stuck): {}",
            secs(self.creating_during_faults),
            secs(self.creating_after_faults),
            self.slow_starts
        );
        if let Some((rss, fds)) = self.baseline {
            let _ = writeln!(
                o,
                "plugin baseline (fresh, no claims): RSS {} KiB, {} fds",
                rss, fds
            );
        }
        for p in &self.processes {
            let _ = writeln!(
                o,
                "  plugin container {:.12}: {:>4} samples  RSS KiB first {:>6} max {:>6} last {:>6}  fds first {:>3} max {:>3} last {:>3}",
                p.container,
                p.samples,
                p.first_rss_kib,
                p.max_rss_kib,
                p.last_rss_kib,
                p.first_fds,
                p.max_fds,
                p.last_fds
            );
        }
        let _ = writeln!(o, "invariant checks made:");
        for (name, n) in &self.checks {
            let _ = writeln!(o, "  {n:>7}  {name}");
        }
        let _ = writeln!(
            o,
            "device conflicts dismissed (the other pod already gone when asked): {}; observer rounds blind (API server down): {}",
            self.dismissed_conflicts, self.blind_rounds
        );
        let _ = writeln!(o, "violations: {}", self.violations.len());
        let mut by_invariant: BTreeMap<&str, u64> = BTreeMap::new();
        for v in &self.violations {
            *by_invariant.entry(v.invariant).or_default() += 1;
        }
        for (name, n) in by_invariant {
            let _ = writeln!(o, "  {n:>5}  {name}");
        }
        for v in self.violations.iter().take(40) {
            let _ = writeln!(
                o,
                "  [{:>7.1}s] {}: {}",
                v.at.as_secs_f64(),
                v.invariant,
                v.detail
            );
        }
        if self.violations.len() > 40 {
            let _ = writeln!(o, "  ... and {} more", self.violations.len() - 40);
        }
        let _ = writeln!(o, "fault log:");
        for line in &self.fault_log {
            let _ = writeln!(o, "  {line}");
        }
        o
    }
}
