//! The test keys and the one streaming pass over the training shards that counts them.
//!
//! [`TestKeys`] holds the distinct keys of every test step, each with an atomic count of the
//! training steps that carry it: its size is that of the test set, whatever the training set's.
//! [`scan_training`] streams the training shards once: a reader thread decodes the next batch
//! of games while the current one is replayed on the stage's rayon pool, each game by one task
//! ([`TestKeys::count_game`]), whose hits are added to the shared counts. Memory is bounded by
//! the test keys and two batches of games; counts are sums, so they are the same for any
//! thread count and batch size.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use cwm_formats::novelty::{BadGame, BadGames, KeyCounts};
use cwm_stage::Progress;
use cwm_stage_data::{DataError, ShardReader, TokenizedGame};
use rayon::prelude::*;

use super::NoveltyError;
use super::keys::{BadStep, GameKeys, Key, KeyBuildHasher, StepKeys};

/// Games the shard reader decodes per Parquet batch.
const DECODE_GAMES: usize = 128;
/// Games replayed per worker thread and batch.
pub(crate) const BATCH_GAMES_PER_THREAD: usize = 256;

/// Keys to the number of training steps that carry them.
type KeyMap = HashMap<Key, AtomicU64, KeyBuildHasher>;

/// The keys of the test steps and their training counts.
#[derive(Debug, Default)]
pub struct TestKeys {
    prefixes: KeyMap,
    positions: KeyMap,
    states: KeyMap,
}

/// What counting one training game found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GameScan {
    /// The game's plies.
    pub plies: u32,
    /// Where its replay stopped, if it did.
    pub bad: Option<BadStep>,
}

/// The training counts of one test step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCounts {
    /// Training steps with the step's prefix.
    pub prefix: u64,
    /// Training steps at the step's position; `None` when the test game could not be replayed
    /// up to the step.
    pub position: Option<u64>,
    /// Training steps with the step's state.
    pub state: u64,
}

/// The training counts of one test game's steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GameNovelty {
    /// One entry per step, t = 0, 1, ...
    pub steps: Vec<StepCounts>,
    /// The first step whose prefix is unseen, if any.
    pub deviation: Option<u32>,
    /// Where the game's replay stopped, if it did.
    pub bad: Option<BadStep>,
}

fn count(map: &KeyMap, key: &Key) -> u64 {
    map.get(key).map_or(0, |c| c.load(Ordering::Relaxed))
}

impl TestKeys {
    /// No keys.
    pub fn new() -> TestKeys {
        TestKeys::default()
    }

    /// Adds the keys of one test game's steps (computed by [`GameKeys`]).
    pub fn insert(&mut self, steps: &[StepKeys]) {
        for keys in steps {
            self.prefixes.entry(keys.prefix).or_default();
            if let Some(position) = keys.position {
                self.positions.entry(position).or_default();
            }
            self.states.entry(keys.state).or_default();
        }
    }

    /// The number of distinct keys of each kind.
    pub fn distinct(&self) -> KeyCounts {
        KeyCounts {
            prefixes: self.prefixes.len() as u64,
            positions: self.positions.len() as u64,
            states: self.states.len() as u64,
        }
    }

