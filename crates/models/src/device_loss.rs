//! The training loss as one fused computation on the model's own device (a GPU's): the output
//! head, the cross-entropy and the gradient of the logits, with burn's tensor operations and
//! no read-back.
//!
//! It is `src/fused_loss.rs`'s algebra kept where the tensors live. burn's autodiff builds the
//! generic loss ([`crate::LossKernel::Generic`]) from a head product, a `log_softmax` and a
//! `gather` per label group, records each of them in the graph, keeps their intermediates
//! (log-probabilities as large as the logits) until the backward pass, and runs as many
//! operations again backwards. Here, outside the graph:
//!
//! 1. `Z = X·W + b`, one product for all 1,878 logits;
//! 2. per label group (`[steps, labels, classes]`): the row maximum `m`, `E = exp(Z − m)`, its
//!    row sum `s`; the cross-entropy `m + log s − Z[target]`; and the logits' gradient
//!    `G = (E / s − onehot(target)) · valid / denom`;
//! 3. group by group, `G`'s share of the gradients of `X`, `W`, `b` by two products and a
//!    column sum (so no `[steps, 1878]` gradient is assembled), which enter the graph through
//!    the surrogate of [`crate::fused_loss::loss_with_head_gradient`].
//!
//! On cubecl's devices steps 2 and 3 are one kernel for every label at once
//! ([`crate::label_loss`]) and one share of the gradients (two products and a column sum for
//! all 1,878 columns); on `flex` (the tests' reference) they are the tensor operations above.
//!
//! After the forward pass only the `[steps, d]` and `[d, 1878]` gradients are held, not
//! tensors of the logits' size, and the backward pass of the loss is three multiplications.
//! While it runs, the logits and one group's exponentials and gradient are alive at once.
//! The value is the generic kernel's up to float rounding in the order of the sums; the tests
//! hold the two to each other in value and in every gradient on the CPU.
//!
//! In [`Precision::Bf16`] (Mamba-3's, as the reference's bf16 autocast) it takes the generic
//! loss's numbers step for step: the logits from bf16-rounded operands, rounded to bf16
//! ([`crate::mixed`]); the cross-entropy and the logits' gradient in f32 over the reference's
//! bf16 denominator ([`crate::mixed::bf16_denominator`]); then that gradient rounded to bf16, as
//! autocast's cast hands it to the head's products, and the head's gradients as bf16 products
//! and a bf16 column sum, returned in f32 as the casts back to the f32 weights return them.
//!
//! Unlike the CPU kernel it cannot check targets on the host: a valid step's target outside its
//! label's classes is not detected (as with the generic kernel), so the data stages' checks
//! are what keep them in range.

use burn::nn::Linear;
use burn::prelude::*;

use crate::config::Precision;
use crate::fused_loss::{HeadGradients, loss_with_head_gradient, untracked_logits};
use crate::head::{HEAD_OUT, N_LABELS, class_view_specs};
use crate::loss::{StateLoss, denominator};
use crate::reduce::sum_all;

