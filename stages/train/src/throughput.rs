//! Training throughput: tokens per second of the train stage's own step (forward with dropout,
//! the state loss, backward, global clipping and the AdamW update) on a synthetic batch, on
//! any device. `cwm model bench` prints it; `benches/train_throughput.rs` compares it with
//! PyTorch.
//!
//! Every step trains on one fixed batch of `batch` sequences of `seq` tokens: START then
//! pseudo-random move ids, pseudo-random targets within each label's classes, no padding.
//! After `warmup` steps, `steps` steps are timed one by one. A step reads back to the host
//! what the train stage's step reads, as it reads it: loss, gradient norm, clipping factor and
//! whether every parameter is still finite, in one read-back after the update (spec D.1 steps
//! 5 and 7); its time ends there, so work queued on a GPU is counted. Each step ends, untimed,
//! with a barrier on the device, so that cubecl's kernel profiler (`CWM_KERNEL_PROFILE`,
//! `cwm_models::kernel_profile`) writes one table per step.
//!
//! Beside each step's time, the time the host took to record its forward and backward passes
//! (`queued_s`): on a device that runs what it is given while the host goes on (CUDA), those
//! passes are queued, not run, by then, so a figure near the step's says the host sets the pace
//! (recording operations, fusion's planning, launches), or the device's queue was full; one far
//! under it says the device does. On the CPU the operations run as they are recorded, so there
//! it is their time.

use std::time::Instant;

use burn::optim::GradientsParams;
use burn::prelude::*;
use cwm_models::{
    AdamWUpdate, Family, LossKernel, Model, ModelConfig, N_LABELS, Precision, START_TOKEN,
    StateModel, device_by_name, label_classes, rng_lock,
};

use crate::adamw::{AdamW, AdamWConfig};
use crate::error::TrainError;
use crate::train::{init_model, step_seed};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ThroughputOptions {
    /// The model.
    pub model: ModelConfig,
    /// `cpu`, `cuda` or `cuda:N` (as the train stage's `device` param).
    pub device: String,
    /// Sequences per batch.
    pub batch: usize,
    /// Tokens per sequence (START included).
    pub seq: usize,
    /// Untimed steps first.
    pub warmup: usize,
    /// Timed steps (at least 1).
    pub steps: usize,
    /// Seed of the initial weights and the dropout masks.
    pub seed: u64,
    /// The arithmetic of the matrix products; `None` takes the reference's for the family on
    /// the device ([`Precision::reference`], as the train stage's `precision: auto`) and
    /// overrides `model.precision`.
    pub precision: Option<Precision>,
    /// How the loss is computed ([`LossKernel::Auto`], the train stage's choice, by default).
    pub loss: LossKernel,
    /// How the optimizer updates each parameter ([`AdamWUpdate::OnePass`], the train
    /// stage's, by default).
    pub update: AdamWUpdate,
}

impl ThroughputOptions {
    /// The defaults of the benchmark: batch 32, 128 tokens, 2 warm-up and 5 timed
    /// steps, seed 0, on `device`.
    pub fn new(model: ModelConfig, device: &str) -> ThroughputOptions {
        ThroughputOptions {
            model,
            device: device.to_owned(),
            batch: 32,
            seq: 128,
            warmup: 2,
            steps: 5,
            seed: 0,
            precision: None,
            loss: LossKernel::Auto,
            update: AdamWUpdate::OnePass,
        }
    }
}

/// The measured figures.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// `batch · seq / median_step_s`.
    pub tokens_per_s: f64,
    /// The median of the timed steps.
    pub median_step_s: f64,
    /// Every timed step, in order.
    pub step_s: Vec<f64>,
    /// For every timed step, the seconds from its start until the host had recorded the
    /// forward and backward passes, before the optimizer (see the module docs).
    pub queued_s: Vec<f64>,
    /// Every warm-up step, in order: on a cubecl device the first ones hold the compilation
    /// and autotuning of the step's kernels (less what the kernel cache already had).
    pub warmup_s: Vec<f64>,
    /// The loss of the last step (a sanity figure: about 2.3 at initialisation).
    pub last_loss: f64,
    /// Steps per chunk of the recurrent family's chunked scan on this device; `None` for the
    /// transformer.
    pub chunk_size: Option<usize>,
    /// The most device memory the backend's allocator held after any step (warm-up steps
    /// included), in bytes; `None` on a backend that does not report it (the CPU's).
    pub peak_reserved_bytes: Option<u64>,
    /// The arithmetic the steps ran in.
    pub precision: Precision,
    /// The loss kernel the steps ran ([`LossKernel::Auto`] resolved for the device).
    pub loss: LossKernel,
}

