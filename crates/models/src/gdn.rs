//! `gdn` and `gdn_pos` (spec B.3): FLA 0.5.0's `GatedDeltaNetModel` as the reference builds it,
//! with its output head.
//!
//! - Pre-norm blocks `x + GDN(RMSNorm(x))`, `x + SwiGLU(RMSNorm(x))`, then a final RMSNorm
//!   (eps 1e-6 everywhere), key head dim 48, value head dim 96.
//! - The delta rule `S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ`, `o_t = S_tᵀ q_t`, runs
//!   step by step ([`delta_rule_sequential`], [`Scan::Sequential`]) or chunk by chunk
//!   ([`delta_rule_chunked`], [`Scan::Chunked`], FLA's "chunk" mode).
//! - `gdn` doubles β (eigenvalues along k in (−α, α)); `gdn_pos` does not (in (0, α)). The two
//!   have identical parameters.
//! - No dropout anywhere (spec D.3). FLA inits: every Linear and conv weight N(0, 0.02²),
//!   embedding N(0, 0.02²), head N(0, 0.02²) with zero bias, `A_log = log U(0, 16)`, `dt_bias`
//!   the inverse softplus of a log-uniform `dt` in [1e-3, 1e-1].
//! - The reference's embedding has `padding_idx = PAD`, so PAD's row never gets a gradient. Here
//!   it does, but PAD only appears at positions masked out of the loss, so no valid logit
//!   depends on it.

