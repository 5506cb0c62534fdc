//! The `parse` stage: a PGN (or zstd-compressed PGN) file to the games table and a rejects
//! report.
//!
//! * **Input** `pgn`: a `download` artifact holding exactly one `*.pgn` or `*.pgn.zst` file.
//! * **Params**: `min_fullmoves` (10: games need `2 * min_fullmoves` plies), `skip_games` (the
//!   first kept games to pass over, e.g. to test on games that follow a training sample of the
//!   same file; 0), `max_games` (kept games to write after those; 0 = all), `id_key` (HMAC key
//!   of the game ids, see below).
//! * **Outputs**: `games` ([`GAMES_FILE`], schema in [`crate::games`]) and `rejects`
//!   (`rejects.json`: games read, kept, rejected, counts per reason code and the first
//!   [`REJECT_EXAMPLES`] rejections with game index, byte offset, Site and reason).
//!
//! Flow: a reader thread streams the file (decompressing on the fly; the file is never held in
//! memory) through `cwm_chess`'s syntax step ([`PgnGames`]) and sends chunks of
//! [`CHUNK_GAMES`] raw games over a bounded channel; the calling thread replays each chunk on a
//! local rayon pool of `threads` threads ([`replay_game`], also computing the ids) and hands the
//! kept games, in file order, to the sink. Output is therefore identical for any thread count.
//! Bad games are counted rejections; only I/O errors and output errors end the run.
//!
//! **Game ids.** With a key, ids are the reference's `cwm_` + 24 hex digits of
//! HMAC-SHA256(key, Site) (spec E.3); without one, `cwm_sha256_` + 24 hex digits of SHA-256(Site).
//! The key is the `id_key` param if given (it then joins the cache key, like every param);
//! otherwise the environment variable [`ID_KEY_ENV`] is read. The environment is *not* part
//! of the cache key, so changing the variable does not rerun a cached parse: set the param in
//! the pipeline when ids must follow a key. Which source was used (never the key itself) is
//! recorded in `rejects.json` (`id_scheme`) and in the Parquet footer (`cwm.id_scheme`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use cwm_chess::ids::{IdKey, RealGameIds};
use cwm_chess::replay::{KeptGame, PgnGames, RawGame, Rejection, ReplayConfig, replay_game};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind, ThreadsDecl,
};
use rayon::prelude::*;

use crate::DataError;
use crate::games::{GAMES_FILE, GameRecord, GamesWriter};

/// The environment variable holding the id key when the `id_key` param is absent.
pub const ID_KEY_ENV: &str = "CHESS_WORLD_MODEL_ID_KEY";
/// Raw games per chunk handed to the worker pool.
pub const CHUNK_GAMES: usize = 512;
/// Rejections kept as examples in the report.
pub const REJECT_EXAMPLES: usize = 20;

/// Where the id key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdKeySource {
    /// Given explicitly (the stage's `id_key` param, a CLI flag).
    Param(String),
    /// Read from [`ID_KEY_ENV`].
    Env(String),
    /// No key: unkeyed SHA-256 ids.
    None,
}

impl IdKeySource {
    /// `explicit` if given, else [`ID_KEY_ENV`] if set and non-empty, else none.
    pub fn resolve(explicit: Option<&str>) -> IdKeySource {
        if let Some(key) = explicit {
            return IdKeySource::Param(key.to_owned());
        }
        match std::env::var(ID_KEY_ENV) {
            Ok(key) if !key.is_empty() => IdKeySource::Env(key),
            _ => IdKeySource::None,
        }
    }

    /// A description without the key: `hmac-sha256 (key from param)`, ... .
    pub fn scheme(&self) -> String {
        match self {
            IdKeySource::Param(_) => "hmac-sha256 (key from param)".to_owned(),
            IdKeySource::Env(_) => format!("hmac-sha256 (key from env {ID_KEY_ENV})"),
            IdKeySource::None => "sha256 (unkeyed)".to_owned(),
        }
    }

    fn ids(&self) -> RealGameIds {
        match self {
            IdKeySource::Param(key) | IdKeySource::Env(key) => {
                RealGameIds::new(Some(&IdKey::new(key)))
            }
            IdKeySource::None => RealGameIds::new(None),
        }
    }
}

