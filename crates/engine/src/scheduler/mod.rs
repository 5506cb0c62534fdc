//! Running a plan: decide fresh or stale, run what is stale, commit, lock.
//!
//! The flow, step by step:
//! 1. The caller selects instances (`--only`, `--from`) and their ancestors.
//! 2. The main thread walks the plan in order. An instance becomes *ready*
//!    when every producer has finished; its key is computed from its
//!    producers' output *content* hashes (so an unchanged output stops
//!    reruns downstream: early cutoff).
//! 3. A ready instance whose key has a finished, intact record in the store
//!    is `cached`. Otherwise it is launched on a worker thread when enough
//!    thread slots are free (`-j`, and the kind's thread claim).
//! 4. A worker stages empty output directories, runs the stage, and commits
//!    the outputs to the store; it reports progress and its result to the
//!    main thread through one channel. Only the main thread prints.
//! 5. A failure marks everything downstream `skipped` and, unless
//!    `--keep-going`, stops new launches (running stages finish).
//! 6. Finally `cwm.lock` is updated for every finished instance and the stat
//!    cache is saved.
//!
//! Not yet polished: stages run in-process, so a stage that ignores
//! cancellation keeps a slot until it ends.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, OpenOptions};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::Scope;
use std::time::{Duration, Instant, SystemTime};

use cwm_stage::{
    InputArtifact, Params, Progress, ProgressEvent, ProgressSink, StageContext, StageError,
    StageKind, StageLog, Threads,
};

use crate::display::{Display, Settled, human_duration};
use crate::freshness::{self, Freshness, IngredientsError, Outputs};
use crate::key::KeyIngredients;
use crate::lockfile::{LockEntry, LockError, LockFile};
use crate::pipeline::Instance;
use crate::plan::{Plan, UnknownSelector};
use crate::reason::{self, StaleReason};
use crate::registry::Registry;
use crate::store::{CommitInfo, Staging, Store, StoreError};

/// Options of `cwm run`.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Instances to run (with what they need); all when empty and `from` is unset.
    pub only: Vec<String>,
    /// Run this instance and everything downstream of it.
    pub from: Option<String>,
    /// Rerun these even if cached.
    pub force: Vec<String>,
    /// Only say what would run.
    pub dry_run: bool,
    /// Thread slots shared by running stages.
    pub jobs: usize,
    /// Keep launching independent stages after a failure.
    pub keep_going: bool,
}

/// What happened to one instance.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Its result was already in the store.
    Cached,
    /// It ran for this long.
    Ran(Duration),
    /// It failed.
    Failed(StageFailure),
    /// It did not run.
    Skipped(SkipReason),
    /// `--dry-run`: it would run, for these reasons.
    WouldRun(Vec<StaleReason>),
}

impl Outcome {
    /// How it counts in the display's tally.
    fn settled(&self) -> Settled {
        match self {
            Outcome::Cached => Settled::Cached,
            Outcome::Ran(_) => Settled::Ran,
            Outcome::Failed(_) => Settled::Failed,
            Outcome::Skipped(_) => Settled::Skipped,
            Outcome::WouldRun(_) => Settled::WouldRun,
        }
    }

    /// The line a run prints for instance `name` with this outcome.
    fn line(&self, name: &str) -> String {
        match self {
            Outcome::Cached => format!("cached  {name}"),
            Outcome::Ran(elapsed) => format!("ran     {name} ({})", human_duration(*elapsed)),
            Outcome::Failed(failure) => format!("failed  {name}: {failure}"),
            Outcome::Skipped(why) => format!("skipped {name} ({why})"),
            Outcome::WouldRun(reasons) => format!("would run {name}: {}", reason::joined(reasons)),
        }
    }
}

/// Why an instance did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SkipReason {
    /// This producer failed or was skipped.
    ProducerUnfinished(String),
    /// A failure stopped the run from launching more stages.
    RunStopped,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::ProducerUnfinished(producer) => write!(f, "`{producer}` did not finish"),
            SkipReason::RunStopped => f.write_str("the run stopped after a failure"),
        }
    }
}

