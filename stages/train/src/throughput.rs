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
//!
//! After the timed steps, `phase_steps` more steps (untimed in the figures above) wait for the
//! device after each of their four phases: the body's forward pass, the head with the loss, the
//! backward pass, and the update with clipping and its read-back ([`Phases`]). Each phase's
//! time is then what the device took to run it, or the host to record it where the host is
//! slower: where a step's time goes, at no cost beyond those steps. The barriers keep the host from recording one
//! phase while the device runs the one before, so the four together may exceed a timed step.

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
    /// Steps after the timed ones with a barrier after each phase ([`Phases`]; 0: none).
    pub phase_steps: usize,
}

impl ThroughputOptions {
    /// The defaults of the benchmark: batch 32, 128 tokens, 2 warm-up and 5 timed
    /// steps, 3 steps by phases, seed 0, on `device`.
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
            phase_steps: 3,
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
    /// Every step by phases, in order (see the module docs).
    pub phase_s: Vec<Phases>,
    /// The loss of the last timed step (a sanity figure: about 2.3 at initialisation).
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

/// One step's time by phases, each ended by a barrier on the device (the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phases {
    /// The body's forward pass, up to the head's input.
    pub forward_s: f64,
    /// The head and the loss.
    pub loss_s: f64,
    /// The backward pass, up to the parameters' gradients.
    pub backward_s: f64,
    /// Clipping, the update and the step's read-back.
    pub update_s: f64,
}

impl Phases {
    /// Each phase's median over `steps`; `None` for no steps.
    pub fn median_of(steps: &[Phases]) -> Option<Phases> {
        let of = |phase: fn(&Phases) -> f64| median(&steps.iter().map(phase).collect::<Vec<_>>());
        (!steps.is_empty()).then(|| Phases {
            forward_s: of(|p| p.forward_s),
            loss_s: of(|p| p.loss_s),
            backward_s: of(|p| p.backward_s),
            update_s: of(|p| p.update_s),
        })
    }
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

/// The synthetic batch every step trains on (the module docs).
struct Batch {
    moves: Tensor<2, Int>,
    targets: Tensor<3, Int>,
    valid: Tensor<2, Bool>,
}

impl Batch {
    fn new(batch: usize, seq: usize, device: &Device) -> Batch {
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
        Batch {
            moves: Tensor::from_data(TensorData::new(moves, [batch, seq]), device),
            targets: Tensor::from_data(TensorData::new(targets, [batch, seq, N_LABELS]), device),
            valid: Tensor::from_data(
                TensorData::new(vec![true; batch * seq], [batch, seq]),
                device,
            ),
        }
    }
}

/// One step's figures.
struct StepFigures {
    /// From the start to the read-back after the update.
    seconds: f64,
    /// From the start until the host had recorded the forward and backward passes.
    queued: f64,
    /// With barriers between the phases, each phase's seconds.
    phases: Option<Phases>,
    /// The loss the update read back.
    loss: f64,
}

/// What every step shares: the options, the device, the batch and the optimizer.
struct Bench<'a> {
    options: &'a ThroughputOptions,
    device: Device,
    batch: Batch,
    optim: AdamW,
}

