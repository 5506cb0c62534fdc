//! Who multiplies the models' matrices on a GPU: cubecl's own kernels (burn's products,
//! the default) or NVIDIA's cuBLAS, so that one build can time the two against each other.
//!
//! Every `Linear` of the models is one `[rows, d_in] · [d_in, d_out]` product forward and two
//! backward (`mixed::product`); the transformer's training attention makes six batches of
//! products over `[batch, heads]` a layer (`attention.rs`: `q kᵀ` and `P v` forward, four
//! backward), and the recurrent families' chunked scans batches over `[batch, chunks, heads]`
//! (`recurrent.rs`, `gdn.rs`, `slice.rs`). On an H200, cubek-matmul's fastest product ran at
//! about 7 × 10¹³ operations/s (docs/gpu-speed.md, "The tuner's early stop"), a fraction of the
//! TF32 tensor-core rate cuBLAS reaches for the reference's PyTorch, and at d512 the transformer's
//! products alone come to about the reference's whole step. [`ProductOps::product`] is
//! `op(a) · op(b)` (`op` a transposition of the last two dimensions or none; dimensions before
//! those a batch) as one differentiable operation, and [`product_of`] (tensors) and
//! [`backend_product`] (a backend's primitives, inside another operation) the choice between it
//! and burn's product: on CUDA with cuBLAS chosen by `cublasGemmStridedBatchedEx`, in TF32
//! for `f32` operands, with `f32` accumulation for bf16 ones (Mamba-3's `Linear`s under the
//! reference's autocast; `products/cublas.rs`), elsewhere by burn's product of the
//! (transposed) operands. Its backward pass is two such products (with `g` the output's
//! gradient):
//!
//! ```text
//! c = a · b        da = g · bᵀ     db = aᵀ · g
//! ```
//!
//! cubecl does not hand out the CUDA stream its kernels run on, so the cuBLAS products run on
//! a stream of their own, ordered against cubecl's kernels in one of two ways. With `cublas`,
//! by host waits: cubecl's queue is drained before a call and the call's stream after it; a
//! `Linear`'s forward product takes one such pair of waits a step, its backward pass's two
//! products another ([`ProductOps::product_backward`], one operation), each of attention's
//! products one. With `cublas-async`, on the GPU by flags in device memory
//! (`products/flags.rs`), the host never waiting. What the products gain must outweigh the
//! ordering's cost; only a GPU can say whether they do.
//!
//! The environment variable `CWM_PRODUCTS` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --products` for one run):
//!
//! | value | products |
//! |---|---|
//! | unset, empty or `cubecl` | burn's (cubecl's kernels; the CPU's own on `flex`) |
//! | `cublas` | cuBLAS's, for the `f32` products (in TF32) of the `Linear`s, the training attention and the chunked scans and the bf16 `Linear`s' (`f32` accumulation) on device `cuda`, ordered by host waits |
//! | `cublas-async` | the same, ordered on the GPU by flags (`products/flags.rs`) |
//!
//! `cube-cpu` refuses either `cublas` when its device is made, and `cwm model bench
//! --products` on any device but `cuda`; the CPU (`flex`) never reads the variable, as with
//! cwm's other settings of cubecl's devices.
//!
//! A process's first cuBLAS product of each kind (a pair of transpositions, one product or a
//! batch) is also computed by burn and the two compared; a difference beyond TF32's rounding
//! stops the process, naming the shapes.

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

/// Who multiplies the `Linear`s', the training attention's and the chunked scans' matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// burn's products: cubecl's kernels on cubecl's devices.
    #[default]
    Cubecl,
    /// cuBLAS's products in TF32, on device `cuda`, ordered by host waits.
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

crate::env_setting::setting_names!(Products {
    Cubecl => "cubecl",
    Cublas => "cublas",
    CublasAsync => "cublas-async",
});

