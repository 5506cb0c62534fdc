//! The reference's own output: the first 50 random games of seed 0 (spec E.5), in its JSONL
//! format, checked byte for byte and label for label.

use std::fs;

use cwm_chess::{
    encode::{EpConvention, START, encode_state, unpack_move},
    jsonl::{append_example_line, parse_example_line},
    split::bucket,
};
use shakmaty::{Chess, Position, uci::UciMove};

use crate::support::{FEN_EP, fen_of, require_data};

#[test]
fn random_games_round_trip_byte_for_byte_and_replay_to_the_same_labels() {
    let path = require_data!("reference-vectors/random_seed0_first50.jsonl");
    let summary = require_data!("reference-vectors/random_seed0_first50_summary.tsv");
    let text = fs::read_to_string(path).unwrap();
    let summary = fs::read_to_string(summary).unwrap();
    let summary_rows: Vec<Vec<&str>> = summary
        .lines()
        .map(|line| line.split('\t').collect())
        .filter(|row: &Vec<&str>| row.first().is_some_and(|id| id.starts_with("cwm_")))
        .collect();

    let mut n_games = 0;
    let mut n_states = 0;
    let mut line_buffer = Vec::new();
    for (line, row) in text.lines().zip(&summary_rows) {
        let example = parse_example_line(line).unwrap();
        assert!(example.spec_matches, "{}", example.example_id);

        line_buffer.clear();
        append_example_line(
            &mut line_buffer,
            &example.example_id,
            &example.moves,
            &example.states,
            &example.result,
        )
        .unwrap();
        assert_eq!(
            line_buffer,
            format!("{line}\n").as_bytes(),
            "{}",
            example.example_id
        );

        // Replay the packed ids with shakmaty and re-encode every state.
        let mut position = Chess::default();
        assert_eq!(example.moves[0], START);
        assert_eq!(
            encode_state(&position, EpConvention::Reference),
            example.states[0]
        );
        for (ply, (&id, expected)) in example.moves[1..]
            .iter()
            .zip(&example.states[1..])
            .enumerate()
        {
            let (from, to, promotion) = unpack_move(id).unwrap();
            let uci = UciMove::Normal {
                from,
                to,
                promotion,
            };
            let m = uci.to_move(&position).unwrap_or_else(|err| {
                panic!("{} ply {}: {uci}: {err}", example.example_id, ply + 1)
            });
            assert_eq!(cwm_chess::encode::pack_move(&m), id);
            position.play_unchecked(m);
            assert_eq!(
                &encode_state(&position, EpConvention::Reference),
                expected,
                "{} ply {}",
                example.example_id,
                ply + 1
            );
            n_states += 1;
        }

        // Summary columns: id, plies, result, termination, first moves, final FEN, hashes, bucket.
        assert_eq!(row[0], example.example_id);
        assert_eq!(row[1].parse::<usize>().unwrap(), example.moves.len() - 1);
        assert_eq!(row[2], example.result);
        assert_eq!(fen_of(&encode_state(&position, FEN_EP)), row[5]);
        assert_eq!(row[8].parse::<u64>().unwrap(), bucket(&example.example_id));
        n_games += 1;
    }
    assert_eq!(n_games, 50);
    assert_eq!(n_games, summary_rows.len());
    eprintln!("reference vectors: {n_games} games, {n_states} states checked");
}
