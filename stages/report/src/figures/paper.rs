//! Figures 3 and 4 in the paper's layout: a row per split (held-out real games on top,
//! random-uniform games below), a loss column (log scale) and an ExactState column.
//!
//! Split labels are matched as the tables order them: the first label containing `real` is
//! the top row, the first other one containing `random` the bottom row; every other label
//! (and the validation set) gets a figure of its own in the same layout, `<figure>_<label>`.

use cwm_models::{Family, Size};

use super::axis::{LOSS_CAP_RATIO, millions, short_number};
use super::{
    Arrow, Axis, Figure, LegendEntry, Line, Mark, Panel, Planned, Point, RGBColor, Shape, Symbol,
    pareto_frontier,
};
use crate::tables::{ABLATIONS, MAIN, family_label, file_safe, size_label};

/// Height of one row of panels.
const ROW_HEIGHT: u32 = 330;
/// Marker radius.
const RADIUS: u32 = 5;
/// The legend's note for values drawn at an axis edge.
pub const OFF_AXIS_NOTE: &str = "↑ value: beyond the axis (or NaN), drawn at its edge";

/// A family's colour and marker; an ablation shares its expressive variant's, drawn open.
pub fn family_style(family: Family) -> (RGBColor, Shape) {
    match family {
        Family::Transformer => (RGBColor(31, 119, 180), Shape::Circle),
        Family::Slice | Family::SliceDiag => (RGBColor(225, 110, 0), Shape::Square),
        Family::Mamba3 | Family::Mamba2 => (RGBColor(200, 30, 45), Shape::Diamond),
        Family::Gdn | Family::GdnPos => (RGBColor(30, 140, 60), Shape::TriangleDown),
    }
}

/// The (expressive variant, ablation) pairs in the paper's row order of the variants.
pub fn pairs() -> Vec<(Family, Family)> {
    MAIN.iter()
        .filter_map(|m| ABLATIONS.iter().find(|(f, _)| f == m).copied())
        .collect()
}

/// What a panel plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Loss,
    ExactState,
}

impl Metric {
    fn value(self, p: &Point) -> f64 {
        match self {
            Metric::Loss => p.loss,
            Metric::ExactState => p.exact_state * 100.0,
        }
    }

    fn axis(self, points: &[Point]) -> Axis {
        let values = points.iter().map(|p| self.value(p));
        match self {
            Metric::Loss => Axis::log(
                "Loss (log scale)",
                values,
                Some(LOSS_CAP_RATIO),
                short_number,
            ),
            Metric::ExactState => Axis::percent("ExactState (%)", values),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Metric::Loss => "loss",
            Metric::ExactState => "ExactState",
        }
    }
}

/// A set of points by split label, and the file-name suffix of its figure.
type Row<'a> = (&'a str, Vec<Point>);

/// Groups the non-empty sets into figures: the first `real` split and the first `random`
/// one together (suffix ``), every other set alone (suffix `_<label>`).
fn arrange(rows: Vec<Row<'_>>) -> Vec<(String, Vec<Row<'_>>)> {
    let rows: Vec<Row<'_>> = rows.into_iter().filter(|(_, p)| !p.is_empty()).collect();
    let real = rows.iter().position(|(s, _)| s.contains("real"));
    let random = rows
        .iter()
        .position(|(s, _)| s.contains("random") && !s.contains("real"));
    let mut main = Vec::new();
    let mut others = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        if Some(i) == real || Some(i) == random {
            main.push(row);
        } else {
            others.push((format!("_{}", file_safe(row.0)), vec![row]));
        }
    }
    // The real split sorts before the random one (the tables' split order), but make sure.
    main.sort_by_key(|(s, _)| !s.contains("real"));
    let mut figures = Vec::new();
    if !main.is_empty() {
        figures.push((String::new(), main));
    }
    figures.extend(others);
    figures
}

