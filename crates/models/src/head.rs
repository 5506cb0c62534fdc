//! The interface every family shares (spec A.1, A.3): the input embedding, the output head and
//! the split of the head's 1,878 logits into the 75 labels' groups (declared in
//! [`cwm_formats::labels`]).

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig};
use burn::prelude::*;
pub use cwm_formats::labels::{HEAD_OUT, LABEL_GROUPS, LabelGroup, N_LABELS};

/// Size of the input vocabulary: 20,480 packed moves, then `START` and `PAD`.
pub const MOVE_VOCAB: usize = 20_482;
/// The start token, first in every sequence.
pub const START_TOKEN: i64 = 20_480;
/// The padding token, after the end of a sequence.
pub const PAD_TOKEN: i64 = 20_481;

/// Number of classes of each of the 75 labels, in target order
/// ([`cwm_formats::labels::LABEL_CLASSES`]).
pub fn label_classes() -> [usize; N_LABELS] {
    cwm_formats::labels::LABEL_CLASSES.map(usize::from)
}

/// The head's output cut into the label groups (spec A.3).
#[derive(Debug, Clone)]
pub struct HeadLogits {
    /// Piece on each square, state order a8..h1. `[batch, seq, 64, 13]`
    pub pieces: Tensor<4>,
    /// Side to move. `[batch, seq, 2]`
    pub side: Tensor<3>,
    /// Castling rights K, Q, k, q. `[batch, seq, 4, 2]`
    pub castle: Tensor<4>,
    /// En-passant file (0 none, 1..8 = a..h). `[batch, seq, 9]`
    pub ep_file: Tensor<3>,
    /// En-passant rank (0 none, 1 rank 3, 2 rank 6). `[batch, seq, 3]`
    pub ep_rank: Tensor<3>,
    /// Halfmove clock, high byte then low byte. `[batch, seq, 2, 256]`
    pub halfmove: Tensor<4>,
    /// Fullmove number, high byte then low byte. `[batch, seq, 2, 256]`
    pub fullmove: Tensor<4>,
}

/// Cuts the head's output into the label groups.
///
/// # Shapes
/// - `logits`: `[batch, seq, 1878]`
/// - output: see the fields of [`HeadLogits`].
///
/// # Errors
/// [`crate::ModelError::Shape`] when the last dimension is not 1,878.
pub fn split_head(logits: Tensor<3>) -> Result<HeadLogits, crate::ModelError> {
    let [batch, seq, width] = logits.dims();
    if width != HEAD_OUT {
        return Err(crate::ModelError::Shape(format!(
            "head output has width {width}, expected {HEAD_OUT}"
        )));
    }
    let group4 = |g: &LabelGroup| -> Tensor<4> {
        logits
            .clone()
            .narrow(2, g.logit_offset, g.n_logits())
            .reshape([batch, seq, g.n_labels, g.n_classes])
    };
    let group3 =
        |g: &LabelGroup| -> Tensor<3> { logits.clone().narrow(2, g.logit_offset, g.n_logits()) };
    let [pieces, side, castle, ep_file, ep_rank, halfmove, fullmove] = &LABEL_GROUPS;
    Ok(HeadLogits {
        pieces: group4(pieces),
        side: group3(side),
        castle: group4(castle),
        ep_file: group3(ep_file),
        ep_rank: group3(ep_rank),
        halfmove: group4(halfmove),
        fullmove: group4(fullmove),
    })
}

/// The runs of labels with one class count that sit side by side in the head, each as a
/// [`LabelGroup`] (halfmove and fullmove form one group of 4 labels of 256 classes): the
/// views the loss and metrics take of the head's output.
pub(crate) fn class_view_specs() -> Vec<LabelGroup> {
    let mut views: Vec<LabelGroup> = Vec::new();
    for g in LABEL_GROUPS {
        match views.last_mut() {
            Some(last)
                if last.n_classes == g.n_classes
                    && last.logit_offset + last.n_logits() == g.logit_offset =>
            {
                last.n_labels += g.n_labels;
            }
            _ => views.push(g),
        }
    }
    views
}

