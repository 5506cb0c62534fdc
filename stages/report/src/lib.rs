//! The `report` stage kind: the paper's tables and figures from any set of artifacts.
//!
//! * **Input** `artifacts` (many, optional): any artifacts, typically whole matrices of
//!   `tokenize`, `train`, `select`, `evaluate`, `bin_prefix`, `diagnose`, `probe`, `markov`
//!   and `edit` instances. Each is recognised
//!   by its producer's kind (or the `"kind"` of its `summary.json`); others are listed and
//!   ignored. See `README.md` for which table reads which artifact.
//! * **Params**: `title`, `figures` (draw Figures 3 and 4, the training curves and the
//!   figures beyond the paper), `param_counts` (Table 4, counted on instantiated models; needs
//!   no artifact).
//! * **Output** `out`: `index.md` (links to everything, and the inputs with their hashes),
//!   every table as `<id>.md`, `<id>.tex`, `<id>.csv` and `<id>.sources.csv`, every figure as
//!   `<id>.svg` and `<id>.png`. A table whose inputs are absent is not written; `index.md`
//!   names it with the reason.
//!
//! Every file is written under a temporary name and renamed into place.
#![deny(missing_docs)]

pub mod error;
pub mod figures;
pub mod format;
pub mod html;
pub mod inputs;
pub mod published;
pub mod ranking;
pub mod setup;
pub mod table;
pub mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use cwm_models::{Family, Size};
use cwm_stage::{
    InputArtifact, InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress,
    StageContext, StageError, StageKind,
};

pub use error::ReportError;
pub use figures::{Figure, Point};
pub use inputs::{Inputs, read_inputs};
pub use table::{Cell, Column, MissingTable, Source, Table};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    /// The heading of `index.md`.
    pub title: String,
    /// Whether to draw Figures 3 and 4 and the training curves.
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
    /// File stem (`figure3`, `figure4_test_other`, `training_slice`).
    pub id: String,
    /// The caption used in `index.md`.
    pub title: String,
}

/// What a report run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportSummary {
    /// The tables, in index order.
    pub tables: Vec<Table>,
    /// The paper's tables the inputs could not fill, with the reason (listed in `index.md`).
    pub missing: Vec<MissingTable>,
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

/// The label of the validation set in the figures (`validation`, or `validation (train runs)`
/// when an evaluate split already has that label).
fn validation_label(splits: &[String]) -> String {
    if splits.iter().any(|s| s == "validation") {
        "validation (train runs)".to_owned()
    } else {
        "validation".to_owned()
    }
}

