//! Training data: the per-epoch shard order (spec E.8), a resumable reader of one epoch's games
//! and the collation of games into padded batches (spec D.4).
//!
//! * Shards are the `tokenize` artifact's Parquet files in name order; epoch `e` visits them in
//!   the order of CPython's `random.Random(seed + 1009·e).shuffle`.
//! * Inside a shard, games come in file order; batches are consecutive runs of `batch_size`
//!   games, and the last partial batch of the epoch is kept.
//! * Each game keeps its first `max_steps` tokens (0 = all); a batch is right-padded to its
//!   longest game with [`PAD_TOKEN`] and all-zero targets, with lengths for the mask.
//! * [`Position`] (shard index in the epoch's order, games read from it) is where the next game
//!   comes from; [`EpochReader::new`] starts there, which is what makes mid-epoch resume exact.

use std::path::{Path, PathBuf};

use burn::prelude::*;
use cwm_models::{N_LABELS, PAD_TOKEN, valid_mask};
use cwm_random_uniform::python_random::PyRandom;
use cwm_stage_data::games::parquet_files;
use cwm_stage_data::{ShardReader, TokenizedGame};

use crate::TrainError;

/// A batch on a device: moves `[b, t]`, targets `[b, t, 75]`, valid mask `[b, t]`.
pub type BatchTensors = (Tensor<2, Int>, Tensor<3, Int>, Tensor<2, Bool>);

/// Games decoded per Parquet batch when reading shards.
const READ_BATCH: usize = 1024;

/// The permutation of `n` shard indices for `epoch`: `random.Random(seed + 1009·epoch)
/// .shuffle(list(range(n)))`.
pub fn epoch_permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = PyRandom::new(seed.wrapping_add(epoch.wrapping_mul(1009)));
    rng.shuffle(&mut order);
    order
}

/// The shard files of a `tokenize` artifact (or one shard file), in name order.
///
/// # Errors
/// [`TrainError::Data`] when the directory cannot be listed or holds no shard.
pub fn shard_files(path: &Path) -> Result<Vec<PathBuf>, TrainError> {
    Ok(parquet_files(path)?)
}

/// The shards of `shards` in the order epoch `epoch` visits them.
pub fn epoch_order(shards: &[PathBuf], seed: u64, epoch: u64) -> Vec<PathBuf> {
    epoch_permutation(shards.len(), seed, epoch)
        .into_iter()
        .map(|i| shards[i].clone())
        .collect()
}

/// Where the next game of an epoch comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Index into the epoch's shard order.
    pub shard: usize,
    /// Games already read from that shard.
    pub game: u64,
}

/// Reads one epoch's games, shard after shard, from a given [`Position`].
pub struct EpochReader {
    order: Vec<PathBuf>,
    pos: Position,
    skip: u64,
    reader: Option<ShardReader>,
}

impl std::fmt::Debug for EpochReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochReader")
            .field("pos", &self.pos)
            .field("shards", &self.order.len())
            .finish()
    }
}

impl EpochReader {
    /// A reader over `order` whose first game is the one at `start`.
    pub fn new(order: Vec<PathBuf>, start: Position) -> EpochReader {
        EpochReader {
            order,
            pos: Position {
                shard: start.shard,
                game: 0,
            },
            skip: start.game,
            reader: None,
        }
    }

    /// The position of the next game.
    pub fn position(&self) -> Position {
        Position {
            shard: self.pos.shard,
            game: self.pos.game,
        }
    }

    /// The next game, or `None` at the end of the epoch.
    ///
    /// # Errors
    /// [`TrainError::Data`] when a shard cannot be read.
    pub fn next_game(&mut self) -> Result<Option<TokenizedGame>, TrainError> {
        loop {
            if self.reader.is_none() {
                let Some(file) = self.order.get(self.pos.shard) else {
                    return Ok(None);
                };
                self.reader = Some(ShardReader::open(file, READ_BATCH)?);
            }
            let Some(reader) = self.reader.as_mut() else {
                return Ok(None);
            };
            match reader.next() {
                Some(game) => {
                    let game = game?;
                    self.pos.game += 1;
                    if self.skip > 0 {
                        self.skip -= 1;
                        continue;
                    }
                    return Ok(Some(game));
                }
                None => {
                    if self.skip > 0 {
                        let file = &self.order[self.pos.shard];
                        return Err(TrainError::Config(format!(
                            "{}: resume position is past its end ({} games); the input changed",
                            file.display(),
                            self.pos.game
                        )));
                    }
                    self.reader = None;
                    self.pos = Position {
                        shard: self.pos.shard + 1,
                        game: 0,
                    };
                }
            }
        }
    }

