//! The errors of training.

use std::path::{Path, PathBuf};

/// Why training failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A setting is invalid or inconsistent.
    #[error("{0}")]
    Config(String),
    /// The `hparams` input (a `select` artifact) is unusable.
    #[error("{path}: {message}")]
    Hparams {
        /// The `selected.json` file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A shared file (the summary, the training configuration, a `select` artifact's
    /// `selected.json`) could not be read or written.
    #[error(transparent)]
    Format(#[from] cwm_formats::FormatError),
    /// A saved partial training state is unusable.
    #[error("partial training state {path}: {message}")]
    Partial {
        /// The state directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading the tokenized games failed.
    #[error(transparent)]
    Data(#[from] cwm_stage_data::DataError),
    /// A model operation failed.
    #[error(transparent)]
    Model(#[from] cwm_models::ModelError),
    /// Writing a Parquet table failed.
    #[error("{path}: {message}")]
    Parquet {
        /// The table.
        path: PathBuf,
        /// The error.
        message: String,
    },
    /// Too many consecutive batches were skipped, or another failure during training.
    #[error("{0}")]
    Failed(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl TrainError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> TrainError {
        TrainError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub(crate) fn partial(path: &Path, message: impl Into<String>) -> TrainError {
        TrainError::Partial {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

impl From<TrainError> for cwm_stage::StageError {
    fn from(e: TrainError) -> Self {
        match e {
            TrainError::Cancelled => cwm_stage::StageError::Cancelled,
            TrainError::Config(message) => cwm_stage::StageError::Param(message),
            other => cwm_stage::StageError::Other(Box::new(other)),
        }
    }
}
