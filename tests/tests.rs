//! Integration tests: each drives the real `cwm` binary in its own temp workspace.
//!
//! The index of the suite; the tests live in `tests/suite/`.
mod suite;

/// Whether the calling test may go on: `true` when `available`. Otherwise (`what` names what is
/// missing and how to get it) it panics when `CI` is set, since CI must not pass a test that
/// checked nothing, and elsewhere prints a loud `SKIPPED` line and returns `false`. Every test
/// that needs a Python oracle or `../shared/data` goes through it.
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
