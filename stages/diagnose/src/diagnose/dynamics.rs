//! E4: how predictions move from step to step.
//!
//! * **TransitionConsistent** (t ≥ 1): the prediction equals the previous prediction with the
//!   game's move played by the rules (`rules::play_labels`, all 75 labels under the data's
//!   convention). When the previous prediction is exact that is the true state, so the check
//!   is ExactState and needs no move generation.
//! * **Belief rollout**: from the first step τ of every error run, the true moves
//!   `m_{τ+1..τ+10}` are replayed from `Ŝ_τ` while they stay legal; each later prediction is
//!   *recovered* (the true state), *coherent* (the replayed belief) or *neither*. A prediction
//!   that is both (the belief has become the truth) counts as recovered.
//! * **Invariants** over consecutive predictions, without the truth: I1 castling rights never
//!   reappear, I2 a colour's piece count never rises, I3 nor its pawn count, I4 the side to
//!   move alternates, I5 the fullmove number rises by one after Black's move (the side the
//!   previous prediction names) and stays otherwise, I6 the halfmove clock is 0 or one more, I7
//!   no square outside the move's footprint `F(m_t)` changes.
//! * **Error dynamics**: the recovery rate P(exact_{t+1} | not exact_t), the lengths of the
//!   runs of consecutive non-exact steps, and the games whose first error lasts to their end.

use cwm_chess::encode::{EpConvention, StateLabels};
use cwm_chess::rules::play_labels;
use cwm_formats::diagnose::{CountBin, Dynamics, ErrorRuns, Invariant, RolloutStep};
use shakmaty::Bitboard;

use super::fields::{fullmove, halfmove};
use super::slots;
use crate::stats::{Estimates, Tally, wilson_rate};

const NEXT_AFFORDED: usize = 0;
const TC: usize = 1;
const TC_PREV_WRONG: usize = 2;
const TC_PREV_EXACT: usize = 3;
const INVARIANTS: usize = 4;
const RECOVERED: usize = INVARIANTS + 7;
/// Slots E4 uses.
pub const SLOTS: usize = RECOVERED + 1;

const fn slot(local: usize) -> usize {
    slots::DYNAMICS + local
}

/// The invariants: id and what each checks.
pub const INVARIANT_NAMES: [(&str, &str); 7] = [
    ("I1", "castling rights never reappear"),
    ("I2", "a colour's piece count never rises"),
    ("I3", "a colour's pawn count never rises"),
    ("I4", "the side to move alternates"),
    (
        "I5",
        "the fullmove number rises by one after Black's move only",
    ),
    ("I6", "the halfmove clock is 0 or one more"),
    ("I7", "no square outside the move's footprint changes"),
];

/// Plies of the belief rollout.
pub const ROLLOUT: usize = 10;

/// (pieces, pawns) of each colour.
fn material(labels: &StateLabels) -> [[u32; 2]; 2] {
    let mut counts = [[0u32; 2]; 2];
    for &label in &labels[..64] {
        match label {
            1 => counts[0] = [counts[0][0] + 1, counts[0][1] + 1],
            2..=6 => counts[0][0] += 1,
            7 => counts[1] = [counts[1][0] + 1, counts[1][1] + 1],
            8..=12 => counts[1][0] += 1,
            _ => {}
        }
    }
    counts
}

/// The invariants `cur` violates after `prev` when the move's footprint is `footprint`:
/// bit k−1 for Ik.
pub fn invariant_bits(prev: &StateLabels, cur: &StateLabels, footprint: Bitboard) -> u8 {
    let reappears = (65..69).any(|j| cur[j] == 1 && prev[j] != 1);
    let (before, after) = (material(prev), material(cur));
    let pieces_rise = (0..2).any(|c| after[c][0] > before[c][0]);
    let pawns_rise = (0..2).any(|c| after[c][1] > before[c][1]);
    let alternates = cur[64] != prev[64];
    let expected_fullmove = u32::from(fullmove(prev)) + u32::from(prev[64] == 1);
    let fullmove_ok = u32::from(fullmove(cur)) == expected_fullmove;
    let clock = halfmove(cur);
    let clock_ok = clock == 0 || u32::from(clock) == u32::from(halfmove(prev)) + 1;
    let local = (0..64).all(|index| {
        prev[index] == cur[index] || footprint.contains(shakmaty::Square::new((index ^ 56) as u32))
    });
    [
        reappears,
        pieces_rise,
        pawns_rise,
        !alternates,
        !fullmove_ok,
        !clock_ok,
        !local,
    ]
    .iter()
    .enumerate()
    .fold(0u8, |bits, (k, &violated)| bits | (u8::from(violated) << k))
}

/// Records a step's invariant bits (t ≥ 1).
pub fn record_invariants(bits: u8, tally: &mut Tally) {
    for k in 0..INVARIANT_NAMES.len() {
        tally.count(slot(INVARIANTS + k), bits & (1 << k) != 0);
    }
}

