//! The kernels of the module docs above, on cubecl's backends (`cuda`, `cube-cpu`).
//!
//! Each cube is [`UNITS`] units, two per query row (forward, `dq`) or key row (`dk`, `dv`) of
//! a block of [`BLOCK`] rows of one head; the rows it walks arrive [`BLOCK`] at a time through
//! shared memory, where every unit reads the same element at once. For each such block the
//! cube works in two phases: the units compute the block's scores (and in the backward pass
//! `dO · v`) into shared memory, each from its own row in registers, then each sums half of
//! its row's output (or one of the two gradients) from them. Splitting a row's work this way
//! holds a unit to one row of 64 and at most 64 sums in registers: with a unit per row, the
//! three kernels needed 168–255 registers for heads of 64 and spilled 4–700 bytes a unit to
//! memory (`ptxas -v` for `sm_90`, `crate::ptx`). Heads of more than [`MAX_HEAD_DIM`] columns,
//! heads of an odd number, or tensors other than `f32`, take the whole-tensor operations of the
//! module above instead.

use burn::backend::Shape;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::{AttentionKernelOps, KernelSettings, reference_backward, reference_forward};
use crate::dropout::cube::{mix, seed_of};

/// Query or key rows per block.
pub(crate) const BLOCK: usize = 32;

/// Units per cube: two per row of the block.
pub(crate) const UNITS: usize = 2 * BLOCK;

/// The widest head the kernels take: at 64 columns the `dq` and `dk`/`dv` kernels' shared
/// memory is 25 KiB, under the 48 KiB a CUDA kernel may hold without asking.
const MAX_HEAD_DIM: usize = 64;

/// Whether probability `(row, j)` of a head is kept, `row = (b · heads + h) · seq + i`: its
/// index in the `[batch, heads, seq, seq]` probabilities, hashed as
/// `crate::dropout::mask_values` hashes element indices.
#[cube]
fn kept(seed: u64, row: usize, seq: usize, j: usize, threshold: u64) -> bool {
    let index = u64::cast_from(row) * u64::cast_from(seq) + u64::cast_from(j);
    let counter = seed + (index + u64::new(1)) * 0x9E37_79B9_7F4A_7C15u64;
    (mix(counter) >> u64::new(32)) < threshold
}

/// Rows `first..first + block` of one head of `src` (`[batch, heads, seq, head_dim]`, the head
/// starting at `at`) into `tile`, times `factor`, zeros past `seq`: each of the cube's `units`
/// loads every `units`-th element, so that neighbouring units read neighbouring columns.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_rows(
    src: &Tensor<f32>,
    at: usize,
    first: usize,
    seq: usize,
    factor: f32,
    tile: &mut Shared<[f32]>,
    #[comptime] head_dim: usize,
    #[comptime] block: usize,
) {
    let unit = UNIT_POS as usize;
    let units = comptime!(2 * block);
    #[unroll]
    for t in 0..comptime!(block * head_dim / units) {
        let e = t * units + unit;
        let (r, c) = (e / head_dim, e % head_dim);
        let mut x = 0.0f32;
        if first + r < seq {
            x = src[at + (first + r) * src.stride(2) + c * src.stride(3)] * factor;
        }
        tile[e] = x;
    }
}

/// How many of the `block` keys from `key0` on query row `i` attends to: those up to its own
/// position (`key0 ≤ i`).
#[cube]
fn rows_through(i: usize, key0: usize, #[comptime] block: usize) -> usize {
    let mut rows = i + 1 - key0;
    if rows > block {
        rows = block;
    }
    rows
}

/// What dropout multiplies probability `(row, j)` by: `keep_scale` where [`kept`], else 0.
#[cube]
fn mask_factor(
    seed: u64,
    row: usize,
    seq: usize,
    j: usize,
    threshold: u64,
    keep_scale: f32,
) -> f32 {
    let mut m = 0.0f32;
    if kept(seed, row, seq, j, threshold) {
        m = keep_scale;
    }
    m
}

/// Row `i` of one head of `src` (`[batch, heads, seq, head_dim]`, the row starting at `at`)
/// into `row`, times `factor`; zeros where the row is not `valid`.
#[cube]
fn load_own(
    src: &Tensor<f32>,
    at: usize,
    valid: bool,
    factor: f32,
    row: &mut Array<f32>,
    #[comptime] head_dim: usize,
) {
    #[unroll]
    for c in 0..head_dim {
        let mut x = 0.0f32;
        if valid {
            x = src[at + c * src.stride(3)] * factor;
        }
        row[c] = x;
    }
}

