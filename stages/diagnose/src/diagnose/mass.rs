//! E12: probability mass. The true-state mass of a step is `exp(log_p_true)` (the product of
//! the 75 labels' probabilities of their true class); with the optional `p_max` column also
//! the overconfident-error rate and how well `min_j p_max` tells wrong steps from right ones.
//!
//! The median and the AUROC come from histograms, so that memory does not grow with the
//! number of steps: a value `x ≥ 0` (`−log_p_true`, or `1 − min_j p_max`) falls in the bin
//! of its single-precision bits without the 13 lowest, i.e. it is kept to 10 significant
//! bits (a relative resolution of 0.1%). The order of the bins is the order of the values, so
//! the AUROC is exact up to ties within a bin, which count one half. The sampled valid and
//! afford masses of the specification need the full distributions, which
//! `predictions.parquet` does not hold; they are left out.

use cwm_formats::diagnose::Mass;

use super::slots;
use crate::stats::{Estimates, finite};

const FINITE: usize = 0;
const ABOVE_HALF: usize = 1;
const OVERCONFIDENT: usize = 2;
const NON_EXACT_WITH_P_MAX: usize = 3;
/// Slots E12 uses.
pub const SLOTS: usize = 4;

const fn slot(local: usize) -> usize {
    slots::MASS + local
}

/// Bits dropped from an `f32` to make a histogram key.
const DROPPED_BITS: u32 = 13;
/// Keys of non-negative finite floats and infinity lie below this.
const KEYS: usize = 1 << (31 - DROPPED_BITS);
/// Bins of the true-mass histogram.
const MASS_BINS: usize = 20;
/// A label is confident above this `p_max`.
const CONFIDENT: f32 = 0.99;

/// The histogram key of `x` (negative values and −0 count as 0; `x` is not NaN).
fn key(x: f64) -> u32 {
    let x = if x > 0.0 { x as f32 } else { 0.0 };
    x.to_bits() >> DROPPED_BITS
}

/// The middle of a key's bin.
fn middle(key: u32) -> f64 {
    f64::from(f32::from_bits(
        (key << DROPPED_BITS) | (1 << (DROPPED_BITS - 1)),
    ))
}

/// What one game contributes to E12 beyond its counters: the histogram keys of its steps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GameMass {
    /// The key of `−log_p_true` of every step with a finite value.
    pub neg_log_mass: Vec<u32>,
    /// The key of `1 − min_j p_max` and whether the step is non-exact, per step (with
    /// `p_max`).
    pub uncertainty: Vec<(u32, bool)>,
    /// True-state mass in 20 bins.
    pub mass_bins: [u64; MASS_BINS],
}

/// Measures one step.
pub fn measure(
    log_p_true: f32,
    p_max: Option<&[f32]>,
    exact: bool,
    tally: &mut crate::stats::Tally,
    game: &mut GameMass,
) {
    let log_p = f64::from(log_p_true);
    if !log_p.is_nan() {
        let mass = log_p.exp();
        tally.add(slot(FINITE), 1.0);
        tally.count(slot(ABOVE_HALF), mass > 0.5);
        game.neg_log_mass.push(key(-log_p));
        let bin = ((mass.clamp(0.0, 1.0) * MASS_BINS as f64) as usize).min(MASS_BINS - 1);
        game.mass_bins[bin] += 1;
    }
    if let Some(p_max) = p_max {
        let min = p_max.iter().copied().fold(f32::INFINITY, f32::min);
        if !exact {
            tally.add(slot(NON_EXACT_WITH_P_MAX), 1.0);
            tally.count(slot(OVERCONFIDENT), p_max.iter().all(|&p| p > CONFIDENT));
        }
        if !min.is_nan() {
            game.uncertainty.push((key(1.0 - f64::from(min)), !exact));
        }
    }
}

/// The histograms of all games.
#[derive(Debug, Clone)]
pub struct MassCounts {
    neg_log_mass: Vec<u64>,
    exact: Vec<u64>,
    non_exact: Vec<u64>,
    mass_bins: [u64; MASS_BINS],
    has_p_max: bool,
}

impl MassCounts {
    /// Empty histograms; `has_p_max` says whether the predictions carry `p_max`.
    pub fn new(has_p_max: bool) -> MassCounts {
        MassCounts {
            neg_log_mass: vec![0; KEYS],
            exact: if has_p_max { vec![0; KEYS] } else { Vec::new() },
            non_exact: if has_p_max { vec![0; KEYS] } else { Vec::new() },
            mass_bins: [0; MASS_BINS],
            has_p_max,
        }
    }

    /// Adds one game.
    pub fn add(&mut self, game: &GameMass) {
        for &k in &game.neg_log_mass {
            if let Some(count) = self.neg_log_mass.get_mut(k as usize) {
                *count += 1;
            }
        }
        for &(k, wrong) in &game.uncertainty {
            let histogram = if wrong {
                &mut self.non_exact
            } else {
                &mut self.exact
            };
            if let Some(count) = histogram.get_mut(k as usize) {
                *count += 1;
            }
        }
        for (a, b) in self.mass_bins.iter_mut().zip(game.mass_bins) {
            *a += b;
        }
    }

