//! Drawing a [`Figure`] with plotters: the heading, the legend under it, then the grid of
//! panels. plotters draws each panel's axes, grid and bands; bars, lines, arrows and markers are
//! drawn in pixels on the whole figure, at the positions the panel's axes give them, clipped
//! to the axes by [`Axis`](super::Axis) rules.

use std::sync::OnceLock;

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axis::short_number;
use super::{Axis, Bar, Figure, FigureError, LegendEntry, Mark, Panel, Place, Shape, Symbol};

/// The font the figures use, embedded in the binary.
const FONT: &[u8] = include_bytes!("../font/DejaVuSans.ttf");
/// The font family name the SVG uses.
const FAMILY: &str = "sans-serif";

const HEADING_SIZE: u32 = 17;
const HEADING_HEIGHT: u32 = 34;
const LEGEND_SIZE: u32 = 13;
const LEGEND_ROW: u32 = 22;
const LEGEND_PAD: u32 = 8;
/// Width of a legend symbol, and the gap before its text.
const SYMBOL_WIDTH: u32 = 26;
const SYMBOL_GAP: u32 = 6;
/// Space between two legend entries.
const ENTRY_GAP: u32 = 18;
const CAPTION_SIZE: u32 = 14;
const TICK_SIZE: u32 = 12;
const AXIS_TITLE_SIZE: u32 = 13;
const NOTE_SIZE: u32 = 11;

const GRID: RGBColor = RGBColor(228, 228, 228);
const BAND: RGBColor = RGBColor(238, 238, 244);
const ARROW: RGBColor = RGBColor(70, 70, 70);
const NOTE: RGBColor = RGBColor(50, 50, 50);

/// A panel axis for plotters: a linear range of [`Axis`] coordinates with the axis' ticks as
/// its only key points (labelled by the panel's formatter).
struct Ticked {
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl Ticked {
    fn new(axis: &Axis) -> Self {
        let (lo, hi) = axis.coord_range();
        Self {
            range: lo..hi,
            ticks: axis.tick_coords(),
        }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = self.range.end - self.range.start;
        let share = if span > 0.0 && value.is_finite() {
            ((value - self.range.start) / span).clamp(-1.0, 2.0)
        } else {
            0.5
        };
        limit.0 + (f64::from(limit.1 - limit.0) * share).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

fn register_font() -> Result<(), FigureError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err(FigureError::Font) }
}

fn draw_err<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> FigureError {
    FigureError::Draw(Box::new(e))
}

fn text_style(size: u32, color: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: (FAMILY, size).into_font(),
        color: color.to_backend_color(),
        pos: Pos::new(h, v),
    }
}

/// The width of `text` in pixels at `size`, measured with the bundled font (estimated when
/// it cannot be loaded).
fn text_width(text: &str, size: u32) -> u32 {
    let _ = register_font();
    (FAMILY, size).into_font().box_size(text).map_or_else(
        |_| (text.chars().count() as f64 * f64::from(size) * 0.62) as u32,
        |b| b.0,
    )
}

fn entry_width(entry: &LegendEntry) -> u32 {
    let text = text_width(&entry.label, LEGEND_SIZE);
    match entry.symbol {
        Symbol::Text => text,
        _ => SYMBOL_WIDTH + SYMBOL_GAP + text,
    }
}

/// The legend's entries by row: as many per row as fit the figure's width.
fn legend_rows(figure: &Figure) -> Vec<Vec<(&LegendEntry, u32)>> {
    let room = super::FIGURE_WIDTH - 40;
    let mut rows: Vec<Vec<(&LegendEntry, u32)>> = Vec::new();
    let mut used = 0;
    for entry in &figure.legend {
        let width = entry_width(entry);
        match rows.last_mut() {
            Some(row) if used + ENTRY_GAP + width <= room => {
                row.push((entry, width));
                used += ENTRY_GAP + width;
            }
            _ => {
                rows.push(vec![(entry, width)]);
                used = width;
            }
        }
    }
    rows
}

/// Height of the heading and the legend.
pub(super) fn header_height(figure: &Figure) -> u32 {
    let rows = legend_rows(figure).len() as u32;
    HEADING_HEIGHT + rows * LEGEND_ROW + if rows > 0 { LEGEND_PAD } else { 0 }
}

