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
//! The operation starts from the projection's packed output `[batch, seq, 3d]` (`q`, `k` and
//! `v` side by side, the reference's one `qkv` weight) and ends at `[batch, seq, d]`, the input
//! of the output projection: cutting `q`, `k` and `v` into heads and turning `q` and `k` by
//! RoPE happen inside it, and its backward pass returns one `[batch, seq, 3d]` gradient,
//! RoPE's transpose applied to `dq` and `dk` and the three concatenated. Cut apart by separate
//! operations (slices of the output, or three products with slices of the weight), each
//! slice's backward pass is a zero tensor of the whole sliced shape with the slice's gradient
//! written into it, summed with the others', and RoPE's operations keep their inputs for their
//! own backward passes.
//!
//! The forward pass runs through a backend extension ([`AttentionOps`]): each backend
//! (`flex` on the CPU, cubecl's with fusion on CUDA and on `cube-cpu`) computes it from its own
//! operations, and burn's autodiff decorator records it as one node with the backward pass
//! above.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::{BoolTensor, FloatTensor};
use burn::backend::{Backend, Dispatch, ExtensionType, backend_extension};
use burn::backend::{Shape, Slice, TensorMetadata};
use burn::prelude::*;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;

use crate::products::{ProductOps, backend_product};
use crate::rope::{RopeTables, Rotation};

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

/// `q`, `k` and `v` of every head from the packed projection `qkv` (`[batch, seq, 3d]`: `q`,
/// `k`, `v` side by side, each `heads` heads of `d / heads` columns), RoPE applied to `q` and
/// `k`: what [`causal_attention`] takes outside training.
///
/// # Shapes
/// - `qkv`: `[batch, seq, 3d]`, with the tables' `seq`
/// - output: three `[batch, heads, seq, d / heads]`
pub fn split_heads(qkv: Tensor<3>, heads: usize, rope: &RopeTables) -> [Tensor<4>; 3] {
    split::<Dispatch>(qkv.into_dispatch(), heads, &rope.rotation()).map(Tensor::from_dispatch)
}

/// The heads' outputs side by side again: `[batch, heads, seq, head_dim]` to `[batch, seq,
/// heads · head_dim]`, the input of the output projection.
pub fn merge_heads(x: Tensor<4>) -> Tensor<3> {
    Tensor::from_dispatch(merge::<Dispatch>(x.into_dispatch()))
}

