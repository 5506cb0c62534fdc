//! `pipeline.paper.yaml` itself, shrunk by `pipeline.paper.smoke.yaml`, run end to end by the
//! real binary; the selections the pipeline made are then recomputed here from the train runs'
//! own summaries: the first-stage winner of each cell, the k-th best where `ranks` asks for
//! it, the retrained hyperparameters, and the better cosine floor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;

use super::Workspace;

const PIPELINE: &str = "pipeline.paper.yaml";
const SMOKE: &str = "pipeline.paper.smoke.yaml";
const SAMPLE: &str = "data/lichess_db_1000k.pgn.zst";

/// A workspace holding the repository's paper pipeline, its smoke vars and the sample games.
fn paper_workspace() -> Workspace {
    Workspace::with_repo_files("paper-smoke", &[PIPELINE, SMOKE, SAMPLE])
}

/// `cwm ARGS` on pipeline.paper.yaml with the smoke vars, asserting success.
fn smoke(ws: &Workspace, args: &[&str]) -> String {
    ws.ok_with_vars(PIPELINE, SMOKE, args)
}

/// Every instance of `stage` with the data directory of its one output (from `cwm show`).
fn outputs(ws: &Workspace, stage: &str) -> BTreeMap<String, PathBuf> {
    let shown = smoke(ws, &["show", stage]);
    let mut found = BTreeMap::new();
    let mut instance = None;
    for line in shown.lines() {
        if !line.starts_with(' ') && line.contains(" (kind ") {
            instance = line.split(" (kind ").next().map(str::to_owned);
        } else if let (Some(name), Some(path)) = (&instance, line.trim().strip_prefix("path: ")) {
            found.insert(name.clone(), PathBuf::from(path));
        }
    }
    assert!(!found.is_empty(), "no artifact of {stage} in:\n{shown}");
    found
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A train run as this test reads it: its instance, arch and summary.
struct Run {
    instance: String,
    arch: String,
    summary: Value,
}

impl Run {
    fn val_loss(&self) -> f64 {
        let best = &self.summary["best_val"]["loss"];
        let pick = if best.is_f64() {
            best
        } else {
            &self.summary["final_val"]["loss"]
        };
        pick.as_f64().unwrap_or(f64::INFINITY)
    }

    fn hparam(&self, name: &str) -> f64 {
        self.summary["hparams"][name]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: no hparams.{name}", self.instance))
    }
}

fn runs(ws: &Workspace, stage: &str) -> Vec<Run> {
    outputs(ws, stage)
        .into_iter()
        .map(|(instance, dir)| {
            let summary = json(&dir.join("summary.json"));
            let arch = summary["arch"].as_str().unwrap().to_owned();
            Run {
                instance,
                arch,
                summary,
            }
        })
        .collect()
}

/// The chosen instance per arch of a select stage's `selected.json`.
fn chosen(ws: &Workspace, stage: &str) -> BTreeMap<String, String> {
    let dir = outputs(ws, stage).into_values().next().unwrap();
    let selection = json(&dir.join("selected.json"));
    selection["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["arch"].as_str().unwrap().to_owned(),
                c["instance"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Per arch, the `rank`-th lowest `loss` (ties to the instance name that sorts first).
fn ranked(
    runs: &[Run],
    loss: fn(&Run) -> f64,
    rank_of: fn(&str) -> usize,
) -> BTreeMap<String, String> {
    let mut by_arch: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in runs {
        by_arch.entry(&run.arch).or_default().push(run);
    }
    by_arch
        .into_iter()
        .map(|(arch, mut group)| {
            group.sort_by(|a, b| {
                loss(a)
                    .total_cmp(&loss(b))
                    .then(a.instance.cmp(&b.instance))
            });
            (arch.to_owned(), group[rank_of(arch) - 1].instance.clone())
        })
        .collect()
}

/// The report's test tables hold the main families and the ablations apart, Table 1 tells
/// the four splits apart, and the page people open shows every table and figure in a real
/// browser.
fn check_report_tables(report: &Path) {
    let rows = |table: &str| {
        let text = std::fs::read_to_string(report.join(format!("{table}.md"))).unwrap();
        text.lines().filter(|l| l.contains("| d128/l1 |")).count()
    };
    assert_eq!(rows("table8_test"), 4, "one row per main family");
    assert_eq!(
        rows("table9_ablations_test_real"),
        3,
        "one row per ablation"
    );
    assert_eq!(
        rows("table10_ablations_test_random"),
        3,
        "one row per ablation"
    );
    // Table 1 tells the four splits apart by where their games came from.
    let table1 = std::fs::read_to_string(report.join("table1_splits.md")).unwrap();
    for split in [
        "| Real-game train and validation | 350 source games |",
        "| Held-out real validation |",
        "| Held-out real test |",
        "| Random-uniform test | 40 |",
    ] {
        assert!(table1.contains(split), "{split} in\n{table1}");
    }

    check_beyond_tables(report);

    // The page people open: every table and figure, in a real browser.
    let labels = [
        "Beyond: validity (test_real)",
        "Beyond: affordance (test_random)",
        "Beyond: events (test_real)",
        "Beyond: novelty (test_random)",
        "Beyond: first_error (test_real)",
        "Beyond: memory (test_random)",
        "Table 1",
        "Table 2",
        "Table 3",
        "Table 4",
        "Table 5",
        "Table 6",
        "Table 7",
        "Table 8",
        "Table 9",
        "Table 10",
        "Table 11",
        "Table 12",
        "Ranking agreement",
    ];
    let figures = std::fs::read_dir(report)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count();
    assert!(figures >= 2, "figures 3 and 4 at least");
    // A training-curve figure per family, all 7 trained at d128.
    for family in [
        "transformer",
        "slice",
        "slice_diag",
        "mamba3",
        "mamba2",
        "gdn",
        "gdn_pos",
    ] {
        let curve = report.join(format!("training_{family}.svg"));
        assert!(curve.is_file(), "{} is missing", curve.display());
    }
    super::report_page::check(report, &labels, figures);
}

/// The tables and figures beyond the paper: on both test splits, one row per trained family (the chosen
/// floor only), with the columns the diagnostics promise; true to the diagnose summaries.
fn check_beyond_tables(report: &Path) {
    check_markov_tables(report);
    check_edit_table(report);
    check_switch_table(report);
    let predictors = std::fs::read_to_string(report.join("beyond_predictors.csv")).unwrap();
    assert_eq!(
        predictors.lines().count(),
        1 + 8,
        "one row per predictor:\n{predictors}"
    );
    let loss = predictors.lines().nth(1).unwrap();
    assert!(loss.starts_with("Loss (real),7,"), "seven cells: {loss}");
    for split in ["test_real", "test_random"] {
        for kind in [
            "validity",
            "fields",
            "affordance",
            "events",
            "first_error",
            "memory",
            "novelty",
        ] {
            let csv = report.join(format!("beyond_{kind}_{split}.csv"));
            assert!(csv.is_file(), "{} is missing", csv.display());
        }
        for kind in [
            "validity",
            "fields",
            "affordance",
            "memory",
            "novelty",
            "mass",
        ] {
            for ext in ["svg", "png"] {
                let figure = report.join(format!("figure_beyond_{kind}_{split}.{ext}"));
                assert!(figure.is_file(), "{} is missing", figure.display());
            }
        }
        check_probe_tables(report, split);
        let validity =
            std::fs::read_to_string(report.join(format!("beyond_validity_{split}.csv"))).unwrap();
        let header: Vec<&str> = validity.lines().next().unwrap().split(',').collect();
        assert!(header.contains(&"Valid position (%)"), "{header:?}");
        assert_eq!(
            validity.lines().count(),
            1 + 7,
            "one row per family:\n{validity}"
        );
        check_sampled_masses(&validity);
        let affordance =
            std::fs::read_to_string(report.join(format!("beyond_affordance_{split}.csv"))).unwrap();
        let header: Vec<&str> = affordance.lines().next().unwrap().split(',').collect();
        let iou = header
            .iter()
            .position(|h| *h == "Legal-move IoU (strict)")
            .expect("the strict IoU column");
        for row in affordance.lines().skip(1) {
            let cell = row.split(',').nth(iou).unwrap();
            let value: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("IoU {cell:?} in {row}"));
            assert!((0.0..=1.0).contains(&value), "{row}");
        }
    }
}

/// The continued real games (E6): a switch table with a row per family and switch ply, whose
/// real prefixes have enough steps for a value, its figure, and the other beyond tables of the
/// split (without the novelty one: no novelty input).
fn check_switch_table(report: &Path) {
    let split = "test_continuation";
    let csv = std::fs::read_to_string(report.join(format!("beyond_switch_{split}.csv"))).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let (k, prefix) = (
        header.iter().position(|h| *h == "Switch ply k").unwrap(),
        header.iter().position(|h| *h == "Real prefix (%)").unwrap(),
    );
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|r| r.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 7 * 3, "a row per family and switch ply:\n{csv}");
    for row in &rows {
        assert!(["10", "20", "40"].contains(&row[k]), "{row:?}");
        let value: f64 = row[prefix].parse().unwrap_or_else(|_| panic!("{row:?}"));
        assert!((0.0..=100.0).contains(&value), "{row:?}");
    }
    for kind in ["validity", "fields", "affordance", "events"] {
        let path = report.join(format!("beyond_{kind}_{split}.csv"));
        assert!(path.is_file(), "{} is missing", path.display());
    }
    assert!(!report.join(format!("beyond_novelty_{split}.csv")).exists());
    for ext in ["svg", "png"] {
        let figure = report.join(format!("figure_beyond_switch_{split}.{ext}"));
        assert!(figure.is_file(), "{} is missing", figure.display());
    }
}

/// Every model has a valid and an afford mass in the validity CSV, each a percentage (the
/// smoke run's evaluations sample all their steps, more than the 30 a value needs).
fn check_sampled_masses(validity: &str) {
    let header: Vec<&str> = validity.lines().next().unwrap().split(',').collect();
    for name in ["Valid mass (%)", "Afford mass (%)"] {
        let column = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name:?} in {header:?}"));
        for row in validity.lines().skip(1) {
            let cell = row.split(',').nth(column).unwrap();
            let value: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("{name} {cell:?} in {row}"));
            assert!((0.0..=100.0).contains(&value), "{name} in {row}");
        }
    }
}

