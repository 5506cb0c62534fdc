//! Pieces shared by the Gated DeltaNet and Mamba families: the short causal depthwise
//! convolution, the `dt_bias` init, and the scalar-decay linear recurrence that both Mamba
//! mixers reduce to (sequential and chunked forms).
//!
//! The scalar-decay recurrence, per batch row and head, with state `S ∈ ℝ^{P×N}` starting at 0:
//!
//! ```text
//! S_t     = a_t · S_{t−1} + Σ_m v_{t,m} k_{t,m}ᵀ        (a_t = exp(log_a_t))
//! y_{t,r} = S_t q_{t,r}
//! ```
//!
//! Mamba-2 is the case of one key slot (`k = B_t`, `v = Δ_t x_t`); Mamba-3 has two key slots per
//! rank (the current and the previous token, see [`crate::mamba`]).

use burn::module::Param;
use burn::nn::Initializer;
use burn::prelude::*;
use burn::tensor::Distribution;

use crate::causal_conv::causal_conv;
use crate::config::Scan;
use crate::products::product_of;
use crate::split::split_array;

/// Depthwise causal 1-d convolution over the channels of `[batch, seq, channels]` with zero
/// left-padding: `out_t[c] = Σ_i w[c, 0, i] · x_{t−K+1+i}[c] (+ bias[c])`, so the last tap
/// multiplies the current step. The weight has PyTorch's `Conv1d(C, C, K, groups = C)` shape,
/// and at least one tap. One autodiff node ([`causal_conv`]).
#[derive(Module, Debug)]
pub struct CausalConv1d {
    /// `weight`: `[channels, 1, kernel]`.
    pub weight: Param<Tensor<3>>,
    /// `bias`: `[channels]`, if the layer has one.
    pub bias: Option<Param<Tensor<1>>>,
}

impl CausalConv1d {
    /// A convolution with every weight (and bias, if any) drawn by `init`.
    pub fn init(
        channels: usize,
        kernel: usize,
        bias: bool,
        init: &Initializer,
        device: &Device,
    ) -> Self {
        Self {
            weight: init.init([channels, 1, kernel], device),
            bias: bias.then(|| init.init([channels], device)),
        }
    }

    /// # Shapes
    /// - `x`: `[batch, seq, channels]`
    /// - output: `[batch, seq, channels]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [_, _, channels] = x.dims();
        let out = causal_conv(x, self.weight.val());
        match &self.bias {
            Some(bias) => out + bias.val().reshape([1, 1, channels]),
            None => out,
        }
    }

    /// Several bias-free convolutions over their inputs side by side, as one convolution with
    /// their weights side by side: each channel has its own taps, so each input's channels
    /// come out as its own convolution would give them.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, Σ channels]`, the convolutions' inputs in their order
    /// - output: the same
    ///
    /// # Panics
    /// Where one of them has a bias: the layers that call it are built without.
    pub fn side_by_side(convolutions: &[&CausalConv1d], x: Tensor<3>) -> Tensor<3> {
        assert!(
            convolutions.iter().all(|c| c.bias.is_none()),
            "convolutions side by side have no bias"
        );
        let weight = Tensor::cat(convolutions.iter().map(|c| c.weight.val()).collect(), 0);
        causal_conv(x, weight)
    }
}

/// `softplus⁻¹(y) = y + log(−expm1(−y))`, in f64.
pub fn inverse_softplus(y: f64) -> f64 {
    y + (-(-y).exp_m1()).ln()
}

/// The `dt_bias` init of FLA and mamba_ssm: `softplus⁻¹(dt)` with
/// `dt = exp(U(log 1e-3, log 1e-1))` clamped to at least 1e-4. `[n]`
pub fn dt_bias_init(n: usize, device: &Device) -> Param<Tensor<1>> {
    let (lo, hi) = (1e-3f64.ln(), 1e-1f64.ln());
    let dt = Tensor::<1>::random([n], Distribution::Uniform(lo, hi), device)
        .exp()
        .clamp_min(1e-4);
    // softplus⁻¹(dt) = dt + log(1 − exp(−dt)); f32 rounding here is far below the spread of
    // the distribution.
    let inverse = dt.clone() + (dt.neg().exp().neg() + 1.0).log();
    Param::from_tensor(inverse)
}

/// `log U(lo, hi)`: the `A_log` init (FLA: U(0, 16); mamba_ssm: U(1, 16)). `[n]`
pub fn a_log_init(n: usize, lo: f64, hi: f64, device: &Device) -> Param<Tensor<1>> {
    // U(0, 16) may draw an exact 0 in f32; keep log finite as torch's draw practically does.
    let u = Tensor::<1>::random([n], Distribution::Uniform(lo, hi), device).clamp_min(1e-30);
    Param::from_tensor(u.log())
}

