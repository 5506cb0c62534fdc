//! The transformer's training attention as three kernels that never hold a `[batch, heads, seq,
//! seq]` tensor: one for the forward pass and two for the backward pass, FlashAttention's
//! scheme with the reference's dropout on the probabilities.
//!
//! [`crate::attention`]'s training attention is one autodiff node, but inside it the scores,
//! the probabilities, their gradient and the dropout mask are each a `[batch, heads, seq, seq]`
//! tensor written to and read from device memory (256 MiB apiece for a d512 model at batch 128 ×
//! 256), and the probabilities are kept from the forward pass to the backward pass. Here:
//!
//! - **forward** (one cube per head and block of query rows, two units per row): a row's
//!   units keep its query row and half its output row each in registers and walk the keys up
//!   to its position, block by block through shared memory, with the online softmax (a
//!   running maximum `m` and sum `l`); dropout multiplies a probability by its mask after
//!   softmax's normalisation, as the reference's `F.dropout` does. Out come the output and
//!   each row's `lse = m + ln l`, all the backward pass keeps besides `q`, `k`, `v` and the
//!   output.
//! - **`dq`** (one cube per head and block of query rows, two units per row): with `D =
//!   rowsum(dO ∘ O)`, it recomputes each probability `P = exp(s − lse)`, `dP = (dO · v) ∘ M`
//!   and `dS = P ∘ (dP − D)`, and sums `dS · k` over the keys.
//! - **`dk`, `dv`** (one cube per head and block of keys, two units per key): the same
//!   quantities walked by key, summing `(P ∘ M) · dO` and `dS · q` over the queries.
//!
//! `M` is the mask of [`crate::dropout`]: element `((b · heads + h) · seq + i) · seq + j` of the
//! probabilities is kept iff SplitMix64 of the seed and that index falls below the threshold,
//! so a dropped probability is the one the CPU's attention drops for the same three seed
//! integers (`crate::dropout::mask_values` over the `[batch, heads, seq, seq]` shape), and the
//! backward pass computes the mask again instead of reading it. `D = rowsum(dP ∘ P)` equals
//! `rowsum(dO ∘ O)` with dropout too, since `O = (P ∘ M) v`.
//!
//! The kernels run on cubecl's backends (`cuda`, `cube-cpu`), where fusion records each as one
//! operation. The CPU (`flex`) implements the same operations from whole tensors
//! ([`reference_forward`], [`reference_backward`]): the definition the kernels are held to in
//! tests, not a path training takes (the CPU's training attention is [`crate::attention`]'s).
//! Which path a cubecl device trains with is the model's [`crate::TrainingAttention`].

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{AutodiffBackend, Backend, Dispatch, Shape, TensorMetadata, backend_extension};
use burn::prelude::*;
use burn::tensor::TensorData;

use crate::attention::{merge, split, unmerge};
use crate::dropout::{DropoutOps, keep_scale, keep_threshold};
use crate::rope::{RopeTables, Rotation};

/// Dropout on the attention probabilities, for the kernels: the seed's three integers (as
/// `crate::dropout::dropout_seed` draws them) and the probability of keeping one.
#[derive(Debug, Clone)]
pub struct SeededDropout {
    /// Three 30-bit integers, `[3]`.
    pub parts: Tensor<1, Int>,
    /// The probability that a probability is kept.
    pub keep: f64,
}

/// What the kernels compute besides their tensors: the scores' factor and the dropout.
#[derive(Clone, Copy, Debug)]
pub struct KernelSettings {
    /// What `q kᵀ` is multiplied by.
    pub scale: f32,
    /// Whether probabilities are dropped at all.
    pub dropout: bool,
    /// The mask's threshold, `keep · 2³²` (`crate::dropout::mask_values`).
    pub threshold: u64,
    /// A kept probability's factor, `1/keep`.
    pub keep_scale: f32,
}

impl KernelSettings {
    /// The settings for `scale` and `dropout`'s probability, if any.
    fn new(scale: f64, keep: Option<f64>) -> Self {
        KernelSettings {
            scale: scale as f32,
            dropout: keep.is_some(),
            threshold: keep.map_or(0, keep_threshold),
            keep_scale: keep.map_or(1.0, keep_scale),
        }
    }
}

