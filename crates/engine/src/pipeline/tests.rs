use super::*;
use crate::test_kinds::registry;

fn load_text(text: &str) -> Result<Pipeline, Diagnostics> {
    load_str(
        text,
        Path::new("p.yaml"),
        &registry(),
        &LoadOptions::default(),
    )
}

/// Load options with the one param override `ov`.
fn set(ov: Override) -> LoadOptions {
    LoadOptions {
        set: vec![ov],
        ..LoadOptions::default()
    }
}

fn errors(text: &str) -> Vec<String> {
    match load_text(text) {
        Ok(_) => panic!("expected errors"),
        Err(d) => d.0.iter().map(|d| d.to_string()).collect(),
    }
}

#[test]
fn matrix_expands_row_major_with_readable_names() {
    let p = load_text(
        "stages:\n  t:\n    uses: typed\n    params: {n: 1}\n    matrix:\n      arch: [slice, gdn]\n      lr: [0.1, 1]\n",
    )
    .unwrap();
    let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "t[arch=slice,lr=0.1]",
            "t[arch=slice,lr=1.0]",
            "t[arch=gdn,lr=0.1]",
            "t[arch=gdn,lr=1.0]"
        ]
    );
    assert_eq!(
        p.instances[1].params.get("lr"),
        Some(&ParamValue::Float(1.0))
    );
    assert_eq!(p.select(&Selector::parse("t")).len(), 4);
    assert_eq!(p.select(&Selector::parse("t[arch=gdn,lr=0.1]")), vec![2]);
}

#[test]
fn a_matrix_of_listed_cells_gives_one_instance_each() {
    // Cells in file order, keys in the first cell's order; a consumer with a product matrix
    // binds the cells whose shared keys agree.
    let p = load_text(
        "vars:\n  cells:\n    - {arch: gdn, n: 2}\nstages:\n  t:\n    uses: typed\n    matrix:\n      - {arch: slice, n: 1, lr: 0.5}\n      - {lr: 0.25, arch: gdn, n: 3}\n  u:\n    uses: typed\n    matrix: ${cells}\n  each:\n    uses: typed\n    params: {n: 9}\n    matrix: {arch: [gdn]}\n    inputs: {data: t.a}\n",
    )
    .unwrap();
    let names: Vec<&str> = p.instances.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "t[arch=slice,n=1,lr=0.5]",
            "t[arch=gdn,n=3,lr=0.25]",
            "u[arch=gdn,n=2]",
            "each[arch=gdn]"
        ]
    );
    assert_eq!(p.instances[1].params.get("n"), Some(&ParamValue::Int(3)));
    assert_eq!(
        p.instances[2].params.get("lr"),
        Some(&ParamValue::Float(0.1))
    );
    let each = &p.instances[3];
    assert_eq!(
        each.inputs["data"],
        vec![InputRef {
            producer: 1,
            output: "a".into()
        }]
    );
}

#[test]
fn listed_cells_must_agree_on_their_keys() {
    let errs = errors(
        "stages:\n  t:\n    uses: typed\n    matrix:\n      - {arch: slice, n: 1}\n      - {arch: gdn}\n      - 5\n      - {}\n      - {arch: slice, n: 1}\n      - {arch: nope, n: 1}\n",
    );
    assert_eq!(errs.len(), 5, "{errs:?}");
    assert!(errs[0].starts_with("p.yaml:6:9: every matrix cell must set the same params as the first (arch, n), this one sets arch"), "{errs:?}");
    assert!(
        errs[1].starts_with("p.yaml:7:9: a matrix cell must be a mapping, found"),
        "{errs:?}"
    );
    assert!(
        errs[2].starts_with("p.yaml:8:9: a matrix cell must set at least one param"),
        "{errs:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("matrix cell t[arch=slice,n=1] is listed twice")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.starts_with("p.yaml:10:16:")),
        "{errs:?}"
    );
    // A param in both a cell and `params` is an error, as for a product matrix.
    let errs =
        errors("stages:\n  t:\n    uses: typed\n    params: {n: 1}\n    matrix:\n      - {n: 2}\n");
    assert!(
        errs[0].contains("param `n` is set both in `params` and in `matrix`"),
        "{errs:?}"
    );
}