/// Why one stage failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageFailure {
    /// Its key could not be computed.
    #[error(transparent)]
    Key(#[from] IngredientsError),
    /// The store could not lock its key, stage its outputs or commit them.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stage itself failed; its log's last lines follow the error.
    #[error("{fault}{log}")]
    Stage {
        /// What went wrong.
        fault: StageFault,
        /// The end of its log.
        log: LogTail,
    },
}

/// How a stage's own code failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StageFault {
    /// It returned an error.
    #[error(transparent)]
    Error(#[from] StageError),
    /// It panicked with this message.
    #[error("stage panicked: {0}")]
    Panicked(String),
}

/// The last lines of a failed stage's log and where the whole log was kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogTail {
    /// Up to the last 5 lines, in order.
    pub lines: Vec<String>,
    /// `artifacts/failed/<instance>.log`, if it could be written.
    pub saved: Option<PathBuf>,
}

/// How many log lines a failure shows.
const LOG_TAIL_LINES: usize = 5;

impl LogTail {
    fn of(log: &str, saved: Option<PathBuf>) -> Self {
        let mut lines: Vec<String> = log
            .lines()
            .rev()
            .take(LOG_TAIL_LINES)
            .map(str::to_owned)
            .collect();
        lines.reverse();
        LogTail { lines, saved }
    }
}

/// Indented lines under the error, as `cwm run` prints them.
impl fmt::Display for LogTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.lines.is_empty() {
            f.write_str("\n        log tail:")?;
            for line in &self.lines {
                write!(f, "\n        | {line}")?;
            }
        }
        if let Some(path) = &self.saved {
            write!(f, "\n        full log: {}", path.display())?;
        }
        Ok(())
    }
}

