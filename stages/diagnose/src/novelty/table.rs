//! `novelty.parquet`: its schema, the stage's writer, and the reader the diagnose stage (or
//! anything else) uses. The columns and their meaning are [`cwm_formats::novelty`]'s.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Int32Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_formats::novelty::{NOVELTY_FILE, NoveltyRow, columns};
use cwm_stage_data::TokenizedGame;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::NoveltyError;
use super::scan::{GameNovelty, StepCounts};
use crate::parquet_file::ParquetFile;

/// Rows the reader decodes at a time.
const READ_ROWS: usize = 8192;

/// The Arrow schema of `novelty.parquet`.
pub fn novelty_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(columns::GAME_ID, DataType::Utf8, false),
        Field::new(columns::T, DataType::UInt32, false),
        Field::new(columns::PREFIX_SEEN, DataType::Boolean, false),
        Field::new(columns::POSITION_SEEN, DataType::Boolean, true),
        Field::new(columns::STATE_SEEN, DataType::Boolean, false),
        Field::new(columns::PREFIX_COUNT, DataType::UInt64, false),
        Field::new(columns::POSITION_COUNT, DataType::UInt64, true),
        Field::new(columns::STATE_COUNT, DataType::UInt64, false),
        Field::new(columns::DEVIATION_PLY, DataType::UInt32, true),
        Field::new(columns::PLIES_SINCE_DEVIATION, DataType::Int32, true),
    ]))
}

/// `t - t_dev` as the table's i32 (saturating; plies never come near its range).
fn since(t: u32, deviation: u32) -> i32 {
    let d = i64::from(t) - i64::from(deviation);
    i32::try_from(d).unwrap_or(if d < 0 { i32::MIN } else { i32::MAX })
}

/// Writes `novelty.parquet` under a temporary name, renamed into place by
/// [`NoveltyWriter::finish`].
pub(crate) struct NoveltyWriter(ParquetFile);

impl NoveltyWriter {
    /// Starts `path`.
    pub(crate) fn create(path: &Path) -> Result<NoveltyWriter, NoveltyError> {
        Ok(NoveltyWriter(ParquetFile::create(path, novelty_schema())?))
    }

    /// Appends the rows of `games`, whose counts are `found` (one entry per game).
    pub(crate) fn append(
        &mut self,
        games: &[TokenizedGame],
        found: &[GameNovelty],
    ) -> Result<(), NoveltyError> {
        // Arrow's builders from iterators want exact sizes, which a flattened iterator lacks.
        let all: Vec<(&str, u32, &StepCounts, Option<u32>)> = games
            .iter()
            .zip(found)
            .flat_map(|(game, novelty)| {
                novelty.steps.iter().enumerate().map(move |(t, step)| {
                    let t = u32::try_from(t).unwrap_or(u32::MAX);
                    (game.id.as_str(), t, step, novelty.deviation)
                })
            })
            .collect();
        let rows = || all.iter().copied();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows().map(|r| r.0))),
            Arc::new(UInt32Array::from_iter_values(rows().map(|r| r.1))),
            Arc::new(BooleanArray::from_iter(
                rows().map(|r| Some(r.2.prefix > 0)),
            )),
            Arc::new(BooleanArray::from_iter(
                rows().map(|r| r.2.position.map(|c| c > 0)),
            )),
            Arc::new(BooleanArray::from_iter(rows().map(|r| Some(r.2.state > 0)))),
            Arc::new(UInt64Array::from_iter_values(rows().map(|r| r.2.prefix))),
            Arc::new(UInt64Array::from_iter(rows().map(|r| r.2.position))),
            Arc::new(UInt64Array::from_iter_values(rows().map(|r| r.2.state))),
            Arc::new(UInt32Array::from_iter(rows().map(|r| r.3))),
            Arc::new(Int32Array::from_iter(
                rows().map(|r| r.3.map(|d| since(r.1, d))),
            )),
        ];
        Ok(self.0.write(columns)?)
    }

    /// Closes the file and renames it into place.
    pub(crate) fn finish(self) -> Result<(), NoveltyError> {
        Ok(self.0.finish()?)
    }
}

