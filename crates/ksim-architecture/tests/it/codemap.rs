//! ARCHITECTURE.md's "Every module" against the sources; `KSIM_UPDATE_CODEMAP=1` rewrites it.

use ksim_architecture::codemap::{self, BEGIN, Drift, END};

use super::{packages, root};

#[test]
fn architecture_md_lists_every_module_with_what_it_is_for() {
    let mut dirs: Vec<String> = packages().into_values().map(|p| p.dir).collect();
    dirs.sort();
    let (list, undocumented) = codemap::generated(&root(), &dirs).expect("the crates' sources");
    assert!(
        undocumented.is_empty(),
        "modules without a doc comment saying what they are for (`//!` at the top):\n{}",
        undocumented.join("\n")
    );
    let path = root().join("ARCHITECTURE.md");
    let page = std::fs::read_to_string(&path).expect("ARCHITECTURE.md");
    match codemap::drift(&page, &list) {
        Drift::Current => {}
        Drift::NoMarkers => {
            panic!("ARCHITECTURE.md lacks the markers of its module list:\n{BEGIN}\n{END}")
        }
        Drift::Stale { updated, .. } if std::env::var_os("KSIM_UPDATE_CODEMAP").is_some() => {
            std::fs::write(&path, updated).expect("ARCHITECTURE.md is writable");
        }
        Drift::Stale { lacking, .. } => panic!(
            "ARCHITECTURE.md's module list is out of date (KSIM_UPDATE_CODEMAP=1 cargo test -p \
             ksim-architecture --test it codemap rewrites it); lines it lacks:\n{}",
            lacking.join("\n")
        ),
    }
}
