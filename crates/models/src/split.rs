//! A tensor cut into side-by-side parts along one dimension, with the backward pass of
//! PyTorch's `split`: the parts' gradients concatenated once.
//!
//! Cut with `narrow`, each part is a slice, and burn's backward pass of a slice builds a zero
//! tensor of the whole sliced shape, writes the part's gradient into it and adds that to the
//! gradient of the whole: for `k` parts, `k` fills, `k` writes and `k − 1` additions, each over
//! the whole tensor. A Mamba-3 layer cuts its input projection into eight parts (at d512 and
//! batch 128 × 256, `[32768, 2152]` floats, 282 MB), a Mamba-2 layer its projection and its
//! convolution's output into three each, and the loss the head's 1,878 logits into five views.
//!
//! [`split`] records one node more: a gathering identity between the whole and the parts.
//! Each part's backward pass leaves its gradient with the gathering node (a list the parts
//! share, not burn's gradient registry), and the gathering node, which burn runs after every
//! part reachable from the loss (it is their only parent, one step shallower), concatenates
//! them once, with zeros only for the parts no gradient reached, and hands that to the whole.
//!
//! The values are those of the slices' backward passes: each element of the whole's gradient
//! is one part's gradient element (burn added zeros to it, which leaves every value as it was,
//! up to the sign of a zero), so the gradients are equal to the bit
//! (`the_parts_gradients_are_the_slices_to_the_bit`).

use std::sync::{Arc, Mutex, PoisonError};

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, Slice, TensorMetadata, backend_extension};
use burn::prelude::*;

/// `tensor` cut along `dim` into parts of the given `widths`, side by side from index 0 (the
/// module docs). The widths must add up to at most the dimension's size.
///
/// # Shapes
/// - `tensor`: any, with `dim` at least `widths`' sum long
/// - output: `tensor`'s shape with `widths[i]` at `dim`, for each part
pub fn split<const D: usize>(tensor: Tensor<D>, dim: usize, widths: &[usize]) -> Vec<Tensor<D>> {
    <Dispatch as SplitOps>::split_parts(tensor.into_dispatch(), dim, widths.to_vec())
        .into_iter()
        .map(Tensor::from_dispatch)
        .collect()
}

/// [`split`] along the last dimension into a fixed number of parts, as an array (what
/// destructuring takes).
///
/// # Shapes
/// - `tensor`: `[…, n]` with `n` at least `widths`' sum
/// - output: `[…, widths[i]]` for each part
pub fn split_last<const D: usize, const K: usize>(
    tensor: Tensor<D>,
    widths: &[usize; K],
) -> [Tensor<D>; K] {
    let parts = split(tensor, D - 1, widths);
    parts
        .try_into()
        .unwrap_or_else(|_| unreachable!("split returns one part per width"))
}

/// The ranges along `dim` that `widths` cut, each as the slice of a tensor of `rank` dims.
fn ranges(rank: usize, dim: usize, widths: &[usize]) -> Vec<Vec<Slice>> {
    let mut start = 0;
    widths
        .iter()
        .map(|&width| {
            let mut slices = vec![Slice::full(); rank];
            slices[dim] = Slice::new(start as isize, Some((start + width) as isize), 1);
            start += width;
            slices
        })
        .collect()
}

/// The parts as slices of `tensor`, the forward pass on every backend.
fn cut<B: Backend>(tensor: FloatTensor<B>, dim: usize, widths: &[usize]) -> Vec<FloatTensor<B>> {
    ranges(tensor.shape().num_dims(), dim, widths)
        .iter()
        .map(|slices| B::float_slice(tensor.clone(), slices))
        .collect()
}

/// The cut as a backend operation: slices on every backend, and a backward pass of one
/// concatenation under autodiff.
#[backend_extension(Flex, Cube: cfg(any(feature = "cuda", feature = "cube-cpu")), Autodiff)]
pub trait SplitOps: Backend {
    /// [`split`].
    fn split_parts(
        tensor: FloatTensor<Self>,
        dim: usize,
        widths: Vec<usize>,
    ) -> Vec<FloatTensor<Self>> {
        cut::<Self>(tensor, dim, &widths)
    }
}

