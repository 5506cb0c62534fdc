//! E2: which fields of a predicted state are right, whether its position (`Key4`) is, and
//! what goes wrong on the squares (phantoms, omissions, misidentified pieces).
//!
//! All of it is label arithmetic: labels 0..=63 are the squares, 64 the side to move, 65..=68
//! the castling rights, 69..=70 the en-passant file and rank, 71..=72 the halfmove clock and
//! 73..=74 the fullmove number (big-endian byte pairs). `Key4` is labels 0..=70 as the data's
//! convention wrote them.

use cwm_chess::encode::StateLabels;
use cwm_formats::diagnose::{CountBin, CounterBin, ErrorHistogram, Fields};

use super::slots;
use crate::stats::{Estimates, Tally};

/// Correct labels per group of one step, as the evaluate stage's `timesteps.parquet` counts
/// them (`board`, `side`, `castling`, `en_passant`, `halfmove`, `fullmove`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    /// Correct square labels (of 64).
    pub board: u8,
    /// Whether the side to move is right.
    pub side: bool,
    /// Correct castling rights (of 4).
    pub castling: u8,
    /// Correct en-passant labels (of 2).
    pub en_passant: u8,
    /// Correct halfmove-clock bytes (of 2).
    pub halfmove: u8,
    /// Correct fullmove-number bytes (of 2).
    pub fullmove: u8,
}

fn correct(pred: &[u8], target: &[u8]) -> u8 {
    pred.iter().zip(target).filter(|(p, t)| p == t).count() as u8
}

/// The correct labels per group of `pred` against `target`.
pub fn group_counts(pred: &StateLabels, target: &StateLabels) -> GroupCounts {
    GroupCounts {
        board: correct(&pred[..64], &target[..64]),
        side: pred[64] == target[64],
        castling: correct(&pred[65..69], &target[65..69]),
        en_passant: correct(&pred[69..71], &target[69..71]),
        halfmove: correct(&pred[71..73], &target[71..73]),
        fullmove: correct(&pred[73..75], &target[73..75]),
    }
}

/// FieldExact of the six fields as bits of the `fields` column of `steps.parquet`: bit 0
/// placement, 1 side, 2 castling, 3 en passant, 4 halfmove, 5 fullmove.
pub fn field_bits(counts: &GroupCounts) -> u8 {
    u8::from(counts.board == 64)
        | u8::from(counts.side) << 1
        | u8::from(counts.castling == 4) << 2
        | u8::from(counts.en_passant == 2) << 3
        | u8::from(counts.halfmove == 2) << 4
        | u8::from(counts.fullmove == 2) << 5
}

/// The names of the six fields, in bit order.
pub const FIELD_NAMES: [&str; 6] = [
    "placement",
    "side",
    "castling",
    "en_passant",
    "halfmove",
    "fullmove",
];

/// PositionExact: `Key4` (labels 0..=70) right.
pub fn position_exact(pred: &StateLabels, target: &StateLabels) -> bool {
    pred[..71] == target[..71]
}

/// The halfmove clock of labels 71..=72.
pub fn halfmove(labels: &StateLabels) -> u16 {
    u16::from_be_bytes([labels[71], labels[72]])
}

/// The fullmove number of labels 73..=74.
pub fn fullmove(labels: &StateLabels) -> u16 {
    u16::from_be_bytes([labels[73], labels[74]])
}

/// Bins of the halfmove clock's true value.
const HALFMOVE_BINS: [(&str, u16); 5] = [
    ("0", 0),
    ("1-9", 1),
    ("10-49", 10),
    ("50-99", 50),
    (">=100", 100),
];
/// Bins of the fullmove number's true value.
const FULLMOVE_BINS: [(&str, u16); 4] = [
    ("1-63", 0),
    ("64-127", 64),
    ("128-255", 128),
    (">=256", 256),
];

/// The bin of `value` among bins starting at the second element of each pair.
fn bin_of(bins: &[(&str, u16)], value: u16) -> usize {
    bins.iter()
        .rposition(|&(_, start)| value >= start)
        .unwrap_or(0)
}

/// Signed counter errors are clamped to `-ERROR_RANGE..=ERROR_RANGE`.
pub const ERROR_RANGE: i32 = 64;
const HISTOGRAM: usize = 2 * ERROR_RANGE as usize + 1;

