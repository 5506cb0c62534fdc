//! The passage from chunk to chunk on cubecl's backends (`cuda`, `cube-cpu`): a kernel for
//! each direction, with a unit per batch row, head and value column `j`, which keeps column `j`
//! of the state (forward) or of its gradient (backward) in registers through all the chunks.
//!
//! - **forward**: per chunk, stores the column of `S_c`, then column `j` of `u_c = Ũ_c − W_c
//!   S_c` and of `o_c = Q̃_c S_c + QK_c u_c`, then `S_{c+1} = α_c S_c + K̃_cᵀ u_c`. The unit
//!   reads back the column of `u_c` it has just written.
//! - **backward**, the chunks in reverse: stores the column of `dS_{c+1}`, then column `j` of
//!   `du_c = QK_cᵀ dO_c + K̃_c dS_{c+1}`, then `dS_c = α_c dS_{c+1} + Q̃_cᵀ dO_c − W_cᵀ du_c`.
//!
//! `QK` is read below and on its diagonal only: above it the masked scores are 0.
//!
//! Units side by side take neighbouring columns, so their writes are contiguous and their
//! reads of a chunk's `W`, `Q̃`, `QK` and `K̃` are of the same element. Inputs are read where
//! they lie, through their strides. The key width is a compile-time constant (the state's
//! registers); tensors other than `f32`, keys wider than [`MAX_KEY`], or a process that chose
//! `CWM_DELTA_CHUNKS=operations` (`crate::delta_kernels`) take the tensor operations of the
//! module above instead.

use burn::backend::Shape;
use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::prelude::*;
use burn::tensor::{DType, FloatDType};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::untile;
use burn_cubecl::tensor::CubeTensor;

use super::{ChunkInputs, DeltaChunkOps, Saved, backward_by_ops, forward_by_ops, states_shape};
use crate::causal_conv::cube::{empty_like, grid};
use crate::delta_kernels::{DELTA_CHUNKS, DeltaChunks};

/// The widest key whose state column a unit keeps in registers (Gated DeltaNet's is 48).
pub(crate) const MAX_KEY: usize = 128;

/// Element `(b, c, h, row, col)` of a `[batch, chunks, heads, r, w]` tensor, through its
/// strides.
#[cube]
fn at(t: &Tensor<f32>, b: usize, c: usize, h: usize, row: usize, col: usize) -> f32 {
    t[b * t.stride(0) + c * t.stride(1) + h * t.stride(2) + row * t.stride(3) + col * t.stride(4)]
}

/// One unit per batch row, head and value column: the outputs, each chunk's start state and
/// `u` of its column (the module docs). `out` and `u` are `[batch, chunks, heads, C, V]`,
/// `states` `[batch, chunks, heads, key, V]`.
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_kernel(
    u_tilde: &Tensor<f32>,
    w: &Tensor<f32>,
    q_decayed: &Tensor<f32>,
    qk: &Tensor<f32>,
    k_to_end: &Tensor<f32>,
    alpha: &Tensor<f32>,
    out: &mut Tensor<f32>,
    states: &mut Tensor<f32>,
    u: &mut Tensor<f32>,
    #[comptime] key: usize,
) {
    let (n_chunks, heads, rows, value) = (u.shape(1), u.shape(2), u.shape(3), u.shape(4));
    let pos = ABSOLUTE_POS;
    if pos >= u.shape(0) * heads * value {
        terminate!();
    }
    let (b, h, j) = (pos / (heads * value), (pos / value) % heads, pos % value);
    let mut s = Array::<f32>::new(key);
    #[unroll]
    for k in 0..key {
        s[k] = 0.0f32;
    }
    for c in 0..n_chunks {
        // Column `j` of chunk `c`'s matrices in the contiguous outputs: row `r` at `r · V`.
        let block = (b * n_chunks + c) * heads + h;
        let (at_state, at_row) = (block * key * value + j, block * rows * value + j);
        #[unroll]
        for k in 0..key {
            states[at_state + k * value] = s[k];
        }
        for i in 0..rows {
            let mut acc = at(u_tilde, b, c, h, i, j);
            #[unroll]
            for k in 0..key {
                acc -= at(w, b, c, h, i, k) * s[k];
            }
            u[at_row + i * value] = acc;
        }
        for i in 0..rows {
            let mut acc = 0.0f32;
            #[unroll]
            for k in 0..key {
                acc += at(q_decayed, b, c, h, i, k) * s[k];
            }
            // `QK` is 0 above its diagonal.
            for l in 0..i + 1 {
                acc += at(qk, b, c, h, i, l) * u[at_row + l * value];
            }
            out[at_row + i * value] = acc;
        }
        let decay = at(alpha, b, c, h, 0, 0);
        #[unroll]
        for k in 0..key {
            s[k] *= decay;
        }
        for i in 0..rows {
            let ui = u[at_row + i * value];
            #[unroll]
            for k in 0..key {
                s[k] += at(k_to_end, b, c, h, i, k) * ui;
            }
        }
    }
}

