//! `cwm.lock`: the exact results of the last run, meant to be committed.
//!
//! One entry per instance: its key, the key's ingredients (so `cwm status`
//! can name what changed, e.g. `params: lr 0.0001 → 0.0003`), a params digest
//! and the hash of every output. A collaborator who has the same lock and
//! the same artifacts (pulled by hash) has exactly the same results.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::key::KeyIngredients;

/// The lock file's contents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LockFile {
    /// Format version.
    pub(crate) version: u32,
    /// One entry per instance, in pipeline order.
    #[serde(default, rename = "stage")]
    pub stages: Vec<LockEntry>,
}

/// The locked result of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockEntry {
    /// Instance name.
    pub name: String,
    /// Stage kind.
    pub(crate) kind: String,
    /// The cache key.
    pub key: String,
    /// The kind's code fingerprint.
    pub(crate) code: String,
    /// Digest of the canonical params.
    pub(crate) params_digest: String,
    /// Param name -> canonical value.
    #[serde(default)]
    pub(crate) params: BTreeMap<String, String>,
    /// Input name -> artifact hashes.
    #[serde(default)]
    pub(crate) inputs: BTreeMap<String, Vec<String>>,
    /// Dependency file -> blake3.
    #[serde(default)]
    pub(crate) deps: BTreeMap<String, String>,
    /// Output name -> artifact hash.
    pub outputs: BTreeMap<String, String>,
}

impl LockEntry {
    /// An entry from a finished instance.
    pub(crate) fn new(
        name: &str,
        key: &str,
        ingredients: &KeyIngredients,
        outputs: &BTreeMap<String, String>,
    ) -> Self {
        LockEntry {
            name: name.to_owned(),
            kind: ingredients.kind.clone(),
            key: key.to_owned(),
            code: ingredients.code.clone(),
            params_digest: ingredients.params_digest(),
            params: ingredients.params.clone(),
            inputs: ingredients.inputs.clone(),
            deps: ingredients.deps.clone(),
            outputs: outputs.clone(),
        }
    }
}

/// Errors reading the lock file.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a valid lock file.
    #[error("{path}: not a valid cwm.lock: {message}")]
    Invalid {
        /// The lock file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
}

const HEADER: &str = "# cwm.lock: written by `cwm run`. Commit it: it pins the exact result of every\n# stage (key and output hashes), so collaborators can share results by hash.\n\n";

impl LockFile {
    /// `cwm.lock` beside the pipeline file.
    pub fn path_for(pipeline_dir: &Path) -> PathBuf {
        pipeline_dir.join("cwm.lock")
    }

    /// Reads the lock file; a missing file is an empty lock.
    pub fn read(path: &Path) -> Result<LockFile, LockError> {
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LockFile::default()),
            Err(source) => {
                return Err(LockError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        toml::from_str(&text).map_err(|e| LockError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// The entry for instance `name`.
    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.stages.iter().find(|e| e.name == name)
    }

    /// Writes the lock file atomically, only if its contents change.
    pub(crate) fn write(&self, path: &Path) -> Result<(), LockError> {
        let body = toml::to_string(self).map_err(|e| LockError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let text = format!("{HEADER}{body}");
        if fs::read_to_string(path).is_ok_and(|old| old == text) {
            return Ok(());
        }
        cwm_formats::fs::write_atomic(path, text.as_bytes()).map_err(|source| LockError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_toml() {
        let mut ing = KeyIngredients {
            kind: "command".into(),
            code: "c".into(),
            ..Default::default()
        };
        ing.params.insert("cmd".into(), "\"echo\"".into());
        ing.inputs.insert("x".into(), vec!["h1".into()]);
        let outputs = BTreeMap::from([("out".to_owned(), "h2".to_owned())]);
        let lock = LockFile {
            version: 1,
            stages: vec![LockEntry::new("a[x=1]", &ing.key(), &ing, &outputs)],
        };
        let dir = std::env::temp_dir().join(format!("cwm-lock-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cwm.lock");
        lock.write(&path).unwrap();
        assert_eq!(LockFile::read(&path).unwrap(), lock);
        assert!(fs::read_to_string(&path).unwrap().starts_with("# cwm.lock"));
        assert_eq!(
            LockFile::read(&dir.join("none")).unwrap(),
            LockFile::default()
        );
        fs::write(&path, "version = [").unwrap();
        assert!(
            LockFile::read(&path)
                .unwrap_err()
                .to_string()
                .contains("not a valid cwm.lock")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
