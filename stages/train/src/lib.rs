//! The `train` stage kind of cwm: trains one benchmark model on a `tokenize` artifact, with the
//! reference's loss, optimiser, schedule, clipping, NaN guard, data order and validation
//! (spec A.4, A.5, D.1, D.2, D.4, E.8), and resumes exactly after a crash.
//!
//! * **Inputs** `train` (a `tokenize` artifact), `val` (optional, a `tokenize` artifact: without
//!   it no validation), `hparams` (optional, a `select` artifact: the choice whose `arch` and
//!   `size` equal this stage's replaces `lr`, `beta2`, `weight_decay` and `warmup_steps`).
//! * **Params**: see [`PARAMS`] (`cwm kinds` lists them with their defaults).
//! * **Output** `out`: `checkpoint/` (`model.json` + `model.bpk`, [`cwm_models::save_model`],
//!   and `train_config.json`, the [`TrainConfig`] as [`cwm_formats::train::TrainConfigFile`]),
//!   `steps.parquet`, `val.parquet` ([`output`] has the columns) and `summary.json`
//!   ([`cwm_formats::train::TrainSummary`]).
//!
//! # Resume
//! The executor runs a stage in a fresh temporary output directory, so the resumable state
//! lives outside it, in the directory the store keeps for the instance's cache key
//! (`StageContext::partial_dir`, `artifacts/partial/<key>/`): a changed param or input changes
//! the key and never resumes a stale run, and `cwm gc` removes the state of keys no stale
//! instance has. The state also records [`partial_key`] (this kind's code fingerprint, the
//! params but `threads`, the inputs' content hashes) and is ignored when that differs. Every
//! `checkpoint_every` steps
//! the state (model, AdamW moments and step counts, scheduler position, epoch, position in the
//! epoch's data, logged rows) is written there atomically ([`state`]), and also when the run is
//! cancelled (the executor cancels at a Slurm time-limit or preemption warning): the check
//! happens between batches, and the state of that step boundary is saved before the stage
//! returns `StageError::Cancelled`, so the requeued run resumes exactly there whatever
//! `checkpoint_every` is (see [`train`](mod@train)); a run that finds one
//! logs `resuming from step N` and continues at the exact next batch; the directory is removed
//! once the outputs are written. Dropout masks are drawn after reseeding the backend from
//! `(seed, step)` ([`train::step_seed`]), so a resumed run is bit-identical to an uninterrupted
//! one on the same machine's CPU (not on a GPU, whose kernels vary run to run: docs/gpu.md);
//! a test finds identical weights with 1, 2 and 4 threads (d128, batch 8, 64 tokens; larger
//! shapes, where the backend may split work differently, are unchecked).
//!
//! Unlike the reference, which restarts the recorded epoch from its beginning, resume continues
//! mid-epoch at the next batch.
//!
//! # Device
//! The `device` param says where the model trains: `cpu` (the default), `cuda` or `cuda:N`.
//! The kind claims one GPU from the executor when it is `cuda` or `cuda:N`
//! (`GpusDecl::CudaParam`); a bare `cuda` then trains on the GPU the executor assigned
//! (`StageContext::assigned_device`: its ordinal in this process's `CUDA_VISIBLE_DEVICES`),
//! while an explicit `cuda:N` is used as written. The log names the device used. The param is
//! part of the cache and partial keys as written, so a requeued run may resume on another GPU.
//!
//! # Precision
//! The `precision` param: `f32`, or `bf16` for the Mamba families, the reference's bf16
//! autocast as [`cwm_models::mixed`] reduces it (bf16 matrix products, the loss's bf16
//! denominator). `auto`, the default, is the reference's choice: `bf16` for `mamba3` on a
//! GPU, `f32` for everything else and for every run on the CPU. The precision used is
//! recorded in the run's configuration files; a checkpoint is evaluated in f32 whatever it was
//! trained in, as the reference's test script does.
//!
//! # Attention
//! The `attention` param: how the Transformer's training attention runs on a cubecl device,
//! as tensor operations (`operations`, the default) or as `cwm_models`' attention kernels
//! (`kernels`), which keep no `[batch, heads, seq, seq]` tensor. It changes nothing on the CPU;
//! it is recorded in the run's configuration files.
#![deny(missing_docs)]

pub mod adamw;
pub mod config;
pub mod data;
mod error;
pub mod output;
pub mod schedule;
pub mod state;
pub mod throughput;
pub mod train;

use std::path::Path;

