//! The model interface every family implements, and [`Model`], the one type callers hold.
//!
//! # How a family plugs in
//! 1. Write the family in its own file (`src/<family>.rs`): a top-level `#[derive(Module)]`
//!    struct that owns its input embedding ([`crate::input_embedding`]), its body, its final
//!    norm if it has one, and its output head ([`crate::output_head`]), with the field names
//!    of the reference's state_dict where possible (they drive the safetensors export).
//! 2. Give it `fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError>` and
//!    implement [`StateModel`] (`logits`: moves `[batch, seq]` → `[batch, seq, 1878]`).
//!    Apply dropout exactly where spec D.3 says, through `burn::nn::Dropout`, which is active
//!    only on an autodiff device in training mode ([`burn::module::Module::valid`] turns it off).
//! 3. Add a variant to [`Model`] and one arm in each `match` below (`init`, `logits`).
//! 4. Add the family to [`IMPLEMENTED`]: the parameter-count test in `tests/params.rs` then
//!    checks its four sizes against spec C.3, and the shape tests in `tests/models.rs` cover it.

use burn::prelude::*;

use crate::config::{Family, ModelConfig, Size};
use crate::error::ModelError;
use crate::gdn::GatedDeltaNet;
use crate::head::{HeadLogits, split_head};
use crate::mamba::Mamba;
use crate::slice::Slice;
use crate::transformer::Transformer;

/// What every family's top-level model provides.
pub trait StateModel {
    /// Logits of all 75 labels at every step.
    ///
    /// # Shapes
    /// - `moves`: `[batch, seq]` move ids in `0..20482` (`START` first, `PAD` after the end)
    /// - output: `[batch, seq, 1878]`
    fn logits(&self, moves: Tensor<2, Int>) -> Tensor<3>;
}

/// Families this build implements; the others make [`Model::init`] return
/// [`ModelError::NotImplemented`].
pub const IMPLEMENTED: &[Family] = &[
    Family::Transformer,
    Family::Slice,
    Family::SliceDiag,
    Family::Gdn,
    Family::GdnPos,
    Family::Mamba3,
    Family::Mamba2,
];

/// A model of any family.
#[derive(Module, Debug)]
pub enum Model {
    /// `transformer`.
    Transformer(Transformer),
    /// `slice` and `slice_diag` (they differ only in the block size).
    Slice(Slice),
    /// `gdn` and `gdn_pos` (they differ only in whether β is doubled).
    Gdn(GatedDeltaNet),
    /// `mamba3` and `mamba2` (they differ in the mixer).
    Mamba(Mamba),
}

impl Model {
    /// Builds a freshly initialised model (reference inits, spec B.*) on `device`.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for unusable options; [`ModelError::NotImplemented`] for a
    /// family not in [`IMPLEMENTED`].
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        config.validate()?;
        match config.family {
            Family::Transformer => Ok(Model::Transformer(Transformer::init(config, device)?)),
            Family::Slice | Family::SliceDiag => Ok(Model::Slice(Slice::init(config, device)?)),
            Family::Gdn | Family::GdnPos => Ok(Model::Gdn(GatedDeltaNet::init(config, device)?)),
            Family::Mamba3 | Family::Mamba2 => Ok(Model::Mamba(Mamba::init(config, device)?)),
        }
    }

    /// The head's output cut into the label groups.
    ///
    /// # Shapes
    /// - `moves`: `[batch, seq]`
    /// - output: see [`HeadLogits`]
    ///
    /// # Errors
    /// Never for a model built by [`Model::init`]; the `Result` comes from [`split_head`].
    pub fn forward(&self, moves: Tensor<2, Int>) -> Result<HeadLogits, ModelError> {
        split_head(self.logits(moves))
    }
}

impl StateModel for Model {
    fn logits(&self, moves: Tensor<2, Int>) -> Tensor<3> {
        match self {
            Model::Transformer(model) => model.logits(moves),
            Model::Slice(model) => model.logits(moves),
            Model::Gdn(model) => model.logits(moves),
            Model::Mamba(model) => model.logits(moves),
        }
    }
}

/// Number of parameters of `family` at `size` in the reference configuration, counted by
/// instantiating the model and summing its parameters' element counts. Parameters are
/// initialised lazily, so even d512 costs no memory for the weights.
///
/// # Errors
/// As [`Model::init`].
pub fn params(family: Family, size: Size) -> Result<usize, ModelError> {
    params_of(&ModelConfig::new(family, size))
}

/// Number of parameters of the model `config` describes (see [`params`]).
///
/// # Errors
/// As [`Model::init`].
pub fn params_of(config: &ModelConfig) -> Result<usize, ModelError> {
    let model = Model::init(config, &Device::flex())?;
    Ok(model.num_params())
}
