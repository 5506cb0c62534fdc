//! The executor end to end: caching, staleness reasons, early cutoff, crash
//! safety, failures, matrices, selection and parallelism.

use super::{Workspace, cwm_command, names};
use std::time::{Duration, Instant};

const CHAIN: &str = r#"
stages:
  a:
    uses: command
    params:
      cmd: echo "$CWM_PARAM_value" > "$CWM_OUT/a.txt"
      value: 1
  b:
    uses: command
    inputs: {src: a}
    params:
      cmd: cat "$CWM_IN_src/a.txt" > "$CWM_OUT/b.txt"; echo b >> "$CWM_OUT/b.txt"
  c:
    uses: command
    inputs: {src: b}
    params:
      cmd: wc -l < "$CWM_IN_src/b.txt" > "$CWM_OUT/c.txt"
  d:
    uses: command
    params:
      cmd: echo independent > "$CWM_OUT/d.txt"
"#;

#[test]
fn second_run_runs_nothing() {
    let ws = Workspace::new("second-run");
    ws.pipeline(CHAIN);
    let first = ws.run_json(&[]);
    assert_eq!(names(&first, "ran"), ["a", "b", "c", "d"]);
    let second = ws.run_json(&[]);
    assert!(names(&second, "ran").is_empty(), "{second}");
    assert_eq!(names(&second, "cached"), ["a", "b", "c", "d"]);
    assert!(ws.dir.join("cwm.lock").exists());
    assert!(ws.status().iter().all(|(_, state, _)| state == "fresh"));
    let human = ws.ok(&["run"]);
    assert_eq!(
        human.lines().filter(|l| l.starts_with("cached  ")).count(),
        4,
        "{human}"
    );
}

#[test]
fn a_param_change_marks_that_stage_and_its_consumers_only() {
    let ws = Workspace::new("param-change");
    ws.pipeline(CHAIN);
    ws.run_json(&[]);
    ws.pipeline(&CHAIN.replace("value: 1", "value: 2"));
    let status = ws.status();
    let by_name = |n: &str| status.iter().find(|s| s.0 == n).cloned().unwrap();
    let a = by_name("a");
    assert_eq!(a.1, "stale");
    assert_eq!(a.2, ["params: value changed 1 → 2"]);
    let b = by_name("b");
    assert_eq!(b.1, "stale");
    assert!(
        b.2[0].starts_with("input: `src` comes from `a`"),
        "{:?}",
        b.2
    );
    assert_eq!(by_name("c").1, "stale");
    assert!(by_name("c").2[0].starts_with("input:"));
    assert_eq!(by_name("d"), ("d".to_owned(), "fresh".to_owned(), vec![]));

    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["a", "b", "c"]);
    assert_eq!(names(&run, "cached"), ["d"]);

    // The same through a command-line override, typed by the param's kind.
    let run = ws.run_json(&["-s", "a.value=3"]);
    assert_eq!(names(&run, "ran"), ["a", "b", "c"]);
    // Back to the file's value: all cached again (results are kept by key).
    let run = ws.run_json(&[]);
    assert!(names(&run, "ran").is_empty(), "{run}");
}

#[test]
fn an_output_preserving_change_stops_at_the_changed_stage() {
    let ws = Workspace::new("early-cutoff");
    ws.pipeline(CHAIN);
    ws.run_json(&[]);
    // Same output, different command: `a` reruns, `b` sees identical input.
    ws.pipeline(&CHAIN.replace(
        r#"cmd: echo "$CWM_PARAM_value" > "$CWM_OUT/a.txt""#,
        r#"cmd: true; echo "$CWM_PARAM_value" > "$CWM_OUT/a.txt""#,
    ));
    let status = ws.status();
    assert!(
        status[0].2[0].starts_with("params: cmd changed"),
        "{status:?}"
    );
    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["a"]);
    assert_eq!(names(&run, "cached"), ["b", "c", "d"]);
}

#[test]
fn forced_stages_rerun_and_identical_output_cuts_off_downstream() {
    let ws = Workspace::new("force");
    ws.pipeline(CHAIN);
    ws.run_json(&[]);
    let run = ws.run_json(&["--force", "b"]);
    assert_eq!(names(&run, "ran"), ["b"]);
    assert_eq!(names(&run, "cached"), ["a", "c", "d"]);
}