impl Bench<'_> {
    /// Waits until the device has run everything queued so far.
    fn barrier(&self, step: usize) -> Result<(), TrainError> {
        self.device
            .sync()
            .map_err(|err| TrainError::Failed(format!("step {step}: {err}")))
    }

    /// Trains `model` one step (number `step`, which seeds its dropout), with a barrier after
    /// each phase where `barriers` says.
    fn step(
        &mut self,
        mut model: Model,
        step: usize,
        barriers: bool,
    ) -> Result<(Model, StepFigures), TrainError> {
        let start = Instant::now();
        // Where `barriers` says, waits for the device and returns the seconds since `start`.
        let mark = |bench: &Self| -> Result<Option<f64>, TrainError> {
            barriers
                .then(|| bench.barrier(step).map(|()| start.elapsed().as_secs_f64()))
                .transpose()
        };
        // `StateModel::state_loss_with`, in its two halves: the body, then the head and loss.
        let (loss, forward, head) = {
            let _guard = rng_lock();
            self.device
                .seed(step_seed(self.options.seed, step as u64 + 1));
            let batch = &self.batch;
            let features = model.features(batch.moves.clone());
            let forward = mark(self)?;
            let (targets, valid) = (batch.targets.clone(), batch.valid.clone());
            let loss = model
                .head_loss(self.options.loss, features, targets, valid)?
                .loss;
            (loss, forward, mark(self)?)
        };
        let detached = loss.clone().detach();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let queued = start.elapsed().as_secs_f64();
        let backward = mark(self)?;
        let outcome;
        (model, outcome) = self.optim.step(model, detached, &grads, 3e-4)?;
        if !outcome.loss.is_finite() {
            return Err(TrainError::Failed(format!(
                "the loss is {} at step {step}",
                outcome.loss
            )));
        }
        if !outcome.applied || !outcome.params_finite {
            return Err(TrainError::Failed(format!(
                "the gradient norm or a parameter is not finite at step {step}"
            )));
        }
        let seconds = start.elapsed().as_secs_f64();
        let phases = forward
            .zip(head)
            .zip(backward)
            .map(|((forward, head), backward)| Phases {
                forward_s: forward,
                loss_s: head - forward,
                backward_s: backward - head,
                update_s: seconds - backward,
            });
        let figures = StepFigures {
            seconds,
            queued,
            phases,
            loss: outcome.loss,
        };
        Ok((model, figures))
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
    let mut bench = Bench {
        options,
        batch: Batch::new(options.batch, options.seq, &device),
        device,
        optim: AdamW::new(AdamWConfig {
            update: options.update,
            ..AdamWConfig::new(0.95, 0.01, 1.0)
        }),
    };
    let mut step_s = Vec::with_capacity(options.steps);
    let mut queued_s = Vec::with_capacity(options.steps);
    let mut warmup_s = Vec::with_capacity(options.warmup);
    let mut phase_s = Vec::with_capacity(options.phase_steps);
    let mut last_loss = f64::NAN;
    let mut peak_reserved_bytes = None;
    let timed = options.warmup + options.steps;
    for step in 0..timed + options.phase_steps {
        let figures;
        (model, figures) = bench.step(model, step, step >= timed)?;
        if step < options.warmup {
            warmup_s.push(figures.seconds);
        } else if step < timed {
            step_s.push(figures.seconds);
            queued_s.push(figures.queued);
            last_loss = figures.loss;
        }
        phase_s.extend(figures.phases);
        // The device is idle after the read-back; this barrier, untimed, is where cubecl's
        // kernel profiler (CWM_KERNEL_PROFILE) closes the step's table.
        bench.barrier(step)?;
        let reserved = bench
            .device
            .memory_pool_usage()
            .map(|usage| usage.bytes_reserved);
        peak_reserved_bytes = peak_reserved_bytes.max(reserved);
    }
    let median_step_s = median(&step_s);
    Ok(Throughput {
        tokens_per_s: (options.batch * options.seq) as f64 / median_step_s,
        median_step_s,
        step_s,
        queued_s,
        warmup_s,
        phase_s,
        last_loss,
        chunk_size: (family != Family::Transformer)
            .then(|| options.model.chunk_size_on(&bench.device)),
        peak_reserved_bytes,
        precision: config.precision,
        loss: options.loss.on(&bench.device),
    })
}

/// The median of `values` (the upper one of an even count), NaN when there are none.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_models::Size;

    #[test]
    fn phases_take_each_phases_median() {
        let step = |f, l, b, u| Phases {
            forward_s: f,
            loss_s: l,
            backward_s: b,
            update_s: u,
        };
        let steps = [
            step(3.0, 5.0, 1.0, 9.0),
            step(1.0, 6.0, 2.0, 7.0),
            step(2.0, 4.0, 3.0, 8.0),
        ];
        assert_eq!(Phases::median_of(&steps), Some(step(2.0, 5.0, 2.0, 8.0)));
        assert_eq!(Phases::median_of(&[]), None);
        assert_eq!(median(&[4.0, 1.0]), 4.0, "the upper of an even count");
        assert!(median(&[]).is_nan());
    }

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
        // Three steps by phases after the timed ones, each of the four phases taking time.
        assert_eq!(figures.phase_s.len(), 3);
        for phases in &figures.phase_s {
            let Phases {
                forward_s,
                loss_s,
                backward_s,
                update_s,
            } = *phases;
            let each = [forward_s, loss_s, backward_s, update_s];
            assert!(each.iter().all(|&s| s > 0.0), "{phases:?}");
        }
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
        options.phase_steps = 0;
        assert!(measure(&options).unwrap().phase_s.is_empty());
        options.device = "tpu".into();
        assert!(measure(&options).is_err());
        options.device = "cpu".into();
        options.steps = 0;
        assert!(measure(&options).is_err());
    }
}
