//! `transformer` (spec B.1): pre-norm decoder with RMSNorm (eps 1e-6), biased projections,
//! rotary position embeddings (the reference's variant by default) and a SwiGLU MLP.
//!
//! Dropout (spec D.3): on the embedding, on the attention probabilities, and on both residual
//! branches. All weights use PyTorch's default inits.

use burn::nn::{Dropout, DropoutConfig, Embedding, Linear, RmsNorm, RmsNormConfig};
use burn::prelude::*;
use burn::tensor::activation::silu;

use crate::attention::{
    AttentionDropout, causal_attention, causal_attention_train, merge_heads, split_heads,
};
use crate::attention_kernel::{SeededDropout, causal_attention_kernels};
use crate::config::{ModelConfig, Precision, Rope, TrainingAttention};
use crate::dropout::{dropout, dropout_mask, dropout_seed, kept_scale};
use crate::embedding_grad::embed;
use crate::error::ModelError;
use crate::glu::{GateHalf, swiglu};
use crate::head::{EmbeddingInit, HeadInit, input_embedding, output_head, torch_linear};
use crate::hidden::Tap;
use crate::mixed;
use crate::model::StateModel;
use crate::rms_norm::rms_norm;
use crate::rope::{RopeTables, rope_tables};

/// Epsilon of every RMSNorm in the Transformer.
pub const NORM_EPS: f64 = 1e-6;

/// The Transformer family (checkpoint keys in the field docs).
#[derive(Module, Debug)]
pub struct Transformer {
    /// `tok_emb`: Embedding(20482, d), N(0, 1).
    pub tok_emb: Embedding,
    /// `blocks.{i}`.
    pub blocks: Vec<Block>,
    /// `final_norm`.
    pub final_norm: RmsNorm,
    /// `output_head`: Linear(d → 1878).
    pub output_head: Linear,
    /// Dropout on the embedding.
    pub dropout: Dropout,
    /// Which RoPE tables to use.
    #[module(skip)]
    pub rope: Rope,
}

/// One pre-norm decoder block.
#[derive(Module, Debug)]
pub struct Block {
    /// `norm1`.
    pub norm1: RmsNorm,
    /// `attn`.
    pub attn: Attention,
    /// `norm2`.
    pub norm2: RmsNorm,
    /// `mlp`.
    pub mlp: SwiGlu,
    /// Dropout on both residual branches.
    pub dropout: Dropout,
}

/// Causal multi-head self-attention.
#[derive(Module, Debug)]
pub struct Attention {
    /// `qkv`: Linear(d → 3d) with bias; q, k, v in that order.
    pub qkv: Linear,
    /// `out_proj`: Linear(d → d) with bias.
    pub out_proj: Linear,
    /// Dropout on the attention probabilities.
    pub attn_dropout: Dropout,
    /// Number of heads.
    pub n_heads: usize,
    /// How training runs it on cubecl's devices.
    #[module(skip)]
    pub training: TrainingAttention,
}

/// SwiGLU MLP: `out_proj(SiLU(gate) ⊙ value)` with `[gate, value] = in_proj(x)`.
#[derive(Module, Debug)]
pub struct SwiGlu {
    /// `in_proj`: Linear(d → 8d) with bias; the first 4d outputs are the gate.
    pub in_proj: Linear,
    /// `out_proj`: Linear(4d → d) with bias.
    pub out_proj: Linear,
}

impl Transformer {
    /// A freshly initialised Transformer for `config`.
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when the heads do not divide `d` into an even head size.
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        let d = config.d_model();
        let n_heads = config.n_heads();
        if !d.is_multiple_of(n_heads) || !(d / n_heads).is_multiple_of(2) {
            return Err(ModelError::InvalidConfig {
                field: "size",
                reason: format!("{n_heads} heads do not split d = {d} into even head sizes"),
            });
        }
        let dropout = || DropoutConfig::new(config.dropout).init();
        let norm = || RmsNormConfig::new(d).with_epsilon(NORM_EPS).init(device);
        let blocks = (0..config.n_layers())
            .map(|_| Block {
                norm1: norm(),
                attn: Attention {
                    qkv: torch_linear(d, 3 * d, true, device),
                    out_proj: torch_linear(d, d, true, device),
                    attn_dropout: dropout(),
                    n_heads,
                    training: config.attention,
                },
                norm2: norm(),
                mlp: SwiGlu {
                    in_proj: torch_linear(d, 8 * d, true, device),
                    out_proj: torch_linear(4 * d, d, true, device),
                },
                dropout: dropout(),
            })
            .collect();
        Ok(Self {
            tok_emb: input_embedding(d, EmbeddingInit::TorchDefault, device),
            blocks,
            final_norm: norm(),
            output_head: output_head(d, HeadInit::TorchDefault, device),
            dropout: dropout(),
            rope: config.rope,
        })
    }
}