/// Settings of a parse run.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// Games need `2 * min_fullmoves` plies.
    pub min_fullmoves: usize,
    /// Pass over the first this many games that would be kept (they are not written).
    pub skip_games: u64,
    /// Stop after this many kept games (0 = all).
    pub max_games: u64,
    /// Worker threads for the legality replay.
    pub threads: usize,
    /// The id key.
    pub id_key: IdKeySource,
    /// Whether the kept games handed to the sink carry their state labels (default `false`:
    /// the games table stores moves only, and `tokenize` recomputes the labels, so the parse
    /// replay skips them; the JSONL output needs them).
    pub states: bool,
}

impl Default for ParseOptions {
    fn default() -> ParseOptions {
        ParseOptions {
            min_fullmoves: 10,
            skip_games: 0,
            max_games: 0,
            threads: 1,
            id_key: IdKeySource::None,
            states: false,
        }
    }
}

/// One rejection kept as an example in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectExample {
    /// 0-based index of the game in the stream.
    pub index: u64,
    /// Byte offset of the game in the (decompressed) stream.
    pub offset: u64,
    /// Its Site header.
    pub site: Option<String>,
    /// The reason code ([`cwm_chess::replay::RejectReason::code`]).
    pub code: &'static str,
    /// The reason in words.
    pub message: String,
}

/// What a parse run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseReport {
    /// Games read from the stream (kept and rejected).
    pub games_read: u64,
    /// Games kept.
    pub kept: u64,
    /// Games that passed the filters but were passed over (`skip_games`), not in `kept`.
    pub skipped: u64,
    /// Games rejected.
    pub rejected: u64,
    /// Rejections per reason code.
    pub by_reason: BTreeMap<&'static str, u64>,
    /// The first rejections.
    pub examples: Vec<RejectExample>,
    /// The id scheme ([`IdKeySource::scheme`]).
    pub id_scheme: String,
    /// Whether the run stopped at `max_games`.
    pub stopped_at_max_games: bool,
}

impl ParseReport {
    fn reject(&mut self, rejection: &Rejection) {
        self.rejected += 1;
        *self.by_reason.entry(rejection.reason.code()).or_default() += 1;
        if self.examples.len() < REJECT_EXAMPLES {
            self.examples.push(RejectExample {
                index: rejection.index,
                offset: rejection.offset,
                site: rejection.site.clone(),
                code: rejection.reason.code(),
                message: rejection.reason.to_string(),
            });
        }
    }

    /// The report as pretty JSON (the `rejects.json` file).
    pub fn to_json(&self) -> String {
        let examples: Vec<serde_json::Value> = self
            .examples
            .iter()
            .map(|e| {
                serde_json::json!({
                    "index": e.index,
                    "offset": e.offset,
                    "site": e.site,
                    "reason": e.code,
                    "message": e.message,
                })
            })
            .collect();
        let value = serde_json::json!({
            "games_read": self.games_read,
            "kept": self.kept,
            "skipped_games": self.skipped,
            "rejected": self.rejected,
            "by_reason": self.by_reason,
            "examples": examples,
            "id_scheme": self.id_scheme,
            "stopped_at_max_games": self.stopped_at_max_games,
        });
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// A reader that counts the bytes it hands out.
struct CountingRead<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Whether `path` names a zstd-compressed file (`.zst`).
fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "zst")
}

/// Opens a `.pgn` or `.pgn.zst` file as a decompressed stream; `count` receives the bytes
/// read from the file itself (compressed bytes for `.zst`).
fn open_pgn(path: &Path, count: Arc<AtomicU64>) -> Result<Box<dyn Read + Send>, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let counting = CountingRead { inner: file, count };
    if is_zstd(path) {
        let decoder =
            zstd::stream::read::Decoder::new(counting).map_err(|e| DataError::io(path, e))?;
        Ok(Box::new(decoder))
    } else {
        Ok(Box::new(counting))
    }
}

/// The single `.pgn` / `.pgn.zst` file of a download artifact (or `path` itself if a file).
///
/// # Errors
///
/// [`DataError::Format`] when there is none or more than one.
pub fn find_pgn(path: &Path) -> Result<PathBuf, DataError> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| DataError::io(path, e))? {
        let entry = entry.map_err(|e| DataError::io(path, e))?;
        let name = entry.file_name().to_string_lossy().to_lowercase();
        if entry.path().is_file() && (name.ends_with(".pgn") || name.ends_with(".pgn.zst")) {
            found.push(entry.path());
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(DataError::format(path, "holds no .pgn or .pgn.zst file")),
        n => Err(DataError::format(
            path,
            format!("holds {n} .pgn/.pgn.zst files; expected one"),
        )),
    }
}

