//! `cwm model bench`, the comparison of its figures with a PyTorch stack
//! (`benches/python/compare_stacks.py`), and output into a closed pipe, through the real binary.

use std::path::Path;
use std::process::{Command, Stdio};

use cwm_testkit::require_python;

use super::{Workspace, bench_script, cwm_command};

/// `model bench`'s arguments for `arch` at batch 2 × 16 tokens, one thread, one warm-up step
/// and `steps` timed ones, in JSON.
fn small_bench<'a>(arch: &'a str, steps: &'a str) -> [&'a str; 15] {
    [
        "--threads",
        "1",
        "model",
        "bench",
        "--arch",
        arch,
        "--batch",
        "2",
        "--seq",
        "16",
        "--warmup",
        "1",
        "--steps",
        steps,
        "--json",
    ]
}

/// Settings the command does not know, or cannot honour on the device, are refused before any
/// step: unknown names by the argument parser (exit 2), cuBLAS's products off CUDA with a reason.
#[test]
fn model_bench_refuses_settings_it_cannot_take() {
    let ws = Workspace::new("model-bench-refusals");
    let args = small_bench("slice_diag", "1");
    for (flag, value, what) in [
        ("--attention", "flash", "an unknown attention"),
        (
            "--column-sums",
            "halves",
            "an unknown way of summing columns",
        ),
        ("--fusion-blocks", "0", "a search of 0 blocks"),
        ("--products", "cudnn", "an unknown maker of products"),
    ] {
        let refused = ws.cwm(&[&args[..], &[flag, value]].concat());
        assert_eq!(refused.status.code(), Some(2), "{what} is refused");
    }
    for products in ["cublas", "cublas-async"] {
        let cublas = ws.cwm(&[&args[..], &["--products", products]].concat());
        let err = String::from_utf8_lossy(&cublas.stderr);
        assert!(
            !cublas.status.success()
                && err.contains(&format!(
                    "--products {products} multiplies on device cuda only"
                )),
            "cuBLAS's products ({products}) are refused on the CPU: {err}"
        );
    }
}

#[test]
fn model_bench_reports_the_training_throughput_of_a_small_batch() {
    let ws = Workspace::new("model-bench");
    let args = small_bench("slice_diag", "3");
    let stdout = ws.ok(&args);
    let figures: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(figures["arch"], "slice_diag");
    assert_eq!(figures["device"], "cpu");
    assert_eq!(figures["threads"], 1);
    assert_eq!(figures["step_s"].as_array().map(Vec::len), Some(3));
    assert_eq!(figures["queued_s"].as_array().map(Vec::len), Some(3));
    let tokens_per_s = figures["tokens_per_s"].as_f64().expect("tokens_per_s");
    let median = figures["median_step_s"].as_f64().expect("median_step_s");
    assert!((tokens_per_s * median - 32.0).abs() < 1e-6, "{figures}");
    let loss = figures["last_loss"].as_f64().expect("last_loss");
    assert!((1.0..6.0).contains(&loss), "{figures}");
    // The CPU's default chunk for SLiCE, unless the command sets one.
    assert_eq!(figures["chunk_size"], 8, "{figures}");
    assert!(
        figures["peak_reserved_bytes"].is_null(),
        "no pool report on the CPU"
    );
    // No cubecl device made, so no fusion search chosen, unless the command chooses one, and
    // no passage from chunk to chunk.
    assert!(figures["fusion_blocks"].is_null(), "{figures}");
    assert!(figures["delta_chunks"].is_null(), "{figures}");
    assert!(figures["column_sums"].is_null(), "{figures}");
    assert!(figures["products"].is_null(), "{figures}");
    assert_eq!(figures["attention"], "operations", "{figures}");
    let blocks = [
        &args[..],
        &[
            "--fusion-blocks",
            "2",
            "--attention",
            "kernels",
            "--delta-chunks",
            "operations",
            "--column-sums",
            "single",
            "--products",
            "cubecl",
        ],
    ]
    .concat();
    let figures: serde_json::Value = serde_json::from_str(&ws.ok(&blocks)).expect("JSON");
    assert_eq!(figures["fusion_blocks"], "2", "{figures}");
    assert_eq!(figures["delta_chunks"], "operations", "{figures}");
    assert_eq!(figures["column_sums"], "single", "{figures}");
    assert_eq!(figures["products"], "cubecl", "{figures}");
    assert_eq!(figures["attention"], "kernels", "{figures}");
    let mut chunked = args.to_vec();
    chunked.extend(["--chunk-size", "3"]);
    let figures: serde_json::Value = serde_json::from_str(&ws.ok(&chunked)).expect("JSON");
    assert_eq!(figures["chunk_size"], 3, "{figures}");
    let zero = ws.cwm(&[&args[..], &["--chunk-size", "0"]].concat());
    assert_eq!(zero.status.code(), Some(2), "a chunk of 0 steps is refused");
    // The CPU's loss kernel unless the command names one.
    assert_eq!(figures["loss"], "fused-cpu", "{figures}");
    assert_eq!(figures["update"], "one-pass", "{figures}");
    let device_loss = [&args[..], &["--loss", "fused-device"]].concat();
    let figures: serde_json::Value = serde_json::from_str(&ws.ok(&device_loss)).expect("JSON");
    assert_eq!(figures["loss"], "fused-device", "{figures}");
    let loss = figures["last_loss"].as_f64().expect("last_loss");
    assert!((1.0..6.0).contains(&loss), "{figures}");
    let unknown = ws.cwm(&[&args[..], &["--loss", "fused"]].concat());
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "an unknown kernel is refused"
    );
    // The optimizer's update as separate operations: the same arithmetic, so on the CPU the
    // same loss after the updates, to the last bit.
    let one_pass: serde_json::Value = serde_json::from_str(&ws.ok(&args)).expect("JSON");
    let by_ops = [&args[..], &["--update", "ops"]].concat();
    let by_ops: serde_json::Value = serde_json::from_str(&ws.ok(&by_ops)).expect("JSON");
    assert_eq!(by_ops["update"], "ops", "{by_ops}");
    assert_eq!(
        by_ops["last_loss"], one_pass["last_loss"],
        "{by_ops} {one_pass}"
    );
    let unknown = ws.cwm(&[&args[..], &["--update", "fused"]].concat());
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "an unknown update is refused"
    );
}

/// After the timed steps, steps with a wait after each phase: three by default, none with
/// `--phase-steps 0` or under the kernel profiler; they come after the timed steps, so the last
/// timed loss is the same either way (the CPU's steps are bit-identical from run to run).
#[test]
fn model_bench_times_each_phase_of_a_few_steps_after_the_timed_ones() {
    let ws = Workspace::new("model-bench-phases");
    let args = small_bench("transformer", "2");
    let figures: serde_json::Value = serde_json::from_str(&ws.ok(&args)).expect("JSON");
    let phases = figures["phase_s"].as_array().expect("phase_s");
    assert_eq!(phases.len(), 3, "{figures}");
    for step in phases {
        for phase in ["forward_s", "loss_s", "backward_s", "update_s"] {
            let seconds = step[phase].as_f64().unwrap_or(-1.0);
            assert!(seconds > 0.0, "{phase} of {step}");
        }
    }
    let none = [&args[..], &["--phase-steps", "0"]].concat();
    let without: serde_json::Value = serde_json::from_str(&ws.ok(&none)).expect("JSON");
    assert_eq!(without["phase_s"], serde_json::json!([]), "{without}");
    assert_eq!(without["last_loss"], figures["last_loss"], "{without}");
    // Under cubecl's kernel profiler, none unless asked for: the log's last tables are then
    // the timed steps (`kernel_profile.py`).
    let profiled = cwm_command(&ws.dir, &args)
        .env("CWM_KERNEL_PROFILE", "profile.log")
        .output()
        .expect("run cwm");
    assert!(profiled.status.success(), "{profiled:?}");
    let profiled: serde_json::Value = serde_json::from_slice(&profiled.stdout).expect("JSON");
    assert_eq!(profiled["phase_s"], serde_json::json!([]), "{profiled}");
    let sentence = ws.ok(&args[..args.len() - 1]);
    assert!(
        sentence.contains("by phases, the median of 3 step(s)") && sentence.contains("update "),
        "{sentence}"
    );
}

