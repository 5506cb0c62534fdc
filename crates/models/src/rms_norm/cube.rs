//! The norm's kernels on cubecl's backends (`cuda`, `cube-cpu`): rows of `[rows, width]` taken
//! several to a cube, on a GPU 32 units to a row ([`SHARED_ROWS`]), each unit walking the
//! columns `lane, lane + 32, …` (so a row's units read neighbouring columns together) and the
//! row's sums met in shared memory; on cubecl's CPU runtime a unit to a row ([`UNIT_ROWS`]).
//!
//! - **forward** (one launch): each row's `Σ x²`, then `x / rms ∘ γ` over the row's columns.
//! - **backward** (two launches, then a sum over blocks): each row's `Σ x²` and `Σ g ∘ x`
//!   (`g = dy ∘ γ`), then `dx = (g − x̂ · mean(g ∘ x̂)) / rms` over the row's columns, and the
//!   row's root written for the second kernel; that one takes a column and a block of
//!   [`GAMMA_ROWS`] rows per unit (neighbouring units, neighbouring columns) and sums
//!   `dy ∘ x̂` into a `[blocks, width]` tensor that one sum over its blocks reduces to `dγ`.
//!
//! Every tensor is read through its strides. Tensors other than `f32` take the tensor
//! operations of the module above instead.

use burn::backend::Shape;
use burn::backend::ops::FloatTensorOps;
use burn::cubecl;
use burn::cubecl::calculate_cube_count_elemwise;
use burn::cubecl::prelude::*;
use burn::tensor::DType;
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::untile;
use burn_cubecl::tensor::CubeTensor;

use super::{RmsNormOps, backward_by_ops, forward_by_ops};
use crate::causal_conv::cube::empty_like;

/// How the row kernels lay rows out: units to a row, rows to a cube.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowLayout {
    pub(crate) lanes: usize,
    pub(crate) rows_per_cube: usize,
}

/// A GPU's: 32 units to a row (a warp's width), their sums met in shared memory, 8 rows a cube.
pub(crate) const SHARED_ROWS: RowLayout = RowLayout {
    lanes: 32,
    rows_per_cube: 8,
};

/// Where the runtime's planes are one unit wide (cubecl's CPU runtime): a unit to a row and no
/// barrier. That runtime runs a kernel that waits at `sync_cube` with a thread per unit, each
/// spinning at the barrier, so [`SHARED_ROWS`]' cube of 256 units took some 19 s a launch on
/// two cores.
pub(crate) const UNIT_ROWS: RowLayout = RowLayout {
    lanes: 1,
    rows_per_cube: 64,
};

/// The layout for `like`'s runtime.
fn layout_for(like: &CubeTensor) -> RowLayout {
    if like.client.properties().hardware.plane_size_max == 1 {
        UNIT_ROWS
    } else {
        SHARED_ROWS
    }
}

/// Rows a unit of `γ`'s gradient sums.
pub(crate) const GAMMA_ROWS: usize = 64;

/// Element `(row, c)` of a `[rows, width]` tensor, through its strides.
#[cube]
fn at(t: &Tensor<f32>, row: usize, c: usize) -> f32 {
    t[row * t.stride(0) + c * t.stride(1)]
}

/// Element `c` of `γ`.
#[cube]
fn gamma_at(gamma: &Tensor<f32>, c: usize) -> f32 {
    gamma[c * gamma.stride(0)]
}

/// The sum of the `lanes` partial sums of the cube's row `r`.
#[cube]
fn row_total(partial: &Shared<[f32]>, r: usize, #[comptime] lanes: usize) -> f32 {
    let mut total = 0.0f32;
    #[unroll]
    for l in 0..lanes {
        total += partial[r * lanes + l];
    }
    total
}

/// `sqrt(squares / width + ε)`, the root of a row whose squares sum to `squares`.
#[cube]
fn root(squares: f32, width: usize, eps: f32) -> f32 {
    f32::sqrt(squares / f32::cast_from(width) + eps)
}

/// `x / rms ∘ γ`: a cube per `rows_per_cube` rows, `lanes` units to a row (the module docs).
#[cube(launch, create_dummy_kernel)]
pub(crate) fn forward_kernel(
    x: &Tensor<f32>,
    gamma: &Tensor<f32>,
    out: &mut Tensor<f32>,
    eps: f32,
    #[comptime] lanes: usize,
    #[comptime] rows_per_cube: usize,
) {
    let (rows, width) = (x.shape(0), x.shape(1));
    let (r, lane) = (UNIT_POS as usize / lanes, UNIT_POS as usize % lanes);
    let row = CUBE_POS_X as usize * rows_per_cube + r;
    let valid = row < rows;
    let steps = (width + comptime!(lanes - 1)) / lanes;
    let mut squares = Shared::<[f32]>::new_slice(comptime!(lanes * rows_per_cube));
    let mut acc = 0.0f32;
    if valid {
        for s in 0..steps {
            let c = s * lanes + lane;
            if c < width {
                let v = at(x, row, c);
                acc += v * v;
            }
        }
    }
    squares[r * lanes + lane] = acc;
    if comptime!(lanes > 1) {
        sync_cube();
    }
    if valid {
        let rms = root(row_total(&squares, r, lanes), width, eps);
        for s in 0..steps {
            let c = s * lanes + lane;
            if c < width {
                out[row * width + c] = at(x, row, c) / rms * gamma_at(gamma, c);
            }
        }
    }
}

