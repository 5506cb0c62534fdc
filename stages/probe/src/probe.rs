//! The `probe` stage: linear board probes on every layer of one model (beyond-spec E9).
//!
//! * **Inputs** `model` (a `train` artifact or a checkpoint directory), `fit` (a `tokenize`
//!   artifact of the model's training games), `fit_ood` (optional: a `tokenize` artifact of
//!   random legal games of another seed than any test split) and `eval` (one or more
//!   `tokenize` artifacts, labelled by the `splits` param in the same order).
//! * **Params** `splits`, `steps_per_game` (5), `sampling` (`uniform` or `last`), `epochs`
//!   (15), `lr` (1e-3), `probe_batch` (256 vectors per Adam step), `patience` (3), `aux`
//!   (false: the 64 squares only; true: also the 11 auxiliary labels), `seed`, `batch_size`
//!   (32 games per forward pass), `max_games` (0 = all, per input), `device`, `threads`.
//! * **Output** `out`: `summary.json` ([`cwm_formats::probe::ProbeSummary`]) and the weights,
//!   `probes.json` + `probes.bin` ([`crate::weights`]).
//!
//! For each set (`id` from `fit`, `ood` from `fit_ood`) the stage reads the sampled steps'
//! hidden states at every layer ℓ = 0..=L + 1, holds out one game in ten as the validation
//! slice, and fits one probe per layer ([`crate::fit`]). Each evaluated split is read with
//! the same sampling; every probe is scored on it, beside the model's own head and the
//! per-square, per-ply-bin majority class of the `id` vectors ([`crate::score`]).

use std::path::{Path, PathBuf};

use burn::prelude::*;
use cwm_formats::Versioned;
use cwm_formats::probe::{
    KIND, LayerFit, ProbeFit, ProbeResult, ProbeSummary, SET_ID, SET_OOD, SUMMARY_FILE,
    SplitBaseline,
};
use cwm_models::{Model, ModelConfig, N_LABELS, layer_name, load_model};
use cwm_stage::Progress;
use cwm_stage_data::ShardReader;

use crate::ProbeError;
use crate::collect::{CollectOptions, Vectors, collect};
use crate::fit::{FitData, FitOptions, fit_probe};
use crate::linear::labels_of;
use crate::score::{Majority, SQUARES, score};
use crate::weights::{NamedProbe, write_weights};

/// What to probe and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeOptions {
    /// Which steps of each game, from which games.
    pub collect: CollectOptions,
    /// How each probe is fitted (its `groups` says whether the auxiliary labels are read).
    pub fit: FitOptions,
    /// The device, by name (`cpu`, `cuda`, `cuda:N`).
    pub device: String,
    /// Worker threads for the backend (0 = rayon's default).
    pub threads: usize,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
}

/// Where the games come from.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeInputs {
    /// The model: a `train` artifact or a checkpoint directory.
    pub model: PathBuf,
    /// Tokenized training games (the `id` probes).
    pub fit: PathBuf,
    /// Tokenized random games (the `ood` probes), if any.
    pub fit_ood: Option<PathBuf>,
    /// The evaluated splits: label and tokenized games.
    pub eval: Vec<(String, PathBuf)>,
}

/// One set of fitted probes, ℓ = 0 first.
struct ProbeSet {
    name: &'static str,
    probes: Vec<crate::linear::LinearProbe>,
    fit: ProbeFit,
}

