//! The games table: the Parquet file every game-producing stage writes (`parse`, `split`,
//! `random_uniform`) and `tokenize` and `export_jsonl` read.
//!
//! One row per game, columns in this order:
//!
//! | column | Arrow type | meaning |
//! |---|---|---|
//! | `id` | utf8 | example id (spec E.3) |
//! | `source_index` | uint64 | 0-based index of the game in its source (PGN stream or generator) |
//! | `site` | utf8, nullable | PGN Site header |
//! | `result` | utf8 | PGN Result header (`*` when absent), or the generator's result |
//! | `white_elo`, `black_elo` | int32, nullable | PGN WhiteElo/BlackElo when they are integers |
//! | `time_control` | utf8, nullable | PGN TimeControl |
//! | `termination` | utf8, nullable | PGN Termination, or the generator's rule (`CHECKMATE`, ...) |
//! | `plies` | uint32 | number of half-moves |
//! | `moves` | `list<uint16>` (non-null items) | packed move ids (spec A.1), **without** `START` |
//!
//! Player names are never stored. Files are written a row group at a time
//! ([`ROW_GROUP_GAMES`] games), so memory stays bounded whatever the corpus size; they are
//! zstd-compressed. A games artifact is a directory holding `games.parquet`
//! ([`GAMES_FILE`]); readers accept any directory of `*.parquet` files with this schema, read in
//! name order.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int32Builder, ListBuilder, RecordBatch, StringBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{
    DataType, Field, Int32Type, Schema, SchemaRef, UInt16Type, UInt32Type, UInt64Type,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::DataError;

/// The file name of the games table inside a games artifact.
pub const GAMES_FILE: &str = "games.parquet";
/// Games per Parquet row group (and per write).
pub const ROW_GROUP_GAMES: usize = 8192;

/// One game as stored in the games table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GameRecord {
    /// Example id.
    pub id: String,
    /// Index of the game in its source.
    pub source_index: u64,
    /// Site header.
    pub site: Option<String>,
    /// Result.
    pub result: String,
    /// White's rating.
    pub white_elo: Option<i32>,
    /// Black's rating.
    pub black_elo: Option<i32>,
    /// TimeControl header.
    pub time_control: Option<String>,
    /// Termination header or rule.
    pub termination: Option<String>,
    /// Packed move ids without `START`.
    pub moves: Vec<u16>,
}

/// The list item field of `moves` columns (non-null u16).
pub(crate) fn u16_item_field() -> Arc<Field> {
    Arc::new(Field::new("item", DataType::UInt16, false))
}

/// The Arrow schema of the games table.
pub fn games_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("source_index", DataType::UInt64, false),
        Field::new("site", DataType::Utf8, true),
        Field::new("result", DataType::Utf8, false),
        Field::new("white_elo", DataType::Int32, true),
        Field::new("black_elo", DataType::Int32, true),
        Field::new("time_control", DataType::Utf8, true),
        Field::new("termination", DataType::Utf8, true),
        Field::new("plies", DataType::UInt32, false),
        Field::new("moves", DataType::List(u16_item_field()), false),
    ]))
}

/// Writer properties shared by the tables this crate writes: zstd, with `metadata` as
/// key-value pairs in the footer.
pub(crate) fn writer_properties(
    row_group_rows: usize,
    metadata: &[(String, String)],
) -> WriterProperties {
    let kv = metadata
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect::<Vec<_>>();
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
        .set_max_row_group_row_count(Some(row_group_rows.max(1)))
        .set_key_value_metadata(if kv.is_empty() { None } else { Some(kv) })
        .build()
}

/// Writes a games table a row group at a time.
pub struct GamesWriter {
    path: PathBuf,
    writer: ArrowWriter<BufWriter<File>>,
    id: StringBuilder,
    source_index: UInt64Builder,
    site: StringBuilder,
    result: StringBuilder,
    white_elo: Int32Builder,
    black_elo: Int32Builder,
    time_control: StringBuilder,
    termination: StringBuilder,
    plies: UInt32Builder,
    moves: ListBuilder<UInt16Builder>,
    pending: usize,
    written: u64,
}

