//! The one-shot data commands, mirroring the reference's scripts without a
//! pipeline: `cwm process`, `cwm random-uniform`, `cwm export jsonl`,
//! `cwm import jsonl`. Each is a thin wrapper over `cwm-stage-data`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use cwm_engine::lockfile::LockFile;
use cwm_engine::registry::Registry;
use cwm_engine::store::Store;
use cwm_stage::Progress;
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, RandomUniformOptions, export_jsonl,
    generate_random_uniform, import_jsonl, process_pgn,
};

/// Output format of the one-shot commands.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// `games.parquet`: the games table the pipeline stages use.
    Parquet,
    /// The reference's JSONL shards `chess_000000.jsonl`, ... with states.
    Jsonl,
}

impl Format {
    fn output(self, shard_size: u64) -> OutputFormat {
        match self {
            Format::Parquet => OutputFormat::Parquet,
            Format::Jsonl => OutputFormat::Jsonl { shard_size },
        }
    }
}

/// `cwm process`: replay a PGN file into games (the reference's `data/process.py`).
#[derive(Args)]
pub struct ProcessArgs {
    /// The `.pgn` or `.pgn.zst` file.
    #[arg(long)]
    pgn: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Parquet)]
    format: Format,
    /// Keep games of at least 2×N plies.
    #[arg(long, default_value_t = 10)]
    min_fullmoves: usize,
    /// Stop after N kept games (0 = all).
    #[arg(long, default_value_t = 0)]
    max_games: u64,
    /// Games per JSONL shard.
    #[arg(long, default_value_t = 1_000_000)]
    shard_size: u64,
    /// HMAC key for game ids (default: $CHESS_WORLD_MODEL_ID_KEY, else unkeyed ids).
    #[arg(long)]
    id_key: Option<String>,
}

/// `cwm random-uniform`: uniformly random legal games (the reference's generator).
#[derive(Args)]
pub struct RandomUniformArgs {
    /// Kept games to produce.
    #[arg(long, default_value_t = 10_000)]
    games: u64,
    /// The seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// `reference` reproduces the reference generator game for game; `fast` is parallel.
    #[arg(long, value_enum, default_value_t = Rng::Reference)]
    rng: Rng,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Parquet)]
    format: Format,
    /// Keep games of at least 2×N plies.
    #[arg(long, default_value_t = 10)]
    min_fullmoves: u32,
    /// Games per JSONL shard.
    #[arg(long, default_value_t = 10_000)]
    shard_size: u64,
}

/// The random-uniform generator.
#[derive(Clone, Copy, ValueEnum)]
pub enum Rng {
    /// CPython's MT19937 and python-chess's move order: the paper's test set for seed 0.
    Reference,
    /// A fast seeded RNG, parallel, deterministic for a seed.
    Fast,
}

/// `cwm export` / `cwm import` formats.
#[derive(Subcommand)]
pub enum ExportCommand {
    /// Write the reference's JSONL shards (spec E.6) from a games table.
    Jsonl {
        /// A stage output (`parse.games`, `split.val`, `random`) of the pipeline, or a path
        /// to a games directory or `.parquet` file.
        #[arg(long)]
        input: String,
        /// Output directory for `chess_000000.jsonl`, ...
        #[arg(long)]
        out: PathBuf,
        /// Games per shard.
        #[arg(long, default_value_t = 1_000_000)]
        shard_size: u64,
        /// The pipeline whose stages `--input` may name.
        #[arg(short, long)]
        pipeline: Option<PathBuf>,
    },
}

