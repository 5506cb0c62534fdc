//! SLiCE's recurrence, `y_t = (I + A_t) y_{t−1} + c_t` with block-diagonal (or diagonal)
//! transitions, as one differentiable operation with a backward pass of its own, for cubecl's
//! devices (`cuda`, `cube-cpu`).
//!
//! The chunked scan of `slice.rs` composes each chunk's affine maps in log₂(chunk) levels of
//! tensor operations (windows, products of the blocks, concatenations), and autodiff records
//! every one of them: at d512 six layers of levels over `[batch, seq, d · b]` tensors, each
//! written through device memory forward and several times backward. On the H200
//! (2026-12-04, docs/gpu.md) diagonal SLiCE's backward pass took 108.8 ms against PyTorch's
//! 43.4 at d512, where its forward pass was as fast as PyTorch's. Here a kernel gives each
//! block of each sequence a unit (`cube.rs` beside this file) that keeps the block's `b` values
//! of the state and walks the steps in order, and the backward pass is the same walk
//! backwards, with `M_t = I + A_t`:
//!
//! ```text
//! g_t      = dy_t + M_{t+1}ᵀ g_{t+1}            (g_T = dy_T)
//! dc_t     = g_t
//! dA_t     = g_t y_{t−1}ᵀ                        (y_0 the start state)
//! dy_0     = M_1ᵀ g_1
//! ```
//!
//! (steps counted from 1 here, from 0 in the code; block by block). The operation keeps `A`,
//! the start and its own output for the backward pass, one `[batch, seq, d]` tensor more than
//! the transitions it already needed, and adds the identity itself, so `I + A` is never written.
//!
//! The environment variable `CWM_SLICE_SCAN` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --slice-scan` for one run):
//!
//! | value | SLiCE's recurrence on cubecl's devices (both block sizes) |
//! |---|---|
//! | unset, empty or `kernel` | this operation: a unit per block walks the steps |
//! | `chunked` | the chunked scan of tensor operations (what the CPU runs) |
//!
//! Both compute the same recurrence and differ by rounding only (the order of the sums). The
//! CPU (`flex`) always runs the chunked scan, whatever the setting, and so do tensors other
//! than `f32` and blocks wider than [`MAX_BLOCK`]. On the CPU the operation's own bodies are
//! the plain loop of tensor operations ([`forward_by_ops`], [`backward_by_ops`]): what its
//! tests hold the kernels to.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend, Dispatch, Shape, TensorMetadata, backend_extension};
use burn::prelude::*;
use burn::tensor::DType;

use crate::env_setting::ProcessSetting;
use crate::split::window;

/// The environment variable [`SLICE_SCAN`] is read from.
pub const SLICE_SCAN_VAR: &str = "CWM_SLICE_SCAN";

/// The process's setting (the module docs).
pub static SLICE_SCAN: ProcessSetting<SliceScan> = ProcessSetting::new(SLICE_SCAN_VAR);

/// The widest block the kernels take: each unit keeps four vectors of a block in registers
/// and unrolls its `b × b` products (the models' blocks are 1 and 8).
pub const MAX_BLOCK: usize = 16;

/// How cubecl's devices run SLiCE's recurrence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SliceScan {
    /// This module's operation: a unit per block walks the steps.
    #[default]
    Kernel,
    /// The chunked scan of tensor operations.
    Chunked,
}

crate::env_setting::setting_names!(SliceScan {
    Kernel => "kernel",
    Chunked => "chunked",
});

/// Whether SLiCE's chunked scan of `c` (`[batch, seq, d]`) with blocks of `block` is
/// [`slice_scan`] instead: on cubecl's devices, for `f32` tensors and blocks of at most
/// [`MAX_BLOCK`], unless the setting is `chunked`.
pub fn by_kernel(c: &Tensor<3>, block: usize) -> bool {
    SLICE_SCAN.chosen().unwrap_or_default() == SliceScan::Kernel
        && (1..=MAX_BLOCK).contains(&block)
        && c.dtype() == DType::F32
        && c.device() != Device::flex()
}

