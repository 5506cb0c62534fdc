//! The paper's tables, built from the [`Inputs`]. A table whose inputs are absent is not built.

use std::collections::{BTreeMap, BTreeSet};

/// A split label usable in a file name: every character but ASCII letters, digits, `-` and
/// `_` becomes `_`.
pub use cwm_formats::fs::file_safe;
use cwm_formats::select::ChosenHparams;
use cwm_models::{Family, Size};

use crate::error::ReportError;
use crate::format;
use crate::inputs::{BinResult, EvalResult, Inputs, Origin, TrainRun, ValMetrics};
use crate::table::{Cell, Column, Source, Table};

/// The paper's name of a family (the CSV cell keeps the canonical name).
pub fn family_label(family: Family) -> &'static str {
    match family {
        Family::Transformer => "Transformer",
        Family::Slice => "SLiCE",
        Family::SliceDiag => "Diagonal SLiCE",
        Family::Gdn => "Gated DeltaNet",
        Family::GdnPos => "Gated DeltaNet (positive eig.)",
        Family::Mamba3 => "Mamba-3",
        Family::Mamba2 => "Mamba-2",
    }
}

/// The expressive model and its less expressive ablation (Tables 9–10, Figure 4).
pub const ABLATIONS: [(Family, Family); 3] = [
    (Family::Slice, Family::SliceDiag),
    (Family::Gdn, Family::GdnPos),
    (Family::Mamba3, Family::Mamba2),
];

pub(crate) fn family_cell(family: Family) -> Cell {
    Cell::with_raw(family_label(family), family.name())
}

pub(crate) fn size_cell(size: Size) -> Cell {
    Cell::text(size.name())
}

pub(crate) fn params_cell(params: u64) -> Cell {
    Cell::with_raw(format::millions(params), params.to_string())
}

pub(crate) fn loss_cell(loss: f64) -> Cell {
    Cell::with_raw(format::loss(loss), format!("{loss}"))
}

pub(crate) fn pct_cell(fraction: f64) -> Cell {
    Cell::with_raw(format::percent(fraction), format::percent_raw(fraction))
}

pub(crate) fn sources<'a>(origins: impl IntoIterator<Item = &'a Origin>) -> Vec<Source> {
    let set: BTreeSet<Source> = origins.into_iter().map(Origin::source).collect();
    set.into_iter().collect()
}

/// Split labels in report order: real-data splits, then random-uniform ones, then the rest,
/// alphabetically within each group.
pub fn split_order(splits: impl IntoIterator<Item = String>) -> Vec<String> {
    let set: BTreeSet<String> = splits.into_iter().collect();
    let mut list: Vec<String> = set.into_iter().collect();
    list.sort_by_key(|s| {
        let rank = if s.contains("real") {
            0
        } else if s.contains("random") {
            1
        } else {
            2
        };
        (rank, s.clone())
    });
    list
}

/// Parameter counts of every family and size, from the model definitions.
///
/// # Errors
/// [`ReportError::Model`] if a model cannot be built.
pub fn param_counts() -> Result<BTreeMap<(Family, Size), u64>, ReportError> {
    let mut counts = BTreeMap::new();
    for family in Family::ALL {
        for size in Size::ALL {
            let n = cwm_models::params(family, size).map_err(|e| ReportError::Model {
                family: family.name().into(),
                size: size.name().into(),
                message: e.to_string(),
            })?;
            counts.insert((family, size), n as u64);
        }
    }
    Ok(counts)
}

