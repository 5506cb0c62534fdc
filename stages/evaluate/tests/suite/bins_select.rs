//! `bin_prefix` on a hand-made `timesteps.parquet` with known answers, and `select` on
//! hand-made train summaries.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, RecordBatch, StringArray, UInt8Array,
    UInt32Array, UInt64Array,
};
use cwm_formats::train::{
    Hparams, ModelSection, ScheduleKind, TrainConfig, TrainSummary, ValMetrics,
};
use cwm_stage_evaluate::tables::timesteps_schema;
use cwm_stage_evaluate::{
    Metric, PrefixBin, RankPick, RunInput, SelectRule, bin_prefix, prefix_bins, select_runs,
};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::json;

use crate::Scratch;

/// Writes a timesteps table of (game, t, n_correct) rows, in two row groups.
fn write_timesteps(path: &Path, rows: &[(&str, u32, u8)]) {
    let file = File::create(path).unwrap();
    let schema = timesteps_schema();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), None).unwrap();
    for chunk in rows.chunks(rows.len().div_ceil(2)) {
        let u8s = |v: u8| -> ArrayRef { Arc::new(UInt8Array::from(vec![v; chunk.len()])) };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(chunk.iter().map(|r| r.0))),
            Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|r| r.1))),
            Arc::new(UInt8Array::from_iter_values(chunk.iter().map(|r| r.2))),
            u8s(0),
            Arc::new(BooleanArray::from(vec![false; chunk.len()])),
            u8s(0),
            u8s(0),
            u8s(0),
            u8s(0),
            Arc::new(BooleanArray::from_iter(
                chunk.iter().map(|r| Some(r.2 == 75)),
            )),
            Arc::new(Float32Array::from(vec![0.5; chunk.len()])),
        ];
        writer
            .write(&RecordBatch::try_new(schema.clone(), columns).unwrap())
            .unwrap();
        writer.flush().unwrap();
    }
    writer.close().unwrap();
}

/// Game a: t 0..15, exact for t < 5 then 60 correct; game b: t 0..4, all exact; game c: only
/// t 30 and 31 (a filtered table), nothing correct.
fn hand_rows() -> Vec<(&'static str, u32, u8)> {
    let mut rows = Vec::new();
    for t in 0..15 {
        rows.push(("a", t, if t < 5 { 75 } else { 60 }));
    }
    for t in 0..4 {
        rows.push(("b", t, 75));
    }
    rows.push(("c", 30, 0));
    rows.push(("c", 31, 0));
    rows
}

fn bin(bin: u32, start: u32, end: u32, steps: u64, exact: f64, labelwise: f64) -> PrefixBin {
    PrefixBin {
        bin,
        start,
        end,
        steps,
        exact_state: exact,
        labelwise,
    }
}

#[test]
fn prefix_bins_have_the_known_answers() {
    let scratch = Scratch::new("hand");
    let path = scratch.0.join("timesteps.parquet");
    write_timesteps(&path, &hand_rows());

    // Width 10: bin 0 = a 0..10 (5 exact at 75, 5 at 60) + b (4 at 75); bin 1 = a 10..15, the
    // last partial bin of a; bin 2 is empty and absent; bin 3 = c.
    let got = prefix_bins(&path, 10).unwrap();
    let want = vec![
        bin(0, 0, 10, 14, 9.0 / 14.0, 13.0 / 14.0),
        bin(1, 10, 20, 5, 0.0, 0.8),
        bin(3, 30, 40, 2, 0.0, 0.0),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            (g.bin, g.start, g.end, g.steps),
            (w.bin, w.start, w.end, w.steps)
        );
        assert!(
            (g.exact_state - w.exact_state).abs() < 1e-12,
            "{g:?} vs {w:?}"
        );
        assert!((g.labelwise - w.labelwise).abs() < 1e-12, "{g:?} vs {w:?}");
    }

    // Width 20: bin 0 straddles a's end (all 15 of a and all 4 of b); bin 1 holds c.
    let got = prefix_bins(&path, 20).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].steps, got[1].steps), (19, 2));
    assert!((got[0].exact_state - 9.0 / 19.0).abs() < 1e-12);
    assert!((got[0].labelwise - 17.0 / 19.0).abs() < 1e-12);
    assert_eq!((got[1].bin, got[1].start, got[1].end), (1, 20, 40));

    // Width 1: one bin per distinct t.
    assert_eq!(prefix_bins(&path, 1).unwrap().len(), 17);
    assert!(prefix_bins(&path, 0).is_err());
    let missing = prefix_bins(&scratch.0.join("nope.parquet"), 20).unwrap_err();
    assert!(missing.to_string().contains("nope.parquet"), "{missing}");
    std::fs::write(scratch.0.join("junk.parquet"), b"not parquet").unwrap();
    let junk = prefix_bins(&scratch.0.join("junk.parquet"), 20).unwrap_err();
    assert!(junk.to_string().contains("junk.parquet"), "{junk}");
}

