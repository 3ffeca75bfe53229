//! `fake-dra-differential`: a batch of seeded random DRA worlds through the emulated
//! scheduler (and a real cluster's kube-scheduler with `--real-kubeconfig`), judged by the
//! independent checker and against each other; disagreements shrunk and written as
//! reproducers. Exits 1 when a world disagrees. See docs/differential.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fake_dra_differential::{oracle, run_batch};

/// Differential allocation testing against the emulator.
#[derive(Debug, Parser)]
#[command(name = "fake-dra-differential")]
struct Args {
    /// The first world's seed; worlds are seed, seed+1, ...
    #[arg(long, env = "FAKE_DRA_SEED", default_value_t = 1)]
    seed: u64,
    /// How many worlds.
    #[arg(long, env = "FAKE_DRA_WORLDS", default_value_t = 100)]
    worlds: usize,
    /// The Kubernetes release the emulator follows (1.32 or later).
    #[arg(long, env = "FAKE_DRA_KUBERNETES_VERSION", default_value = "1.37")]
    kubernetes_version: String,
    /// Where reproducers are written (none: only reported).
    #[arg(long, env = "FAKE_DRA_OUT")]
    out: Option<PathBuf>,
    /// Most worlds tried while shrinking one disagreement.
    #[arg(long, env = "FAKE_DRA_SHRINK_BUDGET", default_value_t = 400)]
    shrink_budget: usize,
    /// A real cluster's kubeconfig (hack/local-cluster.sh's): its kube-scheduler is an
    /// oracle too, and each world is compared between the two. Its nodes are created
    /// as API objects; every object of a world is deleted after it. Not `--kubeconfig`:
    /// a `KUBECONFIG` in the environment must not point this at a cluster by accident.
    #[arg(long, env = "FAKE_DRA_REAL_KUBECONFIG")]
    real_kubeconfig: Option<PathBuf>,
    /// Leave the worlds' objects in the --real-kubeconfig cluster (each in its namespace
    /// `differential-w<seed>-<run>`), to look at them afterwards.
    #[arg(long, env = "FAKE_DRA_KEEP")]
    keep: bool,
    /// Run only the world of this reproducer file (a world YAML after comments) and print
    /// the verdict and each oracle's outcome.
    #[arg(long, env = "FAKE_DRA_WORLD")]
    world: Option<PathBuf>,
    /// Print the worlds' Kubernetes objects (YAML) instead of running them.
    #[arg(long, env = "FAKE_DRA_PRINT")]
    print: bool,
}

async fn cluster_client(path: &std::path::Path) -> Result<kube::Client, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("--real-kubeconfig {}: {e}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("--real-kubeconfig {}: {e}", path.display()))?;
    kube::Client::try_from(config).map_err(|e| format!("--real-kubeconfig {}: {e}", path.display()))
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
    let (args, _) = fake_dra_ops::flags::parse::<Args>(&[]);
    let release = match release(&args.kubernetes_version) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fake-dra-differential: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print {
        for seed in args.seed..args.seed + args.worlds as u64 {
            println!(
                "# world {seed}\n---\n{}",
                fake_dra_differential::generate::world(seed).yaml()
            );
        }
        return ExitCode::SUCCESS;
    }
    let mut oracles = vec![oracle::Oracle::Emulator(oracle::Emulator { release })];
    if let Some(path) = &args.real_kubeconfig {
        match cluster_client(path).await {
            Ok(client) => {
                let mut cluster = oracle::Cluster::new(client);
                cluster.keep = args.keep;
                oracles.push(oracle::Oracle::Cluster(cluster));
            }
            Err(e) => {
                eprintln!("fake-dra-differential: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(path) = &args.world {
        let world = match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| fake_dra_differential::read_reproducer(&t).map_err(|e| e.to_string()))
        {
            Ok(w) => w,
            Err(e) => {
                eprintln!("fake-dra-differential: --world {}: {e}", path.display());
                return ExitCode::from(2);
            }
        };
        for oracle in &oracles {
            match oracle.run(&world).await {
                Ok(outcomes) => println!(
                    "{}:\n{}",
                    oracle.name(),
                    serde_yaml_ng::to_string(&outcomes).unwrap_or_default()
                ),
                Err(e) => println!("{}: {e}", oracle.name()),
            }
        }
        return match fake_dra_differential::judge(&oracles, &world).await {
            Ok((verdict, _)) => {
                println!("verdict: {verdict:?}");
                if matches!(verdict, fake_dra_differential::Verdict::Disagree(_)) {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("fake-dra-differential: {e}");
                ExitCode::from(2)
            }
        };
    }
    match run_batch(
        &oracles,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_follows_the_env_rule() {
        assert_eq!(
            fake_dra_ops::flags::rule_breakers(&Args::command()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_release_before_structured_dra_is_refused_by_name() {
        assert_eq!(release("1.37"), Ok((1, 37)));
        assert!(release("1.30").is_err_and(|e| e.contains("1.32 or later")));
        assert!(release("x").is_err_and(|e| e.contains("MAJOR.MINOR")));
    }
}
