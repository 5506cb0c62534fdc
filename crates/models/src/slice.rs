//! `slice` (block 8) and `slice_diag` (block 1) (spec B.2): pre-norm SLiCE layers with a GELU
//! MLP, no final norm.
//!
//! The recurrence `y_t = (I + A_t) y_{t−1} + c_t` runs either step by step ([`Scan::Sequential`])
//! or in chunks combined with an inclusive parallel scan ([`Scan::Chunked`]); on cubecl's devices
//! the chunked form is one operation with kernels of its own instead (`slice_scan.rs`).
//! Dropout (spec D.3): on the embedding and on both residual branches.

use burn::module::Param;
use burn::nn::{
    Dropout, DropoutConfig, Embedding, Initializer, Linear, LinearConfig, RmsNorm, RmsNormConfig,
};
use burn::prelude::*;
use burn::tensor::activation::gelu;

use crate::config::{ModelConfig, Scan};
use crate::dropout::dropout;
use crate::embedding_grad::embed;
use crate::error::ModelError;
use crate::head::{EmbeddingInit, HeadInit, input_embedding, output_head, torch_linear};
use crate::hidden::Tap;
use crate::mixed;
use crate::model::StateModel;
use crate::products::product_of;
use crate::rms_norm::rms_norm;
use crate::slice_scan;
use crate::split::{split_array, windows_array};

/// Epsilon of the layers' RMSNorms.
pub const NORM_EPS: f64 = 1e-6;
/// The preset's `init_std`.
pub const INIT_STD: f64 = 0.1;
/// The preset's increment scale.
pub const SCALE: f64 = 0.1;

/// The SLiCE family (checkpoint keys in the field docs).
#[derive(Module, Debug)]
pub struct Slice {
    /// `embedding`: Embedding(20482, d), N(0, 1).
    pub embedding: Embedding,
    /// `layers.{i}`.
    pub layers: Vec<SliceLayer>,
    /// `output_head`: Linear(d → 1878).
    pub output_head: Linear,
    /// Dropout on the embedding.
    pub dropout: Dropout,
}

/// One pre-norm SLiCE layer.
#[derive(Module, Debug)]
pub struct SliceLayer {
    /// `slice`: the recurrence.
    pub slice: SliceCell,
    /// `norm1`, before the recurrence.
    pub norm1: RmsNorm,
    /// `norm2`, before the MLP.
    pub norm2: RmsNorm,
    /// `token_mlp.0`: Linear(d → 4d) with bias.
    pub mlp_in: Linear,
    /// `token_mlp.2`: Linear(4d → d) with bias.
    pub mlp_out: Linear,
    /// Dropout on both residual branches.
    pub dropout: Dropout,
}

/// The SLiCE recurrence with block-diagonal (or diagonal) Euler transitions.
#[derive(Module, Debug)]
pub struct SliceCell {
    /// `init`: the learned state `y_0`. `[d]`
    pub init: Param<Tensor<1>>,
    /// `vf_A`: Linear(d+1 → d·b), no bias.
    pub vf_a: Linear,
    /// `vf_B`: Linear(d+1 → d), no bias.
    pub vf_b: Linear,
    /// Block size `b`.
    pub block: usize,
    /// Scale of the increments.
    pub scale: f64,
    /// Steps per chunk of the chunked scan.
    pub chunk_size: usize,
    /// Sequential or chunked.
    #[module(skip)]
    pub scan: Scan,
}

impl Slice {
    /// A freshly initialised SLiCE model for `config` (inits per spec B.2.7).
    ///
    /// # Errors
    /// [`ModelError::InvalidConfig`] when the block size does not divide `d`.
    pub fn init(config: &ModelConfig, device: &Device) -> Result<Self, ModelError> {
        config.validate()?;
        let d = config.d_model();
        let dropout = || DropoutConfig::new(config.dropout).init();
        let norm = || RmsNormConfig::new(d).with_epsilon(NORM_EPS).init(device);
        let layers = (0..config.n_layers())
            .map(|_| SliceLayer {
                slice: SliceCell::init(
                    d,
                    config.slice_block(),
                    config.scan,
                    config.chunk_size_on(device),
                    device,
                ),
                norm1: norm(),
                norm2: norm(),
                mlp_in: torch_linear(d, 4 * d, true, device),
                mlp_out: torch_linear(4 * d, d, true, device),
                dropout: dropout(),
            })
            .collect();
        Ok(Self {
            embedding: input_embedding(d, EmbeddingInit::TorchDefault, device),
            layers,
            output_head: output_head(d, HeadInit::TorchDefault, device),
            dropout: dropout(),
        })
    }
}

