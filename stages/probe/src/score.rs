//! Scoring a 64-square prediction against the truth: square accuracy, precision, recall and
//! F1 over the 13 classes weighted by each class's true count (the probing paper's
//! averaging), the board-exact rate, the accuracy of the 11 auxiliary labels when predicted,
//! and all of it by ply bin. Also the trivial predictor the probes must beat: the most
//! common class of each square in each ply bin.

use std::collections::BTreeMap;

use cwm_formats::probe::{BinScore, SquareScores};
use cwm_models::N_LABELS;

/// Squares on the board.
pub const SQUARES: usize = 64;
/// Classes of a square: empty and the twelve pieces.
pub const CLASSES: usize = 13;
/// Width of a ply bin.
pub const BIN: u32 = 20;

/// Counts behind [`SquareScores`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    hits: [u64; CLASSES],
    predicted: [u64; CLASSES],
    truth: [u64; CLASSES],
    boards: u64,
    boards_exact: u64,
    aux: u64,
    aux_right: u64,
    /// Per bin start: squares right, boards, boards exact.
    bins: BTreeMap<u32, (u64, u64, u64)>,
}

impl Tally {
    /// Counts one vector at step `t`: `pred` holds 64 or 75 predicted labels, `truth` the 75
    /// true ones; the auxiliary labels count only when `pred` has them.
    pub fn add(&mut self, pred: &[u8], truth: &[u8], t: u32) {
        let mut right = 0u64;
        for (&p, &y) in pred.iter().zip(truth).take(SQUARES) {
            let (p, y) = (
                usize::from(p).min(CLASSES - 1),
                usize::from(y).min(CLASSES - 1),
            );
            self.predicted[p] += 1;
            self.truth[y] += 1;
            if p == y {
                self.hits[y] += 1;
                right += 1;
            }
        }
        let exact = right == SQUARES as u64;
        self.boards += 1;
        self.boards_exact += u64::from(exact);
        if pred.len() >= N_LABELS && truth.len() >= N_LABELS {
            self.aux += (N_LABELS - SQUARES) as u64;
            self.aux_right += pred[SQUARES..N_LABELS]
                .iter()
                .zip(&truth[SQUARES..N_LABELS])
                .filter(|(p, y)| p == y)
                .count() as u64;
        }
        let bin = self.bins.entry(t / BIN * BIN).or_default();
        bin.0 += right;
        bin.1 += 1;
        bin.2 += u64::from(exact);
    }

    /// The scores; `None` where nothing was counted.
    pub fn scores(&self) -> SquareScores {
        let squares: u64 = self.truth.iter().sum();
        let hits: u64 = self.hits.iter().sum();
        let (mut precision, mut recall, mut f1) = (0.0, 0.0, 0.0);
        for c in 0..CLASSES {
            let weight = ratio(self.truth[c], squares).unwrap_or(0.0);
            let p = ratio(self.hits[c], self.predicted[c]).unwrap_or(0.0);
            let r = ratio(self.hits[c], self.truth[c]).unwrap_or(0.0);
            let f = if p + r > 0.0 {
                2.0 * p * r / (p + r)
            } else {
                0.0
            };
            precision += weight * p;
            recall += weight * r;
            f1 += weight * f;
        }
        let defined = |v: f64| (squares > 0).then_some(v);
        SquareScores {
            square_acc: ratio(hits, squares),
            precision_w: defined(precision),
            recall_w: defined(recall),
            f1_w: defined(f1),
            board_exact: ratio(self.boards_exact, self.boards),
            aux_acc: ratio(self.aux_right, self.aux),
            by_bin: self
                .bins
                .iter()
                .map(|(&start, &(right, boards, exact))| BinScore {
                    start,
                    end: start + BIN,
                    vectors: boards,
                    square_acc: ratio(right, boards * SQUARES as u64),
                    board_exact: ratio(exact, boards),
                })
                .collect(),
        }
    }
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// Scores `pred` (`width` labels per vector, 64 or 75) against `labels` (75 per vector) at
/// `steps`.
pub fn score(pred: &[u8], width: usize, labels: &[u8], steps: &[u32]) -> SquareScores {
    let mut tally = Tally::default();
    for ((p, y), &t) in pred
        .chunks_exact(width)
        .zip(labels.chunks_exact(N_LABELS))
        .zip(steps)
    {
        tally.add(p, y, t);
    }
    tally.scores()
}

/// The most common class of each square in each ply bin of a set of vectors (ties to the
/// lower class), falling back to the whole set's for a bin it never saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Majority {
    by_bin: BTreeMap<u32, [u8; SQUARES]>,
    overall: [u8; SQUARES],
}

