//! The figures beside the tables beyond the paper, from `diagnose` artifacts: per split, in
//! the tables' split and model order,
//!
//! * `figure_beyond_validity_<split>` (E1): the validity flags among wrong steps, stacked per
//!   model, and the V1 pass rate per prefix bin;
//! * `figure_beyond_fields_<split>` (E2): halfmove-clock and fullmove-number accuracy by the
//!   counter's true value;
//! * `figure_beyond_affordance_<split>` (E3, E4): legal-move IoU and ExactState per prefix
//!   bin, and the lengths of the error runs;
//! * `figure_beyond_memory_<split>` (E5): square accuracy by staleness and castling-label
//!   accuracy by plies since the right was lost;
//! * `figure_beyond_novelty_<split>` (E7, when a diagnosis was given a novelty artifact):
//!   ExactState by plies since deviation and by the position's training count;
//! * `figure_beyond_mass_<split>` (E12): the histograms of the sampled valid mass and of the
//!   true-state mass;
//! * `figure_beyond_switch_<split>` (E6, when the split holds real-prefix/random-continuation
//!   games): ExactState by plies since the switch, a panel per switch ply;
//! * `figure_beyond_probes_<split>` (E9, from `probe` artifacts): the probes' square accuracy
//!   by relative depth ℓ/L, the `id` probes and (when fitted) the `ood` probes;
//! * `figure_beyond_markov_<split>` (E10, from `markov` artifacts): Cohen's d of within-class
//!   against population cosine by relative depth, natural transpositions and swaps.
//!
//! A value the tables print as `–` (undefined, or resting on fewer than
//! [`MIN_N`](cwm_formats::diagnose::MIN_N) cases) is NaN here: the model's line breaks there
//! and it has no marker or bar. A figure with nothing to draw is not made.

use cwm_formats::diagnose::{
    BinRate, CountBin, DiagnoseSummary, MIN_N, NamedRate, Rate, SwitchCurve,
};
use cwm_formats::novelty::ExactBin;

use super::axis::short_number;
use super::{
    Axis, Bar, Figure, LegendEntry, Line, Mark, Panel, Place, Planned, RGBColor, Shape, Symbol,
};
use crate::inputs::{DiagnoseResult, Inputs, MarkovRun, ProbeRun};
use crate::tables::{
    beyond_runs, cell_name, file_safe, markov_runs, probe_result, probe_runs, relative_depth,
};

/// Height of one row of panels.
const ROW_HEIGHT: u32 = 300;
/// How many flags the stacked bars show separately; the rest are summed.
pub const TOP_FLAGS: usize = 6;
/// The models' colours: twenty distinct ones, the first ten strong, the next ten lighter.
const MODEL_COLORS: [RGBColor; 20] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(247, 182, 210),
    RGBColor(199, 199, 199),
    RGBColor(219, 219, 141),
    RGBColor(158, 218, 229),
];
/// The models' marker shapes, cycled.
const MODEL_SHAPES: [Shape; 4] = [
    Shape::Circle,
    Shape::Square,
    Shape::Diamond,
    Shape::TriangleDown,
];
/// The colours of the flags shown separately, the commonest first.
const FLAG_COLORS: [RGBColor; TOP_FLAGS] = [
    RGBColor(27, 158, 119),
    RGBColor(217, 95, 2),
    RGBColor(117, 112, 179),
    RGBColor(231, 41, 138),
    RGBColor(102, 166, 30),
    RGBColor(230, 171, 2),
];
/// The colour of the summed remaining flags.
const OTHER_FLAGS: RGBColor = RGBColor(160, 160, 160);
/// Marker radius on lines over prefix bins (many points).
const BIN_RADIUS: u32 = 3;
/// Marker radius on lines over named bins (few points).
const CATEGORY_RADIUS: u32 = 4;
/// Width of a group of bars, in units of the x axis (one per group).
const GROUP_WIDTH: f64 = 0.8;
/// Width of a stacked bar.
const STACK_WIDTH: f64 = 0.6;
/// What every caption says about missing points.
const GAP_NOTE: &str = "A value that is undefined or rests on fewer than 30 steps, games, runs \
                        or squares (printed – in the tables) is left out: the model's line \
                        breaks there, and a model without any value in a panel has no line in it.";

/// A model's colour and marker shape by its place in the legend: every pair differs for the
/// first 80 models.
pub fn model_style(index: usize) -> (RGBColor, Shape) {
    let color = MODEL_COLORS[index % MODEL_COLORS.len()];
    let shape = MODEL_SHAPES[(index + index / MODEL_COLORS.len()) % MODEL_SHAPES.len()];
    (color, shape)
}

/// Every beyond figure: for each split in report order, those of validity, fields,
/// affordance, memory, novelty, mass and switch that have something to draw.
pub fn beyond(inputs: &Inputs) -> Vec<Planned> {
    beyond_runs(inputs)
        .iter()
        .flat_map(|(split, runs)| split_figures(split, runs))
        .collect()
}

/// The figures of one split.
fn split_figures(split: &str, runs: &[&DiagnoseResult]) -> Vec<Planned> {
    let safe = file_safe(split);
    let figures = [
        ("validity", Some(validity(split, runs))),
        ("fields", Some(fields(split, runs))),
        ("affordance", Some(affordance(split, runs))),
        ("memory", Some(memory(split, runs))),
        ("novelty", novelty(split, runs)),
        ("mass", Some(mass(split, runs))),
        ("switch", switch(split, runs)),
    ];
    figures
        .into_iter()
        .filter_map(|(kind, figure)| {
            figure.filter(has_data).map(|figure| Planned {
                id: format!("figure_beyond_{kind}_{safe}"),
                figure,
            })
        })
        .collect()
}

/// The probe figure of every split the probes were scored on, when it has a line to draw.
pub fn probes(inputs: &Inputs) -> Vec<Planned> {
    probe_runs(inputs)
        .iter()
        .filter_map(|(split, runs)| {
            let figure = probe_figure(split, runs);
            has_data(&figure).then(|| Planned {
                id: format!("figure_beyond_probes_{}", file_safe(split)),
                figure,
            })
        })
        .collect()
}

/// Each run's square accuracy (%) of the `set` probes on `split` at ℓ/L, ℓ = 0..=L (the head
/// input left out: it is no deeper than the last block).
fn depth_series(runs: &[&ProbeRun], set: &str, split: &str) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(model, p)| {
            let s = &p.summary;
            let points = (0..=s.blocks)
                .filter_map(|layer| {
                    let depth = relative_depth(layer, s.blocks)?;
                    let acc = probe_result(s, set, split, layer)
                        .and_then(|r| r.scores.square_acc)
                        .filter(|a| a.is_finite())
                        .map_or(f64::NAN, |a| a * 100.0);
                    Some((depth, acc))
                })
                .collect();
            Series { model, points }
        })
        .collect()
}