/// `y_t = (I + A_t) y_{t−1} + c_t` for every step, from `y0`, block by block: the outputs
/// `y_1..y_T` (the module docs). Block `k`'s `A_t` is `a[.., t, k·b² .. (k+1)·b²]`, row-major
/// (the projection's layout).
///
/// # Shapes
/// - `a`: `[batch, seq, d · block]`
/// - `c`: `[batch, seq, d]`
/// - `y0`: `[batch, d]`
/// - output: `[batch, seq, d]`
///
/// # Panics
/// Where the shapes disagree or `block` does not divide `d`: the cell that calls it makes all
/// three from one input.
pub fn slice_scan(a: Tensor<3>, c: Tensor<3>, y0: Tensor<2>, block: usize) -> Tensor<3> {
    let ([batch, seq, d], [a_batch, a_seq, a_width]) = (c.dims(), a.dims());
    assert!(
        block > 0
            && d % block == 0
            && [a_batch, a_seq, a_width] == [batch, seq, d * block]
            && y0.dims() == [batch, d],
        "a SLiCE scan of blocks of {block} with transitions {:?}, offsets {:?} and start {:?}",
        a.dims(),
        c.dims(),
        y0.dims()
    );
    if seq == 0 {
        return c;
    }
    Tensor::from_dispatch(<Dispatch as SliceScanOps>::slice_scan(
        a.into_dispatch(),
        c.into_dispatch(),
        y0.into_dispatch(),
        block,
    ))
}

/// Step `t` of `x` (`[batch, seq, w]`) as `[batch, w]`.
fn step<B: Backend>(x: FloatTensor<B>, t: usize) -> FloatTensor<B> {
    let [batch, _, w] = x.shape().dims();
    B::float_reshape(window::<B>(x, 1, &(t..t + 1)), Shape::new([batch, w]))
}

/// `x` (`[batch, n · rows · cols]`) as `[batch, n, rows, cols]`.
fn blocks<B: Backend>(x: FloatTensor<B>, rows: usize, cols: usize) -> FloatTensor<B> {
    let [batch, w] = x.shape().dims();
    B::float_reshape(x, Shape::new([batch, w / (rows * cols), rows, cols]))
}

/// `[batch, n, rows, cols]` as `[batch, n · rows · cols]`.
fn flat<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let [batch, n, rows, cols] = x.shape().dims();
    B::float_reshape(x, Shape::new([batch, n * rows * cols]))
}

/// `[batch, w]` tensors as the steps of `[batch, steps.len(), w]`.
fn stacked<B: Backend>(steps: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let rows = steps
        .into_iter()
        .map(|s| {
            let [batch, w] = s.shape().dims();
            B::float_reshape(s, Shape::new([batch, 1, w]))
        })
        .collect();
    B::float_cat(rows, 1)
}

/// The recurrence one step at a time by tensor operations: `y ← A_t y + y + c_t`.
pub(crate) fn forward_by_ops<B: Backend>(
    a: FloatTensor<B>,
    c: FloatTensor<B>,
    y0: FloatTensor<B>,
    block: usize,
) -> FloatTensor<B> {
    let [_, seq, _] = c.shape().dims();
    let mut y = y0;
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let a_y = B::float_matmul(
            blocks::<B>(step::<B>(a.clone(), t), block, block),
            blocks::<B>(y.clone(), block, 1),
        );
        y = B::float_add(B::float_add(flat::<B>(a_y), y), step::<B>(c.clone(), t));
        outputs.push(y.clone());
    }
    stacked::<B>(outputs)
}

/// The gradients of `a`, `c` and `y0` from the output's, `grad`, one step at a time backwards
/// by tensor operations (the module docs); `out` is the forward pass's output.
pub(crate) fn backward_by_ops<B: Backend>(
    a: FloatTensor<B>,
    y0: FloatTensor<B>,
    out: FloatTensor<B>,
    grad: FloatTensor<B>,
    block: usize,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let [batch, seq, d] = grad.shape().dims();
    let mut carry = B::float_zeros(Shape::new([batch, d]), &grad.device(), grad.dtype().into());
    let (mut da, mut dc) = (Vec::with_capacity(seq), Vec::with_capacity(seq));
    for t in (0..seq).rev() {
        let g = B::float_add(step::<B>(grad.clone(), t), carry);
        let previous = match t {
            0 => y0.clone(),
            _ => step::<B>(out.clone(), t - 1),
        };
        let g_blocks = blocks::<B>(g.clone(), block, 1);
        let outer = B::float_matmul(g_blocks.clone(), blocks::<B>(previous, 1, block));
        da.push(flat::<B>(outer));
        let a_t = blocks::<B>(step::<B>(a.clone(), t), block, block);
        let back = B::float_matmul(B::float_swap_dims(a_t, 2, 3), g_blocks);
        carry = B::float_add(flat::<B>(back), g.clone());
        dc.push(g);
    }
    da.reverse();
    dc.reverse();
    (stacked::<B>(da), stacked::<B>(dc), carry)
}

