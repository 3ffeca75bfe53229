//! How `fake-dra-sim` prints container output: `namespace pod container line`, the prefix
//! of `hack/demo.sh` on kind (examples reuse pod names across namespaces, so the pod alone
//! is ambiguous), coloured per pod on a terminal as `stern` does.

use std::time::Duration;

/// After the pods settle, `run --wait` goes on printing until their output has been quiet
/// this long: a Ready pod's container starts before its first line, so the first lines
/// would otherwise be lost with the exit.
pub const QUIET: Duration = Duration::from_millis(750);
/// ... but not longer than this, for containers that never stop printing.
pub const DRAIN_AT_MOST: Duration = Duration::from_secs(10);

/// The foreground colours a prefix takes (ANSI 31-36: no black or white, which vanish
/// on one background or the other).
const COLOURS: [u8; 6] = [31, 32, 33, 34, 35, 36];

/// Whether to colour: on a terminal, unless `NO_COLOR` is set to anything not empty
/// (no-color.org).
pub fn colour_wanted(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// One output line: the prefix, coloured by pod when asked, then the line as printed.
pub fn format_line(
    namespace: &str,
    pod: &str,
    container: &str,
    line: &str,
    colour: bool,
) -> String {
    if !colour {
        return format!("{namespace} {pod} {container} {line}");
    }
    // FNV-1a: a pod keeps its colour across runs (std's hasher is seeded per process).
    let hash = format!("{namespace}/{pod}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let colour = COLOURS[(hash % COLOURS.len() as u64) as usize];
    format!("\x1b[{colour}m{namespace} {pod} {container}\x1b[0m {line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_output_names_the_namespace_first() {
        assert_eq!(
            format_line("test5", "pod0", "ctr0", "export A='1'", false),
            "test5 pod0 ctr0 export A='1'"
        );
    }

    #[test]
    fn a_pod_keeps_its_colour_and_the_line_stays_plain() {
        let a = format_line("test5", "pod0", "ctr0", "x", true);
        assert_eq!(
            a,
            format_line("test5", "pod0", "ctr1", "x", true).replace("ctr1", "ctr0")
        );
        assert!(a.starts_with("\x1b[3"), "{a:?}");
        assert!(a.ends_with("\x1b[0m x"), "{a:?}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some(std::ffi::OsStr::new(""))));
        assert!(!colour_wanted(true, Some(std::ffi::OsStr::new("1"))));
        assert!(!colour_wanted(false, None));
    }
}
