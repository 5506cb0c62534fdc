//! The tables of the layer probes (E9), from `probe` artifacts, one pair per split:
//!
//! * `beyond_probes_<split>`: per model and layer, the `id` probe's square accuracy, weighted
//!   F1 and board-exact rate, and the `ood` probe's square accuracy and board-exact rate;
//! * `beyond_probe_baselines_<split>`: per model, what the probes are measured against: the
//!   model's own head and the per-square majority class at the same steps, beside the best
//!   `id` and `ood` layer.
//!
//! Percentages with two decimals; `–` where a value is undefined (no vectors) or the probe
//! set was not fitted; the CSV has the full-precision value.

use std::collections::BTreeSet;

use cwm_formats::probe::{ProbeResult, ProbeSummary, SET_ID, SET_OOD, SquareScores};

use super::{file_safe, model_cell, paper_rank, share_cell as pct, sources, split_order};
use crate::inputs::{Inputs, ProbeRun};
use crate::table::{Cell, Column, Table};

/// How to read an `ood` probe against the head.
const OOD_NOTE: &str = "ID probes are fitted on the model's training games, OOD probes on random \
                        games of another seed. An OOD probe at the head input that beats the \
                        model's own head on random games means the state is represented but \
                        misread; if no layer does better, the state itself is lost.";
/// What `–` means here.
const DASH_NOTE: &str = "`–`: not defined (no vectors), or that probe set was not fitted.";

/// Leaves out of `inputs.probes` the probes of the models in `dropped_models` (train artifact
/// hashes of the floors no selection chose), so that the probe tables show the same models as
/// the test tables.
pub fn keep_chosen_floor_probes(inputs: &mut Inputs, dropped_models: &BTreeSet<String>) {
    super::drop_models(
        &mut inputs.probes,
        |p| p.summary.model_hash.as_ref(),
        dropped_models,
    );
}

/// The probe runs scored on each split, splits in report order, runs in the paper's order of
/// families then by size (then instance name).
pub fn probe_runs(inputs: &Inputs) -> Vec<(String, Vec<&ProbeRun>)> {
    let splits = split_order(
        inputs
            .probes
            .iter()
            .flat_map(|p| p.summary.baselines.iter().map(|b| b.split.clone())),
    );
    splits
        .into_iter()
        .map(|split| {
            let mut runs: Vec<&ProbeRun> = inputs
                .probes
                .iter()
                .filter(|p| p.summary.baselines.iter().any(|b| b.split == split))
                .collect();
            runs.sort_by_key(|p| (paper_rank(p.family), p.size, p.origin.instance.clone()));
            (split, runs)
        })
        .collect()
}

/// Both probe tables of every split.
pub fn probe_tables(inputs: &Inputs) -> Vec<Table> {
    probe_runs(inputs)
        .into_iter()
        .flat_map(|(split, runs)| [layers(&split, &runs), baselines(&split, &runs)])
        .collect()
}

/// The result of `set` at `layer` on `split`.
pub fn result<'a>(
    summary: &'a ProbeSummary,
    set: &str,
    split: &str,
    layer: u32,
) -> Option<&'a ProbeResult> {
    summary
        .results
        .iter()
        .find(|r| r.set == set && r.split == split && r.layer == layer)
}

/// ℓ / L of `layer` in a model of `blocks` blocks; `None` for the head input.
pub fn relative_depth(layer: u32, blocks: u32) -> Option<f64> {
    (layer <= blocks && blocks > 0).then(|| f64::from(layer) / f64::from(blocks))
}

fn scores_of(r: Option<&ProbeResult>) -> Option<&SquareScores> {
    r.map(|r| &r.scores)
}

