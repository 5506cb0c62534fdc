//! Tables 4–7: parameter counts, the first-stage winners, the cosine-floor comparison and the
//! final hyperparameters; and the second-stage choice of each family × size that Tables 6–12
//! follow.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use cwm_formats::select::ChosenHparams;
use cwm_models::{Family, Size};

use super::draft::{Draft, Entry, Num, missing};
use super::{
    PAPER_ORDER, VARIANTS, cell_name, family_cell, paper_rank, size_cell, size_label, sources,
};
use crate::inputs::{Inputs, SelectChoice, TrainRun, ValMetrics};
use crate::published::Paper;
use crate::table::{Column, Table};

/// Losses ordered with NaN last (a diverged run never wins).
fn loss_order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.total_cmp(&b),
        (x, y) => x.cmp(&y),
    }
}

/// Whether `run` ranks above `than`: lower validation loss, ties to the instance name.
fn ranks_above(run: &TrainRun, val: &ValMetrics, than: &TrainRun, than_val: &ValMetrics) -> bool {
    loss_order(val.loss, than_val.loss)
        .then_with(|| run.origin.instance.cmp(&than.origin.instance))
        .is_lt()
}

/// Cells in the paper's row order.
fn paper_sorted<T>(map: BTreeMap<(Family, Size), T>) -> Vec<((Family, Size), T)> {
    let mut cells: Vec<_> = map.into_iter().collect();
    cells.sort_by_key(|((f, s), _)| (paper_rank(*f), *s));
    cells
}

/// Table 4: parameter counts, one row per family, one column per size (no artifact needed).
pub(super) fn table4(counts: &BTreeMap<(Family, Size), u64>, paper: &Paper) -> Vec<Table> {
    let mut columns = vec![Column::left("Model")];
    columns.extend(Size::ALL.iter().map(|&s| Column::right(size_label(s))));
    let mut draft = Draft::new(
        "table4_params",
        "Table 4",
        "Parameters of every model, in millions",
        columns,
        1,
        paper.table(4),
    );
    for family in PAPER_ORDER {
        let mut row: Vec<Entry> = vec![family_cell(family).into()];
        row.extend(Size::ALL.iter().map(|&size| {
            counts
                .get(&(family, size))
                .map_or_else(missing, |&n| Num::Millions(n).into())
        }));
        draft.push(family, None, row);
    }
    draft.note(
        "Counted on instantiated models: every trainable parameter, the move embedding \
         (20,482 rows) and the 75 output heads included. Mamba-3 is SISO as in the released \
         presets.",
    );
    draft.finish(Vec::new())
}

/// The run with the lowest validation loss per family × size, its validation and the number
/// of runs compared.
fn best_per_cell<'a>(
    runs: impl IntoIterator<Item = &'a TrainRun>,
) -> BTreeMap<(Family, Size), (&'a TrainRun, ValMetrics, usize)> {
    let mut best: BTreeMap<(Family, Size), (&TrainRun, ValMetrics, usize)> = BTreeMap::new();
    for run in runs {
        let Some(&val) = run.val() else { continue };
        let entry = best.entry((run.family, run.size)).or_insert((run, val, 0));
        entry.2 += 1;
        if ranks_above(run, &val, entry.0, &entry.1) {
            entry.0 = run;
            entry.1 = val;
        }
    }
    best
}

const TABLE5_COLUMNS: [&str; 10] = [
    "Model",
    "Size",
    "Val. loss",
    "ExactState (%)",
    "Labelwise (%)",
    "Trajectory (%)",
    "LR",
    "Warmup",
    "β2",
    "Weight decay",
];

fn table5_row(family: Family, size: Size, val: &ValMetrics, h: &ChosenHparams) -> Vec<Entry> {
    vec![
        family_cell(family).into(),
        size_cell(size).into(),
        Num::Loss(val.loss).into(),
        Num::Percent(val.exact_state, 2).into(),
        Num::Percent(val.labelwise, 2).into(),
        Num::Percent(val.trajectory, 2).into(),
        Num::Decimal(h.lr).into(),
        Num::Steps(h.warmup_steps).into(),
        Num::Decimal(h.beta2).into(),
        Num::Decimal(h.weight_decay).into(),
    ]
}

fn table5_draft(paper: &Paper) -> Draft<'_> {
    let columns = TABLE5_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, &h)| {
            if i < 2 {
                Column::left(h)
            } else {
                Column::right(h)
            }
        })
        .collect();
    Draft::new(
        "table5_first_stage",
        "Table 5",
        "First stage: the configuration with the lowest validation loss per model and size",
        columns,
        2,
        paper.table(5),
    )
}

