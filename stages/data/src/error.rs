//! The library's error type.

use std::path::{Path, PathBuf};

use cwm_stage::StageError;

/// Why a data operation failed. Bad *games* are never errors (they are counted rejections);
/// these are failures of files, formats, the network or the caller's arguments.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// An I/O operation on a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A Parquet file could not be read or written.
    #[error("{}: {source}", path.display())]
    Parquet {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: parquet::errors::ParquetError,
    },
    /// Arrow data could not be assembled or decoded.
    #[error("{}: {source}", path.display())]
    Arrow {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: arrow::error::ArrowError,
    },
    /// A file does not have the expected layout (a missing column, a wrong type, a bad value).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A JSONL line could not be written or read.
    #[error("{}: line {line}: {source}", path.display())]
    Jsonl {
        /// The file involved.
        path: PathBuf,
        /// 1-based line number (0 when writing).
        line: u64,
        /// The underlying error.
        source: cwm_chess::jsonl::JsonlError,
    },
    /// A stored move sequence is not legal from the initial position.
    #[error("game {id}: move {ply} (id {move_id}) is not legal")]
    IllegalStoredMove {
        /// The game's id.
        id: String,
        /// 1-based ply.
        ply: usize,
        /// The packed move id.
        move_id: u16,
    },
    /// A download failed after its retries.
    #[error("download {url}: {message}")]
    Download {
        /// The URL.
        url: String,
        /// What went wrong (the last error).
        message: String,
    },
    /// A downloaded or copied file does not have the expected checksum.
    #[error("{algorithm} checksum mismatch for {}: expected {expected}, got {actual}", path.display())]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// `sha256` or `blake3`.
        algorithm: &'static str,
        /// The expected hex digest.
        expected: String,
        /// The digest of the file.
        actual: String,
    },
    /// The caller's arguments are invalid.
    #[error("{0}")]
    Invalid(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl DataError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> DataError {
        DataError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A Parquet error on `path`.
    pub fn parquet(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> DataError {
        DataError::Parquet {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An Arrow error on `path`.
    pub fn arrow(path: impl AsRef<Path>, source: arrow::error::ArrowError) -> DataError {
        DataError::Arrow {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A layout problem in `path`.
    pub fn format(path: impl AsRef<Path>, message: impl Into<String>) -> DataError {
        DataError::Format {
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }
}

impl From<cwm_formats::FormatError> for DataError {
    fn from(err: cwm_formats::FormatError) -> DataError {
        match err {
            cwm_formats::FormatError::Io { path, source } => DataError::Io { path, source },
            other => DataError::format(other.path(), other.detail()),
        }
    }
}

impl From<DataError> for StageError {
    fn from(err: DataError) -> StageError {
        match err {
            DataError::Cancelled => StageError::Cancelled,
            DataError::Io { path, source } => StageError::io(path, source),
            other => StageError::Other(Box::new(other)),
        }
    }
}
