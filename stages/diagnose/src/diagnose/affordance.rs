//! E3: does the believed position allow the moves the true one does? With `L` the legal moves
//! of the true position and `L̂` those of `rules::playable(Ŝ_t)`, as packed token ids:
//! precision `|L̂ ∩ L| / |L̂|`, recall `|L̂ ∩ L| / |L|`, IoU `|L̂ ∩ L| / |L̂ ∪ L|` (each 1 when
//! its denominator set is empty), LegalSetExact `L̂ = L`, the per-piece IoU over the true
//! side's pieces, and the rule queries (in check, the checkers, the check-giving moves, the
//! absolute pins), each scored by exact set match.
//!
//! A prediction that is not playable scores 0 on all of them in the strict means and counts
//! against coverage; the defined-only means leave it out. A prediction whose `Key4` is right
//! stands for the true position itself (the counters play no part in any of these), so its
//! scores are 1 without generating a move: only wrong positions cost move generation.

use cwm_chess::rules::{
    self, CheckingMoves, Pin, absolute_pins, checkers, checking_moves, ids_from, intersection_len,
    legal_ids,
};
use cwm_formats::diagnose::{Affordance, StrictAndDefined};
use shakmaty::{Chess, Position};

use super::slots;
use super::validity::bin_rates;
use crate::stats::{Estimates, Tally};

const IOU: usize = 0;
const PRECISION: usize = 1;
const RECALL: usize = 2;
const LEGAL_EXACT: usize = 3;
const PLAYABLE: usize = 4;
const PIECE_IOU: usize = 5;
const SILENT: usize = 6;
const IN_CHECK: usize = 7;
const CHECKERS: usize = 8;
const CHECK_GIVING: usize = 9;
const PINS: usize = 10;
/// Slots E3 uses.
pub const SLOTS: usize = 11;

const fn slot(local: usize) -> usize {
    slots::AFFORDANCE + local
}

/// E3's values at one step whose prediction is playable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoveSets {
    /// IoU of the legal-move sets.
    pub iou: f64,
    /// Precision.
    pub precision: f64,
    /// Recall.
    pub recall: f64,
    /// LegalSetExact.
    pub exact: bool,
    /// Mean IoU over the true side's pieces.
    pub piece_iou: f64,
    /// The in-check flags agree.
    pub in_check: bool,
    /// The checkers agree.
    pub checkers: bool,
    /// The check-giving moves agree.
    pub check_giving: bool,
    /// The absolute pins agree.
    pub pins: bool,
}

impl MoveSets {
    /// The values of a prediction that is the true position.
    pub const PERFECT: MoveSets = MoveSets {
        iou: 1.0,
        precision: 1.0,
        recall: 1.0,
        exact: true,
        piece_iou: 1.0,
        in_check: true,
        checkers: true,
        check_giving: true,
        pins: true,
    };
}

/// `shared / of`, or 1 when `of` is 0.
fn share(shared: usize, of: usize) -> f64 {
    if of == 0 {
        1.0
    } else {
        shared as f64 / of as f64
    }
}

/// The rule-query answers of one position, buffers reused from step to step.
#[derive(Debug, Default)]
struct Answers {
    legal: Vec<u16>,
    checking: CheckingMoves,
    pins: Vec<Pin>,
}

impl Answers {
    fn fill(&mut self, position: &Chess) {
        legal_ids(position, &mut self.legal);
        checking_moves(position, &mut self.checking);
        absolute_pins(position, &mut self.pins);
    }
}

/// Buffers for the move sets of the true and the believed position (one per game, so no
/// step allocates).
#[derive(Debug, Default)]
pub struct Scratch {
    truth: Answers,
    belief: Answers,
}

/// Compares the believed position with the true one.
pub fn compare(truth: &Chess, belief: &Chess, scratch: &mut Scratch) -> MoveSets {
    scratch.truth.fill(truth);
    scratch.belief.fill(belief);
    let (l, l_hat) = (&scratch.truth.legal, &scratch.belief.legal);
    let shared = intersection_len(l_hat, l);
    let union = l.len() + l_hat.len() - shared;
    let mut piece_sum = 0.0;
    let mut pieces = 0u32;
    for square in truth.us() {
        let (true_moves, believed_moves) = (ids_from(l, square), ids_from(l_hat, square));
        let common = intersection_len(believed_moves, true_moves);
        piece_sum += share(common, true_moves.len() + believed_moves.len() - common);
        pieces += 1;
    }
    MoveSets {
        iou: share(shared, union),
        precision: share(shared, l_hat.len()),
        recall: share(shared, l.len()),
        exact: l == l_hat,
        piece_iou: if pieces == 0 {
            1.0
        } else {
            piece_sum / f64::from(pieces)
        },
        in_check: truth.is_check() == belief.is_check(),
        checkers: checkers(truth) == checkers(belief),
        check_giving: scratch.truth.checking.checks == scratch.belief.checking.checks,
        pins: scratch.truth.pins == scratch.belief.pins,
    }
}

