//! E1: the validity hierarchy of predicted states. A step's tier is the highest of V0..V5
//! whose checks pass together with all the ones below it:
//!
//! * V0 syntactic, V1 valid position (python-chess's `Board.status()` flags), V2 counter- and
//!   V3 prefix-consistent: `cwm_chess::rules::validity`;
//! * V4 the game's next move is legal in the believed position (`rules::affords`), defined for
//!   t < T: at the last step it counts as passed for the tier, and the V4 share is over the
//!   steps that have a next move;
//! * V5 exact.
//!
//! The flags of every step go to the `flags` column of `steps.parquet`
//! ([`super::steps::FLAGS`]); the summary has each one's rate over all steps and over the
//! non-exact steps, the plausible-error share P(V1 | not exact), V1 by prefix bin and the
//! share of games with a V1 failure.

use cwm_chess::encode::{EP_FILE, EP_RANK, EpConvention, FULLMOVE_HI, StateLabels};
use cwm_chess::rules::{self, StatusFlags};
use cwm_formats::diagnose::{BinRate, NamedRate, Validity};

use super::slots;
use super::steps::{FLAG_COUNTERS, FLAG_EP_HALF_SET, FLAG_FULLMOVE_ZERO, FLAG_PREFIX, FLAGS};
use crate::stats::{Estimates, Tally, wilson_rate};

/// Number of flags with a rate in the summary ([`FLAGS`]).
const N_FLAGS: usize = FLAGS.len();
/// Tiers V0..V5.
const TIERS: usize = 6;

const TIER_PASSED: usize = 0;
const FLAG_ALL: usize = TIER_PASSED + TIERS;
const FLAG_NON_EXACT: usize = FLAG_ALL + N_FLAGS;
const TOO_MUCH_MATERIAL: usize = FLAG_NON_EXACT + N_FLAGS;
const STEPPER_DOUBLE_CHECK: usize = TOO_MUCH_MATERIAL + 1;
const V1_NON_EXACT: usize = STEPPER_DOUBLE_CHECK + 1;
/// Slots E1 uses.
pub const SLOTS: usize = V1_NON_EXACT + 1;

const fn slot(local: usize) -> usize {
    slots::VALIDITY + local
}

/// What E1 finds at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidityStep {
    /// Tiers passed cumulatively, 0..=6 (the `tier` column).
    pub tier: u8,
    /// The `flags` column.
    pub flags: u32,
    /// V1 passes.
    pub v1: bool,
}

/// The flag bits of a step: the status flags and the V0, V2 and V3 failures.
fn flag_word(labels: &StateLabels, validity: &rules::Validity) -> u32 {
    let mut flags = validity.flags.bits();
    if (labels[EP_FILE] == 0) != (labels[EP_RANK] == 0) {
        flags |= FLAG_EP_HALF_SET;
    }
    if labels[FULLMOVE_HI] == 0 && labels[FULLMOVE_HI + 1] == 0 {
        flags |= FLAG_FULLMOVE_ZERO;
    }
    if !validity.passes[2] {
        flags |= FLAG_COUNTERS;
    }
    if !validity.passes[3] {
        flags |= FLAG_PREFIX;
    }
    flags
}

/// Measures one step: `affords` is V4 (`None` at the last step), `exact` V5.
pub fn measure(
    pred: &StateLabels,
    t: u32,
    ep: EpConvention,
    affords: Option<bool>,
    exact: bool,
    tally: &mut Tally,
) -> ValidityStep {
    let validity = rules::validity(pred, t, ep);
    let flags = flag_word(pred, &validity);
    let passes = [
        validity.passes[0],
        validity.passes[1],
        validity.passes[2],
        validity.passes[3],
        affords.unwrap_or(true),
        exact,
    ];
    let tier = passes.iter().take_while(|&&pass| pass).count();
    for (k, counted) in (0..TIERS).zip([true, true, true, true, affords.is_some(), true]) {
        tally.count(slot(TIER_PASSED + k), counted && tier > k);
    }
    for (i, (bit, _)) in FLAGS.iter().enumerate() {
        let fired = flags & bit != 0;
        tally.count(slot(FLAG_ALL + i), fired);
        tally.count(slot(FLAG_NON_EXACT + i), fired && !exact);
    }
    tally.count(
        slot(TOO_MUCH_MATERIAL),
        validity.flags.contains(StatusFlags::TOO_MUCH_MATERIAL),
    );
    tally.count(
        slot(STEPPER_DOUBLE_CHECK),
        validity.flags.contains(StatusFlags::STEPPER_DOUBLE_CHECK),
    );
    let v1 = validity.flags.passes_v1();
    tally.count(slot(V1_NON_EXACT), v1 && !exact);
    ValidityStep {
        tier: tier as u8,
        flags,
        v1,
    }
}