    /// The median true-state mass (the middle of the median's bin), or `None` without steps.
    pub fn median_mass(&self) -> Option<f64> {
        let total: u64 = self.neg_log_mass.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (total - 1) / 2;
        let mut below = 0u64;
        for (k, &count) in self.neg_log_mass.iter().enumerate() {
            below += count;
            if below > rank {
                return finite((-middle(k as u32)).exp());
            }
        }
        None
    }

    /// The AUROC of `1 − min_j p_max` for non-exact steps against exact ones.
    pub fn auroc(&self) -> Option<f64> {
        if !self.has_p_max {
            return None;
        }
        let positives: u64 = self.non_exact.iter().sum();
        let negatives: u64 = self.exact.iter().sum();
        if positives == 0 || negatives == 0 {
            return None;
        }
        let mut area = 0.0f64;
        let mut negatives_below = 0u64;
        for (&pos, &neg) in self.non_exact.iter().zip(&self.exact) {
            area += pos as f64 * (negatives_below as f64 + 0.5 * neg as f64);
            negatives_below += neg;
        }
        finite(area / (positives as f64 * negatives as f64))
    }
}

/// The E12 section of the summary.
pub fn summarise(estimates: &Estimates, counts: &MassCounts) -> Mass {
    Mass {
        steps: estimates.total(slot(FINITE)).round() as u64,
        median_true_mass: counts.median_mass(),
        true_mass_above_half: estimates.rate(slot(ABOVE_HALF), slot(FINITE)),
        true_mass_histogram: counts.mass_bins.to_vec(),
        overconfident_error_rate: counts
            .has_p_max
            .then(|| estimates.rate(slot(OVERCONFIDENT), slot(NON_EXACT_WITH_P_MAX))),
        auroc_min_p_max: counts.auroc(),
        valid_mass: "left out: the sampled valid and afford masses need each label's full \
                     distribution, which predictions.parquet does not hold"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Bootstrap, Tally};

    fn run(steps: &[(f32, Option<Vec<f32>>, bool)]) -> Mass {
        let has_p_max = steps.iter().any(|s| s.1.is_some());
        let mut tally = Tally::new();
        let mut game = GameMass::default();
        for (log_p, p_max, exact) in steps {
            tally.count(slots::NON_EXACT, !exact);
            measure(*log_p, p_max.as_deref(), *exact, &mut tally, &mut game);
        }
        let mut counts = MassCounts::new(has_p_max);
        counts.add(&game);
        let bootstrap = Bootstrap::default();
        summarise(
            &Estimates {
                totals: tally.values(),
                bootstrap: &bootstrap,
            },
            &counts,
        )
    }

    #[test]
    fn the_median_and_the_share_above_a_half() {
        let steps: Vec<_> = [0.9f64, 0.8, 0.3, 0.97, 0.1]
            .iter()
            .map(|&m| (m.ln() as f32, None, true))
            .collect();
        let mass = run(&steps);
        let median = mass.median_true_mass.unwrap();
        assert!((median - 0.8).abs() < 0.001, "{median}");
        assert_eq!(mass.true_mass_above_half.value, Some(0.6));
        assert_eq!(mass.steps, 5);
        assert_eq!(mass.overconfident_error_rate, None);
        assert_eq!(mass.auroc_min_p_max, None);
        assert_eq!(mass.true_mass_histogram.iter().sum::<u64>(), 5);
        assert_eq!(mass.true_mass_histogram[19], 1, "0.97");
    }

    #[test]
    fn overconfident_errors_and_the_auroc() {
        let sure = vec![0.999f32; 75];
        let mut unsure = vec![0.999f32; 75];
        unsure[3] = 0.6;
        let steps = vec![
            (-0.001, Some(sure.clone()), true),
            (-0.001, Some(sure.clone()), true),
            (-3.0, Some(sure.clone()), false),
            (-3.0, Some(unsure.clone()), false),
            (-3.0, Some(unsure), false),
        ];
        let mass = run(&steps);
        let rate = mass.overconfident_error_rate.unwrap();
        assert_eq!((rate.num, rate.n), (1.0, 3));
        // Two of three errors are less sure than every exact step, one ties with both.
        let auroc = mass.auroc_min_p_max.unwrap();
        assert!(
            (auroc - (2.0 * 2.0 + 0.5 * 2.0) / 6.0).abs() < 1e-12,
            "{auroc}"
        );
    }

    #[test]
    fn keys_keep_the_order_of_values() {
        let values = [0.0, 1e-9, 1e-5, 0.001, 0.5, 1.0, 7.0, f64::INFINITY];
        let keys: Vec<u32> = values.iter().map(|&v| key(v)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        assert!(keys.iter().all(|&k| (k as usize) < KEYS));
        assert_eq!(key(-0.5), 0);
        assert_eq!(key(-0.0), 0, "a mass of exactly 1");
        assert!((middle(key(0.25)) - 0.25).abs() < 0.25 * 0.002);
    }
}
