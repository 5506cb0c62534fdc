//! Running a plan: decide fresh or stale, run what is stale, commit, lock.
//!
//! The flow, step by step:
//! 1. The caller selects instances (`--only`, `--from`) and their ancestors.
//! 2. The main thread walks the plan in order. An instance becomes *ready*
//!    when every producer has finished; its key is computed from its
//!    producers' output *content* hashes (so an unchanged output stops
//!    reruns downstream: early cutoff).
//! 3. A ready instance whose key has a finished, intact record in the store
//!    is `cached`. Otherwise it becomes a [`Task`] for the [`Executor`]
//!    (threads of this process, or Slurm jobs), which starts it when it has
//!    the resources or hands it back to be offered again later.
//! 4. The executor stages empty output directories, runs the stage, and
//!    commits the outputs to the store; it reports progress and each end as
//!    [`Event`]s to the main thread. Only the main thread prints.
//! 5. A failure marks everything downstream `skipped` and, unless
//!    `--keep-going`, stops new launches (running stages finish). An
//!    interrupt (Ctrl-C) cancels what runs and stops new launches.
//! 6. Finally `cwm.lock` is updated for every finished instance and the stat
//!    cache is saved.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cwm_stage::{InputArtifact, ProgressEvent};

use crate::display::{Display, Settled, human_duration};
use crate::executor::local::LocalExecutor;
use crate::executor::{Event, Executor, ExecutorError, Finished, Launch, StageFailure, Task};
use crate::freshness::{self, Freshness, Outputs};
use crate::key::KeyIngredients;
use crate::lockfile::{LockEntry, LockError, LockFile};
use crate::pipeline::Instance;
use crate::plan::{Plan, UnknownSelector};
use crate::reason::{self, StaleReason};
use crate::registry::Registry;
use crate::store::{Store, StoreError};

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
    /// Set (by a signal handler) to cancel what runs and stop launching.
    pub interrupt: Arc<AtomicBool>,
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
    /// The run was interrupted before it started.
    Interrupted,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::ProducerUnfinished(producer) => write!(f, "`{producer}` did not finish"),
            SkipReason::RunStopped => f.write_str("the run stopped after a failure"),
            SkipReason::Interrupted => f.write_str("the run was interrupted"),
        }
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
    /// The executor cannot run anything (a cluster it cannot reach or use).
    #[error("the {executor} executor: {source}")]
    Executor {
        /// Its name.
        executor: &'static str,
        /// What is wrong.
        source: ExecutorError,
    },
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
    /// An interrupt stopped the run.
    pub interrupted: bool,
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
pub struct Scheduler<'a> {
    /// The ordered pipeline.
    pub plan: &'a Plan,
    /// Known stage kinds.
    pub registry: &'a Registry,
    /// The artifact store.
    pub store: &'a Store,
}

