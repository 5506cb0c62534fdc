//! What a `novelty` artifact holds (written by `cwm-stage-diagnose`, read by diagnose and the report).
//!
//! A novelty artifact marks every step of a test split as seen or novel against one training
//! split (spec E7). It depends on the two splits only, never on a model: every model trained on
//! that split shares it, and the diagnose stage joins it with each model's predictions into
//! [`NoveltyMetrics`].
//!
//! * `summary.json` ([`SUMMARY_FILE`]): [`NoveltySummary`].
//! * `novelty.parquet` ([`NOVELTY_FILE`]): one row per test step, in the order of the test
//!   shards (games in shard order, steps `t = 0..=T` of each game), which is also the order of
//!   evaluate's `timesteps.parquet` and `predictions.parquet`. Its rows are [`NoveltyRow`]s:
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `game_id` | utf8 | the example id |
//! | `t` | uint32 | the step: 0 is the start position, t the position after t plies |
//! | `prefix_seen` | bool | the tokens `x_0..x_t` are the first `t + 1` tokens of some training game |
//! | `position_seen` | bool, nullable | the position after t plies (Key4: placement, side, castling, legal en-passant square) occurs at some training step; null when the game could not be replayed up to t |
//! | `state_seen` | bool | the 75 labels occur at some training step |
//! | `prefix_count` | uint64 | training games whose first `t + 1` tokens are these (one step per game) |
//! | `position_count` | uint64, nullable | training steps at this position (a game that reaches it twice counts twice) |
//! | `state_count` | uint64 | training steps with these 75 labels |
//! | `deviation_ply` | uint32, nullable | the game's `t_dev`: its first step whose prefix is unseen; null when every prefix of the game is seen |
//! | `plies_since_deviation` | int32, nullable | `t - t_dev`, negative while still in book; null when the game never deviates |

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the per-step table.
pub const NOVELTY_FILE: &str = "novelty.parquet";
/// The `kind` of a novelty summary.
pub const KIND: &str = "novelty";

fn kind() -> String {
    KIND.to_owned()
}

/// Column names of `novelty.parquet`, in file order.
pub mod columns {
    /// The example id.
    pub const GAME_ID: &str = "game_id";
    /// The step.
    pub const T: &str = "t";
    /// Whether the prefix `x_0..x_t` occurs in training.
    pub const PREFIX_SEEN: &str = "prefix_seen";
    /// Whether the position occurs in training (nullable).
    pub const POSITION_SEEN: &str = "position_seen";
    /// Whether the 75-label state occurs in training.
    pub const STATE_SEEN: &str = "state_seen";
    /// Training steps with the prefix.
    pub const PREFIX_COUNT: &str = "prefix_count";
    /// Training steps at the position (nullable).
    pub const POSITION_COUNT: &str = "position_count";
    /// Training steps with the state.
    pub const STATE_COUNT: &str = "state_count";
    /// The game's deviation ply (nullable).
    pub const DEVIATION_PLY: &str = "deviation_ply";
    /// `t` minus the deviation ply (nullable).
    pub const PLIES_SINCE_DEVIATION: &str = "plies_since_deviation";
}

/// One row of `novelty.parquet`: one test step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoveltyRow {
    /// The example id.
    pub game_id: String,
    /// The step.
    pub t: u32,
    /// Whether the prefix `x_0..x_t` occurs in training (`prefix_count > 0`).
    pub prefix_seen: bool,
    /// Whether the position occurs in training; `None` when the game could not be replayed up
    /// to this step (a token illegal in the replayed position, counted in
    /// [`NoveltySummary::bad_games`]).
    pub position_seen: Option<bool>,
    /// Whether the 75 labels occur in training (`state_count > 0`).
    pub state_seen: bool,
    /// Training steps with this prefix.
    pub prefix_count: u64,
    /// Training steps at this position (`None` as for `position_seen`).
    pub position_count: Option<u64>,
    /// Training steps with these 75 labels.
    pub state_count: u64,
    /// The game's first step whose prefix is unseen; `None` when the whole game is seen.
    pub deviation_ply: Option<u32>,
    /// `t - deviation_ply` (negative while in book); `None` when the game never deviates.
    pub plies_since_deviation: Option<i32>,
}