use burn::module::Param;
use burn::nn::{Embedding, Initializer, Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::prelude::*;
use burn::tensor::activation::{sigmoid, silu, softplus};

use crate::config::{Family, ModelConfig, Precision, Scan};
use crate::delta_chunks::{ChunkInputs, delta_chunk_recurrence};
use crate::embedding_grad::embed;
use crate::error::ModelError;
use crate::glu::{GateHalf, swiglu};
use crate::head::{EmbeddingInit, HeadInit, input_embedding, output_head};
use crate::hidden::Tap;
use crate::mixed;
use crate::model::StateModel;
use crate::products::product_of;
use crate::recurrent::{CausalConv1d, a_log_init, dt_bias_init};
use crate::rms_norm::rms_norm;
use crate::split::split_array;

/// Epsilon of every RMSNorm in the family (`norm_eps`).
pub const NORM_EPS: f64 = 1e-6;
/// Key (and query) head dimension.
pub const KEY_HEAD_DIM: usize = 48;
/// Value head dimension (`head_dim · expand_v`).
pub const VALUE_HEAD_DIM: usize = 96;
/// Kernel size of the short convolutions.
pub const CONV_SIZE: usize = 4;
/// FLA's `initializer_range`.
pub const INIT_STD: f64 = 0.02;
/// Epsilon of the per-head L2 normalisation of q and k.
pub const L2_EPS: f64 = 1e-6;

/// The Gated DeltaNet family: `backbone` and `output_head`, as in the reference's state_dict.
#[derive(Module, Debug)]
pub struct GatedDeltaNet {
    /// `backbone`: FLA's `GatedDeltaNetModel`.
    pub backbone: GdnBackbone,
    /// `output_head`: Linear(d → 1878), N(0, 0.02²), zero bias.
    pub output_head: Linear,
}

/// Embedding, blocks and final norm.
#[derive(Module, Debug)]
pub struct GdnBackbone {
    /// `backbone.embeddings`: Embedding(20482, d), N(0, 0.02²).
    pub embeddings: Embedding,
    /// `backbone.layers.{i}`.
    pub layers: Vec<GdnBlock>,
    /// `backbone.norm`: RMSNorm(d, 1e-6).
    pub norm: RmsNorm,
}

/// One pre-norm block.
#[derive(Module, Debug)]
pub struct GdnBlock {
    /// `attn_norm`.
    pub attn_norm: RmsNorm,
    /// `attn`.
    pub attn: GatedDeltaNetLayer,
    /// `mlp_norm`.
    pub mlp_norm: RmsNorm,
    /// `mlp`.
    pub mlp: GdnMlp,
}

/// The Gated DeltaNet token mixer (`attn`). All projections have no bias.
#[derive(Module, Debug)]
pub struct GatedDeltaNetLayer {
    /// `q_proj`: Linear(d → 48h).
    pub q_proj: Linear,
    /// `k_proj`: Linear(d → 48h).
    pub k_proj: Linear,
    /// `v_proj`: Linear(d → 96h).
    pub v_proj: Linear,
    /// `a_proj`: Linear(d → h), the decay's input.
    pub a_proj: Linear,
    /// `b_proj`: Linear(d → h), β's input.
    pub b_proj: Linear,
    /// `g_proj`: Linear(d → 96h), the output gate.
    pub g_proj: Linear,
    /// `o_proj`: Linear(96h → d).
    pub o_proj: Linear,
    /// `q_conv1d`: depthwise causal conv, `[48h, 1, 4]`, no bias.
    pub q_conv1d: CausalConv1d,
    /// `k_conv1d`: `[48h, 1, 4]`.
    pub k_conv1d: CausalConv1d,
    /// `v_conv1d`: `[96h, 1, 4]`.
    pub v_conv1d: CausalConv1d,
    /// `A_log`: `[h]`.
    pub a_log: Param<Tensor<1>>,
    /// `dt_bias`: `[h]`.
    pub dt_bias: Param<Tensor<1>>,
    /// `o_norm`: RMSNorm(96, 1e-6), weight shared by the heads.
    pub o_norm: RmsNorm,
    /// Number of heads `h`.
    pub n_heads: usize,
    /// Whether β is doubled (`gdn`) or not (`gdn_pos`).
    pub allow_neg_eigval: bool,
    /// Sequential or chunked delta rule.
    #[module(skip)]
    pub scan: Scan,
    /// Steps per chunk when chunked.
    pub chunk_size: usize,
}

/// SwiGLU MLP without biases: `down(SiLU(gate(x)) ⊙ up(x))`.
#[derive(Module, Debug)]
pub struct GdnMlp {
    /// `gate_proj`: Linear(d → I).
    pub gate_proj: Linear,
    /// `up_proj`: Linear(d → I).
    pub up_proj: Linear,
    /// `down_proj`: Linear(I → d).
    pub down_proj: Linear,
}

/// FLA's MLP width for `hidden_ratio = 4`: `I = 256·⌈⌊8d/3⌋ / 256⌉` (512, 768, 1024, 1536 for the
/// four sizes).
pub fn intermediate_size(d_model: usize) -> usize {
    256 * (8 * d_model / 3).div_ceil(256)
}

impl GatedDeltaNet {
    /// A freshly initialised model for `config` (`gdn` or `gdn_pos`).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when `config.family` is not `gdn` or `gdn_pos`.
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        let allow_neg_eigval = match config.family {
            Family::Gdn => true,
            Family::GdnPos => false,
            other => {
                return Err(ModelError::InvalidConfig {
                    field: "family",
                    reason: format!("{other} is not a Gated DeltaNet family"),
                });
            }
        };
        let d = config.d_model();
        let h = config.n_heads();
        let (key_dim, value_dim) = (KEY_HEAD_DIM * h, VALUE_HEAD_DIM * h);
        let inner = intermediate_size(d);
        let normal = Initializer::Normal {
            mean: 0.0,
            std: INIT_STD,
        };
        let linear = |i: usize, o: usize| {
            LinearConfig::new(i, o)
                .with_bias(false)
                .with_initializer(normal.clone())
                .init(device)
        };
        let norm = |n: usize| RmsNormConfig::new(n).with_epsilon(NORM_EPS).init(device);
        let layers = (0..config.n_layers())
            .map(|_| GdnBlock {
                attn_norm: norm(d),
                attn: GatedDeltaNetLayer {
                    q_proj: linear(d, key_dim),
                    k_proj: linear(d, key_dim),
                    v_proj: linear(d, value_dim),
                    a_proj: linear(d, h),
                    b_proj: linear(d, h),
                    g_proj: linear(d, value_dim),
                    o_proj: linear(value_dim, d),
                    q_conv1d: CausalConv1d::init(key_dim, CONV_SIZE, false, &normal, device),
                    k_conv1d: CausalConv1d::init(key_dim, CONV_SIZE, false, &normal, device),
                    v_conv1d: CausalConv1d::init(value_dim, CONV_SIZE, false, &normal, device),
                    a_log: a_log_init(h, 0.0, 16.0, device),
                    dt_bias: dt_bias_init(h, device),
                    o_norm: norm(VALUE_HEAD_DIM),
                    n_heads: h,
                    allow_neg_eigval,
                    scan: config.scan,
                    chunk_size: config.chunk_size_on(device),
                },
                mlp_norm: norm(d),
                mlp: GdnMlp {
                    gate_proj: linear(d, inner),
                    up_proj: linear(d, inner),
                    down_proj: linear(inner, d),
                },
            })
            .collect();
        Ok(Self {
            backbone: GdnBackbone {
                embeddings: input_embedding(d, EmbeddingInit::Normal { std: INIT_STD }, device),
                layers,
                norm: norm(d),
            },
            output_head: output_head(d, HeadInit::NormalZeroBias { std: INIT_STD }, device),
        })
    }
}

