//! Deserializing a parsed JSON value while keeping track of where in it we are, so that an
//! error names the field (`bins.3.steps`, `hparams.lr`) and says in plain words what was
//! expected and found.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use serde_json::Value;

/// Why a value did not fit its type, and where.
#[derive(Debug)]
pub(crate) struct Error {
    /// The dotted path of the offending field; `None` until a node claims the error.
    pub(crate) field: Option<String>,
    /// What is wrong.
    pub(crate) message: String,
    /// For a type or value mismatch: what was expected, in words.
    expected: Option<String>,
    /// For a missing field: its name, relative to the node that notices.
    missing: Option<String>,
}

impl Error {
    fn new(message: String) -> Error {
        Error {
            field: None,
            message,
            expected: None,
            missing: None,
        }
    }

    /// Claims the error for the node at `path` holding `value`, unless a deeper node did.
    fn at(mut self, path: &str, value: &Value) -> Error {
        if self.field.is_some() {
            return self;
        }
        if let Some(name) = self.missing.take() {
            self.field = Some(join(path, &name));
            self.message = "missing".into();
            return self;
        }
        if let Some(expected) = &self.expected
            && !matches!(value, Value::Object(_) | Value::Array(_))
        {
            self.message = format!("expected {expected}, found {value}");
        }
        self.field = Some(path.to_owned());
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) if !field.is_empty() => write!(f, "field `{field}`: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

/// Plain words for what serde's visitors expect (`f64` is "a number").
fn in_words(expected: &dyn de::Expected) -> String {
    let text = expected.to_string();
    match text.as_str() {
        "f64" | "f32" => "a number".into(),
        "u64" | "u32" | "u16" | "u8" | "usize" => "a non-negative integer".into(),
        "i64" | "i32" | "i16" | "i8" | "isize" => "an integer".into(),
        "a boolean" => "true or false".into(),
        _ => text,
    }
}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Error {
        Error::new(msg.to_string())
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Error {
        let words = in_words(expected);
        let mut error = Error::new(format!("expected {words}, found {unexpected}"));
        error.expected = Some(words);
        error
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Error {
        Error::invalid_type(unexpected, expected)
    }

    fn missing_field(field: &'static str) -> Error {
        let mut error = Error::new("missing".into());
        error.missing = Some(field.to_owned());
        error
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// A JSON value at a dotted path, as a serde deserializer.
pub(crate) struct Node<'de> {
    value: &'de Value,
    path: String,
}

impl<'de> Node<'de> {
    /// The whole document.
    pub(crate) fn root(value: &'de Value) -> Node<'de> {
        Node {
            value,
            path: String::new(),
        }
    }

    fn claim<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        result.map_err(|e| e.at(&self.path, self.value))
    }
}

impl<'de> Deserializer<'de> for Node<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let result = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter().enumerate(),
                path: &self.path,
            }),
            Value::Object(map) => visitor.visit_map(Fields {
                fields: map.iter(),
                value: None,
                path: &self.path,
            }),
        };
        self.claim(result)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Null => {
                let result = visitor.visit_none();
                self.claim(result)
            }
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let result = match self.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            other => Err(Error::new(format!("expected a string, found {other}"))),
        };
        self.claim(result)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// The items of an array.
struct Items<'de, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    path: &'p str,
}

impl<'de> SeqAccess<'de> for Items<'de, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.items.next() {
            None => Ok(None),
            Some((i, value)) => seed
                .deserialize(Node {
                    value,
                    path: join(self.path, &i.to_string()),
                })
                .map(Some),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The fields of an object.
struct Fields<'de, 'p> {
    fields: serde_json::map::Iter<'de>,
    value: Option<(&'de str, &'de Value)>,
    path: &'p str,
}

impl<'de> MapAccess<'de> for Fields<'de, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.fields.next() {
            None => Ok(None),
            Some((key, value)) => {
                self.value = Some((key.as_str(), value));
                let key: de::value::BorrowedStrDeserializer<'de, Error> =
                    de::value::BorrowedStrDeserializer::new(key.as_str());
                seed.deserialize(key).map(Some)
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| Error::new("a value without its key".into()))?;
        seed.deserialize(Node {
            value,
            path: join(self.path, key),
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        steps: u64,
        loss: f64,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Cosine,
        None,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        name: String,
        kind: Kind,
        best: Option<Inner>,
        bins: Vec<Inner>,
    }

    fn parse(text: &str) -> Result<Outer, Error> {
        let value: Value = serde_json::from_str(text).unwrap();
        Outer::deserialize(Node::root(&value))
    }

    #[test]
    fn errors_name_the_field_and_say_what_was_expected() {
        let good = r#"{"name": "a", "kind": "cosine", "best": null,
            "bins": [{"steps": 3, "loss": 1}]}"#;
        assert_eq!(
            parse(good).unwrap(),
            Outer {
                name: "a".into(),
                kind: Kind::Cosine,
                best: None,
                bins: vec![Inner {
                    steps: 3,
                    loss: 1.0
                }],
            }
        );
        let cases = [
            (
                r#"{"name": "a", "kind": "none", "bins": [{"steps": -3, "loss": 1}]}"#,
                "field `bins.0.steps`: expected a non-negative integer, found -3",
            ),
            (
                r#"{"name": "a", "kind": "none", "best": {"steps": 1, "loss": "high"}, "bins": []}"#,
                "field `best.loss`: expected a number, found \"high\"",
            ),
            (
                r#"{"name": "a", "kind": "none", "best": {"steps": 1}, "bins": []}"#,
                "field `best.loss`: missing",
            ),
            (r#"{"kind": "none", "bins": []}"#, "field `name`: missing"),
            (
                r#"{"name": 5, "kind": "none", "bins": []}"#,
                "field `name`: expected a string, found 5",
            ),
            (
                r#"{"name": "a", "kind": "step", "bins": []}"#,
                "field `kind`: unknown variant `step`, expected `cosine` or `none`",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(parse(text).unwrap_err().to_string(), message, "{text}");
        }
    }
}
