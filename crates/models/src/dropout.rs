//! Dropout with a mask that is a function of a seed and each element's index.
//!
//! [`dropout`] is `burn::nn::Dropout::forward` with the same switches (active only in training
//! mode, on an autodiff device, with a non-zero probability) and the same result, `x · m /
//! keep` with `m ~ Bernoulli(keep)` elementwise, but its mask is not drawn element by element
//! from the backend's generator (burn's `Tensor::random` samples every element through a
//! ChaCha generator and a Bernoulli sampler, which took about a tenth of a d128 training step
//! on one core). One 64-bit seed is drawn from that generator per call, as three 30-bit
//! integers on the device, and element `i` is kept iff the high 32 bits of SplitMix64(`seed +
//! (i + 1) · γ`) fall below `keep · 2³²` ([`mask_values`]). Reseeding the backend (as the train
//! stage does before every step) therefore reproduces the masks exactly, on any thread count,
//! and a CPU and a GPU given the same three integers drop the same elements.
//!
//! Since the mask follows from the seed, [`hashed_dropout`] is one operation whose backward pass
//! is the same operation on the gradient: autodiff keeps the three integers for it instead of a
//! mask as large as the activations (an `f32` one per dropout, 64 MiB each for a d512 model at
//! batch 128 × 256, thirteen of them in the transformer). On every backend each element's mask
//! is computed where it multiplies it, so no mask is stored at all: on `flex` by one parallel
//! loop over a contiguous `f32` tensor, in place where nothing else holds it (another tensor
//! is multiplied by the mask of [`mask_values`]); on cubecl's backends (`cuda`, `cube-cpu`) by
//! one kernel.
//!
//! The attention probabilities' dropout ([`dropout_mask`]) still draws a mask tensor, which the
//! attention operation keeps in the probabilities' signs (`crate::attention`); the attention
//! kernels (`crate::attention_kernel`) take a seed instead ([`dropout_seed`]) and hash each
//! probability's index as [`mask_values`] does.

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::nn::Dropout;
use burn::prelude::*;
use burn::tensor::Distribution;
use rayon::prelude::*;

use crate::rng::rng_lock;

/// Mask elements per parallel task.
const MASK_CHUNK: usize = 1 << 16;

/// SplitMix64's increment, the golden-ratio constant.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The dropout mask of `len` elements: `scale` where an element is kept, else 0.
///
/// Element `i` is kept iff `mix(seed + (i + 1)·γ) >> 32` is below `threshold` (`keep · 2³²`).
pub fn mask_values(seed: u64, len: usize, threshold: u64, scale: f32) -> Vec<f32> {
    let mut values = vec![1.0f32; len];
    apply_mask(&mut values, seed, threshold, scale);
    values
}

/// `values[i] · m[i]` in place, `m` the mask of [`mask_values`]: one pass, no mask stored.
/// Elements are taken in parallel, in chunks of [`MASK_CHUNK`]; each one's mask is a function
/// of its index alone, so the result does not depend on the number of threads.
fn apply_mask(values: &mut [f32], seed: u64, threshold: u64, scale: f32) {
    values
        .par_chunks_mut(MASK_CHUNK)
        .enumerate()
        .for_each(|(chunk, out)| {
            let first = (chunk * MASK_CHUNK) as u64;
            for (i, value) in out.iter_mut().enumerate() {
                let counter = seed.wrapping_add((first + i as u64 + 1).wrapping_mul(GAMMA));
                let kept = (mix(counter) >> 32) < threshold;
                *value *= if kept { scale } else { 0.0 };
            }
        });
}

/// `module.forward(x)` (see the module docs), as [`hashed_dropout`].
///
/// # Shapes
/// - `x`: any; output: the same
pub fn dropout<const D: usize>(module: &Dropout, x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    if !active(module, &device) {
        return x;
    }
    let parts = {
        let _rng = rng_lock();
        seed_parts(&device)
    };
    hashed_dropout(x, parts, 1.0 - module.prob, kept_scale(module))
}

/// The three integers of a seed for a mask [`mask_values`] hashes, drawn from the backend's
/// generator as [`dropout`] draws them (on the device, no read-back), or `None` where dropout
/// is off (not training, no autodiff, or a probability of 0).
///
/// # Shapes
/// - output: `[3]`
pub fn dropout_seed(module: &Dropout, device: &Device) -> Option<Tensor<1, Int>> {
    if !active(module, device) {
        return None;
    }
    let _rng = rng_lock();
    Some(seed_parts(device))
}