impl StateModel for GatedDeltaNet {
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3> {
        let x = embed(&self.backbone.embeddings, moves); // [batch, seq, d]
        let mut x = tap.at(0, x);
        for (i, layer) in self.backbone.layers.iter().enumerate() {
            x = tap.at(i + 1, layer.forward(x));
        }
        tap.at(
            self.backbone.layers.len() + 1,
            rms_norm(&self.backbone.norm, x),
        )
    }

    fn blocks(&self) -> usize {
        self.backbone.layers.len()
    }

    fn head(&self) -> &Linear {
        &self.output_head
    }
}

impl GdnBlock {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let x = x.clone() + self.attn.forward(rms_norm(&self.attn_norm, x));
        x.clone() + self.mlp.forward(rms_norm(&self.mlp_norm, x))
    }
}

impl GdnMlp {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        if x.device() == Device::flex() {
            // On the CPU two products and separate operations, as the transformer's MLP keeps
            // them there (docs/perf.md).
            let gate = silu(mixed::project(&self.gate_proj, x.clone()));
            return mixed::project(&self.down_proj, gate * mixed::project(&self.up_proj, x));
        }
        self.forward_packed(x)
    }

    /// [`Self::forward`] on cubecl's devices: one product with the two weights side by side,
    /// and [`swiglu`] on its halves (one node that keeps only the packed product).
    fn forward_packed(&self, x: Tensor<3>) -> Tensor<3> {
        let projections = [&self.gate_proj, &self.up_proj];
        let packed = mixed::side_by_side(Precision::F32, x, &projections);
        mixed::project(&self.down_proj, swiglu(packed, GateHalf::First))
    }
}

/// The inputs of the delta rule for one layer, before the recurrence.
#[derive(Debug, Clone)]
pub struct DeltaRuleInputs {
    /// L2-normalised queries scaled by 1/√48. `[batch, seq, h, 48]`
    pub q: Tensor<4>,
    /// L2-normalised keys. `[batch, seq, h, 48]`
    pub k: Tensor<4>,
    /// Values. `[batch, seq, h, 96]`
    pub v: Tensor<4>,
    /// Writing strength β, in (0, 2) or (0, 1). `[batch, seq, h]`
    pub beta: Tensor<3>,
    /// Log decay `g = −exp(A_log)·softplus(W_a x + dt_bias)`, so `α = exp(g)`. `[batch, seq, h]`
    pub g: Tensor<3>,
}

impl GatedDeltaNetLayer {
    /// q, k, v, β and the log decay from the normed block input (steps 1–5 of spec B.3).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: see [`DeltaRuleInputs`]
    pub fn delta_rule_inputs(&self, x: Tensor<3>) -> DeltaRuleInputs {
        self.inputs_and_gate(x).0
    }

    /// [`Self::delta_rule_inputs`] and the output gate's projection (`[batch, seq, 96h]`): on
    /// the CPU by each layer separately, on cubecl's devices by [`Self::inputs_and_gate_packed`].
    fn inputs_and_gate(&self, x: Tensor<3>) -> (DeltaRuleInputs, Tensor<3>) {
        if x.device() == Device::flex() {
            // The packed product ran the CPU's step no faster and raised its peak memory by 4 %
            // at d512 (docs/perf.md).
            return self.inputs_and_gate_separately(x);
        }
        self.inputs_and_gate_packed(x)
    }

