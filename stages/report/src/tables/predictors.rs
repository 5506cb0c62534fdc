//! `beyond_predictors` (E13): which diagnostic measured on the real split predicts ExactState
//! and Trajectory on random-uniform games, across the family × size cells.
//!
//! Each cell is one chosen model with an evaluation on both test splits. For each predictor,
//! over the cells that have it: Spearman's ρ with the random-game ExactState (and its
//! two-sided p by the t approximation), the R² of the univariate linear fit, the error of
//! predicting each family's cells from the other families' (leave-one-family-out RMSE, in
//! points), and ρ with the random-game Trajectory. With n ≤ 28 cells that share families,
//! none of this is strong evidence; the table says so.

use std::collections::BTreeMap;

use cwm_formats::markov::SET_SWAP;
use cwm_formats::probe::SET_ID;
use cwm_models::{Family, Size};

use super::{cell_name, sources};
use crate::inputs::{Inputs, Origin};
use crate::table::{Cell, Column, MissingTable, Table};

/// The real split the predictors are read on, and the random split they predict.
const REAL: &str = "test_real";
const RANDOM: &str = "test_random";
/// Fewest cells for a correlation.
const MIN_CELLS: usize = 3;

const CAVEAT: &str = "n ≤ 28 cells, and cells of one family share its architecture: \
                      correlations here are descriptive, not evidence. p: two-sided, t \
                      approximation of Spearman's ρ. LOFO RMSE: each family's cells predicted \
                      by a line fitted on the other families' cells (points of ExactState).";

/// One cell's values: the predictors by name and the two targets.
#[derive(Debug, Clone, Default, PartialEq)]
struct CellValues {
    family: Option<Family>,
    predictors: BTreeMap<&'static str, f64>,
    exact: Option<f64>,
    trajectory: Option<f64>,
}

/// The predictors, in table order.
const PREDICTORS: [&str; 8] = [
    "Loss (real)",
    "ExactState (real, %)",
    "Plausible-error share (E1, %)",
    "Transition consistency (E4, %)",
    "Seen–novel gap (E7, pt)",
    "Same prediction over swaps (E8, %)",
    "Mid-layer probe accuracy (E9, %)",
    "Last-block d (E10)",
];

/// Every cell's values, by (family, size).
fn cells(inputs: &Inputs) -> (BTreeMap<(Family, Size), CellValues>, Vec<&Origin>) {
    let mut cells: BTreeMap<(Family, Size), CellValues> = BTreeMap::new();
    let mut origins = Vec::new();
    let mut put = |key: (Family, Size), name: &'static str, value: Option<f64>| {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            let cell = cells.entry(key).or_default();
            cell.family = Some(key.0);
            cell.predictors.entry(name).or_insert(v);
        }
    };
    for e in &inputs.evaluate {
        let key = (e.family, e.size);
        let s = &e.summary;
        if s.split == REAL {
            put(key, PREDICTORS[0], Some(s.loss));
            put(key, PREDICTORS[1], Some(s.exact_state * 100.0));
            origins.push(&e.origin);
        }
    }
    for d in inputs.diagnose.iter().filter(|d| d.summary.split == REAL) {
        let key = (d.family, d.size);
        let s = &d.summary;
        put(
            key,
            PREDICTORS[2],
            s.validity.plausible_error_share.value.map(|v| v * 100.0),
        );
        put(
            key,
            PREDICTORS[3],
            s.dynamics.transition_consistent.value.map(|v| v * 100.0),
        );
        let gap = s.novelty.as_ref().and_then(|n| n.seen_novel_gap);
        put(key, PREDICTORS[4], gap.map(|v| v * 100.0));
        origins.push(&d.origin);
    }
    for m in inputs.markov.iter().filter(|m| m.summary.split == REAL) {
        let key = (m.family, m.size);
        let swap = m.summary.sets.iter().find(|s| s.name == SET_SWAP);
        put(
            key,
            PREDICTORS[5],
            swap.and_then(|s| s.prediction_agreement).map(|v| v * 100.0),
        );
        let last = m.summary.blocks;
        let d = swap.and_then(|s| s.layers.iter().find(|l| l.layer == last)?.d);
        put(key, PREDICTORS[7], d);
        origins.push(&m.origin);
    }
    for p in &inputs.probes {
        let key = (p.family, p.size);
        let mid = mid_layer(p.summary.blocks);
        let acc =
            super::probe_result(&p.summary, SET_ID, REAL, mid).and_then(|r| r.scores.square_acc);
        put(key, PREDICTORS[6], acc.map(|v| v * 100.0));
        origins.push(&p.origin);
    }
    for e in inputs.evaluate.iter().filter(|e| e.summary.split == RANDOM) {
        let cell = cells.entry((e.family, e.size)).or_default();
        cell.family = Some(e.family);
        cell.exact.get_or_insert(e.summary.exact_state * 100.0);
        cell.trajectory.get_or_insert(e.summary.trajectory * 100.0);
        origins.push(&e.origin);
    }
    (cells, origins)
}

