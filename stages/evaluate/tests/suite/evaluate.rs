//! `evaluate` end to end on tokenized games of the shipped sample, with a freshly initialised
//! model: the summary against the tables recomputed by hand, against `state_loss` and
//! `StateMetrics` on the same batch, truncation, and the JSONL input path.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::{
    Array, BooleanArray, FixedSizeListArray, Float32Array, PrimitiveArray, StringArray, UInt8Array,
    UInt16Array, UInt32Array,
};
use arrow::datatypes::{ArrowPrimitiveType, Float32Type, UInt8Type};
use burn::module::Param;
use burn::prelude::*;
use cwm_chess::encode::{label_index, unpack_move};
use cwm_formats::predictions::{EP_CONVENTION_KEY, PREDICTIONS_FILE, PredictionRow};
use cwm_models::{
    Family, HEAD_OUT, LABEL_GROUPS, Model, ModelConfig, N_LABELS, PAD_TOKEN, Size, StateMetrics,
    StateModel, correct_counts, save_model, state_loss, valid_mask,
};
use cwm_stage::{
    InputArtifact, ParamValue, Params, Progress, StageContext, StageKind, StageLog, cuda_ordinal_in,
};
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, ShardReader, TokenizeOptions, TokenizedGame,
    export_jsonl, process_pgn, tokenize_games,
};
use cwm_stage_evaluate::{EvaluateOptions, EvaluateStage, EvaluateSummary, MassOptions, evaluate};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::Scratch;

/// The first `games` games of the shipped sample: (games table dir, tokenize dir).
fn sample_data(dir: &Path, games: u64) -> (PathBuf, PathBuf) {
    let pgn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
    let games_dir = dir.join("games");
    process_pgn(&ProcessOptions {
        pgn,
        out_dir: games_dir.clone(),
        format: OutputFormat::Parquet,
        max_games: games,
        threads: 1,
        id_key: IdKeySource::resolve(Some("test-key")),
        ..ProcessOptions::default()
    })
    .expect("process the sample");
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    tokenize_games(
        &games_dir,
        &tokens,
        &TokenizeOptions {
            shard_games: 4,
            threads: 1,
            ..TokenizeOptions::default()
        },
        &Progress::disabled(),
        &|| false,
    )
    .expect("tokenize");
    (games_dir, tokens)
}

/// A freshly initialised Transformer d128 saved as a checkpoint.
fn checkpoint(dir: &Path) -> (PathBuf, Model) {
    let config = ModelConfig::new(Family::Transformer, Size::D128);
    let model = Model::init(&config, &Device::flex()).unwrap();
    let path = dir.join("ckpt");
    save_model(&path, &model, &config).unwrap();
    (path, model)
}

/// A Transformer d128 whose head ignores its input and predicts the start position's labels
/// (`start`) at every step, saved as a checkpoint: exact at t = 0, partly right later.
fn start_position_checkpoint(dir: &Path, start: &[u8]) -> PathBuf {
    biased_checkpoint(dir, start, 5.0, "start-ckpt")
}

/// [`start_position_checkpoint`] with the start's classes `bias` above the others, saved in
/// `dir/name`.
fn biased_checkpoint(dir: &Path, start: &[u8], bias_of_start: f32, name: &str) -> PathBuf {
    let config = ModelConfig::new(Family::Transformer, Size::D128);
    let device = Device::flex();
    let Model::Transformer(mut transformer) = Model::init(&config, &device).unwrap() else {
        panic!("a transformer");
    };
    let mut bias = vec![0.0f32; HEAD_OUT];
    for group in LABEL_GROUPS {
        for r in 0..group.n_labels {
            let class = usize::from(start[group.first_label + r]);
            bias[group.logit_offset + r * group.n_classes + class] = bias_of_start;
        }
    }
    let [d, width] = transformer.output_head.weight.dims();
    transformer.output_head.weight = Param::from_tensor(Tensor::zeros([d, width], &device));
    transformer.output_head.bias = Some(Param::from_tensor(Tensor::from_data(
        TensorData::new(bias, [HEAD_OUT]),
        &device,
    )));
    let path = dir.join(name);
    save_model(&path, &Model::Transformer(transformer), &config).unwrap();
    path
}

fn run(model: &Path, data: &Path, out: &Path, options: &EvaluateOptions) -> EvaluateSummary {
    evaluate(model, data, out, options, &Progress::disabled(), &|| false).expect("evaluate")
}

