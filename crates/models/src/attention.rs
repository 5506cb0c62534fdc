//! The Transformer's causal attention as whole operations: burn's fused attention outside
//! training, and for training one differentiable operation with a backward pass of its own.
//!
//! Built from separate tensor operations, training attention (`softmax(q kᵀ · scale + causal
//! mask)`, dropout on the probabilities, the product with `v`) is about fifteen operations on
//! `[batch, heads, seq, seq]` tensors under autodiff: the scaling, the mask, softmax's five
//! (maximum, shift, exponential, sum, division), the dropout's product, and each one's
//! gradient, with the exponentials, their sums and the dropped probabilities all kept for the
//! backward pass. [`causal_attention_train`] is one operation that keeps only `q`, `k`, `v`,
//! the probabilities and the dropout mask, and whose backward pass is softmax's closed form:
//!
//! - `dv = (P ∘ M)ᵀ dO`, `dP = (dO vᵀ) ∘ M`
//! - `dS = P ∘ (dP − rowsum(dP ∘ P))`, `dq = scale · dS k`, `dk = scale · dSᵀ q`
//!
//! with `P` the probabilities, `M` the dropout mask (`1/keep` where kept, else 0) and `dO` the
//! output's gradient. Masked positions have `P = 0`, so their `dS` is 0 with no mask in the
//! backward pass.
//!
//! The forward pass runs through a backend extension ([`AttentionOps`]): each backend
//! (`flex` on the CPU, cubecl's with fusion on CUDA and on `cube-cpu`) computes it from its own operations, and
//! burn's autodiff decorator records it as one node with the backward pass above.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::{BoolTensor, FloatTensor};
use burn::backend::{Backend, Dispatch, ExtensionType, backend_extension};
use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;

/// Causal scaled dot-product attention (scale `1/√head_dim`) as one backend operation: burn's
/// fused attention. It has no dropout, and burn's autodiff does not differentiate it as one
/// operation (it falls back to separate ones there), so the model takes it on devices without
/// autodiff only: evaluation, validation and every stage that reads hidden states. The CPU
/// backend computes it per head, with the whole score matrix or tiles of it in cache; CUDA
/// with a flash-attention kernel (autotuned against separate kernels). Its results equal
/// [`causal_attention_train`]'s without dropout up to the summation order (the test
/// `fused_attention_equals_the_decomposed_one`).
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`
/// - output: `[batch, heads, seq, head_dim]`
pub fn causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    attention(q, k, v, None, None, options)
}

/// `(softmax(q kᵀ · scale, causal) ∘ keep) v`: the training path's attention, differentiable
/// in `q`, `k` and `v` with the backward pass of the module docs.
///
/// `causal` is true where attention is forbidden (above the diagonal); `keep` is the dropout
/// mask on the probabilities (`1/keep` where an element is kept, else 0), or `None` without
/// dropout. On a device without autodiff it is the same forward computation.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[seq, seq]`; `keep`: `[batch,
///   heads, seq, seq]`
/// - output: `[batch, heads, seq, head_dim]`
pub fn causal_attention_train(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: &Tensor<2, Bool>,
    keep: Option<Tensor<4>>,
    scale: f64,
) -> Tensor<4> {
    let [batch, heads, seq, _] = q.dims();
    let causal = causal
        .clone()
        .reshape([1, 1, seq, seq])
        .expand([batch, heads, seq, seq]);
    Tensor::from_dispatch(<Dispatch as AttentionOps>::causal_attention_train(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        causal.into_dispatch(),
        match keep {
            Some(mask) => Keep::Mask(mask.into_dispatch()),
            None => Keep::All,
        },
        scale,
    ))
}

/// The forward pass: the attention probabilities `softmax(q kᵀ · scale)` with `causal`'s
/// positions at 0 (what the backward pass keeps), and the output `(probs ∘ keep) v`.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[batch, heads, seq, seq]`
/// - output: `[batch, heads, seq, seq]` and `[batch, heads, seq, head_dim]`
fn forward<B: Backend>(
    [q, k, v]: [FloatTensor<B>; 3],
    causal: BoolTensor<B>,
    keep: &Keep<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let scores = B::float_mul_scalar(B::float_matmul(q, B::float_transpose(k)), scale.into());
    let probs = B::softmax(
        B::float_mask_fill(scores, causal, f32::NEG_INFINITY.into()),
        3,
    );
    let out = B::float_matmul(dropped::<B>(probs.clone(), keep), v);
    (probs, out)
}

