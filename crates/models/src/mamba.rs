//! `mamba2` and `mamba3` (spec B.4): mamba_ssm's residual blocks around a Mamba-2 or Mamba-3
//! mixer and a GatedMLP, as the reference builds them.
//!
//! - `r = Dropout(Emb(moves))`; per block `r += Mixer(RMSNorm(r))`, `r += GatedMLP(RMSNorm2(r))`;
//!   then `RMSNorm_final` (all eps 1e-5) and the head. The embedding dropout is the family's
//!   only dropout (spec D.3).
//! - d_state N = 128, expand 2 (`d_inner = 2d`), head dim P = 64 (`nheads = d/32`), one group of
//!   B/C shared by the heads, GatedMLP width 4d.
//! - Both mixers reduce to the scalar-decay recurrence of [`crate::recurrent`], evaluated with
//!   the config's [`Scan`] (sequential loop or chunked SSD). Mamba-2 has one key slot per step
//!   (`k = B_t`, `v = Δ_t x_t`). Mamba-3's trapezoid update
//!   `S_t = α_t S_{t−1} + (1−λ_t) Δ_t α_t v_{t−1} k_{t−1}ᵀ + λ_t Δ_t v_t k_tᵀ` has two per rank:
//!   the previous token's key and value weighted by `(1−λ_t) Δ_t α_t`, and the current one's
//!   weighted by `λ_t Δ_t`.
//! - Mamba-3 is SISO by default (the released presets). `mamba3_mimo` builds the paper's MIMO
//!   variant (rank `mamba3_mimo_rank`, 4 by default). MIMO follows the reference's step function
//!   as the spec describes it; two kernel details are **UNCERTAIN** in the spec and chosen here:
//!   the B/C projection is read as `[rank, N]` (rank-major), and the rotary angles pair
//!   coordinate `i` with `i + 32` inside the 64 rotated dims (SISO pairs `2i` with `2i + 1`).
//! - Model-level re-init (spec B.4): head bias 0, embedding N(0, 0.02²), `out_proj` and `fc2`
//!   weights U(±1/√fan_in)/√(2L); `in_proj`, `fc1` and the head weight keep PyTorch's default;
//!   the conv keeps PyTorch's default (U(±0.5) for weight and bias); `A_log = log U(1, 16)`;
//!   `dt_bias` as in [`dt_bias_init`]; D, norm weights and Mamba-3's B/C biases are ones.

use std::f64::consts::PI;

use burn::module::Param;
use burn::nn::{
    Dropout, DropoutConfig, Embedding, Initializer, Linear, LinearConfig, RmsNorm, RmsNormConfig,
};
use burn::prelude::*;
use burn::tensor::activation::{sigmoid, silu, softplus};

use crate::config::{Family, ModelConfig, Precision, Scan};
use crate::dropout::dropout;
use crate::embedding_grad::embed;
use crate::error::ModelError;
use crate::glu::{GateHalf, swiglu};
use crate::head::{EmbeddingInit, HeadInit, input_embedding, output_head, torch_linear};
use crate::hidden::Tap;
use crate::mixed;
use crate::model::StateModel;
use crate::recurrent::{CausalConv1d, a_log_init, dt_bias_init, scalar_decay_scan};
use crate::rms_norm::rms_norm;
use crate::split::split_array;

/// Epsilon of every RMSNorm in the family.
pub const NORM_EPS: f64 = 1e-5;
/// SSM state size N.
pub const D_STATE: usize = 128;
/// `d_inner = EXPAND · d`.
pub const EXPAND: usize = 2;
/// Head dimension P.
pub const HEAD_DIM: usize = 64;
/// Mamba-2's conv kernel size.
pub const D_CONV: usize = 4;
/// Mamba-3's number of rotary angles: `(N · 0.5) / 2`.
pub const N_ANGLES: usize = 32;
/// Standard deviation of the embedding re-init.
pub const EMBEDDING_STD: f64 = 0.02;
/// Mamba-3's upper bound on the data-dependent decay rate `A_t`.
pub const A_MAX: f64 = -1e-4;

/// The Mamba family (checkpoint keys in the field docs).
#[derive(Module, Debug)]
pub struct Mamba {
    /// `embedding`: Embedding(20482, d), N(0, 0.02²).
    pub embedding: Embedding,
    /// `layers.{i}`.
    pub layers: Vec<MambaBlock>,
    /// `final_norm`: RMSNorm(d, 1e-5).
    pub final_norm: RmsNorm,
    /// `output_head`: Linear(d → 1878), PyTorch default weight, zero bias.
    pub output_head: Linear,
    /// Dropout on the embedding, the family's only dropout.
    pub dropout: Dropout,
    /// The arithmetic of the output head (every layer's own is in its mixer and MLP).
    #[module(skip)]
    pub precision: Precision,
}

