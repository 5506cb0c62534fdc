//! A slow, independent `outcome(claim_draw=True)`, written the way python-chess does it.
//!
//! It keeps every position of the game and walks back through the move stack on every call,
//! comparing positions with shakmaty's `Chess` equality (placement, turn, castling rights and
//! the *legal* en-passant square: python-chess's transposition key) and stopping at shakmaty's
//! `is_irreversible`. Nothing here shares code with the crate's `Arbiter`.

use cwm_random_uniform::{Outcome, Termination};
use shakmaty::{Chess, Move, Position};

/// The outcome of the game whose positions are `positions` (the last is the current one) and
/// whose moves are `moves` (`moves[i]` leads from `positions[i]` to `positions[i + 1]`).
pub fn outcome(positions: &[Chess], moves: &[Move]) -> Option<Outcome> {
    let current = positions.last()?;
    let termination = termination(positions, moves, current)?;
    Some(Outcome::new(termination, current.turn()))
}

fn termination(positions: &[Chess], moves: &[Move], current: &Chess) -> Option<Termination> {
    let legal = current.legal_moves();
    if legal.is_empty() && current.is_check() {
        return Some(Termination::Checkmate);
    }
    if current.is_insufficient_material() {
        return Some(Termination::InsufficientMaterial);
    }
    if legal.is_empty() {
        return Some(Termination::Stalemate);
    }
    if current.halfmoves() >= 150 {
        return Some(Termination::SeventyFiveMoves);
    }
    // python-chess pops moves until one is irreversible, counting the positions it reaches.
    let mut window = vec![current];
    for i in (0..moves.len()).rev() {
        if positions[i].is_irreversible(moves[i]) {
            break;
        }
        window.push(&positions[i]);
    }
    let occurrences = |p: &Chess| window.iter().filter(|w| **w == p).count();
    if occurrences(current) >= 5 {
        return Some(Termination::FivefoldRepetition);
    }
    let child = |m: &Move| {
        let mut child = current.clone();
        child.play_unchecked(*m);
        child
    };
    let halfmoves = current.halfmoves();
    if halfmoves >= 100
        || (halfmoves >= 99
            && legal
                .iter()
                .any(|m| !m.is_zeroing() && !child(m).legal_moves().is_empty()))
    {
        return Some(Termination::FiftyMoves);
    }
    if occurrences(current) >= 3 || legal.iter().any(|m| occurrences(&child(m)) >= 2) {
        return Some(Termination::ThreefoldRepetition);
    }
    None
}
