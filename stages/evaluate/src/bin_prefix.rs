//! The `bin_prefix` stage: ExactState and Labelwise by prefix bin (spec A.5), aggregated from an
//! evaluate artifact's `timesteps.parquet`.
//!
//! * **Input** `evaluate`: an evaluate artifact.
//! * **Param** `bin` (20): bin `k` holds steps `t ∈ [bin·k, bin·k + bin)`, t = 0 being the start
//!   position.
//! * **Output** `out`: `bins.parquet` (`bin` u32, `start` u32, `end` u32 exclusive, `steps` u64,
//!   `exact_state` f64, `labelwise` f64), one row per non-empty bin in order, and
//!   `summary.json` ([`BinPrefixSummary`], of [`cwm_formats::bins`]).
//!
//! The aggregation is a query ([`PREFIX_BINS_SQL`]) that DataFusion runs over the Parquet file:
//! it scans the three columns it needs (`t`, `n_correct`, `exact`) and counts, per bin, valid
//! steps, exact steps and correct labels as integers; the ratios are
//! [`cwm_models::BinCounts`]'s, so a bin's figures equal the ones the metrics accumulator gives
//! for the same steps. (Why DataFusion: `docs/query-engine.md`.) `end` is always
//! `start + bin`, also for the last bin, which may hold fewer steps. Bins with no step are
//! absent (the reference reports them with n = 0).

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Float64Array, Int64Array, RecordBatch, UInt32Array, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use cwm_formats::Versioned;
use cwm_models::BinCounts;
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError,
    StageKind,
};
use parquet::arrow::ArrowWriter;

use crate::EvalError;
use crate::evaluate::EvaluateSummary;
use crate::tables::{SUMMARY_FILE, TIMESTEPS_FILE};

pub use cwm_formats::bins::{BINS_FILE, BinPrefixSummary, PrefixBin};

/// The aggregation `bin_prefix` runs, written as SQL for the reader (`{bin}` is the bin width);
/// [`prefix_bins`] builds the same plan with DataFusion's DataFrame API. The three
/// `COUNT(column)`s guard against nulls: each must equal `steps`.
pub const PREFIX_BINS_SQL: &str = "SELECT CAST(t AS BIGINT) / {bin} AS k, COUNT(*) AS steps, \
SUM(CAST(exact AS BIGINT)) AS exact_steps, SUM(CAST(n_correct AS BIGINT)) AS correct, \
COUNT(t) AS t_values, COUNT(exact) AS exact_values, COUNT(n_correct) AS correct_values \
FROM timesteps GROUP BY k ORDER BY k";

/// Aggregates the `timesteps.parquet` at `timesteps` into prefix bins of width `bin` with
/// DataFusion ([`PREFIX_BINS_SQL`]): the scan reads only the `t`, `n_correct` and `exact`
/// columns, row group by row group, on one thread, and the engine keeps one group per bin.
///
/// # Errors
/// [`EvalError::Invalid`] when `bin` is 0; [`EvalError::Format`] when the file is missing or
/// has null values in those columns; [`EvalError::Query`] when it is not Parquet or lacks a
/// column (the message names the column).
pub fn prefix_bins(timesteps: &Path, bin: u32) -> Result<Vec<PrefixBin>, EvalError> {
    if bin == 0 {
        return Err(EvalError::Invalid("bin must be positive".into()));
    }
    if !timesteps.is_file() {
        return Err(EvalError::format(timesteps, "not found"));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| EvalError::io(timesteps, e))?;
    let rows = runtime
        .block_on(query_bins(timesteps, bin))
        .map_err(|e| EvalError::Query {
            path: timesteps.to_path_buf(),
            message: e.to_string(),
        })?;
    let mut bins = Vec::with_capacity(rows.len());
    for row in rows {
        if [row.t_values, row.exact_values, row.correct_values] != [row.steps; 3] {
            return Err(EvalError::format(
                timesteps,
                "null values in t, n_correct or exact",
            ));
        }
        let (Ok(index), Ok(steps), Ok(exact), Ok(correct)) = (
            u32::try_from(row.k),
            u64::try_from(row.steps),
            u64::try_from(row.exact_steps),
            u64::try_from(row.correct),
        ) else {
            return Err(EvalError::format(
                timesteps,
                format!("bin row out of range: {row:?}"),
            ));
        };
        let counts = BinCounts {
            n_steps: steps,
            n_exact: exact,
            n_correct: correct,
        };
        let start = index.saturating_mul(bin);
        bins.push(PrefixBin {
            bin: index,
            start,
            end: start.saturating_add(bin),
            steps,
            exact_state: counts.full_exact(),
            labelwise: counts.partial_exact(),
        });
    }
    Ok(bins)
}

