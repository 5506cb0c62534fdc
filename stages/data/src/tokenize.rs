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
//! be a legal move, else the stage fails: the input is not a games table of legal games). The
//! replay runs on a local rayon pool over batches of [`BATCH_GAMES`] games; output order equals
//! input order for any thread count. Memory is bounded by one batch and one row group.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, ListBuilder, RecordBatch, StringBuilder, UInt16Builder, UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use cwm_chess::encode::{
    EpConvention, NUM_MOVE_IDS, START, STATE_LEN, encode_state_into, unpack_move,
};
use cwm_stage::{
    InputSpec, InputsDecl, ParamDefault, ParamSpec, ParamType, Params, Progress, StageContext,
    StageError, StageKind, Threads,
};
use parquet::arrow::ArrowWriter;
use parquet::schema::types::ColumnPath;
use rayon::prelude::*;
use shakmaty::uci::UciMove;
use shakmaty::{Chess, Position};

use crate::DataError;
use crate::games::{GameRecord, GamesReader, u16_item_field, writer_properties};
use crate::parse::pool;

/// Games replayed per parallel batch.
pub const BATCH_GAMES: usize = 1024;
/// Games per Parquet row group of a shard.
pub const SHARD_ROW_GROUP_GAMES: usize = 1024;
/// Default games per shard.
pub const DEFAULT_SHARD_GAMES: u64 = 100_000;

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
#[derive(Debug, Clone, Copy)]
pub struct TokenizeOptions {
    /// En-passant convention of the labels.
    pub ep_convention: EpConvention,
    /// Games per shard file (at least 1).
    pub shard_games: u64,
    /// Worker threads.
    pub threads: usize,
}