#[test]
fn bin_prefix_writes_bins_parquet_and_a_summary_from_the_evaluate_artifact() {
    let scratch = Scratch::new("artifact");
    let eval = scratch.0.join("eval");
    std::fs::create_dir_all(&eval).unwrap();
    write_timesteps(&eval.join("timesteps.parquet"), &hand_rows());
    let summary = json!({
        "kind": "evaluate", "split": "test_random", "arch": "slice", "size": "d256",
        "params": 123, "model_hash": null, "data_hash": null, "games": 3, "steps": 21,
        "loss": 1.0, "labelwise": 0.5, "exact_state": 0.4, "trajectory": 0.0
    });
    std::fs::write(eval.join("summary.json"), summary.to_string()).unwrap();
    let out = scratch.0.join("out");
    let result = bin_prefix(&eval, &out, 10, Some("h1".into())).unwrap();
    assert_eq!(result.bins.len(), 3);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(written["kind"], "bin_prefix");
    assert_eq!(written["split"], "test_random");
    assert_eq!(written["arch"], "slice");
    assert_eq!(written["size"], "d256");
    assert_eq!(written["params"], 123);
    assert_eq!(written["bin"], 10);
    assert_eq!(written["evaluate_hash"], "h1");
    assert_eq!(written["bins"][1]["start"], 10);
    assert_eq!(written["bins"][1]["end"], 20);
    assert_eq!(written["bins"][2]["bin"], 3);

    let reader =
        ParquetRecordBatchReaderBuilder::try_new(File::open(out.join("bins.parquet")).unwrap())
            .unwrap()
            .build()
            .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    let batch = &batches[0];
    let bins = batch
        .column_by_name("bin")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt32Array>()
        .unwrap();
    let steps = batch
        .column_by_name("steps")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap();
    let labelwise = batch
        .column_by_name("labelwise")
        .unwrap()
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap();
    assert_eq!(bins.values().to_vec(), vec![0, 1, 3]);
    assert_eq!(steps.values().to_vec(), vec![14, 5, 2]);
    assert!((labelwise.value(1) - 0.8).abs() < 1e-12);

    // Not an evaluate artifact: the error names the file.
    std::fs::write(
        eval.join("summary.json"),
        json!({"kind": "train"}).to_string(),
    )
    .unwrap();
    let err = bin_prefix(&eval, &scratch.0.join("out2"), 10, None).unwrap_err();
    assert!(err.to_string().contains("summary.json"), "{err}");
}

fn train_run(root: &Path, name: &str, summary: serde_json::Value) -> RunInput {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    RunInput {
        instance: name.to_owned(),
        hash: format!("hash-{name}"),
        dir,
    }
}

fn val(loss: f64) -> Option<ValMetrics> {
    Some(ValMetrics {
        step: 100,
        loss,
        labelwise: 0.9,
        exact_state: 0.5 - loss / 10.0,
        trajectory: 0.1,
    })
}

