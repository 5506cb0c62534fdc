//! Figures 3 and 4 as SVG and PNG, drawn with plotters.
//!
//! Both figures have two panels sharing a logarithmic parameter-count axis: loss (lower is
//! better) and ExactState (higher is better). Figure 3 draws one series per family and the
//! Pareto frontier over all points (dashed, black); Figure 4 draws an arrow from each ablated
//! model to its expressive counterpart of the same size. Text is real `<text>` in the SVG;
//! the PNG rasterises it with the bundled DejaVu Sans (`src/font/`, Bitstream Vera licence),
//! so no system font is needed.

use std::path::Path;
use std::sync::OnceLock;

use cwm_models::{Family, Size};
use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::ReportError;
use crate::tables::{ABLATIONS, family_label};

/// The font the figures use, embedded in the binary.
const FONT: &[u8] = include_bytes!("font/DejaVuSans.ttf");
/// Pixel size of every figure (the SVG's user units and the PNG's pixels).
pub const FIGURE_SIZE: (u32, u32) = (1400, 560);

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

/// What a figure shows.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureSpec {
    /// The figure's title.
    pub title: String,
    /// The points.
    pub points: Vec<Point>,
    /// Whether to draw the Pareto frontier (Figure 3).
    pub frontier: bool,
    /// Arrows as (ablated, full) indices into `points` (Figure 4).
    pub arrows: Vec<(usize, usize)>,
}

impl FigureSpec {
    /// Figure 3 of a split: every point, the frontier, no arrows.
    pub fn figure3(split: &str, points: Vec<Point>) -> Self {
        Self {
            title: format!("Figure 3: loss and ExactState against parameters ({split})"),
            points,
            frontier: true,
            arrows: Vec::new(),
        }
    }

    /// Figure 4 of a split: the points of complete ablation pairs and one arrow per pair;
    /// `None` when no pair is complete.
    pub fn figure4(split: &str, points: &[Point]) -> Option<Self> {
        let mut kept = Vec::new();
        let mut arrows = Vec::new();
        for (full, ablated) in ABLATIONS {
            for size in Size::ALL {
                let find = |f: Family| points.iter().find(|p| p.family == f && p.size == size);
                if let (Some(f), Some(a)) = (find(full), find(ablated)) {
                    kept.push(*a);
                    kept.push(*f);
                    arrows.push((kept.len() - 2, kept.len() - 1));
                }
            }
        }
        (!arrows.is_empty()).then(|| Self {
            title: format!("Figure 4: ablated model → full model ({split})"),
            points: kept,
            frontier: false,
            arrows,
        })
    }
}

/// Line colours, one per family (in `Family::ALL` order).
fn family_color(family: Family) -> RGBColor {
    match family {
        Family::Transformer => RGBColor(31, 119, 180),
        Family::Slice => RGBColor(255, 127, 14),
        Family::SliceDiag => RGBColor(188, 128, 45),
        Family::Gdn => RGBColor(44, 160, 44),
        Family::GdnPos => RGBColor(140, 200, 100),
        Family::Mamba3 => RGBColor(214, 39, 40),
        Family::Mamba2 => RGBColor(148, 103, 189),
    }
}

/// The points on the Pareto frontier of (fewer parameters, better value), by parameter count.
/// `better(a, b)` says whether value `a` beats `b`.
pub fn pareto_frontier(points: &[(f64, f64)], lower_is_better: bool) -> Vec<(f64, f64)> {
    let mut sorted: Vec<(f64, f64)> = points.to_vec();
    sorted.sort_by(|a, b| {
        a.0.total_cmp(&b.0).then(if lower_is_better {
            a.1.total_cmp(&b.1)
        } else {
            b.1.total_cmp(&a.1)
        })
    });
    let mut front: Vec<(f64, f64)> = Vec::new();
    for p in sorted {
        let dominated = front.last().is_some_and(|last| {
            if lower_is_better {
                p.1 >= last.1
            } else {
                p.1 <= last.1
            }
        });
        if !dominated {
            front.push(p);
        }
    }
    front
}

fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the bundled font DejaVuSans.ttf could not be loaded".to_owned())
        })
        .clone()
}

#[derive(Clone, Copy)]
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

    fn label(self) -> &'static str {
        match self {
            Metric::Loss => "Loss",
            Metric::ExactState => "ExactState (%)",
        }
    }
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    let span = if hi > lo {
        hi - lo
    } else {
        lo.abs().max(1.0) * 0.1
    };
    (lo - span * 0.08, hi + span * 0.08)
}