impl std::fmt::Debug for GamesWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GamesWriter")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish()
    }
}

impl GamesWriter {
    /// Creates `path` (truncating it) with `metadata` in the file footer.
    ///
    /// # Errors
    ///
    /// [`DataError`] when the file cannot be created.
    pub fn create(path: &Path, metadata: &[(String, String)]) -> Result<GamesWriter, DataError> {
        let file = File::create(path).map_err(|e| DataError::io(path, e))?;
        let props = writer_properties(ROW_GROUP_GAMES, metadata);
        let writer = ArrowWriter::try_new(BufWriter::new(file), games_schema(), Some(props))
            .map_err(|e| DataError::parquet(path, e))?;
        Ok(GamesWriter {
            path: path.to_path_buf(),
            writer,
            id: StringBuilder::new(),
            source_index: UInt64Builder::new(),
            site: StringBuilder::new(),
            result: StringBuilder::new(),
            white_elo: Int32Builder::new(),
            black_elo: Int32Builder::new(),
            time_control: StringBuilder::new(),
            termination: StringBuilder::new(),
            plies: UInt32Builder::new(),
            moves: ListBuilder::new(UInt16Builder::new()).with_field(u16_item_field()),
            pending: 0,
            written: 0,
        })
    }

    /// Appends one game; a full row group is written out.
    ///
    /// # Errors
    ///
    /// [`DataError`] when writing fails or the game has more than `u32::MAX` plies.
    pub fn push(&mut self, game: &GameRecord) -> Result<(), DataError> {
        let plies = u32::try_from(game.moves.len())
            .map_err(|_| DataError::Invalid(format!("game {} is too long", game.id)))?;
        self.id.append_value(&game.id);
        self.source_index.append_value(game.source_index);
        self.site.append_option(game.site.as_deref());
        self.result.append_value(&game.result);
        self.white_elo.append_option(game.white_elo);
        self.black_elo.append_option(game.black_elo);
        self.time_control
            .append_option(game.time_control.as_deref());
        self.termination.append_option(game.termination.as_deref());
        self.plies.append_value(plies);
        self.moves.values().append_slice(&game.moves);
        self.moves.append(true);
        self.pending += 1;
        if self.pending >= ROW_GROUP_GAMES {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Games written so far (including buffered ones).
    pub fn games(&self) -> u64 {
        self.written + self.pending as u64
    }

    fn flush_batch(&mut self) -> Result<(), DataError> {
        if self.pending == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.source_index.finish()),
            Arc::new(self.site.finish()),
            Arc::new(self.result.finish()),
            Arc::new(self.white_elo.finish()),
            Arc::new(self.black_elo.finish()),
            Arc::new(self.time_control.finish()),
            Arc::new(self.termination.finish()),
            Arc::new(self.plies.finish()),
            Arc::new(self.moves.finish()),
        ];
        let batch = RecordBatch::try_new(games_schema(), columns)
            .map_err(|e| DataError::arrow(&self.path, e))?;
        self.writer
            .write(&batch)
            .map_err(|e| DataError::parquet(&self.path, e))?;
        self.writer
            .flush()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        self.written += self.pending as u64;
        self.pending = 0;
        Ok(())
    }

    /// Writes what is buffered and the footer; returns the number of games.
    ///
    /// # Errors
    ///
    /// [`DataError`] when writing fails.
    pub fn finish(mut self) -> Result<u64, DataError> {
        self.flush_batch()?;
        self.writer
            .close()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        Ok(self.written)
    }
}