    /// [`Self::inputs_and_gate`] by six products and three convolutions, each its own layer's.
    fn inputs_and_gate_separately(&self, x: Tensor<3>) -> (DeltaRuleInputs, Tensor<3>) {
        let [batch, seq, _] = x.dims();
        let h = self.n_heads;
        let heads = |t: Tensor<3>, dim: usize| -> Tensor<4> { t.reshape([batch, seq, h, dim]) };
        let conv = |conv: &CausalConv1d, proj: &Linear| {
            silu(conv.forward(mixed::project(proj, x.clone())))
        };
        let q = heads(conv(&self.q_conv1d, &self.q_proj), KEY_HEAD_DIM);
        let k = heads(conv(&self.k_conv1d, &self.k_proj), KEY_HEAD_DIM);
        let v = heads(conv(&self.v_conv1d, &self.v_proj), VALUE_HEAD_DIM);
        let beta = mixed::project(&self.b_proj, x.clone());
        let a = mixed::project(&self.a_proj, x.clone());
        let gate = mixed::project(&self.g_proj, x);
        (self.delta_rule_inputs_from(q, k, v, a, beta), gate)
    }

    /// [`Self::inputs_and_gate`] with the six projections of `x` as one product with their
    /// weights side by side, and the three convolutions as one over `q`, `k` and `v` side by
    /// side (each channel has its own taps, so the result is theirs): one product, one
    /// convolution and one `silu` where there were six, three and three, and one gradient for
    /// `x` from the product instead of six added.
    fn inputs_and_gate_packed(&self, x: Tensor<3>) -> (DeltaRuleInputs, Tensor<3>) {
        let [batch, seq, _] = x.dims();
        let h = self.n_heads;
        let (key_dim, value_dim) = (h * KEY_HEAD_DIM, h * VALUE_HEAD_DIM);
        let projections = [
            &self.q_proj,
            &self.k_proj,
            &self.v_proj,
            &self.a_proj,
            &self.b_proj,
            &self.g_proj,
        ];
        let packed = mixed::side_by_side(Precision::F32, x, &projections);
        let [qkv, a, b, gate] = split_array(packed, 2, &[2 * key_dim + value_dim, h, h, value_dim]);
        let convolutions = [&self.q_conv1d, &self.k_conv1d, &self.v_conv1d];
        let qkv = silu(CausalConv1d::side_by_side(&convolutions, qkv));
        let [q, k, v] = split_array(qkv, 2, &[key_dim, key_dim, value_dim]);
        let heads = |t: Tensor<3>, dim: usize| -> Tensor<4> { t.reshape([batch, seq, h, dim]) };
        let (q, k) = (heads(q, KEY_HEAD_DIM), heads(k, KEY_HEAD_DIM));
        let v = heads(v, VALUE_HEAD_DIM);
        (self.delta_rule_inputs_from(q, k, v, a, b), gate)
    }

    /// Steps 3–5 of spec B.3 from the convolved `q`, `k`, `v` (`[batch, seq, h, ·]`) and the
    /// projections `a` and `b` (`[batch, seq, h]`).
    fn delta_rule_inputs_from(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        a: Tensor<3>,
        b: Tensor<3>,
    ) -> DeltaRuleInputs {
        let h = self.n_heads;
        let q = l2_normalize(q) * (1.0 / (KEY_HEAD_DIM as f64).sqrt());
        let k = l2_normalize(k);
        let mut beta = sigmoid(b); // [batch, seq, h]
        if self.allow_neg_eigval {
            beta = beta * 2.0;
        }
        let dt_bias = self.dt_bias.val().reshape([1, 1, h]);
        let rate = self.a_log.val().exp().reshape([1, 1, h]);
        let g = (softplus(a + dt_bias, 1.0) * rate).neg();
        DeltaRuleInputs { q, k, v, beta, g }
    }

    /// The whole mixer: delta rule, gated RMSNorm per head, output projection.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]` (the normed block input)
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let h = self.n_heads;
        let (inputs, gate) = self.inputs_and_gate(x);
        let o = match self.scan {
            Scan::Sequential => delta_rule_sequential(&inputs),
            Scan::Chunked => delta_rule_chunked(&inputs, self.chunk_size),
        }; // [batch, seq, h, 96]
        let gate: Tensor<4> = gate.reshape([batch, seq, h, VALUE_HEAD_DIM]);
        let o = rms_norm(&self.o_norm, o) * silu(gate);
        mixed::project(&self.o_proj, o.reshape([batch, seq, h * VALUE_HEAD_DIM]))
    }
}

