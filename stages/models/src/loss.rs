//! The masked, micro-averaged cross-entropy over all valid (step, label) pairs (spec A.4).

use burn::prelude::*;
use burn::tensor::activation::log_softmax;

use crate::error::ModelError;
use crate::head::{HEAD_OUT, N_LABELS, class_views};

/// The loss of one batch, with the sums validation accumulates across batches.
#[derive(Debug, Clone)]
pub struct StateLoss {
    /// `loss_sum / max(1, denom)`. `[1]`
    pub loss: Tensor<1>,
    /// Σ over valid steps and all 75 labels of the cross-entropy. `[1]`
    pub loss_sum: Tensor<1>,
    /// 75 × the number of valid steps. `[1]`
    pub denom: Tensor<1>,
}

/// Cross-entropy of every label at every step, before masking.
///
/// # Shapes
/// - `logits`: `[batch, seq, 1878]`
/// - `targets`: `[batch, seq, 75]`, class indices (each within its label's class count)
/// - output: `[batch, seq]`, Σ over the 75 labels of `−log softmax(label logits)[target]`
///
/// # Errors
/// [`ModelError::Shape`] when the shapes do not fit together.
pub fn step_cross_entropy(
    logits: Tensor<3>,
    targets: Tensor<3, Int>,
) -> Result<Tensor<2>, ModelError> {
    check_shapes(&logits, &targets)?;
    let [batch, seq, _] = logits.dims();
    let mut total: Option<Tensor<3>> = None;
    for (first_label, view) in class_views(logits) {
        let [_, _, n_labels, _] = view.dims();
        let log_probs = log_softmax(view, 3); // [batch, seq, n, classes]
        let index = targets
            .clone()
            .narrow(2, first_label, n_labels)
            .unsqueeze_dim::<4>(3);
        let picked = log_probs.gather(3, index).reshape([batch, seq, n_labels]);
        let summed = picked.sum_dim(2); // [batch, seq, 1]
        total = Some(match total {
            Some(acc) => acc + summed,
            None => summed,
        });
    }
    let total = total.ok_or_else(|| ModelError::Shape("no label groups".into()))?;
    Ok(total.neg().reshape([batch, seq]))
}

/// The reference's `compute_state_loss`: cross-entropy summed over valid steps and all labels,
/// divided by `max(1, 75 · number of valid steps)`. Padded steps contribute nothing.
///
/// # Shapes
/// - `logits`: `[batch, seq, 1878]`
/// - `targets`: `[batch, seq, 75]`
/// - `valid`: `[batch, seq]`, true where the step is not padding
///
/// # Errors
/// [`ModelError::Shape`] when the shapes do not fit together.
pub fn state_loss(
    logits: Tensor<3>,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> Result<StateLoss, ModelError> {
    let [batch, seq, _] = logits.dims();
    if valid.dims() != [batch, seq] {
        return Err(ModelError::Shape(format!(
            "mask is {:?}, logits are [{batch}, {seq}, ..]",
            valid.dims()
        )));
    }
    let per_step = step_cross_entropy(logits, targets)?; // [batch, seq]
    let mask = valid.float();
    let loss_sum = (per_step * mask.clone()).sum();
    let denom = mask.sum() * (N_LABELS as f64);
    let loss = loss_sum.clone() / denom.clone().clamp_min(1.0);
    Ok(StateLoss {
        loss,
        loss_sum,
        denom,
    })
}

/// A `[batch, seq]` mask that is true for the first `lengths[b]` steps of each sequence.
///
/// # Errors
/// [`ModelError::Shape`] when a length exceeds `seq_len`.
pub fn valid_mask(
    lengths: &[usize],
    seq_len: usize,
    device: &Device,
) -> Result<Tensor<2, Bool>, ModelError> {
    if let Some(&too_long) = lengths.iter().find(|&&len| len > seq_len) {
        return Err(ModelError::Shape(format!(
            "length {too_long} exceeds sequence length {seq_len}"
        )));
    }
    let batch = lengths.len();
    let positions = Tensor::<1, Int>::arange(0..seq_len as i64, device)
        .reshape([1, seq_len])
        .expand([batch, seq_len]);
    let lengths: Vec<i64> = lengths.iter().map(|&len| len as i64).collect();
    let lengths = Tensor::<1, Int>::from_data(TensorData::new(lengths, [batch]), device)
        .reshape([batch, 1])
        .expand([batch, seq_len]);
    Ok(positions.lower(lengths))
}

pub(crate) fn check_shapes(logits: &Tensor<3>, targets: &Tensor<3, Int>) -> Result<(), ModelError> {
    let [batch, seq, width] = logits.dims();
    if width != HEAD_OUT || targets.dims() != [batch, seq, N_LABELS] {
        return Err(ModelError::Shape(format!(
            "logits are {:?} and targets {:?}; expected [b, t, {HEAD_OUT}] and [b, t, {N_LABELS}]",
            logits.dims(),
            targets.dims()
        )));
    }
    Ok(())
}
