//! No module cycles: in each crate, the modules under one parent use each other in one
//! direction only. A module may use its ancestors and its descendants freely; what is checked is
//! every sibling pair, at every depth. A module's uses are the paths in its parsed source that
//! start at `crate`, `super` or `self` (`use` trees and paths in code; not doc links, not the
//! the paths inside macro calls, `format!("{}", super::b::X)` as much as code). `#[cfg(test)]`
//! items and modules are left out: tests may reach across.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    path::{Path, PathBuf},
};

use syn::{
    Attribute, ImplItemFn, Item, ItemUse, UseTree, parse::Parser, punctuated::Punctuated,
    visit::Visit,
};

use crate::Error;

/// A module's path from its crate root (the root itself is empty).
pub type ModPath = Vec<String>;

/// One path in a module's source that names something of the crate: where it starts (the
/// module `crate`, `super` or `self` resolves to) and the segments after that.
struct Use {
    from: ModPath,
    base: ModPath,
    rest: Vec<String>,
    file: PathBuf,
}

/// What one walk of a crate's sources found.
#[derive(Debug, Default)]
pub struct Crate {
    pub modules: BTreeSet<ModPath>,
    uses: Vec<Use>,
    /// Each module's own doc comment (`//!`, or `///` on an inline `mod`), as written.
    pub docs: BTreeMap<ModPath, String>,
    /// Every path each file names outside its tests, as written (`use` trees in full).
    pub paths: BTreeMap<PathBuf, BTreeSet<Vec<String>>>,
}

impl std::fmt::Debug for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} -> {:?}::{:?}", self.from, self.base, self.rest)
    }
}

impl Crate {
    /// Every path a file of this crate names (`in_file` picks the files, by their path relative
    /// to `relative_to`) that `finding` says something of, one line each: `file: `path` finding`.
    pub fn findings(
        &self,
        relative_to: &Path,
        in_file: impl Fn(&Path) -> bool,
        finding: impl Fn(&[String]) -> Option<String>,
    ) -> Vec<String> {
        let mut found = Vec::new();
        for (file, paths) in &self.paths {
            let shown = file.strip_prefix(relative_to).unwrap_or(file);
            if !in_file(shown) {
                continue;
            }
            for path in paths {
                if let Some(what) = finding(path) {
                    found.push(format!("{}: `{}` {what}", shown.display(), path.join("::")));
                }
            }
        }
        found
    }

    /// The crate whose root file is `root_file`, with every module its `mod` items declare.
    pub fn read(root_file: &Path) -> Result<Self, Error> {
        let mut krate = Self::default();
        let dir = root_file.parent().unwrap_or(Path::new("."));
        krate.read_file(root_file, Vec::new(), dir.to_path_buf())?;
        Ok(krate)
    }

    /// Module `module`, whose source is `file` and whose children's files are in `dir`.
    fn read_file(&mut self, file: &Path, module: ModPath, dir: PathBuf) -> Result<(), Error> {
        let source = crate::read(file)?;
        let parsed = syn::parse_file(&source).map_err(|source| Error::Parse {
            path: file.to_path_buf(),
            source,
        })?;
        self.docs.insert(module.clone(), doc(&parsed.attrs));
        self.read_items(&parsed.items, file, module, dir)
    }

    fn read_items(
        &mut self,
        items: &[Item],
        file: &Path,
        module: ModPath,
        dir: PathBuf,
    ) -> Result<(), Error> {
        self.modules.insert(module.clone());
        let mut visitor = Visitor {
            module: &module,
            file,
            uses: Vec::new(),
            paths: BTreeSet::new(),
            children: Vec::new(),
        };
        for item in items {
            visitor.visit_item(item);
        }
        let (uses, paths, children) = (visitor.uses, visitor.paths, visitor.children);
        self.uses.extend(uses);
        self.paths
            .entry(file.to_path_buf())
            .or_default()
            .extend(paths);
        for child in children {
            let mut path = module.clone();
            path.push(child.name.clone());
            let child_dir = dir.join(&child.name);
            match child.inline {
                Some(items) => {
                    self.docs.insert(path.clone(), doc(&child.attrs));
                    self.read_items(&items, file, path, child_dir)?;
                }
                None => {
                    let flat = dir.join(format!("{}.rs", child.name));
                    let nested = child_dir.join("mod.rs");
                    let source = if flat.is_file() { flat } else { nested };
                    self.read_file(&source, path, child_dir)?;
                }
            }
        }
        Ok(())
    }

    /// The module a use names: its base, extended by each segment that is a module under it.
    fn target(&self, used: &Use) -> ModPath {
        let mut target = used.base.clone();
        for segment in &used.rest {
            target.push(segment.clone());
            if !self.modules.contains(&target) {
                target.pop();
                break;
            }
        }
        target
    }

