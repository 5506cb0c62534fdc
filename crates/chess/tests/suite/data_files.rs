//! Every shared PGN goes through the whole replay without panicking; rejections carry reasons
//! and good games in the same file are kept.

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use cwm_chess::{
    encode::EpConvention,
    replay::{RejectReason, Rejection, ReplayConfig, position_from_fen, replay_game, replay_sans},
};
use shakmaty::CastlingMode;

use crate::support::{read_pgn_file, require_data};

/// What became of the games of one file.
#[derive(Debug, Default)]
struct FileOutcome {
    n_games: usize,
    n_kept: usize,
    n_kept_plies: usize,
    rejections: Vec<Rejection>,
}

impl FileOutcome {
    fn reasons(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for rejection in &self.rejections {
            *counts.entry(rejection.reason.code()).or_default() += 1;
        }
        counts
    }
}

fn replay_file(path: &Path) -> FileOutcome {
    let config = ReplayConfig::default();
    let mut outcome = FileOutcome::default();
    for (expected_index, game) in read_pgn_file(path).into_iter().enumerate() {
        assert_eq!(game.index, expected_index as u64);
        outcome.n_games += 1;
        match replay_game(game, &config) {
            Ok(kept) => {
                assert!(kept.replay.plies() >= config.min_plies());
                assert!(kept.headers.site.is_some());
                outcome.n_kept += 1;
                outcome.n_kept_plies += kept.replay.plies();
            }
            Err(rejection) => outcome.rejections.push(rejection),
        }
    }
    outcome
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_edge_and_real_file_replays_without_panic() {
    let data = require_data!("edge");
    let mut paths = Vec::new();
    files_under(&data, &mut paths);
    if let Some(real) = crate::support::data_path("real") {
        files_under(&real, &mut paths);
    }
    let mut totals = BTreeMap::new();
    for path in &paths {
        let outcome = replay_file(path);
        let name = path
            .strip_prefix(crate::support::data_dir())
            .unwrap_or(path);
        eprintln!(
            "{}: {} games, {} kept, rejected {:?}",
            name.display(),
            outcome.n_games,
            outcome.n_kept,
            outcome.reasons()
        );
        assert_eq!(outcome.n_games, outcome.n_kept + outcome.rejections.len());
        for rejection in &outcome.rejections {
            if matches!(
                rejection.reason,
                RejectReason::IllegalMove { .. }
                    | RejectReason::AmbiguousMove { .. }
                    | RejectReason::PgnSyntax(_)
            ) {
                eprintln!(
                    "  game {} at byte {}: {}",
                    rejection.index, rejection.offset, rejection.reason
                );
            }
        }
        for (code, count) in outcome.reasons() {
            *totals.entry(code).or_insert(0) += count;
        }
    }
    eprintln!("{} files; rejections in all: {totals:?}", paths.len());
}

#[test]
fn one_illegal_game_is_rejected_and_the_rest_are_kept() {
    let path = require_data!("real/lichess_2025_one_illegal.pgn");
    let outcome = replay_file(&path);
    assert_eq!(outcome.n_games, 100);
    let bad_moves: Vec<&Rejection> = outcome
        .rejections
        .iter()
        .filter(|rejection| rejection.reason.code() != "too_short")
        .collect();
    // Game 37 counts from 0: it is the 38th game of the file.
    assert_eq!(bad_moves.len(), 1, "{bad_moves:?}");
    assert_eq!(bad_moves[0].index, 37);
    assert_eq!(
        bad_moves[0].reason,
        RejectReason::IllegalMove {
            ply: 2,
            san: "b4".to_owned()
        }
    );
    let text = fs::read(&path).unwrap();
    let offset = bad_moves[0].offset as usize;
    assert!(text[offset..].starts_with(b"[Event "));
    let site = bad_moves[0].site.as_deref().unwrap();
    let game_text = String::from_utf8_lossy(&text[offset..offset + 400]);
    assert!(game_text.contains(site), "{game_text}");
    assert_eq!(outcome.reasons().get("too_short"), Some(&1));
    assert_eq!(outcome.n_kept, 98);
}

#[test]
fn lichess_2025_legal_keeps_every_standard_game_long_enough() {
    let path = require_data!("real/lichess_2025_legal.pgn");
    let outcome = replay_file(&path);
    assert_eq!(outcome.n_games, 100);
    assert_eq!(outcome.n_kept, 84);
    let expected: BTreeMap<&str, usize> = [("fen_start", 13), ("too_short", 3)].into();
    assert_eq!(outcome.reasons(), expected);

    // The 13 FEN starts replay from their FEN.
    let mut n_from_fen = 0;
    for game in read_pgn_file(&path) {
        if game.headers.has_set_up_start() {
            let fen = game.headers.fen.as_deref().unwrap();
            let start = position_from_fen(fen, CastlingMode::Standard).unwrap();
            replay_sans(start, &game.sans, EpConvention::Reference)
                .unwrap_or_else(|reason| panic!("game {}: {reason}", game.index));
            n_from_fen += 1;
        }
    }
    assert_eq!(n_from_fen, 13);
}

/// 438 games: 5 have no moves at all and 17 more have under 20 plies (abandoned or quick
/// results), so 416 are kept. Also prints a rough single-thread throughput (debug builds are
/// much slower than release).
#[test]
fn lichess_db_sample_counts() {
    let path = require_data!("real/lichess_db_1000k.pgn");
    let started = Instant::now();
    let games = read_pgn_file(&path);
    let parsed = started.elapsed();
    assert_eq!(games.len(), 438);
    let n_without_moves = games.iter().filter(|game| game.sans.is_empty()).count();
    assert_eq!(n_without_moves, 5);
    let n_short = games
        .iter()
        .filter(|game| game.plies() < ReplayConfig::default().min_plies())
        .count();
    assert_eq!(n_short, 22);

    let outcome = replay_file(&path);
    let total = started.elapsed();
    assert_eq!(outcome.n_kept, 416);
    let expected: BTreeMap<&str, usize> = [("too_short", 22)].into();
    assert_eq!(outcome.reasons(), expected);
    let bytes = fs::metadata(&path).unwrap().len();
    eprintln!(
        "lichess_db_1000k: {} bytes, syntax {:?}; syntax + legality {:?} for {} kept games, {} plies",
        bytes, parsed, total, outcome.n_kept, outcome.n_kept_plies
    );
}
