//! The chunked delta rule's passage from chunk to chunk (Gated DeltaNet, [`crate::gdn`]) as one
//! differentiable operation.
//!
//! With each chunk's inputs precomputed for all chunks at once (`Ũ`, `W`, the decayed queries
//! `Q̃`, the masked decayed scores `QK`, the keys decayed to the chunk's end `K̃` and the
//! chunk's total decay `α`), the state `S` (`[key, value]` per batch row and head, 0 at the
//! start) runs through the chunks in order:
//!
//! ```text
//! u_c     = Ũ_c − W_c S_c
//! o_c     = Q̃_c S_c + QK_c u_c
//! S_{c+1} = α_c S_c + K̃_cᵀ u_c
//! ```
//!
//! Written as a loop of tensor operations under autodiff, each step takes its chunk of the six
//! inputs by a slice, and each slice's backward pass is a zero tensor of the input's whole
//! shape with the chunk's gradient written into it, added to the other chunks': per input, as
//! many whole-size passes as there are chunks. [`delta_chunk_recurrence`] computes the loop in
//! its forward pass and keeps every chunk's start state `S_c` and `u_c`. Of the backward pass,
//! only two quantities run from chunk to chunk, in reverse:
//!
//! ```text
//! du_c    = QK_cᵀ dO_c + K̃_c dS_{c+1}                       (dS after the last chunk: 0)
//! dS_c    = α_c dS_{c+1} + Q̃_cᵀ dO_c − W_cᵀ du_c
//! ```
//!
//! and the inputs' gradients are then products over all chunks at once (cuBLAS's where the
//! process chose it, [`crate::products`]):
//!
//! ```text
//! dŨ = du,   dW = −du Sᵀ,   dQ̃ = dO Sᵀ,   dQK = dO uᵀ,   dK̃ = u dS_nextᵀ,   dα = Σ dS_next ∘ S
//! ```
//!
//! (`dS_next` the gradient of each chunk's end state, `dS_{c+1}`).
//!
//! Both passages depend on each column of the value only through that column: column `j` of
//! `u_c`, `o_c`, `S_{c+1}`, `du_c` and `dS_c` is computed from column `j` of `S_c` (or
//! `dS_{c+1}`) and the chunk's inputs. On cubecl's devices (`cube.rs` beside this file) each
//! passage is one kernel with a unit per batch row, head and value column, which keeps its
//! column of the state in registers through all the chunks: two launches in all, against four
//! products and four element-wise operations per chunk forward and twice as many backward. On
//! the CPU
//! (`flex`) both are tensor operations chunk by chunk ([`forward_by_ops`],
//! [`backward_by_ops`]); the forward pass computes the outputs with the operations (and in the
//! order) of the loop it replaced, so they are equal to the bit
//! (`the_operation_is_the_loop_in_value_and_gradients`); the kernels agree with the CPU to
//! rounding (`the_kernels_equal_the_tensor_operations_on_cube_cpu`).

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{
    AutodiffBackend, Backend, Dispatch, Shape, Slice, TensorMetadata, backend_extension,
};
use burn::prelude::*;

use crate::products::{ProductOps, backend_product};

/// Each chunk's inputs to the passage from chunk to chunk, all chunks at once (the module
/// docs); `C` is the chunk size, `K` and `V` the key and value widths.
#[derive(Debug, Clone)]
pub struct ChunkInputs<T> {
    /// `Ũ`: `[batch, chunks, heads, C, V]`.
    pub u_tilde: T,
    /// `W`: `[batch, chunks, heads, C, K]`.
    pub w: T,
    /// `Q̃`, the queries decayed from the chunk's start: `[batch, chunks, heads, C, K]`.
    pub q_decayed: T,
    /// `QK`, the masked decayed scores, 0 above the diagonal (cubecl's kernels read only the
    /// rest): `[batch, chunks, heads, C, C]`.
    pub qk: T,
    /// `K̃`, the keys decayed to the chunk's end: `[batch, chunks, heads, C, K]`.
    pub k_to_end: T,
    /// `α`, each chunk's total decay: `[batch, chunks, heads, 1, 1]`.
    pub alpha: T,
}

