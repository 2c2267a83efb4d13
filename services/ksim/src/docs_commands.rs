//! Every `ksim` command the README and the manuals show parses with this CLI, so a renamed
//! subcommand or flag cannot leave the docs behind it. What the commands then do is the end-to-end
//! tests' business (`crates/ksim-e2e/tests/it/cli`).

use std::path::{Path, PathBuf};

use clap::{Parser, error::ErrorKind};

use crate::cli::Cli;

/// A command line a document shows.
#[derive(Debug, PartialEq)]
struct Shown {
    /// The 1-based line its shell line starts on.
    line: usize,
    words: Vec<String>,
}

/// The shell lines of a Markdown text's `sh`, `bash` and `shell` blocks, each with the number of
/// its first line: continuations (`\` at the end) joined, here-documents (a file's text, not
/// commands) left out.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut in_shell = None::<bool>;
    let mut heredoc_end = None::<String>;
    let mut pending = None::<(usize, String)>;
    for (index, line) in text.lines().enumerate() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            in_shell = match in_shell {
                None => Some(matches!(fence.trim(), "sh" | "bash" | "shell")),
                Some(_) => None,
            };
            heredoc_end = None;
            pending = None;
            continue;
        }
        if in_shell != Some(true) {
            continue;
        }
        if let Some(end) = &heredoc_end {
            if line.trim() == end {
                heredoc_end = None;
            }
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((index + 1, String::new()));
        match line.trim_end().strip_suffix('\\') {
            Some(continued) => {
                joined.push_str(continued);
                joined.push(' ');
                pending = Some((start, joined));
            }
            None => {
                joined.push_str(line);
                if open_quote(&joined) {
                    // A quoted word goes on over the line break.
                    joined.push('\n');
                    pending = Some((start, joined));
                } else {
                    heredoc_end = heredoc_delimiter(&joined);
                    lines.push((start, joined));
                }
            }
        }
    }
    lines
}

/// Whether a quote the line opens is still open at its end.
fn open_quote(line: &str) -> bool {
    let mut quote = None::<char>;
    let mut escaped = false;
    for c in line.chars() {
        match (quote, c) {
            (_, _) if escaped => escaped = false,
            (None | Some('"'), '\\') => escaped = true,
            (Some(open), c) if c == open => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            _ => {}
        }
    }
    quote.is_some()
}

/// `WORD` of a `<<WORD`, `<<'WORD'` or `<<-"WORD"` in the line, if it opens a here-document.
fn heredoc_delimiter(line: &str) -> Option<String> {
    let after = &line[line.find("<<")? + 2..];
    let word: String = after
        .trim_start_matches('-')
        .trim_start()
        .chars()
        .filter(|c| !matches!(c, '\'' | '"'))
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The simple commands of a shell line, as words: split at `|`, `&`, `;` and parentheses
/// outside quotes, a `#` comment dropped, leading `VAR=value` assignments skipped. `None` for a
/// part whose quotes do not close.
fn commands(line: &str) -> Vec<Option<Vec<String>>> {
    let mut parts = vec![String::new()];
    let mut quote = None::<char>;
    let mut previous = ' ';
    for c in line.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => break,
            (None, '|' | '&' | ';' | '(' | ')') => {
                parts.push(String::new());
                previous = ' ';
                continue;
            }
            (None, _) => {}
        }
        if let Some(part) = parts.last_mut() {
            part.push(c);
        }
        previous = c;
    }
    parts
        .iter()
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            shlex::split(part).map(|words| {
                without_redirections(words)
                    .into_iter()
                    .skip_while(|word| is_assignment(word))
                    .collect()
            })
        })
        .collect()
}

