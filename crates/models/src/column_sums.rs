//! Sums over the rows of a tall matrix (a bias's gradient: `[batch · seq, columns]` to
//! `[columns]`) in two stages on cubecl's devices (`cuda`, `cube-cpu`), so that one build can
//! time them against one reduction on a GPU.
//!
//! A bias added to every row of a `[rows, columns]` output gets as gradient the sum of the
//! output's gradient over its rows: a reduction along the axis that is not contiguous, with one
//! result per column. cubek's reductions give each result (or each vector of 2 or 4 results)
//! one unit, one plane or one cube: with the paper's 32,768 rows and a few hundred to a few
//! thousand columns that is a few hundred units reading 32,768 rows each, or planes whose lanes
//! read 8 or 16 bytes from different rows (the head's 1,878 columns, every family's; the
//! transformer's four biased projections a layer, of `d` to `8d`). An H200's tuning results
//! (2026-11-27) hold a reduction of that kind whose fastest kernel took 6.7 times its tuning
//! limit (docs/gpu-speed.md, "Levers ready to time on a GPU"). In two stages the
//! rows are cut into blocks of up to [`MAX_BLOCK_ROWS`]: first the sum over the blocks
//! (`[rows / i, i, columns]` → `[i, columns]`, `i` times as many results, each a short run of
//! neighbouring columns' reads), then over the `i` rows that are left (a small tensor).
//!
//! The environment variable `CWM_COLUMN_SUMS` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --column-sums` for one run):
//!
//! | value | sums |
//! |---|---|
//! | unset, empty or `blocks` | in two stages where the rows divide into blocks ([`block_rows`]) |
//! | `single` | one reduction over all rows (burn's own) |
//!
//! Both add the same numbers, in another order: they differ by rounding only. The CPU (`flex`)
//! always takes one reduction, whatever the setting.

use burn::prelude::*;

use crate::env_setting::ProcessSetting;

/// The environment variable [`COLUMN_SUMS`] is read from.
pub const COLUMN_SUMS_VAR: &str = "CWM_COLUMN_SUMS";

/// The process's setting (the module docs).
pub static COLUMN_SUMS: ProcessSetting<ColumnSums> = ProcessSetting::new(COLUMN_SUMS_VAR);

/// The most rows a block of the first stage holds: the second stage's length.
pub const MAX_BLOCK_ROWS: usize = 128;

/// The fewest rows a block, and the fewest blocks, for which two stages are taken.
const MIN_BLOCK_ROWS: usize = 16;

/// How cubecl's devices sum a tall matrix over its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColumnSums {
    /// In two stages, over blocks of rows then over the rows of a block.
    #[default]
    Blocks,
    /// One reduction over all rows.
    Single,
}

crate::env_setting::setting_names!(ColumnSums {
    Blocks => "blocks",
    Single => "single",
});

/// The rows of a block when `rows` are summed in two stages: the largest power of two that
/// divides `rows`, is at most [`MAX_BLOCK_ROWS`] and leaves at least 16 blocks, if it is at
/// least 16; otherwise `None` (one reduction).
pub fn block_rows(rows: usize) -> Option<usize> {
    let mut block = 1usize << rows.trailing_zeros().min(MAX_BLOCK_ROWS.trailing_zeros());
    while block >= MIN_BLOCK_ROWS && rows / block < MIN_BLOCK_ROWS {
        block /= 2;
    }
    (block >= MIN_BLOCK_ROWS).then_some(block)
}

/// The block size [`sum_rows`] and [`add_row`] take for `rows` rows on `device`: none on the
/// CPU or with the setting `single`.
fn blocks_on(device: &Device, rows: usize) -> Option<usize> {
    let blocks = COLUMN_SUMS.chosen().unwrap_or_default() == ColumnSums::Blocks;
    (blocks && *device != Device::flex())
        .then(|| block_rows(rows))
        .flatten()
}