/// TransitionConsistent at a step t ≥ 1: the previous prediction with `token` played is the
/// prediction. `prev_exact` says whether the previous prediction was the true state (then the
/// result is `exact`, the step's ExactState).
pub fn transition_consistent(
    prev: &StateLabels,
    prev_exact: bool,
    cur: &StateLabels,
    exact: bool,
    token: u16,
    ep: EpConvention,
) -> bool {
    if prev_exact {
        exact
    } else {
        play_labels(prev, token, ep).is_some_and(|next| next == *cur)
    }
}

/// Records NextMoveAfforded (t < T).
pub fn record_afforded(afforded: bool, tally: &mut Tally) {
    tally.count(slot(NEXT_AFFORDED), afforded);
}

/// Records TransitionConsistent (t ≥ 1) under the previous step's exactness.
pub fn record_transition(consistent: bool, prev_exact: bool, tally: &mut Tally) {
    tally.count(slot(TC), consistent);
    let conditional = if prev_exact {
        TC_PREV_EXACT
    } else {
        TC_PREV_WRONG
    };
    tally.count(slot(conditional), consistent);
}

/// The E4 counts that are not bootstrapped (rates over runs, games and events).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicsCounts {
    /// Per rollout ply i (index i − 1): recovered, coherent, neither.
    pub rollout: [[u64; 3]; ROLLOUT],
    /// Error runs by length: 1, 2-4, 5-9, 10-49, ≥ 50.
    pub run_lengths: [u64; 5],
    /// Summed run lengths.
    pub run_steps: u64,
    /// Runs lasting to the game's last step.
    pub unrecovered_runs: u64,
    /// Games with a non-exact step.
    pub games_with_errors: u64,
    /// Of those, games never exact again after their first error.
    pub never_recovered: u64,
}

impl DynamicsCounts {
    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &DynamicsCounts) {
        for (a, b) in self.rollout.iter_mut().zip(&other.rollout) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        for (a, b) in self.run_lengths.iter_mut().zip(&other.run_lengths) {
            *a += b;
        }
        self.run_steps += other.run_steps;
        self.unrecovered_runs += other.unrecovered_runs;
        self.games_with_errors += other.games_with_errors;
        self.never_recovered += other.never_recovered;
    }
}

/// The error runs of a game as (first step, length).
pub fn error_runs(exact: &[bool]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut t = 0;
    while t < exact.len() {
        if exact[t] {
            t += 1;
            continue;
        }
        let start = t;
        while t < exact.len() && !exact[t] {
            t += 1;
        }
        runs.push((start, t - start));
    }
    runs
}

/// Records the error dynamics of a game from its per-step ExactState.
pub fn record_errors(exact: &[bool], tally: &mut Tally, counts: &mut DynamicsCounts) {
    for pair in exact.windows(2) {
        if !pair[0] {
            tally.add(slots::NON_EXACT_BEFORE_LAST, 1.0);
            tally.count(slot(RECOVERED), pair[1]);
        }
    }
    let runs = error_runs(exact);
    for &(start, length) in &runs {
        let bin = match length {
            1 => 0,
            2..=4 => 1,
            5..=9 => 2,
            10..=49 => 3,
            _ => 4,
        };
        counts.run_lengths[bin] += 1;
        counts.run_steps += length as u64;
        counts.unrecovered_runs += u64::from(start + length == exact.len());
    }
    if let Some(&(start, length)) = runs.first() {
        counts.games_with_errors += 1;
        counts.never_recovered += u64::from(start + length == exact.len());
    }
}

/// The belief rollouts of a game from the first step of each error run: `pred(t)`,
/// `target(t)` and `tokens[t]` are the game's predictions, true labels and input tokens.
pub fn record_rollouts<'a>(
    exact: &[bool],
    pred: impl Fn(usize) -> &'a StateLabels,
    target: impl Fn(usize) -> &'a StateLabels,
    tokens: &[u16],
    ep: EpConvention,
    counts: &mut DynamicsCounts,
) {
    for (start, _) in error_runs(exact) {
        let mut belief = Some(*pred(start));
        for i in 1..=ROLLOUT {
            let s = start + i;
            if s >= exact.len() || s >= tokens.len() {
                break;
            }
            belief = belief.and_then(|b| play_labels(&b, tokens[s], ep));
            let prediction = pred(s);
            let outcome = if prediction == target(s) {
                0
            } else if belief.as_ref() == Some(prediction) {
                1
            } else {
                2
            };
            counts.rollout[i - 1][outcome] += 1;
        }
    }
}

