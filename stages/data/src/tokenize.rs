//! The `tokenize` stage: games tables to training-ready shards of model inputs and state
//! labels, readable from Python with pyarrow or polars alone.
//!
//! * **Input** `games`: a games artifact (a `split` output, `parse.games`, `random_uniform`).
//! * **Params**: `ep_convention` (`reference`: en-passant labels after every double push, as
//!   the reference; `legal_capture`: only when an en-passant capture is legal, as the paper's
//!   text), `shard_games` (games per shard file, default 100,000).
//! * **Output** `out`: `shard_000000.parquet`, `shard_000001.parquet`, ... ([`SHARD_LAYOUT`]
//!   describes the columns), `coverage.json` (distinct move ids seen out of 20,480, the paper's
//!   Table 3, plus games and plies) and a `README.md` with the layout.
//!
//! States are recomputed from the stored move ids by replaying them with shakmaty (each id must
//! be a legal move, else the stage fails: the input is not a games table of legal games).
//!
//! Work is split by row group: a reader thread decodes the games [`ROW_GROUPS_PER_THREAD`] row
//! groups per thread at a time, one batch ahead, and each row group of
//! [`SHARD_ROW_GROUP_GAMES`] games is replayed, built and encoded (Parquet encoding and zstd
//! included) by one task of a local rayon pool; the calling thread only appends the encoded
//! row groups to the shard files, in input order. The
//! bytes written are therefore the same for any thread count. Memory is bounded by one such
//! batch of row groups.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, ListBuilder, StringBuilder, UInt16Builder, UInt32Builder,
};
use arrow::buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_chess::encode::{
    EpConvention, NUM_MOVE_IDS, START, STATE_LEN, encode_state_after_move, encode_state_into,
    unpack_move,
};
use cwm_formats::tokenize::{COVERAGE_FILE, Coverage, GamesSource};
use cwm_stage::{
    InputSpec, InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, Progress, StageContext,
    StageError, StageKind, ThreadsDecl,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory, compute_leaves};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use rayon::prelude::*;
use shakmaty::uci::UciMove;
use shakmaty::{Chess, Position};

use crate::DataError;
use crate::games::{GameRecord, GamesReader, u16_item_field, writer_properties};
use crate::parse::pool;

/// Games replayed per parallel batch by the JSONL export.
pub const BATCH_GAMES: usize = 1024;
/// Row groups read, replayed and encoded per worker thread at a time.
pub const ROW_GROUPS_PER_THREAD: usize = 2;
/// Games per Parquet row group of a shard (the last row group of a shard may hold fewer).
pub const SHARD_ROW_GROUP_GAMES: usize = 1024;
/// Default games per shard.
pub const DEFAULT_SHARD_GAMES: u64 = 100_000;

/// The compression of the `states` column, most of a shard's bytes: zstd level 1 (zstd's and
/// parquet's default), smaller and faster here than level 3 (docs/perf.md has the figures).
fn states_compression() -> Compression {
    Compression::ZSTD(ZstdLevel::default())
}

/// The README written into every tokenize artifact.
pub const SHARD_LAYOUT: &str = r#"# Tokenized chess games

Files: `shard_000000.parquet`, `shard_000001.parquet`, ... (read them in name order), each a
zstd-compressed Parquet table with one row per game:

| column | Arrow type | meaning |
|---|---|---|
| `id` | string | example id |
| `result` | string | game result (`1-0`, `0-1`, `1/2-1/2`, `*`) |
| `plies` | uint32 | T, the number of half-moves |
| `moves` | list<uint16> | T+1 input tokens: START (20480), then the packed move ids `(from*64+to)*5+promo` |
| `states` | binary | (T+1) x 75 uint8 state labels, row-major: bytes `75*t .. 75*t+75` are the state after t plies |

The 75 labels per state: 0..63 pieces a8..h8, a7..h7, ..., a1..h1 (0 empty, 1-6 PNBRQK white,
7-12 pnbrqk black), 64 side to move, 65-68 castling KQkq, 69 en-passant file (0 none, 1-8 a-h),
70 en-passant rank (0 none, 1 rank 3, 2 rank 6), 71-72 halfmove clock (hi, lo byte), 73-74
fullmove number (hi, lo byte). PAD is 20481; the vocabulary has 20482 tokens.