/// The sum of `t` over its rows, `[rows, columns]` → `[columns]`: in two stages on cubecl's
/// devices where [`block_rows`] allows (the module docs).
pub fn sum_rows(t: Tensor<2>) -> Tensor<1> {
    let [rows, columns] = t.dims();
    match blocks_on(&t.device(), rows) {
        Some(block) => sum_rows_in_blocks(t, block),
        None => t.sum_dim(0).reshape([columns]),
    }
}

/// `t`'s sum over its rows in two stages, blocks of `block` rows (`block` divides the rows).
fn sum_rows_in_blocks(t: Tensor<2>, block: usize) -> Tensor<1> {
    let [rows, columns] = t.dims();
    t.reshape([rows / block, block, columns])
        .sum_dim(0)
        .reshape([block, columns])
        .sum_dim(0)
        .reshape([columns])
}

/// `y + row` with `row` added to every row of `y` (`[rows, columns]`, `[columns]`): the same
/// values, and on cubecl's devices where [`block_rows`] allows, `row`'s gradient summed over
/// the rows in two stages. (Added as a `[1, block, columns]` tensor, `row` expanded, to `y`
/// seen as `[rows / block, block, columns]`: autodiff sums the gradient over the blocks for
/// the addition, then over the block's rows for the expansion.)
pub fn add_row(y: Tensor<2>, row: Tensor<1>) -> Tensor<2> {
    let [rows, columns] = y.dims();
    match blocks_on(&y.device(), rows) {
        Some(block) => add_row_in_blocks(y, row, block),
        None => y + row.reshape([1, columns]),
    }
}

