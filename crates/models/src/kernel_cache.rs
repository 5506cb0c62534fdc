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
//! A second variable, `CWM_KERNEL_TUNING`, keeps the tuning results out of the database while
//! compiled kernels still go in (`off`, `0`, `false` or `no`; anything else, or unset, keeps
//! both): a process that compiles a step's kernels beside others on one GPU (`compare_stacks.py
//! --prewarm`) leaves the kernels for the processes after it, but not timings measured while
//! the others ran, which could choose slower kernels for an uncontended run. Such a process
//! still tunes; it uses what it measured and forgets it at exit.
//!
//! The database is keyed by the device, its driver and cubecl's version, so one folder serves
//! several GPUs; processes that share it (the jobs of a cluster) read each other's entries, and
//! a write one of them loses to another costs a compilation, never a wrong kernel. A
//! `cubecl.toml` (cubecl's own settings file) is read as cubecl would read it; the variable's
//! choice overrides its `compilation.cache` and `environment.path`, and `off` its tuning caches
//! too (`autotune.disable_cache`, `throughput.disable_cache`).
//!
//! On CUDA, cwm also lets cubecl's autotuner time every candidate of a shape's first round
//! ([`full_search`]): by default the tuner stops at the first kernel whose time is within
//! 1/0.8 of the shape's time at the device's peak, and for `f32` matrix products it takes that
//! peak to be the `f32` one of the GPU's ordinary cores, which a TF32 tensor-core kernel beats
//! with its first samples, so the search ended at the first such kernel it tried
//! (docs/gpu-speed.md, "The tuner's early stop").
//! cubecl's own variable `CUBECL_AUTOTUNE_SHORT_CIRCUIT`, when set, decides instead.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The environment variable read by [`KernelCache::from_env`].
pub const KERNEL_CACHE_VAR: &str = "CWM_KERNEL_CACHE";

/// The environment variable read by [`tuning_kept_in_env`].
pub const KERNEL_TUNING_VAR: &str = "CWM_KERNEL_TUNING";

/// Whether `value` (of a variable that says on or off) says off.
fn says_off(value: &OsStr) -> bool {
    matches!(
        value.to_str().map(str::to_ascii_lowercase).as_deref(),
        Some("off" | "0" | "false" | "no")
    )
}

/// Whether `value` of [`KERNEL_TUNING_VAR`] lets tuning results into the database: anything
/// but off (see [`says_off`]), unset included.
pub fn tuning_kept(value: Option<&OsStr>) -> bool {
    !value.is_some_and(says_off)
}

/// [`tuning_kept`] of this process's environment.
pub fn tuning_kept_in_env() -> bool {
    tuning_kept(std::env::var_os(KERNEL_TUNING_VAR).as_deref())
}

/// What goes into cubecl's database, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Compiled kernels.
    pub kernels: bool,
    /// Autotuning results (and cubecl's throughput measurements).
    pub tuning: bool,
    /// The database's folder; `None` is cubecl's default place.
    pub folder: Option<PathBuf>,
}

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
        if says_off(value) {
            KernelCache::Off
        } else {
            KernelCache::Directory(cwd.join(value))
        }
    }

    /// What is kept, with tuning results only if `tuning` (and never without a cache).
    pub fn kept(&self, tuning: bool) -> Kept {
        let on = *self != KernelCache::Off;
        Kept {
            kernels: on,
            tuning: on && tuning,
            folder: match self {
                KernelCache::Directory(dir) => Some(dir.clone()),
                KernelCache::Default | KernelCache::Off => None,
            },
        }
    }

    /// The choice of this process's environment.
    pub fn from_env() -> KernelCache {
        let cwd = std::env::current_dir().unwrap_or_default();
        KernelCache::parse(std::env::var_os(KERNEL_CACHE_VAR).as_deref(), &cwd)
    }
}

/// cubecl's variable that switches its autotuner's early stop on or off.
pub const SHORT_CIRCUIT_VAR: &str = "CUBECL_AUTOTUNE_SHORT_CIRCUIT";

