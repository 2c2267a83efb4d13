//! Limits on the text of a CEL expression, checked before the `cel` parser sees it: the parser
//! recurses once (or more) per level of nesting and per chained operator, and so does the
//! evaluation of what it builds, so deep nesting overflows the stack (53 parentheses abort a
//! release build on a 2 MiB tokio worker thread). Here, not in ksim-transform or
//! ksim-experiment, because both compile CEL (rule selectors, `--assert`) and both depend on this
//! crate, which needs no CEL for it.
//!
//! The check reads the text as the parser's lexer does (strings, comments, quoted identifiers)
//! so that brackets inside a string are not counted and brackets outside one are never missed;
//! text it cannot read that way (an unclosed string, an escape CEL does not know, a closing
//! bracket that closes nothing) is not valid CEL, and is refused here rather than left to the
//! parser's error recovery.

/// Longest expression accepted, in bytes: ample for a selector or an assertion (a list of a
/// hundred names fits), and parsed in milliseconds.
pub const MAX_BYTES: usize = 8 << 10;

/// Deepest nesting of parentheses, brackets and braces. A release build overflows a 2 MiB
/// stack at about 90 levels and refuses 96 itself; 32 keeps a wide margin, and no real
/// selector or assertion comes near it.
pub const MAX_DEPTH: usize = 32;

/// Most operator characters (`. [ + - * / % < > = ! & | ?`, each counted): chained operators
/// nest too (`1+1+...` is as deep as it is long; a release build overflows a 2 MiB stack
/// evaluating about 1,500).
pub const MAX_OPERATORS: usize = 512;

/// Why an expression is refused before it is parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelLimitError {
    #[error("{bytes} bytes is over the {MAX_BYTES}-byte limit of an expression")]
    TooLong { bytes: usize },
    #[error(
        "nested more than {MAX_DEPTH} levels deep at byte {offset} (parentheses, brackets and \
         braces together; the limit keeps the parser within its stack)"
    )]
    TooDeep { offset: usize },
    #[error(
        "more than {MAX_OPERATORS} operators and member accesses (chained ones nest; the limit \
         keeps the parser within its stack)"
    )]
    TooManyOperators,
    #[error("`{found}` at byte {offset} closes nothing")]
    Unopened { found: char, offset: usize },
    #[error("`{found}` at byte {offset} does not close the `{open}` at byte {opened_at}")]
    Mismatched {
        found: char,
        offset: usize,
        open: char,
        opened_at: usize,
    },
    #[error("the string at byte {offset} {problem}")]
    BadString {
        offset: usize,
        problem: &'static str,
    },
}