/// Table 4: parameter counts per family × size (no artifact needed).
pub fn table4(counts: &BTreeMap<(Family, Size), u64>) -> Table {
    let mut columns = vec![Column::left("Model")];
    columns.extend(
        Size::ALL
            .iter()
            .map(|s| Column::right(format!("{}/l{}", s.name(), s.n_layers()))),
    );
    let rows = Family::ALL
        .iter()
        .map(|&family| {
            let mut row = vec![family_cell(family)];
            row.extend(
                Size::ALL
                    .iter()
                    .map(|&size| match counts.get(&(family, size)) {
                        Some(&n) => params_cell(n),
                        None => Cell::missing(),
                    }),
            );
            row
        })
        .collect();
    Table {
        id: "table4_params".into(),
        label: "Table 4".into(),
        title: "Parameter counts per family and size (millions)".into(),
        columns,
        rows,
        notes: vec![
            "Counted on instantiated models; Mamba-3 is SISO as in the released presets. \
             The input embedding (20,482 rows) dominates the small models."
                .into(),
        ],
        sources: Vec::new(),
    }
}

fn hparam_cells(h: &ChosenHparams) -> Vec<Cell> {
    vec![
        Cell::with_raw(format::sci(h.lr), format!("{}", h.lr)),
        Cell::with_raw(format::steps_k(h.warmup_steps), h.warmup_steps.to_string()),
        Cell::with_raw(format::dot_decimal(h.beta2), format!("{}", h.beta2)),
        Cell::with_raw(format::sci(h.weight_decay), format!("{}", h.weight_decay)),
    ]
}

fn val_cells(v: &ValMetrics) -> Vec<Cell> {
    vec![
        loss_cell(v.loss),
        pct_cell(v.exact_state),
        pct_cell(v.labelwise),
        pct_cell(v.trajectory),
    ]
}

/// The run with the lowest validation loss (ties: instance name) per family × size, its
/// validation and the number of runs compared.
fn best_per_cell<'a>(
    runs: impl IntoIterator<Item = &'a TrainRun>,
) -> BTreeMap<(Family, Size), (&'a TrainRun, ValMetrics, usize)> {
    let mut best: BTreeMap<(Family, Size), (&TrainRun, ValMetrics, usize)> = BTreeMap::new();
    for run in runs {
        let Some(&val) = run.val() else { continue };
        let entry = best.entry((run.family, run.size)).or_insert((run, val, 0));
        entry.2 += 1;
        if val.loss < entry.1.loss
            || (val.loss == entry.1.loss && run.origin.instance < entry.0.origin.instance)
        {
            entry.0 = run;
            entry.1 = val;
        }
    }
    best
}

/// Table 5: the best first-stage configuration per family × size (lowest validation loss among
/// `schedule: none|constant` train runs); from `select` choices when no such run is an input.
pub fn table5(inputs: &Inputs) -> Option<Table> {
    let mut columns = vec![
        Column::left("Model"),
        Column::left("Size"),
        Column::right("Params"),
        Column::right("LR"),
        Column::right("Warmup"),
        Column::right("β2"),
        Column::right("WD"),
        Column::right("Val loss"),
        Column::right("ExactState (%)"),
        Column::right("Labelwise (%)"),
        Column::right("Trajectory (%)"),
    ];
    let first: Vec<&TrainRun> = inputs.train.iter().filter(|r| r.is_first_stage()).collect();
    let best = best_per_cell(first.iter().copied());
    if !best.is_empty() {
        columns.push(Column::right("Runs"));
        columns.push(Column::left("Run"));
        let rows = best
            .iter()
            .map(|(&(family, size), (run, val, n))| {
                let mut row = vec![
                    family_cell(family),
                    size_cell(size),
                    params_cell(run.summary.params),
                ];
                row.extend(hparam_cells(&ChosenHparams::from(&run.summary.hparams)));
                row.extend(val_cells(val));
                row.push(Cell::text(n.to_string()));
                row.push(Cell::text(&run.origin.instance));
                row
            })
            .collect();
        return Some(Table {
            id: "table5_first_stage".into(),
            label: "Table 5".into(),
            title: "Best first-stage configuration per model (lowest validation loss)".into(),
            columns,
            rows,
            notes: vec![
                "First stage: train runs with a constant learning rate (schedule none or \
                 constant). Validation metrics are those of the run's best validation \
                 (else its final one). Runs: candidates compared in the cell."
                    .into(),
            ],
            sources: sources(first.iter().map(|r| &r.origin)),
        });
    }
    if inputs.select.is_empty() {
        return None;
    }
    columns.push(Column::left("Run"));
    let mut choices: Vec<_> = inputs.select.iter().collect();
    choices.sort_by(|a, b| {
        (a.family, a.size, &a.choice.instance).cmp(&(b.family, b.size, &b.choice.instance))
    });
    let counts = cwm_counts(choices.iter().map(|c| (c.family, c.size)));
    let rows = choices
        .iter()
        .map(|c| {
            let mut row = vec![family_cell(c.family), size_cell(c.size)];
            row.push(
                counts
                    .get(&(c.family, c.size))
                    .map_or_else(Cell::missing, |&n| params_cell(n)),
            );
            row.extend(hparam_cells(&c.choice.hparams));
            row.extend(val_cells(&c.val));
            row.push(Cell::text(&c.choice.instance));
            row
        })
        .collect();
    Some(Table {
        id: "table5_first_stage".into(),
        label: "Table 5".into(),
        title: "Best first-stage configuration per model (from select)".into(),
        columns,
        rows,
        notes: vec!["The choices of the select artifacts, as they recorded them.".into()],
        sources: sources(inputs.select.iter().map(|c| &c.origin)),
    })
}

