//! The `select` stage: the best hyperparameters of a sweep, one choice per group (arch × size).
//!
//! * **Input** `runs` (many): `train` artifacts, typically a matrix over hyperparameters.
//! * **Params** `metric`: `val_loss` (default; the lowest validation loss the run reached, its
//!   `best_val.loss`, or `final_val.loss` when it kept no best) or `final_val_loss` (the last
//!   validation only). The paper selects stage-1 and stage-2 settings by validation loss; lower
//!   wins, ties go to the instance name that sorts first. `group_by` (`[arch, size]`): the
//!   top-level fields of the train summary whose values form a group.
//! * **Output** `out`: `selected.json` ([`Selection`], of [`cwm_formats::select`]). The `train`
//!   stage reads its `choices` (input `hparams`) to retrain the winners. The train summaries
//!   are read as [`TrainSummary`].
//!
//! A run without a finite validation loss is not a candidate (and is logged); a group whose
//! runs all lack one gets no choice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cwm_formats::Versioned;
use cwm_formats::train::{SUMMARY_FILE, TrainSummary, ValMetrics};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, ParamValue, StageContext,
    StageError, StageKind,
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

/// Picks one run per group by `metric`.
///
/// # Errors
/// [`EvalError`] when a summary is missing, not a train summary, or lacks a grouping field or
/// a hyperparameter; [`EvalError::Invalid`] when no run has the metric.
pub fn select_runs(
    runs: &[RunInput],
    metric: Metric,
    group_by: &[String],
) -> Result<Selection, EvalError> {
    // Group key → (val_loss, instance, choice).
    let mut best: BTreeMap<Vec<String>, Choice> = BTreeMap::new();
    let mut candidates = 0u64;
    let mut skipped = Vec::new();
    for run in runs {
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
        let key = group_by
            .iter()
            .map(|field| field_str(&fields, &path, field))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(val) = validation(&summary, metric) else {
            skipped.push(run.instance.clone());
            continue;
        };
        if !val.loss.is_finite() {
            skipped.push(run.instance.clone());
            continue;
        }
        candidates += 1;
        let choice = Choice {
            arch: summary.arch.clone(),
            size: summary.size.clone(),
            instance: run.instance.clone(),
            train_hash: run.hash.clone(),
            hparams: ChosenHparams::from(&summary.hparams),
            val_loss: val.loss,
            exact_state: Some(val.exact_state).filter(|x| x.is_finite()),
            labelwise: Some(val.labelwise).filter(|x| x.is_finite()),
            trajectory: Some(val.trajectory).filter(|x| x.is_finite()),
        };
        let better = match best.get(&key) {
            None => true,
            Some(held) => {
                choice.val_loss < held.val_loss
                    || (choice.val_loss == held.val_loss && choice.instance < held.instance)
            }
        };
        if better {
            best.insert(key, choice);
        }
    }
    if best.is_empty() {
        return Err(EvalError::Invalid(format!(
            "none of the {} runs has a finite {}",
            runs.len(),
            metric.name()
        )));
    }
    Ok(Selection {
        version: Selection::VERSION,
        kind: cwm_formats::select::KIND.to_owned(),
        metric: metric.name().to_owned(),
        group_by: group_by.to_vec(),
        choices: best.into_values().collect(),
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
    metric: Metric,
    group_by: &[String],
    out_dir: &Path,
) -> Result<Selection, EvalError> {
    let selection = select_runs(runs, metric, group_by)?;
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
        let group_by: Vec<String> = match ctx.params().get("group_by") {
            None => vec!["arch".to_owned(), "size".to_owned()],
            Some(ParamValue::List(items)) => items
                .iter()
                .map(|item| match item {
                    ParamValue::Str(s) => Ok(s.clone()),
                    other => Err(StageError::Param(format!(
                        "group_by items must be strings, found {}",
                        other.describe()
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(StageError::Param(format!(
                    "group_by must be a list of strings, found {}",
                    other.describe()
                )));
            }
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
        let selection = write_selection(&runs, metric, &group_by, ctx.output("out")?)?;
        for choice in &selection.choices {
            ctx.log().line(format!(
                "{} {}: {} (val loss {:.5})",
                choice.arch, choice.size, choice.instance, choice.val_loss
            ));
        }
        for instance in &selection.skipped {
            ctx.log()
                .line(format!("{instance}: no {} (skipped)", metric.name()));
        }
        Ok(())
    }
}
