//! The training loss on burn's `flex` CPU backend: the output head, the cross-entropy and
//! their gradients as one fused computation.
//!
//! burn's autodiff evaluates `log_softmax` as six tensor operations (max, subtract, exp, sum,
//! log, subtract), each a full pass over the `[batch, seq, 1878]` logits, and its backward pass
//! as as many again, most of them single-threaded on `flex`. The cross-entropy and its gradient
//! have a closed form, so here:
//!
//! 1. the logits `Z = X·W + b` are computed outside the graph (one matrix product);
//! 2. on the host, step by step in parallel, every label's row of logits is turned into its
//!    cross-entropy and, in place, into `G = ∂loss/∂Z = (softmax − onehot(target)) · valid /
//!    denom`;
//! 3. the head's gradients follow from `G` by two matrix products and a column sum:
//!    `∂X = G·Wᵀ`, `∂W = Xᵀ·G`, `∂b = Σ_rows G`;
//! 4. they reach the graph through a surrogate, `Σ X ⊙ ∂X + Σ W ⊙ ∂W + Σ b ⊙ ∂b` with the
//!    gradients held constant, whose gradient with respect to each of `X`, `W`, `b` is exactly
//!    the constant it is multiplied by. The returned loss is `surrogate − detach(surrogate) +
//!    value`: its value is the host's loss, its gradient the surrogate's.
//!
//! The `[batch, seq, 1878]` tensor is thus written once by the product, read and rewritten
//! once on the host, and read by the two gradient products; nothing of that size enters the
//! autodiff graph. Every step is computed on its own and the sums run in a fixed order, so the
//! result does not depend on the number of threads. [`crate::state_loss_from_features`] takes
//! this path on a `flex` autodiff device and burn's generic one everywhere else; the tests
//! check that the two agree in value and in every gradient.

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::FloatDType;
use rayon::prelude::*;

use crate::column_sums::sum_rows;
use crate::config::Precision;
use crate::error::ModelError;
use crate::head::{HEAD_OUT, N_LABELS, label_classes};
use crate::loss::StateLoss;
use crate::mixed;
use crate::products::product_of;
use crate::reduce::sum_all;

/// Steps (rows of 1,878 logits) per parallel task.
const STEPS_PER_TASK: usize = 16;

/// The targets and mask of a batch on the host.
pub(crate) struct HostTargets {
    /// `[batch · seq · 75]` class indices.
    targets: Vec<i64>,
    /// `[batch · seq]`: `1 / max(1, 75 · valid steps)` where the step is valid, else 0.
    weights: Vec<f32>,
    /// 75 × the number of valid steps.
    denom: f64,
}

impl HostTargets {
    /// Reads `targets` (`[batch, seq, 75]`) and `valid` (`[batch, seq]`) back to the host.
    pub(crate) fn read(targets: Tensor<3, Int>, valid: Tensor<2, Bool>) -> HostTargets {
        let targets: Vec<i64> = targets.into_data().iter::<i64>().collect();
        let valid: Vec<bool> = valid.into_data().iter::<bool>().collect();
        let steps = valid.iter().filter(|&&v| v).count();
        let denom = (N_LABELS * steps) as f64;
        let weight = (1.0 / denom.max(1.0)) as f32;
        let weights = valid
            .iter()
            .map(|&v| if v { weight } else { 0.0 })
            .collect();
        HostTargets {
            targets,
            weights,
            denom,
        }
    }
}

/// One label's logits `z`, overwritten with their gradient `(softmax(z) − onehot(target)) ·
/// weight`; returns the cross-entropy `logsumexp(z) − z[target]`.
fn row_loss_in_place(z: &mut [f32], target: usize, weight: f32) -> f32 {
    let picked = z[target];
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for x in z.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    let scale = weight / sum;
    for x in z.iter_mut() {
        *x *= scale;
    }
    z[target] -= weight;
    max + sum.ln() - picked
}

