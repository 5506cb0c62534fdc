//! The product on cubecl's devices: cuBLAS's on device `cuda` when the process chose it and
//! the operands allow it (`cublas.rs`), burn's otherwise.

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;

use super::{ProductOps, product_by_ops};

// `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
// implementation records the product as one operation.
impl ProductOps for CubeBackend {
    fn product(a: CubeTensor, b: CubeTensor, transpose_a: bool, transpose_b: bool) -> CubeTensor {
        #[cfg(feature = "cuda")]
        if super::cublas::applies(&a, &b, transpose_a, transpose_b) {
            return super::cublas::product(a, b, transpose_a, transpose_b);
        }
        product_by_ops::<CubeBackend>(a, b, transpose_a, transpose_b)
    }
}