/// Which attention probabilities dropout keeps.
#[derive(ExtensionType, Clone, Debug)]
pub enum Keep<B: Backend> {
    /// `1/keep` where a probability is kept, else 0, in the probabilities' shape.
    Mask(FloatTensor<B>),
    /// No dropout.
    All,
}

/// `probs ∘ keep`, or `probs` without dropout.
fn dropped<B: Backend>(probs: FloatTensor<B>, keep: &Keep<B>) -> FloatTensor<B> {
    match keep {
        Keep::Mask(mask) => B::float_mul(probs, mask.clone()),
        Keep::All => probs,
    }
}

/// Training attention as a backend operation (see the module docs). Each backend's forward
/// pass is the default body, from its own tensor operations; the autodiff decorator's adds the
/// backward pass.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait AttentionOps: Backend {
    /// `(softmax(q kᵀ · scale, causal) ∘ keep) v`, with `causal` already broadcast to the
    /// scores' shape.
    fn causal_attention_train(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: BoolTensor<Self>,
        #[extension_type] keep: Keep<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        forward::<Self>([q, k, v], causal, &keep, scale).1
    }
}

impl AttentionOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl AttentionOps for burn::backend::Cube {}

/// What the backward pass keeps: the inputs, the probabilities and the dropout mask.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    probs: FloatTensor<B>,
    keep: Keep<B>,
    scale: f64,
}

/// The backward pass of training attention, for `q`, `k` and `v`.
#[derive(Debug)]
struct AttentionBackward;

impl<B: Backend> Backward<B, 3> for AttentionBackward {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Saved<B>, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents;
        let grad_out = grads.consume::<B>(&ops.node);
        let Saved {
            q,
            k,
            v,
            probs,
            keep,
            scale,
        } = ops.state;
        if let Some(node) = node_v {
            let dropped = dropped::<B>(probs.clone(), &keep);
            let grad_v = B::float_matmul(B::float_transpose(dropped), grad_out.clone());
            grads.register::<B>(node.id, grad_v);
        }
        if node_q.is_none() && node_k.is_none() {
            return;
        }
        // dP = (dO vᵀ) ∘ M; dS = P ∘ (dP − rowsum(dP ∘ P)) · scale.
        let grad_probs = dropped::<B>(B::float_matmul(grad_out, B::float_transpose(v)), &keep);
        let row = B::float_sum_dim(B::float_mul(grad_probs.clone(), probs.clone()), 3);
        let grad_scores = B::float_mul_scalar(
            B::float_mul(probs, B::float_sub(grad_probs, row)),
            scale.into(),
        );
        if let Some(node) = node_q {
            grads.register::<B>(node.id, B::float_matmul(grad_scores.clone(), k));
        }
        if let Some(node) = node_k {
            let grad_k = B::float_matmul(B::float_transpose(grad_scores), q);
            grads.register::<B>(node.id, grad_k);
        }
    }
}

