//! Streaming an evaluate artifact's `predictions.parquet` one game at a time
//! ([`cwm_formats::predictions`] is the contract).
//!
//! The reader decodes one Parquet batch of rows at a time and hands out whole games
//! ([`GameRows`]): the rows of one game must be contiguous, start at t = 0 and count up by
//! one. Only the columns the diagnostics read are decoded (`move` and `p_true` are not).
//! Every label is checked against its class count, so the measures never index out of range,
//! and every sampled mass (E12's `valid_mass` and `afford_mass`, where the file has them) lies
//! in 0..=1.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{
    Array, AsArray, FixedSizeListArray, Float32Array, RecordBatch, StringArray, UInt8Array,
    UInt16Array, UInt32Array,
};
use arrow::datatypes::{Float32Type, UInt8Type, UInt16Type, UInt32Type};
use cwm_chess::encode::{EpConvention, LABEL_CLASSES, STATE_LEN, StateLabels};
use cwm_formats::predictions::{EP_CONVENTION_KEY, MASS_SAMPLES_KEY, columns};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::DiagnoseError;

/// Rows decoded per Parquet batch.
const BATCH_ROWS: usize = 8192;

/// The rows of one game, in step order: `t` runs over `0..steps()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GameRows {
    /// The example id.
    pub game_id: String,
    /// The input token of every step (`START` at t = 0, then the packed move ids).
    pub tokens: Vec<u16>,
    /// The predicted labels, `steps × 75`, row-major.
    pub pred: Vec<u8>,
    /// The true labels, `steps × 75`, row-major.
    pub target: Vec<u8>,
    /// `Σ ln p(target label)` per step.
    pub log_p_true: Vec<f32>,
    /// `p(argmax label)` per label, `steps × 75`, when the file has the column.
    pub p_max: Option<Vec<f32>>,
    /// E12's valid and afford mass per step (NaN where the file's value is null), when the
    /// file has the columns.
    pub sampled_mass: Option<Vec<(f32, f32)>>,
}

impl GameRows {
    /// Steps of the game (t = 0 included).
    pub fn steps(&self) -> usize {
        self.tokens.len()
    }

    /// The predicted labels at step `t` (`t < steps()`).
    pub fn pred(&self, t: usize) -> &StateLabels {
        labels_at(&self.pred, t)
    }

    /// The true labels at step `t` (`t < steps()`).
    pub fn target(&self, t: usize) -> &StateLabels {
        labels_at(&self.target, t)
    }

    /// `p_max` of the 75 labels at step `t`, when present.
    pub fn p_max(&self, t: usize) -> Option<&[f32]> {
        self.p_max
            .as_ref()
            .and_then(|p| p.get(t * STATE_LEN..(t + 1) * STATE_LEN))
    }

    /// The valid and afford mass at step `t`, each `None` where the file has no value.
    pub fn sampled_mass(&self, t: usize) -> (Option<f32>, Option<f32>) {
        let known = |v: f32| (!v.is_nan()).then_some(v);
        match self.sampled_mass.as_ref().and_then(|m| m.get(t)) {
            Some(&(valid, afford)) => (known(valid), known(afford)),
            None => (None, None),
        }
    }
}

/// The 75 labels of row `t` of a flat `steps × 75` buffer; an all-zero state past the end
/// (never reached: the buffers are built with 75 labels per step).
fn labels_at(flat: &[u8], t: usize) -> &StateLabels {
    const EMPTY: StateLabels = [0; STATE_LEN];
    flat.get(t * STATE_LEN..(t + 1) * STATE_LEN)
        .and_then(|row| <&StateLabels>::try_from(row).ok())
        .unwrap_or(&EMPTY)
}

/// Streams the games of one `predictions.parquet`.
pub struct PredictionsReader {
    path: PathBuf,
    reader: ParquetRecordBatchReader,
    ep: EpConvention,
    has_p_max: bool,
    mass_samples: Option<u32>,
    rows: u64,
    batch: Option<RecordBatch>,
    row: usize,
    current: Option<GameRows>,
    seen: HashSet<String>,
}

impl std::fmt::Debug for PredictionsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictionsReader")
            .field("path", &self.path)
            .field("ep", &self.ep)
            .finish()
    }
}

