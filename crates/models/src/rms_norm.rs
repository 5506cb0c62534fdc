//! burn's `RmsNorm` as one differentiable operation, with a backward pass of its own.
//!
//! `y = x / rms(x) ∘ γ`, `rms(x) = sqrt(mean(x²) + ε)` over the last dimension. Built from
//! tensor operations under autodiff (burn's `RmsNorm::forward`), one norm is six operations
//! forward (a square, a mean, an addition, a square root, a division, a product with `γ`),
//! about twelve backward, and autodiff keeps `x`, the root and the normalised `x / rms` (as
//! large as `x`) for the backward pass. [`rms_norm`] keeps `x` and `γ` alone; its gradients,
//! with `x̂ = x / rms` and `g = dy ∘ γ`:
//!
//! ```text
//! dx = (g − x̂ · mean(g ∘ x̂)) / rms        (row by row)
//! dγ = Σ_rows dy ∘ x̂
//! ```
//!
//! On the CPU both passes are tensor operations ([`forward_by_ops`], [`backward_by_ops`]); the
//! forward pass is burn's operations in burn's order, so the output is burn's to the bit. On
//! cubecl's devices (`cube.rs` beside this file) the forward pass is one kernel and the
//! backward pass two (then a sum over blocks), where fusion records each pass as one operation.
//!
//! Tensors other than `f32` (Mamba-3 under `bf16`) take burn's `RmsNorm::forward`, which
//! computes the root in `f32` whatever the input's type.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend, Dispatch, Shape, TensorMetadata, backend_extension};
use burn::nn::RmsNorm;
use burn::prelude::*;
use burn::tensor::DType;

/// `norm` applied to `x` over its last dimension, as one operation (the module docs); the
/// same values as `norm.forward(x)`.
pub fn rms_norm<const D: usize>(norm: &RmsNorm, x: Tensor<D>) -> Tensor<D> {
    if x.dtype() != DType::F32 {
        return norm.forward(x);
    }
    let dims = x.dims();
    let width = dims[D - 1];
    let rows = dims[..D - 1].iter().product::<usize>();
    let gamma = norm.gamma.val();
    assert_eq!(
        gamma.dims(),
        [width],
        "an RMSNorm of {:?} over a last dimension of {width}",
        gamma.dims()
    );
    let out = <Dispatch as RmsNormOps>::rms_norm(
        x.reshape([rows, width]).into_dispatch(),
        gamma.into_dispatch(),
        norm.epsilon as f32,
    );
    Tensor::<2>::from_dispatch(out).reshape(dims)
}

/// The root of each row of `x`, `[rows, 1]`: `sqrt(mean(x²) + ε)`, burn's operations.
fn root<B: Backend>(x: FloatTensor<B>, eps: f32) -> FloatTensor<B> {
    let squares = B::float_mul(x.clone(), x);
    B::float_sqrt(B::float_add_scalar(
        B::float_mean_dim(squares, 1),
        eps.into(),
    ))
}

/// `γ` (`[width]`) as a row, `[1, width]`.
fn as_row<B: Backend>(gamma: FloatTensor<B>) -> FloatTensor<B> {
    let [width] = gamma.shape().dims();
    B::float_reshape(gamma, Shape::new([1, width]))
}

/// `x / rms(x) ∘ γ` by tensor operations, in burn's order (`x`: `[rows, width]`).
pub(crate) fn forward_by_ops<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    eps: f32,
) -> FloatTensor<B> {
    let rms = root::<B>(x.clone(), eps);
    B::float_mul(B::float_div(x, rms), as_row::<B>(gamma))
}

/// The gradients of `x` and of `γ` from the output's, `grad`, by tensor operations (the module
/// docs).
pub(crate) fn backward_by_ops<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    grad: FloatTensor<B>,
    eps: f32,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [width] = gamma.shape().dims();
    let rms = root::<B>(x.clone(), eps);
    let normed = B::float_div(x, rms.clone());
    let g = B::float_mul(grad.clone(), as_row::<B>(gamma));
    let dot = B::float_mean_dim(B::float_mul(g.clone(), normed.clone()), 1);
    let grad_x = B::float_div(B::float_sub(g, B::float_mul(normed.clone(), dot)), rms);
    let grad_gamma = B::float_reshape(
        B::float_sum_dim(B::float_mul(grad, normed), 0),
        Shape::new([width]),
    );
    (grad_x, grad_gamma)
}