/// The E1 section of the summary; `games_with_v1_failure` of `games` is counted by the
/// caller, `bins` is the number of prefix bins of `width` plies.
pub fn summarise(
    estimates: &Estimates,
    games_with_v1_failure: u64,
    games: u64,
    bins: usize,
    width: u32,
) -> Validity {
    let named = |base: usize, den: usize| -> Vec<NamedRate> {
        FLAGS
            .iter()
            .enumerate()
            .map(|(i, (_, name))| NamedRate {
                name: (*name).to_owned(),
                rate: estimates.rate(slot(base + i), den),
            })
            .collect()
    };
    Validity {
        tiers: (0..TIERS)
            .map(|k| {
                let den = if k == 4 {
                    slots::BEFORE_LAST
                } else {
                    slots::STEPS
                };
                estimates.rate(slot(TIER_PASSED + k), den)
            })
            .collect(),
        flags: named(FLAG_ALL, slots::STEPS),
        flags_non_exact: named(FLAG_NON_EXACT, slots::NON_EXACT),
        too_much_material: estimates.rate(slot(TOO_MUCH_MATERIAL), slots::STEPS),
        stepper_double_check: estimates.rate(slot(STEPPER_DOUBLE_CHECK), slots::STEPS),
        plausible_error_share: estimates.rate(slot(V1_NON_EXACT), slots::NON_EXACT),
        v1_by_bin: bin_rates(estimates, bins, width, slots::BIN_V1),
        games_with_v1_failure: wilson_rate(games_with_v1_failure, games),
    }
}

/// The rate of per-bin quantity `offset` over the bin's steps, for every bin with steps.
pub fn bin_rates(estimates: &Estimates, bins: usize, width: u32, offset: usize) -> Vec<BinRate> {
    (0..bins)
        .filter(|&b| estimates.total(slots::bin(b, slots::BIN_STEPS)) > 0.0)
        .map(|b| {
            let k = b as u32;
            BinRate {
                bin: k,
                start: k.saturating_mul(width),
                end: k.saturating_add(1).saturating_mul(width),
                rate: estimates.rate(slots::bin(b, offset), slots::bin(b, slots::BIN_STEPS)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::INITIAL_STATE;

    use super::*;
    use crate::stats::Bootstrap;

    #[test]
    fn the_flag_list_has_its_declared_length_and_distinct_bits() {
        let all = FLAGS.iter().fold(0u32, |acc, (bit, _)| {
            assert_eq!(acc & bit, 0, "bit {bit} twice");
            acc | bit
        });
        assert_eq!(all.count_ones() as usize, N_FLAGS);
        for (flag, name) in StatusFlags::ALL.iter().filter(|(f, _)| !f.passes_v1()) {
            assert!(
                FLAGS.contains(&(flag.bits(), name.to_ascii_lowercase().as_str())),
                "{name}"
            );
        }
    }

    #[test]
    fn tiers_are_cumulative_and_flags_name_their_reasons() {
        let ep = EpConvention::Reference;
        let mut tally = Tally::new();
        let exact = measure(&INITIAL_STATE, 0, ep, Some(true), true, &mut tally);
        assert_eq!((exact.tier, exact.flags, exact.v1), (6, 0, true));

        // The h1 rook gone with K still set: V0 passes, V1 fails, so the tier is 1 even though
        // the counters are right.
        let mut pred = INITIAL_STATE;
        pred[63] = 0;
        let step = measure(&pred, 0, ep, Some(true), false, &mut tally);
        assert_eq!(step.tier, 1);
        assert_eq!(step.flags, StatusFlags::BAD_CASTLING_RIGHTS.bits());
        assert!(!step.v1);

        // Right position, wrong ply: V3 fails; at the last step V4 is not asked.
        let step = measure(&INITIAL_STATE, 2, ep, None, false, &mut tally);
        assert_eq!(step.tier, 3);
        assert_eq!(step.flags, FLAG_PREFIX);

        // A half-set en-passant square and fullmove 0 fail V0.
        let mut pred = INITIAL_STATE;
        pred[EP_FILE] = 3;
        pred[FULLMOVE_HI + 1] = 0;
        let step = measure(&pred, 0, ep, Some(false), false, &mut tally);
        assert_eq!(step.tier, 0);
        assert_ne!(step.flags & FLAG_EP_HALF_SET, 0);
        assert_ne!(step.flags & FLAG_FULLMOVE_ZERO, 0);

        tally.add(slots::STEPS, 4.0);
        tally.add(slots::BEFORE_LAST, 3.0);
        tally.add(slots::NON_EXACT, 3.0);
        let bootstrap = Bootstrap::default();
        let summary = summarise(
            &Estimates {
                totals: tally.values(),
                bootstrap: &bootstrap,
            },
            1,
            1,
            0,
            20,
        );
        let passed: Vec<f64> = summary.tiers.iter().map(|r| r.num).collect();
        assert_eq!(passed, [3.0, 2.0, 2.0, 1.0, 1.0, 1.0]);
        assert_eq!(summary.tiers[4].n, 3, "V4 over the steps with a next move");
        // V0 failures need not be V1 failures: the half-set square reads as none.
        assert_eq!(summary.plausible_error_share.num, 2.0);
        let bad = summary
            .flags_non_exact
            .iter()
            .find(|f| f.name == "bad_castling_rights")
            .unwrap();
        assert_eq!((bad.rate.num, bad.rate.n), (1.0, 3));
    }
}