    /// Between siblings: for each use that crosses from one subtree to another under a common
    /// parent, the pair of siblings it joins, and a file where it happens.
    fn sibling_edges(&self) -> BTreeMap<(ModPath, ModPath), PathBuf> {
        let mut edges = BTreeMap::new();
        for used in &self.uses {
            let target = self.target(used);
            let common = used
                .from
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common < used.from.len() && common < target.len() {
                let edge = (used.from[..=common].to_vec(), target[..=common].to_vec());
                edges.entry(edge).or_insert_with(|| used.file.clone());
            }
        }
        edges
    }
}

/// A `mod` item to read after the current file.
struct Child {
    name: String,
    /// The items of `mod name { ... }`; `None` for `mod name;`.
    inline: Option<Vec<Item>>,
    attrs: Vec<Attribute>,
}

/// The doc comment in `attrs`, its lines joined by newlines.
fn doc(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .filter_map(|attr| match &attr.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(text),
                        ..
                    }),
                ..
            }) => Some(text.value()),
            _ => None,
        })
        .collect();
    lines.join("\n")
}

struct Visitor<'a> {
    module: &'a ModPath,
    file: &'a Path,
    uses: Vec<Use>,
    paths: BTreeSet<Vec<String>>,
    children: Vec<Child>,
}

impl Visitor<'_> {
    fn record(&mut self, segments: Vec<String>) {
        self.paths.insert(segments.clone());
        let Some(first) = segments.first() else {
            return;
        };
        let (base, skip) = match first.as_str() {
            "crate" => (Vec::new(), 1),
            "self" => (self.module.clone(), 1),
            "super" => {
                let up = segments.iter().take_while(|s| *s == "super").count();
                let kept = self.module.len().saturating_sub(up);
                (self.module[..kept].to_vec(), up)
            }
            _ => return,
        };
        self.uses.push(Use {
            from: self.module.clone(),
            base,
            rest: segments[skip..].to_vec(),
            file: self.file.to_path_buf(),
        });
    }
}

