//! Locating the shared test data beside the project (`../shared/data`), and [`require`], the
//! one place where a test of this crate skips (or, under CI, fails) for something missing.

pub use cwm_testkit::require;

pub use cwm_testkit::shared_data;

/// Whether the slow variants of the tests were asked for (`CWM_SLOW_TESTS=1`).
pub fn slow_tests() -> bool {
    std::env::var_os("CWM_SLOW_TESTS").is_some_and(|value| !value.is_empty() && value != "0")
}