/// The middle block of `blocks` (rounded up, at least 1).
fn mid_layer(blocks: u32) -> u32 {
    blocks.div_ceil(2).max(1)
}

/// The table, or why it cannot be made.
pub fn predictor_table(inputs: &Inputs) -> Result<Table, MissingTable> {
    let (cells, origins) = cells(inputs);
    let with_target: Vec<&CellValues> = cells.values().filter(|c| c.exact.is_some()).collect();
    if with_target.len() < MIN_CELLS {
        return Err(MissingTable {
            label: "Beyond: predictors".into(),
            reason: format!(
                "{} family × size cells with a {RANDOM} evaluation; at least {MIN_CELLS} are needed",
                with_target.len()
            ),
        });
    }
    let rows = PREDICTORS
        .iter()
        .map(|name| predictor_row(name, &with_target))
        .collect();
    let names: Vec<String> = cells.keys().map(|(f, s)| cell_name(*f, *s)).collect();
    Ok(Table {
        id: "beyond_predictors".into(),
        label: "Beyond: predictors".into(),
        title: format!(
            "Which diagnostic on {REAL} predicts {RANDOM} ExactState and Trajectory across the \
             family × size cells"
        ),
        columns: vec![
            Column::left("Predictor (on test_real)"),
            Column::right("n"),
            Column::right("ρ").in_group("ExactState (random)"),
            Column::right("p").in_group("ExactState (random)"),
            Column::right("R²").in_group("ExactState (random)"),
            Column::right("LOFO RMSE (pt)").in_group("ExactState (random)"),
            Column::right("ρ").in_group("Trajectory (random)"),
            Column::right("p").in_group("Trajectory (random)"),
        ],
        rows,
        notes: vec![CAVEAT.to_owned(), format!("Cells: {}.", names.join(", "))],
        sources: sources(origins),
    })
}

fn number(value: Option<f64>, decimals: usize) -> Cell {
    match value {
        Some(v) if v.is_finite() => Cell::with_raw(format!("{v:.decimals$}"), format!("{v}")),
        _ => Cell::missing(),
    }
}

fn predictor_row(name: &'static str, cells: &[&CellValues]) -> Vec<Cell> {
    let pairs = |target: fn(&CellValues) -> Option<f64>| -> Vec<(Option<Family>, f64, f64)> {
        cells
            .iter()
            .filter_map(|c| Some((c.family, *c.predictors.get(name)?, target(c)?)))
            .collect()
    };
    let exact = pairs(|c| c.exact);
    let trajectory = pairs(|c| c.trajectory);
    let xy = |p: &[(Option<Family>, f64, f64)]| -> (Vec<f64>, Vec<f64>) {
        p.iter().map(|&(_, x, y)| (x, y)).unzip()
    };
    let (x, y) = xy(&exact);
    let (xt, yt) = xy(&trajectory);
    let rho = stats::spearman(&x, &y);
    let rho_t = stats::spearman(&xt, &yt);
    let groups: Vec<Option<Family>> = exact.iter().map(|p| p.0).collect();
    vec![
        Cell::text(name),
        Cell::with_raw(x.len().to_string(), x.len().to_string()),
        number(rho, 2),
        number(rho.and_then(|r| stats::correlation_p(r, x.len())), 3),
        number(stats::pearson(&x, &y).map(|r| r * r), 2),
        number(stats::lofo_rmse(&x, &y, &groups), 2),
        number(rho_t, 2),
        number(rho_t.and_then(|r| stats::correlation_p(r, xt.len())), 3),
    ]
}

/// The statistics of the table, small enough to check by hand.
pub mod stats {
    /// Pearson's r, `None` for fewer than 3 points or a constant variable.
    pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
        let n = x.len();
        if n < super::MIN_CELLS || n != y.len() {
            return None;
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
        let (mx, my) = (mean(x), mean(y));
        let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
        for (a, b) in x.iter().zip(y) {
            sxy += (a - mx) * (b - my);
            sxx += (a - mx) * (a - mx);
            syy += (b - my) * (b - my);
        }
        (sxx > 0.0 && syy > 0.0).then(|| (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
    }

    /// Ranks from 1, ties sharing their mean rank.
    pub fn ranks(v: &[f64]) -> Vec<f64> {
        let mut order: Vec<usize> = (0..v.len()).collect();
        order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut out = vec![0.0; v.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
                j += 1;
            }
            let rank = (i + j) as f64 / 2.0 + 1.0;
            for &k in &order[i..=j] {
                out[k] = rank;
            }
            i = j + 1;
        }
        out
    }

    /// Spearman's ρ: Pearson's r of the ranks.
    pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
        pearson(&ranks(x), &ranks(y))
    }