Reading one game with numpy:

```python
import numpy as np, pyarrow.parquet as pq
t = pq.read_table("shard_000000.parquet")
moves = np.asarray(t.column("moves")[0].values, dtype=np.uint16)        # (T+1,)
states = np.frombuffer(t.column("states")[0].as_py(), np.uint8).reshape(-1, 75)  # (T+1, 75)
```

`coverage.json` counts the games, plies and distinct move ids seen (out of 20,480).
"#;

/// Options of a tokenize run.
#[derive(Debug, Clone)]
pub struct TokenizeOptions {
    /// En-passant convention of the labels.
    pub ep_convention: EpConvention,
    /// Games per shard file (at least 1).
    pub shard_games: u64,
    /// Worker threads.
    pub threads: usize,
    /// The artifact the games came from, recorded in `coverage.json` (the report's Table 1
    /// tells the splits apart by it).
    pub source: Option<GamesSource>,
}

impl Default for TokenizeOptions {
    fn default() -> TokenizeOptions {
        TokenizeOptions {
            ep_convention: EpConvention::Reference,
            shard_games: DEFAULT_SHARD_GAMES,
            threads: 1,
            source: None,
        }
    }
}

/// What a tokenize run wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizeSummary {
    /// Games written.
    pub games: u64,
    /// Plies over all games.
    pub plies: u64,
    /// Distinct packed move ids seen.
    pub distinct_move_ids: usize,
    /// Those ids, ascending.
    pub seen_move_ids: Vec<u16>,
    /// Shard files written.
    pub shards: Vec<PathBuf>,
}

/// Replays packed move ids (without `START`) from the initial position and appends the
/// `(moves.len() + 1) * 75` state labels to `states` (cleared first).
///
/// # Errors
///
/// [`DataError::IllegalStoredMove`] when an id is not a legal move.
pub fn replay_states(
    id: &str,
    moves: &[u16],
    ep_convention: EpConvention,
    states: &mut Vec<u8>,
) -> Result<(), DataError> {
    states.clear();
    append_states(id, moves, ep_convention, states)
}

/// Like [`replay_states`], but appends to `states` (a row group's value buffer).
fn append_states(
    id: &str,
    moves: &[u16],
    ep_convention: EpConvention,
    states: &mut Vec<u8>,
) -> Result<(), DataError> {
    states.reserve((moves.len() + 1) * STATE_LEN);
    let mut position = Chess::default();
    let mut labels = [0u8; STATE_LEN];
    encode_state_into(&position, ep_convention, &mut labels);
    states.extend_from_slice(&labels);
    for (ply, &move_id) in moves.iter().enumerate() {
        let illegal = || DataError::IllegalStoredMove {
            id: id.to_owned(),
            ply: ply + 1,
            move_id,
        };
        let (from, to, promotion) = unpack_move(move_id).ok_or_else(illegal)?;
        let m = UciMove::Normal {
            from,
            to,
            promotion,
        }
        .to_move(&position)
        .map_err(|_| illegal())?;
        position.play_unchecked(m);
        encode_state_after_move(&position, &m, ep_convention, &mut labels);
        states.extend_from_slice(&labels);
    }
    Ok(())
}

/// The Arrow schema of a shard.
pub fn shard_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("result", DataType::Utf8, false),
        Field::new("plies", DataType::UInt32, false),
        Field::new("moves", DataType::List(u16_item_field()), false),
        Field::new("states", DataType::Binary, false),
    ]))
}

/// A shard file being written: the file writer, whose row groups arrive already encoded, and
/// how many games it holds.
struct ShardFile {
    path: PathBuf,
    writer: SerializedFileWriter<BufWriter<File>>,
    games: u64,
    row_groups: usize,
}

