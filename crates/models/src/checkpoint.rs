//! Model checkpoints: a directory holding the architecture and the weights.
//!
//! | file | content |
//! |---|---|
//! | [`CONFIG_FILE`] (`model.json`) | the [`ModelConfig`] as JSON (family, size and options by canonical name) plus the parameter count |
//! | [`WEIGHTS_FILE`] (`model.bpk`) | every parameter, in burn's burnpack format |
//!
//! This is cwm's own format, exact to the bit (f32 values are stored as they are). The train
//! stage writes it, evaluate reads it; the safetensors file with the reference's PyTorch key
//! names is an export of it. [`save_model`] writes both files with
//! [`cwm_formats::fs::write_atomic`], so a crash never leaves a half-written checkpoint under
//! the final names.

use std::fs;
use std::path::Path;

use burn::prelude::*;
use serde_json::{Value, json};

use crate::config::{ModelConfig, Precision, Rope, Scan, TrainingAttention};
use crate::error::ModelError;
use crate::model::Model;
use crate::rng::rng_lock;

/// The architecture file of a checkpoint directory.
pub const CONFIG_FILE: &str = "model.json";
/// The weights file of a checkpoint directory.
pub const WEIGHTS_FILE: &str = "model.bpk";

fn checkpoint_error(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The configuration as the JSON object stored in [`CONFIG_FILE`].
pub fn config_to_json(config: &ModelConfig) -> Value {
    json!({
        "arch": config.family.name(),
        "size": config.size.name(),
        "dropout": config.dropout,
        "rope": config.rope.name(),
        "slice_block_size": config.slice_block_size,
        "scan": config.scan.name(),
        "chunk_size": config.chunk_size,
        "mamba3_mimo": config.mamba3_mimo,
        "mamba3_mimo_rank": config.mamba3_mimo_rank,
        "precision": config.precision.name(),
        "attention": config.attention.name(),
    })
}

/// Reads a configuration written by [`config_to_json`]. Missing option fields take their
/// defaults from [`ModelConfig::new`]; `arch` and `size` are required.
///
/// # Errors
/// [`ModelError::InvalidConfig`] for a missing or malformed field, or the errors of the name
/// parsers and [`ModelConfig::validate`].
pub fn config_from_json(value: &Value) -> Result<ModelConfig, ModelError> {
    let invalid = |field: &'static str, reason: &str| ModelError::InvalidConfig {
        field,
        reason: reason.to_owned(),
    };
    let text = |field: &'static str| -> Result<Option<&str>, ModelError> {
        match value.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(field, "must be a string")),
        }
    };
    let unsigned = |field: &'static str| -> Result<Option<usize>, ModelError> {
        match value.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| invalid(field, "must be a non-negative integer")),
        }
    };
    let family = text("arch")?
        .ok_or_else(|| invalid("arch", "is required"))?
        .parse()?;
    let size = text("size")?
        .ok_or_else(|| invalid("size", "is required"))?
        .parse()?;
    let mut config = ModelConfig::new(family, size);
    if let Some(dropout) = value.get("dropout").filter(|v| !v.is_null()) {
        config.dropout = dropout
            .as_f64()
            .ok_or_else(|| invalid("dropout", "must be a number"))?;
    }
    if let Some(rope) = text("rope")? {
        config.rope = rope.parse::<Rope>()?;
    }
    config.slice_block_size = unsigned("slice_block_size")?;
    if let Some(scan) = text("scan")? {
        config.scan = scan.parse::<Scan>()?;
    }
    config.chunk_size = unsigned("chunk_size")?;
    if let Some(mimo) = value.get("mamba3_mimo").filter(|v| !v.is_null()) {
        config.mamba3_mimo = mimo
            .as_bool()
            .ok_or_else(|| invalid("mamba3_mimo", "must be true or false"))?;
    }
    if let Some(rank) = unsigned("mamba3_mimo_rank")? {
        config.mamba3_mimo_rank = rank;
    }
    if let Some(precision) = text("precision")? {
        config.precision = precision.parse::<Precision>()?;
    }
    if let Some(attention) = text("attention")? {
        config.attention = attention.parse::<TrainingAttention>()?;
    }
    config.validate()?;
    Ok(config)
}

/// Writes `model` (built from `config`) as a checkpoint into `dir`, creating it if needed.
///
/// # Errors
/// [`ModelError::Checkpoint`] when a file cannot be written.
pub fn save_model(dir: &Path, model: &Model, config: &ModelConfig) -> Result<(), ModelError> {
    fs::create_dir_all(dir).map_err(|e| checkpoint_error(dir, e.to_string()))?;
    let mut meta = config_to_json(config);
    meta["params"] = json!(model.num_params());
    let text = serde_json::to_string_pretty(&meta).expect("a JSON value always serializes") + "\n";
    let weights = dir.join(WEIGHTS_FILE);
    let bytes = model
        .clone()
        .into_record()
        .into_bytes()
        .map_err(|e| checkpoint_error(&weights, e.to_string()))?;
    cwm_formats::fs::write_atomic(&weights, &bytes)
        .map_err(|e| checkpoint_error(&weights, e.to_string()))?;
    let config_path = dir.join(CONFIG_FILE);
    cwm_formats::fs::write_atomic(&config_path, text.as_bytes())
        .map_err(|e| checkpoint_error(&config_path, e.to_string()))
}