/// One step's 1,878 logits, overwritten with their gradient; returns the sum of its 75
/// cross-entropies.
fn step_loss_in_place(
    logits: &mut [f32],
    targets: &[i64],
    weight: f32,
    classes: &[usize; N_LABELS],
) -> Result<f64, ModelError> {
    let mut offset = 0;
    let mut total = 0.0f64;
    for (label, (&n, &target)) in classes.iter().zip(targets).enumerate() {
        let row = &mut logits[offset..offset + n];
        offset += n;
        let target = match usize::try_from(target).ok().filter(|&t| t < n) {
            Some(t) => t,
            // A padded step's targets are never used (its weight is 0).
            None if weight == 0.0 => 0,
            None => {
                return Err(ModelError::Shape(format!(
                    "target {target} of label {label} is outside its {n} classes"
                )));
            }
        };
        total += f64::from(row_loss_in_place(row, target, weight));
    }
    Ok(total)
}

/// The state loss of `head.forward(features)` with the fused computation of the module docs.
///
/// # Errors
/// [`ModelError::Shape`] when a valid step's target is outside its label's classes or the
/// shapes disagree.
pub(crate) fn fused_state_loss(
    features: Tensor<3>,
    head: &Linear,
    host: &HostTargets,
) -> Result<StateLoss, ModelError> {
    let [batch, seq, d] = features.dims();
    let steps = batch * seq;
    if host.targets.len() != steps * N_LABELS || host.weights.len() != steps {
        return Err(ModelError::Shape(format!(
            "features are {:?}, targets hold {} labels",
            features.dims(),
            host.targets.len()
        )));
    }
    let x = features.clone().inner().reshape([steps, d]);
    let mut grad: Vec<f32> = untracked_logits(Precision::F32, x.clone(), head)
        .into_data()
        .try_into_vec::<f32>()
        .map_err(|e| ModelError::Shape(format!("logits are not f32: {e:?}")))?;
    let classes = label_classes();
    let mut step_losses = vec![0.0f64; steps];
    grad.par_chunks_mut(STEPS_PER_TASK * HEAD_OUT)
        .zip(step_losses.par_chunks_mut(STEPS_PER_TASK))
        .enumerate()
        .try_for_each(|(task, (logits, losses))| {
            let first = task * STEPS_PER_TASK;
            for (i, (row, loss)) in logits.chunks_exact_mut(HEAD_OUT).zip(losses).enumerate() {
                let step = first + i;
                let targets = &host.targets[step * N_LABELS..(step + 1) * N_LABELS];
                *loss = step_loss_in_place(row, targets, host.weights[step], &classes)?;
            }
            Ok::<(), ModelError>(())
        })?;
    let loss_sum: f64 = step_losses
        .iter()
        .zip(&host.weights)
        .filter(|&(_, &w)| w != 0.0)
        .map(|(&l, _)| l)
        .sum();

    let inner = x.device();
    let g = Tensor::<2>::from_data(TensorData::new(grad, [steps, HEAD_OUT]), &inner);
    let scalar =
        |value: f64| Tensor::<1>::from_data(TensorData::new(vec![value as f32], [1]), &inner);
    let value = loss_sum / host.denom.max(1.0);
    Ok(StateLoss {
        loss: loss_with_head_gradient(
            features,
            head,
            HeadGradients::of(x, head.weight.val().inner(), g),
            scalar(value),
        ),
        loss_sum: scalar(loss_sum).autodiff(),
        denom: scalar(host.denom).autodiff(),
    })
}

/// The head's logits `X·W + b` in `precision` ([`crate::mixed`]) outside the autodiff graph.
///
/// # Shapes
/// - `x`: `[steps, d]`, untracked; output: `[steps, 1878]`, untracked
pub(crate) fn untracked_logits(precision: Precision, x: Tensor<2>, head: &Linear) -> Tensor<2> {
    let bias = head.bias.as_ref().map(|b| b.val().inner());
    mixed::product(precision, x, head.weight.val().inner(), bias)
}

