//! From a PGN stream to replayed games, in two steps kept apart so the second can run on worker
//! threads.
//!
//! 1. **Syntax** ([`PgnGames`], sequential and cheap): pgn-reader splits the stream into games;
//!    each becomes a [`RawGame`] with its 0-based index in the stream, its byte offset, the
//!    headers the pipeline keeps ([`GameHeaders`], never player names) and its mainline SAN
//!    tokens. Variations, comments and NAGs are skipped. Nothing is checked for legality yet.
//! 2. **Legality** ([`replay_game`], parallelisable): [`RawGame::screen`] applies the cheap
//!    filters, then the SANs are replayed with shakmaty into packed move ids and per-ply state
//!    labels ([`ReplayedGame`]).
//!
//! Rejections are data: every game comes out either kept or as a [`Rejection`] carrying a
//! [`RejectReason`]; a bad game never aborts the stream and no input makes this module panic.
//! Only an I/O error of the underlying reader ends the stream early.
//!
//! # Differences from the reference (spec E.1)
//!
//! * A game with an illegal or ambiguous move is rejected whole. python-chess's lenient reader
//!   instead truncates the mainline at the bad move and keeps the game if 20 plies remain.
//! * The filters run in this order, and a game gets the first reason that applies: PGN syntax,
//!   missing Site, non-standard variant, FEN start, too short, illegal or ambiguous move. The
//!   length filter counts SAN tokens, so it runs before the expensive replay; since bad games
//!   are rejected whole, the count equals the replayed plies of every kept game.
//! * SAN is resolved as python-chess's `Board.parse_san` resolves it where shakmaty is
//!   stricter: the capture sign `x` is not checked (`Be2c4` plays `Bxc4`), and a move with
//!   origin file and rank but no piece letter is the move between those squares (`g1f3`).
//!   Null moves (`--`, `Z0`) are illegal moves here; python-chess would push them.
//! * pgn-reader reads consecutive header-only games (no movetext, not even a result) as one
//!   game whose later tags override the earlier ones; game indices count games as pgn-reader
//!   splits them. Lichess exports always give a result, so their games are never merged.
//! * The reference raises on a missing Site header; here it is a rejection like any other.
//! * pgn-reader skips movetext tokens it cannot read as SAN, a result or an annotation, without
//!   telling the visitor. A skipped token that stood for a move makes a later move illegal, so
//!   such games are still rejected; a skipped token that stood for nothing is not noticed.

mod legality;
mod syntax;

pub use legality::{
    FenStartError, KeptGame, ReplayConfig, ReplayedGame, position_from_fen, replay_game,
    replay_moves_into, replay_sans, replay_sans_into,
};
pub use syntax::{GameHeaders, PgnGames, RawGame, STANDARD_START_FEN, SyntaxProblem};

use thiserror::Error;

/// Why a game was not kept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RejectReason {
    /// The PGN could not be read cleanly.
    #[error("PGN syntax problem: {0}")]
    PgnSyntax(SyntaxProblem),
    /// There is no Site header (or it is blank), so the game has no id.
    #[error("missing Site header")]
    MissingSite,
    /// The Variant header names something other than standard chess.
    #[error("non-standard variant {variant:?}")]
    NonStandardVariant {
        /// The Variant header as written.
        variant: String,
    },
    /// The game starts from a FEN other than the standard initial position.
    #[error("starts from a set-up position (FEN {fen:?})")]
    FenStart {
        /// The FEN header as written.
        fen: String,
    },
    /// Fewer plies than the minimum.
    #[error("too short: {plies} plies, at least {min_plies} needed")]
    TooShort {
        /// Plies in the mainline.
        plies: usize,
        /// The minimum, `2 * min_fullmoves`.
        min_plies: usize,
    },
    /// A mainline SAN matches no legal move.
    #[error("illegal move {san} at ply {ply}")]
    IllegalMove {
        /// 1-based ply of the move.
        ply: usize,
        /// The SAN as shakmaty writes it back.
        san: String,
    },
    /// A mainline SAN matches several legal moves.
    #[error("ambiguous move {san} at ply {ply}")]
    AmbiguousMove {
        /// 1-based ply of the move.
        ply: usize,
        /// The SAN as shakmaty writes it back.
        san: String,
    },
}

impl RejectReason {
    /// A short stable name of the reason's kind, for counters and logs.
    pub const fn code(&self) -> &'static str {
        match self {
            RejectReason::PgnSyntax(_) => "pgn_syntax",
            RejectReason::MissingSite => "missing_site",
            RejectReason::NonStandardVariant { .. } => "non_standard_variant",
            RejectReason::FenStart { .. } => "fen_start",
            RejectReason::TooShort { .. } => "too_short",
            RejectReason::IllegalMove { .. } => "illegal_move",
            RejectReason::AmbiguousMove { .. } => "ambiguous_move",
        }
    }
}

/// A game that was not kept: where it was and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 0-based index of the game in its stream.
    pub index: u64,
    /// Byte offset of the game's first byte in its stream.
    pub offset: u64,
    /// The Site header, if any, to find the game again.
    pub site: Option<String>,
    /// Why it was rejected.
    pub reason: RejectReason,
}
