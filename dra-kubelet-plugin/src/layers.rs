//! The crate's layers, written down once: a module may use `crate::<module>` only for
//! modules of its own layer or below, so the data model never depends on the plugin that
//! runs it and no two modules import each other. Read from the sources themselves.

/// Bottom first; `lib.rs` (the public facade) is above them all.
const LAYERS: &[&[&str]] = &[
    &["fsutil", "instance", "transport"],
    &[
        "quantity",
        "model",
        "claim_data",
        "device_status",
        "dra_mode",
        "driver_name",
    ],
    &["cdi_spec", "opaque"],
    &["profile", "hooks", "classic_inventory", "testing"],
    &["claim_error", "allocation", "claim_reader"],
    &["checkpoint", "plan", "state", "device_metadata"],
    &["pool", "slice_controller", "claim_status"],
    &["metrics", "grpc"],
    &["serve"],
    &["builder"],
];

/// No file of the library is longer: past it, a file is two subjects.
const MAX_LINES: usize = 600;

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every `.rs` file under `src/`, with its top-level module (`pool/tests.rs` is `pool`).
fn sources() -> Vec<(String, String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(&root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let module = rel
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(".rs")
                    .to_owned();
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push((rel, module, text));
            }
        }
    }
    out
}

/// The modules a file's code (comments left out) names as `crate::<module>`.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `crate::{a, b}` lists several.
            if name.is_empty() && after.starts_with('{') {
                let list = after[1..].split('}').next().unwrap_or_default();
                for item in list.split(',') {
                    let item = item.trim().split("::").next().unwrap_or_default().trim();
                    if !item.is_empty() {
                        found.push((n + 1, item.to_owned()));
                    }
                }
            } else if !name.is_empty() {
                found.push((n + 1, name));
            }
            rest = after;
        }
    }
    found
}

#[test]
fn no_module_imports_from_a_layer_above() {
    let mut wrong = Vec::new();
    for (file, module, text) in sources() {
        if matches!(module.as_str(), "lib" | "layers") {
            continue;
        }
        let Some(own) = layer_of(&module) else {
            wrong.push(format!("{file}: module {module} is in no layer of LAYERS"));
            continue;
        };
        for (line, used) in crate_paths(&text) {
            match layer_of(&used) {
                Some(theirs) if theirs > own => wrong.push(format!(
                    "{file}:{line}: {module} (layer {own}) uses crate::{used} (layer {theirs})"
                )),
                Some(_) => {}
                None => wrong.push(format!(
                    "{file}:{line}: crate::{used} is in no layer (the facade's names are for other crates)"
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn no_file_is_over_the_line_limit() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|(_, _, text)| text.lines().count() > MAX_LINES)
        .map(|(file, _, text)| format!("{file}: {} lines", text.lines().count()))
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

#[test]
fn the_scanner_sees_what_it_must() {
    let text = "use crate::claim_data::{ClaimRef};\nuse crate::{pool, grpc::x};\n// crate::builder\nlet x = crate::serve::run();";
    let names: Vec<String> = crate_paths(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["claim_data", "pool", "grpc", "serve"]);
}