/// `own · tile[r]`: a unit's row against row `r` of a tile, which every unit reads at once.
#[cube]
fn dot(own: &Array<f32>, tile: &Shared<[f32]>, r: usize, #[comptime] head_dim: usize) -> f32 {
    let mut s = 0.0f32;
    #[unroll]
    for c in 0..head_dim {
        s += own[c] * tile[r * head_dim + c];
    }
    s
}

/// `acc += w · tile[r][from..from + columns]`.
#[cube]
fn add_scaled(
    acc: &mut Array<f32>,
    w: f32,
    tile: &Shared<[f32]>,
    r: usize,
    from: usize,
    #[comptime] head_dim: usize,
    #[comptime] columns: usize,
) {
    #[unroll]
    for c in 0..columns {
        acc[c] += w * tile[r * head_dim + from + c];
    }
}

/// `acc`'s columns set to zero.
#[cube]
fn zero(acc: &mut Array<f32>, #[comptime] columns: usize) {
    #[unroll]
    for c in 0..columns {
        acc[c] = 0.0f32;
    }
}

/// The forward pass: one cube per head (`CUBE_POS_X`) and block of query rows (`CUBE_POS_Y`),
/// two units per row. For each block of keys, each unit first scores half the keys against its
/// row into `scores`; then each walks all of the row's scores with the online softmax
/// (both halves alike) and sums half the output's columns.
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn forward_kernel<I: Int>(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    parts: &Tensor<I>,
    out: &mut Tensor<f32>,
    lse: &mut Tensor<f32>,
    scale: f32,
    threshold: u64,
    keep_scale: f32,
    #[comptime] head_dim: usize,
    #[comptime] block: usize,
    #[comptime] dropout: bool,
    #[define(I)] _dtype: ElemType,
) {
    let heads = q.shape(1);
    let seq = q.shape(2);
    let bh = CUBE_POS_X as usize;
    let (b, h) = (bh / heads, bh % heads);
    let (half, lane) = (UNIT_POS as usize / block, UNIT_POS as usize % block);
    let columns = comptime!(head_dim / 2);
    let pitch = comptime!(block + 1);
    let i = CUBE_POS_Y as usize * block + lane;
    let valid = i < seq;
    let row = bh * seq + i;
    let seed = seed_of::<I>(parts);

    let mut q_row = Array::<f32>::new(head_dim);
    let mut acc = Array::<f32>::new(columns);
    let q_at = b * q.stride(0) + h * q.stride(1) + i * q.stride(2);
    load_own(q, q_at, valid, scale, &mut q_row, head_dim);
    zero(&mut acc, columns);

    let mut keys = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut values = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut scores = Shared::<[f32]>::new_slice(comptime!(block * (block + 1)));
    let k_at = b * k.stride(0) + h * k.stride(1);
    let v_at = b * v.stride(0) + h * v.stride(1);
    let mut max = f32::new(-1.0e30);
    let mut sum = 0.0f32;
    for kb in 0..CUBE_POS_Y as usize + 1 {
        let key0 = kb * block;
        load_rows(k, k_at, key0, seq, 1.0f32, &mut keys, head_dim, block);
        load_rows(v, v_at, key0, seq, 1.0f32, &mut values, head_dim, block);
        sync_cube();
        let rows = rows_through(i, key0, block);
        if valid {
            let first = half * comptime!(block / 2);
            let mut last = first + comptime!(block / 2);
            if last > rows {
                last = rows;
            }
            for r in first..last {
                scores[lane * pitch + r] = dot(&q_row, &keys, r, head_dim);
            }
        }
        sync_cube();
        if valid {
            for r in 0..rows {
                let s = scores[lane * pitch + r];
                if s > max {
                    let shrink = f32::exp(max - s);
                    sum *= shrink;
                    #[unroll]
                    for c in 0..columns {
                        acc[c] *= shrink;
                    }
                    max = s;
                }
                let p = f32::exp(s - max);
                sum += p;
                let mut w = p;
                if dropout {
                    w = p * mask_factor(seed, row, seq, key0 + r, threshold, keep_scale);
                }
                add_scaled(&mut acc, w, &values, r, half * columns, head_dim, columns);
            }
        }
        sync_cube();
    }
    if valid {
        let inv = 1.0f32 / sum;
        let out_at = b * out.stride(0) + h * out.stride(1) + i * out.stride(2);
        let out_col = out.stride(3);
        #[unroll]
        for c in 0..columns {
            out[out_at + (half * columns + c) * out_col] = acc[c] * inv;
        }
        if half == 0 {
            lse[row] = max + f32::ln(sum);
        }
    }
}

