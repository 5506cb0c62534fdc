//! The instance graph: topological order, cycle detection and selection.
//!
//! The whole graph is built before anything runs. Edges go from a producer to
//! each consumer of one of its outputs. [`Plan::new`] orders the instances
//! (Kahn's algorithm, ties broken by declaration order so runs are
//! reproducible) or reports every instance caught in a cycle, with locations.

use std::collections::BTreeSet;

use crate::pipeline::{Diagnostic, Diagnostics, Pipeline, Selector};

/// A selector (`--only`, `--from`, `--force`, `cwm show`) that names no instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no stage or instance named `{selector}` (stages: {})", stages.join(", "))]
pub struct UnknownSelector {
    /// The selector as given.
    pub(crate) selector: String,
    /// The pipeline's stages, in declaration order.
    pub(crate) stages: Vec<String>,
}

/// A validated pipeline with its dependency graph.
#[derive(Debug)]
pub struct Plan {
    /// The pipeline.
    pub pipeline: Pipeline,
    /// Instance indices in a valid execution order.
    pub order: Vec<usize>,
    /// For each instance, the distinct producers it reads from.
    pub(crate) deps: Vec<Vec<usize>>,
    /// For each instance, the distinct consumers of its outputs.
    pub(crate) consumers: Vec<Vec<usize>>,
}

impl Plan {
    /// Orders `pipeline`, or reports the instances on a cycle.
    pub fn new(pipeline: Pipeline) -> Result<Plan, Diagnostics> {
        let n = pipeline.instances.len();
        let mut deps = vec![Vec::new(); n];
        let mut consumers = vec![Vec::new(); n];
        for (i, inst) in pipeline.instances.iter().enumerate() {
            let producers: BTreeSet<usize> =
                inst.inputs.values().flatten().map(|r| r.producer).collect();
            for p in producers {
                deps[i].push(p);
                consumers[p].push(i);
            }
        }
        let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
        let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &c in &consumers[i] {
                indegree[c] -= 1;
                if indegree[c] == 0 {
                    ready.insert(c);
                }
            }
        }
        if order.len() < n {
            let stuck: Vec<usize> = (0..n).filter(|&i| indegree[i] > 0).collect();
            let names: Vec<&str> = stuck
                .iter()
                .map(|&i| pipeline.instances[i].name.as_str())
                .collect();
            let diagnostics = stuck
                .iter()
                .map(|&i| Diagnostic {
                    file: pipeline.path.clone(),
                    loc: pipeline.instances[i].loc,
                    message: format!(
                        "stage `{}` is on a dependency cycle (stages involved: {})",
                        pipeline.instances[i].name,
                        names.join(", ")
                    ),
                })
                .collect();
            return Err(Diagnostics(diagnostics));
        }
        Ok(Plan {
            pipeline,
            order,
            deps,
            consumers,
        })
    }

    /// The selected instances plus everything they need, in execution order.
    pub fn with_ancestors(&self, selected: &[usize]) -> Vec<usize> {
        let mut keep = vec![false; self.deps.len()];
        let mut stack: Vec<usize> = selected.to_vec();
        while let Some(i) = stack.pop() {
            if !keep[i] {
                keep[i] = true;
                stack.extend(&self.deps[i]);
            }
        }
        self.order.iter().copied().filter(|&i| keep[i]).collect()
    }

    /// The selected instances and everything downstream of them.
    pub(crate) fn with_descendants(&self, selected: &[usize]) -> Vec<usize> {
        let mut keep = vec![false; self.deps.len()];
        let mut stack: Vec<usize> = selected.to_vec();
        while let Some(i) = stack.pop() {
            if !keep[i] {
                keep[i] = true;
                stack.extend(&self.consumers[i]);
            }
        }
        self.order.iter().copied().filter(|&i| keep[i]).collect()
    }

    /// Resolves selectors (instance or stage names) to instance indices, or
    /// names the first unknown one.
    pub fn resolve(&self, selectors: &[String]) -> Result<Vec<usize>, UnknownSelector> {
        let mut out = Vec::new();
        for s in selectors {
            let found = self.pipeline.select(&Selector::parse(s));
            if found.is_empty() {
                let mut stages: Vec<String> = self
                    .pipeline
                    .instances
                    .iter()
                    .map(|i| i.stage.clone())
                    .collect();
                stages.dedup();
                return Err(UnknownSelector {
                    selector: s.clone(),
                    stages,
                });
            }
            out.extend(found);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::{LoadOptions, load_str};
    use crate::test_kinds::registry;
    use std::path::Path;

    fn plan(text: &str) -> Result<Plan, Diagnostics> {
        let p = load_str(
            text,
            Path::new("p.yaml"),
            &registry(),
            &LoadOptions::default(),
        )?;
        Plan::new(p)
    }

    #[test]
    fn orders_producers_first_and_selects_closures() {
        let p = plan(
            "stages:\n  c:\n    uses: step\n    params: {cmd: x}\n    inputs: {i: b}\n  a:\n    uses: step\n    params: {cmd: x}\n  b:\n    uses: step\n    params: {cmd: x}\n    inputs: {i: a}\n  d:\n    uses: step\n    params: {cmd: x}\n",
        )
        .unwrap();
        let names = |v: &[usize]| -> Vec<String> {
            v.iter()
                .map(|&i| p.pipeline.instances[i].name.clone())
                .collect()
        };
        assert_eq!(names(&p.order), ["a", "b", "c", "d"]);
        let b = p.resolve(&["b".into()]).unwrap();
        assert_eq!(names(&p.with_ancestors(&b)), ["a", "b"]);
        assert_eq!(names(&p.with_descendants(&b)), ["b", "c"]);
        assert_eq!(
            p.resolve(&["zz".into()]).unwrap_err().to_string(),
            "no stage or instance named `zz` (stages: c, a, b, d)"
        );
    }

    #[test]
    fn cycles_are_reported_with_locations() {
        let err = plan(
            "stages:\n  a:\n    uses: step\n    params: {cmd: x}\n    inputs: {i: b}\n  b:\n    uses: step\n    params: {cmd: x}\n    inputs: {i: a}\n",
        )
        .unwrap_err();
        assert_eq!(err.0.len(), 2);
        assert!(
            err.0[0].to_string().starts_with(
                "p.yaml:2:3: stage `a` is on a dependency cycle (stages involved: a, b)"
            ),
            "{err}"
        );
    }
}
