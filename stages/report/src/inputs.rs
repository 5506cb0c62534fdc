//! Reading the input artifacts: which kind each one is and the fields the tables need.
//!
//! An artifact is recognised by its producer's kind (`tokenize`, `train`, `select`,
//! `evaluate`, `bin_prefix`); an artifact of another kind (a `command` stage that wrote a
//! compatible artifact, say) is recognised by the `"kind"` field of its `summary.json`, by a
//! `selected.json` or by a `coverage.json`. Anything else is listed in `index.md` as ignored.
//! A recognised artifact whose files are missing or malformed fails the report with the file
//! and field named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cwm_models::{Family, Size};
use cwm_stage::InputArtifact;
use serde_json::Value;

use crate::error::ReportError;
use crate::table::Source;

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The producing instance.
    pub instance: String,
    /// The kind the report recognised it as.
    pub kind: String,
    /// The artifact's content hash.
    pub hash: String,
}

impl Origin {
    /// As a table source.
    pub fn source(&self) -> Source {
        Source {
            instance: self.instance.clone(),
            kind: self.kind.clone(),
            hash: self.hash.clone(),
        }
    }
}

/// A `tokenize` artifact's `coverage.json` (Table 3).
#[derive(Debug, Clone, PartialEq)]
pub struct Coverage {
    /// The artifact.
    pub origin: Origin,
    /// Games tokenized.
    pub games: u64,
    /// Plies tokenized.
    pub plies: u64,
    /// Distinct move ids seen.
    pub distinct_move_ids: u64,
    /// Size of the move-id space (20,480).
    pub move_ids: u64,
}

/// Validation metrics at one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValMetrics {
    /// The optimizer step.
    pub step: u64,
    /// Loss.
    pub loss: f64,
    /// Labelwise accuracy (fraction).
    pub labelwise: f64,
    /// ExactState (fraction).
    pub exact_state: f64,
    /// Trajectory exactness (fraction).
    pub trajectory: f64,
}

/// The hyperparameters of a run that the tables print or group by.
#[derive(Debug, Clone, PartialEq)]
pub struct Hparams {
    /// Peak learning rate.
    pub lr: f64,
    /// Adam β2.
    pub beta2: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// Warm-up steps.
    pub warmup_steps: u64,
    /// LR schedule (`none`, `constant`, `cosine`, `linear`), when recorded.
    pub schedule: Option<String>,
    /// Cosine floor `r`, when recorded.
    pub lr_min_ratio: Option<f64>,
    /// Every recorded hyperparameter, for telling runs apart.
    pub all: BTreeMap<String, Value>,
}

/// A `train` artifact's `summary.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRun {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// Parameter count.
    pub params: u64,
    /// Hyperparameters.
    pub hparams: Hparams,
    /// Optimizer steps run.
    pub steps: u64,
    /// Validation at the end, if any.
    pub final_val: Option<ValMetrics>,
    /// The validation with the lowest loss, if any.
    pub best_val: Option<ValMetrics>,
}

impl TrainRun {
    /// The validation the report ranks runs by: the best one, else the final one.
    pub fn val(&self) -> Option<&ValMetrics> {
        self.best_val.as_ref().or(self.final_val.as_ref())
    }

    /// First-stage sweep runs: constant learning rate (`none` or `constant`).
    pub fn is_first_stage(&self) -> bool {
        matches!(self.hparams.schedule.as_deref(), Some("none" | "constant"))
    }

    /// Second-stage runs: cosine decay.
    pub fn is_cosine(&self) -> bool {
        self.hparams.schedule.as_deref() == Some("cosine")
    }
}

/// One choice of a `select` artifact's `selected.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectChoice {
    /// The select artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The chosen train instance.
    pub instance: String,
    /// Its artifact hash.
    pub train_hash: String,
    /// Its hyperparameters.
    pub hparams: Hparams,
    /// Its validation metrics (`step` is 0: selected.json records none).
    pub val: ValMetrics,
}

/// An `evaluate` artifact's `summary.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalResult {
    /// The artifact.
    pub origin: Origin,
    /// The split label (`test_real`, `test_random`, ...).
    pub split: String,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// Parameter count.
    pub params: u64,
    /// Games evaluated.
    pub games: u64,
    /// Valid steps evaluated.
    pub steps: u64,
    /// Loss.
    pub loss: f64,
    /// Labelwise accuracy (fraction).
    pub labelwise: f64,
    /// ExactState (fraction).
    pub exact_state: f64,
    /// Trajectory exactness (fraction).
    pub trajectory: f64,
}

