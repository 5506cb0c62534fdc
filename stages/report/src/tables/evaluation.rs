//! Tables 8–10: test results of the main families (Table 8) and of the ablation variants on
//! held-out real games (Table 9) and random-uniform games (Table 10), by the evaluate
//! summary's split label; an extra ablation table per further split.

use std::collections::{BTreeMap, BTreeSet};

use cwm_models::{Family, Size};

use super::draft::{Draft, Entry, Num, missing};
use super::{
    MAIN, RANDOM_SPLIT, REAL_SPLIT, VARIANTS, family_cell, file_safe, paper_name, paper_rank,
    size_cell, sources, split_order,
};
use crate::error::ReportError;
use crate::inputs::{EvalResult, Inputs};
use crate::published::{Paper, RANDOM_GROUP, REAL_GROUP};
use crate::table::{Column, Table};

/// The four metric columns of Tables 8–10, in the paper's order.
const METRICS: [&str; 4] = ["Loss", "Labelwise (%)", "ExactState (%)", "Trajectory (%)"];

/// The evaluations by family, size and split.
pub(super) struct Evaluations<'a> {
    map: BTreeMap<(Family, Size, String), &'a EvalResult>,
}

impl<'a> Evaluations<'a> {
    /// Indexes the evaluations; two for one family × size × split is an error.
    pub(super) fn index(inputs: &'a Inputs) -> Result<Self, ReportError> {
        let mut map: BTreeMap<(Family, Size, String), &EvalResult> = BTreeMap::new();
        for e in &inputs.evaluate {
            if let Some(prev) = map.insert((e.family, e.size, e.summary.split.clone()), e) {
                return Err(ReportError::Conflict(format!(
                    "two evaluate artifacts for {} {} on split `{}`: `{}` and `{}`",
                    e.family, e.size, e.summary.split, prev.origin.instance, e.origin.instance
                )));
            }
        }
        Ok(Self { map })
    }

    fn get(&self, family: Family, size: Size, split: &str) -> Option<&'a EvalResult> {
        self.map.get(&(family, size, split.to_owned())).copied()
    }

    /// The family × size cells of `families` with an evaluation on `split` (any split when
    /// `None`), in the paper's row order.
    fn cells(&self, families: &[Family], split: Option<&str>) -> Vec<(Family, Size)> {
        let set: BTreeSet<(Family, Size)> = self
            .map
            .keys()
            .filter(|(f, _, s)| families.contains(f) && split.is_none_or(|x| x == s))
            .map(|(f, size, _)| (*f, *size))
            .collect();
        let mut cells: Vec<_> = set.into_iter().collect();
        cells.sort_by_key(|(f, s)| (paper_rank(*f), *s));
        cells
    }

    /// The split labels of the evaluations of `families`, in report order.
    fn splits(&self, families: &[Family]) -> Vec<String> {
        split_order(
            self.map
                .keys()
                .filter(|(f, _, _)| families.contains(f))
                .map(|(_, _, s)| s.clone()),
        )
    }
}

/// Loss, Labelwise, ExactState and Trajectory of an evaluation, or four `–`.
fn metric_entries(e: Option<&EvalResult>) -> Vec<Entry> {
    match e {
        Some(e) => vec![
            Num::Loss(e.summary.loss).into(),
            Num::Percent(e.summary.labelwise, 2).into(),
            Num::Percent(e.summary.exact_state, 2).into(),
            Num::Percent(e.summary.trajectory, 2).into(),
        ],
        None => vec![missing(), missing(), missing(), missing()],
    }
}

const METRICS_NOTE: &str = "Loss: the mean cross-entropy over the 75 labels and all valid \
    steps, printed with six decimals, as a.bc×10ᵏ below 1e-4 and from 1,000 up. Labelwise \
    and ExactState are micro-averaged over all valid steps (the start position included); \
    Trajectory is the share of games tracked exactly throughout. – marks a missing \
    evaluation.";

