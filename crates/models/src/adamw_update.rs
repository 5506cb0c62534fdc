//! The AdamW update of one parameter as one operation: the new parameter and both moments from
//! the old ones and the gradient, in one pass over the four arrays.
//!
//! Written with tensor operations the update is fifteen element-wise operations per parameter
//! (the clipping factor, the decay, two moments, the bias corrections, the step). On the CPU
//! each is a pass over the parameter's memory; on a GPU each is an operation that burn's fusion
//! records and plans on the host before the kernels it merges them into run: 960 per step for
//! the d512 transformer's 64 parameters. Here:
//!
//! | backend | the update |
//! |---|---|
//! | `flex` (the CPU) | one loop over the elements, on rayon's threads, in place where a tensor is not shared |
//! | cubecl's (`cuda`, `cube-cpu`) | one kernel, in place where nothing else holds the tensors, recorded by fusion as one operation |
//! | any other, or a tensor that is not contiguous `f32` | [`adamw_update_by_ops`] |
//!
//! The gradient-norm clipping factor comes as a one-element tensor, `coef`, computed on the
//! device from the global norm, so that an optimizer can queue the whole step before it reads
//! anything back; a NaN there (the loss or the norm was not finite) leaves parameter and
//! moments as they are, as a skipped step must.
//!
//! The check after an update that every parameter is still finite (spec D.1 step 7) rides
//! along: each update takes a one-element `finite` (0, or NaN once a parameter was not finite)
//! and returns it NaN where its own parameter, as the update leaves it, has an element that is
//! not. An optimizer threads one such tensor through all its parameters' updates, so the check
//! costs no reduction per parameter: on a GPU, where each is a launch and an operation for
//! fusion to record, that was one more per parameter and step beside the update's own.
//!
//! Each element goes through the same `f32` operations, in the same order, as
//! [`adamw_update_by_ops`], so on the CPU the two agree bit for bit (the test
//! `the_one_pass_update_equals_the_update_by_operations`).

use std::fmt;
use std::str::FromStr;

use burn::backend::tensor::{BoolTensor, FloatTensor};
use burn::backend::{Backend, Dispatch, TensorMetadata, backend_extension, get_device_settings};
use burn::prelude::*;

use crate::error::ModelError;

/// How an optimizer step updates each parameter (`cwm model bench --update`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdamWUpdate {
    /// `one-pass`: [`adamw_update`], one operation per parameter (the train stage's).
    #[default]
    OnePass,
    /// `ops`: [`adamw_update_by_ops`], the same step as separate tensor operations: the
    /// baseline a GPU session times the one-pass update against.
    Ops,
}

impl AdamWUpdate {
    /// Both, in the order of the variants.
    pub const ALL: [AdamWUpdate; 2] = [AdamWUpdate::OnePass, AdamWUpdate::Ops];

    /// The canonical name (`one-pass`, `ops`).
    pub fn name(self) -> &'static str {
        match self {
            AdamWUpdate::OnePass => "one-pass",
            AdamWUpdate::Ops => "ops",
        }
    }

    /// The update of one parameter, as [`adamw_update`] or [`adamw_update_by_ops`].
    pub fn apply(
        self,
        tensors: [Tensor<1>; 4],
        coef: Tensor<1>,
        finite: Tensor<1>,
        scalars: AdamWScalars,
    ) -> AdamWUpdated {
        match self {
            AdamWUpdate::OnePass => adamw_update(tensors, coef, finite, scalars),
            AdamWUpdate::Ops => adamw_update_by_ops(tensors, coef, finite, scalars),
        }
    }
}

impl fmt::Display for AdamWUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AdamWUpdate {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AdamWUpdate::ALL
            .into_iter()
            .find(|update| update.name() == s)
            .ok_or_else(|| ModelError::InvalidConfig {
                field: "update",
                reason: format!("{s:?} is not one-pass or ops"),
            })
    }
}

