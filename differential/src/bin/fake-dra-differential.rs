//! `fake-dra-differential`: a batch of seeded random DRA worlds through the emulated
//! scheduler, judged by the independent checker; disagreements shrunk and written as
//! reproducers. Exits 1 when a world disagrees. See docs/differential.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fake_dra_differential::{oracle, run_batch};

/// Differential allocation testing against the emulator.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The first world's seed; worlds are seed, seed+1, ...
    #[arg(long, env = "FAKE_DRA_DIFF_SEED", default_value_t = 1)]
    seed: u64,
    /// How many worlds.
    #[arg(long, env = "FAKE_DRA_DIFF_WORLDS", default_value_t = 100)]
    worlds: usize,
    /// The Kubernetes release the emulator follows (1.32 or later).
    #[arg(long, env = "FAKE_DRA_DIFF_KUBERNETES_VERSION", default_value = "1.37")]
    kubernetes_version: String,
    /// Where reproducers are written (none: only reported).
    #[arg(long, env = "FAKE_DRA_DIFF_OUT")]
    out: Option<PathBuf>,
    /// Most worlds tried while shrinking one disagreement.
    #[arg(long, env = "FAKE_DRA_DIFF_SHRINK_BUDGET", default_value_t = 400)]
    shrink_budget: usize,
}

fn release(text: &str) -> Result<(u32, u32), String> {
    let (major, minor) = text
        .trim_start_matches('v')
        .split_once('.')
        .ok_or_else(|| format!("--kubernetes-version {text:?}: want MAJOR.MINOR, e.g. 1.37"))?;
    let parse = |s: &str| {
        s.parse::<u32>()
            .map_err(|e| format!("--kubernetes-version {text:?}: {e}"))
    };
    let version = (
        parse(major)?,
        parse(minor.split('.').next().unwrap_or(minor))?,
    );
    if version < (1, 32) {
        return Err(format!(
            "--kubernetes-version {text}: differential testing needs structured DRA (1.32 or later)"
        ));
    }
    Ok(version)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let release = match release(&args.kubernetes_version) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake-dra-differential: {e}");
            return ExitCode::from(2);
        }
    };
    let oracle = oracle::Emulator { release };
    match run_batch(
        &oracle,
        args.seed,
        args.worlds,
        args.shrink_budget,
        args.out.as_deref(),
    )
    .await
    {
        Ok(report) => {
            print!("{}", report.text());
            if report.findings.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("fake-dra-differential: {e}");
            ExitCode::from(2)
        }
    }
}
