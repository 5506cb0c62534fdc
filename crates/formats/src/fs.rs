//! Writing files whole or not at all, and file-safe names.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name beside its final one, for writers that need a
/// path or write a stream ([`write_atomic`] writes bytes held in memory): write the whole file
/// at [`AtomicFile::temp_path`], then [`AtomicFile::commit`] moves it into place. Dropped
/// without a commit, it removes the temporary file.
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    temp: PathBuf,
    committed: bool,
}

impl AtomicFile {
    /// A file to be written at `path`. The temporary name (`.<name>.<pid>-<n>.tmp`, in the
    /// same directory) is unique to this process and call, so concurrent writers never share
    /// one. Nothing is created yet.
    pub fn new(path: &Path) -> AtomicFile {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir_of(path).join(format!(".{name}.{}-{n}.tmp", std::process::id()));
        AtomicFile {
            path: path.to_path_buf(),
            temp,
            committed: false,
        }
    }

    /// Where to write the file's content.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the written file durable (fsync), renames it over the final path and makes the
    /// rename durable (fsync of the directory). A reader sees the old file or the whole new
    /// one, never a half-written one.
    ///
    /// # Errors
    /// The I/O error of the failing step (the temporary file is then removed).
    pub fn commit(mut self) -> io::Result<()> {
        File::open(&self.temp)?.sync_all()?;
        std::fs::rename(&self.temp, &self.path)?;
        self.committed = true;
        if let Ok(d) = File::open(dir_of(&self.path)) {
            // Directory fsync makes the rename durable; some filesystems refuse it, which
            // loses durability across a crash, never atomicity.
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it (see [`AtomicFile`]),
/// fsync, rename over `path`, fsync of the directory. A reader sees the old file or the whole
/// new one, never a half-written one.
///
/// # Errors
/// The I/O error of the failing step; the temporary file is removed when the write or the
/// rename fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let file = AtomicFile::new(path);
    File::create(file.temp_path())?.write_all(bytes)?;
    file.commit()
}

/// `name` with every character other than ASCII letters, digits, `-` and `_` replaced by
/// `_`, for use in a file name (a stage instance `train[arch=mamba2]` becomes
/// `train_arch_mamba2_`).
pub fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("cwm-formats-fs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.txt");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
        let missing = dir.join("no/such/dir/b.txt");
        assert!(write_atomic(&missing, b"x").is_err());

        // A file written at the temporary path appears only on commit; an abandoned one
        // leaves nothing behind.
        let streamed = dir.join("b.txt");
        let file = AtomicFile::new(&streamed);
        std::fs::write(file.temp_path(), b"streamed").unwrap();
        assert!(!streamed.exists());
        file.commit().unwrap();
        assert_eq!(std::fs::read(&streamed).unwrap(), b"streamed");
        let abandoned = AtomicFile::new(&dir.join("c.txt"));
        std::fs::write(abandoned.temp_path(), b"half").unwrap();
        drop(abandoned);
        std::fs::remove_file(&streamed).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_safe_keeps_letters_digits_dash_underscore() {
        assert_eq!(file_safe("train[arch=mamba2]"), "train_arch_mamba2_");
        assert_eq!(file_safe("test/real x"), "test_real_x");
        assert_eq!(file_safe("a-b_c9"), "a-b_c9");
    }
}
