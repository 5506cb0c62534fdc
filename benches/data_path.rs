//! Data-path benchmarks: the performance evidence of the chess data stages (issue 3), every
//! figure a ratio against a baseline measured in the same run.
//!
//! - `parse_tokenize/{1k,x20}`: the library path the stages run (`process_pgn` into a games
//!   table, then `tokenize_games` into training shards, both on disk in a temp dir) with 1 and
//!   2 threads, on `../shared/data/real/lichess_db_1000k.pgn` (or `CWM_BENCH_PGN`) and on that
//!   file concatenated `CWM_BENCH_COPIES` times (default 20) at bench time.
//! - `bare_replay/{1k,x20}`: pgn-reader 0.29 reading the same bytes with a visitor that only
//!   plays each SAN with shakmaty: no headers kept, no ids, no labels, no output. The practical
//!   limit of any replay.
//! - `random_uniform`: `FastGames` (fast mode) on one thread.
//! - Python baselines, run once each through `python3` (skipped with a message when
//!   `import chess` fails): `benches/python/replay_encode.py` (python-chess `read_game`, push and
//!   the 75-label encoding of every position, over the 1k file) and
//!   `benches/python/random_player.py` (uniformly random legal moves until
//!   `is_game_over(claim_draw=True)`, and a variant without claims, labelled as such).
//!
//! Rates are games of the input per second (every game the file holds, kept or rejected), so
//! the Rust path, bare replay and python-chess share one denominator. The Rust figures are the
//! median of criterion's samples. At the end a table of the figures and their ratios goes to
//! stderr and to `target/criterion/cwm-data-path-summary.txt`.
//!
//! ```text
//! cargo bench --bench data_path                 # everything
//! cargo bench --bench data_path -- x20          # one input; the table shows what ran
//! taskset -c 0 cargo bench --bench data_path -- x20   # per-core figures
//! ```
//!
//! "1 thread" sizes the stages' rayon pools; parse and tokenize also run a reader thread, and
//! parse writes on its calling thread while the pool replays, so unpinned "1 thread" figures use
//! more than one core. Pin the process to one core for per-core figures, and compare the
//! unpinned 2-thread figure with the pinned 1-thread one for the scaling.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use cwm_random_uniform::generator::FastGames;
use cwm_stage::Progress;
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, TokenizeOptions, process_pgn, tokenize_games,
};
use pgn_reader::{RawTag, Reader, SanPlus, Visitor};
use shakmaty::{Chess, Position};

#[path = "support/samples.rs"]
mod samples;
use samples::{median_seconds, record};

/// Random games per measured iteration of `random_uniform`.
const RANDOM_GAMES: usize = 2_000;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn source_pgn() -> PathBuf {
    std::env::var_os("CWM_BENCH_PGN").map_or_else(
        || repo_root().join("../shared/data/real/lichess_db_1000k.pgn"),
        PathBuf::from,
    )
}

/// One input file of the data-path benches.
struct Input {
    label: &'static str,
    path: PathBuf,
    games: u64,
    bytes: u64,
}

/// Counts the games pgn-reader finds in a file (what the parse stage reports as read).
fn count_games(path: &Path) -> u64 {
    let file = File::open(path).expect("open bench input");
    cwm_chess::replay::PgnGames::new(file)
        .filter(Result::is_ok)
        .count() as u64
}

