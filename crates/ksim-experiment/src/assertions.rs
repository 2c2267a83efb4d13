//! `--assert` expressions: CEL over an experiment's comparison, so a team can gate a scheduler or
//! CA change in its own CI. `variants.<name>.<figure>` is the mean over the variant's runs that
//! succeeded (`variants.packed.cost <= variants.baseline.cost * 0.95`), `.min.<figure>` and
//! `.max.<figure>` the spread, `.failed` the runs that did not succeed; figures are doubles.
//! With repeats, `.beyond_noise.<figure>` (a bool) and `.p.<figure>` (the noise test's p-value)
//! say whether a variant's difference from the baseline is an effect or the noise of repeats;
//! the baseline and figures the test could not judge have none. `.availability["ns/name"]` is a
//! workload's mean availability over a variant's disruptions.
//! Compiled, and the variants and figures they name checked against the experiment, before
//! anything runs, so a typo costs no simulation.

use std::{collections::BTreeMap, collections::HashMap, sync::Arc};

use cel::common::ast::{Expr, LiteralValue, operators};
use cel::objects::{Key, Map};
use cel::{Context, IdedExpr, Program, Value};

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
    /// Per figure the noise test judged: its p-value, and whether it is beyond the noise.
    pub noise: BTreeMap<String, (f64, bool)>,
    /// Per workload of the runs' disruptions (`namespace/name`): its availability over the
    /// runs; `variants.<name>.availability["shop/web"]` is the mean.
    pub availability: BTreeMap<String, Stat>,
}

/// An assertion that cannot be taken or did not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssertionError {
    #[error("--assert {expression:?}: not CEL: {message}")]
    Syntax { expression: String, message: String },
    #[error("--assert {expression:?}: refused before parsing: {limit}")]
    Limit {
        expression: String,
        limit: ksim_trace::cel_limits::CelLimitError,
    },
    #[error("--assert {expression:?}: knows only `variants`, not `{variable}`")]
    UnknownVariable {
        expression: String,
        variable: String,
    },
    #[error("--assert {expression:?}: {message}")]
    Evaluation { expression: String, message: String },
    #[error("--assert {expression:?} is {value}, not a bool")]
    NotBool { expression: String, value: String },
    #[error("--assert {expression:?}: {message}")]
    UnknownName { expression: String, message: String },
}

/// A compiled `--assert`.
#[derive(Debug)]
pub struct Assertion {
    source: String,
    program: Program,
}

