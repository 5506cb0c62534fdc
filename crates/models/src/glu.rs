//! The gated MLPs' gate, `silu(gate) ∘ value`, as one differentiable operation on the packed
//! projection that holds both halves (the Mamba families' `fc1`, and the transformer's
//! `in_proj` on cubecl's devices; each one weight in the reference's layout). On the CPU the
//! transformer keeps two products and separate operations, which ran its step faster there
//! (docs/perf.md).
//!
//! Built from separate operations under autodiff, the two halves were slices of the packed
//! output (or products with slices of the weight), whose backward passes each build a zero
//! tensor of the whole packed shape (or weight), write the half's gradient into it and add the
//! two; and `silu` kept its input, the sigmoid and their product for the backward pass, the
//! final product the value and `silu(gate)`. [`swiglu`] keeps only the packed tensor, computes
//! the sigmoid again in the backward pass, and returns the packed gradient as the two halves'
//! gradients side by side: at a d512 transformer layer and batch 128 × 256 (`[32768, 2048]`
//! halves, 256 MiB each), two such tensors fewer kept per layer.
//!
//! The arithmetic is the separate operations', in the same order, so on the CPU the output and
//! the gradient are the same to the bit (`swiglu_is_the_separate_operations_to_the_bit`).

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Slice, TensorMetadata, backend_extension};
use burn::prelude::*;

/// Which half of the packed projection is the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateHalf {
    /// The first half (the transformer's `in_proj`).
    First,
    /// The second half (the Mamba families' `fc1`).
    Second,
}

/// `silu(gate) ∘ value` of the two halves of `packed`'s last dimension, one differentiable
/// operation (the module docs).
///
/// # Shapes
/// - `packed`: `[batch, seq, 2w]`
/// - output: `[batch, seq, w]`
pub fn swiglu(packed: Tensor<3>, gate: GateHalf) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as GluOps>::swiglu(packed.into_dispatch(), gate))
}

/// The gate and the value of `packed`.
fn halves<B: Backend>(packed: FloatTensor<B>, gate: GateHalf) -> [FloatTensor<B>; 2] {
    let [_, _, width] = packed.shape().dims();
    let half = width / 2;
    let cut = |start: usize| {
        let range = Slice::new(start as isize, Some((start + half) as isize), 1);
        B::float_slice(packed.clone(), &[Slice::full(), Slice::full(), range])
    };
    match gate {
        GateHalf::First => [cut(0), cut(half)],
        GateHalf::Second => [cut(half), cut(0)],
    }
}

/// `silu(g) ∘ v` as burn computes `silu`: `g · sigmoid(g)`.
fn forward<B: Backend>(packed: FloatTensor<B>, gate: GateHalf) -> FloatTensor<B> {
    let [g, v] = halves::<B>(packed, gate);
    B::float_mul(B::float_mul(g.clone(), B::sigmoid(g)), v)
}

/// The packed gradient from the output's, `grad`: the operations autodiff takes through
/// `(g · sigmoid(g)) ∘ v`, in its order, with the halves side by side as in `packed`.
fn backward<B: Backend>(
    packed: FloatTensor<B>,
    gate: GateHalf,
    grad: FloatTensor<B>,
) -> FloatTensor<B> {
    let [g, v] = halves::<B>(packed, gate);
    let s = B::sigmoid(g.clone());
    let silu = B::float_mul(g.clone(), s.clone());
    let grad_value = B::float_mul(grad.clone(), silu);
    let grad_silu = B::float_mul(grad, v);
    let direct = B::float_mul(grad_silu.clone(), s.clone());
    let through_sigmoid = B::sigmoid_backward(s, B::float_mul(grad_silu, g));
    let grad_gate = B::float_add(direct, through_sigmoid);
    let parts = match gate {
        GateHalf::First => vec![grad_gate, grad_value],
        GateHalf::Second => vec![grad_value, grad_gate],
    };
    B::float_cat(parts, 2)
}

/// The gate as a backend operation. Each backend's forward pass is the default body, from its
/// own tensor operations (cubecl's fusion merges them into one kernel); the autodiff
/// decorator's adds the backward pass.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait GluOps: Backend {
    /// [`swiglu`].
    fn swiglu(packed: FloatTensor<Self>, gate: GateHalf) -> FloatTensor<Self> {
        forward::<Self>(packed, gate)
    }
}

impl GluOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl GluOps for burn::backend::Cube {}

/// The backward pass of [`swiglu`], for the packed input.
#[derive(Debug)]
struct SwigluBackward;

impl<B: Backend> Backward<B, 1> for SwigluBackward {
    type State = (FloatTensor<B>, GateHalf);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node {
            let (packed, gate) = ops.state;
            grads.register::<B>(node.id, backward::<B>(packed, gate, grad));
        }
    }
}

impl<B: Backend + GluOps, C: CheckpointStrategy> GluOps for Autodiff<B, C> {
    fn swiglu(packed: FloatTensor<Self>, gate: GateHalf) -> FloatTensor<Self> {
        match SwigluBackward
            .prepare::<C>([packed.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let packed = packed.into_primitive();
                let out = forward::<B>(packed.clone(), gate);
                prep.finish((packed, gate), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::swiglu(packed.into_primitive(), gate)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;
    use burn::tensor::activation::silu;

    /// The separate operations the models used before: two slices, `silu`, a product.
    fn separate(packed: Tensor<3>, gate: GateHalf) -> Tensor<3> {
        let [_, _, width] = packed.dims();
        let half = width / 2;
        let first = packed.clone().narrow(2, 0, half);
        let second = packed.narrow(2, half, half);
        match gate {
            GateHalf::First => silu(first) * second,
            GateHalf::Second => first * silu(second),
        }
    }

    fn values(x: Tensor<3>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// The output and the packed gradient of `sum(out ∘ w)`: the operation's against the
    /// separate operations', every element to the bit, for both halves as the gate; and the
    /// operation without autodiff is the same forward computation.
    #[test]
    fn swiglu_is_the_separate_operations_to_the_bit() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(53);
        let packed = Tensor::<3>::random([2, 5, 24], Distribution::Normal(0.0, 2.0), &device);
        let weights = Tensor::<3>::random([2, 5, 12], Distribution::Normal(0.0, 1.0), &device);
        for gate in [GateHalf::First, GateHalf::Second] {
            let run = |f: &dyn Fn(Tensor<3>, GateHalf) -> Tensor<3>| {
                let x = packed.clone().detach().require_grad();
                let out = f(x.clone(), gate);
                let grads = (out.clone() * weights.clone()).sum().backward();
                (
                    values(out.inner()),
                    values(x.grad(&grads).expect("tracked")),
                )
            };
            let (want_out, want_grad) = run(&separate);
            let (out, grad) = run(&swiglu);
            assert_eq!(out, want_out, "{gate:?}: output");
            assert_eq!(grad, want_grad, "{gate:?}: gradient");
            let plain = swiglu(packed.clone().inner(), gate);
            assert_eq!(values(plain), want_out, "{gate:?}: without autodiff");
        }
    }
}
