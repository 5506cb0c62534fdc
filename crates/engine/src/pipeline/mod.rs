//! The pipeline file, in two levels: located YAML, then validated instances.
//!
//! Flow: `yaml::parse` reads the text into located nodes (anchors, aliases
//! and merge keys resolved); [`load`] applies the [`LoadOptions`]' var
//! overrides to the file's `vars:`, substitutes `${vars}`, expands every
//! `matrix:` into instances, checks every stage kind, param, input and output
//! name against the [`Registry`], and returns a
//! [`Pipeline`] or *all* the problems found, each with file:line:column.
//! Cycles are found by [`crate::plan`], which orders the instances.

mod decl;
mod expand;
mod selector;
mod settings;
mod vars;
pub(crate) mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use cwm_stage::{ParamValue, Params};

use crate::executor::settings::ExecutorSettings;
use crate::registry::Registry;
use crate::resources::Resources;
use decl::{StageDecl, Vars};
pub(crate) use selector::Selector;
pub use selector::{Override, OverrideError};
pub use vars::{VarAssignment, VarAssignmentError, VarOverrides, VarsFile, VarsFileError};
use yaml::{Loc, Located, Node};

/// One problem in a pipeline file (or in a vars file overriding its vars), with where it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Diagnostic {
    /// The pipeline file, or the `--vars` file the problem is in.
    pub file: PathBuf,
    /// Line and column (0:0 when unknown, e.g. for command-line overrides).
    pub loc: Loc,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.loc.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.loc, self.message)
        }
    }
}

/// Every problem found in a pipeline file.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostics(pub(crate) Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// A reference from an input to one output of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRef {
    /// Index of the producing instance in [`Pipeline::instances`].
    pub producer: usize,
    /// The producer's output name.
    pub output: String,
}

/// One runnable stage instance (one matrix cell, or a stage without a matrix).
#[derive(Debug, Clone)]
pub struct Instance {
    /// Unique name, e.g. `parse` or `train[arch=slice,size=d128]`.
    pub name: String,
    /// The stage's name in the file (`train` for every cell of its matrix).
    pub(crate) stage: String,
    /// The stage kind (`uses:`).
    pub kind: String,
    /// This cell's matrix values, in the matrix's order.
    pub(crate) matrix: Vec<(String, ParamValue)>,
    /// Validated params, defaults filled in, matrix values included.
    pub params: Params,
    /// Inputs by name; a matrix producer contributes one ref per cell.
    pub inputs: BTreeMap<String, Vec<InputRef>>,
    /// What it asks of the machine that runs it.
    pub resources: Resources,
    /// Files whose content joins the key: `deps:` plus the kind's external files,
    /// resolved against the pipeline directory.
    pub(crate) deps: Vec<PathBuf>,
    /// Where the stage is declared.
    pub(crate) loc: Loc,
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The pipeline file.
    pub(crate) path: PathBuf,
    /// Its directory: relative paths and `artifacts/` live here.
    pub base_dir: PathBuf,
    /// Instances in declaration order (matrix cells in row-major order).
    pub instances: Vec<Instance>,
    /// The default remote for push and pull, if the file sets one.
    pub remote: Option<String>,
    /// The `executor:` section.
    pub executor: ExecutorSettings,
}

impl Pipeline {
    /// The index of the instance named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.instances.iter().position(|i| i.name == name)
    }

    /// Indices of the instances `selector` names: one matrix cell, or all
    /// the cells of a stage.
    pub(crate) fn select(&self, selector: &Selector) -> Vec<usize> {
        (0..self.instances.len())
            .filter(|&i| selector.selects(&self.instances[i].name, &self.instances[i].stage))
            .collect()
    }
}

/// Splits a reference to a stage's output, `stage.output` or `stage[k=v].output`, into the
/// instance or stage (`stage`, `stage[k=v]`) and the output name, with the parser the pipeline
/// file's inputs use; a text without an output part gives `None`.
pub fn split_reference(text: &str) -> (String, Option<String>) {
    let reference = selector::Reference::parse(text);
    (reference.target.to_string(), reference.member)
}

/// What the command line changes in a pipeline as it is loaded.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Param overrides, `-s STAGE.PARAM=VALUE`, applied after matrix expansion.
    pub set: Vec<Override>,
    /// Values for the file's `vars:` (`--vars FILE`, `--var NAME=VALUE`), applied before
    /// substitution: the same pipeline as with the values written into the file.
    pub vars: VarOverrides,
}

