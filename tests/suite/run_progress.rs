//! What `cwm run` prints while it runs, when stderr is not a terminal (here: a pipe, as in CI
//! and log files): a line when an instance starts, one when it settles (with its duration), a
//! closing line, and never a terminal escape code.

use super::Workspace;

const PIPELINE: &str = r#"
stages:
  first:
    uses: command
    params:
      cmd: sleep 0.2; echo one > "$CWM_OUT/one.txt"
  second:
    uses: command
    inputs: {src: first}
    params:
      cmd: cat "$CWM_IN_src/one.txt" > "$CWM_OUT/two.txt"
"#;

/// `cwm ARGS` → (stdout, stderr), asserting success.
fn run(ws: &Workspace, args: &[&str]) -> (String, String) {
    let out = ws.cwm(args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    for stream in [&stdout, &stderr] {
        assert!(
            !stream.contains('\u{1b}') && !stream.contains('\r'),
            "{args:?}: an escape code or carriage return in {stream:?}"
        );
    }
    (stdout, stderr)
}

/// Whether `lines` has a `ran` line for `name` with a duration: `ran     NAME (12ms)`.
fn ran_with_duration(lines: &[&str], name: &str) -> bool {
    lines.iter().any(|l| {
        l.strip_prefix("ran     ")
            .and_then(|rest| rest.strip_prefix(name))
            .and_then(|rest| rest.strip_prefix(" ("))
            .is_some_and(|d| d.ends_with("ms)") || d.ends_with("s)"))
    })
}

#[test]
fn plain_lines_when_not_on_a_terminal() {
    let ws = Workspace::new("run-progress-plain");
    ws.pipeline(PIPELINE);
    let (stdout, _) = run(&ws, &["run"]);
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |line: &str| {
        lines
            .iter()
            .position(|l| *l == line)
            .unwrap_or_else(|| panic!("no line {line:?} in:\n{stdout}"))
    };
    assert!(at("running first") < at("running second"), "{stdout}");
    for name in ["first", "second"] {
        assert!(ran_with_duration(&lines, name), "{stdout}");
    }
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.starts_with("finished in ") && last.ends_with(": 2 ran, 0 cached, 0 failed"),
        "{stdout}"
    );

    // Nothing to run: the cached lines only, no start and no closing line.
    let (stdout, _) = run(&ws, &["run"]);
    assert_eq!(stdout, "cached  first\ncached  second\n");
}

#[test]
fn progress_none_json_and_failures() {
    let ws = Workspace::new("run-progress-modes");
    ws.pipeline(PIPELINE);
    let (stdout, _) = run(&ws, &["run", "--progress", "none"]);
    assert!(!stdout.contains("running "), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(ran_with_duration(&lines, "first"), "{stdout}");
    assert!(lines.last().is_some_and(|l| l.starts_with("finished in ")));

    // With --json, stdout is the JSON summary alone and the lines go to stderr.
    let (stdout, stderr) = run(&ws, &["run", "--json", "--force", "second"]);
    let summary: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(summary["ran"], serde_json::json!(["second"]));
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.contains(&"cached  first"), "{stderr}");
    assert!(lines.contains(&"running second"), "{stderr}");
    assert!(ran_with_duration(&lines, "second"), "{stderr}");

    // A failure counts in the closing line, and what depends on it is skipped.
    ws.pipeline(&PIPELINE.replace("sleep 0.2;", "exit 3;"));
    let out = ws.cwm(&["run", "--progress", "plain"]);
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(
        stdout.contains("running first\nfailed  first: "),
        "{stdout}"
    );
    assert!(
        stdout.contains("skipped second (`first` did not finish)"),
        "{stdout}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(": 0 ran, 0 cached, 1 failed, 1 skipped"),
        "{stdout}"
    );
}