impl<T> ChunkInputs<T> {
    /// The six in the fields' order.
    fn from_array([u_tilde, w, q_decayed, qk, k_to_end, alpha]: [T; 6]) -> Self {
        Self {
            u_tilde,
            w,
            q_decayed,
            qk,
            k_to_end,
            alpha,
        }
    }

    /// The six in the fields' order.
    fn into_array(self) -> [T; 6] {
        [
            self.u_tilde,
            self.w,
            self.q_decayed,
            self.qk,
            self.k_to_end,
            self.alpha,
        ]
    }

    /// The six by reference.
    fn each_ref(&self) -> ChunkInputs<&T> {
        ChunkInputs::from_array([
            &self.u_tilde,
            &self.w,
            &self.q_decayed,
            &self.qk,
            &self.k_to_end,
            &self.alpha,
        ])
    }

    /// `f` of each of the six.
    fn map<U>(self, f: impl FnMut(T) -> U) -> ChunkInputs<U> {
        ChunkInputs::from_array(self.into_array().map(f))
    }
}

/// The outputs `o` of every chunk (`[batch, chunks, heads, C, V]`) from the chunks' inputs,
/// one differentiable operation (the module docs). No chunks give no outputs.
pub fn delta_chunk_recurrence(inputs: ChunkInputs<Tensor<5>>) -> Tensor<5> {
    let [batch, n_chunks, heads, rows, _] = inputs.qk.dims();
    if n_chunks == 0 {
        let [.., value] = inputs.u_tilde.dims();
        return Tensor::zeros([batch, 0, heads, rows, value], &inputs.qk.device());
    }
    let [u_tilde, w, q_decayed, qk, k_to_end, alpha] =
        inputs.map(Tensor::into_dispatch).into_array();
    Tensor::from_dispatch(<Dispatch as DeltaChunkOps>::delta_chunk_recurrence(
        u_tilde, w, q_decayed, qk, k_to_end, alpha,
    ))
}

/// Chunk `c` of a `[batch, chunks, heads, r, w]` tensor, as `[batch, heads, r, w]`.
fn chunk<B: Backend>(t: &FloatTensor<B>, c: usize) -> FloatTensor<B> {
    let [batch, _, heads, rows, cols] = t.shape().dims();
    let at = Slice::new(c as isize, Some(c as isize + 1), 1);
    let slices = [
        Slice::full(),
        at,
        Slice::full(),
        Slice::full(),
        Slice::full(),
    ];
    B::float_reshape(
        B::float_slice(t.clone(), &slices),
        Shape::new([batch, heads, rows, cols]),
    )
}

/// `[batch, heads, r, w]` chunks side by side again, as `[batch, chunks, heads, r, w]`.
fn unchunk<B: Backend>(chunks: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let parts = chunks
        .into_iter()
        .map(|t| {
            let [batch, heads, rows, cols] = t.shape().dims();
            B::float_reshape(t, Shape::new([batch, 1, heads, rows, cols]))
        })
        .collect();
    B::float_cat(parts, 1)
}

/// `Aᵀ B` of two tensors (batched over all but the last two dimensions).
fn t_matmul<B: Backend>(a: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    B::float_matmul(B::float_transpose(a), b)
}

