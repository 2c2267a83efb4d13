//! `--assert` expressions: CEL over an experiment's comparison, so a team can gate a scheduler or
//! CA change in its own CI. `variants.<name>.<figure>` is the mean over the variant's runs that
//! succeeded (`variants.packed.cost <= variants.baseline.cost * 0.95`), `.min.<figure>` and
//! `.max.<figure>` the spread, `.failed` the runs that did not succeed; figures are doubles.
//! Compiled before anything runs, so a typo costs no simulation.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use cel::objects::{Key, Map};
use cel::{Context, Program, Value};

/// A figure's mean and spread over a variant's runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

/// What assertions see of one variant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VariantFigures {
    /// Per figure name; a figure no run had (a cost without a price) is absent.
    pub figures: BTreeMap<String, Stat>,
    /// Runs that failed or were cancelled.
    pub failed: u32,
}

/// An assertion that cannot be taken or did not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssertionError {
    #[error("--assert {expression:?}: not CEL: {message}")]
    Syntax { expression: String, message: String },
    #[error("--assert {expression:?}: knows only `variants`, not `{variable}`")]
    UnknownVariable {
        expression: String,
        variable: String,
    },
    #[error("--assert {expression:?}: {message}")]
    Evaluation { expression: String, message: String },
    #[error("--assert {expression:?} is {value}, not a bool")]
    NotBool { expression: String, value: String },
}

/// A compiled `--assert`.
#[derive(Debug)]
pub struct Assertion {
    source: String,
    program: Program,
}

impl Assertion {
    pub fn compile(source: &str) -> Result<Self, AssertionError> {
        let program = Program::compile(source).map_err(|errors| AssertionError::Syntax {
            expression: source.to_owned(),
            message: errors
                .errors
                .first()
                .map_or_else(|| "cannot be parsed".to_owned(), |e| e.msg.clone()),
        })?;
        if let Some(variable) = program
            .references()
            .variables()
            .into_iter()
            .find(|variable| *variable != "variants")
        {
            return Err(AssertionError::UnknownVariable {
                expression: source.to_owned(),
                variable: variable.to_owned(),
            });
        }
        Ok(Self {
            source: source.to_owned(),
            program,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether it holds over `variants`; an error says why it could not be decided (a variant
    /// or figure that is not there, a type mismatch).
    pub fn holds(
        &self,
        variants: &BTreeMap<String, VariantFigures>,
    ) -> Result<bool, AssertionError> {
        let mut context = Context::default();
        let value = map(variants
            .iter()
            .map(|(name, variant)| (name.clone(), variant_value(variant))));
        context.add_variable_from_value("variants", value);
        match self.program.execute(&context) {
            Ok(Value::Bool(holds)) => Ok(holds),
            Ok(other) => Err(AssertionError::NotBool {
                expression: self.source.clone(),
                value: format!("{other:?}"),
            }),
            Err(error) => Err(AssertionError::Evaluation {
                expression: self.source.clone(),
                message: error.to_string(),
            }),
        }
    }
}

fn variant_value(variant: &VariantFigures) -> Value {
    let of = |pick: fn(&Stat) -> f64| {
        variant
            .figures
            .iter()
            .map(move |(name, stat)| (name.clone(), Value::Float(pick(stat))))
    };
    let mut entries: Vec<(String, Value)> = of(|s| s.mean).collect();
    entries.push(("min".to_owned(), map(of(|s| s.min))));
    entries.push(("max".to_owned(), map(of(|s| s.max))));
    entries.push(("failed".to_owned(), Value::Int(i64::from(variant.failed))));
    map(entries.into_iter())
}

fn map(entries: impl Iterator<Item = (String, Value)>) -> Value {
    let map: HashMap<Key, Value> = entries
        .map(|(key, value)| (Key::String(Arc::new(key)), value))
        .collect();
    Value::Map(Map { map: Arc::new(map) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn variants() -> BTreeMap<String, VariantFigures> {
        let stat = |mean, min, max| Stat { mean, min, max };
        BTreeMap::from([
            (
                "baseline".to_owned(),
                VariantFigures {
                    figures: BTreeMap::from([
                        ("cost".to_owned(), stat(1.0, 0.9, 1.1)),
                        ("pending_p99_ms".to_owned(), stat(100.0, 90.0, 110.0)),
                    ]),
                    failed: 0,
                },
            ),
            (
                "packed".to_owned(),
                VariantFigures {
                    figures: BTreeMap::from([
                        ("cost".to_owned(), stat(0.9, 0.85, 0.95)),
                        ("pending_p99_ms".to_owned(), stat(120.0, 100.0, 140.0)),
                    ]),
                    failed: 1,
                },
            ),
        ])
    }

    #[test]
    fn assertions_read_means_spreads_and_failures() {
        let holds = |source: &str| Assertion::compile(source).unwrap().holds(&variants());
        assert_eq!(
            holds("variants.packed.cost <= variants.baseline.cost * 0.95"),
            Ok(true)
        );
        assert_eq!(
            holds(
                "variants.packed.cost <= variants.baseline.cost * 0.95 && \
                 variants.packed.pending_p99_ms <= variants.baseline.pending_p99_ms * 1.10"
            ),
            Ok(false)
        );
        assert_eq!(
            holds("variants.packed.max.cost < variants.baseline.min.cost"),
            Ok(false)
        );
        assert_eq!(holds("variants.packed.failed == 0"), Ok(false));
    }

    #[test]
    fn what_cannot_be_decided_is_an_error_naming_the_assertion() {
        let run = |source: &str| Assertion::compile(source).and_then(|a| a.holds(&variants()));
        let syntax = run("variants.packed.cost <=").unwrap_err();
        assert!(matches!(syntax, AssertionError::Syntax { .. }), "{syntax}");
        let unknown = run("variant.packed.cost < 1.0").unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "--assert \"variant.packed.cost < 1.0\": knows only `variants`, not `variant`"
        );
        let missing = run("variants.spread.cost < 1.0").unwrap_err();
        assert!(
            matches!(missing, AssertionError::Evaluation { .. }),
            "{missing}"
        );
        let not_bool = run("variants.packed.cost").unwrap_err();
        assert!(
            matches!(not_bool, AssertionError::NotBool { .. }),
            "{not_bool}"
        );
    }
}
