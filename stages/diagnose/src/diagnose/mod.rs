//! The `diagnose` stage kind: what kind of wrong a wrong state is, measured over an evaluate
//! artifact's `predictions.parquet` with the rules engine (`cwm_chess::rules`), as defined in
//! the beyond-the-paper specification (E1–E5, E12).
//!
//! * [`reader`] streams the predictions game by game; each batch of games is measured in
//!   parallel on a local rayon pool (`game`: the true game replayed and tagged, then every
//!   step compared with it) and merged in file order, so the results do not depend on the
//!   number of threads.
//! * Each measure has its module: [`fields`] (E2), `validity` (E1), `affordance` (E3),
//!   `dynamics` (E4), `events` (E5), `mass` (E12), `switch` (E6's ExactState since the switch
//!   of real-prefix/random-continuation games). Their rates over steps are ratios of
//!   numbered per-game counters (`slots`), bootstrapped over games
//!   ([`crate::stats::Bootstrap`]); rates over games or events get Wilson intervals.
//! * Outputs: `summary.json` ([`DiagnoseSummary`]) and `steps.parquet` ([`steps`]: one row
//!   per step). Memory holds one batch of games, the per-game counters (a few hundred numbers
//!   per game) and fixed-size histograms; never the steps of the whole split.
//! * With a `novelty` input, the per-model E7 metrics of the novelty stage
//!   ([`crate::novelty::NoveltyJoin`]) are computed from the same pass and stored in
//!   [`DiagnoseSummary::novelty`].
//!
//! A game whose tokens the rules engine refuses, or whose true labels are not the states its
//! moves lead to, is counted and left out ([`DiagnoseSummary::skipped`]); it never aborts the
//! run.

mod affordance;
mod dynamics;
mod events;
pub mod fields;
mod game;
mod mass;
mod memory;
pub mod reader;
mod slots;
pub mod steps;
mod switch;
mod validity;

use std::path::{Path, PathBuf};

use cwm_chess::rules::StatusFlags;
use cwm_formats::diagnose::{DiagnoseSummary, KIND, STEPS_FILE, SUMMARY_FILE, SkippedGame};
use cwm_formats::evaluate::EvaluateSummary;
use cwm_formats::novelty::NoveltySummary;
use cwm_formats::predictions::PREDICTIONS_FILE;
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind, ThreadsDecl,
};
use rayon::prelude::*;

use crate::DiagnoseError;
use crate::novelty::{NoveltyJoin, NoveltyReader, StepRecord};
use crate::stats::{Bootstrap, Estimates, GameCounts};
use game::{GameResult, Settings, measure_game};
use reader::{GameRows, PredictionsReader};
use steps::StepsWriter;

/// Games measured per parallel batch.
const BATCH_GAMES: usize = 256;

/// How to diagnose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnoseOptions {
    /// Prefix bin width in plies (positive).
    pub bin: u32,
    /// Bootstrap resamples (0: no bootstrap intervals).
    pub bootstrap: u32,
    /// The bootstrap's seed.
    pub seed: u64,
    /// Steps with t above this carry `long_game`; 0 takes the novelty input's 99th percentile
    /// of training game lengths when there is one, else no step is a long game.
    pub long_game_ply: u32,
    /// Worker threads (at least 1).
    pub threads: usize,
    /// The evaluate artifact's hash, for the summary.
    pub evaluate_hash: Option<String>,
}

impl Default for DiagnoseOptions {
    fn default() -> DiagnoseOptions {
        DiagnoseOptions {
            bin: 20,
            bootstrap: 1000,
            seed: 0,
            long_game_ply: 0,
            threads: 1,
            evaluate_hash: None,
        }
    }
}

/// Everything the games add up to, merged in file order.
struct Accumulator {
    totals: Vec<f64>,
    counts: Vec<GameCounts>,
    fields: fields::FieldCounts,
    dynamics: dynamics::DynamicsCounts,
    first_error_fields: events::FirstErrorFields,
    mass: mass::MassCounts,
    switch: switch::SwitchCounts,
    games: u64,
    steps: u64,
    games_with_v1_failure: u64,
    bins: usize,
    skipped: Vec<SkippedGame>,
}

