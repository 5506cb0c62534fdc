//! `cwm status`: which stages are fresh or stale, and why: by default a summary, one line per
//! stage with its instances counted by why they are stale; `--all` lists every instance.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use cwm_engine::executor::slurm::{JobInFlight, jobs_in_flight};
use cwm_engine::pipeline::Override;

use super::{Context, VarArgs, load_plan, open_store, read_lock};

/// Show which stages are fresh or stale, and why.
#[derive(Args)]
pub struct StatusArgs {
    /// The pipeline file.
    pipeline: Option<PathBuf>,
    /// Override a param: stage.param=value.
    #[arg(short = 's', long = "set", value_name = "STAGE.PARAM=VALUE")]
    set: Vec<Override>,
    #[command(flatten)]
    vars: VarArgs,
    /// List every instance with its reasons instead of the summary per stage.
    #[arg(long)]
    all: bool,
    /// Print a JSON array of {stage, state, reasons}, one per instance (always the full list).
    #[arg(long)]
    json: bool,
}

/// Runs `cwm status`.
pub fn run(args: StatusArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(args.set)?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let store = open_store(&plan)?;
    let lock = read_lock(&plan)?;
    let statuses = cwm_engine::status::status(&plan, &ctx.registry, &store, &lock);
    store.save_stat_cache()?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&statuses)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    write_jobs_in_flight(&mut out, &jobs_in_flight(&store))?;
    if !args.all {
        write!(out, "{}", cwm_engine::status::summarize(&statuses))?;
        if statuses.iter().any(|s| !s.reasons.is_empty()) {
            writeln!(
                out,
                "(`cwm status --all` lists every instance and why it is stale)"
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    for s in &statuses {
        writeln!(out, "{:<6} {}", s.state, s.stage)?;
        for r in &s.reasons {
            writeln!(out, "         {r}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The Slurm jobs the store records (submitted by a `cwm run` and not yet settled), one line
/// each: job id, state, instance.
fn write_jobs_in_flight(out: &mut impl std::io::Write, jobs: &[JobInFlight]) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    writeln!(out, "Slurm jobs in flight:")?;
    for job in jobs {
        let state = match &job.state {
            Ok(state) => state.describe(),
            Err(e) => format!("unknown ({e})"),
        };
        writeln!(
            out,
            "  {:<10} {:<22} {}",
            job.record.job_id, state, job.record.instance
        )?;
    }
    Ok(())
}
