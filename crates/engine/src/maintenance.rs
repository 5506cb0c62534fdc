//! Store maintenance: `cwm verify` (rehash, quarantine what is corrupt) and
//! `cwm gc` (remove what nothing refers to).
//!
//! Both are crash-safe in the store's sense: a key record is removed before
//! the artifacts it names, and an artifact leaves `objects/` by one atomic
//! rename (into `quarantine/` or `tmp/` for deletion), so a process killed at
//! any moment leaves a store that verifies clean.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use cwm_formats::fs::write_atomic;
use serde::{Deserialize, Serialize};

use crate::store::hashing::{self, hash_file};
use crate::store::{FileEntry, KeyRecord, Manifest, Store, StoreError, rfc3339};

/// One artifact found damaged by [`verify`].
#[derive(Debug, Clone, Serialize)]
pub struct Corrupt {
    /// The artifact's hash.
    pub hash: String,
    /// What is wrong.
    pub reason: String,
    /// Where it was moved.
    pub quarantined_to: PathBuf,
    /// Key records removed because they named it.
    pub keys_removed: usize,
}

/// What [`verify`] found.
#[derive(Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Artifacts rehashed.
    pub checked: usize,
    /// Bytes rehashed.
    pub bytes: u64,
    /// Artifacts named but absent from the store.
    pub missing: Vec<String>,
    /// Damaged artifacts, now quarantined.
    pub corrupt: Vec<Corrupt>,
}

/// Rehashes every file of each artifact in `hashes` (ignoring the stat
/// cache), checks the manifest's digest and the directory name, and moves a
/// damaged artifact to `quarantine/`, removing the key records that name it,
/// so that the next run recomputes (or the next pull fetches) it.
pub fn verify(store: &Store, hashes: &BTreeSet<String>) -> Result<VerifyReport, StoreError> {
    let mut report = VerifyReport::default();
    for hash in hashes {
        if !store.artifact_dir(hash).exists() {
            report.missing.push(hash.clone());
            continue;
        }
        report.checked += 1;
        let problem = match store.manifest(hash) {
            Err(e) => Some(format!("unreadable manifest: {e}")),
            Ok(manifest) => rehash(store, hash, &manifest, &mut report.bytes).err(),
        };
        if let Some(reason) = problem {
            let keys_removed = remove_keys_naming(store, &BTreeSet::from([hash.clone()]))?;
            let quarantined_to = store.quarantine(hash)?;
            report.corrupt.push(Corrupt {
                hash: hash.clone(),
                reason,
                quarantined_to,
                keys_removed,
            });
        }
    }
    Ok(report)
}

/// Checks artifact `hash` against `manifest`, rehashing every file (and
/// adding the bytes read to `bytes`); the first problem found, if any.
fn rehash(store: &Store, hash: &str, manifest: &Manifest, bytes: &mut u64) -> Result<(), String> {
    if manifest.hash != hash || hashing::tree_digest(&manifest.files) != hash {
        return Err("the manifest does not match the artifact's name".to_owned());
    }
    let data = store.data_dir(hash);
    let on_disk = hashing::list_files(&data).unwrap_or_default();
    if on_disk.len() != manifest.files.len() {
        return Err(format!(
            "{} files on disk, {} in the manifest",
            on_disk.len(),
            manifest.files.len()
        ));
    }
    for f in &manifest.files {
        rehash_file(store, &data.join(&f.path), f)?;
        *bytes += f.size;
    }
    Ok(())
}

/// Checks one file of an artifact against its manifest entry; a file that
/// matches seeds the stat cache.
fn rehash_file(store: &Store, path: &Path, f: &FileEntry) -> Result<(), String> {
    let meta = fs::metadata(path).map_err(|_| format!("{}: missing", f.path))?;
    if meta.len() != f.size {
        return Err(format!(
            "{}: {} bytes, expected {}",
            f.path,
            meta.len(),
            f.size
        ));
    }
    match hash_file(path, f.size) {
        Ok(h) if h == f.blake3 => {
            let _ = store.stat_cache().remember(path, &h);
            Ok(())
        }
        Ok(_) => Err(format!("{}: content changed", f.path)),
        Err(e) => Err(format!("{}: {e}", f.path)),
    }
}