/// One prefix bin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    /// Bin index.
    pub bin: u32,
    /// First step (inclusive).
    pub start: u32,
    /// Last step (exclusive).
    pub end: u32,
    /// Valid steps in the bin.
    pub steps: u64,
    /// ExactState in the bin (fraction).
    pub exact_state: f64,
    /// Labelwise accuracy in the bin (fraction).
    pub labelwise: f64,
}

/// A `bin_prefix` artifact's `summary.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct BinResult {
    /// The artifact.
    pub origin: Origin,
    /// The split label.
    pub split: String,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// Parameter count.
    pub params: u64,
    /// Bin width in steps.
    pub bin_size: u64,
    /// The bins, by index.
    pub bins: Vec<Bin>,
}

/// Everything the report read, sorted by instance name within each kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Tokenize coverage.
    pub coverage: Vec<Coverage>,
    /// Train runs.
    pub train: Vec<TrainRun>,
    /// Select choices (of every select artifact).
    pub select: Vec<SelectChoice>,
    /// Evaluations.
    pub evaluate: Vec<EvalResult>,
    /// Prefix bins.
    pub bins: Vec<BinResult>,
    /// Every input artifact with the kind it was recognised as (`None`: ignored).
    pub listed: Vec<(Origin, Option<&'static str>)>,
}

/// The kinds the report reads.
pub const KNOWN_KINDS: [&str; 5] = ["tokenize", "train", "select", "evaluate", "bin_prefix"];

/// Which kind of artifact this is, or `None` when the report does not use it.
pub fn recognise(artifact: &InputArtifact) -> Option<&'static str> {
    if let Some(kind) = KNOWN_KINDS
        .iter()
        .copied()
        .find(|k| *k == artifact.producer_kind)
    {
        return Some(kind);
    }
    let summary = artifact.path.join("summary.json");
    if let Ok(text) = std::fs::read_to_string(&summary)
        && let Ok(value) = serde_json::from_str::<Value>(&text)
        && let Some(kind) = value.get("kind").and_then(Value::as_str)
        && let Some(known) = KNOWN_KINDS.iter().copied().find(|k| *k == kind)
    {
        return Some(known);
    }
    if artifact.path.join("selected.json").is_file() {
        return Some("select");
    }
    if artifact.path.join("coverage.json").is_file() {
        return Some("tokenize");
    }
    None
}

/// Reads every artifact. Order within each kind follows the instance name, then the hash.
///
/// # Errors
/// [`ReportError`] naming the file and field of the first malformed artifact.
pub fn read_inputs(artifacts: &[InputArtifact]) -> Result<Inputs, ReportError> {
    let mut sorted: Vec<&InputArtifact> = artifacts.iter().collect();
    sorted.sort_by(|a, b| (&a.producer, &a.hash).cmp(&(&b.producer, &b.hash)));
    sorted.dedup_by(|a, b| a.hash == b.hash && a.producer == b.producer);
    let mut inputs = Inputs::default();
    for artifact in sorted {
        let kind = recognise(artifact);
        let origin = Origin {
            instance: artifact.producer.clone(),
            kind: kind.unwrap_or(artifact.producer_kind.as_str()).to_owned(),
            hash: artifact.hash.clone(),
        };
        inputs.listed.push((origin.clone(), kind));
        let dir = &artifact.path;
        match kind {
            Some("tokenize") => inputs.coverage.push(read_coverage(origin, dir)?),
            Some("train") => inputs.train.push(read_train(origin, dir)?),
            Some("select") => inputs.select.extend(read_select(&origin, dir)?),
            Some("evaluate") => inputs.evaluate.push(read_evaluate(origin, dir)?),
            Some("bin_prefix") => inputs.bins.push(read_bins(origin, dir)?),
            _ => {}
        }
    }
    Ok(inputs)
}

/// A JSON file and typed access to its fields, with errors naming file and field.
struct Json {
    path: PathBuf,
    value: Value,
}

impl Json {
    fn read(path: PathBuf) -> Result<Self, ReportError> {
        let text = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
        let value = serde_json::from_str(&text).map_err(|source| ReportError::Json {
            path: path.clone(),
            source,
        })?;
        Ok(Self { path, value })
    }