/// Streams the rows of a `novelty.parquet`, in file order (the test shards' order), decoding
/// a few thousand rows at a time.
pub struct NoveltyReader {
    path: PathBuf,
    reader: Option<ParquetRecordBatchReader>,
    pending: std::vec::IntoIter<NoveltyRow>,
}

impl std::fmt::Debug for NoveltyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoveltyReader")
            .field("path", &self.path)
            .finish()
    }
}

impl NoveltyReader {
    /// Opens `path`: a novelty artifact directory (its `novelty.parquet`) or the file itself.
    ///
    /// # Errors
    /// [`NoveltyError::Io`] or [`NoveltyError::Parquet`] naming the file.
    pub fn open(path: &Path) -> Result<NoveltyReader, NoveltyError> {
        let path = if path.is_dir() {
            path.join(NOVELTY_FILE)
        } else {
            path.to_path_buf()
        };
        let file = File::open(&path).map_err(|e| NoveltyError::io(&path, e))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.with_batch_size(READ_ROWS).build())
            .map_err(|e| NoveltyError::parquet(&path, e))?;
        Ok(NoveltyReader {
            path,
            reader: Some(reader),
            pending: Vec::new().into_iter(),
        })
    }
}

impl Iterator for NoveltyReader {
    type Item = Result<NoveltyRow, NoveltyError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(row) = self.pending.next() {
                return Some(Ok(row));
            }
            let decoded = match self.reader.as_mut()?.next()? {
                Ok(batch) => decode_batch(&self.path, &batch),
                Err(e) => Err(NoveltyError::arrow(&self.path, e)),
            };
            match decoded {
                Ok(rows) => self.pending = rows.into_iter(),
                Err(e) => {
                    self.reader = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Every row of the `novelty.parquet` at `path` (a directory or the file). The test set's
/// steps fit in memory; use [`NoveltyReader`] to stream them instead.
///
/// # Errors
/// As [`NoveltyReader`].
pub fn read_novelty(path: &Path) -> Result<Vec<NoveltyRow>, NoveltyError> {
    NoveltyReader::open(path)?.collect()
}

fn column<'a, T: 'static>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a T, NoveltyError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            NoveltyError::format(
                path,
                format!("not a novelty table: column {name:?} missing or of another type"),
            )
        })
}

/// Fails when a column that must be filled holds a null.
fn filled(path: &Path, array: &dyn Array, name: &str) -> Result<(), NoveltyError> {
    if array.null_count() > 0 {
        return Err(NoveltyError::format(
            path,
            format!("column {name:?} holds nulls"),
        ));
    }
    Ok(())
}