/// Fits and scores the probes of `inputs.model` and writes them and the summary into `out`.
///
/// # Errors
/// [`ProbeError`] for a missing checkpoint, unreadable games, bad options, write errors or
/// cancellation.
pub fn probe(
    inputs: &ProbeInputs,
    out: &Path,
    options: &ProbeOptions,
    progress: &Progress,
    log: &(dyn Fn(&str) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<ProbeSummary, ProbeError> {
    with_model(
        &inputs.model,
        out,
        &options.device,
        options.threads,
        |model, config, device| {
            progress.set_total(games_to_read(inputs, options.collect.max_games));
            let run = Run {
                model,
                options,
                device,
                progress,
                log,
                cancelled,
            };
            run.all(inputs, config, out)
        },
    )
}

/// Creates `out`, starts `threads` worker threads (0 = rayon's default) and runs `f` in them
/// with the checkpoint of `model` loaded onto the device named `device`.
///
/// # Errors
/// [`ProbeError`] for a missing or bad checkpoint, an unknown device or an unwritable `out`;
/// whatever `f` returns.
pub fn with_model<T: Send>(
    model: &Path,
    out: &Path,
    device: &str,
    threads: usize,
    f: impl FnOnce(&Model, &ModelConfig, &Device) -> Result<T, ProbeError> + Send,
) -> Result<T, ProbeError> {
    let checkpoint = checkpoint_of(model)?;
    std::fs::create_dir_all(out).map_err(|e| ProbeError::io(out, e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| ProbeError::Invalid(format!("cannot start {threads} threads: {e}")))?;
    pool.install(|| {
        let device =
            cwm_models::device_by_name(device).map_err(|e| ProbeError::model("device", e))?;
        let (model, config) = load_model(&checkpoint, &device)
            .map_err(|e| ProbeError::model(checkpoint.display().to_string(), e))?;
        f(&model, &config, &device)
    })
}

/// The checkpoint directory of a `train` artifact or of a checkpoint itself.
///
/// # Errors
/// [`ProbeError::Invalid`] naming `model` when it holds none.
pub fn checkpoint_of(model: &Path) -> Result<PathBuf, ProbeError> {
    cwm_models::checkpoint::find_checkpoint(model).ok_or_else(|| {
        ProbeError::Invalid(format!(
            "{}: holds no checkpoint (model.json, or checkpoint/model.json)",
            model.display()
        ))
    })
}

/// Games the stage will read, for the progress bar (unknown counts as 0).
fn games_to_read(inputs: &ProbeInputs, max_games: u64) -> u64 {
    let paths = std::iter::once(&inputs.fit)
        .chain(&inputs.fit_ood)
        .chain(inputs.eval.iter().map(|(_, p)| p));
    paths
        .map(|p| {
            let n = ShardReader::count_games(p).unwrap_or(0);
            if max_games == 0 { n } else { n.min(max_games) }
        })
        .sum()
}

/// One model's probing run.
struct Run<'a> {
    model: &'a Model,
    options: &'a ProbeOptions,
    device: &'a Device,
    progress: &'a Progress,
    log: &'a (dyn Fn(&str) + Sync),
    cancelled: &'a (dyn Fn() -> bool + Sync),
}

impl Run<'_> {
    fn all(
        &self,
        inputs: &ProbeInputs,
        config: &ModelConfig,
        out: &Path,
    ) -> Result<ProbeSummary, ProbeError> {
        let blocks = cwm_models::StateModel::blocks(self.model);
        let id = self.read(&inputs.fit, "fit")?;
        let majority = Majority::fit(&id.labels, &id.steps, &(0..id.len()).collect::<Vec<_>>());
        let d = id.d;
        let mut sets = vec![self.fit_set(SET_ID, &id, blocks)?];
        drop(id);
        if let Some(path) = &inputs.fit_ood {
            let ood = self.read(path, "fit_ood")?;
            sets.push(self.fit_set(SET_OOD, &ood, blocks)?);
        }
        let mut baselines = Vec::new();
        let mut results = Vec::new();
        for (split, path) in &inputs.eval {
            let vectors = self.read(path, split)?;
            baselines.push(baseline(split, &vectors, &majority));
            for set in &sets {
                results.extend(self.score_set(set, split, &vectors, blocks)?);
            }
        }
        let named: Vec<NamedProbe> = sets
            .iter()
            .flat_map(|set| {
                set.probes
                    .iter()
                    .enumerate()
                    .map(|(layer, probe)| NamedProbe {
                        set: set.name.to_owned(),
                        layer: layer as u32,
                        probe: probe.clone(),
                    })
            })
            .collect();
        write_weights(out, d, self.options.fit.groups, &named)?;
        let summary = ProbeSummary {
            version: ProbeSummary::VERSION,
            kind: KIND.to_owned(),
            arch: config.family.name().to_owned(),
            size: config.size.name().to_owned(),
            model_hash: self.options.model_hash.clone(),
            blocks: blocks as u32,
            d_model: d as u32,
            sampling: self.options.collect.sampling.name().to_owned(),
            steps_per_game: self.options.collect.steps_per_game as u32,
            aux: self.options.fit.groups > 1,
            fits: sets.into_iter().map(|s| s.fit).collect(),
            baselines,
            results,
        };
        cwm_formats::write_json(&out.join(SUMMARY_FILE), &summary)?;
        Ok(summary)
    }

    /// The vectors of the games at `path`.
    fn read(&self, path: &Path, what: &str) -> Result<Vectors, ProbeError> {
        self.progress.set_message(format!("reading {what}"));
        let vectors = collect(
            self.model,
            path,
            &self.options.collect,
            self.device,
            self.progress,
            self.cancelled,
        )?;
        (self.log)(&format!(
            "{what}: {} games, {} vectors of width {}",
            vectors.games,
            vectors.len(),
            vectors.d
        ));
        Ok(vectors)
    }

    /// One probe per layer, fitted on `vectors`.
    fn fit_set(
        &self,
        name: &'static str,
        vectors: &Vectors,
        blocks: usize,
    ) -> Result<ProbeSet, ProbeError> {
        let (train, val) = vectors.fit_and_val_rows();
        let mut probes = Vec::with_capacity(vectors.layers.len());
        let mut layers: Vec<LayerFit> = Vec::with_capacity(vectors.layers.len());
        for (layer, x) in vectors.layers.iter().enumerate() {
            self.progress
                .set_message(format!("fitting {name} probe, layer {layer}"));
            let data = FitData {
                x,
                d: vectors.d,
                labels: &vectors.labels,
                train: &train,
                val: &val,
            };
            let (probe, fit) = fit_probe(
                data,
                &self.options.fit,
                layer as u32,
                self.device,
                self.cancelled,
            )?;
            (self.log)(&format!(
                "{name} probe, {}: epoch {} of {} kept, val loss {}",
                layer_name(layer, blocks),
                fit.best_epoch,
                fit.epochs,
                fit.val_loss.map_or("-".to_owned(), |l| format!("{l:.4}"))
            ));
            probes.push(probe);
            layers.push(fit);
        }
        Ok(ProbeSet {
            name,
            probes,
            fit: ProbeFit {
                set: name.to_owned(),
                games: vectors.games,
                vectors: train.len() as u64,
                val_vectors: val.len() as u64,
                layers,
            },
        })
    }

    /// Every probe of `set` scored on `vectors`.
    fn score_set(
        &self,
        set: &ProbeSet,
        split: &str,
        vectors: &Vectors,
        blocks: usize,
    ) -> Result<Vec<ProbeResult>, ProbeError> {
        let rows: Vec<usize> = (0..vectors.len()).collect();
        let width = labels_of(self.options.fit.groups);
        let mut results = Vec::with_capacity(set.probes.len());
        for (layer, (probe, x)) in set.probes.iter().zip(&vectors.layers).enumerate() {
            let pred = probe.predict(x, &rows, self.device)?;
            let scores = score(&pred, width, &vectors.labels, &vectors.steps);
            (self.log)(&format!(
                "{split}: {} probe, {}: square accuracy {}",
                set.name,
                layer_name(layer, blocks),
                scores
                    .square_acc
                    .map_or("-".to_owned(), |a| format!("{:.4}", a))
            ));
            results.push(ProbeResult {
                set: set.name.to_owned(),
                split: split.to_owned(),
                layer: layer as u32,
                layer_name: layer_name(layer, blocks),
                scores,
            });
        }
        Ok(results)
    }
}

/// The model's own head and the majority class on `vectors`.
fn baseline(split: &str, vectors: &Vectors, majority: &Majority) -> SplitBaseline {
    let trivial: Vec<u8> = vectors
        .steps
        .iter()
        .flat_map(|&t| majority.predict(t).to_vec())
        .collect();
    SplitBaseline {
        split: split.to_owned(),
        games: vectors.games,
        vectors: vectors.len() as u64,
        head: score(&vectors.head, N_LABELS, &vectors.labels, &vectors.steps),
        majority: score(&trivial, SQUARES, &vectors.labels, &vectors.steps),
    }
}