impl SplitOps for burn::backend::Flex {}

#[cfg(any(feature = "cuda", feature = "cube-cpu"))]
impl SplitOps for burn::backend::Cube {}

/// Where the parts' backward passes leave their gradients for the gathering node, by part.
type Shelf<B> = Arc<Mutex<Vec<Option<FloatTensor<B>>>>>;

/// The backward pass of one part: its gradient onto the shelf, at its place.
#[derive(Debug)]
struct PartBackward;

impl<B: Backend> Backward<B, 1> for PartBackward {
    type State = (Shelf<B>, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (shelf, index) = ops.state;
        let mut parts = shelf.lock().unwrap_or_else(PoisonError::into_inner);
        parts[index] = Some(grad);
    }
}

/// What the gathering node knows of the whole: the shape, the dimension cut and the widths.
#[derive(Debug, Clone)]
struct Whole {
    shape: Shape,
    dim: usize,
    widths: Vec<usize>,
}

/// The backward pass of the gathering node: the parts' gradients side by side, zeros where
/// none came, and after the last part zeros up to the whole's size.
#[derive(Debug)]
struct GatherBackward;

impl<B: Backend> Backward<B, 1> for GatherBackward {
    type State = (Shelf<B>, Whole);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [parent] = ops.parents;
        let (shelf, whole) = ops.state;
        let parts = std::mem::take(&mut *shelf.lock().unwrap_or_else(PoisonError::into_inner));
        if let (Some(node), Some(grad)) = (parent, gathered::<B>(parts, &whole)) {
            grads.register::<B>(node.id, grad);
        }
    }
}

/// The whole's gradient from its parts', or `None` where no part has one.
fn gathered<B: Backend>(
    parts: Vec<Option<FloatTensor<B>>>,
    whole: &Whole,
) -> Option<FloatTensor<B>> {
    let like = parts.iter().flatten().next()?;
    let (device, dtype) = (like.device(), like.dtype());
    let zeros = |width: usize| {
        let mut shape = whole.shape.clone();
        shape[whole.dim] = width;
        B::float_zeros(shape, &device, dtype.into())
    };
    let mut pieces: Vec<FloatTensor<B>> = parts
        .into_iter()
        .zip(&whole.widths)
        .map(|(part, &width)| part.unwrap_or_else(|| zeros(width)))
        .collect();
    let rest = whole.shape[whole.dim] - whole.widths.iter().sum::<usize>();
    if rest > 0 {
        pieces.push(zeros(rest));
    }
    Some(match pieces.len() {
        1 => pieces.remove(0),
        _ => B::float_cat(pieces, whole.dim),
    })
}

