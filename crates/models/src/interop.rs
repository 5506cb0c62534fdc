//! Reference-compatible weights: a model's parameters as a safetensors file under the
//! reference's PyTorch `state_dict` key names and shapes (spec B.*), and back.
//!
//! [`export_safetensors`] writes every parameter as little-endian f32 under its PyTorch key;
//! [`import_safetensors`] builds a model from such a file and refuses a missing key, an extra
//! key, a wrong shape or a non-f32 tensor, naming the key. A file exported by cwm loads into
//! the PyTorch models of `crates/models/python/cwm_torch_models.py` with
//! `load_state_dict(strict=True)`, and a file written from those models (or from the reference
//! code) imports here.
//!
//! # Key names
//!
//! A parameter's key is its path in the burn module tree (struct field names and `Vec`
//! indices joined by `.`, enum variants left out) with these segments renamed:
//!
//! | cwm (burn) segment | PyTorch segment | where |
//! |---|---|---|
//! | `gamma` (burn's `RmsNorm`) | `weight` | every RMSNorm |
//! | `mlp_in`, `mlp_out` | `token_mlp.0`, `token_mlp.2` | SLiCE layers |
//! | `vf_a`, `vf_b` | `vf_A`, `vf_B` | SLiCE cells |
//! | `a_log` | `A_log` | Gated DeltaNet, Mamba-2 |
//! | `d` | `D` | Mamba-2, Mamba-3 |
//! | `b_bias`, `c_bias`, `b_norm`, `c_norm` | `B_bias`, `C_bias`, `B_norm`, `C_norm` | Mamba-3 |
//!
//! Every other segment is the same on both sides. burn's `Linear.weight` is stored
//! `[in, out]`, PyTorch's `[out, in]`: it is transposed on the way out and back. Nothing else
//! changes shape (embeddings are `[20482, d]` on both sides, depthwise convolution weights
//! `[C, 1, 4]`, Mamba-3's `B_bias`/`C_bias` `[nheads, R, N]`).
//!
//! The keys per family (spec B.1–B.4; `i` is the layer, `d` the width):
//!
//! | family | keys |
//! |---|---|
//! | `transformer` | `tok_emb.weight`; `blocks.{i}.{norm1,norm2}.weight`, `blocks.{i}.attn.qkv.{weight,bias}` `[3d,d]`, `blocks.{i}.attn.out_proj.{weight,bias}`, `blocks.{i}.mlp.in_proj.{weight,bias}` `[8d,d]`, `blocks.{i}.mlp.out_proj.{weight,bias}` `[d,4d]`; `final_norm.weight`; `output_head.{weight,bias}` |
//! | `slice`, `slice_diag` | `embedding.weight`; `layers.{i}.slice.init` `[d]`, `layers.{i}.slice.vf_A.weight` `[d·b,d+1]`, `layers.{i}.slice.vf_B.weight` `[d,d+1]`, `layers.{i}.{norm1,norm2}.weight`, `layers.{i}.token_mlp.0.{weight,bias}` `[4d,d]`, `layers.{i}.token_mlp.2.{weight,bias}` `[d,4d]`; `output_head.{weight,bias}` |
//! | `gdn`, `gdn_pos` | `backbone.embeddings.weight`; `backbone.layers.{i}.attn_norm.weight`, `backbone.layers.{i}.attn.{q,k,v,a,b,g,o}_proj.weight`, `backbone.layers.{i}.attn.{q,k,v}_conv1d.weight` `[C,1,4]`, `backbone.layers.{i}.attn.{A_log,dt_bias}` `[h]`, `backbone.layers.{i}.attn.o_norm.weight` `[96]`, `backbone.layers.{i}.mlp_norm.weight`, `backbone.layers.{i}.mlp.{gate,up,down}_proj.weight`; `backbone.norm.weight`; `output_head.{weight,bias}` |
//! | `mamba2` | `embedding.weight`; `layers.{i}.{norm,norm2}.weight`, `layers.{i}.mixer.{dt_bias,A_log,D}` `[nh]`, `layers.{i}.mixer.in_proj.weight` `[4d+2N+nh,d]`, `layers.{i}.mixer.conv1d.{weight [2d+2N,1,4],bias}`, `layers.{i}.mixer.norm.weight` `[2d]`, `layers.{i}.mixer.out_proj.weight` `[d,2d]`, `layers.{i}.mlp.fc1.weight` `[8d,d]`, `layers.{i}.mlp.fc2.weight` `[d,4d]`; `final_norm.weight`; `output_head.{weight,bias}` |
//! | `mamba3` | as `mamba2` but the mixer holds `dt_bias`, `D` `[nh]`, `B_bias`, `C_bias` `[nh,R,N]`, `B_norm.weight`, `C_norm.weight` `[N]`, `in_proj.weight` `[4d+2NR+3nh+32,d]`, `out_proj.weight`, and with MIMO `mimo_x`, `mimo_z`, `mimo_o` `[nh,R,64]` |
//!
//! The file's metadata holds `format = pt` and cwm's own `cwm.arch` and `cwm.size`;
//! [`import_safetensors`] refuses a file whose `cwm.arch` or `cwm.size` contradict the
//! requested configuration (files without them, e.g. written by PyTorch, are accepted).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use burn::module::{ModuleMapper, ModuleVisitor, Param};
use burn::prelude::*;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::model::Model;
use crate::rng::rng_lock;

