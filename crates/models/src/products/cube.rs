//! The product on cubecl's devices: cuBLAS's on device `cuda` when the process chose it and
//! the operands allow it (`cublas.rs`), burn's otherwise.

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

use super::{ProductOps, backward_by_ops, gradient_products, product_by_ops};

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records each method as one operation.
impl ProductOps for CubeBackend {
    fn product(a: CubeTensor, b: CubeTensor, transpose_a: bool, transpose_b: bool) -> CubeTensor {
        #[cfg(feature = "cuda")]
        if super::cublas::applies(&a, &b, transpose_a, transpose_b) {
            let [out] = super::cublas::products([(a, b, transpose_a, transpose_b)]);
            return out;
        }
        product_by_ops::<CubeBackend>(a, b, transpose_a, transpose_b)
    }

    fn product_backward(
        a: CubeTensor,
        b: CubeTensor,
        g: CubeTensor,
        transpose_a: bool,
        transpose_b: bool,
    ) -> (CubeTensor, CubeTensor) {
        let products = gradient_products(a, b, g, transpose_a, transpose_b);
        #[cfg(feature = "cuda")]
        if products
            .iter()
            .all(|(x, y, tx, ty)| super::cublas::applies(x, y, *tx, *ty))
        {
            let [grad_a, grad_b] = super::cublas::products(products);
            return (grad_a, grad_b);
        }
        backward_by_ops::<CubeBackend>(products)
    }
}
