//! Reading `tokenize` shards back: the games as model inputs and state labels, streamed.
//!
//! This is how `train` and `evaluate` consume tokenized data: [`ShardReader`] yields one
//! [`TokenizedGame`] at a time from the shards of a `tokenize` artifact (or one shard file), in
//! file order, holding one Parquet batch in memory. The layout is
//! [`crate::tokenize::SHARD_LAYOUT`].

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, BinaryArray, ListArray, RecordBatch, StringArray, UInt16Array};
use cwm_chess::encode::STATE_LEN;
use cwm_formats::predictions::EP_CONVENTION_KEY;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::DataError;
use crate::games::parquet_files;

/// One tokenized game: the model's inputs and the state labels after every prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedGame {
    /// The example id.
    pub id: String,
    /// `T + 1` input tokens: `START` then the packed move ids.
    pub moves: Vec<u16>,
    /// `(T + 1) × 75` state labels, row-major (the state after `t` plies is
    /// `states[75 t .. 75 t + 75]`).
    pub states: Vec<u8>,
}

impl TokenizedGame {
    /// Number of plies `T`.
    pub fn plies(&self) -> usize {
        self.moves.len().saturating_sub(1)
    }
}

/// Streams the games of a `tokenize` artifact, in shard order and row order.
pub struct ShardReader {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<(PathBuf, ParquetRecordBatchReader)>,
    pending: std::vec::IntoIter<TokenizedGame>,
    batch_games: usize,
}

impl std::fmt::Debug for ShardReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardReader")
            .field("current", &self.current.as_ref().map(|c| &c.0))
            .finish()
    }
}

impl ShardReader {
    /// Reads the shards of `path` (a `tokenize` artifact directory or one shard file), in name
    /// order, decoding `batch_games` rows at a time.
    ///
    /// # Errors
    /// [`DataError`] when the directory cannot be listed or holds no Parquet file.
    pub fn open(path: &Path, batch_games: usize) -> Result<ShardReader, DataError> {
        Ok(ShardReader {
            files: parquet_files(path)?.into_iter(),
            current: None,
            pending: Vec::new().into_iter(),
            batch_games: batch_games.max(1),
        })
    }

    /// Number of games in the shards of `path`, from their footers.
    ///
    /// # Errors
    /// [`DataError`] when a footer cannot be read.
    pub fn count_games(path: &Path) -> Result<u64, DataError> {
        crate::games::GamesReader::count_games(path)
    }

    /// The en-passant convention the shards of `path` were labelled under (`reference` or
    /// `legal_capture`): the value of the `cwm.ep_convention` key that `tokenize` writes into
    /// every shard's Parquet metadata. `None` when no shard has the key.
    ///
    /// # Errors
    /// [`DataError`] when a footer cannot be read, or when two shards name different
    /// conventions.
    pub fn ep_convention(path: &Path) -> Result<Option<String>, DataError> {
        let mut found: Option<(PathBuf, String)> = None;
        for file in parquet_files(path)? {
            let f = File::open(&file).map_err(|e| DataError::io(&file, e))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(f)
                .map_err(|e| DataError::parquet(&file, e))?;
            let value = builder
                .metadata()
                .file_metadata()
                .key_value_metadata()
                .and_then(|kv| kv.iter().find(|k| k.key == EP_CONVENTION_KEY))
                .and_then(|k| k.value.clone());
            match (&found, value) {
                (None, Some(value)) => found = Some((file, value)),
                (Some((first, seen)), Some(value)) if *seen != value => {
                    return Err(DataError::format(
                        &file,
                        format!(
                            "labelled under the {value:?} en-passant convention, but {} under {seen:?}",
                            first.display()
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(found.map(|(_, value)| value))
    }

    fn next_batch(&mut self) -> Result<bool, DataError> {
        loop {
            if self.current.is_none() {
                let Some(file) = self.files.next() else {
                    return Ok(false);
                };
                let f = File::open(&file).map_err(|e| DataError::io(&file, e))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(f)
                    .and_then(|b| b.with_batch_size(self.batch_games).build())
                    .map_err(|e| DataError::parquet(&file, e))?;
                self.current = Some((file, reader));
            }
            let Some((path, reader)) = self.current.as_mut() else {
                return Ok(false);
            };
            match reader.next() {
                Some(Ok(batch)) => {
                    self.pending = decode_shard_batch(path, &batch)?.into_iter();
                    return Ok(true);
                }
                Some(Err(e)) => return Err(DataError::arrow(path.as_path(), e)),
                None => self.current = None,
            }
        }
    }
}

impl Iterator for ShardReader {
    type Item = Result<TokenizedGame, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(game) = self.pending.next() {
                return Some(Ok(game));
            }
            match self.next_batch() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.current = None;
                    self.files = Vec::new().into_iter();
                    return Some(Err(e));
                }
            }
        }
    }
}

fn column<'a, T: 'static>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a T, DataError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            DataError::format(
                path,
                format!("not a tokenize shard: column {name:?} missing or of another type"),
            )
        })
}

