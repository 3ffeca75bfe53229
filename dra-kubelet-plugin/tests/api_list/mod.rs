//! The public API of a crate, read from its own sources with `syn`: every item reachable
//! from `lib.rs` by `pub mod` and `pub use`, with its public fields, variants, methods,
//! trait impls and derives, one line each, sorted. A stand-in for `cargo semver-checks`
//! (which needs a published baseline): the list is committed next to the crate
//! (`public-api.txt`), a test compares, and a change to it is a change to the API that
//! CHANGELOG.md must name. `DRA_PUBLIC_API=write` rewrites the file.
//!
//! Shared by the SDK crates' tests (`#[path]`); never packaged.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quote::ToTokens;

/// A module's items, by module path (`""` for the crate root, `pool::convert`).
struct Module {
    items: Vec<syn::Item>,
    /// The `#[cfg(feature = ...)]` of the module itself, if any.
    feature: Option<String>,
}

fn feature_of(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident("cfg") {
            return None;
        }
        let text = a.meta.to_token_stream().to_string();
        text.split("feature = \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .map(str::to_owned)
    })
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.to_token_stream().to_string().contains("test"))
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

fn is_pub(vis: &syn::Visibility) -> bool {
    matches!(vis, syn::Visibility::Public(_))
}

/// Every module of the crate rooted at `src`, parsed.
fn modules(src: &Path) -> BTreeMap<String, Module> {
    let mut out = BTreeMap::new();
    load(src, &src.join("lib.rs"), String::new(), None, &mut out);
    out
}

fn load(
    src: &Path,
    file: &Path,
    path: String,
    feature: Option<String>,
    out: &mut BTreeMap<String, Module>,
) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    add(src, file, path, feature, parsed.items, out);
}

fn add(
    src: &Path,
    file: &Path,
    path: String,
    feature: Option<String>,
    items: Vec<syn::Item>,
    out: &mut BTreeMap<String, Module>,
) {
    for item in &items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let child = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}::{name}")
        };
        let feat = feature_of(&m.attrs).or_else(|| feature.clone());
        match &m.content {
            Some((_, inner)) => add(src, file, child, feat, inner.clone(), out),
            None => {
                // `a/b.rs` or `a/b/mod.rs`, beside the file that declares it.
                let dir: PathBuf = if file.ends_with("lib.rs") || file.ends_with("mod.rs") {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    file.with_extension("")
                };
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                let next = if flat.exists() { flat } else { nested };
                load(src, &next, child, feat, out);
            }
        }
    }
    out.insert(path, Module { items, feature });
}

fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

/// The type name an `impl` is for (`Quantity` of `impl From<&str> for Quantity`).
fn self_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

/// The API of one crate: lines, sorted.
pub fn public_api(crate_dir: &Path) -> Vec<String> {
    let src = crate_dir.join("src");
    let mods = modules(&src);
    // Every `impl` in the crate, by the type's name.
    let mut impls: BTreeMap<String, Vec<syn::ItemImpl>> = BTreeMap::new();
    for m in mods.values() {
        for item in &m.items {
            if let syn::Item::Impl(i) = item
                && !is_test(&i.attrs)
                && let Some(name) = self_name(&i.self_ty)
            {
                impls.entry(name).or_default().push(i.clone());
            }
        }
    }
    let mut lines = BTreeSet::new();
    let mut seen = BTreeSet::new();
    walk(&mods, "", "", None, &impls, &mut lines, &mut seen);
    lines.into_iter().collect()
}

/// Lists the public items of module `module` as seen at public path `public`.
fn walk(
    mods: &BTreeMap<String, Module>,
    module: &str,
    public: &str,
    feature: Option<String>,
    impls: &BTreeMap<String, Vec<syn::ItemImpl>>,
    lines: &mut BTreeSet<String>,
    seen: &mut BTreeSet<(String, String)>,
) {
    if !seen.insert((module.to_owned(), public.to_owned())) {
        return;
    }
    let Some(m) = mods.get(module) else { return };
    let feature = feature.or_else(|| m.feature.clone());
    for item in &m.items {
        emit(
            mods,
            module,
            public,
            feature.clone(),
            item,
            impls,
            lines,
            seen,
        );
    }
}

