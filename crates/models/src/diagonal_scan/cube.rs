//! The diagonal recurrence's kernels on cubecl's backends (`cuda`, `cube-cpu`): a unit per
//! channel of each sequence (`batch · d` units, neighbouring units on neighbouring channels, so
//! that each step's reads of a row are contiguous), walking the steps forwards for the output
//! and backwards for the gradients, each tensor read where it lies through its strides.
//!
//! - **forward**: `y ← m_t · y + c_t` from the start state, each `y` written out.
//! - **backward**: `g ← dy_t + carry`, `dc_t = g`, `dm_t = g · y_{t−1}`, `carry ← m_t · g`
//!   from the last step to the first; the start's gradient is the last carry.
//!
//! Tensors other than `f32` take the tensor operations of the module above instead.

use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::untile;
use burn_cubecl::tensor::CubeTensor;

use super::{DiagonalScanOps, backward_by_ops, forward_by_ops};
use crate::causal_conv::cube::{empty_like, grid};

/// Element `(b, t, c)` of `x`, `[batch, seq, d]`, through its strides.
#[cube]
fn at(x: &Tensor<f32>, b: usize, t: usize, c: usize) -> f32 {
    x[b * x.stride(0) + t * x.stride(1) + c * x.stride(2)]
}

/// Element `(b, c)` of the start state `y0`, `[batch, d]`, through its strides.
#[cube]
fn start(y0: &Tensor<f32>, b: usize, c: usize) -> f32 {
    y0[b * y0.stride(0) + c * y0.stride(1)]
}

/// A unit per channel of each sequence: `y_t = m_t · y_{t−1} + c_t` for every step, into
/// `out` (contiguous `[batch, seq, d]`).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn forward_kernel(
    m: &Tensor<f32>,
    c: &Tensor<f32>,
    y0: &Tensor<f32>,
    out: &mut Tensor<f32>,
) {
    let pos = ABSOLUTE_POS;
    let (seq, d) = (out.shape(1), out.shape(2));
    if pos >= out.shape(0) * d {
        terminate!();
    }
    let (b, ch) = (pos / d, pos % d);
    let mut y = start(y0, b, ch);
    for t in 0..seq {
        y = at(m, b, t, ch) * y + at(c, b, t, ch);
        out[(b * seq + t) * d + ch] = y;
    }
}

/// A unit per channel of each sequence, from the last step to the first: the gradients of the
/// transitions (`dm`) and of the offsets (`dc`), both contiguous `[batch, seq, d]`, and of the
/// start (`dy0`, contiguous `[batch, d]`), from the output's gradient `grad` and the output
/// `out` (the module docs).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn backward_kernel(
    m: &Tensor<f32>,
    y0: &Tensor<f32>,
    out: &Tensor<f32>,
    grad: &Tensor<f32>,
    dm: &mut Tensor<f32>,
    dc: &mut Tensor<f32>,
    dy0: &mut Tensor<f32>,
) {
    let pos = ABSOLUTE_POS;
    let (seq, d) = (dm.shape(1), dm.shape(2));
    if pos >= dm.shape(0) * d {
        terminate!();
    }
    let (b, ch) = (pos / d, pos % d);
    let mut carry = 0.0f32;
    for i in 0..seq {
        let t = seq - 1 - i;
        let g = at(grad, b, t, ch) + carry;
        let mut previous = start(y0, b, ch);
        if t > 0 {
            previous = at(out, b, t - 1, ch);
        }
        let here = (b * seq + t) * d + ch;
        dc[here] = g;
        dm[here] = g * previous;
        carry = at(m, b, t, ch) * g;
    }
    dy0[pos] = carry;
}

/// Whether the kernels take these tensors: all `f32`.
fn fits(tensors: &[&CubeTensor]) -> bool {
    tensors.iter().all(|t| t.dtype == DType::F32)
}

