//! The chess data stage kinds of cwm: `download`, `parse`, `split`, `tokenize`,
//! `random_uniform` and `random_continuation`, and the library functions the one-shot CLI
//! commands wrap.
//!
//! * One module per stage kind, holding its params, inputs, outputs and code: `download`,
//!   `parse`, [`split`], `tokenize`, `random_uniform`, `continuation` (`random_continuation`:
//!   real games' first `k` plies continued with random moves, beyond-spec E6).
//! * Games flow between stages as one Parquet table ([`games`]): id, source index, Site,
//!   result, ratings, time control, termination, plies and the packed move ids (no `START`, no
//!   player names, no states). `tokenize` recomputes the state labels from the moves and writes
//!   the training shards; [`jsonl`] converts to and from the reference's JSONL.
//! * The chess itself (SAN replay, move packing, state labels, ids, the MD5 split) is
//!   `cwm_chess`'s; the random games are `cwm_random_uniform`'s. This crate does files,
//!   streaming, parallelism and reporting.
//! * Every stage streams: memory is bounded by a chunk of games and a Parquet row group, never
//!   by the corpus. Parallel work runs on a local rayon pool of the stage's thread budget, and
//!   outputs are identical for every thread count.
//! * Bad games are counted rejections (`parse`'s `rejects.json`), never errors; errors
//!   ([`DataError`]) are for files, formats, the network and cancellation.
//!
//! ```no_run
//! use cwm_stage_data::{OutputFormat, ProcessOptions, process_pgn};
//!
//! let report = process_pgn(&ProcessOptions {
//!     pgn: "games.pgn.zst".into(),
//!     out_dir: "out".into(),
//!     format: OutputFormat::Parquet,
//!     ..ProcessOptions::default()
//! })?;
//! println!("{} kept, {} rejected", report.kept, report.rejected);
//! # Ok::<(), cwm_stage_data::DataError>(())
//! ```
#![deny(missing_docs)]

// `games`, `jsonl` and `split` stay public: other crates name items in them by path.
mod continuation;
mod download;
mod error;
pub mod games;
pub mod jsonl;
mod parse;
mod random_uniform;
mod shards;
pub mod split;
mod tokenize;

use std::path::PathBuf;

use cwm_stage::{Progress, StageKind};

pub use continuation::{
    ContinuationOptions, ContinuationSummary, RandomContinuationStage, SwitchCounts,
    continuation_id, continue_games, switch_ply, switch_seed,
};
pub use download::DownloadStage;
pub use error::DataError;
pub use jsonl::{export_jsonl, import_jsonl};
pub use parse::{ID_KEY_ENV, IdKeySource, ParseOptions, ParseReport, ParseStage, RejectExample};
pub use random_uniform::{RandomUniformOptions, RandomUniformStage, generate_random_uniform};
pub use shards::{ShardReader, TokenizedGame};
pub use split::SplitStage;
pub use tokenize::{TokenizeOptions, TokenizeStage, TokenizeSummary, tokenize_games};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// The files of this crate that read tokenized shards ([`ShardReader`]).
const SHARD_READER_FILES: &[&str] = &[
    "Cargo.toml",
    "src/lib.rs",
    "src/error.rs",
    "src/shards.rs",
    "src/games.rs",
];

/// The files of this crate that read tokenized shards or the reference's JSONL ([`jsonl`],
/// which replays moves with `tokenize`'s code and uses `parse`'s thread pool).
const SHARD_OR_JSONL_READER_FILES: &[&str] = &[
    "Cargo.toml",
    "src/lib.rs",
    "src/error.rs",
    "src/shards.rs",
    "src/games.rs",
    "src/jsonl.rs",
    "src/parse.rs",
    "src/tokenize.rs",
];

/// The code fingerprint of reading tokenized shards, for stage kinds of other crates that do
/// (`train`): it covers those files only, so editing `download` invalidates no training.
pub fn shard_reader_fingerprint() -> String {
    reader_fingerprint(SHARD_READER_FILES)
}

/// The code fingerprint of reading tokenized shards or reference JSONL (`evaluate`).
pub fn shard_or_jsonl_reader_fingerprint() -> String {
    reader_fingerprint(SHARD_OR_JSONL_READER_FILES)
}

/// These files of this crate, with the chess code every reader runs.
fn reader_fingerprint(files: &[&str]) -> String {
    cwm_stage::combine_fingerprints(&[
        &cwm_stage::fingerprint_of_files(FILE_FINGERPRINTS, files),
        &cwm_chess::games_fingerprint(),
    ])
}

/// Every stage kind of this crate.
pub fn stage_kinds() -> Vec<Box<dyn StageKind>> {
    vec![
        Box::new(DownloadStage),
        Box::new(ParseStage),
        Box::new(SplitStage),
        Box::new(TokenizeStage),
        Box::new(RandomUniformStage),
        Box::new(RandomContinuationStage),
    ]
}

/// How the one-shot commands write games.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// A games table, `games.parquet` ([`games`]).
    Parquet,
    /// The reference's JSONL shards `chess_000000.jsonl`, ... (spec E.6), with states.
    Jsonl {
        /// Games per shard.
        shard_size: u64,
    },
}

