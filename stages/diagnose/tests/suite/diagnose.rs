//! The `diagnose` stage on predictions built from the shipped sample games: the true states
//! (both en-passant conventions) score perfectly, hand-made errors move exactly the measures
//! they should, bad games are skipped, and the stage runs end to end through its `StageKind`.
//!
//! The fixtures are `predictions.parquet` files written here with arrow: the true labels of
//! replayed real games as `target`, and copies of them, perturbed where a test says, as
//! `pred`.

use crate::Scratch;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    ArrayRef, AsArray, BooleanArray, FixedSizeListArray, Float32Array, RecordBatch, StringArray,
    UInt8Array, UInt16Array, UInt32Array,
};
use arrow::datatypes::{DataType, Field, Float32Type, Schema, UInt8Type, UInt32Type};
use cwm_chess::encode::{EpConvention, STATE_LEN, StateLabels, write_uci};
use cwm_chess::replay::{PgnGames, ReplayConfig, replay_game};
use cwm_formats::diagnose::{DiagnoseSummary, NamedRate, Rate, STEPS_FILE, SUMMARY_FILE};
use cwm_formats::evaluate::EvaluateSummary;
use cwm_formats::predictions::{EP_CONVENTION_KEY, MASS_SAMPLES_KEY, PREDICTIONS_FILE};
use cwm_stage::{InputArtifact, ParamValue, Params, Progress, StageContext, StageKind, StageLog};
use cwm_stage_diagnose::diagnose::fields::group_counts;
use cwm_stage_diagnose::{DiagnoseInputs, DiagnoseOptions, DiagnoseStage, diagnose};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// One game of a fixture: tokens, true and predicted labels, per step.
#[derive(Clone)]
struct Game {
    id: String,
    tokens: Vec<u16>,
    target: Vec<StateLabels>,
    pred: Vec<StateLabels>,
}

/// The games of the shipped sample under `ep`, predictions equal to the truth.
fn sample_games(ep: EpConvention, max: usize) -> Vec<Game> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
    let decoder = zstd::stream::read::Decoder::new(File::open(path).unwrap()).unwrap();
    let config = ReplayConfig {
        ep_convention: ep,
        ..ReplayConfig::default()
    };
    PgnGames::new(decoder)
        .filter_map(|raw| replay_game(raw.unwrap(), &config).ok())
        .take(max)
        .enumerate()
        .map(|(i, kept)| Game {
            id: format!("cwm_game_{i:04}"),
            tokens: kept.replay.moves.clone(),
            target: kept.replay.states.clone(),
            pred: kept.replay.states,
        })
        .collect()
}

fn labels_column(rows: &[&StateLabels]) -> ArrayRef {
    let values: Vec<u8> = rows.iter().flat_map(|l| l.iter().copied()).collect();
    let field = Arc::new(Field::new("item", DataType::UInt8, false));
    Arc::new(FixedSizeListArray::new(
        field,
        STATE_LEN as i32,
        Arc::new(UInt8Array::from(values)),
        None,
    ))
}

/// Writes `predictions.parquet` and `summary.json` of an evaluate artifact into `dir`; `ep`
/// `None` leaves the convention out of the metadata. `log_p_true` is 0 for exact steps and
/// −2 for the others; `p_max` is 0.999 everywhere but 0.5 on label 0 of non-exact steps.
fn write_evaluate(dir: &Path, games: &[Game], ep: Option<EpConvention>) {
    write_evaluate_with(dir, games, ep, None);
}

/// E12's sampled masses of a fixture: per step in file order the valid and afford mass, and
/// the value of the `cwm.mass_samples` metadata key (`None` leaves it out).
struct Masses {
    per_step: Vec<(Option<f32>, Option<f32>)>,
    samples: Option<String>,
}

