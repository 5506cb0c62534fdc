//! `cwm-bench`: `cwm model bench` and nothing else. The same command line (`cwm-bench
//! [--threads N] model bench ...`), code and output as `cwm`'s, in a binary without the
//! pipeline, the query engine and the stages, so that a GPU build is small enough to bring to a
//! lent machine beside the reference stack and the kernel cache (docs/gpu.md).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[path = "../cli/model_bench.rs"]
mod model_bench;
#[path = "../startup.rs"]
mod startup;

#[derive(Parser)]
#[command(
    name = "cwm-bench",
    version,
    about = "`cwm model bench` alone: training tokens/s of a benchmark model, in a small binary"
)]
struct Cli {
    #[command(flatten)]
    global: startup::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Model utilities (here only `bench`).
    #[command(subcommand)]
    Model(ModelCommand),
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Training throughput: tokens/s of the train stage's step (forward with dropout, loss,
    /// backward, clipping, AdamW) on a synthetic batch, on the CPU or a GPU.
    Bench(model_bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    startup::finish(run(cli))
}

fn run(cli: Cli) -> Result<ExitCode> {
    let threads = startup::thread_pool(cli.global.threads)?;
    let Command::Model(ModelCommand::Bench(args)) = cli.command;
    model_bench::bench(args, threads)
}