/// One unit per batch row, head and value column, the chunks in reverse: each chunk's `du_c`
/// and `dS_{c+1}` of its column (the module docs). `grad_u` is `[batch, chunks, heads, C, V]`,
/// `grad_next` `[batch, chunks, heads, key, V]`.
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_kernel(
    grad: &Tensor<f32>,
    w: &Tensor<f32>,
    q_decayed: &Tensor<f32>,
    qk: &Tensor<f32>,
    k_to_end: &Tensor<f32>,
    alpha: &Tensor<f32>,
    grad_u: &mut Tensor<f32>,
    grad_next: &mut Tensor<f32>,
    #[comptime] key: usize,
) {
    let (n_chunks, heads, rows, value) = (
        grad_u.shape(1),
        grad_u.shape(2),
        grad_u.shape(3),
        grad_u.shape(4),
    );
    let pos = ABSOLUTE_POS;
    if pos >= grad_u.shape(0) * heads * value {
        terminate!();
    }
    let (b, h, j) = (pos / (heads * value), (pos / value) % heads, pos % value);
    let mut ds = Array::<f32>::new(key);
    #[unroll]
    for k in 0..key {
        ds[k] = 0.0f32;
    }
    for r in 0..n_chunks {
        let c = n_chunks - 1 - r;
        // Column `j` of chunk `c`'s matrices in the contiguous outputs: row `r` at `r · V`.
        let block = (b * n_chunks + c) * heads + h;
        let (at_state, at_row) = (block * key * value + j, block * rows * value + j);
        #[unroll]
        for k in 0..key {
            grad_next[at_state + k * value] = ds[k];
        }
        for i in 0..rows {
            let mut acc = 0.0f32;
            // `QK` is 0 above its diagonal.
            for l in i..rows {
                acc += at(qk, b, c, h, l, i) * at(grad, b, c, h, l, j);
            }
            #[unroll]
            for k in 0..key {
                acc += at(k_to_end, b, c, h, i, k) * ds[k];
            }
            grad_u[at_row + i * value] = acc;
        }
        let decay = at(alpha, b, c, h, 0, 0);
        #[unroll]
        for k in 0..key {
            ds[k] *= decay;
        }
        for i in 0..rows {
            let g = at(grad, b, c, h, i, j);
            let d = grad_u[at_row + i * value];
            #[unroll]
            for k in 0..key {
                ds[k] += at(q_decayed, b, c, h, i, k) * g - at(w, b, c, h, i, k) * d;
            }
        }
    }
}

/// Whether the kernels take these tensors: the process chose them, the tensors are `f32`, and
/// the key has 1 to [`MAX_KEY`] columns.
fn fits(tensors: &[&CubeTensor], key: usize) -> bool {
    let chosen = DELTA_CHUNKS.chosen().unwrap_or_default() == DeltaChunks::Kernels;
    chosen && (1..=MAX_KEY).contains(&key) && tensors.iter().all(|t| t.dtype == DType::F32)
}

