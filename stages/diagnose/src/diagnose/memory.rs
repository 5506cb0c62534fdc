//! E5's long-range memory, game by game: square accuracy by staleness (plies since the
//! square's true label last changed, 0 at t = 0), castling-label accuracy by plies since the
//! right was lost (the four rights pooled, from the step that loses one), and identity
//! accuracy of promoted pieces (the square label right wherever a piece that arrived by
//! promotion stands), by the piece.

use cwm_chess::encode::{CASTLING_WHITE_KING_SIDE, StateLabels};
use cwm_chess::rules::LabelSet;
use cwm_formats::diagnose::NamedRate;

use super::slots;
use crate::stats::{Estimates, Tally};

/// The bins of plies since a change or a loss, by their first value.
const BINS: [(&str, u32); 6] = [
    ("0", 0),
    ("1-9", 1),
    ("10-49", 10),
    ("50-99", 50),
    ("100-199", 100),
    (">=200", 200),
];
/// The promoted pieces, in the summary's order.
const PROMOTED: [&str; 4] = ["queen", "rook", "bishop", "knight"];

const STALENESS: usize = 0;
const CASTLING: usize = STALENESS + 2 * BINS.len();
const PROMOTED_PIECES: usize = CASTLING + 2 * BINS.len();
/// Slots the memory measures use.
pub const SLOTS: usize = PROMOTED_PIECES + 2 * PROMOTED.len();

const fn slot(local: usize) -> usize {
    slots::MEMORY + local
}

/// The bin of `plies`.
fn bin_of(plies: u32) -> usize {
    BINS.iter()
        .rposition(|&(_, start)| plies >= start)
        .unwrap_or(0)
}

/// The index in [`PROMOTED`] of a square label's piece, for the pieces a pawn can become.
fn promoted_index(label: u8) -> Option<usize> {
    if !(1..=12).contains(&label) {
        return None;
    }
    // Classes 1–6 and 7–12 are P N B R Q K of each colour.
    match (label - 1) % 6 {
        4 => Some(0),
        3 => Some(1),
        2 => Some(2),
        1 => Some(3),
        _ => None,
    }
}

/// One game's memory counts: `[steps, right]` per bin or piece.
#[derive(Debug, Clone)]
pub struct Memory {
    last_change: [u32; 64],
    lost_at: [Option<u32>; 4],
    staleness: [[u32; 2]; BINS.len()],
    castling: [[u32; 2]; BINS.len()],
    promoted: [[u32; 2]; PROMOTED.len()],
}

impl Default for Memory {
    fn default() -> Memory {
        Memory {
            last_change: [0; 64],
            lost_at: [None; 4],
            staleness: [[0; 2]; BINS.len()],
            castling: [[0; 2]; BINS.len()],
            promoted: [[0; 2]; PROMOTED.len()],
        }
    }
}

impl Memory {
    /// Records step `t` (called for t = 0, 1, … in order): `previous` is the true state at
    /// t − 1 (ignored at t = 0), `promoted` the labels of the squares holding promoted pieces
    /// in the true state.
    pub fn step(
        &mut self,
        t: u32,
        previous: &StateLabels,
        target: &StateLabels,
        pred: &StateLabels,
        promoted: LabelSet,
    ) {
        for i in 0..64 {
            if t > 0 && previous[i] != target[i] {
                self.last_change[i] = t;
            }
            let bin = bin_of(t - self.last_change[i].min(t));
            tick(&mut self.staleness[bin], pred[i] == target[i]);
        }
        for (k, lost_at) in self.lost_at.iter_mut().enumerate() {
            let label = CASTLING_WHITE_KING_SIDE + k;
            if t > 0 && previous[label] == 1 && target[label] == 0 {
                *lost_at = Some(t);
            }
            if let Some(lost) = *lost_at {
                let bin = bin_of(t - lost.min(t));
                tick(&mut self.castling[bin], pred[label] == target[label]);
            }
        }
        for square in promoted.iter().filter(|&i| i < 64) {
            if let Some(piece) = promoted_index(target[square]) {
                tick(&mut self.promoted[piece], pred[square] == target[square]);
            }
        }
    }

    /// Adds the game's counts to `tally`.
    pub fn finish(&self, tally: &mut Tally) {
        let ranges = [
            (STALENESS, &self.staleness[..]),
            (CASTLING, &self.castling[..]),
            (PROMOTED_PIECES, &self.promoted[..]),
        ];
        for (base, counts) in ranges {
            for (b, [n, right]) in counts.iter().enumerate() {
                tally.add(slot(base + 2 * b), f64::from(*n));
                tally.add(slot(base + 2 * b + 1), f64::from(*right));
            }
        }
    }
}

fn tick(count: &mut [u32; 2], right: bool) {
    count[0] += 1;
    count[1] += u32::from(right);
}

/// The memory measures of the summary: by staleness, castling since lost, promoted pieces.
pub struct Summary {
    /// Square accuracy by staleness bin.
    pub staleness: Vec<NamedRate>,
    /// Castling-label accuracy by plies since the right was lost.
    pub castling_since_lost: Vec<NamedRate>,
    /// Promoted-piece identity accuracy by piece.
    pub promoted_identity: Vec<NamedRate>,
}