fn probe_figure(split: &str, runs: &[&ProbeRun]) -> Figure {
    let depth_axis = || Axis::from_zero("Relative depth ℓ/L (0 = embedding)", [1.0], short_number);
    let y = ("Square accuracy (%)", Unit::Percent);
    let mut panels = vec![line_panel(
        "(a) probes fitted on training games".to_owned(),
        depth_axis(),
        y,
        &depth_series(runs, cwm_formats::probe::SET_ID, split),
        CATEGORY_RADIUS,
    )];
    let ood = depth_series(runs, cwm_formats::probe::SET_OOD, split);
    if ood.iter().any(|s| s.points.iter().any(|p| p.1.is_finite())) {
        panels.push(line_panel(
            "(b) probes fitted on random games".to_owned(),
            depth_axis(),
            y,
            &ood,
            CATEGORY_RADIUS,
        ));
    }
    let legend = runs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (color, shape) = model_style(i);
            LegendEntry {
                symbol: Symbol::LineMark(shape),
                color,
                label: cell_name(p.family, p.size),
            }
        })
        .collect();
    Figure {
        heading: format!("Beyond the paper: where the board is linearly readable ({split})"),
        caption: format!(
            "Square accuracy on {split} of a linear probe (64 squares × 13 classes) on each \
             layer's hidden state, by relative depth ℓ/L: 0 is the embedding output, 1 the \
             last block's output; one line per model. (a) probes fitted on the model's \
             training games; (b) probes fitted on random legal games of another seed, when \
             fitted. The model's own head and the majority baseline are in the \
             beyond_probe_baselines table. {GAP_NOTE}"
        ),
        legend,
        rows: vec![panels],
        row_height: ROW_HEIGHT,
    }
}

/// The path-independence figure of every split tested, when it has a line to draw.
pub fn markov(inputs: &Inputs) -> Vec<Planned> {
    markov_runs(inputs)
        .iter()
        .filter_map(|(split, runs)| {
            let figure = markov_figure(split, runs);
            has_data(&figure).then(|| Planned {
                id: format!("figure_beyond_markov_{}", file_safe(split)),
                figure,
            })
        })
        .collect()
}

/// Each run's d in class set `set` at ℓ/L, ℓ = 0..=L.
fn d_series(runs: &[&MarkovRun], set: &str) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(model, m)| {
            let blocks = m.summary.blocks;
            let layers = m.summary.sets.iter().find(|s| s.name == set);
            let points = layers
                .map(|s| {
                    s.layers
                        .iter()
                        .filter_map(|l| {
                            let depth = relative_depth(l.layer, blocks)?;
                            Some((depth, l.d.filter(|d| d.is_finite()).unwrap_or(f64::NAN)))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Series { model, points }
        })
        .collect()
}

fn markov_figure(split: &str, runs: &[&MarkovRun]) -> Figure {
    let depth_axis = || Axis::from_zero("Relative depth ℓ/L (0 = embedding)", [1.0], short_number);
    let panels: Vec<Panel> = [
        (cwm_formats::markov::SET_NATURAL, "natural transpositions"),
        (cwm_formats::markov::SET_SWAP, "swapped move orders"),
    ]
    .into_iter()
    .map(|(set, caption)| {
        line_panel(
            caption.to_owned(),
            depth_axis(),
            ("Cohen's d", Unit::FromZero),
            &d_series(runs, set),
            CATEGORY_RADIUS,
        )
    })
    .filter(|panel| !panel.lines.is_empty())
    .collect();
    let legend = runs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (color, shape) = model_style(i);
            LegendEntry {
                symbol: Symbol::LineMark(shape),
                color,
                label: cell_name(m.family, m.size),
            }
        })
        .collect();
    Figure {
        heading: format!("Beyond the paper: path independence of hidden states ({split})"),
        caption: format!(
            "Cohen's d of the cosine similarity of hidden states within classes of move orders \
             that reach the same state against random pairs, on {split}, by relative depth ℓ/L \
             (0 the embedding output, 1 the last block), one line per model, a panel per \
             class set: natural transpositions among the games' own prefixes, and prefixes beside \
             their copies with two quiet moves of one side swapped. A class set with \
             no class has no panel. {GAP_NOTE}"
        ),
        legend,
        rows: vec![panels],
        row_height: ROW_HEIGHT,
    }
}

/// Whether some panel of `figure` draws a bar or a line.
fn has_data(figure: &Figure) -> bool {
    figure
        .rows
        .iter()
        .flatten()
        .any(|p| !p.bars.is_empty() || !p.lines.is_empty())
}

/// A rate as the tables show it: its value, NaN when undefined or resting on too few cases.
fn shown(rate: &Rate) -> f64 {
    match rate.value {
        Some(v) if !rate.low_n && v.is_finite() => v,
        _ => f64::NAN,
    }
}

/// A proportion as a percentage (NaN as for [`shown`]).
fn pct(rate: &Rate) -> f64 {
    shown(rate) * 100.0
}

/// ExactState of a bin as a percentage; NaN when it has fewer than [`MIN_N`] steps.
fn exact_pct(bin: &ExactBin) -> f64 {
    match bin.exact_state {
        Some(v) if bin.n >= MIN_N && v.is_finite() => v * 100.0,
        _ => f64::NAN,
    }
}

/// One model's points in a panel: `model` is its place in the legend.
#[derive(Debug, Clone, PartialEq)]
struct Series {
    model: usize,
    points: Vec<(f64, f64)>,
}

/// What a panel's vertical axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A percentage, from 0 to the largest value.
    Percent,
    /// A quantity (a mean in 0..1, a share that may pass 100).
    FromZero,
}

impl Unit {
    /// The axis over `values`, from 0 up.
    fn axis(self, title: &str, values: impl IntoIterator<Item = f64>) -> Axis {
        match self {
            Unit::Percent => Axis::percent(title, values.into_iter().chain([0.0])),
            Unit::FromZero => Axis::from_zero(title, values, short_number),
        }
    }
}

/// A panel of one line per series with a marker at each defined point; a series without a
/// defined point has no line.
fn line_panel(
    caption: String,
    x: Axis,
    (y_title, unit): (&str, Unit),
    series: &[Series],
    radius: u32,
) -> Panel {
    let y = unit.axis(
        y_title,
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
    );
    let mut panel = Panel::new(caption, x, y);
    for s in series {
        let defined: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| x.is_finite() && matches!(panel.y.place(y), Place::Inside(_)))
            .collect();
        if defined.is_empty() {
            continue;
        }
        let (color, shape) = model_style(s.model);
        panel.lines.push(Line {
            points: s.points.clone(),
            color,
            dashed: false,
        });
        panel.marks.extend(defined.into_iter().map(|(x, y)| Mark {
            x,
            y,
            shape,
            filled: true,
            color,
            radius,
        }));
    }
    panel
}

