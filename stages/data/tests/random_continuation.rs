//! The `random_continuation` stage (beyond-spec E6's real-prefix/random-continuation split) on
//! the real sample games of `../shared/data` (when absent: a failure under CI, a loud skip
//! elsewhere; see `cwm_testkit::require`), run through the stage interface: every continued
//! game starts with its source's first `k` moves, goes on with legal moves until the arbiter
//! ends it, and for each switch ply every input game is written or counted as skipped, the
//! same bytes for any thread count.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use cwm_chess::encode::pack_move;
use cwm_random_uniform::Arbiter;
use cwm_stage::{
    InputArtifact, ParamValue, Params, Progress, ProgressEvent, ProgressSink, StageContext,
    StageKind, StageLog,
};
use cwm_stage_data::games::{GAMES_FILE, GameRecord, GamesReader};
use cwm_stage_data::{
    ContinuationSummary, IdKeySource, OutputFormat, ProcessOptions, RandomContinuationStage,
    process_pgn, switch_ply,
};
use cwm_testkit::shared_data;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cwm-cont-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The sample Lichess games as a games table in `dir/games` (the `parse` stage's output).
fn sample_games(pgn: &Path, dir: &Path) -> PathBuf {
    let games = dir.join("games");
    process_pgn(&ProcessOptions {
        pgn: pgn.to_path_buf(),
        out_dir: games.clone(),
        format: OutputFormat::Parquet,
        threads: 2,
        id_key: IdKeySource::None,
        ..ProcessOptions::default()
    })
    .unwrap();
    games
}

fn read_games(dir: &Path) -> Vec<GameRecord> {
    GamesReader::open(dir, 64)
        .unwrap()
        .flat_map(|batch| batch.unwrap())
        .collect()
}

/// The footer's key-value pairs of `dir/games.parquet`.
fn footer(dir: &Path) -> BTreeMap<String, String> {
    let file = std::fs::File::open(dir.join(GAMES_FILE)).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let kv = builder.metadata().file_metadata().key_value_metadata();
    kv.into_iter()
        .flatten()
        .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
        .collect()
}

/// Keeps the progress messages a stage sends.
#[derive(Default)]
struct Messages(Mutex<Vec<String>>);

impl ProgressSink for Messages {
    fn event(&self, event: ProgressEvent) {
        if let ProgressEvent::Message(message) = event {
            self.0.lock().unwrap().push(message);
        }
    }
}

/// Runs the stage on `input` with `prefix_plies: ks`, `seed: 7` on `threads` threads into
/// `out`; returns its progress messages and its log.
fn run_stage(input: &Path, ks: &[i64], threads: usize, out: &Path) -> (Vec<String>, String) {
    let mut params = Params::new();
    let list = ks.iter().map(|&k| ParamValue::Int(k)).collect();
    params.insert("prefix_plies", ParamValue::List(list));
    params.insert("seed", ParamValue::Int(7));
    params.insert("min_fullmoves", ParamValue::Int(10));
    params.insert("max_games", ParamValue::Int(0));
    let artifact = InputArtifact {
        producer: "parse".into(),
        producer_kind: "parse".into(),
        producer_params: Params::new(),
        output: "games".into(),
        hash: "sample".into(),
        path: input.to_path_buf(),
    };
    std::fs::create_dir_all(out).unwrap();
    let log_path = out.with_extension("log");
    let messages = Arc::new(Messages::default());
    let ctx = StageContext::new(
        "random_continuation".to_owned(),
        params,
        BTreeMap::from([("games".to_owned(), vec![artifact])]),
        BTreeMap::from([("out".to_owned(), out.to_path_buf())]),
        out.to_path_buf(),
        threads,
        Progress::new(messages.clone()),
        StageLog::to_file(std::fs::File::create(&log_path).unwrap()),
        Arc::new(AtomicBool::new(false)),
    );
    RandomContinuationStage.run(&ctx).unwrap();
    drop(ctx);
    let messages = messages.0.lock().unwrap().clone();
    (messages, std::fs::read_to_string(&log_path).unwrap())
}

/// Replays `game` with the arbiter: every move legal, no outcome from ply `k` until the end,
/// and the recorded result and termination at the end.
fn check_continuation(game: &GameRecord, k: usize) {
    let mut arbiter = Arbiter::default();
    for (ply, &id) in game.moves.iter().enumerate() {
        if ply >= k {
            assert_eq!(
                arbiter.outcome(),
                None,
                "{}: over before ply {ply}",
                game.id
            );
        }
        let nth = arbiter
            .legal_moves()
            .iter()
            .position(|m| pack_move(m) == id);
        let nth = nth.unwrap_or_else(|| panic!("{}: ply {} is illegal", game.id, ply + 1));
        arbiter.play_nth(nth).unwrap();
    }
    let outcome = arbiter.outcome().expect("the game is over");
    assert_eq!(game.result, outcome.result.as_str(), "{}", game.id);
    let termination = game.termination.as_deref();
    assert_eq!(
        termination,
        Some(outcome.termination.python_name()),
        "{}",
        game.id
    );
}

/// (shorter than `k`, over at ply `k`) among `sources`, by replaying their prefixes.
fn expected_skips(sources: &[GameRecord], k: usize) -> (u64, u64) {
    let (mut shorter, mut over) = (0, 0);
    for source in sources {
        let Some(prefix) = source.moves.get(..k) else {
            shorter += 1;
            continue;
        };
        let mut arbiter = Arbiter::default();
        for &id in prefix {
            let nth = arbiter
                .legal_moves()
                .iter()
                .position(|m| pack_move(m) == id);
            arbiter.play_nth(nth.unwrap()).unwrap();
        }
        over += u64::from(arbiter.outcome().is_some());
    }
    (shorter, over)
}

/// Every continued game maps back to its source, in input order and each source's switch
/// plies in the order of `ks`, with the source's first `k` moves; for each `k` the footer's
/// counts add up to the input.
fn check_output(sources: &[GameRecord], out: &Path, ks: &[usize]) -> Vec<GameRecord> {
    let position: HashMap<&str, usize> = sources
        .iter()
        .enumerate()
        .map(|(i, g)| (g.id.as_str(), i))
        .collect();
    let continued = read_games(out);
    let mut last = None;
    let mut written = vec![0u64; ks.len()];
    for game in &continued {
        let k = switch_ply(&game.id).unwrap_or_else(|| panic!("{}: no switch ply", game.id));
        let nth = ks
            .iter()
            .position(|&x| x == k)
            .expect("a listed switch ply");
        written[nth] += 1;
        let source_id = game.id.strip_suffix(&format!("~k{k}")).unwrap();
        let i = position[source_id];
        assert!(last < Some((i, nth)), "{}: out of order", game.id);
        last = Some((i, nth));
        let source = &sources[i];
        assert_eq!(game.source_index, source.source_index);
        assert_eq!(game.site, source.site);
        assert_eq!(game.moves[..k], source.moves[..k], "{}", game.id);
        assert!(
            game.moves.len() > k && game.moves.len() >= 20,
            "{}",
            game.id
        );
        check_continuation(game, k);
    }
    let kv = footer(out);
    let counts =
        |key: &str| -> Vec<u64> { kv[key].split(',').map(|v| v.parse().unwrap()).collect() };
    let listed: Vec<String> = ks.iter().map(usize::to_string).collect();
    assert_eq!(kv["cwm.prefix_plies"], listed.join(","));
    assert_eq!(kv["cwm.seed"], "7");
    assert_eq!(counts("cwm.input_games"), [sources.len() as u64]);
    assert_eq!(counts("cwm.written"), written);
    let summary = ContinuationSummary::from_footer(out).unwrap();
    for (nth, &k) in ks.iter().enumerate() {
        let skipped = counts("cwm.skipped_shorter_than_prefix")[nth]
            + counts("cwm.skipped_over_at_switch")[nth]
            + counts("cwm.skipped_below_min_fullmoves")[nth];
        assert_eq!(written[nth] + skipped, sources.len() as u64, "k = {k}");
        let (shorter, over) = expected_skips(sources, k);
        assert_eq!(counts("cwm.skipped_shorter_than_prefix")[nth], shorter);
        assert_eq!(counts("cwm.skipped_over_at_switch")[nth], over);
        assert_eq!(summary.per_switch[nth].skipped(), skipped);
    }
    assert_eq!(summary.written(), continued.len() as u64);
    continued
}

#[test]
fn continued_sample_games_keep_their_first_20_moves_on_any_thread_count() {
    let Some(pgn) = shared_data("real/lichess_db_1000k.pgn") else {
        return;
    };
    let dir = temp("k20");
    let sources = read_games(&sample_games(&pgn, &dir));
    assert!(sources.len() > 300, "{} sample games", sources.len());
    let (messages, log) = run_stage(&dir.join("games"), &[20], 1, &dir.join("one"));
    run_stage(&dir.join("games"), &[20], 2, &dir.join("two"));
    let bytes = |name: &str| std::fs::read(dir.join(name).join(GAMES_FILE)).unwrap();
    assert!(
        bytes("one") == bytes("two"),
        "output depends on the thread count"
    );
    let continued = check_output(&sources, &dir.join("one"), &[20]);
    assert!(
        continued.len() * 10 >= sources.len() * 9,
        "{}",
        continued.len()
    );
    let last = messages.last().expect("a summary message");
    println!("{last}");
    assert!(
        last.contains("skipped") && last.contains("after ply 20"),
        "{last}"
    );
    assert!(log.contains(last.as_str()), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_long_prefix_skips_the_short_sample_games_and_counts_them() {
    let Some(pgn) = shared_data("real/lichess_db_1000k.pgn") else {
        return;
    };
    let dir = temp("k60");
    let sources = read_games(&sample_games(&pgn, &dir));
    let (messages, _) = run_stage(&dir.join("games"), &[60], 2, &dir.join("out"));
    check_output(&sources, &dir.join("out"), &[60]);
    let (shorter, _) = expected_skips(&sources, 60);
    assert!(shorter > 0, "no sample game is shorter than 60 plies");
    let last = messages.last().expect("a summary message");
    println!("{last}");
    assert!(
        last.contains(&format!("{shorter} shorter than 60 plies")),
        "{last}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_specifications_three_switch_plies_continue_every_sample_game_three_times() {
    let Some(pgn) = shared_data("real/lichess_db_1000k.pgn") else {
        return;
    };
    let dir = temp("k10-20-40");
    let sources = read_games(&sample_games(&pgn, &dir));
    let (messages, _) = run_stage(&dir.join("games"), &[10, 20, 40], 2, &dir.join("out"));
    let continued = check_output(&sources, &dir.join("out"), &[10, 20, 40]);
    assert!(continued.len() > 2 * sources.len(), "{}", continued.len());
    let last = messages.last().expect("a summary message");
    for k in [10, 20, 40] {
        assert!(last.contains(&format!("after ply {k} ")), "{last}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
