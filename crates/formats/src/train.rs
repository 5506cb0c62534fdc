//! What a `train` artifact holds beside its weights and tables: the training configuration
//! (`checkpoint/train_config.json`) and the run's summary (`summary.json`), both written by the
//! train stage (`cwm-stage-train`). The summary is read by the select stage and the report; the
//! configuration by a resumed run (from its partial state) and by whoever needs to know how a
//! checkpoint was trained.
//!
//! The configuration is one nested struct, [`TrainConfig`], in four sections: [`ModelSection`],
//! [`OptimiserSection`], [`ScheduleSection`] and [`DataSection`]. Its fields are named as the
//! train stage's params. `train_config.json` nests the sections (see [`TrainConfigFile`]); the
//! summary's `hparams` ([`Hparams`]) lays the same sections out flat, as it always has, beside
//! what else the run recorded (`threads`).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{Versioned, count, version_1};

/// The file name of the run summary in a train artifact.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the training configuration, in the checkpoint directory beside
/// `model.json` and `model.bpk` (and in a partial state's).
pub const CONFIG_FILE: &str = "train_config.json";
/// The `kind` of a train summary.
pub const KIND: &str = "train";

fn kind() -> String {
    KIND.to_owned()
}

/// Which schedule multiplies the base learning rate (spec D.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    /// `none`: constant learning rate, no warm-up.
    None,
    /// `constant`: linear warm-up, then the base learning rate (the paper's first stage).
    Constant,
    /// `cosine`: linear warm-up, then cosine decay to the floor.
    Cosine,
    /// `linear`: linear warm-up, then linear decay to the floor.
    Linear,
}

impl ScheduleKind {
    /// Every kind.
    pub const ALL: [ScheduleKind; 4] = [
        ScheduleKind::None,
        ScheduleKind::Constant,
        ScheduleKind::Cosine,
        ScheduleKind::Linear,
    ];

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::None => "none",
            ScheduleKind::Constant => "constant",
            ScheduleKind::Cosine => "cosine",
            ScheduleKind::Linear => "linear",
        }
    }

    /// The kind whose canonical name is `name`.
    pub fn from_name(name: &str) -> Option<ScheduleKind> {
        ScheduleKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The model: what the train stage's params say about it (the rest of a model's configuration
/// takes its family's defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSection {
    /// The family's canonical name.
    pub arch: String,
    /// The size preset's name (`d128`, ...).
    pub size: String,
    /// Dropout probability (where each family applies it).
    pub dropout: f64,
    /// The Transformer's RoPE variant (`reference` or `standard`).
    pub rope: String,
    /// Mamba-3 MIMO instead of SISO.
    pub mamba3_mimo: bool,
    /// The arithmetic of the matrix products the run used (`f32` or `bf16`); files written
    /// before it was recorded trained in f32.
    #[serde(default = "f32_name")]
    pub precision: String,
    /// How the Transformer's training attention ran on a cubecl device (`operations` or
    /// `kernels`); files written before it was recorded ran the operations.
    #[serde(default = "operations_name")]
    pub attention: String,
}

fn f32_name() -> String {
    "f32".to_owned()
}

fn operations_name() -> String {
    "operations".to_owned()
}

/// The optimiser: AdamW and its gradient clipping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimiserSection {
    /// Base learning rate.
    pub lr: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Global gradient-norm bound (0 = no clipping).
    pub grad_clip: f64,
}

/// How long the run lasts, how the learning rate moves, and when it validates, logs and saves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleSection {
    /// Optimizer steps (batches) to run; 0 = run `epochs` epochs.
    pub steps: u64,
    /// Epochs to run when `steps` is 0.
    pub epochs: u64,
    /// The learning-rate schedule (named `schedule`, as the param).
    #[serde(rename = "schedule")]
    pub kind: ScheduleKind,
    /// Warm-up steps (ignored by the `none` schedule, as in the reference; an integral float
    /// such as `5000.0` reads as its integer).
    #[serde(deserialize_with = "count")]
    pub warmup_steps: u64,
    /// Decay steps `S` (0 = the total steps of the run).
    pub lr_decay_steps: u64,
    /// Floor ratio `r`.
    pub lr_min_ratio: f64,
    /// Validate every this many steps (0 = only at the end).
    pub val_every: u64,
    /// Log a row every this many steps (0 = only skipped steps).
    pub log_every: u64,
    /// Save the resumable state every this many steps (0 = never; the final model is always
    /// written).
    pub checkpoint_every: u64,
}