/// The norm as backend operations: by tensor operations on the CPU (the default bodies), by
/// the kernels of `cube.rs` on cubecl's devices, where fusion records each as one operation;
/// the autodiff decorator's pairs the two.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait RmsNormOps: Backend {
    /// [`rms_norm`] of `x`, `[rows, width]`, with `gamma`, `[width]`.
    #[fusion(meta = |x, _gamma, _eps| x.clone())]
    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f32) -> FloatTensor<Self> {
        forward_by_ops::<Self>(x, gamma, eps)
    }

    /// The gradients of `x` and of `gamma` from the output's, `grad`.
    ///
    /// # Shapes
    /// - `x`, `grad`: `[rows, width]`; `gamma`: `[width]`
    /// - output: `[rows, width]` and `[width]`
    #[fusion(meta = |x, gamma, _grad, _eps| (x.clone(), gamma.clone()))]
    fn rms_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        backward_by_ops::<Self>(x, gamma, grad, eps)
    }
}

impl RmsNormOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube;

/// The backward pass of [`rms_norm`], for the input and `γ`.
#[derive(Debug)]
struct NormBackward;

impl<B: Backend + RmsNormOps> Backward<B, 2> for NormBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, f32);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [x_node, gamma_node] = ops.parents;
        if x_node.is_none() && gamma_node.is_none() {
            return;
        }
        let (x, gamma, eps) = ops.state;
        let (grad_x, grad_gamma) = B::rms_norm_backward(x, gamma, grad, eps);
        if let Some(node) = x_node {
            grads.register::<B>(node.id, grad_x);
        }
        if let Some(node) = gamma_node {
            grads.register::<B>(node.id, grad_gamma);
        }
    }
}