fn read_batches(path: &Path) -> Vec<arrow::array::RecordBatch> {
    ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn col<'a, T: 'static>(batch: &'a arrow::array::RecordBatch, name: &str) -> &'a T {
    batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("column {name} type"))
}

#[derive(Debug, Default)]
struct Recount {
    steps: u64,
    exact: u64,
    correct: u64,
    ce_sum: f64,
    per_game: BTreeMap<String, (u32, u32, u32)>, // steps, exact steps, next expected t
}

fn recount(out: &Path) -> Recount {
    let mut r = Recount::default();
    let mut order = Vec::new();
    for batch in read_batches(&out.join("timesteps.parquet")) {
        let ids: &StringArray = col(&batch, "game_id");
        let t: &UInt32Array = col(&batch, "t");
        let n: &UInt8Array = col(&batch, "n_correct");
        let board: &UInt8Array = col(&batch, "board");
        let side: &BooleanArray = col(&batch, "side");
        let castling: &UInt8Array = col(&batch, "castling");
        let ep: &UInt8Array = col(&batch, "en_passant");
        let half: &UInt8Array = col(&batch, "halfmove");
        let full: &UInt8Array = col(&batch, "fullmove");
        let exact: &BooleanArray = col(&batch, "exact");
        let loss: &Float32Array = col(&batch, "loss");
        for i in 0..batch.num_rows() {
            let groups = u32::from(board.value(i))
                + u32::from(side.value(i))
                + u32::from(castling.value(i))
                + u32::from(ep.value(i))
                + u32::from(half.value(i))
                + u32::from(full.value(i));
            assert_eq!(
                groups,
                u32::from(n.value(i)),
                "row {i}: groups sum to n_correct"
            );
            assert!(board.value(i) <= 64 && castling.value(i) <= 4 && ep.value(i) <= 2);
            assert!(half.value(i) <= 2 && full.value(i) <= 2);
            let is_exact = usize::from(n.value(i)) == N_LABELS;
            assert_eq!(exact.value(i), is_exact);
            r.steps += 1;
            r.exact += u64::from(is_exact);
            r.correct += u64::from(n.value(i));
            r.ce_sum += f64::from(loss.value(i)) * N_LABELS as f64;
            let id = ids.value(i).to_owned();
            if !r.per_game.contains_key(&id) {
                order.push(id.clone());
            }
            let entry = r.per_game.entry(id).or_default();
            assert_eq!(
                t.value(i),
                entry.2,
                "steps of a game are consecutive from t = 0"
            );
            entry.0 += 1;
            entry.1 += u32::from(is_exact);
            entry.2 += 1;
        }
    }
    r
}

#[test]
fn summary_matches_the_tables_recomputed_by_hand() {
    let scratch = Scratch::new("recount");
    let (_, tokens) = sample_data(&scratch.0, 10);
    let (ckpt, _) = checkpoint(&scratch.0);
    let out = scratch.0.join("out");
    let options = EvaluateOptions {
        split: "test_real".into(),
        batch_size: 4, // 10 games: two full batches and a partial one
        data_hash: Some("abc".into()),
        ..EvaluateOptions::default()
    };
    let summary = run(&ckpt, &tokens, &out, &options);
    assert_eq!(summary.kind, "evaluate");
    assert_eq!(summary.split, "test_real");
    assert_eq!(
        (summary.arch.as_str(), summary.size.as_str()),
        ("transformer", "d128")
    );
    assert_eq!(summary.params, 3_128_150);
    assert_eq!(summary.data_hash.as_deref(), Some("abc"));
    assert_eq!(summary.model_hash, None);
    // The summary on disk is the one returned.
    // (Compared as parsed JSON on both sides: float parsing may differ from the value in
    // the last bit when serde_json is built without `float_roundtrip`.)
    let on_disk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let returned: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(&summary).unwrap()).unwrap();
    assert_eq!(on_disk, returned);
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.ends_with(".tmp") || n.ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let r = recount(&out);
    assert_eq!(summary.games, 10);
    assert_eq!(r.per_game.len(), 10);
    assert_eq!(summary.steps, r.steps);
    assert_eq!(summary.exact_state, r.exact as f64 / r.steps as f64);
    let labelwise = r.correct as f64 / 75.0 / r.steps as f64;
    assert!(
        (summary.labelwise - labelwise).abs() < 1e-12,
        "{} vs {labelwise}",
        summary.labelwise
    );
    assert!(summary.labelwise > 0.0 && summary.labelwise < 1.0);
    let loss = r.ce_sum / (75.0 * r.steps as f64);
    assert!(
        (summary.loss - loss).abs() < 1e-5 * loss,
        "{} vs {loss}",
        summary.loss
    );
    assert!(summary.loss > 0.0);

    // games.parquet agrees with the per-step rows; trajectory from it.
    let mut tokens_by_id = BTreeMap::new();
    for game in ShardReader::open(&tokens, 8).unwrap() {
        let game = game.unwrap();
        tokens_by_id.insert(game.id.clone(), game.plies() as u32);
    }
    let mut games = 0u64;
    let mut all_exact = 0u64;
    for batch in read_batches(&out.join("games.parquet")) {
        let ids: &StringArray = col(&batch, "game_id");
        let plies: &UInt32Array = col(&batch, "plies");
        let steps: &UInt32Array = col(&batch, "steps");
        let exact_steps: &UInt32Array = col(&batch, "exact_steps");
        let exact: &BooleanArray = col(&batch, "all_exact");
        for i in 0..batch.num_rows() {
            let (n, e, _) = r.per_game[ids.value(i)];
            assert_eq!(steps.value(i), n);
            assert_eq!(exact_steps.value(i), e);
            assert_eq!(plies.value(i), tokens_by_id[ids.value(i)]);
            assert_eq!(steps.value(i), plies.value(i) + 1, "no truncation");
            assert_eq!(exact.value(i), e == n);
            games += 1;
            all_exact += u64::from(e == n);
        }
    }
    assert_eq!(games, summary.games);
    assert_eq!(summary.trajectory, all_exact as f64 / games as f64);
    assert_eq!(summary.exact_games, all_exact);
}

