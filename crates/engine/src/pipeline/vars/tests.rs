use std::path::Path;

use cwm_stage::ParamValue;

use super::*;
use crate::pipeline::{Diagnostics, LoadOptions, Pipeline, load_str};
use crate::test_kinds::registry;

/// Vars at lines 2-4; `n` used at 9:10, `archs` at 11:13, `tag` inside the text at 14:19.
const PIPELINE: &str = "vars:
  archs: [slice, gdn]
  n: 1
  tag: base
stages:
  t:
    uses: typed
    params:
      n: ${n}
    matrix:
      arch: ${archs}
  c:
    uses: step
    params: {cmd: \"echo ${tag}\"}
";

fn assign(text: &str) -> VarAssignment {
    text.parse().unwrap()
}

fn vars_file(text: &str) -> VarsFile {
    VarsFile::parse(text, Path::new("v.yaml")).unwrap()
}

fn load(text: &str, files: Vec<VarsFile>, assignments: &[&str]) -> Result<Pipeline, Diagnostics> {
    let options = LoadOptions {
        set: Vec::new(),
        vars: VarOverrides {
            files,
            assignments: assignments.iter().map(|a| assign(a)).collect(),
        },
    };
    load_str(text, Path::new("p.yaml"), &registry(), &options)
}

fn errors(files: Vec<VarsFile>, assignments: &[&str]) -> Vec<String> {
    match load(PIPELINE, files, assignments) {
        Ok(_) => panic!("expected errors"),
        Err(d) => d.0.iter().map(ToString::to_string).collect(),
    }
}

/// What an instance's cache key is made of, by instance.
fn summary(p: &Pipeline) -> Vec<(String, String, String, Vec<std::path::PathBuf>)> {
    p.instances
        .iter()
        .map(|i| {
            let inputs = format!("{:?}", i.inputs);
            (i.name.clone(), i.params.canonical(), inputs, i.deps.clone())
        })
        .collect()
}

fn param(p: &Pipeline, instance: &str, name: &str) -> ParamValue {
    let i = p.index_of(instance).unwrap();
    p.instances[i].params.get(name).unwrap().clone()
}

#[test]
fn later_sources_win_file_then_vars_files_then_flags() {
    let p = load(PIPELINE, Vec::new(), &[]).unwrap();
    assert_eq!(param(&p, "t[arch=gdn]", "n"), ParamValue::Int(1));
    assert_eq!(param(&p, "c", "cmd"), ParamValue::Str("echo base".into()));

    let files = || {
        vec![
            vars_file("n: 2\ntag: one\n"),
            vars_file("# later file\nn: 3\n"),
        ]
    };
    let p = load(PIPELINE, files(), &[]).unwrap();
    assert_eq!(param(&p, "t[arch=gdn]", "n"), ParamValue::Int(3));
    assert_eq!(param(&p, "c", "cmd"), ParamValue::Str("echo one".into()));

    let p = load(PIPELINE, files(), &["n=4", "tag=flag", "n=5"]).unwrap();
    assert_eq!(param(&p, "t[arch=slice]", "n"), ParamValue::Int(5));
    assert_eq!(param(&p, "c", "cmd"), ParamValue::Str("echo flag".into()));
}

#[test]
fn a_list_var_as_matrix_axis_shrinks_the_instances_as_editing_the_file_would() {
    let full = load(PIPELINE, Vec::new(), &[]).unwrap();
    let names: Vec<&str> = full.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["t[arch=slice]", "t[arch=gdn]", "c"]);

    let by_flag = load(PIPELINE, Vec::new(), &["archs=[gdn]", "n=7"]).unwrap();
    let names: Vec<&str> = by_flag.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["t[arch=gdn]", "c"]);
    let edited = PIPELINE
        .replace("archs: [slice, gdn]", "archs: [gdn]")
        .replace("n: 1", "n: 7");
    let by_hand = load(&edited, Vec::new(), &[]).unwrap();
    assert_eq!(summary(&by_flag), summary(&by_hand));

    let by_file = load(PIPELINE, vec![vars_file("archs:\n  - gdn\nn: 7\n")], &[]).unwrap();
    assert_eq!(summary(&by_file), summary(&by_hand));
}

