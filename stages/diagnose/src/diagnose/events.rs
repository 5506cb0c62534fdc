//! E5: rare events, first-error attribution and long-range memory.
//!
//! Every step t ≥ 1 carries the tags `cwm_chess::rules::GameTagger` gives it (computed from
//! the true state before it and the move), plus `long_game` when t is above the threshold.
//! Per tag: its count and rate per 1,000 plies, ExactState at the tagged steps, the
//! relevant-label accuracy (every label of `F(m_t) ∪ R(tag)` right), the aftershock
//! (ExactState 1..=5 plies later) and the ply-matched lift
//! ([`crate::stats::ply_matched_lift`]) — all bootstrapped over games.
//!
//! First errors (each game's first non-exact step): the share carrying each tag (Wilson), the
//! first-error lift (that share over the tag's rate among all steps of the first errors'
//! prefix bins, bootstrapped over games) and which of E2's fields are wrong there.
//!
//! The long-range memory measures (staleness, lost castling rights, promoted pieces) are
//! counted by [`super::memory`] and summarised here with the rest of E5.

use cwm_chess::encode::StateLabels;
use cwm_chess::rules::{EventTags, StepTags};
use cwm_formats::diagnose::{Events, FirstErrorTag, FirstErrors, NamedRate, TagStats};

use super::fields::FIELD_NAMES;
use super::memory;
use super::slots;
use crate::stats::{BinCounts, Estimates, Tally, ply_matched_lift, ratio, wilson_rate};

/// Number of tags: the tagger's, `long_game` included (bit `e` of the `tags` column is tag
/// `e`).
pub const N_TAGS: usize = EventTags::COUNT;
/// Plies after a tagged step whose ExactState is its aftershock.
pub const AFTERSHOCK: usize = 5;

const TAG_N: usize = 0;
const TAG_EXACT: usize = 1;
const TAG_RELEVANT: usize = 2;
const TAG_AFTER_N: usize = 3;
const TAG_AFTER_EXACT: usize = TAG_AFTER_N + AFTERSHOCK;
const PER_TAG: usize = TAG_AFTER_EXACT + AFTERSHOCK;
const FIRST_ERRORS: usize = N_TAGS * PER_TAG;
const FIRST_ERROR_TAGGED: usize = FIRST_ERRORS + 1;
/// Slots E5 uses.
pub const SLOTS: usize = FIRST_ERROR_TAGGED + N_TAGS;

const fn slot(local: usize) -> usize {
    slots::EVENTS + local
}

const fn tag_slot(tag: usize, local: usize) -> usize {
    slot(tag * PER_TAG + local)
}

/// The tags of a step: the tagger's, with `long_game` when `t` is above `long_game_ply`.
pub fn step_tags(step: &StepTags, long_game_ply: Option<u32>) -> EventTags {
    let long = long_game_ply.is_some_and(|ply| step.t as u64 > u64::from(ply));
    if long {
        step.tags | EventTags::LONG_GAME
    } else {
        step.tags
    }
}

/// Records a tagged step t ≥ 1: `tags` from [`step_tags`].
pub fn record_step(
    step: &StepTags,
    tags: EventTags,
    pred: &StateLabels,
    exact: bool,
    bin: usize,
    tally: &mut Tally,
) {
    for tag in tags.iter() {
        let e = tag.bits().trailing_zeros() as usize;
        tally.add(tag_slot(e, TAG_N), 1.0);
        tally.count(tag_slot(e, TAG_EXACT), exact);
        let relevant = exact || step.relevant(tag).all_equal(pred, &step.state);
        tally.count(tag_slot(e, TAG_RELEVANT), relevant);
        tally.add(slots::bin(bin, slots::BIN_TAGGED + 2 * e), 1.0);
        tally.count(slots::bin(bin, slots::BIN_TAGGED + 2 * e + 1), !exact);
    }
}

/// Records the aftershocks of a game: `tags[t]` are the tag bits of step t, `exact[t]` its
/// ExactState.
pub fn record_aftershocks(tags: &[u32], exact: &[bool], tally: &mut Tally) {
    for (t, &bits) in tags.iter().enumerate() {
        let mut rest = bits;
        while rest != 0 {
            let e = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            for k in 1..=AFTERSHOCK {
                let Some(&later) = exact.get(t + k) else {
                    break;
                };
                tally.add(tag_slot(e, TAG_AFTER_N + k - 1), 1.0);
                tally.count(tag_slot(e, TAG_AFTER_EXACT + k - 1), later);
            }
        }
    }
}