/// The loop of the module docs by tensor operations, in the operations (and their order) of
/// the loop it replaced: the outputs, each chunk's start state `S_c` (`[batch, chunks, heads,
/// K, V]`) and `u` (`[batch, chunks, heads, C, V]`).
pub(crate) fn forward_by_ops<B: Backend>(
    inputs: ChunkInputs<FloatTensor<B>>,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let [batch, n_chunks, heads, _, key] = inputs.w.shape().dims();
    let [.., value] = inputs.u_tilde.shape().dims::<5>();
    let zeros = Shape::new([batch, heads, key, value]);
    let mut state = B::float_zeros(zeros, &inputs.w.device(), inputs.w.dtype().into());
    let (mut states, mut us, mut outputs) = (Vec::new(), Vec::new(), Vec::new());
    for c in 0..n_chunks {
        let [u_tilde, w, q_decayed, qk, k_to_end, alpha] =
            inputs.each_ref().map(|t| chunk::<B>(t, c)).into_array();
        let u = B::float_sub(u_tilde, B::float_matmul(w, state.clone()));
        outputs.push(B::float_add(
            B::float_matmul(q_decayed, state.clone()),
            B::float_matmul(qk, u.clone()),
        ));
        states.push(state.clone());
        us.push(u.clone());
        // The state after the last chunk is read by nothing.
        if c + 1 < n_chunks {
            state = B::float_add(B::float_mul(state, alpha), t_matmul::<B>(k_to_end, u));
        }
    }
    (
        unchunk::<B>(outputs),
        unchunk::<B>(states),
        unchunk::<B>(us),
    )
}

/// The backward pass's passage from chunk to chunk by tensor operations (the module docs):
/// from the outputs' gradient `grad` and the inputs other than `Ũ`, every chunk's `du_c` and
/// `dS_{c+1}` (0 for the last chunk), shaped as `u` and the states.
pub(crate) fn backward_by_ops<B: Backend>(
    grad: FloatTensor<B>,
    saved: &Saved<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [batch, n_chunks, heads, _, key] = saved.w.shape().dims();
    let [.., value] = grad.shape().dims::<5>();
    let zeros = Shape::new([batch, heads, key, value]);
    let mut grad_next = B::float_zeros(zeros, &grad.device(), grad.dtype().into());
    let (mut grad_us, mut grad_nexts) = (Vec::new(), Vec::new());
    for c in (0..n_chunks).rev() {
        let [w, q_decayed, qk, k_to_end, alpha] = saved.inputs().map(|t| chunk::<B>(t, c));
        let grad_out = chunk::<B>(&grad, c);
        let through_scores = t_matmul::<B>(qk, grad_out.clone());
        let grad_u = if c + 1 < n_chunks {
            B::float_add(through_scores, B::float_matmul(k_to_end, grad_next.clone()))
        } else {
            through_scores
        };
        grad_nexts.push(grad_next.clone());
        // The first chunk's start state is 0, not an input: its gradient is read by nothing.
        if c > 0 {
            let reached = B::float_add(
                B::float_mul(grad_next, alpha),
                t_matmul::<B>(q_decayed, grad_out),
            );
            grad_next = B::float_sub(reached, t_matmul::<B>(w, grad_u.clone()));
        }
        grad_us.push(grad_u);
    }
    grad_us.reverse();
    grad_nexts.reverse();
    (unchunk::<B>(grad_us), unchunk::<B>(grad_nexts))
}

