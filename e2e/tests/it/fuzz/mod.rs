//! Structured fuzzing of what a user or a careless tenant can hand us (issue 34): the
//! emulated apiserver's API surface over real HTTP (bodies, patches, queries), the DRA CEL
//! selectors, and the plugin's inputs (inventory files, opaque configs). Inputs are
//! generated from grammars (proptest strategies), so they reach past the first parse.
//!
//! Every target holds each input to the same promises: the process survives (a stack
//! overflow or a panic fails the run), it answers within [`CASE_DEADLINE`] (a hang
//! detector, far above the milliseconds an answer takes: not a speed check), its resident
//! memory stays under [`RSS_LIMIT_BYTES`], a refusal is a clear message, and what was
//! stored before is still there and still decodes.
//!
//! `cargo test` runs [`DEFAULT_CASES`] inputs per target from a fixed seed (the same
//! inputs every run). `hack/fuzz.sh TARGET --time 30m` runs one target for a time with a
//! fresh seed; `FAKE_DRA_FUZZ_SEED` replays one. A failure is shrunk to a small input
//! and printed with its seed; it then becomes a regression test where the defect lives.
//! Each run prints `fuzz TARGET: N executions …`; `FAKE_DRA_FUZZ_REPORT=FILE` appends it
//! there too.

mod api;
mod cel;
mod flags;
mod json;
mod logs;
mod plugin;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Inputs per target in `cargo test`.
const DEFAULT_CASES: u64 = 96;
/// How long one input may take before the run calls it a hang.
pub const CASE_DEADLINE: Duration = Duration::from_secs(20);
/// The resident memory the test process may reach (the defects this hunts grew it by
/// gigabytes; the whole test binary with its emulators uses a few hundred MiB).
const RSS_LIMIT_BYTES: u64 = 3 << 30;
/// Shrinking steps tried on a failing input (`FAKE_DRA_FUZZ_SHRINK_STEPS` sets another
/// number: each step of an input that hangs costs a whole deadline).
const MAX_SHRINK_STEPS: usize = 256;
const SHRINK_STEPS_ENV: &str = "FAKE_DRA_FUZZ_SHRINK_STEPS";
/// How much of a failing input and its reason a failure shows.
const MAX_SHOWN_CHARS: usize = 3000;
/// The longest refusal message a target accepts (an error that echoes a 10 KB input
/// whole is a defect of its own).
const MAX_MESSAGE_BYTES: usize = 4096;

const SECONDS_ENV: &str = "FAKE_DRA_FUZZ_SECONDS";
const CASES_ENV: &str = "FAKE_DRA_FUZZ_CASES";
const SEED_ENV: &str = "FAKE_DRA_FUZZ_SEED";
const REPORT_ENV: &str = "FAKE_DRA_FUZZ_REPORT";
/// `1` prints every input before it is tried (to find one that hangs the process).
const TRACE_ENV: &str = "FAKE_DRA_FUZZ_TRACE";

/// How long a target runs: a number of inputs, or a time.
enum Budget {
    Cases(u64),
    Time(Duration),
}

impl Budget {
    fn from_env() -> Self {
        let read = |name: &str| {
            std::env::var(name).ok().map(|v| {
                v.parse::<u64>()
                    .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number"))
            })
        };
        match (read(SECONDS_ENV), read(CASES_ENV)) {
            (Some(s), _) => Budget::Time(Duration::from_secs(s)),
            (None, Some(n)) => Budget::Cases(n),
            (None, None) => Budget::Cases(DEFAULT_CASES),
        }
    }

    fn more(&self, done: u64, started: Instant) -> bool {
        match self {
            Budget::Cases(n) => done < *n,
            Budget::Time(t) => started.elapsed() < *t,
        }
    }
}

/// The seed: `FAKE_DRA_FUZZ_SEED`, else 0 (hack/fuzz.sh passes a fresh one).
fn seed() -> u64 {
    std::env::var(SEED_ENV).map_or(0, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{SEED_ENV}={v:?} is not a whole number"))
    })
}

