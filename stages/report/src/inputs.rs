//! Reading the input artifacts: which kind each one is and the files the tables need, read as
//! the types of [`cwm_formats`] their writers write.
//!
//! An artifact is recognised by its producer's kind (`tokenize`, `train`, `select`,
//! `evaluate`, `bin_prefix`, `diagnose`, `probe`, `markov`, `edit`); an artifact of another kind (a `command` stage that wrote a
//! compatible artifact, say) is recognised by the `"kind"` field of its `summary.json`, by a
//! `selected.json` or by a `coverage.json`. Anything else is listed in `index.md` as ignored.
//! A recognised artifact whose files are missing or malformed fails the report with the file
//! and field named. A train artifact's `val.parquet` is optional (a run without it has no
//! training curve), but a malformed one fails the report too.

use std::path::Path;

use arrow::array::{Array, AsArray, PrimitiveArray, RecordBatch};
use arrow::datatypes::{ArrowPrimitiveType, Float64Type, UInt64Type};

use cwm_formats::bins::BinPrefixSummary;
use cwm_formats::diagnose::DiagnoseSummary;
use cwm_formats::edit::EditSummary;
use cwm_formats::evaluate::EvaluateSummary;
use cwm_formats::markov::MarkovSummary;
use cwm_formats::probe::ProbeSummary;
use cwm_formats::select::{Choice, SELECTED_FILE, Selection};
use cwm_formats::tokenize::{COVERAGE_FILE, Coverage as CoverageFile};
use cwm_formats::train::{ScheduleKind, TrainSummary};
use cwm_models::{Family, Size};
use cwm_stage::InputArtifact;
use serde_json::Value;

pub use cwm_formats::bins::PrefixBin;
pub use cwm_formats::train::ValMetrics;

use crate::error::ReportError;
use crate::table::Source;

/// The summary file of train, evaluate and bin_prefix artifacts.
const SUMMARY_FILE: &str = "summary.json";
/// A train artifact's validation history, one row per validation (the train stage's
/// `output::VAL_FILE`).
pub const VAL_FILE: &str = "val.parquet";

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The producing instance.
    pub instance: String,
    /// The kind the report recognised it as.
    pub kind: String,
    /// The artifact's content hash.
    pub hash: String,
}

impl Origin {
    /// As a table source.
    pub fn source(&self) -> Source {
        Source {
            instance: self.instance.clone(),
            kind: self.kind.clone(),
            hash: self.hash.clone(),
        }
    }
}

/// A `tokenize` artifact's `coverage.json` (Table 3).
#[derive(Debug, Clone, PartialEq)]
pub struct Coverage {
    /// The artifact.
    pub origin: Origin,
    /// The file.
    pub file: CoverageFile,
}

/// A `train` artifact's `summary.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainRun {
    /// The artifact.
    pub origin: Origin,
    /// Family (the summary's `arch`).
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: TrainSummary,
    /// Every validation of the run in file order (`val.parquet`); empty when the artifact has
    /// no such file.
    pub val_history: Vec<ValMetrics>,
}

impl TrainRun {
    /// The validation the report ranks runs by: the best one, else the final one.
    pub fn val(&self) -> Option<&ValMetrics> {
        self.summary
            .best_val
            .as_ref()
            .or(self.summary.final_val.as_ref())
    }

    /// First-stage sweep runs: a constant learning rate, after a linear warm-up (schedule
    /// `constant`) or without one (`none`).
    pub fn is_first_stage(&self) -> bool {
        matches!(
            self.summary.hparams.schedule.kind,
            ScheduleKind::None | ScheduleKind::Constant
        )
    }

    /// Second-stage runs: cosine decay.
    pub fn is_cosine(&self) -> bool {
        self.summary.hparams.schedule.kind == ScheduleKind::Cosine
    }
}

/// One choice of a `select` artifact's `selected.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectChoice {
    /// The select artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The choice as recorded.
    pub choice: Choice,
    /// Its validation metrics (`step` is 0: selected.json records none).
    pub val: ValMetrics,
}

/// An `evaluate` artifact's `summary.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalResult {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: EvaluateSummary,
}

/// A `bin_prefix` artifact's `summary.json`, its bins sorted by their first step.
#[derive(Debug, Clone, PartialEq)]
pub struct BinResult {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: BinPrefixSummary,
}

/// A `diagnose` artifact's `summary.json` (the beyond-the-paper tables).
#[derive(Debug, Clone, PartialEq)]
pub struct DiagnoseResult {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: DiagnoseSummary,
}

/// A `probe` artifact's `summary.json` (E9).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRun {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: ProbeSummary,
}

