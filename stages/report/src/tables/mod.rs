//! The paper's Tables 4–12, built from the [`Inputs`] in the paper's layout, each followed by
//! a comparison with the published values (`<id>_vs_paper`), then cwm's extra tables and the
//! tables beyond the paper ([`beyond_tables`], from `diagnose` artifacts; [`probe_tables`], from
//! `probe` artifacts; [`markov_tables`], from `markov` artifacts; [`edit_tables`], from `edit`
//! artifacts).
//!
//! A table the inputs cannot fill is not written; [`paper_tables`] returns it as a
//! [`MissingTable`] with the reason, for `index.md`.

mod beyond;
mod bins;
mod draft;
mod edit;
mod evaluation;
mod markov;
mod predictors;
mod probes;
mod training;

use std::collections::{BTreeMap, BTreeSet};

/// A split label usable in a file name: every character but ASCII letters, digits, `-` and
/// `_` becomes `_`.
pub use cwm_formats::fs::file_safe;
use cwm_models::{Family, Size};

pub use self::beyond::{beyond_runs, beyond_tables, keep_chosen_floor_diagnoses};
/// Edit experiments for the figure and input tests.
#[cfg(test)]
pub(crate) use self::edit::tests::inputs as edit_test_inputs;
pub use self::edit::{edit_runs, edit_tables, keep_chosen_floor_edits};
/// Markov tests for the figure tests.
#[cfg(test)]
pub(crate) use self::markov::tests::inputs as markov_test_inputs;
pub use self::markov::{keep_chosen_floor_markov, markov_runs, markov_tables};
pub use self::predictors::{predictor_table, stats as predictor_stats};
/// Probe runs for the figure tests.
#[cfg(test)]
pub(crate) use self::probes::tests::inputs as probe_test_inputs;
pub use self::probes::{
    keep_chosen_floor_probes, probe_runs, probe_tables, relative_depth, result as probe_result,
};
pub use self::training::{ChosenBy, FloorChoice, floor_choices, keep_chosen_floor_evaluations};
use crate::error::ReportError;
use crate::format;
use crate::inputs::{Inputs, Origin};
use crate::published::Paper;
use crate::table::{Cell, MissingTable, Source, Table};

/// The paper's main families, in its row order.
pub const MAIN: [Family; 4] = [
    Family::Transformer,
    Family::Slice,
    Family::Mamba3,
    Family::Gdn,
];

/// The paper's ablation variants, in its row order.
pub const VARIANTS: [Family; 3] = [Family::SliceDiag, Family::Mamba2, Family::GdnPos];

/// The row order of every table: the main families, then the ablation variants.
pub const PAPER_ORDER: [Family; 7] = [
    Family::Transformer,
    Family::Slice,
    Family::Mamba3,
    Family::Gdn,
    Family::SliceDiag,
    Family::Mamba2,
    Family::GdnPos,
];

/// The place of `family` in [`PAPER_ORDER`].
pub fn paper_rank(family: Family) -> usize {
    PAPER_ORDER
        .iter()
        .position(|&f| f == family)
        .unwrap_or(PAPER_ORDER.len())
}

/// The split whose evaluations fill Table 8's "Held-out real games" group and Table 9.
pub const REAL_SPLIT: &str = "test_real";
/// The split whose evaluations fill Table 8's "Random-uniform games" group, Table 10 and,
/// through their prefix bins, Tables 11 and 12.
pub const RANDOM_SPLIT: &str = "test_random";

/// The name the paper's tables give a family (the CSV cell keeps the canonical name).
pub fn paper_name(family: Family) -> &'static str {
    match family {
        Family::GdnPos => "Gated DeltaNet with positive eigenvalues",
        other => family_label(other),
    }
}

/// A short name of a family, for figure legends.
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

/// A size as the paper prints it: `d128/l1`.
pub fn size_label(size: Size) -> String {
    format!("{}/l{}", size.name(), size.n_layers())
}

/// The expressive model and its less expressive ablation (Figure 4).
pub const ABLATIONS: [(Family, Family); 3] = [
    (Family::Slice, Family::SliceDiag),
    (Family::Gdn, Family::GdnPos),
    (Family::Mamba3, Family::Mamba2),
];

pub(crate) fn family_cell(family: Family) -> Cell {
    Cell::with_raw(paper_name(family), family.name())
}

pub(crate) fn size_cell(size: Size) -> Cell {
    Cell::with_raw(size_label(size), size.name())
}

pub(crate) fn pct_cell(fraction: f64) -> Cell {
    Cell::with_raw(format::percent(fraction), format::percent_raw(fraction))
}

