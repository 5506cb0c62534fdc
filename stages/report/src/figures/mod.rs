//! The report's figures as SVG and PNG, drawn with plotters.
//!
//! * Figure 3 ([`paper::figure3`]): test loss (log scale) and ExactState against parameter
//!   count for the main families, one row per test split, with the Pareto frontier.
//! * Figure 4 ([`paper::figure4`]): each ablation (open marker) against its expressive variant
//!   (filled) per size group, an arrow from one to the other.
//! * Training curves ([`curves::training`]): validation loss and ExactState against step.
//! * Beyond the paper ([`beyond::beyond`]): per test split, the figures beside the
//!   `beyond_*` tables (validity flags and V1 by prefix bin, counter accuracy by true value,
//!   legal-move IoU and ExactState by prefix bin with error-run lengths, square accuracy by
//!   staleness, ExactState by novelty).
//! * Inside the models ([`beyond::probes`], [`beyond::markov`]): per split,
//!   `figure_beyond_probes_<split>` (the probes' square accuracy by relative depth ℓ/L, `id`
//!   and, when fitted, `ood` probes in two panels) and `figure_beyond_markov_<split>` (Cohen's
//!   d by relative depth, a panel per class set with classes); [`edit::persistence`]:
//!   `figure_beyond_edit_<split>` (how long a probe edit keeps a piece off the board).
//!
//! A figure is first described as data ([`Figure`]: a grid of [`Panel`]s with their axes,
//! bars, lines, marks and arrows), which the tests inspect, then drawn by [`render`]. Text is real
//! `<text>` in the SVG; the PNG rasterises it with the bundled DejaVu Sans (`src/font/`,
//! Bitstream Vera licence), so no system font is needed.

pub mod axis;
pub mod beyond;
pub mod curves;
mod draw;
pub mod edit;
pub mod paper;

use std::path::Path;

use cwm_models::{Family, Size};
pub use plotters::style::RGBColor;

pub use self::axis::{Axis, Place, Scale};
use crate::error::ReportError;

/// Width of every figure in pixels (the SVG's user units and the PNG's pixels).
pub const FIGURE_WIDTH: u32 = 880;

/// One model's result on one split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// Parameter count.
    pub params: u64,
    /// Loss.
    pub loss: f64,
    /// ExactState (fraction).
    pub exact_state: f64,
}

/// A marker's outline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A circle.
    Circle,
    /// A square.
    Square,
    /// A diamond.
    Diamond,
    /// A triangle pointing down.
    TriangleDown,
}

/// A marker at a data point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mark {
    /// x in data units.
    pub x: f64,
    /// y in data units (may lie off the axis, be infinite or NaN: drawn clipped and labelled).
    pub y: f64,
    /// Outline.
    pub shape: Shape,
    /// Filled, or open (white inside).
    pub filled: bool,
    /// Colour.
    pub color: RGBColor,
    /// Radius in pixels.
    pub radius: u32,
}

/// A polyline in data units, broken where a value is NaN and clipped to the axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The points, in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub color: RGBColor,
    /// Dashed, or solid.
    pub dashed: bool,
}

/// A filled rectangle in data units (a bar, or one segment of a stacked bar), clipped to the
/// axes; not drawn where an end is NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// Left and right ends (x, data units).
    pub x: (f64, f64),
    /// Bottom and top (y, data units).
    pub y: (f64, f64),
    /// Fill colour.
    pub color: RGBColor,
}

/// An arrow between two data points, stopping at the target's marker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrow {
    /// The start.
    pub from: (f64, f64),
    /// The end (the arrowhead).
    pub to: (f64, f64),
}

/// One chart of a figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The caption above it.
    pub caption: String,
    /// The horizontal axis.
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
    /// Shaded x ranges (data units), drawn under everything.
    pub bands: Vec<(f64, f64)>,
    /// Bars, drawn over the bands and the grid, under the lines.
    pub bars: Vec<Bar>,
    /// Lines.
    pub lines: Vec<Line>,
    /// Arrows, drawn over the lines.
    pub arrows: Vec<Arrow>,
    /// Markers, drawn last.
    pub marks: Vec<Mark>,
}

impl Panel {
    /// A panel with axes and nothing drawn yet.
    pub fn new(caption: impl Into<String>, x: Axis, y: Axis) -> Self {
        Self {
            caption: caption.into(),
            x,
            y,
            bands: Vec::new(),
            bars: Vec::new(),
            lines: Vec::new(),
            arrows: Vec::new(),
            marks: Vec::new(),
        }
    }

    /// The marks whose y value is not inside the axis: clipped to an edge or NaN.
    pub fn off_axis(&self) -> impl Iterator<Item = &Mark> {
        self.marks
            .iter()
            .filter(|m| !matches!(self.y.place(m.y), Place::Inside(_)))
    }
}

/// The symbol of a legend entry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Symbol {
    /// A marker (filled or open).
    Mark(Shape, bool),
    /// A line (dashed or solid).
    Line(bool),
    /// A solid line through a filled marker.
    LineMark(Shape),
    /// An arrow.
    Arrow,
    /// No symbol: the label explains itself.
    Text,
}

/// One entry of a figure's legend.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    /// The symbol.
    pub symbol: Symbol,
    /// Its colour.
    pub color: RGBColor,
    /// The text.
    pub label: String,
}

/// A figure: a heading, a legend shared by all panels, and rows of panels of equal height.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The heading drawn at the top.
    pub heading: String,
    /// The caption `index.md` gives it.
    pub caption: String,
    /// The legend, drawn under the heading.
    pub legend: Vec<LegendEntry>,
    /// Rows of panels.
    pub rows: Vec<Vec<Panel>>,
    /// Height of one row in pixels.
    pub row_height: u32,
}

