//! The local executor: each task on a thread of this process.
//!
//! Running stages share the thread slots (`-j`): a task holds its `resources.cpus`, else its
//! kind's thread claim. A task of a kind that claims all threads is sized when it becomes
//! ready: when several become ready together each holds an equal share of the slots free at
//! that moment (at least one), so that two trainings on a small machine run side by side
//! rather than one after the other; one alone holds the free slots once they are at least half
//! of all, and otherwise waits for all of them. A stage's thread count never changes what it
//! computes (`threads` is unkeyed). GPUs are a pool of device ids
//! ([`gpu_pool`]); a task that asks for `n` GPUs waits until `n` are free and has them to
//! itself until it ends, so two concurrent stages never share a device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::Scope;
use std::time::{Duration, Instant};

use cwm_stage::{ProgressEvent, ProgressSink, Threads};

use super::in_process::{Surroundings, run_task};
use super::{Event, Executor, ExecutorError, Launch, Task};
use crate::registry::Registry;
use crate::store::Store;

/// Runs tasks on scoped threads of this process.
pub struct LocalExecutor<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    registry: &'env Registry,
    store: &'env Store,
    tx: Sender<Event>,
    rx: Receiver<Event>,
    /// All thread slots, and those no running task holds.
    slots: usize,
    free_slots: usize,
    /// GPU ids no running task holds, and every id of the pool.
    free_gpus: Vec<u32>,
    all_gpus: usize,
    /// What each running task holds, by id.
    held: Vec<(usize, usize, Vec<u32>)>,
    /// The slots a task claiming all threads holds, for the tasks of the current offer.
    share: usize,
    cancelled: Arc<AtomicBool>,
}

