//! The texts the run's display is made of: durations, sizes, time left, and
//! what one running instance shows beside its bar or on a plain line.

use std::time::Duration;

use cwm_stage::{StepMetrics, time_left};

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

/// Time left as a person reads it, whole seconds rounded up: `~45s left`,
/// `~4m05s left`, `~2h03m left`; `<1s left` at the very end.
pub(crate) fn time_left_text(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let amount = match secs {
        0 => return "<1s left".to_owned(),
        1..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    };
    format!("~{amount} left")
}

/// What the display knows of one running instance.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    /// The instance's name.
    pub name: String,
    /// The total amount of work, once the stage set it.
    pub total: Option<u64>,
    /// The work done.
    pub done: u64,
    /// The stage's latest message.
    pub message: String,
    /// The latest step figures of a stage that works in steps.
    pub metrics: Option<StepMetrics>,
    /// How long it has run.
    pub elapsed: Duration,
}

impl Task {
    /// A task that just started.
    pub(crate) fn new(name: &str) -> Self {
        Task {
            name: name.to_owned(),
            total: None,
            done: 0,
            message: String::new(),
            metrics: None,
            elapsed: Duration::ZERO,
        }
    }

    /// The share done, in tenths (0 to 10), when the total is known.
    pub(crate) fn decile(&self) -> Option<u64> {
        let total = self.total.filter(|&t| t > 0)?;
        Some((self.done.min(total) * 10 / total).min(10))
    }

    /// The time left: the stage's own estimate, else the rate so far.
    fn time_left(&self) -> Option<Duration> {
        match &self.metrics {
            Some(m) => m.eta,
            None => time_left(self.elapsed, self.done, self.total?),
        }
    }

    /// What shows beside the live bar: the loss, throughput and time left of a
    /// stage that works in steps; else its message.
    pub(crate) fn detail(&self) -> String {
        let Some(m) = &self.metrics else {
            return self.message.clone();
        };
        let mut parts = vec![format!("loss {:.4}", m.loss)];
        parts.extend(m.tokens_per_s.map(|t| format!("{t:.0} tok/s")));
        parts.extend(m.eta.map(time_left_text));
        parts.join(", ")
    }

    /// One plain progress line: `  NAME: step 120/300 (40%), loss 0.7902, …`.
    pub(crate) fn plain_line(&self) -> String {
        let amount = match (&self.metrics, self.total) {
            (Some(m), _) => Some(format!(
                "step {}/{}{}",
                m.step,
                m.total,
                percent(m.step, m.total)
            )),
            (None, Some(total)) => Some(format!(
                "{}/{total}{}",
                self.done,
                percent(self.done, total)
            )),
            (None, None) if self.done > 0 => Some(format!("{} done", self.done)),
            (None, None) => None,
        };
        let mut parts: Vec<String> = amount.into_iter().collect();
        let detail = match &self.metrics {
            Some(m) => {
                let mut d = vec![format!("loss {:.4}", m.loss)];
                d.extend(m.tokens_per_s.map(|t| format!("{t:.0} tok/s")));
                d.join(", ")
            }
            None => self.message.clone(),
        };
        parts.extend((!detail.is_empty()).then_some(detail));
        parts.push(format!("{} elapsed", human_duration(self.elapsed)));
        parts.extend(self.time_left().map(time_left_text));
        format!("  {}: {}", self.name, parts.join(", "))
    }
}

/// ` (40%)`, or nothing without a total.
fn percent(done: u64, total: u64) -> String {
    if total == 0 {
        return String::new();
    }
    format!(" ({}%)", done.min(total) * 100 / total)
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

    #[test]
    fn time_left_rounds_up_to_whole_seconds() {
        let text = |ms| time_left_text(Duration::from_millis(ms));
        assert_eq!(text(0), "<1s left");
        assert_eq!(text(1), "~1s left");
        assert_eq!(text(44_200), "~45s left");
        assert_eq!(text(59_000), "~59s left");
        assert_eq!(text(59_001), "~1m00s left");
        assert_eq!(text(245_000), "~4m05s left");
        assert_eq!(text(7_380_000), "~2h03m left");
    }

    fn task() -> Task {
        Task {
            total: Some(300),
            done: 120,
            elapsed: Duration::from_secs(60),
            ..Task::new("train[arch=slice]")
        }
    }

    #[test]
    fn a_training_task_shows_its_step_loss_and_its_own_time_left() {
        let task = Task {
            metrics: Some(StepMetrics {
                step: 120,
                total: 300,
                loss: 0.790_24,
                tokens_per_s: Some(3240.4),
                eta: Some(Duration::from_secs(95)),
            }),
            ..task()
        };
        assert_eq!(task.detail(), "loss 0.7902, 3240 tok/s, ~1m35s left");
        assert_eq!(
            task.plain_line(),
            "  train[arch=slice]: step 120/300 (40%), loss 0.7902, 3240 tok/s, 1m00s elapsed, ~1m35s left"
        );
    }

    #[test]
    fn other_tasks_show_counts_their_message_and_the_rate_so_far() {
        let counted = Task {
            message: "1200 games".into(),
            ..task()
        };
        assert_eq!(counted.detail(), "1200 games");
        assert_eq!(
            counted.plain_line(),
            "  train[arch=slice]: 120/300 (40%), 1200 games, 1m00s elapsed, ~1m30s left"
        );
        assert_eq!(counted.decile(), Some(4));
        let silent = Task {
            total: None,
            done: 0,
            ..task()
        };
        assert_eq!(silent.plain_line(), "  train[arch=slice]: 1m00s elapsed");
        assert_eq!(silent.decile(), None);
    }
}
