//! `cwm gc`: remove what nothing refers to.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use cwm_engine::display::human_bytes;
use cwm_engine::freshness::short;
use cwm_engine::maintenance::GcOptions;
use cwm_engine::pipeline::LoadOptions;

use super::{Context, VarArgs, load_plan, store_and_lock};

/// Remove artifacts nothing refers to, printing what it frees.
#[derive(Args)]
pub struct GcArgs {
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
    // The var values of the runs whose partial states to keep, as given to `cwm run`.
    #[command(flatten)]
    vars: VarArgs,
}

/// Runs `cwm gc`.
pub fn run(args: GcArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(Vec::new())?;
    let (store, lock) = store_and_lock(args.pipeline.as_deref())?;
    let lock_keys = lock.stages.iter().map(|e| e.key.clone()).collect();
    let options = GcOptions {
        keep_lock: args.keep_lock,
        keep_last: args.keep_last,
        dry_run: args.dry_run,
        stale_keys: stale_keys(&args, &load, ctx),
    };
    let report = cwm_engine::maintenance::gc(&store, &lock_keys, &options)?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for (hash, size) in &report.artifacts_removed {
        outln!("{verb} {} ({})", short(hash), human_bytes(*size));
    }
    for key in &report.partials_removed {
        outln!("{verb} the partial state of {}", short(key));
    }
    outln!(
        "{verb} {} artifacts, {} key records and {} partial states, freeing {}",
        report.artifacts_removed.len(),
        report.keys_removed.len(),
        report.partials_removed.len(),
        human_bytes(report.bytes_freed)
    );
    Ok(ExitCode::SUCCESS)
}

/// The keys of the pipeline's stale instances, whose partial state (a resumable training run)
/// gc keeps; `None`, with a note, when the pipeline does not load.
fn stale_keys(args: &GcArgs, load: &LoadOptions, ctx: &Context) -> Option<BTreeSet<String>> {
    let loaded = load_plan(args.pipeline.as_deref(), &ctx.registry, load).and_then(|plan| {
        let (store, lock) = (super::open_store(&plan)?, super::read_lock(&plan)?);
        Ok(cwm_engine::status::status(
            &plan,
            &ctx.registry,
            &store,
            &lock,
        ))
    });
    match loaded {
        Ok(statuses) => Some(
            statuses
                .into_iter()
                .filter(|s| s.state == "stale")
                .filter_map(|s| s.key)
                .collect(),
        ),
        Err(e) => {
            eprintln!(
                "note: the pipeline does not load ({e:#}); keeping every unfinished partial state"
            );
            None
        }
    }
}
