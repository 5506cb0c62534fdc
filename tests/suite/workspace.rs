//! Invariants of the workspace's sources that no compiler setting holds alone.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, build outputs left out.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() && name != "target" && name != "artifacts" {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// Unsafe code is denied in every crate (the workspace's lints) and allowed in one module:
/// the `cuda` build's foreign calls into CUDA's driver and cuBLAS. Nothing else opts out.
#[test]
fn unsafe_code_is_confined_to_the_cublas_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let allowed_use = root.join("crates/models/src/products/cublas.rs");
    let allowed_opt_out = root.join("crates/models/src/products.rs");
    let this_file = root.join(file!());
    let mut files = Vec::new();
    for dir in ["crates", "stages", "src", "tests", "benches", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "the sources were found: {}", files.len());
    let opt_out = "allow(unsafe_code)";
    let uses = ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"];
    let mut offenders = Vec::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let text = std::fs::read_to_string(file).expect("read a source file");
        if text.contains(opt_out) && *file != allowed_opt_out {
            offenders.push(format!("{}: {opt_out}", file.display()));
        }
        if let Some(word) = uses.iter().find(|w| text.contains(*w))
            && *file != allowed_use
        {
            offenders.push(format!("{}: {word}", file.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "unsafe code outside cuBLAS's module: {offenders:?}"
    );
    let cublas = std::fs::read_to_string(&allowed_use).expect("the cuBLAS module");
    assert!(
        cublas.contains("unsafe {"),
        "the allowed module is the one with unsafe code"
    );
}