/// Builds a rayon pool of `threads` threads.
pub(crate) fn pool(threads: usize) -> Result<rayon::ThreadPool, DataError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("cwm-data-{i}"))
        .build()
        .map_err(|e| DataError::Invalid(format!("cannot start {threads} threads: {e}")))
}

/// The games-table row of a kept game.
pub fn record_of(id: String, game: &KeptGame) -> GameRecord {
    let elo = |s: &Option<String>| s.as_deref().and_then(|s| s.trim().parse::<i32>().ok());
    GameRecord {
        id,
        source_index: game.index,
        site: game.headers.site.clone(),
        result: game
            .headers
            .result
            .clone()
            .unwrap_or_else(|| "*".to_owned()),
        white_elo: elo(&game.headers.white_elo),
        black_elo: elo(&game.headers.black_elo),
        time_control: game.headers.time_control.clone(),
        termination: game.headers.termination.clone(),
        moves: game.replay.moves.get(1..).unwrap_or_default().to_vec(),
    }
}

/// What the PGN reader thread sends: a chunk of raw games, or the read error that ends the
/// file.
type RawChunk = Result<Vec<RawGame>, std::io::Error>;

/// Reads the games of `reader` and sends them to `tx` in chunks of [`CHUNK_GAMES`]; stops
/// after sending a read error, or when the receiver is gone.
fn send_chunks(reader: impl Read, tx: mpsc::SyncSender<RawChunk>) {
    let mut chunk = Vec::with_capacity(CHUNK_GAMES);
    for raw in PgnGames::new(reader) {
        match raw {
            Ok(raw) => {
                chunk.push(raw);
                if chunk.len() == CHUNK_GAMES {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_GAMES));
                    if tx.send(Ok(full)).is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        }
    }
    if !chunk.is_empty() {
        let _ = tx.send(Ok(chunk));
    }
}

/// Replays a chunk of games on `pool`, each kept game with its id; the results are in the
/// chunk's order.
fn replay_chunk(
    chunk: Vec<RawGame>,
    config: &ReplayConfig,
    ids: &RealGameIds,
    pool: &rayon::ThreadPool,
) -> Vec<Result<(String, KeptGame), Rejection>> {
    pool.install(|| {
        chunk
            .into_par_iter()
            .map(|raw| {
                replay_game(raw, config).map(|game| {
                    let id = ids.id(game.headers.site.as_deref().unwrap_or_default());
                    (id, game)
                })
            })
            .collect()
    })
}

impl ParseReport {
    /// Counts a replayed chunk and hands its kept games to `sink`, in order, after passing
    /// over the first `options.skip_games`. Returns whether `options.max_games` (when
    /// non-zero) games are now kept; the rest of the chunk is then dropped uncounted.
    fn hand_over(
        &mut self,
        replayed: Vec<Result<(String, KeptGame), Rejection>>,
        options: &ParseOptions,
        sink: &mut dyn FnMut(String, KeptGame) -> Result<(), DataError>,
    ) -> Result<bool, DataError> {
        let max_games = options.max_games;
        for outcome in replayed {
            self.games_read += 1;
            match outcome {
                Ok(_) if self.skipped < options.skip_games => self.skipped += 1,
                Ok((id, game)) => {
                    sink(id, game)?;
                    self.kept += 1;
                    if max_games > 0 && self.kept >= max_games {
                        self.stopped_at_max_games = true;
                        return Ok(true);
                    }
                }
                Err(rejection) => self.reject(&rejection),
            }
        }
        Ok(false)
    }
}