impl StateModel for Slice {
    fn features_tapped(&self, moves: Tensor<2, Int>, tap: &mut Tap<'_>) -> Tensor<3> {
        let x = dropout(&self.dropout, embed(&self.embedding, moves)); // [batch, seq, d]
        let mut x = tap.at(0, x);
        for (i, layer) in self.layers.iter().enumerate() {
            x = tap.at(i + 1, layer.forward(x));
        }
        // No final norm: the head input is the last block's output.
        tap.at(self.layers.len() + 1, x)
    }

    fn blocks(&self) -> usize {
        self.layers.len()
    }

    fn head(&self) -> &Linear {
        &self.output_head
    }
}

impl SliceLayer {
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let mixed = self.slice.forward(rms_norm(&self.norm1, x.clone()));
        let x = x + dropout(&self.dropout, mixed);
        let hidden = gelu(mixed::project(
            &self.mlp_in,
            rms_norm(&self.norm2, x.clone()),
        ));
        x + dropout(&self.dropout, mixed::project(&self.mlp_out, hidden))
    }
}

impl SliceCell {
    /// A freshly initialised cell: `init` ~ N(0, 0.1²), `vf_A` ~ N(0, (0.1/√b)²),
    /// `vf_B` ~ N(0, 0.1²).
    pub fn init(d: usize, block: usize, scan: Scan, chunk_size: usize, device: &Device) -> Self {
        let normal = |std: f64| Initializer::Normal { mean: 0.0, std };
        Self {
            init: normal(INIT_STD).init([d], device),
            vf_a: LinearConfig::new(d + 1, d * block)
                .with_bias(false)
                .with_initializer(normal(INIT_STD / (block as f64).sqrt()))
                .init(device),
            vf_b: LinearConfig::new(d + 1, d)
                .with_bias(false)
                .with_initializer(normal(INIT_STD))
                .init(device),
            block,
            scale: SCALE,
            chunk_size: chunk_size.max(1),
            scan,
        }
    }

    /// The same cell evaluated with another scan mode (for comparisons).
    pub fn with_scan(mut self, scan: Scan, chunk_size: usize) -> Self {
        self.scan = scan;
        self.chunk_size = chunk_size.max(1);
        self
    }

    /// Runs the recurrence over the normed layer input and returns `y_1..y_T`.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d]`
    /// - output: `[batch, seq, d]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, d] = x.dims();
        if seq == 0 {
            return x;
        }
        let device = x.device();
        // Driving path "values": ΔX_t = X_t − X_{t−1}, X_0 = 0.
        let [head] = split_array(x.clone(), 1, &[seq - 1]);
        let previous = Tensor::cat(vec![Tensor::zeros([batch, 1, d], &device), head], 1);
        let delta = x - previous;
        let u = Tensor::cat(vec![Tensor::ones([batch, seq, 1], &device), delta], 2) * self.scale; // [batch, seq, d+1]
        let a = mixed::project(&self.vf_a, u.clone()); // [batch, seq, d·b]
        let c = mixed::project(&self.vf_b, u); // [batch, seq, d]
        let y0 = self.init.val().reshape([1, d]).expand([batch, d]);
        let b = self.block;
        if self.scan == Scan::Chunked && slice_scan::by_kernel(&c, b) {
            // On cubecl's devices the recurrence is one operation of its own.
            return slice_scan::slice_scan(a, c, y0, b);
        }
        let transitions = if b == 1 {
            Transitions::Diagonal(a + 1.0)
        } else {
            let eye: Tensor<5> = Tensor::<2>::eye(b, &device).reshape([1, 1, 1, b, b]);
            Transitions::Block(a.reshape([batch, seq, d / b, b, b]) + eye)
        };
        match self.scan {
            Scan::Sequential => sequential(&transitions, c, y0),
            Scan::Chunked => chunked(transitions, c, y0, self.chunk_size),
        }
    }
}

/// Per-step transition matrices `M_t = I + A_t`.
enum Transitions {
    /// Diagonal: `[batch, seq, d]`.
    Diagonal(Tensor<3>),
    /// Block-diagonal: `[batch, seq, d/b, b, b]`.
    Block(Tensor<5>),
}

/// `M y` for one step of every sequence. `m`: one step's transitions, `y`: `[batch, d]`.
fn apply_step(transitions: &Transitions, t: usize, y: Tensor<2>) -> Tensor<2> {
    let [batch, d] = y.dims();
    match transitions {
        Transitions::Diagonal(m) => m.clone().narrow(1, t, 1).reshape([batch, d]) * y,
        Transitions::Block(m) => {
            let [_, _, n_blocks, b, _] = m.dims();
            let m: Tensor<4> = m.clone().narrow(1, t, 1).reshape([batch, n_blocks, b, b]);
            m.matmul(y.reshape([batch, n_blocks, b, 1]))
                .reshape([batch, d])
        }
    }
}

