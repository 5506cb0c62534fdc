//! The `report` stage kind: the paper's tables and figures from any set of artifacts.
//!
//! * **Input** `artifacts` (many, optional): any artifacts, typically whole matrices of
//!   `tokenize`, `train`, `select`, `evaluate` and `bin_prefix` instances. Each is recognised
//!   by its producer's kind (or the `"kind"` of its `summary.json`); others are listed and
//!   ignored. See `README.md` for which table reads which artifact.
//! * **Params**: `title`, `figures` (draw Figures 3 and 4), `param_counts` (Table 4, counted
//!   on instantiated models; needs no artifact).
//! * **Output** `out`: `index.md` (links to everything, and the inputs with their hashes),
//!   every table as `<id>.md`, `<id>.tex`, `<id>.csv` and `<id>.sources.csv`, every figure as
//!   `<id>.svg` and `<id>.png`. A table whose inputs are absent is not written.
//!
//! Every file is written under a temporary name and renamed into place.
#![deny(missing_docs)]

pub mod error;
pub mod figures;
pub mod format;
pub mod inputs;
pub mod setup;
pub mod table;
pub mod tables;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use cwm_models::{Family, Size};
use cwm_stage::{
    InputArtifact, InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress,
    StageContext, StageError, StageKind,
};

pub use error::ReportError;
pub use figures::{FigureSpec, Point};
pub use inputs::{Inputs, read_inputs};
pub use table::{Cell, Column, Source, Table};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    /// The heading of `index.md`.
    pub title: String,
    /// Whether to draw Figures 3 and 4.
    pub figures: bool,
    /// Whether to build Table 4 (instantiates all 28 family × size models to count them).
    pub param_counts: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            title: DEFAULT_TITLE.to_owned(),
            figures: true,
            param_counts: true,
        }
    }
}

const DEFAULT_TITLE: &str = "Chess-World-Model report";

/// A figure written by the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FigureFile {
    /// File stem (`figure3_test_real`).
    pub id: String,
    /// The caption used in `index.md`.
    pub title: String,
}

/// What a report run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSummary {
    /// The tables, in index order.
    pub tables: Vec<Table>,
    /// The figures, in index order.
    pub figures: Vec<FigureFile>,
    /// The inputs read.
    pub inputs: Inputs,
    /// What the selections changed: runs kept at a rank other than the best, evaluations
    /// left out of the test tables.
    pub notes: Vec<String>,
}

/// Writes `bytes` to `path` with [`cwm_formats::fs::write_atomic`], so a reader never sees a
/// half-written file.
///
/// # Errors
/// [`ReportError::Io`] naming the file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    cwm_formats::fs::write_atomic(path, bytes).map_err(|e| ReportError::io(path, e))
}

/// The figures' data: one point per family × size on each evaluate split, and on
/// `validation` the train run with the lowest validation loss of each family × size.
fn figure_points(inputs: &Inputs) -> Vec<(String, Vec<Point>)> {
    let mut sets = Vec::new();
    let mut best: BTreeMap<(Family, Size), Point> = BTreeMap::new();
    for run in &inputs.train {
        let Some(val) = run.val() else { continue };
        let point = Point {
            family: run.family,
            size: run.size,
            params: run.summary.params,
            loss: val.loss,
            exact_state: val.exact_state,
        };
        best.entry((run.family, run.size))
            .and_modify(|p| {
                if point.loss < p.loss {
                    *p = point;
                }
            })
            .or_insert(point);
    }
    if !best.is_empty() {
        sets.push(("validation".to_owned(), best.into_values().collect()));
    }
    for split in tables::split_order(inputs.evaluate.iter().map(|e| e.summary.split.clone())) {
        let mut points: Vec<Point> = inputs
            .evaluate
            .iter()
            .filter(|e| e.summary.split == split)
            .map(|e| Point {
                family: e.family,
                size: e.size,
                params: e.summary.params,
                loss: e.summary.loss,
                exact_state: e.summary.exact_state,
            })
            .collect();
        points.sort_by_key(|p| (p.family, p.size));
        sets.push((split, points));
    }
    sets
}

/// A note for each choice a selection made at a rank other than the best (the pipeline's
/// `ranks`, e.g. the paper's SLiCE d512 exception).
fn rank_notes(inputs: &Inputs) -> Vec<String> {
    inputs
        .select
        .iter()
        .filter(|c| c.choice.rank > 1)
        .map(|c| {
            format!(
                "{} {}: `{}` chose run {} by validation loss, {}, passing over {}",
                c.family,
                c.size,
                c.origin.instance,
                c.choice.rank,
                c.choice.instance,
                c.choice.passed_over.join(", ")
            )
        })
        .collect()
}

