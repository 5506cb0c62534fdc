//! A set of stage kinds, looked up by name.
//!
//! The engine only ever sees `dyn StageKind`; which kinds exist is decided by
//! whoever builds the registry (the `cwm` binary lists its built-in kinds in
//! `src/kinds.rs`).

use cwm_stage::StageKind;

/// A set of stage kinds, looked up by name.
pub struct Registry {
    kinds: Vec<Box<dyn StageKind>>,
}

impl Registry {
    /// A registry of exactly these kinds.
    pub fn from_kinds(kinds: Vec<Box<dyn StageKind>>) -> Self {
        Self { kinds }
    }

    /// The kind named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&dyn StageKind> {
        self.kinds
            .iter()
            .find(|k| k.name() == name)
            .map(|k| k.as_ref())
    }

    /// All kind names, in registration order.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.kinds.iter().map(|k| k.name()).collect()
    }

    /// All kinds, in registration order.
    pub fn kinds(&self) -> impl Iterator<Item = &dyn StageKind> {
        self.kinds.iter().map(|k| k.as_ref())
    }
}
