//! The `novelty` stage kind: which test steps a model's training split has seen (spec E7).
//!
//! * **Inputs** `test` (the tokenize artifact of the evaluated split) and `train` (the tokenize
//!   artifact of the training split the model saw). Nothing depends on a model, so one novelty
//!   artifact per (test split, training split) serves every model trained on that split; the
//!   diagnose stage joins it with each model's predictions ([`novelty_metrics`]).
//! * **Params** `max_train_games` (scan at most this many training games; 0 = all) and
//!   `threads` (0 = all the executor has; unkeyed).
//! * **Output** `out`: `novelty.parquet` (one row per test step, in the test shards' order;
//!   columns in [`cwm_formats::novelty`]) and `summary.json` ([`NoveltySummary`]).
//!
//! Every test step `(g, t)` gets three keys ([`keys`]): PrefixKey (the tokens `x_0..x_t`),
//! PositionKey (Key4 of the position after t plies, replayed with shakmaty) and StateKey (the
//! 75 labels). The run reads the test shards and collects their keys ([`collect_test_keys`]),
//! streams the training shards once and counts, for every test key, the training steps that
//! carry it ([`scan_training`]; memory is bounded by the test keys, never by the training
//! set), then reads the test shards again and writes each step's counts with its game's
//! deviation ply `t_dev`, the first step whose prefix is unseen. Counts are sums, so the
//! outputs are the same for every thread count.
//!
//! A token that cannot be replayed (a first token other than `START`, or a move illegal in the
//! replayed position) ends that game's position keys: the game is counted and named in the
//! summary's `bad_games` and the stage's log, and its later rows carry null position columns.
//! Tokenize shards hold legal games only, so this concerns foreign or damaged shards.

mod error;
pub mod keys;
mod metrics;
mod scan;
mod summary;
mod table;

use std::fs::File;
use std::path::Path;

use cwm_formats::Versioned;
use cwm_formats::novelty::{BadGames, KIND, NOVELTY_FILE, SUMMARY_FILE};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind, ThreadsDecl,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rayon::prelude::*;

pub use cwm_formats::novelty::{NoveltyMetrics, NoveltyRow, NoveltySummary};
pub use error::NoveltyError;
pub use metrics::{NoveltyJoin, StepRecord, novelty_metrics};
pub use scan::{
    GameNovelty, GameScan, ScanControl, StepCounts, TestKeys, TrainScan, collect_test_keys,
    scan_training,
};
pub use table::{NoveltyReader, novelty_schema, read_novelty};

use scan::{BATCH_GAMES_PER_THREAD, Batches};
use summary::TestTally;
use table::NoveltyWriter;

/// The Parquet key-value metadata key of the tokenize shards naming their labels' en-passant
/// convention.
const SHARD_EP_KEY: &str = "cwm.ep_convention";

/// How to run [`novelty`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoveltyOptions {
    /// Scan at most this many training games (0 = all).
    pub max_train_games: u64,
    /// Worker threads (0 = rayon's default, all cores).
    pub threads: usize,
    /// The test artifact's hash, when known (recorded in the summary).
    pub test_hash: Option<String>,
    /// The training artifact's hash, when known.
    pub train_hash: Option<String>,
}

