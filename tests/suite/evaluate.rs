//! `cwm evaluate` on a freshly initialised checkpoint and the shipped sample, through tokenize
//! shards and through reference JSONL.

use std::path::{Path, PathBuf};

use super::Workspace;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn summary(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("JSON")
}

/// Writes the shipped sample's first 7 games as a games table (`games`), as reference JSONL
/// (`jsonl`) and as tokenize shards (`tokens`), and a freshly initialised transformer d128
/// checkpoint (`ckpt`), into the workspace.
fn prepare_inputs(ws: &Workspace) {
    let pgn = repo().join("data/lichess_db_1000k.pgn.zst");
    let pgn = pgn.to_str().unwrap();
    for (format, out) in [("parquet", "games"), ("jsonl", "jsonl")] {
        ws.ok(&[
            "process",
            "--pgn",
            pgn,
            "--out",
            out,
            "--format",
            format,
            "--max-games",
            "7",
            "--shard-size",
            "3",
            "--id-key",
            "k",
        ]);
    }
    std::fs::create_dir_all(ws.dir.join("tokens")).unwrap();
    cwm_stage_data::tokenize_games(
        &ws.dir.join("games"),
        &ws.dir.join("tokens"),
        &cwm_stage_data::TokenizeOptions {
            shard_games: 4,
            threads: 1,
            ..Default::default()
        },
        &cwm_stage::Progress::disabled(),
        &|| false,
    )
    .expect("tokenize");
    let config =
        cwm_models::ModelConfig::new(cwm_models::Family::Transformer, cwm_models::Size::D128);
    let model = cwm_models::Model::init(&config, &burn::prelude::Device::flex()).unwrap();
    cwm_models::save_model(&ws.dir.join("ckpt"), &model, &config).unwrap();
}

/// `cwm evaluate` of `ckpt` on `data` (test_real, batches of 3) into `out`, with `extra`
/// arguments; asserts success and returns stdout.
fn evaluate(ws: &Workspace, data: &str, out: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "evaluate",
        "--checkpoint",
        "ckpt",
        "--split",
        "test_real",
        "--batch-size",
        "3",
        "--data",
        data,
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    ws.ok(&args)
}

/// The summary of the untruncated evaluation of the 7 games: every metric present, every step
/// scored, and its tables beside it in `dir`.
fn assert_full_evaluation(summary: &serde_json::Value, dir: &Path) {
    assert_eq!(summary["kind"], "evaluate");
    assert_eq!(summary["games"], 7);
    assert_eq!(summary["params"], 3_128_150);
    assert!(summary["model_hash"].is_null());
    for key in ["loss", "labelwise", "exact_state", "trajectory"] {
        let value = summary[key].as_f64().unwrap_or(-1.0);
        assert!(value >= 0.0, "{key}: {summary}");
    }
    assert!(summary["steps"].as_u64().unwrap() > 7 * 20);
    for file in ["timesteps.parquet", "games.parquet"] {
        assert!(dir.join(file).is_file(), "{file}");
    }
}

#[test]
fn cwm_evaluate_scores_a_checkpoint_on_tokenized_shards_and_on_jsonl_alike() {
    let ws = Workspace::new("cli-evaluate");
    prepare_inputs(&ws);

    let stdout = evaluate(&ws, "tokens", "e_tokens", &[]);
    assert!(
        stdout.contains("transformer d128 on test_real: 7 games"),
        "{stdout}"
    );
    evaluate(&ws, "jsonl", "e_jsonl", &[]);
    let from_tokens = summary(&ws.dir.join("e_tokens/summary.json"));
    let from_jsonl = summary(&ws.dir.join("e_jsonl/summary.json"));
    assert_eq!(from_tokens, from_jsonl);
    assert_full_evaluation(&from_tokens, &ws.dir.join("e_tokens"));

    // Truncated and capped, as the reference's max_steps.
    evaluate(
        &ws,
        "tokens",
        "e_short",
        &["--max-games", "2", "--max-steps", "5"],
    );
    let short = summary(&ws.dir.join("e_short/summary.json"));
    assert_eq!(
        (short["games"].as_u64(), short["steps"].as_u64()),
        (Some(2), Some(10))
    );

    // A directory without a checkpoint: a failure that names it.
    std::fs::create_dir_all(ws.dir.join("empty")).unwrap();
    let out = ws.cwm(&[
        "evaluate",
        "--checkpoint",
        "empty",
        "--data",
        "tokens",
        "--out",
        "e_bad",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("empty") && stderr.contains("model.json"),
        "{stderr}"
    );
}
