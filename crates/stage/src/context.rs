//! What a running stage is given: params, input artifacts, output directories,
//! a thread budget, a log and a progress handle.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{Params, Progress, StageError};

/// One artifact bound to an input of the running stage.
#[derive(Debug, Clone)]
pub struct InputArtifact {
    /// The instance that produced it, e.g. `train[arch=slice,size=d128]`.
    pub producer: String,
    /// The producer's stage kind.
    pub producer_kind: String,
    /// The producer's parameters (so a report can tell matrix cells apart).
    pub producer_params: Params,
    /// The output name within the producer (`out` for single-output kinds).
    pub output: String,
    /// The artifact's content hash.
    pub hash: String,
    /// The directory holding the artifact's files. Treat it as read-only.
    pub path: PathBuf,
}

/// The stage's log: kept in every output artifact's manifest directory.
#[derive(Debug)]
pub struct StageLog {
    file: Mutex<Option<File>>,
}

impl StageLog {
    /// A log writing to `file`.
    pub fn to_file(file: File) -> Self {
        Self {
            file: Mutex::new(Some(file)),
        }
    }

    /// A log that discards everything.
    pub fn discard() -> Self {
        Self {
            file: Mutex::new(None),
        }
    }

    /// A second handle on the log file, for a child process's stdout and
    /// stderr; `None` when the log discards.
    pub fn try_clone_file(&self) -> Option<File> {
        let guard = self.file.lock().ok()?;
        guard.as_ref()?.try_clone().ok()
    }

    /// Appends one line. Logging never fails a stage: write errors are ignored.
    pub fn line(&self, line: impl AsRef<str>) {
        if let Ok(mut guard) = self.file.lock()
            && let Some(file) = guard.as_mut()
        {
            let _ = writeln!(file, "{}", line.as_ref());
        }
    }
}

/// Everything a running stage may use. Built by the executor.
#[derive(Debug)]
pub struct StageContext {
    instance: String,
    params: Params,
    inputs: BTreeMap<String, Vec<InputArtifact>>,
    outputs: BTreeMap<String, PathBuf>,
    base_dir: PathBuf,
    threads: usize,
    progress: Progress,
    log: StageLog,
    cancelled: Arc<AtomicBool>,
    partial: Option<PathBuf>,
}

impl StageContext {
    /// Builds a context. `outputs` maps each declared output name to an empty,
    /// writable directory; `base_dir` is the pipeline file's directory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        instance: impl Into<String>,
        params: Params,
        inputs: BTreeMap<String, Vec<InputArtifact>>,
        outputs: BTreeMap<String, PathBuf>,
        base_dir: PathBuf,
        threads: usize,
        progress: Progress,
        log: StageLog,
        cancelled: Arc<AtomicBool>,
    ) -> Self {
        Self {
            instance: instance.into(),
            params,
            inputs,
            outputs,
            base_dir,
            threads: threads.max(1),
            progress,
            log,
            cancelled,
            partial: None,
        }
    }

    /// The same context with a partial-state directory (see [`StageContext::partial_dir`]).
    pub fn with_partial_dir(self, dir: PathBuf) -> Self {
        Self {
            partial: Some(dir),
            ..self
        }
    }

    /// Where a resumable stage keeps its state between interrupted runs: a directory the
    /// store owns for this instance's cache key, which need not exist yet (create it on first
    /// use). It survives a failed or killed run, so the next run with the same key can resume;
    /// the executor removes it once the stage's result is committed, and `cwm gc` removes it
    /// when no stale instance of the pipeline has this key any more. `None` when the stage runs
    /// outside a pipeline, where nothing resumes.
    pub fn partial_dir(&self) -> Option<&Path> {
        self.partial.as_deref()
    }

    /// The instance name, e.g. `parse` or `train[arch=slice,size=d128]`.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The validated parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// All inputs by name.
    pub fn inputs(&self) -> &BTreeMap<String, Vec<InputArtifact>> {
        &self.inputs
    }

    /// The artifacts bound to input `name` (empty if it is optional and absent).
    pub fn input_list(&self, name: &str) -> &[InputArtifact] {
        self.inputs.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The directory of input `name`, which must be bound to exactly one artifact.
    pub fn input(&self, name: &str) -> Result<&Path, StageError> {
        match self.input_list(name) {
            [one] => Ok(&one.path),
            [] => Err(StageError::input(name, "is not connected")),
            many => Err(StageError::input(
                name,
                format!("expected one artifact, got {}", many.len()),
            )),
        }
    }

    /// The empty directory to write output `name` into.
    pub fn output(&self, name: &str) -> Result<&Path, StageError> {
        self.outputs
            .get(name)
            .map(PathBuf::as_path)
            .ok_or_else(|| StageError::failed(format!("stage has no output named `{name}`")))
    }

    /// All output directories by name.
    pub fn outputs(&self) -> &BTreeMap<String, PathBuf> {
        &self.outputs
    }

    /// Resolves a user-given path (a param) against the pipeline file's directory.
    pub fn resolve_path(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }

    /// The pipeline file's directory.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// How many threads this stage may use (build a rayon pool of this size).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The progress handle.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The stage's log.
    pub fn log(&self) -> &StageLog {
        &self.log
    }

    /// Whether the executor asked the stage to stop; long stages should check
    /// this between units of work and return [`StageError::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}