/// Parses the PGN file at `path`, handing every kept game (with its id) to `sink` in file
/// order; the games carry state labels only if `options.states`. `progress` gets the file size as total and the bytes read as they go; `cancelled` is
/// polled between chunks.
///
/// # Errors
///
/// [`DataError`] on an I/O error of the input, an error of `sink`, or cancellation.
pub fn parse_pgn_file(
    path: &Path,
    options: &ParseOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
    sink: &mut dyn FnMut(String, KeptGame) -> Result<(), DataError>,
) -> Result<ParseReport, DataError> {
    let size = std::fs::metadata(path)
        .map_err(|e| DataError::io(path, e))?
        .len();
    progress.set_total(size);
    let count = Arc::new(AtomicU64::new(0));
    let reader = open_pgn(path, Arc::clone(&count))?;
    let pool = pool(options.threads)?;
    let config = ReplayConfig {
        min_fullmoves: options.min_fullmoves,
        states: options.states,
        ..ReplayConfig::default()
    };
    let ids = options.id_key.ids();
    let mut report = ParseReport {
        id_scheme: options.id_key.scheme(),
        ..ParseReport::default()
    };
    let mut reported_bytes = 0u64;

    std::thread::scope(|scope| -> Result<(), DataError> {
        let (tx, rx) = mpsc::sync_channel::<RawChunk>(4);
        scope.spawn(move || send_chunks(reader, tx));
        let (config, ids, pool) = (&config, &ids, &pool);
        // While the sink writes one chunk's games (Parquet encoding and compression, on this
        // thread), the pool replays the next one.
        let mut chunks = rx.into_iter();
        // `rx` is dropped when this closure returns, which stops the reader thread early.
        let mut start_next = || -> Result<_, DataError> {
            let Some(chunk) = chunks.next() else {
                return Ok(None);
            };
            if cancelled() {
                return Err(DataError::Cancelled);
            }
            let chunk = chunk.map_err(|e| DataError::io(path, e))?;
            Ok(Some(
                scope.spawn(move || replay_chunk(chunk, config, ids, pool)),
            ))
        };
        let mut replaying = start_next()?;
        while let Some(current) = replaying {
            replaying = start_next()?;
            let replayed = current.join().map_err(|_| {
                DataError::Invalid(format!("{}: a replay thread panicked", path.display()))
            })?;
            if report.hand_over(replayed, options, sink)? {
                return Ok(());
            }
            let bytes = count.load(Ordering::Relaxed);
            progress.inc(bytes.saturating_sub(reported_bytes));
            reported_bytes = bytes;
            progress.set_message(format!(
                "{} games kept, {} rejected",
                report.kept, report.rejected
            ));
        }
        Ok(())
    })?;
    Ok(report)
}

