//! The error type of the evaluate crate.

use std::path::{Path, PathBuf};

use cwm_stage::StageError;

/// Why an evaluation, a prefix binning or a selection failed. Every variant that concerns a
/// file names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Parquet file could not be read or written.
    #[error("{path}: {source}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: parquet::errors::ParquetError,
    },
    /// An Arrow batch could not be built or read.
    #[error("{path}: {source}")]
    Arrow {
        /// The file the batch belongs to.
        path: PathBuf,
        /// The underlying error.
        source: arrow::error::ArrowError,
    },
    /// A file is not what it should be (missing column, bad JSON field, inconsistent sizes).
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model could not be loaded or run.
    #[error("{context}: {source}")]
    Model {
        /// What was being done (usually the checkpoint directory).
        context: String,
        /// The underlying error.
        source: cwm_models::ModelError,
    },
    /// The evaluation data could not be read.
    #[error(transparent)]
    Data(#[from] cwm_stage_data::DataError),
    /// The query engine failed.
    #[error("query over {path}: {message}")]
    Query {
        /// The Parquet file queried.
        path: PathBuf,
        /// The engine's message.
        message: String,
    },
    /// An option is out of range.
    #[error("{0}")]
    Invalid(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl EvalError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        EvalError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A Parquet error on `path`.
    pub fn parquet(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> Self {
        EvalError::Parquet {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An Arrow error on `path`.
    pub fn arrow(path: impl AsRef<Path>, source: arrow::error::ArrowError) -> Self {
        EvalError::Arrow {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A format problem in `path`.
    pub fn format(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        EvalError::Format {
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }

    /// A model error while doing `context`.
    pub fn model(context: impl Into<String>, source: cwm_models::ModelError) -> Self {
        EvalError::Model {
            context: context.into(),
            source,
        }
    }
}

impl From<cwm_formats::FormatError> for EvalError {
    fn from(err: cwm_formats::FormatError) -> EvalError {
        match err {
            cwm_formats::FormatError::Io { path, source } => EvalError::Io { path, source },
            other => EvalError::format(other.path(), other.detail()),
        }
    }
}

impl From<EvalError> for StageError {
    fn from(err: EvalError) -> StageError {
        match err {
            EvalError::Cancelled => StageError::Cancelled,
            EvalError::Io { path, source } => StageError::io(path, source),
            EvalError::Invalid(message) => StageError::Param(message),
            EvalError::Data(data) => data.into(),
            other => StageError::Other(Box::new(other)),
        }
    }
}