/// Bins of the number of wrong squares at a non-exact step.
const WRONG_SQUARES: [&str; 5] = ["0", "1", "2", "3-4", ">=5"];

// Slots, from `slots::FIELDS`: the six FieldExact counts, PositionExact, counter-only errors,
// then per halfmove bin and per fullmove bin (steps, hi right, lo right, both right), then the
// square counts.
const POSITION_EXACT: usize = 6;
const COUNTER_ONLY: usize = 7;
const HALFMOVE_BY_VALUE: usize = 8;
const FULLMOVE_BY_VALUE: usize = HALFMOVE_BY_VALUE + 4 * HALFMOVE_BINS.len();
const PHANTOM: usize = FULLMOVE_BY_VALUE + 4 * FULLMOVE_BINS.len();
const PRED_OCCUPIED: usize = PHANTOM + 1;
const OMISSION: usize = PHANTOM + 2;
const TRUE_OCCUPIED: usize = PHANTOM + 3;
const MISIDENTIFIED: usize = PHANTOM + 4;
/// Slots E2 uses.
pub const SLOTS: usize = MISIDENTIFIED + 1;

const fn slot(local: usize) -> usize {
    slots::FIELDS + local
}

/// The counts of E2 that are not bootstrapped: confusion matrix and histograms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCounts {
    /// `confusion[true][pred]` over all squares of all steps.
    pub confusion: [[u64; 13]; 13],
    /// Signed halfmove errors, index `error + ERROR_RANGE`.
    pub halfmove_error: [u64; HISTOGRAM],
    /// Signed fullmove errors, index `error + ERROR_RANGE`.
    pub fullmove_error: [u64; HISTOGRAM],
    /// Non-exact steps by wrong squares: 0, 1, 2, 3-4, ≥ 5.
    pub wrong_squares: [u64; 5],
}

impl Default for FieldCounts {
    fn default() -> FieldCounts {
        FieldCounts {
            confusion: [[0; 13]; 13],
            halfmove_error: [0; HISTOGRAM],
            fullmove_error: [0; HISTOGRAM],
            wrong_squares: [0; 5],
        }
    }
}

impl FieldCounts {
    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &FieldCounts) {
        for (row, other_row) in self.confusion.iter_mut().zip(&other.confusion) {
            for (cell, other_cell) in row.iter_mut().zip(other_row) {
                *cell += other_cell;
            }
        }
        for (a, b) in self.halfmove_error.iter_mut().zip(&other.halfmove_error) {
            *a += b;
        }
        for (a, b) in self.fullmove_error.iter_mut().zip(&other.fullmove_error) {
            *a += b;
        }
        for (a, b) in self.wrong_squares.iter_mut().zip(&other.wrong_squares) {
            *a += b;
        }
    }
}

fn error_index(pred: u16, target: u16) -> usize {
    let error = (i32::from(pred) - i32::from(target)).clamp(-ERROR_RANGE, ERROR_RANGE);
    (error + ERROR_RANGE) as usize
}

/// What E2 records about one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldStep {
    /// [`field_bits`] of the step.
    pub bits: u8,
    /// PositionExact.
    pub position_exact: bool,
}

/// Measures one step: fills E2's slots of `tally` and `counts`.
pub fn measure(
    pred: &StateLabels,
    target: &StateLabels,
    exact: bool,
    tally: &mut Tally,
    counts: &mut FieldCounts,
) -> FieldStep {
    let groups = group_counts(pred, target);
    let bits = field_bits(&groups);
    for field in 0..FIELD_NAMES.len() {
        tally.count(slot(field), bits & (1 << field) != 0);
    }
    let position = position_exact(pred, target);
    tally.count(slot(POSITION_EXACT), position);
    tally.count(slot(COUNTER_ONLY), position && !exact);
    counters(pred, target, tally, counts);
    squares(pred, target, exact, tally, counts);
    FieldStep {
        bits,
        position_exact: position,
    }
}

