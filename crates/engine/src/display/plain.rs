//! Plain progress lines, for logs and pipes: never an escape code, and for each
//! running instance a line only now and then (see [`due`]).

use std::time::{Duration, Instant};

use super::text::Task;

/// A progress line is due at least this long after the last one (or the start)...
pub(crate) const EVERY: Duration = Duration::from_secs(30);
/// ...or after another tenth of the work, but never sooner than this: an
/// instance that finishes within it prints no progress line at all.
pub(crate) const MIN_GAP: Duration = Duration::from_secs(10);

/// Whether a progress line is due, `since_last` after the last one (or the
/// start) whose share done was `decile_then` tenths, now at `decile_now`.
pub(crate) fn due(since_last: Duration, decile_then: u64, decile_now: Option<u64>) -> bool {
    since_last >= EVERY
        || (since_last >= MIN_GAP && decile_now.is_some_and(|now| now > decile_then))
}

/// When one instance last printed, and how far it was then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Throttle {
    last: Instant,
    decile: u64,
}

impl Throttle {
    /// Starting now.
    pub(crate) fn new(now: Instant) -> Self {
        Throttle {
            last: now,
            decile: 0,
        }
    }

    /// The line to print for `task` at `now`, if one is due (and then counts it printed).
    pub(crate) fn line(&mut self, task: &Task, now: Instant) -> Option<String> {
        let decile = task.decile();
        if !due(
            now.saturating_duration_since(self.last),
            self.decile,
            decile,
        ) {
            return None;
        }
        self.last = now;
        self.decile = decile.unwrap_or(self.decile);
        Some(task.plain_line())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_line_every_30_seconds_or_every_tenth_but_not_within_10_seconds() {
        assert!(!due(secs(29), 0, None));
        assert!(due(secs(30), 0, None));
        assert!(due(secs(30), 3, Some(3)));
        assert!(!due(secs(9), 0, Some(5)), "too soon, however far it got");
        assert!(due(secs(10), 0, Some(1)));
        assert!(!due(secs(20), 4, Some(4)), "no new tenth");
        assert!(due(secs(20), 4, Some(5)));
    }

    #[test]
    fn the_throttle_remembers_the_last_line() {
        let start = Instant::now();
        let mut throttle = Throttle::new(start);
        let mut task = Task {
            total: Some(100),
            ..Task::new("a")
        };
        task.done = 50;
        assert_eq!(throttle.line(&task, start + secs(5)), None);
        assert!(throttle.line(&task, start + secs(11)).is_some());
        task.done = 59;
        assert_eq!(
            throttle.line(&task, start + secs(25)),
            None,
            "still 5 tenths"
        );
        task.done = 60;
        assert!(throttle.line(&task, start + secs(25)).is_some());
        assert_eq!(throttle.line(&task, start + secs(54)), None);
        assert!(throttle.line(&task, start + secs(55)).is_some());
    }
}