/// Pads a batch like the reference's collate function: PAD ids, all-zero targets.
fn padded(
    games: &[TokenizedGame],
    device: &Device,
) -> (Tensor<2, Int>, Tensor<3, Int>, Vec<usize>) {
    let lengths: Vec<usize> = games.iter().map(|g| g.moves.len()).collect();
    let seq = *lengths.iter().max().unwrap();
    let mut moves = Vec::new();
    let mut targets = Vec::new();
    for g in games {
        moves.extend(g.moves.iter().map(|&m| i64::from(m)));
        moves.extend(std::iter::repeat_n(PAD_TOKEN, seq - g.moves.len()));
        targets.extend(g.states.iter().map(|&s| i64::from(s)));
        targets.extend(std::iter::repeat_n(0, (seq - g.moves.len()) * N_LABELS));
    }
    (
        Tensor::from_data(TensorData::new(moves, [games.len(), seq]), device),
        Tensor::from_data(
            TensorData::new(targets, [games.len(), seq, N_LABELS]),
            device,
        ),
        lengths,
    )
}

#[test]
fn metrics_equal_state_loss_and_state_metrics_on_the_same_batch() {
    let scratch = Scratch::new("direct");
    let (_, tokens) = sample_data(&scratch.0, 6);
    let (ckpt, model) = checkpoint(&scratch.0);
    let device = Device::flex();
    let games: Vec<TokenizedGame> = ShardReader::open(&tokens, 8)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(games.len(), 6);
    let (moves, targets, lengths) = padded(&games, &device);
    let seq = moves.dims()[1];
    let logits = model.logits(moves);
    let loss = state_loss(
        logits.clone(),
        targets.clone(),
        valid_mask(&lengths, seq, &device).unwrap(),
    )
    .unwrap();
    let mut direct = StateMetrics::new(20).unwrap();
    direct
        .add_tensors(correct_counts(logits, targets).unwrap(), &lengths, &loss)
        .unwrap();
    let direct_loss = loss
        .loss
        .into_data()
        .convert::<f64>()
        .try_to_vec::<f64>()
        .unwrap()[0];

    for batch_size in [6, 4] {
        let out = scratch.0.join(format!("out{batch_size}"));
        let summary = run(
            &ckpt,
            &tokens,
            &out,
            &EvaluateOptions {
                split: "val".into(),
                batch_size,
                ..EvaluateOptions::default()
            },
        );
        assert_eq!(summary.steps, direct.n_steps(), "batch {batch_size}");
        assert_eq!(summary.games, 6);
        assert_eq!(
            summary.exact_state,
            direct.full_exact(),
            "batch {batch_size}"
        );
        assert_eq!(
            summary.labelwise,
            direct.partial_exact(),
            "batch {batch_size}"
        );
        assert_eq!(
            summary.trajectory,
            direct.game_exact(),
            "batch {batch_size}"
        );
        assert!(
            (summary.loss - direct_loss).abs() < 1e-5 * direct_loss,
            "batch {batch_size}: {} vs {direct_loss}",
            summary.loss
        );
        assert!((summary.loss - direct.loss()).abs() < 1e-5 * direct_loss);
    }
}

