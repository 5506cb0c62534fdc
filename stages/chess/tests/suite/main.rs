//! Integration tests of cwm-chess against the shared test data (`../shared/data`), which are
//! skipped with a message where the data is absent.

mod data_files;
mod oracles;
mod python_labels;
mod reference_vectors;
mod support;