/// The figure as SVG text.
pub(super) fn svg(figure: &Figure) -> Result<String, FigureError> {
    register_font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, figure.size()).into_drawing_area();
        draw_figure(&root, figure)?;
    }
    Ok(out)
}

/// The figure as an RGB PNG.
pub(super) fn png(figure: &Figure) -> Result<Vec<u8>, FigureError> {
    register_font()?;
    let (w, h) = figure.size();
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        draw_figure(&root, figure)?;
    }
    let mut encoded = Vec::new();
    let mut encoder = png::Encoder::new(&mut encoded, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&pixels)?;
    writer.finish()?;
    Ok(encoded)
}

fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    figure: &Figure,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let (width, _) = root.dim_in_pixel();
    root.draw_text(
        &figure.heading,
        &text_style(HEADING_SIZE, BLACK, HPos::Center, VPos::Top),
        (width as i32 / 2, 9),
    )
    .map_err(draw_err)?;
    draw_legend(root, figure)?;
    if !figure.rows.is_empty() {
        let (_, body) = root.split_vertically(header_height(figure));
        for (row, area) in figure
            .rows
            .iter()
            .zip(body.split_evenly((figure.rows.len(), 1)))
        {
            for (panel, cell) in row.iter().zip(area.split_evenly((1, row.len().max(1)))) {
                draw_panel(root, &cell, panel)?;
            }
        }
    }
    root.present().map_err(draw_err)
}

fn draw_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    figure: &Figure,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let style = text_style(LEGEND_SIZE, BLACK, HPos::Left, VPos::Center);
    for (i, row) in legend_rows(figure).iter().enumerate() {
        let total: u32 = row.iter().map(|(_, w)| w).sum::<u32>()
            + ENTRY_GAP * (row.len().saturating_sub(1) as u32);
        let mut x = (super::FIGURE_WIDTH.saturating_sub(total) / 2) as i32;
        let y = (HEADING_HEIGHT + i as u32 * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        for &(entry, width) in row {
            let text_x = if entry.symbol == Symbol::Text {
                x
            } else {
                draw_symbol(root, entry, (x, y))?;
                x + (SYMBOL_WIDTH + SYMBOL_GAP) as i32
            };
            root.draw_text(&entry.label, &style, (text_x, y))
                .map_err(draw_err)?;
            x += (width + ENTRY_GAP) as i32;
        }
    }
    Ok(())
}

/// A legend symbol whose left end is at `(x, y)`.
fn draw_symbol<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entry: &LegendEntry,
    (x, y): (i32, i32),
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let end = x + SYMBOL_WIDTH as i32;
    let center = (x + SYMBOL_WIDTH as i32 / 2, y);
    let color = entry.color;
    match entry.symbol {
        Symbol::Mark(shape, filled) => draw_marker(root, center, shape, filled, color, 5),
        Symbol::Line(dashed) => draw_path(root, vec![(x, y), (end, y)], color, dashed),
        Symbol::LineMark(shape) => {
            draw_path(root, vec![(x, y), (end, y)], color, false)?;
            draw_marker(root, center, shape, true, color, 5)
        }
        Symbol::Arrow => draw_arrow(root, (x, y), (end, y), 0.0),
        Symbol::Text => Ok(()),
    }
}

fn draw_path<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    points: Vec<(i32, i32)>,
    color: RGBColor,
    dashed: bool,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let style = color.stroke_width(2);
    if dashed {
        root.draw(&DashedPathElement::new(points, 7, 5, style))
    } else {
        root.draw(&PathElement::new(points, style))
    }
    .map_err(draw_err)
}

