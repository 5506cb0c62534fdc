//! Training throughput: tokens per second of full training steps (forward, backward, global
//! gradient clipping at 1.0 and an AdamW update) in cwm (the train stage's own step,
//! `cwm_stage_train::throughput`, which `cwm model bench` also runs) and in the PyTorch versions
//! of the same models (`crates/models/python/cwm_torch_models.py`, `torch.optim.AdamW`),
//! measured in the same run with the same number of threads on the same device. The issue's
//! target is cwm at ≥ 1.0× PyTorch on the CPU.
//!
//! Every step trains on one fixed batch of `CWM_BENCH_BATCH` (32) sequences of `CWM_BENCH_SEQ`
//! (128) tokens: START then pseudo-random move ids, random targets, no padding. The loss is the
//! reference's state loss (spec A.4) on both sides; dropout is on (training mode) as in
//! training. After `CWM_BENCH_WARMUP` (2) steps, `CWM_BENCH_STEPS` (5) steps are timed one by
//! one; the figure is batch · seq / median step time. `CWM_BENCH_DEVICE` (`cpu`, or `cuda` in a
//! build with `--features cuda`) picks the device of both sides.
//!
//! ```text
//! cargo bench --bench train_throughput                       # transformer and slice, d128
//! CWM_BENCH_FAMILIES=slice_diag,gdn CWM_BENCH_THREADS=1 cargo bench --bench train_throughput
//! ```
//!
//! `CWM_BENCH_THREADS` (default: all cores) sizes rayon's global pool, which burn's CPU backend
//! uses, and is passed to `torch.set_num_threads`. `CWM_BENCH_SIZE` picks the size (d128).
//! The PyTorch side is skipped with a message when `import torch` fails. The table goes to
//! stderr and to `target/criterion/cwm-train-throughput-summary.txt`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use cwm_models::{Family, ModelConfig, Size};
use cwm_stage_train::throughput::{ThroughputOptions, measure};

/// The `cwm` binary's allocator (see `src/main.rs`), so the bench measures what `cwm` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

struct Settings {
    batch: usize,
    seq: usize,
    warmup: usize,
    steps: usize,
    threads: usize,
    size: Size,
    device: String,
}

struct Figure {
    tokens_per_s: f64,
    median_step_s: f64,
}

fn cwm_throughput(family: Family, s: &Settings) -> Result<Figure, String> {
    let mut options = ThroughputOptions::new(ModelConfig::new(family, s.size), &s.device);
    (options.batch, options.seq, options.warmup, options.steps) =
        (s.batch, s.seq, s.warmup, s.steps);
    // Tokens per second alone: no steps by phases after the timed ones.
    options.phase_steps = 0;
    let figures = measure(&options).map_err(|e| e.to_string())?;
    Ok(Figure {
        tokens_per_s: figures.tokens_per_s,
        median_step_s: figures.median_step_s,
    })
}

fn torch_available() -> bool {
    match Command::new("python3")
        .args(["-c", "import torch"])
        .output()
    {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            eprintln!(
                "train_throughput: `import torch` fails ({}); skipping the PyTorch baseline",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            false
        }
        Err(error) => {
            eprintln!("train_throughput: no python3 ({error}); skipping the PyTorch baseline");
            false
        }
    }
}

fn torch_throughput(family: Family, s: &Settings) -> Result<Figure, String> {
    let script = repo_root().join("benches/python/train_torch.py");
    let args = [
        "--arch".to_owned(),
        family.name().to_owned(),
        "--size".to_owned(),
        s.size.name().to_owned(),
        "--batch".to_owned(),
        s.batch.to_string(),
        "--seq".to_owned(),
        s.seq.to_string(),
        "--warmup".to_owned(),
        s.warmup.to_string(),
        "--steps".to_owned(),
        s.steps.to_string(),
        "--threads".to_owned(),
        s.threads.to_string(),
        "--device".to_owned(),
        s.device.clone(),
        "--phase-steps".to_owned(),
        "0".to_owned(),
    ];
    let out = Command::new("python3")
        .arg(&script)
        .args(&args)
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("bad output: {e}"))?;
    let get = |k: &str| value.get(k).and_then(serde_json::Value::as_f64);
    match (get("tokens_per_s"), get("median_step_s")) {
        (Some(tokens_per_s), Some(median_step_s)) => Ok(Figure {
            tokens_per_s,
            median_step_s,
        }),
        _ => Err(format!("bad output: {value}")),
    }
}