/// Whether `source` is within [`MAX_BYTES`], [`MAX_DEPTH`] and [`MAX_OPERATORS`]; reads it once,
/// without recursion.
pub fn check(source: &str) -> Result<(), CelLimitError> {
    if source.len() > MAX_BYTES {
        return Err(CelLimitError::TooLong {
            bytes: source.len(),
        });
    }
    let bytes = source.as_bytes();
    let mut open: Vec<(u8, usize)> = Vec::new();
    let mut operators = 0usize;
    // Where the run of identifier characters before `i` began: a string's prefix (r, b, br).
    let mut run_start = 0usize;
    let mut i = 0usize;
    while let Some(&c) = bytes.get(i) {
        if is_ident(c) {
            i += 1;
            continue;
        }
        let run = &bytes[run_start..i];
        match c {
            b'"' | b'\'' => {
                let raw = match run {
                    [] | [b'b' | b'B'] => false,
                    [b'r' | b'R'] | [b'b' | b'B', b'r' | b'R'] => true,
                    // A name or a number then a string is not CEL; its lexer would split it
                    // otherwise than this reads it.
                    _ => {
                        return Err(CelLimitError::BadString {
                            offset: i,
                            problem: "follows a name or number",
                        });
                    }
                };
                i = string_end(bytes, i, raw)?;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                // A comment, to the end of the line.
                i = bytes[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |end| i + end + 1);
            }
            b'`' => {
                // A quoted identifier; unclosed, the lexer drops the backquote and reads on.
                let quoted = bytes[i + 1..]
                    .iter()
                    .position(|&b| !(is_ident(b) || matches!(b, b'.' | b'-' | b'/' | b' ')));
                i = match quoted {
                    Some(len) if len > 0 && bytes.get(i + 1 + len) == Some(&b'`') => i + len + 2,
                    _ => i + 1,
                };
            }
            b'(' | b'[' | b'{' => {
                if c == b'[' {
                    operators += 1;
                }
                open.push((c, i));
                if open.len() > MAX_DEPTH {
                    return Err(CelLimitError::TooDeep { offset: i });
                }
                i += 1;
            }
            b')' | b']' | b'}' => {
                let wanted = match c {
                    b')' => b'(',
                    b']' => b'[',
                    _ => b'{',
                };
                match open.pop() {
                    None => {
                        return Err(CelLimitError::Unopened {
                            found: char::from(c),
                            offset: i,
                        });
                    }
                    Some((opener, opened_at)) if opener != wanted => {
                        return Err(CelLimitError::Mismatched {
                            found: char::from(c),
                            offset: i,
                            open: char::from(opener),
                            opened_at,
                        });
                    }
                    Some(_) => {}
                }
                i += 1;
            }
            b'.' | b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|'
            | b'?' => {
                operators += 1;
                i += 1;
            }
            _ => i += 1,
        }
        if operators > MAX_OPERATORS {
            return Err(CelLimitError::TooManyOperators);
        }
        run_start = i;
    }
    Ok(())
}

/// `[A-Za-z0-9_]`: what CEL's names and numbers are made of.
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Where the string whose quote is at `start` ends (the byte after it), read as CEL's lexer
/// reads it; refused when that lexer would not read it as one string.
fn string_end(bytes: &[u8], start: usize, raw: bool) -> Result<usize, CelLimitError> {
    let bad = |problem| CelLimitError::BadString {
        offset: start,
        problem,
    };
    let quote = bytes[start];
    let triple = bytes.get(start..start + 3) == Some(&[quote, quote, quote][..]);
    let mut i = start + if triple { 3 } else { 1 };
    loop {
        let Some(&c) = bytes.get(i) else {
            return Err(bad("is not closed"));
        };
        if triple {
            if bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
                return Ok(i + 3);
            }
        } else if c == quote {
            return Ok(i + 1);
        } else if c == b'\n' || c == b'\r' {
            return Err(bad("is not closed on its line"));
        }
        if c == b'\\' && !raw {
            i += escape_len(&bytes[i..]).ok_or_else(|| bad("has an escape CEL does not know"))?;
        } else {
            i += 1;
        }
    }
}