/// Which of the three E7 strata a step falls in (see [`NoveltyRow::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoveltyClass {
    /// The prefix occurs in training (so, for legal games, the position does too).
    PrefixSeen,
    /// The prefix is unseen but the position occurs in training (a transposition).
    PositionSeen,
    /// The position does not occur in training.
    Novel,
}

impl NoveltyRow {
    /// The step's stratum: prefix seen; else position seen; else novel. `None` when the
    /// prefix is unseen and the position unknown (a game that could not be replayed).
    pub fn class(&self) -> Option<NoveltyClass> {
        match (self.prefix_seen, self.position_seen) {
            (true, _) => Some(NoveltyClass::PrefixSeen),
            (false, Some(true)) => Some(NoveltyClass::PositionSeen),
            (false, Some(false)) => Some(NoveltyClass::Novel),
            (false, None) => None,
        }
    }
}

/// `summary.json` of a novelty artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoveltySummary {
    /// The format version ([`NoveltySummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The test (tokenize) artifact's hash, or null.
    #[serde(default)]
    pub test_hash: Option<String>,
    /// The training (tokenize) artifact's hash, or null.
    #[serde(default)]
    pub train_hash: Option<String>,
    /// The en-passant convention of the test shards' labels (their `cwm.ep_convention`
    /// metadata), or null when the shards do not say. State keys compare labels, so they match
    /// across splits only under one convention.
    #[serde(default)]
    pub test_ep_convention: Option<String>,
    /// The en-passant convention of the training shards' labels, or null.
    #[serde(default)]
    pub train_ep_convention: Option<String>,
    /// The cap on scanned training games (0 = none).
    pub max_train_games: u64,
    /// Training games scanned.
    pub train_games: u64,
    /// Training steps scanned (Σ over games of plies + 1).
    pub train_steps: u64,
    /// The 99th percentile of the scanned training games' lengths in plies (nearest rank:
    /// the smallest length L such that at least 99% of the games have at most L plies; 0
    /// without games).
    pub train_length_p99: u32,
    /// Test games.
    pub test_games: u64,
    /// Test steps (Σ over games of plies + 1): the rows of `novelty.parquet`.
    pub test_steps: u64,
    /// Distinct keys among the test steps.
    pub distinct_test_keys: KeyCounts,
    /// Test steps whose prefix is seen.
    pub prefix_seen_steps: u64,
    /// Test steps whose position is seen.
    pub position_seen_steps: u64,
    /// Test steps whose position is unknown (games that could not be replayed).
    pub position_unknown_steps: u64,
    /// Test steps whose state is seen.
    pub state_seen_steps: u64,
    /// `prefix_seen_steps / test_steps` (0 without steps).
    pub prefix_seen_share: f64,
    /// `position_seen_steps / test_steps` (0 without steps; unknown positions count as unseen).
    pub position_seen_share: f64,
    /// `state_seen_steps / test_steps` (0 without steps).
    pub state_seen_share: f64,
    /// The distribution of the test games' deviation plies.
    pub deviation: DeviationStats,
    /// Games whose tokens could not be replayed.
    pub bad_games: BadGames,
}

impl Versioned for NoveltySummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// Distinct keys of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCounts {
    /// Distinct prefixes.
    pub prefixes: u64,
    /// Distinct positions.
    pub positions: u64,
    /// Distinct 75-label states.
    pub states: u64,
}

/// The distribution of `t_dev` over the test games.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviationStats {
    /// Test games that deviate (some prefix unseen).
    pub games: u64,
    /// Test games every prefix of which is seen.
    pub never: u64,
    /// The mean `t_dev` over the deviating games, or null without any.
    pub mean: Option<f64>,
    /// Quantiles of `t_dev` over the deviating games (nearest rank: the smallest value with at
    /// least a share `q` of the games at or below it), for q = 0.1, 0.25, 0.5, 0.75, 0.9, 0.99;
    /// empty without deviating games.
    pub quantiles: Vec<PlyQuantile>,
    /// Deviating games per `t_dev`: one bin per ply up to 29, then 30–39, 40–49, 50–99 and
    /// ≥ 100 (empty bins included, so the bins tile 0..∞).
    pub histogram: Vec<PlyBin>,
}

