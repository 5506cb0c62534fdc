//! What both binaries (`cwm`, and `cwm-bench`, which is `cwm model bench` alone) share around a
//! command: the allocator, the `--threads` option and the thread pool before it, and the exit
//! status and error report after it.

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;

/// mimalloc keeps freed memory for reuse. With the system allocator every large tensor of a
/// training step is a fresh `mmap`, faulted in page by page and unmapped again (docs/perf.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The options every command takes.
#[derive(Args)]
pub struct GlobalArgs {
    /// Threads for all parallel work (default: RAYON_NUM_THREADS, else all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
}

/// `--threads`, else `RAYON_NUM_THREADS`, else the CPUs of the Slurm allocation this runs in
/// (`SLURM_CPUS_PER_TASK`), else every core.
pub fn thread_count(flag: Option<usize>) -> usize {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
    };
    flag.or_else(|| env("RAYON_NUM_THREADS"))
        .or_else(|| env("SLURM_CPUS_PER_TASK"))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Sets up the global thread pool with [`thread_count`]'s threads and returns how many.
pub fn thread_pool(flag: Option<usize>) -> Result<usize> {
    let threads = thread_count(flag);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .context("setting up the thread pool")?;
    Ok(threads)
}

/// The process's exit status for a command's result, after the kernel profiler's log (if one
/// was asked for) is written. An error is printed with its causes and exits with 2; writing to
/// a closed pipe (the reader, `head` say, is done) is not an error.
pub fn finish(result: Result<ExitCode>) -> ExitCode {
    cwm_models::kernel_profile::wait_for_log(std::time::Duration::from_secs(60));
    match result {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(2)
        }
    }
}

/// Whether `err` comes from writing to a closed pipe.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
