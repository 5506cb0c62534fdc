//! Why a stage failed, as every executor reports it.

use std::fmt;
use std::path::PathBuf;

use cwm_stage::StageError;

use crate::freshness::IngredientsError;
use crate::store::StoreError;

/// Why one stage failed.
#[derive(Debug, thiserror::Error)]
pub enum StageFailure {
    /// Its key could not be computed.
    #[error(transparent)]
    Key(#[from] IngredientsError),
    /// The store could not lock its key, stage its outputs or commit them.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stage itself failed; its log's last lines follow the error.
    #[error("{fault}{log}")]
    Stage {
        /// What went wrong.
        fault: StageFault,
        /// The end of its log.
        log: LogTail,
    },
    /// The executor cannot give the stage what its `resources:` ask for.
    #[error("{0}")]
    Resources(String),
    /// A job of a cluster executor ended without a result: the cluster's word for why
    /// (time limit, memory, node failure, ...) and the end of the job's log.
    #[error("{cause}{log}")]
    Job {
        /// What the cluster says happened, e.g. `Slurm job 12 hit its time limit (TIMEOUT)`.
        cause: String,
        /// The end of the job's log.
        log: LogTail,
    },
}

/// How a stage's own code failed.
#[derive(Debug, thiserror::Error)]
pub enum StageFault {
    /// It returned an error.
    #[error(transparent)]
    Error(#[from] StageError),
    /// It panicked with this message.
    #[error("stage panicked: {0}")]
    Panicked(String),
}

/// The last lines of a failed stage's log and where the whole log was kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogTail {
    /// Up to the last 5 lines, in order.
    pub lines: Vec<String>,
    /// `artifacts/failed/<instance>.log`, if it could be written.
    pub saved: Option<PathBuf>,
}

/// How many log lines a failure shows.
const LOG_TAIL_LINES: usize = 5;

impl LogTail {
    /// The last lines of `log`, and where the whole of it is kept.
    pub fn of(log: &str, saved: Option<PathBuf>) -> Self {
        let mut lines: Vec<String> = log
            .lines()
            .rev()
            .take(LOG_TAIL_LINES)
            .map(str::to_owned)
            .collect();
        lines.reverse();
        LogTail { lines, saved }
    }
}

/// Indented lines under the error, as `cwm run` prints them.
impl fmt::Display for LogTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.lines.is_empty() {
            f.write_str("\n        log tail:")?;
            for line in &self.lines {
                write!(f, "\n        | {line}")?;
            }
        }
        if let Some(path) = &self.saved {
            write!(f, "\n        full log: {}", path.display())?;
        }
        Ok(())
    }
}