fn make_inputs(work: &Path) -> Option<Vec<Input>> {
    let source = source_pgn();
    let Ok(text) = std::fs::read(&source) else {
        eprintln!(
            "data_path: {} is absent; skipping the parse/tokenize and bare-replay benches",
            source.display()
        );
        return None;
    };
    let copies: usize = std::env::var("CWM_BENCH_COPIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let one = work.join("input-1k.pgn");
    std::fs::write(&one, &text).expect("write bench input");
    let many = work.join("input-many.pgn");
    let mut all = Vec::with_capacity((text.len() + 2) * copies);
    for _ in 0..copies {
        all.extend_from_slice(&text);
        all.extend_from_slice(b"\n\n");
    }
    std::fs::write(&many, &all).expect("write bench input");
    let label_many: &'static str = Box::leak(format!("x{copies}").into_boxed_str());
    Some(
        [("1k", one), (label_many, many)]
            .into_iter()
            .map(|(label, path)| Input {
                label,
                games: count_games(&path),
                bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
                path,
            })
            .collect(),
    )
}

/// Parses `input` into a games table and tokenizes it, as the stages do; returns the seconds
/// of each step.
fn parse_and_tokenize(input: &Path, work: &Path, threads: usize) -> (f64, f64) {
    let games_dir = work.join(format!("games-{threads}"));
    let tokens_dir = work.join(format!("tokens-{threads}"));
    let _ = std::fs::remove_dir_all(&games_dir);
    let _ = std::fs::remove_dir_all(&tokens_dir);
    std::fs::create_dir_all(&tokens_dir).expect("create tokens dir");
    let start = Instant::now();
    process_pgn(&ProcessOptions {
        pgn: input.to_path_buf(),
        out_dir: games_dir.clone(),
        format: OutputFormat::Parquet,
        threads,
        id_key: IdKeySource::Param("bench key".to_owned()),
        ..ProcessOptions::default()
    })
    .expect("parse");
    let parsed = Instant::now();
    tokenize_games(
        &games_dir,
        &tokens_dir,
        &TokenizeOptions {
            threads,
            ..TokenizeOptions::default()
        },
        &Progress::disabled(),
        &|| false,
    )
    .expect("tokenize");
    let done = Instant::now();
    (
        (parsed - start).as_secs_f64(),
        (done - parsed).as_secs_f64(),
    )
}

/// The bare legal replay: pgn-reader's syntax and shakmaty's SAN resolution and move
/// application, nothing else. A game with a move shakmaty rejects is abandoned.
struct BareReplay {
    games: u64,
    plies: u64,
}

impl Visitor for BareReplay {
    type Tags = ();
    type Movetext = Chess;
    type Output = ();

    fn begin_tags(&mut self) -> ControlFlow<Self::Output, Self::Tags> {
        self.games += 1;
        ControlFlow::Continue(())
    }

    fn tag(
        &mut self,
        _tags: &mut Self::Tags,
        _name: &[u8],
        _value: RawTag<'_>,
    ) -> ControlFlow<Self::Output> {
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, _tags: Self::Tags) -> ControlFlow<Self::Output, Self::Movetext> {
        ControlFlow::Continue(Chess::default())
    }

    fn san(&mut self, position: &mut Chess, san_plus: SanPlus) -> ControlFlow<Self::Output> {
        match san_plus.san.to_move(position) {
            Ok(m) => {
                position.play_unchecked(m);
                self.plies += 1;
                ControlFlow::Continue(())
            }
            Err(_) => ControlFlow::Break(()),
        }
    }

    fn end_game(&mut self, _position: Chess) -> Self::Output {}
}

fn bare_replay(input: &Path) -> BareReplay {
    let file = File::open(input).expect("open bench input");
    let mut reader = Reader::new(file);
    let mut visitor = BareReplay { games: 0, plies: 0 };
    reader.visit_all_games(&mut visitor).expect("read");
    visitor
}

fn data_path(c: &mut Criterion, inputs: &[Input], work: &Path) {
    for input in inputs {
        let mut group = c.benchmark_group(format!("parse_tokenize/{}", input.label));
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(8))
            .throughput(Throughput::Elements(input.games));
        for threads in [1usize, 2] {
            let name = format!("parse_tokenize/{}/{threads}t", input.label);
            group.bench_function(format!("{threads} thread(s)"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (parse, tokenize) = parse_and_tokenize(&input.path, work, threads);
                        record(&name, parse + tokenize);
                        record(&format!("{name}/parse"), parse);
                        record(&format!("{name}/tokenize"), tokenize);
                        total += Duration::from_secs_f64(parse + tokenize);
                    }
                    total
                });
            });
        }
        group.finish();

        let mut group = c.benchmark_group(format!("bare_replay/{}", input.label));
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5))
            .throughput(Throughput::Elements(input.games));
        let name = format!("bare_replay/{}", input.label);
        group.bench_function("pgn-reader + shakmaty, 1 thread", |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let one = Instant::now();
                    let replay = bare_replay(&input.path);
                    assert_eq!(replay.games, input.games);
                    record(&name, one.elapsed().as_secs_f64());
                }
                start.elapsed()
            });
        });
        group.finish();
    }
}

