//! The `bin_prefix` query's speed on a synthetic `timesteps.parquet` of paper size.
//!
//! ```text
//! cargo run --release -p cwm-stage-evaluate --example bin_prefix_throughput -- [GAMES] [PLIES] [RUNS]
//! ```
//!
//! Writes `GAMES` games (default 100,000) of `PLIES` steps each (default 80, about a real
//! game's length) with the evaluate stage's schema into a temporary directory, then runs
//! [`prefix_bins`] `RUNS` times (default 3) and prints each run's time and rows per second.
//! The figures of `docs/perf.md` come from it; it checks the bins' step counts add up.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, RecordBatch, StringArray, UInt8Array, UInt32Array,
};
use cwm_stage_evaluate::bin_prefix::prefix_bins;
use cwm_stage_evaluate::tables::timesteps_schema;
use parquet::arrow::ArrowWriter;

type Error = Box<dyn std::error::Error>;

/// One row group: `games` games of `plies` steps, game ids from `first`.
fn batch(first: u64, games: u64, plies: u32) -> Result<RecordBatch, Error> {
    let rows = usize::try_from(games)? * plies as usize;
    let mut ids = Vec::with_capacity(rows);
    let mut t = Vec::with_capacity(rows);
    let mut correct = Vec::with_capacity(rows);
    for g in first..first + games {
        for step in 0..plies {
            ids.push(format!("g{g:08}"));
            t.push(step);
            // A deterministic mix of right and wrong steps.
            correct.push(if (g + u64::from(step)) % 7 == 0 {
                74u8
            } else {
                75
            });
        }
    }
    let exact: Vec<bool> = correct.iter().map(|&c| c == 75).collect();
    let small = |v: u8| Arc::new(UInt8Array::from(vec![v; rows])) as ArrayRef;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(ids)),
        Arc::new(UInt32Array::from(t)),
        Arc::new(UInt8Array::from(correct)),
        small(64),
        Arc::new(BooleanArray::from(vec![true; rows])),
        small(4),
        small(1),
        small(1),
        small(1),
        Arc::new(BooleanArray::from(exact)),
        Arc::new(Float32Array::from(vec![0.01f32; rows])),
    ];
    Ok(RecordBatch::try_new(timesteps_schema(), columns)?)
}

fn write_timesteps(path: &std::path::Path, games: u64, plies: u32) -> Result<(), Error> {
    let file = std::fs::File::create(path)?;
    let mut writer = ArrowWriter::try_new(file, timesteps_schema(), None)?;
    let per_batch = 10_000;
    let mut first = 0;
    while first < games {
        let n = per_batch.min(games - first);
        writer.write(&batch(first, n, plies)?)?;
        first += n;
    }
    writer.close()?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| args.get(i).map_or(Ok(default), |s| s.parse::<u64>());
    let (games, plies, runs) = (arg(0, 100_000)?, u32::try_from(arg(1, 80)?)?, arg(2, 3)?);
    let dir = std::env::temp_dir().join(format!("cwm-bin-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("timesteps.parquet");
    write_timesteps(&path, games, plies)?;
    let rows = games * u64::from(plies);
    println!("{games} games x {plies} steps = {rows} rows");
    for run in 1..=runs {
        let start = Instant::now();
        let bins = prefix_bins(&path, 20)?;
        let secs = start.elapsed().as_secs_f64();
        let steps: u64 = bins.iter().map(|b| b.steps).sum();
        if steps != rows {
            return Err(format!("the bins hold {steps} steps, the file {rows}").into());
        }
        println!(
            "run {run}: {secs:.3} s, {:.1} M rows/s",
            rows as f64 / secs / 1e6
        );
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
