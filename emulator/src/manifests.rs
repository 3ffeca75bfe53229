//! Reading Kubernetes manifests: multi-document YAML files, directories of them, and the
//! deploy overlays as `kubectl kustomize` rendered them (`deploy/rendered/`).
//!
//! Everything is parsed and checked before anything is applied, so a broken manifest
//! stops a run before it starts anything.

use std::path::{Path, PathBuf};

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A key given twice in one mapping: the YAML spec forbids it, and kubectl would
    /// silently keep the last (kubectl 1.37.2 converts with sigs.k8s.io/yaml's lenient
    /// `YAMLToJSON`), losing what the first said.
    #[error(
        "{source_name}: document {index}: {duplicate}: YAML allows a key once per mapping; remove one of them (kubectl apply would silently keep only the last)"
    )]
    DuplicateKey {
        source_name: String,
        index: usize,
        duplicate: fake_dra_ops::yaml::DuplicateKey,
    },
    #[error("{source_name}: document {index}: not valid YAML: {message}")]
    Yaml {
        source_name: String,
        index: usize,
        message: String,
    },
    /// Nested too deep to parse in reasonable time.
    #[error("{source_name}: {source}")]
    TooDeep {
        source_name: String,
        source: fake_dra_ops::yaml::DepthError,
    },
    #[error("{source_name}: document {index}: {message}")]
    Invalid {
        source_name: String,
        index: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Overlay { path: PathBuf, message: String },
    /// Not a regular file, or too large.
    #[error(transparent)]
    File(#[from] fake_dra_ops::files::FileError),
}

/// Largest manifest file read (`-f`): far above any real one (kube-apiserver takes at most
/// 3 MiB per object), far below what would exhaust memory.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// One object of a manifest, with where it came from (for error messages).
#[derive(Debug, Clone)]
pub struct Manifest {
    /// `file#document-index`.
    pub origin: String,
    pub object: Value,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
    }
}

/// Parses a multi-document YAML (or JSON) text. Empty documents are skipped; every other
/// document must be an object with `apiVersion`, `kind` and `metadata.name` (or
/// `metadata.generateName`). A `List` is flattened into its items.
pub fn parse(text: &str, source_name: &str) -> Result<Vec<Manifest>, ManifestError> {
    fake_dra_ops::yaml::check_depth(text.as_bytes()).map_err(|source| ManifestError::TooDeep {
        source_name: source_name.into(),
        source,
    })?;
    let mut out = Vec::new();
    for (index, document) in fake_dra_ops::yaml::documents(text).enumerate() {
        let value = document.map_err(|e| match e {
            fake_dra_ops::yaml::DocumentError::Duplicate(duplicate) => {
                ManifestError::DuplicateKey {
                    source_name: source_name.into(),
                    index,
                    duplicate,
                }
            }
            fake_dra_ops::yaml::DocumentError::Yaml(e) => ManifestError::Yaml {
                source_name: source_name.into(),
                index,
                message: e.to_string(),
            },
        })?;
        let invalid = |message: String| ManifestError::Invalid {
            source_name: source_name.into(),
            index,
            message,
        };
        match value {
            Value::Null => continue,
            Value::Object(_) => {}
            other => {
                return Err(invalid(format!(
                    "expected an object, found {}",
                    type_name(&other)
                )));
            }
        }
        let items = if value
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && value.get("items").is_some()
        {
            value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .ok_or_else(|| invalid("items must be a list".into()))?
        } else {
            vec![value]
        };
        for object in items {
            for field in ["apiVersion", "kind"] {
                if object
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(invalid(format!("{field} is required (a non-empty string)")));
                }
            }
            let named = ["/metadata/name", "/metadata/generateName"]
                .iter()
                .any(|p| {
                    object
                        .pointer(p)
                        .and_then(Value::as_str)
                        .is_some_and(|v| !v.is_empty())
                });
            if !named {
                return Err(invalid("metadata.name is required".into()));
            }
            out.push(Manifest {
                origin: format!("{source_name}#{index}"),
                object,
            });
        }
    }
    Ok(out)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Reads a file, or every `.yaml`/`.yml`/`.json` file of a directory (sorted by name, not
/// recursive, as `kubectl apply -f <dir>` does: cli-runtime's `ExpandPathsToFileVisitors`
/// skips every directory below the one given, whatever its name, so `old.yaml/` is no file).
pub fn load(path: &Path) -> Result<Vec<Manifest>, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                    && !p.is_dir()
            })
            .collect();
        files.sort();
        let mut out = Vec::new();
        for file in files {
            out.extend(load(&file)?);
        }
        return Ok(out);
    }
    let text = fake_dra_ops::files::read_text("-f", path, MAX_MANIFEST_BYTES)?;
    parse(&text, &path.display().to_string())
}

