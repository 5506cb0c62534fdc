//! parse + tokenize throughput and output sizes on a PGN file.
//!
//! ```text
//! cargo run --release -p cwm-stage-data --example data_throughput -- FILE.pgn [COPIES] [THREADS...]
//! ```
//!
//! The file is concatenated `COPIES` times (default 20) into a temporary file so the timings
//! are not dominated by start-up; then, for each thread count (default 1 and 2), it is parsed
//! into a games table and tokenized, and the games per second of each step and of both are
//! printed. Finally the tokenized bytes per game are compared with the reference JSONL's.

use std::path::{Path, PathBuf};
use std::time::Instant;

use cwm_stage::Progress;
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, TokenizeOptions, export_jsonl, process_pgn,
    tokenize_games,
};

fn dir_bytes(dir: &Path, suffix: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(source) = args.first() else {
        return Err("usage: data_throughput FILE.pgn [COPIES] [THREADS...]".into());
    };
    let copies: usize = args.get(1).map_or(Ok(20), |s| s.parse())?;
    let mut threads: Vec<usize> = args
        .iter()
        .skip(2)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    if threads.is_empty() {
        threads = vec![1, 2];
    }
    let work = std::env::temp_dir().join(format!("cwm-throughput-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let text = std::fs::read(source)?;
    let pgn: PathBuf = work.join("input.pgn");
    let mut all = Vec::with_capacity(text.len() * copies + copies);
    for _ in 0..copies {
        all.extend_from_slice(&text);
        all.extend_from_slice(b"\n\n");
    }
    std::fs::write(&pgn, &all)?;
    println!("input: {source} x {copies} = {} MB", all.len() / 1_000_000);

    let mut last_games = None;
    for &n in &threads {
        let games_dir = work.join(format!("games-{n}"));
        let tok_dir = work.join(format!("tok-{n}"));
        let _ = std::fs::remove_dir_all(&tok_dir);
        std::fs::create_dir_all(&tok_dir)?;
        let t0 = Instant::now();
        let report = process_pgn(&ProcessOptions {
            pgn: pgn.clone(),
            out_dir: games_dir.clone(),
            format: OutputFormat::Parquet,
            threads: n,
            id_key: IdKeySource::None,
            ..ProcessOptions::default()
        })?;
        let t_parse = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let summary = tokenize_games(
            &games_dir,
            &tok_dir,
            &TokenizeOptions {
                threads: n,
                ..TokenizeOptions::default()
            },
            &Progress::disabled(),
            &|| false,
        )?;
        let t_tok = t1.elapsed().as_secs_f64();
        let games = summary.games as f64;
        println!(
            "threads {n}: {} games read, {} kept; parse {:.3}s ({:.0} games/s read, {:.0} kept/s), \
             tokenize {:.3}s ({:.0} games/s), parse+tokenize {:.0} kept games/s",
            report.games_read,
            report.kept,
            t_parse,
            report.games_read as f64 / t_parse,
            report.kept as f64 / t_parse,
            t_tok,
            games / t_tok,
            games / (t_parse + t_tok)
        );
        last_games = Some((games_dir, tok_dir, summary.games));
    }
    if let Some((games_dir, tok_dir, games)) = last_games {
        let jsonl_dir = work.join("jsonl");
        export_jsonl(&games_dir, &jsonl_dir, 1_000_000, 2)?;
        let jsonl = dir_bytes(&jsonl_dir, ".jsonl");
        let parquet = dir_bytes(&tok_dir, ".parquet");
        let table = dir_bytes(&games_dir, ".parquet");
        println!(
            "bytes/game: reference JSONL {:.0}, tokenized shards {:.0} ({:.1}x smaller), games table {:.0}",
            jsonl as f64 / games as f64,
            parquet as f64 / games as f64,
            jsonl as f64 / parquet as f64,
            table as f64 / games as f64
        );
    }
    std::fs::remove_dir_all(&work)?;
    Ok(())
}