/// `dx` and each row's root, laid out as [`forward_kernel`] (the module docs).
#[cube(launch, create_dummy_kernel)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_rows_kernel(
    x: &Tensor<f32>,
    gamma: &Tensor<f32>,
    grad: &Tensor<f32>,
    grad_x: &mut Tensor<f32>,
    roots: &mut Tensor<f32>,
    eps: f32,
    #[comptime] lanes: usize,
    #[comptime] rows_per_cube: usize,
) {
    let (rows, width) = (x.shape(0), x.shape(1));
    let (r, lane) = (UNIT_POS as usize / lanes, UNIT_POS as usize % lanes);
    let row = CUBE_POS_X as usize * rows_per_cube + r;
    let valid = row < rows;
    let steps = (width + comptime!(lanes - 1)) / lanes;
    let mut squares = Shared::<[f32]>::new_slice(comptime!(lanes * rows_per_cube));
    let mut products = Shared::<[f32]>::new_slice(comptime!(lanes * rows_per_cube));
    let mut square_acc = 0.0f32;
    let mut product_acc = 0.0f32;
    if valid {
        for s in 0..steps {
            let c = s * lanes + lane;
            if c < width {
                let v = at(x, row, c);
                square_acc += v * v;
                product_acc += at(grad, row, c) * gamma_at(gamma, c) * v;
            }
        }
    }
    squares[r * lanes + lane] = square_acc;
    products[r * lanes + lane] = product_acc;
    if comptime!(lanes > 1) {
        sync_cube();
    }
    if valid {
        let rms = root(row_total(&squares, r, lanes), width, eps);
        let dot = row_total(&products, r, lanes) / rms / f32::cast_from(width);
        for s in 0..steps {
            let c = s * lanes + lane;
            if c < width {
                let g = at(grad, row, c) * gamma_at(gamma, c);
                let normed = at(x, row, c) / rms;
                grad_x[row * width + c] = (g - normed * dot) / rms;
            }
        }
        if lane == 0 {
            roots[row] = rms;
        }
    }
}

/// One column and block of `block_rows` rows per unit: the block's `Σ dy ∘ x / rms`, into
/// `partial`, `[blocks, width]`.
#[cube(launch, create_dummy_kernel)]
pub(crate) fn gamma_grad_kernel(
    x: &Tensor<f32>,
    grad: &Tensor<f32>,
    roots: &Tensor<f32>,
    partial: &mut Tensor<f32>,
    block_rows: usize,
) {
    let pos = ABSOLUTE_POS;
    let (rows, width) = (x.shape(0), x.shape(1));
    if pos >= partial.shape(0) * width {
        terminate!();
    }
    let (block, c) = (pos / width, pos % width);
    let first = block * block_rows;
    let mut last = first + block_rows;
    if last > rows {
        last = rows;
    }
    let mut acc = 0.0f32;
    for row in first..last {
        acc += at(grad, row, c) * (at(x, row, c) / roots[row]);
    }
    partial[pos] = acc;
}

/// Whether the kernels take these tensors: `f32` alone.
fn fits(tensors: &[&CubeTensor]) -> bool {
    tensors.iter().all(|t| t.dtype == DType::F32)
}

/// The launch of the row kernels over `rows` rows.
pub(crate) fn row_grid(rows: usize, layout: RowLayout) -> (CubeCount, CubeDim) {
    (
        CubeCount::Static(rows.div_ceil(layout.rows_per_cube) as u32, 1, 1),
        CubeDim::new_1d((layout.lanes * layout.rows_per_cube) as u32),
    )
}

/// [`RmsNormOps::rms_norm`] by the forward kernel, rows laid out as `layout` says.
pub(crate) fn forward_with(
    x: CubeTensor,
    gamma: CubeTensor,
    eps: f32,
    layout: RowLayout,
) -> CubeTensor {
    // A storage-tiled tensor (laid out for a matrix product) is read as rows only after
    // un-tiling; any other is read where it lies.
    let (x, gamma) = (untile(x), untile(gamma));
    let out = empty_like(&x, x.meta.shape().clone());
    let [rows, width] = out.meta.shape().dims::<2>();
    if rows * width == 0 {
        return out;
    }
    let (count, dim) = row_grid(rows, layout);
    forward_kernel::launch(
        &out.client.clone(),
        count,
        dim,
        x.into_tensor_arg(),
        gamma.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        eps,
        layout.lanes,
        layout.rows_per_cube,
    );
    out
}

