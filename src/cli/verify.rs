//! `cwm verify`: rehash artifacts and quarantine corrupt ones.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use cwm_engine::display::human_bytes;
use cwm_engine::freshness::short;

use super::store_and_lock;

/// Rehash artifacts; quarantine corrupt ones so they are recomputed or pulled.
#[derive(Args)]
pub struct VerifyArgs {
    /// The pipeline file (its directory holds artifacts/ and cwm.lock).
    pipeline: Option<PathBuf>,
    /// Check every artifact in the store, not only those cwm.lock names.
    #[arg(long)]
    all: bool,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

/// Runs `cwm verify`; fails (exit 1) when an artifact was corrupt.
pub fn run(args: VerifyArgs) -> Result<ExitCode> {
    let (store, lock) = store_and_lock(args.pipeline.as_deref())?;
    let hashes: BTreeSet<String> = if args.all {
        store.object_hashes().into_iter().collect()
    } else {
        lock.stages
            .iter()
            .flat_map(|e| e.outputs.values().cloned())
            .collect()
    };
    let report = cwm_engine::maintenance::verify(&store, &hashes)?;
    store.save_stat_cache()?;
    if args.json {
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
