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
use std::fs::{self, OpenOptions};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant, SystemTime};

use cwm_stage::{
    InputArtifact, Progress, ProgressEvent, ProgressSink, StageContext, StageLog, Threads,
};

use crate::display::{Display, human_duration};
use crate::freshness::{self, Freshness, Outputs};
use crate::key::KeyIngredients;
use crate::lockfile::{LockEntry, LockFile};
use crate::plan::Plan;
use crate::reason::{self, StaleReason};
use crate::registry::Registry;
use crate::store::{CommitInfo, Store};

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
    /// Machine-readable summary on stdout.
    pub json: bool,
}

/// What happened to one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Its result was already in the store.
    Cached,
    /// It ran for this long.
    Ran(Duration),
    /// It failed with this message.
    Failed(String),
    /// It did not run because a producer failed (or the run stopped).
    Skipped(String),
    /// `--dry-run`: it would run, for these reasons.
    WouldRun(Vec<StaleReason>),
}

/// The result of a run, per selected instance in execution order.
#[derive(Debug, Default)]
pub struct RunReport {
    /// (instance name, outcome).
    pub outcomes: Vec<(String, Outcome)>,
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

/// A message from a worker to the main thread.
enum Msg {
    Progress(usize, ProgressEvent),
    Done(usize, Result<Finished, String>, Duration),
    /// The stage waits for another process that computes the same key.
    Waiting(usize),
}

/// How a launched stage ended well.
enum Finished {
    /// It ran and its outputs were committed.
    Ran(Outputs),
    /// Another process committed the same key while this one waited for it.
    Reused(Outputs),
}

struct ChannelSink {
    idx: usize,
    tx: Sender<Msg>,
}

impl ProgressSink for ChannelSink {
    fn event(&self, event: ProgressEvent) {
        let _ = self.tx.send(Msg::Progress(self.idx, event));
    }
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Waiting,
    Running,
    Done,
    Failed,
    Skipped,
    /// `--dry-run`: would run.
    WouldRun,
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
    pub fn run(&self, options: &RunOptions, display: &mut Display) -> anyhow::Result<RunReport> {
        let plan = self.plan;
        let n = plan.pipeline.instances.len();
        let mut targets = plan.resolve(&options.only).map_err(anyhow::Error::msg)?;
        if let Some(from) = &options.from {
            let start = plan
                .resolve(std::slice::from_ref(from))
                .map_err(anyhow::Error::msg)?;
            let downstream = plan.with_descendants(&start);
            if options.only.is_empty() {
                targets = downstream;
            } else {
                let only: BTreeSet<usize> = targets.into_iter().collect();
                targets = downstream
                    .into_iter()
                    .filter(|i| only.contains(i))
                    .collect();
            }
        } else if options.only.is_empty() {
            targets = plan.order.clone();
        }
        let selected = plan.with_ancestors(&targets);
        let forced: BTreeSet<usize> = plan
            .resolve(&options.force)
            .map_err(anyhow::Error::msg)?
            .into_iter()
            .collect();
        // gc waits while runs hold this.
        let _store_lock = if options.dry_run {
            None
        } else {
            Some(self.store.lock_shared()?)
        };
        let lock_path = LockFile::path_for(&plan.pipeline.base_dir);
        let mut lock = LockFile::read(&lock_path)?;

        let jobs = options.jobs.max(1);
        let mut state: Vec<State> = vec![State::Waiting; n];
        let mut outputs: Vec<Option<Outputs>> = vec![None; n];
        let mut ingredients: Vec<Option<KeyIngredients>> = vec![None; n];
        let mut outcomes: BTreeMap<usize, Outcome> = BTreeMap::new();
        let mut free_slots = jobs;
        let mut claims: BTreeMap<usize, usize> = BTreeMap::new();
        let mut stop_launching = false;
        let cancelled = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Msg>();

        std::thread::scope(|scope| -> anyhow::Result<()> {
            loop {
                let mut progressed = false;
                for &idx in &selected {
                    if state[idx] != State::Waiting {
                        continue;
                    }
                    let name = plan.pipeline.instances[idx].name.clone();
                    if let Some(&p) = plan.deps[idx]
                        .iter()
                        .find(|&&p| state[p] == State::WouldRun)
                    {
                        let why = StaleReason::ProducerWouldRun {
                            producer: plan.pipeline.instances[p].name.clone(),
                        };
                        state[idx] = State::WouldRun;
                        display.line(&format!("would run {name}: {why}"));
                        outcomes.insert(idx, Outcome::WouldRun(vec![why]));
                        progressed = true;
                        continue;
                    }
                    if let Some(&bad) = plan.deps[idx]
                        .iter()
                        .find(|&&p| matches!(state[p], State::Failed | State::Skipped))
                    {
                        state[idx] = State::Skipped;
                        let why = format!("`{}` did not finish", plan.pipeline.instances[bad].name);
                        display.finished(idx, &format!("skipped {name} ({why})"));
                        outcomes.insert(idx, Outcome::Skipped(why));
                        progressed = true;
                        continue;
                    }
                    if !plan.deps[idx].iter().all(|&p| state[p] == State::Done) {
                        continue;
                    }
                    let ing =
                        match freshness::ingredients(plan, self.registry, self.store, idx, |p| {
                            outputs[p].as_ref()
                        }) {
                            Ok(ing) => ing,
                            Err(e) => {
                                let e = e.to_string();
                                state[idx] = State::Failed;
                                display.finished(idx, &format!("failed  {name}: {e}"));
                                outcomes.insert(idx, Outcome::Failed(e));
                                stop_launching |= !options.keep_going;
                                progressed = true;
                                continue;
                            }
                        };
                    match freshness::check(self.store, &lock, &name, &ing, forced.contains(&idx)) {
                        Freshness::Fresh(outs) => {
                            state[idx] = State::Done;
                            outputs[idx] = Some(outs);
                            ingredients[idx] = Some(ing);
                            display.line(&format!("cached  {name}"));
                            outcomes.insert(idx, Outcome::Cached);
                            progressed = true;
                            continue;
                        }
                        Freshness::Stale(reasons) if options.dry_run => {
                            // Downstream keys depend on outputs that do not exist yet.
                            state[idx] = State::WouldRun;
                            display
                                .line(&format!("would run {name}: {}", reason::joined(&reasons)));
                            outcomes.insert(idx, Outcome::WouldRun(reasons));
                            progressed = true;
                            continue;
                        }
                        Freshness::Stale(_) => {}
                    }
                    if stop_launching {
                        continue;
                    }
                    let inst = &plan.pipeline.instances[idx];
                    // The loader checked every kind against a registry; a different one here is
                    // a bug of the caller, never a stage to skip silently.
                    let kind = self.registry.get(&inst.kind).ok_or_else(|| {
                        anyhow::anyhow!(
                            "stage `{}` uses kind `{}`, which this registry does not have",
                            inst.name,
                            inst.kind
                        )
                    })?;
                    let claim = match kind.threads(&inst.params) {
                        Threads::Fixed(t) => t.clamp(1, jobs),
                        Threads::All => jobs,
                    };
                    if claim > free_slots {
                        continue;
                    }
                    free_slots -= claim;
                    claims.insert(idx, claim);
                    state[idx] = State::Running;
                    progressed = true;
                    display.started(idx, &name);
                    let mut inputs: BTreeMap<String, Vec<InputArtifact>> = BTreeMap::new();
                    for (input, refs) in &inst.inputs {
                        let list = refs
                            .iter()
                            .filter_map(|r| {
                                let producer = &plan.pipeline.instances[r.producer];
                                let hash = outputs[r.producer].as_ref()?.get(&r.output)?.clone();
                                Some(InputArtifact {
                                    producer: producer.name.clone(),
                                    producer_kind: producer.kind.clone(),
                                    producer_params: producer.params.clone(),
                                    output: r.output.clone(),
                                    path: self.store.data_dir(&hash),
                                    hash,
                                })
                            })
                            .collect();
                        inputs.insert(input.clone(), list);
                    }
                    let key = ing.key();
                    ingredients[idx] = Some(ing);
                    let tx = tx.clone();
                    let cancelled = Arc::clone(&cancelled);
                    let store = self.store;
                    let base_dir = plan.pipeline.base_dir.clone();
                    let is_forced = forced.contains(&idx);
                    let ing = ingredients[idx].clone().unwrap_or_default();
                    scope.spawn(move || {
                        let started = Instant::now();
                        let result = run_one(RunOne {
                            idx,
                            name: &name,
                            kind,
                            params: &inst.params,
                            inputs,
                            store,
                            base_dir,
                            threads: claim,
                            key: &key,
                            ingredients: &ing,
                            tx: tx.clone(),
                            cancelled,
                            forced: is_forced,
                        });
                        let _ = tx.send(Msg::Done(idx, result, started.elapsed()));
                    });
                }
                if progressed {
                    continue;
                }
                if claims.is_empty() {
                    break;
                }
                let Ok(msg) = rx.recv() else {
                    break;
                };
                match msg {
                    Msg::Progress(idx, event) => {
                        let name = &plan.pipeline.instances[idx].name;
                        display.progress(idx, name, event);
                    }
                    Msg::Waiting(idx) => {
                        let name = &plan.pipeline.instances[idx].name;
                        display.progress(
                            idx,
                            name,
                            ProgressEvent::Message(
                                "waiting for another cwm process computing the same key".into(),
                            ),
                        );
                    }
                    Msg::Done(idx, result, elapsed) => {
                        free_slots += claims.remove(&idx).unwrap_or(0);
                        let name = &plan.pipeline.instances[idx].name;
                        match result {
                            Ok(Finished::Reused(outs)) => {
                                state[idx] = State::Done;
                                outputs[idx] = Some(outs);
                                display.finished(
                                    idx,
                                    &format!("cached  {name} (computed by another cwm process)"),
                                );
                                outcomes.insert(idx, Outcome::Cached);
                            }
                            Ok(Finished::Ran(outs)) => {
                                state[idx] = State::Done;
                                outputs[idx] = Some(outs);
                                display.finished(
                                    idx,
                                    &format!("ran     {name} ({})", human_duration(elapsed)),
                                );
                                outcomes.insert(idx, Outcome::Ran(elapsed));
                            }
                            Err(e) => {
                                state[idx] = State::Failed;
                                display.finished(idx, &format!("failed  {name}: {e}"));
                                outcomes.insert(idx, Outcome::Failed(e));
                                stop_launching |= !options.keep_going;
                            }
                        }
                    }
                }
            }
            Ok(())
        })?;

        for &idx in &selected {
            if state[idx] == State::Waiting {
                let name = &plan.pipeline.instances[idx].name;
                display.line(&format!("skipped {name} (the run stopped after a failure)"));
                outcomes.insert(
                    idx,
                    Outcome::Skipped("the run stopped after a failure".into()),
                );
            }
        }

        if !options.dry_run {
            update_lock(&mut lock, plan, &outputs, &ingredients);
            lock.write(&lock_path)?;
            let finished: BTreeMap<String, String> = selected
                .iter()
                .filter_map(|&i| {
                    outputs[i].as_ref()?;
                    let key = ingredients[i].as_ref()?.key();
                    Some((plan.pipeline.instances[i].name.clone(), key))
                })
                .collect();
            self.store.record_run(finished)?;
        }
        self.store.save_stat_cache()?;
        let order: BTreeMap<usize, usize> = selected
            .iter()
            .enumerate()
            .map(|(pos, &i)| (i, pos))
            .collect();
        let mut outcomes: Vec<(usize, Outcome)> = outcomes.into_iter().collect();
        outcomes.sort_by_key(|(i, _)| order.get(i).copied().unwrap_or(usize::MAX));
        Ok(RunReport {
            outcomes: outcomes
                .into_iter()
                .map(|(i, o)| (plan.pipeline.instances[i].name.clone(), o))
                .collect(),
        })
    }
}

/// Records every finished instance in the lock, keeps others that still
/// exist in the pipeline, and drops entries of instances that no longer do.
fn update_lock(
    lock: &mut LockFile,
    plan: &Plan,
    outputs: &[Option<Outputs>],
    ingredients: &[Option<KeyIngredients>],
) {
    let mut stages = Vec::with_capacity(plan.pipeline.instances.len());
    for &idx in &plan.order {
        let name = &plan.pipeline.instances[idx].name;
        match (&outputs[idx], &ingredients[idx]) {
            (Some(outs), Some(ing)) => stages.push(LockEntry::new(name, &ing.key(), ing, outs)),
            _ => {
                if let Some(old) = lock.get(name) {
                    stages.push(old.clone());
                }
            }
        }
    }
    lock.version = 1;
    lock.stages = stages;
}

struct RunOne<'a> {
    idx: usize,
    name: &'a str,
    kind: &'a dyn cwm_stage::StageKind,
    params: &'a cwm_stage::Params,
    inputs: BTreeMap<String, Vec<InputArtifact>>,
    store: &'a Store,
    base_dir: std::path::PathBuf,
    threads: usize,
    key: &'a str,
    ingredients: &'a KeyIngredients,
    tx: Sender<Msg>,
    cancelled: Arc<AtomicBool>,
    forced: bool,
}

