//! What a run shows a person: one line per stage, and progress bars while
//! stages run (on a terminal), or plain throttled lines (otherwise).
//!
//! Only the executor's main thread calls into this module; workers send
//! their progress events to it through a channel.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use cwm_stage::ProgressEvent;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a stage's progress is printed when not on a terminal.
const PLAIN_INTERVAL: Duration = Duration::from_secs(10);

/// The run's display.
pub struct Display {
    multi: Option<MultiProgress>,
    bars: HashMap<usize, ProgressBar>,
    plain: HashMap<usize, PlainProgress>,
    /// Send stage lines to stderr (stdout is reserved for JSON).
    to_stderr: bool,
}

#[derive(Default)]
struct PlainProgress {
    total: Option<u64>,
    done: u64,
    message: String,
    last_print: Option<Instant>,
}

impl Display {
    /// A display; progress bars only when stderr is a terminal. With `json`,
    /// stage lines go to stderr so stdout carries only the JSON summary.
    pub fn new(json: bool) -> Self {
        let multi = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Display {
            multi,
            bars: HashMap::new(),
            plain: HashMap::new(),
            to_stderr: json,
        }
    }

    /// Prints a line above any progress bars.
    pub(crate) fn line(&self, text: &str) {
        match &self.multi {
            Some(multi) if !self.to_stderr => {
                let _ = multi.suspend(|| {
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "{text}")
                });
            }
            Some(multi) => {
                let _ = multi.println(text);
            }
            None if self.to_stderr => eprintln!("{text}"),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    /// A stage started.
    pub(crate) fn started(&mut self, idx: usize, name: &str) {
        if let Some(multi) = &self.multi {
            let bar = multi.add(ProgressBar::new_spinner());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {elapsed} {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_prefix(name.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            self.bars.insert(idx, bar);
        } else {
            self.plain.insert(idx, PlainProgress::default());
            self.line(&format!("running {name}"));
        }
    }

    /// A progress event from stage `idx`.
    pub(crate) fn progress(&mut self, idx: usize, name: &str, event: ProgressEvent) {
        if let Some(bar) = self.bars.get(&idx) {
            match event {
                ProgressEvent::Total(total) => {
                    bar.set_length(total);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{prefix} [{bar:30}] {pos}/{len} {per_sec} eta {eta} {wide_msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                    );
                }
                ProgressEvent::Inc(n) => bar.inc(n),
                ProgressEvent::Message(m) => bar.set_message(m),
            }
            return;
        }
        let Some(state) = self.plain.get_mut(&idx) else {
            return;
        };
        match event {
            ProgressEvent::Total(total) => state.total = Some(total),
            ProgressEvent::Inc(n) => state.done += n,
            ProgressEvent::Message(m) => state.message = m,
        }
        let due = state
            .last_print
            .is_none_or(|t| t.elapsed() >= PLAIN_INTERVAL);
        if due {
            state.last_print = Some(Instant::now());
            let amount = match state.total {
                Some(total) => format!("{}/{total}", state.done),
                None => state.done.to_string(),
            };
            let text = format!("  {name}: {amount} {}", state.message);
            self.line(text.trim_end());
        }
    }

    /// Stage `idx` finished (ran, failed or was cancelled); prints `text`.
    pub(crate) fn finished(&mut self, idx: usize, text: &str) {
        if let Some(bar) = self.bars.remove(&idx) {
            bar.finish_and_clear();
            if let Some(multi) = &self.multi {
                multi.remove(&bar);
            }
        }
        self.plain.remove(&idx);
        self.line(text);
    }
}

/// A duration as a person reads it: `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub(crate) fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{}ms", d.as_millis())
    } else if secs < 60.0 {
        format!("{secs:.1}s")
    } else if secs < 3600.0 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() % 3600 / 60)
    }
}

/// A byte count as a person reads it.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(human_duration(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(human_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(human_duration(Duration::from_secs(7380)), "2h03m");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
