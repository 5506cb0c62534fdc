//! What a `select` artifact holds: `selected.json`, the best hyperparameters of a sweep per
//! group, written by the select stage (`cwm-stage-evaluate`), read by the train stage (input
//! `hparams`) and the report (Table 5).

use serde::{Deserialize, Serialize};

use crate::{Versioned, count, version_1};

/// The file name of the selection.
pub const SELECTED_FILE: &str = "selected.json";
/// The `kind` of a selection.
pub const KIND: &str = "select";

fn kind() -> String {
    KIND.to_owned()
}

/// The hyperparameters a choice carries to the retraining.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChosenHparams {
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW β2.
    pub beta2: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Warm-up steps (an integral float such as `5000.0` reads as its integer).
    #[serde(deserialize_with = "count")]
    pub warmup_steps: u64,
}

impl From<&crate::train::Hparams> for ChosenHparams {
    /// The hyperparameters a train run's summary records.
    fn from(hparams: &crate::train::Hparams) -> ChosenHparams {
        ChosenHparams {
            lr: hparams.optimiser.lr,
            beta2: hparams.optimiser.beta2,
            weight_decay: hparams.optimiser.weight_decay,
            warmup_steps: hparams.schedule.warmup_steps,
        }
    }
}

/// The winner of one group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The model family.
    pub arch: String,
    /// The model size.
    pub size: String,
    /// The producing instance's name.
    pub instance: String,
    /// The train artifact's hash.
    pub train_hash: String,
    /// Its hyperparameters.
    pub hparams: ChosenHparams,
    /// The validation loss it was chosen by.
    pub val_loss: f64,
    /// ExactState of the same validation.
    pub exact_state: Option<f64>,
    /// Labelwise of the same validation.
    pub labelwise: Option<f64>,
    /// Trajectory exactness of the same validation.
    pub trajectory: Option<f64>,
    /// Its place in the group's ranking: 1 for the best, k when the pipeline asked for the
    /// group's k-th best (the select stage's `ranks`; 1 when absent).
    #[serde(default = "first", skip_serializing_if = "is_first")]
    pub rank: u32,
    /// The runs ranked above it when `rank` > 1, best first (empty when absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed_over: Vec<String>,
}

fn first() -> u32 {
    1
}

// serde's skip_serializing_if passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_first(rank: &u32) -> bool {
    *rank == 1
}

/// `selected.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// The format version ([`Selection::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The metric's name (`val_loss` or `final_val_loss`).
    pub metric: String,
    /// The fields of the train summaries that formed the groups (empty when absent).
    #[serde(default)]
    pub group_by: Vec<String>,
    /// One choice per group, in group order.
    pub choices: Vec<Choice>,
    /// Runs that had the metric (the candidates ranked; 0 when absent).
    #[serde(default)]
    pub candidates: u64,
    /// Runs without it, by instance name (empty when absent).
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl Versioned for Selection {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    fn selection() -> Selection {
        Selection {
            version: Selection::VERSION,
            kind: KIND.into(),
            metric: "val_loss".into(),
            group_by: vec!["arch".into(), "size".into()],
            choices: vec![Choice {
                arch: "gdn".into(),
                size: "d128".into(),
                instance: "train[arch=gdn,lr=0.0001]".into(),
                train_hash: "t1".into(),
                hparams: ChosenHparams {
                    lr: 1e-4,
                    beta2: 0.99,
                    weight_decay: 0.0,
                    warmup_steps: 10_000,
                },
                val_loss: 0.25,
                exact_state: Some(0.5),
                labelwise: Some(0.9),
                trajectory: None,
                rank: 2,
                passed_over: vec!["train[arch=gdn,lr=0.001]".into()],
            }],
            candidates: 3,
            skipped: vec!["train[arch=gdn,lr=1]".into()],
        }
    }

    #[test]
    fn selection_round_trips() {
        round_trip(&selection());
    }

    /// A `selected.json` as the select stage wrote it before formats were versioned (with a
    /// warm-up that went through f64), and a hand-written one with only what readers need.
    #[test]
    fn selection_of_today_reads() {
        let dir = scratch("select");
        let path = dir.join(SELECTED_FILE);
        std::fs::write(
            &path,
            r#"{
  "kind": "select",
  "metric": "val_loss",
  "group_by": ["arch", "size"],
  "choices": [
    {
      "arch": "gdn",
      "size": "d128",
      "instance": "train[arch=gdn,lr=0.0001]",
      "train_hash": "t1",
      "hparams": {"lr": 0.0001, "beta2": 0.99, "weight_decay": 0.0, "warmup_steps": 10000.0},
      "val_loss": 0.25,
      "exact_state": 0.5,
      "labelwise": 0.9,
      "trajectory": null
    }
  ],
  "candidates": 3,
  "skipped": ["train[arch=gdn,lr=1]"]
}
"#,
        )
        .unwrap();
        // Written before `rank` existed: the first choice of its group.
        let mut expected = selection();
        expected.choices[0].rank = 1;
        expected.choices[0].passed_over.clear();
        assert_eq!(crate::read_json::<Selection>(&path).unwrap(), expected);
        std::fs::write(&path, r#"{"metric": "val_loss", "choices": []}"#).unwrap();
        let minimal: Selection = crate::read_json(&path).unwrap();
        assert_eq!((minimal.kind.as_str(), minimal.candidates), (KIND, 0));
        std::fs::write(
            &path,
            r#"{"metric": "val_loss", "choices": [{"arch": "gdn", "size": "d128",
                "instance": "i", "train_hash": "t", "val_loss": 1,
                "hparams": {"lr": 1, "beta2": 0.9, "weight_decay": 0, "warmup_steps": 2.5}}]}"#,
        )
        .unwrap();
        let err = crate::read_json::<Selection>(&path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "field `choices.0.hparams.warmup_steps`: expected a non-negative integer, found 2.5"
            ),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
