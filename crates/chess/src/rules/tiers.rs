//! E1's validity tiers: V0 syntactic, V1 valid position ([`status`](super::status)), V2
//! counter-consistent, V3 prefix-consistent, and V4's next-move affordance.

use super::moves::{in_range, playable_of_reading};
use super::status::status_of;
use super::{Reading, StatusFlags, move_of_token, playable, read_labels};
use crate::encode::{
    EP_FILE, EP_RANK, EpConvention, FULLMOVE_HI, HALFMOVE_HI, SIDE_TO_MOVE, StateLabels,
};

/// The highest cumulative tier a state reaches: each tier needs all the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Not even V0: the labels do not make a well-formed FEN.
    BelowV0,
    /// V0 syntactic: labels in range, en-passant file and rank both set or both unset, fullmove
    /// number at least 1.
    V0,
    /// V1 valid position: none of python-chess's 14 status flags ([`StatusFlags::V1`]).
    V1,
    /// V2 counter-consistent ([`counter_consistent`]).
    V2,
    /// V3 prefix-consistent with the step ([`prefix_consistent`]).
    V3,
}

impl Tier {
    /// The tiers in order.
    pub const ALL: [Tier; 5] = [Tier::BelowV0, Tier::V0, Tier::V1, Tier::V2, Tier::V3];

    /// Stable name for reports: `"below_V0"`, `"V0"` … `"V3"`.
    pub const fn name(self) -> &'static str {
        match self {
            Tier::BelowV0 => "below_V0",
            Tier::V0 => "V0",
            Tier::V1 => "V1",
            Tier::V2 => "V2",
            Tier::V3 => "V3",
        }
    }
}

/// A state's tier together with its flags (so callers need not compute [`status`](super::status)
/// twice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// The highest cumulative tier reached.
    pub tier: Tier,
    /// All 16 flags ([`StatusFlags::V1`] decides V1; the other two are reported separately).
    pub flags: StatusFlags,
    /// Whether each check passes on its own, V0 to V3 (the tier is the cumulative reading).
    pub passes: [bool; 4],
}

/// V0: every label is in range for its index, the en-passant file and rank are both "none" or
/// both set, and the fullmove number is at least 1 (a FEN needs a positive number).
pub fn syntactic(labels: &StateLabels) -> bool {
    in_range(labels) && ((labels[EP_FILE] == 0) == (labels[EP_RANK] == 0)) && fullmoves(labels) >= 1
}

/// The fullmove number of the labels.
fn fullmoves(labels: &StateLabels) -> u16 {
    u16::from_be_bytes([labels[FULLMOVE_HI], labels[FULLMOVE_HI + 1]])
}

/// V2: an en-passant square is set (both its labels) ⇒ the halfmove clock is 0, and the
/// halfmove clock is at most the plies the fullmove number and side allow,
/// `2 · (fullmove − 1) + [black to move]`.
pub fn counter_consistent(labels: &StateLabels) -> bool {
    counters_consistent(&read_labels(labels))
}

fn counters_consistent(reading: &Reading) -> bool {
    let ep_ok = reading.ep_square.is_none() || reading.halfmoves == 0;
    let plies = 2 * (i64::from(reading.fullmoves) - 1) + i64::from(reading.turn.is_black());
    ep_ok && i64::from(reading.halfmoves) <= plies
}

/// V3, for the state after `t` plies of a game from the initial position: side to move is
/// `t mod 2` (the label), fullmove number is `1 + ⌊t/2⌋` (clamped to 65535 as the labels are) and
/// the halfmove clock is at most `t`.
pub fn prefix_consistent(labels: &StateLabels, t: u32) -> bool {
    let fullmove = u16::try_from(1 + u64::from(t) / 2).unwrap_or(u16::MAX);
    let halfmove = u16::from_be_bytes([labels[HALFMOVE_HI], labels[HALFMOVE_HI + 1]]);
    u32::from(labels[SIDE_TO_MOVE]) == t % 2
        && fullmoves(labels) == fullmove
        && u32::from(halfmove) <= t
}

/// The tier of a state after `t` plies and its flags under the data's en-passant convention.
pub fn validity(labels: &StateLabels, t: u32, ep: EpConvention) -> Validity {
    validity_of(labels, &read_labels(labels), t, ep)
}

/// [`validity`] and, with `next_token`, [`affords`] of one state, its labels read once.
pub fn validity_and_affords(
    labels: &StateLabels,
    t: u32,
    ep: EpConvention,
    next_token: Option<u16>,
) -> (Validity, Option<bool>) {
    let reading = read_labels(labels);
    let validity = validity_of(labels, &reading, t, ep);
    let affords = next_token.map(|token| {
        in_range(labels)
            && playable_of_reading(reading)
                .is_some_and(|position| move_of_token(&position, token).is_some())
    });
    (validity, affords)
}

/// [`validity`] of labels already read.
fn validity_of(labels: &StateLabels, reading: &Reading, t: u32, ep: EpConvention) -> Validity {
    let flags = status_of(reading, ep);
    let passes = [
        syntactic(labels),
        flags.passes_v1(),
        counters_consistent(reading),
        prefix_consistent(labels, t),
    ];
    let reached = passes.iter().take_while(|&&pass| pass).count();
    Validity {
        tier: Tier::ALL[reached],
        flags,
        passes,
    }
}