impl PredictionsReader {
    /// Opens `path`, reading the en-passant convention from its key-value metadata.
    ///
    /// # Errors
    /// [`DiagnoseError`] naming the file when it cannot be opened, lacks a required column or
    /// the `cwm.ep_convention` key, or names an unknown convention.
    pub fn open(path: &Path) -> Result<PredictionsReader, DiagnoseError> {
        let file = File::open(path).map_err(|e| DiagnoseError::io(path, e))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| DiagnoseError::parquet(path, e))?;
        let ep = ep_of(path, &builder)?;
        let schema = builder.schema().clone();
        for name in [
            columns::GAME_ID,
            columns::T,
            columns::TOKEN,
            columns::PRED,
            columns::TARGET,
            columns::LOG_P_TRUE,
        ] {
            if schema.field_with_name(name).is_err() {
                return Err(DiagnoseError::format(
                    path,
                    format!("has no column `{name}`"),
                ));
            }
        }
        let has_p_max = schema.field_with_name(columns::P_MAX).is_ok();
        let mass_samples = mass_samples_of(path, &builder)?;
        let mut wanted = vec![
            columns::GAME_ID,
            columns::T,
            columns::TOKEN,
            columns::PRED,
            columns::TARGET,
            columns::LOG_P_TRUE,
        ];
        if has_p_max {
            wanted.push(columns::P_MAX);
        }
        if mass_samples.is_some() {
            wanted.extend([columns::VALID_MASS, columns::AFFORD_MASS]);
        }
        let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let mask = ProjectionMask::columns(builder.parquet_schema(), wanted);
        let reader = builder
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| DiagnoseError::parquet(path, e))?;
        Ok(PredictionsReader {
            path: path.to_path_buf(),
            reader,
            ep,
            has_p_max,
            mass_samples,
            rows,
            batch: None,
            row: 0,
            current: None,
            seen: HashSet::new(),
        })
    }

    /// The labels' en-passant convention.
    pub fn ep_convention(&self) -> EpConvention {
        self.ep
    }

    /// Whether the file has the `p_max` column.
    pub fn has_p_max(&self) -> bool {
        self.has_p_max
    }

    /// The states drawn per sampled step, when the file has E12's sampled masses.
    pub fn mass_samples(&self) -> Option<u32> {
        self.mass_samples
    }

    /// Rows in the file, from its footer.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Up to `max` next games, in file order (empty at the end).
    ///
    /// # Errors
    /// As [`PredictionsReader::next_game`].
    pub fn next_games(&mut self, max: usize) -> Result<Vec<GameRows>, DiagnoseError> {
        let mut games = Vec::with_capacity(max);
        while games.len() < max {
            match self.next_game()? {
                Some(game) => games.push(game),
                None => break,
            }
        }
        Ok(games)
    }

    /// The next game, or `None` at the end of the file.
    ///
    /// # Errors
    /// [`DiagnoseError`] naming the file (and the game and step) for a Parquet error, a
    /// column of the wrong type, a null, a label out of range, steps out of order or a game
    /// whose rows are not contiguous.
    pub fn next_game(&mut self) -> Result<Option<GameRows>, DiagnoseError> {
        loop {
            if self.batch.is_none() {
                match self.reader.next() {
                    Some(Ok(batch)) => {
                        self.batch = Some(batch);
                        self.row = 0;
                    }
                    Some(Err(e)) => return Err(DiagnoseError::arrow(&self.path, e)),
                    None => return Ok(self.current.take()),
                }
            }
            let Some(batch) = self.batch.take() else {
                continue;
            };
            let view = BatchView::new(&self.path, &batch, self.has_p_max, self.mass_samples)?;
            while self.row < batch.num_rows() {
                let row = self.row;
                let id = view.game_id.value(row);
                let starts_new = self.current.as_ref().is_none_or(|g| g.game_id != id);
                if starts_new && let Some(done) = self.current.take() {
                    // The finished game goes out; this row starts the next call.
                    self.batch = Some(batch);
                    return Ok(Some(done));
                }
                if starts_new {
                    self.current = Some(self.start_game(id)?);
                }
                if let Some(game) = self.current.as_mut() {
                    view.append(&self.path, row, game)?;
                }
                self.row += 1;
            }
        }
    }

    fn start_game(&mut self, id: &str) -> Result<GameRows, DiagnoseError> {
        if !self.seen.insert(id.to_owned()) {
            return Err(DiagnoseError::game(
                &self.path,
                id,
                0,
                "the game's rows are not contiguous (it appears again after another game)",
            ));
        }
        Ok(GameRows {
            game_id: id.to_owned(),
            p_max: self.has_p_max.then(Vec::new),
            sampled_mass: self.mass_samples.map(|_| Vec::new()),
            ..GameRows::default()
        })
    }
}