/// Metadata key holding the family name in files cwm writes.
pub const META_ARCH: &str = "cwm.arch";
/// Metadata key holding the size name in files cwm writes.
pub const META_SIZE: &str = "cwm.size";

/// What can go wrong reading or writing a reference-compatible weights file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InteropError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a valid safetensors file, or cannot be encoded as one.
    #[error("{path}: not a valid safetensors file: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A parameter the model needs is not in the file.
    #[error("{path}: missing key {key:?} (expected shape {expected:?})")]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The PyTorch key.
        key: String,
        /// The shape the model needs.
        expected: Vec<usize>,
    },
    /// The file has a tensor that no parameter of the model takes.
    #[error("{path}: unexpected key {key:?} (shape {found:?}): the model has no such parameter")]
    UnexpectedKey {
        /// The file.
        path: PathBuf,
        /// The PyTorch key.
        key: String,
        /// Its shape in the file.
        found: Vec<usize>,
    },
    /// A tensor whose shape differs from the parameter's.
    #[error("{path}: key {key:?} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The file.
        path: PathBuf,
        /// The PyTorch key.
        key: String,
        /// The shape the model needs.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// A tensor that is not f32.
    #[error("{path}: key {key:?} has dtype {found}, expected F32")]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The PyTorch key.
        key: String,
        /// The dtype in the file.
        found: String,
    },
    /// The file's cwm metadata names another family or size.
    #[error("{path}: the file was exported from {field} {found:?}, not {expected:?}")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// `arch` or `size`.
        field: &'static str,
        /// What the caller asked for.
        expected: String,
        /// What the file says.
        found: String,
    },
    /// A parameter's values could not be read from the device.
    #[error("parameter {key:?}: {message}")]
    Data {
        /// The PyTorch key.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// The model cannot be built from the configuration.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// One parameter under its PyTorch name, in PyTorch's layout.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchTensor {
    /// The `state_dict` key.
    pub key: String,
    /// PyTorch's shape.
    pub shape: Vec<usize>,
    /// Values in row-major order of `shape`.
    pub values: Vec<f32>,
}

/// Maps one burn path segment to its PyTorch spelling (see the module docs).
fn torch_segment(segment: &str) -> &str {
    match segment {
        "gamma" => "weight",
        "mlp_in" => "token_mlp.0",
        "mlp_out" => "token_mlp.2",
        "vf_a" => "vf_A",
        "vf_b" => "vf_B",
        "a_log" => "A_log",
        "d" => "D",
        "b_bias" => "B_bias",
        "c_bias" => "C_bias",
        "b_norm" => "B_norm",
        "c_norm" => "C_norm",
        other => other,
    }
}

/// Walks the module tree keeping the current path and the type that owns the current field.
#[derive(Default)]
struct PathTracker {
    /// `(segment, container type)` of every module entered and not yet left, enum variants
    /// included.
    stack: Vec<(String, String)>,
}

/// Where a parameter goes in PyTorch: its key and whether burn stores it transposed.
struct Placement {
    key: String,
    transposed: bool,
}

impl PathTracker {
    fn enter(&mut self, name: &str, container_type: &str) {
        self.stack
            .push((name.to_owned(), container_type.to_owned()));
    }

    fn exit(&mut self) {
        self.stack.pop();
    }

