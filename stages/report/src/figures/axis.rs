//! Axes: the range a panel shows, its ticks and their labels, and where a value lands.
//!
//! A log axis works in `log10` of the data internally (plotters draws a linear axis of those
//! coordinates, with the ticks placed and labelled here), so every panel has the same
//! coordinate type whatever its scale.

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly spaced values.
    Linear,
    /// Evenly spaced powers of ten; only positive values are on the axis.
    Log,
}

/// Where a value lands on an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Place {
    /// Inside the range, at this coordinate.
    Inside(f64),
    /// Beyond the range (`above`: past the upper end), drawn at the edge's coordinate.
    Clipped {
        /// The edge's coordinate.
        coord: f64,
        /// Whether the value is past the upper end.
        above: bool,
    },
    /// Not a number: no place at all.
    Missing,
}

/// One axis of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The axis title.
    pub title: String,
    /// The scale.
    pub scale: Scale,
    /// Lower end of the range, in data units.
    pub lo: f64,
    /// Upper end of the range, in data units.
    pub hi: f64,
    /// Ticks in data units, with their labels.
    pub ticks: Vec<(f64, String)>,
}

/// How far a loss may exceed its panel's median before it is drawn clipped at the top edge:
/// three decades, so that one diverged run (a loss of 10¹⁷) does not flatten the others.
pub const LOSS_CAP_RATIO: f64 = 1e3;

impl Axis {
    /// A log axis over the positive finite `values`, padded by a small factor. With `cap`, the
    /// range stops at `cap` times the median of those values, and larger ones are clipped.
    /// Ticks are powers of ten (or 1-2-5 steps within them) labelled by `label`.
    pub fn log(
        title: impl Into<String>,
        values: impl IntoIterator<Item = f64>,
        cap: Option<f64>,
        label: fn(f64) -> String,
    ) -> Self {
        let mut kept: Vec<f64> = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        kept.sort_by(f64::total_cmp);
        if let (Some(ratio), Some(&median)) = (cap, kept.get(kept.len() / 2)) {
            kept.retain(|&v| v <= median * ratio);
        }
        let (lo, hi) = match (kept.first(), kept.last()) {
            (Some(&lo), Some(&hi)) if hi > lo * 1.0001 => {
                let pad = (hi / lo).powf(0.06).max(1.12);
                (lo / pad, hi * pad)
            }
            (Some(&v), _) => (v / 10f64.sqrt(), v * 10f64.sqrt()),
            _ => (0.01, 1.0),
        };
        let (lo, hi) = usable(lo, hi, (0.01, 1.0));
        let ticks = log_ticks(lo, hi)
            .into_iter()
            .map(|t| (t, label(t)))
            .collect();
        Self {
            title: title.into(),
            scale: Scale::Log,
            lo,
            hi,
            ticks,
        }
    }

    /// A linear axis of percentages over the finite `values`. All values equal: one unit
    /// either side, within 0..100 (`0..1` at 0, `99..100` at 100); no finite value: `0..100`.
    /// The range is then padded by 5 % of its span (so that a marker at 0 is not cut by the
    /// axis line), its ticks kept within 0..100.
    pub fn percent(title: impl Into<String>, values: impl IntoIterator<Item = f64>) -> Self {
        let (lo, hi) = finite_range(values);
        let (lo, hi) = if !(lo.is_finite() && hi.is_finite()) {
            (0.0, 100.0)
        } else if hi - lo < 1e-9 {
            match lo {
                0.0 => (0.0, 1.0),
                100.0 => (99.0, 100.0),
                v if (0.0..=100.0).contains(&v) => ((v - 1.0).max(0.0), (v + 1.0).min(100.0)),
                v => (v - 1.0, v + 1.0),
            }
        } else {
            (lo, hi)
        };
        let pad = (hi - lo) * 0.05;
        let (lo, hi) = usable(lo - pad, hi + pad, (-5.0, 105.0));
        let mut axis = Self::linear_range(title, lo, hi, fixed_label);
        if (lo..=hi).contains(&0.0) || (lo..=hi).contains(&100.0) {
            axis.ticks.retain(|(t, _)| (0.0..=100.0).contains(t));
        }
        axis
    }

    /// A linear axis from 0 to the largest finite value, 3 % beyond it (`0..1` without one);
    /// ticks labelled by `label`.
    pub fn from_zero(
        title: impl Into<String>,
        values: impl IntoIterator<Item = f64>,
        label: fn(f64) -> String,
    ) -> Self {
        let (_, hi) = finite_range(values);
        let (_, hi) = usable(0.0, hi * 1.03, (0.0, 1.0));
        let ticks = linear_ticks(0.0, hi)
            .into_iter()
            .map(|t| (t, label(t)))
            .collect();
        Self {
            title: title.into(),
            scale: Scale::Linear,
            lo: 0.0,
            hi,
            ticks,
        }
    }

