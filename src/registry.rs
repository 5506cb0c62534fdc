//! The stage kinds this build of cwm knows, by name.
//!
//! The executor only ever sees `dyn StageKind`; adding a stage kind means
//! adding it here, nothing else.

use cwm_stage::StageKind;

/// A set of stage kinds, looked up by name.
pub struct Registry {
    kinds: Vec<Box<dyn StageKind>>,
}

impl Registry {
    /// Every stage kind built into cwm.
    pub fn builtin() -> Self {
        Self::from_kinds(vec![
            Box::new(cwm_stage_command::CommandStage),
            Box::new(cwm_stages_data::DownloadStage),
            Box::new(cwm_stages_data::ParseStage),
            Box::new(cwm_stages_data::SplitStage),
            Box::new(cwm_stages_data::TokenizeStage),
            Box::new(cwm_stages_data::RandomUniformStage),
            Box::new(cwm_stage_train::TrainStage),
            Box::new(cwm_stage_evaluate::EvaluateStage),
            Box::new(cwm_stage_evaluate::BinPrefixStage),
            Box::new(cwm_stage_evaluate::SelectStage),
            Box::new(cwm_stage_report::ReportStage),
        ])
    }

    /// A registry of exactly these kinds (tests use this).
    pub fn from_kinds(kinds: Vec<Box<dyn StageKind>>) -> Self {
        Self { kinds }
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&dyn StageKind> {
        self.kinds
            .iter()
            .find(|k| k.name() == name)
            .map(|k| k.as_ref())
    }

    /// All kind names, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name()).collect()
    }

    /// All kinds, in registration order.
    pub fn kinds(&self) -> impl Iterator<Item = &dyn StageKind> {
        self.kinds.iter().map(|k| k.as_ref())
    }
}
