//! Training on real games: the sample of 438 Lichess games shipped in `data/`, parsed, split
//! and tokenized with the data stages' library functions.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arrow::array::{Array, BooleanArray, Float64Array, UInt32Array, UInt64Array};
use burn::prelude::*;
use cwm_formats::train::{CONFIG_FILE, TrainConfigFile, TrainSummary};
use cwm_models::{Family, ModelConfig, Precision, Size, TrainingAttention};
use cwm_stage::{
    InputArtifact, ParamValue, Params, Progress, ProgressEvent, ProgressSink, StageContext,
    StageKind, StageLog, cuda_ordinal_in,
};
use cwm_stage_data::split::split_games;
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, ShardReader, TokenizeOptions, process_pgn,
    tokenize_games,
};
use cwm_stage_train::output::{CHECKPOINT_DIR, STEPS_FILE, SUMMARY_FILE, VAL_FILE};
use cwm_stage_train::train::{init_model, validate};
use cwm_stage_train::{
    PARAMS, RunControl, RunEnd, TrainConfig, TrainError, TrainPaths, TrainStage, train,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Map;

struct Data {
    train: PathBuf,
    val: PathBuf,
    root: PathBuf,
}

/// Parses, splits (15 % validation, so that validation has enough games) and tokenizes the
/// sample once per test binary; the training set is cut into shards of 100 games so that the
/// per-epoch shard order matters. The folder is in Cargo's scratch folder for integration tests
/// (under `target/`), since a static is never dropped to remove it.
fn data() -> &'static Data {
    static DATA: OnceLock<Data> = OnceLock::new();
    DATA.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cwm-train-it-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let pgn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
        let report = process_pgn(&ProcessOptions {
            pgn,
            out_dir: root.join("games"),
            format: OutputFormat::Parquet,
            threads: 1,
            id_key: IdKeySource::None,
            ..ProcessOptions::default()
        })
        .unwrap();
        assert!(report.kept > 400, "{} games kept", report.kept);
        for dir in ["train_games", "val_games", "train", "val"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        split_games(
            &root.join("games"),
            &root.join("train_games/games.parquet"),
            &root.join("val_games/games.parquet"),
            1500,
            10_000,
            &Progress::disabled(),
            &|| false,
        )
        .unwrap();
        for (games, out, shard_games) in [("train_games", "train", 100), ("val_games", "val", 1000)]
        {
            let options = TokenizeOptions {
                shard_games,
                ..TokenizeOptions::default()
            };
            tokenize_games(
                &root.join(games),
                &root.join(out),
                &options,
                &Progress::disabled(),
                &|| false,
            )
            .unwrap();
        }
        Data {
            train: root.join("train"),
            val: root.join("val"),
            root,
        }
    })
}

fn run(
    config: &TrainConfig,
    out: &Path,
    partial: Option<PathBuf>,
    stop_after: Option<u64>,
) -> RunEnd {
    let (end, _) = run_logged(config, out, partial, stop_after, None);
    end.unwrap()
}

/// A progress sink that remembers the last step a run reported.
#[derive(Default)]
struct LastStep(AtomicU64);

impl ProgressSink for LastStep {
    fn event(&self, event: ProgressEvent) {
        if let ProgressEvent::Metrics(metrics) = event {
            self.0.store(metrics.step, Ordering::SeqCst);
        }
    }
}

/// Runs `config` on the sample's training and validation sets; with `cancel_at`, the run is
/// cancelled (between batches) once it has reported that step. Returns how it ended and its
/// log lines.
fn run_logged(
    config: &TrainConfig,
    out: &Path,
    partial: Option<PathBuf>,
    stop_after: Option<u64>,
    cancel_at: Option<u64>,
) -> (Result<RunEnd, TrainError>, Vec<String>) {
    let d = data();
    let paths = TrainPaths {
        train: d.train.clone(),
        val: Some(d.val.clone()),
        out: out.to_path_buf(),
        partial,
        key: "test-key".into(),
    };
    let lines = std::sync::Mutex::new(Vec::<String>::new());
    let log = |line: &str| lines.lock().unwrap().push(line.to_owned());
    let last_step = Arc::new(LastStep::default());
    let cancelled = || cancel_at.is_some_and(|at| last_step.0.load(Ordering::SeqCst) >= at);
    let control = RunControl {
        progress: &Progress::new(last_step.clone()),
        cancelled: &cancelled,
        log: &log,
        stop_after,
        extra_hparams: Map::new(),
    };
    let end = train(config, &paths, &control, &Device::flex());
    let lines = lines.into_inner().unwrap();
    for line in &lines {
        eprintln!("  {line}");
    }
    (end, lines)
}