#[test]
fn unknown_names_are_errors_listing_the_declared_vars() {
    let errs = errors(Vec::new(), &["archz=[gdn]"]);
    assert_eq!(
        errs,
        [
            "p.yaml: `--var archz`: unknown var `archz`: overrides only set vars that p.yaml \
          declares (declared vars: archs, n, tag)"
        ]
    );
    let errs = errors(vec![vars_file("# typo below\narchs: [gdn]\nnn: 2\n")], &[]);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("v.yaml:3:1: unknown var `nn`: overrides only set vars that p.yaml"),
        "{errs:?}"
    );
    let err = load("stages: {}\n", Vec::new(), &["n=1"]).unwrap_err();
    assert!(err.to_string().ends_with("(no vars are declared)"), "{err}");
}

#[test]
fn problems_in_overriding_values_are_shown_where_the_value_was_given() {
    let errs = errors(Vec::new(), &["n=ten"]);
    assert_eq!(
        errs,
        ["p.yaml: `--var n`: param `n`: expected an integer, found string \"ten\""]
    );
    let errs = errors(vec![vars_file("archs: [gdn, tf]\n")], &[]);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("v.yaml:1:14: param `arch`: "),
        "{errs:?}"
    );
    let errs = errors(Vec::new(), &["archs=slice"]);
    assert!(
        errs[0].starts_with("p.yaml: `--var archs`: matrix `arch` must be a non-empty list"),
        "{errs:?}"
    );
    // Splicing a list into text is wrong where `${tag}` is written; the message says where
    // the list came from.
    let errs = errors(Vec::new(), &["tag=[a, b]"]);
    assert_eq!(
        errs,
        [
            "p.yaml:14:19: var `${tag}` is a list and cannot be spliced into text \
             (its value is given by `--var tag`)"
        ]
    );
    let errs = errors(vec![vars_file("\ntag: [a, b]\n")], &[]);
    assert!(
        errs[0].ends_with("(its value is given at v.yaml:2:6)"),
        "{errs:?}"
    );
}

#[test]
fn bad_vars_files_name_the_file_and_place() {
    let missing = std::env::temp_dir().join("cwm-no-such-dir/vars.yaml");
    let err = VarsFile::read(&missing).unwrap_err();
    assert!(matches!(err, VarsFileError::Read { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!(
            "{}: cannot read the vars file: ",
            missing.display()
        )),
        "{err}"
    );
    let parse = |text: &str| VarsFile::parse(text, Path::new("v.yaml")).unwrap_err();
    let err = parse("a: [1, 2\nb: 3\n");
    assert!(
        matches!(err, VarsFileError::Yaml { line, .. } if line >= 1),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("v.yaml:"), "{err}");
    assert!(
        err.to_string()
            .contains(": invalid YAML in the vars file: "),
        "{err}"
    );
    let err = parse("a: 1\na: 2\n");
    assert!(
        err.to_string().to_lowercase().contains("duplicate"),
        "{err}"
    );
    let err = parse("# a list\n- a\n- b\n");
    assert_eq!(
        err.to_string(),
        "v.yaml:2:1: a vars file must be a mapping of var names to values, found a list"
    );
    assert!(parse("42\n").to_string().ends_with("found an integer"));
    let empty = vars_file("# nothing set\n");
    assert_eq!(empty.names().count(), 0);
    assert_eq!(empty.path(), Path::new("v.yaml"));
}

#[test]
fn assignments_read_a_name_and_a_yaml_value() {
    let value = |text: &str| assign(text).value.value;
    assert_eq!(value("steps=20"), Node::Int(20));
    assert_eq!(
        value("url=data/x.pgn.zst"),
        Node::Str("data/x.pgn.zst".into())
    );
    assert_eq!(value("expr=a=b"), Node::Str("a=b".into()));
    match value("archs=[transformer, slice]") {
        Node::Seq(items) => {
            let items: Vec<&Node> = items.iter().map(|i| &i.value).collect();
            assert_eq!(
                items,
                [&Node::Str("transformer".into()), &Node::Str("slice".into())]
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(assign("archs=[a]").name(), "archs");
    for bad in ["steps", "=3", ""] {
        let err = bad.parse::<VarAssignment>().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("`{bad}`: expected NAME=VALUE (a var of the pipeline file, `=`, a YAML value)")
        );
    }
    let err = "archs=[a, b".parse::<VarAssignment>().unwrap_err();
    assert!(matches!(err, VarAssignmentError::Yaml { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("`archs=[a, b`: invalid YAML value"),
        "{err}"
    );
}
