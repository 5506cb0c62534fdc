//! One batch of cases through the model: the unedited pass, which also gives the hidden states
//! the edits are scaled to, and the pass with an edit at one layer.

use burn::prelude::*;
use burn::tensor::activation::softmax;
use cwm_chess::encode::StateLabels;
use cwm_models::{
    LABEL_GROUPS, Model, N_LABELS, PAD_TOKEN, StateModel, features_by_layer, features_with_edit,
};
use cwm_stage_data::TokenizedGame;

use super::cases::{Case, PATCH_PLIES};
use super::tally::Readout;
use crate::ProbeError;
use crate::linear::{argmax_labels, read_f32};

/// Logits of the square labels (the head's first group).
const SQUARE_LOGITS: usize = LABEL_GROUPS[0].n_logits();

/// The cases of one batch, laid out for the model.
pub struct Batch {
    /// `[rows, seq]`, each row a case's game up to the last step it needs, padded.
    moves: Tensor<2, Int>,
    rows: usize,
    seq: usize,
    /// Each row's step t.
    t: Vec<usize>,
    /// Steps read after t.
    followed: usize,
    d: usize,
}

/// What the unedited pass gives.
pub struct Unedited {
    /// Per edited layer: the hidden state at t of each row, `[rows × d]`.
    pub at_t: Vec<Vec<f32>>,
    /// Per edited layer: the hidden state at t + 3 of each row (the patch), `[rows × d]`.
    pub patch: Vec<Vec<f32>>,
    /// Per row: the predictions.
    pub readouts: Vec<Readout>,
}

impl Batch {
    /// The batch of `cases` (each with `followed` steps after t, and at least
    /// [`PATCH_PLIES`]) of `games`.
    pub fn new(
        model: &Model,
        games: &[TokenizedGame],
        cases: &[Case],
        followed: usize,
        device: &Device,
    ) -> Batch {
        let needed = followed.max(PATCH_PLIES);
        let seq = cases.iter().map(|c| c.t + needed + 1).max().unwrap_or(0);
        let mut moves = vec![PAD_TOKEN; cases.len() * seq];
        for (row, case) in moves.chunks_mut(seq.max(1)).zip(cases) {
            let tokens = &games[case.game].moves;
            for (slot, &token) in row.iter_mut().zip(tokens.iter().take(case.t + needed + 1)) {
                *slot = i64::from(token);
            }
        }
        let [d, _] = model.head().weight.dims();
        Batch {
            moves: Tensor::from_data(TensorData::new(moves, [cases.len(), seq]), device),
            rows: cases.len(),
            seq,
            t: cases.iter().map(|c| c.t).collect(),
            followed,
            d,
        }
    }

    /// The unedited pass: hidden states at layers `0..layers` and the predictions.
    ///
    /// # Errors
    /// [`ProbeError::Readback`].
    pub fn unedited(&self, model: &Model, layers: usize) -> Result<Unedited, ProbeError> {
        let all = features_by_layer(model, self.moves.clone());
        let at = |shift: usize| -> Vec<i64> {
            (0..self.rows)
                .map(|b| (b * self.seq + self.t[b] + shift) as i64)
                .collect()
        };
        let (at_t, at_patch) = (self.index(at(0)), self.index(at(PATCH_PLIES)));
        let mut out = Unedited {
            at_t: Vec::with_capacity(layers),
            patch: Vec::with_capacity(layers),
            readouts: Vec::new(),
        };
        for layer in all.iter().take(layers) {
            let flat = layer.clone().reshape([self.rows * self.seq, self.d]);
            out.at_t.push(read_f32(
                flat.clone().select(0, at_t.clone()),
                "hidden states",
            )?);
            out.patch
                .push(read_f32(flat.select(0, at_patch.clone()), "hidden states")?);
        }
        let head_input = all
            .into_iter()
            .last()
            .ok_or_else(|| ProbeError::Invalid("the model gave no hidden states".into()))?;
        out.readouts = self.readout(model, head_input)?;
        Ok(out)
    }

    /// The predictions with `delta` (`[rows × seq × d]`) added at `layer`.
    ///
    /// # Errors
    /// [`ProbeError::Model`] for a bad layer or shape; [`ProbeError::Readback`].
    pub fn edited(
        &self,
        model: &Model,
        layer: usize,
        delta: Vec<f32>,
    ) -> Result<Vec<Readout>, ProbeError> {
        let device = self.moves.device();
        let delta = Tensor::<3>::from_data(
            TensorData::new(delta, [self.rows, self.seq, self.d]),
            &device,
        );
        let head_input = features_with_edit(model, self.moves.clone(), layer, delta)
            .map_err(|e| ProbeError::model("edit", e))?;
        self.readout(model, head_input)
    }

    /// A zero edit with `rows[b]` added at row b's step t (`None`: nothing for that row).
    pub fn delta(&self, rows: impl Fn(usize) -> Option<Vec<f32>>) -> Vec<f32> {
        let mut delta = vec![0.0f32; self.rows * self.seq * self.d];
        for b in 0..self.rows {
            if let Some(row) = rows(b) {
                let start = (b * self.seq + self.t[b]) * self.d;
                delta[start..start + self.d].copy_from_slice(&row[..self.d]);
            }
        }
        delta
    }

    /// The predictions at t..=t + followed of every row from the head input.
    fn readout(&self, model: &Model, head_input: Tensor<3>) -> Result<Vec<Readout>, ProbeError> {
        // k-major: rows 0..B are the steps t, then t + 1, ...
        let index: Vec<i64> = (0..=self.followed)
            .flat_map(|k| (0..self.rows).map(move |b| (b * self.seq + self.t[b] + k) as i64))
            .collect();
        let rows = head_input
            .reshape([self.rows * self.seq, self.d])
            .select(0, self.index(index));
        let logits = model.head().forward(rows);
        let labels = argmax_labels(logits.clone(), LABEL_GROUPS.len())?;
        let squares = logits
            .narrow(0, 0, self.rows)
            .narrow(1, 0, SQUARE_LOGITS)
            .reshape([
                self.rows,
                LABEL_GROUPS[0].n_labels,
                LABEL_GROUPS[0].n_classes,
            ]);
        let probs = read_f32(softmax(squares, 2), "square probabilities")?;
        Ok((0..self.rows)
            .map(|b| Readout {
                labels: (0..=self.followed)
                    .map(|k| state(&labels, k * self.rows + b))
                    .collect(),
                square_probs: probs[b * SQUARE_LOGITS..(b + 1) * SQUARE_LOGITS].to_vec(),
            })
            .collect())
    }

    fn index(&self, index: Vec<i64>) -> Tensor<1, Int> {
        let n = index.len();
        Tensor::from_data(TensorData::new(index, [n]), &self.moves.device())
    }
}

/// Row `i` of 75-label rows.
fn state(labels: &[u8], i: usize) -> StateLabels {
    let mut state = [0u8; N_LABELS];
    state.copy_from_slice(&labels[i * N_LABELS..(i + 1) * N_LABELS]);
    state
}