/// One quantile of a ply distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlyQuantile {
    /// The share q.
    pub q: f64,
    /// The value.
    pub ply: u32,
}

/// One histogram bin of plies, `from ≤ ply ≤ to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlyBin {
    /// First ply of the bin.
    pub from: u32,
    /// Last ply of the bin; null for the open last bin.
    pub to: Option<u32>,
    /// Games in the bin.
    pub games: u64,
}

/// Games whose tokens could not be replayed: the first token is not `START`, or a later one is
/// not a legal move in the replayed position. Such a game keeps its prefix and state keys; its
/// position keys end at the bad token (its rows from there on have null `position_seen`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadGames {
    /// Bad test games.
    pub test: u64,
    /// Bad training games.
    pub train: u64,
    /// The first few of them (at most [`BadGames::MAX_EXAMPLES`]), test games first.
    pub examples: Vec<BadGame>,
}

impl BadGames {
    /// How many bad games [`BadGames::examples`] keeps.
    pub const MAX_EXAMPLES: usize = 20;
}

/// One game that could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadGame {
    /// `test` or `train`.
    pub input: String,
    /// The example id.
    pub game_id: String,
    /// The step of the bad token.
    pub t: u32,
    /// The bad token.
    pub token: u16,
}

/// The per-model E7 metrics: a model's per-step results joined with a novelty table
/// (computed by `cwm_stage_diagnose::novelty_metrics`, embedded in the diagnose summary, whose
/// version covers it).
///
/// Strata (see [`NoveltyClass`]): *prefix seen*; *position seen* (prefix unseen, position
/// seen); *novel* (position unseen). Rates are `None` for empty cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoveltyMetrics {
    /// Joined steps.
    pub steps: u64,
    /// Joined games.
    pub games: u64,
    /// Joined steps whose prefix is seen.
    pub prefix_seen_steps: u64,
    /// Joined steps whose position is seen.
    pub position_seen_steps: u64,
    /// Joined steps whose state is seen.
    pub state_seen_steps: u64,
    /// Joined steps in no stratum (prefix unseen, position unknown).
    pub unclassified_steps: u64,
    /// Coverage: `prefix_seen_steps / steps` (`None` without steps).
    pub prefix_seen_share: Option<f64>,
    /// Coverage: `position_seen_steps / steps`.
    pub position_seen_share: Option<f64>,
    /// Coverage: `state_seen_steps / steps`.
    pub state_seen_share: Option<f64>,
    /// The width of the ply bins of [`NoveltyMetrics::by_ply`].
    pub bin_width: u32,
    /// The three strata within each ply bin, from `t = 0` to the last bin with a step (empty
    /// bins in between included).
    pub by_ply: Vec<NoveltyPlyBin>,
    /// ExactState by plies since deviation: `<0` (still in book), `0`, `1-4`, `5-9`, `10-19`,
    /// `20-49`, `>=50`, and `never` (games that never deviate), in that order.
    pub by_plies_since_deviation: Vec<ExactBin>,
    /// ExactState by the position's training count, in bins of log10(count + 1): `0`, `1`,
    /// `2-9`, `10-99`, `100-999`, `>=1000` (steps with an unknown position are left out).
    pub by_position_count: Vec<ExactBin>,
    /// The seen/novel ExactState gap: Σ_b n_b · (E_seen,b − E_novel,b) / Σ_b n_b over the ply
    /// bins b holding both position-seen steps (prefix seen or position seen) and novel steps,
    /// with n_b the novel steps of bin b and E the ExactState of the stratum. Positive when the
    /// model is better on positions it saw; `None` when no bin holds both.
    pub seen_novel_gap: Option<f64>,
    /// Σ_b n_b of the gap: the novel steps it weighs.
    pub gap_weight: u64,
}

