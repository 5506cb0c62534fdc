//! The `probe` and `markov` stages end to end on tokenized games of the shipped sample and on
//! random legal games, with a freshly initialised model: the summaries' shape, the probe
//! weights against the summary's scores, the head baseline recomputed from the model, what
//! the embedding layer must show in the Markov test, repeatability, and the errors a
//! pipeline author meets.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use cwm_formats::edit::{
    EditSummary, VARIANT_NEXT_MOVE, VARIANT_PERSISTENT, VECTOR_NONE, VECTOR_PATCH,
};
use cwm_formats::markov::{MarkovSummary, SET_NATURAL, SET_SWAP};
use cwm_formats::probe::{ProbeSummary, SET_ID, SET_OOD, SUMMARY_FILE, SquareScores};
use cwm_models::{Family, Model, ModelConfig, N_LABELS, Size, load_model, save_model};
use cwm_random_uniform::Mode;
use cwm_stage::{InputArtifact, ParamValue, Params, Progress, StageContext, StageKind, StageLog};
use cwm_stage_data::{
    IdKeySource, OutputFormat, ProcessOptions, RandomUniformOptions, TokenizeOptions,
    generate_random_uniform, process_pgn, tokenize_games,
};
use cwm_stage_probe::collect::{CollectOptions, collect};
use cwm_stage_probe::sample::Sampling;
use cwm_stage_probe::score::score;
use cwm_stage_probe::weights::read_weights;
use cwm_stage_probe::{EditStage, MarkovStage, ProbeStage};

/// A temp directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("cwm-probe-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tokenize(games: &Path, tokens: &Path) {
    std::fs::create_dir_all(tokens).unwrap();
    tokenize_games(
        games,
        tokens,
        &TokenizeOptions {
            shard_games: 8,
            threads: 1,
            ..TokenizeOptions::default()
        },
        &Progress::disabled(),
        &|| false,
    )
    .expect("tokenize");
}

/// The first `n` games of the shipped sample, tokenized.
fn real_games(dir: &Path, n: u64) -> PathBuf {
    let pgn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
    let games = dir.join(format!("real-{n}"));
    process_pgn(&ProcessOptions {
        pgn,
        out_dir: games.clone(),
        format: OutputFormat::Parquet,
        max_games: n,
        threads: 1,
        id_key: IdKeySource::resolve(Some("test-key")),
        ..ProcessOptions::default()
    })
    .expect("process the sample");
    let tokens = dir.join(format!("real-{n}-tokens"));
    tokenize(&games, &tokens);
    tokens
}

/// `n` random legal games of `seed`, tokenized.
fn random_games(dir: &Path, n: u64, seed: u64) -> PathBuf {
    let games = dir.join(format!("random-{seed}"));
    let options = RandomUniformOptions {
        games: n,
        seed,
        mode: Mode::Fast,
        ..RandomUniformOptions::default()
    };
    generate_random_uniform(
        &options,
        &games,
        OutputFormat::Parquet,
        &Progress::disabled(),
        &|| false,
    )
    .expect("random games");
    let tokens = dir.join(format!("random-{seed}-tokens"));
    tokenize(&games, &tokens);
    tokens
}

/// A freshly initialised SLiCE d128 (two blocks), saved as a checkpoint.
fn checkpoint(dir: &Path) -> PathBuf {
    let config = ModelConfig::new(Family::Slice, Size::D128);
    let model = Model::init(&config, &Device::flex()).unwrap();
    let path = dir.join("ckpt");
    save_model(&path, &model, &config).unwrap();
    path
}

struct Data {
    model: PathBuf,
    fit: PathBuf,
    ood: PathBuf,
    real: PathBuf,
    random: PathBuf,
}

fn data(dir: &Path) -> Data {
    Data {
        model: checkpoint(dir),
        fit: real_games(dir, 30),
        ood: random_games(dir, 20, 7),
        real: real_games(dir, 8),
        random: random_games(dir, 8, 0),
    }
}

