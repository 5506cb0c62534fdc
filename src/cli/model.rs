//! `cwm model`: parameter counts, training throughput, and safetensors export and import.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use cwm_models::{Family, ModelConfig, Size};

use super::Context;
use super::model_bench::{BenchArgs, bench};

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