/// mamba_ssm's `Block` (non-fused path) with a GatedMLP.
#[derive(Module, Debug)]
pub struct MambaBlock {
    /// `norm`: before the mixer.
    pub norm: RmsNorm,
    /// `mixer`.
    pub mixer: Mixer,
    /// `norm2`: before the MLP.
    pub norm2: RmsNorm,
    /// `mlp`.
    pub mlp: GatedMlp,
}

/// The token mixer of a block.
#[derive(Module, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one mixer per layer; boxing would not pay"
)]
pub enum Mixer {
    /// Mamba-2 (`mamba2`).
    Mamba2(Mamba2Mixer),
    /// Mamba-3, SISO or MIMO (`mamba3`).
    Mamba3(Mamba3Mixer),
}

/// GatedMLP: `fc2(y ⊙ SiLU(gate))` with `[y, gate] = fc1(x)` (value first, unlike the
/// Transformer's SwiGLU).
#[derive(Module, Debug)]
pub struct GatedMlp {
    /// `fc1`: Linear(d → 8d), no bias.
    pub fc1: Linear,
    /// `fc2`: Linear(4d → d), no bias.
    pub fc2: Linear,
    /// The arithmetic of `fc1` and `fc2`.
    #[module(skip)]
    pub precision: Precision,
}

/// The Mamba-2 mixer.
#[derive(Module, Debug)]
pub struct Mamba2Mixer {
    /// `in_proj`: Linear(d → 2·d_inner + 2N + nheads), no bias; `[z | xBC | dt]`.
    pub in_proj: Linear,
    /// `conv1d`: depthwise causal conv over the `d_inner + 2N` xBC channels, with bias.
    pub conv1d: CausalConv1d,
    /// `dt_bias`: `[nheads]`.
    pub dt_bias: Param<Tensor<1>>,
    /// `A_log`: `[nheads]`.
    pub a_log: Param<Tensor<1>>,
    /// `D`: `[nheads]`, the skip.
    pub d: Param<Tensor<1>>,
    /// `norm`: gated RMSNorm over `d_inner` (gate applied before the norm).
    pub norm: RmsNorm,
    /// `out_proj`: Linear(d_inner → d), no bias.
    pub out_proj: Linear,
    /// Number of heads.
    pub n_heads: usize,
    /// Sequential or chunked recurrence.
    #[module(skip)]
    pub scan: Scan,
    /// Steps per chunk when chunked.
    pub chunk_size: usize,
    /// The arithmetic of `in_proj` and `out_proj`.
    #[module(skip)]
    pub precision: Precision,
}

/// The Mamba-3 mixer (SISO when `rank == 1` and the `mimo_*` parameters are absent).
#[derive(Module, Debug)]
pub struct Mamba3Mixer {
    /// `in_proj`: Linear(d → 2·d_inner + 2NR + 3·nheads + 32), no bias;
    /// `[z | x | B | C | dd_dt | dd_A | trap | angle]`.
    pub in_proj: Linear,
    /// `dt_bias`: `[nheads]`.
    pub dt_bias: Param<Tensor<1>>,
    /// `B_bias`: `[nheads, R, N]`, ones.
    pub b_bias: Param<Tensor<3>>,
    /// `C_bias`: `[nheads, R, N]`, ones.
    pub c_bias: Param<Tensor<3>>,
    /// `B_norm`: RMSNorm(N, 1e-5).
    pub b_norm: RmsNorm,
    /// `C_norm`: RMSNorm(N, 1e-5).
    pub c_norm: RmsNorm,
    /// `D`: `[nheads]`, ones.
    pub d: Param<Tensor<1>>,
    /// `out_proj`: Linear(d_inner → d), no bias.
    pub out_proj: Linear,
    /// MIMO only, `mimo_x`: `[nheads, R, P]`, 1/R (value up-projection).
    pub mimo_x: Option<Param<Tensor<3>>>,
    /// MIMO only, `mimo_z`: `[nheads, R, P]`, ones (gate up-projection).
    pub mimo_z: Option<Param<Tensor<3>>>,
    /// MIMO only, `mimo_o`: `[nheads, R, P]`, 1/R (output down-projection).
    pub mimo_o: Option<Param<Tensor<3>>>,
    /// Number of heads.
    pub n_heads: usize,
    /// Rank R (1 for SISO).
    pub rank: usize,
    /// Sequential or chunked recurrence.
    #[module(skip)]
    pub scan: Scan,
    /// Steps per chunk when chunked.
    pub chunk_size: usize,
    /// The arithmetic of `in_proj` and `out_proj`.
    #[module(skip)]
    pub precision: Precision,
}

