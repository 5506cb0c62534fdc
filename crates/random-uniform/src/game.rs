//! One generated game: its index and id, packed moves, outcome, and replay helpers.
//!
//! * A [`Game`] stores only what the pipeline writes: the packed move ids (spec A.1, without
//!   `START`), the outcome and the final position. States are recomputed on demand by
//!   [`Game::positions`] and [`Game::states`], which replay the moves from the initial
//!   position.
//! * Ids follow the reference: `cwm_random_` and the index among *all* generated games,
//!   zero-padded to five digits (spec E.3), so dropped short games leave gaps.

use cwm_chess::encode::{EpConvention, START, StateLabels, encode_state, pack_move};
use cwm_chess::ids::random_game_id;
use shakmaty::{Chess, Position};

use crate::termination::{GameResult, Outcome, Termination};

/// A finished random game.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Game {
    index: u64,
    moves: Vec<u16>,
    outcome: Outcome,
    final_position: Chess,
}

impl Game {
    /// Assembles a game; `moves` must be the packed legal moves that lead from the initial
    /// position to `final_position`, where `outcome` holds.
    pub(crate) fn new(
        index: u64,
        moves: Vec<u16>,
        outcome: Outcome,
        final_position: Chess,
    ) -> Game {
        Game {
            index,
            moves,
            outcome,
            final_position,
        }
    }

    /// Index among all generated games of the run (dropped short games included).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The example id, `cwm_random_{index:05}`.
    pub fn id(&self) -> String {
        random_game_id(self.index)
    }

    /// Number of half-moves played.
    pub fn plies(&self) -> usize {
        self.moves.len()
    }

    /// Packed move ids (spec A.1), one per ply, without the leading `START` token.
    pub fn moves(&self) -> &[u16] {
        &self.moves
    }

    /// The model's input tokens: `START`, then the packed moves (spec A.1; `plies + 1` tokens).
    pub fn tokens(&self) -> impl Iterator<Item = u16> + '_ {
        std::iter::once(START).chain(self.moves.iter().copied())
    }

    /// Why and how the game ended.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The rule that ended the game.
    pub fn termination(&self) -> Termination {
        self.outcome.termination
    }

    /// The game's result.
    pub fn result(&self) -> GameResult {
        self.outcome.result
    }

    /// The position after the last move.
    pub fn final_position(&self) -> &Chess {
        &self.final_position
    }

    /// Whether the reference keeps this game: at least `2 * min_fullmoves` plies (spec E.1, E.5;
    /// the reference uses `min_fullmoves = 10`).
    pub fn is_long_enough(&self, min_fullmoves: u32) -> bool {
        self.moves.len() as u64 >= 2 * u64::from(min_fullmoves)
    }

    /// The positions of the game: the initial position, then the position after each move
    /// (`plies + 1` positions).
    pub fn positions(&self) -> Positions<'_> {
        Positions {
            moves: &self.moves,
            next: Some(Chess::default()),
        }
    }

    /// The 75 state labels of every position of [`Game::positions`] (spec A.2, E.2), with the
    /// en-passant labels following `ep`.
    pub fn states(&self, ep: EpConvention) -> impl Iterator<Item = StateLabels> + '_ {
        self.positions()
            .map(move |position| encode_state(&position, ep))
    }
}

/// Iterator over the positions of a [`Game`], replaying its packed moves.
///
/// Ends early if a packed id is not a legal move, which cannot happen for generated games.
#[derive(Debug, Clone)]
pub struct Positions<'a> {
    moves: &'a [u16],
    next: Option<Chess>,
}

impl Iterator for Positions<'_> {
    type Item = Chess;

    fn next(&mut self) -> Option<Chess> {
        let current = self.next.take()?;
        if let Some((&id, rest)) = self.moves.split_first() {
            self.moves = rest;
            let played = current
                .legal_moves()
                .into_iter()
                .find(|m| pack_move(m) == id)
                .map(|m| {
                    let mut child = current.clone();
                    child.play_unchecked(m);
                    child
                });
            self.next = played;
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::fast_game;

    #[test]
    fn ids_tokens_and_states_line_up() {
        let game = fast_game(0, 42).unwrap();
        assert_eq!(game.id(), "cwm_random_00042");
        let tokens: Vec<u16> = game.tokens().collect();
        assert_eq!(tokens[0], START);
        assert_eq!(&tokens[1..], game.moves());
        assert_eq!(
            game.states(EpConvention::Reference).count(),
            game.plies() + 1
        );
        assert_eq!(
            game.positions().last().as_ref(),
            Some(game.final_position())
        );
    }
}