/// Tick positions for the parameter axis on `[lo, hi]`: multiples of a power of ten (or of
/// twice or five times one) giving two to eight ticks, so that a narrow range (models of one
/// size, 3.13M and 3.14M) still gets labelled ticks, which plotters' log-scale default does
/// not give between two powers of ten.
fn parameter_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo && lo > 0.0) {
        return Vec::new();
    }
    let decade = 10f64.powf((hi - lo).log10().floor());
    let ticks_with = |step: f64| -> Vec<f64> {
        let first = (lo / step).ceil() as i64;
        let last = (hi / step).floor() as i64;
        (first..=last).map(|k| k as f64 * step).collect()
    };
    for step in [
        decade / 10.0,
        decade / 5.0,
        decade / 2.0,
        decade,
        decade * 2.0,
        decade * 5.0,
    ] {
        let ticks = ticks_with(step);
        if (2..=8).contains(&ticks.len()) {
            return ticks;
        }
    }
    ticks_with(decade)
}

/// Decimals that keep the labels of about ten ticks on `[lo, hi]` distinct (0 to 4).
fn axis_decimals(lo: f64, hi: f64) -> usize {
    let step = (hi - lo) / 10.0;
    if !(step.is_finite() && step > 0.0) {
        return 2;
    }
    (-step.log10()).ceil().clamp(0.0, 4.0) as usize
}

/// A parameter count in millions with as many decimals as it needs (at most three).
fn millions(x: f64) -> String {
    let text = format!("{:.3}", x / 1e6);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}M")
}

/// A panel's chart: log-scaled parameter counts (with explicit ticks) against one metric.
type Panel<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<LogCoord<f64>>, RangedCoordf64>>;

fn drawing_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    e.to_string()
}

/// Draws `spec` on `root`: the loss panel on the left, the ExactState panel on the right.
fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    spec: &FigureSpec,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(drawing_error)?;
    let titled = root
        .titled(&spec.title, ("sans-serif", 22))
        .map_err(drawing_error)?;
    let (width, _) = titled.dim_in_pixel();
    let (left, right) = titled.split_horizontally(width / 2);
    let x_range = parameter_range(&spec.points);
    let mut families: Vec<Family> = spec.points.iter().map(|p| p.family).collect();
    families.sort();
    families.dedup();
    for (area, metric) in [(&left, Metric::Loss), (&right, Metric::ExactState)] {
        let mut chart = draw_panel_axes(area, spec, metric, x_range)?;
        draw_families(&mut chart, spec, metric, &families)?;
        if spec.frontier {
            draw_frontier(&mut chart, spec, metric)?;
        }
        for &(from, to) in &spec.arrows {
            let (Some(a), Some(b)) = (spec.points.get(from), spec.points.get(to)) else {
                continue;
            };
            let start = chart.backend_coord(&(a.params as f64, metric.value(a)));
            let end = chart.backend_coord(&(b.params as f64, metric.value(b)));
            draw_arrow(root, start, end).map_err(drawing_error)?;
        }
        draw_legend(&mut chart, metric)?;
    }
    root.present().map_err(drawing_error)?;
    Ok(())
}

/// The parameter axis' range: the points' parameter counts with a margin (1M to 100M when
/// there is none).
fn parameter_range(points: &[Point]) -> (f64, f64) {
    let (xmin, xmax) = points.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
        (lo.min(p.params as f64), hi.max(p.params as f64))
    });
    if xmin.is_finite() && xmin > 0.0 {
        (xmin * 0.8, xmax * 1.25)
    } else {
        (1e6, 1e8)
    }
}

/// The chart of `metric` on `area`, with its axes, ticks and labels drawn.
fn draw_panel_axes<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    spec: &FigureSpec,
    metric: Metric,
    (xmin, xmax): (f64, f64),
) -> Result<Panel<'a, DB>, String>
where
    DB::ErrorType: 'static,
{
    let values: Vec<f64> = spec.points.iter().map(|p| metric.value(p)).collect();
    let (ymin, ymax) = padded(
        values.iter().copied().fold(f64::INFINITY, f64::min),
        values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let decimals = axis_decimals(ymin, ymax);
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (xmin..xmax)
                .log_scale()
                .with_key_points(parameter_ticks(xmin, xmax)),
            ymin..ymax,
        )
        .map_err(drawing_error)?;
    chart
        .configure_mesh()
        .x_desc("Parameters")
        .y_desc(metric.label())
        .x_label_formatter(&|x| millions(*x))
        .y_label_formatter(&|y| format!("{y:.decimals$}"))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .draw()
        .map_err(drawing_error)?;
    Ok(chart)
}

/// One series per family: lines and markers (Figure 3), or markers only when the figure has
/// arrows (Figure 4).
fn draw_families<DB: DrawingBackend>(
    chart: &mut Panel<'_, DB>,
    spec: &FigureSpec,
    metric: Metric,
    families: &[Family],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    for &family in families {
        let color = family_color(family);
        let mut pts: Vec<(f64, f64)> = spec
            .points
            .iter()
            .filter(|p| p.family == family)
            .map(|p| (p.params as f64, metric.value(p)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if spec.arrows.is_empty() {
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(drawing_error)?
                .label(family_label(family))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(drawing_error)?;
        } else {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 5, color.filled())))
                .map_err(drawing_error)?
                .label(family_label(family))
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
        }
    }
    Ok(())
}