/// The recurrence as backend operations: the plain loop on the CPU (the default bodies), the
/// kernels of `cube.rs` on cubecl's devices, where fusion records each as one operation; the
/// autodiff decorator's pairs the two.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait SliceScanOps: Backend {
    /// [`slice_scan`] of at least one step.
    #[fusion(meta = |_a, c, _y0, _block| c.clone())]
    fn slice_scan(
        a: FloatTensor<Self>,
        c: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        block: usize,
    ) -> FloatTensor<Self> {
        forward_by_ops::<Self>(a, c, y0, block)
    }

    /// The gradients of `a`, `c` and `y0` from the output's, `grad`; `out` is the output.
    ///
    /// # Shapes
    /// - `a`: `[batch, seq, d · block]`; `out`, `grad`: `[batch, seq, d]`; `y0`: `[batch, d]`
    /// - output: the shapes of `a`, `out` and `y0`
    #[fusion(meta = |a, y0, out, _grad, _block| (a.clone(), out.clone(), y0.clone()))]
    fn slice_scan_backward(
        a: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        out: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        block: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        backward_by_ops::<Self>(a, y0, out, grad, block)
    }
}

impl SliceScanOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// The backward pass of [`slice_scan`], for the transitions, the offsets and the start.
#[derive(Debug)]
struct ScanBackward;

