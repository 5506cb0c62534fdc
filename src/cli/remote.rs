//! `cwm push` and `cwm pull`: results recorded in cwm.lock to and from a remote cache.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Args;
use cwm_engine::display::human_bytes;
use cwm_engine::plan::Plan;

use super::{Context, VarArgs, load_plan, open_store, read_lock};

/// Which pipeline, which remote, which stages.
#[derive(Args)]
pub struct TransferArgs {
    /// The pipeline file.
    pipeline: Option<PathBuf>,
    /// file:///path or s3://bucket/prefix (default: the pipeline's `remote:`).
    #[arg(long)]
    remote: Option<String>,
    /// Only these stages or instances (pull: and what they need).
    #[arg(long, num_args = 1.., value_name = "STAGE")]
    only: Vec<String>,
    #[command(flatten)]
    vars: VarArgs,
}

/// Which way a transfer goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `cwm push`.
    Push,
    /// `cwm pull`.
    Pull,
}

/// Runs `cwm push` or `cwm pull`: the lock's entries for the selected instances (pull: and
/// what they need) to or from the remote.
pub fn run(args: TransferArgs, direction: Direction, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(Vec::new())?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let url = args
        .remote
        .or_else(|| plan.pipeline.remote.clone())
        .context("no remote: pass --remote URL or set `remote:` in the pipeline file")?;
    let store = open_store(&plan)?;
    let _shared = store.lock_shared()?;
    let lock = read_lock(&plan)?;
    let names = selected_names(&plan, &args.only, direction)?;
    let entries = cwm_engine::remote::selected_entries(&lock, &names);
    if entries.is_empty() {
        bail!("cwm.lock records no result for the selected stages: run them first");
    }
    let remote = cwm_engine::remote::Remote::open(&url)?;
    let t = match direction {
        Direction::Push => remote.push(&store, &entries)?,
        Direction::Pull => remote.pull(&store, &entries)?,
    };
    let rate = if t.seconds > 0.0 {
        t.bytes as f64 / t.seconds
    } else {
        0.0
    };
    outln!(
        "{} {url}: {} artifacts ({} files, {}) transferred, {} already there, {} key records, {:.1}s ({}/s)",
        match direction {
            Direction::Push => "pushed to",
            Direction::Pull => "pulled from",
        },
        t.artifacts,
        t.files,
        human_bytes(t.bytes),
        t.present,
        t.keys,
        t.seconds,
        human_bytes(rate as u64)
    );
    Ok(ExitCode::SUCCESS)
}

/// The instance names `--only` selects (none: every entry of the lock); a pull also takes
/// what they need.
fn selected_names(plan: &Plan, only: &[String], direction: Direction) -> Result<Vec<String>> {
    if only.is_empty() {
        return Ok(Vec::new());
    }
    let selected = plan.resolve(only)?;
    let indices = match direction {
        Direction::Push => selected,
        Direction::Pull => plan.with_ancestors(&selected),
    };
    Ok(indices
        .iter()
        .map(|&i| plan.pipeline.instances[i].name.clone())
        .collect())
}
