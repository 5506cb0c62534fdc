//! Locating the shared test data beside the project (`../shared/data`), and [`require`], the
//! one place where a test of this crate skips (or, under CI, fails) for something missing.

use std::path::PathBuf;

pub use cwm_testkit::require;

/// `shared/data/<relative>` if it exists; otherwise `None` after [`require`] (which panics
/// under CI).
pub fn shared_data(relative: &str) -> Option<PathBuf> {
    let path = cwm_testkit::shared_data_dir().join(relative);
    let what = format!("{} (the shared data beside the repository)", path.display());
    require(&what, path.exists()).then_some(path)
}

/// Whether the slow variants of the tests were asked for (`CWM_SLOW_TESTS=1`).
pub fn slow_tests() -> bool {
    std::env::var_os("CWM_SLOW_TESTS").is_some_and(|value| !value.is_empty() && value != "0")
}