    /// Two-sided p of a correlation `r` over `n` points, by the t approximation with
    /// n − 2 degrees of freedom; `None` for n < 3.
    pub fn correlation_p(r: f64, n: usize) -> Option<f64> {
        if n < super::MIN_CELLS || !r.is_finite() {
            return None;
        }
        let df = (n - 2) as f64;
        if r.abs() >= 1.0 {
            return Some(0.0);
        }
        let t2 = r * r * df / (1.0 - r * r);
        Some(incomplete_beta(df / (df + t2), df / 2.0, 0.5))
    }

    /// ln Γ(x) for x > 0 (Lanczos, g = 7, nine terms).
    pub fn ln_gamma(x: f64) -> f64 {
        const C: [f64; 9] = [
            0.999_999_999_999_809_9,
            676.520_368_121_885_1,
            -1_259.139_216_722_402_8,
            771.323_428_777_653_1,
            -176.615_029_162_140_6,
            12.507_343_278_686_905,
            -0.138_571_095_265_720_12,
            9.984_369_578_019_572e-6,
            1.505_632_735_149_311_6e-7,
        ];
        if x < 0.5 {
            let pi = std::f64::consts::PI;
            return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
        }
        let x = x - 1.0;
        let mut a = C[0];
        let t = x + 7.5;
        for (i, c) in C.iter().enumerate().skip(1) {
            a += c / (x + i as f64);
        }
        0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
    }

    /// The regularised incomplete beta function I_x(a, b), by its continued fraction.
    pub fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        if x >= 1.0 {
            return 1.0;
        }
        let front =
            (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
        if x < (a + 1.0) / (a + b + 2.0) {
            front * continued_fraction(x, a, b) / a
        } else {
            1.0 - front * continued_fraction(1.0 - x, b, a) / b
        }
    }

    /// Lentz's evaluation of the incomplete beta's continued fraction.
    fn continued_fraction(x: f64, a: f64, b: f64) -> f64 {
        const TINY: f64 = 1e-300;
        let mut c = 1.0;
        let mut d = 1.0 - (a + b) * x / (a + 1.0);
        d = if d.abs() < TINY { TINY } else { d };
        d = 1.0 / d;
        let mut h = d;
        for m in 1..300 {
            let m = f64::from(m);
            for numerator in [
                m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
                -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
            ] {
                d = 1.0 + numerator * d;
                d = if d.abs() < TINY { TINY } else { d };
                c = 1.0 + numerator / c;
                c = if c.abs() < TINY { TINY } else { c };
                d = 1.0 / d;
                h *= d * c;
            }
            if (d * c - 1.0).abs() < 1e-15 {
                break;
            }
        }
        h
    }

    /// The least-squares line through `(x, y)`: intercept and slope; `None` for fewer than 2
    /// points or a constant x.
    pub fn line(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
        let n = x.len() as f64;
        if x.len() < 2 {
            return None;
        }
        let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
        let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
        let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
        (sxx > 0.0).then(|| {
            let slope = sxy / sxx;
            (my - slope * mx, slope)
        })
    }

