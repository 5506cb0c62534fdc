//! The norm's kernels on cubecl's backends (`cuda`, `cube-cpu`): rows of `[rows, width]` taken
//! [`ROWS_PER_CUBE`] to a cube, [`LANES`] units to a row, each unit walking the columns `lane,
//! lane + LANES, …` (so a row's units read neighbouring columns together) and the row's sums
//! met in shared memory.
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
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;

use super::{RmsNormOps, backward_by_ops, forward_by_ops};

/// Units that share a row.
pub(crate) const LANES: usize = 32;

/// Rows a cube takes.
pub(crate) const ROWS_PER_CUBE: usize = 8;

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

/// `x / rms ∘ γ`: a cube per [`ROWS_PER_CUBE`] rows, [`LANES`] units per row (the module docs).
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
    sync_cube();
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
    sync_cube();
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

/// A new contiguous `f32` tensor of `shape` on `like`'s device.
fn empty_like(like: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// The launch of the row kernels over `rows` rows.
fn row_grid(rows: usize) -> (CubeCount, CubeDim) {
    (
        CubeCount::Static(rows.div_ceil(ROWS_PER_CUBE) as u32, 1, 1),
        CubeDim::new_1d((LANES * ROWS_PER_CUBE) as u32),
    )
}

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each pass below as one operation.
impl RmsNormOps for CubeBackend {
    fn rms_norm(x: CubeTensor, gamma: CubeTensor, eps: f32) -> CubeTensor {
        if !fits(&[&x, &gamma]) {
            return forward_by_ops::<CubeBackend>(x, gamma, eps);
        }
        // A storage-tiled tensor (laid out for a matrix product) is read as rows only after
        // un-tiling; any other is read where it lies.
        let (x, gamma) = (untile(x), untile(gamma));
        let out = empty_like(&x, x.meta.shape().clone());
        let [rows, width] = out.meta.shape().dims::<2>();
        if rows * width == 0 {
            return out;
        }
        let (count, dim) = row_grid(rows);
        forward_kernel::launch(
            &out.client.clone(),
            count,
            dim,
            x.into_tensor_arg(),
            gamma.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            eps,
            LANES,
            ROWS_PER_CUBE,
        );
        out
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
        let (count, dim) = row_grid(rows);
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
            LANES,
            ROWS_PER_CUBE,
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
}
