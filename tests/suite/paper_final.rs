//! `pipeline.paper-final.yaml`: the 28 final models straight from the paper's Table 7. The
//! plan the binary builds is checked against the published Table 7 the report carries
//! (`stages/report/paper/table7.csv`): every main model's hyperparameters and floor, each
//! ablation with its full family's row, and each evaluation bound to exactly its model. Its
//! smoke vars (`pipeline.paper-final.smoke.yaml`) run the same file end to end on a CPU.

use std::collections::BTreeMap;
use std::path::Path;

use super::Workspace;

const PIPELINE: &str = "pipeline.paper-final.yaml";

/// The graph's nodes (id → instance) and edges (from id, to id), from `cwm dag`'s Mermaid
/// text.
fn graph(text: &str) -> (BTreeMap<String, String>, Vec<(String, String)>) {
    let mut nodes = BTreeMap::new();
    let mut edges = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some((id, rest)) = line.split_once("[\"") {
            let label = rest.trim_end_matches("\"]");
            let instance = label.rsplit_once(" (").map_or(label, |(name, _)| name);
            nodes.insert(id.to_owned(), instance.to_owned());
        } else if let Some((from, rest)) = line.split_once(" -->") {
            // `n0 -->|out→pgn| n1`: the label between bars names the output and input.
            let to = rest.rsplit(['|', ' ']).next().unwrap_or(rest);
            edges.push((from.trim().to_owned(), to.trim().to_owned()));
        }
    }
    (nodes, edges)
}

/// `stage[k=v,...]` → (stage, {k: v}).
fn cell(instance: &str) -> (String, BTreeMap<String, String>) {
    let (stage, rest) = instance.split_once('[').unwrap_or((instance, "]"));
    let pairs = rest
        .trim_end_matches(']')
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (stage.to_owned(), pairs)
}

/// The published Table 7 as (arch, size) → [lr, warmup, beta2, weight decay, floor].
fn table7() -> BTreeMap<(String, String), [f64; 5]> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("stages/report/paper/table7.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let arch = |model: &str| match model {
        "Transformer" => "transformer",
        "SLiCE" => "slice",
        "Mamba-3" => "mamba3",
        "Gated DeltaNet" => "gdn",
        other => panic!("unknown model {other}"),
    };
    text.lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            let size = f[1].split('/').next().unwrap().to_owned();
            let values: Vec<f64> = f[2..7].iter().map(|v| v.parse().unwrap()).collect();
            ((arch(f[0]).to_owned(), size), values.try_into().unwrap())
        })
        .collect()
}

#[test]
fn the_final_pipeline_trains_the_papers_table7_models() {
    let ws = Workspace::with_repo_files("paper-final", &[PIPELINE]);
    let (nodes, edges) = graph(&ws.ok(&["dag", PIPELINE]));
    let published = table7();
    assert_eq!(published.len(), 16);
    let family = |arch: &str| match arch {
        "slice_diag" => "slice".to_owned(),
        "gdn_pos" => "gdn".to_owned(),
        "mamba2" => "mamba3".to_owned(),
        other => other.to_owned(),
    };
    let mut trained = 0;
    for instance in nodes.values() {
        let (stage, params) = cell(instance);
        if stage != "final" && stage != "ablations" {
            continue;
        }
        trained += 1;
        let key = (family(&params["arch"]), params["size"].clone());
        let want = published[&key];
        let got: Vec<f64> = [
            "lr",
            "warmup_steps",
            "beta2",
            "weight_decay",
            "lr_min_ratio",
        ]
        .iter()
        .map(|k| params[*k].parse().unwrap())
        .collect();
        assert_eq!(got, want, "{instance}");
        assert_eq!(stage == "final", key.0 == params["arch"], "{instance}");
    }
    assert_eq!(trained, 28, "16 main models and 12 ablations");

    // Each evaluation reads exactly the model of its family and size.
    for (id, instance) in &nodes {
        let (stage, params) = cell(instance);
        if !stage.starts_with("evaluate") {
            continue;
        }
        let models: Vec<&String> = edges
            .iter()
            .filter(|(_, to)| to == id)
            .map(|(from, _)| &nodes[from])
            .filter(|n| n.starts_with("final[") || n.starts_with("ablations["))
            .collect();
        assert_eq!(models.len(), 1, "{instance}: {models:?}");
        let (_, model) = cell(models[0]);
        assert_eq!(
            (&model["arch"], &model["size"]),
            (&params["arch"], &params["size"])
        );
    }
}

const SMOKE: &str = "pipeline.paper-final.smoke.yaml";

#[test]
fn the_final_pipeline_runs_end_to_end_on_its_smoke_vars() {
    let ws = Workspace::with_repo_files(
        "paper-final-smoke",
        &[PIPELINE, SMOKE, "data/lichess_db_1000k.pgn.zst"],
    );
    ws.ok_with_vars(PIPELINE, SMOKE, &["run"]);
    let shown = ws.ok_with_vars(PIPELINE, SMOKE, &["show", "report"]);
    let report = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("path: "))
        .map(Path::new)
        .expect("the report's path");
    let read = |id: &str| std::fs::read_to_string(report.join(format!("{id}.md"))).unwrap();
    // The trained models carry the smoke cells' hyperparameters, as Table 7 prints them.
    let table7 = read("table7_final_hparams");
    for row in [
        "| Transformer | d128/l1 | 0.003 | 4 | 0.95 | 0 | 0.1 |",
        "| SLiCE | d128/l1 | 0.001 | 8 | 0.999 | 0.01 | 0.1 |",
        "| Diagonal SLiCE | d128/l1 | 0.001 | 8 | 0.999 | 0.01 | 0.1 |",
    ] {
        assert!(table7.contains(row), "{row} in\n{table7}");
    }
    let rows = |id: &str| {
        read(id)
            .lines()
            .filter(|l| l.contains("| d128/l1 |"))
            .count()
    };
    assert_eq!(rows("table8_test"), 2);
    assert_eq!(rows("table9_ablations_test_real"), 1);
    assert_eq!(rows("table10_ablations_test_random"), 1);
    // Without a sweep, the first-stage tables are listed as not built, never dropped silently.
    let index = std::fs::read_to_string(report.join("index.md")).unwrap();
    assert!(
        index.contains("- Table 5: no first-stage train run"),
        "{index}"
    );
    assert!(
        index.contains("- Ranking agreement: no first-stage train run"),
        "{index}"
    );
}