#[test]
fn only_and_from_select_what_runs() {
    let ws = Workspace::new("select");
    ws.pipeline(CHAIN);
    let run = ws.run_json(&["--only", "b"]);
    assert_eq!(names(&run, "ran"), ["a", "b"]);
    let run = ws.run_json(&["--from", "b"]);
    assert_eq!(names(&run, "ran"), ["c"]);
    assert_eq!(names(&run, "cached"), ["a", "b"]);
    let out = ws.cwm(&["run", "--only", "nope"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stage or instance named `nope`"));
}

#[test]
fn dry_run_says_what_would_run_and_runs_nothing() {
    let ws = Workspace::new("dry-run");
    ws.pipeline(CHAIN);
    let run = ws.run_json(&["--dry-run"]);
    assert_eq!(names(&run, "would_run"), ["a", "b", "c", "d"]);
    assert!(names(&run, "ran").is_empty());
    assert!(!ws.dir.join("cwm.lock").exists());
    let status = ws.status();
    assert!(status.iter().all(|s| s.1 == "stale"));
    assert_eq!(status[0].2, ["never-run: no result recorded in cwm.lock"]);
}

#[test]
fn dependency_files_join_the_key() {
    let ws = Workspace::new("deps");
    ws.write("input.txt", "one\n");
    ws.pipeline(
        "stages:\n  copy:\n    uses: command\n    deps: [input.txt]\n    params: {cmd: cp input.txt \"$CWM_OUT/\"}\n",
    );
    assert_eq!(names(&ws.run_json(&[]), "ran"), ["copy"]);
    assert!(names(&ws.run_json(&[]), "ran").is_empty());
    ws.write("input.txt", "two\n");
    let status = ws.status();
    assert_eq!(status[0].2, ["input: dependency file input.txt changed"]);
    assert_eq!(names(&ws.run_json(&[]), "ran"), ["copy"]);
}

#[test]
fn a_damaged_or_missing_artifact_is_detected_and_rebuilt() {
    let ws = Workspace::new("damaged");
    ws.pipeline(CHAIN);
    ws.run_json(&[]);
    let show = ws.ok(&["show", "d"]);
    let path_line = show
        .lines()
        .find(|l| l.trim_start().starts_with("path: "))
        .expect("show prints the artifact path");
    let data = std::path::PathBuf::from(path_line.trim_start().trim_start_matches("path: "));
    let file = data.join("d.txt");
    let mut perms = std::fs::metadata(&file).unwrap().permissions();
    assert!(perms.readonly(), "committed artifacts are read-only");
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&file, perms).unwrap();
    std::fs::write(&file, "tampered\n").unwrap();
    let status = ws.status();
    let d = status.iter().find(|s| s.0 == "d").unwrap();
    assert!(d.2[0].starts_with("output-missing: output `out`"), "{d:?}");
    assert!(d.2[0].contains("damaged"), "{d:?}");
    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["d"]);
}

#[test]
fn a_failure_skips_downstream_and_keep_going_runs_the_rest() {
    let ws = Workspace::new("failure");
    let failing = CHAIN.replace(
        r#"cmd: echo "$CWM_PARAM_value" > "$CWM_OUT/a.txt""#,
        r#"cmd: echo "about to fail"; exit 7"#,
    );
    ws.pipeline(&failing);
    let out = ws.cwm(&["run", "--json", "--keep-going", "-j", "1"]);
    assert!(!out.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(names(&summary, "failed"), ["a"]);
    assert_eq!(names(&summary, "skipped"), ["b", "c"]);
    assert_eq!(names(&summary, "ran"), ["d"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("status 7"), "{stderr}");
    assert!(
        stderr.contains("about to fail"),
        "the log tail is shown: {stderr}"
    );
    assert!(ws.artifacts().join("failed/a.log").exists());
    // Nothing of the failed stage was committed.
    assert_eq!(
        std::fs::read_dir(ws.artifacts().join("keys"))
            .unwrap()
            .count(),
        1
    );
    ws.pipeline(CHAIN);
    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["a", "b", "c"]);
    assert_eq!(names(&run, "cached"), ["d"]);
}

#[test]
fn a_matrix_expands_to_named_cells_and_a_consumer_takes_them_all() {
    let ws = Workspace::new("matrix");
    ws.pipeline(
        r#"
vars:
  greeting: hello
stages:
  cell:
    uses: command
    matrix:
      x: [1, 2, 3]
    params:
      cmd: echo "${greeting} $CWM_PARAM_x" > "$CWM_OUT/v.txt"
  all:
    uses: command
    inputs: {runs: cell}
    params:
      cmd: for d in $CWM_IN_runs; do cat "$d/v.txt"; done > "$CWM_OUT/all.txt"; echo "$CWM_IN_runs_COUNT" > "$CWM_OUT/count.txt"
"#,
    );
    let run = ws.run_json(&[]);
    assert_eq!(
        names(&run, "ran"),
        ["cell[x=1]", "cell[x=2]", "cell[x=3]", "all"]
    );
    let show = ws.ok(&["show", "all"]);
    let path = show
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("path: "))
        .unwrap();
    let all = std::fs::read_to_string(std::path::Path::new(path).join("all.txt")).unwrap();
    assert_eq!(all, "hello 1\nhello 2\nhello 3\n");
    // One cell changes: only it and the consumer rerun.
    let run = ws.run_json(&["--force", "cell[x=2]"]);
    assert_eq!(names(&run, "ran"), ["cell[x=2]"]);
    let dag = ws.ok(&["dag"]);
    assert!(dag.contains("cell[x=3] (command)"), "{dag}");
    assert_eq!(dag.matches("-->").count(), 3, "{dag}");
    let dot = ws.ok(&["dag", "--format", "dot"]);
    assert!(dot.starts_with("digraph cwm {"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 3, "{dot}");
}

#[test]
fn independent_stages_run_in_parallel_within_the_job_limit() {
    let ws = Workspace::new("parallel");
    let then = "echo ok > \"$CWM_OUT/x\"";
    ws.pipeline(&format!(
        "stages:\n  p:\n    uses: command\n    params: {{cmd: '{}'}}\n  q:\n    uses: command\n    params: {{cmd: '{}'}}\n",
        meet(&ws, "p", "q", then),
        meet(&ws, "q", "p", then)
    ));
    let run = ws.run_json(&["-j", "2"]);
    assert_eq!(names(&run, "ran"), ["p", "q"]);
}

/// Two stages that claim every thread, ready together on two slots, run side by side on one
/// slot each; a stage claiming every thread alone gets both.
#[test]
fn stages_claiming_all_threads_share_the_slots_when_ready_together() {
    let ws = Workspace::new("share");
    let then = "echo $CWM_THREADS > \"$CWM_OUT/threads\"";
    ws.pipeline(&format!(
        "stages:\n  p:\n    uses: command\n    params: {{cmd: '{}', threads: 0}}\n  q:\n    uses: command\n    params: {{cmd: '{}', threads: 0}}\n  alone:\n    uses: command\n    inputs: {{a: p, b: q}}\n    params: {{cmd: '{then}', threads: 0}}\n",
        meet(&ws, "p", "q", then),
        meet(&ws, "q", "p", then)
    ));
    let run = ws.run_json(&["-j", "2"]);
    assert_eq!(names(&run, "ran"), ["p", "q", "alone"]);
    let threads = |stage: &str| {
        let show = ws.ok(&["show", stage]);
        let path = show
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("path: "))
            .unwrap()
            .to_owned();
        std::fs::read_to_string(std::path::Path::new(&path).join("threads")).unwrap()
    };
    assert_eq!(threads("p"), "1\n");
    assert_eq!(threads("q"), "1\n");
    assert_eq!(threads("alone"), "2\n");
}

