//! The short causal depthwise convolution of the Gated DeltaNet and Mamba-2 mixers as one
//! differentiable operation, with a backward pass of its own.
//!
//! `out_t[c] = Σ_i w[c, 0, i] · x_{t−K+1+i}[c]`: the input padded with `K − 1` zero steps in
//! front, and each tap a product of the weight's column with a window of the padded input.
//! Built from tensor operations under autodiff, each tap's window was a slice of the padded
//! input, whose backward pass builds a zero tensor of the padded shape, writes the window's
//! gradient into it and adds it to the others' (`K` fills, writes and additions over the whole
//! input, and the same for the weight's columns), and the padding's backward pass a slice again.
//!
//! [`causal_conv`] keeps the input and the weight. Its gradients:
//!
//! ```text
//! dx_s[c]       = Σ_i w[c, 0, i] · dout_{s+K−1−i}[c]      (dout zero past the last step)
//! dw[c, 0, i]   = Σ_{b,t} x̃_{t+i}[c] · dout_t[c]           (x̃ the padded input)
//! ```
//!
//! On the CPU both passes are tensor operations ([`forward_by_ops`], [`backward_by_ops`]): the
//! forward pass pads the input and sums the taps' products; the backward pass pads the output's
//! gradient with `K − 1` zero steps behind it, once, and takes `K` windows of that for `dx`, and
//! for tap `i`'s `dw` multiplies the input's first `seq − (K−1−i)` steps with the gradient's
//! last (the padded input's other steps are its zeros). On cubecl's devices (`cube.rs` beside
//! this file) each pass is kernels that read the input and the gradient in place: one launch
//! for the output, one for `dx`, one for `dw` (then a sum over blocks), against `K` products,
//! `K − 1` sums, two paddings and `K` reductions written through device memory.
//!
//! The CPU's forward pass is the tensor operations' (the same products and sums in the same
//! order, without the zero tensor the sum started from), so the outputs are equal to the bit;
//! the gradients add the same terms in another order, so they agree to rounding
//! (`the_operation_is_the_taps_in_value_and_gradients`); the kernels agree with the CPU to
//! rounding (`the_kernels_equal_the_tensor_operations_on_cube_cpu`).

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend, Dispatch, Shape, TensorMetadata, backend_extension};
use burn::prelude::*;

use crate::split::window;

/// `x` convolved causally with `weight`, channel by channel (the module docs).
///
/// # Shapes
/// - `x`: `[batch, seq, channels]`
/// - `weight`: `[channels, 1, kernel]` (PyTorch's `Conv1d(C, C, K, groups = C)`)
/// - output: `[batch, seq, channels]`
///
/// # Panics
/// Where the weight has no taps or its channels are not `x`'s: the layers' shapes are fixed by
/// their configuration.
pub fn causal_conv(x: Tensor<3>, weight: Tensor<3>) -> Tensor<3> {
    let ([.., channels], [weight_channels, _, kernel]) = (x.dims(), weight.dims());
    assert!(
        kernel > 0 && weight_channels == channels,
        "a causal convolution of {channels} channels with a weight of {:?}",
        weight.dims()
    );
    Tensor::from_dispatch(<Dispatch as CausalConvOps>::causal_conv(
        x.into_dispatch(),
        weight.into_dispatch(),
    ))
}

/// `t`'s `len` steps from `start` (dimension 1 of `[batch, seq, channels]`).
fn steps<B: Backend>(t: FloatTensor<B>, start: usize, len: usize) -> FloatTensor<B> {
    window::<B>(t, 1, &(start..start + len))
}

/// Tap `i` of `weight` (`[channels, 1, kernel]`) as `[1, 1, channels]`.
fn tap<B: Backend>(weight: FloatTensor<B>, i: usize) -> FloatTensor<B> {
    let [channels, _, _] = weight.shape().dims();
    B::float_reshape(
        window::<B>(weight, 2, &(i..i + 1)),
        Shape::new([1, 1, channels]),
    )
}

/// `t` (`[batch, seq, channels]`) with `steps` zero steps in front of it, or behind it.
fn padded<B: Backend>(t: FloatTensor<B>, steps: usize, in_front: bool) -> FloatTensor<B> {
    if steps == 0 {
        return t;
    }
    let [batch, _, channels] = t.shape().dims();
    let zeros = B::float_zeros(
        Shape::new([batch, steps, channels]),
        &t.device(),
        t.dtype().into(),
    );
    let parts = if in_front {
        vec![zeros, t]
    } else {
        vec![t, zeros]
    };
    B::float_cat(parts, 1)
}

/// `Σ_i window_i(x̃) · w_i`, `x̃` the padded input: the convolution by tensor operations.
pub(crate) fn forward_by_ops<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
) -> FloatTensor<B> {
    let [_, seq, _] = x.shape().dims();
    let [_, _, kernel] = weight.shape().dims();
    let x_padded = padded::<B>(x, kernel - 1, true);
    let term = |i: usize| {
        B::float_mul(
            steps::<B>(x_padded.clone(), i, seq),
            tap::<B>(weight.clone(), i),
        )
    };
    (1..kernel).fold(term(0), |out, i| B::float_add(out, term(i)))
}