/// [`write_evaluate`], with the `valid_mass` and `afford_mass` columns of `masses`.
fn write_evaluate_with(
    dir: &Path,
    games: &[Game],
    ep: Option<EpConvention>,
    masses: Option<&Masses>,
) {
    std::fs::create_dir_all(dir).unwrap();
    let steps: Vec<(&Game, usize)> = games
        .iter()
        .flat_map(|g| (0..g.tokens.len()).map(move |t| (g, t)))
        .collect();
    let moves: Vec<Option<String>> = steps
        .iter()
        .map(|&(g, t)| {
            let mut uci = String::new();
            (t > 0 && write_uci(g.tokens[t], &mut uci)).then_some(uci)
        })
        .collect();
    let wrong = |&(g, t): &(&Game, usize)| g.pred[t] != g.target[t];
    let p_max: Vec<f32> = steps
        .iter()
        .flat_map(|s| (0..STATE_LEN).map(move |j| if j == 0 && wrong(s) { 0.5 } else { 0.999 }))
        .collect();
    let float_list = Arc::new(Field::new("item", DataType::Float32, false));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            steps.iter().map(|(g, _)| g.id.as_str()),
        )),
        Arc::new(UInt32Array::from_iter_values(
            steps.iter().map(|&(_, t)| t as u32),
        )),
        Arc::new(UInt16Array::from_iter_values(
            steps.iter().map(|&(g, t)| g.tokens[t]),
        )),
        Arc::new(StringArray::from(moves)),
        labels_column(&steps.iter().map(|&(g, t)| &g.pred[t]).collect::<Vec<_>>()),
        labels_column(&steps.iter().map(|&(g, t)| &g.target[t]).collect::<Vec<_>>()),
        Arc::new(Float32Array::from_iter_values(
            steps.iter().map(|s| if wrong(s) { -2.0 } else { 0.0 }),
        )),
        Arc::new(FixedSizeListArray::new(
            float_list.clone(),
            STATE_LEN as i32,
            Arc::new(Float32Array::from(p_max)),
            None,
        )),
    ];
    let list = |inner: DataType| {
        DataType::FixedSizeList(Arc::new(Field::new("item", inner, false)), STATE_LEN as i32)
    };
    let mut fields = vec![
        Field::new("game_id", DataType::Utf8, false),
        Field::new("t", DataType::UInt32, false),
        Field::new("token", DataType::UInt16, false),
        Field::new("move", DataType::Utf8, true),
        Field::new("pred", list(DataType::UInt8), false),
        Field::new("target", list(DataType::UInt8), false),
        Field::new("log_p_true", DataType::Float32, false),
        Field::new("p_max", list(DataType::Float32), false),
    ];
    let mut metadata: Vec<KeyValue> = ep
        .map(|ep| KeyValue::new(EP_CONVENTION_KEY.into(), ep.name().to_owned()))
        .into_iter()
        .collect();
    if let Some(masses) = masses {
        assert_eq!(masses.per_step.len(), steps.len(), "a mass pair per step");
        let valid: Float32Array = masses.per_step.iter().map(|m| m.0).collect();
        let afford: Float32Array = masses.per_step.iter().map(|m| m.1).collect();
        columns.extend([Arc::new(valid) as ArrayRef, Arc::new(afford)]);
        fields.push(Field::new("valid_mass", DataType::Float32, true));
        fields.push(Field::new("afford_mass", DataType::Float32, true));
        if let Some(samples) = &masses.samples {
            metadata.push(KeyValue::new(MASS_SAMPLES_KEY.into(), samples.clone()));
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let metadata = (!metadata.is_empty()).then_some(metadata);
    let props = WriterProperties::builder()
        .set_key_value_metadata(metadata)
        .build();
    let file = File::create(dir.join(PREDICTIONS_FILE)).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let summary = EvaluateSummary {
        version: 1,
        kind: "evaluate".into(),
        split: "test_real".into(),
        arch: "transformer".into(),
        size: "d128".into(),
        params: 1,
        model_hash: Some("model".into()),
        data_hash: Some("data".into()),
        games: games.len() as u64,
        steps: steps.len() as u64,
        loss: 0.0,
        labelwise: 1.0,
        exact_state: 1.0,
        trajectory: 1.0,
        exact_games: 0,
        max_steps: 0,
        sampled_mass: None,
    };
    cwm_formats::write_json(&dir.join("summary.json"), &summary).unwrap();
}

fn options(bootstrap: u32, threads: usize) -> DiagnoseOptions {
    DiagnoseOptions {
        bootstrap,
        threads,
        ..DiagnoseOptions::default()
    }
}

/// Diagnoses `games` under `ep` in `dir/eval` → `dir/out`.
fn run(dir: &Path, games: &[Game], ep: EpConvention, options: &DiagnoseOptions) -> DiagnoseSummary {
    let evaluate = dir.join("eval");
    write_evaluate(&evaluate, games, Some(ep));
    let inputs = DiagnoseInputs {
        evaluate: &evaluate,
        novelty: None,
    };
    diagnose(
        inputs,
        &dir.join("out"),
        options,
        &Progress::disabled(),
        &|| false,
    )
    .expect("diagnose")
}

/// The rows of `steps.parquet` in `dir/out`.
fn steps_table(dir: &Path) -> Vec<RecordBatch> {
    let file = File::open(dir.join("out").join(STEPS_FILE)).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn value(rate: &Rate) -> f64 {
    rate.value
        .unwrap_or_else(|| panic!("undefined rate {rate:?}"))
}

fn assert_all_one(rates: &[(&str, &Rate)]) {
    for (name, rate) in rates {
        assert_eq!(rate.value, Some(1.0), "{name}: {rate:?}");
        assert!(rate.n > 0, "{name}");
    }
}

fn assert_all_zero(rates: &[(&str, &Rate)]) {
    for (name, rate) in rates {
        assert_eq!(rate.num, 0.0, "{name}: {rate:?}");
    }
}

/// Every measure of a perfect prediction set.
fn assert_perfect(summary: &DiagnoseSummary, games: &[Game]) {
    let steps: usize = games.iter().map(|g| g.tokens.len()).sum();
    assert_eq!(summary.steps, steps as u64);
    assert_eq!(summary.games, games.len() as u64);
    let tiers: Vec<(&str, &Rate)> = summary.validity.tiers.iter().map(|r| ("tier", r)).collect();
    assert_all_one(&tiers);
    let flags: Vec<(&str, &Rate)> = summary
        .validity
        .flags
        .iter()
        .map(|f| (f.name.as_str(), &f.rate))
        .collect();
    assert_all_zero(&flags);
    let (f, a, d) = (&summary.fields, &summary.affordance, &summary.dynamics);
    assert_all_one(&[
        ("placement", &f.placement),
        ("side", &f.side),
        ("castling", &f.castling),
        ("en_passant", &f.en_passant),
        ("halfmove", &f.halfmove),
        ("fullmove", &f.fullmove),
        ("position_exact", &f.position_exact),
        ("exact_state", &f.exact_state),
        ("iou", &a.iou.strict),
        ("iou defined", &a.iou.defined),
        ("precision", &a.precision.strict),
        ("recall", &a.recall.strict),
        ("legal_set_exact", &a.legal_set_exact.strict),
        ("coverage", &a.coverage),
        ("per_piece_iou", &a.per_piece_iou.strict),
        ("in_check", &a.in_check),
        ("checkers", &a.checkers),
        ("check_giving", &a.check_giving),
        ("pins", &a.pins),
        ("next_move_afforded", &d.next_move_afforded),
        ("transition_consistent", &d.transition_consistent),
        ("tc_given_prev_exact", &d.tc_given_prev_exact),
        ("true_mass_above_half", &summary.mass.true_mass_above_half),
    ]);
    let invariants: Vec<(&str, &Rate)> = d
        .invariants
        .iter()
        .map(|i| (i.id.as_str(), &i.violations))
        .collect();
    assert_all_zero(&invariants);
    assert_all_zero(&[
        ("phantom", &f.phantom_rate),
        ("omission", &f.omission_rate),
        ("misidentification", &f.misidentification_rate),
        ("too_much_material", &summary.validity.too_much_material),
    ]);
    assert_eq!(d.tc_given_prev_wrong.n, 0);
    assert_eq!(d.tc_given_prev_wrong.value, None);
    assert_eq!(d.recovery_rate.n, 0);
    assert_eq!(d.error_runs.runs, 0);
    assert_eq!(d.error_runs.mean, None);
    assert_eq!(summary.validity.plausible_error_share.value, None);
    assert_eq!(summary.events.first_errors.n, 0);
    for tag in &summary.events.tags {
        assert_eq!(tag.lift.value, None, "{}: no errors, no lift", tag.tag);
        if tag.n > 0 {
            assert_eq!(tag.exact_state.value, Some(1.0), "{}", tag.tag);
            assert_eq!(tag.relevant_accuracy.value, Some(1.0), "{}", tag.tag);
        }
    }
    let memory = summary
        .events
        .staleness
        .iter()
        .chain(&summary.events.castling_since_lost)
        .chain(&summary.events.promoted_identity);
    for bin in memory {
        assert!(bin.rate.value.is_none_or(|v| v == 1.0), "{}", bin.name);
    }
    assert_eq!(summary.events.castling_since_lost.len(), 6);
    assert_eq!(summary.events.promoted_identity.len(), 4);
    assert_eq!(summary.mass.median_true_mass, Some(1.0));
    assert_eq!(summary.mass.auroc_min_p_max, None, "no errors to detect");
    assert_eq!(
        summary.mass.sampled, None,
        "the fixture has no sampled masses"
    );
}

/// Two JSON values are equal but for floats a few ulps apart.
fn assert_json_close(a: &serde_json::Value, b: &serde_json::Value, path: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                "{path}: {x} vs {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{path}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_json_close(x, y, &format!("{path}.{i}"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.len(), y.len(), "{path}");
            for (key, x) in x {
                assert_json_close(x, &y[key], &format!("{path}.{key}"));
            }
        }
        _ => assert_eq!(a, b, "{path}"),
    }
}

