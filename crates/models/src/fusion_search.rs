//! How widely burn's operation fusion on the cubecl devices (`cuda`, `cube-cpu`) searches for
//! kernels to merge: its beam search's number of blocks, which cwm sets lower than burn does.
//!
//! burn's fusion records the operations a step queues and splits each segment of them into up
//! to `max_blocks` chains ("blocks") that a search grows side by side, each merged into kernels
//! by the fusers (element-wise, a matrix product with its neighbours, a reduction with its
//! inputs and outputs). The merged kernels must then run in an order that respects every
//! dependency between the blocks. Where the chains interleave so that no such order exists (a
//! cycle between merged blocks), burn runs the whole segment unfused, every operation a kernel
//! of its own, and keeps that plan for every later step (its log says "falling back to unfused
//! stream order"). cwm's training steps hit this with burn's 5 blocks: whole segments of the
//! transformer's step (the loss's log-softmax, the normalisation's gradient around the dropout,
//! the gated MLP's gradient) ran as single operations. One block leaves no chains to
//! interleave: docs/gpu-speed.md ("Levers ready to time on a GPU") has the kernel counts per
//! step for each setting.
//!
//! The environment variable `CWM_FUSION_BLOCKS` chooses, for the whole process:
//!
//! | value | blocks |
//! |---|---|
//! | unset or empty | [`DEFAULT_FUSION_BLOCKS`] |
//! | a number ≥ 1 | that many |
//! | `burn` | burn's own setting: 5, or what a `burn.toml` says (burn reads it from the working directory up) |
//!
//! `cwm model bench --fusion-blocks` sets it for one run. Nothing changes on the CPU (`flex`
//! has no fusion), and the computation is the same whatever the setting: only which
//! operations share a kernel.

use std::ffi::OsStr;
use std::fmt;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::sync::OnceLock;

/// The environment variable read by [`FusionBlocks::from_env`].
pub const FUSION_BLOCKS_VAR: &str = "CWM_FUSION_BLOCKS";

/// The number of blocks cwm's fusion searches with unless told otherwise.
pub const DEFAULT_FUSION_BLOCKS: NonZeroUsize = NonZeroUsize::MIN;

/// The beam search's number of blocks: burn's setting, or a number of cwm's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusionBlocks {
    /// burn's own setting (its default, or its `burn.toml`).
    Burn,
    /// This many blocks.
    Blocks(NonZeroUsize),
}

impl Default for FusionBlocks {
    fn default() -> Self {
        FusionBlocks::Blocks(DEFAULT_FUSION_BLOCKS)
    }
}

impl FromStr for FusionBlocks {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("burn") {
            return Ok(FusionBlocks::Burn);
        }
        s.parse::<NonZeroUsize>()
            .map(FusionBlocks::Blocks)
            .map_err(|_| format!("{s:?} is neither a number of blocks (1 or more) nor `burn`"))
    }
}

impl fmt::Display for FusionBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FusionBlocks::Burn => f.write_str("burn"),
            FusionBlocks::Blocks(n) => write!(f, "{n}"),
        }
    }
}

impl FusionBlocks {
    /// The setting `value` of [`FUSION_BLOCKS_VAR`] names (the module docs).
    ///
    /// # Errors
    /// A message naming the variable when the value is neither a positive number nor `burn`.
    pub fn parse(value: Option<&OsStr>) -> Result<Self, String> {
        crate::env_setting::parse(FUSION_BLOCKS_VAR, value)
    }

    /// The setting of this process's environment.
    ///
    /// # Errors
    /// As [`FusionBlocks::parse`].
    pub fn from_env() -> Result<Self, String> {
        Self::parse(std::env::var_os(FUSION_BLOCKS_VAR).as_deref())
    }
}

/// The setting this process's fusion runs with, once chosen.
static CHOSEN: OnceLock<FusionBlocks> = OnceLock::new();

/// Chooses the process's setting, `blocks`, unless one was chosen already; returns the one in
/// effect. The first cubecl device made chooses from the environment
/// ([`FusionBlocks::from_env`]), so a caller with a setting of its own calls this first.
pub fn choose_fusion_blocks(blocks: FusionBlocks) -> FusionBlocks {
    *CHOSEN.get_or_init(|| {
        apply(blocks);
        blocks
    })
}

/// The setting chosen so far, if any.
pub fn chosen_fusion_blocks() -> Option<FusionBlocks> {
    CHOSEN.get().copied()
}

/// The setting in effect, chosen from the environment if none was chosen before: what making a
/// cubecl device does.
///
/// # Errors
/// As [`FusionBlocks::parse`], when the environment's value is read and is not a setting.
#[cfg_attr(not(any(feature = "cuda", feature = "cube-cpu")), allow(dead_code))]
pub(crate) fn choose_from_env() -> Result<FusionBlocks, String> {
    match chosen_fusion_blocks() {
        Some(blocks) => Ok(blocks),
        None => Ok(choose_fusion_blocks(FusionBlocks::from_env()?)),
    }
}

/// Hands `blocks` to burn's global configuration, which its fusion reads when a cubecl device
/// first fuses. burn's configuration has no setter of its own for the field, so the whole
/// configuration (from burn's files and variables) goes through its serialized form.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn apply(blocks: FusionBlocks) {
    use burn::BurnConfig;
    use burn::cubecl::config::RuntimeConfig;
    let FusionBlocks::Blocks(n) = blocks else {
        return;
    };
    let config = BurnConfig::from_current_dir().override_from_env();
    let changed = serde_json::to_value(&config).and_then(|mut value| {
        value["fusion"]["beam_search"]["max_blocks"] = n.get().into();
        serde_json::from_value::<BurnConfig>(value)
    });
    match changed {
        Ok(config) => {
            if !BurnConfig::try_set(config) {
                eprintln!(
                    "warning: {FUSION_BLOCKS_VAR} not applied: burn had read its configuration \
                     already; burn's own fusion search in use"
                );
            }
        }
        // The configuration's form is burn's; if it ever stops having the field, burn's own
        // setting stays, and the run says so.
        Err(err) => eprintln!(
            "warning: {FUSION_BLOCKS_VAR} not applied ({err}); burn's own fusion search in use"
        ),
    }
}

#[cfg(not(any(feature = "cuda", feature = "cube-cpu")))]
fn apply(_: FusionBlocks) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_a_number_of_blocks_or_burn_s_setting() {
        let parse = |v: Option<&str>| FusionBlocks::parse(v.map(OsStr::new));
        let blocks = |n| FusionBlocks::Blocks(NonZeroUsize::new(n).unwrap());
        assert_eq!(parse(None), Ok(FusionBlocks::Blocks(DEFAULT_FUSION_BLOCKS)));
        assert_eq!(
            parse(Some("")),
            Ok(FusionBlocks::Blocks(DEFAULT_FUSION_BLOCKS))
        );
        assert_eq!(parse(Some("3")), Ok(blocks(3)));
        assert_eq!(parse(Some("Burn")), Ok(FusionBlocks::Burn));
        for bad in ["0", "-1", "two", "1.5"] {
            let err = parse(Some(bad)).unwrap_err();
            assert!(
                err.starts_with(FUSION_BLOCKS_VAR) && err.contains(bad),
                "{err}"
            );
        }
        for setting in [FusionBlocks::Burn, blocks(7)] {
            assert_eq!(setting.to_string().parse(), Ok(setting));
        }
    }
}