fn small(family: Family) -> TrainConfig {
    let mut config = TrainConfig::new(ModelConfig::new(family, Size::D128));
    config.data.batch_size = 8;
    config.data.max_steps = 64;
    config
}

/// [`small`], 12 steps with a checkpoint every 5 and a one-batch validation every 6: short
/// enough to stop at step 8 and resume.
fn interruptible(family: Family) -> TrainConfig {
    let mut config = small(family);
    config.data.max_steps = 32;
    config.schedule.steps = 12;
    config.schedule.val_every = 6;
    config.data.val_batches = 1;
    config.schedule.checkpoint_every = 5;
    config
}

#[test]
fn validation_loss_falls_well_below_its_initial_value() {
    let start = Instant::now();
    let mut config = small(Family::SliceDiag);
    config.schedule.steps = 200;
    config.optimiser.lr = 3e-3;
    config.schedule.val_every = 100;
    config.data.val_batches = 4;
    config.schedule.log_every = 50;
    let d = data();
    let initial = validate(
        &init_model(&config.model, config.data.seed, &Device::flex().autodiff()).unwrap(),
        &d.val,
        config.data.batch_size,
        config.data.max_steps,
        config.data.val_batches,
        &Device::flex(),
    )
    .unwrap();
    let out = d.root.join("falls");
    let RunEnd::Finished(summary) = run(&config, &out, None, None) else {
        panic!("the run was not stopped")
    };
    let final_loss = summary.final_val.unwrap().loss;
    eprintln!(
        "initial val loss {:.4} → {:.4} after 200 steps; {:.1} s (incl. data preparation)",
        initial.loss(),
        final_loss,
        start.elapsed().as_secs_f64()
    );
    assert!(initial.loss() > 1.0, "initial loss {}", initial.loss());
    assert!(
        final_loss < 0.5 * initial.loss(),
        "val loss {final_loss} is not well below the initial {}",
        initial.loss()
    );
    assert_eq!(summary.steps, 200);
    assert_eq!(summary.kind, "train");
    assert_eq!(summary.arch, "slice_diag");
    assert_eq!(summary.hparams.optimiser.lr, 3e-3);
    assert_eq!(summary.hparams.schedule.lr_decay_steps, 200);
    assert_eq!(summary.skipped_steps, 0);
    let val = read_table(&out.join(VAL_FILE));
    // Every 100 steps and at each epoch end (22 batches per epoch at batch 8... see the log).
    assert_eq!(val.u64s("step"), [44, 88, 100, 132, 176, 200]);
    let steps = read_table(&out.join(STEPS_FILE));
    assert_eq!(steps.u64s("step"), [50, 100, 150, 200]);
    assert!(out.join(CHECKPOINT_DIR).join("model.bpk").is_file());
    let (loaded, _) = cwm_models::load_model(&out.join(CHECKPOINT_DIR), &Device::flex()).unwrap();
    let again = validate(&loaded, &d.val, 8, 64, 4, &Device::flex()).unwrap();
    assert_eq!(
        again.loss(),
        final_loss,
        "the checkpoint is the final model"
    );
    let on_disk: TrainSummary = cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap();
    assert_eq!(on_disk.final_val, summary.final_val);
    // The configuration is saved beside the checkpoint, as given (lr_decay_steps unresolved).
    let saved: TrainConfigFile =
        cwm_formats::read_json(&out.join(CHECKPOINT_DIR).join(CONFIG_FILE)).unwrap();
    assert_eq!(saved.config.model, summary.hparams.model);
    assert_eq!(saved.config.optimiser, summary.hparams.optimiser);
    assert_eq!(saved.config.data, summary.hparams.data);
    assert_eq!(saved.config.schedule.lr_decay_steps, 0);
}

struct Table {
    batch: arrow::array::RecordBatch,
}

impl Table {
    fn column<T: 'static>(&self, name: &str) -> &T {
        self.batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("no column {name}"))
            .as_any()
            .downcast_ref::<T>()
            .unwrap_or_else(|| panic!("column {name} has another type"))
    }
    fn u64s(&self, name: &str) -> Vec<u64> {
        self.column::<UInt64Array>(name).values().to_vec()
    }
    fn f64_bits(&self, name: &str) -> Vec<u64> {
        self.column::<Float64Array>(name)
            .values()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }
}

