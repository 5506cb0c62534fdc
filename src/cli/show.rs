//! `cwm show`: a stage's state, key, artifacts, files and log.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use cwm_engine::display::human_bytes;
use cwm_engine::freshness::short;
use cwm_engine::store::Store;

use super::{Context, VarArgs, load_plan, open_store, read_lock};

/// How many files of an artifact `cwm show` lists.
const FILES_SHOWN: usize = 20;

/// Show a stage's artifacts: paths, hashes and manifests.
#[derive(Args)]
pub struct ShowArgs {
    /// The stage or instance name.
    stage: String,
    /// The pipeline file.
    #[arg(short, long)]
    pipeline: Option<PathBuf>,
    #[command(flatten)]
    vars: VarArgs,
}

/// Runs `cwm show`.
pub fn run(args: ShowArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(Vec::new())?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let store = open_store(&plan)?;
    let indices = plan.resolve(std::slice::from_ref(&args.stage))?;
    let lock = read_lock(&plan)?;
    let statuses = cwm_engine::status::status(&plan, &ctx.registry, &store, &lock);
    for idx in indices {
        let inst = &plan.pipeline.instances[idx];
        outln!("{} (kind {})", inst.name, inst.kind);
        outln!("  params: {}", inst.params.canonical());
        if let Some(s) = statuses.iter().find(|s| s.stage == inst.name) {
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
            show_artifact(&store, hash)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The manifest of one artifact: its files, when and where it ran, its log.
fn show_artifact(store: &Store, hash: &str) -> Result<()> {
    let m = match store.manifest(hash) {
        Ok(m) => m,
        Err(e) => {
            outln!("    not in the store: {e}");
            return Ok(());
        }
    };
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
    for f in m.files.iter().take(FILES_SHOWN) {
        outln!(
            "      {:>10}  {}  {}",
            human_bytes(f.size),
            short(&f.blake3),
            f.path
        );
    }
    if m.files.len() > FILES_SHOWN {
        outln!("      … {} more", m.files.len() - FILES_SHOWN);
    }
    let dir = store.artifact_dir(hash);
    outln!("    manifest: {}", dir.join("manifest.json").display());
    outln!("    log: {}", dir.join(&m.log).display());
    Ok(())
}
