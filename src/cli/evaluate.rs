//! `cwm evaluate`: a checkpoint over tokenized games or reference JSONL shards, without a
//! pipeline. A thin wrapper over `cwm_stage_evaluate::evaluate`, the function the `evaluate`
//! stage runs.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Args;
use cwm_stage::Progress;
use cwm_stage_evaluate::{EvaluateOptions, MassOptions, evaluate};

/// `cwm evaluate`: the reference metrics of a checkpoint on a data set.
#[derive(Args)]
pub struct EvaluateArgs {
    /// Checkpoint directory (model.json + model.bpk), or a train artifact holding checkpoint/.
    #[arg(long)]
    checkpoint: PathBuf,
    /// A tokenize artifact directory or shard file, or reference JSONL (a chess_*.jsonl
    /// directory or one .jsonl file).
    #[arg(long)]
    data: PathBuf,
    /// Output directory: timesteps.parquet, games.parquet, predictions.parquet, summary.json.
    #[arg(long)]
    out: PathBuf,
    /// Split label written into the summary.
    #[arg(long, default_value = "test")]
    split: String,
    /// Games per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Evaluate at most N games (0 = all).
    #[arg(long, default_value_t = 0)]
    max_games: u64,
    /// Keep the first N tokens of each game, START included (0 = full games).
    #[arg(long, default_value_t = 0)]
    max_steps: usize,
    /// Device the model runs on: cpu, cuda or cuda:N (cuda needs a build with `--features cuda`),
    /// or cube-cpu (a build with `--features cube-cpu`: docs/gpu.md).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Also write each label's p(target) and p(argmax) into predictions.parquet.
    #[arg(long)]
    probabilities: bool,
    /// E12: states drawn from the label distributions at each sampled step, for the valid and
    /// afford masses (0 = none).
    #[arg(long, default_value_t = MassOptions::DEFAULT.samples)]
    mass_samples: u32,
    /// E12: steps sampled for the masses, a uniform draw without replacement (0 = every step).
    #[arg(long, default_value_t = MassOptions::DEFAULT.steps)]
    mass_steps: u64,
    /// E12: seed of the sampled steps and the draws.
    #[arg(long, default_value_t = MassOptions::DEFAULT.seed)]
    mass_seed: u64,
}

/// Runs `cwm evaluate`.
pub fn run(args: EvaluateArgs, threads: usize) -> Result<()> {
    let started = Instant::now();
    let options = EvaluateOptions {
        split: args.split.clone(),
        batch_size: args.batch_size,
        max_games: args.max_games,
        max_steps: args.max_steps,
        threads,
        device: args.device.clone(),
        probabilities: args.probabilities,
        mass: MassOptions {
            samples: args.mass_samples,
            steps: args.mass_steps,
            seed: args.mass_seed,
        },
        model_hash: None,
        data_hash: None,
    };
    let summary = evaluate(
        &args.checkpoint,
        &args.data,
        &args.out,
        &options,
        &Progress::disabled(),
        &|| false,
    )
    .with_context(|| {
        format!(
            "evaluating {} on {}",
            args.checkpoint.display(),
            args.data.display()
        )
    })?;
    outln!(
        "{} {} on {}: {} games, {} steps in {:.1}s → {}",
        summary.arch,
        summary.size,
        summary.split,
        summary.games,
        summary.steps,
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    outln!(
        "  loss {:.5}  labelwise {:.5}  exact_state {:.5}  trajectory {:.5} ({}/{})",
        summary.loss,
        summary.labelwise,
        summary.exact_state,
        summary.trajectory,
        summary.exact_games,
        summary.games
    );
    if let Some(mass) = &summary.sampled_mass {
        let share = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.5}"));
        outln!(
            "  valid_mass {}  afford_mass {} ({} states at each of {} steps)",
            share(mass.valid_mass),
            share(mass.afford_mass),
            mass.samples,
            mass.steps
        );
    }
    Ok(())
}
