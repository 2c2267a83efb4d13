//! No module cycles: in each crate, the modules under one parent use each other in one
//! direction only. A module may use its ancestors and its descendants freely; what is checked is
//! every sibling pair, at every depth. A module's uses are the paths in its parsed source that
//! start at `crate`, `super` or `self` (`use` trees and paths in code; not doc links, not the
//! tokens inside macro calls). `#[cfg(test)]` items and modules are left out: tests may reach
//! across.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    path::{Path, PathBuf},
};

use syn::{Attribute, ImplItemFn, Item, ItemUse, UseTree, visit::Visit};

use super::{root, workspace};

/// A module's path from its crate root (the root itself is empty).
pub(super) type ModPath = Vec<String>;

/// One path in a module's source that names something of the crate: where it starts (the
/// module `crate`, `super` or `self` resolves to) and the segments after that.
struct Use {
    from: ModPath,
    base: ModPath,
    rest: Vec<String>,
    file: PathBuf,
}

/// What one walk of a crate's sources found.
#[derive(Default)]
pub(super) struct Crate {
    pub(super) modules: BTreeSet<ModPath>,
    uses: Vec<Use>,
    /// Each module's own doc comment (`//!`, or `///` on an inline `mod`), as written.
    pub(super) docs: BTreeMap<ModPath, String>,
}

impl Crate {
    /// The crate whose root file is `root_file`, with every module its `mod` items declare.
    pub(super) fn read(root_file: &Path) -> Self {
        let mut krate = Self::default();
        let dir = root_file.parent().expect("a root file has a directory");
        krate.read_file(root_file, Vec::new(), dir.to_path_buf());
        krate
    }

    /// Module `module`, whose source is `file` and whose children's files are in `dir`.
    fn read_file(&mut self, file: &Path, module: ModPath, dir: PathBuf) {
        let source =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let parsed = syn::parse_file(&source).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.docs.insert(module.clone(), doc(&parsed.attrs));
        self.read_items(&parsed.items, file, module, dir);
    }

    fn read_items(&mut self, items: &[Item], file: &Path, module: ModPath, dir: PathBuf) {
        self.modules.insert(module.clone());
        let mut visitor = Visitor {
            module: &module,
            file,
            uses: Vec::new(),
            children: Vec::new(),
        };
        for item in items {
            visitor.visit_item(item);
        }
        let (uses, children) = (visitor.uses, visitor.children);
        self.uses.extend(uses);
        for child in children {
            let mut path = module.clone();
            path.push(child.name.clone());
            let child_dir = dir.join(&child.name);
            match child.inline {
                Some(items) => {
                    self.docs.insert(path.clone(), doc(&child.attrs));
                    self.read_items(&items, file, path, child_dir);
                }
                None => {
                    let flat = dir.join(format!("{}.rs", child.name));
                    let nested = child_dir.join("mod.rs");
                    let source = if flat.is_file() { flat } else { nested };
                    self.read_file(&source, path, child_dir);
                }
            }
        }
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
    children: Vec<Child>,
}

impl Visitor<'_> {
    fn record(&mut self, segments: Vec<String>) {
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
fn cycles(krate: &Crate) -> BTreeSet<String> {
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

#[test]
fn no_module_uses_a_sibling_that_uses_it_back() {
    let mut all = Vec::new();
    let mut roots = 0;
    for (package, found) in workspace() {
        let src = root().join(&found.dir).join("src");
        for root_file in ["lib.rs", "main.rs"].map(|f| src.join(f)) {
            if !root_file.is_file() {
                continue;
            }
            roots += 1;
            let krate = Crate::read(&root_file);
            for cycle in cycles(&krate) {
                all.push(format!("{package} ({}): {cycle}", root_file.display()));
            }
        }
    }
    assert!(roots >= 15, "crate roots read: {roots}");
    assert!(
        all.is_empty(),
        "module cycles (move what both sides need below them, or to a module of its own):\n{}",
        all.join("\n")
    );
}

#[test]
fn a_cycle_between_siblings_is_found_and_a_use_of_a_parent_is_not_one() {
    let krate = |sources: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        for (file, text) in sources {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Crate::read(&dir.path().join("lib.rs"))
    };
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
