//! The error type of the novelty stage and of its readers.

use std::path::{Path, PathBuf};

use cwm_stage::StageError;

/// Why a novelty run, a read of `novelty.parquet` or a join with a model's steps failed. Every
/// variant that concerns a file names it; join errors name the step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NoveltyError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Parquet file could not be read or written.
    #[error("{}: {source}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: parquet::errors::ParquetError,
    },
    /// An Arrow batch could not be built or read.
    #[error("{}: {source}", path.display())]
    Arrow {
        /// The file the batch belongs to.
        path: PathBuf,
        /// The underlying error.
        source: arrow::error::ArrowError,
    },
    /// A file is not what it should be (a missing column, a wrong type, a bad value).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The tokenize shards could not be read.
    #[error(transparent)]
    Data(#[from] cwm_stage_data::DataError),
    /// A model's step records do not line up with the novelty table.
    #[error("joining step records with the novelty table, record {record}: {message}")]
    Join {
        /// 0-based index of the record.
        record: u64,
        /// What does not agree (the game ids and steps on both sides).
        message: String,
    },
    /// An option is out of range.
    #[error("{0}")]
    Invalid(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl NoveltyError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        NoveltyError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A Parquet error on `path`.
    pub fn parquet(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> Self {
        NoveltyError::Parquet {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An Arrow error on `path`.
    pub fn arrow(path: impl AsRef<Path>, source: arrow::error::ArrowError) -> Self {
        NoveltyError::Arrow {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A format problem in `path`.
    pub fn format(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        NoveltyError::Format {
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }
}

impl From<cwm_formats::FormatError> for NoveltyError {
    fn from(err: cwm_formats::FormatError) -> NoveltyError {
        match err {
            cwm_formats::FormatError::Io { path, source } => NoveltyError::Io { path, source },
            other => NoveltyError::format(other.path(), other.detail()),
        }
    }
}

impl From<NoveltyError> for StageError {
    fn from(err: NoveltyError) -> StageError {
        match err {
            NoveltyError::Cancelled => StageError::Cancelled,
            NoveltyError::Io { path, source } => StageError::io(path, source),
            NoveltyError::Invalid(message) => StageError::Param(message),
            NoveltyError::Data(data) => data.into(),
            other => StageError::Other(Box::new(other)),
        }
    }
}

impl From<crate::parquet_file::WriteError> for NoveltyError {
    fn from(e: crate::parquet_file::WriteError) -> Self {
        use crate::parquet_file::WriteError;
        match e {
            WriteError::Io(path, e) => NoveltyError::io(path, e),
            WriteError::Arrow(path, e) => NoveltyError::arrow(path, e),
            WriteError::Parquet(path, e) => NoveltyError::parquet(path, e),
        }
    }
}
