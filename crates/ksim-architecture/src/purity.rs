//! Domain modules are pure: every file under a `domain/` directory, and every `domain.rs`,
//! names no Kubernetes client, no gRPC and no clock; the time a rule needs is passed in, so it
//! is unit-tested without waiting. `#[cfg(test)]` items are left out, as in the cycle check.

use std::path::{Component, Path};

use crate::modules::Crate;

/// Crates a domain module may not name: the Kubernetes client and gRPC. Object types are data
/// and allowed: `k8s_openapi`, and `kube::core` (kube's client-free half: selectors, durations).
const CLIENTS: [&str; 5] = [
    "kube",
    "kube_client",
    "kube_runtime",
    "tonic",
    "tonic_health",
];

/// Paths that read a clock or wait: matched anywhere in a path, so `Instant::now` counts
/// whether written in full or after a `use std::time::Instant`.
const CLOCKS: [&[&str]; 7] = [
    &["tokio", "time"],
    &["Instant", "now"],
    &["SystemTime", "now"],
    &["Utc", "now"],
    &["Local", "now"],
    &["thread", "sleep"],
    &["UNIX_EPOCH", "elapsed"],
];

fn is_domain(file: &Path) -> bool {
    file.file_name().is_some_and(|name| name == "domain.rs")
        || file
            .components()
            .any(|c| matches!(c, Component::Normal(name) if name == "domain"))
}

/// What `path` reaches that a domain module may not, if anything.
fn impurity(path: &[String]) -> Option<String> {
    let first = path.first()?;
    let data = first == "kube" && path.get(1).is_some_and(|second| second == "core");
    if CLIENTS.contains(&first.as_str()) && !data {
        return Some(format!("`{first}` (a client)"));
    }
    CLOCKS.iter().find_map(|clock| {
        path.windows(clock.len())
            .any(|window| window.iter().zip(clock.iter()).all(|(a, b)| a == b))
            .then(|| format!("`{}` (a clock)", clock.join("::")))
    })
}

/// Every impure path in `krate`'s domain files, one line each: `file: path names what`.
pub fn impurities(krate: &Crate, relative_to: &Path) -> Vec<String> {
    krate.findings(relative_to, is_domain, |path| {
        impurity(path).map(|what| format!("names {what}"))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn found(files: &[(&str, &str)]) -> Vec<String> {
        let dir = crate::plant(files);
        let krate = Crate::read(&dir.path().join("src/lib.rs")).unwrap();
        impurities(&krate, dir.path())
    }

    #[test]
    fn a_client_or_a_clock_in_a_domain_module_is_found() {
        let planted = found(&[
            ("src/lib.rs", "mod domain; mod adapter;"),
            (
                "src/domain/mod.rs",
                "mod rules; use kube::{Api, core::Selector}; pub fn f(now: std::time::Instant) {}",
            ),
            (
                "src/domain/rules.rs",
                "use std::time::Instant; fn g() { let _ = format!(\"{:?}\", Instant::now()); }",
            ),
            // Outside `domain/` a client is the point.
            (
                "src/adapter.rs",
                "use kube::Api; fn h() { tokio::time::sleep(d); }",
            ),
        ]);
        assert_eq!(
            planted,
            [
                "src/domain/mod.rs: `kube::Api` names `kube` (a client)",
                "src/domain/rules.rs: `Instant::now` names `Instant::now` (a clock)",
            ]
        );
    }

    #[test]
    fn a_domain_rs_counts_and_its_tests_do_not() {
        let planted = found(&[
            ("src/lib.rs", "mod domain;"),
            (
                "src/domain.rs",
                "fn f() { tokio::time::sleep(d); }\n\
                 #[cfg(test)] mod tests { fn t() { std::time::SystemTime::now(); } }",
            ),
        ]);
        assert_eq!(
            planted,
            ["src/domain.rs: `tokio::time::sleep` names `tokio::time` (a clock)"]
        );
    }
}
