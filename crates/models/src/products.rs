//! Who multiplies the `Linear`s' matrices on a GPU: cubecl's own kernels (burn's products,
//! the default) or NVIDIA's cuBLAS, so that one build can time the two against each other.
//!
//! Every `Linear` of the models is one `[rows, d_in] · [d_in, d_out]` product forward and two
//! backward (`mixed::product`). On an H200, cubek-matmul's fastest product ran at about
//! 7 × 10¹³ operations/s (docs/gpu.md, "The tuner's early stop"), a fraction of the TF32
//! tensor-core rate cuBLAS reaches for the reference's PyTorch, and at d512 the transformer's
//! products alone come to about the reference's whole step. [`product`] is `op(a) · op(b)`
//! (`op` a transposition or none) as one differentiable operation, and [`product_of`] the
//! choice between it and burn's product: on CUDA with
//! [`Products::Cublas`] by `cublasSgemm` in TF32 (`products/cublas.rs`), elsewhere by
//! burn's product of the (transposed) operands. Its backward pass is two such products
//! (with `g` the output's gradient):
//!
//! ```text
//! c = a · b        da = g · bᵀ     db = aᵀ · g
//! ```
//!
//! cubecl does not hand out the CUDA stream its kernels run on, so the cuBLAS product is
//! ordered against them by waiting: cubecl's queue is drained before the product and the
//! product's own stream after it. A `Linear`'s forward product takes one such pair of host
//! waits a step, its backward pass's two products another ([`ProductOps::product_backward`],
//! one operation). What the products gain must outweigh those waits; only a GPU can say
//! whether they do.
//!
//! The environment variable `CWM_PRODUCTS` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --products` for one run):
//!
//! | value | products |
//! |---|---|
//! | unset, empty or `cubecl` | burn's (cubecl's kernels; the CPU's own on `flex`) |
//! | `cublas` | cuBLAS's, TF32, for the `f32` `Linear`s on device `cuda` |
//! | `cublas-async` | the same, ordered against cubecl's kernels on the GPU by flags in device memory rather than by host waits (`products/flags.rs`) |
//!
//! `cube-cpu` refuses either `cublas` when its device is made, and `cwm model bench --products cublas`
//! on any device but `cuda`; the CPU (`flex`) never reads the variable, as with cwm's other
//! settings of cubecl's devices.
//!
//! A process's first cuBLAS product of each kind (forward, and the backward pass's two) is also
//! computed by burn and the two compared; a difference beyond TF32's rounding stops the
//! process, naming the shapes.

use std::fmt;
use std::str::FromStr;

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend, Dispatch, backend_extension};
use burn::prelude::*;

use crate::env_setting::ProcessSetting;

/// The environment variable [`PRODUCTS`] is read from.
pub const PRODUCTS_VAR: &str = "CWM_PRODUCTS";

/// The process's setting (the module docs).
pub static PRODUCTS: ProcessSetting<Products> = ProcessSetting::new(PRODUCTS_VAR);

/// Who multiplies the `Linear`s' matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// burn's products: cubecl's kernels on cubecl's devices.
    #[default]
    Cubecl,
    /// cuBLAS's `cublasSgemm` in TF32, on device `cuda`, ordered by host waits.
    Cublas,
    /// The same products ordered on the GPU by flags in device memory, the host never waiting
    /// (`products/flags.rs`).
    CublasAsync,
}

impl Products {
    /// Whether cuBLAS multiplies (either ordering).
    pub fn is_cublas(self) -> bool {
        matches!(self, Products::Cublas | Products::CublasAsync)
    }
}

/// Each setting with its name.
const NAMES: [(Products, &str); 3] = [
    (Products::Cubecl, "cubecl"),
    (Products::Cublas, "cublas"),
    (Products::CublasAsync, "cublas-async"),
];

impl fmt::Display for Products {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(crate::env_setting::name_of(&NAMES, self))
    }
}

impl FromStr for Products {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        crate::env_setting::by_name(&NAMES, s)
    }
}

