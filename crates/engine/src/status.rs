//! `cwm status`: every instance, fresh or stale, with reasons.

use crate::freshness::{self, Freshness, Outputs};
use crate::lockfile::LockFile;
use crate::plan::Plan;
use crate::reason::StaleReason;
use crate::registry::Registry;
use crate::store::Store;

/// One instance's state.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StageStatus {
    /// Instance name.
    pub stage: String,
    /// `fresh` or `stale`.
    pub state: &'static str,
    /// Why it is stale (written to JSON as their texts).
    pub reasons: Vec<StaleReason>,
    /// The instance's cache key, when its inputs are known (not shown by `status --json`).
    #[serde(skip)]
    pub key: Option<String>,
}

/// Computes the status of every instance, in execution order.
pub fn status(
    plan: &Plan,
    registry: &Registry,
    store: &Store,
    lock: &LockFile,
) -> Vec<StageStatus> {
    let n = plan.pipeline.instances.len();
    let mut outputs: Vec<Option<Outputs>> = vec![None; n];
    let mut result = Vec::with_capacity(n);
    for &idx in &plan.order {
        let inst = &plan.pipeline.instances[idx];
        let stale_inputs: Vec<StaleReason> = inst
            .inputs
            .iter()
            .flat_map(|(input, refs)| refs.iter().map(move |r| (input, r)))
            .filter(|(_, r)| outputs[r.producer].is_none())
            .map(|(input, r)| StaleReason::ProducerStale {
                input: input.clone(),
                producer: plan.pipeline.instances[r.producer].name.clone(),
            })
            .collect();
        let mut key = None;
        let reasons = if stale_inputs.is_empty() {
            match freshness::ingredients(plan, registry, store, idx, |p| outputs[p].as_ref()) {
                Err(e) => vec![StaleReason::KeyUnknown {
                    error: e.to_string(),
                }],
                Ok(ing) => {
                    key = Some(ing.key());
                    match freshness::check(store, lock, &inst.name, &ing, false) {
                        Freshness::Fresh(outs) => {
                            outputs[idx] = Some(outs);
                            Vec::new()
                        }
                        Freshness::Stale(reasons) => reasons,
                    }
                }
            }
        } else {
            stale_inputs
        };
        result.push(StageStatus {
            stage: inst.name.clone(),
            state: if reasons.is_empty() { "fresh" } else { "stale" },
            reasons,
            key,
        });
    }
    result
}