use burn::prelude::Device;
use cwm_formats::select::Selection;
use cwm_formats::train::{DataSection, ModelSection, OptimiserSection, ScheduleSection};
use cwm_models::{Family, Precision};
use cwm_stage::{
    GpusDecl, InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Params,
    StageContext, StageError, StageKind, ThreadsDecl,
};
use serde_json::{Map, json};

pub use config::TrainConfig;
pub use error::TrainError;
pub use schedule::{Schedule, ScheduleKind};
pub use train::{RunControl, RunEnd, TrainPaths, train};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

const ARCHS: &[&str] = &[
    "transformer",
    "slice",
    "slice_diag",
    "gdn",
    "gdn_pos",
    "mamba3",
    "mamba2",
];
const SIZES: &[&str] = &["d128", "d256", "d384", "d512"];
const ROPES: &[&str] = &["reference", "standard"];
const PRECISIONS: &[&str] = &["auto", "f32", "bf16"];
const ATTENTIONS: &[&str] = &["operations", "kernels"];
const SCHEDULES: &[&str] = &["none", "constant", "cosine", "linear"];

/// The params of the `train` kind.
pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::required("arch", ParamType::Choice(ARCHS), "model family"),
    ParamSpec::with_default(
        "size",
        ParamType::Choice(SIZES),
        ParamDefault::Str("d128"),
        "size preset",
    ),
    ParamSpec::with_default(
        "dropout",
        ParamType::Float,
        ParamDefault::Float(0.1),
        "dropout probability (where each family applies it)",
    ),
    ParamSpec::with_default(
        "rope",
        ParamType::Choice(ROPES),
        ParamDefault::Str("reference"),
        "Transformer RoPE variant",
    ),
    ParamSpec::with_default(
        "mamba3_mimo",
        ParamType::Bool,
        ParamDefault::Bool(false),
        "Mamba-3 MIMO instead of SISO",
    ),
    ParamSpec::with_default(
        "precision",
        ParamType::Choice(PRECISIONS),
        ParamDefault::Str("auto"),
        "matrix products in f32, or in bf16 as the reference's autocast (mamba3, mamba2); auto: the reference's choice, bf16 for mamba3 on a GPU, else f32",
    ),
    ParamSpec::with_default(
        "attention",
        ParamType::Choice(ATTENTIONS),
        ParamDefault::Str("operations"),
        "Transformer on a cubecl device (cuda): its training attention as tensor operations, or as cwm's kernels that keep no [batch, heads, seq, seq] tensor",
    ),
    ParamSpec::with_default(
        "batch_size",
        ParamType::Int,
        ParamDefault::Int(32),
        "games per batch (validation too)",
    ),
    ParamSpec::with_default(
        "max_steps",
        ParamType::Int,
        ParamDefault::Int(0),
        "sequence truncation in tokens incl. START (0 = none)",
    ),
    ParamSpec::with_default(
        "steps",
        ParamType::Int,
        ParamDefault::Int(0),
        "optimizer steps to run, cycling epochs as needed (0 = run `epochs`)",
    ),
    ParamSpec::with_default(
        "epochs",
        ParamType::Int,
        ParamDefault::Int(1),
        "epochs to run when steps = 0",
    ),
    ParamSpec::with_default(
        "lr",
        ParamType::Float,
        ParamDefault::Float(1e-3),
        "base learning rate",
    ),
    ParamSpec::with_default(
        "beta2",
        ParamType::Float,
        ParamDefault::Float(0.999),
        "AdamW beta2",
    ),
    ParamSpec::with_default(
        "weight_decay",
        ParamType::Float,
        ParamDefault::Float(0.0),
        "decoupled weight decay",
    ),
    ParamSpec::with_default(
        "warmup_steps",
        ParamType::Int,
        ParamDefault::Int(0),
        "linear warm-up steps (none schedule: ignored)",
    ),
    ParamSpec::with_default(
        "schedule",
        ParamType::Choice(SCHEDULES),
        ParamDefault::Str("none"),
        "lr schedule: none (constant, no warm-up), constant (warm-up, then constant), cosine, linear",
    ),
    ParamSpec::with_default(
        "lr_decay_steps",
        ParamType::Int,
        ParamDefault::Int(0),
        "decay steps S (0 = the run's total steps)",
    ),
    ParamSpec::with_default(
        "lr_min_ratio",
        ParamType::Float,
        ParamDefault::Float(0.1),
        "schedule floor r",
    ),
    ParamSpec::with_default(
        "grad_clip",
        ParamType::Float,
        ParamDefault::Float(1.0),
        "global gradient-norm clip (0 = none)",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "seed of init, dropout and shard order",
    ),
    ParamSpec::with_default(
        "val_every",
        ParamType::Int,
        ParamDefault::Int(0),
        "validate every N steps (0 = only at the end)",
    ),
    ParamSpec::with_default(
        "val_batches",
        ParamType::Int,
        ParamDefault::Int(10),
        "validation batches (0 = all)",
    ),
    ParamSpec::with_default(
        "log_every",
        ParamType::Int,
        ParamDefault::Int(50),
        "log a steps.parquet row every N steps",
    ),
    ParamSpec::with_default(
        "checkpoint_every",
        ParamType::Int,
        ParamDefault::Int(0),
        "save the resumable state every N steps (0 = never)",
    ),
    ParamSpec::with_default(
        "device",
        ParamType::Str,
        ParamDefault::Str("cpu"),
        "where the model trains: cpu, cuda (the GPU the executor assigns) or cuda:N (cuda needs a build with --features cuda)",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[
    InputSpec::one("train", "a tokenize artifact to train on"),
    InputSpec::one("val", "a tokenize artifact to validate on").optional(),
    InputSpec::one(
        "hparams",
        "a select artifact: lr, beta2, weight_decay, warmup_steps of this arch and size",
    )
    .optional(),
];

/// The `train` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrainStage;

fn uint(params: &Params, name: &str) -> Result<u64, TrainError> {
    params
        .uint(name)
        .map_err(|e| TrainError::Config(e.to_string()))
}

fn float(params: &Params, name: &str) -> Result<f64, TrainError> {
    params
        .float(name)
        .map_err(|e| TrainError::Config(e.to_string()))
}

fn text<'a>(params: &'a Params, name: &str) -> Result<&'a str, TrainError> {
    params
        .str(name)
        .map_err(|e| TrainError::Config(e.to_string()))
}