/// The definition of `name` as module `module` sees it: an item of its own, or one it
/// imports (`pub use edits::Device`), followed to where it is defined.
fn resolve(
    mods: &BTreeMap<String, Module>,
    module: &str,
    name: &str,
    depth: usize,
) -> Option<(String, syn::Item)> {
    let m = mods.get(module)?;
    if depth > 8 {
        return None;
    }
    if let Some(item) = m
        .items
        .iter()
        .find(|i| item_name(i).as_deref() == Some(name))
    {
        return Some((module.to_owned(), item.clone()));
    }
    for item in &m.items {
        let syn::Item::Use(u) = item else { continue };
        let mut targets = Vec::new();
        flatten(&u.tree, String::new(), &mut targets);
        for (path, alias) in targets {
            if alias != name {
                continue;
            }
            let full = match path.strip_prefix("crate::") {
                Some(p) => p.to_owned(),
                None => match path.strip_prefix("super::") {
                    Some(p) => join(module.rsplit_once("::").map_or("", |(parent, _)| parent), p),
                    None => join(module, &path),
                },
            };
            let (def_mod, leaf) = full.rsplit_once("::").unwrap_or(("", full.as_str()));
            if let Some(found) = resolve(mods, def_mod, leaf, depth + 1) {
                return Some(found);
            }
        }
    }
    None
}

