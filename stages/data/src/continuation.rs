//! The `random_continuation` stage: real games cut after `k` plies and continued with uniformly
//! random legal moves until the game ends (beyond-spec E6's real-prefix/random-continuation
//! split), so that leaving human play can be told apart from game length.
//!
//! * **Input** `games`: a games artifact of real games (a `split` output, `parse.games`).
//! * **Params**: `prefix_plies` (the switch plies, a list of distinct `k`, required: the
//!   specification's `[10, 20, 40]`), `seed` (0), `min_fullmoves` (10: keep a game of at least
//!   `2 * min_fullmoves` plies in all, as `random_uniform` does), `max_games` (0 = all: stop after
//!   writing this many games).
//! * **Output** `out`: a games artifact (`games.parquet`): for each input game in input order, its
//!   continuation after each `k` in the list's order. The id is `<source id>~k<k>`
//!   ([`continuation_id`]; [`switch_ply`] reads `k` back); `source_index`, site, ratings and time
//!   control are the source game's (they describe the real game the prefix comes from); `moves`
//!   are the source's first `k` moves, then the random ones; `result` and `termination` are the
//!   arbiter's (python-chess's `outcome(claim_draw=True)`, e.g. `FIFTY_MOVES`).
//! * The footer records the settings and, per switch ply, what was written and skipped
//!   ([`ContinuationSummary`], read back with [`ContinuationSummary::from_footer`]):
//!   `cwm.prefix_plies` (`10,20,40`), `cwm.seed`, `cwm.min_fullmoves`, `cwm.input_games` (games
//!   read: all of them, or up to the last one written from when `max_games` stops the run), and,
//!   as lists in the order of `cwm.prefix_plies`, `cwm.written` and the skipped counts
//!   `cwm.skipped_shorter_than_prefix` (fewer than `k` plies), `cwm.skipped_over_at_switch` (the
//!   position at ply `k` already ends the game, so there is no random move) and
//!   `cwm.skipped_below_min_fullmoves`. For each `k`, written plus skipped games equal the games
//!   continued after it. The same summary is the stage's last progress message and log line.
//!
//! The continuation of a game is `cwm_random_uniform::continuation`'s: the prefix replayed
//! through the arbiter (its positions count towards repetitions; a draw claimable before ply
//! `k` does not end the game), then the fast generator's moves and termination, from the
//! stream of `(seed, k)` ([`switch_seed`]) for the game's `source_index`. A game's continuation
//! after `k` therefore depends on the game, the seed and `k` only: not on the other games of the
//! input, the other switch plies, nor the thread count. Batches of games are continued in
//! parallel on a local rayon pool and written in input order; a prefix move that is not legal
//! fails the stage, naming the game and the ply.
//!
//! The footer's counts are known only at the end, and a Parquet footer is fixed when its
//! writer is created, so the games go to `games.parquet.partial` first and are then copied,
//! row group by row group, into `games.parquet` with the full footer.

use std::fs::File;
use std::path::Path;

use cwm_random_uniform::{Arbiter, Continuation, ContinuationError, play_continuation};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind, Threads, ThreadsDecl,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rayon::prelude::*;

use crate::DataError;
use crate::games::{
    GAMES_FILE, GameRecord, GamesReader, GamesWriter, ROW_GROUP_GAMES, parquet_files,
};
use crate::parse::pool;

/// Games continued per worker thread and parallel batch.
const BATCH_GAMES_PER_THREAD: usize = 512;

/// The file the games are written to before the footer is known.
const PARTIAL_FILE: &str = "games.parquet.partial";

/// Footer keys.
const PREFIX_PLIES: &str = "cwm.prefix_plies";
const SEED: &str = "cwm.seed";
const MIN_FULLMOVES: &str = "cwm.min_fullmoves";
const INPUT_GAMES: &str = "cwm.input_games";
const WRITTEN: &str = "cwm.written";
const SHORTER_THAN_PREFIX: &str = "cwm.skipped_shorter_than_prefix";
const OVER_AT_SWITCH: &str = "cwm.skipped_over_at_switch";
const BELOW_MIN_FULLMOVES: &str = "cwm.skipped_below_min_fullmoves";