impl<'scope, 'env> LocalExecutor<'scope, 'env> {
    /// An executor with `slots` thread slots and the GPUs `gpus`, whose threads live in
    /// `scope`.
    pub fn new(
        scope: &'scope Scope<'scope, 'env>,
        registry: &'env Registry,
        store: &'env Store,
        slots: usize,
        gpus: Vec<u32>,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let slots = slots.max(1);
        LocalExecutor {
            scope,
            registry,
            store,
            tx,
            rx,
            slots,
            free_slots: slots,
            all_gpus: gpus.len(),
            free_gpus: gpus,
            held: Vec::new(),
            share: slots,
            cancelled: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The slots `task` holds while it runs.
    fn claim(&self, task: &Task) -> usize {
        let wanted = match (task.resources.cpus, task.threads) {
            (Some(cpus), _) => cpus as usize,
            (None, Threads::Fixed(t)) => t,
            (None, Threads::All) => self.share,
        };
        wanted.clamp(1, self.slots)
    }

    /// Gives back what task `id` held.
    fn release(&mut self, id: usize) {
        if let Some(pos) = self.held.iter().position(|(i, _, _)| *i == id) {
            let (_, slots, gpus) = self.held.swap_remove(pos);
            self.free_slots += slots;
            self.free_gpus.extend(gpus);
            self.free_gpus.sort_unstable();
        }
    }
}

impl Executor for LocalExecutor<'_, '_> {
    fn name(&self) -> &'static str {
        "local"
    }

    fn offer(&mut self, ready: usize) {
        self.share = share(self.slots, self.free_slots, ready);
    }

    fn launch(&mut self, id: usize, task: Task) -> Result<Launch, ExecutorError> {
        let gpus = task.resources.gpus as usize;
        if gpus > self.all_gpus {
            return Ok(Launch::Rejected(format!(
                "asks for {gpus} GPU(s) and this machine has {} (see `executor: local: gpus:` in \
                 docs/pipeline.md)",
                self.all_gpus
            )));
        }
        let claim = self.claim(&task);
        if claim > self.free_slots || gpus > self.free_gpus.len() {
            return Ok(Launch::Busy(Box::new(task)));
        }
        let Some(kind) = self.registry.get(&task.kind) else {
            return Ok(Launch::Rejected(format!(
                "unknown stage kind `{}`",
                task.kind
            )));
        };
        let devices: Vec<u32> = self.free_gpus.drain(..gpus).collect();
        self.free_slots -= claim;
        self.held.push((id, claim, devices.clone()));
        let (store, tx) = (self.store, self.tx.clone());
        let with = Surroundings {
            sink: Arc::new(ChannelSink { id, tx: tx.clone() }),
            threads: claim,
            gpus: devices,
            cancelled: Arc::clone(&self.cancelled),
        };
        self.scope.spawn(move || {
            let started = Instant::now();
            let note = || {
                let text = "waiting for another cwm process computing the same key";
                let _ = tx.send(Event::Note(id, text.into()));
            };
            let result = run_task(&task, kind, store, with, &note);
            let _ = tx.send(Event::Done(id, result, started.elapsed()));
        });
        Ok(Launch::Started)
    }

    fn next_event(&mut self, timeout: Duration) -> Option<Event> {
        match self.rx.recv_timeout(timeout) {
            Ok(event) => {
                if let Event::Done(id, _, _) = &event {
                    self.release(*id);
                }
                Some(event)
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => None,
        }
    }

    fn cancel_all(&mut self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }
}

/// Forwards a stage's progress to the scheduler's thread.
struct ChannelSink {
    id: usize,
    tx: Sender<Event>,
}

impl ProgressSink for ChannelSink {
    fn event(&self, event: ProgressEvent) {
        let _ = self.tx.send(Event::Progress(self.id, event));
    }
}

/// The GPU ids of this machine: `setting` when the pipeline's `executor: local: gpus:` gives
/// them, else the integer ids in `CUDA_VISIBLE_DEVICES` when it is set, else one id per
/// device the NVIDIA driver lists under `/proc/driver/nvidia/gpus`, else none.
pub fn gpu_pool(setting: Option<&[u32]>) -> Vec<u32> {
    if let Some(ids) = setting {
        return ids.to_vec();
    }
    if let Some(ids) = visible_gpus() {
        return ids;
    }
    let count = std::fs::read_dir("/proc/driver/nvidia/gpus").map_or(0, Iterator::count);
    (0..count as u32).collect()
}

/// The integer GPU ids in `CUDA_VISIBLE_DEVICES` (what Slurm gives a job), when it is set.
pub fn visible_gpus() -> Option<Vec<u32>> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok()?;
    Some(
        visible
            .split(',')
            .filter_map(|id| id.trim().parse().ok())
            .collect(),
    )
}

/// The slots each task claiming all threads holds when `ready` tasks become ready together
/// and `free` of the executor's `slots` are free. Several share those free now equally (at
/// least one each). A task alone takes those free once they are at least half of all slots,
/// and otherwise waits for all of them: it starts beside a running stage on a small machine
/// without being left with a few threads of a large one.
fn share(slots: usize, free: usize, ready: usize) -> usize {
    if ready >= 2 {
        (free / ready).max(1)
    } else if free >= slots.div_ceil(2) {
        free
    } else {
        slots
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn a_task_alone_takes_the_free_slots_once_half_are_free() {
        assert_eq!(share(2, 2, 1), 2);
        assert_eq!(share(2, 1, 1), 1);
        assert_eq!(share(16, 8, 1), 8);
        assert_eq!(share(16, 16, 1), 16);
        assert_eq!(share(1, 1, 1), 1);
    }

    #[test]
    fn a_task_alone_waits_for_every_slot_while_fewer_than_half_are_free() {
        assert_eq!(share(16, 7, 1), 16);
        assert_eq!(share(16, 3, 1), 16);
        assert_eq!(share(4, 1, 1), 4);
        assert_eq!(share(2, 0, 1), 2);
    }

    #[test]
    fn tasks_ready_together_share_the_free_slots() {
        assert_eq!(share(2, 2, 2), 1);
        assert_eq!(share(16, 16, 2), 8);
        assert_eq!(share(16, 16, 3), 5);
        assert_eq!(share(16, 10, 2), 5);
    }

    #[test]
    fn a_share_is_at_least_one_slot() {
        assert_eq!(share(2, 2, 5), 1);
        assert_eq!(share(2, 0, 2), 1);
    }
}