/// The [`TrainConfig`] described by validated stage params (defaults filled in) for a run on
/// `device` (`precision: auto` depends on it).
///
/// # Errors
/// [`TrainError::Config`] naming the param that is missing, negative or unknown;
/// [`TrainError::Model`] for an invalid model.
pub fn config_from_params(params: &Params, device: &Device) -> Result<TrainConfig, TrainError> {
    let usize_of = |name: &str| -> Result<usize, TrainError> {
        usize::try_from(uint(params, name)?)
            .map_err(|_| TrainError::Config(format!("parameter `{name}` is too large")))
    };
    let schedule = text(params, "schedule")?;
    let arch = text(params, "arch")?;
    let precision = match text(params, "precision")? {
        "auto" => Precision::reference(arch.parse::<Family>()?, device),
        named => named.parse::<Precision>()?,
    };
    let model = ModelSection {
        arch: arch.to_owned(),
        size: text(params, "size")?.to_owned(),
        dropout: float(params, "dropout")?,
        rope: text(params, "rope")?.to_owned(),
        mamba3_mimo: params
            .bool("mamba3_mimo")
            .map_err(|e| TrainError::Config(e.to_string()))?,
        precision: precision.name().to_owned(),
        attention: text(params, "attention")?.to_owned(),
    };
    Ok(TrainConfig {
        model: config::model_config(&model)?,
        optimiser: OptimiserSection {
            lr: float(params, "lr")?,
            beta2: float(params, "beta2")?,
            weight_decay: float(params, "weight_decay")?,
            grad_clip: float(params, "grad_clip")?,
        },
        schedule: ScheduleSection {
            steps: uint(params, "steps")?,
            epochs: uint(params, "epochs")?,
            kind: ScheduleKind::from_name(schedule).ok_or_else(|| {
                TrainError::Config(format!(
                    "schedule: {schedule:?} is not none, constant, cosine or linear"
                ))
            })?,
            warmup_steps: uint(params, "warmup_steps")?,
            lr_decay_steps: uint(params, "lr_decay_steps")?,
            lr_min_ratio: float(params, "lr_min_ratio")?,
            val_every: uint(params, "val_every")?,
            log_every: uint(params, "log_every")?,
            checkpoint_every: uint(params, "checkpoint_every")?,
        },
        data: DataSection {
            batch_size: usize_of("batch_size")?,
            max_steps: usize_of("max_steps")?,
            val_batches: uint(params, "val_batches")?,
            seed: uint(params, "seed")?,
        },
    })
}

