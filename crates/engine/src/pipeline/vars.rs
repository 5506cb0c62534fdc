//! Values for the pipeline file's `vars:` from outside it: `--vars FILE` (a YAML mapping of
//! names to values) and `--var NAME=VALUE` (a YAML value).
//!
//! Precedence, lowest first: the file's `vars:`, the vars files in the order given, then the
//! `--var` values in the order given. An override replaces the var's value before any `${name}`
//! is substituted, so the pipeline is the one the file would give with that value written in
//! its `vars:`. Only vars the pipeline file declares can be set: a misspelt name is an error,
//! not a new var nothing reads.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::decl::{Vars, declared};
use super::yaml::{self, Loc, Located, Node};
use super::{Loader, Source};

/// Values for the pipeline file's vars from outside it, applied over its `vars:`: first every
/// file in `files`, in order, then every assignment in `assignments`, in order (later wins).
#[derive(Debug, Clone, Default)]
pub struct VarOverrides {
    /// `--vars FILE`, in the order given.
    pub files: Vec<VarsFile>,
    /// `--var NAME=VALUE`, in the order given.
    pub assignments: Vec<VarAssignment>,
}

impl VarOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.assignments.is_empty()
    }
}

/// A vars file, read: a YAML mapping of var names to values (comments allowed; an empty file
/// sets nothing).
#[derive(Debug, Clone)]
pub struct VarsFile {
    path: PathBuf,
    entries: Vec<(Located<String>, Located<Node>)>,
}

impl VarsFile {
    /// Reads and parses the vars file at `path`.
    pub fn read(path: &Path) -> Result<VarsFile, VarsFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| VarsFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        VarsFile::parse(&text, path)
    }

    /// Parses `text` as the vars file `path` (used in messages).
    pub fn parse(text: &str, path: &Path) -> Result<VarsFile, VarsFileError> {
        let root = yaml::parse(text).map_err(|e| VarsFileError::Yaml {
            path: path.to_path_buf(),
            line: e.loc.line,
            column: e.loc.column,
            message: e.message,
        })?;
        let entries = match root.value {
            Node::Map(entries) => entries,
            Node::Null => Vec::new(),
            other => {
                return Err(VarsFileError::NotMapping {
                    path: path.to_path_buf(),
                    line: root.loc.line,
                    column: root.loc.column,
                    found: other.kind(),
                });
            }
        };
        Ok(VarsFile {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The file's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The var names it sets, in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| name.value.as_str())
    }
}

/// `path:line:column`, or `path` when the line is unknown.
fn place(path: &Path, line: u64, column: u64) -> String {
    if line == 0 {
        path.display().to_string()
    } else {
        format!("{}:{line}:{column}", path.display())
    }
}

/// A vars file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum VarsFileError {
    /// It cannot be read.
    #[error("{}: cannot read the vars file: {error}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a separate cause).
        error: std::io::Error,
    },
    /// It is not valid YAML.
    #[error("{}: invalid YAML in the vars file: {message}", place(.path, *.line, *.column))]
    Yaml {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped (0 when unknown).
        line: u64,
        /// Column, from 1 (0 when unknown).
        column: u64,
        /// What the parser found wrong.
        message: String,
    },
    /// Its document is not a mapping of names to values.
    #[error(
        "{}: a vars file must be a mapping of var names to values, found {found}",
        place(.path, *.line, *.column)
    )]
    NotMapping {
        /// The file.
        path: PathBuf,
        /// Where the document starts.
        line: u64,
        /// Column, from 1.
        column: u64,
        /// What it is instead.
        found: &'static str,
    },
}

/// One `--var NAME=VALUE`: a var name and a YAML value.
#[derive(Debug, Clone)]
pub struct VarAssignment {
    name: String,
    value: Located<Node>,
}

impl VarAssignment {
    /// The var it sets.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A `--var` that does not read `NAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarAssignmentError {
    /// No `=`, or nothing before it.
    #[error("`{text}`: expected NAME=VALUE (a var of the pipeline file, `=`, a YAML value)")]
    Malformed {
        /// The text as given.
        text: String,
    },
    /// The value is not valid YAML.
    #[error("`{text}`: invalid YAML value at column {column}: {message}")]
    Yaml {
        /// The text as given.
        text: String,
        /// Column in the whole `NAME=VALUE` text, from 1 (0 when unknown).
        column: u64,
        /// What the parser found wrong.
        message: String,
    },
}

impl FromStr for VarAssignment {
    type Err = VarAssignmentError;

    fn from_str(text: &str) -> Result<Self, VarAssignmentError> {
        let malformed = || VarAssignmentError::Malformed {
            text: text.to_owned(),
        };
        let (name, value) = text.split_once('=').ok_or_else(malformed)?;
        if name.is_empty() {
            return Err(malformed());
        }
        let value = yaml::parse(value).map_err(|e| VarAssignmentError::Yaml {
            text: text.to_owned(),
            column: if e.loc.line == 1 && e.loc.column > 0 {
                e.loc.column + name.chars().count() as u64 + 1
            } else {
                0
            },
            message: e.message,
        })?;
        Ok(VarAssignment {
            name: name.to_owned(),
            value,
        })
    }
}

impl Loader {
    /// Gives the pipeline file's `vars` the values `overrides` sets, in precedence order.
    /// Every place in an overriding value is moved to a source of its own, so a problem in it
    /// is shown in its vars file, or naming its `--var`, not at a line of the pipeline file.
    pub(super) fn override_vars(&mut self, vars: &mut Vars, overrides: &VarOverrides) {
        for file in &overrides.files {
            let source = self.new_source(Source::File(file.path.clone()));
            for (name, value) in &file.entries {
                let name = name.clone().in_source(source);
                self.set_var(vars, name, value.clone().in_source(source));
            }
        }
        for assignment in &overrides.assignments {
            let source = self.new_source(Source::Flag(assignment.name.clone()));
            let name = Located {
                value: assignment.name.clone(),
                loc: Loc {
                    source,
                    ..Loc::default()
                },
            };
            self.set_var(vars, name, assignment.value.clone().in_source(source));
        }
    }

    /// Numbers a new source of values.
    fn new_source(&mut self, source: Source) -> u32 {
        self.sources.push(source);
        u32::try_from(self.sources.len() - 1).unwrap_or(u32::MAX)
    }

    /// Sets the declared var `name` to `value`; reports a name the pipeline file lacks.
    fn set_var(&mut self, vars: &mut Vars, name: Located<String>, value: Located<Node>) {
        if let Some(slot) = vars.get_mut(&name.value) {
            *slot = value;
            return;
        }
        let message = format!(
            "unknown var `{}`: overrides only set vars that {} declares ({})",
            name.value,
            self.file.display(),
            declared(vars)
        );
        self.error(name.loc, message);
    }
}

#[cfg(test)]
mod tests;
