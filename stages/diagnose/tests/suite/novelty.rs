//! The `novelty` stage on real shards: the spec's toy pair, real games against themselves and
//! against disjoint games (checked against an independent count of FENs, token prefixes and
//! label rows), progress and cancellation, peak memory against the training set's size, the
//! training scan's speed, and the per-model metrics on hand-made records.

use crate::Scratch;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::array::{ArrayRef, BinaryArray, ListBuilder, RecordBatch, StringArray, UInt16Builder};
use arrow::datatypes::{DataType, Field, Schema};

use cwm_chess::encode::{START, pack_move, unpack_move};
use cwm_formats::novelty::{NoveltyRow, NoveltySummary, SUMMARY_FILE};
use cwm_random_uniform::Mode;
use cwm_stage::{
    InputArtifact, ParamValue, Params, Progress, ProgressEvent, ProgressSink, StageContext,
    StageKind, StageLog,
};
use cwm_stage_data::games::{GameRecord, GamesReader, GamesWriter};
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, RandomUniformOptions, ShardReader, TokenizeOptions,
    TokenizedGame, generate_random_uniform, process_pgn, tokenize_games,
};
use cwm_stage_diagnose::novelty::{NoveltyMetrics, NoveltyOptions, NoveltyStage};
use cwm_stage_diagnose::{NoveltyError, StepRecord, novelty, novelty_metrics, read_novelty};
use parquet::arrow::ArrowWriter;
use shakmaty::fen::Fen;
use shakmaty::uci::UciMove;
use shakmaty::{Chess, EnPassantMode, Position};

/// The packed ids of a game given in UCI.
fn packed(ucis: &str) -> Vec<u16> {
    let mut position = Chess::default();
    ucis.split_whitespace()
        .map(|uci| {
            let m = uci.parse::<UciMove>().unwrap().to_move(&position).unwrap();
            position.play_unchecked(m);
            pack_move(&m)
        })
        .collect()
}

/// Writes `games` as a games table in `dir/<name>` and tokenizes it into `dir/<name>-tokens`.
fn tokenize(dir: &Path, name: &str, games: &[GameRecord], shard_games: u64) -> PathBuf {
    let table = dir.join(name);
    std::fs::create_dir_all(&table).unwrap();
    let mut writer = GamesWriter::create(&table.join("games.parquet"), &[]).unwrap();
    for game in games {
        writer.push(game).unwrap();
    }
    writer.finish().unwrap();
    let tokens = dir.join(format!("{name}-tokens"));
    std::fs::create_dir_all(&tokens).unwrap();
    let options = TokenizeOptions {
        shard_games,
        threads: 1,
        ..TokenizeOptions::default()
    };
    tokenize_games(&table, &tokens, &options, &Progress::disabled(), &|| false).unwrap();
    tokens
}

fn record(id: &str, moves: Vec<u16>) -> GameRecord {
    GameRecord {
        id: id.into(),
        result: "*".into(),
        moves,
        ..GameRecord::default()
    }
}

fn run(test: &Path, train: &Path, out: &Path) -> (NoveltySummary, Vec<NoveltyRow>) {
    let options = NoveltyOptions {
        threads: 2,
        ..NoveltyOptions::default()
    };
    let summary = novelty(test, train, out, &options, &Progress::disabled(), &|| false).unwrap();
    (summary, read_novelty(out).unwrap())
}