/// The Parquet files of a games (or shards) artifact directory, in name order; a file path is
/// returned as is.
///
/// # Errors
///
/// [`DataError`] when the directory cannot be listed or holds no `.parquet` file.
pub fn parquet_files(path: &Path) -> Result<Vec<PathBuf>, DataError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| DataError::io(path, e))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| DataError::io(path, e))?;
        let p = entry.path();
        if p.is_file() && p.extension().is_some_and(|x| x == "parquet") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(DataError::format(path, "holds no .parquet file"));
    }
    Ok(files)
}

/// Reads the games of one or more games tables in batches of up to `batch_games` games.
pub struct GamesReader {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<(PathBuf, ParquetRecordBatchReader)>,
    batch_games: usize,
}

impl std::fmt::Debug for GamesReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GamesReader")
            .field("current", &self.current.as_ref().map(|c| &c.0))
            .finish()
    }
}

impl GamesReader {
    /// Reads every games table of `path` (a directory or one file), in name order.
    ///
    /// # Errors
    ///
    /// [`DataError`] when the directory cannot be listed or holds no Parquet file.
    pub fn open(path: &Path, batch_games: usize) -> Result<GamesReader, DataError> {
        Ok(GamesReader {
            files: parquet_files(path)?.into_iter(),
            current: None,
            batch_games: batch_games.max(1),
        })
    }

    /// Total number of games in the tables, from their footers.
    ///
    /// # Errors
    ///
    /// [`DataError`] when a footer cannot be read.
    pub fn count_games(path: &Path) -> Result<u64, DataError> {
        let mut total = 0u64;
        for file in parquet_files(path)? {
            let f = File::open(&file).map_err(|e| DataError::io(&file, e))?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(f)
                .map_err(|e| DataError::parquet(&file, e))?;
            total += u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        }
        Ok(total)
    }

    fn open_next(&mut self) -> Result<bool, DataError> {
        let Some(file) = self.files.next() else {
            return Ok(false);
        };
        let f = File::open(&file).map_err(|e| DataError::io(&file, e))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(f)
            .and_then(|b| b.with_batch_size(self.batch_games).build())
            .map_err(|e| DataError::parquet(&file, e))?;
        self.current = Some((file, reader));
        Ok(true)
    }

    fn next_batch(&mut self) -> Result<Option<Vec<GameRecord>>, DataError> {
        loop {
            if self.current.is_none() && !self.open_next()? {
                return Ok(None);
            }
            let Some((path, reader)) = self.current.as_mut() else {
                return Ok(None);
            };
            match reader.next() {
                Some(Ok(batch)) => return decode_games(path, &batch).map(Some),
                Some(Err(e)) => return Err(DataError::arrow(path.as_path(), e)),
                None => self.current = None,
            }
        }
    }
}

impl Iterator for GamesReader {
    type Item = Result<Vec<GameRecord>, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_batch() {
            Ok(Some(batch)) => Some(Ok(batch)),
            Ok(None) => None,
            Err(e) => {
                self.current = None;
                self.files = Vec::new().into_iter();
                Some(Err(e))
            }
        }
    }
}

fn column<'a>(path: &Path, batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, DataError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DataError::format(path, format!("no column `{name}`")))
}

fn wrong_type(path: &Path, name: &str, array: &ArrayRef) -> DataError {
    DataError::format(
        path,
        format!("column `{name}` has type {}", array.data_type()),
    )
}

fn strings(path: &Path, batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>, DataError> {
    let array = column(path, batch, name)?;
    let strings = array
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong_type(path, name, array))?;
    Ok(strings.iter().map(|s| s.map(str::to_owned)).collect())
}

fn optional_i32(
    path: &Path,
    batch: &RecordBatch,
    name: &str,
) -> Result<Vec<Option<i32>>, DataError> {
    let array = column(path, batch, name)?;
    let values = array
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| wrong_type(path, name, array))?;
    Ok(values.iter().collect())
}