/// Builds the report from `artifacts` into the empty directory `out`.
///
/// # Errors
/// [`ReportError`] naming the file and field of a malformed input, a conflict between two
/// inputs claiming one table cell, or a failed write.
pub fn build_report(
    artifacts: &[InputArtifact],
    out: &Path,
    options: &ReportOptions,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<ReportSummary, ReportError> {
    let check = || {
        if cancelled() {
            Err(ReportError::Cancelled)
        } else {
            Ok(())
        }
    };
    progress.set_total(4);
    progress.set_message("reading inputs");
    let mut inputs = read_inputs(artifacts)?;
    let mut notes = rank_notes(&inputs);
    notes.extend(inputs.keep_chosen_floors());
    progress.inc(1);
    check()?;

    progress.set_message("tables");
    let mut tables = Vec::new();
    tables.extend(setup::table3(&inputs));
    if options.param_counts {
        tables.push(tables::table4(&tables::param_counts()?));
    }
    check()?;
    tables.extend(tables::table5(&inputs));
    tables.extend(tables::table6(&inputs));
    tables.extend(tables::table7(&inputs));
    tables.extend(tables::table8(&inputs)?);
    tables.extend(tables::ablation_tables(&inputs)?);
    tables.extend(tables::bin_tables(&inputs)?);
    for table in &tables {
        for (ext, text) in [
            ("md", table.markdown()),
            ("tex", table.latex()),
            ("csv", table.csv()),
            ("sources.csv", table.sources_csv()),
        ] {
            write_atomic(&out.join(format!("{}.{ext}", table.id)), text.as_bytes())?;
        }
    }
    progress.inc(1);
    check()?;

    let mut figure_files = Vec::new();
    if options.figures {
        progress.set_message("figures");
        for (split, points) in figure_points(&inputs) {
            check()?;
            let safe = tables::file_safe(&split);
            let spec = FigureSpec::figure3(&split, points.clone());
            let id = format!("figure3_{safe}");
            figures::render(&spec, out, &id)?;
            figure_files.push(FigureFile {
                id,
                title: spec.title.clone(),
            });
            if let Some(spec) = FigureSpec::figure4(&split, &points) {
                let id = format!("figure4_{safe}");
                figures::render(&spec, out, &id)?;
                figure_files.push(FigureFile {
                    id,
                    title: spec.title.clone(),
                });
            }
        }
    }
    progress.inc(1);

    let summary = ReportSummary {
        tables,
        figures: figure_files,
        inputs,
        notes,
    };
    write_atomic(
        &out.join("index.md"),
        index_markdown(options, &summary).as_bytes(),
    )?;
    progress.inc(1);
    Ok(summary)
}

/// The text of `index.md`.
pub fn index_markdown(options: &ReportOptions, summary: &ReportSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", options.title);
    out.push_str("## Tables\n\n");
    if summary.tables.is_empty() {
        out.push_str("No table: none of the inputs feeds one.\n");
    }
    for t in &summary.tables {
        let _ = writeln!(
            out,
            "- {}: {} ([md]({id}.md), [tex]({id}.tex), [csv]({id}.csv), [sources]({id}.sources.csv))",
            t.label,
            t.title,
            id = t.id
        );
    }
    out.push_str("\n## Figures\n\n");
    if summary.figures.is_empty() {
        out.push_str("No figure.\n");
    }
    for f in &summary.figures {
        let _ = writeln!(
            out,
            "- {} ([svg]({id}.svg), [png]({id}.png))\n\n  ![{}]({id}.svg)",
            f.title,
            f.title,
            id = f.id
        );
    }
    if !summary.notes.is_empty() {
        out.push_str("\n## Selection notes\n\n");
        for note in &summary.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out.push_str("\n## Inputs\n\n");
    if summary.inputs.listed.is_empty() {
        out.push_str("No input artifact.\n");
    } else {
        out.push_str("| Instance | Kind | Hash | Used |\n|:---|:---|:---|:---|\n");
        for (origin, used) in &summary.inputs.listed {
            let _ = writeln!(
                out,
                "| `{}` | {} | `{}` | {} |",
                origin.instance.replace('|', "\\|"),
                origin.kind,
                origin.hash,
                if used.is_some() {
                    "yes"
                } else {
                    "ignored (unknown kind)"
                }
            );
        }
    }
    out
}

/// The `report` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReportStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "title",
        ParamType::Str,
        ParamDefault::Str(DEFAULT_TITLE),
        "heading of index.md",
    ),
    ParamSpec::with_default(
        "figures",
        ParamType::Bool,
        ParamDefault::Bool(true),
        "draw Figures 3 and 4 (SVG and PNG)",
    ),
    ParamSpec::with_default(
        "param_counts",
        ParamType::Bool,
        ParamDefault::Bool(true),
        "build Table 4 (parameter counts of all 28 models, no artifact needed)",
    ),
];

const INPUTS: &[InputSpec] = &[InputSpec::many(
    "artifacts",
    "any artifacts: tokenize, train, select, evaluate and bin_prefix ones feed tables and figures",
)
.optional()];

const DECL: KindDecl = KindDecl::new(
    "report",
    "the paper's tables (md, tex, csv) and figures (svg, png) from any set of artifacts",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS));

impl StageKind for ReportStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[
            &cwm_stage::fingerprint_of_files(
                FILE_FINGERPRINTS,
                &["Cargo.toml", "build.rs", "src/"],
            ),
            cwm_models::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let options = ReportOptions {
            title: ctx.params().str_or("title", DEFAULT_TITLE).to_owned(),
            figures: ctx.params().bool("figures")?,
            param_counts: ctx.params().bool("param_counts")?,
        };
        let summary = build_report(
            ctx.input_list("artifacts"),
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        let ignored = summary
            .inputs
            .listed
            .iter()
            .filter(|(_, k)| k.is_none())
            .count();
        ctx.log().line(format!(
            "{} tables, {} figures from {} inputs ({ignored} ignored)",
            summary.tables.len(),
            summary.figures.len(),
            summary.inputs.listed.len()
        ));
        Ok(())
    }
}
