//! The state-editing figure (E11, from `edit` artifacts): `figure_beyond_edit_<split>`,
//! persistence against the plies after the edit, for the persistent cases.
//!
//! Per model, the probe edit (`probe` or `probe_diff`, any layer and α) with the most flips
//! among held cases at the edited step is drawn solid; the dashed line beside it is, in panel
//! (a), the random edit at the same layer and α and, in panel (b), the unedited model. k = 0
//! is the edited step itself. Undefined values break the line.

use cwm_formats::edit::{
    EditRow, VARIANT_PERSISTENT, VECTOR_NONE, VECTOR_PROBE, VECTOR_PROBE_DIFF, VECTOR_RANDOM,
};

use super::axis::short_number;
use super::beyond::model_style;
use super::{Axis, Figure, LegendEntry, Line, Mark, Panel, Planned, RGBColor, Symbol};
use crate::inputs::{EditRun, Inputs};
use crate::tables::{cell_name, edit_runs, file_safe};

/// Height of the row of panels.
const ROW_HEIGHT: u32 = 300;
/// Marker radius.
const RADIUS: u32 = 3;
/// The colour of the legend's line-style entry.
const KEY_COLOR: RGBColor = RGBColor(90, 90, 90);

/// The persistence figure of every split with a persistent case followed.
pub fn persistence(inputs: &Inputs) -> Vec<Planned> {
    edit_runs(inputs)
        .iter()
        .filter_map(|(split, runs)| {
            let chosen: Vec<(usize, &EditRun, Chosen<'_>)> = runs
                .iter()
                .enumerate()
                .filter_map(|(i, run)| chosen(run).map(|c| (i, *run, c)))
                .collect();
            (!chosen.is_empty()).then(|| Planned {
                id: format!("figure_beyond_edit_{}", file_safe(split)),
                figure: figure(split, &chosen),
            })
        })
        .collect()
}

/// One model's rows drawn: the strongest probe edit, random at its layer and α, unedited.
struct Chosen<'a> {
    probe: &'a EditRow,
    random: Option<&'a EditRow>,
    none: Option<&'a EditRow>,
}

/// The rows drawn for `run`, when it has a followed probe edit with a flip among held cases.
fn chosen(run: &EditRun) -> Option<Chosen<'_>> {
    let persistent = || {
        run.summary
            .rows
            .iter()
            .filter(|r| r.variant == VARIANT_PERSISTENT)
    };
    let mut probe: Option<&EditRow> = None;
    for row in persistent().filter(|r| [VECTOR_PROBE, VECTOR_PROBE_DIFF].contains(&&*r.vector)) {
        let Some(flip) = row.flip_held.filter(|f| f.is_finite()) else {
            continue;
        };
        let better = match probe {
            None => true,
            Some(p) => {
                let best = p.flip_held.unwrap_or(f64::NEG_INFINITY);
                flip > best || (flip == best && row.alpha < p.alpha)
            }
        };
        if better && !row.persist_flip_held.is_empty() {
            probe = Some(row);
        }
    }
    let probe = probe?;
    Some(Chosen {
        probe,
        random: persistent().find(|r| {
            r.vector == VECTOR_RANDOM && r.layer == probe.layer && r.alpha == probe.alpha
        }),
        none: persistent().find(|r| r.vector == VECTOR_NONE && r.layer == probe.layer),
    })
}

/// `at_t` then `later` as percentages at k = 0, 1, …; NaN where undefined.
fn points(at_t: Option<f64>, later: &[Option<f64>]) -> Vec<(f64, f64)> {
    std::iter::once(at_t)
        .chain(later.iter().copied())
        .enumerate()
        .map(|(k, v)| {
            (
                k as f64,
                v.filter(|v| v.is_finite()).map_or(f64::NAN, |v| v * 100.0),
            )
        })
        .collect()
}

/// The curves of panel (a) or (b): per model, (legend index, solid points, dashed points).
type Curves = Vec<(usize, Vec<(f64, f64)>, Vec<(f64, f64)>)>;

fn panel(caption: &str, y_title: &str, curves: &Curves) -> Panel {
    let all = || curves.iter().flat_map(|(_, a, b)| a.iter().chain(b));
    let mut x = Axis::from_zero(
        "Plies after the edited step (k)",
        all().map(|p| p.0),
        short_number,
    );
    // k counts plies: no tick between two.
    x.ticks.retain(|(t, _)| t.fract() == 0.0);
    let y = Axis::percent(y_title, all().map(|p| p.1).chain([0.0]));
    let mut panel = Panel::new(caption, x, y);
    for (model, solid, dashed) in curves {
        let (color, shape) = model_style(*model);
        for (points, is_dashed) in [(solid, false), (dashed, true)] {
            if points.iter().all(|p| p.1.is_nan()) {
                continue;
            }
            panel.lines.push(Line {
                points: points.clone(),
                color,
                dashed: is_dashed,
            });
        }
        panel.marks.extend(
            solid
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|&(x, y)| Mark {
                    x,
                    y,
                    shape,
                    filled: true,
                    color,
                    radius: RADIUS,
                }),
        );
    }
    panel
}

