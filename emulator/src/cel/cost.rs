//! A cost estimate of a selector before it is stored or evaluated, as kube-apiserver
//! refuses a selector whose estimated cost passes `CELSelectorExpressionMaxCost`
//! (k8s.io/kubernetes `pkg/apis/resource/validation/validation.go`, `validateCELExpression`:
//! "too complex, exceeds cost limit") and kube-scheduler stops one that passes it at
//! runtime (k8s.io/dynamic-resource-allocation `cel/compile.go`, `cel.CostLimit`).
//!
//! The `cel` crate counts no cost and cannot be interrupted, so the estimate here must be
//! an upper bound of the work an evaluation does: every list a comprehension walks is as
//! long as it can be (a literal's length, a device value's limit), every list literal is
//! built again each time it is evaluated, every copy of a list or string is counted. It
//! follows cel-go's model (checker/cost.go: 1 per call, select and variable, 10 per list
//! and 30 per map created, string work per 10 characters) and rounds up where the
//! interpreter does more. An expression the estimate lets through therefore ends in
//! bounded work; one it refuses upstream would (nearly always) refuse too.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// `CELSelectorExpressionMaxCost` (k8s.io/kubernetes `pkg/apis/resource/types.go`).
pub const MAX_COST: u64 = 1_000_000;

/// The most any value taken from a device can hold: `DeviceAttributeMaxValueLength` (64
/// characters for a string or version) and the attributes and capacities of one device
/// (`ResourceSliceMaxAttributesAndCapacitiesPerDevice`, 32).
const DEVICE_VALUE_MAX: u64 = 64;

/// What is known of a value: at most how many elements (or characters) it holds, and at
/// most how many each of its elements holds (for a list of lists, the largest of any
/// level below).
#[derive(Debug, Clone, Copy)]
struct Size {
    len: u64,
    elem: u64,
}

/// A value taken from the device: a string of at most 64 characters or a map of at most
/// 32 entries.
const DEVICE_VALUE: Size = Size {
    len: DEVICE_VALUE_MAX,
    elem: DEVICE_VALUE_MAX,
};

#[derive(Debug, Clone, Copy)]
struct Estimate {
    cost: u64,
    size: Size,
}

/// Variables in scope: a comprehension's iteration and accumulator variables, with the
/// size bound of their values; any other name is the device.
struct Scope<'a> {
    vars: Vec<(&'a str, Size)>,
}

impl Scope<'_> {
    fn size_of(&self, name: &str) -> Size {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map_or(DEVICE_VALUE, |(_, size)| *size)
    }
}

/// The estimated worst-case cost of evaluating `program` once (saturating, so a huge one
/// stays huge). Recursive over the expression: run it inside [`super::with_stack`].
pub fn estimate(program: &cel::Program) -> u64 {
    let mut scope = Scope { vars: Vec::new() };
    walk(program.expression(), &mut scope).cost
}

fn scalar(len: u64) -> Size {
    Size { len, elem: 0 }
}