/// A variant's fields without their docs: `(T, U)` or `{ a: T, b: U }`.
fn fields(fields: &syn::Fields) -> String {
    match fields {
        syn::Fields::Unit => String::new(),
        syn::Fields::Unnamed(f) => format!(
            "({})",
            f.unnamed
                .iter()
                .map(|f| tokens(&f.ty))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        syn::Fields::Named(f) => format!(
            " {{ {} }}",
            f.named
                .iter()
                .map(|f| format!(
                    "{}: {}",
                    f.ident.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                    tokens(&f.ty)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_owned()
    } else {
        format!("{a}::{b}")
    }
}

#[allow(clippy::too_many_arguments)]
fn emit(
    mods: &BTreeMap<String, Module>,
    module: &str,
    public: &str,
    feature: Option<String>,
    item: &syn::Item,
    impls: &BTreeMap<String, Vec<syn::ItemImpl>>,
    lines: &mut BTreeSet<String>,
    seen: &mut BTreeSet<(String, String)>,
) {
    let feature_of_item = |attrs: &[syn::Attribute]| feature_of(attrs).or_else(|| feature.clone());
    let tag = |f: &Option<String>| {
        f.as_ref()
            .map(|f| format!(" [feature {f}]"))
            .unwrap_or_default()
    };
    match item {
        syn::Item::Mod(m) if is_pub(&m.vis) && !is_test(&m.attrs) => {
            let f = feature_of_item(&m.attrs);
            let path = join(public, &m.ident.to_string());
            lines.insert(format!("mod {path}{}", tag(&f)));
            walk(
                mods,
                &join(module, &m.ident.to_string()),
                &path,
                f,
                impls,
                lines,
                seen,
            );
        }
        syn::Item::Use(u) if is_pub(&u.vis) => {
            let f = feature_of_item(&u.attrs);
            let mut targets = Vec::new();
            flatten(&u.tree, String::new(), &mut targets);
            for (path, alias) in targets {
                let path = path.trim_start_matches("crate::").to_owned();
                // Relative to this module unless it starts at the crate.
                let full = if u.tree.to_token_stream().to_string().starts_with("crate") {
                    path
                } else {
                    join(module, &path)
                };
                let (def_mod, name) = match full.rsplit_once("::") {
                    Some((m, n)) => (m.to_owned(), n.to_owned()),
                    None => (String::new(), full.clone()),
                };
                if mods.contains_key(&full) {
                    // A module re-exported whole.
                    let path = join(public, &alias);
                    lines.insert(format!("mod {path}{}", tag(&f)));
                    walk(mods, &full, &path, f.clone(), impls, lines, seen);
                    continue;
                }
                if let Some((def_mod, item)) = resolve(mods, &def_mod, &name, 0) {
                    let renamed = rename(&item, &alias);
                    emit(
                        mods,
                        &def_mod,
                        public,
                        f.clone(),
                        &renamed,
                        impls,
                        lines,
                        seen,
                    );
                }
            }
        }
        _ => {
            let Some(name) = item_name(item) else { return };
            if !item_is_pub(item) {
                return;
            }
            let path = join(public, &name);
            let f = feature_of_item(item_attrs(item));
            let t = tag(&f);
            let non_exhaustive = if has_attr(item_attrs(item), "non_exhaustive") {
                " #[non_exhaustive]"
            } else {
                ""
            };
            match item {
                syn::Item::Struct(s) => {
                    lines.insert(format!(
                        "struct {path}{}{non_exhaustive}{t}",
                        tokens(&s.generics)
                    ));
                    for field in s.fields.iter().filter(|f| is_pub(&f.vis)) {
                        let fname = field
                            .ident
                            .as_ref()
                            .map(|i| i.to_string())
                            .unwrap_or_default();
                        lines.insert(format!("field {path}.{fname}: {}{t}", tokens(&field.ty)));
                    }
                }
                syn::Item::Enum(e) => {
                    lines.insert(format!(
                        "enum {path}{}{non_exhaustive}{t}",
                        tokens(&e.generics)
                    ));
                    for v in &e.variants {
                        lines.insert(format!(
                            "variant {path}::{}{}{t}",
                            v.ident,
                            fields(&v.fields)
                        ));
                    }
                }
                syn::Item::Trait(tr) => {
                    lines.insert(format!("trait {path}{}{t}", tokens(&tr.generics)));
                    for ti in &tr.items {
                        match ti {
                            syn::TraitItem::Fn(f) => {
                                let ft = feature_of(&f.attrs)
                                    .map(|x| format!(" [feature {x}]"))
                                    .unwrap_or_else(|| t.clone());
                                lines.insert(format!("trait-fn {path}::{}{ft}", tokens(&f.sig)));
                            }
                            syn::TraitItem::Type(ty) => {
                                lines
                                    .insert(format!("trait-type {path}::{}{t}", tokens(&ty.ident)));
                            }
                            syn::TraitItem::Const(c) => {
                                lines.insert(format!(
                                    "trait-const {path}::{}: {}{t}",
                                    c.ident,
                                    tokens(&c.ty)
                                ));
                            }
                            _ => {}
                        }
                    }
                }
                syn::Item::Fn(func) => {
                    lines.insert(format!(
                        "fn {}{t}",
                        tokens(&func.sig).replacen(
                            &format!("fn {}", func.sig.ident),
                            &format!("fn {path}"),
                            1
                        )
                    ));
                }
                syn::Item::Const(c) => {
                    lines.insert(format!("const {path}: {}{t}", tokens(&c.ty)));
                }
                syn::Item::Type(ty) => {
                    lines.insert(format!("type {path} = {}{t}", tokens(&ty.ty)));
                }
                _ => {}
            }
            if let Some(derives) = derives(item_attrs(item)) {
                lines.insert(format!("derive {path}: {derives}{t}"));
            }
            let original = item_name(item).unwrap_or_default();
            for imp in impls.get(&original).into_iter().flatten() {
                let imp_feature = feature_of(&imp.attrs)
                    .map(Some)
                    .unwrap_or_else(|| f.clone());
                let it = tag(&imp_feature);
                match &imp.trait_ {
                    Some((_, trait_path, _)) => {
                        lines.insert(format!("impl {} for {path}{it}", tokens(trait_path)));
                    }
                    None => {
                        for ii in &imp.items {
                            if let syn::ImplItem::Fn(m) = ii
                                && is_pub(&m.vis)
                            {
                                let mt = feature_of(&m.attrs)
                                    .map(|x| format!(" [feature {x}]"))
                                    .unwrap_or_else(|| it.clone());
                                lines.insert(format!("method {path}::{}{mt}", tokens(&m.sig)));
                            }
                        }
                    }
                }
            }
        }
    }
}

fn derives(attrs: &[syn::Attribute]) -> Option<String> {
    let mut all = Vec::new();
    for a in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let text = a.meta.to_token_stream().to_string();
        let inner = match (text.find('('), text.rfind(')')) {
            (Some(open), Some(close)) if open < close => &text[open + 1..close],
            _ => "",
        };
        all.extend(
            inner
                .split(',')
                .map(|d| d.trim().replace(" :: ", "::"))
                .filter(|d| !d.is_empty()),
        );
    }
    (!all.is_empty()).then(|| all.join(", "))
}

fn flatten(tree: &syn::UseTree, prefix: String, out: &mut Vec<(String, String)>) {
    match tree {
        syn::UseTree::Path(p) => flatten(&p.tree, join(&prefix, &p.ident.to_string()), out),
        syn::UseTree::Name(n) => {
            out.push((join(&prefix, &n.ident.to_string()), n.ident.to_string()))
        }
        syn::UseTree::Rename(r) => {
            out.push((join(&prefix, &r.ident.to_string()), r.rename.to_string()))
        }
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| flatten(t, prefix.clone(), out)),
        syn::UseTree::Glob(_) => {}
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Struct(s) => s.ident.to_string(),
        syn::Item::Enum(e) => e.ident.to_string(),
        syn::Item::Trait(t) => t.ident.to_string(),
        syn::Item::Fn(f) => f.sig.ident.to_string(),
        syn::Item::Const(c) => c.ident.to_string(),
        syn::Item::Type(t) => t.ident.to_string(),
        syn::Item::Mod(m) => m.ident.to_string(),
        _ => return None,
    })
}

fn item_is_pub(item: &syn::Item) -> bool {
    match item {
        syn::Item::Struct(s) => is_pub(&s.vis),
        syn::Item::Enum(e) => is_pub(&e.vis),
        syn::Item::Trait(t) => is_pub(&t.vis),
        syn::Item::Fn(f) => is_pub(&f.vis),
        syn::Item::Const(c) => is_pub(&c.vis),
        syn::Item::Type(t) => is_pub(&t.vis),
        _ => false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Struct(s) => &s.attrs,
        syn::Item::Enum(e) => &e.attrs,
        syn::Item::Trait(t) => &t.attrs,
        syn::Item::Fn(f) => &f.attrs,
        syn::Item::Const(c) => &c.attrs,
        syn::Item::Type(t) => &t.attrs,
        syn::Item::Mod(m) => &m.attrs,
        _ => &[],
    }
}

/// The item under the name it is re-exported as.
fn rename(item: &syn::Item, alias: &str) -> syn::Item {
    let mut item = item.clone();
    let ident = syn::Ident::new(alias, proc_macro2::Span::call_site());
    match &mut item {
        syn::Item::Struct(s) if s.ident != alias => s.ident = ident,
        syn::Item::Enum(e) if e.ident != alias => e.ident = ident,
        syn::Item::Trait(t) if t.ident != alias => t.ident = ident,
        syn::Item::Fn(f) if f.sig.ident != alias => f.sig.ident = ident,
        _ => {}
    }
    item
}

/// Compares the crate's API with its committed `public-api.txt`, or rewrites the file.
pub fn check(crate_dir: &Path) {
    let api = public_api(crate_dir);
    let file = crate_dir.join("public-api.txt");
    let text = format!(
        "# The public API of this crate, one item a line ({} items): regenerate with\n# DRA_PUBLIC_API=write cargo test --test public_api, and name the change in CHANGELOG.md.\n{}\n",
        api.len(),
        api.join("\n")
    );
    if std::env::var("DRA_PUBLIC_API").as_deref() == Ok("write") {
        std::fs::write(&file, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    let old: BTreeSet<&str> = committed.lines().filter(|l| !l.starts_with('#')).collect();
    let new: BTreeSet<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let removed: Vec<&&str> = old.difference(&new).collect();
    let added: Vec<&&str> = new.difference(&old).collect();
    assert!(
        removed.is_empty() && added.is_empty(),
        "the public API of {} is not {}:\n  removed (a breaking change: the next release bumps the minor version while 0.x):\n    {}\n  added:\n    {}\nIf this is meant, rewrite the file with DRA_PUBLIC_API=write cargo test --test public_api and name the change in CHANGELOG.md.",
        crate_dir.display(),
        file.display(),
        removed
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n    "),
        added
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n    "),
    );
}
