//! `cwm model`: parameter counts, training throughput, and safetensors export and import.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use cwm_models::fusion_search::{FusionBlocks, choose_fusion_blocks, chosen_fusion_blocks};
use cwm_models::{
    AdamWUpdate, Family, LossKernel, ModelConfig, Precision, Size, TrainingAttention,
};
use cwm_stage_train::throughput::{ThroughputOptions, measure};

use super::Context;

/// Model utilities.
#[derive(Subcommand)]
pub enum ModelCommand {
    /// Parameter counts of the benchmark's models (spec C.3), from instantiated models.
    Params(ParamsArgs),
    /// Training throughput: tokens/s of the train stage's step (forward with dropout, loss,
    /// backward, clipping, AdamW) on a synthetic batch, on the CPU or a GPU.
    Bench(BenchArgs),
    /// Write a checkpoint's weights as safetensors with the reference's PyTorch keys and shapes.
    Export(ExportArgs),
    /// Make a checkpoint from a safetensors file with the reference's PyTorch keys and shapes.
    Import(ImportArgs),
}

/// `cwm model params`.
#[derive(Args)]
pub struct ParamsArgs {
    /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
    #[arg(long, requires = "size", conflicts_with = "all")]
    arch: Option<Family>,
    /// Size: d128, d256, d384, d512.
    #[arg(long, requires = "arch")]
    size: Option<Size>,
    /// Every family and size.
    #[arg(long)]
    all: bool,
    /// Print a JSON array of {arch, size, params}.
    #[arg(long)]
    json: bool,
}

/// `cwm model bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
    #[arg(long)]
    arch: Family,
    /// Size: d128, d256, d384, d512.
    #[arg(long, default_value = "d128")]
    size: Size,
    /// cpu, cuda or cuda:N (cuda needs a build with `--features cuda`), or cube-cpu (burn's GPU
    /// backend on the CPU, a build with `--features cube-cpu`: docs/gpu.md).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Sequences per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed steps; the figure is their median.
    #[arg(long, default_value_t = 5)]
    steps: usize,
    /// Steps per chunk of a recurrent family's chunked scan (default: the family's
    /// default for the device).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    chunk_size: Option<u64>,
    /// Matrix products in f32, or bf16 as the reference's autocast (mamba3, mamba2); default:
    /// the reference's choice (bf16 for mamba3 on a GPU, else f32), as training's
    /// `precision: auto`.
    #[arg(long)]
    precision: Option<Precision>,
    /// How the loss is computed: auto (the train stage's choice: fused-cpu on the CPU,
    /// generic elsewhere), generic (burn's operations through autodiff), fused-cpu (on the
    /// host), fused-device (on the model's device, outside autodiff); the fused ones in f32
    /// only.
    #[arg(long, default_value = "auto")]
    loss: LossKernel,
    /// How the optimizer updates each parameter: one-pass (the train stage's: one operation
    /// per parameter, a loop on the CPU and one kernel on a GPU) or ops (the same arithmetic as
    /// separate tensor operations, the baseline to time it against).
    #[arg(long, default_value = "one-pass")]
    update: AdamWUpdate,
    /// On the cubecl devices (cuda, cube-cpu): how many blocks burn's fusion searches side by
    /// side, a number or `burn` (burn's own setting); default: CWM_FUSION_BLOCKS, else cwm's
    /// (crates/models/src/fusion_search.rs).
    #[arg(long)]
    fusion_blocks: Option<FusionBlocks>,
    /// The transformer on the cubecl devices: its training attention as tensor operations in
    /// one autodiff node (`operations`), or as three kernels that keep no [batch, heads, seq,
    /// seq] tensor (`kernels`, crates/models/src/attention_kernel.rs); the train stage's
    /// `attention` param.
    #[arg(long, default_value = "operations")]
    attention: TrainingAttention,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// `cwm model export`.
#[derive(Args)]
pub struct ExportArgs {
    /// Checkpoint directory (model.json + model.bpk).
    #[arg(long)]
    checkpoint: PathBuf,
    /// The safetensors file to write.
    #[arg(long)]
    out: PathBuf,
}

/// `cwm model import`.
#[derive(Args)]
pub struct ImportArgs {
    /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
    #[arg(long)]
    arch: Family,
    /// Size: d128, d256, d384, d512.
    #[arg(long)]
    size: Size,
    /// Mamba-3 MIMO (rank 4) instead of SISO.
    #[arg(long)]
    mimo: bool,
    /// The safetensors file to read.
    #[arg(long)]
    from: PathBuf,
    /// Checkpoint directory to write.
    #[arg(long)]
    out: PathBuf,
}

/// Runs a `cwm model` subcommand.
pub fn run(command: ModelCommand, ctx: &Context) -> Result<ExitCode> {
    match command {
        ModelCommand::Params(args) => params(args),
        ModelCommand::Bench(args) => bench(args, ctx.threads),
        ModelCommand::Export(args) => export(args),
        ModelCommand::Import(args) => import(args),
    }
}

