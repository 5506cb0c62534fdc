//! [`Precision::Bf16`]: the reference's bf16 autocast, reduced to what changes its numbers.
//!
//! Under `torch.autocast(dtype=bfloat16)` a `Linear` multiplies bf16 copies of its input and
//! weight (accumulating in f32 on the GPU's tensor cores) and returns bf16; the cross-entropy
//! runs in f32 on those bf16 logits; the master weights, their gradients and the optimizer stay
//! f32. [`linear`] does the same for one `Linear` (the result goes back to f32 at once, so the
//! element-wise work after it stays f32, where autocast would keep some of it in bf16), and
//! [`bf16_denominator`] reproduces how the reference's loss counts its denominator in the
//! logits' dtype (spec A.4).

use burn::nn::Linear;
use burn::prelude::*;
use burn::tensor::FloatDType;

use crate::column_sums::add_row;
use crate::config::Precision;
use crate::head::LABEL_GROUPS;
use crate::products::product_of;
use crate::split::split;

/// `linear.forward(x)` in `precision`: for [`Precision::Bf16`] the input, weight and bias are
/// rounded to bf16, multiplied with f32 accumulation, and the output is rounded to bf16 and
/// returned as f32. The gradient reaches the f32 weights through the casts.
///
/// # Shapes
/// - `x`: `[.., d_in]`; output: `[.., d_out]`
pub fn linear<const D: usize>(precision: Precision, linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    // The whole weight as it is: a slice of it, even a full one, would be a node whose
    // backward pass builds a zero tensor of the weight's shape and writes the gradient into it.
    let bias = linear.bias.as_ref().map(|b| b.val());
    product(precision, x, linear.weight.val(), bias)
}

/// `linear`'s output cut into groups of columns side by side from the first (the halves of the
/// transformer's packed MLP projection on the CPU), each group a product with its columns of the
/// weight, in `precision` as [`linear`]. The weight and the bias are cut once
/// ([`crate::split::split`]), so their gradients are assembled once, not each group's in a
/// tensor of the whole weight's shape.
///
/// # Shapes
/// - `x`: `[.., d_in]`; output: `[.., widths[i]]` for each group
pub fn column_groups<const D: usize>(
    precision: Precision,
    x: Tensor<D>,
    linear: &Linear,
    widths: &[usize],
) -> Vec<Tensor<D>> {
    let weights = split(linear.weight.val(), 1, widths);
    let biases = match &linear.bias {
        Some(b) => split(b.val(), 0, widths).into_iter().map(Some).collect(),
        None => vec![None; widths.len()],
    };
    weights
        .into_iter()
        .zip(biases)
        .map(|(weight, bias)| product(precision, x.clone(), weight, bias))
        .collect()
}

/// The outputs of several `Linear`s of the same input side by side, as one product with their
/// weights side by side (concatenated on each call, a `[d_in, Σ d_out]` copy whose backward
/// pass hands each weight its columns of the gradient), in `precision` as [`linear`]. A layer
/// without a bias adds zeros where others have one.
///
/// # Shapes
/// - `x`: `[.., d_in]`; output: `[.., Σ d_out]`, the layers' columns in their order
pub fn side_by_side<const D: usize>(
    precision: Precision,
    x: Tensor<D>,
    linears: &[&Linear],
) -> Tensor<D> {
    let weight = Tensor::cat(linears.iter().map(|l| l.weight.val()).collect(), 1);
    let bias = linears.iter().any(|l| l.bias.is_some()).then(|| {
        let part = |l: &&Linear| match &l.bias {
            Some(b) => b.val(),
            None => Tensor::zeros([l.weight.dims()[1]], &x.device()),
        };
        Tensor::cat(linears.iter().map(part).collect(), 0)
    });
    product(precision, x, weight, bias)
}

/// `linear.forward(x)` in f32, as one product over all of `x`'s rows ([`linear`] with
/// [`Precision::F32`]): how every `Linear` of the models is applied.
///
/// # Shapes
/// - `x`: `[.., d_in]`; output: `[.., d_out]`
pub fn project<const D: usize>(linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    self::linear(Precision::F32, linear, x)
}

