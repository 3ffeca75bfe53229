//! A guard to run before parsing YAML from a user or a client: refuses a document nested
//! deeper than [`MAX_DEPTH`] mappings and sequences, in time linear in its length.
//!
//! Why: libyaml (under `serde_yaml_ng`) scans a document before serde sees any of it, and
//! its scanning time grows about with the square of the nesting depth — 100,000 nested
//! flow mappings in 200 KB took minutes. serde's recursion limit (128) refuses such a
//! document only after that scan. No inventory, manifest or CDI spec comes near 64 levels.
//!
//! The scanner follows libyaml's tokenizer closely enough to count what libyaml will nest:
//! quoted scalars (escapes, several lines), comments, plain scalars (a `[` or a quote inside
//! one is text), block scalars (their lines are text), flow collections, and block
//! collections by their columns (`- - -` on one line, a sequence at its key's column).
//! Where it cannot tell, it counts rather than skips: a malformed document may be counted
//! deeper than it is, never shallower.

/// The deepest nesting accepted: mappings and sequences, block or flow, one inside another.
pub const MAX_DEPTH: usize = 64;

/// A document nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "YAML nested deeper than {limit} levels at line {line}: at most {limit} mappings and sequences may nest"
)]
pub struct DepthError {
    /// The limit, [`MAX_DEPTH`].
    pub limit: usize,
    /// The line (from 1) where the nesting went past it.
    pub line: usize,
}

/// Checks that `text` (UTF-8, or UTF-16 with a byte order mark, as libyaml reads it) nests
/// no deeper than [`MAX_DEPTH`]; run it before handing `text` to a YAML parser.
pub fn check_depth(text: &[u8]) -> Result<(), DepthError> {
    check_depth_with(text, MAX_DEPTH)
}

fn check_depth_with(text: &[u8], limit: usize) -> Result<(), DepthError> {
    let decoded: String;
    let text = match text {
        [0xFF, 0xFE, rest @ ..] => {
            decoded = utf16(rest, u16::from_le_bytes);
            decoded.as_bytes()
        }
        [0xFE, 0xFF, rest @ ..] => {
            decoded = utf16(rest, u16::from_be_bytes);
            decoded.as_bytes()
        }
        _ => text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text),
    };
    let mut scan = Scanner {
        limit,
        ..Scanner::default()
    };
    for (index, line) in Lines(text).enumerate() {
        scan.line = index + 1;
        scan.line_of(line)?;
    }
    Ok(())
}

fn utf16(bytes: &[u8], word: fn([u8; 2]) -> u16) -> String {
    let words = bytes.chunks_exact(2).map(|c| word([c[0], c[1]]));
    char::decode_utf16(words)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// The lines of a text, split at every line break libyaml knows: `\n`, `\r\n`, `\r`, and
/// NEL, LS, PS.
struct Lines<'a>(&'a [u8]);

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.is_empty() {
            return None;
        }
        let text = self.0;
        let mut i = 0;
        while i < text.len() {
            let len = match &text[i..] {
                [b'\r', b'\n', ..] => 2,
                [b'\n' | b'\r', ..] => 1,
                [0xC2, 0x85, ..] => 2,
                [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
                _ => 0,
            };
            if len > 0 {
                self.0 = &text[i + len..];
                return Some(&text[..i]);
            }
            i += 1;
        }
        self.0 = &[];
        Some(text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Map,
    Seq,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Single,
    Double,
}

/// A block scalar (`|`, `>`) whose lines are being skipped.
#[derive(Debug, Clone, Copy)]
struct BlockScalar {
    /// The least indentation of its first line.
    min: usize,
    /// Its indentation, once known.
    indent: Option<usize>,
}

/// An open flow collection.
#[derive(Debug, Clone, Copy)]
struct Flow {
    seq: bool,
    /// A sequence's entry that is a `key: value` pair: a mapping of its own, one level more.
    pair: bool,
    /// The deepest level reached inside the current entry, counted as if it were no pair:
    /// when a `:` makes it one, everything in it turns out one level deeper.
    max: usize,
}

/// Where a block-context line is being read: at a node, or after one (a comment, or the
/// `:` after a quoted or flow key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Node,
    Tail,
}

