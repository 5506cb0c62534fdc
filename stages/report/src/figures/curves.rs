//! Training curves: validation loss (log scale) and ExactState against step, one figure per
//! family, one row per size, from each train run's `val.parquet`.
//!
//! A cell (family × size) shows the runs the tables follow: its second-stage (cosine) choice
//! ([`floor_choices`]: the `select` artifact's choice, else the lower validation loss), drawn
//! solid, and the run that differs from it only by the floor, dashed. A cell without
//! second-stage runs shows its first-stage choice (the `select` artifact's, else the lowest
//! validation loss). A run without `val.parquet` has no curve.

use std::collections::BTreeMap;

use cwm_models::{Family, Size};

use super::axis::{LOSS_CAP_RATIO, short_number, steps};
use super::{
    Axis, Figure, LegendEntry, Line, Mark, Panel, Place, Planned, RGBColor, Shape, Symbol,
};
use crate::inputs::{Inputs, TrainRun};
use crate::tables::{PAPER_ORDER, floor_choices, paper_name, size_label};

/// Height of one row of panels.
const ROW_HEIGHT: u32 = 230;
/// Curves with at most this many validations get a dot at each.
const DOTS_UP_TO: usize = 40;
/// Colours of the floors, highest floor first.
const FLOOR_COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
/// Colour of a first-stage run.
const FIRST_STAGE: RGBColor = RGBColor(90, 90, 90);
/// Colour of the line-style legend entries.
const STYLE_KEY: RGBColor = RGBColor(60, 60, 60);

/// A run whose curve is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurveRun<'a> {
    /// The run.
    pub run: &'a TrainRun,
    /// Whether it is the run the tables use (solid), or the other floor (dashed).
    pub chosen: bool,
}

/// Whether loss `a` is lower than `b`, NaN ranking last.
fn lower(a: f64, b: f64) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a < b,
        (a_nan, b_nan) => !a_nan && b_nan,
    }
}

/// The first-stage choice of each family × size: the run a `select` artifact chose, else the
/// run with the lowest validation loss (the instance name that sorts first on a tie).
fn first_stage_choices(inputs: &Inputs) -> BTreeMap<(Family, Size), &TrainRun> {
    let first: Vec<&TrainRun> = inputs.train.iter().filter(|r| r.is_first_stage()).collect();
    let mut chosen: BTreeMap<(Family, Size), &TrainRun> = BTreeMap::new();
    for c in &inputs.select {
        if let Some(run) = first.iter().find(|r| r.origin.hash == c.choice.train_hash) {
            chosen.entry((run.family, run.size)).or_insert(run);
        }
    }
    let mut best: BTreeMap<(Family, Size), (&TrainRun, f64)> = BTreeMap::new();
    for run in first {
        let Some(val) = run.val() else { continue };
        let entry = best
            .entry((run.family, run.size))
            .or_insert((run, val.loss));
        if lower(val.loss, entry.1) {
            *entry = (run, val.loss);
        }
    }
    for (cell, (run, _)) in best {
        chosen.entry(cell).or_insert(run);
    }
    chosen
}

/// The runs drawn for each family × size, the chosen one first.
pub fn curve_runs(inputs: &Inputs) -> BTreeMap<(Family, Size), Vec<CurveRun<'_>>> {
    let mut cells: BTreeMap<(Family, Size), Vec<CurveRun<'_>>> = BTreeMap::new();
    for (cell, choice) in floor_choices(inputs) {
        let mut runs = vec![CurveRun {
            run: choice.chosen,
            chosen: true,
        }];
        runs.extend(choice.other.map(|run| CurveRun { run, chosen: false }));
        cells.insert(cell, runs);
    }
    for (cell, run) in first_stage_choices(inputs) {
        cells
            .entry(cell)
            .or_insert_with(|| vec![CurveRun { run, chosen: true }]);
    }
    cells
}

/// What a curve's colour stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    /// A second-stage run with this floor (`lr_min_ratio`).
    Floor(f64),
    /// A first-stage run.
    FirstStage,
}

fn key(run: &TrainRun) -> Key {
    if run.is_cosine() {
        Key::Floor(run.summary.hparams.schedule.lr_min_ratio)
    } else {
        Key::FirstStage
    }
}

