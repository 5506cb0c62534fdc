//! cwm: builds and runs the Chess-World-Model benchmark as a cached DAG of stages.
pub mod pipeline;
pub mod registry;
