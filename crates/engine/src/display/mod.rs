//! What a run shows a person: one line per instance as it settles and, while
//! instances run, their progress: on a terminal a live display (the run's
//! counts and a bar per running instance, with a training stage's step, loss
//! and time left), otherwise plain lines (one when an instance starts, and for
//! a long-running one a progress line now and then; never an escape code).
//!
//! Only the executor's main thread calls into this module; workers send
//! their progress events to it through a channel.

mod live;
mod plain;
mod text;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use cwm_stage::ProgressEvent;

pub use text::human_bytes;
pub(crate) use text::human_duration;

use live::Live;
use plain::Throttle;
use text::Task;

/// How a run shows the progress of running instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// Live bars when stderr is a terminal, else plain lines.
    #[default]
    Auto,
    /// Plain lines, even on a terminal.
    Plain,
    /// Neither: only the line of each settled instance and the closing line.
    Off,
}

/// How a settled instance counts in the run's tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    Ran,
    Cached,
    Failed,
    Skipped,
    /// `--dry-run`: it would run.
    WouldRun,
}

/// The run's counts of instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    selected: usize,
    running: usize,
    ran: usize,
    cached: usize,
    failed: usize,
    skipped: usize,
    would_run: usize,
}

impl Tally {
    fn settled(&self) -> usize {
        self.ran + self.cached + self.failed + self.skipped + self.would_run
    }

    /// The header of the live display: `12/19 done, 1 running, 6 waiting, 0 failed`.
    pub(crate) fn progress_text(&self) -> String {
        let done = self.ran + self.cached;
        let waiting = self.selected.saturating_sub(self.settled() + self.running);
        let mut text = format!(
            "{done}/{} done, {} running, {waiting} waiting, {} failed",
            self.selected, self.running, self.failed
        );
        if self.skipped > 0 {
            text.push_str(&format!(", {} skipped", self.skipped));
        }
        text
    }

    /// The closing line: `finished in 1m32s: 2 ran, 17 cached, 0 failed`.
    pub(crate) fn closing_text(&self, elapsed: Duration) -> String {
        let mut text = format!(
            "finished in {}: {} ran, {} cached, {} failed",
            text::human_duration(elapsed),
            self.ran,
            self.cached,
            self.failed
        );
        if self.skipped > 0 {
            text.push_str(&format!(", {} skipped", self.skipped));
        }
        text
    }
}

/// How progress is being shown.
enum Shown {
    Live(Live),
    Plain(HashMap<usize, Throttle>),
    Off,
}

/// The run's display.
pub struct Display {
    shown: Shown,
    /// Send lines to stderr (stdout is reserved for JSON).
    to_stderr: bool,
    tally: Tally,
    /// What is known of each running instance.
    tasks: HashMap<usize, (Task, Instant)>,
    /// When the first instance started, if one did.
    first_start: Option<Instant>,
}

impl Display {
    /// A display showing progress as `mode` says (live bars only when stderr is
    /// a terminal). With `json`, lines go to stderr so stdout carries only the
    /// JSON summary.
    pub fn new(json: bool, mode: ProgressMode) -> Self {
        let shown = match mode {
            ProgressMode::Auto if std::io::stderr().is_terminal() => Shown::Live(Live::new()),
            ProgressMode::Auto | ProgressMode::Plain => Shown::Plain(HashMap::new()),
            ProgressMode::Off => Shown::Off,
        };
        Display {
            shown,
            to_stderr: json,
            tally: Tally::default(),
            tasks: HashMap::new(),
            first_start: None,
        }
    }