/// Settings of a continuation run.
#[derive(Debug, Clone)]
pub struct ContinuationOptions {
    /// The switch plies `k` (distinct): the real moves kept, one continuation for each.
    pub prefix_plies: Vec<usize>,
    /// The seed of the random moves.
    pub seed: u64,
    /// Games need `2 * min_fullmoves` plies in all.
    pub min_fullmoves: u32,
    /// Stop after writing this many games (0 = all).
    pub max_games: u64,
    /// Worker threads.
    pub threads: usize,
}

impl Default for ContinuationOptions {
    fn default() -> ContinuationOptions {
        ContinuationOptions {
            prefix_plies: vec![20],
            seed: 0,
            min_fullmoves: 10,
            max_games: 0,
            threads: 1,
        }
    }
}

/// What became of the continuations after one switch ply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchCounts {
    /// The switch ply `k`.
    pub prefix_plies: usize,
    /// Games written.
    pub written: u64,
    /// Games skipped for having fewer than `k` plies.
    pub shorter_than_prefix: u64,
    /// Games skipped because the position at ply `k` already ends the game.
    pub over_at_switch: u64,
    /// Continued games skipped for being shorter than `2 * min_fullmoves` plies.
    pub below_min_fullmoves: u64,
}

impl SwitchCounts {
    /// Games skipped, for any reason.
    pub fn skipped(&self) -> u64 {
        self.shorter_than_prefix + self.over_at_switch + self.below_min_fullmoves
    }

    /// What became of `fate`'s game, counted.
    fn count(&mut self, fate: &Fate) {
        match fate {
            Fate::Written(_) => self.written += 1,
            Fate::ShorterThanPrefix => self.shorter_than_prefix += 1,
            Fate::OverAtSwitch => self.over_at_switch += 1,
            Fate::BelowMinFullmoves => self.below_min_fullmoves += 1,
        }
    }
}

/// What a continuation run read, wrote and skipped, and the settings it ran with (the
/// table's footer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContinuationSummary {
    /// The seed.
    pub seed: u64,
    /// The minimum length in full moves.
    pub min_fullmoves: u32,
    /// Games read from the input.
    pub input_games: u64,
    /// Per switch ply, in the order of the options.
    pub per_switch: Vec<SwitchCounts>,
}

impl ContinuationSummary {
    /// Games written, over every switch ply.
    pub fn written(&self) -> u64 {
        self.per_switch.iter().map(|c| c.written).sum()
    }

    /// Games skipped, for any reason, over every switch ply.
    pub fn skipped(&self) -> u64 {
        self.per_switch.iter().map(SwitchCounts::skipped).sum()
    }

    /// One line saying what was written and skipped after each switch ply.
    pub fn describe(&self) -> String {
        let minimum = 2 * u64::from(self.min_fullmoves);
        let per_switch: Vec<String> = self
            .per_switch
            .iter()
            .map(|c| {
                let k = c.prefix_plies;
                format!(
                    "after ply {k} {} continued, {} skipped ({} shorter than {k} plies, {} over \
                     at ply {k}, {} under {minimum} plies)",
                    c.written,
                    c.skipped(),
                    c.shorter_than_prefix,
                    c.over_at_switch,
                    c.below_min_fullmoves,
                )
            })
            .collect();
        format!(
            "{} games from {} real games: {}",
            self.written(),
            self.input_games,
            per_switch.join("; ")
        )
    }

