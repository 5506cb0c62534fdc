//! Progress reporting from a running stage to the executor's display.

use std::sync::Arc;

/// One progress update from a stage.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressEvent {
    /// The total amount of work, in the stage's own units.
    Total(u64),
    /// This much more work is done.
    Inc(u64),
    /// A short status message (e.g. "epoch 2, loss 0.31").
    Message(String),
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
}
