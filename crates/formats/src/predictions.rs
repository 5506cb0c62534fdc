//! `predictions.parquet` of an `evaluate` artifact: what the model believed at every step, as
//! data. Written by the evaluate stage (`cwm-stage-evaluate`, whose `tables` module holds the
//! Arrow schema), read by the diagnostics (`cwm-stage-diagnose`) and by anything that reads
//! Parquet (pandas, polars, DuckDB, `cwm query`).
//!
//! One row per valid step of each game, in the order of `timesteps.parquet`:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `game_id` | utf8 | the example id |
//! | `t` | uint32 | the step: 0 is the start position, t the position after t plies |
//! | `token` | uint16 | the input token at t (`START` at t = 0, else the packed move id) |
//! | `move` | utf8, null at t = 0 | the UCI move that led to step t (null also for a token that is no move id) |
//! | `pred` | fixed_size_list<uint8, 75> | the argmax of each of the 75 labels |
//! | `target` | fixed_size_list<uint8, 75> | the true labels |
//! | `log_p_true` | float32 | Σ over the 75 labels of ln p(target label): the log of the true-state mass |
//! | `p_true` | fixed_size_list<float32, 75>, optional | p(target label), per label |
//! | `p_max` | fixed_size_list<float32, 75>, optional | p(argmax label), per label |
//! | `valid_mass` | float32, nullable, optional | E12: the share of states drawn from the 75 label distributions that reach V1 (null where the step was not sampled) |
//! | `afford_mass` | float32, nullable, optional | E12: the share of those states in which the game's next move is legal (null also at a game's last evaluated step) |
//!
//! `p_true` and `p_max` are present when the evaluate stage ran with `probabilities: true`;
//! `valid_mass` and `afford_mass` when it drew states (`mass_samples` > 0), at the steps it
//! sampled (`mass_steps`), with the number of states drawn per step under
//! [`MASS_SAMPLES_KEY`] in the key-value metadata.
//! The file's key-value metadata holds [`EP_CONVENTION_KEY`]: the en-passant convention of the
//! evaluated labels (`reference` or `legal_capture`), copied from the tokenize shards
//! (`reference` for reference JSONL input; absent only for shards that do not name one).
//!
//! `log_p_true` is minus the step's summed cross-entropy, i.e. 75 × the `loss` column of
//! `timesteps.parquet`, negated. In SQL (`cwm query`), list elements are 1-based: label `j`
//! of `pred` is `pred[j + 1]`.

/// The file name.
pub const PREDICTIONS_FILE: &str = "predictions.parquet";
/// The Parquet key-value metadata key naming the labels' en-passant convention.
pub const EP_CONVENTION_KEY: &str = "cwm.ep_convention";
/// The Parquet key-value metadata key holding the states drawn per sampled step (E12).
pub const MASS_SAMPLES_KEY: &str = "cwm.mass_samples";

/// Column names, in file order.
pub mod columns {
    /// The example id.
    pub const GAME_ID: &str = "game_id";
    /// The step.
    pub const T: &str = "t";
    /// The input token at the step.
    pub const TOKEN: &str = "token";
    /// The UCI move that led to the step (null at t = 0).
    pub const MOVE: &str = "move";
    /// The predicted (argmax) labels.
    pub const PRED: &str = "pred";
    /// The true labels.
    pub const TARGET: &str = "target";
    /// Σ ln p(target label).
    pub const LOG_P_TRUE: &str = "log_p_true";
    /// p(target label) per label (optional).
    pub const P_TRUE: &str = "p_true";
    /// p(argmax label) per label (optional).
    pub const P_MAX: &str = "p_max";
    /// The share of drawn states that reach V1 (optional, nullable).
    pub const VALID_MASS: &str = "valid_mass";
    /// The share of drawn states in which the next move is legal (optional, nullable).
    pub const AFFORD_MASS: &str = "afford_mass";
}

/// One row of `predictions.parquet`.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictionRow {
    /// The example id.
    pub game_id: String,
    /// The step.
    pub t: u32,
    /// The input token at the step.
    pub token: u16,
    /// The UCI move that led to the step (`None` at t = 0).
    pub uci: Option<String>,
    /// The predicted labels.
    pub pred: [u8; crate::labels::N_LABELS],
    /// The true labels.
    pub target: [u8; crate::labels::N_LABELS],
    /// Σ ln p(target label).
    pub log_p_true: f32,
    /// p(target label) per label, when written.
    pub p_true: Option<[f32; crate::labels::N_LABELS]>,
    /// p(argmax label) per label, when written.
    pub p_max: Option<[f32; crate::labels::N_LABELS]>,
    /// The valid mass, at a sampled step.
    pub valid_mass: Option<f32>,
    /// The afford mass, at a sampled step with a next move.
    pub afford_mass: Option<f32>,
}
