//! What one kind of edit did, counted over cases: the columns of an
//! [`EditRow`](cwm_formats::edit::EditRow).

use cwm_chess::encode::StateLabels;
use cwm_formats::edit::EditRow;
use cwm_models::LABEL_GROUPS;

use super::cases::EMPTY;

/// Classes per square label (the head's first group).
const SQUARE_CLASSES: usize = LABEL_GROUPS[0].n_classes;
/// Square labels.
const SQUARES: usize = LABEL_GROUPS[0].n_labels;

/// What the model predicts for one case under one edit.
#[derive(Debug, Clone, PartialEq)]
pub struct Readout {
    /// The 75 predicted labels at t, t + 1, …: one state per step followed.
    pub labels: Vec<StateLabels>,
    /// The head's probabilities of the square labels at t, `[64 × 13]`.
    pub square_probs: Vec<f32>,
}

/// What an edited prediction is graded against.
#[derive(Debug, Clone, Copy)]
pub struct Grading<'a> {
    /// The state the edit aims at, at t.
    pub target: &'a StateLabels,
    /// The states to compare with at t + 1..=t + K (empty: persistence is not followed).
    pub later: &'a [StateLabels],
}

/// Counts over cases for one row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    cases: u64,
    flip: u64,
    collateral: u64,
    target_exact: u64,
    target_mass: f64,
    agreement: u64,
    persist_flip: Vec<u64>,
    persist_exact: Vec<u64>,
    followed: u64,
    held: u64,
    flip_held: u64,
    persist_flip_held: Vec<u64>,
}

impl Tally {
    /// Counts one case: s is `square` and holds `piece`, `unedited` is the unedited readout
    /// at t.
    pub fn add(
        &mut self,
        (square, piece): (usize, u8),
        unedited: &StateLabels,
        edited: &Readout,
        grading: Grading<'_>,
    ) {
        let Some(at_t) = edited.labels.first() else {
            return;
        };
        self.cases += 1;
        self.flip += u64::from(at_t[square] == EMPTY);
        self.collateral += at_t
            .iter()
            .zip(unedited)
            .enumerate()
            .filter(|&(i, (a, b))| i != square && a != b)
            .count() as u64;
        self.target_exact += u64::from(at_t == grading.target);
        self.target_mass += mass(&edited.square_probs, grading.target);
        self.agreement += u64::from(at_t == unedited);
        let held = unedited[square] == piece;
        self.held += u64::from(held);
        self.flip_held += u64::from(held && at_t[square] == EMPTY);
        if grading.later.is_empty() {
            return;
        }
        let k = grading.later.len();
        for counts in [
            &mut self.persist_flip,
            &mut self.persist_exact,
            &mut self.persist_flip_held,
        ] {
            counts.resize(k, 0);
        }
        self.followed += 1;
        for (i, (predicted, expected)) in edited.labels[1..].iter().zip(grading.later).enumerate() {
            let empty = predicted[square] == EMPTY;
            self.persist_flip[i] += u64::from(empty);
            self.persist_exact[i] += u64::from(predicted == expected);
            self.persist_flip_held[i] += u64::from(held && empty);
        }
    }

    /// The row of these counts.
    pub fn row(
        &self,
        variant: &str,
        (layer, layer_name): (u32, &str),
        vector: &str,
        alpha: f64,
    ) -> EditRow {
        let share = |n: u64| ratio(n as f64, self.cases);
        let later = |counts: &[u64], of: u64| -> Vec<Option<f64>> {
            counts.iter().map(|&n| ratio(n as f64, of)).collect()
        };
        let held_followed = if self.followed > 0 { self.held } else { 0 };
        EditRow {
            variant: variant.to_owned(),
            layer,
            layer_name: layer_name.to_owned(),
            vector: vector.to_owned(),
            alpha,
            cases: self.cases,
            flip: share(self.flip),
            held: self.held,
            flip_held: ratio(self.flip_held as f64, self.held),
            collateral: share(self.collateral),
            target_exact: share(self.target_exact),
            target_mass: ratio(self.target_mass, self.cases),
            argmax_agreement: share(self.agreement),
            persist_flip: later(&self.persist_flip, self.followed),
            persist_exact: later(&self.persist_exact, self.followed),
            persist_flip_held: later(&self.persist_flip_held, held_followed),
        }
    }
}

