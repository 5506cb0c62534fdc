//! What an `evaluate` artifact holds: the metrics (`summary.json`), written by the evaluate
//! stage and `cwm evaluate` (`cwm-stage-evaluate`), read by `bin_prefix` and the report; and
//! the rows of its per-step and per-game tables (`timesteps.parquet`, `games.parquet`), whose
//! Parquet schemas live with their writer (`cwm_stage_evaluate::tables`).

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the metrics.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the per-step table.
pub const TIMESTEPS_FILE: &str = "timesteps.parquet";
/// The file name of the per-game table.
pub const GAMES_FILE: &str = "games.parquet";
/// The `kind` of an evaluate summary.
pub const KIND: &str = "evaluate";

fn kind() -> String {
    KIND.to_owned()
}

/// `summary.json` of an evaluate artifact: spec A.5's micro-averages over the evaluated games.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateSummary {
    /// The format version ([`EvaluateSummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The split label.
    pub split: String,
    /// The model family's canonical name.
    pub arch: String,
    /// The model size's canonical name (`d128`, ...).
    pub size: String,
    /// The model's parameter count.
    pub params: u64,
    /// The model artifact's hash, or null.
    #[serde(default)]
    pub model_hash: Option<String>,
    /// The data artifact's hash, or null.
    #[serde(default)]
    pub data_hash: Option<String>,
    /// Games evaluated.
    pub games: u64,
    /// Valid steps evaluated (t = 0 included).
    pub steps: u64,
    /// Σ cross-entropy / (75 · steps): the reference's `loss`. Infinite or NaN when the model
    /// diverged, written as `"inf"` or `"NaN"` ([`crate::float`]).
    #[serde(with = "crate::float")]
    pub loss: f64,
    /// Mean fraction of correct labels over valid steps (`partial_exact`).
    pub labelwise: f64,
    /// Fraction of valid steps with all 75 labels right (`full_exact`).
    pub exact_state: f64,
    /// Fraction of games with every step exact (`game_exact`).
    pub trajectory: f64,
    /// Games with every step exact (`game_exact_num`; 0 when absent).
    #[serde(default)]
    pub exact_games: u64,
    /// The truncation used (0 = none, also when absent).
    #[serde(default)]
    pub max_steps: u64,
    /// E12's sampled masses, when the stage drew states (`null` when it did not, and in
    /// summaries written before they existed).
    #[serde(default)]
    pub sampled_mass: Option<SampledMassSummary>,
}

/// What the evaluate stage's draws of states found (beyond-spec E12): plain means over the
/// sampled steps. The diagnose stage gives the same means with intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledMassSummary {
    /// States drawn per sampled step.
    pub samples: u32,
    /// The sampling's seed.
    pub seed: u64,
    /// Steps sampled.
    pub steps: u64,
    /// Mean share of drawn states that reach V1 (`null` without sampled steps).
    pub valid_mass: Option<f64>,
    /// Sampled steps with a next move.
    pub steps_with_next_move: u64,
    /// Mean share of drawn states in which the next move is legal, over those steps.
    pub afford_mass: Option<f64>,
}

impl Versioned for EvaluateSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// One evaluated step of one game: a row of `timesteps.parquet` (columns `game_id` utf8, `t`
/// u32, `n_correct` u8, `board` u8, `side` bool, `castling` u8, `en_passant` u8, `halfmove`
/// u8, `fullmove` u8, `exact` bool (`n_correct` = 75), `loss` f32).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRow {
    /// Step index, 0 being the start position.
    pub t: u32,
    /// Labels (of 75) whose argmax equals the target.
    pub n_correct: u8,
    /// Correct square labels (of 64).
    pub board: u8,
    /// Whether the side-to-move label is correct.
    pub side: bool,
    /// Correct castling-right labels (of 4).
    pub castling: u8,
    /// Correct en-passant labels, file and rank (of 2).
    pub en_passant: u8,
    /// Correct halfmove-clock bytes (of 2).
    pub halfmove: u8,
    /// Correct fullmove-number bytes (of 2).
    pub fullmove: u8,
    /// The step's cross-entropy summed over the 75 labels, divided by 75.
    pub loss: f32,
}

/// One evaluated game: a row of `games.parquet` (columns `game_id` utf8, `plies` u32, `steps`
/// u32, `exact_steps` u32, `all_exact` bool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GameRow {
    /// The example id.
    pub game_id: String,
    /// Plies of the game as stored (before any `max_steps` truncation).
    pub plies: u32,
    /// Steps evaluated (`plies + 1`, or `max_steps` when truncated).
    pub steps: u32,
    /// Evaluated steps with all 75 labels right.
    pub exact_steps: u32,
    /// Whether every evaluated step was exact (the trajectory's exactness).
    pub all_exact: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    fn summary() -> EvaluateSummary {
        EvaluateSummary {
            version: EvaluateSummary::VERSION,
            kind: KIND.into(),
            split: "test_real".into(),
            arch: "slice".into(),
            size: "d128".into(),
            params: 3_144_662,
            model_hash: Some("m".into()),
            data_hash: None,
            games: 42,
            steps: 3_000,
            loss: 0.125,
            labelwise: 0.96875,
            exact_state: 0.5,
            trajectory: 0.0,
            exact_games: 0,
            max_steps: 0,
            sampled_mass: Some(SampledMassSummary {
                samples: 64,
                seed: 0,
                steps: 100,
                valid_mass: Some(0.75),
                steps_with_next_move: 99,
                afford_mass: None,
            }),
        }
    }

    #[test]
    fn evaluate_summary_round_trips() {
        round_trip(&summary());
    }

    /// A `summary.json` as the evaluate stage wrote it before formats were versioned, and one
    /// from before `exact_games` and `max_steps` were recorded (both before the sampled masses).
    #[test]
    fn evaluate_summary_of_today_reads() {
        let before_masses = EvaluateSummary {
            sampled_mass: None,
            ..summary()
        };
        let dir = scratch("evaluate");
        let path = dir.join(SUMMARY_FILE);
        std::fs::write(
            &path,
            r#"{
  "kind": "evaluate",
  "split": "test_real",
  "arch": "slice",
  "size": "d128",
  "params": 3144662,
  "model_hash": "m",
  "data_hash": null,
  "games": 42,
  "steps": 3000,
  "loss": 0.125,
  "labelwise": 0.96875,
  "exact_state": 0.5,
  "trajectory": 0.0,
  "exact_games": 0,
  "max_steps": 0
}
"#,
        )
        .unwrap();
        assert_eq!(
            crate::read_json::<EvaluateSummary>(&path).unwrap(),
            before_masses
        );
        std::fs::write(
            &path,
            r#"{"kind": "evaluate", "split": "test_real", "arch": "slice", "size": "d128",
                "params": 3144662, "model_hash": "m", "games": 42, "steps": 3000,
                "loss": 0.125, "labelwise": 0.96875, "exact_state": 0.5, "trajectory": 0}"#,
        )
        .unwrap();
        assert_eq!(
            crate::read_json::<EvaluateSummary>(&path).unwrap(),
            before_masses
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
