//! The training loop (spec D.1), resumable exactly from any periodic checkpoint or
//! cancellation.
//!
//! [`train`] runs one training job from a [`TrainConfig`] and [`TrainPaths`] and writes the
//! stage's outputs. Each batch:
//!
//! 1. with `steps > 0`, stop once `step = steps`; else stop after `epochs` epochs;
//! 2. `step += 1` (skipped batches count, as in the reference);
//! 3. reseed the backend from `(seed, step)` and run the forward pass (dropout active);
//! 4. loss = `cwm_models::state_loss`;
//! 5. backward, then the loss and the global gradient norm in one read-back; NaN guard: a
//!    non-finite loss skips the batch (its gradients are discarded), then clipping, and a
//!    non-finite norm also skips; skipped batches neither
//!    update nor advance the schedule, and are always logged; 20 consecutive skips abort;
//! 6. AdamW update with `lr · λ(opt_steps)`, then `opt_steps += 1`;
//! 7. parameter check: if any parameter became non-finite, the weights are restored from the
//!    last in-memory snapshot (taken at the start and every [`NAN_SNAPSHOT_EVERY`] good steps);
//!    as in the reference, AdamW's moments and the schedule are not rolled back, and the batch
//!    counts as skipped (bad) toward the limit of 20 in a row;
//! 8. log every `log_every` steps; validate every `val_every` steps; save the partial state
//!    every `checkpoint_every` steps.
//!
//! At an epoch end it validates when `val_every > 0` (unless it just did); at the end of the
//! run it validates unless it just did, and writes the outputs.
//!
//! Cancellation ([`RunControl::cancelled`]) is checked between batches. A cancelled run first
//! saves the partial state of that step boundary (when there is a partial directory and the
//! state on disk is not already this step's), then returns [`TrainError::Cancelled`]; the next
//! run resumes at the exact next batch, whatever `checkpoint_every` is (0 included). A failure
//! to save is logged and the run still ends cancelled, to resume from the last state saved.
//!
//! The snapshot lives in memory only: a run resumed from its partial state takes a fresh one
//! at the resumed step, so a rollback after a resume may restore later weights than the
//! uninterrupted run would have (runs without a rollback are unaffected).

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::prelude::*;
use cwm_formats::Versioned;
use cwm_formats::train::{Hparams, TrainSummary};
use cwm_models::{
    Model, ModelConfig, StateMetrics, StateModel, correct_counts, rng_lock, save_model,
    state_loss_of_logits,
};
use cwm_stage_data::{ShardReader, TokenizedGame};
use serde_json::{Map, Value};

use crate::TrainError;
use crate::adamw::{AdamW, StepOutcome};
use crate::config::{TrainConfig, adamw_config, model_section, save_config};
use crate::data::{Batch, EpochReader, Position, epoch_order, shard_files};
use crate::output::{
    CHECKPOINT_DIR, STEPS_FILE, SUMMARY_FILE, StepRow, VAL_FILE, ValRow, write_steps, write_val,
};
use crate::schedule::Schedule;
use crate::state::{self, RunState};

/// Consecutive skipped batches after which training aborts (the reference's default).
pub const MAX_CONSECUTIVE_BAD: u64 = 20;

/// Good steps between two in-memory weight snapshots for the rollback of spec D.1 step 7 (the
/// reference's `nan_snapshot_every`).
pub const NAN_SNAPSHOT_EVERY: u64 = 500;

/// Where a run reads and writes.
#[derive(Debug, Clone)]
pub struct TrainPaths {
    /// The `tokenize` artifact to train on.
    pub train: PathBuf,
    /// The `tokenize` artifact to validate on, if any.
    pub val: Option<PathBuf>,
    /// The output directory (`checkpoint/` with `train_config.json`, `steps.parquet`,
    /// `val.parquet`, `summary.json`).
    pub out: PathBuf,
    /// The partial-state directory for checkpoints and resume, if any.
    pub partial: Option<PathBuf>,
    /// The identity of the run the partial state must belong to.
    pub key: String,
}