/// The length of the escape sequence `rest` starts with (at its backslash), if CEL has it.
fn escape_len(rest: &[u8]) -> Option<usize> {
    let hex = |from: usize, count: usize| {
        rest.get(from..from + count)
            .is_some_and(|digits| digits.iter().all(u8::is_ascii_hexdigit))
            .then_some(from + count)
    };
    match rest.get(1)? {
        b'a' | b'b' | b'f' | b'n' | b'r' | b't' | b'v' | b'"' | b'\'' | b'\\' | b'?' | b'`' => {
            Some(2)
        }
        b'x' | b'X' => hex(2, 2),
        b'u' => hex(2, 4),
        b'U' => hex(2, 8),
        b'0'..=b'3' => rest
            .get(2..4)
            .is_some_and(|digits| digits.iter().all(|d| (b'0'..=b'7').contains(d)))
            .then_some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(open: &str, close: &str, depth: usize) -> String {
        format!("{}1{}", open.repeat(depth), close.repeat(depth))
    }

    #[test]
    fn ordinary_expressions_pass() {
        for source in [
            r#"kind == "Deployment" && object.metadata.namespace == "shop""#,
            "object.spec.template.spec.containers.exists(c, c.image.startsWith('nginx'))",
            "[1, 2, 3].all(x, x > 0) && {'a': [1]}.a[0] == 1",
            r#"name.matches("^(web|api)-[0-9]+$") // a comment with ((( and "quotes"
               && ns in ['shop', "it's", """tri"ple""", r"raw\", b'\x41\u00e9\101']"#,
            "`weird.name-x` == 1 || !!true || -(-1) == 1",
            "",
        ] {
            assert_eq!(check(source), Ok(()), "{source}");
        }
        assert_eq!(check(&nested("(", ")", MAX_DEPTH)), Ok(()));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_by_any_bracket() {
        for (open, close) in [("(", ")"), ("[", "]"), ("{1:", "}"), ("f(", ")")] {
            let error = check(&nested(open, close, MAX_DEPTH + 1)).unwrap_err();
            assert!(matches!(error, CelLimitError::TooDeep { .. }), "{error}");
            assert!(error.to_string().contains("more than 32 levels"), "{error}");
        }
        let mixed = format!("{}1{}", "([{1:".repeat(11), "}])".repeat(11));
        assert!(matches!(check(&mixed), Err(CelLimitError::TooDeep { .. })));
    }

    #[test]
    fn brackets_inside_strings_and_comments_do_not_count_and_outside_them_do() {
        let deep_string = format!("name == \"{}\"", "(".repeat(100));
        assert_eq!(check(&deep_string), Ok(()));
        let commented = format!("1 // {}\n", "(".repeat(100));
        assert_eq!(check(&commented), Ok(()));
        // A closing bracket in a string closes nothing outside it.
        let hidden = format!("{}\"{}\"{}", "(".repeat(20), ")".repeat(20), "(".repeat(20));
        assert!(matches!(check(&hidden), Err(CelLimitError::TooDeep { .. })));
        // An escape CEL does not know would end the string elsewhere for its lexer.
        let error = check(&format!("\"\\q{}\"", "(".repeat(40))).unwrap_err();
        assert!(matches!(error, CelLimitError::BadString { .. }), "{error}");
        // A raw string has no escapes: its backslash does not hide the quote after it.
        let raw = format!("r\"\\\"{}", "(".repeat(40));
        assert!(matches!(check(&raw), Err(CelLimitError::TooDeep { .. })));
        // A quoted identifier may hold `//`, which then starts no comment.
        let quoted = format!("`a//b` + {}", "(".repeat(40));
        assert!(matches!(check(&quoted), Err(CelLimitError::TooDeep { .. })));
    }

    #[test]
    fn unbalanced_and_unclosed_text_is_refused() {
        assert!(matches!(
            check("(](](]"),
            Err(CelLimitError::Mismatched { .. })
        ));
        assert!(matches!(check("1)"), Err(CelLimitError::Unopened { .. })));
        assert!(matches!(
            check("'open\n((((("),
            Err(CelLimitError::BadString { .. })
        ));
        assert!(matches!(
            check("x'y'"),
            Err(CelLimitError::BadString { .. })
        ));
    }

    #[test]
    fn long_chains_and_long_text_are_refused_quickly() {
        let started = std::time::Instant::now();
        for source in [
            format!("1{}", "+1".repeat(MAX_OPERATORS + 1)),
            format!("a{}", ".b".repeat(MAX_OPERATORS + 1)),
            format!("{}true", "!".repeat(4_000)),
            format!("{}1", "-".repeat(4_000)),
        ] {
            assert_eq!(check(&source), Err(CelLimitError::TooManyOperators));
        }
        let long = format!("name == '{}'", "x".repeat(100_000));
        let error = check(&long).unwrap_err();
        assert_eq!(error, CelLimitError::TooLong { bytes: 100_010 });
        assert!(error.to_string().contains("8192-byte limit"), "{error}");
        assert!(matches!(
            check(&nested("(", ")", 10_000)),
            Err(CelLimitError::TooLong { .. })
        ));
        assert!(matches!(
            check(&nested("(", ")", 4_000)),
            Err(CelLimitError::TooDeep { .. })
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
