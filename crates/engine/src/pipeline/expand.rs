//! From stage declarations to instances: matrix expansion, params checked
//! against each kind (overrides and defaults applied), then inputs bound to
//! producers' outputs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cwm_stage::{InputSpec, InputsDecl, ParamDefault, ParamType, ParamValue, Params, StageKind};

use super::decl::StageDecl;
use super::selector::{Override, Reference};
use super::yaml::{self, Loc, Located, Node};
use super::{InputRef, Instance, Loader, instance_name, node_to_value};
use crate::registry::Registry;

/// One matrix cell: (param, value), in the matrix's order.
type Cell = Vec<(String, ParamValue)>;

impl Loader {
    /// Expands matrices, validates params against each kind and resolves inputs.
    pub(super) fn expand(
        &mut self,
        decls: &[StageDecl],
        registry: &Registry,
        overrides: &[Override],
    ) -> Vec<Instance> {
        // First pass: every instance with its params (inputs are bound once all exist).
        let mut kinds: Vec<(&StageDecl, &dyn StageKind)> = Vec::new();
        let mut instances: Vec<Instance> = Vec::new();
        for decl in decls {
            let Some(kind) = self.kind_of(decl, registry) else {
                continue;
            };
            for instance in self.instances_of(decl, kind, overrides) {
                kinds.push((decl, kind));
                instances.push(instance);
            }
        }
        self.check_override_targets(overrides, &instances);
        // Second pass: inputs.
        let inputs: Vec<_> = kinds
            .iter()
            .zip(&instances)
            .map(|(&(decl, kind), consumer)| {
                self.bind_inputs(decl, kind, consumer, &instances, registry)
            })
            .collect();
        for (instance, inputs) in instances.iter_mut().zip(inputs) {
            instance.inputs = inputs;
        }
        instances
    }