    /// The PyTorch key of the parameter at the current path.
    fn placement(&self) -> Placement {
        let key = self
            .stack
            .iter()
            .filter(|(_, container)| !container.starts_with("Enum:"))
            .map(|(segment, _)| torch_segment(segment))
            .collect::<Vec<_>>()
            .join(".");
        let transposed = matches!(
            self.stack.last(),
            Some((segment, container)) if segment == "weight" && container == "Struct:Linear"
        );
        Placement { key, transposed }
    }
}

/// Transposes a row-major `[rows, cols]` matrix.
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

/// PyTorch's shape of a burn parameter of shape `dims`.
fn torch_shape(dims: &[usize], transposed: bool) -> Vec<usize> {
    if transposed {
        dims.iter().rev().copied().collect()
    } else {
        dims.to_vec()
    }
}

struct Collector {
    path: PathTracker,
    tensors: Vec<TorchTensor>,
    error: Option<InteropError>,
}

impl ModuleVisitor for Collector {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if self.error.is_some() {
            return;
        }
        let Placement { key, transposed } = self.path.placement();
        let dims = param.val().dims();
        let values = match param.val().into_data().try_into_vec_as::<f32>() {
            Ok(values) => values,
            Err(e) => {
                self.error = Some(InteropError::Data {
                    key,
                    message: format!("{e:?}"),
                });
                return;
            }
        };
        let values = if transposed && D == 2 {
            transpose(&values, dims[0], dims[1])
        } else {
            values
        };
        self.tensors.push(TorchTensor {
            shape: torch_shape(&dims, transposed && D == 2),
            key,
            values,
        });
    }
}

/// Every parameter of `model` under its PyTorch key, in PyTorch's layout, in module order.
///
/// # Errors
/// [`InteropError::Data`] when a parameter's values cannot be read back as f32.
pub fn torch_state_dict(model: &Model) -> Result<Vec<TorchTensor>, InteropError> {
    let mut collector = Collector {
        path: PathTracker::default(),
        tensors: Vec::new(),
        error: None,
    };
    model.visit(&mut collector);
    match collector.error {
        Some(error) => Err(error),
        None => Ok(collector.tensors),
    }
}

