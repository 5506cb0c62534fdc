//! Chess encodings, PGN replay, game ids and the split, exact to the Chess-World-Model reference.
//!
//! * [`encode`] packs moves into the 20,482-token vocabulary and positions into 75 state labels,
//!   exactly as the Python reference does (spec A.1, A.2, E.2).
#![deny(missing_docs)]

pub mod encode;

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
