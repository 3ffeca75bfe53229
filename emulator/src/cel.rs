//! The DRA CEL environment (`staging/src/k8s.io/dynamic-resource-allocation/cel`): what
//! the apiserver's validation compiles and the structured allocator evaluates. Below both
//! `apiserver` and `cluster`, so neither reaches into the other for it.
//!
//! The `cel` crate parses and evaluates by recursion, and in a debug build a dozen nested
//! parentheses overflowed a runtime thread's 2 MiB stack (killing the whole sim). So an
//! expression is held to upstream's limits before it is parsed — length, nesting — and
//! parsing, cost estimation and evaluation run on a stack sized for the deepest expression
//! those limits let through ([`with_stack`]).

mod cost;
pub mod k8s;

use std::collections::HashMap;
use std::sync::LazyLock;

use k8s_openapi::api::resource::v1::Device;

pub use cost::{MAX_COST, estimate};

/// `CELSelectorExpressionMaxLength` (k8s.io/kubernetes `pkg/apis/resource/types.go`):
/// validation refuses a longer selector before compiling it (`field.TooLong`).
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;

/// How deep an expression may nest. cel-go's parser refuses past its `maxRecursionDepth`,
/// 250 by default, which Kubernetes keeps ("expression recursion limit exceeded: 250");
/// the `cel` crate's parser stops at 96 (its default, which `Program::compile` offers no
/// way to raise), so the emulator refuses past 96 with cel-go's wording. No selector of a
/// real class or claim nests a tenth of that. [`nesting`] never counts less than the parser
/// and may count a little more (the operators of a chain as if each nested).
pub const MAX_NESTING: usize = 96;

/// The stack CEL work runs on: enough for an expression of [`MAX_NESTING`] in a debug build
/// (up to about 100 KB per level there, where 12 levels overflowed a 2 MiB runtime thread),
/// with room to spare; reserved address space, of which only what is used becomes memory.
const CEL_STACK_BYTES: usize = 256 * 1024 * 1024;

/// Below this much stack left, [`with_stack`] switches to a fresh [`CEL_STACK_BYTES`] one.
const CEL_RED_ZONE_BYTES: usize = 64 * 1024 * 1024;

/// Runs `f` where the stack has room for CEL of any accepted nesting: in place when it
/// already has (inside another `with_stack`), else on a fresh stack. Callers that evaluate
/// many selectors wrap the whole batch, so the stack is set up once.
pub fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(CEL_RED_ZONE_BYTES, CEL_STACK_BYTES, f)
}

/// How many characters of the `cel` crate's message an error keeps: it quotes operand
/// values whole ("Unsupported binary operator 'add': List([UInt(…), …])" of a 2,500-item
/// list was 50 KB, found by fuzzing), and the message ends up in Events and claim status.
const MESSAGE_CHARS: usize = 1024;

fn bounded(message: &str) -> String {
    fake_dra_ops::text::elide_middle(message, MESSAGE_CHARS)
}

/// Why a selector was refused before or while compiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("may not be more than {MAX_EXPRESSION_BYTES} bytes")]
    TooLong,
    #[error("expression recursion limit exceeded: {MAX_NESTING}")]
    TooDeep,
    #[error("{0}")]
    Syntax(String),
}