    /// The footer's key-value pairs.
    pub fn to_footer(&self) -> Vec<(String, String)> {
        let list = |of: fn(&SwitchCounts) -> u64| -> String {
            let values: Vec<String> = self.per_switch.iter().map(|c| of(c).to_string()).collect();
            values.join(",")
        };
        [
            (PREFIX_PLIES, list(|c| c.prefix_plies as u64)),
            (SEED, self.seed.to_string()),
            (MIN_FULLMOVES, self.min_fullmoves.to_string()),
            (INPUT_GAMES, self.input_games.to_string()),
            (WRITTEN, list(|c| c.written)),
            (SHORTER_THAN_PREFIX, list(|c| c.shorter_than_prefix)),
            (OVER_AT_SWITCH, list(|c| c.over_at_switch)),
            (BELOW_MIN_FULLMOVES, list(|c| c.below_min_fullmoves)),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// Reads the summary back from the footer of a continuation table (`path`: the artifact
    /// directory or its `games.parquet`), checking that the games written add up to the
    /// table's rows.
    ///
    /// # Errors
    ///
    /// [`DataError`] when the footer cannot be read, lacks a key, holds something that is not
    /// a count (or lists of different lengths), or disagrees with the table's rows.
    pub fn from_footer(path: &Path) -> Result<ContinuationSummary, DataError> {
        let files = parquet_files(path)?;
        let file = match files.as_slice() {
            [one] => one,
            _ => return Err(DataError::format(path, "expected one games table")),
        };
        let f = File::open(file).map_err(|e| DataError::io(file, e))?;
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| DataError::parquet(file, e))?;
        let metadata = builder.metadata().file_metadata();
        let footer = Footer {
            file,
            kv: metadata.key_value_metadata().map_or(&[][..], Vec::as_slice),
        };
        let ks = footer.counts(PREFIX_PLIES)?;
        let list = |key: &str| -> Result<Vec<u64>, DataError> {
            let values = footer.counts(key)?;
            if values.len() == ks.len() {
                Ok(values)
            } else {
                let message = format!(
                    "footer `{key}` has {} values for {} switch plies",
                    values.len(),
                    ks.len()
                );
                Err(DataError::format(file, message))
            }
        };
        let (written, shorter, over, below) = (
            list(WRITTEN)?,
            list(SHORTER_THAN_PREFIX)?,
            list(OVER_AT_SWITCH)?,
            list(BELOW_MIN_FULLMOVES)?,
        );
        let too_large = |key: &str| DataError::format(file, format!("footer `{key}` is too large"));
        let per_switch = (0..ks.len())
            .map(|i| {
                Ok(SwitchCounts {
                    prefix_plies: usize::try_from(ks[i]).map_err(|_| too_large(PREFIX_PLIES))?,
                    written: written[i],
                    shorter_than_prefix: shorter[i],
                    over_at_switch: over[i],
                    below_min_fullmoves: below[i],
                })
            })
            .collect::<Result<Vec<_>, DataError>>()?;
        let summary = ContinuationSummary {
            seed: footer.count(SEED)?,
            min_fullmoves: u32::try_from(footer.count(MIN_FULLMOVES)?)
                .map_err(|_| too_large(MIN_FULLMOVES))?,
            input_games: footer.count(INPUT_GAMES)?,
            per_switch,
        };
        let rows = u64::try_from(metadata.num_rows()).unwrap_or(0);
        if summary.written() != rows {
            let message = format!(
                "footer says {} games were written, the table holds {rows}",
                summary.written()
            );
            return Err(DataError::format(file, message));
        }
        Ok(summary)
    }
}

/// The key-value pairs of a table's footer.
struct Footer<'a> {
    file: &'a Path,
    kv: &'a [parquet::file::metadata::KeyValue],
}

