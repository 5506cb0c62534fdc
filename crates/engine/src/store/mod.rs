//! The local artifact store, `artifacts/` beside the pipeline file.
//!
//! Layout:
//! ```text
//! artifacts/
//!   objects/<hash>/data/...       an artifact's files (read-only)
//!   objects/<hash>/manifest.json  files with sizes and blake3, the producing
//!                                 key's ingredients, cwm version, times, host
//!   objects/<hash>/log.txt        the producing stage's log
//!   keys/<key>.json               stage key -> {output name: artifact hash}
//!   tmp/<pid>-<n>-<instance>/     work in progress, never read as finished
//!   statcache.json                (size, mtime, inode) -> blake3 per file
//! ```
//!
//! Invariants:
//! - An `objects/<hash>` directory appears only by an atomic rename of a
//!   complete, fsynced directory; its name is the digest of its `data/` files.
//! - `keys/<key>.json` is written (atomically) only after every output it
//!   names is in `objects/`. It is the "done" record: a stage killed at any
//!   moment leaves at most orphaned temp or object directories, never a key.
//! - Nothing in `objects/` is modified after the rename.

pub(crate) mod hashing;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use cwm_formats::fs::{file_safe, write_atomic};
use serde::{Deserialize, Serialize};

use crate::key::KeyIngredients;
use hashing::StatCache;

pub use hashing::FileEntry;

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O operation on a path failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A manifest or key record could not be read.
    #[error("{path}: malformed store record: {message}")]
    Malformed {
        /// The record's path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The manifest stored beside an artifact's files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version.
    pub(crate) format: u32,
    /// The artifact's content hash (digest of `files`).
    pub hash: String,
    /// Every file under `data/`, sorted by path.
    pub files: Vec<FileEntry>,
    /// Total size of the files.
    pub size: u64,
    /// Who produced it.
    pub producer: Producer,
    /// The cwm version that produced it.
    pub cwm_version: String,
    /// When the stage started, RFC 3339 UTC.
    pub started: String,
    /// When the stage finished, RFC 3339 UTC.
    pub finished: String,
    /// Wall time of the stage in seconds.
    pub duration_s: f64,
    /// The machine it ran on.
    pub host: String,
    /// The log file beside the manifest.
    pub log: String,
}

/// The producing instance and its key's ingredients.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Producer {
    /// Instance name.
    pub instance: String,
    /// Output name within the instance.
    pub output: String,
    /// The stage key.
    pub(crate) key: String,
    /// Everything the key was computed from.
    pub(crate) ingredients: KeyIngredients,
}

/// The record of a finished stage: its key and output hashes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct KeyRecord {
    /// Record format version.
    pub format: u32,
    /// The instance that produced it (informational: keys do not depend on names).
    pub instance: String,
    /// Output name -> artifact hash.
    pub outputs: BTreeMap<String, String>,
}

/// The state of an artifact on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Integrity {
    /// Every file is present with the recorded size and hash.
    Intact,
    /// The artifact directory or its manifest is absent.
    Missing,
    /// A file is missing or differs; the string says which.
    Corrupt(String),
}

/// A directory where a running stage writes its outputs before commit.
#[derive(Debug)]
pub(crate) struct Staging {
    /// The staging root (`tmp/<pid>-<n>-<instance>`).
    pub root: PathBuf,
    /// Output name -> directory to fill.
    pub outputs: BTreeMap<String, PathBuf>,
    /// The stage log file.
    pub log: PathBuf,
}

/// What [`Store::commit`] needs besides the staged files.
#[derive(Debug, Clone)]
pub(crate) struct CommitInfo<'a> {
    /// Instance name.
    pub instance: &'a str,
    /// The stage key.
    pub key: &'a str,
    /// The key's ingredients.
    pub ingredients: &'a KeyIngredients,
    /// When the stage started.
    pub started: SystemTime,
    /// When it finished.
    pub finished: SystemTime,
}

/// An exclusive lock on one stage key, held while that stage runs so that
/// two `cwm` processes on one store never compute the same key at once.
#[derive(Debug)]
pub struct KeyLock {
    _file: File,
}

/// The artifact store of one pipeline.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    stat_cache: StatCache,
}

