//! One stage as written in the file, `${vars}` substituted, before matrix
//! expansion and before anything is checked against its kind.

use std::collections::HashMap;

use super::selector::Reference;
use super::yaml::{Loc, Located, Node};
use crate::resources::ResourceRequest;

use super::{Loader, Source, SpliceError, interpolate, valid_stage_name, whole_var};

/// The file's `vars:`, by name, with the values the load options give them.
pub(super) type Vars = HashMap<String, Located<Node>>;

/// A stage as written, before matrix expansion.
pub(super) struct StageDecl<'a> {
    pub(super) name: Located<String>,
    pub(super) kind: Located<String>,
    pub(super) params: Vec<(&'a Located<String>, Located<Node>)>,
    pub(super) matrix: Vec<(&'a Located<String>, Vec<Located<Node>>)>,
    /// `matrix:` written as a list of mappings: the cells themselves, each its (param,
    /// value) pairs in the first cell's key order.
    pub(super) cells: Vec<Vec<(Located<String>, Located<Node>)>>,
    pub(super) inputs: Vec<(&'a Located<String>, Vec<Located<Reference>>)>,
    pub(super) deps: Vec<Located<String>>,
    /// `resources:` as written.
    pub(super) resources: ResourceRequest,
    /// Param names written in the file whose value could not be read.
    pub(super) invalid_params: Vec<&'a str>,
    pub(super) loc: Loc,
}

impl<'a> StageDecl<'a> {
    /// Whether `param` is a matrix key (of the product or of the explicit cells).
    pub(super) fn in_matrix(&self, param: &str) -> bool {
        self.matrix.iter().any(|(m, _)| m.value == param)
            || self
                .cells
                .first()
                .is_some_and(|cell| cell.iter().any(|(k, _)| k.value == param))
    }

    fn new(name: &Located<String>, body: &Located<Node>) -> Self {
        StageDecl {
            name: name.clone(),
            kind: Located {
                value: String::new(),
                loc: body.loc,
            },
            params: Vec::new(),
            matrix: Vec::new(),
            cells: Vec::new(),
            inputs: Vec::new(),
            deps: Vec::new(),
            resources: ResourceRequest::default(),
            invalid_params: Vec::new(),
            loc: name.loc,
        }
    }
}

impl Loader {
    /// Reads the stage `name`; `None` (with diagnostics) when it has no kind.
    pub(super) fn stage_decl<'a>(
        &mut self,
        name: &'a Located<String>,
        body: &'a Located<Node>,
        vars: &Vars,
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
        let mut decl = StageDecl::new(name, body);
        let mut has_uses = false;
        for (key, value) in fields {
            has_uses |= self.decl_field(&mut decl, key, value, vars);
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

    /// Reads one field of a stage into `decl`; true when it set the kind.
    fn decl_field<'a>(
        &mut self,
        decl: &mut StageDecl<'a>,
        key: &Located<String>,
        value: &'a Located<Node>,
        vars: &Vars,
    ) -> bool {
        match key.value.as_str() {
            "uses" => {
                if let Some(kind) = self.string(value, vars, "`uses` (a stage kind)") {
                    decl.kind = kind;
                    return true;
                }
            }
            "params" => self.decl_params(decl, value, vars),
            "matrix" => self.decl_matrix(decl, value, vars),
            "inputs" => self.decl_inputs(decl, value, vars),
            "deps" => decl.deps = self.string_list(value, vars, "a file path"),
            "resources" => self.decl_resources(decl, value, vars),
            "doc" | "description" => {}
            other => self.error(
                key.loc,
                format!(
                    "unknown key `{other}` in stage `{}`: expected uses, params, matrix, \
                     inputs, deps, resources or doc",
                    decl.name.value
                ),
            ),
        }
        false
    }

    fn decl_params<'a>(&mut self, decl: &mut StageDecl<'a>, value: &'a Located<Node>, vars: &Vars) {
        match &value.value {
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
        }
    }

    fn decl_matrix<'a>(&mut self, decl: &mut StageDecl<'a>, value: &'a Located<Node>, vars: &Vars) {
        let entries = match &value.value {
            Node::Map(entries) => entries,
            _ => {
                if let Some(v) = self.substitute(value, vars) {
                    self.decl_matrix_cells(decl, v);
                }
                return;
            }
        };
        for (pname, pvalues) in entries {
            let Some(v) = self.substitute(pvalues, vars) else {
                continue;
            };
            match v.value {
                Node::Seq(items) if !items.is_empty() => decl.matrix.push((pname, items)),
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

    /// `matrix:` as a list of mappings, one cell each; every cell must have the first one's
    /// keys.
    fn decl_matrix_cells(&mut self, decl: &mut StageDecl, value: Located<Node>) {
        let items = match value.value {
            Node::Seq(items) if !items.is_empty() => items,
            other => {
                let message = format!(
                    "`matrix` must be a mapping of param names to lists, or a non-empty list \
                     of cells (mappings of param names to values), found {}",
                    other.kind()
                );
                self.error(value.loc, message);
                return;
            }
        };
        let mut keys: Option<Vec<String>> = None;
        for item in items {
            let mut entries = match item.value {
                Node::Map(entries) if !entries.is_empty() => entries,
                Node::Map(_) => {
                    self.error(
                        item.loc,
                        "a matrix cell must set at least one param".to_owned(),
                    );
                    continue;
                }
                other => {
                    let message =
                        format!("a matrix cell must be a mapping, found {}", other.kind());
                    self.error(item.loc, message);
                    continue;
                }
            };
            let first =
                keys.get_or_insert_with(|| entries.iter().map(|(k, _)| k.value.clone()).collect());
            let mut these: Vec<&str> = entries.iter().map(|(k, _)| k.value.as_str()).collect();
            let mut want: Vec<&str> = first.iter().map(String::as_str).collect();
            these.sort_unstable();
            want.sort_unstable();
            if these != want {
                let message = format!(
                    "every matrix cell must set the same params as the first ({}), this one sets \
                     {}",
                    want.join(", "),
                    these.join(", ")
                );
                self.error(item.loc, message);
                continue;
            }
            entries.sort_by_key(|(k, _)| first.iter().position(|f| *f == k.value));
            decl.cells.push(entries);
        }
    }

    fn decl_inputs<'a>(&mut self, decl: &mut StageDecl<'a>, value: &'a Located<Node>, vars: &Vars) {
        match &value.value {
            Node::Map(entries) => {
                for (iname, iref) in entries {
                    let refs = self
                        .string_list(iref, vars, "a stage reference")
                        .into_iter()
                        .map(|text| Located {
                            value: Reference::parse(&text.value),
                            loc: text.loc,
                        })
                        .collect();
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
        }
    }

    fn string(&mut self, node: &Located<Node>, vars: &Vars, what: &str) -> Option<Located<String>> {
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
        vars: &Vars,
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
    /// The value keeps the place of the `${name}` when the pipeline file gives it, and its
    /// own place when a `--vars` file or `--var` does, so problems in it are shown there.
    pub(super) fn substitute(
        &mut self,
        node: &Located<Node>,
        vars: &Vars,
    ) -> Option<Located<Node>> {
        let value = match &node.value {
            Node::Str(s) => {
                if let Some(name) = whole_var(s) {
                    return match vars.get(name) {
                        Some(v) => Some(Located {
                            value: v.value.clone(),
                            loc: if v.loc.source == node.loc.source {
                                node.loc
                            } else {
                                v.loc
                            },
                        }),
                        None => {
                            self.unknown_var(node.loc, name, vars);
                            None
                        }
                    };
                }
                match interpolate(s, vars) {
                    Ok(text) => Node::Str(text),
                    Err(SpliceError::Unknown(name)) => {
                        self.unknown_var(node.loc, &name, vars);
                        return None;
                    }
                    Err(SpliceError::NotText(name)) => {
                        self.not_text(node.loc, &name, vars);
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

    fn unknown_var(&mut self, loc: Loc, name: &str, vars: &Vars) {
        let known = declared(vars);
        self.error(
            loc,
            format!("unknown var `${{{name}}}` ({known}; write `$${{` for a literal `${{`)"),
        );
    }

    /// Reports `${name}` inside a text where the var is not a string, number or boolean,
    /// naming where an overriding value was given.
    fn not_text(&mut self, loc: Loc, name: &str, vars: &Vars) {
        let Some(value) = vars.get(name) else {
            return self.unknown_var(loc, name, vars);
        };
        let origin = match self.sources.get(value.loc.source as usize) {
            _ if value.loc.source == loc.source => String::new(),
            Some(Source::Flag(flag)) => format!(" (its value is given by `--var {flag}`)"),
            Some(Source::File(file)) => {
                format!(" (its value is given at {}:{})", file.display(), value.loc)
            }
            None => String::new(),
        };
        self.error(
            loc,
            format!(
                "var `${{{name}}}` is {} and cannot be spliced into text{origin}",
                value.value.kind()
            ),
        );
    }
}

/// `declared vars: a, b` (sorted), or `no vars are declared`.
pub(super) fn declared(vars: &Vars) -> String {
    let mut known: Vec<&str> = vars.keys().map(String::as_str).collect();
    known.sort_unstable();
    if known.is_empty() {
        "no vars are declared".to_owned()
    } else {
        format!("declared vars: {}", known.join(", "))
    }
}
