//! One rule for the environment twins of every flag of every binary: `--some-flag` is
//! `FAKE_DRA_SOME_FLAG`, except `--kubeconfig`, which is `KUBECONFIG` as for every
//! Kubernetes tool. Names from before the rule keep working for one release, with a
//! warning; a test per binary holds its flags to the rule ([`rule_breakers`]).

use clap::{Command, Parser};

/// What every environment twin starts with.
pub const ENV_PREFIX: &str = "FAKE_DRA_";

/// The environment twin the rule gives the flag `--<long>`.
pub fn env_name(long: &str) -> String {
    if long == "kubeconfig" {
        return "KUBECONFIG".to_owned();
    }
    format!(
        "{ENV_PREFIX}{}",
        long.to_ascii_uppercase().replace('-', "_")
    )
}

/// Every flag of `command` (and its subcommands) without the twin the rule gives it, as
/// `--flag: has X, the rule says Y`.
pub fn rule_breakers(command: &Command) -> Vec<String> {
    let mut found = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let expected = env_name(long);
        let has = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        if has.as_deref() != Some(expected.as_str()) {
            found.push(format!("--{long}: has {has:?}, the rule says {expected}"));
        }
    }
    for sub in command.get_subcommands() {
        found.extend(rule_breakers(sub));
    }
    found
}

/// An environment name from before the rule, and the one that replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The old name.
    pub old: &'static str,
    /// The flag's twin now.
    pub new: &'static str,
}

/// An old name found set at start, to be logged once logging is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldName {
    /// Its value was used.
    Used(Renamed),
    /// Both names were set; the new one won.
    Ignored(Renamed),
}

impl OldName {
    /// Logs it as a warning.
    pub fn warn(&self) {
        match self {
            Self::Used(r) => tracing::warn!(
                "environment variable {} is deprecated and will stop working in the next release; set {} instead",
                r.old,
                r.new
            ),
            Self::Ignored(r) => tracing::warn!(
                "environment variable {} is ignored because {} is set; remove {}",
                r.old,
                r.new,
                r.old
            ),
        }
    }
}

/// Gives each flag whose old name is set (per `lookup`) that value as its default, so
/// the command line and the new name still win. Pure, for tests.
pub fn apply_old_names(
    mut command: Command,
    renamed: &[Renamed],
    lookup: impl Fn(&str) -> Option<String>,
) -> (Command, Vec<OldName>) {
    let mut seen = Vec::new();
    for r in renamed {
        let Some(value) = lookup(r.old) else { continue };
        if lookup(r.new).is_some() {
            seen.push(OldName::Ignored(*r));
            continue;
        }
        let id = command
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == r.new))
            .map(|a| a.get_id().clone());
        // A name that maps to no flag is a bug in the binary's table, caught by its test.
        let Some(id) = id else { continue };
        command = command.mut_arg(id, |arg| arg.default_value(value).required(false));
        seen.push(OldName::Used(*r));
    }
    (command, seen)
}

/// The subcommand every binary has: `completion bash|zsh|fish|…` prints the shell's
/// completion script.
pub const COMPLETION: &str = "completion";

/// `command` with the version ([`VERSION`](crate::version::VERSION), with the git commit)
/// and the [`COMPLETION`] subcommand every binary shares.
pub fn with_shared(command: Command) -> Command {
    command
        .version(crate::version::VERSION)
        // `completion bash` needs none of the flags a run requires.
        .subcommand_negates_reqs(true)
        .subcommand(
            Command::new(COMPLETION)
                .about("Print the shell completion script, e.g. `source <(BINARY completion bash)`")
                .arg(
                    clap::Arg::new("shell")
                        .required(true)
                        .value_parser(clap::value_parser!(clap_complete::Shell)),
                ),
        )
}

/// Parses `A` from the command line and the environment, old names included; exits with
/// clap's message on bad input, as `A::parse` does (naming the environment variable when
/// the bad value came from one), and after printing a completion script. Log the
/// [`OldName`]s once logging is up.
pub fn parse<A: Parser>(renamed: &[Renamed]) -> (A, Vec<OldName>) {
    let (args, _, seen) = parse_extended::<A>(renamed, |command| command);
    (args, seen)
}

