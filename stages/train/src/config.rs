//! The training configuration: [`cwm_formats::train::TrainConfig`]'s four sections (model,
//! optimiser, schedule, data), with the model held as its validated [`ModelConfig`], and the
//! `train_config.json` file it is saved as beside every checkpoint.

use std::path::Path;

use cwm_formats::train::{CONFIG_FILE, ModelSection, TrainConfigFile};
use cwm_models::{Family, ModelConfig, Precision, Rope, TrainingAttention};

use crate::TrainError;
use crate::adamw::AdamWConfig;

/// Everything that determines a training run, by section (see [`cwm_formats::train`]):
/// `model`, `optimiser`, `schedule` and `data`. `TrainConfig::new(model)` gives the stage's
/// defaults.
pub type TrainConfig = cwm_formats::train::TrainConfig<ModelConfig>;

/// What the train stage's params say about `model`: its [`ModelSection`].
pub fn model_section(model: &ModelConfig) -> ModelSection {
    ModelSection {
        arch: model.family.name().to_owned(),
        size: model.size.name().to_owned(),
        dropout: model.dropout,
        rope: model.rope.name().to_owned(),
        mamba3_mimo: model.mamba3_mimo,
        precision: model.precision.name().to_owned(),
        attention: model.attention.name().to_owned(),
    }
}

/// The model a [`ModelSection`] describes (its family's defaults for everything else),
/// validated.
///
/// # Errors
/// [`TrainError::Model`] for an unknown family, size, RoPE variant, precision or attention, or an invalid
/// option.
pub fn model_config(section: &ModelSection) -> Result<ModelConfig, TrainError> {
    let family: Family = section.arch.parse()?;
    let mut model = ModelConfig::new(family, section.size.parse()?);
    model.dropout = section.dropout;
    model.rope = section.rope.parse::<Rope>()?;
    model.mamba3_mimo = section.mamba3_mimo;
    model.precision = section.precision.parse::<Precision>()?;
    model.attention = section.attention.parse::<TrainingAttention>()?;
    model.validate()?;
    Ok(model)
}

/// Checks what the sections themselves cannot express (the model is validated when built).
///
/// # Errors
/// [`TrainError::Config`] naming the first unusable setting.
pub fn check(config: &TrainConfig) -> Result<(), TrainError> {
    let bad = |m: String| Err(TrainError::Config(m));
    if config.data.batch_size == 0 {
        return bad("batch_size must be positive".into());
    }
    if config.schedule.steps == 0 && config.schedule.epochs == 0 {
        return bad("steps and epochs are both 0: nothing to train".into());
    }
    let o = &config.optimiser;
    for (name, x) in [
        ("lr", o.lr),
        ("weight_decay", o.weight_decay),
        ("grad_clip", o.grad_clip),
    ] {
        if !x.is_finite() || x < 0.0 {
            return bad(format!("{name} must be a finite number ≥ 0, got {x}"));
        }
    }
    if !(0.0..1.0).contains(&o.beta2) {
        return bad(format!("beta2 must be in [0, 1), got {}", o.beta2));
    }
    Ok(())
}

/// The AdamW settings of `config`, with spec D.2's decay exemptions (`A_log`, `dt_bias` of
/// Gated DeltaNet only).
pub fn adamw_config(config: &TrainConfig) -> AdamWConfig {
    let o = &config.optimiser;
    let mut adamw = AdamWConfig::new(o.beta2, o.weight_decay, o.grad_clip);
    if matches!(config.model.family, Family::Gdn | Family::GdnPos) {
        adamw.no_decay = vec!["a_log".into(), "dt_bias".into()];
    }
    adamw
}

/// Writes `config` as `train_config.json` into the checkpoint directory `dir`.
///
/// # Errors
/// [`TrainError::Format`] when the file cannot be written.
pub fn save_config(dir: &Path, config: &TrainConfig) -> Result<(), TrainError> {
    let file = TrainConfigFile::new(config.with_model(model_section(&config.model)));
    Ok(cwm_formats::write_json(&dir.join(CONFIG_FILE), &file)?)
}

/// Reads the `train_config.json` of the checkpoint directory `dir`, with the model as
/// `model.json` beside it describes it (`model`, from [`cwm_models::load_model`] or
/// [`cwm_models::checkpoint::load_config`]).
///
/// # Errors
/// [`TrainError::Format`] when the file is missing or malformed.
pub fn load_config(dir: &Path, model: ModelConfig) -> Result<TrainConfig, TrainError> {
    let file: TrainConfigFile = cwm_formats::read_json(&dir.join(CONFIG_FILE))?;
    Ok(file.config.with_model(model))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_models::Size;

    #[test]
    fn the_model_section_round_trips_and_the_config_file_reads_back() {
        let mut model = ModelConfig::new(Family::Mamba3, Size::D256);
        model.mamba3_mimo = true;
        model.dropout = 0.0;
        model.precision = Precision::Bf16;
        assert_eq!(model_config(&model_section(&model)).unwrap(), model);
        let mut bad = model_section(&model);
        bad.rope = "sideways".into();
        assert!(model_config(&bad).is_err());

        let mut config = TrainConfig::new(model);
        config.optimiser.lr = 3e-3;
        config.schedule.kind = cwm_formats::train::ScheduleKind::Linear;
        config.data.batch_size = 8;
        let dir = std::env::temp_dir().join(format!("cwm-train-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        save_config(&dir, &config).unwrap();
        assert_eq!(load_config(&dir, config.model.clone()).unwrap(), config);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_settings_are_named() {
        let mut config = TrainConfig::new(ModelConfig::new(Family::Slice, Size::D128));
        assert!(check(&config).is_ok());
        config.optimiser.beta2 = 1.0;
        assert!(check(&config).unwrap_err().to_string().contains("beta2"));
        config.optimiser.beta2 = 0.9;
        config.data.batch_size = 0;
        assert!(
            check(&config)
                .unwrap_err()
                .to_string()
                .contains("batch_size")
        );
    }
}
