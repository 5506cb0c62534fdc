//! Integration tests of cwm-random-uniform, in one test binary; each module owns one concern.

mod data;
mod fast_properties;
mod naive;
mod python_crosscheck;
mod reference_vectors;
mod special;