    /// Prints a line (above any live bars).
    fn line(&self, text: &str) {
        match &self.shown {
            Shown::Live(live) => live.line(text, self.to_stderr),
            _ if self.to_stderr => eprintln!("{text}"),
            _ => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    /// Prints a message about the run as a whole (an interrupt, the executor's state); shown
    /// in every mode.
    pub(crate) fn note(&self, text: &str) {
        self.line(text);
    }

    /// A run of `selected` instances begins.
    pub(crate) fn begin(&mut self, selected: usize) {
        self.tally = Tally {
            selected,
            ..Tally::default()
        };
        self.tasks.clear();
        self.first_start = None;
    }

    fn counts_changed(&mut self) {
        if let Shown::Live(live) = &mut self.shown
            && self.first_start.is_some()
        {
            live.header(self.tally.progress_text());
        }
    }

    /// Instance `idx` started on a worker.
    pub(crate) fn started(&mut self, idx: usize, name: &str) {
        let now = Instant::now();
        self.first_start.get_or_insert(now);
        self.tally.running += 1;
        let task = Task::new(name);
        let plain = match &mut self.shown {
            Shown::Live(live) => {
                live.started(idx, &task);
                false
            }
            Shown::Plain(throttles) => {
                throttles.insert(idx, Throttle::new(now));
                true
            }
            Shown::Off => false,
        };
        if plain {
            self.line(&format!("running {name}"));
        }
        self.tasks.insert(idx, (task, now));
        self.counts_changed();
    }

    /// A progress event from instance `idx`.
    pub(crate) fn progress(&mut self, idx: usize, event: ProgressEvent) {
        let Some((task, _)) = self.tasks.get_mut(&idx) else {
            return;
        };
        match event {
            ProgressEvent::Total(total) => task.total = Some(total),
            ProgressEvent::Inc(n) => task.done = task.done.saturating_add(n),
            ProgressEvent::Message(m) => task.message = m,
            ProgressEvent::Metrics(m) => {
                task.total = Some(m.total);
                task.done = m.step;
                task.metrics = Some(m);
            }
        }
        self.show(idx);
    }

    /// Shows instance `idx`'s progress: redraws its bar, or prints a plain line if one is due.
    fn show(&mut self, idx: usize) {
        let Some((task, started)) = self.tasks.get_mut(&idx) else {
            return;
        };
        let now = Instant::now();
        task.elapsed = now.saturating_duration_since(*started);
        let line = match &mut self.shown {
            Shown::Live(live) => {
                live.update(idx, task);
                None
            }
            Shown::Plain(throttles) => throttles
                .get_mut(&idx)
                .and_then(|throttle| throttle.line(task, now)),
            Shown::Off => None,
        };
        if let Some(line) = line {
            self.line(&line);
        }
    }

    /// Time passed without events: prints the plain lines that fell due.
    pub(crate) fn tick(&mut self) {
        if !matches!(self.shown, Shown::Plain(_)) {
            return;
        }
        let mut running: Vec<usize> = self.tasks.keys().copied().collect();
        running.sort_unstable();
        for idx in running {
            self.show(idx);
        }
    }

    /// Instance `idx` settled (ran, was cached, failed, was skipped, or would
    /// run); prints `text`.
    pub(crate) fn finished(&mut self, idx: usize, text: &str, settled: Settled) {
        if self.tasks.remove(&idx).is_some() {
            self.tally.running = self.tally.running.saturating_sub(1);
        }
        match &mut self.shown {
            Shown::Live(live) => live.finished(idx),
            Shown::Plain(throttles) => {
                throttles.remove(&idx);
            }
            Shown::Off => {}
        }
        let count = match settled {
            Settled::Ran => &mut self.tally.ran,
            Settled::Cached => &mut self.tally.cached,
            Settled::Failed => &mut self.tally.failed,
            Settled::Skipped => &mut self.tally.skipped,
            Settled::WouldRun => &mut self.tally.would_run,
        };
        *count += 1;
        self.line(text);
        self.counts_changed();
    }

    /// The run is over: clears the live display and, with `closing` and when
    /// anything started, prints the closing line.
    pub(crate) fn end(&mut self, closing: bool) {
        if let Shown::Live(live) = &mut self.shown {
            live.end();
        }
        if let Some(first) = self.first_start.filter(|_| closing) {
            self.line(&self.tally.closing_text(first.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_read_as_done_running_waiting_failed() {
        let tally = Tally {
            selected: 19,
            running: 1,
            ran: 5,
            cached: 7,
            failed: 1,
            ..Tally::default()
        };
        assert_eq!(
            tally.progress_text(),
            "12/19 done, 1 running, 5 waiting, 1 failed"
        );
        let ended = Tally {
            running: 0,
            skipped: 6,
            ..tally
        };
        assert_eq!(
            ended.progress_text(),
            "12/19 done, 0 running, 0 waiting, 1 failed, 6 skipped"
        );
        assert_eq!(
            ended.closing_text(Duration::from_secs(92)),
            "finished in 1m32s: 5 ran, 7 cached, 1 failed, 6 skipped"
        );
    }

    #[test]
    fn plain_progress_prints_start_and_settled_lines_and_counts_them() {
        let mut display = Display::new(true, ProgressMode::Plain);
        display.begin(2);
        display.started(0, "a");
        display.progress(0, ProgressEvent::Total(10));
        display.progress(0, ProgressEvent::Inc(4));
        assert_eq!(display.tasks[&0].0.done, 4);
        assert_eq!(display.tally.running, 1);
        display.finished(0, "ran     a (1.0s)", Settled::Ran);
        display.finished(1, "skipped b", Settled::Skipped);
        assert!(display.tasks.is_empty());
        assert_eq!(
            display.tally.progress_text(),
            "1/2 done, 0 running, 0 waiting, 0 failed, 1 skipped"
        );
    }
}
