//! The `edit` stage: can a piece be removed from a model's board by adding a vector to its
//! hidden state, and does the removal last over the plies that follow (beyond-spec E11)?
//!
//! * **Inputs** `model` (a `train` artifact or a checkpoint directory), `probes` (a `probe`
//!   artifact of the same model: its weights give the probe directions), `data` (a `tokenize`
//!   artifact, typically the real test split).
//! * **Params** `split` (its label), `cases` (1,000 per variant), `horizon` (K = 8 plies),
//!   `alphas` (0.5, 1, 2, 4, 8), `probe_set` (`id`), `seed`, `batch_size`, `max_games`,
//!   `device`, `threads`.
//! * **Output** `out`: `summary.json` ([`cwm_formats::edit::EditSummary`]).
//!
//! Cases ([`cases`]) are drawn from the games; each batch of cases runs once unedited and
//! once per layer ℓ = 0..L − 1 (every layer with a block after it), vector ([`vectors`]) and
//! α with the edit added at the case's step t only ([`batch`]); what each edit did is counted
//! in [`tally`]. The unedited pass is the `none` row of every layer.

pub mod batch;
pub mod cases;
pub mod tally;
pub mod vectors;

use std::path::Path;

use burn::prelude::*;
use cwm_chess::encode::{EpConvention, StateLabels};
use cwm_formats::Versioned;
use cwm_formats::edit::{EditRow, EditSummary, KIND, SUMMARY_FILE, VECTOR_NONE, VariantCases};
use cwm_models::{Model, StateModel, layer_name};
use cwm_stage::Progress;
use cwm_stage_data::{ShardReader, TokenizedGame};

use self::batch::{Batch, Unedited};
use self::cases::{Case, CaseOptions, PATCH_PLIES, Variant, draw_cases, state_at};
use self::tally::{Grading, Tally};
use self::vectors::{Vector, direction, random_key, scaled};
use crate::ProbeError;
use crate::linear::LinearProbe;
use crate::weights::read_weights;

/// The α of the probing paper's sweep.
pub const DEFAULT_ALPHAS: [f64; 5] = [0.5, 1.0, 2.0, 4.0, 8.0];

/// What to edit and how.
#[derive(Debug, Clone, PartialEq)]
pub struct EditOptions {
    /// The split label written into the summary.
    pub split: String,
    /// Cases per variant, the horizon and the seed (the en-passant convention is read from
    /// the games).
    pub cases: CaseOptions,
    /// The scales tried.
    pub alphas: Vec<f64>,
    /// The probe set whose weights give the directions (`id` or `ood`).
    pub probe_set: String,
    /// Cases per forward pass (at least 1).
    pub batch_size: usize,
    /// Read at most this many games (0 = all).
    pub max_games: u64,
    /// The device, by name.
    pub device: String,
    /// Worker threads for the backend (0 = rayon's default).
    pub threads: usize,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
    /// The probe artifact's hash, when known.
    pub probe_hash: Option<String>,
}

/// The stage's three inputs.
#[derive(Debug, Clone, Copy)]
pub struct EditInputs<'a> {
    /// A train artifact or checkpoint directory.
    pub model: &'a Path,
    /// A probe artifact of that model.
    pub probes: &'a Path,
    /// A tokenize artifact.
    pub data: &'a Path,
}