/// Runs `compare_stacks.py` on the CPU at a toy shape, two rounds unless `extra` says
/// otherwise; returns (exit status, stdout, stderr).
fn compare_stacks(
    ws: &Workspace,
    families: &str,
    json_out: &Path,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/python/compare_stacks.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--cwm", env!("CARGO_BIN_EXE_cwm"), "--families", families])
        .args(["--sizes", "d128", "--batch", "2", "--seq", "8"])
        .args(["--warmup", "0", "--steps", "1", "--rounds", "2"])
        .arg("--json-out")
        .arg(json_out)
        .args(extra)
        .current_dir(&ws.dir)
        .output()
        .expect("run python3");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Whether PyTorch and torch-slices (the reference's SLiCE) are there, as `require_python`.
fn torch_and_slices() -> bool {
    require_python(
        "torch, slices",
        "pip install torch==2.15.0 torch-slices==0.3.3",
    )
}

/// Runs the Python `script` with `crates/models/python` (the reference stack's module) on the
/// path; returns its stdout and stderr once it succeeded.
fn reference_stack_script(script: &str) -> (String, String) {
    let out = Command::new("python3")
        .args(["-c", script])
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/models/python"),
        )
        .output()
        .expect("run python3");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The line of `table` for `family` at d128, split into trimmed cells.
fn table_row<'a>(table: &'a str, family: &str) -> Vec<&'a str> {
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("| {family} | d128 |")))
        .unwrap_or_else(|| panic!("no row for {family}:\n{table}"));
    row.split('|').map(str::trim).collect()
}