/// The plain loop: `y_t = M_t y_{t−1} + c_t`.
///
/// # Shapes
/// - `c`: `[batch, seq, d]`, `y0`: `[batch, d]`
/// - output: `[batch, seq, d]`
fn sequential(transitions: &Transitions, c: Tensor<3>, y0: Tensor<2>) -> Tensor<3> {
    let [batch, seq, d] = c.dims();
    let mut y = y0;
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        y = apply_step(transitions, t, y) + c.clone().narrow(1, t, 1).reshape([batch, d]);
        outputs.push(y.clone());
    }
    Tensor::stack(outputs, 1)
}

/// Chunked form: within each chunk an inclusive Hillis–Steele scan composes the affine maps
/// (`(M_r, c_r) ∘ (M_l, c_l) = (M_r M_l, M_r c_l + c_r)`) for all chunks at once; then the
/// chunk start states are carried from chunk to chunk, and every output is
/// `prefix_M · y_start + prefix_c`.
///
/// # Shapes
/// - `c`: `[batch, seq, d]`, `y0`: `[batch, d]`
/// - output: `[batch, seq, d]`
fn chunked(transitions: Transitions, c: Tensor<3>, y0: Tensor<2>, chunk_size: usize) -> Tensor<3> {
    let [batch, seq, d] = c.dims();
    let chunks = Chunks::new(batch, seq, d, chunk_size);
    let device = c.device();
    // Padding steps are identities (M = I, c = 0) after the end, so they change no output.
    let c = if chunks.pad > 0 {
        Tensor::cat(vec![c, Tensor::zeros([batch, chunks.pad, d], &device)], 1)
    } else {
        c
    };
    let c = c.reshape([chunks.rows(), chunks.chunk, d]);
    match transitions {
        Transitions::Diagonal(m) => chunked_diagonal(m, c, y0, chunks),
        Transitions::Block(m) => chunked_block(m, c, y0, chunks),
    }
}

/// How [`chunked`] cuts `batch` sequences of `seq` steps of width `d`: `n_chunks` chunks of
/// `chunk` steps each, the last one padded with `pad` identity steps.
#[derive(Debug, Clone, Copy)]
struct Chunks {
    batch: usize,
    seq: usize,
    d: usize,
    chunk: usize,
    n_chunks: usize,
    pad: usize,
}

impl Chunks {
    fn new(batch: usize, seq: usize, d: usize, chunk_size: usize) -> Self {
        let chunk = chunk_size.min(seq);
        let n_chunks = seq.div_ceil(chunk);
        let pad = n_chunks * chunk - seq;
        Self {
            batch,
            seq,
            d,
            chunk,
            n_chunks,
            pad,
        }
    }

    /// Chunks of the whole batch, each a row of the scan.
    fn rows(&self) -> usize {
        self.batch * self.n_chunks
    }

    /// Steps per sequence after padding.
    fn padded(&self) -> usize {
        self.n_chunks * self.chunk
    }
}

/// Inclusive Hillis–Steele scan along dimension 1 (the steps of a chunk) of the affine maps
/// `(pm, pc)`: afterwards step `t` holds the composition of steps `0..=t`. `mul` applies a
/// transition to a transition or to an offset. Each level's three windows of the prefixes are
/// one [`windows_array`] each, whose gradient is assembled once, not three zero tensors of the
/// prefixes' whole size added.
fn prefix_scan<const D: usize>(
    mut pm: Tensor<D>,
    mut pc: Tensor<D>,
    mul: impl Fn(Tensor<D>, Tensor<D>) -> Tensor<D>,
) -> (Tensor<D>, Tensor<D>) {
    let chunk = pm.dims()[1];
    let mut offset = 1;
    while offset < chunk {
        let ranges = [0..chunk - offset, offset..chunk, 0..offset]; // left, right, head
        let [m_left, m_right, m_head] = windows_array(pm, 1, &ranges);
        let [c_left, c_right, c_head] = windows_array(pc, 1, &ranges);
        let new_c = mul(m_right.clone(), c_left) + c_right;
        let new_m = mul(m_right, m_left);
        pm = Tensor::cat(vec![m_head, new_m], 1);
        pc = Tensor::cat(vec![c_head, new_c], 1);
        offset *= 2;
    }
    (pm, pc)
}

/// The last step of every chunk of `[batch, n_chunks, chunk, w]`, as `[batch, n_chunks, 1, w]`:
/// taken in one slice before the loop over chunks, so that the loop slices this small tensor.
/// Sliced per chunk from the whole prefixes instead, each slice's gradient is a zero tensor of
/// the prefixes' whole size (as many as there are chunks, 32 at 256 steps in the CPU's chunks of
/// 8), where this slice's is one.
fn chunk_ends(t: Tensor<4>) -> Tensor<4> {
    let [batch, n_chunks, chunk, w] = t.dims();
    t.narrow(2, chunk - 1, 1).reshape([batch, n_chunks, 1, w])
}