/// One panel: plotters draws the caption, bands, grid, axes and tick labels on `area`; the
/// bars, lines, arrows and markers are drawn on `root` at the pixels the chart maps them to.
fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let (y0, y1) = panel.y.coord_range();
    let mut chart = ChartBuilder::on(area)
        .margin_top(4)
        .margin_bottom(6)
        .margin_left(8)
        .margin_right(20)
        .caption(&panel.caption, (FAMILY, CAPTION_SIZE))
        .x_label_area_size(44)
        .y_label_area_size(62)
        .build_cartesian_2d(Ticked::new(&panel.x), Ticked::new(&panel.y))
        .map_err(draw_err)?;
    chart
        .draw_series(panel.bands.iter().map(|&(a, b)| {
            Rectangle::new(
                [(panel.x.coord(a), y0), (panel.x.coord(b), y1)],
                BAND.filled(),
            )
        }))
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(&panel.x.title)
        .y_desc(&panel.y.title)
        .x_label_formatter(&|v| panel.x.label_at(*v))
        .y_label_formatter(&|v| panel.y.label_at(*v))
        .label_style((FAMILY, TICK_SIZE))
        .axis_desc_style((FAMILY, AXIS_TITLE_SIZE))
        .bold_line_style(GRID)
        .light_line_style(WHITE)
        .draw()
        .map_err(draw_err)?;
    let to_px = |x: f64, y: f64| chart.backend_coord(&(x, y));
    for bar in &panel.bars {
        draw_bar(root, panel, bar, &to_px)?;
    }
    for line in &panel.lines {
        let mut segment: Vec<(i32, i32)> = Vec::new();
        let coords = line
            .points
            .iter()
            .map(|&(x, y)| panel.x.clamped(x).zip(panel.y.clamped(y)))
            .chain(std::iter::once(None));
        for coord in coords {
            match coord {
                Some((x, y)) => segment.push(to_px(x, y)),
                None if segment.len() >= 2 => {
                    draw_path(root, std::mem::take(&mut segment), line.color, line.dashed)?;
                }
                None => segment.clear(),
            }
        }
    }
    for arrow in &panel.arrows {
        let ends = [arrow.from, arrow.to].map(|at| anchor(panel, at, ARROW_INSET, &to_px));
        if let [Some((from, _)), Some((to, _))] = ends {
            draw_arrow(root, from, to, 7.0)?;
        }
    }
    let (plot_x, _) = chart.plotting_area().get_pixel_range();
    for mark in &panel.marks {
        draw_mark(root, panel, mark, &to_px, plot_x.end)?;
    }
    Ok(())
}

/// A bar, its ends clipped to the axes; nothing where an end is NaN or it is less than a
/// pixel high or wide.
fn draw_bar<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panel: &Panel,
    bar: &Bar,
    to_px: &dyn Fn(f64, f64) -> (i32, i32),
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let ends = (
        panel.x.clamped(bar.x.0),
        panel.x.clamped(bar.x.1),
        panel.y.clamped(bar.y.0),
        panel.y.clamped(bar.y.1),
    );
    let (Some(x0), Some(x1), Some(y0), Some(y1)) = ends else {
        return Ok(());
    };
    let (a, b) = (to_px(x0, y0), to_px(x1, y1));
    if a.0 == b.0 || a.1 == b.1 {
        return Ok(());
    }
    root.draw(&Rectangle::new([a, b], bar.color.filled()))
        .map_err(draw_err)
}

/// How far inside the plot a marker off the axis is drawn (and the arrows to it start).
const ARROW_INSET: i32 = 7;

/// The pixel of data point `(x, y)`, and the note for a y off the axis: such a point sits
/// `inset` pixels inside the edge it passed (the top edge for NaN), so that its marker stays
/// within the plot. `None` when x is NaN.
fn anchor(
    panel: &Panel,
    (x, y): (f64, f64),
    inset: i32,
    to_px: &dyn Fn(f64, f64) -> (i32, i32),
) -> Option<((i32, i32), Option<String>)> {
    let x = panel.x.clamped(x)?;
    let top = panel.y.coord_range().1;
    let (coord, shift, note) = match panel.y.place(y) {
        Place::Inside(c) => (c, 0, None),
        Place::Clipped { coord, above } => {
            let arrow = if above { '↑' } else { '↓' };
            let shift = if above { inset } else { -inset };
            (coord, shift, Some(format!("{arrow} {}", short_number(y))))
        }
        Place::Missing => (top, inset, Some("NaN".to_owned())),
    };
    let (px, py) = to_px(x, coord);
    Some(((px, py + shift), note))
}

