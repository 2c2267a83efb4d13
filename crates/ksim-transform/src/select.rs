//! CEL selectors: compiled once per rule, evaluated on each record a rule may change.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value};

/// An object converted once for CEL, lent to every selector that reads it: converting a
/// `Value` into a variable copies it whole, which would happen at each evaluation otherwise.
pub(crate) type CelObject = Box<dyn Val>;

/// An object CEL cannot take, in the library's own words.
#[derive(Debug, thiserror::Error)]
#[error("cannot be read by CEL: {0}")]
pub(crate) struct NotCel(String);

/// Converts a JSON object for [`Selector::evaluate`].
pub(crate) fn cel_object(json: &serde_json::Value) -> Result<CelObject, NotCel> {
    CelObject::try_from(to_cel(json)).map_err(|error| NotCel(error.to_string()))
}

/// Lends `object` to a context without copying it.
struct ObjectResolver<'a> {
    object: &'a dyn Val,
}

impl VariableResolver for ObjectResolver<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "object").then_some(CowVal::Borrowed(self.object))
    }
}

/// What a selector sees of one record. `object` is built only for selectors that read it.
#[derive(Debug)]
pub(crate) struct Subject<'a> {
    pub(crate) kind: &'a str,
    pub(crate) group: &'a str,
    pub(crate) version: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) op: &'static str,
    pub(crate) time_ms: i64,
    pub(crate) offset_ms: i64,
}