/// The Pareto frontier over all points (dashed, black).
fn draw_frontier<DB: DrawingBackend>(
    chart: &mut Panel<'_, DB>,
    spec: &FigureSpec,
    metric: Metric,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let all: Vec<(f64, f64)> = spec
        .points
        .iter()
        .map(|p| (p.params as f64, metric.value(p)))
        .collect();
    let front = pareto_frontier(&all, matches!(metric, Metric::Loss));
    chart
        .draw_series(DashedLineSeries::new(front, 8, 5, BLACK.stroke_width(2)))
        .map_err(drawing_error)?
        .label("Pareto frontier")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    Ok(())
}

/// The legend, in the corner the panel's curves leave free.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Panel<'a, DB>,
    metric: Metric,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(match metric {
            Metric::Loss => SeriesLabelPosition::UpperRight,
            Metric::ExactState => SeriesLabelPosition::LowerRight,
        })
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(drawing_error)
}

/// An arrow from `start` to `end` (pixels), stopping at the edge of the target's marker.
fn draw_arrow<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    start: (i32, i32),
    end: (i32, i32),
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (dx, dy) = (f64::from(end.0 - start.0), f64::from(end.1 - start.1));
    let length = dx.hypot(dy);
    if length < 12.0 {
        return Ok(());
    }
    let (ux, uy) = (dx / length, dy / length);
    let tip = (f64::from(end.0) - ux * 6.0, f64::from(end.1) - uy * 6.0);
    let base = (tip.0 - ux * 11.0, tip.1 - uy * 11.0);
    let px = |x: f64, y: f64| (x.round() as i32, y.round() as i32);
    let style = RGBColor(60, 60, 60);
    root.draw(&PathElement::new(
        vec![start, px(base.0, base.1)],
        style.stroke_width(2),
    ))?;
    root.draw(&Polygon::new(
        vec![
            px(tip.0, tip.1),
            px(base.0 - uy * 5.0, base.1 + ux * 5.0),
            px(base.0 + uy * 5.0, base.1 - ux * 5.0),
        ],
        style.filled(),
    ))
}

/// Writes `<stem>.svg` and `<stem>.png` of `spec` into `dir`, each through a temporary name.
///
/// # Errors
/// [`ReportError::Plot`] when drawing fails, [`ReportError::Io`] when writing does.
pub fn render(spec: &FigureSpec, dir: &Path, stem: &str) -> Result<(), ReportError> {
    let svg_path = dir.join(format!("{stem}.svg"));
    let png_path = dir.join(format!("{stem}.png"));
    let plot_err = |path: &Path| {
        let path = path.to_path_buf();
        move |message: String| ReportError::Plot { path, message }
    };
    register_font().map_err(plot_err(&svg_path))?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, FIGURE_SIZE).into_drawing_area();
        draw_figure(&root, spec).map_err(plot_err(&svg_path))?;
    }
    crate::write_atomic(&svg_path, svg.as_bytes())?;

    let (w, h) = FIGURE_SIZE;
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, FIGURE_SIZE).into_drawing_area();
        draw_figure(&root, spec).map_err(plot_err(&png_path))?;
    }
    let mut encoded = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut encoded, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder
            .write_header()
            .map_err(|e| plot_err(&png_path)(e.to_string()))?;
        writer
            .write_image_data(&pixels)
            .map_err(|e| plot_err(&png_path)(e.to_string()))?;
        writer
            .finish()
            .map_err(|e| plot_err(&png_path)(e.to_string()))?;
    }
    crate::write_atomic(&png_path, &encoded)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parameter_ticks_label_narrow_and_wide_ranges() {
        let narrow = super::parameter_ticks(3.13e6 * 0.8, 3.14e6 * 1.25);
        assert!((2..=8).contains(&narrow.len()), "{narrow:?}");
        assert!(narrow.iter().all(|&t| (2.504e6..=3.925e6).contains(&t)));
        let wide = super::parameter_ticks(2.5e6, 75e6);
        assert!((2..=8).contains(&wide.len()), "{wide:?}");
        assert!(super::parameter_ticks(1.0, 1.0).is_empty());
        assert_eq!(super::axis_decimals(0.25, 0.39), 2);
        assert_eq!(super::axis_decimals(1.0, 2.2), 1);
        assert_eq!(super::axis_decimals(0.0, 100.0), 0);
        assert_eq!(super::millions(3_128_150.0), "3.128M");
        assert_eq!(super::millions(3_000_000.0), "3M");
        assert_eq!(super::millions(2_500_000.0), "2.5M");
    }

    use super::*;

    #[test]
    fn frontier_keeps_only_undominated_points() {
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
        // Equal parameter counts: only the better value stays.
        assert_eq!(
            pareto_frontier(&[(3.0, 0.4), (3.0, 0.2)], true),
            vec![(3.0, 0.2)]
        );
    }
}