#[test]
fn max_steps_and_max_games_truncate_like_the_reference() {
    let scratch = Scratch::new("truncate");
    let (_, tokens) = sample_data(&scratch.0, 5);
    let (ckpt, _) = checkpoint(&scratch.0);
    let out = scratch.0.join("out");
    let summary = run(
        &ckpt,
        &tokens,
        &out,
        &EvaluateOptions {
            split: "val".into(),
            batch_size: 2,
            max_games: 3,
            max_steps: 7,
            ..EvaluateOptions::default()
        },
    );
    assert_eq!(summary.games, 3);
    assert_eq!(
        summary.steps, 21,
        "every sample game has more than 7 tokens"
    );
    assert_eq!(summary.max_steps, 7);
    let r = recount(&out);
    assert_eq!(r.steps, 21);
    assert!(r.per_game.values().all(|&(n, _, _)| n == 7));
}

#[test]
fn reference_jsonl_input_gives_the_same_results_as_tokenize_shards() {
    let scratch = Scratch::new("jsonl");
    let (games_dir, tokens) = sample_data(&scratch.0, 7);
    let (ckpt, _) = checkpoint(&scratch.0);
    let jsonl = scratch.0.join("jsonl");
    let shards = export_jsonl(&games_dir, &jsonl, 3, 1).unwrap();
    assert_eq!(shards.len(), 3);
    let options = EvaluateOptions {
        split: "test_real".into(),
        batch_size: 5,
        ..EvaluateOptions::default()
    };
    let from_shards = run(&ckpt, &tokens, &scratch.0.join("a"), &options);
    let from_jsonl = run(&ckpt, &jsonl, &scratch.0.join("b"), &options);
    assert_eq!(from_shards, from_jsonl);
    for file in ["timesteps.parquet", PREDICTIONS_FILE] {
        assert_eq!(
            std::fs::read(scratch.0.join("a").join(file)).unwrap(),
            std::fs::read(scratch.0.join("b").join(file)).unwrap(),
            "{file}: the shards' en-passant convention is the JSONL's"
        );
    }
    // One JSONL file works too.
    let one = run(&ckpt, &shards[0], &scratch.0.join("c"), &options);
    assert_eq!(one.games, 3);
}

#[test]
fn bad_inputs_are_errors_naming_the_file() {
    let scratch = Scratch::new("errors");
    let (_, tokens) = sample_data(&scratch.0, 2);
    let options = EvaluateOptions::default();
    let no_ckpt = scratch.0.join("nothing");
    std::fs::create_dir_all(&no_ckpt).unwrap();
    let err = evaluate(
        &no_ckpt,
        &tokens,
        &scratch.0.join("o1"),
        &options,
        &Progress::disabled(),
        &|| false,
    )
    .unwrap_err();
    assert!(err.to_string().contains("nothing"), "{err}");
    assert!(err.to_string().contains("model.json"), "{err}");

    // A train artifact layout (checkpoint/ inside) is accepted; a JSONL line with bad JSON is not.
    let train = scratch.0.join("train");
    let (_, _) = checkpoint(&train);
    std::fs::rename(train.join("ckpt"), train.join("checkpoint")).unwrap();
    let bad = scratch.0.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("chess_000000.jsonl"), "{\"example_id\": 3}\n").unwrap();
    let err = evaluate(
        &train,
        &bad,
        &scratch.0.join("o2"),
        &options,
        &Progress::disabled(),
        &|| false,
    )
    .unwrap_err();
    assert!(err.to_string().contains("chess_000000.jsonl"), "{err}");
    assert!(err.to_string().contains("line 1"), "{err}");

    let err = evaluate(
        &train,
        &tokens,
        &scratch.0.join("o3"),
        &options,
        &Progress::disabled(),
        &|| true,
    )
    .unwrap_err();
    assert!(
        matches!(err, cwm_stage_evaluate::EvalError::Cancelled),
        "{err}"
    );
    assert!(!scratch.0.join("o3/summary.json").exists());
}

