//! `cwm ls`: the artifacts in the store with their sizes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use cwm_engine::display::human_bytes;
use cwm_engine::freshness::short;

use super::store_and_lock;

/// List the artifacts in the store with their sizes.
#[derive(Args)]
pub struct LsArgs {
    /// The pipeline file (its directory holds artifacts/).
    pipeline: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `cwm ls`.
pub fn run(args: LsArgs) -> Result<ExitCode> {
    let (store, _) = store_and_lock(args.pipeline.as_deref())?;
    let artifacts = store.artifacts();
    if args.json {
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
        return Ok(ExitCode::SUCCESS);
    }
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
    Ok(ExitCode::SUCCESS)
}
