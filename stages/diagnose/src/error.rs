//! The error type of the `diagnose` stage kind.

use std::path::{Path, PathBuf};

use cwm_stage::StageError;

/// Why a diagnosis failed. Every variant that concerns a file names it, and a problem with
/// one game's rows names the game and the step. A game whose moves the rules engine refuses
/// is not an error: it is counted and skipped (`DiagnoseSummary::skipped`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiagnoseError {
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
    /// A file is not what it should be (a missing column or metadata key, a bad JSON field).
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The rows of one game are not what they should be (steps out of order, a label out of
    /// range, a game split in two).
    #[error("{path}: game {game_id}, step {t}: {message}")]
    Game {
        /// The file.
        path: PathBuf,
        /// The example id.
        game_id: String,
        /// The step.
        t: u32,
        /// What is wrong.
        message: String,
    },
    /// The novelty input could not be read or joined with the predictions.
    #[error(transparent)]
    Novelty(#[from] crate::NoveltyError),
    /// A parameter is out of range.
    #[error("{0}")]
    Invalid(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl DiagnoseError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        DiagnoseError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A Parquet error on `path`.
    pub fn parquet(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> Self {
        DiagnoseError::Parquet {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An Arrow error on `path`.
    pub fn arrow(path: impl AsRef<Path>, source: arrow::error::ArrowError) -> Self {
        DiagnoseError::Arrow {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A format problem in `path`.
    pub fn format(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        DiagnoseError::Format {
            path: path.as_ref().to_path_buf(),
            message: message.into(),
        }
    }

    /// A problem with step `t` of game `game_id` in `path`.
    pub fn game(
        path: impl AsRef<Path>,
        game_id: impl Into<String>,
        t: u32,
        message: impl Into<String>,
    ) -> Self {
        DiagnoseError::Game {
            path: path.as_ref().to_path_buf(),
            game_id: game_id.into(),
            t,
            message: message.into(),
        }
    }
}

impl From<cwm_formats::FormatError> for DiagnoseError {
    fn from(err: cwm_formats::FormatError) -> DiagnoseError {
        match err {
            cwm_formats::FormatError::Io { path, source } => DiagnoseError::Io { path, source },
            other => DiagnoseError::format(other.path(), other.detail()),
        }
    }
}

impl From<DiagnoseError> for StageError {
    fn from(err: DiagnoseError) -> StageError {
        match err {
            DiagnoseError::Cancelled => StageError::Cancelled,
            DiagnoseError::Io { path, source } => StageError::io(path, source),
            DiagnoseError::Invalid(message) => StageError::Param(message),
            other => StageError::Other(Box::new(other)),
        }
    }
}

impl From<crate::parquet_file::WriteError> for DiagnoseError {
    fn from(e: crate::parquet_file::WriteError) -> Self {
        use crate::parquet_file::WriteError;
        match e {
            WriteError::Io(path, e) => DiagnoseError::io(path, e),
            WriteError::Arrow(path, e) => DiagnoseError::arrow(path, e),
            WriteError::Parquet(path, e) => DiagnoseError::parquet(path, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file_the_game_and_the_step() {
        let err = DiagnoseError::game("p/predictions.parquet", "cwm_ab", 7, "t jumps to 9");
        assert_eq!(
            err.to_string(),
            "p/predictions.parquet: game cwm_ab, step 7: t jumps to 9"
        );
        let stage: StageError = DiagnoseError::Invalid("bin must be positive".into()).into();
        assert!(matches!(stage, StageError::Param(_)));
        let stage: StageError = DiagnoseError::Cancelled.into();
        assert!(matches!(stage, StageError::Cancelled));
        let format: DiagnoseError = cwm_formats::FormatError::Field {
            path: "s.json".into(),
            field: "split".into(),
            message: "missing".into(),
        }
        .into();
        assert_eq!(format.to_string(), "s.json: field `split`: missing");
    }
}