static STAGING_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Store {
    /// Opens (creating if needed) the store at `root` and removes temp
    /// directories left by processes that are no longer running.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        for sub in ["objects", "keys", "tmp", "locks"] {
            let dir = root.join(sub);
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
        let store = Store {
            root: root.to_path_buf(),
            stat_cache: StatCache::load(&root.join("statcache.json")),
        };
        store.remove_dead_staging();
        Ok(store)
    }

    /// The store's root directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The stat cache used for hashing files.
    pub(crate) fn stat_cache(&self) -> &StatCache {
        &self.stat_cache
    }

    /// Saves the stat cache; call once at the end of a command.
    pub fn save_stat_cache(&self) -> Result<(), StoreError> {
        let path = self.root.join("statcache.json");
        self.stat_cache.save(&path).map_err(io_err(&path))
    }

    /// The partial-state directory of a key (`partial/<key>`): where a resumable stage keeps
    /// its state between interrupted runs (see `StageContext::partial_dir`). It may not exist.
    pub(crate) fn partial_dir(&self, key: &str) -> PathBuf {
        self.root.join("partial").join(key)
    }

    /// The keys that have a partial-state directory.
    pub(crate) fn partial_keys(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.root.join("partial")) else {
            return Vec::new();
        };
        let mut keys: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|name| is_hash(name))
            .collect();
        keys.sort();
        keys
    }

    /// Removes a key's partial state, if any.
    pub(crate) fn remove_partial(&self, key: &str) -> Result<(), StoreError> {
        let dir = self.partial_dir(key);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path: dir, source }),
        }
    }

    /// `objects/<hash>`.
    pub fn artifact_dir(&self, hash: &str) -> PathBuf {
        self.root.join("objects").join(hash)
    }

    /// `objects/<hash>/data`: what stages read.
    pub fn data_dir(&self, hash: &str) -> PathBuf {
        self.artifact_dir(hash).join("data")
    }

    fn key_path(&self, key: &str) -> PathBuf {
        self.root.join("keys").join(format!("{key}.json"))
    }

    /// The record of a finished stage with this key, if any.
    pub(crate) fn lookup(&self, key: &str) -> Result<Option<KeyRecord>, StoreError> {
        let path = self.key_path(key);
        match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Malformed {
                        path,
                        message: e.to_string(),
                    })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// The manifest of artifact `hash`. A manifest naming a file outside its
    /// artifact (absolute path, `..`, empty component) is refused as
    /// malformed, so no manifest can make cwm read or write outside the store.
    pub fn manifest(&self, hash: &str) -> Result<Manifest, StoreError> {
        let path = self.artifact_dir(hash).join("manifest.json");
        if !is_hash(hash) {
            return Err(StoreError::Malformed {
                path,
                message: format!("`{hash}` is not an artifact hash"),
            });
        }
        let bytes = fs::read(&path).map_err(io_err(&path))?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Malformed {
                path: path.clone(),
                message: e.to_string(),
            })?;
        if let Some(bad) = manifest.files.iter().find(|f| !is_safe_relative(&f.path)) {
            return Err(StoreError::Malformed {
                path,
                message: format!("file path `{}` leaves the artifact", bad.path),
            });
        }
        Ok(manifest)
    }

    /// Checks artifact `hash` against its manifest. Files whose stat matches
    /// the stat cache are not reread.
    pub(crate) fn integrity(&self, hash: &str) -> Integrity {
        let Ok(manifest) = self.manifest(hash) else {
            return Integrity::Missing;
        };
        let data = self.data_dir(hash);
        for f in &manifest.files {
            let path = data.join(&f.path);
            match fs::metadata(&path) {
                Ok(meta) if meta.len() == f.size => {}
                Ok(meta) => {
                    return Integrity::Corrupt(format!(
                        "{} has {} bytes, expected {}",
                        f.path,
                        meta.len(),
                        f.size
                    ));
                }
                Err(_) => return Integrity::Corrupt(format!("{} is missing", f.path)),
            }
            match self.stat_cache.hash(&path) {
                Ok(h) if h == f.blake3 => {}
                Ok(_) => return Integrity::Corrupt(format!("{} has changed", f.path)),
                Err(e) => return Integrity::Corrupt(format!("{}: {e}", f.path)),
            }
        }
        Integrity::Intact
    }

    /// Takes the exclusive lock of stage key `key`, waiting while another
    /// process holds it. Returns the lock and whether it had to wait. The lock
    /// is released when the returned guard is dropped (or the process dies).
    pub(crate) fn lock_key(&self, key: &str) -> Result<(KeyLock, bool), StoreError> {
        let path = self.root.join("locks").join(format!("{key}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let waited = match file.try_lock() {
            Ok(()) => false,
            Err(fs::TryLockError::WouldBlock) => {
                file.lock().map_err(io_err(&path))?;
                true
            }
            Err(fs::TryLockError::Error(e)) => return Err(StoreError::Io { path, source: e }),
        };
        Ok((KeyLock { _file: file }, waited))
    }

    fn store_lock_file(&self) -> Result<File, StoreError> {
        let path = self.root.join("locks").join("store.lock");
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))
    }

    /// A shared lock on the whole store, held by `cwm run`, `push` and `pull`
    /// for their duration; `gc` waits for them.
    pub fn lock_shared(&self) -> Result<KeyLock, StoreError> {
        let file = self.store_lock_file()?;
        file.lock_shared()
            .map_err(io_err(&self.root.join("locks/store.lock")))?;
        Ok(KeyLock { _file: file })
    }

    /// The exclusive lock on the whole store, held by `gc`.
    pub(crate) fn lock_exclusive(&self) -> Result<KeyLock, StoreError> {
        let file = self.store_lock_file()?;
        file.lock()
            .map_err(io_err(&self.root.join("locks/store.lock")))?;
        Ok(KeyLock { _file: file })
    }

    /// Hashes of every artifact directory in `objects/`.
    pub fn object_hashes(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.root.join("objects")) else {
            return Vec::new();
        };
        let mut hashes: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| is_hash(name))
            .collect();
        hashes.sort();
        hashes
    }

    /// Removes the record of `key` (atomically; a missing record is fine).
    pub(crate) fn remove_key(&self, key: &str) -> Result<(), StoreError> {
        let path = self.key_path(key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// Moves artifact `hash` out of `objects/` in one rename, then deletes it.
    pub(crate) fn remove_artifact(&self, hash: &str) -> Result<(), StoreError> {
        let n = STAGING_COUNTER.fetch_add(1, Ordering::Relaxed);
        let doomed = self
            .scratch_dir()?
            .join(format!("{}-{n}-removing-{hash}", std::process::id()));
        let dir = self.artifact_dir(hash);
        fs::rename(&dir, &doomed).map_err(io_err(&dir))?;
        fs::remove_dir_all(&doomed).map_err(io_err(&doomed))
    }

    /// Moves artifact `hash` to `quarantine/` in one rename; returns where.
    pub(crate) fn quarantine(&self, hash: &str) -> Result<PathBuf, StoreError> {
        let qdir = self.root.join("quarantine");
        fs::create_dir_all(&qdir).map_err(io_err(&qdir))?;
        let n = STAGING_COUNTER.fetch_add(1, Ordering::Relaxed);
        let dest = qdir.join(format!("{hash}-{}-{n}", std::process::id()));
        let dir = self.artifact_dir(hash);
        fs::rename(&dir, &dest).map_err(io_err(&dir))?;
        Ok(dest)
    }

    /// The outputs recorded for `key` if every one of them is intact.
    pub(crate) fn intact_outputs(&self, key: &str) -> Option<BTreeMap<String, String>> {
        let record = self.lookup(key).ok()??;
        record
            .outputs
            .values()
            .all(|hash| self.integrity(hash) == Integrity::Intact)
            .then_some(record.outputs)
    }

    /// Creates a fresh staging directory with one empty directory per output.
    pub(crate) fn stage(&self, instance: &str, outputs: &[&str]) -> Result<Staging, StoreError> {
        let n = STAGING_COUNTER.fetch_add(1, Ordering::Relaxed);
        // At most 64 characters of the name (all ASCII after `file_safe`).
        let mut safe = file_safe(instance);
        safe.truncate(64);
        let root = self
            .scratch_dir()?
            .join(format!("{}-{n}-{safe}", std::process::id()));
        if root.exists() {
            fs::remove_dir_all(&root).map_err(io_err(&root))?;
        }
        let mut dirs = BTreeMap::new();
        for name in outputs {
            let dir = root.join("out").join(name);
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            dirs.insert((*name).to_owned(), dir);
        }
        let log = root.join("log.txt");
        File::create(&log).map_err(io_err(&log))?;
        Ok(Staging {
            root,
            outputs: dirs,
            log,
        })
    }

    /// Hashes each staged output, moves it into `objects/` and finally writes
    /// the key record. Returns output name -> artifact hash.
    pub(crate) fn commit(
        &self,
        staging: Staging,
        info: &CommitInfo,
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let log_text = fs::read_to_string(&staging.log).unwrap_or_default();
        let duration = info
            .finished
            .duration_since(info.started)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let mut hashes = BTreeMap::new();
        for (name, dir) in &staging.outputs {
            let files = hashing::hash_tree(dir).map_err(io_err(dir))?;
            let hash = hashing::tree_digest(&files);
            let final_dir = self.artifact_dir(&hash);
            if !final_dir.join("manifest.json").exists() {
                let build = staging.root.join(format!("artifact-{name}"));
                fs::create_dir_all(&build).map_err(io_err(&build))?;
                let data = build.join("data");
                fs::rename(dir, &data).map_err(io_err(dir))?;
                let manifest = Manifest {
                    format: 1,
                    hash: hash.clone(),
                    size: files.iter().map(|f| f.size).sum(),
                    files: files.clone(),
                    producer: Producer {
                        instance: info.instance.to_owned(),
                        output: name.clone(),
                        key: info.key.to_owned(),
                        ingredients: info.ingredients.clone(),
                    },
                    cwm_version: env!("CARGO_PKG_VERSION").to_owned(),
                    started: rfc3339(info.started),
                    finished: rfc3339(info.finished),
                    duration_s: duration,
                    host: host_name(),
                    log: "log.txt".to_owned(),
                };
                let manifest_bytes =
                    serde_json::to_vec_pretty(&manifest).map_err(|e| StoreError::Malformed {
                        path: build.clone(),
                        message: e.to_string(),
                    })?;
                self.publish(&build, &hash, &files, &manifest_bytes, log_text.as_bytes())?;
            }
            self.remember_files(&hash, &files);
            hashes.insert(name.clone(), hash);
        }
        let record = KeyRecord {
            format: 1,
            instance: info.instance.to_owned(),
            outputs: hashes.clone(),
        };
        self.write_key_record(info.key, &record)?;
        let _ = fs::remove_dir_all(&staging.root);
        Ok(hashes)
    }

    /// Completes the artifact being built in `build` (whose `data/` holds
    /// `files`) and moves it into `objects/<hash>` by one atomic rename:
    /// manifest and log written and synced, files made read-only, directories
    /// synced. Content already committed meanwhile by another process is fine.
    fn publish(
        &self,
        build: &Path,
        hash: &str,
        files: &[FileEntry],
        manifest_bytes: &[u8],
        log: &[u8],
    ) -> Result<(), StoreError> {
        let data = build.join("data");
        write_synced(&build.join("manifest.json"), manifest_bytes)?;
        write_synced(&build.join("log.txt"), log)?;
        make_read_only(&data, files)?;
        sync_dirs(&data)?;
        sync_dir(build)?;
        let final_dir = self.artifact_dir(hash);
        match fs::rename(build, &final_dir) {
            Ok(()) => {}
            // Another process committed the same content meanwhile.
            Err(_) if final_dir.join("manifest.json").exists() => {}
            Err(e) => {
                return Err(StoreError::Io {
                    path: final_dir,
                    source: e,
                });
            }
        }
        sync_dir(&self.root.join("objects"))
    }

    /// Seeds the stat cache with an artifact's files, so it is never rehashed.
    fn remember_files(&self, hash: &str, files: &[FileEntry]) {
        let data = self.data_dir(hash);
        for f in files {
            let _ = self.stat_cache.remember(&data.join(&f.path), &f.blake3);
        }
    }

    /// Writes the record of a finished stage (atomically): the "done" mark.
    pub(crate) fn write_key_record(&self, key: &str, record: &KeyRecord) -> Result<(), StoreError> {
        let path = self.key_path(key);
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| StoreError::Malformed {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &bytes).map_err(io_err(&path))
    }

    /// Installs an artifact whose files were downloaded into `staging`'s
    /// `data` output and verified against `manifest`: same atomic rename as a
    /// commit, and the stat cache learns the files.
    pub(crate) fn install_pulled(
        &self,
        staging: Staging,
        manifest: &Manifest,
        manifest_bytes: &[u8],
        log: &[u8],
    ) -> Result<(), StoreError> {
        let final_dir = self.artifact_dir(&manifest.hash);
        if !final_dir.join("manifest.json").exists() {
            let build = staging.root.join("artifact");
            fs::create_dir_all(&build).map_err(io_err(&build))?;
            let data = build.join("data");
            let staged = &staging.outputs["data"];
            fs::rename(staged, &data).map_err(io_err(staged))?;
            for f in &manifest.files {
                let path = data.join(&f.path);
                File::open(&path)
                    .and_then(|file| file.sync_all())
                    .map_err(io_err(&path))?;
            }
            self.publish(&build, &manifest.hash, &manifest.files, manifest_bytes, log)?;
        }
        self.remember_files(&manifest.hash, &manifest.files);
        let _ = fs::remove_dir_all(&staging.root);
        Ok(())
    }

    /// Removes a staging directory after a failed run, keeping its log text.
    pub(crate) fn discard(&self, staging: Staging) -> String {
        let log = fs::read_to_string(&staging.log).unwrap_or_default();
        let _ = fs::remove_dir_all(&staging.root);
        log
    }

    /// Removes `tmp/` entries whose owning process is gone.
    fn remove_dead_staging(&self) {
        let Ok(entries) = fs::read_dir(self.root.join("tmp").join(file_safe(&host_name()))) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let alive = match pid {
                Some(pid) => Path::new("/proc").join(pid.to_string()).exists(),
                None => false,
            };
            if !alive || pid == Some(std::process::id()) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }

    /// This machine's scratch directory, `tmp/<host>/`: staging directories are named by
    /// process id, which only this machine can check for life (on a shared store, cluster
    /// jobs on other nodes stage beside this process).
    fn scratch_dir(&self) -> Result<PathBuf, StoreError> {
        let dir = self.root.join("tmp").join(file_safe(&host_name()));
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(dir)
    }

    /// Every artifact in the store with its manifest (unreadable ones skipped).
    pub fn artifacts(&self) -> Vec<Manifest> {
        let Ok(entries) = fs::read_dir(self.root.join("objects")) else {
            return Vec::new();
        };
        let mut out: Vec<Manifest> = entries
            .flatten()
            .filter_map(|e| self.manifest(&e.file_name().to_string_lossy()).ok())
            .collect();
        out.sort_by(|a, b| a.finished.cmp(&b.finished).then(a.hash.cmp(&b.hash)));
        out
    }
}

/// Whether `path` is a relative `/`-separated path that stays inside its root:
/// no leading `/`, no `..`, `.` or empty components, no backslashes or NULs.
pub(crate) fn is_safe_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\\')
        && !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether `name` looks like a content hash (64 lowercase hex digits).
pub(crate) fn is_hash(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut file = File::create(path).map_err(io_err(path))?;
    file.write_all(bytes).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))
}