impl ShardFile {
    /// Creates the shard at `path` and the factory of column writers for its row groups (the
    /// same for every shard: same schema, same properties).
    fn create(
        path: PathBuf,
        ep: EpConvention,
    ) -> Result<(ShardFile, ArrowRowGroupWriterFactory), DataError> {
        let file = File::create(&path).map_err(|e| DataError::io(&path, e))?;
        let metadata = [("cwm.ep_convention".to_owned(), ep.name().to_owned())];
        let props = writer_properties(SHARD_ROW_GROUP_GAMES, &metadata)
            .into_builder()
            .set_column_dictionary_enabled(ColumnPath::from("states"), false)
            .set_column_dictionary_enabled(ColumnPath::from("id"), false)
            .set_column_compression(ColumnPath::from("states"), states_compression())
            .build();
        let (writer, factory) =
            ArrowWriter::try_new(BufWriter::new(file), shard_schema(), Some(props))
                .and_then(ArrowWriter::into_serialized_writer)
                .map_err(|e| DataError::parquet(&path, e))?;
        let shard = ShardFile {
            path,
            writer,
            games: 0,
            row_groups: 0,
        };
        Ok((shard, factory))
    }

    /// Appends one encoded row group of `games` games.
    fn append(&mut self, chunks: Vec<ArrowColumnChunk>, games: usize) -> Result<(), DataError> {
        let mut row_group = self
            .writer
            .next_row_group()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        for chunk in chunks {
            chunk
                .append_to_row_group(&mut row_group)
                .map_err(|e| DataError::parquet(&self.path, e))?;
        }
        row_group
            .close()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        self.games += games as u64;
        self.row_groups += 1;
        Ok(())
    }

    fn finish(self) -> Result<PathBuf, DataError> {
        self.writer
            .close()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        Ok(self.path)
    }
}

/// One row group to encode: a run of consecutive games of a batch that ends up in one shard.
#[derive(Debug, Clone)]
struct RowGroupPlan {
    /// The games, as a range of the batch.
    games: std::ops::Range<usize>,
    /// Whether this row group starts a new shard file.
    new_shard: bool,
    /// Index of the row group within its shard.
    row_group: usize,
}

/// Cuts a batch of `len` games into row groups of at most [`SHARD_ROW_GROUP_GAMES`] games that
/// never straddle a shard boundary, continuing from a shard that already holds
/// `games_in_shard` games in `row_groups` row groups.
fn plan_row_groups(
    len: usize,
    shard_games: u64,
    mut games_in_shard: u64,
    mut row_groups: usize,
) -> Vec<RowGroupPlan> {
    let mut plans = Vec::new();
    let mut start = 0;
    while start < len {
        let new_shard = games_in_shard >= shard_games;
        if new_shard {
            games_in_shard = 0;
            row_groups = 0;
        }
        let room = usize::try_from(shard_games - games_in_shard).unwrap_or(usize::MAX);
        let end = len.min(start + SHARD_ROW_GROUP_GAMES.min(room));
        plans.push(RowGroupPlan {
            games: start..end,
            new_shard,
            row_group: row_groups,
        });
        games_in_shard += (end - start) as u64;
        row_groups += 1;
        start = end;
    }
    plans
}

/// Replays the states of `games` and encodes them as one row group of a shard: every column
/// built, encoded and compressed here, so row groups are encoded in parallel and only appended
/// in order by the caller.
fn encode_row_group(
    factory: &ArrowRowGroupWriterFactory,
    row_group: usize,
    games: &[GameRecord],
    ep: EpConvention,
    path: &Path,
) -> Result<Vec<ArrowColumnChunk>, DataError> {
    let mut id = StringBuilder::new();
    let mut result = StringBuilder::new();
    let mut plies = UInt32Builder::with_capacity(games.len());
    let mut moves = ListBuilder::new(UInt16Builder::new()).with_field(u16_item_field());
    // The states column is built in place: every game's labels appended to one value buffer.
    let state_bytes: usize = games.iter().map(|g| (g.moves.len() + 1) * STATE_LEN).sum();
    let mut state_values = Vec::with_capacity(state_bytes);
    let mut state_offsets = Vec::with_capacity(games.len() + 1);
    state_offsets.push(0i32);
    for game in games {
        append_states(&game.id, &game.moves, ep, &mut state_values)?;
        let end = i32::try_from(state_values.len()).map_err(|_| {
            DataError::Invalid(format!(
                "{}: a row group's states exceed 2 GiB",
                path.display()
            ))
        })?;
        state_offsets.push(end);
        id.append_value(&game.id);
        result.append_value(&game.result);
        plies.append_value(u32::try_from(game.moves.len()).unwrap_or(u32::MAX));
        moves.values().append_value(START);
        moves.values().append_slice(&game.moves);
        moves.append(true);
    }
    let states = BinaryArray::new(
        OffsetBuffer::new(ScalarBuffer::from(state_offsets)),
        Buffer::from_vec(state_values),
        None,
    );
    let columns: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(result.finish()),
        Arc::new(plies.finish()),
        Arc::new(moves.finish()),
        Arc::new(states),
    ];
    let parquet = |e| DataError::parquet(path, e);
    let mut writers = factory.create_column_writers(row_group).map_err(parquet)?;
    let mut next_writer = writers.iter_mut();
    for (field, column) in shard_schema().fields().iter().zip(&columns) {
        for leaf in compute_leaves(field, column).map_err(parquet)? {
            let writer = next_writer.next().ok_or_else(|| {
                DataError::parquet(
                    path,
                    parquet::errors::ParquetError::General(
                        "fewer column writers than leaves".into(),
                    ),
                )
            })?;
            writer.write(&leaf).map_err(parquet)?;
        }
    }
    writers
        .into_iter()
        .map(|w| w.close().map_err(parquet))
        .collect()
}

