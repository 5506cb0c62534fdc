//! The Parquet tables `evaluate` writes (`timesteps.parquet`, `games.parquet`, whose rows are
//! [`cwm_formats::evaluate`]'s, and `predictions.parquet`, of [`cwm_formats::predictions`]),
//! written under a temporary name and renamed into place when complete ([`AtomicFile`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, RecordBatch, StringArray,
    StringBuilder, UInt8Array, UInt16Array, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_formats::fs::AtomicFile;
use cwm_formats::labels::N_LABELS;
use cwm_formats::predictions::{EP_CONVENTION_KEY, MASS_SAMPLES_KEY, columns};
use cwm_stage_data::TokenizedGame;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use crate::EvalError;
use crate::evaluate::BatchResult;

pub use cwm_formats::evaluate::{GAMES_FILE, GameRow, SUMMARY_FILE, StepRow, TIMESTEPS_FILE};
pub use cwm_formats::predictions::PREDICTIONS_FILE;

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

/// The type of a per-label column of `predictions.parquet`: `fixed_size_list<item, 75>`.
fn labels_type(item: DataType) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", item, false)), N_LABELS as i32)
}

/// Schema of `predictions.parquet` ([`cwm_formats::predictions`]), with the `p_true` and
/// `p_max` columns when `probabilities` is set and the nullable `valid_mass` and
/// `afford_mass` when `masses` is.
pub fn predictions_schema(probabilities: bool, masses: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new(columns::GAME_ID, DataType::Utf8, false),
        Field::new(columns::T, DataType::UInt32, false),
        Field::new(columns::TOKEN, DataType::UInt16, false),
        Field::new(columns::MOVE, DataType::Utf8, true),
        Field::new(columns::PRED, labels_type(DataType::UInt8), false),
        Field::new(columns::TARGET, labels_type(DataType::UInt8), false),
        Field::new(columns::LOG_P_TRUE, DataType::Float32, false),
    ];
    if probabilities {
        fields.push(Field::new(
            columns::P_TRUE,
            labels_type(DataType::Float32),
            false,
        ));
        fields.push(Field::new(
            columns::P_MAX,
            labels_type(DataType::Float32),
            false,
        ));
    }
    if masses {
        fields.push(Field::new(columns::VALID_MASS, DataType::Float32, true));
        fields.push(Field::new(columns::AFFORD_MASS, DataType::Float32, true));
    }
    Arc::new(Schema::new(fields))
}

/// A `fixed_size_list<item, 75>` column of `values` (75 per row).
fn labels_column(values: ArrayRef, item: DataType) -> Result<ArrayRef, arrow::error::ArrowError> {
    let field = Arc::new(Field::new("item", item, false));
    Ok(Arc::new(FixedSizeListArray::try_new(
        field,
        N_LABELS as i32,
        values,
        None,
    )?))
}

/// The writer properties of every table: zstd level 3.
fn zstd_properties() -> WriterPropertiesBuilder {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
}

/// The writer properties of `predictions.parquet`: `metadata` as key-value metadata, and
/// dictionary encoding only for the game ids and moves (the label lists compress as well
/// without it, and faster).
fn predictions_properties(metadata: Vec<KeyValue>) -> WriterProperties {
    zstd_properties()
        .set_key_value_metadata((!metadata.is_empty()).then_some(metadata))
        .set_dictionary_enabled(false)
        .set_column_dictionary_enabled(ColumnPath::from(columns::GAME_ID), true)
        .set_column_dictionary_enabled(ColumnPath::from(columns::MOVE), true)
        .build()
}

/// A Parquet file being written under a temporary name ([`AtomicFile`]).
struct PendingParquet {
    path: PathBuf,
    file: AtomicFile,
    schema: SchemaRef,
    writer: ArrowWriter<File>,
}

