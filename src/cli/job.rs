//! `cwm job`: the compute-node side of a cluster executor. Not for people to type: a Slurm
//! job's batch script runs `cwm job run SPEC`, and the executor's probe job runs
//! `cwm job probe DIR TOKEN`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::Subcommand;
use cwm_engine::executor::job::{JobEnd, JobSignals, run_job};
use cwm_engine::executor::local::visible_gpus;
use cwm_engine::executor::slurm::probe;
use cwm_engine::store::host_name;
use signal_hook::consts::{SIGTERM, SIGUSR1};

use super::Context;

/// How many times a job requeues itself on time-limit warnings before it gives up.
const MAX_REQUEUES: u32 = 100;

/// `cwm job` subcommands.
#[derive(Subcommand)]
pub enum JobCommand {
    /// Run the task a cluster executor wrote to SPEC and commit its outputs to the store.
    Run {
        /// The task's `spec.json`.
        spec: PathBuf,
    },
    /// Answer the executor's probe: check that this node sees DIR/token holding TOKEN.
    Probe {
        /// The probe's directory in the store.
        dir: PathBuf,
        /// The token the executor wrote.
        token: String,
    },
}

/// Runs `cwm job ...`.
pub fn run(command: JobCommand, ctx: &Context) -> Result<ExitCode> {
    match command {
        JobCommand::Run { spec } => run_spec(&spec, ctx),
        JobCommand::Probe { dir, token } => {
            match probe::answer(&dir, &token, env!("CARGO_PKG_VERSION")) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(message) => {
                    eprintln!("error: {message}");
                    Ok(ExitCode::from(probe::UNSHARED_EXIT))
                }
            }
        }
    }
}

/// Runs the task; on Slurm's warning signal (time limit, preemption) the stage saves its
/// state and the job requeues itself, to resume where it stopped.
fn run_spec(spec: &std::path::Path, ctx: &Context) -> Result<ExitCode> {
    let signals = JobSignals::default();
    for signal in [SIGTERM, SIGUSR1] {
        signal_hook::flag::register(signal, Arc::clone(&signals.cancelled))
            .context("installing the signal handlers")?;
    }
    signal_hook::flag::register(SIGUSR1, Arc::clone(&signals.warned))
        .context("installing the signal handlers")?;
    let gpus = visible_gpus().unwrap_or_default();
    println!(
        "cwm job: {} on {} (GPUs {gpus:?}, restart {})",
        spec.display(),
        host_name(),
        restarts()
    );
    let end = run_job(spec, &ctx.registry, gpus, &signals)?;
    match end {
        JobEnd::Committed => {
            println!("cwm job: outputs committed");
            Ok(ExitCode::SUCCESS)
        }
        JobEnd::Failed(message) => {
            eprintln!("cwm job: failed: {message}");
            Ok(ExitCode::FAILURE)
        }
        JobEnd::Interrupted { warned: true } => requeue_self(),
        JobEnd::Interrupted { warned: false } => {
            println!("cwm job: stopped by a signal; the stage saved what it can resume from");
            Ok(ExitCode::from(143))
        }
    }
}

/// After the time-limit warning: asks Slurm to requeue this job.
fn requeue_self() -> Result<ExitCode> {
    let Ok(job_id) = std::env::var("SLURM_JOB_ID") else {
        eprintln!("cwm job: warned, but SLURM_JOB_ID is unset: not requeued");
        return Ok(ExitCode::from(143));
    };
    if restarts() >= MAX_REQUEUES {
        eprintln!("cwm job: warned after {MAX_REQUEUES} requeues: not requeued again");
        return Ok(ExitCode::from(143));
    }
    println!("cwm job: time-limit or preemption warning: state saved, requeueing job {job_id}");
    let status = Command::new("scontrol")
        .args(["requeue", &job_id])
        .status()
        .context("running `scontrol requeue`")?;
    if !status.success() {
        eprintln!("cwm job: `scontrol requeue {job_id}` failed ({status})");
    }
    Ok(ExitCode::from(143))
}

/// How often Slurm restarted this job (`SLURM_RESTART_COUNT`).
fn restarts() -> u32 {
    std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
