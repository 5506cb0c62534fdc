//! What a `diagnose` artifact holds (written by `cwm-stage-diagnose`, read by the report):
//! `summary.json`, the measures E1–E5 and E12 of the beyond-the-paper specification over one
//! evaluate artifact's predictions, and `steps.parquet`, one row per step (its schema lives
//! with its writer, `cwm_stage_diagnose::diagnose::steps`).
//!
//! Every proportion is a [`Rate`]: its numerator, its denominator `n`, the value and a 95%
//! interval, with the interval's method ([`Interval`]): a game-level bootstrap for rates over
//! steps (steps of one game are correlated), Wilson for rates over games or events. A rate
//! whose `n` is below [`MIN_N`] is still written, with [`Rate::low_n`] set, so that the
//! report prints `–` for it. A value that is not defined (an empty denominator) is `null`,
//! never NaN.

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the per-step table.
pub const STEPS_FILE: &str = "steps.parquet";
/// The `kind` of a diagnose summary.
pub const KIND: &str = "diagnose";
/// Rates over fewer than this many steps, games or events are flagged [`Rate::low_n`].
pub const MIN_N: u64 = 30;

fn kind() -> String {
    KIND.to_owned()
}

fn one() -> u32 {
    1
}

/// How a rate's interval was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interval {
    /// Percentile interval of a game-level bootstrap (resamples of games with replacement).
    Bootstrap,
    /// Wilson score interval (rates over games or events).
    Wilson,
    /// No interval (the bootstrap was switched off, or the value is not a proportion).
    None,
}

/// A proportion (or a mean of per-step values in 0..=1) with its denominator and interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// The numerator: a count, or a sum of per-step values for a mean.
    pub num: f64,
    /// The denominator: steps, games, events or squares, as the field's doc says.
    pub n: u64,
    /// `scale · num / n`; `null` when `n` is 0.
    pub value: Option<f64>,
    /// Lower end of the 95% interval (on the same scale), when there is one.
    pub lo: Option<f64>,
    /// Upper end of the 95% interval, when there is one.
    pub hi: Option<f64>,
    /// How the interval was computed.
    pub interval: Interval,
    /// `n` < [`MIN_N`]: the report prints `–`.
    pub low_n: bool,
    /// The unit: 1 for a proportion, 1000 for a rate per 1,000 steps or plies (1 when
    /// absent).
    #[serde(default = "one")]
    pub scale: u32,
}

/// A ratio of two rates that is not itself a proportion (a lift), with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// The ratio; `null` when its denominator is 0.
    pub value: Option<f64>,
    /// Lower end of the 95% interval, when there is one.
    pub lo: Option<f64>,
    /// Upper end of the 95% interval, when there is one.
    pub hi: Option<f64>,
    /// How the interval was computed.
    pub interval: Interval,
    /// The number of events the ratio rests on (tagged steps, first errors).
    pub n: u64,
    /// `n` < [`MIN_N`].
    pub low_n: bool,
}

/// A named count, one bar of a distribution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountBin {
    /// The bin's label (`"1"`, `"2-4"`, `">=50"`, ...).
    pub bin: String,
    /// How many fall in it.
    pub count: u64,
}

/// A rate within one prefix bin: the steps `start ≤ t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BinRate {
    /// Bin index `k`.
    pub bin: u32,
    /// First step of the bin.
    pub start: u32,
    /// One past the last step of the bin.
    pub end: u32,
    /// The rate over the bin's steps.
    pub rate: Rate,
}

/// A named rate (a flag, a label group, a value bin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedRate {
    /// The name.
    pub name: String,
    /// The rate.
    pub rate: Rate,
}

/// A game that was counted and left out of every measure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedGame {
    /// The example id.
    pub game_id: String,
    /// Why, with the step.
    pub reason: String,
}