/// The host values of one parameter's update, each already rounded to `f32` as the tensor
/// operations' scalars are (`coef`, the clipping factor, is a tensor on the device).
///
/// ```text
/// g ← g · coef
/// p ← p · decay
/// m ← m + (g − m) · one_minus_beta1
/// v ← v · beta2 + g² · one_minus_beta2
/// p ← p − m / (√v / bias2_sqrt + eps) · step_size
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWScalars {
    /// `1 − lr · weight_decay` (1 for a parameter without decay).
    pub decay: f32,
    /// `1 − β1`.
    pub one_minus_beta1: f32,
    /// `β2`.
    pub beta2: f32,
    /// `1 − β2`.
    pub one_minus_beta2: f32,
    /// `√(1 − β2ᵗ)`.
    pub bias2_sqrt: f32,
    /// `ε`.
    pub eps: f32,
    /// `lr / (1 − β1ᵗ)`.
    pub step_size: f32,
}

impl AdamWScalars {
    /// The scalars of AdamW's step `step` (1-based) for a parameter with decay `weight_decay`
    /// (0 for one without), each computed in `f64` and rounded to `f32`, as
    /// `torch.optim.AdamW`'s hyper-parameters are.
    pub fn at_step(
        step: u64,
        lr: f64,
        weight_decay: f64,
        (beta1, beta2): (f64, f64),
        eps: f64,
    ) -> AdamWScalars {
        let step = i32::try_from(step).unwrap_or(i32::MAX);
        AdamWScalars {
            decay: (1.0 - lr * weight_decay) as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            bias2_sqrt: (1.0 - beta2.powi(step)).sqrt() as f32,
            eps: eps as f32,
            step_size: (lr / (1.0 - beta1.powi(step))) as f32,
        }
    }
}

/// What one parameter's update returns.
#[derive(Debug, Clone)]
pub struct AdamWUpdated {
    /// The parameter after the step.
    pub param: Tensor<1>,
    /// The first moment after the step.
    pub m: Tensor<1>,
    /// The second moment after the step.
    pub v: Tensor<1>,
    /// `[1]`: the `finite` passed in, or NaN where the parameter after the step has an element
    /// that is NaN or infinite.
    pub finite: Tensor<1>,
}

/// The update of the module docs: the parameter and moments after one step from the parameter
/// `p`, its gradient `g` and its moments `m`, `v` (all of one shape, on a device without
/// autodiff: the optimizer works on the parameters' inner tensors), with the clipping factor
/// `coef` (`[1]`; NaN returns `p`, `m` and `v` unchanged), and `finite` (`[1]`, 0 or NaN: see
/// [`AdamWUpdated::finite`]; a skipped step checks the parameter it leaves as it was).
pub fn adamw_update(
    [p, g, m, v]: [Tensor<1>; 4],
    coef: Tensor<1>,
    finite: Tensor<1>,
    scalars: AdamWScalars,
) -> AdamWUpdated {
    on_tensors(
        <Dispatch as AdamWOps>::adamw_update,
        [p, g, m, v, coef, finite],
        scalars,
    )
}

/// [`adamw_update`] as separate tensor operations: what a backend without a one-pass update
/// runs, and what the one-pass updates are held to.
pub fn adamw_update_by_ops(
    [p, g, m, v]: [Tensor<1>; 4],
    coef: Tensor<1>,
    finite: Tensor<1>,
    scalars: AdamWScalars,
) -> AdamWUpdated {
    on_tensors(by_ops::<Dispatch>, [p, g, m, v, coef, finite], scalars)
}

/// An update of `Dispatch`'s primitives, on tensors.
fn on_tensors(
    update: UpdateFn<Primitive>,
    tensors: [Tensor<1>; 6],
    scalars: AdamWScalars,
) -> AdamWUpdated {
    let [p, g, m, v, coef, finite] = tensors.map(Tensor::into_dispatch);
    let (p, m, v, finite) = update(p, g, m, v, coef, finite, scalars);
    AdamWUpdated {
        param: Tensor::from_dispatch(p),
        m: Tensor::from_dispatch(m),
        v: Tensor::from_dispatch(v),
        finite: Tensor::from_dispatch(finite),
    }
}