/// The stage with `device` and these GPUs assigned; returns the run's result and its log.
fn run_stage(
    dir: &Path,
    model: &Path,
    data: &Path,
    device: &str,
    gpus: Vec<u32>,
) -> (Result<(), String>, String) {
    let mut params = Params::new();
    params.insert("split", ParamValue::Str("val".into()));
    for (name, value) in [
        ("batch_size", 2),
        ("max_games", 3),
        ("max_steps", 0),
        ("threads", 1),
        ("mass_samples", 8),
        ("mass_steps", 0),
        ("mass_seed", 0),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    params.insert("device", ParamValue::Str(device.into()));
    params.insert("probabilities", ParamValue::Bool(false));
    let artifact = |path: &Path| {
        vec![InputArtifact {
            producer: "p".into(),
            producer_kind: "train".into(),
            producer_params: Params::new(),
            output: "out".into(),
            hash: "h".into(),
            path: path.to_path_buf(),
        }]
    };
    let inputs = BTreeMap::from([
        ("model".to_owned(), artifact(model)),
        ("data".to_owned(), artifact(data)),
    ]);
    let out = dir.join(format!("out-{device}"));
    std::fs::create_dir_all(&out).unwrap();
    let log = dir.join(format!("log-{device}.txt"));
    let ctx = StageContext::new(
        "evaluate",
        params,
        inputs,
        BTreeMap::from([("out".to_owned(), out)]),
        dir.to_path_buf(),
        1,
        Progress::disabled(),
        StageLog::to_file(File::create(&log).unwrap()),
        Default::default(),
    )
    .with_gpus(gpus);
    let result = EvaluateStage.run(&ctx).map_err(|e| e.to_string());
    drop(ctx);
    (result, std::fs::read_to_string(&log).unwrap())
}

/// `device: cuda` claims one GPU and runs on the one the executor assigned (its ordinal in
/// this process's CUDA_VISIBLE_DEVICES); `device: cpu` claims none and stays on the CPU even
/// with a GPU assigned.
#[test]
fn the_stage_runs_on_the_assigned_gpu_only_when_its_device_is_cuda() {
    let with_device = |device: &str| {
        let mut params = Params::new();
        params.insert("device", ParamValue::Str(device.into()));
        params
    };
    assert_eq!(EvaluateStage.gpus(&with_device("cuda")), 1);
    assert_eq!(EvaluateStage.gpus(&with_device("cuda:1")), 1);
    assert_eq!(EvaluateStage.gpus(&with_device("cpu")), 0);
    assert_eq!(EvaluateStage.gpus(&Params::new()), 0, "the default, cpu");

    let scratch = Scratch::new("stage-gpus");
    let (_, tokens) = sample_data(&scratch.0, 3);
    let (ckpt, _) = checkpoint(&scratch.0);
    let (result, log) = run_stage(&scratch.0, &ckpt, &tokens, "cpu", vec![3]);
    result.unwrap();
    assert!(
        log.contains("device cpu (param cpu; assigned GPUs [3])"),
        "{log}"
    );
    assert!(log.contains("E12: 8 states at each of "), "{log}");

    // Without the cuda feature (the tests' build) the run fails at once, naming the device it
    // resolved; with it and such a GPU it runs there.
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let expected = match cuda_ordinal_in(&[3], visible.as_deref()) {
        Some(ordinal) => format!("cuda:{ordinal}"),
        None => "cuda".to_owned(),
    };
    let (result, log) = run_stage(&scratch.0, &ckpt, &tokens, "cuda", vec![3]);
    assert!(
        log.contains(&format!(
            "device {expected} (param cuda; assigned GPUs [3])"
        )),
        "{log}"
    );
    if let Err(e) = result {
        assert!(e.contains(&format!("{expected:?}")), "{e}");
    }
}

/// The fixed-size lists of `name` in `batch`, row by row.
fn label_lists<T: ArrowPrimitiveType>(
    batch: &arrow::array::RecordBatch,
    name: &str,
) -> Vec<[T::Native; 75]> {
    let lists: &FixedSizeListArray = col(batch, name);
    assert_eq!(lists.value_length(), 75, "{name}");
    (0..lists.len())
        .map(|i| {
            let list = lists.value(i);
            let values = list
                .as_any()
                .downcast_ref::<PrimitiveArray<T>>()
                .unwrap_or_else(|| panic!("{name}: item type"));
            values.values().to_vec().try_into().unwrap()
        })
        .collect()
}

/// Every row of `predictions.parquet` in `out`, with the file's en-passant metadata.
fn read_predictions(out: &Path) -> (Vec<PredictionRow>, Option<String>) {
    let path = out.join(PREDICTIONS_FILE);
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
    let ep = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == EP_CONVENTION_KEY))
        .and_then(|k| k.value.clone());
    let mut rows = Vec::new();
    for batch in builder.build().unwrap().map(Result::unwrap) {
        let ids: &StringArray = col(&batch, "game_id");
        let t: &UInt32Array = col(&batch, "t");
        let token: &UInt16Array = col(&batch, "token");
        let uci: &StringArray = col(&batch, "move");
        let log_p: &Float32Array = col(&batch, "log_p_true");
        let pred = label_lists::<UInt8Type>(&batch, "pred");
        let target = label_lists::<UInt8Type>(&batch, "target");
        let probabilities = batch.column_by_name("p_true").is_some();
        let p_true = probabilities.then(|| label_lists::<Float32Type>(&batch, "p_true"));
        let p_max = probabilities.then(|| label_lists::<Float32Type>(&batch, "p_max"));
        let nullable = |name: &str| -> Option<Vec<Option<f32>>> {
            batch.column_by_name(name).map(|_| {
                let values: &Float32Array = col(&batch, name);
                values.iter().collect()
            })
        };
        let (valid, afford) = (nullable("valid_mass"), nullable("afford_mass"));
        for i in 0..batch.num_rows() {
            rows.push(PredictionRow {
                game_id: ids.value(i).to_owned(),
                t: t.value(i),
                token: token.value(i),
                uci: uci.is_valid(i).then(|| uci.value(i).to_owned()),
                pred: pred[i],
                target: target[i],
                log_p_true: log_p.value(i),
                p_true: p_true.as_ref().map(|p| p[i]),
                p_max: p_max.as_ref().map(|p| p[i]),
                valid_mass: valid.as_ref().and_then(|v| v[i]),
                afford_mass: afford.as_ref().and_then(|v| v[i]),
            });
        }
    }
    (rows, ep)
}