/// The bench's settings, from the `CWM_BENCH_*` environment variables.
fn settings_from_env() -> Settings {
    Settings {
        batch: env_or("CWM_BENCH_BATCH", 32),
        seq: env_or("CWM_BENCH_SEQ", 128),
        warmup: env_or("CWM_BENCH_WARMUP", 2),
        steps: env_or("CWM_BENCH_STEPS", 5).max(1),
        threads: env_or(
            "CWM_BENCH_THREADS",
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
        size: env_or("CWM_BENCH_SIZE", Size::D128),
        device: std::env::var("CWM_BENCH_DEVICE").unwrap_or_else(|_| "cpu".to_owned()),
    }
}

/// The families to measure, from `CWM_BENCH_FAMILIES` (unknown names are reported and left out).
fn families_from_env() -> Vec<Family> {
    std::env::var("CWM_BENCH_FAMILIES")
        .unwrap_or_else(|_| "transformer,slice".to_owned())
        .split(',')
        .filter_map(|name| match name.trim().parse() {
            Ok(family) => Some(family),
            Err(e) => {
                eprintln!("train_throughput: {e}");
                None
            }
        })
        .collect()
}

/// The summary's heading and the table's header rows.
fn table_header(settings: &Settings) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "cwm training throughput (tokens/s of forward + backward + clipping + AdamW; batch {}, \
         seq {}, {}, device {}, {} thread(s); median of {} steps after {} warm-up; both sides \
         in the same run)",
        settings.batch,
        settings.seq,
        settings.size,
        settings.device,
        settings.threads,
        settings.steps,
        settings.warmup
    );
    let _ = writeln!(
        text,
        "machine: {} cores; other builds may have been running, so absolute figures are noisy",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(text);
    let _ = writeln!(
        text,
        "| {:<12} | {:>12} | {:>10} | {:>12} | {:>10} | {:>22} |",
        "family", "cwm tok/s", "cwm s/step", "torch tok/s", "torch s/st", "ratio (target ≥ 1.0×)"
    );
    let _ = writeln!(
        text,
        "|{:-<14}|{:-<14}|{:-<12}|{:-<14}|{:-<12}|{:-<24}|",
        "", "", "", "", "", ""
    );
    text
}

/// Measures `family` in cwm (and in PyTorch if `with_torch`) and returns its table row.
fn family_row(family: Family, settings: &Settings, with_torch: bool) -> String {
    eprintln!("train_throughput: cwm {family} …");
    let ours = cwm_throughput(family, settings);
    let theirs = if with_torch {
        eprintln!("train_throughput: torch {family} …");
        torch_throughput(family, settings)
    } else {
        Err("not measured".to_owned())
    };
    let cell = |f: &Result<Figure, String>| match f {
        Ok(f) => (
            format!("{:.0}", f.tokens_per_s),
            format!("{:.3}", f.median_step_s),
        ),
        Err(e) => {
            eprintln!("train_throughput: {family}: {e}");
            ("n/a".to_owned(), "n/a".to_owned())
        }
    };
    let (a, b) = cell(&ours);
    let (c, d) = cell(&theirs);
    let ratio = match (&ours, &theirs) {
        (Ok(o), Ok(t)) => format!("{:.2}×", o.tokens_per_s / t.tokens_per_s),
        _ => "n/a".to_owned(),
    };
    format!(
        "| {:<12} | {a:>12} | {b:>10} | {c:>12} | {d:>10} | {ratio:>22} |\n",
        family.name()
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported (use the env vars).
    let settings = settings_from_env();
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(settings.threads)
        .build_global()
    {
        eprintln!("train_throughput: cannot size the rayon pool: {e}");
    }
    let families = families_from_env();
    let with_torch = torch_available();
    let mut text = table_header(&settings);
    for family in families {
        text.push_str(&family_row(family, &settings, with_torch));
    }
    eprintln!("\n{text}");
    let dir = repo_root().join("target/criterion");
    let path = dir.join("cwm-train-throughput-summary.txt");
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &text)) {
        eprintln!("train_throughput: cannot write {}: {e}", path.display());
    } else {
        eprintln!("summary written to {}", path.display());
    }
}