    fn at<'a>(&self, value: &'a Value, field: &str) -> Result<&'a Value, ReportError> {
        let mut current = value;
        for part in field.split('.') {
            current = current
                .get(part)
                .ok_or_else(|| ReportError::field(&self.path, field, "missing"))?;
        }
        Ok(current)
    }

    fn f64_in(&self, value: &Value, field: &str) -> Result<f64, ReportError> {
        let v = self.at(value, field)?;
        v.as_f64().ok_or_else(|| {
            ReportError::field(&self.path, field, format!("expected a number, found {v}"))
        })
    }

    fn u64_in(&self, value: &Value, field: &str) -> Result<u64, ReportError> {
        let v = self.at(value, field)?;
        v.as_u64()
            .or_else(|| {
                // Integral floats (`5000.0`) are accepted: hparams may round-trip through f64.
                v.as_f64()
                    .filter(|x| x.fract() == 0.0 && *x >= 0.0 && *x < 2f64.powi(63))
                    .map(|x| x as u64)
            })
            .ok_or_else(|| {
                ReportError::field(
                    &self.path,
                    field,
                    format!("expected a non-negative integer, found {v}"),
                )
            })
    }

    fn str_in<'a>(&self, value: &'a Value, field: &str) -> Result<&'a str, ReportError> {
        let v = self.at(value, field)?;
        v.as_str().ok_or_else(|| {
            ReportError::field(&self.path, field, format!("expected a string, found {v}"))
        })
    }

    fn f64(&self, field: &str) -> Result<f64, ReportError> {
        self.f64_in(&self.value, field)
    }

    fn u64(&self, field: &str) -> Result<u64, ReportError> {
        self.u64_in(&self.value, field)
    }

    fn str(&self, field: &str) -> Result<&str, ReportError> {
        self.str_in(&self.value, field)
    }

    fn family_in(&self, value: &Value, field: &str) -> Result<Family, ReportError> {
        let name = self.str_in(value, field)?;
        name.parse().map_err(|e: cwm_models::ModelError| {
            ReportError::field(&self.path, field, e.to_string())
        })
    }

    fn size_in(&self, value: &Value, field: &str) -> Result<Size, ReportError> {
        let name = self.str_in(value, field)?;
        name.parse().map_err(|e: cwm_models::ModelError| {
            ReportError::field(&self.path, field, e.to_string())
        })
    }

    fn check_kind(&self, expected: &str) -> Result<(), ReportError> {
        match self.value.get("kind") {
            None => Ok(()),
            Some(Value::String(kind)) if kind == expected => Ok(()),
            Some(other) => Err(ReportError::field(
                &self.path,
                "kind",
                format!("expected \"{expected}\", found {other}"),
            )),
        }
    }

    fn hparams_in(&self, value: &Value, field: &str) -> Result<Hparams, ReportError> {
        let object = self.at(value, field)?;
        let Some(map) = object.as_object() else {
            return Err(ReportError::field(&self.path, field, "expected an object"));
        };
        let sub = |name: &str| format!("{field}.{name}");
        let schedule = match map.get("schedule") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.str_in(value, &sub("schedule"))?.to_owned()),
        };
        let lr_min_ratio = match map.get("lr_min_ratio") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.f64_in(value, &sub("lr_min_ratio"))?),
        };
        Ok(Hparams {
            lr: self.f64_in(value, &sub("lr"))?,
            beta2: self.f64_in(value, &sub("beta2"))?,
            weight_decay: self.f64_in(value, &sub("weight_decay"))?,
            warmup_steps: self.u64_in(value, &sub("warmup_steps"))?,
            schedule,
            lr_min_ratio,
            all: map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        })
    }

    fn val_in(&self, field: &str) -> Result<Option<ValMetrics>, ReportError> {
        match self.value.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => Ok(Some(ValMetrics {
                step: self.u64(&format!("{field}.step"))?,
                loss: self.f64(&format!("{field}.loss"))?,
                labelwise: self.f64(&format!("{field}.labelwise"))?,
                exact_state: self.f64(&format!("{field}.exact_state"))?,
                trajectory: self.f64(&format!("{field}.trajectory"))?,
            })),
        }
    }
}

fn read_coverage(origin: Origin, dir: &Path) -> Result<Coverage, ReportError> {
    let json = Json::read(dir.join("coverage.json"))?;
    Ok(Coverage {
        origin,
        games: json.u64("games")?,
        plies: json.u64("plies")?,
        distinct_move_ids: json.u64("distinct_move_ids")?,
        move_ids: match json.value.get("move_ids") {
            Some(_) => json.u64("move_ids")?,
            None => 20_480,
        },
    })
}

fn read_train(origin: Origin, dir: &Path) -> Result<TrainRun, ReportError> {
    let json = Json::read(dir.join("summary.json"))?;
    json.check_kind("train")?;
    let root = &json.value;
    Ok(TrainRun {
        family: json.family_in(root, "arch")?,
        size: json.size_in(root, "size")?,
        params: json.u64("params")?,
        hparams: json.hparams_in(root, "hparams")?,
        steps: json.u64("steps")?,
        final_val: json.val_in("final_val")?,
        best_val: json.val_in("best_val")?,
        origin,
    })
}