/// [`add_row`] by blocks of `block` rows (`block` divides the rows).
fn add_row_in_blocks(y: Tensor<2>, row: Tensor<1>, block: usize) -> Tensor<2> {
    let [rows, columns] = y.dims();
    let row = row.reshape([1, 1, columns]).expand([1, block, columns]);
    (y.reshape([rows / block, block, columns]) + row).reshape([rows, columns])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_blocks_or_single() {
        assert_eq!(ColumnSums::default(), ColumnSums::Blocks);
        crate::env_setting::assert_reads_its_names(&COLUMN_SUMS, NAMES, &["halves"]);
    }

    /// The paper's 128 × 256 rows take blocks of 128; fewer rows, smaller blocks, so that 16
    /// blocks are left; rows that no power of two from 16 divides so take one reduction.
    #[test]
    fn blocks_are_the_largest_power_of_two_that_divides_the_rows() {
        assert_eq!(block_rows(128 * 256), Some(128));
        assert_eq!(block_rows(32 * 128), Some(128));
        assert_eq!(block_rows(128 * 255), Some(128));
        assert_eq!(block_rows(16 * 128), Some(128));
        assert_eq!(block_rows(15 * 128), Some(64), "15 blocks of 128");
        assert_eq!(block_rows(48 * 16), Some(32), "3 × 256 rows");
        assert_eq!(block_rows(16 * 16), Some(16));
        assert_eq!(block_rows(15 * 16), None, "15 blocks of 16");
        assert_eq!(block_rows(8 * 375), None, "blocks of 8 rows");
        assert_eq!(block_rows(0), None);
        assert_eq!(block_rows(1), None);
    }

    /// A `[rows, columns]` tensor of pseudo-random values in (−1, 1).
    fn matrix(rows: usize, columns: usize, device: &Device) -> Tensor<2> {
        let values = (0..rows * columns)
            .map(|n| ((n * 7919 + 13) % 2000) as f32 / 1000.0 - 1.0)
            .collect::<Vec<_>>();
        Tensor::from_data(TensorData::new(values, [rows, columns]), device)
    }

    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// Each element of `got` within `tol` of `want`'s.
    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol, "{what}[{i}]: {g} against {w}");
        }
    }

    /// In two stages the sums are one reduction's, to rounding, at block sizes from 16 to 128
    /// rows of a `[512, 7]` matrix.
    #[test]
    fn the_sums_in_blocks_are_one_reductions() {
        let device = Device::flex();
        let t = matrix(512, 7, &device);
        let want = values(t.clone().sum_dim(0));
        for block in [16, 32, 128] {
            let got = values(sum_rows_in_blocks(t.clone(), block));
            assert_close(&got, &want, 1e-4, &format!("blocks of {block}"));
        }
        assert_eq!(values(sum_rows(t)), want, "the CPU takes one reduction");
    }

    /// The addition by blocks gives `y + row` to the bit, `y`'s gradient to the bit, and the
    /// row's gradient equal to one reduction's to rounding.
    #[test]
    fn the_row_added_by_blocks_is_the_broadcast_addition_in_value_and_gradients() {
        let device = Device::flex().autodiff();
        let (rows, columns) = (1024, 5);
        let weights = matrix(rows, columns, &device);
        let run = |add: &dyn Fn(Tensor<2>, Tensor<1>) -> Tensor<2>| {
            let y = matrix(rows, columns, &device)
                .mul_scalar(0.5)
                .require_grad();
            let row = matrix(1, columns, &device)
                .reshape([columns])
                .require_grad();
            let out = add(y.clone(), row.clone());
            let grads = (out.clone() * weights.clone()).sum().backward();
            let grad_y = y.grad(&grads).expect("y tracked");
            let grad_row = row.grad(&grads).expect("row tracked");
            (values(out.inner()), values(grad_y), values(grad_row))
        };
        let (out, grad_y, grad_row) = run(&|y, row| add_row_in_blocks(y, row, 128));
        let (want_out, want_y, want_row) = run(&|y, row| y + row.reshape([1, columns]));
        assert_eq!(out, want_out, "values");
        assert_eq!(grad_y, want_y, "y's gradient");
        assert_close(&grad_row, &want_row, 1e-3, "the row's gradient");
        let (cpu_out, _, cpu_row) = run(&|y, row| add_row(y, row));
        assert_eq!((cpu_out, cpu_row), (want_out, want_row), "the CPU's path");
    }

    /// On `cube-cpu`, cubecl's backend with fusion as on a GPU, [`add_row`] and [`sum_rows`]
    /// take two stages (the default setting) and give the CPU's one reduction to rounding, in
    /// value and in the row's and `y`'s gradients (`CARGO_TARGET_DIR=target/cube-cpu cargo test
    /// --release -p cwm-models --features cube-cpu --lib column_sums`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn on_cube_cpu_the_two_stages_are_the_cpus_one_reduction() {
        let cube = crate::device_by_name("cube-cpu").unwrap();
        assert_eq!(COLUMN_SUMS.chosen(), Some(ColumnSums::Blocks));
        let (rows, columns) = (2048, 6);
        assert_eq!(blocks_on(&cube, rows), Some(MAX_BLOCK_ROWS));
        let on = |device: &Device| {
            let y = matrix(rows, columns, device).require_grad();
            let row = matrix(1, columns, device).reshape([columns]).require_grad();
            let out = add_row(y.clone(), row.clone());
            let weights = matrix(rows, columns, device).mul_scalar(0.25);
            let grads = (out.clone() * weights.clone()).sum().backward();
            let grad = |t: Tensor<2>| values(t.grad(&grads).expect("tracked"));
            let grad_row = values(row.grad(&grads).expect("tracked"));
            let sums = values(sum_rows(weights.inner()));
            [values(out.inner()), grad(y), grad_row, sums]
        };
        let got = on(&cube.autodiff());
        let want = on(&Device::flex().autodiff());
        let names = [
            "values",
            "y's gradient",
            "the row's gradient",
            "the column sums",
        ];
        for ((got, want), name) in got.iter().zip(&want).zip(names) {
            assert_close(got, want, 1e-3, name);
        }
    }
}