type Primitive = FloatTensor<Dispatch>;

/// A parameter, its two moments and the finiteness flag after an update.
type Update<T> = (T, T, T, T);

/// An update's signature: parameter, gradient, moments, clipping factor, finiteness flag,
/// scalars.
type UpdateFn<T> = fn(T, T, T, T, T, T, AdamWScalars) -> Update<T>;

/// The update as separate operations on a backend's primitives. `g · g`, not a power, which
/// a GPU need not round as the product: the one-pass updates' operation.
fn by_ops<B: Backend>(
    p: FloatTensor<B>,
    g: FloatTensor<B>,
    m: FloatTensor<B>,
    v: FloatTensor<B>,
    coef: FloatTensor<B>,
    finite: FloatTensor<B>,
    s: AdamWScalars,
) -> Update<FloatTensor<B>> {
    let shape = p.shape();
    let coef = B::float_expand(coef, shape.clone());
    let skip = B::bool_expand(skipped::<B>(coef.clone()), shape);
    let g = B::float_mul(g, coef);
    let p_new = B::float_mul_scalar(p.clone(), s.decay.into());
    let m_new = B::float_add(
        m.clone(),
        B::float_mul_scalar(B::float_sub(g.clone(), m.clone()), s.one_minus_beta1.into()),
    );
    let v_new = B::float_add(
        B::float_mul_scalar(v.clone(), s.beta2.into()),
        B::float_mul_scalar(B::float_mul(g.clone(), g), s.one_minus_beta2.into()),
    );
    let denom = B::float_add_scalar(
        B::float_div_scalar(B::float_sqrt(v_new.clone()), s.bias2_sqrt.into()),
        s.eps.into(),
    );
    let step = B::float_mul_scalar(B::float_div(m_new.clone(), denom), s.step_size.into());
    let p_new = B::float_sub(p_new, step);
    let p_new = B::float_mask_where(p_new, skip.clone(), p);
    // `x − x` is 0 for a finite `x` and NaN otherwise; the sum cannot overflow.
    let probe = B::float_sum(B::float_sub(p_new.clone(), p_new.clone()));
    (
        p_new,
        B::float_mask_where(m_new, skip.clone(), m),
        B::float_mask_where(v_new, skip, v),
        B::float_add(finite, probe),
    )
}

/// The bits of an `f32`'s exponent: all set for an infinity or a NaN, and only then.
const EXPONENT: u32 = 0x7f80_0000;

/// Whether every element of `xs` is finite, as a reduction the compiler vectorises (the largest
/// exponent field; an integer maximum may be taken in any order).
fn all_finite(xs: &[f32]) -> bool {
    xs.iter().map(|x| x.to_bits() & EXPONENT).max().unwrap_or(0) != EXPONENT
}

/// Where `coef` is NaN (a skipped step), as the device's booleans.
fn skipped<B: Backend>(coef: FloatTensor<B>) -> BoolTensor<B> {
    let bool_dtype = get_device_settings::<B>(&coef.device()).bool_dtype;
    B::float_is_nan(coef, bool_dtype)
}

/// One element of the update, in the order of [`adamw_update_by_ops`], with the clipping
/// factor `coef` (not NaN: a skipped step does not come here).
#[inline]
fn update_one(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, coef: f32, s: &AdamWScalars) {
    let g = g * coef;
    let decayed = *p * s.decay;
    *m += (g - *m) * s.one_minus_beta1;
    *v = *v * s.beta2 + g * g * s.one_minus_beta2;
    let denom = v.sqrt() / s.bias2_sqrt + s.eps;
    *p = decayed - *m / denom * s.step_size;
}