/// Parameter counts of the given cells, from the model definitions (for tables whose inputs
/// do not record them); cells that cannot be built are left out.
fn cwm_counts(cells: impl Iterator<Item = (Family, Size)>) -> BTreeMap<(Family, Size), u64> {
    cells
        .filter_map(|(f, s)| cwm_models::params(f, s).ok().map(|n| ((f, s), n as u64)))
        .collect()
}

/// The hyperparameters that define a comparison group of Table 6: all of them except the
/// floor and the ones that do not change training (threads, logging, checkpoint cadence).
fn group_key(run: &TrainRun) -> String {
    const IGNORED: [&str; 4] = ["lr_min_ratio", "threads", "log_every", "checkpoint_every"];
    let mut key = format!("{}/{}", run.family.name(), run.size.name());
    for (name, value) in run.summary.hparams.entries() {
        if !IGNORED.contains(&name.as_str()) {
            key.push_str(&format!(";{name}={value}"));
        }
    }
    key
}

/// Table 6: cosine runs that differ only by the floor `lr_min_ratio`, per family × size.
/// Only groups with at least two floors appear; the lowest loss of each group is marked.
pub fn table6(inputs: &Inputs) -> Option<Table> {
    let mut groups: BTreeMap<(Family, Size, String), Vec<&TrainRun>> = BTreeMap::new();
    for run in inputs
        .train
        .iter()
        .filter(|r| r.is_cosine() && r.val().is_some())
    {
        groups
            .entry((run.family, run.size, group_key(run)))
            .or_default()
            .push(run);
    }
    groups.retain(|_, runs| {
        let floors: BTreeSet<u64> = runs
            .iter()
            .map(|r| r.summary.hparams.schedule.lr_min_ratio.to_bits())
            .collect();
        floors.len() >= 2
    });
    if groups.is_empty() {
        return None;
    }
    let mut rows = Vec::new();
    let mut used = Vec::new();
    for runs in groups.values_mut() {
        runs.sort_by(|a, b| {
            let fa = a.summary.hparams.schedule.lr_min_ratio;
            let fb = b.summary.hparams.schedule.lr_min_ratio;
            fb.total_cmp(&fa)
                .then(a.origin.instance.cmp(&b.origin.instance))
        });
        let best = runs
            .iter()
            .map(|r| r.val().map_or(f64::INFINITY, |v| v.loss))
            .fold(f64::INFINITY, f64::min);
        for run in runs.iter() {
            let Some(val) = run.val() else { continue };
            let floor = run.summary.hparams.schedule.lr_min_ratio;
            let mut row = vec![
                family_cell(run.family),
                size_cell(run.size),
                Cell::with_raw(format::dot_decimal(floor), format!("{floor}")),
            ];
            row.extend(val_cells(val));
            row.push(Cell::text(if val.loss == best { "yes" } else { "" }));
            row.push(Cell::text(&run.origin.instance));
            rows.push(row);
            used.push(&run.origin);
        }
    }
    Some(Table {
        id: "table6_cosine_floor".into(),
        label: "Table 6".into(),
        title: "Cosine floor comparison: runs that differ only by the floor r".into(),
        columns: vec![
            Column::left("Model"),
            Column::left("Size"),
            Column::right("Floor r"),
            Column::right("Val loss"),
            Column::right("ExactState (%)"),
            Column::right("Labelwise (%)"),
            Column::right("Trajectory (%)"),
            Column::left("Best"),
            Column::left("Run"),
        ],
        rows,
        notes: vec![
            "Cosine-schedule train runs grouped by every other hyperparameter; \
             Best marks the lowest validation loss of each group."
                .into(),
        ],
        sources: sources(used),
    })
}