#[test]
fn the_stack_comparison_puts_cwm_beside_the_reference_stack() {
    if !torch_and_slices() {
        return;
    }
    let ws = Workspace::new("compare-stacks");
    let json_out = ws.dir.join("figures.jsonl");
    // One warm-up step, for the column of cwm's first one.
    let (code, stdout, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &["--warmup", "1"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&json_out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // Two rounds in alternating order: cwm, torch, then torch, cwm.
    let sides: Vec<_> = lines.iter().map(|l| l["side"].as_str().unwrap()).collect();
    assert_eq!(sides, ["cwm", "torch", "torch", "cwm"], "{lines:?}");
    assert!(lines.iter().all(|l| l["batch"] == 2 && l["seq"] == 8));
    assert_eq!(lines[1]["stack"], "reference");
    assert_eq!(lines[1]["step"], "reference", "the reference's read-backs");
    assert_eq!(lines[0]["precision"], "f32", "slice_diag has no bf16 path");
    let median = |side: &str| {
        let v: Vec<f64> = lines
            .iter()
            .filter(|l| l["side"] == side)
            .map(|l| l["tokens_per_s"].as_f64().unwrap())
            .collect();
        (v[0] + v[1]) / 2.0
    };
    let cells = table_row(&stdout, "slice_diag");
    let ratio = format!("{:.2}×", median("cwm") / median("torch"));
    assert_eq!(cells[5], ratio, "{cells:?}");
    assert!(
        cells[8].starts_with("cwm f32, fused-cpu loss, one-pass update; PyTorch "),
        "{cells:?}"
    );
    assert_eq!(
        cells[3].replace(',', ""),
        format!("{:.0}", median("cwm")),
        "{cells:?}"
    );
    // cwm's first warm-up step, the median over its two processes (blank without warm-up
    // steps, as in the tests below).
    let cwm_lines: Vec<&serde_json::Value> = lines.iter().filter(|l| l["side"] == "cwm").collect();
    let firsts: Vec<f64> = cwm_lines
        .iter()
        .map(|l| l["warmup_s"][0].as_f64().unwrap())
        .collect();
    assert_eq!(
        cells[9],
        format!("{:.1}", (firsts[0] + firsts[1]) / 2.0),
        "{cells:?}"
    );
    // The last: the share of the step the host took to record forward and backward passes,
    // the median over the two processes of each one's median over its steps.
    let share = |l: &serde_json::Value| {
        let mut shares: Vec<f64> = l["queued_s"]
            .as_array()
            .unwrap()
            .iter()
            .zip(l["step_s"].as_array().unwrap())
            .map(|(q, s)| q.as_f64().unwrap() / s.as_f64().unwrap())
            .collect();
        shares.sort_by(f64::total_cmp);
        let n = shares.len();
        if n % 2 == 1 {
            shares[n / 2]
        } else {
            (shares[n / 2 - 1] + shares[n / 2]) / 2.0
        }
    };
    let expected = (share(cwm_lines[0]) + share(cwm_lines[1])) / 2.0;
    assert_eq!(cells[10], format!("{:.0} %", 100.0 * expected), "{cells:?}");
    assert_phase_row(&stdout, &lines);
}

/// The phase table's row for slice_diag in `table`: each phase's milliseconds per side, the
/// median over `lines`' two rounds of each process's median over its three steps by phases,
/// and PyTorch's over cwm's.
fn assert_phase_row(table: &str, lines: &[serde_json::Value]) {
    let (_, phases) = table
        .split_once("Where a step's time goes")
        .unwrap_or_else(|| panic!("no phase table:\n{table}"));
    let cells = table_row(phases, "slice_diag");
    for (i, phase) in ["forward_s", "loss_s", "backward_s", "update_s"]
        .iter()
        .enumerate()
    {
        let side = |side: &str| {
            let medians: Vec<f64> = lines
                .iter()
                .filter(|l| l["side"] == side)
                .map(|l| {
                    let mut v: Vec<f64> = l["phase_s"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p[phase].as_f64().unwrap())
                        .collect();
                    assert_eq!(v.len(), 3, "{l}");
                    v.sort_by(f64::total_cmp);
                    v[1]
                })
                .collect();
            (medians[0] + medians[1]) / 2.0
        };
        let (ours, theirs) = (side("cwm"), side("torch"));
        let want = [
            format!("{:.1}", 1000.0 * ours),
            format!("{:.1}", 1000.0 * theirs),
            format!("{:.2}×", theirs / ours),
        ];
        assert_eq!(
            cells[3 + 3 * i..6 + 3 * i]
                .iter()
                .map(|c| c.replace(',', ""))
                .collect::<Vec<_>>(),
            want,
            "{phase}: {cells:?}"
        );
    }
}

#[test]
fn a_stack_comparison_resumes_from_its_file_and_ends_within_its_budget() {
    if !torch_and_slices() {
        return;
    }
    let ws = Workspace::new("compare-stacks-resume");
    let json_out = ws.dir.join("figures.jsonl");
    let one_round = ["--rounds", "1"];
    let (code, first, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &one_round);
    assert_eq!(code, Some(0), "{first}\n{stderr}");
    let recorded = std::fs::read_to_string(&json_out).unwrap();
    let line: serde_json::Value = serde_json::from_str(recorded.lines().next().unwrap()).unwrap();
    assert_eq!(line["cell"]["family"], "slice_diag", "{line}");
    assert_eq!(line["cell"]["stack"], "reference", "{line}");

    // Everything is in the file: nothing runs and the row is the first run's.
    let resume = ["--rounds", "1", "--resume"];
    let (code, again, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &resume);
    assert_eq!(code, Some(0), "{again}\n{stderr}");
    assert!(
        !stderr.contains("round 1:"),
        "a process ran again:\n{stderr}"
    );
    assert_eq!(
        table_row(&again, "slice_diag"),
        table_row(&first, "slice_diag")
    );
    assert_eq!(std::fs::read_to_string(&json_out).unwrap(), recorded);

    // A variant of cwm's step: cwm's process runs again, PyTorch's line is reused.
    let variant = [
        "--rounds",
        "1",
        "--resume",
        "--cwm-args=--loss fused-device",
    ];
    let (code, out, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &variant);
    assert_eq!(code, Some(0), "{out}\n{stderr}");
    assert!(stderr.contains("round 1: cwm"), "{stderr}");
    assert!(!stderr.contains("round 1: torch"), "{stderr}");
    let cells = table_row(&out, "slice_diag");
    assert!(
        cells[8].starts_with("cwm f32, fused-device loss, one-pass update; PyTorch "),
        "{cells:?}"
    );
    assert_eq!(
        cells[4],
        table_row(&first, "slice_diag")[4],
        "PyTorch's figure"
    );
    let text = std::fs::read_to_string(&json_out).unwrap();
    let added: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(added["cell"]["cwm_args"], "--loss fused-device", "{added}");
    assert_eq!(added["loss"], "fused-device", "{added}");

    // No time left: the recorded cell is still shown, the new one is not run (status 3).
    let budget = ["--rounds", "1", "--resume", "--budget-s", "0.000001"];
    let (code, out, stderr) = compare_stacks(&ws, "slice_diag,transformer", &json_out, &budget);
    assert_eq!(code, Some(3), "{out}\n{stderr}");
    assert_eq!(
        table_row(&out, "slice_diag"),
        table_row(&first, "slice_diag")
    );
    assert_eq!(
        table_row(&out, "transformer")[3],
        "not run: the time budget ran out"
    );
    assert!(stderr.contains("--resume to go on"), "{stderr}");

    // A process still running at the budget's end is stopped, and stderr says which and when
    // (PyTorch's import alone outlasts this budget).
    let short = ["--rounds", "1", "--budget-s", "0.3"];
    let fresh = ws.dir.join("short.jsonl");
    let (code, out, stderr) = compare_stacks(&ws, "transformer", &fresh, &short);
    assert_eq!(code, Some(3), "{out}\n{stderr}");
    assert!(
        stderr.contains(" stopped at the budget's end after "),
        "{stderr}"
    );

    // A process past --timeout fails its cell (status 1).
    let timeout = ["--rounds", "1", "--timeout", "0.01"];
    let (code, out, stderr) = compare_stacks(&ws, "transformer", &json_out, &timeout);
    assert_eq!(code, Some(1), "{out}\n{stderr}");
    assert_eq!(
        table_row(&out, "transformer")[3],
        "failed: timed out after 0.01 s (--timeout)"
    );
}

#[test]
fn a_variable_in_cwm_s_environment_is_a_variant_of_its_own() {
    if !torch_and_slices() {
        return;
    }
    let ws = Workspace::new("compare-stacks-env");
    let json_out = ws.dir.join("figures.jsonl");
    let (code, first, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &["--rounds", "1"]);
    assert_eq!(code, Some(0), "{first}\n{stderr}");

    // The real binary, through a wrapper that notes what it was given, runs again;
    // PyTorch's line is reused.
    let wrapper = ws.dir.join("cwm-noting-its-environment");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$CUBECL_AUTOTUNE_SHORT_CIRCUIT\" >> \"$0.seen\"\nexec '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_cwm")
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let with_env = [
        "--rounds",
        "1",
        "--resume",
        "--cwm-env",
        "CUBECL_AUTOTUNE_SHORT_CIRCUIT=1",
        "--cwm",
        wrapper.to_str().unwrap(),
    ];
    let (code, out, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &with_env);
    assert_eq!(code, Some(0), "{out}\n{stderr}");
    assert!(stderr.contains("round 1: cwm"), "{stderr}");
    assert!(!stderr.contains("round 1: torch"), "{stderr}");
    assert!(
        out.contains("; cwm's CUBECL_AUTOTUNE_SHORT_CIRCUIT=1"),
        "{out}"
    );
    let seen = std::fs::read_to_string(ws.dir.join("cwm-noting-its-environment.seen")).unwrap();
    assert_eq!(seen, "1\n");
    let text = std::fs::read_to_string(&json_out).unwrap();
    let added: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        added["cell"]["cwm_env"]["CUBECL_AUTOTUNE_SHORT_CIRCUIT"], "1",
        "{added}"
    );
    let (code, _, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &["--cwm-env", "X"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("'X' is not NAME=VALUE"), "{stderr}");
}

/// The JSON lines of `path` whose side is `side`.
fn lines_of_side(path: &Path, side: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["side"] == side)
        .collect()
}

#[test]
fn a_stack_comparison_prewarms_cwm_s_cells_side_by_side_and_only_once() {
    if !torch_and_slices() {
        return;
    }
    let ws = Workspace::new("compare-stacks-prewarm");
    let json_out = ws.dir.join("figures.jsonl");
    let families = "slice_diag,transformer";
    let only = ["--rounds", "1", "--prewarm", "2", "--prewarm-only"];
    let (code, table, stderr) = compare_stacks(&ws, families, &json_out, &only);
    assert_eq!(code, Some(0), "{table}\n{stderr}");
    assert!(
        table.contains("2 at a time, CWM_KERNEL_TUNING=off"),
        "{table}"
    );
    for family in ["slice_diag", "transformer"] {
        let cells = table_row(&table, family);
        assert_eq!(cells[5], "done", "{cells:?}");
        assert!(cells[4].parse::<f64>().unwrap() > 0.0, "{cells:?}");
    }
    assert!(
        !stderr.contains("round 1"),
        "a cell was measured:\n{stderr}"
    );
    let prewarmed = lines_of_side(&json_out, "prewarm");
    assert_eq!(prewarmed.len(), 2, "{prewarmed:?}");
    for line in &prewarmed {
        assert_eq!(line["env"]["CWM_KERNEL_TUNING"], "off", "{line}");
        assert_eq!(
            line["step_s"].as_array().unwrap().len(),
            1,
            "one timed step: {line}"
        );
        assert_eq!(line["round"], 0, "{line}");
    }

    // Measuring with --prewarm and --resume: the prewarmed cells are not prewarmed again.
    let measure = ["--rounds", "1", "--prewarm", "2", "--resume"];
    let (code, out, stderr) = compare_stacks(&ws, families, &json_out, &measure);
    assert_eq!(code, Some(0), "{out}\n{stderr}");
    assert!(!stderr.contains("prewarm"), "{stderr}");
    assert!(stderr.contains("transformer d128 round 1: cwm"), "{stderr}");
    assert_eq!(lines_of_side(&json_out, "prewarm").len(), 2);
    assert_eq!(lines_of_side(&json_out, "cwm").len(), 2);

    // A variant of cwm's step is a cell of its own, prewarmed though its plain cell was.
    let variant = [
        "--rounds",
        "1",
        "--prewarm",
        "1",
        "--prewarm-only",
        "--resume",
        "--cwm-args=--update ops",
    ];
    let (code, table, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &variant);
    assert_eq!(code, Some(0), "{table}\n{stderr}");
    assert_eq!(table_row(&table, "slice_diag")[5], "done", "{table}");
    let prewarmed = lines_of_side(&json_out, "prewarm");
    assert_eq!(prewarmed.len(), 3);
    assert_eq!(prewarmed[2]["cell"]["cwm_args"], "--update ops");
    assert_eq!(prewarmed[2]["update"], "ops");
}