/// The E4 section of the summary.
pub fn summarise(estimates: &Estimates, counts: &DynamicsCounts) -> Dynamics {
    let runs: u64 = counts.run_lengths.iter().sum();
    Dynamics {
        next_move_afforded: estimates.rate(slot(NEXT_AFFORDED), slots::BEFORE_LAST),
        transition_consistent: estimates.rate(slot(TC), slots::AFTER_FIRST),
        tc_given_prev_wrong: estimates.rate(slot(TC_PREV_WRONG), slots::PREV_WRONG),
        tc_given_prev_exact: estimates.rate(slot(TC_PREV_EXACT), slots::PREV_EXACT),
        rollout: counts
            .rollout
            .iter()
            .enumerate()
            .map(|(i, outcomes)| {
                let n = outcomes.iter().sum();
                RolloutStep {
                    i: i as u32 + 1,
                    recovered: wilson_rate(outcomes[0], n),
                    coherent: wilson_rate(outcomes[1], n),
                    neither: wilson_rate(outcomes[2], n),
                }
            })
            .collect(),
        invariants: INVARIANT_NAMES
            .iter()
            .enumerate()
            .map(|(k, &(id, name))| Invariant {
                id: id.to_owned(),
                name: name.to_owned(),
                violations: estimates.rate_scaled(slot(INVARIANTS + k), slots::AFTER_FIRST, 1000),
            })
            .collect(),
        recovery_rate: estimates.rate(slot(RECOVERED), slots::NON_EXACT_BEFORE_LAST),
        error_runs: ErrorRuns {
            runs,
            unrecovered: counts.unrecovered_runs,
            lengths: ["1", "2-4", "5-9", "10-49", ">=50"]
                .iter()
                .zip(counts.run_lengths)
                .map(|(&bin, count)| CountBin {
                    bin: bin.to_owned(),
                    count,
                })
                .collect(),
            mean: crate::stats::ratio(counts.run_steps as f64, runs as f64),
        },
        never_recover: wilson_rate(counts.never_recovered, counts.games_with_errors),
    }
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::{INITIAL_STATE, encode_state};
    use cwm_chess::rules::{footprint, move_of_token, playable};
    use shakmaty::{Chess, Position};

    use super::*;

    /// The labels and footprint after e2e4 from the start.
    fn after_e4() -> (StateLabels, Bitboard, u16) {
        let token = (12 * 64 + 28) * 5;
        let mut position = Chess::default();
        let m = move_of_token(&position, token).unwrap();
        position.play_unchecked(m);
        (
            encode_state(&position, EpConvention::Reference),
            footprint(&m),
            token,
        )
    }

    #[test]
    fn a_true_transition_violates_nothing() {
        let (next, footprint, token) = after_e4();
        assert_eq!(invariant_bits(&INITIAL_STATE, &next, footprint), 0);
        assert!(transition_consistent(
            &INITIAL_STATE,
            false,
            &next,
            true,
            token,
            EpConvention::Reference
        ));
        let mut wrong = next;
        wrong[0] = 0;
        assert!(!transition_consistent(
            &INITIAL_STATE,
            false,
            &wrong,
            false,
            token,
            EpConvention::Reference
        ));
        assert!(playable(&wrong).is_some());
    }

    #[test]
    fn each_invariant_fires_on_its_own() {
        let (next, footprint, _) = after_e4();
        let violated = |edit: &dyn Fn(&mut StateLabels), prev_edit: &dyn Fn(&mut StateLabels)| {
            let (mut prev, mut cur) = (INITIAL_STATE, next);
            prev_edit(&mut prev);
            edit(&mut cur);
            invariant_bits(&prev, &cur, footprint)
        };
        let none = |_: &mut StateLabels| {};
        assert_eq!(violated(&none, &|p| p[65] = 0), 1, "K reappears");
        assert_eq!(
            violated(&|c| c[45] = 2, &none),
            2 | 64,
            "a knight appears on f3"
        );
        assert_eq!(
            violated(&|c| c[44] = 1, &none),
            2 | 4 | 64,
            "a pawn appears"
        );
        assert_eq!(
            violated(&|c| c[64] = 0, &none),
            8,
            "the side does not alternate"
        );
        assert_eq!(violated(&|c| c[74] = 2, &none), 16);
        assert_eq!(violated(&|c| c[72] = 5, &none), 32);
        assert_eq!(violated(&|c| c[0] = 0, &none), 64, "the a8 rook vanishes");
    }

    #[test]
    fn runs_recovery_and_never_recovering_games() {
        let exact = [true, false, false, true, false, true, false, false];
        assert_eq!(error_runs(&exact), [(1, 2), (4, 1), (6, 2)]);
        let mut tally = Tally::new();
        let mut counts = DynamicsCounts::default();
        record_errors(&exact, &mut tally, &mut counts);
        assert_eq!(tally.get(slots::NON_EXACT_BEFORE_LAST), 4.0);
        assert_eq!(tally.get(slot(RECOVERED)), 2.0);
        assert_eq!(counts.run_lengths, [1, 2, 0, 0, 0]);
        assert_eq!((counts.unrecovered_runs, counts.games_with_errors), (1, 1));
        assert_eq!(counts.never_recovered, 0, "the first error recovered");
        record_errors(&[true, false, false], &mut tally, &mut counts);
        assert_eq!((counts.games_with_errors, counts.never_recovered), (2, 1));
        record_errors(&[true, true], &mut tally, &mut counts);
        assert_eq!(counts.games_with_errors, 2);
    }
}