/// The scalar-decay recurrence of the module doc, evaluated with `scan`.
///
/// # Shapes
/// - `log_a`: `[batch, seq, heads]` (log of the per-step decay, ≤ 0)
/// - `q`: `[batch, seq, heads, n_queries, N]`, or `[batch, seq, 1, n_queries, N]`: one set of
///   queries every head reads (Mamba-2's `C`, a single group)
/// - `k`: `[batch, seq, heads, n_keys, N]`, or `[batch, seq, 1, n_keys, N]` likewise (`B`)
/// - `v`: `[batch, seq, heads, n_keys, P]`
/// - output `y`: `[batch, seq, heads, n_queries, P]`
///
/// Queries and keys shared by the heads are broadcast, never copied per head, and the chunked
/// form takes their products once (as mamba_ssm's kernels do for a group).
pub fn scalar_decay_scan(
    log_a: Tensor<3>,
    q: Tensor<5>,
    k: Tensor<5>,
    v: Tensor<5>,
    scan: Scan,
    chunk_size: usize,
) -> Tensor<5> {
    match scan {
        Scan::Sequential => scalar_decay_sequential(log_a, q, k, v),
        Scan::Chunked => scalar_decay_chunked(log_a, q, k, v, chunk_size),
    }
}

/// The plain loop over steps (see [`scalar_decay_scan`] for shapes).
pub fn scalar_decay_sequential(
    log_a: Tensor<3>,
    q: Tensor<5>,
    k: Tensor<5>,
    v: Tensor<5>,
) -> Tensor<5> {
    let [batch, seq, query_heads, n_queries, n] = q.dims();
    let key_heads = k.dims()[2];
    let [_, _, heads, n_keys, p] = v.dims();
    let device = q.device();
    let a = log_a.exp();
    let mut state = Tensor::<4>::zeros([batch, heads, p, n], &device);
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let a_t: Tensor<4> = a.clone().narrow(1, t, 1).reshape([batch, heads, 1, 1]);
        let k_t: Tensor<4> = k
            .clone()
            .narrow(1, t, 1)
            .reshape([batch, key_heads, n_keys, n]);
        let v_t: Tensor<4> = v.clone().narrow(1, t, 1).reshape([batch, heads, n_keys, p]);
        let q_t: Tensor<4> = q
            .clone()
            .narrow(1, t, 1)
            .reshape([batch, query_heads, n_queries, n]);
        // Σ_m v_m k_mᵀ = Vᵀ K: [batch, heads, P, N]
        state = state * a_t + v_t.swap_dims(2, 3).matmul(k_t);
        // y_r = S q_r, as rows: Q Sᵀ: [batch, heads, n_queries, P]
        outputs.push(q_t.matmul(state.clone().swap_dims(2, 3)));
    }
    Tensor::stack(outputs, 1)
}

/// The state at the start of each chunk, from each chunk's own contribution to the state at its
/// end (`own`: `[b, nc, h, P, N]`) and each chunk's total log decay (`log_decay`: `[b, nc, h]`):
///
/// ```text
/// start_c = Σ_{c' < c} exp(Σ_{j = c'+1}^{c−1} log_decay_j) · own_{c'}
/// ```
///
/// the recurrence `start_{c+1} = exp(log_decay_c) · start_c + own_c` unrolled into one product
/// over the chunk axis, as within a chunk. The exponents are partial sums over the chunks between
/// (a cumulative sum of a masked copy, as mamba_ssm's `segsum`), not differences of one running
/// sum, so a long sequence loses no precision to cancellation. A loop over the chunks would slice
/// `own` once per chunk, and each slice's gradient is a zero-filled tensor the size of `own`.
fn chunk_start_states(own: Tensor<5>, log_decay: Tensor<3>) -> Tensor<5> {
    let [batch, n_chunks, heads, p, n] = own.dims();
    let square = [batch, heads, n_chunks, n_chunks];
    // Row r, column c: true where c ≥ r (the mask keeps the strictly lower triangle).
    let on_or_above = Tensor::<2, Bool>::tril_mask([n_chunks, n_chunks], -1, &own.device())
        .reshape([1, 1, n_chunks, n_chunks])
        .expand(square);
    // Row j, column c': log_decay_j where j > c', else 0.
    let after_source = log_decay
        .swap_dims(1, 2)
        .reshape([batch, heads, n_chunks, 1])
        .expand(square)
        .mask_fill(on_or_above.clone(), 0.0);
    // Row c, column c': Σ_{c' < j ≤ c} log_decay_j, less chunk c's own (applied after its start).
    let exponent = after_source.clone().cumsum(2) - after_source;
    let weights = exponent.mask_fill(on_or_above, f32::NEG_INFINITY).exp(); // 0 where c' ≥ c
    let own = own.swap_dims(1, 2).reshape([batch, heads, n_chunks, p * n]);
    weights
        .matmul(own)
        .reshape([batch, heads, n_chunks, p, n])
        .swap_dims(1, 2)
}