impl PendingParquet {
    /// Creates the file at `path` (under a temporary name) with `metadata` as the Parquet
    /// key-value metadata.
    fn create(path: &Path, schema: SchemaRef, props: WriterProperties) -> Result<Self, EvalError> {
        let atomic = AtomicFile::new(path);
        let tmp = atomic.temp_path();
        let file = File::create(tmp).map_err(|e| EvalError::io(tmp, e))?;
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

/// Writes the three tables, one batch of games at a time.
pub(crate) struct TableWriters {
    timesteps: PendingParquet,
    games: PendingParquet,
    predictions: PendingParquet,
    probabilities: bool,
    masses: bool,
}

impl TableWriters {
    /// Creates `timesteps.parquet`, `games.parquet` and `predictions.parquet` (under temporary
    /// names) in `dir`; `predictions.parquet` gets the `p_true` and `p_max` columns when
    /// `probabilities` is set, `ep_convention` (when known) under [`EP_CONVENTION_KEY`], and
    /// with `mass_samples` the E12 columns and the samples under [`MASS_SAMPLES_KEY`].
    pub(crate) fn create(
        dir: &Path,
        probabilities: bool,
        ep_convention: Option<&str>,
        mass_samples: Option<u32>,
    ) -> Result<Self, EvalError> {
        let ep = ep_convention.map(|ep| KeyValue::new(EP_CONVENTION_KEY.to_owned(), ep.to_owned()));
        let samples =
            mass_samples.map(|m| KeyValue::new(MASS_SAMPLES_KEY.to_owned(), m.to_string()));
        let metadata = ep.into_iter().chain(samples).collect();
        Ok(Self {
            timesteps: PendingParquet::create(
                &dir.join(TIMESTEPS_FILE),
                timesteps_schema(),
                zstd_properties().build(),
            )?,
            games: PendingParquet::create(
                &dir.join(GAMES_FILE),
                games_schema(),
                zstd_properties().build(),
            )?,
            predictions: PendingParquet::create(
                &dir.join(PREDICTIONS_FILE),
                predictions_schema(probabilities, mass_samples.is_some()),
                predictions_properties(metadata),
            )?,
            probabilities,
            masses: mass_samples.is_some(),
        })
    }

    /// Appends the rows of a batch of games: `result` is [`crate::evaluate_batch`]'s of
    /// `games`.
    pub(crate) fn append(
        &mut self,
        games: &[TokenizedGame],
        result: &BatchResult,
    ) -> Result<(), EvalError> {
        self.timesteps
            .write(timesteps_columns(&result.games, &result.steps))?;
        self.games.write(games_columns(&result.games))?;
        let columns = prediction_columns(games, result, self.probabilities, self.masses)
            .map_err(|e| EvalError::arrow(&self.predictions.path, e))?;
        self.predictions.write(columns)
    }

    /// Closes the files and renames them into place.
    pub(crate) fn finish(self) -> Result<(), EvalError> {
        self.timesteps.finish()?;
        self.games.finish()?;
        self.predictions.finish()
    }
}

/// The `timesteps.parquet` columns of `steps` (`steps[g]` are the steps of `games[g]`).
fn timesteps_columns(games: &[GameRow], steps: &[Vec<StepRow>]) -> Vec<ArrayRef> {
    let n: usize = steps.iter().map(Vec::len).sum();
    let mut ids: Vec<&str> = Vec::with_capacity(n);
    for (game, rows) in games.iter().zip(steps) {
        ids.extend(std::iter::repeat_n(game.game_id.as_str(), rows.len()));
    }
    let all = || steps.iter().flatten();
    let u8s = |f: fn(&StepRow) -> u8| -> ArrayRef {
        Arc::new(UInt8Array::from_iter_values(all().map(f)))
    };
    vec![
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
            all().map(|s| Some(usize::from(s.n_correct) == N_LABELS)),
        )),
        Arc::new(Float32Array::from_iter_values(all().map(|s| s.loss))),
    ]
}

