//! Choosing the device models run on, by name.
//!
//! | name | device | build |
//! |---|---|---|
//! | `cpu` (also `flex`) | burn's pure-Rust CPU backend | always |
//! | `cuda`, `cuda:N` | burn's CUDA backend, GPU `N` (default 0) | cargo feature `cuda` |
//!
//! Stages take the name as their `device` param, so a pipeline says where it trains.

use burn::prelude::*;

use crate::error::ModelError;

/// The device named `name` (see the module docs).
///
/// # Errors
/// [`ModelError::InvalidConfig`] (field `device`) for an unknown name, a bad GPU index, or
/// `cuda` in a build without the `cuda` feature.
pub fn device_by_name(name: &str) -> Result<Device, ModelError> {
    let invalid = |reason: String| ModelError::InvalidConfig {
        field: "device",
        reason,
    };
    match name {
        "cpu" | "flex" => Ok(Device::flex()),
        _ => {
            let index = match name.strip_prefix("cuda") {
                Some("") => 0,
                Some(rest) => rest
                    .strip_prefix(':')
                    .and_then(|n| n.parse::<u32>().ok())
                    .ok_or_else(|| invalid(format!("{name:?} is not cuda or cuda:N")))?,
                None => {
                    return Err(invalid(format!(
                        "unknown device {name:?} (expected cpu, cuda or cuda:N)"
                    )));
                }
            };
            cuda(name, index).map_err(invalid)
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda(_name: &str, index: u32) -> Result<Device, String> {
    Ok(Device::cuda(index))
}

#[cfg(not(feature = "cuda"))]
fn cuda(name: &str, _index: u32) -> Result<Device, String> {
    Err(format!(
        "{name:?}: this build of cwm has no CUDA backend; rebuild it with `--features cuda` \
         (see crates/models/README.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
