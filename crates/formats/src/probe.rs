//! What a `probe` artifact holds (written by `cwm-stage-probe`, read by the report):
//! `summary.json`, linear board probes fitted on one model's hidden states layer by layer
//! (beyond-the-paper E9) and scored on held-out splits, and `probes.parquet`, the fitted
//! weights (one row per layer, square and class; its schema lives with its writer).
//!
//! Layers are numbered as `cwm_models::hidden` numbers them: 0 the embedding output, 1..=L
//! the residual stream after each block, L + 1 the head input. A value that is not defined
//! (no vector scored) is `null`, never NaN.

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the fitted weights.
pub const PROBES_FILE: &str = "probes.parquet";
/// The `kind` of a probe summary.
pub const KIND: &str = "probe";

fn kind() -> String {
    KIND.to_owned()
}

/// `summary.json` of a probe artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    /// The format version ([`ProbeSummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The model family (`transformer`, `slice`, ...).
    pub arch: String,
    /// The model size (`d128`, ...).
    pub size: String,
    /// The model (train) artifact's hash, or null.
    #[serde(default)]
    pub model_hash: Option<String>,
    /// The label of the games the probes were fitted on (`train`, `random_seed1`, ...).
    pub fit_split: String,
    /// The fitting games' (tokenize) artifact hash, or null.
    #[serde(default)]
    pub fit_hash: Option<String>,
    /// How the steps of a game were chosen: `uniform` or `last`.
    pub sampling: String,
    /// Steps taken per game.
    pub steps_per_game: u32,
    /// The model's block count L.
    pub blocks: u32,
    /// Whether the 11 auxiliary labels were probed too.
    pub aux: bool,
    /// Vectors fitted on (after the validation slice was set aside), per layer.
    pub fit_vectors: u64,
    /// Vectors of the validation slice used for early stopping.
    pub val_vectors: u64,
    /// The fitting settings.
    pub training: ProbeTraining,
    /// One entry per layer, 0..=L + 1.
    pub layers: Vec<LayerProbe>,
    /// Per evaluated split, the baselines the layers are compared with.
    pub baselines: Vec<SplitBaseline>,
}

impl Versioned for ProbeSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// How the probes were fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeTraining {
    /// Epochs at most.
    pub epochs: u32,
    /// Adam's learning rate.
    pub lr: f64,
    /// Vectors per minibatch.
    pub batch_size: u32,
    /// The seed of the sampling, the split and the initialisation.
    pub seed: u64,
}

/// One layer's probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerProbe {
    /// The layer index ℓ.
    pub layer: u32,
    /// `embedding`, `block N` or `head input`.
    pub name: String,
    /// ℓ / (L + 1): 0 at the embedding, 1 at the head input.
    pub depth: f64,
    /// The epoch whose weights were kept (lowest validation loss), from 1.
    pub best_epoch: u32,
    /// Mean cross-entropy per square on the validation slice at that epoch.
    pub val_loss: Option<f64>,
    /// Square accuracy on the validation slice at that epoch.
    pub val_accuracy: Option<f64>,
    /// The scores on each evaluated split.
    pub eval: Vec<ProbeScores>,
}

/// A probe's (or a baseline's) scores on one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeScores {
    /// The split's label.
    pub split: String,
    /// Vectors scored (sampled steps).
    pub vectors: u64,
    /// Mean square accuracy over the 64 squares of every vector.
    pub square_accuracy: Option<f64>,
    /// Precision over the 13 square classes, each class weighted by its true count.
    pub weighted_precision: Option<f64>,
    /// Recall, weighted the same way.
    pub weighted_recall: Option<f64>,
    /// F1, weighted the same way.
    pub weighted_f1: Option<f64>,
    /// Share of vectors whose 64 squares are all right.
    pub board_exact: Option<f64>,
    /// Accuracy of the 11 auxiliary labels, when they were probed.
    #[serde(default)]
    pub aux_accuracy: Option<f64>,
    /// Square accuracy per prefix bin.
    pub by_bin: Vec<BinAccuracy>,
}

/// Square accuracy over the sampled steps `start ≤ t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BinAccuracy {
    /// First step of the bin.
    pub start: u32,
    /// One past its last step.
    pub end: u32,
    /// Vectors in the bin.
    pub vectors: u64,
    /// Their mean square accuracy; `null` without vectors.
    pub accuracy: Option<f64>,
}

/// What a split's probes are compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitBaseline {
    /// The split's label.
    pub split: String,
    /// The model's own head on the same sampled steps (its argmax per square).
    pub model_head: ProbeScores,
    /// The majority class of each square in the fitting vectors of the same prefix bin.
    pub majority: ProbeScores,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::round_trip;

    fn scores(split: &str) -> ProbeScores {
        ProbeScores {
            split: split.into(),
            vectors: 40,
            square_accuracy: Some(0.875),
            weighted_precision: Some(0.5),
            weighted_recall: Some(0.875),
            weighted_f1: Some(0.625),
            board_exact: None,
            aux_accuracy: None,
            by_bin: vec![BinAccuracy {
                start: 0,
                end: 20,
                vectors: 40,
                accuracy: Some(0.875),
            }],
        }
    }

    #[test]
    fn probe_summary_round_trips() {
        round_trip(&ProbeSummary {
            version: ProbeSummary::VERSION,
            kind: KIND.into(),
            arch: "slice".into(),
            size: "d128".into(),
            model_hash: Some("m".into()),
            fit_split: "train".into(),
            fit_hash: None,
            sampling: "uniform".into(),
            steps_per_game: 5,
            blocks: 1,
            aux: false,
            fit_vectors: 900,
            val_vectors: 100,
            training: ProbeTraining {
                epochs: 15,
                lr: 0.001,
                batch_size: 256,
                seed: 0,
            },
            layers: vec![LayerProbe {
                layer: 0,
                name: "embedding".into(),
                depth: 0.0,
                best_epoch: 3,
                val_loss: Some(0.25),
                val_accuracy: Some(0.5),
                eval: vec![scores("test_real")],
            }],
            baselines: vec![SplitBaseline {
                split: "test_real".into(),
                model_head: scores("test_real"),
                majority: scores("test_real"),
            }],
        });
    }
}