/// Table 7: the final hyperparameters (LR, warm-up, β2, WD, floor) of the second-stage
/// winners: the cosine run with the lowest validation loss per family × size.
pub fn table7(inputs: &Inputs) -> Option<Table> {
    let winners = best_per_cell(inputs.train.iter().filter(|r| r.is_cosine()));
    if winners.is_empty() {
        return None;
    }
    let families: BTreeSet<Family> = winners.keys().map(|(f, _)| *f).collect();
    let mut columns = vec![Column::left("Model")];
    columns.extend(Size::ALL.iter().map(|s| Column::left(s.name())));
    let rows = families
        .iter()
        .map(|&family| {
            let mut row = vec![family_cell(family)];
            for size in Size::ALL {
                row.push(match winners.get(&(family, size)) {
                    Some((run, _, _)) => {
                        let h = &run.summary.hparams;
                        Cell::text(format!(
                            "{}, {}, {}, {}, {}",
                            format::sci(h.optimiser.lr),
                            format::steps_k(h.schedule.warmup_steps),
                            format::dot_decimal(h.optimiser.beta2),
                            format::sci(h.optimiser.weight_decay),
                            format::dot_decimal(h.schedule.lr_min_ratio),
                        ))
                    }
                    None => Cell::missing(),
                });
            }
            row
        })
        .collect();
    Some(Table {
        id: "table7_final_hparams".into(),
        label: "Table 7".into(),
        title: "Final hyperparameters of the second-stage winners (LR, warmup, β2, WD, floor)"
            .into(),
        columns,
        rows,
        notes: vec![
            "Second stage: cosine-schedule train runs; the winner of a cell has the lowest \
             validation loss."
                .into(),
        ],
        sources: sources(winners.values().map(|(r, _, _)| &r.origin)),
    })
}

/// The evaluations indexed by (family, size, split); two for one cell is an error.
///
/// # Errors
/// [`ReportError::Conflict`] naming both instances.
pub fn index_evaluations(
    evals: &[EvalResult],
) -> Result<BTreeMap<(Family, Size, String), &EvalResult>, ReportError> {
    let mut map: BTreeMap<(Family, Size, String), &EvalResult> = BTreeMap::new();
    for e in evals {
        if let Some(prev) = map.insert((e.family, e.size, e.summary.split.clone()), e) {
            return Err(ReportError::Conflict(format!(
                "two evaluate artifacts for {} {} on split `{}`: `{}` and `{}`",
                e.family, e.size, e.summary.split, prev.origin.instance, e.origin.instance
            )));
        }
    }
    Ok(map)
}