#[derive(Debug, Default)]
struct Scanner {
    limit: usize,
    line: usize,
    /// The open block collections, by column: increasing, but for a sequence that is the
    /// value of a key at its own column (`key:` then `- item` below it).
    block: Vec<(usize, Kind)>,
    /// Open flow collections, outermost first.
    flow: Vec<Flow>,
    /// An outermost flow collection just closed: the deepest level in it and its column,
    /// in case a `:` makes it a key (then it sits in a mapping of its own).
    flow_key: Option<(usize, usize)>,
    /// The column the outermost open flow collection began at.
    flow_column: usize,
    /// Inside a plain scalar in flow context (a quote in it is text).
    flow_plain: bool,
    /// Inside a quoted scalar that goes on past the line.
    quote: Option<Quote>,
    block_scalar: Option<BlockScalar>,
    /// A plain scalar in block context that goes on in lines indented at least this much.
    plain_min: Option<usize>,
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Whether `l[i]` is a blank or past the end of the line.
fn blankz(l: &[u8], i: usize) -> bool {
    l.get(i).is_none_or(|&b| is_blank(b))
}

fn skip_blank(l: &[u8], mut i: usize) -> usize {
    while l.get(i).is_some_and(|&b| is_blank(b)) {
        i += 1;
    }
    i
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

/// The position after the closing quote, if the scalar closes on this line.
fn close_quote(l: &[u8], mut i: usize, quote: Quote) -> Option<usize> {
    while i < l.len() {
        match (quote, l[i]) {
            (Quote::Single, b'\'') if l.get(i + 1) == Some(&b'\'') => i += 2,
            (Quote::Single, b'\'') | (Quote::Double, b'"') => return Some(i + 1),
            (Quote::Double, b'\\') => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// How a plain scalar in block context ends on its line.
enum PlainEnd {
    /// At `: `: it is a key; the position of the `:`.
    Key(usize),
    /// At a comment.
    Comment,
    /// At the end of the line: it may go on in the next.
    Eol,
}

fn plain_end(l: &[u8], from: usize) -> PlainEnd {
    let mut i = from;
    while i < l.len() {
        match l[i] {
            b':' if blankz(l, i + 1) => return PlainEnd::Key(i),
            b if is_blank(b) && l.get(i + 1) == Some(&b'#') => return PlainEnd::Comment,
            _ => i += 1,
        }
    }
    PlainEnd::Eol
}

fn is_document_marker(l: &[u8]) -> bool {
    (l.starts_with(b"---") || l.starts_with(b"...")) && blankz(l, 3)
}

impl Scanner {
    fn too_deep(&self) -> DepthError {
        DepthError {
            limit: self.limit,
            line: self.line,
        }
    }

    /// The depth now: block collections, flow collections, and pairs in flow sequences.
    fn depth(&self) -> usize {
        self.block.len()
            + self
                .flow
                .iter()
                .map(|f| 1 + usize::from(f.pair))
                .sum::<usize>()
    }

    fn check(&self) -> Result<(), DepthError> {
        if self.depth() > self.limit {
            return Err(self.too_deep());
        }
        Ok(())
    }

    fn open_flow(&mut self, seq: bool) -> Result<(), DepthError> {
        let depth = self.depth() + 1;
        self.flow.push(Flow {
            seq,
            pair: false,
            max: depth,
        });
        self.flow_plain = false;
        self.check()
    }

    /// Closes the innermost flow collection; the column after it if that was the
    /// outermost.
    fn close_flow(&mut self) -> bool {
        let Some(closed) = self.flow.pop() else {
            return false;
        };
        match self.flow.last_mut() {
            Some(parent) => {
                parent.max = parent.max.max(closed.max);
                false
            }
            None => {
                self.flow_key = Some((closed.max, self.flow_column));
                true
            }
        }
    }

    /// A `:` or `?` in flow context: in a sequence, its entry is a pair.
    fn flow_pair(&mut self) -> Result<(), DepthError> {
        if let Some(top) = self.flow.last_mut()
            && top.seq
            && !top.pair
        {
            top.pair = true;
            top.max += 1;
            if top.max > self.limit {
                return Err(self.too_deep());
            }
        }
        Ok(())
    }

    /// A `,` in flow context: a new entry.
    fn flow_entry(&mut self) {
        let depth = self.depth();
        if let Some(top) = self.flow.last_mut() {
            if top.pair {
                top.pair = false;
                top.max = depth - 1;
            } else {
                top.max = depth;
            }
        }
    }

    /// The column of the innermost block collection, if any.
    fn block_column(&self) -> Option<usize> {
        self.block.last().map(|&(column, _)| column)
    }

    /// A block collection of `kind` at `column` (the stack holds no column beyond it).
    fn open(&mut self, column: usize, kind: Kind) -> Result<(), DepthError> {
        match self.block.last().copied() {
            Some((c, k)) if c == column && k == kind => {}
            // A sequence as the value of the key at its column.
            Some((c, Kind::Map)) if c == column => self.block.push((column, Kind::Seq)),
            // A key after such a sequence: back in the mapping.
            Some((c, Kind::Seq)) if c == column => {
                self.block.pop();
                if self.block.last() != Some(&(column, Kind::Map)) {
                    self.block.push((column, Kind::Map));
                }
            }
            _ => self.block.push((column, kind)),
        }
        self.check()
    }

    fn line_of(&mut self, l: &[u8]) -> Result<(), DepthError> {
        self.flow_key = None;
        let indent = l.iter().take_while(|&&b| b == b' ').count();
        let blank = l[indent..].iter().all(|&b| is_blank(b));
        let marker = is_document_marker(l);
        if let Some(quote) = self.quote {
            let Some(end) = close_quote(l, 0, quote) else {
                return Ok(());
            };
            self.quote = None;
            return self.block_from(l, end, At::Tail);
        }
        if let Some(scalar) = self.block_scalar.as_mut() {
            if blank {
                return Ok(());
            }
            if !marker && indent >= scalar.indent.unwrap_or(scalar.min) {
                scalar.indent.get_or_insert(indent);
                return Ok(());
            }
            self.block_scalar = None;
        }
        if !self.flow.is_empty() {
            return self.block_from(l, 0, At::Tail);
        }
        if let Some(min) = self.plain_min {
            if blank {
                return Ok(());
            }
            if !marker && indent >= min && l.get(indent) != Some(&b'#') {
                // The plain scalar goes on; a `: ` in it is read as a value (libyaml refuses
                // it), so that nothing after it goes uncounted.
                return match plain_end(l, indent) {
                    PlainEnd::Key(colon) => {
                        self.plain_min = None;
                        self.block_from(l, colon + 1, At::Node)
                    }
                    PlainEnd::Comment => {
                        self.plain_min = None;
                        Ok(())
                    }
                    PlainEnd::Eol => Ok(()),
                };
            }
            self.plain_min = None;
        }
        if blank || l.get(indent) == Some(&b'#') {
            return Ok(());
        }
        if marker {
            self.block.clear();
            self.flow.clear();
            self.flow_plain = false;
            return if l.starts_with(b"---") {
                self.block_from(l, 3, At::Node)
            } else {
                Ok(())
            };
        }
        if indent == 0 && l[0] == b'%' && self.block.is_empty() {
            return Ok(());
        }
        while self.block_column().is_some_and(|c| c > indent) {
            self.block.pop();
        }
        self.block_from(l, indent, At::Node)
    }

    /// Reads a line from `c` on (flow collections included).
    fn block_from(&mut self, l: &[u8], mut c: usize, mut at: At) -> Result<(), DepthError> {
        // Where the node being read began (before its anchor or tag).
        let mut start: Option<usize> = None;
        loop {
            if !self.flow.is_empty() {
                match self.flow_from(l, c)? {
                    Some(end) => {
                        c = end;
                        at = At::Tail;
                        start = None;
                    }
                    None => return Ok(()),
                }
            }
            c = skip_blank(l, c);
            let Some(&b) = l.get(c) else {
                return Ok(());
            };
            if at == At::Tail {
                let flow_key = self.flow_key.take();
                match b {
                    b'#' => return Ok(()),
                    b':' if blankz(l, c + 1) => {
                        // A flow collection that is a key: in a mapping, one level more
                        // (unless the mapping is there already).
                        if let Some((max, column)) = flow_key {
                            let before = self.block.len();
                            self.open(column, Kind::Map)?;
                            if (max + self.block.len()).saturating_sub(before) > self.limit {
                                return Err(self.too_deep());
                            }
                        }
                        c += 1;
                        at = At::Node;
                        continue;
                    }
                    // Not valid YAML; read on as a node, so that nothing is skipped.
                    _ => at = At::Node,
                }
            }
            let column = start.unwrap_or(c);
            match b {
                b'#' => return Ok(()),
                b'-' | b'?' | b':' if blankz(l, c + 1) => {
                    self.open(column, if b == b'-' { Kind::Seq } else { Kind::Map })?;
                    c += 1;
                    start = None;
                }
                b'&' | b'!' => {
                    start.get_or_insert(c);
                    c += 1;
                    while l
                        .get(c)
                        .is_some_and(|&b| !is_blank(b) && !is_flow_indicator(b))
                    {
                        c += 1;
                    }
                }
                b'|' | b'>' => {
                    let parent = self.block_column();
                    let explicit = l[c + 1..]
                        .iter()
                        .take_while(|&&b| !is_blank(b))
                        .find(|b| b.is_ascii_digit())
                        .map(|&d| usize::from(d - b'0'));
                    self.block_scalar = Some(BlockScalar {
                        min: parent.map_or(1, |p| p + 1),
                        indent: explicit.map(|n| parent.map_or(n, |p| p + n)),
                    });
                    return Ok(());
                }
                b'[' | b'{' => {
                    self.flow_column = column;
                    self.open_flow(b == b'[')?;
                    c += 1;
                }
                b'"' | b'\'' => {
                    let quote = if b == b'"' {
                        Quote::Double
                    } else {
                        Quote::Single
                    };
                    let Some(end) = close_quote(l, c + 1, quote) else {
                        self.quote = Some(quote);
                        return Ok(());
                    };
                    let after = skip_blank(l, end);
                    if l.get(after) == Some(&b':') && blankz(l, after + 1) {
                        self.open(column, Kind::Map)?;
                        c = after + 1;
                        start = None;
                    } else {
                        c = end;
                        at = At::Tail;
                        start = None;
                    }
                }
                _ => match plain_end(l, c) {
                    PlainEnd::Key(colon) => {
                        self.open(column, Kind::Map)?;
                        c = colon + 1;
                        start = None;
                    }
                    PlainEnd::Comment => return Ok(()),
                    PlainEnd::Eol => {
                        self.plain_min = Some(self.block_column().map_or(0, |p| p + 1));
                        return Ok(());
                    }
                },
            }
        }
    }

    /// Reads flow context from `i` on: the position after the bracket that closes the
    /// outermost flow collection, or `None` when the line ends inside one.
    fn flow_from(&mut self, l: &[u8], mut i: usize) -> Result<Option<usize>, DepthError> {
        let mut blank_before = i == 0 || l.get(i - 1).is_some_and(|&b| is_blank(b));
        while i < l.len() {
            let b = l[i];
            if self.flow_plain {
                match b {
                    b if is_blank(b) => {
                        blank_before = true;
                        i += 1;
                        continue;
                    }
                    b'#' if blank_before => {
                        self.flow_plain = false;
                        return Ok(None);
                    }
                    b if is_flow_indicator(b) => self.flow_plain = false,
                    b':' if blankz(l, i + 1)
                        || l.get(i + 1)
                            .is_some_and(|&n| is_flow_indicator(n) || n == b'?') =>
                    {
                        self.flow_plain = false;
                        self.flow_pair()?;
                        blank_before = false;
                        i += 1;
                        continue;
                    }
                    _ => {
                        blank_before = false;
                        i += 1;
                        continue;
                    }
                }
            }
            // At a token boundary.
            match b {
                b if is_blank(b) => {
                    blank_before = true;
                    i += 1;
                    continue;
                }
                // libyaml takes a `#` at a token's start for a comment.
                b'#' => return Ok(None),
                b'[' | b'{' => self.open_flow(b == b'[')?,
                b']' | b'}' => {
                    if self.close_flow() {
                        return Ok(Some(i + 1));
                    }
                }
                b',' => self.flow_entry(),
                // libyaml takes a `:` at a token's start in flow context for a value.
                b':' => self.flow_pair()?,
                b'?' if blankz(l, i + 1) => self.flow_pair()?,
                b'-' if blankz(l, i + 1) => {}
                b'"' | b'\'' => {
                    let quote = if b == b'"' {
                        Quote::Double
                    } else {
                        Quote::Single
                    };
                    match close_quote(l, i + 1, quote) {
                        Some(end) => {
                            i = end;
                            blank_before = false;
                            continue;
                        }
                        None => {
                            self.quote = Some(quote);
                            return Ok(None);
                        }
                    }
                }
                _ => self.flow_plain = true,
            }
            blank_before = false;
            i += 1;
        }
        Ok(None)
    }
}

mod unique;

pub use unique::{DocumentError, DuplicateKey, UniqueKeys, check_unique_keys, documents};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