fn decode_batch(path: &Path, batch: &RecordBatch) -> Result<Vec<NoveltyRow>, NoveltyError> {
    let ids: &StringArray = column(path, batch, columns::GAME_ID)?;
    let t: &UInt32Array = column(path, batch, columns::T)?;
    let prefix_seen: &BooleanArray = column(path, batch, columns::PREFIX_SEEN)?;
    let position_seen: &BooleanArray = column(path, batch, columns::POSITION_SEEN)?;
    let state_seen: &BooleanArray = column(path, batch, columns::STATE_SEEN)?;
    let prefix_count: &UInt64Array = column(path, batch, columns::PREFIX_COUNT)?;
    let position_count: &UInt64Array = column(path, batch, columns::POSITION_COUNT)?;
    let state_count: &UInt64Array = column(path, batch, columns::STATE_COUNT)?;
    let deviation: &UInt32Array = column(path, batch, columns::DEVIATION_PLY)?;
    let since: &Int32Array = column(path, batch, columns::PLIES_SINCE_DEVIATION)?;
    filled(path, ids, columns::GAME_ID)?;
    filled(path, t, columns::T)?;
    filled(path, prefix_seen, columns::PREFIX_SEEN)?;
    filled(path, state_seen, columns::STATE_SEEN)?;
    filled(path, prefix_count, columns::PREFIX_COUNT)?;
    filled(path, state_count, columns::STATE_COUNT)?;
    let optional = |array: &dyn Array, i: usize| array.is_valid(i);
    Ok((0..batch.num_rows())
        .map(|i| NoveltyRow {
            game_id: ids.value(i).to_owned(),
            t: t.value(i),
            prefix_seen: prefix_seen.value(i),
            position_seen: optional(position_seen, i).then(|| position_seen.value(i)),
            state_seen: state_seen.value(i),
            prefix_count: prefix_count.value(i),
            position_count: optional(position_count, i).then(|| position_count.value(i)),
            state_count: state_count.value(i),
            deviation_ply: optional(deviation, i).then(|| deviation.value(i)),
            plies_since_deviation: optional(since, i).then(|| since.value(i)),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::arrow::ArrowWriter;

    fn scratch(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("cwm-novelty-table-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn game(id: &str, steps: usize) -> TokenizedGame {
        TokenizedGame {
            id: id.into(),
            moves: vec![0; steps],
            states: vec![0; steps * 75],
        }
    }

    #[test]
    fn rows_read_back_as_written() {
        let dir = scratch("round-trip");
        let path = dir.join(NOVELTY_FILE);
        let mut writer = NoveltyWriter::create(&path).unwrap();
        let step = |prefix, position, state| StepCounts {
            prefix,
            position,
            state,
        };
        let found = [
            GameNovelty {
                steps: vec![
                    step(5, Some(5), 5),
                    step(2, Some(3), 0),
                    step(0, Some(0), 0),
                ],
                deviation: Some(2),
                bad: None,
            },
            GameNovelty {
                steps: vec![step(5, Some(5), 5), step(1, None, 1)],
                deviation: None,
                bad: None,
            },
        ];
        writer
            .append(&[game("a", 3), game("b", 2)], &found)
            .unwrap();
        assert!(!path.exists(), "not in place before finish");
        writer.finish().unwrap();
        let rows = read_novelty(&dir).unwrap();
        assert_eq!(rows.len(), 5);
        assert_eq!(
            rows[1],
            NoveltyRow {
                game_id: "a".into(),
                t: 1,
                prefix_seen: true,
                position_seen: Some(true),
                state_seen: false,
                prefix_count: 2,
                position_count: Some(3),
                state_count: 0,
                deviation_ply: Some(2),
                plies_since_deviation: Some(-1),
            }
        );
        assert_eq!(rows[2].plies_since_deviation, Some(0));
        assert!(!rows[2].prefix_seen && rows[2].position_seen == Some(false));
        assert_eq!(rows[4].game_id, "b");
        assert_eq!(
            (rows[4].position_seen, rows[4].position_count),
            (None, None)
        );
        assert_eq!(
            (rows[4].deviation_ply, rows[4].plies_since_deviation),
            (None, None)
        );
        let streamed: Vec<NoveltyRow> = NoveltyReader::open(&path)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(streamed, rows);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_table_is_refused_naming_the_column() {
        let dir = scratch("other");
        let path = dir.join("other.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new(
            "game_id",
            DataType::Utf8,
            false,
        )]));
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), schema.clone(), None).unwrap();
        let ids: ArrayRef = Arc::new(StringArray::from(vec!["a"]));
        writer
            .write(&RecordBatch::try_new(schema, vec![ids]).unwrap())
            .unwrap();
        writer.close().unwrap();
        let err = read_novelty(&path).unwrap_err();
        assert!(err.to_string().contains("column \"t\" missing"), "{err}");
        assert!(err.to_string().contains("other.parquet"), "{err}");
        let missing = read_novelty(&dir.join("nothing.parquet")).unwrap_err();
        assert!(matches!(missing, NoveltyError::Io { .. }), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plies_since_deviation_saturate() {
        assert_eq!(since(3, 7), -4);
        assert_eq!(since(u32::MAX, 0), i32::MAX);
        assert_eq!(since(0, u32::MAX), i32::MIN);
    }
}