/// The gradients of `x` and of `weight` from the output's, `grad`, by tensor operations (the
/// module docs). Tap `i`'s weight gradient pairs the input's first `seq − s` steps with the
/// gradient's last, `s = K − 1 − i`: the padded input's other steps are its zeros.
pub(crate) fn backward_by_ops<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [batch, seq, channels] = grad.shape().dims();
    let [_, _, kernel] = weight.shape().dims();
    let grad_padded = padded::<B>(grad.clone(), kernel - 1, false);
    let term = |i: usize| {
        B::float_mul(
            steps::<B>(grad_padded.clone(), kernel - 1 - i, seq),
            tap::<B>(weight.clone(), i),
        )
    };
    let grad_x = (1..kernel).fold(term(0), |acc, i| B::float_add(acc, term(i)));
    let tap_shape = Shape::new([channels, 1, 1]);
    let grad_tap = |i: usize| {
        let shift = kernel - 1 - i;
        if shift >= seq {
            return B::float_zeros(tap_shape.clone(), &grad.device(), grad.dtype().into());
        }
        let len = seq - shift;
        let product = B::float_mul(
            steps::<B>(x.clone(), 0, len),
            steps::<B>(grad.clone(), shift, len),
        );
        let rows = B::float_reshape(product, Shape::new([batch * len, channels]));
        B::float_reshape(B::float_sum_dim(rows, 0), tap_shape.clone())
    };
    let grad_weight = B::float_cat((0..kernel).map(grad_tap).collect(), 2);
    (grad_x, grad_weight)
}

/// The convolution as backend operations: by tensor operations on the CPU (the default
/// bodies), by the kernels of `cube.rs` on cubecl's devices, where fusion records each as one
/// operation; the autodiff decorator's pairs the two.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait CausalConvOps: Backend {
    /// [`causal_conv`].
    #[fusion(meta = |x, _weight| x.clone())]
    fn causal_conv(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        forward_by_ops::<Self>(x, weight)
    }

    /// The gradients of `x` and of `weight` from the output's, `grad`.
    ///
    /// # Shapes
    /// - `x`, `grad`: `[batch, seq, channels]`; `weight`: `[channels, 1, kernel]`
    /// - output: `[batch, seq, channels]` and `[channels, 1, kernel]`
    #[fusion(meta = |x, weight, _grad| (x.clone(), weight.clone()))]
    fn causal_conv_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        backward_by_ops::<Self>(x, weight, grad)
    }
}

impl CausalConvOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// The backward pass of [`causal_conv`], for the input and the weight.
#[derive(Debug)]
struct ConvBackward;

impl<B: Backend + CausalConvOps> Backward<B, 2> for ConvBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [x_node, weight_node] = ops.parents;
        if x_node.is_none() && weight_node.is_none() {
            return;
        }
        let (x, weight) = ops.state;
        let (grad_x, grad_weight) = B::causal_conv_backward(x, weight, grad);
        if let Some(node) = x_node {
            grads.register::<B>(node.id, grad_x);
        }
        if let Some(node) = weight_node {
            grads.register::<B>(node.id, grad_weight);
        }
    }
}

