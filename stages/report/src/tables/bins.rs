//! Tables 11 and 12: ExactState and Labelwise of the main families at d512/l6 on
//! random-uniform games in the paper's seven 20-step prefix bins; and an extra table per
//! split with every bin of every model.

use std::collections::{BTreeMap, BTreeSet};

use cwm_models::{Family, Size};

use super::draft::{Draft, Entry, Num, missing};
use super::{
    MAIN, RANDOM_SPLIT, family_cell, file_safe, paper_name, paper_rank, size_cell, size_label,
    sources, split_order,
};
use crate::error::ReportError;
use crate::inputs::{BinResult, Inputs, PrefixBin};
use crate::published::{BINS_SIZE, Paper};
use crate::table::{Column, Table};

/// The width of the paper's prefix bins.
pub const PAPER_BIN_WIDTH: u32 = 20;
/// The first steps of the bins the paper prints.
pub const PAPER_BINS: [u32; 7] = [0, 80, 160, 240, 320, 400, 500];

/// `0–20`.
fn bin_header(start: u32, end: u32) -> String {
    format!("{start}–{end}")
}

/// The bin_prefix results by split, family and size; one per bin width.
pub(super) struct BinIndex<'a> {
    map: BTreeMap<(String, Family, Size), Vec<&'a BinResult>>,
}

impl<'a> BinIndex<'a> {
    /// Indexes the results; two of one bin width for one family × size × split is an error.
    pub(super) fn new(inputs: &'a Inputs) -> Result<Self, ReportError> {
        let mut map: BTreeMap<(String, Family, Size), Vec<&BinResult>> = BTreeMap::new();
        for b in &inputs.bins {
            let list = map
                .entry((b.summary.split.clone(), b.family, b.size))
                .or_default();
            if let Some(prev) = list.iter().find(|p| p.summary.bin == b.summary.bin) {
                return Err(ReportError::Conflict(format!(
                    "two bin_prefix artifacts for {} {} on split `{}` with bin {}: `{}` and `{}`",
                    b.family,
                    b.size,
                    b.summary.split,
                    b.summary.bin,
                    prev.origin.instance,
                    b.origin.instance
                )));
            }
            list.push(b);
            list.sort_by_key(|r| (r.summary.bin != PAPER_BIN_WIDTH, r.summary.bin));
        }
        Ok(Self { map })
    }

    /// The result of `family` at `size` on `split`: 20-step bins when there are, else the
    /// narrowest.
    fn get(&self, split: &str, family: Family, size: Size) -> Option<&'a BinResult> {
        self.map
            .get(&(split.to_owned(), family, size))
            .and_then(|list| list.first().copied())
    }
}

/// Steps, ExactState and Labelwise over the steps `start..end`, from the bins inside it
/// (weighted by their steps); `None` when they do not cover it or hold no step.
pub fn merged_bin(bins: &[PrefixBin], start: u32, end: u32) -> Option<(u64, f64, f64)> {
    let parts: Vec<&PrefixBin> = bins
        .iter()
        .filter(|b| b.start >= start && b.end <= end && b.end > b.start)
        .collect();
    let covered: u32 = parts.iter().map(|b| b.end - b.start).sum();
    let steps: u64 = parts.iter().map(|b| b.steps).sum();
    if covered != end.saturating_sub(start) || steps == 0 {
        return None;
    }
    let mean = |metric: fn(&PrefixBin) -> f64| {
        parts
            .iter()
            .map(|b| b.steps as f64 * metric(b))
            .sum::<f64>()
            / steps as f64
    };
    Some((steps, mean(|b| b.exact_state), mean(|b| b.labelwise)))
}

/// The size of Tables 11 and 12: d512 when a main family has random-uniform bins there, else
/// the largest size that has.
fn bins_size(index: &BinIndex<'_>) -> Option<Size> {
    let sizes: BTreeSet<Size> = index
        .map
        .keys()
        .filter(|(split, f, _)| split == RANDOM_SPLIT && MAIN.contains(f))
        .map(|(_, _, s)| *s)
        .collect();
    if sizes.contains(&BINS_SIZE) {
        Some(BINS_SIZE)
    } else {
        sizes.last().copied()
    }
}

/// Which metric of a bin a table prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    ExactState,
    Labelwise,
}

fn prefix_table(index: &BinIndex<'_>, paper: &Paper, metric: Metric) -> Result<Vec<Table>, String> {
    let size = bins_size(index).ok_or_else(|| {
        format!("no bin_prefix artifact of a main model on split `{RANDOM_SPLIT}` among the inputs")
    })?;
    let (number, id, name) = match metric {
        Metric::ExactState => (11, "table11_prefix_exact_state", "ExactState"),
        Metric::Labelwise => (12, "table12_prefix_labelwise", "Labelwise accuracy"),
    };
    let mut columns = vec![Column::left("Model")];
    columns.extend(
        PAPER_BINS
            .iter()
            .map(|&a| Column::right(bin_header(a, a + PAPER_BIN_WIDTH))),
    );
    let mut draft = Draft::new(
        id,
        format!("Table {number}"),
        format!("{name} (%) on random-uniform games per 20-step prefix bin, main models"),
        columns,
        1,
        paper.table(number),
    );
    draft.note(format!(
        "The main models at {} on split `{RANDOM_SPLIT}`. Bin a–b holds steps a to b − 1, \
         step 0 being the start position; – marks a bin without steps.",
        size_label(size)
    ));
    if size != BINS_SIZE {
        draft.note(format!(
            "No main model has {} prefix bins among the inputs: these rows are the largest \
             size present, {}, and the paper's rows (at {}) are not compared with them.",
            size_label(BINS_SIZE),
            size_label(size),
            size_label(BINS_SIZE)
        ));
    }
    let mut used = Vec::new();
    for family in MAIN {
        let Some(result) = index.get(RANDOM_SPLIT, family, size) else {
            continue;
        };
        used.push(&result.origin);
        if result.summary.bin != PAPER_BIN_WIDTH {
            draft.note(format!(
                "{}: merged from bins of {} steps, weighted by their steps.",
                paper_name(family),
                result.summary.bin
            ));
        }
        let mut row: Vec<Entry> = vec![family_cell(family).into()];
        row.extend(PAPER_BINS.iter().map(|&a| {
            match merged_bin(&result.summary.bins, a, a + PAPER_BIN_WIDTH) {
                Some((_, exact, labelwise)) => {
                    let value = match metric {
                        Metric::ExactState => exact,
                        Metric::Labelwise => labelwise,
                    };
                    Num::Percent(value, 2).into()
                }
                None => missing(),
            }
        }));
        draft.push(family, Some(size), row);
    }
    Ok(draft.finish(sources(used)))
}

