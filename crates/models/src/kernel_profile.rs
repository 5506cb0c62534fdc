//! cubecl's kernel profiler on the cubecl devices (`cuda`, `cube-cpu`), switched on by the
//! environment variable `CWM_KERNEL_PROFILE`: where a training step's device time goes,
//! kernel by kernel.
//!
//! With `CWM_KERNEL_PROFILE=FILE`, every kernel the process launches is timed on its own and
//! written to FILE as a line `| duration | kernel name`; at every device barrier (`cwm model
//! bench` puts one at the end of each step; autotuning adds its own) cubecl adds a table of the
//! kernels since the one before: name, total duration, count and share.
//! `benches/python/kernel_profile.py` turns the last such tables into one step's table. FILE is
//! written afresh by each process (relative to the working directory).
//!
//! Only the profiler's log is switched on. cubecl's own variables for the same
//! (`CUBECL_DEBUG_LOG` with `CUBECL_DEBUG_OPTION=profile`) also log every autotuning run and
//! the source of every kernel compiled, which on CUDA means compiling each kernel with debug
//! information and piping its source through a `clang-format` process, on top of a start-up
//! that took 86–129 s on an H200 without them (docs/gpu.md). Timing
//! each kernel on its own slows a step, so a step's figure taken with the profiler is not the
//! one to compare; the shares are what it is for.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The environment variable read by [`profile_log_from_env`].
pub const KERNEL_PROFILE_VAR: &str = "CWM_KERNEL_PROFILE";

/// The log file `value` of [`KERNEL_PROFILE_VAR`] names, a relative path taken against `cwd`;
/// none when unset, empty or `off` (`0`, `false`, `no`).
pub fn profile_log(value: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    let value = value.filter(|v| !v.is_empty())?;
    match value.to_str().map(str::to_ascii_lowercase).as_deref() {
        Some("off" | "0" | "false" | "no") => None,
        _ => Some(cwd.join(value)),
    }
}

/// The log file this process's environment names, if any.
pub fn profile_log_from_env() -> Option<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    profile_log(std::env::var_os(KERNEL_PROFILE_VAR).as_deref(), &cwd)
}

/// Waits, for `limit` at most, until the profile log has stopped growing for a second; nothing
/// without a profile or in a build without a cubecl device. cubecl writes the log from a
/// background task that trails the kernels (each one's time is resolved first), and a process
/// that exits at once loses the tables of its last steps; the `cwm` binary calls this before
/// it exits.
pub fn wait_for_log(limit: std::time::Duration) {
    if !cfg!(any(feature = "cuda", feature = "cube-cpu")) {
        return;
    }
    let Some(path) = profile_log_from_env() else {
        return;
    };
    let size = || std::fs::metadata(&path).map(|m| m.len()).ok();
    let start = std::time::Instant::now();
    let (mut last, mut unchanged) = (size(), 0);
    while unchanged < 5 && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let now = size();
        if now == last {
            unchanged += 1;
        } else {
            (last, unchanged) = (now, 0);
        }
    }
}

/// Turns cubecl's profiler log on in `config` when the environment asks for it; part of
/// [`crate::kernel_cache::configure_cubecl`].
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
pub(crate) fn apply(config: &mut burn::cubecl::config::CubeClRuntimeConfig) {
    use burn::cubecl::config::profiling::ProfilingLogLevel;
    if let Some(file) = profile_log_from_env() {
        let logger = &mut config.profiling.logger;
        logger.level = ProfilingLogLevel::Basic;
        logger.file = Some(file);
        logger.append = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_names_a_log_file_or_nothing() {
        let cwd = Path::new("/work/run");
        let parse = |v: Option<&str>| profile_log(v.map(OsStr::new), cwd);
        for none in [
            None,
            Some(""),
            Some("off"),
            Some("No"),
            Some("0"),
            Some("false"),
        ] {
            assert_eq!(parse(none), None, "{none:?}");
        }
        assert_eq!(
            parse(Some("/scratch/profile.log")),
            Some(PathBuf::from("/scratch/profile.log"))
        );
        assert_eq!(
            parse(Some("target/profile.log")),
            Some(PathBuf::from("/work/run/target/profile.log"))
        );
    }
}
