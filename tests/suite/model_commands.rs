//! `cwm model bench` and output into a closed pipe, through the real binary.

use std::process::Stdio;

use super::{Workspace, cwm_command};

#[test]
fn model_bench_reports_the_training_throughput_of_a_small_batch() {
    let ws = Workspace::new("model-bench");
    let args = [
        "--threads",
        "1",
        "model",
        "bench",
        "--arch",
        "slice_diag",
        "--batch",
        "2",
        "--seq",
        "16",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--json",
    ];
    let stdout = ws.ok(&args);
    let figures: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(figures["arch"], "slice_diag");
    assert_eq!(figures["device"], "cpu");
    assert_eq!(figures["threads"], 1);
    assert_eq!(figures["step_s"].as_array().map(Vec::len), Some(3));
    let tokens_per_s = figures["tokens_per_s"].as_f64().expect("tokens_per_s");
    let median = figures["median_step_s"].as_f64().expect("median_step_s");
    assert!((tokens_per_s * median - 32.0).abs() < 1e-6, "{figures}");
    let loss = figures["last_loss"].as_f64().expect("last_loss");
    assert!((1.0..6.0).contains(&loss), "{figures}");
    // The CPU's default chunk for SLiCE, unless the command sets one.
    assert_eq!(figures["chunk_size"], 8, "{figures}");
    let mut chunked = args.to_vec();
    chunked.extend(["--chunk-size", "3"]);
    let figures: serde_json::Value = serde_json::from_str(&ws.ok(&chunked)).expect("JSON");
    assert_eq!(figures["chunk_size"], 3, "{figures}");
    let zero = ws.cwm(&[&args[..], &["--chunk-size", "0"]].concat());
    assert_eq!(zero.status.code(), Some(2), "a chunk of 0 steps is refused");
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
