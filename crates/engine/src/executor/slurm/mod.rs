//! The Slurm executor: each task becomes a Slurm job that runs `cwm job run` on a compute
//! node against the same store, on a file system both machines share.
//!
//! - **Submission**: the task's spec, a batch script and `sbatch` options from its
//!   `resources:` and the pipeline's `executor: slurm:` settings ([`submit`]); the job id is
//!   recorded in the store ([`records`]) before `launch` returns. At most `max_jobs` are in
//!   flight. Before the first submission a probe job checks that a compute node runs this
//!   `cwm` and sees this store ([`probe`]).
//! - **Status**: one `squeue` call per poll for every job in flight, never one per job, and
//!   at most one poll per `poll` interval. A job that has left `squeue`'s view is read from
//!   its result file, then from `scontrol` ([`state`]).
//! - **Time limits and preemption**: jobs go with `--requeue --signal=B:USR1@warn`; on the
//!   warning `cwm job run` cancels its stage (which saves its state) and requeues itself, and
//!   the requeued job resumes exactly.
//! - **Nothing lost, nothing twice**: `cancel_all` (Ctrl-C) cancels exactly the jobs this
//!   executor submitted or adopted; a later `cwm run` adopts the recorded jobs of a run that
//!   died instead of submitting them again.

pub mod cli;
pub mod probe;
pub mod records;
pub mod state;
pub mod submit;

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use cli::SlurmCli;
use records::JobRecord;
use state::{Ended, JobState};
use submit::JobOptions;

use super::job::{JobFiles, JobResult, JobSpec};
use super::settings::SlurmSettings;
use super::{Event, Executor, ExecutorError, Finished, Launch, LogTail, StageFailure, Task};
use crate::store::Store;
use cwm_stage::Threads;

/// How soon after `cancel_all` the next poll comes, whatever the poll interval.
const POLL_AFTER_CANCEL: Duration = Duration::from_secs(1);

/// One job in flight.
#[derive(Debug)]
struct Tracked {
    /// The scheduler's id of its task.
    id: usize,
    record: JobRecord,
    files: JobFiles,
    state: JobState,
    /// When this run started tracking it.
    since: Instant,
    /// The last note shown for it.
    note: String,
    /// Polls in a row that did not find it in `squeue`.
    missing: u32,
}

/// What the executor did, for the closing summary and the scale figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlurmStats {
    /// Jobs submitted.
    pub submitted: u64,
    /// Jobs of an earlier run waited for instead of submitted again.
    pub adopted: u64,
    /// Status polls (one `squeue` call each).
    pub polls: u64,
    /// Seconds from the first submission to the last.
    pub submit_seconds: f64,
    /// Slurm commands called.
    pub calls: cli::Calls,
}

/// Runs tasks as Slurm jobs.
pub struct SlurmExecutor<'a> {
    settings: SlurmSettings,
    store: &'a Store,
    cwm: PathBuf,
    cli: SlurmCli,
    tracked: Vec<Tracked>,
    events: VecDeque<Event>,
    next_poll: Instant,
    probed: bool,
    /// Recorded jobs of earlier runs still queued or running, by key (read at the first
    /// launch).
    adoptable: Option<BTreeMap<String, (JobRecord, JobState)>>,
    cancelled: bool,
    stats: SlurmStats,
    first_submit: Option<Instant>,
}

