//! The state-editing table (E11), from `edit` artifacts, per split: `beyond_edit_<split>`,
//! one row per model, variant, layer, vector and α, with what the edit did at its step and,
//! for the persistent cases, how it stood K plies later.
//!
//! `–` where a value is undefined (no case, no held case, or not followed).

use std::collections::BTreeSet;

use cwm_formats::edit::{EditRow, VARIANT_NEXT_MOVE, VARIANT_PERSISTENT, VECTORS};

use super::{
    drop_models, file_safe, model_cell, number_cell as number, paper_rank, share_cell as pct,
    sources, split_order,
};
use crate::inputs::{EditRun, Inputs};
use crate::table::{Cell, Column, Table};

/// How to read the table.
const NOTE: &str = "An edit adds α·‖h‖·v/‖v‖ to the hidden state h at one layer and at the \
                    case's step t only. Cases: next_move, s is the from-square of the game's \
                    next move (the probing paper's choice); persistent, s holds a piece that \
                    stays put over the next K plies, which stay legal without it (the \
                    engine's counterfactual game). Vectors: none (the unedited model), random \
                    (Gaussian), patch (the hidden state three plies later, so its exactness \
                    is graded against S_{t+3}, not against the target), probe (minus the \
                    probe's weights for the piece on s), probe_diff (the probe's weights for \
                    empty minus those for the piece).";
/// The controls.
const CONTROL_NOTE: &str = "None and random are the controls beside probe: read probe \
                            against random at the same α and layer, where the norm is the \
                            same and only the direction differs. The probing paper's contrast \
                            is in argmax agreement with the unedited prediction: 98.75% after \
                            random edits, 0.05% after probe edits.";
/// What the columns count.
const COLUMN_NOTE: &str = "Flip: s predicted empty at t; held: cases whose unedited \
                           prediction had the right piece on s. Collateral: mean number of \
                           other labels whose prediction changed. Target mass: mean over the \
                           64 squares of the probability of the target's class. Argmax \
                           agreement: all 75 predicted labels as unedited. At t+K (persistent \
                           cases, every vector but patch): s still predicted empty, over all \
                           cases and over the held ones, and the prediction equal to the \
                           counterfactual state (for none: to the real one).";
/// What `–` means here.
const DASH_NOTE: &str = "`–`: not defined (no case, no held case, or not followed).";

/// Leaves out of `inputs.edits` the experiments on the models in `dropped_models`.
pub fn keep_chosen_floor_edits(inputs: &mut Inputs, dropped_models: &BTreeSet<String>) {
    drop_models(
        &mut inputs.edits,
        |e| e.summary.model_hash.as_ref(),
        dropped_models,
    );
}

/// The experiments of each split, splits in report order, runs in the paper's order.
pub fn edit_runs(inputs: &Inputs) -> Vec<(String, Vec<&EditRun>)> {
    let splits = split_order(inputs.edits.iter().map(|e| e.summary.split.clone()));
    splits
        .into_iter()
        .map(|split| {
            let mut runs: Vec<&EditRun> = inputs
                .edits
                .iter()
                .filter(|e| e.summary.split == split)
                .collect();
            runs.sort_by_key(|e| (paper_rank(e.family), e.size, e.origin.instance.clone()));
            (split, runs)
        })
        .collect()
}

/// The table of every split.
pub fn edit_tables(inputs: &Inputs) -> Vec<Table> {
    edit_runs(inputs)
        .into_iter()
        .map(|(split, runs)| table(&split, &runs))
        .collect()
}

/// A row's place: variant, layer, vector, α.
fn row_order(row: &EditRow) -> (usize, u32, usize, u64) {
    let variant = [VARIANT_NEXT_MOVE, VARIANT_PERSISTENT]
        .iter()
        .position(|v| *v == row.variant)
        .unwrap_or(2);
    let vector = VECTORS
        .iter()
        .position(|v| *v == row.vector)
        .unwrap_or(VECTORS.len());
    let alpha = if row.alpha.is_finite() {
        row.alpha.max(0.0).to_bits()
    } else {
        u64::MAX
    };
    (variant, row.layer, vector, alpha)
}

/// α as the stage was given it (`0.5`, `8`), never rounded; the missing marker when not finite.
fn alpha_cell(alpha: f64) -> Cell {
    if alpha.is_finite() {
        Cell::with_raw(crate::format::decimal(alpha), format!("{alpha}"))
    } else {
        Cell::missing()
    }
}

