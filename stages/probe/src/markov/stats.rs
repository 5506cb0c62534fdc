//! The path-independence statistics of one layer: within-class against population cosine
//! similarity, Cohen's d, a permutation p-value, and Holm's correction over layers.
//!
//! Vectors are normalised once; a class of `k` unit vectors with sum `S` has within-class
//! pairs whose cosines sum to `(|S|² − k) / 2`, so the pair-weighted mean over all classes is
//! `Σ_c (|S_c|² − k_c) / Σ_c k_c (k_c − 1)`, and one label shuffle costs one pass over the
//! vectors.

use crate::sample::Rng;

/// What one layer's test found (`None` where undefined).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerStats {
    /// Mean within-class cosine over all within-class pairs.
    pub mu_sem: Option<f64>,
    /// Mean cosine of random pairs.
    pub mu_pop: Option<f64>,
    /// Their standard deviation.
    pub sigma_pop: Option<f64>,
    /// `(mu_sem − mu_pop) / sigma_pop`.
    pub d: Option<f64>,
    /// One-sided permutation p-value of `mu_sem`.
    pub p: Option<f64>,
}

/// A population standard deviation below this is rounding, not spread.
const MIN_SPREAD: f64 = 1e-9;

/// Classes holding at least two members.
fn classes_with_pairs(class: &[usize], classes: usize) -> usize {
    let mut sizes = vec![0u32; classes];
    for &c in class {
        sizes[c] += 1;
    }
    sizes.iter().filter(|&&k| k >= 2).count()
}

/// How many pairs and shuffles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestOptions {
    /// Random pairs behind the population mean and deviation.
    pub pairs: usize,
    /// Label shuffles behind the p-value.
    pub permutations: usize,
    /// Seeds both.
    pub seed: u64,
}

/// `x` (`[n, d]` row-major) with every row scaled to unit length (a zero row stays zero).
pub fn unit_rows(x: &[f32], d: usize) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for row in out.chunks_exact_mut(d.max(1)) {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    }
    out
}

/// The pair-weighted mean within-class cosine of unit rows `u` under the class labels `class`
/// (one per row, `0..classes`); `None` without a within-class pair.
pub fn within_mean(u: &[f64], d: usize, class: &[usize], classes: usize) -> Option<f64> {
    let mut sums = vec![0.0f64; classes * d];
    let mut sizes = vec![0u64; classes];
    for (row, &c) in u.chunks_exact(d).zip(class) {
        sizes[c] += 1;
        for (s, v) in sums[c * d..(c + 1) * d].iter_mut().zip(row) {
            *s += v;
        }
    }
    let mut num = 0.0;
    let mut pairs = 0u64;
    for (c, &k) in sizes.iter().enumerate() {
        if k < 2 {
            continue;
        }
        let s2: f64 = sums[c * d..(c + 1) * d].iter().map(|v| v * v).sum();
        num += s2 - k as f64;
        pairs += k * (k - 1);
    }
    (pairs > 0).then(|| num / pairs as f64)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Mean and standard deviation of the cosines of `pairs` random pairs of distinct rows.
fn population(u: &[f64], d: usize, pairs: usize, rng: &mut Rng) -> Option<(f64, f64)> {
    let n = u.len() / d.max(1);
    if n < 2 || pairs == 0 {
        return None;
    }
    let mut values = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let i = rng.below(n);
        let j = (i + 1 + rng.below(n - 1)) % n;
        values.push(dot(&u[i * d..(i + 1) * d], &u[j * d..(j + 1) * d]));
    }
    let mean = values.iter().sum::<f64>() / pairs as f64;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / pairs as f64;
    Some((mean, var.sqrt()))
}

/// The test of one layer: `x` the members' hidden states (`[n, d]`), `class` each member's
/// class in `0..classes`.
pub fn layer_test(
    x: &[f32],
    d: usize,
    class: &[usize],
    classes: usize,
    options: &TestOptions,
) -> LayerStats {
    if d == 0 || x.len() != class.len() * d {
        return LayerStats::default();
    }
    let u = unit_rows(x, d);
    let mut rng = Rng::new(options.seed);
    let mu_sem = within_mean(&u, d, class, classes);
    let pop = population(&u, d, options.pairs, &mut rng);
    // With one class the population is that class (shuffles change nothing, the deviation is
    // rounding): the test needs two classes with a pair, and a spread in the population.
    let testable = classes_with_pairs(class, classes) >= 2;
    let d_value = match (mu_sem, pop) {
        (Some(sem), Some((mean, sd))) if testable && sd > MIN_SPREAD => Some((sem - mean) / sd),
        _ => None,
    };
    let p = mu_sem
        .filter(|_| testable && options.permutations > 0)
        .map(|observed| {
            let mut shuffled = class.to_vec();
            let mut as_high = 0usize;
            for _ in 0..options.permutations {
                rng.shuffle(&mut shuffled);
                let value = within_mean(&u, d, &shuffled, classes).unwrap_or(f64::NEG_INFINITY);
                // A tolerance for sums taken in another order.
                if value >= observed - 1e-12 {
                    as_high += 1;
                }
            }
            (1 + as_high) as f64 / (1 + options.permutations) as f64
        });
    LayerStats {
        mu_sem,
        mu_pop: pop.map(|p| p.0),
        sigma_pop: pop.map(|p| p.1),
        d: d_value,
        p,
    }
}

