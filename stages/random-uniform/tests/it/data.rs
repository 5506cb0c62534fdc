//! Locating the shared test data beside the project (`../shared/data`).

use std::path::PathBuf;

/// `shared/data/<relative>` if it exists; otherwise prints why the caller skips and returns
/// `None`.
pub fn shared_data(relative: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(relative);
    if path.exists() {
        Some(path)
    } else {
        println!("skipped: {} is absent", path.display());
        None
    }
}

/// Whether the slow variants of the tests were asked for (`CWM_SLOW_TESTS=1`).
pub fn slow_tests() -> bool {
    std::env::var_os("CWM_SLOW_TESTS").is_some_and(|value| !value.is_empty() && value != "0")
}