    /// Up to `size` next games (fewer only at the end of the epoch; none once it is over).
    ///
    /// # Errors
    /// As [`EpochReader::next_game`].
    pub fn next_games(&mut self, size: usize) -> Result<Vec<TokenizedGame>, TrainError> {
        let mut games = Vec::with_capacity(size);
        while games.len() < size {
            match self.next_game()? {
                Some(game) => games.push(game),
                None => break,
            }
        }
        Ok(games)
    }
}

/// A collated batch on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `[batch, seq_len]` move ids, right-padded with `PAD`.
    pub moves: Vec<i32>,
    /// `[batch, seq_len, 75]` labels, zero where padded.
    pub targets: Vec<i32>,
    /// Valid steps of each sequence.
    pub lengths: Vec<usize>,
    /// The padded length (the longest sequence).
    pub seq_len: usize,
}

impl Batch {
    /// Truncates each game to `max_steps` tokens (0 = no limit) and pads to the longest.
    pub fn collate(games: &[TokenizedGame], max_steps: usize) -> Batch {
        let limit = |len: usize| {
            if max_steps > 0 {
                len.min(max_steps)
            } else {
                len
            }
        };
        let lengths: Vec<usize> = games.iter().map(|g| limit(g.moves.len())).collect();
        let seq_len = lengths.iter().copied().max().unwrap_or(0);
        let mut moves = vec![PAD_TOKEN as i32; games.len() * seq_len];
        let mut targets = vec![0i32; games.len() * seq_len * N_LABELS];
        for (b, (game, &len)) in games.iter().zip(&lengths).enumerate() {
            for t in 0..len {
                moves[b * seq_len + t] = i32::from(game.moves[t]);
            }
            let labels = &game.states[..len * N_LABELS];
            let row = &mut targets[b * seq_len * N_LABELS..][..len * N_LABELS];
            for (dst, &src) in row.iter_mut().zip(labels) {
                *dst = i32::from(src);
            }
        }
        Batch {
            moves,
            targets,
            lengths,
            seq_len,
        }
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether the batch holds no sequence.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// Valid (unpadded) tokens.
    pub fn tokens(&self) -> u64 {
        self.lengths.iter().map(|&l| l as u64).sum()
    }

    /// The batch on `device`: moves `[b, t]`, targets `[b, t, 75]`, valid mask `[b, t]`.
    ///
    /// # Errors
    /// [`TrainError::Model`] if the mask cannot be built (never for a collated batch).
    pub fn tensors(&self, device: &Device) -> Result<BatchTensors, TrainError> {
        let (b, t) = (self.len(), self.seq_len);
        let moves =
            Tensor::<2, Int>::from_data(TensorData::new(self.moves.clone(), [b, t]), device);
        let targets = Tensor::<3, Int>::from_data(
            TensorData::new(self.targets.clone(), [b, t, N_LABELS]),
            device,
        );
        let mask = valid_mask(&self.lengths, t, device)?;
        Ok((moves, targets, mask))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_order_matches_the_spec_vectors() {
        assert_eq!(epoch_permutation(10, 0, 0), [7, 8, 1, 5, 3, 4, 2, 0, 9, 6]);
        assert_eq!(epoch_permutation(10, 0, 1), [1, 9, 6, 3, 4, 5, 8, 7, 0, 2]);
        assert_eq!(epoch_permutation(10, 0, 2), [6, 1, 7, 9, 4, 5, 3, 0, 2, 8]);
    }

    #[test]
    fn collate_truncates_and_pads() {
        let game = |n: usize, base: u16| TokenizedGame {
            id: format!("g{n}"),
            moves: (0..n as u16).map(|i| base + i).collect(),
            states: (0..n * N_LABELS).map(|i| (i % 7) as u8 + 1).collect(),
        };
        let games = [game(3, 100), game(5, 200)];
        let batch = Batch::collate(&games, 4);
        assert_eq!(batch.lengths, [3, 4]);
        assert_eq!(batch.seq_len, 4);
        assert_eq!(batch.tokens(), 7);
        assert_eq!(
            batch.moves,
            [100, 101, 102, PAD_TOKEN as i32, 200, 201, 202, 203]
        );
        let first_pad = &batch.targets[3 * N_LABELS..4 * N_LABELS];
        assert!(first_pad.iter().all(|&x| x == 0));
        assert_eq!(batch.targets[0], 1);
        assert_eq!(
            batch.targets[4 * N_LABELS + 3 * N_LABELS + 1],
            ((3 * N_LABELS + 1) % 7) as i32 + 1
        );
        let full = Batch::collate(&games, 0);
        assert_eq!(full.lengths, [3, 5]);
    }
}