/// A `markov` artifact's `summary.json` (E8, E10).
#[derive(Debug, Clone, PartialEq)]
pub struct MarkovRun {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: MarkovSummary,
}

/// An `edit` artifact's `summary.json` (E11).
#[derive(Debug, Clone, PartialEq)]
pub struct EditRun {
    /// The artifact.
    pub origin: Origin,
    /// Family.
    pub family: Family,
    /// Size.
    pub size: Size,
    /// The file.
    pub summary: EditSummary,
}

/// Everything the report read, sorted by instance name within each kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Tokenize coverage.
    pub coverage: Vec<Coverage>,
    /// Train runs.
    pub train: Vec<TrainRun>,
    /// Select choices (of every select artifact).
    pub select: Vec<SelectChoice>,
    /// Evaluations.
    pub evaluate: Vec<EvalResult>,
    /// Prefix bins.
    pub bins: Vec<BinResult>,
    /// Diagnostics.
    pub diagnose: Vec<DiagnoseResult>,
    /// Layer probes.
    pub probes: Vec<ProbeRun>,
    /// Path-independence tests.
    pub markov: Vec<MarkovRun>,
    /// State-editing experiments.
    pub edits: Vec<EditRun>,
    /// Every input artifact with the kind it was recognised as (`None`: ignored).
    pub listed: Vec<(Origin, Option<&'static str>)>,
}

/// The kinds the report reads.
pub const KNOWN_KINDS: [&str; 9] = [
    "tokenize",
    "train",
    "select",
    "evaluate",
    "bin_prefix",
    "diagnose",
    "probe",
    "markov",
    "edit",
];

/// Which kind of artifact this is, or `None` when the report does not use it.
pub fn recognise(artifact: &InputArtifact) -> Option<&'static str> {
    if let Some(kind) = KNOWN_KINDS
        .iter()
        .copied()
        .find(|k| *k == artifact.producer_kind)
    {
        return Some(kind);
    }
    let summary = artifact.path.join(SUMMARY_FILE);
    if let Ok(text) = std::fs::read_to_string(&summary)
        && let Ok(value) = serde_json::from_str::<Value>(&text)
        && let Some(kind) = value.get("kind").and_then(Value::as_str)
        && let Some(known) = KNOWN_KINDS.iter().copied().find(|k| *k == kind)
    {
        return Some(known);
    }
    if artifact.path.join(SELECTED_FILE).is_file() {
        return Some("select");
    }
    if artifact.path.join(COVERAGE_FILE).is_file() {
        return Some("tokenize");
    }
    None
}

/// Reads every artifact. Order within each kind follows the instance name, then the hash.
///
/// # Errors
/// [`ReportError`] naming the file and field of the first malformed artifact.
pub fn read_inputs(artifacts: &[InputArtifact]) -> Result<Inputs, ReportError> {
    let mut sorted: Vec<&InputArtifact> = artifacts.iter().collect();
    sorted.sort_by(|a, b| (&a.producer, &a.hash).cmp(&(&b.producer, &b.hash)));
    sorted.dedup_by(|a, b| a.hash == b.hash && a.producer == b.producer);
    let mut inputs = Inputs::default();
    for artifact in sorted {
        let kind = recognise(artifact);
        let origin = Origin {
            instance: artifact.producer.clone(),
            kind: kind.unwrap_or(artifact.producer_kind.as_str()).to_owned(),
            hash: artifact.hash.clone(),
        };
        inputs.listed.push((origin.clone(), kind));
        let dir = &artifact.path;
        match kind {
            Some("tokenize") => inputs.coverage.push(read_coverage(origin, dir)?),
            Some("train") => inputs.train.push(read_train(origin, dir)?),
            Some("select") => inputs.select.extend(read_select(&origin, dir)?),
            Some("evaluate") => inputs.evaluate.push(read_evaluate(origin, dir)?),
            Some("bin_prefix") => inputs.bins.push(read_bins(origin, dir)?),
            Some("diagnose") => inputs.diagnose.push(read_diagnose(origin, dir)?),
            Some("probe") => inputs.probes.push(read_probe(origin, dir)?),
            Some("markov") => inputs.markov.push(read_markov(origin, dir)?),
            Some("edit") => inputs.edits.push(read_edit(origin, dir)?),
            _ => {}
        }
    }
    Ok(inputs)
}

/// `name` as a family or a size, or an error naming `field` of the file at `path`.
fn parse_name<T>(path: &Path, field: &str, name: &str) -> Result<T, ReportError>
where
    T: std::str::FromStr<Err = cwm_models::ModelError>,
{
    name.parse()
        .map_err(|e: cwm_models::ModelError| ReportError::field(path, field, e.to_string()))
}