/// [`chunked`] with diagonal transitions `m`: `[batch, seq, d]`; `c`: `[rows, chunk, d]`.
fn chunked_diagonal(m: Tensor<3>, c: Tensor<3>, y0: Tensor<2>, chunks: Chunks) -> Tensor<3> {
    let Chunks {
        batch,
        seq,
        d,
        chunk,
        n_chunks,
        pad,
    } = chunks;
    let m = if pad > 0 {
        Tensor::cat(vec![m, Tensor::ones([batch, pad, d], &c.device())], 1)
    } else {
        m
    };
    let (pm, pc) = prefix_scan(m.reshape([chunks.rows(), chunk, d]), c, |a, b| a * b);
    let pm = pm.reshape([batch, n_chunks, chunk, d]);
    let pc = pc.reshape([batch, n_chunks, chunk, d]);
    // Carry the start state across chunks, from each chunk's last step (see `chunk_ends`).
    let (last_m, last_c) = (chunk_ends(pm.clone()), chunk_ends(pc.clone()));
    let mut starts = Vec::with_capacity(n_chunks);
    let mut y = y0;
    for k in 0..n_chunks {
        starts.push(y.clone());
        let at = |t: &Tensor<4>| -> Tensor<2> { t.clone().narrow(1, k, 1).reshape([batch, d]) };
        y = at(&last_m) * y + at(&last_c);
    }
    let starts: Tensor<4> = Tensor::stack::<3>(starts, 1).reshape([batch, n_chunks, 1, d]);
    let out = pm * starts + pc; // [batch, n_chunks, chunk, d]
    let [out] = split_array(out.reshape([batch, chunks.padded(), d]), 1, &[seq]);
    out
}

/// [`chunked`] with block-diagonal transitions `m`: `[batch, seq, d/b, b, b]`; `c`:
/// `[rows, chunk, d]`.
fn chunked_block(m: Tensor<5>, c: Tensor<3>, y0: Tensor<2>, chunks: Chunks) -> Tensor<3> {
    let Chunks {
        batch,
        seq,
        d,
        chunk,
        n_chunks,
        pad,
    } = chunks;
    let [_, _, n_blocks, b, _] = m.dims();
    let m = if pad > 0 {
        let eye: Tensor<5> = Tensor::<2>::eye(b, &m.device()).reshape([1, 1, 1, b, b]);
        let identities = eye.expand([batch, pad, n_blocks, b, b]);
        Tensor::cat(vec![m, identities], 1)
    } else {
        m
    };
    // Flatten chunk rows and steps into a matmul batch: [rows, chunk, n_blocks, b, b].
    let rows = chunks.rows();
    let pm: Tensor<5> = m.reshape([rows, chunk, n_blocks, b, b]);
    let pc: Tensor<5> = c.reshape([rows, chunk, n_blocks, b, 1]);
    let (pm, pc) = prefix_scan(pm, pc, Tensor::matmul);
    let pm: Tensor<5> = pm.reshape([batch, chunks.padded(), n_blocks, b, b]);
    let pc: Tensor<5> = pc.reshape([batch, chunks.padded(), n_blocks, b, 1]);
    let by_chunk = |t: Tensor<5>, cols: usize| -> Tensor<4> {
        chunk_ends(t.reshape([batch, n_chunks, chunk, n_blocks * b * cols]))
    };
    let (last_m, last_c) = (by_chunk(pm.clone(), b), by_chunk(pc.clone(), 1));
    let mut starts = Vec::with_capacity(n_chunks);
    let mut y: Tensor<4> = y0.reshape([batch, n_blocks, b, 1]);
    for k in 0..n_chunks {
        starts.push(y.clone());
        let at = |t: &Tensor<4>, cols: usize| -> Tensor<4> {
            t.clone()
                .narrow(1, k, 1)
                .reshape([batch, n_blocks, b, cols])
        };
        y = at(&last_m, b).matmul(y) + at(&last_c, 1);
    }
    // starts: [batch, n_chunks, n_blocks, b, 1] → one per step of its chunk.
    let starts: Tensor<5> = Tensor::stack::<5>(starts, 1);
    let starts: Tensor<5> = starts
        .reshape([batch, n_chunks, 1, n_blocks * b, 1])
        .expand([batch, n_chunks, chunk, n_blocks * b, 1])
        .reshape([batch, chunks.padded(), n_blocks, b, 1]);
    let out = product_of(pm, starts, false, false) + pc; // [batch, padded, n_blocks, b, 1]
    let [out] = split_array(out.reshape([batch, chunks.padded(), d]), 1, &[seq]);
    out
}