/// The head's output as per-class views for the loss and metrics: each entry is
/// `(first_label, logits [batch, seq, n_labels, n_classes])`, one per [`class_view_specs`].
/// The views tile the head's columns from the first, so they are cut by
/// [`crate::split::split`], whose backward pass puts their gradients together once (a slice's
/// would build a `[batch, seq, 1878]` zero tensor per view).
pub(crate) fn class_views(logits: Tensor<3>) -> Vec<(usize, Tensor<4>)> {
    let [batch, seq, _] = logits.dims();
    let specs = class_view_specs();
    let widths: Vec<usize> = specs.iter().map(LabelGroup::n_logits).collect();
    specs
        .into_iter()
        .zip(crate::split::split(logits, 2, &widths))
        .map(|(g, view)| {
            let view = view.reshape([batch, seq, g.n_labels, g.n_classes]);
            (g.first_label, view)
        })
        .collect()
}

/// How a family initialises its input embedding (spec F.16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EmbeddingInit {
    /// N(0, 1), PyTorch's default (Transformer, SLiCE).
    TorchDefault,
    /// N(0, std²) (GDN and Mamba use std 0.02).
    Normal {
        /// Standard deviation.
        std: f64,
    },
}

/// How a family initialises its output head (spec F.16).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeadInit {
    /// PyTorch's default Linear init, weight and bias U(−1/√d, 1/√d) (Transformer, SLiCE).
    TorchDefault,
    /// Default weight, zero bias (Mamba).
    TorchDefaultZeroBias,
    /// Weight N(0, std²), zero bias (GDN uses std 0.02).
    NormalZeroBias {
        /// Standard deviation of the weight.
        std: f64,
    },
}

/// The input embedding `Embedding(20482, d)`.
pub fn input_embedding(d_model: usize, init: EmbeddingInit, device: &Device) -> Embedding {
    let initializer = match init {
        EmbeddingInit::TorchDefault => Initializer::Normal {
            mean: 0.0,
            std: 1.0,
        },
        EmbeddingInit::Normal { std } => Initializer::Normal { mean: 0.0, std },
    };
    EmbeddingConfig::new(MOVE_VOCAB, d_model)
        .with_initializer(initializer)
        .init(device)
}

/// The output head `Linear(d → 1878)` with bias.
pub fn output_head(d_model: usize, init: HeadInit, device: &Device) -> Linear {
    let config = LinearConfig::new(d_model, HEAD_OUT);
    match init {
        HeadInit::TorchDefault => config.init(device),
        HeadInit::TorchDefaultZeroBias => {
            let mut head = config.init(device);
            head.bias = Some(Param::from_tensor(Tensor::zeros([HEAD_OUT], device)));
            head
        }
        HeadInit::NormalZeroBias { std } => {
            let mut head = config
                .with_initializer(Initializer::Normal { mean: 0.0, std })
                .init(device);
            head.bias = Some(Param::from_tensor(Tensor::zeros([HEAD_OUT], device)));
            head
        }
    }
}

/// PyTorch's default `Linear(d_input → d_output)`: weight and bias U(−1/√d_input, 1/√d_input).
/// burn's default initializer is exactly this; the function names the intent.
pub fn torch_linear(d_input: usize, d_output: usize, bias: bool, device: &Device) -> Linear {
    LinearConfig::new(d_input, d_output)
        .with_bias(bias)
        .init(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_tile_the_head_and_the_labels() {
        let mut logit = 0;
        let mut label = 0;
        for g in LABEL_GROUPS {
            assert_eq!(g.logit_offset, logit, "{}", g.name);
            assert_eq!(g.first_label, label, "{}", g.name);
            logit += g.n_logits();
            label += g.n_labels;
        }
        assert_eq!((logit, label), (HEAD_OUT, N_LABELS));
        assert_eq!(label_classes().iter().sum::<usize>(), HEAD_OUT);
        // The loss cuts the head's columns by the views' widths from the first column.
        let views = class_view_specs();
        let mut logit = 0;
        for view in &views {
            assert_eq!(view.logit_offset, logit, "{}", view.name);
            logit += view.n_logits();
        }
        assert_eq!((views.len(), logit), (5, HEAD_OUT));
    }
}
