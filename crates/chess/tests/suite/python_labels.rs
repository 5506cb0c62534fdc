//! Cross-check of every label against python-chess: this test writes the moves and states of
//! every kept game of `real/*.pgn` to a JSONL file and runs `tests/python/labels_oracle.py`,
//! which recomputes them with python-chess (`pip install chess==1.11.2`). When `python3` or its
//! `chess` module is missing it fails under CI and skips loudly elsewhere (`support::require`).

use std::{fmt::Write as _, fs, path::Path, process::Command};

use cwm_chess::{
    encode::{EpConvention, StateLabels, write_uci},
    replay::{ReplayConfig, replay_game, replay_sans},
};
use shakmaty::Chess;

use crate::support::{read_pgn_file, require, require_data};

fn python_chess_available() -> bool {
    Command::new("python3")
        .args(["-c", "import chess"])
        .output()
        .is_ok_and(|output| output.status.success())
}

fn push_states(line: &mut String, states: &[StateLabels]) {
    line.push('[');
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        line.push('[');
        for (j, label) in state.iter().enumerate() {
            if j > 0 {
                line.push(',');
            }
            let _ = write!(line, "{label}");
        }
        line.push(']');
    }
    line.push(']');
}

#[test]
fn every_label_of_the_real_games_matches_python_chess() {
    let real = require_data!("real");
    if !require(
        "python-chess for python3 (pip install chess==1.11.2)",
        python_chess_available(),
    ) {
        return;
    }
    let mut paths: Vec<_> = fs::read_dir(&real)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "pgn"))
        .collect();
    paths.sort();

    let config = ReplayConfig::default();
    let mut out = String::new();
    let mut n_games = 0;
    for path in &paths {
        let source = path.file_name().unwrap().to_string_lossy().into_owned();
        for raw in read_pgn_file(path) {
            let sans = raw.sans.clone();
            let Ok(kept) = replay_game(raw, &config) else {
                continue;
            };
            let legal = replay_sans(Chess::default(), &sans, EpConvention::LegalCapture).unwrap();
            let mut line = String::new();
            let site = serde_json::to_string(kept.headers.site.as_deref().unwrap_or("")).unwrap();
            let _ = write!(
                line,
                "{{\"source\":\"{source}\",\"index\":{},\"site\":{site},\"moves\":{:?},\"uci\":[",
                kept.index, kept.replay.moves
            );
            for (i, &id) in kept.replay.moves[1..].iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                line.push('"');
                assert!(write_uci(id, &mut line));
                line.push('"');
            }
            line.push_str("],\"states\":");
            push_states(&mut line, &kept.replay.states);
            line.push_str(",\"states_legal\":");
            push_states(&mut line, &legal.states);
            line.push_str("}\n");
            out.push_str(&line);
            n_games += 1;
        }
    }
    assert!(n_games > 0);

    let jsonl = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cwm_chess_real_games_labels.jsonl");
    fs::write(&jsonl, out).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/labels_oracle.py");
    let output = Command::new("python3")
        .arg(&script)
        .arg(&jsonl)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "{n_games} games written to {}\n{stdout}{stderr}",
        jsonl.display()
    );
    assert!(
        output.status.success(),
        "python-chess disagrees:\n{stdout}{stderr}"
    );
}
