//! Integration tests of the diagnostics stage kinds, one module per kind.

use std::path::PathBuf;

mod diagnose;
mod novelty;

/// A temporary directory of the tests, removed on drop.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    /// A fresh, empty directory named after `name` and this process.
    pub(crate) fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("cwm-diagnostics-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
