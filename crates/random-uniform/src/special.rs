//! Special-biased random play: random games enriched in castling, en passant and promotions.
//!
//! With bias `p` (a [`SpecialBias`]), at each ply let `M` be the legal moves and `E ⊆ M` the
//! castling, en-passant and promotion moves (each of the four promotion pieces is its own
//! move). If `E` is not empty, the move is drawn uniformly from `E` with probability `p`, and
//! uniformly from `M` otherwise; if `E` is empty, uniformly from `M`.
//!
//! * Everything else is the fast generator's ([`crate::generator::FastGames`]): the game ends
//!   at the [`Arbiter`]'s outcome (python-chess's `outcome(claim_draw=True)`), the per-game
//!   stream is `Xoshiro256PlusPlus::for_game(seed, index)`, uniform picks from `M` use the
//!   same rejection sampler and fallback, and ids are `cwm_random_NNNNN`. Filter short games
//!   with [`Game::is_long_enough`] as for uniform games.
//! * `p = 0` *is* the fast generator: [`play_special_game`] hands the game to
//!   [`play_fast_game`], so its games equal the fast generator's bit for bit.
//! * For `0 < p < 1` a coin (one 64-bit draw, compared as a 53-bit fraction with `p`) is drawn
//!   only at plies where `E` is not empty; `p = 1` draws no coin. Picks from `E` are
//!   `E[below(|E|)]` over `E` in shakmaty's generation order, so the games of a seed depend on
//!   shakmaty like the fast generator's do.
//! * The bias raises castling and en passant many times over, but barely changes the number
//!   of promotions: those are limited by the pawns that reach the seventh rank, which the bias
//!   does not push, and uniform play already promotes most of them (a pawn on its seventh rank
//!   with a free square offers four of the legal moves). At `p = 1` a promotion is played at
//!   the first ply it is legal.
//! * [`SpecialGames`] plays chunks of games in parallel on the current rayon pool and yields
//!   them in index order; game `i` depends on `(seed, i, p)` only, never on the thread count.

use std::vec;

use cwm_chess::encode::pack_move;
use shakmaty::{Bitboard, CastlingSide, Chess, Move, Position, Rank};
use thiserror::Error;

use crate::arbiter::Arbiter;
use crate::fast_rng::Xoshiro256PlusPlus;
use crate::game::Game;
use crate::generator::{DEFAULT_CHUNK_SIZE, play_chunk, play_fast_game};
use crate::sampler::sample_legal_move;

/// A special bias outside `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Error)]
#[non_exhaustive]
pub enum SpecialBiasError {
    /// The value is not a number in `[0, 1]` (NaN included).
    #[error("special bias {0} is not a probability in [0, 1]")]
    OutOfRange(f64),
}

/// The probability `p ∈ [0, 1]` of playing a special move when one is legal.
///
/// ```
/// use cwm_random_uniform::special::SpecialBias;
///
/// assert_eq!(SpecialBias::new(0.5)?.get(), 0.5);
/// assert!(SpecialBias::new(1.5).is_err());
/// assert!(SpecialBias::new(f64::NAN).is_err());
/// assert!(SpecialBias::default().is_zero());
/// # Ok::<(), cwm_random_uniform::special::SpecialBiasError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct SpecialBias(f64);

/// `2^-53`: turns the top 53 bits of a 64-bit draw into a fraction in `[0, 1)`.
const FRACTION_53: f64 = 1.0 / (1u64 << 53) as f64;

impl SpecialBias {
    /// No bias: uniformly random legal moves.
    pub const ZERO: SpecialBias = SpecialBias(0.0);
    /// Always a special move when one is legal.
    pub const ONE: SpecialBias = SpecialBias(1.0);

    /// The bias `p`.
    ///
    /// # Errors
    ///
    /// [`SpecialBiasError::OutOfRange`] unless `0 <= p <= 1`.
    pub fn new(p: f64) -> Result<SpecialBias, SpecialBiasError> {
        if (0.0..=1.0).contains(&p) {
            // `-0.0` is in range; store it as `0.0` so that equal biases print alike.
            Ok(SpecialBias(p + 0.0))
        } else {
            Err(SpecialBiasError::OutOfRange(p))
        }
    }

    /// The probability `p`.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Whether `p = 0` (plain uniform play).
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }

    /// Whether to pick from the special moves at a ply that has some: always for `p = 1`
    /// (no draw), never for `p = 0` (no draw), otherwise a coin with probability `p`.
    fn picks_special(self, rng: &mut Xoshiro256PlusPlus) -> bool {
        if self.0 >= 1.0 {
            return true;
        }
        if self.0 <= 0.0 {
            return false;
        }
        ((rng.next_u64() >> 11) as f64 * FRACTION_53) < self.0
    }
}