/// Correct labels of `row` per timesteps group: board, side, castling, en passant, halfmove,
/// fullmove.
fn group_hits(row: &PredictionRow) -> [u8; 6] {
    let hits = |range: std::ops::Range<usize>| {
        range.filter(|&j| row.pred[j] == row.target[j]).count() as u8
    };
    [
        hits(0..64),
        hits(64..65),
        hits(65..69),
        hits(69..71),
        hits(71..73),
        hits(73..75),
    ]
}

/// The label index of a UCI square (`e2`): `(7 - rank) * 8 + file`.
fn uci_square(text: &str) -> usize {
    let bytes = text.as_bytes();
    let file = usize::from(bytes[0] - b'a');
    let rank = usize::from(bytes[1] - b'1');
    assert!(file < 8 && rank < 8, "{text}");
    (7 - rank) * 8 + file
}

/// Checks `row`'s move against its token and the labels before and after it.
fn check_move(row: &PredictionRow, before: &[u8; 75]) {
    let Some(uci) = &row.uci else {
        assert_eq!(row.t, 0, "only t = 0 has no move: {row:?}");
        assert_eq!(row.token, cwm_chess::encode::START);
        return;
    };
    assert!(row.t > 0 && (4..=5).contains(&uci.len()), "{row:?}");
    let (from, to) = (uci_square(&uci[0..2]), uci_square(&uci[2..4]));
    let (token_from, token_to, promotion) = unpack_move(row.token).expect("a move id");
    assert_eq!((label_index(token_from), label_index(token_to)), (from, to));
    assert_eq!(uci.len() == 5, promotion.is_some(), "{uci}");
    assert_ne!(before[from], 0, "{uci}: a piece stands on the from square");
    assert_eq!(
        row.target[from], 0,
        "{uci}: the from square is empty after it"
    );
    assert_ne!(row.target[to], 0, "{uci}: the to square is taken after it");
}

#[test]
fn predictions_follow_the_timesteps_row_for_row() {
    let scratch = Scratch::new("predictions");
    let (_, tokens) = sample_data(&scratch.0, 6);
    let games: BTreeMap<String, TokenizedGame> = ShardReader::open(&tokens, 8)
        .unwrap()
        .map(|g| g.map(|g| (g.id.clone(), g)))
        .collect::<Result<_, _>>()
        .unwrap();
    let start = &games.values().next().unwrap().states[..75];
    let (random, _) = checkpoint(&scratch.0);
    let fixed = start_position_checkpoint(&scratch.0, start);
    for (name, ckpt) in [("random", random), ("start", fixed)] {
        let out = scratch.0.join(name);
        let options = EvaluateOptions {
            split: "test_real".into(),
            batch_size: 4,
            probabilities: true,
            ..EvaluateOptions::default()
        };
        let summary = run(&ckpt, &tokens, &out, &options);
        let exact = check_predictions(&out, &games, &summary);
        if name == "start" {
            assert_eq!(exact, 6, "exact at t = 0 only, one step per game");
        }
    }
}