/// Reads the memory measures out of the estimates.
pub fn summarise(estimates: &Estimates) -> Summary {
    let rates = |base: usize, names: &[&str]| -> Vec<NamedRate> {
        names
            .iter()
            .enumerate()
            .map(|(b, name)| NamedRate {
                name: (*name).to_owned(),
                rate: estimates.rate(slot(base + 2 * b + 1), slot(base + 2 * b)),
            })
            .collect()
    };
    let bins: Vec<&str> = BINS.iter().map(|&(name, _)| name).collect();
    Summary {
        staleness: rates(STALENESS, &bins),
        castling_since_lost: rates(CASTLING, &bins),
        promoted_identity: rates(PROMOTED_PIECES, &PROMOTED),
    }
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::{EpConvention, INITIAL_STATE, START};
    use cwm_chess::rules::{EventTags, GameTagger, StepTags};

    use super::*;

    #[test]
    fn staleness_counts_plies_since_the_true_label_changed() {
        let mut memory = Memory::default();
        let mut after = INITIAL_STATE;
        after[52] = 0; // e2 empties
        after[36] = 1; // e4 fills
        let none = LabelSet::EMPTY;
        memory.step(0, &INITIAL_STATE, &INITIAL_STATE, &INITIAL_STATE, none);
        memory.step(1, &INITIAL_STATE, &after, &INITIAL_STATE, none);
        for t in 2..=12 {
            memory.step(t, &after, &after, &after, none);
        }
        // t = 0 and t = 1: all 64 squares at staleness 0 or changed at 1 (e2, e4): bin 0 holds
        // 64 + 2 (t = 2: e2 and e4 have staleness 1 → bin 1, not 0).
        assert_eq!(memory.staleness[0][0], 64 + 2);
        assert_eq!(memory.staleness[0][1], 64, "e2 and e4 wrong at t = 1");
        assert_eq!(memory.staleness.iter().map(|c| c[0]).sum::<u32>(), 64 * 13);
        // At t = 10..=12 the unchanged squares are 10..12 plies stale; e2 and e4 join them at
        // t = 11 and 12.
        assert_eq!(memory.staleness[2][0], 62 * 3 + 2 * 2);
        assert_eq!(memory.castling, [[0; 2]; BINS.len()], "no right was lost");
    }

    #[test]
    fn a_lost_right_is_scored_from_the_step_that_loses_it() {
        let mut memory = Memory::default();
        let q = CASTLING_WHITE_KING_SIDE + 1;
        let mut lost = INITIAL_STATE;
        lost[q] = 0;
        let none = LabelSet::EMPTY;
        memory.step(0, &INITIAL_STATE, &INITIAL_STATE, &INITIAL_STATE, none);
        // Lost at t = 1, remembered at t = 1 but believed again at t = 2..=11.
        memory.step(1, &INITIAL_STATE, &lost, &lost, none);
        for t in 2..=11 {
            memory.step(t, &lost, &lost, &INITIAL_STATE, none);
        }
        assert_eq!(memory.castling[0], [1, 1], "t = 1: zero plies since");
        assert_eq!(memory.castling[1], [9, 0], "t = 2..=10");
        assert_eq!(memory.castling[2], [1, 0], "t = 11");
        assert_eq!(memory.castling[3..], [[0; 2]; 3]);
    }

    /// The packed id of a UCI move (`from · 64 + to`, times 5, plus the promotion: q r b n =
    /// 1..=4).
    fn token(uci: &str) -> u16 {
        let b = uci.as_bytes();
        let square = |f: u8, r: u8| u16::from(r - b'1') * 8 + u16::from(f - b'a');
        let promotion = match b.get(4) {
            Some(b'q') => 1,
            Some(b'r') => 2,
            Some(b'b') => 3,
            Some(b'n') => 4,
            _ => 0,
        };
        (square(b[0], b[1]) * 64 + square(b[2], b[3])) * 5 + promotion
    }

    /// White promotes on a8 to a knight (a2a4 … b7xa8=N) and the piece is scored on its
    /// square from the promotion on.
    #[test]
    fn promoted_pieces_are_scored_by_the_piece_they_became() {
        let ids = [
            "a2a4", "h7h6", "a4a5", "h6h5", "a5a6", "h5h4", "a6b7", "h4h3", "b7a8n", "h3g2",
        ];
        let mut tokens = vec![START];
        tokens.extend(ids.iter().map(|m| token(m)));
        let steps: Vec<StepTags> = GameTagger::new(&tokens, EpConvention::Reference)
            .map(Result::unwrap)
            .collect();
        let mut memory = Memory::default();
        let mut previous = INITIAL_STATE;
        memory.step(0, &previous, &previous, &previous, LabelSet::EMPTY);
        for step in &steps {
            let promoted = step.extra(EventTags::PROMOTED_PIECE_PRESENT);
            let mut pred = step.state;
            if step.t == 10 {
                pred[0] = 5; // a8 believed a queen at the last step
            }
            memory.step(step.t as u32, &previous, &step.state, &pred, promoted);
            previous = step.state;
        }
        assert_eq!(memory.promoted[3], [2, 1], "the knight at t = 9 and 10");
        assert_eq!(memory.promoted[..3], [[0; 2]; 3]);
    }

    #[test]
    fn only_pieces_a_pawn_becomes_count_as_promoted() {
        assert_eq!(promoted_index(5), Some(0));
        assert_eq!(promoted_index(11), Some(0));
        assert_eq!(promoted_index(8), Some(3));
        assert_eq!(promoted_index(1), None);
        assert_eq!(promoted_index(6), None);
        assert_eq!(promoted_index(0), None);
        assert_eq!(promoted_index(13), None);
    }
}