/// The hyper-parameters a `select` artifact chose for `arch` × `size`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectedHparams {
    /// The producing instance named in the choice, if any.
    pub instance: Option<String>,
    /// Learning rate.
    pub lr: f64,
    /// β2.
    pub beta2: f64,
    /// Weight decay.
    pub weight_decay: f64,
    /// Warm-up steps.
    pub warmup_steps: u64,
}

/// Reads `selected.json` of a `select` artifact at `dir` and returns the choice for `arch` and
/// `size`.
///
/// # Errors
/// [`TrainError::Format`] when the file is missing or malformed; [`TrainError::Hparams`] when
/// it holds no choice for this arch and size, or a negative or non-finite hyperparameter.
pub fn selected_hparams(dir: &Path, arch: &str, size: &str) -> Result<SelectedHparams, TrainError> {
    let path = if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join(cwm_formats::select::SELECTED_FILE)
    };
    let bad = |message: String| TrainError::Hparams {
        path: path.clone(),
        message,
    };
    let selection: Selection = cwm_formats::read_json(&path)?;
    // An ablation without a choice of its own takes its full family's (the paper trains the
    // ablations with the winners of slice, gdn and mamba3).
    let full_family = match arch {
        "slice_diag" => "slice",
        "gdn_pos" => "gdn",
        "mamba2" => "mamba3",
        other => other,
    };
    let matching = |name: &str| {
        selection
            .choices
            .iter()
            .find(|c| c.arch == name && c.size == size)
    };
    let choice = matching(arch)
        .or_else(|| matching(full_family))
        .ok_or_else(|| {
            let have: Vec<String> = selection
                .choices
                .iter()
                .map(|c| format!("{}/{}", c.arch, c.size))
                .collect();
            bad(format!(
                "no choice for arch {arch} size {size} (it has: {})",
                have.join(", ")
            ))
        })?;
    let h = &choice.hparams;
    for (name, x) in [
        ("lr", h.lr),
        ("beta2", h.beta2),
        ("weight_decay", h.weight_decay),
    ] {
        if !x.is_finite() || x < 0.0 {
            return Err(bad(format!(
                "choice {arch}/{size}: hparams.{name} {x} is not a number ≥ 0"
            )));
        }
    }
    Ok(SelectedHparams {
        instance: Some(choice.instance.clone()),
        lr: h.lr,
        beta2: h.beta2,
        weight_decay: h.weight_decay,
        warmup_steps: h.warmup_steps,
    })
}

