//! A position plus the history python-chess needs to decide `outcome(claim_draw=True)`.
//!
//! [`Arbiter`] owns the current position, its legal moves and the repetition history, and
//! answers [`Arbiter::outcome`] exactly as python-chess 1.11.2 does (spec E.5):
//!
//! 1. checkmate; 2. insufficient material for both colours; 3. stalemate; 4. halfmove clock
//!    ≥ 150; 5. fivefold repetition; 6. fifty-move claim (clock ≥ 100, or ≥ 99 and some legal
//!    non-zeroing move reaches 100 in a position that has a legal move); 7. threefold claim (the
//!    current position occurred ≥ 3 times, or some legal move leads to a position that occurred
//!    ≥ 2 times).
//!
//! Repetitions are counted over python-chess's window: the positions since the last
//! irreversible move (a capture, a pawn move, a move that reduces castling rights, or any move
//! made from a position with a legal en-passant capture), the position before that move
//! excluded. Positions are compared by python-chess's transposition key: placement, side to
//! move, castling rights and the en-passant square *only when a legal en-passant capture
//! exists*. The history stores that key in full, behind a Zobrist hash that is compared first,
//! so equality is exact and usually costs one integer comparison.
//!
//! Per ply the arbiter generates the legal moves at most once, and only when asked (fast mode
//! usually never asks: its sampler finds a legal move on its own), updates the hash
//! incrementally where shakmaty can, and scans the history for the current position only among positions with the
//! same side to move. The child positions of the threefold claim are only looked at when some
//! position in the window has already repeated, which is rare.

use std::cell::OnceCell;

use shakmaty::{
    Bitboard, Board, Chess, Color, EnPassantMode, Move, MoveList, Position, Square,
    zobrist::{Zobrist64, ZobristValue},
};
use thiserror::Error;

use crate::termination::{Outcome, Termination, is_insufficient_material};

/// A move that [`Arbiter::play`] or [`Arbiter::play_nth`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlayError {
    /// The move is not legal in the current position.
    #[error("illegal move {0:?}")]
    IllegalMove(Move),
    /// There is no legal move with this index.
    #[error("move index {index} out of range for {len} legal moves")]
    IndexOutOfRange {
        /// The requested index.
        index: usize,
        /// The number of legal moves.
        len: usize,
    },
}

/// python-chess's transposition key, behind its Zobrist hash.
///
/// The derived equality compares the hash first, so unequal keys almost always differ at the
/// first field.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    hash: Zobrist64,
    board: Board,
    turn: Color,
    castling: Bitboard,
    ep: Option<Square>,
}

impl Key {
    /// The key of `position`, whose legal en-passant square is `ep` and whose Zobrist hash
    /// (en passant in [`EnPassantMode::Legal`]) is `hash`.
    fn new(position: &Chess, ep: Option<Square>, hash: Zobrist64) -> Key {
        Key {
            hash,
            board: position.board().clone(),
            turn: position.turn(),
            castling: position.castles().castling_rights(),
            ep,
        }
    }

    /// The key of `position` computed from scratch.
    fn of(position: &Chess) -> Key {
        Key::new(
            position,
            position.legal_ep_square(),
            position.zobrist_hash(EnPassantMode::Legal),
        )
    }
}

/// The positions since the last irreversible move, one per ply, oldest first; the newest is
/// the position one ply before the current one.
///
/// Hashes are kept apart from the full keys so that the scan reads one dense array and touches
/// a full key only on a hash match.
#[derive(Debug, Clone, Default)]
struct Window {
    hashes: Vec<Zobrist64>,
    keys: Vec<Key>,
}

impl Window {
    fn clear(&mut self) {
        self.hashes.clear();
        self.keys.clear();
    }

    fn push(&mut self, key: Key) {
        self.hashes.push(key.hash);
        self.keys.push(key);
    }

    /// Occurrences of `key` among the positions `1 + skip`, `3 + skip`, ... plies before the
    /// current one: `skip = 0` for a child of the current position, `skip = 1` for the current
    /// position itself (only positions with the same side to move can be equal).
    fn count(&self, key: &Key, skip: usize) -> usize {
        let mut count = 0;
        let mut next = self.hashes.len().checked_sub(1 + skip);
        while let Some(i) = next {
            if self.hashes[i] == key.hash && self.keys[i] == *key {
                count += 1;
            }
            next = i.checked_sub(2);
        }
        count
    }
}