fn artifacts(paths: &[&Path]) -> Vec<InputArtifact> {
    paths
        .iter()
        .map(|path| InputArtifact {
            producer: "p".into(),
            producer_kind: "tokenize".into(),
            producer_params: Params::new(),
            output: "out".into(),
            hash: "h".into(),
            path: path.to_path_buf(),
        })
        .collect()
}

/// Runs the stage into `out` with the test's small settings, `splits` labelling `eval`.
fn run(dir: &Path, data: &Data, out: &Path, splits: &[&str], eval: &[&Path]) -> Result<(), String> {
    let mut params = Params::new();
    params.insert(
        "splits",
        ParamValue::List(
            splits
                .iter()
                .map(|s| ParamValue::Str((*s).into()))
                .collect(),
        ),
    );
    for (name, value) in [
        ("steps_per_game", 6),
        ("epochs", 3),
        ("probe_batch", 64),
        ("patience", 3),
        ("seed", 0),
        ("batch_size", 4),
        ("max_games", 0),
        ("threads", 1),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    params.insert("lr", ParamValue::Float(1e-3));
    params.insert("aux", ParamValue::Bool(false));
    params.insert("sampling", ParamValue::Str("uniform".into()));
    params.insert("device", ParamValue::Str("cpu".into()));
    let inputs = BTreeMap::from([
        ("model".to_owned(), artifacts(&[&data.model])),
        ("fit".to_owned(), artifacts(&[&data.fit])),
        ("fit_ood".to_owned(), artifacts(&[&data.ood])),
        ("eval".to_owned(), artifacts(eval)),
    ]);
    std::fs::create_dir_all(out).unwrap();
    let ctx = StageContext::new(
        "probe",
        params,
        inputs,
        BTreeMap::from([("out".to_owned(), out.to_path_buf())]),
        dir.to_path_buf(),
        1,
        Progress::disabled(),
        StageLog::to_file(File::create(dir.join("log.txt")).unwrap()),
        Default::default(),
    );
    ProbeStage.run(&ctx).map_err(|e| e.to_string())
}

fn summary(out: &Path) -> ProbeSummary {
    cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap()
}

/// `a` equals `b` up to JSON's last-digit rounding of floats.
fn assert_close(a: &SquareScores, b: &SquareScores, what: &str) {
    let close = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) => (x - y).abs() < 1e-12,
        (x, y) => x == y,
    };
    let fields = |s: &SquareScores| {
        [
            s.square_acc,
            s.precision_w,
            s.recall_w,
            s.f1_w,
            s.board_exact,
            s.aux_acc,
        ]
    };
    for (x, y) in fields(a).into_iter().zip(fields(b)) {
        assert!(close(x, y), "{what}: {a:?} vs {b:?}");
    }
    assert_eq!(a.by_bin.len(), b.by_bin.len(), "{what}");
    for (x, y) in a.by_bin.iter().zip(&b.by_bin) {
        assert_eq!(
            (x.start, x.end, x.vectors),
            (y.start, y.end, y.vectors),
            "{what}"
        );
        assert!(
            close(x.square_acc, y.square_acc) && close(x.board_exact, y.board_exact),
            "{what}"
        );
    }
}

