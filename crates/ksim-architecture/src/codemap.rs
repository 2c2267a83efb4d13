//! The list of every module in ARCHITECTURE.md, generated from the modules themselves: each
//! one's first doc sentence, crate by crate, and how the page stands against it. The test
//! binary fails on a module added, moved or removed without the list, or one that does not say
//! what it is for; `KSIM_UPDATE_CODEMAP=1` rewrites the list (review the diff like any other).

use std::path::Path;

use crate::{
    Error,
    modules::{Crate, ModPath},
};

/// Where the generated list starts in ARCHITECTURE.md.
pub const BEGIN: &str = "<!-- every module: generated from the sources by \
crates/ksim-architecture/src/codemap.rs; KSIM_UPDATE_CODEMAP=1 rewrites it -->";
/// Where it ends.
pub const END: &str = "<!-- end of every module -->";

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

/// The list generated from the crates in `dirs` (relative to `root`, in order), and the
/// modules whose doc says nothing.
pub fn generated(root: &Path, dirs: &[String]) -> Result<(String, Vec<String>), Error> {
    let mut text = String::new();
    let mut undocumented = Vec::new();
    for dir in dirs {
        let src = root.join(dir).join("src");
        let Some(root_file) = ["lib.rs", "main.rs"]
            .map(|file| src.join(file))
            .into_iter()
            .find(|file| file.is_file())
        else {
            continue;
        };
        let krate = Crate::read(&root_file)?;
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
    Ok((text, undocumented))
}

/// How ARCHITECTURE.md's text stands against the generated `list`.
#[derive(Debug, PartialEq, Eq)]
pub enum Drift {
    Current,
    /// The markers are missing.
    NoMarkers,
    /// Out of date: the whole page as it should be, and the generated lines the page lacks.
    Stale {
        updated: String,
        lacking: Vec<String>,
    },
}

/// Whether `page` (ARCHITECTURE.md) holds `list` between its markers.
pub fn drift(page: &str, list: &str) -> Drift {
    let (Some(begin), Some(end)) = (page.find(BEGIN), page.find(END)) else {
        return Drift::NoMarkers;
    };
    if end < begin {
        return Drift::NoMarkers;
    }
    let current = &page[begin + BEGIN.len()..end];
    let wanted = format!("{list}\n");
    if current == wanted {
        return Drift::Current;
    }
    let lacking = wanted
        .lines()
        .filter(|line| !current.lines().any(|have| have == *line))
        .map(str::to_owned)
        .collect();
    Drift::Stale {
        updated: format!("{}{BEGIN}{wanted}{}", &page[..begin], &page[end..]),
        lacking,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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

    #[test]
    fn a_module_missing_from_the_list_or_without_a_doc_is_found() {
        let tree = crate::plant(&[
            ("crates/x/src/lib.rs", "//! The crate.\nmod a;\nmod b;"),
            ("crates/x/src/a.rs", "//! Module a. More."),
            ("crates/x/src/b.rs", "fn undocumented() {}"),
        ]);
        let (list, undocumented) = generated(tree.path(), &["crates/x".to_owned()]).unwrap();
        assert_eq!(undocumented, ["crates/x: `b`"]);
        // The page lists the crate and `a`, as before `b` was added.
        let page = format!(
            "# Page\n{BEGIN}\n**`crates/x`**\n\n- (the crate): The crate.\n- `a`: Module a.\n\n{END}\n"
        );
        match drift(&page, &list) {
            Drift::Stale { updated, lacking } => {
                assert_eq!(lacking, ["- `b`: "]);
                assert_eq!(drift(&updated, &list), Drift::Current);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(drift("no markers", &list), Drift::NoMarkers);
    }
}
