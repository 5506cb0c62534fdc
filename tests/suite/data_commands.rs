//! The one-shot commands without a pipeline: `cwm process`, `cwm random-uniform`,
//! `cwm export jsonl`, `cwm import jsonl`, `cwm model params`.

use super::Workspace;

use cwm_testkit::shared_data;

#[test]
fn random_uniform_reference_mode_reproduces_the_papers_first_50_games_byte_for_byte() {
    let Some(data) = shared_data("") else { return };
    let ws = Workspace::new("cli-random");
    ws.ok(&[
        "random-uniform",
        "--games",
        "50",
        "--seed",
        "0",
        "--rng",
        "reference",
        "--format",
        "jsonl",
        "--out",
        "ru",
    ]);
    let ours = std::fs::read(ws.dir.join("ru/chess_000000.jsonl")).unwrap();
    let theirs = std::fs::read(data.join("reference-vectors/random_seed0_first50.jsonl")).unwrap();
    assert!(ours == theirs, "JSONL differs from the reference vectors");
    // Through Parquet and back: import, then export, gives the same bytes.
    ws.ok(&["import", "jsonl", "ru", "--out", "games"]);
    ws.ok(&["export", "jsonl", "--input", "games", "--out", "again"]);
    assert!(std::fs::read(ws.dir.join("again/chess_000000.jsonl")).unwrap() == theirs);
}

#[test]
fn process_counts_rejections_and_exports_from_a_pipeline_stage() {
    let Some(data) = shared_data("") else { return };
    let ws = Workspace::new("cli-process");
    let pgn = data.join("real/lichess_2025_one_illegal.pgn");
    let out = ws.ok(&[
        "process",
        "--pgn",
        pgn.to_str().unwrap(),
        "--out",
        "p",
        "--format",
        "jsonl",
    ]);
    assert!(out.contains("100 games read, 98 kept, 2 rejected"), "{out}");
    assert!(out.contains("rejected illegal_move: 1"), "{out}");
    let lines = std::fs::read_to_string(ws.dir.join("p/chess_000000.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 98);
    // The same games through a pipeline, exported by stage name.
    ws.pipeline(&format!(
        "stages:\n  download:\n    uses: download\n    params: {{url: \"{}\"}}\n  parse:\n    uses: parse\n    inputs: {{pgn: download}}\n",
        pgn.display()
    ));
    ws.ok(&["run"]);
    ws.ok(&["export", "jsonl", "--input", "parse.games", "--out", "e"]);
    let exported = std::fs::read_to_string(ws.dir.join("e/chess_000000.jsonl")).unwrap();
    assert_eq!(exported, lines);
    let err = ws.cwm(&["export", "jsonl", "--input", "nope.games", "--out", "x"]);
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("no stage or instance `nope`"));
}

#[test]
fn model_params_prints_the_reference_counts() {
    let ws = Workspace::new("cli-params");
    let json = ws.ok(&[
        "model",
        "params",
        "--arch",
        "transformer",
        "--size",
        "d128",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(
        rows,
        vec![serde_json::json!({"arch": "transformer", "size": "d128", "params": 3_128_150})]
    );
    let table = ws.ok(&["model", "params", "--arch", "slice_diag", "--size", "d512"]);
    assert!(table.contains("27209558"), "{table}");
    let bad = ws.cwm(&["model", "params", "--arch", "lstm", "--size", "d128"]);
    assert!(!bad.status.success());
}
