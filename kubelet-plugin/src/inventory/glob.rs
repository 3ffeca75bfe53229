//! Node name patterns of inventory entries: `*` and `?` only, over the characters node
//! names have, so a pattern never means more than it looks like.

use super::MAX_PATTERN_LEN;

/// A node name pattern: the characters of node names (lowercase letters, digits, `-`,
/// `.`) and the wildcards `*` and `?`.
pub(super) fn check_glob(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("is empty".into());
    }
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!(
            "is {} characters; at most {MAX_PATTERN_LEN}",
            p.len()
        ));
    }
    if let Some(c) = p.chars().find(|c| {
        !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '*' | '?'))
    }) {
        return Err(format!(
            "has {c:?}; patterns are node name characters (lowercase letters, digits, '-', '.') and the wildcards '*' and '?'"
        ));
    }
    Ok(())
}

/// Whether `name` matches `pattern` (`*` any run, `?` one character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // The last `*` seen and the name position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}