/// Whether `module` drops anything on `device`: in training, on an autodiff device, with a
/// probability above 0.
fn active(module: &Dropout, device: &Device) -> bool {
    module.training.is_enabled() && device.is_autodiff() && module.prob != 0.0
}

/// Three 30-bit draws from the backend's generator, on `device`: a mask's seed (30 bits: the
/// integer tensors may be i32, and the bound must be representable). The caller holds the
/// generator's lock.
fn seed_parts(device: &Device) -> Tensor<1, Int> {
    Tensor::<1, Int>::random([3], Distribution::Uniform(0.0, 1_073_741_824.0), device)
}

/// The seed three draws of [`seed_parts`] make, in their order.
pub(crate) fn fold_seed(parts: impl IntoIterator<Item = i64>) -> u64 {
    parts
        .into_iter()
        .fold(0u64, |acc, part| (acc << 30) ^ (part as u64 & 0x3FFF_FFFF))
}

/// `x ∘ m`, `m` the mask of [`mask_values`] with the seed [`fold_seed`] makes of `parts`, the
/// threshold `keep · 2³²` and the kept elements' value `scale`, element `i` in `x`'s row-major
/// order. One operation whose backward pass is the same operation on the gradient (see the
/// module docs).
///
/// # Shapes
/// - `x`: any; `parts`: `[3]`; output: `x`'s
pub fn hashed_dropout<const D: usize>(
    x: Tensor<D>,
    parts: Tensor<1, Int>,
    keep: f64,
    scale: f32,
) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as DropoutOps>::hashed_dropout(
        x.into_dispatch(),
        parts.into_dispatch(),
        keep_threshold(keep),
        scale,
    ))
}

/// The bound below which an element's 32 mask bits keep it: `keep · 2³²`.
pub(crate) fn keep_threshold(keep: f64) -> u64 {
    (keep * 4_294_967_296.0) as u64
}

/// [`hashed_dropout`] as a backend operation.
#[backend_extension(
    Flex,
    Cube: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Fusion: cfg(any(feature = "cuda", feature = "cube-cpu")),
    Autodiff
)]
pub trait DropoutOps: Backend {
    /// `x ∘ m` for the mask of `parts`, `threshold` and `scale` (see [`hashed_dropout`]).
    #[fusion(dtype = x, shape = x)]
    fn hashed_dropout(
        x: FloatTensor<Self>,
        parts: IntTensor<Self>,
        threshold: u64,
        scale: f32,
    ) -> FloatTensor<Self>;
}

mod flex {
    use burn::backend::TensorMetadata;
    use burn::backend::flex::{Flex, FlexTensor};
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::{DType, TensorData};

    use super::{DropoutOps, apply_mask, fold_seed, mask_values};
    use crate::flex_storage::whole_f32;

    /// The three parts of a seed, as `i64`.
    fn parts_of(parts: &FlexTensor) -> Vec<i64> {
        match parts.dtype() {
            DType::I32 => parts.storage::<i32>().iter().map(|&p| p as i64).collect(),
            _ => parts.storage::<i64>().to_vec(),
        }
    }

