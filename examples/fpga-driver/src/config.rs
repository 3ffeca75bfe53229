//! The node's cards as its config directory says, watched while the driver runs: a card
//! plugged in or out, one going bad. Stands in for what a real driver learns from udev or
//! its hardware's health events.
//!
//! - `<dir>/cards`: how many cards (`fpga-0` …); absent, the `--cards` flag's number.
//! - `<dir>/unhealthy`: one bad card a line, `fpga-<i> why it is bad`; absent, none.
//!
//! A file that cannot be read or parsed is logged, and the cards stay as they were.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::profile::{Cards, MAX_CARDS, create_device_nodes};

/// How often the directory is read: a change is published within about this plus the
/// library's 100 ms.
pub const POLL: Duration = Duration::from_millis(200);

/// What the files say, or why they cannot be used.
pub fn parse(
    cards: Option<&str>,
    unhealthy: Option<&str>,
    default_count: usize,
) -> Result<Cards, String> {
    let count = match cards.map(str::trim) {
        None => default_count,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= MAX_CARDS)
            .ok_or_else(|| {
                format!("cards: {text:?} is not a number of cards from 0 to {MAX_CARDS}")
            })?,
    };
    let mut bad = BTreeMap::new();
    for (n, line) in unhealthy.unwrap_or_default().lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (card, why) = line.split_once(' ').unwrap_or((line, "marked unhealthy"));
        let index = card
            .strip_prefix("fpga-")
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|&i| i < MAX_CARDS && card == format!("fpga-{i}"))
            .ok_or_else(|| {
                format!(
                    "unhealthy line {}: {card:?} is not a card name (fpga-<i>)",
                    n + 1
                )
            })?;
        bad.insert(index, why.trim().to_owned());
    }
    Ok(Cards {
        count,
        unhealthy: bad,
    })
}

fn read(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Reads the directory now.
pub fn load(dir: &Path, default_count: usize) -> Result<Cards, String> {
    parse(
        read(&dir.join("cards"))?.as_deref(),
        read(&dir.join("unhealthy"))?.as_deref(),
        default_count,
    )
}

/// Watches `dir` until the process ends: each change is sent on `cards`, after the device
/// nodes of new cards are made in `dev_dir`.
pub async fn watch(
    dir: PathBuf,
    default_count: usize,
    dev_dir: PathBuf,
    cards: tokio::sync::watch::Sender<Cards>,
) {
    let mut last_error = None;
    // The device nodes made so far (at start, for the cards then).
    let mut made = cards.borrow().count;
    loop {
        tokio::time::sleep(POLL).await;
        let now = load(&dir, default_count).and_then(|now| {
            if now.count <= made {
                return Ok(now);
            }
            create_device_nodes(&dev_dir, now.count)
                .map(|()| now)
                .map_err(|e| format!("making device nodes in {}: {e}", dev_dir.display()))
        });
        match now {
            Ok(now) => {
                last_error = None;
                made = made.max(now.count);
                cards.send_if_modified(|old| {
                    if *old == now {
                        return false;
                    }
                    tracing::info!(from = old.count, to = now.count, unhealthy = ?now.unhealthy, "the node's cards changed");
                    *old = now;
                    true
                });
            }
            Err(e) if last_error.as_ref() != Some(&e) => {
                tracing::warn!(error = %e, "the config directory cannot be used; the cards stay as they were");
                last_error = Some(e);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_files_say_how_many_cards_and_which_are_bad() {
        assert_eq!(parse(None, None, 2).unwrap().count, 2);
        let cards = parse(
            Some("3\n"),
            Some("# bad ones\nfpga-1 ECC errors\n\nfpga-2\n"),
            2,
        )
        .unwrap();
        assert_eq!(cards.count, 3);
        assert_eq!(
            cards.unhealthy,
            BTreeMap::from([
                (1, "ECC errors".to_owned()),
                (2, "marked unhealthy".to_owned())
            ])
        );
        assert_eq!(
            parse(Some("many"), None, 2).unwrap_err(),
            "cards: \"many\" is not a number of cards from 0 to 64"
        );
        assert_eq!(
            parse(Some("65"), None, 2).unwrap_err(),
            "cards: \"65\" is not a number of cards from 0 to 64"
        );
        assert_eq!(
            parse(None, Some("gpu-0 hot"), 2).unwrap_err(),
            "unhealthy line 1: \"gpu-0\" is not a card name (fpga-<i>)"
        );
        assert!(parse(None, Some("fpga-01 x"), 2).is_err());
    }
}
