//! What a `probe` artifact holds (written by `cwm-stage-probe`, read by the report):
//! `summary.json`, linear board probes fitted on one model's hidden states layer by layer
//! (E9 of the beyond-the-paper specification) and scored on held-out splits, and the probes'
//! weights, `probes.json` (an index) beside `probes.bin` (the numbers).
//!
//! Layers are numbered as `cwm_models::hidden` numbers them: ℓ = 0 the embedding output,
//! ℓ = 1..=L after each block, ℓ = L + 1 the head input. A *probe set* is one probe per layer,
//! fitted on one source of games: `id` on the model's own training split, `ood` on random
//! legal games. Every accuracy is a fraction in [0, 1]; a value that is not defined (no
//! vectors) is `null`, never NaN.

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the weights' index.
pub const WEIGHTS_INDEX_FILE: &str = "probes.json";
/// The file name of the weights: little-endian `f32`, each probe's weights (row-major
/// `[outputs, d]`) then its biases (`[outputs]`), at the offsets the index gives.
pub const WEIGHTS_FILE: &str = "probes.bin";
/// The `kind` of a probe summary.
pub const KIND: &str = "probe";
/// The probe set fitted on the model's training split.
pub const SET_ID: &str = "id";
/// The probe set fitted on random legal games (out of distribution).
pub const SET_OOD: &str = "ood";

fn kind() -> String {
    KIND.to_owned()
}

/// `summary.json` of a probe artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    /// Format version ([`Versioned::VERSION`]).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`].
    #[serde(default = "kind")]
    pub kind: String,
    /// The model's family (`transformer`, `slice`, ...).
    pub arch: String,
    /// The model's size (`d128`, ...).
    pub size: String,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
    /// L, the model's block count: its layers are 0..=L + 1.
    pub blocks: u32,
    /// The width d of every hidden state.
    pub d_model: u32,
    /// How steps were drawn from each game: `uniform` or `last`.
    pub sampling: String,
    /// Steps drawn from each game (all of a shorter game's steps).
    pub steps_per_game: u32,
    /// Whether the probes also read the 11 auxiliary labels (side, castling, en passant,
    /// counters), besides the 64 squares.
    pub aux: bool,
    /// How each probe set was fitted.
    pub fits: Vec<ProbeFit>,
    /// The model's own head and the majority baseline on each evaluated split.
    pub baselines: Vec<SplitBaseline>,
    /// Every probe set × split × layer.
    pub results: Vec<ProbeResult>,
}

impl Versioned for ProbeSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// How one probe set was fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeFit {
    /// [`SET_ID`] or [`SET_OOD`].
    pub set: String,
    /// The games the vectors came from (the validation slice included).
    pub games: u64,
    /// Vectors the probes were fitted on, per layer.
    pub vectors: u64,
    /// Vectors of the validation slice that chose each probe's epoch.
    pub val_vectors: u64,
    /// One entry per layer, ℓ = 0 first.
    pub layers: Vec<LayerFit>,
}

/// The fit of one layer's probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerFit {
    /// ℓ.
    pub layer: u32,
    /// Epochs run (early stopping may end before the limit).
    pub epochs: u32,
    /// The epoch (1-based) whose weights were kept: the lowest validation loss.
    pub best_epoch: u32,
    /// Mean cross-entropy per label on the validation slice at that epoch.
    pub val_loss: Option<f64>,
    /// Mean cross-entropy per label on the fitting vectors at that epoch.
    pub train_loss: Option<f64>,
}

/// What the model itself and a trivial predictor score on one split, at the same steps the
/// probes are scored on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitBaseline {
    /// The split's label (`test_real`, `test_random`, ...).
    pub split: String,
    /// Games read.
    pub games: u64,
    /// Vectors (steps) scored.
    pub vectors: u64,
    /// The model's own head on the 64 squares.
    pub head: SquareScores,
    /// The most common class of each square in each ply bin of the `id` fitting vectors.
    pub majority: SquareScores,
}

/// Scores of a 64-square prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SquareScores {
    /// Mean square accuracy.
    pub square_acc: Option<f64>,
    /// Precision over the 13 classes, weighted by each class's true count.
    pub precision_w: Option<f64>,
    /// Recall over the 13 classes, weighted (equal to the square accuracy).
    pub recall_w: Option<f64>,
    /// F1 over the 13 classes, weighted.
    pub f1_w: Option<f64>,
    /// Share of vectors whose 64 squares are all right.
    pub board_exact: Option<f64>,
    /// Accuracy of the 11 auxiliary labels, when they were read.
    pub aux_acc: Option<f64>,
    /// Square accuracy and board-exact rate by ply bin.
    pub by_bin: Vec<BinScore>,
}

/// Scores in one ply bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinScore {
    /// First step t of the bin.
    pub start: u32,
    /// One past its last step.
    pub end: u32,
    /// Vectors in the bin.
    pub vectors: u64,
    /// Mean square accuracy.
    pub square_acc: Option<f64>,
    /// Share of vectors whose 64 squares are all right.
    pub board_exact: Option<f64>,
}

/// One probe (set, layer) scored on one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// [`SET_ID`] or [`SET_OOD`].
    pub set: String,
    /// The split's label.
    pub split: String,
    /// ℓ.
    pub layer: u32,
    /// `embedding`, `block N` or `head input`.
    pub layer_name: String,
    /// The scores.
    pub scores: SquareScores,
}

/// `probes.json`: where each probe's numbers lie in `probes.bin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeWeights {
    /// Format version ([`Versioned::VERSION`]).
    #[serde(default = "version_1")]
    pub version: u32,
    /// The width d of the hidden states the probes read.
    pub d_model: u32,
    /// The label groups each probe predicts, in `cwm_formats::labels::LABEL_GROUPS` order
    /// (the first `n` groups: 1 = the 64 squares, 7 = all 75 labels).
    pub groups: u32,
    /// Outputs (logits) per probe.
    pub outputs: u32,
    /// One entry per probe.
    pub probes: Vec<ProbeEntry>,
}

impl Versioned for ProbeWeights {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// One probe's place in `probes.bin`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeEntry {
    /// [`SET_ID`] or [`SET_OOD`].
    pub set: String,
    /// ℓ.
    pub layer: u32,
    /// Offset of its first weight, in `f32`s from the start of the file: `outputs × d`
    /// weights, then `outputs` biases.
    pub offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_round_trips_and_undefined_scores_are_null() {
        let scores = SquareScores {
            square_acc: Some(0.5),
            precision_w: None,
            recall_w: Some(0.5),
            f1_w: None,
            board_exact: Some(0.0),
            aux_acc: None,
            by_bin: vec![BinScore {
                start: 0,
                end: 20,
                vectors: 0,
                square_acc: None,
                board_exact: None,
            }],
        };
        let summary = ProbeSummary {
            version: ProbeSummary::VERSION,
            kind: KIND.to_owned(),
            arch: "slice".into(),
            size: "d128".into(),
            model_hash: None,
            blocks: 2,
            d_model: 128,
            sampling: "uniform".into(),
            steps_per_game: 5,
            aux: false,
            fits: vec![],
            baselines: vec![],
            results: vec![ProbeResult {
                set: SET_ID.into(),
                split: "test_real".into(),
                layer: 0,
                layer_name: "embedding".into(),
                scores,
            }],
        };
        let text = serde_json::to_string(&summary).unwrap();
        assert!(text.contains("\"precision_w\":null"), "{text}");
        let back: ProbeSummary = serde_json::from_str(&text).unwrap();
        assert_eq!(back, summary);
    }
}