#[test]
fn vars_substitute_whole_values_and_inside_text() {
    let p = load_text(
        "vars:\n  n: 7\n  name: world\nstages:\n  t:\n    uses: typed\n    params: {n: \"${n}\"}\n  c:\n    uses: step\n    params: {cmd: \"echo hi ${name} $${HOME} $$x\"}\n",
    )
    .unwrap();
    assert_eq!(p.instances[0].params.get("n"), Some(&ParamValue::Int(7)));
    assert_eq!(
        p.instances[1].params.get("cmd"),
        Some(&ParamValue::Str("echo hi world ${HOME} $$x".into()))
    );
}

#[test]
fn defaults_fill_in_and_anchors_share_settings() {
    let p = load_text(
        "x-common: &common\n  n: 3\nstages:\n  t:\n    uses: typed\n    params: *common\n  u:\n    uses: typed\n    params:\n      <<: *common\n      lr: 0.5\n",
    )
    .unwrap();
    assert_eq!(
        p.instances[0].params.get("lr"),
        Some(&ParamValue::Float(0.1))
    );
    assert_eq!(p.instances[1].params.get("n"), Some(&ParamValue::Int(3)));
    assert_eq!(
        p.instances[1].params.get("lr"),
        Some(&ParamValue::Float(0.5))
    );
}

#[test]
fn inputs_bind_outputs_and_matching_matrix_cells() {
    let p = load_text(
        "stages:\n  src:\n    uses: typed\n    params: {n: 1}\n    matrix: {arch: [slice, gdn]}\n  each:\n    uses: typed\n    params: {n: 2}\n    matrix: {arch: [slice, gdn]}\n    inputs: {data: src.a}\n  all:\n    uses: typed\n    params: {n: 3}\n    inputs: {runs: src.b}\n",
    )
    .unwrap();
    let each_gdn = &p.instances[p.index_of("each[arch=gdn]").unwrap()];
    assert_eq!(
        each_gdn.inputs["data"],
        vec![InputRef {
            producer: 1,
            output: "a".into()
        }]
    );
    let all = &p.instances[p.index_of("all").unwrap()];
    assert_eq!(all.inputs["runs"].len(), 2);
}

#[test]
fn every_error_kind_is_located() {
    let errs = errors("stages:\n  a:\n    uses: nope\n");
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with(
            "p.yaml:3:11: unknown stage kind `nope`: expected one of hold, step, typed"
        ),
        "{errs:?}"
    );

    let errs = errors("stages:\n  a:\n    uses: typed\n    params: {n: ten}\n");
    assert!(
        errs[0].starts_with("p.yaml:4:17: param `n`: expected an integer, found string \"ten\""),
        "{errs:?}"
    );

    let errs = errors("stages:\n  a:\n    uses: typed\n    params: {n: 1, m: 2}\n");
    assert!(
        errs[0].starts_with(
            "p.yaml:4:20: unknown param `m` for stage kind `typed`: expected n, lr, arch"
        ),
        "{errs:?}"
    );

    let errs = errors("stages:\n  a:\n    uses: typed\n");
    assert!(
        errs[0].starts_with("p.yaml:2:3: stage `a` (kind `typed`) needs param `n`"),
        "{errs:?}"
    );

    let errs =
        errors("stages:\n  a:\n    uses: typed\n    params: {n: 1}\n    inputs: {data: ghost}\n");
    assert!(
        errs[0].starts_with("p.yaml:5:20: unknown input `ghost`: no stage named `ghost`"),
        "{errs:?}"
    );

    let errs = errors(
        "stages:\n  a:\n    uses: typed\n    params: {n: 1}\n  b:\n    uses: typed\n    params: {n: 1}\n    inputs: {data: a}\n",
    );
    assert!(
        errs[0].contains("has several outputs (a, b): write `a.<output>`"),
        "{errs:?}"
    );

    let errs =
        errors("stages:\n  a:\n    uses: typed\n    params: {n: 1}\n  a:\n    uses: typed\n");
    assert!(errs[0].starts_with("p.yaml:5:"), "{errs:?}");
    assert!(errs[0].to_lowercase().contains("duplicate"), "{errs:?}");

    let errs = errors("stages:\n  a:\n    uses: step\n    params: {cmd: \"${nope}\"}\n");
    assert!(
        errs[0].starts_with("p.yaml:4:19: unknown var `${nope}`"),
        "{errs:?}"
    );

    let errs = errors("stages:\n  a:\n    uses: typed\n    params: {n: 1}\n    colour: red\n");
    assert!(
        errs[0].starts_with("p.yaml:5:5: unknown key `colour`"),
        "{errs:?}"
    );

    let errs = errors("stages: [1, 2\n");
    assert!(errs[0].starts_with("p.yaml:"), "{errs:?}");
    assert!(errs[0].contains("invalid YAML"), "{errs:?}");
}

