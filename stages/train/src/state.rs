//! The resumable training state ("partial" state) and its directory.
//!
//! A partial state directory holds:
//!
//! | file | content |
//! |---|---|
//! | `state.json` | counters, data position, RNG-free bookkeeping and the rows logged so far (floats as their IEEE bit patterns, so they round-trip exactly) |
//! | `model/` | the model, via `cwm_models::save_model` (bit-exact), and the run's `train_config.json` ([`crate::config::save_config`]), as in a checkpoint |
//! | `optimizer.bin` | every parameter's AdamW moments, f32 little-endian, `m` then `v`, in the order `state.json` lists them |
//!
//! It is written to `<dir>.tmp`, then swapped in by renames (`<dir>` → `<dir>.old`, `<dir>.tmp`
//! → `<dir>`, remove `<dir>.old`); [`load`] also accepts a lone `<dir>.old`, so a crash at any
//! moment leaves either the previous or the new state, never a half-written one.
//!
//! Dropout needs no saved RNG state: the trainer reseeds the backend from `(seed, step)` before
//! every forward pass, so a resumed run draws exactly the masks the uninterrupted run draws.

use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use burn::prelude::*;
use cwm_models::{Model, load_model, save_model};
use serde_json::{Value, json};

use crate::TrainError;
use crate::adamw::ExportedMoments;
use crate::config::{TrainConfig, load_config, save_config};
use crate::data::Position;
use crate::output::{StepRow, ValRow};

const FORMAT: u64 = 1;
const STATE_FILE: &str = "state.json";
const MODEL_DIR: &str = "model";
const OPTIMIZER_FILE: &str = "optimizer.bin";

/// The counters and logs of a run, everything but the model and the optimizer moments.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// Global step: batches seen, skipped ones included.
    pub step: u64,
    /// Optimizer updates applied (the scheduler position), rolled-back ones included.
    pub opt_steps: u64,
    /// The current epoch (0-based).
    pub epoch: u64,
    /// Where the next batch of the current epoch starts.
    pub position: Position,
    /// Batches taken from the current epoch.
    pub epoch_batches: u64,
    /// Batches skipped by the NaN guard, rolled-back ones included.
    pub skipped: u64,
    /// Updates undone because a parameter became non-finite (spec D.1 step 7).
    pub rolled_back: u64,
    /// Consecutive skipped batches up to now.
    pub consecutive_bad: u64,
    /// Valid training tokens seen.
    pub tokens: u64,
    /// Seconds spent training before this process (earlier, interrupted runs).
    pub train_s: f64,
    /// The step of the last validation (0 = none yet).
    pub last_val_step: u64,
    /// Logged steps.
    pub steps: Vec<StepRow>,
    /// Validations.
    pub vals: Vec<ValRow>,
}

impl RunState {
    /// The state at the start of a run.
    pub fn fresh() -> RunState {
        RunState {
            step: 0,
            opt_steps: 0,
            epoch: 0,
            position: Position::default(),
            epoch_batches: 0,
            skipped: 0,
            rolled_back: 0,
            consecutive_bad: 0,
            tokens: 0,
            train_s: 0.0,
            last_val_step: 0,
            steps: Vec::new(),
            vals: Vec::new(),
        }
    }
}

fn bits(x: f64) -> Value {
    json!(x.to_bits())
}

fn step_to_json(r: &StepRow) -> Value {
    json!([
        r.step,
        r.epoch,
        r.loss.to_bits(),
        r.lr.to_bits(),
        r.grad_norm.to_bits(),
        r.tokens_per_s.to_bits(),
        r.skipped
    ])
}

fn val_to_json(r: &ValRow) -> Value {
    json!([
        r.step,
        r.loss.to_bits(),
        r.labelwise.to_bits(),
        r.exact_state.to_bits(),
        r.trajectory.to_bits()
    ])
}