fn row_names(rows: &[Row<'_>]) -> String {
    rows.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(", ")
}

/// The legend's note on off-axis values, when a panel has one.
fn off_axis_entry(rows: &[Vec<Panel>]) -> Option<LegendEntry> {
    rows.iter()
        .flatten()
        .any(|p| p.off_axis().next().is_some())
        .then(|| LegendEntry {
            symbol: Symbol::Text,
            color: RGBColor(0, 0, 0),
            label: OFF_AXIS_NOTE.to_owned(),
        })
}

/// Figure 3 for every split of `sets` (split label, points): the main families only, one
/// row per split, loss and ExactState against parameter count, a line per family and the
/// Pareto frontier (dashed).
pub fn figure3(sets: &[(String, Vec<Point>)]) -> Vec<Planned> {
    let rows: Vec<Row<'_>> = sets
        .iter()
        .map(|(split, points)| {
            let main = points.iter().filter(|p| MAIN.contains(&p.family));
            (split.as_str(), main.copied().collect())
        })
        .collect();
    arrange(rows)
        .into_iter()
        .map(|(suffix, rows)| Planned {
            id: format!("figure3{suffix}"),
            figure: scaling_figure(&rows),
        })
        .collect()
}

fn scaling_figure(rows: &[Row<'_>]) -> Figure {
    let params = rows
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.params as f64));
    let x = Axis::log("Parameters (millions, log scale)", params, None, millions);
    let panels: Vec<Vec<Panel>> = rows
        .iter()
        .map(|(split, points)| {
            [Metric::Loss, Metric::ExactState]
                .map(|m| scaling_panel(split, points, &x, m))
                .to_vec()
        })
        .collect();
    let mut legend: Vec<LegendEntry> = MAIN
        .iter()
        .filter(|f| rows.iter().any(|(_, p)| p.iter().any(|p| p.family == **f)))
        .map(|&f| {
            let (color, shape) = family_style(f);
            LegendEntry {
                symbol: Symbol::LineMark(shape),
                color,
                label: family_label(f).to_owned(),
            }
        })
        .collect();
    if panels
        .iter()
        .flatten()
        .any(|p| p.lines.iter().any(|l| l.dashed))
    {
        legend.push(LegendEntry {
            symbol: Symbol::Line(true),
            color: RGBColor(0, 0, 0),
            label: "Pareto frontier".to_owned(),
        });
    }
    legend.extend(off_axis_entry(&panels));
    Figure {
        heading: "Figure 3: loss and ExactState against parameter count".to_owned(),
        caption: format!(
            "Figure 3: loss (log scale) and ExactState against parameter count, main families \
             (rows: {}); dashed: the empirical Pareto frontier",
            row_names(rows)
        ),
        legend,
        rows: panels,
        row_height: ROW_HEIGHT,
    }
}

fn scaling_panel(split: &str, points: &[Point], x: &Axis, metric: Metric) -> Panel {
    let mut panel = Panel::new(
        format!("{split}: {}", metric.name()),
        x.clone(),
        metric.axis(points),
    );
    for family in MAIN {
        let mut own: Vec<&Point> = points.iter().filter(|p| p.family == family).collect();
        if own.is_empty() {
            continue;
        }
        own.sort_by_key(|p| (p.params, p.size));
        let (color, shape) = family_style(family);
        panel.lines.push(Line {
            points: own
                .iter()
                .map(|p| (p.params as f64, metric.value(p)))
                .collect(),
            color,
            dashed: false,
        });
        panel.marks.extend(own.iter().map(|p| Mark {
            x: p.params as f64,
            y: metric.value(p),
            shape,
            filled: true,
            color,
            radius: RADIUS,
        }));
    }
    let all: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.params as f64, metric.value(p)))
        .collect();
    let front = pareto_frontier(&all, metric == Metric::Loss);
    if front.len() >= 2 {
        panel.lines.push(Line {
            points: front,
            color: RGBColor(0, 0, 0),
            dashed: true,
        });
    }
    panel
}