/// `(softmax(q kᵀ · scale, causal) ∘ M) v` of the heads cut from `qkv`, merged again: what
/// [`crate::attention::causal_attention_train`] computes, by this module's kernels on cubecl's
/// devices, differentiable in `qkv`. `dropout` is `None` without dropout.
///
/// # Shapes
/// - `qkv`: `[batch, seq, 3d]`, with the tables' `seq`
/// - output: `[batch, seq, d]`
pub fn causal_attention_kernels(
    qkv: Tensor<3>,
    heads: usize,
    rope: &RopeTables,
    dropout: Option<SeededDropout>,
    scale: f64,
) -> Tensor<3> {
    let settings = KernelSettings::new(scale, dropout.as_ref().map(|d| d.keep));
    let parts = match dropout {
        Some(dropout) => dropout.parts,
        None => Tensor::<1, Int>::zeros([3], &qkv.device()),
    };
    Tensor::from_dispatch(<Dispatch as AttentionKernelOps>::attention_kernel_train(
        qkv.into_dispatch(),
        rope.rotation(),
        parts.into_dispatch(),
        heads,
        settings,
    ))
}

/// The attention of the module docs as backend operations.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait AttentionKernelOps: Backend {
    /// [`causal_attention_kernels`] of the packed `qkv`; the autodiff decorator's adds the
    /// backward pass.
    #[fusion(default)]
    fn attention_kernel_train(
        qkv: FloatTensor<Self>,
        #[extension_type] rope: Rotation<Self>,
        parts: IntTensor<Self>,
        heads: usize,
        settings: KernelSettings,
    ) -> FloatTensor<Self> {
        let [q, k, v] = split::<Self>(qkv, heads, &rope);
        merge::<Self>(Self::attention_forward(q, k, v, parts, settings).0)
    }

    /// The output and each row's `lse`.
    ///
    /// # Shapes
    /// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `parts`: `[3]`
    /// - output: `[batch, heads, seq, head_dim]` and `[batch, heads, seq]`
    #[fusion(meta = |q, _k, _v, _parts, _settings| (q.clone(), rows_spec(q)))]
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// The gradients of `q`, `k` and `v` from the output's, `grad_out`, given the forward
    /// pass's `lse` and `delta = rowsum(grad_out ∘ out)`.
    ///
    /// # Shapes
    /// - `q`, `k`, `v`, `grad_out`: `[batch, heads, seq, head_dim]`; `lse`, `delta`:
    ///   `[batch, heads, seq]`; `parts`: `[3]`
    /// - output: three `[batch, heads, seq, head_dim]`
    #[fusion(meta = |q, k, v, _lse, _delta, _grad, _parts, _settings| (q.clone(), k.clone(), v.clone()))]
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

/// The spec of `[batch, heads, seq]` for `q`'s `[batch, heads, seq, head_dim]`.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn rows_spec(
    q: &burn::backend::fusion::custom::TensorSpec,
) -> burn::backend::fusion::custom::TensorSpec {
    let [batch, heads, seq, _] = q.shape.dims();
    burn::backend::fusion::custom::TensorSpec::new(Shape::new([batch, heads, seq]), q.dtype)
}