/// The passage from chunk to chunk as backend operations: by tensor operations on the CPU
/// (the default bodies), by the kernels of `cube.rs` on cubecl's devices, where fusion records
/// each as one operation; the autodiff decorator's adds the backward pass.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait DeltaChunkOps: Backend {
    /// [`delta_chunk_recurrence`]: the outputs of [`DeltaChunkOps::delta_chunk_forward`].
    #[fusion(default)]
    fn delta_chunk_recurrence(
        u_tilde: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::delta_chunk_forward(u_tilde, w, q_decayed, qk, k_to_end, alpha).0
    }

    /// The outputs, each chunk's start state and `u` (the module docs).
    ///
    /// # Shapes
    /// - inputs: as [`ChunkInputs`]' fields
    /// - output: `[batch, chunks, heads, C, V]`, `[batch, chunks, heads, K, V]` and
    ///   `[batch, chunks, heads, C, V]`
    #[fusion(meta = |u_tilde, w, _q, _qk, _k, _alpha| (u_tilde.clone(), states_spec(w, u_tilde), u_tilde.clone()))]
    fn delta_chunk_forward(
        u_tilde: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let inputs = [u_tilde, w, q_decayed, qk, k_to_end, alpha];
        forward_by_ops::<Self>(ChunkInputs::from_array(inputs))
    }

    /// Every chunk's `du_c` and `dS_{c+1}` from the outputs' gradient `grad` (the module docs).
    ///
    /// # Shapes
    /// - `grad`: `[batch, chunks, heads, C, V]`; the rest as [`ChunkInputs`]' fields
    /// - output: `[batch, chunks, heads, C, V]` and `[batch, chunks, heads, K, V]`
    #[fusion(meta = |grad, w, _q, _qk, _k, _alpha| (grad.clone(), states_spec(w, grad)))]
    fn delta_chunk_backward(
        grad: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let saved = Saved::new([w, q_decayed, qk, k_to_end, alpha]);
        backward_by_ops::<Self>(grad, &saved)
    }
}

/// The states' shape, `[batch, chunks, heads, K, V]`, from `W`'s `[batch, chunks, heads, C, K]`
/// and a `[batch, chunks, heads, C, V]` tensor's.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn states_shape(w: &Shape, values: &Shape) -> Shape {
    let [batch, n_chunks, heads, _, key] = w.dims();
    let [.., value] = values.dims::<5>();
    Shape::new([batch, n_chunks, heads, key, value])
}

/// The spec of the states ([`states_shape`]) for fusion's record of an operation.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn states_spec(
    w: &burn::backend::fusion::custom::TensorSpec,
    values: &burn::backend::fusion::custom::TensorSpec,
) -> burn::backend::fusion::custom::TensorSpec {
    let shape = states_shape(&w.shape, &values.shape);
    burn::backend::fusion::custom::TensorSpec::new(shape, values.dtype)
}

impl DeltaChunkOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// The inputs the backward pass reads again: all but `Ũ`.
#[derive(Debug, Clone)]
pub(crate) struct Saved<B: Backend> {
    w: FloatTensor<B>,
    q_decayed: FloatTensor<B>,
    qk: FloatTensor<B>,
    k_to_end: FloatTensor<B>,
    alpha: FloatTensor<B>,
}

impl<B: Backend> Saved<B> {
    /// `W`, `Q̃`, `QK`, `K̃` and `α`, in that order.
    fn new([w, q_decayed, qk, k_to_end, alpha]: [FloatTensor<B>; 5]) -> Self {
        Self {
            w,
            q_decayed,
            qk,
            k_to_end,
            alpha,
        }
    }

    /// The five by reference, in [`Saved::new`]'s order.
    fn inputs(&self) -> [&FloatTensor<B>; 5] {
        [
            &self.w,
            &self.q_decayed,
            &self.qk,
            &self.k_to_end,
            &self.alpha,
        ]
    }

    /// The five, in [`Saved::new`]'s order.
    fn into_inputs(self) -> [FloatTensor<B>; 5] {
        [self.w, self.q_decayed, self.qk, self.k_to_end, self.alpha]
    }
}