/// Whether `m` is a castling, en-passant or promotion move (a member of `E`).
pub fn is_special(m: &Move) -> bool {
    m.is_castle() || m.is_en_passant() || m.is_promotion()
}

/// A cheap necessary condition for a special move in `position`: a castling right of the side
/// to move with an empty path, a pseudo-legal en-passant square, or a pawn of the side to move
/// on its seventh rank. When it is false the legal moves need not be generated.
fn may_have_special(position: &Chess) -> bool {
    let board = position.board();
    let turn = position.turn();
    let seventh = Bitboard::from_rank(turn.relative_rank(Rank::Seventh));
    if (board.pawns() & position.us() & seventh).any()
        || position.pseudo_legal_ep_square().is_some()
    {
        return true;
    }
    let castles = position.castles();
    let occupied = board.occupied();
    CastlingSide::ALL
        .into_iter()
        .any(|side| castles.has(turn, side) && (castles.path(turn, side) & occupied).is_empty())
}

/// The number of special moves among the arbiter's legal moves (0 without generating them
/// when none can exist).
fn count_special(arbiter: &Arbiter) -> usize {
    if !may_have_special(arbiter.position()) {
        return 0;
    }
    arbiter
        .legal_moves()
        .iter()
        .filter(|m| is_special(m))
        .count()
}

/// Plays a uniformly random legal move of a position known not to be over: the sampler's
/// move if `sampled` holds one, otherwise a uniform pick from the legal-move list.
fn play_uniform(
    arbiter: &mut Arbiter,
    rng: &mut Xoshiro256PlusPlus,
    sampled: Option<Move>,
) -> Option<Move> {
    match sampled {
        Some(m) => {
            arbiter.advance(m);
            Some(m)
        }
        None => {
            let len = u32::try_from(arbiter.legal_moves().len()).ok()?;
            arbiter.play_nth(rng.below(len) as usize).ok()
        }
    }
}

/// Plays special-biased game `index` of a run seeded with `seed`, reusing `arbiter`'s
/// allocation. `None` only if a move could not be played, which does not happen.
///
/// ```
/// use cwm_random_uniform::Arbiter;
/// use cwm_random_uniform::generator::fast_game;
/// use cwm_random_uniform::special::{SpecialBias, play_special_game};
///
/// let mut arbiter = Arbiter::default();
/// let game = play_special_game(&mut arbiter, 7, 3, SpecialBias::ONE).expect("a game");
/// assert_eq!(game.id(), "cwm_random_00003");
/// let uniform = play_special_game(&mut arbiter, 7, 3, SpecialBias::ZERO);
/// assert_eq!(uniform, fast_game(7, 3));
/// ```
pub fn play_special_game(
    arbiter: &mut Arbiter,
    seed: u64,
    index: u64,
    bias: SpecialBias,
) -> Option<Game> {
    if bias.is_zero() {
        return play_fast_game(arbiter, seed, index);
    }
    let mut rng = Xoshiro256PlusPlus::for_game(seed, index);
    arbiter.restart(Chess::default());
    let mut moves = Vec::with_capacity(256);
    loop {
        let specials = count_special(arbiter);
        let m = if specials > 0 {
            // A special move is a legal move, so the game may go on.
            if let Some(outcome) = arbiter.outcome_with_a_legal_move() {
                return Some(Game::new(index, moves, outcome, arbiter.position().clone()));
            }
            if bias.picks_special(&mut rng) {
                let rank = rng.below(u32::try_from(specials).ok()?) as usize;
                let m = *arbiter
                    .legal_moves()
                    .iter()
                    .filter(|m| is_special(m))
                    .nth(rank)?;
                arbiter.advance(m);
                m
            } else {
                let sampled = sample_legal_move(arbiter.position(), &mut rng);
                play_uniform(arbiter, &mut rng, sampled)?
            }
        } else {
            // No special move: exactly a fast-mode ply.
            let sampled = sample_legal_move(arbiter.position(), &mut rng);
            let outcome = match sampled {
                Some(_) => arbiter.outcome_with_a_legal_move(),
                None => arbiter.outcome(),
            };
            if let Some(outcome) = outcome {
                return Some(Game::new(index, moves, outcome, arbiter.position().clone()));
            }
            play_uniform(arbiter, &mut rng, sampled)?
        };
        moves.push(pack_move(&m));
    }
}

/// Special-biased game `index` of a run seeded with `seed`.
pub fn special_game(seed: u64, index: u64, bias: SpecialBias) -> Option<Game> {
    play_special_game(&mut Arbiter::default(), seed, index, bias)
}