/// The bin labels of every run in order of first appearance, and each run's values over them
/// (NaN where a run lacks a bin), at x = the label's index.
fn categorical(
    runs: &[&DiagnoseResult],
    bins: impl Fn(&DiagnoseSummary) -> Vec<(String, f64)>,
) -> (Vec<String>, Vec<Series>) {
    let per_run: Vec<Vec<(String, f64)>> = runs.iter().map(|d| bins(&d.summary)).collect();
    let mut labels: Vec<String> = Vec::new();
    for (label, _) in per_run.iter().flatten() {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
    let series = per_run
        .iter()
        .enumerate()
        .map(|(model, values)| Series {
            model,
            points: labels
                .iter()
                .enumerate()
                .map(|(i, label)| {
                    let value = values.iter().find(|(l, _)| l == label);
                    (i as f64, value.map_or(f64::NAN, |(_, v)| *v))
                })
                .collect(),
        })
        .collect();
    (labels, series)
}

/// A line panel over named bins.
fn categorical_panel(
    caption: String,
    x_title: &str,
    y: (&str, Unit),
    (labels, series): &(Vec<String>, Vec<Series>),
) -> Panel {
    line_panel(
        caption,
        Axis::groups(x_title, labels),
        y,
        series,
        CATEGORY_RADIUS,
    )
}

/// Each run's values per prefix bin, at the bin's middle step, bins in step order.
fn binned(
    runs: &[&DiagnoseResult],
    bins: impl Fn(&DiagnoseSummary) -> &[BinRate],
    value: fn(&Rate) -> f64,
) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(model, d)| {
            let mut sorted: Vec<&BinRate> = bins(&d.summary).iter().collect();
            sorted.sort_by_key(|b| (b.start, b.end));
            let points = sorted
                .iter()
                .map(|b| {
                    let middle = (f64::from(b.start) + f64::from(b.end)) / 2.0;
                    (middle, value(&b.rate))
                })
                .collect();
            Series { model, points }
        })
        .collect()
}

/// A line panel over prefix bins, the steps spanning the bins with a defined value.
fn binned_panel(caption: String, y: (&str, Unit), series: &[Series]) -> Panel {
    let defined = |s: &'_ Series| -> Vec<f64> {
        let points = s.points.iter().filter(|p| p.1.is_finite());
        points.map(|p| p.0).collect()
    };
    let xs = series.iter().flat_map(defined);
    let x = Axis::from_zero("Step t (middle of its prefix bin)", xs, short_number);
    line_panel(caption, x, y, series, BIN_RADIUS)
}

/// The legend of the models, numbered when bars are labelled by number.
fn model_legend(runs: &[&DiagnoseResult], numbered: bool) -> Vec<LegendEntry> {
    runs.iter()
        .enumerate()
        .map(|(i, d)| {
            let (color, shape) = model_style(i);
            let name = cell_name(d.family, d.size);
            LegendEntry {
                symbol: Symbol::LineMark(shape),
                color,
                label: if numbered {
                    format!("{} {name}", i + 1)
                } else {
                    name
                },
            }
        })
        .collect()
}

/// The flags shown separately: those firing on some model's wrong steps, ordered by their
/// largest share over the models (the first listed on a tie), at most [`TOP_FLAGS`].
fn top_flags(runs: &[&DiagnoseResult]) -> Vec<String> {
    let mut largest: Vec<(String, f64)> = Vec::new();
    for flag in runs
        .iter()
        .flat_map(|d| &d.summary.validity.flags_non_exact)
    {
        let share = shown(&flag.rate);
        // NaN (not shown) and 0 (never fires) alike.
        if share.is_nan() || share <= 0.0 {
            continue;
        }
        match largest.iter_mut().find(|(name, _)| *name == flag.name) {
            Some(entry) => entry.1 = entry.1.max(share),
            None => largest.push((flag.name.clone(), share)),
        }
    }
    largest.sort_by(|a, b| b.1.total_cmp(&a.1));
    largest.truncate(TOP_FLAGS);
    largest.into_iter().map(|(name, _)| name).collect()
}

/// A model's stack: the share (%) of its wrong steps firing each of `top`, then the summed
/// share of the other flags; `None` when none of its flag shares is shown.
fn flag_stack(flags: &[NamedRate], top: &[String]) -> Option<Vec<f64>> {
    let shares: Vec<(&str, f64)> = flags
        .iter()
        .map(|f| (f.name.as_str(), pct(&f.rate)))
        .filter(|(_, v)| v.is_finite())
        .collect();
    if shares.is_empty() {
        return None;
    }
    let mut stack: Vec<f64> = top
        .iter()
        .map(|t| {
            shares
                .iter()
                .filter(|(name, _)| name == t)
                .map(|(_, v)| v)
                .sum()
        })
        .collect();
    let other = shares
        .iter()
        .filter(|(name, _)| !top.iter().any(|t| t == name))
        .map(|(_, v)| v)
        .sum();
    stack.push(other);
    Some(stack)
}

/// E1 (a): one stacked bar per model of the flags' shares among its wrong steps.
fn flag_panel(runs: &[&DiagnoseResult], top: &[String]) -> Panel {
    let stacks: Vec<Option<Vec<f64>>> = runs
        .iter()
        .map(|d| flag_stack(&d.summary.validity.flags_non_exact, top))
        .collect();
    let totals = stacks.iter().flatten().map(|s| s.iter().sum::<f64>());
    let numbers: Vec<String> = (1..=runs.len()).map(|i| i.to_string()).collect();
    let mut panel = Panel::new(
        "(a) validity flags among wrong steps",
        Axis::groups("Model (numbered as in the legend)", &numbers),
        Unit::FromZero.axis("Share of wrong steps (%)", totals),
    );
    for (i, stack) in stacks.iter().enumerate() {
        let Some(stack) = stack else { continue };
        let x = (i as f64 - STACK_WIDTH / 2.0, i as f64 + STACK_WIDTH / 2.0);
        let mut base = 0.0;
        for (k, &share) in stack.iter().enumerate() {
            if share > 0.0 {
                let color = FLAG_COLORS.get(k).copied().unwrap_or(OTHER_FLAGS);
                panel.bars.push(Bar {
                    x,
                    y: (base, base + share),
                    color,
                });
                base += share;
            }
        }
    }
    panel
}

/// E1: the flags among wrong steps, and V1 per prefix bin.
fn validity(split: &str, runs: &[&DiagnoseResult]) -> Figure {
    let top = top_flags(runs);
    let bars = flag_panel(runs, &top);
    let v1 = binned(runs, |s| &s.validity.v1_by_bin, pct);
    let v1 = binned_panel(
        "(b) valid positions (V1) by prefix bin".to_owned(),
        ("V1 pass rate (%)", Unit::Percent),
        &v1,
    );
    let mut legend = model_legend(runs, true);
    let shown_other = bars.bars.iter().any(|b| b.color == OTHER_FLAGS);
    legend.extend(
        top.iter()
            .zip(FLAG_COLORS)
            .map(|(name, color)| LegendEntry {
                symbol: Symbol::Mark(Shape::Square, true),
                color,
                label: format!("flag {name}"),
            }),
    );
    if shown_other {
        legend.push(LegendEntry {
            symbol: Symbol::Mark(Shape::Square, true),
            color: OTHER_FLAGS,
            label: "other flags".to_owned(),
        });
    }
    Figure {
        heading: format!("Beyond the paper: validity of the predicted states ({split})"),
        caption: format!(
            "Validity of the predicted states on {split}. (a) For each model, numbered as in \
             the legend, the share of its wrong (non-exact) steps on which each validity flag \
             fires: the {TOP_FLAGS} flags with the largest share on some model each in its own \
             colour, the remaining ones summed as other flags. One wrong state can raise several \
             flags, so a bar can pass 100%. (b) The share of steps whose predicted state is a \
             valid position (V1) in each prefix bin, one line per model. {GAP_NOTE}"
        ),
        legend,
        rows: vec![vec![bars], vec![v1]],
        row_height: ROW_HEIGHT,
    }
}

