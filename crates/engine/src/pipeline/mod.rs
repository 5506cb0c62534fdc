//! The pipeline file, in two levels: located YAML, then validated instances.
//!
//! Flow: [`yaml::parse`] reads the text into located nodes (anchors, aliases
//! and merge keys resolved); [`load`] substitutes `${vars}`, expands every
//! `matrix:` into instances, checks every stage kind, param, input and output
//! name against the [`Registry`](crate::registry::Registry), and returns a
//! [`Pipeline`] or *all* the problems found, each with file:line:column.
//! Cycles are found by [`crate::plan`], which orders the instances.

pub mod yaml;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use cwm_stage::{InputsDecl, ParamDefault, ParamType, ParamValue, Params};

use crate::registry::Registry;
use yaml::{Loc, Located, Node};

/// One problem in a pipeline file, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// The pipeline file.
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
pub struct Diagnostics(pub Vec<Diagnostic>);

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
    pub stage: String,
    /// The stage kind (`uses:`).
    pub kind: String,
    /// This cell's matrix values, in the matrix's order.
    pub matrix: Vec<(String, ParamValue)>,
    /// Validated params, defaults filled in, matrix values included.
    pub params: Params,
    /// Inputs by name; a matrix producer contributes one ref per cell.
    pub inputs: BTreeMap<String, Vec<InputRef>>,
    /// Files whose content joins the key: `deps:` plus the kind's external files,
    /// resolved against the pipeline directory.
    pub deps: Vec<PathBuf>,
    /// Where the stage is declared.
    pub loc: Loc,
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The pipeline file.
    pub path: PathBuf,
    /// Its directory: relative paths and `artifacts/` live here.
    pub base_dir: PathBuf,
    /// Instances in declaration order (matrix cells in row-major order).
    pub instances: Vec<Instance>,
    /// The default remote for push and pull, if the file sets one.
    pub remote: Option<String>,
}

impl Pipeline {
    /// The index of the instance named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.instances.iter().position(|i| i.name == name)
    }

    /// Indices of the instances `selector` names: an instance name, or a
    /// stage name selecting all its matrix cells.
    pub fn select(&self, selector: &str) -> Vec<usize> {
        if let Some(i) = self.index_of(selector) {
            return vec![i];
        }
        (0..self.instances.len())
            .filter(|&i| self.instances[i].stage == selector)
            .collect()
    }
}

/// A `-s stage.param=value` override from the command line.
#[derive(Debug, Clone)]
pub struct Override {
    /// An instance or stage name.
    pub target: String,
    /// The param name.
    pub param: String,
    /// The value, as YAML text.
    pub value: String,
}

impl std::str::FromStr for Override {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // Matrix values inside `[..]` may contain `=` and `.`.
        let search_from = text.rfind(']').unwrap_or(0);
        let eq = text[search_from..]
            .find('=')
            .map(|i| search_from + i)
            .ok_or_else(|| format!("`{text}`: expected stage.param=value"))?;
        let (lhs, value) = (&text[..eq], &text[eq + 1..]);
        // The stage part may itself contain dots inside [..] (matrix values).
        let split_at = match lhs.rfind(']') {
            Some(close) => lhs[close..].find('.').map(|i| close + i),
            None => lhs.find('.'),
        };
        let dot = split_at.ok_or_else(|| format!("`{text}`: expected stage.param=value"))?;
        let (target, param) = (&lhs[..dot], &lhs[dot + 1..]);
        if target.is_empty() || param.is_empty() {
            return Err(format!("`{text}`: expected stage.param=value"));
        }
        Ok(Override {
            target: target.to_owned(),
            param: param.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// Reads, validates and expands the pipeline file at `path`.
pub fn load(
    path: &Path,
    registry: &Registry,
    overrides: &[Override],
) -> Result<Pipeline, Diagnostics> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Diagnostics(vec![Diagnostic {
            file: path.to_path_buf(),
            loc: Loc::default(),
            message: format!("cannot read the pipeline file: {e}"),
        }])
    })?;
    load_str(&text, path, registry, overrides)
}