/// True states over all sample games, under both conventions: every measure is perfect, the
/// summary reads back and holds no NaN, every step reaches tier 6 in the table.
#[test]
fn diagnose_true_states_score_perfectly_under_both_conventions() {
    for ep in EpConvention::ALL {
        let scratch = Scratch::new(&format!("perfect-{}", ep.name()));
        let games = sample_games(ep, usize::MAX);
        assert!(games.len() > 400, "{} games", games.len());
        let summary = run(&scratch.0, &games, ep, &options(40, 2));
        assert_eq!(summary.ep_convention, ep.name());
        assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
        assert_perfect(&summary, &games);
        let scored = |bins: &[NamedRate]| bins.iter().map(|b| b.rate.n).sum::<u64>();
        let lost = scored(&summary.events.castling_since_lost);
        let promoted = scored(&summary.events.promoted_identity);
        assert!(
            lost > 0 && promoted > 0,
            "rights lost {lost}, promoted {promoted}"
        );
        let tags: BTreeMap<&str, u64> = summary
            .events
            .tags
            .iter()
            .map(|t| (t.tag.as_str(), t.n))
            .collect();
        for common in [
            "capture",
            "check",
            "castle_k_white",
            "double_push",
            "halfmove_reset",
        ] {
            assert!(tags[common] > 0, "{common}: {tags:?}");
        }
        let path = scratch.0.join("out").join(SUMMARY_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains("NaN") && !text.contains("inf"),
            "no NaN in JSON"
        );
        let back: DiagnoseSummary = cwm_formats::read_json(&path).unwrap();
        // serde_json parses floats to within an ulp: compare with a tolerance.
        assert_json_close(
            &serde_json::to_value(&back).unwrap(),
            &serde_json::to_value(&summary).unwrap(),
            "",
        );
        assert_eq!((back.games, back.steps), (summary.games, summary.steps));
        let batches = steps_table(&scratch.0);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows as u64, summary.steps);
        for batch in &batches {
            let tier = batch
                .column_by_name("tier")
                .unwrap()
                .as_primitive::<UInt8Type>();
            assert!(tier.values().iter().all(|&t| t == 6));
            let flags = batch
                .column_by_name("flags")
                .unwrap()
                .as_primitive::<UInt32Type>();
            assert!(flags.values().iter().all(|&f| f == 0));
        }
    }
}

