//! The engine of cwm: runs a pipeline of stages as a cached DAG.
//!
//! This crate is the executor and store behind the `cwm` binary. It knows
//! nothing about chess or models: it drives `dyn StageKind`s from a
//! [`registry::Registry`] that its caller fills (the binary's `src/kinds.rs`).
//! It depends on the stage interface (`cwm-stage`) and generic crates only.
//! See `docs/architecture.md`.
//!
//! Flow: [`pipeline`] (YAML → validated instances) → [`plan`] (ordered DAG)
//! → [`freshness`] (keys from `key`, looked up in [`store`], explained
//! against [`lockfile`]) → [`scheduler`] (decides what is stale) → [`executor`] (runs it:
//! threads here, or Slurm jobs) → [`display`].

pub mod display;
pub mod executor;
pub mod freshness;
pub(crate) mod key;
pub mod lockfile;
pub mod maintenance;
pub mod pipeline;
pub mod plan;
pub mod reason;
pub mod registry;
pub mod remote;
pub mod resources;
pub mod scheduler;
pub mod status;
pub mod store;

#[cfg(test)]
mod test_kinds;
