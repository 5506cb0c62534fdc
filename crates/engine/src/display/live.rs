//! The live display on a terminal (indicatif, drawn on stderr): a header with
//! the run's counts, and one bar per running instance.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::text::Task;

/// How often the spinners and elapsed times redraw.
const TICK: Duration = Duration::from_millis(120);

/// What a running instance's bar shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// No total yet: a spinner, the time it has run and its message.
    Spinner,
    /// A total: a bar, counts, rate and indicatif's time left.
    Counted,
    /// Step figures: a bar, steps, and the stage's own loss and time left.
    Stepped,
}

impl Look {
    fn of(task: &Task) -> Self {
        match (&task.metrics, task.total) {
            (Some(_), _) => Look::Stepped,
            (None, Some(_)) => Look::Counted,
            (None, None) => Look::Spinner,
        }
    }

    fn style(self) -> ProgressStyle {
        let (template, fallback): (&str, fn() -> ProgressStyle) = match self {
            Look::Spinner => (
                "  {spinner} {prefix} {elapsed} {wide_msg}",
                ProgressStyle::default_spinner,
            ),
            Look::Counted => (
                "  {prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {wide_msg}",
                ProgressStyle::default_bar,
            ),
            Look::Stepped => (
                "  {prefix} [{bar:30}] step {pos}/{len} {elapsed} {wide_msg}",
                ProgressStyle::default_bar,
            ),
        };
        ProgressStyle::with_template(template)
            .unwrap_or_else(|_| fallback())
            .progress_chars("=> ")
    }
}

/// The bars, drawn on stderr.
pub(crate) struct Live {
    multi: MultiProgress,
    header: Option<ProgressBar>,
    bars: HashMap<usize, (ProgressBar, Look)>,
}

impl Live {
    pub(crate) fn new() -> Self {
        Live {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
            header: None,
            bars: HashMap::new(),
        }
    }

    /// Prints a line above the bars, on stderr or (suspending them) on stdout.
    pub(crate) fn line(&self, text: &str, to_stderr: bool) {
        if to_stderr {
            let _ = self.multi.println(text);
        } else {
            self.multi.suspend(|| {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            });
        }
    }

    /// Shows the run's counts in the header, adding it above the bars at first.
    pub(crate) fn header(&mut self, counts: String) {
        let header = self.header.get_or_insert_with(|| {
            let bar = self.multi.insert(0, ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(TICK);
            bar
        });
        header.set_message(counts);
    }

    /// Adds a bar for instance `idx`.
    pub(crate) fn started(&mut self, idx: usize, task: &Task) {
        let bar = self.multi.add(ProgressBar::new_spinner());
        let look = Look::of(task);
        bar.set_style(look.style());
        bar.set_prefix(task.name.clone());
        bar.enable_steady_tick(TICK);
        self.bars.insert(idx, (bar, look));
    }

    /// Redraws instance `idx`'s bar from what is known of it.
    pub(crate) fn update(&mut self, idx: usize, task: &Task) {
        let Some((bar, look)) = self.bars.get_mut(&idx) else {
            return;
        };
        let now = Look::of(task);
        if now != *look {
            *look = now;
            bar.set_style(now.style());
        }
        if let Some(total) = task.total {
            bar.set_length(total);
        }
        bar.set_position(task.done);
        bar.set_message(task.detail());
    }

    /// Removes instance `idx`'s bar.
    pub(crate) fn finished(&mut self, idx: usize) {
        if let Some((bar, _)) = self.bars.remove(&idx) {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }

    /// Removes the header and every bar left.
    pub(crate) fn end(&mut self) {
        for (_, (bar, _)) in self.bars.drain() {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        if let Some(header) = self.header.take() {
            header.finish_and_clear();
            self.multi.remove(&header);
        }
    }
}