    /// Leave-one-group-out RMSE: each group's points predicted by the line fitted on the
    /// others'; `None` unless every point could be predicted (two groups at least).
    pub fn lofo_rmse<G: PartialEq>(x: &[f64], y: &[f64], groups: &[G]) -> Option<f64> {
        let mut sq = 0.0;
        for (i, g) in groups.iter().enumerate() {
            let (xs, ys): (Vec<f64>, Vec<f64>) = (0..x.len())
                .filter(|&j| groups[j] != *g)
                .map(|j| (x[j], y[j]))
                .unzip();
            let (a, b) = line(&xs, &ys)?;
            sq += (a + b * x[i] - y[i]).powi(2);
        }
        (!x.is_empty()).then(|| (sq / x.len() as f64).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::stats::*;

    #[test]
    fn spearman_is_one_for_any_increasing_relation_and_handles_ties() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [1.0, 8.0, 27.0, 64.0, 125.0];
        assert!((spearman(&x, &y).unwrap() - 1.0).abs() < 1e-12);
        let rev: Vec<f64> = y.iter().rev().copied().collect();
        assert!((spearman(&x, &rev).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0]), vec![3.5, 1.0, 3.5, 2.0]);
        assert_eq!(spearman(&[1.0, 2.0], &[2.0, 1.0]), None, "two points");
        assert_eq!(
            spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]),
            None,
            "constant"
        );
    }

    #[test]
    fn p_values_match_the_t_distribution() {
        // r = 0.5 over 10 points: t = 1.633 with 8 df, two-sided p = 0.1411.
        let p = correlation_p(0.5, 10).unwrap();
        assert!((p - 0.1411).abs() < 5e-4, "{p}");
        // r = 0.9 over 5 points: t = 3.576 with 3 df, p = 0.0374.
        let p = correlation_p(0.9, 5).unwrap();
        assert!((p - 0.0374).abs() < 5e-4, "{p}");
        assert_eq!(correlation_p(0.0, 10), Some(1.0));
        assert!((incomplete_beta(0.5, 3.0, 3.0) - 0.5).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn leave_one_family_out_is_exact_on_a_line_and_needs_two_families() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let y: Vec<f64> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        let groups = ["a", "a", "b", "b", "c", "c"];
        assert!(lofo_rmse(&x, &y, &groups).unwrap() < 1e-12);
        assert_eq!(lofo_rmse(&x, &y, &["a"; 6]), None);
        // Off the line by 1 at one point: its own prediction misses by 1, the others' lines
        // shift.
        let mut bent = y.clone();
        bent[5] += 1.0;
        assert!(lofo_rmse(&x, &bent, &groups).unwrap() > 0.4);
    }

    use cwm_formats::Versioned;
    use cwm_formats::evaluate::EvaluateSummary;
    use cwm_models::{Family, Size};

    use super::predictor_table;
    use crate::inputs::{EvalResult, Inputs, Origin};

    fn evaluation(family: Family, split: &str, loss: f64, exact: f64) -> EvalResult {
        EvalResult {
            origin: Origin {
                instance: format!("evaluate[{}-{split}]", family.name()),
                kind: "evaluate".into(),
                hash: format!("{}-{split}", family.name()),
            },
            family,
            size: Size::D128,
            summary: EvaluateSummary {
                version: EvaluateSummary::VERSION,
                kind: "evaluate".into(),
                split: split.into(),
                arch: family.name().into(),
                size: "d128".into(),
                params: 1,
                model_hash: None,
                data_hash: None,
                games: 10,
                steps: 100,
                loss,
                labelwise: 0.9,
                exact_state: exact,
                trajectory: exact / 2.0,
                exact_games: 1,
                max_steps: 0,
                sampled_mass: None,
            },
        }
    }

    /// Four cells whose real-split loss falls as their random-split ExactState rises.
    fn inputs(cells: usize) -> Inputs {
        let families = [
            Family::Transformer,
            Family::Slice,
            Family::Mamba3,
            Family::Gdn,
        ];
        let mut evaluate = Vec::new();
        for (i, &family) in families.iter().take(cells).enumerate() {
            let i = i as f64;
            evaluate.push(evaluation(family, "test_real", 1.0 - 0.1 * i, 0.9));
            evaluate.push(evaluation(family, "test_random", 0.0, 0.1 + 0.1 * i * i));
        }
        Inputs {
            evaluate,
            markov: crate::tables::markov_test_inputs().markov,
            ..Inputs::default()
        }
    }

    #[test]
    fn the_table_has_a_row_per_predictor_with_what_the_cells_hold() {
        let table = predictor_table(&inputs(4)).unwrap();
        assert_eq!(table.id, "beyond_predictors");
        assert_eq!(table.rows.len(), 8);
        let row = |name: &str| -> Vec<String> {
            let r = table.rows.iter().find(|r| r[0].text == name).unwrap();
            r.iter().map(|c| c.text.clone()).collect()
        };
        let loss = row("Loss (real)");
        assert_eq!(loss[1..4], ["4", "-1.00", "0.000"]);
        assert_eq!(loss[6], "-1.00", "trajectory is half the ExactState here");
        // The real ExactState is the same in every cell: no correlation.
        assert_eq!(row("ExactState (real, %)")[2], "–");
        // Two cells have a Markov test: too few for a correlation.
        let swaps = row("Same prediction over swaps (E8, %)");
        assert_eq!(swaps[1..3], ["2", "–"]);
        assert_eq!(row("Plausible-error share (E1, %)")[1], "0");
        assert!(table.notes[0].contains("n ≤ 28"));
    }

    #[test]
    fn fewer_than_three_cells_make_no_table_and_say_why() {
        let why = predictor_table(&inputs(2)).unwrap_err();
        assert!(
            why.reason.contains("2 family × size cells"),
            "{}",
            why.reason
        );
    }
}