fn layers(split: &str, runs: &[&ProbeRun]) -> Table {
    let columns = vec![
        Column::left("Model"),
        Column::left("Layer"),
        Column::right("ℓ/L"),
        Column::right("Square acc. (%)").in_group("ID probe"),
        Column::right("Weighted F1 (%)").in_group("ID probe"),
        Column::right("Board exact (%)").in_group("ID probe"),
        Column::right("Square acc. (%)").in_group("OOD probe"),
        Column::right("Board exact (%)").in_group("OOD probe"),
    ];
    let mut rows = Vec::new();
    for p in runs {
        let s = &p.summary;
        for layer in 0..=s.blocks + 1 {
            let id = scores_of(result(s, SET_ID, split, layer));
            let ood = scores_of(result(s, SET_OOD, split, layer));
            let name = result(s, SET_ID, split, layer)
                .or(result(s, SET_OOD, split, layer))
                .map_or_else(|| format!("layer {layer}"), |r| r.layer_name.clone());
            let depth = relative_depth(layer, s.blocks).map_or_else(
                || Cell::text("head"),
                |d| Cell::with_raw(format!("{d:.2}"), format!("{d}")),
            );
            rows.push(vec![
                model_cell(p.family, p.size),
                Cell::text(name),
                depth,
                pct(id.and_then(|x| x.square_acc)),
                pct(id.and_then(|x| x.f1_w)),
                pct(id.and_then(|x| x.board_exact)),
                pct(ood.and_then(|x| x.square_acc)),
                pct(ood.and_then(|x| x.board_exact)),
            ]);
        }
    }
    Table {
        id: format!("beyond_probes_{}", file_safe(split)),
        label: format!("Beyond: probes ({split})"),
        title: format!(
            "Linear board probes on every layer, scored on {split}: the 64 squares' accuracy \
             (13 classes each), F1 weighted by the classes' true counts, and the share of steps \
             with all 64 squares right"
        ),
        columns,
        rows,
        notes: vec![OOD_NOTE.to_owned(), DASH_NOTE.to_owned()],
        sources: sources(runs.iter().map(|p| &p.origin)),
    }
}