/// The paths among a macro call's tokens: each run of identifiers joined by `::`, at any depth
/// of brackets. Tokens need not parse as Rust, so this reads what `format!`, `write!`,
/// `assert!` or a crate's own macro name however their arguments are shaped.
fn token_paths(tokens: proc_macro2::TokenStream, out: &mut Vec<Vec<String>>) {
    use proc_macro2::{Spacing, TokenTree};
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut path: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Ident(ident) => {
                let continues = path.is_empty()
                    || matches!(&tokens[i.saturating_sub(1)], TokenTree::Punct(p) if p.as_char() == ':');
                if !continues {
                    out.push(std::mem::take(&mut path));
                }
                path.push(ident.to_string());
                i += 1;
            }
            // `::` between two segments: two `:`, the first joint to the second.
            TokenTree::Punct(p)
                if p.as_char() == ':'
                    && p.spacing() == Spacing::Joint
                    && !path.is_empty()
                    && matches!(tokens.get(i + 1), Some(TokenTree::Punct(q)) if q.as_char() == ':')
                    && matches!(tokens.get(i + 2), Some(TokenTree::Ident(_))) =>
            {
                i += 2;
            }
            other => {
                if !path.is_empty() {
                    out.push(std::mem::take(&mut path));
                }
                if let TokenTree::Group(group) = other {
                    token_paths(group.stream(), out);
                }
                i += 1;
            }
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// Every full path a `use` tree names (a group or glob ends where it branches).
fn use_paths(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        // `use a::b as c` names `a::b`, as `use a::b` does.
        UseTree::Name(syn::UseName { ident, .. })
        | UseTree::Rename(syn::UseRename { ident, .. }) => {
            let mut full = prefix.clone();
            full.push(ident.to_string());
            out.push(full);
        }
        UseTree::Glob(_) => out.push(prefix.clone()),
        UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

fn item_attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Visitor<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        if is_test_only(item_attrs(item)) {
            return;
        }
        match item {
            // Read as modules of their own, after this one.
            Item::Mod(module) => self.children.push(Child {
                name: module.ident.to_string(),
                inline: module.content.as_ref().map(|(_, items)| items.clone()),
                attrs: module.attrs.clone(),
            }),
            other => syn::visit::visit_item(self, other),
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast ImplItemFn) {
        if !is_test_only(&function.attrs) {
            syn::visit::visit_impl_item_fn(self, function);
        }
    }

    fn visit_item_use(&mut self, item: &'ast ItemUse) {
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for path in paths {
            self.record(path);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Arguments that parse as expressions (`format!`, `assert!`, `vec!`) are visited as
        // code; any others are read token by token.
        let parser = Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        match parser.parse2(mac.tokens.clone()) {
            Ok(args) => {
                for arg in &args {
                    self.visit_expr(arg);
                }
            }
            Err(_) => {
                let mut paths = Vec::new();
                token_paths(mac.tokens.clone(), &mut paths);
                for path in paths {
                    self.record(path);
                }
            }
        }
        syn::visit::visit_macro(self, mac);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.record(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }
}

/// A way back from `to` to `from` over `edges`, if there is one: the modules on it in order.
fn way_back(
    edges: &BTreeMap<(ModPath, ModPath), PathBuf>,
    from: &ModPath,
    to: &ModPath,
) -> Option<Vec<ModPath>> {
    let mut previous: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = VecDeque::from([to]);
    while let Some(at) = queue.pop_front() {
        if at == from {
            let mut way = vec![at.clone()];
            let mut step = at;
            while let Some(before) = previous.get(step) {
                way.push((*before).clone());
                step = before;
            }
            way.reverse();
            return Some(way);
        }
        for (a, b) in edges.keys() {
            if a == at && b != to && !previous.contains_key(b) {
                previous.insert(b, a);
                queue.push_back(b);
            }
        }
    }
    None
}

fn name(module: &ModPath) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// The cycles among `krate`'s sibling modules, one line each.
pub fn cycles(krate: &Crate) -> BTreeSet<String> {
    let edges = krate.sibling_edges();
    // One line per set of modules in a cycle, from the first of its uses found.
    let mut found = BTreeMap::new();
    for ((a, b), file) in &edges {
        if let Some(way) = way_back(&edges, a, b) {
            let members: BTreeSet<String> = way.iter().map(name).collect();
            let members = members.into_iter().collect::<Vec<_>>().join(", ");
            let back = way.iter().map(name).collect::<Vec<_>>().join(" -> ");
            found.entry(members.clone()).or_insert_with(|| {
                format!(
                    "{{{members}}}: {} -> {back} (the first in {})",
                    name(a),
                    file.display()
                )
            });
        }
    }
    found.into_values().collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn krate(sources: &[(&str, &str)]) -> Crate {
        let dir = crate::plant(sources);
        Crate::read(&dir.path().join("lib.rs")).unwrap()
    }

    #[test]
    fn a_cycle_between_siblings_is_found_and_a_use_of_a_parent_is_not_one() {
        let looped = krate(&[
            ("lib.rs", "pub mod a; pub mod b; pub use a::A;"),
            (
                "a.rs",
                "pub struct A; pub mod inner { fn f() -> crate::b::B { todo!() } }",
            ),
            ("b/mod.rs", "use super::a::inner; pub struct B;"),
        ]);
        let found = cycles(&looped);
        assert!(
            found.iter().any(|c| c.starts_with("{a, b}: a -> b -> a")),
            "{found:?}"
        );
        let layered = krate(&[
            ("lib.rs", "pub mod a; pub mod b; pub struct Root;"),
            (
                "a.rs",
                "use crate::Root; use crate::b::B; /// [`crate::a`] only in a doc\n pub struct A;",
            ),
            (
                "b.rs",
                "pub struct B; #[cfg(test)] mod tests { use crate::a::A; }",
            ),
        ]);
        assert_eq!(cycles(&layered), BTreeSet::new());
    }

    /// The way back hidden in a macro call, as `format!` hid `store` -> `cluster` in the ksim CLI.
    #[test]
    fn a_use_inside_a_macro_call_closes_a_cycle() {
        for call in [
            r#"format!("{}", super::a::NAME)"#,
            r#"format!("{x}", x = crate::a::NAME)"#,
            "assert!(crate::a::NAME.is_empty())",
            // Not an expression list: read token by token.
            "serde_json::json!({ \"k\": crate::a::NAME })",
            "my_macro!(=> [crate::a::NAME] ;)",
        ] {
            let b = format!("pub fn f() {{ let _ = {call}; }}");
            let looped = krate(&[
                ("lib.rs", "pub mod a; pub mod b;"),
                (
                    "a.rs",
                    "pub const NAME: &str = \"\"; fn g() { crate::b::f() }",
                ),
                ("b.rs", &b),
            ]);
            let found = cycles(&looped);
            assert!(
                found.iter().any(|c| c.starts_with("{a, b}:")),
                "{call}: {found:?}"
            );
        }
    }

    #[test]
    fn a_macro_calls_tokens_are_read_as_paths() {
        let mut paths = Vec::new();
        let tokens: proc_macro2::TokenStream = "a::b, (c :: d) x; e [f::g::h]".parse().unwrap();
        token_paths(tokens, &mut paths);
        let expected: Vec<Vec<&str>> = vec![
            vec!["a", "b"],
            vec!["c", "d"],
            vec!["x"],
            vec!["e"],
            vec!["f", "g", "h"],
        ];
        assert_eq!(paths, expected);
    }
}
