//! The tables that describe the benchmark itself rather than a model: Table 1 (the splits),
//! Table 2 (the state-label layout) and Table 3 (move-token coverage).

use crate::format;
use crate::inputs::Inputs;
use crate::table::{Cell, Column, Table};
use crate::tables::{pct_cell, sources};

/// Table 3: move-token coverage, one row per tokenize artifact.
pub fn table3(inputs: &Inputs) -> Option<Table> {
    if inputs.coverage.is_empty() {
        return None;
    }
    let rows = inputs
        .coverage
        .iter()
        .map(|c| {
            let f = &c.file;
            vec![
                Cell::text(&c.origin.instance),
                Cell::with_raw(format::count(f.games), f.games.to_string()),
                Cell::with_raw(format::count(f.plies), f.plies.to_string()),
                Cell::with_raw(
                    format::count(f.distinct_move_ids),
                    f.distinct_move_ids.to_string(),
                ),
                Cell::with_raw(format::count(f.move_ids), f.move_ids.to_string()),
                pct_cell(f.distinct_move_ids as f64 / f.move_ids.max(1) as f64),
                pct_cell(f.distinct_move_ids as f64 / 1968.0),
            ]
        })
        .collect();
    Some(Table {
        id: "table3_coverage".into(),
        label: "Table 3".into(),
        title: "Move-token coverage: distinct move ids seen per tokenized split".into(),
        columns: vec![
            Column::left("Split"),
            Column::right("Games"),
            Column::right("Plies"),
            Column::right("Distinct ids"),
            Column::right("Id space"),
            Column::right("Of id space (%)"),
            Column::right("Of 1,968 possible (%)"),
        ],
        rows,
        notes: vec![
            "Only 1,968 of the 20,480 packed move ids are geometrically possible \
             (1,792 queen-line and knight moves plus 176 promotions)."
                .into(),
        ],
        sources: sources(inputs.coverage.iter().map(|c| &c.origin)),
    })
}
