//! The tables the stage writes: `steps.parquet` and `val.parquet`, each written whole or not at
//! all ([`cwm_formats::fs::write_atomic`]). The summary and the training configuration are
//! [`cwm_formats::train`]'s.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

use crate::TrainError;

/// Name of the per-step log table.
pub const STEPS_FILE: &str = "steps.parquet";
/// Name of the validation table.
pub const VAL_FILE: &str = "val.parquet";
pub use cwm_formats::train::SUMMARY_FILE;
/// Name of the final checkpoint directory.
pub const CHECKPOINT_DIR: &str = "checkpoint";

/// One logged training step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRow {
    /// Global step (batches seen, skipped ones included).
    pub step: u64,
    /// The epoch the batch belongs to (0-based).
    pub epoch: u32,
    /// The batch's training loss (non-finite for a skipped batch).
    pub loss: f64,
    /// The learning rate the step used (or would have used).
    pub lr: f64,
    /// Global gradient norm before clipping (NaN when the loss was non-finite: no backward).
    pub grad_norm: f64,
    /// Valid tokens per second since the previous logged row.
    pub tokens_per_s: f64,
    /// Whether the batch was skipped by the NaN guard.
    pub skipped: bool,
}

/// One validation: a row of `val.parquet`, and the summary's `final_val` and `best_val`.
pub use cwm_formats::train::ValMetrics as ValRow;

fn write_batch(path: &Path, batch: RecordBatch) -> Result<(), TrainError> {
    let parquet_err = |e: &dyn std::fmt::Display| TrainError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let mut writer =
        ArrowWriter::try_new(Vec::new(), batch.schema(), None).map_err(|e| parquet_err(&e))?;
    writer.write(&batch).map_err(|e| parquet_err(&e))?;
    let bytes = writer.into_inner().map_err(|e| parquet_err(&e))?;
    cwm_formats::fs::write_atomic(path, &bytes).map_err(|e| TrainError::io(path, e))
}

/// Writes `steps.parquet` (`step` u64, `epoch` u32, `loss`, `lr`, `grad_norm`, `tokens_per_s`
/// f64, `skipped` bool).
///
/// # Errors
/// [`TrainError`] when the file cannot be written.
pub fn write_steps(path: &Path, rows: &[StepRow]) -> Result<(), TrainError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("step", DataType::UInt64, false),
        Field::new("epoch", DataType::UInt32, false),
        Field::new("loss", DataType::Float64, false),
        Field::new("lr", DataType::Float64, false),
        Field::new("grad_norm", DataType::Float64, false),
        Field::new("tokens_per_s", DataType::Float64, false),
        Field::new("skipped", DataType::Boolean, false),
    ]));
    let f64s = |f: fn(&StepRow) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.step))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.epoch))),
        f64s(|r| r.loss),
        f64s(|r| r.lr),
        f64s(|r| r.grad_norm),
        f64s(|r| r.tokens_per_s),
        Arc::new(BooleanArray::from(
            rows.iter().map(|r| r.skipped).collect::<Vec<_>>(),
        )),
    ];
    let batch = RecordBatch::try_new(schema, columns).map_err(|e| TrainError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_batch(path, batch)
}

/// Writes `val.parquet` (`step` u64, `loss`, `labelwise`, `exact_state`, `trajectory` f64).
///
/// # Errors
/// [`TrainError`] when the file cannot be written.
pub fn write_val(path: &Path, rows: &[ValRow]) -> Result<(), TrainError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("step", DataType::UInt64, false),
        Field::new("loss", DataType::Float64, false),
        Field::new("labelwise", DataType::Float64, false),
        Field::new("exact_state", DataType::Float64, false),
        Field::new("trajectory", DataType::Float64, false),
    ]));
    let f64s = |f: fn(&ValRow) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.step))),
        f64s(|r| r.loss),
        f64s(|r| r.labelwise),
        f64s(|r| r.exact_state),
        f64s(|r| r.trajectory),
    ];
    let batch = RecordBatch::try_new(schema, columns).map_err(|e| TrainError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_batch(path, batch)
}
