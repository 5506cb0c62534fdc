//! The subcommands of `cwm`, one module each, and what they share: where the pipeline file
//! and the store are, and how a plan is loaded.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::Args;
use cwm_engine::lockfile::LockFile;
use cwm_engine::pipeline::{self, LoadOptions, Override, VarAssignment, VarOverrides, VarsFile};
use cwm_engine::plan::Plan;
use cwm_engine::registry::Registry;
use cwm_engine::store::Store;

/// `println!` that returns the write error instead of panicking: `cwm kinds | head` closes the
/// pipe early, and `main` ends quietly on a broken pipe.
macro_rules! outln {
    ($($arg:tt)*) => {
        writeln!(std::io::stdout(), $($arg)*)?
    };
}

pub mod dag;
pub mod data;
pub mod evaluate;
pub mod gc;
pub mod init;
pub mod job;
pub mod kinds;
pub mod ls;
pub mod model;
pub mod model_bench;
pub mod query;
pub mod remote;
pub mod run;
pub mod show;
pub mod status;
pub mod verify;

/// The default pipeline, built into the binary.
pub const DEFAULT_PIPELINE: &str = include_str!("../../pipeline.yaml");

/// What every subcommand may need: the stage kinds and the thread budget.
pub struct Context {
    /// The stage kinds built into this cwm.
    pub registry: Registry,
    /// Threads for all parallel work (`--threads`, else `RAYON_NUM_THREADS`, else all cores).
    pub threads: usize,
}

/// The pipeline file a subcommand works on: the one given, else `pipeline.yaml` here.
pub fn pipeline_path(given: Option<&Path>) -> PathBuf {
    given.map_or_else(|| PathBuf::from("pipeline.yaml"), Path::to_path_buf)
}

/// `--vars FILE` and `--var NAME=VALUE`: values for the vars the pipeline file declares.
#[derive(Args)]
pub struct VarArgs {
    /// Read var values from a YAML mapping of names to values (repeatable: later files win;
    /// overrides the pipeline file's `vars:`).
    #[arg(long = "vars", value_name = "FILE")]
    vars_files: Vec<PathBuf>,
    /// Set a var the pipeline file declares: NAME=VALUE, VALUE in YAML syntax (repeatable;
    /// overrides `--vars`), e.g. --var steps=20 --var 'archs=[slice, gdn]'.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    var: Vec<VarAssignment>,
}

impl VarArgs {
    /// The load options: these var values and the param overrides `set`. Reads the vars files.
    pub fn load_options(&self, set: Vec<Override>) -> Result<LoadOptions> {
        let files = self
            .vars_files
            .iter()
            .map(|path| {
                VarsFile::read(path)
                    .with_context(|| format!("cannot use `--vars {}`", path.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LoadOptions {
            set,
            vars: VarOverrides {
                files,
                assignments: self.var.clone(),
            },
        })
    }
}

/// Loads and orders the pipeline, with `options` applied; without a file argument and without
/// a `pipeline.yaml` here, uses the built-in default.
pub fn load_plan(given: Option<&Path>, registry: &Registry, options: &LoadOptions) -> Result<Plan> {
    let path = pipeline_path(given);
    let pipeline = if given.is_none() && !path.exists() {
        eprintln!(
            "no pipeline.yaml here: using the built-in default pipeline (`cwm init` writes it out)"
        );
        pipeline::load_str(DEFAULT_PIPELINE, &path, registry, options)
    } else {
        pipeline::load(&path, registry, options)
    };
    let pipeline = pipeline.map_err(|d| anyhow::anyhow!("invalid pipeline:\n{d}"))?;
    Plan::new(pipeline).map_err(|d| anyhow::anyhow!("invalid pipeline:\n{d}"))
}

/// The store and lock file beside a pipeline file, without validating it
/// (maintenance must work even when the pipeline no longer loads).
pub fn store_and_lock(given: Option<&Path>) -> Result<(Store, LockFile)> {
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

/// The store of a loaded pipeline.
pub fn open_store(plan: &Plan) -> Result<Store> {
    let root = plan.pipeline.base_dir.join("artifacts");
    Store::open(&root).with_context(|| format!("opening the artifact store {}", root.display()))
}

/// The lock file of a loaded pipeline.
pub fn read_lock(plan: &Plan) -> Result<LockFile> {
    Ok(LockFile::read(&LockFile::path_for(
        &plan.pipeline.base_dir,
    ))?)
}