/// A train summary as the train stage writes it.
fn summary(
    arch: &str,
    size: &str,
    lr: f64,
    best: Option<ValMetrics>,
    last: Option<ValMetrics>,
) -> serde_json::Value {
    let mut config = TrainConfig::new(ModelSection {
        arch: arch.into(),
        size: size.into(),
        dropout: 0.1,
        rope: "reference".into(),
        mamba3_mimo: false,
        precision: "f32".into(),
        attention: "operations".into(),
    });
    config.optimiser.lr = lr;
    config.optimiser.beta2 = 0.95;
    config.optimiser.weight_decay = 0.001;
    config.schedule.kind = ScheduleKind::Cosine;
    config.schedule.warmup_steps = 5000;
    config.data.batch_size = 128;
    let summary = TrainSummary {
        version: 1,
        kind: "train".into(),
        arch: arch.into(),
        size: size.into(),
        params: 1000,
        hparams: Hparams::new(config, Default::default()),
        steps: 100,
        optimizer_steps: 100,
        epochs_done: 1,
        tokens: 10_000,
        skipped_steps: 0,
        rolled_back_steps: 0,
        tokens_per_s: 100.0,
        wall_s: 100.0,
        final_val: last,
        best_val: best,
    };
    serde_json::to_value(summary).unwrap()
}

#[test]
fn select_picks_the_lowest_validation_loss_per_arch_and_size() {
    let scratch = Scratch::new("select");
    let root = &scratch.0;
    let runs = vec![
        train_run(
            root,
            "train[lr=0.001,slice,d128]",
            summary("slice", "d128", 1e-3, val(1.2), val(1.3)),
        ),
        train_run(
            root,
            "train[lr=0.003,slice,d128]",
            summary("slice", "d128", 3e-3, val(0.9), val(1.5)),
        ),
        train_run(
            root,
            "train[lr=0.001,slice,d256]",
            summary("slice", "d256", 1e-3, None, val(1.1)),
        ),
        train_run(
            root,
            "train[lr=0.001,transformer,d128]",
            summary("transformer", "d128", 1e-3, None, None),
        ),
    ];
    let group_by = vec!["arch".to_owned(), "size".to_owned()];

    let best = select_runs(&runs, &SelectRule::best(Metric::ValLoss, &group_by)).unwrap();
    assert_eq!(best.kind, "select");
    assert_eq!(best.metric, "val_loss");
    assert_eq!(best.candidates, 3);
    assert_eq!(
        best.skipped,
        vec!["train[lr=0.001,transformer,d128]".to_owned()]
    );
    let picked: Vec<(&str, &str, f64, f64)> = best
        .choices
        .iter()
        .map(|c| (c.arch.as_str(), c.size.as_str(), c.hparams.lr, c.val_loss))
        .collect();
    assert_eq!(
        picked,
        vec![("slice", "d128", 3e-3, 0.9), ("slice", "d256", 1e-3, 1.1)]
    );
    let first = &best.choices[0];
    assert_eq!(first.instance, "train[lr=0.003,slice,d128]");
    assert_eq!(first.train_hash, "hash-train[lr=0.003,slice,d128]");
    assert_eq!(
        (
            first.hparams.beta2,
            first.hparams.weight_decay,
            first.hparams.warmup_steps
        ),
        (0.95, 0.001, 5000)
    );
    assert!((first.exact_state.unwrap() - 0.41).abs() < 1e-12);

    // By the final validation only, the other slice d128 run wins.
    let last = select_runs(&runs, &SelectRule::best(Metric::FinalValLoss, &group_by)).unwrap();
    assert_eq!(last.choices[0].hparams.lr, 1e-3);
    assert_eq!(last.choices[0].val_loss, 1.3);

    // Grouped by arch only, one choice per family: the best slice run over both sizes.
    let by_arch = select_runs(
        &runs,
        &SelectRule::best(Metric::ValLoss, &["arch".to_owned()]),
    )
    .unwrap();
    assert_eq!(by_arch.choices.len(), 1);
    assert_eq!(by_arch.choices[0].val_loss, 0.9);

    // Ties go to the instance name that sorts first, whatever the input order.
    let tied = vec![
        train_run(root, "z", summary("gdn", "d128", 3e-3, val(1.0), val(1.0))),
        train_run(root, "a", summary("gdn", "d128", 1e-4, val(1.0), val(1.0))),
    ];
    let choice = &select_runs(&tied, &SelectRule::best(Metric::ValLoss, &group_by))
        .unwrap()
        .choices[0];
    assert_eq!(choice.instance, "a");

    // No candidate at all, or a summary that is not a train summary: errors naming the cause.
    assert!(select_runs(&runs[3..], &SelectRule::best(Metric::ValLoss, &group_by)).is_err());
    let other = train_run(root, "eval", json!({"kind": "evaluate"}));
    let err = select_runs(&[other], &SelectRule::best(Metric::ValLoss, &group_by)).unwrap_err();
    assert!(err.to_string().contains("summary.json"), "{err}");
}