fn count(n: u64) -> Cell {
    Cell::with_raw(n.to_string(), n.to_string())
}

fn row_cells(run: &EditRun, row: &EditRow) -> Vec<Cell> {
    let last = |values: &[Option<f64>]| values.last().copied().flatten();
    vec![
        model_cell(run.family, run.size),
        Cell::text(row.variant.clone()),
        Cell::text(row.layer_name.clone()),
        Cell::text(row.vector.clone()),
        alpha_cell(row.alpha),
        count(row.cases),
        count(row.held),
        pct(row.flip),
        pct(row.flip_held),
        number(row.collateral, 2),
        pct(row.target_exact),
        number(row.target_mass, 3),
        pct(row.argmax_agreement),
        pct(last(&row.persist_flip)),
        pct(last(&row.persist_flip_held)),
        pct(last(&row.persist_exact)),
    ]
}

fn table(split: &str, runs: &[&EditRun]) -> Table {
    let columns = vec![
        Column::left("Model"),
        Column::left("Cases"),
        Column::left("Layer"),
        Column::left("Vector"),
        Column::right("α"),
        Column::right("n"),
        Column::right("Held"),
        Column::right("Flip (%)"),
        Column::right("Flip, held (%)"),
        Column::right("Collateral"),
        Column::right("Target exact (%)"),
        Column::right("Target mass"),
        Column::right("Argmax agreement (%)"),
        Column::right("Empty at t+K (%)"),
        Column::right("Empty at t+K, held (%)"),
        Column::right("Exact at t+K (%)"),
    ];
    let rows = runs
        .iter()
        .flat_map(|run| {
            let mut rows: Vec<&EditRow> = run.summary.rows.iter().collect();
            rows.sort_by_key(|r| row_order(r));
            rows.into_iter().map(move |row| row_cells(run, row))
        })
        .collect();
    let horizons: BTreeSet<u32> = runs.iter().map(|r| r.summary.horizon).collect();
    let horizons: Vec<String> = horizons.iter().map(u32::to_string).collect();
    Table {
        id: format!("beyond_edit_{}", file_safe(split)),
        label: format!("Beyond: state editing ({split})"),
        title: format!(
            "Can a piece be removed from the model's board through its hidden state, and does \
             the removal last? Edits at each layer a block follows, on {split}; K = {}",
            horizons.join(", ")
        ),
        columns,
        rows,
        notes: vec![
            NOTE.to_owned(),
            CONTROL_NOTE.to_owned(),
            COLUMN_NOTE.to_owned(),
            DASH_NOTE.to_owned(),
        ],
        sources: sources(runs.iter().map(|r| &r.origin)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use cwm_formats::Versioned;
    use cwm_formats::edit::{
        EditSummary, VECTOR_NONE, VECTOR_PATCH, VECTOR_PROBE, VECTOR_RANDOM, VariantCases,
    };
    use cwm_models::{Family, Size};

    use super::*;
    use crate::inputs::Origin;

    /// A row of `vector` at `alpha`: flips grow with α for probe, persistence only for the
    /// persistent variant (not for patch).
    fn row(variant: &str, vector: &str, alpha: f64) -> EditRow {
        let followed = variant == VARIANT_PERSISTENT && vector != VECTOR_PATCH;
        let strength = if vector == VECTOR_PROBE {
            alpha / 8.0
        } else {
            0.05
        };
        let later = |v: f64| if followed { vec![Some(v); 2] } else { vec![] };
        EditRow {
            variant: variant.into(),
            layer: 0,
            layer_name: "embedding".into(),
            vector: vector.into(),
            alpha,
            cases: 10,
            held: if vector == VECTOR_NONE { 0 } else { 8 },
            flip: Some(strength),
            flip_held: (vector != VECTOR_NONE).then_some(strength),
            collateral: Some(alpha),
            target_exact: Some(0.0),
            target_mass: Some(0.5),
            argmax_agreement: Some(1.0 - strength),
            persist_flip: later(strength / 4.0),
            persist_exact: later(0.0),
            persist_flip_held: later(strength / 2.0),
        }
    }

    pub(crate) fn run(family: Family) -> EditRun {
        // Stored out of order: the table sorts.
        let mut rows = Vec::new();
        for variant in [VARIANT_PERSISTENT, VARIANT_NEXT_MOVE] {
            rows.push(row(variant, VECTOR_PROBE, 8.0));
            rows.push(row(variant, VECTOR_PROBE, 1.0));
            rows.push(row(variant, VECTOR_RANDOM, 8.0));
            rows.push(row(variant, VECTOR_RANDOM, 1.0));
            rows.push(row(variant, VECTOR_PATCH, 1.0));
            rows.push(row(variant, VECTOR_NONE, 0.0));
        }
        EditRun {
            origin: Origin {
                instance: format!("edit[arch={}]", family.name()),
                kind: "edit".into(),
                hash: format!("hash-{}", family.name()),
            },
            family,
            size: Size::D128,
            summary: EditSummary {
                version: EditSummary::VERSION,
                kind: "edit".into(),
                arch: family.name().into(),
                size: "d128".into(),
                model_hash: Some(format!("model-{}", family.name())),
                probe_hash: None,
                probe_set: "id".into(),
                split: "test_real".into(),
                blocks: 1,
                games: 5,
                horizon: 2,
                alphas: vec![1.0, 8.0],
                cases: vec![VariantCases {
                    variant: VARIANT_PERSISTENT.into(),
                    cases: 10,
                    rejected_steps: 0,
                }],
                rows,
            },
        }
    }

    pub(crate) fn inputs() -> Inputs {
        Inputs {
            edits: vec![run(Family::Slice), run(Family::Transformer)],
            ..Inputs::default()
        }
    }

    fn texts(row: &[Cell]) -> Vec<String> {
        row.iter().map(|c| c.text.clone()).collect()
    }

    #[test]
    fn rows_follow_the_paper_order_then_variant_vector_and_alpha() {
        let tables = edit_tables(&inputs());
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        assert_eq!(t.id, "beyond_edit_test_real");
        assert_eq!(t.rows.len(), 24);
        let keys: Vec<Vec<String>> = t.rows[..5].iter().map(|r| texts(&r[..5])).collect();
        let expect = |v: &str, vector: &str, a: &str| -> Vec<String> {
            ["Transformer d128/l1", v, "embedding", vector, a]
                .map(str::to_owned)
                .to_vec()
        };
        assert_eq!(
            keys,
            [
                expect("next_move", "none", "0"),
                expect("next_move", "random", "1"),
                expect("next_move", "random", "8"),
                expect("next_move", "patch", "1"),
                expect("next_move", "probe", "1"),
            ]
        );
        assert_eq!(texts(&t.rows[5])[3..5], ["probe", "8"]);
        assert!(texts(&t.rows[12])[0].starts_with("SLiCE"));
    }

    #[test]
    fn persistence_is_blank_where_it_was_not_followed() {
        let t = &edit_tables(&inputs())[0];
        // Next-move probe at α = 8: flips 100%, nothing followed.
        assert_eq!(
            texts(&t.rows[5])[5..],
            [
                "10", "8", "100.00", "100.00", "8.00", "0.00", "0.500", "0.00", "–", "–", "–"
            ]
        );
        // Persistent: none (no held case), then probe at α = 8 followed to t+K.
        assert_eq!(texts(&t.rows[6])[6..9], ["0", "5.00", "–"]);
        assert_eq!(texts(&t.rows[11])[13..], ["25.00", "50.00", "0.00"]);
        // Patch is not followed.
        assert_eq!(texts(&t.rows[9])[13..], ["–", "–", "–"]);
    }

    #[test]
    fn odd_values_print_the_missing_marker() {
        let mut inputs = inputs();
        let mut odd = row("other", "other", f64::NAN);
        odd.flip = Some(f64::INFINITY);
        odd.collateral = None;
        odd.persist_exact = vec![None];
        inputs.edits[0].summary.rows.push(odd);
        let t = &edit_tables(&inputs)[0];
        // SLiCE comes second; an unknown variant sorts after the known ones.
        let last = texts(t.rows.last().unwrap());
        assert_eq!(last[1..5], ["other", "embedding", "other", "–"]);
        assert_eq!([&last[7], &last[9], &last[15]], ["–", "–", "–"]);
    }

    #[test]
    fn unchosen_floors_leave() {
        let mut inputs = inputs();
        keep_chosen_floor_edits(&mut inputs, &BTreeSet::from(["model-slice".to_owned()]));
        assert_eq!(inputs.edits.len(), 1);
        assert_eq!(inputs.edits[0].family, Family::Transformer);
    }
}