/// Removes every key record that names one of `hashes`; returns how many.
fn remove_keys_naming(store: &Store, hashes: &BTreeSet<String>) -> Result<usize, StoreError> {
    let mut removed = 0;
    for (key, record) in store.key_records() {
        if record.outputs.values().any(|h| hashes.contains(h)) {
            store.remove_key(&key)?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Options of `cwm gc`.
#[derive(Debug, Clone, Default)]
pub struct GcOptions {
    /// Keep only what `cwm.lock` refers to (plus `keep_last`).
    pub keep_lock: bool,
    /// Keep the results of the last N runs (plus the lock with `keep_lock`).
    pub keep_last: Option<usize>,
    /// Only report what would be removed.
    pub dry_run: bool,
    /// The keys of the pipeline's stale instances, whose partial state a later run may resume
    /// and gc keeps; `None` when the pipeline could not be loaded, and then only the partial
    /// state of finished keys goes.
    pub stale_keys: Option<BTreeSet<String>>,
}

/// What [`gc`] removed (or would remove).
#[derive(Debug, Default, Serialize)]
pub struct GcReport {
    /// Key records removed.
    pub keys_removed: Vec<String>,
    /// Artifacts removed, with their sizes.
    pub artifacts_removed: Vec<(String, u64)>,
    /// Bytes freed.
    pub bytes_freed: u64,
    /// Partial states removed (by key): of finished keys, or of keys no stale instance has.
    pub partials_removed: Vec<String>,
}

/// Removes what nothing refers to. Without `keep_lock` or `keep_last`, only
/// artifacts that no key record names (left by interrupted runs) go. With
/// them, key records outside the lock / the last N runs go too, and then
/// every artifact no remaining key record names.
pub fn gc(
    store: &Store,
    lock_keys: &BTreeSet<String>,
    options: &GcOptions,
) -> Result<GcReport, StoreError> {
    let _exclusive = store.lock_exclusive()?;
    let mut report = GcReport::default();
    let records = store.key_records();
    let narrowing = options.keep_lock || options.keep_last.is_some();
    let mut keep_keys: BTreeSet<String> = BTreeSet::new();
    if narrowing {
        if options.keep_lock {
            keep_keys.extend(lock_keys.iter().cloned());
        }
        if let Some(n) = options.keep_last {
            for run in store.runs().into_iter().rev().take(n) {
                keep_keys.extend(run.keys);
            }
        }
    } else {
        keep_keys.extend(records.keys().cloned());
    }
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    for (key, record) in &records {
        if keep_keys.contains(key) {
            referenced.extend(record.outputs.values().cloned());
        } else {
            report.keys_removed.push(key.clone());
            if !options.dry_run {
                store.remove_key(key)?;
            }
        }
    }
    for hash in store.object_hashes() {
        if referenced.contains(&hash) {
            continue;
        }
        let size = store.manifest(&hash).map(|m| m.size).unwrap_or(0);
        report.bytes_freed += size;
        report.artifacts_removed.push((hash.clone(), size));
        if !options.dry_run {
            store.remove_artifact(&hash)?;
        }
    }
    report.partials_removed = abandoned_partials(store, &records, options.stale_keys.as_ref());
    if !options.dry_run {
        for key in &report.partials_removed {
            store.remove_partial(key)?;
        }
    }
    Ok(report)
}

/// The partial states nothing will resume: those whose key has a finished record (the run
/// completed; `records` are the records as gc found them, so a dry run agrees with a real one)
/// and, when the stale instances are known, those whose key none of them has.
fn abandoned_partials(
    store: &Store,
    records: &BTreeMap<String, KeyRecord>,
    stale_keys: Option<&BTreeSet<String>>,
) -> Vec<String> {
    store
        .partial_keys()
        .into_iter()
        .filter(|key| {
            records.contains_key(key) || stale_keys.is_some_and(|stale| !stale.contains(key))
        })
        .collect()
}

/// The record of one `cwm run`, kept in `artifacts/runs/` for `gc --keep-last`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// When the run finished, RFC 3339.
    pub finished: String,
    /// Instance name -> key of every instance that finished in the run.
    pub instances: BTreeMap<String, String>,
    /// The keys, for quick lookup.
    pub keys: Vec<String>,
}

impl Store {
    /// Records a finished run (for `gc --keep-last`).
    pub(crate) fn record_run(&self, instances: BTreeMap<String, String>) -> Result<(), StoreError> {
        if instances.is_empty() {
            return Ok(());
        }
        let dir = self.root().join("runs");
        fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        let now = std::time::SystemTime::now();
        let finished = rfc3339(now);
        let record = RunRecord {
            finished: finished.clone(),
            keys: instances.values().cloned().collect(),
            instances,
        };
        let path = dir.join(format!(
            "{}-{}.json",
            finished.replace(':', ""),
            std::process::id()
        ));
        let bytes = serde_json::to_vec_pretty(&record).map_err(|e| StoreError::Malformed {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &bytes).map_err(|source| StoreError::Io { path, source })
    }

    /// Recorded runs, oldest first.
    pub(crate) fn runs(&self) -> Vec<RunRecord> {
        let Ok(entries) = fs::read_dir(self.root().join("runs")) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .iter()
            .filter_map(|p| serde_json::from_slice(&fs::read(p).ok()?).ok())
            .collect()
    }

    /// Every key record, by key (unreadable ones skipped).
    pub(crate) fn key_records(&self) -> BTreeMap<String, KeyRecord> {
        let Ok(entries) = fs::read_dir(self.root().join("keys")) else {
            return BTreeMap::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let key = name.strip_suffix(".json")?.to_owned();
                let record = self.lookup(&key).ok()??;
                Some((key, record))
            })
            .collect()
    }
}
