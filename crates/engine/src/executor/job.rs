//! A task run by another process: the files a cluster executor and its job share, and the
//! job's side (`cwm job run`).
//!
//! Each submitted task has a directory in the store, `artifacts/jobs/<key>/`:
//! - `spec.json` ([`JobSpec`]): the task, written by the executor before it submits;
//! - `result.json` ([`JobResult`]): how the task ended, written by the job (atomically);
//! - `progress.txt`: the stage's latest progress, one line, rewritten by the job;
//! - and the executor's own files (the batch script, the cluster's record and log).
//!
//! The job runs the task with [`run_task`] exactly as a local run does: the key's lock,
//! staging, and one atomic commit into the store. The scheduler learns the outputs from
//! `result.json`, or from the store itself.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cwm_stage::{InputArtifact, ParamValue, Params, ProgressEvent, ProgressSink, Threads};
use serde::{Deserialize, Serialize};

use super::in_process::{Surroundings, run_task};
use super::{Finished, StageFailure, Task};
use crate::key::KeyIngredients;
use crate::registry::Registry;
use crate::resources::Resources;
use crate::store::Store;

/// The version of [`JobSpec`] and [`JobResult`]; a job refuses a spec of another version.
pub const JOB_FORMAT: u32 = 1;

/// The task as `spec.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// [`JOB_FORMAT`].
    pub format: u32,
    /// The store's root directory.
    pub store: PathBuf,
    /// The instance.
    pub instance: String,
    /// Its kind.
    pub kind: String,
    /// Its params.
    pub params: BTreeMap<String, WireValue>,
    /// Its inputs.
    pub inputs: BTreeMap<String, Vec<WireInput>>,
    /// Its key.
    pub key: String,
    /// What its key was computed from.
    pub ingredients: KeyIngredients,
    /// `--force`.
    pub forced: bool,
    /// The threads the stage may use.
    pub threads: usize,
    /// What it asked for.
    pub resources: Resources,
    /// The pipeline's directory.
    pub base_dir: PathBuf,
}

/// A param value in JSON, keeping its type: floats as their shortest round-trip text, so
/// they come back bit for bit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float, as Rust's `{:?}` writes it.
    Float(String),
    /// A string.
    Str(String),
    /// A list.
    List(Vec<WireValue>),
}

impl WireValue {
    fn of(value: &ParamValue) -> Self {
        match value {
            ParamValue::Bool(b) => WireValue::Bool(*b),
            ParamValue::Int(i) => WireValue::Int(*i),
            ParamValue::Float(x) => WireValue::Float(format!("{x:?}")),
            ParamValue::Str(s) => WireValue::Str(s.clone()),
            ParamValue::List(items) => WireValue::List(items.iter().map(Self::of).collect()),
        }
    }

    fn value(&self) -> Result<ParamValue, String> {
        Ok(match self {
            WireValue::Bool(b) => ParamValue::Bool(*b),
            WireValue::Int(i) => ParamValue::Int(*i),
            WireValue::Float(x) => ParamValue::Float(
                x.parse()
                    .map_err(|_| format!("`{x}` is not a floating-point number"))?,
            ),
            WireValue::Str(s) => ParamValue::Str(s.clone()),
            WireValue::List(items) => {
                ParamValue::List(items.iter().map(Self::value).collect::<Result<_, _>>()?)
            }
        })
    }
}

/// An input artifact in JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireInput {
    /// The producing instance.
    pub producer: String,
    /// Its kind.
    pub producer_kind: String,
    /// Its params.
    pub producer_params: BTreeMap<String, WireValue>,
    /// The output name.
    pub output: String,
    /// The artifact's hash.
    pub hash: String,
    /// Its directory.
    pub path: PathBuf,
}

fn wire_params(params: &Params) -> BTreeMap<String, WireValue> {
    params
        .iter()
        .map(|(k, v)| (k.to_owned(), WireValue::of(v)))
        .collect()
}

fn params_of(wire: &BTreeMap<String, WireValue>) -> Result<Params, String> {
    let mut params = Params::new();
    for (name, value) in wire {
        params.insert(name.clone(), value.value()?);
    }
    Ok(params)
}

