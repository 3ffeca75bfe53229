//! Writes the CRD YAML into `deploy/crds/`, or with `--check` verifies it is up to date.
//!
//! ```text
//! crdgen [--check] [--out-dir DIR] | --version
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use fake_dra_api::crdgen;

const USAGE: &str = "usage: crdgen [--check] [--out-dir DIR] | --version\n\
    \n\
    Writes the CRDs generated from the Rust types into DIR (default: deploy/crds/ of the\n\
    workspace). With --check, writes nothing and exits 1 if DIR is not up to date.";

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = crdgen::default_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--out-dir" => match args.next() {
                Some(value) => dir = PathBuf::from(value),
                None => return usage_error("--out-dir needs a directory"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            // As every binary of the project answers it (issue 35); the api crate sits
            // below fake-dra-ops, so the release alone, without the commit.
            "-V" | "--version" => {
                println!("crdgen {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            other => return usage_error(&format!("unknown argument {other:?}")),
        }
    }

    if check {
        match crdgen::check_dir(&dir) {
            Ok(mismatches) if mismatches.is_empty() => {
                println!("{} is up to date", dir.display());
                ExitCode::SUCCESS
            }
            Ok(mismatches) => {
                for mismatch in &mismatches {
                    eprintln!("{}: {mismatch}", dir.display());
                }
                eprintln!("run `{}` to regenerate", crdgen::REGENERATE);
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::FAILURE
            }
        }
    } else {
        match crdgen::write_dir(&dir) {
            Ok(paths) => {
                for path in paths {
                    println!("wrote {}", path.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::FAILURE
            }
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("crdgen: {message}\n\n{USAGE}");
    ExitCode::from(2)
}