/// `summary.json` of a diagnose artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnoseSummary {
    /// The format version ([`DiagnoseSummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The split label, from the evaluate summary.
    pub split: String,
    /// The model family, from the evaluate summary.
    pub arch: String,
    /// The model size, from the evaluate summary.
    pub size: String,
    /// The evaluate artifact's hash, or null.
    #[serde(default)]
    pub evaluate_hash: Option<String>,
    /// The model artifact's hash, from the evaluate summary.
    #[serde(default)]
    pub model_hash: Option<String>,
    /// The data artifact's hash, from the evaluate summary.
    #[serde(default)]
    pub data_hash: Option<String>,
    /// The en-passant convention of the labels (`reference` or `legal_capture`), from the
    /// predictions' metadata.
    pub ep_convention: String,
    /// Games measured (skipped games excluded).
    pub games: u64,
    /// Steps measured (t = 0 included).
    pub steps: u64,
    /// Games left out (tokens illegal for the rules engine, labels that disagree with the
    /// replay), with the reason.
    pub skipped: Vec<SkippedGame>,
    /// The prefix bin width.
    pub bin: u32,
    /// Bootstrap resamples (0 = no bootstrap intervals).
    pub bootstrap: u32,
    /// The bootstrap's seed.
    pub seed: u64,
    /// E1: the validity hierarchy.
    pub validity: Validity,
    /// E2: fields, positions and pieces.
    pub fields: Fields,
    /// E3: legal-move sets and rule queries.
    pub affordance: Affordance,
    /// E4: transitions, invariants and error dynamics.
    pub dynamics: Dynamics,
    /// E5: rare events, first errors and staleness.
    pub events: Events,
    /// E12: probability mass.
    pub mass: Mass,
    /// E6: ExactState by plies since the switch, one curve per switch ply, for the
    /// real-prefix/random-continuation games among the predictions (ids ending `~k<k>`); empty
    /// when there are none, and in summaries written before it existed.
    #[serde(default)]
    pub since_switch: Vec<SwitchCurve>,
    /// E7: the per-model seen/novel metrics, when the stage had a `novelty` input (computed
    /// by the novelty stage's join of this model's steps with the novelty table).
    #[serde(default)]
    pub novelty: Option<crate::novelty::NoveltyMetrics>,
}

impl Versioned for DiagnoseSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// E1: the validity hierarchy of the predicted states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validity {
    /// Cumulative tier shares: `tiers[k]` is the share of steps whose tier is at least `Vk`
    /// (k = 0..=5; V5 = ExactState). V4 (the game's next move is legal in the believed
    /// position) is defined for t < T only, so `tiers[4]` is over those steps and the others
    /// over all steps (at t = T the V4 check counts as passed for the per-step tier).
    pub tiers: Vec<Rate>,
    /// Per flag (the 14 python-chess `Board.status()` flags, lower case, then the two V0
    /// failures `ep_half_set` and `fullmove_zero` and the V2 and V3 failures
    /// `counters_inconsistent` and `prefix_inconsistent`): the share of all steps on which it
    /// fires.
    pub flags: Vec<NamedRate>,
    /// Per flag: the share of non-exact steps on which it fires.
    pub flags_non_exact: Vec<NamedRate>,
    /// `TOO_MUCH_MATERIAL` (shakmaty only, not part of V1) over all steps.
    pub too_much_material: Rate,
    /// `STEPPER_DOUBLE_CHECK` (shakmaty only, not part of V1) over all steps.
    pub stepper_double_check: Rate,
    /// Plausible-error share: P(V1 passes | not exact).
    pub plausible_error_share: Rate,
    /// V1 pass rate per prefix bin.
    pub v1_by_bin: Vec<BinRate>,
    /// Share of games with at least one step failing V1 (Wilson).
    pub games_with_v1_failure: Rate,
}

/// Counter accuracy within one bin of the counter's true value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterBin {
    /// The bin of true values (`"0"`, `"1-9"`, ...).
    pub bin: String,
    /// The high byte right.
    pub hi: Rate,
    /// The low byte right.
    pub lo: Rate,
    /// Both bytes right.
    pub both: Rate,
}

/// A histogram of signed counter errors `pred − true` (on the 16-bit values), clamped to
/// `min..=max`: `counts[i]` counts the errors equal to `min + i` (the ends hold everything
/// beyond them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorHistogram {
    /// The lowest error (clamped to).
    pub min: i32,
    /// The highest error (clamped to).
    pub max: i32,
    /// Counts per error value, `max − min + 1` of them.
    pub counts: Vec<u64>,
}