/// `x · weight + bias` in `precision` (see [`linear`]), with `x`'s leading dimensions folded
/// into the rows of one `[rows, d_in] · [d_in, d_out]` product, as PyTorch's `Linear` does.
///
/// burn applies a weight to a `[batch, seq, d_in]` input as a batched product with the weight
/// broadcast over the batch, so its backward pass computes the weight's gradient as one
/// `[d_in, d_out]` product per batch element, `[batch, d_in, d_out]` in all, then sums them (at
/// d512 and batch 128 the transformer's MLP input projection alone is a 1 GiB temporary). On
/// the folded rows the weight's gradient is one product over all `batch · seq` rows, and the
/// bias's one column sum, in two stages on cubecl's devices ([`crate::column_sums`]; the
/// bias is added as burn's `linear` adds it, after the product). With `CWM_PRODUCTS=cublas`
/// the product is cuBLAS's on `cuda`, in either precision ([`crate::products::product_of`]).
pub(crate) fn product<const D: usize>(
    precision: Precision,
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    let mut dims = x.dims();
    let [d_in, d_out] = weight.dims();
    let rows: Tensor<2> = x.reshape([dims[..D - 1].iter().product(), d_in]);
    let (rows, weight, bias) = match precision {
        Precision::F32 => (rows, weight, bias),
        Precision::Bf16 => (to_bf16(rows), to_bf16(weight), bias.map(to_bf16)),
    };
    let mut y = product_of(rows, weight, false, false);
    if let Some(bias) = bias {
        y = add_row(y, bias);
    }
    if precision == Precision::Bf16 {
        y = y.cast(FloatDType::F32);
    }
    dims[D - 1] = d_out;
    y.reshape(dims)
}

fn to_bf16<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    x.cast(FloatDType::BF16)
}