/// Tokenizes the games tables under `input` into shards, `coverage.json` and `README.md` in
/// `out_dir`.
///
/// # Errors
///
/// [`DataError`] on read or write errors, an illegal stored move, or cancellation.
pub fn tokenize_games(
    input: &Path,
    out_dir: &Path,
    options: &TokenizeOptions,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<TokenizeSummary, DataError> {
    let shard_games = options.shard_games.max(1);
    progress.set_total(GamesReader::count_games(input)?);
    let pool = pool(options.threads)?;
    let ep = options.ep_convention;
    let mut seen = vec![false; usize::from(NUM_MOVE_IDS)];
    let mut summary = TokenizeSummary {
        games: 0,
        plies: 0,
        distinct_move_ids: 0,
        seen_move_ids: Vec::new(),
        shards: Vec::new(),
    };
    // The first shard exists from the start: an empty input still gives one (empty) shard, so
    // readers find the schema.
    let (mut shard, factory) = ShardFile::create(shard_path(out_dir, 0), ep)?;
    let batch_games = SHARD_ROW_GROUP_GAMES * ROW_GROUPS_PER_THREAD * options.threads.max(1);
    let reader = GamesReader::open(input, batch_games)?;
    // A reader thread decodes the next batch of the games table while this one's row groups
    // are encoded: reading would otherwise leave the pool idle.
    std::thread::scope(|scope| -> Result<(), DataError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        scope.spawn(move || {
            for batch in reader {
                if tx.send(batch).is_err() {
                    return;
                }
            }
        });
        // `rx` is dropped when this closure returns, which stops the reader thread early.
        for batch in rx {
            if cancelled() {
                return Err(DataError::Cancelled);
            }
            let batch = batch?;
            let plans = plan_row_groups(batch.len(), shard_games, shard.games, shard.row_groups);
            let jobs = EncodeJobs {
                factory: &factory,
                plans: &plans,
                batch: &batch,
                ep,
                out_dir,
                first_shard: summary.shards.len(),
            };
            let encoded = pool.install(|| jobs.encode());
            for (plan, chunks) in plans.iter().zip(encoded) {
                let chunks = chunks?;
                if plan.new_shard {
                    let next = shard_path(out_dir, summary.shards.len() + 1);
                    let full = std::mem::replace(&mut shard, ShardFile::create(next, ep)?.0);
                    summary.shards.push(full.finish()?);
                }
                let games = &batch[plan.games.clone()];
                shard.append(chunks, games.len())?;
                count_games(&mut summary, &mut seen, games);
            }
            progress.inc(batch.len() as u64);
        }
        Ok(())
    })?;
    summary.shards.push(shard.finish()?);
    summary.seen_move_ids = (0..NUM_MOVE_IDS)
        .filter(|&id| seen[usize::from(id)])
        .collect();
    summary.distinct_move_ids = summary.seen_move_ids.len();
    write_coverage(out_dir, &summary, options)?;
    Ok(summary)
}