impl Accumulator {
    fn new(has_p_max: bool, mass_samples: Option<u32>) -> Accumulator {
        Accumulator {
            totals: vec![0.0; slots::FIXED],
            counts: Vec::new(),
            fields: fields::FieldCounts::default(),
            dynamics: dynamics::DynamicsCounts::default(),
            first_error_fields: events::FirstErrorFields::default(),
            mass: mass::MassCounts::new(has_p_max, mass_samples),
            switch: switch::SwitchCounts::default(),
            games: 0,
            steps: 0,
            games_with_v1_failure: 0,
            bins: 0,
            skipped: Vec::new(),
        }
    }

    fn add(&mut self, result: &GameResult) {
        if let Some(skipped) = &result.skipped {
            self.skipped.push(skipped.clone());
            return;
        }
        let values = result.tally.values();
        if self.totals.len() < values.len() {
            self.totals.resize(values.len(), 0.0);
        }
        for (total, value) in self.totals.iter_mut().zip(values) {
            *total += value;
        }
        self.counts.push(result.tally.sparse());
        self.fields.merge(&result.fields);
        self.dynamics.merge(&result.dynamics);
        self.first_error_fields.merge(&result.first_error_fields);
        self.mass.add(&result.mass);
        self.switch.add(&result.steps);
        self.games += 1;
        self.steps += result.steps.rows.len() as u64;
        self.games_with_v1_failure += u64::from(result.v1_failure);
        self.bins = self.bins.max(result.bins);
    }
}

/// Pushes a game's steps into the novelty join: its records in step order.
fn join_game<I>(
    join: &mut NoveltyJoin<I>,
    rows: &GameRows,
    result: &GameResult,
) -> Result<(), DiagnoseError>
where
    I: Iterator<Item = Result<cwm_formats::novelty::NoveltyRow, crate::NoveltyError>>,
{
    for (t, &right) in result.n_correct.iter().enumerate() {
        let v1 = result
            .steps
            .rows
            .get(t)
            .map(|row| row.flags & StatusFlags::V1.bits() == 0);
        join.push(&StepRecord {
            game_id: &rows.game_id,
            t: t as u32,
            exact: usize::from(right) == cwm_chess::encode::STATE_LEN,
            labelwise: f64::from(right) / cwm_chess::encode::STATE_LEN as f64,
            v1,
        })?;
    }
    Ok(())
}

/// Where the inputs are.
#[derive(Debug, Clone, Copy)]
pub struct DiagnoseInputs<'a> {
    /// The evaluate artifact (its `predictions.parquet` and `summary.json`).
    pub evaluate: &'a Path,
    /// A novelty artifact of the evaluated test split, if any.
    pub novelty: Option<&'a Path>,
}

/// The `long_game` threshold: the option, else the novelty input's 99th percentile.
fn long_game_ply(
    options: &DiagnoseOptions,
    novelty: Option<&Path>,
) -> Result<Option<u32>, DiagnoseError> {
    if options.long_game_ply > 0 {
        return Ok(Some(options.long_game_ply));
    }
    let Some(dir) = novelty else {
        return Ok(None);
    };
    let path = dir.join(cwm_formats::novelty::SUMMARY_FILE);
    let summary: NoveltySummary = cwm_formats::read_json(&path)?;
    Ok((summary.train_games > 0).then_some(summary.train_length_p99))
}

/// The summary of everything measured.
fn summarise(
    mut acc: Accumulator,
    bootstrap: &Bootstrap,
    evaluate: EvaluateSummary,
    settings: &Settings,
    options: &DiagnoseOptions,
    novelty: Option<cwm_formats::novelty::NoveltyMetrics>,
) -> DiagnoseSummary {
    acc.totals
        .resize(slots::total(acc.bins).max(acc.totals.len()), 0.0);
    let estimates = Estimates {
        totals: &acc.totals,
        bootstrap,
    };
    DiagnoseSummary {
        version: <DiagnoseSummary as cwm_formats::Versioned>::VERSION,
        kind: KIND.to_owned(),
        split: evaluate.split,
        arch: evaluate.arch,
        size: evaluate.size,
        evaluate_hash: options.evaluate_hash.clone(),
        model_hash: evaluate.model_hash,
        data_hash: evaluate.data_hash,
        ep_convention: settings.ep.name().to_owned(),
        games: acc.games,
        steps: acc.steps,
        skipped: std::mem::take(&mut acc.skipped),
        bin: options.bin,
        bootstrap: options.bootstrap,
        seed: options.seed,
        validity: validity::summarise(
            &estimates,
            acc.games_with_v1_failure,
            acc.games,
            acc.bins,
            options.bin,
        ),
        fields: fields::summarise(&estimates, &acc.fields),
        affordance: affordance::summarise(&estimates, acc.bins, options.bin),
        dynamics: dynamics::summarise(&estimates, &acc.dynamics),
        events: events::summarise(
            &estimates,
            acc.bins,
            settings.long_game_ply,
            &acc.first_error_fields,
        ),
        mass: mass::summarise(&estimates, &acc.mass),
        since_switch: acc.switch.curves(),
        novelty,
    }
}