/// Checks `predictions.parquet` in `out` against `timesteps.parquet` and the games, row by row;
/// returns the number of exact steps.
fn check_predictions(
    out: &Path,
    games: &BTreeMap<String, TokenizedGame>,
    summary: &EvaluateSummary,
) -> usize {
    let (rows, ep) = read_predictions(out);
    assert_eq!(ep.as_deref(), Some("reference"));
    let mut steps = 0;
    let mut exact = 0;
    for batch in read_batches(&out.join("timesteps.parquet")) {
        let ids: &StringArray = col(&batch, "game_id");
        let t: &UInt32Array = col(&batch, "t");
        let is_exact: &BooleanArray = col(&batch, "exact");
        let loss: &Float32Array = col(&batch, "loss");
        let side: &BooleanArray = col(&batch, "side");
        let groups: Vec<&UInt8Array> = ["board", "castling", "en_passant", "halfmove", "fullmove"]
            .map(|name| col::<UInt8Array>(&batch, name))
            .into();
        for i in 0..batch.num_rows() {
            let row = &rows[steps];
            steps += 1;
            assert_eq!((row.game_id.as_str(), row.t), (ids.value(i), t.value(i)));
            assert_eq!(row.pred == row.target, is_exact.value(i), "{row:?}");
            exact += usize::from(is_exact.value(i));
            let hits = group_hits(row);
            let from_table = [
                groups[0].value(i),
                u8::from(side.value(i)),
                groups[1].value(i),
                groups[2].value(i),
                groups[3].value(i),
                groups[4].value(i),
            ];
            assert_eq!(hits, from_table, "{row:?}");
            let game = &games[&row.game_id];
            let t = row.t as usize;
            assert_eq!(row.token, game.moves[t]);
            assert_eq!(row.target.as_slice(), &game.states[t * 75..t * 75 + 75]);
            let before: [u8; 75] = match t {
                0 => [0; 75],
                _ => game.states[(t - 1) * 75..t * 75].try_into().unwrap(),
            };
            check_move(row, &before);
            check_probabilities(row, loss.value(i));
        }
    }
    assert_eq!(steps, rows.len());
    assert_eq!(steps as u64, summary.steps);
    assert_eq!(exact as f64 / steps as f64, summary.exact_state);
    exact
}

/// `log_p_true` is minus the step's summed cross-entropy (75 × `loss`), at most 0, and the sum
/// of the logs of `p_true`; `p_max` bounds `p_true` and equals it where the label is right.
fn check_probabilities(row: &PredictionRow, loss: f32) {
    let log_p = f64::from(row.log_p_true);
    assert!(log_p <= 0.0 && log_p.exp() <= 1.0, "{row:?}");
    let ce = f64::from(loss) * 75.0;
    assert!((log_p + ce).abs() <= 1e-5 * ce.max(1.0), "{log_p} vs -{ce}");
    let (Some(p_true), Some(p_max)) = (row.p_true, row.p_max) else {
        panic!("probabilities were asked for: {row:?}");
    };
    let sum_of_logs: f64 = p_true.iter().map(|&p| f64::from(p).ln()).sum();
    assert!(
        (sum_of_logs - log_p).abs() <= 1e-4 * log_p.abs().max(1.0),
        "Σ ln p_true {sum_of_logs} vs log_p_true {log_p}"
    );
    for j in 0..75 {
        assert!(
            p_true[j] > 0.0 && p_true[j] <= p_max[j] && p_max[j] <= 1.0,
            "{row:?}"
        );
        if row.pred[j] == row.target[j] {
            assert_eq!(p_true[j], p_max[j], "label {j}");
        }
    }
}

#[test]
fn without_probabilities_or_masses_the_file_has_the_seven_required_columns_and_python_reads_it() {
    let scratch = Scratch::new("predictions-python");
    let (_, tokens) = sample_data(&scratch.0, 3);
    let (ckpt, _) = checkpoint(&scratch.0);
    let out = scratch.0.join("out");
    let options = EvaluateOptions {
        mass: MassOptions::OFF,
        ..EvaluateOptions::default()
    };
    let summary = run(&ckpt, &tokens, &out, &options);
    assert_eq!(summary.sampled_mass, None);
    let (rows, ep) = read_predictions(&out);
    assert_eq!(ep.as_deref(), Some("reference"));
    assert_eq!(rows.len() as u64, summary.steps);
    assert!(rows.iter().all(|r| r.p_true.is_none() && r.p_max.is_none()));
    let batches = read_batches(&out.join(PREDICTIONS_FILE));
    let names: Vec<String> = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "game_id",
            "t",
            "token",
            "move",
            "pred",
            "target",
            "log_p_true"
        ]
    );

    if !cwm_testkit::require_python("pyarrow.parquet", "pip install pyarrow") {
        return;
    }
    let script = r#"
import sys, pyarrow as pa, pyarrow.parquet as pq
path = sys.argv[1]
table = pq.read_table(path)
pred_type = table.schema.field("pred").type
assert pa.types.is_fixed_size_list(pred_type) and pred_type.list_size == 75, pred_type
assert pred_type.value_type == pa.uint8(), pred_type
assert table.schema.field("move").nullable
meta = pq.read_metadata(path).metadata
t, pred, target, moves = (table.column(c).to_pylist() for c in ("t", "pred", "target", "move"))
exact = sum(p == q for p, q in zip(pred, target))
assert all((m is None) == (s == 0) for m, s in zip(moves, t))
print(table.num_rows, exact, meta[b"cwm.ep_convention"].decode())
"#;
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(out.join(PREDICTIONS_FILE))
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let exact = rows.iter().filter(|r| r.pred == r.target).count();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("{} {exact} reference", summary.steps)
    );
}