/// A rule's `match`, compiled.
pub(crate) struct Selector {
    source: String,
    program: Program,
    /// Converting an object to CEL costs more than most selectors; only done when used.
    reads_object: bool,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why a `match` does not compile.
#[derive(Debug)]
pub(crate) enum CompileError {
    /// Refused before parsing: too long, or nested deeper than the parser's stack allows.
    Limit(ksim_trace::cel_limits::CelLimitError),
    /// Not CEL: (line, column, message) within the expression.
    Syntax(i64, i64, String),
}

/// Whether a selector matched, or why it could not say.
pub(crate) enum Outcome {
    Matched(bool),
    /// The program failed on this record (a missing field, a type mismatch): not a match.
    Failed,
    /// The program yielded something other than a bool: the rule is wrong.
    NotBool(String),
}

impl Selector {
    /// Compiles `source`, once it is within the limits the parser's stack allows.
    pub(crate) fn compile(env: &Env, source: String) -> Result<Self, CompileError> {
        ksim_trace::cel_limits::check(&source).map_err(CompileError::Limit)?;
        match env.compile(&source) {
            Ok(program) => {
                let reads_object = program.references().has_variable("object");
                Ok(Self {
                    source,
                    program,
                    reads_object,
                })
            }
            Err(errors) => {
                let (line, column, message) = errors
                    .errors
                    .first()
                    .map(|e| (e.pos.0 as i64, e.pos.1 as i64, e.msg.clone()))
                    .unwrap_or((1, 0, "cannot be parsed".to_owned()));
                Err(CompileError::Syntax(line, column, message))
            }
        }
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    pub(crate) fn reads_object(&self) -> bool {
        self.reads_object
    }

    /// Evaluates the selector on `subject`; `object` is its JSON, converted when needed.
    pub(crate) fn evaluate(
        &self,
        env: &Arc<Env>,
        subject: &Subject<'_>,
        object: Option<&CelObject>,
    ) -> Outcome {
        let resolver = object.map(|object| ObjectResolver {
            object: object.as_ref(),
        });
        let mut context = Context::with_env(Arc::clone(env));
        if let Some(resolver) = &resolver {
            context.set_variable_resolver(resolver);
        }
        context.add_variable_from_value("kind", subject.kind);
        context.add_variable_from_value("group", subject.group);
        context.add_variable_from_value("version", subject.version);
        // `namespace` is a reserved word in CEL: the variable is `ns`.
        context.add_variable_from_value("ns", subject.namespace);
        context.add_variable_from_value("name", subject.name);
        context.add_variable_from_value("op", subject.op);
        context.add_variable_from_value("time_ms", subject.time_ms);
        context.add_variable_from_value("offset_ms", subject.offset_ms);
        match self.program.execute(&context) {
            Ok(Value::Bool(matched)) => Outcome::Matched(matched),
            Ok(other) => Outcome::NotBool(format!("{other:?}")),
            Err(_) => Outcome::Failed,
        }
    }
}

/// A JSON value as CEL sees it: integers as `int` (so `object.spec.replicas > 3` compares ints),
/// other numbers as `double`.
pub(crate) fn to_cel(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => match n.as_u64() {
                Some(u) => Value::UInt(u),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            Value::List(Arc::new(items.iter().map(to_cel).collect()))
        }
        serde_json::Value::Object(fields) => {
            let map: HashMap<Key, Value> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            Value::Map(Map { map: Arc::new(map) })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn subject() -> Subject<'static> {
        Subject {
            kind: "Deployment",
            group: "apps",
            version: "v1",
            namespace: "shop",
            name: "web",
            op: "apply",
            time_ms: 5_000,
            offset_ms: 1_000,
        }
    }

    fn matches(source: &str, object: &serde_json::Value) -> Option<bool> {
        let env = Arc::new(Env::stdlib());
        let selector = Selector::compile(&env, source.to_owned()).unwrap();
        let object = selector.reads_object().then(|| cel_object(object).unwrap());
        match selector.evaluate(&env, &subject(), object.as_ref()) {
            Outcome::Matched(matched) => Some(matched),
            Outcome::Failed => None,
            Outcome::NotBool(what) => panic!("not a bool: {what}"),
        }
    }

    #[test]
    fn sees_identity_and_object() {
        let object =
            serde_json::json!({"metadata": {"namespace": "shop"}, "spec": {"replicas": 4}});
        assert_eq!(
            matches(
                r#"kind == "Deployment" && object.metadata.namespace == "shop""#,
                &object
            ),
            Some(true)
        );
        assert_eq!(matches("object.spec.replicas > 3", &object), Some(true));
        assert_eq!(
            matches(
                r#"group == "apps" && version == "v1" && name.startsWith("we")"#,
                &object
            ),
            Some(true)
        );
        assert_eq!(
            matches(r#"op == "apply" && time_ms - offset_ms == 4000"#, &object),
            Some(true)
        );
        assert_eq!(matches(r#"ns.matches("^sh")"#, &object), Some(true));
        assert_eq!(matches("has(object.spec.paused)", &object), Some(false));
        // A missing field is a failure, which is not a match.
        assert_eq!(matches("object.spec.paused", &object), None);
        assert!(
            !Selector::compile(&Env::stdlib(), "kind == 1".to_owned())
                .unwrap()
                .reads_object()
        );
    }

    #[test]
    fn macros_select() {
        let object = serde_json::json!({"spec": {"ports": [80, 443]}});
        for (source, expected) in [
            ("[1, 2, 3].all(x, x > 0)", true),
            ("object.spec.ports.exists(p, p == 443)", true),
            ("object.spec.ports.exists_one(p, p > 100)", true),
            ("object.spec.ports.map(p, p + 1) == [81, 444]", true),
            ("object.spec.ports.filter(p, p < 100).size() == 1", true),
            ("[1, 2, 3].all(x, x > 1)", false),
        ] {
            assert_eq!(matches(source, &object), Some(expected), "{source}");
        }
    }

    #[test]
    fn parse_errors_have_a_position() {
        let Err(CompileError::Syntax(line, column, message)) =
            Selector::compile(&Env::stdlib(), "kind ==\n  (".to_owned())
        else {
            panic!("not a syntax error");
        };
        assert_eq!(line, 2, "{message}");
        assert!(column >= 2, "{column}: {message}");
        assert!(!message.is_empty());
    }
}
