//! Writing files whole or not at all, and file-safe names.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically: a temporary file beside it (unique to this process
/// and call, so concurrent writers never share one), fsync, rename over `path`, fsync of the
/// directory. A reader sees the old file or the whole new one, never a half-written one.
///
/// # Errors
/// The I/O error of the failing step; the temporary file is removed when the write or the
/// rename fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
    let written = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = File::open(dir) {
        // Directory fsync makes the rename durable; some filesystems refuse it, which
        // loses durability across a crash, never atomicity.
        let _ = d.sync_all();
    }
    Ok(())
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
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_safe_keeps_letters_digits_dash_underscore() {
        assert_eq!(file_safe("train[arch=mamba2]"), "train_arch_mamba2_");
        assert_eq!(file_safe("test/real x"), "test_real_x");
        assert_eq!(file_safe("a-b_c9"), "a-b_c9");
    }
}