/// Whether the process's products are cuBLAS's.
pub(crate) fn cublas_chosen() -> bool {
    PRODUCTS.chosen().is_some_and(Products::is_cublas)
}

/// Whether the process's cuBLAS products are ordered on the GPU rather than by host waits.
#[cfg(feature = "cuda")]
pub(crate) fn cublas_async() -> bool {
    PRODUCTS.chosen() == Some(Products::CublasAsync)
}

/// `op(a) · op(b)` as the process multiplies: by [`ProductOps::product`] where
/// [`Products::Cublas`] is chosen (the transpositions passed to cuBLAS, no copy made), else
/// burn's product of the (transposed) operands: how `mixed::product` multiplies an `f32`
/// `Linear`'s rows by its weight, and the fused losses their head's.
///
/// # Shapes
/// - as [`ProductOps::product`]
pub fn product_of(a: Tensor<2>, b: Tensor<2>, transpose_a: bool, transpose_b: bool) -> Tensor<2> {
    if !cublas_chosen() {
        let a = if transpose_a { a.transpose() } else { a };
        let b = if transpose_b { b.transpose() } else { b };
        return a.matmul(b);
    }
    let (a, b) = (a.into_dispatch(), b.into_dispatch());
    Tensor::<2>::from_dispatch(<Dispatch as ProductOps>::product(
        a,
        b,
        transpose_a,
        transpose_b,
    ))
}

/// The sizes `(m, k, n)` of `op(a) · op(b)` for operands stored as `a` and `b` (row-major
/// `[rows, columns]`), `op` transposing where `transpose_*` says.
///
/// # Errors
/// The inner sizes differ.
#[cfg(any(feature = "cuda", feature = "cube-cpu", test))]
pub(crate) fn sizes(
    a: [usize; 2],
    b: [usize; 2],
    transpose_a: bool,
    transpose_b: bool,
) -> Result<(usize, usize, usize), String> {
    let [m, k] = if transpose_a { [a[1], a[0]] } else { a };
    let [k_b, n] = if transpose_b { [b[1], b[0]] } else { b };
    if k != k_b {
        return Err(format!(
            "a product of {a:?}{} by {b:?}{}: inner sizes {k} and {k_b}",
            if transpose_a { "ᵀ" } else { "" },
            if transpose_b { "ᵀ" } else { "" }
        ));
    }
    Ok((m, k, n))
}

/// One `cublasSgemm` call's arguments for `c = op(a) · op(b)` with row-major operands.
///
/// cuBLAS reads matrices column by column, and a row-major `[r, c]` matrix read so is its
/// transpose, `[c, r]` with leading dimension `c`. So the call computes `cᵀ = op(b)ᵀ · op(a)ᵀ`:
/// cuBLAS's first operand is `b`, its second `a`, and what it writes, `cᵀ` column by column,
/// is `c` row by row.
#[cfg(any(feature = "cuda", test))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Gemm {
    /// Whether cuBLAS transposes its first operand (`b` as stored).
    pub transpose_first: bool,
    /// Whether cuBLAS transposes its second operand (`a` as stored).
    pub transpose_second: bool,
    /// cuBLAS's `m`, `n` and `k`: our `n`, `m` and `k`.
    pub m: usize,
    /// See [`Gemm::m`].
    pub n: usize,
    /// See [`Gemm::m`].
    pub k: usize,
    /// The leading dimensions of `b`, `a` and the output as cuBLAS reads them.
    pub ld_first: usize,
    /// See [`Gemm::ld_first`].
    pub ld_second: usize,
    /// See [`Gemm::ld_first`].
    pub ld_out: usize,
}

