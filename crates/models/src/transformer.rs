//! `transformer` (spec B.1): pre-norm decoder with RMSNorm (eps 1e-6), biased projections,
//! rotary position embeddings (the reference's variant by default) and a SwiGLU MLP.
//!
//! Dropout (spec D.3): on the embedding, on the attention probabilities, and on both residual
//! branches. All weights use PyTorch's default inits.

use burn::nn::{Dropout, DropoutConfig, Embedding, Linear, RmsNorm, RmsNormConfig};
use burn::prelude::*;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;

use crate::config::{ModelConfig, Rope};
use crate::dropout::dropout;
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
        let (cos, sin) = rope_tables(self.rope, seq, head_dim, &device);
        let causal = Tensor::<2, Bool>::tril_mask([seq, seq], 0, &device); // true above diagonal
        for (i, block) in self.blocks.iter().enumerate() {
            x = tap.at(i + 1, block.forward(x, &cos, &sin, &causal));
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
    /// - `x`: `[batch, seq, d]`; `cos`, `sin`: `[seq, head_dim]`; `causal`: `[seq, seq]`, true
    ///   where attention is forbidden
    /// - output: `[batch, seq, d]`
    pub fn forward(
        &self,
        x: Tensor<3>,
        cos: &Tensor<2>,
        sin: &Tensor<2>,
        causal: &Tensor<2, Bool>,
    ) -> Tensor<3> {
        let attended = self
            .attn
            .forward(self.norm1.forward(x.clone()), cos, sin, causal);
        let x = x + dropout(&self.dropout, attended);
        let mixed = self.mlp.forward(self.norm2.forward(x.clone()));
        x + dropout(&self.dropout, mixed)
    }
}

impl Attention {
    /// Causal self-attention with RoPE on q and k.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]`; `cos`, `sin`: `[seq, head_dim]`; `causal`: `[seq, seq]`
    /// - output: `[batch, seq, d]`
    pub fn forward(
        &self,
        x: Tensor<3>,
        cos: &Tensor<2>,
        sin: &Tensor<2>,
        causal: &Tensor<2, Bool>,
    ) -> Tensor<3> {
        let [batch, seq, d] = x.dims();
        let heads = self.n_heads;
        let head_dim = d / heads;
        // `qkv` is one [d, 3d] weight (the reference's layout): q, k and v columns.
        let split = |i: usize| -> Tensor<4> {
            linear_columns(x.clone(), &self.qkv, i * d, d)
                .reshape([batch, seq, heads, head_dim])
                .swap_dims(1, 2)
        }; // [batch, heads, seq, head_dim]
        let q = apply_rope(split(0), cos, sin);
        let k = apply_rope(split(1), cos, sin);
        let v = split(2);
        let out = if x.device().is_autodiff() {
            self.attend_decomposed(q, k, v, causal)
        } else {
            causal_attention(q, k, v)
        };
        self.out_proj
            .forward(out.swap_dims(1, 2).reshape([batch, seq, d]))
    }

    /// `softmax(q kᵀ / √head_dim + causal mask) v` from separate tensor operations, with
    /// dropout on the probabilities: the training path, whose gradients autodiff derives.
    ///
    /// # Shapes
    /// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`; `causal`: `[seq, seq]`
    /// - output: `[batch, heads, seq, head_dim]`
    fn attend_decomposed(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        causal: &Tensor<2, Bool>,
    ) -> Tensor<4> {
        let [batch, heads, seq, head_dim] = q.dims();
        let scores = q.matmul(k.swap_dims(2, 3)) / (head_dim as f64).sqrt(); // [batch, heads, seq, seq]
        let mask = causal
            .clone()
            .reshape([1, 1, seq, seq])
            .expand([batch, heads, seq, seq]);
        let probs = softmax(scores.mask_fill(mask, f32::NEG_INFINITY), 3);
        dropout(&self.attn_dropout, probs).matmul(v)
    }
}

/// Causal scaled dot-product attention (scale `1/√head_dim`) as one backend operation: burn's
/// fused attention. It has no dropout, and burn's autodiff does not differentiate it as one
/// operation (it falls back to separate ones there), so the model takes it on devices without
/// autodiff only: evaluation, validation and every stage that reads hidden states. The CPU
/// backend computes it per head, with the whole score matrix or tiles of it in cache; CUDA
/// with a flash-attention kernel (autotuned against separate kernels). Its results equal
/// `Attention::attend_decomposed`'s without dropout up to the summation order (the test
/// `fused_attention_equals_the_decomposed_one`).
///
/// # Shapes
/// - `q`, `k`, `v`: `[batch, heads, seq, head_dim]`
/// - output: `[batch, heads, seq, head_dim]`
pub fn causal_attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    attention(q, k, v, None, None, options)
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

/// The cos and sin tables of the RoPE variant, built in f32 like the reference's.
///
/// Frequencies `f_k = 10000^(−2k/head_dim)`, `k < head_dim/2`. Coordinate `i` at position `t`
/// turns by `t·f_{i mod head_dim/2}` ([`Rope::Reference`], the reference's tables laid out for
/// the half-split convention) or by `t·f_{⌊i/2⌋}` ([`Rope::Standard`], so both coordinates of
/// an interleaved pair share a frequency and the map is a rotation).
///
/// # Shapes
/// - output: two `[seq, head_dim]` tensors
pub fn rope_tables(
    rope: Rope,
    seq: usize,
    head_dim: usize,
    device: &Device,
) -> (Tensor<2>, Tensor<2>) {
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
    let table =
        |values: Vec<f32>| Tensor::<2>::from_data(TensorData::new(values, [seq, head_dim]), device);
    (table(cos), table(sin))
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
/// - `x`: `[batch, heads, seq, head_dim]`; `cos`, `sin`: `[seq, head_dim]`
/// - output: `[batch, heads, seq, head_dim]`
pub fn apply_rope(x: Tensor<4>, cos: &Tensor<2>, sin: &Tensor<2>) -> Tensor<4> {
    let [_, _, seq, head_dim] = x.dims();
    let mut partner = vec![0f32; head_dim * head_dim];
    for j in 0..head_dim / 2 {
        let (even, odd) = (2 * j, 2 * j + 1);
        // rotated[even] = −x[odd]; rotated[odd] = x[even]; (row = input, column = output)
        partner[odd * head_dim + even] = -1.0;
        partner[even * head_dim + odd] = 1.0;
    }
    let partner =
        Tensor::<2>::from_data(TensorData::new(partner, [head_dim, head_dim]), &x.device())
            .reshape([1, 1, head_dim, head_dim]);
    let rotated = x.clone().matmul(partner);
    let cos: Tensor<4> = cos.clone().reshape([1, 1, seq, head_dim]);
    let sin: Tensor<4> = sin.clone().reshape([1, 1, seq, head_dim]);
    x * cos + rotated * sin
}