fn figure(split: &str, chosen: &[(usize, &EditRun, Chosen<'_>)]) -> Figure {
    let flips: Curves = chosen
        .iter()
        .map(|(i, _, c)| {
            let random = c
                .random
                .map_or_else(Vec::new, |r| points(r.flip_held, &r.persist_flip_held));
            let probe = points(c.probe.flip_held, &c.probe.persist_flip_held);
            (*i, probe, random)
        })
        .collect();
    let exact: Curves = chosen
        .iter()
        .map(|(i, _, c)| {
            let none = c
                .none
                .map_or_else(Vec::new, |r| points(None, &r.persist_exact));
            let probe = points(c.probe.target_exact, &c.probe.persist_exact);
            (*i, probe, none)
        })
        .collect();
    let mut legend: Vec<LegendEntry> = chosen
        .iter()
        .map(|(i, run, c)| {
            let (color, shape) = model_style(*i);
            LegendEntry {
                symbol: Symbol::LineMark(shape),
                color,
                label: format!(
                    "{}: {}, {}, α {}",
                    cell_name(run.family, run.size),
                    c.probe.vector,
                    c.probe.layer_name,
                    c.probe.alpha
                ),
            }
        })
        .collect();
    legend.push(LegendEntry {
        symbol: Symbol::Line(true),
        color: KEY_COLOR,
        label: "dashed: (a) random edit, same layer and α; (b) unedited model".to_owned(),
    });
    Figure {
        heading: format!("Beyond the paper: does an edited board stay edited? ({split})"),
        caption: format!(
            "State editing on {split}, persistent cases: a piece that stays put over the next \
             plies is removed by adding a probe direction to the hidden state at step t only \
             (k = 0); per model the probe edit (probe or probe_diff, any layer and α) with \
             the most flips among the cases the unedited model had right, ties to the smaller \
             α, named in the legend by its vector, layer and α. (a) Share of those cases \
             still predicting the square empty k plies later, beside a random edit of the \
             same norm; (b) share predicting the engine's counterfactual state exactly, beside \
             the unedited model's agreement with the real game. Undefined values break a \
             line."
        ),
        legend,
        rows: vec![vec![
            panel("(a) s predicted empty, held cases", "Empty (%)", &flips),
            panel(
                "(b) prediction equals the counterfactual state",
                "Exact (%)",
                &exact,
            ),
        ]],
        row_height: ROW_HEIGHT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strongest_probe_edit_is_drawn_beside_random_and_unedited() {
        let inputs = crate::tables::edit_test_inputs();
        let planned = persistence(&inputs);
        assert_eq!(planned.len(), 1);
        assert_eq!(planned[0].id, "figure_beyond_edit_test_real");
        let figure = &planned[0].figure;
        // Two models and the line-style key.
        assert_eq!(figure.legend.len(), 3);
        assert!(
            figure.legend[0].label.ends_with("probe, embedding, α 8"),
            "{}",
            figure.legend[0].label
        );
        let (a, b) = (&figure.rows[0][0], &figure.rows[0][1]);
        // Per model: probe solid, random dashed in (a); probe solid, unedited dashed in (b).
        assert_eq!(a.lines.len(), 4);
        assert_eq!(
            a.lines.iter().filter(|l| l.dashed).count(),
            2,
            "{:?}",
            a.lines
        );
        // The probe at α = 8 flips 100% at k = 0, half at k = 1, 2.
        assert_eq!(
            a.lines[0].points,
            vec![(0.0, 100.0), (1.0, 50.0), (2.0, 50.0)]
        );
        let ticks: Vec<f64> = a.x.ticks.iter().map(|t| t.0).collect();
        assert_eq!(ticks, [0.0, 1.0, 2.0], "whole plies only");
        assert_eq!(b.lines.len(), 4);
        assert!(
            b.lines[1].points[0].1.is_nan(),
            "the unedited line starts at k = 1"
        );
    }

    #[test]
    fn the_figure_renders() {
        let planned = persistence(&crate::tables::edit_test_inputs());
        let dir = std::env::temp_dir().join(format!("cwm-report-edit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        crate::figures::render(&planned[0].figure, &dir, &planned[0].id).unwrap();
        let svg = std::fs::read_to_string(dir.join(format!("{}.svg", planned[0].id))).unwrap();
        assert!(svg.contains("<svg") && !svg.contains("NaN\""), "{svg}");
        let png = std::fs::read(dir.join(format!("{}.png", planned[0].id))).unwrap();
        assert!(png.starts_with(b"\x89PNG") && png.len() > 1000);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn odd_rows_draw_no_nan_and_do_not_panic() {
        let mut inputs = crate::tables::edit_test_inputs();
        for row in &mut inputs.edits[0].summary.rows {
            row.alpha = f64::NAN;
            row.persist_exact.clear();
            row.flip_held = row.flip_held.map(|_| f64::NAN);
        }
        let planned = persistence(&inputs);
        // The first model (SLiCE here, second in order) has nothing to draw; the other stays.
        assert_eq!(planned[0].figure.legend.len(), 2);
    }

    #[test]
    fn no_followed_case_no_figure() {
        let mut inputs = crate::tables::edit_test_inputs();
        for run in &mut inputs.edits {
            run.summary.rows.retain(|r| r.variant != VARIANT_PERSISTENT);
        }
        assert!(persistence(&inputs).is_empty());
    }
}
