//! The model interface every family implements, and [`Model`], the one type callers hold.
//!
//! # How a family plugs in
//! 1. Write the family in its own file (`src/<family>.rs`): a top-level `#[derive(Module)]`
//!    struct that owns its input embedding ([`crate::input_embedding`]), its body, its final
//!    norm if it has one, and its output head ([`crate::output_head`]), with the field names
//!    of the reference's state_dict where possible (they drive the safetensors export).
//! 2. Give it `fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError>` and
//!    implement [`StateModel`] (`features_tapped`: moves `[batch, seq]` → `[batch, seq, d]`,
//!    the input of the head, handing each layer's hidden state to the tap as
//!    [`crate::hidden`] numbers them; `blocks`; `head`: the output head). Apply dropout exactly where spec D.3 says,
//!    with a `burn::nn::Dropout` field passed to [`crate::dropout::dropout`], which is active
//!    only on an autodiff device in training mode ([`burn::module::Module::valid`] turns it
//!    off).
//! 3. Add a variant to [`Model`] and one arm in each `match` below (`init`,
//!    `features_tapped`, `blocks`, `head`).
//! 4. Add it to [`Family::ALL`](crate::Family::ALL): the parameter-count test in
//!    `tests/params.rs` then checks its four sizes against spec C.3, and the shape tests in
//!    `tests/models.rs` cover it.

use burn::module::{ModuleVisitor, Param};
use burn::nn::Linear;
use burn::prelude::*;

use crate::config::{Family, ModelConfig, Precision, Size};
use crate::error::ModelError;
use crate::gdn::GatedDeltaNet;
use crate::head::{HeadLogits, split_head};
use crate::hidden::Tap;
use crate::loss::LossKernel;
use crate::mamba::Mamba;
use crate::rng::{RngGuard, rng_lock};
use crate::slice::Slice;
use crate::transformer::Transformer;

/// What every family's top-level model provides: a body that turns moves into features, and
/// the shared output head on top of it.
pub trait StateModel {
    /// The body's output at every step, the input of the output head (after the final norm,
    /// for the families that have one): [`StateModel::features_tapped`] with nothing tapped.
    ///
    /// # Shapes
    /// - `moves`: `[batch, seq]` move ids in `0..20482` (`START` first, `PAD` after the end)
    /// - output: `[batch, seq, d]`
    fn features(&self, moves: Tensor<2, Int>) -> Tensor<3> {
        self.features_tapped(moves, &mut Tap::None)
    }

    /// The forward pass of the body, handing the hidden state at every layer (numbered as in
    /// [`crate::hidden`]) to `tap` and going on with what it gives back; returns the head
    /// input. The one forward pass of a family: [`StateModel::features`],
    /// [`crate::features_by_layer`] and [`crate::features_with_edit`] all run it.
    ///
    /// # Shapes
    /// - `moves`: `[batch, seq]`
    /// - output: `[batch, seq, d]`
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3>;

    /// The number of blocks L.
    fn blocks(&self) -> usize;

    /// The output head, `Linear(d → 1878)`.
    fn head(&self) -> &Linear;

    /// The arithmetic of the matrix products, the head's included ([`Precision::F32`] unless
    /// the family implements another).
    fn precision(&self) -> Precision {
        Precision::F32
    }

    /// Logits of all 75 labels at every step: the head applied to [`StateModel::features`].
    ///
    /// # Shapes
    /// - `moves`: `[batch, seq]` move ids in `0..20482` (`START` first, `PAD` after the end)
    /// - output: `[batch, seq, 1878]`
    fn logits(&self, moves: Tensor<2, Int>) -> Tensor<3> {
        crate::mixed::linear(self.precision(), self.head(), self.features(moves))
    }

    /// The reference's state loss (spec A.4) of a batch, as [`crate::state_loss`] computes it
    /// from [`StateModel::logits`], but with the head applied group by group
    /// ([`crate::state_loss_from_features`]): the training path, whose backward pass never
    /// materialises gradients of the full `[batch, seq, 1878]` logits once per label group.
    /// In [`Precision::Bf16`], [`crate::state_loss_in`] with the head's products in bf16 and
    /// the reference's bf16 denominator.
    ///
    /// # Errors
    /// [`ModelError::Shape`] when the shapes do not fit together.
    fn state_loss(
        &self,
        moves: Tensor<2, Int>,
        targets: Tensor<3, Int>,
        valid: Tensor<2, Bool>,
    ) -> Result<crate::StateLoss, ModelError> {
        self.state_loss_with(LossKernel::Auto, moves, targets, valid)
    }

    /// [`StateModel::state_loss`] computed by `kernel` (`cwm model bench --loss` compares
    /// them).
    ///
    /// # Errors
    /// As [`StateModel::state_loss`]; [`ModelError::InvalidConfig`] for a fused kernel in
    /// bf16.
    fn state_loss_with(
        &self,
        kernel: LossKernel,
        moves: Tensor<2, Int>,
        targets: Tensor<3, Int>,
        valid: Tensor<2, Bool>,
    ) -> Result<crate::StateLoss, ModelError> {
        self.head_loss(kernel, self.features(moves), targets, valid)
    }

