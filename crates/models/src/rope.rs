//! Rotary position embeddings (spec B.1) as the transformer's attention applies them to `q`
//! and `k`: the tables of a forward pass ([`RopeTables`]), the rotation on tensors
//! ([`apply_rope`]), and the same rotation and its transpose on a backend's primitives
//! ([`Rotation`]), which the attention operation uses inside its forward and backward passes.

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, ExtensionType};
use burn::prelude::*;

use crate::config::Rope;

/// Base of the rotary frequencies.
pub const ROPE_BASE: f32 = 10_000.0;

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

impl RopeTables {
    /// The tables as the attention operation takes them.
    pub(crate) fn rotation(&self) -> Rotation<Dispatch> {
        Rotation {
            cos: self.cos.clone().into_dispatch(),
            sin: self.sin.clone().into_dispatch(),
            partner: self.partner.clone().into_dispatch(),
        }
    }
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
    Tensor::from_dispatch(tables.rotation().rotate(x.into_dispatch()))
}

/// [`RopeTables`] as one backend's primitives.
#[derive(ExtensionType, Clone, Debug)]
pub struct Rotation<B: Backend> {
    /// `cos`, `[1, 1, seq, head_dim]`.
    pub cos: FloatTensor<B>,
    /// `sin`, `[1, 1, seq, head_dim]`.
    pub sin: FloatTensor<B>,
    /// The partner's signed permutation, `[1, 1, head_dim, head_dim]`.
    pub partner: FloatTensor<B>,
}

impl<B: Backend> Rotation<B> {
    /// `x·cos + (x Π)·sin` ([`apply_rope`]).
    pub fn rotate(&self, x: FloatTensor<B>) -> FloatTensor<B> {
        let rotated = B::float_matmul(x.clone(), self.partner.clone());
        B::float_add(
            B::float_mul(x, self.cos.clone()),
            B::float_mul(rotated, self.sin.clone()),
        )
    }

    /// The transpose of [`Rotation::rotate`]: the gradient of its input from its output's,
    /// `g·cos + (g·sin) Πᵀ`. Nothing of the input is needed: the map is linear.
    pub fn rotate_back(&self, grad: FloatTensor<B>) -> FloatTensor<B> {
        let turned = B::float_matmul(
            B::float_mul(grad.clone(), self.sin.clone()),
            B::float_transpose(self.partner.clone()),
        );
        B::float_add(B::float_mul(grad, self.cos.clone()), turned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    /// `rotate_back` is the gradient autodiff takes through `apply_rope`, which makes it the
    /// transpose of `rotate` (with the reference's tables, which are not a rotation).
    #[test]
    fn rotating_back_is_the_gradient_of_rotating() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        device.seed(41);
        let shape = [2, 3, 7, 8];
        let x = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device).require_grad();
        let g = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let tables = rope_tables(Rope::Reference, 7, 8, &device);
        let grads = (apply_rope(x.clone(), &tables) * g.clone())
            .sum()
            .backward();
        let by_autodiff = x.grad(&grads).expect("tracked");
        let plain = rope_tables(Rope::Reference, 7, 8, &Device::flex());
        let back = plain.rotation().rotate_back(g.inner().into_dispatch());
        let diff: f32 = (by_autodiff - Tensor::from_dispatch(back))
            .abs()
            .max()
            .into_scalar();
        assert!(diff < 1e-6, "{diff}");
    }
}
