//! Choosing the device models run on, by name.
//!
//! | name | device | build |
//! |---|---|---|
//! | `cpu` (also `flex`) | burn's pure-Rust CPU backend | always |
//! | `cuda`, `cuda:N` | burn's CUDA backend, GPU `N` (default 0) | cargo feature `cuda` |
//! | `cube-cpu` | burn's cubecl backend on the host's CPU: CUDA's code path without a GPU | cargo feature `cube-cpu` |
//!
//! Stages take the name as their `device` param, so a pipeline says where it trains. In a
//! `cuda` build, `cuda` on a machine without the NVIDIA driver's library is refused with an
//! error saying so (burn's backend would panic on its device thread). The cubecl devices
//! (`cuda`, `cube-cpu`) keep compiled kernels and autotuning results on disk as
//! [`crate::kernel_cache`] says (`CWM_KERNEL_CACHE`), and fuse operations with the search
//! [`crate::fusion_search`] sets (`CWM_FUSION_BLOCKS`).

use burn::prelude::*;

use crate::error::ModelError;

/// The device named `name` (see the module docs).
///
/// # Errors
/// [`ModelError::InvalidConfig`] (field `device`) for an unknown name, a bad GPU index, or
/// `cuda` (`cube-cpu`) in a build without the `cuda` (`cube-cpu`) feature.
pub fn device_by_name(name: &str) -> Result<Device, ModelError> {
    let invalid = |reason: String| ModelError::InvalidConfig {
        field: "device",
        reason,
    };
    match name {
        "cpu" | "flex" => Ok(Device::flex()),
        "cube-cpu" => cube_cpu().map_err(invalid),
        _ => {
            let index = match name.strip_prefix("cuda") {
                Some("") => 0,
                Some(rest) => rest
                    .strip_prefix(':')
                    .and_then(|n| n.parse::<u32>().ok())
                    .ok_or_else(|| invalid(format!("{name:?} is not cuda or cuda:N")))?,
                None => {
                    return Err(invalid(format!(
                        "unknown device {name:?} (expected cpu, cuda, cuda:N or cube-cpu)"
                    )));
                }
            };
            cuda(name, index).map_err(invalid)
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda(name: &str, index: u32) -> Result<Device, String> {
    // burn's backend loads the driver on a thread of its own and panics there when it is
    // missing; a machine without one gets this message instead.
    if !driver_library_present(&DriverSearch::of_this_machine()) {
        return Err(format!(
            "{name:?}: the NVIDIA driver's library (libcuda.so) is not on this machine (looked \
             in LD_LIBRARY_PATH, /etc/ld.so.cache and {}); run on a machine with an NVIDIA GPU \
             and its driver (if the library is elsewhere, add its folder to LD_LIBRARY_PATH), \
             or use device cpu",
            DRIVER_DIRS.join(", ")
        ));
    }
    if set_up_cubecl(crate::kernel_cache::Runtime::Cuda)?.is_cublas() {
        crate::products::cublas::check_library()?;
    }
    Ok(Device::cuda(index))
}

/// Folders the driver's library is installed in by the usual packages and container images
/// (WSL's last), searched
/// besides `LD_LIBRARY_PATH` and the dynamic loader's cache.
#[cfg(feature = "cuda")]
const DRIVER_DIRS: [&str; 6] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
];

/// Where to look for the CUDA driver's library.
#[cfg(any(feature = "cuda", test))]
struct DriverSearch {
    /// The folders of `LD_LIBRARY_PATH`, then [`DRIVER_DIRS`].
    dirs: Vec<std::path::PathBuf>,
    /// The contents of the dynamic loader's cache (`/etc/ld.so.cache`), which names every
    /// library the loader finds without a path.
    loader_cache: Option<Vec<u8>>,
}

#[cfg(any(feature = "cuda", test))]
impl DriverSearch {
    #[cfg(feature = "cuda")]
    fn of_this_machine() -> DriverSearch {
        let mut dirs: Vec<std::path::PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
            .map(|paths| std::env::split_paths(&paths).collect())
            .unwrap_or_default();
        dirs.extend(DRIVER_DIRS.iter().map(std::path::PathBuf::from));
        DriverSearch {
            dirs,
            loader_cache: std::fs::read("/etc/ld.so.cache").ok(),
        }
    }
}

/// Whether the CUDA driver's library (`libcuda.so`, `libcuda.so.1`, ...) can be found where
/// the dynamic loader looks for it. Always true off Linux, where these places mean nothing.
#[cfg(any(feature = "cuda", test))]
fn driver_library_present(search: &DriverSearch) -> bool {
    const NAME: &[u8] = b"libcuda.so";
    if !cfg!(target_os = "linux") {
        return true;
    }
    let in_cache = search
        .loader_cache
        .as_deref()
        .is_some_and(|cache| cache.windows(NAME.len()).any(|w| w == NAME));
    in_cache
        || search.dirs.iter().any(|dir| {
            std::fs::read_dir(dir).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|entry| entry.file_name().as_encoded_bytes().starts_with(NAME))
            })
        })
}