/// The paper's exception: a named group keeps its k-th best run, recording the ones ranked
/// above it; other groups keep their best.
#[test]
fn ranks_keep_the_kth_best_of_named_groups_only() {
    let scratch = Scratch::new("select-ranks");
    let root = &scratch.0;
    let run = |name: &str, arch: &str, size: &str, loss: f64| {
        train_run(root, name, summary(arch, size, 1e-3, val(loss), val(loss)))
    };
    let runs = vec![
        run("s512-a", "slice", "d512", 0.7),
        run("s512-b", "slice", "d512", 0.5),
        run("s512-c", "slice", "d512", 0.6),
        run("t512-a", "transformer", "d512", 0.4),
        run("t512-b", "transformer", "d512", 0.3),
    ];
    let mut rule = SelectRule::best(Metric::ValLoss, &["arch".to_owned(), "size".to_owned()]);
    rule.ranks = vec!["slice/d512=2".parse().unwrap()];
    let selection = select_runs(&runs, &rule).unwrap();
    let picked: Vec<(&str, u32, &[String])> = selection
        .choices
        .iter()
        .map(|c| (c.instance.as_str(), c.rank, c.passed_over.as_slice()))
        .collect();
    assert_eq!(
        picked,
        vec![
            ("s512-c", 2, &["s512-b".to_owned()][..]),
            ("t512-b", 1, &[][..]),
        ]
    );

    rule.ranks = vec!["slice/d512=4".parse().unwrap()];
    let err = select_runs(&runs, &rule).unwrap_err().to_string();
    assert!(
        err.contains("run 4 of group slice/d512") && err.contains("3 candidate"),
        "{err}"
    );
    rule.ranks = vec!["slice/d256=2".parse().unwrap()];
    let err = select_runs(&runs, &rule).unwrap_err().to_string();
    assert!(
        err.contains("slice/d256") && err.contains("slice/d512, transformer/d512"),
        "{err}"
    );
    for bad in ["slice/d512", "slice/d512=0", "=2", "slice/d512=two"] {
        assert!(bad.parse::<RankPick>().is_err(), "{bad}");
    }
}

#[test]
fn a_timesteps_table_without_a_needed_column_is_an_error_naming_it() {
    let scratch = Scratch::new("no-exact");
    let path = scratch.0.join("timesteps.parquet");
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("t", arrow::datatypes::DataType::UInt32, false),
        arrow::datatypes::Field::new("n_correct", arrow::datatypes::DataType::UInt8, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(vec![0, 1, 2])),
        Arc::new(UInt8Array::from(vec![75, 75, 70])),
    ];
    let mut writer =
        ArrowWriter::try_new(File::create(&path).unwrap(), schema.clone(), None).unwrap();
    writer
        .write(&RecordBatch::try_new(schema, columns).unwrap())
        .unwrap();
    writer.close().unwrap();
    let err = prefix_bins(&path, 20).unwrap_err().to_string();
    assert!(err.contains("timesteps.parquet"), "{err}");
    assert!(err.contains("exact"), "{err}");
}
