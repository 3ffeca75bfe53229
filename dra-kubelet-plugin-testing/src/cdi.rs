//! The CDI specs a plugin wrote, checked by implementations other than the one that wrote
//! them: the CDI JSON schema (with the `jsonschema` crate) and the Rust port of the CDI
//! library (`container-device-interface`), which resolves CDI ids and injects the devices
//! into an OCI spec as a container runtime does.

use std::path::{Path, PathBuf};

use crate::KitError;

/// The schema's `defs.json` references, answered from a file beside `schema.json`.
struct Defs(serde_json::Value);

impl jsonschema::Retrieve for Defs {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>> {
        if uri.as_str().ends_with("defs.json") {
            Ok(self.0.clone())
        } else {
            Err(format!("no such schema {}", uri.as_str()).into())
        }
    }
}

/// What a container gets from some CDI ids, as a runtime would give it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Injected {
    /// `NAME=value` entries, in order.
    pub env: Vec<String>,
    /// The container paths of its device nodes.
    pub device_nodes: Vec<String>,
    /// `(host, container)` paths of its mounts.
    pub mounts: Vec<(String, String)>,
}

/// Checks spec files against the CDI JSON schema: a directory holding the CDI project's
/// `schema.json` and `defs.json` (`with_schema_dir`), or the copy the
/// `container-device-interface` crate ships.
#[derive(Debug, Clone, Default)]
pub struct CdiCheck {
    schema_dir: Option<PathBuf>,
}

fn read_json(path: &Path) -> Result<serde_json::Value, KitError> {
    let bytes = std::fs::read(path).map_err(|source| KitError::File {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|e| KitError::Cdi {
        path: path.to_owned(),
        problems: vec![format!("not JSON: {e}")],
    })
}

impl CdiCheck {
    /// With the schema the `container-device-interface` crate ships.
    pub fn new() -> Self {
        Self::default()
    }

    /// With the schema in `dir` (`schema.json`, `defs.json`), e.g. a checkout of the CDI
    /// project's `schema/`.
    pub fn with_schema_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            schema_dir: Some(dir.into()),
        }
    }

    fn validator(&self) -> Result<jsonschema::Validator, KitError> {
        let bad_schema = |path: &Path, e: String| KitError::Cdi {
            path: path.to_owned(),
            problems: vec![format!("the CDI schema cannot be used: {e}")],
        };
        match &self.schema_dir {
            Some(dir) => {
                let path = dir.join("schema.json");
                let mut schema = read_json(&path)?;
                let defs = read_json(&dir.join("defs.json"))?;
                schema["$id"] = serde_json::Value::String("file:///cdi-schema/schema.json".into());
                jsonschema::options()
                    .with_retriever(Defs(defs))
                    .build(&schema)
                    .map_err(|e| bad_schema(&path, e.to_string()))
            }
            None => {
                let schema = container_device_interface::schema::builtin_schema_value()
                    .map_err(|e| bad_schema(Path::new("builtin"), e.to_string()))?;
                jsonschema::options()
                    .build(&schema)
                    .map_err(|e| bad_schema(Path::new("builtin"), e.to_string()))
            }
        }
    }

    /// Checks one spec file; every problem the schema finds is named.
    pub fn check_file(&self, path: &Path) -> Result<(), KitError> {
        let doc = read_json(path)?;
        let validator = self.validator()?;
        let problems: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(KitError::Cdi {
                path: path.to_owned(),
                problems,
            })
        }
    }

    /// Checks every `.json` spec file in `cdi_root`; returns how many.
    pub fn check_dir(&self, cdi_root: &Path) -> Result<usize, KitError> {
        let entries = std::fs::read_dir(cdi_root).map_err(|source| KitError::File {
            path: cdi_root.to_owned(),
            source,
        })?;
        let mut checked = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "json") {
                self.check_file(&path)?;
                checked += 1;
            }
        }
        Ok(checked)
    }
}

/// Resolves `ids` (fully qualified, `vendor/class=device`) from the specs in `cdi_root`
/// and injects them into an empty OCI spec, as a CDI-enabled runtime does for a
/// container; what the container gets. Any spec in the directory the library refuses
/// fails it, as it would fail the runtime.
pub fn inject(cdi_root: &Path, ids: &[String]) -> Result<Injected, KitError> {
    use container_device_interface::cache::Cache;
    let fail = |problems: Vec<String>| KitError::Cdi {
        path: cdi_root.to_owned(),
        problems,
    };
    let mut cache = Cache::new(
        vec![cdi_root.to_string_lossy().into_owned()],
        Default::default(),
        Default::default(),
    );
    cache.refresh().map_err(|e| fail(vec![e.to_string()]))?;
    let errors = cache.get_errors();
    if !errors.is_empty() {
        return Err(fail(
            errors
                .iter()
                .map(|(file, e)| format!("{file}: {e:?}"))
                .collect(),
        ));
    }
    let mut spec = oci_spec::runtime::Spec::default();
    if let Some(p) = spec.process_mut() {
        p.set_env(Some(vec![]));
    }
    cache
        .inject_devices(Some(&mut spec), ids.to_vec())
        .map_err(|e| fail(vec![format!("injecting {ids:?}: {e}")]))?;
    Ok(Injected {
        env: spec
            .process()
            .as_ref()
            .and_then(|p| p.env().clone())
            .unwrap_or_default(),
        device_nodes: spec
            .linux()
            .as_ref()
            .and_then(|l| l.devices().clone())
            .unwrap_or_default()
            .iter()
            .map(|d| d.path().to_string_lossy().into_owned())
            .collect(),
        mounts: spec
            .mounts()
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                (
                    m.source()
                        .as_ref()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    m.destination().to_string_lossy().into_owned(),
                )
            })
            .collect(),
    })
}