/// The identity of a run for its partial state: blake3 of the kind's fingerprint, the params
/// but `threads`, and each input's name and content hash.
pub fn partial_key(fingerprint: &str, params: &Params, inputs: &[(String, String)]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"cwm-train-partial-v1\n");
    hasher.update(fingerprint.as_bytes());
    hasher.update(b"\n");
    let mut kept = Params::new();
    for (name, value) in params.iter() {
        if name != "threads" {
            kept.insert(name, value.clone());
        }
    }
    hasher.update(kept.canonical().as_bytes());
    for (name, hash) in inputs {
        hasher.update(format!("\n{name}={hash}").as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

/// The log line naming the device a run uses: `device_name`, resolved from the `device` param
/// `requested` and the GPUs the executor assigned.
fn device_line(requested: &str, device_name: &str, gpus: &[u32]) -> String {
    match gpus {
        [] => format!("device {device_name}"),
        _ => format!("device {device_name} (param {requested}; assigned GPUs {gpus:?})"),
    }
}

const DECL: KindDecl = KindDecl::new(
    "train",
    "trains a model on tokenized games (reference loss, AdamW, schedule, NaN guard), resumable",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param)
.gpus(GpusDecl::CudaParam("device"));

impl StageKind for TrainStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[
            &cwm_stage::fingerprint_of_files(FILE_FINGERPRINTS, &["Cargo.toml", "src/"]),
            cwm_models::SOURCE_FINGERPRINT,
            &cwm_stage_data::shard_reader_fingerprint(),
            cwm_random_uniform::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let log = |line: &str| ctx.log().line(line);
        let requested = text(ctx.params(), "device")?;
        let device_name = ctx.assigned_device(requested);
        log(&device_line(requested, &device_name, ctx.gpus()));
        let device = cwm_models::device_by_name(&device_name).map_err(TrainError::from)?;
        let mut config = config_from_params(ctx.params(), &device)?;
        if let [hp] = ctx.input_list("hparams") {
            let chosen = selected_hparams(
                &hp.path,
                config.model.family.name(),
                config.model.size.name(),
            )?;
            log(&format!(
                "hparams from {} (choice {}): lr {} beta2 {} weight_decay {} warmup_steps {} (params had {} {} {} {})",
                hp.producer,
                chosen.instance.as_deref().unwrap_or("?"),
                chosen.lr,
                chosen.beta2,
                chosen.weight_decay,
                chosen.warmup_steps,
                config.optimiser.lr,
                config.optimiser.beta2,
                config.optimiser.weight_decay,
                config.schedule.warmup_steps
            ));
            config.optimiser.lr = chosen.lr;
            config.optimiser.beta2 = chosen.beta2;
            config.optimiser.weight_decay = chosen.weight_decay;
            config.schedule.warmup_steps = chosen.warmup_steps;
        }
        let inputs: Vec<(String, String)> = ctx
            .inputs()
            .iter()
            .flat_map(|(name, list)| list.iter().map(move |a| (name.clone(), a.hash.clone())))
            .collect();
        let key = partial_key(&self.fingerprint(), ctx.params(), &inputs);
        let val = match ctx.input_list("val") {
            [] => None,
            _ => Some(ctx.input("val")?.to_path_buf()),
        };
        let paths = TrainPaths {
            train: ctx.input("train")?.to_path_buf(),
            val,
            out: ctx.output("out")?.to_path_buf(),
            partial: ctx.partial_dir().map(Path::to_path_buf),
            key,
        };
        let mut extra = Map::new();
        extra.insert("threads".into(), json!(ctx.threads()));
        let control = RunControl {
            progress: ctx.progress(),
            cancelled: &|| ctx.is_cancelled(),
            log: &log,
            stop_after: None,
            extra_hparams: extra,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(ctx.threads())
            .thread_name(|i| format!("cwm-train-{i}"))
            .build()
            .map_err(|e| {
                StageError::failed(format!("cannot start {} threads: {e}", ctx.threads()))
            })?;
        match pool.install(|| train(&config, &paths, &control, &device))? {
            RunEnd::Finished(summary) => {
                log(&format!(
                    "finished: {} steps, final val {}",
                    summary.steps,
                    json!(summary.final_val)
                ));
                Ok(())
            }
            RunEnd::Stopped(step) => Err(StageError::failed(format!("stopped after step {step}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_formats::select::{Choice, ChosenHparams};
    use cwm_models::{ModelConfig, Size, TrainingAttention};
    use cwm_stage::ParamValue;

    fn params(arch: &str) -> Params {
        let mut p = Params::new();
        for spec in PARAMS {
            if let Some(v) = spec.default.value() {
                p.insert(spec.name, v);
            }
        }
        p.insert("arch", ParamValue::Str(arch.into()));
        p
    }

    #[test]
    fn defaults_give_the_reference_config_and_gdn_exemptions() {
        let cpu = Device::flex();
        let config = config_from_params(&params("gdn"), &cpu).unwrap();
        assert_eq!(
            config,
            TrainConfig::new(ModelConfig::new(Family::Gdn, Size::D128))
        );
        let adamw = config::adamw_config(&config);
        assert_eq!(adamw.no_decay, ["a_log", "dt_bias"]);
        let slice = config::adamw_config(&config_from_params(&params("slice"), &cpu).unwrap());
        assert!(slice.no_decay.is_empty());
        assert!(slice.decays("Slice.layers.0.a_log"));
        assert!(!adamw.decays("Gdn.backbone.layers.0.attn.a_log"));
    }

    #[test]
    fn precision_auto_is_the_references_choice_and_bf16_is_for_the_mamba_families() {
        let cpu = Device::flex();
        let auto = config_from_params(&params("mamba3"), &cpu).unwrap();
        assert_eq!(
            auto.model.precision,
            Precision::F32,
            "the reference autocasts on CUDA only"
        );
        let mut p = params("mamba3");
        p.insert("precision", ParamValue::Str("bf16".into()));
        let bf16 = config_from_params(&p, &cpu).unwrap();
        assert_eq!(bf16.model.precision, Precision::Bf16);
        assert_eq!(config::model_section(&bf16.model).precision, "bf16");
        p.insert("arch", ParamValue::Str("transformer".into()));
        let err = config_from_params(&p, &cpu).unwrap_err().to_string();
        assert!(
            err.contains("precision") && err.contains("transformer"),
            "{err}"
        );
    }

    #[test]
    fn the_attention_param_reaches_the_model_and_its_record() {
        let cpu = Device::flex();
        let default = config_from_params(&params("transformer"), &cpu).unwrap();
        assert_eq!(default.model.attention, TrainingAttention::Operations);
        let mut p = params("transformer");
        p.insert("attention", ParamValue::Str("kernels".into()));
        let kernels = config_from_params(&p, &cpu).unwrap();
        assert_eq!(kernels.model.attention, TrainingAttention::Kernels);
        let section = config::model_section(&kernels.model);
        assert_eq!(section.attention, "kernels");
        assert_eq!(config::model_config(&section).unwrap(), kernels.model);
    }

    /// Editing the data stages that train does not run (download, split, ...) must not
    /// invalidate trained models.
    #[test]
    fn fingerprint_covers_the_shard_reader_not_the_whole_data_crate() {
        let fingerprint = TrainStage.fingerprint();
        assert!(fingerprint.contains("src/shards.rs="), "{fingerprint}");
        assert!(!fingerprint.contains("src/download.rs="), "{fingerprint}");
        assert!(!fingerprint.contains("src/parse.rs="), "{fingerprint}");
        assert!(!fingerprint.contains(cwm_stage_data::SOURCE_FINGERPRINT));
    }

    #[test]
    fn a_cuda_device_claims_one_gpu_and_is_logged_with_the_assignment() {
        let mut p = params("slice");
        assert_eq!(TrainStage.gpus(&p), 0, "the default, cpu");
        for (device, gpus) in [("cuda", 1), ("cuda:2", 1), ("cpu", 0)] {
            p.insert("device", ParamValue::Str(device.into()));
            assert_eq!(TrainStage.gpus(&p), gpus, "{device}");
        }
        assert_eq!(device_line("cpu", "cpu", &[]), "device cpu");
        assert_eq!(
            device_line("cuda", "cuda:1", &[5]),
            "device cuda:1 (param cuda; assigned GPUs [5])"
        );
    }

    #[test]
    fn partial_key_ignores_threads_only() {
        let p = params("slice");
        let inputs = vec![("train".to_owned(), "abc".to_owned())];
        let key = partial_key("fp", &p, &inputs);
        let mut threads = p.clone();
        threads.insert("threads", ParamValue::Int(7));
        assert_eq!(partial_key("fp", &threads, &inputs), key);
        let mut lr = p.clone();
        lr.insert("lr", ParamValue::Float(3e-3));
        assert_ne!(partial_key("fp", &lr, &inputs), key);
        assert_ne!(
            partial_key("fp", &p, &[("train".into(), "abd".into())]),
            key
        );
        assert_ne!(partial_key("fp2", &p, &inputs), key);
    }

    #[test]
    fn selected_hparams_pick_the_matching_choice_or_fail_clearly() {
        let dir = std::env::temp_dir().join(format!("cwm-train-select-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let choice = |arch: &str, instance: &str, lr, beta2, weight_decay, warmup_steps| Choice {
            arch: arch.into(),
            size: "d128".into(),
            instance: instance.into(),
            train_hash: "h".into(),
            hparams: ChosenHparams {
                lr,
                beta2,
                weight_decay,
                warmup_steps,
            },
            val_loss: 1.0,
            exact_state: None,
            labelwise: None,
            trajectory: None,
            rank: 1,
            passed_over: Vec::new(),
        };
        let selection = Selection {
            version: 1,
            kind: "select".into(),
            metric: "val_loss".into(),
            group_by: vec!["arch".into(), "size".into()],
            choices: vec![
                choice("slice", "train[a]", 3e-3, 0.95, 1e-3, 5000),
                choice("gdn", "train[b]", 1e-4, 0.99, 0.0, 10_000),
            ],
            candidates: 2,
            skipped: Vec::new(),
        };
        cwm_formats::write_json(&dir.join("selected.json"), &selection).unwrap();
        let got = selected_hparams(&dir, "gdn", "d128").unwrap();
        assert_eq!(
            got,
            SelectedHparams {
                instance: Some("train[b]".into()),
                lr: 1e-4,
                beta2: 0.99,
                weight_decay: 0.0,
                warmup_steps: 10_000
            }
        );
        assert_eq!(selected_hparams(&dir, "slice", "d128").unwrap().lr, 3e-3);
        // An ablation falls back to its full family's choice.
        assert_eq!(
            selected_hparams(&dir, "slice_diag", "d128").unwrap().lr,
            3e-3
        );
        let err = selected_hparams(&dir, "slice", "d256")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no choice for arch slice size d256"), "{err}");
        assert!(err.contains("selected.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