/// Runs one stage in a staging directory and commits its outputs, holding
/// the key's lock; reuses the result if another process committed it while
/// this one waited for the lock.
fn run_one(job: RunOne) -> Result<Finished, String> {
    let (lock, waited) = job.store.lock_key(job.key).map_err(|e| e.to_string())?;
    if waited {
        let _ = job.tx.send(Msg::Waiting(job.idx));
    }
    if !job.forced
        && let Some(outputs) = job.store.intact_outputs(job.key)
    {
        return Ok(Finished::Reused(outputs));
    }
    let staging = job
        .store
        .stage(job.name, job.kind.outputs())
        .map_err(|e| e.to_string())?;
    let log = OpenOptions::new()
        .append(true)
        .open(&staging.log)
        .map(StageLog::to_file)
        .unwrap_or_else(|_| StageLog::discard());
    let ctx = StageContext::new(
        job.name,
        job.params.clone(),
        job.inputs,
        staging.outputs.clone(),
        job.base_dir,
        job.threads,
        Progress::new(Arc::new(ChannelSink {
            idx: job.idx,
            tx: job.tx,
        })),
        log,
        job.cancelled,
    )
    .with_partial_dir(job.store.partial_dir(job.key));
    let started = SystemTime::now();
    let result = catch_unwind(AssertUnwindSafe(|| job.kind.run(&ctx)));
    let finished = SystemTime::now();
    drop(ctx);
    let error = match result {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "stage panicked: {}",
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into())
        )),
    };
    if let Some(error) = error {
        let log = job.store.discard(staging);
        let saved = save_failed_log(job.store, job.name, &log);
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        let mut message = error;
        if !tail.is_empty() {
            message.push_str("\n        log tail:");
            for line in tail.into_iter().rev() {
                message.push_str("\n        | ");
                message.push_str(line);
            }
        }
        if let Some(path) = saved {
            message.push_str(&format!("\n        full log: {}", path.display()));
        }
        return Err(message);
    }
    let info = CommitInfo {
        instance: job.name,
        key: job.key,
        ingredients: job.ingredients,
        started,
        finished,
    };
    let committed = job.store.commit(staging, &info).map_err(|e| e.to_string());
    if committed.is_ok() {
        // The result is in the store: nothing will resume from the partial state any more.
        let _ = job.store.remove_partial(job.key);
    }
    drop(lock);
    committed.map(Finished::Ran)
}

/// Keeps a failed stage's log at `artifacts/failed/<instance>.log`.
fn save_failed_log(store: &Store, name: &str, log: &str) -> Option<std::path::PathBuf> {
    let dir = store.root().join("failed");
    fs::create_dir_all(&dir).ok()?;
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = dir.join(format!("{safe}.log"));
    fs::write(&path, log).ok()?;
    Some(path)
}