/// The Zobrist hash of `position` in [`EnPassantMode::Legal`], given its legal en-passant
/// square `ep` (saves generating the en-passant moves a second time).
fn legal_mode_hash(position: &Chess, ep: Option<Square>) -> Zobrist64 {
    let mut hash: Zobrist64 = position.zobrist_hash(EnPassantMode::Always);
    if let (Some(square), None) = (position.maybe_ep_square(), ep) {
        hash ^= Zobrist64::zobrist_for_en_passant_file(square.file());
    }
    hash
}

/// python-chess's `_reduces_castling_rights(move)` in `position` (standard chess).
fn reduces_castling_rights(position: &Chess, m: Move) -> bool {
    let rights = position.castles().castling_rights();
    match m {
        Move::Castle { .. } => true,
        Move::Normal { role, from, to, .. } => {
            rights.contains(from)
                || rights.contains(to)
                || (role == shakmaty::Role::King && position.castles().has_color(position.turn()))
        }
        Move::EnPassant { .. } | Move::Put { .. } => false,
    }
}

/// The current position of a game, its legal moves, and the repetition history that decides
/// claimable draws exactly as python-chess does.
///
/// ```
/// use cwm_random_uniform::arbiter::Arbiter;
/// use shakmaty::Chess;
///
/// let mut arbiter = Arbiter::new(Chess::default());
/// assert_eq!(arbiter.legal_moves().len(), 20);
/// assert_eq!(arbiter.outcome(), None);
/// arbiter.play_nth(0)?;
/// # Ok::<(), cwm_random_uniform::arbiter::PlayError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Arbiter {
    position: Chess,
    /// The legal moves of `position`, generated on first use.
    legal: OnceCell<MoveList>,
    current: Key,
    /// The positions before the current one since the last irreversible move.
    window: Window,
    /// Occurrences of the current position in the window (itself included).
    current_count: u32,
    /// Whether some position of the window occurred at least twice.
    has_repeat: bool,
}

impl Default for Arbiter {
    /// The standard initial position with an empty history.
    fn default() -> Arbiter {
        Arbiter::new(Chess::default())
    }
}

impl Arbiter {
    /// Starts tracking from `position` with an empty history (like a python-chess board set up
    /// from a FEN, with an empty move stack).
    pub fn new(position: Chess) -> Arbiter {
        let current = Key::of(&position);
        Arbiter {
            position,
            legal: OnceCell::new(),
            current,
            window: Window::default(),
            current_count: 1,
            has_repeat: false,
        }
    }

    /// Starts over from `position` with an empty history, reusing this arbiter's allocation.
    pub fn restart(&mut self, position: Chess) {
        self.legal = OnceCell::new();
        self.current = Key::of(&position);
        self.position = position;
        self.window.clear();
        self.current_count = 1;
        self.has_repeat = false;
    }

    /// The current position.
    pub fn position(&self) -> &Chess {
        &self.position
    }

    /// The legal moves of the current position, in shakmaty's generation order (generated on
    /// first use after each move).
    pub fn legal_moves(&self) -> &MoveList {
        self.legal.get_or_init(|| self.position.legal_moves())
    }

    /// How often the current position occurred in the repetition window, itself included.
    pub fn repetitions(&self) -> u32 {
        self.current_count
    }

