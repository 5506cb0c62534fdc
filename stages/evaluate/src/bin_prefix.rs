//! The `bin_prefix` stage: ExactState and Labelwise by prefix bin (spec A.5), aggregated from an
//! evaluate artifact's `timesteps.parquet`.
//!
//! * **Input** `evaluate`: an evaluate artifact.
//! * **Param** `bin` (20): bin `k` holds steps `t ∈ [bin·k, bin·k + bin)`, t = 0 being the start
//!   position.
//! * **Output** `out`: `bins.parquet` (`bin` u32, `start` u32, `end` u32 exclusive, `steps` u64,
//!   `exact_state` f64, `labelwise` f64), one row per non-empty bin in order, and
//!   `summary.json` ([`BinPrefixSummary`]).
//!
//! The aggregation streams the three columns it needs (`t`, `n_correct`, `exact`) a record
//! batch at a time and keeps integer counts per bin (valid steps, exact steps, correct labels);
//! the ratios are [`cwm_models::BinCounts`]'s, so a bin's figures equal the ones the metrics
//! accumulator gives for the same steps. (Why not a SQL engine: `docs/query-engine.md`.) `end` is always
//! `start + bin`, also for the last bin, which may hold fewer steps. Bins with no step are
//! absent (the reference reports them with n = 0).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::BTreeMap;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, UInt8Array, UInt32Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use cwm_models::BinCounts;
use cwm_stage::{
    InputSpec, InputsDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError, StageKind,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use serde::{Deserialize, Serialize};

use crate::EvalError;
use crate::evaluate::EvaluateSummary;
use crate::tables::{SUMMARY_FILE, TIMESTEPS_FILE, temp_name, write_atomically};

/// File name of the bins table.
pub const BINS_FILE: &str = "bins.parquet";

/// One prefix bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefixBin {
    /// Bin index `k`.
    pub bin: u32,
    /// First step of the bin (`bin · k`).
    pub start: u32,
    /// One past the last step of the bin (`bin · k + bin`).
    pub end: u32,
    /// Valid steps in the bin.
    pub steps: u64,
    /// ExactState restricted to the bin.
    pub exact_state: f64,
    /// Labelwise accuracy restricted to the bin.
    pub labelwise: f64,
}

/// `summary.json` of a bin_prefix artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinPrefixSummary {
    /// Always `"bin_prefix"`.
    pub kind: String,
    /// The split label, from the evaluate summary.
    pub split: String,
    /// The model family, from the evaluate summary.
    pub arch: String,
    /// The model size, from the evaluate summary.
    pub size: String,
    /// The parameter count, from the evaluate summary.
    pub params: u64,
    /// The bin width.
    pub bin: u32,
    /// The evaluate artifact's hash, or null.
    pub evaluate_hash: Option<String>,
    /// The non-empty bins in order.
    pub bins: Vec<PrefixBin>,
}

/// Aggregates the `timesteps.parquet` at `timesteps` into prefix bins of width `bin`: reads
/// only the `t`, `n_correct` and `exact` columns, a record batch at a time, and keeps one
/// counter per bin.
///
/// # Errors
/// [`EvalError::Invalid`] when `bin` is 0; [`EvalError::Format`] / [`EvalError::Parquet`] when
/// the file is missing, not Parquet, or lacks a column.
pub fn prefix_bins(timesteps: &Path, bin: u32) -> Result<Vec<PrefixBin>, EvalError> {
    if bin == 0 {
        return Err(EvalError::Invalid("bin must be positive".into()));
    }
    if !timesteps.is_file() {
        return Err(EvalError::format(timesteps, "not found"));
    }
    let file = std::fs::File::open(timesteps).map_err(|e| EvalError::io(timesteps, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| EvalError::parquet(timesteps, e))?;
    let wanted = ["t", "n_correct", "exact"];
    let schema = builder.parquet_schema();
    let mut indices = Vec::new();
    for name in wanted {
        let index = schema
            .columns()
            .iter()
            .position(|c| c.path().string() == name)
            .ok_or_else(|| EvalError::format(timesteps, format!("no column {name:?}")))?;
        indices.push(index);
    }
    let mask = ProjectionMask::leaves(schema, indices);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| EvalError::parquet(timesteps, e))?;
    let mut counts: BTreeMap<u32, BinCounts> = BTreeMap::new();
    for batch in reader {
        let batch = batch.map_err(|e| EvalError::arrow(timesteps, e))?;
        let t = typed::<UInt32Array>(timesteps, &batch, "t")?;
        let n_correct = typed::<UInt8Array>(timesteps, &batch, "n_correct")?;
        let exact = typed::<BooleanArray>(timesteps, &batch, "exact")?;
        if t.null_count() + n_correct.null_count() + exact.null_count() > 0 {
            return Err(EvalError::format(
                timesteps,
                "null values in t, n_correct or exact",
            ));
        }
        for row in 0..batch.num_rows() {
            let entry = counts.entry(t.value(row) / bin).or_default();
            entry.n_steps += 1;
            entry.n_exact += u64::from(exact.value(row));
            entry.n_correct += u64::from(n_correct.value(row));
        }
    }
    Ok(counts
        .into_iter()
        .map(|(index, counts)| {
            let start = index * bin;
            PrefixBin {
                bin: index,
                start,
                end: start.saturating_add(bin),
                steps: counts.n_steps,
                exact_state: counts.full_exact(),
                labelwise: counts.partial_exact(),
            }
        })
        .collect())
}

fn typed<'a, T: 'static>(
    path: &Path,
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a T, EvalError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| {
            EvalError::format(
                path,
                format!("column {name:?} is missing or of another type"),
            )
        })
}

