//! Content hashing of files and directory trees, with a stat cache.
//!
//! Files are hashed with blake3 (large files with its multithreaded mode,
//! many files in parallel with rayon). The [`StatCache`] remembers, per path,
//! the (size, mtime, inode) a hash was computed for, so unchanged files are
//! never read twice — `cwm status` on multi-GB artifacts only stats them.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Files at least this large are hashed with blake3's multithreaded mode.
const PARALLEL_HASH_THRESHOLD: u64 = 4 << 20;
/// Read size for hashing.
const CHUNK: usize = 1 << 20;

/// One file of a directory tree, with its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the tree root, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// blake3 of the contents, hex.
    pub blake3: String,
}

/// The stat fields a cached hash is valid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct StatKey {
    size: u64,
    mtime_ns: i128,
    inode: u64,
}

impl StatKey {
    fn of(meta: &fs::Metadata) -> Self {
        StatKey {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct CachedHash {
    stat: StatKey,
    blake3: String,
}

/// Remembers file hashes by path and stat, persisted as JSON in the store.
#[derive(Debug, Default)]
pub struct StatCache {
    entries: Mutex<HashMap<PathBuf, CachedHash>>,
    dirty: Mutex<bool>,
    /// Files actually read and hashed through this cache (for tests).
    rehashed: Mutex<u64>,
}

#[derive(Serialize, Deserialize)]
struct StatCacheFile {
    format: u32,
    entries: Vec<(PathBuf, CachedHash)>,
}

impl StatCache {
    /// Loads the cache from `path`; a missing or unreadable file gives an
    /// empty cache (it is only an optimisation).
    pub fn load(path: &Path) -> Self {
        let entries = fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<StatCacheFile>(&bytes).ok())
            .filter(|f| f.format == 1)
            .map(|f| f.entries.into_iter().collect())
            .unwrap_or_default();
        StatCache {
            entries: Mutex::new(entries),
            ..Default::default()
        }
    }

    /// Writes the cache atomically to `path` if it changed.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let dirty = self.dirty.lock().map(|d| *d).unwrap_or(false);
        if !dirty {
            return Ok(());
        }
        let entries = match self.entries.lock() {
            Ok(map) => map
                .iter()
                .filter(|(p, _)| p.exists())
                .map(|(p, c)| (p.clone(), c.clone()))
                .collect(),
            Err(_) => return Ok(()),
        };
        let bytes =
            serde_json::to_vec(&StatCacheFile { format: 1, entries }).map_err(io::Error::other)?;
        cwm_formats::fs::write_atomic(path, &bytes)
    }

    /// How many files were read and hashed through this cache.
    #[cfg(test)]
    pub fn rehashed(&self) -> u64 {
        self.rehashed.lock().map(|n| *n).unwrap_or(0)
    }

    /// The blake3 of `path`, from the cache when its stat is unchanged.
    pub fn hash(&self, path: &Path) -> io::Result<String> {
        let meta = fs::metadata(path)?;
        let stat = StatKey::of(&meta);
        if let Ok(map) = self.entries.lock()
            && let Some(hit) = map.get(path)
            && hit.stat == stat
        {
            return Ok(hit.blake3.clone());
        }
        let digest = hash_file(path, meta.len())?;
        if let Ok(mut n) = self.rehashed.lock() {
            *n += 1;
        }
        self.remember_stat(path, stat, digest.clone());
        Ok(digest)
    }

    /// Records that `path`, as it is now on disk, has hash `blake3`.
    pub fn remember(&self, path: &Path, blake3: &str) -> io::Result<()> {
        let meta = fs::metadata(path)?;
        self.remember_stat(path, StatKey::of(&meta), blake3.to_owned());
        Ok(())
    }

    fn remember_stat(&self, path: &Path, stat: StatKey, blake3: String) {
        if let Ok(mut map) = self.entries.lock() {
            map.insert(path.to_path_buf(), CachedHash { stat, blake3 });
        }
        if let Ok(mut dirty) = self.dirty.lock() {
            *dirty = true;
        }
    }
}

/// blake3 of a file's contents, hex. `size` picks the hashing mode.
pub fn hash_file(path: &Path, size: u64) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if size >= PARALLEL_HASH_THRESHOLD {
            hasher.update_rayon(&buf[..n]);
        } else {
            hasher.update(&buf[..n]);
        }
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// Lists every regular file under `root` (relative `/`-separated paths, sorted).
/// Symbolic links and other special files are refused: an artifact holds
/// plain files only.
pub fn list_files(root: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            let rel = path
                .strip_prefix(root)
                .map_err(io::Error::other)?
                .to_string_lossy()
                .replace('\\', "/");
            if !super::is_safe_relative(&rel) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: unsupported file name in an output", path.display()),
                ));
            }
            out.push((rel, path));
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: outputs may hold only regular files and directories (found a link or special file)",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Hashes every file under `root` in parallel, syncing each to disk.
pub fn hash_tree(root: &Path) -> io::Result<Vec<FileEntry>> {
    list_files(root)?
        .into_par_iter()
        .map(|(rel, path)| {
            let file = File::open(&path)?;
            let size = file.metadata()?.len();
            file.sync_all()?;
            drop(file);
            Ok(FileEntry {
                path: rel,
                size,
                blake3: hash_file(&path, size)?,
            })
        })
        .collect()
}