impl JobSpec {
    /// The spec of `task`, run with `threads` threads against the store at `store`.
    pub fn of(task: &Task, threads: usize, store: &Path) -> Self {
        let inputs = task
            .inputs
            .iter()
            .map(|(name, list)| {
                let list = list
                    .iter()
                    .map(|a| WireInput {
                        producer: a.producer.clone(),
                        producer_kind: a.producer_kind.clone(),
                        producer_params: wire_params(&a.producer_params),
                        output: a.output.clone(),
                        hash: a.hash.clone(),
                        path: a.path.clone(),
                    })
                    .collect();
                (name.clone(), list)
            })
            .collect();
        JobSpec {
            format: JOB_FORMAT,
            store: store.to_path_buf(),
            instance: task.instance.clone(),
            kind: task.kind.clone(),
            params: wire_params(&task.params),
            inputs,
            key: task.key.clone(),
            ingredients: task.ingredients.clone(),
            forced: task.forced,
            threads,
            resources: task.resources,
            base_dir: task.base_dir.clone(),
        }
    }

    /// The task again.
    ///
    /// # Errors
    /// A message when a value does not read back.
    pub fn task(&self) -> Result<Task, String> {
        let mut inputs = BTreeMap::new();
        for (name, list) in &self.inputs {
            let mut artifacts = Vec::with_capacity(list.len());
            for a in list {
                artifacts.push(InputArtifact {
                    producer: a.producer.clone(),
                    producer_kind: a.producer_kind.clone(),
                    producer_params: params_of(&a.producer_params)?,
                    output: a.output.clone(),
                    hash: a.hash.clone(),
                    path: a.path.clone(),
                });
            }
            inputs.insert(name.clone(), artifacts);
        }
        Ok(Task {
            instance: self.instance.clone(),
            kind: self.kind.clone(),
            params: params_of(&self.params)?,
            inputs,
            key: self.key.clone(),
            ingredients: self.ingredients.clone(),
            forced: self.forced,
            threads: Threads::Fixed(self.threads),
            resources: self.resources,
            base_dir: self.base_dir.clone(),
        })
    }
}

/// How a job's task ended, as `result.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum JobResult {
    /// Its outputs are in the store.
    Committed {
        /// Output name -> artifact hash.
        outputs: BTreeMap<String, String>,
        /// Another process had committed the key first.
        reused: bool,
        /// Seconds it ran.
        seconds: f64,
    },
    /// It failed.
    Failed {
        /// What went wrong.
        message: String,
        /// The last lines of the stage's log.
        log_tail: Vec<String>,
        /// Where the whole stage log was kept.
        saved_log: Option<PathBuf>,
    },
}

/// The files of one job's directory.
#[derive(Debug, Clone)]
pub struct JobFiles {
    /// `artifacts/jobs/<key>/`.
    pub dir: PathBuf,
}

impl JobFiles {
    /// The directory of the task with `key` in the store at `store_root`.
    pub fn new(store_root: &Path, key: &str) -> Self {
        JobFiles {
            dir: store_root.join("jobs").join(key),
        }
    }