/// The process's resident memory, from /proc.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs `check` on inputs from `strategy` within the budget. `check` says what broke,
/// and the harness adds the memory limit. A failing input is shrunk, then the run fails
/// naming it, its seed and how many inputs passed before it.
pub fn run<S, F>(target: &str, strategy: S, mut check: F)
where
    S: Strategy,
    S::Value: Debug,
    F: FnMut(&S::Value) -> Result<(), String>,
{
    let budget = Budget::from_env();
    let seed = seed();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    );
    let mut check_all = |value: &S::Value| -> Result<(), String> {
        check(value)?;
        let rss = rss_bytes();
        if rss > RSS_LIMIT_BYTES {
            return Err(format!(
                "resident memory {} MiB, over the limit of {} MiB",
                rss >> 20,
                RSS_LIMIT_BYTES >> 20
            ));
        }
        Ok(())
    };
    let trace = std::env::var(TRACE_ENV).as_deref() == Ok("1");
    let started = Instant::now();
    let mut done = 0u64;
    let mut max_rss = 0u64;
    while budget.more(done, started) {
        let mut tree = strategy
            .new_tree(&mut runner)
            .unwrap_or_else(|e| panic!("fuzz {target}: the strategy gave no input: {e}"));
        let first = tree.current();
        if trace {
            eprintln!(
                "fuzz {target}: input {done}: {}",
                clip(&format!("{first:?}"))
            );
        }
        if let Err(why) = check_all(&first) {
            let (input, why) = shrink(&mut tree, first, why, &mut check_all);
            panic!(
                "fuzz {target}: input {done} of seed {seed} failed (shrunk): {}\ninput: {}\n\
                 replay: FAKE_DRA_FUZZ_SEED={seed} FAKE_DRA_FUZZ_CASES={} cargo test -p fake-dra-e2e --test it -- {target}",
                clip(&why),
                clip(&format!("{input:#?}")),
                done + 1
            );
        }
        done += 1;
        max_rss = max_rss.max(rss_bytes());
    }
    let line = format!(
        "fuzz {target}: {done} executions in {:.1} s (seed {seed}), peak resident memory {} MiB, nothing found",
        started.elapsed().as_secs_f64(),
        max_rss >> 20
    );
    eprintln!("{line}");
    if let Ok(file) = std::env::var(REPORT_ENV) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .unwrap_or_else(|e| panic!("{REPORT_ENV}={file}: {e}"));
        writeln!(f, "{line}").unwrap_or_else(|e| panic!("{REPORT_ENV}={file}: {e}"));
    }
}

/// At most [`MAX_SHOWN_CHARS`] characters of `text`, saying how much was left out: a
/// failing input may hold a 70,000-character string.
fn clip(text: &str) -> String {
    let total = text.chars().count();
    if total <= MAX_SHOWN_CHARS {
        return text.to_string();
    }
    let shown: String = text.chars().take(MAX_SHOWN_CHARS).collect();
    format!("{shown}… ({} more characters)", total - MAX_SHOWN_CHARS)
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes
}

/// proptest's shrinking protocol: simplify while the input still fails, step back
/// (complicate) when a simplification passes.
fn shrink<T: ValueTree>(
    tree: &mut T,
    mut failing: T::Value,
    mut why: String,
    check: &mut impl FnMut(&T::Value) -> Result<(), String>,
) -> (T::Value, String) {
    let max_steps = std::env::var(SHRINK_STEPS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_SHRINK_STEPS);
    let mut steps = 0;
    let mut more = tree.simplify();
    while more && steps < max_steps {
        steps += 1;
        let candidate = tree.current();
        match check(&candidate) {
            Err(e) => {
                failing = candidate;
                why = e;
                more = tree.simplify();
            }
            Ok(()) => more = tree.complicate(),
        }
    }
    (failing, why)
}

/// Runs `f` on a thread of its own and waits at most [`CASE_DEADLINE`] for it: a panic
/// or no answer is the input's failure. A thread that hangs is left behind (the run fails
/// anyway).
pub fn within_deadline<R: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("fuzz-case".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("{what}: cannot start a thread: {e}"))?;
    match rx.recv_timeout(CASE_DEADLINE) {
        Ok(r) => {
            let _ = thread.join();
            Ok(r)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "{what}: no answer within {} s",
            CASE_DEADLINE.as_secs()
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Err(format!("{what}: panicked (above)"))
        }
    }
}

/// A refusal must say something, and not echo a large input whole.
pub fn bounded_refusal(outcome: Result<(), String>) -> Result<(), String> {
    match outcome {
        Err(message) if message.trim().is_empty() => Err("an empty error message".into()),
        Err(message) if message.len() > MAX_MESSAGE_BYTES => Err(format!(
            "an error of {} bytes: {}",
            message.len(),
            clip(&message)
        )),
        _ => Ok(()),
    }
}