impl Footer<'_> {
    fn value(&self, key: &str) -> Result<&str, DataError> {
        self.kv
            .iter()
            .find(|k| k.key == key)
            .and_then(|k| k.value.as_deref())
            .ok_or_else(|| DataError::format(self.file, format!("footer has no `{key}`")))
    }

    /// The comma-separated counts of `key`.
    fn counts(&self, key: &str) -> Result<Vec<u64>, DataError> {
        let value = self.value(key)?;
        value
            .split(',')
            .map(|item| {
                item.trim().parse::<u64>().map_err(|_| {
                    DataError::format(
                        self.file,
                        format!("footer `{key}` = {value:?} is not a list of counts"),
                    )
                })
            })
            .collect()
    }

    /// The one count of `key`.
    fn count(&self, key: &str) -> Result<u64, DataError> {
        let value = self.value(key)?;
        value.parse::<u64>().map_err(|_| {
            DataError::format(
                self.file,
                format!("footer `{key}` = {value:?} is not a count"),
            )
        })
    }
}

/// The id of the continuation of game `source_id` after `prefix_plies` plies:
/// `<source_id>~k<prefix_plies>`.
pub fn continuation_id(source_id: &str, prefix_plies: usize) -> String {
    format!("{source_id}~k{prefix_plies}")
}