/// `0` above the diagonal of `[seq, seq]` is `-∞`, elsewhere 0: the causal mask as a bias.
fn causal_bias<B: Backend>(seq: usize, device: &B::Device) -> FloatTensor<B> {
    let values = (0..seq * seq)
        .map(|at| {
            if at % seq > at / seq {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect::<Vec<_>>();
    B::float_from_data(TensorData::new(values, [1, 1, seq, seq]), device)
}

/// The dropout mask over `[batch, heads, seq, seq]`: `keep_scale` where kept, else 0; all ones
/// without dropout.
fn probability_mask<B: Backend + DropoutOps>(
    shape: Shape,
    parts: IntTensor<B>,
    settings: KernelSettings,
    device: &B::Device,
) -> FloatTensor<B> {
    let ones = B::float_ones(shape, device, burn::tensor::FloatDType::F32);
    if !settings.dropout {
        return ones;
    }
    B::hashed_dropout(ones, parts, settings.threshold, settings.keep_scale)
}

/// The scores `q kᵀ · scale` with `-∞` above the diagonal, from whole tensors.
fn scores<B: Backend>(q: FloatTensor<B>, k: FloatTensor<B>, scale: f32) -> FloatTensor<B> {
    let [batch, heads, seq, _] = q.shape().dims();
    let device = q.device();
    let scores = B::float_mul_scalar(B::float_matmul(q, B::float_transpose(k)), scale.into());
    let full = Shape::new([batch, heads, seq, seq]);
    B::float_add(
        scores,
        B::float_expand(causal_bias::<B>(seq, &device), full),
    )
}

/// Each row's `lse = max + ln Σ exp(s − max)` of `scores`, `[batch, heads, seq, 1]`.
fn row_lse<B: Backend>(scores: FloatTensor<B>) -> FloatTensor<B> {
    let max = B::float_max_dim(scores.clone(), 3);
    let sum = B::float_sum_dim(B::float_exp(B::float_sub(scores, max.clone())), 3);
    B::float_add(max, B::float_log(sum))
}

/// [`AttentionKernelOps::attention_forward`] from whole tensors (the module docs).
pub fn reference_forward<B: Backend + DropoutOps>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    parts: IntTensor<B>,
    settings: KernelSettings,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [batch, heads, seq, _] = q.shape().dims();
    let device = q.device();
    let scores = scores::<B>(q, k, settings.scale);
    let lse = row_lse::<B>(scores.clone());
    let probs = B::float_exp(B::float_sub(scores, lse.clone()));
    let mask = probability_mask::<B>(probs.shape(), parts, settings, &device);
    let out = B::float_matmul(B::float_mul(probs, mask), v);
    (out, B::float_reshape(lse, Shape::new([batch, heads, seq])))
}

/// [`AttentionKernelOps::attention_backward`] from whole tensors (the module docs).
#[allow(clippy::too_many_arguments)]
pub fn reference_backward<B: Backend + DropoutOps>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    lse: FloatTensor<B>,
    delta: FloatTensor<B>,
    grad_out: FloatTensor<B>,
    parts: IntTensor<B>,
    settings: KernelSettings,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let [batch, heads, seq, _] = q.shape().dims();
    let device = q.device();
    let column = Shape::new([batch, heads, seq, 1]);
    let scores = scores::<B>(q.clone(), k.clone(), settings.scale);
    let probs = B::float_exp(B::float_sub(scores, B::float_reshape(lse, column.clone())));
    let mask = probability_mask::<B>(probs.shape(), parts, settings, &device);
    let dropped = B::float_mul(probs.clone(), mask.clone());
    let grad_v = B::float_matmul(B::float_transpose(dropped), grad_out.clone());
    let grad_dropped = B::float_matmul(grad_out, B::float_transpose(v));
    let grad_probs = B::float_mul(grad_dropped, mask);
    let delta = B::float_reshape(delta, column);
    let grad_scores = B::float_mul_scalar(
        B::float_mul(probs, B::float_sub(grad_probs, delta)),
        settings.scale.into(),
    );
    let grad_q = B::float_matmul(grad_scores.clone(), k);
    let grad_k = B::float_matmul(B::float_transpose(grad_scores), q);
    (grad_q, grad_k, grad_v)
}

impl AttentionKernelOps for burn::backend::Flex {
    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        reference_forward::<Self>(q, k, v, parts, settings)
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        reference_backward::<Self>(q, k, v, lse, delta, grad_out, parts, settings)
    }
}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// What the backward pass keeps: the heads' inputs, the output, each row's `lse`, the seed and
/// the settings, and RoPE's tables to turn `dq` and `dk` back.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    out: FloatTensor<B>,
    lse: FloatTensor<B>,
    parts: IntTensor<B>,
    settings: KernelSettings,
    rope: Rotation<B>,
}

/// The backward pass of [`AttentionKernelOps::attention_kernel_train`], for the packed `qkv`.
#[derive(Debug)]
struct KernelBackward;

impl<B: Backend + AttentionKernelOps> Backward<B, 1> for KernelBackward {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad_out = grads.consume::<B>(&ops.node);
        let Some(node) = node else {
            return;
        };
        let Saved {
            q,
            k,
            v,
            out,
            lse,
            parts,
            settings,
            rope,
        } = ops.state;
        let [batch, heads, seq, _] = q.shape().dims();
        let grad_out = unmerge::<B>(grad_out, heads);
        let delta = B::float_reshape(
            B::float_sum_dim(B::float_mul(grad_out.clone(), out), 3),
            Shape::new([batch, heads, seq]),
        );
        let (dq, dk, dv) = B::attention_backward(q, k, v, lse, delta, grad_out, parts, settings);
        let parts = [rope.rotate_back(dq), rope.rotate_back(dk), dv].map(merge::<B>);
        grads.register::<B>(node.id, B::float_cat(parts.into(), 2));
    }
}

