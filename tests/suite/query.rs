//! `cwm query` on a real run: the shipped sample parsed, tokenized into shards, a two-step
//! training and an evaluation of its model; the counts the queries return are checked against
//! the Parquet files read here without cwm.

use std::path::{Path, PathBuf};

use datafusion::parquet::file::reader::{FileReader as _, SerializedFileReader};

use super::Workspace;

/// The pipeline: 30 games, shards of 10, a transformer trained two steps, evaluated on the
/// first 5 games' first 12 tokens; `bins_real` is left for `cwm run` to make.
fn pipeline(sample: &Path) -> String {
    format!(
        r#"
stages:
  download:
    uses: download
    params: {{url: "{sample}"}}
  parse:
    uses: parse
    inputs: {{pgn: download}}
    params: {{max_games: 30}}
  tokenize:
    uses: tokenize
    inputs: {{games: parse.games}}
    params: {{shard_games: 10}}
  train:
    uses: train
    matrix: {{arch: [transformer]}}
    inputs: {{train: tokenize, val: tokenize}}
    params: {{size: d128, steps: 2, batch_size: 4, max_steps: 16, val_batches: 1, log_every: 1}}
  evaluate_real:
    uses: evaluate
    matrix: {{arch: [transformer]}}
    inputs: {{model: train, data: tokenize}}
    params: {{split: test_real, batch_size: 2, max_games: 5, max_steps: 12}}
  bins_real:
    uses: bin_prefix
    matrix: {{arch: [transformer]}}
    inputs: {{evaluate: evaluate_real}}
"#,
        sample = sample.display()
    )
}

/// The data directory of `instance`'s one output (from `cwm show`).
fn artifact(ws: &Workspace, instance: &str) -> PathBuf {
    let stdout = ws.ok(&["show", instance]);
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("path: "))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no artifact of {instance} in:\n{stdout}"))
}

/// Rows of a Parquet file, from its footer.
fn rows(path: &Path) -> u64 {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = SerializedFileReader::new(file).unwrap();
    u64::try_from(reader.metadata().file_metadata().num_rows()).unwrap()
}

/// `cwm query SQL --csv FILE` → the CSV's lines after the header, split at commas.
fn query_csv(ws: &Workspace, sql: &str) -> Vec<Vec<String>> {
    let out = ws.dir.join("result.csv");
    let stdout = ws.ok(&["query", sql, "--csv", out.to_str().unwrap()]);
    assert!(stdout.contains("rows written to"), "{stdout}");
    let text = std::fs::read_to_string(&out).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

/// The one integer a query returns.
fn query_number(ws: &Workspace, sql: &str) -> u64 {
    let rows = query_csv(ws, sql);
    assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
    rows[0][0]
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: {rows:?}: {e}"))
}

#[test]
fn queries_count_what_the_parquet_files_hold() {
    let ws = Workspace::new("query");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    ws.pipeline(&pipeline(&repo.join("data/lichess_db_1000k.pgn.zst")));
    ws.ok(&["run", "--only", "evaluate_real", "--progress", "none"]);

    let tables = ws.ok(&["query", "--tables"]);
    for name in [
        "evaluate_real_arch_transformer_predictions",
        "evaluate_real_transformer_predictions",
        "evaluate_real_transformer_timesteps",
        "train_arch_transformer_steps",
        "tokenize_shard",
        "shard_*.parquet",
        "bins_real[arch=transformer]",
        "`cwm run` makes them",
    ] {
        assert!(tables.contains(name), "{name} in:\n{tables}");
    }
    assert!(
        !tables.contains("bins_real_arch_transformer_bins"),
        "{tables}"
    );

    // COUNT(*) equals the rows of the files, read here from their footers.
    let eval = artifact(&ws, "evaluate_real");
    let steps = rows(&eval.join("predictions.parquet"));
    assert_eq!(steps, rows(&eval.join("timesteps.parquet")));
    assert_eq!(steps, 5 * 12, "5 games of at least 12 tokens");
    for table in [
        "evaluate_real_transformer_predictions",
        "evaluate_real_arch_transformer_predictions",
    ] {
        assert_eq!(
            query_number(&ws, &format!("SELECT COUNT(*) FROM {table}")),
            steps
        );
    }
    let shards: Vec<PathBuf> = std::fs::read_dir(artifact(&ws, "tokenize"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    assert_eq!(shards.len(), 3, "30 games in shards of 10");
    let games: u64 = shards.iter().map(|p| rows(p)).sum();
    assert_eq!(
        query_number(&ws, "SELECT COUNT(*) FROM tokenize_shard"),
        games
    );

    // List elements (1-based): side to move is label 64, pred[65]; its hits equal the side
    // column of timesteps, and exact steps are those whose 75 labels all match.
    let side_hits = query_number(
        &ws,
        "SELECT SUM(CASE WHEN pred[65] = target[65] THEN 1 ELSE 0 END) \
         FROM evaluate_real_transformer_predictions",
    );
    let side = query_number(
        &ws,
        "SELECT SUM(CAST(side AS BIGINT)) FROM evaluate_real_transformer_timesteps",
    );
    assert_eq!(side_hits, side);
    let exact_pred = query_number(
        &ws,
        "SELECT COUNT(*) FROM evaluate_real_transformer_predictions WHERE pred = target",
    );
    let exact = query_number(
        &ws,
        "SELECT COUNT(*) FROM evaluate_real_transformer_timesteps WHERE exact",
    );
    assert_eq!(exact_pred, exact);

    assert_outputs_and_errors(&ws, steps);
}

/// Printing with a limit, `--output` by extension, and the failures' messages.
fn assert_outputs_and_errors(ws: &Workspace, steps: u64) {
    let printed = ws.ok(&[
        "query",
        "SELECT game_id, t, move FROM evaluate_real_transformer_predictions ORDER BY game_id, t",
        "--limit",
        "4",
    ]);
    assert!(printed.contains("| game_id"), "{printed}");
    let left = steps - 4;
    assert!(
        printed.contains(&format!("4 of {steps} rows shown, {left} left out")),
        "{printed}"
    );

    let out = ws.dir.join("first.parquet");
    ws.ok(&[
        "query",
        "SELECT * FROM evaluate_real_transformer_predictions WHERE t < 3",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(rows(&out), 5 * 3);

    let failed = ws.cwm(&["query", "SELECT 1", "--output", "x.txt"]);
    assert!(!failed.status.success());
    assert!(String::from_utf8_lossy(&failed.stderr).contains(".csv or .parquet"));

    let failed = ws.cwm(&[
        "query",
        "SELECT COUNT(*) FROM evaluate_real_transformer_prediction",
    ]);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("close names: evaluate_real_transformer_predictions"),
        "{stderr}"
    );

    let failed = ws.cwm(&["query", "SELECT * FROM bins_real_transformer_bins"]);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("bins_real[arch=transformer]") && stderr.contains("`cwm run` makes it"),
        "{stderr}"
    );
}
