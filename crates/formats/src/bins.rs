//! What a `bin_prefix` artifact holds: the metrics by prefix bin (`summary.json`, whose bins
//! are also the rows of `bins.parquet`), written by the bin_prefix stage
//! (`cwm-stage-evaluate`), read by the report (Tables 11 and 12).

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the summary.
pub const SUMMARY_FILE: &str = "summary.json";
/// The file name of the bins table (columns `bin` u32, `start` u32, `end` u32, `steps` u64,
/// `exact_state` f64, `labelwise` f64: the fields of [`PrefixBin`]).
pub const BINS_FILE: &str = "bins.parquet";
/// The `kind` of a bin_prefix summary.
pub const KIND: &str = "bin_prefix";

fn kind() -> String {
    KIND.to_owned()
}

/// One prefix bin: the steps `t` with `start ≤ t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefixBin {
    /// Bin index `k`.
    pub bin: u32,
    /// First step of the bin (`width · k`).
    pub start: u32,
    /// One past the last step of the bin (`width · k + width`).
    pub end: u32,
    /// Valid steps in the bin.
    pub steps: u64,
    /// ExactState restricted to the bin.
    pub exact_state: f64,
    /// Labelwise accuracy restricted to the bin.
    pub labelwise: f64,
}

/// `summary.json` of a bin_prefix artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BinPrefixSummary {
    /// The format version ([`BinPrefixSummary::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Always [`KIND`] (assumed when absent).
    #[serde(default = "kind")]
    pub kind: String,
    /// The split label, from the evaluate summary.
    pub split: String,
    /// The model family, from the evaluate summary.
    pub arch: String,
    /// The model size, from the evaluate summary.
    pub size: String,
    /// The parameter count, from the evaluate summary.
    pub params: u64,
    /// The bin width.
    pub bin: u32,
    /// The evaluate artifact's hash, or null.
    #[serde(default)]
    pub evaluate_hash: Option<String>,
    /// The non-empty bins in order.
    pub bins: Vec<PrefixBin>,
}

impl Versioned for BinPrefixSummary {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    fn summary() -> BinPrefixSummary {
        BinPrefixSummary {
            version: BinPrefixSummary::VERSION,
            kind: KIND.into(),
            split: "test_random".into(),
            arch: "transformer".into(),
            size: "d128".into(),
            params: 3_128_150,
            bin: 20,
            evaluate_hash: Some("e".into()),
            bins: vec![
                PrefixBin {
                    bin: 0,
                    start: 0,
                    end: 20,
                    steps: 400,
                    exact_state: 0.75,
                    labelwise: 0.996875,
                },
                PrefixBin {
                    bin: 1,
                    start: 20,
                    end: 40,
                    steps: 12,
                    exact_state: 0.0,
                    labelwise: 0.5,
                },
            ],
        }
    }

    #[test]
    fn bin_prefix_summary_round_trips() {
        round_trip(&summary());
    }

    /// A `summary.json` as the bin_prefix stage wrote it before formats were versioned.
    #[test]
    fn bin_prefix_summary_of_today_reads() {
        let dir = scratch("bins");
        let path = dir.join(SUMMARY_FILE);
        std::fs::write(
            &path,
            r#"{
  "kind": "bin_prefix",
  "split": "test_random",
  "arch": "transformer",
  "size": "d128",
  "params": 3128150,
  "bin": 20,
  "evaluate_hash": "e",
  "bins": [
    {"bin": 0, "start": 0, "end": 20, "steps": 400, "exact_state": 0.75, "labelwise": 0.996875},
    {"bin": 1, "start": 20, "end": 40, "steps": 12, "exact_state": 0.0, "labelwise": 0.5}
  ]
}
"#,
        )
        .unwrap();
        assert_eq!(
            crate::read_json::<BinPrefixSummary>(&path).unwrap(),
            summary()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