/// E2: counter accuracy (both bytes right) by the counter's true value.
fn fields(split: &str, runs: &[&DiagnoseResult]) -> Figure {
    let y = ("Both bytes right (%)", Unit::Percent);
    let halfmove = categorical(runs, |s| {
        let bins = s.fields.halfmove_by_value.iter();
        bins.map(|b| (b.bin.clone(), pct(&b.both))).collect()
    });
    let fullmove = categorical(runs, |s| {
        let bins = s.fields.fullmove_by_value.iter();
        bins.map(|b| (b.bin.clone(), pct(&b.both))).collect()
    });
    let panels = vec![
        categorical_panel(
            "(a) halfmove clock".to_owned(),
            "True halfmove clock",
            y,
            &halfmove,
        ),
        categorical_panel(
            "(b) fullmove number".to_owned(),
            "True fullmove number",
            y,
            &fullmove,
        ),
    ];
    Figure {
        heading: format!("Beyond the paper: counter accuracy by true value ({split})"),
        caption: format!(
            "Counter accuracy on {split} by the counter's true value: the share of steps whose \
             predicted (a) halfmove clock and (b) fullmove number has both bytes right, one line \
             per model over bins of the true value. {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows: vec![panels],
        row_height: ROW_HEIGHT,
    }
}

/// The share (%) of a model's error runs in each length bin; NaN throughout when it has
/// fewer than [`MIN_N`] runs.
fn run_shares(lengths: &[CountBin]) -> Vec<(String, f64)> {
    let total: u64 = lengths.iter().map(|b| b.count).sum();
    lengths
        .iter()
        .map(|b| {
            let share = if total >= MIN_N {
                b.count as f64 / total as f64 * 100.0
            } else {
                f64::NAN
            };
            (b.bin.clone(), share)
        })
        .collect()
}

/// Bars grouped by named bin, one per series in legend order, from 0 to its value.
fn grouped_bars(
    caption: &str,
    x_title: &str,
    y_title: &str,
    (labels, series): &(Vec<String>, Vec<Series>),
) -> Panel {
    let values = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let mut panel = Panel::new(
        caption,
        Axis::groups(x_title, labels),
        Unit::FromZero.axis(y_title, values),
    );
    panel.bands = (0..labels.len())
        .map(|i| (i as f64 - 0.46, i as f64 + 0.46))
        .collect();
    let width = GROUP_WIDTH / series.len().max(1) as f64;
    for (k, s) in series.iter().enumerate() {
        let (color, _) = model_style(s.model);
        for &(x, y) in &s.points {
            if x.is_finite() && y.is_finite() && y > 0.0 {
                let left = x - GROUP_WIDTH / 2.0 + k as f64 * width;
                panel.bars.push(Bar {
                    x: (left, left + width),
                    y: (0.0, y),
                    color,
                });
            }
        }
    }
    panel
}

/// E3 and E4: legal-move IoU and ExactState per prefix bin, and error-run lengths.
fn affordance(split: &str, runs: &[&DiagnoseResult]) -> Figure {
    let iou = binned(runs, |s| &s.affordance.iou_by_bin, shown);
    let exact = binned(runs, |s| &s.affordance.exact_by_bin, pct);
    let lengths = categorical(runs, |s| run_shares(&s.dynamics.error_runs.lengths));
    let rows = vec![
        vec![
            binned_panel(
                "(a) legal-move IoU by prefix bin".to_owned(),
                ("Mean IoU (strict)", Unit::FromZero),
                &iou,
            ),
            binned_panel(
                "(b) ExactState by prefix bin".to_owned(),
                ("ExactState (%)", Unit::Percent),
                &exact,
            ),
        ],
        vec![grouped_bars(
            "(c) lengths of error runs",
            "Run length (consecutive wrong steps)",
            "Share of the model's runs (%)",
            &lengths,
        )],
    ];
    Figure {
        heading: format!("Beyond the paper: legal moves and error runs ({split})"),
        caption: format!(
            "Legal moves and error dynamics on {split}. (a) The mean intersection over union of \
             the predicted and the true legal-move sets in each prefix bin, an unplayable \
             predicted state counting as 0; (b) ExactState in each prefix bin; (c) how long the \
             runs of consecutive wrong steps last, as the share of each model's runs in each \
             length bin (bars in legend order; a model with fewer than 30 runs has none). \
             {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows,
        row_height: ROW_HEIGHT,
    }
}

/// A histogram of 20 equal bins over 0..=1 as each bin's share (%) of the counts, at the
/// bin's middle; NaN throughout below [`MIN_N`] counts.
fn histogram_shares(counts: &[u64]) -> Vec<(f64, f64)> {
    let total: u64 = counts.iter().sum();
    let width = 1.0 / counts.len().max(1) as f64;
    counts
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let share = if total >= MIN_N {
                n as f64 / total as f64 * 100.0
            } else {
                f64::NAN
            };
            ((i as f64 + 0.5) * width, share)
        })
        .collect()
}

/// Each run's histogram `of` its summary as shares per bin.
fn histograms(runs: &[&DiagnoseResult], of: impl Fn(&DiagnoseSummary) -> &[u64]) -> Vec<Series> {
    runs.iter()
        .enumerate()
        .map(|(model, d)| Series {
            model,
            points: histogram_shares(of(&d.summary)),
        })
        .collect()
}

/// A line panel of histograms over a mass in 0..=1.
fn mass_panel(caption: &str, x_title: &str, series: &[Series]) -> Panel {
    let x = Axis::from_zero(x_title, [0.0, 1.0], short_number);
    let y = ("Share of the steps (%)", Unit::Percent);
    line_panel(caption.to_owned(), x, y, series, CATEGORY_RADIUS)
}

