//! The Kubernetes CEL libraries DRA selectors use beyond standard CEL: `semver` (version
//! attributes; k8s.io/apiserver/pkg/cel/library/semver.go) and `quantity` (capacities;
//! library/quantity.go), each a type with the functions a selector compares with:
//! `semver(s)`, `isSemver(s)`, `quantity(s)`, `isQuantity(s)`, `<a>.compareTo(<b>)`,
//! `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`, `asInteger`. The rest of
//! those libraries (quantity arithmetic, `sign`, `isInteger`, ...) is not here: a selector
//! using it fails to evaluate ("Undeclared reference"), which the scheduler reports.

use std::any::Any;
use std::cmp::Ordering;
use std::sync::Arc;

use cel::extractors::This;
use cel::objects::{Opaque, Value};
use cel::{ExecutionError, FunctionContext};

/// A semantic version: major, minor, patch and the pre-release (empty: a release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semver {
    core: (u64, u64, u64),
    pre: Vec<String>,
}

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

impl Semver {
    /// Semantic Versioning 2.0.0, as blang/semver's `Parse` (the library's parser) reads it:
    /// `MAJOR.MINOR.PATCH[-PRE][+BUILD]`, no leading zeros.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.split_once('+').map_or(text, |(v, _)| v);
        let (core, pre) = match text.split_once('-') {
            Some((c, p)) => (c, p.split('.').map(str::to_owned).collect()),
            None => (text, Vec::new()),
        };
        let number = |s: &str| {
            (!s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0')))
            .then(|| s.parse::<u64>().ok())
            .flatten()
        };
        let mut parts = core.split('.');
        let version = (
            number(parts.next()?)?,
            number(parts.next()?)?,
            number(parts.next()?)?,
        );
        if parts.next().is_some() || pre.iter().any(|p: &String| p.is_empty()) {
            return None;
        }
        Some(Self { core: version, pre })
    }

