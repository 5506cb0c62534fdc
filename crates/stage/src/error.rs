//! The error a stage returns.

use std::path::Path;

/// Why a stage failed. The executor prints it with the instance name and keeps
/// the stage's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// An I/O operation on a named file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory involved.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A parameter was missing or of the wrong type at run time.
    #[error("{0}")]
    Param(String),
    /// An input artifact is missing something or is malformed.
    #[error("input {input}: {message}")]
    Input {
        /// The input's name.
        input: String,
        /// What is wrong with it.
        message: String,
    },
    /// The stage ran and failed for the given reason.
    #[error("{0}")]
    Failed(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// Any other error from a library the stage uses.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl StageError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        StageError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// A failure with a message.
    pub fn failed(message: impl Into<String>) -> Self {
        StageError::Failed(message.into())
    }

    /// A problem with the input named `input`.
    pub fn input(input: impl Into<String>, message: impl Into<String>) -> Self {
        StageError::Input {
            input: input.into(),
            message: message.into(),
        }
    }
}