/// The gradients of the head's input, weight and bias, outside the autodiff graph.
pub(crate) struct HeadGradients {
    /// `∂X = G·Wᵀ`: `[steps, d]`.
    pub(crate) x: Tensor<2>,
    /// `∂W = Xᵀ·G`: `[d, n]`.
    pub(crate) weight: Tensor<2>,
    /// `∂b = Σ_rows G`: `[n]`.
    pub(crate) bias: Tensor<1>,
}

impl HeadGradients {
    /// The gradients that the logits' gradient `g` (`[steps, n]`) gives the head's columns
    /// `w` (`[d, n]`) and their input `x` (`[steps, d]`).
    pub(crate) fn of(x: Tensor<2>, w: Tensor<2>, g: Tensor<2>) -> HeadGradients {
        HeadGradients {
            x: product_of(g.clone(), w, false, true),
            weight: product_of(x, g.clone(), true, false),
            bias: sum_rows(g),
        }
    }

    /// [`HeadGradients::of`] in `precision`: for [`Precision::Bf16`] the operands are rounded
    /// to bf16, the products and the column sum run in bf16 (as the backward pass of a bf16
    /// `Linear` under autocast), and the gradients come back as f32.
    pub(crate) fn of_in(
        precision: Precision,
        x: Tensor<2>,
        w: Tensor<2>,
        g: Tensor<2>,
    ) -> HeadGradients {
        if precision == Precision::F32 {
            return Self::of(x, w, g);
        }
        let bf16 = |t: Tensor<2>| t.cast(FloatDType::BF16);
        let grads = Self::of(bf16(x), bf16(w), bf16(g));
        HeadGradients {
            x: grads.x.cast(FloatDType::F32),
            weight: grads.weight.cast(FloatDType::F32),
            bias: grads.bias.cast(FloatDType::F32),
        }
    }
}

/// The loss whose value is `value` and whose gradients with respect to `features` and the
/// head's weight and bias are `grads`, reaching the graph through the surrogate
/// `Σ X ⊙ ∂X + Σ W ⊙ ∂W + Σ b ⊙ ∂b` (the gradients held constant) as
/// `surrogate − detach(surrogate) + value`. Shared by both fused kernels.
///
/// # Shapes
/// - `features`: `[batch, seq, d]` (tracked); `grads`: for the whole head (`n = 1878`);
///   `value`: `[1]`, untracked
pub(crate) fn loss_with_head_gradient(
    features: Tensor<3>,
    head: &Linear,
    grads: HeadGradients,
    value: Tensor<1>,
) -> Tensor<1> {
    let [batch, seq, d] = features.dims();
    let grad_x = grads.x.reshape([batch, seq, d]);
    let mut surrogate = sum_all(features * grad_x.autodiff())
        + sum_all(head.weight.val() * grads.weight.autodiff());
    if let Some(b) = head.bias.as_ref().map(|b| b.val()) {
        surrogate = surrogate + sum_all(b * grads.bias.autodiff());
    }
    surrogate.clone() - surrogate.detach() + value.autodiff()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_gives_the_cross_entropy_and_its_gradient() {
        let z = [1.0f32, 2.0, 0.5];
        let mut grad = z;
        let loss = row_loss_in_place(&mut grad, 1, 0.5);
        let exps: Vec<f64> = z.iter().map(|&x| f64::from(x).exp()).collect();
        let total: f64 = exps.iter().sum();
        let expected = total.ln() - 2.0;
        assert!(
            (f64::from(loss) - expected).abs() < 1e-6,
            "{loss} vs {expected}"
        );
        for (j, g) in grad.iter().enumerate() {
            let want = 0.5 * (exps[j] / total - if j == 1 { 1.0 } else { 0.0 });
            assert!((f64::from(*g) - want).abs() < 1e-6, "{j}: {g} vs {want}");
        }
        // Large logits do not overflow: the max is subtracted first.
        let loss = row_loss_in_place(&mut [1000.0, 0.0], 1, 1.0);
        assert!((loss - 1000.0).abs() < 1e-3, "{loss}");
    }
}