/// The PyTorch keys and shapes of the model `config` describes, in module order.
///
/// # Errors
/// As [`Model::init`].
pub fn torch_keys(config: &ModelConfig) -> Result<Vec<(String, Vec<usize>)>, InteropError> {
    struct Shapes {
        path: PathTracker,
        keys: Vec<(String, Vec<usize>)>,
    }
    impl ModuleVisitor for Shapes {
        fn enter_module(&mut self, name: &str, container_type: &str) {
            self.path.enter(name, container_type);
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.exit();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let Placement { key, transposed } = self.path.placement();
            let dims = param.lazy_shape().to_vec();
            self.keys
                .push((key, torch_shape(&dims, transposed && D == 2)));
        }
    }
    let model = Model::build(config, &Device::flex(), &rng_lock())?;
    let mut shapes = Shapes {
        path: PathTracker::default(),
        keys: Vec::new(),
    };
    model.visit(&mut shapes);
    Ok(shapes.keys)
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> InteropError + '_ {
    move |source| InteropError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `model` (built from `config`) to `path` as a safetensors file with the reference's
/// PyTorch keys and shapes, all f32. The file is written under a temporary name and renamed,
/// so `path` never holds a partial file.
///
/// # Errors
/// [`InteropError::Io`] when the file cannot be written; [`InteropError::Data`] as
/// [`torch_state_dict`].
pub fn export_safetensors(
    model: &Model,
    config: &ModelConfig,
    path: &Path,
) -> Result<(), InteropError> {
    let tensors = torch_state_dict(model)?;
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|t| {
            let bytes = t.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (t.key, t.shape, bytes)
        })
        .collect();
    let format_error = |message: String| InteropError::Format {
        path: path.to_path_buf(),
        message,
    };
    let views = bytes
        .iter()
        .map(|(key, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|view| (key.clone(), view))
                .map_err(|e| format_error(format!("key {key:?}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let metadata: HashMap<String, String> = [
        ("format".to_owned(), "pt".to_owned()),
        (META_ARCH.to_owned(), config.family.name().to_owned()),
        (META_SIZE.to_owned(), config.size.name().to_owned()),
    ]
    .into_iter()
    .collect();
    let encoded =
        safetensors::serialize(views, Some(metadata)).map_err(|e| format_error(e.to_string()))?;
    cwm_formats::fs::write_atomic(path, &encoded).map_err(io_error(path))
}

/// One tensor read from the file.
struct FileTensor {
    shape: Vec<usize>,
    values: Vec<f32>,
}

struct Loader {
    path: PathBuf,
    tracker: PathTracker,
    file: BTreeMap<String, FileTensor>,
    error: Option<InteropError>,
}

impl ModuleMapper for Loader {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.tracker.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.tracker.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if self.error.is_some() {
            return param;
        }
        let Placement { key, transposed } = self.tracker.placement();
        let transposed = transposed && D == 2;
        let dims = param.lazy_shape().to_vec();
        let expected = torch_shape(&dims, transposed);
        let Some(tensor) = self.file.remove(&key) else {
            self.error = Some(InteropError::MissingKey {
                path: self.path.clone(),
                key,
                expected,
            });
            return param;
        };
        if tensor.shape != expected {
            self.error = Some(InteropError::Shape {
                path: self.path.clone(),
                key,
                expected,
                found: tensor.shape,
            });
            return param;
        }
        let values = if transposed {
            transpose(&tensor.values, expected[0], expected[1])
        } else {
            tensor.values
        };
        let id = param.id;
        let tensor = Tensor::<D>::from_data(TensorData::new(values, dims), &param.lazy_device());
        param.transform_for_load(tensor, id)
    }
}

/// Reads a safetensors file written by [`export_safetensors`] (or by PyTorch with the
/// reference's keys) into a model of `config` on `device`.
///
/// # Errors
/// [`InteropError::Io`] / [`InteropError::Format`] for an unreadable file;
/// [`InteropError::Metadata`] when the file's cwm metadata names another family or size;
/// [`InteropError::Dtype`] for a tensor that is not f32; [`InteropError::MissingKey`],
/// [`InteropError::UnexpectedKey`] and [`InteropError::Shape`] when the keys or shapes differ
/// from the model's; [`InteropError::Model`] when `config` is unusable.
pub fn import_safetensors(
    path: &Path,
    config: &ModelConfig,
    device: &Device,
) -> Result<Model, InteropError> {
    let bytes = fs::read(path).map_err(io_error(path))?;
    let format_error = |message: String| InteropError::Format {
        path: path.to_path_buf(),
        message,
    };
    let (_, metadata) =
        SafeTensors::read_metadata(&bytes).map_err(|e| format_error(e.to_string()))?;
    if let Some(meta) = metadata.metadata() {
        for (field, key, expected) in [
            ("arch", META_ARCH, config.family.name()),
            ("size", META_SIZE, config.size.name()),
        ] {
            if let Some(found) = meta.get(key)
                && found != expected
            {
                return Err(InteropError::Metadata {
                    path: path.to_path_buf(),
                    field,
                    expected: expected.to_owned(),
                    found: found.clone(),
                });
            }
        }
    }
    let file = SafeTensors::deserialize(&bytes).map_err(|e| format_error(e.to_string()))?;
    let mut tensors = BTreeMap::new();
    for (key, view) in file.iter() {
        if view.dtype() != Dtype::F32 {
            return Err(InteropError::Dtype {
                path: path.to_path_buf(),
                key: key.to_owned(),
                found: format!("{:?}", view.dtype()),
            });
        }
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.insert(
            key.to_owned(),
            FileTensor {
                shape: view.shape().to_vec(),
                values,
            },
        );
    }
    // Held until every parameter is replaced: initialisers the load forces draw under it.
    let rng = rng_lock();
    let model = Model::build(config, device, &rng)?;
    let mut loader = Loader {
        path: path.to_path_buf(),
        tracker: PathTracker::default(),
        file: tensors,
        error: None,
    };
    let model = model.map(&mut loader);
    drop(rng);
    if let Some(error) = loader.error {
        return Err(error);
    }
    if let Some((key, tensor)) = loader.file.into_iter().next() {
        return Err(InteropError::UnexpectedKey {
            path: path.to_path_buf(),
            key,
            found: tensor.shape,
        });
    }
    Ok(model)
}

/// Exports the checkpoint directory `dir` ([`crate::checkpoint`]) to the safetensors file
/// `out` (what `cwm model export` does). Returns the checkpoint's configuration and the number
/// of tensors written.
///
/// # Errors
/// [`InteropError::Model`] when the checkpoint cannot be loaded; as [`export_safetensors`].
pub fn export_checkpoint(dir: &Path, out: &Path) -> Result<(ModelConfig, usize), InteropError> {
    let (model, config) = crate::checkpoint::load_model(dir, &Device::flex())?;
    export_safetensors(&model, &config, out)?;
    let tensors = torch_keys(&config)?.len();
    Ok((config, tensors))
}

/// Imports the safetensors file `from` as a model of `config` and writes it as the checkpoint
/// directory `dir` ([`crate::save_model`]; what `cwm model import` does). Returns the number
/// of parameters.
///
/// # Errors
/// As [`import_safetensors`]; [`InteropError::Model`] when the checkpoint cannot be written.
pub fn import_checkpoint(
    from: &Path,
    config: &ModelConfig,
    dir: &Path,
) -> Result<usize, InteropError> {
    let model = import_safetensors(from, config, &Device::flex())?;
    crate::checkpoint::save_model(dir, &model, config)?;
    Ok(model.num_params())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Family, Size};
    use crate::model::StateModel;

    #[test]
    fn segments_and_transpose() {
        assert_eq!(torch_segment("gamma"), "weight");
        assert_eq!(torch_segment("mlp_in"), "token_mlp.0");
        assert_eq!(torch_segment("qkv"), "qkv");
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
        assert_eq!(transpose(&m, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transpose(&transpose(&m, 2, 3), 3, 2), m);
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cwm-interop-{}-{name}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn moves(device: &Device) -> Tensor<2, Int> {
        // START, moves, then PAD in the second row; 70 steps cross a 64-step chunk.
        let mut rows = Vec::new();
        for row in 0..2i64 {
            rows.push(20_480);
            for t in 1..70i64 {
                let id = if row == 1 && t >= 40 {
                    20_481
                } else {
                    (t * 7_919 + row * 104_729) % 20_480
                };
                rows.push(id);
            }
        }
        Tensor::from_data(TensorData::new(rows, [2, 70]), device)
    }

    fn configs() -> Vec<ModelConfig> {
        let mut configs: Vec<_> = Family::ALL
            .into_iter()
            .map(|family| ModelConfig::new(family, Size::D128))
            .collect();
        let mut mimo = ModelConfig::new(Family::Mamba3, Size::D128);
        mimo.mamba3_mimo = true;
        configs.push(mimo);
        configs
    }

    #[test]
    fn export_then_import_gives_identical_logits_for_every_family() {
        let device = Device::flex();
        let dir = scratch("round-trip");
        for config in configs() {
            let model = Model::init(&config, &device).unwrap();
            let path = dir.join(format!(
                "{}-{}.safetensors",
                config.family, config.mamba3_mimo
            ));
            export_safetensors(&model, &config, &path).unwrap();
            let back = import_safetensors(&path, &config, &device).unwrap();
            let a = model.logits(moves(&device)).into_data();
            let b = back.logits(moves(&device)).into_data();
            assert_eq!(a, b, "{} (mimo {})", config.family, config.mamba3_mimo);
            // The file's keys are exactly the documented ones, each once.
            let keys = torch_keys(&config).unwrap();
            let tensors = torch_state_dict(&back).unwrap();
            assert_eq!(keys.len(), tensors.len());
            for ((key, shape), tensor) in keys.iter().zip(&tensors) {
                assert_eq!((key, shape), (&tensor.key, &tensor.shape));
            }
            let distinct: std::collections::BTreeSet<_> = keys.iter().map(|(k, _)| k).collect();
            assert_eq!(
                distinct.len(),
                keys.len(),
                "duplicate key in {}",
                config.family
            );
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Writes `tensors` (key, shape, dtype) as a safetensors file with `metadata`.
    fn write_file(
        path: &Path,
        tensors: &[(String, Vec<usize>, Dtype)],
        metadata: Option<HashMap<String, String>>,
    ) {
        let buffers: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, shape, dtype)| {
                vec![0u8; shape.iter().product::<usize>() * dtype.bitsize() / 8]
            })
            .collect();
        let views: Vec<_> = tensors
            .iter()
            .zip(&buffers)
            .map(|((key, shape, dtype), data)| {
                (
                    key.clone(),
                    TensorView::new(*dtype, shape.clone(), data).unwrap(),
                )
            })
            .collect();
        fs::write(path, safetensors::serialize(views, metadata).unwrap()).unwrap();
    }

    #[test]
    fn import_rejects_missing_extra_misshapen_and_mistyped_keys() {
        let device = Device::flex();
        let dir = scratch("reject");
        let config = ModelConfig::new(Family::SliceDiag, Size::D128);
        let good: Vec<(String, Vec<usize>, Dtype)> = torch_keys(&config)
            .unwrap()
            .into_iter()
            .map(|(k, s)| (k, s, Dtype::F32))
            .collect();
        let path = dir.join("w.safetensors");
        write_file(&path, &good, None);
        assert!(import_safetensors(&path, &config, &device).is_ok());

        let err = |tensors: &[(String, Vec<usize>, Dtype)], meta| {
            write_file(&path, tensors, meta);
            import_safetensors(&path, &config, &device).expect_err("import must fail")
        };
        let without: Vec<_> = good
            .iter()
            .filter(|(k, _, _)| k != "layers.0.slice.vf_A.weight")
            .cloned()
            .collect();
        let e = err(&without, None);
        assert!(
            matches!(e, InteropError::MissingKey { ref key, .. } if key == "layers.0.slice.vf_A.weight"),
            "{e}"
        );
        assert!(e.to_string().contains("layers.0.slice.vf_A.weight"), "{e}");

        let mut extra = good.clone();
        extra.push(("layers.0.attn.qkv.weight".into(), vec![3, 2], Dtype::F32));
        let e = err(&extra, None);
        assert!(
            matches!(e, InteropError::UnexpectedKey { ref key, .. } if key == "layers.0.attn.qkv.weight"),
            "{e}"
        );

        let mut misshapen = good.clone();
        for t in &mut misshapen {
            if t.0 == "output_head.weight" {
                t.1 = vec![128, 1878]; // burn's layout, not PyTorch's
            }
        }
        let e = err(&misshapen, None);
        assert!(
            matches!(e, InteropError::Shape { ref key, .. } if key == "output_head.weight"),
            "{e}"
        );
        assert!(e.to_string().contains("[1878, 128]"), "{e}");

        let mut half = good.clone();
        half[0].2 = Dtype::BF16;
        let e = err(&half, None);
        assert!(matches!(e, InteropError::Dtype { .. }), "{e}");

        let meta = [(META_ARCH.to_owned(), "slice".to_owned())]
            .into_iter()
            .collect();
        let e = err(&good, Some(meta));
        assert!(
            matches!(e, InteropError::Metadata { field: "arch", .. }),
            "{e}"
        );

        fs::write(&path, b"not a safetensors file").unwrap();
        let e = import_safetensors(&path, &config, &device).unwrap_err();
        assert!(matches!(e, InteropError::Format { .. }), "{e}");
        let e = import_safetensors(&dir.join("absent"), &config, &device)
            .err()
            .unwrap();
        assert!(matches!(e, InteropError::Io { .. }), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn transformer_keys_follow_the_spec() {
        let keys = torch_keys(&ModelConfig::new(Family::Transformer, Size::D128)).unwrap();
        let map: BTreeMap<_, _> = keys.into_iter().collect();
        let expect = [
            ("tok_emb.weight", vec![20482, 128]),
            ("blocks.0.norm1.weight", vec![128]),
            ("blocks.0.attn.qkv.weight", vec![384, 128]),
            ("blocks.0.attn.qkv.bias", vec![384]),
            ("blocks.0.attn.out_proj.weight", vec![128, 128]),
            ("blocks.0.attn.out_proj.bias", vec![128]),
            ("blocks.0.norm2.weight", vec![128]),
            ("blocks.0.mlp.in_proj.weight", vec![1024, 128]),
            ("blocks.0.mlp.in_proj.bias", vec![1024]),
            ("blocks.0.mlp.out_proj.weight", vec![128, 512]),
            ("blocks.0.mlp.out_proj.bias", vec![128]),
            ("final_norm.weight", vec![128]),
            ("output_head.weight", vec![1878, 128]),
            ("output_head.bias", vec![1878]),
        ];
        let expect: BTreeMap<_, _> = expect.into_iter().map(|(k, s)| (k.to_owned(), s)).collect();
        assert_eq!(map, expect);
    }
}
