//! A workspace's own packages as cargo sees them (`cargo metadata`), and the rule between them
//! that needs no list: no service depends on another.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

use serde_json::Value;

use crate::Error;

/// One package of the workspace.
#[derive(Debug)]
pub struct Package {
    /// `crates/<name>` or `services/<name>`.
    pub dir: String,
    /// Workspace packages it depends on, by kind (`normal`, `dev`, `build`).
    pub ours: BTreeSet<(String, String)>,
    /// Every dependency it has as a normal one.
    pub normal: BTreeSet<String>,
    /// Its test targets.
    pub tests: BTreeSet<String>,
}

impl Package {
    pub fn is_service(&self) -> bool {
        self.dir.starts_with("services/")
    }
}

fn field<'a>(value: &'a Value, name: &str) -> Result<&'a Value, Error> {
    value
        .get(name)
        .ok_or_else(|| Error::Metadata(format!("no `{name}` in its output")))
}

fn text<'a>(value: &'a Value, name: &str) -> Result<&'a str, Error> {
    field(value, name)?
        .as_str()
        .ok_or_else(|| Error::Metadata(format!("`{name}` is not a string")))
}

fn list<'a>(value: &'a Value, name: &str) -> Result<&'a Vec<Value>, Error> {
    field(value, name)?
        .as_array()
        .ok_or_else(|| Error::Metadata(format!("`{name}` is not a list")))
}

/// The packages of the workspace at `root`, by name.
pub fn read(root: &Path) -> Result<BTreeMap<String, Package>, Error> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| Error::Metadata(e.to_string()))?;
    if !output.status.success() {
        return Err(Error::Metadata(
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).map_err(|e| Error::Metadata(e.to_string()))?;
    let root = Path::new(text(&metadata, "workspace_root")?);
    let packages = list(&metadata, "packages")?;
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut found = BTreeMap::new();
    for p in packages {
        let manifest = Path::new(text(p, "manifest_path")?);
        let dir = manifest
            .parent()
            .and_then(|d| d.strip_prefix(root).ok())
            .ok_or_else(|| {
                Error::Metadata(format!("{} is outside the workspace", manifest.display()))
            })?
            .to_string_lossy()
            .into_owned();
        let deps = list(p, "dependencies")?;
        let kind = |d: &Value| d["kind"].as_str().unwrap_or("normal").to_owned();
        let ours = deps
            .iter()
            .filter(|d| names.contains(d["name"].as_str().unwrap_or_default()))
            .map(|d| (d["name"].as_str().unwrap_or_default().to_owned(), kind(d)))
            .collect();
        let normal = deps
            .iter()
            .filter(|d| kind(d) == "normal")
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect();
        let tests = list(p, "targets")?
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&"test".into()))
            })
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        let package = Package {
            dir,
            ours,
            normal,
            tests,
        };
        found.insert(text(p, "name")?.to_owned(), package);
    }
    Ok(found)
}

/// Every dependency of a package on a service crate, one line each. Only `ksim-e2e` may have
/// them, as dev-dependencies: it starts the services in-process.
pub fn service_dependencies(packages: &BTreeMap<String, Package>) -> Vec<String> {
    let services: BTreeSet<&str> = packages
        .iter()
        .filter(|(_, p)| p.is_service())
        .map(|(name, _)| name.as_str())
        .collect();
    let mut found = Vec::new();
    for (name, package) in packages {
        for (dep, kind) in &package.ours {
            let allowed = name == "ksim-e2e" && kind == "dev";
            if services.contains(dep.as_str()) && !allowed {
                found.push(format!("{name} depends on service {dep} ({kind})"));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn manifest(name: &str, deps: &str) -> String {
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [lib]\npath = \"src/lib.rs\"\n\n{deps}\n"
        )
    }

    #[test]
    fn a_service_that_depends_on_another_is_found() {
        let workspace = "[workspace]\nresolver = \"3\"\nmembers = [\"crates/*\", \"services/*\"]\n";
        let mut files = vec![
            ("Cargo.toml".to_owned(), workspace.to_owned()),
            (
                "crates/shared/Cargo.toml".to_owned(),
                manifest("shared", ""),
            ),
            (
                "services/a/Cargo.toml".to_owned(),
                manifest(
                    "a",
                    "[dependencies]\nshared = { path = \"../../crates/shared\" }",
                ),
            ),
            // The violation: a service on another, even for its tests.
            (
                "services/b/Cargo.toml".to_owned(),
                manifest("b", "[dev-dependencies]\na = { path = \"../a\" }"),
            ),
            (
                "crates/ksim-e2e/Cargo.toml".to_owned(),
                manifest(
                    "ksim-e2e",
                    "[dev-dependencies]\na = { path = \"../../services/a\" }",
                ),
            ),
        ];
        for dir in [
            "crates/shared",
            "services/a",
            "services/b",
            "crates/ksim-e2e",
        ] {
            files.push((format!("{dir}/src/lib.rs"), String::new()));
        }
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str()))
            .collect();
        let tree = crate::plant(&files);
        let packages = read(tree.path()).unwrap();
        assert_eq!(packages.len(), 4, "{packages:?}");
        assert!(packages["a"].is_service());
        assert_eq!(
            service_dependencies(&packages),
            ["b depends on service a (dev)"]
        );
    }
}