/// Whether the process's products are cuBLAS's.
pub(crate) fn cublas_chosen() -> bool {
    PRODUCTS.chosen().is_some_and(Products::is_cublas)
}

/// Whether the process's cuBLAS products are ordered on the GPU rather than by host waits.
#[cfg(feature = "cuda")]
pub(crate) fn cublas_async() -> bool {
    PRODUCTS.chosen() == Some(Products::CublasAsync)
}

/// `op(a) · op(b)` as the process multiplies: by [`ProductOps::product`] where cuBLAS is
/// chosen (the transpositions passed to cuBLAS, no copy made), else burn's product of the
/// (transposed) operands: how `mixed::product` multiplies a `Linear`'s rows by its
/// weight, the fused losses their head's, and the recurrent families' chunked scans their
/// chunks'. Operands whose leading dimensions differ (burn broadcasts them; the operation does
/// not) take burn's product whatever the setting.
///
/// # Shapes
/// - as [`ProductOps::product`], or leading dimensions burn's product broadcasts
pub fn product_of<const D: usize>(
    a: Tensor<D>,
    b: Tensor<D>,
    transpose_a: bool,
    transpose_b: bool,
) -> Tensor<D> {
    let (a, b) = (a.into_dispatch(), b.into_dispatch());
    Tensor::<D>::from_dispatch(backend_product::<Dispatch>(a, b, transpose_a, transpose_b))
}

/// [`product_of`] on a backend's primitives, for code inside a backend operation (the
/// training attention's): [`ProductOps::product`] where cuBLAS is chosen and the leading
/// dimensions agree, else burn's product, which fusion may fuse with the operations around it.
pub(crate) fn backend_product<B: ProductOps>(
    a: FloatTensor<B>,
    b: FloatTensor<B>,
    transpose_a: bool,
    transpose_b: bool,
) -> FloatTensor<B> {
    use burn::backend::TensorMetadata as _;
    let (a_shape, b_shape) = (a.shape(), b.shape());
    if cublas_chosen() && leading_dims(&a_shape) == leading_dims(&b_shape) {
        B::product(a, b, transpose_a, transpose_b)
    } else {
        product_by_ops::<B>(a, b, transpose_a, transpose_b)
    }
}

/// The dimensions of `shape` before its last two: a product's batch.
fn leading_dims(shape: &burn::backend::Shape) -> &[usize] {
    &shape.as_slice()[..shape.num_dims().saturating_sub(2)]
}

/// The sizes of `op(a) · op(b)`: `batch` products (the leading dimensions' product) of
/// `[m, k] · [k, n]`.
#[cfg(any(feature = "cuda", feature = "cube-cpu", test))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sizes {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// The sizes of `op(a) · op(b)` for row-major operands of shapes `a` and `b`, `op` transposing
/// the last two dimensions where `transpose_*` says; any dimensions before those are a batch
/// of products, the same for both operands (no broadcasting).
///
/// # Errors
/// The ranks differ or are under 2, the leading dimensions differ, or the inner sizes differ.
#[cfg(any(feature = "cuda", feature = "cube-cpu", test))]
pub(crate) fn sizes(
    a: &[usize],
    b: &[usize],
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Sizes, String> {
    let name = |dims: &[usize], t: bool| format!("{dims:?}{}", if t { "ᵀ" } else { "" });
    let what = || {
        format!(
            "a product of {} by {}",
            name(a, transpose_a),
            name(b, transpose_b)
        )
    };
    let rank = a.len();
    if rank < 2 || b.len() != rank {
        return Err(format!("{}: ranks {} and {}", what(), rank, b.len()));
    }
    let (lead, lead_b) = (&a[..rank - 2], &b[..rank - 2]);
    if lead != lead_b {
        return Err(format!(
            "{}: leading dimensions {lead:?} and {lead_b:?} (no broadcasting)",
            what()
        ));
    }
    let (a2, b2) = ([a[rank - 2], a[rank - 1]], [b[rank - 2], b[rank - 1]]);
    let [m, k] = if transpose_a { [a2[1], a2[0]] } else { a2 };
    let [k_b, n] = if transpose_b { [b2[1], b2[0]] } else { b2 };
    if k != k_b {
        return Err(format!("{}: inner sizes {k} and {k_b}", what()));
    }
    Ok(Sizes {
        batch: lead.iter().product(),
        m,
        k,
        n,
    })
}

/// The output's shape: `a`'s leading dimensions, then `[m, n]`.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) fn output_shape(a: &[usize], m: usize, n: usize) -> burn::backend::Shape {
    let mut dims = a[..a.len() - 2].to_vec();
    dims.extend([m, n]);
    burn::backend::Shape::from(dims)
}

