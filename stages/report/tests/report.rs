//! The report over hand-written fixture artifacts: golden tables, matrices, absent tables,
//! figures, and malformed inputs.
//!
//! Golden files live in `tests/golden/`; regenerate them deliberately with
//! `CWM_BLESS=1 cargo test -p cwm-stage-report --test report` and review the diff.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use cwm_stage::{InputArtifact, ParamValue, Params, Progress};
use cwm_stage_report::{ReportError, ReportOptions, ReportSummary, build_report};
use serde_json::{Value, json};

/// A fresh empty directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "cwm-report-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds artifacts under one directory.
struct Fixtures {
    dir: TempDir,
    artifacts: Vec<InputArtifact>,
}

impl Fixtures {
    fn new(tag: &str) -> Self {
        Self {
            dir: TempDir::new(tag),
            artifacts: Vec::new(),
        }
    }

    /// Writes `files` into a new artifact of `kind` made by `producer`.
    fn add(
        &mut self,
        producer: &str,
        kind: &str,
        params: &[(&str, ParamValue)],
        files: &[(&str, String)],
    ) {
        let n = self.artifacts.len();
        let path = self.dir.0.join(format!("a{n}"));
        std::fs::create_dir_all(&path).unwrap();
        for (name, text) in files {
            std::fs::write(path.join(name), text).unwrap();
        }
        let mut producer_params = Params::new();
        for (k, v) in params {
            producer_params.insert(*k, v.clone());
        }
        self.artifacts.push(InputArtifact {
            producer: producer.to_owned(),
            producer_kind: kind.to_owned(),
            producer_params,
            output: "out".into(),
            hash: format!("{:064x}", 0xc0ffee_u64 * 1000 + n as u64),
            path,
        });
    }