/// `x / sqrt(Σ x² + 1e-6)` over the last dimension.
fn l2_normalize(x: Tensor<4>) -> Tensor<4> {
    let norm = (x.clone().square().sum_dim(3) + L2_EPS).sqrt();
    x / norm
}

/// The gated delta rule, one step at a time, from a zero state:
/// decay `S ← α_t S`, then `v' = β_t (v_t − Sᵀ k_t)`, `S ← S + k_t v'ᵀ`, and read out
/// `o_t = Sᵀ q_t`. This equals `S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ`.
///
/// # Shapes
/// - inputs: see [`DeltaRuleInputs`] (key dim `K`, value dim `V`)
/// - output `o`: `[batch, seq, h, V]`
pub fn delta_rule_sequential(inputs: &DeltaRuleInputs) -> Tensor<4> {
    let [batch, seq, h, key_dim] = inputs.k.dims();
    let [_, _, _, value_dim] = inputs.v.dims();
    let device = inputs.k.device();
    let alpha = inputs.g.clone().exp();
    let step4 = |t: &Tensor<4>, i: usize, dim: usize| -> Tensor<4> {
        t.clone().narrow(1, i, 1).reshape([batch, h, 1, dim])
    };
    let step3 = |t: &Tensor<3>, i: usize| -> Tensor<4> {
        t.clone().narrow(1, i, 1).reshape([batch, h, 1, 1])
    };
    let mut state = Tensor::<4>::zeros([batch, h, key_dim, value_dim], &device);
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let k_t = step4(&inputs.k, t, key_dim); // [batch, h, 1, K]
        let v_t = step4(&inputs.v, t, value_dim); // [batch, h, 1, V]
        let q_t = step4(&inputs.q, t, key_dim);
        state = state * step3(&alpha, t);
        let predicted = k_t.clone().matmul(state.clone()); // Sᵀk as a row: [batch, h, 1, V]
        let correction = (v_t - predicted) * step3(&inputs.beta, t);
        state = state + k_t.swap_dims(2, 3).matmul(correction);
        outputs.push(q_t.matmul(state.clone()).reshape([batch, h, value_dim]));
    }
    Tensor::stack(outputs, 1)
}

/// `(I + A)⁻¹` for strictly lower triangular `A` (`[.., C, C]`), block by block. If `T` is the
/// inverse of the block-diagonal part of `I + A` in blocks of `s`, the inverse in blocks of
/// `2s` is `T − T A' T`, where `A'` keeps only the lower-left `s × s` block of each `2s` block:
/// for `s = 1` that is `I − A'`, then ⌈log₂ C⌉ − 1 levels of two matrix products. Each level's
/// `T` is the inverse of diagonal blocks of `I + A`, so no intermediate outgrows the result
/// (unlike the series `Σ (−A)ᵏ`, whose terms can exceed it by many orders of magnitude, e.g.
/// with equal keys: see the test). On the cases tried its f32 error was within twice that of
/// forward substitution, which took `C − 1` dependent steps over the whole `[.., C, C]` tensor.
fn unit_lower_inverse(a: Tensor<5>) -> Tensor<5> {
    let device = a.device();
    let square = a.dims();
    let chunk = square[4];
    // A' at block size s: true outside the lower-left s × s block of each 2s block.
    let outside = |s: usize| -> Tensor<5, Bool> {
        let cells: Vec<bool> = (0..chunk * chunk)
            .map(|n| {
                let (row, col) = (n / chunk / s, n % chunk / s);
                !(row % 2 == 1 && col + 1 == row)
            })
            .collect();
        Tensor::<2, Bool>::from_data(TensorData::new(cells, [chunk, chunk]), &device)
            .reshape([1, 1, 1, chunk, chunk])
            .expand(square)
    };
    let eye: Tensor<5> = Tensor::<2>::eye(chunk, &device)
        .reshape([1, 1, 1, chunk, chunk])
        .expand(square);
    let mut t = eye - a.clone().mask_fill(outside(1), 0.0);
    let mut s = 2;
    while s < chunk {
        let off = a.clone().mask_fill(outside(s), 0.0);
        t = t.clone() - product_of(product_of(t.clone(), off, false, false), t, false, false);
        s *= 2;
    }
    t
}

