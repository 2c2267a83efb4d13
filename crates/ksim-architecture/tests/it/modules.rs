//! The module rules, over every crate's sources: no module cycles, pure domain modules, and
//! gRPC served by services alone.

use ksim_architecture::{modules::Crate, purity, servers};

use super::{crate_roots, packages, root};

#[test]
fn no_module_uses_a_sibling_that_uses_it_back() {
    let roots = crate_roots();
    assert!(roots.len() >= 15, "crate roots read: {}", roots.len());
    let mut all = Vec::new();
    for (package, root_file) in roots {
        let krate = Crate::read(&root_file).expect("a crate's sources");
        for cycle in ksim_architecture::modules::cycles(&krate) {
            all.push(format!("{package} ({}): {cycle}", root_file.display()));
        }
    }
    assert!(
        all.is_empty(),
        "module cycles (move what both sides need below them, or to a module of its own):\n{}",
        all.join("\n")
    );
}

#[test]
fn domain_modules_name_no_client_and_no_clock() {
    let mut all = Vec::new();
    let mut domain_files = 0;
    for (_, root_file) in crate_roots() {
        let krate = Crate::read(&root_file).expect("a crate's sources");
        domain_files += krate
            .paths
            .keys()
            .filter(|f| f.components().any(|c| c.as_os_str() == "domain"))
            .count();
        all.extend(purity::impurities(&krate, &root()));
    }
    // Four services have a `domain/` today; a walk that finds none checks nothing.
    assert!(domain_files >= 10, "domain files read: {domain_files}");
    assert!(
        all.is_empty(),
        "domain modules must stay pure (pass the time in; reach the cluster from an adapter):\n{}",
        all.join("\n")
    );
}

/// The CLI is a client: it parses, calls and prints. An API it served would be a service
/// without a crate of its own (the environment's is `ksim-env`).
#[test]
fn the_cli_serves_no_grpc_api() {
    let packages = packages();
    let cli = packages.get("ksim").expect("the CLI's package");
    let main = root().join(&cli.dir).join("src/main.rs");
    let krate = Crate::read(&main).expect("the CLI's sources");
    assert!(
        krate.paths.len() >= 20,
        "CLI files read: {}",
        krate.paths.len()
    );
    let found = servers::servers(&krate, &root());
    assert!(
        found.is_empty(),
        "the CLI serves gRPC; move the server to a service crate and call it:\n{}",
        found.join("\n")
    );
}
