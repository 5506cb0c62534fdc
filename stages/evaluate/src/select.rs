//! The `select` stage: the best hyperparameters of a sweep, one choice per group (arch × size).
//!
//! * **Input** `runs` (many): `train` artifacts, typically a matrix over hyperparameters.
//! * **Params** `metric`: `val_loss` (default; the lowest validation loss the run reached, its
//!   `best_val.loss`, or `final_val.loss` when it kept no best) or `final_val_loss` (the last
//!   validation only). The paper selects stage-1 and stage-2 settings by validation loss; lower
//!   wins, ties go to the instance name that sorts first. `group_by` (`[arch, size]`): the
//!   top-level fields of the train summary whose values form a group. `ranks`
//!   (`[slice/d512=2]`): groups that keep their k-th best run instead of the best (the paper's
//!   SLiCE d512 exception); the choice records its rank and the runs it passed over.
//! * **Output** `out`: `selected.json` ([`Selection`], of [`cwm_formats::select`]). The `train`
//!   stage reads its `choices` (input `hparams`) to retrain the winners. The train summaries
//!   are read as [`TrainSummary`].
//!
//! A run without a finite validation loss is not a candidate (and is logged); a group whose
//! runs all lack one gets no choice. The same kind picks the better cosine floor of the
//! second stage: its runs grouped by arch and size.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cwm_formats::Versioned;
use cwm_formats::train::{SUMMARY_FILE, TrainSummary, ValMetrics};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError,
    StageKind,
};
use serde_json::Value;

use crate::EvalError;

pub use cwm_formats::select::{Choice, ChosenHparams, SELECTED_FILE, Selection};

/// Which validation figure ranks the runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `best_val.loss`, else `final_val.loss`.
    ValLoss,
    /// `final_val.loss` only.
    FinalValLoss,
}

impl Metric {
    /// The parameter value naming this metric.
    pub fn name(self) -> &'static str {
        match self {
            Metric::ValLoss => "val_loss",
            Metric::FinalValLoss => "final_val_loss",
        }
    }

    /// The metric named `name`.
    pub fn from_name(name: &str) -> Option<Metric> {
        match name {
            "val_loss" => Some(Metric::ValLoss),
            "final_val_loss" => Some(Metric::FinalValLoss),
            _ => None,
        }
    }
}

/// One `train` artifact to choose from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInput {
    /// The producing instance, e.g. `train[arch=slice,lr=0.001,size=d128]`.
    pub instance: String,
    /// The artifact's hash.
    pub hash: String,
    /// The artifact's directory (holding `summary.json`).
    pub dir: PathBuf,
}

fn field_str(summary: &Value, path: &Path, key: &str) -> Result<String, EvalError> {
    match summary.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        _ => Err(EvalError::format(
            path,
            format!("field {key:?} is missing or not a scalar"),
        )),
    }
}

/// The validation record (`best_val` / `final_val`) the metric uses, if any.
fn validation(summary: &TrainSummary, metric: Metric) -> Option<&ValMetrics> {
    match metric {
        Metric::ValLoss => summary.best_val.as_ref().or(summary.final_val.as_ref()),
        Metric::FinalValLoss => summary.final_val.as_ref(),
    }
}

/// Which run of a group to keep: the group's values joined by `/` (`slice/d512` for the
/// default grouping) and the 1-based place in its ranking. The paper kept the second-best
/// first-stage configuration of SLiCE d512 because the best was unstable over four epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPick {
    /// The group, its values joined by `/`.
    pub group: String,
    /// 1 for the best, 2 for the second best, ...
    pub rank: u32,
}

impl std::str::FromStr for RankPick {
    type Err = String;

    /// `GROUP=K`, e.g. `slice/d512=2`.
    fn from_str(text: &str) -> Result<RankPick, String> {
        let bad = || format!("ranks entry {text:?} is not GROUP=K (e.g. slice/d512=2, K >= 1)");
        let (group, rank) = text.rsplit_once('=').ok_or_else(bad)?;
        let rank: u32 = rank.trim().parse().map_err(|_| bad())?;
        if group.trim().is_empty() || rank == 0 {
            return Err(bad());
        }
        Ok(RankPick {
            group: group.trim().to_owned(),
            rank,
        })
    }
}