/// One `cublasGemmStridedBatchedEx` call's arguments for `c = op(a) · op(b)` with row-major
/// operands, a batch of one or more products.
///
/// cuBLAS reads matrices column by column, and a row-major `[r, c]` matrix read so is its
/// transpose, `[c, r]` with leading dimension `c`. So the call computes `cᵀ = op(b)ᵀ · op(a)ᵀ`:
/// cuBLAS's first operand is `b`, its second `a`, and what it writes, `cᵀ` column by column,
/// is `c` row by row. The matrices of a batch follow each other, each operand's a whole
/// matrix apart.
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
    /// The number of products.
    pub batch: usize,
    /// The distances, in elements, from one matrix of `b`, `a` and the output to the next.
    pub stride_first: usize,
    /// See [`Gemm::stride_first`].
    pub stride_second: usize,
    /// See [`Gemm::stride_first`].
    pub stride_out: usize,
}

#[cfg(any(feature = "cuda", test))]
impl Gemm {
    /// The call for contiguous row-major operands of shapes `a` and `b`.
    ///
    /// # Errors
    /// As [`sizes`].
    pub(crate) fn of(
        a: &[usize],
        b: &[usize],
        transpose_a: bool,
        transpose_b: bool,
    ) -> Result<Gemm, String> {
        let Sizes { batch, m, k, n } = sizes(a, b, transpose_a, transpose_b)?;
        Ok(Gemm {
            transpose_first: transpose_b,
            transpose_second: transpose_a,
            m: n,
            n: m,
            k,
            ld_first: if transpose_b { k } else { n },
            ld_second: if transpose_a { m } else { k },
            ld_out: n,
            batch,
            stride_first: k * n,
            stride_second: m * k,
            stride_out: m * n,
        })
    }
}

