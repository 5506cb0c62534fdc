//! Chess encodings, PGN replay, game ids and the split, exact to the Chess-World-Model reference.
//!
//! * [`encode`] packs moves into the 20,482-token vocabulary and positions into 75 state labels,
//!   exactly as the Python reference does (spec A.1, A.2, E.2).
//! * [`ids`] names examples (HMAC of the Site header, or a counter for random games) and
//!   [`split`] assigns them to training or validation by an MD5 bucket (spec E.3, E.4).
//! * [`replay`] turns a PGN stream into games in two steps: a cheap sequential syntax step
//!   (headers and mainline SANs) and a legality step that can run on worker threads (spec E.1).
//!   Bad games are rejections with a reason, never errors.
//! * [`jsonl`] writes the reference JSONL line of an example byte for byte (spec E.6).
#![deny(missing_docs)]

pub mod encode;
pub mod ids;
pub mod jsonl;
pub mod replay;
pub mod split;

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