/// Like [`load`], from text already read (`path` is used for messages and as
/// the base of relative paths).
pub fn load_str(
    text: &str,
    path: &Path,
    registry: &Registry,
    overrides: &[Override],
) -> Result<Pipeline, Diagnostics> {
    let mut loader = Loader {
        file: path.to_path_buf(),
        base_dir: base_dir_of(path),
        diagnostics: Vec::new(),
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
    let pipeline = loader.pipeline(&root, registry, overrides);
    if loader.diagnostics.is_empty()
        && let Some(pipeline) = pipeline
    {
        Ok(pipeline)
    } else {
        let mut diagnostics = loader.diagnostics;
        diagnostics.sort_by_key(|d| (d.loc.line, d.loc.column));
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

/// A stage as written, before matrix expansion.
struct StageDecl<'a> {
    name: Located<String>,
    kind: Located<String>,
    params: Vec<(&'a Located<String>, Located<Node>)>,
    matrix: Vec<(&'a Located<String>, Vec<Located<Node>>)>,
    inputs: Vec<(&'a Located<String>, Vec<Located<String>>)>,
    deps: Vec<Located<String>>,
    /// Param names written in the file whose value could not be read.
    invalid_params: Vec<&'a str>,
    loc: Loc,
}

/// What input resolution needs to know about each instance.
struct Known {
    name: String,
    stage: String,
    matrix: Vec<(String, ParamValue)>,
    kind: String,
}

struct Loader {
    file: PathBuf,
    base_dir: PathBuf,
    diagnostics: Vec<Diagnostic>,
}

impl Loader {
    fn error(&mut self, loc: Loc, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic {
            file: self.file.clone(),
            loc,
            message: message.into(),
        });
    }

    fn pipeline(
        &mut self,
        root: &Located<Node>,
        registry: &Registry,
        overrides: &[Override],
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
        let mut vars: HashMap<String, Located<Node>> = HashMap::new();
        let mut stages_node = None;
        let mut remote = None;
        for (key, value) in top {
            match key.value.as_str() {
                "vars" => match &value.value {
                    Node::Map(entries) => {
                        for (name, v) in entries {
                            vars.insert(name.value.clone(), v.clone());
                        }
                    }
                    Node::Null => {}
                    other => self.error(
                        value.loc,
                        format!("`vars` must be a mapping, found {}", other.kind()),
                    ),
                },
                "stages" => stages_node = Some(value),
                "remote" => match &value.value {
                    Node::Str(url) => remote = Some(url.clone()),
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
                        "unknown top-level key `{other}`: expected `stages`, `vars`, `remote` \
                         (or an `x-` key to hold anchors)"
                    ),
                ),
            }
        }
        let Some(stages_node) = stages_node else {
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
            .filter_map(|(name, body)| self.stage_decl(name, body, &vars))
            .collect();
        let instances = self.expand(&decls, registry, overrides);
        Some(Pipeline {
            path: self.file.clone(),
            base_dir: self.base_dir.clone(),
            instances,
            remote,
        })
    }

    fn stage_decl<'a>(
        &mut self,
        name: &'a Located<String>,
        body: &'a Located<Node>,
        vars: &HashMap<String, Located<Node>>,
    ) -> Option<StageDecl<'a>> {
        if !valid_stage_name(&name.value) {
            self.error(
                name.loc,
                format!(
                    "invalid stage name `{}`: use letters, digits, `_` and `-`",
                    name.value
                ),
            );
        }
        let Node::Map(fields) = &body.value else {
            self.error(
                body.loc,
                format!(
                    "stage `{}` must be a mapping with `uses:`, found {}",
                    name.value,
                    body.value.kind()
                ),
            );
            return None;
        };
        let mut decl = StageDecl {
            name: name.clone(),
            kind: Located {
                value: String::new(),
                loc: body.loc,
            },
            params: Vec::new(),
            matrix: Vec::new(),
            inputs: Vec::new(),
            deps: Vec::new(),
            invalid_params: Vec::new(),
            loc: name.loc,
        };
        let mut has_uses = false;
        for (key, value) in fields {
            match key.value.as_str() {
                "uses" => {
                    if let Some(kind) = self.string(value, vars, "`uses` (a stage kind)") {
                        decl.kind = kind;
                        has_uses = true;
                    }
                }
                "params" => match &value.value {
                    Node::Map(entries) => {
                        for (pname, pvalue) in entries {
                            match self.substitute(pvalue, vars) {
                                Some(v) => decl.params.push((pname, v)),
                                None => decl.invalid_params.push(&pname.value),
                            }
                        }
                    }
                    Node::Null => {}
                    other => self.error(
                        value.loc,
                        format!("`params` must be a mapping, found {}", other.kind()),
                    ),
                },
                "matrix" => match &value.value {
                    Node::Map(entries) => {
                        for (pname, pvalues) in entries {
                            let Some(v) = self.substitute(pvalues, vars) else {
                                continue;
                            };
                            match v.value {
                                Node::Seq(items) if !items.is_empty() => {
                                    decl.matrix.push((pname, items))
                                }
                                other => self.error(
                                    v.loc,
                                    format!(
                                        "matrix `{}` must be a non-empty list of values, found {}",
                                        pname.value,
                                        other.kind()
                                    ),
                                ),
                            }
                        }
                    }
                    other => self.error(
                        value.loc,
                        format!(
                            "`matrix` must be a mapping of param names to lists, found {}",
                            other.kind()
                        ),
                    ),
                },
                "inputs" => match &value.value {
                    Node::Map(entries) => {
                        for (iname, iref) in entries {
                            let refs = self.string_list(iref, vars, "a stage reference");
                            decl.inputs.push((iname, refs));
                        }
                    }
                    Node::Null => {}
                    other => self.error(
                        value.loc,
                        format!(
                            "`inputs` must be a mapping like `{{games: parse}}`, found {}",
                            other.kind()
                        ),
                    ),
                },
                "deps" => decl.deps = self.string_list(value, vars, "a file path"),
                "doc" | "description" => {}
                other => self.error(
                    key.loc,
                    format!(
                        "unknown key `{other}` in stage `{}`: expected uses, params, matrix, \
                         inputs, deps or doc",
                        name.value
                    ),
                ),
            }
        }
        if !has_uses {
            self.error(
                name.loc,
                format!(
                    "stage `{}` has no `uses:` naming its stage kind",
                    name.value
                ),
            );
            return None;
        }
        Some(decl)
    }

    fn string(
        &mut self,
        node: &Located<Node>,
        vars: &HashMap<String, Located<Node>>,
        what: &str,
    ) -> Option<Located<String>> {
        let node = self.substitute(node, vars)?;
        match node.value {
            Node::Str(s) => Some(Located {
                value: s,
                loc: node.loc,
            }),
            other => {
                self.error(node.loc, format!("expected {what}, found {}", other.kind()));
                None
            }
        }
    }

    fn string_list(
        &mut self,
        node: &Located<Node>,
        vars: &HashMap<String, Located<Node>>,
        what: &str,
    ) -> Vec<Located<String>> {
        match &node.value {
            Node::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, vars, what))
                .collect(),
            _ => self.string(node, vars, what).into_iter().collect(),
        }
    }

    /// Replaces `${name}` in every string under `node`. A string that is
    /// exactly `${name}` takes the var's value and type; `$${` writes `${`.
    fn substitute(
        &mut self,
        node: &Located<Node>,
        vars: &HashMap<String, Located<Node>>,
    ) -> Option<Located<Node>> {
        let value = match &node.value {
            Node::Str(s) => {
                if let Some(name) = whole_var(s) {
                    return match vars.get(name) {
                        Some(v) => Some(Located {
                            value: v.value.clone(),
                            loc: node.loc,
                        }),
                        None => {
                            self.unknown_var(node.loc, name, vars);
                            None
                        }
                    };
                }
                match interpolate(s, vars) {
                    Ok(text) => Node::Str(text),
                    Err(name) => {
                        self.unknown_var(node.loc, &name, vars);
                        return None;
                    }
                }
            }
            Node::Seq(items) => Node::Seq(
                items
                    .iter()
                    .map(|item| self.substitute(item, vars))
                    .collect::<Option<Vec<_>>>()?,
            ),
            Node::Map(entries) => Node::Map(
                entries
                    .iter()
                    .map(|(k, v)| self.substitute(v, vars).map(|v| (k.clone(), v)))
                    .collect::<Option<Vec<_>>>()?,
            ),
            other => other.clone(),
        };
        Some(Located {
            value,
            loc: node.loc,
        })
    }

    fn unknown_var(&mut self, loc: Loc, name: &str, vars: &HashMap<String, Located<Node>>) {
        let mut known: Vec<&str> = vars.keys().map(String::as_str).collect();
        known.sort_unstable();
        let known = if known.is_empty() {
            "no vars are declared".to_owned()
        } else {
            format!("declared vars: {}", known.join(", "))
        };
        self.error(
            loc,
            format!("unknown var `${{{name}}}` ({known}; write `$${{` for a literal `${{`)"),
        );
    }

    /// Expands matrices, validates params against each kind and resolves inputs.
    fn expand(
        &mut self,
        decls: &[StageDecl],
        registry: &Registry,
        overrides: &[Override],
    ) -> Vec<Instance> {
        let mut instances = Vec::new();
        // First pass: instances with params (inputs resolved after all exist).
        let mut pending_inputs = Vec::new();
        for decl in decls {
            let Some(kind) = registry.get(&decl.kind.value) else {
                let mut names = registry.names();
                names.sort_unstable();
                self.error(
                    decl.kind.loc,
                    format!(
                        "unknown stage kind `{}`: expected one of {}",
                        decl.kind.value,
                        names.join(", ")
                    ),
                );
                continue;
            };
            let specs = kind.params();
            let mut base = Params::new();
            // Names written in the file, valid or not (a mistyped param is
            // reported once, not also as missing).
            let mut written: Vec<&str> =
                decl.params.iter().map(|(n, _)| n.value.as_str()).collect();
            written.extend(decl.matrix.iter().map(|(n, _)| n.value.as_str()));
            written.extend(decl.invalid_params.iter().copied());
            for (pname, pvalue) in &decl.params {
                if decl.matrix.iter().any(|(m, _)| m.value == pname.value) {
                    self.error(
                        pname.loc,
                        format!(
                            "param `{}` is set both in `params` and in `matrix`",
                            pname.value
                        ),
                    );
                    continue;
                }
                if let Some(v) = self.param(kind, &pname.value, pname.loc, pvalue) {
                    base.insert(pname.value.clone(), v);
                }
            }
            // Matrix cells, row-major over the matrix keys in file order.
            let mut columns: Vec<(String, Vec<ParamValue>)> = Vec::new();
            for (mname, mvalues) in &decl.matrix {
                let values: Vec<ParamValue> = mvalues
                    .iter()
                    .filter_map(|v| self.param(kind, &mname.value, v.loc, v))
                    .collect();
                if values.len() == mvalues.len() {
                    columns.push((mname.value.clone(), values));
                }
            }
            let mut cells: Vec<Vec<(String, ParamValue)>> = vec![Vec::new()];
            for (mname, values) in &columns {
                cells = cells
                    .into_iter()
                    .flat_map(|cell| {
                        values.iter().map(move |v| {
                            let mut cell = cell.clone();
                            cell.push((mname.clone(), v.clone()));
                            cell
                        })
                    })
                    .collect();
            }
            for cell in cells {
                let name = instance_name(&decl.name.value, &cell);
                let mut params = base.clone();
                for (k, v) in &cell {
                    params.insert(k.clone(), v.clone());
                }
                for ov in overrides {
                    if (ov.target == name || ov.target == decl.name.value)
                        && let Some(v) = self.override_value(kind, ov)
                    {
                        params.insert(ov.param.clone(), v);
                    }
                }
                for spec in specs {
                    if params.get(spec.name).is_none() && !written.contains(&spec.name) {
                        match spec.default.value() {
                            Some(v) => params.insert(spec.name, v),
                            None if spec.default == ParamDefault::Required => self.error(
                                decl.name.loc,
                                format!(
                                    "stage `{name}` (kind `{}`) needs param `{}`: {} ({})",
                                    kind.name(),
                                    spec.name,
                                    spec.doc,
                                    spec.ty
                                ),
                            ),
                            None => {}
                        }
                    }
                }
                let mut deps: Vec<PathBuf> = decl
                    .deps
                    .iter()
                    .map(|d| self.base_dir.join(&d.value))
                    .collect();
                deps.extend(kind.external_files(&params).into_iter().map(|p| {
                    if p.is_absolute() {
                        p
                    } else {
                        self.base_dir.join(p)
                    }
                }));
                pending_inputs.push(instances.len());
                instances.push((
                    decl,
                    Instance {
                        name,
                        stage: decl.name.value.clone(),
                        kind: kind.name().to_owned(),
                        matrix: cell,
                        params,
                        inputs: BTreeMap::new(),
                        deps,
                        loc: decl.loc,
                    },
                ));
            }
        }
        for ov in overrides {
            let known = instances
                .iter()
                .any(|(_, i)| i.name == ov.target || i.stage == ov.target);
            if !known {
                self.error(
                    Loc::default(),
                    format!(
                        "override `-s {}.{}=...`: no stage or instance named `{}`",
                        ov.target, ov.param, ov.target
                    ),
                );
            }
        }
        // Second pass: inputs.
        let names: Vec<Known> = instances
            .iter()
            .map(|(_, i)| Known {
                name: i.name.clone(),
                stage: i.stage.clone(),
                matrix: i.matrix.clone(),
                kind: i.kind.clone(),
            })
            .collect();
        for idx in pending_inputs {
            let (decl, _) = &instances[idx];
            let decl = *decl;
            let consumer_matrix = instances[idx].1.matrix.clone();
            let consumer_name = instances[idx].1.name.clone();
            let Some(kind) = registry.get(&decl.kind.value) else {
                continue;
            };
            let mut inputs = BTreeMap::new();
            for (iname, refs) in &decl.inputs {
                let spec = match kind.inputs() {
                    InputsDecl::None => {
                        self.error(
                            iname.loc,
                            format!("stage kind `{}` takes no inputs", kind.name()),
                        );
                        continue;
                    }
                    InputsDecl::Any => None,
                    InputsDecl::Named(specs) => {
                        match specs.iter().find(|s| s.name == iname.value) {
                            Some(spec) => Some(*spec),
                            None => {
                                let expected: Vec<&str> = specs.iter().map(|s| s.name).collect();
                                self.error(
                                    iname.loc,
                                    format!(
                                        "stage kind `{}` has no input `{}`: expected {}",
                                        kind.name(),
                                        iname.value,
                                        expected.join(", ")
                                    ),
                                );
                                continue;
                            }
                        }
                    }
                };
                let mut bound = Vec::new();
                for r in refs {
                    bound.extend(self.resolve_ref(r, &names, &consumer_matrix, registry));
                }
                if let Some(spec) = spec
                    && !spec.many
                    && bound.len() > 1
                {
                    self.error(
                        iname.loc,
                        format!(
                            "input `{}` of `{consumer_name}` takes one artifact, but the \
                             reference selects {}",
                            iname.value,
                            bound.len()
                        ),
                    );
                }
                inputs.insert(iname.value.clone(), bound);
            }
            if let InputsDecl::Named(specs) = kind.inputs() {
                for spec in specs {
                    if !spec.optional && !inputs.contains_key(spec.name) {
                        self.error(
                            decl.loc,
                            format!(
                                "stage `{consumer_name}` (kind `{}`) needs input `{}`: {}",
                                kind.name(),
                                spec.name,
                                spec.doc
                            ),
                        );
                    }
                }
            }
            instances[idx].1.inputs = inputs;
        }
        instances.into_iter().map(|(_, i)| i).collect()
    }

    /// Resolves `stage`, `stage.output`, `stage[k=v]` or `stage[k=v].output`.
    /// A reference to a matrix stage from a matrix stage binds only the cells
    /// whose shared matrix keys have the consumer's values.
    fn resolve_ref(
        &mut self,
        r: &Located<String>,
        names: &[Known],
        consumer_matrix: &[(String, ParamValue)],
        registry: &Registry,
    ) -> Vec<InputRef> {
        let text = r.value.as_str();
        let (target, output) = match text.rfind(']') {
            Some(close) => match text[close..].find('.') {
                Some(dot) => (&text[..close + dot], Some(&text[close + dot + 1..])),
                None => (text, None),
            },
            None => match text.split_once('.') {
                Some((t, o)) => (t, Some(o)),
                None => (text, None),
            },
        };
        let by_instance: Vec<usize> = names
            .iter()
            .enumerate()
            .filter(|(_, n)| n.name == target)
            .map(|(i, _)| i)
            .collect();
        let candidates: Vec<usize> = if by_instance.is_empty() {
            names
                .iter()
                .enumerate()
                .filter(|(_, n)| n.stage == target)
                .filter(|(_, n)| {
                    n.matrix.iter().all(|(k, v)| {
                        consumer_matrix
                            .iter()
                            .find(|(ck, _)| ck == k)
                            .is_none_or(|(_, cv)| cv == v)
                    })
                })
                .map(|(i, _)| i)
                .collect()
        } else {
            by_instance
        };
        if candidates.is_empty() {
            let exists = names.iter().any(|n| n.stage == target);
            let message = if exists {
                format!("`{target}` has no matrix cell matching this stage's matrix values")
            } else {
                let mut stages: Vec<&str> = names.iter().map(|n| n.stage.as_str()).collect();
                stages.dedup();
                format!(
                    "unknown input `{text}`: no stage named `{target}` (stages: {})",
                    stages.join(", ")
                )
            };
            self.error(r.loc, message);
            return Vec::new();
        }
        let mut refs = Vec::new();
        for producer in candidates {
            let kind_name = &names[producer].kind;
            let outputs = registry.get(kind_name).map(|k| k.outputs()).unwrap_or(&[]);
            let output = match output {
                Some(o) => o,
                None if outputs.len() == 1 => outputs[0],
                None => {
                    self.error(
                        r.loc,
                        format!(
                            "`{target}` has several outputs ({}): write `{target}.<output>`",
                            outputs.join(", ")
                        ),
                    );
                    return Vec::new();
                }
            };
            if !outputs.contains(&output) {
                self.error(
                    r.loc,
                    format!(
                        "`{target}` (kind `{kind_name}`) has no output `{output}`: expected {}",
                        outputs.join(", ")
                    ),
                );
                return Vec::new();
            }
            refs.push(InputRef {
                producer,
                output: output.to_owned(),
            });
        }
        refs
    }

    fn param(
        &mut self,
        kind: &dyn cwm_stage::StageKind,
        name: &str,
        loc: Loc,
        node: &Located<Node>,
    ) -> Option<ParamValue> {
        let ty = match kind.params().iter().find(|s| s.name == name) {
            Some(spec) => spec.ty,
            None if kind.accepts_extra_params() => ParamType::Any,
            None => {
                let expected: Vec<&str> = kind.params().iter().map(|s| s.name).collect();
                self.error(
                    loc,
                    format!(
                        "unknown param `{name}` for stage kind `{}`: expected {}",
                        kind.name(),
                        if expected.is_empty() {
                            "no params".to_owned()
                        } else {
                            expected.join(", ")
                        }
                    ),
                );
                return None;
            }
        };
        let value = match node_to_value(node) {
            Ok(v) => v,
            Err((loc, msg)) => {
                self.error(loc, format!("param `{name}`: {msg}"));
                return None;
            }
        };
        match ty.check(&value) {
            Ok(v) => Some(v),
            Err(msg) => {
                self.error(node.loc, format!("param `{name}`: {msg}"));
                None
            }
        }
    }

    fn override_value(
        &mut self,
        kind: &dyn cwm_stage::StageKind,
        ov: &Override,
    ) -> Option<ParamValue> {
        let node = match yaml::parse(&ov.value) {
            Ok(node) => node,
            Err(e) => {
                self.error(
                    Loc::default(),
                    format!("override `-s {}.{}`: {}", ov.target, ov.param, e.message),
                );
                return None;
            }
        };
        let before = self.diagnostics.len();
        let value = self.param(kind, &ov.param, Loc::default(), &node);
        for d in &mut self.diagnostics[before..] {
            d.loc = Loc::default();
            d.message = format!("override `-s {}.{}`: {}", ov.target, ov.param, d.message);
        }
        value
    }
}

fn valid_stage_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `train[arch=slice,size=d128]` for a matrix cell, `train` otherwise.
pub fn instance_name(stage: &str, cell: &[(String, ParamValue)]) -> String {
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

/// Replaces each `${name}` with the var's plain text; `$${` becomes `${`.
/// Returns the first unknown name as the error.
fn interpolate(s: &str, vars: &HashMap<String, Located<Node>>) -> Result<String, String> {
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
            let value = vars.get(name).ok_or_else(|| name.to_owned())?;
            match &value.value {
                Node::Str(text) => out.push_str(text),
                Node::Int(i) => out.push_str(&i.to_string()),
                Node::Float(x) => out.push_str(&x.to_string()),
                Node::Bool(b) => out.push_str(&b.to_string()),
                _ => {
                    return Err(format!(
                        "{name} (a list or mapping cannot be spliced into text)"
                    ));
                }
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