/// Table 8: the main families on every split, one column group per split: the paper's two,
/// then one per further split label.
pub(super) fn table8(ev: &Evaluations<'_>, paper: &Paper) -> Result<Vec<Table>, String> {
    let cells = ev.cells(&MAIN, None);
    if cells.is_empty() {
        return Err(format!(
            "no evaluation of {} among the inputs",
            names(&MAIN, "or")
        ));
    }
    let mut groups = vec![
        (REAL_SPLIT.to_owned(), REAL_GROUP.to_owned()),
        (RANDOM_SPLIT.to_owned(), RANDOM_GROUP.to_owned()),
    ];
    for split in ev.splits(&MAIN) {
        if split != REAL_SPLIT && split != RANDOM_SPLIT {
            groups.push((split.clone(), split));
        }
    }
    let mut columns = vec![Column::left("Model"), Column::left("Size")];
    for (_, group) in &groups {
        columns.extend(METRICS.iter().map(|m| Column::right(*m).in_group(group)));
    }
    let mut draft = Draft::new(
        "table8_test",
        "Table 8",
        "Test results of the main models on held-out real and random-uniform games",
        columns,
        2,
        paper.table(8),
    );
    let mut note = format!(
        "{REAL_GROUP}: the evaluations on split `{REAL_SPLIT}`; {RANDOM_GROUP}: on split \
         `{RANDOM_SPLIT}`"
    );
    if groups.len() > 2 {
        note.push_str("; each further group is the split of that label");
    }
    note.push_str(". The ablation variants are in Tables 9 and 10.");
    draft.note(note);
    draft.note(METRICS_NOTE);
    let mut used = Vec::new();
    for (family, size) in cells {
        let mut row: Vec<Entry> = vec![family_cell(family).into(), size_cell(size).into()];
        for (split, _) in &groups {
            let e = ev.get(family, size, split);
            used.extend(e.map(|e| &e.origin));
            row.extend(metric_entries(e));
        }
        draft.push(family, Some(size), row);
    }
    Ok(draft.finish(sources(used)))
}

/// `A, B or C`.
fn names(families: &[Family], conjunction: &str) -> String {
    let names: Vec<&str> = families.iter().map(|&f| paper_name(f)).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => {
            format!("{} {conjunction} {last}", rest.join(", "))
        }
        _ => names.join(""),
    }
}

/// The ablation variants on `split`.
fn variant_table<'p>(
    ev: &Evaluations<'_>,
    split: &str,
    mut draft: Draft<'p>,
) -> Result<Vec<Table>, String> {
    let cells = ev.cells(&VARIANTS, Some(split));
    if cells.is_empty() {
        return Err(format!(
            "no evaluation of an ablation variant ({}) on split `{split}` among the inputs",
            names(&VARIANTS, "or")
        ));
    }
    draft.note(format!(
        "The evaluations on split `{split}`; each variant is compared with its full model in \
         Figure 4."
    ));
    draft.note(METRICS_NOTE);
    let mut used = Vec::new();
    for (family, size) in cells {
        let e = ev.get(family, size, split);
        used.extend(e.map(|e| &e.origin));
        let mut row: Vec<Entry> = vec![family_cell(family).into(), size_cell(size).into()];
        row.extend(metric_entries(e));
        draft.push(family, Some(size), row);
    }
    Ok(draft.finish(sources(used)))
}

fn variant_columns() -> Vec<Column> {
    let mut columns = vec![Column::left("Variant"), Column::left("Size")];
    columns.extend(METRICS.iter().map(|m| Column::right(*m)));
    columns
}

/// Table 9: the ablation variants on held-out real games.
pub(super) fn table9(ev: &Evaluations<'_>, paper: &Paper) -> Result<Vec<Table>, String> {
    let draft = Draft::new(
        format!("table9_ablations_{REAL_SPLIT}"),
        "Table 9",
        "Ablation variants on held-out real games",
        variant_columns(),
        2,
        paper.table(9),
    );
    variant_table(ev, REAL_SPLIT, draft)
}

/// Table 10: the ablation variants on random-uniform games.
pub(super) fn table10(ev: &Evaluations<'_>, paper: &Paper) -> Result<Vec<Table>, String> {
    let draft = Draft::new(
        format!("table10_ablations_{RANDOM_SPLIT}"),
        "Table 10",
        "Ablation variants on random-uniform games",
        variant_columns(),
        2,
        paper.table(10),
    );
    variant_table(ev, RANDOM_SPLIT, draft)
}

/// The ablation variants on every split other than the paper's two (the main families of
/// those splits are further column groups of Table 8).
pub(super) fn extra_tables(ev: &Evaluations<'_>) -> Vec<Table> {
    ev.splits(&VARIANTS)
        .into_iter()
        .filter(|s| s != REAL_SPLIT && s != RANDOM_SPLIT)
        .filter_map(|split| {
            let draft = Draft::new(
                format!("extra_ablations_{}", file_safe(&split)),
                "Extra",
                format!("Ablation variants on split `{split}`"),
                variant_columns(),
                2,
                None,
            );
            variant_table(ev, &split, draft).ok()
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_listed_with_a_conjunction() {
        assert_eq!(
            names(&MAIN, "or"),
            "Transformer, SLiCE, Mamba-3 or Gated DeltaNet"
        );
        assert_eq!(names(&[Family::Slice], "or"), "SLiCE");
        assert_eq!(names(&[], "or"), "");
    }
}