/// How the runs are ranked and which of each group is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectRule {
    /// The validation figure that ranks runs (lower wins; ties go to the instance name that
    /// sorts first).
    pub metric: Metric,
    /// The top-level train summary fields whose values form a group.
    pub group_by: Vec<String>,
    /// Groups that keep their k-th best instead of their best.
    pub ranks: Vec<RankPick>,
}

impl SelectRule {
    /// The best run of each group by `metric`, grouped by `group_by`.
    pub fn best(metric: Metric, group_by: &[String]) -> SelectRule {
        SelectRule {
            metric,
            group_by: group_by.to_vec(),
            ranks: Vec::new(),
        }
    }
}

/// One run read for ranking: its group key and its choice record.
fn read_candidate(
    run: &RunInput,
    rule: &SelectRule,
) -> Result<(Vec<String>, Option<Choice>), EvalError> {
    let path = run.dir.join(SUMMARY_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| EvalError::io(&path, e))?;
    let fields: Value =
        serde_json::from_str(&text).map_err(|e| EvalError::format(&path, e.to_string()))?;
    // The kind first: another kind's summary fails on it rather than on a missing field.
    if fields.get("kind").and_then(Value::as_str) != Some(cwm_formats::train::KIND) {
        return Err(EvalError::format(
            &path,
            "not a train summary (kind is not \"train\")",
        ));
    }
    let summary: TrainSummary = cwm_formats::from_value(&path, &fields)?;
    // Groups are formed by any top-level fields, as the file has them.
    let key = rule
        .group_by
        .iter()
        .map(|field| field_str(&fields, &path, field))
        .collect::<Result<Vec<_>, _>>()?;
    let choice = validation(&summary, rule.metric)
        .filter(|val| val.loss.is_finite())
        .map(|val| Choice {
            arch: summary.arch.clone(),
            size: summary.size.clone(),
            instance: run.instance.clone(),
            train_hash: run.hash.clone(),
            hparams: ChosenHparams::from(&summary.hparams),
            val_loss: val.loss,
            exact_state: Some(val.exact_state).filter(|x| x.is_finite()),
            labelwise: Some(val.labelwise).filter(|x| x.is_finite()),
            trajectory: Some(val.trajectory).filter(|x| x.is_finite()),
            rank: 1,
            passed_over: Vec::new(),
        });
    Ok((key, choice))
}

/// The `rank`-th best of one group's candidates (lowest loss first, then instance name).
fn pick(group: &str, mut candidates: Vec<Choice>, rank: u32) -> Result<Choice, EvalError> {
    candidates.sort_by(|a, b| {
        a.val_loss
            .total_cmp(&b.val_loss)
            .then_with(|| a.instance.cmp(&b.instance))
    });
    let index = rank as usize - 1;
    if index >= candidates.len() {
        return Err(EvalError::Invalid(format!(
            "ranks asks for run {rank} of group {group}, which has {} candidate(s)",
            candidates.len()
        )));
    }
    let passed_over = candidates[..index]
        .iter()
        .map(|c| c.instance.clone())
        .collect();
    let mut choice = candidates.swap_remove(index);
    choice.rank = rank;
    choice.passed_over = passed_over;
    Ok(choice)
}

