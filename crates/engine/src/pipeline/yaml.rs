//! A YAML document as a tree of located nodes.
//!
//! The pipeline file is first read into this tree (anchors, aliases and merge
//! keys resolved by the YAML parser), keeping the line and column of every
//! node, so that every later validation error can point at the exact place.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A 1-based line and column, in the pipeline file or in one of the texts that override its
/// vars (`source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    /// Line, from 1 (0 when unknown).
    pub line: u64,
    /// Column, from 1 (0 when unknown).
    pub column: u64,
    /// The text the place is in: 0 for the pipeline file (and for every text [`parse`] reads),
    /// else the number the loader gave a `--vars` file or a `--var` value.
    pub source: u32,
}

impl Loc {
    /// Line and column in the pipeline file.
    pub fn at(line: u64, column: u64) -> Loc {
        Loc {
            line,
            column,
            source: 0,
        }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value with the place it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    /// The value.
    pub value: T,
    /// Where it was written (for an alias: where the alias is used).
    pub loc: Loc,
}

/// One YAML node.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `~`, `null` or nothing.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Located<Node>>),
    /// A mapping, in file order.
    Map(Vec<(Located<String>, Located<Node>)>),
}

impl Node {
    /// What kind of node this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Int(_) => "an integer",
            Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

fn located<T>(spanned: Spanned<T>) -> Located<T> {
    Located {
        value: spanned.value,
        loc: Loc::at(spanned.referenced.line(), spanned.referenced.column()),
    }
}

impl Located<Node> {
    /// This node with every place in it, its keys' and items' included, moved to `source`.
    pub fn in_source(self, source: u32) -> Located<Node> {
        let value = match self.value {
            Node::Seq(items) => Node::Seq(items.into_iter().map(|i| i.in_source(source)).collect()),
            Node::Map(entries) => Node::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.in_source(source), v.in_source(source)))
                    .collect(),
            ),
            scalar => scalar,
        };
        Located {
            value,
            loc: Loc { source, ..self.loc },
        }
    }
}

impl Located<String> {
    /// This key with its place moved to `source`.
    pub fn in_source(self, source: u32) -> Located<String> {
        Located {
            value: self.value,
            loc: Loc { source, ..self.loc },
        }
    }
}

/// A YAML syntax error with its location.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    /// Where the parser stopped (may be unknown).
    pub loc: Loc,
    /// What went wrong.
    pub message: String,
}

/// Parses a YAML document into a located tree. Never panics.
pub fn parse(text: &str) -> Result<Located<Node>, YamlError> {
    // YAML 1.2 booleans only: `n`, `y`, `no`, `on` stay strings (a param
    // called `n` must not turn into `false`).
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    };
    match serde_saphyr::from_str_with_options::<Spanned<Node>>(text, options) {
        Ok(root) => Ok(located(root)),
        Err(err) => {
            let loc = err
                .location()
                .map(|l| Loc::at(l.line(), l.column()))
                .unwrap_or_default();
            let message = first_line(&err.to_string());
            Err(YamlError { loc, message })
        }
    }
}

/// The error text without any source snippet the parser may append.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("invalid YAML").trim();
    // Drop a trailing " at line X column Y" the parser adds; we print our own.
    match line.find(" at line ") {
        Some(idx) => line[..idx].to_owned(),
        None => line.to_owned(),
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        i64::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom(format!("integer {v} is too large")))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
        i64::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom(format!("integer {v} is too large")))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        i64::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom(format!("integer {v} is too large")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(located(item));
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<KeyText>>()? {
            let value = map.next_value::<Spanned<Node>>()?;
            let key = located(key);
            entries.push((
                Located {
                    value: key.value.0,
                    loc: key.loc,
                },
                located(value),
            ));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key: any scalar, kept as its text.
struct KeyText(String);

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = KeyText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText, E> {
                Ok(KeyText(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<KeyText, E> {
                Ok(KeyText(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<KeyText, E> {
                Ok(KeyText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<KeyText, E> {
                Ok(KeyText("null".to_owned()))
            }
        }
        deserializer.deserialize_any(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(node: &Node) -> &[(Located<String>, Located<Node>)] {
        match node {
            Node::Map(entries) => entries,
            other => panic!("expected a map, got {other:?}"),
        }
    }

    #[test]
    fn scalars_keep_types_and_locations() {
        let root = parse("a: 1\nb: 1.5e-4\nc: true\nd: hello\ne: ~\nf: [1, x]\nn: no\n").unwrap();
        let entries = map(&root.value);
        assert_eq!(entries[0].1.value, Node::Int(1));
        assert_eq!(entries[1].1.value, Node::Float(1.5e-4));
        assert_eq!(entries[2].1.value, Node::Bool(true));
        assert_eq!(entries[3].1.value, Node::Str("hello".into()));
        assert_eq!(entries[4].1.value, Node::Null);
        assert_eq!(entries[6].0.value, "n");
        assert_eq!(entries[6].1.value, Node::Str("no".into()));
        assert_eq!(entries[1].0.loc, Loc::at(2, 1));
        assert_eq!(entries[3].1.loc, Loc::at(4, 4));
        match &entries[5].1.value {
            Node::Seq(items) => assert_eq!(items[1].loc, Loc::at(6, 8)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anchors_aliases_and_merge_keys_resolve() {
        let root =
            parse("base: &b\n  lr: 0.1\n  wd: 0.0\ncopy: *b\nmerged:\n  <<: *b\n  wd: 0.5\n")
                .unwrap();
        let entries = map(&root.value);
        let copy = map(&entries[1].1.value);
        assert_eq!(copy[0].1.value, Node::Float(0.1));
        assert_eq!(copy[1].1.value, Node::Float(0.0));
        // An aliased value points at where the alias is used.
        assert_eq!(copy[0].1.loc.line, 4);
        let merged = map(&entries[2].1.value);
        let wd = merged.iter().find(|(k, _)| k.value == "wd").unwrap();
        assert_eq!(wd.1.value, Node::Float(0.5));
        assert!(merged.iter().any(|(k, _)| k.value == "lr"));
    }

    #[test]
    fn syntax_errors_have_locations_and_never_panic() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.loc.line >= 1, "{err:?}");
        let err = parse("a: 1\na: 2\n").unwrap_err();
        assert!(err.message.to_lowercase().contains("duplicate"), "{err:?}");
        for text in ["", ":", "- - -", "{", "a: *nope", "\u{0}", "a: !!binary x"] {
            let _ = parse(text);
        }
    }
}