impl<B: Backend + RmsNormOps, C: CheckpointStrategy> RmsNormOps for Autodiff<B, C> {
    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f32) -> FloatTensor<Self> {
        let nodes = [x.node(), gamma.node()];
        let (x, gamma) = (x.into_primitive(), gamma.into_primitive());
        match NormBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let out = B::rms_norm(x.clone(), gamma.clone(), eps);
                prep.finish((x, gamma, eps), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::rms_norm(x, gamma, eps)),
        }
    }

    fn rms_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        eps: f32,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (grad_x, grad_gamma) = B::rms_norm_backward(
            x.into_primitive(),
            gamma.into_primitive(),
            grad.into_primitive(),
            eps,
        );
        (
            <Self as AutodiffBackend>::from_inner(grad_x),
            <Self as AutodiffBackend>::from_inner(grad_gamma),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::RmsNormConfig;
    use burn::tensor::Distribution;

    use crate::causal_conv::tests::assert_close;

    fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// `got` equal to `want` in every bit, else the first element that is not.
    fn assert_same(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let first = got
            .iter()
            .zip(want)
            .position(|(g, w)| g.to_bits() != w.to_bits());
        if let Some(i) = first {
            panic!("{what}[{i}]: {} against {}", got[i], want[i]);
        }
    }

    /// The output, and the gradients of `x` and `γ` under `sum(out ∘ r)`.
    fn run(
        apply: &dyn Fn(&RmsNorm, Tensor<3>) -> Tensor<3>,
        norm: &RmsNorm,
        x: &Tensor<3>,
        r: &Tensor<3>,
    ) -> [Vec<f32>; 3] {
        let x = x.clone().detach().require_grad();
        let out = apply(norm, x.clone());
        let grads = (out.clone() * r.clone()).sum().backward();
        [
            values(out.inner()),
            values(x.grad(&grads).expect("x tracked")),
            values(norm.gamma.val().grad(&grads).expect("gamma tracked")),
        ]
    }

    /// A norm of `width` with a `γ` away from ones, so its gradient's share shows.
    fn norm(width: usize, eps: f64, device: &Device) -> RmsNorm {
        let mut norm = RmsNormConfig::new(width).with_epsilon(eps).init(device);
        let gamma = Tensor::<1>::random([width], Distribution::Uniform(0.5, 1.5), device);
        norm.gamma = burn::module::Param::from_tensor(gamma);
        norm
    }

    /// Against burn's `RmsNorm::forward` under autodiff: the output to the bit, the gradients
    /// of `x` and `γ` to rounding; for the models' widths and epsilons, a width of one and
    /// rows of zeros (where the root is `sqrt(ε)`); and the same forward pass without autodiff.
    #[test]
    fn the_operation_is_burns_norm_in_value_and_gradients() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(37);
        let normal = Distribution::Normal(0.0, 2.0);
        for (rows, width, eps) in [(7, 64, 1e-5), (5, 33, 1e-6), (3, 1, 1e-5)] {
            let norm = norm(width, eps, &device);
            let mut x = Tensor::<3>::random([2, rows, width], normal, &device);
            x = x.slice_assign(
                [0..1, 0..1, 0..width],
                Tensor::<3>::zeros([1, 1, width], &device),
            );
            let r = Tensor::<3>::random([2, rows, width], normal, &device);
            let want = run(&|n, x| n.forward(x), &norm, &x, &r);
            let got = run(&rms_norm, &norm, &x, &r);
            let what = format!("{rows}×{width}, ε {eps}");
            assert_same(&got[0], &want[0], &format!("{what}: output"));
            assert_close(&got[1], &want[1], &format!("{what}: dx"));
            assert_close(&got[2], &want[2], &format!("{what}: dγ"));
            let plain_norm = RmsNorm {
                gamma: burn::module::Param::from_tensor(norm.gamma.val().inner()),
                epsilon: eps,
            };
            let plain = rms_norm(&plain_norm, x.clone().inner());
            assert_same(
                &values(plain),
                &want[0],
                &format!("{what}: without autodiff"),
            );
        }
    }

    /// The kernels on cubecl's CPU runtime against the CPU's tensor operations, through
    /// autodiff: the output and both gradients, for rows that fill a cube and rows that end
    /// in a partial one, widths under, at and over the 32 lanes (and not a multiple of them),
    /// blocks of `γ`'s gradient cut short, and a row of zeros; and a view of a wider tensor
    /// (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release -p cwm-models --features
    /// cube-cpu --lib rms_norm`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernels_equal_the_tensor_operations_on_cube_cpu() {
        let _rng = crate::rng::rng_lock();
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        cpu.seed(41);
        let normal = Distribution::Normal(0.0, 2.0);
        for (rows, width) in [(8, 64), (70, 37), (3, 5), (9, 96)] {
            let norm_cpu = norm(width, 1e-5, &cpu);
            let mut x = Tensor::<3>::random([1, rows, width], normal, &cpu);
            x = x.slice_assign(
                [0..1, 1..2, 0..width],
                Tensor::<3>::zeros([1, 1, width], &cpu),
            );
            let r = Tensor::<3>::random([1, rows, width], normal, &cpu);
            let moved = |t: &Tensor<3>| Tensor::<3>::from_data(t.to_data(), &cube);
            let norm_cube = RmsNorm {
                gamma: burn::module::Param::from_tensor(Tensor::<1>::from_data(
                    norm_cpu.gamma.val().to_data(),
                    &cube,
                )),
                epsilon: 1e-5,
            };
            let want = run(&rms_norm, &norm_cpu, &x, &r);
            let got = run(&rms_norm, &norm_cube, &moved(&x), &moved(&r));
            let what = format!("{rows}×{width}");
            assert_close(&got[0], &want[0], &format!("{what}: output"));
            assert_close(&got[1], &want[1], &format!("{what}: dx"));
            assert_close(&got[2], &want[2], &format!("{what}: dγ"));
        }
        let wide = Tensor::<2>::random([67, 3 * 64], normal, &cpu).inner();
        let gamma = Tensor::<1>::random([64], normal, &cpu).inner();
        let grad = Tensor::<2>::random([67, 64], normal, &cpu).inner();
        let on = |device: &Device| {
            let x = Tensor::<2>::from_data(wide.to_data(), device).narrow(1, 64, 64);
            let moved = |t: &Tensor<1>| Tensor::<1>::from_data(t.to_data(), device);
            let out = <Dispatch as RmsNormOps>::rms_norm(
                x.clone().into_dispatch(),
                moved(&gamma).into_dispatch(),
                1e-5,
            );
            let (grad_x, grad_gamma) = <Dispatch as RmsNormOps>::rms_norm_backward(
                x.into_dispatch(),
                moved(&gamma).into_dispatch(),
                Tensor::<2>::from_data(grad.to_data(), device).into_dispatch(),
                1e-5,
            );
            [
                values(Tensor::<2>::from_dispatch(out)),
                values(Tensor::<2>::from_dispatch(grad_x)),
                values(Tensor::<1>::from_dispatch(grad_gamma)),
            ]
        };
        let (want, got) = (
            on(&Device::flex()),
            on(&crate::device_by_name("cube-cpu").unwrap()),
        );
        for (i, what) in ["output", "dx", "dγ"].into_iter().enumerate() {
            assert_close(&got[i], &want[i], &format!("view: {what}"));
        }
    }
}
