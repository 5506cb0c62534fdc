//! The `random_uniform` stage: uniformly random legal games (spec E.5) as a games table, so
//! `tokenize` and `export_jsonl` consume them like real games.
//!
//! * **Params**: `games` (kept games to write), `seed` (0), `rng` (`reference`: the reference
//!   generator bit for bit, sequential; `fast`: a fast seeded RNG, parallel, deterministic for a
//!   seed whatever the thread count), `min_fullmoves` (10).
//! * **Output** `out`: a games artifact. Ids are `cwm_random_NNNNN` (the index among all
//!   generated games, short ones included), `result` is python-chess's
//!   `result(claim_draw=True)`, `termination` the rule that ended the game
//!   (`CHECKMATE`, `FIFTY_MOVES`, ...); site, ratings and time control are null.
//!
//! The generators are `cwm_random_uniform`'s; this module only writes their games.

use std::path::Path;

use cwm_chess::encode::EpConvention;
use cwm_random_uniform::{Game, Games, Mode};
use cwm_stage::{
    KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext, StageError, StageKind,
    Threads, ThreadsDecl,
};

use crate::games::{GAMES_FILE, GameRecord, GamesWriter};
use crate::jsonl::JsonlShards;
use crate::parse::pool;
use crate::{DataError, OutputFormat};

/// Settings of a random-uniform run.
#[derive(Debug, Clone, Copy)]
pub struct RandomUniformOptions {
    /// Kept games to produce.
    pub games: u64,
    /// The seed.
    pub seed: u64,
    /// Reference or fast generator.
    pub mode: Mode,
    /// Games need `2 * min_fullmoves` plies.
    pub min_fullmoves: u32,
    /// Threads (used by the fast generator only).
    pub threads: usize,
}

impl Default for RandomUniformOptions {
    fn default() -> RandomUniformOptions {
        RandomUniformOptions {
            games: 10_000,
            seed: 0,
            mode: Mode::Reference,
            min_fullmoves: 10,
            threads: 1,
        }
    }
}

/// The games-table row of a generated game.
pub fn record_of_random(game: &Game) -> GameRecord {
    GameRecord {
        id: game.id(),
        source_index: game.index(),
        result: game.result().as_str().to_owned(),
        termination: Some(game.termination().python_name().to_owned()),
        moves: game.moves().to_vec(),
        ..GameRecord::default()
    }
}

/// Generates `options.games` kept games into `out_dir` as a games table
/// (`games.parquet`) or as reference JSONL shards. Returns the number of games written.
///
/// # Errors
///
/// [`DataError`] on write errors or cancellation.
pub fn generate_random_uniform(
    options: &RandomUniformOptions,
    out_dir: &Path,
    format: OutputFormat,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<u64, DataError> {
    std::fs::create_dir_all(out_dir).map_err(|e| DataError::io(out_dir, e))?;
    progress.set_total(options.games);
    let pool = pool(options.threads)?;
    let mut sink = match format {
        OutputFormat::Parquet => {
            let metadata = [
                ("cwm.rng".to_owned(), mode_name(options.mode).to_owned()),
                ("cwm.seed".to_owned(), options.seed.to_string()),
            ];
            Sink::Parquet(Box::new(GamesWriter::create(
                &out_dir.join(GAMES_FILE),
                &metadata,
            )?))
        }
        OutputFormat::Jsonl { shard_size } => Sink::Jsonl(JsonlShards::new(out_dir, shard_size)?),
    };
    let written = pool.install(|| -> Result<u64, DataError> {
        let mut written = 0u64;
        if options.games == 0 {
            return Ok(0);
        }
        for game in Games::new(options.mode, options.seed).kept(options.min_fullmoves) {
            sink.push(&game)?;
            written += 1;
            progress.inc(1);
            if written >= options.games {
                break;
            }
            if written.is_multiple_of(256) && cancelled() {
                return Err(DataError::Cancelled);
            }
        }
        Ok(written)
    })?;
    sink.finish()?;
    Ok(written)
}

/// Where generated games go.
enum Sink {
    Parquet(Box<GamesWriter>),
    Jsonl(JsonlShards),
}

impl Sink {
    fn push(&mut self, game: &Game) -> Result<(), DataError> {
        match self {
            Sink::Parquet(writer) => writer.push(&record_of_random(game)),
            Sink::Jsonl(shards) => {
                let moves: Vec<u16> = game.tokens().collect();
                let states: Vec<_> = game.states(EpConvention::Reference).collect();
                shards.write(&game.id(), &moves, &states, game.result().as_str())
            }
        }
    }

    fn finish(self) -> Result<(), DataError> {
        match self {
            Sink::Parquet(writer) => writer.finish().map(|_| ()),
            Sink::Jsonl(shards) => shards.finish().map(|_| ()),
        }
    }
}

/// The param spelling of a generator mode.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Reference => "reference",
        Mode::Fast => "fast",
    }
}

/// The `random_uniform` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomUniformStage;

const RNG_CHOICES: &[&str] = &["reference", "fast"];

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required("games", ParamType::Int, "kept games to generate"),
    ParamSpec::with_default("seed", ParamType::Int, ParamDefault::Int(0), "the seed"),
    ParamSpec::with_default(
        "rng",
        ParamType::Choice(RNG_CHOICES),
        ParamDefault::Str("reference"),
        "reference: the reference generator bit for bit; fast: a fast parallel RNG",
    ),
    ParamSpec::with_default(
        "min_fullmoves",
        ParamType::Int,
        ParamDefault::Int(10),
        "keep games of at least 2 * min_fullmoves plies",
    ),
];

const DECL: KindDecl = KindDecl::new(
    "random_uniform",
    "generates uniformly random legal games (reference or fast RNG) as a games table",
)
.params(PARAMS)
.threads(ThreadsDecl::Custom(|params| match params.str("rng") {
    Ok("fast") => Threads::All,
    _ => Threads::Fixed(1),
}));

impl StageKind for RandomUniformStage {
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
                    "src/random_uniform.rs",
                    "src/games.rs",
                    "src/jsonl.rs",
                    "src/parse.rs",
                    "src/tokenize.rs",
                ],
            ),
            cwm_chess::SOURCE_FINGERPRINT,
            cwm_random_uniform::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let mode = match params.str("rng")? {
            "fast" => Mode::Fast,
            _ => Mode::Reference,
        };
        let min_fullmoves = u32::try_from(params.uint("min_fullmoves")?)
            .map_err(|_| StageError::Param("min_fullmoves is too large".into()))?;
        let options = RandomUniformOptions {
            games: params.uint("games")?,
            seed: params.uint("seed")?,
            mode,
            min_fullmoves,
            threads: ctx.threads(),
        };
        let n = generate_random_uniform(
            &options,
            ctx.output("out")?,
            OutputFormat::Parquet,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        ctx.log().line(format!("{n} games"));
        Ok(())
    }
}

/// Test fixture: writes `games` fast-mode random games of `seed` as a games table in `dir`.
#[cfg(test)]
pub(crate) fn fast_games_table(dir: &Path, games: u64, seed: u64) {
    let options = RandomUniformOptions {
        games,
        seed,
        mode: Mode::Fast,
        ..RandomUniformOptions::default()
    };
    generate_random_uniform(
        &options,
        dir,
        OutputFormat::Parquet,
        &Progress::disabled(),
        &|| false,
    )
    .expect("random games table");
}
