//! Uniformly random legal chess games, including an exact replay of the reference generator.
#![deny(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