/// Table 5: the first-stage run with the lowest validation loss per family × size, among
/// the train runs with a constant learning rate; from the choices of `select` artifacts
/// over such runs when no such run is an input.
pub(super) fn table5(inputs: &Inputs, paper: &Paper) -> Result<Vec<Table>, String> {
    let first: Vec<&TrainRun> = inputs.train.iter().filter(|r| r.is_first_stage()).collect();
    let best = best_per_cell(first.iter().copied());
    if best.is_empty() {
        return table5_from_select(inputs, paper);
    }
    let mut draft = table5_draft(paper);
    draft.note(
        "Each row is the run with the lowest validation loss (its best validation, else its \
         final one) among the train runs of that model and size with a constant learning \
         rate (schedule none or constant).",
    );
    for ((family, size), (run, val, n)) in paper_sorted(best) {
        let hparams = ChosenHparams::from(&run.summary.hparams);
        draft.push(family, Some(size), table5_row(family, size, &val, &hparams));
        draft.note(format!(
            "{}: `{}`, the lowest of {n} run{}.",
            cell_name(family, size),
            run.origin.instance,
            if n == 1 { "" } else { "s" }
        ));
    }
    let hashes: BTreeSet<&str> = first.iter().map(|r| r.origin.hash.as_str()).collect();
    for c in inputs.select.iter().filter(|c| c.choice.rank > 1) {
        if hashes.contains(c.choice.train_hash.as_str()) {
            draft.note(format!(
                "{}: `{}` carried its run ranked {} (`{}`) to the second stage instead of \
                 this one (see Table 7).",
                cell_name(c.family, c.size),
                c.origin.instance,
                c.choice.rank,
                c.choice.instance
            ));
        }
    }
    Ok(draft.finish(sources(first.iter().map(|r| &r.origin))))
}

/// Table 5 from the first `select` choice per family × size that is not over a cosine run.
fn table5_from_select(inputs: &Inputs, paper: &Paper) -> Result<Vec<Table>, String> {
    let cosine: BTreeSet<&str> = inputs
        .train
        .iter()
        .filter(|r| r.is_cosine())
        .map(|r| r.origin.hash.as_str())
        .collect();
    let mut chosen: BTreeMap<(Family, Size), &SelectChoice> = BTreeMap::new();
    let mut passed = Vec::new();
    for c in &inputs.select {
        if cosine.contains(c.choice.train_hash.as_str()) {
            continue;
        }
        if let Some(first) = chosen.get(&(c.family, c.size)) {
            passed.push(format!(
                "{}: the choice of `{}` is shown; `{}` chose `{}`.",
                cell_name(c.family, c.size),
                first.origin.instance,
                c.origin.instance,
                c.choice.instance
            ));
        } else {
            chosen.insert((c.family, c.size), c);
        }
    }
    if chosen.is_empty() {
        return Err(
            "no first-stage train run (schedule none or constant) and no select \
                    artifact over such runs among the inputs"
                .to_owned(),
        );
    }
    let mut draft = table5_draft(paper);
    draft.note(
        "No first-stage train run is among the inputs: each row is the choice a select \
         artifact recorded, with the validation it was chosen by.",
    );
    let used: Vec<_> = chosen.values().map(|c| &c.origin).collect();
    for ((family, size), c) in paper_sorted(chosen) {
        draft.push(
            family,
            Some(size),
            table5_row(family, size, &c.val, &c.choice.hparams),
        );
        let rank = if c.choice.rank > 1 {
            format!(" (its run ranked {}, not the best)", c.choice.rank)
        } else {
            String::new()
        };
        draft.note(format!(
            "{}: `{}` chose `{}`{rank}.",
            cell_name(family, size),
            c.origin.instance,
            c.choice.instance
        ));
    }
    for note in passed {
        draft.note(note);
    }
    Ok(draft.finish(sources(used)))
}

/// How the second-stage run of a family × size was chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChosenBy<'a> {
    /// A `select` artifact chose it.
    Select(&'a SelectChoice),
    /// No selection covers the cell: the lower validation loss.
    LowerLoss,
}

/// The second-stage (cosine) run of a family × size that the tables follow, and the run it
/// was compared with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloorChoice<'a> {
    /// The chosen run.
    pub chosen: &'a TrainRun,
    /// The best of the runs that differ from it only by the floor (`None`: no such run).
    pub other: Option<&'a TrainRun>,
    /// How many runs differ from it only by the floor.
    pub others: usize,
    /// How it was chosen.
    pub by: ChosenBy<'a>,
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

