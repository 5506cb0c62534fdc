//! The files that one cwm crate writes and another reads.
//!
//! Each shared file has one serde struct here, used by its writer and by every reader, so a
//! change to a format fails to compile in every reader instead of failing at run time. Every
//! top-level file struct carries a `version` field: a reader rejects a version it does not
//! know with [`FormatError::Version`], naming the file, instead of misreading it.
//!
//! One module per producing stage:
//!
//! | module | files | written by | read by |
//! |---|---|---|---|
//! | [`tokenize`] | `coverage.json` | tokenize (`cwm-stage-data`) | report |
//! | [`train`] | `summary.json`, `checkpoint/train_config.json` | train (`cwm-stage-train`) | select, report; train (resume) |
//! | [`evaluate`] | `summary.json` (and the rows of its Parquet tables) | evaluate (`cwm-stage-evaluate`) | bin_prefix, report |
//! | [`predictions`] | `predictions.parquet` (column names, rows; schema with its writer) | evaluate | diagnose, `cwm query` |
//! | [`novelty`] | `summary.json`, `novelty.parquet` rows | novelty (`cwm-stage-diagnose`) | diagnose, report |
//! | [`diagnose`] | `summary.json` | diagnose (`cwm-stage-diagnose`) | report |
//! | [`markov`] | `summary.json` | markov (`cwm-stage-probe`) | report |
//! | [`edit`] | `summary.json` | edit (`cwm-stage-probe`) | report |
//! | [`probe`] | `summary.json`, `probes.json` + `probes.bin` | probe (`cwm-stage-probe`) | report; editing (weights) |
//! | [`bins`] | `summary.json` (and `bins.parquet`) | bin_prefix (`cwm-stage-evaluate`) | report |
//! | [`select`] | `selected.json` | select (`cwm-stage-evaluate`) | train, report |
//!
//! [`labels`] declares the 75 state labels (names of their groups and class counts) that the
//! chess encoding writes and the models predict.
//!
//! [`fs`] holds the one way files are written in cwm: whole or not at all
//! ([`fs::write_atomic`]), and the one way a name is made safe for a file name
//! ([`fs::file_safe`]).

pub mod bins;
mod de;
pub mod diagnose;
pub mod edit;
pub mod evaluate;
pub mod float;
pub mod fs;
pub mod labels;
pub mod markov;
pub mod novelty;
pub mod predictions;
pub mod probe;
pub mod select;
pub mod tokenize;
pub mod train;

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
    /// A field of the file is missing or has the wrong type or value.
    #[error("{}: field `{field}`: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The field, as a dotted path (`hparams.lr`, `bins.3.steps`; empty for the whole
        /// file).
        field: String,
        /// What is wrong with it.
        message: String,
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

    /// The file.
    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io { path, .. }
            | FormatError::Json { path, .. }
            | FormatError::Field { path, .. }
            | FormatError::Version { path, .. } => path,
        }
    }

    /// What is wrong, without the file (for errors that name it themselves).
    pub fn detail(&self) -> String {
        match self {
            FormatError::Io { source, .. } => source.to_string(),
            FormatError::Json { source, .. } => source.to_string(),
            FormatError::Field { field, message, .. } => format!("field `{field}`: {message}"),
            FormatError::Version {
                found, expected, ..
            } => format!("format version {found}, this cwm reads version {expected}"),
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
/// version. A file without a `version` field reads as the version its struct's serde default
/// gives (1 for every format so far: the files cwm wrote before formats were versioned).
///
/// # Errors
/// [`FormatError::Json`] when the text is not JSON, [`FormatError::Version`] for another
/// version, [`FormatError::Field`] naming the first field that is missing or ill-typed.
pub fn parse_json<T>(path: &Path, text: &str) -> Result<T, FormatError>
where
    T: serde::de::DeserializeOwned + Versioned,
{
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|source| FormatError::Json {
            path: path.to_path_buf(),
            source,
        })?;
    from_value(path, &value)
}

/// [`parse_json`] of an already parsed JSON value read from `path`.
///
/// # Errors
/// As [`parse_json`], but for [`FormatError::Json`].
pub fn from_value<T>(path: &Path, value: &serde_json::Value) -> Result<T, FormatError>
where
    T: serde::de::DeserializeOwned + Versioned,
{
    let version_error = |found: u64| FormatError::Version {
        path: path.to_path_buf(),
        found: u32::try_from(found).unwrap_or(u32::MAX),
        expected: T::VERSION,
    };
    // The version is checked before the fields: another version may have other fields, and
    // "format version 2" says more than the first field that does not fit.
    if let Some(found) = value.get("version").and_then(serde_json::Value::as_u64)
        && found != u64::from(T::VERSION)
    {
        return Err(version_error(found));
    }
    let parsed = T::deserialize(de::Node::root(value)).map_err(|e| FormatError::Field {
        path: path.to_path_buf(),
        field: e.field.unwrap_or_default(),
        message: e.message,
    })?;
    if parsed.version() != T::VERSION {
        return Err(version_error(u64::from(parsed.version())));
    }
    Ok(parsed)
}

/// Deserializes a count: a non-negative integer, or an integral float such as `5000.0` (a
/// value that went through f64 on its way into the file).
fn count<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct Count;
    impl serde::de::Visitor<'_> for Count {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a non-negative integer")
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            if v.fract() == 0.0 && (0.0..2f64.powi(64)).contains(&v) {
                Ok(v as u64)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    deserializer.deserialize_any(Count)
}

/// The version of a file written before formats were versioned: the serde default of every
/// `version` field whose format has been version 1 since.
pub fn version_1() -> u32 {
    1
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh empty directory for one test.
    pub(crate) fn scratch(tag: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "cwm-formats-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes `value` with [`crate::write_json`], reads it back with [`crate::read_json`] and
    /// checks it is unchanged.
    pub(crate) fn round_trip<T>(value: &T)
    where
        T: serde::Serialize + serde::de::DeserializeOwned + crate::Versioned + PartialEq,
        T: std::fmt::Debug,
    {
        let dir = scratch("round-trip");
        let path = dir.join("file.json");
        crate::write_json(&path, value).unwrap();
        let back: T = crate::read_json(&path).unwrap();
        assert_eq!(&back, value);
        assert_eq!(back.version(), T::VERSION);
        std::fs::remove_dir_all(&dir).unwrap();
    }
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
        assert!(
            matches!(&err, FormatError::Field { field, .. } if field == "text"),
            "{err}"
        );
        assert!(err.to_string().ends_with("field `text`: missing"), "{err}");
        std::fs::write(&path, "{\"version\": 3, \"text\": 1}").unwrap();
        let err = read_json::<Note>(&path).unwrap_err();
        assert!(
            matches!(err, FormatError::Version { found: 3, .. }),
            "the version is checked before the fields: {err}"
        );
        std::fs::write(&path, "{\"version\": 2,").unwrap();
        let err = read_json::<Note>(&path).unwrap_err();
        assert!(matches!(err, FormatError::Json { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
