//! Wall time of one forward + backward pass of the recurrent families at d128 with the
//! sequential and the chunked scans: `cargo run -p cwm-models --example scan_timing`.

use std::time::Instant;

use burn::prelude::*;
use cwm_models::{Family, Model, ModelConfig, Scan, Size, StateModel};

fn main() -> Result<(), cwm_models::ModelError> {
    let device = Device::flex().autodiff();
    let (batch, seq) = (8, 128);
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| ((i * 7919) % 20_480) as i64)
        .collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), &device);
    for family in [Family::Gdn, Family::Mamba2, Family::Mamba3] {
        for scan in [Scan::Sequential, Scan::Chunked] {
            let mut config = ModelConfig::new(family, Size::D128);
            config.scan = scan;
            let model = Model::init(&config, &device)?;
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let start = Instant::now();
                let loss = model.logits(ids.clone()).square().mean();
                let _grads = loss.backward();
                best = best.min(start.elapsed().as_secs_f64());
            }
            println!(
                "{:8} {scan:?}: {best:.3} s (batch {batch}, seq {seq})",
                family.name()
            );
        }
    }
    Ok(())
}
