//! Typed stage parameters: declarations, values and the validated set a stage receives.

use std::collections::BTreeMap;
use std::fmt;

use crate::StageError;

/// The type of a parameter, as declared by a stage kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    /// `true` or `false`.
    Bool,
    /// A signed 64-bit integer.
    Int,
    /// A 64-bit float; integers are accepted and widened.
    Float,
    /// A string.
    Str,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
    /// A list whose items all have the given type.
    List(&'static ParamType),
    /// Any scalar or list (used for the `command` kind's free parameters).
    Any,
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamType::Bool => f.write_str("a boolean"),
            ParamType::Int => f.write_str("an integer"),
            ParamType::Float => f.write_str("a number"),
            ParamType::Str => f.write_str("a string"),
            ParamType::Choice(options) => write!(f, "one of {}", options.join(", ")),
            ParamType::List(item) => write!(f, "a list of {item} items"),
            ParamType::Any => f.write_str("a scalar or a list"),
        }
    }
}

impl ParamType {
    /// Checks `value` against this type, returning it in canonical form
    /// (integers widened to floats where a float is expected).
    ///
    /// # Errors
    /// A [`ParamTypeError`] saying what was expected and what was found.
    pub fn check(&self, value: &ParamValue) -> Result<ParamValue, ParamTypeError> {
        match (self, value) {
            (ParamType::Any, v) => Ok(v.clone()),
            (ParamType::Bool, ParamValue::Bool(_))
            | (ParamType::Int, ParamValue::Int(_))
            | (ParamType::Float, ParamValue::Float(_))
            | (ParamType::Str, ParamValue::Str(_)) => Ok(value.clone()),
            (ParamType::Float, ParamValue::Int(i)) => Ok(ParamValue::Float(*i as f64)),
            (ParamType::Choice(options), ParamValue::Str(s)) => {
                if options.contains(&s.as_str()) {
                    Ok(value.clone())
                } else {
                    Err(ParamTypeError::NotAChoice {
                        options,
                        found: s.clone(),
                    })
                }
            }
            (ParamType::List(item), ParamValue::List(items)) => items
                .iter()
                .enumerate()
                .map(|(index, v)| {
                    item.check(v).map_err(|e| ParamTypeError::Item {
                        index,
                        problem: Box::new(e),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(ParamValue::List),
            _ => Err(ParamTypeError::Mismatch {
                expected: self.to_string(),
                found: value.describe(),
            }),
        }
    }
}

/// A param value that does not have its declared type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamTypeError {
    /// Another type than the declared one.
    #[error("expected {expected}, found {found}")]
    Mismatch {
        /// The declared type, described.
        expected: String,
        /// The value, described.
        found: String,
    },
    /// A string that is none of the declared choices.
    #[error("expected one of {}, found \"{found}\"", options.join(", "))]
    NotAChoice {
        /// The choices.
        options: &'static [&'static str],
        /// The string given.
        found: String,
    },
    /// An item of a list does not have the item type.
    #[error("item {index}: {problem}")]
    Item {
        /// The item's index.
        index: usize,
        /// What is wrong with it.
        problem: Box<ParamTypeError>,
    },
}

/// A parameter value: the scalars and lists YAML can express.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list of values.
    List(Vec<ParamValue>),
}

impl ParamValue {
    /// A short description of the value's type and value, for error messages.
    pub fn describe(&self) -> String {
        match self {
            ParamValue::Bool(b) => format!("boolean {b}"),
            ParamValue::Int(i) => format!("integer {i}"),
            ParamValue::Float(x) => format!("number {x}"),
            ParamValue::Str(s) => format!("string \"{s}\""),
            ParamValue::List(items) => format!("a list of {} items", items.len()),
        }
    }

    /// The canonical text form used in cache keys and `cwm.lock`: JSON-like,
    /// with floats in Rust's shortest round-trip notation. Two values are
    /// equal iff their canonical forms are equal.
    pub fn canonical(&self) -> String {
        let mut out = String::new();
        self.write_canonical(&mut out);
        out
    }

