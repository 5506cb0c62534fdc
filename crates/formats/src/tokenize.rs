//! What a `tokenize` artifact says about itself: `coverage.json`, written by the tokenize stage
//! (`cwm-stage-data`), read by the report (Table 3).

use serde::{Deserialize, Serialize};

use crate::{Versioned, version_1};

/// The file name of the coverage record in a tokenize artifact.
pub const COVERAGE_FILE: &str = "coverage.json";

/// Size of the packed move-id space (`64 · 64 · 5`), which a record without `move_ids` counts
/// against.
pub const MOVE_ID_SPACE: u64 = 20_480;

/// `coverage.json`: how much of the move-id space the tokenized games use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    /// The format version ([`Coverage::VERSION`]; 1 when absent).
    #[serde(default = "version_1")]
    pub version: u32,
    /// Games tokenized.
    pub games: u64,
    /// Plies tokenized.
    pub plies: u64,
    /// Distinct move ids seen.
    pub distinct_move_ids: u64,
    /// Size of the move-id space ([`MOVE_ID_SPACE`] when absent).
    #[serde(default = "move_id_space")]
    pub move_ids: u64,
    /// `distinct_move_ids / move_ids`.
    pub coverage: f64,
    /// The en-passant labelling convention (`reference` or `legal_capture` from the tokenize
    /// stage; other producers may name others).
    pub ep_convention: String,
    /// Shard files written.
    pub shards: u64,
    /// Where the tokenized games came from (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<GamesSource>,
    /// The distinct move ids seen, ascending (absent in records written before they were
    /// kept): the report compares two splits' sets with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_move_ids: Option<Vec<u16>>,
}

/// The artifact a tokenize stage read its games from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GamesSource {
    /// The producing instance, e.g. `split`.
    pub producer: String,
    /// Its stage kind: `split`, `parse`, `random_uniform`, ...
    pub kind: String,
    /// The output read: `train` or `val` of a split, `games` of a parse, `out` otherwise.
    pub output: String,
}

fn move_id_space() -> u64 {
    MOVE_ID_SPACE
}

impl Coverage {
    /// The record of `games` games with `plies` plies that use `distinct_move_ids` of the
    /// `move_ids` packed ids, tokenized with `ep_convention` into `shards` shards.
    pub fn new(
        games: u64,
        plies: u64,
        distinct_move_ids: u64,
        move_ids: u64,
        ep_convention: &str,
        shards: u64,
    ) -> Coverage {
        Coverage {
            version: Coverage::VERSION,
            games,
            plies,
            distinct_move_ids,
            move_ids,
            coverage: distinct_move_ids as f64 / move_ids as f64,
            ep_convention: ep_convention.to_owned(),
            shards,
            source: None,
            seen_move_ids: None,
        }
    }

    /// The same record naming where its games came from.
    #[must_use]
    pub fn with_source(mut self, source: GamesSource) -> Coverage {
        self.source = Some(source);
        self
    }

    /// The same record with the distinct ids seen (sorted and deduplicated here).
    #[must_use]
    pub fn with_seen_move_ids(mut self, mut ids: Vec<u16>) -> Coverage {
        ids.sort_unstable();
        ids.dedup();
        self.seen_move_ids = Some(ids);
        self
    }
}

impl Versioned for Coverage {
    const VERSION: u32 = 1;
    fn version(&self) -> u32 {
        self.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{round_trip, scratch};

    #[test]
    fn coverage_round_trips() {
        round_trip(&Coverage::new(438, 31_000, 1_402, 20_480, "reference", 1));
        let source = GamesSource {
            producer: "split".into(),
            kind: "split".into(),
            output: "train".into(),
        };
        let full = Coverage::new(2, 9, 3, 20_480, "reference", 1)
            .with_source(source)
            .with_seen_move_ids(vec![812, 5, 812, 40]);
        assert_eq!(full.seen_move_ids.as_deref(), Some(&[5, 40, 812][..]));
        round_trip(&full);
    }

    /// A `coverage.json` as the tokenize stage wrote it before formats were versioned.
    #[test]
    fn coverage_of_today_reads() {
        let dir = scratch("coverage");
        let path = dir.join(COVERAGE_FILE);
        std::fs::write(
            &path,
            r#"{
  "coverage": 0.06845703125,
  "distinct_move_ids": 1402,
  "ep_convention": "reference",
  "games": 438,
  "move_ids": 20480,
  "plies": 31000,
  "shards": 1
}
"#,
        )
        .unwrap();
        let read: Coverage = crate::read_json(&path).unwrap();
        assert_eq!(
            read,
            Coverage::new(438, 31_000, 1_402, 20_480, "reference", 1)
        );
        // Other producers may leave out the id space: it is the packed one.
        std::fs::write(
            &path,
            r#"{"games": 1, "plies": 2, "distinct_move_ids": 3, "coverage": 0.5,
                "ep_convention": "python_chess", "shards": 1}"#,
        )
        .unwrap();
        assert_eq!(
            crate::read_json::<Coverage>(&path).unwrap().move_ids,
            MOVE_ID_SPACE
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
