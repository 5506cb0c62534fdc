//! SLiCE's recurrence's kernels on cubecl's backends (`cuda`, `cube-cpu`): a unit per block of
//! each sequence (`batch · d / b` units, neighbouring units on neighbouring blocks), keeping the
//! block's `b` values of the state in registers and walking the steps forwards for the output
//! and backwards for the gradients, each tensor read where it lies through its strides. The
//! block size is fixed when the kernel is compiled, so its loops over a block are unrolled.
//!
//! - **forward**: `y_i ← c_{t,i} + y_i + Σ_j A_{t,ij} y_j` from the start state, each `y`
//!   written out.
//! - **backward**: `g ← dy_t + carry`, `dc_t = g`, `dA_{t,ij} = g_i y_{t−1,j}`,
//!   `carry_j ← g_j + Σ_i A_{t,ij} g_i` from the last step to the first; the start's gradient
//!   is the last carry.
//!
//! Tensors other than `f32` take the tensor operations of the module above instead.

use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::untile;
use burn_cubecl::tensor::CubeTensor;

use super::{MAX_BLOCK, SliceScanOps, backward_by_ops, forward_by_ops};
use crate::causal_conv::cube::{at, empty_like, grid};

/// Element `(b, i)` of the start state `y0`, `[batch, d]`, through its strides.
#[cube]
fn start(y0: &Tensor<f32>, b: usize, i: usize) -> f32 {
    y0[b * y0.stride(0) + i * y0.stride(1)]
}

/// A unit per block of each sequence: `y_t = (I + A_t) y_{t−1} + c_t` for every step, into
/// `out` (contiguous `[batch, seq, d]`); `a` is `[batch, seq, d · block]`.
#[cube(launch, create_dummy_kernel)]
pub(crate) fn forward_kernel(
    a: &Tensor<f32>,
    c: &Tensor<f32>,
    y0: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] block: usize,
) {
    let pos = ABSOLUTE_POS;
    let (seq, d) = (out.shape(1), out.shape(2));
    let n = d / block;
    if pos >= out.shape(0) * n {
        terminate!();
    }
    let (b, first) = (pos / n, (pos % n) * block);
    let mut y = Array::<f32>::new(block);
    #[unroll]
    for i in 0..block {
        y[i] = start(y0, b, first + i);
    }
    let mut next = Array::<f32>::new(block);
    for t in 0..seq {
        #[unroll]
        for i in 0..block {
            let mut acc = at(c, b, t, first + i) + y[i];
            #[unroll]
            for j in 0..block {
                acc += at(a, b, t, (first + i) * block + j) * y[j];
            }
            next[i] = acc;
        }
        #[unroll]
        for i in 0..block {
            y[i] = next[i];
            out[(b * seq + t) * d + first + i] = next[i];
        }
    }
}

/// A unit per block of each sequence, from the last step to the first: the gradients of the
/// transitions (`da`, contiguous `[batch, seq, d · block]`), of the offsets (`dc`, contiguous
/// `[batch, seq, d]`) and of the start (`dy0`, contiguous `[batch, d]`), from the output's
/// gradient `grad` and the output `out` (the module docs).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn backward_kernel(
    a: &Tensor<f32>,
    y0: &Tensor<f32>,
    out: &Tensor<f32>,
    grad: &Tensor<f32>,
    da: &mut Tensor<f32>,
    dc: &mut Tensor<f32>,
    dy0: &mut Tensor<f32>,
    #[comptime] block: usize,
) {
    let pos = ABSOLUTE_POS;
    let (seq, d) = (dc.shape(1), dc.shape(2));
    let n = d / block;
    if pos >= dc.shape(0) * n {
        terminate!();
    }
    let (b, first) = (pos / n, (pos % n) * block);
    let mut carry = Array::<f32>::new(block);
    let mut g = Array::<f32>::new(block);
    // The state before step t: the output's step t − 1, or the start (read once) at t = 0.
    let mut initial = Array::<f32>::new(block);
    let mut previous = Array::<f32>::new(block);
    #[unroll]
    for i in 0..block {
        carry[i] = 0.0f32;
        initial[i] = start(y0, b, first + i);
    }
    for step in 0..seq {
        let t = seq - 1 - step;
        #[unroll]
        for i in 0..block {
            g[i] = at(grad, b, t, first + i) + carry[i];
            dc[(b * seq + t) * d + first + i] = g[i];
            previous[i] = initial[i];
            if t > 0 {
                previous[i] = at(out, b, t - 1, first + i);
            }
        }
        #[unroll]
        for j in 0..block {
            carry[j] = g[j];
        }
        let row = (b * seq + t) * d * block;
        #[unroll]
        for i in 0..block {
            #[unroll]
            for j in 0..block {
                let k = (first + i) * block + j;
                da[row + k] = g[i] * previous[j];
                carry[j] += at(a, b, t, k) * g[i];
            }
        }
    }
    #[unroll]
    for i in 0..block {
        dy0[b * d + first + i] = carry[i];
    }
}