/// Writes `bins` as `bins.parquet` at `path` (through a temporary name).
///
/// # Errors
/// [`EvalError`] on write errors.
pub fn write_bins(path: &Path, bins: &[PrefixBin]) -> Result<(), EvalError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("bin", DataType::UInt32, false),
        Field::new("start", DataType::UInt32, false),
        Field::new("end", DataType::UInt32, false),
        Field::new("steps", DataType::UInt64, false),
        Field::new("exact_state", DataType::Float64, false),
        Field::new("labelwise", DataType::Float64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from_iter_values(bins.iter().map(|b| b.bin))),
        Arc::new(UInt32Array::from_iter_values(bins.iter().map(|b| b.start))),
        Arc::new(UInt32Array::from_iter_values(bins.iter().map(|b| b.end))),
        Arc::new(UInt64Array::from_iter_values(bins.iter().map(|b| b.steps))),
        Arc::new(Float64Array::from_iter_values(
            bins.iter().map(|b| b.exact_state),
        )),
        Arc::new(Float64Array::from_iter_values(
            bins.iter().map(|b| b.labelwise),
        )),
    ];
    let batch =
        RecordBatch::try_new(schema.clone(), columns).map_err(|e| EvalError::arrow(path, e))?;
    let tmp = temp_name(path);
    let file = std::fs::File::create(&tmp).map_err(|e| EvalError::io(&tmp, e))?;
    let mut writer =
        ArrowWriter::try_new(file, schema, None).map_err(|e| EvalError::parquet(path, e))?;
    writer
        .write(&batch)
        .map_err(|e| EvalError::parquet(path, e))?;
    writer.close().map_err(|e| EvalError::parquet(path, e))?;
    std::fs::rename(&tmp, path).map_err(|e| EvalError::io(path, e))
}

/// Reads the `summary.json` of an evaluate artifact.
///
/// # Errors
/// [`EvalError`] when it is missing or not an evaluate summary.
pub fn read_evaluate_summary(dir: &Path) -> Result<EvaluateSummary, EvalError> {
    let path: PathBuf = dir.join(SUMMARY_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| EvalError::io(&path, e))?;
    let summary: EvaluateSummary =
        serde_json::from_str(&text).map_err(|e| EvalError::format(&path, e.to_string()))?;
    if summary.kind != "evaluate" {
        return Err(EvalError::format(
            &path,
            format!("kind is {:?}, expected \"evaluate\"", summary.kind),
        ));
    }
    Ok(summary)
}

/// Bins the evaluate artifact at `evaluate_dir` and writes `bins.parquet` and `summary.json`
/// into `out_dir`.
///
/// # Errors
/// [`EvalError`] when the artifact is incomplete or a file cannot be written.
pub fn bin_prefix(
    evaluate_dir: &Path,
    out_dir: &Path,
    bin: u32,
    evaluate_hash: Option<String>,
) -> Result<BinPrefixSummary, EvalError> {
    let source = read_evaluate_summary(evaluate_dir)?;
    let bins = prefix_bins(&evaluate_dir.join(TIMESTEPS_FILE), bin)?;
    std::fs::create_dir_all(out_dir).map_err(|e| EvalError::io(out_dir, e))?;
    write_bins(&out_dir.join(BINS_FILE), &bins)?;
    let summary = BinPrefixSummary {
        kind: "bin_prefix".to_owned(),
        split: source.split,
        arch: source.arch,
        size: source.size,
        params: source.params,
        bin,
        evaluate_hash,
        bins,
    };
    let mut text = serde_json::to_string_pretty(&summary)
        .map_err(|e| EvalError::Invalid(format!("cannot serialize the summary: {e}")))?;
    text.push('\n');
    write_atomically(&out_dir.join(SUMMARY_FILE), &text)?;
    Ok(summary)
}

/// The `bin_prefix` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct BinPrefixStage;

const PARAMS: &[ParamSpec] = &[ParamSpec::with_default(
    "bin",
    ParamType::Int,
    ParamDefault::Int(20),
    "bin width in steps: bin k holds t in [bin*k, bin*k + bin)",
)];

const INPUTS: &[InputSpec] = &[InputSpec::one("evaluate", "an evaluate artifact")];

impl StageKind for BinPrefixStage {
    fn name(&self) -> &'static str {
        "bin_prefix"
    }

    fn doc(&self) -> &'static str {
        "ExactState and Labelwise by prefix bin of an evaluate artifact's steps"
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[
            &cwm_stage::fingerprint_of_files(
                crate::FILE_FINGERPRINTS,
                &[
                    "Cargo.toml",
                    "src/lib.rs",
                    "src/error.rs",
                    "src/bin_prefix.rs",
                    "src/tables.rs",
                    "src/evaluate.rs",
                ],
            ),
            cwm_models::SOURCE_FINGERPRINT,
        ])
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    /// Extra params are labels (e.g. the matrix keys of the evaluations it bins).
    fn accepts_extra_params(&self) -> bool {
        true
    }

    fn inputs(&self) -> InputsDecl {
        InputsDecl::Named(INPUTS)
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let bin = ctx.params().uint("bin")?;
        let bin = u32::try_from(bin).ok().filter(|&b| b > 0).ok_or_else(|| {
            StageError::Param(format!("bin must be in 1..=4294967295, got {bin}"))
        })?;
        let hash = ctx.input_list("evaluate").first().map(|a| a.hash.clone());
        let summary = bin_prefix(ctx.input("evaluate")?, ctx.output("out")?, bin, hash)?;
        ctx.log().line(format!(
            "{} bins of {} steps over {} steps",
            summary.bins.len(),
            bin,
            summary.bins.iter().map(|b| b.steps).sum::<u64>()
        ));
        Ok(())
    }
}