/// V4: whether `next_token` is a legal move in [`playable`]`(labels)` (`false` when the state is
/// not playable or the token is no move).
pub fn affords(labels: &StateLabels, next_token: u16) -> bool {
    playable(labels).is_some_and(|position| move_of_token(&position, next_token).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::INITIAL_STATE;

    #[test]
    fn the_initial_state_reaches_v3_at_step_0_only() {
        let v = validity(&INITIAL_STATE, 0, EpConvention::Reference);
        assert_eq!(v.tier, Tier::V3);
        assert_eq!(v.passes, [true; 4]);
        let v = validity(&INITIAL_STATE, 1, EpConvention::Reference);
        assert_eq!(v.tier, Tier::V2);
        assert_eq!(v.passes, [true, true, true, false]);
    }

    #[test]
    fn v0_needs_in_range_labels_a_whole_ep_pair_and_a_positive_fullmove() {
        let mut labels = INITIAL_STATE;
        labels[EP_FILE] = 3;
        assert!(!syntactic(&labels));
        labels[EP_RANK] = 2;
        assert!(syntactic(&labels));
        labels[EP_FILE] = 0;
        assert!(!syntactic(&labels));

        let mut labels = INITIAL_STATE;
        labels[FULLMOVE_HI + 1] = 0;
        assert!(!syntactic(&labels));
        assert_eq!(
            validity(&labels, 0, EpConvention::Reference).tier,
            Tier::BelowV0
        );
        labels[FULLMOVE_HI] = 1;
        assert!(syntactic(&labels));

        let mut labels = INITIAL_STATE;
        labels[10] = 13;
        assert!(!syntactic(&labels));
    }

    #[test]
    fn v2_ties_the_clock_to_the_move_number_and_en_passant() {
        let mut labels = INITIAL_STATE;
        labels[HALFMOVE_HI + 1] = 1;
        assert!(!counter_consistent(&labels)); // one ply cannot have been played at move 1, White
        labels[SIDE_TO_MOVE] = 1;
        assert!(counter_consistent(&labels));
        labels[EP_FILE] = 5;
        labels[EP_RANK] = 1;
        assert!(!counter_consistent(&labels)); // a double push resets the clock
        labels[HALFMOVE_HI + 1] = 0;
        assert!(counter_consistent(&labels));
        labels[FULLMOVE_HI + 1] = 0;
        assert!(!counter_consistent(&labels)); // fullmove 0 allows no ply
    }

    #[test]
    fn v3_follows_the_step() {
        let mut labels = INITIAL_STATE;
        labels[SIDE_TO_MOVE] = 1;
        labels[HALFMOVE_HI + 1] = 1;
        assert!(prefix_consistent(&labels, 1));
        assert!(!prefix_consistent(&labels, 2));
        labels[SIDE_TO_MOVE] = 0;
        labels[FULLMOVE_HI + 1] = 2;
        assert!(prefix_consistent(&labels, 2));
        labels[HALFMOVE_HI + 1] = 3;
        assert!(!prefix_consistent(&labels, 2));
        // Fullmove 256 sits in the high byte from ply 510 on.
        labels[HALFMOVE_HI + 1] = 0;
        labels[FULLMOVE_HI] = 1;
        labels[FULLMOVE_HI + 1] = 0;
        assert!(prefix_consistent(&labels, 510));
        assert!(!prefix_consistent(&labels, 508));
    }

    #[test]
    fn validity_and_affords_together_equal_each_on_its_own() {
        // Perturbations of the initial state, label by label, each class in turn: every one
        // read once by the pair and twice on its own.
        // e2e4, b1c3, e7e5 and a token that is no move.
        let moves = [(12 * 64 + 28) * 5, (64 + 18) * 5, (52 * 64 + 36) * 5, 7];
        let mut checked = 0;
        for label in 0..crate::encode::STATE_LEN {
            for class in 0..crate::encode::LABEL_CLASSES[label].min(14) {
                let mut labels = INITIAL_STATE;
                labels[label] = class as u8;
                for (i, &token) in moves.iter().enumerate() {
                    let t = i as u32;
                    let ep = EpConvention::ALL[i % 2];
                    let (v, a) = validity_and_affords(&labels, t, ep, Some(token));
                    assert_eq!(v, validity(&labels, t, ep), "label {label} = {class}");
                    assert_eq!(a, Some(affords(&labels, token)), "label {label} = {class}");
                    checked += 1;
                }
                assert_eq!(
                    validity_and_affords(&labels, 0, EpConvention::Reference, None).1,
                    None
                );
            }
        }
        assert!(checked > 3000, "{checked}");
    }

    #[test]
    fn a_state_without_a_black_king_affords_nothing() {
        assert!(affords(&INITIAL_STATE, (12 * 64 + 28) * 5)); // e2e4
        assert!(!affords(&INITIAL_STATE, (12 * 64 + 36) * 5)); // e2e5
        assert!(!affords(&INITIAL_STATE, crate::encode::START));
        let mut labels = INITIAL_STATE;
        labels[4] = 0;
        assert!(!affords(&labels, (12 * 64 + 28) * 5));
    }
}
