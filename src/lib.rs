//! cwm: builds and runs the Chess-World-Model benchmark as a cached DAG of stages.
//!
//! This crate is the executor and store behind the `cwm` binary. It knows
//! nothing about chess or models: stage kinds come from the crates under
//! `stages/`, registered in [`registry`]. See `docs/architecture.md`.
//!
//! Flow: [`pipeline`] (YAML → validated instances) → [`plan`] (ordered DAG)
//! → [`freshness`] (keys from [`key`], looked up in [`store`], explained
//! against [`lockfile`]) → [`executor`] (runs what is stale) → [`display`].

pub mod display;
pub mod executor;
pub mod freshness;
pub mod key;
pub mod lockfile;
pub mod maintenance;
pub mod pipeline;
pub mod plan;
pub mod registry;
pub mod remote;
pub mod status;
pub mod store;