/// The words less the shell's redirections (`> file`, `2>/dev/null`, `< in`); a placeholder
/// such as `<id>` is a word.
fn without_redirections(words: Vec<String>) -> Vec<String> {
    let mut kept = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let operator = word.trim_start_matches(|c: char| c.is_ascii_digit());
        let redirects =
            operator.starts_with('>') || (operator.starts_with('<') && !operator.ends_with('>'));
        if !redirects {
            kept.push(word);
        } else if operator.trim_start_matches(['<', '>']).is_empty() {
            // The operator alone: its file is the next word.
            words.next();
        }
    }
    kept
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The `ksim` commands a Markdown text shows, `cargo run -p ksim -- ARGS` as `ksim ARGS`.
fn ksim_commands(text: &str) -> Vec<Shown> {
    shell_lines(text)
        .into_iter()
        .flat_map(|(line, shell)| {
            commands(&shell).into_iter().filter_map(move |words| {
                let words = words.unwrap_or_else(|| vec!["ksim".into(), "<unclosed quote>".into()]);
                as_ksim(words).map(|words| Shown { line, words })
            })
        })
        .collect()
}

fn as_ksim(words: Vec<String>) -> Option<Vec<String>> {
    match words.first().map(String::as_str) {
        Some("ksim") => Some(words),
        Some("cargo")
            if words.iter().any(|word| word == "run")
                && words.windows(2).any(|pair| {
                    matches!(pair[0].as_str(), "-p" | "--package") && pair[1] == "ksim"
                }) =>
        {
            let args = words.iter().skip_while(|word| *word != "--").skip(1);
            Some(
                std::iter::once("ksim".to_owned())
                    .chain(args.cloned())
                    .collect(),
            )
        }
        _ => None,
    }
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README, ARCHITECTURE.md and every manual under docs/.
fn documents() -> Vec<PathBuf> {
    let root = repository();
    let mut manuals: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "md"))
        .collect();
    manuals.sort();
    [root.join("README.md"), root.join("ARCHITECTURE.md")]
        .into_iter()
        .chain(manuals)
        .collect()
}

/// Why clap refuses the words, or `None` if it takes them (asking for help counts).
fn refusal(words: &[String]) -> Option<String> {
    match Cli::try_parse_from(words) {
        Ok(_) => None,
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            None
        }
        Err(error) => Some(error.render().to_string().lines().next()?.to_owned()),
    }
}

#[test]
fn every_ksim_command_in_the_readme_and_the_manuals_parses() {
    let root = repository();
    let mut checked = 0;
    let mut refused = Vec::new();
    for path in documents() {
        let text = std::fs::read_to_string(&path).expect("the document is readable");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for shown in ksim_commands(&text) {
            checked += 1;
            if let Some(why) = refusal(&shown.words) {
                refused.push(format!(
                    "{name}:{}: `{}`: {why}",
                    shown.line,
                    shown.words.join(" ")
                ));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "commands the CLI refuses:\n{}",
        refused.join("\n")
    );
    // The README alone shows more than ten; far fewer means the extraction broke.
    assert!(checked >= 40, "only {checked} ksim commands found");
}

#[test]
fn a_renamed_flag_is_refused() {
    let words: Vec<String> = ["ksim", "run", "shop.ktrace", "--sped", "4"]
        .map(String::from)
        .to_vec();
    assert!(refusal(&words).is_some_and(|why| why.contains("--sped")));
}

#[test]
fn commands_come_from_shell_blocks_with_continuations_joined_and_heredocs_left_out() {
    let text = "\
Prose: ksim run not-a-command.ktrace

```sh
cargo build && export PATH=$PWD/target/release:$PATH
ksim run shop.ktrace --speed 4 \\
    --autoscaler   # a comment: ksim down
cat > x.yaml <<'YAML'
ksim: not a command, the file's text
YAML
KSIM_LOG_FORMAT=json ksim report \"<id>\" | jq . &
(cd /tmp; ksim down)
cargo run --release -p ksim -- up   # the CLI from the source
cargo run -p ksim-vnode -- --namespace default
ksim completions bash > ~/.bash_completion 2>/dev/null
echo \"$(ksim trace inspect a.ktrace
  | head)\"
```

```text
ksim summary output
```
";
    let found: Vec<(usize, String)> = ksim_commands(text)
        .into_iter()
        .map(|shown| (shown.line, shown.words.join(" ")))
        .collect();
    assert_eq!(
        found,
        [
            (5, "ksim run shop.ktrace --speed 4 --autoscaler".to_owned()),
            (10, "ksim report <id>".to_owned()),
            (11, "ksim down".to_owned()),
            (12, "ksim up".to_owned()),
            (14, "ksim completions bash".to_owned()),
        ]
    );
}