impl Assertion {
    pub fn compile(source: &str) -> Result<Self, AssertionError> {
        ksim_trace::cel_limits::check(source).map_err(|limit| AssertionError::Limit {
            expression: source.to_owned(),
            limit,
        })?;
        let program = Program::compile(source).map_err(|errors| AssertionError::Syntax {
            expression: source.to_owned(),
            message: errors
                .errors
                .first()
                .map_or_else(|| "cannot be parsed".to_owned(), |e| e.msg.clone()),
        })?;
        // Free names only: a macro's own variables (`x` in `.all(x, ...)`) are not the
        // experiment's, though the library's references list them.
        let mut free = Vec::new();
        free_variables(program.expression(), &mut Vec::new(), &mut free);
        if let Some(variable) = free.into_iter().find(|variable| *variable != "variants") {
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

    /// Whether every `variants.<name>.<figure>` it reads names one of `variants` and one of
    /// `figures` (`min.`/`max.` before a figure, or `failed`), so a typo is refused before the
    /// first run rather than after the last. Names chosen at run time (`variants[x]`) are left
    /// to [`Assertion::holds`].
    pub fn check_names(&self, variants: &[&str], figures: &[&str]) -> Result<(), AssertionError> {
        let mut paths = Vec::new();
        variant_paths(self.program.expression(), &mut paths);
        for path in paths {
            if let Some(message) = unknown_name(&path, variants, figures) {
                return Err(AssertionError::UnknownName {
                    expression: self.source.clone(),
                    message,
                });
            }
        }
        Ok(())
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

/// The first name of `path` (after `variants`) that is not among those given, said as an error.
fn unknown_name(path: &[String], variants: &[&str], figures: &[&str]) -> Option<String> {
    let list = |names: &[&str]| names.join(", ");
    let variant = path.first()?;
    if !variants.contains(&variant.as_str()) {
        return Some(format!(
            "the experiment has no variant {variant:?} (it has {})",
            list(variants)
        ));
    }
    let figure = match path.get(1).map(String::as_str) {
        // Workloads are the runs' to name.
        None | Some("failed" | "availability") => return None,
        Some("min" | "max" | "beyond_noise" | "p") => path.get(2)?,
        Some(_) => &path[1],
    };
    (!figures.contains(&figure.as_str())).then(|| {
        format!(
            "variant {variant} has no figure {figure:?} (figures: {}; min.<figure>, \
             max.<figure>, beyond_noise.<figure>, p.<figure>, failed)",
            list(figures)
        )
    })
}

/// Every path read from `variants` in `expr`, without its `variants` root: `variants.a.cost`
/// and `variants["a"].cost` give `[a, cost]`. A macro whose own variable is named `variants`
/// hides the outer one in its body, which is then not looked at.
fn variant_paths(expr: &IdedExpr, paths: &mut Vec<Vec<String>>) {
    if let Some(mut path) = constant_path(expr)
        && path.first().map(String::as_str) == Some("variants")
    {
        path.remove(0);
        paths.push(path);
        return;
    }
    match &expr.expr {
        Expr::Call(call) => {
            call.target
                .iter()
                .for_each(|target| variant_paths(target, paths));
            call.args.iter().for_each(|arg| variant_paths(arg, paths));
        }
        Expr::Select(select) => variant_paths(&select.operand, paths),
        Expr::List(list) => list.elements.iter().for_each(|e| variant_paths(e, paths)),
        Expr::Map(map) => map.entries.iter().for_each(|entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(entry) => {
                variant_paths(&entry.key, paths);
                variant_paths(&entry.value, paths);
            }
            cel::common::ast::EntryExpr::StructField(field) => variant_paths(&field.value, paths),
        }),
        Expr::Struct(fields) => fields.entries.iter().for_each(|entry| {
            if let cel::common::ast::EntryExpr::StructField(field) = &entry.expr {
                variant_paths(&field.value, paths);
            }
        }),
        Expr::Comprehension(loop_) => {
            variant_paths(&loop_.iter_range, paths);
            variant_paths(&loop_.accu_init, paths);
            let shadowed = [
                Some(&loop_.iter_var),
                loop_.iter_var2.as_ref(),
                Some(&loop_.accu_var),
            ]
            .into_iter()
            .flatten()
            .any(|var| var == "variants");
            if !shadowed {
                for part in [&loop_.loop_cond, &loop_.loop_step, &loop_.result] {
                    variant_paths(part, paths);
                }
            }
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// The identifiers `expr` reads that none of its comprehensions (the expanded macros) binds;
/// `bound` holds those in scope. Recursion is as deep as the expression, which
/// `ksim_trace::cel_limits` bounds.
fn free_variables<'a>(expr: &'a IdedExpr, bound: &mut Vec<&'a str>, free: &mut Vec<&'a str>) {
    let mut walk = |expr: &'a IdedExpr, bound: &mut Vec<&'a str>| free_variables(expr, bound, free);
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(&name.as_str()) && !free.contains(&name.as_str()) {
                free.push(name);
            }
        }
        Expr::Call(call) => {
            call.target.iter().for_each(|target| walk(target, bound));
            call.args.iter().for_each(|arg| walk(arg, bound));
        }
        Expr::Select(select) => walk(&select.operand, bound),
        Expr::List(list) => list.elements.iter().for_each(|e| walk(e, bound)),
        Expr::Map(map) => map.entries.iter().for_each(|entry| match &entry.expr {
            cel::common::ast::EntryExpr::MapEntry(entry) => {
                walk(&entry.key, bound);
                walk(&entry.value, bound);
            }
            cel::common::ast::EntryExpr::StructField(field) => walk(&field.value, bound),
        }),
        Expr::Struct(fields) => fields.entries.iter().for_each(|entry| {
            if let cel::common::ast::EntryExpr::StructField(field) = &entry.expr {
                walk(&field.value, bound);
            }
        }),
        Expr::Comprehension(loop_) => {
            walk(&loop_.iter_range, bound);
            walk(&loop_.accu_init, bound);
            let scope = bound.len();
            bound.extend(
                [
                    Some(&loop_.iter_var),
                    loop_.iter_var2.as_ref(),
                    Some(&loop_.accu_var),
                ]
                .into_iter()
                .flatten()
                .map(String::as_str),
            );
            for part in [&loop_.loop_cond, &loop_.loop_step, &loop_.result] {
                walk(part, bound);
            }
            bound.truncate(scope);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// The names `expr` reads, root first, when it is an identifier followed by fields and
/// constant string indexes (`a.b["c"]`); `None` for anything else.
fn constant_path(expr: &IdedExpr) -> Option<Vec<String>> {
    match &expr.expr {
        Expr::Ident(name) => Some(vec![name.clone()]),
        Expr::Select(select) => {
            let mut path = constant_path(&select.operand)?;
            path.push(select.field.clone());
            Some(path)
        }
        Expr::Call(call) if call.func_name == operators::INDEX && call.target.is_none() => {
            let [operand, key] = call.args.as_slice() else {
                return None;
            };
            let Expr::Literal(LiteralValue::String(key)) = &key.expr else {
                return None;
            };
            let mut path = constant_path(operand)?;
            path.push(key.inner().to_owned());
            Some(path)
        }
        _ => None,
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
    let noise = |pick: fn(&(f64, bool)) -> Value| {
        variant
            .noise
            .iter()
            .map(move |(name, noise)| (name.clone(), pick(noise)))
    };
    entries.push(("p".to_owned(), map(noise(|n| Value::Float(n.0)))));
    entries.push(("beyond_noise".to_owned(), map(noise(|n| Value::Bool(n.1)))));
    entries.push(("failed".to_owned(), Value::Int(i64::from(variant.failed))));
    entries.push((
        "availability".to_owned(),
        map(variant
            .availability
            .iter()
            .map(|(workload, stat)| (workload.clone(), Value::Float(stat.mean)))),
    ));
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
                    noise: BTreeMap::new(),
                    availability: BTreeMap::from([("shop/web".to_owned(), stat(0.97, 0.95, 0.99))]),
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
                    noise: BTreeMap::from([("cost".to_owned(), (0.003, true))]),
                    availability: BTreeMap::from([("shop/web".to_owned(), stat(1.0, 1.0, 1.0))]),
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
        assert_eq!(
            holds("variants.packed.beyond_noise.cost && variants.packed.p.cost < 0.01"),
            Ok(true)
        );
        // Not judged: absent, as a cost without a price is.
        assert_eq!(holds("!has(variants.baseline.beyond_noise.cost)"), Ok(true));
        // A workload's availability over the disruptions, by namespace/name.
        assert_eq!(
            holds("variants.packed.availability[\"shop/web\"] >= 0.99"),
            Ok(true)
        );
        assert_eq!(
            holds("variants.baseline.availability[\"shop/web\"] >= 0.99"),
            Ok(false)
        );
    }

    #[test]
    fn unknown_variants_and_figures_are_named_before_anything_runs() {
        const VARIANTS: &[&str] = &["baseline", "packed"];
        const FIGURES: &[&str] = &["cost", "pending_p99_ms"];
        let check = |source: &str| {
            Assertion::compile(source)
                .unwrap()
                .check_names(VARIANTS, FIGURES)
        };
        for good in [
            "variants.packed.cost <= variants.baseline.cost * 0.95",
            "variants.packed.max.cost < variants.baseline.min.pending_p99_ms",
            "variants.packed.failed == 0 && has(variants.baseline.cost)",
            "variants.packed.beyond_noise.cost || variants.packed.p.pending_p99_ms > 0.05",
            "variants[\"packed\"].cost < 1.0",
            "variants.packed.availability[\"shop/web\"] >= 0.99",
            // A macro's variable named `variants` is its own, not the experiment's.
            "[1, 2].all(variants, variants.zzz > 0)",
        ] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for (bad, named) in [
            (
                "variants.zzz.cost <= 3.0",
                "no variant \"zzz\" (it has baseline, packed)",
            ),
            (
                "variants.packed.cost < variants[\"zzz\"].cost",
                "no variant \"zzz\"",
            ),
            (
                "variants.packed.costt <= 3.0",
                "variant packed has no figure \"costt\"",
            ),
            ("variants.packed.min.cots <= 3.0", "no figure \"cots\""),
            ("has(variants.zzz.cost)", "no variant \"zzz\""),
            (
                "[1].exists(variants, variants > 0) && variants.zzz.failed == 0",
                "no variant \"zzz\"",
            ),
        ] {
            let error = check(bad).unwrap_err();
            assert!(
                matches!(error, AssertionError::UnknownName { .. }),
                "{bad}: {error}"
            );
            assert!(error.to_string().contains(named), "{bad}: {error}");
        }
    }

    #[test]
    fn macros_bind_their_own_variables() {
        let holds = |source: &str| Assertion::compile(source).and_then(|a| a.holds(&variants()));
        assert_eq!(holds("[1, 2, 3].all(x, x > 0)"), Ok(true));
        assert_eq!(holds("[1, 2, 3].exists(x, x > 2)"), Ok(true));
        assert_eq!(holds("[1, 2, 3].exists_one(x, x > 2)"), Ok(true));
        assert_eq!(holds("[1, 2].map(x, x * 2) == [2, 4]"), Ok(true));
        assert_eq!(holds("[1, 2, 3].filter(x, x > 1).size() == 2"), Ok(true));
        assert_eq!(
            holds(
                "['baseline', 'packed'].all(v, variants[v].failed <= 1) && \
                 [variants.packed.cost].exists(c, c < variants.baseline.cost)"
            ),
            Ok(true)
        );
        // Outside its macro the variable is unknown again.
        let error = Assertion::compile("[1].all(x, x > 0) && x > 0").unwrap_err();
        assert_eq!(
            error,
            AssertionError::UnknownVariable {
                expression: "[1].all(x, x > 0) && x > 0".to_owned(),
                variable: "x".to_owned(),
            }
        );
    }

    #[test]
    fn deep_or_long_assertions_are_refused_before_parsing() {
        let started = std::time::Instant::now();
        for depth in [33, 53, 4_000] {
            let source = format!(
                "{}variants.packed.cost < 1.0{}",
                "(".repeat(depth),
                ")".repeat(depth)
            );
            let error = Assertion::compile(&source).unwrap_err();
            assert!(matches!(error, AssertionError::Limit { .. }), "{error}");
            assert!(
                error.to_string().contains("nested more than 32 levels"),
                "{error}"
            );
        }
        let source = format!("variants.packed.cost < {}1.0", "-".repeat(100_000));
        let error = Assertion::compile(&source).unwrap_err();
        assert!(error.to_string().contains("8192-byte limit"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // At the limit it compiles (given the stack a release build's parser needs).
        let at_limit = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                let source = format!(
                    "{}variants.packed.failed == 1{}",
                    "[".repeat(32),
                    "]".repeat(32)
                );
                Assertion::compile(&format!("{source}.size() == 1")).map(|_| ())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(at_limit, Ok(()));
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