/// Spec 3.4: a toy pair sharing six plies gives prefix_seen for t ≤ 6 and t_dev = 7; a
/// transposed move order is position-seen but prefix-unseen; counts count training steps.
#[test]
fn the_toy_pair_deviates_at_seven_and_a_transposition_is_a_seen_position() {
    let scratch = Scratch::new("toy");
    let train = tokenize(
        &scratch.0,
        "train",
        &[
            record("ruy", packed("e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6")),
            // The start position and 1. Nf3 twice in one game.
            record("back", packed("g1f3 g8f6 f3g1 f6g8 g1f3")),
        ],
        1,
    );
    let test = tokenize(
        &scratch.0,
        "test",
        &[
            record(
                "exchange",
                packed("e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5c6 d7c6"),
            ),
            record("transposed", packed("g1f3 b8c6 e2e4 e7e5")),
        ],
        1,
    );
    let (summary, rows) = run(&test, &train, &scratch.0.join("out"));
    assert_eq!(rows.len(), 9 + 5);
    let (exchange, transposed) = rows.split_at(9);
    for row in exchange {
        assert_eq!(row.game_id, "exchange");
        assert_eq!(row.prefix_seen, row.t <= 6, "t = {}", row.t);
        assert_eq!(row.position_seen, Some(row.t <= 6), "t = {}", row.t);
        assert_eq!(row.deviation_ply, Some(7));
        assert_eq!(row.plies_since_deviation, Some(row.t as i32 - 7));
    }
    // The start position: t = 0 of both training games and t = 4 of "back".
    assert_eq!(exchange[0].position_count, Some(3));
    assert_eq!(exchange[0].prefix_count, 2, "[START] begins both games");
    assert_eq!(exchange[1].prefix_count, 1);
    let seen: Vec<bool> = transposed.iter().map(|r| r.prefix_seen).collect();
    assert_eq!(seen, [true, true, false, false, false]);
    // 1. Nf3 (twice in "back"), then positions no training game reaches, then the Ruy's
    // position after 1. e4 e5 2. Nf3 Nc6 by another move order.
    let positions: Vec<Option<u64>> = transposed.iter().map(|r| r.position_count).collect();
    assert_eq!(positions, [Some(3), Some(2), Some(0), Some(0), Some(1)]);
    assert_eq!(transposed[4].deviation_ply, Some(2));
    assert!(
        !transposed[4].state_seen,
        "the clocks differ from the Ruy's at ply 4"
    );
    assert_eq!(summary.train_games, 2);
    assert_eq!(summary.train_steps, 9 + 6);
    assert_eq!(summary.test_steps, 14);
    assert_eq!(summary.prefix_seen_steps, 7 + 2);
    assert_eq!(summary.position_seen_steps, 7 + 3);
    assert_eq!(summary.deviation.games, 2);
    assert_eq!(summary.deviation.never, 0);
    assert_eq!(summary.bad_games.test + summary.bad_games.train, 0);
    assert_eq!(summary.test_ep_convention.as_deref(), Some("reference"));
}