/// An error unless `kind` is `expected`.
fn check_kind(path: &Path, kind: &str, expected: &str) -> Result<(), ReportError> {
    if kind == expected {
        Ok(())
    } else {
        Err(ReportError::field(
            path,
            "kind",
            format!("expected {expected:?}, found {kind:?}"),
        ))
    }
}

fn read_coverage(origin: Origin, dir: &Path) -> Result<Coverage, ReportError> {
    let file = cwm_formats::read_json(&dir.join(COVERAGE_FILE))?;
    Ok(Coverage { origin, file })
}

fn read_train(origin: Origin, dir: &Path) -> Result<TrainRun, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: TrainSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::train::KIND)?;
    Ok(TrainRun {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
        val_history: read_val_history(&dir.join(VAL_FILE))?,
    })
}

fn read_select(origin: &Origin, dir: &Path) -> Result<Vec<SelectChoice>, ReportError> {
    let path = dir.join(SELECTED_FILE);
    let selection: Selection = cwm_formats::read_json(&path)?;
    check_kind(&path, &selection.kind, cwm_formats::select::KIND)?;
    let mut out = Vec::with_capacity(selection.choices.len());
    for (i, choice) in selection.choices.into_iter().enumerate() {
        let field = |name: &str| format!("choices.{i}.{name}");
        // The tables print every metric of a choice: a missing one (a validation that
        // recorded none) is an error here.
        let metric = |name: &str, value: Option<f64>| {
            value.ok_or_else(|| {
                ReportError::field(&path, field(name), "expected a number, found null")
            })
        };
        let val = ValMetrics {
            step: 0,
            loss: choice.val_loss,
            labelwise: metric("labelwise", choice.labelwise)?,
            exact_state: metric("exact_state", choice.exact_state)?,
            trajectory: metric("trajectory", choice.trajectory)?,
        };
        out.push(SelectChoice {
            origin: origin.clone(),
            family: parse_name(&path, &field("arch"), &choice.arch)?,
            size: parse_name(&path, &field("size"), &choice.size)?,
            choice,
            val,
        });
    }
    Ok(out)
}

