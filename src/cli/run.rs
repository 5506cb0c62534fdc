//! `cwm run`: run what is stale.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use cwm_engine::display::{Display, ProgressMode};
use cwm_engine::executor::local::gpu_pool;
use cwm_engine::executor::settings::ExecutorKind;
use cwm_engine::executor::slurm::{SlurmExecutor, SlurmStats};
use cwm_engine::pipeline::Override;
use cwm_engine::plan::Plan;
use cwm_engine::scheduler::{RunOptions, RunReport, Scheduler};
use cwm_engine::store::Store;
use signal_hook::consts::{SIGINT, SIGTERM};

use super::{Context, VarArgs, load_plan, open_store};

/// Run the pipeline: only stale stages run, results are cached by content hash.
#[derive(Args)]
pub struct RunArgs {
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
    #[command(flatten)]
    vars: VarArgs,
    /// Print a JSON summary {ran, cached, failed, skipped} on stdout.
    #[arg(long)]
    json: bool,
    /// How to show running stages: `auto` draws live bars when stderr is a terminal and
    /// prints plain lines otherwise; `plain` always prints plain lines (a start line, and
    /// for a long stage a progress line every 30 s, or after another 10 % of its work but
    /// not within 10 s of the last); `none` prints only the line of each finished stage and
    /// the closing line.
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto, value_name = "MODE")]
    progress: ProgressArg,
    /// Where stale stages run: `local` (threads of this process) or `slurm` (one Slurm job
    /// each; docs/cluster.md). Default: the pipeline file's `executor: kind:`, else local.
    #[arg(long, value_enum, value_name = "EXECUTOR")]
    executor: Option<ExecutorArg>,
}

/// `--executor`.
#[derive(Clone, Copy, ValueEnum)]
enum ExecutorArg {
    Local,
    Slurm,
}

/// `--progress`.
#[derive(Clone, Copy, ValueEnum)]
enum ProgressArg {
    Auto,
    Plain,
    None,
}

impl From<ProgressArg> for ProgressMode {
    fn from(arg: ProgressArg) -> Self {
        match arg {
            ProgressArg::Auto => ProgressMode::Auto,
            ProgressArg::Plain => ProgressMode::Plain,
            ProgressArg::None => ProgressMode::Off,
        }
    }
}

/// Runs `cwm run`; fails (exit 1) when a stage failed, 130 when interrupted.
pub fn run(args: RunArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(args.set)?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let store = open_store(&plan)?;
    let options = RunOptions {
        only: args.only,
        from: args.from,
        force: args.force,
        dry_run: args.dry_run,
        jobs: args.jobs.unwrap_or(ctx.threads),
        keep_going: args.keep_going,
        interrupt: interrupt_flag()?,
    };
    let mut display = Display::new(args.json, args.progress.into());
    let scheduler = Scheduler {
        plan: &plan,
        registry: &ctx.registry,
        store: &store,
    };
    let kind = match args.executor {
        Some(ExecutorArg::Local) => ExecutorKind::Local,
        Some(ExecutorArg::Slurm) => ExecutorKind::Slurm,
        None => plan.pipeline.executor.kind,
    };
    let report = match kind {
        ExecutorKind::Local => {
            let gpus = gpu_pool(plan.pipeline.executor.local.gpus.as_deref());
            scheduler.run_local(&options, &mut display, gpus)?
        }
        ExecutorKind::Slurm => run_on_slurm(&scheduler, &plan, &store, &options, &mut display)?,
    };
    if args.json {
        outln!("{}", report.to_json(args.dry_run));
    }
    Ok(if report.interrupted {
        ExitCode::from(130)
    } else if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The flag SIGINT and SIGTERM set: the first asks the run to stop (cancelling what runs),
/// a second one while it is set ends the process at once.
fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag))
            .context("installing the interrupt handler")?;
        signal_hook::flag::register(signal, Arc::clone(&flag))
            .context("installing the interrupt handler")?;
    }
    Ok(flag)
}

/// Runs on the Slurm executor and prints what it asked of the controller.
fn run_on_slurm(
    scheduler: &Scheduler,
    plan: &Plan,
    store: &Store,
    options: &RunOptions,
    display: &mut Display,
) -> Result<RunReport> {
    let cwm = std::env::current_exe().context("finding this cwm's path for the Slurm jobs")?;
    let settings = plan.pipeline.executor.slurm.clone();
    let mut slurm = SlurmExecutor::new(settings, store, cwm);
    let report = scheduler.run(options, display, &mut slurm)?;
    let stats = slurm.stats();
    if stats.submitted + stats.adopted > 0 {
        eprintln!("{}", slurm_summary(&stats));
    }
    Ok(report)
}

/// `slurm: 12 jobs submitted in 3.1s, 2 adopted; 40 status polls; calls: ...`.
fn slurm_summary(stats: &SlurmStats) -> String {
    let c = stats.calls;
    format!(
        "slurm: {} job(s) submitted in {:.1}s, {} adopted from an earlier run; {} status \
         poll(s); calls: sbatch {}, squeue {}, scontrol {}, scancel {}",
        stats.submitted,
        stats.submit_seconds,
        stats.adopted,
        stats.polls,
        c.sbatch,
        c.squeue,
        c.scontrol,
        c.scancel
    )
}
