//! Cross-check against python-chess 1.11.2 itself: move order at every ply and the outcome of
//! random games from several start positions. Without python-chess they fail under CI and skip
//! loudly elsewhere (see `data::require`).

use std::path::PathBuf;
use std::process::Command;

use cwm_chess::encode::write_uci;
use cwm_random_uniform::Arbiter;
use cwm_random_uniform::generator::ReferenceGames;
use cwm_random_uniform::move_order::legal_moves_python_order;
use serde_json::Value;

use super::data::{require, slow_tests};
use shakmaty::{CastlingMode, Chess, fen::Fen, uci::UciMove};

const PYTHON_CHESS_VERSION: &str = "1.11.2";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `python3` can import python-chess at the pinned version; see [`require`].
fn python_chess_available() -> bool {
    let probe = Command::new("python3")
        .args(["-c", "import chess; print(chess.__version__)"])
        .output();
    let version = match probe {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => "none".to_owned(),
    };
    require(
        &format!(
            "python-chess {PYTHON_CHESS_VERSION} for python3 (found: {version}; \
             pip install chess=={PYTHON_CHESS_VERSION})"
        ),
        version == PYTHON_CHESS_VERSION,
    )
}

fn python_order(arbiter: &Arbiter) -> String {
    legal_moves_python_order(arbiter.position())
        .iter()
        .map(|m| UciMove::from_move(*m, CastlingMode::Standard).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn move_order_and_outcomes_match_python_chess() {
    if !python_chess_available() {
        return;
    }
    let script = manifest_dir().join("tests/python/crosscheck.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["positions", if slow_tests() { "100" } else { "8" }, "2024"])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "crosscheck.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");

    let (mut n_games, mut n_positions) = (0, 0);
    for line in stdout.lines() {
        let game: Value = serde_json::from_str(line).expect("JSON line");
        if let Some(games) = game.get("games_per_second") {
            let plies = &game["plies_per_second"];
            println!("python-chess reference loop: {games} games/s, {plies} plies/s");
            continue;
        }
        let fen = game["fen"].as_str().expect("fen");
        let start: Chess = fen
            .parse::<Fen>()
            .expect("valid FEN")
            .into_position(CastlingMode::Standard)
            .expect("legal position");
        let orders = game["orders"].as_array().expect("orders");
        let moves = game["moves"].as_array().expect("moves");
        assert_eq!(orders.len(), moves.len() + 1);

        let mut arbiter = Arbiter::new(start);
        for (ply, (order, uci)) in orders.iter().zip(moves).enumerate() {
            assert_eq!(
                python_order(&arbiter),
                order.as_str().expect("string"),
                "{fen}, ply {ply}"
            );
            assert_eq!(arbiter.outcome(), None, "{fen}, ply {ply}: ended early");
            let m = uci
                .as_str()
                .expect("string")
                .parse::<UciMove>()
                .expect("UCI")
                .to_move(arbiter.position())
                .expect("legal UCI move");
            arbiter.play(m).expect("legal move");
            n_positions += 1;
        }
        let last = orders.last().and_then(Value::as_str).expect("final order");
        assert_eq!(python_order(&arbiter), last, "{fen}, final position");
        let outcome = arbiter.outcome().expect("the game is over");
        assert_eq!(
            game["termination"].as_str(),
            Some(outcome.termination.python_name()),
            "{fen}: {moves:?}"
        );
        assert_eq!(game["result"].as_str(), Some(outcome.result.as_str()));
        n_games += 1;
        n_positions += 1;
    }
    assert!(n_games > 0);
    println!("python-chess agrees on {n_games} games, {n_positions} positions");
}

#[test]
fn reference_generator_matches_python_for_another_seed() {
    if !python_chess_available() {
        return;
    }
    let n_games = if slow_tests() { 300 } else { 10 };
    let script = manifest_dir().join("tests/python/crosscheck.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["reference", "1", &n_games.to_string()])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "crosscheck.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("UTF-8 output");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), n_games);
    for (line, game) in lines.iter().zip(ReferenceGames::new(1)) {
        let want: Value = serde_json::from_str(line).expect("JSON line");
        let mut moves = String::new();
        for &m in game.moves() {
            if !moves.is_empty() {
                moves.push(' ');
            }
            assert!(write_uci(m, &mut moves));
        }
        let id = game.id();
        assert_eq!(want["plies"].as_u64(), Some(game.plies() as u64), "{id}");
        assert_eq!(want["moves"].as_str(), Some(moves.as_str()), "{id}");
        assert_eq!(
            want["termination"].as_str(),
            Some(game.termination().python_name()),
            "{id}"
        );
        assert_eq!(
            want["result"].as_str(),
            Some(game.result().as_str()),
            "{id}"
        );
    }
    println!("seed 1: {n_games} generated games identical to python-chess");
}