/// [`RmsNormOps::rms_norm_backward`] by the two backward kernels and a sum over blocks, rows
/// laid out as `layout` says.
pub(crate) fn backward_with(
    x: CubeTensor,
    gamma: CubeTensor,
    grad: CubeTensor,
    eps: f32,
    layout: RowLayout,
) -> (CubeTensor, CubeTensor) {
    let (x, gamma, grad) = (untile(x), untile(gamma), untile(grad));
    let [rows, width] = x.meta.shape().dims::<2>();
    let grad_x = empty_like(&x, x.meta.shape().clone());
    if rows * width == 0 {
        let zeros = CubeBackend::float_zeros(
            gamma.meta.shape().clone(),
            &gamma.device,
            burn::tensor::FloatDType::F32,
        );
        return (grad_x, zeros);
    }
    let client = x.client.clone();
    let roots = empty_like(&x, Shape::new([rows]));
    let (count, dim) = row_grid(rows, layout);
    backward_rows_kernel::launch(
        &client,
        count,
        dim,
        x.clone().into_tensor_arg(),
        gamma.into_tensor_arg(),
        grad.clone().into_tensor_arg(),
        grad_x.clone().into_tensor_arg(),
        roots.clone().into_tensor_arg(),
        eps,
        layout.lanes,
        layout.rows_per_cube,
    );
    let blocks = rows.div_ceil(GAMMA_ROWS);
    let partial = empty_like(&x, Shape::new([blocks, width]));
    let units = blocks * width;
    let cube_dim = CubeDim::new(&client, units);
    gamma_grad_kernel::launch(
        &client,
        calculate_cube_count_elemwise(&client, units, cube_dim),
        cube_dim,
        x.into_tensor_arg(),
        grad.into_tensor_arg(),
        roots.into_tensor_arg(),
        partial.clone().into_tensor_arg(),
        GAMMA_ROWS,
    );
    let grad_gamma =
        CubeBackend::float_reshape(CubeBackend::float_sum_dim(partial, 0), Shape::new([width]));
    (grad_x, grad_gamma)
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each pass below as one operation.
impl RmsNormOps for CubeBackend {
    fn rms_norm(x: CubeTensor, gamma: CubeTensor, eps: f32) -> CubeTensor {
        if !fits(&[&x, &gamma]) {
            return forward_by_ops::<CubeBackend>(x, gamma, eps);
        }
        let layout = layout_for(&x);
        forward_with(x, gamma, eps, layout)
    }

    fn rms_norm_backward(
        x: CubeTensor,
        gamma: CubeTensor,
        grad: CubeTensor,
        eps: f32,
    ) -> (CubeTensor, CubeTensor) {
        if !fits(&[&x, &gamma, &grad]) {
            return backward_by_ops::<CubeBackend>(x, gamma, grad, eps);
        }
        let layout = layout_for(&x);
        backward_with(x, gamma, grad, eps, layout)
    }
}

#[cfg(all(test, feature = "cube-cpu"))]
mod tests {
    use burn::backend::cubecl::Device as CubeDevice;
    use burn::cubecl::future::block_on;
    use burn::tensor::TensorData;

    use super::*;
    use crate::causal_conv::tests::assert_close;

    /// Values in `[-2, 2]` of `shape` on `device`, scrambled by `salt`.
    fn tensor<const D: usize>(shape: [usize; D], salt: u32, device: &CubeDevice) -> CubeTensor {
        let n = shape.iter().product::<usize>() as u32;
        let data = (0..n)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 4001) as f32 / 1000.0 - 2.0)
            .collect::<Vec<_>>();
        CubeBackend::float_from_data(TensorData::new(data, shape), device)
    }

    fn values(t: CubeTensor) -> Vec<f32> {
        let data = block_on(CubeBackend::float_into_data(t)).expect("read back");
        data.try_to_vec::<f32>().expect("f32")
    }

    /// Both layouts compute what the tensor operations compute, whatever the runtime would
    /// pick: the GPU's (32 units to a row, eight rows a cube) and the CPU runtime's, on rows
    /// that end in a partial cube and widths under, over and not a multiple of 32.
    #[test]
    fn both_row_layouts_equal_the_tensor_operations() {
        crate::device_by_name("cube-cpu").expect("cube-cpu");
        let device = CubeDevice::Cpu(Default::default());
        for (rows, width) in [(70, 37), (9, 96), (3, 5)] {
            let x = tensor([rows, width], 3, &device);
            let gamma = tensor([width], 5, &device);
            let grad = tensor([rows, width], 7, &device);
            let want = [
                values(forward_by_ops::<CubeBackend>(
                    x.clone(),
                    gamma.clone(),
                    1e-5,
                )),
                {
                    let (dx, dg) = backward_by_ops::<CubeBackend>(
                        x.clone(),
                        gamma.clone(),
                        grad.clone(),
                        1e-5,
                    );
                    [values(dx), values(dg)].concat()
                },
            ];
            for layout in [SHARED_ROWS, UNIT_ROWS] {
                let out = forward_with(x.clone(), gamma.clone(), 1e-5, layout);
                let (dx, dg) = backward_with(x.clone(), gamma.clone(), grad.clone(), 1e-5, layout);
                let what = format!("{rows}×{width}, {layout:?}");
                assert_close(&values(out), &want[0], &format!("{what}: output"));
                let got = [values(dx), values(dg)].concat();
                assert_close(&got, &want[1], &format!("{what}: dx and dγ"));
            }
        }
    }
}