/// The special-biased generator: games `start, start + 1, ...` of a run seeded with `seed`,
/// played in parallel chunks on the current rayon pool and yielded in index order, short games
/// included; the stream never ends on its own.
///
/// ```
/// use cwm_random_uniform::special::{SpecialBias, SpecialGames};
///
/// let bias = SpecialBias::new(0.5)?;
/// let games: Vec<_> = SpecialGames::new(7, bias).with_chunk_size(4).take(3).collect();
/// assert_eq!(games[2].id(), "cwm_random_00002");
/// # Ok::<(), cwm_random_uniform::special::SpecialBiasError>(())
/// ```
#[derive(Debug)]
pub struct SpecialGames {
    seed: u64,
    bias: SpecialBias,
    next_index: u64,
    chunk_size: usize,
    ready: vec::IntoIter<Option<Game>>,
}

impl SpecialGames {
    /// All games of the run seeded with `seed` at bias `bias`, from index 0.
    pub fn new(seed: u64, bias: SpecialBias) -> SpecialGames {
        SpecialGames {
            seed,
            bias,
            next_index: 0,
            chunk_size: DEFAULT_CHUNK_SIZE,
            ready: Vec::new().into_iter(),
        }
    }

    /// The bias of this run.
    pub fn bias(&self) -> SpecialBias {
        self.bias
    }

    /// Starts at game `index` instead of 0 (games already played are discarded).
    pub fn starting_at(mut self, index: u64) -> SpecialGames {
        self.next_index = index;
        self.ready = Vec::new().into_iter();
        self
    }

    /// Plays `chunk_size` games per parallel chunk (at least 1).
    pub fn with_chunk_size(mut self, chunk_size: usize) -> SpecialGames {
        self.chunk_size = chunk_size.max(1);
        self
    }
}

impl Iterator for SpecialGames {
    type Item = Game;

    fn next(&mut self) -> Option<Game> {
        if self.ready.len() == 0 {
            let start = self.next_index;
            let end = start.saturating_add(self.chunk_size as u64);
            let (seed, bias) = (self.seed, self.bias);
            self.ready = play_chunk(start..end, |arbiter, index| {
                play_special_game(arbiter, seed, index, bias)
            });
            self.next_index = end;
        }
        self.ready.next().flatten()
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::{CastlingMode, fen::Fen};

    use super::*;
    use crate::generator::{DEFAULT_MIN_FULLMOVES, FastGames, Games};

    /// Castlings, en-passant captures and promotions to queen, rook, bishop, knight.
    #[derive(Debug, Default, Clone, Copy)]
    struct Counts {
        plies: u64,
        castles: u64,
        en_passant: u64,
        promotions: [u64; 4],
    }

    impl Counts {
        /// Replays every game with shakmaty, checking each move is legal, and counts.
        fn of(games: &[Game]) -> Counts {
            let mut counts = Counts::default();
            for game in games {
                let mut position = Chess::default();
                for (ply, &packed) in game.moves().iter().enumerate() {
                    let legal = position.legal_moves();
                    let m = legal.iter().find(|m| pack_move(m) == packed);
                    let m = *m.unwrap_or_else(|| panic!("{}: ply {ply} illegal", game.id()));
                    counts.plies += 1;
                    counts.castles += u64::from(m.is_castle());
                    counts.en_passant += u64::from(m.is_en_passant());
                    let roles = [
                        shakmaty::Role::Queen,
                        shakmaty::Role::Rook,
                        shakmaty::Role::Bishop,
                        shakmaty::Role::Knight,
                    ];
                    for (slot, role) in counts.promotions.iter_mut().zip(roles) {
                        *slot += u64::from(m.promotion() == Some(role));
                    }
                    position.play_unchecked(m);
                }
                assert_eq!(&position, game.final_position(), "{}", game.id());
            }
            counts
        }

        fn per_1000(&self, n: u64) -> f64 {
            1000.0 * n as f64 / self.plies as f64
        }
    }

    #[test]
    fn bias_outside_the_unit_interval_is_an_error() {
        for p in [-0.1, 1.0 + 1e-9, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(SpecialBias::new(p), Err(SpecialBiasError::OutOfRange(_))),
                "{p}"
            );
        }
        assert_eq!(
            SpecialBias::new(-0.0).unwrap().get().to_bits(),
            0.0f64.to_bits()
        );
        assert_eq!(SpecialBias::new(1.0).unwrap(), SpecialBias::ONE);
        let message = SpecialBias::new(2.0).unwrap_err().to_string();
        assert!(
            message.contains("2") && message.contains("[0, 1]"),
            "{message}"
        );
    }