impl Mamba {
    /// A freshly initialised model for `config` (`mamba2` or `mamba3`).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when `config.family` is not a Mamba family.
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        let d = config.d_model();
        let n_layers = config.n_layers();
        let norm = |n: usize| RmsNormConfig::new(n).with_epsilon(NORM_EPS).init(device);
        // U(±1/√fan_in)/√(2L), the re-init of `out_proj.weight` and `fc2.weight`.
        let residual_out = |fan_in: usize, fan_out: usize| {
            let bound = 1.0 / (fan_in as f64).sqrt() / ((2 * n_layers) as f64).sqrt();
            LinearConfig::new(fan_in, fan_out)
                .with_bias(false)
                .with_initializer(Initializer::Uniform {
                    min: -bound,
                    max: bound,
                })
                .init(device)
        };
        let mut layers = Vec::with_capacity(n_layers);
        for _ in 0..n_layers {
            let mixer = match config.family {
                Family::Mamba2 => Mixer::Mamba2(Mamba2Mixer::init(
                    d,
                    residual_out(EXPAND * d, d),
                    config,
                    device,
                )),
                Family::Mamba3 => Mixer::Mamba3(Mamba3Mixer::init(
                    d,
                    residual_out(EXPAND * d, d),
                    config,
                    device,
                )),
                other => {
                    return Err(ModelError::InvalidConfig {
                        field: "family",
                        reason: format!("{other} is not a Mamba family"),
                    });
                }
            };
            layers.push(MambaBlock {
                norm: norm(d),
                mixer,
                norm2: norm(d),
                mlp: GatedMlp {
                    fc1: torch_linear(d, 8 * d, false, device),
                    fc2: residual_out(4 * d, d),
                    precision: config.precision,
                },
            });
        }
        Ok(Self {
            embedding: input_embedding(d, EmbeddingInit::Normal { std: EMBEDDING_STD }, device),
            layers,
            final_norm: norm(d),
            output_head: output_head(d, HeadInit::TorchDefaultZeroBias, device),
            dropout: DropoutConfig::new(config.dropout).init(),
            precision: config.precision,
        })
    }

    /// The same model computing in `precision` (its parameters untouched).
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        for layer in &mut self.layers {
            layer.mlp.precision = precision;
            match &mut layer.mixer {
                Mixer::Mamba2(mixer) => mixer.precision = precision,
                Mixer::Mamba3(mixer) => mixer.precision = precision,
            }
        }
        self
    }
}

impl StateModel for Mamba {
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3> {
        let x = dropout(&self.dropout, embed(&self.embedding, moves)); // [batch, seq, d]
        let mut x = tap.at(0, x);
        for (i, layer) in self.layers.iter().enumerate() {
            x = tap.at(i + 1, layer.forward(x));
        }
        tap.at(self.layers.len() + 1, rms_norm(&self.final_norm, x))
    }

    fn blocks(&self) -> usize {
        self.layers.len()
    }

    fn head(&self) -> &Linear {
        &self.output_head
    }

    fn precision(&self) -> Precision {
        self.precision
    }
}

impl MambaBlock {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let normed = rms_norm(&self.norm, x.clone());
        let mixed = match &self.mixer {
            Mixer::Mamba2(mixer) => mixer.forward(normed),
            Mixer::Mamba3(mixer) => mixer.forward(normed),
        };
        let x = x + mixed;
        x.clone() + self.mlp.forward(rms_norm(&self.norm2, x))
    }
}

impl GatedMlp {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        // `fc1` is one [d, 8d] weight (the reference's layout): value columns, then gate.
        let u = mixed::linear(self.precision, &self.fc1, x); // [batch, seq, 8d]
        mixed::linear(self.precision, &self.fc2, swiglu(u, GateHalf::Second))
    }
}