/// A 64-bit LCG for the synthetic batch.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Runs the training steps of `options` and times them.
///
/// # Errors
/// [`TrainError`] on a bad device name or model config, a non-finite loss, or a failed
/// read-back.
pub fn measure(options: &ThroughputOptions) -> Result<Throughput, TrainError> {
    if options.batch == 0 || options.seq == 0 || options.steps == 0 {
        return Err(TrainError::Config(
            "batch, seq and steps must be positive".into(),
        ));
    }
    let device = device_by_name(&options.device)?.autodiff();
    let family = options.model.family;
    let config = ModelConfig {
        precision: (options.precision).unwrap_or_else(|| Precision::reference(family, &device)),
        ..options.model.clone()
    };
    let mut model: Model = init_model(&config, options.seed, &device)?;
    let (batch, seq) = (options.batch, options.seq);
    let mut rng = Lcg(42);
    let moves: Vec<i64> = (0..batch * seq)
        .map(|i| {
            if i % seq == 0 {
                START_TOKEN
            } else {
                rng.below(20_480) as i64
            }
        })
        .collect();
    let classes = label_classes();
    let targets: Vec<i64> = (0..batch * seq * N_LABELS)
        .map(|i| rng.below(classes[i % N_LABELS] as u64) as i64)
        .collect();
    let moves = Tensor::<2, Int>::from_data(TensorData::new(moves, [batch, seq]), &device);
    let targets =
        Tensor::<3, Int>::from_data(TensorData::new(targets, [batch, seq, N_LABELS]), &device);
    let valid = Tensor::<2, Bool>::from_data(
        TensorData::new(vec![true; batch * seq], [batch, seq]),
        &device,
    );
    let mut optim = AdamW::new(AdamWConfig {
        update: options.update,
        ..AdamWConfig::new(0.95, 0.01, 1.0)
    });
    let mut step_s = Vec::with_capacity(options.steps);
    let mut queued_s = Vec::with_capacity(options.steps);
    let mut warmup_s = Vec::with_capacity(options.warmup);
    let mut last_loss = f64::NAN;
    let mut peak_reserved_bytes = None;
    for step in 0..options.warmup + options.steps {
        let start = Instant::now();
        let loss = {
            let _guard = rng_lock();
            device.seed(step_seed(options.seed, step as u64 + 1));
            model
                .state_loss_with(options.loss, moves.clone(), targets.clone(), valid.clone())?
                .loss
        };
        let detached = loss.clone().detach();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let queued = start.elapsed().as_secs_f64();
        let outcome;
        (model, outcome) = optim.step(model, detached, &grads, 3e-4)?;
        last_loss = outcome.loss;
        if !last_loss.is_finite() {
            return Err(TrainError::Failed(format!(
                "the loss is {last_loss} at step {step}"
            )));
        }
        if !outcome.applied || !outcome.params_finite {
            return Err(TrainError::Failed(format!(
                "the gradient norm or a parameter is not finite at step {step}"
            )));
        }
        let seconds = start.elapsed().as_secs_f64();
        if step >= options.warmup {
            step_s.push(seconds);
            queued_s.push(queued);
        } else {
            warmup_s.push(seconds);
        }
        // The device is idle after the read-back; this barrier, untimed, is where cubecl's
        // kernel profiler (CWM_KERNEL_PROFILE) closes the step's table.
        device
            .sync()
            .map_err(|err| TrainError::Failed(format!("step {step}: {err}")))?;
        let reserved = device.memory_pool_usage().map(|usage| usage.bytes_reserved);
        peak_reserved_bytes = peak_reserved_bytes.max(reserved);
    }
    let mut sorted = step_s.clone();
    sorted.sort_by(f64::total_cmp);
    let median_step_s = sorted[sorted.len() / 2];
    Ok(Throughput {
        tokens_per_s: (batch * seq) as f64 / median_step_s,
        median_step_s,
        step_s,
        queued_s,
        warmup_s,
        last_loss,
        chunk_size: (options.model.family != Family::Transformer)
            .then(|| options.model.chunk_size_on(&device)),
        peak_reserved_bytes,
        precision: config.precision,
        loss: options.loss.on(&device),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_models::Size;

    #[test]
    fn a_short_measurement_reports_consistent_figures() {
        let mut options =
            ThroughputOptions::new(ModelConfig::new(Family::SliceDiag, Size::D128), "cpu");
        (options.batch, options.seq, options.warmup, options.steps) = (2, 16, 1, 3);
        let figures = measure(&options).unwrap();
        assert_eq!(figures.step_s.len(), 3);
        assert!(figures.step_s.iter().all(|&s| s > 0.0));
        assert_eq!(figures.queued_s.len(), 3);
        for (queued, step) in figures.queued_s.iter().zip(&figures.step_s) {
            assert!(0.0 < *queued && queued < step, "{queued} of {step}");
        }
        assert_eq!(figures.warmup_s.len(), 1);
        assert!(figures.warmup_s[0] > 0.0);
        let expected = 32.0 / figures.median_step_s;
        assert!((figures.tokens_per_s - expected).abs() < 1e-9 * expected);
        // Near ln of the class counts averaged over the labels at initialisation.
        assert!(
            (1.0..6.0).contains(&figures.last_loss),
            "{}",
            figures.last_loss
        );
        assert_eq!(figures.chunk_size, Some(8), "slice_diag's CPU chunk");
        assert_eq!(
            figures.peak_reserved_bytes, None,
            "the CPU backend reports no pool"
        );
        options.device = "tpu".into();
        assert!(measure(&options).is_err());
        options.device = "cpu".into();
        options.steps = 0;
        assert!(measure(&options).is_err());
    }
}