    impl DropoutOps for Flex {
        fn hashed_dropout(
            x: FlexTensor,
            parts: FlexTensor,
            threshold: u64,
            scale: f32,
        ) -> FlexTensor {
            let seed = fold_seed(parts_of(&parts));
            if whole_f32(&x) {
                // In place, where nothing else holds `x` (a copy first where something does).
                let n = x.layout().num_elements();
                let mut x = x;
                apply_mask(&mut x.storage_mut::<f32>()[..n], seed, threshold, scale);
                return x;
            }
            let shape = x.shape();
            let values = mask_values(seed, shape.num_elements(), threshold, scale);
            let mask = Flex::float_from_data(TensorData::new(values, shape), &x.device());
            let mask = Flex::float_cast(mask, x.dtype().into());
            Flex::float_mul(x, mask)
        }
    }
}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) mod cube {
    use burn::backend::cubecl::dtype_to_storage_type;
    use burn::backend::ops::FloatTensorOps;
    use burn::cubecl;
    use burn::cubecl::calculate_cube_count_elemwise;
    use burn::cubecl::prelude::*;
    use burn::tensor::{DType, FloatDType};
    use burn_cubecl::CubeBackend;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_dtype;
    use burn_cubecl::tensor::CubeTensor;

    use super::DropoutOps;

    /// SplitMix64's output function ([`super::mix`]); the attention kernels hash with it too.
    #[cube]
    pub(crate) fn mix(z: u64) -> u64 {
        let a = (z ^ (z >> u64::new(30))) * 0xBF58_476D_1CE4_E5B9u64;
        let b = (a ^ (a >> u64::new(27))) * 0x94D0_49BB_1331_11EBu64;
        b ^ (b >> u64::new(31))
    }

    /// The seed the three 30-bit `parts` make ([`super::fold_seed`]).
    #[cube]
    pub(crate) fn seed_of<I: Int>(parts: &Tensor<I>) -> u64 {
        let low = u64::new(0x3FFF_FFFF);
        let mut seed = u64::new(0);
        for p in 0..3usize {
            seed = (seed << u64::new(30)) ^ (u64::cast_from(parts[p]) & low);
        }
        seed
    }

    /// One element per unit: `x[i] · m[i]`, `m[i]` [`super::mask_values`]'s element `i` for the
    /// seed the three `parts` make.
    #[cube(launch, create_dummy_kernel)]
    pub(crate) fn dropout_kernel<I: Int>(
        x: &Tensor<f32>,
        parts: &Tensor<I>,
        out: &mut Tensor<f32>,
        threshold: u64,
        scale: f32,
        #[define(I)] _dtype: ElemType,
    ) {
        let i = ABSOLUTE_POS;
        if i >= out.len() {
            terminate!();
        }
        let seed = seed_of::<I>(parts);
        let counter = seed + (u64::cast_from(i) + u64::new(1)) * 0x9E37_79B9_7F4A_7C15u64;
        let mut m = 0.0f32;
        if (mix(counter) >> u64::new(32)) < threshold {
            m = scale;
        }
        out[i] = x[i] * m;
    }

    // `Cube`, what `Dispatch` routes to, is fusion over `CubeBackend`: the macro's `Fusion`
    // implementation records this kernel as one operation.
    impl DropoutOps for CubeBackend {
        fn hashed_dropout(
            x: CubeTensor,
            parts: CubeTensor,
            threshold: u64,
            scale: f32,
        ) -> CubeTensor {
            let dtype = x.dtype;
            if dtype != DType::F32 {
                let x = CubeBackend::float_cast(x, FloatDType::F32);
                let out = Self::hashed_dropout(x, parts, threshold, scale);
                return CubeBackend::float_cast(out, dtype.into());
            }
            let (x, parts) = (into_contiguous(x), into_contiguous(parts));
            let (client, device) = (x.client.clone(), x.device.clone());
            let out = empty_device_dtype(client.clone(), device, x.meta.shape().clone(), dtype);
            let n = out.meta.shape().num_elements();
            if n == 0 {
                return out;
            }
            let cube_dim = CubeDim::new(&client, n);
            let cube_count = calculate_cube_count_elemwise(&client, n, cube_dim);
            let int_type = dtype_to_storage_type(parts.dtype);
            dropout_kernel::launch(
                &client,
                cube_count,
                cube_dim,
                x.into_tensor_arg(),
                parts.into_tensor_arg(),
                out.clone().into_tensor_arg(),
                threshold,
                scale,
                int_type,
            );
            out
        }
    }
}

/// What the backward pass keeps: the seed's parts and the mask's settings.
#[derive(Debug, Clone)]
struct Seeded<B: Backend> {
    parts: IntTensor<B>,
    threshold: u64,
    scale: f32,
}

/// The backward pass of [`hashed_dropout`]: the same mask on the gradient.
#[derive(Debug)]
struct DropoutBackward;

impl<B: Backend + DropoutOps> Backward<B, 1> for DropoutBackward {
    type State = Seeded<B>;

    fn backward(self, ops: Ops<Seeded<B>, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node {
            let Seeded {
                parts,
                threshold,
                scale,
            } = ops.state;
            grads.register::<B>(node.id, B::hashed_dropout(grad, parts, threshold, scale));
        }
    }
}

impl<B: Backend + DropoutOps, C: CheckpointStrategy> DropoutOps for Autodiff<B, C> {
    fn hashed_dropout(
        x: FloatTensor<Self>,
        parts: IntTensor<Self>,
        threshold: u64,
        scale: f32,
    ) -> FloatTensor<Self> {
        match DropoutBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let out = B::hashed_dropout(x.into_primitive(), parts.clone(), threshold, scale);
                let state = Seeded {
                    parts,
                    threshold,
                    scale,
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::hashed_dropout(
                x.into_primitive(),
                parts,
                threshold,
                scale,
            )),
        }
    }
}