/// One row of [`PREFIX_BINS_SQL`]'s result, in the query's column order.
#[derive(Debug)]
struct BinRow {
    k: i64,
    steps: i64,
    exact_steps: i64,
    correct: i64,
    t_values: i64,
    exact_values: i64,
    correct_values: i64,
}

/// The result columns of [`PREFIX_BINS_SQL`], in order.
const RESULT_COLUMNS: [&str; 7] = [
    "k",
    "steps",
    "exact_steps",
    "correct",
    "t_values",
    "exact_values",
    "correct_values",
];

/// Runs [`PREFIX_BINS_SQL`] over the file at `timesteps` on a single partition.
async fn query_bins(timesteps: &Path, bin: u32) -> datafusion::error::Result<Vec<BinRow>> {
    use datafusion::error::DataFusionError;
    use datafusion::functions_aggregate::expr_fn::{count, sum};
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext, cast, col, lit};

    // A `file://` URL rather than a path: DataFusion reads `*`, `?` or `[` in a path as a glob.
    let absolute = std::path::absolute(timesteps)?;
    let url = url::Url::from_file_path(&absolute).map_err(|()| {
        DataFusionError::Execution(format!("{} is not a file path", absolute.display()))
    })?;
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    let table = ctx
        .read_parquet(url.as_str(), ParquetReadOptions::default())
        .await?;
    let wide = |name: &str| cast(col(name), DataType::Int64);
    let bins = table
        .aggregate(
            vec![(wide("t") / lit(i64::from(bin))).alias("k")],
            vec![
                count(lit(1_i64)).alias("steps"),
                sum(wide("exact")).alias("exact_steps"),
                sum(wide("n_correct")).alias("correct"),
                count(col("t")).alias("t_values"),
                count(col("exact")).alias("exact_values"),
                count(col("n_correct")).alias("correct_values"),
            ],
        )?
        .sort(vec![col("k").sort(true, false)])?;
    let mut rows = Vec::new();
    for batch in bins.collect().await? {
        let mut columns = Vec::with_capacity(RESULT_COLUMNS.len());
        for name in RESULT_COLUMNS {
            let array = batch
                .column_by_name(name)
                .ok_or_else(|| DataFusionError::Internal(format!("no result column {name:?}")))?;
            let array = arrow::compute::cast(array, &DataType::Int64)?;
            let array = array
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .ok_or_else(|| DataFusionError::Internal(format!("{name:?} is not Int64")))?;
            columns.push(array);
        }
        for row in 0..batch.num_rows() {
            // A null here (a SUM over no value) is caught by the COUNT checks of the caller.
            let value = |i: usize| {
                let array = &columns[i];
                if array.is_null(row) {
                    0
                } else {
                    array.value(row)
                }
            };
            rows.push(BinRow {
                k: value(0),
                steps: value(1),
                exact_steps: value(2),
                correct: value(3),
                t_values: value(4),
                exact_values: value(5),
                correct_values: value(6),
            });
        }
    }
    Ok(rows)
}

/// Writes `bins` as `bins.parquet` at `path` ([`cwm_formats::fs::write_atomic`]).
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
    let mut writer =
        ArrowWriter::try_new(Vec::new(), schema, None).map_err(|e| EvalError::parquet(path, e))?;
    writer
        .write(&batch)
        .map_err(|e| EvalError::parquet(path, e))?;
    let bytes = writer
        .into_inner()
        .map_err(|e| EvalError::parquet(path, e))?;
    cwm_formats::fs::write_atomic(path, &bytes).map_err(|e| EvalError::io(path, e))
}

/// Reads the `summary.json` of an evaluate artifact.
///
/// # Errors
/// [`EvalError`] when it is missing or not an evaluate summary.
pub fn read_evaluate_summary(dir: &Path) -> Result<EvaluateSummary, EvalError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: EvaluateSummary = cwm_formats::read_json(&path)?;
    if summary.kind != cwm_formats::evaluate::KIND {
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
        version: BinPrefixSummary::VERSION,
        kind: cwm_formats::bins::KIND.to_owned(),
        split: source.split,
        arch: source.arch,
        size: source.size,
        params: source.params,
        bin,
        evaluate_hash,
        bins,
    };
    cwm_formats::write_json(&out_dir.join(SUMMARY_FILE), &summary)?;
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

const DECL: KindDecl = KindDecl::new(
    "bin_prefix",
    "ExactState and Labelwise by prefix bin of an evaluate artifact's steps",
)
.params(PARAMS)
// Extra params are labels (e.g. the matrix keys of the evaluations it bins).
.extra_params()
.inputs(InputsDecl::Named(INPUTS));

impl StageKind for BinPrefixStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
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
