//! The masked, micro-averaged cross-entropy over all valid (step, label) pairs (spec A.4).

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::activation::log_softmax;

use std::fmt;
use std::str::FromStr;

use crate::config::Precision;
use crate::device_loss::device_fused_state_loss;
use crate::error::ModelError;
use crate::fused_loss::{HostTargets, fused_state_loss};
use crate::head::{HEAD_OUT, N_LABELS, class_views};
use crate::mixed;
use crate::reduce::sum_all;

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
    groups_cross_entropy(class_views(logits), targets)
}

/// Like [`step_cross_entropy`] of `head.forward(features)` in `precision`: the head is one
/// product, as the reference's `Linear`, cut into the runs of labels with the same class
/// count by [`class_views`], so the backward pass is two products for the whole head. The
/// caller checks the shapes ([`check_head`]).
///
/// # Shapes
/// - `features`: `[batch, seq, d]`, the input of `head` (`Linear(d → 1878)`)
/// - `targets`: `[batch, seq, 75]`
/// - output: `[batch, seq]`
fn step_cross_entropy_in(
    precision: Precision,
    features: Tensor<3>,
    head: &Linear,
    targets: Tensor<3, Int>,
) -> Result<Tensor<2>, ModelError> {
    let logits = mixed::linear(precision, head, features);
    groups_cross_entropy(class_views(logits), targets)
}

fn check_head(
    features: &Tensor<3>,
    head: &Linear,
    targets: &Tensor<3, Int>,
) -> Result<(), ModelError> {
    let [batch, seq, d] = features.dims();
    let [d_in, width] = head.weight.dims();
    if d != d_in || width != HEAD_OUT || targets.dims() != [batch, seq, N_LABELS] {
        return Err(ModelError::Shape(format!(
            "features are {:?}, the head is [{d_in}, {width}] and targets {:?}; expected \
             [b, t, d], [d, {HEAD_OUT}] and [b, t, {N_LABELS}]",
            features.dims(),
            targets.dims()
        )));
    }
    Ok(())
}

/// Σ over the groups' labels of `−log softmax(label logits)[target]`, per step.
fn groups_cross_entropy(
    views: impl IntoIterator<Item = (usize, Tensor<4>)>,
    targets: Tensor<3, Int>,
) -> Result<Tensor<2>, ModelError> {
    let [batch, seq, _] = targets.dims();
    let mut total: Option<Tensor<3>> = None;
    for (first_label, view) in views {
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
    state_loss_of_logits(Precision::F32, logits, targets, valid)
}

/// [`state_loss`] over `precision`'s denominator: in bf16 the reference's count under autocast
/// ([`crate::mixed::bf16_denominator`]), for logits a bf16 model computed (already rounded).
///
/// # Errors
/// As [`state_loss`].
pub fn state_loss_of_logits(
    precision: Precision,
    logits: Tensor<3>,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> Result<StateLoss, ModelError> {
    check_mask(&logits, &valid, "logits")?;
    let per_step = step_cross_entropy(logits, targets)?;
    Ok(masked_loss(precision, per_step, valid))
}

/// Which implementation computes the state loss from features. All give the same value and
/// gradients up to float rounding; they differ in speed and memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LossKernel {
    /// `auto`: [`LossKernel::FusedCpu`] on a `flex` autodiff device (CPU training), else
    /// [`LossKernel::Generic`]. The default.
    #[default]
    Auto,
    /// `generic`: burn's tensor operations through autodiff, on any backend.
    Generic,
    /// `fused-cpu`: the head and the cross-entropy with its gradient as one host computation
    /// (`src/fused_loss.rs`); the logits are read back from the device, so it is meant for
    /// the `flex` CPU backend.
    FusedCpu,
    /// `fused-device`: the same algebra with burn's tensor operations on the model's device,
    /// outside the autodiff graph and with no read-back (`src/device_loss.rs`), in f32 or in
    /// bf16; meant for a GPU.
    FusedDevice,
}

impl LossKernel {
    /// Every kernel, in the order of the variants.
    pub const ALL: [LossKernel; 4] = [
        LossKernel::Auto,
        LossKernel::Generic,
        LossKernel::FusedCpu,
        LossKernel::FusedDevice,
    ];

    /// The canonical name (`auto`, `generic`, `fused-cpu`, `fused-device`).
    pub fn name(self) -> &'static str {
        match self {
            LossKernel::Auto => "auto",
            LossKernel::Generic => "generic",
            LossKernel::FusedCpu => "fused-cpu",
            LossKernel::FusedDevice => "fused-device",
        }
    }

    /// The kernel that `self` stands for on `device` ([`LossKernel::Auto`] resolved).
    pub fn on(self, device: &Device) -> LossKernel {
        match self {
            LossKernel::Auto if device.is_autodiff() && *device == Device::flex() => {
                LossKernel::FusedCpu
            }
            LossKernel::Auto => LossKernel::Generic,
            kernel => kernel,
        }
    }
}

