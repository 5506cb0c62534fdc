//! `cwm model bench`: tokens per second of the train stage's step on a synthetic batch. Its own
//! file, since two binaries carry it: `cwm`, and `cwm-bench` (src/bin/cwm-bench.rs), the same
//! command without the rest of cwm, small enough to bring to a lent GPU machine beside its
//! kernel cache (docs/gpu.md).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use cwm_models::column_sums::{COLUMN_SUMS, ColumnSums};
use cwm_models::delta_kernels::{DELTA_CHUNKS, DeltaChunks};
use cwm_models::embedding_grad::{EMBEDDING_GRAD, EmbeddingGrad};
use cwm_models::fusion_search::{FusionBlocks, choose_fusion_blocks, chosen_fusion_blocks};
use cwm_models::kernel_profile::profile_log_from_env;
use cwm_models::products::{PRODUCTS, Products};
use cwm_models::slice_scan::{SLICE_SCAN, SliceScan};
use cwm_models::{
    AdamWUpdate, Family, LossKernel, ModelConfig, Precision, Size, TrainingAttention,
};
use cwm_stage_train::throughput::{Phases, Throughput, ThroughputOptions, measure};

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
    /// Steps after the timed ones that wait for the device after each phase (the body's
    /// forward pass, the head and loss, backward, update), to show where a step's time goes;
    /// 0 for none. Default: 3, or 0 under CWM_KERNEL_PROFILE, whose log's last tables are
    /// then the timed steps.
    #[arg(long)]
    phase_steps: Option<usize>,
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
    /// On the cubecl devices: how Gated DeltaNet passes its state from chunk to chunk, by cwm's
    /// two kernels (`kernels`) or by tensor operations chunk by chunk (`operations`); default:
    /// CWM_DELTA_CHUNKS, else kernels (crates/models/src/delta_kernels.rs).
    #[arg(long)]
    delta_chunks: Option<DeltaChunks>,
    /// On the cubecl devices: how a bias's gradient is summed over the rows, in two stages over
    /// blocks of rows (`blocks`) or by one reduction (`single`); default: CWM_COLUMN_SUMS, else
    /// blocks (crates/models/src/column_sums.rs).
    #[arg(long)]
    column_sums: Option<ColumnSums>,
    /// On the cubecl devices: how the input embedding's gradient is computed, by a scatter of
    /// every value at once (`scatter`) or by burn's `select_assign`, a unit per column
    /// (`select`); default: CWM_EMBEDDING_GRAD, else scatter
    /// (crates/models/src/embedding_grad.rs).
    #[arg(long)]
    embedding_grad: Option<EmbeddingGrad>,
    /// On the cubecl devices: how both SLiCE families run their recurrence, by cwm's kernels,
    /// a unit per block walking the steps (`kernel`), or by the chunked scan of tensor
    /// operations (`chunked`); default: CWM_SLICE_SCAN, else kernel
    /// (crates/models/src/slice_scan.rs).
    #[arg(long)]
    slice_scan: Option<SliceScan>,
    /// Who multiplies the `Linear`s', the training attention's and the chunked scans' matrices:
    /// cubecl's kernels (`cubecl`) or, on device cuda, cuBLAS in TF32, ordered against
    /// cubecl's kernels by host waits around each call (`cublas`) or by flags the GPU waits on
    /// (`cublas-async`); default: CWM_PRODUCTS, else cubecl (crates/models/src/products.rs).
    #[arg(long)]
    products: Option<Products>,
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

/// Measures the train stage's step as `args` say, with `threads` CPU threads, and prints the
/// figures: one JSON object (`--json`) or one sentence.
pub fn bench(args: BenchArgs, threads: usize) -> Result<ExitCode> {
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
    match args.phase_steps {
        Some(n) => options.phase_steps = n,
        None if profile_log_from_env().is_some() => options.phase_steps = 0,
        None => {}
    }
    if let Some(blocks) = args.fusion_blocks {
        choose_fusion_blocks(blocks);
    }
    if let Some(setting) = args.delta_chunks {
        DELTA_CHUNKS.choose(setting);
    }
    if let Some(setting) = args.column_sums {
        COLUMN_SUMS.choose(setting);
    }
    if let Some(setting) = args.embedding_grad {
        EMBEDDING_GRAD.choose(setting);
    }
    if let Some(setting) = args.slice_scan {
        SLICE_SCAN.choose(setting);
    }
    if let Some(setting) = args.products {
        if setting.is_cublas() && !device.starts_with("cuda") {
            anyhow::bail!("--products {setting} multiplies on device cuda only, not {device:?}");
        }
        PRODUCTS.choose(setting);
    }
    let figures =
        measure(&options).with_context(|| format!("measuring {arch} {size} on {device}"))?;
    let line = if args.json {
        json_line(&args, &figures, threads).to_string()
    } else {
        sentence(&args, &figures, threads)
    };
    writeln!(std::io::stdout(), "{line}")?;
    Ok(ExitCode::SUCCESS)
}

/// `--json`'s object.
fn json_line(args: &BenchArgs, figures: &Throughput, threads: usize) -> serde_json::Value {
    serde_json::json!({
        "arch": args.arch.to_string(), "size": args.size.to_string(), "device": args.device,
        "batch": args.batch, "seq": args.seq, "threads": threads,
        "chunk_size": figures.chunk_size,
        "precision": figures.precision.name(),
        "loss": figures.loss.name(),
        "update": args.update.name(),
        "fusion_blocks": chosen_fusion_blocks().map(|b| b.to_string()),
        "delta_chunks": DELTA_CHUNKS.chosen().map(|c| c.to_string()),
        "column_sums": COLUMN_SUMS.chosen().map(|c| c.to_string()),
        "embedding_grad": EMBEDDING_GRAD.chosen().map(|c| c.to_string()),
        "slice_scan": SLICE_SCAN.chosen().map(|c| c.to_string()),
        "products": PRODUCTS.chosen().map(|p| p.to_string()),
        "attention": args.attention.name(),
        "tokens_per_s": figures.tokens_per_s,
        "median_step_s": figures.median_step_s,
        "step_s": figures.step_s,
        "queued_s": figures.queued_s,
        "warmup_s": figures.warmup_s,
        "phase_s": figures.phase_s.iter().map(|p| serde_json::json!({
            "forward_s": p.forward_s, "loss_s": p.loss_s, "backward_s": p.backward_s,
            "update_s": p.update_s,
        })).collect::<Vec<_>>(),
        "last_loss": figures.last_loss,
        "peak_reserved_bytes": figures.peak_reserved_bytes,
    })
}

/// The figures as one sentence.
fn sentence(args: &BenchArgs, figures: &Throughput, threads: usize) -> String {
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
    let phases = Phases::median_of(&figures.phase_s).map_or(String::new(), |p| {
        format!(
            "; by phases, the median of {} step(s) with a barrier after each: forward \
             {:.4} s, head and loss {:.4} s, backward {:.4} s, update {:.4} s",
            figures.phase_s.len(),
            p.forward_s,
            p.loss_s,
            p.backward_s,
            p.update_s
        )
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
    format!(
        "{} {} on {} in {}, {} loss, {} update: {:.0} tokens/s ({:.4} s per step of {} x {} \
         tokens, median of {}; {threads} CPU thread(s){chunks}{memory}{fusion}{attention}{first}\
         {phases})",
        args.arch,
        args.size,
        args.device,
        figures.precision,
        figures.loss,
        args.update,
        figures.tokens_per_s,
        figures.median_step_s,
        args.batch,
        args.seq,
        args.steps,
    )
}
