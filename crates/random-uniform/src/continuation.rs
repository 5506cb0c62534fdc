//! Real prefix + random continuation (beyond-spec E6): the first `k` plies of a real game, then
//! uniformly random legal moves until the game ends.
//!
//! * The prefix (`k` packed move ids, spec A.1) is replayed from the initial position through
//!   an [`Arbiter`], so the random part sees the prefix's history: the halfmove clock carries
//!   over, and positions of the prefix count towards threefold and fivefold repetitions.
//! * The arbiter is not consulted during the prefix: a draw the real players could have
//!   claimed before ply `k` (or a rule python-chess would apply on its own) does not end the
//!   game there. From the switch ply `k` on, the game ends exactly as a fast-mode game does:
//!   the position at ply `k` is checked first, then the position after every random move.
//! * When the position at ply `k` is already over, the game ends at ply `k` with that outcome
//!   and no random move ([`Continuation::random_plies`] is 0): checkmate or stalemate, say, or
//!   a draw that can still be claimed there (a fifty-move claim, or a threefold repetition,
//!   which python-chess claims one move early, when some legal move would repeat a position a
//!   third time). The `random_continuation` stage drops such games: they have no random part.
//! * The random moves are the fast generator's ([`crate::generator::play_fast_game`]): the
//!   stream is `Xoshiro256PlusPlus::for_game(seed, index)`, each move comes from the rejection
//!   sampler or, where it gives up, uniformly from the legal-move list. The result depends on
//!   the prefix, `seed` and `index` only, never on the thread that computes it; with `k = 0`
//!   it is fast-mode game `index` of `seed` bit for bit.
//! * A game with fewer than `k` plies has no prefix of length `k`:
//!   [`ContinuationError::TooShort`], which callers count as skipped. A prefix id that is not a
//!   legal move is [`ContinuationError::IllegalPrefixMove`]; the moves after the prefix are
//!   never read.
//! * The [`Game`] of a continuation carries `index`, so its [`Game::id`] has the generator's
//!   `cwm_random_NNNNN` form; callers name continuations themselves (the stage writes
//!   `<source id>~k<k>`).

use cwm_chess::encode::pack_move;
use shakmaty::Chess;
use thiserror::Error;

use crate::arbiter::{Arbiter, PlayError};
use crate::fast_rng::Xoshiro256PlusPlus;
use crate::game::Game;
use crate::sampler::sample_legal_move;

/// Why a game could not be continued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ContinuationError {
    /// The game has fewer plies than the prefix: it is skipped, not continued.
    #[error("game {index}: {plies} plies, fewer than the prefix of {prefix_plies}")]
    TooShort {
        /// The game's index.
        index: u64,
        /// The game's length in plies.
        plies: usize,
        /// The requested prefix length `k`.
        prefix_plies: usize,
    },
    /// A move of the prefix is not legal where it is played.
    #[error("game {index}: prefix move {ply} (id {move_id}) is not legal")]
    IllegalPrefixMove {
        /// The game's index.
        index: u64,
        /// The 1-based ply of the move.
        ply: usize,
        /// The packed move id.
        move_id: u16,
    },
    /// A random move could not be played. The arbiter ends every position without a legal
    /// move, so this does not happen; it is an error rather than a panic all the same.
    #[error("game {index}: random move at ply {ply}: {source}")]
    RandomMove {
        /// The game's index.
        index: u64,
        /// The 1-based ply of the move.
        ply: usize,
        /// What the arbiter refused.
        source: PlayError,
    },
}

/// A game made of a real prefix and a random continuation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    game: Game,
    switch_ply: usize,
}

impl Continuation {
    /// The whole game: the prefix's moves, then the random ones, and the arbiter's outcome.
    pub fn game(&self) -> &Game {
        &self.game
    }

    /// The game, dropping the switch ply.
    pub fn into_game(self) -> Game {
        self.game
    }

    /// The switch ply `k`: moves `0..k` are the real game's, moves from `k` on are random.
    pub fn switch_ply(&self) -> usize {
        self.switch_ply
    }

    /// The number of random moves (0 when the position at the switch ply is already over).
    pub fn random_plies(&self) -> usize {
        self.game.plies().saturating_sub(self.switch_ply)
    }
}

/// Replays `prefix` from the initial position on `arbiter` (which starts over), so that its
/// history holds every position of the prefix.
fn replay_prefix(
    arbiter: &mut Arbiter,
    prefix: &[u16],
    index: u64,
) -> Result<(), ContinuationError> {
    arbiter.restart(Chess::default());
    for (ply, &move_id) in prefix.iter().enumerate() {
        let illegal = ContinuationError::IllegalPrefixMove {
            index,
            ply: ply + 1,
            move_id,
        };
        let nth = arbiter
            .legal_moves()
            .iter()
            .position(|m| pack_move(m) == move_id)
            .ok_or(illegal)?;
        arbiter.play_nth(nth).map_err(|_| illegal)?;
    }
    Ok(())
}