/// The `games.parquet` columns of `games`.
fn games_columns(games: &[GameRow]) -> Vec<ArrayRef> {
    vec![
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
    ]
}

/// The error of a batch whose arrays are shorter than its games and lengths say.
fn short_batch(what: String) -> arrow::error::ArrowError {
    arrow::error::ArrowError::InvalidArgumentError(format!(
        "{what}: the batch holds no predictions or labels for it"
    ))
}

/// The `predictions.parquet` columns of a batch: one row per valid step of each game, in the
/// order of `timesteps.parquet`.
fn prediction_columns(
    games: &[TokenizedGame],
    result: &BatchResult,
    probabilities: bool,
    masses: bool,
) -> Result<Vec<ArrayRef>, arrow::error::ArrowError> {
    let n: usize = result.lengths.iter().sum();
    let mut ids: Vec<&str> = Vec::with_capacity(n);
    let mut ts = Vec::with_capacity(n);
    let mut tokens = Vec::with_capacity(n);
    let mut moves = StringBuilder::with_capacity(n, 5 * n);
    let mut pred = Vec::with_capacity(n * N_LABELS);
    let mut target = Vec::with_capacity(n * N_LABELS);
    let mut log_p_true = Vec::with_capacity(n);
    let mut uci = String::with_capacity(5);
    let mut steps = Vec::with_capacity(n);
    for (b, (game, &len)) in games.iter().zip(&result.lengths).enumerate() {
        for (t, &token) in game.moves.iter().enumerate().take(len) {
            let i = b * result.seq_len + t;
            steps.push(i);
            ids.push(game.id.as_str());
            ts.push(t as u32);
            tokens.push(token);
            uci.clear();
            if t > 0 && cwm_chess::encode::write_uci(token, &mut uci) {
                moves.append_value(&uci);
            } else {
                moves.append_null();
            }
            let (Some(p), Some(s), Some(&l)) = (
                result.pred.get(i * N_LABELS..(i + 1) * N_LABELS),
                game.states.get(t * N_LABELS..(t + 1) * N_LABELS),
                result.log_p_true.get(i),
            ) else {
                return Err(short_batch(format!("game {:?} step {t}", game.id)));
            };
            pred.extend_from_slice(p);
            target.extend_from_slice(s);
            log_p_true.push(l);
        }
    }
    let u8_labels =
        |values: Vec<u8>| labels_column(Arc::new(UInt8Array::from(values)), DataType::UInt8);
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(ids)),
        Arc::new(UInt32Array::from(ts)),
        Arc::new(UInt16Array::from(tokens)),
        Arc::new(moves.finish()),
        u8_labels(pred)?,
        u8_labels(target)?,
        Arc::new(Float32Array::from(log_p_true)),
    ];
    if probabilities {
        let Some(probs) = &result.probabilities else {
            return Err(arrow::error::ArrowError::InvalidArgumentError(
                "the batch has no probabilities".into(),
            ));
        };
        for per_label in [&probs.p_true, &probs.p_max] {
            let mut values = Vec::with_capacity(n * N_LABELS);
            for &i in &steps {
                let slice = per_label
                    .get(i * N_LABELS..(i + 1) * N_LABELS)
                    .ok_or_else(|| short_batch(format!("padded step {i}")))?;
                values.extend_from_slice(slice);
            }
            columns.push(labels_column(
                Arc::new(Float32Array::from(values)),
                DataType::Float32,
            )?);
        }
    }
    if masses {
        let at = |i: usize| result.masses.get(i).copied().flatten();
        let valid: Float32Array = steps.iter().map(|&i| at(i).map(|m| m.valid)).collect();
        let afford: Float32Array = steps
            .iter()
            .map(|&i| at(i).and_then(|m| m.afford))
            .collect();
        columns.push(Arc::new(valid));
        columns.push(Arc::new(afford));
    }
    Ok(columns)
}