/// Holm's step-down correction of `p` (`None` entries are left out and stay `None`).
pub fn holm(p: &[Option<f64>]) -> Vec<Option<f64>> {
    let mut order: Vec<(usize, f64)> = p
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let m = order.len();
    let mut out = vec![None; p.len()];
    let mut running = 0.0f64;
    for (rank, (i, v)) in order.into_iter().enumerate() {
        running = running.max(((m - rank) as f64 * v).min(1.0));
        out[i] = Some(running);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, d: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n * d)
            .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            .collect()
    }

    const OPTIONS: TestOptions = TestOptions {
        pairs: 20_000,
        permutations: 200,
        seed: 5,
    };

    #[test]
    fn the_within_class_mean_is_the_mean_over_pairs() {
        // Class 0: (1,0), (0,1), (1,0): cosines 0, 1, 0. Class 1: one member, no pair.
        let x = [1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 3.0];
        let u = unit_rows(&x, 2);
        let mean = within_mean(&u, 2, &[0, 0, 0, 1], 2).unwrap();
        assert!((mean - 1.0 / 3.0).abs() < 1e-12, "{mean}");
        assert_eq!(within_mean(&u, 2, &[0, 1, 2, 3], 4), None);
    }

    #[test]
    fn planted_classes_are_significant_with_a_large_d() {
        // 60 classes of 3 members: a class centre plus small noise.
        let (classes, k, d) = (60, 3, 16);
        let centres = noise(classes, d, 1);
        let jitter = noise(classes * k, d, 2);
        let mut x = Vec::new();
        let mut class = Vec::new();
        for c in 0..classes {
            for m in 0..k {
                let row = c * k + m;
                for i in 0..d {
                    x.push(centres[c * d + i] + 0.2 * jitter[row * d + i]);
                }
                class.push(c);
            }
        }
        let s = layer_test(&x, d, &class, classes, &OPTIONS);
        assert!(s.p.unwrap() < 0.01, "{s:?}");
        assert!(s.d.unwrap() > 2.0, "{s:?}");
    }

    #[test]
    fn shuffled_classes_are_not_significant() {
        let (n, d) = (180, 16);
        let x = noise(n, d, 3);
        let class: Vec<usize> = (0..n).map(|i| i / 3).collect();
        let s = layer_test(&x, d, &class, n / 3, &OPTIONS);
        assert!(s.p.unwrap() > 0.05, "{s:?}");
        assert!(s.d.unwrap().abs() < 0.5, "{s:?}");
    }

    #[test]
    fn holm_multiplies_by_the_remaining_count_and_stays_monotone() {
        let adjusted = holm(&[Some(0.01), None, Some(0.04), Some(0.03)]);
        // Sorted 0.01, 0.03, 0.04 → 0.03, 0.06, max(0.06, 0.04) = 0.06.
        let round = |v: Option<f64>| v.map(|v| (v * 1e9).round() / 1e9);
        let got: Vec<Option<f64>> = adjusted.into_iter().map(round).collect();
        assert_eq!(got, vec![Some(0.03), None, Some(0.06), Some(0.06)]);
        assert_eq!(holm(&[Some(0.9), Some(0.8)]), vec![Some(1.0), Some(1.0)]);
    }

    #[test]
    fn degenerate_inputs_give_nothing_rather_than_nan() {
        let s = layer_test(&[], 4, &[], 0, &OPTIONS);
        assert_eq!(s, LayerStats::default());
        let s = layer_test(&[1.0, 0.0], 2, &[0], 1, &OPTIONS);
        assert_eq!((s.mu_sem, s.mu_pop, s.d, s.p), (None, None, None, None));
        // One class of two: its cosine is defined (to f32 precision), the test is not.
        let s = layer_test(&[1.0, 0.0, 0.6, 0.8], 2, &[0, 0], 1, &OPTIONS);
        assert!((s.mu_sem.unwrap() - 0.6).abs() < 1e-6);
        assert_eq!((s.d, s.p), (None, None));
    }
}