impl Majority {
    /// Counts the rows `rows` of `labels` (75 per vector) at `steps`.
    pub fn fit(labels: &[u8], steps: &[u32], rows: &[usize]) -> Majority {
        let mut counts: BTreeMap<u32, Vec<[u32; CLASSES]>> = BTreeMap::new();
        let mut overall = vec![[0u32; CLASSES]; SQUARES];
        for &r in rows {
            let bin = counts
                .entry(steps[r] / BIN * BIN)
                .or_insert_with(|| vec![[0; CLASSES]; SQUARES]);
            for s in 0..SQUARES {
                let c = usize::from(labels[r * N_LABELS + s]).min(CLASSES - 1);
                bin[s][c] += 1;
                overall[s][c] += 1;
            }
        }
        Majority {
            by_bin: counts.iter().map(|(&b, c)| (b, argmax_each(c))).collect(),
            overall: argmax_each(&overall),
        }
    }

    /// The majority board at step `t`.
    pub fn predict(&self, t: u32) -> &[u8; SQUARES] {
        self.by_bin.get(&(t / BIN * BIN)).unwrap_or(&self.overall)
    }
}

fn argmax_each(counts: &[[u32; CLASSES]]) -> [u8; SQUARES] {
    let mut out = [0u8; SQUARES];
    for (slot, c) in out.iter_mut().zip(counts) {
        let best = (0..CLASSES).rev().max_by_key(|&k| c[k]).unwrap_or(0);
        *slot = best as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(squares: [u8; SQUARES]) -> Vec<u8> {
        let mut v = squares.to_vec();
        v.resize(N_LABELS, 0);
        v
    }

    #[test]
    fn weighted_scores_follow_the_class_counts() {
        // Truth: square 0 is class 1 in both vectors, the rest empty. Prediction: the first
        // vector right everywhere, the second calls square 0 empty.
        let mut truth = [0u8; SQUARES];
        truth[0] = 1;
        let mut wrong = truth;
        wrong[0] = 0;
        let labels = [state(truth), state(truth)].concat();
        let pred = [truth.to_vec(), wrong.to_vec()].concat();
        let s = score(&pred, SQUARES, &labels, &[0, 25]);
        assert_eq!(s.square_acc, Some(127.0 / 128.0));
        assert_eq!(s.recall_w, s.square_acc, "weighted recall is accuracy");
        assert_eq!(s.board_exact, Some(0.5));
        assert_eq!(s.aux_acc, None, "no auxiliary labels predicted");
        // Class 0: 126 true, 127 predicted, 126 hits; class 1: 2 true, 1 predicted, 1 hit.
        let p = 126.0 / 128.0 * (126.0 / 127.0) + 2.0 / 128.0 * 1.0;
        assert!((s.precision_w.unwrap() - p).abs() < 1e-12);
        let f0 = 2.0 * (126.0 / 127.0) / (126.0 / 127.0 + 1.0);
        let f1 = 2.0 * 0.5 / 1.5;
        let f = 126.0 / 128.0 * f0 + 2.0 / 128.0 * f1;
        assert!((s.f1_w.unwrap() - f).abs() < 1e-12);
        let bins: Vec<(u32, u64, Option<f64>)> = s
            .by_bin
            .iter()
            .map(|b| (b.start, b.vectors, b.board_exact))
            .collect();
        assert_eq!(bins, vec![(0, 1, Some(1.0)), (20, 1, Some(0.0))]);
    }

    #[test]
    fn auxiliary_labels_count_when_predicted_and_nothing_scores_as_none() {
        let truth = state([0; SQUARES]);
        let mut pred = truth.clone();
        pred[70] = 3;
        let s = score(&pred, N_LABELS, &truth, &[0]);
        assert_eq!(s.aux_acc, Some(10.0 / 11.0));
        let empty = score(&[], SQUARES, &[], &[]);
        assert_eq!(
            (empty.square_acc, empty.f1_w, empty.board_exact),
            (None, None, None)
        );
        assert!(empty.by_bin.is_empty());
    }

    #[test]
    fn the_majority_board_is_per_bin_with_a_fallback() {
        let mut early = [0u8; SQUARES];
        early[5] = 7;
        let late = [2u8; SQUARES];
        let labels = [state(early), state(early), state(late)].concat();
        let majority = Majority::fit(&labels, &[1, 3, 45], &[0, 1, 2]);
        assert_eq!(majority.predict(10)[5], 7);
        assert_eq!(majority.predict(41)[0], 2);
        // Bin 20..40 was never seen: the whole set's majority (class 0 on square 0, 2 of 3).
        assert_eq!(majority.predict(30)[0], 0);
        assert_eq!(majority.predict(30)[5], 7);
    }
}