impl<B: Backend + AttentionKernelOps, C: CheckpointStrategy> AttentionKernelOps for Autodiff<B, C> {
    fn attention_kernel_train(
        qkv: FloatTensor<Self>,
        rope: Rotation<Self>,
        parts: IntTensor<Self>,
        heads: usize,
        settings: KernelSettings,
    ) -> FloatTensor<Self> {
        // RoPE's tables are constants: their primitives are all that is needed.
        let rope = Rotation {
            cos: rope.cos.into_primitive(),
            sin: rope.sin.into_primitive(),
            partner: rope.partner.into_primitive(),
        };
        match KernelBackward
            .prepare::<C>([qkv.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let [q, k, v] = split::<B>(qkv.into_primitive(), heads, &rope);
                let (out, lse) =
                    B::attention_forward(q.clone(), k.clone(), v.clone(), parts.clone(), settings);
                let merged = merge::<B>(out.clone());
                let saved = Saved {
                    q,
                    k,
                    v,
                    out,
                    lse,
                    parts,
                    settings,
                    rope,
                };
                prep.finish(saved, merged)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::attention_kernel_train(
                qkv.into_primitive(),
                rope,
                parts,
                heads,
                settings,
            )),
        }
    }

    fn attention_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (out, lse) = B::attention_forward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            parts,
            settings,
        );
        (untracked::<B, C>(out), untracked::<B, C>(lse))
    }

    fn attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        grad_out: FloatTensor<Self>,
        parts: IntTensor<Self>,
        settings: KernelSettings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (dq, dk, dv) = B::attention_backward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            lse.into_primitive(),
            delta.into_primitive(),
            grad_out.into_primitive(),
            parts,
            settings,
        );
        (
            untracked::<B, C>(dq),
            untracked::<B, C>(dk),
            untracked::<B, C>(dv),
        )
    }
}

