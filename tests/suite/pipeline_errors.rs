//! Every kind of pipeline error is reported by the binary with file:line:column,
//! before anything runs.

use super::Workspace;

/// Runs `cwm run` on `yaml` and returns stderr, asserting failure and that
/// nothing ran.
fn fails(name: &str, yaml: &str) -> String {
    let ws = Workspace::new(name);
    ws.pipeline(yaml);
    let out = ws.cwm(&["run"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!ws.artifacts().exists(), "nothing ran");
    let status = ws.cwm(&["status", "--json"]);
    assert_eq!(status.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn unknown_stage_kind() {
    let err = fails("err-kind", "stages:\n  a:\n    uses: pars\n");
    assert!(
        err.contains("pipeline.yaml:3:11: unknown stage kind `pars`: expected one of"),
        "{err}"
    );
}

#[test]
fn unknown_input() {
    let err = fails(
        "err-input",
        "stages:\n  a:\n    uses: command\n    params: {cmd: x}\n    inputs: {i: ghost}\n",
    );
    assert!(
        err.contains("pipeline.yaml:5:17: unknown input `ghost`: no stage named `ghost`"),
        "{err}"
    );
}

#[test]
fn cycle() {
    let err = fails(
        "err-cycle",
        "stages:\n  a:\n    uses: command\n    params: {cmd: x}\n    inputs: {i: b}\n  b:\n    uses: command\n    params: {cmd: x}\n    inputs: {i: a}\n",
    );
    assert!(
        err.contains(
            "pipeline.yaml:2:3: stage `a` is on a dependency cycle (stages involved: a, b)"
        ),
        "{err}"
    );
    assert!(
        err.contains("pipeline.yaml:6:3: stage `b` is on a dependency cycle"),
        "{err}"
    );
}

#[test]
fn duplicate_stage_name() {
    let err = fails(
        "err-dup",
        "stages:\n  a:\n    uses: command\n    params: {cmd: x}\n  a:\n    uses: command\n    params: {cmd: y}\n",
    );
    assert!(err.contains("pipeline.yaml:5:"), "{err}");
    assert!(err.to_lowercase().contains("duplicate"), "{err}");
}

#[test]
fn param_type_error() {
    let err = fails(
        "err-type",
        "stages:\n  a:\n    uses: command\n    params: {cmd: x, threads: many}\n",
    );
    assert!(
        err.contains(
            "pipeline.yaml:4:31: param `threads`: expected an integer, found string \"many\""
        ),
        "{err}"
    );
}

#[test]
fn missing_required_param() {
    let err = fails("err-missing", "stages:\n  a:\n    uses: command\n");
    assert!(
        err.contains("pipeline.yaml:2:3: stage `a` (kind `command`) needs param `cmd`"),
        "{err}"
    );
}

#[test]
fn unknown_var() {
    let err = fails(
        "err-var",
        "vars: {x: 1}\nstages:\n  a:\n    uses: command\n    params: {cmd: \"echo ${y}\"}\n",
    );
    assert!(
        err.contains("pipeline.yaml:5:19: unknown var `${y}` (declared vars: x"),
        "{err}"
    );
}

#[test]
fn invalid_yaml() {
    let err = fails("err-yaml", "stages:\n  a: [1, 2\n  b: 3\n");
    assert!(err.contains("pipeline.yaml:"), "{err}");
    assert!(err.contains("invalid YAML"), "{err}");
}

#[test]
fn all_errors_are_reported_at_once() {
    let err = fails(
        "err-many",
        "stages:\n  a:\n    uses: nope\n  b:\n    uses: command\n    params: {cmd: 1, colour: 2}\n",
    );
    assert!(
        err.contains("pipeline.yaml:3:11: unknown stage kind"),
        "{err}"
    );
    assert!(
        err.contains("pipeline.yaml:6:19: param `cmd`: expected a string, found integer 1"),
        "{err}"
    );
}

/// The shipped pipelines load, plan and report status without running anything:
/// the embedded default (the README's main job) and the paper's full protocol.
#[test]
fn shipped_pipelines_plan_and_report_status() {
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for (file, instances) in [("pipeline.yaml", 19), ("pipeline.paper.yaml", 1900)] {
        let ws = Workspace::new(&format!("shipped-{file}"));
        ws.pipeline(&std::fs::read_to_string(repo.join(file)).unwrap());
        let dag = ws.ok(&["dag"]);
        assert!(dag.contains("report"), "{file}: {dag}");
        let status = ws.status();
        assert!(
            status.len() >= instances,
            "{file}: {} instances",
            status.len()
        );
        assert!(status.iter().all(|s| s.1 != "fresh"), "{file}: nothing ran");
        assert!(
            status.iter().any(|s| s.0.starts_with("report")),
            "{file}: the report stage is planned"
        );
    }
}