/// The mask [`dropout`] multiplies a tensor of `shape` on `device` by (`1/keep` where an
/// element is kept, else 0), or `None` where dropout is off (not training, no autodiff, or a
/// probability of 0). On the `flex` CPU backend it is drawn by [`mask_values`]; elsewhere by
/// the backend, as `burn::nn::Dropout` draws it.
///
/// # Shapes
/// - output: `shape`
pub fn dropout_mask<const D: usize>(
    module: &Dropout,
    shape: [usize; D],
    device: &Device,
) -> Option<Tensor<D>> {
    if !active(module, device) {
        return None;
    }
    let (keep, scale) = (1.0 - module.prob, kept_scale(module));
    let _rng = rng_lock();
    if *device != Device::flex() {
        let kept = Tensor::<D>::random(shape, Distribution::Bernoulli(keep), device);
        return Some(kept * scale);
    }
    let seed = fold_seed(seed_parts(device).into_data().iter::<i64>());
    Some(mask(shape, keep, scale, seed, device))
}

/// The value [`dropout_mask`] gives a kept element: `1/keep`, in f32.
pub fn kept_scale(module: &Dropout) -> f32 {
    keep_scale(1.0 - module.prob)
}

/// A kept element's factor for the probability of keeping `keep`: `1/keep`, in f32.
pub(crate) fn keep_scale(keep: f64) -> f32 {
    (1.0 / keep) as f32
}