/// The switch ply of a [`continuation_id`]: the digits after its last `~k`, or `None` for an
/// id that does not end that way.
pub fn switch_ply(id: &str) -> Option<usize> {
    let (_, digits) = id.rsplit_once("~k")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The seed of the random moves after switch ply `k` of a run seeded with `seed`: each switch
/// ply its own stream, the same whatever other plies the run has.
pub fn switch_seed(seed: u64, k: usize) -> u64 {
    seed ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What became of one input game.
enum Fate {
    Written(GameRecord),
    ShorterThanPrefix,
    OverAtSwitch,
    BelowMinFullmoves,
}

/// The games-table row of the continuation of `source`.
fn record_of_continuation(source: &GameRecord, continued: &Continuation) -> GameRecord {
    let game = continued.game();
    GameRecord {
        id: continuation_id(&source.id, continued.switch_ply()),
        source_index: source.source_index,
        site: source.site.clone(),
        result: game.result().as_str().to_owned(),
        white_elo: source.white_elo,
        black_elo: source.black_elo,
        time_control: source.time_control.clone(),
        termination: Some(game.termination().python_name().to_owned()),
        moves: game.moves().to_vec(),
    }
}

/// Continues one game after `k` plies, reusing `arbiter`.
fn continue_one(
    arbiter: &mut Arbiter,
    source: &GameRecord,
    k: usize,
    options: &ContinuationOptions,
) -> Result<Fate, DataError> {
    let played = play_continuation(
        arbiter,
        &source.moves,
        k,
        switch_seed(options.seed, k),
        source.source_index,
    );
    match played {
        Ok(continued) if continued.random_plies() == 0 => Ok(Fate::OverAtSwitch),
        Ok(continued) if !continued.game().is_long_enough(options.min_fullmoves) => {
            Ok(Fate::BelowMinFullmoves)
        }
        Ok(continued) => Ok(Fate::Written(record_of_continuation(source, &continued))),
        Err(ContinuationError::TooShort { .. }) => Ok(Fate::ShorterThanPrefix),
        Err(ContinuationError::IllegalPrefixMove { ply, move_id, .. }) => {
            Err(DataError::IllegalStoredMove {
                id: source.id.clone(),
                ply,
                move_id,
            })
        }
        Err(other) => Err(DataError::Invalid(format!("game {}: {other}", source.id))),
    }
}

/// Checks the switch plies of `options`: at least one, none twice (their ids would clash).
fn check_switch_plies(options: &ContinuationOptions) -> Result<(), DataError> {
    let ks = &options.prefix_plies;
    if ks.is_empty() {
        return Err(DataError::Invalid(
            "prefix_plies lists no switch ply".into(),
        ));
    }
    if let Some((i, k)) = ks.iter().enumerate().find(|(i, k)| ks[..*i].contains(k)) {
        return Err(DataError::Invalid(format!(
            "prefix_plies lists {k} twice (item {i}): the continuations' ids would clash"
        )));
    }
    Ok(())
}

/// Continues the games of the tables under `input` into `out_dir/games.parquet` (see the
/// module doc) and returns what was written and skipped.
///
/// # Errors
///
/// [`DataError`] on read or write errors, no or a repeated switch ply, a prefix move that is
/// not legal ([`DataError::IllegalStoredMove`]), or cancellation.
pub fn continue_games(
    input: &Path,
    out_dir: &Path,
    options: &ContinuationOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<ContinuationSummary, DataError> {
    check_switch_plies(options)?;
    std::fs::create_dir_all(out_dir).map_err(|e| DataError::io(out_dir, e))?;
    progress.set_total(GamesReader::count_games(input)?);
    let pool = pool(options.threads)?;
    let partial = out_dir.join(PARTIAL_FILE);
    let mut writer = GamesWriter::create(&partial, &[])?;
    let mut summary = ContinuationSummary {
        seed: options.seed,
        min_fullmoves: options.min_fullmoves,
        input_games: 0,
        per_switch: options
            .prefix_plies
            .iter()
            .map(|&prefix_plies| SwitchCounts {
                prefix_plies,
                ..SwitchCounts::default()
            })
            .collect(),
    };
    let batch_games = BATCH_GAMES_PER_THREAD * options.threads.max(1);
    for batch in GamesReader::open(input, batch_games)? {
        if full(&summary, options) {
            break;
        }
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        let batch = batch?;
        let fates: Vec<Result<Vec<Fate>, DataError>> = pool.install(|| {
            batch
                .par_iter()
                .map_init(Arbiter::default, |arbiter, game| {
                    let ks = options.prefix_plies.iter();
                    ks.map(|&k| continue_one(arbiter, game, k, options))
                        .collect()
                })
                .collect()
        });
        let before = summary.input_games;
        for game in fates {
            if full(&summary, options) {
                break;
            }
            summary.input_games += 1;
            record_game(game?, &mut summary, &mut writer, options)?;
        }
        progress.inc(summary.input_games - before);
    }
    writer.finish()?;
    copy_with_footer(&partial, &out_dir.join(GAMES_FILE), &summary, cancelled)?;
    progress.set_message(summary.describe());
    Ok(summary)
}

/// Whether `max_games` games are written.
fn full(summary: &ContinuationSummary, options: &ContinuationOptions) -> bool {
    options.max_games > 0 && summary.written() >= options.max_games
}

/// Writes and counts the fates of one input game's continuations, one per switch ply, until
/// `max_games` are written.
fn record_game(
    fates: Vec<Fate>,
    summary: &mut ContinuationSummary,
    writer: &mut GamesWriter,
    options: &ContinuationOptions,
) -> Result<(), DataError> {
    for (i, fate) in fates.into_iter().enumerate() {
        if full(summary, options) {
            break;
        }
        summary.per_switch[i].count(&fate);
        if let Fate::Written(record) = fate {
            writer.push(&record)?;
        }
    }
    Ok(())
}

/// Copies the games of `partial` into `path` with `summary` in the footer, then removes
/// `partial`.
fn copy_with_footer(
    partial: &Path,
    path: &Path,
    summary: &ContinuationSummary,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<(), DataError> {
    let mut writer = GamesWriter::create(path, &summary.to_footer())?;
    for batch in GamesReader::open(partial, ROW_GROUP_GAMES)? {
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        for game in batch? {
            writer.push(&game)?;
        }
    }
    let copied = writer.finish()?;
    if copied != summary.written() {
        return Err(DataError::format(
            partial,
            format!("holds {copied} games, {} were written", summary.written()),
        ));
    }
    std::fs::remove_file(partial).map_err(|e| DataError::io(partial, e))
}

/// The `random_continuation` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomContinuationStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "prefix_plies",
        ParamType::List(&ParamType::Int),
        "the switch plies k (a list, such as [10, 20, 40]): for each, keep the real game's first k plies, then play uniformly random legal moves",
    ),
    ParamSpec::with_default(
        "seed",
        ParamType::Int,
        ParamDefault::Int(0),
        "the seed of the random moves",
    ),
    ParamSpec::with_default(
        "min_fullmoves",
        ParamType::Int,
        ParamDefault::Int(10),
        "keep continued games of at least 2 * min_fullmoves plies",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "stop after writing this many games (0 = all)",
    ),
];

const INPUTS: &[InputSpec] = &[InputSpec::one(
    "games",
    "a games artifact of real games (split.val, parse.games)",
)];

const DECL: KindDecl = KindDecl::new(
    "random_continuation",
    "keeps the first k plies of real games and continues them with uniformly random legal moves",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Custom(|_| Threads::All));

impl StageKind for RandomContinuationStage {
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
                    "src/continuation.rs",
                    "src/games.rs",
                    "src/parse.rs",
                ],
            ),
            &cwm_chess::games_fingerprint(),
            cwm_random_uniform::SOURCE_FINGERPRINT,
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let prefix_plies = params
            .list("prefix_plies")?
            .iter()
            .map(|item| match item {
                cwm_stage::ParamValue::Int(k) => usize::try_from(*k).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| StageError::Param("prefix_plies must list plies from 0 up".into()))?;
        let min_fullmoves = u32::try_from(params.uint("min_fullmoves")?)
            .map_err(|_| StageError::Param("min_fullmoves is too large".into()))?;
        let options = ContinuationOptions {
            prefix_plies,
            seed: params.uint("seed")?,
            min_fullmoves,
            max_games: params.uint("max_games")?,
            threads: ctx.threads(),
        };
        let summary = continue_games(
            ctx.input("games")?,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        ctx.log().line(summary.describe());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use shakmaty::uci::UciMove;
    use shakmaty::{Chess, Position};

    use super::*;
    use crate::random_uniform::fast_games_table;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cwm-cont-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn packed(line: &str) -> Vec<u16> {
        let mut position = Chess::default();
        let mut ids = Vec::new();
        for uci in line.split_whitespace() {
            let m = uci.parse::<UciMove>().unwrap().to_move(&position).unwrap();
            ids.push(cwm_chess::encode::pack_move(&m));
            position.play_unchecked(m);
        }
        ids
    }

    /// Writes games with these ids and moves as a games table in `dir`.
    fn table(dir: &Path, games: &[(&str, Vec<u16>)]) {
        std::fs::create_dir_all(dir).unwrap();
        let mut writer = GamesWriter::create(&dir.join(GAMES_FILE), &[]).unwrap();
        for (index, (id, moves)) in games.iter().enumerate() {
            writer
                .push(&GameRecord {
                    id: (*id).to_owned(),
                    source_index: index as u64,
                    result: "*".into(),
                    white_elo: Some(1500 + index as i32),
                    moves: moves.clone(),
                    ..GameRecord::default()
                })
                .unwrap();
        }
        writer.finish().unwrap();
    }

    fn read(dir: &Path) -> Vec<GameRecord> {
        GamesReader::open(dir, 100)
            .unwrap()
            .flat_map(|batch| batch.unwrap())
            .collect()
    }

    fn run(input: &Path, out: &Path, options: &ContinuationOptions) -> ContinuationSummary {
        continue_games(input, out, options, &Progress::disabled(), &|| false).unwrap()
    }

    #[test]
    fn every_game_is_written_or_counted_as_skipped() {
        let dir = temp("fates");
        let ruy = packed("e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6 e1g1 f8e7");
        table(
            &dir.join("in"),
            &[
                ("ruy", ruy.clone()),
                ("short", ruy[..5].to_vec()),
                ("mate", packed("f2f3 e7e5 g2g4 d8h4")),
            ],
        );
        let options = ContinuationOptions {
            prefix_plies: vec![4],
            min_fullmoves: 0,
            ..ContinuationOptions::default()
        };
        let summary = run(&dir.join("in"), &dir.join("out"), &options);
        // Fool's mate is over at ply 4: no random move, dropped.
        let k4 = summary.per_switch[0];
        assert_eq!(
            (k4.written, summary.input_games, k4.over_at_switch),
            (2, 3, 1)
        );
        let games = read(&dir.join("out"));
        let ids: Vec<&str> = games.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["ruy~k4", "short~k4"]);
        for game in &games {
            assert!(game.moves.len() > 4 && game.moves[..4] == ruy[..4]);
            assert!(game.termination.is_some() && game.result != "*");
        }
        assert_eq!(games[1].white_elo, Some(1501));
        assert_eq!(games[1].source_index, 1);
        assert!(!dir.join("out").join(PARTIAL_FILE).exists());
        // A longer prefix makes `short` too short; a longer minimum drops what remains.
        let options = ContinuationOptions {
            prefix_plies: vec![6],
            min_fullmoves: 10_000,
            ..options
        };
        let summary = run(&dir.join("in"), &dir.join("out2"), &options);
        assert_eq!(summary.written(), 0);
        let k6 = summary.per_switch[0];
        assert_eq!((k6.shorter_than_prefix, k6.below_min_fullmoves), (2, 1));
        assert_eq!(
            ContinuationSummary::from_footer(&dir.join("out2")).unwrap(),
            summary
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_illegal_prefix_move_fails_naming_the_game_and_ply() {
        let dir = temp("illegal");
        let e4 = packed("e2e4");
        table(
            &dir.join("in"),
            &[("fine", packed("d2d4 d7d5")), ("bad", vec![e4[0], e4[0]])],
        );
        let err = continue_games(
            &dir.join("in"),
            &dir.join("out"),
            &ContinuationOptions {
                prefix_plies: vec![2],
                ..ContinuationOptions::default()
            },
            &Progress::disabled(),
            &|| false,
        )
        .unwrap_err();
        assert!(
            matches!(&err, DataError::IllegalStoredMove { id, ply: 2, .. } if id == "bad"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn max_games_stops_the_run_and_the_footer_says_how_far_it_read() {
        let dir = temp("max");
        fast_games_table(&dir.join("in"), 60, 3);
        let all = ContinuationOptions {
            prefix_plies: vec![120],
            threads: 2,
            ..ContinuationOptions::default()
        };
        let summary = run(&dir.join("in"), &dir.join("all"), &all);
        assert_eq!(summary.input_games, 60);
        assert_eq!(summary.written() + summary.skipped(), 60);
        assert!(summary.per_switch[0].shorter_than_prefix > 0, "{summary:?}");
        assert!(summary.written() > 10, "{summary:?}");
        let limited = ContinuationOptions {
            max_games: 10,
            ..all.clone()
        };
        let first = run(&dir.join("in"), &dir.join("ten"), &limited);
        assert_eq!(first.written(), 10);
        assert_eq!(first.written() + first.skipped(), first.input_games);
        assert!(first.input_games < 60);
        assert_eq!(read(&dir.join("ten"))[..], read(&dir.join("all"))[..10]);
        let footer = ContinuationSummary::from_footer(&dir.join("ten")).unwrap();
        assert_eq!(footer, first);
        assert!(
            first.describe().starts_with("10 games from"),
            "{}",
            first.describe()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_switch_ply_continues_every_game_on_a_stream_of_its_own() {
        let dir = temp("plies");
        fast_games_table(&dir.join("in"), 12, 5);
        let both = ContinuationOptions {
            prefix_plies: vec![10, 30],
            threads: 2,
            ..ContinuationOptions::default()
        };
        let summary = run(&dir.join("in"), &dir.join("both"), &both);
        let games = read(&dir.join("both"));
        assert_eq!(games.len() as u64, summary.written());
        for (counts, k) in summary.per_switch.iter().zip([10, 30]) {
            assert_eq!(counts.prefix_plies, k);
            assert_eq!(counts.written + counts.skipped(), 12, "{counts:?}");
        }
        // In input order, each game's continuations in the list's order; the ids say after
        // which ply, and a run with one of the plies alone gives the same games for it.
        let ks: Vec<usize> = games.iter().map(|g| switch_ply(&g.id).unwrap()).collect();
        let sources: Vec<u64> = games.iter().map(|g| g.source_index).collect();
        assert!(sources.windows(2).all(|w| w[0] <= w[1]), "{sources:?}");
        assert!(ks.contains(&10) && ks.contains(&30), "{ks:?}");
        let alone = ContinuationOptions {
            prefix_plies: vec![30],
            ..both.clone()
        };
        run(&dir.join("in"), &dir.join("alone"), &alone);
        let after_30: Vec<GameRecord> = games
            .into_iter()
            .filter(|g| g.id.ends_with("~k30"))
            .collect();
        assert_eq!(read(&dir.join("alone")), after_30);
        assert_eq!(
            ContinuationSummary::from_footer(&dir.join("both")).unwrap(),
            summary
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_switch_ply_or_one_twice_is_refused() {
        let dir = temp("bad-plies");
        fast_games_table(&dir.join("in"), 2, 1);
        for (ks, expected) in [(vec![], "no switch ply"), (vec![10, 20, 10], "10 twice")] {
            let options = ContinuationOptions {
                prefix_plies: ks,
                ..ContinuationOptions::default()
            };
            let err = continue_games(
                &dir.join("in"),
                &dir.join("out"),
                &options,
                &Progress::disabled(),
                &|| false,
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(expected), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn switch_plies_read_back_from_ids() {
        assert_eq!(switch_ply(&continuation_id("cwm_abc", 20)), Some(20));
        assert_eq!(switch_ply("a~k3~k40"), Some(40));
        for id in ["cwm_abc", "a~k", "a~kx1", "a~k1b", "a~k-1"] {
            assert_eq!(switch_ply(id), None, "{id}");
        }
        assert_ne!(switch_seed(0, 10), switch_seed(0, 20));
        assert_eq!(switch_seed(5, 0), 5);
    }

    #[test]
    fn cancellation_stops_the_run() {
        let dir = temp("cancel");
        fast_games_table(&dir.join("in"), 5, 1);
        let err = continue_games(
            &dir.join("in"),
            &dir.join("out"),
            &ContinuationOptions::default(),
            &Progress::disabled(),
            &|| true,
        )
        .unwrap_err();
        assert!(matches!(err, DataError::Cancelled), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_footer_without_the_keys_is_a_format_error() {
        let dir = temp("footer");
        table(&dir, &[("g", packed("e2e4"))]);
        let err = ContinuationSummary::from_footer(&dir).unwrap_err();
        assert!(err.to_string().contains(PREFIX_PLIES), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_footer_whose_lists_disagree_is_a_format_error() {
        let dir = temp("footer-lists");
        std::fs::create_dir_all(&dir).unwrap();
        let summary = ContinuationSummary {
            seed: 0,
            min_fullmoves: 10,
            input_games: 1,
            per_switch: vec![SwitchCounts {
                prefix_plies: 10,
                written: 1,
                ..SwitchCounts::default()
            }],
        };
        let mut footer = summary.to_footer();
        footer.iter_mut().find(|(k, _)| k == WRITTEN).unwrap().1 = "1,0".into();
        let mut writer = GamesWriter::create(&dir.join(GAMES_FILE), &footer).unwrap();
        writer
            .push(&GameRecord {
                id: "g~k10".into(),
                ..GameRecord::default()
            })
            .unwrap();
        writer.finish().unwrap();
        let err = ContinuationSummary::from_footer(&dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(WRITTEN) && err.contains("2 values for 1"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
