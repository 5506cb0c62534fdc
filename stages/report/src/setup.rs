//! The tables that describe the benchmark itself rather than a model: Table 1 (the splits),
//! Table 2 (the state-label layout) and Table 3 (move-token coverage).
//!
//! Tables 1 and 3 tell the splits apart by where each tokenize artifact read its games
//! (`coverage.json`'s `source`): a split stage's `train` and `val` outputs, a parse (the
//! held-out real test), the random-uniform generator. A record without a source (written
//! before it was kept, or by another producer) falls back to its instance name.

use std::collections::BTreeSet;

use cwm_formats::labels::{HEAD_OUT, LABEL_GROUPS, N_LABELS};
use cwm_formats::tokenize::MOVE_ID_SPACE;

use crate::format;
use crate::inputs::{Coverage, Inputs};
use crate::table::{Cell, Column, Table};
use crate::tables::{pct_cell, sources};

/// What a tokenized split is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SplitRole {
    /// Real games the models train on.
    Train,
    /// The held-out real validation games (model selection).
    Validation,
    /// The held-out real test games.
    RealTest,
    /// The random-uniform test games.
    RandomTest,
    /// Anything else.
    Other,
}

impl SplitRole {
    /// The role of a tokenize artifact: from its recorded source, else its instance name.
    pub fn of(coverage: &Coverage) -> SplitRole {
        if let Some(source) = &coverage.file.source {
            match (source.kind.as_str(), source.output.as_str()) {
                ("split", "train") => return SplitRole::Train,
                ("split", "val") => return SplitRole::Validation,
                ("random_uniform", _) => return SplitRole::RandomTest,
                ("parse", _) => return SplitRole::RealTest,
                _ => {}
            }
        }
        let name = coverage.origin.instance.as_str();
        if name.contains("random") {
            SplitRole::RandomTest
        } else if name.contains("val") {
            SplitRole::Validation
        } else if name.contains("test") {
            SplitRole::RealTest
        } else if name.contains("train") {
            SplitRole::Train
        } else {
            SplitRole::Other
        }
    }

    /// The column or row label.
    pub fn label(self) -> &'static str {
        match self {
            SplitRole::Train => "Train",
            SplitRole::Validation => "Validation",
            SplitRole::RealTest => "Held-out real test",
            SplitRole::RandomTest => "Random-uniform test",
            SplitRole::Other => "Other",
        }
    }
}

/// The tokenize artifacts in role order (train, validation, real test, random test, others),
/// then by instance name.
fn by_role(inputs: &Inputs) -> Vec<(SplitRole, &Coverage)> {
    let mut list: Vec<(SplitRole, &Coverage)> = inputs
        .coverage
        .iter()
        .map(|c| (SplitRole::of(c), c))
        .collect();
    list.sort_by(|a, b| (a.0, &a.1.origin.instance).cmp(&(b.0, &b.1.origin.instance)));
    list
}

fn count_cell(n: u64) -> Cell {
    Cell::with_raw(format::count(n), n.to_string())
}

fn games_of(list: &[(SplitRole, &Coverage)], role: SplitRole) -> Option<u64> {
    let games: Vec<u64> = list
        .iter()
        .filter(|(r, _)| *r == role)
        .map(|(_, c)| c.file.games)
        .collect();
    (!games.is_empty()).then(|| games.iter().sum())
}

/// Table 1: the benchmark's splits and their sizes.
pub fn table1(inputs: &Inputs) -> Option<Table> {
    let list = by_role(inputs);
    if list.is_empty() {
        return None;
    }
    let train = games_of(&list, SplitRole::Train);
    let val = games_of(&list, SplitRole::Validation);
    let mut rows = Vec::new();
    if train.is_some() || val.is_some() {
        let both = train.unwrap_or(0) + val.unwrap_or(0);
        rows.push(vec![
            Cell::text("Real-game train and validation"),
            Cell::with_raw(
                format!("{} source games", format::count(both)),
                both.to_string(),
            ),
            Cell::text("Real Lichess games kept by the parse stage"),
        ]);
    }
    if let Some(val) = val {
        let share = val as f64 / (train.unwrap_or(0) + val).max(1) as f64;
        rows.push(vec![
            Cell::text("Held-out real validation"),
            Cell::with_raw(
                format!(
                    "{} % ({} games)",
                    format::percent(share),
                    format::count(val)
                ),
                val.to_string(),
            ),
            Cell::text("Game-level MD5-bucket split; selects the models"),
        ]);
    }
    for (role, description) in [
        (
            SplitRole::RealTest,
            "Real games of a later month, never trained on",
        ),
        (
            SplitRole::RandomTest,
            "Games of uniformly random legal moves",
        ),
    ] {
        if let Some(games) = games_of(&list, role) {
            rows.push(vec![
                Cell::text(role.label()),
                count_cell(games),
                Cell::text(description),
            ]);
        }
    }
    for (_, c) in list.iter().filter(|(r, _)| *r == SplitRole::Other) {
        rows.push(vec![
            Cell::text(&c.origin.instance),
            count_cell(c.file.games),
            Cell::text("Tokenized games of unknown role"),
        ]);
    }
    Some(Table {
        id: "table1_splits".into(),
        label: "Table 1".into(),
        title: "The benchmark's splits, counted in the tokenized artifacts".into(),
        columns: vec![
            Column::left("Split"),
            Column::left("Size"),
            Column::left("Description"),
        ],
        rows,
        notes: vec![
            "Sizes are the games each tokenize artifact holds. The paper's splits: 10M source \
             games, about 0.5 % of them for validation, 10k real test games and 10k \
             random-uniform test games."
                .into(),
        ],
        sources: sources(list.iter().map(|(_, c)| &c.origin)),
    })
}