impl<B: Backend + AttentionOps, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
    fn causal_attention_train(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: BoolTensor<Self>,
        keep: Keep<Self>,
        scale: f64,
    ) -> FloatTensor<Self> {
        // The mask is a constant: its primitive is all the forward pass needs of it.
        let keep = match keep {
            Keep::Mask(mask) => Keep::Mask(mask.into_primitive()),
            Keep::All => Keep::All,
        };
        match AttentionBackward
            .prepare::<C>([q.node(), k.node(), v.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
                let inputs = [q.clone(), k.clone(), v.clone()];
                let (probs, out) = forward::<B>(inputs, causal, &keep, scale);
                let saved = Saved {
                    q,
                    k,
                    v,
                    probs,
                    keep,
                    scale,
                };
                prep.finish(saved, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::causal_attention_train(
                q.into_primitive(),
                k.into_primitive(),
                v.into_primitive(),
                causal,
                keep,
                scale,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use burn::tensor::activation::softmax;

    const SHAPE: [usize; 4] = [2, 3, 29, 16];

    /// The same attention from separate tensor operations, which autodiff differentiates.
    fn separate(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, keep: Option<Tensor<4>>) -> Tensor<4> {
        let [batch, heads, seq, _] = q.dims();
        let future = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &q.device())
            .reshape([1, 1, seq, seq])
            .expand([batch, heads, seq, seq]);
        let scores = q.matmul(k.swap_dims(2, 3)) * 0.25;
        let probs = softmax(scores.mask_fill(future, f32::NEG_INFINITY), 3);
        match keep {
            Some(keep) => (probs * keep).matmul(v),
            None => probs.matmul(v),
        }
    }

    fn max_abs_diff(a: Tensor<4>, b: Tensor<4>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    /// The output and the gradients of `q`, `k`, `v` (those in `tracked`) of `sum(out ∘ w)`.
    fn run(
        attend: impl Fn(Tensor<4>, Tensor<4>, Tensor<4>) -> Tensor<4>,
        inputs: &[Tensor<4>; 3],
        tracked: [bool; 3],
        weights: &Tensor<4>,
    ) -> Vec<Tensor<4>> {
        let [q, k, v] = inputs.clone().map(|x| x.detach());
        let [q, k, v] = [(q, tracked[0]), (k, tracked[1]), (v, tracked[2])]
            .map(|(x, on)| if on { x.require_grad() } else { x });
        let out = attend(q.clone(), k.clone(), v.clone());
        let grads = (out.clone() * weights.clone()).sum().backward();
        let mut results = vec![out.inner()];
        for (x, on) in [(q, tracked[0]), (k, tracked[1]), (v, tracked[2])] {
            results.extend(on.then(|| x.grad(&grads).unwrap()));
        }
        results
    }

    /// The one operation equals the separate ones in value and in the gradients of q, k and v,
    /// with and without a dropout mask, with every input tracked or only some.
    #[test]
    fn training_attention_equals_separate_operations_in_value_and_gradients() {
        let device = Device::flex().autodiff();
        device.seed(17);
        let draw = |std| Tensor::<4>::random(SHAPE, Distribution::Normal(0.0, std), &device);
        let inputs = [draw(2.0), draw(2.0), draw(1.0)];
        let weights = draw(1.0);
        let [batch, heads, seq, _] = SHAPE;
        let scores_shape = [batch, heads, seq, seq];
        let mask = Tensor::<4>::random(scores_shape, Distribution::Bernoulli(0.8), &device) * 1.25;
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device);
        for keep in [None, Some(mask)] {
            for tracked in [[true; 3], [false, true, true], [true, true, false]] {
                let fused = |q, k, v| causal_attention_train(q, k, v, &causal, keep.clone(), 0.25);
                let plain = |q, k, v| separate(q, k, v, keep.clone());
                let expected = run(plain, &inputs, tracked, &weights);
                let got = run(fused, &inputs, tracked, &weights);
                assert_eq!(expected.len(), got.len());
                for (i, (a, b)) in expected.into_iter().zip(got).enumerate() {
                    let diff = max_abs_diff(a, b);
                    assert!(
                        diff < 1e-5,
                        "keep {}, {tracked:?}, result {i}: {diff}",
                        keep.is_some()
                    );
                }
            }
        }
    }

    /// Without autodiff and on untracked inputs it is the same forward computation.
    #[test]
    fn training_attention_without_gradients_is_the_same_computation() {
        for device in [Device::flex(), Device::flex().autodiff()] {
            device.seed(23);
            let draw = || Tensor::<4>::random(SHAPE, Distribution::Normal(0.0, 2.0), &device);
            let (q, k, v) = (draw(), draw(), draw());
            let causal = Tensor::<2, Bool>::tril_mask([SHAPE[2], SHAPE[2]], 0, &device);
            let got = causal_attention_train(q.clone(), k.clone(), v.clone(), &causal, None, 0.25);
            assert!(max_abs_diff(got, separate(q, k, v, None)) < 1e-5);
        }
    }
}