/// The paths of a partial state named `dir`: (`dir.tmp`, `dir.old`).
fn siblings(dir: &Path) -> (PathBuf, PathBuf) {
    let with = |suffix: &str| {
        let mut s = dir.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    (with(".tmp"), with(".old"))
}

/// Writes a partial state to `dir` atomically (see the module docs).
///
/// # Errors
/// [`TrainError`] when a file cannot be written.
pub fn save(
    dir: &Path,
    key: &str,
    progress: &RunState,
    model: &Model,
    config: &TrainConfig,
    moments: &[ExportedMoments],
) -> Result<(), TrainError> {
    let (tmp, old) = siblings(dir);
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    fs::create_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    save_model(&tmp.join(MODEL_DIR), model, &config.model)?;
    save_config(&tmp.join(MODEL_DIR), config)?;
    let opt_path = tmp.join(OPTIMIZER_FILE);
    let mut file = fs::File::create(&opt_path).map_err(|e| TrainError::io(&opt_path, e))?;
    let mut index = Vec::new();
    for e in moments {
        let mut bytes = Vec::with_capacity(8 * e.m.len());
        for x in e.m.iter().chain(&e.v) {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        file.write_all(&bytes)
            .map_err(|err| TrainError::io(&opt_path, err))?;
        index.push(json!({"path": e.path, "step": e.step, "len": e.m.len()}));
    }
    file.sync_all().map_err(|e| TrainError::io(&opt_path, e))?;
    let p = progress;
    let state = json!({
        "format": FORMAT,
        "key": key,
        "step": p.step,
        "opt_steps": p.opt_steps,
        "epoch": p.epoch,
        "position": {"shard": p.position.shard, "game": p.position.game},
        "epoch_batches": p.epoch_batches,
        "skipped": p.skipped,
        "rolled_back": p.rolled_back,
        "consecutive_bad": p.consecutive_bad,
        "tokens": p.tokens,
        "train_s": bits(p.train_s),
        "last_val_step": p.last_val_step,
        "steps": p.steps.iter().map(step_to_json).collect::<Vec<_>>(),
        "vals": p.vals.iter().map(val_to_json).collect::<Vec<_>>(),
        "optimizer": index,
    });
    let state_path = tmp.join(STATE_FILE);
    fs::write(&state_path, state.to_string()).map_err(|e| TrainError::io(&state_path, e))?;
    if dir.exists() {
        if old.exists() {
            fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
        }
        fs::rename(dir, &old).map_err(|e| TrainError::io(dir, e))?;
    }
    fs::rename(&tmp, dir).map_err(|e| TrainError::io(dir, e))?;
    if old.exists() {
        fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
    }
    Ok(())
}

/// A loaded partial state.
#[derive(Debug)]
pub struct Loaded {
    /// Counters and logs.
    pub progress: RunState,
    /// The model, on the device given to [`load`].
    pub model: Model,
    /// The run's configuration (the model's as `model.json` records it).
    pub config: TrainConfig,
    /// The optimizer moments.
    pub moments: Vec<ExportedMoments>,
}

/// Loads the partial state at `dir` (or its `.old` sibling) if there is one for `key`.
/// Returns `None` when there is none; an existing state for another key is an error (the
/// directory name is derived from the key, so that means corruption).
///
/// # Errors
/// [`TrainError::Partial`] when the state is unreadable or inconsistent.
pub fn load(dir: &Path, key: &str, device: &Device) -> Result<Option<Loaded>, TrainError> {
    let (_, old) = siblings(dir);
    let dir = if dir.join(STATE_FILE).is_file() {
        dir.to_path_buf()
    } else if old.join(STATE_FILE).is_file() {
        old
    } else {
        return Ok(None);
    };
    let state = StateJson::read(&dir, key)?;
    let progress = state.progress()?;
    let opt_path = dir.join(OPTIMIZER_FILE);
    let mut bytes = Vec::new();
    fs::File::open(&opt_path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(|e| TrainError::io(&opt_path, e))?;
    let moments = state.moments(&bytes)?;
    let (model, model_config) = load_model(&dir.join(MODEL_DIR), device)?;
    // A checkpoint loads in f32; training goes on in the precision it started in.
    let model = model.with_precision(model_config.precision)?;
    let config = load_config(&dir.join(MODEL_DIR), model_config)?;
    Ok(Some(Loaded {
        progress,
        model,
        config,
        moments,
    }))
}

/// Little-endian f32s.
fn le_floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The `state.json` of the partial state in `dir`, read back field by field.
struct StateJson<'a> {
    dir: &'a Path,
    v: Value,
}

impl<'a> StateJson<'a> {
    /// Reads and parses `dir/state.json`, which must have this format and belong to `key`.
    fn read(dir: &'a Path, key: &str) -> Result<StateJson<'a>, TrainError> {
        let state_path = dir.join(STATE_FILE);
        let text = fs::read_to_string(&state_path).map_err(|e| TrainError::io(&state_path, e))?;
        let bad = |message: String| TrainError::partial(dir, message);
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("state.json: {e}")))?;
        if v["format"].as_u64() != Some(FORMAT) {
            return Err(bad(format!("unknown format {}", v["format"])));
        }
        if v["key"].as_str() != Some(key) {
            return Err(bad(format!("belongs to key {}, not {key}", v["key"])));
        }
        Ok(StateJson { dir, v })
    }

    fn bad(&self, message: impl Into<String>) -> TrainError {
        TrainError::partial(self.dir, message)
    }

    /// The integer field `name`.
    fn u(&self, name: &str) -> Result<u64, TrainError> {
        self.v[name]
            .as_u64()
            .ok_or_else(|| self.bad(format!("field {name} is missing or not an integer")))
    }

    /// A float stored as its bit pattern.
    fn f(&self, x: &Value, what: &str) -> Result<f64, TrainError> {
        x.as_u64()
            .map(f64::from_bits)
            .ok_or_else(|| self.bad(format!("{what} is not a float bit pattern")))
    }

    /// A logged row: an array of `n` values.
    fn row<'v>(&self, x: &'v Value, n: usize, what: &str) -> Result<&'v [Value], TrainError> {
        match x.as_array() {
            Some(items) if items.len() == n => Ok(items),
            _ => Err(self.bad(format!("a {what} row is malformed"))),
        }
    }

    /// The array field `name`, `missing` naming the error when it is absent.
    fn array(&self, name: &str, missing: &str) -> Result<&[Value], TrainError> {
        self.v[name]
            .as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.bad(missing))
    }

    fn steps(&self) -> Result<Vec<StepRow>, TrainError> {
        let mut steps = Vec::new();
        for r in self.array("steps", "steps missing")? {
            let r = self.row(r, 7, "steps")?;
            steps.push(StepRow {
                step: r[0].as_u64().ok_or_else(|| self.bad("steps: step"))?,
                epoch: r[1]
                    .as_u64()
                    .and_then(|e| u32::try_from(e).ok())
                    .ok_or_else(|| self.bad("steps: epoch"))?,
                loss: self.f(&r[2], "steps: loss")?,
                lr: self.f(&r[3], "steps: lr")?,
                grad_norm: self.f(&r[4], "steps: grad_norm")?,
                tokens_per_s: self.f(&r[5], "steps: tokens_per_s")?,
                skipped: r[6].as_bool().ok_or_else(|| self.bad("steps: skipped"))?,
            });
        }
        Ok(steps)
    }

    fn vals(&self) -> Result<Vec<ValRow>, TrainError> {
        let mut vals = Vec::new();
        for r in self.array("vals", "vals missing")? {
            let r = self.row(r, 5, "vals")?;
            vals.push(ValRow {
                step: r[0].as_u64().ok_or_else(|| self.bad("vals: step"))?,
                loss: self.f(&r[1], "vals: loss")?,
                labelwise: self.f(&r[2], "vals: labelwise")?,
                exact_state: self.f(&r[3], "vals: exact_state")?,
                trajectory: self.f(&r[4], "vals: trajectory")?,
            });
        }
        Ok(vals)
    }

    fn position(&self) -> Result<Position, TrainError> {
        let position = &self.v["position"];
        Ok(Position {
            shard: position["shard"]
                .as_u64()
                .and_then(|s| usize::try_from(s).ok())
                .ok_or_else(|| self.bad("position.shard"))?,
            game: position["game"]
                .as_u64()
                .ok_or_else(|| self.bad("position.game"))?,
        })
    }

    fn progress(&self) -> Result<RunState, TrainError> {
        let steps = self.steps()?;
        let vals = self.vals()?;
        let position = self.position()?;
        Ok(RunState {
            step: self.u("step")?,
            opt_steps: self.u("opt_steps")?,
            epoch: self.u("epoch")?,
            position,
            epoch_batches: self.u("epoch_batches")?,
            skipped: self.u("skipped")?,
            rolled_back: self.u("rolled_back")?,
            consecutive_bad: self.u("consecutive_bad")?,
            tokens: self.u("tokens")?,
            train_s: self.f(&self.v["train_s"], "train_s")?,
            last_val_step: self.u("last_val_step")?,
            steps,
            vals,
        })
    }

    /// The optimizer moments in `bytes` (the content of `optimizer.bin`), as the index lists
    /// them.
    fn moments(&self, bytes: &[u8]) -> Result<Vec<ExportedMoments>, TrainError> {
        let mut moments = Vec::new();
        let mut offset = 0usize;
        for e in self.array("optimizer", "optimizer index missing")? {
            let path = e["path"]
                .as_str()
                .ok_or_else(|| self.bad("optimizer: path"))?;
            let step = e["step"]
                .as_u64()
                .ok_or_else(|| self.bad("optimizer: step"))?;
            let len = e["len"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| self.bad("optimizer: len"))?;
            let end = offset + 8 * len;
            if end > bytes.len() {
                return Err(self.bad(format!("optimizer.bin is too short for {path}")));
            }
            moments.push(ExportedMoments {
                path: path.to_owned(),
                step,
                m: le_floats(&bytes[offset..offset + 4 * len]),
                v: le_floats(&bytes[offset + 4 * len..end]),
            });
            offset = end;
        }
        if offset != bytes.len() {
            return Err(self.bad("optimizer.bin is longer than its index"));
        }
        Ok(moments)
    }
}

/// Removes a partial state and its temporary siblings.
///
/// # Errors
/// [`TrainError::Io`] when a directory cannot be removed.
pub fn remove(dir: &Path) -> Result<(), TrainError> {
    let (tmp, old) = siblings(dir);
    for d in [dir.to_path_buf(), tmp, old] {
        if d.exists() {
            fs::remove_dir_all(&d).map_err(|e| TrainError::io(&d, e))?;
        }
    }
    Ok(())
}