/// Reads, validates and expands the pipeline file at `path`.
pub fn load(
    path: &Path,
    registry: &Registry,
    options: &LoadOptions,
) -> Result<Pipeline, Diagnostics> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            loc: Loc::default(),
            message: format!("cannot read the pipeline file: {e}"),
        }])
    })?;
    load_str(&text, path, registry, options)
}

/// Like [`load`], from text already read (`path` is used for messages and as
/// the base of relative paths).
pub fn load_str(
    text: &str,
    path: &Path,
    registry: &Registry,
    options: &LoadOptions,
) -> Result<Pipeline, Diagnostics> {
    let mut loader = Loader {
        file: path.to_path_buf(),
        base_dir: base_dir_of(path),
        diagnostics: Vec::new(),
        sources: vec![Source::File(path.to_path_buf())],
    };
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            return Err(Diagnostics(vec![Diagnostic {
                file: path.to_path_buf(),
                loc: e.loc,
                message: format!("invalid YAML: {}", e.message),
            }]));
        }
    };
    let pipeline = loader.pipeline(&root, registry, options);
    if loader.diagnostics.is_empty()
        && let Some(pipeline) = pipeline
    {
        Ok(pipeline)
    } else {
        // The pipeline file's problems first, then each override's, each in text order.
        let mut diagnostics = loader.diagnostics;
        diagnostics.sort_by_key(|d| (d.loc.source, d.loc.line, d.loc.column));
        Err(Diagnostics(diagnostics))
    }
}

/// The pipeline file's directory, made absolute so artifact paths handed to
/// stages and printed to people do not depend on the working directory.
fn base_dir_of(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::path::absolute(&parent).unwrap_or(parent)
}

struct Loader {
    file: PathBuf,
    base_dir: PathBuf,
    diagnostics: Vec<Diagnostic>,
    /// The texts that places ([`Loc::source`]) are in: the pipeline file first, then the
    /// `--vars` files and `--var` values, numbered as their values are applied.
    sources: Vec<Source>,
}

/// A text the loader reads values from.
enum Source {
    /// A file: the pipeline file or a `--vars` file.
    File(PathBuf),
    /// The value of `--var NAME=VALUE`, by var name.
    Flag(String),
}

/// The top level of the file, read but not yet expanded.
struct TopLevel<'a> {
    vars: Vars,
    stages: Option<&'a Located<Node>>,
    remote: Option<String>,
    executor: Option<&'a Located<Node>>,
}

impl Loader {
    /// Reports a problem at `loc`: in the file its source names, or, for a `--var` value
    /// (one line on the command line), naming the flag instead of a line of any file.
    fn error(&mut self, loc: Loc, message: impl Into<String>) {
        let message = message.into();
        let diagnostic = match self.sources.get(loc.source as usize) {
            Some(Source::Flag(name)) => Diagnostic {
                file: self.file.clone(),
                loc: Loc {
                    source: loc.source,
                    ..Loc::default()
                },
                message: format!("`--var {name}`: {message}"),
            },
            Some(Source::File(file)) => Diagnostic {
                file: file.clone(),
                loc,
                message,
            },
            None => Diagnostic {
                file: self.file.clone(),
                loc,
                message,
            },
        };
        self.diagnostics.push(diagnostic);
    }

    fn pipeline(
        &mut self,
        root: &Located<Node>,
        registry: &Registry,
        options: &LoadOptions,
    ) -> Option<Pipeline> {
        let Node::Map(top) = &root.value else {
            self.error(
                root.loc,
                format!(
                    "expected a mapping with `stages:` (and optionally `vars:`), found {}",
                    root.value.kind()
                ),
            );
            return None;
        };
        let mut top = self.top_level(top);
        self.override_vars(&mut top.vars, &options.vars);
        let Some(stages_node) = top.stages else {
            self.error(root.loc, "missing `stages:` mapping");
            return None;
        };
        let Node::Map(stage_entries) = &stages_node.value else {
            self.error(
                stages_node.loc,
                format!(
                    "`stages` must be a mapping of stage names to stages, found {}",
                    stages_node.value.kind()
                ),
            );
            return None;
        };
        let decls: Vec<StageDecl> = stage_entries
            .iter()
            .filter_map(|(name, body)| self.stage_decl(name, body, &top.vars))
            .collect();
        let instances = self.expand(&decls, registry, &options.set);
        let executor = self.executor_settings(top.executor, &top.vars);
        Some(Pipeline {
            path: self.file.clone(),
            base_dir: self.base_dir.clone(),
            instances,
            remote: top.remote,
            executor,
        })
    }