/// The state loss of `head.forward(features)` in `precision`, computed as the module docs
/// describe.
///
/// # Shapes
/// - `features`: `[batch, seq, d]`; `targets`: `[batch, seq, 75]`; `valid`: `[batch, seq]`
///
/// The caller checks that the shapes fit together.
pub(crate) fn device_fused_state_loss(
    precision: Precision,
    features: Tensor<3>,
    head: &Linear,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
) -> StateLoss {
    let [batch, seq, d] = features.dims();
    let steps = batch * seq;
    let x = features.clone().inner().reshape([steps, d]);
    let z = untracked_logits(precision, x.clone(), head);
    let targets = targets.inner().reshape([steps, N_LABELS]);
    let mask = valid.inner().float().reshape([steps, 1]);
    let denom = denominator(precision, sum_all(mask.clone())); // [1]
    let weight =
        (mask.clone() / denom.clone().clamp_min(1.0).reshape([1, 1])).reshape([steps, 1, 1]);
    let w = head.weight.val().inner();
    #[cfg(any(feature = "cuda", feature = "cube-cpu"))]
    if z.device() != Device::flex() {
        // cubecl's devices: every label at once, one kernel, then one share of the gradients.
        let (ce, grad) = crate::label_loss::label_losses(z, targets, weight.reshape([steps, 1]));
        let grads = HeadGradients::of_in(precision, x, w, grad);
        let per_step = ce.sum_dim(1); // [steps, 1]
        return finish(features, head, grads, per_step, mask, denom);
    }
    let mut per_step = mask.zeros_like(); // [steps, 1]
    let mut grad_x = x.zeros_like(); // [steps, d]
    let (mut grad_w, mut grad_b) = (Vec::new(), Vec::new());
    for view in class_view_specs() {
        let (labels, classes) = (view.n_labels, view.n_classes);
        let logits = z
            .clone()
            .narrow(1, view.logit_offset, view.n_logits())
            .reshape([steps, labels, classes]);
        let target = targets
            .clone()
            .narrow(1, view.first_label, labels)
            .reshape([steps, labels, 1]);
        let (cross_entropy, grad) = group_loss_and_gradient(logits, target, weight.clone());
        per_step = per_step + cross_entropy;
        // The group's share of the head's gradients, so that no [steps, 1878] gradient is
        // ever assembled: its columns of ∂W and ∂b, and its term of ∂X.
        let columns = w.clone().narrow(1, view.logit_offset, view.n_logits());
        let grad = grad.reshape([steps, labels * classes]);
        let part = HeadGradients::of_in(precision, x.clone(), columns, grad);
        grad_x = grad_x + part.x;
        grad_w.push(part.weight);
        grad_b.push(part.bias);
    }
    let grads = HeadGradients {
        x: grad_x,
        weight: Tensor::cat(grad_w, 1), // [d, 1878]
        bias: Tensor::cat(grad_b, 0),   // [1878]
    };
    debug_assert_eq!(grads.bias.dims(), [HEAD_OUT]);
    finish(features, head, grads, per_step, mask, denom)
}

/// The loss from each step's cross-entropy summed over its labels (`per_step`, `[steps, 1]`),
/// the steps' validity (`mask`, `[steps, 1]`), the denominator (`[1]`) and the head's
/// gradients: the value, and the surrogate through which the gradients enter the graph.
fn finish(
    features: Tensor<3>,
    head: &Linear,
    grads: HeadGradients,
    per_step: Tensor<2>,
    mask: Tensor<2>,
    denom: Tensor<1>,
) -> StateLoss {
    let loss_sum = sum_all(per_step * mask); // [1]
    let value = loss_sum.clone() / denom.clone().clamp_min(1.0);
    StateLoss {
        loss: loss_with_head_gradient(features, head, grads, value),
        loss_sum: loss_sum.autodiff(),
        denom: denom.autodiff(),
    }
}

/// One label group's cross-entropy summed over its labels, per step (`[steps, 1]`), and the
/// gradient of its logits, `(softmax − onehot(target)) · weight` (`[steps, labels, classes]`).
///
/// # Shapes
/// - `logits`: `[steps, labels, classes]`; `target`: `[steps, labels, 1]`; `weight`:
///   `[steps, 1, 1]`
fn group_loss_and_gradient(
    logits: Tensor<3>,
    target: Tensor<3, Int>,
    weight: Tensor<3>,
) -> (Tensor<2>, Tensor<3>) {
    let [steps, labels, classes] = logits.dims();
    let max = logits.clone().max_dim(2); // [steps, labels, 1]
    let exps = (logits.clone() - max.clone()).exp();
    let sums = exps.clone().sum_dim(2);
    let picked = logits.gather(2, target.clone());
    let cross_entropy = (max + sums.clone().log() - picked)
        .sum_dim(1)
        .reshape([steps, 1]);
    let class_ids = Tensor::<1, Int>::arange(0..classes as i64, &target.device())
        .reshape([1, 1, classes])
        .expand([steps, labels, classes]);
    let onehot = class_ids.equal(target.expand([steps, labels, classes]));
    let grad = (exps / sums - onehot.float()) * weight;
    (cross_entropy, grad)
}