/// Where FLA 0.5.0 refuses Gated DeltaNet's backward kernel in Triton (a Hopper GPU under
/// Triton >= 3.4, fla#640), the reference stack refuses before any step unless told to time that
/// kernel anyway, and the comparison's row then says what ran.
#[test]
fn the_reference_gdn_on_hopper_is_refused_or_timed_with_a_note_in_its_row() {
    if !torch_and_slices() {
        return;
    }
    // Against a stand-in for `fla.ops.common.chunk_o`'s two flags: FLA imports only under
    // Triton 3.6, which this PyTorch does not bring.
    let script = r#"
import types, reference_stack as rs
flags = lambda hopper: types.SimpleNamespace(IS_NVIDIA_HOPPER=hopper, TRITON_ABOVE_3_4_0=True)
print(rs.fla_hopper_route(flags(False), False, None))
print(rs.fla_hopper_route(flags(True), True, None))
try:
    rs.fla_hopper_route(flags(True), False, None)
except rs.MissingLibrary as error:
    print("refused:", error)
hopper = flags(True)
print(rs.fla_hopper_route(hopper, False, "triton"), hopper.IS_NVIDIA_HOPPER)
"#;
    let (stdout, stderr) = reference_stack_script(script);
    let note = "FLA's Triton gated backward on Hopper, gradients unchecked (fla#640)";
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "None", "elsewhere FLA runs as it is:\n{stdout}");
    assert_eq!(lines[1], "FLA's gated backward by TileLang (Hopper)");
    assert!(
        lines[2].starts_with("refused: ")
            && lines[2].contains("needs tilelang")
            && lines[2].contains("CWM_REFERENCE_FLA_HOPPER=triton"),
        "{stdout}"
    );
    assert_eq!(
        lines[3],
        format!("{note} False"),
        "the guard lifted:\n{stdout}"
    );
    assert!(stderr.contains(note), "said on stderr too: {stderr}");

    // A reference process's note goes into its row's precision column.
    let ws = Workspace::new("compare-stacks-note");
    let json_out = ws.dir.join("figures.jsonl");
    let (code, stdout, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(!table_row(&stdout, "slice_diag")[8].contains("fla#640"));
    let noted: String = std::fs::read_to_string(&json_out)
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            if record["side"] == "torch" {
                record["stack_note"] = note.into();
            }
            format!("{record}\n")
        })
        .collect();
    std::fs::write(&json_out, noted).unwrap();
    let (code, stdout, stderr) = compare_stacks(&ws, "slice_diag", &json_out, &["--resume"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let cells = table_row(&stdout, "slice_diag");
    assert!(
        cells[8].ends_with(&format!("reference step, {note}")),
        "{cells:?}"
    );
}

/// The placeholders that stand in for the kernels mamba_ssm imports and SISO training never
/// calls leave `inspect` working: PyTorch's `custom_op` registration, which mamba_ssm's import
/// makes, reads `__file__` of every module in `sys.modules`, and a placeholder that answered
/// it with a function failed mamba_ssm's import on an H200 (2026-12-04).
#[test]
fn mamba_placeholders_leave_inspect_working_and_refuse_when_called() {
    if !torch_and_slices() {
        return;
    }
    let script = r#"
import inspect, sys, reference_stack as rs
rs.stand_in_unused_kernels()
scan = sys.modules["selective_scan_cuda"]
print(hasattr(scan, "__file__"), hasattr(scan, "__path__"))
print(inspect.getframeinfo(sys._getframe()).lineno)
try:
    scan.fwd()
except RuntimeError as error:
    print("refused:", error)
"#;
    let (stdout, stderr) = reference_stack_script(script);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "False False",
            "6",
            "refused: Mamba-1's CUDA selective scan (selective_scan_cuda.fwd) is not installed; SISO and Mamba-2 training never call it",
        ],
        "{stdout}"
    );
    assert!(
        stderr.contains("a placeholder stands in for selective_scan_cuda"),
        "{stderr}"
    );
}

#[test]
fn a_stack_comparison_cell_that_fails_is_reported_in_its_row() {
    if !require_python("torch", "pip install torch==2.15.0") {
        return;
    }
    let ws = Workspace::new("compare-stacks-fails");
    // Gated DeltaNet's reference stack (flash-linear-attention) runs on CUDA only.
    let (code, stdout, stderr) = compare_stacks(&ws, "gdn", &ws.dir.join("figures.jsonl"), &[]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("| gdn | d128 | failed: "), "{stdout}");
    assert!(
        stderr.contains("compare_stacks: gdn d128 failed"),
        "{stderr}"
    );
    // With how long the failing process ran: a start-up's length is worth knowing.
    let failure = stderr
        .lines()
        .find(|line| line.starts_with("compare_stacks: gdn d128 failed"))
        .unwrap();
    let seconds = failure
        .rsplit_once("(after ")
        .and_then(|(_, rest)| rest.strip_suffix(" s)"))
        .and_then(|s| s.parse::<f64>().ok());
    assert!(seconds.is_some_and(|s| s > 0.0), "{failure}");
}