/// Marks every step of the test shards at `test` as seen or novel against the training shards
/// at `train` and writes `novelty.parquet` and `summary.json` into `out_dir` (created if
/// needed; each file appears under its name only when complete, the summary last).
///
/// # Errors
/// [`NoveltyError`] for unreadable shards, write errors or cancellation.
pub fn novelty(
    test: &Path,
    train: &Path,
    out_dir: &Path,
    options: &NoveltyOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<NoveltySummary, NoveltyError> {
    std::fs::create_dir_all(out_dir).map_err(|e| NoveltyError::io(out_dir, e))?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .build()
        .map_err(|e| {
            NoveltyError::Invalid(format!("cannot start {} threads: {e}", options.threads))
        })?;
    let test_ep = ep_convention(test)?;
    let train_ep = ep_convention(train)?;
    progress.set_message("collecting the test keys");
    let keys = collect_test_keys(test, &pool, cancelled)?;
    progress.set_message("scanning the training games");
    let control = ScanControl {
        pool: &pool,
        progress,
        cancelled,
    };
    let scanned = scan_training(train, &keys, options.max_train_games, &control)?;
    progress.set_message("writing the test steps");
    let tally = write_rows(test, &keys, &out_dir.join(NOVELTY_FILE), &pool, cancelled)?;
    let mut examples = tally.bad_examples.clone();
    examples.extend(scanned.bad_examples.iter().cloned());
    examples.truncate(BadGames::MAX_EXAMPLES);
    let summary = NoveltySummary {
        version: NoveltySummary::VERSION,
        kind: KIND.to_owned(),
        test_hash: options.test_hash.clone(),
        train_hash: options.train_hash.clone(),
        test_ep_convention: test_ep,
        train_ep_convention: train_ep,
        max_train_games: options.max_train_games,
        train_games: scanned.games,
        train_steps: scanned.steps,
        train_length_p99: scanned.length_quantile(0.99),
        test_games: tally.games,
        test_steps: tally.steps,
        distinct_test_keys: keys.distinct(),
        prefix_seen_steps: tally.prefix_seen,
        position_seen_steps: tally.position_seen,
        position_unknown_steps: tally.position_unknown,
        state_seen_steps: tally.state_seen,
        prefix_seen_share: tally.share(tally.prefix_seen),
        position_seen_share: tally.share(tally.position_seen),
        state_seen_share: tally.share(tally.state_seen),
        deviation: tally.deviation_stats(),
        bad_games: BadGames {
            test: tally.bad,
            train: scanned.bad,
            examples,
        },
    };
    cwm_formats::write_json(&out_dir.join(SUMMARY_FILE), &summary)?;
    Ok(summary)
}

/// Reads the test shards again and writes each step's training counts to `path`.
fn write_rows(
    test: &Path,
    keys: &TestKeys,
    path: &Path,
    pool: &rayon::ThreadPool,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<TestTally, NoveltyError> {
    let mut writer = NoveltyWriter::create(path)?;
    let mut tally = TestTally::default();
    let batch_games = BATCH_GAMES_PER_THREAD * pool.current_num_threads().max(1);
    for batch in Batches::open(test, batch_games, 0)? {
        if cancelled() {
            return Err(NoveltyError::Cancelled);
        }
        let batch = batch?;
        let found: Vec<GameNovelty> =
            pool.install(|| batch.par_iter().map(|g| keys.game_novelty(g)).collect());
        for (game, novelty) in batch.iter().zip(&found) {
            tally.add(game, novelty);
        }
        writer.append(&batch, &found)?;
    }
    writer.finish()?;
    Ok(tally)
}

/// The en-passant convention the tokenize shards at `path` record in their first file's
/// metadata, if they do.
fn ep_convention(path: &Path) -> Result<Option<String>, NoveltyError> {
    let files = cwm_stage_data::games::parquet_files(path)?;
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let file = File::open(first).map_err(|e| NoveltyError::io(first, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| NoveltyError::parquet(first, e))?;
    let metadata = builder.metadata().file_metadata().key_value_metadata();
    Ok(metadata
        .into_iter()
        .flatten()
        .find(|kv| kv.key == SHARD_EP_KEY)
        .and_then(|kv| kv.value.clone()))
}

/// The `novelty` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoveltyStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "max_train_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "scan at most this many training games (0 = all)",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[
    InputSpec::one("test", "the tokenize artifact of the evaluated split"),
    InputSpec::one(
        "train",
        "the tokenize artifact of the training split the models saw",
    ),
];

const DECL: KindDecl = KindDecl::new(
    "novelty",
    "marks every test step's prefix, position and state as seen or novel in a training split, with training counts",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param);

impl StageKind for NoveltyStage {
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
                    "src/parquet_file.rs",
                    "src/novelty/",
                ],
            ),
            &cwm_stage_data::shard_reader_fingerprint(),
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let hash = |name: &str| ctx.input_list(name).first().map(|a| a.hash.clone());
        let options = NoveltyOptions {
            max_train_games: ctx.params().uint("max_train_games")?,
            threads: ctx.threads(),
            test_hash: hash("test"),
            train_hash: hash("train"),
        };
        let summary = novelty(
            ctx.input("test")?,
            ctx.input("train")?,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        log_summary(ctx, &summary);
        Ok(())
    }
}

/// The summary's headline figures and every problem, in the stage's log.
fn log_summary(ctx: &StageContext, summary: &NoveltySummary) {
    let log = ctx.log();
    log.line(format!(
        "{} training games ({} steps, length p99 {} plies); {} test games, {} steps: \
         prefix seen {:.4}, position seen {:.4}, state seen {:.4}; {} games never deviate",
        summary.train_games,
        summary.train_steps,
        summary.train_length_p99,
        summary.test_games,
        summary.test_steps,
        summary.prefix_seen_share,
        summary.position_seen_share,
        summary.state_seen_share,
        summary.deviation.never,
    ));
    if summary.test_ep_convention != summary.train_ep_convention {
        log.line(format!(
            "note: the test labels use the en-passant convention {:?}, the training labels {:?}: \
             states after a double push never match across them",
            summary.test_ep_convention, summary.train_ep_convention
        ));
    }
    let bad = &summary.bad_games;
    if bad.test + bad.train > 0 {
        log.line(format!(
            "{} test and {} training games hold a token that cannot be replayed; their position \
             keys end there",
            bad.test, bad.train
        ));
        for game in &bad.examples {
            log.line(format!(
                "  {} game {:?}: token {} at step {}",
                game.input, game.game_id, game.token, game.t
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_fingerprints_its_own_files_and_the_shard_reader() {
        let fingerprint = NoveltyStage.fingerprint();
        for file in [
            "src/novelty/keys.rs",
            "src/novelty/scan.rs",
            "src/novelty/mod.rs",
        ] {
            assert!(fingerprint.contains(&format!("{file}=")), "{fingerprint}");
        }
        assert!(!fingerprint.contains("src/diagnose"), "{fingerprint}");
        assert!(!fingerprint.contains("=missing"), "{fingerprint}");
        assert!(fingerprint.contains(&cwm_stage_data::shard_reader_fingerprint()));
    }

    #[test]
    fn the_declaration_takes_two_tokenize_artifacts_and_unkeyed_threads() {
        assert_eq!(NoveltyStage.name(), "novelty");
        let names: Vec<&str> = match NoveltyStage.inputs() {
            InputsDecl::Named(inputs) => inputs.iter().map(|i| i.name).collect(),
            other => panic!("inputs {other:?}"),
        };
        assert_eq!(names, ["test", "train"]);
        let threads = NoveltyStage.params().iter().find(|p| p.name == "threads");
        assert!(threads.is_some_and(|p| !p.keyed));
        assert_eq!(NoveltyStage.outputs(), ["out"]);
    }
}