impl Mamba2Mixer {
    /// A freshly initialised mixer for width `d` with the given (re-initialised) `out_proj`.
    pub fn init(d: usize, out_proj: Linear, config: &ModelConfig, device: &Device) -> Self {
        let d_inner = EXPAND * d;
        let n_heads = d_inner / HEAD_DIM;
        let conv_channels = d_inner + 2 * D_STATE;
        // PyTorch's Conv1d default with fan_in = kernel = 4: U(±0.5) for weight and bias.
        let conv_bound = 1.0 / (D_CONV as f64).sqrt();
        Self {
            in_proj: torch_linear(d, 2 * d_inner + 2 * D_STATE + n_heads, false, device),
            conv1d: CausalConv1d::init(
                conv_channels,
                D_CONV,
                true,
                &Initializer::Uniform {
                    min: -conv_bound,
                    max: conv_bound,
                },
                device,
            ),
            dt_bias: dt_bias_init(n_heads, device),
            a_log: a_log_init(n_heads, 1.0, 16.0, device),
            d: Initializer::Ones.init([n_heads], device),
            norm: RmsNormConfig::new(d_inner)
                .with_epsilon(NORM_EPS)
                .init(device),
            out_proj,
            n_heads,
            scan: config.scan,
            chunk_size: config.chunk_size_on(device),
            precision: config.precision,
        }
    }

    /// # Shapes
    /// - `x`: `[batch, seq, d]` (the normed block input)
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let (h, p, n) = (self.n_heads, HEAD_DIM, D_STATE);
        let d_inner = h * p;
        let zxbcdt = mixed::linear(self.precision, &self.in_proj, x);
        let [z, xbc, dt] = split_array(zxbcdt, 2, &[d_inner, d_inner + 2 * n, h]);
        let [xs, b, c] = split_array(silu(self.conv1d.forward(xbc)), 2, &[d_inner, n, n]);
        let xs: Tensor<4> = xs.reshape([batch, seq, h, p]);
        // One group (ngroups = 1): every head reads the same `B` and `C`, which the scan
        // broadcasts over the heads.
        let shared = |t: Tensor<3>| -> Tensor<5> { t.reshape([batch, seq, 1, 1, n]) };
        let (b, c) = (shared(b), shared(c));
        let dt = softplus(dt + self.dt_bias.val().reshape([1, 1, h]), 1.0); // [batch, seq, h]
        let a = self.a_log.val().exp().neg().reshape([1, 1, h]);
        let log_decay = dt.clone() * a;
        let v: Tensor<5> =
            (xs.clone() * dt.reshape([batch, seq, h, 1])).reshape([batch, seq, h, 1, p]);
        let y: Tensor<4> = scalar_decay_scan(log_decay, c, b, v, self.scan, self.chunk_size)
            .reshape([batch, seq, h, p]);
        let y = y + xs * self.d.val().reshape([1, 1, h, 1]);
        let y = rms_norm(&self.norm, y.reshape([batch, seq, d_inner]) * silu(z));
        mixed::linear(self.precision, &self.out_proj, y)
    }
}

/// The inputs of Mamba-3's recurrence for one layer, before the scan.
#[derive(Debug, Clone)]
pub struct Mamba3Inputs {
    /// Log decay `A_t · Δ_t`, so `α_t = exp(A_t Δ_t)`. `[batch, seq, h]`
    pub log_decay: Tensor<3>,
    /// `Δ_t = softplus(dd_dt + dt_bias)`. `[batch, seq, h]`
    pub dt: Tensor<3>,
    /// Trapezoid mixing `λ_t = σ(trap_t)`. `[batch, seq, h]`
    pub lambda: Tensor<3>,
    /// Rotated queries `Rot(RMSNorm(C) + C_bias, θ)`. `[batch, seq, h, R, N]`
    pub q: Tensor<5>,
    /// Rotated keys `Rot(RMSNorm(B) + B_bias, θ)`. `[batch, seq, h, R, N]`
    pub k: Tensor<5>,
    /// Values `x_t[h]` (times `mimo_x` for MIMO). `[batch, seq, h, R, P]`
    pub v: Tensor<5>,
    /// The gate input `z_t[h]`. `[batch, seq, h, 1, P]`
    pub z: Tensor<5>,
}