    /// A linear axis over the finite `values`, negative ones too, padded by 3 % of their span
    /// on either side (one unit either side of a single value; `0..1` without one).
    pub fn span(title: impl Into<String>, values: impl IntoIterator<Item = f64>) -> Self {
        let (lo, hi) = finite_range(values);
        let (lo, hi) = if lo.is_finite() && hi > lo {
            let pad = (hi - lo) * 0.03;
            (lo - pad, hi + pad)
        } else {
            (lo - 1.0, lo + 1.0)
        };
        let (lo, hi) = usable(lo, hi, (0.0, 1.0));
        Self::linear_range(title, lo, hi, fixed_label)
    }

    /// A linear axis of named groups: group `i` spans `i - 0.5 .. i + 0.5`, its tick and label
    /// at `i`.
    pub fn groups(title: impl Into<String>, labels: &[String]) -> Self {
        Self {
            title: title.into(),
            scale: Scale::Linear,
            lo: -0.5,
            hi: labels.len().max(1) as f64 - 0.5,
            ticks: labels
                .iter()
                .enumerate()
                .map(|(i, l)| (i as f64, l.clone()))
                .collect(),
        }
    }

    fn linear_range(
        title: impl Into<String>,
        lo: f64,
        hi: f64,
        label: fn(f64, usize) -> String,
    ) -> Self {
        let ticks = linear_ticks(lo, hi);
        let decimals = ticks
            .get(1)
            .zip(ticks.first())
            .map_or(0, |(b, a)| step_decimals(b - a));
        Self {
            title: title.into(),
            scale: Scale::Linear,
            lo,
            hi,
            ticks: ticks.into_iter().map(|t| (t, label(t, decimals))).collect(),
        }
    }

    /// A value's coordinate (its `log10` on a log axis), whether or not it is in range.
    pub fn coord(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Linear => value,
            Scale::Log => value.log10(),
        }
    }

    /// The range as coordinates.
    pub fn coord_range(&self) -> (f64, f64) {
        (self.coord(self.lo), self.coord(self.hi))
    }

    /// The ticks' coordinates.
    pub fn tick_coords(&self) -> Vec<f64> {
        self.ticks.iter().map(|&(t, _)| self.coord(t)).collect()
    }

    /// The label of the tick at coordinate `coord` (empty when there is none).
    pub fn label_at(&self, coord: f64) -> String {
        self.ticks
            .iter()
            .find(|&&(t, _)| (self.coord(t) - coord).abs() <= 1e-9 * (1.0 + coord.abs()))
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }

    /// Where `value` lands: inside, clipped to an edge (past the range, infinite, or not
    /// positive on a log axis), or nowhere (NaN).
    pub fn place(&self, value: f64) -> Place {
        let (lo, hi) = self.coord_range();
        if value.is_nan() {
            Place::Missing
        } else if value > self.hi {
            Place::Clipped {
                coord: hi,
                above: true,
            }
        } else if value < self.lo {
            Place::Clipped {
                coord: lo,
                above: false,
            }
        } else {
            Place::Inside(self.coord(value))
        }
    }

    /// `value`'s coordinate, clipped to the range; `None` for NaN.
    pub fn clamped(&self, value: f64) -> Option<f64> {
        match self.place(value) {
            Place::Inside(c) | Place::Clipped { coord: c, .. } => Some(c),
            Place::Missing => None,
        }
    }
}

/// `(lo, hi)` when both are finite, `lo < hi` and the span is finite (values near the limits
/// of `f64` can overflow it), else `default`.
fn usable(lo: f64, hi: f64, default: (f64, f64)) -> (f64, f64) {
    if lo.is_finite() && hi.is_finite() && lo < hi && (hi - lo).is_finite() {
        (lo, hi)
    } else {
        default
    }
}

/// The smallest and largest finite value (`(inf, -inf)` without one).
fn finite_range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// Ticks for a linear axis on `[lo, hi]`: the multiples of 1, 2 or 5 × 10ᵏ inside it, the
/// finest step that gives at most seven.
pub fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo) {
        return Vec::new();
    }
    let base = 10f64.powf(((hi - lo) / 7.0).log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0, 20.0] {
        let step = base * m;
        let (first, last) = ((lo / step).ceil() as i64, (hi / step).floor() as i64);
        if last - first < 7 {
            return (first..=last).map(|k| k as f64 * step).collect();
        }
    }
    Vec::new()
}

