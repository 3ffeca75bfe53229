//! The syntax Kubernetes requires of label keys and values (and of everything spelled like
//! them: taint keys, condition types), checked where fake-dra takes them from a user, so a
//! bad one is refused with a reason instead of making the API server refuse a whole write
//! later. The rules are apimachinery's `IsQualifiedName` and `IsValidLabelValue`.
//!
//! Each check returns why the string breaks the rule; the caller names the field.

/// Longest name part of a qualified name, and longest label value.
pub const MAX_NAME_LEN: usize = 63;

/// Longest prefix of a qualified name (a DNS subdomain).
pub const MAX_PREFIX_LEN: usize = 253;

/// Longest string quoted in a reason.
const SHOWN: usize = 64;

/// `s` quoted for an error, its first 64 characters and `...` when longer.
pub fn shown(s: &str) -> String {
    let cut: String = s.chars().take(SHOWN).collect();
    if cut.len() < s.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters: a label value that
/// is not empty, or the name part of a qualified name.
fn name_part_problem(s: &str) -> Option<String> {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let charset = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !charset || !alnum(s.chars().next()) || !alnum(s.chars().last()) {
        return Some(
            "may hold only alphanumerics, '-', '_' and '.', and must start and end with an alphanumeric"
                .into(),
        );
    }
    // ASCII from here: bytes are characters.
    if s.len() > MAX_NAME_LEN {
        return Some(format!("is {} characters, at most {MAX_NAME_LEN}", s.len()));
    }
    None
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`,
/// at most 253 characters in all.
fn subdomain_problem(s: &str) -> Option<String> {
    if s.len() > MAX_PREFIX_LEN {
        return Some(format!(
            "is {} characters, at most {MAX_PREFIX_LEN}",
            s.len()
        ));
    }
    let label_ok = |l: &str| {
        let edge =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        edge(l.chars().next())
            && edge(l.chars().last())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if !s.split('.').all(label_ok) {
        return Some(
            "must be a lowercase DNS subdomain: dot-separated parts of lowercase alphanumerics and '-', each starting and ending with an alphanumeric"
                .into(),
        );
    }
    None
}

/// Checks a qualified name (a label key, a taint key): an optional DNS subdomain prefix
/// of at most 253 characters and `/`, then a name of at most 63 characters of
/// alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric.
pub fn qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    let problem = if name.contains('/') {
        Some("has more than one '/'".to_owned())
    } else if name.is_empty() {
        Some("has an empty name part".to_owned())
    } else if let Some(p) = prefix.and_then(subdomain_problem) {
        Some(format!("prefix {p}"))
    } else {
        name_part_problem(name).map(|p| format!("name part {p}"))
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} is not a qualified name: {p} (optional DNS subdomain prefix of at most {MAX_PREFIX_LEN} characters and '/', then a name of at most {MAX_NAME_LEN})",
            shown(s)
        )),
    }
}

/// Longest DRA driver name: resource.k8s.io validates a driver name as a CSI driver name
/// (`ValidateCSIDriverName`, `DriverNameMaxLength`).
pub const MAX_DRIVER_NAME_LEN: usize = 63;

/// Checks a name that must be a lowercase RFC 1123 DNS subdomain of at most `max`
/// characters: a node name (`ValidateNodeName`, 253), a pool name. The reason says the rule.
pub fn dns_subdomain(s: &str, max: usize) -> Result<(), String> {
    let problem = if s.is_empty() {
        Some("is empty".to_owned())
    } else if s.len() > max {
        Some(format!("is {} characters, at most {max}", s.len()))
    } else {
        subdomain_problem(s)
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} {p} (a DNS subdomain: lowercase alphanumerics, '-' and '.', starting and ending with an alphanumeric, at most {max} characters)",
            shown(s)
        )),
    }
}

/// Checks a DRA driver name as resource.k8s.io does (`ValidateCSIDriverName`): at most 63
/// characters, a DNS subdomain once lowercased (upper case is allowed).
pub fn driver_name(s: &str) -> Result<(), String> {
    dns_subdomain(&s.to_ascii_lowercase(), MAX_DRIVER_NAME_LEN).map_err(|_| {
        let lower = s.to_ascii_lowercase();
        let why = if s.is_empty() {
            "is empty".to_owned()
        } else if s.len() > MAX_DRIVER_NAME_LEN {
            format!("is {} characters, at most {MAX_DRIVER_NAME_LEN}", s.len())
        } else {
            subdomain_problem(&lower).unwrap_or_default()
        };
        format!(
            "{} {why} (a DRA driver name is a DNS subdomain of at most {MAX_DRIVER_NAME_LEN} characters, case ignored: alphanumerics, '-' and '.', starting and ending with an alphanumeric, e.g. gpu.example.com)",
            shown(s)
        )
    })
}

/// Checks a label value (a taint value): empty, or at most 63 characters of alphanumerics,
/// `-`, `_` and `.`, starting and ending with an alphanumeric.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    match name_part_problem(s) {
        None => Ok(()),
        Some(p) => Err(format!("{} is not a label value: it {p}", shown(s))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_as_apimachinery_defines_them() {
        for good in [
            "a",
            "rack",
            "fake.resource.3-shake.com/unhealthy",
            "kubernetes.io/hostname",
            "A_b.C-9",
            &"x".repeat(63),
            &format!("{}/n", "a".repeat(253)),
        ] {
            assert_eq!(qualified_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty name part"),
            ("!!bad key!!", "name part may hold only"),
            ("a/b/c", "more than one '/'"),
            ("Upper.Case/x", "prefix must be a lowercase DNS subdomain"),
            ("/x", "prefix must be a lowercase DNS subdomain"),
            ("x/", "empty name part"),
            ("-x", "start and end with an alphanumeric"),
            ("x.", "start and end with an alphanumeric"),
            (&"x".repeat(64), "name part is 64 characters, at most 63"),
            (
                &format!("{}/n", "a".repeat(254)),
                "prefix is 254 characters, at most 253",
            ),
        ] {
            let err = qualified_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains("is not a qualified name"), "{err}");
        }
        // The string shown is cut and escaped.
        let err = qualified_name(&format!("\n{}", "y".repeat(1000))).unwrap_err();
        assert!(err.starts_with("\"\\nyyy"), "{err}");
        assert!(err.len() < 400, "{err}");
    }

    #[test]
    fn node_and_driver_names_as_upstream_validates_them() {
        for good in ["kind-worker", "a.b", &"n".repeat(253)] {
            assert_eq!(dns_subdomain(good, 253), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "\"\" is empty"),
            ("UPPER", "must be a lowercase DNS subdomain"),
            ("../../etc", "must be a lowercase DNS subdomain"),
            (&"n".repeat(300), "is 300 characters, at most 253"),
        ] {
            let err = dns_subdomain(bad, 253).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains("(a DNS subdomain: "), "{err}");
        }
        for good in [
            "fake.resource.3-shake.com",
            "Gpu.Example.COM",
            &"d".repeat(63),
        ] {
            assert_eq!(driver_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            (
                "Bad_Driver",
                "\"Bad_Driver\" must be a lowercase DNS subdomain",
            ),
            (&"d".repeat(64), "is 64 characters, at most 63"),
            ("", "is empty"),
            ("-x.com", "must be a lowercase DNS subdomain"),
        ] {
            let err = driver_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(
                err.contains("a DRA driver name is a DNS subdomain of at most 63"),
                "{err}"
            );
        }
    }

    #[test]
    fn label_values_may_be_empty_but_not_anything() {
        for good in ["", "7", "a.b-c_d", &"v".repeat(63)] {
            assert_eq!(label_value(good), Ok(()), "{good}");
        }
        for bad in ["a b", "-a", "a/b", &"v".repeat(64), "é"] {
            let err = label_value(bad).unwrap_err();
            assert!(err.contains("is not a label value"), "{err}");
        }
    }
}
