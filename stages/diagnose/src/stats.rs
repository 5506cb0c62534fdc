//! The statistics the diagnostics share: Wilson intervals, a game-level bootstrap and the
//! ply-matched lift.
//!
//! * **Rates over games or events** (one observation each) get the Wilson score interval
//!   ([`wilson`]).
//! * **Rates over steps** get a percentile interval from a game-level bootstrap: steps of one
//!   game are correlated, so resampling steps would understate the spread. Every game
//!   contributes a few counters ([`GameCounts`]: numerators and denominators of every rate,
//!   kept sparse); a resample draws as many games as there are, with replacement, and sums
//!   their counters ([`Bootstrap`]). Any statistic that is a function of the summed counters
//!   (a ratio, a lift) then gets its interval from the same resamples
//!   ([`Bootstrap::interval`]). Resample `b` draws from its own generator seeded by
//!   `(seed, b)`, so the intervals do not depend on the number of threads.
//! * The **ply-matched lift** ([`ply_matched_lift`]) compares an error rate at tagged steps
//!   with the error rate of untagged steps of the same prefix bin.

use cwm_formats::diagnose::{Interval, MIN_N, Rate, Ratio};
use rayon::prelude::*;

/// The normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval of `num` successes in `n` trials at 95%; `None` when `n` is 0.
///
/// ```
/// let (lo, hi) = cwm_stage_diagnose::stats::wilson(8, 10).unwrap();
/// assert!((lo - 0.4902).abs() < 1e-4 && (hi - 0.9433).abs() < 1e-4);
/// ```
pub fn wilson(num: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let n = n as f64;
    let p = (num as f64 / n).clamp(0.0, 1.0);
    let z2 = Z95 * Z95;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// A finite value, or `None` (so that no NaN or infinity reaches a JSON file).
pub fn finite(value: f64) -> Option<f64> {
    value.is_finite().then_some(value)
}

/// `num / n`, or `None` when `n` is 0.
pub fn ratio(num: f64, n: f64) -> Option<f64> {
    if n > 0.0 { finite(num / n) } else { None }
}

/// A rate over events or games, with its Wilson interval.
pub fn wilson_rate(num: u64, n: u64) -> Rate {
    let interval = wilson(num, n);
    Rate {
        num: num as f64,
        n,
        value: ratio(num as f64, n as f64),
        lo: interval.map(|i| i.0),
        hi: interval.map(|i| i.1),
        interval: Interval::Wilson,
        low_n: n < MIN_N,
        scale: 1,
    }
}

/// SplitMix64: a small, fast generator with a 64-bit state, good enough for resampling and
/// fully determined by its seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for stream `stream` of `seed` (independent streams for independent
    /// resamples).
    pub fn new(seed: u64, stream: u64) -> SplitMix64 {
        let mut mixer = SplitMix64(seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let _ = mixer.next_u64();
        SplitMix64(mixer.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n` > 0), by Lemire's multiply-and-reject.
    pub fn below(&mut self, n: u64) -> u64 {
        loop {
            let product = u128::from(self.next_u64()) * u128::from(n);
            let low = product as u64;
            if low >= n.wrapping_neg() % n {
                return (product >> 64) as u64;
            }
        }
    }
}

/// The counters of one game: `(slot, value)` pairs with a non-zero value, slots ascending.
/// Numerators and denominators of every bootstrapped rate live in numbered slots; what each
/// slot means is the caller's layout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GameCounts {
    entries: Vec<(u32, f32)>,
}

impl GameCounts {
    /// The non-zero counters.
    pub fn entries(&self) -> &[(u32, f32)] {
        &self.entries
    }
}

/// The counters of the game being measured, dense while it is filled.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    values: Vec<f64>,
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Tally {
        Tally::default()
    }

    /// Adds `value` to `slot`.
    pub fn add(&mut self, slot: usize, value: f64) {
        if slot >= self.values.len() {
            self.values.resize(slot + 1, 0.0);
        }
        self.values[slot] += value;
    }

    /// Adds one to `slot` when `yes`.
    pub fn count(&mut self, slot: usize, yes: bool) {
        if yes {
            self.add(slot, 1.0);
        }
    }

    /// The value of `slot` so far.
    pub fn get(&self, slot: usize) -> f64 {
        self.values.get(slot).copied().unwrap_or(0.0)
    }

    /// The dense values (exact, for the point estimates).
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The non-zero counters, for the bootstrap (single precision is plenty for resampled
    /// sums; the point estimates use [`Tally::values`]).
    pub fn sparse(&self) -> GameCounts {
        GameCounts {
            entries: self
                .values
                .iter()
                .enumerate()
                .filter(|&(_, &v)| v != 0.0)
                .map(|(slot, &v)| (slot as u32, v as f32))
                .collect(),
        }
    }
}

/// The summed counters of every bootstrap resample of the games.
#[derive(Debug, Clone, Default)]
pub struct Bootstrap {
    totals: Vec<Vec<f64>>,
}

impl Bootstrap {
    /// Draws `resamples` resamples of `games` (each as many games as there are, with
    /// replacement) and sums each one's counters over `slots` slots. Resample `b` uses
    /// [`SplitMix64::new`]`(seed, b)`; the resamples run in parallel on the current rayon
    /// pool, with the same result for any number of threads. No games or no resamples give
    /// an empty bootstrap, whose intervals are `None`.
    pub fn run(games: &[GameCounts], slots: usize, resamples: u32, seed: u64) -> Bootstrap {
        if games.is_empty() {
            return Bootstrap::default();
        }
        let n = games.len() as u64;
        let totals = (0..u64::from(resamples))
            .into_par_iter()
            .map(|b| {
                // Draw the resample as multiplicities, then add each drawn game once, weighted:
                // the same sums as adding the draws one by one, in game order.
                let mut rng = SplitMix64::new(seed, b);
                let mut drawn = vec![0u32; games.len()];
                for _ in 0..n {
                    drawn[rng.below(n) as usize] += 1;
                }
                let mut sums = vec![0.0f64; slots];
                for (game, &times) in games.iter().zip(&drawn) {
                    if times == 0 {
                        continue;
                    }
                    let weight = f64::from(times);
                    for &(slot, value) in &game.entries {
                        if let Some(sum) = sums.get_mut(slot as usize) {
                            *sum += weight * f64::from(value);
                        }
                    }
                }
                sums
            })
            .collect();
        Bootstrap { totals }
    }

    /// Number of resamples.
    pub fn resamples(&self) -> usize {
        self.totals.len()
    }

    /// The 2.5% and 97.5% percentiles of `statistic` over the resamples whose value is
    /// defined; `None` without resamples or when fewer than half of them define it.
    pub fn interval(&self, statistic: impl Fn(&[f64]) -> Option<f64>) -> Option<(f64, f64)> {
        let mut values: Vec<f64> = self
            .totals
            .iter()
            .filter_map(|t| statistic(t).and_then(finite))
            .collect();
        if values.is_empty() || values.len() * 2 < self.totals.len() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        Some((quantile(&values, 0.025), quantile(&values, 0.975)))
    }
}

/// The `q` quantile of sorted `values` (linear interpolation between order statistics, R's
/// type 7); `values` must not be empty.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let position = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = (below + 1).min(values.len() - 1);
    let weight = position - below as f64;
    values[below] * (1.0 - weight) + values[above] * weight
}

/// Point estimates and bootstrap intervals over the summed counters of all games.
#[derive(Debug, Clone, Copy)]
pub struct Estimates<'a> {
    /// The counters summed over all games.
    pub totals: &'a [f64],
    /// The resamples.
    pub bootstrap: &'a Bootstrap,
}

impl Estimates<'_> {
    /// A slot's total (0 for a slot never written).
    pub fn total(&self, slot: usize) -> f64 {
        self.totals.get(slot).copied().unwrap_or(0.0)
    }

    /// The rate `num / den` of two slots with its bootstrap interval, times `scale`.
    pub fn rate_scaled(&self, num: usize, den: usize, scale: u32) -> Rate {
        let at = |totals: &[f64], slot: usize| totals.get(slot).copied().unwrap_or(0.0);
        let (num_total, den_total) = (self.total(num), self.total(den));
        let factor = f64::from(scale);
        let interval = self
            .bootstrap
            .interval(|t| ratio(at(t, num), at(t, den)).map(|r| r * factor));
        let n = den_total.round().max(0.0) as u64;
        Rate {
            num: num_total,
            n,
            value: ratio(num_total, den_total).map(|r| r * factor),
            lo: interval.map(|i| i.0),
            hi: interval.map(|i| i.1),
            interval: if interval.is_some() {
                Interval::Bootstrap
            } else {
                Interval::None
            },
            low_n: n < MIN_N,
            scale,
        }
    }

    /// The rate `num / den` of two slots with its bootstrap interval.
    pub fn rate(&self, num: usize, den: usize) -> Rate {
        self.rate_scaled(num, den, 1)
    }

    /// A statistic of the totals with its bootstrap interval, resting on `n` events.
    pub fn ratio_of(&self, n: u64, statistic: impl Fn(&[f64]) -> Option<f64>) -> Ratio {
        let value = statistic(self.totals).and_then(finite);
        let interval = self.bootstrap.interval(&statistic);
        Ratio {
            value,
            lo: interval.map(|i| i.0),
            hi: interval.map(|i| i.1),
            interval: if interval.is_some() {
                Interval::Bootstrap
            } else {
                Interval::None
            },
            n,
            low_n: n < MIN_N,
        }
    }
}

/// The counts of one prefix bin that a ply-matched lift compares.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BinCounts {
    /// Tagged steps in the bin.
    pub tagged: f64,
    /// Non-exact tagged steps.
    pub tagged_errors: f64,
    /// All steps in the bin.
    pub steps: f64,
    /// All non-exact steps.
    pub errors: f64,
}

/// The ply-matched lift of a tag: with, per prefix bin `b`, `tagged` steps of which
/// `tagged_errors` are wrong, and `steps` steps of which `errors` are wrong, the error rate
/// at the tagged steps divided by the error rate the untagged steps of the same bins have,
/// weighted by the tagged steps' bins:
///
/// `Σ_b tagged_errors_b / Σ_b tagged_b · r_b`, with `r_b` the untagged error rate of bin `b`.
///
/// Bins without untagged steps have no baseline and are left out of both sums. `None` when
/// nothing is left or the baseline is 0 (no untagged errors in the tagged steps' bins).
pub fn ply_matched_lift(bins: impl IntoIterator<Item = BinCounts>) -> Option<f64> {
    let mut errors = 0.0;
    let mut expected = 0.0;
    for bin in bins {
        let untagged = bin.steps - bin.tagged;
        if bin.tagged <= 0.0 || untagged <= 0.0 {
            continue;
        }
        errors += bin.tagged_errors;
        expected += bin.tagged * (bin.errors - bin.tagged_errors) / untagged;
    }
    ratio(errors, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_a_hand_computed_interval() {
        // p = 0.8, n = 10, z = 1.96: centre (0.8 + 0.19208) / 1.38415 = 0.71676; half
        // 1.96 · sqrt(0.016 + 0.0096040) / 1.38415 = 0.22657.
        let (lo, hi) = wilson(8, 10).unwrap();
        assert!((lo - 0.490_16).abs() < 1e-4, "{lo}");
        assert!((hi - 0.943_32).abs() < 1e-4, "{hi}");
        let (lo, hi) = wilson(0, 20).unwrap();
        assert_eq!(lo, 0.0);
        assert!((hi - 0.161_13).abs() < 1e-4, "{hi}");
        assert_eq!(wilson(0, 0), None);
        let rate = wilson_rate(3, 10);
        assert_eq!(rate.value, Some(0.3));
        assert!(rate.low_n && rate.interval == Interval::Wilson);
    }

    #[test]
    fn the_generator_is_uniform_enough_and_seeded() {
        let mut rng = SplitMix64::new(7, 0);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_500..10_500).contains(&c)),
            "{counts:?}"
        );
        let draw = |seed, stream| SplitMix64::new(seed, stream).next_u64();
        assert_eq!(draw(1, 2), draw(1, 2));
        assert_ne!(draw(1, 2), draw(1, 3));
        assert_ne!(draw(1, 2), draw(2, 2));
    }

    /// Games of 10 steps with 0..=10 errors: slot 0 = steps, slot 1 = errors.
    fn games() -> Vec<GameCounts> {
        (0..60)
            .map(|g| {
                let mut tally = Tally::new();
                tally.add(0, 10.0);
                tally.add(1, f64::from((g * 7) % 11));
                tally.sparse()
            })
            .collect()
    }

    #[test]
    fn the_bootstrap_interval_covers_the_point_estimate_and_is_deterministic() {
        let games = games();
        let mut totals = vec![0.0; 2];
        for game in &games {
            for &(slot, value) in game.entries() {
                totals[slot as usize] += f64::from(value);
            }
        }
        let bootstrap = Bootstrap::run(&games, 2, 1000, 3);
        let estimates = Estimates {
            totals: &totals,
            bootstrap: &bootstrap,
        };
        let rate = estimates.rate(1, 0);
        let (value, lo, hi) = (rate.value.unwrap(), rate.lo.unwrap(), rate.hi.unwrap());
        assert!(lo < value && value < hi, "{lo} {value} {hi}");
        assert!(
            hi - lo > 0.05 && hi - lo < 0.3,
            "a plausible width: {lo} {hi}"
        );
        assert_eq!(rate.interval, Interval::Bootstrap);
        assert_eq!(rate.n, 600);

        let again = Bootstrap::run(&games, 2, 1000, 3);
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| Bootstrap::run(&games, 2, 1000, 3));
        let other_seed = Bootstrap::run(&games, 2, 1000, 4);
        let interval = |b: &Bootstrap| b.interval(|t| ratio(t[1], t[0]));
        assert_eq!(interval(&again), interval(&bootstrap));
        assert_eq!(interval(&one_thread), interval(&bootstrap));
        assert_ne!(interval(&other_seed), interval(&bootstrap));
    }

    #[test]
    fn without_resamples_or_games_there_is_no_interval() {
        let none = Bootstrap::run(&games(), 2, 0, 0);
        assert_eq!(none.interval(|t| ratio(t[1], t[0])), None);
        let empty = Bootstrap::run(&[], 2, 100, 0);
        assert_eq!(empty.resamples(), 0);
        let totals = [0.0, 0.0];
        let rate = Estimates {
            totals: &totals,
            bootstrap: &empty,
        }
        .rate(1, 0);
        assert_eq!((rate.value, rate.lo, rate.n), (None, None, 0));
        assert_eq!(rate.interval, Interval::None);
    }

    #[test]
    fn quantiles_interpolate() {
        let values = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&values, 0.5), 3.0);
        assert_eq!(quantile(&values, 0.0), 1.0);
        assert_eq!(quantile(&values, 1.0), 5.0);
        assert!((quantile(&values, 0.1) - 1.4).abs() < 1e-12);
    }

    fn bins(counts: &[(f64, f64, f64, f64)]) -> Vec<BinCounts> {
        counts
            .iter()
            .map(|&(tagged, tagged_errors, steps, errors)| BinCounts {
                tagged,
                tagged_errors,
                steps,
                errors,
            })
            .collect()
    }

    #[test]
    fn lift_compares_with_the_untagged_steps_of_the_same_bins() {
        // Bin 0: 10 tagged (5 wrong), 100 steps (15 wrong): untagged rate 10/90.
        // Bin 1: 0 tagged. Bin 2: 10 tagged (2 wrong), 10 steps: no baseline, left out.
        let lift = ply_matched_lift(bins(&[
            (10.0, 5.0, 100.0, 15.0),
            (0.0, 0.0, 50.0, 40.0),
            (10.0, 2.0, 10.0, 2.0),
        ]))
        .unwrap();
        assert!((lift - 5.0 / (10.0 * 10.0 / 90.0)).abs() < 1e-12, "{lift}");
        // Same error rate as the untagged steps of the bin: lift 1, whatever other bins do.
        let even = ply_matched_lift(bins(&[(10.0, 1.0, 100.0, 10.0), (0.0, 0.0, 10.0, 9.0)]));
        assert!((even.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(ply_matched_lift(bins(&[(5.0, 0.0, 10.0, 0.0)])), None);
        assert_eq!(ply_matched_lift(Vec::new()), None);
    }
}