fn random_uniform(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("one-thread pool");
    let mut group = c.benchmark_group("random_uniform");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(RANDOM_GAMES as u64));
    let mut seed = 0u64;
    group.bench_function("fast mode, 1 thread", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                // A new seed each time: the same games over and over would flatter the cache.
                seed += 1;
                let one = Instant::now();
                let n = pool.install(|| FastGames::new(seed).take(RANDOM_GAMES).count());
                assert_eq!(n, RANDOM_GAMES);
                record("random_uniform/1t", one.elapsed().as_secs_f64());
            }
            start.elapsed()
        });
    });
    group.finish();
}

/// A python baseline's JSON line, as name → number.
type PythonFigures = BTreeMap<String, f64>;

fn python_has_chess() -> bool {
    match Command::new("python3")
        .args(["-c", "import chess, chess.pgn"])
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "data_path: `import chess` fails ({}); skipping the python-chess baselines",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(error) => {
            eprintln!("data_path: no python3 ({error}); skipping the python-chess baselines");
            false
        }
    }
}

fn run_python(script: &str, args: &[&str]) -> Option<PythonFigures> {
    let path = repo_root().join("benches/python").join(script);
    eprintln!("data_path: running python3 {script} {}", args.join(" "));
    let out = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "data_path: {script} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        value
            .as_object()?
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect(),
    )
}

fn rate(figures: &PythonFigures) -> Option<f64> {
    Some(figures.get("games")? / figures.get("seconds")?)
}

/// The summary table: one row per figure, with its ratio against its baseline.
struct Summary {
    text: String,
}

impl Summary {
    fn row(&mut self, figure: &str, games_per_s: Option<f64>, ratio: &str) {
        let rate = games_per_s.map_or_else(|| "not measured".to_owned(), |r| format!("{r:.0}"));
        let _ = writeln!(self.text, "| {figure:<58} | {rate:>12} | {ratio:<44} |");
    }
}

fn ratio(value: Option<f64>, base: Option<f64>, unit: &str, target: &str) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}{unit} {target}", v / b),
        _ => "n/a".to_owned(),
    }
}

/// Games per second of the criterion benchmark `name`, whose iterations each handle `games`.
fn games_per_s(name: &str, games: u64) -> Option<f64> {
    median_seconds(name).map(|s| games as f64 / s)
}