impl<'a> SlurmExecutor<'a> {
    /// An executor with `settings` on `store`; the jobs run `settings.cwm`, else `this_cwm`.
    pub fn new(settings: SlurmSettings, store: &'a Store, this_cwm: PathBuf) -> Self {
        let cwm = settings.cwm.clone().unwrap_or(this_cwm);
        SlurmExecutor {
            settings,
            store,
            cwm,
            cli: SlurmCli::default(),
            tracked: Vec::new(),
            events: VecDeque::new(),
            next_poll: Instant::now(),
            probed: false,
            adoptable: None,
            cancelled: false,
            stats: SlurmStats::default(),
            first_submit: None,
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> SlurmStats {
        SlurmStats {
            calls: self.cli.calls,
            ..self.stats
        }
    }

    /// Reads the job records left by earlier runs: those whose jobs are still queued or
    /// running can be adopted; the others are forgotten. One `squeue` call.
    fn scan_records(&mut self) -> Result<(), ExecutorError> {
        if self.adoptable.is_some() {
            return Ok(());
        }
        let records = records::all(self.store.root());
        let ids: Vec<u64> = records.iter().map(|r| r.job_id).collect();
        let states = self.cli.job_states(&ids)?;
        let mut live = BTreeMap::new();
        for record in records {
            let files = JobFiles::new(self.store.root(), &record.key);
            match states.get(&record.job_id) {
                Some(state @ (JobState::Pending(_) | JobState::Running(_))) => {
                    live.insert(record.key.clone(), (record, state.clone()));
                }
                _ => records::forget(&files),
            }
        }
        self.adoptable = Some(live);
        Ok(())
    }

    /// Starts tracking a job of an earlier run for task `id`.
    fn adopt(&mut self, id: usize, record: JobRecord, state: JobState) {
        let files = JobFiles::new(self.store.root(), &record.key);
        let note = format!(
            "Slurm job {} from an earlier cwm run is {}: waiting for it",
            record.job_id,
            state.describe()
        );
        self.events.push_back(Event::Notice(id, note.clone()));
        self.stats.adopted += 1;
        self.tracked.push(Tracked {
            id,
            record,
            files,
            state,
            since: Instant::now(),
            note,
            missing: 0,
        });
    }

    /// Submits `task`; `Err(message)` when `sbatch` refuses it.
    fn submit(&mut self, id: usize, task: &Task) -> Result<Result<(), String>, ExecutorError> {
        let files = JobFiles::new(self.store.root(), &task.key);
        let cpus = self.cpus(task);
        let io = |e: std::io::Error| {
            ExecutorError::Cluster(format!("writing {}: {e}", files.dir.display()))
        };
        files
            .write_spec(&JobSpec::of(task, cpus as usize, self.store.root()))
            .map_err(io)?;
        let script = files.dir.join("job.sh");
        let text = submit::batch_script(&self.cwm, &files.spec(), &task.instance);
        cwm_formats::fs::write_atomic(&script, text.as_bytes()).map_err(io)?;
        let log = files.dir.join("slurm-%j.out");
        let options = JobOptions {
            instance: &task.instance,
            cpus,
            resources: &task.resources,
            log: &log,
            chdir: &task.base_dir,
        };
        let mut args = options.args(&self.settings);
        args.push(script.display().to_string());
        let out = self.cli.call("sbatch", &args)?;
        let job_id = out
            .stdout
            .trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok());
        let Some(job_id) = job_id.filter(|_| out.ok) else {
            return Ok(Err(format!(
                "sbatch refused the job ({}): {}; see `resources:` and `executor: slurm:` in \
                 docs/cluster.md",
                options.describe(),
                out.stderr.trim().lines().last().unwrap_or("no message")
            )));
        };
        let record = JobRecord::new(job_id, &task.instance, &task.key, options.describe());
        records::write(&files, &record).map_err(io)?;
        self.stats.submitted += 1;
        let first = *self.first_submit.get_or_insert_with(Instant::now);
        self.stats.submit_seconds = first.elapsed().as_secs_f64();
        self.tracked.push(Tracked {
            id,
            note: String::new(),
            state: JobState::Pending(String::new()),
            record,
            files,
            since: Instant::now(),
            missing: 0,
        });
        Ok(Ok(()))
    }

    /// The CPUs a task's job asks for: its `resources.cpus`, else its kind's fixed thread
    /// claim, else `cpus_for_all`.
    fn cpus(&self, task: &Task) -> u32 {
        match (task.resources.cpus, task.threads) {
            (Some(cpus), _) => cpus,
            (None, Threads::Fixed(t)) => u32::try_from(t).unwrap_or(u32::MAX).max(1),
            (None, Threads::All) => self.settings.cpus_for_all,
        }
    }

    /// One status poll: one `squeue` call for every job in flight; settles those that ended.
    fn poll(&mut self) -> Result<(), ExecutorError> {
        self.stats.polls += 1;
        let ids: Vec<u64> = self.tracked.iter().map(|t| t.record.job_id).collect();
        let states = self.cli.job_states(&ids)?;
        let mut i = 0;
        while i < self.tracked.len() {
            let job_id = self.tracked[i].record.job_id;
            let state = match states.get(&job_id) {
                Some(state) => Some(state.clone()),
                None => self.missing_state(i)?,
            };
            match state {
                Some(JobState::Ended(ended)) => {
                    let tracked = self.tracked.swap_remove(i);
                    self.settle(tracked, &ended);
                }
                Some(state) => {
                    self.update(i, state);
                    i += 1;
                }
                None => i += 1,
            }
        }
        Ok(())
    }

    /// The state of tracked job `i`, which `squeue` did not list: its result file when it
    /// wrote one, else (from the second miss on) `scontrol`'s word; `None` to ask again.
    fn missing_state(&mut self, i: usize) -> Result<Option<JobState>, ExecutorError> {
        let tracked = &mut self.tracked[i];
        tracked.missing += 1;
        if tracked.files.read_result().is_some() {
            return Ok(Some(JobState::Ended(Ended::Completed)));
        }
        if tracked.missing < 2 {
            return Ok(None);
        }
        let job_id = tracked.record.job_id;
        let args = vec![
            "show".to_owned(),
            "job".to_owned(),
            "--oneliner".to_owned(),
            job_id.to_string(),
        ];
        let out = self.cli.call("scontrol", &args)?;
        Ok(Some(
            out.stdout
                .lines()
                .find_map(state::parse_scontrol)
                .unwrap_or_else(|| JobState::Ended(Ended::Other("unknown to Slurm".into()))),
        ))
    }

    /// Shows a job's new state, or its stage's latest progress while it runs.
    fn update(&mut self, i: usize, state: JobState) {
        let tracked = &mut self.tracked[i];
        let job_id = tracked.record.job_id;
        let note = match (&state, tracked.files.read_progress()) {
            (JobState::Running(_), Some(progress)) => progress,
            _ => format!("Slurm job {job_id}: {}", state.describe()),
        };
        tracked.state = state;
        if note != tracked.note {
            tracked.note.clone_from(&note);
            self.events.push_back(Event::Note(tracked.id, note));
        }
    }

    /// Reports how an ended job's task came out and forgets its record.
    fn settle(&mut self, tracked: Tracked, ended: &Ended) {
        records::forget(&tracked.files);
        let result = match tracked.files.read_result() {
            Some(JobResult::Committed {
                outputs, reused, ..
            }) => Ok(if reused {
                Finished::Reused(outputs)
            } else {
                Finished::Ran(outputs)
            }),
            Some(JobResult::Failed {
                message,
                log_tail,
                saved_log,
            }) => Err(StageFailure::Job {
                cause: format!("{message} (Slurm job {})", tracked.record.job_id),
                log: LogTail {
                    lines: log_tail,
                    saved: saved_log,
                },
            }),
            None => self.without_result(&tracked, ended),
        };
        if result.is_ok() {
            let _ = fs::remove_dir_all(&tracked.files.dir);
        }
        let elapsed = tracked.since.elapsed();
        self.events
            .push_back(Event::Done(tracked.id, result, elapsed));
    }

    /// A job that ended without writing a result: its outputs if the store has them (a
    /// result file lost), else Slurm's cause with the end of the job's log.
    fn without_result(&self, tracked: &Tracked, ended: &Ended) -> Result<Finished, StageFailure> {
        if let Some(outputs) = self.store.intact_outputs(&tracked.record.key) {
            return Ok(Finished::Reused(outputs));
        }
        let record = &tracked.record;
        let log_path = records::log_path(&tracked.files, record.job_id);
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        let mut cause = ended.cause(record.job_id, &record.resources, &log);
        if self.cancelled && *ended == Ended::Cancelled {
            cause = format!(
                "Slurm job {} was cancelled by this run's interrupt",
                record.job_id
            );
        }
        let saved = log_path.exists().then_some(log_path);
        Err(StageFailure::Job {
            cause,
            log: LogTail::of(&log, saved),
        })
    }
}

/// A recorded job and what Slurm says of it now.
#[derive(Debug, Clone)]
pub struct JobInFlight {
    /// The record in the store.
    pub record: JobRecord,
    /// Its state, or why it is unknown.
    pub state: Result<JobState, String>,
}

/// The jobs the store records as submitted and not yet settled, with their states from one
/// `squeue` call (none when nothing is recorded). A job Slurm no longer lists shows as
/// ended: the next `cwm run` settles it.
pub fn jobs_in_flight(store: &Store) -> Vec<JobInFlight> {
    let recorded = records::all(store.root());
    if recorded.is_empty() {
        return Vec::new();
    }
    let ids: Vec<u64> = recorded.iter().map(|r| r.job_id).collect();
    let states = SlurmCli::default()
        .job_states(&ids)
        .map_err(|e| e.to_string());
    recorded
        .into_iter()
        .map(|record| {
            let state = match &states {
                Ok(states) => Ok(states
                    .get(&record.job_id)
                    .cloned()
                    .unwrap_or(JobState::Ended(Ended::Other("no longer listed".into())))),
                Err(e) => Err(e.clone()),
            };
            JobInFlight { record, state }
        })
        .collect()
}

impl Executor for SlurmExecutor<'_> {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn launch(&mut self, id: usize, task: Task) -> Result<Launch, ExecutorError> {
        self.scan_records()?;
        if let Some((record, state)) = self
            .adoptable
            .as_mut()
            .and_then(|live| live.remove(&task.key))
        {
            self.adopt(id, record, state);
            return Ok(Launch::Started);
        }
        if self.cancelled || self.tracked.len() >= self.settings.max_jobs {
            return Ok(Launch::Busy(Box::new(task)));
        }
        if !self.probed {
            let settings = self.settings.clone();
            probe::run(&mut self.cli, &settings, &self.cwm, self.store.root())?;
            self.probed = true;
        }
        Ok(match self.submit(id, &task)? {
            Ok(()) => Launch::Started,
            Err(refused) => Launch::Rejected(refused),
        })
    }

    fn next_event(&mut self, timeout: Duration) -> Option<Event> {
        if let Some(event) = self.events.pop_front() {
            return Some(event);
        }
        let now = Instant::now();
        if now < self.next_poll {
            thread::sleep(timeout.min(self.next_poll - now));
            if Instant::now() < self.next_poll {
                return None;
            }
        }
        // A failed poll is retried at the next interval; the run goes on waiting.
        if !self.tracked.is_empty()
            && let Err(e) = self.poll()
        {
            let ids: Vec<usize> = self.tracked.iter().map(|t| t.id).collect();
            for id in ids {
                self.events
                    .push_back(Event::Note(id, format!("status unknown: {e}")));
            }
        }
        let wait = if self.cancelled {
            POLL_AFTER_CANCEL.min(self.settings.poll)
        } else {
            self.settings.poll
        };
        self.next_poll = Instant::now() + wait;
        self.events.pop_front()
    }

    fn cancel_all(&mut self) {
        self.cancelled = true;
        self.next_poll = Instant::now() + POLL_AFTER_CANCEL.min(self.settings.poll);
        let ids: Vec<String> = self
            .tracked
            .iter()
            .map(|t| t.record.job_id.to_string())
            .collect();
        if !ids.is_empty() {
            let _ = self.cli.call("scancel", &ids);
        }
    }
}
