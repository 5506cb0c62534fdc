//! `--var NAME=VALUE` and `--vars FILE` override the pipeline file's `vars:` on `cwm status` and
//! `cwm run`: the instances follow (a list var is a matrix axis), the keys are those of the file
//! edited by hand, and a name the file does not declare is an error naming it.

use super::{Workspace, names};

const PIPELINE: &str = r#"
vars:
  archs: [a, b, c]
  steps: 1
stages:
  gen:
    uses: command
    params:
      cmd: echo "${steps}" > "$CWM_OUT/steps.txt"
    matrix:
      arch: ${archs}
"#;

/// `cwm status --json ARGS` → (instance, state) rows.
fn status(ws: &Workspace, args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["status", "--json"];
    all.extend_from_slice(args);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&ws.ok(&all)).expect("JSON");
    rows.iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (field("stage"), field("state"))
        })
        .collect()
}

fn instances(ws: &Workspace, args: &[&str]) -> Vec<String> {
    status(ws, args).into_iter().map(|(name, _)| name).collect()
}

/// `cwm ARGS` fails with exit code 2; its stderr.
fn fails(ws: &Workspace, args: &[&str]) -> String {
    let out = ws.cwm(args);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn var_overrides_change_the_instances_and_keys_as_editing_the_file_would() {
    let ws = Workspace::new("vars-override");
    ws.pipeline(PIPELINE);
    let all = ["gen[arch=a]", "gen[arch=b]", "gen[arch=c]"];
    assert_eq!(instances(&ws, &[]), all);
    assert_eq!(instances(&ws, &["--var", "archs=[b]"]), ["gen[arch=b]"]);
    ws.write("v1.yaml", "# the second and last\narchs: [c, b]\n");
    ws.write("v2.yaml", "archs: [c]\n");
    assert_eq!(
        instances(&ws, &["--vars", "v1.yaml"]),
        ["gen[arch=c]", "gen[arch=b]"]
    );
    // Later files win over earlier ones, `--var` over every file.
    let both = ["--vars", "v1.yaml", "--vars", "v2.yaml"];
    assert_eq!(instances(&ws, &both), ["gen[arch=c]"]);
    let with_flag = [&both[..], &["--var", "archs=[a]"]].concat();
    assert_eq!(instances(&ws, &with_flag), ["gen[arch=a]"]);

    let summary = ws.run_json(&["--var", "archs=[b]", "--var", "steps=2"]);
    assert_eq!(names(&summary, "ran"), ["gen[arch=b]"]);
    let fresh = |rows: Vec<(String, String)>| -> Vec<String> {
        rows.into_iter()
            .filter(|(_, state)| state == "fresh")
            .map(|(name, _)| name)
            .collect()
    };
    assert_eq!(
        fresh(status(&ws, &["--var", "archs=[b]", "--var", "steps=2"])),
        ["gen[arch=b]"]
    );
    assert!(fresh(status(&ws, &["--var", "archs=[b]"])).is_empty());
    // The same values written into the file: the same key, so the result is fresh.
    ws.pipeline(&PIPELINE.replace("steps: 1", "steps: 2"));
    assert_eq!(fresh(status(&ws, &[])), ["gen[arch=b]"]);
    assert_eq!(instances(&ws, &[]), all);
}

#[test]
fn unknown_vars_and_bad_overrides_fail_with_clear_messages() {
    let ws = Workspace::new("vars-errors");
    ws.pipeline(PIPELINE);
    let err = fails(&ws, &["status", "--var", "archz=[b]"]);
    assert!(
        err.contains("`--var archz`: unknown var `archz`")
            && err.contains("(declared vars: archs, steps)"),
        "{err}"
    );
    ws.write("typo.yaml", "archs: [a]\nstepz: 3\n");
    let err = fails(&ws, &["status", "--vars", "typo.yaml"]);
    assert!(err.contains("typo.yaml:2:1: unknown var `stepz`"), "{err}");
    let err = fails(&ws, &["status", "--var", "archs"]);
    assert!(err.contains("`archs`: expected NAME=VALUE"), "{err}");
    ws.write("bad.yaml", "archs: [a\n");
    let err = fails(&ws, &["status", "--vars", "bad.yaml"]);
    assert!(err.contains("bad.yaml:1:"), "{err}");
    assert!(err.contains("invalid YAML in the vars file"), "{err}");
    ws.write("list.yaml", "- archs\n");
    let err = fails(&ws, &["dag", "--vars", "list.yaml"]);
    assert!(
        err.contains("list.yaml:1:1: a vars file must be a mapping"),
        "{err}"
    );
    let err = fails(&ws, &["status", "--vars", "missing.yaml"]);
    assert!(
        err.contains("missing.yaml: cannot read the vars file"),
        "{err}"
    );
    let err = fails(&ws, &["run", "--var", "steps=[1, 2]"]);
    assert!(
        err.contains("pipeline.yaml:9:") && err.contains("(its value is given by `--var steps`)"),
        "{err}"
    );
    assert!(!ws.artifacts().exists(), "nothing ran");
}