/// Records a game's first error, at step `t` in prefix bin `bin`, with its tag bits.
pub fn record_first_error(tags: u32, bin: usize, tally: &mut Tally) {
    tally.add(slot(FIRST_ERRORS), 1.0);
    tally.add(slots::bin(bin, slots::BIN_FIRST_ERRORS), 1.0);
    for e in 0..N_TAGS {
        tally.count(slot(FIRST_ERROR_TAGGED + e), tags & (1 << e) != 0);
    }
}

/// Which fields are wrong at first errors: per field of [`FIELD_NAMES`], and the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstErrorFields {
    /// First errors.
    pub n: u64,
    /// Per field: first errors where it is wrong.
    pub wrong: [u64; 6],
}

impl FirstErrorFields {
    /// Records a first error with FieldExact bits `fields`.
    pub fn add(&mut self, fields: u8) {
        self.n += 1;
        for (f, wrong) in self.wrong.iter_mut().enumerate() {
            *wrong += u64::from(fields & (1 << f) == 0);
        }
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &FirstErrorFields) {
        self.n += other.n;
        for (a, b) in self.wrong.iter_mut().zip(other.wrong) {
            *a += b;
        }
    }
}

/// The ply-matched lift of tag `e` over the totals.
fn tag_lift(totals: &[f64], bins: usize, e: usize) -> Option<f64> {
    let at = |s: usize| totals.get(s).copied().unwrap_or(0.0);
    ply_matched_lift((0..bins).map(|b| BinCounts {
        tagged: at(slots::bin(b, slots::BIN_TAGGED + 2 * e)),
        tagged_errors: at(slots::bin(b, slots::BIN_TAGGED + 2 * e + 1)),
        steps: at(slots::bin(b, slots::BIN_STEPS)),
        errors: at(slots::bin(b, slots::BIN_ERRORS)),
    }))
}

/// The first-error lift of tag `e`: its share of first errors over its rate among all steps
/// of the first errors' bins, `Σ_b (f_b / F) · (n_b^e / n_b)`.
fn first_error_lift(totals: &[f64], bins: usize, e: usize) -> Option<f64> {
    let at = |s: usize| totals.get(s).copied().unwrap_or(0.0);
    let first_errors = at(slot(FIRST_ERRORS));
    let share = ratio(at(slot(FIRST_ERROR_TAGGED + e)), first_errors)?;
    let mut base = 0.0;
    for b in 0..bins {
        let f = at(slots::bin(b, slots::BIN_FIRST_ERRORS));
        let steps = at(slots::bin(b, slots::BIN_STEPS));
        if f > 0.0 && steps > 0.0 {
            base += f / first_errors * at(slots::bin(b, slots::BIN_TAGGED + 2 * e)) / steps;
        }
    }
    ratio(share, base)
}

fn tag_stats(estimates: &Estimates, bins: usize, e: usize, name: &str) -> TagStats {
    let n = estimates.total(tag_slot(e, TAG_N)).round() as u64;
    TagStats {
        tag: name.to_owned(),
        n,
        per_1000: estimates.rate_scaled(tag_slot(e, TAG_N), slots::AFTER_FIRST, 1000),
        exact_state: estimates.rate(tag_slot(e, TAG_EXACT), tag_slot(e, TAG_N)),
        relevant_accuracy: estimates.rate(tag_slot(e, TAG_RELEVANT), tag_slot(e, TAG_N)),
        aftershock: (0..AFTERSHOCK)
            .map(|k| {
                estimates.rate(
                    tag_slot(e, TAG_AFTER_EXACT + k),
                    tag_slot(e, TAG_AFTER_N + k),
                )
            })
            .collect(),
        lift: estimates.ratio_of(n, |totals| tag_lift(totals, bins, e)),
    }
}

/// The E5 section of the summary over `bins` prefix bins.
pub fn summarise(
    estimates: &Estimates,
    bins: usize,
    long_game_ply: Option<u32>,
    first_error_fields: &FirstErrorFields,
) -> Events {
    let memory = memory::summarise(estimates);
    let first_errors = estimates.total(slot(FIRST_ERRORS)).round() as u64;
    Events {
        long_game_ply,
        tags: EventTags::ALL
            .iter()
            .enumerate()
            .map(|(e, &(_, name))| tag_stats(estimates, bins, e, name))
            .collect(),
        first_errors: FirstErrors {
            n: first_errors,
            tags: EventTags::ALL
                .iter()
                .enumerate()
                .map(|(e, &(_, name))| {
                    let tagged = estimates.total(slot(FIRST_ERROR_TAGGED + e)).round() as u64;
                    FirstErrorTag {
                        tag: name.to_owned(),
                        share: wilson_rate(tagged, first_errors),
                        lift: estimates
                            .ratio_of(tagged, |totals| first_error_lift(totals, bins, e)),
                    }
                })
                .collect(),
            groups_wrong: FIELD_NAMES
                .iter()
                .zip(first_error_fields.wrong)
                .map(|(&name, wrong)| NamedRate {
                    name: name.to_owned(),
                    rate: wilson_rate(wrong, first_error_fields.n),
                })
                .collect(),
        },
        staleness: memory.staleness,
        castling_since_lost: memory.castling_since_lost,
        promoted_identity: memory.promoted_identity,
    }
}

