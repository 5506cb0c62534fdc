//! The stage kinds built into cwm: the one place where the engine meets the stage crates.
//!
//! Adding a stage kind means adding its crate to the workspace and one line here.

use cwm_engine::registry::Registry;

/// Every stage kind built into cwm, in the order `cwm kinds` lists them.
pub fn builtin() -> Registry {
    let mut kinds: Vec<Box<dyn cwm_stage::StageKind>> = vec![
        Box::new(cwm_stage_command::CommandStage),
        Box::new(cwm_stage_data::DownloadStage),
        Box::new(cwm_stage_data::ParseStage),
        Box::new(cwm_stage_data::SplitStage),
        Box::new(cwm_stage_data::TokenizeStage),
        Box::new(cwm_stage_data::RandomUniformStage),
        Box::new(cwm_stage_data::RandomContinuationStage),
        Box::new(cwm_stage_train::TrainStage),
        Box::new(cwm_stage_evaluate::EvaluateStage),
        Box::new(cwm_stage_evaluate::BinPrefixStage),
        Box::new(cwm_stage_evaluate::SelectStage),
    ];
    kinds.extend(cwm_stage_diagnose::stage_kinds());
    kinds.extend(cwm_stage_probe::stage_kinds());
    kinds.push(Box::new(cwm_stage_report::ReportStage));
    Registry::from_kinds(kinds)
}