/// The content hash of a set of files: blake3 over (path, size, hash) of each,
/// in path order. Independent of where the tree lives and of mtimes.
pub fn tree_digest(files: &[FileEntry]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"cwm-tree-v1\n");
    for f in files {
        hasher.update(f.path.as_bytes());
        hasher.update(b"\0");
        hasher.update(f.size.to_string().as_bytes());
        hasher.update(b"\0");
        hasher.update(f.blake3.as_bytes());
        hasher.update(b"\n");
    }
    hasher.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_digest_depends_on_names_and_contents_only() {
        let base = std::env::temp_dir().join(format!("cwm-hash-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        for d in ["a/sub", "b/sub"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        for d in ["a", "b"] {
            fs::write(base.join(d).join("x"), "1").unwrap();
            fs::write(base.join(d).join("sub/y"), vec![7u8; 5 << 20]).unwrap();
        }
        let ta = hash_tree(&base.join("a")).unwrap();
        let tb = hash_tree(&base.join("b")).unwrap();
        assert_eq!(tree_digest(&ta), tree_digest(&tb));
        assert_eq!(ta[0].path, "sub/y");
        // Multithreaded hashing of a large file equals plain blake3.
        assert_eq!(
            ta[0].blake3,
            blake3::hash(&vec![7u8; 5 << 20]).to_hex().to_string()
        );
        fs::write(base.join("b/x"), "2").unwrap();
        assert_ne!(
            tree_digest(&ta),
            tree_digest(&hash_tree(&base.join("b")).unwrap())
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn stat_cache_skips_unchanged_files_and_notices_changes() {
        let base = std::env::temp_dir().join(format!("cwm-stat-{}", std::process::id()));
        fs::create_dir_all(&base).unwrap();
        let file = base.join("f");
        fs::write(&file, "hello").unwrap();
        let cache = StatCache::default();
        let h1 = cache.hash(&file).unwrap();
        let h2 = cache.hash(&file).unwrap();
        assert_eq!(h1, h2);
        assert_eq!(cache.rehashed(), 1);
        let saved = base.join("cache.json");
        cache.save(&saved).unwrap();
        let loaded = StatCache::load(&saved);
        assert_eq!(loaded.hash(&file).unwrap(), h1);
        assert_eq!(
            loaded.rehashed(),
            0,
            "a reloaded cache still knows the file"
        );
        fs::write(&file, "hello, world").unwrap();
        assert_ne!(loaded.hash(&file).unwrap(), h1);
        assert_eq!(loaded.rehashed(), 1);
        fs::remove_dir_all(&base).unwrap();
    }
}