/// Continues game `index` (packed moves `moves`, without `START`) after its first
/// `prefix_plies` plies with fast-mode random moves of a run seeded with `seed`, reusing
/// `arbiter`'s allocation. See the module doc for the rules.
///
/// ```
/// use cwm_random_uniform::Arbiter;
/// use cwm_random_uniform::continuation::play_continuation;
/// use cwm_random_uniform::generator::fast_game;
///
/// let source = fast_game(1, 0).expect("a game");
/// let mut arbiter = Arbiter::default();
/// let continued = play_continuation(&mut arbiter, source.moves(), 6, 9, 0)?;
/// assert_eq!(continued.switch_ply(), 6);
/// assert_eq!(continued.game().moves()[..6], source.moves()[..6]);
/// # Ok::<(), cwm_random_uniform::continuation::ContinuationError>(())
/// ```
///
/// # Errors
///
/// [`ContinuationError::TooShort`] when `moves` has fewer than `prefix_plies` plies, and
/// [`ContinuationError::IllegalPrefixMove`] when a prefix move is not legal.
pub fn play_continuation(
    arbiter: &mut Arbiter,
    moves: &[u16],
    prefix_plies: usize,
    seed: u64,
    index: u64,
) -> Result<Continuation, ContinuationError> {
    let prefix = moves
        .get(..prefix_plies)
        .ok_or(ContinuationError::TooShort {
            index,
            plies: moves.len(),
            prefix_plies,
        })?;
    replay_prefix(arbiter, prefix, index)?;
    let mut rng = Xoshiro256PlusPlus::for_game(seed, index);
    let mut played = Vec::with_capacity(prefix_plies + 256);
    played.extend_from_slice(prefix);
    // From here on, exactly a fast-mode game (`generator::play_fast_game`).
    loop {
        let sampled = sample_legal_move(arbiter.position(), &mut rng);
        let outcome = match sampled {
            Some(_) => arbiter.outcome_with_a_legal_move(),
            None => arbiter.outcome(),
        };
        if let Some(outcome) = outcome {
            let game = Game::new(index, played, outcome, arbiter.position().clone());
            return Ok(Continuation {
                game,
                switch_ply: prefix_plies,
            });
        }
        let m = match sampled {
            Some(m) => {
                arbiter.advance(m);
                m
            }
            None => {
                let len = u32::try_from(arbiter.legal_moves().len()).unwrap_or(u32::MAX);
                let pick = rng.below(len) as usize;
                arbiter
                    .play_nth(pick)
                    .map_err(|source| ContinuationError::RandomMove {
                        index,
                        ply: played.len() + 1,
                        source,
                    })?
            }
        };
        played.push(pack_move(&m));
    }
}

/// [`play_continuation`] with a fresh [`Arbiter`].
///
/// # Errors
///
/// As [`play_continuation`].
pub fn continuation(
    moves: &[u16],
    prefix_plies: usize,
    seed: u64,
    index: u64,
) -> Result<Continuation, ContinuationError> {
    play_continuation(&mut Arbiter::default(), moves, prefix_plies, seed, index)
}

#[cfg(test)]
mod tests {
    use shakmaty::uci::UciMove;
    use shakmaty::{Move, Position};

    use super::*;
    use crate::generator::fast_game;
    use crate::termination::Termination;

    /// The packed ids of a line of UCI moves from the initial position.
    fn packed(line: &str) -> Vec<u16> {
        let mut position = Chess::default();
        let mut ids = Vec::new();
        for uci in line.split_whitespace() {
            let m: Move = uci.parse::<UciMove>().unwrap().to_move(&position).unwrap();
            ids.push(pack_move(&m));
            position.play_unchecked(m);
        }
        ids
    }

    /// A real opening: the Ruy Lopez, Morphy defence, 12 plies.
    const RUY_LOPEZ: &str = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1 f8e7 f1e1 b7b5";

    /// Replays `continued` with a fresh arbiter: every move legal, the prefix equal to
    /// `source`'s, no outcome from the switch ply until the last position, whose outcome is the
    /// game's.
    fn check(continued: &Continuation, source: &[u16]) {
        let game = continued.game();
        let k = continued.switch_ply();
        assert_eq!(game.moves()[..k], source[..k]);
        let mut arbiter = Arbiter::default();
        for (ply, &id) in game.moves().iter().enumerate() {
            if ply >= k {
                assert_eq!(arbiter.outcome(), None, "over before ply {ply}");
            }
            let nth = arbiter
                .legal_moves()
                .iter()
                .position(|m| pack_move(m) == id);
            arbiter.play_nth(nth.expect("a legal move")).unwrap();
        }
        assert_eq!(arbiter.outcome(), Some(game.outcome()));
        assert_eq!(arbiter.position(), game.final_position());
    }

