//! The bounds every write is held to before anything is stored: size, nesting depth, and
//! the JSON-patch limits, so a small request cannot grow into a huge or unreadable object.

use serde_json::Value;

use super::{ApiError, FieldCause};

/// `maxJSONPatchOperations` of k8s.io/apiserver `pkg/endpoints/handlers/patch.go`: a JSON
/// patch with more operations is refused with 413 before it is applied.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// `JSONPatchMaxCopyBytes` of k8s.io/apiserver `pkg/server/config.go` (3 MiB, set as
/// evanphx/json-patch's `AccumulatedCopySizeLimit`): what all `copy` operations of one
/// patch may add up to. Without it 14 `copy`s of a map into itself double it 14 times.
pub const JSON_PATCH_MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// kube-apiserver's limit on a request body (`MaxRequestBodyBytes`, 3 MiB, k8s.io/apiserver
/// `pkg/server/config.go`; `limitedReadBody` refuses more with 413).
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The 413 a request body over [`MAX_REQUEST_BODY_BYTES`] gets, in upstream's words.
pub fn request_too_large() -> ApiError {
    ApiError {
        code: 413,
        reason: "RequestEntityTooLarge",
        message: format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"),
        details: None,
    }
}

/// etcd's default `--max-request-bytes` (1.5 MiB): kube-apiserver cannot store a larger
/// object, whatever built it (a merge patch, a JSON patch, an update).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// How deep a stored object may nest (objects and arrays). Upstream's decoder allows 10000
/// (k8s.io/apimachinery `pkg/util/json` `maxDepth`, sigs.k8s.io/json `maxNestingDepth`:
/// "exceeded max depth"), which Go clients read back. The clients of this emulator are Rust
/// (kube-rs, the driver's binaries, the emulated control plane): serde_json stops at 128
/// levels, and a list or watch event wraps each object in 1–3 more, so an object of 119
/// levels was stored and then broke every list of its kind. 100 leaves room for the
/// wrappers; no Kubernetes object comes near it.
pub const MAX_NESTING_DEPTH: usize = 100;

/// The length of `value` encoded as JSON, without building the text.
pub fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing into a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The nesting depth of `value`: a scalar is 0, `{}` and `[]` are 1. Walked without
/// recursion, so a value of any depth is measured safely; it stops as soon as the depth
/// passes `stop`.
pub fn depth(value: &Value, stop: usize) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, above)) = stack.pop() {
        let here = above + 1;
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        deepest = deepest.max(here);
        if deepest > stop {
            return deepest;
        }
        stack.extend(
            children
                .filter(|c| c.is_object() || c.is_array())
                .map(|c| (c, here)),
        );
    }
    deepest
}

/// The path to the first value that lies deeper than `limit`, if one does.
pub fn deeper_than(value: &Value, limit: usize) -> Option<String> {
    if depth(value, limit) <= limit {
        return None;
    }
    // Found too deep: walk again, keeping paths, only as far as the limit.
    let mut stack: Vec<(&Value, Vec<String>)> = vec![(value, Vec::new())];
    while let Some((v, path)) = stack.pop() {
        let children: Vec<(String, &Value)> = match v {
            Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("[{i}]"), v))
                .collect(),
            _ => continue,
        };
        if path.len() + 1 > limit {
            return Some(render_path(&path));
        }
        for (step, child) in children {
            if child.is_object() || child.is_array() {
                let mut p = path.clone();
                p.push(step);
                stack.push((child, p));
            }
        }
    }
    Some(render_path(&[]))
}

/// `a.b[0].c`, the first 12 steps and `…` after them (a path past the depth limit is long).
fn render_path(steps: &[String]) -> String {
    const SHOWN: usize = 12;
    let mut out = String::new();
    for step in steps.iter().take(SHOWN) {
        if !out.is_empty() && !step.starts_with('[') {
            out.push('.');
        }
        out.push_str(step);
    }
    if steps.len() > SHOWN {
        out.push('…');
    }
    if out.is_empty() {
        out.push_str("<root>");
    }
    out
}

/// Refuses an object nested deeper than [`MAX_NESTING_DEPTH`] (400, as kube-apiserver
/// answers a body its decoder refuses), naming where it goes too deep.
pub fn check_depth(kind: &str, version: &str, obj: &Value) -> Result<(), ApiError> {
    match deeper_than(obj, MAX_NESTING_DEPTH) {
        None => Ok(()),
        Some(path) => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {path}: exceeded max depth of {MAX_NESTING_DEPTH} (objects and arrays nested in one another)"
        ))),
    }
}