/// [`update_one`] over slices of one length, written so that the compiler vectorises it (every
/// index in bounds of all four: no checks in the loop); then whether every updated element of
/// `p` is finite, read while the slice is still in cache.
fn update_slices([p, m, v]: [&mut [f32]; 3], g: &[f32], coef: f32, s: &AdamWScalars) -> bool {
    let n = p.len().min(g.len()).min(m.len()).min(v.len());
    let (p, g, m, v) = (&mut p[..n], &g[..n], &mut m[..n], &mut v[..n]);
    for i in 0..n {
        update_one(&mut p[i], g[i], &mut m[i], &mut v[i], coef, s);
    }
    all_finite(p)
}

/// The one-pass update as a backend operation (see the module docs). The default body is the
/// update by operations.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu"))
)]
pub trait AdamWOps: Backend {
    /// `(p, m, v, finite)` after one step (see [`adamw_update`]).
    #[fusion(meta = |p, _g, _m, _v, _coef, finite, _s| (p.clone(), p.clone(), p.clone(), finite.clone()))]
    fn adamw_update(
        p: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        coef: FloatTensor<Self>,
        finite: FloatTensor<Self>,
        scalars: AdamWScalars,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    ) {
        by_ops::<Self>(p, g, m, v, coef, finite, scalars)
    }
}

mod flex {
    use burn::backend::flex::{Flex, FlexTensor};
    use burn::backend::ops::FloatTensorOps;
    use rayon::prelude::*;

    use super::{AdamWOps, AdamWScalars, Update, all_finite, by_ops, update_slices};
    use crate::flex_storage::whole_f32;

    /// Elements per task: large enough that rayon's bookkeeping is noise, small enough that a
    /// d128 model's embedding (2.6 M elements) is spread over the threads.
    const CHUNK: usize = 1 << 14;

    /// Up to this many elements the update runs on the calling thread: below it, handing
    /// chunks to rayon's threads cost more than it saved (the `adamw_update` bench).
    const SERIAL: usize = 1 << 16;

    impl AdamWOps for Flex {
        fn adamw_update(
            p: FlexTensor,
            g: FlexTensor,
            m: FlexTensor,
            v: FlexTensor,
            coef: FlexTensor,
            finite: FlexTensor,
            s: AdamWScalars,
        ) -> Update<FlexTensor> {
            let n = p.layout().num_elements();
            let same = [&g, &m, &v].iter().all(|t| t.layout().num_elements() == n);
            let scalar = [&coef, &finite]
                .iter()
                .all(|t| t.layout().num_elements() == 1);
            let whole = [&p, &g, &m, &v, &coef, &finite].into_iter().all(whole_f32);
            if !same || !scalar || !whole {
                return by_ops::<Flex>(p, g, m, v, coef, finite, s);
            }
            let coef = coef.storage::<f32>()[0];
            if coef.is_nan() {
                let finite = flagged(finite, all_finite(&p.storage::<f32>()[..n]));
                return (p, m, v, finite);
            }
            let (mut p, mut m, mut v) = (p, m, v);
            let all = {
                // Copies first where a tensor is shared (a model kept as a snapshot).
                let ps = &mut p.storage_mut::<f32>()[..n];
                let ms = &mut m.storage_mut::<f32>()[..n];
                let vs = &mut v.storage_mut::<f32>()[..n];
                let gs = &g.storage::<f32>()[..n];
                if n <= SERIAL {
                    update_slices([ps, ms, vs], gs, coef, &s)
                } else {
                    ps.par_chunks_mut(CHUNK)
                        .zip(ms.par_chunks_mut(CHUNK))
                        .zip(vs.par_chunks_mut(CHUNK))
                        .zip(gs.par_chunks(CHUNK))
                        .map(|(((ps, ms), vs), gs)| update_slices([ps, ms, vs], gs, coef, &s))
                        .reduce(|| true, |a, b| a && b)
                }
            };
            (p, m, v, flagged(finite, all))
        }
    }