/// Diagnoses the predictions of the evaluate artifact `inputs.evaluate` and writes
/// `summary.json` and `steps.parquet` into `out_dir` (created if needed; each file appears
/// under its name only when complete, the summary last).
///
/// # Errors
/// [`DiagnoseError`] for a missing or malformed input (naming the file, and the game and
/// step), a write error, a bad option or cancellation.
pub fn diagnose(
    inputs: DiagnoseInputs<'_>,
    out_dir: &Path,
    options: &DiagnoseOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<DiagnoseSummary, DiagnoseError> {
    if options.bin == 0 {
        return Err(DiagnoseError::Invalid("bin must be positive".into()));
    }
    let evaluate: EvaluateSummary =
        cwm_formats::read_json(&inputs.evaluate.join(cwm_formats::evaluate::SUMMARY_FILE))?;
    let mut reader = PredictionsReader::open(&inputs.evaluate.join(PREDICTIONS_FILE))?;
    let settings = Settings {
        ep: reader.ep_convention(),
        bin: options.bin,
        long_game_ply: long_game_ply(options, inputs.novelty)?,
    };
    std::fs::create_dir_all(out_dir).map_err(|e| DiagnoseError::io(out_dir, e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads.max(1))
        .build()
        .map_err(|e| {
            DiagnoseError::Invalid(format!("cannot start {} threads: {e}", options.threads))
        })?;
    progress.set_total(reader.rows());
    let mut join = match inputs.novelty {
        Some(dir) => Some(NoveltyJoin::new(NoveltyReader::open(dir)?, options.bin)?),
        None => None,
    };
    let mut writer = StepsWriter::create(&out_dir.join(STEPS_FILE))?;
    let mut acc = Accumulator::new(reader.has_p_max(), reader.mass_samples());
    let mut games = reader.next_games(BATCH_GAMES)?;
    while !games.is_empty() {
        if cancelled() {
            return Err(DiagnoseError::Cancelled);
        }
        // The next batch is read while this one is measured.
        let (results, next) = pool.install(|| {
            rayon::join(
                || {
                    games
                        .par_iter()
                        .map(|g| measure_game(g, &settings))
                        .collect::<Vec<GameResult>>()
                },
                || reader.next_games(BATCH_GAMES),
            )
        });
        for (rows, result) in games.iter().zip(&results) {
            if let Some(join) = join.as_mut() {
                join_game(join, rows, result)?;
            }
            acc.add(result);
        }
        writer.append(results.iter().map(|r| &r.steps))?;
        progress.inc(games.iter().map(|g| g.steps() as u64).sum());
        games = next?;
    }
    writer.finish()?;
    let bootstrap = pool.install(|| {
        Bootstrap::run(
            &acc.counts,
            slots::total(acc.bins),
            options.bootstrap,
            options.seed,
        )
    });
    let summary = summarise(
        acc,
        &bootstrap,
        evaluate,
        &settings,
        options,
        join.map(NoveltyJoin::finish),
    );
    cwm_formats::write_json(&out_dir.join(SUMMARY_FILE), &summary)?;
    Ok(summary)
}

/// The `diagnose` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct DiagnoseStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "bin",
        ParamType::Int,
        ParamDefault::Int(20),
        "prefix bin width in plies: bin k holds t in [bin*k, bin*k + bin)",
    ),
    ParamSpec::with_default(
        "bootstrap",
        ParamType::Int,
        ParamDefault::Int(1000),
        "game-level bootstrap resamples for the intervals of rates over steps (0 = none)",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "seed of the bootstrap",
    ),
    ParamSpec::with_default(
        "long_game_ply",
        ParamType::Int,
        ParamDefault::Int(0),
        "steps with t above this are tagged long_game (0 = the novelty input's 99th percentile of training game lengths; without one, no long_game tag)",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[
    InputSpec::one(
        "evaluate",
        "an evaluate artifact with predictions.parquet (and its summary.json)",
    ),
    InputSpec::one(
        "novelty",
        "a novelty artifact of the evaluated split: adds the E7 metrics and the long_game threshold",
    )
    .optional(),
];

const DECL: KindDecl = KindDecl::new(
    "diagnose",
    "what kind of wrong a wrong state is: validity, fields, legal moves, dynamics, rare events and mass of an evaluate artifact's predictions",
)
.params(PARAMS)
// Extra params are labels (the matrix keys of the evaluations it diagnoses).
.extra_params()
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param);

/// The files of this crate the `diagnose` kind runs.
const FILES: &[&str] = &[
    "Cargo.toml",
    "src/lib.rs",
    "src/error.rs",
    "src/stats.rs",
    "src/parquet_file.rs",
    "src/diagnose/",
    "src/novelty/error.rs",
    "src/novelty/metrics.rs",
    "src/novelty/table.rs",
];

fn param_u32(ctx: &StageContext, name: &str) -> Result<u32, StageError> {
    let value = ctx.params().uint(name)?;
    u32::try_from(value)
        .map_err(|_| StageError::Param(format!("{name} must be at most 4294967295, got {value}")))
}

impl StageKind for DiagnoseStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[
            &cwm_stage::fingerprint_of_files(crate::FILE_FINGERPRINTS, FILES),
            cwm_chess::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let bin = param_u32(ctx, "bin")?;
        if bin == 0 {
            return Err(StageError::Param("bin must be positive".into()));
        }
        let options = DiagnoseOptions {
            bin,
            bootstrap: param_u32(ctx, "bootstrap")?,
            seed: ctx.params().uint("seed")?,
            long_game_ply: param_u32(ctx, "long_game_ply")?,
            threads: ctx.threads(),
            evaluate_hash: ctx.input_list("evaluate").first().map(|a| a.hash.clone()),
        };
        let novelty: Option<PathBuf> = match ctx.input_list("novelty") {
            [] => None,
            _ => Some(ctx.input("novelty")?.to_path_buf()),
        };
        let summary = diagnose(
            DiagnoseInputs {
                evaluate: ctx.input("evaluate")?,
                novelty: novelty.as_deref(),
            },
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        ctx.log().line(format!(
            "{} {} on {}: {} games ({} skipped), {} steps, exact_state {:?}, V1 {:?}, legal-move IoU {:?}",
            summary.arch,
            summary.size,
            summary.split,
            summary.games,
            summary.skipped.len(),
            summary.steps,
            summary.fields.exact_state.value,
            summary.validity.tiers.get(1).and_then(|r| r.value),
            summary.affordance.iou.strict.value,
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diagnose_kind_fingerprints_its_files_and_the_rules_engine() {
        let fingerprint = DiagnoseStage.fingerprint();
        for file in [
            "src/diagnose/mod.rs=",
            "src/diagnose/game.rs=",
            "src/stats.rs=",
            "src/error.rs=",
            "src/novelty/metrics.rs=",
        ] {
            assert!(fingerprint.contains(file), "{file} in {fingerprint}");
        }
        for file in ["src/novelty/scan.rs=", "src/novelty/mod.rs="] {
            assert!(!fingerprint.contains(file), "{file} not in {fingerprint}");
        }
        assert!(!fingerprint.contains("=missing"), "{fingerprint}");
        assert!(fingerprint.ends_with(cwm_chess::SOURCE_FINGERPRINT));
    }

    #[test]
    fn the_declaration_takes_an_optional_novelty_input_and_the_threads_param() {
        let names: Vec<&str> = DiagnoseStage.params().iter().map(|p| p.name).collect();
        assert_eq!(
            names,
            ["bin", "bootstrap", "seed", "long_game_ply", "threads"]
        );
        assert!(!DiagnoseStage.params()[4].keyed);
        let mut params = cwm_stage::Params::new();
        params.insert("threads", cwm_stage::ParamValue::Int(3));
        assert_eq!(DiagnoseStage.threads(&params), cwm_stage::Threads::Fixed(3));
        assert_eq!(DiagnoseStage.outputs(), ["out"]);
    }
}