/// How deep `expression` nests, counted without parsing (so without recursion): every
/// bracket opens a level, and within a level each operator or member access since the last
/// `,`, `:`, `?`, `&&` or `||` counts one more (a chain `a + b + c` is a left-deep tree),
/// `? :` chains one per `?` (they nest to the right) and `&&`/`||` terms the depth of the
/// balanced tree the parser builds of them. String literals and comments are skipped.
pub fn nesting(expression: &str) -> usize {
    #[derive(Default, Clone, Copy)]
    struct Level {
        run: usize,
        ternaries: usize,
        logic: usize,
    }
    impl Level {
        fn depth(self) -> usize {
            let balanced = (usize::BITS - self.logic.leading_zeros()) as usize;
            1 + self.run + self.ternaries + balanced
        }
    }
    let b = expression.as_bytes();
    let mut levels = vec![Level::default()];
    // The depth of the levels around the innermost, as each was when it opened.
    let mut outer: Vec<usize> = vec![0];
    let mut deepest = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        match c {
            b'"' | b'\'' => {
                let raw = i > 0
                    && matches!(b[i - 1], b'r' | b'R')
                    && (i < 2
                        || !b[i - 2].is_ascii_alphanumeric()
                        || matches!(b[i - 2], b'b' | b'B'));
                i = skip_string(b, i, raw);
                continue;
            }
            b'/' if next == Some(b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => {
                let around =
                    outer.last().copied().unwrap_or(0) + levels.last().map_or(1, |l| l.depth());
                outer.push(around);
                levels.push(Level::default());
            }
            b')' | b']' | b'}' => {
                if levels.len() > 1 {
                    levels.pop();
                    outer.pop();
                }
            }
            _ => {
                if let Some(level) = levels.last_mut() {
                    match c {
                        b',' | b':' => level.run = 0,
                        b'?' => {
                            level.ternaries += 1;
                            level.run = 0;
                        }
                        b'&' | b'|' if next == Some(c) => {
                            level.logic += 1;
                            level.run = 0;
                            i += 1;
                        }
                        b'=' | b'!' | b'<' | b'>' if next == Some(b'=') => {
                            level.run += 1;
                            i += 1;
                        }
                        b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'<' | b'>' | b'.' => {
                            level.run += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
        let here = outer.last().copied().unwrap_or(0) + levels.last().map_or(1, |l| l.depth());
        deepest = deepest.max(here);
        i += 1;
    }
    deepest
}

/// The index after the string literal opening at `start` (`'…'`, `"…"`, or tripled).
fn skip_string(b: &[u8], start: usize, raw: bool) -> usize {
    let quote = b[start];
    let triple = b.get(start + 1) == Some(&quote) && b.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    while i < b.len() {
        if b[i] == b'\\' && !raw {
            i += 2;
            continue;
        }
        if b[i] == quote {
            if !triple {
                return i + 1;
            }
            if b.get(i + 1) == Some(&quote) && b.get(i + 2) == Some(&quote) {
                return i + 3;
            }
        }
        if b[i] == b'\n' && !triple {
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// Compiles a selector expression (the `cel` crate is a real CEL implementation), after
/// the length and nesting limits, on a stack deep enough for it.
pub fn compile(expression: &str) -> Result<cel::Program, CompileError> {
    if expression.len() > MAX_EXPRESSION_BYTES {
        return Err(CompileError::TooLong);
    }
    if nesting(expression) > MAX_NESTING {
        return Err(CompileError::TooDeep);
    }
    with_stack(|| {
        cel::Program::compile(expression).map_err(|e| CompileError::Syntax(bounded(&e.to_string())))
    })
}

/// `device.attributes["<domain>"]` / `device.capacity["<domain>"]` with a literal domain.
static DOMAIN_LOOKUP: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r#"(?:attributes|capacity)\s*\[\s*"([^"]+)"\s*\]"#).ok());

/// The `device` variable of the DRA CEL environment
/// (`staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`): `driver`,
/// `allowMultipleAllocations`, and `attributes` and `capacity` as maps from domain to maps
/// from name. A name without a domain belongs to the driver's domain; a domain the device
/// has nothing in is an empty map (upstream resolves unknown domains lazily to empty maps, so
/// `device.attributes["other.example.com"].x` is a "no such key" error, not a type error).
///
/// `version` attributes are `semver` values and capacities `quantity` values, as upstream
/// has them ([`k8s`]: their comparisons, not the rest of those libraries).
pub fn device_variable(driver: &str, device: &Device, expression: &str) -> cel::Value {
    let mut attributes: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    let mut capacity: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    attributes.entry(driver.into()).or_default();
    capacity.entry(driver.into()).or_default();
    if let Some(re) = DOMAIN_LOOKUP.as_ref() {
        for domain in re.captures_iter(expression).filter_map(|c| c.get(1)) {
            attributes.entry(domain.as_str().into()).or_default();
            capacity.entry(domain.as_str().into()).or_default();
        }
    }
    let split = |name: &str| match name.split_once('/') {
        Some((domain, id)) => (domain.to_string(), id.to_string()),
        None => (driver.to_string(), name.to_string()),
    };
    for (name, attribute) in device.attributes.iter().flatten() {
        let value = if let Some(b) = attribute.bool {
            cel::Value::Bool(b)
        } else if let Some(i) = attribute.int {
            cel::Value::Int(i)
        } else if let Some(s) = &attribute.string {
            cel::Value::from(s.clone())
        } else if let Some(v) = &attribute.version {
            k8s::version_value(v)
        } else {
            continue;
        };
        let (domain, id) = split(name);
        attributes.entry(domain).or_default().insert(id, value);
    }
    for (name, cap) in device.capacity.iter().flatten() {
        let (domain, id) = split(name);
        capacity
            .entry(domain)
            .or_default()
            .insert(id, k8s::quantity_value(&cap.value.0));
    }
    let mut variable: HashMap<String, cel::Value> = HashMap::new();
    variable.insert("driver".into(), cel::Value::from(driver));
    // Declared from 1.34 (DRAConsumableCapacity), false when unset.
    variable.insert(
        "allowMultipleAllocations".into(),
        cel::Value::Bool(device.allow_multiple_allocations == Some(true)),
    );
    variable.insert("attributes".into(), attributes.into());
    variable.insert("capacity".into(), capacity.into());
    variable.into()
}

/// Evaluates a compiled selector for one device; a non-bool result is an error, as
/// upstream's type check makes it.
pub fn evaluate(
    program: &cel::Program,
    expression: &str,
    driver: &str,
    device: &Device,
) -> Result<bool, String> {
    with_stack(|| {
        let mut context = cel::Context::default();
        k8s::add_functions(&mut context);
        context.add_variable_from_value("device", device_variable(driver, device, expression));
        match program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(bounded(&format!("must evaluate to bool, got {other:?}"))),
            Err(e) => Err(bounded(&e.to_string())),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Runs `f` on a thread with a tokio worker's 2 MiB stack, where the sim crashed.
    fn on_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    fn device() -> Device {
        serde_json::from_value(
            serde_json::json!({"name": "d0", "attributes": {"model": {"string": "A"}}}),
        )
        .unwrap()
    }

    /// Found by fuzzing (`fuzz::cel_selectors`): the `cel` crate's error quoted a 2,500-item
    /// list whole (50 KB into an Event); the message keeps its start and end.
    #[test]
    fn an_error_about_a_large_value_is_bounded() {
        let list: Vec<String> = (0..400).map(|_| "18446744073709551615u".into()).collect();
        let expression = format!("[{}] + 1u == []", list.join(","));
        let err = on_small_stack(move || {
            let program = compile(&expression).map_err(|e| e.to_string())?;
            evaluate(&program, &expression, "d.example.com", &device())
        })
        .unwrap_err();
        assert!(
            err.chars().count() <= MESSAGE_CHARS + 64,
            "{} characters",
            err.len()
        );
        assert!(err.contains("characters left out"), "{err}");
        assert!(err.starts_with("Unsupported binary operator"), "{err}");
    }

    /// Compiles, estimates and evaluates `expression` as validation and the scheduler do.
    fn run(expression: String) -> Result<(bool, u64), String> {
        on_small_stack(move || {
            let program = compile(&expression).map_err(|e| e.to_string())?;
            let cost = with_stack(|| estimate(&program));
            let ok = evaluate(&program, &expression, "d.example.com", &device())?;
            Ok((ok, cost))
        })
    }

    #[test]
    fn nesting_counts_brackets_chains_and_skips_strings_and_comments() {
        assert_eq!(nesting("true"), 1);
        assert_eq!(nesting("((true))"), 3);
        assert_eq!(nesting("a + b + c"), 3);
        assert_eq!(nesting("a || b || c || d"), 3);
        assert_eq!(nesting("'((((' + \"))\" // ((((\n"), 2);
        assert_eq!(nesting("r'\\' == '\\''"), 2);
    }

    /// D2: twelve nested parentheses overflowed a runtime thread's stack and killed the sim;
    /// now up to cel-go's limit compiles and evaluates there, and deeper is refused with
    /// its message before the parser sees it.
    #[test]
    fn deep_expressions_run_on_a_small_stack_or_are_refused() {
        let parens = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(run(parens(12)).map(|r| r.0), Ok(true));
        assert_eq!(run(parens(MAX_NESTING - 1)).map(|r| r.0), Ok(true));
        assert_eq!(
            run(parens(MAX_NESTING)).err().as_deref(),
            Some("expression recursion limit exceeded: 96")
        );
        assert_eq!(
            run(parens(4000)).err().as_deref(),
            Some("expression recursion limit exceeded: 96")
        );
        // The other ways to nest, each as deep as the count lets through.
        let n = MAX_NESTING - 2;
        let chain = format!("1{} >= 0", " + 1".repeat(n - 2));
        let members = format!("has(device{})", ".a".repeat(n - 2));
        let lists = format!("size({}1{}) == 1", "[".repeat(n - 2), "]".repeat(n - 2));
        let calls = format!("{}'x'{} == 'x'", "string(".repeat(n - 2), ")".repeat(n - 2));
        let ternaries = format!("{}true", "true ? true : ".repeat(n - 2));
        let nots = format!("{}true", "!".repeat(n - 1));
        let macros = format!(
            "{}true{}",
            "[1].all(x, ".repeat(n / 2 - 1),
            ")".repeat(n / 2 - 1)
        );
        for expression in [chain, members, lists, calls, ternaries, nots, macros] {
            assert!(nesting(&expression) <= MAX_NESTING, "{expression}");
            let shown = expression.chars().take(40).collect::<String>();
            // Evaluation errors (no such key) are fine; crashing is not.
            let _ = run(expression);
            let _ = shown;
        }
    }

    /// D3: a selector that walks 1,000 × 1,000 elements is estimated over the limit; the
    /// selectors of real classes and claims are far below it.
    #[test]
    fn cost_estimate_refuses_quadratic_walks() {
        let list = format!(
            "[{}]",
            (0..1000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let costly = format!("{list}.all(x, {list}.all(y, x + y >= 0))");
        let program = on_small_stack(move || compile(&costly).map(|p| with_stack(|| estimate(&p))));
        assert!(program.unwrap() > MAX_COST);
        let (ok, cost) = run(r#"device.driver == "d.example.com" && device.attributes["d.example.com"].model == "A""#.into())
            .unwrap();
        assert!(ok);
        assert!(cost < 2_000, "{cost}");
    }

    /// D4: a selector longer than `CELSelectorExpressionMaxLength` is not parsed.
    #[test]
    fn long_expressions_are_refused_unparsed() {
        let long = format!("true{}", " && true".repeat(2000));
        assert!(long.len() > MAX_EXPRESSION_BYTES);
        assert_eq!(compile(&long).err(), Some(CompileError::TooLong));
    }
}