impl Scheduler<'_> {
    /// Runs the selected part of the plan on `executor`. Errors are per-stage outcomes; an
    /// `Err` here means the run could not start or go on (bad selector, unreadable lock, an
    /// executor that cannot run anything).
    pub fn run(
        &self,
        options: &RunOptions,
        display: &mut Display,
        executor: &mut dyn Executor,
    ) -> Result<RunReport, RunError> {
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
        let mut run = Run::new(self, options, display, executor, lock, selected, forced);
        if let Err(e) = run.schedule() {
            run.display.end(false);
            return Err(e);
        }
        run.skip_unstarted();
        run.display.end(true);
        run.finish(&lock_path)
    }

    /// Runs on the local executor: `options.jobs` thread slots and the GPUs `gpus`.
    ///
    /// # Errors
    /// As [`Scheduler::run`].
    pub fn run_local(
        &self,
        options: &RunOptions,
        display: &mut Display,
        gpus: Vec<u32>,
    ) -> Result<RunReport, RunError> {
        std::thread::scope(|scope| {
            let mut local =
                LocalExecutor::new(scope, self.registry, self.store, options.jobs, gpus);
            self.run(options, display, &mut local)
        })
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
    /// Not decided yet: its producers are unfinished, or the executor is busy.
    Waiting,
    /// Handed to the executor.
    Running,
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
    /// `Waiting`) found stale and handed back by a busy executor, so later scheduling
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
enum Decision {
    /// Not now: a producer is unfinished, the executor is busy, or launching stopped.
    Wait,
    /// Settled or handed to the executor.
    Progressed,
    /// Stale with every producer finished: to be handed to the executor (its key's
    /// ingredients are in the job table).
    Ready,
}

/// How long the main thread waits for an event before it lets the display print what
/// fell due (plain progress lines of silent stages) and looks for an interrupt.
const TICK: Duration = Duration::from_secs(1);

/// One run, driven by the main thread: the job table (indexed like the
/// plan's instances) and the executor. Only the main thread prints.
struct Run<'r, 'a> {
    sched: &'r Scheduler<'a>,
    options: &'r RunOptions,
    display: &'r mut Display,
    executor: &'r mut dyn Executor,
    lock: LockFile,
    /// What runs, in execution order.
    selected: Vec<usize>,
    forced: BTreeSet<usize>,
    jobs: Vec<Job>,
    /// Set after a failure without `--keep-going`, an interrupt or an executor error.
    stop_launching: bool,
    interrupted: bool,
    /// Why the executor cannot go on, once it said so.
    fatal: Option<ExecutorError>,
}

impl<'r, 'a> Run<'r, 'a> {
    fn new(
        sched: &'r Scheduler<'a>,
        options: &'r RunOptions,
        display: &'r mut Display,
        executor: &'r mut dyn Executor,
        lock: LockFile,
        selected: Vec<usize>,
        forced: BTreeSet<usize>,
    ) -> Self {
        let jobs = sched
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
        Run {
            sched,
            options,
            display,
            executor,
            lock,
            selected,
            forced,
            jobs,
            stop_launching: false,
            interrupted: false,
            fatal: None,
        }
    }

    fn instance(&self, idx: usize) -> &'a Instance {
        &self.sched.plan.pipeline.instances[idx]
    }

    /// Decides and launches until nothing is waiting that can go on and nothing runs;
    /// returns a [`RunError`] only after what runs has ended.
    fn schedule(&mut self) -> Result<(), RunError> {
        loop {
            self.check_interrupt();
            if self.visit_waiting()? {
                continue;
            }
            let running = self.jobs.iter().any(|j| matches!(j.state, State::Running));
            if !running {
                break;
            }
            match self.executor.next_event(TICK) {
                Some(event) => self.receive(event),
                None => self.display.tick(),
            }
        }
        match self.fatal.take() {
            Some(source) => Err(RunError::Executor {
                executor: self.executor.name(),
                source,
            }),
            None => Ok(()),
        }
    }

    /// On the first interrupt: cancels what runs and stops launching.
    fn check_interrupt(&mut self) {
        if self.interrupted || !self.options.interrupt.load(Ordering::SeqCst) {
            return;
        }
        self.interrupted = true;
        self.stop_launching = true;
        self.display.note(&format!(
            "interrupted: cancelling what runs on the {} executor (interrupt again to quit at \
             once)",
            self.executor.name()
        ));
        self.executor.cancel_all();
    }

    /// One pass over the waiting instances; true when any was settled or launched.
    ///
    /// The stale instances whose producers have finished are offered to the executor after
    /// the pass has found them all, so it knows how many want to start at once
    /// ([`Executor::offer`]).
    fn visit_waiting(&mut self) -> Result<bool, RunError> {
        let mut progressed = false;
        let mut ready = Vec::new();
        for i in 0..self.selected.len() {
            let idx = self.selected[i];
            if !matches!(self.jobs[idx].state, State::Waiting) {
                continue;
            }
            match self.decide(idx)? {
                Decision::Progressed => progressed = true,
                Decision::Ready => ready.push(idx),
                Decision::Wait => {}
            }
        }
        if !ready.is_empty() && !self.stop_launching {
            self.executor.offer(ready.len());
        }
        for idx in ready {
            if let Some(ingredients) = self.jobs[idx].ingredients.take()
                && let Decision::Progressed = self.launch(idx, ingredients)?
            {
                progressed = true;
            }
        }
        Ok(progressed)
    }

    /// What to do with waiting instance `idx` now.
    fn decide(&mut self, idx: usize) -> Result<Decision, RunError> {
        if let Some(decision) = self.decide_by_producers(idx) {
            return Ok(decision);
        }
        if self.jobs[idx].ingredients.is_some() {
            // Found stale on an earlier pass; the executor was busy.
            return Ok(Decision::Ready);
        }
        let (sched, jobs) = (self.sched, &self.jobs);
        let ingredients =
            freshness::ingredients(sched.plan, sched.registry, sched.store, idx, |p| {
                jobs[p].outputs()
            });
        let ingredients = match ingredients {
            Ok(ingredients) => ingredients,
            Err(e) => {
                self.fail(idx, e.into());
                return Ok(Decision::Progressed);
            }
        };
        let name = &self.instance(idx).name;
        let forced = self.forced.contains(&idx);
        match freshness::check(sched.store, &self.lock, name, &ingredients, forced) {
            Freshness::Fresh(outputs) => {
                self.jobs[idx].ingredients = Some(ingredients);
                self.settle(idx, State::Done(outputs), Outcome::Cached);
                Ok(Decision::Progressed)
            }
            Freshness::Stale(reasons) if self.options.dry_run => {
                // Downstream keys depend on outputs that do not exist yet.
                self.settle(idx, State::WouldRun, Outcome::WouldRun(reasons));
                Ok(Decision::Progressed)
            }
            Freshness::Stale(_) => {
                self.jobs[idx].ingredients = Some(ingredients);
                Ok(Decision::Ready)
            }
        }
    }

    /// The decision its producers force: would run after one that would
    /// run, skipped after one that did not finish, wait for unfinished ones.
    fn decide_by_producers(&mut self, idx: usize) -> Option<Decision> {
        let producers = &self.sched.plan.deps[idx];
        let state_of = |p: usize| &self.jobs[p].state;
        if let Some(&p) = producers
            .iter()
            .find(|&&p| matches!(state_of(p), State::WouldRun))
        {
            let producer = self.instance(p).name.clone();
            let why = StaleReason::ProducerWouldRun { producer };
            self.settle(idx, State::WouldRun, Outcome::WouldRun(vec![why]));
            return Some(Decision::Progressed);
        }
        if let Some(&p) = producers
            .iter()
            .find(|&&p| matches!(state_of(p), State::Failed | State::Skipped))
        {
            let why = SkipReason::ProducerUnfinished(self.instance(p).name.clone());
            self.settle(idx, State::Skipped, Outcome::Skipped(why));
            return Some(Decision::Progressed);
        }
        let ready = producers
            .iter()
            .all(|&p| matches!(state_of(p), State::Done(_)));
        (!ready).then_some(Decision::Wait)
    }

    /// Hands stale instance `idx` to the executor, or keeps it waiting when the executor
    /// is busy or launching stopped.
    fn launch(&mut self, idx: usize, ingredients: KeyIngredients) -> Result<Decision, RunError> {
        if self.stop_launching {
            self.jobs[idx].ingredients = Some(ingredients);
            return Ok(Decision::Wait);
        }
        let task = self.task(idx, ingredients)?;
        let launched = self.executor.launch(idx, task);
        match launched {
            Ok(Launch::Started) => {
                self.jobs[idx].state = State::Running;
                self.display.started(idx, &self.instance(idx).name);
                Ok(Decision::Progressed)
            }
            Ok(Launch::Busy(task)) => {
                self.jobs[idx].ingredients = Some(task.ingredients);
                Ok(Decision::Wait)
            }
            Ok(Launch::Rejected(why)) => {
                self.fail(idx, StageFailure::Resources(why));
                Ok(Decision::Progressed)
            }
            Err(e) => {
                self.display.note(&format!("{}: {e}", self.executor.name()));
                self.fatal = Some(e);
                self.stop_launching = true;
                self.executor.cancel_all();
                Ok(Decision::Wait)
            }
        }
    }

    /// The task of stale instance `idx`, with the ingredients of its key (also kept in the
    /// job table).
    fn task(&mut self, idx: usize, ingredients: KeyIngredients) -> Result<Task, RunError> {
        let inst = self.instance(idx);
        let kind = self
            .sched
            .registry
            .get(&inst.kind)
            .ok_or_else(|| RunError::UnknownKind {
                stage: inst.name.clone(),
                kind: inst.kind.clone(),
            })?;
        let task = Task {
            instance: inst.name.clone(),
            kind: inst.kind.clone(),
            params: inst.params.clone(),
            inputs: self.inputs_of(inst),
            key: ingredients.key(),
            ingredients: ingredients.clone(),
            forced: self.forced.contains(&idx),
            threads: kind.threads(&inst.params),
            resources: inst.resources,
            base_dir: self.sched.plan.pipeline.base_dir.clone(),
        };
        self.jobs[idx].ingredients = Some(ingredients);
        Ok(task)
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
                path: self.sched.store.data_dir(&hash),
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

    /// Handles one event from the executor.
    fn receive(&mut self, event: Event) {
        match event {
            Event::Progress(idx, event) => self.display.progress(idx, event),
            Event::Note(idx, note) => self.display.progress(idx, ProgressEvent::Message(note)),
            Event::Notice(idx, notice) => {
                let name = &self.instance(idx).name;
                self.display.note(&format!("{name}: {notice}"));
            }
            Event::Done(idx, Ok(Finished::Ran(outputs)), elapsed) => {
                self.settle(idx, State::Done(outputs), Outcome::Ran(elapsed));
            }
            Event::Done(idx, Ok(Finished::Reused(outputs)), _) => {
                let line = Outcome::Cached.line(&self.instance(idx).name);
                self.display.finished(
                    idx,
                    &format!("{line} (computed by another cwm process)"),
                    Settled::Cached,
                );
                self.record(idx, State::Done(outputs), Outcome::Cached);
            }
            Event::Done(idx, Err(failure), _) => self.fail(idx, failure),
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

    /// Marks what never started (launching stopped after a failure or an interrupt)
    /// skipped.
    fn skip_unstarted(&mut self) {
        let why = if self.interrupted {
            SkipReason::Interrupted
        } else {
            SkipReason::RunStopped
        };
        for i in 0..self.selected.len() {
            let idx = self.selected[i];
            if matches!(self.jobs[idx].state, State::Waiting) {
                self.settle(idx, State::Skipped, Outcome::Skipped(why.clone()));
            }
        }
    }

    /// Updates `cwm.lock` and the store's run record (not for a dry run),
    /// saves the stat cache and reports the outcomes in execution order.
    fn finish(mut self, lock_path: &Path) -> Result<RunReport, RunError> {
        let store = self.sched.store;
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
        Ok(RunReport {
            outcomes,
            interrupted: self.interrupted,
        })
    }

    /// Records every finished instance in the lock, keeps others that still
    /// exist in the pipeline, and drops entries of instances that no longer do.
    fn update_lock(&mut self) {
        let mut stages = Vec::with_capacity(self.jobs.len());
        for &idx in &self.sched.plan.order {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::ProgressMode;
    use crate::pipeline::{LoadOptions, load_str};
    use crate::test_kinds::registry;
    use std::fs;

    /// Runs `pipeline` (in a fresh directory named after `name`) with each of `runs`.
    fn run_all(
        name: &str,
        pipeline: &str,
        runs: &[RunOptions],
    ) -> Vec<Result<RunReport, RunError>> {
        run_all_with_gpus(name, pipeline, runs, &[])
    }

    /// [`run_all`] on a local executor whose GPU pool is `gpus`.
    fn run_all_with_gpus(
        name: &str,
        pipeline: &str,
        runs: &[RunOptions],
        gpus: &[u32],
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
        let scheduler = Scheduler {
            plan: &plan,
            registry: &registry,
            store: &store,
        };
        let mut display = Display::new(true, ProgressMode::Off);
        let reports = runs
            .iter()
            .map(|options| scheduler.run_local(options, &mut display, gpus.to_vec()))
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

    /// The GPU pool: with two GPUs and four slots, stages asking for one GPU each run two at a
    /// time, never two on one device at once, and a stage asking for both runs alone.
    #[test]
    fn local_gpu_pool_never_gives_one_device_to_two_running_stages() {
        let log = std::env::temp_dir().join(format!("cwm-gpu-pool-{}.log", std::process::id()));
        let _ = fs::remove_file(&log);
        let mut pipeline = String::from("stages:\n");
        for (name, gpus) in [
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("d", 1),
            ("both", 2),
            ("e", 1),
            ("f", 1),
        ] {
            pipeline.push_str(&format!(
                "  {name}:\n    uses: hold\n    params: {{log: {}, ms: 150, id: {name}}}\n    resources: {{gpus: {gpus}}}\n",
                log.display()
            ));
        }
        let options = RunOptions {
            jobs: 4,
            ..RunOptions::default()
        };
        let report = run_all_with_gpus("gpu-pool", &pipeline, &[options], &[0, 1])
            .remove(0)
            .unwrap();
        assert!(
            described(&report).iter().all(|o| o.ends_with(": ran")),
            "{:?}",
            described(&report)
        );
        let spans = held_spans(&fs::read_to_string(&log).unwrap());
        fs::remove_file(&log).unwrap();
        assert_eq!(spans.len(), 7);
        for (name, _, _, gpus) in &spans {
            if name == "both" {
                assert_eq!(gpus, &[0, 1], "{name}");
            } else {
                assert!(gpus.len() == 1 && gpus[0] < 2, "{name}: {gpus:?}");
            }
        }
        let mut overlapping = 0;
        for (i, x) in spans.iter().enumerate() {
            for y in &spans[i + 1..] {
                if x.1 < y.2 && y.1 < x.2 {
                    overlapping += 1;
                    assert!(
                        x.3.iter().all(|g| !y.3.contains(g)),
                        "{x:?} and {y:?} overlap on a GPU"
                    );
                }
            }
        }
        assert!(
            overlapping > 0,
            "no two stages ever ran together: {spans:?}"
        );
    }

    /// The `hold` kind's log lines as (name, start, end, gpus).
    fn held_spans(log: &str) -> Vec<(String, u128, u128, Vec<u32>)> {
        log.lines()
            .map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                let gpus = f[3]
                    .split(',')
                    .filter(|g| !g.is_empty())
                    .map(|g| g.parse().unwrap());
                (
                    f[0].to_owned(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    gpus.collect(),
                )
            })
            .collect()
    }
}