#[test]
fn several_errors_are_all_reported_in_file_order() {
    let errs = errors("stages:\n  a:\n    uses: typed\n    params: {n: x}\n  b:\n    uses: nope\n");
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].starts_with("p.yaml:4:"));
    assert!(errs[1].starts_with("p.yaml:6:"));
}

#[test]
fn overrides_apply_with_types_and_unknown_targets_fail() {
    let ov: Override = "t.n=5".parse().unwrap();
    let p = load_str(
        "stages:\n  t:\n    uses: typed\n    params: {n: 1}\n",
        Path::new("p.yaml"),
        &registry(),
        &set(ov),
    )
    .unwrap();
    assert_eq!(p.instances[0].params.get("n"), Some(&ParamValue::Int(5)));
    let ov: Override = "t[arch=gdn].lr=0.5".parse().unwrap();
    assert_eq!(ov.target.to_string(), "t[arch=gdn]");
    assert_eq!(ov.param, "lr");
    let bad: Override = "x.n=5".parse().unwrap();
    let err = load_str(
        "stages:\n  t:\n    uses: typed\n    params: {n: 1}\n",
        Path::new("p.yaml"),
        &registry(),
        &set(bad),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("no stage or instance named `x`"),
        "{err}"
    );
    let mistyped: Override = "t.n=five".parse().unwrap();
    let err = load_str(
        "stages:\n  t:\n    uses: typed\n    params: {n: 1}\n",
        Path::new("p.yaml"),
        &registry(),
        &set(mistyped),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("override `-s t.n`: param `n`: expected an integer"),
        "{err}"
    );
}

#[test]
fn arbitrary_yaml_never_panics() {
    let samples = [
        "",
        "~",
        "[]",
        "stages:",
        "stages: 3",
        "stages:\n  a: 1",
        "stages:\n  a:\n    uses: [x]",
        "stages:\n  a:\n    uses: typed\n    matrix: {n: []}",
        "stages:\n  a:\n    uses: typed\n    matrix: 5",
        "stages:\n  a:\n    uses: typed\n    params: {n: {x: 1}}",
        "stages:\n  a b:\n    uses: typed",
        "vars: [1]\nstages: {}",
        "stages:\n  a:\n    uses: typed\n    inputs: {data: [1, {x: 2}]}",
        "stages:\n  a:\n    uses: typed\n    params: {n: 99999999999999999999999}",
    ];
    for s in samples {
        let _ = load_text(s);
    }
}

#[test]
fn references_split_into_instance_and_output() {
    assert_eq!(split_reference("parse"), ("parse".to_owned(), None));
    assert_eq!(
        split_reference("parse.games"),
        ("parse".to_owned(), Some("games".to_owned()))
    );
    assert_eq!(
        split_reference("train[arch=slice,lr=0.5].model"),
        (
            "train[arch=slice,lr=0.5]".to_owned(),
            Some("model".to_owned())
        )
    );
    assert_eq!(
        split_reference("train[arch=slice]"),
        ("train[arch=slice]".to_owned(), None)
    );
}