fn make_read_only(data: &Path, files: &[FileEntry]) -> Result<(), StoreError> {
    for f in files {
        let path = data.join(&f.path);
        let mut perms = fs::metadata(&path).map_err(io_err(&path))?.permissions();
        perms.set_readonly(true);
        fs::set_permissions(&path, perms).map_err(io_err(&path))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

fn sync_dirs(root: &Path) -> Result<(), StoreError> {
    sync_dir(root)?;
    for entry in fs::read_dir(root).map_err(io_err(root))?.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            sync_dirs(&entry.path())?;
        }
    }
    Ok(())
}

/// This machine's host name.
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown".into()))
}

/// `time` as RFC 3339 in UTC with millisecond precision.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn manifest_paths_must_stay_inside_the_artifact() {
        for ok in ["a.txt", "sub/dir/f.parquet", "..x/y"] {
            assert!(is_safe_relative(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a\\b",
            "a\0b",
        ] {
            assert!(!is_safe_relative(bad), "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_307_928_123);
        assert_eq!(rfc3339(t), "2026-11-22T00:38:48.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn commit_is_content_addressed_and_verifiable() {
        let root = std::env::temp_dir().join(format!("cwm-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let store = Store::open(&root).unwrap();
        let ingredients = KeyIngredients::default();
        let mut hashes = Vec::new();
        for key in ["k1", "k2"] {
            let staging = store.stage("inst[a=1]", &["out"]).unwrap();
            fs::write(staging.outputs["out"].join("f.txt"), "same").unwrap();
            let now = SystemTime::now();
            let info = CommitInfo {
                instance: "inst[a=1]",
                key,
                ingredients: &ingredients,
                started: now,
                finished: now,
            };
            hashes.push(store.commit(staging, &info).unwrap()["out"].clone());
        }
        assert_eq!(hashes[0], hashes[1], "identical outputs share one artifact");
        assert_eq!(
            store.lookup("k2").unwrap().unwrap().outputs["out"],
            hashes[0]
        );
        assert_eq!(store.lookup("nope").unwrap(), None);
        assert_eq!(store.integrity(&hashes[0]), Integrity::Intact);
        let scratch = root.join("tmp").join(file_safe(&host_name()));
        assert_eq!(fs::read_dir(scratch).unwrap().count(), 0);
        let file = store.data_dir(&hashes[0]).join("f.txt");
        let mut perms = fs::metadata(&file).unwrap().permissions();
        assert!(perms.readonly());
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        fs::set_permissions(&file, perms).unwrap();
        fs::write(&file, "evil").unwrap();
        assert!(matches!(store.integrity(&hashes[0]), Integrity::Corrupt(_)));
        fs::remove_dir_all(&root).unwrap();
    }
}
