//! The `cwm` command line: one module per subcommand under `cli/`, the built-in stage kinds
//! in `registry.rs`, and the engine (`cwm-engine`) behind them.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cli;
mod registry;
mod startup;

use cli::remote::Direction;

#[derive(Parser)]
#[command(
    name = "cwm",
    version,
    about = "Builds and runs the Chess-World-Model benchmark as a cached DAG of stages"
)]
struct Cli {
    #[command(flatten)]
    global: startup::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline: only stale stages run, results are cached by content hash.
    Run(cli::run::RunArgs),
    /// Show which stages are fresh or stale, and why.
    Status(cli::status::StatusArgs),
    /// Print the stage graph.
    Dag(cli::dag::DagArgs),
    /// Show a stage's artifacts: paths, hashes and manifests.
    Show(cli::show::ShowArgs),
    /// List the artifacts in the store with their sizes.
    Ls(cli::ls::LsArgs),
    /// SQL over the Parquet outputs of fresh stages (`--tables` lists the table names).
    Query(cli::query::QueryArgs),
    /// Upload the results cwm.lock records to a remote cache.
    Push(cli::remote::TransferArgs),
    /// Download the results cwm.lock records from a remote cache.
    Pull(cli::remote::TransferArgs),
    /// Rehash artifacts; quarantine corrupt ones so they are recomputed or pulled.
    Verify(cli::verify::VerifyArgs),
    /// Remove artifacts nothing refers to, printing what it frees.
    Gc(cli::gc::GcArgs),
    /// Replay a PGN file into games, without a pipeline (like the reference's process.py).
    Process(cli::data::ProcessArgs),
    /// Generate uniformly random legal games, without a pipeline.
    RandomUniform(cli::data::RandomUniformArgs),
    /// Export games to another format.
    #[command(subcommand)]
    Export(cli::data::ExportCommand),
    /// Import games from another format.
    #[command(subcommand)]
    Import(cli::data::ImportCommand),
    /// Evaluate a checkpoint on tokenized games or reference JSONL, without a pipeline.
    Evaluate(cli::evaluate::EvaluateArgs),
    /// Model utilities.
    #[command(subcommand)]
    Model(cli::model::ModelCommand),
    /// List the stage kinds this cwm knows, with their params.
    Kinds,
    /// Write the built-in default pipeline to a file.
    Init(cli::init::InitArgs),
    /// What a cluster executor's jobs run on a compute node (not for typing by hand).
    #[command(subcommand, hide = true)]
    Job(cli::job::JobCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    startup::finish(real_main(cli))
}

/// The exit code of a subcommand that either succeeds or returns an error.
fn done((): ()) -> ExitCode {
    ExitCode::SUCCESS
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    let threads = startup::thread_pool(cli.global.threads)?;
    let ctx = cli::Context {
        registry: registry::builtin(),
        threads,
    };
    match cli.command {
        Command::Run(args) => cli::run::run(args, &ctx),
        Command::Status(args) => cli::status::run(args, &ctx),
        Command::Dag(args) => cli::dag::run(args, &ctx),
        Command::Show(args) => cli::show::run(args, &ctx),
        Command::Ls(args) => cli::ls::run(args),
        Command::Query(args) => cli::query::run(args, &ctx),
        Command::Push(args) => cli::remote::run(args, Direction::Push, &ctx),
        Command::Pull(args) => cli::remote::run(args, Direction::Pull, &ctx),
        Command::Verify(args) => cli::verify::run(args),
        Command::Gc(args) => cli::gc::run(args, &ctx),
        Command::Process(args) => cli::data::process(args, threads).map(done),
        Command::RandomUniform(args) => cli::data::random_uniform(args, threads).map(done),
        Command::Export(command) => cli::data::export(command, &ctx.registry, threads).map(done),
        Command::Import(command) => cli::data::import(command).map(done),
        Command::Evaluate(args) => cli::evaluate::run(args, threads).map(done),
        Command::Model(command) => cli::model::run(command, &ctx),
        Command::Kinds => cli::kinds::run(&ctx),
        Command::Init(args) => cli::init::run(args),
        Command::Job(command) => cli::job::run(command, &ctx),
    }
}
