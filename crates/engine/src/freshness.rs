//! Deciding, before scheduling, whether an instance is fresh or stale and why.
//!
//! An instance is *fresh* when the store holds a finished record for its key
//! and every output artifact is intact. Otherwise it is *stale*, with reasons
//! that start with one of `params`, `code`, `input`, `output-missing`,
//! `never-run` or `forced`, found by comparing the key's ingredients with the
//! instance's entry in `cwm.lock`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::key::KeyIngredients;
use crate::lockfile::{LockEntry, LockFile};
use crate::plan::Plan;
use crate::registry::Registry;
use crate::store::{Integrity, Store};

/// Output name -> artifact hash of one finished instance.
pub type Outputs = BTreeMap<String, String>;

/// Fresh (with its outputs) or stale (with reasons).
#[derive(Debug, Clone, PartialEq)]
pub enum Freshness {
    /// Up to date; these are its outputs.
    Fresh(Outputs),
    /// Needs to run, for these reasons.
    Stale(Vec<String>),
}

/// Computes the key ingredients of instance `idx`, given the outputs of its
/// producers (`outputs[p]` must be set for every producer `p`).
pub fn ingredients(
    plan: &Plan,
    registry: &Registry,
    store: &Store,
    idx: usize,
    outputs: &[Option<Outputs>],
) -> Result<KeyIngredients, String> {
    let inst = &plan.pipeline.instances[idx];
    let kind = registry
        .get(&inst.kind)
        .ok_or_else(|| format!("unknown stage kind `{}`", inst.kind))?;
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
            let hash = outputs[r.producer]
                .as_ref()
                .and_then(|o| o.get(&r.output))
                .ok_or_else(|| {
                    format!(
                        "input `{name}`: `{}` has not produced `{}`",
                        plan.pipeline.instances[r.producer].name, r.output
                    )
                })?;
            hashes.push(hash.clone());
        }
        ing.inputs.insert(name.clone(), hashes);
    }
    for path in &inst.deps {
        let hash = store
            .stat_cache()
            .hash(path)
            .map_err(|e| format!("dependency file {}: {e}", path.display()))?;
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
pub fn check(
    store: &Store,
    lock: &LockFile,
    name: &str,
    ingredients: &KeyIngredients,
    forced: bool,
) -> Freshness {
    if forced {
        return Freshness::Stale(vec!["forced: --force was given".to_owned()]);
    }
    let key = ingredients.key();
    match store.lookup(&key) {
        Ok(Some(record)) => {
            let mut problems = Vec::new();
            for (output, hash) in &record.outputs {
                match store.integrity(hash) {
                    Integrity::Intact => {}
                    Integrity::Missing => problems.push(format!(
                        "output-missing: output `{output}` (artifact {}) is not in the store",
                        short(hash)
                    )),
                    Integrity::Corrupt(why) => problems.push(format!(
                        "output-missing: output `{output}` (artifact {}) is damaged: {why}",
                        short(hash)
                    )),
                }
            }
            if problems.is_empty() {
                Freshness::Fresh(record.outputs)
            } else {
                Freshness::Stale(problems)
            }
        }
        Ok(None) => Freshness::Stale(explain(lock.get(name), ingredients)),
        Err(e) => Freshness::Stale(vec![format!("output-missing: {e}")]),
    }
}

/// Why the key changed since the locked run, as reason strings.
pub fn explain(entry: Option<&LockEntry>, ing: &KeyIngredients) -> Vec<String> {
    let Some(entry) = entry else {
        return vec!["never-run: no result recorded in cwm.lock".to_owned()];
    };
    let mut reasons = Vec::new();
    if entry.kind != ing.kind {
        reasons.push(format!(
            "code: stage kind changed {} → {}",
            entry.kind, ing.kind
        ));
    } else if entry.code != ing.code {
        reasons.push(format!(
            "code: the code of stage kind `{}` changed ({} → {})",
            ing.kind,
            code_digest(&entry.code),
            code_digest(&ing.code)
        ));
    }
    for (name, new) in &ing.params {
        match entry.params.get(name) {
            Some(old) if old == new => {}
            Some(old) => reasons.push(format!("params: {name} changed {old} → {new}")),
            None => reasons.push(format!("params: {name} added ({new})")),
        }
    }
    for (name, old) in &entry.params {
        if !ing.params.contains_key(name) {
            reasons.push(format!("params: {name} removed (was {old})"));
        }
    }
    for (name, new) in &ing.inputs {
        match entry.inputs.get(name) {
            Some(old) if old == new => {}
            Some(old) => reasons.push(format!(
                "input: `{name}` changed ({} → {})",
                short_list(old),
                short_list(new)
            )),
            None => reasons.push(format!("input: `{name}` added")),
        }
    }
    for name in entry.inputs.keys() {
        if !ing.inputs.contains_key(name) {
            reasons.push(format!("input: `{name}` removed"));
        }
    }
    for (path, new) in &ing.deps {
        match entry.deps.get(path) {
            Some(old) if old == new => {}
            Some(_) => reasons.push(format!("input: dependency file {path} changed")),
            None => reasons.push(format!("input: dependency file {path} added")),
        }
    }
    for path in entry.deps.keys() {
        if !ing.deps.contains_key(path) {
            reasons.push(format!("input: dependency file {path} removed"));
        }
    }
    if reasons.is_empty() {
        reasons.push(format!(
            "output-missing: no result for key {} in the store (pull it or rerun)",
            short(&ing.key())
        ));
    }
    reasons
}

/// A short digest of a code fingerprint (which may be a composite string).
fn code_digest(code: &str) -> String {
    blake3::hash(code.as_bytes()).to_hex()[..12].to_owned()
}

/// The first 12 hex digits of a hash, for messages.
pub fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn short_list(hashes: &[String]) -> String {
    let parts: Vec<&str> = hashes.iter().map(|h| short(h)).collect();
    parts.join(",")
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
        assert_eq!(
            explain(None, &old),
            ["never-run: no result recorded in cwm.lock"]
        );
        let new = ingredients("code-b", "0.0003", "h2");
        let reasons = explain(Some(&entry), &new);
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].starts_with("code: the code of stage kind `train` changed ("));
        assert_eq!(reasons[1], "params: lr changed 0.0001 → 0.0003");
        assert_eq!(reasons[2], "input: `data` changed (h1 → h2)");
        let same = explain(Some(&entry), &old);
        assert!(
            same[0].starts_with("output-missing: no result for key"),
            "{same:?}"
        );
    }
}