/// The keys of `runs` in legend order (floors from the highest), each with its colour.
fn colors(runs: &[&CurveRun<'_>]) -> Vec<(Key, RGBColor)> {
    let mut floors: Vec<f64> = runs
        .iter()
        .filter_map(|c| match key(c.run) {
            Key::Floor(f) => Some(f),
            Key::FirstStage => None,
        })
        .collect();
    floors.sort_by(|a, b| b.total_cmp(a));
    floors.dedup_by(|a, b| a.total_cmp(b).is_eq());
    let mut keys: Vec<(Key, RGBColor)> = floors
        .into_iter()
        .enumerate()
        .map(|(i, f)| (Key::Floor(f), FLOOR_COLORS[i % FLOOR_COLORS.len()]))
        .collect();
    if runs.iter().any(|c| key(c.run) == Key::FirstStage) {
        keys.push((Key::FirstStage, FIRST_STAGE));
    }
    keys
}

fn color_of(colors: &[(Key, RGBColor)], run: &TrainRun) -> RGBColor {
    let k = key(run);
    colors
        .iter()
        .find(|(c, _)| match (c, &k) {
            (Key::Floor(a), Key::Floor(b)) => a.total_cmp(b).is_eq(),
            (a, b) => a == b,
        })
        .map_or(FIRST_STAGE, |&(_, color)| color)
}

/// One figure per family with a curve to draw (`training_<family>`), in the tables' family
/// order.
pub fn training(inputs: &Inputs) -> Vec<Planned> {
    let cells = curve_runs(inputs);
    PAPER_ORDER
        .iter()
        .filter_map(|&family| {
            let rows: Vec<(Size, Vec<&CurveRun<'_>>)> = Size::ALL
                .iter()
                .filter_map(|&size| {
                    let runs: Vec<&CurveRun<'_>> = cells
                        .get(&(family, size))?
                        .iter()
                        .filter(|c| !c.run.val_history.is_empty())
                        .collect();
                    (!runs.is_empty()).then_some((size, runs))
                })
                .collect();
            (!rows.is_empty()).then(|| Planned {
                id: format!("training_{}", family.name()),
                figure: family_figure(family, &rows),
            })
        })
        .collect()
}

fn family_figure(family: Family, rows: &[(Size, Vec<&CurveRun<'_>>)]) -> Figure {
    let all: Vec<&CurveRun<'_>> = rows.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let colors = colors(&all);
    let panels = rows
        .iter()
        .map(|(size, runs)| curve_panels(*size, runs, &colors))
        .collect();
    let mut legend: Vec<LegendEntry> = colors
        .iter()
        .map(|&(k, color)| LegendEntry {
            symbol: Symbol::Line(false),
            color,
            label: match k {
                Key::Floor(f) => format!("floor {}", short_number(f)),
                Key::FirstStage => "first-stage run".to_owned(),
            },
        })
        .collect();
    legend.push(LegendEntry {
        symbol: Symbol::Line(false),
        color: STYLE_KEY,
        label: "solid: the run the tables use".to_owned(),
    });
    if all.iter().any(|c| !c.chosen) {
        legend.push(LegendEntry {
            symbol: Symbol::Line(true),
            color: STYLE_KEY,
            label: "dashed: the other floor".to_owned(),
        });
    }
    Figure {
        heading: format!("Training curves: {}", paper_name(family)),
        caption: format!(
            "Training curves of {}: validation loss (log scale) and ExactState against step, \
             one row per size; solid: the run the tables use, dashed: the same run with the \
             other floor; a size without second-stage runs shows its first-stage choice",
            paper_name(family)
        ),
        legend,
        rows: panels,
        row_height: ROW_HEIGHT,
    }
}

/// The loss and ExactState panels of one size.
fn curve_panels(size: Size, runs: &[&CurveRun<'_>], colors: &[(Key, RGBColor)]) -> Vec<Panel> {
    let history = || runs.iter().flat_map(|c| c.run.val_history.iter());
    let x = Axis::from_zero("Step", history().map(|v| v.step as f64), steps);
    let loss = Axis::log(
        "Validation loss (log scale)",
        history().map(|v| v.loss),
        Some(LOSS_CAP_RATIO),
        short_number,
    );
    let exact = Axis::percent("ExactState (%)", history().map(|v| v.exact_state * 100.0));
    let name = size_label(size);
    let mut panels = [
        Panel::new(format!("{name}: validation loss"), x.clone(), loss),
        Panel::new(format!("{name}: validation ExactState"), x, exact),
    ];
    // The other floor first, so that the chosen run is drawn over it.
    for c in runs.iter().rev() {
        let color = color_of(colors, c.run);
        let metrics: [fn(&cwm_formats::train::ValMetrics) -> f64; 2] =
            [|v| v.loss, |v| v.exact_state * 100.0];
        for (panel, metric) in panels.iter_mut().zip(metrics) {
            let points: Vec<(f64, f64)> = c
                .run
                .val_history
                .iter()
                .map(|v| (v.step as f64, metric(v)))
                .collect();
            if points.len() <= DOTS_UP_TO {
                let inside = points
                    .iter()
                    .filter(|&&(_, y)| matches!(panel.y.place(y), Place::Inside(_)));
                panel.marks.extend(inside.map(|&(x, y)| Mark {
                    x,
                    y,
                    shape: Shape::Circle,
                    filled: true,
                    color,
                    radius: 2,
                }));
            }
            panel.lines.push(Line {
                points,
                color,
                dashed: !c.chosen,
            });
        }
    }
    panels.to_vec()
}