/// The reference's loss denominator under bf16 autocast, from the number of valid steps
/// (`[1]`, an integer-valued f32, exact below 2²⁴): each label group's count (`valid_steps ×
/// labels in the group`) rounded to bf16, then the seven counts added in the group order
/// (pieces, side, castle, en-passant file and rank, halfmove, fullmove) with a rounding to
/// bf16 after every addition, as `compute_state_loss` does with its bf16 running total. In f32
/// the denominator is `75 × valid_steps`; here it is off by up to about 0.4 %. Computed on the
/// device, so it costs no read-back.
pub fn bf16_denominator(valid_steps: Tensor<1>) -> Tensor<1> {
    let round = |x: Tensor<1>| to_bf16(x).cast(FloatDType::F32);
    LABEL_GROUPS
        .iter()
        .fold(valid_steps.zeros_like(), |total, group| {
            let count = round(valid_steps.clone().mul_scalar(group.n_labels as f32));
            round(total + count)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::head::torch_linear;

    /// `x` rounded to the nearest bf16 (ties to even), as an f32.
    fn round_bf16(x: f32) -> f32 {
        burn::tensor::bf16::from_f32(x).to_f32()
    }

    #[test]
    fn a_bf16_linear_rounds_its_operands_and_its_output() {
        // Its random draws stay out of the other tests' seeded sequences.
        let _rng = crate::rng_lock();
        let device = Device::flex();
        let layer = torch_linear(48, 20, true, &device);
        let x = Tensor::<2>::random([5, 48], burn::tensor::Distribution::Default, &device);
        let got: Vec<f32> = linear(Precision::Bf16, &layer, x.clone())
            .into_data()
            .try_to_vec()
            .unwrap();
        let round = |t: Tensor<2>| -> Vec<f32> {
            t.into_data()
                .try_to_vec::<f32>()
                .unwrap()
                .into_iter()
                .map(round_bf16)
                .collect()
        };
        let (xs, w) = (round(x.clone()), round(layer.weight.val()));
        let b = layer
            .bias
            .as_ref()
            .unwrap()
            .val()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (row, col) = (i / 20, i % 20);
            let dot: f32 = (0..48).map(|k| xs[row * 48 + k] * w[k * 20 + col]).sum();
            let bias = round_bf16(b[col]);
            let expected = dot + bias;
            assert_eq!(g, round_bf16(g), "output {i} is not a bf16 value");
            // The backend rounds the product and the sum with the bias (two bf16 roundings,
            // each within 2⁻⁹ of its value; cuBLAS would round once).
            let bound = (dot.abs() + expected.abs()) / 256.0;
            assert!((g - expected).abs() <= bound, "{g} vs {expected}");
        }
        let exact: Vec<f32> = linear(Precision::F32, &layer, x)
            .into_data()
            .try_to_vec()
            .unwrap();
        assert_ne!(got, exact, "bf16 must change the numbers");
        assert!(got.iter().zip(&exact).all(|(g, e)| (g - e).abs() < 0.05));
    }

    /// The values of `t`.
    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.into_data().try_to_vec().unwrap()
    }

    /// `got` within `tol` of `want` everywhere, else the first element that is not.
    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        if let Some(i) = (0..got.len()).find(|&i| (got[i] - want[i]).abs() > tol) {
            panic!("{what}[{i}]: {} against {}", got[i], want[i]);
        }
    }

    /// The output and the gradients of the input, the weight and the bias under `sum(y ∘ r)`.
    fn output_and_gradients<const D: usize>(
        apply: &dyn Fn(&Linear, Tensor<D>) -> Tensor<D>,
        layer: &Linear,
        x: &Tensor<D>,
        r: &Tensor<D>,
    ) -> Vec<Vec<f32>> {
        let x = x.clone().detach().require_grad();
        let y = apply(layer, x.clone());
        let grads = (y.clone() * r.clone()).sum().backward();
        let mut all = vec![values(y), values(x.grad(&grads).expect("x tracked"))];
        all.push(values(
            layer.weight.val().grad(&grads).expect("weight tracked"),
        ));
        if let Some(bias) = &layer.bias {
            all.push(values(bias.val().grad(&grads).expect("bias tracked")));
        }
        all
    }

    /// `project` folds the leading dimensions into rows and unfolds the output: the same output
    /// and gradients as burn's `Linear::forward` on inputs of three and four dimensions, with
    /// and without a bias (a fold that mixed up rows or columns would move values by O(1)).
    #[test]
    fn a_projection_of_all_rows_is_burns_linear_in_value_and_gradients() {
        let _rng = crate::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(11);
        let normal = burn::tensor::Distribution::Normal(0.0, 1.0);
        let names = [
            "output",
            "input's gradient",
            "weight's gradient",
            "bias's gradient",
        ];
        for bias in [true, false] {
            let layer = torch_linear(24, 10, bias, &device);
            let x = Tensor::<3>::random([3, 7, 24], normal, &device);
            let r = Tensor::<3>::random([3, 7, 10], normal, &device);
            let got = output_and_gradients(&|l, x| project(l, x), &layer, &x, &r);
            let want = output_and_gradients(&|l, x| l.forward(x), &layer, &x, &r);
            for ((g, w), name) in got.iter().zip(&want).zip(names) {
                assert_close(g, w, 1e-5, &format!("3 dims, bias {bias}: {name}"));
            }
            let x4 = x.reshape([3, 7, 1, 24]).swap_dims(1, 2);
            let r4 = r.reshape([3, 1, 7, 10]);
            let got = output_and_gradients(&|l, x| project(l, x), &layer, &x4, &r4);
            let want = output_and_gradients(&|l, x| l.forward(x), &layer, &x4, &r4);
            assert_eq!(got.len(), if bias { 4 } else { 3 });
            for ((g, w), name) in got.iter().zip(&want).zip(names) {
                assert_close(g, w, 1e-5, &format!("4 dims, bias {bias}: {name}"));
            }
        }
    }

    #[test]
    fn the_bf16_denominator_is_the_references() {
        // From torch 2.15 on the CPU: the reference's compute_state_loss's denom_sum with bf16
        // logits and `steps` valid steps (in f32 it would be 75 × steps).
        let torch = [
            (1, 75.0),
            (37, 2_768.0),
            (100, 7_488.0),
            (1_000, 75_264.0),
            (4_567, 339_968.0),
            (22_016, 1_654_784.0),
        ];
        let device = Device::flex();
        for (steps, expected) in torch {
            let steps = Tensor::<1>::from_data([steps as f32], &device);
            let got: Vec<f32> = bf16_denominator(steps).into_data().try_to_vec().unwrap();
            assert_eq!(got, [expected], "{expected}");
        }
    }
}
