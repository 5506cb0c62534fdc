//! The convolution's kernels on cubecl's backends (`cuda`, `cube-cpu`): one that sums the taps
//! (launched for the output and for the input's gradient) and one for the weight's gradient,
//! each reading the input (or the output's gradient) where it lies, through its strides, so
//! neither a padded copy nor a window per tap is ever written.
//!
//! - **output and input's gradient** (one kernel, a unit per element): the output's
//!   `Σ_i w[c, i] · x_{t−K+1+i}[c]` or the input gradient's `Σ_i w[c, i] · dout_{s+K−1−i}[c]`,
//!   over the taps whose step is inside the sequence, in the taps' order (the tensor
//!   operations' order).
//! - **weight's gradient** (a unit per channel and block of [`ROWS`] rows of `batch · seq`):
//!   the block's sums of `x_{t−K+1+i}[c] · dout_t[c]` for each tap `i`, into a `[blocks,
//!   channels, K]` tensor that one sum over its blocks then reduces; neighbouring units take
//!   neighbouring channels, so their reads of a row are contiguous.
//!
//! Tensors other than `f32`, or a kernel of more than [`MAX_TAPS`] taps (each unrolled), take
//! the tensor operations of the module above instead.

use burn::backend::Shape;
use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::calculate_cube_count_elemwise;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::untile;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::{CausalConvOps, backward_by_ops, forward_by_ops};

/// Rows of `batch · seq` a unit of the weight's gradient sums.
pub(crate) const ROWS: usize = 64;

/// The most taps the kernels unroll (the models' have 4).
const MAX_TAPS: usize = 16;

/// Element `(b, t, c)` of `t`, `[batch, seq, channels]`, through its strides.
#[cube]
pub(crate) fn at(t: &Tensor<f32>, b: usize, step: usize, c: usize) -> f32 {
    t[b * t.stride(0) + step * t.stride(1) + c * t.stride(2)]
}

/// Tap `i` of channel `c` of the weight, `[channels, 1, kernel]`.
#[cube]
fn tap(weight: &Tensor<f32>, c: usize, i: usize) -> f32 {
    weight[c * weight.stride(0) + i * weight.stride(2)]
}

/// One element per unit of the output (`src` the input) or, `backward`, of the input's
/// gradient (`src` the output's gradient): `Σ_i w[c, i] · src_{t−K+1+i}[c]`, or
/// `Σ_i w[c, i] · src_{t+K−1−i}[c]`, over the taps whose step is inside the sequence, in the
/// taps' order (the module docs).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn taps_kernel(
    src: &Tensor<f32>,
    weight: &Tensor<f32>,
    out: &mut Tensor<f32>,
    #[comptime] kernel: usize,
    #[comptime] backward: bool,
) {
    let pos = ABSOLUTE_POS;
    if pos >= out.len() {
        terminate!();
    }
    let (seq, channels) = (out.shape(1), out.shape(2));
    let (b, t, c) = (
        pos / (seq * channels),
        (pos / channels) % seq,
        pos % channels,
    );
    let mut acc = 0.0f32;
    #[unroll]
    for i in 0..kernel {
        if backward {
            let step = t + comptime!(kernel - 1 - i);
            if step < seq {
                acc += tap(weight, c, i) * at(src, b, step, c);
            }
        } else if t + i >= comptime!(kernel - 1) {
            acc += tap(weight, c, i) * at(src, b, t + i - comptime!(kernel - 1), c);
        }
    }
    out[pos] = acc;
}

/// One channel and block of `rows` rows per unit: the block's share of each tap's weight
/// gradient, into `partial`, `[blocks, channels, kernel]` (the module docs).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn weight_grad_kernel(
    x: &Tensor<f32>,
    grad: &Tensor<f32>,
    partial: &mut Tensor<f32>,
    rows: usize,
    #[comptime] kernel: usize,
) {
    let pos = ABSOLUTE_POS;
    let (seq, channels) = (grad.shape(1), grad.shape(2));
    if pos >= partial.shape(0) * channels {
        terminate!();
    }
    let (block, c) = (pos / channels, pos % channels);
    let first = block * rows;
    let mut last = first + rows;
    let all = grad.shape(0) * seq;
    if last > all {
        last = all;
    }
    let mut acc = Array::<f32>::new(kernel);
    #[unroll]
    for i in 0..kernel {
        acc[i] = 0.0f32;
    }
    for row in first..last {
        let (b, t) = (row / seq, row % seq);
        let g = at(grad, b, t, c);
        #[unroll]
        for i in 0..kernel {
            if t + i >= comptime!(kernel - 1) {
                acc[i] += at(x, b, t + i - comptime!(kernel - 1), c) * g;
            }
        }
    }
    #[unroll]
    for i in 0..kernel {
        partial[pos * kernel + i] = acc[i];
    }
}

/// Whether the kernels take these tensors: `f32`, and a kernel of 1 to [`MAX_TAPS`] taps.
fn fits(tensors: &[&CubeTensor], kernel: usize) -> bool {
    (1..=MAX_TAPS).contains(&kernel) && tensors.iter().all(|t| t.dtype == DType::F32)
}