/// Writes `games` as a shard with the columns the shard reader reads (id, moves, states).
fn write_shard(path: &Path, games: &[TokenizedGame]) {
    let item = Arc::new(Field::new("item", DataType::UInt16, false));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("moves", DataType::List(item.clone()), false),
        Field::new("states", DataType::Binary, false),
    ]));
    let mut moves = ListBuilder::new(UInt16Builder::new()).with_field(item);
    for game in games {
        moves.values().append_slice(&game.moves);
        moves.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(games.iter().map(|g| &g.id))),
        Arc::new(moves.finish()),
        Arc::new(BinaryArray::from_iter_values(
            games.iter().map(|g| g.states.as_slice()),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let mut writer = ArrowWriter::try_new(File::create(path).unwrap(), schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// A test game holding a token that cannot be replayed is counted, named in the summary and
/// the log, and keeps its rows: prefix and state columns throughout, position columns null
/// from the bad token on.
#[test]
fn a_game_that_cannot_be_replayed_is_reported_and_keeps_its_rows() {
    let scratch = Scratch::new("bad");
    let ruy = packed("e2e4 e7e5 g1f3 b8c6 f1b5 a7a6 b5a4 g8f6");
    let train = tokenize(&scratch.0, "train", &[record("ruy", ruy.clone())], 4);
    let source = tokenize(&scratch.0, "source", &[record("ruy", ruy)], 4);
    let good = ShardReader::open(&source, 8)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let mut broken = good.clone();
    broken.id = "broken".into();
    broken.moves[3] = broken.moves[1]; // 2. e2e4 again: no white pawn on e2
    let damaged = scratch.0.join("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    write_shard(
        &damaged.join("shard_000000.parquet"),
        &[broken.clone(), good],
    );

    let (result, out, _) = run_stage(&scratch.0, "out", &damaged, &train, false);
    result.unwrap();
    let summary: NoveltySummary = cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap();
    assert_eq!((summary.bad_games.test, summary.bad_games.train), (1, 0));
    let example = &summary.bad_games.examples[0];
    let found = (example.input.as_str(), example.game_id.as_str(), example.t);
    assert_eq!(found, ("test", "broken", 3));
    assert_eq!(example.token, broken.moves[1]);
    assert_eq!(
        summary.test_ep_convention, None,
        "a shard without the metadata"
    );
    assert_eq!(summary.position_unknown_steps, 6);
    let rows = read_novelty(&out).unwrap();
    assert_eq!(rows.len(), 18);
    for row in &rows[..9] {
        assert_eq!(row.position_seen.is_some(), row.t < 3, "t = {}", row.t);
        assert_eq!(row.prefix_seen, row.t < 3, "t = {}", row.t);
        assert!(row.state_seen, "the labels are the training game's");
    }
    assert!(
        rows[9..]
            .iter()
            .all(|r| r.prefix_seen && r.position_seen == Some(true))
    );
    let log = std::fs::read_to_string(scratch.0.join("out.log")).unwrap();
    let line = format!("test game \"broken\": token {} at step 3", broken.moves[1]);
    assert!(log.contains(&line), "{log}");
}

/// The first `games` games of the shipped sample as game records.
fn sample_records(dir: &Path, games: u64) -> Vec<GameRecord> {
    let pgn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
    let table = dir.join("sample");
    process_pgn(&ProcessOptions {
        pgn,
        out_dir: table.clone(),
        format: OutputFormat::Parquet,
        max_games: games,
        threads: 1,
        id_key: IdKeySource::resolve(Some("test-key")),
        ..ProcessOptions::default()
    })
    .unwrap();
    GamesReader::open(&table, 256)
        .unwrap()
        .flat_map(|batch| batch.unwrap())
        .collect()
}

/// The first four FEN fields, en-passant square only when a capture is legal.
fn key4(position: &Chess) -> String {
    let fen = Fen::from_position(position, EnPassantMode::Legal).to_string();
    fen.split(' ').take(4).collect::<Vec<_>>().join(" ")
}

/// The Key4 FEN of every step of a game (START included), replayed from its packed ids.
fn fens(moves: &[u16]) -> Vec<String> {
    let mut position = Chess::default();
    let mut out = vec![key4(&position)];
    for &id in moves {
        let (from, to, promotion) = unpack_move(id).unwrap();
        let m = UciMove::Normal {
            from,
            to,
            promotion,
        }
        .to_move(&position)
        .unwrap();
        position.play_unchecked(m);
        out.push(key4(&position));
    }
    out
}

/// Training counts recomputed with plain maps: FENs, token prefixes and label rows.
#[derive(Default)]
struct Independent {
    positions: HashMap<String, u64>,
    prefixes: HashMap<Vec<u16>, u64>,
    states: HashMap<Vec<u8>, u64>,
}

impl Independent {
    fn of(games: &[GameRecord], shards: &Path) -> Independent {
        let mut counts = Independent::default();
        for game in games {
            for fen in fens(&game.moves) {
                *counts.positions.entry(fen).or_default() += 1;
            }
            let tokens: Vec<u16> = std::iter::once(START).chain(game.moves.clone()).collect();
            for t in 0..tokens.len() {
                *counts.prefixes.entry(tokens[..=t].to_vec()).or_default() += 1;
            }
        }
        for game in ShardReader::open(shards, 64).unwrap() {
            for labels in game.unwrap().states.chunks(75) {
                *counts.states.entry(labels.to_vec()).or_default() += 1;
            }
        }
        counts
    }
}

/// `InputArtifact`s for the stage's two inputs.
fn inputs(test: &Path, train: &Path) -> BTreeMap<String, Vec<InputArtifact>> {
    let artifact = |path: &Path, hash: &str| {
        vec![InputArtifact {
            producer: "tokenize".into(),
            producer_kind: "tokenize".into(),
            producer_params: Params::new(),
            output: "out".into(),
            hash: hash.into(),
            path: path.to_path_buf(),
        }]
    };
    BTreeMap::from([
        ("test".to_owned(), artifact(test, "test-hash")),
        ("train".to_owned(), artifact(train, "train-hash")),
    ])
}

/// Every progress event.
#[derive(Default)]
struct Recorder(Mutex<Vec<ProgressEvent>>);

impl ProgressSink for Recorder {
    fn event(&self, event: ProgressEvent) {
        self.0.lock().unwrap().push(event);
    }
}

/// Runs the stage kind through a real context; returns the output dir and the progress.
fn run_stage(
    dir: &Path,
    name: &str,
    test: &Path,
    train: &Path,
    cancelled: bool,
) -> (Result<(), String>, PathBuf, Vec<ProgressEvent>) {
    let mut params = Params::new();
    params.insert("max_train_games", ParamValue::Int(0));
    params.insert("threads", ParamValue::Int(2));
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    let recorder = Arc::new(Recorder::default());
    let ctx = StageContext::new(
        "novelty",
        params,
        inputs(test, train),
        BTreeMap::from([("out".to_owned(), out.clone())]),
        dir.to_path_buf(),
        2,
        Progress::new(recorder.clone()),
        StageLog::to_file(File::create(dir.join(format!("{name}.log"))).unwrap()),
        Arc::new(cancelled.into()),
    );
    let result = NoveltyStage.run(&ctx).map_err(|e| e.to_string());
    let events = recorder.0.lock().unwrap().clone();
    (result, out, events)
}

/// Real games split in two: the training half against itself is all seen; the other half's
/// rows carry exactly the counts of an independent recount.
#[test]
fn the_stage_on_real_games_matches_an_independent_count() {
    let scratch = Scratch::new("real");
    let games = sample_records(&scratch.0, 160);
    let mut train_games = Vec::new();
    let mut test_games = Vec::new();
    for (i, game) in games.into_iter().enumerate() {
        if i % 2 == 0 {
            train_games.push(game);
        } else {
            test_games.push(game);
        }
    }
    let train = tokenize(&scratch.0, "train", &train_games, 16);
    let test = tokenize(&scratch.0, "test", &test_games, 16);

    let (result, out, events) = run_stage(&scratch.0, "self", &train, &train, false);
    result.unwrap();
    let summary: NoveltySummary = cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap();
    let n = train_games.len() as u64;
    assert_eq!(summary.train_games, n);
    assert_eq!(summary.test_hash.as_deref(), Some("test-hash"));
    assert_eq!(summary.prefix_seen_share, 1.0);
    assert_eq!(summary.position_seen_share, 1.0);
    assert_eq!(summary.state_seen_share, 1.0);
    assert_eq!(summary.deviation.never, n);
    assert!(events.contains(&ProgressEvent::Total(n)), "{events:?}");
    let done: u64 = events
        .iter()
        .map(|e| match e {
            ProgressEvent::Inc(k) => *k,
            _ => 0,
        })
        .sum();
    assert_eq!(done, n);
    let mut lengths: Vec<usize> = train_games.iter().map(|g| g.moves.len()).collect();
    lengths.sort_unstable();
    let rank = (0.99 * lengths.len() as f64).ceil() as usize;
    assert_eq!(summary.train_length_p99 as usize, lengths[rank - 1]);

    let (result, out, _) = run_stage(&scratch.0, "other", &test, &train, false);
    result.unwrap();
    let summary: NoveltySummary = cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap();
    let rows = read_novelty(&out).unwrap();
    let counts = Independent::of(&train_games, &train);
    check_against_recount(&rows, &summary, &test_games, &test, &counts);
    assert!(summary.prefix_seen_share > 0.0 && summary.prefix_seen_share < 1.0);
    assert!(summary.position_seen_share > summary.prefix_seen_share);

    let (result, _, _) = run_stage(&scratch.0, "cancelled", &test, &train, true);
    assert_eq!(result.unwrap_err(), "cancelled");
}

/// Each row of the test games against the independent counts, and the summary's totals.
fn check_against_recount(
    rows: &[NoveltyRow],
    summary: &NoveltySummary,
    test_games: &[GameRecord],
    test_shards: &Path,
    counts: &Independent,
) {
    let shards: Vec<_> = ShardReader::open(test_shards, 64)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(shards.len(), test_games.len());
    let mut rest = rows;
    let mut seen = [0u64; 3];
    for (game, tokenized) in test_games.iter().zip(&shards) {
        let tokens: Vec<u16> = std::iter::once(START).chain(game.moves.clone()).collect();
        let fens = fens(&game.moves);
        let (game_rows, after) = rest.split_at(tokens.len());
        rest = after;
        let expected: Vec<[u64; 3]> = (0..tokens.len())
            .map(|t| {
                let labels = &tokenized.states[75 * t..75 * t + 75];
                [
                    counts.prefixes.get(&tokens[..=t]).copied().unwrap_or(0),
                    counts.positions.get(&fens[t]).copied().unwrap_or(0),
                    counts.states.get(labels).copied().unwrap_or(0),
                ]
            })
            .collect();
        let deviation = expected.iter().position(|c| c[0] == 0).map(|t| t as u32);
        for (t, (row, [prefix, position, state])) in game_rows.iter().zip(&expected).enumerate() {
            assert_eq!(
                (row.game_id.as_str(), row.t as usize),
                (game.id.as_str(), t)
            );
            let found = (row.prefix_count, row.position_count, row.state_count);
            assert_eq!(
                found,
                (*prefix, Some(*position), *state),
                "{} t {t}",
                game.id
            );
            assert_eq!(row.deviation_ply, deviation, "{} t {t}", game.id);
            for (k, count) in [prefix, position, state].into_iter().enumerate() {
                seen[k] += u64::from(*count > 0);
            }
        }
    }
    assert!(rest.is_empty());
    assert_eq!(summary.test_steps, rows.len() as u64);
    let found = [
        summary.prefix_seen_steps,
        summary.position_seen_steps,
        summary.state_seen_steps,
    ];
    assert_eq!(found, seen);
    let deviating = test_games.len() as u64 - summary.deviation.never;
    assert_eq!(summary.deviation.games, deviating);
}

/// The child-process side of the memory test: runs the stage on the inputs the parent names
/// and prints the process's peak resident set size.
#[test]
#[ignore = "run in a child process by peak_memory_does_not_grow_with_the_training_games"]
fn memory_probe() {
    let spec = std::env::var(PROBE_ENV).expect("the parent test sets the inputs");
    let [test, train, out]: [&str; 3] = spec
        .split('\n')
        .collect::<Vec<_>>()
        .try_into()
        .expect("three paths");
    let mut params = Params::new();
    params.insert("threads", ParamValue::Int(1));
    params.insert("max_train_games", ParamValue::Int(0));
    let ctx = StageContext::new(
        "novelty",
        params,
        inputs(Path::new(test), Path::new(train)),
        BTreeMap::from([("out".to_owned(), PathBuf::from(out))]),
        PathBuf::from(out),
        1,
        Progress::disabled(),
        StageLog::discard(),
        Default::default(),
    );
    NoveltyStage.run(&ctx).unwrap();
    let summary: NoveltySummary =
        cwm_formats::read_json(&Path::new(out).join(SUMMARY_FILE)).unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status");
    println!(
        "novelty-probe train_games={} train_steps={} peak_kib={peak_kib}",
        summary.train_games, summary.train_steps
    );
}

/// The environment variable that hands the probe its inputs.
const PROBE_ENV: &str = "CWM_NOVELTY_MEMORY_PROBE";

/// Runs [`memory_probe`] in a child process; returns (training games, steps, peak KiB).
fn probe(test: &Path, train: &Path, out: &Path) -> (u64, u64, u64) {
    std::fs::create_dir_all(out).unwrap();
    let spec = [test, train, out]
        .map(|p| p.display().to_string())
        .join("\n");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "novelty::memory_probe",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(PROBE_ENV, spec)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&child.stderr)
    );
    // The harness prints the test's name on the same line, before the probe's output.
    let line = stdout
        .split_once("novelty-probe ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("no probe line in {stdout}"));
    let value = |name: &str| -> u64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    (
        value("train_games"),
        value("train_steps"),
        value("peak_kib"),
    )
}

/// Spec 3.4: the peak memory of a run does not grow with the training games. The training
/// sets are random games (every one new, so a scan that kept training keys would grow by tens
/// of megabytes), 1× and 4× as many, in shards of the same size, against the same real test
/// games; each run is a child process reporting its own peak resident set size.
#[cfg(target_os = "linux")]
#[test]
fn peak_memory_does_not_grow_with_the_training_games() {
    const GAMES: u64 = 1200;
    const SHARDS: u64 = 4;
    let scratch = Scratch::new("memory");
    let test = tokenize(&scratch.0, "test", &sample_records(&scratch.0, 40), 64);
    let random = scratch.0.join("random");
    let options = RandomUniformOptions {
        games: 4 * GAMES,
        seed: 11,
        mode: Mode::Fast,
        threads: 2,
        ..RandomUniformOptions::default()
    };
    let disabled = Progress::disabled();
    generate_random_uniform(&options, &random, OutputFormat::Parquet, &disabled, &|| {
        false
    })
    .unwrap();
    let train4 = scratch.0.join("train4");
    std::fs::create_dir_all(&train4).unwrap();
    let tokenize_options = TokenizeOptions {
        shard_games: GAMES / SHARDS,
        threads: 2,
        ..TokenizeOptions::default()
    };
    tokenize_games(&random, &train4, &tokenize_options, &disabled, &|| false).unwrap();
    let train1 = scratch.0.join("train1");
    std::fs::create_dir_all(&train1).unwrap();
    for shard in 0..SHARDS {
        let name = format!("shard_{shard:06}.parquet");
        std::fs::copy(train4.join(&name), train1.join(&name)).unwrap();
    }

    let (games1, steps1, peak1) = probe(&test, &train1, &scratch.0.join("out1"));
    let (games4, steps4, peak4) = probe(&test, &train4, &scratch.0.join("out4"));
    println!(
        "peak RSS: {games1} training games ({steps1} steps) {peak1} KiB, \
         {games4} games ({steps4} steps) {peak4} KiB"
    );
    assert_eq!((games1, games4), (GAMES, 4 * GAMES));
    assert!(steps4 > 3 * steps1);
    let margin_kib = 10 * 1024;
    assert!(
        peak4 <= peak1 + margin_kib,
        "the peak grew from {peak1} KiB to {peak4} KiB with 4x the training games"
    );
}

/// The training scan's speed on the shipped sample, replicated: run it with
/// `cargo test --release -p cwm-stage-diagnose novelty::scan_throughput -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement; run it in release builds"]
fn scan_throughput() {
    use cwm_stage_diagnose::novelty::keys::GameKeys;
    use cwm_stage_diagnose::novelty::{ScanControl, collect_test_keys, scan_training};
    let scratch = Scratch::new("speed");
    let games = sample_records(&scratch.0, 0);
    let (test_games, train_games) = games.split_at(games.len() / 2);
    let test = tokenize(&scratch.0, "test", test_games, 1024);
    let train = tokenize(&scratch.0, "train", train_games, 1024);
    let copies = 50;
    for i in 1..copies {
        let copy = train.join(format!("shard_{:06}.parquet", 1000 + i));
        std::fs::copy(train.join("shard_000000.parquet"), copy).unwrap();
    }
    // Where the time goes, on one thread: decoding the shards, and walking the keys.
    let started = Instant::now();
    let decoded: Vec<TokenizedGame> = ShardReader::open(&train, 1024)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let decode = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let steps: usize = decoded.iter().map(|g| GameKeys::new(g).count()).sum();
    let walk = started.elapsed().as_secs_f64();
    println!(
        "decode {:.0} games/s; key walk (replay + 3 keys, no lookups) {:.0} steps/s",
        decoded.len() as f64 / decode,
        steps as f64 / walk
    );
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let keys = collect_test_keys(&test, &pool, &|| false).unwrap();
        let control = ScanControl {
            pool: &pool,
            progress: &Progress::disabled(),
            cancelled: &|| false,
        };
        let started = Instant::now();
        let scan = scan_training(&train, &keys, 0, &control).unwrap();
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(scan.games, train_games.len() as u64 * copies);
        println!(
            "training scan, {threads} thread(s): {} games, {} steps in {seconds:.2} s: \
             {:.0} games/s, {:.0} steps/s",
            scan.games,
            scan.steps,
            scan.games as f64 / seconds,
            scan.steps as f64 / seconds
        );
    }
}

/// One hand-made novelty row: (game, t, prefix seen, position count, state seen, t_dev).
fn row(
    game: &str,
    t: u32,
    prefix_seen: bool,
    position: Option<u64>,
    state_seen: bool,
    deviation: Option<u32>,
) -> NoveltyRow {
    NoveltyRow {
        game_id: game.into(),
        t,
        prefix_seen,
        position_seen: position.map(|c| c > 0),
        state_seen,
        prefix_count: u64::from(prefix_seen),
        position_count: position,
        state_count: u64::from(state_seen),
        deviation_ply: deviation,
        plies_since_deviation: deviation.map(|d| t as i32 - d as i32),
    }
}

/// Three games: "a" deviates at 2, "b" at 1 and loses its position at 2, "c" never deviates.
fn hand_rows() -> Vec<NoveltyRow> {
    vec![
        row("a", 0, true, Some(10), true, Some(2)),
        row("a", 1, true, Some(3), true, Some(2)),
        row("a", 2, false, Some(1), false, Some(2)),
        row("a", 3, false, Some(0), false, Some(2)),
        row("a", 4, false, Some(0), false, Some(2)),
        row("a", 5, false, Some(2), false, Some(2)),
        row("a", 6, false, Some(0), false, Some(2)),
        row("b", 0, true, Some(10), true, Some(1)),
        row("b", 1, false, Some(5), false, Some(1)),
        row("b", 2, false, None, false, Some(1)),
        row("c", 0, true, Some(10), true, None),
        row("c", 1, true, Some(1500), false, None),
    ]
}

/// A model's results on [`hand_rows`]: (exact, labelwise, V1).
fn hand_records(rows: &[NoveltyRow]) -> Vec<StepRecord<'_>> {
    let results = [
        (true, 1.0, Some(true)),
        (true, 1.0, Some(true)),
        (false, 0.9, Some(true)),
        (false, 0.96, Some(false)),
        (false, 0.5, None),
        (true, 1.0, Some(true)),
        (false, 0.4, Some(false)),
        (false, 0.8, Some(false)),
        (true, 1.0, Some(true)),
        (false, 0.6, None),
        (true, 1.0, None),
        (false, 0.7, Some(true)),
    ];
    rows.iter()
        .zip(results)
        .map(|(row, (exact, labelwise, v1))| StepRecord {
            game_id: &row.game_id,
            t: row.t,
            exact,
            labelwise,
            v1,
        })
        .collect()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-12)
}

