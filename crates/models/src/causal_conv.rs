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
//! [`causal_conv`] keeps the padded input and the weight; its backward pass pads the output's
//! gradient with `K − 1` zero steps behind it, once, and takes `K` windows of that:
//!
//! ```text
//! dx_s[c]       = Σ_i w[c, 0, i] · dout_{s+K−1−i}[c]      (dout zero past the last step)
//! dw[c, 0, i]   = Σ_{b,t} x̃_{t+i}[c] · dout_t[c]           (x̃ the padded input)
//! ```
//!
//! The forward pass is the tensor operations' (the same products and sums in the same order,
//! without the zero tensor the sum started from), so the outputs are equal to the bit; the
//! gradients add the same terms in another order, so they agree to rounding
//! (`the_operation_is_the_taps_in_value_and_gradients`).

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Shape, TensorMetadata, backend_extension};
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

/// `Σ_i window_i(x̃) · w_i`, and the padded input `x̃`.
fn forward<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [_, seq, _] = x.shape().dims();
    let [_, _, kernel] = weight.shape().dims();
    let x_padded = padded::<B>(x, kernel - 1, true);
    let term = |i: usize| {
        B::float_mul(
            steps::<B>(x_padded.clone(), i, seq),
            tap::<B>(weight.clone(), i),
        )
    };
    let out = (1..kernel).fold(term(0), |out, i| B::float_add(out, term(i)));
    (out, x_padded)
}

/// The gradients of `x` and of `weight` from the output's, `grad` (the module docs).
fn backward<B: Backend>(
    x_padded: FloatTensor<B>,
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
    let grad_tap = |i: usize| {
        let product = B::float_mul(steps::<B>(x_padded.clone(), i, seq), grad.clone());
        let rows = B::float_reshape(product, Shape::new([batch * seq, channels]));
        B::float_reshape(B::float_sum_dim(rows, 0), Shape::new([channels, 1, 1]))
    };
    let grad_weight = B::float_cat((0..kernel).map(grad_tap).collect(), 2);
    (grad_x, grad_weight)
}

/// The convolution as a backend operation. Each backend's forward pass is the default body,
/// from its own tensor operations; the autodiff decorator's adds the backward pass.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait CausalConvOps: Backend {
    /// [`causal_conv`].
    fn causal_conv(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        forward::<Self>(x, weight).0
    }
}

impl CausalConvOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl CausalConvOps for burn::backend::Cube {}

/// The backward pass of [`causal_conv`], for the input and the weight.
#[derive(Debug)]
struct ConvBackward;

impl<B: Backend> Backward<B, 2> for ConvBackward {
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [x_node, weight_node] = ops.parents;
        if x_node.is_none() && weight_node.is_none() {
            return;
        }
        let (x_padded, weight) = ops.state;
        let (grad_x, grad_weight) = backward::<B>(x_padded, weight, grad);
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
                let (out, x_padded) = forward::<B>(x, weight.clone());
                prep.finish((x_padded, weight), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward::<B>(x, weight).0),
        }
    }
}

#[cfg(test)]
mod tests {
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

    fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
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

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
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
}