/// Runs the editing experiment and writes the summary into `out`.
///
/// # Errors
/// [`ProbeError`] for a missing checkpoint or probe, probes of another width, unreadable
/// games, bad options, write errors or cancellation.
pub fn edit(
    inputs: EditInputs<'_>,
    out: &Path,
    options: &EditOptions,
    progress: &Progress,
    log: &(dyn Fn(&str) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<EditSummary, ProbeError> {
    if options.batch_size == 0 || options.alphas.is_empty() {
        return Err(ProbeError::Invalid(
            "batch_size must be positive and alphas not empty".into(),
        ));
    }
    let ep = ep_of(inputs.data)?;
    crate::probe::with_model(
        inputs.model,
        out,
        &options.device,
        options.threads,
        |model, config, device| {
            let games = crate::markov::read_games(inputs.data, options.max_games)?;
            let probes = layer_probes(inputs.probes, &options.probe_set, model)?;
            let case_options = CaseOptions {
                ep,
                ..options.cases
            };
            let drawn: Vec<(Variant, Vec<Case>, u64)> = Variant::ALL
                .into_iter()
                .map(|v| {
                    let (cases, rejected) = draw_cases(&games, v, &case_options);
                    (v, cases, rejected)
                })
                .collect();
            progress.set_total(drawn.iter().map(|(_, c, _)| c.len() as u64).sum());
            let run = Experiment {
                model,
                games: &games,
                probes: &probes,
                options,
                device,
                progress,
                cancelled,
            };
            let mut rows = Vec::new();
            for (variant, cases, rejected) in &drawn {
                log(&format!(
                    "{}: {} cases ({rejected} steps gave none)",
                    variant.name(),
                    cases.len()
                ));
                let variant_rows = run.variant(*variant, cases)?;
                log(&best_line(&variant_rows));
                rows.extend(variant_rows);
            }
            let summary = EditSummary {
                version: EditSummary::VERSION,
                kind: KIND.to_owned(),
                arch: config.family.name().to_owned(),
                size: config.size.name().to_owned(),
                model_hash: options.model_hash.clone(),
                probe_hash: options.probe_hash.clone(),
                probe_set: options.probe_set.clone(),
                split: options.split.clone(),
                blocks: model.blocks() as u32,
                games: games.len() as u64,
                horizon: options.cases.horizon as u32,
                alphas: options.alphas.clone(),
                cases: drawn
                    .iter()
                    .map(|(v, cases, rejected)| VariantCases {
                        variant: v.name().to_owned(),
                        cases: cases.len() as u64,
                        rejected_steps: *rejected,
                    })
                    .collect(),
                rows,
            };
            cwm_formats::write_json(&out.join(SUMMARY_FILE), &summary)?;
            Ok(summary)
        },
    )
}

/// The en-passant convention the games at `data` were labelled with.
fn ep_of(data: &Path) -> Result<EpConvention, ProbeError> {
    match ShardReader::ep_convention(data)? {
        None => Ok(EpConvention::default()),
        Some(name) => EpConvention::from_name(&name).ok_or_else(|| {
            ProbeError::Invalid(format!(
                "{}: unknown en-passant convention {name:?}",
                data.display()
            ))
        }),
    }
}

/// The probes of `set` at layers 0..L − 1 of `model`, layer 0 first.
fn layer_probes(dir: &Path, set: &str, model: &Model) -> Result<Vec<LinearProbe>, ProbeError> {
    let [d, _] = model.head().weight.dims();
    let all = read_weights(dir)?;
    (0..model.blocks())
        .map(|layer| {
            let found = all
                .iter()
                .find(|p| p.set == set && p.layer as usize == layer)
                .ok_or_else(|| {
                    ProbeError::Invalid(format!(
                        "{}: no {set} probe at layer {layer}",
                        dir.display()
                    ))
                })?;
            if found.probe.d != d {
                return Err(ProbeError::Invalid(format!(
                    "{}: the probes are {} wide, the model {d}: probes of another model?",
                    dir.display(),
                    found.probe.d
                )));
            }
            Ok(found.probe.clone())
        })
        .collect()
}

/// One log line per variant: the strongest probe edit (by flips among held cases) beside
/// random at the same α.
fn best_line(rows: &[EditRow]) -> String {
    let flip = |r: &EditRow| r.flip_held.unwrap_or(0.0);
    let best = rows
        .iter()
        .filter(|r| r.vector.starts_with("probe"))
        .max_by(|a, b| flip(a).total_cmp(&flip(b)));
    let Some(best) = best else {
        return "no probe edits".to_owned();
    };
    let random = rows
        .iter()
        .find(|r| r.vector == "random" && r.layer == best.layer && r.alpha == best.alpha);
    format!(
        "  best: {} at {} α {}: flip {:.3} of {} held, argmax agreement {:.3}; random there: flip {:.3}",
        best.vector,
        best.layer_name,
        best.alpha,
        flip(best),
        best.held,
        best.argmax_agreement.unwrap_or(0.0),
        random.map_or(0.0, flip)
    )
}

/// One model's editing run.
struct Experiment<'a> {
    model: &'a Model,
    games: &'a [TokenizedGame],
    probes: &'a [LinearProbe],
    options: &'a EditOptions,
    device: &'a Device,
    progress: &'a Progress,
    cancelled: &'a (dyn Fn() -> bool + Sync),
}

/// The edits of a run: (layer, vector, α index), layer-major.
fn edits(layers: usize, alphas: usize) -> Vec<(usize, Vector, usize)> {
    (0..layers)
        .flat_map(|l| Vector::ALL.into_iter().map(move |v| (l, v)))
        .flat_map(|(l, v)| (0..alphas).map(move |a| (l, v, a)))
        .collect()
}

impl Experiment<'_> {
    /// Every row of one variant: per layer the `none` row, then each vector and α.
    fn variant(&self, variant: Variant, cases: &[Case]) -> Result<Vec<EditRow>, ProbeError> {
        let layers = self.probes.len();
        let edits = edits(layers, self.options.alphas.len());
        let followed = variant.followed(self.options.cases.horizon);
        let mut none = Tally::default();
        let mut tallies = vec![Tally::default(); edits.len()];
        let mut sorted: Vec<&Case> = cases.iter().collect();
        sorted.sort_by_key(|c| (c.t, c.game));
        for chunk in sorted.chunks(self.options.batch_size) {
            if (self.cancelled)() {
                return Err(ProbeError::Cancelled);
            }
            let chunk: Vec<Case> = chunk.iter().map(|&c| c.clone()).collect();
            self.count(&chunk, followed, &edits, &mut none, &mut tallies)?;
            self.progress.inc(chunk.len() as u64);
        }
        let name = variant.name();
        let mut rows = Vec::with_capacity(layers * (edits.len() + 1));
        for layer in 0..layers {
            let named = (layer as u32, layer_name(layer, self.model.blocks()));
            rows.push(none.row(name, (named.0, &named.1), VECTOR_NONE, 0.0));
            for (tally, &(l, vector, a)) in tallies.iter().zip(&edits) {
                if l == layer {
                    let alpha = self.options.alphas[a];
                    rows.push(tally.row(name, (named.0, &named.1), vector.name(), alpha));
                }
            }
        }
        Ok(rows)
    }

    /// Runs one batch of cases unedited and under every edit, and counts what each did.
    fn count(
        &self,
        cases: &[Case],
        followed: usize,
        edits: &[(usize, Vector, usize)],
        none: &mut Tally,
        tallies: &mut [Tally],
    ) -> Result<(), ProbeError> {
        let batch = Batch::new(self.model, self.games, cases, followed, self.device);
        let unedited = batch.unedited(self.model, self.probes.len())?;
        for (b, case) in cases.iter().enumerate() {
            let real = self.real_states(case, followed);
            let grading = Grading {
                target: &case.targets[0],
                later: &real,
            };
            let readout = &unedited.readouts[b];
            none.add(
                (case.square, case.piece),
                &readout.labels[0],
                readout,
                grading,
            );
        }
        for (tally, &(layer, vector, a)) in tallies.iter_mut().zip(edits) {
            let alpha = self.options.alphas[a];
            let delta = self.delta(&batch, cases, &unedited, (layer, vector, alpha));
            let edited = batch.edited(self.model, layer, delta)?;
            for (b, case) in cases.iter().enumerate() {
                let patch_target = state_at(&self.games[case.game], case.t + PATCH_PLIES);
                let grading = match vector {
                    Vector::Patch => Grading {
                        target: &patch_target,
                        later: &[],
                    },
                    _ => Grading {
                        target: &case.targets[0],
                        later: &case.targets[1..],
                    },
                };
                let at_t = &unedited.readouts[b].labels[0];
                tally.add((case.square, case.piece), at_t, &edited[b], grading);
            }
        }
        Ok(())
    }

    /// The real states at t + 1..=t + `followed` of `case`'s game.
    fn real_states(&self, case: &Case, followed: usize) -> Vec<StateLabels> {
        let game = &self.games[case.game];
        (1..=followed).map(|k| state_at(game, case.t + k)).collect()
    }

    /// The edit of every case of the batch for one (layer, vector, α).
    fn delta(
        &self,
        batch: &Batch,
        cases: &[Case],
        unedited: &Unedited,
        (layer, vector, alpha): (usize, Vector, f64),
    ) -> Vec<f32> {
        let [d, _] = self.model.head().weight.dims();
        batch.delta(|b| {
            let case = &cases[b];
            let h = &unedited.at_t[layer][b * d..(b + 1) * d];
            let patch = &unedited.patch[layer][b * d..(b + 1) * d];
            let key = random_key(
                self.options.cases.seed,
                &self.games[case.game].id,
                case,
                layer,
            );
            let v = direction(vector, case, &self.probes[layer], patch, key);
            Some(scaled(h, &v, alpha))
        })
    }
}
