//! Deciding, before scheduling, whether an instance is fresh or stale and why.
//!
//! An instance is *fresh* when the store holds a finished record for its key
//! and every output artifact is intact. Otherwise it is *stale*, with
//! [`StaleReason`]s found by comparing the key's ingredients with the
//! instance's entry in `cwm.lock`.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::key::KeyIngredients;
use crate::lockfile::{LockEntry, LockFile};
use crate::plan::Plan;
use crate::reason::StaleReason;
use crate::registry::Registry;
use crate::store::{Integrity, Store};

/// Output name -> artifact hash of one finished instance.
pub type Outputs = BTreeMap<String, String>;

/// Fresh (with its outputs) or stale (with reasons).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Freshness {
    /// Up to date; these are its outputs.
    Fresh(Outputs),
    /// Needs to run, for these reasons.
    Stale(Vec<StaleReason>),
}

/// Why the key of an instance cannot be computed.
#[derive(Debug, thiserror::Error)]
pub enum IngredientsError {
    /// The registry has no kind of this name.
    #[error("unknown stage kind `{kind}`")]
    UnknownKind {
        /// The kind's name.
        kind: String,
    },
    /// A producer has not (yet) produced the output an input reads.
    #[error("input `{input}`: `{producer}` has not produced `{output}`")]
    NotProduced {
        /// The consumer's input.
        input: String,
        /// The producing instance.
        producer: String,
        /// The output it lacks.
        output: String,
    },
    /// A dependency file could not be hashed.
    #[error("dependency file {}: {source}", path.display())]
    DepFile {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Computes the key ingredients of instance `idx`, given the outputs of its
/// producers (`outputs(p)` must give them for every producer `p`).
pub(crate) fn ingredients<'o>(
    plan: &Plan,
    registry: &Registry,
    store: &Store,
    idx: usize,
    outputs: impl Fn(usize) -> Option<&'o Outputs>,
) -> Result<KeyIngredients, IngredientsError> {
    let inst = &plan.pipeline.instances[idx];
    let kind = registry
        .get(&inst.kind)
        .ok_or_else(|| IngredientsError::UnknownKind {
            kind: inst.kind.clone(),
        })?;
    let mut ing = KeyIngredients {
        kind: inst.kind.clone(),
        code: kind.fingerprint(),
        ..Default::default()
    };
    let unkeyed = |name: &str| kind.params().iter().any(|s| s.name == name && !s.keyed);
    for (name, value) in inst.params.iter().filter(|(name, _)| !unkeyed(name)) {
        ing.params.insert(name.to_owned(), value.canonical());
    }
    for (name, refs) in &inst.inputs {
        let mut hashes = Vec::with_capacity(refs.len());
        for r in refs {
            let hash = outputs(r.producer)
                .and_then(|o| o.get(&r.output))
                .ok_or_else(|| IngredientsError::NotProduced {
                    input: name.clone(),
                    producer: plan.pipeline.instances[r.producer].name.clone(),
                    output: r.output.clone(),
                })?;
            hashes.push(hash.clone());
        }
        ing.inputs.insert(name.clone(), hashes);
    }
    for path in &inst.deps {
        let hash = store
            .stat_cache()
            .hash(path)
            .map_err(|source| IngredientsError::DepFile {
                path: path.clone(),
                source,
            })?;
        ing.deps
            .insert(display_relative(path, &plan.pipeline.base_dir), hash);
    }
    Ok(ing)
}

fn display_relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Whether instance `name` with these ingredients is fresh in `store`.
pub(crate) fn check(
    store: &Store,
    lock: &LockFile,
    name: &str,
    ingredients: &KeyIngredients,
    forced: bool,
) -> Freshness {
    if forced {
        return Freshness::Stale(vec![StaleReason::Forced]);
    }
    let key = ingredients.key();
    match store.lookup(&key) {
        Ok(Some(record)) => {
            let problems: Vec<StaleReason> = record
                .outputs
                .iter()
                .filter_map(|(output, hash)| damage(store, output, hash))
                .collect();
            if problems.is_empty() {
                Freshness::Fresh(record.outputs)
            } else {
                Freshness::Stale(problems)
            }
        }
        Ok(None) => Freshness::Stale(explain(lock.get(name), ingredients)),
        Err(e) => Freshness::Stale(vec![StaleReason::RecordUnreadable {
            error: e.to_string(),
        }]),
    }
}

/// What is wrong with artifact `hash` of output `output`, if anything.
fn damage(store: &Store, output: &str, hash: &str) -> Option<StaleReason> {
    let (output, artifact) = (output.to_owned(), hash.to_owned());
    match store.integrity(hash) {
        Integrity::Intact => None,
        Integrity::Missing => Some(StaleReason::OutputMissing { output, artifact }),
        Integrity::Corrupt(problem) => Some(StaleReason::OutputDamaged {
            output,
            artifact,
            problem,
        }),
    }
}

/// Why the key changed since the locked run.
pub(crate) fn explain(entry: Option<&LockEntry>, ing: &KeyIngredients) -> Vec<StaleReason> {
    let Some(entry) = entry else {
        return vec![StaleReason::NeverRun];
    };
    let mut reasons = Vec::new();
    if entry.kind != ing.kind {
        reasons.push(StaleReason::KindChanged {
            old: entry.kind.clone(),
            new: ing.kind.clone(),
        });
    } else if entry.code != ing.code {
        reasons.push(StaleReason::CodeChanged {
            kind: ing.kind.clone(),
            old: entry.code.clone(),
            new: ing.code.clone(),
        });
    }
    for change in diff(&entry.params, &ing.params) {
        reasons.push(match change {
            Change::Changed(name, old, new) => StaleReason::ParamChanged { name, old, new },
            Change::Added(name, value) => StaleReason::ParamAdded { name, value },
            Change::Removed(name, old) => StaleReason::ParamRemoved { name, old },
        });
    }
    for change in diff(&entry.inputs, &ing.inputs) {
        reasons.push(match change {
            Change::Changed(name, old, new) => StaleReason::InputChanged { name, old, new },
            Change::Added(name, _) => StaleReason::InputAdded { name },
            Change::Removed(name, _) => StaleReason::InputRemoved { name },
        });
    }
    for change in diff(&entry.deps, &ing.deps) {
        reasons.push(match change {
            Change::Changed(path, ..) => StaleReason::DepChanged { path },
            Change::Added(path, _) => StaleReason::DepAdded { path },
            Change::Removed(path, _) => StaleReason::DepRemoved { path },
        });
    }
    if reasons.is_empty() {
        reasons.push(StaleReason::NotInStore { key: ing.key() });
    }
    reasons
}

/// One difference between a locked map and the current one.
enum Change<V> {
    /// (name, old, new).
    Changed(String, V, V),
    /// (name, new).
    Added(String, V),
    /// (name, old).
    Removed(String, V),
}

/// The differences from `old` to `new`: changed and added entries in `new`'s
/// order, then removed ones in `old`'s.
fn diff<V: Clone + PartialEq>(
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
) -> Vec<Change<V>> {
    let mut changes = Vec::new();
    for (name, value) in new {
        match old.get(name) {
            Some(was) if was == value => {}
            Some(was) => changes.push(Change::Changed(name.clone(), was.clone(), value.clone())),
            None => changes.push(Change::Added(name.clone(), value.clone())),
        }
    }
    for (name, was) in old {
        if !new.contains_key(name) {
            changes.push(Change::Removed(name.clone(), was.clone()));
        }
    }
    changes
}

/// The first 12 hex digits of a hash, for messages.
pub fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockfile::LockEntry;

    fn ingredients(code: &str, lr: &str, input: &str) -> KeyIngredients {
        KeyIngredients {
            kind: "train".into(),
            code: code.into(),
            params: BTreeMap::from([("lr".to_owned(), lr.to_owned())]),
            inputs: BTreeMap::from([("data".to_owned(), vec![input.to_owned()])]),
            deps: BTreeMap::new(),
        }
    }

    #[test]
    fn reasons_name_what_changed_with_old_and_new_values() {
        let old = ingredients("code-a", "0.0001", "h1");
        let entry = LockEntry::new("train", &old.key(), &old, &BTreeMap::new());
        assert_eq!(explain(None, &old), [StaleReason::NeverRun]);
        let new = ingredients("code-b", "0.0003", "h2");
        let reasons: Vec<String> = explain(Some(&entry), &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].starts_with("code: the code of stage kind `train` changed ("));
        assert_eq!(reasons[1], "params: lr changed 0.0001 → 0.0003");
        assert_eq!(reasons[2], "input: `data` changed (h1 → h2)");
        let same = explain(Some(&entry), &old);
        assert_eq!(same, [StaleReason::NotInStore { key: old.key() }]);
    }
}