impl ScheduleSection {
    /// The decay steps `S` of a run of `total_steps` steps: `lr_decay_steps`, or the run's
    /// total when that is 0.
    pub fn decay_steps(&self, total_steps: u64) -> u64 {
        if self.lr_decay_steps > 0 {
            self.lr_decay_steps
        } else {
            total_steps
        }
    }
}

/// What the model sees: batches, truncation, validation data and the seed of the data order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSection {
    /// Games per batch (validation too).
    pub batch_size: usize,
    /// Sequence truncation in tokens, `START` included (0 = none).
    pub max_steps: usize,
    /// Validation batches (0 = the whole validation set).
    pub val_batches: u64,
    /// Seed of the initialisation, the dropout masks and the shard order.
    pub seed: u64,
}

/// Everything that determines a training run, by section. `M` is how the model is held: its
/// [`ModelSection`] in files; the train stage holds its models' own validated configuration
/// instead and converts with [`TrainConfig::with_model`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig<M = ModelSection> {
    /// The model.
    pub model: M,
    /// The optimiser.
    pub optimiser: OptimiserSection,
    /// The run's length and timing.
    pub schedule: ScheduleSection,
    /// The data.
    pub data: DataSection,
}

impl<M> TrainConfig<M> {
    /// The train stage's defaults (the reference's) for `model`.
    pub fn new(model: M) -> TrainConfig<M> {
        TrainConfig {
            model,
            optimiser: OptimiserSection {
                lr: 1e-3,
                beta2: 0.999,
                weight_decay: 0.0,
                grad_clip: 1.0,
            },
            schedule: ScheduleSection {
                steps: 0,
                epochs: 1,
                kind: ScheduleKind::None,
                warmup_steps: 0,
                lr_decay_steps: 0,
                lr_min_ratio: 0.1,
                val_every: 0,
                log_every: 50,
                checkpoint_every: 0,
            },
            data: DataSection {
                batch_size: 32,
                max_steps: 0,
                val_batches: 10,
                seed: 0,
            },
        }
    }

    /// The same configuration with the model held as `model`.
    pub fn with_model<N>(&self, model: N) -> TrainConfig<N> {
        TrainConfig {
            model,
            optimiser: self.optimiser.clone(),
            schedule: self.schedule.clone(),
            data: self.data.clone(),
        }
    }
}

/// `train_config.json`: a [`TrainConfig`] with its format version, the sections nested
/// (`{"version": 1, "model": {...}, "optimiser": {...}, "schedule": {...}, "data": {...}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfigFile {
    /// The format version ([`TrainConfigFile::VERSION`]).
    #[serde(default = "version_1")]
    pub version: u32,
    /// The configuration.
    #[serde(flatten)]
    pub config: TrainConfig,
}

impl TrainConfigFile {
    /// The file of `config`, at this build's version.
    pub fn new(config: TrainConfig) -> TrainConfigFile {
        TrainConfigFile {
            version: TrainConfigFile::VERSION,
            config,
        }
    }
}

impl Versioned for TrainConfigFile {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// The summary's `hparams`: the run's effective configuration laid out flat (after the
/// `hparams` input's choice, `lr_decay_steps` resolved), and whatever else the run recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hparams {
    /// The model.
    #[serde(flatten)]
    pub model: ModelSection,
    /// The optimiser.
    #[serde(flatten)]
    pub optimiser: OptimiserSection,
    /// The run's length and timing.
    #[serde(flatten)]
    pub schedule: ScheduleSection,
    /// The data.
    #[serde(flatten)]
    pub data: DataSection,
    /// Everything else, by name: the train stage records `threads` (as granted), which does
    /// not change the result.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Hparams {
    /// The hparams of `config` with `extra` entries.
    pub fn new(config: TrainConfig, extra: BTreeMap<String, Value>) -> Hparams {
        let TrainConfig {
            model,
            optimiser,
            schedule,
            data,
        } = config;
        Hparams {
            model,
            optimiser,
            schedule,
            data,
            extra,
        }
    }