/// E12 on a model sure of the start position: every drawn state is the start position, a
/// valid position at every step, and it affords the next move exactly where the rules engine
/// finds that move legal in the start position; null at each game's last step.
#[test]
fn the_sampled_masses_of_a_sure_model_are_its_one_states_validity_and_legality() {
    let scratch = Scratch::new("masses-sure");
    let (_, tokens) = sample_data(&scratch.0, 5);
    let start = cwm_chess::encode::INITIAL_STATE;
    let sure = biased_checkpoint(&scratch.0, &start, 60.0, "sure");
    let out = scratch.0.join("out");
    let options = EvaluateOptions {
        split: "test_real".into(),
        mass: MassOptions {
            samples: 16,
            steps: 0,
            seed: 3,
        },
        ..EvaluateOptions::default()
    };
    let summary = run(&sure, &tokens, &out, &options);
    let (rows, _) = read_predictions(&out);
    let mut affording = 0u64;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.valid_mass, Some(1.0), "{} t={}", row.game_id, row.t);
        let next = rows.get(i + 1).filter(|n| n.game_id == row.game_id);
        let expected = next.map(|n| {
            let legal = cwm_chess::rules::affords(&start, n.token);
            affording += u64::from(legal);
            if legal { 1.0 } else { 0.0 }
        });
        assert_eq!(row.afford_mass, expected, "{} t={}", row.game_id, row.t);
    }
    let mass = summary.sampled_mass.expect("sampled masses");
    assert_eq!((mass.samples, mass.seed), (16, 3));
    assert_eq!(mass.steps, summary.steps, "every step sampled");
    assert_eq!(mass.steps_with_next_move, summary.steps - summary.games);
    assert_eq!(mass.valid_mass, Some(1.0));
    let afford = affording as f64 / mass.steps_with_next_move as f64;
    assert!((mass.afford_mass.unwrap() - afford).abs() < 1e-12);
    assert!(
        affording >= 5,
        "each game's first move is legal at the start"
    );
}

/// Exactly `mass_steps` steps are sampled, the same ones whatever the batch size, and the
/// summary's means are the means of the columns; with 0 samples the columns are absent.
#[test]
fn the_sampled_steps_are_exactly_mass_steps_whatever_the_batch_size() {
    let scratch = Scratch::new("masses-sample");
    let (_, tokens) = sample_data(&scratch.0, 6);
    let (ckpt, _) = checkpoint(&scratch.0);
    let mass = MassOptions {
        samples: 8,
        steps: 40,
        seed: 0,
    };
    let mut sampled_sets = Vec::new();
    for batch_size in [1, 5] {
        let out = scratch.0.join(format!("b{batch_size}"));
        let options = EvaluateOptions {
            split: "test_real".into(),
            batch_size,
            mass,
            ..EvaluateOptions::default()
        };
        let summary = run(&ckpt, &tokens, &out, &options);
        let (rows, _) = read_predictions(&out);
        let sampled: Vec<&PredictionRow> = rows.iter().filter(|r| r.valid_mass.is_some()).collect();
        assert_eq!(sampled.len(), 40);
        assert!(
            rows.iter()
                .all(|r| r.valid_mass.is_some() || r.afford_mass.is_none())
        );
        let valid: Vec<f64> = sampled
            .iter()
            .map(|r| f64::from(r.valid_mass.unwrap()))
            .collect();
        assert!(
            valid
                .iter()
                .all(|v| (0.0..=1.0).contains(v) && (v * 8.0).fract() == 0.0)
        );
        let from_summary = summary.sampled_mass.expect("sampled masses");
        assert_eq!(from_summary.steps, 40);
        let mean = valid.iter().sum::<f64>() / 40.0;
        assert!((from_summary.valid_mass.unwrap() - mean).abs() < 1e-9);
        sampled_sets.push(
            sampled
                .iter()
                .map(|r| (r.game_id.clone(), r.t))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(sampled_sets[0], sampled_sets[1]);
    let games: std::collections::BTreeSet<&String> = sampled_sets[0].iter().map(|s| &s.0).collect();
    assert!(games.len() > 1, "a uniform draw reaches several games");

    let out = scratch.0.join("off");
    let options = EvaluateOptions {
        split: "test_real".into(),
        mass: MassOptions::OFF,
        ..EvaluateOptions::default()
    };
    let summary = run(&ckpt, &tokens, &out, &options);
    assert_eq!(summary.sampled_mass, None);
    let batches = read_batches(&out.join(PREDICTIONS_FILE));
    assert!(batches[0].column_by_name("valid_mass").is_none());
}