/// Hooks of a run into its surroundings.
pub struct RunControl<'a> {
    /// Progress reports: total = steps, then each step's metrics (step, loss, time left).
    pub progress: &'a cwm_stage::Progress,
    /// Whether to stop now.
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
    /// Where log lines go.
    pub log: &'a (dyn Fn(&str) + Sync),
    /// Stop (without writing outputs) right after this step's checkpoint: a simulated crash,
    /// for tests.
    pub stop_after: Option<u64>,
    /// Extra entries for the summary's `hparams` (e.g. `threads`).
    pub extra_hparams: Map<String, Value>,
}

impl std::fmt::Debug for RunControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControl")
            .field("stop_after", &self.stop_after)
            .finish()
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// Training finished and the outputs are written; this is the summary.
    Finished(Box<TrainSummary>),
    /// Stopped after this step by [`RunControl::stop_after`]; nothing written but the partial
    /// state.
    Stopped(u64),
}

/// The seed for the random draws of `step` (0 = initialisation): SplitMix64 of the pair.
pub fn step_seed(seed: u64, step: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(step)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The freshly initialised model a run with `seed` starts from, on `device`: the backend is
/// seeded with [`step_seed`]`(seed, 0)` and every parameter takes its value at once
/// ([`Model::init_seeded`]).
///
/// # Errors
/// As [`Model::init`].
pub fn init_model(config: &ModelConfig, seed: u64, device: &Device) -> Result<Model, TrainError> {
    Ok(Model::init_seeded(config, device, step_seed(seed, 0))?)
}

/// Validation (spec A.5) of `model` on the first `max_batches` batches (0 = all) of `val`.
///
/// # Errors
/// [`TrainError`] when the data cannot be read or a metric computed.
pub fn validate(
    model: &Model,
    val: &Path,
    batch_size: usize,
    max_steps: usize,
    max_batches: u64,
    device: &Device,
) -> Result<StateMetrics, TrainError> {
    let model = model.valid();
    let device = device.clone().inner();
    let mut metrics = StateMetrics::new(20)?;
    let mut reader = ShardReader::open(val, batch_size.max(1))?;
    let mut batches = 0u64;
    loop {
        if max_batches > 0 && batches >= max_batches {
            break;
        }
        let mut games = Vec::with_capacity(batch_size);
        for game in reader.by_ref().take(batch_size) {
            games.push(game?);
        }
        if games.is_empty() {
            break;
        }
        let batch = Batch::collate(&games, max_steps);
        let (moves, targets, mask) = batch.tensors(&device)?;
        let logits = model.logits(moves);
        let loss = state_loss_of_logits(model.precision(), logits.clone(), targets.clone(), mask)?;
        let correct = correct_counts(logits, targets)?;
        metrics.add_tensors(correct, &batch.lengths, &loss)?;
        batches += 1;
    }
    Ok(metrics)
}

fn val_row(step: u64, m: &StateMetrics) -> ValRow {
    ValRow {
        step,
        loss: m.loss(),
        labelwise: m.partial_exact(),
        exact_state: m.full_exact(),
        trajectory: m.game_exact(),
    }
}

/// Runs a training job (see the module docs). Resumes from `paths.partial` when it holds a
/// state for `paths.key`.
///
/// # Errors
/// [`TrainError`] for bad settings or inputs, I/O failures, too many skipped batches, or
/// cancellation.
pub fn train(
    config: &TrainConfig,
    paths: &TrainPaths,
    control: &RunControl<'_>,
    device: &Device,
) -> Result<RunEnd, TrainError> {
    crate::config::check(config)?;
    let mut trainer = Trainer::start(config, paths, control, device)?;
    while !trainer.done() {
        if (control.cancelled)() {
            trainer.save_on_cancel();
            return Err(TrainError::Cancelled);
        }
        let games = trainer.reader.next_games(config.data.batch_size)?;
        if games.is_empty() {
            trainer.end_epoch()?;
            continue;
        }
        trainer = trainer.train_batch(&games)?;
        if control.stop_after == Some(trainer.run.step) {
            return Ok(RunEnd::Stopped(trainer.run.step));
        }
    }
    trainer.finish()
}

/// The games of the training set; none is an error.
fn count_training_games(paths: &TrainPaths) -> Result<u64, TrainError> {
    let n_games = ShardReader::count_games(&paths.train)?;
    if n_games == 0 {
        return Err(TrainError::Config(format!(
            "{}: the training set holds no game",
            paths.train.display()
        )));
    }
    Ok(n_games)
}

/// The model and counters a run starts from: those of the partial state in `paths.partial`
/// when it holds one for `paths.key` (its AdamW moments then go into `optim`), else a fresh
/// model.
fn resume_or_init(
    config: &TrainConfig,
    paths: &TrainPaths,
    control: &RunControl<'_>,
    optim: &mut AdamW,
    ad: &Device,
) -> Result<(Model, RunState), TrainError> {
    let resumed = match &paths.partial {
        Some(dir) => state::load(dir, &paths.key, ad)?,
        None => None,
    };
    let Some(loaded) = resumed else {
        return Ok((
            init_model(&config.model, config.data.seed, ad)?,
            RunState::fresh(),
        ));
    };
    if loaded.config != *config {
        return Err(TrainError::Partial {
            path: paths.partial.clone().unwrap_or_default(),
            message: format!(
                "training configuration {:?} differs from the run's {:?}",
                loaded.config, config
            ),
        });
    }
    optim.import(loaded.moments, ad)?;
    (control.log)(&format!("resuming from step {}", loaded.progress.step));
    Ok((loaded.model, loaded.progress))
}

/// What one batch's optimizer step did.
struct Update {
    /// The global gradient norm (NaN when the loss was not finite: the spec's step runs no
    /// backward pass then).
    grad_norm: f64,
    /// The batch counts as skipped: non-finite loss or gradient norm, or rolled back.
    skipped: bool,
    /// The update made a parameter non-finite and the weights were restored.
    rolled_back: bool,
}

/// A training run in progress: its settings, the model and optimizer, and the loop's state.
struct Trainer<'a> {
    config: &'a TrainConfig,
    paths: &'a TrainPaths,
    control: &'a RunControl<'a>,
    /// The device validation runs on.
    device: &'a Device,
    /// The autodiff device training runs on.
    ad: Device,
    shards: Vec<PathBuf>,
    total_steps: u64,
    n_params: usize,
    schedule: Schedule,
    optim: AdamW,
    model: Model,
    run: RunState,
    /// When this process started training.
    started: Instant,
    /// Training seconds of earlier, interrupted processes.
    base_s: f64,
    /// The weights a non-finite update rolls back to (spec D.1 step 7).
    snapshot: Model,
    good_since_snapshot: u64,
    reader: EpochReader,
    /// Tokens and start of the throughput window of the next logged row.
    window_tokens: u64,
    window_start: Instant,
    /// The throughput of the last logged row, for the progress display.
    tokens_per_s: Option<f64>,
    /// The step this process started from (after a resume, the resumed one) and when, for the
    /// time left.
    first_step: u64,
    stepping_since: Instant,
    /// The step whose partial state is on disk: the resumed one, then each one saved; 0 on a
    /// fresh start, whose state needs no saving.
    saved_step: u64,
}

