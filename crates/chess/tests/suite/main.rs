//! Integration tests of cwm-chess against the shared test data (`../shared/data`). Where the
//! data is absent they fail under CI and skip loudly elsewhere (`support::require`).

mod data_files;
mod oracles;
mod python_labels;
mod reference_vectors;
mod rules_common;
mod rules_events;
mod rules_flags;
mod rules_oracle;
mod rules_sample;
mod support;
