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
//! On cubecl's backends (CUDA, `cube-cpu`), `P` and `M` are kept as one tensor of `P`'s size:
//! `P` where a probability is kept and `−P` where it is dropped (`P ≥ 0`). `|·|` gives `P`
//! back and the sign `M`, exactly: an element whose sign is lost (`P = 0`) adds nothing to `dS`
//! or to the row sum either way. So the mask, as large as the probabilities (268 MB per layer
//! for a d512 model at batch 128 × 256), is freed after the forward pass instead of held until
//! the backward pass. The CPU keeps it ([`SavedMask`] says why).
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
/// `causal` is true where attention is forbidden (above the diagonal); `dropout` is the dropout
/// on the probabilities, or `None` without. On a device without autodiff it is the same forward
/// computation.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[seq, seq]`; `dropout.mask`:
///   `[batch, heads, seq, seq]`
/// - output: `[batch, heads, seq, head_dim]`
pub fn causal_attention_train(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    causal: &Tensor<2, Bool>,
    dropout: Option<AttentionDropout>,
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
        match dropout {
            Some(AttentionDropout { mask, scale }) => Keep::Mask {
                mask: mask.into_dispatch(),
                scale,
            },
            None => Keep::All,
        },
        scale,
    ))
}

/// Dropout on the attention probabilities: which are kept, and by what they are multiplied.
#[derive(Debug, Clone)]
pub struct AttentionDropout {
    /// `scale` where a probability is kept, 0 where it is dropped (a mask as
    /// `dropout_mask` draws it).
    pub mask: Tensor<4>,
    /// The factor of a kept probability, `1/keep`.
    pub scale: f32,
}

/// The forward pass: the attention probabilities `softmax(q kᵀ · scale)` with `causal`'s
/// positions at 0, as the backward pass keeps them ([`Probs`]: with the dropout mask in their
/// signs if `in_signs`, else beside them), and the output `(probs ∘ M) v`.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[batch, heads, seq, seq]`
/// - output: `[batch, heads, seq, seq]` and `[batch, heads, seq, head_dim]`
fn forward<B: Backend>(
    [q, k, v]: [FloatTensor<B>; 3],
    causal: BoolTensor<B>,
    keep: Keep<B>,
    scale: f64,
    in_signs: bool,
) -> (Probs<B>, FloatTensor<B>) {
    let scores = B::float_mul_scalar(B::float_matmul(q, B::float_transpose(k)), scale.into());
    let probs = B::softmax(
        B::float_mask_fill(scores, causal, f32::NEG_INFINITY.into()),
        3,
    );
    let probs = match keep {
        Keep::Mask { mask, .. } if !in_signs => Probs::Masked { probs, mask },
        Keep::Mask { mask, scale } => {
            // 2·sign(mask) − 1: +1 where kept, −1 where dropped (the mask is never negative).
            let sign = B::float_add_scalar(
                B::float_mul_scalar(B::float_sign(mask), 2f32.into()),
                (-1f32).into(),
            );
            let signed = B::float_mul(probs, sign);
            Probs::Signed { signed, scale }
        }
        Keep::All => Probs::Plain(probs),
    };
    let out = B::float_matmul(probs.dropped(), v);
    (probs, out)
}

/// Which attention probabilities dropout keeps.
#[derive(ExtensionType, Clone, Debug)]
pub enum Keep<B: Backend> {
    /// Dropout: `mask` is `scale` where a probability is kept, 0 where it is dropped.
    Mask {
        /// The mask, in the probabilities' shape.
        mask: FloatTensor<B>,
        /// `1/keep`.
        scale: f32,
    },
    /// No dropout.
    All,
}

/// The attention probabilities as the backward pass keeps them (see the module docs).
#[derive(Clone, Debug)]
enum Probs<B: Backend> {
    /// Without dropout: `P`.
    Plain(FloatTensor<B>),
    /// With dropout, the mask beside: `P` and `M`.
    Masked {
        probs: FloatTensor<B>,
        mask: FloatTensor<B>,
    },
    /// With dropout: `P` where kept, `−P` where dropped; a kept one is multiplied by `scale`.
    Signed { signed: FloatTensor<B>, scale: f32 },
}

impl<B: Backend> Probs<B> {
    /// `P`.
    fn probs(&self) -> FloatTensor<B> {
        match self {
            Probs::Plain(probs) | Probs::Masked { probs, .. } => probs.clone(),
            Probs::Signed { signed, .. } => B::float_abs(signed.clone()),
        }
    }

    /// `P ∘ M`: what multiplies `v`.
    fn dropped(&self) -> FloatTensor<B> {
        match self {
            Probs::Plain(probs) => probs.clone(),
            Probs::Masked { probs, mask } => B::float_mul(probs.clone(), mask.clone()),
            Probs::Signed { signed, scale } => {
                B::float_mul_scalar(B::relu(signed.clone()), (*scale).into())
            }
        }
    }

    /// `x ∘ M`, for `x` in the probabilities' shape. `M = sign(relu(±P)) · scale` is the mask
    /// where `P > 0`; where `P = 0` it is 0 whatever was drawn, which changes nothing that
    /// `x ∘ M` is used for (`dS = P ∘ (…)` and the row sum of `x ∘ M ∘ P`).
    fn masked(&self, x: FloatTensor<B>) -> FloatTensor<B> {
        match self {
            Probs::Plain(_) => x,
            Probs::Masked { mask, .. } => B::float_mul(x, mask.clone()),
            Probs::Signed { signed, scale } => {
                let kept = B::float_sign(B::relu(signed.clone()));
                B::float_mul(x, B::float_mul_scalar(kept, (*scale).into()))
            }
        }
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
        forward::<Self>([q, k, v], causal, keep, scale, false).1
    }
}

