//! Whether cubecl's devices (`cuda`, `cube-cpu`) pass Gated DeltaNet's state from chunk to
//! chunk by cwm's two kernels or by tensor operations chunk by chunk (`delta_chunks.rs` and
//! `delta_chunks/cube.rs`), so that one build can time both on a GPU.
//!
//! The environment variable `CWM_DELTA_CHUNKS` chooses, for the whole process, when its first
//! cubecl device is made (`cwm model bench --delta-chunks` for one run):
//!
//! | value | passage |
//! |---|---|
//! | unset, empty or `kernels` | the kernels |
//! | `operations` | tensor operations, chunk by chunk (what the CPU runs) |
//!
//! Both compute the same quantities; they differ by rounding only (the order of the sums).
//! Nothing changes on the CPU (`flex`), which has no kernels of cwm's for it.

use std::ffi::OsStr;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// The environment variable read by [`DeltaChunks::from_env`].
pub const DELTA_CHUNKS_VAR: &str = "CWM_DELTA_CHUNKS";

/// How cubecl's devices pass the state from chunk to chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeltaChunks {
    /// cwm's kernels, one each way.
    #[default]
    Kernels,
    /// Tensor operations, chunk by chunk.
    Operations,
}

impl fmt::Display for DeltaChunks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeltaChunks::Kernels => "kernels",
            DeltaChunks::Operations => "operations",
        })
    }
}

impl FromStr for DeltaChunks {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("kernels") {
            Ok(DeltaChunks::Kernels)
        } else if s.eq_ignore_ascii_case("operations") {
            Ok(DeltaChunks::Operations)
        } else {
            Err(format!("{s:?} is neither `kernels` nor `operations`"))
        }
    }
}

impl DeltaChunks {
    /// The setting `value` of [`DELTA_CHUNKS_VAR`] names (the module docs).
    ///
    /// # Errors
    /// A message naming the variable when the value is neither `kernels` nor `operations`.
    pub fn parse(value: Option<&OsStr>) -> Result<Self, String> {
        crate::env_setting::parse(DELTA_CHUNKS_VAR, value)
    }

    /// The setting of this process's environment.
    ///
    /// # Errors
    /// As [`DeltaChunks::parse`].
    pub fn from_env() -> Result<Self, String> {
        Self::parse(std::env::var_os(DELTA_CHUNKS_VAR).as_deref())
    }
}

/// The setting this process runs with, once chosen.
static CHOSEN: OnceLock<DeltaChunks> = OnceLock::new();

/// The setting chosen so far, if any.
pub fn chosen_delta_chunks() -> Option<DeltaChunks> {
    CHOSEN.get().copied()
}

/// Chooses the process's setting unless one was chosen already; returns the one in effect.
/// The first cubecl device made chooses from the environment ([`DeltaChunks::from_env`]), so a
/// caller with a setting of its own calls this first.
pub fn choose_delta_chunks(setting: DeltaChunks) -> DeltaChunks {
    *CHOSEN.get_or_init(|| setting)
}

/// The setting in effect, chosen from the environment if none was chosen before: what making a
/// cubecl device does.
///
/// # Errors
/// As [`DeltaChunks::parse`], when the environment's value is read and is not a setting.
#[cfg_attr(not(any(feature = "cuda", feature = "cube-cpu")), allow(dead_code))]
pub(crate) fn choose_from_env() -> Result<DeltaChunks, String> {
    match chosen_delta_chunks() {
        Some(chosen) => Ok(chosen),
        None => Ok(choose_delta_chunks(DeltaChunks::from_env()?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_kernels_or_operations() {
        let parse = |v: Option<&str>| DeltaChunks::parse(v.map(OsStr::new));
        assert_eq!(parse(None), Ok(DeltaChunks::Kernels));
        assert_eq!(parse(Some("")), Ok(DeltaChunks::Kernels));
        assert_eq!(parse(Some("Kernels")), Ok(DeltaChunks::Kernels));
        assert_eq!(parse(Some("operations")), Ok(DeltaChunks::Operations));
        for bad in ["ops", "kernel", "1"] {
            let err = parse(Some(bad)).unwrap_err();
            assert!(
                err.starts_with(DELTA_CHUNKS_VAR) && err.contains(bad),
                "{err}"
            );
        }
        for setting in [DeltaChunks::Kernels, DeltaChunks::Operations] {
            assert_eq!(parse(Some(&setting.to_string())), Ok(setting));
        }
    }
}