/// The per-model metrics of hand-made records, every figure worked out by hand (bins of 2
/// plies).
#[test]
fn novelty_metrics_of_hand_made_records() {
    let rows = hand_rows();
    let records = hand_records(&rows);
    let metrics: NoveltyMetrics =
        novelty_metrics(records.iter().copied(), rows.iter().cloned().map(Ok), 2).unwrap();
    assert_eq!((metrics.steps, metrics.games), (12, 3));
    let seen = (
        metrics.prefix_seen_steps,
        metrics.position_seen_steps,
        metrics.state_seen_steps,
    );
    assert_eq!(seen, (5, 8, 4));
    assert_eq!(metrics.unclassified_steps, 1);
    assert!(close(metrics.position_seen_share, 8.0 / 12.0));
    assert_eq!(metrics.by_ply.len(), 4);
    let [b0, b1, b2, b3] = &metrics.by_ply[..] else {
        unreachable!()
    };
    assert_eq!((b0.from, b0.to, b3.from, b3.to), (0, 1, 6, 7));
    // Bin 0: prefix seen a0 a1 b0 c0 c1; position seen b1; no novel step.
    let cell = &b0.prefix_seen;
    assert_eq!((cell.n, cell.exact, cell.v1_n, cell.v1_pass), (5, 3, 4, 3));
    assert!(close(cell.exact_state, 0.6) && close(cell.labelwise, 0.9));
    assert!(close(cell.v1_rate, 0.75));
    assert_eq!(
        (b0.position_seen.n, b0.position_seen.exact, b0.novel.n),
        (1, 1, 0)
    );
    assert_eq!(b0.novel.exact_state, None);
    // Bin 1: position seen a2 (wrong), novel a3 (wrong); b2 is in no stratum.
    assert_eq!(
        (b1.prefix_seen.n, b1.position_seen.n, b1.novel.n),
        (0, 1, 1)
    );
    assert!(close(b1.novel.labelwise, 0.96) && close(b1.novel.v1_rate, 0.0));
    assert!(close(b1.position_seen.v1_rate, 1.0));
    // Bin 2: position seen a5 (exact), novel a4 (wrong, V1 unknown); bin 3: novel a6 only.
    assert_eq!(
        (b2.position_seen.exact, b2.novel.n, b2.novel.v1_n),
        (1, 1, 0)
    );
    assert_eq!(b2.novel.v1_rate, None);
    assert_eq!((b3.novel.n, b3.position_seen.n + b3.prefix_seen.n), (1, 0));
    // Gap: bin 1 gives 0 − 0, bin 2 gives 1 − 0, one novel step each; bins 0 and 3 lack a side.
    assert!(close(metrics.seen_novel_gap, 0.5));
    assert_eq!(metrics.gap_weight, 2);
    let by_deviation: Vec<(&str, u64, u64)> = metrics
        .by_plies_since_deviation
        .iter()
        .map(|b| (b.label.as_str(), b.n, b.exact))
        .collect();
    let expected = [
        ("<0", 3, 2),
        ("0", 2, 1),
        ("1-4", 5, 1),
        ("5-9", 0, 0),
        ("10-19", 0, 0),
        ("20-49", 0, 0),
        (">=50", 0, 0),
        ("never", 2, 1),
    ];
    assert_eq!(by_deviation, expected);
    let by_count: Vec<(&str, u64, u64)> = metrics
        .by_position_count
        .iter()
        .map(|b| (b.label.as_str(), b.n, b.exact))
        .collect();
    let expected = [
        ("0", 3, 0),
        ("1", 1, 0),
        ("2-9", 3, 3),
        ("10-99", 3, 2),
        ("100-999", 0, 0),
        (">=1000", 1, 0),
    ];
    assert_eq!(by_count, expected);
}

