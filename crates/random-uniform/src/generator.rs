//! Streams of random games: an exact replay of the reference generator, and a fast mode.
//!
//! * [`ReferenceGames`] is spec E.5's loop: one CPython `Random(seed)` for the whole run, and
//!   before every move `legal[rng.randrange(len(legal))]` over python-chess's legal-move order,
//!   until `outcome(claim_draw=True)` ends the game. It is sequential by nature (one stream).
//! * [`FastGames`] plays the same game rules with a xoshiro256++ stream per game derived from
//!   `(seed, index)`, picking each move uniformly among the legal moves by rejection sampling
//!   ([`crate::sampler`]), so most plies never list the legal moves. Chunks of games are played in parallel on the current
//!   rayon pool and yielded in index order, so the output depends on the seed only, never on
//!   the thread count.
//! * Fast-mode games depend on the sampler and, through its fallback, on shakmaty's
//!   move-generation order (the fallback pick is an index into it). shakmaty is pinned (`=0.30.1`); an upgrade that reorders generation changes the games
//!   of a seed, so treat it like changing the generator (its tests will not notice).
//! * Both iterators yield *every* generated game, short ones included, and never end on their
//!   own; filter with [`Game::is_long_enough`] and `take` what you need. Memory stays bounded
//!   by one game (reference) or one chunk (fast).

use std::ops::Range;
use std::vec;

use cwm_chess::encode::pack_move;
use rayon::prelude::*;
use shakmaty::{Chess, Move};

use crate::arbiter::Arbiter;
use crate::fast_rng::Xoshiro256PlusPlus;
use crate::game::Game;
use crate::move_order::python_order_index;
use crate::python_random::PyRandom;
use crate::sampler::sample_legal_move;
use crate::special::{SpecialBias, SpecialGames};

/// The reference's minimum game length in full moves: games shorter than `2 * 10` plies are
/// dropped (spec E.1, E.5).
pub const DEFAULT_MIN_FULLMOVES: u32 = 10;

/// Which generator to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Bit-exact with the reference: CPython's RNG and python-chess's move order, sequential.
    #[default]
    Reference,
    /// Same rules, a fast per-game RNG, parallel on rayon; deterministic for a seed.
    Fast,
}

/// Plays one game from the initial position; `step` plays one move on the arbiter and returns
/// it. `None` if `step` fails, which the generators here never do.
fn play_game(
    arbiter: &mut Arbiter,
    index: u64,
    mut step: impl FnMut(&mut Arbiter) -> Option<Move>,
) -> Option<Game> {
    arbiter.restart(Chess::default());
    let mut moves = Vec::with_capacity(256);
    loop {
        if let Some(outcome) = arbiter.outcome() {
            return Some(Game::new(index, moves, outcome, arbiter.position().clone()));
        }
        // `outcome()` is `None` only when a legal move exists.
        let m = step(arbiter)?;
        moves.push(pack_move(&m));
    }
}

/// One reference move: `legal[rng.randrange(len(legal))]` in python-chess order.
fn reference_step(rng: &mut PyRandom, arbiter: &mut Arbiter) -> Option<Move> {
    let legal = arbiter.legal_moves();
    let rank = rng.randrange_usize(legal.len()).ok()?;
    let index = python_order_index(arbiter.position(), legal, rank)?;
    arbiter.play_nth(index).ok()
}

/// The reference generator (spec E.5): every game of a run seeded with `seed`, in order.
///
/// ```
/// use cwm_random_uniform::generator::ReferenceGames;
///
/// let game = ReferenceGames::new(0).next().expect("the stream never ends");
/// assert_eq!(game.id(), "cwm_random_00000");
/// assert_eq!(game.plies(), 607);
/// assert_eq!(game.result().as_str(), "1/2-1/2");
/// ```
#[derive(Debug, Clone)]
pub struct ReferenceGames {
    rng: PyRandom,
    arbiter: Arbiter,
    next_index: u64,
}

impl ReferenceGames {
    /// The games of `random.Random(seed)`, starting with index 0.
    pub fn new(seed: u64) -> ReferenceGames {
        ReferenceGames {
            rng: PyRandom::new(seed),
            arbiter: Arbiter::default(),
            next_index: 0,
        }
    }
}

impl Iterator for ReferenceGames {
    type Item = Game;

    fn next(&mut self) -> Option<Game> {
        let index = self.next_index;
        let rng = &mut self.rng;
        let game = play_game(&mut self.arbiter, index, |arbiter| {
            reference_step(rng, arbiter)
        })?;
        self.next_index += 1;
        Some(game)
    }
}

/// Plays fast-mode game `index` of a run seeded with `seed`, reusing `arbiter`'s allocation.
///
/// Each move is drawn by [`sample_legal_move`] (rejection sampling, no move list) or, in check
/// and in the rare positions where it gives up, uniformly from the full legal-move list.
pub fn play_fast_game(arbiter: &mut Arbiter, seed: u64, index: u64) -> Option<Game> {
    let mut rng = Xoshiro256PlusPlus::for_game(seed, index);
    arbiter.restart(Chess::default());
    let mut moves = Vec::with_capacity(256);
    loop {
        let sampled = sample_legal_move(arbiter.position(), &mut rng);
        let outcome = match sampled {
            Some(_) => arbiter.outcome_with_a_legal_move(),
            None => arbiter.outcome(),
        };
        if let Some(outcome) = outcome {
            return Some(Game::new(index, moves, outcome, arbiter.position().clone()));
        }
        let m = match sampled {
            Some(m) => {
                arbiter.advance(m);
                m
            }
            None => {
                let len = u32::try_from(arbiter.legal_moves().len()).ok()?;
                arbiter.play_nth(rng.below(len) as usize).ok()?
            }
        };
        moves.push(pack_move(&m));
    }
}