fn counters(pred: &StateLabels, target: &StateLabels, tally: &mut Tally, counts: &mut FieldCounts) {
    for (first, bins, base) in [
        (71, &HALFMOVE_BINS[..], HALFMOVE_BY_VALUE),
        (73, &FULLMOVE_BINS[..], FULLMOVE_BY_VALUE),
    ] {
        let value = u16::from_be_bytes([target[first], target[first + 1]]);
        let at = slot(base + 4 * bin_of(bins, value));
        let hi = pred[first] == target[first];
        let lo = pred[first + 1] == target[first + 1];
        tally.add(at, 1.0);
        tally.count(at + 1, hi);
        tally.count(at + 2, lo);
        tally.count(at + 3, hi && lo);
    }
    counts.halfmove_error[error_index(halfmove(pred), halfmove(target))] += 1;
    counts.fullmove_error[error_index(fullmove(pred), fullmove(target))] += 1;
}

fn squares(
    pred: &StateLabels,
    target: &StateLabels,
    exact: bool,
    tally: &mut Tally,
    counts: &mut FieldCounts,
) {
    let (mut phantom, mut pred_occupied, mut omission, mut true_occupied, mut misidentified) =
        (0u32, 0u32, 0u32, 0u32, 0u32);
    for (&p, &t) in pred[..64].iter().zip(&target[..64]) {
        counts.confusion[usize::from(t)][usize::from(p)] += 1;
        pred_occupied += u32::from(p != 0);
        true_occupied += u32::from(t != 0);
        phantom += u32::from(p != 0 && p != t);
        omission += u32::from(t != 0 && p == 0);
        misidentified += u32::from(t != 0 && p != 0 && p != t);
    }
    tally.add(slot(PHANTOM), f64::from(phantom));
    tally.add(slot(PRED_OCCUPIED), f64::from(pred_occupied));
    tally.add(slot(OMISSION), f64::from(omission));
    tally.add(slot(TRUE_OCCUPIED), f64::from(true_occupied));
    tally.add(slot(MISIDENTIFIED), f64::from(misidentified));
    if !exact {
        let wrong = pred[..64]
            .iter()
            .zip(&target[..64])
            .filter(|(p, t)| p != t)
            .count();
        let bin = match wrong {
            0 => 0,
            1 => 1,
            2 => 2,
            3 | 4 => 3,
            _ => 4,
        };
        counts.wrong_squares[bin] += 1;
    }
}

fn counter_bins(estimates: &Estimates, bins: &[(&str, u16)], base: usize) -> Vec<CounterBin> {
    bins.iter()
        .enumerate()
        .map(|(b, &(name, _))| {
            let at = slot(base + 4 * b);
            CounterBin {
                bin: name.to_owned(),
                hi: estimates.rate(at + 1, at),
                lo: estimates.rate(at + 2, at),
                both: estimates.rate(at + 3, at),
            }
        })
        .collect()
}

fn histogram(counts: &[u64; HISTOGRAM]) -> ErrorHistogram {
    ErrorHistogram {
        min: -ERROR_RANGE,
        max: ERROR_RANGE,
        counts: counts.to_vec(),
    }
}

