//! Seconds per iteration that a bench records by figure name while criterion runs, and their
//! medians for the bench's own summary table (shared by the benches that print one).

use std::collections::BTreeMap;
use std::sync::Mutex;

static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

/// Records one iteration of figure `name`.
pub fn record(name: &str, seconds: f64) {
    if let Ok(mut samples) = SAMPLES.lock() {
        samples.entry(name.to_owned()).or_default().push(seconds);
    }
}

/// The median of what was recorded for `name`.
pub fn median_seconds(name: &str) -> Option<f64> {
    let samples = SAMPLES.lock().ok()?;
    let mut values = samples.get(name)?.clone();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}