    /// Counts one training game: every step whose key is a test key adds one to that key's
    /// count. Prefixes are looked up only up to the game's first prefix that is not a test
    /// prefix: the test prefixes are prefix-closed, so no longer prefix of the game is one.
    /// Safe to call from many threads at once.
    pub fn count_game(&self, game: &TokenizedGame) -> GameScan {
        let mut walk = GameKeys::new(game);
        let mut in_book = true;
        for keys in walk.by_ref() {
            if in_book {
                match self.prefixes.get(&keys.prefix) {
                    Some(c) => {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                    None => in_book = false,
                }
            }
            if let Some(c) = keys.position.and_then(|p| self.positions.get(&p)) {
                c.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(c) = self.states.get(&keys.state) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        GameScan {
            plies: u32::try_from(game.plies()).unwrap_or(u32::MAX),
            bad: walk.bad(),
        }
    }

    /// The training counts of one test game's steps (after the scan).
    pub fn game_novelty(&self, game: &TokenizedGame) -> GameNovelty {
        let mut walk = GameKeys::new(game);
        let steps: Vec<StepCounts> = walk
            .by_ref()
            .map(|keys| StepCounts {
                prefix: count(&self.prefixes, &keys.prefix),
                position: keys.position.map(|p| count(&self.positions, &p)),
                state: count(&self.states, &keys.state),
            })
            .collect();
        let deviation = steps
            .iter()
            .position(|s| s.prefix == 0)
            .map(|t| u32::try_from(t).unwrap_or(u32::MAX));
        GameNovelty {
            steps,
            deviation,
            bad: walk.bad(),
        }
    }
}

/// Batches of games from a shard reader, at most `limit` games in all (0 = no limit).
pub(crate) struct Batches {
    reader: ShardReader,
    size: usize,
    left: Option<u64>,
}

impl Batches {
    /// Opens the shards at `path` in batches of `size` games.
    pub(crate) fn open(path: &Path, size: usize, limit: u64) -> Result<Batches, DataError> {
        Ok(Batches {
            reader: ShardReader::open(path, DECODE_GAMES)?,
            size: size.max(1),
            left: (limit > 0).then_some(limit),
        })
    }
}

impl Iterator for Batches {
    type Item = Result<Vec<TokenizedGame>, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let want = match self.left {
            Some(left) => usize::try_from(left).unwrap_or(usize::MAX).min(self.size),
            None => self.size,
        };
        let mut batch = Vec::with_capacity(want);
        while batch.len() < want {
            match self.reader.next() {
                Some(Ok(game)) => batch.push(game),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        if let Some(left) = self.left.as_mut() {
            *left -= batch.len() as u64;
        }
        (!batch.is_empty()).then_some(Ok(batch))
    }
}

/// What the pass over the training shards found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainScan {
    /// Games scanned.
    pub games: u64,
    /// Steps scanned (Σ plies + 1).
    pub steps: u64,
    /// Games per length in plies.
    pub lengths: BTreeMap<u32, u64>,
    /// Games whose replay stopped at a bad token.
    pub bad: u64,
    /// The first of them.
    pub bad_examples: Vec<BadGame>,
}

impl TrainScan {
    fn add(&mut self, game: &TokenizedGame, scan: GameScan) {
        self.games += 1;
        self.steps += u64::from(scan.plies) + 1;
        *self.lengths.entry(scan.plies).or_default() += 1;
        if let Some(bad) = scan.bad {
            self.bad += 1;
            if self.bad_examples.len() < BadGames::MAX_EXAMPLES {
                self.bad_examples.push(bad_game("train", &game.id, bad));
            }
        }
    }

    /// The nearest-rank quantile `q` of the scanned games' lengths in plies: the smallest
    /// length L with at least a share `q` of the games at or below it (0 without games).
    pub fn length_quantile(&self, q: f64) -> u32 {
        let rank = (q * self.games as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (&plies, &games) in &self.lengths {
            seen += games;
            if seen >= rank {
                return plies;
            }
        }
        0
    }
}

/// The summary's record of a bad game.
pub(crate) fn bad_game(input: &str, id: &str, bad: BadStep) -> BadGame {
    BadGame {
        input: input.to_owned(),
        game_id: id.to_owned(),
        t: bad.t,
        token: bad.token,
    }
}

/// Where the scan reports to, and when it stops.
pub struct ScanControl<'a> {
    /// The pool the games are replayed on.
    pub pool: &'a rayon::ThreadPool,
    /// Progress: one unit per training game.
    pub progress: &'a Progress,
    /// Checked between batches.
    pub cancelled: &'a (dyn Fn() -> bool + Sync),
}

/// Streams the training shards at `path` once (at most `max_games` games, 0 = all), counting
/// the training steps of every test key in `keys`.
///
/// # Errors
/// [`NoveltyError::Data`] when a shard cannot be read, [`NoveltyError::Cancelled`].
pub fn scan_training(
    path: &Path,
    keys: &TestKeys,
    max_games: u64,
    control: &ScanControl<'_>,
) -> Result<TrainScan, NoveltyError> {
    let total = ShardReader::count_games(path)?;
    control.progress.set_total(match max_games {
        0 => total,
        cap => total.min(cap),
    });
    let batch_games = BATCH_GAMES_PER_THREAD * control.pool.current_num_threads().max(1);
    let batches = Batches::open(path, batch_games, max_games)?;
    let mut scan = TrainScan::default();
    std::thread::scope(|scope| -> Result<(), NoveltyError> {
        // The next batch is decoded while this one is replayed; `rx` is dropped when this
        // closure returns, which stops the reader early.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        scope.spawn(move || {
            for batch in batches {
                if tx.send(batch).is_err() {
                    return;
                }
            }
        });
        for batch in rx {
            if (control.cancelled)() {
                return Err(NoveltyError::Cancelled);
            }
            let batch = batch?;
            let found: Vec<GameScan> = control
                .pool
                .install(|| batch.par_iter().map(|game| keys.count_game(game)).collect());
            for (game, found) in batch.iter().zip(found) {
                scan.add(game, found);
            }
            control.progress.inc(batch.len() as u64);
        }
        Ok(())
    })?;
    Ok(scan)
}

/// Reads the test shards at `path` and collects the keys of all their steps.
///
/// # Errors
/// [`NoveltyError::Data`] when a shard cannot be read, [`NoveltyError::Cancelled`].
pub fn collect_test_keys(
    path: &Path,
    pool: &rayon::ThreadPool,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<TestKeys, NoveltyError> {
    let mut keys = TestKeys::new();
    let batch_games = BATCH_GAMES_PER_THREAD * pool.current_num_threads().max(1);
    for batch in Batches::open(path, batch_games, 0)? {
        if cancelled() {
            return Err(NoveltyError::Cancelled);
        }
        let batch = batch?;
        let walked: Vec<Vec<StepKeys>> = pool.install(|| {
            batch
                .par_iter()
                .map(|game| GameKeys::new(game).collect())
                .collect()
        });
        for steps in &walked {
            keys.insert(steps);
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_chess::encode::{EpConvention, START, encode_state, pack_move};
    use shakmaty::uci::UciMove;
    use shakmaty::{Chess, Position};

    /// A tokenized game of UCI moves.
    fn game(id: &str, ucis: &str) -> TokenizedGame {
        let mut position = Chess::default();
        let mut moves = vec![START];
        let mut states = encode_state(&position, EpConvention::Reference).to_vec();
        for uci in ucis.split_whitespace() {
            let m = uci
                .parse::<UciMove>()
                .unwrap()
                .to_move(&position)
                .unwrap_or_else(|e| panic!("{uci}: {e}"));
            position.play_unchecked(m);
            moves.push(pack_move(&m));
            states.extend_from_slice(&encode_state(&position, EpConvention::Reference));
        }
        TokenizedGame {
            id: id.into(),
            moves,
            states,
        }
    }

    fn keys_of(games: &[TokenizedGame]) -> TestKeys {
        let mut keys = TestKeys::new();
        for g in games {
            keys.insert(&GameKeys::new(g).collect::<Vec<_>>());
        }
        keys
    }

    const TRAIN: &str = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6";
    const TEST: &str = "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5c6 d7c6";

    #[test]
    fn a_shared_opening_is_seen_up_to_the_deviation() {
        let test = game("test", TEST);
        let keys = keys_of(std::slice::from_ref(&test));
        let train = game("train", TRAIN);
        assert_eq!(
            keys.count_game(&train),
            GameScan {
                plies: 8,
                bad: None
            }
        );
        let found = keys.game_novelty(&test);
        assert_eq!(found.deviation, Some(7));
        for (t, step) in found.steps.iter().enumerate() {
            assert_eq!(step.prefix, u64::from(t <= 6), "t = {t}");
            assert_eq!(step.position, Some(u64::from(t <= 6)), "t = {t}");
            assert_eq!(step.state, u64::from(t <= 6), "t = {t}");
        }
    }

    #[test]
    fn counts_count_training_steps_and_a_transposition_is_a_position() {
        let test = game("test", "g1f3 g8f6 e2e4 e7e5");
        let keys = keys_of(std::slice::from_ref(&test));
        // Knights out and back, then out again: the start position twice, 1. Nf3 twice.
        keys.count_game(&game("back", "g1f3 g8f6 f3g1 f6g8 g1f3"));
        keys.count_game(&game("other", "e2e4 e7e5 g1f3 g8f6"));
        let found = keys.game_novelty(&test);
        let prefixes: Vec<u64> = found.steps.iter().map(|s| s.prefix).collect();
        assert_eq!(prefixes, [2, 1, 1, 0, 0]);
        let positions: Vec<Option<u64>> = found.steps.iter().map(|s| s.position).collect();
        assert_eq!(positions, [Some(3), Some(2), Some(1), Some(0), Some(1)]);
        // States carry the counters and the reference en-passant labels: the return to the
        // start has other clocks, and at t = 4 the transposition's state differs from the
        // training game's (an e6 square after e7e5, another halfmove clock).
        let states: Vec<u64> = found.steps.iter().map(|s| s.state).collect();
        assert_eq!(states, [2, 1, 1, 0, 0]);
        assert_eq!(found.deviation, Some(3));
    }

    #[test]
    fn training_counts_are_the_same_from_many_threads() {
        let test = game("test", TEST);
        let keys = keys_of(std::slice::from_ref(&test));
        let train: Vec<TokenizedGame> = (0..64)
            .map(|i| game(&i.to_string(), if i % 3 == 0 { TRAIN } else { TEST }))
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        pool.install(|| {
            train.par_iter().for_each(|g| {
                keys.count_game(g);
            })
        });
        let found = keys.game_novelty(&test);
        assert_eq!(found.steps[0].prefix, 64);
        assert_eq!(found.steps[6].prefix, 64);
        assert_eq!(found.steps[7].prefix, 42);
        assert_eq!(found.steps[8].state, 42);
        assert_eq!(found.deviation, None);
    }

    #[test]
    fn a_bad_training_game_is_reported_and_counted_up_to_its_bad_token() {
        let test = game("test", TEST);
        let keys = keys_of(std::slice::from_ref(&test));
        let mut bad = game("bad", TEST);
        bad.moves[3] = bad.moves[1]; // e2e4 for White again at ply 3: illegal
        let scan = keys.count_game(&bad);
        assert_eq!(
            scan.bad,
            Some(BadStep {
                t: 3,
                token: bad.moves[1]
            })
        );
        let found = keys.game_novelty(&test);
        let positions: Vec<u64> = found.steps.iter().map(|s| s.position.unwrap()).collect();
        assert_eq!(positions, [1, 1, 1, 0, 0, 0, 0, 0, 0]);
        // Prefixes stop at the changed token; states need no replay.
        assert_eq!(found.steps[2].prefix, 1);
        assert_eq!(found.steps[3].prefix, 0);
        assert_eq!(found.steps[8].state, 1);
    }

    #[test]
    fn the_length_quantile_is_the_nearest_rank() {
        let mut scan = TrainScan::default();
        assert_eq!(scan.length_quantile(0.99), 0);
        for plies in 1..=200u32 {
            scan.games += 1;
            *scan.lengths.entry(plies).or_default() += 1;
        }
        assert_eq!(scan.length_quantile(0.99), 198);
        assert_eq!(scan.length_quantile(0.5), 100);
        assert_eq!(scan.length_quantile(1.0), 200);
        assert_eq!(scan.length_quantile(0.0), 1);
    }
}