impl fmt::Display for LossKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LossKernel {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LossKernel::ALL
            .into_iter()
            .find(|kernel| kernel.name() == s)
            .ok_or_else(|| ModelError::InvalidConfig {
                field: "loss kernel",
                reason: format!("{s:?} is not auto, generic, fused-cpu or fused-device"),
            })
    }
}

/// [`state_loss`] of `head.forward(features)` with the head applied group by group, so the
/// backward pass never builds a full-width gradient per group; the cross-entropy as
/// [`LossKernel::Auto`] picks. Training uses it through [`crate::StateModel::state_loss`].
///
/// # Shapes
/// - `features`: `[batch, seq, d]`
/// - `targets`: `[batch, seq, 75]`
/// - `valid`: `[batch, seq]`
///
/// # Errors
/// [`ModelError::Shape`] when the shapes do not fit together, or (fused kernel) a valid
/// step's target is outside its label's classes.
pub fn state_loss_from_features(
    features: Tensor<3>,
    head: &Linear,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> Result<StateLoss, ModelError> {
    state_loss_with_kernel(LossKernel::Auto, features, head, targets, valid)
}

/// [`state_loss_from_features`] with the implementation chosen by `kernel` (the tests compare
/// them): [`state_loss_in`] in f32.
///
/// # Errors
/// As [`state_loss_from_features`].
pub fn state_loss_with_kernel(
    kernel: LossKernel,
    features: Tensor<3>,
    head: &Linear,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> Result<StateLoss, ModelError> {
    state_loss_in(Precision::F32, kernel, features, head, targets, valid)
}

/// The state loss of `head.forward(features)` in `precision`, computed by `kernel`.
/// [`Precision::Bf16`] computes the head's products as [`crate::mixed`] describes, the
/// cross-entropy in f32 on the bf16-rounded logits, and the denominator in bf16 as the
/// reference's loss under autocast (spec A.4), with burn's tensor operations on any device:
/// the CPU's fused kernel is f32 only, the device's takes the same numbers
/// ([`crate::device_loss`]), and [`LossKernel::Auto`] takes the generic one in bf16.
///
/// # Errors
/// As [`state_loss_from_features`]; [`ModelError::InvalidConfig`] for the CPU's fused kernel in
/// bf16.
pub fn state_loss_in(
    precision: Precision,
    kernel: LossKernel,
    features: Tensor<3>,
    head: &Linear,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> Result<StateLoss, ModelError> {
    check_mask(&features, &valid, "features")?;
    check_head(&features, head, &targets)?;
    let kernel = match (precision, kernel) {
        (Precision::F32, kernel) => kernel.on(&features.device()),
        (_, LossKernel::Auto | LossKernel::Generic) => LossKernel::Generic,
        (_, LossKernel::FusedDevice) => LossKernel::FusedDevice,
        (_, LossKernel::FusedCpu) => {
            return Err(ModelError::InvalidConfig {
                field: "loss kernel",
                reason: format!("{kernel} computes in f32 only, not {precision}"),
            });
        }
    };
    match kernel {
        LossKernel::FusedCpu => {
            fused_state_loss(features, head, &HostTargets::read(targets, valid))
        }
        LossKernel::FusedDevice => Ok(device_fused_state_loss(
            precision, features, head, targets, valid,
        )),
        LossKernel::Auto | LossKernel::Generic => {
            let per_step = step_cross_entropy_in(precision, features, head, targets)?;
            Ok(masked_loss(precision, per_step, valid))
        }
    }
}

/// `valid` must be `[batch, seq]` of `x` (`[batch, seq, ..]`, called `what` in the error).
fn check_mask(x: &Tensor<3>, valid: &Tensor<2, Bool>, what: &str) -> Result<(), ModelError> {
    let [batch, seq, _] = x.dims();
    if valid.dims() != [batch, seq] {
        return Err(ModelError::Shape(format!(
            "mask is {:?}, {what} are [{batch}, {seq}, ..]",
            valid.dims()
        )));
    }
    Ok(())
}

/// The loss's denominator from the number of valid steps (`[1]`): 75 a step in f32, and in
/// bf16 the reference's count under autocast ([`crate::mixed::bf16_denominator`]).
pub(crate) fn denominator(precision: Precision, valid_steps: Tensor<1>) -> Tensor<1> {
    match precision {
        Precision::F32 => valid_steps.mul_scalar(N_LABELS as f32),
        Precision::Bf16 => mixed::bf16_denominator(valid_steps),
    }
}

/// The masked sum, its denominator in `precision` and their ratio, from per-step
/// cross-entropies.
fn masked_loss(precision: Precision, per_step: Tensor<2>, valid: Tensor<2, Bool>) -> StateLoss {
    let mask = valid.float();
    let loss_sum = sum_all(per_step * mask.clone());
    let denom = denominator(precision, sum_all(mask));
    let loss = loss_sum.clone() / denom.clone().clamp_min(1.0);
    StateLoss {
        loss,
        loss_sum,
        denom,
    }
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