    /// `finite` as it came where `all` of the parameter is finite, NaN where not.
    fn flagged(finite: FlexTensor, all: bool) -> FlexTensor {
        if all {
            finite
        } else {
            Flex::float_add_scalar(finite, f32::NAN.into())
        }
    }
}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube {
    use burn::cubecl;
    use burn::cubecl::calculate_cube_count_elemwise;
    use burn::cubecl::prelude::*;
    use burn::tensor::DType;
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::tensor::CubeTensor;

    use super::{AdamWOps, AdamWScalars, Update, by_ops};

    /// One element per unit, in the order of [`super::update_one`], in place; nothing is
    /// written when the clipping factor `coef[0]` is NaN (a skipped step). A unit whose element
    /// of the parameter, as the step leaves it, is not finite writes NaN to `finite[0]` (units
    /// that write it at once write the same value).
    #[cube(launch, create_dummy_kernel)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn adamw_kernel(
        p: &mut Tensor<f32>,
        g: &Tensor<f32>,
        m: &mut Tensor<f32>,
        v: &mut Tensor<f32>,
        coef: &Tensor<f32>,
        finite: &mut Tensor<f32>,
        decay: f32,
        one_minus_beta1: f32,
        beta2: f32,
        one_minus_beta2: f32,
        bias2_sqrt: f32,
        eps: f32,
        step_size: f32,
    ) {
        let i = ABSOLUTE_POS;
        if i >= p.len() {
            terminate!();
        }
        let clip = coef[0];
        let mut value = p[i];
        if !clip.is_nan() {
            let grad = g[i] * clip;
            let decayed = value * decay;
            let m_old = m[i];
            let m_new = m_old + (grad - m_old) * one_minus_beta1;
            let v_new = v[i] * beta2 + grad * grad * one_minus_beta2;
            let denom = f32::sqrt(v_new) / bias2_sqrt + eps;
            value = decayed - m_new / denom * step_size;
            p[i] = value;
            m[i] = m_new;
            v[i] = v_new;
        }
        if value.is_nan() || value.is_inf() {
            finite[0] = f32::NAN;
        }
    }

    /// `t` contiguous in a buffer of its own, which the kernel may overwrite: `t` itself when
    /// nothing else holds its buffer (fusion hands an operation the tensors it consumes).
    fn writable(t: CubeTensor) -> CubeTensor {
        let t = into_contiguous(t);
        if t.can_mut() && t.is_contiguous_buffer() {
            t
        } else {
            t.copy()
        }
    }

    /// `t` itself when nothing else holds its buffer, else a copy: for the one-element flag,
    /// which the kernel writes at its first element only. (A tensor that small does not fill
    /// the buffer the allocator gave it, so [`writable`] would copy it every time.)
    fn owned(t: CubeTensor) -> CubeTensor {
        if t.can_mut() { t } else { t.copy() }
    }

    // `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
    // implementation records this kernel as one operation.
    impl AdamWOps for CubeBackend {
        fn adamw_update(
            p: CubeTensor,
            g: CubeTensor,
            m: CubeTensor,
            v: CubeTensor,
            coef: CubeTensor,
            finite: CubeTensor,
            s: AdamWScalars,
        ) -> Update<CubeTensor> {
            let n = p.meta.shape().num_elements();
            let fits = [&p, &g, &m, &v]
                .iter()
                .all(|t| t.dtype == DType::F32 && t.meta.shape().num_elements() == n);
            let scalar = [&coef, &finite]
                .iter()
                .all(|t| t.dtype == DType::F32 && t.meta.shape().num_elements() == 1);
            if !fits || !scalar || n == 0 {
                return by_ops::<CubeBackend>(p, g, m, v, coef, finite, s);
            }
            let (p, m, v) = (writable(p), writable(m), writable(v));
            let finite = owned(finite);
            let (g, coef) = (into_contiguous(g), into_contiguous(coef));
            let client = p.client.clone();
            let cube_dim = CubeDim::new(&client, n);
            let cube_count = calculate_cube_count_elemwise(&client, n, cube_dim);
            adamw_kernel::launch(
                &client,
                cube_count,
                cube_dim,
                p.clone().into_tensor_arg(),
                g.into_tensor_arg(),
                m.clone().into_tensor_arg(),
                v.clone().into_tensor_arg(),
                coef.into_tensor_arg(),
                finite.clone().into_tensor_arg(),
                s.decay,
                s.one_minus_beta1,
                s.beta2,
                s.one_minus_beta2,
                s.bias2_sqrt,
                s.eps,
                s.step_size,
            );
            (p, m, v, finite)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of every sign and size, with a few zeros and a first step's zero moments.
    fn case(n: usize, salt: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt) >> 8;
                let unit = x as f32 / (1u32 << 24) as f32 - 0.5;
                if i % 97 == 0 {
                    0.0
                } else {
                    unit * 10f32.powi((i % 7) as i32 - 4)
                }
            })
            .collect()
    }

    fn scalars(step: u64) -> AdamWScalars {
        AdamWScalars::at_step(step, 3e-4, 0.01, (0.9, 0.95), 1e-8)
    }

    /// A clipping factor of `value`, on `device`.
    fn coef(value: f32, device: &Device) -> Tensor<1> {
        Tensor::<1>::from_data(TensorData::new(vec![value], [1]), device)
    }

    /// A finiteness flag that says "finite so far".
    fn clean(device: &Device) -> Tensor<1> {
        coef(0.0, device)
    }

    fn bits(t: Tensor<1>) -> Vec<u32> {
        t.into_data()
            .try_to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f32::to_bits)
            .collect()
    }

    /// How many elements of `a` and `b` differ in any bit, and the first that does.
    fn differing(a: Tensor<1>, b: Tensor<1>) -> (usize, Option<usize>) {
        let (a, b) = (bits(a), bits(b));
        assert_eq!(a.len(), b.len());
        let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
        (diff.len(), diff.first().copied())
    }

    #[test]
    fn the_update_s_names_round_trip_and_an_unknown_one_is_refused() {
        for update in AdamWUpdate::ALL {
            assert_eq!(update.name().parse::<AdamWUpdate>().unwrap(), update);
        }
        let err = "fused".parse::<AdamWUpdate>().unwrap_err().to_string();
        assert!(err.contains("one-pass or ops"), "{err}");
    }

    #[test]
    fn the_one_pass_update_equals_the_update_by_operations() {
        let device = Device::flex();
        // Past one chunk, so that the threads split it.
        let n = 40_000;
        let tensor =
            |values: Vec<f32>| Tensor::<1>::from_data(TensorData::new(values, [n]), &device);
        for (step, first) in [(1, true), (7, false)] {
            let [p, g, m, v] = [1, 2, 3, 4].map(|salt| case(n, salt));
            let (m, v) = if first {
                (vec![0.0; n], vec![0.0; n])
            } else {
                (m, v.into_iter().map(f32::abs).collect())
            };
            let s = scalars(step);
            let inputs = [&p, &g, &m, &v].map(|values| tensor(values.clone()));
            let by_ops = adamw_update_by_ops(inputs, coef(0.37, &device), clean(&device), s);
            // The parameter shared with a snapshot: updated in a copy, the snapshot untouched.
            let snapshot = tensor(p.clone());
            let inputs = [snapshot.clone(), tensor(g), tensor(m), tensor(v)];
            let one_pass = adamw_update(inputs, coef(0.37, &device), clean(&device), s);
            let none = (0, None);
            assert_eq!(
                differing(one_pass.param, by_ops.param),
                none,
                "parameter, step {step}"
            );
            assert_eq!(
                differing(one_pass.m, by_ops.m),
                none,
                "first moment, step {step}"
            );
            assert_eq!(
                differing(one_pass.v, by_ops.v),
                none,
                "second moment, step {step}"
            );
            assert_eq!(bits(one_pass.finite), [0], "finiteness, step {step}");
            assert_eq!(
                bits(by_ops.finite),
                [0],
                "finiteness by operations, step {step}"
            );
            assert_eq!(differing(snapshot, tensor(p)), none, "the snapshot changed");
        }
    }

    /// The kernel against fusion's kernels for the same operations, on cubecl's CPU runtime
    /// (`cargo test --release -p cwm-models --features cube-cpu --lib adamw_update`, with the
    /// LLVM that docs/build-cuda-offline.sh sets up).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernel_equals_the_update_by_operations_on_cube_cpu() {
        let device = crate::device_by_name("cube-cpu").unwrap();
        let n = 5_000;
        let tensor =
            |values: Vec<f32>| Tensor::<1>::from_data(TensorData::new(values, [n]), &device);
        let [p, g, m, v] = [1, 2, 3, 4].map(|salt| case(n, salt));
        let v: Vec<f32> = v.into_iter().map(f32::abs).collect();
        let s = scalars(5);
        let inputs = || [&p, &g, &m, &v].map(|values| tensor(values.clone()));
        let by_ops = adamw_update_by_ops(inputs(), coef(0.37, &device), clean(&device), s);
        let kernel = adamw_update(inputs(), coef(0.37, &device), clean(&device), s);
        let skipped = adamw_update(inputs(), coef(f32::NAN, &device), clean(&device), s);
        assert_eq!(bits(kernel.finite), [0], "finiteness");
        assert_eq!(bits(skipped.finite), [0], "finiteness of a skipped step");
        for (name, before, after) in [
            ("parameter", &p, skipped.param),
            ("first moment", &m, skipped.m),
        ] {
            assert_eq!(
                bits(after),
                bits(tensor(before.clone())),
                "{name} of a skipped step"
            );
        }
        assert_eq!(
            bits(skipped.v),
            bits(tensor(v.clone())),
            "second moment of a skipped step"
        );
        for (name, a, b) in [
            ("parameter", kernel.param, by_ops.param),
            ("first moment", kernel.m, by_ops.m),
            ("second moment", kernel.v, by_ops.v),
        ] {
            let (a, b) = (bits(a), bits(b));
            // Within one unit in the last place: a compiler may contract a product and a sum
            // into one rounding in one kernel and not in the other. (On 2026-11-26 they were
            // equal in every bit; with the first moment's factor wrong the parameter was
            // 2,576,336 units apart.)
            let worst = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| (x as i64 - y as i64).unsigned_abs())
                .max()
                .unwrap();
            assert!(worst <= 1, "{name}: {worst} units in the last place apart");
        }
    }

    #[test]
    fn a_view_into_a_larger_buffer_takes_the_update_by_operations() {
        let device = Device::flex();
        // The second half of a buffer: contiguous, but not from the buffer's start.
        let half = |salt| {
            Tensor::<1>::from_data(TensorData::new(case(128, salt), [128]), &device)
                .narrow(0, 64, 64)
        };
        let s = scalars(3);
        let [p, g, m] = [1, 2, 3].map(half);
        let v = half(4).abs();
        let inputs = [p, g, m, v];
        let expected = adamw_update_by_ops(inputs.clone(), coef(0.37, &device), clean(&device), s);
        let got = adamw_update(inputs, coef(0.37, &device), clean(&device), s);
        assert_eq!(differing(got.param, expected.param), (0, None));
        assert_eq!(differing(got.m, expected.m), (0, None));
        assert_eq!(differing(got.v, expected.v), (0, None));
        assert_eq!(bits(got.finite), bits(expected.finite));
    }

    #[test]
    fn a_nan_clipping_factor_leaves_parameter_and_moments_as_they_were() {
        let device = Device::flex();
        // Both sides of the one-pass update's serial bound, and the operations.
        for n in [1_000, 70_000] {
            let tensor =
                |values: Vec<f32>| Tensor::<1>::from_data(TensorData::new(values, [n]), &device);
            let [p, g, m, v] = [5, 6, 7, 8].map(|salt| case(n, salt));
            let v: Vec<f32> = v.into_iter().map(f32::abs).collect();
            for update in AdamWUpdate::ALL {
                let inputs = [&p, &g, &m, &v].map(|values| tensor(values.clone()));
                let nan = coef(f32::NAN, &device);
                let out = update.apply(inputs, nan, clean(&device), scalars(4));
                assert_eq!(bits(out.finite), [0], "{update}, {n} elements: finiteness");
                let (p2, m2, v2) = (out.param, out.m, out.v);
                for (name, before, after) in [("p", &p, p2), ("m", &m, m2), ("v", &v, v2)] {
                    let want: Vec<u32> = before.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(bits(after), want, "{update}, {n} elements: {name} changed");
                }
            }
        }
    }

    /// Parameter, gradient and moments of `n` elements on `device` (the second moment made
    /// non-negative), with `p[at]` set to `bad` where given.
    fn step_inputs(n: usize, bad: Option<(usize, f32)>, device: &Device) -> [Tensor<1>; 4] {
        let [mut p, g, m, v] = [1, 2, 3, 4].map(|salt| case(n, salt));
        let v: Vec<f32> = v.into_iter().map(f32::abs).collect();
        if let Some((at, value)) = bad {
            p[at] = value;
        }
        [p, g, m, v].map(|values| Tensor::<1>::from_data(TensorData::new(values, [n]), device))
    }

    /// The finiteness flag after a step (skipped where `skip`) of `n` elements by `update`,
    /// whose parameter has `bad` at index `at` before it.
    fn flag_after(
        update: AdamWUpdate,
        (n, at): (usize, usize),
        bad: f32,
        skip: bool,
        device: &Device,
    ) -> Vec<u32> {
        let factor = if skip { f32::NAN } else { 0.37 };
        let inputs = step_inputs(n, Some((at, bad)), device);
        bits(
            update
                .apply(inputs, coef(factor, device), clean(device), scalars(2))
                .finite,
        )
    }

    /// Every way of updating, on `device`: a finite step leaves the flag 0; a NaN or an
    /// infinity in the parameter (kept by the step, or left by a skipped one) turns it NaN; a
    /// flag already NaN stays NaN.
    fn the_flag_follows_the_parameter_on(device: &Device) {
        let nan_bits = |t: Vec<u32>| t.len() == 1 && f32::from_bits(t[0]).is_nan();
        // Both sides of the one-pass update's serial bound, the bad element last or inside.
        for (n, at) in [(1_000, 999), (70_000, 40_001)] {
            for update in AdamWUpdate::ALL {
                let what = format!("{update}, {n} elements");
                let place = (n, at);
                assert_eq!(flag_after(update, place, 0.5, false, device), [0], "{what}");
                assert_eq!(
                    flag_after(update, place, 0.5, true, device),
                    [0],
                    "{what}, skipped"
                );
                for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    for skip in [false, true] {
                        let flag = flag_after(update, place, bad, skip, device);
                        assert!(
                            nan_bits(flag.clone()),
                            "{what}: {bad}, skipped {skip}: {flag:?}"
                        );
                    }
                }
                // Already NaN: a finite parameter does not clear it.
                let inputs = step_inputs(n, None, device);
                let flag = update.apply(
                    inputs.clone(),
                    coef(0.37, device),
                    coef(f32::NAN, device),
                    scalars(2),
                );
                assert!(
                    nan_bits(bits(flag.finite)),
                    "{what}: an incoming NaN was cleared"
                );
                // A finite parameter made infinite by the step: a learning rate past f32.
                let huge = AdamWScalars::at_step(2, 1e39, 0.0, (0.9, 0.95), 1e-8);
                let flag = update.apply(inputs, coef(0.37, device), clean(device), huge);
                assert!(nan_bits(bits(flag.finite)), "{what}: an overflowing step");
            }
        }
    }

    #[test]
    fn the_finiteness_flag_follows_the_parameter_after_the_step() {
        the_flag_follows_the_parameter_on(&Device::flex());
    }

    /// The same through the kernel (`cargo test --release -p cwm-models --features cube-cpu
    /// --lib adamw_update`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernel_s_finiteness_flag_follows_the_parameter_after_the_step() {
        the_flag_follows_the_parameter_on(&crate::device_by_name("cube-cpu").unwrap());
    }
}