    /// Reads the top-level keys: `vars`, `stages`, `remote`, `executor` and `x-` keys.
    fn top_level<'a>(&mut self, top: &'a [(Located<String>, Located<Node>)]) -> TopLevel<'a> {
        let mut read = TopLevel {
            vars: Vars::new(),
            stages: None,
            remote: None,
            executor: None,
        };
        for (key, value) in top {
            match key.value.as_str() {
                "vars" => match &value.value {
                    Node::Map(entries) => {
                        for (name, v) in entries {
                            read.vars.insert(name.value.clone(), v.clone());
                        }
                    }
                    Node::Null => {}
                    other => self.error(
                        value.loc,
                        format!("`vars` must be a mapping, found {}", other.kind()),
                    ),
                },
                "stages" => read.stages = Some(value),
                "executor" => read.executor = Some(value),
                "remote" => match &value.value {
                    Node::Str(url) => read.remote = Some(url.clone()),
                    other => self.error(
                        value.loc,
                        format!("`remote` must be a URL string, found {}", other.kind()),
                    ),
                },
                k if k.starts_with("x-") || k.starts_with('.') => {
                    // Extension keys hold YAML anchors for shared settings.
                }
                other => self.error(
                    key.loc,
                    format!(
                        "unknown top-level key `{other}`: expected `stages`, `vars`, `remote`, \
                         `executor` \
                         (or an `x-` key to hold anchors)"
                    ),
                ),
            }
        }
        read
    }
}

fn valid_stage_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `train[arch=slice,size=d128]` for a matrix cell, `train` otherwise.
pub(crate) fn instance_name(stage: &str, cell: &[(String, ParamValue)]) -> String {
    if cell.is_empty() {
        return stage.to_owned();
    }
    let parts: Vec<String> = cell
        .iter()
        .map(|(k, v)| format!("{k}={}", v.to_plain_string()))
        .collect();
    format!("{stage}[{}]", parts.join(","))
}

/// Converts a YAML node to a param value (scalars and lists of them).
fn node_to_value(node: &Located<Node>) -> Result<ParamValue, (Loc, String)> {
    Ok(match &node.value {
        Node::Bool(b) => ParamValue::Bool(*b),
        Node::Int(i) => ParamValue::Int(*i),
        Node::Float(x) => ParamValue::Float(*x),
        Node::Str(s) => ParamValue::Str(s.clone()),
        Node::Seq(items) => ParamValue::List(
            items
                .iter()
                .map(node_to_value)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Node::Null => {
            return Err((node.loc, "expected a value, found null".to_owned()));
        }
        Node::Map(_) => {
            return Err((
                node.loc,
                "expected a scalar or a list, found a mapping".to_owned(),
            ));
        }
    })
}

/// If `s` is exactly `${name}`, the name.
fn whole_var(s: &str) -> Option<&str> {
    let inner = s.strip_prefix("${")?.strip_suffix('}')?;
    (!inner.is_empty() && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(inner)
}

/// Why a `${name}` inside a text could not be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SpliceError {
    /// No var has this name.
    Unknown(String),
    /// The var is a list, a mapping or null.
    NotText(String),
}

/// Replaces each `${name}` with the var's plain text; `$${` becomes `${`.
/// Fails on the first var that is unknown or not a scalar.
fn interpolate(s: &str, vars: &Vars) -> Result<String, SpliceError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos..];
        if let Some(tail) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${")
            && let Some(end) = tail.find('}')
        {
            let name = &tail[..end];
            let value = vars
                .get(name)
                .ok_or_else(|| SpliceError::Unknown(name.to_owned()))?;
            match &value.value {
                Node::Str(text) => out.push_str(text),
                Node::Int(i) => out.push_str(&i.to_string()),
                Node::Float(x) => out.push_str(&x.to_string()),
                Node::Bool(b) => out.push_str(&b.to_string()),
                _ => return Err(SpliceError::NotText(name.to_owned())),
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;