/// Decodes one record batch of a shard into games, checking that every game's labels fit its
/// moves.
///
/// # Errors
/// [`DataError`] naming the file and the row when a column is missing or the sizes disagree.
pub fn decode_shard_batch(
    path: &Path,
    batch: &RecordBatch,
) -> Result<Vec<TokenizedGame>, DataError> {
    let ids: &StringArray = column(path, batch, "id")?;
    let moves: &ListArray = column(path, batch, "moves")?;
    let states: &BinaryArray = column(path, batch, "states")?;
    let mut games = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let list = moves.value(row);
        let Some(tokens) = list.as_any().downcast_ref::<UInt16Array>() else {
            return Err(DataError::format(
                path,
                "column \"moves\" is not list<uint16>",
            ));
        };
        let game = TokenizedGame {
            id: ids.value(row).to_owned(),
            moves: tokens.values().to_vec(),
            states: states.value(row).to_vec(),
        };
        if game.moves.is_empty() || game.states.len() != game.moves.len() * STATE_LEN {
            return Err(DataError::format(
                path,
                format!(
                    "game {:?} (row {row}): {} tokens but {} label bytes (expected {} per token)",
                    game.id,
                    game.moves.len(),
                    game.states.len(),
                    STATE_LEN
                ),
            ));
        }
        games.push(game);
    }
    Ok(games)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random_uniform::{RandomUniformOptions, generate_random_uniform};
    use crate::tokenize::{TokenizeOptions, replay_states, tokenize_games};
    use crate::{OutputFormat, games::GamesReader};
    use cwm_chess::encode::{EpConvention, START};
    use cwm_random_uniform::Mode;
    use cwm_stage::Progress;

    #[test]
    fn reads_back_what_tokenize_wrote_in_order() {
        let dir = std::env::temp_dir().join(format!("cwm-shards-{}", std::process::id()));
        let games_dir = dir.join("games");
        let shards_dir = dir.join("shards");
        crate::random_uniform::fast_games_table(&games_dir, 7, 3);
        let progress = Progress::disabled();
        std::fs::create_dir_all(&shards_dir).unwrap();
        let tokenize = TokenizeOptions {
            shard_games: 3,
            ..TokenizeOptions::default()
        };
        let summary =
            tokenize_games(&games_dir, &shards_dir, &tokenize, &progress, &|| false).unwrap();
        assert_eq!(summary.shards.len(), 3);
        assert_eq!(ShardReader::count_games(&shards_dir).unwrap(), 7);
        assert_eq!(
            ShardReader::ep_convention(&shards_dir).unwrap().as_deref(),
            Some("reference")
        );
        let legal_dir = dir.join("legal");
        std::fs::create_dir_all(&legal_dir).unwrap();
        let legal = TokenizeOptions {
            ep_convention: EpConvention::LegalCapture,
            ..tokenize.clone()
        };
        tokenize_games(&games_dir, &legal_dir, &legal, &progress, &|| false).unwrap();
        assert_eq!(
            ShardReader::ep_convention(&legal_dir).unwrap().as_deref(),
            Some("legal_capture")
        );
        // Shards that disagree are an error naming both.
        std::fs::copy(
            legal_dir.join("shard_000000.parquet"),
            shards_dir.join("shard_000009.parquet"),
        )
        .unwrap();
        let err = ShardReader::ep_convention(&shards_dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shard_000009.parquet") && err.contains("shard_000000.parquet"),
            "{err}"
        );
        std::fs::remove_file(shards_dir.join("shard_000009.parquet")).unwrap();

        let expected: Vec<_> = GamesReader::open(&games_dir, 2)
            .unwrap()
            .flat_map(|batch| batch.unwrap())
            .collect();
        let read: Vec<TokenizedGame> = ShardReader::open(&shards_dir, 2)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(read.len(), expected.len());
        for (game, record) in read.iter().zip(&expected) {
            assert_eq!(game.id, record.id);
            assert_eq!(game.moves[0], START);
            assert_eq!(&game.moves[1..], record.moves.as_slice());
            assert_eq!(game.plies(), record.moves.len());
            let mut states = Vec::new();
            replay_states(
                &record.id,
                &record.moves,
                EpConvention::Reference,
                &mut states,
            )
            .unwrap();
            assert_eq!(game.states, states);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_games_table_is_not_a_shard() {
        let dir = std::env::temp_dir().join(format!("cwm-not-shards-{}", std::process::id()));
        let options = RandomUniformOptions {
            games: 2,
            mode: Mode::Fast,
            ..RandomUniformOptions::default()
        };
        generate_random_uniform(
            &options,
            &dir,
            OutputFormat::Parquet,
            &Progress::disabled(),
            &|| false,
        )
        .unwrap();
        let err = ShardReader::open(&dir, 8)
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("not a tokenize shard"), "{err}");
        assert_eq!(ShardReader::ep_convention(&dir).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