    #[test]
    fn prefix_kept_then_legal_random_moves_until_the_arbiter_ends_the_game() {
        let ruy = packed(RUY_LOPEZ);
        for k in [0, 1, 7, 12] {
            let continued = continuation(&ruy, k, 5, 3).unwrap();
            assert_eq!(continued.switch_ply(), k);
            assert!(continued.random_plies() > 0);
            check(&continued, &ruy);
        }
        let mut arbiter = Arbiter::default();
        for index in 0..30 {
            let source = fast_game(2, index).unwrap();
            let k = source.plies().min(20);
            let continued = play_continuation(&mut arbiter, source.moves(), k, 8, index).unwrap();
            assert_eq!(continued.game().index(), index);
            check(&continued, source.moves());
        }
    }

    #[test]
    fn same_seed_and_index_same_game_other_seed_or_index_another() {
        let ruy = packed(RUY_LOPEZ);
        let one = continuation(&ruy, 12, 4, 10).unwrap();
        let mut arbiter = Arbiter::default();
        // A reused arbiter that played another game first gives the same result.
        play_continuation(&mut arbiter, &ruy, 3, 9, 9).unwrap();
        assert_eq!(
            play_continuation(&mut arbiter, &ruy, 12, 4, 10),
            Ok(one.clone())
        );
        let other_seed = continuation(&ruy, 12, 5, 10).unwrap();
        let other_index = continuation(&ruy, 12, 4, 11).unwrap();
        assert_ne!(one.game().moves(), other_seed.game().moves());
        assert_ne!(one.game().moves(), other_index.game().moves());
        assert_eq!(other_seed.game().moves()[..12], ruy[..]);
    }

    #[test]
    fn an_empty_prefix_is_the_fast_generators_game() {
        let ruy = packed(RUY_LOPEZ);
        for index in 0..20 {
            let continued = continuation(&ruy, 0, 6, index).unwrap();
            assert_eq!(Some(continued.game()), fast_game(6, index).as_ref());
            assert_eq!(continuation(&[], 0, 6, index), Ok(continued));
        }
    }

    #[test]
    fn a_game_shorter_than_the_prefix_is_too_short() {
        let ruy = packed(RUY_LOPEZ);
        assert_eq!(
            continuation(&ruy[..5], 6, 0, 4),
            Err(ContinuationError::TooShort {
                index: 4,
                plies: 5,
                prefix_plies: 6
            })
        );
        // The whole game as the prefix is fine.
        let whole = continuation(&ruy, ruy.len(), 0, 4).unwrap();
        assert_eq!(whole.switch_ply(), ruy.len());
        let message = continuation(&[], 1, 0, 7).unwrap_err().to_string();
        assert!(
            message.contains("game 7") && message.contains("prefix of 1"),
            "{message}"
        );
    }

    #[test]
    fn an_illegal_prefix_move_is_an_error_naming_its_ply() {
        let e4 = packed("e2e4")[0];
        let err = continuation(&[e4, e4], 2, 0, 3).unwrap_err();
        assert_eq!(
            err,
            ContinuationError::IllegalPrefixMove {
                index: 3,
                ply: 2,
                move_id: e4
            }
        );
        assert!(err.to_string().contains("prefix move 2"), "{err}");
        // Out-of-range ids (START, PAD) are illegal too.
        for bad in [20_480, 20_481, u16::MAX] {
            assert!(matches!(
                continuation(&[bad], 1, 0, 0),
                Err(ContinuationError::IllegalPrefixMove { ply: 1, .. })
            ));
        }
        // Moves after the prefix are never read.
        assert!(continuation(&[e4, e4], 1, 0, 3).is_ok());
    }

    #[test]
    fn a_position_over_at_the_switch_ply_ends_the_game_there() {
        let fools_mate = packed("f2f3 e7e5 g2g4 d8h4");
        let mated = continuation(&fools_mate, 4, 0, 0).unwrap();
        assert_eq!(mated.random_plies(), 0);
        assert_eq!(mated.game().moves(), &fools_mate[..]);
        assert_eq!(mated.game().termination(), Termination::Checkmate);
        assert_eq!(mated.game().result().as_str(), "0-1");
        // Seven plies of knight moves: the next move could repeat the start position a third
        // time, so a threefold repetition can be claimed at ply 7. It is found only because
        // the prefix's positions are in the arbiter's history.
        let knights = packed("g1f3 g8f6 f3g1 f6g8 g1f3 g8f6 f3g1 f6g8 e2e4");
        let claimed = continuation(&knights, 7, 0, 0).unwrap();
        assert_eq!(claimed.random_plies(), 0);
        assert_eq!(
            claimed.game().termination(),
            Termination::ThreefoldRepetition
        );
    }

    #[test]
    fn a_draw_claimable_inside_the_prefix_does_not_end_the_game() {
        // Claimable at plies 7 and 8; the pawn move at ply 9 clears the repetition window.
        let knights = packed("g1f3 g8f6 f3g1 f6g8 g1f3 g8f6 f3g1 f6g8 e2e4");
        let continued = continuation(&knights, 9, 1, 0).unwrap();
        assert!(continued.random_plies() > 0);
        check(&continued, &knights);
    }
}