    /// The second half of [`StateModel::state_loss_with`]: the head on `features` (what
    /// [`StateModel::features`] returned) and the loss, in the model's precision; a caller
    /// that times the two halves apart (`cwm model bench`'s steps by phases) calls both.
    ///
    /// # Errors
    /// As [`StateModel::state_loss_with`].
    fn head_loss(
        &self,
        kernel: LossKernel,
        features: Tensor<3>,
        targets: Tensor<3, Int>,
        valid: Tensor<2, Bool>,
    ) -> Result<crate::StateLoss, ModelError> {
        crate::state_loss_in(
            self.precision(),
            kernel,
            features,
            self.head(),
            targets,
            valid,
        )
    }
}

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
    /// Builds a freshly initialised model (reference inits, spec B.*) on `device`, every
    /// parameter drawn at once under [`rng_lock`] from wherever the backend's generator stands.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] for unusable options.
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        let rng = rng_lock();
        let model = Model::build(config, device, &rng)?;
        model.draw_lazy_parameters();
        Ok(model)
    }

    /// [`Model::init`] with the backend's generator seeded with `seed` first, under the same
    /// hold of [`rng_lock`]: the same `seed` gives the same weights, whatever other threads
    /// draw.
    ///
    /// # Errors
    /// As [`Model::init`].
    pub fn init_seeded(
        config: &ModelConfig,
        device: &Device,
        seed: u64,
    ) -> Result<Self, ModelError> {
        let rng = rng_lock();
        device.seed(seed);
        let model = Model::build(config, device, &rng)?;
        model.draw_lazy_parameters();
        Ok(model)
    }

    /// The model's structure with its parameters' initialisers, which burn runs lazily (at a
    /// parameter's first use) except the few drawn in the families' `init`. The guard is the
    /// caller's proof that those draws, and any lazy one it forces while still holding it,
    /// are its own.
    pub(crate) fn build(
        config: &ModelConfig,
        device: &Device,
        _rng: &RngGuard,
    ) -> Result<Self, ModelError> {
        config.validate()?;
        match config.family {
            Family::Transformer => Ok(Model::Transformer(Transformer::init(config, device)?)),
            Family::Slice | Family::SliceDiag => Ok(Model::Slice(Slice::init(config, device)?)),
            Family::Gdn | Family::GdnPos => Ok(Model::Gdn(GatedDeltaNet::init(config, device)?)),
            Family::Mamba3 | Family::Mamba2 => Ok(Model::Mamba(Mamba::init(config, device)?)),
        }
    }

    /// Forces every lazily initialised parameter to take its value now.
    fn draw_lazy_parameters(&self) {
        struct Touch;
        impl ModuleVisitor for Touch {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let _ = param.val();
            }
        }
        self.visit(&mut Touch);
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

    /// The same model computing in `precision`, its parameters untouched.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when the family does not implement `precision` (only the
    /// Mamba families have [`Precision::Bf16`]).
    pub fn with_precision(self, precision: Precision) -> Result<Self, ModelError> {
        match (self, precision) {
            (Model::Mamba(model), _) => Ok(Model::Mamba(model.with_precision(precision))),
            (model, Precision::F32) => Ok(model),
            (model, _) => Err(ModelError::InvalidConfig {
                field: "precision",
                reason: format!(
                    "{precision} is implemented for mamba3 and mamba2, not the {} family",
                    model.family_name()
                ),
            }),
        }
    }

    fn family_name(&self) -> &'static str {
        match self {
            Model::Transformer(_) => "transformer",
            Model::Slice(_) => "slice",
            Model::Gdn(_) => "gated deltanet",
            Model::Mamba(_) => "mamba",
        }
    }
}

impl StateModel for Model {
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3> {
        match self {
            Model::Transformer(model) => model.features_tapped(moves, tap),
            Model::Slice(model) => model.features_tapped(moves, tap),
            Model::Gdn(model) => model.features_tapped(moves, tap),
            Model::Mamba(model) => model.features_tapped(moves, tap),
        }
    }

    fn blocks(&self) -> usize {
        match self {
            Model::Transformer(model) => model.blocks(),
            Model::Slice(model) => model.blocks(),
            Model::Gdn(model) => model.blocks(),
            Model::Mamba(model) => model.blocks(),
        }
    }

    fn head(&self) -> &Linear {
        match self {
            Model::Transformer(model) => model.head(),
            Model::Slice(model) => model.head(),
            Model::Gdn(model) => model.head(),
            Model::Mamba(model) => model.head(),
        }
    }

    fn precision(&self) -> Precision {
        match self {
            Model::Mamba(model) => model.precision(),
            _ => Precision::F32,
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
    let model = Model::build(config, &Device::flex(), &rng_lock())?;
    Ok(model.num_params())
}
