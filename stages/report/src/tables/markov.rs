//! The tables of the path-independence test (E8, E10), from `markov` artifacts, per split:
//!
//! * `beyond_markov_<split>`: per model, class set (`natural` transpositions, engine-checked
//!   `swap`s) and layer, the mean cosine of hidden states within classes and of random pairs,
//!   Cohen's d and the Holm-corrected permutation p;
//! * `beyond_transposition_<split>`: per model and class set, how often the model's
//!   predictions agree across a class, and ExactState on the first members (the games' own
//!   orders) and on the others.
//!
//! `–` where a value is undefined (no class, or no pair).

use std::collections::BTreeSet;

use cwm_formats::markov::{ClassSet, LayerTest};

use super::{
    drop_models, file_safe, model_cell, number_cell as number, paper_rank, share_cell as pct,
    sources, split_order,
};
use crate::inputs::{Inputs, MarkovRun};
use crate::table::{Cell, Column, Table};

/// How to read the test.
const NOTE: &str = "Classes are move prefixes reaching the same 75 labels: natural \
                    transpositions among the games' own prefixes, and a prefix with two moves \
                    of one side swapped (quiet piece moves, checked by the rules engine). \
                    d = (mean within-class cosine − mean population cosine) / population \
                    deviation; p: share of class-label shuffles reaching the within-class mean, \
                    Holm-corrected over the layers. A Markov model's hidden state would depend \
                    only on the class.";
/// What `–` means here.
const DASH_NOTE: &str = "`–`: not defined (no class with a pair of members).";

/// Leaves out of `inputs.markov` the tests of the models in `dropped_models`.
pub fn keep_chosen_floor_markov(inputs: &mut Inputs, dropped_models: &BTreeSet<String>) {
    drop_models(
        &mut inputs.markov,
        |m| m.summary.model_hash.as_ref(),
        dropped_models,
    );
}

/// The tests of each split, splits in report order, runs in the paper's order.
pub fn markov_runs(inputs: &Inputs) -> Vec<(String, Vec<&MarkovRun>)> {
    let splits = split_order(inputs.markov.iter().map(|m| m.summary.split.clone()));
    splits
        .into_iter()
        .map(|split| {
            let mut runs: Vec<&MarkovRun> = inputs
                .markov
                .iter()
                .filter(|m| m.summary.split == split)
                .collect();
            runs.sort_by_key(|m| (paper_rank(m.family), m.size, m.origin.instance.clone()));
            (split, runs)
        })
        .collect()
}

/// Both tables of every split.
pub fn markov_tables(inputs: &Inputs) -> Vec<Table> {
    markov_runs(inputs)
        .into_iter()
        .flat_map(|(split, runs)| [layers(&split, &runs), outputs(&split, &runs)])
        .collect()
}

fn depth_cell(layer: &LayerTest, blocks: u32) -> Cell {
    match super::relative_depth(layer.layer, blocks) {
        Some(d) => Cell::with_raw(format!("{d:.2}"), format!("{d}")),
        None => Cell::text("head"),
    }
}

fn layer_row(m: &MarkovRun, set: &ClassSet, layer: &LayerTest) -> Vec<Cell> {
    vec![
        model_cell(m.family, m.size),
        Cell::text(set.name.clone()),
        Cell::with_raw(set.classes.to_string(), set.classes.to_string()),
        Cell::text(layer.layer_name.clone()),
        depth_cell(layer, m.summary.blocks),
        number(layer.mu_sem, 3),
        number(layer.mu_pop, 3),
        number(layer.sigma_pop, 3),
        number(layer.d, 2),
        number(layer.p_holm, 4),
    ]
}

fn layers(split: &str, runs: &[&MarkovRun]) -> Table {
    let columns = vec![
        Column::left("Model"),
        Column::left("Classes"),
        Column::right("n"),
        Column::left("Layer"),
        Column::right("ℓ/L"),
        Column::right("Within-class cosine"),
        Column::right("Population cosine"),
        Column::right("Population s.d."),
        Column::right("d"),
        Column::right("p (Holm)"),
    ];
    let rows = runs
        .iter()
        .flat_map(|m| {
            m.summary
                .sets
                .iter()
                .flat_map(move |set| set.layers.iter().map(move |l| layer_row(m, set, l)))
        })
        .collect();
    Table {
        id: format!("beyond_markov_{}", file_safe(split)),
        label: format!("Beyond: path independence ({split})"),
        title: format!(
            "Do hidden states depend only on the state reached? Cosine similarity of hidden \
             states within classes of move orders reaching the same state against random \
             pairs, layer by layer, on {split}"
        ),
        columns,
        rows,
        notes: vec![NOTE.to_owned(), DASH_NOTE.to_owned()],
        sources: sources(runs.iter().map(|m| &m.origin)),
    }
}

