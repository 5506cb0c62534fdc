//! `cwm status`: every instance, fresh or stale, with reasons; and the summary
//! `cwm status` prints by default, counts per stage by why they are stale.

use std::collections::BTreeMap;
use std::fmt;

use crate::freshness::{self, Freshness, Outputs};
use crate::lockfile::LockFile;
use crate::plan::Plan;
use crate::reason::StaleReason;
use crate::registry::Registry;
use crate::store::Store;

/// One instance's state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StageStatus {
    /// Instance name.
    pub stage: String,
    /// `fresh` or `stale`.
    pub state: &'static str,
    /// Why it is stale (written to JSON as their texts).
    pub reasons: Vec<StaleReason>,
    /// The instance's cache key, when its inputs are known (not shown by `status --json`).
    #[serde(skip)]
    pub key: Option<String>,
    /// The stage it is a cell of, as named in the file (not shown by `status --json`).
    #[serde(skip)]
    pub(crate) declared: String,
}

/// Computes the status of every instance, in execution order.
pub fn status(
    plan: &Plan,
    registry: &Registry,
    store: &Store,
    lock: &LockFile,
) -> Vec<StageStatus> {
    let n = plan.pipeline.instances.len();
    let mut outputs: Vec<Option<Outputs>> = vec![None; n];
    let mut result = Vec::with_capacity(n);
    for &idx in &plan.order {
        let inst = &plan.pipeline.instances[idx];
        let stale_inputs: Vec<StaleReason> = inst
            .inputs
            .iter()
            .flat_map(|(input, refs)| refs.iter().map(move |r| (input, r)))
            .filter(|(_, r)| outputs[r.producer].is_none())
            .map(|(input, r)| StaleReason::ProducerStale {
                input: input.clone(),
                producer: plan.pipeline.instances[r.producer].name.clone(),
            })
            .collect();
        let mut key = None;
        let reasons = if stale_inputs.is_empty() {
            match freshness::ingredients(plan, registry, store, idx, |p| outputs[p].as_ref()) {
                Err(e) => vec![StaleReason::KeyUnknown {
                    error: e.to_string(),
                }],
                Ok(ing) => {
                    key = Some(ing.key());
                    match freshness::check(store, lock, &inst.name, &ing, false) {
                        Freshness::Fresh(outs) => {
                            outputs[idx] = Some(outs);
                            Vec::new()
                        }
                        Freshness::Stale(reasons) => reasons,
                    }
                }
            }
        } else {
            stale_inputs
        };
        result.push(StageStatus {
            stage: inst.name.clone(),
            state: if reasons.is_empty() { "fresh" } else { "stale" },
            reasons,
            key,
            declared: inst.stage.clone(),
        });
    }
    result
}

/// The summary's groups of reasons, in the order a `why` lists them
/// ([`StaleReason::group`]).
const GROUPS: [&str; 7] = [
    "forced",
    "never-run",
    "code",
    "params",
    "input",
    "output-missing",
    "upstream",
];

/// How the instances of one stage (every cell of its matrix) stand.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StageTally {
    /// The stage's name in the pipeline file.
    pub stage: String,
    /// How many instances it has.
    pub instances: usize,
    /// How many of them are fresh.
    pub fresh: usize,
    /// The stale ones by why: the groups of an instance's reasons joined by `+`
    /// (`never-run`, `code+params`, `upstream`, …), each with its count, in the
    /// order of [`GROUPS`]. The counts sum to `instances - fresh`.
    pub stale: Vec<(String, usize)>,
}

impl StageTally {
    /// How many instances are stale.
    pub fn stale_count(&self) -> usize {
        self.stale.iter().map(|(_, n)| n).sum()
    }
}

/// `cwm status`'s summary: one tally per stage in plan order, and their sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSummary {
    /// One per stage, in the order its first instance is planned.
    pub stages: Vec<StageTally>,
    /// Every instance (its `stage` is `total`).
    pub total: StageTally,
}

/// An instance's why, as the sorted indices into [`GROUPS`] of its reasons' groups.
fn why_of(reasons: &[StaleReason]) -> Vec<usize> {
    let mut why: Vec<usize> = reasons
        .iter()
        .filter_map(|r| GROUPS.iter().position(|g| *g == r.group()))
        .collect();
    why.sort_unstable();
    why.dedup();
    why
}

/// Counts per stage and why, from per-instance `(stage, why)` rows in plan order.
#[derive(Default)]
struct Counter {
    instances: usize,
    fresh: usize,
    stale: BTreeMap<Vec<usize>, usize>,
}

impl Counter {
    fn add(&mut self, why: Vec<usize>) {
        self.instances += 1;
        if why.is_empty() {
            self.fresh += 1;
        } else {
            *self.stale.entry(why).or_default() += 1;
        }
    }

