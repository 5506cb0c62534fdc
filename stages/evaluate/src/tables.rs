//! The Parquet tables `evaluate` writes (`timesteps.parquet`, `games.parquet`; their rows are
//! [`cwm_formats::evaluate`]'s), written under a temporary name and renamed into place when
//! complete ([`AtomicFile`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, RecordBatch, StringArray, UInt8Array, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_formats::fs::AtomicFile;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::EvalError;

pub use cwm_formats::evaluate::{GAMES_FILE, GameRow, SUMMARY_FILE, StepRow, TIMESTEPS_FILE};

/// Schema of `timesteps.parquet`.
pub fn timesteps_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("game_id", DataType::Utf8, false),
        Field::new("t", DataType::UInt32, false),
        Field::new("n_correct", DataType::UInt8, false),
        Field::new("board", DataType::UInt8, false),
        Field::new("side", DataType::Boolean, false),
        Field::new("castling", DataType::UInt8, false),
        Field::new("en_passant", DataType::UInt8, false),
        Field::new("halfmove", DataType::UInt8, false),
        Field::new("fullmove", DataType::UInt8, false),
        Field::new("exact", DataType::Boolean, false),
        Field::new("loss", DataType::Float32, false),
    ]))
}

/// Schema of `games.parquet`.
pub fn games_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("game_id", DataType::Utf8, false),
        Field::new("plies", DataType::UInt32, false),
        Field::new("steps", DataType::UInt32, false),
        Field::new("exact_steps", DataType::UInt32, false),
        Field::new("all_exact", DataType::Boolean, false),
    ]))
}

/// A Parquet file being written under a temporary name ([`AtomicFile`]).
struct PendingParquet {
    path: PathBuf,
    file: AtomicFile,
    schema: SchemaRef,
    writer: ArrowWriter<File>,
}

impl PendingParquet {
    fn create(path: &Path, schema: SchemaRef) -> Result<Self, EvalError> {
        let atomic = AtomicFile::new(path);
        let tmp = atomic.temp_path();
        let file = File::create(tmp).map_err(|e| EvalError::io(tmp, e))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))
            .map_err(|e| EvalError::parquet(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file: atomic,
            schema,
            writer,
        })
    }

    fn write(&mut self, columns: Vec<ArrayRef>) -> Result<(), EvalError> {
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| EvalError::arrow(&self.path, e))?;
        self.writer
            .write(&batch)
            .map_err(|e| EvalError::parquet(&self.path, e))
    }

    fn finish(self) -> Result<(), EvalError> {
        self.writer
            .close()
            .map_err(|e| EvalError::parquet(&self.path, e))?;
        self.file.commit().map_err(|e| EvalError::io(&self.path, e))
    }
}

/// Writes both tables, one batch of games at a time.
pub(crate) struct TableWriters {
    timesteps: PendingParquet,
    games: PendingParquet,
}

impl TableWriters {
    /// Creates `timesteps.parquet` and `games.parquet` (under temporary names) in `dir`.
    pub(crate) fn create(dir: &Path) -> Result<Self, EvalError> {
        Ok(Self {
            timesteps: PendingParquet::create(&dir.join(TIMESTEPS_FILE), timesteps_schema())?,
            games: PendingParquet::create(&dir.join(GAMES_FILE), games_schema())?,
        })
    }

    /// Appends the rows of a batch of games: `steps[g]` are the steps of `games[g]`.
    pub(crate) fn append(
        &mut self,
        games: &[GameRow],
        steps: &[Vec<StepRow>],
    ) -> Result<(), EvalError> {
        let n: usize = steps.iter().map(Vec::len).sum();
        let mut ids: Vec<&str> = Vec::with_capacity(n);
        for (game, rows) in games.iter().zip(steps) {
            ids.extend(std::iter::repeat_n(game.game_id.as_str(), rows.len()));
        }
        let all = || steps.iter().flatten();
        let u8s = |f: fn(&StepRow) -> u8| -> ArrayRef {
            Arc::new(UInt8Array::from_iter_values(all().map(f)))
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(ids)),
            Arc::new(UInt32Array::from_iter_values(all().map(|s| s.t))),
            u8s(|s| s.n_correct),
            u8s(|s| s.board),
            Arc::new(BooleanArray::from_iter(all().map(|s| Some(s.side)))),
            u8s(|s| s.castling),
            u8s(|s| s.en_passant),
            u8s(|s| s.halfmove),
            u8s(|s| s.fullmove),
            Arc::new(BooleanArray::from_iter(
                all().map(|s| Some(usize::from(s.n_correct) == cwm_models::N_LABELS)),
            )),
            Arc::new(Float32Array::from_iter_values(all().map(|s| s.loss))),
        ];
        self.timesteps.write(columns)?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                games.iter().map(|g| g.game_id.as_str()),
            )),
            Arc::new(UInt32Array::from_iter_values(games.iter().map(|g| g.plies))),
            Arc::new(UInt32Array::from_iter_values(games.iter().map(|g| g.steps))),
            Arc::new(UInt32Array::from_iter_values(
                games.iter().map(|g| g.exact_steps),
            )),
            Arc::new(BooleanArray::from_iter(
                games.iter().map(|g| Some(g.all_exact)),
            )),
        ];
        self.games.write(columns)
    }

    /// Closes both files and renames them into place.
    pub(crate) fn finish(self) -> Result<(), EvalError> {
        self.timesteps.finish()?;
        self.games.finish()
    }
}
