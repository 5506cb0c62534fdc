//! Running one task in this process: the part every executor shares. A local executor calls
//! it on a thread; a cluster job calls it through `cwm job run` on a compute node.
//!
//! The task's key is locked for the whole run, so two processes on one store never compute
//! the same key at once; one that waited reuses the other's result. Outputs are written to a
//! staging directory and committed into the store in one atomic step, so nothing
//! half-written is ever taken for a finished artifact.

use std::fs::{self, OpenOptions};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use cwm_stage::{Progress, ProgressSink, StageContext, StageKind, StageLog};

use super::{Finished, LogTail, StageFailure, StageFault, Task};
use crate::store::{CommitInfo, Staging, Store};

/// What the stage runs with besides the task: where it reports, what it may use, and the
/// flag that cancels it.
pub struct Surroundings {
    /// Where its progress goes.
    pub sink: Arc<dyn ProgressSink>,
    /// The threads it may use.
    pub threads: usize,
    /// The GPUs it has to itself (physical ids), if any.
    pub gpus: Vec<u32>,
    /// Set to cancel it.
    pub cancelled: Arc<AtomicBool>,
}

/// Runs `task` with `kind` and commits its outputs to `store`, holding the key's lock;
/// `on_wait` is called when another process holds that lock and this one waits for it.
///
/// # Errors
/// [`StageFailure`] when the stage fails, panics or is cancelled, or the store cannot stage
/// or commit its outputs.
pub fn run_task(
    task: &Task,
    kind: &dyn StageKind,
    store: &Store,
    with: Surroundings,
    on_wait: &dyn Fn(),
) -> Result<Finished, StageFailure> {
    let (_key_lock, waited) = store.lock_key(&task.key)?;
    if waited {
        on_wait();
    }
    if !task.forced
        && let Some(outputs) = store.intact_outputs(&task.key)
    {
        return Ok(Finished::Reused(outputs));
    }
    let staging = store.stage(&task.instance, kind.outputs())?;
    let (started, finished) = match execute(task, kind, store, &staging, with) {
        Ok(times) => times,
        Err(fault) => {
            let log = store.discard(staging);
            let saved = save_failed_log(store, &task.instance, &log);
            let log = LogTail::of(&log, saved);
            return Err(StageFailure::Stage { fault, log });
        }
    };
    let info = CommitInfo {
        instance: &task.instance,
        key: &task.key,
        ingredients: &task.ingredients,
        started,
        finished,
    };
    let outputs = store.commit(staging, &info)?;
    // The result is in the store: nothing will resume from the partial state any more.
    let _ = store.remove_partial(&task.key);
    Ok(Finished::Ran(outputs))
}

/// Runs the stage's code on `staging`, catching a panic; returns when it started and
/// finished.
fn execute(
    task: &Task,
    kind: &dyn StageKind,
    store: &Store,
    staging: &Staging,
    with: Surroundings,
) -> Result<(SystemTime, SystemTime), StageFault> {
    let log = OpenOptions::new()
        .append(true)
        .open(&staging.log)
        .map(StageLog::to_file)
        .unwrap_or_else(|_| StageLog::discard());
    let ctx = StageContext::new(
        task.instance.clone(),
        task.params.clone(),
        task.inputs.clone(),
        staging.outputs.clone(),
        task.base_dir.clone(),
        with.threads,
        Progress::new(with.sink),
        log,
        with.cancelled,
    )
    .with_partial_dir(store.partial_dir(&task.key))
    .with_gpus(with.gpus);
    let started = SystemTime::now();
    let result = catch_unwind(AssertUnwindSafe(|| kind.run(&ctx)));
    let finished = SystemTime::now();
    drop(ctx);
    match result {
        Ok(Ok(())) => Ok((started, finished)),
        Ok(Err(e)) => Err(StageFault::Error(e)),
        Err(panic) => Err(StageFault::Panicked(panic_message(&*panic))),
    }
}

/// The message a panic carried.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Keeps a failed stage's log at `artifacts/failed/<instance>.log`.
pub(crate) fn save_failed_log(store: &Store, name: &str, log: &str) -> Option<PathBuf> {
    let dir = store.root().join("failed");
    fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("{}.log", cwm_formats::fs::file_safe(name)));
    fs::write(&path, log).ok()?;
    Some(path)
}