/// [`parse`] of `A`'s command as `extend` adds to it (flags registered at run time, such
/// as a plugin's profiles'), with the matches for reading those.
pub fn parse_extended<A: Parser>(
    renamed: &[Renamed],
    extend: impl FnOnce(Command) -> Command,
) -> (A, clap::ArgMatches, Vec<OldName>) {
    let (command, seen) = apply_old_names(extend(A::command()), renamed, |name| {
        std::env::var(name).ok()
    });
    let mut command = with_shared(command);
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = match command.try_get_matches_from_mut(&argv) {
        Ok(matches) => matches,
        Err(e) => exit_with(e, &command, &argv),
    };
    if let Some((COMPLETION, sub)) = matches.subcommand() {
        if let Some(shell) = sub.get_one::<clap_complete::Shell>("shell") {
            let name = command.get_name().to_string();
            clap_complete::generate(*shell, &mut command, name, &mut std::io::stdout());
        }
        std::process::exit(0);
    }
    let args = A::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (args, matches, seen)
}

/// Exits with clap's message; a value clap refused that came from a flag's environment
/// twin (the flag itself not given) names the variable, since `--mode` alone would send
/// the user looking for a flag they never typed.
fn exit_with(error: clap::Error, command: &Command, argv: &[std::ffi::OsString]) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) && let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg)
        && let Some(long) = arg
            .strip_prefix("--")
            .and_then(|a| a.split([' ', '=']).next())
        && let Some(env) = env_of(command, long)
        && std::env::var_os(&env).is_some()
        && !argv.iter().any(|a| {
            let a = a.to_string_lossy();
            a == format!("--{long}") || a.starts_with(&format!("--{long}="))
        })
    {
        eprint!(
            "{}",
            bounded(&name_the_variable(&error.render().to_string(), arg, &env))
        );
        std::process::exit(error.exit_code());
    }
    let rendered = error.render().to_string();
    if error.use_stderr() && rendered.lines().any(|l| l.chars().count() > MAX_LINE_CHARS) {
        eprint!("{}", bounded(&rendered));
        std::process::exit(error.exit_code());
    }
    error.exit()
}

/// The longest line of a refusal: clap quotes a refused value whole, and a 70,000-character
/// one buried the flag's name (found by the `binary_flags` fuzz target).
const MAX_LINE_CHARS: usize = 1024;

/// `rendered` with each line of over [`MAX_LINE_CHARS`] characters cut in the middle.
fn bounded(rendered: &str) -> String {
    let lines: Vec<String> = rendered
        .split('\n')
        .map(|l| crate::text::elide_middle(l, MAX_LINE_CHARS))
        .collect();
    lines.join("\n")
}

/// The environment twin of `--long` in `command` or any of its subcommands.
fn env_of(command: &Command, long: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .or_else(|| command.get_subcommands().find_map(|s| env_of(s, long)))
}