impl Summary {
    /// The title, the machine and the table's header.
    fn header(&mut self) {
        let _ = writeln!(
            self.text,
            "cwm data-path summary (games of the input per second; Rust figures are medians of \
             criterion samples; ratios measured in the same run)"
        );
        let _ = writeln!(
            self.text,
            "machine: {} cores; other builds may have been running, so absolute figures are noisy",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let _ = writeln!(self.text);
        let _ = writeln!(
            self.text,
            "| {:<58} | {:>12} | {:<44} |",
            "figure", "games/s", "ratio (target)"
        );
        let _ = writeln!(self.text, "|{:-<60}|{:-<14}|{:-<46}|", "", "", "");
    }

    /// The rows of one input: the bare replay, parse+tokenize on one and two threads, and the
    /// two halves alone.
    fn input_rows(&mut self, input: &Input, python_replay: Option<f64>) {
        let label = input.label;
        let one = games_per_s(&format!("parse_tokenize/{label}/1t"), input.games);
        let two = games_per_s(&format!("parse_tokenize/{label}/2t"), input.games);
        let bare = games_per_s(&format!("bare_replay/{label}"), input.games);
        let parse = games_per_s(&format!("parse_tokenize/{label}/1t/parse"), input.games);
        let tokenize = games_per_s(&format!("parse_tokenize/{label}/1t/tokenize"), input.games);
        let _ = writeln!(
            self.text,
            "| {:<58} | {:>12} | {:<44} |",
            format!(
                "input {label}: {} games, {:.1} MB",
                input.games,
                input.bytes as f64 / 1e6
            ),
            "",
            ""
        );
        self.row(
            &format!("{label}: pgn-reader bare legal replay, 1 thread"),
            bare,
            "baseline (practical limit)",
        );
        self.row(
            &format!("{label}: cwm parse+tokenize, 1 thread"),
            one,
            &format!(
                "{} | {}",
                ratio(one, python_replay, "x python", "(>=500)"),
                ratio(one, bare, "x bare", "(>=0.5)")
            ),
        );
        self.row(
            &format!("{label}:   of which parse alone, 1 thread"),
            parse,
            &ratio(parse, bare, "x bare", ""),
        );
        self.row(
            &format!("{label}:   of which tokenize alone, 1 thread"),
            tokenize,
            &ratio(tokenize, bare, "x bare", ""),
        );
        self.row(
            &format!("{label}: cwm parse+tokenize, 2 threads"),
            two,
            &format!(
                "{} | {}",
                ratio(two, one, "x 1 thread", "(>=1.8)"),
                ratio(
                    two.map(|t| t / 2.0),
                    python_replay,
                    "x python/core",
                    "(>=500)"
                )
            ),
        );
    }

    /// The random player's rows: both python baselines and `random_uniform`.
    fn random_rows(&mut self, python: &BTreeMap<&str, PythonFigures>) {
        let python_random = python.get("random").and_then(rate);
        let python_random_no_claims = python.get("random_no_claims").and_then(rate);
        let random = games_per_s("random_uniform/1t", RANDOM_GAMES as u64);
        self.row(
            "python-chess random player, is_game_over(claim_draw=True)",
            python_random,
            "baseline",
        );
        self.row(
            "python-chess random player WITHOUT claims (is_game_over())",
            python_random_no_claims,
            "other baseline (no claims: not the same rule)",
        );
        self.row(
            "cwm random_uniform fast mode, 1 thread",
            random,
            &format!(
                "{} | {}",
                ratio(random, python_random, "x python", "(>=1000)"),
                ratio(random, python_random_no_claims, "x no-claims", "")
            ),
        );
    }
}

fn summary(inputs: &[Input], python: &BTreeMap<&str, PythonFigures>) -> String {
    let mut out = Summary {
        text: String::new(),
    };
    out.header();
    let python_replay = python.get("replay").and_then(rate);
    out.row(
        "python-chess read_game + push + 75 labels (1k file)",
        python_replay,
        "baseline",
    );
    for input in inputs {
        out.input_rows(input, python_replay);
    }
    out.random_rows(python);
    let _ = writeln!(out.text);
    for (name, figures) in python {
        let _ = writeln!(out.text, "python {name}: {figures:?}");
    }
    out.text
}

fn main() {
    let work = std::env::temp_dir().join(format!("cwm-bench-data-path-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("create bench dir");
    let mut criterion = Criterion::default().configure_from_args();
    let inputs = make_inputs(&work).unwrap_or_default();
    data_path(&mut criterion, &inputs, &work);
    random_uniform(&mut criterion);
    criterion.final_summary();

    // The python baselines run after the Rust benches, alone on the machine, once each; their
    // rate per game does not depend on the input's length, so the 1k file serves both inputs.
    let mut python = BTreeMap::new();
    let listing = std::env::args().any(|a| a == "--list" || a == "--test");
    if !listing && python_has_chess() {
        if let Some(input) = inputs.first() {
            let path = input.path.to_string_lossy().into_owned();
            if let Some(figures) = run_python("replay_encode.py", &[&path]) {
                python.insert("replay", figures);
            }
        }
        let seconds = std::env::var("CWM_BENCH_PY_SECONDS").unwrap_or_else(|_| "20".into());
        if let Some(figures) = run_python(
            "random_player.py",
            &["--games", "1000", "--seconds", &seconds],
        ) {
            python.insert("random", figures);
        }
        if let Some(figures) = run_python(
            "random_player.py",
            &["--games", "1000", "--seconds", &seconds, "--no-claims"],
        ) {
            python.insert("random_no_claims", figures);
        }
    }

    let text = summary(&inputs, &python);
    eprintln!("\n{text}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), PathBuf::from)
        .join("criterion");
    let _ = std::fs::create_dir_all(&target);
    let path = target.join("cwm-data-path-summary.txt");
    match std::fs::write(&path, &text) {
        Ok(()) => eprintln!("summary written to {}", path.display()),
        Err(error) => eprintln!("cannot write {}: {error}", path.display()),
    }
    let _ = std::fs::remove_dir_all(&work);
}