/// The states per sampled step of E12's masses: `None` when the file has neither mass column;
/// an error when it has one of them only, or lacks or misstates the metadata key.
fn mass_samples_of(
    path: &Path,
    builder: &ParquetRecordBatchReaderBuilder<File>,
) -> Result<Option<u32>, DiagnoseError> {
    let schema = builder.schema();
    let has = |name: &str| schema.field_with_name(name).is_ok();
    match (has(columns::VALID_MASS), has(columns::AFFORD_MASS)) {
        (false, false) => return Ok(None),
        (true, true) => {}
        _ => {
            return Err(DiagnoseError::format(
                path,
                format!(
                    "has only one of the columns `{}` and `{}`",
                    columns::VALID_MASS,
                    columns::AFFORD_MASS
                ),
            ));
        }
    }
    let value = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kvs| kvs.iter().find(|kv| kv.key == MASS_SAMPLES_KEY))
        .and_then(|kv| kv.value.clone());
    match value.as_deref().map(str::parse::<u32>) {
        Some(Ok(samples)) if samples > 0 => Ok(Some(samples)),
        _ => Err(DiagnoseError::format(
            path,
            format!(
                "has the sampled masses but `{MASS_SAMPLES_KEY}` in its metadata is {value:?}, \
                 not a positive number of states"
            ),
        )),
    }
}

/// The en-passant convention in the file's key-value metadata (or its Arrow schema's).
fn ep_of(
    path: &Path,
    builder: &ParquetRecordBatchReaderBuilder<File>,
) -> Result<EpConvention, DiagnoseError> {
    let from_file = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kvs| kvs.iter().find(|kv| kv.key == EP_CONVENTION_KEY))
        .and_then(|kv| kv.value.clone());
    let value = from_file.or_else(|| builder.schema().metadata().get(EP_CONVENTION_KEY).cloned());
    let Some(value) = value else {
        return Err(DiagnoseError::format(
            path,
            format!(
                "has no `{EP_CONVENTION_KEY}` key in its metadata: the labels' en-passant convention is unknown"
            ),
        ));
    };
    EpConvention::from_name(&value).ok_or_else(|| {
        DiagnoseError::format(
            path,
            format!(
                "`{EP_CONVENTION_KEY}` is {value:?}; expected \"reference\" or \"legal_capture\""
            ),
        )
    })
}

/// The typed columns of one batch.
struct BatchView<'a> {
    game_id: &'a StringArray,
    t: &'a UInt32Array,
    token: &'a UInt16Array,
    pred: &'a [u8],
    target: &'a [u8],
    log_p_true: &'a Float32Array,
    p_max: Option<&'a [f32]>,
    sampled_mass: Option<(&'a Float32Array, &'a Float32Array)>,
}