/// Only a build without the `cuda` feature lacks the device (a CUDA build has no such test).
#[cfg(not(feature = "cuda"))]
#[test]
fn model_bench_on_a_device_this_build_lacks_fails_with_the_way_out() {
    let ws = Workspace::new("model-bench-cuda");
    let out = ws.cwm(&[
        "model",
        "bench",
        "--arch",
        "transformer",
        "--device",
        "cuda",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--features cuda"), "{stderr}");
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let ws = Workspace::new("closed-pipe");
    for args in [&["kinds"][..], &["model", "params", "--all"]] {
        let mut child = cwm_command(&ws.dir, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start cwm");
        // Close the reading end before cwm writes: every write fails with a broken pipe.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for cwm");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "cwm {args:?}: {}: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "cwm {args:?}: {stderr}");
    }
}

/// `cwm-bench`, the binary a GPU session brings, is `cwm model bench` and nothing else: the same
/// command line, and on the CPU (bit-reproducible for a thread count) the same step to the bit.
#[test]
fn cwm_bench_is_cwm_model_bench_alone() {
    let ws = Workspace::new("cwm-bench");
    let args = small_bench("gdn", "2");
    let bench = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cwm-bench"))
            .current_dir(&ws.dir)
            .args(args)
            .env_remove("RAYON_NUM_THREADS")
            .output()
            .expect("run cwm-bench")
    };
    let out = bench(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cwm-bench {args:?}: {stderr}");
    let slim: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let full: serde_json::Value = serde_json::from_str(&ws.ok(&args)).expect("one JSON object");
    let timings = [
        "tokens_per_s",
        "median_step_s",
        "step_s",
        "queued_s",
        "warmup_s",
        "phase_s",
    ];
    let untimed = |figures: &serde_json::Value| {
        let mut object = figures.as_object().expect("an object").clone();
        object.retain(|key, _| !timings.contains(&key.as_str()));
        object
    };
    assert_eq!(untimed(&slim), untimed(&full), "{slim}\n{full}");
    assert!(slim["last_loss"].as_f64().is_some(), "{slim}");
    assert_eq!(slim["step_s"].as_array().map(Vec::len), Some(2), "{slim}");

    let other = bench(&["kinds"]);
    assert_eq!(other.status.code(), Some(2), "only `model bench` is there");
    let bad = bench(&["model", "bench", "--arch", "gdn", "--device", "tpu"]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: measuring gdn d128 on tpu") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// Runs `benches/gpu_session.sh SECONDS` on the CPU for SLiCE-diag at d128 and a toy shape,
/// with `cwm-bench` (what a GPU session brings), its figures into `ws.dir/out`, and `more`
/// settings on top; returns (exit status, stderr).
fn gpu_session(ws: &Workspace, seconds: &str, more: &[(&str, &str)]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gpu_session.sh");
    let settings = [
        ("DEVICE", "cpu"),
        ("FAMILIES", "slice_diag"),
        ("SIZES", "d128"),
        ("MORE_SIZES", ""),
        ("PROFILE_SIZES", "d128"),
        ("PROFILE_FAMILIES", "transformer,slice_diag"),
        ("PREWARM", "2"),
        ("BATCH", "2"),
        ("SEQ", "8"),
        ("STEPS", "1"),
        ("CWM", env!("CARGO_BIN_EXE_cwm-bench")),
        // Recorded in the summary (cwm's flex build has no autotuner to stop).
        ("CUBECL_AUTOTUNE_SHORT_CIRCUIT", "1"),
    ];
    let out = Command::new("bash")
        .arg(script)
        .arg(seconds)
        .envs(settings)
        .envs(more.iter().copied())
        .env("OUT", ws.dir.join("out"))
        .env("STATE", ws.dir.join("state"))
        .output()
        .expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The part of `text` under the heading `## name`, up to the next heading.
fn section<'a>(text: &'a str, name: &str) -> &'a str {
    let heading = format!("## {name}\n");
    let start = text
        .find(&heading)
        .unwrap_or_else(|| panic!("no section {name}:\n{text}"))
        + heading.len();
    let rest = &text[start..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn a_gpu_session_runs_its_steps_in_order_and_goes_on_where_it_stopped() {
    if !torch_and_slices() {
        return;
    }
    let ws = Workspace::new("gpu-session");
    let out = ws.dir.join("out");
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();

    // No time: nothing is measured, and the summary says so.
    let (code, stderr) = gpu_session(&ws, "1", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(read("summary.txt").contains("round1: not run"), "{stderr}");
    assert_eq!(read("tables.md"), "", "{stderr}");

    let (code, stderr) = gpu_session(&ws, "600", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let summary = read("summary.txt");
    assert!(
        summary.contains("\ncores "),
        "the machine first:\n{summary}"
    );
    assert!(
        summary.contains("\nenv CUBECL_AUTOTUNE_SHORT_CIRCUIT=1\n"),
        "the call's settings:\n{summary}"
    );
    assert_eq!(
        steps_said(&summary),
        [
            "compile",
            "profile",
            "round1",
            "levers",
            "cublas",
            "cublas-async",
            "fused-device",
            "column-single",
            "embedding-select",
            "update-ops",
            "fusion-burn",
            "attention-kernels",
            "slice-chunked",
            "round2",
            "finished"
        ],
        "{summary}"
    );
    // The profile: both sides' output; on the CPU only the reference has a table (torch's
    // profiler), cwm's flex build writes no kernel log and the digest says so.
    let profile = read("profile.md");
    for part in [
        "## cwm, transformer d128, batch 2 x 8, 2 warm-up and 3 profiled steps",
        "\"tokens_per_s\"",
        "profile-transformer-d128.log: No such file or directory (only cwm's cuda and cube-cpu builds",
        "## reference, transformer d128",
        "torch.profiler, reference stack, transformer d128, batch 2 x 8: the 3 timed step(s)",
        "## cwm, slice_diag d128, batch 2 x 8, 2 warm-up and 3 profiled steps",
        "## reference, slice_diag d128",
        "torch.profiler, reference stack, slice_diag d128, batch 2 x 8: the 3 timed step(s)",
        "Optimizer.step#AdamW.step",
    ] {
        assert!(
            profile.contains(part),
            "no {part:?} in profile.md:\n{profile}"
        );
    }
    let tables = read("tables.md");
    let round2 = section(&tables, "round2");
    assert!(round2.contains("median of 2 round(s)"), "{tables}");
    assert_eq!(table_row(round2, "slice_diag")[2], "d128");
    assert_variant_notes(&tables);
    assert_summary_row(&tables, 8);
    assert!(section(&read("compare.log"), "round1").contains("round 1: torch"));
    assert_eq!(
        table_row(section(&tables, "compile"), "slice_diag")[5],
        "done"
    );
    assert!(section(&read("compare.log"), "compile").contains("prewarm slice_diag d128"));
    // The prewarm, two rounds of both sides, and cwm's seven variants once each.
    let lines = read("compare-stacks.jsonl");
    assert_eq!(lines.lines().count(), 12, "{lines}");
    // Few files, so that all of them come back from a remote machine's return folder.
    assert!(std::fs::read_dir(&out).unwrap().count() <= 8);

    // Again: every figure is in the kept file, so no process runs.
    let (code, stderr) = gpu_session(&ws, "600", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(read("compare-stacks.jsonl"), lines);
    assert!(!read("compare.log").contains("round 2: cwm"));
    assert!(section(&read("tables.md"), "round2").contains("| slice_diag | d128 |"));

    assert_a_plan_runs_its_steps_in_its_order(&ws);
}

/// With every figure kept from the calls before, `PLAN` runs the steps it names, in its order,
/// and no others; a name that is no step's is refused before anything runs.
fn assert_a_plan_runs_its_steps_in_its_order(ws: &Workspace) {
    let read = |name: &str| std::fs::read_to_string(ws.dir.join("out").join(name)).unwrap();
    let (code, stderr) = gpu_session(ws, "600", &[("PLAN", "round2,cublas,round1")]);
    assert_eq!(code, Some(0), "{stderr}");
    let summary = read("summary.txt");
    assert_eq!(
        steps_said(&summary),
        ["round2", "cublas", "round1", "finished"],
        "{summary}"
    );
    // A name that is no step's is refused before anything runs, naming it and the steps.
    for (plan, bad) in [
        ("round1,round3", "round3"),
        ("round1,,round2", ""),
        ("*", "*"),
    ] {
        let (code, stderr) = gpu_session(ws, "600", &[("PLAN", plan)]);
        assert_eq!(code, Some(2), "{plan}: {stderr}");
        assert!(
            stderr.contains(&format!("no step '{bad}'")),
            "{plan}: {stderr}"
        );
        assert!(stderr.contains("the steps: compile,"), "{stderr}");
        assert_eq!(read("summary.txt"), summary, "{plan}: nothing ran");
    }
    // So is a family to profile that is no family's.
    let (code, stderr) = gpu_session(ws, "600", &[("PROFILE_FAMILIES", "slice,slice_dig")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no family 'slice_dig'") && stderr.contains("the families: transformer,"),
        "{stderr}"
    );
    assert_eq!(read("summary.txt"), summary, "nothing ran");

    // The transformer's levers take its attention's kernels too.
    let transformer = [("PLAN", "levers"), ("FAMILIES", "transformer")];
    let (code, stderr) = gpu_session(ws, "600", &transformer);
    assert_eq!(code, Some(0), "{stderr}");
    let tables = read("tables.md");
    assert!(
        table_row(section(&tables, "levers (transformer)"), "transformer")[8]
            .starts_with("cwm f32, fused-device loss, one-pass update, attention: kernels;"),
        "{tables}"
    );
    assert!(!tables.contains("## levers (recurrent)"), "{tables}");

    // The profile of a variant: its arguments reach cwm's process and head its table.
    let variant = [
        ("PLAN", "profile"),
        ("PROFILE_FAMILIES", "slice_diag"),
        ("PROFILE_CWM_ARGS", "--loss fused-device"),
    ];
    let (code, stderr) = gpu_session(ws, "600", &variant);
    assert_eq!(code, Some(0), "{stderr}");
    let profile = read("profile.md");
    assert!(
        profile.starts_with(
            "## cwm, slice_diag d128, batch 2 x 8, 2 warm-up and 3 profiled steps, --loss \
             fused-device\n"
        ) && profile.contains("\"loss\":\"fused-device\""),
        "{profile}"
    );
}

/// Each variant's row of a session's tables says what it changed.
fn assert_variant_notes(tables: &str) {
    for (step, precision) in [
        ("levers (recurrent)", "fused-device loss, one-pass update;"),
        ("fused-device", "fused-device loss, one-pass update;"),
        (
            "column-single",
            "fused-cpu loss, one-pass update, column sums: single;",
        ),
        (
            "embedding-select",
            "fused-cpu loss, one-pass update, embedding gradient: select;",
        ),
        ("update-ops", "fused-cpu loss, ops update;"),
        (
            "fusion-burn",
            "fused-cpu loss, one-pass update, burn's fusion search;",
        ),
        (
            "attention-kernels",
            "fused-cpu loss, one-pass update, attention: kernels;",
        ),
        (
            "slice-chunked",
            "fused-cpu loss, one-pass update, SLiCE scan: chunked;",
        ),
    ] {
        assert!(
            table_row(section(tables, step), "slice_diag")[8]
                .starts_with(&format!("cwm f32, {precision}")),
            "{step}: {tables}"
        );
    }
}

/// The session's `summary` table: SLiCE-diag's row names the fastest of its `variants` and
/// gives its ratio, then each variant's ratio with its rounds, the default's two first.
fn assert_summary_row(tables: &str, variants: usize) {
    let best = table_row(section(tables, "summary"), "slice_diag");
    let each: Vec<&str> = best[9].split("; ").collect();
    assert_eq!(each.len(), variants, "{tables}");
    assert!(
        each[0].starts_with("default ") && each[0].ends_with("× (2)"),
        "{tables}"
    );
    let ratio_of = |text: &str| -> f64 { text.trim_end_matches('×').parse().unwrap() };
    let ratios: Vec<f64> = each
        .iter()
        .map(|e| ratio_of(e.rsplit(' ').nth(1).unwrap()))
        .collect();
    let fastest = each
        .iter()
        .zip(&ratios)
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap();
    assert!(fastest.0.starts_with(&format!("{} ", best[8])), "{tables}");
    assert_eq!(ratio_of(best[5]), *fastest.1, "{tables}");
    // The ratio is of the unrounded figures: within its own rounding and the figures'.
    let tokens = |text: &str| -> f64 { text.replace(',', "").parse().unwrap() };
    let (ours, theirs) = (tokens(best[3]), tokens(best[4]));
    let slack = 0.005 + ours / theirs * (0.5 / ours + 0.5 / theirs);
    assert!(
        (ratio_of(best[5]) - ours / theirs).abs() <= slack,
        "{tables}"
    );
}

/// The steps a session's summary reports, in order (the word before each line's colon).
fn steps_said(summary: &str) -> Vec<&str> {
    summary
        .lines()
        .filter_map(|line| line.strip_prefix("gpu_session: "))
        .map(|line| line.split([':', ' ']).next().unwrap_or(line))
        .collect()
}

/// A kernel-profile log in cubecl's format: kernel lines, then at each barrier a table of the
/// kernels since the last one (name, duration, count, share). Here a warm-up table, a table of
/// cubecl's own device measurement, and two steps.
const PROFILE_LOG: &str = "\
| 181.2ms    | PrngKernel | NormalFamily_22388eeb
|⎺⎺⎺⎺⎺|
| Name                            | Duration     | Num Computed | Ratio |
|⎼⎼⎼⎼⎼|
| PrngKernel | NormalFamily_22388eeb | 181.2ms | 1 | 100 % |
|⎼⎼⎼⎼⎼|
| Total                           | 181.2ms      | 1            | 100 % |
|⎯⎯⎯⎯⎯|
|⎺⎺⎺⎺⎺|
| Name                            | Duration     | Num Computed | Ratio |
|⎼⎼⎼⎼⎼|
| MemoryDirectThroughput_4f45d18e | 97.25ms | 1 | 100 % |
|⎼⎼⎼⎼⎼|
| Total                           | 97.25ms      | 1            | 100 % |
|⎯⎯⎯⎯⎯|
|⎺⎺⎺⎺⎺|
| Name                            | Duration     | Num Computed | Ratio |
|⎼⎼⎼⎼⎼|
| MatmulEntry | TensorArgs | DynamicScalar | __Lhs | DynamicSize | __LhsSize | SimpleMatmulFamily | UnitPartitioner | () | RowMajorGlobalPartitionMatmul_54cbf1be | 3ms | 4 | 60 % |
| ElemwiseFuse_9cf78f0f | 1500µs | 10 | 30 % |
| ElemwiseFuse_77e9a9a1 | 250µs | 5 | 5 % |
| FullKernel_1991dd6e | 250000ns | 20 | 5 % |
|⎼⎼⎼⎼⎼|
| Total                           | 5ms          | 39           | 100 % |
|⎯⎯⎯⎯⎯|
| 1ms        | ElemwiseFuse_9cf78f0f
|⎺⎺⎺⎺⎺|
| Name                            | Duration     | Num Computed | Ratio |
|⎼⎼⎼⎼⎼|
| MatmulEntry | TensorArgs | DynamicScalar | __Lhs | DynamicSize | __LhsSize | SimpleMatmulFamily | UnitPartitioner | () | RowMajorGlobalPartitionMatmul_54cbf1be | 0.005s | 4 | 71 % |
| ElemwiseFuse_9cf78f0f | 1.5ms | 10 | 21 % |
| ElemwiseFuse_77e9a9a1 | 250µs | 5 | 4 % |
| FullKernel_1991dd6e | 250µs | 20 | 4 % |
|⎼⎼⎼⎼⎼|
| Total                           | 7ms          | 39           | 100 % |
|⎯⎯⎯⎯⎯|
";

/// Runs `kernel_profile.py` on `log` with `args`; returns (exit status, stdout, stderr).
fn kernel_profile(log: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    bench_script("kernel_profile.py", log, args)
}

#[test]
fn a_kernel_profile_becomes_the_table_of_one_step() {
    let ws = Workspace::new("kernel-profile");
    let log = ws.dir.join("profile.log");
    std::fs::write(&log, PROFILE_LOG).unwrap();

    let (code, out, err) = kernel_profile(&log, &["--steps", "2", "--top", "2"]);
    assert_eq!(code, Some(0), "{err}");
    // The last two tables (the device measurement left out), averaged per step.
    assert!(
        out.starts_with(
            "Kernels of one step, mean of the last 2 of 3 tables in profile.log: 39 launches, \
             6.000 ms of kernel time."
        ),
        "{out}"
    );
    // By kind: the two element-wise fusions are one row; the rest beyond --top in one row.
    let matmul =
        "MatmulEntry · TensorArgs · SimpleMatmulFamily · … · RowMajorGlobalPartitionMatmul";
    for row in [
        format!("| {matmul} | 4 | 4.000 | 66.7 % |"),
        "| ElemwiseFuse | 15 | 1.750 | 29.2 % |".to_string(),
        "| (1 more) | 20 | 0.250 | 4.2 % |".to_string(),
        // By kernel, with cubecl's hash.
        format!("| {matmul}_54cbf1be | 4 | 4.000 | 66.7 % |"),
        "| ElemwiseFuse_9cf78f0f | 10 | 1.500 | 25.0 % |".to_string(),
        "| (2 more) | 25 | 0.500 | 8.3 % |".to_string(),
    ] {
        assert!(out.contains(&row), "no {row:?} in:\n{out}");
    }

    // More steps than tables: an error that says what the log has.
    let (code, _, err) = kernel_profile(&log, &["--steps", "4"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("has 3 table(s), fewer than the 4 step(s)"),
        "{err}"
    );
    let (code, _, err) = kernel_profile(&ws.dir.join("missing.log"), &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("missing.log"), "{err}");
}

#[test]
fn the_pytorch_side_writes_its_profiler_s_table_of_the_timed_steps() {
    if !require_python("torch", "pip install torch==2.15.0") {
        return;
    }
    let ws = Workspace::new("torch-profile");
    let table = ws.dir.join("reference-profile.txt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/python/train_torch.py");
    let out = Command::new("python3")
        .arg(script)
        .args([
            "--arch",
            "transformer",
            "--size",
            "d128",
            "--batch",
            "2",
            "--seq",
            "8",
        ])
        .args(["--warmup", "1", "--steps", "2", "--profile"])
        .arg(&table)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"profiled\": true"), "{stdout}");
    let text = std::fs::read_to_string(&table).unwrap();
    assert!(
        text.starts_with("torch.profiler, eager stack, transformer d128, batch 2 x 8: the 2 timed"),
        "{text}"
    );
    // The optimiser's step ran twice under the profiler; the warm-up's is not counted.
    let adamw = text
        .lines()
        .find(|line| line.contains("Optimizer.step#AdamW.step"))
        .unwrap_or_else(|| panic!("no AdamW row:\n{text}"));
    assert_eq!(adamw.split_whitespace().last(), Some("2"), "{adamw}");
}

/// Runs `benches/session_cache.sh ARGS` in `dir` with parts of `part_mib` MiB; returns (exit
/// status, stdout).
fn session_cache(dir: &Path, part_mib: &str, args: &[&str]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/session_cache.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .current_dir(dir)
        .env("PART_MIB", part_mib)
        .output()
        .expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A GPU session's caches come back within what a lent machine sends back: split into parts
/// under the size a file may have, left out when they would make more than eight files, and
/// unpacked from the parts to the same bytes; an archive that does not unpack leaves nothing.
#[test]
fn a_session_cache_is_packed_in_parts_and_unpacked_from_them() {
    let ws = Workspace::new("session-cache");
    let cache = ws.dir.join("cache");
    std::fs::create_dir_all(cache.join("cuda-driver")).unwrap();
    // 2.5 MiB that xz cannot shrink, and a small file one folder down.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..5 * 512 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(cache.join("default.db"), &noise).unwrap();
    std::fs::write(cache.join("cuda-driver/index"), "sm_90\n").unwrap();
    std::fs::create_dir_all(ws.dir.join("out")).unwrap();

    let (code, said) = session_cache(&ws.dir, "1", &["pack", "cache", "out", "k.tar.xz"]);
    assert_eq!(code, Some(0), "{said}");
    let mut names: Vec<String> = std::fs::read_dir(ws.dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["k.tar.xz.0", "k.tar.xz.1", "k.tar.xz.2"], "{said}");
    assert!(said.contains("packed in 3 file(s)"), "{said}");
    for name in &names[..2] {
        let size = std::fs::metadata(ws.dir.join("out").join(name))
            .unwrap()
            .len();
        assert_eq!(size, 1 << 20, "{name}");
    }

    let (code, said) = session_cache(&ws.dir, "1", &["unpack", "back", "out/k.tar.xz"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("unpacked from 3 file(s)"), "{said}");
    assert!(std::fs::read(ws.dir.join("back/default.db")).unwrap() == noise);
    assert_eq!(
        std::fs::read_to_string(ws.dir.join("back/cuda-driver/index")).unwrap(),
        "sm_90\n"
    );
    // A folder the machine kept is not unpacked over.
    let (_, said) = session_cache(&ws.dir, "1", &["unpack", "back", "out/k.tar.xz"]);
    assert!(said.contains("kept from an earlier call"), "{said}");

    // Packed again with larger parts: one file, the parts gone.
    let (_, said) = session_cache(&ws.dir, "15", &["pack", "cache", "out", "k.tar.xz"]);
    assert!(said.contains("packed in 1 file(s)"), "{said}");
    assert!(ws.dir.join("out/k.tar.xz").is_file() && !ws.dir.join("out/k.tar.xz.0").exists());

    // Eight files at most come back: with seven others there the cache is the eighth, with
    // eight it is left out.
    for i in 0..7 {
        std::fs::write(ws.dir.join(format!("out/other-{i}")), "x").unwrap();
    }
    let (_, said) = session_cache(&ws.dir, "15", &["pack", "cache", "out", "k.tar.xz"]);
    assert!(said.contains("packed in 1 file(s)"), "{said}");
    std::fs::write(ws.dir.join("out/other-7"), "x").unwrap();
    let (code, said) = session_cache(&ws.dir, "15", &["pack", "cache", "out", "k.tar.xz"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("left out, 9 files"), "{said}");
    assert!(!ws.dir.join("out/k.tar.xz").exists(), "{said}");

    std::fs::write(ws.dir.join("bad.tar.xz"), "not an archive").unwrap();
    let (code, said) = session_cache(&ws.dir, "1", &["unpack", "none", "bad.tar.xz"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("did not unpack"), "{said}");
    assert!(!ws.dir.join("none").exists(), "no half-unpacked folder");
}

/// Runs `benches/gpu_prepare.sh` with STEPS and the paths `vars` set (each under `ws.dir`);
/// returns (exit status, stderr).
fn gpu_prepare(ws: &Workspace, steps: &str, vars: &[(&str, &str)]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gpu_prepare.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script)
        .env("STEPS", steps)
        .env("LOGS", ws.dir.join("logs"));
    for (name, path) in vars {
        cmd.env(name, ws.dir.join(path));
    }
    let out = cmd.output().expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The figure after `before` in `text`, up to the next space.
fn figure_after(text: &str, before: &str) -> f64 {
    let (_, rest) = text
        .split_once(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

/// A session's JSON line as `session_table.py` reads it: one process of `side` for `family`
/// and `size`, `cell` merged into its cell's settings (a variant, another batch), `figures`
/// beside them.
fn session_line(
    side: &str,
    (family, size): (&str, &str),
    cell: serde_json::Value,
    figures: serde_json::Value,
) -> String {
    let mut line = serde_json::json!({
        "side": side, "round": 1,
        "cell": {
            "family": family, "size": size, "device": "cuda", "stack": "reference",
            "batch": 128, "seq": 256, "warmup": 3, "steps": 10, "threads": 1,
        },
    });
    let merge = |object: &mut serde_json::Value, more: serde_json::Value| {
        if let (Some(object), serde_json::Value::Object(more)) = (object.as_object_mut(), more) {
            object.extend(more);
        }
    };
    merge(&mut line["cell"], cell);
    merge(&mut line, figures);
    line.to_string()
}

/// The table a session's figures make: each cell's fastest variant of cwm's beside the
/// reference, both sides' memory and every variant's ratio; a cell lacking a side says so,
/// another shape gets a table of its own, the prewarm's lines and a line that is no
/// measurement are left out (the latter named), and an empty file makes no table.
#[test]
fn the_session_table_puts_each_cells_fastest_variant_beside_the_reference() {
    use serde_json::json;
    let ws = Workspace::new("session-table");
    let none = || json!({});
    let tokens = |t: u32| json!({ "tokens_per_s": t });
    let transformer = ("transformer", "d128");
    let lines = [
        session_line("prewarm", transformer, none(), tokens(9999)),
        session_line("cwm", transformer, none(), tokens(1000)),
        session_line(
            "torch",
            transformer,
            none(),
            json!({
                "tokens_per_s": 2000,
                "peak_reserved_bytes": 3_145_728,
                "peak_allocated_bytes": 1_048_576,
            }),
        ),
        session_line(
            "cwm",
            transformer,
            json!({"cwm_args": "--products cublas"}),
            json!({"tokens_per_s": 2500, "peak_reserved_bytes": 2_097_152}),
        ),
        session_line("cwm", transformer, none(), tokens(1200)),
        session_line("cwm", ("gdn", "d512"), none(), tokens(300)),
        session_line("torch", ("mamba2", "d512"), none(), tokens(40)),
        session_line("cwm", ("slice", "d128"), json!({"batch": 64}), tokens(50)),
        "{\"side\": \"cwm\"}".to_string(),
    ];
    let file = ws.dir.join("figures.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/python/session_table.py");
    let run = |file: &Path| {
        Command::new("python3")
            .arg(&script)
            .arg(file)
            .output()
            .unwrap()
    };
    let out = run(&file);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let row = |family: &str, size: &str| -> Vec<&str> {
        let start = format!("| {family} | {size} |");
        let line = stdout.lines().find(|l| l.starts_with(&start));
        line.unwrap_or_else(|| panic!("no {start}:\n{stdout}"))
            .split('|')
            .map(str::trim)
            .collect()
    };
    assert_eq!(
        row("transformer", "d128")[3..10],
        [
            "2,500",
            "2,000",
            "1.25×",
            "2",
            "3 (1)",
            "--products cublas",
            "default 0.55× (2); --products cublas 1.25× (1)"
        ],
        "{stdout}"
    );
    assert_eq!(row("gdn", "d512")[3..5], ["300", "no reference figure"]);
    assert_eq!(row("mamba2", "d512")[3], "no figure of cwm's");
    assert_eq!(row("slice", "d128")[4], "no reference figure");
    assert_eq!(
        stdout.matches("training tokens/s at batch").count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("at batch 64 × 256"), "{stdout}");
    assert!(
        stderr.contains("figures.jsonl:9: not a measurement"),
        "{stderr}"
    );

    let empty = ws.dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = run(&empty);
    assert!(out.status.success() && out.stdout.is_empty());
}

/// The preparation of a GPU session skips what is there, stops at the first step that fails
/// with that step's log named and its last lines shown, and sums what a call carries against
/// the 64 MiB it may bring.
#[test]
fn a_gpu_preparation_skips_what_is_there_stops_at_a_failure_and_sums_the_carry() {
    let ws = Workspace::new("gpu-prepare");
    for dir in [
        "stack/wheels",
        "stack/src/mamba_ssm",
        "stack/sdist",
        "empty",
    ] {
        std::fs::create_dir_all(ws.dir.join(dir)).unwrap();
    }
    std::fs::write(ws.dir.join("stack/sdist/causal_conv1d-1.6.1.tar.gz"), "x").unwrap();
    std::fs::write(ws.dir.join("stack/wheels/a.whl"), vec![0u8; 1 << 20]).unwrap();

    // A fetched stack is not fetched again (nothing here could fetch it).
    let (code, said) = gpu_prepare(&ws, "stack", &[("STACK", "stack")]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("stack: done"), "{said}");
    let log = std::fs::read_to_string(ws.dir.join("logs/stack.log")).unwrap();
    assert!(log.contains("is there"), "{log}");

    // A stack without its source cannot be prebuilt: the step fails, and the one after it
    // does not run.
    let vars = [("STACK", "empty"), ("VENV", "venv")];
    let (code, said) = gpu_prepare(&ws, "conv1d,carry", &vars);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("conv1d failed"), "{said}");
    assert!(said.contains("lacks what 'fetch' puts there"), "{said}");
    assert!(said.contains("logs/conv1d.log"), "{said}");
    assert!(!said.contains("carry"), "{said}");

    // What a call carries: the binary, the stack and both caches, with the tracked files.
    std::fs::write(ws.dir.join("bin.xz"), vec![1u8; 3 << 20]).unwrap();
    std::fs::write(ws.dir.join("cache.tar.xz"), vec![2u8; 1 << 20]).unwrap();
    std::fs::write(ws.dir.join("triton.tar.xz"), vec![3u8; 2 << 20]).unwrap();
    let vars = [
        ("STACK", "stack"),
        ("BINARY", "bin"),
        ("KERNEL_CACHE_IN", "cache.tar.xz"),
        ("TRITON_CACHE_IN", "triton.tar.xz"),
    ];
    let (code, said) = gpu_prepare(&ws, "carry", &vars);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("bin.xz  3.0 MiB"), "{said}");
    assert!(said.contains("cache.tar.xz  1.0 MiB"), "{said}");
    assert!(said.contains("triton.tar.xz  2.0 MiB"), "{said}");
    let tracked = figure_after(&said, "with the tracked files (");
    let total = figure_after(&said, "MiB): ");
    assert!(
        (total - tracked - 7.0).abs() < 0.11,
        "{tracked} + 7.0 != {total}: {said}"
    );
    assert!(!said.contains("warning"), "{said}");

    // Over 64 MiB the call is told to leave the cache; without one, that every process compiles.
    let big = std::fs::File::options()
        .write(true)
        .open(ws.dir.join("bin.xz"))
        .unwrap();
    big.set_len(70 << 20).unwrap();
    let (_, said) = gpu_prepare(&ws, "carry", &vars);
    assert!(said.contains("warning: over 64 MiB"), "{said}");
    std::fs::remove_file(ws.dir.join("cache.tar.xz")).unwrap();
    let (code, said) = gpu_prepare(&ws, "carry", &vars);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("no kernel cache"), "{said}");
}
