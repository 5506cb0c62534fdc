//! The names that point at instances, parsed once.
//!
//! Grammar (stage names are letters, digits, `_` and `-`):
//! ```text
//! selector  = stage [ "[" cell "]" ]      `train`, `train[arch=slice,size=d128]`
//! reference = selector [ "." member ]     `train.model` (an input's producer output)
//! override  = selector "." param "=" value   `-s train[arch=slice].lr=0.5`
//! ```
//! A bare stage selects every matrix cell of the stage; with a cell, the one
//! instance of that name. The cell is kept as written and compared with the
//! instances' names: its values may hold `=`, `,`, `.` and nested `[..]`
//! (a list value), so the cell ends at the bracket that closes the first one.

use std::fmt;

/// A stage, or one matrix cell of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector {
    /// The stage name as written (or the whole text, when it fits no grammar).
    pub stage: String,
    /// The text between the brackets, when one cell is named.
    pub cell: Option<String>,
}

impl Selector {
    /// Reads a whole text as a selector. Never fails: a text that is not a
    /// selector becomes a stage name that no instance has, so lookups report
    /// it as unknown, with the text as written.
    pub fn parse(text: &str) -> Selector {
        let len = selector_len(text);
        if len == text.len() {
            Selector::split(text)
        } else {
            Selector::verbatim(text)
        }
    }

    /// `text` (the selector part of a longer string) as stage and cell.
    fn split(text: &str) -> Selector {
        match text.split_once('[') {
            Some((stage, rest)) if rest.ends_with(']') => Selector {
                stage: stage.to_owned(),
                cell: Some(rest[..rest.len() - 1].to_owned()),
            },
            _ => Selector::verbatim(text),
        }
    }

    fn verbatim(text: &str) -> Selector {
        Selector {
            stage: text.to_owned(),
            cell: None,
        }
    }

    /// Whether this selects the instance `name` of stage `stage`.
    pub fn selects(&self, name: &str, stage: &str) -> bool {
        match &self.cell {
            None => stage == self.stage,
            Some(cell) => {
                name.strip_prefix(self.stage.as_str())
                    .and_then(|rest| rest.strip_prefix('['))
                    .and_then(|rest| rest.strip_suffix(']'))
                    == Some(cell.as_str())
            }
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cell {
            None => f.write_str(&self.stage),
            Some(cell) => write!(f, "{}[{cell}]", self.stage),
        }
    }
}

/// A selector with an optional `.member`: an input's producer and output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    /// The instances referred to.
    pub target: Selector,
    /// The output named after the dot, if any.
    pub member: Option<String>,
}

impl Reference {
    /// Reads `stage`, `stage.output`, `stage[k=v]` or `stage[k=v].output`.
    /// Never fails, like [`Selector::parse`].
    pub fn parse(text: &str) -> Reference {
        let len = selector_len(text);
        if len == text.len() {
            return Reference {
                target: Selector::split(text),
                member: None,
            };
        }
        match text[len..].strip_prefix('.') {
            Some(member) => Reference {
                target: Selector::split(&text[..len]),
                member: Some(member.to_owned()),
            },
            None => Reference {
                target: Selector::verbatim(text),
                member: None,
            },
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.target)?;
        match &self.member {
            Some(member) => write!(f, ".{member}"),
            None => Ok(()),
        }
    }
}

/// A `-s stage.param=value` override from the command line.
#[derive(Debug, Clone)]
pub struct Override {
    /// The instances it applies to.
    pub(crate) target: Selector,
    /// The param name.
    pub(crate) param: String,
    /// The value, as YAML text.
    pub(crate) value: String,
}

/// An override that does not read `stage.param=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}`: expected stage.param=value")]
pub struct OverrideError {
    /// The override as given.
    pub(crate) text: String,
}

impl std::str::FromStr for Override {
    type Err = OverrideError;

    fn from_str(text: &str) -> Result<Self, OverrideError> {
        let bad = || OverrideError {
            text: text.to_owned(),
        };
        let len = selector_len(text);
        let (param, value) = text[len..]
            .strip_prefix('.')
            .and_then(|rest| rest.split_once('='))
            .ok_or_else(bad)?;
        if len == 0 || param.is_empty() {
            return Err(bad());
        }
        Ok(Override {
            target: Selector::split(&text[..len]),
            param: param.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// The length of the selector at the start of `text`: the stage name up to
/// the first `[`, `.` or `=`, then, after a `[`, up to its closing bracket
/// (all of `text` when it never closes).
fn selector_len(text: &str) -> usize {
    let stage_end = text.find(['[', '.', '=']).unwrap_or(text.len());
    if !text[stage_end..].starts_with('[') {
        return stage_end;
    }
    let mut depth = 0usize;
    for (i, c) in text[stage_end..].char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return stage_end + i + 1;
                }
            }
            _ => {}
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(stage: &str, cell: Option<&str>) -> Selector {
        Selector {
            stage: stage.into(),
            cell: cell.map(Into::into),
        }
    }

    #[test]
    fn selectors_split_stage_and_cell() {
        assert_eq!(Selector::parse("train"), sel("train", None));
        assert_eq!(
            Selector::parse("t[arch=gdn,lr=0.1]"),
            sel("t", Some("arch=gdn,lr=0.1"))
        );
        assert_eq!(Selector::parse("t[xs=[1,2]]"), sel("t", Some("xs=[1,2]")));
        // Not a selector: kept whole, so it names nothing.
        assert_eq!(Selector::parse("t.out"), sel("t.out", None));
        assert_eq!(Selector::parse("t[a]b").to_string(), "t[a]b");
        let cell = Selector::parse("t[arch=gdn]");
        assert!(cell.selects("t[arch=gdn]", "t"));
        assert!(!cell.selects("t[arch=slice]", "t"));
        assert!(Selector::parse("t").selects("t[arch=gdn]", "t"));
    }

    #[test]
    fn references_take_the_member_after_the_cell() {
        let r = Reference::parse("t[name=a.b].model");
        assert_eq!(r.target, sel("t", Some("name=a.b")));
        assert_eq!(r.member.as_deref(), Some("model"));
        assert_eq!(r.to_string(), "t[name=a.b].model");
        assert_eq!(Reference::parse("src").member, None);
        assert_eq!(Reference::parse("src.a.b").member.as_deref(), Some("a.b"));
    }

    #[test]
    fn overrides_read_selector_param_and_value() {
        let ov: Override = "t[arch=gdn].lr=0.5".parse().unwrap();
        assert_eq!(ov.target, sel("t", Some("arch=gdn")));
        assert_eq!((ov.param.as_str(), ov.value.as_str()), ("lr", "0.5"));
        let ov: Override = "t[x=a=b].p=c=d".parse().unwrap();
        assert_eq!(ov.target, sel("t", Some("x=a=b")));
        assert_eq!((ov.param.as_str(), ov.value.as_str()), ("p", "c=d"));
        let ov: Override = "t.xs=[1, 2]".parse().unwrap();
        assert_eq!((ov.param.as_str(), ov.value.as_str()), ("xs", "[1, 2]"));
        for bad in ["t=1", ".n=1", "t.=1", "t.n", "t[a=1]=2"] {
            let err = bad.parse::<Override>().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("`{bad}`: expected stage.param=value")
            );
        }
    }
}