/// `dq`: one cube per head (`CUBE_POS_X`) and block of query rows (`CUBE_POS_Y`), two units
/// per row. For each block of keys, one unit of the pair scores the row's query against the
/// keys, the other its output gradient against the values (`dP` before dropout); then each
/// sums half of `dq`'s columns from both.
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dq_kernel<I: Int>(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    grad_out: &Tensor<f32>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    parts: &Tensor<I>,
    dq: &mut Tensor<f32>,
    scale: f32,
    threshold: u64,
    keep_scale: f32,
    #[comptime] head_dim: usize,
    #[comptime] block: usize,
    #[comptime] dropout: bool,
    #[define(I)] _dtype: ElemType,
) {
    let heads = q.shape(1);
    let seq = q.shape(2);
    let bh = CUBE_POS_X as usize;
    let (b, h) = (bh / heads, bh % heads);
    let (half, lane) = (UNIT_POS as usize / block, UNIT_POS as usize % block);
    let columns = comptime!(head_dim / 2);
    let pitch = comptime!(block + 1);
    let i = CUBE_POS_Y as usize * block + lane;
    let valid = i < seq;
    let row = bh * seq + i;
    let seed = seed_of::<I>(parts);

    // The query row (times `scale`) in the first half, the output gradient's in the second.
    let mut own = Array::<f32>::new(head_dim);
    if half == 0 {
        let at = b * q.stride(0) + h * q.stride(1) + i * q.stride(2);
        load_own(q, at, valid, scale, &mut own, head_dim);
    } else {
        let at = b * grad_out.stride(0) + h * grad_out.stride(1) + i * grad_out.stride(2);
        load_own(grad_out, at, valid, 1.0f32, &mut own, head_dim);
    }
    let mut acc = Array::<f32>::new(columns);
    zero(&mut acc, columns);
    let mut row_lse = 0.0f32;
    let mut row_delta = 0.0f32;
    if valid {
        row_lse = lse[row];
        row_delta = delta[row];
    }

    let mut keys = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut values = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut scores = Shared::<[f32]>::new_slice(comptime!(block * (block + 1)));
    let mut dps = Shared::<[f32]>::new_slice(comptime!(block * (block + 1)));
    let k_at = b * k.stride(0) + h * k.stride(1);
    let v_at = b * v.stride(0) + h * v.stride(1);
    for kb in 0..CUBE_POS_Y as usize + 1 {
        let key0 = kb * block;
        load_rows(k, k_at, key0, seq, 1.0f32, &mut keys, head_dim, block);
        load_rows(v, v_at, key0, seq, 1.0f32, &mut values, head_dim, block);
        sync_cube();
        let rows = rows_through(i, key0, block);
        if valid {
            if half == 0 {
                for r in 0..rows {
                    scores[lane * pitch + r] = dot(&own, &keys, r, head_dim);
                }
            } else {
                for r in 0..rows {
                    dps[lane * pitch + r] = dot(&own, &values, r, head_dim);
                }
            }
        }
        sync_cube();
        if valid {
            for r in 0..rows {
                let p = f32::exp(scores[lane * pitch + r] - row_lse);
                let mut dp = dps[lane * pitch + r];
                if dropout {
                    dp *= mask_factor(seed, row, seq, key0 + r, threshold, keep_scale);
                }
                let ds = p * (dp - row_delta);
                add_scaled(&mut acc, ds, &keys, r, half * columns, head_dim, columns);
            }
        }
        sync_cube();
    }
    if valid {
        #[unroll]
        for c in 0..columns {
            dq[row * head_dim + half * columns + c] = acc[c] * scale;
        }
    }
}

