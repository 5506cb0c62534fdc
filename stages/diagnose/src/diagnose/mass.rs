//! E12: probability mass. The true-state mass of a step is `exp(log_p_true)` (the product of
//! the 75 labels' probabilities of their true class); with the optional `p_max` column also
//! the overconfident-error rate and how well `min_j p_max` tells wrong steps from right ones;
//! with the optional `valid_mass` and `afford_mass` columns (the evaluate stage's draws of
//! states at sampled steps) their means over the sampled steps and the valid mass's histogram.
//!
//! The median and the AUROC come from histograms, so that memory does not grow with the
//! number of steps: a value `x ≥ 0` (`−log_p_true`, or `1 − min_j p_max`) falls in the bin
//! of its single-precision bits without the 13 lowest, i.e. it is kept to 10 significant
//! bits (a relative resolution of 0.1%). The order of the bins is the order of the values, so
//! the AUROC is exact up to ties within a bin, which count one half.

use cwm_formats::diagnose::{Mass, SampledMass};

use super::slots;
use crate::stats::{Estimates, finite};

const FINITE: usize = 0;
const ABOVE_HALF: usize = 1;
const OVERCONFIDENT: usize = 2;
const NON_EXACT_WITH_P_MAX: usize = 3;
const VALID_STEPS: usize = 4;
const VALID_SUM: usize = 5;
const AFFORD_STEPS: usize = 6;
const AFFORD_SUM: usize = 7;
/// Slots E12 uses.
pub const SLOTS: usize = 8;

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
    /// Valid mass of the sampled steps in 20 bins.
    pub valid_bins: [u64; MASS_BINS],
}

/// The bin of a mass in 0..=1 among 20 equal ones (the last one closed).
fn mass_bin(mass: f64) -> usize {
    ((mass.clamp(0.0, 1.0) * MASS_BINS as f64) as usize).min(MASS_BINS - 1)
}

/// What one step's row holds for E12.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMass<'a> {
    /// `Σ ln p(target label)`.
    pub log_p_true: f32,
    /// `p_max` per label, when the file has it.
    pub p_max: Option<&'a [f32]>,
    /// The sampled valid mass, at a sampled step.
    pub valid: Option<f32>,
    /// The sampled afford mass, at a sampled step with a next move.
    pub afford: Option<f32>,
}

/// Measures one step.
pub fn measure(
    step: &StepMass<'_>,
    exact: bool,
    tally: &mut crate::stats::Tally,
    game: &mut GameMass,
) {
    let log_p = f64::from(step.log_p_true);
    if !log_p.is_nan() {
        let mass = log_p.exp();
        tally.add(slot(FINITE), 1.0);
        tally.count(slot(ABOVE_HALF), mass > 0.5);
        game.neg_log_mass.push(key(-log_p));
        game.mass_bins[mass_bin(mass)] += 1;
    }
    if let Some(valid) = step.valid {
        tally.add(slot(VALID_STEPS), 1.0);
        tally.add(slot(VALID_SUM), f64::from(valid));
        game.valid_bins[mass_bin(f64::from(valid))] += 1;
    }
    if let Some(afford) = step.afford {
        tally.add(slot(AFFORD_STEPS), 1.0);
        tally.add(slot(AFFORD_SUM), f64::from(afford));
    }
    if let Some(p_max) = step.p_max {
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
    valid_bins: [u64; MASS_BINS],
    has_p_max: bool,
    mass_samples: Option<u32>,
}

impl MassCounts {
    /// Empty histograms; `has_p_max` says whether the predictions carry `p_max`,
    /// `mass_samples` the states drawn per sampled step when they carry the sampled masses.
    pub fn new(has_p_max: bool, mass_samples: Option<u32>) -> MassCounts {
        MassCounts {
            neg_log_mass: vec![0; KEYS],
            exact: if has_p_max { vec![0; KEYS] } else { Vec::new() },
            non_exact: if has_p_max { vec![0; KEYS] } else { Vec::new() },
            mass_bins: [0; MASS_BINS],
            valid_bins: [0; MASS_BINS],
            has_p_max,
            mass_samples,
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
        for (a, b) in self.valid_bins.iter_mut().zip(game.valid_bins) {
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
        sampled: counts.mass_samples.map(|samples| SampledMass {
            samples,
            steps: estimates.total(slot(VALID_STEPS)).round() as u64,
            valid_mass: estimates.rate(slot(VALID_SUM), slot(VALID_STEPS)),
            afford_mass: estimates.rate(slot(AFFORD_SUM), slot(AFFORD_STEPS)),
            valid_mass_histogram: counts.valid_bins.to_vec(),
        }),
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
            let step = StepMass {
                log_p_true: *log_p,
                p_max: p_max.as_deref(),
                valid: None,
                afford: None,
            };
            measure(&step, *exact, &mut tally, &mut game);
        }
        let mut counts = MassCounts::new(has_p_max, None);
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
        assert_eq!(mass.sampled, None, "no sampled masses in the predictions");
    }

    #[test]
    fn sampled_masses_are_means_over_the_steps_that_have_them() {
        // (valid, afford) of five steps: two not sampled, one sampled at the last step.
        let steps = [
            (Some(1.0), Some(0.75)),
            (None, None),
            (Some(0.25), Some(0.25)),
            (None, None),
            (Some(0.5), None),
        ];
        let mut tally = Tally::new();
        let mut game = GameMass::default();
        for (valid, afford) in steps {
            let step = StepMass {
                log_p_true: -0.1,
                p_max: None,
                valid,
                afford,
            };
            measure(&step, true, &mut tally, &mut game);
        }
        let mut counts = MassCounts::new(false, Some(64));
        counts.add(&game);
        let bootstrap = Bootstrap::default();
        let estimates = Estimates {
            totals: tally.values(),
            bootstrap: &bootstrap,
        };
        let sampled = summarise(&estimates, &counts).sampled.unwrap();
        assert_eq!((sampled.samples, sampled.steps), (64, 3));
        assert_eq!((sampled.valid_mass.num, sampled.valid_mass.n), (1.75, 3));
        assert_eq!((sampled.afford_mass.num, sampled.afford_mass.n), (1.0, 2));
        assert_eq!(sampled.afford_mass.value, Some(0.5));
        let mut expected = vec![0u64; 20];
        expected[5] = 1; // 0.25
        expected[10] = 1; // 0.5
        expected[19] = 1; // 1.0, in the closed last bin
        assert_eq!(sampled.valid_mass_histogram, expected);
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