impl Mamba3Mixer {
    /// A freshly initialised mixer for width `d` with the given (re-initialised) `out_proj`;
    /// MIMO with rank `config.mamba3_mimo_rank` when `config.mamba3_mimo`.
    pub fn init(d: usize, out_proj: Linear, config: &ModelConfig, device: &Device) -> Self {
        let d_inner = EXPAND * d;
        let n_heads = d_inner / HEAD_DIM;
        let rank = if config.mamba3_mimo {
            config.mamba3_mimo_rank.max(1)
        } else {
            1
        };
        let width = 2 * d_inner + 2 * D_STATE * rank + 3 * n_heads + N_ANGLES;
        let norm = || {
            RmsNormConfig::new(D_STATE)
                .with_epsilon(NORM_EPS)
                .init(device)
        };
        let constant = |value: f64| {
            config
                .mamba3_mimo
                .then(|| Initializer::Constant { value }.init([n_heads, rank, HEAD_DIM], device))
        };
        Self {
            in_proj: torch_linear(d, width, false, device),
            dt_bias: dt_bias_init(n_heads, device),
            b_bias: Initializer::Ones.init([n_heads, rank, D_STATE], device),
            c_bias: Initializer::Ones.init([n_heads, rank, D_STATE], device),
            b_norm: norm(),
            c_norm: norm(),
            d: Initializer::Ones.init([n_heads], device),
            out_proj,
            mimo_x: constant(1.0 / rank as f64),
            mimo_z: constant(1.0),
            mimo_o: constant(1.0 / rank as f64),
            n_heads,
            rank,
            scan: config.scan,
            chunk_size: config.chunk_size_on(device),
            precision: config.precision,
        }
    }

    /// Splits the input projection and computes the recurrence's inputs (spec B.4, SISO
    /// forward up to the state update).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]` (the normed block input)
    /// - output: see [`Mamba3Inputs`]
    pub fn inputs(&self, x: Tensor<3>) -> Mamba3Inputs {
        let [batch, seq, _] = x.dims();
        let (h, p, n, r) = (self.n_heads, HEAD_DIM, D_STATE, self.rank);
        let d_inner = h * p;
        let u = mixed::linear(self.precision, &self.in_proj, x);
        let widths = [d_inner, d_inner, n * r, n * r, h, h, h, N_ANGLES];
        let [z, xs, b, c, dd_dt, dd_a, trap, angle] = split_array(u, 2, &widths);

        let dt = softplus(dd_dt + self.dt_bias.val().reshape([1, 1, h]), 1.0); // [batch, seq, h]
        let a = softplus(dd_a, 1.0).neg().clamp_max(A_MAX);
        let log_decay = a * dt.clone();
        let lambda = sigmoid(trap);
        let theta: Tensor<4> = (angle.tanh().reshape([batch, seq, 1, N_ANGLES])
            * dt.clone().reshape([batch, seq, h, 1])
            * PI)
            .cumsum(1); // [batch, seq, h, 32]
        let pairing = if self.mimo_x.is_some() {
            Pairing::Halves
        } else {
            Pairing::Adjacent
        };
        let project = |t: Tensor<3>, norm: &RmsNorm, bias: &Param<Tensor<3>>| -> Tensor<5> {
            let normed: Tensor<5> = rms_norm(norm, t.reshape([batch, seq, 1, r, n]));
            let biased = normed + bias.val().reshape([1, 1, h, r, n]);
            rotate(biased, theta.clone(), pairing)
        };
        let q = project(c, &self.c_norm, &self.c_bias);
        let k = project(b, &self.b_norm, &self.b_bias);
        let xs: Tensor<5> = xs.reshape([batch, seq, h, 1, p]);
        let v = match &self.mimo_x {
            Some(up) => xs * up.val().reshape([1, 1, h, r, p]),
            None => xs,
        };
        Mamba3Inputs {
            log_decay,
            dt,
            lambda,
            q,
            k,
            v,
            z: z.reshape([batch, seq, h, 1, p]),
        }
    }

    /// # Shapes
    /// - `x`: `[batch, seq, d]` (the normed block input)
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, _] = x.dims();
        let (h, p) = (self.n_heads, HEAD_DIM);
        let inputs = self.inputs(x);
        let y = mamba3_recurrence(&inputs, self.scan, self.chunk_size); // [batch, seq, h, R, P]
        let y = y + inputs.v.clone() * self.d.val().reshape([1, 1, h, 1, 1]);
        let y: Tensor<4> = match (&self.mimo_z, &self.mimo_o) {
            (Some(up), Some(down)) => {
                let r = self.rank;
                let gate = silu(inputs.z * up.val().reshape([1, 1, h, r, p]));
                (y * gate * down.val().reshape([1, 1, h, r, p]))
                    .sum_dim(3)
                    .reshape([batch, seq, h, p])
            }
            _ => (y * silu(inputs.z)).reshape([batch, seq, h, p]),
        };
        mixed::linear(
            self.precision,
            &self.out_proj,
            y.reshape([batch, seq, h * p]),
        )
    }
}

