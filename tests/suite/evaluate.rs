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

#[test]
fn cwm_evaluate_scores_a_checkpoint_on_tokenized_shards_and_on_jsonl_alike() {
    let ws = Workspace::new("cli-evaluate");
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

    let common = [
        "evaluate",
        "--checkpoint",
        "ckpt",
        "--split",
        "test_real",
        "--batch-size",
        "3",
    ];
    let mut args = common.to_vec();
    args.extend(["--data", "tokens", "--out", "e_tokens"]);
    let stdout = ws.ok(&args);
    assert!(
        stdout.contains("transformer d128 on test_real: 7 games"),
        "{stdout}"
    );
    let mut args = common.to_vec();
    args.extend(["--data", "jsonl", "--out", "e_jsonl"]);
    ws.ok(&args);

    let from_tokens = summary(&ws.dir.join("e_tokens/summary.json"));
    let from_jsonl = summary(&ws.dir.join("e_jsonl/summary.json"));
    assert_eq!(from_tokens, from_jsonl);
    assert_eq!(from_tokens["kind"], "evaluate");
    assert_eq!(from_tokens["games"], 7);
    assert_eq!(from_tokens["params"], 3_128_150);
    assert!(from_tokens["model_hash"].is_null());
    for key in ["loss", "labelwise", "exact_state", "trajectory"] {
        let value = from_tokens[key].as_f64().unwrap_or(-1.0);
        assert!(value >= 0.0, "{key}: {from_tokens}");
    }
    assert!(from_tokens["steps"].as_u64().unwrap() > 7 * 20);
    for file in ["timesteps.parquet", "games.parquet"] {
        assert!(ws.dir.join("e_tokens").join(file).is_file(), "{file}");
    }

    // Truncated and capped, as the reference's max_steps.
    let mut args = common.to_vec();
    args.extend([
        "--data",
        "tokens",
        "--out",
        "e_short",
        "--max-games",
        "2",
        "--max-steps",
        "5",
    ]);
    ws.ok(&args);
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