/// Table 8: test results per family × size, one column group per split.
///
/// # Errors
/// [`ReportError::Conflict`] when two evaluations claim one cell.
pub fn table8(inputs: &Inputs) -> Result<Option<Table>, ReportError> {
    if inputs.evaluate.is_empty() {
        return Ok(None);
    }
    let index = index_evaluations(&inputs.evaluate)?;
    let splits = split_order(inputs.evaluate.iter().map(|e| e.summary.split.clone()));
    let cells: BTreeSet<(Family, Size)> = index.keys().map(|(f, s, _)| (*f, *s)).collect();
    let mut columns = vec![
        Column::left("Model"),
        Column::left("Size"),
        Column::right("Params"),
    ];
    for split in &splits {
        for header in ["Loss", "ExactState (%)", "Labelwise (%)", "Trajectory (%)"] {
            columns.push(Column::right(header).in_group(split));
        }
    }
    let rows = cells
        .iter()
        .map(|&(family, size)| {
            let params = splits
                .iter()
                .find_map(|s| index.get(&(family, size, s.clone())))
                .map(|e| e.summary.params)
                .unwrap_or(0);
            let mut row = vec![family_cell(family), size_cell(size), params_cell(params)];
            for split in &splits {
                match index.get(&(family, size, split.clone())) {
                    Some(e) => row.extend([
                        loss_cell(e.summary.loss),
                        pct_cell(e.summary.exact_state),
                        pct_cell(e.summary.labelwise),
                        pct_cell(e.summary.trajectory),
                    ]),
                    None => row.extend(std::iter::repeat_n(Cell::missing(), 4)),
                }
            }
            row
        })
        .collect();
    Ok(Some(Table {
        id: "table8_test".into(),
        label: "Table 8".into(),
        title: "Test results per model on each split".into(),
        columns,
        rows,
        notes: vec![
            "ExactState and Labelwise are micro-averaged over all valid steps (the start \
             position included); Trajectory is the share of games tracked exactly throughout."
                .into(),
        ],
        sources: sources(inputs.evaluate.iter().map(|e| &e.origin)),
    }))
}

/// Tables 9–10: each expressive model against its ablation, one table per split (numbered 9,
/// 10, then 10.1, 10.2, ... for further splits).
///
/// # Errors
/// [`ReportError::Conflict`] when two evaluations claim one cell.
pub fn ablation_tables(inputs: &Inputs) -> Result<Vec<Table>, ReportError> {
    let index = index_evaluations(&inputs.evaluate)?;
    let splits = split_order(inputs.evaluate.iter().map(|e| e.summary.split.clone()));
    let mut tables = Vec::new();
    for split in &splits {
        let mut rows = Vec::new();
        let mut used = Vec::new();
        for (full, ablated) in ABLATIONS {
            for size in Size::ALL {
                let (Some(f), Some(a)) = (
                    index.get(&(full, size, split.clone())),
                    index.get(&(ablated, size, split.clone())),
                ) else {
                    continue;
                };
                let (model, ablation) = (&f.summary, &a.summary);
                let delta = (model.exact_state - ablation.exact_state) * 100.0;
                rows.push(vec![
                    family_cell(full),
                    family_cell(ablated),
                    size_cell(size),
                    pct_cell(model.exact_state),
                    pct_cell(ablation.exact_state),
                    Cell::with_raw(format!("{delta:+.2}"), format!("{delta}")),
                    loss_cell(model.loss),
                    loss_cell(ablation.loss),
                ]);
                used.push(&f.origin);
                used.push(&a.origin);
            }
        }
        if rows.is_empty() {
            continue;
        }
        let label = numbered(9, 10, tables.len());
        tables.push(Table {
            id: format!("table{}_ablations_{}", label_id(&label), file_safe(split)),
            label,
            title: format!("Ablations on {split}: expressive model against its ablation"),
            columns: vec![
                Column::left("Model"),
                Column::left("Ablation"),
                Column::left("Size"),
                Column::right("ExactState (%)").in_group("model"),
                Column::right("ExactState (%)").in_group("ablation"),
                Column::right("Δ (pp)"),
                Column::right("Loss").in_group("model"),
                Column::right("Loss").in_group("ablation"),
            ],
            rows,
            notes: vec![
                "Δ: ExactState of the model minus that of its ablation, in percentage points."
                    .into(),
            ],
            sources: sources(used),
        });
    }
    Ok(tables)
}