/// The packed move lists of a `list<uint16>` column, one `Vec` per row.
pub(crate) fn u16_lists(
    path: &Path,
    batch: &RecordBatch,
    name: &str,
) -> Result<Vec<Vec<u16>>, DataError> {
    let array = column(path, batch, name)?;
    let list = array
        .as_list_opt::<i32>()
        .ok_or_else(|| wrong_type(path, name, array))?;
    let values = list
        .values()
        .as_primitive_opt::<UInt16Type>()
        .ok_or_else(|| wrong_type(path, name, array))?;
    let values = values.values();
    let offsets = list.value_offsets();
    let mut out = Vec::with_capacity(list.len());
    for row in 0..list.len() {
        let start = usize::try_from(offsets[row]).unwrap_or(0);
        let end = usize::try_from(offsets[row + 1]).unwrap_or(0);
        let slice = values
            .get(start..end)
            .ok_or_else(|| DataError::format(path, format!("column `{name}`: bad offsets")))?;
        out.push(slice.to_vec());
    }
    Ok(out)
}

/// Decodes one record batch of a games table.
fn decode_games(path: &Path, batch: &RecordBatch) -> Result<Vec<GameRecord>, DataError> {
    let ids = strings(path, batch, "id")?;
    let source_index = {
        let array = column(path, batch, "source_index")?;
        array
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| wrong_type(path, "source_index", array))?
            .values()
            .to_vec()
    };
    let sites = strings(path, batch, "site")?;
    let results = strings(path, batch, "result")?;
    let white = optional_i32(path, batch, "white_elo")?;
    let black = optional_i32(path, batch, "black_elo")?;
    let time_controls = strings(path, batch, "time_control")?;
    let terminations = strings(path, batch, "termination")?;
    let plies = {
        let array = column(path, batch, "plies")?;
        array
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| wrong_type(path, "plies", array))?
            .values()
            .to_vec()
    };
    let moves = u16_lists(path, batch, "moves")?;
    let mut games = Vec::with_capacity(batch.num_rows());
    let rows = ids
        .into_iter()
        .zip(source_index)
        .zip(sites)
        .zip(results)
        .zip(white.into_iter().zip(black))
        .zip(time_controls.into_iter().zip(terminations))
        .zip(plies.into_iter().zip(moves));
    for row in rows {
        let (
            ((((id, source_index), site), result), (white_elo, black_elo)),
            (time_control, termination),
        ) = row.0;
        let (plies, moves) = row.1;
        let id = id.ok_or_else(|| DataError::format(path, "null id"))?;
        if plies as usize != moves.len() {
            return Err(DataError::format(
                path,
                format!("game {id}: plies {plies} but {} moves", moves.len()),
            ));
        }
        games.push(GameRecord {
            id,
            source_index,
            site,
            result: result.unwrap_or_else(|| "*".to_owned()),
            white_elo,
            black_elo,
            time_control,
            termination,
            moves,
        });
    }
    Ok(games)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u64) -> GameRecord {
        GameRecord {
            id: format!("cwm_test_{i}"),
            source_index: i,
            site: i
                .is_multiple_of(2)
                .then(|| format!("https://lichess.org/{i}")),
            result: "1-0".into(),
            white_elo: Some(1500),
            black_elo: None,
            time_control: Some("60+0".into()),
            termination: None,
            moves: (0..(i as u16 % 50)).collect(),
        }
    }

    #[test]
    fn games_round_trip_across_row_groups() {
        let dir = std::env::temp_dir().join(format!("cwm-games-rt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(GAMES_FILE);
        let games: Vec<_> = (0..(ROW_GROUP_GAMES as u64 + 17)).map(sample).collect();
        let mut writer = GamesWriter::create(&path, &[("k".into(), "v".into())]).unwrap();
        for g in &games {
            writer.push(g).unwrap();
        }
        assert_eq!(writer.finish().unwrap(), games.len() as u64);
        assert_eq!(GamesReader::count_games(&dir).unwrap(), games.len() as u64);
        let back: Vec<GameRecord> = GamesReader::open(&dir, 1000)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(back, games);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