/// E12: the distributions of the sampled valid mass and of the true-state mass.
fn mass(split: &str, runs: &[&DiagnoseResult]) -> Figure {
    let valid = histograms(runs, |s| {
        s.mass
            .sampled
            .as_ref()
            .map_or(&[][..], |m| &m.valid_mass_histogram)
    });
    let truth = histograms(runs, |s| &s.mass.true_mass_histogram);
    let rows = vec![vec![
        mass_panel(
            "(a) valid mass of the sampled steps",
            "Valid mass (share of drawn states that are valid positions)",
            &valid,
        ),
        mass_panel(
            "(b) true-state mass of every step",
            "True-state mass (probability of the true state)",
            &truth,
        ),
    ]];
    Figure {
        heading: format!("Beyond the paper: probability mass ({split})"),
        caption: format!(
            "Where the models' probability lies on {split}. (a) For each sampled step, states \
             are drawn from the model's 75 label distributions, each label on its own, and the \
             valid mass is the share of them that are valid positions (V1); the lines give the \
             share of a model's sampled steps in each twentieth of 0 to 1. (b) The same for the \
             true-state mass, the probability the model gives the true state, over every step. \
             A model with fewer than 30 steps has no line. {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows,
        row_height: ROW_HEIGHT,
    }
}

/// Panels per row of the switch figure.
const SWITCH_PANELS_PER_ROW: usize = 3;

/// The switch figure draws the bins that start before this many plies after the switch (the
/// table sums the rest into `100+`): the change happens near the switch, and random games run
/// on for hundreds of plies.
const SWITCH_FIGURE_PLIES: i64 = 150;

/// ExactState (%) of each bin of `curve` at the bin's middle ply since the switch, up to
/// [`SWITCH_FIGURE_PLIES`]; NaN below [`MIN_N`] steps.
fn switch_points(curve: &SwitchCurve) -> Vec<(f64, f64)> {
    curve
        .bins
        .iter()
        .filter(|b| b.start < SWITCH_FIGURE_PLIES)
        .map(|b| {
            let middle = (b.start + b.end) as f64 / 2.0;
            let value = match b.exact_state {
                Some(v) if b.n >= MIN_N => v * 100.0,
                _ => f64::NAN,
            };
            (middle, value)
        })
        .collect()
}

/// E6: ExactState by plies since the switch, one panel per switch ply `k` of any run, one line
/// per model; `None` when no run has continuation games.
fn switch(split: &str, runs: &[&DiagnoseResult]) -> Option<Figure> {
    let mut plies: Vec<u32> = runs
        .iter()
        .flat_map(|d| d.summary.since_switch.iter().map(|c| c.prefix_plies))
        .collect();
    plies.sort_unstable();
    plies.dedup();
    if plies.is_empty() {
        return None;
    }
    let panels: Vec<Panel> = plies
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let series: Vec<Series> = runs
                .iter()
                .enumerate()
                .map(|(model, d)| Series {
                    model,
                    points: d
                        .summary
                        .since_switch
                        .iter()
                        .find(|c| c.prefix_plies == k)
                        .map_or_else(Vec::new, switch_points),
                })
                .collect();
            let letter = char::from(b'a' + (i % 26) as u8);
            let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
            let x = Axis::span("Plies since the switch (middle of a 10-ply bin)", xs);
            let mut panel = line_panel(
                format!("({letter}) switch after ply {k}"),
                x,
                ("ExactState (%)", Unit::Percent),
                &series,
                BIN_RADIUS,
            );
            if panel.x.lo < 0.0 {
                panel.bands.push((panel.x.lo, 0.0));
            }
            panel
        })
        .collect();
    let rows = panels
        .chunks(SWITCH_PANELS_PER_ROW)
        .map(<[Panel]>::to_vec)
        .collect();
    Some(Figure {
        heading: format!("Beyond the paper: leaving human play ({split})"),
        caption: format!(
            "ExactState on {split}, real games kept for their first k plies and then continued \
             with uniformly random legal moves, by plies since the switch in 10-ply bins \
             (negative, shaded: still the real game) up to {SWITCH_FIGURE_PLIES} plies after \
             it, one panel per k and one line per model. {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows,
        row_height: ROW_HEIGHT,
    })
}