impl<'a> BatchView<'a> {
    fn new(
        path: &Path,
        batch: &'a RecordBatch,
        has_p_max: bool,
        mass_samples: Option<u32>,
    ) -> Result<BatchView<'a>, DiagnoseError> {
        let p_max = if has_p_max {
            let list = fixed_list(path, batch, columns::P_MAX)?;
            let values = list
                .values()
                .as_primitive_opt::<Float32Type>()
                .filter(|v| v.null_count() == 0)
                .ok_or_else(|| bad_column(path, columns::P_MAX, "fixed_size_list<float32, 75>"))?;
            let values: &[f32] = values.values().as_ref();
            if values.len() < batch.num_rows() * STATE_LEN {
                return Err(bad_column(
                    path,
                    columns::P_MAX,
                    "fixed_size_list<float32, 75>",
                ));
            }
            Some(values)
        } else {
            None
        };
        let nullable_f32 = |name: &str| {
            batch
                .column_by_name(name)
                .and_then(|a| a.as_primitive_opt::<Float32Type>())
                .ok_or_else(|| {
                    DiagnoseError::format(path, format!("column `{name}` is not float32"))
                })
        };
        let sampled_mass = match mass_samples {
            Some(_) => Some((
                nullable_f32(columns::VALID_MASS)?,
                nullable_f32(columns::AFFORD_MASS)?,
            )),
            None => None,
        };
        Ok(BatchView {
            game_id: column(path, batch, columns::GAME_ID, "utf8", |a| {
                a.as_string_opt::<i32>()
            })?,
            t: column(path, batch, columns::T, "uint32", |a| {
                a.as_primitive_opt::<UInt32Type>()
            })?,
            token: column(path, batch, columns::TOKEN, "uint16", |a| {
                a.as_primitive_opt::<UInt16Type>()
            })?,
            pred: label_values(path, batch, columns::PRED)?,
            target: label_values(path, batch, columns::TARGET)?,
            log_p_true: column(path, batch, columns::LOG_P_TRUE, "float32", |a| {
                a.as_primitive_opt::<Float32Type>()
            })?,
            p_max,
            sampled_mass,
        })
    }

    /// Appends row `row` to `game`, checking its step and labels.
    fn append(&self, path: &Path, row: usize, game: &mut GameRows) -> Result<(), DiagnoseError> {
        let t = self.t.value(row);
        let expected = game.tokens.len();
        if usize::try_from(t).ok() != Some(expected) {
            let message = if expected == 0 {
                "the game's first row is not t = 0".to_owned()
            } else {
                format!("expected t = {expected} after t = {}", expected - 1)
            };
            return Err(DiagnoseError::game(path, &game.game_id, t, message));
        }
        let span = row * STATE_LEN..(row + 1) * STATE_LEN;
        for (name, labels) in [
            (columns::PRED, &self.pred[span.clone()]),
            (columns::TARGET, &self.target[span.clone()]),
        ] {
            if let Some((j, &value)) = labels
                .iter()
                .enumerate()
                .find(|&(j, &v)| u16::from(v) >= LABEL_CLASSES[j])
            {
                return Err(DiagnoseError::game(
                    path,
                    &game.game_id,
                    t,
                    format!(
                        "`{name}` label {j} is {value}, but that label has {} classes",
                        LABEL_CLASSES[j]
                    ),
                ));
            }
        }
        game.tokens.push(self.token.value(row));
        game.pred.extend_from_slice(&self.pred[span.clone()]);
        game.target.extend_from_slice(&self.target[span.clone()]);
        game.log_p_true.push(self.log_p_true.value(row));
        if let (Some(values), Some(out)) = (self.p_max, game.p_max.as_mut()) {
            out.extend_from_slice(&values[span]);
        }
        if let (Some(columns), Some(out)) = (self.sampled_mass, game.sampled_mass.as_mut()) {
            out.push(mass_pair(path, columns, row, &game.game_id, t)?);
        }
        Ok(())
    }
}

/// Row `row`'s valid and afford mass (NaN for a null), each checked to lie in 0..=1.
fn mass_pair(
    path: &Path,
    (valid, afford): (&Float32Array, &Float32Array),
    row: usize,
    game_id: &str,
    t: u32,
) -> Result<(f32, f32), DiagnoseError> {
    let value = |array: &Float32Array, name: &str| {
        if array.is_null(row) {
            return Ok(f32::NAN);
        }
        let v = array.value(row);
        if (0.0..=1.0).contains(&v) {
            Ok(v)
        } else {
            let message = format!("`{name}` is {v}, outside 0..=1");
            Err(DiagnoseError::game(path, game_id, t, message))
        }
    };
    Ok((
        value(valid, columns::VALID_MASS)?,
        value(afford, columns::AFFORD_MASS)?,
    ))
}

fn bad_column(path: &Path, name: &str, expected: &str) -> DiagnoseError {
    DiagnoseError::format(
        path,
        format!("column `{name}` is not {expected} without nulls"),
    )
}

/// Column `name` of `batch` as the array type `cast` picks, without nulls.
fn column<'a, T: Array + 'a>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
    expected: &str,
    cast: impl Fn(&'a dyn Array) -> Option<&'a T>,
) -> Result<&'a T, DiagnoseError> {
    batch
        .column_by_name(name)
        .and_then(|a| cast(a.as_ref()))
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| bad_column(path, name, expected))
}

/// A `fixed_size_list<_, 75>` column without nulls.
fn fixed_list<'a>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a FixedSizeListArray, DiagnoseError> {
    batch
        .column_by_name(name)
        .and_then(|a| a.as_fixed_size_list_opt())
        .filter(|a| a.null_count() == 0 && a.value_length() as usize == STATE_LEN)
        .ok_or_else(|| bad_column(path, name, "fixed_size_list<_, 75>"))
}

/// The flat `rows × 75` labels of a `fixed_size_list<uint8, 75>` column.
fn label_values<'a>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a [u8], DiagnoseError> {
    let list = fixed_list(path, batch, name)?;
    let values: &UInt8Array = list
        .values()
        .as_primitive_opt::<UInt8Type>()
        .filter(|v| v.null_count() == 0)
        .ok_or_else(|| bad_column(path, name, "fixed_size_list<uint8, 75>"))?;
    let values = values.values().as_ref();
    if values.len() < batch.num_rows() * STATE_LEN {
        return Err(bad_column(path, name, "fixed_size_list<uint8, 75>"));
    }
    Ok(values)
}
