//! ARCHITECTURE.md's list of every module is generated from the modules themselves: each one's
//! first doc sentence, crate by crate. A module added, moved or removed without the list, or a
//! module that does not say what it is for, fails here; `KSIM_UPDATE_CODEMAP=1` rewrites the
//! list (review the diff like any other).

use super::{
    modules::{Crate, ModPath},
    root, workspace,
};

const BEGIN: &str = "<!-- every module: generated from the sources by \
crates/ksim-e2e/tests/it/architecture/codemap.rs; KSIM_UPDATE_CODEMAP=1 rewrites it -->";
const END: &str = "<!-- end of every module -->";

/// The first sentence of a doc comment's first paragraph, on one line; intra-doc link brackets
/// dropped.
fn first_sentence(doc: &str) -> String {
    let paragraph: Vec<&str> = doc
        .lines()
        .map(str::trim)
        .skip_while(|line| line.is_empty())
        .take_while(|line| !line.is_empty())
        .collect();
    let paragraph = paragraph.join(" ");
    // A sentence ends at ". ", but not after "e.g" or "i.e".
    let end = paragraph
        .match_indices(". ")
        .map(|(at, _)| at)
        .find(|&at| !paragraph[..at].ends_with("e.g") && !paragraph[..at].ends_with("i.e"));
    let sentence = match end {
        Some(end) => &paragraph[..=end],
        None => paragraph.as_str(),
    };
    sentence.replace("[`", "`").replace("`]", "`")
}

fn name(module: &ModPath) -> String {
    if module.is_empty() {
        "(the crate)".to_owned()
    } else {
        format!("`{}`", module.join("::"))
    }
}

/// The generated list, and the modules whose doc says nothing.
fn generated() -> (String, Vec<String>) {
    let mut packages: Vec<_> = workspace().into_values().map(|p| p.dir).collect();
    packages.sort();
    let mut text = String::new();
    let mut undocumented = Vec::new();
    for dir in packages {
        let src = root().join(&dir).join("src");
        let Some(root_file) = ["lib.rs", "main.rs"]
            .map(|file| src.join(file))
            .into_iter()
            .find(|file| file.is_file())
        else {
            continue;
        };
        let krate = Crate::read(&root_file);
        text.push_str(&format!("\n**`{dir}`**\n\n"));
        for module in &krate.modules {
            let doc = krate.docs.get(module).map(String::as_str).unwrap_or("");
            let sentence = first_sentence(doc);
            if sentence.is_empty() {
                undocumented.push(format!("{dir}: {}", name(module)));
            }
            text.push_str(&format!("- {}: {sentence}\n", name(module)));
        }
    }
    (text, undocumented)
}

#[test]
fn architecture_md_lists_every_module_with_what_it_is_for() {
    let (list, undocumented) = generated();
    assert!(
        undocumented.is_empty(),
        "modules without a doc comment saying what they are for (`//!` at the top):\n{}",
        undocumented.join("\n")
    );
    let path = root().join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("ARCHITECTURE.md");
    let (Some(begin), Some(end)) = (text.find(BEGIN), text.find(END)) else {
        panic!("ARCHITECTURE.md lacks the markers of its module list:\n{BEGIN}\n{END}");
    };
    let current = &text[begin + BEGIN.len()..end];
    let wanted = format!("{list}\n");
    if current == wanted {
        return;
    }
    if std::env::var_os("KSIM_UPDATE_CODEMAP").is_some() {
        let updated = format!("{}{BEGIN}{wanted}{}", &text[..begin], &text[end..]);
        std::fs::write(&path, updated).expect("ARCHITECTURE.md is writable");
        return;
    }
    let stale: Vec<&str> = wanted
        .lines()
        .filter(|line| !current.lines().any(|have| have == *line))
        .collect();
    panic!(
        "ARCHITECTURE.md's module list is out of date (KSIM_UPDATE_CODEMAP=1 cargo test -p \
         ksim-e2e --test it architecture::codemap rewrites it); lines it lacks:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_modules_entry_is_its_docs_first_sentence() {
    let doc = " Plays the kubelet for [`Pod`]s. More after\n that.\n\n Another paragraph.";
    assert_eq!(first_sentence(doc), "Plays the kubelet for `Pod`s.");
    assert_eq!(
        first_sentence(" One line, no period"),
        "One line, no period"
    );
    assert_eq!(
        first_sentence("Units, e.g. `ms`. Then."),
        "Units, e.g. `ms`."
    );
    assert_eq!(first_sentence(""), "");
}