impl<B: Backend + SliceScanOps> Backward<B, 3> for ScanBackward {
    /// The transitions, the start, the output and the block size.
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, usize);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [a_node, c_node, y0_node] = ops.parents;
        if a_node.is_none() && c_node.is_none() && y0_node.is_none() {
            return;
        }
        let (a, y0, out, block) = ops.state;
        let (grad_a, grad_c, grad_y0) = B::slice_scan_backward(a, y0, out, grad, block);
        for (node, grad) in [(a_node, grad_a), (c_node, grad_c), (y0_node, grad_y0)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend + SliceScanOps, C: CheckpointStrategy> SliceScanOps for Autodiff<B, C> {
    fn slice_scan(
        a: FloatTensor<Self>,
        c: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        block: usize,
    ) -> FloatTensor<Self> {
        let nodes = [a.node(), c.node(), y0.node()];
        let (a, c, y0) = (a.into_primitive(), c.into_primitive(), y0.into_primitive());
        match ScanBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = B::slice_scan(a.clone(), c, y0.clone(), block);
                prep.finish((a, y0, out.clone(), block), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::slice_scan(a, c, y0, block)),
        }
    }

    fn slice_scan_backward(
        a: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        out: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        block: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (grad_a, grad_c, grad_y0) = B::slice_scan_backward(
            a.into_primitive(),
            y0.into_primitive(),
            out.into_primitive(),
            grad.into_primitive(),
            block,
        );
        (
            <Self as AutodiffBackend>::from_inner(grad_a),
            <Self as AutodiffBackend>::from_inner(grad_c),
            <Self as AutodiffBackend>::from_inner(grad_y0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal_conv::tests::values;
    use burn::tensor::Distribution;

    /// The recurrence step by step under autodiff, as `slice.rs`'s sequential scan runs it:
    /// `y ← (I + A_t) y + c_t`, block by block.
    fn by_steps(a: Tensor<3>, c: Tensor<3>, y0: Tensor<2>, block: usize) -> Tensor<3> {
        let [batch, seq, d] = c.dims();
        let n = d / block;
        let eye: Tensor<4> = Tensor::<2>::eye(block, &c.device()).reshape([1, 1, block, block]);
        let mut y = y0;
        let mut outputs = Vec::with_capacity(seq);
        for t in 0..seq {
            let at = |x: &Tensor<3>, w: usize| -> Tensor<2> {
                x.clone().narrow(1, t, 1).reshape([batch, w])
            };
            let m: Tensor<4> = at(&a, d * block).reshape([batch, n, block, block]) + eye.clone();
            let m_y: Tensor<4> = m.matmul(y.reshape([batch, n, block, 1]));
            y = m_y.reshape([batch, d]) + at(&c, d);
            outputs.push(y.clone());
        }
        Tensor::stack(outputs, 1)
    }

    type Scan<'a> = &'a dyn Fn(Tensor<3>, Tensor<3>, Tensor<2>, usize) -> Tensor<3>;

    /// The output, and the gradients of `a`, `c` and the start's `[d]` vector (broadcast over
    /// the batch, as the cell's learned start is) under `sum(out ∘ r)`.
    fn run(
        scan: Scan<'_>,
        inputs: [&Tensor<3>; 3],
        init: &Tensor<1>,
        block: usize,
    ) -> [Vec<f32>; 4] {
        let [a, c, r] = inputs;
        let tracked = |t: &Tensor<3>| t.clone().detach().require_grad();
        let (a, c) = (tracked(a), tracked(c));
        let init = init.clone().detach().require_grad();
        let [batch, _, d] = c.dims();
        let y0 = init.clone().reshape([1, d]).expand([batch, d]);
        let out = scan(a.clone(), c.clone(), y0, block);
        let grads = (out.clone() * r.clone()).sum().backward();
        [
            values(out.inner()),
            values(a.grad(&grads).expect("a tracked")),
            values(c.grad(&grads).expect("c tracked")),
            values(init.grad(&grads).expect("init tracked")),
        ]
    }

    /// Transitions' `A` as the cell draws its projection (std 0.1/√b), offsets, the output's
    /// weights and a start, for `[batch, seq, d]` and blocks of `block`.
    fn inputs(shape: [usize; 3], block: usize, device: &Device) -> ([Tensor<3>; 3], Tensor<1>) {
        let [batch, seq, d] = shape;
        let normal = Distribution::Normal(0.0, 1.0);
        let std = 0.1 / (block as f64).sqrt();
        let a = Tensor::<3>::random(
            [batch, seq, d * block],
            Distribution::Normal(0.0, std),
            device,
        );
        let c = Tensor::<3>::random(shape, normal, device);
        let r = Tensor::<3>::random(shape, normal, device);
        ([a, c, r], Tensor::<1>::random([d], normal, device))
    }

    const WHAT: [&str; 4] = ["output", "da", "dc", "d init"];

    /// `[batch, seq, d]` and block sizes the tests take: one step, a few, more than a chunk's;
    /// diagonal, the models' 8 and one in between.
    const CASES: [([usize; 3], usize); 6] = [
        ([2, 1, 3], 1),
        ([3, 7, 5], 1),
        ([2, 70, 4], 1),
        ([2, 1, 8], 8),
        ([3, 9, 16], 4),
        ([2, 70, 24], 8),
    ];

    /// The operation's own bodies (the CPU's loop of tensor operations under its backward pass)
    /// against the recurrence under autodiff: outputs and gradients to rounding, and the same
    /// forward pass without autodiff.
    #[test]
    fn the_operation_is_the_recurrence_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(37);
        for (shape, block) in CASES {
            let ([a, c, r], init) = inputs(shape, block, &device);
            let want = run(&by_steps, [&a, &c, &r], &init, block);
            let got = run(&slice_scan, [&a, &c, &r], &init, block);
            for i in 0..4 {
                assert_near(
                    &got[i],
                    &want[i],
                    &format!("{shape:?} by {block}: {}", WHAT[i]),
                );
            }
            let [batch, _, d] = shape;
            let y0 = init.clone().inner().reshape([1, d]).expand([batch, d]);
            let plain = slice_scan(a.clone().inner(), c.clone().inner(), y0, block);
            assert_eq!(
                values(plain),
                got[0],
                "{shape:?} by {block}: without autodiff"
            );
        }
    }

    /// No steps: the offsets' empty tensor back, without a backend operation.
    #[test]
    fn no_steps_give_no_outputs() {
        let device = Device::flex();
        let empty = Tensor::<3>::zeros([2, 0, 3], &device);
        let out = slice_scan(empty.clone(), empty, Tensor::zeros([2, 3], &device), 1);
        assert_eq!(out.dims(), [2, 0, 3]);
    }

    /// The CPU never takes the operation, whatever the setting.
    #[test]
    fn the_cpu_keeps_the_chunked_scan() {
        let c = Tensor::<3>::zeros([1, 2, 8], &Device::flex());
        assert!(!by_kernel(&c, 1) && !by_kernel(&c, 8));
    }

    #[test]
    fn the_variable_names_kernel_or_chunked() {
        assert_eq!(SliceScan::default(), SliceScan::Kernel);
        crate::env_setting::assert_reads_its_names(
            &SLICE_SCAN,
            NAMES,
            &["kernels", "sequential", "1"],
        );
    }

    /// `got` within `10⁻⁵ · max(1, max |want|)` of `want`, element by element: for sums whose
    /// terms are added in another order (products of blocks, fused multiply-adds).
    fn assert_near(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(1.0f32, |m, w| m.max(w.abs()));
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * scale,
                "{what}[{i}]: {g} against {w} (scale {scale})"
            );
        }
    }

    /// The kernels on cubecl's CPU runtime against the CPU's loop: through autodiff, the output
    /// and the three gradients, for every case of [`CASES`] and rows of many blocks
    /// (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release -p cwm-models --features
    /// cube-cpu --lib slice_scan`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_loop_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(41);
        let wide = [([2, 70, 300], 1), ([2, 70, 96], 8)];
        for (shape, block) in CASES.into_iter().chain(wide) {
            let ([a, c, r], init) = inputs(shape, block, &cpu);
            let on = |device: &Device| {
                let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), device);
                let init = Tensor::<1>::from_data(init.to_data(), device);
                run(
                    &slice_scan,
                    [&moved(&a), &moved(&c), &moved(&r)],
                    &init,
                    block,
                )
            };
            let (want, got) = (on(&cpu), on(&cube));
            for i in 0..4 {
                assert_near(
                    &got[i],
                    &want[i],
                    &format!("{shape:?} by {block}: {}", WHAT[i]),
                );
            }
        }
    }

    /// Both SLiCE cells on cube-cpu, where their chunked scan is this operation, against the
    /// same cells' step-by-step scan on the CPU: the output and the gradients of the input, the
    /// start and both projections, over more steps than a GPU's chunk.
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_cells_take_the_kernels_on_cube_cpu() {
        use crate::{Scan, SliceCell};
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(43);
        let (batch, seq, d) = (2, 70, 16);
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<3>::random([batch, seq, d], normal, &cpu);
        let r = Tensor::<3>::random([batch, seq, d], normal, &cpu);
        for block in [1, 8] {
            assert!(
                by_kernel(&x.clone().to_device(&cube), block),
                "cube-cpu takes it"
            );
            let cell = SliceCell::init(d, block, Scan::Sequential, 1, &cpu);
            let run = |cell: SliceCell, device: &Device| -> [Vec<f32>; 5] {
                let cell = cell.fork(device); // the parameters leaves of their own there
                let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), device);
                let x = moved(&x).require_grad();
                let out = cell.forward(x.clone());
                let grads = (out.clone() * moved(&r)).sum().backward();
                let weight = |p: &Tensor<2>| values(p.grad(&grads).expect("weight tracked"));
                [
                    values(out.inner()),
                    values(x.grad(&grads).expect("x tracked")),
                    values(cell.init.val().grad(&grads).expect("init tracked")),
                    weight(&cell.vf_a.weight.val()),
                    weight(&cell.vf_b.weight.val()),
                ]
            };
            let want = run(cell.clone(), &cpu);
            let got = run(cell.with_scan(Scan::Chunked, 64), &cube);
            for (i, what) in ["output", "dx", "d init", "d vf_A", "d vf_B"]
                .iter()
                .enumerate()
            {
                assert_near(&got[i], &want[i], &format!("block {block}: {what}"));
            }
        }
    }
}
