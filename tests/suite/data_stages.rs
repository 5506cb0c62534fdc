//! The chess data stages (`download`, `parse`, `split`, `tokenize`, `random_uniform`) driven
//! through the real binary, on the shipped sample and on `../shared/data` when present.

use super::Workspace;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (holds the shipped sample under `data/`).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

use cwm_testkit::shared_data;

/// The data directory of the artifact `instance.output` recorded for the last run (from
/// `cwm show`).
fn artifact(ws: &Workspace, instance: &str, output: &str) -> PathBuf {
    let stdout = ws.ok(&["show", instance]);
    let marker = format!("  output {output}: ");
    let mut lines = stdout.lines();
    while let Some(line) = lines.next() {
        if line.starts_with(&marker)
            && let Some(path) = lines.next().and_then(|l| l.trim().strip_prefix("path: "))
        {
            return PathBuf::from(path);
        }
    }
    panic!("no artifact {instance}.{output} in:\n{stdout}");
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

fn pipeline_for(sample: &Path, random_games: u32) -> String {
    format!(
        r#"
stages:
  download:
    uses: download
    params: {{url: "{sample}"}}
  parse:
    uses: parse
    inputs: {{pgn: download}}
  split:
    uses: split
    inputs: {{games: parse.games}}
    params: {{val_buckets: 1000}}
  tokenize_train:
    uses: tokenize
    inputs: {{games: split.train}}
    params: {{shard_games: 150}}
  tokenize_val:
    uses: tokenize
    inputs: {{games: split.val}}
  random:
    uses: random_uniform
    params: {{games: {random_games}, seed: 0, rng: reference}}
  tokenize_random:
    uses: tokenize
    inputs: {{games: random}}
"#,
        sample = sample.display()
    )
}

/// Whether `python3 -c "import pyarrow.parquet, numpy"` works (see [`cwm_testkit::require_python`]).
fn python_with_pyarrow() -> bool {
    cwm_testkit::require_python("pyarrow.parquet, numpy", "pip install pyarrow numpy")
}

#[test]
fn the_full_pipeline_runs_on_the_shipped_sample_and_is_cached() {
    let ws = Workspace::new("data-full-pipeline");
    ws.pipeline(&pipeline_for(
        &repo().join("data/lichess_db_1000k.pgn.zst"),
        50,
    ));
    let first = ws.run_json(&[]);
    assert_eq!(super::names(&first, "ran").len(), 7, "{first}");
    let second = ws.run_json(&[]);
    assert!(super::names(&second, "ran").is_empty(), "{second}");

    let rejects = read_json(&artifact(&ws, "parse", "rejects").join("rejects.json"));
    let kept = rejects["kept"].as_u64().unwrap();
    let read = rejects["games_read"].as_u64().unwrap();
    assert_eq!(read, 438, "{rejects}");
    assert_eq!(kept + rejects["rejected"].as_u64().unwrap(), read);
    assert!(kept > 350, "{rejects}");
    assert!(rejects["by_reason"]["too_short"].as_u64().unwrap() > 0);

    let train = read_json(&artifact(&ws, "tokenize_train", "out").join("coverage.json"));
    let val = read_json(&artifact(&ws, "tokenize_val", "out").join("coverage.json"));
    assert_eq!(
        train["games"].as_u64().unwrap() + val["games"].as_u64().unwrap(),
        kept
    );
    assert!(val["games"].as_u64().unwrap() > 0, "{val}");
    let train_dir = artifact(&ws, "tokenize_train", "out");
    assert!(train_dir.join("shard_000001.parquet").exists());
    assert!(train_dir.join("README.md").exists());
    let random = read_json(&artifact(&ws, "tokenize_random", "out").join("coverage.json"));
    assert_eq!(random["games"], 50);

    // The random games through export_jsonl equal the reference's first 50, byte for byte.
    if let Some(shared) = shared_data("") {
        let out = ws.dir.join("random_jsonl");
        let shards = cwm_stage_data::export_jsonl(&artifact(&ws, "random", "out"), &out, 10_000, 2)
            .expect("export");
        assert_eq!(shards.len(), 1);
        let ours = std::fs::read(&shards[0]).unwrap();
        let reference =
            std::fs::read(shared.join("reference-vectors/random_seed0_first50.jsonl")).unwrap();
        assert!(
            ours == reference,
            "exported random games differ from the reference"
        );
    }

    // The shards read from Python alone, with the documented layout.
    if python_with_pyarrow() {
        let script = r#"
import sys, glob, numpy as np, pyarrow.parquet as pq
n = 0
for path in sorted(glob.glob(sys.argv[1] + "/shard_*.parquet")):
    t = pq.read_table(path)
    assert t.column_names == ["id", "result", "plies", "moves", "states"], t.column_names
    for i in range(t.num_rows):
        moves = np.asarray(t.column("moves")[i].values, dtype=np.uint16)
        states = np.frombuffer(t.column("states")[i].as_py(), np.uint8).reshape(-1, 75)
        plies = t.column("plies")[i].as_py()
        assert moves.shape == (plies + 1,) and states.shape == (plies + 1, 75)
        assert moves[0] == 20480 and (moves[1:] < 20480).all()
        assert list(states[0]) == [10,8,9,11,12,9,8,10] + [7]*8 + [0]*32 + [1]*8 + [4,2,3,5,6,3,2,4, 0,1,1,1,1,0,0,0,0,0,1]
        n += 1
print(n)
"#;
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&train_dir)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(n, train["games"].as_u64().unwrap());
    }
}