/// Refuses an object larger than etcd stores ([`MAX_OBJECT_BYTES`]). kube-apiserver passes
/// etcd's `etcdserver: request is too large` on as a 500; the emulator answers 413 with the
/// size and the limit, so the client does not retry what can never succeed.
pub fn check_size(kind: &str, name: &str, obj: &Value) -> Result<(), ApiError> {
    let size = json_size(obj);
    if size <= MAX_OBJECT_BYTES {
        return Ok(());
    }
    Err(ApiError {
        code: 413,
        reason: "RequestEntityTooLarge",
        message: format!(
            "Request entity too large: {kind} \"{name}\" would be {size} bytes, more than etcd stores ({MAX_OBJECT_BYTES} bytes, --max-request-bytes): etcdserver: request is too large"
        ),
        details: None,
    })
}

/// Why a JSON patch was not applied.
#[derive(Debug)]
pub enum JsonPatchError {
    /// More than [`MAX_JSON_PATCH_OPERATIONS`].
    TooManyOperations(usize),
    /// An operation failed, or the copies passed [`JSON_PATCH_MAX_COPY_BYTES`].
    Failed(String),
}

impl JsonPatchError {
    /// As kube-apiserver answers: 413 for too many operations, 422 for one that fails.
    pub fn into_api_error(self, kind_group: &str, name: &str) -> ApiError {
        match self {
            Self::TooManyOperations(n) => ApiError {
                code: 413,
                reason: "RequestEntityTooLarge",
                message: format!(
                    "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {n}"
                ),
                details: None,
            },
            Self::Failed(why) => ApiError::invalid(
                kind_group,
                name,
                vec![FieldCause::invalid(
                    "",
                    &Value::Null,
                    format!("the JSON patch could not be applied: {why}"),
                )],
            ),
        }
    }
}

/// Applies `ops` to `doc` one at a time, holding the patch to the upstream limits and the
/// result to [`MAX_NESTING_DEPTH`] (a `copy` of a deep value into a deep place doubles the
/// depth; unchecked, a few more overflow the stack of whatever walks the result). The depth
/// is tracked as a bound from each operation's path and value, so the document is walked
/// again only when the bound passes the limit. `doc` is a scratch copy: on error the
/// caller drops it.
pub fn apply_json_patch(
    doc: &mut Value,
    ops: &[json_patch::PatchOperation],
) -> Result<(), JsonPatchError> {
    use json_patch::PatchOperation;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations(ops.len()));
    }
    // JSON-pointer tokens: how many containers a value at the pointer sits in.
    let tokens = |pointer: &str| pointer.matches('/').count();
    let mut bound = depth(doc, usize::MAX);
    let mut copied = 0usize;
    for (i, op) in ops.iter().enumerate() {
        let reaches = match op {
            PatchOperation::Add(add) => tokens(add.path.as_str()) + depth(&add.value, usize::MAX),
            PatchOperation::Replace(replace) => {
                tokens(replace.path.as_str()) + depth(&replace.value, usize::MAX)
            }
            PatchOperation::Copy(copy) => {
                let source = doc.pointer(copy.from.as_str());
                let size = source.map_or(0, json_size);
                copied = copied.saturating_add(size);
                if copied > JSON_PATCH_MAX_COPY_BYTES {
                    return Err(JsonPatchError::Failed(format!(
                        "operation {i} (copy from {:?}): Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {JSON_PATCH_MAX_COPY_BYTES}",
                        copy.from.as_str()
                    )));
                }
                tokens(copy.path.as_str()) + source.map_or(0, |v| depth(v, usize::MAX))
            }
            // The moved value is at most as deep as the document below `from`.
            PatchOperation::Move(mv) => {
                tokens(mv.path.as_str()) + bound.saturating_sub(tokens(mv.from.as_str()))
            }
            PatchOperation::Remove(_) | PatchOperation::Test(_) => 0,
        };
        json_patch::patch_unsafe(doc, std::slice::from_ref(op))
            .map_err(|e| JsonPatchError::Failed(format!("operation {i}: {}", e.kind)))?;
        bound = bound.max(reaches);
        if bound > MAX_NESTING_DEPTH {
            bound = depth(doc, MAX_NESTING_DEPTH);
            if let Some(path) = deeper_than(doc, MAX_NESTING_DEPTH) {
                return Err(JsonPatchError::Failed(format!(
                    "operation {i}: the result is nested too deep at {path}: exceeded max depth of {MAX_NESTING_DEPTH}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!("leaf");
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn depth_is_measured_without_recursion_and_names_the_path() {
        assert_eq!(deeper_than(&nested(3), 3), None);
        assert_eq!(deeper_than(&nested(4), 3).as_deref(), Some("a.a.a"));
        // Far deeper than any recursive walk on a test thread's stack would survive.
        let mut deep = json!(1);
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(deeper_than(&deep, MAX_NESTING_DEPTH).is_some());
        // Dropping it recursively would overflow too: take it apart by hand.
        while let Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn json_size_is_the_encoded_length() {
        let v = json!({"a": [1, "two", null]});
        assert_eq!(
            json_size(&v),
            serde_json::to_string(&v).map_or(0, |s| s.len())
        );
    }
}