/// The second-stage choice of every family × size with a cosine run: the run a `select`
/// artifact chose (the first such artifact by instance name), else the run with the lowest
/// validation loss.
pub fn floor_choices(inputs: &Inputs) -> BTreeMap<(Family, Size), FloorChoice<'_>> {
    let cosine: Vec<&TrainRun> = inputs.train.iter().filter(|r| r.is_cosine()).collect();
    let mut chosen: BTreeMap<(Family, Size), (&TrainRun, ChosenBy<'_>)> = BTreeMap::new();
    for c in &inputs.select {
        if let Some(run) = cosine.iter().find(|r| r.origin.hash == c.choice.train_hash) {
            chosen
                .entry((run.family, run.size))
                .or_insert((run, ChosenBy::Select(c)));
        }
    }
    for (cell, (run, _, _)) in best_per_cell(cosine.iter().copied()) {
        chosen.entry(cell).or_insert((run, ChosenBy::LowerLoss));
    }
    chosen
        .into_iter()
        .map(|(cell, (run, by))| {
            let key = group_key(run);
            let others: Vec<&TrainRun> = cosine
                .iter()
                .copied()
                .filter(|r| r.origin.hash != run.origin.hash && group_key(r) == key)
                .collect();
            let other = best_per_cell(others.iter().copied())
                .into_values()
                .next()
                .map(|(r, _, _)| r);
            let choice = FloorChoice {
                chosen: run,
                other,
                others: others.len(),
                by,
            };
            (cell, choice)
        })
        .collect()
}

/// The paper's best-floor rule for the test tables: drops the evaluations of second-stage
/// (cosine) runs that are not their cell's choice ([`floor_choices`]: a `select` artifact's,
/// else the lower validation loss), and their prefix bins. The train runs stay (Table 6
/// shows both floors). Returns one note per evaluation dropped, naming the chosen run.
pub fn keep_chosen_floor_evaluations(inputs: &mut Inputs) -> Vec<String> {
    let choices = floor_choices(inputs);
    let cosine: BTreeMap<&str, (Family, Size)> = inputs
        .train
        .iter()
        .filter(|r| r.is_cosine())
        .map(|r| (r.origin.hash.as_str(), (r.family, r.size)))
        .collect();
    let mut drop = BTreeMap::new();
    for e in &inputs.evaluate {
        let Some(model) = e.summary.model_hash.as_deref() else {
            continue;
        };
        let Some(choice) = cosine.get(model).and_then(|cell| choices.get(cell)) else {
            continue;
        };
        if choice.chosen.origin.hash != model {
            let how = match choice.by {
                ChosenBy::Select(s) => format!("chosen by {}", s.origin.instance),
                ChosenBy::LowerLoss => "the lower validation loss".to_owned(),
            };
            let note = format!(
                "{} is left out of the test tables: the run of {} is {} ({how})",
                e.origin.instance,
                cell_name(choice.chosen.family, choice.chosen.size),
                choice.chosen.origin.instance
            );
            drop.insert(e.origin.hash.clone(), note);
        }
    }
    inputs
        .evaluate
        .retain(|e| !drop.contains_key(&e.origin.hash));
    inputs.bins.retain(|b| {
        b.summary
            .evaluate_hash
            .as_ref()
            .is_none_or(|h| !drop.contains_key(h))
    });
    drop.into_values().collect()
}

/// The note on how Tables 6 and 7 chose their rows.
fn choice_note(choices: &[((Family, Size), FloorChoice<'_>)]) -> String {
    let mut selected: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut lower = Vec::new();
    for ((family, size), c) in choices {
        match c.by {
            ChosenBy::Select(s) => selected
                .entry(s.origin.instance.as_str())
                .or_default()
                .push(cell_name(*family, *size)),
            ChosenBy::LowerLoss => lower.push(cell_name(*family, *size)),
        }
    }
    let whole = |cells: &[String]| {
        if cells.len() == choices.len() {
            "every row".to_owned()
        } else {
            cells.join(", ")
        }
    };
    let mut parts: Vec<String> = selected
        .iter()
        .map(|(instance, cells)| format!("the choice of `{instance}` for {}", whole(cells)))
        .collect();
    if !lower.is_empty() {
        parts.push(format!(
            "the lower validation loss, as no selection covers it, for {}",
            whole(&lower)
        ));
    }
    format!("Chosen run: {}.", parts.join("; "))
}

/// The note of Tables 6 and 7 when they have rows the paper's have not: the ablation
/// variants, whose hyperparameters the paper does not state.
fn variant_note(draft: &mut Draft<'_>, cells: &[((Family, Size), FloorChoice<'_>)]) {
    if cells.iter().any(|((f, _), _)| VARIANTS.contains(f)) {
        draft.note(
            "The ablation variants' rows are cwm's: the paper's table has the main models only \
             and does not say how the variants' hyperparameters were chosen.",
        );
    }
}