/// Picks one run per group by `rule`.
///
/// # Errors
/// [`EvalError`] when a summary is missing, not a train summary, or lacks a grouping field or
/// a hyperparameter; [`EvalError::Invalid`] when no run has the metric, or when `ranks` names
/// a group that does not exist or asks for more runs than a group has.
pub fn select_runs(runs: &[RunInput], rule: &SelectRule) -> Result<Selection, EvalError> {
    let mut groups: BTreeMap<Vec<String>, Vec<Choice>> = BTreeMap::new();
    let mut skipped = Vec::new();
    for run in runs {
        match read_candidate(run, rule)? {
            (key, Some(choice)) => groups.entry(key).or_default().push(choice),
            (_, None) => skipped.push(run.instance.clone()),
        }
    }
    let candidates = groups.values().map(|g| g.len() as u64).sum();
    if groups.is_empty() {
        return Err(EvalError::Invalid(format!(
            "none of the {} runs has a finite {}",
            runs.len(),
            rule.metric.name()
        )));
    }
    let names: Vec<String> = groups.keys().map(|key| key.join("/")).collect();
    if let Some(unknown) = rule.ranks.iter().find(|r| !names.contains(&r.group)) {
        return Err(EvalError::Invalid(format!(
            "ranks names group {}, but the groups are: {}",
            unknown.group,
            names.join(", ")
        )));
    }
    let choices = groups
        .into_iter()
        .zip(&names)
        .map(|((_, group), name)| {
            let rank = rule
                .ranks
                .iter()
                .find(|r| &r.group == name)
                .map_or(1, |r| r.rank);
            pick(name, group, rank)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Selection {
        version: Selection::VERSION,
        kind: cwm_formats::select::KIND.to_owned(),
        metric: rule.metric.name().to_owned(),
        group_by: rule.group_by.clone(),
        choices,
        candidates,
        skipped,
    })
}

/// Selects from `runs` and writes `selected.json` into `out_dir`.
///
/// # Errors
/// As [`select_runs`], and write errors.
pub fn write_selection(
    runs: &[RunInput],
    rule: &SelectRule,
    out_dir: &Path,
) -> Result<Selection, EvalError> {
    let selection = select_runs(runs, rule)?;
    std::fs::create_dir_all(out_dir).map_err(|e| EvalError::io(out_dir, e))?;
    cwm_formats::write_json(&out_dir.join(SELECTED_FILE), &selection)?;
    Ok(selection)
}

/// The `select` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct SelectStage;

const METRICS: &[&str] = &["val_loss", "final_val_loss"];

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "metric",
        ParamType::Choice(METRICS),
        ParamDefault::Str("val_loss"),
        "rank runs by the lowest validation loss (val_loss: best_val, else final_val) or by final_val_loss",
    ),
    ParamSpec::optional(
        "group_by",
        ParamType::List(&ParamType::Str),
        "train summary fields that form a group (default [arch, size])",
    ),
    ParamSpec::optional(
        "ranks",
        ParamType::List(&ParamType::Str),
        "groups that keep their k-th best run instead of the best: GROUP=K, the group's values joined by / (e.g. slice/d512=2)",
    ),
];

const INPUTS: &[InputSpec] = &[InputSpec::many(
    "runs",
    "train artifacts to choose from (a hyperparameter matrix)",
)];

const DECL: KindDecl = KindDecl::new(
    "select",
    "picks the hyperparameters with the lowest validation loss per arch x size from train runs",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS));

impl StageKind for SelectStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::fingerprint_of_files(
            crate::FILE_FINGERPRINTS,
            &[
                "Cargo.toml",
                "src/lib.rs",
                "src/error.rs",
                "src/select.rs",
                "src/tables.rs",
            ],
        )
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let name = ctx.params().str("metric")?;
        let metric = Metric::from_name(name)
            .ok_or_else(|| StageError::Param(format!("unknown metric {name:?}")))?;
        let group_by = ctx
            .params()
            .str_list("group_by")?
            .unwrap_or_else(|| vec!["arch".to_owned(), "size".to_owned()]);
        let ranks = ctx
            .params()
            .str_list("ranks")?
            .unwrap_or_default()
            .iter()
            .map(|text| text.parse::<RankPick>().map_err(StageError::Param))
            .collect::<Result<Vec<_>, _>>()?;
        let rule = SelectRule {
            metric,
            group_by,
            ranks,
        };
        let runs: Vec<RunInput> = ctx
            .input_list("runs")
            .iter()
            .map(|a| RunInput {
                instance: a.producer.clone(),
                hash: a.hash.clone(),
                dir: a.path.clone(),
            })
            .collect();
        let selection = write_selection(&runs, &rule, ctx.output("out")?)?;
        log_selection(ctx, &selection, metric);
        Ok(())
    }
}

/// The choices and the skipped runs, a line each.
fn log_selection(ctx: &StageContext, selection: &Selection, metric: Metric) {
    for choice in &selection.choices {
        let place = match choice.rank {
            1 => String::new(),
            k => format!(
                " (rank {k}, passing over {})",
                choice.passed_over.join(", ")
            ),
        };
        ctx.log().line(format!(
            "{} {}: {} (val loss {:.5}){place}",
            choice.arch, choice.size, choice.instance, choice.val_loss
        ));
    }
    for instance in &selection.skipped {
        ctx.log()
            .line(format!("{instance}: no {} (skipped)", metric.name()));
    }
}
