//! The `random_uniform` stage: uniformly random legal games (spec E.5) as a games table, so
//! `tokenize` and `export_jsonl` consume them like real games.
//!
//! * **Params**: `games` (kept games to write), `seed` (0), `rng` (`reference`: the reference
//!   generator bit for bit, sequential; `fast`: a fast seeded RNG, parallel, deterministic for a
//!   seed whatever the thread count), `min_fullmoves` (10), `special_bias` (absent: uniform
//!   play). `special_bias = p` in `(0, 1]` plays beyond-spec E6's special-biased games
//!   (`cwm_random_uniform::special`: at a ply with a legal castling, en-passant or promotion
//!   move, one of those with probability `p`) and needs `rng: fast`; `0` is the same as absent
//!   for either `rng`, and a value outside `[0, 1]` is a param error. The param has no default
//!   value on purpose: a default would enter the cache key of every instance that leaves it
//!   out.
//! * **Output** `out`: a games artifact. Ids are `cwm_random_NNNNN` (the index among all
//!   generated games, short ones included), `result` is python-chess's
//!   `result(claim_draw=True)`, `termination` the rule that ended the game
//!   (`CHECKMATE`, `FIFTY_MOVES`, ...); site, ratings and time control are null. The footer
//!   records `cwm.rng`, `cwm.seed` and, for biased games, `cwm.special_bias`.
//!
//! The generators are `cwm_random_uniform`'s; this module only writes their games.

use std::path::Path;

use cwm_chess::encode::EpConvention;
use cwm_random_uniform::{Game, Games, Mode, SpecialBias};
use cwm_stage::{
    KindDecl, ParamDefault, ParamSpec, ParamType, Params, Progress, StageContext, StageError,
    StageKind, Threads, ThreadsDecl,
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
    generate_games(options, None, out_dir, format, progress, cancelled)
}

