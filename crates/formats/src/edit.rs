//! What an `edit` artifact holds (written by `cwm-stage-probe`, read by the report):
//! `summary.json`, the state-editing experiment of one model (E11 of the beyond-the-paper
//! specification).
//!
//! A *case* is a step t of a held-out game and a square s whose piece an edit tries to remove.
//! Variant [`VARIANT_NEXT_MOVE`] (A) takes the from-square of the game's next move;
//! variant [`VARIANT_PERSISTENT`] (B) a piece that neither moves nor is captured in the next
//! `horizon` plies and whose removal keeps those plies legal, so the engine's counterfactual
//! game `S'_{t+k}` exists for k = 1..=horizon. Every case's target (`S_t` with s emptied)
//! passes E1's V1.
//!
//! An edit adds `α · ‖h‖ · v / ‖v‖` to the hidden state h at one layer ℓ and the case's
//! position t only; v is one of [`VECTORS`]. A rate that is not defined is `null`, never NaN.

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The `kind` of an edit summary.
pub const KIND: &str = "edit";

/// Variant A: s is the from-square of the game's next move (the probing paper's choice).
pub const VARIANT_NEXT_MOVE: &str = "next_move";
/// Variant B: s holds a piece that stays put over the horizon (persistence is measured).
pub const VARIANT_PERSISTENT: &str = "persistent";

/// No edit: the unedited model's numbers.
pub const VECTOR_NONE: &str = "none";
/// A Gaussian direction, drawn per case and layer.
pub const VECTOR_RANDOM: &str = "random";
/// The hidden state three plies later in the same game (graded against `S_{t+3}`).
pub const VECTOR_PATCH: &str = "patch";
/// `−w_{s,c}`: minus the probe's weight vector of the piece c on s.
pub const VECTOR_PROBE: &str = "probe";
/// `w_{s,empty} − w_{s,c}`: towards the probe's "empty" and away from c.
pub const VECTOR_PROBE_DIFF: &str = "probe_diff";
/// Every vector, in table order.
pub const VECTORS: [&str; 5] = [
    VECTOR_NONE,
    VECTOR_RANDOM,
    VECTOR_PATCH,
    VECTOR_PROBE,
    VECTOR_PROBE_DIFF,
];

fn kind() -> String {
    KIND.to_owned()
}

/// `summary.json` of an edit artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditSummary {
    /// Format version ([`Versioned::VERSION`]).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`].
    #[serde(default = "kind")]
    pub kind: String,
    /// The model's family.
    pub arch: String,
    /// The model's size.
    pub size: String,
    /// The model artifact's hash, when known.
    pub model_hash: Option<String>,
    /// The probe artifact's hash, when known.
    pub probe_hash: Option<String>,
    /// Which of the probe artifact's sets gave the probe vectors (`id` or `ood`).
    pub probe_set: String,
    /// The split label of the games.
    pub split: String,
    /// L, the model's block count: edits are made at ℓ = 0..L − 1.
    pub blocks: u32,
    /// Games read.
    pub games: u64,
    /// K: the plies after t over which persistence is followed.
    pub horizon: u32,
    /// The scales α tried.
    pub alphas: Vec<f64>,
    /// Cases per variant.
    pub cases: Vec<VariantCases>,
    /// One row per variant, layer, vector and α (one per variant and layer for
    /// [`VECTOR_NONE`], with α 0).
    pub rows: Vec<EditRow>,
}

impl Versioned for EditSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// How many cases one variant has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantCases {
    /// [`VARIANT_NEXT_MOVE`] or [`VARIANT_PERSISTENT`].
    pub variant: String,
    /// Cases.
    pub cases: u64,
    /// Steps drawn that gave none (no square qualified).
    pub rejected_steps: u64,
}

/// What one kind of edit did, over the cases of one variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditRow {
    /// [`VARIANT_NEXT_MOVE`] or [`VARIANT_PERSISTENT`].
    pub variant: String,
    /// ℓ.
    pub layer: u32,
    /// `embedding` or `block N`.
    pub layer_name: String,
    /// One of [`VECTORS`].
    pub vector: String,
    /// α (0 for [`VECTOR_NONE`]).
    pub alpha: f64,
    /// Cases behind the rates.
    pub cases: u64,
    /// Share of cases whose prediction at t has s empty.
    pub flip: Option<f64>,
    /// Cases whose unedited prediction at t has the right piece on s (the ones an edit can
    /// flip; a weak model already predicts many squares empty).
    #[serde(default)]
    pub held: u64,
    /// Share of the `held` cases whose prediction at t has s empty.
    #[serde(default)]
    pub flip_held: Option<f64>,
    /// Mean number of labels other than s whose prediction at t changed.
    pub collateral: Option<f64>,
    /// Share of cases predicting the target's 75 labels exactly at t (for
    /// [`VECTOR_PATCH`], those of `S_{t+3}`).
    pub target_exact: Option<f64>,
    /// Mean over cases of the mean over the 64 squares of the probability the head gives
    /// the target's class (the state-space analogue of legal-move probability mass).
    pub target_mass: Option<f64>,
    /// Share of cases whose 75 predicted labels at t equal the unedited ones.
    pub argmax_agreement: Option<f64>,
    /// Variant B only, k = 1..=horizon: share of cases whose prediction at t + k has s empty.
    #[serde(default)]
    pub persist_flip: Vec<Option<f64>>,
    /// Variant B only, k = 1..=horizon: share of cases whose prediction at t + k equals the
    /// counterfactual state `S'_{t+k}` (for [`VECTOR_NONE`]: equals the real `S_{t+k}`).
    #[serde(default)]
    pub persist_exact: Vec<Option<f64>>,
    /// Variant B only, k = 1..=horizon: share of the `held` cases whose prediction at t + k
    /// has s empty.
    #[serde(default)]
    pub persist_flip_held: Vec<Option<f64>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_round_trips_with_nulls() {
        let summary = EditSummary {
            version: EditSummary::VERSION,
            kind: KIND.into(),
            arch: "slice".into(),
            size: "d128".into(),
            model_hash: Some("abc".into()),
            probe_hash: None,
            probe_set: "id".into(),
            split: "test_real".into(),
            blocks: 1,
            games: 3,
            horizon: 2,
            alphas: vec![0.5, 8.0],
            cases: vec![VariantCases {
                variant: VARIANT_PERSISTENT.into(),
                cases: 4,
                rejected_steps: 1,
            }],
            rows: vec![EditRow {
                variant: VARIANT_PERSISTENT.into(),
                layer: 0,
                layer_name: "embedding".into(),
                vector: VECTOR_PROBE.into(),
                alpha: 0.5,
                cases: 4,
                flip: Some(0.25),
                held: 2,
                flip_held: Some(0.5),
                collateral: Some(1.5),
                target_exact: None,
                target_mass: Some(0.75),
                argmax_agreement: Some(0.5),
                persist_flip: vec![Some(0.25), None],
                persist_exact: vec![Some(0.0), Some(0.5)],
                persist_flip_held: vec![Some(0.5), Some(0.0)],
            }],
        };
        let text = serde_json::to_string(&summary).unwrap();
        assert!(text.contains("\"target_exact\":null"), "{text}");
        assert_eq!(serde_json::from_str::<EditSummary>(&text).unwrap(), summary);
    }
}