    fn tally(self, stage: String) -> StageTally {
        let stale = self
            .stale
            .into_iter()
            .map(|(why, n)| {
                let names: Vec<&str> = why.iter().map(|&g| GROUPS[g]).collect();
                (names.join("+"), n)
            })
            .collect();
        StageTally {
            stage,
            instances: self.instances,
            fresh: self.fresh,
            stale,
        }
    }
}

/// Tallies `statuses` (as [`status`] returns them) per stage and in total.
pub fn summarize(statuses: &[StageStatus]) -> StatusSummary {
    let mut order: Vec<&str> = Vec::new();
    let mut per_stage: BTreeMap<&str, Counter> = BTreeMap::new();
    let mut total = Counter::default();
    for s in statuses {
        // Every reason has a group, and an instance is fresh exactly when it has no reason.
        let why = why_of(&s.reasons);
        let counter = per_stage.entry(&s.declared).or_insert_with(|| {
            order.push(&s.declared);
            Counter::default()
        });
        counter.add(why.clone());
        total.add(why);
    }
    let stages = order
        .into_iter()
        .filter_map(|stage| Some(per_stage.remove(stage)?.tally(stage.to_owned())))
        .collect();
    StatusSummary {
        stages,
        total: total.tally("total".to_owned()),
    }
}

/// A table: a header, one row per stage, the total; `why stale` lists `group count` pairs.
impl fmt::Display for StatusSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .stages
            .iter()
            .map(|t| t.stage.chars().count())
            .chain([self.total.stage.chars().count(), "stage".len()])
            .max()
            .unwrap_or_default();
        writeln!(f, "{:<width$}  instances  fresh  stale  why stale", "stage")?;
        for tally in self.stages.iter().chain([&self.total]) {
            let why: Vec<String> = tally
                .stale
                .iter()
                .map(|(why, n)| format!("{why} {n}"))
                .collect();
            let why = if why.is_empty() {
                "-".to_owned()
            } else {
                why.join(", ")
            };
            writeln!(
                f,
                "{:<width$}  {:>9}  {:>5}  {:>5}  {why}",
                tally.stage,
                tally.instances,
                tally.fresh,
                tally.stale_count()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str, declared: &str, reasons: Vec<StaleReason>) -> StageStatus {
        StageStatus {
            stage: name.to_owned(),
            state: if reasons.is_empty() { "fresh" } else { "stale" },
            reasons,
            key: None,
            declared: declared.to_owned(),
        }
    }

    fn param(name: &str) -> StaleReason {
        StaleReason::ParamChanged {
            name: name.to_owned(),
            old: "1".into(),
            new: "2".into(),
        }
    }

    fn upstream() -> StaleReason {
        StaleReason::ProducerStale {
            input: "x".into(),
            producer: "a".into(),
        }
    }

    #[test]
    fn counts_per_stage_by_why_sum_to_the_instances_in_plan_order() {
        let code = StaleReason::CodeChanged {
            kind: "k".into(),
            old: "o".into(),
            new: "n".into(),
        };
        let statuses = [
            instance("prep", "prep", vec![]),
            instance("a", "a", vec![StaleReason::NeverRun]),
            instance("t[x=1]", "t", vec![param("lr"), code.clone(), param("wd")]),
            instance("t[x=2]", "t", vec![code, param("lr")]),
            instance("t[x=3]", "t", vec![upstream(), upstream()]),
            instance("t[x=4]", "t", vec![]),
            instance("b", "b", vec![upstream()]),
        ];
        let summary = summarize(&statuses);
        let stages: Vec<&str> = summary.stages.iter().map(|t| t.stage.as_str()).collect();
        assert_eq!(stages, ["prep", "a", "t", "b"]);
        let t = &summary.stages[2];
        assert_eq!((t.instances, t.fresh, t.stale_count()), (4, 1, 3));
        assert_eq!(
            t.stale,
            [("code+params".to_owned(), 2), ("upstream".to_owned(), 1)]
        );
        let total = &summary.total;
        assert_eq!((total.instances, total.fresh), (7, 2));
        assert_eq!(
            total.stale,
            [
                ("never-run".to_owned(), 1),
                ("code+params".to_owned(), 2),
                ("upstream".to_owned(), 2)
            ]
        );
        assert_eq!(
            summary.to_string(),
            "\
stage  instances  fresh  stale  why stale
prep           1      1      0  -
a              1      0      1  never-run 1
t              4      1      3  code+params 2, upstream 1
b              1      0      1  upstream 1
total          7      2      5  never-run 1, code+params 2, upstream 2
"
        );
    }
}