/// Whether the kernels take these tensors: all `f32`, blocks of 1 to [`MAX_BLOCK`].
fn fits(tensors: &[&CubeTensor], block: usize) -> bool {
    (1..=MAX_BLOCK).contains(&block) && tensors.iter().all(|t| t.dtype == DType::F32)
}

/// Units of a launch over `like`, `[batch, seq, d]`: a block of a sequence each.
fn units(like: &CubeTensor, block: usize) -> usize {
    let [batch, _, d] = like.meta.shape().dims::<3>();
    batch * (d / block)
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each operation below as one.
impl SliceScanOps for CubeBackend {
    fn slice_scan(a: CubeTensor, c: CubeTensor, y0: CubeTensor, block: usize) -> CubeTensor {
        if !fits(&[&a, &c, &y0], block) {
            return forward_by_ops::<CubeBackend>(a, c, y0, block);
        }
        // A storage-tiled tensor (laid out for a matrix product) is read by steps only after
        // un-tiling; any other is read where it lies.
        let (a, c, y0) = (untile(a), untile(c), untile(y0));
        let out = empty_like(&c, c.meta.shape().clone());
        let n = units(&out, block);
        if n == 0 || out.meta.shape().num_elements() == 0 {
            return out;
        }
        let (count, dim) = grid(&out, n);
        forward_kernel::launch(
            &out.client.clone(),
            count,
            dim,
            a.into_tensor_arg(),
            c.into_tensor_arg(),
            y0.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            block,
        );
        out
    }

    fn slice_scan_backward(
        a: CubeTensor,
        y0: CubeTensor,
        out: CubeTensor,
        grad: CubeTensor,
        block: usize,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        if !fits(&[&a, &y0, &out, &grad], block) {
            return backward_by_ops::<CubeBackend>(a, y0, out, grad, block);
        }
        let (a, y0, out, grad) = (untile(a), untile(y0), untile(out), untile(grad));
        let (da, dc) = (
            empty_like(&grad, a.meta.shape().clone()),
            empty_like(&grad, grad.meta.shape().clone()),
        );
        let n = units(&grad, block);
        if n == 0 || grad.meta.shape().num_elements() == 0 {
            let zeros = CubeBackend::float_zeros(
                y0.meta.shape().clone(),
                &y0.device,
                burn::tensor::FloatDType::F32,
            );
            return (da, dc, zeros);
        }
        let dy0 = empty_like(&grad, y0.meta.shape().clone());
        let (count, dim) = grid(&dy0, n);
        backward_kernel::launch(
            &grad.client.clone(),
            count,
            dim,
            a.into_tensor_arg(),
            y0.into_tensor_arg(),
            out.into_tensor_arg(),
            grad.into_tensor_arg(),
            da.clone().into_tensor_arg(),
            dc.clone().into_tensor_arg(),
            dy0.clone().into_tensor_arg(),
            block,
        );
        (da, dc, dy0)
    }
}

#[cfg(all(test, feature = "cube-cpu"))]
mod tests {
    use burn::backend::Shape;
    use burn::backend::Slice;
    use burn::backend::cubecl::Device as CubeDevice;
    use burn::cubecl::future::block_on;
    use burn::tensor::TensorData;
    use burn_cubecl::kernel::into_contiguous;

    use super::*;

    /// Values in `[-scale, scale]` of `shape` on `device`, scrambled by `salt`.
    fn tensor(shape: [usize; 3], salt: u32, scale: f32, device: &CubeDevice) -> CubeTensor {
        let n = shape.iter().product::<usize>() as u32;
        let data = (0..n)
            .map(|i| {
                (((i.wrapping_mul(2_654_435_761) ^ salt) % 2001) as f32 / 1000.0 - 1.0) * scale
            })
            .collect::<Vec<_>>();
        CubeBackend::float_from_data(TensorData::new(data, shape), device)
    }

    fn values(t: CubeTensor) -> Vec<f32> {
        let data = block_on(CubeBackend::float_into_data(t)).expect("read back");
        data.try_to_vec::<f32>().expect("f32")
    }

    /// The middle third of the last dimension of `[batch, seq, 3 · w]` values: a view whose
    /// steps lie `3 · w` apart (burn keeps a slice a view where its start is aligned).
    fn middle_third(shape: [usize; 3], salt: u32, scale: f32, device: &CubeDevice) -> CubeTensor {
        let [batch, seq, w] = shape;
        let wide = tensor([batch, seq, 3 * w], salt, scale, device);
        let third = Slice::new(w as isize, Some(2 * w as isize), 1);
        CubeBackend::float_slice(wide, &[Slice::full(), Slice::full(), third])
    }

    /// The kernels read views through their strides: on views of wider tensors and a start
    /// broadcast over the batch (stride 0, as the cell's learned start is), the output and the
    /// three gradients equal the kernels' on contiguous copies of the same values, to the bit,
    /// for the diagonal and for blocks of 8.
    #[test]
    fn the_kernels_read_views_as_their_copies() {
        crate::device_by_name("cube-cpu").expect("cube-cpu");
        let device = CubeDevice::Cpu(Default::default());
        let (batch, seq, d) = (2, 67, 64);
        for block in [1, 8] {
            let a = middle_third([batch, seq, d * block], 7, 0.1 / block as f32, &device);
            let c = middle_third([batch, seq, d], 11, 1.0, &device);
            let grad = middle_third([batch, seq, d], 13, 1.0, &device);
            let row =
                CubeBackend::float_reshape(tensor([1, 1, d], 17, 1.0, &device), Shape::new([1, d]));
            let y0 = CubeBackend::float_expand(row, Shape::new([batch, d]));
            let alignment = device.client().properties().memory.alignment;
            assert!(
                !a.is_contiguous() && !grad.is_contiguous() && !y0.is_contiguous(),
                "the test needs views: 64 values are 256 bytes, the alignment {alignment}"
            );
            let on = |a: CubeTensor, c: CubeTensor, y0: CubeTensor, grad: CubeTensor| {
                let out = CubeBackend::slice_scan(a.clone(), c, y0.clone(), block);
                let (da, dc, dy0) =
                    CubeBackend::slice_scan_backward(a, y0, out.clone(), grad, block);
                [values(out), values(da), values(dc), values(dy0)]
            };
            let copy = |t: &CubeTensor| into_contiguous(t.clone()).copy();
            let want = on(copy(&a), copy(&c), copy(&y0), copy(&grad));
            let got = on(a, c, y0, grad);
            for (i, what) in ["output", "da", "dc", "dy0"].into_iter().enumerate() {
                assert_eq!(got[i], want[i], "block {block}: {what}");
            }
        }
    }
}
