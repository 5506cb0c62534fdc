//! Store safety: concurrent runs, verify, gc, and SIGKILL at random moments.

use super::{Workspace, cwm_command, names};
use std::time::Duration;

/// A stage that counts its executions in a file outside the store.
fn counting_pipeline(ws: &Workspace) -> String {
    format!(
        "stages:\n  work:\n    uses: command\n    params:\n      cmd: echo run >> {count}; sleep 1; echo v > \"$CWM_OUT/v\"\n  next:\n    uses: command\n    inputs: {{w: work}}\n    params: {{cmd: cp \"$CWM_IN_w/v\" \"$CWM_OUT/\"}}\n",
        count = ws.dir.join("count.txt").display()
    )
}

#[test]
fn two_concurrent_runs_compute_each_key_once_and_agree() {
    let ws = Workspace::new("concurrent");
    ws.pipeline(&counting_pipeline(&ws));
    let a = cwm_command(&ws.dir, &["run", "--json"]).spawn().unwrap();
    // Start the second run once the first is inside the stage (holding its key).
    let started = std::time::Instant::now();
    while !ws.dir.join("count.txt").exists() && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let b = cwm_command(&ws.dir, &["run", "--json"]).output().unwrap();
    let a = a.wait_with_output().unwrap();
    assert!(a.status.success() && b.status.success(), "{a:?}\n{b:?}");
    let count = std::fs::read_to_string(ws.dir.join("count.txt")).unwrap();
    assert_eq!(
        count.lines().count(),
        1,
        "the stage ran once across both processes"
    );
    let b: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    assert!(names(&b, "ran").iter().all(|n| n != "work"), "{b}");
    let verify = ws.ok(&["verify", "--all"]);
    assert!(verify.contains("0 corrupt"), "{verify}");
}

#[test]
fn verify_quarantines_a_corrupt_artifact_and_the_next_run_rebuilds_it() {
    let ws = Workspace::new("verify");
    ws.pipeline(
        "stages:\n  a:\n    uses: command\n    params: {cmd: echo hello > \"$CWM_OUT/a.txt\"}\n",
    );
    ws.run_json(&[]);
    let clean = ws.ok(&["verify"]);
    assert!(clean.starts_with("verified 1 artifacts"), "{clean}");
    // Tamper with the artifact behind cwm's back, keeping size and mtime.
    let objects = ws.artifacts().join("objects");
    let dir = std::fs::read_dir(&objects)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let file = dir.join("data/a.txt");
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let mut perms = std::fs::metadata(&file).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&file, perms).unwrap();
    std::fs::write(&file, "HELLO\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let out = ws.cwm(&["verify", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["corrupt"].as_array().unwrap().len(), 1, "{report}");
    assert!(
        report["corrupt"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("content changed")
    );
    assert_eq!(std::fs::read_dir(&objects).unwrap().count(), 0);
    assert_eq!(
        std::fs::read_dir(ws.artifacts().join("quarantine"))
            .unwrap()
            .count(),
        1
    );
    let status = ws.status();
    assert!(status[0].2[0].starts_with("output-missing"), "{status:?}");
    assert_eq!(names(&ws.run_json(&[]), "ran"), ["a"]);
    assert!(ws.ok(&["verify"]).contains("0 corrupt"));
}

#[test]
fn gc_removes_only_what_nothing_refers_to() {
    let ws = Workspace::new("gc");
    let pipeline = |v: u32| {
        format!(
            "stages:\n  a:\n    uses: command\n    params: {{cmd: seq 1 {v}000 > \"$CWM_OUT/a.txt\"}}\n  b:\n    uses: command\n    inputs: {{i: a}}\n    params: {{cmd: wc -l < \"$CWM_IN_i/a.txt\" > \"$CWM_OUT/b.txt\"}}\n"
        )
    };
    ws.pipeline(&pipeline(1));
    ws.run_json(&[]);
    ws.pipeline(&pipeline(2));
    ws.run_json(&[]);
    let objects = || {
        std::fs::read_dir(ws.artifacts().join("objects"))
            .unwrap()
            .count()
    };
    assert_eq!(objects(), 4);
    // Everything is referenced by some key record: plain gc keeps it all.
    let out = ws.ok(&["gc"]);
    assert!(out.contains("removed 0 artifacts"), "{out}");
    // Keep the last two runs: still everything.
    assert!(
        ws.ok(&["gc", "--keep-last", "2"])
            .contains("removed 0 artifacts")
    );
    let dry = ws.ok(&["gc", "--keep-lock", "--dry-run"]);
    assert!(
        dry.contains("would remove 2 artifacts, 2 key records and 0 partial states"),
        "{dry}"
    );
    assert_eq!(objects(), 4);
    let out = ws.ok(&["gc", "--keep-lock"]);
    assert!(
        out.contains("removed 2 artifacts, 2 key records and 0 partial states, freeing"),
        "{out}"
    );
    assert_eq!(objects(), 2);
    assert!(ws.status().iter().all(|s| s.1 == "fresh"));
    assert!(names(&ws.run_json(&[]), "ran").is_empty());
    // The old results are gone: going back recomputes them.
    ws.pipeline(&pipeline(1));
    assert_eq!(names(&ws.run_json(&[]), "ran"), ["a", "b"]);
}

#[test]
fn sigkill_at_random_moments_never_leaves_a_corrupt_store() {
    let ws = Workspace::new("killtest");
    // Several stages writing files of different sizes, some in parallel.
    ws.pipeline(
        "stages:\n  big:\n    uses: command\n    matrix: {n: [1, 2, 3]}\n    params: {cmd: head -c ${n}000000 /dev/zero > \"$CWM_OUT/z\"; seq 1 20000 > \"$CWM_OUT/s\"}\n  sum:\n    uses: command\n    inputs: {b: big}\n    params: {cmd: for d in $CWM_IN_b; do wc -c < \"$d/z\"; done > \"$CWM_OUT/sizes\"}\n"
            .replace("${n}", "$CWM_PARAM_n")
            .as_str(),
    );
    let trials = super::kill_delays(12, 400, 0x2545_f491_4f6c_dd1d);
    let mut corrupt = 0;
    for (trial, delay) in trials.iter().enumerate() {
        let mut child = cwm_command(&ws.dir, &["run", "-j", "2"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(*delay));
        let _ = child.kill();
        let _ = child.wait();
        let out = ws.cwm(&["verify", "--all", "--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = report["corrupt"].as_array().map_or(0, Vec::len);
        corrupt += n;
        assert!(
            out.status.success(),
            "trial {trial} (kill after {delay} ms): {report}"
        );
        // Start over half of the time, so kills land early and late in runs.
        if trial % 2 == 1 {
            let _ = std::fs::remove_file(ws.dir.join("cwm.lock"));
            ws.ok(&["gc", "--keep-lock"]);
        }
    }
    eprintln!(
        "kill test: {} trials, {corrupt} corrupt results",
        trials.len()
    );
    assert_eq!(corrupt, 0);
    let run = ws.run_json(&[]);
    assert!(names(&run, "failed").is_empty(), "{run}");
    assert!(ws.status().iter().all(|s| s.1 == "fresh"));
    assert!(ws.ok(&["verify", "--all"]).contains("0 corrupt"));
}
