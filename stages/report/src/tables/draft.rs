//! A paper table under construction: rows of typed numbers that print as the paper prints
//! them, and, for every number the paper published, a row of the comparison table
//! `<id>_vs_paper` (the key cells of the row, the column, ours, the paper's, and the
//! difference).

use cwm_models::{Family, Size};

use crate::format;
use crate::published::PublishedTable;
use crate::table::{Cell, Column, Source, Table};

/// A number of one of our cells and how it prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// A loss ([`format::loss`]).
    Loss(f64),
    /// A loss in scientific form ([`format::loss_sci`]).
    LossSci(f64),
    /// A fraction printed as a percentage with the given decimals.
    Percent(f64, usize),
    /// A parameter count printed in millions.
    Millions(u64),
    /// A hyperparameter printed as a plain decimal.
    Decimal(f64),
    /// A number of steps.
    Steps(u64),
}

impl Num {
    /// The value in the unit the cell prints (percent, millions), as the paper's tables hold
    /// it.
    fn value(self) -> f64 {
        match self {
            Num::Loss(v) | Num::LossSci(v) | Num::Decimal(v) => v,
            Num::Percent(fraction, _) => fraction * 100.0,
            Num::Millions(n) => n as f64 / 1e6,
            Num::Steps(n) => n as f64,
        }
    }

    /// The cell: the paper's print, the full-precision value for CSV.
    pub(crate) fn cell(self) -> Cell {
        match self {
            Num::Loss(v) => Cell::with_raw(format::loss(v), format!("{v}")),
            Num::LossSci(v) => Cell::with_raw(format::loss_sci(v), format!("{v}")),
            Num::Percent(fraction, dp) => Cell::with_raw(
                format::percent_dp(fraction, dp),
                format::percent_raw(fraction),
            ),
            Num::Millions(n) => Cell::with_raw(format::millions(n), n.to_string()),
            Num::Decimal(v) => Cell::text(format::decimal(v)),
            Num::Steps(n) => Cell::text(n.to_string()),
        }
    }

    /// Ours minus `paper`, printed in this number's style with a sign.
    fn delta(self, paper: f64) -> Cell {
        let d = self.value() - paper;
        let text = match self {
            Num::Loss(_) | Num::LossSci(_) => format::signed_loss(d),
            Num::Percent(_, dp) => format::signed_fixed(d, dp),
            Num::Millions(_) => format::signed_fixed(d, 2),
            Num::Decimal(_) | Num::Steps(_) => format::signed_decimal(d),
        };
        Cell::with_raw(text, format!("{d}"))
    }
}

/// One cell of a row: a number, or a text cell (names, `–`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Entry {
    /// A number, compared with the paper's where it has one.
    Num(Num),
    /// Anything else.
    Cell(Cell),
}

impl From<Num> for Entry {
    fn from(num: Num) -> Self {
        Entry::Num(num)
    }
}

impl From<Cell> for Entry {
    fn from(cell: Cell) -> Self {
        Entry::Cell(cell)
    }
}

/// The cell of a value that does not exist.
pub(crate) fn missing() -> Entry {
    Entry::Cell(Cell::missing())
}

/// A table being built, with its comparison rows.
pub(crate) struct Draft<'p> {
    table: Table,
    keys: usize,
    paper: Option<&'p PublishedTable>,
    compared: Vec<Vec<Cell>>,
}

impl<'p> Draft<'p> {
    /// An empty table; its first `keys` columns name a row (Model, Size).
    pub(crate) fn new(
        id: impl Into<String>,
        label: impl Into<String>,
        title: impl Into<String>,
        columns: Vec<Column>,
        keys: usize,
        paper: Option<&'p PublishedTable>,
    ) -> Self {
        Self {
            table: Table {
                id: id.into(),
                label: label.into(),
                title: title.into(),
                columns,
                rows: Vec::new(),
                notes: Vec::new(),
                sources: Vec::new(),
            },
            keys,
            paper,
            compared: Vec::new(),
        }
    }

