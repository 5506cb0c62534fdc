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

use crate::env_setting::ProcessSetting;

/// The environment variable [`DELTA_CHUNKS`] is read from.
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

crate::env_setting::setting_names!(DeltaChunks {
    Kernels => "kernels",
    Operations => "operations",
});

/// The process's setting (the module docs).
pub static DELTA_CHUNKS: ProcessSetting<DeltaChunks> = ProcessSetting::new(DELTA_CHUNKS_VAR);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_kernels_or_operations() {
        assert_eq!(DeltaChunks::default(), DeltaChunks::Kernels);
        crate::env_setting::assert_reads_its_names(&DELTA_CHUNKS, NAMES, &["ops", "kernel", "1"]);
    }
}
