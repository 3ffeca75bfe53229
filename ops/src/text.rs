//! Text for error messages that may quote what a user sent.

/// `text` whole when it has at most `max` characters; else its start and its end with
/// `… (N characters left out) …` between them. An error that quotes a 30,000-character
/// field or a 2,500-item list whole buries the sentence around it (the start names the
/// field, the end often says what was expected and where), so both ends stay.
pub fn elide_middle(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!("{head}… ({} characters left out) …{tail}", total - 2 * half)
}

#[cfg(test)]
mod tests {
    use super::elide_middle;

    #[test]
    fn short_text_is_left_whole() {
        assert_eq!(
            elide_middle("spec.count: must be 1", 40),
            "spec.count: must be 1"
        );
    }

    #[test]
    fn long_text_keeps_both_ends_and_says_how_much_went() {
        let text = format!(
            "nodes[0]: invalid type: string \"{}\", expected a sequence",
            "x".repeat(10_000)
        );
        let shown = elide_middle(&text, 100);
        assert!(
            shown.starts_with("nodes[0]: invalid type: string \"xxx"),
            "{shown}"
        );
        assert!(shown.ends_with("\", expected a sequence"), "{shown}");
        assert!(shown.contains("characters left out"), "{shown}");
        assert!(shown.chars().count() < 160, "{shown}");
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        let shown = elide_middle(&"é".repeat(500), 10);
        assert!(shown.starts_with("ééééé…"), "{shown}");
    }
}
