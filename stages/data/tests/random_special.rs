//! The `random_uniform` stage with `special_bias` (beyond-spec E6's special-biased random
//! play), run through the stage interface: it writes a games artifact that `tokenize` reads,
//! the same bytes for any thread count, and refuses bad values with a param error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use cwm_chess::encode::{START, pack_move};
use cwm_stage::{ParamValue, Params, Progress, StageContext, StageError, StageKind, StageLog};
use cwm_stage_data::games::{GAMES_FILE, GameRecord, GamesReader};
use cwm_stage_data::{RandomUniformStage, ShardReader, TokenizeOptions, tokenize_games};
use shakmaty::{Chess, Position};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cwm-special-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the stage with `params` (plus `games: 30`, `seed: 8`) on `threads` threads into `out`.
fn run_stage(params: &[(&str, ParamValue)], threads: usize, out: &Path) -> Result<(), StageError> {
    let mut all = Params::new();
    all.insert("games", ParamValue::Int(30));
    all.insert("seed", ParamValue::Int(8));
    all.insert("rng", ParamValue::Str("reference".into()));
    all.insert("min_fullmoves", ParamValue::Int(10));
    for (name, value) in params {
        all.insert(*name, value.clone());
    }
    std::fs::create_dir_all(out).unwrap();
    let ctx = StageContext::new(
        "random_uniform[special]",
        all,
        BTreeMap::new(),
        BTreeMap::from([("out".to_owned(), out.to_path_buf())]),
        out.to_path_buf(),
        threads,
        Progress::disabled(),
        StageLog::discard(),
        Arc::new(AtomicBool::new(false)),
    );
    RandomUniformStage.run(&ctx)
}

fn fast(p: Option<f64>) -> Vec<(&'static str, ParamValue)> {
    let mut params = vec![("rng", ParamValue::Str("fast".into()))];
    if let Some(p) = p {
        params.push(("special_bias", ParamValue::Float(p)));
    }
    params
}

fn read_games(dir: &Path) -> Vec<GameRecord> {
    GamesReader::open(dir, 64)
        .unwrap()
        .flat_map(|batch| batch.unwrap())
        .collect()
}

/// En-passant captures in `games`, replayed with shakmaty (which also checks every move).
fn en_passant_captures(games: &[GameRecord]) -> usize {
    let mut count = 0;
    for game in games {
        let mut position = Chess::default();
        for &packed in &game.moves {
            let legal = position.legal_moves();
            let m = *legal.iter().find(|m| pack_move(m) == packed).unwrap();
            count += usize::from(m.is_en_passant());
            position.play_unchecked(m);
        }
    }
    count
}

#[test]
fn biased_games_are_a_games_artifact_that_tokenize_reads() {
    let dir = temp("tokenize");
    run_stage(&fast(Some(1.0)), 2, &dir.join("biased")).unwrap();
    run_stage(&fast(None), 2, &dir.join("uniform")).unwrap();
    let biased = read_games(&dir.join("biased"));
    let uniform = read_games(&dir.join("uniform"));
    assert_eq!((biased.len(), uniform.len()), (30, 30));
    for game in &biased {
        assert!(game.id.starts_with("cwm_random_"), "{}", game.id);
        assert_eq!(game.id, format!("cwm_random_{:05}", game.source_index));
        assert!(
            game.moves.len() >= 20,
            "{}: {} plies",
            game.id,
            game.moves.len()
        );
    }
    assert!(
        en_passant_captures(&biased) > en_passant_captures(&uniform),
        "the bias should add en-passant captures"
    );

    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    let summary = tokenize_games(
        &dir.join("biased"),
        &tokens,
        &TokenizeOptions::default(),
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    assert_eq!(summary.games, 30);
    let rows: Vec<_> = ShardReader::open(&tokens, 16)
        .unwrap()
        .map(|row| row.unwrap())
        .collect();
    assert_eq!(rows.len(), 30);
    for (row, game) in rows.iter().zip(&biased) {
        assert_eq!(row.id, game.id);
        assert_eq!(row.moves[0], START);
        assert_eq!(&row.moves[1..], &game.moves[..]);
        assert_eq!(row.states.len(), 75 * row.moves.len());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn same_bytes_for_any_thread_count_and_zero_bias_is_no_bias() {
    let dir = temp("threads");
    let bytes = |name: &str, params: &[(&str, ParamValue)], threads: usize| {
        let out = dir.join(name);
        run_stage(params, threads, &out).unwrap();
        std::fs::read(out.join(GAMES_FILE)).unwrap()
    };
    let half = fast(Some(0.5));
    assert_eq!(bytes("half-1", &half, 1), bytes("half-2", &half, 2));
    assert_eq!(
        bytes("zero", &fast(Some(0.0)), 2),
        bytes("absent", &fast(None), 2)
    );
    let reference_zero = [("special_bias", ParamValue::Float(0.0))];
    assert_eq!(
        bytes("reference-zero", &reference_zero, 1),
        bytes("reference", &[], 1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_special_bias_is_a_param_error() {
    let dir = temp("errors");
    for (params, want) in [
        (fast(Some(1.5)), "[0, 1]"),
        (fast(Some(-0.5)), "[0, 1]"),
        (vec![("special_bias", ParamValue::Float(0.5))], "rng: fast"),
    ] {
        let err = run_stage(&params, 1, &dir.join("out")).unwrap_err();
        match err {
            StageError::Param(message) => assert!(message.contains(want), "{message}"),
            other => panic!("expected a param error, got {other}"),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