#[cfg(test)]
mod tests {
    use cwm_chess::encode::{EpConvention, START};
    use cwm_chess::rules::GameTagger;

    use super::*;
    use crate::stats::Bootstrap;

    #[test]
    fn tags_relevance_and_aftershocks() {
        let e2e4 = (12 * 64 + 28) * 5;
        let d7d5 = (51 * 64 + 35) * 5;
        let e4d5 = (28 * 64 + 35) * 5;
        let tokens = [START, e2e4, d7d5, e4d5];
        let steps: Vec<StepTags> = GameTagger::new(&tokens, EpConvention::Reference)
            .map(Result::unwrap)
            .collect();
        let mut tally = Tally::new();
        // The capture exd5 predicted with d5 still black: not relevant-accurate; the double
        // push d7d5 with a wrong clock: relevant (the clock is not relevant to double_push).
        let mut wrong_capture = steps[2].state;
        wrong_capture[27] = 7;
        let mut wrong_clock = steps[1].state;
        wrong_clock[72] = 3;
        record_step(&steps[1], steps[1].tags, &wrong_clock, false, 0, &mut tally);
        record_step(
            &steps[2],
            steps[2].tags,
            &wrong_capture,
            false,
            0,
            &mut tally,
        );
        let e = |tag: EventTags| tag.bits().trailing_zeros() as usize;
        let push = e(EventTags::DOUBLE_PUSH);
        let capture = e(EventTags::CAPTURE);
        assert_eq!(tally.get(tag_slot(push, TAG_N)), 1.0, "d5");
        assert_eq!(tally.get(tag_slot(capture, TAG_N)), 1.0);
        assert_eq!(tally.get(tag_slot(capture, TAG_RELEVANT)), 0.0);
        assert_eq!(tally.get(tag_slot(push, TAG_RELEVANT)), 1.0);

        let bits = [
            0,
            steps[0].tags.bits(),
            steps[1].tags.bits(),
            steps[2].tags.bits(),
        ];
        let mut tally = Tally::new();
        record_aftershocks(&bits, &[true, true, false, true], &mut tally);
        // e2e4 at t = 1: t + 1 wrong, t + 2 exact, then the game ends.
        assert_eq!(tally.get(tag_slot(push, TAG_AFTER_N)), 2.0);
        assert_eq!(tally.get(tag_slot(push, TAG_AFTER_EXACT)), 1.0);
        assert_eq!(tally.get(tag_slot(push, TAG_AFTER_N + 1)), 1.0);
        assert_eq!(tally.get(tag_slot(push, TAG_AFTER_N + 2)), 0.0);
    }

    #[test]
    fn first_error_lift_compares_with_the_tag_rate_in_the_same_bins() {
        let mut tally = Tally::new();
        let capture = EventTags::CAPTURE.bits();
        // Bin 0: 100 steps, 10 of them captures; bin 1: 100 steps, 50 captures.
        for (b, tagged) in [(0usize, 10.0), (1, 50.0)] {
            tally.add(slots::bin(b, slots::BIN_STEPS), 100.0);
            tally.add(slots::bin(b, slots::BIN_TAGGED), tagged);
        }
        // Two first errors in bin 0, both captures: share 1, base 0.1, lift 10.
        record_first_error(capture, 0, &mut tally);
        record_first_error(capture, 0, &mut tally);
        let lift = first_error_lift(tally.values(), 2, 0).unwrap();
        assert!((lift - 10.0).abs() < 1e-12, "{lift}");
        let bootstrap = Bootstrap::default();
        let events = summarise(
            &Estimates {
                totals: tally.values(),
                bootstrap: &bootstrap,
            },
            2,
            None,
            &FirstErrorFields::default(),
        );
        assert_eq!(events.first_errors.n, 2);
        assert_eq!(events.first_errors.tags[0].share.value, Some(1.0));
        assert_eq!(events.tags.len(), N_TAGS);
        assert_eq!(
            events.tags[0].lift.value, None,
            "no errors at tagged steps recorded"
        );
    }
}