/// Spec §3 item 2: wrong only in the fullmove low byte → PositionExact 100%, ExactState 0%.
#[test]
fn diagnose_a_wrong_fullmove_low_byte_is_position_exact_and_never_exact() {
    let scratch = Scratch::new("fullmove");
    let mut games = sample_games(EpConvention::Reference, 20);
    for game in &mut games {
        for pred in &mut game.pred {
            pred[74] = pred[74].wrapping_add(1);
        }
    }
    let summary = run(
        &scratch.0,
        &games,
        EpConvention::Reference,
        &options(100, 1),
    );
    let fields = &summary.fields;
    assert_eq!(value(&fields.position_exact), 1.0);
    assert_eq!(value(&fields.exact_state), 0.0);
    assert_eq!(value(&fields.counter_only_error_share), 1.0);
    assert_eq!(value(&fields.fullmove), 0.0);
    assert_eq!(value(&fields.placement), 1.0);
    // The legal moves are the truth's, and V1 holds: every error is plausible and silent.
    assert_eq!(value(&summary.affordance.iou.strict), 1.0);
    assert_eq!(value(&summary.affordance.silent_error_share), 1.0);
    assert_eq!(value(&summary.validity.plausible_error_share), 1.0);
    assert_eq!(
        value(&summary.validity.tiers[3]),
        0.0,
        "V3 fails everywhere"
    );
    // The belief is off by one at every step but moves by the rules: I5 holds and every
    // transition is consistent, from a wrong state too.
    let i5 = &summary.dynamics.invariants[4];
    assert_eq!(i5.violations.num, 0.0, "{i5:?}");
    assert_eq!(value(&summary.dynamics.tc_given_prev_wrong), 1.0);
    assert_eq!(summary.events.first_errors.n, games.len() as u64);
    let groups = &summary.events.first_errors.groups_wrong;
    assert_eq!(groups[5].name, "fullmove");
    assert_eq!(groups[5].rate.value, Some(1.0));
    assert_eq!(groups[0].rate.value, Some(0.0));
    let rate = &fields.exact_state;
    assert_eq!(
        (rate.lo, rate.hi),
        (Some(0.0), Some(0.0)),
        "a degenerate interval"
    );
}

/// The rows of `steps.parquet` of one column as booleans (nulls as `None`).
fn bools(batches: &[RecordBatch], name: &str) -> Vec<Option<bool>> {
    batches
        .iter()
        .flat_map(|b| {
            let column: &BooleanArray = b.column_by_name(name).unwrap().as_boolean();
            column.iter().collect::<Vec<_>>()
        })
        .collect()
}

fn floats(batches: &[RecordBatch], name: &str) -> Vec<Option<f32>> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b
                .column_by_name(name)
                .unwrap()
                .as_primitive::<Float32Type>();
            column.iter().collect::<Vec<_>>()
        })
        .collect()
}

fn bytes(batches: &[RecordBatch], name: &str) -> Vec<u8> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column_by_name(name).unwrap().as_primitive::<UInt8Type>();
            column.values().to_vec()
        })
        .collect()
}

