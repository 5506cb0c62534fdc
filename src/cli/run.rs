//! `cwm run`: run what is stale.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use cwm_engine::display::{Display, ProgressMode};
use cwm_engine::executor::{Executor, RunOptions};
use cwm_engine::pipeline::Override;

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

/// Runs `cwm run`; fails (exit 1) when a stage failed.
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
    };
    let mut display = Display::new(args.json, args.progress.into());
    let executor = Executor {
        plan: &plan,
        registry: &ctx.registry,
        store: &store,
    };
    let report = executor.run(&options, &mut display)?;
    if args.json {
        outln!("{}", report.to_json(args.dry_run));
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
