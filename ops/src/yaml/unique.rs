//! YAML read into JSON values, a key given twice in one mapping refused with its line.
//!
//! Why: serde_json's `Value` keeps the last of two equal keys, so `data:` written twice
//! in a manifest or `numDevices:` twice in an inventory entry silently lost the first.
//! The YAML spec requires keys to be unique within a mapping, and the strict decoders of
//! Kubernetes refuse them with go-yaml's words (`line 7: key "data" already set in map`,
//! go-yaml v2 `decode.go` `setMapIndex` in strict mode, which k8s.io/apimachinery's
//! `yaml.UnmarshalStrict` and kube-apiserver's strict field validation use).

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A key given twice in one mapping: where, and which.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: key {key:?} already set in map{}", place(.path))]
pub struct DuplicateKey {
    /// The line (from 1) of the second occurrence, or of the mapping where that could not
    /// be told (a flow mapping over several lines).
    pub line: usize,
    /// The line where the mapping starts (its first key).
    pub mapping_line: usize,
    /// The key.
    pub key: String,
    /// Where the mapping is (`metadata.labels`, `nodes[0]`); empty at the top.
    pub path: String,
}

fn place(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" (in {path})")
    }
}

/// The line of the second `key:` of the block mapping whose first key is at
/// `line`:`column` (from 1): serde_yaml_ng places an error at the mapping, not at the key.
fn second_occurrence(text: &str, line: usize, column: usize, key: &str) -> Option<usize> {
    let indent = column.checked_sub(1)?;
    let is_key = |at: &str| {
        [key.to_owned(), format!("\"{key}\""), format!("'{key}'")]
            .iter()
            .any(|k| {
                at.strip_prefix(k.as_str())
                    .map(|r| r.trim_start_matches(' '))
                    .and_then(|r| r.strip_prefix(':'))
                    .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
            })
    };
    let mut seen = 0;
    for (i, text_line) in text.lines().enumerate().skip(line.checked_sub(1)?) {
        let rest = text_line.trim_start_matches(' ');
        if rest.is_empty() || rest.starts_with('#') {
            continue;
        }
        let here = text_line.len() - rest.len();
        let at = if i + 1 == line {
            text_line.get(indent..)?
        } else if here == indent {
            rest
        } else if here < indent {
            return None;
        } else {
            continue;
        };
        if is_key(at) {
            seen += 1;
            if seen == 2 {
                return Some(i + 1);
            }
        }
    }
    None
}

/// Why a YAML document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// A key given twice in one mapping.
    #[error(transparent)]
    Duplicate(DuplicateKey),
    /// Not YAML, or not a value JSON can hold.
    #[error(transparent)]
    Yaml(serde_yaml_ng::Error),
}

/// The documents of a YAML stream as JSON values (serde_json's reading of YAML: keys as
/// strings, a NaN as null), each refused if a mapping in it gives a key twice.
pub fn documents(text: &str) -> impl Iterator<Item = Result<Value, DocumentError>> + '_ {
    serde_yaml_ng::Deserializer::from_str(text).map(|document| {
        let duplicate = std::cell::RefCell::new(None);
        let read = UniqueKeys {
            path: Vec::new(),
            duplicate: &duplicate,
        }
        .deserialize(document);
        match (read, duplicate.into_inner()) {
            (Ok(value), _) => Ok(value),
            (Err(e), Some((key, path))) => {
                let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
                Err(DocumentError::Duplicate(DuplicateKey {
                    line: second_occurrence(text, line, column, &key).unwrap_or(line),
                    mapping_line: line,
                    key,
                    path,
                }))
            }
            (Err(e), None) => Err(DocumentError::Yaml(e)),
        }
    })
}

/// A serde seed building a JSON value that refuses a mapping key given twice, noting
/// which and where in `duplicate` (the YAML error then carries the line).
pub struct UniqueKeys<'a> {
    path: Vec<String>,
    duplicate: &'a std::cell::RefCell<Option<(String, String)>>,
}

impl fmt::Debug for UniqueKeys<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueKeys")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl UniqueKeys<'_> {
    fn child(&self, step: String) -> Self {
        let mut path = self.path.clone();
        path.push(step);
        UniqueKeys {
            path,
            duplicate: self.duplicate,
        }
    }

    fn rendered_path(&self) -> String {
        let mut out = String::new();
        for step in &self.path {
            if !out.is_empty() && !step.starts_with('[') {
                out.push('.');
            }
            out.push_str(step);
        }
        out
    }
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value JSON can hold")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(format!("[{}]", items.len())))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen = HashSet::new();
        loop {
            // Checked while the key is read, so the error carries the key's own line.
            let key = map.next_key_seed(NewKey {
                seen: &mut seen,
                at: &self,
            })?;
            let Some(key) = key else {
                break;
            };
            let value = map.next_value_seed(self.child(key.clone()))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A mapping key, refused if the mapping already has it.
struct NewKey<'s, 'a> {
    seen: &'s mut HashSet<String>,
    at: &'s UniqueKeys<'a>,
}

impl<'de> DeserializeSeed<'de> for NewKey<'_, '_> {
    type Value = String;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let key = String::deserialize(d)?;
        if !self.seen.insert(key.clone()) {
            *self.at.duplicate.borrow_mut() = Some((key.clone(), self.at.rendered_path()));
            return Err(D::Error::custom(format!("key {key:?} already set in map")));
        }
        Ok(key)
    }
}

/// Whether every document of `text` gives each key once per mapping (the first
/// duplicate, else `Ok`); other YAML errors are left to the caller's own reading.
pub fn check_unique_keys(text: &str) -> Result<(), DuplicateKey> {
    for document in documents(text) {
        match document {
            Err(DocumentError::Duplicate(d)) => return Err(d),
            Err(DocumentError::Yaml(_)) => return Ok(()),
            Ok(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_with_its_line_and_place() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    a: x\n    a: y\ndata: {}\n";
        let err = check_unique_keys(text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 7: key \"a\" already set in map (in metadata.labels)"
        );
        let top = "a: 1\nb: 2\na: 3\n";
        assert_eq!(
            check_unique_keys(top).unwrap_err().to_string(),
            "line 3: key \"a\" already set in map"
        );
        let second = "a: 1\n---\nlist:\n- {x: 1, x: 2}\n";
        assert_eq!(
            check_unique_keys(second).unwrap_err().to_string(),
            "line 4: key \"x\" already set in map (in list[0])"
        );
        let flow = "m: {x: 1,\n  x: 2}\n";
        assert_eq!(
            check_unique_keys(flow).unwrap_err().to_string(),
            "line 1: key \"x\" already set in map (in m)"
        );
        let quoted = "- a: 1\n  # note\n  b:\n    c: 1\n  'a': 2\n";
        assert_eq!(
            check_unique_keys(quoted).unwrap_err().to_string(),
            "line 5: key \"a\" already set in map (in [0])"
        );
    }

    #[test]
    fn values_read_as_serde_json_reads_yaml() {
        let text = "a: 1\nb: [true, null, 1.5, x]\nc: {d: -2}\n";
        let mut docs = documents(text);
        let value = docs.next().unwrap().unwrap();
        let want: Value = serde_yaml_ng::from_str(text).unwrap();
        assert_eq!(value, want);
        assert!(docs.next().is_none());
        assert!(check_unique_keys("a: [\n").is_ok());
    }
}