/// Spec §3 items 2 and 5: a phantom white knight on an empty square (e5, at the start of the
/// first game) is one phantom among the pieces + 1 predicted, no omission; its legal moves
/// keep every true move (recall 1) and add its own (precision < 1); its vanishing at the next
/// step is an I7 violation.
#[test]
fn diagnose_a_phantom_knight_is_a_phantom_with_recall_one() {
    let scratch = Scratch::new("phantom");
    let mut games = sample_games(EpConvention::Reference, 3);
    assert_eq!(games[0].pred[0][28], 0, "e5 is empty at the start");
    games[0].pred[0][28] = 2;
    let summary = run(&scratch.0, &games, EpConvention::Reference, &options(50, 1));
    let pieces: usize = games
        .iter()
        .flat_map(|g| &g.target)
        .map(|s| s[..64].iter().filter(|&&l| l != 0).count())
        .sum();
    let fields = &summary.fields;
    assert_eq!(
        (fields.phantom_rate.num, fields.phantom_rate.n),
        (1.0, pieces as u64 + 1)
    );
    assert_eq!(value(&fields.phantom_rate), 1.0 / (pieces as f64 + 1.0));
    assert_eq!(fields.omission_rate.num, 0.0);
    assert_eq!(fields.misidentification_rate.num, 0.0);
    assert_eq!(fields.confusion[0][2], 1);
    let affordance = &summary.affordance;
    assert_eq!(value(&affordance.recall.strict), 1.0);
    assert!(value(&affordance.precision.strict) < 1.0);
    assert_eq!(value(&affordance.coverage), 1.0);
    let batches = steps_table(&scratch.0);
    assert_eq!(floats(&batches, "recall")[0], Some(1.0));
    let precision = floats(&batches, "precision")[0].unwrap();
    assert!(
        (f64::from(precision) - 20.0 / 28.0).abs() < 1e-6,
        "{precision}"
    );
    assert_eq!(bools(&batches, "legal_exact")[0], Some(false));
    assert_eq!(bools(&batches, "first_error")[0], Some(true));
    let violations: Vec<f64> = summary
        .dynamics
        .invariants
        .iter()
        .map(|i| i.violations.num)
        .collect();
    assert_eq!(violations, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
    assert_eq!(bytes(&batches, "invariants")[1], 1 << 6);
    assert_eq!(summary.dynamics.error_runs.runs, 1);
    assert_eq!(value(&summary.dynamics.recovery_rate), 1.0);
}

/// Spec §3 item 5: a castling right dropped at one step and restored at the next counts
/// exactly one I1 violation, at the step that restores it.
#[test]
fn diagnose_a_castling_right_dropped_then_restored_is_one_i1_violation() {
    let scratch = Scratch::new("castling");
    let mut games = sample_games(EpConvention::Reference, 3);
    let game = &games[0];
    let t = (1..game.target.len() - 1)
        .find(|&t| game.target[t][65] == 1 && game.target[t + 1][65] == 1)
        .expect("White keeps K for two plies");
    games[0].pred[t][65] = 0;
    let summary = run(&scratch.0, &games, EpConvention::Reference, &options(50, 1));
    let i1 = &summary.dynamics.invariants[0];
    assert_eq!(i1.id, "I1");
    assert_eq!(i1.violations.num, 1.0);
    assert_eq!(i1.violations.scale, 1000);
    let steps: usize = games.iter().map(|g| g.tokens.len()).sum();
    let plies = steps - games.len();
    assert_eq!(i1.violations.n, plies as u64);
    assert_eq!(value(&i1.violations), 1000.0 / plies as f64);
    let others: f64 = summary.dynamics.invariants[1..]
        .iter()
        .map(|i| i.violations.num)
        .sum();
    assert_eq!(others, 0.0);
    let invariants = bytes(&steps_table(&scratch.0), "invariants");
    assert_eq!(invariants[t], 0);
    assert_eq!(invariants[t + 1], 1);
    // The wrong step breaks the transition into it and out of it; V1 holds, so the error is
    // plausible.
    let tc = &summary.dynamics.transition_consistent;
    assert_eq!(tc.num, (plies - 2) as f64);
    assert_eq!(value(&summary.validity.plausible_error_share), 1.0);
    assert_eq!(
        value(&summary.fields.castling),
        (steps - 1) as f64 / steps as f64
    );
}

/// Spec §3 item 5: a prediction without the black king is not playable: it lowers coverage,
/// scores 0 in the strict means (the defined-only means leave it out) and affords nothing.
#[test]
fn diagnose_an_unplayable_prediction_lowers_coverage() {
    let scratch = Scratch::new("unplayable");
    let mut games = sample_games(EpConvention::Reference, 3);
    let t = 5;
    let king = games[0].target[t][..64]
        .iter()
        .position(|&l| l == 12)
        .unwrap();
    games[0].pred[t][king] = 0;
    let summary = run(&scratch.0, &games, EpConvention::Reference, &options(50, 1));
    let steps: usize = games.iter().map(|g| g.tokens.len()).sum();
    let a = &summary.affordance;
    assert_eq!(
        (a.coverage.num, a.coverage.n),
        ((steps - 1) as f64, steps as u64)
    );
    for (name, both) in [("iou", &a.iou), ("legal_set_exact", &a.legal_set_exact)] {
        assert_eq!(
            value(&both.strict),
            (steps - 1) as f64 / steps as f64,
            "{name}"
        );
        assert_eq!(value(&both.defined), 1.0, "{name}");
        assert_eq!(both.defined.n, (steps - 1) as u64, "{name}");
    }
    let batches = steps_table(&scratch.0);
    assert_eq!(bools(&batches, "playable")[t], Some(false));
    assert_eq!(floats(&batches, "iou")[t], None);
    assert_eq!(bools(&batches, "legal_exact")[t], None);
    assert_eq!(bools(&batches, "next_afforded")[t], Some(false));
    assert_eq!(bools(&batches, "transition_consistent")[t + 1], Some(false));
    let no_black_king = summary
        .validity
        .flags
        .iter()
        .find(|f| f.name == "no_black_king")
        .unwrap();
    assert_eq!(no_black_king.rate.num, 1.0);
    assert_eq!(summary.validity.games_with_v1_failure.num, 1.0);
    assert_eq!(summary.validity.games_with_v1_failure.n, 3);
    assert_eq!(value(&summary.validity.plausible_error_share), 0.0);
}

/// A deterministic stream of small numbers.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Changes about `percent`% of the predicted states in one or two labels each (to another
/// class of the same label).
fn perturb(games: &mut [Game], percent: u64, seed: u64) {
    let mut rng = Lcg(seed);
    for game in games {
        for pred in &mut game.pred {
            if rng.below(100) >= percent {
                continue;
            }
            for _ in 0..=rng.below(2) {
                let j = rng.below(STATE_LEN as u64) as usize;
                let classes = u64::from(cwm_chess::encode::LABEL_CLASSES[j]);
                let shift = 1 + rng.below(classes - 1);
                pred[j] = ((u64::from(pred[j]) + shift) % classes) as u8;
            }
        }
    }
}

/// The group counts of evaluate's `timesteps.parquet`, computed here label by label.
fn timestep_counts(pred: &StateLabels, target: &StateLabels) -> [u8; 6] {
    let right =
        |range: std::ops::Range<usize>| range.filter(|&j| pred[j] == target[j]).count() as u8;
    [
        right(0..64),
        right(64..65),
        right(65..69),
        right(69..71),
        right(71..73),
        right(73..75),
    ]
}

/// Spec §3 item 2: the field columns recomputed from the predictions equal those the group
/// counts of an evaluate `timesteps.parquet` give, step by step and in the summary.
#[test]
fn diagnose_field_columns_equal_the_evaluate_group_counts() {
    let scratch = Scratch::new("fields");
    let mut games = sample_games(EpConvention::LegalCapture, 30);
    perturb(&mut games, 30, 11);
    let summary = run(
        &scratch.0,
        &games,
        EpConvention::LegalCapture,
        &options(50, 2),
    );
    let full = [64u8, 1, 4, 2, 2, 2];
    let mut exact_counts = [0u64; 6];
    let mut expected_bits = Vec::new();
    for game in &games {
        for (pred, target) in game.pred.iter().zip(&game.target) {
            let counts = timestep_counts(pred, target);
            let ours = group_counts(pred, target);
            assert_eq!(
                [
                    ours.board,
                    u8::from(ours.side),
                    ours.castling,
                    ours.en_passant,
                    ours.halfmove,
                    ours.fullmove
                ],
                counts
            );
            let mut bits = 0u8;
            for f in 0..6 {
                if counts[f] == full[f] {
                    exact_counts[f] += 1;
                    bits |= 1 << f;
                }
            }
            expected_bits.push(bits);
        }
    }
    let f = &summary.fields;
    let ours = [
        &f.placement,
        &f.side,
        &f.castling,
        &f.en_passant,
        &f.halfmove,
        &f.fullmove,
    ];
    for (rate, expected) in ours.iter().zip(exact_counts) {
        assert_eq!(rate.num, expected as f64);
        assert_eq!(rate.n, expected_bits.len() as u64);
    }
    assert!(exact_counts.iter().any(|&c| c < expected_bits.len() as u64));
    assert_eq!(bytes(&steps_table(&scratch.0), "fields"), expected_bits);
}

/// A game with an illegal token and a game whose true labels are not its moves' states are
/// counted and skipped with their ids; the other games are measured.
#[test]
fn diagnose_skips_games_the_rules_engine_refuses() {
    let scratch = Scratch::new("skipped");
    let mut games = sample_games(EpConvention::Reference, 4);
    games[1].tokens[3] = games[1].tokens[2];
    games[2].target[4][64] ^= 1;
    games[2].pred[4][64] ^= 1;
    let summary = run(&scratch.0, &games, EpConvention::Reference, &options(20, 2));
    let skipped: Vec<(&str, &str)> = summary
        .skipped
        .iter()
        .map(|s| (s.game_id.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0].0, games[1].id);
    assert!(skipped[0].1.contains("step 3"), "{}", skipped[0].1);
    assert_eq!(skipped[1].0, games[2].id);
    assert!(skipped[1].1.contains("step 4"), "{}", skipped[1].1);
    assert_eq!(summary.games, 2);
    let kept = [&games[0], &games[3]];
    assert_perfect(&summary, &kept.map(Clone::clone));
}

fn artifact(path: &Path, kind: &str, hash: &str) -> Vec<InputArtifact> {
    vec![InputArtifact {
        producer: kind.into(),
        producer_kind: kind.into(),
        producer_params: Params::new(),
        output: "out".into(),
        hash: hash.into(),
        path: path.to_path_buf(),
    }]
}

/// The stage through its `StageKind::run` with a real context: both files are written, the
/// summary reads back through cwm-formats with the labels of the evaluate artifact, and the
/// `long_game` param tags the steps beyond it.
#[test]
fn diagnose_runs_as_a_stage_and_writes_both_files() {
    let scratch = Scratch::new("stage");
    let mut games = sample_games(EpConvention::Reference, 12);
    perturb(&mut games, 5, 3);
    let evaluate = scratch.0.join("eval");
    write_evaluate(&evaluate, &games, Some(EpConvention::Reference));
    let mut params = Params::new();
    for (name, value) in [
        ("bin", 20),
        ("bootstrap", 50),
        ("seed", 7),
        ("long_game_ply", 40),
        ("threads", 2),
    ] {
        params.insert(name, ParamValue::Int(value));
    }
    let out = scratch.0.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let log = scratch.0.join("log.txt");
    let ctx = StageContext::new(
        "diagnose",
        params,
        BTreeMap::from([(
            "evaluate".to_owned(),
            artifact(&evaluate, "evaluate", "h-eval"),
        )]),
        BTreeMap::from([("out".to_owned(), out.clone())]),
        scratch.0.clone(),
        2,
        Progress::disabled(),
        StageLog::to_file(File::create(&log).unwrap()),
        Default::default(),
    );
    DiagnoseStage.run(&ctx).expect("the stage runs");
    drop(ctx);
    let summary: DiagnoseSummary = cwm_formats::read_json(&out.join(SUMMARY_FILE)).unwrap();
    assert_eq!(summary.evaluate_hash.as_deref(), Some("h-eval"));
    assert_eq!(summary.model_hash.as_deref(), Some("model"));
    assert_eq!(
        (summary.split.as_str(), summary.arch.as_str()),
        ("test_real", "transformer")
    );
    assert_eq!((summary.bootstrap, summary.seed), (50, 7));
    assert_eq!(summary.events.long_game_ply, Some(40));
    let steps: usize = games.iter().map(|g| g.tokens.len()).sum();
    let long_steps = games
        .iter()
        .map(|g| g.tokens.len().saturating_sub(41))
        .sum::<usize>();
    let long = summary
        .events
        .tags
        .iter()
        .find(|t| t.tag == "long_game")
        .unwrap();
    assert_eq!(long.n, long_steps as u64);
    assert!(long.n > 0);
    let exact = games
        .iter()
        .flat_map(|g| g.pred.iter().zip(&g.target))
        .filter(|(p, t)| p == t)
        .count();
    assert_eq!(summary.fields.exact_state.num, exact as f64);
    assert!(exact < steps);
    let rows: usize = steps_table(&scratch.0)
        .iter()
        .map(RecordBatch::num_rows)
        .sum();
    assert_eq!(rows, steps);
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("12 games (0 skipped)"), "{log}");
    match DiagnoseStage.inputs() {
        cwm_stage::InputsDecl::Named([evaluate, novelty]) => {
            assert!(evaluate.name == "evaluate" && !evaluate.optional);
            assert!(novelty.name == "novelty" && novelty.optional && !novelty.many);
        }
        other => panic!("inputs {other:?}"),
    }
}