pub(crate) fn sources<'a>(origins: impl IntoIterator<Item = &'a Origin>) -> Vec<Source> {
    let set: BTreeSet<Source> = origins.into_iter().map(Origin::source).collect();
    set.into_iter().collect()
}

/// `Transformer d128/l1`.
pub(crate) fn cell_name(family: Family, size: Size) -> String {
    format!("{} {}", paper_name(family), size_label(size))
}

/// A model's cell in the tables beyond the paper: `Transformer d128/l1`, raw
/// `transformer-d128`.
pub(crate) fn model_cell(family: Family, size: Size) -> Cell {
    Cell::with_raw(
        cell_name(family, size),
        format!("{}-{}", family.name(), size.name()),
    )
}

/// `value` with `decimals` decimals (the full value raw), or the missing marker when
/// undefined.
pub(crate) fn number_cell(value: Option<f64>, decimals: usize) -> Cell {
    match value {
        Some(v) if v.is_finite() => Cell::with_raw(format!("{v:.decimals$}"), format!("{v}")),
        _ => Cell::missing(),
    }
}

/// A fraction as a percentage with two decimals, or the missing marker.
pub(crate) fn share_cell(value: Option<f64>) -> Cell {
    number_cell(value.map(|v| v * 100.0), 2)
}

/// Leaves out of `runs` those of a model in `dropped_models` (by the model artifact's hash).
pub(crate) fn drop_models<R>(
    runs: &mut Vec<R>,
    model_hash: impl Fn(&R) -> Option<&String>,
    dropped_models: &BTreeSet<String>,
) {
    runs.retain(|r| !model_hash(r).is_some_and(|h| dropped_models.contains(h)));
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

/// What [`paper_tables`] built.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PaperTables {
    /// Tables 4–12 in order, each followed by its comparison with the paper when it has
    /// one, then the extra tables.
    pub tables: Vec<Table>,
    /// The paper's tables the inputs could not fill, with the reason.
    pub missing: Vec<MissingTable>,
}

impl PaperTables {
    fn add(&mut self, label: &str, built: Result<Vec<Table>, String>) {
        match built {
            Ok(tables) => self.tables.extend(tables),
            Err(reason) => self.missing.push(MissingTable {
                label: label.to_owned(),
                reason,
            }),
        }
    }
}

/// Tables 4–12 and the extras. Table 4 needs `counts` (the models' parameter counts;
/// `None`: not asked for).
///
/// # Errors
/// [`ReportError::Conflict`] when two artifacts claim one cell of a table.
pub fn paper_tables(
    inputs: &Inputs,
    counts: Option<&BTreeMap<(Family, Size), u64>>,
    paper: &Paper,
) -> Result<PaperTables, ReportError> {
    let mut out = PaperTables::default();
    out.add(
        "Table 4",
        counts
            .map(|c| training::table4(c, paper))
            .ok_or_else(|| "parameter counts not asked for (param_counts: false)".to_owned()),
    );
    out.add("Table 5", training::table5(inputs, paper));
    let floors = floor_choices(inputs);
    out.add("Table 6", training::table6(&floors, paper));
    out.add("Table 7", training::table7(&floors, paper));
    let evaluations = evaluation::Evaluations::index(inputs)?;
    out.add("Table 8", evaluation::table8(&evaluations, paper));
    out.add("Table 9", evaluation::table9(&evaluations, paper));
    out.add("Table 10", evaluation::table10(&evaluations, paper));
    let bins = bins::BinIndex::new(inputs)?;
    out.add("Table 11", bins::table11(&bins, paper));
    out.add("Table 12", bins::table12(&bins, paper));
    out.tables.extend(evaluation::extra_tables(&evaluations));
    out.tables.extend(bins::extra_tables(&bins));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_order_puts_real_before_random() {
        let order = split_order(["val", "test_random", "test_real"].map(String::from));
        assert_eq!(order, ["test_real", "test_random", "val"]);
        assert_eq!(file_safe("test/real x"), "test_real_x");
    }

    #[test]
    fn paper_order_and_names() {
        let ranks: Vec<usize> = PAPER_ORDER.iter().map(|&f| paper_rank(f)).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 5, 6]);
        let mut all = Family::ALL.to_vec();
        all.sort_by_key(|&f| paper_rank(f));
        assert_eq!(all, PAPER_ORDER, "every family has a place");
        assert_eq!([MAIN.as_slice(), VARIANTS.as_slice()].concat(), PAPER_ORDER);
        assert_eq!(size_label(Size::D512), "d512/l6");
        assert_eq!(
            paper_name(Family::GdnPos),
            "Gated DeltaNet with positive eigenvalues"
        );
    }
}
