//! Dropout with a fast mask generator on the CPU backend.
//!
//! [`dropout`] is `burn::nn::Dropout::forward` with the same switches (active only in training
//! mode, on an autodiff device, with a non-zero probability) and the same result, `x · m /
//! keep` with `m ~ Bernoulli(keep)` elementwise. On burn's `flex` CPU backend the mask is drawn
//! here instead of by the backend: burn's `Tensor::random` samples every element through a
//! ChaCha generator and a Bernoulli sampler, which took about a tenth of a d128 training step
//! on one core. On every other device (CUDA) the module's own `forward` runs, so the mask is
//! drawn where the tensor lives.
//!
//! The fast mask is still a function of the backend's seeded generator: one 64-bit seed is
//! drawn from it per call, and element `i` keeps its value iff the high 32 bits of
//! SplitMix64(`seed + (i + 1) · γ`) fall below `keep · 2³²`. Reseeding the backend (as the train
//! stage does before every step) therefore reproduces the masks exactly, on any thread count.

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
/// Elements are generated in parallel, in chunks of this many; each is a function of its index
/// alone, so the mask does not depend on the number of threads.
pub fn mask_values(seed: u64, len: usize, threshold: u64, scale: f32) -> Vec<f32> {
    let mut values = vec![0.0f32; len];
    values
        .par_chunks_mut(MASK_CHUNK)
        .enumerate()
        .for_each(|(chunk, out)| {
            let first = (chunk * MASK_CHUNK) as u64;
            for (i, value) in out.iter_mut().enumerate() {
                let counter = seed.wrapping_add((first + i as u64 + 1).wrapping_mul(GAMMA));
                if (mix(counter) >> 32) < threshold {
                    *value = scale;
                }
            }
        });
    values
}

/// `module.forward(x)`, with the mask drawn by [`mask_values`] when `x` is on the `flex` CPU
/// backend (see the module docs).
///
/// # Shapes
/// - `x`: any; output: the same
pub fn dropout<const D: usize>(module: &Dropout, x: Tensor<D>) -> Tensor<D> {
    match dropout_mask(module, x.dims(), &x.device()) {
        Some(mask) => x * mask,
        None => x,
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
    if !module.training.is_enabled() || !device.is_autodiff() || module.prob == 0.0 {
        return None;
    }
    let (keep, scale) = (1.0 - module.prob, kept_scale(module));
    let _rng = rng_lock();
    if *device != Device::flex() {
        let kept = Tensor::<D>::random(shape, Distribution::Bernoulli(keep), device);
        return Some(kept * scale);
    }
    // Three 30-bit draws from the backend's generator make the seed of this mask (30 bits: the
    // integer tensors may be i32, and the bound must be representable).
    let seed = Tensor::<1, Int>::random([3], Distribution::Uniform(0.0, 1_073_741_824.0), device)
        .into_data()
        .iter::<i64>()
        .fold(0u64, |acc, part| (acc << 30) ^ (part as u64 & 0x3FFF_FFFF));
    Some(mask(shape, keep, scale, seed, device))
}

/// The value [`dropout_mask`] gives a kept element: `1/keep`, in f32.
pub fn kept_scale(module: &Dropout) -> f32 {
    (1.0 / (1.0 - module.prob)) as f32
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
    let threshold = (keep * 4_294_967_296.0) as u64;
    let len = shape.iter().product();
    let values = mask_values(seed, len, threshold, scale);
    Tensor::<D>::from_data(TensorData::new(values, shape), device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::DropoutConfig;

    #[test]
    fn the_kept_fraction_is_the_keep_probability() {
        let threshold = (0.9 * 4_294_967_296.0) as u64;
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