/// The objects of a deploy overlay as real kustomize renders them: the checked-in
/// `<deploy_dir>/rendered/<overlay>.yaml`, which `hack/render-deploy.sh --write` writes with
/// `kubectl kustomize <deploy_dir>/<overlay>` and `e2e/tests/it/deploy.rs` keeps equal to it.
/// The emulator carries no kustomize of its own.
pub fn rendered(deploy_dir: &Path, overlay: &str) -> Result<Vec<Manifest>, ManifestError> {
    let path = deploy_dir.join("rendered").join(format!("{overlay}.yaml"));
    if overlay.is_empty() || overlay.contains(['/', '\\']) || overlay.starts_with('.') {
        return Err(ManifestError::Overlay {
            path,
            message: format!("{overlay:?} is not an overlay name"),
        });
    }
    if !path.is_file() {
        return Err(ManifestError::Overlay {
            message: format!(
                "no rendered manifests for overlay {overlay:?}: run hack/render-deploy.sh --write \
                 (kubectl kustomize {})",
                deploy_dir.join(overlay).display()
            ),
            path,
        });
    }
    load(&path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_device_or_fifo_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = load(&zero).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "-f '{}' is a character device, not a regular file",
                zero.display()
            )
        );
    }

    #[test]
    fn parses_documents_and_names_the_broken_one() {
        let ok = parse("---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n", "x.yaml").unwrap();
        assert_eq!(
            ok.iter().map(Manifest::name).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let cases = [
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: [}\n",
                "not valid YAML",
            ),
            ("- 1\n- 2\n", "expected an object, found a list"),
            ("kind: Pod\nmetadata: {name: p}\n", "apiVersion is required"),
            // D13: `data` twice was last-wins.
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\ndata: {b: '2'}\n",
                "bad.yaml: document 0: line 5: key \"data\" already set in map: YAML allows a key once per mapping; remove one of them",
            ),
            (
                "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    app: x\n    app: y\n",
                "document 1: line 12: key \"app\" already set in map (in metadata.labels)",
            ),
            ("apiVersion: v1\nmetadata: {name: p}\n", "kind is required"),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {}\n",
                "metadata.name is required",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text, "bad.yaml").unwrap_err().to_string();
            assert!(
                err.contains(want) && err.contains("bad.yaml"),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn a_manifest_nested_too_deep_is_refused_before_it_is_parsed() {
        let deep = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata: {}{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let err = parse(&deep, "deep.yaml").unwrap_err().to_string();
        assert_eq!(
            err,
            "deep.yaml: YAML nested deeper than 64 levels at line 4: at most 64 mappings and sequences may nest"
        );
    }

    #[test]
    fn reads_the_rendered_overlays() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        for overlay in ["classic", "structured"] {
            let objects = rendered(&deploy, overlay).unwrap();
            assert!(
                objects
                    .iter()
                    .any(|m| m.kind() == "DaemonSet" && m.name() == "fake-dra-kubelet-plugin"),
                "{overlay}: no plugin DaemonSet"
            );
        }
        for bad in ["nope", "../classic", ""] {
            let err = rendered(&deploy, bad).unwrap_err().to_string();
            assert!(
                err.contains("hack/render-deploy.sh") || err.contains("not an overlay name"),
                "{bad:?}: {err}"
            );
        }
    }

    /// D27: a directory named `*.yaml` inside a `-f` directory was read as a manifest
    /// directory of its own (recursively, without end through a symlink to `.`).
    #[test]
    fn a_directory_is_not_recursed_into_whatever_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let ns =
            |name: &str| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n");
        std::fs::write(dir.path().join("a.yaml"), ns("a")).unwrap();
        let inner = dir.path().join("old.yaml");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(inner.join("b.yaml"), ns("b")).unwrap();
        std::os::unix::fs::symlink(".", dir.path().join("loop.yml")).unwrap();
        let names: Vec<String> = load(dir.path())
            .unwrap()
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn flattens_lists() {
        let items = parse("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Namespace, metadata: {name: a}}\n", "l").unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].kind(), "Namespace");
    }
}