/// `dk` and `dv`: one cube per head (`CUBE_POS_X`) and block of key rows (`CUBE_POS_Y`), two
/// units per key. For each block of queries, one unit of the pair scores the key against the
/// queries, the other the value against the output gradients; then the first sums `dk`, the
/// second `dv`.
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn dkdv_kernel<I: Int>(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    grad_out: &Tensor<f32>,
    lse: &Tensor<f32>,
    delta: &Tensor<f32>,
    parts: &Tensor<I>,
    dk: &mut Tensor<f32>,
    dv: &mut Tensor<f32>,
    scale: f32,
    threshold: u64,
    keep_scale: f32,
    #[comptime] head_dim: usize,
    #[comptime] block: usize,
    #[comptime] dropout: bool,
    #[define(I)] _dtype: ElemType,
) {
    let heads = q.shape(1);
    let seq = q.shape(2);
    let bh = CUBE_POS_X as usize;
    let (b, h) = (bh / heads, bh % heads);
    let (half, lane) = (UNIT_POS as usize / block, UNIT_POS as usize % block);
    let pitch = comptime!(block + 1);
    let kb = CUBE_POS_Y as usize;
    let j = kb * block + lane;
    let valid = j < seq;
    let seed = seed_of::<I>(parts);

    // The key row in the first half, the value row in the second.
    let mut own = Array::<f32>::new(head_dim);
    if half == 0 {
        let at = b * k.stride(0) + h * k.stride(1) + j * k.stride(2);
        load_own(k, at, valid, 1.0f32, &mut own, head_dim);
    } else {
        let at = b * v.stride(0) + h * v.stride(1) + j * v.stride(2);
        load_own(v, at, valid, 1.0f32, &mut own, head_dim);
    }
    let mut acc = Array::<f32>::new(head_dim);
    zero(&mut acc, head_dim);

    let mut queries = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut grads = Shared::<[f32]>::new_slice(comptime!(block * head_dim));
    let mut lses = Shared::<[f32]>::new_slice(block);
    let mut deltas = Shared::<[f32]>::new_slice(block);
    let mut scores = Shared::<[f32]>::new_slice(comptime!(block * (block + 1)));
    let mut dps = Shared::<[f32]>::new_slice(comptime!(block * (block + 1)));
    let q_at = b * q.stride(0) + h * q.stride(1);
    let g_at = b * grad_out.stride(0) + h * grad_out.stride(1);
    for qb in kb..CUBE_COUNT_Y as usize {
        let query0 = qb * block;
        load_rows(q, q_at, query0, seq, scale, &mut queries, head_dim, block);
        load_rows(
            grad_out, g_at, query0, seq, 1.0f32, &mut grads, head_dim, block,
        );
        if half == 0 {
            let mut l = 0.0f32;
            let mut d = 0.0f32;
            if query0 + lane < seq {
                l = lse[bh * seq + query0 + lane];
                d = delta[bh * seq + query0 + lane];
            }
            lses[lane] = l;
            deltas[lane] = d;
        }
        sync_cube();
        // Queries from the key's own position on: in the diagonal block, rows `lane..`.
        let mut start = 0usize;
        if qb == kb {
            start = lane;
        }
        let mut end = seq - query0;
        if end > block {
            end = block;
        }
        if valid {
            if half == 0 {
                for r in start..end {
                    scores[r * pitch + lane] = dot(&own, &queries, r, head_dim);
                }
            } else {
                for r in start..end {
                    dps[r * pitch + lane] = dot(&own, &grads, r, head_dim);
                }
            }
        }
        sync_cube();
        if valid {
            for r in start..end {
                let p = f32::exp(scores[r * pitch + lane] - lses[r]);
                let mut m = 1.0f32;
                if dropout {
                    m = mask_factor(seed, bh * seq + query0 + r, seq, j, threshold, keep_scale);
                }
                if half == 0 {
                    let ds = p * (dps[r * pitch + lane] * m - deltas[r]);
                    add_scaled(&mut acc, ds, &queries, r, 0usize, head_dim, head_dim);
                } else {
                    add_scaled(&mut acc, p * m, &grads, r, 0usize, head_dim, head_dim);
                }
            }
        }
        sync_cube();
    }
    if valid {
        let at = (bh * seq + j) * head_dim;
        if half == 0 {
            #[unroll]
            for c in 0..head_dim {
                dk[at + c] = acc[c];
            }
        } else {
            #[unroll]
            for c in 0..head_dim {
                dv[at + c] = acc[c];
            }
        }
    }
}