    #[test]
    fn zero_bias_plays_the_fast_games_bit_for_bit() {
        let fast: Vec<Game> = FastGames::new(9).with_chunk_size(8).take(24).collect();
        let special: Vec<Game> = SpecialGames::new(9, SpecialBias::ZERO)
            .with_chunk_size(8)
            .take(24)
            .collect();
        assert_eq!(fast, special);
    }

    #[test]
    fn full_bias_is_rich_in_special_moves() {
        let uniform: Vec<Game> = SpecialGames::new(4, SpecialBias::ZERO).take(200).collect();
        let biased: Vec<Game> = SpecialGames::new(4, SpecialBias::ONE).take(200).collect();
        let (u, b) = (Counts::of(&uniform), Counts::of(&biased));
        println!("uniform {u:?}\nbiased {b:?}");
        let promotions = |c: &Counts| c.promotions.iter().sum::<u64>();
        let factor = |pick: &dyn Fn(&Counts) -> u64| b.per_1000(pick(&b)) / u.per_1000(pick(&u));
        assert!(factor(&|c| c.en_passant) >= 5.0, "{u:?} {b:?}");
        assert!(factor(&|c| c.castles) >= 3.0, "{u:?} {b:?}");
        // Promotions are limited by the pawns that reach the seventh rank, which the bias does
        // not change: uniform play already promotes most of them (see the module doc).
        assert!(factor(&promotions) >= 0.8, "{u:?} {b:?}");
        // Every promotion piece is played, none far less than the others.
        let least = b.promotions.iter().min().copied().unwrap_or(0);
        assert!(4 * least >= promotions(&b) / 2, "{b:?}");
    }

    #[test]
    fn every_ply_with_a_special_move_plays_one_at_full_bias() {
        for game in SpecialGames::new(12, SpecialBias::ONE).take(30) {
            let mut position = Chess::default();
            for &packed in game.moves() {
                let legal = position.legal_moves();
                let m = *legal.iter().find(|m| pack_move(m) == packed).unwrap();
                let has_special = legal.iter().any(is_special);
                assert_eq!(is_special(&m), has_special, "{}", game.id());
                position.play_unchecked(m);
            }
        }
    }

    #[test]
    fn the_prefilter_never_misses_a_special_move() {
        let mut seen = 0;
        for game in SpecialGames::new(2, SpecialBias::new(0.5).unwrap()).take(40) {
            for position in game.positions() {
                if position.legal_moves().iter().any(is_special) {
                    assert!(may_have_special(&position), "{:?}", position.board());
                    seen += 1;
                }
            }
        }
        assert!(seen > 100, "{seen} positions with a special move");
        let fen: Fen = "4k3/8/8/8/8/8/8/R3K2R w KQ - 0 1".parse().unwrap();
        let position: Chess = fen.into_position(CastlingMode::Standard).unwrap();
        assert!(may_have_special(&position));
    }

    #[test]
    fn same_games_on_one_and_two_threads() {
        let bias = SpecialBias::new(0.5).unwrap();
        let play = |threads: usize| -> Vec<Game> {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    SpecialGames::new(5, bias)
                        .with_chunk_size(7)
                        .take(40)
                        .collect()
                })
        };
        let one = play(1);
        assert_eq!(one, play(2));
        for (index, game) in one.iter().enumerate() {
            assert_eq!(game.index(), index as u64);
            assert_eq!(Some(game), special_game(5, index as u64, bias).as_ref());
        }
        let later: Vec<Game> = SpecialGames::new(5, bias).starting_at(30).take(3).collect();
        assert_eq!(later, one[30..33]);
        // Another bias or seed gives other games.
        assert_ne!(Some(&one[0]), special_game(5, 0, SpecialBias::ONE).as_ref());
        assert_ne!(Some(&one[0]), special_game(6, 0, bias).as_ref());
    }

    #[test]
    fn kept_games_have_the_minimum_length_and_keep_their_indexes() {
        let bias = SpecialBias::ONE;
        let all: Vec<Game> = SpecialGames::new(3, bias).take(64).collect();
        let kept: Vec<Game> = Games::special(3, bias)
            .kept(DEFAULT_MIN_FULLMOVES)
            .take_while(|game| game.index() < 64)
            .collect();
        let want: Vec<&Game> = all.iter().filter(|game| game.plies() >= 20).collect();
        assert_eq!(kept.iter().collect::<Vec<_>>(), want);
        assert!(kept.iter().all(|game| game.plies() >= 20));
        assert!(
            all.iter().any(|game| game.plies() < 20),
            "no short game to drop"
        );
        let longer: Vec<Game> = Games::special(3, bias).kept(60).take(5).collect();
        assert!(longer.iter().all(|game| game.plies() >= 120));
    }
}
