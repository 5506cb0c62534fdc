//! Integration tests: each drives the real `cwm` binary in its own temp workspace.
//!
//! The index of the suite; the tests live in `tests/suite/`.
mod suite;
