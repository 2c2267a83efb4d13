//! The rules file: its YAML model, and the checked rules the transformer applies.
//!
//! ```yaml
//! rules:                           # applied in this order, to every record
//!   - name: traffic doubles        # optional, shown in errors and in the header
//!     match: 'kind == "Deployment" && object.metadata.namespace == "shop"'   # optional CEL
//!     scaleReplicas: 2             # spec.replicas * 2, rounded to the nearest integer
//!   - match: 'kind == "Secret"'
//!     drop: true                   # drop matching objects (and lifecycles of matching owners)
//!   - mergePatch: { spec: { template: { spec: { priorityClassName: low } } } }   # RFC 7386
//!   - jsonPatch: [ { op: replace, path: /spec/replicas, value: 3 } ]              # RFC 6902
//!   - scaleResources: { requests: { cpu: 0.5 } }   # every container's stated amount x 0.5
//!   - setResources: { container: app, limits: { memory: 256Mi } }   # set or added
//!   - keepWindow: { start: 10m, end: 40m }   # from the trace's start, or RFC 3339 times
//!   - shiftTime: -1h               # move every record (and the header's window)
//!   - stretchTime: 2               # twice as long, around the trace's start
//!   - extendEnd: 20m               # the trace ends 20 minutes later: a replay goes on
//!   - renameNamespace: { from: shop, to: shop-canary }
//! ```
//!
//! Each rule has exactly one operation. Unknown keys are errors, naming the rule and its line.
//! Drops, patches, scaling and renames may have a `match`; a drop must. Time rules may not: they
//! apply to the whole trace, so events stay in order.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;

use ksim_trace::names::{MAX_REPLICAS, is_dns_label};

use crate::error::RuleError;
use crate::resources::{self, Amount, Change, Field, ResourceChange, number};
use crate::select::{CompileError, Selector};

/// Longest rules file accepted: rules are written by hand.
pub const MAX_RULES_BYTES: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    rules: Vec<Spanned<RawRule>>,
}

/// Only the rules' positions: read again after an error to tell which rule it is in.
#[derive(Deserialize)]
struct RawPositions {
    rules: Vec<Spanned<IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRule {
    name: Option<String>,
    #[serde(rename = "match")]
    selector: Option<String>,
    drop: Option<bool>,
    merge_patch: Option<serde_json::Value>,
    json_patch: Option<json_patch::Patch>,
    scale_replicas: Option<f64>,
    scale_resources: Option<RawResources>,
    set_resources: Option<RawResources>,
    keep_window: Option<RawWindow>,
    shift_time: Option<String>,
    stretch_time: Option<f64>,
    extend_end: Option<String>,
    rename_namespace: Option<RawRename>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    container: Option<String>,
    requests: Option<BTreeMap<String, serde_json::Value>>,
    limits: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    start: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRename {
    from: String,
    to: String,
}

/// One edge of a time window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Milliseconds after the trace's start, as the rules before left it.
    Offset(i64),
    /// Milliseconds since the Unix epoch.
    At(i64),
}

/// What a rule does.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Drop,
    MergePatch(serde_json::Value),
    JsonPatch(json_patch::Patch),
    ScaleReplicas(f64),
    /// `scaleResources` or `setResources`.
    Resources(ResourceChange),
    KeepWindow {
        start: Option<Bound>,
        end: Option<Bound>,
    },
    ShiftTime(i64),
    StretchTime(f64),
    /// Moves the trace's end this many milliseconds later; no record moves.
    ExtendEnd(i64),
    RenameNamespace {
        from: String,
        to: String,
    },
}

impl Op {
    pub(crate) fn is_time(&self) -> bool {
        matches!(
            self,
            Op::KeepWindow { .. } | Op::ShiftTime(_) | Op::StretchTime(_) | Op::ExtendEnd(_)
        )
    }
}

