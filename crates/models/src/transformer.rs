//! `transformer` (spec B.1): pre-norm decoder with RMSNorm (eps 1e-6), biased projections,
//! rotary position embeddings (the reference's variant by default) and a SwiGLU MLP.
//!
//! Dropout (spec D.3): on the embedding, on the attention probabilities, and on both residual
//! branches. All weights use PyTorch's default inits.

use burn::nn::{Dropout, DropoutConfig, Embedding, Linear, RmsNorm, RmsNormConfig};
use burn::prelude::*;
use burn::tensor::activation::silu;

use crate::attention::{AttentionDropout, causal_attention, causal_attention_train};
use crate::config::{ModelConfig, Rope};
use crate::dropout::{dropout, dropout_mask, kept_scale};
use crate::error::ModelError;
use crate::head::{
    EmbeddingInit, HeadInit, input_embedding, linear_columns, output_head, torch_linear,
};
use crate::hidden::Tap;
use crate::model::StateModel;

/// Epsilon of every RMSNorm in the Transformer.
pub const NORM_EPS: f64 = 1e-6;
/// Base of the rotary frequencies.
pub const ROPE_BASE: f32 = 10_000.0;

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
        let x = dropout(&self.dropout, self.tok_emb.forward(moves)); // [batch, seq, d]
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
        tap.at(self.blocks.len() + 1, self.final_norm.forward(x))
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
            .forward(self.norm1.forward(x.clone()), rope, causal);
        let x = x + dropout(&self.dropout, attended);
        let mixed = self.mlp.forward(self.norm2.forward(x.clone()));
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
        let [batch, seq, d] = x.dims();
        let heads = self.n_heads;
        let head_dim = d / heads;
        // `qkv` is one [d, 3d] weight (the reference's layout): q, k and v columns.
        let split = |i: usize| -> Tensor<4> {
            linear_columns(x.clone(), &self.qkv, i * d, d)
                .reshape([batch, seq, heads, head_dim])
                .swap_dims(1, 2)
        }; // [batch, heads, seq, head_dim]
        let q = apply_rope(split(0), rope);
        let k = apply_rope(split(1), rope);
        let v = split(2);
        let out = if x.device().is_autodiff() {
            self.attend_training(q, k, v, causal)
        } else {
            causal_attention(q, k, v)
        };
        self.out_proj
            .forward(out.swap_dims(1, 2).reshape([batch, seq, d]))
    }

    /// `softmax(q kᵀ / √head_dim + causal mask) v` with dropout on the probabilities: the
    /// training path, one differentiable operation ([`causal_attention_train`]).
    ///
    /// # Shapes
    /// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[seq, seq]`
    /// - output: `[batch, heads, seq, head_dim]`
    fn attend_training(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        causal: &Tensor<2, Bool>,
    ) -> Tensor<4> {
        let [batch, heads, seq, head_dim] = q.dims();
        let dropout =
            dropout_mask(&self.attn_dropout, [batch, heads, seq, seq], &q.device()).map(|mask| {
                AttentionDropout {
                    mask,
                    scale: kept_scale(&self.attn_dropout),
                }
            });
        let scale = 1.0 / (head_dim as f64).sqrt();
        causal_attention_train(q, k, v, causal, dropout, scale)
    }
}

impl SwiGlu {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        // `in_proj` is one [d, 8d] weight (the reference's layout): gate columns, then value.
        let [_, width] = self.in_proj.weight.dims();
        let half = width / 2;
        let gate = linear_columns(x.clone(), &self.in_proj, 0, half); // [batch, seq, 4d]
        let value = linear_columns(x, &self.in_proj, half, half);
        self.out_proj.forward(silu(gate) * value)
    }
}

/// The tables RoPE multiplies by, built once per forward pass and shared by every layer.
#[derive(Clone, Debug)]
pub struct RopeTables {
    /// `cos` of each coordinate's angle at each position, `[1, 1, seq, head_dim]`.
    cos: Tensor<4>,
    /// `sin` of the same angles, `[1, 1, seq, head_dim]`.
    sin: Tensor<4>,
    /// The signed permutation that gives each coordinate's partner, `[1, 1, head_dim,
    /// head_dim]` (see [`apply_rope`]).
    partner: Tensor<4>,
}

/// The tables of the RoPE variant, built in f32 like the reference's.
///
/// Frequencies `f_k = 10000^(−2k/head_dim)`, `k < head_dim/2`. Coordinate `i` at position `t`
/// turns by `t·f_{i mod head_dim/2}` ([`Rope::Reference`], the reference's tables laid out for
/// the half-split convention) or by `t·f_{⌊i/2⌋}` ([`Rope::Standard`], so both coordinates of
/// an interleaved pair share a frequency and the map is a rotation).
pub fn rope_tables(rope: Rope, seq: usize, head_dim: usize, device: &Device) -> RopeTables {
    let half = head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|k| 1.0 / ROPE_BASE.powf((2 * k) as f32 / head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(seq * head_dim);
    let mut sin = Vec::with_capacity(seq * head_dim);
    for t in 0..seq {
        for i in 0..head_dim {
            let k = match rope {
                Rope::Reference => i % half,
                Rope::Standard => i / 2,
            };
            let angle = t as f32 * inv_freq[k];
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    let mut partner = vec![0f32; head_dim * head_dim];
    for j in 0..half {
        let (even, odd) = (2 * j, 2 * j + 1);
        // rotated[even] = −x[odd]; rotated[odd] = x[even]; (row = input, column = output)
        partner[odd * head_dim + even] = -1.0;
        partner[even * head_dim + odd] = 1.0;
    }
    let table = |values: Vec<f32>, rows: usize| {
        Tensor::<4>::from_data(TensorData::new(values, [1, 1, rows, head_dim]), device)
    };
    RopeTables {
        cos: table(cos, seq),
        sin: table(sin, seq),
        partner: table(partner, head_dim),
    }
}

/// RoPE with the interleaved partner: `out[2j] = x[2j]·cos − x[2j+1]·sin`,
/// `out[2j+1] = x[2j+1]·cos + x[2j]·sin`, with the tables' angles at each coordinate.
///
/// The partner vector (`−x[2j+1]` at `2j`, `x[2j]` at `2j+1`) is one product with a constant
/// signed permutation matrix: a matrix product runs in parallel and needs no slice, negation
/// or concatenation (whose backward passes each build a full-size tensor). Every entry of the
/// product is exactly `±x` (the other terms are `0·x`), so the result is the same to the bit.
///
/// # Shapes
/// - `x`: `[batch, heads, seq, head_dim]`, with the tables' `seq` and `head_dim`
/// - output: `[batch, heads, seq, head_dim]`
pub fn apply_rope(x: Tensor<4>, tables: &RopeTables) -> Tensor<4> {
    let rotated = x.clone().matmul(tables.partner.clone());
    x * tables.cos.clone() + rotated * tables.sin.clone()
}
