//! The stage kinds of cwm that look inside the models: `probe`, where a model keeps the board
//! (beyond-spec E9), `markov`, whether its hidden state depends on the move order (E8,
//! E10), and `edit`, whether the board can be changed through the hidden state (E11).
//!
//! A linear probe per layer reads the 64 squares (and optionally the 11 other labels) from
//! the hidden states a model computes at each step, with the layers numbered by
//! [`cwm_models::hidden`]: ℓ = 0 the embedding output, ℓ = 1..=L after each block, ℓ = L + 1
//! the head input (where the probe can do what the model's own head does). Probes fitted on
//! the model's training games say where the state becomes linearly readable; probes fitted on
//! random games, scored on random games, say whether a state the head misreads is there at
//! all.
//!
//! * [`mod@probe`]: the stage's steps and its params ([`ProbeStage`]).
//! * [`collect`]: the model's hidden states at sampled steps of tokenized games.
//! * [`sample`]: which steps, and which games validate.
//! * [`fit`]: fitting one probe (Adam, early stopping) on the backend.
//! * [`linear`]: the probe itself: logits in the head's layout, predictions, loss.
//! * [`score`]: square accuracy, weighted precision/recall/F1, board-exact, by ply bin;
//!   the majority baseline.
//! * [`weights`]: the fitted probes on disk.
//! * [`mod@edit`]: the `edit` stage: cases, edit vectors and what the edits did (E11);
//!   [`EditStage`].
//! * [`mod@markov`]: the `markov` stage: classes of transposed prefixes ([`markov::classes`])
//!   and the per-layer test ([`markov::stats`]); [`MarkovStage`].
//!
//! Errors are [`ProbeError`]s naming the file; every output file is written under a
//! temporary name and renamed when complete.
#![deny(missing_docs)]

pub mod collect;
pub mod edit;
mod error;
pub mod fit;
pub mod linear;
pub mod markov;
pub mod probe;
pub mod sample;
pub mod score;
mod stage;
#[cfg(test)]
mod test_games;
pub mod weights;

use cwm_stage::StageKind;

pub use error::ProbeError;
pub use probe::{ProbeInputs, ProbeOptions, probe};
pub use stage::{EditStage, MarkovStage, ProbeStage};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// Every stage kind of this crate.
pub fn stage_kinds() -> Vec<Box<dyn StageKind>> {
    vec![
        Box::new(ProbeStage),
        Box::new(MarkovStage),
        Box::new(EditStage),
    ]
}