impl StateModel for Transformer {
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3> {
        let [_, seq] = moves.dims();
        let device = moves.device();
        let x = dropout(&self.dropout, embed(&self.tok_emb, moves)); // [batch, seq, d]
        let mut x = tap.at(0, x);
        let head_dim = self.blocks.first().map_or(2, |b| {
            let [_, d] = b.attn.out_proj.weight.dims();
            d / b.attn.n_heads
        });
        let rope = rope_tables(self.rope, seq, head_dim, &device);
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device); // true above diagonal
        for (i, block) in self.blocks.iter().enumerate() {
            x = tap.at(i + 1, block.forward(x, &rope, &causal));
        }
        tap.at(self.blocks.len() + 1, rms_norm(&self.final_norm, x))
    }

    fn blocks(&self) -> usize {
        self.blocks.len()
    }

    fn head(&self) -> &Linear {
        &self.output_head
    }
}

impl Block {
    /// One block.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]`; the tables for `seq`; `causal`: `[seq, seq]`, true
    ///   where attention is forbidden
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables, causal: &Tensor<2, Bool>) -> Tensor<3> {
        let attended = self
            .attn
            .forward(rms_norm(&self.norm1, x.clone()), rope, causal);
        let x = x + dropout(&self.dropout, attended);
        let mixed = self.mlp.forward(rms_norm(&self.norm2, x.clone()));
        x + dropout(&self.dropout, mixed)
    }
}

impl Attention {
    /// Causal self-attention with RoPE on q and k.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]`; the tables for `seq`; `causal`: `[seq, seq]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>, rope: &RopeTables, causal: &Tensor<2, Bool>) -> Tensor<3> {
        // `qkv` is one [d, 3d] weight (the reference's layout): q, k and v columns, which the
        // attention cuts into heads itself.
        let qkv = mixed::project(&self.qkv, x); // [batch, seq, 3d]
        let out = if qkv.device().is_autodiff() {
            self.attend_training(qkv, rope, causal)
        } else {
            let [q, k, v] = split_heads(qkv, self.n_heads, rope);
            merge_heads(causal_attention(q, k, v))
        };
        mixed::project(&self.out_proj, out)
    }

    /// `softmax(q kᵀ / √head_dim + causal mask) v` with dropout on the probabilities: the
    /// training path, one differentiable operation from `qkv` on ([`causal_attention_train`];
    /// on a cubecl device with [`TrainingAttention::Kernels`], [`causal_attention_kernels`],
    /// whose dropout mask follows from a seed instead).
    ///
    /// # Shapes
    /// - `qkv`: `[batch, seq, 3d]`; `causal`: `[seq, seq]`
    /// - output: `[batch, seq, d]`
    fn attend_training(
        &self,
        qkv: Tensor<3>,
        rope: &RopeTables,
        causal: &Tensor<2, Bool>,
    ) -> Tensor<3> {
        let [batch, seq, width] = qkv.dims();
        let heads = self.n_heads;
        let scale = 1.0 / ((width / 3 / heads) as f64).sqrt();
        let device = qkv.device();
        if device != Device::flex() && self.training == TrainingAttention::Kernels {
            let dropout = dropout_seed(&self.attn_dropout, &device).map(|parts| SeededDropout {
                parts,
                keep: 1.0 - self.attn_dropout.prob,
            });
            return causal_attention_kernels(qkv, heads, rope, dropout, scale);
        }
        let dropout =
            dropout_mask(&self.attn_dropout, [batch, heads, seq, seq], &device).map(|mask| {
                AttentionDropout {
                    mask,
                    scale: kept_scale(&self.attn_dropout),
                }
            });
        causal_attention_train(qkv, heads, rope, causal, dropout, scale)
    }
}

impl SwiGlu {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        // `in_proj` is one [d, 8d] weight (the reference's layout): gate columns, then value.
        if x.device() == Device::flex() {
            // On the CPU two products with the weight's halves and `silu` as separate
            // operations ran the step faster than one product and `swiglu`, whose packed
            // gradient is one more large allocation (docs/perf.md).
            let [_, width] = self.in_proj.weight.dims();
            let half = width / 2;
            let halves = mixed::column_groups(Precision::F32, x, &self.in_proj, &[half, half]);
            let [gate, value] = <[Tensor<3>; 2]>::try_from(halves)
                .unwrap_or_else(|_| unreachable!("one group per width"));
            return mixed::project(&self.out_proj, silu(gate) * value);
        }
        let packed = mixed::project(&self.in_proj, x); // [batch, seq, 8d]
        mixed::project(&self.out_proj, swiglu(packed, GateHalf::First))
    }
}