/// The probe tables and figure of `split`: every layer of each of the seven chosen models,
/// ID and OOD probes scored, accuracies within 0..100.
fn check_probe_tables(report: &Path, split: &str) {
    let read = |id: &str| {
        let path = report.join(format!("{id}_{split}.csv"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let baselines = read("beyond_probe_baselines");
    assert_eq!(
        baselines.lines().count(),
        1 + 7,
        "one row per family:\n{baselines}"
    );
    let layers = read("beyond_probes");
    let header: Vec<&str> = layers.lines().next().unwrap().split(',').collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{name} in {header:?}"))
    };
    let (id, ood) = (
        column("Square acc. (%) (ID probe)"),
        column("Square acc. (%) (OOD probe)"),
    );
    let rows: Vec<Vec<&str>> = layers
        .lines()
        .skip(1)
        .map(|r| r.split(',').collect())
        .collect();
    let models: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(models.len(), 7, "{layers}");
    assert!(
        rows.len() >= 7 * 3,
        "embedding, blocks and head input of each model:\n{layers}"
    );
    for row in &rows {
        for cell in [row[id], row[ood]] {
            let value: f64 = cell
                .parse()
                .unwrap_or_else(|_| panic!("{cell:?} in {row:?}"));
            assert!((0.0..=100.0).contains(&value), "{row:?}");
        }
    }
    for ext in ["svg", "png"] {
        let figure = report.join(format!("figure_beyond_probes_{split}.{ext}"));
        assert!(figure.is_file(), "{} is missing", figure.display());
    }
}

/// The path-independence tables and figure (real test games only): every chosen model, both
/// class sets, a p-value in (0, 1] wherever one is printed.
fn check_markov_tables(report: &Path) {
    let read = |id: &str| {
        let path = report.join(format!("{id}_test_real.csv"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let outputs = read("beyond_transposition");
    assert_eq!(
        outputs.lines().count(),
        1 + 7 * 2,
        "two class sets per family:\n{outputs}"
    );
    let layers = read("beyond_markov");
    let header: Vec<&str> = layers.lines().next().unwrap().split(',').collect();
    let p = header
        .iter()
        .position(|h| *h == "p (Holm)")
        .expect("a p column");
    let mut printed = 0;
    for row in layers.lines().skip(1) {
        let cell = row.split(',').nth(p).unwrap();
        if let Ok(value) = cell.parse::<f64>() {
            assert!(value > 0.0 && value <= 1.0, "{row}");
            printed += 1;
        }
    }
    assert!(printed > 0, "no p-value at all:\n{layers}");
    for ext in ["svg", "png"] {
        let figure = report.join(format!("figure_beyond_markov_test_real.{ext}"));
        assert!(figure.is_file(), "{} is missing", figure.display());
    }
}

/// The state-editing table (real test games): every chosen model, both case variants, the
/// none, random, patch, probe and probe_diff rows at every α; the unedited rows agree with
/// themselves; the figure is drawn when some probe edit had a case to flip.
fn check_edit_table(report: &Path) {
    let path = report.join("beyond_edit_test_real.csv");
    let csv = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = csv_fields(csv.lines().next().unwrap());
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("{name} in {header:?}"))
    };
    let (cases, vector, held, agreement) = (
        column("Cases"),
        column("Vector"),
        column("Held"),
        column("Argmax agreement (%)"),
    );
    let rows: Vec<Vec<String>> = csv.lines().skip(1).map(csv_fields).collect();
    let models: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(models.len(), 7, "{csv}");
    // One block at d128: per model 2 variants × (none + 4 vectors × 5 α).
    assert_eq!(rows.len(), 7 * 2 * 21, "{csv}");
    let mut flippable = false;
    for row in &rows {
        assert!(
            ["next_move", "persistent"].contains(&row[cases].as_str()),
            "{row:?}"
        );
        if row[vector] == "none" {
            assert_eq!(row[agreement].parse::<f64>(), Ok(100.0), "{row:?}");
        }
        let held: u64 = row[held].parse().unwrap();
        flippable |= row[cases] == "persistent" && row[vector].starts_with("probe") && held > 0;
    }
    for ext in ["svg", "png"] {
        let figure = report.join(format!("figure_beyond_edit_test_real.{ext}"));
        assert_eq!(figure.is_file(), flippable, "{}", figure.display());
    }
}

/// The fields of one CSV line, with RFC 4180 quoting (`"a, b"`, `""` for a quote).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut field, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[test]
fn the_paper_pipeline_runs_end_to_end_on_the_smoke_vars() {
    let ws = paper_workspace();
    let started = Instant::now();
    smoke(&ws, &["run"]);
    eprintln!("paper smoke run: {:.0} s", started.elapsed().as_secs_f64());

    // Stage 1: the lowest validation loss per cell, but slice's second best (`ranks`).
    let sweep = runs(&ws, "sweep");
    assert_eq!(sweep.len(), 4 * 4, "4 families x 4 configurations at d128");
    let first_stage = ranked(
        &sweep,
        Run::val_loss,
        |arch| if arch == "slice" { 2 } else { 1 },
    );
    assert_eq!(chosen(&ws, "select"), first_stage);

    // Stage 2 and the ablations retrain the chosen configuration (an ablation its family's).
    let by_instance: BTreeMap<&str, &Run> =
        sweep.iter().map(|r| (r.instance.as_str(), r)).collect();
    let mut retrained = runs(&ws, "final");
    retrained.extend(runs(&ws, "ablations"));
    assert_eq!(retrained.len(), 7 * 2, "7 families x 2 floors");
    for run in &retrained {
        let family = match run.arch.as_str() {
            "slice_diag" => "slice",
            "gdn_pos" => "gdn",
            "mamba2" => "mamba3",
            other => other,
        };
        let source = by_instance[first_stage[family].as_str()];
        for name in ["lr", "beta2", "weight_decay", "warmup_steps"] {
            assert_eq!(
                run.hparam(name),
                source.hparam(name),
                "{} {name}",
                run.instance
            );
        }
        assert_eq!(
            run.summary["hparams"]["schedule"], "cosine",
            "{}",
            run.instance
        );
    }

    // The better floor by validation loss.
    let floors = ranked(&retrained, Run::val_loss, |_| 1);
    assert_eq!(floors.len(), 7);
    assert_eq!(chosen(&ws, "select_floor"), floors);

    // The report: only the chosen runs' evaluations in the test tables, the choices noted.
    let report = outputs(&ws, "report").into_values().next().unwrap();
    let index = std::fs::read_to_string(report.join("index.md")).unwrap();
    assert!(index.contains("## Selection notes"), "{index}");
    assert_eq!(
        index
            .matches("`select` chose run 2 by validation loss")
            .count(),
        1,
        "{index}"
    );
    assert_eq!(
        index.matches("is left out of the test tables").count(),
        7 * 2,
        "{index}"
    );
    check_report_tables(&report);

    // Nothing reruns.
    let again: Value = serde_json::from_str(&smoke(&ws, &["run", "--json"])).unwrap();
    assert!(super::names(&again, "ran").is_empty(), "{again}");
}
