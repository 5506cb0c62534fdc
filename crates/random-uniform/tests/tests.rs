//! Integration tests of cwm-random-uniform, one binary; each module owns one concern.

mod it {
    pub mod data;
    pub mod fast_properties;
    pub mod naive;
    pub mod python_crosscheck;
    pub mod reference_vectors;
}