fn outputs(split: &str, runs: &[&MarkovRun]) -> Table {
    let columns = vec![
        Column::left("Model"),
        Column::left("Classes"),
        Column::right("n"),
        Column::right("Members"),
        Column::right("Same prediction (%)"),
        Column::right("Same exactness (%)"),
        Column::right("ExactState, first (%)"),
        Column::right("ExactState, others (%)"),
        Column::right("Δ (pt)"),
    ];
    let rows = runs
        .iter()
        .flat_map(|m| {
            m.summary.sets.iter().map(move |set| {
                let delta = match (set.exact_first, set.exact_others) {
                    (Some(a), Some(b)) => Some((a - b) * 100.0),
                    _ => None,
                };
                vec![
                    model_cell(m.family, m.size),
                    Cell::text(set.name.clone()),
                    Cell::with_raw(set.classes.to_string(), set.classes.to_string()),
                    Cell::with_raw(set.members.to_string(), set.members.to_string()),
                    pct(set.prediction_agreement),
                    pct(set.exact_agreement),
                    pct(set.exact_first),
                    pct(set.exact_others),
                    number(delta, 2),
                ]
            })
        })
        .collect();
    Table {
        id: format!("beyond_transposition_{}", file_safe(split)),
        label: format!("Beyond: transpositions ({split})"),
        title: format!(
            "Does the model answer the same for move orders reaching the same state? Per class \
             set on {split}: classes whose members' 75 predicted labels are identical, whose \
             members are all exact or all not, and ExactState of the games' own orders (first) \
             and the other members"
        ),
        columns,
        rows,
        notes: vec![NOTE.to_owned(), DASH_NOTE.to_owned()],
        sources: sources(runs.iter().map(|m| &m.origin)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use cwm_formats::Versioned;
    use cwm_formats::markov::{MarkovSummary, SET_NATURAL, SET_SWAP};
    use cwm_models::{Family, Size};

    use super::*;
    use crate::inputs::Origin;

    /// A test of `family` with `blocks` blocks: d = 0.5 + ℓ in the swap set, undefined in the
    /// natural set (no class).
    pub(crate) fn run(family: Family, blocks: u32) -> MarkovRun {
        let layer = |l: u32, defined: bool| LayerTest {
            layer: l,
            layer_name: cwm_models::layer_name(l as usize, blocks as usize),
            mu_sem: defined.then_some(0.8),
            mu_pop: Some(0.2),
            sigma_pop: Some(0.1),
            d: defined.then_some(0.5 + f64::from(l)),
            p: defined.then_some(0.001),
            p_holm: defined.then_some(0.004),
        };
        let set = |name: &str, classes: u64, defined: bool| ClassSet {
            name: name.into(),
            classes,
            members: classes * 2,
            within_pairs: classes,
            prediction_agreement: defined.then_some(0.25),
            exact_agreement: defined.then_some(0.5),
            exact_first: defined.then_some(0.3),
            exact_others: defined.then_some(0.2),
            layers: (0..=blocks + 1).map(|l| layer(l, defined)).collect(),
        };
        MarkovRun {
            origin: Origin {
                instance: format!("markov[arch={}]", family.name()),
                kind: "markov".into(),
                hash: format!("hash-{}", family.name()),
            },
            family,
            size: Size::D128,
            summary: MarkovSummary {
                version: MarkovSummary::VERSION,
                kind: "markov".into(),
                arch: family.name().into(),
                size: "d128".into(),
                model_hash: Some(format!("model-{}", family.name())),
                split: "test_real".into(),
                blocks,
                games: 10,
                population_pairs: 100,
                permutations: 10,
                sets: vec![set(SET_NATURAL, 0, false), set(SET_SWAP, 12, true)],
            },
        }
    }

    pub(crate) fn inputs() -> Inputs {
        Inputs {
            markov: vec![run(Family::Slice, 1), run(Family::Transformer, 2)],
            ..Inputs::default()
        }
    }

    fn texts(row: &[Cell]) -> Vec<String> {
        row.iter().map(|c| c.text.clone()).collect()
    }

    #[test]
    fn one_row_per_model_set_and_layer_in_paper_order() {
        let tables = markov_tables(&inputs());
        let ids: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            ["beyond_markov_test_real", "beyond_transposition_test_real"]
        );
        // Transformer: 2 sets × 4 layers, then SLiCE: 2 × 3.
        assert_eq!(tables[0].rows.len(), 14);
        assert_eq!(texts(&tables[0].rows[0])[1..3], ["natural", "0"]);
        assert_eq!(texts(&tables[0].rows[0])[5], "–");
        assert_eq!(
            texts(&tables[0].rows[5]),
            [
                "Transformer d128/l1",
                "swap",
                "12",
                "block 1",
                "0.50",
                "0.800",
                "0.200",
                "0.100",
                "1.50",
                "0.0040"
            ]
        );
        assert_eq!(texts(&tables[0].rows[7])[3..5], ["head input", "head"]);
    }

    #[test]
    fn the_output_table_gives_agreement_and_the_exactstate_gap() {
        let tables = markov_tables(&inputs());
        let t = &tables[1];
        assert_eq!(t.rows.len(), 4);
        assert_eq!(
            texts(&t.rows[1]),
            [
                "Transformer d128/l1",
                "swap",
                "12",
                "24",
                "25.00",
                "50.00",
                "30.00",
                "20.00",
                "10.00"
            ]
        );
        assert_eq!(texts(&t.rows[0])[4..], ["–", "–", "–", "–", "–"]);
    }

    #[test]
    fn unchosen_floors_leave() {
        let mut inputs = inputs();
        keep_chosen_floor_markov(&mut inputs, &BTreeSet::from(["model-slice".to_owned()]));
        assert_eq!(inputs.markov.len(), 1);
        assert_eq!(inputs.markov[0].family, Family::Transformer);
    }
}