/// clap's rendered error saying where the value came from, right after the flag it names
/// (`… for '--mode <MODE>' (from the environment variable FAKE_DRA_MODE): …`).
pub fn name_the_variable(rendered: &str, arg: &str, env: &str) -> String {
    let quoted = format!("'{arg}'");
    let note = format!(" (from the environment variable {env})");
    let (first, rest) = rendered.split_once('\n').unwrap_or((rendered, ""));
    let first = match first.find(&quoted) {
        Some(at) => {
            let end = at + quoted.len();
            format!("{}{note}{}", &first[..end], &first[end..])
        }
        None => format!("{first}{note}"),
    };
    if rendered.contains('\n') {
        format!("{first}\n{rest}")
    } else {
        first
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};
    use std::collections::HashMap;

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, env = "FAKE_DRA_NODE_NAME")]
        node_name: String,
        #[arg(
            long,
            env = "FAKE_DRA_MODELS",
            value_delimiter = ',',
            default_value = "A"
        )]
        models: Vec<String>,
        #[arg(long, env = "FAKE_DRA_LEADER_ELECT", default_value_t = false)]
        leader_elect: bool,
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<String>,
    }

    const RENAMED: &[Renamed] = &[
        Renamed {
            old: "NODE_NAME",
            new: "FAKE_DRA_NODE_NAME",
        },
        Renamed {
            old: "MODELS",
            new: "FAKE_DRA_MODELS",
        },
    ];

    fn parse_with(
        env: &[(&str, &str)],
        argv: &[&str],
    ) -> (Result<Args, clap::Error>, Vec<OldName>) {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (command, seen) = apply_old_names(Args::command(), RENAMED, |n| env.get(n).cloned());
        let parsed = command
            .try_get_matches_from(std::iter::once("bin").chain(argv.iter().copied()))
            .and_then(|m| Args::from_arg_matches(&m));
        (parsed, seen)
    }

    #[test]
    fn the_rule() {
        assert_eq!(env_name("node-name"), "FAKE_DRA_NODE_NAME");
        assert_eq!(env_name("kubeconfig"), "KUBECONFIG");
        assert!(rule_breakers(&Args::command()).is_empty());
        #[derive(Debug, Parser)]
        struct Bad {
            #[arg(long, env = "NODE_NAME")]
            node_name: String,
            #[arg(long)]
            no_env: bool,
        }
        assert_eq!(
            rule_breakers(&Bad::command()),
            [
                "--node-name: has Some(\"NODE_NAME\"), the rule says FAKE_DRA_NODE_NAME",
                "--no-env: has None, the rule says FAKE_DRA_NO_ENV",
            ]
        );
    }

    #[test]
    fn an_old_name_still_works_and_is_reported() {
        let (args, seen) = parse_with(&[("NODE_NAME", "n1"), ("MODELS", "X,Y")], &[]);
        let args = args.unwrap();
        assert_eq!(args.node_name, "n1");
        assert_eq!(args.models, ["X", "Y"]);
        assert_eq!(seen, [OldName::Used(RENAMED[0]), OldName::Used(RENAMED[1])]);
    }

    #[test]
    fn the_flag_and_the_new_name_win_over_an_old_name() {
        let (args, seen) = parse_with(&[("NODE_NAME", "old"), ("FAKE_DRA_NODE_NAME", "new")], &[]);
        assert_eq!(seen, [OldName::Ignored(RENAMED[0])]);
        // The new name is read by clap from the real environment, not the lookup: here it
        // is absent, so only the flag can supply the value.
        assert!(args.is_err());
        let (args, _) = parse_with(&[("NODE_NAME", "old")], &["--node-name", "flag"]);
        assert_eq!(args.unwrap().node_name, "flag");
    }

    #[test]
    fn an_env_value_error_names_the_variable() {
        let rendered =
            "error: invalid value 'foo' for '--mode <MODE>'\n  [possible values: a, b]\n";
        assert_eq!(
            name_the_variable(rendered, "--mode <MODE>", "FAKE_DRA_MODE"),
            "error: invalid value 'foo' for '--mode <MODE>' (from the environment variable FAKE_DRA_MODE)\n  [possible values: a, b]\n"
        );
        assert_eq!(
            name_the_variable(
                "error: invalid value 'x' for '--workers <WORKERS>': invalid digit found in string\n",
                "--workers <WORKERS>",
                "FAKE_DRA_WORKERS"
            ),
            "error: invalid value 'x' for '--workers <WORKERS>' (from the environment variable FAKE_DRA_WORKERS): invalid digit found in string\n"
        );
        assert_eq!(
            env_of(&Args::command(), "node-name").as_deref(),
            Some("FAKE_DRA_NODE_NAME")
        );
        assert_eq!(env_of(&Args::command(), "nope"), None);
    }

    #[test]
    fn every_binary_has_the_version_with_the_commit_and_the_completion_command() {
        let mut command = with_shared(Args::command());
        assert!(
            command.render_version().contains("(commit "),
            "{}",
            command.render_version()
        );
        let matches = command
            .try_get_matches_from_mut(["bin", "completion", "bash"])
            .unwrap();
        assert_eq!(matches.subcommand_name(), Some(COMPLETION));
        assert!(
            command
                .try_get_matches_from_mut(["bin", "completion", "tcsh"])
                .is_err()
        );
    }

    #[test]
    fn a_refusal_quoting_a_long_value_keeps_the_flag_and_is_bounded() {
        let long = "x".repeat(70_000);
        let error = Args::command()
            .try_get_matches_from(["test", "--node-name", "n", "--leader-elect", &long])
            .unwrap_err();
        let shown = bounded(&error.render().to_string());
        assert!(shown.len() < 3 * MAX_LINE_CHARS, "{} bytes", shown.len());
        assert!(shown.contains("characters left out"), "{shown}");
        assert!(shown.starts_with("error: "), "{shown}");
    }

    #[test]
    fn nothing_set_is_still_an_error_for_a_required_flag() {
        let (args, seen) = parse_with(&[], &[]);
        assert!(seen.is_empty());
        let err = args.unwrap_err().to_string();
        assert!(err.contains("--node-name"), "{err}");
    }
}