/// Table 6: per family × size, the chosen second-stage run and the one that differs from it
/// only by the floor.
pub(super) fn table6(
    choices: &BTreeMap<(Family, Size), FloorChoice<'_>>,
    paper: &Paper,
) -> Result<Vec<Table>, String> {
    if choices.is_empty() {
        return Err("no second-stage (cosine schedule) train run among the inputs".to_owned());
    }
    let columns = vec![
        Column::left("Model"),
        Column::left("Size"),
        Column::right("Best floor"),
        Column::right("Best val. loss"),
        Column::right("Other floor"),
        Column::right("Other val. loss"),
        Column::right("ExactState (%)"),
        Column::right("Labelwise (%)"),
    ];
    let mut draft = Draft::new(
        "table6_cosine_floor",
        "Table 6",
        "Second stage: validation of the chosen cosine floor and of the other floor",
        columns,
        2,
        paper.table(6),
    );
    let cells = paper_sorted(choices.clone());
    draft.note(choice_note(&cells));
    variant_note(&mut draft, &cells);
    draft.note(
        "Best: the chosen run; Other: the run with the same hyperparameters but the floor (the \
         best one where there are several). Validation: best, else final. ExactState and \
         Labelwise are the chosen run's. Both losses of a row print as a.bc×10ᵏ when the \
         chosen one is below 1e-4.",
    );
    let mut used = Vec::new();
    for ((family, size), c) in &cells {
        draft.push(*family, Some(*size), table6_row(*family, *size, c));
        used.push(&c.chosen.origin);
        used.extend(c.other.map(|r| &r.origin));
        if let ChosenBy::Select(s) = c.by {
            used.push(&s.origin);
        }
        if c.others > 1 {
            draft.note(format!(
                "{}: {} runs differ from the chosen one only by the floor.",
                cell_name(*family, *size),
                c.others
            ));
        }
    }
    Ok(draft.finish(sources(used)))
}

fn table6_row(family: Family, size: Size, c: &FloorChoice<'_>) -> Vec<Entry> {
    let floor = |r: &TrainRun| Entry::from(Num::Decimal(r.summary.hparams.schedule.lr_min_ratio));
    let best = c.chosen.val();
    let sci = best.is_some_and(|v| v.loss.abs() < crate::format::SCI_BELOW);
    let loss = |v: &ValMetrics| -> Entry {
        if sci {
            Num::LossSci(v.loss).into()
        } else {
            Num::Loss(v.loss).into()
        }
    };
    let mut row = vec![
        family_cell(family).into(),
        size_cell(size).into(),
        floor(c.chosen),
        best.map_or_else(missing, loss),
    ];
    match c.other {
        Some(other) => row.extend([floor(other), other.val().map_or_else(missing, loss)]),
        None => row.extend([missing(), missing()]),
    }
    row.extend([
        best.map_or_else(missing, |v| Num::Percent(v.exact_state, 3).into()),
        best.map_or_else(missing, |v| Num::Percent(v.labelwise, 4).into()),
    ]);
    row
}

/// Table 7: the hyperparameters of the chosen second-stage run per family × size.
pub(super) fn table7(
    choices: &BTreeMap<(Family, Size), FloorChoice<'_>>,
    paper: &Paper,
) -> Result<Vec<Table>, String> {
    if choices.is_empty() {
        return Err("no second-stage (cosine schedule) train run among the inputs".to_owned());
    }
    let mut columns = vec![Column::left("Model"), Column::left("Size")];
    columns.extend(
        ["LR", "Warmup", "β2", "Weight decay", "LR floor"]
            .into_iter()
            .map(Column::right),
    );
    let mut draft = Draft::new(
        "table7_final_hparams",
        "Table 7",
        "Hyperparameters of the chosen second-stage run per model and size",
        columns,
        2,
        paper.table(7),
    );
    let cells = paper_sorted(choices.clone());
    draft.note(choice_note(&cells));
    variant_note(&mut draft, &cells);
    let mut used = Vec::new();
    for ((family, size), c) in &cells {
        let h = &c.chosen.summary.hparams;
        draft.push(
            *family,
            Some(*size),
            vec![
                family_cell(*family).into(),
                size_cell(*size).into(),
                Num::Decimal(h.optimiser.lr).into(),
                Num::Steps(h.schedule.warmup_steps).into(),
                Num::Decimal(h.optimiser.beta2).into(),
                Num::Decimal(h.optimiser.weight_decay).into(),
                Num::Decimal(h.schedule.lr_min_ratio).into(),
            ],
        );
        used.push(&c.chosen.origin);
        if let ChosenBy::Select(s) = c.by {
            used.push(&s.origin);
        }
    }
    Ok(draft.finish(sources(used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_losses_rank_last() {
        assert!(loss_order(0.5, f64::NAN).is_lt());
        assert!(loss_order(f64::NAN, 1e9).is_gt());
        assert!(loss_order(f64::NAN, f64::NAN).is_eq());
        assert!(loss_order(0.1, 0.2).is_lt());
    }
}
