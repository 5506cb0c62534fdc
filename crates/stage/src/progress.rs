//! Progress reporting from a running stage to the executor's display.

use std::sync::Arc;
use std::time::Duration;

/// One progress update from a stage.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressEvent {
    /// The total amount of work, in the stage's own units.
    Total(u64),
    /// This much more work is done.
    Inc(u64),
    /// A short status message (e.g. "epoch 2, loss 0.31").
    Message(String),
    /// The latest figures of a stage that works in steps (training); its step is
    /// the amount of work done, in place of increments.
    Metrics(StepMetrics),
}

/// Where a stage that works in steps stands: the display shows these beside its
/// progress bar, and plain progress lines print them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMetrics {
    /// Steps done so far, earlier (resumed) runs included.
    pub step: u64,
    /// Steps of the whole run.
    pub total: u64,
    /// The loss of the latest step.
    pub loss: f64,
    /// Throughput of the latest measured window, in tokens per second, if measured yet.
    pub tokens_per_s: Option<f64>,
    /// Time left until the last step, once it can be estimated.
    pub eta: Option<Duration>,
}

/// The time left when `done` of `total` units took `elapsed`, assuming the rate so far
/// holds; `None` before the first unit is done or when the total is unknown (zero).
pub fn time_left(elapsed: Duration, done: u64, total: u64) -> Option<Duration> {
    if done == 0 || total == 0 {
        return None;
    }
    let remaining = total.saturating_sub(done);
    let per_unit = elapsed.as_secs_f64() / done as f64;
    Duration::try_from_secs_f64(per_unit * remaining as f64).ok()
}

/// Where progress events go; implemented by the executor.
pub trait ProgressSink: Send + Sync {
    /// Receives one event. Must be cheap and must not block for long.
    fn event(&self, event: ProgressEvent);
}

/// A cloneable handle a stage uses to report progress.
#[derive(Clone)]
pub struct Progress {
    sink: Option<Arc<dyn ProgressSink>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("connected", &self.sink.is_some())
            .finish()
    }
}

impl Progress {
    /// A handle that sends events to `sink`.
    pub fn new(sink: Arc<dyn ProgressSink>) -> Self {
        Self { sink: Some(sink) }
    }

    /// A handle that drops every event (for tests and one-shot commands).
    pub fn disabled() -> Self {
        Self { sink: None }
    }

    fn send(&self, event: ProgressEvent) {
        if let Some(sink) = &self.sink {
            sink.event(event);
        }
    }

    /// Sets the total amount of work.
    pub fn set_total(&self, total: u64) {
        self.send(ProgressEvent::Total(total));
    }

    /// Marks `n` more units of work done.
    pub fn inc(&self, n: u64) {
        self.send(ProgressEvent::Inc(n));
    }

    /// Shows a short status message.
    pub fn set_message(&self, message: impl Into<String>) {
        self.send(ProgressEvent::Message(message.into()));
    }

    /// Reports the latest step, loss and time left of a stage that works in steps.
    pub fn set_metrics(&self, metrics: StepMetrics) {
        self.send(ProgressEvent::Metrics(metrics));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn time_left_extrapolates_the_rate_so_far() {
        let minute = Duration::from_secs(60);
        assert_eq!(time_left(minute, 30, 120), Some(Duration::from_secs(180)));
        assert_eq!(time_left(minute, 120, 120), Some(Duration::ZERO));
        assert_eq!(time_left(minute, 130, 120), Some(Duration::ZERO));
        assert_eq!(time_left(minute, 0, 120), None);
        assert_eq!(time_left(minute, 5, 0), None);
    }

    struct Recorder(Mutex<Vec<ProgressEvent>>);

    impl ProgressSink for Recorder {
        fn event(&self, event: ProgressEvent) {
            self.0.lock().unwrap().push(event);
        }
    }

    #[test]
    fn a_handle_forwards_events_in_order_and_a_disabled_one_drops_them() {
        let recorder = Arc::new(Recorder(Mutex::new(Vec::new())));
        let progress = Progress::new(recorder.clone());
        let metrics = StepMetrics {
            step: 3,
            total: 10,
            loss: 0.5,
            tokens_per_s: None,
            eta: Some(Duration::from_secs(7)),
        };
        progress.set_total(10);
        progress.inc(3);
        progress.set_metrics(metrics);
        Progress::disabled().inc(1);
        let events = recorder.0.lock().unwrap().clone();
        assert_eq!(
            events,
            [
                ProgressEvent::Total(10),
                ProgressEvent::Inc(3),
                ProgressEvent::Metrics(metrics)
            ]
        );
    }
}