/// Table 2: the 75 state labels, from the encoder's own declaration
/// ([`cwm_formats::labels::LABEL_GROUPS`]).
pub fn table2() -> Table {
    let rows = LABEL_GROUPS
        .iter()
        .map(|g| {
            vec![
                Cell::text(g.title),
                Cell::text(g.n_labels.to_string()),
                Cell::text(format!("{} classes: {}", g.n_classes, g.encoding)),
            ]
        })
        .collect();
    Table {
        id: "table2_labels".into(),
        label: "Table 2".into(),
        title: "The state every step is labelled with".into(),
        columns: vec![
            Column::left("State component"),
            Column::right("Count"),
            Column::left("Vocabulary or encoding"),
        ],
        rows,
        notes: vec![format!(
            "{N_LABELS} labels per step, predicted by {HEAD_OUT} logits (one per class of each \
             label). Generated from the label declaration the encoder and the models share."
        )],
        sources: Vec::new(),
    }
}

/// One split's ids against the train split's: (shared, only in this one, only in train).
fn overlap(ids: &[u16], train: &[u16]) -> (u64, u64, u64) {
    let a: BTreeSet<u16> = ids.iter().copied().collect();
    let b: BTreeSet<u16> = train.iter().copied().collect();
    (
        a.intersection(&b).count() as u64,
        a.difference(&b).count() as u64,
        b.difference(&a).count() as u64,
    )
}

/// Table 3's column headers: the role, with the instance where two share a role.
fn coverage_headers(list: &[(SplitRole, &Coverage)]) -> Vec<String> {
    list.iter()
        .map(|(role, c)| {
            if list.iter().filter(|(r, _)| r == role).count() > 1 {
                format!("{} ({})", role.label(), c.origin.instance)
            } else {
                role.label().to_owned()
            }
        })
        .collect()
}

/// The overlap rows of Table 3 for each split against the first train split, `–` where a
/// record has no id list or there is no train split.
fn overlap_rows(list: &[(SplitRole, &Coverage)]) -> Vec<Vec<Cell>> {
    let train = list
        .iter()
        .find(|(r, _)| *r == SplitRole::Train)
        .and_then(|(_, c)| c.file.seen_move_ids.as_deref());
    let labels = [
        "Identifiers shared with Train",
        "Identifiers only in this split",
        "Train identifiers missing here",
    ];
    let mut rows: Vec<Vec<Cell>> = labels.iter().map(|l| vec![Cell::text(*l)]).collect();
    for (_, c) in list {
        let counts = match (c.file.seen_move_ids.as_deref(), train) {
            (Some(ids), Some(train)) => {
                let (shared, only, missing) = overlap(ids, train);
                [shared, only, missing].map(count_cell)
            }
            _ => [Cell::missing(), Cell::missing(), Cell::missing()],
        };
        for (row, cell) in rows.iter_mut().zip(counts) {
            row.push(cell);
        }
    }
    rows
}

/// Table 3: move-token coverage, one column per tokenize artifact.
pub fn table3(inputs: &Inputs) -> Option<Table> {
    let list = by_role(inputs);
    if list.is_empty() {
        return None;
    }
    let mut columns = vec![Column::left("Quantity")];
    columns.extend(coverage_headers(&list).into_iter().map(Column::right));
    let mut kept = vec![Cell::text("Examples kept")];
    let mut unique = vec![Cell::text("Unique move identifiers")];
    let mut share = vec![Cell::text("Move-token coverage (%)")];
    for (_, c) in &list {
        let f = &c.file;
        kept.push(count_cell(f.games));
        unique.push(Cell::with_raw(
            format!(
                "{}/{}",
                format::count(f.distinct_move_ids),
                format::count(f.move_ids)
            ),
            f.distinct_move_ids.to_string(),
        ));
        share.push(pct_cell(
            f.distinct_move_ids as f64 / f.move_ids.max(1) as f64,
        ));
    }
    let mut rows = vec![kept, unique, share];
    rows.extend(overlap_rows(&list));
    Some(Table {
        id: "table3_coverage".into(),
        label: "Table 3".into(),
        title: "Move-token coverage of each split, and its overlap with the training split".into(),
        columns,
        rows,
        notes: vec![format!(
            "Identifiers exclude START and PAD; coverage is out of the {} packed move ids, \
                 of which only 1,968 are geometrically possible. The paper found 1,968/20,480 \
                 (9.61 %) in both its training and random-uniform splits, with none only in \
                 one of them. The three overlap rows are cwm's; – marks a record without an \
                 id list or a report without a train split.",
            format::count(MOVE_ID_SPACE)
        )],
        sources: sources(list.iter().map(|(_, c)| &c.origin)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_each_side() {
        assert_eq!(overlap(&[1, 2, 3, 9], &[2, 3, 4]), (2, 2, 1));
        assert_eq!(overlap(&[], &[5]), (0, 0, 1));
    }

    #[test]
    fn table2_sums_to_the_75_labels() {
        let table = table2();
        assert_eq!(table.rows.len(), 7);
        let total: usize = table
            .rows
            .iter()
            .map(|r| r[1].text.parse::<usize>().unwrap())
            .sum();
        assert_eq!(total, 75);
        assert_eq!(table.rows[0][0].text, "Board squares");
        assert!(table.rows[0][2].text.starts_with("13 classes"));
        assert_eq!(table.rows[5][1].text, "2");
    }
}