#[test]
fn every_set_split_and_layer_is_scored_and_the_weights_reproduce_the_scores() {
    let scratch = Scratch::new("e2e");
    let dir = &scratch.0;
    let data = data(dir);
    let out = dir.join("out");
    run(
        dir,
        &data,
        &out,
        &["test_real", "test_random"],
        &[&data.real, &data.random],
    )
    .unwrap();
    let s = summary(&out);
    assert_eq!(
        (s.arch.as_str(), s.size.as_str(), s.d_model),
        ("slice", "d128", 128)
    );
    let layers = s.blocks as usize + 2;
    assert!(s.blocks >= 1);
    let sets: Vec<&str> = s.fits.iter().map(|f| f.set.as_str()).collect();
    assert_eq!(sets, [SET_ID, SET_OOD]);
    for fit in &s.fits {
        assert_eq!(
            fit.layers.len(),
            layers,
            "embedding, each block, head input"
        );
        assert!(fit.vectors > 0 && fit.vectors + fit.val_vectors <= fit.games * 6);
    }
    assert_eq!(s.results.len(), 2 * 2 * layers, "sets × splits × layers");
    let names: Vec<&str> = s.results[..layers]
        .iter()
        .map(|r| r.layer_name.as_str())
        .collect();
    let mut expected = vec!["embedding".to_owned()];
    expected.extend((1..=s.blocks).map(|l| format!("block {l}")));
    expected.push("head input".to_owned());
    assert_eq!(names, expected);
    let splits: Vec<(&str, u64, u64)> = s
        .baselines
        .iter()
        .map(|b| (b.split.as_str(), b.games, b.vectors))
        .collect();
    assert_eq!(splits, [("test_real", 8, 48), ("test_random", 8, 48)]);

    // Read the test_random vectors again; the written weights and the model's own head must
    // give exactly the summary's scores.
    let device = Device::flex();
    let (model, _) = load_model(&data.model.clone(), &device).unwrap();
    let options = CollectOptions {
        steps_per_game: 6,
        sampling: Sampling::Uniform,
        seed: 0,
        batch_games: 3,
        max_games: 0,
    };
    let vectors = collect(
        &model,
        &data.random,
        &options,
        &device,
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    let probes = read_weights(&out).unwrap();
    assert_eq!(probes.len(), 2 * layers);
    let rows: Vec<usize> = (0..vectors.len()).collect();
    for named in &probes {
        let pred = named
            .probe
            .predict(&vectors.layers[named.layer as usize], &rows, &device)
            .unwrap();
        let scores = score(&pred, 64, &vectors.labels, &vectors.steps);
        let written = s
            .results
            .iter()
            .find(|r| r.set == named.set && r.split == "test_random" && r.layer == named.layer)
            .unwrap();
        let what = format!("{} layer {}", named.set, named.layer);
        assert_close(&scores, &written.scores, &what);
    }
    let head = score(&vectors.head, N_LABELS, &vectors.labels, &vectors.steps);
    assert_close(&head, &s.baselines[1].head, "head");
    let acc = s.results[0].scores.square_acc.unwrap();
    assert!((0.0..=1.0).contains(&acc));
}

#[test]
fn the_same_params_give_the_same_summary_and_weights() {
    let scratch = Scratch::new("repeat");
    let dir = &scratch.0;
    let data = data(dir);
    let (a, b) = (dir.join("a"), dir.join("b"));
    for out in [&a, &b] {
        run(dir, &data, out, &["test_real"], &[&data.real]).unwrap();
    }
    assert_eq!(summary(&a), summary(&b));
    let bin = |dir: &Path| std::fs::read(dir.join("probes.bin")).unwrap();
    assert_eq!(bin(&a), bin(&b));
}

#[test]
fn mismatched_splits_and_a_missing_checkpoint_are_named() {
    let scratch = Scratch::new("errors");
    let dir = &scratch.0;
    let data = data(dir);
    let err = run(
        dir,
        &data,
        &dir.join("o1"),
        &["test_real"],
        &[&data.real, &data.random],
    )
    .unwrap_err();
    assert!(
        err.contains("splits names 1 splits (test_real) but eval has 2 inputs"),
        "{err}"
    );
    let no_model = Data {
        model: dir.join("nowhere"),
        ..data
    };
    let err = run(
        dir,
        &no_model,
        &dir.join("o2"),
        &["test_real"],
        &[&no_model.real],
    )
    .unwrap_err();
    assert!(
        err.contains("nowhere") && err.contains("holds no checkpoint"),
        "{err}"
    );
    assert!(!dir.join("o2").join(SUMMARY_FILE).exists());
}

/// Runs the markov stage on `data` into `out` with the test's small settings.
fn run_markov(dir: &Path, model: &Path, data: &Path, out: &Path) -> Result<MarkovSummary, String> {
    let mut params = Params::new();
    params.insert("split", ParamValue::Str("test_real".into()));
    for (name, value) in [
        ("max_games", 0),
        ("max_class", 8),
        ("swaps_per_game", 6),
        ("window", 8),
        ("pairs", 5000),
        ("permutations", 200),
        ("seed", 0),
        ("batch_size", 8),
        ("threads", 1),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    params.insert("device", ParamValue::Str("cpu".into()));
    let inputs = BTreeMap::from([
        ("model".to_owned(), artifacts(&[model])),
        ("data".to_owned(), artifacts(&[data])),
    ]);
    std::fs::create_dir_all(out).unwrap();
    let ctx = StageContext::new(
        "markov",
        params,
        inputs,
        BTreeMap::from([("out".to_owned(), out.to_path_buf())]),
        dir.to_path_buf(),
        1,
        Progress::disabled(),
        StageLog::to_file(File::create(dir.join("markov-log.txt")).unwrap()),
        Default::default(),
    );
    MarkovStage.run(&ctx).map_err(|e| e.to_string())?;
    Ok(cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap())
}

/// Layer 0 is the embedding of the last move alone: a swapped order that ends in the same move
/// has the very same vector there, so the swap classes must stand far above the population.
#[test]
fn the_markov_test_finds_swapped_orders_identical_at_the_embedding() {
    let scratch = Scratch::new("markov");
    let dir = &scratch.0;
    let model = checkpoint(dir);
    let games = real_games(dir, 40);
    let out = dir.join("out");
    let s = run_markov(dir, &model, &games, &out).unwrap();
    assert_eq!(s.games, 40);
    let names: Vec<&str> = s.sets.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [SET_NATURAL, SET_SWAP]);
    let swap = &s.sets[1];
    assert!(swap.classes >= 20, "{} swap classes", swap.classes);
    assert_eq!(swap.members, 2 * swap.classes);
    assert_eq!(swap.layers.len(), s.blocks as usize + 2);
    let embedding = &swap.layers[0];
    assert!(embedding.mu_sem.unwrap() > 0.5, "{embedding:?}");
    assert!(
        embedding.d.unwrap() > 2.0 && embedding.p.unwrap() < 0.01,
        "{embedding:?}"
    );
    for layer in &swap.layers {
        let (p, holm) = (layer.p.unwrap(), layer.p_holm.unwrap());
        assert!(p > 0.0 && p <= holm && holm <= 1.0, "{layer:?}");
    }
    for share in [swap.prediction_agreement, swap.exact_agreement] {
        assert!(share.is_some_and(|v| (0.0..=1.0).contains(&v)), "{swap:?}");
    }
    // The same params give the same summary.
    let again = run_markov(dir, &model, &games, &dir.join("again")).unwrap();
    assert_eq!(again, s);
    // A directory without games is an error naming it.
    let err = run_markov(dir, &model, &dir.join("nothing"), &dir.join("o3")).unwrap_err();
    assert!(err.contains("nothing"), "{err}");
}

/// Runs the edit stage with `probes` (a probe artifact) on `data` into `out`, the test's small
/// settings and `alphas`.
fn run_edit(
    dir: &Path,
    (model, probes, data): (&Path, &Path, &Path),
    out: &Path,
    alphas: &[f64],
) -> Result<EditSummary, String> {
    let mut params = Params::new();
    params.insert("split", ParamValue::Str("test_real".into()));
    for (name, value) in [
        ("cases", 24),
        ("horizon", 4),
        ("seed", 3),
        ("batch_size", 8),
        ("max_games", 0),
        ("threads", 1),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    let alphas = alphas.iter().map(|&a| ParamValue::Float(a)).collect();
    params.insert("alphas", ParamValue::List(alphas));
    params.insert("probe_set", ParamValue::Str("id".into()));
    params.insert("device", ParamValue::Str("cpu".into()));
    let inputs = BTreeMap::from([
        ("model".to_owned(), artifacts(&[model])),
        ("probes".to_owned(), artifacts(&[probes])),
        ("data".to_owned(), artifacts(&[data])),
    ]);
    std::fs::create_dir_all(out).unwrap();
    let ctx = StageContext::new(
        "edit",
        params,
        inputs,
        BTreeMap::from([("out".to_owned(), out.to_path_buf())]),
        dir.to_path_buf(),
        1,
        Progress::disabled(),
        StageLog::to_file(File::create(dir.join("edit-log.txt")).unwrap()),
        Default::default(),
    );
    EditStage.run(&ctx).map_err(|e| e.to_string())?;
    Ok(cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap())
}

/// An edit scaled by α = 0 adds nothing: every α = 0 row must read exactly like the unedited
/// `none` row, whatever its vector; the rows cover every variant, layer, vector and α.
#[test]
fn edits_at_alpha_zero_change_nothing_and_every_row_is_there() {
    let scratch = Scratch::new("edit");
    let dir = &scratch.0;
    let data = data(dir);
    let probes = dir.join("probes");
    run(dir, &data, &probes, &["test_real"], &[&data.real]).unwrap();
    let games = real_games(dir, 20);
    let out = dir.join("out");
    let inputs = (data.model.as_path(), probes.as_path(), games.as_path());
    let s = run_edit(dir, inputs, &out, &[0.0, 8.0]).unwrap();
    assert_eq!((s.arch.as_str(), s.horizon), ("slice", 4));
    let cases: Vec<(&str, u64)> = s
        .cases
        .iter()
        .map(|c| (c.variant.as_str(), c.cases))
        .collect();
    assert_eq!(cases, [(VARIANT_NEXT_MOVE, 24), (VARIANT_PERSISTENT, 24)]);
    let layers = s.blocks as usize;
    assert_eq!(
        s.rows.len(),
        2 * layers * (1 + 4 * 2),
        "variant × layer × rows"
    );
    for row in &s.rows {
        assert_eq!(row.cases, 24, "{row:?}");
        assert!(row.held <= row.cases, "{row:?}");
        if row.vector == VECTOR_NONE && row.held > 0 {
            assert_eq!(row.flip_held, Some(0.0), "held means not empty: {row:?}");
        }
        let followed = if row.variant == VARIANT_PERSISTENT && row.vector != VECTOR_PATCH {
            4
        } else {
            0
        };
        assert_eq!(row.persist_flip.len(), followed, "{row:?}");
        assert_eq!(row.persist_exact.len(), followed, "{row:?}");
        assert_eq!(row.persist_flip_held.len(), followed, "{row:?}");
        let none = s
            .rows
            .iter()
            .find(|r| r.variant == row.variant && r.vector == VECTOR_NONE)
            .unwrap();
        if row.alpha == 0.0 {
            assert_eq!(row.argmax_agreement, Some(1.0), "{row:?}");
            assert_eq!(row.collateral, Some(0.0), "{row:?}");
            assert_eq!(row.flip, none.flip, "{row:?}");
        }
        if row.alpha == 0.0 && row.vector != VECTOR_PATCH {
            // Patch is graded against S_{t+3}, the others against the same target.
            let (a, b) = (row.target_mass.unwrap(), none.target_mass.unwrap());
            assert!((a - b).abs() < 1e-9, "{row:?}");
        }
    }
    // An edit of 8 times the hidden state's norm changes some prediction.
    let moved = s
        .rows
        .iter()
        .filter(|r| r.alpha == 8.0)
        .any(|r| r.argmax_agreement < Some(1.0));
    assert!(moved, "{:?}", s.rows);
    // Repeatable; probes that are not there are named.
    assert_eq!(
        run_edit(dir, inputs, &dir.join("again"), &[0.0, 8.0]).unwrap(),
        s
    );
    let missing = dir.join("no-probes");
    let inputs = (data.model.as_path(), missing.as_path(), games.as_path());
    let err = run_edit(dir, inputs, &dir.join("o2"), &[1.0]).unwrap_err();
    assert!(err.contains("no-probes"), "{err}");
}