/// A marker at its place; one off the axis sits just inside the edge it passed, or the top
/// edge when NaN, with its value written beside it (`↑ 4.4e17`, `NaN`).
fn draw_mark<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    panel: &Panel,
    mark: &Mark,
    to_px: &dyn Fn(f64, f64) -> (i32, i32),
    right_edge: i32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let inset = mark.radius as i32 + 2;
    let Some((center, note)) = anchor(panel, (mark.x, mark.y), inset, to_px) else {
        return Ok(());
    };
    draw_marker(
        root,
        center,
        mark.shape,
        mark.filled,
        mark.color,
        mark.radius,
    )?;
    if let Some(note) = note {
        let gap = mark.radius as i32 + 4;
        let fits_right = center.0 + gap + text_width(&note, NOTE_SIZE) as i32 <= right_edge;
        let (h, dx) = if fits_right {
            (HPos::Left, gap)
        } else {
            (HPos::Right, -gap)
        };
        root.draw_text(
            &note,
            &text_style(NOTE_SIZE, NOTE, h, VPos::Center),
            (center.0 + dx, center.1 + 1),
        )
        .map_err(draw_err)?;
    }
    Ok(())
}

/// The outline of `shape` around `(cx, cy)` with radius `r`, as a closed polygon.
fn outline(shape: Shape, (cx, cy): (i32, i32), r: f64) -> Vec<(i32, i32)> {
    let offsets: &[(f64, f64)] = match shape {
        Shape::Circle => &[],
        Shape::Square => &[(-0.9, -0.9), (0.9, -0.9), (0.9, 0.9), (-0.9, 0.9)],
        Shape::Diamond => &[(0.0, -1.3), (1.3, 0.0), (0.0, 1.3), (-1.3, 0.0)],
        Shape::TriangleDown => &[(-1.2, -0.8), (1.2, -0.8), (0.0, 1.3)],
    };
    offsets
        .iter()
        .map(|&(dx, dy)| (cx + (dx * r).round() as i32, cy + (dy * r).round() as i32))
        .collect()
}

fn draw_marker<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    center: (i32, i32),
    shape: Shape,
    filled: bool,
    color: RGBColor,
    radius: u32,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let fill = if filled {
        color.filled()
    } else {
        WHITE.filled()
    };
    if shape == Shape::Circle {
        root.draw(&Circle::new(center, radius, fill))
            .map_err(draw_err)?;
        if !filled {
            root.draw(&Circle::new(center, radius, color.stroke_width(2)))
                .map_err(draw_err)?;
        }
        return Ok(());
    }
    let mut points = outline(shape, center, f64::from(radius));
    root.draw(&Polygon::new(points.clone(), fill))
        .map_err(draw_err)?;
    if !filled && let Some(&first) = points.first() {
        points.push(first);
        root.draw(&PathElement::new(points, color.stroke_width(2)))
            .map_err(draw_err)?;
    }
    Ok(())
}

/// An arrow from `start` to `end` (pixels), its head stopping `stop` pixels short of `end`
/// (the target marker's edge); none when shorter than its head.
fn draw_arrow<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    start: (i32, i32),
    end: (i32, i32),
    stop: f64,
) -> Result<(), FigureError>
where
    DB::ErrorType: 'static,
{
    let (dx, dy) = (f64::from(end.0 - start.0), f64::from(end.1 - start.1));
    let length = dx.hypot(dy);
    if length < stop + 12.0 {
        return Ok(());
    }
    let (ux, uy) = (dx / length, dy / length);
    let tip = (f64::from(end.0) - ux * stop, f64::from(end.1) - uy * stop);
    let base = (tip.0 - ux * 9.0, tip.1 - uy * 9.0);
    let px = |x: f64, y: f64| (x.round() as i32, y.round() as i32);
    root.draw(&PathElement::new(
        vec![start, px(base.0, base.1)],
        ARROW.stroke_width(2),
    ))
    .map_err(draw_err)?;
    root.draw(&Polygon::new(
        vec![
            px(tip.0, tip.1),
            px(base.0 - uy * 4.5, base.1 + ux * 4.5),
            px(base.0 + uy * 4.5, base.1 - ux * 4.5),
        ],
        ARROW.filled(),
    ))
    .map_err(draw_err)
}