fn read_select(origin: &Origin, dir: &Path) -> Result<Vec<SelectChoice>, ReportError> {
    let json = Json::read(dir.join("selected.json"))?;
    json.check_kind("select")?;
    let Some(choices) = json.value.get("choices").and_then(Value::as_array) else {
        return Err(ReportError::field(
            &json.path,
            "choices",
            "expected an array",
        ));
    };
    let mut out = Vec::with_capacity(choices.len());
    for (i, choice) in choices.iter().enumerate() {
        let field = |name: &str| format!("choices.{i}.{name}");
        // `at` walks dotted paths through objects; array items are addressed from the item.
        let f = |name: &str| {
            choice
                .get(name)
                .ok_or_else(|| ReportError::field(&json.path, field(name), "missing"))
        };
        let num = |name: &str| {
            let v = f(name)?;
            v.as_f64().ok_or_else(|| {
                ReportError::field(
                    &json.path,
                    field(name),
                    format!("expected a number, found {v}"),
                )
            })
        };
        let text = |name: &str| {
            let v = f(name)?;
            v.as_str().map(str::to_owned).ok_or_else(|| {
                ReportError::field(
                    &json.path,
                    field(name),
                    format!("expected a string, found {v}"),
                )
            })
        };
        let family = text("arch")?.parse().map_err(|e: cwm_models::ModelError| {
            ReportError::field(&json.path, field("arch"), e.to_string())
        })?;
        let size = text("size")?.parse().map_err(|e: cwm_models::ModelError| {
            ReportError::field(&json.path, field("size"), e.to_string())
        })?;
        let hparams = json.hparams_in(choice, "hparams").map_err(|e| match e {
            ReportError::Field {
                path,
                field: f,
                message,
            } => ReportError::Field {
                path,
                field: format!("choices.{i}.{f}"),
                message,
            },
            other => other,
        })?;
        out.push(SelectChoice {
            origin: origin.clone(),
            family,
            size,
            instance: text("instance")?,
            train_hash: text("train_hash")?,
            hparams,
            val: ValMetrics {
                step: 0,
                loss: num("val_loss")?,
                labelwise: num("labelwise")?,
                exact_state: num("exact_state")?,
                trajectory: num("trajectory")?,
            },
        });
    }
    Ok(out)
}

fn read_evaluate(origin: Origin, dir: &Path) -> Result<EvalResult, ReportError> {
    let json = Json::read(dir.join("summary.json"))?;
    json.check_kind("evaluate")?;
    let root = &json.value;
    Ok(EvalResult {
        split: json.str("split")?.to_owned(),
        family: json.family_in(root, "arch")?,
        size: json.size_in(root, "size")?,
        params: json.u64("params")?,
        games: json.u64("games")?,
        steps: json.u64("steps")?,
        loss: json.f64("loss")?,
        labelwise: json.f64("labelwise")?,
        exact_state: json.f64("exact_state")?,
        trajectory: json.f64("trajectory")?,
        origin,
    })
}

fn read_bins(origin: Origin, dir: &Path) -> Result<BinResult, ReportError> {
    let json = Json::read(dir.join("summary.json"))?;
    json.check_kind("bin_prefix")?;
    let root = &json.value;
    let Some(items) = root.get("bins").and_then(Value::as_array) else {
        return Err(ReportError::field(&json.path, "bins", "expected an array"));
    };
    let mut bins = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let named = |e: ReportError| match e {
            ReportError::Field {
                path,
                field,
                message,
            } => ReportError::Field {
                path,
                field: format!("bins.{i}.{field}"),
                message,
            },
            other => other,
        };
        let u32_of = |name: &str| -> Result<u32, ReportError> {
            let v = json.u64_in(item, name).map_err(named)?;
            u32::try_from(v).map_err(|_| {
                ReportError::field(
                    &json.path,
                    format!("bins.{i}.{name}"),
                    format!("{v} is too large"),
                )
            })
        };
        bins.push(Bin {
            bin: u32_of("bin")?,
            start: u32_of("start")?,
            end: u32_of("end")?,
            steps: json.u64_in(item, "steps").map_err(named)?,
            exact_state: json.f64_in(item, "exact_state").map_err(named)?,
            labelwise: json.f64_in(item, "labelwise").map_err(named)?,
        });
    }
    bins.sort_by_key(|b| b.start);
    Ok(BinResult {
        split: json.str("split")?.to_owned(),
        family: json.family_in(root, "arch")?,
        size: json.size_in(root, "size")?,
        params: json.u64("params")?,
        bin_size: json.u64("bin")?,
        bins,
        origin,
    })
}
