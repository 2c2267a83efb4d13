//! The README, ARCHITECTURE.md and the manuals name files of the repository (`docs/pool.md`,
//! `crates/ksim-report/src/svg.rs`, links between manuals): each must exist, so a move or a
//! rename that leaves a manual pointing nowhere fails here.

use std::path::{Path, PathBuf};

use super::root;

/// Where a repository path in backticks starts.
const TOP: [&str; 5] = ["crates/", "services/", "deploy/", "docs/", "proto/"];

/// The README, ARCHITECTURE.md and every manual under `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// The repository paths `text` names: `` `crates/...` `` in code spans (not patterns with
/// `<`, `{` or `*`; a `:line` or `#anchor` suffix dropped), and the targets of relative links,
/// resolved against `dir`.
fn named_paths(text: &str, dir: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 1
            && TOP.iter().any(|top| span.starts_with(top))
            && !span.contains(char::is_whitespace)
            && !span.contains(['<', '>', '{', '}', '*'])
        {
            let path = span.split([':', '#']).next().unwrap_or(span);
            paths.push(root().join(path.trim_end_matches(['/', '.', ','])));
        }
    }
    for (at, _) in text.match_indices("](") {
        let Some((target, _)) = text[at + 2..].split_once(')') else {
            continue;
        };
        if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
            continue;
        }
        let file = target.split('#').next().unwrap_or(target);
        paths.push(dir.join(file));
    }
    paths
}

#[test]
fn every_file_the_manuals_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).expect("a readable manual");
        let dir = document.parent().expect("a document's directory");
        for path in named_paths(&text, dir) {
            checked += 1;
            if !path.exists() {
                missing.push(format!("{}: {}", document.display(), path.display()));
            }
        }
    }
    // The manuals name about a hundred files today; a parser that finds none checks nothing.
    assert!(checked >= 50, "only {checked} paths found");
    assert!(
        missing.is_empty(),
        "named but missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_missing_file_is_named_and_patterns_and_urls_are_not_paths() {
    let dir = root().join("docs");
    let text = "See `docs/pool.md`, `docs/nowhere.md:12`, `crates/<name>/src`, \
                [the pool](pool.md#top), [gone](gone.md) and [site](https://example.com/x).";
    let named: Vec<PathBuf> = named_paths(text, &dir);
    let missing: Vec<String> = named
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(named.len(), 4, "{named:?}");
    assert_eq!(missing, ["nowhere.md", "gone.md"]);
}

/// The files `docs/SUMMARY.md`'s links name, relative to `docs/`.
fn chapters(summary: &str) -> Vec<String> {
    summary
        .match_indices("](")
        .filter_map(|(at, _)| Some(summary[at + 2..].split_once(')')?.0.to_owned()))
        .collect()
}

#[test]
fn every_manual_is_a_chapter_of_the_book() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let chapters = chapters(&summary);
    let left_out: Vec<String> = documents()
        .iter()
        .filter(|path| path.parent() == Some(docs.as_path()))
        .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned()))
        .filter(|name| name != "SUMMARY.md" && !chapters.contains(name))
        .collect();
    assert!(
        left_out.is_empty(),
        "manuals docs/SUMMARY.md does not list (the book would leave them out): {left_out:?}"
    );
}

#[test]
fn chapters_are_the_summarys_link_targets() {
    let summary =
        "# Summary\n\n[Intro](introduction.md)\n\n- [The pool](pool.md)\n  - [Nested](a/b.md)\n";
    assert_eq!(chapters(summary), ["introduction.md", "pool.md", "a/b.md"]);
}