impl Default for TokenizeOptions {
    fn default() -> TokenizeOptions {
        TokenizeOptions {
            ep_convention: EpConvention::Reference,
            shard_games: DEFAULT_SHARD_GAMES,
            threads: 1,
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
        encode_state_into(&position, ep_convention, &mut labels);
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

struct ShardWriter {
    path: PathBuf,
    writer: ArrowWriter<BufWriter<File>>,
    id: StringBuilder,
    result: StringBuilder,
    plies: UInt32Builder,
    moves: ListBuilder<UInt16Builder>,
    states: BinaryBuilder,
    pending: usize,
    games: u64,
}

impl ShardWriter {
    fn create(path: PathBuf, ep: EpConvention) -> Result<ShardWriter, DataError> {
        let file = File::create(&path).map_err(|e| DataError::io(&path, e))?;
        let metadata = [("cwm.ep_convention".to_owned(), ep_name(ep).to_owned())];
        let props = writer_properties(SHARD_ROW_GROUP_GAMES, &metadata)
            .into_builder()
            .set_column_dictionary_enabled(ColumnPath::from("states"), false)
            .set_column_dictionary_enabled(ColumnPath::from("id"), false)
            .build();
        let writer = ArrowWriter::try_new(BufWriter::new(file), shard_schema(), Some(props))
            .map_err(|e| DataError::parquet(&path, e))?;
        Ok(ShardWriter {
            path,
            writer,
            id: StringBuilder::new(),
            result: StringBuilder::new(),
            plies: UInt32Builder::new(),
            moves: ListBuilder::new(UInt16Builder::new()).with_field(u16_item_field()),
            states: BinaryBuilder::new(),
            pending: 0,
            games: 0,
        })
    }

    fn push(&mut self, game: &GameRecord, states: &[u8]) -> Result<(), DataError> {
        self.id.append_value(&game.id);
        self.result.append_value(&game.result);
        self.plies
            .append_value(u32::try_from(game.moves.len()).unwrap_or(u32::MAX));
        self.moves.values().append_value(START);
        self.moves.values().append_slice(&game.moves);
        self.moves.append(true);
        self.states.append_value(states);
        self.pending += 1;
        self.games += 1;
        if self.pending >= SHARD_ROW_GROUP_GAMES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DataError> {
        if self.pending == 0 {
            return Ok(());
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.result.finish()),
            Arc::new(self.plies.finish()),
            Arc::new(self.moves.finish()),
            Arc::new(self.states.finish()),
        ];
        let batch = RecordBatch::try_new(shard_schema(), columns)
            .map_err(|e| DataError::arrow(&self.path, e))?;
        self.writer
            .write(&batch)
            .and_then(|()| self.writer.flush())
            .map_err(|e| DataError::parquet(&self.path, e))?;
        self.pending = 0;
        Ok(())
    }

    fn finish(mut self) -> Result<PathBuf, DataError> {
        self.flush()?;
        self.writer
            .close()
            .map_err(|e| DataError::parquet(&self.path, e))?;
        Ok(self.path)
    }
}

/// The param spelling of an en-passant convention.
pub fn ep_name(ep: EpConvention) -> &'static str {
    match ep {
        EpConvention::Reference => "reference",
        EpConvention::LegalCapture => "legal_capture",
    }
}

/// The en-passant convention named `name` (`reference` or `legal_capture`).
pub fn ep_from_name(name: &str) -> Option<EpConvention> {
    match name {
        "reference" => Some(EpConvention::Reference),
        "legal_capture" => Some(EpConvention::LegalCapture),
        _ => None,
    }
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
        shards: Vec::new(),
    };
    let mut shard: Option<ShardWriter> = None;
    for batch in GamesReader::open(input, BATCH_GAMES)? {
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        let batch = batch?;
        let states: Vec<Result<Vec<u8>, DataError>> = pool.install(|| {
            batch
                .par_iter()
                .map(|game| {
                    let mut states = Vec::new();
                    replay_states(&game.id, &game.moves, ep, &mut states).map(|()| states)
                })
                .collect()
        });
        for (game, states) in batch.iter().zip(states) {
            let states = states?;
            let writer = match &mut shard {
                Some(w) if w.games < shard_games => w,
                _ => {
                    if let Some(full) = shard.take() {
                        summary.shards.push(full.finish()?);
                    }
                    let path = out_dir.join(format!("shard_{:06}.parquet", summary.shards.len()));
                    shard.insert(ShardWriter::create(path, ep)?)
                }
            };
            writer.push(game, &states)?;
            for &m in &game.moves {
                if let Some(slot) = seen.get_mut(usize::from(m)) {
                    *slot = true;
                }
            }
            summary.games += 1;
            summary.plies += game.moves.len() as u64;
        }
        progress.inc(batch.len() as u64);
    }
    match shard {
        Some(w) => summary.shards.push(w.finish()?),
        // An empty input still gives one (empty) shard, so readers find the schema.
        None => summary
            .shards
            .push(ShardWriter::create(out_dir.join("shard_000000.parquet"), ep)?.finish()?),
    }
    summary.distinct_move_ids = seen.iter().filter(|&&s| s).count();
    let coverage = serde_json::json!({
        "games": summary.games,
        "plies": summary.plies,
        "distinct_move_ids": summary.distinct_move_ids,
        "move_ids": NUM_MOVE_IDS,
        "coverage": summary.distinct_move_ids as f64 / f64::from(NUM_MOVE_IDS),
        "ep_convention": ep_name(ep),
        "shards": summary.shards.len(),
    });
    let coverage_path = out_dir.join("coverage.json");
    let mut text = serde_json::to_string_pretty(&coverage).unwrap_or_default();
    text.push('\n');
    std::fs::write(&coverage_path, text).map_err(|e| DataError::io(&coverage_path, e))?;
    let readme = out_dir.join("README.md");
    std::fs::write(&readme, SHARD_LAYOUT).map_err(|e| DataError::io(&readme, e))?;
    Ok(summary)
}

/// The `tokenize` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct TokenizeStage;

const EP_CHOICES: &[&str] = &["reference", "legal_capture"];

const PARAMS: &[ParamSpec] = &[
    ParamSpec::with_default(
        "ep_convention",
        ParamType::Choice(EP_CHOICES),
        ParamDefault::Str("reference"),
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

impl StageKind for TokenizeStage {
    fn name(&self) -> &'static str {
        "tokenize"
    }

    fn doc(&self) -> &'static str {
        "writes training-ready shards: START + move ids and (T+1)x75 state labels per game"
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
            cwm_chess::SOURCE_FINGERPRINT,
        ])
    }

    fn params(&self) -> &'static [ParamSpec] {
        PARAMS
    }

    fn inputs(&self) -> InputsDecl {
        InputsDecl::Named(INPUTS)
    }

    fn threads(&self, params: &Params) -> Threads {
        Threads::from_param(params)
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let params = ctx.params();
        let ep_name = params.str("ep_convention")?;
        let ep_convention = ep_from_name(ep_name)
            .ok_or_else(|| StageError::Param(format!("unknown ep_convention {ep_name:?}")))?;
        let shard_games = params.uint("shard_games")?;
        if shard_games == 0 {
            return Err(StageError::Param("shard_games must be positive".into()));
        }
        let options = TokenizeOptions {
            ep_convention,
            shard_games,
            threads: ctx.threads(),
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
    fn replayed_states_equal_the_san_replay() {
        let sans: Vec<shakmaty::san::San> =
            "e4 d5 exd5 c5 dxc6 Nf6 cxb7 e5 bxa8=N Bc5 Nf3 O-O Ke2 Qd7"
                .split(' ')
                .map(|s| s.parse().unwrap())
                .collect();
        for ep in [EpConvention::Reference, EpConvention::LegalCapture] {
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