    /// The configuration part.
    pub fn config(&self) -> TrainConfig {
        TrainConfig {
            model: self.model.clone(),
            optimiser: self.optimiser.clone(),
            schedule: self.schedule.clone(),
            data: self.data.clone(),
        }
    }

    /// Every entry by name, as written (for telling runs apart by all of them).
    pub fn entries(&self) -> BTreeMap<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map.into_iter().collect(),
            _ => BTreeMap::new(),
        }
    }
}

/// One validation of a run (spec A.5 micro-averages; the row of `val.parquet` too). A metric
/// that was not finite is written as `null` (JSON has no NaN) and reads back as NaN.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ValMetrics {
    /// Global step after which it ran.
    pub step: u64,
    /// Σ loss_sum / Σ denom.
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    /// Labelwise accuracy (`partial_exact`).
    #[serde(deserialize_with = "nan_if_null")]
    pub labelwise: f64,
    /// ExactState (`full_exact`).
    #[serde(deserialize_with = "nan_if_null")]
    pub exact_state: f64,
    /// Trajectory exactness (`game_exact`).
    #[serde(deserialize_with = "nan_if_null")]
    pub trajectory: f64,
}

fn nan_if_null<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// `summary.json` of a train artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainSummary {
    /// The format version ([`TrainSummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The model family's canonical name.
    pub arch: String,
    /// The model size's name.
    pub size: String,
    /// The model's parameter count.
    pub params: u64,
    /// The effective hyperparameters.
    pub hparams: Hparams,
    /// Steps run (batches, skipped ones included).
    pub steps: u64,
    /// Optimizer updates applied (0 when absent: recorded since the rollback of spec D.1
    /// step 7).
    #[serde(default)]
    pub optimizer_steps: u64,
    /// Completed epochs.
    pub epochs_done: u64,
    /// Valid tokens trained on.
    pub tokens: u64,
    /// Skipped batches (rolled-back ones included).
    pub skipped_steps: u64,
    /// Updates undone because they made a parameter non-finite (0 when absent).
    #[serde(default)]
    pub rolled_back_steps: u64,
    /// Tokens per second of training wall time.
    pub tokens_per_s: f64,
    /// Training wall time in seconds (earlier, interrupted processes included).
    pub wall_s: f64,
    /// The last validation, or null.
    pub final_val: Option<ValMetrics>,
    /// The validation with the lowest loss, or null.
    pub best_val: Option<ValMetrics>,
}