/// Ticks for a log axis on `[lo, hi]` (`0 < lo < hi`): from the densest of the mantissa sets
/// 1–9, 1-2-3-5, 1-2-5, 1-3 and 1 (times powers of ten) that gives at most seven ticks; every
/// k-th power of ten when even those are more; linear ticks when the range is too narrow for
/// three and those give more.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let within = |mantissas: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|&t| t >= lo * (1.0 - 1e-12) && t <= hi * (1.0 + 1e-12))
            .collect()
    };
    const SETS: [&[f64]; 5] = [
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        &[1.0, 2.0, 3.0, 5.0],
        &[1.0, 2.0, 5.0],
        &[1.0, 3.0],
        &[1.0],
    ];
    for set in SETS {
        let ticks = within(set);
        if ticks.len() <= 7 {
            let linear = linear_ticks(lo, hi);
            return if ticks.len() >= 3 || linear.len() <= ticks.len() {
                ticks
            } else {
                linear
            };
        }
    }
    let decades = within(&[1.0]);
    let every = decades.len().div_ceil(7);
    decades.into_iter().step_by(every).collect()
}

/// Decimals that print a multiple of `step` (1, 2 or 5 × 10ᵏ) exactly.
fn step_decimals(step: f64) -> usize {
    if step.is_finite() && step > 0.0 {
        (-step.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        0
    }
}

fn fixed_label(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    // `-0` reads oddly on an axis.
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        text.trim_start_matches('-').to_owned()
    } else {
        text
    }
}

/// `text` without trailing zeros after a decimal point (and without the point then).
fn trim_zeros(text: &str) -> String {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text.to_owned()
    }
}

/// A number in few characters: plain from 0.001 to 10,000 (at most four decimals), else in
/// scientific notation with two significant digits (`5e-5`, `4.4e17`); `NaN`, `inf`, `-inf`.
pub fn short_number(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let a = value.abs();
    if value == 0.0 || (1e-3..1e4).contains(&a) {
        let text = trim_zeros(&format!("{value:.4}"));
        if text == "-0" { "0".to_owned() } else { text }
    } else {
        let text = format!("{value:.1e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) => format!("{}e{exponent}", trim_zeros(mantissa)),
            None => text,
        }
    }
}

/// A parameter count in millions, without unit (`3`, `0.5`, `3.13`).
pub fn millions(value: f64) -> String {
    trim_zeros(&format!("{:.3}", value / 1e6))
}