fn walk<'a>(e: &'a IdedExpr, scope: &mut Scope<'a>) -> Estimate {
    match &e.expr {
        Expr::Unspecified => Estimate {
            cost: 0,
            size: scalar(0),
        },
        Expr::Literal(literal) => Estimate {
            cost: 0,
            size: scalar(match literal {
                LiteralValue::String(s) => s.len() as u64,
                LiteralValue::Bytes(b) => b.len() as u64,
                _ => 1,
            }),
        },
        Expr::Ident(name) => Estimate {
            cost: 1,
            size: scope.size_of(name),
        },
        Expr::Select(select) => {
            let operand = walk(&select.operand, scope);
            Estimate {
                cost: operand.cost.saturating_add(1),
                size: Size {
                    len: operand.size.elem.max(DEVICE_VALUE_MAX),
                    elem: operand.size.elem.max(DEVICE_VALUE_MAX),
                },
            }
        }
        Expr::List(list) => {
            let mut cost: u64 = 10;
            let mut elem = 0u64;
            for element in &list.elements {
                let el = walk(element, scope);
                cost = cost.saturating_add(el.cost.max(1));
                elem = elem.max(el.size.len).max(el.size.elem);
            }
            Estimate {
                cost,
                size: Size {
                    len: list.elements.len() as u64,
                    elem,
                },
            }
        }
        Expr::Map(map) => entries(map.entries.iter().map(|e| &e.expr), 30, scope),
        Expr::Struct(s) => entries(s.entries.iter().map(|e| &e.expr), 40, scope),
        Expr::Comprehension(c) => {
            let range = walk(&c.iter_range, scope);
            let init = walk(&c.accu_init, scope);
            let n = range.size.len;
            let item = Size {
                len: range.size.elem,
                elem: range.size.elem,
            };
            // The accumulator of `map`/`filter` grows by one element per iteration.
            let accu = Size {
                len: init.size.len.saturating_add(n),
                elem: init.size.elem.max(range.size.elem).max(DEVICE_VALUE_MAX),
            };
            let mark = scope.vars.len();
            scope.vars.push((c.iter_var.as_str(), item));
            if let Some(second) = &c.iter_var2 {
                scope.vars.push((second.as_str(), item));
            }
            scope.vars.push((c.accu_var.as_str(), accu));
            let cond = walk(&c.loop_cond, scope);
            let step = walk(&c.loop_step, scope);
            let result = walk(&c.result, scope);
            scope.vars.truncate(mark);
            let per_iteration = cond.cost.saturating_add(step.cost).saturating_add(1);
            Estimate {
                cost: range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(n.saturating_mul(per_iteration))
                    .saturating_add(result.cost),
                size: Size {
                    len: result.size.len.max(accu.len),
                    elem: result.size.elem.max(step.size.elem).max(accu.elem),
                },
            }
        }
        Expr::Call(call) => {
            let mut cost: u64 = 1;
            let mut sizes: Vec<Size> = Vec::new();
            for arg in call.target.as_deref().into_iter().chain(&call.args) {
                let a = walk(arg, scope);
                cost = cost.saturating_add(a.cost);
                sizes.push(a.size);
            }
            let total = sizes.iter().fold(0u64, |t, s| t.saturating_add(s.len));
            let largest = sizes.iter().map(|s| s.len).max().unwrap_or(0);
            let deepest = sizes.iter().map(|s| s.elem).max().unwrap_or(0);
            let (work, size) = match call.func_name.as_str() {
                // Concatenation copies both sides.
                "_+_" => (
                    total,
                    Size {
                        len: total,
                        elem: deepest,
                    },
                ),
                // Comparing or searching walks the values (and their elements).
                "_==_" | "_!=_" | "@in" | "contains" | "startsWith" | "endsWith" => (
                    total.saturating_add(total.saturating_mul(deepest) / 10),
                    scalar(1),
                ),
                // Compiling the pattern, then matching.
                "matches" => (total.saturating_mul(2), scalar(1)),
                "_[_]" => (
                    1,
                    Size {
                        len: deepest,
                        elem: deepest,
                    },
                ),
                _ => (
                    total.div_ceil(10),
                    Size {
                        len: largest.max(1),
                        elem: deepest,
                    },
                ),
            };
            Estimate {
                cost: cost.saturating_add(work),
                size,
            }
        }
    }
}

fn entries<'a>(
    entries: impl Iterator<Item = &'a EntryExpr>,
    base: u64,
    scope: &mut Scope<'a>,
) -> Estimate {
    let mut cost = base;
    let mut len = 0u64;
    let mut elem = 0u64;
    for entry in entries {
        let (key, value) = match entry {
            EntryExpr::MapEntry(m) => (Some(&m.key), &m.value),
            EntryExpr::StructField(f) => (None, &f.value),
        };
        if let Some(key) = key {
            let k = walk(key, scope);
            cost = cost.saturating_add(k.cost.max(1));
        }
        let v = walk(value, scope);
        cost = cost.saturating_add(v.cost.max(1));
        len = len.saturating_add(1);
        elem = elem.max(v.size.len).max(v.size.elem);
    }
    Estimate {
        cost,
        size: Size { len, elem },
    }
}
