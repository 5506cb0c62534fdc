//! The diagnostics stage kinds of cwm: what kind of wrong a wrong state is.
//!
//! * `diagnose` ([`mod@diagnose`]) reads an `evaluate` artifact's `predictions.parquet` and
//!   measures, with the rules engine (`cwm_chess::rules`), the validity of every predicted
//!   state (E1), its fields (E2), its legal moves and rule queries (E3), its dynamics over the
//!   game (E4), the rare events at which it fails (E5) and its probability mass (E12): the
//!   `summary.json` of [`cwm_formats::diagnose`] and a per-step `steps.parquet`. Errors are
//!   [`DiagnoseError`]s naming the file (and the game and step).
//! * `novelty` marks every test step as seen or novel against the training split a model saw.
//! * [`stats`] holds the statistics both share: Wilson intervals, the game-level bootstrap and
//!   the ply-matched lift.
#![deny(missing_docs)]

pub mod diagnose;
mod error;
pub mod novelty;
mod parquet_file;
pub mod stats;

use cwm_stage::StageKind;

pub use diagnose::{DiagnoseInputs, DiagnoseOptions, DiagnoseStage, diagnose};
pub use error::DiagnoseError;

pub use novelty::{
    NoveltyError, NoveltyJoin, NoveltyOptions, NoveltyReader, NoveltyStage, StepRecord, novelty,
    novelty_metrics, read_novelty,
};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// Every stage kind of this crate.
pub fn stage_kinds() -> Vec<Box<dyn StageKind>> {
    vec![Box::new(DiagnoseStage), Box::new(NoveltyStage)]
}