    fn write_canonical(&self, out: &mut String) {
        use std::fmt::Write as _;
        match self {
            ParamValue::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            ParamValue::Int(i) => {
                let _ = write!(out, "{i}");
            }
            ParamValue::Float(x) => {
                // `{:?}` always keeps a decimal point or exponent, so 1.0 and 1 differ.
                let _ = write!(out, "{x:?}");
            }
            ParamValue::Str(s) => write_json_string(out, s),
            ParamValue::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_canonical(out);
                }
                out.push(']');
            }
        }
    }

    /// The value as plain text, as a shell command would want it: strings
    /// unquoted, lists as their canonical form.
    pub fn to_plain_string(&self) -> String {
        match self {
            ParamValue::Str(s) => s.clone(),
            other => other.canonical(),
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

fn write_json_string(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A default value a [`ParamSpec`] can declare in a `const`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamDefault {
    /// The parameter is required.
    Required,
    /// The parameter may be absent and then has no value.
    Absent,
    /// A boolean default.
    Bool(bool),
    /// An integer default.
    Int(i64),
    /// A float default.
    Float(f64),
    /// A string default.
    Str(&'static str),
}

impl ParamDefault {
    /// The default as a value, if there is one.
    pub fn value(&self) -> Option<ParamValue> {
        match *self {
            ParamDefault::Required | ParamDefault::Absent => None,
            ParamDefault::Bool(b) => Some(ParamValue::Bool(b)),
            ParamDefault::Int(i) => Some(ParamValue::Int(i)),
            ParamDefault::Float(x) => Some(ParamValue::Float(x)),
            ParamDefault::Str(s) => Some(ParamValue::Str(s.to_owned())),
        }
    }
}

/// The declaration of one parameter of a stage kind.
#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    /// The parameter's name under `params:`.
    pub name: &'static str,
    /// Its type.
    pub ty: ParamType,
    /// Its default, or whether it is required.
    pub default: ParamDefault,
    /// What it means, for documentation and error messages.
    pub doc: &'static str,
    /// Whether the value joins the cache key. Params that change how fast a stage runs but
    /// not what it writes (`threads`) are left out, so changing them reruns nothing.
    pub keyed: bool,
}

impl ParamSpec {
    /// A parameter that must be given.
    pub const fn required(name: &'static str, ty: ParamType, doc: &'static str) -> Self {
        Self {
            name,
            ty,
            default: ParamDefault::Required,
            doc,
            keyed: true,
        }
    }

    /// A parameter that may be left out, with no default value.
    pub const fn optional(name: &'static str, ty: ParamType, doc: &'static str) -> Self {
        Self {
            name,
            ty,
            default: ParamDefault::Absent,
            doc,
            keyed: true,
        }
    }

    /// A parameter with a default value.
    pub const fn with_default(
        name: &'static str,
        ty: ParamType,
        default: ParamDefault,
        doc: &'static str,
    ) -> Self {
        Self {
            name,
            ty,
            default,
            doc,
            keyed: true,
        }
    }

    /// The same param, left out of the cache key: for params that change how a stage runs
    /// (its speed, its thread count) but never what it writes.
    pub const fn unkeyed(self) -> Self {
        Self {
            keyed: false,
            ..self
        }
    }
}

/// The validated parameters of one stage instance, defaults filled in.
///
/// Ordered by name, so iteration and [`Params::canonical`] are deterministic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Params {
    values: BTreeMap<String, ParamValue>,
}

impl Params {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a value (used by the executor after validation).
    pub fn insert(&mut self, name: impl Into<String>, value: ParamValue) {
        self.values.insert(name.into(), value);
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.values.get(name)
    }

    /// Iterates over (name, value) in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParamValue)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of parameters set.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no parameter is set.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The canonical, order-independent text of all parameters:
    /// `{"a":1,"b":"x"}` with names sorted.
    pub fn canonical(&self) -> String {
        let mut out = String::from("{");
        for (i, (name, value)) in self.values.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_json_string(&mut out, name);
            out.push(':');
            value.write_canonical(&mut out);
        }
        out.push('}');
        out
    }

    fn require(&self, name: &str) -> Result<&ParamValue, StageError> {
        self.get(name)
            .ok_or_else(|| StageError::Param(format!("parameter `{name}` is not set")))
    }

    fn wrong(name: &str, want: &str, got: &ParamValue) -> StageError {
        StageError::Param(format!(
            "parameter `{name}`: expected {want}, found {}",
            got.describe()
        ))
    }

    /// The string parameter `name`.
    pub fn str(&self, name: &str) -> Result<&str, StageError> {
        match self.require(name)? {
            ParamValue::Str(s) => Ok(s),
            other => Err(Self::wrong(name, "a string", other)),
        }
    }

    /// The string parameter `name`, or `default` when it is not set.
    pub fn str_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        match self.get(name) {
            Some(ParamValue::Str(s)) => s,
            _ => default,
        }
    }

    /// The integer parameter `name`.
    pub fn int(&self, name: &str) -> Result<i64, StageError> {
        match self.require(name)? {
            ParamValue::Int(i) => Ok(*i),
            other => Err(Self::wrong(name, "an integer", other)),
        }
    }

    /// The non-negative integer parameter `name`, as `u64`.
    pub fn uint(&self, name: &str) -> Result<u64, StageError> {
        let value = self.int(name)?;
        u64::try_from(value).map_err(|_| {
            StageError::Param(format!(
                "parameter `{name}`: expected a non-negative integer, found {value}"
            ))
        })
    }

    /// The float parameter `name` (integers are widened).
    pub fn float(&self, name: &str) -> Result<f64, StageError> {
        match self.require(name)? {
            ParamValue::Float(x) => Ok(*x),
            ParamValue::Int(i) => Ok(*i as f64),
            other => Err(Self::wrong(name, "a number", other)),
        }
    }

    /// The boolean parameter `name`.
    pub fn bool(&self, name: &str) -> Result<bool, StageError> {
        match self.require(name)? {
            ParamValue::Bool(b) => Ok(*b),
            other => Err(Self::wrong(name, "a boolean", other)),
        }
    }

    /// The list parameter `name`.
    pub fn list(&self, name: &str) -> Result<&[ParamValue], StageError> {
        match self.require(name)? {
            ParamValue::List(items) => Ok(items),
            other => Err(Self::wrong(name, "a list", other)),
        }
    }

    /// The list-of-strings parameter `name`, or `None` when it is not set.
    pub fn str_list(&self, name: &str) -> Result<Option<Vec<String>>, StageError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        let ParamValue::List(items) = value else {
            return Err(Self::wrong(name, "a list of strings", value));
        };
        items
            .iter()
            .map(|item| match item {
                ParamValue::Str(s) => Ok(s.clone()),
                other => Err(Self::wrong(name, "a list of strings", other)),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_list_reads_strings_and_rejects_other_items() {
        let mut p = Params::new();
        p.insert(
            "ranks",
            ParamValue::List(vec![ParamValue::Str("slice/d512=2".into())]),
        );
        p.insert("bad", ParamValue::List(vec![ParamValue::Int(2)]));
        assert_eq!(
            p.str_list("ranks").unwrap(),
            Some(vec!["slice/d512=2".to_owned()])
        );
        assert_eq!(p.str_list("absent").unwrap(), None);
        assert!(p.str_list("bad").unwrap_err().to_string().contains("bad"));
    }

    #[test]
    fn canonical_form_is_order_independent_and_typed() {
        let mut a = Params::new();
        a.insert("lr", ParamValue::Float(3e-4));
        a.insert("arch", ParamValue::Str("slice".into()));
        let mut b = Params::new();
        b.insert("arch", ParamValue::Str("slice".into()));
        b.insert("lr", ParamValue::Float(3e-4));
        assert_eq!(a.canonical(), b.canonical());
        assert_eq!(a.canonical(), r#"{"arch":"slice","lr":0.0003}"#);
        assert_ne!(
            ParamValue::Float(1.0).canonical(),
            ParamValue::Int(1).canonical()
        );
        assert_eq!(ParamValue::Str("a\"b\n".into()).canonical(), r#""a\"b\n""#);
    }

    #[test]
    fn checking_widens_ints_and_rejects_mismatches() {
        assert_eq!(
            ParamType::Float.check(&ParamValue::Int(2)),
            Ok(ParamValue::Float(2.0))
        );
        let err = ParamType::Int
            .check(&ParamValue::Str("ten".into()))
            .unwrap_err();
        assert_eq!(err.to_string(), "expected an integer, found string \"ten\"");
        const MODES: &[&str] = &["fast", "reference"];
        assert!(
            ParamType::Choice(MODES)
                .check(&ParamValue::Str("slow".into()))
                .unwrap_err()
                .to_string()
                .contains("one of fast, reference")
        );
        const INTS: ParamType = ParamType::Int;
        let list = ParamValue::List(vec![ParamValue::Int(1), ParamValue::Bool(true)]);
        assert!(
            ParamType::List(&INTS)
                .check(&list)
                .unwrap_err()
                .to_string()
                .starts_with("item 1:")
        );
    }

    #[test]
    fn accessors_report_missing_and_mistyped() {
        let mut p = Params::new();
        p.insert("n", ParamValue::Int(-3));
        assert_eq!(p.int("n").unwrap(), -3);
        assert!(p.uint("n").is_err());
        assert!(
            p.str("n")
                .unwrap_err()
                .to_string()
                .contains("expected a string")
        );
        assert!(
            p.str("missing")
                .unwrap_err()
                .to_string()
                .contains("not set")
        );
        assert_eq!(p.str_or("missing", "d"), "d");
    }
}