#[cfg(any(feature = "cuda", test))]
impl Gemm {
    /// The call for contiguous row-major operands stored as `a` and `b`.
    ///
    /// # Errors
    /// As [`sizes`].
    pub(crate) fn of(
        a: [usize; 2],
        b: [usize; 2],
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Gemm, String> {
        let (m, k, n) = sizes(a, b, transpose_a, transpose_b)?;
        Ok(Gemm {
            transpose_first: transpose_b,
            transpose_second: transpose_a,
            m: n,
            n: m,
            k,
            ld_first: if transpose_b { k } else { n },
            ld_second: if transpose_a { m } else { k },
            ld_out: n,
        })
    }
}

/// The output's spec, for fusion: `[m, n]` in `a`'s type.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn product_spec(
    a: &burn::backend::fusion::custom::TensorSpec,
    b: &burn::backend::fusion::custom::TensorSpec,
    transpose_a: &bool,
    transpose_b: &bool,
) -> burn::backend::fusion::custom::TensorSpec {
    let (a_dims, b_dims): ([usize; 2], [usize; 2]) = (a.shape.dims(), b.shape.dims());
    let (m, _, n) = sizes(a_dims, b_dims, *transpose_a, *transpose_b)
        .unwrap_or_else(|reason| panic!("{reason}"));
    burn::backend::fusion::custom::TensorSpec::new(burn::backend::Shape::new([m, n]), a.dtype)
}

/// `op(a) · op(b)` by burn's operations: a transposition is a view, the product burn's.
pub(crate) fn product_by_ops<B: Backend>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    transpose_a: bool,
    transpose_b: bool,
) -> FloatTensor<B> {
    let a = if transpose_a {
        B::float_transpose(a)
    } else {
        a
    };
    let b = if transpose_b {
        B::float_transpose(b)
    } else {
        b
    };
    B::float_matmul(a, b)
}

/// The product as a backend operation: burn's on the CPU (the default body), on cubecl's
/// devices cuBLAS's where chosen and possible (`products/cube.rs`), where fusion records it as
/// one operation; the autodiff decorator's pairs it with its backward pass.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait ProductOps: Backend {
    /// `op(a) · op(b)`, `op` transposing an operand where its flag says.
    ///
    /// # Shapes
    /// - `a`: `[m, k]` (`[k, m]` transposed); `b`: `[k, n]` (`[n, k]` transposed)
    /// - output: `[m, n]`
    #[fusion(meta = product_spec)]
    fn product(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> FloatTensor<Self> {
        product_by_ops::<Self>(a, b, transpose_a, transpose_b)
    }

    /// The gradients of `a` and `b` as stored, from the output's, `g` (the module docs): two
    /// products, in one operation so that cuBLAS's run under one wait.
    ///
    /// # Shapes
    /// - `a`, `b`: as [`ProductOps::product`]; `g`: `[m, n]`
    /// - output: `a`'s shape and `b`'s
    #[fusion(meta = |a, b, _g, _ta, _tb| (a.clone(), b.clone()))]
    fn product_backward(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        g: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        backward_by_ops::<Self>(gradient_products(a, b, g, transpose_a, transpose_b))
    }
}

/// The two products of [`gradient_products`] by burn's operations: the gradients of `a` and `b`.
pub(crate) fn backward_by_ops<B: Backend>(
    products: [(FloatTensor<B>, FloatTensor<B>, bool, bool); 2],
) -> (FloatTensor<B>, FloatTensor<B>) {
    let [grad_a, grad_b] = products.map(|(x, y, tx, ty)| product_by_ops::<B>(x, y, tx, ty));
    (grad_a, grad_b)
}

/// The two products (operands and transpositions) that give `a`'s and `b`'s gradients, as
/// stored, from `g`, the gradient of `op(a) · op(b)`: `d op(a) = g · op(b)ᵀ` and
/// `d op(b) = op(a)ᵀ · g`, each transposed back where its operand was.
pub(crate) fn gradient_products<T: Clone>(
    a: T,
    b: T,
    g: T,
    transpose_a: bool,
    transpose_b: bool,
) -> [(T, T, bool, bool); 2] {
    let grad_a = if transpose_a {
        (b.clone(), g.clone(), transpose_b, true)
    } else {
        (g.clone(), b, false, !transpose_b)
    };
    let grad_b = if transpose_b {
        (g, a, true, transpose_a)
    } else {
        (a, g, !transpose_a, false)
    };
    [grad_a, grad_b]
}