/// Outputs are identical for every thread count, byte for byte.
#[test]
fn diagnose_results_do_not_depend_on_the_thread_count() {
    let scratch = Scratch::new("threads");
    let mut games = sample_games(EpConvention::Reference, 40);
    perturb(&mut games, 10, 5);
    let one = run(
        &scratch.0.join("one"),
        &games,
        EpConvention::Reference,
        &options(200, 1),
    );
    let three = run(
        &scratch.0.join("three"),
        &games,
        EpConvention::Reference,
        &options(200, 3),
    );
    assert_eq!(one, three);
    let table =
        |dir: &str| std::fs::read(scratch.0.join(dir).join("out").join(STEPS_FILE)).unwrap();
    assert_eq!(table("one"), table("three"));
    assert!(one.fields.exact_state.lo.is_some());
}

/// Predictions without the convention in their metadata fail, naming the file and the key.
#[test]
fn diagnose_needs_the_ep_convention_of_the_predictions() {
    let scratch = Scratch::new("no-ep");
    let games = sample_games(EpConvention::Reference, 2);
    let evaluate = scratch.0.join("eval");
    write_evaluate(&evaluate, &games, None);
    let inputs = DiagnoseInputs {
        evaluate: &evaluate,
        novelty: None,
    };
    let err = diagnose(
        inputs,
        &scratch.0.join("out"),
        &options(0, 1),
        &Progress::disabled(),
        &|| false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(PREDICTIONS_FILE) && err.contains(EP_CONVENTION_KEY),
        "{err}"
    );
}