/// The mask of [`mask_values`] for `seed`, the probability `keep` and the kept elements' value
/// `scale`, as a tensor of `shape`.
fn mask<const D: usize>(
    shape: [usize; D],
    keep: f64,
    scale: f32,
    seed: u64,
    device: &Device,
) -> Tensor<D> {
    let len = shape.iter().product();
    let values = mask_values(seed, len, keep_threshold(keep), scale);
    Tensor::<D>::from_data(TensorData::new(values, shape), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::DropoutConfig;

    /// Three 30-bit seed parts on `device`.
    fn parts(device: &Device) -> Tensor<1, Int> {
        let values = vec![123_456_789i64, 987_654_321, 555_555_555];
        Tensor::<1, Int>::from_data(TensorData::new(values, [3]), device)
    }

    fn bits<const D: usize>(t: Tensor<D>) -> Vec<u32> {
        let values = t.into_data().try_to_vec::<f32>().unwrap();
        values.into_iter().map(f32::to_bits).collect()
    }

    /// The operation is `x` times the mask of `mask_values` in value, and its backward pass
    /// is the gradient times the same mask, bit for bit (negative values and zeros included).
    #[test]
    fn hashed_dropout_is_the_mask_product_and_so_is_its_gradient() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(5);
        let shape = [7, 33, 5];
        let x = Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), &device)
            .mask_fill(
                Tensor::<3>::random(shape, Distribution::Bernoulli(0.1), &device).bool(),
                0.0,
            )
            .require_grad();
        let weights = Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let scale = (1.0f64 / 0.7) as f32;
        let seed = fold_seed(parts(&device).into_data().iter::<i64>());
        let expected_mask = mask(shape, 0.7, scale, seed, &device);
        // `x` is still held here: the operation must not write into it.
        let out = hashed_dropout(x.clone(), parts(&device), 0.7, scale);
        assert_eq!(bits(out.clone()), bits(x.clone() * expected_mask.clone()));
        // A view that is not contiguous takes the mask in its own row-major order too.
        let view = x.clone().detach().swap_dims(0, 2);
        let swapped_mask = mask([5, 33, 7], 0.7, scale, seed, &device);
        assert_eq!(
            bits(hashed_dropout(view.clone(), parts(&device), 0.7, scale)),
            bits(view * swapped_mask)
        );
        let grads = (out * weights.clone()).sum().backward();
        let grad = x.grad(&grads).expect("x is tracked");
        assert_eq!(
            bits(Tensor::<3>::from_inner(grad)),
            bits(weights * expected_mask)
        );
        let dropped = bits(hashed_dropout(x.detach(), parts(&device), 0.7, scale))
            .into_iter()
            .filter(|&b| b & 0x7FFF_FFFF == 0)
            .count();
        // 1,155 elements, about a tenth zero and 30 % of the rest dropped: some 450.
        assert!((350..560).contains(&dropped), "{dropped} zeros");
    }

    /// On the CPU the masks are those of the mask tensor drawn the old way from the same
    /// generator state: the change to one operation leaves CPU training as it was.
    #[test]
    fn dropout_keeps_the_masks_of_the_mask_tensor_drawn_from_the_same_state() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let module = DropoutConfig::new(0.1).init();
        let x = Tensor::<2>::random([40, 50], Distribution::Normal(0.0, 1.0), &device);
        device.seed(11);
        let fused = bits(dropout(&module, x.clone()));
        device.seed(11);
        let mask = dropout_mask(&module, [40, 50], &device).expect("active");
        assert_eq!(fused, bits(x * mask));
    }

    /// cubecl's kernel against the CPU's mask, bit for bit, over more than one cube's worth of
    /// elements, forward and backward (`CARGO_TARGET_DIR=target/cube-cpu cargo test --release
    /// -p cwm-models --features cube-cpu --lib hashed_dropout`).
    #[cfg(feature = "cube-cpu")]
    #[test]
    fn the_kernel_drops_what_the_cpu_drops_on_cube_cpu() {
        let cpu = Device::flex().autodiff();
        let cube = crate::device_by_name("cube-cpu").unwrap().autodiff();
        let n = 100_003;
        let values: Vec<f32> = (0..n).map(|i| ((i % 199) as f32 - 99.0) / 7.0).collect();
        let scale = (1.0f64 / 0.9) as f32;
        let run = |device: &Device| {
            let x =
                Tensor::<1>::from_data(TensorData::new(values.clone(), [n]), device).require_grad();
            let out = hashed_dropout(x.clone(), parts(device), 0.9, scale);
            let grads = (out.clone() * out.clone().detach()).sum().backward();
            let grad = Tensor::<1>::from_inner(x.grad(&grads).unwrap());
            (bits(out), bits(grad))
        };
        let (on_cpu, on_cube) = (run(&cpu), run(&cube));
        assert_eq!(on_cpu.0, on_cube.0, "forward");
        assert_eq!(on_cpu.1, on_cube.1, "backward");
    }

    #[test]
    fn the_kept_fraction_is_the_keep_probability() {
        let threshold = keep_threshold(0.9);
        let values = mask_values(7, 200_000, threshold, 2.0);
        let kept = values.iter().filter(|&&v| v == 2.0).count();
        assert!(values.iter().all(|&v| v == 0.0 || v == 2.0));
        let fraction = kept as f64 / values.len() as f64;
        // 200,000 draws: the standard deviation of the fraction is about 0.0007.
        assert!((fraction - 0.9).abs() < 0.004, "{fraction}");
        assert_ne!(values, mask_values(8, 200_000, threshold, 2.0));
    }

    #[test]
    fn a_mask_scales_what_it_keeps_and_follows_its_seed() {
        let device = Device::flex().autodiff();
        let x = Tensor::<2>::ones([64, 64], &device);
        let draw = |seed: u64| {
            (x.clone() * mask([64, 64], 0.75, (1.0f64 / 0.75) as f32, seed, &device))
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        };
        let first = draw(3);
        assert_eq!(first, draw(3));
        assert_ne!(first, draw(4));
        let kept = first.iter().filter(|&&v| v != 0.0).count();
        assert!(
            first
                .iter()
                .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6)
        );
        // 4,096 draws at 0.75: mean 3,072, standard deviation about 28.
        assert!((2_900..3_250).contains(&kept), "{kept} of 4096 kept");
    }

    #[test]
    fn dropout_is_active_only_in_training_on_an_autodiff_device() {
        let device = Device::flex().autodiff();
        let module = DropoutConfig::new(0.25).init();
        let x = Tensor::<2>::ones([32, 32], &device);
        let values = |t: Tensor<2>| t.into_data().try_to_vec::<f32>().unwrap();
        // Two calls draw two seeds from the backend, so two different masks.
        let (a, b) = (
            values(dropout(&module, x.clone())),
            values(dropout(&module, x.clone())),
        );
        assert_ne!(a, b);
        assert!(a.contains(&0.0));
        let ones = vec![1.0f32; 32 * 32];
        assert_eq!(values(dropout(&module.clone().valid(), x.clone())), ones);
        assert_eq!(values(dropout(&module, x.inner())), ones);
        let off = DropoutConfig::new(0.0).init();
        assert_eq!(values(dropout(&off, Tensor::ones([32, 32], &device))), ones);
    }
}