/// Whether the kernels take these tensors: `f32`, heads of at most [`MAX_HEAD_DIM`] columns
/// and an even number of them (each of a row's two units sums half).
fn fits(tensors: &[&CubeTensor]) -> bool {
    tensors.iter().all(|t| {
        let dims = t.meta.shape().dims::<4>();
        t.dtype == DType::F32 && dims[3] <= MAX_HEAD_DIM && dims[3] % 2 == 0
    })
}

/// A new contiguous `f32` tensor of `shape` on `like`'s device.
fn empty_like(like: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// One cube per head of every sequence and block of rows.
fn cube_count(batch: usize, heads: usize, seq: usize) -> CubeCount {
    CubeCount::Static((batch * heads) as u32, seq.div_ceil(BLOCK) as u32, 1)
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each kernel launch below as one operation.
impl AttentionKernelOps for CubeBackend {
    fn attention_forward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        parts: CubeTensor,
        settings: KernelSettings,
    ) -> (CubeTensor, CubeTensor) {
        if !fits(&[&q, &k, &v]) {
            return reference_forward::<CubeBackend>(q, k, v, parts, settings);
        }
        let [batch, heads, seq, head_dim] = q.meta.shape().dims::<4>();
        // Written as `[batch, seq, heads, head_dim]`, so that merging the heads again (the
        // output projection's input, which autodiff keeps too) is a view of the same memory.
        let out = empty_like(&q, Shape::new([batch, seq, heads, head_dim]));
        let out = CubeBackend::float_swap_dims(out, 1, 2);
        let lse = empty_like(&q, Shape::new([batch, heads, seq]));
        if batch * heads * seq == 0 {
            return (out, lse);
        }
        let parts = into_contiguous(parts);
        let int_type = dtype_to_storage_type(parts.dtype);
        let client = q.client.clone();
        forward_kernel::launch(
            &client,
            cube_count(batch, heads, seq),
            CubeDim::new_1d(UNITS as u32),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            parts.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            settings.scale,
            settings.threshold,
            settings.keep_scale,
            head_dim,
            BLOCK,
            settings.dropout,
            int_type,
        );
        (out, lse)
    }

    fn attention_backward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        lse: CubeTensor,
        delta: CubeTensor,
        grad_out: CubeTensor,
        parts: CubeTensor,
        settings: KernelSettings,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        if !fits(&[&q, &k, &v, &grad_out]) {
            return reference_backward::<CubeBackend>(
                q, k, v, lse, delta, grad_out, parts, settings,
            );
        }
        let [batch, heads, seq, head_dim] = q.meta.shape().dims::<4>();
        let shape = Shape::new([batch, heads, seq, head_dim]);
        let (dq, dk, dv) = (
            empty_like(&q, shape.clone()),
            empty_like(&q, shape.clone()),
            empty_like(&q, shape),
        );
        if batch * heads * seq == 0 {
            return (dq, dk, dv);
        }
        let (lse, delta, parts) = (
            into_contiguous(lse),
            into_contiguous(delta),
            into_contiguous(parts),
        );
        let int_type = dtype_to_storage_type(parts.dtype);
        let client = q.client.clone();
        dq_kernel::launch(
            &client,
            cube_count(batch, heads, seq),
            CubeDim::new_1d(UNITS as u32),
            q.clone().into_tensor_arg(),
            k.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            grad_out.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            delta.clone().into_tensor_arg(),
            parts.clone().into_tensor_arg(),
            dq.clone().into_tensor_arg(),
            settings.scale,
            settings.threshold,
            settings.keep_scale,
            head_dim,
            BLOCK,
            settings.dropout,
            int_type,
        );
        dkdv_kernel::launch(
            &client,
            cube_count(batch, heads, seq),
            CubeDim::new_1d(UNITS as u32),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            grad_out.into_tensor_arg(),
            lse.into_tensor_arg(),
            delta.into_tensor_arg(),
            parts.into_tensor_arg(),
            dk.clone().into_tensor_arg(),
            dv.clone().into_tensor_arg(),
            settings.scale,
            settings.threshold,
            settings.keep_scale,
            head_dim,
            BLOCK,
            settings.dropout,
            int_type,
        );
        (dq, dk, dv)
    }
}