/// `x` as an autodiff tensor that nothing differentiates.
fn untracked<B: Backend, C: CheckpointStrategy>(x: FloatTensor<B>) -> FloatTensor<Autodiff<B, C>> {
    <Autodiff<B, C> as AutodiffBackend>::from_inner(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{AttentionDropout, causal_attention_train};
    use crate::config::Rope;
    use crate::dropout::{fold_seed, mask_values};
    use crate::rope::rope_tables;
    use burn::tensor::Distribution;

    /// Three seed integers, as `crate::dropout::dropout_seed` would draw them.
    const PARTS: [i64; 3] = [123_456_789, 987_654_321, 555_555_555];
    const KEEP: f64 = 0.8;

    fn parts(device: &Device) -> Tensor<1, Int> {
        Tensor::<1, Int>::from_data(TensorData::new(PARTS.to_vec(), [3]), device)
    }

    fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
        (a - b).abs().max().into_scalar()
    }

    /// The attention's output and the gradient of the packed input for the weights `weights`
    /// of a sum over the output.
    fn run(
        attend: &dyn Fn(Tensor<3>) -> Tensor<3>,
        qkv: &Tensor<3>,
        weights: &Tensor<3>,
    ) -> (Tensor<3>, Tensor<3>) {
        let x = qkv.clone().detach().require_grad();
        let out = attend(x.clone());
        let grads = (out.clone() * weights.clone()).sum().backward();
        let grad = Tensor::<3>::from_inner(x.grad(&grads).expect("tracked"));
        (out.inner(), grad)
    }

    /// `(qkv, weights)` of `[batch, seq, 3 · heads · head_dim]` and `[batch, seq, heads ·
    /// head_dim]` on `device`, from the generator's seed `seed`.
    fn inputs(shape: [usize; 4], seed: u64, device: &Device) -> (Tensor<3>, Tensor<3>) {
        let [batch, heads, seq, head_dim] = shape;
        device.seed(seed);
        let qkv = Tensor::<3>::random(
            [batch, seq, 3 * heads * head_dim],
            Distribution::Normal(0.0, 1.5),
            device,
        );
        let weights = Tensor::<3>::random(
            [batch, seq, heads * head_dim],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        (qkv, weights)
    }

    /// The whole-tensor definition (the CPU's operations) equals the training attention of
    /// `crate::attention` given the mask `crate::dropout::mask_values` draws from the same
    /// seed over `[batch, heads, seq, seq]`, in value and in the gradient of `qkv`, with and
    /// without dropout: the kernels' dropout drops what the CPU's attention drops, and the
    /// backward pass from `lse` and `rowsum(dO ∘ O)` is the attention's gradient. It fails with
    /// the mask's index transposed or `delta` left out.
    #[test]
    fn the_definition_is_the_training_attention_with_the_cpus_mask() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let shape = [2, 3, 29, 16];
        let [batch, heads, seq, head_dim] = shape;
        let (qkv, weights) = inputs(shape, 41, &device);
        let tables = rope_tables(Rope::Reference, seq, head_dim, &device);
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device);
        let scale = 1.0 / (head_dim as f64).sqrt();
        let keep_scale = (1.0 / KEEP) as f32;
        let seed = fold_seed(PARTS);
        let values = mask_values(
            seed,
            batch * heads * seq * seq,
            keep_threshold(KEEP),
            keep_scale,
        );
        let mask =
            Tensor::<4>::from_data(TensorData::new(values, [batch, heads, seq, seq]), &device);
        for dropout in [false, true] {
            let (want_out, want_grad) = run(
                &|x| {
                    let keep = dropout.then(|| AttentionDropout {
                        mask: mask.clone(),
                        scale: keep_scale,
                    });
                    causal_attention_train(x, heads, &tables, &causal, keep, scale)
                },
                &qkv,
                &weights,
            );
            let (out, grad) = run(
                &|x| {
                    let keep = dropout.then(|| SeededDropout {
                        parts: parts(&device),
                        keep: KEEP,
                    });
                    causal_attention_kernels(x, heads, &tables, keep, scale)
                },
                &qkv,
                &weights,
            );
            let diff = max_abs_diff(out, want_out);
            assert!(diff < 1e-5, "dropout {dropout}: output off by {diff}");
            let diff = max_abs_diff(grad, want_grad);
            assert!(diff < 1e-5, "dropout {dropout}: gradient off by {diff}");
        }
    }

    /// The kernels on cubecl's CPU runtime against the CPU's whole-tensor operations: output
    /// and the gradient of `qkv`, with and without dropout, at a length that ends in a partial
    /// block, at the presets' head size, and with heads of 6 columns (each unit of a row's pair
    /// summing 3) (`CARGO_TARGET_DIR=target/cube-cpu cargo test
    /// --release -p cwm-models --features cube-cpu --lib attention_kernel`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_definition_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        for shape in [[2, 3, 70, 16], [1, 2, 45, 64], [1, 2, 33, 6]] {
            let [_, heads, seq, head_dim] = shape;
            let scale = 1.0 / (head_dim as f64).sqrt();
            let (qkv, weights) = inputs(shape, 43, &cpu);
            let on = |device: &Device, dropout: bool| {
                let tables = rope_tables(Rope::Reference, seq, head_dim, device);
                let qkv = Tensor::<3>::from_data(qkv.to_data(), device);
                let weights = Tensor::<3>::from_data(weights.to_data(), device);
                let (out, grad) = run(
                    &|x| {
                        let keep = dropout.then(|| SeededDropout {
                            parts: parts(device),
                            keep: KEEP,
                        });
                        causal_attention_kernels(x, heads, &tables, keep, scale)
                    },
                    &qkv,
                    &weights,
                );
                (out.into_data(), grad.into_data())
            };
            for dropout in [false, true] {
                let (want_out, want_grad) = on(&cpu, dropout);
                let (out, grad) = on(&cube, dropout);
                let what = format!("{shape:?}, dropout {dropout}");
                let as_tensor = |data: TensorData| Tensor::<3>::from_data(data, &Device::flex());
                let diff = max_abs_diff(as_tensor(out), as_tensor(want_out));
                assert!(diff < 1e-4, "{what}: output off by {diff}");
                let diff = max_abs_diff(as_tensor(grad), as_tensor(want_grad));
                assert!(diff < 1e-4, "{what}: gradient off by {diff}");
            }
        }
    }
}