/// `(softmax(q kᵀ · scale, causal) ∘ keep) v` of the heads [`split_heads`] cuts from `qkv`,
/// merged again ([`merge_heads`]): the training path's attention, differentiable in `qkv`
/// with the backward pass of the module docs.
///
/// `causal` is true where attention is forbidden (above the diagonal); `dropout` is the dropout
/// on the probabilities, or `None` without. On a device without autodiff it is the same forward
/// computation.
///
/// # Shapes
/// - `qkv`: `[batch, seq, 3d]`; `causal`: `[seq, seq]`; `dropout.mask`: `[batch, heads, seq,
///   seq]`
/// - output: `[batch, seq, d]`
pub fn causal_attention_train(
    qkv: Tensor<3>,
    heads: usize,
    rope: &RopeTables,
    causal: &Tensor<2, Bool>,
    dropout: Option<AttentionDropout>,
    scale: f64,
) -> Tensor<3> {
    let [batch, seq, _] = qkv.dims();
    let causal = causal
        .clone()
        .reshape([1, 1, seq, seq])
        .expand([batch, heads, seq, seq]);
    Tensor::from_dispatch(<Dispatch as AttentionOps>::causal_attention_train(
        qkv.into_dispatch(),
        rope.rotation(),
        causal.into_dispatch(),
        match dropout {
            Some(AttentionDropout { mask, scale }) => Keep::Mask {
                mask: mask.into_dispatch(),
                scale,
            },
            None => Keep::All,
        },
        Heads { heads, scale },
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

/// How many heads `qkv` holds, and the scores' factor (`1/√head_dim`).
#[derive(Clone, Copy, Debug)]
pub struct Heads {
    /// The number of heads.
    pub heads: usize,
    /// What `q kᵀ` is multiplied by.
    pub scale: f64,
}

/// `[batch, seq, 3d]` to `q`, `k`, `v` as `[batch, heads, seq, head_dim]`, `q` and `k`
/// rotated.
pub(crate) fn split<B: Backend>(
    qkv: FloatTensor<B>,
    heads: usize,
    rope: &Rotation<B>,
) -> [FloatTensor<B>; 3] {
    let [batch, seq, width] = qkv.shape().dims();
    let d = width / 3;
    let part = |i: usize| {
        let columns = [
            Slice::full(),
            Slice::full(),
            Slice::new((i * d) as isize, Some(((i + 1) * d) as isize), 1),
        ];
        let x = B::float_reshape(
            B::float_slice(qkv.clone(), &columns),
            Shape::new([batch, seq, heads, d / heads]),
        );
        B::float_swap_dims(x, 1, 2)
    };
    [rope.rotate(part(0)), rope.rotate(part(1)), part(2)]
}

/// `[batch, heads, seq, head_dim]` to `[batch, seq, heads · head_dim]`.
pub(crate) fn merge<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let [batch, heads, seq, head_dim] = x.shape().dims();
    B::float_reshape(
        B::float_swap_dims(x, 1, 2),
        Shape::new([batch, seq, heads * head_dim]),
    )
}

/// [`merge`]'s inverse: `[batch, seq, heads · head_dim]` to `[batch, heads, seq, head_dim]`.
pub(crate) fn unmerge<B: Backend>(x: FloatTensor<B>, heads: usize) -> FloatTensor<B> {
    let [batch, seq, d] = x.shape().dims();
    B::float_swap_dims(
        B::float_reshape(x, Shape::new([batch, seq, heads, d / heads])),
        1,
        2,
    )
}

/// The forward pass: the attention probabilities `softmax(q kᵀ · scale)` with `causal`'s
/// positions at 0, as the backward pass keeps them ([`Probs`]: with the dropout mask in their
/// signs if `in_signs`, else beside them), and the output `(probs ∘ M) v`.
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[batch, heads, seq, seq]`
/// - output: `[batch, heads, seq, seq]` and `[batch, heads, seq, head_dim]`
fn attend<B: ProductOps>(
    [q, k, v]: [FloatTensor<B>; 3],
    causal: BoolTensor<B>,
    keep: Keep<B>,
    scale: f64,
    in_signs: bool,
) -> (Probs<B>, FloatTensor<B>) {
    let scores = B::float_mul_scalar(backend_product::<B>(q, k, false, true), scale.into());
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
    let out = backend_product::<B>(probs.dropped(), v, false, false);
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
pub trait AttentionOps: Backend + ProductOps {
    /// [`causal_attention_train`] of the packed `qkv`, with `causal` already broadcast to the
    /// scores' shape.
    fn causal_attention_train(
        qkv: FloatTensor<Self>,
        #[extension_type] rope: Rotation<Self>,
        causal: BoolTensor<Self>,
        #[extension_type] keep: Keep<Self>,
        heads: Heads,
    ) -> FloatTensor<Self> {
        let inputs = split::<Self>(qkv, heads.heads, &rope);
        merge::<Self>(attend::<Self>(inputs, causal, keep, heads.scale, false).1)
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

/// What the backward pass keeps of the heads (beside RoPE's tables, to turn `dq` and `dk`
/// back): their inputs (`q` and `k` rotated) and the probabilities with the dropout mask.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    probs: Probs<B>,
    scale: f64,
}

/// The backward pass of training attention, for the packed `qkv`.
#[derive(Debug)]
struct AttentionBackward;

impl<B: Backend + ProductOps> Backward<B, 1> for AttentionBackward {
    type State = (Saved<B>, Rotation<B>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad_out = grads.consume::<B>(&ops.node);
        if let Some(node) = node {
            let (saved, rope) = ops.state;
            let heads = saved.q.shape().dims::<4>()[1];
            let [dq, dk, dv] = saved.gradients(unmerge::<B>(grad_out, heads));
            let parts = [rope.rotate_back(dq), rope.rotate_back(dk), dv].map(merge::<B>);
            grads.register::<B>(node.id, B::float_cat(parts.into(), 2));
        }
    }
}

impl<B: ProductOps> Saved<B> {
    /// The gradients of `q`, `k` and `v` from the output's, `grad_out` (all
    /// `[batch, heads, seq, head_dim]`).
    fn gradients(self, grad_out: FloatTensor<B>) -> [FloatTensor<B>; 3] {
        let Saved {
            q,
            k,
            v,
            probs: saved,
            scale,
        } = self;
        let grad_v = backend_product::<B>(saved.dropped(), grad_out.clone(), true, false);
        // dP = (dO vᵀ) ∘ M; dS = P ∘ (dP − rowsum(dP ∘ P)) · scale.
        let grad_probs = saved.masked(backend_product::<B>(grad_out, v, false, true));
        let probs = saved.probs();
        let row = B::float_sum_dim(B::float_mul(grad_probs.clone(), probs.clone()), 3);
        let grad_scores = B::float_mul_scalar(
            B::float_mul(probs, B::float_sub(grad_probs, row)),
            scale.into(),
        );
        let grad_q = backend_product::<B>(grad_scores.clone(), k, false, false);
        let grad_k = backend_product::<B>(grad_scores, q, true, false);
        [grad_q, grad_k, grad_v]
    }
}

impl<B: Backend + AttentionOps + SavedMask, C: CheckpointStrategy> AttentionOps for Autodiff<B, C> {
    fn causal_attention_train(
        qkv: FloatTensor<Self>,
        rope: Rotation<Self>,
        causal: BoolTensor<Self>,
        keep: Keep<Self>,
        heads: Heads,
    ) -> FloatTensor<Self> {
        // The mask and the tables are constants: their primitives are all that is needed.
        let keep = match keep {
            Keep::Mask { mask, scale } => Keep::Mask {
                mask: mask.into_primitive(),
                scale,
            },
            Keep::All => Keep::All,
        };
        let rope = Rotation {
            cos: rope.cos.into_primitive(),
            sin: rope.sin.into_primitive(),
            partner: rope.partner.into_primitive(),
        };
        match AttentionBackward
            .prepare::<C>([qkv.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let [q, k, v] = split::<B>(qkv.into_primitive(), heads.heads, &rope);
                let inputs = [q.clone(), k.clone(), v.clone()];
                let (probs, out) = attend::<B>(inputs, causal, keep, heads.scale, B::IN_SIGNS);
                let saved = Saved {
                    q,
                    k,
                    v,
                    probs,
                    scale: heads.scale,
                };
                prep.finish((saved, rope), merge::<B>(out))
            }
            OpsKind::UnTracked(prep) => prep.finish(B::causal_attention_train(
                qkv.into_primitive(),
                rope,
                causal,
                keep,
                heads,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Rope;
    use crate::rope::{apply_rope, rope_tables};
    use burn::tensor::Distribution;
    use burn::tensor::activation::softmax;

    /// `[batch, heads, seq, head_dim]`: d = 48, so `qkv` is `[2, 29, 144]`.
    const SHAPE: [usize; 4] = [2, 3, 29, 16];
    const SCALE: f64 = 0.25;

    /// The same attention from separate tensor operations, which autodiff differentiates: the
    /// heads cut from `qkv` by slices, RoPE by [`apply_rope`], softmax and the products.
    fn separate(qkv: Tensor<3>, rope: &RopeTables, keep: Option<Tensor<4>>) -> Tensor<3> {
        let [batch, heads, seq, head_dim] = SHAPE;
        let d = heads * head_dim;
        let part = |i: usize| {
            qkv.clone()
                .narrow(2, i * d, d)
                .reshape([batch, seq, heads, head_dim])
                .swap_dims(1, 2)
        };
        let (q, k, v) = (
            apply_rope(part(0), rope),
            apply_rope(part(1), rope),
            part(2),
        );
        let future = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &q.device())
            .reshape([1, 1, seq, seq])
            .expand([batch, heads, seq, seq]);
        let scores = q.matmul(k.swap_dims(2, 3)) * SCALE;
        let probs = softmax(scores.mask_fill(future, f32::NEG_INFINITY), 3);
        let out = match keep {
            Some(keep) => (probs * keep).matmul(v),
            None => probs.matmul(v),
        };
        out.swap_dims(1, 2).reshape([batch, seq, d])
    }

    fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    fn packed_input(device: &Device) -> Tensor<3> {
        let [batch, heads, seq, head_dim] = SHAPE;
        let shape = [batch, seq, 3 * heads * head_dim];
        Tensor::<3>::random(shape, Distribution::Normal(0.0, 2.0), device)
    }

    /// The one operation equals the separate ones in value and in the gradient of the packed
    /// `qkv`, with and without a dropout mask, with both RoPE variants.
    #[test]
    fn training_attention_equals_separate_operations_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(17);
        let [batch, heads, seq, head_dim] = SHAPE;
        let qkv = packed_input(&device);
        let weights = Tensor::<3>::random(
            [batch, seq, heads * head_dim],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let scores_shape = [batch, heads, seq, seq];
        let mask = Tensor::<4>::random(scores_shape, Distribution::Bernoulli(0.8), &device) * 1.25;
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device);
        for rope in [Rope::Reference, Rope::Standard] {
            let tables = rope_tables(rope, seq, head_dim, &device);
            for keep in [None, Some(mask.clone())] {
                let dropout = keep
                    .clone()
                    .map(|mask| AttentionDropout { mask, scale: 1.25 });
                let run = |attend: &dyn Fn(Tensor<3>) -> Tensor<3>| {
                    let x = qkv.clone().detach().require_grad();
                    let out = attend(x.clone());
                    let grads = (out.clone() * weights.clone()).sum().backward();
                    (out.inner(), x.grad(&grads).expect("tracked"))
                };
                let (want_out, want_grad) = run(&|x| separate(x, &tables, keep.clone()));
                let (out, grad) = run(&|x| {
                    causal_attention_train(x, heads, &tables, &causal, dropout.clone(), SCALE)
                });
                let what = format!("{rope:?}, dropout {}", keep.is_some());
                let diff = max_abs_diff(out, want_out);
                assert!(diff < 1e-5, "{what}: output off by {diff}");
                let diff = max_abs_diff(grad, want_grad);
                assert!(diff < 1e-5, "{what}: gradient off by {diff}");
            }
        }
    }

    /// The mask kept in the probabilities' signs (cubecl's way) gives the output and the
    /// gradients of the mask kept beside them (the CPU's) to the last bit, at a keep factor
    /// that is not a power of two and with half the probabilities dropped.
    #[test]
    fn the_mask_in_the_probabilities_signs_gives_the_same_output_and_gradients() {
        let _rng = crate::rng::rng_lock();
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
            let (probs, out) = attend(
                inputs.clone(),
                causal.clone().into_dispatch(),
                keep,
                SCALE,
                in_signs,
            );
            assert_eq!(matches!(probs, Probs::Signed { .. }), in_signs);
            let [q, k, v] = inputs;
            let saved = Saved {
                q,
                k,
                v,
                probs,
                scale: SCALE,
            };
            let grads = saved.gradients(grad_out.clone().into_dispatch());
            let values = |x| {
                Tensor::<4>::from_dispatch(x)
                    .into_data()
                    .try_to_vec::<f32>()
                    .unwrap()
            };
            let mut all = vec![values(out)];
            all.extend(grads.into_iter().map(values));
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

    /// Without autodiff and on an untracked input it is the same forward computation, and
    /// that of the heads cut by `split_heads` through burn's fused attention.
    #[test]
    fn training_attention_without_gradients_is_the_same_computation() {
        let _rng = crate::rng::rng_lock();
        let [_, heads, seq, head_dim] = SHAPE;
        for device in [Device::flex(), Device::flex().autodiff()] {
            device.seed(23);
            let qkv = packed_input(&device);
            let tables = rope_tables(Rope::Reference, seq, head_dim, &device);
            let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device);
            let got = causal_attention_train(qkv.clone(), heads, &tables, &causal, None, SCALE);
            let want = separate(qkv.clone(), &tables, None);
            assert!(max_abs_diff(got, want.clone()) < 1e-5);
            let [q, k, v] = split_heads(qkv, heads, &tables);
            let fused = merge_heads(causal_attention(q, k, v));
            assert!(max_abs_diff(fused, want) < 1e-5);
        }
    }
}