/// One checked rule, its selector compiled.
#[derive(Debug)]
pub(crate) struct Rule {
    /// From 1, in file order.
    pub(crate) index: usize,
    /// The YAML line the rule starts on.
    pub(crate) line: u64,
    pub(crate) name: Option<String>,
    pub(crate) selector: Option<Selector>,
    pub(crate) op: Op,
    /// The operation as written, for the header.
    pub(crate) op_text: String,
}

impl Rule {
    /// One line for the trace header.
    pub(crate) fn description(&self) -> String {
        let mut text = format!("rule {} (line {})", self.index, self.line);
        if let Some(name) = &self.name {
            text.push_str(&format!(" {name:?}"));
        }
        text.push_str(": ");
        text.push_str(&self.op_text);
        if let Some(selector) = &self.selector {
            text.push_str(" where ");
            // One line: a block scalar's newlines become spaces.
            text.push_str(
                &selector
                    .source()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        text
    }
}

/// The checked rules of one file, in order; build with [`Rules::parse`].
pub struct Rules {
    pub(crate) rules: Vec<Rule>,
    pub(crate) env: Arc<cel::Env>,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl Rules {
    /// Reads and checks a rules file: every rule has one operation with valid arguments, every
    /// `match` compiles. The first problem is the error, naming the rule and its line.
    pub fn parse(yaml: &str) -> Result<Self, RuleError> {
        if yaml.len() > MAX_RULES_BYTES {
            return Err(RuleError::Yaml(format!(
                "the rules file is {} bytes, over the limit of {MAX_RULES_BYTES}",
                yaml.len()
            )));
        }
        let raw: RawFile = serde_saphyr::from_str(yaml).map_err(|error| locate(yaml, &error))?;
        let env = Arc::new(cel::Env::stdlib());
        let mut rules = Vec::with_capacity(raw.rules.len());
        for (position, spanned) in raw.rules.into_iter().enumerate() {
            let index = position + 1;
            let line = spanned.referenced.line();
            let fail = |message: String| RuleError::Rule {
                index,
                line,
                message,
            };
            rules.push(
                check(index, line, spanned.value, &env).map_err(|e| match e {
                    Checked::Message(message) => fail(message),
                    Checked::Error(error) => error,
                })?,
            );
        }
        Ok(Self { rules, env })
    }

    /// One line per rule, as the output header records them.
    pub fn descriptions(&self) -> Vec<String> {
        self.rules.iter().map(Rule::description).collect()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

enum Checked {
    Message(String),
    Error(RuleError),
}

impl From<String> for Checked {
    fn from(message: String) -> Self {
        Checked::Message(message)
    }
}

fn check(index: usize, line: u64, raw: RawRule, env: &cel::Env) -> Result<Rule, Checked> {
    let mut ops: Vec<(Op, String)> = Vec::new();
    if let Some(drop) = raw.drop {
        if !drop {
            return Err(
                "drop: false does nothing; remove the rule or set drop: true"
                    .to_owned()
                    .into(),
            );
        }
        ops.push((Op::Drop, "drop".to_owned()));
    }
    if let Some(patch) = raw.merge_patch {
        if !patch.is_object() {
            return Err("mergePatch must be a map (RFC 7386)".to_owned().into());
        }
        let text = format!("mergePatch {patch}");
        ops.push((Op::MergePatch(patch), text));
    }
    if let Some(patch) = raw.json_patch {
        let text = format!(
            "jsonPatch {}",
            serde_json::to_string(&patch).unwrap_or_default()
        );
        ops.push((Op::JsonPatch(patch), text));
    }
    if let Some(factor) = raw.scale_replicas {
        let factor_text = number(factor);
        if !factor.is_finite() || factor < 0.0 {
            return Err(format!("scaleReplicas {factor_text} must be a number >= 0").into());
        }
        // Any larger factor takes a single replica past what Kubernetes accepts.
        if factor > MAX_REPLICAS as f64 {
            return Err(format!(
                "scaleReplicas {factor_text} must be at most {MAX_REPLICAS}: replicas are an int32"
            )
            .into());
        }
        ops.push((
            Op::ScaleReplicas(factor),
            format!("scaleReplicas {factor_text}"),
        ));
    }
    if let Some(scale) = raw.scale_resources {
        let change = resource_change("scaleResources", scale, |field, resource, value| {
            let factor = value.as_f64().ok_or_else(|| {
                format!(
                    "scaleResources: {}.{resource} {value} is not a number",
                    field.key()
                )
            })?;
            resources::check_factor(field, resource, factor)?;
            Ok(Amount::Factor(factor))
        })?;
        let text = format!("scaleResources {}", change.text());
        ops.push((Op::Resources(change), text));
    }
    if let Some(set) = raw.set_resources {
        let change = resource_change("setResources", set, |field, resource, value| {
            // `cpu: 2` is as good a quantity as `cpu: "2"`.
            let quantity = match value {
                serde_json::Value::String(text) => text.clone(),
                serde_json::Value::Number(number) => number.to_string(),
                other => {
                    return Err(format!(
                        "setResources: {}.{resource} {other} is not a quantity",
                        field.key()
                    ));
                }
            };
            resources::check_quantity(field, resource, &quantity)?;
            Ok(Amount::Quantity(quantity))
        })?;
        let text = format!("setResources {}", change.text());
        ops.push((Op::Resources(change), text));
    }
    if let Some(window) = raw.keep_window {
        let start = window
            .start
            .as_deref()
            .map(|t| bound(t, "start"))
            .transpose()?;
        let end = window.end.as_deref().map(|t| bound(t, "end")).transpose()?;
        if start.is_none() && end.is_none() {
            return Err("keepWindow needs a start, an end or both".to_owned().into());
        }
        if let (Some(s), Some(e)) = (start, end)
            && std::mem::discriminant(&s) == std::mem::discriminant(&e)
            && bound_ms(s) >= bound_ms(e)
        {
            return Err("keepWindow: start must be before end".to_owned().into());
        }
        let text = format!(
            "keepWindow start={} end={}",
            window.start.as_deref().unwrap_or("-"),
            window.end.as_deref().unwrap_or("-")
        );
        ops.push((Op::KeepWindow { start, end }, text));
    }
    if let Some(shift) = raw.shift_time {
        let ms = signed_duration(&shift)
            .ok_or_else(|| format!("shiftTime {shift:?} is not a duration like 1h or -30m"))?;
        ops.push((Op::ShiftTime(ms), format!("shiftTime {shift}")));
    }
    if let Some(factor) = raw.stretch_time {
        let factor_text = number(factor);
        if !factor.is_finite() || factor <= 0.0 {
            return Err(format!("stretchTime {factor_text} must be a number > 0").into());
        }
        ops.push((
            Op::StretchTime(factor),
            format!("stretchTime {factor_text}"),
        ));
    }
    if let Some(extension) = raw.extend_end {
        let ms = signed_duration(&extension)
            .filter(|ms| *ms > 0)
            .ok_or_else(|| format!("extendEnd {extension:?} is not a duration > 0 like 20m"))?;
        ops.push((Op::ExtendEnd(ms), format!("extendEnd {extension}")));
    }
    if let Some(rename) = raw.rename_namespace {
        if rename.from.is_empty() || rename.from.contains('/') {
            return Err(
                format!("renameNamespace: from {:?} is not a namespace", rename.from).into(),
            );
        }
        // `from` may be any name the trace holds; what it becomes must be one Kubernetes takes.
        if !is_dns_label(&rename.to) {
            return Err(format!(
                "renameNamespace: to {:?} is not a namespace name (an RFC 1123 DNS label: at \
                 most 63 lowercase letters, digits and '-', starting and ending with a letter or \
                 digit)",
                rename.to
            )
            .into());
        }
        let text = format!("renameNamespace {} -> {}", rename.from, rename.to);
        ops.push((
            Op::RenameNamespace {
                from: rename.from,
                to: rename.to,
            },
            text,
        ));
    }
    let (op, op_text) = match ops.len() {
        1 => ops.remove(0),
        0 => {
            return Err(format!("no operation; give one of {}", OPERATIONS.join(", ")).into());
        }
        _ => {
            let names: Vec<&str> = ops
                .iter()
                .map(|(_, text)| text.split(' ').next().unwrap_or_default())
                .collect();
            return Err(format!(
                "one operation per rule, found {}; split it into several rules",
                names.join(" and ")
            )
            .into());
        }
    };
    if op.is_time() && raw.selector.is_some() {
        return Err(format!(
            "{} applies to the whole trace and takes no match (events must stay in order)",
            op_text.split(' ').next().unwrap_or_default()
        )
        .into());
    }
    if matches!(op, Op::Drop) && raw.selector.is_none() {
        return Err(
            "drop needs a match (dropping everything leaves an empty trace)"
                .to_owned()
                .into(),
        );
    }
    let selector = raw
        .selector
        .map(|source| {
            Selector::compile(env, source).map_err(|error| match error {
                CompileError::Limit(limit) => {
                    Checked::Message(format!("match is refused before parsing: {limit}"))
                }
                CompileError::Syntax(cel_line, cel_column, message) => {
                    Checked::Error(RuleError::Cel {
                        index,
                        line,
                        cel_line,
                        cel_column,
                        message,
                    })
                }
            })
        })
        .transpose()?;
    Ok(Rule {
        index,
        line,
        name: raw.name,
        selector,
        op,
        op_text,
    })
}

/// A `scaleResources` or `setResources` map as checked changes, `amount` reading each value.
fn resource_change(
    operation: &str,
    raw: RawResources,
    amount: impl Fn(Field, &str, &serde_json::Value) -> Result<Amount, String>,
) -> Result<ResourceChange, String> {
    if let Some(container) = &raw.container
        && !is_dns_label(container)
    {
        return Err(format!(
            "{operation}: container {container:?} is not a container name (a DNS label)"
        ));
    }
    let mut changes = Vec::new();
    for (field, amounts) in [(Field::Requests, raw.requests), (Field::Limits, raw.limits)] {
        for (resource, value) in amounts.into_iter().flatten() {
            let amount = amount(field, &resource, &value)?;
            changes.push(Change {
                field,
                resource,
                amount,
            });
        }
    }
    if changes.is_empty() {
        return Err(format!(
            "{operation} needs requests or limits, e.g. {{ requests: {{ cpu: {} }} }}",
            if operation == "scaleResources" {
                "0.5"
            } else {
                "250m"
            }
        ));
    }
    Ok(ResourceChange {
        container: raw.container,
        changes,
    })
}

const OPERATIONS: [&str; 11] = [
    "drop",
    "mergePatch",
    "jsonPatch",
    "scaleReplicas",
    "scaleResources",
    "setResources",
    "keepWindow",
    "shiftTime",
    "stretchTime",
    "extendEnd",
    "renameNamespace",
];

fn bound_ms(bound: Bound) -> i64 {
    match bound {
        Bound::Offset(ms) | Bound::At(ms) => ms,
    }
}

/// An RFC 3339 time, or a duration after the trace's start ("10m").
fn bound(text: &str, what: &str) -> Result<Bound, String> {
    if let Some(ms) = ksim_trace::time::parse_rfc3339_ms(text)
        .map_err(|why| format!("keepWindow: {what} {why}"))?
    {
        return Ok(Bound::At(ms));
    }
    humantime::parse_duration(text)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .map(Bound::Offset)
        .ok_or_else(|| {
            format!(
                "keepWindow: {what} {text:?} is neither an RFC 3339 time nor a duration like 10m"
            )
        })
}

/// "1h", "-30m", "+5s" in milliseconds.
fn signed_duration(text: &str) -> Option<i64> {
    let text = text.trim();
    let (sign, rest) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    let ms = i64::try_from(humantime::parse_duration(rest.trim()).ok()?.as_millis()).ok()?;
    Some(sign * ms)
}

/// The parser's message in one line, with the rule it falls in when it falls in one.
fn locate(yaml: &str, error: &serde_saphyr::Error) -> RuleError {
    let full = error.to_string();
    let first_line = full.lines().next().unwrap_or_default();
    let message = first_line
        .strip_prefix("error: ")
        .unwrap_or(first_line)
        .trim()
        .to_owned();
    let Some(error_line) = error.location().map(|l| l.line()) else {
        return RuleError::Yaml(message);
    };
    // The file as far as the YAML goes: which rule starts last at or before the error's line.
    let rule = serde_saphyr::from_str::<RawPositions>(yaml)
        .ok()
        .and_then(|positions| {
            positions
                .rules
                .iter()
                .enumerate()
                .filter(|(_, rule)| rule.referenced.line() <= error_line)
                .map(|(position, rule)| (position + 1, rule.referenced.line()))
                .next_back()
        });
    match rule {
        Some((index, line)) => RuleError::Rule {
            index,
            line,
            message,
        },
        None => RuleError::Yaml(message),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn error(yaml: &str) -> RuleError {
        Rules::parse(yaml).unwrap_err()
    }

    #[test]
    fn parses_every_operation_in_order() {
        let rules = Rules::parse(
            r#"
rules:
  - name: traffic doubles
    match: 'kind == "Deployment"'
    scaleReplicas: 2
  - match: 'kind == "Secret"'
    drop: true
  - mergePatch: { metadata: { labels: { sim: "yes" } } }
  - jsonPatch: [ { op: replace, path: /spec/replicas, value: 3 } ]
  - keepWindow: { start: 10m, end: 2026-01-01T01:00:00Z }
  - shiftTime: -1h
  - stretchTime: 2
  - renameNamespace: { from: shop, to: shop-b }
  - scaleResources: { requests: { cpu: 0.5, memory: 0.75 } }
  - setResources: { container: app, limits: { memory: 256Mi, cpu: 2 } }
"#,
        )
        .unwrap();
        assert_eq!(rules.len(), 10);
        let lines: Vec<u64> = rules.rules.iter().map(|r| r.line).collect();
        assert_eq!(lines, [3, 6, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert!(matches!(rules.rules[5].op, Op::ShiftTime(-3_600_000)));
        assert!(matches!(
            rules.rules[4].op,
            Op::KeepWindow {
                start: Some(Bound::Offset(600_000)),
                end: Some(Bound::At(1_767_229_200_000))
            }
        ));
        let descriptions = rules.descriptions();
        assert_eq!(
            descriptions[0],
            r#"rule 1 (line 3) "traffic doubles": scaleReplicas 2 where kind == "Deployment""#
        );
        assert_eq!(
            descriptions[7],
            "rule 8 (line 13): renameNamespace shop -> shop-b"
        );
        assert_eq!(
            descriptions[8..],
            [
                "rule 9 (line 14): scaleResources requests.cpu x0.5 requests.memory x0.75",
                "rule 10 (line 15): setResources limits.cpu=2 limits.memory=256Mi in container app",
            ]
        );
    }

    #[test]
    fn an_unknown_key_names_the_rule_and_its_line() {
        let error = error("rules:\n  - drop: true\n    match: 'true'\n  - scale: 2\n");
        match &error {
            RuleError::Rule {
                index,
                line,
                message,
            } => {
                assert_eq!((*index, *line), (2, 4), "{error}");
                assert!(message.contains("scale"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(error.to_string().lines().count(), 1, "{error}");
        // Outside any rule: the parser's position alone.
        let error = Rules::parse("rulez: []\n").unwrap_err();
        assert!(matches!(error, RuleError::Yaml(_)), "{error:?}");
        assert!(error.to_string().contains("rulez"), "{error}");
    }

    #[test]
    fn deep_or_long_cel_is_refused_in_one_line_before_the_parser_sees_it() {
        let rule = |selector: &str| format!("rules:\n  - match: '{selector}'\n    drop: true\n");
        // The issue's case (53 parentheses aborted the CLI), just past the limit, and far past.
        for depth in [53, 33, 4_000] {
            let selector = format!("{}kind == \"Pod\"{}", "(".repeat(depth), ")".repeat(depth));
            let started = std::time::Instant::now();
            let text = error(&rule(&selector)).to_string();
            assert!(
                text.starts_with(
                    "rule 1 (line 2): match is refused before parsing: nested more than 32 levels"
                ),
                "{text}"
            );
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
        }
        let lists = format!("{}1{} == 1", "[".repeat(40), "]".repeat(40));
        assert!(
            error(&rule(&lists))
                .to_string()
                .contains("more than 32 levels")
        );
        let long = format!("name == \"{}\"", "x".repeat(100_000));
        let text = error(&rule(&long)).to_string();
        assert!(text.contains("over the 8192-byte limit"), "{text}");
        let chained = format!("{}kind == \"Pod\"", "!".repeat(600));
        let text = error(&rule(&chained)).to_string();
        assert!(text.contains("more than 512 operators"), "{text}");
    }

    #[test]
    fn cel_at_the_nesting_limit_and_macros_compile() {
        // Debug builds need far more stack per level than release ones, where this fits in a
        // 2 MiB thread: give the parser a release build's margin.
        let parsed = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                let selector = format!("{}kind == \"Pod\"{}", "(".repeat(32), ")".repeat(32));
                Rules::parse(&format!(
                    "rules:\n  - match: '{selector}'\n    drop: true\n"
                ))
                .map(|rules| rules.len())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(parsed.unwrap(), 1);
        let macros = "rules:\n  - match: 'kind == \"Deployment\" && [1, 2, 3].all(x, x > 0) && \
             object.spec.template.spec.containers.exists(c, c.name == \"app\")'\n    drop: true\n";
        assert_eq!(Rules::parse(macros).unwrap().len(), 1);
    }

    #[test]
    fn bad_cel_names_the_rule_the_line_and_the_position() {
        let error = error(
            "rules:\n  - scaleReplicas: 2\n  - name: broken\n    match: 'kind == \"Deployment\" &&'\n    drop: true\n",
        );
        match &error {
            RuleError::Cel {
                index,
                line,
                cel_line,
                cel_column,
                ..
            } => {
                assert_eq!((*index, *line), (2, 3), "{error}");
                assert_eq!(*cel_line, 1, "{error}");
                assert!(*cel_column >= 24, "{error}");
            }
            other => panic!("{other:?}"),
        }
        let text = error.to_string();
        assert!(
            text.starts_with("rule 2 (line 3): match is not valid CEL at 1:"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn each_rule_needs_exactly_one_valid_operation() {
        for (yaml, expected) in [
            ("rules:\n  - name: nothing\n", "no operation"),
            (
                "rules:\n  - match: 'true'\n    drop: true\n    scaleReplicas: 2\n",
                "one operation per rule, found drop and scaleReplicas",
            ),
            ("rules:\n  - drop: true\n", "drop needs a match"),
            (
                "rules:\n  - match: 'true'\n    shiftTime: 1h\n",
                "takes no match",
            ),
            ("rules:\n  - shiftTime: soon\n", "not a duration"),
            ("rules:\n  - stretchTime: 0\n", "must be a number > 0"),
            (
                "rules:\n  - extendEnd: -5m\n",
                "is not a duration > 0 like 20m",
            ),
            (
                "rules:\n  - extendEnd: 0s\n",
                "is not a duration > 0 like 20m",
            ),
            (
                "rules:\n  - match: 'true'\n    extendEnd: 5m\n",
                "takes no match",
            ),
            ("rules:\n  - scaleReplicas: -1\n", "must be a number >= 0"),
            ("rules:\n  - scaleReplicas: .nan\n", "must be a number >= 0"),
            ("rules:\n  - scaleReplicas: .inf\n", "must be a number >= 0"),
            (
                "rules:\n  - scaleReplicas: 1e300\n",
                "scaleReplicas 1e300 must be at most 2147483647: replicas are an int32",
            ),
            (
                "rules:\n  - keepWindow: {}\n",
                "needs a start, an end or both",
            ),
            (
                "rules:\n  - keepWindow: { start: 2m, end: 1m }\n",
                "start must be before end",
            ),
            (
                "rules:\n  - keepWindow: { start: '1969-12-31T23:30:00Z' }\n",
                "keepWindow: start 1969-12-31T23:30:00Z is before 1970-01-01T00:00:00Z",
            ),
            ("rules:\n  - mergePatch: 3\n", "must be a map"),
            (
                "rules:\n  - renameNamespace: { from: a, to: '' }\n",
                "is not a namespace",
            ),
            (
                "rules:\n  - renameNamespace: { from: a, to: 'Bad_Name!!' }\n",
                "renameNamespace: to \"Bad_Name!!\" is not a namespace name (an RFC 1123 DNS label",
            ),
            (
                "rules:\n  - renameNamespace: { from: '', to: b }\n",
                "from \"\" is not a namespace",
            ),
            (
                "rules:\n  - jsonPatch: [ { op: frobnicate, path: /a } ]\n",
                "frobnicate",
            ),
            (
                "rules:\n  - scaleResources: {}\n",
                "scaleResources needs requests or limits",
            ),
            (
                "rules:\n  - scaleResources: { requests: { cpu: half } }\n",
                "scaleResources: requests.cpu \"half\" is not a number",
            ),
            (
                "rules:\n  - scaleResources: { limits: { memory: 0 } }\n",
                "limits.memory 0 must be a number above 0",
            ),
            (
                "rules:\n  - scaleResources: { requests: { pods: 2 } }\n",
                "only cpu, memory, ephemeral-storage can be scaled",
            ),
            (
                "rules:\n  - setResources: { limits: { memory: lots } }\n",
                "setResources: limits.memory \"lots\" is not a non-negative quantity",
            ),
            (
                "rules:\n  - setResources: { container: Main!, limits: { cpu: 1 } }\n",
                "container \"Main!\" is not a container name",
            ),
            ("rules:\n  - setResources: { limit: { cpu: 1 } }\n", "limit"),
        ] {
            let error = error(yaml);
            assert!(
                matches!(
                    error,
                    RuleError::Rule {
                        index: 1,
                        line: 2,
                        ..
                    }
                ),
                "{yaml}: {error:?}"
            );
            assert!(error.to_string().contains(expected), "{yaml}: {error}");
        }
    }

    #[test]
    fn the_manuals_example_is_valid() {
        let readme = include_str!("../../../docs/tracer.md");
        let start = readme
            .find("```yaml\nrules:")
            .expect("the tracer manual has a rules example")
            + 8;
        let end = start + readme[start..].find("```").unwrap();
        let rules = Rules::parse(&readme[start..end]).unwrap();
        // A new operation must be named here (the match is exhaustive) and so shown in the
        // manual; `stretchTime` is only named in a comment beside `shiftTime`.
        fn kind(op: &Op) -> &'static str {
            match op {
                Op::Drop => "drop",
                Op::MergePatch(_) => "mergePatch",
                Op::JsonPatch(_) => "jsonPatch",
                Op::ScaleReplicas(_) => "scaleReplicas",
                Op::Resources(_) => "resources",
                Op::KeepWindow { .. } => "keepWindow",
                Op::ShiftTime(_) => "shiftTime",
                Op::StretchTime(_) => "stretchTime",
                Op::ExtendEnd(_) => "extendEnd",
                Op::RenameNamespace { .. } => "renameNamespace",
            }
        }
        let shown: std::collections::BTreeSet<_> =
            rules.rules.iter().map(|r| kind(&r.op)).collect();
        let all = [
            "drop",
            "mergePatch",
            "jsonPatch",
            "scaleReplicas",
            "resources",
            "keepWindow",
            "shiftTime",
            "extendEnd",
            "renameNamespace",
        ];
        assert_eq!(shown, all.into_iter().collect());
        assert!(readme[start..end].contains("stretchTime: 2"));
        assert_eq!(rules.len(), 10);
    }

    #[test]
    fn garbage_is_one_line() {
        for yaml in ["", "\u{0}\u{1}binary", "rules: [", "- just\n- a list\n"] {
            let error = error(yaml);
            assert_eq!(error.to_string().lines().count(), 1, "{yaml:?}: {error}");
        }
    }
}
