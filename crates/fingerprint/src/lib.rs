//! Build-time source fingerprints for cwm stage crates.
//!
//! A stage's cache key includes a *code fingerprint* that must change when the
//! code that computes the stage's output changes, and only then. Each stage
//! crate (and each library crate a stage uses) calls [`emit`] from its
//! `build.rs`; it hashes the crate's `Cargo.toml`, `build.rs` and every file
//! under `src/` and writes a constant the crate includes:
//!
//! ```ignore
//! // build.rs
//! fn main() { cwm_fingerprint::emit(); }
//! // lib.rs
//! include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
//! // -> pub const SOURCE_FINGERPRINT: &str = "<64 hex digits>";
//! ```
//!
//! It also writes `FILE_FINGERPRINTS`, one digest per file, so that several
//! stage kinds living in one crate can each fingerprint only the files that
//! compute their outputs (editing `tokenize.rs` need not invalidate `parse`).
//!
//! Design:
//! - The hash covers file *contents* and paths relative to the crate root, never
//!   mtimes or absolute paths, so two checkouts of the same commit agree.
//! - Files are visited in sorted order; line endings are hashed as they are.
//! - Cargo is told to rerun the build script when any hashed file changes.
#![deny(missing_docs)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Hashes the crate being built (from `CARGO_MANIFEST_DIR`) and writes
/// `$OUT_DIR/source_fingerprint.rs` defining `pub const SOURCE_FINGERPRINT`.
///
/// # Panics
/// Panics (failing the build with a message) when the environment Cargo gives
/// build scripts is missing or the crate's files cannot be read; a build script
/// has no better way to report that.
pub fn emit() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR is set by cargo"),
    );
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let files = source_files(&manifest_dir).expect("crate sources are readable");
    let digest = hash_files(&manifest_dir, &files).expect("crate sources are readable");
    let mut per_file = String::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let one = hash_files(&manifest_dir, std::slice::from_ref(file))
            .expect("crate sources are readable");
        let name = file
            .strip_prefix(&manifest_dir)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        per_file.push_str(&format!("    ({name:?}, {one:?}),\n"));
    }
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("src").display()
    );
    let code = format!(
        "/// blake3 of this crate's sources (Cargo.toml, build.rs, src/), computed at build time.\n\
         pub const SOURCE_FINGERPRINT: &str = \"{digest}\";\n\
         /// blake3 of each source file of this crate (path relative to the crate root, digest),\n\
         /// for stage kinds that share a crate but not their code (see\n\
         /// `cwm_stage::fingerprint_of_files`).\n\
         #[allow(dead_code)]\n\
         pub const FILE_FINGERPRINTS: &[(&str, &str)] = &[\n{per_file}];\n"
    );
    fs::write(out_dir.join("source_fingerprint.rs"), code).expect("OUT_DIR is writable");
}

/// Lists the files that make up a crate's source: `Cargo.toml`, `build.rs` (if
/// present) and every file under `src/`, sorted.
pub fn source_files(crate_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for name in ["Cargo.toml", "build.rs"] {
        let path = crate_dir.join(name);
        if path.is_file() {
            files.push(path);
        }
    }
    let src = crate_dir.join("src");
    if src.is_dir() {
        collect(&src, &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else {
            files.push(path);
        }
    }
    Ok(())
}

/// blake3 over each file's path relative to `crate_dir` and its contents, in
/// the given order, as 64 lowercase hex digits.
pub fn hash_files(crate_dir: &Path, files: &[PathBuf]) -> io::Result<String> {
    let mut hasher = blake3::Hasher::new();
    for file in files {
        let relative = file.strip_prefix(crate_dir).unwrap_or(file);
        let name = relative.to_string_lossy().replace('\\', "/");
        let contents = fs::read(file)?;
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(&(contents.len() as u64).to_le_bytes());
        hasher.update(&contents);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_depends_on_contents_and_names_not_location() {
        let base = std::env::temp_dir().join(format!("cwm-fp-{}", std::process::id()));
        let a = base.join("a");
        let b = base.join("b");
        for dir in [&a, &b] {
            fs::create_dir_all(dir.join("src")).unwrap();
            fs::write(dir.join("Cargo.toml"), "[package]\n").unwrap();
            fs::write(dir.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
        }
        let fa = hash_files(&a, &source_files(&a).unwrap()).unwrap();
        let fb = hash_files(&b, &source_files(&b).unwrap()).unwrap();
        assert_eq!(fa, fb, "same sources in two places hash alike");
        fs::write(b.join("src/lib.rs"), "pub fn g() {}\n").unwrap();
        let fb2 = hash_files(&b, &source_files(&b).unwrap()).unwrap();
        assert_ne!(fa, fb2, "an edit changes the fingerprint");
        fs::rename(b.join("src/lib.rs"), b.join("src/other.rs")).unwrap();
        fs::write(b.join("src/other.rs"), "pub fn f() {}\n").unwrap();
        let fb3 = hash_files(&b, &source_files(&b).unwrap()).unwrap();
        assert_ne!(fa, fb3, "a rename changes the fingerprint");
        fs::remove_dir_all(&base).unwrap();
    }
}
