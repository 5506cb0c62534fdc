//! Every label's cross-entropy and the gradient of its logits, as one kernel on cubecl's
//! devices (`cuda`, `cube-cpu`): the heart of the device's fused loss
//! ([`crate::device_loss`]).
//!
//! For a step `s` and a label `l` whose `C` classes are the logits `z[s, f .. f + C]`:
//!
//! ```text
//! m = max_c z_c,   e_c = exp(z_c − m),   Σ = Σ_c e_c
//! ce[s, l]      = m + ln Σ − z[target]
//! grad[s, f + c] = (e_c / Σ − [c = target]) · weight[s]
//! ```
//!
//! one unit per step and label, each reading its label's logits where they lie (through their
//! strides; a matrix product's tiled output is un-tiled first) and writing its columns of the
//! gradient. Built from tensor operations, the same is per label group a maximum, a shift, an
//! exponential, a sum, a gather, a logarithm, a one-hot comparison and a few element-wise
//! operations: some forty launches a step for the five groups of labels that share a class
//! count, where this is one. A target outside its label's classes gives a NaN cross-entropy
//! (the tensor operations' gather would read some other logit).
//!
//! It computes in `f32`; under `bf16` (Mamba-3) the logits it reads are bf16-rounded values in
//! `f32`, as the generic loss's cross-entropy reads them ([`crate::device_loss`]).

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::head::{LABEL_GROUPS, N_LABELS};

/// `(ce, grad)` for the logits `z` (`[steps, 1878]`), the targets as class numbers (`[steps,
/// 75]`, the kernel reads them as they are, with no cast) and each step's weight (`[steps, 1]`,
/// the validity over the loss's denominator): `ce` `[steps, 75]` and `grad` `[steps, 1878]`, as
/// the module docs define them. The tensors are untracked and on a cubecl device.
pub(crate) fn label_losses(
    z: Tensor<2>,
    targets: Tensor<2, Int>,
    weight: Tensor<2>,
) -> (Tensor<2>, Tensor<2>) {
    let table = label_table(&z.device());
    let f32s = |t: Tensor<2>| t.cast(FloatDType::F32).into_dispatch();
    let (ce, grad) = <Dispatch as LabelLossOps>::label_losses(
        f32s(z),
        targets.into_dispatch(),
        f32s(weight),
        f32s(table),
    );
    (Tensor::from_dispatch(ce), Tensor::from_dispatch(grad))
}

/// Each label's first logit and class count, `[75, 2]` in `f32`, in the head's order.
fn label_table(device: &Device) -> Tensor<2> {
    let mut rows = Vec::with_capacity(2 * N_LABELS);
    for group in LABEL_GROUPS {
        for label in 0..group.n_labels {
            let first = group.logit_offset + label * group.n_classes;
            rows.extend([first as f32, group.n_classes as f32]);
        }
    }
    Tensor::from_data(TensorData::new(rows, [N_LABELS, 2]), device)
}

/// The kernel as a backend operation, which fusion records as one.
#[backend_extension(
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu"))
)]
pub trait LabelLossOps: Backend {
    /// `(ce, grad)` (see [`label_losses`]); `table` is [`label_table`]'s.
    #[fusion(meta = |z, targets, _weight, _table| (ce_spec(z, targets), z.clone()))]
    fn label_losses(
        z: FloatTensor<Self>,
        targets: IntTensor<Self>,
        weight: FloatTensor<Self>,
        table: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// The spec of `ce`: the targets' shape in the logits' type.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn ce_spec(
    z: &burn::backend::fusion::custom::TensorSpec,
    targets: &burn::backend::fusion::custom::TensorSpec,
) -> burn::backend::fusion::custom::TensorSpec {
    burn::backend::fusion::custom::TensorSpec::new(targets.shape.clone(), z.dtype)
}

pub(crate) mod cube {
    use burn::backend::cubecl::dtype_to_storage_type;
    use burn::cubecl;
    use burn::cubecl::prelude::*;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::untile;
    use burn_cubecl::tensor::CubeTensor;

    use super::LabelLossOps;
    use crate::causal_conv::cube::{empty_like, grid};

    /// One unit per step and label (the module docs). `ce` is `[steps, labels]`, `grad` `[steps,
    /// logits]`, both contiguous; `table` holds each label's first logit and class count;
    /// `targets` are class numbers of the integer type `I`.
    #[cube(launch, create_dummy_kernel)]
    pub(crate) fn label_loss_kernel<I: Int>(
        z: &Tensor<f32>,
        targets: &Tensor<I>,
        weight: &Tensor<f32>,
        table: &Tensor<f32>,
        ce: &mut Tensor<f32>,
        grad: &mut Tensor<f32>,
        #[define(I)] _dtype: ElemType,
    ) {
        let labels = ce.shape(1);
        let pos = ABSOLUTE_POS;
        if pos >= ce.shape(0) * labels {
            terminate!();
        }
        let (step, label) = (pos / labels, pos % labels);
        let first = usize::cast_from(table[label * table.stride(0)]);
        let classes = usize::cast_from(table[label * table.stride(0) + table.stride(1)]);
        let (row, col) = (step * z.stride(0), z.stride(1));
        let mut max = z[row + first * col];
        for c in 1..classes {
            max = f32::max(max, z[row + (first + c) * col]);
        }
        let mut sum = 0.0f32;
        for c in 0..classes {
            sum += f32::exp(z[row + (first + c) * col] - max);
        }
        let target = targets[step * targets.stride(0) + label * targets.stride(1)];
        let w = weight[step * weight.stride(0)];
        let out = step * grad.shape(1) + first;
        let mut picked = f32::new(f32::NAN);
        for c in 0..classes {
            let logit = z[row + (first + c) * col];
            let mut g = f32::exp(logit - max) / sum;
            if I::cast_from(c) == target {
                g -= 1.0;
                picked = logit;
            }
            grad[out + c] = g * w;
        }
        ce[pos] = max + f32::ln(sum) - picked;
    }

    // `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
    // implementation records this kernel as one operation.
    impl LabelLossOps for CubeBackend {
        fn label_losses(
            z: CubeTensor,
            targets: CubeTensor,
            weight: CubeTensor,
            table: CubeTensor,
        ) -> (CubeTensor, CubeTensor) {
            let (z, targets, weight, table) =
                (untile(z), untile(targets), untile(weight), untile(table));
            let ce = empty_like(&z, targets.meta.shape().clone());
            let grad = empty_like(&z, z.meta.shape().clone());
            let n = ce.meta.shape().num_elements();
            if n == 0 {
                return (ce, grad);
            }
            let (count, dim) = grid(&ce, n);
            let int_type = dtype_to_storage_type(targets.dtype);
            label_loss_kernel::launch(
                &ce.client.clone(),
                count,
                dim,
                z.into_tensor_arg(),
                targets.into_tensor_arg(),
                weight.into_tensor_arg(),
                table.into_tensor_arg(),
                ce.clone().into_tensor_arg(),
                grad.clone().into_tensor_arg(),
                int_type,
            );
            (ce, grad)
        }
    }
}
