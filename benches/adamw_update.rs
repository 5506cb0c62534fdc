//! One parameter's AdamW step on the CPU: the one-pass update the train stage's optimizer runs
//! (`cwm_models::adamw_update`) against the same step as separate tensor operations
//! (`adamw_update_by_ops`, the optimizer's code before it), measured in the same run.
//!
//! Sizes: the d128 transformer's embedding (20,482 × 128, its largest parameter) and one of its
//! layers' weights (128 × 512). Inputs are made afresh for every iteration, outside the timing,
//! so that neither side finds its tensors shared. At the end a table of the medians and their
//! ratio goes to stderr and to `target/criterion/cwm-adamw-update-summary.txt`.
//!
//! ```text
//! cargo bench --bench adamw_update
//! RAYON_NUM_THREADS=1 cargo bench --bench adamw_update      # one thread
//! ```

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use burn::prelude::*;
use criterion::{Criterion, SamplingMode};
use cwm_models::{AdamWScalars, AdamWUpdated, adamw_update, adamw_update_by_ops};

#[path = "support/samples.rs"]
mod samples;
use samples::{median_seconds, record};

/// The `cwm` binary's allocator (see `src/main.rs`), so the bench measures what `cwm` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZES: [(&str, usize); 2] = [
    ("embedding 20482x128", 20_482 * 128),
    ("layer 128x512", 128 * 512),
];

fn scalars() -> AdamWScalars {
    AdamWScalars::at_step(10, 3e-4, 0.01, (0.9, 0.95), 1e-8)
}

/// A `[1]` tensor on the device, as the optimizer passes the clipping factor (0.5) and the
/// finiteness flag (0).
fn scalar(value: f32, device: &Device) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(vec![value], [1]), device)
}

/// Parameter, gradient and both moments of `n` elements.
fn inputs(n: usize, device: &Device) -> [Tensor<1>; 4] {
    [0.02f32, 0.001, 0.0001, 1e-7].map(|scale| {
        let values: Vec<f32> = (0..n)
            .map(|i| ((i * 7_919 % 1_000) as f32 / 1_000.0) * scale)
            .collect();
        Tensor::<1>::from_data(TensorData::new(values, [n]), device)
    })
}

type Update = fn([Tensor<1>; 4], Tensor<1>, Tensor<1>, AdamWScalars) -> AdamWUpdated;

fn bench(c: &mut Criterion) {
    let device = Device::flex();
    let s = scalars();
    let ways: [(&str, Update); 2] = [
        ("one pass", adamw_update),
        ("by operations", adamw_update_by_ops),
    ];
    for (label, n) in SIZES {
        let mut group = c.benchmark_group(format!("adamw_update/{label}"));
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(4));
        for (way, update) in ways {
            let name = format!("{label}/{way}");
            group.bench_function(way, |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let tensors = inputs(n, &device);
                        let (coef, finite) = (scalar(0.5, &device), scalar(0.0, &device));
                        let start = Instant::now();
                        let out = update(tensors, coef, finite, s);
                        let took = start.elapsed();
                        drop(out);
                        record(&name, took.as_secs_f64());
                        total += took;
                    }
                    total
                });
            });
        }
        group.finish();
    }
}

fn summary() -> String {
    let mut out = String::from(
        "cwm AdamW update summary (median ms per call, the one pass against the operations)\n",
    );
    for (label, _) in SIZES {
        let one = median_seconds(&format!("{label}/one pass"));
        let ops = median_seconds(&format!("{label}/by operations"));
        if let (Some(one), Some(ops)) = (one, ops) {
            let _ = writeln!(
                out,
                "{label:<22} one pass {:8.3}  by operations {:8.3}  ratio {:.2}x",
                one * 1e3,
                ops * 1e3,
                one / ops
            );
        }
    }
    out
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    let text = summary();
    eprint!("{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("cwm-adamw-update-summary.txt"), text);
    }
}