    fn coverage(&mut self, producer: &str, games: u64, plies: u64, distinct: u64) {
        let text = json!({"games": games, "plies": plies, "distinct_move_ids": distinct,
            "move_ids": 20480, "coverage": distinct as f64 / 20480.0,
            "ep_convention": "python_chess", "shards": 1});
        self.add(
            producer,
            "tokenize",
            &[],
            &[("coverage.json", pretty(&text))],
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn train(
        &mut self,
        arch: &str,
        size: &str,
        params: u64,
        schedule: &str,
        lr: f64,
        warmup: u64,
        beta2: f64,
        wd: f64,
        floor: f64,
        val: Option<(f64, f64, f64, f64)>,
    ) {
        let metrics = val.map(|(loss, exact, labelwise, traj)| {
            json!({"step": 1000, "loss": loss, "labelwise": labelwise,
                   "exact_state": exact, "trajectory": traj})
        });
        let worse = val.map(|(loss, exact, labelwise, traj)| {
            json!({"step": 2000, "loss": loss + 0.01, "labelwise": labelwise,
                   "exact_state": exact, "trajectory": traj})
        });
        // The hparams the train stage records: every param (`schedule` as given, so that
        // `constant` from other producers is read too), and `threads`.
        let summary = json!({
            "kind": "train", "arch": arch, "size": size, "params": params,
            "hparams": {"arch": arch, "size": size, "dropout": 0.1, "rope": "reference",
                "mamba3_mimo": false, "lr": lr, "beta2": beta2, "weight_decay": wd,
                "grad_clip": 1.0, "steps": 2000, "epochs": 1, "schedule": schedule,
                "warmup_steps": warmup, "lr_decay_steps": 2000, "lr_min_ratio": floor,
                "val_every": 500, "log_every": 50, "checkpoint_every": 0, "batch_size": 128,
                "max_steps": 0, "val_batches": 10, "seed": 0, "threads": 2},
            "steps": 2000, "epochs_done": 1, "tokens": 1_000_000, "skipped_steps": 0,
            "tokens_per_s": 1234.5, "wall_s": 10.0,
            "final_val": worse, "best_val": metrics,
        });
        let producer = format!(
            "train_{schedule}[arch={arch},size={size},lr={lr},warmup_steps={warmup},beta2={beta2},weight_decay={wd},lr_min_ratio={floor}]"
        );
        self.add(
            &producer,
            "train",
            &[
                ("arch", ParamValue::Str(arch.into())),
                ("size", ParamValue::Str(size.into())),
            ],
            &[("summary.json", pretty(&summary))],
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &mut self,
        split: &str,
        arch: &str,
        size: &str,
        params: u64,
        loss: f64,
        exact: f64,
        labelwise: f64,
        traj: f64,
    ) {
        let summary = json!({"kind": "evaluate", "split": split, "arch": arch, "size": size,
            "params": params, "model_hash": "m", "data_hash": "d", "games": 100,
            "steps": 8000, "loss": loss, "labelwise": labelwise, "exact_state": exact,
            "trajectory": traj});
        self.add(
            &format!("evaluate_{split}[arch={arch},size={size}]"),
            "evaluate",
            &[],
            &[("summary.json", pretty(&summary))],
        );
    }

    fn bins(&mut self, split: &str, arch: &str, size: &str, params: u64, bins: &[(u64, f64)]) {
        let items: Vec<Value> = bins
            .iter()
            .enumerate()
            .map(|(k, &(steps, exact))| {
                json!({"bin": k, "start": 20 * k, "end": 20 * k + 20, "steps": steps,
                       "exact_state": exact, "labelwise": (1.0 + exact) / 2.0})
            })
            .collect();
        let summary = json!({"kind": "bin_prefix", "split": split, "arch": arch, "size": size,
            "params": params, "bin": 20, "evaluate_hash": "e", "bins": items});
        self.add(
            &format!("bins_{split}[arch={arch},size={size}]"),
            "bin_prefix",
            &[],
            &[("summary.json", pretty(&summary))],
        );
    }

    fn build(&self, out: &Path, options: &ReportOptions) -> Result<ReportSummary, ReportError> {
        build_report(
            &self.artifacts,
            out,
            options,
            &Progress::disabled(),
            &|| false,
        )
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap()
}

fn quick() -> ReportOptions {
    ReportOptions {
        param_counts: false,
        figures: false,
        ..ReportOptions::default()
    }
}

const T128: u64 = 3_128_150;
const S128: u64 = 3_144_662;
const SD128: u64 = 3_029_078;
const S256: u64 = 7_962_966;
const SD256: u64 = 7_041_878;

/// Every table kind: two coverage splits, a first-stage sweep, a cosine floor pair, select,
/// evaluations of an ablation pair on two splits, and prefix bins.
fn full_fixtures() -> Fixtures {
    let mut f = Fixtures::new("golden");
    f.coverage("tokenize_train", 438, 31_000, 1_402);
    f.coverage("tokenize_val", 50, 3_900, 733);
    first_stage_runs(&mut f);
    second_stage_runs(&mut f);
    for (split, shift) in [("test_real", 0.0), ("test_random", 0.2)] {
        evaluations(&mut f, split, shift);
    }
    f
}

/// The first-stage sweep: two transformer configs (the second wins), one slice config and a
/// slice run without results.
fn first_stage_runs(f: &mut Fixtures) {
    f.train(
        "transformer",
        "d128",
        T128,
        "none",
        1e-3,
        5000,
        0.99,
        0.0,
        0.1,
        Some((0.2345, 0.4, 0.9, 0.01)),
    );
    f.train(
        "transformer",
        "d128",
        T128,
        "none",
        3e-3,
        5000,
        0.95,
        1e-3,
        0.1,
        Some((0.1234, 0.61234, 0.98765, 0.05)),
    );
    f.train(
        "slice",
        "d128",
        S128,
        "constant",
        3e-4,
        20_000,
        0.999,
        1e-2,
        0.1,
        Some((0.3, 0.25, 0.85, 0.0)),
    );
    f.train(
        "slice", "d128", S128, "none", 1e-4, 10_000, 0.999, 0.0, 0.1, None,
    );
}

/// The second stage: cosine with two floors each.
fn second_stage_runs(f: &mut Fixtures) {
    f.train(
        "transformer",
        "d128",
        T128,
        "cosine",
        3e-3,
        5000,
        0.95,
        0.0,
        0.1,
        Some((0.1, 0.7, 0.99, 0.1)),
    );
    f.train(
        "transformer",
        "d128",
        T128,
        "cosine",
        3e-3,
        5000,
        0.95,
        0.0,
        0.01,
        Some((0.11, 0.69, 0.989, 0.09)),
    );
    f.train(
        "slice",
        "d128",
        S128,
        "cosine",
        1e-3,
        20_000,
        0.999,
        1e-2,
        0.1,
        Some((0.2, 0.5, 0.95, 0.02)),
    );
    f.train(
        "slice",
        "d128",
        S128,
        "cosine",
        1e-3,
        20_000,
        0.999,
        1e-2,
        0.01,
        Some((0.19, 0.52, 0.951, 0.025)),
    );
}

/// Evaluations of the ablation pair and the transformer on `split` (metrics worse by `shift`),
/// and the prefix bins of the pair.
fn evaluations(f: &mut Fixtures, split: &str, shift: f64) {
    f.evaluate(
        split,
        "slice",
        "d128",
        S128,
        0.2 + shift,
        0.5 - shift,
        0.95 - shift / 4.0,
        0.02,
    );
    f.evaluate(
        split,
        "slice_diag",
        "d128",
        SD128,
        0.25 + shift,
        0.45 - shift * 1.5,
        0.94 - shift / 4.0,
        0.01,
    );
    f.evaluate(
        split,
        "transformer",
        "d128",
        T128,
        0.1 + shift,
        0.7 - shift * 2.0,
        0.99 - shift / 3.0,
        0.1,
    );
    f.bins(
        split,
        "slice",
        "d128",
        S128,
        &[(2000, 0.9), (1900, 0.6), (800, 0.3 - shift)],
    );
    f.bins(
        split,
        "slice_diag",
        "d128",
        SD128,
        &[(2000, 0.85), (1900, 0.5), (0, 0.0), (10, 0.1)],
    );
}

fn check_golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("CWM_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with CWM_BLESS=1)", path.display()));
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

#[test]
fn tables_match_golden_files() {
    let f = full_fixtures();
    let out = TempDir::new("golden-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    let ids: Vec<&str> = summary.tables.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "table3_coverage",
            "table5_first_stage",
            "table6_cosine_floor",
            "table7_final_hparams",
            "table8_test",
            "table9_ablations_test_real",
            "table10_ablations_test_random",
            "table11_bins_test_real",
            "table12_bins_test_random",
        ]
    );
    for id in ids {
        for ext in ["md", "tex", "csv", "sources.csv"] {
            let name = format!("{id}.{ext}");
            let written = std::fs::read_to_string(out.0.join(&name)).unwrap();
            check_golden(&name, &written);
        }
    }
    check_golden(
        "index.md",
        &std::fs::read_to_string(out.0.join("index.md")).unwrap(),
    );
}

#[test]
fn table4_counts_every_model_from_the_definitions() {
    let f = Fixtures::new("table4");
    let out = TempDir::new("table4-out");
    let options = ReportOptions {
        figures: false,
        ..ReportOptions::default()
    };
    let summary = f.build(&out.0, &options).unwrap();
    assert_eq!(summary.tables.len(), 1, "only Table 4 needs no input");
    for ext in ["md", "tex", "csv"] {
        let name = format!("table4_params.{ext}");
        check_golden(&name, &std::fs::read_to_string(out.0.join(&name)).unwrap());
    }
    let md = std::fs::read_to_string(out.0.join("table4_params.md")).unwrap();
    // Spec C.3, row by row.
    for line in [
        "| Transformer | 3.13M | 7.83M | 18.05M | 36.66M |",
        "| SLiCE | 3.14M | 7.96M | 18.64M | 38.24M |",
        "| Diagonal SLiCE | 3.03M | 7.04M | 14.50M | 27.21M |",
        "| Gated DeltaNet | 3.16M | 7.70M | 16.89M | 35.14M |",
        "| Mamba-3 | 3.20M | 8.25M | 19.72M | 40.83M |",
        "| Mamba-2 | 3.20M | 8.23M | 19.64M | 40.65M |",
    ] {
        assert!(md.contains(line), "missing `{line}` in\n{md}");
    }
}

#[test]
fn a_matrix_of_evaluations_gives_one_row_per_cell() {
    let mut f = Fixtures::new("matrix");
    let cells = [
        ("slice", "d128", S128),
        ("slice", "d256", S256),
        ("slice_diag", "d128", SD128),
        ("slice_diag", "d256", SD256),
    ];
    for split in ["test_real", "test_random"] {
        for (i, (arch, size, params)) in cells.iter().enumerate() {
            let x = i as f64 / 10.0;
            f.evaluate(
                split,
                arch,
                size,
                *params,
                0.3 - x / 10.0,
                0.4 + x,
                0.9,
                0.01,
            );
        }
    }
    let out = TempDir::new("matrix-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    let table8 = summary
        .tables
        .iter()
        .find(|t| t.id == "table8_test")
        .unwrap();
    assert_eq!(table8.rows.len(), 4, "2 families x 2 sizes");
    let keys: Vec<(String, String)> = table8
        .rows
        .iter()
        .map(|r| (r[0].raw.clone().unwrap(), r[1].text.clone()))
        .collect();
    assert_eq!(
        keys,
        [
            ("slice", "d128"),
            ("slice", "d256"),
            ("slice_diag", "d128"),
            ("slice_diag", "d256")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    // Each row has both splits filled: 3 + 2 x 4 cells, none missing.
    for row in &table8.rows {
        assert_eq!(row.len(), 11);
        assert!(row.iter().all(|c| c.text != "–"), "{row:?}");
    }
    assert_eq!(table8.sources.len(), 8);
    let csv = std::fs::read_to_string(out.0.join("table8_test.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "header + 4 rows:\n{csv}");
    // One ablation table per split, one row per size.
    for id in [
        "table9_ablations_test_real",
        "table10_ablations_test_random",
    ] {
        let t = summary.tables.iter().find(|t| t.id == id).unwrap();
        assert_eq!(t.rows.len(), 2, "{id}");
    }
}

#[test]
fn tables_without_inputs_are_absent() {
    let mut f = Fixtures::new("absent");
    f.evaluate(
        "test_real",
        "transformer",
        "d128",
        T128,
        0.1,
        0.7,
        0.99,
        0.1,
    );
    f.add(
        "notes",
        "command",
        &[],
        &[("notes.txt", "not an artifact the report reads".into())],
    );
    let out = TempDir::new("absent-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    let ids: Vec<&str> = summary.tables.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["table8_test"],
        "no pair for an ablation, no bins, no training"
    );
    let index = std::fs::read_to_string(out.0.join("index.md")).unwrap();
    assert!(index.contains("[md](table8_test.md)"), "{index}");
    for absent in [
        "Table 3", "Table 4", "Table 5", "Table 6", "Table 7", "Table 9", "Table 11", "table3",
        "table5", "table6", "table7",
    ] {
        assert!(!index.contains(absent), "`{absent}` in\n{index}");
    }
    assert!(!out.0.join("table3_coverage.md").exists());
    assert!(
        index.contains("| `notes` | command |"),
        "unknown kinds are listed: {index}"
    );
    assert!(index.contains("ignored"), "{index}");
}

#[test]
fn artifacts_of_other_kinds_are_recognised_by_their_summary() {
    let mut f = Fixtures::new("by-summary");
    f.evaluate("test_real", "gdn", "d128", 3_161_402, 0.1, 0.7, 0.99, 0.1);
    f.artifacts[0].producer_kind = "command".into();
    let out = TempDir::new("by-summary-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    assert_eq!(summary.inputs.evaluate.len(), 1);
    assert_eq!(summary.tables.len(), 1);
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

#[test]
fn figures_are_written_as_svg_and_png() {
    let f = full_fixtures();
    let out = TempDir::new("figures-out");
    let options = ReportOptions {
        param_counts: false,
        ..ReportOptions::default()
    };
    let summary = f.build(&out.0, &options).unwrap();
    let ids: Vec<&str> = summary.figures.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "figure3_validation",
            "figure3_test_real",
            "figure4_test_real",
            "figure3_test_random",
            "figure4_test_random",
        ]
    );
    let svg = std::fs::read_to_string(out.0.join("figure3_test_real.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
    for text in [
        "Transformer",
        "SLiCE",
        "Diagonal SLiCE",
        "Pareto frontier",
        "ExactState (%)",
        "Parameters",
    ] {
        // plotters writes `<text ...>\nTEXT\n</text>`.
        assert!(
            svg.contains(&format!("{text}\n</text>")),
            "`{text}` not in the SVG"
        );
    }
    // Dashed frontier: short black segments.
    assert!(
        svg.contains("stroke=\"#000000\""),
        "no black frontier stroke"
    );
    let svg4 = std::fs::read_to_string(out.0.join("figure4_test_real.svg")).unwrap();
    assert!(svg4.contains("<polygon"), "arrowheads are polygons");
    assert!(!svg4.contains("Pareto frontier\n</text>"));
    assert!(
        svg4.contains("Mamba-3") || svg4.contains("SLiCE\n</text>"),
        "figure 4 names its families"
    );
    for id in ids {
        let png = std::fs::read(out.0.join(format!("{id}.png"))).unwrap();
        assert_eq!(
            png_size(&png),
            cwm_stage_report::figures::FIGURE_SIZE,
            "{id}"
        );
        assert!(
            png.len() > 10_000,
            "{id}: {} bytes is too small for a drawn figure",
            png.len()
        );
    }
    let index = std::fs::read_to_string(out.0.join("index.md")).unwrap();
    assert!(index.contains("[svg](figure3_test_real.svg)"), "{index}");
    assert!(index.contains("[png](figure4_test_random.png)"), "{index}");
    // No temporary file is left behind.
    for entry in std::fs::read_dir(&out.0).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(!name.starts_with('.'), "left over: {name}");
    }
}

#[test]
fn malformed_inputs_name_the_file_and_the_field() {
    let mut f = Fixtures::new("bad");
    f.add("evaluate_x", "evaluate", &[], &[("summary.json", r#"{"kind":"evaluate","split":"t","arch":"slice","size":"d128","params":1,"games":1,"steps":1,"loss":"high","labelwise":1,"exact_state":1,"trajectory":1}"#.into())]);
    let out = TempDir::new("bad-out");
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(
        err.contains("summary.json") && err.contains("`loss`") && err.contains("expected a number"),
        "{err}"
    );
    assert!(
        !out.0.join("index.md").exists(),
        "nothing written on failure"
    );

    let mut f = Fixtures::new("bad-arch");
    f.train("resnet", "d128", 1, "none", 1e-3, 0, 0.9, 0.0, 0.1, None);
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(err.contains("`arch`") && err.contains("resnet"), "{err}");

    let mut f = Fixtures::new("bad-json");
    f.add(
        "tok",
        "tokenize",
        &[],
        &[("coverage.json", "{not json".into())],
    );
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(
        err.contains("coverage.json") && err.contains("not valid JSON"),
        "{err}"
    );

    let mut f = Fixtures::new("missing-file");
    f.add("tok", "tokenize", &[], &[]);
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(err.contains("coverage.json"), "{err}");

    let mut f = Fixtures::new("bad-bins");
    f.add("b", "bin_prefix", &[], &[("summary.json", r#"{"kind":"bin_prefix","split":"t","arch":"slice","size":"d128","params":1,"bin":20,"bins":[{"bin":0,"start":0,"end":20,"steps":-3,"exact_state":1,"labelwise":1}]}"#.into())]);
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(err.contains("bins.0.steps"), "{err}");
}

#[test]
fn two_evaluations_of_one_cell_conflict() {
    let mut f = Fixtures::new("conflict");
    f.evaluate("test_real", "slice", "d128", S128, 0.2, 0.5, 0.9, 0.0);
    f.evaluate("test_real", "slice", "d128", S128, 0.3, 0.4, 0.9, 0.0);
    f.artifacts[1].producer = "evaluate_again".into();
    let out = TempDir::new("conflict-out");
    let err = f.build(&out.0, &quick()).unwrap_err().to_string();
    assert!(
        err.contains("evaluate_again") && err.contains("test_real"),
        "{err}"
    );
}

/// The paper's best-floor rule: a selection over second-stage runs keeps only the chosen
/// run's evaluation in the test tables, and says which one it left out.
#[test]
fn a_floor_selection_keeps_only_the_chosen_runs_evaluation() {
    let mut f = Fixtures::new("floors");
    second_stage_runs(&mut f);
    // The slice d128 runs with floors 0.1 and 0.01 are artifacts 2 and 3.
    let (floor_01, floor_001) = (f.artifacts[2].hash.clone(), f.artifacts[3].hash.clone());
    for (name, model, loss) in [("eval_a", &floor_01, 0.25), ("eval_b", &floor_001, 0.2125)] {
        let summary = json!({"kind": "evaluate", "split": "test_real", "arch": "slice",
            "size": "d128", "params": S128, "model_hash": model, "data_hash": "d",
            "games": 100, "steps": 8000, "loss": loss, "labelwise": 0.9, "exact_state": 0.5,
            "trajectory": 0.0});
        f.add(name, "evaluate", &[], &[("summary.json", pretty(&summary))]);
    }
    let selected = json!({"kind": "select", "metric": "final_val_loss", "choices": [
        {"arch": "slice", "size": "d128", "instance": f.artifacts[3].producer,
         "train_hash": floor_001, "hparams": {"lr": 0.001, "beta2": 0.999,
         "weight_decay": 0.01, "warmup_steps": 20000}, "val_loss": 0.2, "exact_state": 0.52,
         "labelwise": 0.951, "trajectory": 0.025}]});
    f.add(
        "select_floor",
        "select",
        &[],
        &[("selected.json", pretty(&selected))],
    );
    let out = TempDir::new("floors-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    assert_eq!(summary.inputs.evaluate.len(), 1);
    assert_eq!(summary.inputs.evaluate[0].origin.instance, "eval_b");
    assert_eq!(summary.notes.len(), 1, "{:?}", summary.notes);
    assert!(
        summary.notes[0].starts_with("eval_a is left out")
            && summary.notes[0].contains(&f.artifacts[3].producer),
        "{:?}",
        summary.notes
    );
    let md = std::fs::read_to_string(out.0.join("table8_test.md")).unwrap();
    assert!(md.contains("0.2125") && !md.contains("0.2500"), "{md}");
    let index = std::fs::read_to_string(out.0.join("index.md")).unwrap();
    assert!(index.contains("## Selection notes"), "{index}");
}

#[test]
fn select_choices_feed_table5_without_first_stage_runs() {
    let mut f = Fixtures::new("select");
    let selected = json!({"kind": "select", "metric": "val_loss", "candidates": 6, "choices": [
        {"arch": "transformer", "size": "d128", "instance": "sweep[arch=transformer,lr=0.003]",
         "train_hash": "t1", "hparams": {"lr": 0.003, "beta2": 0.95, "weight_decay": 0.0,
         "warmup_steps": 5000}, "val_loss": 0.1234, "exact_state": 0.5, "labelwise": 0.9,
         "trajectory": 0.01}]});
    f.add(
        "select",
        "select",
        &[],
        &[("selected.json", pretty(&selected))],
    );
    let out = TempDir::new("select-out");
    let summary = f.build(&out.0, &quick()).unwrap();
    let t5 = &summary.tables[0];
    assert_eq!(t5.id, "table5_first_stage");
    let md = std::fs::read_to_string(out.0.join("table5_first_stage.md")).unwrap();
    assert!(
        md.contains("| Transformer | d128 | 3.13M | 3e-3 | 5k | .95 | 0 | 0.1234 | 50.00 | 90.00 | 1.00 | sweep[arch=transformer,lr=0.003] |"),
        "{md}"
    );
}

#[test]
fn the_stage_kind_runs_from_a_context() {
    use cwm_stage::{StageContext, StageKind, StageLog};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    let mut f = Fixtures::new("stage");
    f.coverage("tokenize", 10, 700, 300);
    let out = TempDir::new("stage-out");
    let stage = cwm_stage_report::ReportStage;
    let mut params = Params::new();
    for spec in stage.params() {
        if let Some(v) = spec.default.value() {
            params.insert(spec.name, v);
        }
    }
    params.insert("param_counts", ParamValue::Bool(false));
    params.insert("title", ParamValue::Str("My report".into()));
    let mut inputs = BTreeMap::new();
    inputs.insert("artifacts".to_owned(), f.artifacts.clone());
    let mut outputs = BTreeMap::new();
    outputs.insert("out".to_owned(), out.0.clone());
    let ctx = StageContext::new(
        "report",
        params,
        inputs,
        outputs,
        f.dir.0.clone(),
        1,
        Progress::disabled(),
        StageLog::discard(),
        Arc::new(AtomicBool::new(false)),
    );
    stage.run(&ctx).unwrap();
    let index = std::fs::read_to_string(out.0.join("index.md")).unwrap();
    assert!(index.starts_with("# My report\n"), "{index}");
    assert!(out.0.join("table3_coverage.tex").is_file());
    assert!(
        !stage.fingerprint().contains("missing"),
        "{}",
        stage.fingerprint()
    );
}

/// The prefix-bin tables' CSV cells against an independent computation from the fixtures'
/// bins: ExactState × 100 at full precision, an empty cell where a bin holds no step.
#[test]
fn bin_tables_equal_the_fixtures_exact_state_in_percent() {
    let f = full_fixtures();
    let out = TempDir::new("bins-independent");
    f.build(&out.0, &quick()).unwrap();
    for (table, shift) in [
        ("table11_bins_test_real.csv", 0.0),
        ("table12_bins_test_random.csv", 0.2),
    ] {
        // (model, ExactState per bin; None where the bin has no step), as `full_fixtures`
        // builds them.
        let expected: [(&str, [Option<f64>; 4]); 2] = [
            ("slice", [Some(0.9), Some(0.6), Some(0.3 - shift), None]),
            ("slice_diag", [Some(0.85), Some(0.5), None, Some(0.1)]),
        ];
        let text = std::fs::read_to_string(out.0.join(table)).unwrap();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(rows.len(), expected.len(), "{table}: {text}");
        for (row, (model, bins)) in rows.iter().zip(expected) {
            let cells: Vec<&str> = row.split(',').collect();
            assert_eq!(&cells[..2], [model, "d128"], "{table}: {row}");
            assert_eq!(cells.len(), 2 + bins.len(), "{table}: {row}");
            for (cell, bin) in cells[2..].iter().zip(bins) {
                match bin {
                    None => assert_eq!(*cell, "", "{table}: {row}"),
                    Some(exact) => {
                        let value: f64 = cell.parse().unwrap();
                        assert!((value - 100.0 * exact).abs() < 1e-9, "{table}: {row}");
                    }
                }
            }
        }
    }
}
