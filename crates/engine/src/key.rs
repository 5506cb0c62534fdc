//! Cache keys: what a stage instance's result depends on, hashed.
//!
//! key = blake3 over the stage kind, the kind's code fingerprint, the
//! canonical (order-independent) params, the content hashes of the input
//! artifacts (per input name, in binding order) and the content hashes of
//! declared dependency files. Instance names, absolute paths and mtimes never
//! enter a key, so a renamed stage or another checkout finds the same results.
//! Because inputs enter by *content*, a producer that reruns and writes
//! byte-identical output leaves its consumers' keys unchanged (early cutoff).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Everything a key is computed from; stored in manifests and `cwm.lock` so
/// `cwm status` can say what changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyIngredients {
    /// Stage kind.
    pub kind: String,
    /// The kind's code fingerprint.
    pub code: String,
    /// Param name -> canonical value text.
    pub params: BTreeMap<String, String>,
    /// Input name -> artifact hashes, in binding order.
    pub inputs: BTreeMap<String, Vec<String>>,
    /// Dependency file (as written, relative to the pipeline) -> blake3.
    pub deps: BTreeMap<String, String>,
}

impl KeyIngredients {
    /// The cache key: 64 hex digits.
    pub fn key(&self) -> String {
        let mut h = blake3::Hasher::new();
        let mut field = |tag: &str, value: &str| {
            h.update(tag.as_bytes());
            h.update(&(value.len() as u64).to_le_bytes());
            h.update(value.as_bytes());
        };
        field("cwm-key-v1", "");
        field("kind", &self.kind);
        field("code", &self.code);
        for (name, value) in &self.params {
            field("param", name);
            field("=", value);
        }
        for (name, hashes) in &self.inputs {
            field("input", name);
            for hash in hashes {
                field("@", hash);
            }
        }
        for (path, hash) in &self.deps {
            field("dep", path);
            field("@", hash);
        }
        h.finalize().to_hex().to_string()
    }

    /// A digest of the params alone (shown in `cwm.lock`).
    pub fn params_digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        for (name, value) in &self.params {
            h.update(name.as_bytes());
            h.update(b"=");
            h.update(value.as_bytes());
            h.update(b"\n");
        }
        h.finalize().to_hex().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KeyIngredients {
        let mut k = KeyIngredients {
            kind: "parse".into(),
            code: "abc".into(),
            ..Default::default()
        };
        k.params.insert("min_fullmoves".into(), "10".into());
        k.inputs.insert("pgn".into(), vec!["h1".into()]);
        k
    }

    #[test]
    fn every_ingredient_changes_the_key() {
        let base = sample().key();
        assert_eq!(base, sample().key());
        let mut k = sample();
        k.code = "abd".into();
        assert_ne!(k.key(), base);
        let mut k = sample();
        k.params.insert("min_fullmoves".into(), "11".into());
        assert_ne!(k.key(), base);
        let mut k = sample();
        k.inputs.insert("pgn".into(), vec!["h2".into()]);
        assert_ne!(k.key(), base);
        let mut k = sample();
        k.deps.insert("x.txt".into(), "h".into());
        assert_ne!(k.key(), base);
        // Field boundaries are unambiguous.
        let mut a = sample();
        a.params = BTreeMap::from([("ab".into(), "c".into())]);
        let mut b = sample();
        b.params = BTreeMap::from([("a".into(), "bc".into())]);
        assert_ne!(a.key(), b.key());
    }
}
