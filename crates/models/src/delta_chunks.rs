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
//! many whole-size passes as there are chunks (4 at 256 steps in chunks of 64, 16 on the CPU's
//! chunks of 16). [`delta_chunk_recurrence`] computes the same loop in the forward pass and
//! keeps each chunk's start state and `u`; its backward pass runs the chunks in reverse,
//!
//! ```text
//! du_c    = QK_cᵀ dO_c + K̃_c dS_{c+1}
//! dQK_c   = dO_c u_cᵀ,   dQ̃_c = dO_c S_cᵀ,   dK̃_c = u_c dS_{c+1}ᵀ,   dW_c = −du_c S_cᵀ
//! dŨ_c    = du_c,        dα_c = Σ dS_{c+1} ∘ S_c
//! dS_c    = α_c dS_{c+1} + Q̃_cᵀ dO_c − W_cᵀ du_c          (dS after the last chunk: 0)
//! ```
//!
//! and puts each input's chunks together by one concatenation.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Shape, Slice, TensorMetadata, backend_extension};
use burn::prelude::*;

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
    /// `QK`, the masked decayed scores: `[batch, chunks, heads, C, C]`.
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

/// `Aᵀ B` of two `[batch, heads, ·, ·]` tensors.
fn t_matmul<B: Backend>(a: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    B::float_matmul(B::float_transpose(a), b)
}

/// `A Bᵀ` of two `[batch, heads, ·, ·]` tensors.
fn matmul_t<B: Backend>(a: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    B::float_matmul(a, B::float_transpose(b))
}

/// What the forward pass leaves of one chunk for the backward pass (all `[batch, heads, ·, ·]`):
/// the chunk's inputs it reads again (all but `Ũ`), as the forward pass cut them out, its start
/// state `S_c` and `u_c`.
#[derive(Debug, Clone)]
struct Step<B: Backend> {
    w: FloatTensor<B>,
    q_decayed: FloatTensor<B>,
    qk: FloatTensor<B>,
    k_to_end: FloatTensor<B>,
    alpha: FloatTensor<B>,
    state: FloatTensor<B>,
    u: FloatTensor<B>,
}

/// The loop of the module docs, in the operations (and their order) of the loop it replaced;
/// each chunk's [`Step`] in chunk order.
fn forward<B: Backend>(inputs: ChunkInputs<FloatTensor<B>>) -> (FloatTensor<B>, Vec<Step<B>>) {
    let [batch, n_chunks, heads, _, key] = inputs.w.shape().dims();
    let [.., value] = inputs.u_tilde.shape().dims::<5>();
    let zeros = Shape::new([batch, heads, key, value]);
    let mut state = B::float_zeros(zeros, &inputs.w.device(), inputs.w.dtype().into());
    let (mut steps, mut outputs) = (Vec::new(), Vec::new());
    for c in 0..n_chunks {
        let [u_tilde, w, q_decayed, qk, k_to_end, alpha] =
            inputs.each_ref().map(|t| chunk::<B>(t, c)).into_array();
        let u = B::float_sub(u_tilde, B::float_matmul(w.clone(), state.clone()));
        outputs.push(B::float_add(
            B::float_matmul(q_decayed.clone(), state.clone()),
            B::float_matmul(qk.clone(), u.clone()),
        ));
        // The state after the last chunk is read by nothing.
        let next = (c + 1 < n_chunks).then(|| {
            B::float_add(
                B::float_mul(state.clone(), alpha.clone()),
                t_matmul::<B>(k_to_end.clone(), u.clone()),
            )
        });
        steps.push(Step {
            w,
            q_decayed,
            qk,
            k_to_end,
            alpha,
            state,
            u,
        });
        let Some(next) = next else { break };
        state = next;
    }
    (unchunk::<B>(outputs), steps)
}

/// A zero tensor of `t`'s shape, device and type.
fn zeros_like<B: Backend>(t: &FloatTensor<B>) -> FloatTensor<B> {
    B::float_zeros(t.shape(), &t.device(), t.dtype().into())
}

