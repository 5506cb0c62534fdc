//! The files that one cwm crate writes and another reads.
//!
//! Each shared file has one serde struct here, used by its writer and by every reader, so a
//! change to a format fails to compile in every reader instead of failing at run time. Every
//! top-level file struct carries a `version` field: a reader rejects a version it does not
//! know with [`FormatError::Version`], naming the file, instead of misreading it.
//!
//! [`fs`] holds the one way files are written in cwm: whole or not at all
//! ([`fs::write_atomic`]), and the one way a name is made safe for a file name
//! ([`fs::file_safe`]).

pub mod fs;

use std::path::{Path, PathBuf};

/// A shared file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Where and why parsing failed.
        source: serde_json::Error,
    },
    /// The file was written by a version of cwm whose format this one does not read.
    #[error("{}: format version {found}, this cwm reads version {expected}", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
}

impl FormatError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> FormatError {
        FormatError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A file format with a version number, written as its `version` field.
pub trait Versioned {
    /// The version this build writes and reads.
    const VERSION: u32;
    /// The version the value carries (read from a file, or [`Versioned::VERSION`] when built).
    fn version(&self) -> u32;
}

/// Writes `value` as pretty JSON to `path`, atomically (see [`fs::write_atomic`]).
///
/// # Errors
/// [`FormatError::Io`] naming the file.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), FormatError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|source| FormatError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    text.push('\n');
    fs::write_atomic(path, text.as_bytes()).map_err(|e| FormatError::io(path, e))
}

/// Reads a versioned JSON file written by [`write_json`], rejecting an unknown version.
///
/// # Errors
/// [`FormatError::Io`], [`FormatError::Json`] or [`FormatError::Version`], naming the file.
pub fn read_json<T>(path: &Path) -> Result<T, FormatError>
where
    T: serde::de::DeserializeOwned + Versioned,
{
    let text = std::fs::read_to_string(path).map_err(|e| FormatError::io(path, e))?;
    parse_json(path, &text)
}

/// Parses a versioned JSON text read from `path` (named in errors), rejecting an unknown
/// version.
///
/// # Errors
/// [`FormatError::Json`] or [`FormatError::Version`], naming the file.
pub fn parse_json<T>(path: &Path, text: &str) -> Result<T, FormatError>
where
    T: serde::de::DeserializeOwned + Versioned,
{
    let value: T = serde_json::from_str(text).map_err(|source| FormatError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    if value.version() != T::VERSION {
        return Err(FormatError::Version {
            path: path.to_path_buf(),
            found: value.version(),
            expected: T::VERSION,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Note {
        version: u32,
        text: String,
    }

    impl Versioned for Note {
        const VERSION: u32 = 2;
        fn version(&self) -> u32 {
            self.version
        }
    }

    #[test]
    fn a_written_file_reads_back_and_an_unknown_version_is_refused() {
        let dir = std::env::temp_dir().join(format!("cwm-formats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("note.json");
        let note = Note {
            version: Note::VERSION,
            text: "hello".into(),
        };
        write_json(&path, &note).unwrap();
        assert_eq!(read_json::<Note>(&path).unwrap(), note);

        let old = Note {
            version: 1,
            text: "old".into(),
        };
        write_json(&path, &old).unwrap();
        let err = read_json::<Note>(&path).unwrap_err();
        assert!(matches!(
            err,
            FormatError::Version {
                found: 1,
                expected: 2,
                ..
            }
        ));
        assert!(err.to_string().contains("note.json"), "{err}");

        std::fs::write(&path, "{\"version\": 2}").unwrap();
        let err = read_json::<Note>(&path).unwrap_err();
        assert!(matches!(err, FormatError::Json { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