impl AttentionOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl AttentionOps for burn::backend::Cube {}

/// Where a backend's training attention keeps the dropout mask for the backward pass.
pub trait SavedMask {
    /// In the probabilities' signs (the module docs), not beside them. cubecl's fused kernels
    /// encode and decode the signs in the passes that read the probabilities anyway; on the
    /// CPU every such operation is a pass of its own over `[batch, heads, seq, seq]`, which
    /// made a d128 training process 1.06× as long (docs/perf.md), so `flex` keeps the mask.
    const IN_SIGNS: bool;
}

impl SavedMask for burn::backend::Flex {
    const IN_SIGNS: bool = false;
}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl SavedMask for burn::backend::Cube {
    const IN_SIGNS: bool = true;
}

/// What the backward pass keeps: the inputs and the probabilities with the dropout mask.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    probs: Probs<B>,
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
        let wanted = [node_q.is_some(), node_k.is_some(), node_v.is_some()];
        let computed = ops.state.gradients(grad_out, wanted);
        for (node, grad) in [node_q, node_k, node_v].into_iter().zip(computed) {
            if let (Some(node), Some(grad)) = (node, grad) {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend> Saved<B> {
    /// The gradients of `q`, `k` and `v` (those `wanted`) from the output's, `grad_out`.
    fn gradients(self, grad_out: FloatTensor<B>, wanted: [bool; 3]) -> [Option<FloatTensor<B>>; 3] {
        let Saved {
            q,
            k,
            v,
            probs: saved,
            scale,
        } = self;
        let grad_v = wanted[2]
            .then(|| B::float_matmul(B::float_transpose(saved.dropped()), grad_out.clone()));
        if !wanted[0] && !wanted[1] {
            return [None, None, grad_v];
        }
        // dP = (dO vᵀ) ∘ M; dS = P ∘ (dP − rowsum(dP ∘ P)) · scale.
        let grad_probs = saved.masked(B::float_matmul(grad_out, B::float_transpose(v)));
        let probs = saved.probs();
        let row = B::float_sum_dim(B::float_mul(grad_probs.clone(), probs.clone()), 3);
        let grad_scores = B::float_mul_scalar(
            B::float_mul(probs, B::float_sub(grad_probs, row)),
            scale.into(),
        );
        let grad_q = wanted[0].then(|| B::float_matmul(grad_scores.clone(), k));
        let grad_k = wanted[1].then(|| B::float_matmul(B::float_transpose(grad_scores), q));
        [grad_q, grad_k, grad_v]
    }
}

impl<B: Backend + AttentionOps + SavedMask, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
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
            Keep::Mask { mask, scale } => Keep::Mask {
                mask: mask.into_primitive(),
                scale,
            },
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
                let (probs, out) = forward::<B>(inputs, causal, keep, scale, B::IN_SIGNS);
                let saved = Saved {
                    q,
                    k,
                    v,
                    probs,
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
                let dropout = keep
                    .clone()
                    .map(|mask| AttentionDropout { mask, scale: 1.25 });
                let fused =
                    |q, k, v| causal_attention_train(q, k, v, &causal, dropout.clone(), 0.25);
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

    /// The mask kept in the probabilities' signs (cubecl's way) gives the output and the
    /// gradients of the mask kept beside them (the CPU's) to the last bit, at a keep factor
    /// that is not a power of two and with half the probabilities dropped.
    #[test]
    fn the_mask_in_the_probabilities_signs_gives_the_same_output_and_gradients() {
        let device = Device::flex();
        device.seed(29);
        let draw = |shape: [usize; 4], std| {
            Tensor::<4>::random(shape, Distribution::Normal(0.0, std), &device)
        };
        let [batch, heads, seq, _] = SHAPE;
        let [q, k, v] = [draw(SHAPE, 2.0), draw(SHAPE, 2.0), draw(SHAPE, 1.0)];
        let grad_out = draw(SHAPE, 1.0);
        let scale = (1.0f64 / 0.9) as f32;
        let shape = [batch, heads, seq, seq];
        let mask = Tensor::<4>::random(shape, Distribution::Bernoulli(0.5), &device) * scale;
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device)
            .reshape([1, 1, seq, seq])
            .expand(shape);
        let run = |in_signs| {
            let keep = Keep::<Dispatch>::Mask {
                mask: mask.clone().into_dispatch(),
                scale,
            };
            let inputs = [&q, &k, &v].map(|x| x.clone().into_dispatch());
            let (probs, out) = forward(
                inputs.clone(),
                causal.clone().into_dispatch(),
                keep,
                0.25,
                in_signs,
            );
            assert_eq!(matches!(probs, Probs::Signed { .. }), in_signs);
            let [q, k, v] = inputs;
            let saved = Saved {
                q,
                k,
                v,
                probs,
                scale: 0.25,
            };
            let grads = saved.gradients(grad_out.clone().into_dispatch(), [true; 3]);
            let values = |x| {
                Tensor::<4>::from_dispatch(x)
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap()
            };
            let mut all = vec![values(out)];
            all.extend(grads.into_iter().map(|g| values(g.expect("wanted"))));
            all
        };
        let (beside, in_signs) = (run(false), run(true));
        for (i, (a, b)) in beside.iter().zip(&in_signs).enumerate() {
            let differ = a.iter().zip(b).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ,
                0,
                "result {i}: {differ} of {} elements differ",
                a.len()
            );
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