/// The checkpoint directory of `path`: `path` itself when it holds [`CONFIG_FILE`], else its
/// `checkpoint/` subdirectory (a `train` artifact) when that does; `None` otherwise.
pub fn find_checkpoint(path: &Path) -> Option<std::path::PathBuf> {
    if path.join(CONFIG_FILE).is_file() {
        return Some(path.to_path_buf());
    }
    let nested = path.join("checkpoint");
    nested.join(CONFIG_FILE).is_file().then_some(nested)
}

/// Reads the configuration of the checkpoint in `dir`.
///
/// # Errors
/// [`ModelError::Checkpoint`] when the file is missing or not JSON; the errors of
/// [`config_from_json`] for bad fields.
pub fn load_config(dir: &Path) -> Result<ModelConfig, ModelError> {
    let path = dir.join(CONFIG_FILE);
    let text = fs::read_to_string(&path).map_err(|e| checkpoint_error(&path, e.to_string()))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| checkpoint_error(&path, e.to_string()))?;
    config_from_json(&value)
}

/// Loads the checkpoint in `dir` onto `device`: the model and its configuration.
///
/// The model computes in f32 whatever [`Precision`] it was trained in, as the reference
/// evaluates every checkpoint (spec A.5); the configuration keeps the training precision, which
/// [`Model::with_precision`] puts back (a resumed training run does).
///
/// # Errors
/// As [`load_config`], [`Model::init`], and [`ModelError::Checkpoint`] when the weights are
/// missing, unreadable or do not fit the architecture.
pub fn load_model(dir: &Path, device: &Device) -> Result<(Model, ModelConfig), ModelError> {
    let config = load_config(dir)?;
    let weights = dir.join(WEIGHTS_FILE);
    if !weights.is_file() {
        return Err(checkpoint_error(&weights, "missing"));
    }
    let f32_config = ModelConfig {
        precision: Precision::F32,
        ..config.clone()
    };
    // Held until every parameter is replaced: initialisers the load forces draw under it.
    let rng = rng_lock();
    let model = Model::build(&f32_config, device, &rng)?
        .try_load_file(&weights)
        .map_err(|e| checkpoint_error(&weights, e.to_string()))?;
    drop(rng);
    Ok((model, config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Family, Size};
    use crate::model::StateModel;

    #[test]
    fn config_round_trips_through_json() {
        let mut config = ModelConfig::new(Family::Mamba3, Size::D256);
        config.mamba3_mimo = true;
        config.scan = Scan::Sequential;
        config.dropout = 0.0;
        config.precision = Precision::Bf16;
        config.attention = TrainingAttention::Kernels;
        let back = config_from_json(&config_to_json(&config)).unwrap();
        assert_eq!(back, config);
        // An unset chunk size stays unset (the device picks it); a stored one is kept.
        assert_eq!(back.chunk_size, None);
        config.chunk_size = Some(64);
        let back = config_from_json(&config_to_json(&config)).unwrap();
        assert_eq!(back.chunk_size, Some(64));
        let minimal = json!({"arch": "slice", "size": "d128"});
        assert_eq!(
            config_from_json(&minimal).unwrap(),
            ModelConfig::new(Family::Slice, Size::D128)
        );
        assert!(config_from_json(&json!({"arch": "slice"})).is_err());
        assert!(config_from_json(&json!({"arch": "lstm", "size": "d128"})).is_err());
        assert!(config_from_json(&json!({"arch": "gdn", "size": "d128", "scan": 3})).is_err());
    }

    #[test]
    fn saved_model_loads_with_identical_logits() {
        let device = Device::flex();
        let config = ModelConfig::new(Family::SliceDiag, Size::D128);
        let model = Model::init(&config, &device).unwrap();
        let dir = std::env::temp_dir().join(format!("cwm-ckpt-{}", std::process::id()));
        save_model(&dir, &model, &config).unwrap();
        let (loaded, loaded_config) = load_model(&dir, &device).unwrap();
        assert_eq!(loaded_config, config);
        let moves = Tensor::<2, Int>::from_data([[20480, 1310, 5000, 20481]], &device);
        let a = model.valid().logits(moves.clone()).into_data();
        let b = loaded.valid().logits(moves).into_data();
        assert_eq!(a, b);
        let other = ModelConfig::new(Family::Transformer, Size::D128);
        fs::write(
            dir.join(CONFIG_FILE),
            serde_json::to_string(&config_to_json(&other)).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            load_model(&dir, &device),
            Err(ModelError::Checkpoint { .. })
        ));
        fs::remove_dir_all(&dir).unwrap();
    }
}