    /// Adds a note under the table.
    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.table.notes.push(note.into());
    }

    /// The table alone, for a table the paper does not have.
    pub(crate) fn into_table(mut self, sources: Vec<Source>) -> Table {
        self.table.sources = sources;
        self.table
    }

    /// Adds the row of `family` (at `size`, where the paper's table keys rows by size).
    pub(crate) fn push(&mut self, family: Family, size: Option<Size>, entries: Vec<Entry>) {
        let cells: Vec<Cell> = entries
            .iter()
            .map(|e| match e {
                Entry::Num(n) => n.cell(),
                Entry::Cell(c) => c.clone(),
            })
            .collect();
        if let Some(paper) = self.paper {
            for ((entry, cell), column) in entries.iter().zip(&cells).zip(&self.table.columns) {
                let Entry::Num(num) = entry else { continue };
                let header = column.flat_header();
                let Some(published) = paper.get(family, size, &header) else {
                    continue;
                };
                let mut row: Vec<Cell> = cells.iter().take(self.keys).cloned().collect();
                row.extend([
                    Cell::text(header),
                    cell.clone(),
                    Cell::with_raw(&published.text, &published.raw),
                    num.delta(published.value),
                ]);
                self.compared.push(row);
            }
        }
        self.table.rows.push(cells);
    }

    /// The table, then its comparison with the paper when any cell has a published value.
    pub(crate) fn finish(mut self, sources: Vec<Source>) -> Vec<Table> {
        self.table.sources = sources;
        let Some(paper) = self.paper else {
            return vec![self.table];
        };
        let published: usize = paper.rows.iter().map(|r| r.values.len()).sum();
        if self.compared.is_empty() {
            self.note(format!(
                "No cell of this table is among the {published} cells of the paper's Table {}, \
                 so there is nothing to compare.",
                paper.number
            ));
            return vec![self.table];
        }
        let id = format!("{}_vs_paper", self.table.id);
        self.note(format!(
            "{} of the {published} published cells of the paper's Table {} have a value here; \
             `{id}` sets them side by side.",
            self.compared.len(),
            paper.number
        ));
        let comparison = self.comparison(id, paper);
        vec![self.table, comparison]
    }

    fn comparison(&self, id: String, paper: &PublishedTable) -> Table {
        let mut columns: Vec<Column> = self.table.columns[..self.keys].to_vec();
        columns.extend([
            Column::left("Column"),
            Column::right("Ours"),
            Column::right("Paper"),
            Column::right("Δ"),
        ]);
        Table {
            id,
            label: format!("{} vs paper", self.table.label),
            title: format!("{} beside the paper's published values", self.table.label),
            columns,
            rows: self.compared.clone(),
            notes: vec![format!(
                "Ours: as printed in `{}` (the CSV keeps full precision). Paper: as the paper \
                 prints it (stages/report/paper/{}). Δ: ours − paper at ours' full precision, in \
                 the column's unit (percentage points for percentages, millions for parameter \
                 counts).",
                self.table.id, paper.file
            )],
            sources: self.table.sources.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published::Paper;

    #[test]
    fn numbers_print_and_differ_in_their_own_style() {
        assert_eq!(Num::Loss(7.65e-5).cell().text, "7.65×10⁻⁵");
        assert_eq!(Num::LossSci(0.0016).cell().text, "1.60×10⁻³");
        assert_eq!(Num::Percent(0.26735, 3).cell().text, "26.735");
        assert_eq!(
            Num::Millions(3_128_150).cell().raw.as_deref(),
            Some("3128150")
        );
        assert_eq!(Num::Decimal(0.0003).cell().text, "0.0003");
        assert_eq!(Num::Steps(20_000).cell().text, "20000");
        assert_eq!(Num::Percent(0.2712, 2).delta(26.82).text, "+0.30");
        assert_eq!(Num::Loss(3e-5).delta(1.29e-5).text, "+1.71×10⁻⁵");
        assert_eq!(Num::Millions(3_128_150).delta(3.13).text, "-0.00");
        assert_eq!(Num::Decimal(0.001).delta(0.003).text, "-0.002");
        assert_eq!(Num::Steps(5000).delta(5000.0).text, "0");
        assert_eq!(Num::Loss(f64::INFINITY).delta(4.43e17).text, "+inf");
    }

    #[test]
    fn published_cells_become_comparison_rows() {
        let paper = Paper::load().unwrap();
        let columns = vec![
            Column::left("Variant"),
            Column::left("Size"),
            Column::right("Loss"),
            Column::right("Labelwise (%)"),
        ];
        let mut draft = Draft::new("t", "Table 10", "x", columns, 2, paper.table(10));
        draft.push(
            Family::SliceDiag,
            Some(Size::D256),
            vec![
                Cell::text("Diagonal SLiCE").into(),
                Cell::text("d256/l2").into(),
                Num::Loss(4.0e17).into(),
                missing(),
            ],
        );
        let tables = draft.finish(Vec::new());
        assert_eq!(tables.len(), 2);
        let texts: Vec<&str> = tables[1].rows[0].iter().map(|c| c.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "Diagonal SLiCE",
                "d256/l2",
                "Loss",
                "4.00×10¹⁷",
                "4.43×10¹⁷",
                "-4.30×10¹⁶"
            ]
        );
        assert_eq!(tables[1].rows.len(), 1, "a missing cell is not compared");
        assert!(tables[0].notes[0].starts_with("1 of the 48 published cells"));
    }
}