    /// The kind `decl` uses, or `None` (reported) when the registry lacks it.
    fn kind_of<'r>(
        &mut self,
        decl: &StageDecl,
        registry: &'r Registry,
    ) -> Option<&'r dyn StageKind> {
        let kind = registry.get(&decl.kind.value);
        if kind.is_none() {
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
        }
        kind
    }

    /// One instance per matrix cell of `decl` (one in all without a matrix).
    fn instances_of(
        &mut self,
        decl: &StageDecl,
        kind: &dyn StageKind,
        overrides: &[Override],
    ) -> Vec<Instance> {
        let base = self.base_params(decl, kind);
        self.matrix_cells(decl, kind)
            .into_iter()
            .map(|cell| self.instance(decl, kind, &base, cell, overrides))
            .collect()
    }

    /// The `params:` of `decl`, checked against its kind.
    fn base_params(&mut self, decl: &StageDecl, kind: &dyn StageKind) -> Params {
        let mut base = Params::new();
        for (pname, pvalue) in &decl.params {
            if decl.in_matrix(&pname.value) {
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
        base
    }

    /// The matrix cells, row-major over the matrix keys in file order. A key
    /// with an invalid value is left out (after its errors are reported).
    fn matrix_cells(&mut self, decl: &StageDecl, kind: &dyn StageKind) -> Vec<Cell> {
        if !decl.cells.is_empty() {
            return self.explicit_cells(decl, kind);
        }
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
        let mut cells: Vec<Cell> = vec![Vec::new()];
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
        cells
    }

    /// The cells of a `matrix:` written as a list of mappings, in file order. A cell with an
    /// invalid value is left out (after its errors are reported); two equal cells are an
    /// error.
    fn explicit_cells(&mut self, decl: &StageDecl, kind: &dyn StageKind) -> Vec<Cell> {
        let mut cells: Vec<Cell> = Vec::new();
        for entries in &decl.cells {
            let cell: Cell = entries
                .iter()
                .filter_map(|(k, v)| Some((k.value.clone(), self.param(kind, &k.value, v.loc, v)?)))
                .collect();
            if cell.len() != entries.len() {
                continue;
            }
            if cells.contains(&cell) {
                let loc = entries.first().map_or(decl.loc, |(k, _)| k.loc);
                let message = format!(
                    "matrix cell {} is listed twice",
                    instance_name(&decl.name.value, &cell)
                );
                self.error(loc, message);
                continue;
            }
            cells.push(cell);
        }
        cells
    }

    /// The instance of one cell: base params, the cell's values, the
    /// overrides that select it, then the kind's defaults. Inputs come later.
    fn instance(
        &mut self,
        decl: &StageDecl,
        kind: &dyn StageKind,
        base: &Params,
        cell: Cell,
        overrides: &[Override],
    ) -> Instance {
        let name = instance_name(&decl.name.value, &cell);
        let mut params = base.clone();
        for (k, v) in &cell {
            params.insert(k.clone(), v.clone());
        }
        for ov in overrides {
            if ov.target.selects(&name, &decl.name.value)
                && let Some(v) = self.override_value(kind, ov)
            {
                params.insert(ov.param.clone(), v);
            }
        }
        self.fill_defaults(decl, kind, &name, &mut params);
        let deps = self.deps_of(decl, kind, &params);
        let resources = decl.resources.resolve(kind.gpus(&params));
        Instance {
            name,
            stage: decl.name.value.clone(),
            kind: kind.name().to_owned(),
            matrix: cell,
            params,
            inputs: BTreeMap::new(),
            resources,
            deps,
            loc: decl.loc,
        }
    }

    /// Fills in the kind's defaults and reports required params that are
    /// missing. A param written in the file but invalid is reported once
    /// (where it is written), not also as missing.
    fn fill_defaults(
        &mut self,
        decl: &StageDecl,
        kind: &dyn StageKind,
        name: &str,
        params: &mut Params,
    ) {
        let written = |param: &str| {
            decl.params.iter().any(|(n, _)| n.value == param)
                || decl.in_matrix(param)
                || decl.invalid_params.contains(&param)
        };
        for spec in kind.params() {
            if params.get(spec.name).is_some() || written(spec.name) {
                continue;
            }
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

    /// `deps:` and the kind's external files, against the pipeline directory.
    fn deps_of(&self, decl: &StageDecl, kind: &dyn StageKind, params: &Params) -> Vec<PathBuf> {
        let mut deps: Vec<PathBuf> = decl
            .deps
            .iter()
            .map(|d| self.base_dir.join(&d.value))
            .collect();
        deps.extend(kind.external_files(params).into_iter().map(|p| {
            if p.is_absolute() {
                p
            } else {
                self.base_dir.join(p)
            }
        }));
        deps
    }

    /// Reports each override that selects no instance.
    fn check_override_targets(&mut self, overrides: &[Override], instances: &[Instance]) {
        for ov in overrides {
            if !instances
                .iter()
                .any(|i| ov.target.selects(&i.name, &i.stage))
            {
                self.error(
                    Loc::default(),
                    format!(
                        "override `-s {}.{}=...`: no stage or instance named `{}`",
                        ov.target, ov.param, ov.target
                    ),
                );
            }
        }
    }

    /// The inputs of `consumer` (an instance of `decl`), bound to producers.
    fn bind_inputs(
        &mut self,
        decl: &StageDecl,
        kind: &dyn StageKind,
        consumer: &Instance,
        instances: &[Instance],
        registry: &Registry,
    ) -> BTreeMap<String, Vec<InputRef>> {
        let mut inputs = BTreeMap::new();
        for (iname, refs) in &decl.inputs {
            let Some(spec) = self.input_spec(kind, iname) else {
                continue;
            };
            let mut bound = Vec::new();
            for r in refs {
                bound.extend(self.resolve_ref(r, instances, &consumer.matrix, registry));
            }
            if let Some(spec) = spec
                && !spec.many
                && bound.len() > 1
            {
                self.error(
                    iname.loc,
                    format!(
                        "input `{}` of `{}` takes one artifact, but the reference selects {}",
                        iname.value,
                        consumer.name,
                        bound.len()
                    ),
                );
            }
            inputs.insert(iname.value.clone(), bound);
        }
        self.check_required_inputs(decl, kind, &consumer.name, &inputs);
        inputs
    }

    /// What `kind` declares for its input `iname`: `Some(None)` when it takes
    /// any inputs, `None` (reported) when it has no input of that name.
    fn input_spec(
        &mut self,
        kind: &dyn StageKind,
        iname: &Located<String>,
    ) -> Option<Option<InputSpec>> {
        let specs = match kind.inputs() {
            InputsDecl::Any => return Some(None),
            InputsDecl::Named(specs) => specs,
            InputsDecl::None => {
                self.error(
                    iname.loc,
                    format!("stage kind `{}` takes no inputs", kind.name()),
                );
                return None;
            }
        };
        if let Some(spec) = specs.iter().find(|s| s.name == iname.value) {
            return Some(Some(*spec));
        }
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
        None
    }

    /// Reports the kind's required inputs that `inputs` lacks.
    fn check_required_inputs(
        &mut self,
        decl: &StageDecl,
        kind: &dyn StageKind,
        consumer: &str,
        inputs: &BTreeMap<String, Vec<InputRef>>,
    ) {
        let InputsDecl::Named(specs) = kind.inputs() else {
            return;
        };
        for spec in specs {
            if !spec.optional && !inputs.contains_key(spec.name) {
                self.error(
                    decl.loc,
                    format!(
                        "stage `{consumer}` (kind `{}`) needs input `{}`: {}",
                        kind.name(),
                        spec.name,
                        spec.doc
                    ),
                );
            }
        }
    }

    /// The outputs `r` refers to. A reference to a matrix stage from a matrix
    /// stage binds only the cells whose shared matrix keys have the consumer's
    /// values; a reference to one cell binds that cell.
    fn resolve_ref(
        &mut self,
        r: &Located<Reference>,
        instances: &[Instance],
        consumer_matrix: &[(String, ParamValue)],
        registry: &Registry,
    ) -> Vec<InputRef> {
        let producers = self.producers(r, instances, consumer_matrix);
        producers
            .into_iter()
            .map(|p| self.bind_output(r, p, &instances[p], registry))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }

    /// The indices of the instances `r` selects; reports when there are none.
    fn producers(
        &mut self,
        r: &Located<Reference>,
        instances: &[Instance],
        consumer_matrix: &[(String, ParamValue)],
    ) -> Vec<usize> {
        let target = &r.value.target;
        let found: Vec<usize> = (0..instances.len())
            .filter(|&i| {
                let n = &instances[i];
                target.selects(&n.name, &n.stage)
                    && (target.cell.is_some() || same_shared_values(&n.matrix, consumer_matrix))
            })
            .collect();
        if found.is_empty() {
            let exists = target.cell.is_none() && instances.iter().any(|n| n.stage == target.stage);
            let message = if exists {
                format!("`{target}` has no matrix cell matching this stage's matrix values")
            } else {
                let mut stages: Vec<&str> = instances.iter().map(|n| n.stage.as_str()).collect();
                stages.dedup();
                format!(
                    "unknown input `{}`: no stage named `{target}` (stages: {})",
                    r.value,
                    stages.join(", ")
                )
            };
            self.error(r.loc, message);
        }
        found
    }

    /// The output of `producer` that `r` names (its only one when `r` names
    /// none), or `None` (reported) when there is no such output.
    fn bind_output(
        &mut self,
        r: &Located<Reference>,
        index: usize,
        producer: &Instance,
        registry: &Registry,
    ) -> Option<InputRef> {
        let target = &r.value.target;
        let kind_name = &producer.kind;
        let outputs = registry.get(kind_name).map(|k| k.outputs()).unwrap_or(&[]);
        let output = match r.value.member.as_deref() {
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
                return None;
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
            return None;
        }
        Some(InputRef {
            producer: index,
            output: output.to_owned(),
        })
    }

    /// The value of param `name` written at `loc`, checked against `kind`.
    fn param(
        &mut self,
        kind: &dyn StageKind,
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

    /// The value of a command-line override, checked like a param; its
    /// problems are reported without a location, naming the override.
    fn override_value(&mut self, kind: &dyn StageKind, ov: &Override) -> Option<ParamValue> {
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

/// Whether a producer's matrix cell agrees with the consumer's on every key
/// they share.
fn same_shared_values(
    producer: &[(String, ParamValue)],
    consumer: &[(String, ParamValue)],
) -> bool {
    producer.iter().all(|(k, v)| {
        consumer
            .iter()
            .find(|(ck, _)| ck == k)
            .is_none_or(|(_, cv)| cv == v)
    })
}