/// Table 11: ExactState per prefix bin.
pub(super) fn table11(index: &BinIndex<'_>, paper: &Paper) -> Result<Vec<Table>, String> {
    prefix_table(index, paper, Metric::ExactState)
}

/// Table 12: Labelwise accuracy per prefix bin.
pub(super) fn table12(index: &BinIndex<'_>, paper: &Paper) -> Result<Vec<Table>, String> {
    prefix_table(index, paper, Metric::Labelwise)
}

/// Extra: ExactState in every bin of every model, one table per split and bin width.
pub(super) fn extra_tables(index: &BinIndex<'_>) -> Vec<Table> {
    let splits = split_order(index.map.keys().map(|(s, _, _)| s.clone()));
    let mut tables = Vec::new();
    for split in &splits {
        let results: Vec<&BinResult> = index
            .map
            .iter()
            .filter(|((s, _, _), _)| s == split)
            .flat_map(|(_, list)| list.iter().copied())
            .collect();
        let widths: BTreeSet<u32> = results.iter().map(|b| b.summary.bin).collect();
        for &width in &widths {
            let mut rows: Vec<&BinResult> = results
                .iter()
                .copied()
                .filter(|b| b.summary.bin == width)
                .collect();
            rows.sort_by_key(|b| (paper_rank(b.family), b.size));
            let suffix = if widths.len() > 1 {
                format!("_bin{width}")
            } else {
                String::new()
            };
            let id = format!("extra_bins_{}{suffix}", file_safe(split));
            tables.push(every_bin_table(id, split, width, &rows));
        }
    }
    tables
}

fn every_bin_table(id: String, split: &str, width: u32, rows: &[&BinResult]) -> Table {
    let ranges: BTreeSet<(u32, u32)> = rows
        .iter()
        .flat_map(|b| b.summary.bins.iter().map(|bin| (bin.start, bin.end)))
        .collect();
    let mut columns = vec![Column::left("Model"), Column::left("Size")];
    columns.extend(ranges.iter().map(|&(s, e)| Column::right(bin_header(s, e))));
    let mut draft = Draft::new(
        id,
        "Extra",
        format!("ExactState (%) per prefix bin of {width} steps on split `{split}`, every model"),
        columns,
        2,
        None,
    );
    draft.note(
        "Bin a–b holds steps a to b − 1, step 0 being the start position; – marks a bin \
         without steps.",
    );
    for b in rows {
        let mut row: Vec<Entry> = vec![family_cell(b.family).into(), size_cell(b.size).into()];
        for &(start, end) in &ranges {
            row.push(
                b.summary
                    .bins
                    .iter()
                    .find(|bin| (bin.start, bin.end) == (start, end) && bin.steps > 0)
                    .map_or_else(missing, |bin| Num::Percent(bin.exact_state, 2).into()),
            );
        }
        draft.push(b.family, Some(b.size), row);
    }
    draft.into_table(sources(rows.iter().map(|b| &b.origin)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(start: u32, end: u32, steps: u64, exact: f64) -> PrefixBin {
        PrefixBin {
            bin: start / (end - start).max(1),
            start,
            end,
            steps,
            exact_state: exact,
            labelwise: (1.0 + exact) / 2.0,
        }
    }

    #[test]
    fn bins_merge_when_they_cover_the_range() {
        let bins = [bin(0, 20, 10, 0.5)];
        assert_eq!(merged_bin(&bins, 0, 20), Some((10, 0.5, 0.75)));
        let halves = [bin(0, 10, 30, 1.0), bin(10, 20, 10, 0.0)];
        assert_eq!(merged_bin(&halves, 0, 20), Some((40, 0.75, 0.875)));
        assert_eq!(
            merged_bin(&halves[..1], 0, 20),
            None,
            "half the range is absent"
        );
        assert_eq!(merged_bin(&[bin(0, 20, 0, 0.0)], 0, 20), None, "no steps");
        assert_eq!(merged_bin(&[bin(0, 40, 5, 1.0)], 0, 20), None, "wider bins");
        assert_eq!(merged_bin(&[], 80, 100), None);
    }

    #[test]
    fn paper_bins_are_labelled_as_printed() {
        let headers: Vec<String> = PAPER_BINS
            .iter()
            .map(|&a| bin_header(a, a + PAPER_BIN_WIDTH))
            .collect();
        assert_eq!(
            headers,
            [
                "0–20",
                "80–100",
                "160–180",
                "240–260",
                "320–340",
                "400–420",
                "500–520"
            ]
        );
    }
}