/// [`generate_random_uniform`], or with `special: Some(bias)` the special-biased games of
/// `options.seed` (fast mode's per-game RNG, whatever `options.mode` says; the stage requires
/// `rng: fast` for them).
///
/// # Errors
///
/// [`DataError`] on write errors or cancellation.
pub(crate) fn generate_games(
    options: &RandomUniformOptions,
    special: Option<SpecialBias>,
    out_dir: &Path,
    format: OutputFormat,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<u64, DataError> {
    std::fs::create_dir_all(out_dir).map_err(|e| DataError::io(out_dir, e))?;
    progress.set_total(options.games);
    let pool = pool(options.threads)?;
    let (games, rng) = match special {
        Some(bias) => (Games::special(options.seed, bias), "fast"),
        None => (
            Games::new(options.mode, options.seed),
            mode_name(options.mode),
        ),
    };
    let mut sink = match format {
        OutputFormat::Parquet => {
            let mut metadata = vec![
                ("cwm.rng".to_owned(), rng.to_owned()),
                ("cwm.seed".to_owned(), options.seed.to_string()),
            ];
            if let Some(bias) = special {
                metadata.push(("cwm.special_bias".to_owned(), bias.get().to_string()));
            }
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
        for game in games.kept(options.min_fullmoves) {
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
    // Optional, not defaulted: a default value would join the cache key of every instance.
    ParamSpec::optional(
        SPECIAL_BIAS,
        ParamType::Float,
        "p in [0, 1]: at a ply with a legal castling, en-passant or promotion move, play one of \
         those with probability p (needs rng: fast); absent or 0: uniform play",
    ),
];

/// The name of the special-bias param.
const SPECIAL_BIAS: &str = "special_bias";

/// The stage's special bias: `None` when the param is absent or 0 (uniform play with either
/// generator), `Some` for `0 < p <= 1`, which needs the fast generator.
fn special_bias(params: &Params, mode: Mode) -> Result<Option<SpecialBias>, StageError> {
    if params.get(SPECIAL_BIAS).is_none() {
        return Ok(None);
    }
    let p = params.float(SPECIAL_BIAS)?;
    let bias = SpecialBias::new(p)
        .map_err(|e| StageError::Param(format!("parameter `{SPECIAL_BIAS}`: {e}")))?;
    if bias.is_zero() {
        return Ok(None);
    }
    if mode != Mode::Fast {
        return Err(StageError::Param(format!(
            "parameter `{SPECIAL_BIAS}` = {p} needs `rng: fast` (the reference generator \
             replays the reference's uniform games only)"
        )));
    }
    Ok(Some(bias))
}

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
            &cwm_chess::games_fingerprint(),
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
        let special = special_bias(params, mode)?;
        let options = RandomUniformOptions {
            games: params.uint("games")?,
            seed: params.uint("seed")?,
            mode,
            min_fullmoves,
            threads: ctx.threads(),
        };
        let n = generate_games(
            &options,
            special,
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

#[cfg(test)]
mod tests {
    use cwm_stage::ParamValue;

    use super::*;

    fn params(rng: &str, special: Option<ParamValue>) -> Params {
        let mut params = Params::new();
        params.insert("rng", ParamValue::Str(rng.to_owned()));
        if let Some(value) = special {
            params.insert(SPECIAL_BIAS, value);
        }
        params
    }

    /// A default would be filled into every instance's params, and so into its cache key.
    #[test]
    fn special_bias_has_no_default_so_existing_keys_keep_their_params() {
        let spec = PARAMS
            .iter()
            .find(|spec| spec.name == SPECIAL_BIAS)
            .unwrap();
        assert_eq!(spec.default, ParamDefault::Absent);
        assert!(spec.default.value().is_none());
        assert!(spec.keyed);
    }

    #[test]
    fn special_bias_param_values() {
        let fast = |value| special_bias(&params("fast", value), Mode::Fast);
        assert_eq!(fast(None).unwrap(), None);
        assert_eq!(fast(Some(ParamValue::Float(0.0))).unwrap(), None);
        assert_eq!(
            fast(Some(ParamValue::Int(1))).unwrap(),
            Some(SpecialBias::ONE)
        );
        let half = fast(Some(ParamValue::Float(0.5))).unwrap().unwrap();
        assert_eq!(half.get(), 0.5);
        for bad in [1.5, -0.25, f64::NAN] {
            let err = fast(Some(ParamValue::Float(bad))).unwrap_err();
            assert!(
                matches!(&err, StageError::Param(m) if m.contains(SPECIAL_BIAS)),
                "{err}"
            );
        }
        let err = fast(Some(ParamValue::Str("high".into()))).unwrap_err();
        assert!(matches!(err, StageError::Param(_)), "{err}");
    }

    #[test]
    fn special_bias_needs_the_fast_generator_unless_zero() {
        let reference = |value| special_bias(&params("reference", value), Mode::Reference);
        assert_eq!(reference(None).unwrap(), None);
        assert_eq!(reference(Some(ParamValue::Float(0.0))).unwrap(), None);
        let err = reference(Some(ParamValue::Float(0.5))).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("rng: fast"), "{message}");
    }

    #[test]
    fn biased_tables_record_the_bias_and_differ_from_uniform_ones() {
        let dir = std::env::temp_dir().join(format!("cwm-ru-special-{}", std::process::id()));
        let options = RandomUniformOptions {
            games: 12,
            seed: 4,
            mode: Mode::Fast,
            ..RandomUniformOptions::default()
        };
        let write = |name: &str, special| {
            let out = dir.join(name);
            let progress = Progress::disabled();
            let n = generate_games(
                &options,
                special,
                &out,
                OutputFormat::Parquet,
                &progress,
                &|| false,
            )
            .unwrap();
            assert_eq!(n, 12);
            std::fs::read(out.join(GAMES_FILE)).unwrap()
        };
        let uniform = write("uniform", None);
        let biased = write("biased", Some(SpecialBias::ONE));
        assert_ne!(uniform, biased);
        let footer = String::from_utf8_lossy(&biased);
        assert!(footer.contains("cwm.special_bias"));
        assert!(!String::from_utf8_lossy(&uniform).contains("cwm.special_bias"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
