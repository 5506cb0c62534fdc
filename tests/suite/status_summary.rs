//! `cwm status` prints a summary by default: a header, one line per stage (in plan order) with
//! its instances counted as fresh or by why they are stale, and a total line; `--all` prints
//! every instance with its reasons, and `--json` stays the full per-instance list.

use super::Workspace;

const PIPELINE: &str = r#"
stages:
  gen:
    uses: command
    params:
      cmd: echo "$CWM_PARAM_arch" > "$CWM_OUT/arch.txt"
    matrix:
      arch: [a, b, c]
  solo:
    uses: command
    params:
      cmd: echo "$CWM_PARAM_value" > "$CWM_OUT/value.txt"
      value: 1
  join:
    uses: command
    inputs: {runs: gen, value: solo}
    params:
      cmd: cat "$CWM_IN_value/value.txt" > "$CWM_OUT/all.txt"
"#;

/// One summary row: stage, instances, fresh, stale, and (why, count) pairs.
#[derive(Debug, PartialEq)]
struct Row {
    stage: String,
    instances: usize,
    fresh: usize,
    stale: usize,
    why: Vec<(String, usize)>,
}

fn number(field: Option<&str>, line: &str) -> usize {
    field
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("not a summary row: {line:?}"))
}

/// Parses `cwm status`'s summary: the header, the rows (the total last), the hint if any.
fn summary(text: &str) -> (Vec<Row>, Option<String>) {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["stage", "instances", "fresh", "stale", "why", "stale"]
    );
    let mut rows = Vec::new();
    let mut hint = None;
    for line in lines {
        if line.starts_with('(') {
            hint = Some(line.to_owned());
            continue;
        }
        let mut fields = line.split_whitespace();
        let stage = fields.next().unwrap_or_default().to_owned();
        let instances = number(fields.next(), line);
        let fresh = number(fields.next(), line);
        let stale = number(fields.next(), line);
        let rest: Vec<&str> = fields.collect();
        let rest = rest.join(" ");
        let why = if rest == "-" {
            Vec::new()
        } else {
            rest.split(", ")
                .map(|pair| {
                    let (label, n) = pair.rsplit_once(' ').expect("`why count`");
                    (label.to_owned(), n.parse().expect("a count"))
                })
                .collect()
        };
        rows.push(Row {
            stage,
            instances,
            fresh,
            stale,
            why,
        });
    }
    (rows, hint)
}

/// The rows' counts add up: fresh + stale = instances, the whys sum to stale, and the stage
/// rows sum to the total row, which counts `instances` instances.
fn assert_consistent(rows: &[Row], instances: usize) {
    let (total, stages) = rows.split_last().expect("a total row");
    assert_eq!(total.stage, "total");
    assert_eq!(total.instances, instances);
    for row in rows {
        assert_eq!(row.fresh + row.stale, row.instances, "{row:?}");
        let why: usize = row.why.iter().map(|(_, n)| n).sum();
        assert_eq!(why, row.stale, "{row:?}");
    }
    let sum = |f: fn(&Row) -> usize| stages.iter().map(f).sum::<usize>();
    assert_eq!(sum(|r| r.instances), total.instances);
    assert_eq!(sum(|r| r.fresh), total.fresh);
    assert_eq!(sum(|r| r.stale), total.stale);
}

fn row(stage: &str, instances: usize, fresh: usize, why: &[(&str, usize)]) -> Row {
    Row {
        stage: stage.to_owned(),
        instances,
        fresh,
        stale: why.iter().map(|(_, n)| n).sum(),
        why: why.iter().map(|(w, n)| ((*w).to_owned(), *n)).collect(),
    }
}

#[test]
fn status_summarises_per_stage_and_all_lists_every_instance() {
    let ws = Workspace::new("status-summary");
    ws.pipeline(PIPELINE);
    let instances = ws.status().len();
    assert_eq!(instances, 5);

    let (rows, hint) = summary(&ws.ok(&["status"]));
    assert_consistent(&rows, instances);
    assert_eq!(
        rows,
        [
            row("gen", 3, 0, &[("never-run", 3)]),
            row("solo", 1, 0, &[("never-run", 1)]),
            row("join", 1, 0, &[("upstream", 1)]),
            row("total", 5, 0, &[("never-run", 4), ("upstream", 1)]),
        ]
    );
    assert!(hint.is_some_and(|h| h.contains("--all")));

    // `--all`: a state line per instance, its reasons indented below, as `--json` lists them.
    let all = ws.ok(&["status", "--all"]);
    let listed: Vec<&str> = all
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.strip_prefix("stale  "))
        .collect();
    let json: Vec<String> = ws.status().into_iter().map(|s| s.0).collect();
    assert_eq!(listed, json);
    assert_eq!(listed.len(), instances);
    assert!(
        all.contains("         never-run: no result recorded in cwm.lock"),
        "{all}"
    );

    ws.run_json(&[]);
    let (rows, hint) = summary(&ws.ok(&["status"]));
    assert_consistent(&rows, instances);
    assert!(
        rows.iter()
            .all(|r| r.fresh == r.instances && r.why.is_empty())
    );
    assert_eq!(hint, None, "nothing is stale");

    // A changed param: that instance, and the one that waits on it.
    ws.pipeline(&PIPELINE.replace("value: 1", "value: 2"));
    let (rows, _) = summary(&ws.ok(&["status"]));
    assert_consistent(&rows, instances);
    assert_eq!(
        rows,
        [
            row("gen", 3, 3, &[]),
            row("solo", 1, 0, &[("params", 1)]),
            row("join", 1, 0, &[("upstream", 1)]),
            row("total", 5, 3, &[("params", 1), ("upstream", 1)]),
        ]
    );
}

/// The paper's plan, about two thousand instances, summarised in a screenful.
#[test]
fn the_paper_plan_summary_is_one_line_per_stage() {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ws = Workspace::new("status-summary-paper");
    let text = std::fs::read_to_string(repo.join("pipeline.paper.yaml")).expect("the paper plan");
    ws.pipeline(&text);
    let instances = ws.status().len();
    assert!(instances >= 1900, "{instances} instances");
    let (rows, _) = summary(&ws.ok(&["status"]));
    assert_consistent(&rows, instances);
    assert!(rows.len() < 60, "{} rows", rows.len());
    let all = ws.ok(&["status", "--all"]);
    let states = all.lines().filter(|l| l.starts_with("stale ")).count();
    assert_eq!(states, instances);
}