/// E2: field-level, position-level and piece-level accuracy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fields {
    /// FieldExact(placement): all 64 squares right.
    pub placement: Rate,
    /// FieldExact(side).
    pub side: Rate,
    /// FieldExact(castling): the four rights right.
    pub castling: Rate,
    /// FieldExact(en passant): file and rank right.
    pub en_passant: Rate,
    /// FieldExact(halfmove): both bytes right.
    pub halfmove: Rate,
    /// FieldExact(fullmove): both bytes right.
    pub fullmove: Rate,
    /// PositionExact: `Key4` (labels 0..=70, under the data's convention) right.
    pub position_exact: Rate,
    /// ExactState: all 75 labels right.
    pub exact_state: Rate,
    /// Counter-only error share: P(PositionExact | not exact).
    pub counter_only_error_share: Rate,
    /// Halfmove-clock accuracy by true value: `0`, `1-9`, `10-49`, `50-99`, `>=100`.
    pub halfmove_by_value: Vec<CounterBin>,
    /// Fullmove-number accuracy by true value: `1-63`, `64-127`, `128-255`, `>=256`.
    pub fullmove_by_value: Vec<CounterBin>,
    /// Signed halfmove-clock errors over all steps.
    pub halfmove_error: ErrorHistogram,
    /// Signed fullmove-number errors over all steps.
    pub fullmove_error: ErrorHistogram,
    /// Phantom rate: wrong among the squares predicted non-empty (n = squares predicted
    /// non-empty).
    pub phantom_rate: Rate,
    /// Omission rate: predicted empty among the truly occupied squares.
    pub omission_rate: Rate,
    /// Misidentification rate: a different piece among the truly occupied squares.
    pub misidentification_rate: Rate,
    /// The 13 × 13 confusion matrix of square labels over all steps: `confusion[true][pred]`,
    /// classes 0 empty, 1–6 P N B R Q K, 7–12 p n b r q k (counts; the report normalises
    /// rows).
    pub confusion: Vec<Vec<u64>>,
    /// Wrong squares per non-exact step: `0` (only non-square labels wrong), `1`, `2`,
    /// `3-4`, `>=5`.
    pub wrong_squares: Vec<CountBin>,
}

/// A mean of per-step values, strict (an unplayable prediction scores 0) and over the steps
/// whose prediction is playable only.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StrictAndDefined {
    /// Over all steps, 0 where the prediction is unplayable.
    pub strict: Rate,
    /// Over the steps whose prediction is playable.
    pub defined: Rate,
}

/// E3: legal-move-set agreement and rule queries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Affordance {
    /// Mean IoU of the legal-move sets.
    pub iou: StrictAndDefined,
    /// Mean precision `|L̂ ∩ L| / |L̂|`.
    pub precision: StrictAndDefined,
    /// Mean recall `|L̂ ∩ L| / |L|`.
    pub recall: StrictAndDefined,
    /// LegalSetExact: `L̂ = L`.
    pub legal_set_exact: StrictAndDefined,
    /// Coverage: the share of steps whose prediction is playable.
    pub coverage: Rate,
    /// Per-piece IoU: the mean over the true side's pieces of the IoU of their moves (the
    /// step's mean, averaged over steps).
    pub per_piece_iou: StrictAndDefined,
    /// Silent-error share: P(LegalSetExact | not exact), strict.
    pub silent_error_share: Rate,
    /// Exact match of the in-check flag (strict).
    pub in_check: Rate,
    /// Exact match of the set of checking pieces (strict).
    pub checkers: Rate,
    /// Exact match of the set of check-giving legal moves (strict).
    pub check_giving: Rate,
    /// Exact match of the set of absolute pins (strict).
    pub pins: Rate,
    /// Strict mean IoU per prefix bin.
    pub iou_by_bin: Vec<BinRate>,
    /// ExactState per prefix bin.
    pub exact_by_bin: Vec<BinRate>,
}

/// Belief-rollout outcomes `i` plies after an error starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RolloutStep {
    /// Plies after the first step of the error run.
    pub i: u32,
    /// The prediction is the true state.
    pub recovered: Rate,
    /// The prediction is the believed state replayed with the true moves.
    pub coherent: Rate,
    /// Neither.
    pub neither: Rate,
}

