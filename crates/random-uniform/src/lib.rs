//! Uniformly random legal chess games, including an exact replay of the reference generator.
//!
//! * [`generator::ReferenceGames`] reproduces the reference's random-uniform test set bit for
//!   bit (spec E.5): CPython's `random.Random` ([`python_random`]), python-chess 1.11.2's
//!   legal-move order ([`move_order`]) and its `outcome(claim_draw=True)` ([`arbiter`]).
//! * [`generator::FastGames`] plays the same rules with a fast per-game RNG ([`fast_rng`]) and a
//!   rejection sampler that rarely needs the full legal-move list ([`sampler`]), in parallel on
//!   rayon; its output depends on the seed only, not on the thread count.
//! * [`special::SpecialGames`] plays the fast generator's games with a bias towards castling,
//!   en-passant and promotion moves (beyond-spec E6's special-biased random play); bias 0 is
//!   the fast generator itself.
//! * [`continuation`] keeps a real game's first `k` plies and continues it with the fast
//!   generator's random moves until the arbiter ends it (beyond-spec E6's real-prefix/random-
//!   continuation split), the prefix's positions counting towards repetitions.
//! * Positions, legal moves and move application come from shakmaty; move ids and state labels
//!   from `cwm_chess::encode`. This crate never re-implements either.
//! * A [`game::Game`] keeps packed moves, the outcome and the final position; states are
//!   recomputed by replay when wanted. Pure library: no files, no CLI, no configuration.
//!
//! ```
//! use cwm_random_uniform::generator::{DEFAULT_MIN_FULLMOVES, Games, Mode};
//!
//! let kept: Vec<_> = Games::new(Mode::Reference, 0)
//!     .kept(DEFAULT_MIN_FULLMOVES)
//!     .take(2)
//!     .collect();
//! assert_eq!(kept[0].id(), "cwm_random_00000");
//! assert_eq!(kept[0].termination().python_name(), "FIFTY_MOVES");
//! assert_eq!(kept[1].result().as_str(), "0-1");
//! ```
#![deny(missing_docs)]

pub mod arbiter;
pub mod continuation;
pub mod fast_rng;
pub mod game;
pub mod generator;
pub mod move_order;
pub mod python_random;
pub mod sampler;
pub mod special;
pub mod termination;

pub use arbiter::Arbiter;
pub use continuation::{Continuation, ContinuationError, play_continuation};
pub use game::Game;
pub use generator::{FastGames, Games, Mode, ReferenceGames};
pub use special::{SpecialBias, SpecialGames};
pub use termination::{GameResult, Outcome, Termination};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));