fn read_evaluate(origin: Origin, dir: &Path) -> Result<EvalResult, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: EvaluateSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::evaluate::KIND)?;
    Ok(EvalResult {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

fn read_bins(origin: Origin, dir: &Path) -> Result<BinResult, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let mut summary: BinPrefixSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::bins::KIND)?;
    summary.bins.sort_by_key(|b| b.start);
    Ok(BinResult {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

fn read_diagnose(origin: Origin, dir: &Path) -> Result<DiagnoseResult, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: DiagnoseSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::diagnose::KIND)?;
    Ok(DiagnoseResult {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

fn read_probe(origin: Origin, dir: &Path) -> Result<ProbeRun, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: ProbeSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::probe::KIND)?;
    Ok(ProbeRun {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

fn read_markov(origin: Origin, dir: &Path) -> Result<MarkovRun, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: MarkovSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::markov::KIND)?;
    Ok(MarkovRun {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

fn read_edit(origin: Origin, dir: &Path) -> Result<EditRun, ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let summary: EditSummary = cwm_formats::read_json(&path)?;
    check_kind(&path, &summary.kind, cwm_formats::edit::KIND)?;
    Ok(EditRun {
        family: parse_name(&path, "arch", &summary.arch)?,
        size: parse_name(&path, "size", &summary.size)?,
        summary,
        origin,
    })
}

/// Reads a train run's `val.parquet`: columns `step` (unsigned integer) and `loss`,
/// `labelwise`, `exact_state`, `trajectory` (floating point), one row per validation, in file
/// order. Other integer or float types are converted; extra columns are ignored. A missing
/// file gives an empty history.
///
/// # Errors
/// [`ReportError::Io`] when the file cannot be read or is not a Parquet file (kind
/// `InvalidData`), [`ReportError::Field`] naming the column that is missing, of another type,
/// or holds a null or a negative step.
pub fn read_val_history(path: &Path) -> Result<Vec<ValMetrics>, ReportError> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ReportError::io(path, e)),
    };
    let invalid = |e: parquet::errors::ParquetError| {
        ReportError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(ParquetRecordBatchReaderBuilder::build)
        .map_err(invalid)?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| invalid(e.into()))?;
        let step = val_column::<UInt64Type>(path, &batch, "step")?;
        let [loss, labelwise, exact_state, trajectory] =
            ["loss", "labelwise", "exact_state", "trajectory"]
                .map(|name| val_column::<Float64Type>(path, &batch, name));
        let (loss, labelwise, exact_state, trajectory) =
            (loss?, labelwise?, exact_state?, trajectory?);
        rows.extend((0..batch.num_rows()).map(|i| ValMetrics {
            step: step.value(i),
            loss: loss.value(i),
            labelwise: labelwise.value(i),
            exact_state: exact_state.value(i),
            trajectory: trajectory.value(i),
        }));
    }
    Ok(rows)
}

/// Column `name` of `batch` as `T`, converted when stored as another numeric type; an error
/// naming the column of `path` when it is missing, not numeric, or holds a null (a value that
/// does not fit, such as a negative step, converts to a null).
fn val_column<T: ArrowPrimitiveType>(
    path: &Path,
    batch: &RecordBatch,
    name: &str,
) -> Result<PrimitiveArray<T>, ReportError> {
    let array = batch
        .column_by_name(name)
        .ok_or_else(|| ReportError::field(path, name, "column missing"))?;
    let expected = T::DATA_TYPE;
    let found = array.data_type();
    if !found.is_numeric() {
        return Err(ReportError::field(
            path,
            name,
            format!("expected {expected}, found {found}"),
        ));
    }
    let converted = arrow::compute::cast(array, &expected).map_err(|e| {
        ReportError::field(
            path,
            name,
            format!("expected {expected}, found {found}: {e}"),
        )
    })?;
    if converted.null_count() > 0 {
        return Err(ReportError::field(
            path,
            name,
            format!("expected {expected} values, found a null or a value out of range in {found}"),
        ));
    }
    converted.as_primitive_opt::<T>().cloned().ok_or_else(|| {
        ReportError::field(path, name, format!("expected {expected}, found {found}"))
    })
}

#[cfg(test)]
mod tests {
    use cwm_stage::Params;

    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("cwm-report-inputs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn artifact(dir: &Path, producer_kind: &str) -> InputArtifact {
        InputArtifact {
            producer: "probe[arch=slice]".into(),
            producer_kind: producer_kind.into(),
            producer_params: Params::new(),
            output: "out".into(),
            hash: "abc".into(),
            path: dir.to_path_buf(),
        }
    }

    #[test]
    fn probe_summaries_are_read_with_their_family_and_size() {
        let summary = crate::tables::probe_test_inputs().probes[0].summary.clone();
        let dir = temp_dir("probe");
        let text = serde_json::to_string(&summary).unwrap();
        std::fs::write(dir.join(SUMMARY_FILE), &text).unwrap();
        // By the producer's kind, and by the summary's own kind.
        for kind in ["probe", "command"] {
            let inputs = read_inputs(&[artifact(&dir, kind)]).unwrap();
            assert_eq!(inputs.probes.len(), 1, "{kind}");
            let run = &inputs.probes[0];
            assert_eq!((run.family, run.size), (Family::Slice, Size::D128));
            assert_eq!(run.origin.kind, "probe");
            // Floats may differ in the last digit after JSON; the structure may not.
            assert_eq!(run.summary.results.len(), summary.results.len());
            assert_eq!(run.summary.model_hash, summary.model_hash);
            assert_eq!(inputs.listed[0].1, Some("probe"));
        }
        let bad = text.replace("\"arch\":\"slice\"", "\"arch\":\"lstm\"");
        std::fs::write(dir.join(SUMMARY_FILE), bad).unwrap();
        let err = read_inputs(&[artifact(&dir, "probe")]).unwrap_err();
        assert!(err.to_string().contains("arch"), "{err}");
        let other = text.replace("\"kind\":\"probe\"", "\"kind\":\"markov\"");
        std::fs::write(dir.join(SUMMARY_FILE), other).unwrap();
        let err = read_inputs(&[artifact(&dir, "probe")]).unwrap_err();
        assert!(err.to_string().contains("kind"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn edit_summaries_are_read_with_their_family_and_size() {
        let summary = crate::tables::edit_test_inputs().edits[0].summary.clone();
        let dir = temp_dir("edit");
        let text = serde_json::to_string(&summary).unwrap();
        std::fs::write(dir.join(SUMMARY_FILE), &text).unwrap();
        for kind in ["edit", "command"] {
            let inputs = read_inputs(&[artifact(&dir, kind)]).unwrap();
            assert_eq!(inputs.edits.len(), 1, "{kind}");
            let run = &inputs.edits[0];
            assert_eq!(
                (run.family, run.size),
                (summary.arch.parse().unwrap(), Size::D128)
            );
            assert_eq!(run.summary.rows.len(), summary.rows.len());
            assert_eq!(inputs.listed[0].1, Some("edit"));
        }
        let other = text.replace("\"kind\":\"edit\"", "\"kind\":\"markov\"");
        std::fs::write(dir.join(SUMMARY_FILE), other).unwrap();
        let err = read_inputs(&[artifact(&dir, "edit")]).unwrap_err();
        assert!(err.to_string().contains("kind"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
