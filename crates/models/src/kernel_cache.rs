//! Where burn's cubecl backends (devices `cuda` and `cube-cpu`) keep the kernels they compile
//! and the autotuning results they measure, so that a process does not compile and tune again
//! what an earlier one on the same machine already did.
//!
//! A cubecl process compiles every kernel it launches on first use and, with autotuning, times
//! several candidate kernels per matrix-product and reduction shape: on an H200 a training
//! process spent about 100 s on that before its first fast step (docs/gpu.md). cubecl can keep
//! both in a database on disk (its `persistence` feature, on in the `cuda` and `cube-cpu`
//! builds); its autotuning results are kept by default, its compiled kernels only when its
//! configuration says so, which cwm does. The environment variable `CWM_KERNEL_CACHE` chooses:
//!
//! | value | what is kept, where |
//! |---|---|
//! | unset or empty | both, in cubecl's default place: `target/environment` of the outermost Cargo workspace above the working directory, else the user's cache folder (`~/.cache/cubecl`) |
//! | `off` (or `0`, `false`, `no`) | neither: every process compiles and tunes anew |
//! | a folder | both, in that folder (made absolute against the working directory) |
//!
//! The database is keyed by the device, its driver and cubecl's version, so one folder serves
//! several GPUs; processes that share it (the jobs of a cluster) read each other's entries, and
//! a write one of them loses to another costs a compilation, never a wrong kernel. A
//! `cubecl.toml` (cubecl's own settings file) is read as cubecl would read it; the variable's
//! choice overrides its `compilation.cache` and `environment.path`, and `off` its tuning caches
//! too (`autotune.disable_cache`, `throughput.disable_cache`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The environment variable read by [`KernelCache::from_env`].
pub const KERNEL_CACHE_VAR: &str = "CWM_KERNEL_CACHE";

/// What the cubecl backends keep on disk (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelCache {
    /// Compiled kernels and autotuning results, in cubecl's default place.
    Default,
    /// Nothing.
    Off,
    /// Compiled kernels and autotuning results, in this folder (absolute).
    Directory(PathBuf),
}

impl KernelCache {
    /// The choice `value` of [`KERNEL_CACHE_VAR`] names, a relative folder taken against
    /// `cwd`.
    pub fn parse(value: Option<&OsStr>, cwd: &Path) -> KernelCache {
        let Some(value) = value.filter(|v| !v.is_empty()) else {
            return KernelCache::Default;
        };
        match value.to_str().map(str::to_ascii_lowercase).as_deref() {
            Some("off" | "0" | "false" | "no") => KernelCache::Off,
            _ => KernelCache::Directory(cwd.join(value)),
        }
    }

    /// The choice of this process's environment.
    pub fn from_env() -> KernelCache {
        let cwd = std::env::current_dir().unwrap_or_default();
        KernelCache::parse(std::env::var_os(KERNEL_CACHE_VAR).as_deref(), &cwd)
    }
}

/// Applies [`KernelCache::from_env`] (and [`crate::kernel_profile`]'s variable) to cubecl's
/// configuration, once per process and before the first cubecl device exists (cubecl reads its
/// configuration once). A configuration that cubecl has already read (another library set it
/// first) is left as it is.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) fn configure_cubecl() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};
        use burn::cubecl::records::RecordLevel;
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        let keep = KernelCache::from_env();
        let off = keep == KernelCache::Off;
        // cubecl keeps its tuning on disk by default (its own variables can turn that off,
        // which is left to them); its compiled kernels only when told.
        config.compilation.cache = !off;
        if off {
            config.autotune.disable_cache = true;
            config.throughput.disable_cache = true;
        }
        // cubecl's records of what each compilation cost grow the database by every session
        // and serve no cwm figure: off unless asked for by cubecl's own variable.
        if off || std::env::var_os("CUBECL_ENVIRONMENT_RECORDS").is_none() {
            config.environment.records.level = RecordLevel::Off;
        }
        if let KernelCache::Directory(dir) = keep {
            config.environment.path = CacheConfig::Directory(dir);
        }
        crate::kernel_profile::apply(&mut config);
        CubeClRuntimeConfig::try_set(config);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_cubecl_s_place_nothing_or_a_folder() {
        let cwd = Path::new("/work/run");
        let parse = |v: Option<&str>| KernelCache::parse(v.map(OsStr::new), cwd);
        assert_eq!(parse(None), KernelCache::Default);
        assert_eq!(parse(Some("")), KernelCache::Default);
        for off in ["off", "OFF", "0", "false", "no"] {
            assert_eq!(parse(Some(off)), KernelCache::Off, "{off}");
        }
        assert_eq!(
            parse(Some("/scratch/kernels")),
            KernelCache::Directory(PathBuf::from("/scratch/kernels"))
        );
        assert_eq!(
            parse(Some("kernels")),
            KernelCache::Directory(PathBuf::from("/work/run/kernels"))
        );
        assert_eq!(
            parse(Some("offline")),
            KernelCache::Directory(PathBuf::from("/work/run/offline"))
        );
    }
}