impl<'a> Trainer<'a> {
    /// Counts the data, sets up the schedule and optimizer, resumes or initialises the model,
    /// and reports the run's size.
    fn start(
        config: &'a TrainConfig,
        paths: &'a TrainPaths,
        control: &'a RunControl<'a>,
        device: &'a Device,
    ) -> Result<Trainer<'a>, TrainError> {
        let started = Instant::now();
        let shards = shard_files(&paths.train)?;
        let n_games = count_training_games(paths)?;
        let batches_per_epoch = n_games.div_ceil(config.data.batch_size as u64);
        let run_schedule = &config.schedule;
        let total_steps = if run_schedule.steps > 0 {
            run_schedule.steps
        } else {
            run_schedule.epochs * batches_per_epoch
        };
        let schedule = Schedule::new(
            run_schedule.kind,
            run_schedule.warmup_steps,
            run_schedule.decay_steps(total_steps),
            run_schedule.lr_min_ratio,
        )?;
        let ad = device.clone().autodiff();
        let mut optim = AdamW::new(adamw_config(config));
        let (model, run) = resume_or_init(config, paths, control, &mut optim, &ad)?;
        let n_params = model.num_params();
        (control.log)(&format!(
            "{} {}: {n_params} parameters; {n_games} games in {} shards, {batches_per_epoch} batches per epoch, {total_steps} steps",
            config.model.family,
            config.model.size,
            shards.len()
        ));
        control.progress.set_total(total_steps);
        control.progress.inc(run.step);
        let run_step = run.step;
        let reader = EpochReader::new(
            epoch_order(&shards, config.data.seed, run.epoch),
            run.position,
        );
        Ok(Trainer {
            config,
            paths,
            control,
            device,
            ad,
            shards,
            total_steps,
            n_params,
            schedule,
            optim,
            snapshot: model.clone(),
            model,
            base_s: run.train_s,
            run,
            started,
            good_since_snapshot: 0,
            reader,
            window_tokens: 0,
            window_start: Instant::now(),
            tokens_per_s: None,
            first_step: run_step,
            stepping_since: Instant::now(),
            saved_step: run_step,
        })
    }

    /// Whether the run has done its steps (or, with `steps = 0`, its epochs).
    fn done(&self) -> bool {
        let schedule = &self.config.schedule;
        if schedule.steps > 0 {
            self.run.step >= schedule.steps
        } else {
            self.run.epoch >= schedule.epochs
        }
    }

    /// Closes the current epoch (validating when `val_every > 0`, unless it just did) and opens
    /// the next.
    fn end_epoch(&mut self) -> Result<(), TrainError> {
        if self.run.epoch_batches == 0 {
            return Err(TrainError::Config(format!(
                "{}: epoch {} yielded no batch",
                self.paths.train.display(),
                self.run.epoch
            )));
        }
        if self.config.schedule.val_every > 0 && self.run.last_val_step != self.run.step {
            self.validate_now()?;
        }
        let run = &mut self.run;
        run.epoch += 1;
        run.position = Position::default();
        run.epoch_batches = 0;
        self.reader = EpochReader::new(
            epoch_order(&self.shards, self.config.data.seed, run.epoch),
            run.position,
        );
        Ok(())
    }

    /// One step on `games` (spec D.1 steps 2 to 8). Takes the trainer by value because the
    /// optimizer consumes the model and returns the updated one.
    fn train_batch(mut self, games: &[TokenizedGame]) -> Result<Self, TrainError> {
        self.run.step += 1;
        self.run.epoch_batches += 1;
        let batch = Batch::collate(games, self.config.data.max_steps);
        let lr = self.config.optimiser.lr * self.schedule.multiplier(self.run.opt_steps);
        let loss = self.forward(&batch)?;
        let detached = loss.clone().detach();
        // The backward pass and the update are queued before the loss is known to be finite:
        // the optimizer skips the update on the device when it is not, and loss, gradient
        // norm and the parameters' finiteness come back in one read-back at the step's end. A
        // non-finite loss still skips the batch with no update (spec D.1 step 5); only its
        // discarded gradients and their norm were computed.
        let grads = GradientsParams::from_grads(loss.backward(), &self.model);
        let (next, outcome) = self.optim.step(self.model, detached, &grads, lr)?;
        self.model = next;
        let loss_value = outcome.loss;
        let update = self.check_update(outcome);
        self.count_update(&update, loss_value)?;
        self.run.tokens += batch.tokens();
        self.window_tokens += batch.tokens();
        self.run.position = self.reader.position();
        let log_every = self.config.schedule.log_every;
        if update.skipped || (log_every > 0 && self.run.step.is_multiple_of(log_every)) {
            self.log_step(loss_value, lr, &update);
        }
        self.report_step(loss_value);
        let val_every = self.config.schedule.val_every;
        if val_every > 0 && self.run.step.is_multiple_of(val_every) {
            self.validate_now()?;
        }
        self.checkpoint_if_due()?;
        Ok(self)
    }

    /// The loss of `batch`, with the backend reseeded from `(seed, step)` so that the dropout
    /// masks depend on the step only: the seed and every draw of the forward pass happen under
    /// [`rng_lock`], so no other thread of the process (another stage building a model) draws
    /// in between.
    fn forward(&self, batch: &Batch) -> Result<Tensor<1>, TrainError> {
        let (moves, targets, mask) = batch.tensors(&self.ad)?;
        let _guard = rng_lock();
        self.ad
            .seed(step_seed(self.config.data.seed, self.run.step));
        Ok(self.model.state_loss(moves, targets, mask)?.loss)
    }

    /// After an optimizer step: advances the schedule when the update happened, and restores
    /// the snapshot when it made a parameter non-finite. A non-finite loss reports no norm.
    fn check_update(&mut self, outcome: StepOutcome) -> Update {
        let mut rolled_back = false;
        if outcome.applied {
            // The update happened and the schedule moves on, even if it is rolled back.
            self.run.opt_steps += 1;
            if !outcome.params_finite {
                self.model = self.snapshot.clone();
                rolled_back = true;
                self.run.rolled_back += 1;
            }
        }
        Update {
            grad_norm: if outcome.loss.is_finite() {
                outcome.grad_norm
            } else {
                f64::NAN
            },
            skipped: !outcome.applied || rolled_back,
            rolled_back,
        }
    }

    /// Counts a skipped batch (aborting after [`MAX_CONSECUTIVE_BAD`] in a row), or a good one
    /// (taking a new snapshot every [`NAN_SNAPSHOT_EVERY`]).
    fn count_update(&mut self, update: &Update, loss_value: f64) -> Result<(), TrainError> {
        let run = &mut self.run;
        if !update.skipped {
            run.consecutive_bad = 0;
            self.good_since_snapshot += 1;
            if self.good_since_snapshot >= NAN_SNAPSHOT_EVERY {
                self.snapshot = self.model.clone();
                self.good_since_snapshot = 0;
            }
            return Ok(());
        }
        run.skipped += 1;
        run.consecutive_bad += 1;
        let what = if update.rolled_back {
            "a parameter became non-finite; weights restored from the last snapshot"
        } else {
            "no update"
        };
        (self.control.log)(&format!(
            "step {}: skipped (loss {loss_value}, grad norm {}): {what}",
            run.step, update.grad_norm
        ));
        if run.consecutive_bad >= MAX_CONSECUTIVE_BAD {
            return Err(TrainError::Failed(format!(
                "{MAX_CONSECUTIVE_BAD} consecutive batches skipped (non-finite loss, gradient norm or parameters), last at step {}",
                run.step
            )));
        }
        Ok(())
    }

    /// Logs a row for this step, with the throughput since the last logged row.
    fn log_step(&mut self, loss_value: f64, lr: f64, update: &Update) {
        let elapsed = self.window_start.elapsed().as_secs_f64();
        let tokens_per_s = if elapsed > 0.0 {
            self.window_tokens as f64 / elapsed
        } else {
            0.0
        };
        let run = &mut self.run;
        run.steps.push(StepRow {
            step: run.step,
            epoch: u32::try_from(run.epoch).unwrap_or(u32::MAX),
            loss: loss_value,
            lr,
            grad_norm: update.grad_norm,
            tokens_per_s,
            skipped: update.skipped,
        });
        self.tokens_per_s = Some(tokens_per_s);
        self.window_tokens = 0;
        self.window_start = Instant::now();
    }

    /// Reports this step (the progress position), its loss and the time left (at the rate of
    /// this process's steps so far, validations included) to the progress display.
    fn report_step(&self, loss_value: f64) {
        let eta = cwm_stage::time_left(
            self.stepping_since.elapsed(),
            self.run.step.saturating_sub(self.first_step),
            self.total_steps.saturating_sub(self.first_step),
        );
        self.control.progress.set_metrics(cwm_stage::StepMetrics {
            step: self.run.step,
            total: self.total_steps,
            loss: loss_value,
            tokens_per_s: self.tokens_per_s,
            eta,
        });
    }

    /// Validates the current model when there is a validation set, and records the row.
    fn validate_now(&mut self) -> Result<(), TrainError> {
        let Some(val) = &self.paths.val else {
            return Ok(());
        };
        let data = &self.config.data;
        let metrics = validate(
            &self.model,
            val,
            data.batch_size,
            data.max_steps,
            data.val_batches,
            self.device,
        )?;
        let run = &mut self.run;
        let row = val_row(run.step, &metrics);
        (self.control.log)(&format!(
            "step {}: val loss {:.5}, labelwise {:.5}, exact_state {:.5}, trajectory {:.5}",
            row.step, row.loss, row.labelwise, row.exact_state, row.trajectory
        ));
        run.vals.push(row);
        run.last_val_step = run.step;
        Ok(())
    }

    /// Training seconds so far, earlier processes included.
    fn train_s(&self) -> f64 {
        self.base_s + self.started.elapsed().as_secs_f64()
    }

    /// Saves the partial state every `checkpoint_every` steps, when there is a directory for it.
    fn checkpoint_if_due(&mut self) -> Result<(), TrainError> {
        let every = self.config.schedule.checkpoint_every;
        if every > 0 && self.run.step.is_multiple_of(every) {
            self.save_state()?;
        }
        Ok(())
    }

    /// Saves the partial state of the current step boundary, when there is a directory for it
    /// and it does not already hold this step's state. Returns whether it wrote one.
    fn save_state(&mut self) -> Result<bool, TrainError> {
        let Some(dir) = &self.paths.partial else {
            return Ok(false);
        };
        if self.saved_step == self.run.step {
            return Ok(false);
        }
        self.run.train_s = self.train_s();
        state::save(
            dir,
            &self.paths.key,
            &self.run,
            &self.model,
            self.config,
            &self.optim.export()?,
        )?;
        self.saved_step = self.run.step;
        Ok(true)
    }

    /// On cancellation, between batches: saves the partial state (see the module docs) and logs
    /// what it did. A failure is logged only: the run ends cancelled either way.
    fn save_on_cancel(&mut self) {
        if self.paths.partial.is_none() {
            return;
        }
        let step = self.run.step;
        let line = match self.save_state() {
            Ok(true) => format!("cancelled after step {step}: partial state saved"),
            Ok(false) if step == 0 => "cancelled before the first step".to_owned(),
            Ok(false) => {
                format!("cancelled after step {step}: partial state of step {step} already saved")
            }
            Err(e) => format!(
                "cancelled after step {step}: cannot save the partial state ({e}); the next run resumes from step {}",
                self.saved_step
            ),
        };
        (self.control.log)(&line);
    }

    /// Validates unless it just did, writes the outputs and removes the partial state.
    fn finish(mut self) -> Result<RunEnd, TrainError> {
        if self.paths.val.is_some() && self.run.last_val_step != self.run.step {
            self.validate_now()?;
        }
        let out = &self.paths.out;
        std::fs::create_dir_all(out).map_err(|e| TrainError::io(out, e))?;
        let checkpoint = out.join(CHECKPOINT_DIR);
        save_model(&checkpoint, &self.model.valid(), &self.config.model)?;
        save_config(&checkpoint, self.config)?;
        write_steps(&out.join(STEPS_FILE), &self.run.steps)?;
        write_val(&out.join(VAL_FILE), &self.run.vals)?;
        let summary = self.summary(self.train_s());
        cwm_formats::write_json(&out.join(SUMMARY_FILE), &summary)?;
        if let Some(dir) = &self.paths.partial {
            state::remove(dir)?;
        }
        Ok(RunEnd::Finished(Box::new(summary)))
    }

    /// The `summary.json` of a run that took `wall_s` seconds.
    fn summary(&self, wall_s: f64) -> TrainSummary {
        let (config, run) = (self.config, &self.run);
        let best = run
            .vals
            .iter()
            .filter(|r| r.loss.is_finite())
            .min_by(|a, b| a.loss.total_cmp(&b.loss))
            .copied();
        let mut effective = config.with_model(model_section(&config.model));
        effective.schedule.lr_decay_steps = config.schedule.decay_steps(self.total_steps);
        let extra = self
            .control
            .extra_hparams
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        TrainSummary {
            version: TrainSummary::VERSION,
            kind: cwm_formats::train::KIND.to_owned(),
            arch: config.model.family.name().to_owned(),
            size: config.model.size.name().to_owned(),
            params: self.n_params as u64,
            hparams: Hparams::new(effective, extra),
            steps: run.step,
            optimizer_steps: run.opt_steps,
            epochs_done: run.epoch,
            tokens: run.tokens,
            skipped_steps: run.skipped,
            rolled_back_steps: run.rolled_back,
            tokens_per_s: if wall_s > 0.0 {
                run.tokens as f64 / wall_s
            } else {
                0.0
            },
            wall_s,
            final_val: run.vals.last().copied(),
            best_val: best,
        }
    }
}