/// One invariant over consecutive predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invariant {
    /// `I1` .. `I7`.
    pub id: String,
    /// What it checks.
    pub name: String,
    /// Violations per 1,000 steps with t ≥ 1 (`scale` 1000).
    pub violations: Rate,
}

/// Lengths of runs of consecutive non-exact steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRuns {
    /// Runs.
    pub runs: u64,
    /// Runs that last to the game's last step (not recovered within the game).
    pub unrecovered: u64,
    /// Runs by length: `1`, `2-4`, `5-9`, `10-49`, `>=50`.
    pub lengths: Vec<CountBin>,
    /// Mean run length; `null` without runs.
    pub mean: Option<f64>,
}

/// E4: transition consistency, next-move affordance, invariants, error dynamics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dynamics {
    /// NextMoveAfforded: the game's next move is legal in the believed position (t < T).
    pub next_move_afforded: Rate,
    /// TransitionConsistent: the prediction is the previous prediction with the move played
    /// (t ≥ 1).
    pub transition_consistent: Rate,
    /// TransitionConsistent given a non-exact previous prediction.
    pub tc_given_prev_wrong: Rate,
    /// TransitionConsistent given an exact previous prediction.
    pub tc_given_prev_exact: Rate,
    /// Belief rollout from the first step of every error run, for i = 1..=10 (Wilson, n =
    /// runs whose game lasts i more plies).
    pub rollout: Vec<RolloutStep>,
    /// I1–I7 violations.
    pub invariants: Vec<Invariant>,
    /// Recovery rate: P(exact at t+1 | not exact at t).
    pub recovery_rate: Rate,
    /// Error runs.
    pub error_runs: ErrorRuns,
    /// Share of games with an error that are never exact again after their first error
    /// (Wilson).
    pub never_recover: Rate,
}

/// The measures of one event tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagStats {
    /// The tag's name.
    pub tag: String,
    /// Tagged steps.
    pub n: u64,
    /// Tagged steps per 1,000 plies (`scale` 1000; n = plies).
    pub per_1000: Rate,
    /// ExactState at the tagged steps.
    pub exact_state: Rate,
    /// Relevant-label accuracy: every label of the move's footprint and the tag's relevant
    /// labels right.
    pub relevant_accuracy: Rate,
    /// Aftershock: ExactState `k` plies after the tagged step, k = 1..=5.
    pub aftershock: Vec<Rate>,
    /// Ply-matched lift: the error rate at tagged steps over the error rate of untagged steps
    /// of the same prefix bin, weighted by the tagged steps' bins.
    pub lift: Ratio,
}

/// First-error attribution of one tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstErrorTag {
    /// The tag's name.
    pub tag: String,
    /// Share of first errors carrying the tag (Wilson).
    pub share: Rate,
    /// The share over the tag's base rate in the first errors' prefix bins.
    pub lift: Ratio,
}

/// First errors: each game's first non-exact step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstErrors {
    /// Games with a non-exact step.
    pub n: u64,
    /// Per tag.
    pub tags: Vec<FirstErrorTag>,
    /// Per label group (E2's six fields): the share of first errors where it is wrong
    /// (Wilson).
    pub groups_wrong: Vec<NamedRate>,
}

/// E5: rare events, first-error attribution and long-range memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Events {
    /// The `long_game` threshold: steps with t above it are tagged; `null` when no threshold
    /// was given (no `long_game` tag).
    pub long_game_ply: Option<u32>,
    /// Per tag, in the tagger's bit order (tag `e` is bit `e` of the `tags` column of
    /// `steps.parquet`), `long_game` among them (with n = 0 when `long_game_ply` is null).
    pub tags: Vec<TagStats>,
    /// First-error attribution.
    pub first_errors: FirstErrors,
    /// Square accuracy by staleness (plies since the square's true label last changed):
    /// `0`, `1-9`, `10-49`, `50-99`, `100-199`, `>=200`.
    pub staleness: Vec<NamedRate>,
    /// Castling-label accuracy by plies since the right was lost (the steps after a true
    /// right went from 1 to 0, with the four rights pooled), in the staleness bins; empty in
    /// summaries written before it existed.
    #[serde(default)]
    pub castling_since_lost: Vec<NamedRate>,
    /// Identity accuracy of promoted pieces (the square label right at every step where a
    /// piece that arrived by promotion stands, the promotion step included), by the piece:
    /// `queen`, `rook`, `bishop`, `knight`; empty in summaries written before it existed.
    #[serde(default)]
    pub promoted_identity: Vec<NamedRate>,
}