/// Settings of [`process_pgn`] (the reference's `data/process.py`).
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// The `.pgn` or `.pgn.zst` file.
    pub pgn: PathBuf,
    /// The output directory (created if needed).
    pub out_dir: PathBuf,
    /// Output format.
    pub format: OutputFormat,
    /// Games need `2 * min_fullmoves` plies (10).
    pub min_fullmoves: usize,
    /// Stop after this many kept games (0 = all).
    pub max_games: u64,
    /// Worker threads.
    pub threads: usize,
    /// The id key (default: [`IdKeySource::resolve`]`(None)`, i.e. the environment).
    pub id_key: IdKeySource,
}

impl Default for ProcessOptions {
    fn default() -> ProcessOptions {
        ProcessOptions {
            pgn: PathBuf::new(),
            out_dir: PathBuf::new(),
            format: OutputFormat::Parquet,
            min_fullmoves: 10,
            max_games: 0,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            id_key: IdKeySource::resolve(None),
        }
    }
}

/// Replays a PGN file into `out_dir`: `games.parquet` (or JSONL shards with states, exactly as
/// the reference writes them) plus `rejects.json`. Returns the report.
///
/// # Errors
///
/// [`DataError`] on I/O errors of the input or the output.
pub fn process_pgn(options: &ProcessOptions) -> Result<ParseReport, DataError> {
    let out = &options.out_dir;
    std::fs::create_dir_all(out).map_err(|e| DataError::io(out, e))?;
    let parse_options = ParseOptions {
        min_fullmoves: options.min_fullmoves,
        skip_games: 0,
        max_games: options.max_games,
        threads: options.threads,
        id_key: options.id_key.clone(),
        // Only the JSONL shards hold states; the games table stores moves only.
        states: matches!(options.format, OutputFormat::Jsonl { .. }),
    };
    let report_path = out.join("rejects.json");
    let report = match options.format {
        OutputFormat::Parquet => parse::parse_to_parquet(
            &options.pgn,
            &out.join(games::GAMES_FILE),
            &report_path,
            &parse_options,
            &Progress::disabled(),
            &|| false,
        )?,
        OutputFormat::Jsonl { shard_size } => {
            let mut shards = jsonl::JsonlShards::new(out, shard_size)?;
            let report = parse::parse_pgn_file(
                &options.pgn,
                &parse_options,
                &Progress::disabled(),
                &|| false,
                &mut |id, game| {
                    let result = game.headers.result.as_deref().unwrap_or("*");
                    shards.write(&id, &game.replay.moves, &game.replay.states, result)
                },
            )?;
            shards.finish()?;
            std::fs::write(&report_path, report.to_json())
                .map_err(|e| DataError::io(&report_path, e))?;
            report
        }
    };
    Ok(report)
}

#[cfg(test)]
mod fingerprint_tests {
    use super::*;

    /// Editing one stage's module must not invalidate the cached results of
    /// the others (a full Lichess month is not reparsed because tokenize changed).
    #[test]
    fn each_kind_fingerprints_only_the_files_it_runs() {
        let parse = ParseStage.fingerprint();
        assert!(parse.contains("src/parse.rs="), "{parse}");
        assert!(!parse.contains("src/tokenize.rs="), "{parse}");
        assert!(!parse.contains("src/split.rs="), "{parse}");
        assert!(parse.contains(&cwm_chess::games_fingerprint()));
        assert!(!parse.contains("src/rules/"), "{parse}");
        let download = DownloadStage.fingerprint();
        assert!(!download.contains("src/parse.rs="), "{download}");
        assert!(!download.contains(&cwm_chess::games_fingerprint()));
        assert!(TokenizeStage.fingerprint().contains("src/parse.rs="));
        assert!(!SplitStage.fingerprint().contains("src/tokenize.rs="));
        let continuation = RandomContinuationStage.fingerprint();
        assert!(
            continuation.contains("src/continuation.rs="),
            "{continuation}"
        );
        assert!(!continuation.contains("src/tokenize.rs="), "{continuation}");
        assert!(
            !continuation.contains("src/random_uniform.rs="),
            "{continuation}"
        );
        assert!(continuation.contains(cwm_random_uniform::SOURCE_FINGERPRINT));
        assert!(
            !RandomUniformStage
                .fingerprint()
                .contains("src/continuation.rs=")
        );
        for kind in stage_kinds() {
            assert!(!kind.fingerprint().contains("=missing"), "{}", kind.name());
        }
    }

    /// Train and evaluate read shards: editing `download` or `split` must not invalidate them.
    #[test]
    fn shard_readers_fingerprint_only_the_reading_code() {
        for fingerprint in [
            shard_reader_fingerprint(),
            shard_or_jsonl_reader_fingerprint(),
        ] {
            assert!(fingerprint.contains("src/shards.rs="), "{fingerprint}");
            assert!(!fingerprint.contains("src/download.rs="), "{fingerprint}");
            assert!(!fingerprint.contains("src/split.rs="), "{fingerprint}");
            assert!(
                !fingerprint.contains("src/random_uniform.rs="),
                "{fingerprint}"
            );
            assert!(!fingerprint.contains("=missing"), "{fingerprint}");
        }
        assert!(!shard_reader_fingerprint().contains("src/jsonl.rs="));
        assert!(shard_or_jsonl_reader_fingerprint().contains("src/jsonl.rs="));
    }
}