fn read_table(path: &Path) -> Table {
    let file = std::fs::File::open(path).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let schema = batches[0].schema();
    Table {
        batch: arrow::compute::concat_batches(&schema, &batches).unwrap(),
    }
}

/// Everything of steps.parquet but the wall-clock throughput.
fn steps_content(path: &Path) -> (Vec<u64>, Vec<u32>, Vec<Vec<u64>>, Vec<bool>) {
    let t = read_table(path);
    let skipped = t.column::<BooleanArray>("skipped");
    (
        t.u64s("step"),
        t.column::<UInt32Array>("epoch").values().to_vec(),
        ["loss", "lr", "grad_norm"]
            .iter()
            .map(|c| t.f64_bits(c))
            .collect(),
        (0..skipped.len()).map(|i| skipped.value(i)).collect(),
    )
}

/// Every parameter of the checkpoint in the train output `dir`, as f32 bit patterns under the
/// PyTorch key names.
fn weights(dir: &Path) -> Vec<(String, Vec<u32>)> {
    let (model, _) = cwm_models::load_model(&dir.join(CHECKPOINT_DIR), &Device::flex()).unwrap();
    cwm_models::interop::torch_state_dict(&model)
        .unwrap()
        .into_iter()
        .map(|t| (t.key, t.values.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

/// Train N steps straight; train again, "crash" after a checkpoint (mid-epoch, after an epoch
/// boundary, with dropout active), resume to N: the final weights and logs are bit-identical.
#[test]
fn a_resumed_run_is_bit_identical_to_an_uninterrupted_one() {
    let start = Instant::now();
    let mut config = small(Family::SliceDiag);
    config.data.batch_size = 16;
    config.data.max_steps = 32;
    config.schedule.steps = 40;
    config.schedule.kind = cwm_stage_train::ScheduleKind::Cosine;
    config.schedule.warmup_steps = 5;
    config.optimiser.weight_decay = 0.01;
    config.schedule.val_every = 15;
    config.data.val_batches = 2;
    config.schedule.log_every = 5;
    config.schedule.checkpoint_every = 10;
    let d = data();
    let straight = d.root.join("straight");
    let straight_partial = d.root.join("partial-straight");
    let RunEnd::Finished(a) = run(&config, &straight, Some(straight_partial.clone()), None) else {
        panic!("not finished")
    };
    assert!(
        !straight_partial.exists(),
        "the partial state is removed at the end"
    );
    assert!(
        a.epochs_done >= 1,
        "the run crosses an epoch boundary: {a:?}"
    );

    let resumed = d.root.join("resumed");
    let partial = d.root.join("partial-resumed");
    // Crash at step 35: the last checkpoint is step 30, mid-epoch; steps 31..35 are lost.
    assert_eq!(
        run(&config, &resumed, Some(partial.clone()), Some(35)),
        RunEnd::Stopped(35)
    );
    assert!(partial.join("state.json").is_file());
    assert!(
        !resumed.join(STEPS_FILE).exists(),
        "a crashed run writes no output"
    );
    let RunEnd::Finished(b) = run(&config, &resumed, Some(partial.clone()), None) else {
        panic!("not finished")
    };
    assert!(!partial.exists());

    // Every parameter, bit for bit (the burnpack file itself also records per-process
    // parameter ids, so its bytes differ between two identical runs).
    let straight_weights = weights(&straight);
    assert!(!straight_weights.is_empty());
    assert!(
        straight_weights == weights(&resumed),
        "final weights differ"
    );
    assert_eq!(
        steps_content(&straight.join(STEPS_FILE)),
        steps_content(&resumed.join(STEPS_FILE))
    );
    let (va, vb) = (
        read_table(&straight.join(VAL_FILE)),
        read_table(&resumed.join(VAL_FILE)),
    );
    // Every 15 steps, at the epoch end, and at the end of the run.
    let val_steps = va.u64s("step");
    assert!(
        val_steps.contains(&15) && val_steps.contains(&30),
        "{val_steps:?}"
    );
    assert_eq!(val_steps.last(), Some(&40));
    assert_eq!(val_steps, vb.u64s("step"));
    for column in ["loss", "labelwise", "exact_state", "trajectory"] {
        assert_eq!(va.f64_bits(column), vb.f64_bits(column), "{column}");
    }
    assert_eq!(
        (a.steps, a.tokens, a.epochs_done, a.skipped_steps),
        (b.steps, b.tokens, b.epochs_done, b.skipped_steps)
    );
    assert_eq!(a.final_val, b.final_val);
    assert_eq!(a.best_val, b.best_val);
    assert_eq!(a.hparams, b.hparams);
    // Dropout is on, so a different seed gives different weights: the comparison has teeth.
    let mut other = config.clone();
    other.data.seed = 1;
    let other_out = d.root.join("other-seed");
    run(&other, &other_out, None, None);
    assert!(weights(&other_out) != straight_weights);
    eprintln!("resume test: {:.1} s", start.elapsed().as_secs_f64());
}

/// Mamba-3 in bf16 (the reference's autocast, here on the CPU): a crashed run resumes in bf16
/// (a checkpoint loads in f32, so the precision must be put back) and ends bit-identical to a
/// straight one, whose weights differ from the same run's in f32.
#[test]
fn a_bf16_run_resumes_in_bf16() {
    let start = Instant::now();
    let mut config = interruptible(Family::Mamba3);
    config.model.precision = Precision::Bf16;
    let d = data();
    let straight = d.root.join("bf16-straight");
    let RunEnd::Finished(a) = run(&config, &straight, None, None) else {
        panic!("not finished")
    };
    assert_eq!(a.hparams.config().model.precision, "bf16");
    assert!(a.final_val.is_some_and(|v| v.loss.is_finite()));

    let resumed = d.root.join("bf16-resumed");
    let partial = d.root.join("bf16-partial");
    let stopped = run(&config, &resumed, Some(partial.clone()), Some(8));
    assert_eq!(stopped, RunEnd::Stopped(8));
    run(&config, &resumed, Some(partial), None);
    assert!(
        weights(&straight) == weights(&resumed),
        "a resumed bf16 run differs"
    );

    let mut f32_config = config.clone();
    f32_config.model.precision = Precision::F32;
    let f32_out = d.root.join("bf16-as-f32");
    run(&f32_config, &f32_out, None, None);
    assert!(
        weights(&f32_out) != weights(&straight),
        "bf16 changed nothing"
    );
    eprintln!("bf16 resume test: {:.1} s", start.elapsed().as_secs_f64());
}

/// A run with the attention kernels' setting records it and resumes with it (the checkpoint's
/// model configuration carries it, or the resumed run's configuration would differ from the
/// run's); on the CPU it trains exactly as the default.
#[test]
fn a_run_with_the_attention_kernels_setting_resumes_with_it() {
    let mut config = interruptible(Family::Transformer);
    config.model.attention = TrainingAttention::Kernels;
    let d = data();
    let resumed = d.root.join("kernels-resumed");
    let partial = d.root.join("kernels-partial");
    let stopped = run(&config, &resumed, Some(partial.clone()), Some(8));
    assert_eq!(stopped, RunEnd::Stopped(8));
    let RunEnd::Finished(summary) = run(&config, &resumed, Some(partial), None) else {
        panic!("not finished")
    };
    assert_eq!(summary.hparams.config().model.attention, "kernels");

    let mut operations = config.clone();
    operations.model.attention = TrainingAttention::Operations;
    let straight = d.root.join("kernels-as-operations");
    run(&operations, &straight, None, None);
    assert!(
        weights(&straight) == weights(&resumed),
        "the setting changed a CPU run"
    );
}

/// An absurd learning rate blows the weights up: each batch is either skipped for a
/// non-finite loss or its update is rolled back (spec D.1 step 7); all are counted and logged.
#[test]
fn non_finite_losses_are_skipped_counted_and_logged() {
    let mut config = small(Family::SliceDiag);
    config.schedule.steps = 6;
    config.optimiser.lr = 1e38;
    config.schedule.log_every = 0;
    let out = data().root.join("nan");
    let RunEnd::Finished(summary) = run(&config, &out, None, None) else {
        panic!("not finished")
    };
    let steps = read_table(&out.join(STEPS_FILE));
    let skipped = summary.skipped_steps;
    let rolled_back = summary.rolled_back_steps;
    assert!(skipped >= 4, "{summary:?}");
    assert_eq!(
        steps.u64s("step").len() as u64,
        skipped,
        "every skipped step is logged"
    );
    assert_eq!(*steps.u64s("step").last().unwrap(), 6);
    // A rolled-back update moved the schedule and is also a skipped batch.
    assert_eq!(
        summary.optimizer_steps + skipped - rolled_back,
        6,
        "{summary:?}"
    );
}

/// A learning rate whose step size overflows f32 makes every updated parameter non-finite:
/// each update is rolled back to the snapshot taken at the start, so the run ends with its
/// initial weights, every batch counted as skipped and the schedule advanced by every update;
/// 20 such batches in a row abort the run.
#[test]
fn non_finite_parameters_are_rolled_back_to_the_snapshot() {
    let mut config = small(Family::Transformer);
    config.schedule.steps = 4;
    config.optimiser.lr = 1e39;
    config.schedule.log_every = 0;
    let out = data().root.join("rollback");
    let RunEnd::Finished(summary) = run(&config, &out, None, None) else {
        panic!("not finished")
    };
    assert_eq!(summary.skipped_steps, 4, "{summary:?}");
    assert_eq!(summary.rolled_back_steps, 4, "{summary:?}");
    assert_eq!(summary.optimizer_steps, 4, "{summary:?}");
    let initial = {
        let device = Device::flex().autodiff();
        let model = init_model(&config.model, config.data.seed, &device).unwrap();
        let dir = data().root.join("rollback-init");
        cwm_models::save_model(&dir.join(CHECKPOINT_DIR), &model, &config.model).unwrap();
        weights(&dir)
    };
    assert!(weights(&out) == initial, "the weights are the initial ones");

    config.schedule.steps = 25;
    let d = data();
    let paths = TrainPaths {
        train: d.train.clone(),
        val: None,
        out: d.root.join("rollback-abort"),
        partial: None,
        key: "test-key".into(),
    };
    let control = RunControl {
        progress: &Progress::disabled(),
        cancelled: &|| false,
        log: &|_| {},
        stop_after: None,
        extra_hparams: Map::new(),
    };
    let err = train(&config, &paths, &control, &Device::flex()).unwrap_err();
    assert!(
        err.to_string().contains("20 consecutive batches skipped"),
        "{err}"
    );
}

/// The same run on pools of 1, 2 and 4 threads (the stage runs training inside such a pool):
/// burn's CPU backend must not make the weights depend on how many threads it was given, or a
/// resume on another machine would not be exact.
#[test]
fn thread_count_does_not_change_the_weights() {
    let mut config = small(Family::SliceDiag);
    config.schedule.steps = 6;
    config.schedule.log_every = 0;
    let d = data();
    let mut results = Vec::new();
    for threads in [1, 2, 4] {
        let out = d.root.join(format!("threads-{threads}"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| run(&config, &out, None, None));
        results.push(weights(&out));
    }
    assert!(
        results[0] == results[1] && results[1] == results[2],
        "weights differ between 1, 2 and 4 threads"
    );
}

/// Cancelled runs (as the executor cancels one at a Slurm warning) save their state at the step
/// boundary where they stop, whatever `checkpoint_every` says: cancelled at step 7 (the last
/// periodic checkpoint is step 4), resumed, cancelled again at the end of the first epoch (the
/// last batch taken, the epoch not yet closed), resumed to the end, the final weights, steps and
/// validations are bit-identical to an uninterrupted run's, and each resume starts at the step
/// where its run was cancelled.
#[test]
fn a_run_cancelled_between_checkpoints_resumes_where_it_stopped() {
    let mut config = small(Family::SliceDiag);
    config.data.batch_size = 16;
    config.data.max_steps = 32;
    config.schedule.kind = cwm_stage_train::ScheduleKind::Cosine;
    config.schedule.warmup_steps = 3;
    config.optimiser.weight_decay = 0.01;
    config.schedule.val_every = 5;
    config.data.val_batches = 2;
    config.schedule.log_every = 3;
    config.schedule.checkpoint_every = 4;
    let d = data();
    let batches_per_epoch = ShardReader::count_games(&d.train)
        .unwrap()
        .div_ceil(config.data.batch_size as u64);
    assert!(
        batches_per_epoch > 8,
        "{batches_per_epoch} batches per epoch"
    );
    config.schedule.steps = batches_per_epoch + 3;
    let straight = d.root.join("cancel-straight");
    let RunEnd::Finished(a) = run(&config, &straight, None, None) else {
        panic!("not finished")
    };
    assert_eq!(a.epochs_done, 1, "{a:?}");

    let resumed = d.root.join("cancel-resumed");
    let partial = d.root.join("partial-cancelled");
    let mut starts = Vec::new();
    let mut finished = None;
    for cancel_at in [Some(7), Some(batches_per_epoch), None] {
        let (end, lines) = run_logged(&config, &resumed, Some(partial.clone()), None, cancel_at);
        starts.extend(
            lines
                .iter()
                .filter(|l| l.starts_with("resuming from step"))
                .cloned(),
        );
        let Some(at) = cancel_at else {
            finished = Some(end.unwrap());
            break;
        };
        assert!(matches!(end, Err(TrainError::Cancelled)), "{end:?}");
        let saved = format!("cancelled after step {at}: partial state");
        assert!(lines.iter().any(|l| l.starts_with(&saved)), "{lines:?}");
        assert!(partial.join("state.json").is_file());
        assert!(
            !resumed.join(STEPS_FILE).exists(),
            "a cancelled run writes no output"
        );
    }
    assert_eq!(
        starts,
        [
            "resuming from step 7".to_owned(),
            format!("resuming from step {batches_per_epoch}")
        ]
    );
    let Some(RunEnd::Finished(b)) = finished else {
        panic!("not finished")
    };
    assert!(!partial.exists(), "the partial state is removed at the end");

    assert!(
        weights(&straight) == weights(&resumed),
        "final weights differ"
    );
    assert_eq!(
        steps_content(&straight.join(STEPS_FILE)),
        steps_content(&resumed.join(STEPS_FILE))
    );
    let (va, vb) = (
        read_table(&straight.join(VAL_FILE)),
        read_table(&resumed.join(VAL_FILE)),
    );
    assert_eq!(va.u64s("step"), vb.u64s("step"));
    for column in ["loss", "labelwise", "exact_state", "trajectory"] {
        assert_eq!(va.f64_bits(column), vb.f64_bits(column), "{column}");
    }
    assert_eq!(
        (a.steps, a.optimizer_steps, a.tokens, a.epochs_done),
        (b.steps, b.optimizer_steps, b.tokens, b.epochs_done)
    );
    assert_eq!(a.final_val, b.final_val);
}

/// The `train` stage, two steps of a small model with `device` and GPU 3 assigned; returns the
/// run's result and its log.
fn run_stage(tag: &str, device: &str) -> (Result<(), String>, String) {
    let d = data();
    let mut params = Params::new();
    for spec in PARAMS {
        if let Some(value) = spec.default.value() {
            params.insert(spec.name, value);
        }
    }
    params.insert("arch", ParamValue::Str("slice_diag".into()));
    params.insert("device", ParamValue::Str(device.into()));
    for (name, value) in [
        ("batch_size", 8),
        ("max_steps", 16),
        ("steps", 2),
        ("threads", 1),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    let train_input = InputArtifact {
        producer: "tokenize".into(),
        producer_kind: "tokenize".into(),
        producer_params: Params::new(),
        output: "out".into(),
        hash: "h".into(),
        path: d.train.clone(),
    };
    let out = d.root.join(format!("stage-{tag}"));
    std::fs::create_dir_all(&out).unwrap();
    let log = d.root.join(format!("stage-{tag}.log"));
    let ctx = StageContext::new(
        "train",
        params,
        [("train".to_owned(), vec![train_input])].into(),
        [("out".to_owned(), out)].into(),
        d.root.clone(),
        1,
        Progress::disabled(),
        StageLog::to_file(std::fs::File::create(&log).unwrap()),
        Default::default(),
    )
    .with_gpus(vec![3]);
    let result = TrainStage.run(&ctx).map_err(|e| e.to_string());
    drop(ctx);
    (result, std::fs::read_to_string(&log).unwrap())
}

/// `device: cpu` trains on the CPU even with a GPU assigned; `device: cuda` uses the assigned
/// GPU's ordinal in this process's CUDA_VISIBLE_DEVICES (without the cuda feature, the tests'
/// build, the run then fails at once naming that device).
#[test]
fn the_stage_uses_the_assigned_gpu_only_when_its_device_is_cuda() {
    let (result, log) = run_stage("cpu", "cpu");
    result.unwrap();
    assert!(
        log.contains("device cpu (param cpu; assigned GPUs [3])"),
        "{log}"
    );
    assert!(log.contains("finished: 2 steps"), "{log}");

    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let expected = match cuda_ordinal_in(&[3], visible.as_deref()) {
        Some(ordinal) => format!("cuda:{ordinal}"),
        None => "cuda".to_owned(),
    };
    let (result, log) = run_stage("cuda", "cuda");
    assert!(
        log.contains(&format!(
            "device {expected} (param cuda; assigned GPUs [3])"
        )),
        "{log}"
    );
    if let Err(e) = result {
        assert!(e.contains(&format!("{expected:?}")), "{e}");
    }
}