    /// `spec.json`.
    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }

    /// `result.json`.
    pub fn result(&self) -> PathBuf {
        self.dir.join("result.json")
    }

    /// `progress.txt`.
    pub fn progress(&self) -> PathBuf {
        self.dir.join("progress.txt")
    }

    /// Writes `spec`.
    ///
    /// # Errors
    /// When the directory or file cannot be written.
    pub fn write_spec(&self, spec: &JobSpec) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let _ = fs::remove_file(self.result());
        let json = serde_json::to_vec_pretty(spec).map_err(io::Error::other)?;
        cwm_formats::fs::write_atomic(&self.spec(), &json)
    }

    /// The result, when the job wrote one that reads.
    pub fn read_result(&self) -> Option<JobResult> {
        let bytes = fs::read(self.result()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The latest progress line, if any.
    pub fn read_progress(&self) -> Option<String> {
        let text = fs::read_to_string(self.progress()).ok()?;
        let line = text.lines().next()?.trim();
        (!line.is_empty()).then(|| line.to_owned())
    }
}

/// Why `cwm job run` could not run its task at all.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The spec is unreadable or of another version.
    #[error("{path}: {message}")]
    Spec {
        /// The spec file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The store could not be opened or the result written.
    #[error("{0}")]
    Io(String),
}

/// What a job's task came to.
#[derive(Debug)]
pub enum JobEnd {
    /// Its outputs were committed.
    Committed,
    /// It failed; the message is in `result.json`.
    Failed(String),
    /// A signal cancelled it and the stage saved state to resume from; no result was
    /// written.
    Interrupted {
        /// The warning signal (USR1) came, not a plain termination: requeue the job.
        warned: bool,
    },
}

/// The signals a job listens to: `cancelled` is set by SIGTERM and SIGUSR1, `warned` by
/// SIGUSR1 alone (Slurm's `--signal` warning before the time limit or preemption).
#[derive(Debug, Clone, Default)]
pub struct JobSignals {
    /// Stop the stage.
    pub cancelled: Arc<AtomicBool>,
    /// The stop is a warning: save state and be requeued.
    pub warned: Arc<AtomicBool>,
}

/// Runs the task of the spec at `spec_path` with the kinds of `registry`; the stage gets the
/// GPUs `gpus`. Writes `result.json` unless a signal interrupted it.
///
/// # Errors
/// [`JobError`] when the spec cannot be read or the store opened.
pub fn run_job(
    spec_path: &Path,
    registry: &Registry,
    gpus: Vec<u32>,
    signals: &JobSignals,
) -> Result<JobEnd, JobError> {
    let spec_error = |message: String| JobError::Spec {
        path: spec_path.to_path_buf(),
        message,
    };
    let bytes = fs::read(spec_path).map_err(|e| spec_error(e.to_string()))?;
    let spec: JobSpec = serde_json::from_slice(&bytes).map_err(|e| spec_error(e.to_string()))?;
    if spec.format != JOB_FORMAT {
        return Err(spec_error(format!(
            "job format {} (this cwm reads {JOB_FORMAT}): run the same cwm on the compute nodes",
            spec.format
        )));
    }
    let task = spec.task().map_err(spec_error)?;
    let kind = registry
        .get(&task.kind)
        .ok_or_else(|| spec_error(format!("unknown stage kind `{}`", task.kind)))?;
    let store = Store::open(&spec.store).map_err(|e| JobError::Io(e.to_string()))?;
    let files = JobFiles::new(&spec.store, &spec.key);
    let _ = fs::remove_file(files.result());
    let with = Surroundings {
        sink: Arc::new(ProgressFile::new(files.progress())),
        threads: spec.threads.max(1),
        gpus,
        cancelled: Arc::clone(&signals.cancelled),
    };
    let started = Instant::now();
    let outcome = run_task(&task, kind, &store, with, &|| {
        println!("waiting for another cwm process computing the same key");
    });
    let interrupted = signals.cancelled.load(Ordering::SeqCst);
    let (result, end) = match outcome {
        Ok(finished) => {
            let (outputs, reused) = match finished {
                Finished::Ran(o) => (o, false),
                Finished::Reused(o) => (o, true),
            };
            let seconds = started.elapsed().as_secs_f64();
            let result = JobResult::Committed {
                outputs,
                reused,
                seconds,
            };
            (result, JobEnd::Committed)
        }
        Err(_) if interrupted && resumable(&store, &spec.key) => {
            let warned = signals.warned.load(Ordering::SeqCst);
            return Ok(JobEnd::Interrupted { warned });
        }
        Err(_) if interrupted && signals.warned.load(Ordering::SeqCst) => {
            let message = "warned of its time limit (or preemption), but the stage keeps no \
                           state to resume from, so the job was not requeued: raise its \
                           `resources: time`"
                .to_owned();
            let result = JobResult::Failed {
                message: message.clone(),
                log_tail: Vec::new(),
                saved_log: None,
            };
            (result, JobEnd::Failed(message))
        }
        Err(failure) => {
            let message = failure.to_string();
            (failed_result(failure), JobEnd::Failed(message))
        }
    };
    let json = serde_json::to_vec_pretty(&result).map_err(|e| JobError::Io(e.to_string()))?;
    cwm_formats::fs::write_atomic(&files.result(), &json)
        .map_err(|e| JobError::Io(format!("{}: {e}", files.result().display())))?;
    Ok(end)
}

/// Whether the stage left state to resume from in its partial directory.
fn resumable(store: &Store, key: &str) -> bool {
    fs::read_dir(store.partial_dir(key)).is_ok_and(|mut entries| entries.next().is_some())
}

/// The result of a failed task: its message without the log tail, which goes apart.
fn failed_result(failure: StageFailure) -> JobResult {
    match failure {
        StageFailure::Stage { fault, log } => JobResult::Failed {
            message: fault.to_string(),
            log_tail: log.lines,
            saved_log: log.saved,
        },
        other => JobResult::Failed {
            message: other.to_string(),
            log_tail: Vec::new(),
            saved_log: None,
        },
    }
}

/// Keeps the stage's latest progress in one line of a file, rewritten at most every few
/// seconds, for the executor to show.
struct ProgressFile {
    path: PathBuf,
    state: Mutex<ProgressLine>,
}

#[derive(Default)]
struct ProgressLine {
    done: u64,
    total: Option<u64>,
    message: String,
    written: Option<Instant>,
}

/// The least time between two writes of `progress.txt`.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl ProgressFile {
    fn new(path: PathBuf) -> Self {
        let _ = fs::remove_file(&path);
        ProgressFile {
            path,
            state: Mutex::new(ProgressLine::default()),
        }
    }
}

