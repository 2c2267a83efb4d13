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

/// A parsed selector; it matches when every requirement holds. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(text: &str) -> Result<Self, String> {
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
fn split_requirements(text: &str) -> Result<Vec<&str>, String> {
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
            return Err(format!("label selector {text:?}: unbalanced ')'"));
        }
    }
    if depth != 0 {
        return Err(format!("label selector {text:?}: unclosed '('"));
    }
    parts.push(&text[start..]);
    if parts.len() == 1 && parts[0].trim().is_empty() {
        return Ok(Vec::new());
    }
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    let invalid = |why: &str| format!("label selector requirement {part:?}: {why}");
    if part.is_empty() {
        return Err(invalid("empty requirement"));
    }
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(
            label_key(key.trim()).map_err(|e| invalid(&e))?,
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
            let key = label_key(key.trim()).map_err(|e| invalid(&e))?;
            let value = label_value(value.trim()).map_err(|e| invalid(&e))?;
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
            return Err(invalid("expected '=', '==', '!=', 'in' or 'notin'"));
        };
        let values = values
            .trim()
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| invalid("values must be in parentheses"))?;
        let values = values
            .split(',')
            .map(|v| label_value(v.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(&e))?;
        let key = label_key(key).map_err(|e| invalid(&e))?;
        return Ok(if negated {
            Requirement::NotIn(key, values)
        } else {
            Requirement::In(key, values)
        });
    }
    Ok(Requirement::Exists(
        label_key(part).map_err(|e| invalid(&e))?,
    ))
}

fn label_key(key: &str) -> Result<String, String> {
    let name = key.rsplit_once('/').map_or(key, |(_, name)| name);
    if name.is_empty() || name.len() > 63 || !name.chars().all(is_label_char) {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(key.to_owned())
}

fn label_value(value: &str) -> Result<String, String> {
    if value.len() > 63 || !value.chars().all(is_label_char) {
        return Err(format!("{value:?} is not a valid label value"));
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
            let error = Selector::parse(selector).unwrap_err();
            assert!(error.contains(fragment), "{selector}: {error}");
        }
    }
}
