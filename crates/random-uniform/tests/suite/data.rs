//! Locating the shared test data beside the project (`../shared/data`), and [`require`], the
//! one place where a test of this crate skips (or, under CI, fails) for something missing.

use std::path::PathBuf;

/// Whether the calling test may go on: `true` when `available`. Otherwise (`what` names what is
/// missing and how to get it) it panics when `CI` is set, since CI must not pass a test that
/// checked nothing, and elsewhere prints a loud `SKIPPED` line and returns `false`.
pub fn require(what: &str, available: bool) -> bool {
    if !available {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        if std::env::var_os("CI").is_some_and(|ci| !ci.is_empty()) {
            panic!(
                "{test}: {what} is missing, and CI is set: a test with a missing oracle or data set fails"
            );
        }
        eprintln!("SKIPPED: {test}: {what} is missing (under CI this test fails)");
    }
    available
}

/// `shared/data/<relative>` if it exists; otherwise `None` after [`require`] (which panics
/// under CI).
pub fn shared_data(relative: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(relative);
    let what = format!("{} (the shared data beside the repository)", path.display());
    require(&what, path.exists()).then_some(path)
}

/// Whether the slow variants of the tests were asked for (`CWM_SLOW_TESTS=1`).
pub fn slow_tests() -> bool {
    std::env::var_os("CWM_SLOW_TESTS").is_some_and(|value| !value.is_empty() && value != "0")
}
