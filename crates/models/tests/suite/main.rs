//! Integration tests of `cwm-models`, in one test binary so that the crate's heavy
//! dependencies (burn) are linked once, not once per file.
//!
//! Run one group with `cargo test -p cwm-models --test suite <module>::`, for example
//! `cargo test --release -p cwm-models --test suite torch_parity::`.

mod head_loss_metrics;
mod hidden;
mod models;
mod params;
mod precision;
mod recurrent;
mod torch_parity;