#[test]
fn a_stage_killed_with_sigkill_leaves_nothing_finished_and_the_next_run_completes() {
    let ws = Workspace::new("sigkill");
    let go = ws.dir.join("go");
    ws.pipeline(&format!(
        "stages:\n  slow:\n    uses: command\n    params:\n      cmd: echo partial > \"$CWM_OUT/x\"; while [ ! -f {go} ]; do sleep 0.05; done; echo done >> \"$CWM_OUT/x\"\n  after:\n    uses: command\n    inputs: {{s: slow}}\n    params: {{cmd: cp \"$CWM_IN_s/x\" \"$CWM_OUT/\"}}\n",
        go = go.display()
    ));
    let mut child = cwm_command(&ws.dir, &["run"]).spawn().unwrap();
    // Wait until the stage has written part of its output.
    let deadline = Instant::now() + Duration::from_secs(20);
    let partial_written = loop {
        let found = staging_dirs(&ws)
            .iter()
            .any(|dir| dir.join("out/out/x").exists());
        if found || Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(partial_written, "the stage started writing");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_dir(ws.artifacts().join("keys"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(ws.artifacts().join("objects"))
            .unwrap()
            .count(),
        0
    );
    assert!(!ws.dir.join("cwm.lock").exists());
    let status = ws.status();
    assert_eq!(status[0].1, "stale");
    assert!(status[0].2[0].starts_with("never-run"));
    std::fs::write(&go, "").unwrap();
    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["slow", "after"]);
    // The dead run's temp directory was cleaned up.
    let leftovers = staging_dirs(&ws);
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn ls_lists_artifacts_with_sizes() {
    let ws = Workspace::new("ls");
    ws.pipeline(CHAIN);
    ws.run_json(&[]);
    let ls = ws.ok(&["ls"]);
    assert!(ls.contains("4 artifacts"), "{ls}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&ws.ok(&["ls", "--json"])).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["size"].as_u64().unwrap() > 0));
}

/// A `command` stage's shell line that marks `me` as started, waits (up to about 5 s, else
/// exits 9) for `other` to have started, then runs `then`: it only succeeds when both stages
/// run at the same time.
fn meet(ws: &Workspace, me: &str, other: &str, then: &str) -> String {
    format!(
        "touch {dir}/{me}.started; i=0; while [ ! -f {dir}/{other}.started ]; do i=$((i+1)); [ $i -gt 100 ] && exit 9; sleep 0.05; done; {then}",
        dir = ws.dir.display()
    )
}

/// The staging directories in the workspace's store (under `tmp/<host>/`).
fn staging_dirs(ws: &Workspace) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(ws.artifacts().join("tmp"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|host| {
            std::fs::read_dir(host.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.path())
        .collect()
}