/// E6: ExactState by plies since the switch ply `k` of the games continued after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchCurve {
    /// The switch ply `k`.
    pub prefix_plies: u32,
    /// Games continued after `k`.
    pub games: u64,
    /// Bins of [`SWITCH_BIN`] plies of `t − k`, in order: negative ones over the real prefix.
    pub bins: Vec<SwitchBin>,
}

/// The width, in plies, of a [`SwitchBin`].
pub const SWITCH_BIN: i64 = 10;

/// The steps `start <= t − k < end` of a [`SwitchCurve`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwitchBin {
    /// First ply since the switch (negative: before it).
    pub start: i64,
    /// One past the last.
    pub end: i64,
    /// Steps.
    pub n: u64,
    /// Exact steps.
    pub exact: u64,
    /// `exact / n`; `null` without steps.
    pub exact_state: Option<f64>,
}

/// E12: probability mass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mass {
    /// Steps with a finite `log_p_true`.
    pub steps: u64,
    /// Median true-state mass `exp(log_p_true)` (to 10 significant bits of `−log_p_true`);
    /// `null` without steps.
    pub median_true_mass: Option<f64>,
    /// Share of steps whose true-state mass is above 0.5.
    pub true_mass_above_half: Rate,
    /// True-state mass in 20 equal bins over 0..=1 (the last one closed).
    pub true_mass_histogram: Vec<u64>,
    /// Overconfident-error rate: non-exact steps whose every label has `p_max` > 0.99, over
    /// the non-exact steps; `null` without `p_max`.
    pub overconfident_error_rate: Option<Rate>,
    /// AUROC of `1 − min_j p_max` for telling non-exact steps from exact ones; `null` without
    /// `p_max` or without both kinds of step.
    pub auroc_min_p_max: Option<f64>,
    /// The sampled valid and afford masses, when the predictions carry them (an evaluate
    /// artifact whose stage drew states: its `mass_samples` param); `null` otherwise.
    #[serde(default)]
    pub sampled: Option<SampledMass>,
}

