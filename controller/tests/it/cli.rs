//! What a user sees of the binary before it reaches a cluster: `--version` with the
//! commit, shell completions, a bad value from an environment variable named as such, and
//! the missing kubeconfig said in words (once, not as a Rust `Debug` dump).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn controller(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fake-dra-controller"));
    command
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run fake-dra-controller")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn version_names_the_commit() {
    let out = controller(&["--version"], &[]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!(
            "fake-dra-controller {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{stdout}"
    );
}

#[test]
fn completion_scripts_for_the_shells() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef fake-dra-controller"),
        ("fish", "complete -c fake-dra-controller"),
    ] {
        let out = controller(&["completion", shell], &[]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        assert!(
            stdout.contains(marker),
            "{shell}: no {marker:?} in:\n{stdout}"
        );
        assert!(stdout.contains("leader-elect"), "{shell}: {stdout}");
    }
    let out = controller(&["completion", "tcsh"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let out = controller(&[], &[("FAKE_DRA_WORKERS", "many")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(
            "error: invalid value 'many' for '--workers <WORKERS>' (from the environment variable FAKE_DRA_WORKERS)"
        ),
        "{stderr}"
    );
    // Given on the command line, it is the flag's error as clap words it.
    let out = controller(&["--workers", "many"], &[]);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("environment variable"), "{stderr}");
    assert!(stderr.contains("'--workers <WORKERS>'"), "{stderr}");
}

#[test]
fn no_kubeconfig_is_said_once_in_words() {
    let home = tempfile::tempdir().unwrap();
    let out = controller(&[], &[("HOME", home.path().to_str().unwrap())]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let expected = format!(
        "fake-dra-controller: no Kubernetes configuration: not running in a cluster (KUBERNETES_SERVICE_HOST is not set), no --kubeconfig was given, KUBECONFIG is not set and {}/.kube/config does not exist; give --kubeconfig or set KUBECONFIG\n",
        home.path().display()
    );
    assert!(stderr.ends_with(&expected), "{stderr}");
    assert_eq!(
        stderr.matches("no Kubernetes configuration").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("Infer("), "{stderr}");
    // The first log line names the build.
    assert!(stderr.contains("starting"), "{stderr}");
    assert!(stderr.contains(fake_dra_ops::version::COMMIT), "{stderr}");
}