/// Fast-mode game `index` of a run seeded with `seed`.
pub fn fast_game(seed: u64, index: u64) -> Option<Game> {
    play_fast_game(&mut Arbiter::default(), seed, index)
}

/// Default number of games [`FastGames`] plays per parallel chunk.
pub const DEFAULT_CHUNK_SIZE: usize = 1024;

/// The fast generator: games `start, start + 1, ...` of a run seeded with `seed`, played in
/// parallel chunks on the current rayon pool and yielded in index order.
///
/// Game `i` depends only on `(seed, i)`, so any thread count gives the same stream. To pick the
/// pool, consume the iterator inside `pool.install(...)`.
///
/// ```
/// use cwm_random_uniform::generator::FastGames;
///
/// let games: Vec<_> = FastGames::new(7).with_chunk_size(4).take(3).collect();
/// assert_eq!(games[2].id(), "cwm_random_00002");
/// ```
#[derive(Debug)]
pub struct FastGames {
    seed: u64,
    next_index: u64,
    chunk_size: usize,
    ready: vec::IntoIter<Option<Game>>,
}

impl FastGames {
    /// All games of the run seeded with `seed`, from index 0.
    pub fn new(seed: u64) -> FastGames {
        FastGames {
            seed,
            next_index: 0,
            chunk_size: DEFAULT_CHUNK_SIZE,
            ready: Vec::new().into_iter(),
        }
    }

    /// Starts at game `index` instead of 0 (games already played are discarded).
    pub fn starting_at(mut self, index: u64) -> FastGames {
        self.next_index = index;
        self.ready = Vec::new().into_iter();
        self
    }

    /// Plays `chunk_size` games per parallel chunk (at least 1).
    pub fn with_chunk_size(mut self, chunk_size: usize) -> FastGames {
        self.chunk_size = chunk_size.max(1);
        self
    }

    /// Plays the next chunk in parallel.
    fn refill(&mut self) {
        let start = self.next_index;
        let end = start.saturating_add(self.chunk_size as u64);
        let seed = self.seed;
        self.ready = play_chunk(start..end, |arbiter, index| {
            play_fast_game(arbiter, seed, index)
        });
        self.next_index = end;
    }
}

/// Plays games `indexes` in parallel on the current rayon pool, one reused [`Arbiter`] per
/// worker, and returns them in index order.
pub(crate) fn play_chunk(
    indexes: Range<u64>,
    play: impl Fn(&mut Arbiter, u64) -> Option<Game> + Sync + Send,
) -> vec::IntoIter<Option<Game>> {
    let games: Vec<Option<Game>> = indexes
        .into_par_iter()
        .map_init(Arbiter::default, |arbiter, index| play(arbiter, index))
        .collect();
    games.into_iter()
}

impl Iterator for FastGames {
    type Item = Game;

    fn next(&mut self) -> Option<Game> {
        if self.ready.len() == 0 {
            self.refill();
        }
        self.ready.next().flatten()
    }
}

/// Every game of a run seeded with `seed` (reference, fast or special-biased), short ones
/// included.
#[derive(Debug)]
pub enum Games {
    /// The reference generator (boxed: its MT19937 state and move list are a few KiB).
    Reference(Box<ReferenceGames>),
    /// The fast generator.
    Fast(FastGames),
    /// The special-biased generator ([`crate::special`]).
    Special(SpecialGames),
}

impl Games {
    /// The stream of `mode` for `seed`.
    pub fn new(mode: Mode, seed: u64) -> Games {
        match mode {
            Mode::Reference => Games::Reference(Box::new(ReferenceGames::new(seed))),
            Mode::Fast => Games::Fast(FastGames::new(seed)),
        }
    }

    /// The special-biased stream of `seed` at bias `bias` (fast mode's RNG; `bias = 0` gives
    /// the [`Mode::Fast`] games).
    pub fn special(seed: u64, bias: SpecialBias) -> Games {
        Games::Special(SpecialGames::new(seed, bias))
    }

    /// Only the games the reference keeps: at least `2 * min_fullmoves` plies.
    pub fn kept(self, min_fullmoves: u32) -> impl Iterator<Item = Game> {
        self.filter(move |game| game.is_long_enough(min_fullmoves))
    }
}

impl Iterator for Games {
    type Item = Game;

    fn next(&mut self) -> Option<Game> {
        match self {
            Games::Reference(games) => games.next(),
            Games::Fast(games) => games.next(),
            Games::Special(games) => games.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn streams_can_move_to_another_thread() {
        assert_send::<ReferenceGames>();
        assert_send::<FastGames>();
        assert_send::<SpecialGames>();
        assert_send::<Games>();
        assert_send::<Game>();
    }

    #[test]
    fn kept_skips_short_games_but_keeps_their_indexes() {
        let all: Vec<Game> = FastGames::new(3).with_chunk_size(64).take(64).collect();
        let kept: Vec<Game> = Games::new(Mode::Fast, 3)
            .kept(DEFAULT_MIN_FULLMOVES)
            .take_while(|game| game.index() < 64)
            .collect();
        let want: Vec<&Game> = all.iter().filter(|game| game.plies() >= 20).collect();
        assert_eq!(kept.iter().collect::<Vec<_>>(), want);
    }
}
