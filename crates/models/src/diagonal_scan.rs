//! Diagonal SLiCE's recurrence, `y_t = m_t ⊙ y_{t−1} + c_t` channel by channel, as one
//! differentiable operation with a backward pass of its own, for cubecl's devices (`cuda`,
//! `cube-cpu`).
//!
//! The chunked scan of `slice.rs` composes each chunk's affine maps in log₂(chunk) levels of
//! tensor operations (windows, products, concatenations), and autodiff records every one of
//! them: at d512 six layers of levels over `[batch, seq, d]` tensors, each written through
//! device memory forward and several times backward. On the H200 (2026-12-04, docs/gpu.md)
//! the diagonal family's backward pass took 108.8 ms against PyTorch's 43.4 at d512, where its
//! forward pass was as fast as PyTorch's. Here a kernel gives each channel of each sequence a
//! unit that walks the steps in order (`cube.rs` beside this file), and the backward pass is
//! the same walk backwards:
//!
//! ```text
//! g_t      = dy_t + m_{t+1} ⊙ g_{t+1}          (g_T = dy_T)
//! dc_t     = g_t
//! dm_t     = g_t ⊙ y_{t−1}                      (y_0 the start state)
//! dy_0     = m_1 ⊙ g_1
//! ```
//!
//! (steps counted from 1 here, from 0 in the code). The operation keeps `m`, the start state
//! and its own output for the backward pass, one `[batch, seq, d]` tensor more than the
//! transitions it already needed.
//!
//! The environment variable `CWM_DIAGONAL_SCAN` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --diagonal-scan` for one run):
//!
//! | value | diagonal SLiCE's recurrence on cubecl's devices |
//! |---|---|
//! | unset, empty or `kernel` | this operation: a unit per channel walks the steps |
//! | `chunked` | the chunked scan of tensor operations (what the CPU runs) |
//!
//! Both compute the same recurrence and differ by rounding only (the order of the products).
//! The CPU (`flex`) always runs the chunked scan, whatever the setting, and so do tensors other
//! than `f32`. On the CPU the operation's own bodies are the plain loop of tensor operations
//! ([`forward_by_ops`], [`backward_by_ops`]): what its tests hold the kernels to.

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

/// The environment variable [`DIAGONAL_SCAN`] is read from.
pub const DIAGONAL_SCAN_VAR: &str = "CWM_DIAGONAL_SCAN";

/// The process's setting (the module docs).
pub static DIAGONAL_SCAN: ProcessSetting<DiagonalScan> = ProcessSetting::new(DIAGONAL_SCAN_VAR);

/// How cubecl's devices run diagonal SLiCE's recurrence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiagonalScan {
    /// This module's operation: a unit per channel walks the steps.
    #[default]
    Kernel,
    /// The chunked scan of tensor operations.
    Chunked,
}

crate::env_setting::setting_names!(DiagonalScan {
    Kernel => "kernel",
    Chunked => "chunked",
});

/// Whether diagonal SLiCE's chunked scan of `c` (`[batch, seq, d]`) is [`diagonal_scan`]
/// instead: on cubecl's devices, for `f32` tensors, unless the setting is `chunked`.
pub fn by_kernel(c: &Tensor<3>) -> bool {
    DIAGONAL_SCAN.chosen().unwrap_or_default() == DiagonalScan::Kernel
        && c.dtype() == DType::F32
        && c.device() != Device::flex()
}

/// `y_t = m_t ⊙ y_{t−1} + c_t` for every step, from `y0`: the outputs `y_1..y_T` (the module
/// docs).
///
/// # Shapes
/// - `m`, `c`: `[batch, seq, d]`
/// - `y0`: `[batch, d]`
/// - output: `[batch, seq, d]`
///
/// # Panics
/// Where the shapes disagree: the cell that calls it makes all three from one input.
pub fn diagonal_scan(m: Tensor<3>, c: Tensor<3>, y0: Tensor<2>) -> Tensor<3> {
    let ([batch, seq, d], [y_batch, y_d]) = (c.dims(), y0.dims());
    assert!(
        m.dims() == c.dims() && [y_batch, y_d] == [batch, d],
        "a diagonal scan of transitions {:?}, offsets {:?} and start {:?}",
        m.dims(),
        c.dims(),
        y0.dims()
    );
    if seq == 0 {
        return c;
    }
    Tensor::from_dispatch(<Dispatch as DiagonalScanOps>::diagonal_scan(
        m.into_dispatch(),
        c.into_dispatch(),
        y0.into_dispatch(),
    ))
}