/// The path of shard number `index` in `out_dir`.
fn shard_path(out_dir: &Path, index: usize) -> PathBuf {
    out_dir.join(format!("shard_{index:06}.parquet"))
}

/// The row groups of one batch of games, to encode in parallel.
struct EncodeJobs<'a> {
    factory: &'a ArrowRowGroupWriterFactory,
    plans: &'a [RowGroupPlan],
    batch: &'a [GameRecord],
    ep: EpConvention,
    out_dir: &'a Path,
    /// The shard the batch's first row group goes to, unless that row group starts a new one.
    first_shard: usize,
}

impl EncodeJobs<'_> {
    /// Encodes every planned row group (on the current rayon pool), in plan order.
    fn encode(&self) -> Vec<Result<Vec<ArrowColumnChunk>, DataError>> {
        let mut shard_index = self.first_shard;
        let jobs: Vec<(&RowGroupPlan, PathBuf)> = self
            .plans
            .iter()
            .map(|plan| {
                shard_index += usize::from(plan.new_shard);
                (plan, shard_path(self.out_dir, shard_index))
            })
            .collect();
        jobs.par_iter()
            .map(|(plan, path)| {
                let games = &self.batch[plan.games.clone()];
                encode_row_group(self.factory, plan.row_group, games, self.ep, path)
            })
            .collect()
    }
}

/// Adds `games` to the summary's game and ply counts and marks the move ids they use in `seen`.
fn count_games(summary: &mut TokenizeSummary, seen: &mut [bool], games: &[GameRecord]) {
    for game in games {
        for &m in &game.moves {
            if let Some(slot) = seen.get_mut(usize::from(m)) {
                *slot = true;
            }
        }
        summary.plies += game.moves.len() as u64;
    }
    summary.games += games.len() as u64;
}

/// Writes `coverage.json` (what the shards hold) and the shard layout's `README.md` into
/// `out_dir`.
fn write_coverage(
    out_dir: &Path,
    summary: &TokenizeSummary,
    options: &TokenizeOptions,
) -> Result<(), DataError> {
    let mut coverage = Coverage::new(
        summary.games,
        summary.plies,
        summary.distinct_move_ids as u64,
        u64::from(NUM_MOVE_IDS),
        options.ep_convention.name(),
        summary.shards.len() as u64,
    )
    .with_seen_move_ids(summary.seen_move_ids.clone());
    if let Some(source) = &options.source {
        coverage = coverage.with_source(source.clone());
    }
    cwm_formats::write_json(&out_dir.join(COVERAGE_FILE), &coverage)?;
    let readme = out_dir.join("README.md");
    std::fs::write(&readme, SHARD_LAYOUT).map_err(|e| DataError::io(&readme, e))
}

/// The `tokenize` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokenizeStage;

const EP_CHOICES: &[&str] = &[
    EpConvention::Reference.name(),
    EpConvention::LegalCapture.name(),
];

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "ep_convention",
        ParamType::Choice(EP_CHOICES),
        ParamDefault::Str(EpConvention::Reference.name()),
        "en-passant labels: after every double push (reference) or only when a capture is legal",
    ),
    ParamSpec::with_default(
        "shard_games",
        ParamType::Int,
        ParamDefault::Int(DEFAULT_SHARD_GAMES as i64),
        "games per shard file",
    ),
    cwm_stage::THREADS_PARAM,
];

const INPUTS: &[InputSpec] = &[InputSpec::one(
    "games",
    "a games artifact (split.train, split.val, parse.games, random_uniform)",
)];

const DECL: KindDecl = KindDecl::new(
    "tokenize",
    "writes training-ready shards: START + move ids and (T+1)x75 state labels per game",
)
.params(PARAMS)
.inputs(InputsDecl::Named(INPUTS))
.threads(ThreadsDecl::Param);