    /// python-chess's `board.outcome(claim_draw=True)`: why the game is over, or `None` if it
    /// goes on. `None` implies at least one legal move (no legal move is always checkmate,
    /// stalemate or, checked between them, insufficient material).
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome_knowing(false)
    }

    /// [`Arbiter::outcome`] for a caller that already found a legal move of the current
    /// position, which saves generating all of them in most positions.
    pub(crate) fn outcome_with_a_legal_move(&self) -> Option<Outcome> {
        self.outcome_knowing(true)
    }

    fn outcome_knowing(&self, has_legal_move: bool) -> Option<Outcome> {
        self.termination(has_legal_move)
            .map(|termination| Outcome::new(termination, self.position.turn()))
    }

    /// The rule that ends the game now, in python-chess's checking order; `has_legal_move`
    /// says the caller knows a legal move exists (otherwise the moves are generated).
    fn termination(&self, has_legal_move: bool) -> Option<Termination> {
        let no_moves = !has_legal_move && self.legal_moves().is_empty();
        if no_moves && self.position.is_check() {
            return Some(Termination::Checkmate);
        }
        if is_insufficient_material(self.position.board()) {
            return Some(Termination::InsufficientMaterial);
        }
        if no_moves {
            return Some(Termination::Stalemate);
        }
        if self.position.halfmoves() >= 150 {
            return Some(Termination::SeventyFiveMoves);
        }
        if self.current_count >= 5 {
            return Some(Termination::FivefoldRepetition);
        }
        if self.can_claim_fifty_moves() {
            return Some(Termination::FiftyMoves);
        }
        if self.can_claim_threefold_repetition() {
            return Some(Termination::ThreefoldRepetition);
        }
        None
    }

    /// python-chess's `can_claim_fifty_moves()`, given that the position has a legal move.
    fn can_claim_fifty_moves(&self) -> bool {
        let halfmoves = self.position.halfmoves();
        if halfmoves >= 100 {
            return true;
        }
        halfmoves >= 99
            && self.legal_moves().iter().any(|m| {
                !m.is_zeroing() && {
                    let mut child = self.position.clone();
                    child.play_unchecked(*m);
                    !child.legal_moves().is_empty()
                }
            })
    }

    /// python-chess's `can_claim_threefold_repetition()`.
    fn can_claim_threefold_repetition(&self) -> bool {
        if self.current_count >= 3 {
            return true;
        }
        if !self.has_repeat {
            // No position of the window occurred twice, so no child can make a third.
            return false;
        }
        self.legal_moves().iter().any(|m| {
            let mut child = self.position.clone();
            child.play_unchecked(*m);
            let key = match self.incremental_hash(*m) {
                Some(hash) => Key::new(&child, child.legal_ep_square(), hash),
                None => Key::of(&child),
            };
            // The child has the other side to move: the current position cannot match.
            let seen = self.window.count(&key, 0);
            seen >= 2
        })
    }

    /// The Zobrist hash of the position after `m`, where shakmaty can update it incrementally.
    fn incremental_hash(&self, m: Move) -> Option<Zobrist64> {
        self.position
            .update_zobrist_hash(self.current.hash, m, EnPassantMode::Legal)
    }

    /// Plays a legal move.
    ///
    /// # Errors
    ///
    /// [`PlayError::IllegalMove`] if `m` is not one of [`Arbiter::legal_moves`]; the arbiter is
    /// unchanged.
    pub fn play(&mut self, m: Move) -> Result<(), PlayError> {
        if !self.legal_moves().contains(&m) {
            return Err(PlayError::IllegalMove(m));
        }
        self.advance(m);
        Ok(())
    }

    /// Plays the legal move at `index` of [`Arbiter::legal_moves`] and returns it.
    ///
    /// # Errors
    ///
    /// [`PlayError::IndexOutOfRange`] if there is no such move; the arbiter is unchanged.
    pub fn play_nth(&mut self, index: usize) -> Result<Move, PlayError> {
        let legal = self.legal_moves();
        let m = *legal.get(index).ok_or(PlayError::IndexOutOfRange {
            index,
            len: legal.len(),
        })?;
        self.advance(m);
        Ok(m)
    }

    /// Plays `m`, which must be legal in the current position, and updates the history.
    pub(crate) fn advance(&mut self, m: Move) {
        let irreversible = m.is_zeroing()
            || reduces_castling_rights(&self.position, m)
            || self.current.ep.is_some();
        let incremental = self.incremental_hash(m);
        self.position.play_unchecked(m);
        self.legal = OnceCell::new();
        let ep = self.position.legal_ep_square();
        let hash = incremental.unwrap_or_else(|| legal_mode_hash(&self.position, ep));
        let next = Key::new(&self.position, ep, hash);
        let previous = std::mem::replace(&mut self.current, next);
        if irreversible {
            self.window.clear();
            self.has_repeat = false;
        } else {
            self.window.push(previous);
        }
        let seen = self.window.count(&self.current, 1);
        self.current_count = 1 + u32::try_from(seen).unwrap_or(u32::MAX - 1);
        if self.current_count >= 2 {
            self.has_repeat = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::{CastlingMode, fen::Fen, uci::UciMove};

    use super::*;

    fn play_uci(arbiter: &mut Arbiter, moves: &str) {
        for uci in moves.split_whitespace() {
            let m = uci
                .parse::<UciMove>()
                .unwrap()
                .to_move(arbiter.position())
                .unwrap();
            arbiter.play(m).unwrap();
        }
    }

    fn from_fen(fen: &str) -> Arbiter {
        let position: Chess = fen
            .parse::<Fen>()
            .unwrap()
            .into_position(CastlingMode::Standard)
            .unwrap();
        Arbiter::new(position)
    }

    #[test]
    fn fools_mate() {
        let mut arbiter = Arbiter::default();
        play_uci(&mut arbiter, "f2f3 e7e5 g2g4");
        assert_eq!(arbiter.outcome(), None);
        play_uci(&mut arbiter, "d8h4");
        let outcome = arbiter.outcome().unwrap();
        assert_eq!(outcome.termination, Termination::Checkmate);
        assert_eq!(outcome.result.as_str(), "0-1");
    }

    #[test]
    fn threefold_is_claimed_one_move_early() {
        let mut arbiter = Arbiter::default();
        // The start position occurs again after 4 and 8 plies; after 7 plies the next move
        // would make its third occurrence.
        play_uci(&mut arbiter, "g1f3 g8f6 f3g1 f6g8 g1f3 g8f6 f3g1");
        assert_eq!(
            arbiter.outcome().map(|o| o.termination),
            Some(Termination::ThreefoldRepetition)
        );
    }

    #[test]
    fn two_repetitions_are_not_enough() {
        let mut arbiter = Arbiter::default();
        play_uci(&mut arbiter, "g1f3 g8f6 f3g1 f6g8 g1f3 g8f6");
        assert_eq!(arbiter.outcome(), None);
    }

    #[test]
    fn fifty_move_claim_at_99() {
        let mut arbiter = from_fen("8/8/8/3k4/8/8/8/R3K3 w - - 98 80");
        assert_eq!(arbiter.outcome(), None);
        play_uci(&mut arbiter, "a1a2");
        assert_eq!(
            arbiter.outcome().map(|o| o.termination),
            Some(Termination::FiftyMoves)
        );
    }

    #[test]
    fn insufficient_before_stalemate() {
        // Black to move is stalemated, but bare kings and a bishop are checked first.
        let arbiter = from_fen("k7/2K5/1B6/8/8/8/8/8 b - - 0 1");
        assert_eq!(
            arbiter.outcome().map(|o| o.termination),
            Some(Termination::InsufficientMaterial)
        );
    }

    #[test]
    fn incremental_keys_equal_keys_from_scratch() {
        let mut arbiter = Arbiter::default();
        let mut choice = 12345usize;
        for _ in 0..2000 {
            if arbiter.legal_moves().is_empty() {
                arbiter.restart(Chess::default());
            }
            assert_eq!(arbiter.legal_moves(), &arbiter.position().legal_moves());
            assert_eq!(arbiter.current, Key::of(arbiter.position()));
            choice = choice
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let index = (choice >> 33) % arbiter.legal_moves().len();
            arbiter.play_nth(index).unwrap();
        }
    }

    #[test]
    fn illegal_move_and_bad_index_are_errors() {
        let mut arbiter = Arbiter::default();
        let m = Move::Normal {
            role: shakmaty::Role::Queen,
            from: Square::D1,
            capture: None,
            to: Square::D5,
            promotion: None,
        };
        assert_eq!(arbiter.play(m), Err(PlayError::IllegalMove(m)));
        assert_eq!(
            arbiter.play_nth(20),
            Err(PlayError::IndexOutOfRange { index: 20, len: 20 })
        );
    }
}