/// `Table 9`, `Table 10`, then `Table 10.1`, ... for a third and later table of a pair.
fn numbered(first: u32, second: u32, index: usize) -> String {
    match index {
        0 => format!("Table {first}"),
        1 => format!("Table {second}"),
        n => format!("Table {second}.{}", n - 1),
    }
}

fn label_id(label: &str) -> String {
    label.trim_start_matches("Table ").replace('.', "_")
}

/// Tables 11–12: ExactState per prefix bin, one table per split (and bin width).
///
/// # Errors
/// [`ReportError::Conflict`] when two bin_prefix artifacts claim one row.
pub fn bin_tables(inputs: &Inputs) -> Result<Vec<Table>, ReportError> {
    let splits = split_order(inputs.bins.iter().map(|b| b.summary.split.clone()));
    let mut tables = Vec::new();
    for split in &splits {
        let widths: BTreeSet<u32> = inputs
            .bins
            .iter()
            .filter(|b| &b.summary.split == split)
            .map(|b| b.summary.bin)
            .collect();
        for &width in &widths {
            let mut by_model: BTreeMap<(Family, Size), &BinResult> = BTreeMap::new();
            for b in inputs
                .bins
                .iter()
                .filter(|b| &b.summary.split == split && b.summary.bin == width)
            {
                if let Some(prev) = by_model.insert((b.family, b.size), b) {
                    return Err(ReportError::Conflict(format!(
                        "two bin_prefix artifacts for {} {} on split `{split}` with bin {width}: \
                         `{}` and `{}`",
                        b.family, b.size, prev.origin.instance, b.origin.instance
                    )));
                }
            }
            let ranges: BTreeSet<(u32, u32)> = by_model
                .values()
                .flat_map(|b| b.summary.bins.iter().map(|bin| (bin.start, bin.end)))
                .collect();
            let mut columns = vec![Column::left("Model"), Column::left("Size")];
            columns.extend(
                ranges
                    .iter()
                    .map(|(s, e)| Column::right(format!("[{s},{e})"))),
            );
            let rows = by_model
                .iter()
                .map(|(&(family, size), b)| {
                    let mut row = vec![family_cell(family), size_cell(size)];
                    for range in &ranges {
                        row.push(
                            b.summary
                                .bins
                                .iter()
                                .find(|bin| (bin.start, bin.end) == *range && bin.steps > 0)
                                .map_or_else(Cell::missing, |bin| pct_cell(bin.exact_state)),
                        );
                    }
                    row
                })
                .collect();
            let label = numbered(11, 12, tables.len());
            let suffix = if widths.len() > 1 {
                format!("_bin{width}")
            } else {
                String::new()
            };
            tables.push(Table {
                id: format!(
                    "table{}_bins_{}{suffix}",
                    label_id(&label),
                    file_safe(split)
                ),
                label,
                title: format!("ExactState (%) per prefix bin of {width} steps on {split}"),
                columns,
                rows,
                notes: vec![
                    "Bin [a,b) holds token positions a..b-1; position 0 is the start position. \
                     – marks a bin with no steps."
                        .into(),
                ],
                sources: sources(by_model.values().map(|b| &b.origin)),
            });
        }
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_order_puts_real_before_random() {
        let order = split_order(["val", "test_random", "test_real"].map(String::from));
        assert_eq!(order, ["test_real", "test_random", "val"]);
    }

    #[test]
    fn numbering_of_extra_tables() {
        assert_eq!(numbered(9, 10, 0), "Table 9");
        assert_eq!(numbered(9, 10, 1), "Table 10");
        assert_eq!(numbered(9, 10, 2), "Table 10.1");
        assert_eq!(label_id("Table 10.1"), "10_1");
        assert_eq!(file_safe("test/real x"), "test_real_x");
    }
}
