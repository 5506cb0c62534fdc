//! Chess encodings, PGN replay, game ids and the split, exact to the Chess-World-Model reference.
#![deny(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