/// The output's spec, for fusion: [`output_shape`] in `a`'s type.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn product_spec(
    a: &burn::backend::fusion::custom::TensorSpec,
    b: &burn::backend::fusion::custom::TensorSpec,
    transpose_a: &bool,
    transpose_b: &bool,
) -> burn::backend::fusion::custom::TensorSpec {
    let (a_dims, b_dims) = (a.shape.as_slice(), b.shape.as_slice());
    let sizes = sizes(a_dims, b_dims, *transpose_a, *transpose_b)
        .unwrap_or_else(|reason| panic!("{reason}"));
    burn::backend::fusion::custom::TensorSpec::new(output_shape(a_dims, sizes.m, sizes.n), a.dtype)
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
    /// `op(a) · op(b)`, `op` transposing an operand's last two dimensions where its flag says;
    /// dimensions before those are a batch of products, the same for both operands.
    ///
    /// # Shapes
    /// - `a`: `[.., m, k]` (`[.., k, m]` transposed); `b`: `[.., k, n]` (`[.., n, k]` transposed)
    /// - output: `[.., m, n]`
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

// Used by the cuBLAS module; on `cube-cpu` by its tests alone.
#[cfg(any(feature = "cuda", all(test, feature = "cube-cpu")))]
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

/// A primitive's shape.
#[cfg(feature = "cuda")]
fn dims_of<T: burn::backend::TensorMetadata>(t: &T) -> Vec<usize> {
    t.shape().as_slice().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    use crate::causal_conv::tests::{assert_close, values};

    /// The output and both gradients under `sum(out ∘ r)`, of `op(a) · op(b)` made by `apply`.
    fn run<const D: usize>(
        apply: &dyn Fn(Tensor<D>, Tensor<D>) -> Tensor<D>,
        a: &Tensor<D>,
        b: &Tensor<D>,
        r: &Tensor<D>,
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

    /// A tensor of fixed values on `device`, scrambled by `salt`.
    fn filled<const D: usize>(dims: [usize; D], salt: f32, device: &Device) -> Tensor<D> {
        let values: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|i| (i as f32 * 0.37 + salt).sin())
            .collect();
        Tensor::<D>::from_data(burn::tensor::TensorData::new(values, dims), device)
    }

    /// `dims` with its last two transposed where `t` says.
    fn stored<const D: usize>(mut dims: [usize; D], t: bool) -> [usize; D] {
        if t {
            dims.swap(D - 2, D - 1);
        }
        dims
    }

    /// On `device`, for `op(a) · op(b)` of `[.., 5, 7] · [.., 7, 3]` (`lead` the leading
    /// dimensions, `a` and `b` stored transposed where `ta` and `tb` say): the operation's
    /// output and gradients, and burn's product's.
    fn both_ways<const D: usize>(
        device: &Device,
        lead: &[usize],
        ta: bool,
        tb: bool,
    ) -> [[Vec<f32>; 3]; 2] {
        let dims = |rows: usize, columns: usize| -> [usize; D] {
            let mut all = lead.to_vec();
            all.extend([rows, columns]);
            all.try_into().expect("D dimensions")
        };
        let (m, k, n) = (5, 7, 3);
        let a = filled(stored(dims(m, k), ta), 0.5, device);
        let b = filled(stored(dims(k, n), tb), 1.5, device);
        let r = filled(dims(m, n), 2.5, device);
        let op = |x: Tensor<D>, t: bool| if t { x.transpose() } else { x };
        let by_burn = run(&|a, b| op(a, ta).matmul(op(b, tb)), &a, &b, &r);
        let by_op = |a: Tensor<D>, b: Tensor<D>| {
            let out =
                <Dispatch as ProductOps>::product(a.into_dispatch(), b.into_dispatch(), ta, tb);
            Tensor::<D>::from_dispatch(out)
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

    const PAIRS: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

    /// For every pair of transpositions, the operation's output and gradients are burn's
    /// product of the transposed operands' (non-square, so that a size mixed up shows): one
    /// product, and batches of them over one and two leading dimensions.
    #[test]
    fn the_product_and_its_gradients_are_burns_for_every_transposition() {
        let device = Device::flex().autodiff();
        for (ta, tb) in PAIRS {
            let what = |lead: &str| format!("transposed {ta} {tb}, leading {lead}");
            let [by_op, by_burn] = both_ways::<2>(&device, &[], ta, tb);
            assert_parts(&by_op, &by_burn, &what("[]"));
            let [by_op, by_burn] = both_ways::<3>(&device, &[4], ta, tb);
            assert_parts(&by_op, &by_burn, &what("[4]"));
            let [by_op, by_burn] = both_ways::<4>(&device, &[2, 3], ta, tb);
            assert_parts(&by_op, &by_burn, &what("[2, 3]"));
        }
    }

    /// With one operand tracked, its gradient alone is computed (one product), and it is
    /// burn's, for every pair of transpositions.
    #[test]
    fn one_tracked_operand_gets_burns_gradient() {
        let device = Device::flex().autodiff();
        let (m, k, n) = (5, 7, 3);
        let r = filled([2, m, n], 2.5, &device);
        for (ta, tb) in PAIRS {
            let a = filled(stored([2, m, k], ta), 0.5, &device);
            let b = filled(stored([2, k, n], tb), 1.5, &device);
            let op = |x: Tensor<3>, t: bool| if t { x.transpose() } else { x };
            for track_a in [true, false] {
                let grad_of = |by_op: bool| {
                    let (a, b) = if track_a {
                        (a.clone().require_grad(), b.clone())
                    } else {
                        (a.clone(), b.clone().require_grad())
                    };
                    let out = if by_op {
                        Tensor::<3>::from_dispatch(<Dispatch as ProductOps>::product(
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

    /// One tensor as both operands (`k kᵀ`, as Gated DeltaNet's chunks multiply): its gradient
    /// is the sum of both operands' gradients, burn's.
    #[test]
    fn one_tensor_as_both_operands_gets_both_gradients() {
        let device = Device::flex().autodiff();
        let k = filled([2, 5, 7], 0.5, &device);
        let r = filled([2, 5, 5], 2.5, &device);
        let grad_of = |by_op: bool| {
            let k = k.clone().require_grad();
            let out = if by_op {
                Tensor::<3>::from_dispatch(<Dispatch as ProductOps>::product(
                    k.clone().into_dispatch(),
                    k.clone().into_dispatch(),
                    false,
                    true,
                ))
            } else {
                k.clone().matmul(k.clone().transpose())
            };
            let grads = (out * r.clone()).sum().backward();
            values(k.grad(&grads).expect("tracked"))
        };
        assert_close(&grad_of(true), &grad_of(false), "k kᵀ");
    }

    /// On `cube-cpu` the product is one operation fusion records (its output's shape from
    /// `product_spec`), burn's product there (the setting is cubecl's), and gives the CPU's
    /// output and gradients for every pair of transpositions, one product and a batch
    /// (`CARGO_TARGET_DIR=target/cuda cargo test --release -p cwm-models --features cube-cpu
    /// --lib products`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn on_cube_cpu_the_product_is_the_cpus_for_every_transposition() {
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        let cpu = Device::flex().autodiff();
        for (ta, tb) in PAIRS {
            let [on_cube, _] = both_ways::<2>(&cube, &[], ta, tb);
            let [on_cpu, _] = both_ways::<2>(&cpu, &[], ta, tb);
            assert_parts(
                &on_cube,
                &on_cpu,
                &format!("cube-cpu, transposed {ta} {tb}"),
            );
            let [on_cube, _] = both_ways::<4>(&cube, &[2, 3], ta, tb);
            let [on_cpu, _] = both_ways::<4>(&cpu, &[2, 3], ta, tb);
            assert_parts(
                &on_cube,
                &on_cpu,
                &format!("cube-cpu, batched, transposed {ta} {tb}"),
            );
        }
    }

    /// With burn's products chosen (the CPU never reads the setting), `product_of` and
    /// `backend_product` are burn's product of the transposed operands, to the bit.
    #[test]
    fn product_of_is_burns_product_without_cublas() {
        let device = Device::flex();
        let a = Tensor::<3>::random([3, 6, 4], Distribution::Normal(0.0, 1.0), &device);
        let b = Tensor::<3>::random([3, 2, 6], Distribution::Normal(0.0, 1.0), &device);
        let want = values(a.clone().transpose().matmul(b.clone().transpose()));
        assert_eq!(values(product_of(a.clone(), b.clone(), true, true)), want);
        let by_backend =
            backend_product::<Dispatch>(a.into_dispatch(), b.into_dispatch(), true, true);
        assert_eq!(values(Tensor::<3>::from_dispatch(by_backend)), want);
    }

    /// `g` carried out with BLAS's meaning of its arguments (column-major operands, a
    /// transposition flag each, the batch's matrices a stride apart), by loops: what cuBLAS
    /// computes for it.
    fn column_major_gemm(g: &Gemm, first: &[f32], second: &[f32]) -> Vec<f32> {
        let at = |data: &[f32], ld: usize, transposed: bool, i: usize, j: usize| {
            if transposed {
                data[j + i * ld]
            } else {
                data[i + j * ld]
            }
        };
        let mut out = vec![0.0; g.stride_out * (g.batch - 1) + g.ld_out * g.n];
        for p in 0..g.batch {
            let first = &first[p * g.stride_first..];
            let second = &second[p * g.stride_second..];
            for j in 0..g.n {
                for i in 0..g.m {
                    out[p * g.stride_out + i + j * g.ld_out] = (0..g.k)
                        .map(|l| {
                            at(first, g.ld_first, g.transpose_first, i, l)
                                * at(second, g.ld_second, g.transpose_second, l, j)
                        })
                        .sum();
                }
            }
        }
        out
    }

    /// For every pair of transpositions, the call's arguments, carried out as BLAS defines
    /// them on the row-major operands' memory, give `op(a) · op(b)` row by row, for one product
    /// and for a batch of three.
    #[test]
    fn the_cublas_call_computes_the_row_major_product() {
        let (m, k, n) = (5, 7, 3);
        let at = |data: &[f32], columns: usize, r: usize, c: usize| data[r * columns + c];
        for (ta, tb) in PAIRS {
            for batch in [1, 3] {
                let a_dims = stored([batch, m, k], ta);
                let b_dims = stored([batch, k, n], tb);
                let a: Vec<f32> = (0..batch * m * k)
                    .map(|i| (i as f32 * 0.37).sin())
                    .collect();
                let b: Vec<f32> = (0..batch * k * n)
                    .map(|i| (i as f32 * 0.91).cos())
                    .collect();
                let want: Vec<f32> = (0..batch * m * n)
                    .map(|at_out| {
                        let (p, at_out) = (at_out / (m * n), at_out % (m * n));
                        let (a, b) = (&a[p * m * k..], &b[p * k * n..]);
                        let op_a =
                            |i: usize, l: usize| if ta { at(a, m, l, i) } else { at(a, k, i, l) };
                        let op_b =
                            |l: usize, j: usize| if tb { at(b, k, j, l) } else { at(b, n, l, j) };
                        (0..k)
                            .map(|l| op_a(at_out / n, l) * op_b(l, at_out % n))
                            .sum()
                    })
                    .collect();
                let gemm = Gemm::of(&a_dims, &b_dims, ta, tb).unwrap();
                assert_eq!(gemm.batch, batch);
                let got = column_major_gemm(&gemm, &b, &a);
                assert_close(&got, &want, &format!("transposed {ta} {tb}: {gemm:?}"));
            }
        }
        assert!(Gemm::of(&[2, 3], &[2, 3], false, false).is_err());
    }

    #[test]
    fn sizes_name_a_mismatch() {
        let sized = |batch, m, k, n| Ok(Sizes { batch, m, k, n });
        assert_eq!(sizes(&[2, 3], &[3, 4], false, false), sized(1, 2, 3, 4));
        assert_eq!(sizes(&[3, 2], &[4, 3], true, true), sized(1, 2, 3, 4));
        assert_eq!(
            sizes(&[5, 6, 3, 2], &[5, 6, 4, 3], true, true),
            sized(30, 2, 3, 4)
        );
        let err = sizes(&[2, 3], &[4, 3], false, false).unwrap_err();
        assert!(err.contains("inner sizes 3 and 4"), "{err}");
        let err = sizes(&[5, 2, 3], &[6, 3, 4], false, false).unwrap_err();
        assert!(err.contains("leading dimensions [5] and [6]"), "{err}");
        let err = sizes(&[5, 2, 3], &[3, 4], false, false).unwrap_err();
        assert!(err.contains("ranks 3 and 2"), "{err}");
        assert!(sizes(&[3], &[3], false, false).is_err());
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