/// Units of a launch over `like`, `[batch, seq, d]`: a channel of a sequence each.
fn units(like: &CubeTensor) -> usize {
    let [batch, _, d] = like.meta.shape().dims::<3>();
    batch * d
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each operation below as one.
impl DiagonalScanOps for CubeBackend {
    fn diagonal_scan(m: CubeTensor, c: CubeTensor, y0: CubeTensor) -> CubeTensor {
        if !fits(&[&m, &c, &y0]) {
            return forward_by_ops::<CubeBackend>(m, c, y0);
        }
        // A storage-tiled tensor (laid out for a matrix product) is read by steps only after
        // un-tiling; any other is read where it lies.
        let (m, c, y0) = (untile(m), untile(c), untile(y0));
        let out = empty_like(&c, c.meta.shape().clone());
        let n = units(&out);
        if n == 0 || out.meta.shape().num_elements() == 0 {
            return out;
        }
        let (count, dim) = grid(&out, n);
        forward_kernel::launch(
            &out.client.clone(),
            count,
            dim,
            m.into_tensor_arg(),
            c.into_tensor_arg(),
            y0.into_tensor_arg(),
            out.clone().into_tensor_arg(),
        );
        out
    }

    fn diagonal_scan_backward(
        m: CubeTensor,
        y0: CubeTensor,
        out: CubeTensor,
        grad: CubeTensor,
    ) -> (CubeTensor, CubeTensor, CubeTensor) {
        if !fits(&[&m, &y0, &out, &grad]) {
            return backward_by_ops::<CubeBackend>(m, y0, out, grad);
        }
        let (m, y0, out, grad) = (untile(m), untile(y0), untile(out), untile(grad));
        let shape = grad.meta.shape().clone();
        let [batch, _, d] = shape.dims::<3>();
        let (dm, dc) = (empty_like(&grad, shape.clone()), empty_like(&grad, shape));
        let n = units(&grad);
        if n == 0 || grad.meta.shape().num_elements() == 0 {
            let zeros = CubeBackend::float_zeros(
                y0.meta.shape().clone(),
                &y0.device,
                burn::tensor::FloatDType::F32,
            );
            return (dm, dc, zeros);
        }
        let dy0 = empty_like(&grad, burn::backend::Shape::new([batch, d]));
        let (count, dim) = grid(&dy0, n);
        backward_kernel::launch(
            &grad.client.clone(),
            count,
            dim,
            m.into_tensor_arg(),
            y0.into_tensor_arg(),
            out.into_tensor_arg(),
            grad.into_tensor_arg(),
            dm.clone().into_tensor_arg(),
            dc.clone().into_tensor_arg(),
            dy0.clone().into_tensor_arg(),
        );
        (dm, dc, dy0)
    }
}

#[cfg(all(test, feature = "cube-cpu"))]
mod tests {
    use burn::backend::Slice;
    use burn::backend::cubecl::Device as CubeDevice;
    use burn::cubecl::future::block_on;
    use burn::tensor::TensorData;
    use burn_cubecl::kernel::into_contiguous;

    use super::*;

    /// Values near 1 (as `1 + A` is) of `shape` on `device`, scrambled by `salt`.
    fn tensor(shape: [usize; 3], salt: u32, device: &CubeDevice) -> CubeTensor {
        let n = shape.iter().product::<usize>() as u32;
        let data = (0..n)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 2001) as f32 / 10_000.0 + 0.9)
            .collect::<Vec<_>>();
        CubeBackend::float_from_data(TensorData::new(data, shape), device)
    }

    fn values(t: CubeTensor) -> Vec<f32> {
        let data = block_on(CubeBackend::float_into_data(t)).expect("read back");
        data.try_to_vec::<f32>().expect("f32")
    }

    /// The middle third of the last dimension of `[batch, seq, 3 · d]` values: a view whose
    /// steps lie `3 · d` apart (burn keeps a slice a view where its start is aligned).
    fn middle_third(shape: [usize; 3], salt: u32, device: &CubeDevice) -> CubeTensor {
        let [batch, seq, d] = shape;
        let wide = tensor([batch, seq, 3 * d], salt, device);
        let third = Slice::new(d as isize, Some(2 * d as isize), 1);
        CubeBackend::float_slice(wide, &[Slice::full(), Slice::full(), third])
    }

    /// The kernels read views through their strides: on views of wider tensors and a start
    /// broadcast over the batch (stride 0, as the cell's learned start is), the output and the
    /// three gradients equal the kernels' on contiguous copies of the same values, to the bit.
    #[test]
    fn the_kernels_read_views_as_their_copies() {
        crate::device_by_name("cube-cpu").expect("cube-cpu");
        let device = CubeDevice::Cpu(Default::default());
        let shape = [2, 67, 64];
        let (m, c, grad) = (
            middle_third(shape, 7, &device),
            middle_third(shape, 11, &device),
            middle_third(shape, 13, &device),
        );
        let row = CubeBackend::float_reshape(
            CubeBackend::float_slice(
                tensor([1, 1, 64], 17, &device),
                &[Slice::full(), Slice::full(), Slice::full()],
            ),
            burn::backend::Shape::new([1, 64]),
        );
        let y0 = CubeBackend::float_expand(row, burn::backend::Shape::new([2, 64]));
        let alignment = device.client().properties().memory.alignment;
        assert!(
            !m.is_contiguous() && !grad.is_contiguous() && !y0.is_contiguous(),
            "the test needs views: 64 channels are 256 bytes, the alignment {alignment}"
        );
        let on = |m: CubeTensor, c: CubeTensor, y0: CubeTensor, grad: CubeTensor| {
            let out = CubeBackend::diagonal_scan(m.clone(), c, y0.clone());
            let (dm, dc, dy0) = CubeBackend::diagonal_scan_backward(m, y0, out.clone(), grad);
            [values(out), values(dm), values(dc), values(dy0)]
        };
        let copy = |t: &CubeTensor| into_contiguous(t.clone()).copy();
        let want = on(copy(&m), copy(&c), copy(&y0), copy(&grad));
        let got = on(m, c, y0, grad);
        for (i, what) in ["output", "dm", "dc", "dy0"].into_iter().enumerate() {
            assert_eq!(got[i], want[i], "{what}");
        }
    }
}
