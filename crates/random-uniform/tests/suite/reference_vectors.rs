//! The first 50 games of seed 0 must match the reference's JSONL and summary exactly.

use std::fs;

use cwm_chess::encode::{EpConvention, START, write_uci};
use cwm_chess::jsonl::append_example_line;
use cwm_random_uniform::generator::{DEFAULT_MIN_FULLMOVES, Games, Mode};
use cwm_random_uniform::{Game, Termination};
use serde_json::Value;
use shakmaty::{EnPassantMode, fen::Fen};

use super::data::shared_data;

const JSONL: &str = "reference-vectors/random_seed0_first50.jsonl";
const SUMMARY: &str = "reference-vectors/random_seed0_first50_summary.tsv";

fn first_kept_games(n: usize) -> Vec<Game> {
    Games::new(Mode::Reference, 0)
        .kept(DEFAULT_MIN_FULLMOVES)
        .take(n)
        .collect()
}

fn as_u64_vec(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_u64().expect("an integer"))
        .collect()
}

#[test]
fn first_50_games_match_reference_jsonl() {
    let Some(path) = shared_data(JSONL) else {
        return;
    };
    let text = fs::read_to_string(path).expect("readable reference JSONL");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 50);
    let games = first_kept_games(lines.len());

    for (line, game) in lines.iter().zip(&games) {
        let want: Value = serde_json::from_str(line).expect("valid JSON");
        let id = game.id();
        assert_eq!(want["example_id"], Value::from(id.as_str()));
        assert_eq!(want["plies"].as_u64(), Some(game.plies() as u64), "{id}");
        assert_eq!(
            want["steps"].as_u64(),
            Some(game.plies() as u64 + 1),
            "{id}"
        );
        assert_eq!(
            want["fullmoves"].as_u64(),
            Some((game.plies() as u64).div_ceil(2)),
            "{id}"
        );
        assert_eq!(want["result"], Value::from(game.result().as_str()), "{id}");

        let mut moves = vec![u64::from(START)];
        moves.extend(game.moves().iter().map(|&m| u64::from(m)));
        assert_eq!(as_u64_vec(&want["moves"]), moves, "{id}: moves");

        let want_states = want["states"].as_array().expect("states array");
        let states: Vec<_> = game.states(EpConvention::Reference).collect();
        assert_eq!(want_states.len(), states.len(), "{id}: number of states");
        for (step, (want_state, state)) in want_states.iter().zip(&states).enumerate() {
            let state: Vec<u64> = state.iter().map(|&label| u64::from(label)).collect();
            assert_eq!(as_u64_vec(want_state), state, "{id}: state {step}");
        }
    }
    println!("{} of 50 reference games match exactly", games.len());
}

#[test]
fn first_50_lines_are_byte_identical() {
    let Some(path) = shared_data(JSONL) else {
        return;
    };
    let want = fs::read(path).expect("readable reference JSONL");
    let mut got = Vec::with_capacity(want.len());
    for game in first_kept_games(50) {
        let tokens: Vec<u16> = game.tokens().collect();
        let states: Vec<_> = game.states(EpConvention::Reference).collect();
        append_example_line(
            &mut got,
            &game.id(),
            &tokens,
            &states,
            game.result().as_str(),
        )
        .expect("moves and states line up");
    }
    assert!(
        got == want,
        "the generated JSONL differs from the reference file"
    );
}

#[test]
fn first_50_games_match_reference_summary() {
    let Some(path) = shared_data(SUMMARY) else {
        return;
    };
    let text = fs::read_to_string(path).expect("readable summary");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("cwm_random_"))
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 50);
    let games = first_kept_games(rows.len());

    let mut counts = std::collections::BTreeMap::new();
    for (row, game) in rows.iter().zip(&games) {
        let id = game.id();
        assert_eq!(row[0], id);
        assert_eq!(row[1], game.plies().to_string(), "{id}");
        assert_eq!(row[2], game.result().as_str(), "{id}");
        assert_eq!(
            Termination::from_python_name(row[3]),
            Some(game.termination()),
            "{id}"
        );
        let mut first_moves = Vec::new();
        for &m in game.moves().iter().take(8) {
            let mut uci = String::new();
            assert!(write_uci(m, &mut uci));
            first_moves.push(uci);
        }
        assert_eq!(row[4], first_moves.join(" "), "{id}");
        let fen = Fen::from_position(game.final_position(), EnPassantMode::Legal).to_string();
        assert_eq!(row[5], fen, "{id}");
        *counts.entry(game.termination()).or_insert(0) += 1;
    }
    assert_eq!(counts[&Termination::InsufficientMaterial], 19);
    assert_eq!(counts[&Termination::Checkmate], 14);
    assert_eq!(counts[&Termination::FiftyMoves], 10);
    assert_eq!(counts[&Termination::ThreefoldRepetition], 4);
    assert_eq!(counts[&Termination::Stalemate], 3);
}

#[test]
fn game_0_ends_by_fifty_move_claim_at_99() {
    let game = first_kept_games(1).remove(0);
    assert_eq!(game.plies(), 607);
    assert_eq!(game.termination(), Termination::FiftyMoves);
    let fen = Fen::from_position(game.final_position(), EnPassantMode::Legal).to_string();
    assert_eq!(fen, "4K3/8/8/8/3q4/8/3k4/8 b - - 99 304");
}