/// The six inputs' gradients (in [`ChunkInputs`]' order) from the outputs', `grad`, each only
/// where `wanted`, given the inputs the backward pass reads, every chunk's start state and `u`.
fn gradients<B: Backend + DeltaChunkOps + ProductOps>(
    (saved, states, u): (Saved<B>, FloatTensor<B>, FloatTensor<B>),
    grad: FloatTensor<B>,
    wanted: [bool; 6],
) -> [Option<FloatTensor<B>>; 6] {
    let [w, q_decayed, qk, k_to_end, alpha] = saved.into_inputs();
    let (grad_u, grad_next) =
        B::delta_chunk_backward(grad.clone(), w, q_decayed, qk, k_to_end, alpha);
    // `x yᵀ` over all chunks at once, by cuBLAS where the process chose it.
    let times_t = |x: &FloatTensor<B>, y: &FloatTensor<B>| {
        backend_product::<B>(x.clone(), y.clone(), false, true)
    };
    let gradient = |i: usize| match i {
        0 => grad_u.clone(),
        1 => B::float_neg(times_t(&grad_u, &states)),
        2 => times_t(&grad, &states),
        3 => times_t(&grad, &u),
        4 => times_t(&u, &grad_next),
        _ => {
            let products = B::float_mul(grad_next.clone(), states.clone());
            B::float_sum_dim(B::float_sum_dim(products, 4), 3)
        }
    };
    std::array::from_fn(|i| wanted[i].then(|| gradient(i)))
}

/// The backward pass of [`delta_chunk_recurrence`], for its six inputs.
#[derive(Debug)]
struct ChunkBackward;