fn params(args: ParamsArgs) -> Result<ExitCode> {
    let cells: Vec<(Family, Size)> = match (args.arch, args.size) {
        (Some(a), Some(s)) if !args.all => vec![(a, s)],
        _ => Family::ALL
            .iter()
            .flat_map(|&a| Size::ALL.iter().map(move |&s| (a, s)))
            .collect(),
    };
    let mut rows = Vec::new();
    let mut missing = Vec::new();
    for (a, s) in cells {
        match cwm_models::params(a, s) {
            Ok(n) => rows.push((a.to_string(), s.to_string(), n)),
            Err(e) => missing.push(format!("{a} {s}: {e}")),
        }
    }
    if args.json {
        let json: Vec<_> = rows
            .iter()
            .map(|(a, s, n)| serde_json::json!({"arch": a, "size": s, "params": n}))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        outln!("{:<12} {:<6} {:>12}", "arch", "size", "params");
        for (a, s, n) in &rows {
            outln!("{a:<12} {s:<6} {n:>12}");
        }
    }
    for m in &missing {
        eprintln!("not available: {m}");
    }
    Ok(if missing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn bench(args: BenchArgs, threads: usize) -> Result<ExitCode> {
    let (arch, size, device) = (args.arch, args.size, &args.device);
    let mut model = ModelConfig::new(arch, size);
    model.chunk_size = args.chunk_size.map(|n| n as usize);
    model.attention = args.attention;
    let mut options = ThroughputOptions::new(model, device);
    options.precision = args.precision;
    options.loss = args.loss;
    options.update = args.update;
    (options.batch, options.seq) = (args.batch, args.seq);
    (options.warmup, options.steps) = (args.warmup, args.steps);
    if let Some(blocks) = args.fusion_blocks {
        choose_fusion_blocks(blocks);
    }
    let figures =
        measure(&options).with_context(|| format!("measuring {arch} {size} on {device}"))?;
    if args.json {
        let value = serde_json::json!({
            "arch": arch.to_string(), "size": size.to_string(), "device": device,
            "batch": args.batch, "seq": args.seq, "threads": threads,
            "chunk_size": figures.chunk_size,
            "precision": figures.precision.name(),
            "loss": figures.loss.name(),
            "update": args.update.name(),
            "fusion_blocks": chosen_fusion_blocks().map(|b| b.to_string()),
            "attention": args.attention.name(),
            "tokens_per_s": figures.tokens_per_s,
            "median_step_s": figures.median_step_s,
            "step_s": figures.step_s,
            "queued_s": figures.queued_s,
            "warmup_s": figures.warmup_s,
            "last_loss": figures.last_loss,
            "peak_reserved_bytes": figures.peak_reserved_bytes,
        });
        outln!("{value}");
    } else {
        let chunks = figures
            .chunk_size
            .map_or(String::new(), |n| format!("; scan chunks of {n} steps"));
        let memory = figures.peak_reserved_bytes.map_or(String::new(), |bytes| {
            format!(
                "; at most {:.0} MiB reserved on the device",
                bytes as f64 / 1_048_576.0
            )
        });
        let first = figures.warmup_s.first().map_or(String::new(), |s| {
            format!("; the first warm-up step took {s:.1} s")
        });
        let fusion = match chosen_fusion_blocks() {
            None => String::new(),
            Some(FusionBlocks::Burn) => "; burn's own fusion search".into(),
            Some(blocks) => format!("; fusion searching {blocks} block(s)"),
        };
        let attention = match args.attention {
            TrainingAttention::Kernels => "; training attention by kernels (cubecl devices)",
            TrainingAttention::Operations => "",
        };
        outln!(
            "{arch} {size} on {device} in {}, {} loss, {} update: {:.0} tokens/s ({:.4} s per \
             step of {} x {} tokens, median of {}; {threads} CPU thread(s){chunks}{memory}{fusion}{attention}{first})",
            figures.precision,
            figures.loss,
            args.update,
            figures.tokens_per_s,
            figures.median_step_s,
            args.batch,
            args.seq,
            args.steps,
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn export(args: ExportArgs) -> Result<ExitCode> {
    let (config, tensors) = cwm_models::interop::export_checkpoint(&args.checkpoint, &args.out)?;
    outln!(
        "wrote {tensors} tensors of {} {} to {}",
        config.family,
        config.size,
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn import(args: ImportArgs) -> Result<ExitCode> {
    let (arch, size) = (args.arch, args.size);
    if args.mimo && arch != Family::Mamba3 {
        bail!("--mimo applies to mamba3 only, not {arch}");
    }
    let mut config = ModelConfig::new(arch, size);
    config.mamba3_mimo = args.mimo;
    let params = cwm_models::interop::import_checkpoint(&args.from, &config, &args.out)?;
    outln!(
        "wrote checkpoint {} ({arch} {size}, {params} parameters)",
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