/// The chunked delta rule (the WY form FLA's "chunk" kernel uses), same result as
/// [`delta_rule_sequential`] up to float rounding.
///
/// Inside a chunk with start state `S₀` and cumulative log decay `γ_i = Σ_{j≤i} g_j`, write the
/// update as `S_t = α_t S_{t−1} + k_t u_tᵀ` with `u_t = β_t (v_t − (α_t S_{t−1})ᵀ k_t)`. Then
/// `(I + A) U = diag(β) (V − diag(e^γ) K S₀)` with the strictly lower triangular
/// `A_ij = β_i e^{γ_i − γ_j} k_iᵀ k_j`, so with `T = (I + A)⁻¹` (inverted block by block, all
/// chunks at once): `U = T diag(β) V − T diag(β e^γ) K S₀`,
/// `O = diag(e^γ) Q S₀ + (Q Kᵀ ⊙ Γ) U` with `Γ_ij = e^{γ_i − γ_j}` for `j ≤ i` (0 above), and
/// the next start state `e^{γ_C} S₀ + (diag(e^{γ_C − γ}) K)ᵀ U`. Only the last three steps run
/// chunk after chunk, as one operation with its own backward pass
/// ([`crate::delta_chunks`]). Every exponent is ≤ 0.
///
/// # Shapes
/// - inputs: see [`DeltaRuleInputs`] (key dim `K`, value dim `V`)
/// - output `o`: `[batch, seq, h, V]`
pub fn delta_rule_chunked(inputs: &DeltaRuleInputs, chunk_size: usize) -> Tensor<4> {
    let [batch, seq, h, _] = inputs.k.dims();
    let [_, _, _, value_dim] = inputs.v.dims();
    let device = inputs.k.device();
    if seq == 0 {
        return Tensor::zeros([batch, 0, h, value_dim], &device);
    }
    let chunk = chunk_size.clamp(1, seq);
    let n_chunks = seq.div_ceil(chunk);
    let padded = n_chunks * chunk;
    let pad = padded - seq;
    // Padding after the end has β = 0 and g = 0: the state passes through unchanged.
    let pad4 = |t: &Tensor<4>| -> Tensor<4> {
        let [b, _, hh, w] = t.dims();
        let t = t.clone();
        if pad == 0 {
            return t;
        }
        Tensor::cat(vec![t, Tensor::zeros([b, pad, hh, w], &device)], 1)
    };
    let pad3 = |t: &Tensor<3>| -> Tensor<3> {
        let t = t.clone();
        if pad == 0 {
            return t;
        }
        Tensor::cat(vec![t, Tensor::zeros([batch, pad, h], &device)], 1)
    };
    // [batch, n_chunks, h, chunk, w]
    let chunks4 = |t: Tensor<4>| -> Tensor<5> {
        let [b, _, hh, w] = t.dims();
        t.reshape([b, n_chunks, chunk, hh, w]).swap_dims(2, 3)
    };
    let chunks3 =
        |t: Tensor<3>| -> Tensor<4> { t.reshape([batch, n_chunks, chunk, h]).swap_dims(2, 3) };
    let q = chunks4(pad4(&inputs.q));
    let k = chunks4(pad4(&inputs.k));
    let v = chunks4(pad4(&inputs.v));
    let beta: Tensor<5> = chunks3(pad3(&inputs.beta)).unsqueeze_dim(4); // [b, nc, h, C, 1]
    let gamma = chunks3(pad3(&inputs.g)).cumsum(3); // [b, nc, h, C]
    let column = |t: Tensor<4>| -> Tensor<5> { t.unsqueeze_dim(4) }; // [.., C, 1]
    let row = |t: Tensor<4>| -> Tensor<5> { t.unsqueeze_dim(3) }; // [.., 1, C]
    let square = [batch, n_chunks, h, chunk, chunk];
    let above = Tensor::<2, Bool>::tril_mask([chunk, chunk], 0, &device)
        .reshape([1, 1, 1, chunk, chunk])
        .expand(square);
    let diagonal_and_above = Tensor::<2, Bool>::tril_mask([chunk, chunk], -1, &device)
        .reshape([1, 1, 1, chunk, chunk])
        .expand(square);
    let decay = (column(gamma.clone()) - row(gamma.clone()))
        .mask_fill(above, f32::NEG_INFINITY)
        .exp(); // Γ: [b, nc, h, C, C]
    let a = (product_of(k.clone(), k.clone(), false, true) * decay.clone() * beta.clone())
        .mask_fill(diagonal_and_above, 0.0);
    let t = unit_lower_inverse(a); // T = (I + A)⁻¹
    let gamma_exp = column(gamma.clone()).exp(); // [b, nc, h, C, 1]
    let u_tilde = product_of(t.clone(), v * beta.clone(), false, false); // [b, nc, h, C, V]
    let w = product_of(t, k.clone() * (beta * gamma_exp.clone()), false, false); // [b, nc, h, C, K]
    let qk = product_of(q.clone(), k.clone(), false, true) * decay; // [b, nc, h, C, C]
    let q_decayed = q * gamma_exp;
    let last = gamma.clone().narrow(3, chunk - 1, 1); // [b, nc, h, 1]
    let k_to_end = k * column(last.clone() - gamma).exp(); // [b, nc, h, C, K]
    let o = delta_chunk_recurrence(ChunkInputs {
        u_tilde,
        w,
        q_decayed,
        qk,
        k_to_end,
        alpha: last.exp().reshape([batch, n_chunks, h, 1, 1]),
    }); // [b, nc, h, C, V]
    let o = o.swap_dims(2, 3).reshape([batch, padded, h, value_dim]);
    let [o] = split_array(o, 1, &[seq]); // the steps before the padding
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Size;
    use burn::tensor::Distribution;

    /// A `gdn` d128 model on the CPU with autodiff, its weights drawn from `seed`, and a
    /// `[2, 9, 128]` input.
    fn model_and_input(seed: u64) -> (GatedDeltaNet, Tensor<3>) {
        let device = Device::flex().autodiff();
        device.seed(seed);
        let model = GatedDeltaNet::init(&ModelConfig::new(Family::Gdn, Size::D128), &device)
            .expect("gdn d128");
        let x = Tensor::<3>::random([2, 9, 128], Distribution::Normal(0.0, 1.0), &device);
        (model, x)
    }

    /// Each of `got`'s lists within 10⁻⁵ (relative beyond 1) of `want`'s, named by `names`.
    fn assert_close_lists(got: &[Vec<f32>], want: &[Vec<f32>], names: &[&str]) {
        for ((got, want), name) in got.iter().zip(want).zip(names) {
            crate::causal_conv::tests::assert_close(got, want, name);
        }
    }

    /// The mixer's six projections as one product and its three convolutions as one (the path of
    /// cubecl's devices, run here on the CPU) give the separate layers' q, k, v, β, decay and
    /// gate, and the same gradients for the input and for the weights of a projection and a
    /// convolution of each kind, to rounding (the packed product adds the same terms, perhaps
    /// blocked otherwise).
    #[test]
    fn the_packed_projections_are_the_separate_layers() {
        let _rng = crate::rng::rng_lock();
        let (model, x) = model_and_input(41);
        let layer = &model.backbone.layers[0].attn;
        let run = |f: &dyn Fn(Tensor<3>) -> (DeltaRuleInputs, Tensor<3>)| {
            let x = x.clone().detach().require_grad();
            let (inputs, gate) = f(x.clone());
            let parts = [inputs.q, inputs.k, inputs.v].map(|t| t.reshape([-1]));
            let others = [inputs.beta, inputs.g, gate].map(|t| t.reshape([-1]));
            let out: Tensor<1> = Tensor::cat([parts, others].concat(), 0);
            let n = out.dims()[0];
            let r = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0);
            let r =
                Tensor::<1>::from_data(TensorData::new(r.collect::<Vec<_>>(), [n]), &x.device());
            let grads = (out.clone() * r).sum().backward();
            let values = |t: TensorData| t.try_to_vec::<f32>().expect("f32");
            let grad = |p: Tensor<2>| values(p.grad(&grads).expect("tracked").into_data());
            let conv = layer.v_conv1d.weight.val().grad(&grads).expect("tracked");
            [
                values(out.inner().into_data()),
                values(x.grad(&grads).expect("tracked").into_data()),
                grad(layer.k_proj.weight.val()),
                grad(layer.a_proj.weight.val()),
                grad(layer.g_proj.weight.val()),
                values(conv.into_data()),
            ]
        };
        let want = run(&|x| layer.inputs_and_gate_separately(x));
        let got = run(&|x| layer.inputs_and_gate_packed(x));
        let names = ["outputs", "x", "k_proj", "a_proj", "g_proj", "v_conv1d"];
        assert_close_lists(&got, &want, &names);
    }

    /// The MLP's packed product and `swiglu` (the path of cubecl's devices, run here on the CPU)
    /// give the CPU's two products' output and gradients for the input and every weight, to
    /// rounding.
    #[test]
    fn the_packed_mlp_is_the_two_products() {
        let _rng = crate::rng::rng_lock();
        let (model, x) = model_and_input(43);
        let mlp = &model.backbone.layers[0].mlp;
        let run = |f: &dyn Fn(Tensor<3>) -> Tensor<3>| {
            let x = x.clone().detach().require_grad();
            let out = f(x.clone());
            let grads = (out.clone() * out.clone()).sum().backward();
            let values = |t: TensorData| t.try_to_vec::<f32>().expect("f32");
            let grad = |p: Tensor<2>| values(p.grad(&grads).expect("tracked").into_data());
            [
                values(out.inner().into_data()),
                values(x.grad(&grads).expect("tracked").into_data()),
                grad(mlp.gate_proj.weight.val()),
                grad(mlp.up_proj.weight.val()),
                grad(mlp.down_proj.weight.val()),
            ]
        };
        let want = run(&|x| mlp.forward(x));
        let got = run(&|x| mlp.forward_packed(x));
        let names = ["output", "x", "gate_proj", "up_proj", "down_proj"];
        assert_close_lists(&got, &want, &names);
    }

    /// `(I + A) T − I` at its largest, and `T`'s largest entry, for `A` given row by row.
    fn residual_and_size(a: &[f32], chunk: usize) -> (f32, f32) {
        let device = Device::flex();
        let a5 = Tensor::<2>::from_data(TensorData::new(a.to_vec(), [chunk, chunk]), &device)
            .reshape([1, 1, 1, chunk, chunk]);
        let t = unit_lower_inverse(a5.clone());
        let eye = Tensor::<2>::eye(chunk, &device).reshape([1, 1, 1, chunk, chunk]);
        let residual = (eye.clone() + a5).matmul(t.clone()) - eye;
        let largest = |x: Tensor<5>| x.abs().max().into_scalar();
        (largest(residual), largest(t))
    }

    /// The block-by-block inverse at chunk sizes that are and are not powers of two, for an `A`
    /// of pseudo-random entries in (−1, 1) (whose inverse reaches 1,462 at C = 64: the residual
    /// is held relative to it) and for the one of equal keys with β = 2 and no decay
    /// (`A_ij = 2` below the diagonal), where the inverse's entries stay within 2 but the series
    /// `Σ (−A)ᵏ` summed by repeated squaring in f32 was off by 10²⁰ at C = 64.
    #[test]
    fn unit_lower_inverse_inverts_at_every_chunk_size() {
        for chunk in [1, 2, 3, 5, 16, 23, 64] {
            let strictly_lower = |value: &dyn Fn(usize) -> f32| -> Vec<f32> {
                (0..chunk * chunk)
                    .map(|n| if n / chunk > n % chunk { value(n) } else { 0.0 })
                    .collect()
            };
            let random = strictly_lower(&|n| ((n * 7919 % 1000) as f32 / 500.0) - 1.0);
            let (residual, size) = residual_and_size(&random, chunk);
            assert!(
                residual < 1e-5 * size.max(1.0),
                "chunk {chunk}, random A: residual {residual}, |T| {size}"
            );
            let equal_keys = strictly_lower(&|_| 2.0);
            let (residual, size) = residual_and_size(&equal_keys, chunk);
            assert!(
                residual < 1e-5,
                "chunk {chunk}, equal keys: residual {residual}"
            );
            assert!(size <= 2.0 + 1e-5, "chunk {chunk}, equal keys: |T| {size}");
        }
    }
}
