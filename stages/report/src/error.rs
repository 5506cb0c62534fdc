//! The report's error type: every message names the file and, where it applies, the field.

use std::path::{Path, PathBuf};

/// Why a report could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file of an input artifact is not valid JSON.
    #[error("{}: not valid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A field of an input artifact's JSON file is missing or has the wrong type.
    #[error("{}: field `{field}`: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, as a dotted path (`final_val.loss`, `bins[3].steps`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// Two input artifacts claim the same table cell.
    #[error("{0}")]
    Conflict(String),
    /// Drawing a figure failed.
    #[error("figure {}: {message}", path.display())]
    Plot {
        /// The figure file being drawn.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// Counting a model's parameters failed.
    #[error("parameter count of {family} {size}: {message}")]
    Model {
        /// The family.
        family: String,
        /// The size.
        size: String,
        /// The model library's message.
        message: String,
    },
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

impl ReportError {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        ReportError::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// A missing or mistyped field `field` of the JSON file `path`.
    pub fn field(
        path: impl AsRef<Path>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ReportError::Field {
            path: path.as_ref().to_path_buf(),
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<cwm_formats::FormatError> for ReportError {
    fn from(error: cwm_formats::FormatError) -> Self {
        use cwm_formats::FormatError;
        match error {
            FormatError::Io { path, source } => ReportError::Io { path, source },
            FormatError::Json { path, source } => ReportError::Json { path, source },
            FormatError::Field {
                path,
                field,
                message,
            } => ReportError::Field {
                path,
                field,
                message,
            },
            version @ FormatError::Version { .. } => {
                ReportError::field(version.path(), "version", version.detail())
            }
        }
    }
}

impl From<ReportError> for cwm_stage::StageError {
    fn from(error: ReportError) -> Self {
        match error {
            ReportError::Cancelled => cwm_stage::StageError::Cancelled,
            other => cwm_stage::StageError::Other(Box::new(other)),
        }
    }
}