/// E5: square accuracy by staleness.
fn memory(split: &str, runs: &[&DiagnoseResult]) -> Figure {
    let by_bin = |bins: &[NamedRate]| -> Vec<(String, f64)> {
        bins.iter()
            .map(|b| (b.name.clone(), pct(&b.rate)))
            .collect()
    };
    let staleness = categorical(runs, |s| by_bin(&s.events.staleness));
    let castling = categorical(runs, |s| by_bin(&s.events.castling_since_lost));
    let panels = vec![
        categorical_panel(
            "(a) squares by staleness".to_owned(),
            "Plies since the square's true content changed",
            ("Square accuracy (%)", Unit::Percent),
            &staleness,
        ),
        categorical_panel(
            "(b) lost castling rights".to_owned(),
            "Plies since the right was lost",
            ("Castling-label accuracy (%)", Unit::Percent),
            &castling,
        ),
    ];
    Figure {
        heading: format!("Beyond the paper: long-range memory ({split})"),
        caption: format!(
            "Long-range memory on {split}, one line per model: (a) the share of squares \
             predicted right, by how many plies ago the square's true content last changed; (b) \
             the share of castling labels right after the right was lost (the model no longer \
             grants it), by the plies since it was lost. {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows: vec![panels],
        row_height: ROW_HEIGHT,
    }
}

/// E7: ExactState by plies since deviation and by training count; `None` when no run has
/// novelty metrics.
fn novelty(split: &str, runs: &[&DiagnoseResult]) -> Option<Figure> {
    if runs.iter().all(|d| d.summary.novelty.is_none()) {
        return None;
    }
    let exact = |bins: &[ExactBin]| -> Vec<(String, f64)> {
        bins.iter()
            .map(|b| (b.label.clone(), exact_pct(b)))
            .collect()
    };
    let deviation = categorical(runs, |s| {
        let m = s.novelty.as_ref();
        m.map_or_else(Vec::new, |m| exact(&m.by_plies_since_deviation))
    });
    let count = categorical(runs, |s| {
        let m = s.novelty.as_ref();
        m.map_or_else(Vec::new, |m| exact(&m.by_position_count))
    });
    let y = ("ExactState (%)", Unit::Percent);
    let panels = vec![
        categorical_panel(
            "(a) by plies since deviation".to_owned(),
            "Plies since the game left the training games",
            y,
            &deviation,
        ),
        categorical_panel(
            "(b) by training frequency".to_owned(),
            "Training steps at the position (bins of log10(count + 1))",
            y,
            &count,
        ),
    ];
    Some(Figure {
        heading: format!("Beyond the paper: seen and novel positions ({split})"),
        caption: format!(
            "ExactState on {split} (a) by how many plies have passed since the game's move \
             sequence left every training game (<0: still in book; never: games that never \
             leave it) and (b) by how often the position occurs in the training games, in bins \
             of log10(count + 1), one line per model; models whose diagnosis had no novelty \
             table have no line. {GAP_NOTE}"
        ),
        legend: model_legend(runs, false),
        rows: vec![panels],
        row_height: ROW_HEIGHT,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use cwm_models::{Family, Size};

    use super::*;
    use crate::figures::render;
    use crate::inputs::Origin;

    fn summary() -> DiagnoseSummary {
        serde_json::from_str(include_str!("../../testdata/diagnose_summary.json")).unwrap()
    }

    fn result(family: Family, size: Size, split: &str, summary: DiagnoseSummary) -> DiagnoseResult {
        let instance = format!("diagnose[{}-{}-{split}]", family.name(), size.name());
        DiagnoseResult {
            origin: Origin {
                instance: instance.clone(),
                kind: "diagnose".to_owned(),
                hash: format!("hash-{instance}"),
            },
            family,
            size,
            summary: DiagnoseSummary {
                split: split.to_owned(),
                ..summary
            },
        }
    }

    fn inputs(diagnose: Vec<DiagnoseResult>) -> Inputs {
        Inputs {
            diagnose,
            ..Inputs::default()
        }
    }

    fn find<'a>(planned: &'a [Planned], id: &str) -> &'a Figure {
        &planned.iter().find(|p| p.id == id).unwrap().figure
    }

    /// A fresh empty directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "cwm-report-beyond-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn six_figures_per_split_with_novelty_five_without() {
        let plain = DiagnoseSummary {
            novelty: None,
            ..summary()
        };
        let planned = beyond(&inputs(vec![
            result(Family::Slice, Size::D128, "test_random", plain.clone()),
            result(Family::Transformer, Size::D128, "test_real", summary()),
            result(Family::Slice, Size::D256, "test_real", plain.clone()),
            result(Family::Slice, Size::D128, "test odd/x", plain),
        ]));
        let ids: Vec<&str> = planned.iter().map(|p| p.id.as_str()).collect();
        let mut expected = Vec::new();
        for (split, novelty) in [
            ("test_real", true),
            ("test_random", false),
            ("test_odd_x", false),
        ] {
            for kind in [
                "validity",
                "fields",
                "affordance",
                "memory",
                "novelty",
                "mass",
            ] {
                if kind != "novelty" || novelty {
                    expected.push(format!("figure_beyond_{kind}_{split}"));
                }
            }
        }
        assert_eq!(ids, expected);
        // The models of a split in the tables' order, named as the tables name them.
        let validity = find(&planned, "figure_beyond_validity_test_real");
        assert_eq!(validity.legend[0].label, "1 Transformer d128/l1");
        assert_eq!(validity.legend[1].label, "2 SLiCE d256/l2");
        let fields = find(&planned, "figure_beyond_fields_test_real");
        assert_eq!(fields.legend.len(), 2);
        assert_eq!(fields.legend[1].label, "SLiCE d256/l2");
        for plan in &planned {
            assert!(plan.figure.caption.contains("fewer than 30"), "{}", plan.id);
            assert!(has_data(&plan.figure), "{}", plan.id);
        }
        // The model without novelty metrics has no line there.
        let novelty = find(&planned, "figure_beyond_novelty_test_real");
        assert!(novelty.rows[0].iter().all(|p| p.lines.len() == 1));
    }

    #[test]
    fn the_mass_figure_draws_each_models_histograms_as_shares_of_its_steps() {
        let mut sampled = summary();
        let rate = sampled.mass.true_mass_above_half;
        let mut histogram = vec![0u64; 20];
        histogram[0] = 30;
        histogram[19] = 10;
        sampled.mass.sampled = Some(cwm_formats::diagnose::SampledMass {
            samples: 64,
            steps: 40,
            valid_mass: rate,
            afford_mass: rate,
            valid_mass_histogram: histogram,
        });
        let mut few = summary();
        few.mass.true_mass_histogram = vec![1; 20];
        let planned = beyond(&inputs(vec![
            result(Family::Transformer, Size::D128, "test_real", sampled),
            result(Family::Slice, Size::D128, "test_real", few),
        ]));
        let figure = find(&planned, "figure_beyond_mass_test_real");
        let (valid, truth) = (&figure.rows[0][0], &figure.rows[0][1]);
        assert_eq!(valid.lines.len(), 1, "the other model drew no states");
        let points = &valid.lines[0].points;
        assert_eq!(points.len(), 20);
        assert_eq!(points[0], (0.025, 75.0));
        assert!((points[19].0 - 0.975).abs() < 1e-12 && points[19].1 == 25.0);
        assert!(points[1..19].iter().all(|p| p.1 == 0.0));
        // 20 steps of the second model's true-state mass are fewer than 30: no line.
        assert_eq!(truth.lines.len(), 1);
        let total: f64 = truth.lines[0].points.iter().map(|p| p.1).sum();
        assert!(
            (total - 100.0).abs() < 1e-9,
            "shares of every step: {total}"
        );
    }

    #[test]
    fn the_switch_figure_has_a_panel_per_switch_ply_and_a_line_per_model() {
        let bin = |start: i64, n: u64, exact: u64| cwm_formats::diagnose::SwitchBin {
            start,
            end: start + 10,
            n,
            exact,
            exact_state: Some(exact as f64 / n as f64),
        };
        let curve = |k: u32, bins| SwitchCurve {
            prefix_plies: k,
            games: 3,
            bins,
        };
        let mut both = summary();
        both.since_switch = vec![
            curve(10, vec![bin(-10, 40, 40), bin(0, 40, 20), bin(10, 10, 0)]),
            curve(40, vec![bin(-40, 40, 40), bin(0, 40, 10)]),
        ];
        let mut one = summary();
        one.since_switch = vec![curve(
            40,
            vec![bin(-40, 50, 50), bin(0, 50, 25), bin(150, 50, 0)],
        )];
        let planned = beyond(&inputs(vec![
            result(Family::Transformer, Size::D128, "test_continuation", both),
            result(Family::Slice, Size::D128, "test_continuation", one),
            result(Family::Slice, Size::D128, "test_real", summary()),
        ]));
        assert!(
            planned
                .iter()
                .all(|p| p.id != "figure_beyond_switch_test_real")
        );
        let figure = find(&planned, "figure_beyond_switch_test_continuation");
        assert_eq!(figure.rows.len(), 1);
        let [k10, k40] = &figure.rows[0][..] else {
            panic!("two panels");
        };
        assert_eq!(k10.caption, "(a) switch after ply 10");
        assert_eq!(k10.lines.len(), 1, "only the transformer switched after 10");
        // The bin of 10 steps is under 30: a gap in the line.
        let points = &k10.lines[0].points;
        assert_eq!(points[..2], [(-5.0, 100.0), (5.0, 50.0)]);
        assert!(points[2].1.is_nan());
        assert_eq!(k40.lines.len(), 2);
        assert_eq!(
            k40.lines[1].points,
            vec![(-35.0, 100.0), (5.0, 50.0)],
            "the bin from 150 plies on is left out"
        );
        assert!(k40.x.lo < -35.0 && k40.x.hi > 5.0);
        assert_eq!(k40.bands, [(k40.x.lo, 0.0)], "the real prefix shaded");
        let dir = TempDir::new("switch");
        render(figure, &dir.0, "switch").unwrap();
    }

    #[test]
    fn styles_tell_many_models_apart() {
        let styles: Vec<(RGBColor, Shape)> = (0..80).map(model_style).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn low_n_and_undefined_values_break_the_lines() {
        let mut first = summary();
        first.validity.v1_by_bin[1].rate.low_n = true;
        first.fields.halfmove_by_value[0].both.value = None;
        let mut second = summary();
        for bin in &mut second.events.staleness {
            bin.rate.low_n = true;
        }
        let planned = beyond(&inputs(vec![
            result(Family::Transformer, Size::D128, "test_real", first),
            result(Family::Slice, Size::D128, "test_real", second),
        ]));
        let v1 = &find(&planned, "figure_beyond_validity_test_real").rows[1][0];
        let line = &v1.lines[0].points;
        assert_eq!(
            line[0],
            (
                10.0,
                summary().validity.v1_by_bin[0].rate.value.unwrap() * 100.0
            )
        );
        assert!(line[1].1.is_nan());
        assert!(
            !v1.marks
                .iter()
                .any(|m| m.x == 30.0 && m.color == model_style(0).0)
        );
        assert!(
            v1.marks
                .iter()
                .any(|m| m.x == 30.0 && m.color == model_style(1).0)
        );
        // The data's own low-n bins (past step 120) are NaN too.
        assert!(line[6].1.is_nan() && line[7].1.is_nan());
        let halfmove = &find(&planned, "figure_beyond_fields_test_real").rows[0][0];
        assert!(halfmove.lines[0].points[0].1.is_nan());
        assert!(halfmove.lines[1].points[0].1.is_finite());
        // `50-99` is undefined in the data.
        assert!(halfmove.lines[1].points[3].1.is_nan());
        let staleness = &find(&planned, "figure_beyond_memory_test_real").rows[0][0];
        assert_eq!(
            staleness.lines.len(),
            1,
            "a model without values has no line"
        );
        assert_eq!(staleness.lines[0].color, model_style(0).0);
        // Novelty bins with fewer than 30 steps (`never`, n = 0) are NaN.
        let deviation = &find(&planned, "figure_beyond_novelty_test_real").rows[0][0];
        let points = &deviation.lines[0].points;
        assert_eq!(deviation.x.ticks.last().unwrap().1, "never");
        assert!(points.last().unwrap().1.is_nan());
        assert!((points[0].1 - 121.0 / 190.0 * 100.0).abs() < 1e-9);
        for mark in deviation.marks.iter().chain(&v1.marks) {
            assert!(mark.y.is_finite());
        }
    }

    /// The heights of the bar segments centred on model `i`.
    fn stack_of(panel: &Panel, i: usize) -> Vec<(f64, RGBColor)> {
        let centre = |b: &Bar| f64::midpoint(b.x.0, b.x.1);
        let mut bars: Vec<&Bar> = panel
            .bars
            .iter()
            .filter(|b| (centre(b) - i as f64).abs() < 1e-9)
            .collect();
        bars.sort_by(|a, b| a.y.0.total_cmp(&b.y.0));
        bars.iter().map(|b| (b.y.1 - b.y.0, b.color)).collect()
    }

    #[test]
    fn stacked_bars_sum_the_flag_shares() {
        let mut second = summary();
        for (k, flag) in second.validity.flags_non_exact.iter_mut().enumerate() {
            flag.rate.value = Some(0.05 * (k % 4) as f64);
        }
        let mut third = summary();
        for flag in &mut third.validity.flags_non_exact {
            flag.rate.low_n = true;
        }
        let runs = vec![
            result(Family::Transformer, Size::D128, "test_real", summary()),
            result(Family::Slice, Size::D128, "test_real", second),
            result(Family::Mamba3, Size::D128, "test_real", third),
        ];
        let planned = beyond(&inputs(runs.clone()));
        let figure = find(&planned, "figure_beyond_validity_test_real");
        let panel = &figure.rows[0][0];
        for (i, run) in runs.iter().enumerate().take(2) {
            let flags = &run.summary.validity.flags_non_exact;
            let expected: f64 = flags.iter().map(|f| f.rate.value.unwrap() * 100.0).sum();
            let stack = stack_of(panel, i);
            let total: f64 = stack.iter().map(|s| s.0).sum();
            assert!(
                (total - expected).abs() < 1e-9,
                "model {i}: {total} vs {expected}"
            );
            assert!(stack.iter().all(|s| s.0 > 0.0));
        }
        assert!(stack_of(panel, 2).is_empty(), "low-n shares draw no bar");
        // The commonest flag (prefix_inconsistent, 85.5% of the first model's wrong steps)
        // sits at the bottom in the first colour; the flags past the sixth are summed.
        let first = stack_of(panel, 0);
        assert_eq!(first[0].1, FLAG_COLORS[0]);
        let share = runs[0].summary.validity.flags_non_exact.iter();
        let top = share
            .filter(|f| f.name == "prefix_inconsistent")
            .map(|f| f.rate.value);
        assert!((first[0].0 - top.sum::<Option<f64>>().unwrap() * 100.0).abs() < 1e-9);
        assert_eq!(first.last().unwrap().1, OTHER_FLAGS);
        let labels: Vec<&str> = figure.legend.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels.len(), 3 + TOP_FLAGS + 1, "{labels:?}");
        assert_eq!(labels[3], "flag prefix_inconsistent");
        assert_eq!(labels.last(), Some(&"other flags"));
        assert!(figure.caption.contains("can pass 100%"));
        let expected_ticks: Vec<&str> = panel.x.ticks.iter().map(|t| t.1.as_str()).collect();
        assert_eq!(expected_ticks, ["1", "2", "3"]);
    }

    #[test]
    fn error_runs_are_shares_of_each_models_runs() {
        let mut few = summary();
        for bin in &mut few.dynamics.error_runs.lengths {
            bin.count = bin.count.min(1);
        }
        let planned = beyond(&inputs(vec![
            result(Family::Transformer, Size::D128, "test_real", summary()),
            result(Family::Slice, Size::D128, "test_real", few),
        ]));
        let panel = &find(&planned, "figure_beyond_affordance_test_real").rows[1][0];
        // 2, 1, 0, 7 and 35 of 45 runs: no bar for the empty bin, none for the model with
        // fewer than 30 runs.
        let heights: Vec<f64> = panel.bars.iter().map(|b| b.y.1).collect();
        let expected: Vec<f64> = [2.0, 1.0, 7.0, 35.0]
            .iter()
            .map(|c| c / 45.0 * 100.0)
            .collect();
        assert_eq!(heights.len(), expected.len());
        for (h, e) in heights.iter().zip(&expected) {
            assert!((h - e).abs() < 1e-9);
        }
        assert!(
            panel
                .bars
                .iter()
                .all(|b| b.color == model_style(0).0 && b.y.0 == 0.0)
        );
        assert!(
            panel
                .bars
                .iter()
                .all(|b| b.x.1 - b.x.0 > 0.0 && b.x.1 - b.x.0 <= 0.4)
        );
    }

    #[test]
    fn every_figure_renders_to_svg_and_png() {
        let runs = (0..14)
            .map(|i| {
                let family = Family::ALL[i % Family::ALL.len()];
                let size = Size::ALL[i % Size::ALL.len()];
                result(family, size, "test_real", summary())
            })
            .collect();
        let planned = beyond(&inputs(runs));
        assert_eq!(planned.len(), 6);
        let dir = TempDir::new("render");
        for plan in &planned {
            render(&plan.figure, &dir.0, &plan.id).unwrap();
            let svg = std::fs::read_to_string(dir.0.join(format!("{}.svg", plan.id))).unwrap();
            assert!(
                svg.contains("<svg") && !svg.contains("NaN\""),
                "{}",
                plan.id
            );
            let png = std::fs::read(dir.0.join(format!("{}.png", plan.id))).unwrap();
            assert!(
                png.starts_with(b"\x89PNG") && png.len() > 1000,
                "{}",
                plan.id
            );
        }
    }

    /// Blanks every measure the figures read: no bins, no flags, no runs.
    fn blank(mut s: DiagnoseSummary) -> DiagnoseSummary {
        s.validity.flags_non_exact.clear();
        s.validity.v1_by_bin.clear();
        s.fields.halfmove_by_value.clear();
        s.fields.fullmove_by_value.clear();
        s.affordance.iou_by_bin.clear();
        s.affordance.exact_by_bin.clear();
        s.dynamics.error_runs.lengths.clear();
        s.events.staleness.clear();
        if let Some(m) = &mut s.novelty {
            m.by_plies_since_deviation.clear();
            m.by_position_count.clear();
        }
        s.mass.true_mass_histogram.clear();
        s.mass.sampled = None;
        s.since_switch.clear();
        s
    }

    /// Every rate the figures read made undefined (n = 0), every count 0.
    fn empty(mut s: DiagnoseSummary) -> DiagnoseSummary {
        let none = |r: &mut Rate| {
            *r = Rate {
                num: 0.0,
                n: 0,
                value: None,
                lo: None,
                hi: None,
                low_n: true,
                ..*r
            }
        };
        s.validity
            .flags_non_exact
            .iter_mut()
            .for_each(|f| none(&mut f.rate));
        s.validity
            .v1_by_bin
            .iter_mut()
            .for_each(|b| none(&mut b.rate));
        s.affordance
            .iou_by_bin
            .iter_mut()
            .for_each(|b| none(&mut b.rate));
        s.affordance
            .exact_by_bin
            .iter_mut()
            .for_each(|b| none(&mut b.rate));
        s.fields
            .halfmove_by_value
            .iter_mut()
            .for_each(|b| none(&mut b.both));
        s.fields
            .fullmove_by_value
            .iter_mut()
            .for_each(|b| none(&mut b.both));
        s.dynamics
            .error_runs
            .lengths
            .iter_mut()
            .for_each(|b| b.count = 0);
        s.events
            .staleness
            .iter_mut()
            .for_each(|b| none(&mut b.rate));
        if let Some(m) = &mut s.novelty {
            for bin in m
                .by_plies_since_deviation
                .iter_mut()
                .chain(&mut m.by_position_count)
            {
                *bin = ExactBin {
                    n: 0,
                    exact: 0,
                    exact_state: None,
                    ..bin.clone()
                };
            }
        }
        s.mass.true_mass_histogram.iter_mut().for_each(|c| *c = 0);
        if let Some(m) = &mut s.mass.sampled {
            m.valid_mass_histogram.iter_mut().for_each(|c| *c = 0);
        }
        s
    }

    #[test]
    fn extreme_inputs_make_no_figure_and_do_not_panic() {
        assert!(beyond(&Inputs::default()).is_empty());
        assert!(split_figures("test_real", &[]).is_empty());
        for summary in [blank(summary()), empty(summary())] {
            let planned = beyond(&inputs(vec![result(
                Family::Transformer,
                Size::D128,
                "test_real",
                summary,
            )]));
            assert!(
                planned.is_empty(),
                "{:?}",
                planned.iter().map(|p| &p.id).collect::<Vec<_>>()
            );
            // Drawn anyway, the empty figures render.
            let run = result(
                Family::Slice,
                Size::D128,
                "test_real",
                blank(self::summary()),
            );
            let dir = TempDir::new("empty");
            for figure in [validity("x", &[&run]), affordance("x", &[&run])] {
                render(&figure, &dir.0, "empty").unwrap();
            }
        }
        // One defined point between undefined ones still makes a figure, with a marker.
        let mut lone = empty(summary());
        lone.events.staleness[2].rate = summary().events.staleness[2].rate;
        let planned = beyond(&inputs(vec![result(
            Family::Gdn,
            Size::D128,
            "test_real",
            lone,
        )]));
        let ids: Vec<&str> = planned.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["figure_beyond_memory_test_real"]);
        assert_eq!(planned[0].figure.rows[0][0].marks.len(), 1);
        let dir = TempDir::new("lone");
        render(&planned[0].figure, &dir.0, &planned[0].id).unwrap();
    }

    #[test]
    fn probe_figures_draw_accuracy_by_depth_per_split() {
        let inputs = crate::tables::probe_test_inputs();
        let planned = probes(&inputs);
        let ids: Vec<&str> = planned.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "figure_beyond_probes_test_real",
                "figure_beyond_probes_test_random"
            ]
        );
        let figure = &planned[0].figure;
        assert_eq!(figure.rows[0].len(), 2, "id and ood panels");
        let id = &figure.rows[0][0];
        // Transformer (2 blocks): ℓ/L = 0, 0.5, 1 at 50, 60, 70 %; the head input left out.
        assert_eq!(
            id.lines[0].points,
            vec![(0.0, 50.0), (0.5, 60.0), (1.0, 70.0)]
        );
        // SLiCE (1 block): 0 and 1.
        assert_eq!(id.lines[1].points.len(), 2);
        assert_eq!(
            figure.rows[0][1].lines.len(),
            1,
            "only the transformer has ood probes"
        );
        let dir = TempDir::new("probes");
        for plan in &planned {
            render(&plan.figure, &dir.0, &plan.id).unwrap();
            let png = std::fs::read(dir.0.join(format!("{}.png", plan.id))).unwrap();
            assert!(
                png.starts_with(b"\x89PNG") && png.len() > 1000,
                "{}",
                plan.id
            );
        }
    }

    #[test]
    fn a_probe_figure_without_ood_probes_or_values_shrinks_or_goes() {
        let mut inputs = crate::tables::probe_test_inputs();
        inputs.probes.retain(|p| p.family == Family::Slice);
        let planned = probes(&inputs);
        assert_eq!(planned[0].figure.rows[0].len(), 1, "no ood panel");
        for p in &mut inputs.probes {
            for r in &mut p.summary.results {
                r.scores.square_acc = None;
            }
        }
        assert!(probes(&inputs).is_empty(), "nothing to draw, no figure");
    }

    #[test]
    fn the_markov_figure_draws_d_by_depth_per_set() {
        let inputs = crate::tables::markov_test_inputs();
        let planned = markov(&inputs);
        assert_eq!(planned.len(), 1);
        assert_eq!(planned[0].id, "figure_beyond_markov_test_real");
        let figure = &planned[0].figure;
        assert_eq!(figure.rows[0].len(), 1, "no natural class: no panel");
        assert_eq!(figure.rows[0][0].caption, "swapped move orders");
        let swap = &figure.rows[0][0];
        // Transformer (2 blocks): d = 0.5 + ℓ at ℓ/L = 0, 0.5, 1.
        assert_eq!(
            swap.lines[0].points,
            vec![(0.0, 0.5), (0.5, 1.5), (1.0, 2.5)]
        );
        let dir = TempDir::new("markov");
        render(figure, &dir.0, &planned[0].id).unwrap();
        let png = std::fs::read(dir.0.join(format!("{}.png", planned[0].id))).unwrap();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 1000);
    }
}