/// The layer whose `set` probe reads the squares best on `split`: its name and accuracy.
fn best_layer(s: &ProbeSummary, set: &str, split: &str) -> Option<(String, f64)> {
    s.results
        .iter()
        .filter(|r| r.set == set && r.split == split)
        .filter_map(|r| Some((r.layer_name.clone(), r.scores.square_acc?)))
        .filter(|(_, acc)| acc.is_finite())
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

fn baselines(split: &str, runs: &[&ProbeRun]) -> Table {
    let columns = vec![
        Column::left("Model"),
        Column::right("Steps"),
        Column::right("Square acc. (%)").in_group("Model head"),
        Column::right("Board exact (%)").in_group("Model head"),
        Column::right("Square acc. (%)").in_group("Majority"),
        Column::left("Layer").in_group("Best ID probe"),
        Column::right("Square acc. (%)").in_group("Best ID probe"),
        Column::left("Layer").in_group("Best OOD probe"),
        Column::right("Square acc. (%)").in_group("Best OOD probe"),
    ];
    let rows = runs
        .iter()
        .filter_map(|p| {
            let s = &p.summary;
            let b = s.baselines.iter().find(|b| b.split == split)?;
            let best = |set: &str| -> [Cell; 2] {
                best_layer(s, set, split).map_or_else(
                    || [Cell::missing(), Cell::missing()],
                    |(name, acc)| [Cell::text(name), pct(Some(acc))],
                )
            };
            let [id_layer, id_acc] = best(SET_ID);
            let [ood_layer, ood_acc] = best(SET_OOD);
            Some(vec![
                model_cell(p.family, p.size),
                Cell::with_raw(b.vectors.to_string(), b.vectors.to_string()),
                pct(b.head.square_acc),
                pct(b.head.board_exact),
                pct(b.majority.square_acc),
                id_layer,
                id_acc,
                ood_layer,
                ood_acc,
            ])
        })
        .collect();
    Table {
        id: format!("beyond_probe_baselines_{}", file_safe(split)),
        label: format!("Beyond: probe baselines ({split})"),
        title: format!(
            "What the probes on {split} are measured against, at the same steps: the model's \
             own head, the most common class of each square in each 20-ply bin of the training \
             vectors, and the best layer of each probe set"
        ),
        columns,
        rows,
        notes: vec![OOD_NOTE.to_owned(), DASH_NOTE.to_owned()],
        sources: sources(runs.iter().map(|p| &p.origin)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use cwm_formats::Versioned;
    use cwm_formats::probe::{BinScore, SplitBaseline};
    use cwm_models::{Family, Size};

    use super::*;
    use crate::inputs::Origin;

    fn scores(acc: Option<f64>) -> SquareScores {
        SquareScores {
            square_acc: acc,
            precision_w: acc,
            recall_w: acc,
            f1_w: acc.map(|a| a * 0.9),
            board_exact: acc.map(|a| a / 10.0),
            aux_acc: None,
            by_bin: vec![BinScore {
                start: 0,
                end: 20,
                vectors: 5,
                square_acc: acc,
                board_exact: None,
            }],
        }
    }

    /// A probe run of `family` with `blocks` blocks; the `id` set scores 0.5 + 0.1 ℓ and the
    /// `ood` set (when `ood`) 0.4 + 0.1 ℓ on both splits.
    pub(crate) fn run(family: Family, blocks: u32, ood: bool) -> ProbeRun {
        let splits = ["test_random", "test_real"];
        let mut results = Vec::new();
        for split in splits {
            for (set, base) in [(SET_ID, 0.5), (SET_OOD, 0.4)] {
                if set == SET_OOD && !ood {
                    continue;
                }
                for layer in 0..=blocks + 1 {
                    results.push(ProbeResult {
                        set: set.into(),
                        split: split.into(),
                        layer,
                        layer_name: cwm_models::layer_name(layer as usize, blocks as usize),
                        scores: scores(Some(base + 0.1 * f64::from(layer))),
                    });
                }
            }
        }
        ProbeRun {
            origin: Origin {
                instance: format!("probe[arch={}]", family.name()),
                kind: "probe".into(),
                hash: format!("hash-{}", family.name()),
            },
            family,
            size: Size::D128,
            summary: ProbeSummary {
                version: ProbeSummary::VERSION,
                kind: "probe".into(),
                arch: family.name().into(),
                size: "d128".into(),
                model_hash: Some(format!("model-{}", family.name())),
                blocks,
                d_model: 128,
                sampling: "uniform".into(),
                steps_per_game: 5,
                aux: false,
                fits: vec![],
                baselines: splits
                    .iter()
                    .map(|split| SplitBaseline {
                        split: (*split).into(),
                        games: 10,
                        vectors: 50,
                        head: scores(Some(0.7)),
                        majority: scores(Some(0.55)),
                    })
                    .collect(),
                results,
            },
        }
    }

    pub(crate) fn inputs() -> Inputs {
        Inputs {
            probes: vec![
                run(Family::Slice, 1, false),
                run(Family::Transformer, 2, true),
            ],
            ..Inputs::default()
        }
    }

    fn texts(row: &[Cell]) -> Vec<String> {
        row.iter().map(|c| c.text.clone()).collect()
    }

    #[test]
    fn one_row_per_model_and_layer_in_paper_order_with_ood_dashes() {
        let tables = probe_tables(&inputs());
        let ids: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "beyond_probes_test_real",
                "beyond_probe_baselines_test_real",
                "beyond_probes_test_random",
                "beyond_probe_baselines_test_random"
            ]
        );
        let t = &tables[0];
        // Transformer (4 layers) before SLiCE (3 layers).
        assert_eq!(t.rows.len(), 7);
        assert_eq!(
            texts(&t.rows[1]),
            [
                "Transformer d128/l1",
                "block 1",
                "0.50",
                "60.00",
                "54.00",
                "6.00",
                "50.00",
                "5.00"
            ]
        );
        assert_eq!(texts(&t.rows[3])[1..3], ["head input", "head"]);
        let slice = texts(&t.rows[4]);
        assert!(slice[0].starts_with("SLiCE"), "{slice:?}");
        assert_eq!(slice[6..], ["–", "–"], "no ood set: dashes");
    }

    #[test]
    fn the_baselines_name_the_best_layer_of_each_set() {
        let tables = probe_tables(&inputs());
        let t = &tables[1];
        assert_eq!(
            texts(&t.rows[0]),
            [
                "Transformer d128/l1",
                "50",
                "70.00",
                "7.00",
                "55.00",
                "head input",
                "80.00",
                "head input",
                "70.00"
            ]
        );
        assert_eq!(texts(&t.rows[1])[7..], ["–", "–"]);
    }

    #[test]
    fn undefined_scores_print_a_dash_and_dropped_floors_leave() {
        let mut inputs = inputs();
        inputs.probes[0].summary.results[0].scores = scores(None);
        inputs.probes[0].summary.results[1].scores.square_acc = Some(f64::NAN);
        let tables = probe_tables(&inputs);
        let slice_rows: Vec<Vec<String>> = tables[2]
            .rows
            .iter()
            .map(|r| texts(r))
            .filter(|r| r[0].starts_with("SLiCE"))
            .collect();
        assert_eq!(slice_rows[0][3], "–");
        assert_eq!(slice_rows[1][3], "–");
        let dropped = BTreeSet::from(["model-slice".to_owned()]);
        keep_chosen_floor_probes(&mut inputs, &dropped);
        assert_eq!(inputs.probes.len(), 1);
        assert_eq!(inputs.probes[0].family, Family::Transformer);
    }

    #[test]
    fn relative_depth_runs_from_the_embedding_to_the_last_block() {
        assert_eq!(relative_depth(0, 4), Some(0.0));
        assert_eq!(relative_depth(2, 4), Some(0.5));
        assert_eq!(relative_depth(4, 4), Some(1.0));
        assert_eq!(relative_depth(5, 4), None);
        assert_eq!(relative_depth(0, 0), None);
    }
}
