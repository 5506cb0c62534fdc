//! The `cwm` command line: glue over the executor, store and stage crates.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};

use cwm::display::{Display, human_bytes};
use cwm::executor::{Executor, RunOptions};
use cwm::freshness::short;
use cwm::lockfile::LockFile;
use cwm::pipeline::{self, Override};
use cwm::plan::Plan;
use cwm::registry::Registry;
use cwm::store::Store;

/// `println!` that returns the write error instead of panicking: `cwm kinds | head` closes the
/// pipe early, and [`main`] ends quietly on a broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*)?
    };
}

mod data_commands;
mod evaluate_command;

/// mimalloc keeps freed memory for reuse. With the system allocator every large tensor of a
/// training step is a fresh `mmap`, faulted in page by page and unmapped again: measured on
/// the d128 training bench, a quarter of a CPU step went to page faults.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The default pipeline, built into the binary.
const DEFAULT_PIPELINE: &str = include_str!("../pipeline.yaml");

#[derive(Parser)]
#[command(
    name = "cwm",
    version,
    about = "Builds and runs the Chess-World-Model benchmark as a cached DAG of stages"
)]
struct Cli {
    /// Threads for all parallel work (default: RAYON_NUM_THREADS, else all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline: only stale stages run, results are cached by content hash.
    Run {
        /// The pipeline file (default: pipeline.yaml; the built-in default if absent).
        pipeline: Option<PathBuf>,
        /// Run only these stages or instances (and what they need).
        #[arg(long, num_args = 1.., value_name = "STAGE")]
        only: Vec<String>,
        /// Run this stage and everything downstream of it.
        #[arg(long, value_name = "STAGE")]
        from: Option<String>,
        /// Rerun these stages even if their result is cached.
        #[arg(long, num_args = 1.., value_name = "STAGE")]
        force: Vec<String>,
        /// Show what would run, run nothing.
        #[arg(long)]
        dry_run: bool,
        /// Thread slots shared by concurrently running stages (default: --threads).
        #[arg(short = 'j', long)]
        jobs: Option<usize>,
        /// After a failure, keep running stages that do not depend on it.
        #[arg(long)]
        keep_going: bool,
        /// Override a param: stage.param=value (value in YAML syntax).
        #[arg(short = 's', long = "set", value_name = "STAGE.PARAM=VALUE")]
        set: Vec<Override>,
        /// Print a JSON summary {ran, cached, failed, skipped} on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show which stages are fresh or stale, and why.
    Status {
        /// The pipeline file.
        pipeline: Option<PathBuf>,
        /// Override a param: stage.param=value.
        #[arg(short = 's', long = "set", value_name = "STAGE.PARAM=VALUE")]
        set: Vec<Override>,
        /// Print a JSON array of {stage, state, reasons}.
        #[arg(long)]
        json: bool,
    },
    /// Print the stage graph.
    Dag {
        /// The pipeline file.
        pipeline: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = DagFormat::Mermaid)]
        format: DagFormat,
    },
    /// Show a stage's artifacts: paths, hashes and manifests.
    Show {
        /// The stage or instance name.
        stage: String,
        /// The pipeline file.
        #[arg(short, long)]
        pipeline: Option<PathBuf>,
    },
    /// List the artifacts in the store with their sizes.
    Ls {
        /// The pipeline file (its directory holds artifacts/).
        pipeline: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Upload the results cwm.lock records to a remote cache.
    Push {
        /// The pipeline file.
        pipeline: Option<PathBuf>,
        /// file:///path or s3://bucket/prefix (default: the pipeline's `remote:`).
        #[arg(long)]
        remote: Option<String>,
        /// Only these stages or instances.
        #[arg(long, num_args = 1.., value_name = "STAGE")]
        only: Vec<String>,
    },
    /// Download the results cwm.lock records from a remote cache.
    Pull {
        /// The pipeline file.
        pipeline: Option<PathBuf>,
        /// file:///path or s3://bucket/prefix (default: the pipeline's `remote:`).
        #[arg(long)]
        remote: Option<String>,
        /// Only these stages or instances and what they need.
        #[arg(long, num_args = 1.., value_name = "STAGE")]
        only: Vec<String>,
    },
    /// Rehash artifacts; quarantine corrupt ones so they are recomputed or pulled.
    Verify {
        /// The pipeline file (its directory holds artifacts/ and cwm.lock).
        pipeline: Option<PathBuf>,
        /// Check every artifact in the store, not only those cwm.lock names.
        #[arg(long)]
        all: bool,
        /// Print a JSON report.
        #[arg(long)]
        json: bool,
    },
    /// Remove artifacts nothing refers to, printing what it frees.
    Gc {
        /// The pipeline file (its directory holds artifacts/ and cwm.lock).
        pipeline: Option<PathBuf>,
        /// Keep only what cwm.lock refers to (and --keep-last runs).
        #[arg(long)]
        keep_lock: bool,
        /// Keep the results of the last N runs (and cwm.lock with --keep-lock).
        #[arg(long, value_name = "N")]
        keep_last: Option<usize>,
        /// Say what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Replay a PGN file into games, without a pipeline (like the reference's process.py).
    Process(data_commands::ProcessArgs),
    /// Generate uniformly random legal games, without a pipeline.
    RandomUniform(data_commands::RandomUniformArgs),
    /// Export games to another format.
    #[command(subcommand)]
    Export(data_commands::ExportCommand),
    /// Import games from another format.
    #[command(subcommand)]
    Import(data_commands::ImportCommand),
    /// Evaluate a checkpoint on tokenized games or reference JSONL, without a pipeline.
    Evaluate(evaluate_command::EvaluateArgs),
    /// Model utilities.
    #[command(subcommand)]
    Model(ModelCommand),
    /// List the stage kinds this cwm knows, with their params.
    Kinds,
    /// Write the built-in default pipeline to a file.
    Init {
        /// Where to write it.
        #[arg(default_value = "pipeline.yaml")]
        path: PathBuf,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
    /// Parameter counts of the benchmark's models (spec C.3), from instantiated models.
    Params {
        /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
        #[arg(long, requires = "size", conflicts_with = "all")]
        arch: Option<cwm_models::Family>,
        /// Size: d128, d256, d384, d512.
        #[arg(long, requires = "arch")]
        size: Option<cwm_models::Size>,
        /// Every family and size.
        #[arg(long)]
        all: bool,
        /// Print a JSON array of {arch, size, params}.
        #[arg(long)]
        json: bool,
    },
    /// Training throughput: tokens/s of the train stage's step (forward with dropout, loss,
    /// backward, clipping, AdamW) on a synthetic batch, on the CPU or a GPU.
    Bench {
        /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
        #[arg(long)]
        arch: cwm_models::Family,
        /// Size: d128, d256, d384, d512.
        #[arg(long, default_value = "d128")]
        size: cwm_models::Size,
        /// cpu, cuda or cuda:N (cuda needs a build with `--features cuda`).
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
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a checkpoint's weights as safetensors with the reference's PyTorch keys and shapes.
    Export {
        /// Checkpoint directory (model.json + model.bpk).
        #[arg(long)]
        checkpoint: PathBuf,
        /// The safetensors file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Make a checkpoint from a safetensors file with the reference's PyTorch keys and shapes.
    Import {
        /// Family: transformer, slice, slice_diag, gdn, gdn_pos, mamba3, mamba2.
        #[arg(long)]
        arch: cwm_models::Family,
        /// Size: d128, d256, d384, d512.
        #[arg(long)]
        size: cwm_models::Size,
        /// Mamba-3 MIMO (rank 4) instead of SISO.
        #[arg(long)]
        mimo: bool,
        /// The safetensors file to read.
        #[arg(long)]
        from: PathBuf,
        /// Checkpoint directory to write.
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DagFormat {
    Mermaid,
    Dot,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}

/// Whether `err` comes from writing to a closed pipe (the reader, `head` say, is done).
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    let threads = cli
        .threads
        .or_else(|| {
            std::env::var("RAYON_NUM_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n: &usize| n > 0)
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .context("setting up the thread pool")?;
    let registry = Registry::builtin();
    match cli.command {
        Command::Run {
            pipeline,
            only,
            from,
            force,
            dry_run,
            jobs,
            keep_going,
            set,
            json,
        } => {
            let plan = load_plan(pipeline.as_deref(), &registry, &set)?;
            let store = open_store(&plan)?;
            let options = RunOptions {
                only,
                from,
                force,
                dry_run,
                jobs: jobs.unwrap_or(threads),
                keep_going,
                json,
            };
            let mut display = Display::new(json);
            let executor = Executor {
                plan: &plan,
                registry: &registry,
                store: &store,
            };
            let report = executor.run(&options, &mut display)?;
            if json {
                outln!("{}", report.to_json(dry_run));
            }
            Ok(if report.failed() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Status {
            pipeline,
            set,
            json,
        } => {
            let plan = load_plan(pipeline.as_deref(), &registry, &set)?;
            let store = open_store(&plan)?;
            let lock = LockFile::read(&LockFile::path_for(&plan.pipeline.base_dir))?;
            let statuses = cwm::status::status(&plan, &registry, &store, &lock);
            store.save_stat_cache()?;
            let mut out = std::io::stdout().lock();
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&statuses)?)?;
            } else {
                for s in &statuses {
                    writeln!(out, "{:<6} {}", s.state, s.stage)?;
                    for r in &s.reasons {
                        writeln!(out, "         {r}")?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Dag { pipeline, format } => {
            let plan = load_plan(pipeline.as_deref(), &registry, &[])?;
            print!("{}", render_dag(&plan, format));
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { stage, pipeline } => {
            let plan = load_plan(pipeline.as_deref(), &registry, &[])?;
            let store = open_store(&plan)?;
            show(&plan, &registry, &store, &stage)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Ls { pipeline, json } => {
            let (store, _) = store_and_lock(pipeline.as_deref())?;
            let artifacts = store.artifacts();
            if json {
                let rows: Vec<_> = artifacts
                    .iter()
                    .map(|m| {
                        serde_json::json!({
                            "hash": m.hash, "size": m.size, "files": m.files.len(),
                            "instance": m.producer.instance, "output": m.producer.output,
                            "finished": m.finished,
                        })
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                let mut total = 0;
                for m in &artifacts {
                    total += m.size;
                    outln!(
                        "{}  {:>10}  {:>5} files  {}.{}",
                        short(&m.hash),
                        human_bytes(m.size),
                        m.files.len(),
                        m.producer.instance,
                        m.producer.output
                    );
                }
                outln!("{} artifacts, {}", artifacts.len(), human_bytes(total));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Push {
            pipeline,
            remote,
            only,
        } => {
            transfer(pipeline.as_deref(), remote, &only, &registry, true)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pull {
            pipeline,
            remote,
            only,
        } => {
            transfer(pipeline.as_deref(), remote, &only, &registry, false)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Verify {
            pipeline,
            all,
            json,
        } => {
            let (store, lock) = store_and_lock(pipeline.as_deref())?;
            let hashes: std::collections::BTreeSet<String> = if all {
                store.object_hashes().into_iter().collect()
            } else {
                lock.stages
                    .iter()
                    .flat_map(|e| e.outputs.values().cloned())
                    .collect()
            };
            let report = cwm::maintenance::verify(&store, &hashes)?;
            store.save_stat_cache()?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                outln!(
                    "verified {} artifacts ({}): {} corrupt, {} missing",
                    report.checked,
                    human_bytes(report.bytes),
                    report.corrupt.len(),
                    report.missing.len()
                );
                for c in &report.corrupt {
                    outln!(
                        "corrupt {}: {} (quarantined to {}, {} key records removed)",
                        short(&c.hash),
                        c.reason,
                        c.quarantined_to.display(),
                        c.keys_removed
                    );
                }
                for m in &report.missing {
                    outln!("missing {} (run or pull to restore it)", short(m));
                }
            }
            Ok(if report.corrupt.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Gc {
            pipeline,
            keep_lock,
            keep_last,
            dry_run,
        } => {
            let (store, lock) = store_and_lock(pipeline.as_deref())?;
            let lock_keys = lock.stages.iter().map(|e| e.key.clone()).collect();
            let options = cwm::maintenance::GcOptions {
                keep_lock,
                keep_last,
                dry_run,
            };
            let report = cwm::maintenance::gc(&store, &lock_keys, &options)?;
            let verb = if dry_run { "would remove" } else { "removed" };
            for (hash, size) in &report.artifacts_removed {
                outln!("{verb} {} ({})", short(hash), human_bytes(*size));
            }
            outln!(
                "{verb} {} artifacts and {} key records, freeing {}",
                report.artifacts_removed.len(),
                report.keys_removed.len(),
                human_bytes(report.bytes_freed)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Process(args) => {
            data_commands::process(args, threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::RandomUniform(args) => {
            data_commands::random_uniform(args, threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Export(command) => {
            data_commands::export(command, &registry, threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(command) => {
            data_commands::import(command)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Evaluate(args) => {
            evaluate_command::run(args, threads)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Bench {
            arch,
            size,
            device,
            batch,
            seq,
            warmup,
            steps,
            chunk_size,
            json,
        }) => {
            let mut model = cwm_models::ModelConfig::new(arch, size);
            model.chunk_size = chunk_size.map(|n| n as usize);
            let mut options = cwm_stage_train::throughput::ThroughputOptions::new(model, &device);
            (options.batch, options.seq) = (batch, seq);
            (options.warmup, options.steps) = (warmup, steps);
            let figures = cwm_stage_train::throughput::measure(&options)
                .with_context(|| format!("measuring {arch} {size} on {device}"))?;
            if json {
                let value = serde_json::json!({
                    "arch": arch.to_string(), "size": size.to_string(), "device": device,
                    "batch": batch, "seq": seq, "threads": threads, "chunk_size": figures.chunk_size,
                    "tokens_per_s": figures.tokens_per_s,
                    "median_step_s": figures.median_step_s,
                    "step_s": figures.step_s,
                    "last_loss": figures.last_loss,
                });
                outln!("{value}");
            } else {
                outln!(
                    "{arch} {size} on {device}: {:.0} tokens/s ({:.4} s per step of {batch} x \
                     {seq} tokens, median of {steps}; {threads} CPU thread(s){})",
                    figures.tokens_per_s,
                    figures.median_step_s,
                    figures
                        .chunk_size
                        .map_or(String::new(), |n| format!("; scan chunks of {n} steps"))
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Export { checkpoint, out }) => {
            let (config, tensors) = cwm_models::interop::export_checkpoint(&checkpoint, &out)?;
            outln!(
                "wrote {tensors} tensors of {} {} to {}",
                config.family,
                config.size,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Import {
            arch,
            size,
            mimo,
            from,
            out,
        }) => {
            if mimo && arch != cwm_models::Family::Mamba3 {
                bail!("--mimo applies to mamba3 only, not {arch}");
            }
            let mut config = cwm_models::ModelConfig::new(arch, size);
            config.mamba3_mimo = mimo;
            let params = cwm_models::interop::import_checkpoint(&from, &config, &out)?;
            outln!(
                "wrote checkpoint {} ({arch} {size}, {params} parameters)",
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Model(ModelCommand::Params {
            arch,
            size,
            all,
            json,
        }) => {
            let cells: Vec<(cwm_models::Family, cwm_models::Size)> = match (arch, size) {
                (Some(a), Some(s)) if !all => vec![(a, s)],
                _ => cwm_models::Family::ALL
                    .iter()
                    .flat_map(|&a| cwm_models::Size::ALL.iter().map(move |&s| (a, s)))
                    .collect(),
            };
            let mut rows = Vec::new();
            let mut missing = Vec::new();
            for (a, s) in cells {
                match cwm_models::params(a, s) {
                    Ok(n) => rows.push(serde_json::json!({
                        "arch": a.to_string(), "size": s.to_string(), "params": n
                    })),
                    Err(e) => missing.push(format!("{a} {s}: {e}")),
                }
            }
            if json {
                outln!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                outln!("{:<12} {:<6} {:>12}", "arch", "size", "params");
                for r in &rows {
                    outln!(
                        "{:<12} {:<6} {:>12}",
                        r["arch"].as_str().unwrap_or_default(),
                        r["size"].as_str().unwrap_or_default(),
                        r["params"]
                    );
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
        Command::Kinds => {
            for kind in registry.kinds() {
                outln!("{} — {}", kind.name(), kind.doc());
                for p in kind.params() {
                    let default = match p.default.value() {
                        Some(v) => format!(" (default {v})"),
                        None if p.default == cwm_stage::ParamDefault::Required => {
                            " (required)".to_owned()
                        }
                        None => String::new(),
                    };
                    outln!("    {}: {}{default} — {}", p.name, p.ty, p.doc);
                }
                outln!("    outputs: {}", kind.outputs().join(", "));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Init { path } => {
            if path.exists() {
                bail!("{} exists; not overwriting it", path.display());
            }
            std::fs::write(&path, DEFAULT_PIPELINE)
                .with_context(|| format!("writing {}", path.display()))?;
            outln!("wrote {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn pipeline_path(given: Option<&Path>) -> PathBuf {
    given.map_or_else(|| PathBuf::from("pipeline.yaml"), Path::to_path_buf)
}

/// Loads and orders the pipeline; without a file argument and without a
/// `pipeline.yaml` here, uses the built-in default.
fn load_plan(given: Option<&Path>, registry: &Registry, set: &[Override]) -> Result<Plan> {
    let path = pipeline_path(given);
    let pipeline = if given.is_none() && !path.exists() {
        eprintln!(
            "no pipeline.yaml here: using the built-in default pipeline (`cwm init` writes it out)"
        );
        pipeline::load_str(DEFAULT_PIPELINE, &path, registry, set)
    } else {
        pipeline::load(&path, registry, set)
    };
    let pipeline = pipeline.map_err(|d| anyhow::anyhow!("invalid pipeline:\n{d}"))?;
    Plan::new(pipeline).map_err(|d| anyhow::anyhow!("invalid pipeline:\n{d}"))
}

/// `cwm push` (`upload`) or `cwm pull`: the lock's entries for the selected
/// instances (pull: and what they need) to or from the remote.
fn transfer(
    given: Option<&Path>,
    remote: Option<String>,
    only: &[String],
    registry: &Registry,
    upload: bool,
) -> Result<()> {
    let plan = load_plan(given, registry, &[])?;
    let url = remote
        .or_else(|| plan.pipeline.remote.clone())
        .context("no remote: pass --remote URL or set `remote:` in the pipeline file")?;
    let store = open_store(&plan)?;
    let _shared = store.lock_shared()?;
    let lock = LockFile::read(&LockFile::path_for(&plan.pipeline.base_dir))?;
    let selected = plan.resolve(only).map_err(anyhow::Error::msg)?;
    let names: Vec<String> = if only.is_empty() {
        Vec::new()
    } else if upload {
        selected
            .iter()
            .map(|&i| plan.pipeline.instances[i].name.clone())
            .collect()
    } else {
        plan.with_ancestors(&selected)
            .iter()
            .map(|&i| plan.pipeline.instances[i].name.clone())
            .collect()
    };
    let entries = cwm::remote::selected_entries(&lock, &names);
    if entries.is_empty() {
        bail!("cwm.lock records no result for the selected stages: run them first");
    }
    let remote = cwm::remote::Remote::open(&url)?;
    let t = if upload {
        remote.push(&store, &entries)?
    } else {
        remote.pull(&store, &entries)?
    };
    let rate = if t.seconds > 0.0 {
        t.bytes as f64 / t.seconds
    } else {
        0.0
    };
    outln!(
        "{} {url}: {} artifacts ({} files, {}) transferred, {} already there, {} key records, {:.1}s ({}/s)",
        if upload { "pushed to" } else { "pulled from" },
        t.artifacts,
        t.files,
        human_bytes(t.bytes),
        t.present,
        t.keys,
        t.seconds,
        human_bytes(rate as u64)
    );
    Ok(())
}

/// The store and lock file beside a pipeline file, without validating it
/// (maintenance must work even when the pipeline no longer loads).
fn store_and_lock(given: Option<&Path>) -> Result<(Store, LockFile)> {
    let path = pipeline_path(given);
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let store = Store::open(&base.join("artifacts"))
        .with_context(|| format!("opening the artifact store in {}", base.display()))?;
    let lock = LockFile::read(&LockFile::path_for(base))?;
    Ok((store, lock))
}

fn open_store(plan: &Plan) -> Result<Store> {
    let root = plan.pipeline.base_dir.join("artifacts");
    Store::open(&root).with_context(|| format!("opening the artifact store {}", root.display()))
}

fn render_dag(plan: &Plan, format: DagFormat) -> String {
    let instances = &plan.pipeline.instances;
    let mut out = String::new();
    match format {
        DagFormat::Mermaid => {
            out.push_str("flowchart TD\n");
            for &i in &plan.order {
                out.push_str(&format!(
                    "    n{i}[\"{} ({})\"]\n",
                    instances[i].name.replace('"', "'"),
                    instances[i].kind
                ));
            }
            for &i in &plan.order {
                for (input, refs) in &instances[i].inputs {
                    for r in refs {
                        out.push_str(&format!(
                            "    n{} -->|{}→{input}| n{i}\n",
                            r.producer, r.output
                        ));
                    }
                }
            }
        }
        DagFormat::Dot => {
            out.push_str("digraph cwm {\n    rankdir=TB;\n    node [shape=box];\n");
            for &i in &plan.order {
                out.push_str(&format!(
                    "    n{i} [label=\"{}\\n({})\"];\n",
                    instances[i].name.replace('"', "\\\""),
                    instances[i].kind
                ));
            }
            for &i in &plan.order {
                for (input, refs) in &instances[i].inputs {
                    for r in refs {
                        out.push_str(&format!(
                            "    n{} -> n{i} [label=\"{}→{input}\"];\n",
                            r.producer, r.output
                        ));
                    }
                }
            }
            out.push_str("}\n");
        }
    }
    out
}

fn show(plan: &Plan, registry: &Registry, store: &Store, selector: &str) -> Result<()> {
    let indices = plan
        .resolve(&[selector.to_owned()])
        .map_err(anyhow::Error::msg)?;
    let lock = LockFile::read(&LockFile::path_for(&plan.pipeline.base_dir))?;
    let statuses = cwm::status::status(plan, registry, store, &lock);
    for idx in indices {
        let inst = &plan.pipeline.instances[idx];
        let status = statuses.iter().find(|s| s.stage == inst.name);
        outln!("{} (kind {})", inst.name, inst.kind);
        outln!("  params: {}", inst.params.canonical());
        if let Some(s) = status {
            outln!("  state: {}", s.state);
            for r in &s.reasons {
                outln!("    {r}");
            }
        }
        let Some(entry) = lock.get(&inst.name) else {
            outln!("  no result recorded in cwm.lock");
            continue;
        };
        outln!("  key: {}", entry.key);
        for (output, hash) in &entry.outputs {
            outln!("  output {output}: {hash}");
            outln!("    path: {}", store.data_dir(hash).display());
            match store.manifest(hash) {
                Ok(m) => {
                    outln!(
                        "    {} files, {}, ran {} → {} ({:.1}s) on {}, cwm {}",
                        m.files.len(),
                        human_bytes(m.size),
                        m.started,
                        m.finished,
                        m.duration_s,
                        m.host,
                        m.cwm_version
                    );
                    for f in m.files.iter().take(20) {
                        outln!(
                            "      {:>10}  {}  {}",
                            human_bytes(f.size),
                            short(&f.blake3),
                            f.path
                        );
                    }
                    if m.files.len() > 20 {
                        outln!("      … {} more", m.files.len() - 20);
                    }
                    outln!(
                        "    manifest: {}",
                        store.artifact_dir(hash).join("manifest.json").display()
                    );
                    outln!(
                        "    log: {}",
                        store.artifact_dir(hash).join(&m.log).display()
                    );
                }
                Err(e) => outln!("    not in the store: {e}"),
            }
        }
    }
    Ok(())
}
