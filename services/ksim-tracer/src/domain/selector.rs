//! Kubernetes label selectors in their text form (`app=web,tier!=db,env in (a,b),!legacy`).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// Why a selector's text is not a selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("label selector {selector:?}: unbalanced ')'")]
    Unbalanced { selector: String },
    #[error("label selector {selector:?}: unclosed '('")]
    Unclosed { selector: String },
    #[error("label selector requirement {requirement:?}: {problem}")]
    Requirement {
        requirement: String,
        problem: RequirementProblem,
    },
}

/// What is wrong with one requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementProblem {
    #[error("empty requirement")]
    Empty,
    #[error("expected '=', '==', '!=', 'in' or 'notin'")]
    NoOperator,
    #[error("values must be in parentheses")]
    Unparenthesised,
    #[error("{0:?} is not a valid label key")]
    Key(String),
    #[error("{0:?} is not a valid label value")]
    Value(String),
}

/// A parsed selector; it matches when every requirement holds. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        split_requirements(text)?
            .into_iter()
            .map(|part| parse_requirement(part.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map(Selector)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

/// Splits at commas outside parentheses.
fn split_requirements(text: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0_i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(SelectorError::Unbalanced {
                selector: text.to_owned(),
            });
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unclosed {
            selector: text.to_owned(),
        });
    }
    parts.push(&text[start..]);
    if parts.len() == 1 && parts[0].trim().is_empty() {
        return Ok(Vec::new());
    }
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, SelectorError> {
    let invalid = |problem| SelectorError::Requirement {
        requirement: part.to_owned(),
        problem,
    };
    if part.is_empty() {
        return Err(invalid(RequirementProblem::Empty));
    }
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(
            label_key(key.trim()).map_err(invalid)?,
        ));
    }
    for (op, build) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = part.split_once(op) {
            let key = label_key(key.trim()).map_err(invalid)?;
            let value = label_value(value.trim()).map_err(invalid)?;
            return Ok(build(key, value));
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim();
        let (negated, values) = if let Some(values) = rest.strip_prefix("notin") {
            (true, values)
        } else if let Some(values) = rest.strip_prefix("in") {
            (false, values)
        } else {
            return Err(invalid(RequirementProblem::NoOperator));
        };
        let values = values
            .trim()
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| invalid(RequirementProblem::Unparenthesised))?;
        let values = values
            .split(',')
            .map(|v| label_value(v.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let key = label_key(key).map_err(invalid)?;
        return Ok(if negated {
            Requirement::NotIn(key, values)
        } else {
            Requirement::In(key, values)
        });
    }
    Ok(Requirement::Exists(label_key(part).map_err(invalid)?))
}

fn label_key(key: &str) -> Result<String, RequirementProblem> {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    if name.is_empty() || name.len() > 63 || !name.chars().all(is_label_char) {
        return Err(RequirementProblem::Key(key.to_owned()));
    }
    Ok(key.to_owned())
}

fn label_value(value: &str) -> Result<String, RequirementProblem> {
    if value.len() > 63 || !value.chars().all(is_label_char) {
        return Err(RequirementProblem::Value(value.to_owned()));
    }
    Ok(value.to_owned())
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_operator_matches_as_kubernetes_does() {
        let web = labels(&[("app", "web"), ("tier", "front"), ("example.com/team", "a")]);
        for (selector, expected) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("tier in (front, back)", true),
            ("tier notin (front)", false),
            ("missing notin (x)", true),
            ("example.com/team", true),
            ("!example.com/team", false),
            ("!legacy,app=web", true),
            ("app=web,tier=back", false),
        ] {
            assert_eq!(
                Selector::parse(selector).unwrap().matches(&web),
                expected,
                "{selector}"
            );
        }
    }

    #[test]
    fn bad_selectors_name_the_requirement() {
        for (selector, fragment) in [
            ("app=web,", "empty requirement"),
            ("tier in front", "parentheses"),
            ("tier in (a", "unclosed"),
            ("a b", "expected"),
            ("app=we b", "not a valid label value"),
        ] {
            let error = Selector::parse(selector).unwrap_err().to_string();
            assert!(error.contains(fragment), "{selector}: {error}");
        }
    }
}