impl ProgressSink for ProgressFile {
    fn event(&self, event: ProgressEvent) {
        let Ok(mut line) = self.state.lock() else {
            return;
        };
        match event {
            ProgressEvent::Total(t) => line.total = Some(t),
            ProgressEvent::Inc(n) => line.done = line.done.saturating_add(n),
            ProgressEvent::Message(m) => line.message = m,
            ProgressEvent::Metrics(m) => {
                line.done = m.step;
                line.total = Some(m.total);
                line.message = format!("step {}/{}, loss {:.4}", m.step, m.total, m.loss);
            }
        }
        if line.written.is_some_and(|w| w.elapsed() < PROGRESS_EVERY) {
            return;
        }
        line.written = Some(Instant::now());
        let text = progress_text(line.done, line.total, &line.message);
        let _ = cwm_formats::fs::write_atomic(&self.path, text.as_bytes());
    }
}

/// `42% (420/1000) message`, or just the message when there is no total.
fn progress_text(done: u64, total: Option<u64>, message: &str) -> String {
    let mut text = match total {
        Some(t) if t > 0 => format!("{}% ({done}/{t})", done.saturating_mul(100) / t),
        _ => String::new(),
    };
    if !message.is_empty() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(message);
    }
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_task() -> Task {
        let mut params = Params::new();
        params.insert("lr", ParamValue::Float(0.1 + 0.2));
        params.insert("steps", ParamValue::Int(-3));
        params.insert("nan", ParamValue::Float(f64::NAN));
        params.insert(
            "list",
            ParamValue::List(vec![
                ParamValue::Bool(true),
                ParamValue::Str("x\n\"y".into()),
            ]),
        );
        let input = InputArtifact {
            producer: "p[a=1]".into(),
            producer_kind: "k".into(),
            producer_params: params.clone(),
            output: "out".into(),
            hash: "ab".repeat(32),
            path: PathBuf::from("/store/objects/abab"),
        };
        Task {
            instance: "train[a=1]".into(),
            kind: "train".into(),
            params,
            inputs: BTreeMap::from([("data".to_owned(), vec![input])]),
            key: "cd".repeat(32),
            ingredients: KeyIngredients::default(),
            forced: true,
            threads: Threads::All,
            resources: Resources {
                gpus: 1,
                ..Resources::default()
            },
            base_dir: PathBuf::from("/work/p"),
        }
    }

    #[test]
    fn a_spec_round_trips_params_bit_for_bit() {
        let task = sample_task();
        let spec = JobSpec::of(&task, 4, Path::new("/store"));
        let json = serde_json::to_string(&spec).unwrap();
        let back: JobSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
        let again = back.task().unwrap();
        // NaN != NaN, so compare canonical texts, which keep every bit of a float.
        assert_eq!(again.params.canonical(), task.params.canonical());
        let lr = again.params.float("lr").unwrap();
        assert_eq!(lr.to_bits(), (0.1f64 + 0.2).to_bits());
        assert_eq!(again.threads, Threads::Fixed(4));
        let input = &again.inputs["data"][0];
        assert_eq!(input.producer_params.canonical(), task.params.canonical());
        assert_eq!(input.hash, "ab".repeat(32));
        assert_eq!(again.resources.gpus, 1);
    }

    #[test]
    fn a_bad_float_in_a_spec_is_an_error() {
        let wire = WireValue::List(vec![WireValue::Float("1.2.3".into())]);
        assert!(wire.value().unwrap_err().contains("1.2.3"));
    }

    #[test]
    fn progress_lines_read_as_percent_and_message() {
        assert_eq!(
            progress_text(420, Some(1000), "epoch 2"),
            "42% (420/1000) epoch 2\n"
        );
        assert_eq!(progress_text(3, None, "parsing"), "parsing\n");
        assert_eq!(progress_text(0, Some(0), ""), "\n");
    }
}
