//! Executor benchmarks, driving the real `cwm` binary:
//!
//! - `noop_run_200`: `cwm run` on a 200-instance pipeline whose results are
//!   all cached (target: under 200 ms). Baseline in the same run: `cwm --version`,
//!   the cost of starting the process at all.
//! - `status_big`: `cwm status` over an artifact of `CWM_BENCH_BIG_MIB` MiB
//!   (default 2048) with the stat cache (unchanged files are not reread),
//!   against the same command with the stat cache removed (every file rehashed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

fn workspace(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cwm-bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create bench dir");
    dir
}

fn cwm(dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_cwm"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run cwm");
    assert!(
        out.status.success(),
        "cwm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 100 producers and 100 consumers (each consumer reads all producers' cell
/// with the same `i`), as two matrices.
fn pipeline_200() -> String {
    let cells: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    format!(
        "stages:\n  src:\n    uses: command\n    matrix:\n      i: [{cells}]\n    params:\n      cmd: echo $CWM_PARAM_i > $CWM_OUT/v\n  use:\n    uses: command\n    matrix:\n      i: [{cells}]\n    inputs: {{x: src}}\n    params:\n      cmd: cat $CWM_IN_x/v > $CWM_OUT/w\n",
        cells = cells.join(", ")
    )
}

fn noop_run(c: &mut Criterion) {
    let dir = workspace("noop200");
    std::fs::write(dir.join("pipeline.yaml"), pipeline_200()).expect("write pipeline");
    cwm(&dir, &["run"]);
    let mut group = c.benchmark_group("noop_run_200");
    group.sample_size(20);
    group.bench_function("baseline: cwm --version", |b| {
        b.iter(|| cwm(&dir, &["--version"]))
    });
    group.bench_function("cwm run (all 200 cached)", |b| {
        b.iter(|| cwm(&dir, &["run"]))
    });
    group.bench_function("cwm status (200 fresh)", |b| {
        b.iter(|| cwm(&dir, &["status"]))
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn status_big(c: &mut Criterion) {
    let mib: u64 = std::env::var("CWM_BENCH_BIG_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    let dir = workspace("statusbig");
    std::fs::write(
        dir.join("pipeline.yaml"),
        format!(
            "stages:\n  big:\n    uses: command\n    params:\n      cmd: for i in 1 2 3 4; do head -c {}M /dev/urandom > $CWM_OUT/part$i; done\n",
            mib / 4
        ),
    )
    .expect("write pipeline");
    cwm(&dir, &["run"]);
    let cache = dir.join("artifacts/statcache.json");
    let saved = std::fs::read(&cache).expect("stat cache exists after a run");
    let mut group = c.benchmark_group(format!("status_{mib}MiB"));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("cwm status (stat cache: no rehash)", |b| {
        b.iter(|| cwm(&dir, &["status"]))
    });
    group.bench_function(
        "baseline: cwm status without stat cache (rehash all)",
        |b| {
            b.iter(|| {
                std::fs::remove_file(&cache).expect("remove stat cache");
                cwm(&dir, &["status"]);
            })
        },
    );
    group.finish();
    std::fs::write(&cache, saved).expect("restore stat cache");
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, noop_run, status_big);
criterion_main!(benches);
