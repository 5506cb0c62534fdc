//! The error type of the probe crate.

use std::path::{Path, PathBuf};

use cwm_stage::StageError;

/// Why probing failed. Every variant that concerns a file names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A shared file could not be read or written.
    #[error(transparent)]
    Format(#[from] cwm_formats::FormatError),
    /// The model could not be loaded or run.
    #[error("{context}: {source}")]
    Model {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: cwm_models::ModelError,
    },
    /// The games could not be read.
    #[error(transparent)]
    Data(#[from] cwm_stage_data::DataError),
    /// A tensor could not be read back from the device.
    #[error("cannot read back {what}: {message}")]
    Readback {
        /// What was read.
        what: &'static str,
        /// The backend's message.
        message: String,
    },
    /// A parameter or an input is unusable.
    #[error("{0}")]
    Invalid(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl ProbeError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> ProbeError {
        ProbeError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A model error while doing `context`.
    pub fn model(context: impl Into<String>, source: cwm_models::ModelError) -> ProbeError {
        ProbeError::Model {
            context: context.into(),
            source,
        }
    }
}

impl From<ProbeError> for StageError {
    fn from(err: ProbeError) -> StageError {
        match err {
            ProbeError::Cancelled => StageError::Cancelled,
            ProbeError::Io { path, source } => StageError::io(path, source),
            ProbeError::Invalid(message) => StageError::Param(message),
            ProbeError::Data(data) => data.into(),
            other => StageError::Other(Box::new(other)),
        }
    }
}