/// The join passes over the steps a truncated evaluation left out and refuses anything else.
#[test]
fn the_join_follows_the_shards_order_or_fails_naming_the_step() {
    let rows = hand_rows();
    let records = hand_records(&rows);
    let ok =
        |records: Vec<StepRecord<'_>>| novelty_metrics(records, rows.iter().cloned().map(Ok), 20);
    // max_steps = 3 (the first three steps of each game) and max_games = 2.
    let truncated: Vec<StepRecord<'_>> = records
        .iter()
        .copied()
        .filter(|r| r.t < 3 && r.game_id != "c")
        .collect();
    let metrics = ok(truncated).unwrap();
    assert_eq!((metrics.steps, metrics.games), (6, 2));
    assert_eq!(metrics.by_ply.len(), 1);

    let fails = |records: Vec<StepRecord<'_>>, needle: &str| {
        let err = ok(records).unwrap_err();
        assert!(matches!(err, NoveltyError::Join { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{err}");
    };
    // A game skipped, a step out of order, a different first step.
    let without_b: Vec<_> = records
        .iter()
        .copied()
        .filter(|r| r.game_id != "b")
        .collect();
    fails(
        without_b,
        "game \"c\" step 0 meets the novelty row of game \"b\" step 0",
    );
    let mut swapped = records.clone();
    swapped.swap(0, 1);
    fails(
        swapped,
        "game \"a\" step 1 meets the novelty row of game \"a\" step 0",
    );
    let mut late = records.clone();
    late.remove(0);
    fails(late, "record 0");
    let mut more = records.clone();
    more.push(StepRecord {
        game_id: "d",
        t: 0,
        exact: true,
        labelwise: 1.0,
        v1: None,
    });
    fails(
        more,
        "record 12: game \"d\" step 0: the novelty table has no more rows",
    );
    let mut bad = records.clone();
    bad[3].labelwise = 1.5;
    fails(bad, "labelwise accuracy 1.5 is not in [0, 1]");
    let err = novelty_metrics(records, rows.iter().cloned().map(Ok), 0).unwrap_err();
    assert!(matches!(err, NoveltyError::Invalid(_)), "{err}");
}