/// E12's sampled masses: at each sampled step the evaluate stage drew `samples` states from the
/// model's 75 label distributions, each label independently, and recorded the share of them
/// that are valid positions and the share in which the game's next move is legal
/// (`predictions.parquet`'s `valid_mass` and `afford_mass`). Means over the sampled steps,
/// with game-level bootstrap intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledMass {
    /// States drawn per sampled step (`M`).
    pub samples: u32,
    /// Steps with a valid mass.
    pub steps: u64,
    /// Valid mass: the mean over sampled steps of the share of drawn states that reach V1
    /// (well-formed and a valid position, as the `tiers` of [`Validity`] count them).
    pub valid_mass: Rate,
    /// Afford mass: the mean over sampled steps that have a next move of the share of drawn
    /// states in which that move is legal (V4's check).
    pub afford_mass: Rate,
    /// Valid mass per sampled step in 20 equal bins over 0..=1 (the last one closed).
    pub valid_mass_histogram: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    /// A rate whose value is a multiple of 1/1024, which JSON holds exactly.
    fn rate(num: f64, n: u64) -> Rate {
        Rate {
            num,
            n,
            value: (n > 0).then(|| (num / n as f64 * 1024.0).round() / 1024.0),
            lo: None,
            hi: Some(1.0),
            interval: Interval::Wilson,
            low_n: n < MIN_N,
            scale: 1,
        }
    }

    fn both() -> StrictAndDefined {
        StrictAndDefined {
            strict: rate(3.5, 40),
            defined: rate(3.5, 38),
        }
    }

    fn named(name: &str) -> NamedRate {
        NamedRate {
            name: name.into(),
            rate: rate(1.0, 2),
        }
    }

    fn bin_rate() -> BinRate {
        BinRate {
            bin: 0,
            start: 0,
            end: 20,
            rate: rate(0.0, 0),
        }
    }

    fn counter_bin(bin: &str) -> CounterBin {
        CounterBin {
            bin: bin.into(),
            hi: rate(1.0, 1),
            lo: rate(0.0, 1),
            both: rate(0.0, 1),
        }
    }

    fn histogram() -> ErrorHistogram {
        ErrorHistogram {
            min: -2,
            max: 2,
            counts: vec![0, 1, 5, 0, 0],
        }
    }

    fn ratio() -> Ratio {
        Ratio {
            value: None,
            lo: None,
            hi: None,
            interval: Interval::Bootstrap,
            n: 0,
            low_n: true,
        }
    }

    fn count_bin(bin: &str, count: u64) -> CountBin {
        CountBin {
            bin: bin.into(),
            count,
        }
    }

    fn fields() -> Fields {
        Fields {
            placement: rate(5.0, 6),
            side: rate(6.0, 6),
            castling: rate(6.0, 6),
            en_passant: rate(6.0, 6),
            halfmove: rate(6.0, 6),
            fullmove: rate(5.0, 6),
            position_exact: rate(5.0, 6),
            exact_state: rate(4.0, 6),
            counter_only_error_share: rate(1.0, 2),
            halfmove_by_value: vec![counter_bin("0")],
            fullmove_by_value: vec![counter_bin("1-63")],
            halfmove_error: histogram(),
            fullmove_error: histogram(),
            phantom_rate: rate(1.0, 33),
            omission_rate: rate(0.0, 32),
            misidentification_rate: rate(0.0, 32),
            confusion: vec![vec![0; 13]; 13],
            wrong_squares: vec![count_bin("1", 1)],
        }
    }

    fn affordance() -> Affordance {
        Affordance {
            iou: both(),
            precision: both(),
            recall: both(),
            legal_set_exact: both(),
            coverage: rate(38.0, 40),
            per_piece_iou: both(),
            silent_error_share: rate(0.0, 0),
            in_check: rate(40.0, 40),
            checkers: rate(40.0, 40),
            check_giving: rate(40.0, 40),
            pins: rate(40.0, 40),
            iou_by_bin: vec![bin_rate()],
            exact_by_bin: vec![bin_rate()],
        }
    }

    fn dynamics() -> Dynamics {
        Dynamics {
            next_move_afforded: rate(1.0, 1),
            transition_consistent: rate(1.0, 1),
            tc_given_prev_wrong: rate(0.0, 0),
            tc_given_prev_exact: rate(1.0, 1),
            rollout: vec![RolloutStep {
                i: 1,
                recovered: rate(1.0, 2),
                coherent: rate(1.0, 2),
                neither: rate(0.0, 2),
            }],
            invariants: vec![Invariant {
                id: "I1".into(),
                name: "castling rights never reappear".into(),
                violations: Rate {
                    scale: 1000,
                    ..rate(1.0, 1000)
                },
            }],
            recovery_rate: rate(1.0, 3),
            error_runs: ErrorRuns {
                runs: 3,
                unrecovered: 1,
                lengths: vec![count_bin("1", 3)],
                mean: Some(1.0),
            },
            never_recover: rate(1.0, 3),
        }
    }

    fn events() -> Events {
        Events {
            long_game_ply: Some(180),
            tags: vec![TagStats {
                tag: "ep_capture".into(),
                n: 2,
                per_1000: rate(2.0, 1000),
                exact_state: rate(1.0, 2),
                relevant_accuracy: rate(2.0, 2),
                aftershock: vec![rate(1.0, 2); 5],
                lift: ratio(),
            }],
            first_errors: FirstErrors {
                n: 1,
                tags: vec![FirstErrorTag {
                    tag: "capture".into(),
                    share: rate(1.0, 1),
                    lift: ratio(),
                }],
                groups_wrong: vec![named("placement")],
            },
            staleness: vec![named("0")],
            castling_since_lost: vec![named("1-9")],
            promoted_identity: vec![named("knight")],
        }
    }

    fn summary() -> DiagnoseSummary {
        DiagnoseSummary {
            version: DiagnoseSummary::VERSION,
            kind: KIND.into(),
            split: "test_real".into(),
            arch: "slice".into(),
            size: "d128".into(),
            evaluate_hash: Some("e".into()),
            model_hash: None,
            data_hash: Some("d".into()),
            ep_convention: "reference".into(),
            games: 2,
            steps: 40,
            skipped: vec![SkippedGame {
                game_id: "g".into(),
                reason: "illegal token at t = 3".into(),
            }],
            bin: 20,
            bootstrap: 1000,
            seed: 0,
            validity: Validity {
                tiers: vec![rate(40.0, 40); 6],
                flags: vec![named("empty")],
                flags_non_exact: vec![named("empty")],
                too_much_material: rate(0.0, 40),
                stepper_double_check: rate(0.0, 40),
                plausible_error_share: rate(0.0, 0),
                v1_by_bin: vec![bin_rate()],
                games_with_v1_failure: rate(0.0, 2),
            },
            fields: fields(),
            affordance: affordance(),
            dynamics: dynamics(),
            events: events(),
            mass: Mass {
                steps: 40,
                median_true_mass: Some(0.875),
                true_mass_above_half: rate(30.0, 40),
                true_mass_histogram: vec![0; 20],
                overconfident_error_rate: None,
                auroc_min_p_max: None,
                sampled: Some(SampledMass {
                    samples: 64,
                    steps: 20,
                    valid_mass: rate(15.5, 20),
                    afford_mass: rate(12.0, 18),
                    valid_mass_histogram: vec![1; 20],
                }),
            },
            since_switch: vec![SwitchCurve {
                prefix_plies: 10,
                games: 2,
                bins: vec![SwitchBin {
                    start: -10,
                    end: 0,
                    n: 20,
                    exact: 15,
                    exact_state: Some(0.75),
                }],
            }],
            novelty: None,
        }
    }

    #[test]
    fn diagnose_summary_round_trips() {
        round_trip(&summary());
    }

    #[test]
    fn a_rate_without_scale_reads_as_a_proportion_and_undefined_values_are_null() {
        let dir = scratch("diagnose");
        let path = dir.join(SUMMARY_FILE);
        crate::write_json(&path, &summary()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("NaN"), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value["validity"]["plausible_error_share"]["value"],
            serde_json::Value::Null
        );
        let rate: Rate = serde_json::from_str(
            r#"{"num": 1, "n": 2, "value": 0.5, "lo": null, "hi": null,
                "interval": "none", "low_n": true}"#,
        )
        .unwrap();
        assert_eq!(rate.scale, 1);
        assert_eq!(rate.interval, Interval::None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_summary_without_the_memory_measures_reads_them_as_empty() {
        let mut value = serde_json::to_value(summary()).unwrap();
        let events = value["events"].as_object_mut().unwrap();
        assert!(events.remove("castling_since_lost").is_some());
        assert!(events.remove("promoted_identity").is_some());
        let read: DiagnoseSummary = serde_json::from_value(value).unwrap();
        assert!(read.events.castling_since_lost.is_empty());
        assert!(read.events.promoted_identity.is_empty());
        assert_eq!(read.events.staleness, summary().events.staleness);
    }

    #[test]
    fn a_summary_written_before_the_switch_curves_reads_without_them() {
        let mut value = serde_json::to_value(summary()).unwrap();
        assert!(
            value
                .as_object_mut()
                .unwrap()
                .remove("since_switch")
                .is_some()
        );
        let read: DiagnoseSummary = serde_json::from_value(value).unwrap();
        assert!(read.since_switch.is_empty());
    }

    #[test]
    fn a_summary_written_before_the_sampled_masses_reads_without_them() {
        let mut value = serde_json::to_value(summary()).unwrap();
        let mass = value["mass"].as_object_mut().unwrap();
        assert!(mass.remove("sampled").is_some());
        mass.insert("valid_mass".into(), "left out: no distributions".into());
        let read: DiagnoseSummary = serde_json::from_value(value).unwrap();
        assert_eq!(read.mass.sampled, None);
        assert_eq!(read.mass.median_true_mass, summary().mass.median_true_mass);
    }
}