/// A step count: `500`, `1.5k`, `300k`, `1.2M`.
pub fn steps(value: f64) -> String {
    if value.abs() >= 1e6 {
        format!("{}M", trim_zeros(&format!("{:.2}", value / 1e6)))
    } else if value.abs() >= 1e3 {
        format!("{}k", trim_zeros(&format!("{:.1}", value / 1e3)))
    } else {
        format!("{value:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_axis_reaches_below_zero_and_pads_its_range() {
        let axis = Axis::span("plies", [-35.0, 5.0, 95.0, f64::NAN]);
        assert!(axis.lo < -35.0 && axis.lo > -40.0, "{axis:?}");
        assert!(axis.hi > 95.0 && axis.hi < 100.0, "{axis:?}");
        assert!(
            axis.ticks.iter().any(|(t, l)| *t == 0.0 && l == "0"),
            "{axis:?}"
        );
        let one = Axis::span("plies", [4.0]);
        assert_eq!((one.lo, one.hi), (3.0, 5.0));
        let none = Axis::span("plies", []);
        assert_eq!((none.lo, none.hi), (0.0, 1.0));
    }

    #[test]
    fn equal_percentages_get_a_one_unit_range() {
        let zero = Axis::percent("ExactState (%)", [0.0, 0.0, 0.0]);
        assert!(
            (zero.lo + 0.05).abs() < 1e-9 && (zero.hi - 1.05).abs() < 1e-9,
            "{zero:?}"
        );
        assert!(zero.ticks.len() >= 2, "{:?}", zero.ticks);
        let labels: Vec<&str> = zero.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
        let full = Axis::percent("x", [100.0]);
        assert!(
            full.lo < 99.0 && full.hi > 100.0 && full.hi < 100.1,
            "{full:?}"
        );
        assert_eq!(full.ticks.last().map(|t| t.1.as_str()), Some("100.0"));
        let mid = Axis::percent("x", [42.0, 42.0]);
        assert!(
            mid.lo < 41.0 && mid.lo > 40.8 && mid.hi > 43.0 && mid.hi < 43.2,
            "{mid:?}"
        );
        let none = Axis::percent("x", [f64::NAN]);
        assert_eq!((none.lo, none.hi), (-5.0, 105.0));
        // Ticks never leave 0..100 on a padded percentage axis.
        let wide = Axis::percent("x", [0.5, 99.5]);
        assert!(wide.ticks.iter().all(|(t, _)| (0.0..=100.0).contains(t)));
        assert_eq!(wide.ticks.last().map(|t| t.1.as_str()), Some("100"));
    }

    #[test]
    fn a_log_axis_clips_a_diverged_loss_and_keeps_the_rest() {
        // Table 10's Diagonal SLiCE losses among ordinary ones.
        let values = [
            0.39,
            0.12,
            0.057,
            0.052,
            35.9,
            4.43e17,
            8.23e6,
            1.6,
            f64::NAN,
        ];
        let axis = Axis::log("Loss", values, Some(LOSS_CAP_RATIO), short_number);
        assert!(axis.hi > 35.9 && axis.hi < 100.0, "{axis:?}");
        assert!(axis.lo < 0.052 && axis.lo > 0.01, "{axis:?}");
        assert!(matches!(
            axis.place(4.43e17),
            Place::Clipped { above: true, .. }
        ));
        assert!(matches!(
            axis.place(f64::INFINITY),
            Place::Clipped { above: true, .. }
        ));
        assert!(matches!(
            axis.place(0.0),
            Place::Clipped { above: false, .. }
        ));
        assert_eq!(axis.place(f64::NAN), Place::Missing);
        assert_eq!(axis.place(0.1), Place::Inside(-1.0));
        assert!((2..=7).contains(&axis.ticks.len()), "{:?}", axis.ticks);
        // Equal values: a decade around them; nothing usable: a default decade pair.
        let one = Axis::log("Loss", [0.2, 0.2], None, short_number);
        assert!(one.lo < 0.2 && one.hi > 0.2 && one.hi / one.lo > 9.0);
        let none = Axis::log("Loss", [f64::NAN, -1.0, f64::INFINITY], None, short_number);
        assert_eq!((none.lo, none.hi), (0.01, 1.0));
    }

    #[test]
    fn log_ticks_suit_wide_and_narrow_ranges() {
        let params = log_ticks(2.5e6, 50e6);
        assert_eq!(
            params.iter().map(|&t| millions(t)).collect::<Vec<_>>(),
            ["3", "5", "10", "20", "30", "50"]
        );
        let decades = log_ticks(1e-6, 1.0);
        assert_eq!(decades.len(), 7, "{decades:?}");
        let many = log_ticks(1e-20, 1e20);
        assert!((2..=7).contains(&many.len()), "{many:?}");
        // 3.13M to 3.14M: no power-of-ten multiple inside, linear ticks instead.
        let narrow = log_ticks(3.12e6, 3.15e6);
        assert!((2..=7).contains(&narrow.len()), "{narrow:?}");
        assert!(narrow.iter().all(|t| (3.12e6..=3.15e6).contains(t)));
        assert!(log_ticks(1.0, 1.0).is_empty());
        assert!(log_ticks(0.0, 1.0).is_empty());
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(short_number(0.001), "0.001");
        assert_eq!(short_number(3e-5), "3e-5");
        assert_eq!(short_number(4.43e17), "4.4e17");
        assert_eq!(short_number(35.9174), "35.9174");
        assert_eq!(short_number(f64::NAN), "NaN");
        assert_eq!(short_number(f64::NEG_INFINITY), "-inf");
        assert_eq!(millions(3_128_150.0), "3.128");
        assert_eq!(millions(2_500_000.0), "2.5");
        assert_eq!(steps(1500.0), "1.5k");
        assert_eq!(steps(310_944.0), "310.9k");
        assert_eq!(steps(40.0), "40");
        assert_eq!(linear_ticks(0.0, 1.0).len(), 6);
        assert_eq!(linear_ticks(-0.5, 3.5), [0.0, 1.0, 2.0, 3.0]);
        // A label is found at its tick's coordinate, and only there.
        let axis = Axis::percent("x", [0.0, 0.0]);
        let (tick, label) = axis.ticks[3].clone();
        assert_eq!(
            (axis.label_at(axis.coord(tick)), label.as_str()),
            (label.clone(), "0.6")
        );
        assert_eq!(axis.label_at(0.55), "");
    }
}
