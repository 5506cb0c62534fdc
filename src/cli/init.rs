//! `cwm init`: write the built-in default pipeline to a file.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::Args;

use super::DEFAULT_PIPELINE;

/// Write the built-in default pipeline to a file.
#[derive(Args)]
pub struct InitArgs {
    /// Where to write it.
    #[arg(default_value = "pipeline.yaml")]
    path: PathBuf,
}

/// Runs `cwm init`; never overwrites a file.
pub fn run(args: InitArgs) -> Result<ExitCode> {
    if args.path.exists() {
        bail!("{} exists; not overwriting it", args.path.display());
    }
    std::fs::write(&args.path, DEFAULT_PIPELINE)
        .with_context(|| format!("writing {}", args.path.display()))?;
    outln!("wrote {}", args.path.display());
    Ok(ExitCode::SUCCESS)
}