/// Records one step: `sets` is `None` when the prediction is not playable.
pub fn record(sets: Option<&MoveSets>, exact: bool, bin: usize, tally: &mut Tally) {
    let Some(sets) = sets else {
        return;
    };
    tally.add(slot(IOU), sets.iou);
    tally.add(slot(PRECISION), sets.precision);
    tally.add(slot(RECALL), sets.recall);
    tally.count(slot(LEGAL_EXACT), sets.exact);
    tally.add(slot(PLAYABLE), 1.0);
    tally.add(slot(PIECE_IOU), sets.piece_iou);
    tally.count(slot(SILENT), sets.exact && !exact);
    tally.count(slot(IN_CHECK), sets.in_check);
    tally.count(slot(CHECKERS), sets.checkers);
    tally.count(slot(CHECK_GIVING), sets.check_giving);
    tally.count(slot(PINS), sets.pins);
    tally.add(slots::bin(bin, slots::BIN_IOU), sets.iou);
}

fn both(estimates: &Estimates, local: usize) -> StrictAndDefined {
    StrictAndDefined {
        strict: estimates.rate(slot(local), slots::STEPS),
        defined: estimates.rate(slot(local), slot(PLAYABLE)),
    }
}

/// The E3 section of the summary over `bins` prefix bins of `width` plies.
pub fn summarise(estimates: &Estimates, bins: usize, width: u32) -> Affordance {
    Affordance {
        iou: both(estimates, IOU),
        precision: both(estimates, PRECISION),
        recall: both(estimates, RECALL),
        legal_set_exact: both(estimates, LEGAL_EXACT),
        coverage: estimates.rate(slot(PLAYABLE), slots::STEPS),
        per_piece_iou: both(estimates, PIECE_IOU),
        silent_error_share: estimates.rate(slot(SILENT), slots::NON_EXACT),
        in_check: estimates.rate(slot(IN_CHECK), slots::STEPS),
        checkers: estimates.rate(slot(CHECKERS), slots::STEPS),
        check_giving: estimates.rate(slot(CHECK_GIVING), slots::STEPS),
        pins: estimates.rate(slot(PINS), slots::STEPS),
        iou_by_bin: bin_rates(estimates, bins, width, slots::BIN_IOU),
        exact_by_bin: exact_by_bin(estimates, bins, width),
    }
}

/// ExactState per bin: the bin's steps less its errors.
fn exact_by_bin(
    estimates: &Estimates,
    bins: usize,
    width: u32,
) -> Vec<cwm_formats::diagnose::BinRate> {
    bin_rates(estimates, bins, width, slots::BIN_ERRORS)
        .into_iter()
        .map(|mut bin| {
            let b = bin.bin as usize;
            let errors = slots::bin(b, slots::BIN_ERRORS);
            let steps = slots::bin(b, slots::BIN_STEPS);
            let complement = |t: &[f64]| {
                let at = |s: usize| t.get(s).copied().unwrap_or(0.0);
                crate::stats::ratio(at(steps) - at(errors), at(steps))
            };
            let ratio = estimates.ratio_of(bin.rate.n, complement);
            bin.rate.num = bin.rate.n as f64 - bin.rate.num;
            bin.rate.value = ratio.value;
            bin.rate.lo = ratio.lo;
            bin.rate.hi = ratio.hi;
            bin.rate.interval = ratio.interval;
            bin
        })
        .collect()
}

/// Whether the believed position allows the move `token` (V4): `None` when not playable.
pub fn affords(belief: Option<&Chess>, token: u16) -> bool {
    belief.is_some_and(|position| rules::move_of_token(position, token).is_some())
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::INITIAL_STATE;
    use cwm_chess::rules::playable;

    use super::*;

    #[test]
    fn a_phantom_white_knight_adds_its_moves_and_takes_none_away() {
        let truth = playable(&INITIAL_STATE).unwrap();
        let mut labels = INITIAL_STATE;
        labels[28] = 2; // a white knight on e5, in nobody's way
        let belief = playable(&labels).unwrap();
        let mut scratch = Scratch::default();
        let sets = compare(&truth, &belief, &mut scratch);
        assert_eq!(sets.recall, 1.0);
        assert!(sets.precision < 1.0);
        let extra: Vec<u16> = scratch
            .belief
            .legal
            .iter()
            .copied()
            .filter(|id| !scratch.truth.legal.contains(id))
            .collect();
        // c4, c6, d3, d7 (takes), f3, f7 (takes), g4, g6.
        assert_eq!(extra.len(), 8, "{extra:?}");
        assert!(extra.iter().all(|&id| id / 5 / 64 == 36), "all from e5");
        assert!((sets.precision - 20.0 / 28.0).abs() < 1e-12);
        assert!((sets.iou - 20.0 / 28.0).abs() < 1e-12);
        assert!(!sets.exact);
        assert!(sets.in_check && sets.checkers && sets.pins);
        assert!(
            sets.check_giving,
            "Nxf7 and Nxd7 give no check: neither does anything else"
        );
    }

    #[test]
    fn identical_positions_score_one() {
        let truth = playable(&INITIAL_STATE).unwrap();
        let sets = compare(&truth, &truth, &mut Scratch::default());
        assert_eq!(sets, MoveSets::PERFECT);
    }
}