/// Step `t` of `x` (`[batch, seq, d]`) as `[batch, d]`.
fn step<B: Backend>(x: FloatTensor<B>, t: usize) -> FloatTensor<B> {
    let [batch, _, d] = x.shape().dims();
    B::float_reshape(window::<B>(x, 1, &(t..t + 1)), Shape::new([batch, d]))
}

/// `[batch, d]` tensors as the steps of `[batch, steps.len(), d]`.
fn stacked<B: Backend>(steps: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let rows = steps
        .into_iter()
        .map(|s| {
            let [batch, d] = s.shape().dims();
            B::float_reshape(s, Shape::new([batch, 1, d]))
        })
        .collect();
    B::float_cat(rows, 1)
}

/// The recurrence one step at a time by tensor operations.
pub(crate) fn forward_by_ops<B: Backend>(
    m: FloatTensor<B>,
    c: FloatTensor<B>,
    y0: FloatTensor<B>,
) -> FloatTensor<B> {
    let [_, seq, _] = c.shape().dims();
    let mut y = y0;
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        y = B::float_add(
            B::float_mul(step::<B>(m.clone(), t), y),
            step::<B>(c.clone(), t),
        );
        outputs.push(y.clone());
    }
    stacked::<B>(outputs)
}

/// The gradients of `m`, `c` and `y0` from the output's, `grad`, one step at a time backwards
/// by tensor operations (the module docs); `out` is the forward pass's output.
pub(crate) fn backward_by_ops<B: Backend>(
    m: FloatTensor<B>,
    y0: FloatTensor<B>,
    out: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let [batch, seq, d] = grad.shape().dims();
    let mut carry = B::float_zeros(Shape::new([batch, d]), &grad.device(), grad.dtype().into());
    let (mut dm, mut dc) = (Vec::with_capacity(seq), Vec::with_capacity(seq));
    for t in (0..seq).rev() {
        let g = B::float_add(step::<B>(grad.clone(), t), carry);
        let previous = match t {
            0 => y0.clone(),
            _ => step::<B>(out.clone(), t - 1),
        };
        dm.push(B::float_mul(g.clone(), previous));
        carry = B::float_mul(step::<B>(m.clone(), t), g.clone());
        dc.push(g);
    }
    dm.reverse();
    dc.reverse();
    (stacked::<B>(dm), stacked::<B>(dc), carry)
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
pub trait DiagonalScanOps: Backend {
    /// [`diagonal_scan`] of at least one step.
    #[fusion(meta = |m, _c, _y0| m.clone())]
    fn diagonal_scan(
        m: FloatTensor<Self>,
        c: FloatTensor<Self>,
        y0: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        forward_by_ops::<Self>(m, c, y0)
    }

    /// The gradients of `m`, `c` and `y0` from the output's, `grad`; `out` is the output.
    ///
    /// # Shapes
    /// - `m`, `out`, `grad`: `[batch, seq, d]`; `y0`: `[batch, d]`
    /// - output: `[batch, seq, d]` twice and `[batch, d]`
    #[fusion(meta = |m, y0, _out, _grad| (m.clone(), m.clone(), y0.clone()))]
    fn diagonal_scan_backward(
        m: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        out: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        backward_by_ops::<Self>(m, y0, out, grad)
    }
}

impl DiagonalScanOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// The backward pass of [`diagonal_scan`], for the transitions, the offsets and the start.
#[derive(Debug)]
struct ScanBackward;

impl<B: Backend + DiagonalScanOps> Backward<B, 3> for ScanBackward {
    /// The transitions, the start and the output.
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [m_node, c_node, y0_node] = ops.parents;
        if m_node.is_none() && c_node.is_none() && y0_node.is_none() {
            return;
        }
        let (m, y0, out) = ops.state;
        let (grad_m, grad_c, grad_y0) = B::diagonal_scan_backward(m, y0, out, grad);
        for (node, grad) in [(m_node, grad_m), (c_node, grad_c), (y0_node, grad_y0)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: Backend + DiagonalScanOps, C: CheckpointStrategy> DiagonalScanOps for Autodiff<B, C> {
    fn diagonal_scan(
        m: FloatTensor<Self>,
        c: FloatTensor<Self>,
        y0: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let nodes = [m.node(), c.node(), y0.node()];
        let (m, c, y0) = (m.into_primitive(), c.into_primitive(), y0.into_primitive());
        match ScanBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = B::diagonal_scan(m.clone(), c, y0.clone());
                prep.finish((m, y0, out.clone()), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::diagonal_scan(m, c, y0)),
        }
    }

    fn diagonal_scan_backward(
        m: FloatTensor<Self>,
        y0: FloatTensor<Self>,
        out: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (grad_m, grad_c, grad_y0) = B::diagonal_scan_backward(
            m.into_primitive(),
            y0.into_primitive(),
            out.into_primitive(),
            grad.into_primitive(),
        );
        (
            <Self as AutodiffBackend>::from_inner(grad_m),
            <Self as AutodiffBackend>::from_inner(grad_c),
            <Self as AutodiffBackend>::from_inner(grad_y0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causal_conv::tests::{assert_close, values};
    use burn::tensor::Distribution;
    use std::ffi::OsStr;

    /// The recurrence step by step under autodiff, as `slice.rs`'s sequential scan runs it.
    fn by_steps(m: Tensor<3>, c: Tensor<3>, y0: Tensor<2>) -> Tensor<3> {
        let [batch, seq, d] = c.dims();
        let mut y = y0;
        let mut outputs = Vec::with_capacity(seq);
        for t in 0..seq {
            let at = |x: &Tensor<3>| -> Tensor<2> { x.clone().narrow(1, t, 1).reshape([batch, d]) };
            y = at(&m) * y + at(&c);
            outputs.push(y.clone());
        }
        Tensor::stack(outputs, 1)
    }

    /// The output, and the gradients of `m`, `c` and the start's `[d]` vector (broadcast over
    /// the batch, as the cell's learned start is) under `sum(out ∘ r)`.
    fn run(
        scan: &dyn Fn(Tensor<3>, Tensor<3>, Tensor<2>) -> Tensor<3>,
        inputs: [&Tensor<3>; 3],
        init: &Tensor<1>,
    ) -> [Vec<f32>; 4] {
        let [m, c, r] = inputs;
        let tracked = |t: &Tensor<3>| t.clone().detach().require_grad();
        let (m, c) = (tracked(m), tracked(c));
        let init = init.clone().detach().require_grad();
        let [batch, _, d] = c.dims();
        let y0 = init.clone().reshape([1, d]).expand([batch, d]);
        let out = scan(m.clone(), c.clone(), y0);
        let grads = (out.clone() * r.clone()).sum().backward();
        [
            values(out.inner()),
            values(m.grad(&grads).expect("m tracked")),
            values(c.grad(&grads).expect("c tracked")),
            values(init.grad(&grads).expect("init tracked")),
        ]
    }

    /// Transitions near 1 (as `1 + A` is), offsets, the output's weights and a start.
    fn inputs(shape: [usize; 3], device: &Device) -> ([Tensor<3>; 3], Tensor<1>) {
        let normal = Distribution::Normal(0.0, 1.0);
        let m = Tensor::<3>::random(shape, Distribution::Normal(1.0, 0.1), device);
        let c = Tensor::<3>::random(shape, normal, device);
        let r = Tensor::<3>::random(shape, normal, device);
        ([m, c, r], Tensor::<1>::random([shape[2]], normal, device))
    }

    const WHAT: [&str; 4] = ["output", "dm", "dc", "d init"];

    /// `got` within `10⁻⁵ · max(1, max |want|)` of `want`, element by element: for sums whose
    /// terms another device adds in another order (its products, fused multiply-adds).
    #[cfg(feature = "cube-cpu")]
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

    /// The operation's own bodies (the CPU's loop of tensor operations under its backward pass)
    /// against the recurrence under autodiff: outputs to the bit, gradients to rounding; for one
    /// step, a few, and more than a chunk's; and the same forward pass without autodiff.
    #[test]
    fn the_operation_is_the_recurrence_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(37);
        for shape in [[2, 1, 3], [3, 7, 5], [2, 70, 4]] {
            let ([m, c, r], init) = inputs(shape, &device);
            let want = run(&by_steps, [&m, &c, &r], &init);
            let got = run(&diagonal_scan, [&m, &c, &r], &init);
            assert_eq!(got[0], want[0], "{shape:?}: output");
            for i in 1..4 {
                assert_close(&got[i], &want[i], &format!("{shape:?}: {}", WHAT[i]));
            }
            let [batch, _, d] = shape;
            let y0 = init.clone().inner().reshape([1, d]).expand([batch, d]);
            let plain = diagonal_scan(m.clone().inner(), c.clone().inner(), y0);
            assert_eq!(values(plain), want[0], "{shape:?}: without autodiff");
        }
    }

    /// No steps: the offsets' empty tensor back, without a backend operation.
    #[test]
    fn no_steps_give_no_outputs() {
        let device = Device::flex();
        let empty = Tensor::<3>::zeros([2, 0, 3], &device);
        let out = diagonal_scan(empty.clone(), empty, Tensor::zeros([2, 3], &device));
        assert_eq!(out.dims(), [2, 0, 3]);
    }

    /// The CPU never takes the operation, whatever the setting.
    #[test]
    fn the_cpu_keeps_the_chunked_scan() {
        let c = Tensor::<3>::zeros([1, 2, 3], &Device::flex());
        assert!(!by_kernel(&c));
    }

    #[test]
    fn the_variable_names_kernel_or_chunked() {
        let parse = |v: Option<&str>| DIAGONAL_SCAN.parse(v.map(OsStr::new));
        assert_eq!(parse(None), Ok(DiagonalScan::Kernel));
        assert_eq!(parse(Some("")), Ok(DiagonalScan::Kernel));
        assert_eq!(parse(Some("Kernel")), Ok(DiagonalScan::Kernel));
        assert_eq!(parse(Some("chunked")), Ok(DiagonalScan::Chunked));
        for bad in ["kernels", "sequential", "1"] {
            let err = parse(Some(bad)).unwrap_err();
            assert!(
                err.starts_with(DIAGONAL_SCAN_VAR) && err.contains(bad),
                "{err}"
            );
        }
        for setting in [DiagonalScan::Kernel, DiagonalScan::Chunked] {
            assert_eq!(parse(Some(&setting.to_string())), Ok(setting));
        }
    }

    /// The kernels on cubecl's CPU runtime against the CPU's loop: through autodiff, the output
    /// and the three gradients, for one step, a few, and rows of many channels
    /// (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release -p cwm-models --features
    /// cube-cpu --lib diagonal_scan`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_loop_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(41);
        for shape in [[2, 1, 3], [3, 9, 37], [2, 70, 300]] {
            let ([m, c, r], init) = inputs(shape, &cpu);
            let on = |device: &Device| {
                let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), device);
                let init = Tensor::<1>::from_data(init.to_data(), device);
                run(&diagonal_scan, [&moved(&m), &moved(&c), &moved(&r)], &init)
            };
            let (want, got) = (on(&cpu), on(&cube));
            for i in 0..4 {
                assert_near(&got[i], &want[i], &format!("{shape:?}: {}", WHAT[i]));
            }
        }
    }

    /// Diagonal SLiCE's cell on cube-cpu, where its chunked scan is this operation, against the
    /// same cell's step-by-step scan on the CPU: the output and the gradients of the input, the
    /// start and both projections, over more steps than a GPU's chunk.
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_diagonal_cell_takes_the_kernels_on_cube_cpu() {
        use crate::{Scan, SliceCell};
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(43);
        let (batch, seq, d) = (2, 70, 16);
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<3>::random([batch, seq, d], normal, &cpu);
        assert!(
            by_kernel(&x.clone().to_device(&cube)),
            "cube-cpu takes the operation"
        );
        let r = Tensor::<3>::random([batch, seq, d], normal, &cpu);
        let cell = SliceCell::init(d, 1, Scan::Sequential, 1, &cpu);
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
            assert_near(&got[i], &want[i], what);
        }
    }
}
