//! What a `markov` artifact holds (written by `cwm-stage-probe`, read by the report):
//! `summary.json`, the path-independence test of one model's hidden states (E10 of the
//! beyond-the-paper specification) and the agreement of its outputs across move orders that
//! reach the same state (E8).
//!
//! A *class* is a set of distinct move prefixes that reach the same 75 labels. Two sets of
//! classes are tested apart: `natural` (prefixes of the games themselves that transpose into
//! each other) and `swap` (a prefix and the same prefix with two moves of one side swapped,
//! checked by the rules engine). Per layer, the mean cosine similarity of hidden states within
//! classes is compared with that of random pairs from all members: Cohen's
//! `d = (μ_sem − μ_pop) / σ_pop`, a permutation p-value (class labels shuffled) and its Holm
//! correction over the layers. A value that is not defined is `null`, never NaN.

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The `kind` of a markov summary.
pub const KIND: &str = "markov";
/// Classes of transpositions found in the games.
pub const SET_NATURAL: &str = "natural";
/// Classes of a prefix and its engine-checked swap.
pub const SET_SWAP: &str = "swap";

fn kind() -> String {
    KIND.to_owned()
}

/// `summary.json` of a markov artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkovSummary {
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
    /// The split label of the games.
    pub split: String,
    /// L, the model's block count: its layers are 0..=L + 1.
    pub blocks: u32,
    /// Games read.
    pub games: u64,
    /// Random pairs behind each layer's population mean and deviation.
    pub population_pairs: u64,
    /// Label shuffles behind each p-value.
    pub permutations: u64,
    /// One entry per class set.
    pub sets: Vec<ClassSet>,
}

impl Versioned for MarkovSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

/// One set of classes and what was measured on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassSet {
    /// [`SET_NATURAL`] or [`SET_SWAP`].
    pub name: String,
    /// Classes (each of at least two distinct prefixes).
    pub classes: u64,
    /// Prefixes in them.
    pub members: u64,
    /// Pairs of members within a class.
    pub within_pairs: u64,
    /// Share of classes whose members' 75 predicted labels are all identical (E8).
    pub prediction_agreement: Option<f64>,
    /// Share of classes whose members are all exact or all not (E8).
    pub exact_agreement: Option<f64>,
    /// ExactState over the classes' first members (the original prefixes of `swap`).
    pub exact_first: Option<f64>,
    /// ExactState over their other members (the swapped prefixes of `swap`).
    pub exact_others: Option<f64>,
    /// One entry per layer, ℓ = 0 first.
    pub layers: Vec<LayerTest>,
}

/// The test at one layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerTest {
    /// ℓ.
    pub layer: u32,
    /// `embedding`, `block N` or `head input`.
    pub layer_name: String,
    /// Mean cosine similarity of members of one class (over all within-class pairs).
    pub mu_sem: Option<f64>,
    /// Mean cosine similarity of random pairs of members.
    pub mu_pop: Option<f64>,
    /// Their standard deviation.
    pub sigma_pop: Option<f64>,
    /// Cohen's d, `(mu_sem − mu_pop) / sigma_pop`.
    pub d: Option<f64>,
    /// Permutation p-value of `mu_sem` (one-sided: as high or higher by chance).
    pub p: Option<f64>,
    /// `p` after Holm's correction over the layers.
    pub p_holm: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_round_trips_with_nulls() {
        let summary = MarkovSummary {
            version: MarkovSummary::VERSION,
            kind: KIND.into(),
            arch: "slice".into(),
            size: "d128".into(),
            model_hash: None,
            split: "test_real".into(),
            blocks: 1,
            games: 3,
            population_pairs: 10,
            permutations: 5,
            sets: vec![ClassSet {
                name: SET_SWAP.into(),
                classes: 0,
                members: 0,
                within_pairs: 0,
                prediction_agreement: None,
                exact_agreement: None,
                exact_first: None,
                exact_others: None,
                layers: vec![LayerTest {
                    layer: 0,
                    layer_name: "embedding".into(),
                    mu_sem: None,
                    mu_pop: Some(0.1),
                    sigma_pop: None,
                    d: None,
                    p: None,
                    p_holm: None,
                }],
            }],
        };
        let text = serde_json::to_string(&summary).unwrap();
        assert!(text.contains("\"mu_sem\":null"), "{text}");
        assert_eq!(
            serde_json::from_str::<MarkovSummary>(&text).unwrap(),
            summary
        );
    }
}
