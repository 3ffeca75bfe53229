//! apimachinery's name formats (`k8s.io/apimachinery/pkg/api/validate/content` of 1.37:
//! `IsLabelKey`, `IsLabelValue`; `k8s.io/apimachinery/pkg/util/validation`'s
//! `IsDNS1123Label`, `IsDNS1123Subdomain`), each giving
//! every message upstream gives, in its words, so refusals read as kube-apiserver's do.

use std::sync::LazyLock;

use regex::Regex;

const DNS_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn anchored(fmt: &str) -> Regex {
    Regex::new(&format!("^{fmt}$")).unwrap_or_else(|e| unreachable!("{fmt}: {e}"))
}

static DNS_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS_LABEL_FMT));
static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(&subdomain_fmt()));
static LABEL_KEY: LazyLock<Regex> = LazyLock::new(|| anchored(LABEL_KEY_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(&format!("({LABEL_KEY_FMT})?")));

fn subdomain_fmt() -> String {
    format!("{DNS_LABEL_FMT}(\\.{DNS_LABEL_FMT})*")
}

/// `RegexError`: the message, examples and the expression checked (upstream's double
/// space before each "or" included).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let examples: String = examples
        .iter()
        .map(|e| format!("'{e}', "))
        .collect::<Vec<_>>()
        .join(" or ");
    format!("{msg} (e.g. {examples}regex used for validation is '{fmt}')")
}

/// `MaxLenError` of `content` (label keys and values: bytes); the DNS formats, still
/// `util/validation`'s own, say characters.
fn max_len(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

fn max_chars(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// An RFC 1123 label (device names, request names, namespaces).
pub fn dns_label(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push(max_chars(63));
    }
    if !DNS_LABEL.is_match(value) {
        problems.push(if DNS_SUBDOMAIN.is_match(value) {
            "must not contain dots".to_string()
        } else {
            regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS_LABEL_FMT,
                &["my-name", "123-abc"],
            )
        });
    }
    problems
}

/// An RFC 1123 subdomain (most object names, each part of a pool name).
pub fn dns_subdomain(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 253 {
        problems.push(max_chars(253));
    }
    if !DNS_SUBDOMAIN.is_match(value) {
        problems.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            &subdomain_fmt(),
            &["example.com"],
        ));
    }
    problems
}

/// A label key, or qualified name: `[prefix/]name` (taint keys, condition types).
pub fn label_key(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else {
                problems.extend(
                    dns_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            problems.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return problems;
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        problems.push(format!("name part {}", max_len(63)));
    }
    if !LABEL_KEY.is_match(name) {
        problems.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    problems
}

/// A label value (taint values): empty, or a label key's name part.
pub fn label_value(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push(max_len(63));
    }
    if !LABEL_VALUE.is_match(value) {
        problems.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({LABEL_KEY_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_upstream_s() {
        assert_eq!(dns_label("a.b"), vec!["must not contain dots".to_string()]);
        assert_eq!(
            dns_subdomain("-x"),
            vec!["a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string()]
        );
        assert_eq!(
            label_key(""),
            vec![
                "name part must be non-empty".to_string(),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string(),
            ]
        );
        assert!(label_key("example.com/probe").is_empty());
        assert_eq!(
            label_key("/x"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(label_key("a/b/c").len(), 1);
        assert!(label_value("").is_empty());
        assert_eq!(label_value(&"v".repeat(64)), vec![max_len(63)]);
        assert_eq!(label_value("-v").len(), 1);
    }
}