/// Diagnoses the fixture of `games` with `masses` in `dir`, returning the summary or the
/// error's message.
fn diagnose_masses(dir: &Path, games: &[Game], masses: &Masses) -> Result<DiagnoseSummary, String> {
    let evaluate = dir.join("eval");
    write_evaluate_with(
        &evaluate,
        games,
        Some(EpConvention::Reference),
        Some(masses),
    );
    let inputs = DiagnoseInputs {
        evaluate: &evaluate,
        novelty: None,
    };
    let out = dir.join("out");
    diagnose(inputs, &out, &options(0, 1), &Progress::disabled(), &|| {
        false
    })
    .map_err(|e| e.to_string())
}

/// E12's sampled masses are read from the predictions and averaged over the steps that
/// have them: every third step sampled, the afford mass null at each game's last step.
#[test]
fn diagnose_averages_the_sampled_masses_of_the_predictions() {
    let scratch = Scratch::new("masses");
    let games = sample_games(EpConvention::Reference, 3);
    let mut per_step = Vec::new();
    let (mut valid_sum, mut valid_n, mut afford_sum, mut afford_n) = (0.0f64, 0u64, 0.0f64, 0u64);
    for game in &games {
        for t in 0..game.tokens.len() {
            if t % 3 != 0 {
                per_step.push((None, None));
                continue;
            }
            let valid = [0.25f32, 0.5, 1.0][t % 9 / 3];
            let last = t + 1 == game.tokens.len();
            let afford = (!last).then_some(valid / 2.0);
            valid_sum += f64::from(valid);
            valid_n += 1;
            if let Some(a) = afford {
                afford_sum += f64::from(a);
                afford_n += 1;
            }
            per_step.push((Some(valid), afford));
        }
    }
    let masses = Masses {
        per_step,
        samples: Some("64".into()),
    };
    let summary = diagnose_masses(&scratch.0, &games, &masses).expect("diagnose");
    let sampled = summary.mass.sampled.expect("sampled masses");
    assert_eq!((sampled.samples, sampled.steps), (64, valid_n));
    assert_eq!(sampled.valid_mass.n, valid_n);
    assert!((sampled.valid_mass.num - valid_sum).abs() < 1e-9);
    assert_eq!(sampled.afford_mass.n, afford_n);
    assert!((sampled.afford_mass.value.unwrap() - afford_sum / afford_n as f64).abs() < 1e-12);
    assert_eq!(sampled.valid_mass_histogram.iter().sum::<u64>(), valid_n);
    let in_bins = [5, 10, 19].map(|b| sampled.valid_mass_histogram[b]);
    assert_eq!(
        in_bins.iter().sum::<u64>(),
        valid_n,
        "0.25, 0.5 and 1.0 only"
    );
}

/// A mass outside 0..=1 names the game and the step; sampled masses without the number of
/// states in the metadata name the key.
#[test]
fn diagnose_refuses_malformed_sampled_masses() {
    let scratch = Scratch::new("bad-masses");
    let games = sample_games(EpConvention::Reference, 1);
    let n = games[0].tokens.len();
    let mut per_step = vec![(Some(0.5), Some(0.5)); n];
    per_step[4] = (Some(1.5), Some(0.5));
    let bad_value = Masses {
        per_step: per_step.clone(),
        samples: Some("64".into()),
    };
    let err = diagnose_masses(&scratch.0.join("value"), &games, &bad_value).unwrap_err();
    assert!(
        err.contains("valid_mass") && err.contains("1.5") && err.contains(&games[0].id),
        "{err}"
    );
    assert!(err.contains('4'), "the step: {err}");
    per_step[4] = (Some(0.5), Some(0.5));
    for samples in [None, Some("0".to_owned()), Some("many".to_owned())] {
        let masses = Masses {
            per_step: per_step.clone(),
            samples: samples.clone(),
        };
        let err = diagnose_masses(&scratch.0.join("key"), &games, &masses).unwrap_err();
        assert!(err.contains(MASS_SAMPLES_KEY), "{samples:?}: {err}");
    }
}

/// All sample games with about 3% and about 50% of the states wrong, timed (run with
/// `--release --nocapture` for the figures): the error counts match the fixture's.
#[test]
fn diagnose_all_sample_games_timed() {
    let scratch = Scratch::new("timed");
    for (percent, threads, bootstrap) in [(3, 1, 1000), (3, 1, 0), (3, 2, 1000), (50, 1, 1000)] {
        let mut games = sample_games(EpConvention::Reference, usize::MAX);
        perturb(&mut games, percent, 17);
        let evaluate = scratch.0.join(format!("eval-{percent}"));
        write_evaluate(&evaluate, &games, Some(EpConvention::Reference));
        let steps: usize = games.iter().map(|g| g.tokens.len()).sum();
        let start = Instant::now();
        let inputs = DiagnoseInputs {
            evaluate: &evaluate,
            novelty: None,
        };
        let out = scratch
            .0
            .join(format!("out-{percent}-{threads}-{bootstrap}"));
        let summary = diagnose(
            inputs,
            &out,
            &options(bootstrap, threads),
            &Progress::disabled(),
            &|| false,
        )
        .unwrap();
        let elapsed = start.elapsed();
        eprintln!(
            "diagnose: {} games, {steps} steps, {percent}% perturbed, {threads} thread(s), \
             {bootstrap} resamples: {:.3} s ({:.1} µs per step)",
            summary.games,
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / steps as f64
        );
        let wrong = games
            .iter()
            .flat_map(|g| g.pred.iter().zip(&g.target))
            .filter(|(p, t)| p != t)
            .count();
        assert_eq!(summary.fields.exact_state.num, (steps - wrong) as f64);
        assert_eq!(summary.steps, steps as u64);
        let auroc = summary.mass.auroc_min_p_max.unwrap();
        assert_eq!(
            auroc, 1.0,
            "p_max of label 0 is 0.5 exactly at the wrong steps"
        );
    }
}