impl<B: Backend + SplitOps, C: CheckpointStrategy> SplitOps for Autodiff<B, C> {
    fn split_parts(
        tensor: FloatTensor<Self>,
        dim: usize,
        widths: Vec<usize>,
    ) -> Vec<FloatTensor<Self>> {
        let shelf: Shelf<B> = Arc::new(Mutex::new(vec![None; widths.len()]));
        let whole = Whole {
            shape: tensor.shape(),
            dim,
            widths: widths.clone(),
        };
        let node = tensor.node();
        let gather: FloatTensor<Self> = match GatherBackward
            .prepare::<C>([node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((shelf.clone(), whole), tensor.into_primitive()),
            OpsKind::UnTracked(prep) => prep.finish(tensor.into_primitive()),
        };
        let ranges = ranges(gather.shape().num_dims(), dim, &widths);
        ranges
            .iter()
            .enumerate()
            .map(|(index, slices)| {
                let part = B::float_slice(gather.primitive().clone(), slices);
                match PartBackward
                    .prepare::<C>([gather.node()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish((shelf.clone(), index), part),
                    OpsKind::UnTracked(prep) => prep.finish(part),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
        x.into_data().try_to_vec::<f32>().expect("f32")
    }

    /// A loss that uses the parts `used` (weighted, so every element's gradient differs), and
    /// the whole itself too when `whole_too`: the gradient of the whole, with the parts cut by
    /// `cut_by`.
    fn whole_gradient(
        cut_by: &dyn Fn(Tensor<3>) -> Vec<Tensor<3>>,
        x: &Tensor<3>,
        used: &[usize],
        whole_too: bool,
    ) -> (Vec<Vec<f32>>, Vec<f32>) {
        let x = x.clone().detach().require_grad();
        let parts = cut_by(x.clone());
        let forward: Vec<Vec<f32>> = parts.iter().map(|p| values(p.clone().inner())).collect();
        let mut loss = Tensor::<1>::zeros([1], &x.device());
        for &i in used {
            let w =
                Tensor::<3>::random(parts[i].dims(), Distribution::Normal(0.0, 1.0), &x.device());
            loss = loss + (parts[i].clone() * w).sum();
        }
        if whole_too {
            loss = loss + (x.clone() * x.clone()).sum();
        }
        let grads = loss.backward();
        (forward, values(x.grad(&grads).expect("tracked")))
    }

    fn by_narrow(widths: &'static [usize]) -> impl Fn(Tensor<3>) -> Vec<Tensor<3>> {
        move |x: Tensor<3>| {
            let mut start = 0;
            widths
                .iter()
                .map(|&w| {
                    let part = x.clone().narrow(2, start, w);
                    start += w;
                    part
                })
                .collect()
        }
    }

    fn by_split(widths: &'static [usize]) -> impl Fn(Tensor<3>) -> Vec<Tensor<3>> {
        move |x: Tensor<3>| split(x, 2, widths)
    }

    /// The parts and the whole's gradient against the slices', every element to the bit: all
    /// parts used, some (zeros for the others), the whole used beside them, and widths that
    /// leave a tail no part covers.
    #[test]
    fn the_parts_gradients_are_the_slices_to_the_bit() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 17], Distribution::Normal(0.0, 1.0), &device);
        const ALL: &[usize] = &[5, 4, 1, 7];
        const SHORT: &[usize] = &[3, 6];
        for (widths, used, whole_too) in [
            (ALL, &[0, 1, 2, 3][..], false),
            (ALL, &[3, 1][..], false),
            (ALL, &[2][..], true),
            (SHORT, &[0, 1][..], true),
            (SHORT, &[1][..], false),
        ] {
            device.seed(7);
            let want = whole_gradient(&by_narrow(widths), &x, used, whole_too);
            device.seed(7);
            let got = whole_gradient(&by_split(widths), &x, used, whole_too);
            assert_eq!(got.0, want.0, "{widths:?} {used:?}: parts");
            assert_eq!(got.1, want.1, "{widths:?} {used:?}: gradient");
        }
    }

    /// A part cut one column off (the second part starting where the first does) is caught.
    #[test]
    fn a_part_cut_in_the_wrong_place_is_caught() {
        let _rng = crate::rng::rng_lock();
        let device = Device::flex().autodiff();
        let x = Tensor::<3>::random([2, 3, 8], Distribution::Normal(0.0, 1.0), &device);
        let shifted = |x: Tensor<3>| vec![x.clone().narrow(2, 0, 3), x.narrow(2, 2, 5)];
        device.seed(7);
        let want = whole_gradient(&shifted, &x, &[0, 1], false);
        device.seed(7);
        let got = whole_gradient(&by_split(&[3, 5]), &x, &[0, 1], false);
        assert_ne!(got.1, want.1);
    }

    /// Without autodiff, and with an untracked input under autodiff, the parts are the slices.
    #[test]
    fn untracked_parts_are_the_slices() {
        let _rng = crate::rng::rng_lock();
        for device in [Device::flex(), Device::flex().autodiff()] {
            device.seed(3);
            let x = Tensor::<3>::random([2, 2, 9], Distribution::Normal(0.0, 1.0), &device);
            let got: Vec<Vec<f32>> = split(x.clone(), 2, &[4, 5])
                .into_iter()
                .map(values)
                .collect();
            let want: Vec<Vec<f32>> = by_narrow(&[4, 5])(x).into_iter().map(values).collect();
            assert_eq!(got, want);
        }
    }
}