    fn compare(&self, other: &Self) -> Ordering {
        self.core
            .cmp(&other.core)
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let order = match (a.parse::<u64>(), b.parse::<u64>()) {
                            (Ok(x), Ok(y)) => x.cmp(&y),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => a.cmp(b),
                        };
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

/// A resource quantity, as an exact number of nano units (every suffix up to `Ei` fits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

impl Quantity {
    /// `resource.ParseQuantity`'s grammar, as the scheduler's NodeResourcesFit reads
    /// allocatable ([`crate::cluster::node_fit::parse_quantity`]).
    pub fn parse(text: &str) -> Option<Self> {
        crate::cluster::node_fit::parse_quantity(text).map(|nanos| Self { nanos })
    }
}

fn downcast<T: 'static>(value: &Value) -> Option<&T> {
    match value {
        Value::Opaque(o) => (o.as_ref() as &dyn Any).downcast_ref::<T>(),
        _ => None,
    }
}

fn compare(ftx: &FunctionContext, this: &Value, other: &Value) -> Result<Ordering, ExecutionError> {
    if let (Some(a), Some(b)) = (downcast::<Semver>(this), downcast::<Semver>(other)) {
        return Ok(a.compare(b));
    }
    if let (Some(a), Some(b)) = (downcast::<Quantity>(this), downcast::<Quantity>(other)) {
        return Ok(a.nanos.cmp(&b.nanos));
    }
    Err(ftx.error("no such overload: both sides must be semver or both quantity"))
}

/// Adds the libraries' functions to `context`.
pub fn add_functions(context: &mut cel::Context) {
    let ordering = |o: Ordering| match o {
        Ordering::Less => -1i64,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    };
    // Names no standard function has, so adding cannot conflict.
    let _ = context.add_function("semver", |ftx: &FunctionContext, s: Arc<String>| {
        Semver::parse(&s)
            .map(|v| Value::Opaque(Arc::new(v)))
            .ok_or_else(|| ftx.error("semver() invalid semver"))
    });
    let _ = context.add_function("isSemver", |s: Arc<String>| Semver::parse(&s).is_some());
    let _ = context.add_function("quantity", |ftx: &FunctionContext, s: Arc<String>| {
        Quantity::parse(&s)
            .map(|q| Value::Opaque(Arc::new(q)))
            .ok_or_else(|| ftx.error("quantity() invalid quantity"))
    });
    let _ = context.add_function("isQuantity", |s: Arc<String>| Quantity::parse(&s).is_some());
    let _ = context.add_function(
        "compareTo",
        move |ftx: &FunctionContext, This(this): This<Value>, other: Value| {
            compare(ftx, &this, &other).map(ordering)
        },
    );
    let _ = context.add_function(
        "isGreaterThan",
        |ftx: &FunctionContext, This(this): This<Value>, other: Value| {
            compare(ftx, &this, &other).map(|o| o == Ordering::Greater)
        },
    );
    let _ = context.add_function(
        "isLessThan",
        |ftx: &FunctionContext, This(this): This<Value>, other: Value| {
            compare(ftx, &this, &other).map(|o| o == Ordering::Less)
        },
    );
    for (name, part) in [("major", 0usize), ("minor", 1), ("patch", 2)] {
        let _ = context.add_function(
            name,
            move |ftx: &FunctionContext, This(this): This<Value>| {
                let v = downcast::<Semver>(&this).ok_or_else(|| ftx.error("no such overload"))?;
                let (major, minor, patch) = v.core;
                Ok::<i64, ExecutionError>([major, minor, patch][part] as i64)
            },
        );
    }
    let _ = context.add_function(
        "asInteger",
        |ftx: &FunctionContext, This(this): This<Value>| {
            let q = downcast::<Quantity>(&this).ok_or_else(|| ftx.error("no such overload"))?;
            if q.nanos % 1_000_000_000 != 0 {
                return Err(ftx.error("cannot convert value to integer"));
            }
            i64::try_from(q.nanos / 1_000_000_000)
                .map_err(|_| ftx.error("cannot convert value to integer"))
        },
    );
}

/// A version attribute's value: a semver when it parses (the API server accepts only
/// such), else the string.
pub fn version_value(text: &str) -> Value {
    match Semver::parse(text) {
        Some(v) => Value::Opaque(Arc::new(v)),
        None => Value::from(text.to_owned()),
    }
}

/// A capacity's value: a quantity when it parses, else the string.
pub fn quantity_value(text: &str) -> Value {
    match Quantity::parse(text) {
        Some(q) => Value::Opaque(Arc::new(q)),
        None => Value::from(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(expression: &str) -> Result<Value, String> {
        let program = cel::Program::compile(expression).map_err(|e| e.to_string())?;
        let mut context = cel::Context::default();
        add_functions(&mut context);
        context.add_variable_from_value("v", version_value("1.10.0"));
        context.add_variable_from_value("q", quantity_value("48Gi"));
        program.execute(&context).map_err(|e| e.to_string())
    }

    #[test]
    fn versions_compare_as_semver() {
        assert_eq!(run("v.compareTo(semver(\"1.9.0\"))"), Ok(Value::Int(1)));
        assert_eq!(
            run("v.isLessThan(semver(\"1.10.1\"))"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("semver(\"1.0.0-rc.1\").isLessThan(semver(\"1.0.0\"))"),
            Ok(Value::Bool(true))
        );
        assert_eq!(run("v.minor()"), Ok(Value::Int(10)));
        assert_eq!(run("isSemver(\"1.02.0\")"), Ok(Value::Bool(false)));
        assert!(run("semver(\"x\")").is_err_and(|e| e.contains("invalid semver")));
    }

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(run("q.compareTo(quantity(\"48Gi\"))"), Ok(Value::Int(0)));
        assert_eq!(
            run("q.isGreaterThan(quantity(\"50G\"))"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("quantity(\"1500m\").compareTo(quantity(\"1.5\"))"),
            Ok(Value::Int(0))
        );
        assert_eq!(run("quantity(\"2k\").asInteger()"), Ok(Value::Int(2000)));
        assert_eq!(run("isQuantity(\"12 Gi\")"), Ok(Value::Bool(false)));
        assert!(run("q.compareTo(v)").is_err());
    }
}
