//! What enters a cache key and what does not: thread counts stay out, the pipeline directory's
//! location stays out, and partial states belong to the store.

use std::process::Command;

use super::{Workspace, names};

const THREADED: &str = r#"
stages:
  a:
    uses: command
    params:
      cmd: echo "$CWM_PARAM_value" > "$CWM_OUT/a.txt"
      value: 1
      threads: 1
  games:
    uses: random_uniform
    params: {games: 20, seed: 3}
  tokens:
    uses: tokenize
    inputs: {games: games}
    params: {threads: 1}
"#;

/// `threads` and `-j` change how fast a stage runs, not what it writes: changing them reruns
/// nothing, for the command kind and for a kind with the shared `threads` param.
#[test]
fn thread_counts_do_not_enter_keys() {
    let ws = Workspace::new("keys-threads");
    ws.pipeline(THREADED);
    let first = ws.run_json(&["-j", "1"]);
    assert_eq!(names(&first, "ran"), ["a", "games", "tokens"]);
    let second = ws.run_json(&["-j", "2", "-s", "a.threads=2", "-s", "tokens.threads=2"]);
    assert!(names(&second, "ran").is_empty(), "{second}");
    ws.pipeline(&THREADED.replace("threads: 1", "threads: 0"));
    let third = ws.run_json(&["--threads", "2"]);
    assert!(names(&third, "ran").is_empty(), "{third}");
    assert!(ws.status().iter().all(|(_, state, _)| state == "fresh"));
}

const WITH_DEPS: &str = r#"
stages:
  a:
    uses: command
    deps: [inputs/table.txt]
    params:
      cmd: sort inputs/table.txt > "$CWM_OUT/sorted.txt"
  b:
    uses: command
    inputs: {src: a}
    params:
      cmd: wc -l < "$CWM_IN_src/sorted.txt" > "$CWM_OUT/count.txt"
"#;

/// Copying a pipeline directory, store included, elsewhere keeps every artifact fresh: no
/// absolute path enters a key.
#[test]
fn a_copied_pipeline_directory_stays_fresh() {
    let ws = Workspace::new("keys-copy");
    ws.pipeline(WITH_DEPS);
    ws.write("inputs/table.txt", "b\na\nc\n");
    let first = ws.run_json(&[]);
    assert_eq!(names(&first, "ran"), ["a", "b"]);
    let copy = Workspace::new("keys-copy-elsewhere");
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", ws.dir.display()))
        .arg(&copy.dir)
        .status()
        .expect("run cp");
    assert!(status.success());
    let states = copy.status();
    assert!(
        states.iter().all(|(_, state, _)| state == "fresh"),
        "{states:?}"
    );
    let run = copy.run_json(&[]);
    assert!(names(&run, "ran").is_empty(), "{run}");
}

const RESUMABLE: &str = r#"
stages:
  a:
    uses: command
    params:
      cmd: mkdir -p "$CWM_PARTIAL" && echo step > "$CWM_PARTIAL/state" && test -e "$CWM_PARAM_flag"
      flag: go
"#;

/// The partial state of a stage lives in the store under its key: a failed run leaves it for
/// the next run, `cwm gc` keeps it while the stage is stale with that key and removes it once
/// no stale instance has the key, and a successful run removes its own.
#[test]
fn partial_states_belong_to_the_store_and_gc_removes_abandoned_ones() {
    let ws = Workspace::new("keys-partial");
    ws.pipeline(RESUMABLE);
    assert!(
        !ws.cwm(&["run"]).status.success(),
        "no `go` file yet: a fails"
    );
    let partials = || -> Vec<String> {
        std::fs::read_dir(ws.artifacts().join("partial"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let kept = partials();
    assert_eq!(kept.len(), 1, "a failed run leaves its partial state");
    let gc = ws.ok(&["gc"]);
    assert!(gc.contains("0 partial states"), "{gc}");
    assert_eq!(
        partials(),
        kept,
        "gc keeps the state a stale stage may resume"
    );

    ws.pipeline(&RESUMABLE.replace("flag: go", "flag: pipeline.yaml"));
    let gc = ws.ok(&["gc", "--dry-run"]);
    assert!(
        gc.contains("would remove 0 artifacts, 0 key records and 1 partial states"),
        "{gc}"
    );
    assert_eq!(partials(), kept, "a dry run removes nothing");
    let gc = ws.ok(&["gc"]);
    assert!(gc.contains("1 partial states"), "{gc}");
    assert!(
        partials().is_empty(),
        "no stale instance has the old key any more"
    );

    let run = ws.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["a"]);
    assert!(
        partials().is_empty(),
        "a committed result removes its partial state"
    );
}