/// A zero `f32` tensor of `shape` on `like`'s device.
fn zeros_like(like: &CubeTensor, shape: Shape) -> CubeTensor {
    CubeBackend::float_zeros(shape, &like.device, FloatDType::F32)
}

/// Units of a launch over `values`' `[batch, chunks, heads, C, V]`: a batch row, head and
/// value column each.
fn units(values: &CubeTensor) -> usize {
    let [batch, _, heads, _, value] = values.meta.shape().dims::<5>();
    batch * heads * value
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each operation below as one.
impl DeltaChunkOps for CubeBackend {
    fn delta_chunk_forward(
        u_tilde: CubeTensor,
        w: CubeTensor,
        q_decayed: CubeTensor,
        qk: CubeTensor,
        k_to_end: CubeTensor,
        alpha: CubeTensor,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        let inputs = ChunkInputs::from_array([u_tilde, w, q_decayed, qk, k_to_end, alpha]);
        let [.., key] = inputs.w.meta.shape().dims::<5>();
        if !fits(&inputs.each_ref().into_array(), key) {
            return forward_by_ops::<CubeBackend>(inputs);
        }
        // A storage-tiled tensor (laid out for a matrix product) is read only after un-tiling.
        let [u_tilde, w, q_decayed, qk, k_to_end, alpha] = inputs.map(untile).into_array();
        let values = u_tilde.meta.shape().clone();
        let states = empty_like(&w, states_shape(w.meta.shape(), u_tilde.meta.shape()));
        let (out, u) = (empty_like(&w, values.clone()), empty_like(&w, values));
        // With a key of at least one column, no states means no units or no chunks.
        if states.meta.shape().num_elements() == 0 {
            let zeros = |t: &CubeTensor| zeros_like(t, t.meta.shape().clone());
            return (zeros(&out), zeros(&states), zeros(&u));
        }
        let (count, dim) = grid(&u, units(&u));
        forward_kernel::launch(
            &u.client.clone(),
            count,
            dim,
            u_tilde.into_tensor_arg(),
            w.into_tensor_arg(),
            q_decayed.into_tensor_arg(),
            qk.into_tensor_arg(),
            k_to_end.into_tensor_arg(),
            alpha.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            states.clone().into_tensor_arg(),
            u.clone().into_tensor_arg(),
            key,
        );
        (out, states, u)
    }

    fn delta_chunk_backward(
        grad: CubeTensor,
        w: CubeTensor,
        q_decayed: CubeTensor,
        qk: CubeTensor,
        k_to_end: CubeTensor,
        alpha: CubeTensor,
    ) -> (CubeTensor, CubeTensor) {
        let [.., key] = w.meta.shape().dims::<5>();
        let all = [&grad, &w, &q_decayed, &qk, &k_to_end, &alpha];
        if !fits(&all, key) {
            let saved = Saved::new([w, q_decayed, qk, k_to_end, alpha]);
            return backward_by_ops::<CubeBackend>(grad, &saved);
        }
        let [grad, w, q_decayed, qk, k_to_end, alpha] =
            [grad, w, q_decayed, qk, k_to_end, alpha].map(untile);
        let grad_u = empty_like(&grad, grad.meta.shape().clone());
        let grad_next = empty_like(&grad, states_shape(w.meta.shape(), grad.meta.shape()));
        // With a key of at least one column, no states means no units or no chunks.
        if grad_next.meta.shape().num_elements() == 0 {
            let zeros = |t: &CubeTensor| zeros_like(t, t.meta.shape().clone());
            return (zeros(&grad_u), zeros(&grad_next));
        }
        let (count, dim) = grid(&grad_u, units(&grad_u));
        backward_kernel::launch(
            &grad_u.client.clone(),
            count,
            dim,
            grad.into_tensor_arg(),
            w.into_tensor_arg(),
            q_decayed.into_tensor_arg(),
            qk.into_tensor_arg(),
            k_to_end.into_tensor_arg(),
            alpha.into_tensor_arg(),
            grad_u.clone().into_tensor_arg(),
            grad_next.clone().into_tensor_arg(),
            key,
        );
        (grad_u, grad_next)
    }
}