/// Why a run could not start or go on. A stage's own failure is not one:
/// it is that stage's outcome in the [`RunReport`].
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--only`, `--from` or `--force` names no instance.
    #[error(transparent)]
    Select(#[from] UnknownSelector),
    /// The store could not be locked, or the run not recorded.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `cwm.lock` could not be read or written.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The plan uses a kind the registry lacks: the caller loaded the
    /// pipeline with another registry (a bug, never a stage to skip).
    #[error("stage `{stage}` uses kind `{kind}`, which this registry does not have")]
    UnknownKind {
        /// The instance.
        stage: String,
        /// Its kind.
        kind: String,
    },
}

/// The result of a run, per selected instance in execution order.
#[derive(Debug, Default)]
pub struct RunReport {
    /// (instance name, outcome).
    pub(crate) outcomes: Vec<(String, Outcome)>,
}

impl RunReport {
    /// Whether any instance failed.
    pub fn failed(&self) -> bool {
        self.outcomes
            .iter()
            .any(|(_, o)| matches!(o, Outcome::Failed(_)))
    }

    /// The JSON summary: arrays `ran`, `cached`, `failed`, `skipped` of names
    /// (and `would_run` for a dry run).
    pub fn to_json(&self, dry_run: bool) -> serde_json::Value {
        let pick = |f: &dyn Fn(&Outcome) -> bool| -> Vec<&str> {
            self.outcomes
                .iter()
                .filter(|(_, o)| f(o))
                .map(|(n, _)| n.as_str())
                .collect()
        };
        let mut value = serde_json::json!({
            "ran": pick(&|o| matches!(o, Outcome::Ran(_))),
            "cached": pick(&|o| matches!(o, Outcome::Cached)),
            "failed": pick(&|o| matches!(o, Outcome::Failed(_))),
            "skipped": pick(&|o| matches!(o, Outcome::Skipped(_))),
        });
        if dry_run {
            value["would_run"] = serde_json::json!(pick(&|o| matches!(o, Outcome::WouldRun(_))));
        }
        value
    }
}

/// Everything a run works with.
pub struct Executor<'a> {
    /// The ordered pipeline.
    pub plan: &'a Plan,
    /// Known stage kinds.
    pub registry: &'a Registry,
    /// The artifact store.
    pub store: &'a Store,
}

impl Executor<'_> {
    /// Runs the selected part of the plan. Errors are per-stage outcomes; an
    /// `Err` here means the run could not start (bad selector, unreadable lock).
    pub fn run(&self, options: &RunOptions, display: &mut Display) -> Result<RunReport, RunError> {
        let selected = self.selection(options)?;
        let forced = self.plan.resolve(&options.force)?.into_iter().collect();
        // gc waits while runs hold this.
        let _store_lock = if options.dry_run {
            None
        } else {
            Some(self.store.lock_shared()?)
        };
        let lock_path = LockFile::path_for(&self.plan.pipeline.base_dir);
        let lock = LockFile::read(&lock_path)?;
        display.begin(selected.len());
        let mut run = Run::new(self, options, display, lock, selected, forced);
        if let Err(e) = run.schedule() {
            run.display.end(false);
            return Err(e);
        }
        run.skip_unstarted();
        run.display.end(true);
        run.finish(&lock_path)
    }

    /// The instances `--only` and `--from` select (all by default) and
    /// everything they need, in execution order.
    fn selection(&self, options: &RunOptions) -> Result<Vec<usize>, UnknownSelector> {
        let plan = self.plan;
        let only = plan.resolve(&options.only)?;
        let targets = match &options.from {
            Some(from) => {
                let downstream = plan.with_descendants(&plan.resolve(std::slice::from_ref(from))?);
                if options.only.is_empty() {
                    downstream
                } else {
                    let only: BTreeSet<usize> = only.into_iter().collect();
                    downstream
                        .into_iter()
                        .filter(|i| only.contains(i))
                        .collect()
                }
            }
            None if options.only.is_empty() => plan.order.clone(),
            None => only,
        };
        Ok(plan.with_ancestors(&targets))
    }
}

/// Where one planned instance stands.
#[derive(Debug)]
enum State {
    /// Not decided yet: its producers are unfinished, or it waits for slots.
    Waiting,
    /// On a worker, holding this many thread slots.
    Running {
        claim: usize,
    },
    /// Finished (ran or cached) with these outputs.
    Done(Outputs),
    Failed,
    Skipped,
    /// `--dry-run`: would run.
    WouldRun,
}

/// One row of the job table: a planned instance and what the run knows of it.
#[derive(Debug)]
struct Job {
    state: State,
    /// Its key's ingredients, once computed: cached, launched, or (while still
    /// `Waiting`) found stale and waiting for thread slots, so later scheduling
    /// passes launch it without hashing its inputs and checking the store again.
    ingredients: Option<KeyIngredients>,
    /// What happened, once settled.
    outcome: Option<Outcome>,
}

impl Job {
    fn outputs(&self) -> Option<&Outputs> {
        match &self.state {
            State::Done(outputs) => Some(outputs),
            _ => None,
        }
    }

    /// Finished, with its key: what `cwm.lock` and the run record keep.
    fn finished(&self) -> Option<(&Outputs, &KeyIngredients)> {
        Some((self.outputs()?, self.ingredients.as_ref()?))
    }
}

/// What the main thread decides for a waiting instance.
enum Decision<'a> {
    /// Not now: a producer is unfinished, slots are short, or launching stopped.
    Wait,
    /// Settled without a worker: cached, would run, skipped or failed.
    Settled,
    /// Start it on a worker.
    Launch(Box<Worker<'a>>),
}

/// How long the main thread waits for a worker's message before it lets the
/// display print what fell due (plain progress lines of silent stages).
const TICK: Duration = Duration::from_secs(1);

/// A message from a worker to the main thread.
enum Msg {
    Progress(usize, ProgressEvent),
    /// The stage waits for another process that computes the same key.
    Waiting(usize),
    Done(usize, Result<Finished, StageFailure>, Duration),
}

/// How a launched stage ended well.
enum Finished {
    /// It ran and its outputs were committed.
    Ran(Outputs),
    /// Another process committed the same key while this one waited for it.
    Reused(Outputs),
}

/// One run, driven by the main thread: the job table (indexed like the
/// plan's instances) and the thread slots. Only the main thread prints.
struct Run<'r, 'a> {
    exec: &'r Executor<'a>,
    options: &'r RunOptions,
    display: &'r mut Display,
    lock: LockFile,
    /// What runs, in execution order.
    selected: Vec<usize>,
    forced: BTreeSet<usize>,
    jobs: Vec<Job>,
    /// All thread slots (`-j`), and those no running stage holds.
    slots: usize,
    free_slots: usize,
    /// Set after a failure without `--keep-going`.
    stop_launching: bool,
    cancelled: Arc<AtomicBool>,
}

impl<'r, 'a> Run<'r, 'a> {
    fn new(
        exec: &'r Executor<'a>,
        options: &'r RunOptions,
        display: &'r mut Display,
        lock: LockFile,
        selected: Vec<usize>,
        forced: BTreeSet<usize>,
    ) -> Self {
        let jobs = exec
            .plan
            .pipeline
            .instances
            .iter()
            .map(|_| Job {
                state: State::Waiting,
                ingredients: None,
                outcome: None,
            })
            .collect();
        let slots = options.jobs.max(1);
        Run {
            exec,
            options,
            display,
            lock,
            selected,
            forced,
            jobs,
            slots,
            free_slots: slots,
            stop_launching: false,
            cancelled: Arc::new(AtomicBool::new(false)),
        }
    }

    fn instance(&self, idx: usize) -> &'a Instance {
        &self.exec.plan.pipeline.instances[idx]
    }

    /// Decides and launches until nothing is waiting that can go on and no
    /// stage runs; returns early only on a [`RunError`], after running stages end.
    fn schedule(&mut self) -> Result<(), RunError> {
        let (tx, rx) = mpsc::channel::<Msg>();
        std::thread::scope(|scope| {
            loop {
                if self.visit_waiting(scope, &tx)? {
                    continue;
                }
                let running = self
                    .jobs
                    .iter()
                    .any(|j| matches!(j.state, State::Running { .. }));
                if !running {
                    return Ok(());
                }
                match rx.recv_timeout(TICK) {
                    Ok(msg) => self.receive(msg),
                    Err(RecvTimeoutError::Timeout) => self.display.tick(),
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
        })
    }

    /// One pass over the waiting instances; true when any was settled or launched.
    fn visit_waiting<'scope>(
        &mut self,
        scope: &'scope Scope<'scope, '_>,
        tx: &Sender<Msg>,
    ) -> Result<bool, RunError>
    where
        'a: 'scope,
    {
        let mut progressed = false;
        for i in 0..self.selected.len() {
            let idx = self.selected[i];
            if !matches!(self.jobs[idx].state, State::Waiting) {
                continue;
            }
            match self.decide(idx)? {
                Decision::Wait => {}
                Decision::Settled => progressed = true,
                Decision::Launch(worker) => {
                    let tx = tx.clone();
                    scope.spawn(move || worker.run(tx));
                    progressed = true;
                }
            }
        }
        Ok(progressed)
    }

    /// What to do with waiting instance `idx` now.
    fn decide(&mut self, idx: usize) -> Result<Decision<'a>, RunError> {
        if let Some(decision) = self.decide_by_producers(idx) {
            return Ok(decision);
        }
        if let Some(ingredients) = self.jobs[idx].ingredients.take() {
            // Found stale on an earlier pass; only thread slots were short.
            return self.launch(idx, ingredients);
        }
        let (exec, jobs) = (self.exec, &self.jobs);
        let ingredients = freshness::ingredients(exec.plan, exec.registry, exec.store, idx, |p| {
            jobs[p].outputs()
        });
        let ingredients = match ingredients {
            Ok(ingredients) => ingredients,
            Err(e) => {
                self.fail(idx, e.into());
                return Ok(Decision::Settled);
            }
        };
        let name = &self.instance(idx).name;
        let forced = self.forced.contains(&idx);
        match freshness::check(exec.store, &self.lock, name, &ingredients, forced) {
            Freshness::Fresh(outputs) => {
                self.jobs[idx].ingredients = Some(ingredients);
                self.settle(idx, State::Done(outputs), Outcome::Cached);
                Ok(Decision::Settled)
            }
            Freshness::Stale(reasons) if self.options.dry_run => {
                // Downstream keys depend on outputs that do not exist yet.
                self.settle(idx, State::WouldRun, Outcome::WouldRun(reasons));
                Ok(Decision::Settled)
            }
            Freshness::Stale(_) => self.launch(idx, ingredients),
        }
    }

    /// The decision its producers force: would run after one that would
    /// run, skipped after one that did not finish, wait for unfinished ones.
    fn decide_by_producers(&mut self, idx: usize) -> Option<Decision<'a>> {
        let producers = &self.exec.plan.deps[idx];
        let state_of = |p: usize| &self.jobs[p].state;
        if let Some(&p) = producers
            .iter()
            .find(|&&p| matches!(state_of(p), State::WouldRun))
        {
            let producer = self.instance(p).name.clone();
            let why = StaleReason::ProducerWouldRun { producer };
            self.settle(idx, State::WouldRun, Outcome::WouldRun(vec![why]));
            return Some(Decision::Settled);
        }
        if let Some(&p) = producers
            .iter()
            .find(|&&p| matches!(state_of(p), State::Failed | State::Skipped))
        {
            let why = SkipReason::ProducerUnfinished(self.instance(p).name.clone());
            self.settle(idx, State::Skipped, Outcome::Skipped(why));
            return Some(Decision::Settled);
        }
        let ready = producers
            .iter()
            .all(|&p| matches!(state_of(p), State::Done(_)));
        (!ready).then_some(Decision::Wait)
    }

    /// Claims thread slots for stale instance `idx` and hands it to a
    /// worker, or waits when too few slots are free.
    fn launch(
        &mut self,
        idx: usize,
        ingredients: KeyIngredients,
    ) -> Result<Decision<'a>, RunError> {
        if self.stop_launching {
            self.jobs[idx].ingredients = Some(ingredients);
            return Ok(Decision::Wait);
        }
        let inst = self.instance(idx);
        let kind = self
            .exec
            .registry
            .get(&inst.kind)
            .ok_or_else(|| RunError::UnknownKind {
                stage: inst.name.clone(),
                kind: inst.kind.clone(),
            })?;
        let claim = match kind.threads(&inst.params) {
            Threads::Fixed(t) => t.clamp(1, self.slots),
            Threads::All => self.slots,
        };
        if claim > self.free_slots {
            self.jobs[idx].ingredients = Some(ingredients);
            return Ok(Decision::Wait);
        }
        self.free_slots -= claim;
        self.jobs[idx].state = State::Running { claim };
        self.display.started(idx, &inst.name);
        let worker = Worker {
            idx,
            name: &inst.name,
            kind,
            params: &inst.params,
            inputs: self.inputs_of(inst),
            store: self.exec.store,
            base_dir: &self.exec.plan.pipeline.base_dir,
            threads: claim,
            key: ingredients.key(),
            ingredients: ingredients.clone(),
            forced: self.forced.contains(&idx),
            cancelled: Arc::clone(&self.cancelled),
        };
        self.jobs[idx].ingredients = Some(ingredients);
        Ok(Decision::Launch(Box::new(worker)))
    }

    /// The artifacts `inst` reads, by input name.
    fn inputs_of(&self, inst: &Instance) -> BTreeMap<String, Vec<InputArtifact>> {
        let artifact = |producer: usize, output: &str| {
            let hash = self.jobs[producer].outputs()?.get(output)?.clone();
            let producer = self.instance(producer);
            Some(InputArtifact {
                producer: producer.name.clone(),
                producer_kind: producer.kind.clone(),
                producer_params: producer.params.clone(),
                output: output.to_owned(),
                path: self.exec.store.data_dir(&hash),
                hash,
            })
        };
        inst.inputs
            .iter()
            .map(|(input, refs)| {
                let list = refs
                    .iter()
                    .filter_map(|r| artifact(r.producer, &r.output))
                    .collect();
                (input.clone(), list)
            })
            .collect()
    }

    /// Handles one message from a worker.
    fn receive(&mut self, msg: Msg) {
        match msg {
            Msg::Progress(idx, event) => self.display.progress(idx, event),
            Msg::Waiting(idx) => {
                let note = "waiting for another cwm process computing the same key";
                self.display
                    .progress(idx, ProgressEvent::Message(note.into()));
            }
            Msg::Done(idx, result, elapsed) => {
                if let State::Running { claim } = self.jobs[idx].state {
                    self.free_slots += claim;
                }
                match result {
                    Ok(Finished::Ran(outputs)) => {
                        self.settle(idx, State::Done(outputs), Outcome::Ran(elapsed));
                    }
                    Ok(Finished::Reused(outputs)) => {
                        let line = Outcome::Cached.line(&self.instance(idx).name);
                        self.display.finished(
                            idx,
                            &format!("{line} (computed by another cwm process)"),
                            Settled::Cached,
                        );
                        self.record(idx, State::Done(outputs), Outcome::Cached);
                    }
                    Err(failure) => self.fail(idx, failure),
                }
            }
        }
    }

    /// Records `idx`'s outcome and prints its line.
    fn settle(&mut self, idx: usize, state: State, outcome: Outcome) {
        let line = outcome.line(&self.instance(idx).name);
        self.display.finished(idx, &line, outcome.settled());
        self.record(idx, state, outcome);
    }

    fn record(&mut self, idx: usize, state: State, outcome: Outcome) {
        let job = &mut self.jobs[idx];
        job.state = state;
        job.outcome = Some(outcome);
    }

    fn fail(&mut self, idx: usize, failure: StageFailure) {
        self.settle(idx, State::Failed, Outcome::Failed(failure));
        self.stop_launching |= !self.options.keep_going;
    }

    /// Marks what never started (launching stopped after a failure) skipped.
    fn skip_unstarted(&mut self) {
        for i in 0..self.selected.len() {
            let idx = self.selected[i];
            if matches!(self.jobs[idx].state, State::Waiting) {
                self.settle(
                    idx,
                    State::Skipped,
                    Outcome::Skipped(SkipReason::RunStopped),
                );
            }
        }
    }

    /// Updates `cwm.lock` and the store's run record (not for a dry run),
    /// saves the stat cache and reports the outcomes in execution order.
    fn finish(mut self, lock_path: &Path) -> Result<RunReport, RunError> {
        let store = self.exec.store;
        if !self.options.dry_run {
            self.update_lock();
            self.lock.write(lock_path)?;
            store.record_run(self.finished_keys())?;
        }
        store.save_stat_cache()?;
        let mut outcomes = Vec::with_capacity(self.selected.len());
        for &idx in &self.selected {
            if let Some(outcome) = self.jobs[idx].outcome.take() {
                outcomes.push((self.instance(idx).name.clone(), outcome));
            }
        }
        Ok(RunReport { outcomes })
    }

    /// Records every finished instance in the lock, keeps others that still
    /// exist in the pipeline, and drops entries of instances that no longer do.
    fn update_lock(&mut self) {
        let mut stages = Vec::with_capacity(self.jobs.len());
        for &idx in &self.exec.plan.order {
            let name = &self.instance(idx).name;
            match self.jobs[idx].finished() {
                Some((outputs, ing)) => stages.push(LockEntry::new(name, &ing.key(), ing, outputs)),
                None => stages.extend(self.lock.get(name).cloned()),
            }
        }
        self.lock.version = 1;
        self.lock.stages = stages;
    }

    /// Instance name -> key of every selected instance that finished.
    fn finished_keys(&self) -> BTreeMap<String, String> {
        self.selected
            .iter()
            .filter_map(|&idx| {
                let (_, ing) = self.jobs[idx].finished()?;
                Some((self.instance(idx).name.clone(), ing.key()))
            })
            .collect()
    }
}

/// Forwards a stage's progress to the main thread.
struct ChannelSink {
    idx: usize,
    tx: Sender<Msg>,
}

impl ProgressSink for ChannelSink {
    fn event(&self, event: ProgressEvent) {
        let _ = self.tx.send(Msg::Progress(self.idx, event));
    }
}

/// What a worker thread needs to run one stage.
struct Worker<'a> {
    idx: usize,
    name: &'a str,
    kind: &'a dyn StageKind,
    params: &'a Params,
    inputs: BTreeMap<String, Vec<InputArtifact>>,
    store: &'a Store,
    base_dir: &'a Path,
    threads: usize,
    key: String,
    ingredients: KeyIngredients,
    forced: bool,
    cancelled: Arc<AtomicBool>,
}

impl Worker<'_> {
    /// Runs the stage and reports the result and its duration.
    fn run(self, tx: Sender<Msg>) {
        let started = Instant::now();
        let idx = self.idx;
        let result = self.run_locked(&tx);
        let _ = tx.send(Msg::Done(idx, result, started.elapsed()));
    }

    /// Runs the stage in a staging directory and commits its outputs, holding
    /// the key's lock; reuses the result if another process committed it while
    /// this one waited for the lock.
    fn run_locked(mut self, tx: &Sender<Msg>) -> Result<Finished, StageFailure> {
        let (_key_lock, waited) = self.store.lock_key(&self.key)?;
        if waited {
            let _ = tx.send(Msg::Waiting(self.idx));
        }
        if !self.forced
            && let Some(outputs) = self.store.intact_outputs(&self.key)
        {
            return Ok(Finished::Reused(outputs));
        }
        let staging = self.store.stage(self.name, self.kind.outputs())?;
        let inputs = std::mem::take(&mut self.inputs);
        let (started, finished) = match self.execute(inputs, &staging, tx.clone()) {
            Ok(times) => times,
            Err(fault) => {
                let log = self.store.discard(staging);
                let saved = save_failed_log(self.store, self.name, &log);
                let log = LogTail::of(&log, saved);
                return Err(StageFailure::Stage { fault, log });
            }
        };
        let info = CommitInfo {
            instance: self.name,
            key: &self.key,
            ingredients: &self.ingredients,
            started,
            finished,
        };
        let outputs = self.store.commit(staging, &info)?;
        // The result is in the store: nothing will resume from the partial state any more.
        let _ = self.store.remove_partial(&self.key);
        Ok(Finished::Ran(outputs))
    }

    /// Runs the stage's code on `staging`, catching a panic; returns when it
    /// started and finished.
    fn execute(
        &self,
        inputs: BTreeMap<String, Vec<InputArtifact>>,
        staging: &Staging,
        tx: Sender<Msg>,
    ) -> Result<(SystemTime, SystemTime), StageFault> {
        let log = OpenOptions::new()
            .append(true)
            .open(&staging.log)
            .map(StageLog::to_file)
            .unwrap_or_else(|_| StageLog::discard());
        let progress = Progress::new(Arc::new(ChannelSink { idx: self.idx, tx }));
        let ctx = StageContext::new(
            self.name,
            self.params.clone(),
            inputs,
            staging.outputs.clone(),
            self.base_dir.to_path_buf(),
            self.threads,
            progress,
            log,
            Arc::clone(&self.cancelled),
        )
        .with_partial_dir(self.store.partial_dir(&self.key));
        let started = SystemTime::now();
        let result = catch_unwind(AssertUnwindSafe(|| self.kind.run(&ctx)));
        let finished = SystemTime::now();
        drop(ctx);
        match result {
            Ok(Ok(())) => Ok((started, finished)),
            Ok(Err(e)) => Err(StageFault::Error(e)),
            Err(panic) => Err(StageFault::Panicked(panic_message(&*panic))),
        }
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
fn save_failed_log(store: &Store, name: &str, log: &str) -> Option<PathBuf> {
    let dir = store.root().join("failed");
    fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("{}.log", cwm_formats::fs::file_safe(name)));
    fs::write(&path, log).ok()?;
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::ProgressMode;
    use crate::pipeline::{LoadOptions, load_str};
    use crate::test_kinds::registry;

    /// Runs `pipeline` (in a fresh directory named after `name`) with each of `runs`.
    fn run_all(
        name: &str,
        pipeline: &str,
        runs: &[RunOptions],
    ) -> Vec<Result<RunReport, RunError>> {
        let dir = std::env::temp_dir().join(format!("cwm-executor-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let registry = registry();
        let pipeline = load_str(
            pipeline,
            &dir.join("p.yaml"),
            &registry,
            &LoadOptions::default(),
        )
        .unwrap();
        let plan = Plan::new(pipeline).unwrap();
        let store = Store::open(&dir.join("artifacts")).unwrap();
        let executor = Executor {
            plan: &plan,
            registry: &registry,
            store: &store,
        };
        let mut display = Display::new(true, ProgressMode::Off);
        let reports = runs
            .iter()
            .map(|options| executor.run(options, &mut display))
            .collect();
        fs::remove_dir_all(&dir).unwrap();
        reports
    }

    /// Each outcome as `name: kind (detail)`.
    fn described(report: &RunReport) -> Vec<String> {
        report
            .outcomes
            .iter()
            .map(|(name, outcome)| match outcome {
                Outcome::Cached => format!("{name}: cached"),
                Outcome::Ran(_) => format!("{name}: ran"),
                Outcome::Failed(e) => format!("{name}: failed ({e})"),
                Outcome::Skipped(why) => format!("{name}: skipped ({why})"),
                Outcome::WouldRun(reasons) => {
                    format!("{name}: would run ({})", reason::joined(reasons))
                }
            })
            .collect()
    }

    const CHAIN: &str = "stages:\n  a:\n    uses: step\n    params: {cmd: one}\n  b:\n    uses: step\n    params: {cmd: two}\n    inputs: {x: a}\n";

    #[test]
    fn runs_then_finds_cached_and_a_dry_run_says_why() {
        let options = RunOptions {
            jobs: 2,
            ..RunOptions::default()
        };
        let dry_forced = RunOptions {
            dry_run: true,
            force: vec!["a".into()],
            ..options.clone()
        };
        let unknown = RunOptions {
            only: vec!["zz".into()],
            ..options.clone()
        };
        let mut reports = run_all(
            "chain",
            CHAIN,
            &[options.clone(), options, dry_forced, unknown],
        )
        .into_iter();
        let mut next = || reports.next().unwrap();
        assert_eq!(described(&next().unwrap()), ["a: ran", "b: ran"]);
        assert_eq!(described(&next().unwrap()), ["a: cached", "b: cached"]);
        assert_eq!(
            described(&next().unwrap()),
            [
                "a: would run (forced: --force was given)",
                "b: would run (input: `a` would run first)"
            ]
        );
        let err = next().unwrap_err();
        assert!(matches!(err, RunError::Select(_)), "{err}");
    }

    #[test]
    fn a_failure_skips_downstream_and_stops_launching_unless_keep_going() {
        let pipeline = "stages:\n  a:\n    uses: step\n    deps: [missing.txt]\n    params: {cmd: one}\n  b:\n    uses: step\n    params: {cmd: two}\n    inputs: {x: a}\n  c:\n    uses: step\n    params: {cmd: three}\n";
        let keep_going = RunOptions {
            keep_going: true,
            ..RunOptions::default()
        };
        let reports = run_all("failure", pipeline, &[RunOptions::default(), keep_going]);
        for (report, last) in reports
            .iter()
            .zip(["c: skipped (the run stopped after a failure)", "c: ran"])
        {
            let report = report.as_ref().unwrap();
            assert!(report.failed());
            let lines = described(report);
            assert!(
                lines[0].starts_with("a: failed (dependency file /")
                    && lines[0].ends_with("missing.txt: No such file or directory (os error 2))"),
                "{lines:?}"
            );
            assert_eq!(lines[1..], ["b: skipped (`a` did not finish)", last]);
        }
    }
}