/// The E2 section of the summary.
pub fn summarise(estimates: &Estimates, counts: &FieldCounts) -> Fields {
    let field = |f: usize| estimates.rate(slot(f), slots::STEPS);
    Fields {
        placement: field(0),
        side: field(1),
        castling: field(2),
        en_passant: field(3),
        halfmove: field(4),
        fullmove: field(5),
        position_exact: estimates.rate(slot(POSITION_EXACT), slots::STEPS),
        exact_state: estimates.rate(slots::EXACT, slots::STEPS),
        counter_only_error_share: estimates.rate(slot(COUNTER_ONLY), slots::NON_EXACT),
        halfmove_by_value: counter_bins(estimates, &HALFMOVE_BINS, HALFMOVE_BY_VALUE),
        fullmove_by_value: counter_bins(estimates, &FULLMOVE_BINS, FULLMOVE_BY_VALUE),
        halfmove_error: histogram(&counts.halfmove_error),
        fullmove_error: histogram(&counts.fullmove_error),
        phantom_rate: estimates.rate(slot(PHANTOM), slot(PRED_OCCUPIED)),
        omission_rate: estimates.rate(slot(OMISSION), slot(TRUE_OCCUPIED)),
        misidentification_rate: estimates.rate(slot(MISIDENTIFIED), slot(TRUE_OCCUPIED)),
        confusion: counts.confusion.iter().map(|row| row.to_vec()).collect(),
        wrong_squares: WRONG_SQUARES
            .iter()
            .zip(counts.wrong_squares)
            .map(|(&bin, count)| CountBin {
                bin: bin.to_owned(),
                count,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::INITIAL_STATE;

    use super::*;
    use crate::stats::Bootstrap;

    fn summary_of(steps: &[(StateLabels, StateLabels)]) -> (Fields, Vec<FieldStep>) {
        let mut tally = Tally::new();
        let mut counts = FieldCounts::default();
        let mut out = Vec::new();
        for (pred, target) in steps {
            let exact = pred == target;
            tally.add(slots::STEPS, 1.0);
            tally.count(slots::EXACT, exact);
            tally.count(slots::NON_EXACT, !exact);
            out.push(measure(pred, target, exact, &mut tally, &mut counts));
        }
        let bootstrap = Bootstrap::default();
        let estimates = Estimates {
            totals: tally.values(),
            bootstrap: &bootstrap,
        };
        (summarise(&estimates, &counts), out)
    }

    #[test]
    fn a_wrong_fullmove_low_byte_is_position_exact_but_not_exact() {
        let mut pred = INITIAL_STATE;
        pred[74] = 7;
        let (fields, steps) = summary_of(&[(pred, INITIAL_STATE), (pred, INITIAL_STATE)]);
        assert_eq!(fields.position_exact.value, Some(1.0));
        assert_eq!(fields.exact_state.value, Some(0.0));
        assert_eq!(fields.counter_only_error_share.value, Some(1.0));
        assert_eq!(fields.fullmove.value, Some(0.0));
        assert_eq!(fields.placement.value, Some(1.0));
        assert_eq!(steps[0].bits, 0b01_1111);
        assert_eq!(fields.fullmove_by_value[0].hi.value, Some(1.0));
        assert_eq!(fields.fullmove_by_value[0].lo.value, Some(0.0));
        assert_eq!(fields.fullmove_by_value[1].hi.n, 0);
        assert_eq!(fields.fullmove_error.counts[(6 + ERROR_RANGE) as usize], 2);
        assert_eq!(fields.wrong_squares[0].count, 2, "no square wrong");
    }

    #[test]
    fn a_phantom_knight_on_an_empty_square() {
        let mut pred = INITIAL_STATE;
        pred[36] = 2; // a white knight on e4
        let (fields, _) = summary_of(&[(pred, INITIAL_STATE)]);
        assert_eq!(fields.phantom_rate.num, 1.0);
        assert_eq!(fields.phantom_rate.n, 33);
        assert_eq!(fields.phantom_rate.value, Some(1.0 / 33.0));
        assert_eq!(fields.omission_rate.value, Some(0.0));
        assert_eq!(fields.misidentification_rate.value, Some(0.0));
        assert_eq!(fields.confusion[0][2], 1);
        assert_eq!(fields.confusion[0][0], 31);
        assert_eq!(fields.wrong_squares[1].count, 1);
    }

    #[test]
    fn omissions_and_misidentifications_are_over_the_true_pieces() {
        let mut pred = INITIAL_STATE;
        pred[0] = 0; // the a8 rook missing
        pred[1] = 9; // b8 knight read as a bishop
        pred[2] = 8; // c8 bishop read as a knight
        let (fields, _) = summary_of(&[(pred, INITIAL_STATE)]);
        assert_eq!(fields.omission_rate.value, Some(1.0 / 32.0));
        assert_eq!(fields.misidentification_rate.value, Some(2.0 / 32.0));
        assert_eq!(fields.phantom_rate.value, Some(2.0 / 31.0));
        assert_eq!(fields.wrong_squares[3].count, 1, "3 wrong squares");
    }

    #[test]
    fn counter_values_fall_in_their_bins() {
        assert_eq!(bin_of(&HALFMOVE_BINS, 0), 0);
        assert_eq!(bin_of(&HALFMOVE_BINS, 9), 1);
        assert_eq!(bin_of(&HALFMOVE_BINS, 10), 2);
        assert_eq!(bin_of(&HALFMOVE_BINS, 99), 3);
        assert_eq!(bin_of(&HALFMOVE_BINS, 100), 4);
        assert_eq!(bin_of(&FULLMOVE_BINS, 1), 0);
        assert_eq!(bin_of(&FULLMOVE_BINS, 255), 2);
        assert_eq!(bin_of(&FULLMOVE_BINS, 256), 3);
        assert_eq!(error_index(0, 500), 0);
        assert_eq!(error_index(3, 1), (ERROR_RANGE + 2) as usize);
    }
}
