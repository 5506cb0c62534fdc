//! The `evaluate` stage's speed on real tokenized games, with a freshly initialised model.
//!
//! ```text
//! cargo run --release -p cwm-stage-evaluate --example evaluate_throughput -- DATA [RUNS] [SIZE] [probabilities] [no-masses]
//! ```
//!
//! `DATA` is a `tokenize` artifact (the default pipeline's `tokenize_test`, say: `cwm run --only
//! tokenize_test`, then `cwm show tokenize_test` prints its path). The example saves a freshly
//! initialised Transformer of `SIZE` (d128, d256, d384 or d512; default d128; the weights do
//! not change the work) into a temporary directory, then runs [`evaluate`] `RUNS` times
//! (default 5) on the CPU with the stage's defaults, `probabilities` as given and E12's sampled
//! masses unless `no-masses` is, and prints each run's time, the median and steps per second.
//! The arguments after `DATA` may come in any order.

use std::path::PathBuf;
use std::time::Instant;

use burn::prelude::Device;
use cwm_models::{Family, Model, ModelConfig, Size, save_model};
use cwm_stage::Progress;
use cwm_stage_evaluate::{EvaluateOptions, MassOptions, evaluate};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let data = PathBuf::from(
        args.next()
            .ok_or("usage: evaluate_throughput DATA [RUNS] [SIZE] [probabilities] [no-masses]")?,
    );
    let (mut runs, mut size, mut probabilities) = (5usize, Size::D128, false);
    let mut mass = MassOptions::DEFAULT;
    for arg in args {
        if arg == "probabilities" {
            probabilities = true;
        } else if arg == "no-masses" {
            mass = MassOptions::OFF;
        } else if let Ok(n) = arg.parse() {
            runs = n;
        } else {
            size = arg.parse()?;
        }
    }
    let dir = std::env::temp_dir().join(format!("cwm-evaluate-throughput-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = ModelConfig::new(Family::Transformer, size);
    let model = Model::init(&config, &Device::flex())?;
    let checkpoint = dir.join("checkpoint");
    save_model(&checkpoint, &model, &config)?;
    let options = EvaluateOptions {
        split: "test_real".into(),
        probabilities,
        mass,
        ..EvaluateOptions::default()
    };
    let mut times = Vec::with_capacity(runs);
    let mut steps = 0;
    for run in 0..runs {
        let out = dir.join(format!("out{run}"));
        let started = Instant::now();
        let summary = evaluate(
            &checkpoint,
            &data,
            &out,
            &options,
            &Progress::disabled(),
            &|| false,
        )?;
        let seconds = started.elapsed().as_secs_f64();
        steps = summary.steps;
        println!(
            "run {run}: {} games, {} steps in {seconds:.3} s",
            summary.games, summary.steps
        );
        times.push(seconds);
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "median {median:.3} s, {:.0} steps/s ({size}, probabilities: {probabilities})",
        steps as f64 / median
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