/// A new contiguous `f32` tensor of `shape` on `like`'s device.
pub(crate) fn empty_like(like: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// A one-dimensional launch of `n` units on `like`'s device.
pub(crate) fn grid(like: &CubeTensor, n: usize) -> (CubeCount, CubeDim) {
    let cube_dim = CubeDim::new(&like.client, n);
    (
        calculate_cube_count_elemwise(&like.client, n, cube_dim),
        cube_dim,
    )
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each operation below as one.
impl CausalConvOps for CubeBackend {
    fn causal_conv(x: CubeTensor, weight: CubeTensor) -> CubeTensor {
        let [.., kernel] = weight.meta.shape().dims::<3>();
        if !fits(&[&x, &weight], kernel) {
            return forward_by_ops::<CubeBackend>(x, weight);
        }
        // A storage-tiled tensor (laid out for a matrix product) is read as rows only after
        // un-tiling; any other is read where it lies.
        let (x, weight) = (untile(x), untile(weight));
        let out = empty_like(&x, x.meta.shape().clone());
        let n = out.meta.shape().num_elements();
        if n == 0 {
            return out;
        }
        let (count, dim) = grid(&out, n);
        taps_kernel::launch(
            &out.client.clone(),
            count,
            dim,
            x.into_tensor_arg(),
            weight.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            kernel,
            false,
        );
        out
    }

    fn causal_conv_backward(
        x: CubeTensor,
        weight: CubeTensor,
        grad: CubeTensor,
    ) -> (CubeTensor, CubeTensor) {
        let [channels, _, kernel] = weight.meta.shape().dims::<3>();
        if !fits(&[&x, &weight, &grad], kernel) {
            return backward_by_ops::<CubeBackend>(x, weight, grad);
        }
        let (x, weight, grad) = (untile(x), untile(weight), untile(grad));
        let [batch, seq, _] = grad.meta.shape().dims::<3>();
        let grad_x = empty_like(&grad, grad.meta.shape().clone());
        let n = grad_x.meta.shape().num_elements();
        if n == 0 {
            let zeros = CubeBackend::float_zeros(
                weight.meta.shape().clone(),
                &weight.device,
                burn::tensor::FloatDType::F32,
            );
            return (grad_x, zeros);
        }
        let client = grad.client.clone();
        let (count, dim) = grid(&grad_x, n);
        taps_kernel::launch(
            &client,
            count,
            dim,
            grad.clone().into_tensor_arg(),
            weight.into_tensor_arg(),
            grad_x.clone().into_tensor_arg(),
            kernel,
            true,
        );
        let blocks = (batch * seq).div_ceil(ROWS);
        let partial = empty_like(&grad, Shape::new([blocks, channels, kernel]));
        let (count, dim) = grid(&partial, blocks * channels);
        weight_grad_kernel::launch(
            &client,
            count,
            dim,
            x.into_tensor_arg(),
            grad.into_tensor_arg(),
            partial.clone().into_tensor_arg(),
            ROWS,
            kernel,
        );
        let grad_weight = CubeBackend::float_reshape(
            CubeBackend::float_sum_dim(partial, 0),
            Shape::new([channels, 1, kernel]),
        );
        (grad_x, grad_weight)
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

    /// Values in `[-1, 1]` of `shape` on `device`, scrambled by `salt`.
    fn tensor(shape: [usize; 3], salt: u32, device: &CubeDevice) -> CubeTensor {
        let n = shape.iter().product::<usize>() as u32;
        let data = (0..n)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 2001) as f32 / 1000.0 - 1.0)
            .collect::<Vec<_>>();
        CubeBackend::float_from_data(TensorData::new(data, shape), device)
    }

    fn values(t: CubeTensor) -> Vec<f32> {
        let data = block_on(CubeBackend::float_into_data(t)).expect("read back");
        data.try_to_vec::<f32>().expect("f32")
    }

    /// The middle third of the last dimension of `[batch, seq, 3 · channels]` values: a view
    /// whose steps lie `3 · channels` apart, where the third's bytes are a multiple of the
    /// device's alignment (burn copies a slice that starts elsewhere).
    fn middle_third(shape: [usize; 3], salt: u32, device: &CubeDevice) -> CubeTensor {
        let [batch, seq, channels] = shape;
        let wide = tensor([batch, seq, 3 * channels], salt, device);
        let third = Slice::new(channels as isize, Some(2 * channels as isize), 1);
        CubeBackend::float_slice(wide, &[Slice::full(), Slice::full(), third])
    }

    /// The kernels read a view through its strides: on views of wider tensors (as Mamba-2's
    /// input is a part of its projection), the output and both gradients equal the kernels'
    /// on contiguous copies of the same values, to the bit.
    #[test]
    fn the_kernels_read_views_as_their_copies() {
        crate::device_by_name("cube-cpu").expect("cube-cpu");
        let device = CubeDevice::Cpu(Default::default());
        let shape = [2, 67, 64];
        let x = middle_third(shape, 7, &device);
        let grad = middle_third(shape, 11, &device);
        let alignment = device.client().properties().memory.alignment;
        assert!(
            !x.is_contiguous() && !grad.is_contiguous(),
            "the test needs views: 64 channels are 256 bytes, the alignment {alignment}"
        );
        let weight = tensor([64, 1, 4], 3, &device);
        let on = |x: CubeTensor, grad: CubeTensor| {
            let out = CubeBackend::causal_conv(x.clone(), weight.clone());
            let (grad_x, grad_weight) = CubeBackend::causal_conv_backward(x, weight.clone(), grad);
            [values(out), values(grad_x), values(grad_weight)]
        };
        let copy = |t: &CubeTensor| into_contiguous(t.clone()).copy();
        let want = on(copy(&x), copy(&grad));
        let got = on(x, grad);
        for (i, what) in ["output", "dx", "dw"].into_iter().enumerate() {
            assert_eq!(got[i], want[i], "{what}");
        }
    }
}
