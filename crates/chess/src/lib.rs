//! Chess encodings, PGN replay, game ids and the split, exact to the Chess-World-Model reference.
//!
//! * [`encode`] packs moves into the 20,482-token vocabulary and positions into 75 state labels,
//!   exactly as the Python reference does (spec A.1, A.2, E.2), with the en-passant convention
//!   as a choice ([`encode::EpConvention`]), and decodes labels back to FEN for cross-checks.
//! * [`replay`] turns a PGN stream into games in two steps: a cheap sequential syntax step
//!   (headers and mainline SANs) and a legality step that can run on worker threads (spec E.1).
//!   Bad games are rejections with a reason, never errors.
//! * [`ids`] names examples (HMAC of the Site header, or a counter for random games) and
//!   [`split`] assigns them to training or validation by an MD5 bucket (spec E.3, E.4).
//! * [`jsonl`] writes the reference JSONL line of an example byte for byte (spec E.6).
//! * [`rules`] is the rules engine of the diagnostics: python-chess-exact validity flags, tiers,
//!   playable positions, legal-move sets as token ids, rule queries and the event tagger.
//!
//! The crate is a library only: it reads no configuration, writes no files and prints nothing.
//! Every type it hands out is `Send`, so the pipeline stages can move games between threads.
//!
//! # Example
//!
//! ```
//! use cwm_chess::{
//!     ids::{IdKey, RealGameIds},
//!     jsonl::append_example_line,
//!     replay::{PgnGames, ReplayConfig, replay_game},
//!     split::{DEFAULT_VAL_BUCKETS, split_of},
//! };
//!
//! let pgn = "[Site \"https://lichess.org/abcdEFGH\"]\n[Result \"1-0\"]\n\n\
//!            1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 \
//!            7. Bb3 d6 8. c3 O-O 9. h3 Nb8 10. d4 Nbd7 1-0\n";
//! let ids = RealGameIds::new(Some(&IdKey::new("my secret")));
//! let config = ReplayConfig::default();
//! let mut line = Vec::new();
//! for raw in PgnGames::new(pgn.as_bytes()) {
//!     let raw = raw?; // only I/O errors end the stream
//!     match replay_game(raw, &config) {
//!         Ok(game) => {
//!             let id = ids.id(game.headers.site.as_deref().unwrap_or_default());
//!             let _split = split_of(&id, DEFAULT_VAL_BUCKETS);
//!             let result = game.headers.result.as_deref().unwrap_or("*");
//!             append_example_line(&mut line, &id, &game.replay.moves, &game.replay.states, result)?;
//!             assert_eq!(game.replay.plies(), 20);
//!         }
//!         Err(rejection) => println!("game {} rejected: {}", rejection.index, rejection.reason),
//!     }
//! }
//! assert!(line.starts_with(b"{\"example_id\": \"cwm_"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod encode;
pub mod ids;
pub mod jsonl;
pub mod replay;
pub mod rules;
pub mod split;

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// The fingerprint of the crate without the rules engine ([`rules`]): what the stages that
/// read, encode or split games depend on. Editing the diagnostics' rules therefore reruns the
/// diagnostics only, not parse, tokenize or the evaluations of a whole study. It is the
/// SHA-256 (hex) of the `name=digest` lines of every other file.
pub fn games_fingerprint() -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (name, digest) in FILE_FINGERPRINTS {
        if !name.starts_with("src/rules/") {
            hasher.update(format!("{name}={digest}\n"));
        }
    }
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    /// The games fingerprint is a digest that differs from the whole crate's.
    #[test]
    fn games_fingerprint_is_a_digest_without_the_rules() {
        let games = crate::games_fingerprint();
        assert_eq!(games.len(), 64);
        assert!(games.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(games, crate::SOURCE_FINGERPRINT);
        assert!(
            crate::FILE_FINGERPRINTS
                .iter()
                .any(|(name, _)| name.starts_with("src/rules/"))
        );
    }

    /// The pipeline moves these between threads.
    #[test]
    fn public_types_are_send_and_sync_where_shared() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<crate::replay::PgnGames<std::fs::File>>();
        send::<crate::replay::RawGame>();
        send::<crate::replay::KeptGame>();
        send::<crate::replay::Rejection>();
        send_sync::<crate::ids::RealGameIds>();
        send_sync::<crate::replay::ReplayConfig>();
    }
}
