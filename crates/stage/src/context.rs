//! What a running stage is given: params, input artifacts, output directories,
//! a thread budget, the GPUs assigned to it, a log and a progress handle.

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

/// The environment variable that restricts and renumbers the GPUs CUDA sees.
const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// The CUDA device ordinal of the first of `gpus` when the process's `CUDA_VISIBLE_DEVICES`
/// is `visible` (`None`: unset): the position of the id in that comma-separated list (entries
/// trimmed; one that is not a number, such as a GPU UUID, matches no id), or the id itself when
/// the variable is unset. `None` when `gpus` is empty or the list lacks the id.
///
/// ```
/// use cwm_stage::cuda_ordinal_in;
///
/// assert_eq!(cuda_ordinal_in(&[5], Some("2,5")), Some(1));
/// assert_eq!(cuda_ordinal_in(&[5], None), Some(5));
/// assert_eq!(cuda_ordinal_in(&[3], Some("2,5")), None);
/// ```
pub fn cuda_ordinal_in(gpus: &[u32], visible: Option<&str>) -> Option<u32> {
    let &gpu = gpus.first()?;
    let Some(visible) = visible else {
        return Some(gpu);
    };
    let position = visible
        .split(',')
        .position(|entry| entry.trim().parse::<u32>() == Ok(gpu))?;
    u32::try_from(position).ok()
}

/// `requested` with a bare `cuda` made `cuda:<ordinal>` when there is an ordinal.
fn device_with_ordinal(requested: &str, ordinal: Option<u32>) -> String {
    match ordinal {
        Some(ordinal) if requested == "cuda" => format!("cuda:{ordinal}"),
        _ => requested.to_owned(),
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
    gpus: Vec<u32>,
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
            gpus: Vec::new(),
        }
    }

    /// The same context with these GPUs assigned (see [`StageContext::gpus`]).
    pub fn with_gpus(self, gpus: Vec<u32>) -> Self {
        Self { gpus, ..self }
    }

    /// The physical ids of the GPUs the executor assigned to this stage, as CUDA numbers
    /// them (the numbers `CUDA_VISIBLE_DEVICES` lists); empty when none is assigned or the
    /// assignment is not known. A kind claims GPUs with [`GpusDecl`](crate::GpusDecl).
    pub fn gpus(&self) -> &[u32] {
        &self.gpus
    }

    /// The CUDA device ordinal, within this process, of the first assigned GPU: its position
    /// in this process's `CUDA_VISIBLE_DEVICES` when that is set (`2,5` and GPU 5 give 1),
    /// else the id itself. `None` when no GPU is assigned or the visible list lacks it. See
    /// [`cuda_ordinal_in`].
    pub fn cuda_ordinal(&self) -> Option<u32> {
        let visible = std::env::var_os(CUDA_VISIBLE_DEVICES);
        let visible = visible.as_ref().map(|v| v.to_string_lossy());
        cuda_ordinal_in(&self.gpus, visible.as_deref())
    }

    /// The device a stage whose device param says `requested` runs on: `cuda:<ordinal>` (of
    /// [`StageContext::cuda_ordinal`]) when `requested` is `cuda` (no index) and a GPU is
    /// assigned; otherwise `requested` as written (`cpu`, or an explicit `cuda:N`).
    pub fn assigned_device(&self, requested: &str) -> String {
        device_with_ordinal(requested, self.cuda_ordinal())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> StageContext {
        StageContext::new(
            "t",
            Params::new(),
            BTreeMap::new(),
            BTreeMap::new(),
            PathBuf::from("."),
            1,
            Progress::disabled(),
            StageLog::discard(),
            Arc::new(AtomicBool::new(false)),
        )
    }

    #[test]
    fn gpus_are_none_until_assigned() {
        let ctx = context();
        assert!(ctx.gpus().is_empty());
        assert_eq!(
            ctx.cuda_ordinal(),
            None,
            "whatever CUDA_VISIBLE_DEVICES says"
        );
        assert_eq!(ctx.assigned_device("cuda"), "cuda");
        assert_eq!(ctx.assigned_device("cpu"), "cpu");
        let ctx = ctx.with_gpus(vec![5, 2]);
        assert_eq!(ctx.gpus(), [5, 2]);
        let ctx = ctx.with_partial_dir(PathBuf::from("p"));
        assert_eq!(ctx.gpus(), [5, 2], "kept by the other builders");
        assert_eq!(ctx.partial_dir(), Some(Path::new("p")));
    }

    #[test]
    fn the_ordinal_is_the_position_in_the_visible_list() {
        assert_eq!(cuda_ordinal_in(&[5], Some("2,5")), Some(1));
        assert_eq!(cuda_ordinal_in(&[2], Some("2,5")), Some(0));
        assert_eq!(
            cuda_ordinal_in(&[5, 2], Some("2,5")),
            Some(1),
            "the first GPU"
        );
        assert_eq!(cuda_ordinal_in(&[7], Some(" 3 , 7 ")), Some(1), "trimmed");
        assert_eq!(cuda_ordinal_in(&[3], Some("2,5")), None, "not visible");
        assert_eq!(cuda_ordinal_in(&[0], Some("")), None, "nothing visible");
        assert_eq!(
            cuda_ordinal_in(&[1], Some("GPU-0a1b,1")),
            Some(1),
            "a UUID entry still takes its place"
        );
        assert_eq!(cuda_ordinal_in(&[], Some("0,1")), None, "no GPU assigned");
    }

    #[test]
    fn without_a_visible_list_the_ordinal_is_the_id() {
        assert_eq!(cuda_ordinal_in(&[3], None), Some(3));
        assert_eq!(cuda_ordinal_in(&[0, 1], None), Some(0));
        assert_eq!(cuda_ordinal_in(&[], None), None);
    }

    #[test]
    fn only_a_bare_cuda_takes_the_assigned_ordinal() {
        assert_eq!(device_with_ordinal("cuda", Some(1)), "cuda:1");
        assert_eq!(device_with_ordinal("cuda", None), "cuda");
        assert_eq!(device_with_ordinal("cuda:0", Some(1)), "cuda:0", "explicit");
        assert_eq!(device_with_ordinal("cpu", Some(1)), "cpu");
    }
}
