//! The vectors probes read: a model's hidden states at every layer, at the sampled steps of
//! the games of a `tokenize` artifact, with each step's true labels and the model's own
//! prediction.
//!
//! Games stream `batch_games` at a time through one forward pass that records every layer
//! ([`cwm_models::features_by_layer`]); only the sampled positions are copied back. Memory
//! is the kept vectors: `n × d × (L + 2)` floats for `n` sampled steps.

use std::path::Path;

use burn::prelude::*;
use cwm_models::{LABEL_GROUPS, Model, N_LABELS, PAD_TOKEN, StateModel, features_by_layer};
use cwm_stage::Progress;
use cwm_stage_data::{ShardReader, TokenizedGame};

use crate::ProbeError;
use crate::linear::{argmax_labels, read_f32};
use crate::sample::{Sampling, game_key, in_val_slice, sample_steps};

/// Which games and steps to read.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectOptions {
    /// Steps drawn from each game.
    pub steps_per_game: usize,
    /// How they are drawn.
    pub sampling: Sampling,
    /// Seeds the draws and the validation slice.
    pub seed: u64,
    /// Games per forward pass (at least 1).
    pub batch_games: usize,
    /// Read at most this many games (0 = all).
    pub max_games: u64,
}

/// Hidden states at the sampled steps of a set of games.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Vectors {
    /// The width d.
    pub d: usize,
    /// Per layer ℓ = 0..=L + 1: `[n, d]` row-major.
    pub layers: Vec<Vec<f32>>,
    /// The 75 true labels of each vector.
    pub labels: Vec<u8>,
    /// The step t of each vector.
    pub steps: Vec<u32>,
    /// Whether each vector's game is in the validation slice.
    pub val: Vec<bool>,
    /// The model's own 75 predicted labels at each vector.
    pub head: Vec<u8>,
    /// Games read.
    pub games: u64,
}

impl Vectors {
    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The rows outside the validation slice and the rows in it.
    pub fn fit_and_val_rows(&self) -> (Vec<usize>, Vec<usize>) {
        (0..self.len()).partition(|&r| !self.val[r])
    }
}

/// Reads the games at `data` through `model` and keeps the hidden states of every layer at
/// the sampled steps.
///
/// # Errors
/// [`ProbeError::Data`] for unreadable shards; [`ProbeError::Invalid`] for a game whose labels
/// do not fit its moves; [`ProbeError::Readback`]; [`ProbeError::Cancelled`].
pub fn collect(
    model: &Model,
    data: &Path,
    options: &CollectOptions,
    device: &Device,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<Vectors, ProbeError> {
    if options.batch_games == 0 {
        return Err(ProbeError::Invalid("batch_size must be positive".into()));
    }
    let mut reader = ShardReader::open(data, options.batch_games)?;
    let [d, _] = model.head().weight.dims();
    let mut out = Vectors {
        d,
        layers: vec![Vec::new(); model.blocks() + 2],
        ..Vectors::default()
    };
    let mut batch = Vec::with_capacity(options.batch_games);
    loop {
        batch.clear();
        while batch.len() < options.batch_games
            && (options.max_games == 0 || out.games + (batch.len() as u64) < options.max_games)
        {
            match reader.next() {
                Some(game) => batch.push(game?),
                None => break,
            }
        }
        if batch.is_empty() {
            return Ok(out);
        }
        if cancelled() {
            return Err(ProbeError::Cancelled);
        }
        collect_batch(model, &batch, options, device, &mut out)?;
        out.games += batch.len() as u64;
        progress.inc(batch.len() as u64);
    }
}

/// One batch's sampled vectors, appended to `out`.
fn collect_batch(
    model: &Model,
    games: &[TokenizedGame],
    options: &CollectOptions,
    device: &Device,
    out: &mut Vectors,
) -> Result<(), ProbeError> {
    let mut index = Vec::new();
    for (b, game) in games.iter().enumerate() {
        if game.states.len() != game.moves.len() * N_LABELS {
            return Err(ProbeError::Invalid(format!(
                "game {:?}: {} moves but {} label bytes",
                game.id,
                game.moves.len(),
                game.states.len()
            )));
        }
        let key = game_key(&game.id);
        let val = in_val_slice(key, options.seed);
        let steps = sample_steps(
            game.moves.len(),
            options.steps_per_game,
            options.sampling,
            options.seed,
            key,
        );
        for t in steps {
            index.push((b, t));
            out.labels
                .extend_from_slice(&game.states[t * N_LABELS..(t + 1) * N_LABELS]);
            out.steps.push(t as u32);
            out.val.push(val);
        }
    }
    let sequences: Vec<&[u16]> = games.iter().map(|g| g.moves.as_slice()).collect();
    let hidden = hidden_at(model, &sequences, &index, device)?;
    for (kept, layer) in out.layers.iter_mut().zip(hidden.layers) {
        kept.extend(layer);
    }
    out.head.extend(hidden.head);
    Ok(())
}

/// Hidden states at chosen positions of a batch of sequences.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hidden {
    /// Per layer ℓ = 0..=L + 1: `[positions, d]` row-major, in the order asked.
    pub layers: Vec<Vec<f32>>,
    /// The model's 75 predicted labels at each position.
    pub head: Vec<u8>,
}

/// Runs `model` once over `sequences` (right-padded into one batch) and keeps every layer's
/// hidden state and the head's prediction at `positions`, each `(sequence, step)`.
///
/// # Errors
/// [`ProbeError::Invalid`] for a position outside its sequence; [`ProbeError::Readback`].
pub fn hidden_at(
    model: &Model,
    sequences: &[&[u16]],
    positions: &[(usize, usize)],
    device: &Device,
) -> Result<Hidden, ProbeError> {
    let seq = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
    let layers = model.blocks() + 2;
    if positions.is_empty() || seq == 0 {
        return Ok(Hidden {
            layers: vec![Vec::new(); layers],
            head: Vec::new(),
        });
    }
    let mut moves = vec![PAD_TOKEN; sequences.len() * seq];
    for (b, tokens) in sequences.iter().enumerate() {
        for (slot, &token) in moves[b * seq..].iter_mut().zip(*tokens) {
            *slot = i64::from(token);
        }
    }
    let mut index = Vec::with_capacity(positions.len());
    for &(b, t) in positions {
        if sequences.get(b).is_none_or(|s| t >= s.len()) {
            return Err(ProbeError::Invalid(format!(
                "position {t} of sequence {b} is outside the batch"
            )));
        }
        index.push((b * seq + t) as i64);
    }
    let [d, _] = model.head().weight.dims();
    let n = index.len();
    let moves = Tensor::<2, Int>::from_data(TensorData::new(moves, [sequences.len(), seq]), device);
    let index = Tensor::<1, Int>::from_data(TensorData::new(index, [n]), device);
    let mut out = Hidden {
        layers: Vec::with_capacity(layers),
        head: Vec::new(),
    };
    let mut head_input = None;
    for layer in features_by_layer(model, moves) {
        let rows = layer
            .reshape([sequences.len() * seq, d])
            .select(0, index.clone());
        out.layers.push(read_f32(rows.clone(), "hidden states")?);
        head_input = Some(rows);
    }
    if let Some(rows) = head_input {
        out.head = argmax_labels(model.head().forward(rows), LABEL_GROUPS.len())?;
    }
    Ok(out)
}