/// One ply bin `from ≤ t ≤ to` of [`NoveltyMetrics::by_ply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoveltyPlyBin {
    /// First step of the bin.
    pub from: u32,
    /// Last step of the bin.
    pub to: u32,
    /// Steps whose prefix is seen.
    pub prefix_seen: NoveltyCell,
    /// Steps whose prefix is unseen but whose position is seen.
    pub position_seen: NoveltyCell,
    /// Steps whose position is unseen.
    pub novel: NoveltyCell,
}

/// The metrics of one stratum of one ply bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoveltyCell {
    /// Steps.
    pub n: u64,
    /// Steps whose predicted state is exact.
    pub exact: u64,
    /// `exact / n`.
    pub exact_state: Option<f64>,
    /// The mean labelwise accuracy.
    pub labelwise: Option<f64>,
    /// Steps whose E1 V1 verdict is known.
    pub v1_n: u64,
    /// Those passing V1 (a valid position).
    pub v1_pass: u64,
    /// `v1_pass / v1_n`.
    pub v1_rate: Option<f64>,
}

/// ExactState over the steps of one labelled bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExactBin {
    /// The bin, as printed (`1-4`, `>=1000`, ...).
    pub label: String,
    /// Steps.
    pub n: u64,
    /// Exact steps.
    pub exact: u64,
    /// `exact / n`.
    pub exact_state: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::round_trip;

    fn summary() -> NoveltySummary {
        NoveltySummary {
            version: NoveltySummary::VERSION,
            kind: KIND.into(),
            test_hash: Some("t".into()),
            train_hash: None,
            test_ep_convention: Some("reference".into()),
            train_ep_convention: Some("reference".into()),
            max_train_games: 0,
            train_games: 3,
            train_steps: 120,
            train_length_p99: 61,
            test_games: 2,
            test_steps: 80,
            distinct_test_keys: KeyCounts {
                prefixes: 79,
                positions: 75,
                states: 79,
            },
            prefix_seen_steps: 14,
            position_seen_steps: 16,
            position_unknown_steps: 0,
            state_seen_steps: 15,
            prefix_seen_share: 0.175,
            position_seen_share: 0.2,
            state_seen_share: 0.1875,
            deviation: DeviationStats {
                games: 2,
                never: 0,
                mean: Some(7.0),
                quantiles: vec![PlyQuantile { q: 0.5, ply: 7 }],
                histogram: vec![PlyBin {
                    from: 100,
                    to: None,
                    games: 0,
                }],
            },
            bad_games: BadGames {
                test: 0,
                train: 1,
                examples: vec![BadGame {
                    input: "train".into(),
                    game_id: "g".into(),
                    t: 3,
                    token: 20481,
                }],
            },
        }
    }

    #[test]
    fn novelty_summary_round_trips() {
        round_trip(&summary());
    }

    #[test]
    fn a_row_falls_in_one_stratum() {
        let mut row = NoveltyRow {
            game_id: "g".into(),
            t: 3,
            prefix_seen: true,
            position_seen: Some(true),
            state_seen: true,
            prefix_count: 2,
            position_count: Some(2),
            state_count: 2,
            deviation_ply: Some(5),
            plies_since_deviation: Some(-2),
        };
        assert_eq!(row.class(), Some(NoveltyClass::PrefixSeen));
        row.prefix_seen = false;
        assert_eq!(row.class(), Some(NoveltyClass::PositionSeen));
        row.position_seen = Some(false);
        assert_eq!(row.class(), Some(NoveltyClass::Novel));
        row.position_seen = None;
        assert_eq!(row.class(), None);
    }

    #[test]
    fn metrics_serialize_absent_rates_as_null() {
        let cell = NoveltyCell {
            n: 0,
            exact: 0,
            exact_state: None,
            labelwise: None,
            v1_n: 0,
            v1_pass: 0,
            v1_rate: None,
        };
        let text = serde_json::to_string(&cell).unwrap();
        assert!(text.contains("\"exact_state\":null"), "{text}");
        let back: NoveltyCell = serde_json::from_str(&text).unwrap();
        assert_eq!(back, cell);
    }
}
