//! The ranking agreement of the first stage (paper App. C): in each family × size cell, is the
//! run with the lowest validation loss also the run with the highest validation ExactState,
//! and the one with the highest Labelwise accuracy? The paper found 5 and 9 of its 16 cells.

use std::collections::BTreeMap;

use cwm_models::{Family, Size};

use crate::inputs::{Inputs, TrainRun, ValMetrics};
use crate::table::{Cell, Column, Table};
use crate::tables::{family_cell, size_cell, sources};

/// The paper's counts: cells whose validation-loss winner is the ExactState winner, the
/// Labelwise winner, and the cells compared.
pub const PAPER_AGREEMENT: (u32, u32, u32) = (5, 9, 16);

/// One cell's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellAgreement {
    /// Runs compared.
    pub runs: usize,
    /// The validation-loss winner has the highest ExactState (a tie for it counts).
    pub exact_state: bool,
    /// The validation-loss winner has the highest Labelwise accuracy (a tie counts).
    pub labelwise: bool,
}

/// The verdict over one cell's runs' validation metrics; `None` for no runs. The loss winner
/// is the lowest loss, ties going to the first run (the caller orders runs by instance).
pub fn agreement(vals: &[ValMetrics]) -> Option<CellAgreement> {
    let winner = vals
        .iter()
        .reduce(|best, v| if v.loss < best.loss { v } else { best })?;
    let best_of = |f: fn(&ValMetrics) -> f64| vals.iter().map(f).fold(f64::NEG_INFINITY, f64::max);
    Some(CellAgreement {
        runs: vals.len(),
        exact_state: winner.exact_state >= best_of(|v| v.exact_state),
        labelwise: winner.labelwise >= best_of(|v| v.labelwise),
    })
}

fn first_stage_cells(inputs: &Inputs) -> BTreeMap<(Family, Size), Vec<&TrainRun>> {
    let mut cells: BTreeMap<(Family, Size), Vec<&TrainRun>> = BTreeMap::new();
    for run in inputs
        .train
        .iter()
        .filter(|r| r.is_first_stage() && r.val().is_some())
    {
        cells.entry((run.family, run.size)).or_default().push(run);
    }
    for runs in cells.values_mut() {
        runs.sort_by(|a, b| a.origin.instance.cmp(&b.origin.instance));
    }
    cells
}

fn yes_no(value: bool) -> Cell {
    Cell::text(if value { "yes" } else { "no" })
}

/// The ranking-agreement table over the first-stage train runs, one row per family × size
/// (paper order) and a total row beside the paper's counts; `None` without such runs.
pub fn ranking_table(inputs: &Inputs, order: impl Fn(Family) -> usize) -> Option<Table> {
    let cells = first_stage_cells(inputs);
    let mut keyed: Vec<((Family, Size), CellAgreement, Vec<&TrainRun>)> = cells
        .into_iter()
        .filter_map(|(key, runs)| {
            let vals: Vec<ValMetrics> = runs.iter().filter_map(|r| r.val().copied()).collect();
            agreement(&vals).map(|a| (key, a, runs))
        })
        .collect();
    if keyed.is_empty() {
        return None;
    }
    keyed.sort_by_key(|((f, s), _, _)| (order(*f), *s));
    let mut rows = Vec::new();
    let (mut es, mut lw) = (0, 0);
    for ((family, size), a, _) in &keyed {
        es += u32::from(a.exact_state);
        lw += u32::from(a.labelwise);
        rows.push(vec![
            family_cell(*family),
            size_cell(*size),
            Cell::text(a.runs.to_string()),
            yes_no(a.exact_state),
            yes_no(a.labelwise),
        ]);
    }
    let n = keyed.len();
    let (paper_es, paper_lw, paper_n) = PAPER_AGREEMENT;
    rows.push(vec![
        Cell::text("All cells"),
        Cell::text(""),
        Cell::text(
            keyed
                .iter()
                .map(|(_, a, _)| a.runs)
                .sum::<usize>()
                .to_string(),
        ),
        Cell::with_raw(format!("{es} of {n}"), es.to_string()),
        Cell::with_raw(format!("{lw} of {n}"), lw.to_string()),
    ]);
    rows.push(vec![
        Cell::text("Paper"),
        Cell::text(""),
        Cell::text("1,728"),
        Cell::with_raw(format!("{paper_es} of {paper_n}"), paper_es.to_string()),
        Cell::with_raw(format!("{paper_lw} of {paper_n}"), paper_lw.to_string()),
    ]);
    Some(Table {
        id: "ranking_agreement".into(),
        label: "Ranking agreement".into(),
        title: "Does the first-stage validation-loss winner also win on ExactState and on \
                Labelwise accuracy?"
            .into(),
        columns: vec![
            Column::left("Model"),
            Column::left("Size"),
            Column::right("Runs"),
            Column::left("Also the ExactState winner"),
            Column::left("Also the Labelwise winner"),
        ],
        rows,
        notes: vec![
            "First-stage runs (a constant learning rate after warm-up), compared within each \
             family × size on the validation the report ranks by (the best validation, else \
             the last). A tie for the highest ExactState or Labelwise counts as agreement."
                .into(),
        ],
        sources: sources(
            keyed
                .iter()
                .flat_map(|(_, _, runs)| runs.iter().map(|r| &r.origin)),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(loss: f64, exact_state: f64, labelwise: f64) -> ValMetrics {
        ValMetrics {
            step: 0,
            loss,
            labelwise,
            exact_state,
            trajectory: 0.0,
        }
    }

    #[test]
    fn the_loss_winner_is_compared_with_each_metric_winner() {
        let a = agreement(&[val(0.2, 0.5, 0.9), val(0.1, 0.4, 0.95), val(0.3, 0.6, 0.8)]);
        assert_eq!(
            a,
            Some(CellAgreement {
                runs: 3,
                exact_state: false,
                labelwise: true
            })
        );
        // A tie for the best ExactState counts as agreement.
        let a = agreement(&[val(0.1, 0.6, 0.9), val(0.2, 0.6, 0.95)]).unwrap();
        assert!(a.exact_state && !a.labelwise);
        assert_eq!(agreement(&[]), None);
    }
}