/// Figure 4 for every split of `sets` that has an ablation: the variant–ablation pairs per
/// size group, the variant filled, the ablation open, an arrow from ablation to variant.
pub fn figure4(sets: &[(String, Vec<Point>)]) -> Vec<Planned> {
    let pairs = pairs();
    let rows: Vec<Row<'_>> = sets
        .iter()
        .filter(|(_, points)| {
            points
                .iter()
                .any(|p| pairs.iter().any(|&(_, a)| a == p.family))
        })
        .map(|(split, points)| {
            let kept = points
                .iter()
                .filter(|p| pairs.iter().any(|&(f, a)| f == p.family || a == p.family));
            (split.as_str(), kept.copied().collect())
        })
        .collect();
    arrange(rows)
        .into_iter()
        .map(|(suffix, rows)| Planned {
            id: format!("figure4{suffix}"),
            figure: ablation_figure(&rows, &pairs),
        })
        .collect()
}

fn ablation_figure(rows: &[Row<'_>], pairs: &[(Family, Family)]) -> Figure {
    let labels: Vec<String> = Size::ALL.iter().map(|&s| size_label(s)).collect();
    let x = Axis::groups("Model size (width / layers)", &labels);
    let panels: Vec<Vec<Panel>> = rows
        .iter()
        .map(|(split, points)| {
            [Metric::Loss, Metric::ExactState]
                .map(|m| ablation_panel(split, points, &x, m, pairs))
                .to_vec()
        })
        .collect();
    let present = |f: Family| rows.iter().any(|(_, p)| p.iter().any(|p| p.family == f));
    let mut legend = Vec::new();
    for &(full, ablated) in pairs {
        let (color, shape) = family_style(full);
        for (family, filled) in [(full, true), (ablated, false)] {
            if present(family) {
                legend.push(LegendEntry {
                    symbol: Symbol::Mark(shape, filled),
                    color,
                    label: family_label(family).to_owned(),
                });
            }
        }
    }
    legend.push(LegendEntry {
        symbol: Symbol::Arrow,
        color: RGBColor(70, 70, 70),
        label: "ablation → variant".to_owned(),
    });
    legend.extend(off_axis_entry(&panels));
    Figure {
        heading: "Figure 4: ablations (open) against their expressive variants (filled)".to_owned(),
        caption: format!(
            "Figure 4: loss (log scale) and ExactState of each ablation (open marker) and its \
             expressive variant (filled) per size group, an arrow from ablation to variant \
             (rows: {})",
            row_names(rows)
        ),
        legend,
        rows: panels,
        row_height: ROW_HEIGHT,
    }
}

/// Horizontal place of a family in size group `group`: the pairs side by side, the ablation
/// just left of its variant.
pub fn group_x(group: usize, pair: usize, ablated: bool) -> f64 {
    let offset = (pair as f64 - 1.0) * 0.26;
    group as f64 + offset + if ablated { -0.06 } else { 0.06 }
}

fn ablation_panel(
    split: &str,
    points: &[Point],
    x: &Axis,
    metric: Metric,
    pairs: &[(Family, Family)],
) -> Panel {
    let mut panel = Panel::new(
        format!("{split}: {}", metric.name()),
        x.clone(),
        metric.axis(points),
    );
    panel.bands = (0..Size::ALL.len())
        .map(|i| (i as f64 - 0.44, i as f64 + 0.44))
        .collect();
    for (pair, &(full, ablated)) in pairs.iter().enumerate() {
        let (color, shape) = family_style(full);
        for (group, &size) in Size::ALL.iter().enumerate() {
            let find = |f: Family| points.iter().find(|p| p.family == f && p.size == size);
            let placed = [(full, false), (ablated, true)].map(|(family, is_ablation)| {
                find(family).map(|p| (group_x(group, pair, is_ablation), metric.value(p)))
            });
            if let [Some(to), Some(from)] = placed {
                panel.arrows.push(Arrow { from, to });
            }
            // The ablation first, so that its variant is drawn over it where they overlap.
            for (at, filled) in placed.into_iter().zip([true, false]).rev() {
                let Some((x, y)) = at else { continue };
                panel.marks.push(Mark {
                    x,
                    y,
                    shape,
                    filled,
                    color,
                    radius: RADIUS,
                });
            }
        }
    }
    panel
}
