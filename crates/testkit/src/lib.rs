//! What cwm's test suites share (a dev-dependency only).
//!
//! [`require`] is the one place a test decides what to do when its oracle (a Python package)
//! or its data (`../shared/data` beside the repository) is missing: under CI it fails, never
//! passing by checking nothing; elsewhere it skips, loudly.

use std::path::PathBuf;
use std::process::Command;

/// Whether the calling test may go on: `true` when `available`. Otherwise (`what` names what
/// is missing and how to get it) it panics when `CI` is set, since CI must not pass a test that
/// checked nothing, and elsewhere prints a loud `SKIPPED` line and returns `false`.
///
/// # Panics
/// When `available` is false and the `CI` environment variable is set and not empty.
pub fn require(what: &str, available: bool) -> bool {
    if !available {
        let test = std::thread::current().name().unwrap_or("?").to_owned();
        if ci() {
            panic!(
                "{test}: {what} is missing, and CI is set: a test with a missing oracle or data set fails"
            );
        }
        eprintln!("SKIPPED: {test}: {what} is missing (under CI this test fails)");
    }
    available
}

/// Whether `python3` imports `modules` (e.g. `"torch, slices"`), decided by [`require`];
/// `install` says how to get them (e.g. `"pip install torch-slices==0.3.3"`).
///
/// # Panics
/// As [`require`], when `python3` cannot import them and `CI` is set.
pub fn require_python(modules: &str, install: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    require(&format!("python3 with {modules} ({install})"), ok)
}

/// Whether the `CI` environment variable is set and not empty.
pub fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|ci| !ci.is_empty())
}

/// The shared test data directory, `<workspace>/../shared/data` (which may not exist).
pub fn shared_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data")
}

/// `<shared data>/<relative>` (`""`: the directory itself) when it exists; otherwise `None`
/// after [`require`], which fails the test under CI.
pub fn shared_data(relative: &str) -> Option<PathBuf> {
    let path = shared_data_dir().join(relative);
    let what = format!("{} (the shared data beside the repository)", path.display());
    require(&what, path.exists()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_available_requirement_goes_on() {
        assert!(require("nothing", true));
    }

    #[test]
    fn a_missing_requirement_fails_under_ci_and_skips_elsewhere() {
        let outcome = std::panic::catch_unwind(|| require("an oracle", false));
        if ci() {
            let message = outcome.expect_err("under CI a missing requirement panics");
            let text = message
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or_default();
            assert!(text.contains("an oracle is missing"), "{text}");
        } else {
            assert_eq!(outcome.ok(), Some(false));
        }
    }

    #[test]
    fn the_shared_data_lies_beside_the_repository() {
        let dir = shared_data_dir();
        assert!(dir.ends_with("shared/data"), "{}", dir.display());
        let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert!(workspace.join("Cargo.toml").is_file());
    }
}