impl<B: Backend + CausalConvOps, C: CheckpointStrategy> CausalConvOps for Autodiff<B, C> {
    fn causal_conv(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let nodes = [x.node(), weight.node()];
        let (x, weight) = (x.into_primitive(), weight.into_primitive());
        match ConvBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = B::causal_conv(x.clone(), weight.clone());
                prep.finish((x, weight), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::causal_conv(x, weight)),
        }
    }

    fn causal_conv_backward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (grad_x, grad_weight) = B::causal_conv_backward(
            x.into_primitive(),
            weight.into_primitive(),
            grad.into_primitive(),
        );
        (
            <Self as AutodiffBackend>::from_inner(grad_x),
            <Self as AutodiffBackend>::from_inner(grad_weight),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use burn::tensor::Distribution;

    /// The taps by tensor operations under autodiff, as `CausalConv1d` computed them before.
    fn by_operations(x: Tensor<3>, weight: Tensor<3>) -> Tensor<3> {
        let [batch, seq, channels] = x.dims();
        let [_, _, kernel] = weight.dims();
        let device = x.device();
        let padded = Tensor::cat(
            vec![Tensor::zeros([batch, kernel - 1, channels], &device), x],
            1,
        );
        let mut out = Tensor::zeros([batch, seq, channels], &device);
        for i in 0..kernel {
            let w: Tensor<3> = weight.clone().narrow(2, i, 1).reshape([1, 1, channels]);
            out = out + padded.clone().narrow(1, i, seq) * w;
        }
        out
    }

    pub(crate) fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// The output, and the gradients of `x` and the weight under `sum(out ∘ r)`.
    fn run(
        conv: &dyn Fn(Tensor<3>, Tensor<3>) -> Tensor<3>,
        x: &Tensor<3>,
        weight: &Tensor<3>,
        r: &Tensor<3>,
    ) -> [Vec<f32>; 3] {
        let x = x.clone().detach().require_grad();
        let weight = weight.clone().detach().require_grad();
        let out = conv(x.clone(), weight.clone());
        let grads = (out.clone() * r.clone()).sum().backward();
        [
            values(out.inner()),
            values(x.grad(&grads).expect("x tracked")),
            values(weight.grad(&grads).expect("weight tracked")),
        ]
    }

    /// `got` within 10⁻⁵ (relative beyond 1) of `want`, element by element.
    pub(crate) fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{what}[{i}]: {g} against {w}"
            );
        }
    }

    /// Against the taps by tensor operations: the output to the bit, the input's and the
    /// weight's gradients to rounding; for kernels of 4 (the models'), 2 and 1, and a sequence
    /// shorter than the kernel; and the same forward pass without autodiff.
    #[test]
    fn the_operation_is_the_taps_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(29);
        for (seq, kernel) in [(7, 4), (5, 2), (6, 1), (2, 4)] {
            let normal = Distribution::Normal(0.0, 1.0);
            let x = Tensor::<3>::random([2, seq, 5], normal, &device);
            let weight = Tensor::<3>::random([5, 1, kernel], normal, &device);
            let r = Tensor::<3>::random([2, seq, 5], normal, &device);
            let want = run(&by_operations, &x, &weight, &r);
            let got = run(&causal_conv, &x, &weight, &r);
            assert_eq!(got[0], want[0], "seq {seq}, kernel {kernel}: output");
            assert_close(&got[1], &want[1], "dx");
            assert_close(&got[2], &want[2], "dw");
            let plain = causal_conv(x.clone().inner(), weight.clone().inner());
            assert_eq!(values(plain), want[0], "without autodiff");
        }
    }

    #[cfg(feature = "cube-cpu")]
    /// The backward pass called directly: the gradients of `x` and the weight from `grad`.
    fn gradients(x: Tensor<3>, weight: Tensor<3>, grad: Tensor<3>) -> [Vec<f32>; 2] {
        let (grad_x, grad_weight) = <Dispatch as CausalConvOps>::causal_conv_backward(
            x.into_dispatch(),
            weight.into_dispatch(),
            grad.into_dispatch(),
        );
        [
            values(Tensor::<3>::from_dispatch(grad_x)),
            values(Tensor::<3>::from_dispatch(grad_weight)),
        ]
    }

    #[cfg(feature = "cube-cpu")]
    /// The middle third of a `[batch, seq, 3 · channels]` tensor: a view whose steps are three
    /// times its width apart, as Mamba-2's convolution input is a part of its projection.
    fn middle_third(wide: &Tensor<3>) -> Tensor<3> {
        let [_, _, width] = wide.dims();
        wide.clone().narrow(2, width / 3, width / 3)
    }

    /// The kernels on cubecl's CPU runtime against the CPU's tensor operations: through
    /// autodiff, the output and both gradients for kernels of 4, 2 and 1, a sequence shorter
    /// than the kernel and rows that end in a partial block; and the backward pass called
    /// directly on views of wider tensors, for the input and the output's gradient
    /// (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release -p cwm-models --features
    /// cube-cpu --lib causal_conv`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_tensor_operations_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(31);
        let normal = Distribution::Normal(0.0, 1.0);
        for (batch, seq, channels, kernel) in
            [(3, 70, 37, 4), (2, 5, 8, 2), (2, 6, 5, 1), (2, 2, 6, 4)]
        {
            let x = Tensor::<3>::random([batch, seq, channels], normal, &cpu);
            let weight = Tensor::<3>::random([channels, 1, kernel], normal, &cpu);
            let r = Tensor::<3>::random([batch, seq, channels], normal, &cpu);
            let on = |device: &Device| {
                let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), device);
                run(&causal_conv, &moved(&x), &moved(&weight), &moved(&r))
            };
            let (want, got) = (on(&cpu), on(&cube));
            let what = format!("{batch}×{seq}×{channels}, kernel {kernel}");
            assert_close(&got[0], &want[0], &format!("{what}: output"));
            assert_close(&got[1], &want[1], &format!("{what}: dx"));
            assert_close(&got[2], &want[2], &format!("{what}: dw"));
        }
        let wide_x = Tensor::<3>::random([2, 67, 3 * 9], normal, &cpu).inner();
        let wide_grad = Tensor::<3>::random([2, 67, 3 * 9], normal, &cpu).inner();
        let weight = Tensor::<3>::random([9, 1, 4], normal, &cpu).inner();
        let on = |device: &Device| {
            let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), device);
            let (x, grad) = (
                middle_third(&moved(&wide_x)),
                middle_third(&moved(&wide_grad)),
            );
            let out = values(causal_conv(x.clone(), moved(&weight)));
            let [grad_x, grad_weight] = gradients(x, moved(&weight), grad);
            [out, grad_x, grad_weight]
        };
        let (want, got) = (
            on(&Device::flex()),
            on(&crate::device_by_name("cube-cpu").unwrap()),
        );
        for (i, what) in ["output", "dx", "dw"].into_iter().enumerate() {
            assert_close(&got[i], &want[i], &format!("views: {what}"));
        }
    }
}