/// The chunked form (SSD): inside each chunk of `chunk_size` steps the outputs are a masked,
/// decay-weighted attention `y_i = Σ_{j≤i} exp(c_i − c_j) (q_i·k_j) v_j` (with `c` the cumulative
/// log decay inside the chunk) plus the chunk's start state read out with decay `exp(c_i)`; the
/// start states are carried from chunk to chunk. See [`scalar_decay_scan`] for shapes.
pub fn scalar_decay_chunked(
    log_a: Tensor<3>,
    q: Tensor<5>,
    k: Tensor<5>,
    v: Tensor<5>,
    chunk_size: usize,
) -> Tensor<5> {
    let [batch, seq, _, n_queries, _] = q.dims();
    let [_, _, heads, n_keys, p] = v.dims();
    if seq == 0 {
        return Tensor::zeros([batch, 0, heads, n_queries, p], &q.device());
    }
    let device = q.device();
    let chunk = chunk_size.clamp(1, seq);
    let n_chunks = seq.div_ceil(chunk);
    let padded = n_chunks * chunk;
    let pad = padded - seq;
    // Padding after the end (decay 1, zero keys and values) changes no output.
    let pad5 = |t: Tensor<5>| -> Tensor<5> {
        if pad == 0 {
            return t;
        }
        let [b, _, h, m, w] = t.dims();
        Tensor::cat(vec![t, Tensor::zeros([b, pad, h, m, w], &device)], 1)
    };
    let log_a = if pad > 0 {
        Tensor::cat(vec![log_a, Tensor::zeros([batch, pad, heads], &device)], 1)
    } else {
        log_a
    };
    // [batch, n_chunks, heads, chunk, ·]
    let to_chunks = |t: Tensor<5>| -> Tensor<5> {
        let [b, _, h, m, w] = t.dims();
        t.reshape([b, n_chunks, chunk, h, m * w])
            .swap_dims(2, 3)
            .reshape([b, n_chunks, h, chunk * m, w])
    };
    let q = to_chunks(pad5(q)); // [b, nc, h, chunk·R, N]
    let k = to_chunks(pad5(k)); // [b, nc, h, chunk·M, N]
    let v = to_chunks(pad5(v)); // [b, nc, h, chunk·M, P]
    let cum: Tensor<4> = log_a
        .reshape([batch, n_chunks, chunk, heads])
        .swap_dims(2, 3)
        .cumsum(3); // [b, nc, h, chunk]
    // Row i (query step), column j (key step): exp(c_i − c_j) for j ≤ i, else 0.
    let diff = cum.clone().reshape([batch, n_chunks, heads, chunk, 1])
        - cum.clone().reshape([batch, n_chunks, heads, 1, chunk]);
    let future = Tensor::<2, Bool>::tril_mask([chunk, chunk], 0, &device)
        .reshape([1, 1, 1, chunk, chunk])
        .expand([batch, n_chunks, heads, chunk, chunk]);
    let decay: Tensor<5> = diff.mask_fill(future, f32::NEG_INFINITY).exp();
    let decay: Tensor<5> = decay
        .reshape([batch, n_chunks, heads, chunk, 1, chunk, 1])
        .expand([batch, n_chunks, heads, chunk, n_queries, chunk, n_keys])
        .reshape([batch, n_chunks, heads, chunk * n_queries, chunk * n_keys]);
    // With shared queries and keys their product is one per chunk, weighted per head here.
    let scores = product_of(q.clone(), k.clone(), false, true) * decay;
    let intra = product_of(scores, v.clone(), false, false); // [b, nc, h, chunk·R, P]

    // Each chunk's own contribution to the state at its end: Σ_j exp(c_last − c_j) v_j k_jᵀ.
    let last = cum.clone().narrow(3, chunk - 1, 1); // [b, nc, h, 1]
    let to_end: Tensor<5> = (last.clone() - cum.clone())
        .exp()
        .reshape([batch, n_chunks, heads, chunk, 1])
        .expand([batch, n_chunks, heads, chunk, n_keys])
        .reshape([batch, n_chunks, heads, chunk * n_keys, 1]);
    let chunk_states = product_of(v * to_end, k, true, false); // [b, nc, h, P, N]
    let starts = chunk_start_states(chunk_states, last.reshape([batch, n_chunks, heads]));
    let from_start: Tensor<5> = cum
        .exp()
        .reshape([batch, n_chunks, heads, chunk, 1])
        .expand([batch, n_chunks, heads, chunk, n_queries])
        .reshape([batch, n_chunks, heads, chunk * n_queries, 1]);
    let inter = product_of(q, starts, false, true) * from_start; // [b, nc, h, chunk·R, P]
    let y = (intra + inter)
        .reshape([batch, n_chunks, heads, chunk, n_queries * p])
        .swap_dims(2, 3)
        .reshape([batch, padded, heads, n_queries, p]);
    let [y] = split_array(y, 1, &[seq]); // the steps before the padding
    y
}
