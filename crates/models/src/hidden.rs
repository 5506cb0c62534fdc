//! Hidden states by layer, and the forward pass with an edit at one layer (beyond-the-paper
//! P4, for the probes, the path-independence test and state editing).
//!
//! # Layers
//! Every family numbers the hidden states of one forward pass the same way, each a
//! `[batch, seq, d]` tensor:
//!
//! | ℓ | what | Transformer | SLiCE | Gated DeltaNet | Mamba |
//! |---|---|---|---|---|---|
//! | 0 | the embedding output, the first block's input | token embedding (after dropout) | token embedding (after dropout) | token embedding | token embedding (after dropout) |
//! | 1..=L | the residual stream after block ℓ | | | | |
//! | L + 1 | the head input | after the final norm | equal to ℓ = L (no final norm) | after the final norm | after the final norm |
//!
//! L is the block count ([`StateModel::blocks`]). The Transformer's positions enter inside
//! its blocks (RoPE), so its ℓ = 0 holds the tokens alone.
//!
//! # One code path
//! Each family runs its forward pass once, in `features_tapped`, handing every layer's tensor
//! to a [`Tap`] and going on with what the tap gives back. The plain forward pass
//! ([`StateModel::features`]) is that pass with [`Tap::None`], which hands each tensor straight
//! back, so the recorded and edited passes cannot drift from it and it copies nothing.
//!
//! An edit adds a tensor at one layer; being `[batch, seq, d]`, it may touch any positions of
//! any rows (zero elsewhere). Positions before an edited one never change, since every family
//! is causal; in the recurrent families an edit at step t reaches later steps through the
//! blocks after it.

use burn::prelude::*;

use crate::error::ModelError;
use crate::model::StateModel;

/// What a forward pass does with the hidden state at each layer.
#[derive(Debug)]
pub enum Tap<'a> {
    /// Nothing: the plain forward pass.
    None,
    /// Keeps a copy of every layer's tensor, ℓ = 0 first.
    Record(&'a mut Vec<Tensor<3>>),
    /// Adds `delta` to the hidden state at `layer` (once; `None` after it was added).
    Edit {
        /// The layer ℓ.
        layer: usize,
        /// What to add, `[batch, seq, d]` (boxed: a tensor is large beside the other
        /// variants).
        delta: Option<Box<Tensor<3>>>,
    },
}

impl Tap<'_> {
    /// The hidden state at `layer` after the tap: `x` itself, or `x` plus the edit.
    pub fn at(&mut self, layer: usize, x: Tensor<3>) -> Tensor<3> {
        match self {
            Tap::None => x,
            Tap::Record(layers) => {
                layers.push(x.clone());
                x
            }
            Tap::Edit {
                layer: edited,
                delta,
            } if *edited == layer => match delta.take() {
                Some(delta) => x + *delta,
                None => x,
            },
            Tap::Edit { .. } => x,
        }
    }
}

/// The hidden states of a forward pass, ℓ = 0..=L + 1 (see the module docs).
///
/// # Shapes
/// - `moves`: `[batch, seq]`
/// - output: L + 2 tensors of `[batch, seq, d]`
pub fn features_by_layer<M: StateModel + ?Sized>(
    model: &M,
    moves: Tensor<2, Int>,
) -> Vec<Tensor<3>> {
    let mut layers = Vec::with_capacity(model.blocks() + 2);
    model.features_tapped(moves, &mut Tap::Record(&mut layers));
    layers
}

/// The head input of a forward pass with `delta` added to the hidden state at `layer`.
///
/// # Shapes
/// - `moves`: `[batch, seq]`; `delta`: `[batch, seq, d]`
/// - output: `[batch, seq, d]`
///
/// # Errors
/// [`ModelError::InvalidConfig`] (field `layer`) for a layer above L + 1;
/// [`ModelError::Shape`] when `delta` is not `[batch, seq, d]`.
pub fn features_with_edit<M: StateModel + ?Sized>(
    model: &M,
    moves: Tensor<2, Int>,
    layer: usize,
    delta: Tensor<3>,
) -> Result<Tensor<3>, ModelError> {
    let top = model.blocks() + 1;
    if layer > top {
        return Err(ModelError::InvalidConfig {
            field: "layer",
            reason: format!("layer {layer} is past the head input (layer {top})"),
        });
    }
    let [batch, seq] = moves.dims();
    let [d, _] = model.head().weight.dims();
    if delta.dims() != [batch, seq, d] {
        return Err(ModelError::Shape(format!(
            "an edit of shape {:?} for a hidden state of shape {:?}",
            delta.dims(),
            [batch, seq, d]
        )));
    }
    let mut tap = Tap::Edit {
        layer,
        delta: Some(Box::new(delta)),
    };
    Ok(model.features_tapped(moves, &mut tap))
}

/// The logits of a forward pass with `delta` added at `layer` ([`features_with_edit`] and the
/// head).
///
/// # Shapes
/// - `moves`: `[batch, seq]`; `delta`: `[batch, seq, d]`
/// - output: `[batch, seq, 1878]`
///
/// # Errors
/// As [`features_with_edit`].
pub fn logits_with_edit<M: StateModel + ?Sized>(
    model: &M,
    moves: Tensor<2, Int>,
    layer: usize,
    delta: Tensor<3>,
) -> Result<Tensor<3>, ModelError> {
    let features = features_with_edit(model, moves, layer, delta)?;
    Ok(crate::mixed::project(model.head(), features))
}

/// The name of layer `layer` of a model with `blocks` blocks: `embedding`, `block N` or
/// `head input`.
pub fn layer_name(layer: usize, blocks: usize) -> String {
    match layer {
        0 => "embedding".to_owned(),
        l if l <= blocks => format!("block {l}"),
        _ => "head input".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_named_from_the_embedding_to_the_head_input() {
        let names: Vec<String> = (0..4).map(|l| layer_name(l, 2)).collect();
        assert_eq!(names, ["embedding", "block 1", "block 2", "head input"]);
    }

    #[test]
    fn an_edit_is_added_once_at_its_layer() {
        let device = Device::flex();
        let x = Tensor::<3>::ones([1, 2, 3], &device);
        let mut tap = Tap::Edit {
            layer: 1,
            delta: Some(Box::new(Tensor::<3>::ones([1, 2, 3], &device))),
        };
        let sum = |t: Tensor<3>| t.sum().into_data().try_to_vec::<f32>().unwrap()[0];
        assert_eq!(sum(tap.at(0, x.clone())), 6.0, "not at layer 0");
        assert_eq!(sum(tap.at(1, x.clone())), 12.0, "added at layer 1");
        assert_eq!(sum(tap.at(1, x)), 6.0, "only once");
    }
}
