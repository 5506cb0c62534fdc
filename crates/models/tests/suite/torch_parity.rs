//! cwm against the independent PyTorch implementations in `python/cwm_torch_models.py`.
//!
//! - `exported_keys_match_the_pytorch_state_dict`: a file exported by cwm has exactly the keys
//!   and shapes of the PyTorch model's `state_dict()` (every family at d256, two layers, plus
//!   Mamba-3 MIMO), and loads with `load_state_dict(strict=True)`.
//! - `logits_match_pytorch`: a randomly initialised cwm model (d128) is exported, loaded into
//!   the PyTorch model, and both compute the logits of fixed move sequences (70 steps, so the
//!   chunked scans cross a chunk boundary; one row padded with PAD). The largest absolute
//!   difference must stay within [`TOLERANCE`] at every position, padded ones included.
//!
//! - `slice_logits_match_torch_slices`: the same for SLiCE and its diagonal ablation against
//!   the reference's own SLiCE layer (torch-slices 0.3.3, through `python/reference_stack.py`),
//!   the model the GPU comparison of docs/gpu.md times.
//!
//! When `python3` cannot import torch, safetensors and numpy (and torch-slices, for the last
//! test) these fail under CI and skip loudly elsewhere (see [`require_python`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::prelude::*;
use cwm_models::interop::export_safetensors;
use cwm_models::{Family, HEAD_OUT, Model, ModelConfig, PAD_TOKEN, START_TOKEN, Size, StateModel};

/// Largest allowed absolute difference between cwm's and PyTorch's logits (f32 on both sides;
/// the logits are of order 1–10).
const TOLERANCE: f32 = 1e-4;

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

use cwm_testkit::require_python;

/// Whether `python3` imports torch, safetensors and numpy; see [`require_python`].
fn torch_available() -> bool {
    require_python(
        "torch, safetensors, numpy",
        "pip install torch==2.15.0 safetensors==0.8.0 numpy",
    )
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cwm-torch-parity-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn configs(size: Size) -> Vec<ModelConfig> {
    let mut configs: Vec<_> = Family::ALL
        .into_iter()
        .map(|family| ModelConfig::new(family, size))
        .collect();
    let mut mimo = ModelConfig::new(Family::Mamba3, size);
    mimo.mamba3_mimo = true;
    configs.push(mimo);
    configs
}

fn label(config: &ModelConfig) -> String {
    if config.mamba3_mimo {
        format!("{}-mimo-{}", config.family, config.size)
    } else {
        format!("{}-{}", config.family, config.size)
    }
}

/// Runs `torch_logits.py` on the PyTorch stack `stack` (`eager` or `reference`); returns its
/// stderr on failure.
fn run_python(
    config: &ModelConfig,
    stack: &str,
    weights: &Path,
    io: Option<(&Path, &Path)>,
) -> Result<(), String> {
    let mut command = Command::new("python3");
    command
        .arg(python_dir().join("torch_logits.py"))
        .args(["--stack", stack])
        .args(["--arch", config.family.name(), "--size", config.size.name()])
        .arg("--weights")
        .arg(weights);
    if config.mamba3_mimo {
        command.arg("--mimo");
    }
    if let Some((moves, out)) = io {
        command.arg("--moves").arg(moves).arg("--out").arg(out);
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn exported_keys_match_the_pytorch_state_dict() {
    if !torch_available() {
        return;
    }
    let device = Device::flex();
    let dir = scratch("keys");
    let mut failures = Vec::new();
    for config in configs(Size::D256) {
        let model = Model::init(&config, &device).unwrap();
        let path = dir.join(format!("{}.safetensors", label(&config)));
        export_safetensors(&model, &config, &path).unwrap();
        if let Err(stderr) = run_python(&config, "eager", &path, None) {
            failures.push(format!("{}:\n{stderr}", label(&config)));
        }
        std::fs::remove_file(&path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Two rows of 70 steps: START, then move ids; the second row ends after 40 steps and is
/// padded with PAD.
fn fixed_moves() -> Vec<Vec<i64>> {
    (0..2i64)
        .map(|row| {
            (0..70i64)
                .map(|t| match t {
                    0 => START_TOKEN,
                    _ if row == 1 && t >= 40 => PAD_TOKEN,
                    _ => (t * 7_919 + row * 104_729) % 20_480,
                })
                .collect()
        })
        .collect()
}

/// Exports a fresh cwm model of each of `configs`, has `torch_logits.py --stack STACK` compute
/// the logits of [`fixed_moves`] from it, and compares them with cwm's own at every position.
/// Prints one line per model and fails naming every model beyond [`TOLERANCE`].
fn compare_logits(configs: Vec<ModelConfig>, stack: &str, name: &str) {
    let device = Device::flex();
    let dir = scratch(name);
    let rows = fixed_moves();
    let (batch, seq) = (rows.len(), rows[0].len());
    let moves_path = dir.join("moves.json");
    std::fs::write(&moves_path, serde_json::to_string(&rows).unwrap()).unwrap();
    let flat: Vec<i64> = rows.concat();
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for config in configs {
        let model = Model::init(&config, &device).unwrap();
        let weights = dir.join(format!("{}.safetensors", label(&config)));
        let out = dir.join(format!("{}.f32", label(&config)));
        export_safetensors(&model, &config, &weights).unwrap();
        if let Err(stderr) = run_python(&config, stack, &weights, Some((&moves_path, &out))) {
            failures.push(format!("{}: python failed:\n{stderr}", label(&config)));
            continue;
        }
        let moves =
            Tensor::<2, Int>::from_data(TensorData::new(flat.clone(), [batch, seq]), &device);
        let ours: Vec<f32> = model.logits(moves).into_data().try_into_vec().unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let theirs: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(theirs.len(), batch * seq * HEAD_OUT, "{}", label(&config));
        let (mut max_diff, mut max_abs) = (0f32, 0f32);
        for (a, b) in ours.iter().zip(&theirs) {
            max_diff = max_diff.max((a - b).abs());
            max_abs = max_abs.max(a.abs());
        }
        report.push(format!(
            "{:22} max |cwm − torch ({stack})| = {max_diff:.2e} (max |logit| {max_abs:.2})",
            label(&config)
        ));
        if max_diff.is_nan() || max_diff > TOLERANCE {
            failures.push(format!(
                "{}: max abs diff {max_diff:e} > {TOLERANCE:e}",
                label(&config)
            ));
        }
    }
    eprintln!("{}", report.join("\n"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn logits_match_pytorch() {
    if torch_available() {
        compare_logits(configs(Size::D128), "eager", "logits");
    }
}

#[test]
fn slice_logits_match_torch_slices() {
    if torch_available() && require_python("slices", "pip install torch-slices==0.3.3") {
        let configs = [Family::Slice, Family::SliceDiag]
            .map(|family| ModelConfig::new(family, Size::D128))
            .to_vec();
        compare_logits(configs, "reference", "torch-slices");
    }
}