#[cfg(not(feature = "cuda"))]
fn cuda(name: &str, _index: u32) -> Result<Device, String> {
    Err(format!(
        "{name:?}: this build of cwm has no CUDA backend; rebuild it with `--features cuda` \
         (see crates/models/README.md)"
    ))
}

/// What making a cubecl device sets up for the whole process: where cubecl keeps its kernels,
/// then every process setting not chosen yet, from its environment variable; returns who
/// multiplies the matrices.
///
/// # Errors
/// The first setting whose variable names none of its values.
#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
fn set_up_cubecl(
    runtime: crate::kernel_cache::Runtime,
) -> Result<crate::products::Products, String> {
    crate::kernel_cache::configure_cubecl(runtime);
    crate::fusion_search::choose_from_env()?;
    crate::delta_kernels::DELTA_CHUNKS.choose_from_env()?;
    crate::column_sums::COLUMN_SUMS.choose_from_env()?;
    crate::embedding_grad::EMBEDDING_GRAD.choose_from_env()?;
    crate::slice_scan::SLICE_SCAN.choose_from_env()?;
    crate::products::PRODUCTS.choose_from_env()
}

#[cfg(feature = "cube-cpu")]
fn cube_cpu() -> Result<Device, String> {
    let products = set_up_cubecl(crate::kernel_cache::Runtime::CubeCpu)?;
    if products.is_cublas() {
        return Err(format!(
            "\"cube-cpu\": CWM_PRODUCTS={products} multiplies on device cuda only; leave the \
             products to cubecl (unset CWM_PRODUCTS) on this device"
        ));
    }
    Ok(Device::cpu())
}

#[cfg(not(feature = "cube-cpu"))]
fn cube_cpu() -> Result<Device, String> {
    Err(
        "\"cube-cpu\": this build of cwm has no cubecl CPU backend; rebuild it with \
         `--features cube-cpu` (see docs/gpu.md)"
            .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_library_is_found_in_the_loader_cache_or_a_folder() {
        let dir = std::env::temp_dir().join(format!("cwm-driver-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libcudart.so.13"), b"").unwrap();
        let mut search = DriverSearch {
            dirs: vec![dir.clone(), dir.join("absent")],
            loader_cache: Some(b"ld.so-1.7.0\0libc.so.6\0/lib/libc.so.6\0".to_vec()),
        };
        // The runtime (libcudart) is not the driver.
        assert!(!driver_library_present(&search));
        search.loader_cache = Some(b"\0libcuda.so.1\0/usr/lib64/libcuda.so.1\0".to_vec());
        assert!(driver_library_present(&search));
        search.loader_cache = None;
        assert!(!driver_library_present(&search));
        std::fs::write(dir.join("libcuda.so.1"), b"").unwrap();
        assert!(driver_library_present(&search));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names() {
        assert!(device_by_name("cpu").is_ok());
        assert!(device_by_name("flex").is_ok());
        let err = device_by_name("tpu").unwrap_err().to_string();
        assert!(err.contains("unknown device"), "{err}");
        assert!(device_by_name("cuda:x").is_err());
        if !cfg!(feature = "cuda") {
            let err = device_by_name("cuda:1").unwrap_err().to_string();
            assert!(err.contains("--features cuda"), "{err}");
        }
        if !cfg!(feature = "cube-cpu") {
            let err = device_by_name("cube-cpu").unwrap_err().to_string();
            assert!(err.contains("--features cube-cpu"), "{err}");
        }
    }
}