impl<B: Backend + DeltaChunkOps + ProductOps> Backward<B, 6> for ChunkBackward {
    type State = (Saved<B>, FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 6>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        if ops.parents.iter().all(Option::is_none) {
            return;
        }
        let wanted = ops.parents.each_ref().map(Option::is_some);
        let computed = gradients::<B>(ops.state, grad, wanted);
        for (parent, grad) in ops.parents.into_iter().zip(computed) {
            if let (Some(node), Some(grad)) = (parent, grad) {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend + DeltaChunkOps + ProductOps, C: CheckpointStrategy> DeltaChunkOps
    for Autodiff<B, C>
{
    fn delta_chunk_recurrence(
        u_tilde: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let tracked = [u_tilde, w, q_decayed, qk, k_to_end, alpha];
        let nodes = tracked.each_ref().map(|t| t.node());
        let [u_tilde, w, q_decayed, qk, k_to_end, alpha] = tracked.map(|t| t.into_primitive());
        match ChunkBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, states, u) = B::delta_chunk_forward(
                    u_tilde,
                    w.clone(),
                    q_decayed.clone(),
                    qk.clone(),
                    k_to_end.clone(),
                    alpha.clone(),
                );
                let saved = Saved::new([w, q_decayed, qk, k_to_end, alpha]);
                prep.finish((saved, states, u), out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(B::delta_chunk_forward(u_tilde, w, q_decayed, qk, k_to_end, alpha).0)
            }
        }
    }

    fn delta_chunk_forward(
        u_tilde: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [u_tilde, w, q_decayed, qk, k_to_end, alpha] =
            [u_tilde, w, q_decayed, qk, k_to_end, alpha].map(|t| t.into_primitive());
        let (out, states, u) = B::delta_chunk_forward(u_tilde, w, q_decayed, qk, k_to_end, alpha);
        (
            <Self as AutodiffBackend>::from_inner(out),
            <Self as AutodiffBackend>::from_inner(states),
            <Self as AutodiffBackend>::from_inner(u),
        )
    }

    fn delta_chunk_backward(
        grad: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [grad, w, q_decayed, qk, k_to_end, alpha] =
            [grad, w, q_decayed, qk, k_to_end, alpha].map(|t| t.into_primitive());
        let (grad_u, grad_next) = B::delta_chunk_backward(grad, w, q_decayed, qk, k_to_end, alpha);
        (
            <Self as AutodiffBackend>::from_inner(grad_u),
            <Self as AutodiffBackend>::from_inner(grad_next),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    /// The loop by tensor operations under autodiff, as `delta_rule_chunked` ran it before.
    fn by_operations(inputs: ChunkInputs<Tensor<5>>) -> Tensor<5> {
        let [batch, n_chunks, heads, _, key] = inputs.w.dims();
        let [.., value] = inputs.u_tilde.dims();
        let at = |t: &Tensor<5>, c: usize| -> Tensor<4> {
            let [b, _, h, r, w] = t.dims();
            t.clone().narrow(1, c, 1).reshape([b, h, r, w])
        };
        let mut state = Tensor::<4>::zeros([batch, heads, key, value], &inputs.w.device());
        let mut outputs = Vec::new();
        for c in 0..n_chunks {
            let u = at(&inputs.u_tilde, c) - at(&inputs.w, c).matmul(state.clone());
            let o = at(&inputs.q_decayed, c).matmul(state.clone())
                + at(&inputs.qk, c).matmul(u.clone());
            outputs.push(o);
            state =
                state * at(&inputs.alpha, c) + at(&inputs.k_to_end, c).swap_dims(2, 3).matmul(u);
        }
        Tensor::stack(outputs, 1)
    }

    fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// Random inputs of 3 chunks of 5 steps, keys of 4 and values of 6 columns.
    fn random_inputs(device: &Device) -> ChunkInputs<Tensor<5>> {
        let random = |cols: usize| {
            Tensor::<5>::random([2, 3, 2, 5, cols], Distribution::Normal(0.0, 1.0), device)
        };
        ChunkInputs {
            u_tilde: random(6),
            w: random(4),
            q_decayed: random(4),
            qk: random(5),
            k_to_end: random(4),
            alpha: Tensor::random([2, 3, 2, 1, 1], Distribution::Uniform(0.2, 1.0), device),
        }
    }

    /// The operation's output equals the loop's to the bit, and every input's gradient of
    /// `sum(o ∘ weights)` the loop's within rounding, whether all inputs are tracked or only
    /// some; without autodiff it is the same forward computation.
    #[test]
    fn the_operation_is_the_loop_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(29);
        let inputs = random_inputs(&device);
        let weights = Tensor::<5>::random([2, 3, 2, 5, 6], Distribution::Normal(0.0, 1.0), &device);
        let all = [true; 6];
        let some = [false, true, false, true, true, false];
        for tracked in [all, some] {
            let run = |f: &dyn Fn(ChunkInputs<Tensor<5>>) -> Tensor<5>| {
                let list = inputs.clone().into_array();
                let leaves: [Tensor<5>; 6] = std::array::from_fn(|i| {
                    let t = list[i].clone().detach();
                    if tracked[i] { t.require_grad() } else { t }
                });
                let out = f(ChunkInputs::from_array(leaves.clone()));
                let grads = (out.clone() * weights.clone()).sum().backward();
                let grads = leaves.map(|leaf| leaf.grad(&grads).map(values));
                (values(out.inner()), grads)
            };
            let (want_out, want_grads) = run(&by_operations);
            let (out, grads) = run(&delta_chunk_recurrence);
            assert_eq!(out, want_out, "output");
            for (i, (grad, want)) in grads.iter().zip(&want_grads).enumerate() {
                assert_eq!(grad.is_some(), tracked[i], "input {i}: tracked");
                let (Some(grad), Some(want)) = (grad, want) else {
                    continue;
                };
                let diff = grad
                    .iter()
                    .zip(want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(diff < 1e-4, "input {i}: gradient off by {diff}");
            }
        }
        let untracked = delta_chunk_recurrence(inputs.clone().map(Tensor::inner));
        assert_eq!(values(untracked), values(by_operations(inputs).inner()));
    }

    /// Random inputs of `n_chunks` chunks of `rows` steps, keys of `key` and values of `value`
    /// columns, each a view with its heads and steps swapped (as Gated DeltaNet's are); `QK` 0
    /// above its diagonal, as the masked scores are.
    #[cfg(feature = "cube-cpu")]
    fn random_views(
        [batch, n_chunks, heads, rows, key, value]: [usize; 6],
        device: &Device,
    ) -> ChunkInputs<Tensor<5>> {
        let random = |cols: usize| {
            let normal = Distribution::Normal(0.0, 0.5);
            Tensor::<5>::random([batch, n_chunks, rows, heads, cols], normal, device)
                .swap_dims(2, 3)
        };
        let alpha = Distribution::Uniform(0.2, 1.0);
        let above = Tensor::<2, Bool>::tril_mask([rows, rows], 0, device)
            .reshape([1, 1, 1, rows, rows])
            .expand([batch, n_chunks, heads, rows, rows]);
        ChunkInputs {
            u_tilde: random(value),
            w: random(key),
            q_decayed: random(key),
            qk: random(rows).mask_fill(above, 0.0),
            k_to_end: random(key),
            alpha: Tensor::random([batch, n_chunks, heads, 1, 1], alpha, device),
        }
    }

    /// The output and every input's gradient under `sum(o ∘ weights)`.
    #[cfg(feature = "cube-cpu")]
    fn output_and_gradients(
        inputs: &ChunkInputs<Tensor<5>>,
        weights: &Tensor<5>,
        device: &Device,
    ) -> Vec<Vec<f32>> {
        let moved = |t: &Tensor<5>| Tensor::<5>::from_data(t.to_data(), device);
        let leaves = inputs
            .each_ref()
            .map(|t| moved(t).require_grad())
            .into_array();
        let out = delta_chunk_recurrence(ChunkInputs::from_array(leaves.clone()));
        let grads = (out.clone() * moved(weights)).sum().backward();
        let mut all = vec![values(out.inner())];
        all.extend(leaves.map(|leaf| values(leaf.grad(&grads).expect("tracked"))));
        all
    }

    /// The kernels on cubecl's CPU runtime against the CPU's tensor operations, through
    /// autodiff: the output and all six gradients to rounding, on views whose heads and steps
    /// are swapped, for small odd shapes, one chunk, and Gated DeltaNet's widths (keys of 48,
    /// values of 96) (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release -p cwm-models
    /// --features cube-cpu --lib delta_chunks`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_tensor_operations_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(37);
        let names = ["output", "dŨ", "dW", "dQ̃", "dQK", "dK̃", "dα"];
        for dims in [
            [2, 3, 2, 5, 4, 6],
            [1, 1, 3, 7, 5, 3],
            [2, 4, 2, 16, 48, 96],
        ] {
            let inputs = random_views(dims, &cpu);
            let [batch, n_chunks, heads, rows, _, value] = dims;
            let normal = Distribution::Normal(0.0, 1.0);
            let weights = Tensor::<5>::random([batch, n_chunks, heads, rows, value], normal, &cpu);
            let want = output_and_gradients(&inputs, &weights, &cpu);
            let got = output_and_gradients(&inputs, &weights, &cube);
            for ((got, want), name) in got.iter().zip(&want).zip(names) {
                // Sums of up to 64 products carried through the chunks, in another order: off
                // by rounding of the largest element's size.
                let largest = want.iter().map(|w| w.abs()).fold(0.0f32, f32::max);
                let worst = got
                    .iter()
                    .zip(want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0f32, f32::max);
                let what = format!("{dims:?}: {name} off by {worst}, its largest {largest}");
                assert!(worst <= 1e-5 * (1.0 + largest), "{what}");
            }
        }
    }

    /// No chunks (a sequence of no steps) give no outputs, not a panic.
    #[test]
    fn no_chunks_give_no_outputs() {
        let device = Device::flex().autodiff();
        let empty = |cols: usize| Tensor::<5>::zeros([2, 0, 3, 4, cols], &device);
        let inputs = ChunkInputs {
            u_tilde: empty(6),
            w: empty(5),
            q_decayed: empty(5),
            qk: empty(4),
            k_to_end: empty(5),
            alpha: Tensor::zeros([2, 0, 3, 1, 1], &device),
        };
        assert_eq!(delta_chunk_recurrence(inputs).dims(), [2, 0, 3, 4, 6]);
    }
}
