//! The numbered counters every game fills ([`crate::stats::Tally`]): the numerators and
//! denominators of every rate over steps, summed over games for the point estimates and over
//! resampled games for the bootstrap intervals.
//!
//! Slots `0..FIXED` are fixed: a few shared denominators, then one range per measure (each
//! module declares how many it uses, `SLOTS`, and numbers its own from its base here). After
//! them come [`STRIDE`] slots per prefix bin (as many bins as the longest game needs), for
//! the rates by bin and the ply-matched lifts.

use super::{affordance, dynamics, events, fields, mass, memory, validity};

/// Steps (t = 0 included).
pub const STEPS: usize = 0;
/// Exact steps.
pub const EXACT: usize = 1;
/// Non-exact steps.
pub const NON_EXACT: usize = 2;
/// Steps with t < T (a next move exists).
pub const BEFORE_LAST: usize = 3;
/// Steps with t ≥ 1 (plies).
pub const AFTER_FIRST: usize = 4;
/// Steps with t ≥ 1 whose previous prediction is exact.
pub const PREV_EXACT: usize = 5;
/// Steps with t ≥ 1 whose previous prediction is not exact.
pub const PREV_WRONG: usize = 6;
/// Non-exact steps with t < T.
pub const NON_EXACT_BEFORE_LAST: usize = 7;
const COMMON: usize = 8;

/// First slot of E1.
pub const VALIDITY: usize = COMMON;
/// First slot of E2.
pub const FIELDS: usize = VALIDITY + validity::SLOTS;
/// First slot of E3.
pub const AFFORDANCE: usize = FIELDS + fields::SLOTS;
/// First slot of E4.
pub const DYNAMICS: usize = AFFORDANCE + affordance::SLOTS;
/// First slot of E5.
pub const EVENTS: usize = DYNAMICS + dynamics::SLOTS;
/// First slot of E12.
pub const MASS: usize = EVENTS + events::SLOTS;
/// First slot of E5's long-range memory measures.
pub const MEMORY: usize = MASS + mass::SLOTS;
/// Number of fixed slots; the per-bin slots follow.
pub const FIXED: usize = MEMORY + memory::SLOTS;

/// Per bin: steps.
pub const BIN_STEPS: usize = 0;
/// Per bin: non-exact steps.
pub const BIN_ERRORS: usize = 1;
/// Per bin: steps passing V1.
pub const BIN_V1: usize = 2;
/// Per bin: strict legal-move IoU summed.
pub const BIN_IOU: usize = 3;
/// Per bin: games whose first error lies in the bin.
pub const BIN_FIRST_ERRORS: usize = 4;
/// Per bin: steps carrying tag `e` at `BIN_TAGGED + 2e`, the non-exact ones at
/// `BIN_TAGGED + 2e + 1`.
pub const BIN_TAGGED: usize = 5;
/// Slots per bin.
pub const STRIDE: usize = BIN_TAGGED + 2 * events::N_TAGS;

/// The slot of per-bin quantity `offset` of bin `bin`.
pub const fn bin(bin: usize, offset: usize) -> usize {
    FIXED + bin * STRIDE + offset
}

/// Slots needed for `bins` prefix bins.
pub const fn total(bins: usize) -> usize {
    FIXED + bins * STRIDE
}