/// The cubecl runtime a process's first device is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// An NVIDIA GPU (`cuda`).
    Cuda,
    /// cubecl's CPU runtime (`cube-cpu`).
    CubeCpu,
}

/// Whether cwm turns the autotuner's early stop off so that every candidate of a shape's
/// first round is timed, given `value` of [`SHORT_CIRCUIT_VAR`]: on CUDA unless the variable
/// is set to something (cubecl then follows it: `1`, `on`, `true` stop early, `0`, `off`,
/// `false` do not). The CPU runtime's products have no tensor cores whose
/// peak the stop could misjudge, and its tuning is slow enough already.
pub fn full_search(value: Option<&OsStr>, runtime: Runtime) -> bool {
    value.is_none_or(OsStr::is_empty) && runtime == Runtime::Cuda
}

/// Applies [`KernelCache::from_env`] and [`tuning_kept_in_env`] (and [`crate::kernel_profile`]'s
/// variable, and [`full_search`] for `runtime`) to cubecl's configuration, once per process and
/// before the first cubecl device exists (cubecl reads its configuration once). A
/// configuration that cubecl has already read (another library set it first) is left as it is.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) fn configure_cubecl(runtime: Runtime) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use burn::cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};
        use burn::cubecl::records::RecordLevel;
        let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
        if full_search(std::env::var_os(SHORT_CIRCUIT_VAR).as_deref(), runtime) {
            config.autotune.disable_short_circuit = true;
        }
        let kept = KernelCache::from_env().kept(tuning_kept_in_env());
        // cubecl keeps its tuning on disk by default (its own variables can turn that off,
        // which is left to them); its compiled kernels only when told.
        config.compilation.cache = kept.kernels;
        if !kept.tuning {
            config.autotune.disable_cache = true;
            config.throughput.disable_cache = true;
        }
        // cubecl's records of what each compilation cost grow the database by every session
        // and serve no cwm figure: off unless asked for by cubecl's own variable.
        if !kept.kernels || std::env::var_os("CUBECL_ENVIRONMENT_RECORDS").is_none() {
            config.environment.records.level = RecordLevel::Off;
        }
        if let Some(dir) = kept.folder {
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

    #[test]
    fn the_tuner_times_every_candidate_on_cuda_unless_cubecl_s_variable_is_set() {
        for unset in [None, Some(OsStr::new(""))] {
            assert!(full_search(unset, Runtime::Cuda), "{unset:?}");
            assert!(!full_search(unset, Runtime::CubeCpu), "{unset:?}");
        }
        for value in ["1", "on", "0", "off"] {
            let value = Some(OsStr::new(value));
            assert!(!full_search(value, Runtime::Cuda), "{value:?}");
            assert!(!full_search(value, Runtime::CubeCpu), "{value:?}");
        }
    }

    #[test]
    fn tuning_results_stay_out_only_when_the_second_variable_says_off() {
        let tuning = |v: Option<&str>| tuning_kept(v.map(OsStr::new));
        for on in [
            None,
            Some(""),
            Some("on"),
            Some("1"),
            Some("yes"),
            Some("offline"),
        ] {
            assert!(tuning(on), "{on:?}");
        }
        for off in ["off", "Off", "0", "false", "NO"] {
            assert!(!tuning(Some(off)), "{off}");
        }
        let dir = PathBuf::from("/scratch/kernels");
        let folder = KernelCache::Directory(dir.clone());
        let kept = |kernels, tuning, folder| Kept {
            kernels,
            tuning,
            folder,
        };
        assert_eq!(folder.kept(true), kept(true, true, Some(dir.clone())));
        assert_eq!(folder.kept(false), kept(true, false, Some(dir)));
        assert_eq!(KernelCache::Default.kept(false), kept(true, false, None));
        assert_eq!(KernelCache::Default.kept(true), kept(true, true, None));
        // No cache keeps nothing, whatever the second variable says.
        assert_eq!(KernelCache::Off.kept(true), kept(false, false, None));
    }
}
