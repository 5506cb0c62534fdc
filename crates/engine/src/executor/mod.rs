//! Executors: where a stale stage runs once the scheduler has decided it must.
//!
//! The scheduler ([`crate::scheduler`]) walks the plan, computes keys, finds what is cached,
//! and hands each stale instance to an [`Executor`] as a [`Task`]: everything needed to run
//! that one stage anywhere and commit its outputs into the store. The executor reports back
//! through [`Event`]s. Two implement it:
//! - [`local::LocalExecutor`]: each task on a thread of this process, within thread slots
//!   (`-j`) and a pool of GPUs that no two running stages share;
//! - [`slurm::SlurmExecutor`]: each task as a Slurm job that runs `cwm job run` on a compute
//!   node against the same store on a shared file system.
//!
//! Whichever runs it, a task ends the same way: [`in_process::run_task`] stages the outputs,
//! runs the stage, and commits under the key's lock (another executor, say Kubernetes Jobs,
//! would reuse [`job`] and implement this trait, and nothing in the scheduler would change).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cwm_stage::{InputArtifact, Params, ProgressEvent, Threads};

use crate::freshness::Outputs;
use crate::key::KeyIngredients;
use crate::resources::Resources;

pub(crate) mod failure;
pub(crate) mod in_process;
pub mod job;
pub mod local;
pub mod settings;
pub mod slurm;

pub use failure::{LogTail, StageFailure, StageFault};

/// One stale instance, ready to run: all a process needs to run it and commit its outputs.
#[derive(Debug, Clone)]
pub struct Task {
    /// The instance's name.
    pub instance: String,
    /// Its stage kind.
    pub kind: String,
    /// Its params, defaults filled in.
    pub params: Params,
    /// The artifacts it reads, by input name.
    pub inputs: BTreeMap<String, Vec<InputArtifact>>,
    /// Its cache key, and what the key was computed from.
    pub key: String,
    pub ingredients: KeyIngredients,
    /// Run it even when another process committed the key meanwhile (`--force`).
    pub forced: bool,
    /// The threads its kind claims.
    pub threads: Threads,
    /// What its stage's `resources:` and kind ask for.
    pub resources: Resources,
    /// The pipeline file's directory (relative paths in params resolve against it).
    pub base_dir: PathBuf,
}

/// What [`Executor::launch`] did with a task.
#[derive(Debug)]
pub enum Launch {
    /// It is on its way; its [`Event::Done`] will come.
    Started,
    /// Not now (too few free slots or GPUs, or too many jobs in flight): offer it again later.
    Busy(Box<Task>),
    /// It can never start here (it asks for more than the executor has).
    Rejected(String),
}

/// How a task ended well.
#[derive(Debug)]
pub enum Finished {
    /// It ran and its outputs were committed.
    Ran(Outputs),
    /// Another process committed the same key first (while this one waited for the key's
    /// lock, or, for a cluster job, a job of an earlier `cwm run` did).
    Reused(Outputs),
}

/// What an executor reports about a task, by the id the scheduler launched it with.
#[derive(Debug)]
pub enum Event {
    /// The stage's own progress.
    Progress(usize, ProgressEvent),
    /// Where the task stands, in words (queued, waiting for a lock, requeued, ...), shown
    /// beside its progress.
    Note(usize, String),
    /// Something about the task worth a line of its own in any display mode (a job of an
    /// earlier run taken over).
    Notice(usize, String),
    /// It ended, after this long.
    Done(usize, Result<Finished, StageFailure>, Duration),
}

/// Why an executor cannot go on at all (not one stage's failure).
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The cluster's commands failed or its set-up is unusable.
    #[error("{0}")]
    Cluster(String),
}

/// Runs tasks the scheduler hands it and reports their ends.
///
/// The scheduler calls [`Executor::offer`] with how many stale instances have all their
/// producers finished, [`Executor::launch`] for each of them, then [`Executor::next_event`] until every launched task has reported
/// [`Event::Done`]. Only the scheduler's thread calls these methods.
pub trait Executor {
    /// A short name for messages (`local`, `slurm`).
    fn name(&self) -> &'static str;

    /// Starts `task` under `id` (the scheduler's index of its instance), or hands it back.
    ///
    /// # Errors
    /// [`ExecutorError`] when the executor cannot run anything (the run then stops).
    fn launch(&mut self, id: usize, task: Task) -> Result<Launch, ExecutorError>;

    /// Says that the [`Executor::launch`] calls that follow, `ready` of them, are for tasks
    /// that became ready to start together; an executor that divides a fixed budget may
    /// share it among them. The default ignores it.
    fn offer(&mut self, ready: usize) {
        let _ = ready;
    }

    /// The next event, waiting up to `timeout` for one; `None` when none came.
    fn next_event(&mut self, timeout: Duration) -> Option<Event>;

    /// Stops every task it started: running stages are cancelled (they save what they can
    /// resume from), queued jobs are withdrawn. Their [`Event::Done`]s still come.
    fn cancel_all(&mut self);
}