impl ProductOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
mod cube;

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod flags;

// The project's one module with unsafe code: foreign calls into CUDA's driver and cuBLAS.
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
pub(crate) mod cublas;

/// The backward pass of [`ProductOps::product`], for both operands.
#[derive(Debug)]
struct ProductBackward;

impl<B: Backend + ProductOps> Backward<B, 2> for ProductBackward {
    type State = (FloatTensor<B>, FloatTensor<B>, bool, bool);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<B>(&ops.node);
        let (a, b, ta, tb) = ops.state;
        match ops.parents {
            [Some(a_node), Some(b_node)] => {
                let (grad_a, grad_b) = B::product_backward(a, b, g, ta, tb);
                grads.register::<B>(a_node.id, grad_a);
                grads.register::<B>(b_node.id, grad_b);
            }
            [Some(a_node), None] => {
                let [(x, y, tx, ty), _] = gradient_products(a, b, g, ta, tb);
                grads.register::<B>(a_node.id, B::product(x, y, tx, ty));
            }
            [None, Some(b_node)] => {
                let [_, (x, y, tx, ty)] = gradient_products(a, b, g, ta, tb);
                grads.register::<B>(b_node.id, B::product(x, y, tx, ty));
            }
            [None, None] => {}
        }
    }
}

impl<B: Backend + ProductOps, C: CheckpointStrategy> ProductOps for Autodiff<B, C> {
    fn product(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> FloatTensor<Self> {
        let nodes = [a.node(), b.node()];
        let (a, b) = (a.into_primitive(), b.into_primitive());
        match ProductBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::product(a.clone(), b.clone(), transpose_a, transpose_b);
                prep.finish((a, b, transpose_a, transpose_b), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::product(a, b, transpose_a, transpose_b)),
        }
    }

    fn product_backward(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        g: FloatTensor<Self>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (grad_a, grad_b) = B::product_backward(
            a.into_primitive(),
            b.into_primitive(),
            g.into_primitive(),
            transpose_a,
            transpose_b,
        );
        (
            <Self as AutodiffBackend>::from_inner(grad_a),
            <Self as AutodiffBackend>::from_inner(grad_b),
        )
    }
}

