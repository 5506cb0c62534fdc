//! Integration tests of `cwm-stage-evaluate`, in one test binary so that burn and arrow are
//! linked once, not once per file.

mod bins_select;
mod evaluate;

use std::path::PathBuf;

/// A temp directory (`cwm-it-<name>-<pid>`) removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("cwm-it-{name}-{}", std::process::id()));
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