impl Figure {
    /// Width and height in pixels.
    pub fn size(&self) -> (u32, u32) {
        let header = draw::header_height(self);
        (
            FIGURE_WIDTH,
            header + self.row_height * self.rows.len().max(1) as u32,
        )
    }
}

/// A figure and the stem of its files.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// File stem (`figure3`, `training_slice`).
    pub id: String,
    /// The figure.
    pub figure: Figure,
}

/// Why drawing a figure failed.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// The bundled font could not be loaded.
    #[error("the bundled font DejaVuSans.ttf could not be loaded")]
    Font,
    /// plotters reported an error.
    #[error("drawing failed: {0}")]
    Draw(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Encoding the PNG failed.
    #[error("PNG encoding failed: {0}")]
    Png(#[from] png::EncodingError),
}

/// The points on the empirical Pareto frontier of (fewer parameters, better value), by
/// parameter count: a point is on it when its value strictly beats that of every point with
/// fewer parameters (`lower_is_better`: a lower value beats a higher one). Of points with the
/// same parameter count only the best can be on it (the first of equal ones). Points whose
/// value is not finite are never on it.
pub fn pareto_frontier(points: &[(f64, f64)], lower_is_better: bool) -> Vec<(f64, f64)> {
    let better = |a: f64, b: f64| if lower_is_better { a < b } else { a > b };
    let mut sorted: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    // Stable: equal points keep their order.
    sorted.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then(if lower_is_better {
            a.1.total_cmp(&b.1)
        } else {
            b.1.total_cmp(&a.1)
        })
    });
    let mut front: Vec<(f64, f64)> = Vec::new();
    for p in sorted {
        if front.last().is_none_or(|last| better(p.1, last.1)) {
            front.push(p);
        }
    }
    front
}

/// Writes `<stem>.svg` and `<stem>.png` of `figure` into `dir`, each through a temporary name.
///
/// # Errors
/// [`ReportError::Plot`] naming the file when drawing fails, [`ReportError::Io`] when writing
/// does.
pub fn render(figure: &Figure, dir: &Path, stem: &str) -> Result<(), ReportError> {
    let svg_path = dir.join(format!("{stem}.svg"));
    let png_path = dir.join(format!("{stem}.png"));
    let plot_err = |path: &Path| {
        let path = path.to_path_buf();
        move |e: FigureError| ReportError::Plot {
            path,
            message: e.to_string(),
        }
    };
    let svg = draw::svg(figure).map_err(plot_err(&svg_path))?;
    crate::write_atomic(&svg_path, svg.as_bytes())?;
    let png = draw::png(figure).map_err(plot_err(&png_path))?;
    crate::write_atomic(&png_path, &png)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontier_keeps_only_points_that_beat_all_smaller_ones() {
        let points = [
            (3.0, 0.5),
            (8.0, 0.6),
            (18.0, 0.3),
            (36.0, 0.35),
            (40.0, 0.1),
        ];
        assert_eq!(
            pareto_frontier(&points, true),
            vec![(3.0, 0.5), (18.0, 0.3), (40.0, 0.1)]
        );
        assert_eq!(
            pareto_frontier(&points, false),
            vec![(3.0, 0.5), (8.0, 0.6)]
        );
        // Equal parameter counts: only the better value stays; an equal value does not
        // strictly beat, so it is not on the frontier.
        assert_eq!(
            pareto_frontier(&[(3.0, 0.4), (3.0, 0.2), (5.0, 0.2)], true),
            vec![(3.0, 0.2)]
        );
        // NaN and infinite values are never on it and do not hide the others.
        assert_eq!(
            pareto_frontier(
                &[
                    (1.0, f64::NAN),
                    (2.0, f64::INFINITY),
                    (3.0, 0.7),
                    (4.0, 0.5)
                ],
                true
            ),
            vec![(3.0, 0.7), (4.0, 0.5)]
        );
        assert!(pareto_frontier(&[], false).is_empty());
    }

    /// Values at the limits of `f64`, NaN, zero parameters: every figure still draws, with
    /// finite axes.
    #[test]
    fn extreme_values_draw_without_panicking() {
        let point = |family, size, params, loss, exact_state| Point {
            family,
            size,
            params,
            loss,
            exact_state,
        };
        let points = vec![
            point(Family::Slice, Size::D128, 0, f64::MAX, f64::MAX),
            point(
                Family::Slice,
                Size::D256,
                u64::MAX,
                f64::MIN_POSITIVE,
                -f64::MAX,
            ),
            point(Family::SliceDiag, Size::D128, 1, f64::NAN, f64::NAN),
            point(Family::SliceDiag, Size::D256, 2, -1.0, f64::NEG_INFINITY),
            point(Family::Transformer, Size::D512, 40_000_000, 0.0, 2.0),
        ];
        let sets = vec![("test_real".to_owned(), points)];
        let planned: Vec<Planned> = paper::figure3(&sets)
            .into_iter()
            .chain(paper::figure4(&sets))
            .collect();
        assert_eq!(planned.len(), 2);
        for plan in &planned {
            for panel in plan.figure.rows.iter().flatten() {
                for axis in [&panel.x, &panel.y] {
                    let (lo, hi) = axis.coord_range();
                    assert!(lo.is_finite() && hi.is_finite() && lo < hi, "{axis:?}");
                }
            }
            let svg = draw::svg(&plan.figure).unwrap();
            assert!(!svg.contains("NaN\""), "{}: a NaN coordinate", plan.id);
            let png = draw::png(&plan.figure).unwrap();
            assert!(png.len() > 1000);
        }
    }
}