/// The shape of a two-dimensional primitive.
#[cfg(feature = "cuda")]
fn dims2<T: burn::backend::TensorMetadata>(t: &T) -> [usize; 2] {
    t.shape().dims()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    use crate::causal_conv::tests::{assert_close, values};

    /// The output and both gradients under `sum(out ∘ r)`, of `op(a) · op(b)` made by `apply`.
    fn run(
        apply: &dyn Fn(Tensor<2>, Tensor<2>) -> Tensor<2>,
        a: &Tensor<2>,
        b: &Tensor<2>,
        r: &Tensor<2>,
    ) -> [Vec<f32>; 3] {
        let (a, b) = (a.clone().require_grad(), b.clone().require_grad());
        let out = apply(a.clone(), b.clone());
        let grads = (out.clone() * r.clone()).sum().backward();
        [
            values(out.inner()),
            values(a.grad(&grads).expect("a tracked")),
            values(b.grad(&grads).expect("b tracked")),
        ]
    }

    /// A `[rows, columns]` matrix of fixed values on `device`, scrambled by `salt`.
    fn matrix(dims: [usize; 2], salt: f32, device: &Device) -> Tensor<2> {
        let values: Vec<f32> = (0..dims[0] * dims[1])
            .map(|i| (i as f32 * 0.37 + salt).sin())
            .collect();
        Tensor::<2>::from_data(burn::tensor::TensorData::new(values, dims), device)
    }

    /// On `device`, for `op(a) · op(b)` with `a` `[5, 7]` and `b` `[7, 3]` as transposed:
    /// the operation's output and gradients, and burn's product's.
    fn both_ways(device: &Device, ta: bool, tb: bool) -> [[Vec<f32>; 3]; 2] {
        let (m, k, n) = (5, 7, 3);
        let a = matrix(if ta { [k, m] } else { [m, k] }, 0.5, device);
        let b = matrix(if tb { [n, k] } else { [k, n] }, 1.5, device);
        let r = matrix([m, n], 2.5, device);
        let op = |x: Tensor<2>, t: bool| if t { x.transpose() } else { x };
        let by_burn = run(&|a, b| op(a, ta).matmul(op(b, tb)), &a, &b, &r);
        let by_op = |a: Tensor<2>, b: Tensor<2>| {
            let out =
                <Dispatch as ProductOps>::product(a.into_dispatch(), b.into_dispatch(), ta, tb);
            Tensor::<2>::from_dispatch(out)
        };
        [run(&by_op, &a, &b, &r), by_burn]
    }

    /// `got` is `want`, to rounding, part by part.
    fn assert_parts(got: &[Vec<f32>; 3], want: &[Vec<f32>; 3], what: &str) {
        let names = ["output", "a's gradient", "b's gradient"];
        for ((got, want), name) in got.iter().zip(want).zip(names) {
            assert_close(got, want, &format!("{name}, {what}"));
        }
    }

    /// For every pair of transpositions, the operation's output and gradients are burn's
    /// product of the transposed operands' (non-square, so that a size mixed up shows).
    #[test]
    fn the_product_and_its_gradients_are_burns_for_every_transposition() {
        let device = Device::flex().autodiff();
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let [by_op, by_burn] = both_ways(&device, ta, tb);
            assert_parts(&by_op, &by_burn, &format!("transposed {ta} {tb}"));
        }
    }

    /// With one operand tracked, its gradient alone is computed (one product), and it is
    /// burn's, for every pair of transpositions.
    #[test]
    fn one_tracked_operand_gets_burns_gradient() {
        let device = Device::flex().autodiff();
        let (m, k, n) = (5, 7, 3);
        let r = matrix([m, n], 2.5, &device);
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a = matrix(if ta { [k, m] } else { [m, k] }, 0.5, &device);
            let b = matrix(if tb { [n, k] } else { [k, n] }, 1.5, &device);
            let op = |x: Tensor<2>, t: bool| if t { x.transpose() } else { x };
            for track_a in [true, false] {
                let grad_of = |by_op: bool| {
                    let (a, b) = if track_a {
                        (a.clone().require_grad(), b.clone())
                    } else {
                        (a.clone(), b.clone().require_grad())
                    };
                    let out = if by_op {
                        Tensor::<2>::from_dispatch(<Dispatch as ProductOps>::product(
                            a.clone().into_dispatch(),
                            b.clone().into_dispatch(),
                            ta,
                            tb,
                        ))
                    } else {
                        op(a.clone(), ta).matmul(op(b.clone(), tb))
                    };
                    let grads = (out * r.clone()).sum().backward();
                    let tracked = if track_a { a } else { b };
                    values(tracked.grad(&grads).expect("tracked"))
                };
                let what = format!("transposed {ta} {tb}, a tracked: {track_a}");
                assert_close(&grad_of(true), &grad_of(false), &what);
            }
        }
    }

    /// On `cube-cpu` the product is one operation fusion records (its output's shape from
    /// `product_spec`), burn's product there (the setting is cubecl's), and gives the CPU's
    /// output and gradients for every pair of transpositions (`CARGO_TARGET_DIR=target/cuda
    /// cargo test --release -p cwm-models --features cube-cpu --lib products`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn on_cube_cpu_the_product_is_the_cpus_for_every_transposition() {
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        let cpu = Device::flex().autodiff();
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let [on_cube, _] = both_ways(&cube, ta, tb);
            let [on_cpu, _] = both_ways(&cpu, ta, tb);
            assert_parts(
                &on_cube,
                &on_cpu,
                &format!("cube-cpu, transposed {ta} {tb}"),
            );
        }
    }

    /// With burn's products chosen (the CPU never reads the setting), `product_of` is burn's
    /// product of the transposed operands, to the bit.
    #[test]
    fn product_of_is_burns_product_without_cublas() {
        let device = Device::flex();
        let a = Tensor::<2>::random([6, 4], Distribution::Normal(0.0, 1.0), &device);
        let b = Tensor::<2>::random([2, 6], Distribution::Normal(0.0, 1.0), &device);
        let want = values(a.clone().transpose().matmul(b.clone().transpose()));
        assert_eq!(values(product_of(a, b, true, true)), want);
    }

    /// `g` carried out with BLAS's meaning of its arguments (column-major operands, a
    /// transposition flag each), by loops: what cuBLAS computes for it.
    fn column_major_gemm(g: &Gemm, first: &[f32], second: &[f32]) -> Vec<f32> {
        let at = |data: &[f32], ld: usize, transposed: bool, i: usize, j: usize| {
            if transposed {
                data[j + i * ld]
            } else {
                data[i + j * ld]
            }
        };
        let mut out = vec![0.0; g.ld_out * g.n];
        for j in 0..g.n {
            for i in 0..g.m {
                out[i + j * g.ld_out] = (0..g.k)
                    .map(|l| {
                        at(first, g.ld_first, g.transpose_first, i, l)
                            * at(second, g.ld_second, g.transpose_second, l, j)
                    })
                    .sum();
            }
        }
        out
    }

    /// For every pair of transpositions, the call's arguments, carried out as BLAS defines
    /// them on the row-major operands' memory, give `op(a) · op(b)` row by row.
    #[test]
    fn the_cublas_call_computes_the_row_major_product() {
        let (m, k, n) = (5, 7, 3);
        let at = |data: &[f32], columns: usize, r: usize, c: usize| data[r * columns + c];
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let a_dims = if ta { [k, m] } else { [m, k] };
            let b_dims = if tb { [n, k] } else { [k, n] };
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.91).cos()).collect();
            let op_a = |i: usize, l: usize| if ta { at(&a, m, l, i) } else { at(&a, k, i, l) };
            let op_b = |l: usize, j: usize| if tb { at(&b, k, j, l) } else { at(&b, n, l, j) };
            let want: Vec<f32> = (0..m * n)
                .map(|at| (0..k).map(|l| op_a(at / n, l) * op_b(l, at % n)).sum())
                .collect();
            let gemm = Gemm::of(a_dims, b_dims, ta, tb).unwrap();
            let got = column_major_gemm(&gemm, &b, &a);
            assert_close(&got, &want, &format!("transposed {ta} {tb}: {gemm:?}"));
        }
        assert!(Gemm::of([2, 3], [2, 3], false, false).is_err());
    }

    #[test]
    fn sizes_name_a_mismatch() {
        assert_eq!(sizes([2, 3], [3, 4], false, false), Ok((2, 3, 4)));
        assert_eq!(sizes([3, 2], [4, 3], true, true), Ok((2, 3, 4)));
        let err = sizes([2, 3], [4, 3], false, false).unwrap_err();
        assert!(err.contains("inner sizes 3 and 4"), "{err}");
    }

    #[test]
    fn settings_have_names() {
        assert_eq!("cuBLAS".parse::<Products>(), Ok(Products::Cublas));
        assert_eq!(
            "cublas-async".parse::<Products>(),
            Ok(Products::CublasAsync)
        );
        assert_eq!(Products::default().to_string(), "cubecl");
        assert_eq!(Products::CublasAsync.to_string(), "cublas-async");
        let err = "cudnn".parse::<Products>().unwrap_err();
        assert!(
            err.contains("`cubecl`") && err.contains("`cublas`") && err.contains("`cublas-async`"),
            "{err}"
        );
        let cublas: Vec<Products> = NAMES
            .iter()
            .map(|&(p, _)| p)
            .filter(|p| p.is_cublas())
            .collect();
        assert_eq!(cublas, [Products::Cublas, Products::CublasAsync]);
    }
}