/// Tokenized shards of the first `games` sample games (the evaluate stage's input).
fn sample_shards(dir: &Path, games: u64) -> PathBuf {
    let pgn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/lichess_db_1000k.pgn.zst");
    let games_dir = dir.join("games");
    cwm_stage_data::process_pgn(&cwm_stage_data::ProcessOptions {
        pgn,
        out_dir: games_dir.clone(),
        format: cwm_stage_data::OutputFormat::Parquet,
        max_games: games,
        threads: 1,
        id_key: cwm_stage_data::IdKeySource::resolve(Some("test-key")),
        ..cwm_stage_data::ProcessOptions::default()
    })
    .unwrap();
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    let options = cwm_stage_data::TokenizeOptions {
        shard_games: 7,
        ..cwm_stage_data::TokenizeOptions::default()
    };
    cwm_stage_data::tokenize_games(
        &games_dir,
        &tokens,
        &options,
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    tokens
}

/// With a novelty input (here the test split against itself), the summary carries the E7
/// metrics of the novelty stage's join, and `long_game_ply` 0 takes the training split's 99th
/// percentile of game lengths.
#[test]
fn diagnose_joins_a_novelty_artifact() {
    let scratch = Scratch::new("novelty");
    let tokens = sample_shards(&scratch.0, 25);
    let mut games: Vec<Game> = cwm_stage_data::ShardReader::open(&tokens, 8)
        .unwrap()
        .map(|game| {
            let game = game.unwrap();
            let states: Vec<StateLabels> = game
                .states
                .chunks_exact(STATE_LEN)
                .map(|s| s.try_into().unwrap())
                .collect();
            Game {
                id: game.id,
                tokens: game.moves,
                target: states.clone(),
                pred: states,
            }
        })
        .collect();
    perturb(&mut games, 10, 23);
    let novelty_dir = scratch.0.join("novelty");
    let novelty = cwm_stage_diagnose::novelty(
        &tokens,
        &tokens,
        &novelty_dir,
        &cwm_stage_diagnose::NoveltyOptions::default(),
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    let evaluate = scratch.0.join("eval");
    write_evaluate(&evaluate, &games, Some(EpConvention::Reference));
    let inputs = DiagnoseInputs {
        evaluate: &evaluate,
        novelty: Some(&novelty_dir),
    };
    let summary = diagnose(
        inputs,
        &scratch.0.join("out"),
        &options(20, 1),
        &Progress::disabled(),
        &|| false,
    )
    .unwrap();
    assert_eq!(summary.events.long_game_ply, Some(novelty.train_length_p99));
    assert!(novelty.train_length_p99 > 0);
    let metrics = summary.novelty.expect("E7 metrics");
    assert_eq!(metrics.steps, summary.steps);
    assert_eq!(metrics.games, summary.games);
    assert_eq!(
        metrics.prefix_seen_share,
        Some(1.0),
        "the split against itself"
    );
    let long = summary
        .events
        .tags
        .iter()
        .find(|t| t.tag == "long_game")
        .unwrap();
    let beyond = games
        .iter()
        .map(|g| {
            g.tokens
                .len()
                .saturating_sub(novelty.train_length_p99 as usize + 1)
        })
        .sum::<usize>();
    assert_eq!(long.n, beyond as u64);
}

/// Malformed predictions fail with the file, the game and the step: a game whose rows are
/// split by another game, a label out of range.
#[test]
fn diagnose_names_the_game_and_step_of_malformed_rows() {
    let scratch = Scratch::new("malformed");
    let games = sample_games(EpConvention::Reference, 3);
    let attempt = |games: &[Game], name: &str| {
        let evaluate = scratch.0.join(name);
        write_evaluate(&evaluate, games, Some(EpConvention::Reference));
        let inputs = DiagnoseInputs {
            evaluate: &evaluate,
            novelty: None,
        };
        let out = scratch.0.join(format!("{name}-out"));
        diagnose(inputs, &out, &options(0, 1), &Progress::disabled(), &|| {
            false
        })
        .unwrap_err()
        .to_string()
    };
    let mut split = games.clone();
    split[2].id = split[0].id.clone();
    let err = attempt(&split, "split");
    assert!(err.contains(PREDICTIONS_FILE), "{err}");
    assert!(
        err.contains(&format!("game {}, step 0", games[0].id)),
        "{err}"
    );
    assert!(err.contains("not contiguous"), "{err}");

    let mut out_of_range = games.clone();
    out_of_range[1].pred[7][10] = 13;
    let err = attempt(&out_of_range, "range");
    assert!(
        err.contains(&format!("game {}, step 7", games[1].id)),
        "{err}"
    );
    assert!(err.contains("`pred` label 10 is 13"), "{err}");
}

/// What the stage relies on to skip move generation at exact steps: the rules' transition of
/// a true state is the next true state, for every ply of the sample under both conventions
/// (so TransitionConsistent after an exact step is that step's ExactState).
#[test]
fn diagnose_the_transition_of_a_true_state_is_the_next_true_state() {
    for ep in EpConvention::ALL {
        let mut plies = 0;
        for game in sample_games(ep, usize::MAX) {
            for t in 1..game.tokens.len() {
                let next = cwm_chess::rules::play_labels(&game.target[t - 1], game.tokens[t], ep);
                assert_eq!(next.as_ref(), Some(&game.target[t]), "{} step {t}", game.id);
                plies += 1;
            }
        }
        assert!(plies > 20_000, "{plies}");
    }
}