/// `cwm import` formats.
#[derive(Subcommand)]
pub enum ImportCommand {
    /// Read reference JSONL shards into a games table (`games.parquet`).
    Jsonl {
        /// A `chess_*.jsonl` file or a directory of them.
        input: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs `cwm process`.
pub fn process(args: ProcessArgs, threads: usize) -> Result<()> {
    let started = Instant::now();
    let report = process_pgn(&ProcessOptions {
        pgn: args.pgn.clone(),
        out_dir: args.out.clone(),
        format: args.format.output(args.shard_size),
        min_fullmoves: args.min_fullmoves,
        max_games: args.max_games,
        threads,
        id_key: IdKeySource::resolve(args.id_key.as_deref()),
    })
    .with_context(|| format!("processing {}", args.pgn.display()))?;
    outln!(
        "{}: {} games read, {} kept, {} rejected in {:.1}s → {}",
        args.pgn.display(),
        report.games_read,
        report.kept,
        report.rejected,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    for (reason, count) in &report.by_reason {
        outln!("  rejected {reason}: {count}");
    }
    Ok(())
}

/// Runs `cwm random-uniform`.
pub fn random_uniform(args: RandomUniformArgs, threads: usize) -> Result<()> {
    let started = Instant::now();
    let options = RandomUniformOptions {
        games: args.games,
        seed: args.seed,
        mode: match args.rng {
            Rng::Reference => cwm_random_uniform::Mode::Reference,
            Rng::Fast => cwm_random_uniform::Mode::Fast,
        },
        min_fullmoves: args.min_fullmoves,
        threads,
    };
    let written = generate_random_uniform(
        &options,
        &args.out,
        args.format.output(args.shard_size),
        &Progress::disabled(),
        &|| false,
    )
    .with_context(|| format!("generating random games into {}", args.out.display()))?;
    outln!(
        "{written} random-uniform games (seed {}) in {:.1}s → {}",
        args.seed,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

/// Runs `cwm export jsonl`.
pub fn export(command: ExportCommand, registry: &Registry, threads: usize) -> Result<()> {
    let ExportCommand::Jsonl {
        input,
        out,
        shard_size,
        pipeline,
    } = command;
    let path = resolve_input(&input, pipeline.as_deref(), registry)?;
    let shards = export_jsonl(&path, &out, shard_size, threads)
        .with_context(|| format!("exporting {} to JSONL", path.display()))?;
    outln!("wrote {} JSONL shards to {}", shards.len(), out.display());
    Ok(())
}

/// Runs `cwm import jsonl`.
pub fn import(command: ImportCommand) -> Result<()> {
    let ImportCommand::Jsonl { input, out } = command;
    let games =
        import_jsonl(&input, &out).with_context(|| format!("importing {}", input.display()))?;
    outln!("imported {games} games into {}", out.display());
    Ok(())
}

/// A path as is, or a stage output of the pipeline (`stage`, `stage.output`)
/// found through `cwm.lock` in the store.
fn resolve_input(input: &str, pipeline: Option<&Path>, registry: &Registry) -> Result<PathBuf> {
    let as_path = PathBuf::from(input);
    if as_path.exists() {
        return Ok(as_path);
    }
    let pipeline_path = super::pipeline_path(pipeline);
    if !pipeline_path.exists() {
        bail!(
            "`{input}` is neither a file nor a directory, and there is no pipeline file to look it up in"
        );
    }
    let pipeline = cwm_engine::pipeline::load(&pipeline_path, registry, &Default::default())
        .map_err(|d| anyhow::anyhow!("invalid pipeline:\n{d}"))?;
    let (name, output) = cwm_engine::pipeline::split_reference(input);
    let (name, output) = (name.as_str(), output.as_deref());
    let Some(idx) = pipeline.index_of(name) else {
        bail!("`{input}` is not a path, and the pipeline has no stage or instance `{name}`");
    };
    let lock = LockFile::read(&LockFile::path_for(&pipeline.base_dir))?;
    let Some(entry) = lock.get(&pipeline.instances[idx].name) else {
        bail!("stage `{name}` has no result in cwm.lock: run it first (`cwm run --only {name}`)");
    };
    let hash = match output {
        Some(o) => entry.outputs.get(o).with_context(|| {
            format!(
                "stage `{name}` has no output `{o}` (outputs: {})",
                entry.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?,
        None if entry.outputs.len() == 1 => entry.outputs.values().next().map_or("", |h| h),
        None => {
            let for_games = entry.outputs.get("games");
            for_games.with_context(|| {
                format!(
                    "stage `{name}` has several outputs: write `{name}.<output>` ({})",
                    entry.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            })?
        }
    };
    let store = Store::open(&pipeline.base_dir.join("artifacts"))?;
    let dir = store.data_dir(hash);
    if !dir.exists() {
        bail!("the artifact of `{input}` ({hash}) is not in the store: run or pull it first");
    }
    Ok(dir)
}
