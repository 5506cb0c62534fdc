//! Oracle tests: positions computed by other chess engines (python-chess, scalachess, the
//! Lichess opening book) for the same PGNs, compared with our labels decoded back to FEN.

use std::fs;

use cwm_chess::{
    encode::{EpConvention, write_uci},
    replay::{RawGame, ReplayedGame, position_from_fen, replay_sans, replay_sans_into},
};
use serde_json::Value;
use shakmaty::{CastlingMode, Chess, EnPassantMode, fen::Fen};

use crate::support::{FEN_EP, fen_fields, fen_of, read_pgn_text, require_data};

/// The lines of a JSONL oracle file as JSON values.
fn jsonl_values(path: &std::path::Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The single game of an oracle PGN.
fn only_game(pgn: &str) -> RawGame {
    let mut games = read_pgn_text(pgn);
    assert_eq!(games.len(), 1, "{pgn}");
    games.remove(0)
}

/// Replays an oracle file of standard games (no FEN headers) and compares the final FEN
/// (python-chess `Board.fen()`, so en passant only when legal) with our decoded labels.
fn check_final_fens(relative: &str) -> usize {
    let Some(path) = crate::support::data_path(relative) else {
        return 0;
    };
    let mut n_checked = 0;
    for (line, oracle) in jsonl_values(&path).iter().enumerate() {
        let game = only_game(oracle["pgn"].as_str().unwrap());
        assert_eq!(game.headers.fen, None, "{relative}:{line}");
        let replay = replay_sans(Chess::default(), &game.sans, FEN_EP)
            .unwrap_or_else(|reason| panic!("{relative}:{line}: {reason}"));
        assert_eq!(
            replay.plies(),
            oracle["halfmoves"].as_u64().unwrap() as usize,
            "{relative}:{line}"
        );
        let last = replay.states.last().unwrap();
        assert_eq!(
            fen_of(last),
            oracle["expected_fen"].as_str().unwrap(),
            "{relative}:{line}"
        );
        n_checked += 1;
    }
    n_checked
}

#[test]
fn standard_games_end_in_the_python_chess_fen() {
    let n = check_final_fens("oracle/oracle_standard.jsonl");
    eprintln!("oracle_standard: {n} games");
    assert!(n == 0 || n == 1000);
}

#[test]
fn random_games_with_underpromotions_end_in_the_python_chess_fen() {
    let n = check_final_fens("oracle/oracle_randomised.jsonl");
    eprintln!("oracle_randomised: {n} games");
    assert!(n == 0 || n == 1000);
}

/// Chess960 games start from their FEN header. The parse stage rejects them (FEN start), but
/// the replay itself handles any start: shakmaty's own FEN of the final position must match.
/// Castling labels only look at corner rooks, so the label FEN is not compared here.
#[test]
fn fischer_random_games_replay_from_their_fen() {
    let path = require_data!("oracle/oracle_fischer.jsonl");
    let mut n_checked = 0;
    for (line, oracle) in jsonl_values(&path).iter().enumerate() {
        let game = only_game(oracle["pgn"].as_str().unwrap());
        let fen = game.headers.fen.as_deref().unwrap();
        assert!(game.headers.has_set_up_start());
        let start: Chess = Fen::from_ascii(fen.as_bytes())
            .unwrap()
            .into_position(CastlingMode::Chess960)
            .unwrap();
        let mut replay = ReplayedGame::default();
        let end = replay_sans_into(start, &game.sans, EpConvention::Reference, &mut replay)
            .unwrap_or_else(|reason| panic!("fischer:{line}: {reason}"));
        assert_eq!(
            Fen::from_position(&end, EnPassantMode::Legal).to_string(),
            oracle["expected_fen"].as_str().unwrap(),
            "fischer:{line}"
        );
        n_checked += 1;
    }
    eprintln!("oracle_fischer: {n_checked} games");
    assert_eq!(n_checked, 1000);
}

/// Scalachess's FEN after every ply (first 5 fields; its fullmove field is always 1). Variant
/// games (crazyhouse, atomic) are skipped: shakmaty's `Chess` does not play them, and the parse
/// stage rejects them. A game
/// scalachess stops early must stop at the same ply here.
#[test]
fn scalachess_fen_after_every_ply() {
    let path = require_data!("oracle/scalachess_replay_fen.jsonl");
    let mut n_games = 0;
    let mut n_plies = 0;
    let mut skipped = Vec::new();
    for oracle in jsonl_values(&path) {
        let fixture = oracle["fixture"].as_str().unwrap();
        let games = read_pgn_text(oracle["pgn"].as_str().unwrap());
        let game = &games[0];
        let variant = game.headers.variant.as_deref().unwrap_or("").to_lowercase();
        let chess960 = variant.contains("960") || variant.contains("fischer");
        // Scalachess plays unknown variant names ("starwars") as standard chess; so do we here,
        // although the parse stage rejects them.
        let other_variant = [
            "crazyhouse",
            "atomic",
            "antichess",
            "three",
            "king of the hill",
            "racing",
            "horde",
        ]
        .iter()
        .any(|name| variant.contains(name));
        if other_variant {
            skipped.push(fixture.to_owned());
            continue;
        }
        let start = match game
            .headers
            .fen
            .as_deref()
            .filter(|fen| !fen.trim().is_empty())
        {
            Some(fen) => {
                let mode = if chess960 {
                    CastlingMode::Chess960
                } else {
                    CastlingMode::Standard
                };
                position_from_fen(fen, mode).unwrap_or_else(|err| panic!("{fixture}: {err}"))
            }
            None => Chess::default(),
        };
        let mut replay = ReplayedGame::default();
        let outcome = replay_sans_into(start, &game.sans, FEN_EP, &mut replay);
        let expected_plies = oracle["plies_replayed_by_scalachess"].as_u64().unwrap() as usize;
        assert_eq!(
            replay.plies(),
            expected_plies,
            "{fixture}: replayed {} plies ({outcome:?}), scalachess {expected_plies}",
            replay.plies()
        );
        let fens = oracle["fens_per_ply"].as_array().unwrap();
        assert_eq!(fens.len(), replay.states.len(), "{fixture}");
        for (ply, (state, expected)) in replay.states.iter().zip(fens).enumerate() {
            let ours = fen_fields(&fen_of(state), 5);
            let expected = fen_fields(expected.as_str().unwrap(), 5);
            if chess960 {
                // Castling labels only look at corner rooks: compare all fields but castling.
                let drop_castling = |fen: &str| {
                    let mut fields: Vec<&str> = fen.split(' ').collect();
                    fields.remove(2);
                    fields.join(" ")
                };
                assert_eq!(
                    drop_castling(&ours),
                    drop_castling(&expected),
                    "{fixture} ply {ply}"
                );
            } else {
                assert_eq!(ours, expected, "{fixture} ply {ply}");
            }
        }
        n_games += 1;
        n_plies += replay.plies();
    }
    eprintln!(
        "scalachess: {n_games} games, {n_plies} plies compared; skipped variants: {skipped:?}"
    );
}

/// The Lichess opening book: SAN → our packed moves as UCI and our final labels as EPD.
#[test]
fn lichess_openings_uci_and_epd() {
    let path = require_data!("oracle/lichess_openings_uci_epd.tsv");
    let text = fs::read_to_string(path).unwrap();
    let mut n_checked = 0;
    let mut uci = String::new();
    for line in text.lines().skip(1) {
        let columns: Vec<&str> = line.split('\t').collect();
        let [_eco, name, pgn, expected_uci, expected_epd] = columns[..] else {
            panic!("bad row {line}");
        };
        let game = only_game(pgn);
        let replay = replay_sans(Chess::default(), &game.sans, FEN_EP)
            .unwrap_or_else(|reason| panic!("{name}: {reason}"));
        uci.clear();
        for &id in &replay.moves[1..] {
            if !uci.is_empty() {
                uci.push(' ');
            }
            assert!(write_uci(id, &mut uci));
        }
        assert_eq!(uci, expected_uci, "{name}");
        let last = replay.states.last().unwrap();
        assert_eq!(fen_fields(&fen_of(last), 4), expected_epd, "{name}");
        n_checked += 1;
    }
    eprintln!("lichess openings: {n_checked} lines");
    assert_eq!(n_checked, 3373);
}