impl Versioned for TrainSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    fn config() -> TrainConfig {
        let mut config = TrainConfig::new(ModelSection {
            arch: "slice".into(),
            size: "d128".into(),
            dropout: 0.1,
            rope: "reference".into(),
            mamba3_mimo: false,
            precision: "f32".into(),
            attention: "operations".into(),
        });
        config.optimiser.lr = 3e-3;
        config.optimiser.beta2 = 0.95;
        config.schedule.steps = 300;
        config.schedule.kind = ScheduleKind::Cosine;
        config.schedule.warmup_steps = 30;
        config.schedule.lr_decay_steps = 300;
        config.schedule.val_every = 100;
        config.schedule.log_every = 10;
        config.data.batch_size = 16;
        config.data.max_steps = 128;
        config.data.val_batches = 3;
        config
    }

    fn summary() -> TrainSummary {
        let mut extra = BTreeMap::new();
        extra.insert("threads".to_owned(), Value::from(2));
        let best = ValMetrics {
            step: 300,
            loss: 0.12,
            labelwise: 0.99,
            exact_state: 0.5,
            trajectory: 0.0,
        };
        TrainSummary {
            version: TrainSummary::VERSION,
            kind: KIND.into(),
            arch: "slice".into(),
            size: "d128".into(),
            params: 3_144_662,
            hparams: Hparams::new(config(), extra),
            steps: 300,
            optimizer_steps: 300,
            epochs_done: 1,
            tokens: 540_000,
            skipped_steps: 0,
            rolled_back_steps: 0,
            tokens_per_s: 10_000.0,
            wall_s: 54.0,
            final_val: Some(best),
            best_val: Some(best),
        }
    }

    #[test]
    fn train_config_and_summary_round_trip() {
        round_trip(&TrainConfigFile::new(config()));
        round_trip(&summary());
        let mut diverged = summary();
        diverged.final_val = None;
        round_trip(&diverged);
    }

    #[test]
    fn the_config_file_nests_the_sections_and_hparams_lay_them_out_flat() {
        let file = serde_json::to_value(TrainConfigFile::new(config())).unwrap();
        assert_eq!(file["version"], 1);
        assert_eq!(file["model"]["arch"], "slice");
        assert_eq!(file["optimiser"]["lr"], 3e-3);
        assert_eq!(file["schedule"]["schedule"], "cosine");
        assert_eq!(file["data"]["batch_size"], 16);
        let hparams = serde_json::to_value(&summary().hparams).unwrap();
        let names: Vec<&str> = hparams
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // The names the summary has always had: the train stage's params, and `threads`.
        let mut expected = vec![
            "arch",
            "attention",
            "batch_size",
            "beta2",
            "checkpoint_every",
            "dropout",
            "epochs",
            "grad_clip",
            "log_every",
            "lr",
            "lr_decay_steps",
            "lr_min_ratio",
            "mamba3_mimo",
            "max_steps",
            "precision",
            "rope",
            "schedule",
            "seed",
            "size",
            "steps",
            "threads",
            "val_batches",
            "val_every",
            "warmup_steps",
            "weight_decay",
        ];
        let mut names = names;
        names.sort_unstable();
        expected.sort_unstable();
        assert_eq!(names, expected);
        assert_eq!(summary().hparams.config(), config());
        assert_eq!(summary().hparams.entries()["threads"], 2);
    }

    /// A `summary.json` as the train stage wrote it before formats were versioned (keys in
    /// serde_json's order, a NaN loss written as null), and the `hparams` of another producer
    /// calling a constant schedule `constant`.
    #[test]
    fn train_summary_of_today_reads() {
        let dir = scratch("train");
        let path = dir.join(SUMMARY_FILE);
        let today = r#"{
  "arch": "slice",
  "best_val": {"exact_state": 0.5, "labelwise": 0.99, "loss": 0.12, "step": 300, "trajectory": 0.0},
  "epochs_done": 1,
  "final_val": {"exact_state": 0.5, "labelwise": 0.99, "loss": 0.12, "step": 300, "trajectory": 0.0},
  "hparams": {
    "arch": "slice", "batch_size": 16, "beta2": 0.95, "checkpoint_every": 0,
    "dropout": 0.1, "epochs": 1, "grad_clip": 1.0, "log_every": 10, "lr": 0.003,
    "lr_decay_steps": 300, "lr_min_ratio": 0.1, "mamba3_mimo": false, "max_steps": 128,
    "rope": "reference", "schedule": "cosine", "seed": 0, "size": "d128", "steps": 300,
    "threads": 2, "val_batches": 3, "val_every": 100, "warmup_steps": 30,
    "weight_decay": 0.0
  },
  "kind": "train",
  "optimizer_steps": 300,
  "params": 3144662,
  "rolled_back_steps": 0,
  "size": "d128",
  "skipped_steps": 0,
  "steps": 300,
  "tokens": 540000,
  "tokens_per_s": 10000.0,
  "wall_s": 54.0
}
"#;
        std::fs::write(&path, today).unwrap();
        assert_eq!(crate::read_json::<TrainSummary>(&path).unwrap(), summary());

        let diverged = today
            .replacen("\"loss\": 0.12", "\"loss\": null", 1)
            .replace("\"schedule\": \"cosine\"", "\"schedule\": \"constant\"");
        std::fs::write(&path, diverged).unwrap();
        let read: TrainSummary = crate::read_json(&path).unwrap();
        assert!(read.best_val.unwrap().loss.is_nan());
        assert_eq!(read.hparams.schedule.kind, ScheduleKind::Constant);

        let bad = today.replace("\"lr\": 0.003", "\"lr\": \"fast\"");
        std::fs::write(&path, bad).unwrap();
        let err = crate::read_json::<TrainSummary>(&path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("summary.json") && err.contains("hparams") && err.contains("a number"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