/// Parses `pgn` into a games table at `games_path` and writes the report to `report_path`.
///
/// # Errors
///
/// As [`parse_pgn_file`], plus output write errors. A half-written table may remain on error.
pub fn parse_to_parquet(
    pgn: &Path,
    games_path: &Path,
    report_path: &Path,
    options: &ParseOptions,
    progress: &Progress,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<ParseReport, DataError> {
    let metadata = [
        ("cwm.id_scheme".to_owned(), options.id_key.scheme()),
        (
            "cwm.min_fullmoves".to_owned(),
            options.min_fullmoves.to_string(),
        ),
    ];
    let mut writer = GamesWriter::create(games_path, &metadata)?;
    let report = parse_pgn_file(pgn, options, progress, cancelled, &mut |id, game| {
        writer.push(&record_of(id, &game))
    })?;
    writer.finish()?;
    std::fs::write(report_path, report.to_json()).map_err(|e| DataError::io(report_path, e))?;
    Ok(report)
}

/// The `parse` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct ParseStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "min_fullmoves",
        ParamType::Int,
        ParamDefault::Int(10),
        "keep games of at least 2 * min_fullmoves plies",
    ),
    ParamSpec::with_default(
        "skip_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "pass over the first this many games that would be kept",
    ),
    ParamSpec::with_default(
        "max_games",
        ParamType::Int,
        ParamDefault::Int(0),
        "stop after this many kept games (0 = all)",
    ),
    ParamSpec::optional(
        "id_key",
        ParamType::Str,
        "HMAC key of the game ids; if absent, env CHESS_WORLD_MODEL_ID_KEY (not in the cache key), else unkeyed ids",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[InputSpec::one(
    "pgn",
    "a download artifact holding one .pgn or .pgn.zst file",
)];

const DECL: KindDecl = KindDecl::new(
    "parse",
    "replays a PGN file into the games table (Parquet) and a rejects report",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.outputs(&["games", "rejects"])
.threads(ThreadsDecl::Param);

impl StageKind for ParseStage {
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
                    "src/parse.rs",
                    "src/games.rs",
                ],
            ),
            &cwm_chess::games_fingerprint(),
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let pgn = find_pgn(ctx.input("pgn")?)?;
        let min_fullmoves = usize::try_from(params.uint("min_fullmoves")?)
            .map_err(|_| StageError::Param("min_fullmoves is too large".into()))?;
        let explicit = match params.get("id_key") {
            Some(cwm_stage::ParamValue::Str(key)) => Some(key.as_str()),
            _ => None,
        };
        let options = ParseOptions {
            min_fullmoves,
            skip_games: params.uint("skip_games")?,
            max_games: params.uint("max_games")?,
            threads: ctx.threads(),
            id_key: IdKeySource::resolve(explicit),
            states: false,
        };
        let games = ctx.output("games")?.join(GAMES_FILE);
        let rejects = ctx.output("rejects")?.join("rejects.json");
        let report = parse_to_parquet(&pgn, &games, &rejects, &options, ctx.progress(), &|| {
            ctx.is_cancelled()
        })?;
        ctx.log().line(format!(
            "{}: {} games read, {} kept, {} rejected {:?}; ids: {}",
            pgn.display(),
            report.games_read,
            report.kept,
            report.rejected,
            report.by_reason,
            report.id_scheme
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_GAMES: &str = "[Site \"https://lichess.org/a\"]\n[Result \"1-0\"]\n[WhiteElo \"1500\"]\n\n\
        1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 \
        7. Bb3 d6 8. c3 O-O 9. h3 Nb8 10. d4 Nbd7 1-0\n\n\
        [Site \"https://lichess.org/b\"]\n[Result \"0-1\"]\n\n1. e4 e5 0-1\n\n\
        [Site \"https://lichess.org/c\"]\n[Result \"0-1\"]\n\n1. e4 Ke7 2. Ke3 0-1\n";

    fn write_temp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cwm-parse-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn collect(path: &Path, options: &ParseOptions) -> (ParseReport, Vec<GameRecord>) {
        let mut kept = Vec::new();
        let report = parse_pgn_file(
            path,
            options,
            &Progress::disabled(),
            &|| false,
            &mut |id, g| {
                kept.push(record_of(id, &g));
                Ok(())
            },
        )
        .unwrap();
        (report, kept)
    }

    #[test]
    fn keeps_good_games_and_counts_rejections() {
        let path = write_temp("two.pgn", TWO_GAMES.as_bytes());
        let (report, kept) = collect(&path, &ParseOptions::default());
        assert_eq!(report.games_read, 3);
        assert_eq!(report.kept, 1);
        assert_eq!(report.by_reason.get("too_short"), Some(&2));
        assert_eq!(kept[0].white_elo, Some(1500));
        assert_eq!(kept[0].moves.len(), 20);
        assert!(kept[0].id.starts_with("cwm_sha256_"));
        assert_eq!(report.examples[0].index, 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn zstd_input_and_thread_counts_give_the_same_games() {
        let mut text = String::new();
        for i in 0..1200 {
            text.push_str(&TWO_GAMES.replace("lichess.org/a", &format!("lichess.org/a{i}")));
            text.push('\n');
        }
        let plain = write_temp("many.pgn", text.as_bytes());
        let compressed = zstd::encode_all(text.as_bytes(), 3).unwrap();
        let zst = write_temp("many.pgn.zst", &compressed);
        let one = collect(&plain, &ParseOptions::default());
        let two = collect(
            &zst,
            &ParseOptions {
                threads: 2,
                ..ParseOptions::default()
            },
        );
        assert_eq!(one.1.len(), 1200);
        assert_eq!(one, two);
        let capped = collect(
            &plain,
            &ParseOptions {
                max_games: 7,
                ..ParseOptions::default()
            },
        );
        assert_eq!(capped.1.len(), 7);
        assert!(capped.0.stopped_at_max_games);
        assert_eq!(capped.1[..], one.1[..7]);
        let later = collect(
            &plain,
            &ParseOptions {
                skip_games: 5,
                max_games: 7,
                ..ParseOptions::default()
            },
        );
        assert_eq!(later.1[..], one.1[5..12]);
        assert_eq!((later.0.skipped, later.0.kept), (5, 7));
        let keyed = collect(
            &plain,
            &ParseOptions {
                id_key: IdKeySource::Param("k".into()),
                max_games: 1,
                ..ParseOptions::default()
            },
        );
        assert!(keyed.1[0].id.starts_with("cwm_") && !keyed.1[0].id.starts_with("cwm_sha256_"));
        for p in [plain, zst] {
            std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
        }
    }
}