impl StageKind for TokenizeStage {
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
                    "src/tokenize.rs",
                    "src/games.rs",
                    "src/parse.rs",
                ],
            ),
            &cwm_chess::games_fingerprint(),
        ])
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let ep_name = params.str("ep_convention")?;
        let ep_convention = EpConvention::from_name(ep_name)
            .ok_or_else(|| StageError::Param(format!("unknown ep_convention {ep_name:?}")))?;
        let shard_games = params.uint("shard_games")?;
        if shard_games == 0 {
            return Err(StageError::Param("shard_games must be positive".into()));
        }
        let source = ctx.input_list("games").first().map(|a| GamesSource {
            producer: a.producer.clone(),
            kind: a.producer_kind.clone(),
            output: a.output.clone(),
        });
        let options = TokenizeOptions {
            ep_convention,
            shard_games,
            threads: ctx.threads(),
            source,
        };
        let summary = tokenize_games(
            ctx.input("games")?,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        ctx.log().line(format!(
            "{} games, {} plies, {} distinct move ids, {} shards",
            summary.games,
            summary.plies,
            summary.distinct_move_ids,
            summary.shards.len()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_chess::replay::{ReplayConfig, replay_sans};

    #[test]
    fn row_groups_never_straddle_a_shard() {
        let ranges = |plans: &[RowGroupPlan]| -> Vec<(usize, usize, bool, usize)> {
            plans
                .iter()
                .map(|p| (p.games.start, p.games.end, p.new_shard, p.row_group))
                .collect()
        };
        // A fresh shard of 1,500 games: a full row group, the shard's remaining 476 games,
        // then a new shard.
        let plans = plan_row_groups(2_500, 1_500, 0, 0);
        assert_eq!(
            ranges(&plans),
            [
                (0, 1024, false, 0),
                (1024, 1500, false, 1),
                (1500, 2500, true, 0)
            ]
        );
        // Continuing a full shard starts a new one at once; a partial one is topped up first.
        assert_eq!(
            ranges(&plan_row_groups(10, 1_500, 1_500, 2)),
            [(0, 10, true, 0)]
        );
        assert_eq!(
            ranges(&plan_row_groups(10, 5, 3, 1)),
            [(0, 2, false, 1), (2, 7, true, 0), (7, 10, true, 0)]
        );
        assert!(plan_row_groups(0, 5, 0, 0).is_empty());
    }

    #[test]
    fn shards_are_byte_identical_for_any_thread_count() {
        let dir = std::env::temp_dir().join(format!("cwm-tok-threads-{}", std::process::id()));
        let games_dir = dir.join("games");
        crate::random_uniform::fast_games_table(&games_dir, 40, 11);
        let progress = Progress::disabled();
        let mut outputs = Vec::new();
        for threads in [1, 3] {
            let out = dir.join(format!("tok-{threads}"));
            std::fs::create_dir_all(&out).unwrap();
            let options = TokenizeOptions {
                shard_games: 17,
                threads,
                ..TokenizeOptions::default()
            };
            let summary = tokenize_games(&games_dir, &out, &options, &progress, &|| false).unwrap();
            assert_eq!((summary.games, summary.shards.len()), (40, 3));
            let bytes: Vec<Vec<u8>> = summary
                .shards
                .iter()
                .map(|path| std::fs::read(path).unwrap())
                .collect();
            outputs.push(bytes);
        }
        assert_eq!(outputs[0], outputs[1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn replayed_states_equal_the_san_replay() {
        let sans: Vec<shakmaty::san::San> =
            "e4 d5 exd5 c5 dxc6 Nf6 cxb7 e5 bxa8=N Bc5 Nf3 O-O Ke2 Qd7"
                .split(' ')
                .map(|s| s.parse().unwrap())
                .collect();
        for ep in EpConvention::ALL {
            let expected = replay_sans(Chess::default(), &sans, ep).unwrap();
            let mut states = Vec::new();
            replay_states("g", &expected.moves[1..], ep, &mut states).unwrap();
            assert_eq!(states, expected.flat_states());
        }
        let _ = ReplayConfig::default();
        let mut states = Vec::new();
        let err = replay_states("bad", &[START], EpConvention::Reference, &mut states).unwrap_err();
        assert!(err.to_string().contains("bad"), "{err}");
        // e2e4 twice: the second is illegal.
        let e2e4 = (12 * 64 + 28) * 5;
        assert!(
            replay_states("twice", &[e2e4, e2e4], EpConvention::Reference, &mut states).is_err()
        );
    }
}