/// The figures' data: one point per family × size on each evaluate split (in the tables'
/// split order), then on the validation set the train run with the lowest validation loss of
/// each family × size.
fn figure_points(inputs: &Inputs) -> Vec<(String, Vec<Point>)> {
    let splits = tables::split_order(inputs.evaluate.iter().map(|e| e.summary.split.clone()));
    let validation = validation_label(&splits);
    let mut sets = Vec::new();
    for split in splits {
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
                if point.loss < p.loss || (p.loss.is_nan() && !point.loss.is_nan()) {
                    *p = point;
                }
            })
            .or_insert(point);
    }
    if !best.is_empty() {
        sets.push((validation, best.into_values().collect()));
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

/// Adds `table`, or notes it as missing for `reason`.
fn push_or_missing(
    tables: &mut Vec<Table>,
    missing: &mut Vec<MissingTable>,
    label: &str,
    table: Option<Table>,
    reason: &str,
) {
    match table {
        Some(table) => tables.push(table),
        None => missing.push(MissingTable {
            label: label.into(),
            reason: reason.into(),
        }),
    }
}

/// Every table, in index order, and the tables the inputs cannot fill. Drops the evaluations
/// of floors no selection chose from `inputs` (noting each in `notes`).
fn build_tables(
    inputs: &mut Inputs,
    options: &ReportOptions,
    notes: &mut Vec<String>,
    check: &dyn Fn() -> Result<(), ReportError>,
) -> Result<(Vec<Table>, Vec<MissingTable>), ReportError> {
    let mut tables = Vec::new();
    let mut missing = Vec::new();
    let no_coverage = "no tokenize artifact (coverage.json) among the inputs";
    push_or_missing(
        &mut tables,
        &mut missing,
        "Table 1",
        setup::table1(inputs),
        no_coverage,
    );
    tables.push(setup::table2());
    push_or_missing(
        &mut tables,
        &mut missing,
        "Table 3",
        setup::table3(inputs),
        no_coverage,
    );
    let counts = if options.param_counts {
        Some(tables::param_counts()?)
    } else {
        None
    };
    check()?;
    let evaluations = |inputs: &Inputs| -> BTreeSet<String> {
        inputs
            .evaluate
            .iter()
            .map(|e| e.origin.hash.clone())
            .collect()
    };
    let before = evaluations(inputs);
    let models_of: BTreeMap<String, String> = inputs
        .evaluate
        .iter()
        .filter_map(|e| Some((e.origin.hash.clone(), e.summary.model_hash.clone()?)))
        .collect();
    notes.extend(tables::keep_chosen_floor_evaluations(inputs));
    let dropped: BTreeSet<String> = before.difference(&evaluations(inputs)).cloned().collect();
    let dropped_models: BTreeSet<String> = dropped
        .iter()
        .filter_map(|h| models_of.get(h).cloned())
        .collect();
    let paper = published::Paper::load()?;
    let built = tables::paper_tables(inputs, counts.as_ref(), &paper)?;
    tables.extend(built.tables);
    missing.extend(built.missing);
    // The ranking agreement reads the first stage, so it follows Table 5 and its comparison.
    let after_table5 = tables
        .iter()
        .rposition(|t| t.id.starts_with("table5"))
        .map_or(tables.len(), |i| i + 1);
    match ranking::ranking_table(inputs, tables::paper_rank) {
        Some(table) => tables.insert(after_table5, table),
        None => missing.push(MissingTable {
            label: "Ranking agreement".into(),
            reason: "no first-stage train run (schedule none or constant) with a validation \
                     among the inputs"
                .into(),
        }),
    }
    tables::keep_chosen_floor_diagnoses(inputs, &dropped, &dropped_models);
    let beyond = tables::beyond_tables(inputs);
    if beyond.is_empty() && !inputs.evaluate.is_empty() {
        missing.push(MissingTable {
            label: "Beyond the paper".into(),
            reason: "no diagnose artifact among the inputs".into(),
        });
    }
    tables.extend(beyond);
    tables::keep_chosen_floor_probes(inputs, &dropped_models);
    tables.extend(tables::probe_tables(inputs));
    tables::keep_chosen_floor_markov(inputs, &dropped_models);
    tables.extend(tables::markov_tables(inputs));
    tables::keep_chosen_floor_edits(inputs, &dropped_models);
    tables.extend(tables::edit_tables(inputs));
    match tables::predictor_table(inputs) {
        Ok(table) => tables.push(table),
        Err(why) if !inputs.evaluate.is_empty() => missing.push(why),
        Err(_) => {}
    }
    Ok((tables, missing))
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
    progress.inc(1);
    check()?;

    progress.set_message("tables");
    let (tables, missing) = build_tables(&mut inputs, options, &mut notes, &check)?;
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
        let sets = figure_points(&inputs);
        let mut planned = figures::paper::figure3(&sets);
        planned.extend(figures::paper::figure4(&sets));
        planned.extend(figures::curves::training(&inputs));
        planned.extend(figures::beyond::beyond(&inputs));
        planned.extend(figures::beyond::probes(&inputs));
        planned.extend(figures::beyond::markov(&inputs));
        planned.extend(figures::edit::persistence(&inputs));
        for plan in planned {
            check()?;
            figures::render(&plan.figure, out, &plan.id)?;
            figure_files.push(FigureFile {
                id: plan.id,
                title: plan.figure.caption,
            });
        }
    }
    progress.inc(1);

    let summary = ReportSummary {
        tables,
        missing,
        figures: figure_files,
        inputs,
        notes,
    };
    write_atomic(
        &out.join("index.md"),
        index_markdown(options, &summary).as_bytes(),
    )?;
    write_atomic(
        &out.join(html::HTML_FILE),
        html::report_html(options, &summary, out)?.as_bytes(),
    )?;
    progress.inc(1);
    Ok(summary)
}

/// The text of `index.md`.
pub fn index_markdown(options: &ReportOptions, summary: &ReportSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", options.title);
    let _ = writeln!(
        out,
        "The whole report on one page: [{}]({}).\n",
        html::HTML_FILE,
        html::HTML_FILE
    );
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
    if !summary.missing.is_empty() {
        out.push_str("\nNot built, as the inputs cannot fill them:\n\n");
        for m in &summary.missing {
            let _ = writeln!(out, "- {}: {}", m.label, m.reason);
        }
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
        "draw Figures 3 and 4 and the training curves (SVG and PNG)",
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