/// The six inputs' gradients (in [`ChunkInputs`]' order) from the outputs', `grad`. After the
/// last chunk `dS` is 0, so that chunk's terms in it are left out rather than multiplied.
fn backward<B: Backend>(steps: Vec<Step<B>>, grad: FloatTensor<B>) -> ChunkInputs<FloatTensor<B>> {
    let mut grad_next: Option<FloatTensor<B>> = None; // dS_{c+1}
    let mut grads = ChunkInputs::from_array(std::array::from_fn(|_| Vec::new()));
    for (c, step) in steps.into_iter().enumerate().rev() {
        let Step {
            w,
            q_decayed,
            qk,
            k_to_end,
            alpha,
            state,
            u,
        } = step;
        let grad_out = chunk::<B>(&grad, c);
        let through_scores = t_matmul::<B>(qk, grad_out.clone());
        let (grad_u, grad_k_to_end, grad_alpha, carried) = match grad_next {
            Some(next) => {
                let decay_grad = B::float_mul(next.clone(), state.clone());
                (
                    B::float_add(through_scores, B::float_matmul(k_to_end, next.clone())),
                    matmul_t::<B>(u.clone(), next.clone()),
                    B::float_sum_dim(B::float_sum_dim(decay_grad, 3), 2),
                    Some(B::float_mul(next, alpha)),
                )
            }
            None => (
                through_scores,
                zeros_like::<B>(&k_to_end),
                zeros_like::<B>(&alpha),
                None,
            ),
        };
        grads.qk.push(matmul_t::<B>(grad_out.clone(), u));
        grads
            .q_decayed
            .push(matmul_t::<B>(grad_out.clone(), state.clone()));
        grads.k_to_end.push(grad_k_to_end);
        grads.alpha.push(grad_alpha);
        grads
            .w
            .push(B::float_neg(matmul_t::<B>(grad_u.clone(), state)));
        let from_output = t_matmul::<B>(q_decayed, grad_out);
        let reached = match carried {
            Some(carried) => B::float_add(carried, from_output),
            None => from_output,
        };
        grad_next = Some(B::float_sub(reached, t_matmul::<B>(w, grad_u.clone())));
        grads.u_tilde.push(grad_u);
    }
    grads.map(|mut reversed| {
        reversed.reverse();
        unchunk::<B>(reversed)
    })
}

/// The passage from chunk to chunk as a backend operation. Each backend's forward pass is the
/// default body, from its own tensor operations; the autodiff decorator's adds the backward
/// pass.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait DeltaChunkOps: Backend {
    /// [`delta_chunk_recurrence`].
    fn delta_chunk_recurrence(
        u_tilde: FloatTensor<Self>,
        w: FloatTensor<Self>,
        q_decayed: FloatTensor<Self>,
        qk: FloatTensor<Self>,
        k_to_end: FloatTensor<Self>,
        alpha: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let inputs = [u_tilde, w, q_decayed, qk, k_to_end, alpha];
        forward::<Self>(ChunkInputs::from_array(inputs)).0
    }
}

impl DeltaChunkOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl DeltaChunkOps for burn::backend::Cube {}

/// The backward pass of [`delta_chunk_recurrence`], for its six inputs.
#[derive(Debug)]
struct ChunkBackward;

impl<B: Backend> Backward<B, 6> for ChunkBackward {
    type State = Vec<Step<B>>;

    fn backward(self, ops: Ops<Self::State, 6>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        if ops.parents.iter().all(Option::is_none) {
            return;
        }
        let computed = backward::<B>(ops.state, grad).into_array();
        for (parent, grad) in ops.parents.into_iter().zip(computed) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend + DeltaChunkOps, C: CheckpointStrategy> DeltaChunkOps for Autodiff<B, C> {
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
        let inputs = ChunkInputs::from_array(tracked.map(|t| t.into_primitive()));
        match ChunkBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, saved) = forward::<B>(inputs);
                prep.finish(saved, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward::<B>(inputs).0),
        }
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
