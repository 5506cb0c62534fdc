//! The `select` stage: the best hyperparameters of a sweep, one choice per group (arch × size).
//!
//! * **Input** `runs` (many): `train` artifacts, typically a matrix over hyperparameters.
//! * **Params** `metric`: `val_loss` (default; the lowest validation loss the run reached, its
//!   `best_val.loss`, or `final_val.loss` when it kept no best) or `final_val_loss` (the last
//!   validation only). The paper selects stage-1 and stage-2 settings by validation loss; lower
//!   wins, ties go to the instance name that sorts first. `group_by` (`[arch, size]`): the
//!   top-level fields of the train summary whose values form a group.
//! * **Output** `out`: `selected.json` ([`Selection`]). The `train` stage reads its `choices`
//!   (input `hparams`) to retrain the winners.
//!
//! A run without a finite validation loss is not a candidate (and is logged); a group whose
//! runs all lack one gets no choice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, ParamValue, StageContext,
    StageError, StageKind,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::EvalError;
use crate::tables::{SUMMARY_FILE, write_atomically};

/// File name of the selection.
pub const SELECTED_FILE: &str = "selected.json";

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

/// The hyperparameters a choice carries to the retraining.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenHparams {
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Warm-up steps.
    pub warmup_steps: u64,
}

/// The winner of one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The model family.
    pub arch: String,
    /// The model size.
    pub size: String,
    /// The producing instance's name.
    pub instance: String,
    /// The train artifact's hash.
    pub train_hash: String,
    /// Its hyperparameters.
    pub hparams: ChosenHparams,
    /// The validation loss it was chosen by.
    pub val_loss: f64,
    /// ExactState of the same validation.
    pub exact_state: Option<f64>,
    /// Labelwise of the same validation.
    pub labelwise: Option<f64>,
    /// Trajectory exactness of the same validation.
    pub trajectory: Option<f64>,
}

/// `selected.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// Always `"select"`.
    pub kind: String,
    /// The metric's name.
    pub metric: String,
    /// The fields that formed the groups.
    pub group_by: Vec<String>,
    /// One choice per group, in group order.
    pub choices: Vec<Choice>,
    /// Runs that had the metric (the candidates ranked).
    pub candidates: u64,
    /// Runs without it, by instance name.
    pub skipped: Vec<String>,
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

fn number(value: &Value, path: &Path, key: &str) -> Result<f64, EvalError> {
    value
        .get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| EvalError::format(path, format!("field {key:?} is missing or not a number")))
}

/// The validation record (`best_val` / `final_val`) the metric uses, if any.
fn validation(summary: &Value, metric: Metric) -> Option<&Value> {
    let record = |key: &str| summary.get(key).filter(|v| v.is_object());
    match metric {
        Metric::ValLoss => record("best_val").or_else(|| record("final_val")),
        Metric::FinalValLoss => record("final_val"),
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
        let summary: Value =
            serde_json::from_str(&text).map_err(|e| EvalError::format(&path, e.to_string()))?;
        if summary.get("kind").and_then(Value::as_str) != Some("train") {
            return Err(EvalError::format(
                &path,
                "not a train summary (kind is not \"train\")",
            ));
        }
        let key = group_by
            .iter()
            .map(|field| field_str(&summary, &path, field))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(val) = validation(&summary, metric) else {
            skipped.push(run.instance.clone());
            continue;
        };
        let val_loss = match val.get("loss").and_then(Value::as_f64) {
            Some(loss) if loss.is_finite() => loss,
            _ => {
                skipped.push(run.instance.clone());
                continue;
            }
        };
        candidates += 1;
        let hparams = summary
            .get("hparams")
            .ok_or_else(|| EvalError::format(&path, "field \"hparams\" is missing"))?;
        let warmup = number(hparams, &path, "warmup_steps")?;
        if warmup < 0.0 || warmup.fract() != 0.0 {
            return Err(EvalError::format(
                &path,
                "hparams.warmup_steps is not a count",
            ));
        }
        let choice = Choice {
            arch: field_str(&summary, &path, "arch")?,
            size: field_str(&summary, &path, "size")?,
            instance: run.instance.clone(),
            train_hash: run.hash.clone(),
            hparams: ChosenHparams {
                lr: number(hparams, &path, "lr")?,
                beta2: number(hparams, &path, "beta2")?,
                weight_decay: number(hparams, &path, "weight_decay")?,
                warmup_steps: warmup as u64,
            },
            val_loss,
            exact_state: val.get("exact_state").and_then(Value::as_f64),
            labelwise: val.get("labelwise").and_then(Value::as_f64),
            trajectory: val.get("trajectory").and_then(Value::as_f64),
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
        kind: "select".to_owned(),
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
    let mut text = serde_json::to_string_pretty(&selection)
        .map_err(|e| EvalError::Invalid(format!("cannot serialize the selection: {e}")))?;
    text.push('\n');
    std::fs::create_dir_all(out_dir).map_err(|e| EvalError::io(out_dir, e))?;
    write_atomically(&out_dir.join(SELECTED_FILE), &text)?;
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