#[test]
fn a_changed_local_file_reruns_the_download() {
    let ws = Workspace::new("data-local-change");
    let game = "[Site \"https://lichess.org/x\"]\n[Result \"1-0\"]\n\n\
        1. e4 e5 2. Nf3 Nc6 3. Bb5 a6 4. Ba4 Nf6 5. O-O Be7 6. Re1 b5 \
        7. Bb3 d6 8. c3 O-O 9. h3 Nb8 10. d4 Nbd7 1-0\n";
    ws.write("games.pgn", game);
    ws.pipeline(
        "stages:\n  download:\n    uses: download\n    params: {url: games.pgn}\n  parse:\n    uses: parse\n    inputs: {pgn: download}\n",
    );
    assert_eq!(
        super::names(&ws.run_json(&[]), "ran"),
        ["download", "parse"]
    );
    ws.write(
        "games.pgn",
        &format!("{game}\n{}", game.replace("/x", "/y")),
    );
    assert_eq!(
        super::names(&ws.run_json(&[]), "ran"),
        ["download", "parse"]
    );
    let rejects = read_json(&artifact(&ws, "parse", "rejects").join("rejects.json"));
    assert_eq!(rejects["kept"], 2);
}

#[test]
fn a_checksum_mismatch_fails_the_download_and_stores_nothing() {
    let ws = Workspace::new("data-checksum");
    ws.write("games.pgn", "[Site \"x\"]\n\n1. e4 *\n");
    ws.pipeline(&format!(
        "stages:\n  download:\n    uses: download\n    params: {{url: games.pgn, sha256: \"{}\"}}\n",
        "0".repeat(64)
    ));
    let out = ws.cwm(&["run"]);
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("checksum mismatch"), "{text}");
    let ls = ws.ok(&["ls", "--json"]);
    assert!(!ls.contains("\"download\""), "{ls}");
}

#[test]
fn every_edge_file_parses_with_counted_rejections() {
    let Some(shared) = shared_data("") else {
        return;
    };
    let mut files = Vec::new();
    let mut dirs = vec![shared.join("edge")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "pgn") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 50, "{} edge files", files.len());
    let ws = Workspace::new("data-edge");
    let mut yaml = String::from("stages:\n");
    for (i, file) in files.iter().enumerate() {
        yaml.push_str(&format!(
            "  dl{i}:\n    uses: download\n    params: {{url: \"{}\"}}\n  parse{i}:\n    uses: parse\n    inputs: {{pgn: dl{i}}}\n    params: {{threads: 1}}\n",
            file.display()
        ));
    }
    ws.pipeline(&yaml);
    ws.run_json(&[]);
    let mut total_kept = 0;
    let mut reasons = std::collections::BTreeMap::<String, u64>::new();
    for (i, file) in files.iter().enumerate() {
        let report =
            read_json(&artifact(&ws, &format!("parse{i}"), "rejects").join("rejects.json"));
        let kept = report["kept"].as_u64().unwrap();
        let rejected = report["rejected"].as_u64().unwrap();
        assert_eq!(
            kept + rejected,
            report["games_read"].as_u64().unwrap(),
            "{}",
            file.display()
        );
        let by_reason: u64 = report["by_reason"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(code, n)| {
                *reasons.entry(code.clone()).or_default() += n.as_u64().unwrap();
                n.as_u64().unwrap()
            })
            .sum();
        assert_eq!(by_reason, rejected, "{}", file.display());
        total_kept += kept;
        let name = file.file_name().unwrap().to_string_lossy();
        if name == "sunfish-3fold.pgn" || name == "pgn-reader-fixture.pgn" {
            assert!(kept > 0, "{name}: {report}");
        }
    }
    eprintln!("edge files: {} kept, rejections {reasons:?}", total_kept);
    assert!(total_kept > 500);
    for code in ["non_standard_variant", "too_short", "illegal_move"] {
        assert!(reasons.contains_key(code), "{reasons:?}");
    }
}

#[test]
fn the_one_illegal_lichess_game_is_the_only_rejection() {
    let Some(shared) = shared_data("") else {
        return;
    };
    let ws = Workspace::new("data-one-illegal");
    ws.pipeline(&format!(
        "stages:\n  download:\n    uses: download\n    params: {{url: \"{}\"}}\n  parse:\n    uses: parse\n    inputs: {{pgn: download}}\n    params: {{min_fullmoves: 0}}\n",
        shared.join("real/lichess_2025_one_illegal.pgn").display()
    ));
    ws.run_json(&[]);
    let report = read_json(&artifact(&ws, "parse", "rejects").join("rejects.json"));
    assert_eq!(report["games_read"], 100, "{report}");
    assert_eq!(report["rejected"], 1, "{report}");
    assert_eq!(report["by_reason"]["illegal_move"], 1, "{report}");
    // Game 37, counting from 0.
    assert_eq!(report["examples"][0]["index"], 37, "{report}");
}
