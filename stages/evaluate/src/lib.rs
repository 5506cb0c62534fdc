//! The evaluation stage kinds of cwm: `evaluate` (a model over tokenized games, with the
//! reference's loss and metrics), `bin_prefix` (the metrics by prefix bin, aggregated from the
//! per-step table) and `select` (the best hyperparameters of a sweep per
//! arch × size, by validation loss).
//!
//! * [`evaluate`] streams games a batch at a time through a checkpoint and writes
//!   `timesteps.parquet` (one row per valid step), `games.parquet` (one row per game),
//!   `predictions.parquet` (per valid step, in the same order: the predicted and the true 75
//!   labels, the input move, the log-probability of the true state and, with the
//!   `probabilities` param, each label's p(target) and p(argmax), and E12's sampled valid and
//!   afford masses, [`mass`]) and `summary.json` (spec A.5's micro-averages). It is also what
//!   `cwm evaluate` runs.
//! * [`bin_prefix`] aggregates an evaluate artifact's `timesteps.parquet` with a DataFusion query
//!   (three columns scanned) and writes `bins.parquet` and `summary.json`.
//! * [`select`] reads the `summary.json` of many `train` artifacts and writes `selected.json`,
//!   which the `train` stage reads to retrain the winners.
//! * Errors are [`EvalError`]s naming the file; every output file is written under a temporary
//!   name and renamed when complete.
//!
//! ```no_run
//! use cwm_stage::Progress;
//! use cwm_stage_evaluate::{EvaluateOptions, evaluate};
//!
//! let summary = evaluate(
//!     "runs/slice-d128".as_ref(),
//!     "data/test_tokens".as_ref(),
//!     "eval/slice-d128".as_ref(),
//!     &EvaluateOptions { split: "test_real".into(), ..EvaluateOptions::default() },
//!     &Progress::disabled(),
//!     &|| false,
//! )?;
//! println!("exact state {:.4}", summary.exact_state);
//! # Ok::<(), cwm_stage_evaluate::EvalError>(())
//! ```
#![deny(missing_docs)]

pub mod bin_prefix;
mod error;
pub mod evaluate;
pub mod mass;
pub mod select;
pub mod tables;

use cwm_stage::StageKind;

pub use bin_prefix::{BinPrefixStage, BinPrefixSummary, PrefixBin, bin_prefix, prefix_bins};
pub use error::EvalError;
pub use evaluate::{
    EvaluateOptions, EvaluateStage, EvaluateSummary, GameSource, LabelProbabilities,
    checkpoint_dir, evaluate, evaluate_batch,
};
pub use mass::{MassOptions, MassSampler, StepMass};
pub use select::{
    Metric, RankPick, RunInput, SelectRule, SelectStage, Selection, select_runs, write_selection,
};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// Every stage kind of this crate.
pub fn stage_kinds() -> Vec<Box<dyn StageKind>> {
    vec![
        Box::new(EvaluateStage),
        Box::new(BinPrefixStage),
        Box::new(SelectStage),
    ]
}

#[cfg(test)]
mod fingerprint_tests {
    use super::*;

    #[test]
    fn each_kind_fingerprints_only_the_files_it_runs() {
        let evaluate = EvaluateStage.fingerprint();
        let bins = BinPrefixStage.fingerprint();
        let select = SelectStage.fingerprint();
        assert!(evaluate.contains("src/evaluate.rs=") && !evaluate.contains("src/select.rs="));
        assert!(bins.contains("src/bin_prefix.rs=") && !bins.contains("src/select.rs="));
        assert!(select.contains("src/select.rs=") && !select.contains("src/evaluate.rs="));
        for fingerprint in [&evaluate, &bins, &select] {
            assert!(!fingerprint.contains("=missing"), "{fingerprint}");
        }
    }
}