/// The mean over the 64 squares of the probability given to `target`'s class
/// (`probs` is `[64 × 13]`; 0 when it is short).
pub fn mass(probs: &[f32], target: &StateLabels) -> f64 {
    if probs.len() < SQUARES * SQUARE_CLASSES {
        return 0.0;
    }
    let total: f64 = (0..SQUARES)
        .map(|j| f64::from(probs[j * SQUARE_CLASSES + usize::from(target[j])]))
        .sum();
    total / SQUARES as f64
}

fn ratio(num: f64, den: u64) -> Option<f64> {
    (den > 0).then(|| num / den as f64)
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::INITIAL_STATE;

    use super::*;

    fn one_hot(state: &StateLabels) -> Vec<f32> {
        let mut probs = vec![0.0; SQUARES * SQUARE_CLASSES];
        for j in 0..SQUARES {
            probs[j * SQUARE_CLASSES + usize::from(state[j])] = 1.0;
        }
        probs
    }

    #[test]
    fn a_flip_counts_once_and_collateral_leaves_the_square_out() {
        let unedited = INITIAL_STATE;
        let mut target = INITIAL_STATE;
        target[57] = EMPTY; // b1
        let mut edited_state = target;
        edited_state[70] = 1; // a changed counter label: collateral
        let later = [target, target];
        let edited = Readout {
            labels: vec![edited_state, target, unedited],
            square_probs: one_hot(&target),
        };
        let mut tally = Tally::default();
        let grading = Grading {
            target: &target,
            later: &later,
        };
        tally.add((57, 2), &unedited, &edited, grading);
        let row = tally.row("persistent", (0, "embedding"), "probe", 2.0);
        assert_eq!(row.cases, 1);
        assert_eq!(row.flip, Some(1.0));
        assert_eq!(row.collateral, Some(1.0));
        assert_eq!(row.target_exact, Some(0.0));
        assert_eq!(row.target_mass, Some(1.0));
        assert_eq!(row.argmax_agreement, Some(0.0));
        assert_eq!(row.persist_flip, vec![Some(1.0), Some(0.0)]);
        assert_eq!(row.persist_exact, vec![Some(1.0), Some(0.0)]);
        // The unedited model had the white knight on b1: the case is held.
        assert_eq!((row.held, row.flip_held), (1, Some(1.0)));
        assert_eq!(row.persist_flip_held, vec![Some(1.0), Some(0.0)]);
        // A case the unedited model already had wrong is not held.
        let mut wrong = unedited;
        wrong[57] = EMPTY;
        tally.add((57, 2), &wrong, &edited, grading);
        let row = tally.row("persistent", (0, "embedding"), "probe", 2.0);
        assert_eq!((row.cases, row.held, row.flip_held), (2, 1, Some(1.0)));
    }

    #[test]
    fn an_empty_tally_has_no_rates() {
        let row = Tally::default().row("next_move", (0, "embedding"), "none", 0.0);
        assert_eq!((row.flip, row.target_mass), (None, None));
        assert!(row.persist_flip.is_empty());
    }

    #[test]
    fn mass_is_the_mean_square_probability_of_the_target() {
        let mut probs = one_hot(&INITIAL_STATE);
        assert_eq!(mass(&probs, &INITIAL_STATE), 1.0);
        probs[0] = 0.5; // a8: half on "empty", half on the rook
        probs[10] = 0.5;
        assert!((mass(&probs, &INITIAL_STATE) - (63.5 / 64.0)).abs() < 1e-12);
        assert_eq!(mass(&[], &INITIAL_STATE), 0.0);
    }
}