/// Mamba-3's trapezoid recurrence without the D skip:
///
/// ```text
/// S_t     = α_t S_{t−1} + (1−λ_t) Δ_t α_t Σ_r v_{t−1,r} k_{t−1,r}ᵀ + λ_t Δ_t Σ_r v_{t,r} k_{t,r}ᵀ
/// y_{t,r} = S_t q_{t,r}
/// ```
///
/// evaluated as a scalar-decay scan with 2R key slots: the previous step's keys and values
/// (zero before the first step) and the current ones.
///
/// # Shapes
/// - inputs: see [`Mamba3Inputs`]
/// - output: `[batch, seq, h, R, P]`
pub fn mamba3_recurrence(inputs: &Mamba3Inputs, scan: Scan, chunk_size: usize) -> Tensor<5> {
    let [batch, seq, h, r, _] = inputs.k.dims();
    let device = inputs.k.device();
    let previous = |t: &Tensor<5>| -> Tensor<5> {
        let [b, s, hh, m, w] = t.dims();
        if s == 0 {
            return t.clone();
        }
        let [head] = split_array(t.clone(), 1, &[s - 1]);
        Tensor::cat(vec![Tensor::zeros([b, 1, hh, m, w], &device), head], 1)
    };
    let current_weight = (inputs.lambda.clone() * inputs.dt.clone()).reshape([batch, seq, h, 1, 1]);
    let previous_weight =
        ((inputs.lambda.clone().neg() + 1.0) * inputs.dt.clone() * inputs.log_decay.clone().exp())
            .reshape([batch, seq, h, 1, 1]);
    let keys = Tensor::cat(vec![previous(&inputs.k), inputs.k.clone()], 3); // [.., 2R, N]
    let values = Tensor::cat(
        vec![
            previous(&inputs.v).expand([batch, seq, h, r, HEAD_DIM]) * previous_weight,
            inputs.v.clone().expand([batch, seq, h, r, HEAD_DIM]) * current_weight,
        ],
        3,
    ); // [.., 2R, P]
    scalar_decay_scan(
        inputs.log_decay.clone(),
        inputs.q.clone(),
        keys,
        values,
        scan,
        chunk_size,
    )
}

/// Which coordinates a rotary angle turns together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// `(2i, 2i+1)`: Mamba-3 SISO.
    Adjacent,
    /// `(i, i + n_angles)`: the MIMO kernel (UNCERTAIN in the spec).
    Halves,
}

/// Rotates the first `2·n_angles` coordinates of the last dimension pairwise,
/// `(a, b) → (a cos θ − b sin θ, a sin θ + b cos θ)`; the rest pass unchanged.
///
/// # Shapes
/// - `x`: `[batch, seq, h, R, N]`; `theta`: `[batch, seq, h, n_angles]`
/// - output: `[batch, seq, h, R, N]`
pub fn rotate(x: Tensor<5>, theta: Tensor<4>, pairing: Pairing) -> Tensor<5> {
    let [batch, seq, h, r, n] = x.dims();
    let [_, _, _, s] = theta.dims();
    let [rotated, rest] = split_array(x, 4, &[2 * s, n - 2 * s]);
    let rotated = match pairing {
        Pairing::Adjacent => {
            let pairs: Tensor<6> = rotated.reshape([batch, seq, h, r, s, 2]);
            let [a, b] = split_array(pairs, 5, &[1, 1]);
            let cos: Tensor<6> = theta.clone().cos().reshape([batch, seq, h, 1, s, 1]);
            let sin: Tensor<6> = theta.sin().reshape([batch, seq, h, 1, s, 1]);
            let new_a = a.clone() * cos.clone() - b.clone() * sin.clone();
            let new_b = a * sin + b * cos;
            Tensor::cat(vec![new_a, new_b], 5).reshape([batch, seq, h, r, 2 * s])
        }
        Pairing::Halves => {
            let [a, b] = split_array(rotated, 4, &[s, s]);
            let cos: Tensor<5> = theta.clone().cos().reshape([batch, seq, h, 1, s]);
            let sin: Tensor<5> = theta.sin().reshape([batch, seq, h, 1, s]);
            let new_a = a.clone() * cos.clone() - b.clone() * sin.clone();
            let new_b = a * sin + b * cos;
            Tensor::cat(vec![new_a, new_b], 4)
        }
    };
    Tensor::cat(vec![rotated, rest], 4)
}
